//! The webhook decodes a workload's spec only as far as the rules read it (`core::model::read`).
//! Here, over every AdmissionReview fixture and every manifest of the shared corpus, the verdict
//! on the object so decoded, findings, messages, warnings and patch, is the verdict on the whole
//! object as `check` decodes it.

use std::path::Path;

use ha_guard::core::config::Config;
use ha_guard::core::judge::{Asks, Review, Verdict, judge};
use ha_guard::core::model::{self, Object, Subject};
use ha_guard::core::view::{Index, View};
use ha_guard::manifest as load;
use ha_guard::server::review;
use serde_json::{Value, json};

use crate::corpus;

/// The verdict on a subject, findings and patch both.
fn verdict(subject: &Subject, view: &dyn View) -> Verdict {
    judge(&Review {
        subject,
        old: None,
        view,
        config: &Config::default(),
        asks: Asks::Both,
        absences: Default::default(),
        today: None,
        progress: None,
        unknown_namespace: Default::default(),
    })
}

/// `object` as the webhook decodes it from a CREATE in `namespace` (a workload in one pass), or
/// from an UPDATE (its spec's text kept for the unchanged check, then decoded).
fn as_admitted(object: &Value, namespace: &str, operation: &str) -> Option<Subject> {
    let (group, version) = match object["apiVersion"].as_str()?.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), object["apiVersion"].as_str()?.to_string()),
    };
    let kind = object["kind"].as_str()?;
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "name": object["metadata"]["name"], "namespace": namespace, "operation": operation,
            "userInfo": {"username": "u"}, "object": object,
            "oldObject": if operation == "UPDATE" { object.clone() } else { Value::Null },
        }
    });
    let request = review::parse(&serde_json::to_vec(&body).unwrap()).expect("a review the wire accepts");
    review::subject(&request).expect("the webhook decodes it")
}

/// Compares the two verdicts on every workload (and PDB and HPA) of `objects`, judged against a
/// view of all of them; returns how many workloads were compared and how many findings and
/// patch operations the verdicts held.
fn compare(what: &str, objects: &[Value], view: &Index) -> (usize, usize, usize) {
    let (mut workloads, mut findings, mut patches) = (0, 0, 0);
    for value in objects {
        let namespace = value["metadata"]["namespace"].as_str().unwrap_or("default");
        let Ok(Some(Object::Subject(whole))) = model::decode(value, namespace) else { continue };
        if !matches!(whole, Subject::Workload(_) | Subject::Pdb(_) | Subject::Hpa(_)) {
            continue;
        }
        let expected = verdict(&whole, view);
        for operation in ["CREATE", "UPDATE"] {
            let admitted = as_admitted(value, namespace, operation).expect("a subject");
            let got = verdict(&admitted, view);
            assert_eq!(got, expected, "{what}: {} judged otherwise when decoded from a {operation}", whole.id());
        }
        if matches!(whole, Subject::Workload(_)) {
            workloads += 1;
        }
        findings += expected.decided.findings.len();
        patches += expected.plan.patch().0.len();
    }
    (workloads, findings, patches)
}

#[test]
fn the_corpus_is_judged_the_same_decoded_as_the_webhook_does() {
    let dir = corpus::corpus();
    let files = corpus::corpus_files(&dir);
    let (mut workloads, mut findings, mut patches) = (0, 0, 0);
    for file in &files {
        let loaded = load::load(&[dir.join(file).to_string_lossy().into_owned()]);
        let objects: Vec<Value> = loaded.documents.into_iter().map(|d| d.value).collect();
        let mut view = Index::new();
        view.set_complete(true);
        for value in &objects {
            let namespace = value["metadata"]["namespace"].as_str().unwrap_or("default");
            if let Ok(Some(object)) = model::decode(value, namespace) {
                view.insert_object(&object);
            }
        }
        let (w, f, p) = compare(file, &objects, &view);
        (workloads, findings, patches) = (workloads + w, findings + f, patches + p);
    }
    // 34 workloads, 25 findings and 9 patch operations on 2026-12-03: a comparison of empty
    // verdicts would show nothing.
    assert!(workloads >= 30, "{workloads} workloads compared in {} files", files.len());
    assert!(findings >= 20 && patches >= 5, "{findings} findings and {patches} patch operations compared");
}

#[test]
fn every_fixture_is_judged_the_same_decoded_as_the_webhook_does() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let view_yaml = std::fs::read_to_string(fixtures.join("view.yaml")).unwrap();
    let mut view = Index::new();
    view.set_complete(true);
    for doc in view_yaml.split("\n---\n") {
        let value: Value = serde_saphyr::from_str(doc).unwrap();
        if let Ok(Some(object)) = model::decode(&value, "default") {
            view.insert_object(&object);
        }
    }
    let mut objects = Vec::new();
    for entry in std::fs::read_dir(&fixtures).unwrap().flatten() {
        let body: Value = match serde_json::from_slice(&std::fs::read(entry.path()).unwrap()) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if body["kind"] != "AdmissionReview" || body["request"]["subResource"].is_string() {
            continue;
        }
        let namespace = body["request"]["namespace"].as_str().unwrap_or("default");
        for object in [&body["request"]["object"], &body["request"]["oldObject"]] {
            if object.is_object() {
                let mut object = object.clone();
                if object["metadata"]["namespace"].as_str().is_none() {
                    object["metadata"]["namespace"] = json!(namespace);
                }
                objects.push(object);
            }
        }
    }
    let (workloads, findings, patches) = compare("tests/fixtures", &objects, &view);
    assert!(workloads >= 20, "{workloads} workloads compared");
    assert!(findings >= 40 && patches >= 10, "{findings} findings and {patches} patch operations compared");
}

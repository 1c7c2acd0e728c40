//! Inputs the fuzzers found (`fuzz/`, run by `scripts/fuzz.sh`), kept as regression tests with
//! the invariant each one broke.

use ha_guard::check::{self, Options};
use ha_guard::core::config::Config;
use ha_guard::core::model;
use ha_guard::core::mutations::MUTATIONS;
use ha_guard::core::view::Index;
use ha_guard::manifest as load;
use ha_guard::server::review::{self, Webhook};
use serde_json::{Value, json};

fn all_mutations_on() -> Config {
    let mut c = Config::default();
    for m in MUTATIONS {
        c.mutations.insert(m.id.to_string(), true);
    }
    c
}

/// `check` with every mutation on: every planned fix applies to its document (the invariant of
/// the `check` fuzz target). Returns how many fixes were planned.
fn fixes_apply(yaml: &str) -> usize {
    let mut loaded = load::Loaded::default();
    load::add_text(&mut loaded, "input.yaml".into(), None, yaml.into(), false);
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let options = Options { complete: false, namespace: "default".into(), config: all_mutations_on() };
    let report = check::check(&loaded, &options);
    for f in &report.fixes {
        let doc = loaded.documents.iter().find(|d| d.origin.document == f.origin.document).expect("its document");
        let mut value = doc.value.clone();
        let ops: Vec<_> = f.changes.iter().map(|c| c.operation.clone()).collect();
        json_patch::patch(&mut value, &ops)
            .unwrap_or_else(|e| panic!("the fix of {} does not apply: {e}: {ops:?}", f.object));
    }
    report.fixes.len()
}

// `inject-default-spread` planned an add at `/spec/template/spec/topologySpreadConstraints` for a
// manifest with no pod template spec (a kustomize patch, a fragment): the patch did not apply,
// and `check --fix` failed on it. Found by both targets (a `template` key mistyped in a fixture).
#[test]
fn default_spread_is_not_planned_without_a_pod_template() {
    let head = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: frontend, namespace: shop}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: frontend}}\n";
    assert_eq!(fixes_apply(head), 0, "no template");
    assert_eq!(fixes_apply(&format!("{head}  template: null\n")), 0, "a null template");
    assert_eq!(
        fixes_apply(&format!("{head}  template: {{metadata: {{labels: {{app: frontend}}}}}}\n")),
        0,
        "a template without spec"
    );
    assert_eq!(
        fixes_apply(&format!("{head}  template:\n    metadata: {{labels: {{app: frontend}}}}\n    spec: null\n")),
        0,
        "a null pod spec"
    );
    // With the pod spec there, the spread is still added (and applies).
    let full = format!(
        "{head}  template:\n    metadata: {{labels: {{app: frontend}}}}\n    spec:\n      containers: [{{name: c, image: nginx}}]\n"
    );
    assert_eq!(fixes_apply(&full), 1);
}

#[test]
fn default_spread_patch_applies_in_the_webhook_too() {
    let object = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "templAte": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
        }
    });
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-4000-8000-00000000f001",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "web",
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {"username": "fuzz"},
            "object": object,
        }
    });
    let req = review::parse(&serde_json::to_vec(&review).unwrap()).expect("parses");
    let view = Index::new();
    let (response, _) = review::review(&req, Webhook::Mutate, &view, &all_mutations_on(), &settled()).expect("answers");
    assert_eq!(response.uid, req.header.uid);
    if let Some(patch) = response.patch {
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut patched: Value = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap_or_else(|e| panic!("the patch does not apply: {e}: {patch:?}"));
    }
    // The subject decodes (the template is filled with a placeholder and reported unchecked).
    assert!(model::decode(&object, "shop").unwrap().is_some());
}

// The `check` target asserted that a finding names only objects of its own namespace; the
// gatekeeper manifest of the shared corpus (a seed) broke it at once: a cluster-scoped webhook
// configuration's `webhook-fail-closed-unavailable` names its Service in gatekeeper-system, as
// it should. The invariant now lets a cluster-scoped object name its backend anywhere.
#[test]
fn a_webhook_configuration_names_its_backend_in_another_namespace() {
    let yaml = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: gk}
webhooks:
  - name: validate.gk.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: Fail
    clientConfig: {service: {namespace: gk-system, name: gk-webhook}}
    rules: [{apiGroups: ["*"], apiVersions: ["*"], resources: ["*"], operations: ["CREATE"]}]
---
apiVersion: v1
kind: Service
metadata: {name: gk-webhook, namespace: gk-system}
spec: {selector: {app: gk}, ports: [{port: 443}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: gk, namespace: gk-system}
spec:
  replicas: 1
  selector: {matchLabels: {app: gk}}
  template:
    metadata: {labels: {app: gk}}
    spec: {containers: [{name: gk, image: gk}]}
"#;
    let mut loaded = load::Loaded::default();
    load::add_text(&mut loaded, "input.yaml".into(), None, yaml.into(), false);
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let options = Options { complete: true, namespace: "default".into(), config: Config::default() };
    let report = check::check(&loaded, &options);
    let on_config = report
        .findings
        .iter()
        .find(|l| l.finding.rule == "webhook-fail-closed-unavailable" && l.finding.object.namespace.is_empty())
        .unwrap_or_else(|| panic!("a finding on the configuration: {:?}", report.findings));
    assert!(
        on_config.finding.related.iter().any(|r| r.namespace == "gk-system" && r.name == "gk-webhook"),
        "it names the Service in gk-system: {:?}",
        on_config.finding.related
    );
    // A namespaced object's finding still names only its namespace or cluster-scoped objects.
    for l in report.findings.iter().filter(|l| !l.finding.object.namespace.is_empty()) {
        let f = &l.finding;
        for r in f.related.iter().chain(std::iter::once(&f.anchor)) {
            assert!(
                r.namespace.is_empty() || r.namespace == f.object.namespace,
                "[{}] on {} names {r}",
                f.rule,
                f.object
            );
        }
    }
}

/// An admission at a settled moment: the view current, the default grace.
fn settled() -> ha_guard::core::view::AdmissionClock {
    ha_guard::core::view::AdmissionClock::current(
        k8s_openapi::jiff::Timestamp::now(),
        ha_guard::core::view::absence::DEFAULT_GRACE,
    )
}

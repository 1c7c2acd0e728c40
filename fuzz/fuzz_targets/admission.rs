//! Fuzz target `admission`: request bytes → `admission::parse` → `review` on both webhooks against
//! a small fixed static view → the response serialized, as the HTTP handler does.
//!
//! Invariants (a panic anywhere is a finding too):
//! - when parse succeeds, the response's uid is the request's uid (in the typed response and in
//!   the serialized review), and the body written canonically decodes to the same request;
//! - every patch of the mutating webhook is a JSON Patch that applies to `request.object` as sent;
//! - reviewing the patched object again yields no patch (the second mutation pass is empty);
//! - nothing of another namespace leaks: the view also holds a namespace `qqvault` whose objects
//!   carry the same labels as `shop`'s; unless the input itself names it, no response mentions it.
//!
//! Each input runs under the shipped configuration and under one with every mutation on.
#![no_main]

mod common;

use std::sync::LazyLock;

use ha_guard::core::config::Config;
use ha_guard::core::model;
use ha_guard::server::review::{self as admission, Webhook};
use ha_guard::core::view::Index;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The cluster the requests arrive in: namespace `shop` with a Deployment (and its PDB and HPA)
/// and a ReadWriteOnce claim, `relaxed` in warn mode, `quiet` in mode off. Names and labels
/// match the tests' fixtures, so that the seeds reach the cross-object rules. Namespace
/// `qqvault` holds look-alikes (same labels, same claim name) that no answer about another
/// namespace may name.
const VIEW: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Namespace
metadata:
  name: relaxed
  labels: {ha-guard.io/mode: warn}
---
apiVersion: v1
kind: Namespace
metadata:
  name: quiet
  labels: {ha-guard.io/mode: "off"}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-rwo, namespace: shop}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app.kubernetes.io/name: web}}
  template:
    metadata: {labels: {app.kubernetes.io/name: web}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app.kubernetes.io/name: web}}}
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop}
spec:
  minAvailable: 1
  selector: {matchLabels: {app.kubernetes.io/name: web}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: shop}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 5
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-rwo, namespace: qqvault}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: qqhidden-web, namespace: qqvault}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/name: web}}
  template:
    metadata: {labels: {app.kubernetes.io/name: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: qqhidden-pdb, namespace: qqvault}
spec:
  minAvailable: 1
  selector: {matchLabels: {app.kubernetes.io/name: web}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: qqhidden-hpa, namespace: qqvault}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 9
"#;

/// What only the objects of namespace `qqvault` are called.
const HIDDEN: &[&[u8]] = &[b"qqvault", b"qqhidden"];

struct Fixture {
    view: Index,
    configs: [(&'static str, Config); 2],
    /// A fixed moment (the fuzzer stays deterministic), the view current, the default grace.
    clock: ha_guard::core::view::AdmissionClock,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let mut loaded = ha_guard::manifest::Loaded::default();
    ha_guard::manifest::add_text(&mut loaded, "view.yaml".into(), None, VIEW.into(), false);
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    let mut view = Index::new();
    view.set_complete(true);
    for d in &loaded.documents {
        view.insert_object(&model::decode(&d.value, "default").expect("decodes").expect("a known kind"));
    }
    let now = ha_guard::core::view::absence::Timestamp::from_second(1_800_000_000).expect("a valid moment");
    let clock = ha_guard::core::view::AdmissionClock::current(now, ha_guard::core::view::absence::DEFAULT_GRACE);
    Fixture { view, configs: common::configs(), clock }
});

fuzz_target!(|data: &[u8]| {
    let fixture = &*FIXTURE;
    let Ok(req) = admission::parse(data) else { return };
    // `parse` decodes straight into the review when it can, and that skips unknown fields without
    // validating them (invalid UTF-8 or a lone surrogate escape in a field nobody reads is let
    // through, while a JSON tree refuses the body). Such bodies keep the uid check only.
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        for webhook in [Webhook::Validate, Webhook::Mutate] {
            if let Ok((response, _)) = admission::review(&req, webhook, &fixture.view, &fixture.configs[0].1, &fixture.clock) {
                assert_eq!(response.uid, req.header.uid);
            }
        }
        return;
    };
    // The same review written canonically (plain whitespace and escapes) decodes to the same
    // request: the fast way and the JSON-tree way agree. Not for a body with a key twice in one
    // object: the tree keeps the last, the fast way may refuse the field (a `TypeMeta` with two
    // `apiVersion`s is dropped), and RFC 8259 leaves the meaning open; the apiserver never sends one.
    // Nor with a number that is not an integer: serde_json reads those to the nearest f64 only
    // within an ulp, so the canonical text of the float read may read back one ulp away.
    if common::unique_keys(data) && !has_float(&body) {
        let canonical = serde_json::to_vec(&body).expect("serializes");
        match admission::parse(&canonical) {
            Ok(again) => {
                assert_eq!(format!("{:?}", again.header), format!("{:?}", req.header), "the canonical body decodes differently");
                assert_eq!(again.object_values(), req.object_values(), "the canonical body's objects decode differently");
            }
            Err(e) => panic!("the canonical body is refused ({e}) but the body itself was accepted"),
        }
    }
    // The input may name the hidden namespace itself (it is then the subject's own); JSON escapes
    // could spell it without the bytes, so compare with the decoded text too.
    let body_text = body.to_string();
    let may_mention_hidden = HIDDEN.iter().any(|h| contains(data, h) || contains(body_text.as_bytes(), h));
    for (name, config) in &fixture.configs {
        for webhook in [Webhook::Validate, Webhook::Mutate] {
            let what = || format!("{name} /{}", webhook.as_str());
            let Ok((response, outcome)) = admission::review(&req, webhook, &fixture.view, config, &fixture.clock) else { continue };
            assert_eq!(response.uid, req.header.uid, "{}: the response's uid", what());
            assert_eq!(outcome.uid, req.header.uid, "{}: the outcome's uid", what());
            let patch = response.patch.clone();
            let review = admission::into_review(response);
            let bytes = serde_json::to_vec(&review).expect("the review serializes");
            let out: Value = serde_json::from_slice(&bytes).expect("the review is JSON");
            assert_eq!(out["response"]["uid"].as_str(), Some(req.header.uid.as_str()), "{}: the serialized uid", what());
            if !may_mention_hidden {
                for h in HIDDEN {
                    assert!(!contains(&bytes, h), "{}: the answer names an object of another namespace: {}", what(), String::from_utf8_lossy(&bytes));
                }
            }
            if webhook == Webhook::Validate {
                assert!(patch.is_none(), "{}: the validating webhook patched", what());
                continue;
            }
            let Some(patch) = patch else { continue };
            let ops: json_patch::Patch = serde_json::from_slice(&patch).expect("the patch is a JSON Patch");
            assert!(!ops.0.is_empty(), "{}: an empty patch was sent", what());
            assert!(ops.0.iter().all(|op| matches!(op, json_patch::PatchOperation::Add(_))), "{}: not add-only: {ops:?}", what());
            let object = &body["request"]["object"];
            let patched = common::apply(object, &ops.0, &what);
            // The apiserver sends the patched object through the webhook again on reinvocation:
            // nothing more to add.
            let mut again = body.clone();
            again["request"]["object"] = patched.clone();
            let again_bytes = serde_json::to_vec(&again).expect("serializes");
            let req2 = admission::parse(&again_bytes)
                .unwrap_or_else(|e| panic!("{}: the patched request no longer parses: {e}\npatched: {patched}", what()));
            let (response2, _) = admission::review(&req2, Webhook::Mutate, &fixture.view, config, &fixture.clock)
                .unwrap_or_else(|e| panic!("{}: the patched request is refused: {e}\npatched: {patched}", what()));
            if let Some(p) = response2.patch {
                panic!(
                    "{}: the second mutation pass is not empty: {}\nfirst patch: {}\npatched: {patched}",
                    what(),
                    String::from_utf8_lossy(&p),
                    String::from_utf8_lossy(&patch)
                );
            }
        }
    }
});

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(a) => a.iter().any(has_float),
        Value::Object(o) => o.values().any(has_float),
        _ => false,
    }
}

//! Property tests: (1) the disruption arithmetic against a reference model written here with
//! floating point; (2) with every mutation on, for random Deployments/StatefulSets and PDBs, every
//! planned patch applies with `json_patch`, only adds, never puts a key in both `labelSelector` and
//! `matchLabelKeys`, and a second pass on the patched (re-decoded) object plans nothing.

use std::collections::{BTreeMap, BTreeSet};

use crate::core::config::Config;
use crate::core::model::arith::{self, Budget};
use crate::core::model::{self, Object, Subject};
use crate::core::mutations;
use crate::core::view::Index;
use json_patch::PatchOperation;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// (1) The disruption arithmetic

/// A budget value as written: an integer, or a percentage string.
#[derive(Clone, Debug)]
enum Written {
    Int(i32),
    Percent(i32),
}

impl Written {
    fn int_or_string(&self) -> IntOrString {
        match self {
            Written::Int(i) => IntOrString::Int(*i),
            Written::Percent(p) => IntOrString::String(format!("{p}%")),
        }
    }
}

fn written() -> impl Strategy<Value = Written> {
    prop_oneof![(0..60i32).prop_map(Written::Int), (0..=100i32).prop_map(Written::Percent)]
}

/// The reference: DESIGN.md §3 read literally (every pod healthy, each workload's scale its pods),
/// with `f64::ceil` for the percentages.
fn reference(min_available: bool, w: &Written, expected: i32) -> (i32, i32, bool) {
    let e = f64::from(expected);
    // p × e is an exact integer in f64, and one division by 100 rounds correctly; (p / 100) × e
    // would not (0.28 × 25 = 7.000000000000001, whose ceiling is 8).
    let percent_of = |p: i32| (f64::from(p) * e / 100.0).ceil();
    let desired = match (min_available, w) {
        (true, Written::Int(n)) => f64::from(*n),
        (true, Written::Percent(p)) => percent_of(*p),
        (false, Written::Int(m)) => (e - f64::from(*m)).max(0.0),
        (false, Written::Percent(p)) => (e - percent_of(*p)).max(0.0),
    };
    // Every pod healthy; nothing is allowed below zero, nor when nothing is expected.
    let allowed = if expected <= 0 { 0.0 } else { (e - desired).max(0.0) };
    (desired as i32, allowed as i32, expected >= 1 && allowed <= 0.0)
}

/// Found by `disruption_matches_the_reference` when its reference model computed (p / 100) × e in
/// floating point: 28% of 25 is exactly 7, so maxUnavailable 28% over 25 leaves 18 desired healthy.
#[test]
fn a_percentage_that_is_exact_is_not_rounded_up_past_it() {
    let budget = Budget::MaxUnavailable(IntOrString::String("28%".into()));
    let d = arith::disruption(&budget, 25).expect("a valid budget");
    assert_eq!((d.desired_healthy, d.allowed), (18, 7));
    assert_eq!(reference(false, &Written::Percent(28), 25), (18, 7, false));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn disruption_matches_the_reference(min_available in any::<bool>(), w in written(), expected in 0..50i32) {
        let budget = if min_available {
            Budget::MinAvailable(w.int_or_string())
        } else {
            Budget::MaxUnavailable(w.int_or_string())
        };
        let d = arith::disruption(&budget, expected).expect("a valid budget");
        let (desired, allowed, blocks) = reference(min_available, &w, expected);
        prop_assert_eq!(d.pods, expected);
        prop_assert_eq!(d.expected, expected);
        prop_assert_eq!(d.desired_healthy, desired, "{:?} over {}", budget, expected);
        prop_assert_eq!(d.allowed, allowed, "{:?} over {}", budget, expected);
        prop_assert_eq!(d.blocks(), blocks, "{:?} over {}", budget, expected);
    }

    #[test]
    fn percent_rounding_matches_the_reference(p in 0..=100i32, total in 0..1000i32) {
        let exact = f64::from(p) * f64::from(total) / 100.0;
        prop_assert_eq!(arith::percent_up(p, total), exact.ceil() as i32);
        prop_assert_eq!(arith::percent_down(p, total), exact.floor() as i32);
    }

    #[test]
    fn malformed_percentages_are_errors(s in "[0-9]{0,3}[a-z ]{1,3}|[a-z]{1,4}%|%[0-9]{1,2}", expected in 0..50i32) {
        let budget = Budget::MinAvailable(IntOrString::String(s.clone()));
        prop_assert!(arith::disruption(&budget, expected).is_err(), "{:?} was accepted", s);
    }
}

// ---------------------------------------------------------------------------------------------
// (2) Mutations: apply cleanly, add only, idempotent

/// Label keys including the ones a JSON pointer must escape, and the one matchLabelKeys injects.
const KEYS: &[&str] = &["app", "app.kubernetes.io/name", "a~b", "x/y~z", "~1", "tier", "pod-template-hash"];
const VALUES: &[&str] = &["web", "x", "a-b"];
const TOPOLOGY_KEYS: &[&str] = &["kubernetes.io/hostname", "topology.kubernetes.io/zone", "example.com/rack~1"];

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(KEYS).prop_map(str::to_string)
}

fn labels(max: usize) -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(key(), prop::sample::select(VALUES).prop_map(str::to_string), 0..=max)
}

fn expression() -> impl Strategy<Value = Value> {
    (key(), prop::sample::select(&["In", "NotIn", "Exists", "DoesNotExist"][..]), prop::sample::select(VALUES))
        .prop_map(|(k, op, v)| match op {
            "In" | "NotIn" => json!({"key": k, "operator": op, "values": [v]}),
            _ => json!({"key": k, "operator": op}),
        })
}

/// A label selector: matchLabels and/or matchExpressions, possibly `{}`.
fn selector() -> impl Strategy<Value = Value> {
    (prop::option::of(labels(3)), prop::option::of(prop::collection::vec(expression(), 0..=2))).prop_map(|(l, e)| {
        let mut s = Map::new();
        if let Some(l) = l {
            s.insert("matchLabels".into(), json!(l));
        }
        if let Some(e) = e {
            s.insert("matchExpressions".into(), json!(e));
        }
        Value::Object(s)
    })
}

fn spread() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(TOPOLOGY_KEYS),
        prop::sample::select(&["DoNotSchedule", "ScheduleAnyway"][..]),
        1..3i32,
        prop::option::of(selector()),
        prop::option::of(prop::collection::btree_set(key(), 0..=3)),
    )
        .prop_map(|(topology_key, when, skew, sel, keys)| {
            let mut s = json!({"maxSkew": skew, "topologyKey": topology_key, "whenUnsatisfiable": when});
            if let Some(sel) = sel {
                s["labelSelector"] = sel;
            }
            if let Some(keys) = keys {
                s["matchLabelKeys"] = json!(keys);
            }
            s
        })
}

/// A Deployment or StatefulSet `web`: random replicas (or unset), selector (or none: a kustomize
/// base), pod labels that include the selector's matchLabels, and spreads (absent, `[]`, or some).
fn workload() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(&["Deployment", "StatefulSet"][..]),
        prop::option::of(0..5i32),
        prop::option::of(selector()),
        labels(3),
        prop::option::of(prop::collection::vec(spread(), 0..4)),
    )
        .prop_map(|(kind, replicas, sel, extra, spreads)| {
            let mut pod_labels = extra;
            if let Some(ml) = sel.as_ref().and_then(|s| s.get("matchLabels")).and_then(Value::as_object) {
                for (k, v) in ml {
                    pod_labels.insert(k.clone(), v.as_str().unwrap().to_string());
                }
            }
            let mut pod = json!({"containers": [{"name": "c", "image": "nginx"}]});
            if let Some(spreads) = spreads {
                pod["topologySpreadConstraints"] = json!(spreads);
            }
            let mut spec = json!({"template": {"metadata": {"labels": pod_labels}, "spec": pod}});
            if let Some(r) = replicas {
                spec["replicas"] = json!(r);
            }
            if let Some(sel) = sel {
                spec["selector"] = sel;
            }
            json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
        })
}

fn pdb() -> impl Strategy<Value = Value> {
    (
        prop::option::of(selector()),
        prop::option::of(prop::sample::select(&["AlwaysAllow", "IfHealthyBudget"][..])),
        prop::option::of(written()),
    )
        .prop_map(|(sel, policy, budget)| {
            let mut spec = json!({});
            if let Some(sel) = sel {
                spec["selector"] = sel;
            }
            if let Some(p) = policy {
                spec["unhealthyPodEvictionPolicy"] = json!(p);
            }
            match budget {
                Some(Written::Int(i)) => spec["minAvailable"] = json!(i),
                Some(Written::Percent(p)) => spec["maxUnavailable"] = json!(format!("{p}%")),
                None => {}
            }
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb", "namespace": "default"}, "spec": spec})
        })
}

/// An HPA over Deployment `web` with a random floor, or none.
fn hpa_view() -> impl Strategy<Value = Option<Value>> {
    prop::option::of((1..5i32).prop_map(|min| {
        json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": min, "maxReplicas": 10}
        })
    }))
}

fn all_on() -> Config {
    let mut c = Config::default();
    for m in mutations::MUTATIONS {
        c.mutations.insert(m.id.to_string(), true);
    }
    c
}

fn decode(v: &Value) -> Subject {
    match model::decode(v, "default").expect("decodes").expect("a known kind") {
        Object::Subject(s) => s,
        other => panic!("not a subject: {other:?}"),
    }
}

/// Plans, applies, checks add-only, re-decodes and plans again. Returns the patched object.
fn mutate_and_check(object: &Value, view: &Index) -> Result<Value, TestCaseError> {
    let config = all_on();
    let plan = mutations::plan(&decode(object), view, &config);
    for op in plan.operations() {
        let PatchOperation::Add(add) = &op else {
            return Err(TestCaseError::fail(format!("not an add: {op:?}")));
        };
        let path = add.path.as_str();
        let exists = object.pointer(path).is_some_and(|v| !v.is_null());
        prop_assert!(path.ends_with("/-") || !exists, "rewrites {} in {}", path, object);
    }
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &plan.operations())
        .map_err(|e| TestCaseError::fail(format!("{:?} does not apply to {object}: {e}", plan.operations())))?;
    let again = mutations::plan(&decode(&patched), view, &config);
    prop_assert!(again.is_empty(), "second pass plans {:?} on {}", again.operations(), patched);
    Ok(patched)
}

/// Keys a selector has requirements on.
fn selector_keys(s: &Value) -> BTreeSet<String> {
    let mut keys: BTreeSet<String> =
        s.get("matchLabels").and_then(Value::as_object).into_iter().flatten().map(|(k, _)| k.clone()).collect();
    for e in s.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        keys.insert(e["key"].as_str().unwrap().to_string());
    }
    keys
}

fn spreads(v: &Value) -> Vec<Value> {
    v.pointer("/spec/template/spec/topologySpreadConstraints").and_then(Value::as_array).cloned().unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, .. ProptestConfig::default() })]

    #[test]
    fn workload_mutations_apply_and_are_idempotent(w in workload(), hpa in hpa_view()) {
        let mut view = Index::new();
        if let Some(h) = &hpa {
            view.insert_object(&model::decode(h, "default").unwrap().unwrap());
        }
        let patched = mutate_and_check(&w, &view)?;

        let before = spreads(&w);
        let after = spreads(&patched);
        prop_assert!(after.len() >= before.len());
        for (i, s) in after.iter().enumerate() {
            let touched = before.get(i) != Some(s);
            if !touched {
                continue;
            }
            // Nothing the user set changed: the old spread is a subset of the new one.
            if let Some(old) = before.get(i) {
                for (k, v) in old.as_object().unwrap() {
                    prop_assert_eq!(&s[k], v, "{} of spread {} was rewritten", k, i);
                }
            }
            // A spread the mutations touched never lists a key in both places (the API refuses it).
            if let (Some(sel), Some(keys)) = (s.get("labelSelector"), s.get("matchLabelKeys").and_then(Value::as_array)) {
                let sel_keys = selector_keys(sel);
                for k in keys {
                    prop_assert!(!sel_keys.contains(k.as_str().unwrap()), "{} in both, spread {}: {}", k, i, s);
                }
            }
            // An injected selector is never {} (it would count every pod in the namespace).
            if let Some(sel) = s.get("labelSelector")
                && before.get(i).and_then(|o| o.get("labelSelector")).is_none()
            {
                prop_assert!(!selector_keys(sel).is_empty(), "injected empty selector in spread {}", i);
            }
        }
        // Patched objects still decode as the same kind.
        let s = decode(&patched);
        prop_assert_eq!(s.id(), decode(&w).id());
    }

    #[test]
    fn pdb_mutations_apply_and_are_idempotent(p in pdb()) {
        let patched = mutate_and_check(&p, &Index::new())?;
        let policy = p["spec"].get("unhealthyPodEvictionPolicy").cloned().unwrap_or(json!("AlwaysAllow"));
        prop_assert_eq!(&patched["spec"]["unhealthyPodEvictionPolicy"], &policy);
        let mut rest = patched.clone();
        let mut orig = p.clone();
        rest["spec"].as_object_mut().unwrap().remove("unhealthyPodEvictionPolicy");
        orig["spec"].as_object_mut().unwrap().remove("unhealthyPodEvictionPolicy");
        prop_assert_eq!(rest, orig, "only the policy is added");
    }
}

//! The mutations (DESIGN.md §2, Mutations): each planned patch is applied with `json_patch` to the
//! object's JSON, the result is checked, and planning again on the patched object must yield
//! nothing (idempotence). Only missing fields are added; label keys with `/` and `~` round-trip.

use crate::core::config::Config;
use crate::core::model::{self, Object, Subject};
use crate::core::mutations::{self, Plan};
use crate::core::view::Index;
use json_patch::PatchOperation;
use json_patch::jsonptr::PointerBuf;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Helpers

fn decode(value: &Value) -> Subject {
    match model::decode(value, "default").expect("decodes").expect("a known kind") {
        Object::Subject(s) => s,
        other => panic!("not a subject: {other:?}"),
    }
}

fn view_of(objects: &[Value]) -> Index {
    let mut index = Index::new();
    for o in objects {
        index.insert_object(&model::decode(o, "default").unwrap().unwrap());
    }
    index
}

fn plan_in(object: &Value, view: &Index, config: &Config) -> Plan {
    mutations::plan(&decode(object), view, config)
}

fn plan(object: &Value, config: &Config) -> Plan {
    plan_in(object, &Index::new(), config)
}

/// Applies `plan` to `object`, then checks that planning again on the result (decoded afresh)
/// yields nothing. Returns the patched object.
fn apply_in(object: &Value, plan: &Plan, view: &Index, config: &Config) -> Value {
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &plan.operations())
        .unwrap_or_else(|e| panic!("patch {:?} does not apply: {e}", plan.operations()));
    let again = plan_in(&patched, view, config);
    assert!(again.is_empty(), "not idempotent: a second pass plans {:?}", again.operations());
    patched
}

fn apply(object: &Value, plan: &Plan, config: &Config) -> Value {
    apply_in(object, plan, &Index::new(), config)
}

fn paths(plan: &Plan) -> Vec<String> {
    plan.changes.iter().map(|c| c.path()).collect()
}

fn with(ids: &[&str]) -> Config {
    let mut c = Config::default();
    for id in ids {
        c.mutations.insert(id.to_string(), true);
    }
    c
}

fn without(ids: &[&str]) -> Config {
    let mut c = Config::default();
    for id in ids {
        c.mutations.insert(id.to_string(), false);
    }
    c
}

fn all_on() -> Config {
    with(&[
        "inject-spread-selector",
        "inject-unhealthy-pod-eviction-policy",
        "inject-default-spread",
        "inject-match-label-keys",
    ])
}

/// Label keys that must be escaped in a JSON pointer.
fn own_selector() -> Value {
    json!({"matchLabels": {"app.kubernetes.io/name": "web", "a~b": "x"}})
}

fn pod_labels() -> Value {
    json!({"app.kubernetes.io/name": "web", "a~b": "x", "tier": "front"})
}

fn workload(kind: &str, replicas: i32, spreads: Option<Value>) -> Value {
    let mut pod = json!({"containers": [{"name": "c", "image": "nginx"}]});
    if let Some(s) = spreads {
        pod["topologySpreadConstraints"] = s;
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": own_selector(),
            "template": {"metadata": {"labels": pod_labels()}, "spec": pod}
        }
    })
}

fn deployment(replicas: i32, spreads: Option<Value>) -> Value {
    workload("Deployment", replicas, spreads)
}

fn spread(key: &str, when: &str) -> Value {
    json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when})
}

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

fn spreads_of(v: &Value) -> &Vec<Value> {
    v.pointer("/spec/template/spec/topologySpreadConstraints").and_then(Value::as_array).expect("spreads")
}

fn pdb(policy: Option<&str>) -> Value {
    let mut p = json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "pdb", "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": own_selector()}
    });
    if let Some(policy) = policy {
        p["spec"]["unhealthyPodEvictionPolicy"] = json!(policy);
    }
    p
}

fn hpa(min: i32) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": min,
            "maxReplicas": 10
        }
    })
}

// ---------------------------------------------------------------------------------------------
// JSON pointer escaping

#[test]
fn pointer_tokens_escape_tilde_and_slash() {
    let p = PointerBuf::from_tokens(["metadata", "labels", "app.kubernetes.io/name"]);
    assert_eq!(p.as_str(), "/metadata/labels/app.kubernetes.io~1name");
    let p = PointerBuf::from_tokens(["metadata", "labels", "a~b"]);
    assert_eq!(p.as_str(), "/metadata/labels/a~0b");
    // `~1` in a key is not a slash: the `~` is escaped first, so it reads back literally.
    let p = PointerBuf::from_tokens(["x/y~z", "~1"]);
    assert_eq!(p.as_str(), "/x~1y~0z/~01");
}

#[test]
fn escaped_pointers_land_on_the_literal_keys() {
    let mut doc = json!({"metadata": {"labels": {}}});
    let ops: Vec<PatchOperation> = ["app.kubernetes.io/name", "a~b", "~1"]
        .iter()
        .map(|k| {
            PatchOperation::Add(json_patch::AddOperation {
                path: PointerBuf::from_tokens(["metadata", "labels", k]),
                value: json!(k),
            })
        })
        .collect();
    json_patch::patch(&mut doc, &ops).unwrap();
    assert_eq!(
        doc,
        json!({"metadata": {"labels": {"app.kubernetes.io/name": "app.kubernetes.io/name", "a~b": "a~b", "~1": "~1"}}})
    );
}

// ---------------------------------------------------------------------------------------------
// inject-spread-selector

#[test]
fn spread_selector_fills_each_missing_selector() {
    let with_sel = {
        let mut s = spread(ZONE, "ScheduleAnyway");
        s["labelSelector"] = json!({"matchLabels": {"tier": "front"}});
        s
    };
    let d =
        deployment(3, Some(json!([spread(ZONE, "DoNotSchedule"), with_sel.clone(), spread(HOST, "ScheduleAnyway")])));
    let c = Config::default();
    let p = plan(&d, &c);
    assert_eq!(
        paths(&p),
        vec![
            "/spec/template/spec/topologySpreadConstraints/0/labelSelector",
            "/spec/template/spec/topologySpreadConstraints/2/labelSelector"
        ]
    );
    assert_eq!(p.applied(), vec!["inject-spread-selector"]);
    let patched = apply(&d, &p, &c);
    let s = spreads_of(&patched);
    assert_eq!(s[0]["labelSelector"], own_selector(), "keys with / and ~ round-trip");
    assert_eq!(s[1], with_sel, "a selector the user set is never rewritten");
    assert_eq!(s[2]["labelSelector"], own_selector());
    assert_eq!(s[2]["topologyKey"], HOST);
}

#[test]
fn spread_selector_leaves_out_match_label_keys() {
    let mut s = spread(HOST, "DoNotSchedule");
    s["matchLabelKeys"] = json!(["a~b", "pod-template-hash"]);
    let d = deployment(3, Some(json!([s])));
    let c = Config::default();
    let p = plan(&d, &c);
    let patched = apply(&d, &p, &c);
    assert_eq!(spreads_of(&patched)[0]["labelSelector"], json!({"matchLabels": {"app.kubernetes.io/name": "web"}}));
    assert_eq!(spreads_of(&patched)[0]["matchLabelKeys"], json!(["a~b", "pod-template-hash"]));
}

#[test]
fn spread_selector_leaves_out_match_label_keys_from_expressions() {
    let mut d = deployment(
        3,
        Some(
            json!([{"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule", "matchLabelKeys": ["tier"]}]),
        ),
    );
    d["spec"]["selector"] = json!({
        "matchLabels": {"app.kubernetes.io/name": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}, {"key": "a~b", "operator": "Exists"}]
    });
    let c = Config::default();
    let patched = apply(&d, &plan(&d, &c), &c);
    assert_eq!(
        spreads_of(&patched)[0]["labelSelector"],
        json!({"matchLabels": {"app.kubernetes.io/name": "web"}, "matchExpressions": [{"key": "a~b", "operator": "Exists"}]})
    );
}

#[test]
fn spread_selector_not_injected_when_match_label_keys_take_every_key() {
    // What would be left is {}: it would count every pod in the namespace. Leave it to the rule.
    let mut s = spread(HOST, "DoNotSchedule");
    s["matchLabelKeys"] = json!(["a~b", "app.kubernetes.io/name"]);
    let d = deployment(3, Some(json!([s])));
    assert!(plan(&d, &Config::default()).is_empty());
}

#[test]
fn spread_selector_nothing_when_every_constraint_has_one() {
    let mut a = spread(HOST, "DoNotSchedule");
    a["labelSelector"] = own_selector();
    let mut b = spread(ZONE, "ScheduleAnyway");
    b["labelSelector"] = json!({});
    let d = deployment(3, Some(json!([a, b])));
    assert!(plan(&d, &Config::default()).is_empty(), "an empty selector {{}} is the user's, not missing");
}

#[test]
fn spread_selector_nothing_without_a_workload_selector() {
    let mut d = deployment(3, Some(json!([spread(HOST, "DoNotSchedule")])));
    d["spec"].as_object_mut().unwrap().remove("selector");
    assert!(plan(&d, &Config::default()).is_empty(), "a kustomize base: nothing safe to inject");
    d["spec"]["selector"] = json!({});
    assert!(plan(&d, &Config::default()).is_empty(), "an empty workload selector is not injected");
}

#[test]
fn spread_selector_on_a_statefulset() {
    let s = workload("StatefulSet", 3, Some(json!([spread(HOST, "DoNotSchedule")])));
    let c = Config::default();
    let patched = apply(&s, &plan(&s, &c), &c);
    assert_eq!(spreads_of(&patched)[0]["labelSelector"], own_selector());
}

#[test]
fn spread_selector_can_be_switched_off() {
    let d = deployment(3, Some(json!([spread(HOST, "DoNotSchedule")])));
    assert!(plan(&d, &without(&["inject-spread-selector"])).is_empty());
}

// ---------------------------------------------------------------------------------------------
// inject-unhealthy-pod-eviction-policy

#[test]
fn eviction_policy_added_when_absent() {
    let p = pdb(None);
    let c = Config::default();
    let planned = plan(&p, &c);
    assert_eq!(paths(&planned), vec!["/spec/unhealthyPodEvictionPolicy"]);
    assert_eq!(planned.applied(), vec!["inject-unhealthy-pod-eviction-policy"]);
    let patched = apply(&p, &planned, &c);
    assert_eq!(patched["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(patched["spec"]["selector"], own_selector());
}

#[test]
fn eviction_policy_never_rewritten() {
    for policy in ["IfHealthyBudget", "AlwaysAllow"] {
        assert!(plan(&pdb(Some(policy)), &Config::default()).is_empty(), "{policy} is the user's choice");
    }
}

#[test]
fn eviction_policy_can_be_switched_off() {
    assert!(plan(&pdb(None), &without(&["inject-unhealthy-pod-eviction-policy"])).is_empty());
}

// ---------------------------------------------------------------------------------------------
// inject-default-spread

fn hostname_spread() -> Value {
    json!({"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": own_selector()})
}

#[test]
fn default_spread_off_by_default() {
    assert!(plan(&deployment(3, None), &Config::default()).is_empty());
}

#[test]
fn default_spread_added_at_floor_2() {
    let c = with(&["inject-default-spread"]);
    let d = deployment(2, None);
    let p = plan(&d, &c);
    assert_eq!(paths(&p), vec!["/spec/template/spec/topologySpreadConstraints"]);
    assert_eq!(p.applied(), vec!["inject-default-spread"]);
    let patched = apply(&d, &p, &c);
    assert_eq!(spreads_of(&patched), &vec![hostname_spread()]);
}

#[test]
fn default_spread_appended_after_a_zone_spread() {
    let c = with(&["inject-default-spread"]);
    let mut zone = spread(ZONE, "DoNotSchedule");
    zone["labelSelector"] = own_selector();
    let d = deployment(3, Some(json!([zone.clone()])));
    let p = plan(&d, &c);
    assert_eq!(paths(&p), vec!["/spec/template/spec/topologySpreadConstraints/-"]);
    let patched = apply(&d, &p, &c);
    assert_eq!(spreads_of(&patched), &vec![zone, hostname_spread()]);
}

#[test]
fn default_spread_appended_to_an_empty_list() {
    let c = with(&["inject-default-spread"]);
    let d = deployment(3, Some(json!([])));
    let patched = apply(&d, &plan(&d, &c), &c);
    assert_eq!(spreads_of(&patched), &vec![hostname_spread()]);
}

#[test]
fn default_spread_not_added_when_a_hostname_spread_exists() {
    let c = with(&["inject-default-spread"]);
    let mut host = spread(HOST, "DoNotSchedule");
    host["labelSelector"] = json!({"matchLabels": {"tier": "front"}});
    assert!(plan(&deployment(3, Some(json!([host]))), &c).is_empty());
}

#[test]
fn default_spread_needs_a_floor_above_1() {
    let c = with(&["inject-default-spread"]);
    assert!(plan(&deployment(1, None), &c).is_empty());
    assert!(plan(&deployment(0, None), &c).is_empty());
    // An HPA floor of 1 under replicas 3: one replica may be all there is.
    assert!(plan_in(&deployment(3, None), &view_of(&[hpa(1)]), &c).is_empty());
}

#[test]
fn default_spread_counts_the_hpa_floor() {
    let c = with(&["inject-default-spread"]);
    let v = view_of(&[hpa(2)]);
    let d = deployment(1, None);
    let patched = apply_in(&d, &plan_in(&d, &v, &c), &v, &c);
    assert_eq!(spreads_of(&patched), &vec![hostname_spread()]);
}

#[test]
fn default_spread_with_a_spread_missing_its_selector() {
    let c = with(&["inject-default-spread"]);
    let d = deployment(3, Some(json!([spread(ZONE, "DoNotSchedule")])));
    let p = plan(&d, &c);
    assert_eq!(
        paths(&p),
        vec![
            "/spec/template/spec/topologySpreadConstraints/0/labelSelector",
            "/spec/template/spec/topologySpreadConstraints/-"
        ]
    );
    let patched = apply(&d, &p, &c);
    assert_eq!(spreads_of(&patched)[0]["labelSelector"], own_selector());
    assert_eq!(spreads_of(&patched)[1], hostname_spread());
}

// ---------------------------------------------------------------------------------------------
// inject-match-label-keys

fn selected(key: &str) -> Value {
    let mut s = spread(key, "DoNotSchedule");
    s["labelSelector"] = own_selector();
    s
}

#[test]
fn match_label_keys_off_by_default() {
    assert!(plan(&deployment(3, Some(json!([selected(HOST)]))), &Config::default()).is_empty());
}

#[test]
fn match_label_keys_added_to_deployment_spreads_with_a_selector() {
    let c = with(&["inject-match-label-keys"]);
    let mut keyed = selected(ZONE);
    keyed["matchLabelKeys"] = json!(["tier"]);
    let d = deployment(3, Some(json!([selected(HOST), keyed.clone()])));
    let p = plan(&d, &c);
    assert_eq!(paths(&p), vec!["/spec/template/spec/topologySpreadConstraints/0/matchLabelKeys"]);
    assert_eq!(p.applied(), vec!["inject-match-label-keys"]);
    let patched = apply(&d, &p, &c);
    assert_eq!(spreads_of(&patched)[0]["matchLabelKeys"], json!(["pod-template-hash"]));
    assert_eq!(spreads_of(&patched)[1], keyed, "existing matchLabelKeys are never rewritten");
}

#[test]
fn match_label_keys_with_an_empty_list_is_left_alone() {
    let c = with(&["inject-match-label-keys"]);
    let mut s = selected(HOST);
    s["matchLabelKeys"] = json!([]);
    assert!(plan(&deployment(3, Some(json!([s]))), &c).is_empty());
}

#[test]
fn match_label_keys_follow_an_injected_selector() {
    let c = with(&["inject-match-label-keys"]);
    let d = deployment(3, Some(json!([spread(HOST, "DoNotSchedule"), spread(ZONE, "DoNotSchedule")])));
    let p = plan(&d, &c);
    assert_eq!(p.changes.len(), 4);
    assert_eq!(p.applied(), vec!["inject-spread-selector", "inject-match-label-keys"], "each mutation once");
    let patched = apply(&d, &p, &c);
    for s in spreads_of(&patched) {
        assert_eq!(s["labelSelector"], own_selector());
        assert_eq!(s["matchLabelKeys"], json!(["pod-template-hash"]));
    }
}

#[test]
fn match_label_keys_need_a_selector() {
    // Without inject-spread-selector the spread keeps no selector; matchLabelKeys alone is refused.
    let c = {
        let mut c = with(&["inject-match-label-keys"]);
        c.mutations.insert("inject-spread-selector".into(), false);
        c
    };
    assert!(plan(&deployment(3, Some(json!([spread(HOST, "DoNotSchedule")]))), &c).is_empty());
}

#[test]
fn match_label_keys_not_on_statefulsets() {
    let c = with(&["inject-match-label-keys"]);
    assert!(plan(&workload("StatefulSet", 3, Some(json!([selected(HOST)]))), &c).is_empty());
    // ...nor in the default spread added to a StatefulSet.
    let c = with(&["inject-match-label-keys", "inject-default-spread"]);
    let s = workload("StatefulSet", 3, None);
    let patched = apply(&s, &plan(&s, &c), &c);
    assert_eq!(spreads_of(&patched), &vec![hostname_spread()]);
}

#[test]
fn match_label_keys_in_the_default_spread_of_a_deployment() {
    let c = with(&["inject-match-label-keys", "inject-default-spread"]);
    let d = deployment(3, None);
    let patched = apply(&d, &plan(&d, &c), &c);
    let mut expected = hostname_spread();
    expected["matchLabelKeys"] = json!(["pod-template-hash"]);
    assert_eq!(spreads_of(&patched), &vec![expected]);
}

#[test]
fn match_label_keys_not_added_when_the_selector_names_pod_template_hash() {
    // The API refuses a key in both labelSelector and matchLabelKeys.
    let c = with(&["inject-match-label-keys"]);
    let mut s = spread(HOST, "DoNotSchedule");
    s["labelSelector"] = json!({"matchLabels": {"pod-template-hash": "abc"}});
    assert!(plan(&deployment(3, Some(json!([s]))), &c).is_empty());
    let mut s = spread(HOST, "DoNotSchedule");
    s["labelSelector"] = json!({"matchExpressions": [{"key": "pod-template-hash", "operator": "Exists"}]});
    assert!(plan(&deployment(3, Some(json!([s]))), &c).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Everything at once

#[test]
fn all_mutations_together_apply_and_are_idempotent() {
    let c = all_on();
    let mut keyed = spread(ZONE, "ScheduleAnyway");
    keyed["matchLabelKeys"] = json!(["a~b"]);
    let d = deployment(4, Some(json!([keyed])));
    let p = plan(&d, &c);
    assert_eq!(p.applied(), vec!["inject-spread-selector", "inject-default-spread"]);
    let patched = apply(&d, &p, &c);
    let s = spreads_of(&patched);
    assert_eq!(s[0]["labelSelector"], json!({"matchLabels": {"app.kubernetes.io/name": "web"}}));
    assert_eq!(s[0]["matchLabelKeys"], json!(["a~b"]), "the user's matchLabelKeys stay");
    assert_eq!(s[1]["topologyKey"], HOST);
    assert_eq!(s[1]["matchLabelKeys"], json!(["pod-template-hash"]));
    // HPAs and nothing-to-do PDBs plan nothing.
    assert!(plan(&hpa(2), &c).is_empty());
    let p = pdb(None);
    assert_eq!(apply(&p, &plan(&p, &c), &c)["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
}

//! The PDB family: `pdb-blocks-eviction` (DESIGN.md §3 arithmetic, found from every side),
//! `pdb-overlap`, `pdb-selector-empty`, `pdb-selects-nothing`, `pdb-missing`,
//! `pdb-unhealthy-eviction-policy`.

use crate::core::config::Config;
use crate::core::finding::{Decision, Finding};
use crate::core::model::{Kind, ObjectRef, Subject};
use crate::core::rules;
use crate::core::testing::{findings, of_rule, view};
use rstest::rstest;

// ---------------------------------------------------------------------------------------------
// Manifest builders

/// A Deployment `name` with pod labels `app: <app>` (its selector is the same).
/// `replicas: None` leaves the field out (the apiserver defaults it to 1).
fn deploy(name: &str, app: &str, replicas: Option<i32>) -> String {
    let replicas = replicas.map(|r| format!("  replicas: {r}\n")).unwrap_or_default();
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
{replicas}  selector:
    matchLabels:
      app: {app}
  template:
    metadata:
      labels:
        app: {app}
    spec:
      containers:
        - name: c
          image: nginx
"
    )
}

/// A PDB `name` over `app: <app>`; `budget` is the YAML of the budget fields, e.g. `minAvailable: 1`.
fn pdb(name: &str, app: &str, budget: &str) -> String {
    format!(
        "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {name}
spec:
  {budget}
  selector:
    matchLabels:
      app: {app}
"
    )
}

/// An HPA `name` over Deployment `target`; `min: None` leaves `minReplicas` out.
fn hpa(name: &str, target: &str, min: Option<i32>, max: i32) -> String {
    let min = min.map(|m| format!("  minReplicas: {m}\n")).unwrap_or_default();
    format!(
        "apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {name}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {target}
{min}  maxReplicas: {max}
"
    )
}

fn docs(parts: &[String]) -> String {
    parts.join("---\n")
}

fn dep_ref(name: &str) -> ObjectRef {
    ObjectRef::new(Kind::Deployment, "default", name)
}
fn pdb_ref(name: &str) -> ObjectRef {
    ObjectRef::new(Kind::PodDisruptionBudget, "default", name)
}
fn hpa_ref(name: &str) -> ObjectRef {
    ObjectRef::new(Kind::HorizontalPodAutoscaler, "default", name)
}

fn one<'a>(fs: &'a [Finding], rule: &str) -> &'a Finding {
    let found = of_rule(fs, rule);
    assert_eq!(found.len(), 1, "expected exactly one {rule} finding, got {fs:#?}");
    found[0]
}

fn none(fs: &[Finding], rule: &str) {
    assert!(of_rule(fs, rule).is_empty(), "expected no {rule} finding, got {fs:#?}");
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for p in parts {
        assert!(message.contains(p), "message lacks {p:?}:\n{message}");
    }
}

// ---------------------------------------------------------------------------------------------
// pdb-blocks-eviction: the arithmetic, evaluated on the PDB write

/// One row: the view (workloads and HPAs), the PDB's budget, and the expected outcome:
/// `Some((required healthy, expected pods))` for a deny, `None` for no finding.
#[rstest]
#[case::min1_of_1(vec![deploy("web", "web", Some(1))], "minAvailable: 1", Some((1, 1)))]
#[case::min1_of_default_replicas(vec![deploy("web", "web", None)], "minAvailable: 1", Some((1, 1)))]
#[case::min1_of_2(vec![deploy("web", "web", Some(2))], "minAvailable: 1", None)]
#[case::min2_of_2(vec![deploy("web", "web", Some(2))], "minAvailable: 2", Some((2, 2)))]
#[case::min3_of_2_requires_more_than_runs(vec![deploy("web", "web", Some(2))], "minAvailable: 3", Some((3, 2)))]
#[case::min50pct_of_1_rounds_up(vec![deploy("web", "web", Some(1))], "minAvailable: \"50%\"", Some((1, 1)))]
#[case::min50pct_of_2(vec![deploy("web", "web", Some(2))], "minAvailable: \"50%\"", None)]
#[case::knative_80pct_over_hpa_floor_1(
    vec![deploy("activator", "web", Some(3)), hpa("activator", "activator", Some(1), 20)],
    "minAvailable: \"80%\"",
    Some((1, 1))
)]
#[case::min80pct_of_5(vec![deploy("web", "web", Some(5))], "minAvailable: \"80%\"", None)]
#[case::max10pct_of_3_allows_1(vec![deploy("web", "web", Some(3))], "maxUnavailable: \"10%\"", None)]
#[case::max1_of_1(vec![deploy("web", "web", Some(1))], "maxUnavailable: 1", None)]
#[case::replicas0_contributes_nothing(vec![deploy("web", "web", Some(0))], "minAvailable: 1", None)]
#[case::two_deployments_floors_sum_to_2(
    vec![deploy("web", "web", Some(1)), deploy("web-canary", "web", Some(1))],
    "minAvailable: 1",
    None
)]
#[case::two_deployments_floors_sum_to_2_min2(
    vec![deploy("web", "web", Some(1)), deploy("web-canary", "web", Some(1))],
    "minAvailable: 2",
    Some((2, 2))
)]
#[case::hpa_floor_2_over_replicas_1(
    vec![deploy("web", "web", Some(1)), hpa("web", "web", Some(2), 5)],
    "minAvailable: 1",
    None
)]
#[case::hpa_min_unset_is_1(
    vec![deploy("web", "web", Some(4)), hpa("web", "web", None, 5)],
    "minAvailable: 1",
    Some((1, 1))
)]
#[case::scaled_to_0_beside_one_at_1(
    vec![deploy("web", "web", Some(1)), deploy("web-old", "web", Some(0))],
    "minAvailable: 1",
    Some((1, 1))
)]
fn blocks_eviction_arithmetic(#[case] workloads: Vec<String>, #[case] budget: &str, #[case] deny: Option<(i32, i32)>) {
    let fs = findings(&pdb("pdb", "web", budget), &docs(&workloads), false);
    match deny {
        None => none(&fs, "pdb-blocks-eviction"),
        Some((required, expected)) => {
            let f = one(&fs, "pdb-blocks-eviction");
            assert_eq!(f.action, Decision::Deny);
            assert!(f.from_view, "too tight for the workloads it covers: found with the view");
            let field = if budget.starts_with("max") { "spec.maxUnavailable" } else { "spec.minAvailable" };
            assert_eq!(f.path, field);
            assert_eq!(f.object, pdb_ref("pdb"));
            assert_eq!(f.anchor, pdb_ref("pdb"));
            let plural = if expected == 1 { "pod" } else { "pods" };
            let m = f.message();
            assert_mentions(
                &m,
                &[
                    "PodDisruptionBudget default/pdb",
                    budget.split(':').next().unwrap(),
                    &format!("at their floor of {expected} {plural}"),
                    &format!("requires {required} healthy"),
                    "allows 0 disruptions",
                    "kubectl drain hangs",
                    "Fix:",
                    "maxUnavailable: 1",
                ],
            );
        }
    }
}

/// A budget that allows no disruption by itself, whatever it covers: found on the PDB alone, the
/// same finding (path, text) with the workloads it covers in the view, over a workload scaled to
/// 0, and with nothing in the view: what its admission policy gives (DESIGN.md §4 "In the
/// apiserver as well"). The covered workloads are its related objects, not its text.
#[rstest]
#[case::max0(
    "maxUnavailable: 0",
    "spec.maxUnavailable",
    "(maxUnavailable 0) allows 0 disruptions whatever it covers: no pod may be unavailable"
)]
#[case::max0pct(
    "maxUnavailable: \"0%\"",
    "spec.maxUnavailable",
    "(maxUnavailable 0%) allows 0 disruptions whatever it covers"
)]
#[case::min100pct(
    "minAvailable: \"100%\"",
    "spec.minAvailable",
    "(minAvailable 100%) allows 0 disruptions whatever it covers: every pod must stay healthy"
)]
fn blocks_by_itself(#[case] budget: &str, #[case] field: &str, #[case] says: &str) {
    let alone = findings(&pdb("pdb", "web", budget), "", false);
    let f = one(&alone, "pdb-blocks-eviction");
    assert_eq!((f.action, f.path.as_str(), f.from_view), (Decision::Deny, field, false));
    assert!(f.related.is_empty(), "{:?}", f.related);
    assert_mentions(
        &f.message(),
        &[
            &format!("PodDisruptionBudget default/pdb {says}"),
            "kubectl drain hangs",
            "Fix: use maxUnavailable: 1 (it always leaves one pod to evict), or a minAvailable below the replicas it covers",
        ],
    );
    for view in [deploy("web", "web", Some(4)), deploy("web", "web", Some(0)), deploy("api", "api", Some(4))] {
        let fs = findings(&pdb("pdb", "web", budget), &view, false);
        let g = one(&fs, "pdb-blocks-eviction");
        assert_eq!((&g.path, &g.what, &g.fix, g.from_view), (&f.path, &f.what, &f.fix, false), "{view}");
        assert!(!g.what.contains("Deployment"), "names no workload: {}", g.what);
    }
    let covered = findings(&pdb("pdb", "web", budget), &deploy("web", "web", Some(4)), false);
    assert_eq!(one(&covered, "pdb-blocks-eviction").related, vec![dep_ref("web")]);
    // Boundary: one more allowed and it does not block by itself (the arithmetic decides: 99 %
    // of 100 replicas leaves one).
    let looser = match budget {
        "maxUnavailable: 0" => "maxUnavailable: 1",
        "maxUnavailable: \"0%\"" => "maxUnavailable: \"1%\"",
        _ => "minAvailable: \"99%\"",
    };
    none(&findings(&pdb("pdb", "web", looser), &deploy("web", "web", Some(100)), false), "pdb-blocks-eviction");
    none(&findings(&pdb("pdb", "web", looser), "", false), "pdb-blocks-eviction");
}

/// The arithmetic over the workloads' floors needs the view: a finding of the view, on the PDB's
/// write and on the workload's.
#[test]
fn too_tight_for_the_floor_is_found_with_the_view() {
    let fs = findings(&pdb("pdb", "web", "minAvailable: 1"), &deploy("web", "web", Some(1)), false);
    assert!(one(&fs, "pdb-blocks-eviction").from_view);
    none(&findings(&pdb("pdb", "web", "minAvailable: 1"), "", false), "pdb-blocks-eviction");
    let fs = findings(&deploy("web", "web", Some(1)), &pdb("pdb", "web", "maxUnavailable: 0"), false);
    assert!(one(&fs, "pdb-blocks-eviction").from_view, "from the workload's side, the PDB is the view's");
}

#[test]
fn blocks_message_names_the_workload_its_replicas_and_hpa_floor() {
    let view_yaml = docs(&[deploy("activator", "web", Some(3)), hpa("activator-hpa", "activator", Some(1), 20)]);
    let fs = findings(&pdb("pdb", "web", "minAvailable: \"80%\""), &view_yaml, false);
    let f = one(&fs, "pdb-blocks-eviction");
    assert_mentions(
        &f.message(),
        &[
            "minAvailable 80%",
            "Deployment activator (replicas 3, HPA activator-hpa min 1 max 20) floor 1",
            "requires 1 healthy and allows 0 disruptions",
            // A single-pod floor: the fix offers both ways out.
            "use maxUnavailable: 1",
            "HPA minReplicas 2",
        ],
    );
    assert_eq!(f.related, vec![dep_ref("activator"), hpa_ref("activator-hpa")]);
}

#[test]
fn blocks_message_above_one_pod_suggests_a_lower_min_available() {
    let fs = findings(&pdb("pdb", "web", "minAvailable: 3"), &deploy("web", "web", Some(3)), false);
    let f = one(&fs, "pdb-blocks-eviction");
    assert_mentions(
        &f.message(),
        &[
            "Deployment web (replicas 3) floor 3",
            "at their floor of 3 pods it requires 3 healthy and allows 0 disruptions",
            "at least one of the 3 pods may be evicted",
            "minAvailable at most 2",
        ],
    );
}

#[test]
fn blocks_message_leaves_out_workloads_scaled_to_zero_but_relates_them() {
    let view_yaml = docs(&[deploy("web", "web", Some(1)), deploy("web-old", "web", Some(0))]);
    let fs = findings(&pdb("pdb", "web", "minAvailable: 1"), &view_yaml, false);
    let f = one(&fs, "pdb-blocks-eviction");
    assert!(f.what.contains("Deployment web (replicas 1) floor 1"), "{}", f.what);
    assert!(!f.what.contains("web-old"), "a workload at 0 contributes nothing: {}", f.what);
    assert_eq!(f.related, vec![dep_ref("web"), dep_ref("web-old")], "both are covered by the PDB");
}

#[test]
fn pdb_in_another_namespace_covers_nothing() {
    let other = deploy("web", "web", Some(1)).replace("name: web\n", "name: web\n  namespace: other\n");
    let fs = findings(&pdb("pdb", "web", "minAvailable: 1"), &other, false);
    none(&fs, "pdb-blocks-eviction");
}

#[test]
fn match_expressions_select_the_covered_workloads() {
    let p = "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pdb}
spec:
  minAvailable: 1
  selector:
    matchExpressions:
      - {key: app, operator: In, values: [web, api]}
";
    // web (1) + api (1) = 2 pods, minAvailable 1 allows 1: fine.
    let both = docs(&[deploy("web", "web", Some(1)), deploy("api", "api", Some(1))]);
    none(&findings(p, &both, false), "pdb-blocks-eviction");
    // Only web is in the view: 1 pod, blocked.
    let f = findings(p, &deploy("web", "web", Some(1)), false);
    assert_mentions(
        &one(&f, "pdb-blocks-eviction").what,
        &["Deployment web (replicas 1) floor 1", "requires 1 healthy"],
    );
    // NotIn excludes web: nothing covered.
    let not_in = p.replace("operator: In", "operator: NotIn");
    none(&findings(&not_in, &deploy("web", "web", Some(1)), false), "pdb-blocks-eviction");
}

// ---------------------------------------------------------------------------------------------
// pdb-blocks-eviction: cross-object, from every side

#[test]
fn found_on_the_pdb_write_with_max_unavailable_path() {
    let fs = findings(&pdb("pdb", "web", "maxUnavailable: 0"), &deploy("web", "web", Some(2)), false);
    let f = one(&fs, "pdb-blocks-eviction");
    assert_eq!(f.path, "spec.maxUnavailable");
    assert_eq!(f.related, vec![dep_ref("web")]);
    assert_mentions(&f.message(), &["(maxUnavailable 0) allows 0 disruptions", "Fix: use maxUnavailable: 1"]);
}

#[test]
fn found_on_the_deployment_write_with_the_pdb_in_the_view() {
    let fs = findings(&deploy("web", "web", Some(1)), &pdb("pdb", "web", "minAvailable: 1"), false);
    let f = one(&fs, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Deny);
    assert_eq!(f.object, dep_ref("web"));
    assert_eq!(f.path, "spec.replicas");
    assert_eq!(f.anchor, pdb_ref("pdb"));
    assert_eq!(f.related, vec![pdb_ref("pdb")], "names the PDB, not the subject itself");
    assert_mentions(
        &f.message(),
        &["PodDisruptionBudget default/pdb (minAvailable 1)", "Deployment web (replicas 1) floor 1", "allows 0"],
    );
    // Two replicas: allowed 1.
    let fs = findings(&deploy("web", "web", Some(2)), &pdb("pdb", "web", "minAvailable: 1"), false);
    none(&fs, "pdb-blocks-eviction");
}

#[test]
fn found_on_the_hpa_write_with_both_in_the_view() {
    let view_yaml = docs(&[deploy("web", "web", Some(3)), pdb("pdb", "web", "minAvailable: 1")]);
    let fs = findings(&hpa("web", "web", Some(1), 5), &view_yaml, false);
    let f = one(&fs, "pdb-blocks-eviction");
    assert_eq!(f.object, hpa_ref("web"));
    assert_eq!(f.path, "spec.minReplicas");
    assert_eq!(f.anchor, pdb_ref("pdb"));
    assert!(f.related.contains(&pdb_ref("pdb")) && f.related.contains(&dep_ref("web")), "{:?}", f.related);
    assert!(!f.related.contains(&hpa_ref("web")), "the subject is not related to itself");
    assert_mentions(&f.what, &["Deployment web (replicas 3, HPA web min 1 max 5) floor 1", "requires 1 healthy"]);

    // The same HPA with a floor of 2 leaves one pod to evict.
    none(&findings(&hpa("web", "web", Some(2), 5), &view_yaml, false), "pdb-blocks-eviction");
}

#[test]
fn hpa_write_overrides_the_old_hpa_in_the_view() {
    // The cache still holds the HPA with minReplicas 2; the update lowers it to 1.
    let view_yaml =
        docs(&[deploy("web", "web", Some(3)), pdb("pdb", "web", "minAvailable: 1"), hpa("web", "web", Some(2), 5)]);
    let f = findings(&hpa("web", "web", Some(1), 5), &view_yaml, false);
    assert_mentions(&one(&f, "pdb-blocks-eviction").what, &["HPA web min 1 max 5) floor 1"]);
    // ...and the other way round: raising it clears the finding.
    let view_yaml =
        docs(&[deploy("web", "web", Some(3)), pdb("pdb", "web", "minAvailable: 1"), hpa("web", "web", Some(1), 5)]);
    none(&findings(&hpa("web", "web", Some(2), 5), &view_yaml, false), "pdb-blocks-eviction");
}

fn scale(name: &str, replicas: i32) -> Subject {
    Subject::Scale { target: dep_ref(name), replicas }
}

#[test]
fn found_on_a_scale_write() {
    let v = view(&docs(&[deploy("web", "web", Some(3)), pdb("pdb", "web", "minAvailable: 1")]), false);
    let fs = rules::evaluate(&scale("web", 1), &v, &Config::default()).findings;
    let f = one(&fs, "pdb-blocks-eviction");
    assert_eq!(f.object, dep_ref("web"));
    assert_eq!(f.path, "spec.replicas");
    assert_eq!(f.anchor, pdb_ref("pdb"));
    assert_mentions(&f.what, &["Deployment web (replicas 1) floor 1", "requires 1 healthy and allows 0"]);

    let fs = rules::evaluate(&scale("web", 2), &v, &Config::default()).findings;
    none(&fs, "pdb-blocks-eviction");
    // Scaling to 0 takes the workload out of the budget: nothing is blocked.
    let fs = rules::evaluate(&scale("web", 0), &v, &Config::default()).findings;
    none(&fs, "pdb-blocks-eviction");
}

#[test]
fn scale_write_of_a_workload_not_in_the_view_is_unchecked() {
    let v = view(&pdb("pdb", "web", "minAvailable: 1"), false);
    let eval = rules::evaluate(&scale("web", 1), &v, &Config::default());
    none(&eval.findings, "pdb-blocks-eviction");
    assert!(eval.unchecked.iter().any(|u| u.contains("Deployment default/web") && u.contains("not in the view")));
}

#[test]
fn deployment_update_is_evaluated_with_its_new_replicas() {
    // The view (the cache) still holds replicas 3; the UPDATE sets 1.
    let view_yaml = docs(&[deploy("web", "web", Some(3)), pdb("pdb", "web", "minAvailable: 1")]);
    let fs = findings(&deploy("web", "web", Some(1)), &view_yaml, false);
    let f = one(&fs, "pdb-blocks-eviction");
    assert_mentions(&f.what, &["Deployment web (replicas 1) floor 1", "at their floor of 1 pod"]);

    // The other way round: the cache holds 1, the update scales to 3.
    let view_yaml = docs(&[deploy("web", "web", Some(1)), pdb("pdb", "web", "minAvailable: 1")]);
    none(&findings(&deploy("web", "web", Some(3)), &view_yaml, false), "pdb-blocks-eviction");

    // Same object in cache and update: counted once (1 pod), not twice (which would allow 1).
    let fs = findings(&deploy("web", "web", Some(1)), &view_yaml, false);
    assert_mentions(&one(&fs, "pdb-blocks-eviction").what, &["at their floor of 1 pod"]);
}

#[test]
fn deployment_update_that_changes_labels_leaves_the_pdb() {
    // Cached with app=web (covered); the update relabels to app=web2: no longer covered.
    let view_yaml = docs(&[deploy("web", "web", Some(1)), pdb("pdb", "web", "minAvailable: 1")]);
    let fs = findings(&deploy("web", "web2", Some(1)), &view_yaml, false);
    none(&fs, "pdb-blocks-eviction");
}

// ---------------------------------------------------------------------------------------------
// pdb-overlap

#[test]
fn overlap_denied_on_the_deployment_write_naming_both() {
    let view_yaml = docs(&[pdb("a", "web", "maxUnavailable: 1"), pdb("b", "web", "maxUnavailable: 1")]);
    let fs = findings(&deploy("web", "web", Some(3)), &view_yaml, false);
    let f = one(&fs, "pdb-overlap");
    assert_eq!(f.action, Decision::Deny);
    assert_eq!(f.path, "spec.template.metadata.labels");
    assert_eq!(f.related, vec![pdb_ref("a"), pdb_ref("b")]);
    assert_mentions(
        &f.message(),
        &[
            "Deployment default/web",
            "covered by 2 PodDisruptionBudgets (a, b)",
            "refuses every eviction",
            "Fix:",
            "one PDB per workload",
        ],
    );
}

#[test]
fn overlap_denied_on_the_second_pdb_write() {
    let view_yaml = docs(&[deploy("web", "web", Some(3)), pdb("a", "web", "maxUnavailable: 1")]);
    let fs = findings(&pdb("b", "web", "maxUnavailable: 1"), &view_yaml, false);
    let f = one(&fs, "pdb-overlap");
    assert_eq!(f.action, Decision::Deny);
    assert_eq!(f.object, pdb_ref("b"));
    assert_eq!(f.path, "spec.selector");
    assert_eq!(f.anchor, dep_ref("web"), "reported once, on the workload");
    assert_eq!(f.related, vec![dep_ref("web"), pdb_ref("a")]);
    assert_mentions(
        &f.message(),
        &[
            "PodDisruptionBudget default/b (selector app=web)",
            "Deployment default/web",
            "PodDisruptionBudget a also covers",
            "Fix:",
        ],
    );
}

#[test]
fn overlap_of_an_empty_selector_with_a_specific_one() {
    let empty = "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: everything}
spec:
  maxUnavailable: 1
  selector: {}
";
    let view_yaml = docs(&[deploy("web", "web", Some(3)), pdb("a", "web", "maxUnavailable: 1")]);
    let fs = findings(empty, &view_yaml, false);
    assert_eq!(one(&fs, "pdb-overlap").related, vec![dep_ref("web"), pdb_ref("a")]);
    one(&fs, "pdb-selector-empty");
}

#[test]
fn pdbs_over_different_workloads_do_not_overlap() {
    let view_yaml =
        docs(&[deploy("web", "web", Some(3)), deploy("api", "api", Some(3)), pdb("a", "web", "maxUnavailable: 1")]);
    none(&findings(&pdb("b", "api", "maxUnavailable: 1"), &view_yaml, false), "pdb-overlap");
    let view_yaml = docs(&[pdb("a", "web", "maxUnavailable: 1"), pdb("b", "api", "maxUnavailable: 1")]);
    none(&findings(&deploy("web", "web", Some(3)), &view_yaml, false), "pdb-overlap");
}

#[test]
fn a_pdb_update_does_not_overlap_with_its_own_cached_version() {
    let view_yaml = docs(&[deploy("web", "web", Some(3)), pdb("a", "web", "maxUnavailable: 1")]);
    none(&findings(&pdb("a", "web", "maxUnavailable: 2"), &view_yaml, false), "pdb-overlap");
}

// ---------------------------------------------------------------------------------------------
// pdb-selector-empty, pdb-selects-nothing

fn pdb_with_selector(selector_yaml: &str) -> String {
    format!(
        "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: pdb
spec:
  maxUnavailable: 1
{selector_yaml}"
    )
}

#[rstest]
#[case::empty_object("  selector: {}\n")]
#[case::empty_match_labels("  selector:\n    matchLabels: {}\n")]
fn empty_selector_warns(#[case] sel: &str) {
    let fs = findings(&pdb_with_selector(sel), &deploy("web", "web", Some(3)), false);
    let f = one(&fs, "pdb-selector-empty");
    assert_eq!(f.action, Decision::Warn);
    assert_eq!(f.path, "spec.selector");
    assert_mentions(&f.message(), &["empty selector {}", "every pod in namespace default", "Fix:", "spec.selector"]);
    none(&fs, "pdb-selects-nothing");
}

#[test]
fn specific_selector_is_not_empty() {
    let fs = findings(&pdb("pdb", "web", "maxUnavailable: 1"), &deploy("web", "web", Some(3)), true);
    none(&fs, "pdb-selector-empty");
    none(&fs, "pdb-selects-nothing");
}

#[rstest]
#[case::absent_incomplete("", false)]
#[case::absent_complete("", true)]
#[case::null_incomplete("  selector: null\n", false)]
#[case::null_complete("  selector: null\n", true)]
fn null_selector_warns_on_any_view(#[case] sel: &str, #[case] complete: bool) {
    let fs = findings(&pdb_with_selector(sel), &deploy("web", "web", Some(3)), complete);
    let f = one(&fs, "pdb-selects-nothing");
    assert_eq!(f.action, Decision::Warn);
    assert_eq!(f.path, "spec.selector");
    assert_mentions(
        &f.message(),
        &["PodDisruptionBudget default/pdb has no selector", "matches no pod", "Fix:", "set spec.selector"],
    );
    none(&fs, "pdb-selector-empty");
    none(&fs, "pdb-blocks-eviction");
}

#[test]
fn selector_matching_no_workload_warns_only_on_a_complete_view() {
    let subject = pdb("pdb", "wbe", "maxUnavailable: 1");
    let view_yaml = deploy("web", "web", Some(3));
    let fs = findings(&subject, &view_yaml, true);
    let f = one(&fs, "pdb-selects-nothing");
    assert_eq!(f.path, "spec.selector");
    assert_mentions(&f.message(), &["selects app=wbe", "no Deployment or StatefulSet in namespace default", "Fix:"]);
    none(&findings(&subject, &view_yaml, false), "pdb-selects-nothing");
    // A match: silent on the complete view too.
    none(&findings(&pdb("pdb", "web", "maxUnavailable: 1"), &view_yaml, true), "pdb-selects-nothing");
}

#[test]
fn selector_matching_a_statefulset_selects_something() {
    let sts = deploy("db", "db", Some(3)).replace("kind: Deployment", "kind: StatefulSet");
    none(&findings(&pdb("pdb", "db", "maxUnavailable: 1"), &sts, true), "pdb-selects-nothing");
    // And a StatefulSet at one replica is blocked like a Deployment.
    let sts1 = deploy("db", "db", Some(1)).replace("kind: Deployment", "kind: StatefulSet");
    let fs = findings(&pdb("pdb", "db", "minAvailable: 1"), &sts1, false);
    assert_mentions(&one(&fs, "pdb-blocks-eviction").what, &["StatefulSet db (replicas 1) floor 1"]);
}

// ---------------------------------------------------------------------------------------------
// pdb-missing

#[test]
fn missing_pdb_warns_on_a_complete_view_at_floor_2() {
    let fs = findings(&deploy("web", "web", Some(2)), "", true);
    let f = one(&fs, "pdb-missing");
    assert_eq!(f.action, Decision::Warn);
    assert_eq!(f.path, "spec.replicas");
    assert_mentions(
        &f.message(),
        &[
            "Deployment web (replicas 2)",
            "at least 2 replicas",
            "no PodDisruptionBudget covers it",
            "Fix:",
            "maxUnavailable: 1",
            "selector app=web",
        ],
    );
    none(&findings(&deploy("web", "web", Some(2)), "", false), "pdb-missing");
}

#[test]
fn missing_pdb_needs_a_floor_above_1() {
    none(&findings(&deploy("web", "web", Some(1)), "", true), "pdb-missing");
    none(&findings(&deploy("web", "web", None), "", true), "pdb-missing");
    // replicas 3 but an HPA floor of 1: one replica may be all there is.
    none(&findings(&deploy("web", "web", Some(3)), &hpa("web", "web", Some(1), 5), true), "pdb-missing");
}

#[test]
fn missing_pdb_counts_the_hpa_floor() {
    let fs = findings(&deploy("web", "web", Some(1)), &hpa("web", "web", Some(2), 5), true);
    assert_mentions(&one(&fs, "pdb-missing").what, &["HPA web min 2 max 5", "at least 2 replicas"]);
    // From the HPA's write too, at minReplicas, anchored on the workload.
    let fs = findings(&hpa("web", "web", Some(2), 5), &deploy("web", "web", Some(1)), true);
    let f = one(&fs, "pdb-missing");
    assert_eq!(f.path, "spec.minReplicas");
    assert_eq!(f.anchor, dep_ref("web"));
}

#[test]
fn covered_workload_is_not_missing_a_pdb() {
    none(&findings(&deploy("web", "web", Some(2)), &pdb("pdb", "web", "maxUnavailable: 1"), true), "pdb-missing");
}

// ---------------------------------------------------------------------------------------------
// pdb-unhealthy-eviction-policy

#[test]
fn if_healthy_budget_warns() {
    let subject = pdb("pdb", "web", "maxUnavailable: 1\n  unhealthyPodEvictionPolicy: IfHealthyBudget");
    let fs = findings(&subject, &deploy("web", "web", Some(3)), false);
    let f = one(&fs, "pdb-unhealthy-eviction-policy");
    assert_eq!(f.action, Decision::Warn);
    assert_eq!(f.path, "spec.unhealthyPodEvictionPolicy");
    assert_mentions(&f.message(), &["IfHealthyBudget", "drain hangs", "Fix:", "AlwaysAllow"]);
}

#[rstest]
#[case::always_allow("maxUnavailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow")]
#[case::unset("maxUnavailable: 1")]
fn other_policies_do_not_warn(#[case] budget: &str) {
    let fs = findings(&pdb("pdb", "web", budget), &deploy("web", "web", Some(3)), false);
    none(&fs, "pdb-unhealthy-eviction-policy");
}

/// A manifest reported as not checked (a kustomize patch without its selector) gets no
/// pdb-missing, even as the whole namespace; a whole one does (issue 16).
#[test]
fn a_fragment_gets_no_pdb_missing_and_no_fix_suggests_an_empty_selector() {
    let patch = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: metrics}\nspec:\n  replicas: 2\n";
    let f = findings(patch, "", true);
    assert!(of_rule(&f, "pdb-missing").is_empty(), "{f:#?}");
    let whole = deploy("web", "web", Some(2));
    let f = findings(&whole, "", true);
    let missing = of_rule(&f, "pdb-missing");
    assert_eq!(missing.len(), 1, "{f:#?}");
    assert!(missing[0].fix.contains("selector app=web") && !missing[0].fix.contains("{}"), "{}", missing[0].fix);
}

// ---------------------------------------------------------------------------------------------
// A budget with neither field (the disruption controller expects nothing and allows nothing)

/// `getExpectedPodCount` sets no expected count for a PDB with neither `minAvailable` nor
/// `maxUnavailable`, and `updatePdbStatus` allows 0 disruptions when nothing is expected: such a
/// PDB refuses every eviction of the pods it selects, whatever their number.
#[rstest]
#[case::one_replica(1)]
#[case::three_replicas(3)]
#[case::ten_replicas(10)]
fn a_budget_with_neither_field_blocks_every_eviction(#[case] replicas: i32) {
    let unset = pdb("web", "web", "unhealthyPodEvictionPolicy: AlwaysAllow");
    let f = findings(&unset, &deploy("web", "web", Some(replicas)), false);
    let blocks = of_rule(&f, "pdb-blocks-eviction");
    assert_eq!(blocks.len(), 1, "{f:#?}");
    let b = blocks[0];
    assert_eq!(b.path, "spec.minAvailable");
    assert!(b.what.contains("sets neither minAvailable nor maxUnavailable"), "{}", b.what);
    assert!(b.what.contains("allows 0 disruptions however many of the pods it covers are healthy"), "{}", b.what);
    assert!(!b.from_view, "the PDB alone says it");
    assert!(b.fix.contains("maxUnavailable: 1"), "{}", b.fix);
    // From the workload's side too, anchored at the PDB, naming the workload's pods.
    let f = findings(&deploy("web", "web", Some(replicas)), &unset, false);
    let blocks = of_rule(&f, "pdb-blocks-eviction");
    assert_eq!(blocks.len(), 1, "{f:#?}");
    assert_eq!(blocks[0].anchor, ObjectRef::new(Kind::PodDisruptionBudget, "default", "web"));
    assert!(blocks[0].what.contains(&format!("however many of the {replicas} pod")), "{}", blocks[0].what);
}

/// The same PDB over nothing, or over a workload scaled to 0, still blocks whatever it will cover
/// (found on the PDB alone); the workload scaled to 0 is not blocked by it (it contributes nothing).
#[test]
fn a_budget_with_neither_field_blocks_by_itself_over_no_pod_too() {
    let unset = pdb("web", "web", "unhealthyPodEvictionPolicy: AlwaysAllow");
    assert_eq!(of_rule(&findings(&unset, &deploy("web", "web", Some(0)), false), "pdb-blocks-eviction").len(), 1);
    assert_eq!(of_rule(&findings(&unset, "", false), "pdb-blocks-eviction").len(), 1);
    assert!(of_rule(&findings(&deploy("web", "web", Some(0)), &unset, false), "pdb-blocks-eviction").is_empty());
    // Without a selector it covers nothing at all (pdb-selects-nothing says so instead).
    let bare = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\nspec:\n  maxUnavailable: 0\n";
    assert!(of_rule(&findings(bare, "", false), "pdb-blocks-eviction").is_empty());
}

/// maxUnavailable above the replicas: the controller clamps desired healthy at 0 and allows every
/// pod to go, so it does not block (and the message never shows a negative count).
#[rstest]
#[case::int("maxUnavailable: 5", 2)]
#[case::percent("maxUnavailable: 100%", 3)]
fn max_unavailable_above_the_replicas_does_not_block(#[case] budget: &str, #[case] replicas: i32) {
    let f = findings(&pdb("web", "web", budget), &deploy("web", "web", Some(replicas)), false);
    assert!(of_rule(&f, "pdb-blocks-eviction").is_empty(), "{f:#?}");
}

/// In the audit the view holds pods: a PDB over pods of no workload (bare pods) does not "protect
/// nothing" (an integer minAvailable counts them; a maxUnavailable blocks them, which
/// pdb-disruptions-blocked says).
#[test]
fn a_pdb_over_bare_pods_is_not_said_to_select_nothing() {
    use crate::core::testing::{pod, view_with_pods};
    use crate::core::view::PodOwner;
    let bare = crate::core::view::PodInfo { owner: PodOwner::Unmanaged, ..pod("solo", "web", "n1") };
    let budget = pdb("web", "web", "maxUnavailable: 1");
    let with_pods = view_with_pods("", vec![bare]);
    let f = rules::evaluate(&crate::core::testing::subject(&budget), &with_pods, &Config::default()).findings;
    assert!(of_rule(&f, "pdb-selects-nothing").is_empty(), "{f:#?}");
    // Without the pods, the same PDB in a complete view selects nothing.
    let f = findings(&budget, "", true);
    assert_eq!(of_rule(&f, "pdb-selects-nothing").len(), 1, "{f:#?}");
}

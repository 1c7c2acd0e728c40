//! spread-selector-missing, spread-selector-mismatch, spread-selector-overlap.

use crate::core::finding::Decision;
use crate::core::model::{Kind, ObjectRef};
use crate::core::testing::*;
use rstest::rstest;

fn dep(name: &str) -> ObjectRef {
    ObjectRef::new(Kind::Deployment, "default", name)
}

/// Deployment `web` (pods `app: web`, replicas 3) with one hostname spread `when` and `selector`
/// (a YAML fragment at the constraint's level, or "" for none).
fn web_with_spread(when: &str, selector: &str) -> String {
    deployment(
        "web",
        "replicas: 3",
        &format!(
            "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  \
             whenUnsatisfiable: {when}\n{}",
            indent(selector, 2)
        ),
    )
}

const SPREAD_PATH: &str = "spec.template.spec.topologySpreadConstraints[0].labelSelector";

// ---- spread-selector-missing ----

#[rstest]
#[case::hard_denies("DoNotSchedule", Decision::Deny)]
#[case::soft_warns("ScheduleAnyway", Decision::Warn)]
fn missing_selector(#[case] when: &str, #[case] action: Decision) {
    let f = findings(&web_with_spread(when, ""), "", false);
    let missing = of_rule(&f, "spread-selector-missing");
    assert_eq!(missing.len(), 1, "{f:#?}");
    let m = missing[0];
    assert_eq!(m.action, action);
    assert_eq!(m.path, SPREAD_PATH);
    assert_eq!(m.object, dep("web"));
    assert_eq!(m.anchor, dep("web"));
    assert!(m.related.is_empty());
    let msg = m.message();
    assert!(msg.contains("topologySpreadConstraints[0]"), "{msg}");
    assert!(msg.contains("kubernetes.io/hostname") && msg.contains(when), "{msg}");
    assert!(msg.contains("no labelSelector") && msg.contains("counts nothing"), "{msg}");
    assert!(m.fix.contains("set labelSelector") && m.fix.contains("app=web"), "fix names the selector: {}", m.fix);
    // A missing selector is not also a mismatch or an overlap.
    assert!(of_rule(&f, "spread-selector-mismatch").is_empty() && of_rule(&f, "spread-selector-overlap").is_empty());
}

#[test]
fn missing_selector_is_reported_per_constraint() {
    let yaml = deployment(
        "web",
        "replicas: 3",
        "topologySpreadConstraints:\n\
         - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, \
            labelSelector: {matchLabels: {app: web}}}\n\
         - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}\n",
    );
    let f = findings(&yaml, "", false);
    let missing = of_rule(&f, "spread-selector-missing");
    assert_eq!(missing.len(), 1, "{f:#?}");
    assert_eq!(missing[0].path, "spec.template.spec.topologySpreadConstraints[1].labelSelector");
    assert_eq!(missing[0].action, Decision::Deny);
}

#[test]
fn matching_selector_is_not_missing_or_mismatched() {
    let f = findings(&web_with_spread("DoNotSchedule", "labelSelector:\n  matchLabels:\n    app: web"), "", false);
    for rule in ["spread-selector-missing", "spread-selector-mismatch", "spread-selector-overlap"] {
        assert!(of_rule(&f, rule).is_empty(), "{rule}: {f:#?}");
    }
}

#[test]
fn no_spread_at_all_is_none_of_these() {
    let f = findings(&deployment("web", "replicas: 3", ""), "", false);
    for rule in ["spread-selector-missing", "spread-selector-mismatch", "spread-selector-overlap"] {
        assert!(of_rule(&f, rule).is_empty(), "{rule}: {f:#?}");
    }
}

// ---- spread-selector-mismatch ----

#[rstest]
#[case::hard_denies("DoNotSchedule", Decision::Deny)]
#[case::soft_warns("ScheduleAnyway", Decision::Warn)]
fn mismatched_selector(#[case] when: &str, #[case] action: Decision) {
    let f = findings(&web_with_spread(when, "labelSelector:\n  matchLabels:\n    app: api"), "", false);
    let mismatch = of_rule(&f, "spread-selector-mismatch");
    assert_eq!(mismatch.len(), 1, "{f:#?}");
    let m = mismatch[0];
    assert_eq!(m.action, action);
    assert_eq!(m.path, SPREAD_PATH);
    assert!(m.related.is_empty());
    assert!(m.what.contains("topologySpreadConstraints[0]") && m.what.contains(when), "{}", m.what);
    assert!(m.what.contains("app=api"), "names the selector: {}", m.what);
    assert!(m.what.contains("pod template labels (app=web)"), "names the labels: {}", m.what);
    assert!(m.fix.contains("app=web"), "fix names the workload's selector: {}", m.fix);
    assert!(of_rule(&f, "spread-selector-missing").is_empty());
    assert!(of_rule(&f, "spread-selector-overlap").is_empty(), "a mismatch is not also an overlap");
}

#[rstest]
#[case::extra_label_required("labelSelector:\n  matchLabels:\n    app: web\n    tier: fe", true)]
#[case::expression_not_in("labelSelector:\n  matchExpressions:\n  - {key: app, operator: NotIn, values: [web]}", true)]
#[case::expression_in("labelSelector:\n  matchExpressions:\n  - {key: app, operator: In, values: [web, api]}", false)]
#[case::expression_exists("labelSelector:\n  matchExpressions:\n  - {key: app, operator: Exists}", false)]
fn mismatch_follows_full_selector_semantics(#[case] selector: &str, #[case] fires: bool) {
    let f = findings(&web_with_spread("DoNotSchedule", selector), "", false);
    assert_eq!(of_rule(&f, "spread-selector-mismatch").len(), usize::from(fires), "{f:#?}");
}

// ---- spread-selector-overlap ----

#[test]
fn empty_selector_counts_every_pod_in_the_namespace() {
    let f = findings(&web_with_spread("DoNotSchedule", "labelSelector: {}"), "", false);
    let overlap = of_rule(&f, "spread-selector-overlap");
    assert_eq!(overlap.len(), 1, "{f:#?}");
    let o = overlap[0];
    assert_eq!(o.action, Decision::Warn, "warn even on a DoNotSchedule spread");
    assert_eq!(o.path, SPREAD_PATH);
    assert!(o.what.contains("empty labelSelector {}"), "{}", o.what);
    assert!(o.what.contains("every pod in namespace default"), "{}", o.what);
    assert!(o.fix.contains("app=web"), "{}", o.fix);
    assert!(of_rule(&f, "spread-selector-mismatch").is_empty(), "{{}} matches its own pods");
    assert!(of_rule(&f, "spread-selector-missing").is_empty());
}

/// Deployment `name` in `ns` with pods `app: <name>, tier: fe`, optionally spreading over `tier: fe`.
fn frontend(name: &str, ns: &str, spreads: bool) -> String {
    let spread = if spreads {
        "      topologySpreadConstraints:\n      - maxSkew: 1\n        topologyKey: kubernetes.io/hostname\n        \
         whenUnsatisfiable: ScheduleAnyway\n        labelSelector:\n          matchLabels:\n            tier: fe\n"
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  replicas: 2\n  \
         selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n        \
         tier: fe\n    spec:\n{spread}      containers:\n      - name: app\n        image: nginx:1.27\n"
    )
}

#[test]
fn selector_also_matching_another_deployment_in_the_namespace() {
    let f = findings(&frontend("a", "default", true), &frontend("b", "default", false), false);
    let overlap = of_rule(&f, "spread-selector-overlap");
    assert_eq!(overlap.len(), 1, "{f:#?}");
    let o = overlap[0];
    assert_eq!(o.action, Decision::Warn);
    assert_eq!(o.object, dep("a"));
    assert_eq!(o.path, SPREAD_PATH);
    assert_eq!(o.related, vec![dep("b")]);
    assert_eq!(o.anchor, dep("a"));
    assert!(o.what.contains("labelSelector tier=fe"), "{}", o.what);
    assert!(o.what.contains("Deployment default/b"), "names the other workload: {}", o.what);
    assert!(o.what.contains("kubernetes.io/hostname"), "{}", o.what);
    assert!(o.fix.contains("narrow the labelSelector"), "{}", o.fix);
    assert!(of_rule(&f, "spread-selector-mismatch").is_empty());
}

#[test]
fn selector_matching_several_others_names_them_all() {
    let view = docs(&[&frontend("b", "default", false), &frontend("c", "default", false)]);
    let f = findings(&frontend("a", "default", true), &view, false);
    let overlap = of_rule(&f, "spread-selector-overlap");
    assert_eq!(overlap.len(), 1, "one finding per constraint: {f:#?}");
    assert_eq!(overlap[0].related, vec![dep("b"), dep("c")]);
    assert!(overlap[0].what.contains("Deployment default/b, Deployment default/c"), "{}", overlap[0].what);
}

#[test]
fn selector_matching_a_statefulset_counts_too() {
    let sts = edit(&frontend("b", "default", false), "kind: Deployment", "kind: StatefulSet");
    let f = findings(&frontend("a", "default", true), &sts, false);
    let overlap = of_rule(&f, "spread-selector-overlap");
    assert_eq!(overlap.len(), 1, "{f:#?}");
    assert_eq!(overlap[0].related, vec![ObjectRef::new(Kind::StatefulSet, "default", "b")]);
}

#[test]
fn pods_in_another_namespace_do_not_overlap() {
    let f = findings(&frontend("a", "default", true), &frontend("b", "other", false), false);
    assert!(of_rule(&f, "spread-selector-overlap").is_empty(), "{f:#?}");
}

#[test]
fn a_selector_matching_only_its_own_pods_does_not_overlap() {
    // b's pods carry tier: fe but a's spread selects app: a only.
    let a = edit(&frontend("a", "default", true), "            tier: fe\n", "            app: a\n");
    let f = findings(&a, &frontend("b", "default", false), false);
    assert!(of_rule(&f, "spread-selector-overlap").is_empty(), "{f:#?}");
}

#[test]
fn the_old_version_of_the_subject_in_the_view_is_not_another_workload() {
    let a = frontend("a", "default", true);
    let f = findings(&a, &a, true);
    assert!(of_rule(&f, "spread-selector-overlap").is_empty(), "{f:#?}");
}

#[test]
fn overlap_found_from_the_other_side() {
    // Writing b, whose pods a's spread (in the view) counts.
    let f = findings(&frontend("b", "default", false), &frontend("a", "default", true), false);
    let overlap = of_rule(&f, "spread-selector-overlap");
    assert_eq!(overlap.len(), 1, "{f:#?}");
    let o = overlap[0];
    assert_eq!(o.action, Decision::Warn);
    assert_eq!(o.object, dep("b"));
    assert_eq!(o.path, "spec.template.metadata.labels");
    assert_eq!(o.related, vec![dep("a")]);
    assert_eq!(o.anchor, dep("a"), "the finding is about a's spread");
    assert!(o.what.contains("app=b,tier=fe"), "names b's labels: {}", o.what);
    assert!(o.what.contains("Deployment default/a") && o.what.contains("labelSelector tier=fe"), "{}", o.what);
    assert!(o.fix.contains("Deployment default/a"), "{}", o.fix);
}

#[test]
fn other_side_not_across_namespaces() {
    let f = findings(&frontend("b", "other", false), &frontend("a", "default", true), false);
    assert!(of_rule(&f, "spread-selector-overlap").is_empty(), "{f:#?}");
}

#[test]
fn other_side_ignores_an_empty_selector_and_non_matching_spreads() {
    // a's spread is {}: reported on a itself, not on every other workload of the namespace.
    let a_empty = edit(
        &frontend("a", "default", true),
        "        labelSelector:\n          matchLabels:\n            tier: fe\n",
        "        labelSelector: {}\n",
    );
    let f = findings(&frontend("b", "default", false), &a_empty, false);
    assert!(of_rule(&f, "spread-selector-overlap").is_empty(), "{f:#?}");
    // a's spread selects tier: be, which b's pods do not carry.
    let a_be = edit(&frontend("a", "default", true), "            tier: fe\n", "            tier: be\n");
    let f = findings(&frontend("b", "default", false), &a_be, false);
    assert!(of_rule(&f, "spread-selector-overlap").is_empty(), "{f:#?}");
}

#[test]
fn mutual_overlap_is_reported_once_from_each_subject() {
    // Both spread over tier: fe. Writing a: one finding on a's own spread naming b, not a second
    // one from b's side.
    let f = findings(&frontend("a", "default", true), &frontend("b", "default", true), false);
    let overlap = of_rule(&f, "spread-selector-overlap");
    assert_eq!(overlap.len(), 1, "{f:#?}");
    assert_eq!(overlap[0].path, SPREAD_PATH);
    assert_eq!(overlap[0].related, vec![dep("b")]);
}

#[test]
fn overlap_through_match_expressions() {
    let a = edit(
        &frontend("a", "default", true),
        "        labelSelector:\n          matchLabels:\n            tier: fe\n",
        "        labelSelector:\n          matchExpressions:\n          - {key: tier, operator: In, values: [fe, be]}\n",
    );
    let f = findings(&a, &docs(&[&frontend("b", "default", false), &frontend("c", "other", false)]), false);
    let overlap = of_rule(&f, "spread-selector-overlap");
    assert_eq!(overlap.len(), 1, "{f:#?}");
    assert_eq!(overlap[0].related, vec![dep("b")]);
    assert!(overlap[0].what.contains("labelSelector tier in (fe,be)"), "{}", overlap[0].what);
    // And from b's side.
    let f = findings(&frontend("b", "default", false), &a, false);
    let overlap = of_rule(&f, "spread-selector-overlap");
    assert_eq!(overlap.len(), 1, "{f:#?}");
    assert_eq!(overlap[0].anchor, dep("a"));
}

// ---- matchLabelKeys: the selector as the scheduler counts with it ----

/// `frontend` whose spread also lists `matchLabelKeys` (at the constraint's level).
fn frontend_keyed(name: &str, keys: &str, extra_label: &str) -> String {
    edit(
        &edit(
            &frontend(name, "default", true),
            "          matchLabels:\n            tier: fe\n",
            &format!("          matchLabels:\n            tier: fe\n        matchLabelKeys: [{keys}]\n"),
        ),
        "        tier: fe\n    spec:",
        &format!("        tier: fe\n{extra_label}    spec:"),
    )
}

/// `matchLabelKeys: [pod-template-hash]`: the pods of each revision are counted alone, so another
/// Deployment's pods are never in the skew, whichever side writes.
#[test]
fn match_label_keys_on_the_revision_hash_separates_the_workloads() {
    let a = frontend_keyed("a", "pod-template-hash", "");
    let f = findings(&a, &frontend("b", "default", false), false);
    assert!(of_rule(&f, "spread-selector-overlap").is_empty(), "{f:#?}");
    // From b's side: a's spread does not count b's pods.
    let f = findings(&frontend("b", "default", false), &a, false);
    assert!(of_rule(&f, "spread-selector-overlap").is_empty(), "{f:#?}");
}

/// A key the two templates give different values separates them; the same value, or a key the
/// template lacks (ignored), does not.
#[test]
fn match_label_keys_on_a_label_separate_where_the_values_differ() {
    let a = frontend_keyed("a", "track", "        track: stable\n");
    let b_canary =
        edit(&frontend("b", "default", false), "        tier: fe\n", "        tier: fe\n        track: canary\n");
    let b_stable =
        edit(&frontend("b", "default", false), "        tier: fe\n", "        tier: fe\n        track: stable\n");
    assert!(of_rule(&findings(&a, &b_canary, false), "spread-selector-overlap").is_empty());
    assert_eq!(of_rule(&findings(&a, &b_stable, false), "spread-selector-overlap").len(), 1);
    let unlabelled = frontend_keyed("a", "track", "");
    assert_eq!(of_rule(&findings(&unlabelled, &b_canary, false), "spread-selector-overlap").len(), 1);
}

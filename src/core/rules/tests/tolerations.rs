//! toleration-wildcard.

use crate::core::finding::Decision;
use crate::core::model::{Kind, ObjectRef};
use crate::core::testing::*;
use rstest::rstest;

const RULE: &str = "toleration-wildcard";

/// A `kind` `op` with one replica and the given `tolerations:` list (a YAML flow sequence).
fn tolerating(kind: &str, tolerations: &str) -> String {
    workload(kind, "op", "replicas: 1", &format!("tolerations: {tolerations}"))
}

#[rstest]
#[case::everything(
    "[{operator: Exists}]",
    "operator",
    "(operator: Exists, no key, no effect) tolerates every taint, the cordon's \
     node.kubernetes.io/unschedulable:NoSchedule included"
)]
#[case::empty_key_and_effect(
    "[{key: '', operator: Exists, effect: ''}]",
    "operator",
    "(operator: Exists, no key, no effect) tolerates every taint, the cordon's"
)]
#[case::every_noschedule(
    "[{operator: Exists, effect: NoSchedule}]",
    "operator",
    "(operator: Exists, no key, effect: NoSchedule) tolerates every NoSchedule taint, the cordon's \
     node.kubernetes.io/unschedulable:NoSchedule included"
)]
#[case::cordon_exists(
    "[{key: node.kubernetes.io/unschedulable, operator: Exists}]",
    "key",
    "(key: node.kubernetes.io/unschedulable) tolerates the cordon taint node.kubernetes.io/unschedulable:NoSchedule itself"
)]
#[case::cordon_exists_noschedule(
    "[{key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}]",
    "key",
    "(key: node.kubernetes.io/unschedulable) tolerates the cordon taint"
)]
#[case::cordon_equal_without_value(
    "[{key: node.kubernetes.io/unschedulable, effect: NoSchedule}]",
    "key",
    "(key: node.kubernetes.io/unschedulable) tolerates the cordon taint"
)]
fn fires(#[case] tolerations: &str, #[case] field: &str, #[case] what: &str) {
    for kind in ["Deployment", "StatefulSet"] {
        let f = findings(&tolerating(kind, tolerations), "", false);
        let found = of_rule(&f, RULE);
        assert_eq!(found.len(), 1, "{kind} {tolerations}: {f:#?}");
        let t = found[0];
        assert_eq!(t.action, Decision::Warn);
        assert_eq!(t.path, format!("spec.template.spec.tolerations[0].{field}"));
        assert_eq!(t.object, ObjectRef::new(Kind::from_type("apps/v1", kind).unwrap(), "default", "op"));
        assert!(t.related.is_empty());
        let msg = t.message();
        for part in [
            &format!("{kind} default/op: tolerations[0] {what}"),
            "node.kubernetes.io/unschedulable:NoSchedule",
            "scheduled straight back onto the node being drained",
            "Fix: tolerate only the specific taints",
            "DaemonSet",
        ] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
    }
}

#[rstest]
#[case::none("[]")]
#[case::keyed_equal("[{key: dedicated, operator: Equal, value: infra, effect: NoSchedule}]")]
#[case::keyed_exists("[{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]")]
#[case::every_noexecute("[{operator: Exists, effect: NoExecute}]")]
#[case::every_prefer_no_schedule("[{operator: Exists, effect: PreferNoSchedule}]")]
#[case::not_ready_noexecute(
    "[{key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 300}]"
)]
#[case::cordon_key_noexecute_only("[{key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoExecute}]")]
#[case::cordon_key_with_a_value("[{key: node.kubernetes.io/unschedulable, operator: Equal, value: 'true'}]")]
#[case::similar_key("[{key: node.kubernetes.io/unreachable, operator: Exists}]")]
fn does_not_fire(#[case] tolerations: &str) {
    let f = findings(&tolerating("Deployment", tolerations), "", false);
    assert!(of_rule(&f, RULE).is_empty(), "{tolerations}: {f:#?}");
}

#[test]
fn no_tolerations_field_does_not_fire() {
    let f = findings(&deployment("web", "replicas: 3", ""), "", false);
    assert!(of_rule(&f, RULE).is_empty(), "{f:#?}");
}

#[test]
fn calicos_pair_is_reported_once_for_the_noschedule_one() {
    // tigera-operator's pair: the NoExecute wildcard does not cover the cordon, the NoSchedule one does.
    let f = findings(
        &tolerating("Deployment", "[{effect: NoExecute, operator: Exists}, {effect: NoSchedule, operator: Exists}]"),
        "",
        false,
    );
    let found = of_rule(&f, RULE);
    assert_eq!(found.len(), 1, "{f:#?}");
    assert_eq!(found[0].path, "spec.template.spec.tolerations[1].operator");
    assert!(found[0].what.contains("tolerations[1]"), "{}", found[0].what);
}

#[test]
fn each_offending_toleration_is_reported() {
    let f = findings(
        &tolerating(
            "Deployment",
            "[{operator: Exists}, {key: dedicated, operator: Exists}, {key: node.kubernetes.io/unschedulable, operator: Exists}]",
        ),
        "",
        false,
    );
    let paths: Vec<_> = of_rule(&f, RULE).iter().map(|t| t.path.clone()).collect();
    assert_eq!(paths, ["spec.template.spec.tolerations[0].operator", "spec.template.spec.tolerations[2].key"]);
}

#[rstest]
#[case::zero("replicas: 0")]
#[case::one("replicas: 1")]
#[case::many("replicas: 5")]
fn whatever_the_replica_count(#[case] replicas: &str) {
    let yaml = workload("Deployment", "op", replicas, "tolerations: [{operator: Exists}]");
    assert_eq!(of_rule(&findings(&yaml, "", false), RULE).len(), 1);
}

#[test]
fn only_on_the_workloads_own_write() {
    // An HPA over a tolerate-everything Deployment does not repeat the workload's finding.
    let view = tolerating("Deployment", "[{operator: Exists}]");
    let f = findings(&hpa("op", "op", Some(1), 3), &view, true);
    assert!(of_rule(&f, RULE).is_empty(), "{f:#?}");
}

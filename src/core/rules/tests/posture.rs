//! The live posture family: replicas-share-node, pdb-disruptions-blocked, spread-pending,
//! pod-on-cordoned-node. Views hold nodes and pods as the audit builds them.

use rstest::rstest;

use crate::core::config::Config;
use crate::core::finding::Decision;
use crate::core::rules;
use crate::core::testing::*;
use crate::core::view::{PodInfo, PodPhase};

const SHARE: &str = "replicas-share-node";
const BLOCKED: &str = "pdb-disruptions-blocked";
const PENDING: &str = "spread-pending";
const CORDONED: &str = "pod-on-cordoned-node";
const PODS_PENDING: &str = "pods-pending";

/// A hostname spread (DoNotSchedule) against `app: <app>`.
fn hostname_spread(app: &str) -> String {
    format!(
        "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  whenUnsatisfiable: \
         DoNotSchedule\n  labelSelector:\n    matchLabels:\n      app: {app}\n"
    )
}

fn web(replicas: i32, pod_spec: &str) -> String {
    deployment("web", &format!("replicas: {replicas}"), pod_spec)
}

/// `web-1`.. pods of web on the given nodes.
fn placed(nodes: &[&str]) -> Vec<PodInfo> {
    nodes.iter().enumerate().map(|(i, n)| pod(&format!("web-{}", i + 1), "web", n)).collect()
}

fn three_nodes() -> String {
    nodes(&[("n1", "", false), ("n2", "", false), ("n3", "", false)])
}

#[test]
fn two_replicas_on_one_node_warn_with_the_node_and_the_pods() {
    let view = view_with_pods(&three_nodes(), placed(&["n1", "n1"]));
    let f = audit_findings(&web(2, ""), &view);
    let s = of_rule(&f, SHARE);
    assert_eq!(s.len(), 1, "{f:#?}");
    assert_eq!(s[0].action, Decision::Warn);
    assert_eq!(s[0].path, "spec.template.spec.topologySpreadConstraints");
    for part in [
        "Deployment web (replicas 2): 2 of its 2 running pods are on node n1 (web-1, web-2) although 3 nodes could hold them apart",
        "two replicas on one node are one replica",
    ] {
        assert!(s[0].what.contains(part), "{part:?} not in: {}", s[0].what);
    }
    assert!(
        s[0].fix.contains("topologySpreadConstraint {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: app=web}"),
        "{}",
        s[0].fix
    );
}

#[test]
fn posture_never_runs_at_admission() {
    // The same subject and view through the admission entry: no posture finding, whatever the pods.
    let view = view_with_pods(&three_nodes(), placed(&["n1", "n1"]));
    let admitted = rules::evaluate(&subject(&web(2, "")), &view, &Config::default()).findings;
    let posture: Vec<_> = admitted
        .iter()
        .filter(|f| rules::posture::RULES.iter().chain(rules::drain::RULES).any(|r| *r == f.rule))
        .collect();
    assert!(posture.is_empty(), "{posture:#?}");
    assert!(!of_rule(&audit_findings(&web(2, ""), &view), SHARE).is_empty(), "the audit entry does run it");
}

#[rstest]
#[case::apart(&["n1", "n2"], "", false)]
#[case::one_replica(&["n1"], "", false)]
// Three on two nodes is as even as it gets: not more than an even placement puts there.
#[case::three_on_two_nodes_of_two(&["n1", "n1", "n2"], "two-nodes", false)]
// More than half on one node of three.
#[case::majority(&["n1", "n1", "n2"], "", true)]
// Two of four on one node: not more than half; only a spread that asks otherwise makes it a finding.
#[case::half_without_spread(&["n1", "n1", "n2", "n3"], "four-nodes", false)]
#[case::half_with_spread(&["n1", "n1", "n2", "n3"], "four-nodes spread", true)]
// Four on three nodes: two share one whatever the spread.
#[case::four_on_three_nodes(&["n1", "n1", "n2", "n3"], "spread", false)]
// A single-node cluster cannot hold them apart.
#[case::one_node(&["n1", "n1"], "one-node", false)]
fn share_node_boundary(#[case] on: &[&str], #[case] variant: &str, #[case] fires: bool) {
    let nodes_yaml = match variant {
        "two-nodes" => nodes(&[("n1", "", false), ("n2", "", false)]),
        "one-node" => nodes(&[("n1", "", false)]),
        v if v.starts_with("four-nodes") => {
            nodes(&[("n1", "", false), ("n2", "", false), ("n3", "", false), ("n4", "", false)])
        }
        _ => three_nodes(),
    };
    let spec = if variant.ends_with("spread") { hostname_spread("web") } else { String::new() };
    let view = view_with_pods(&nodes_yaml, placed(on));
    let f = audit_findings(&web(on.len() as i32, &spec), &view);
    assert_eq!(of_rule(&f, SHARE).len(), usize::from(fires), "{f:#?}");
}

#[test]
fn pods_that_are_not_running_do_not_count() {
    let mut pods = placed(&["n1", "n1", "n2"]);
    pods[1].phase = PodPhase::Pending;
    let view = view_with_pods(&three_nodes(), pods);
    assert!(of_rule(&audit_findings(&web(3, ""), &view), SHARE).is_empty());
    let mut pods = placed(&["n1", "n1"]);
    pods[0].terminating = true;
    let view = view_with_pods(&three_nodes(), pods);
    assert!(of_rule(&audit_findings(&web(2, ""), &view), SHARE).is_empty());
}

#[test]
fn a_majority_in_one_zone_of_two_warns() {
    let zoned = nodes(&[("a1", "za", false), ("a2", "za", false), ("b1", "zb", false)]);
    let spec = hostname_spread("web");
    let view = view_with_pods(&zoned, placed(&["a1", "a2", "b1", "a1"]));
    let f = audit_findings(&web(4, &spec), &view);
    let s = of_rule(&f, SHARE);
    assert_eq!(s.len(), 1, "{f:#?}");
    assert!(
        s[0].what.contains("3 of its 4 running pods are in zone za (web-1, web-2, web-4) of the 2 zones it may use"),
        "{}",
        s[0].what
    );
    // On different nodes: what takes them at once is the zone's outage, not a node's failure.
    assert!(
        s[0].what.ends_with(
            "one zone's outage takes those replicas at once (replicas in one zone are one replica against its outage)."
        ),
        "{}",
        s[0].what
    );
    assert!(!s[0].what.contains("two replicas on one node"), "{}", s[0].what);
    // Two in one zone, one in the other: as even as three replicas over two zones can be.
    let view = view_with_pods(&zoned, placed(&["a1", "a2", "b1"]));
    assert!(of_rule(&audit_findings(&web(3, &spec), &view), SHARE).is_empty());
}

/// Two replicas on two nodes of one zone while another zone could hold one (issue 51, item 5):
/// said as a zone's risk, never as "two replicas on one node".
#[test]
fn two_replicas_on_two_nodes_of_one_zone_are_a_zones_risk() {
    let zoned = nodes(&[("a1", "za", false), ("a2", "za", false), ("b1", "zb", false)]);
    let view = view_with_pods(&zoned, placed(&["a1", "a2"]));
    let f = audit_findings(&web(2, &hostname_spread("web")), &view);
    let s = of_rule(&f, SHARE);
    assert_eq!(s.len(), 1, "{f:#?}");
    assert_eq!(s[0].path, "spec.template.spec.topologySpreadConstraints");
    assert!(
        s[0].what.contains("Deployment web (replicas 2): 2 of its 2 running pods are in zone za (web-1, web-2) of the 2 zones it may use"),
        "{}",
        s[0].what
    );
    assert!(s[0].what.contains("one zone's outage takes those replicas at once"), "{}", s[0].what);
    assert!(!s[0].what.contains("on one node"), "{}", s[0].what);
    // The fix is a zone's: the hostname spread it has already keeps them on different nodes.
    assert!(
        s[0].fix.starts_with(
            "add a topologySpreadConstraint {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: \
             ScheduleAnyway, labelSelector: app=web} to the pod template, then roll the pods"
        ),
        "{}",
        s[0].fix
    );
    assert!(!s[0].fix.contains("kubernetes.io/hostname"), "{}", s[0].fix);
    // With a zone spread that is only a preference: make it hard, and move the pods of that zone.
    let zone_spread = "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: topology.kubernetes.io/zone\n  \
                       whenUnsatisfiable: ScheduleAnyway\n  labelSelector:\n    matchLabels:\n      app: web\n";
    let f = audit_findings(&web(2, zone_spread), &view);
    let fix = &of_rule(&f, SHARE)[0].fix;
    assert!(fix.starts_with("delete the pods in zone za one at a time"), "{fix}");
    assert!(fix.contains("make the spread on topology.kubernetes.io/zone whenUnsatisfiable: DoNotSchedule"), "{fix}");
    // Both on one node: the node's failure is said.
    let view = view_with_pods(&zoned, placed(&["a1", "a1"]));
    let f = audit_findings(&web(2, &hostname_spread("web")), &view);
    assert!(of_rule(&f, SHARE)[0].what.contains("two replicas on one node are one replica"), "{f:#?}");
}

fn pdb_with_status(min_available: i32, allowed: i32, expected: i32, healthy: i32, desired: i32) -> String {
    format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\n  namespace: default\nspec:\n  \
         minAvailable: {min_available}\n  selector:\n    matchLabels:\n      app: web\nstatus:\n  disruptionsAllowed: \
         {allowed}\n  expectedPods: {expected}\n  currentHealthy: {healthy}\n  desiredHealthy: {desired}\n"
    )
}

#[test]
fn a_pdb_blocked_by_unhealthy_pods_names_them() {
    let mut pods = placed(&["n1", "n2"]);
    pods[1].ready = false;
    let view = view_with_pods(&docs(&[&three_nodes(), &web(2, "")]), pods);
    let f = audit_findings(&pdb_with_status(2, 0, 2, 1, 2), &view);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert_eq!(b[0].path, "status.disruptionsAllowed");
    assert_eq!(b[0].related.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["web"]);
    for part in [
        "PodDisruptionBudget default/web (covering Deployment web) allows 0 disruptions now",
        "unhealthy pods: 1 of 2 expected pods are healthy (not Ready: web-2), and minAvailable 2 needs 2",
        "IfHealthyBudget (the default) even the unhealthy pods cannot be evicted",
        "a drain of their nodes",
    ] {
        assert!(b[0].what.contains(part), "{part:?} not in: {}", b[0].what);
    }
    assert!(b[0].fix.contains("AlwaysAllow"), "{}", b[0].fix);
}

#[test]
fn a_pdb_at_exactly_its_need_with_a_pod_not_ready_says_unhealthy_not_too_few() {
    // minAvailable 1 over 2, one not Ready: 1 healthy, 1 needed, 0 allowed. With both Ready it
    // would allow one: the reason is the unhealthy pod.
    let mut pods = placed(&["n1", "n2"]);
    pods[1].ready = false;
    let view = view_with_pods(&docs(&[&three_nodes(), &web(2, "")]), pods);
    let f = audit_findings(&pdb_with_status(1, 0, 2, 1, 1), &view);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert!(
        b[0].what.contains(
            "unhealthy pods: 1 of 2 expected pods are healthy (not Ready: web-2), and minAvailable 1 needs 1."
        ),
        "{}",
        b[0].what
    );
    assert!(!b[0].what.contains("too few replicas"), "{}", b[0].what);
    assert!(!b[0].fix.contains("run more replicas"), "{}", b[0].fix);
}

#[test]
fn a_pdb_that_needs_every_pod_and_has_one_not_ready_says_both() {
    let mut pods = placed(&["n1", "n2"]);
    pods[1].ready = false;
    let view = view_with_pods(&docs(&[&three_nodes(), &web(2, "")]), pods);
    let f = audit_findings(&pdb_with_status(2, 0, 2, 1, 2), &view);
    let b = of_rule(&f, BLOCKED);
    assert!(b[0].what.contains("Even with every pod healthy it would allow none"), "{}", b[0].what);
    assert!(b[0].fix.contains("run more replicas than the budget requires"), "{}", b[0].fix);
}

#[test]
fn a_pdb_that_needs_every_pod_says_too_few_replicas() {
    let view = view_with_pods(&web(1, ""), placed(&["n1"]));
    let f = audit_findings(&pdb_with_status(1, 0, 1, 1, 1), &view);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert!(
        b[0].what.contains("too few replicas: all 1 healthy pods are needed, as minAvailable 1 over 1 expected pods"),
        "{}",
        b[0].what
    );
    assert!(b[0].fix.contains("run more replicas"), "{}", b[0].fix);
}

#[rstest]
#[case::allows_one(1, 2, 1, false)]
#[case::expects_nothing(0, 0, 0, false)]
#[case::blocked(0, 2, 2, true)]
fn pdb_blocked_boundary(#[case] allowed: i32, #[case] expected: i32, #[case] desired: i32, #[case] fires: bool) {
    let view = view_with_pods(&web(2, ""), placed(&["n1", "n2"]));
    let f = audit_findings(&pdb_with_status(desired, allowed, expected, expected, desired), &view);
    assert_eq!(of_rule(&f, BLOCKED).len(), usize::from(fires), "{f:#?}");
}

#[test]
fn a_pdb_without_status_is_not_judged() {
    let no_status = pdb_with_status(1, 0, 2, 2, 2);
    let no_status = &no_status[..no_status.find("status:").unwrap()];
    let view = view_with_pods(&web(2, ""), placed(&["n1", "n2"]));
    assert!(of_rule(&audit_findings(no_status, &view), BLOCKED).is_empty());
}

#[test]
fn a_pdb_blocked_by_a_pod_the_scheduler_cannot_place_gives_the_schedulers_reason_not_make_it_ready() {
    let mut pods = placed(&["n1"]);
    pods.push(pending("web-2", VOLUME_MESSAGE));
    let view = view_with_pods(&docs(&[&three_nodes(), &web(2, "")]), pods);
    let f = audit_findings(&pdb_with_status(2, 0, 2, 1, 2), &view);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert!(
        b[0].what.contains(
            "1 of 2 expected pods are healthy (Pending, the scheduler cannot place web-2: 0/9 nodes are available: 6 \
             node(s) didn't match PersistentVolume's node affinity, 3 node(s) were unschedulable (see pods-pending))"
        ),
        "{}",
        b[0].what
    );
    assert!(!b[0].what.contains("not Ready:"), "{}", b[0].what);
    assert!(b[0].fix.starts_with("get the Pending pods placed"), "{}", b[0].fix);
    assert!(!b[0].fix.contains("Ready again"), "{}", b[0].fix);
    // A pod not Ready besides: both, each with its own remedy.
    let mut pods = placed(&["n1", "n2"]);
    pods[1].ready = false;
    pods.push(pending("web-3", VOLUME_MESSAGE));
    let view = view_with_pods(&docs(&[&three_nodes(), &web(3, "")]), pods);
    let f = audit_findings(&pdb_with_status(3, 0, 3, 1, 3), &view);
    let b = of_rule(&f, BLOCKED);
    assert!(b[0].what.contains("(not Ready: web-2; Pending, the scheduler cannot place web-3: "), "{}", b[0].what);
    assert!(b[0].fix.contains("make the others Ready again"), "{}", b[0].fix);
    // The workload's own finding says the same reason, and is the primary of the budget's.
    let w = audit_findings(&web(3, ""), &view);
    let p = of_rule(&w, PODS_PENDING);
    assert_eq!(p.len(), 1, "{w:#?}");
    let both = [p[0], b[0]];
    assert_eq!(crate::core::causes::primaries(&both), [None, Some(0)]);
}

fn pending(name: &str, message: &str) -> PodInfo {
    let mut p = pod(name, "web", "");
    p.phase = PodPhase::Pending;
    p.ready = false;
    p.unschedulable = Some(message.into());
    p
}

const SPREAD_MESSAGE: &str = "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints.";

#[test]
fn pods_pending_on_a_spread_warn_with_the_schedulers_message() {
    let mut pods = placed(&["n1", "n2", "n3"]);
    pods.push(pending("web-4", SPREAD_MESSAGE));
    let view = view_with_pods(&three_nodes(), pods);
    let f = audit_findings(&web(4, &hostname_spread("web")), &view);
    let p = of_rule(&f, PENDING);
    assert_eq!(p.len(), 1, "{f:#?}");
    assert_eq!(p[0].path, "spec.template.spec.topologySpreadConstraints[0]");
    for part in [
        "Deployment default/web: 1 of its pods is Pending (web-4)",
        "topologySpreadConstraints[0] (topologyKey kubernetes.io/hostname, DoNotSchedule)",
        "didn't match pod topology spread constraints",
    ] {
        assert!(p[0].what.contains(part), "{part:?} not in: {}", p[0].what);
    }
    assert!(p[0].fix.contains("ScheduleAnyway"), "{}", p[0].fix);
}

#[test]
fn pods_pending_for_another_reason_are_not_a_spread_finding() {
    let view = view_with_pods(&three_nodes(), vec![pending("web-1", "0/3 nodes are available: 3 Insufficient cpu.")]);
    assert!(of_rule(&audit_findings(&web(1, &hostname_spread("web")), &view), PENDING).is_empty());
    let mut scheduled = pending("web-1", SPREAD_MESSAGE);
    scheduled.phase = PodPhase::Running;
    let view = view_with_pods(&three_nodes(), vec![scheduled]);
    assert!(of_rule(&audit_findings(&web(1, &hostname_spread("web")), &view), PENDING).is_empty());
}

const VOLUME_MESSAGE: &str =
    "0/9 nodes are available: 6 node(s) didn't match PersistentVolume's node affinity, 3 node(s) were unschedulable.";

#[test]
fn pods_the_scheduler_cannot_place_are_one_finding_with_its_reason() {
    let mut pods = placed(&["n1"]);
    pods.push(pending("web-2", VOLUME_MESSAGE));
    pods.push(pending("web-3", VOLUME_MESSAGE));
    let view = view_with_pods(&three_nodes(), pods);
    let f = audit_findings(&web(3, ""), &view);
    let p = of_rule(&f, PODS_PENDING);
    assert_eq!(p.len(), 1, "one per workload: {f:#?}");
    assert_eq!(p[0].path, "spec.replicas");
    for part in [
        "Deployment default/web: 2 of its 3 pods are Pending (web-2, web-3)",
        "the scheduler says: 0/9 nodes are available: 6 node(s) didn't match PersistentVolume's node affinity, 3 \
         node(s) were unschedulable. The workload",
    ] {
        assert!(p[0].what.contains(part), "{part:?} not in: {}", p[0].what);
    }
    assert!(p[0].fix.contains("volumes the nodes can reach"), "{}", p[0].fix);
    assert!(of_rule(&f, PENDING).is_empty(), "not a spread's: {f:#?}");
}

#[test]
fn pods_pending_for_other_reasons_say_how_many() {
    let view = view_with_pods(
        &three_nodes(),
        vec![pending("web-1", VOLUME_MESSAGE), pending("web-2", "0/3 nodes are available: 3 Insufficient cpu.")],
    );
    let f = audit_findings(&web(2, ""), &view);
    let p = of_rule(&f, PODS_PENDING);
    assert_eq!(p.len(), 1);
    assert!(p[0].what.contains("2 of its 2 pods are Pending (web-1, web-2)"), "{}", p[0].what);
    assert!(p[0].what.contains("(1 of them for another reason"), "{}", p[0].what);
}

#[rstest]
#[case::a_spread_is_spread_pendings(SPREAD_MESSAGE, PodPhase::Pending, "", false)]
#[case::not_yet_seen_by_the_scheduler("", PodPhase::Pending, "", false)]
#[case::placed_and_starting(VOLUME_MESSAGE, PodPhase::Pending, "n1", false)]
#[case::running(VOLUME_MESSAGE, PodPhase::Running, "", false)]
#[case::unschedulable(VOLUME_MESSAGE, PodPhase::Pending, "", true)]
fn pods_pending_boundary(#[case] message: &str, #[case] phase: PodPhase, #[case] node: &str, #[case] fires: bool) {
    let mut p = pending("web-1", message);
    if message.is_empty() {
        p.unschedulable = None;
    }
    p.phase = phase;
    p.node = (!node.is_empty()).then(|| node.into());
    let view = view_with_pods(&three_nodes(), vec![p]);
    let f = audit_findings(&web(1, &hostname_spread("web")), &view);
    assert_eq!(of_rule(&f, PODS_PENDING).len(), usize::from(fires), "{f:#?}");
}

#[rstest]
#[case::tolerating_on_cordoned(true, true, true)]
#[case::tolerating_on_schedulable(true, false, false)]
#[case::not_tolerating_on_cordoned(false, true, false)]
fn pods_on_cordoned_nodes(#[case] tolerates: bool, #[case] cordoned: bool, #[case] fires: bool) {
    let mut p = pod("web-1", "web", "n1");
    p.tolerates_cordon = tolerates;
    let view = view_with_pods(&nodes(&[("n1", "", cordoned), ("n2", "", false)]), vec![p]);
    let f = audit_findings(&web(1, ""), &view);
    let c = of_rule(&f, CORDONED);
    assert_eq!(c.len(), usize::from(fires), "{f:#?}");
    if fires {
        assert_eq!(c[0].path, "spec.template.spec.tolerations");
        assert!(
            c[0].what.contains(
                "Deployment default/web has 1 pod on cordoned nodes (web-1 on n1) that tolerate the cordon taint"
            ),
            "{}",
            c[0].what
        );
        assert!(c[0].fix.contains("remove the toleration of node.kubernetes.io/unschedulable"), "{}", c[0].fix);
    }
}

#[test]
fn the_projection_reads_the_cordon_toleration_and_the_schedulers_reason() {
    use crate::core::model::live_pod::LivePod;
    use crate::core::view::PodOwner;
    let live: LivePod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web-1", "labels": {"app": "web"}},
        "spec": {"tolerations": [{"operator": "Exists"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": SPREAD_MESSAGE}]}
    }))
    .unwrap();
    let p = PodInfo::of(&live, PodOwner::Unmanaged);
    assert!(p.tolerates_cordon && p.node.is_none() && !p.ready && p.phase == PodPhase::Pending);
    assert_eq!(p.unschedulable.as_deref(), Some(SPREAD_MESSAGE));
    let rs = |name: &str| (name == "web-5d9").then(|| "web".into());
    let owner = |api_version: &str, kind: &str, name: &str| crate::core::model::live_pod::OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        controller: Some(true),
    };
    assert_eq!(
        PodOwner::resolve(Some(&owner("apps/v1", "ReplicaSet", "web-5d9")), false, rs),
        PodOwner::Workload(crate::core::model::Kind::Deployment, "web".into())
    );
    assert_eq!(PodOwner::resolve(Some(&owner("apps/v1", "ReplicaSet", "lone")), false, rs), PodOwner::Other);
    assert_eq!(PodOwner::resolve(Some(&owner("apps/v1", "DaemonSet", "agent")), false, rs), PodOwner::DaemonSet);
    assert_eq!(PodOwner::resolve(Some(&owner("v1", "Node", "n1")), false, rs), PodOwner::Mirror);
    assert_eq!(PodOwner::resolve(None, true, rs), PodOwner::Mirror);
    assert_eq!(PodOwner::resolve(None, false, rs), PodOwner::Unmanaged);
}

/// A PDB with neither field: the controller writes expected 0 and allows 0 however many pods are
/// healthy; the audit says so (and why), where before it took "expects nothing" for "blocks nothing".
#[test]
fn a_pdb_that_expects_nothing_while_its_pods_are_healthy_blocks_them() {
    let unset = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\n  namespace: default\nspec:\n  \
                 selector:\n    matchLabels:\n      app: web\nstatus:\n  disruptionsAllowed: 0\n  expectedPods: 0\n  \
                 currentHealthy: 2\n  desiredHealthy: 0\n";
    let view = view_with_pods(&web(2, ""), placed(&["n1", "n2"]));
    let f = audit_findings(unset, &view);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    for part in [
        "PodDisruptionBudget default/web (covering Deployment web) allows 0 disruptions now and expects no pods \
         although 2 of its pods are healthy",
        "it sets neither minAvailable nor maxUnavailable",
    ] {
        assert!(b[0].what.contains(part), "{part:?} not in: {}", b[0].what);
    }
    assert!(b[0].fix.contains("maxUnavailable: 1"), "{}", b[0].fix);
    // Boundary: the same status over no healthy pod protects nothing now.
    let mut pods = placed(&["n1", "n2"]);
    pods.iter_mut().for_each(|p| p.ready = false);
    let view = view_with_pods(&web(2, ""), pods);
    let quiet = unset.replace("currentHealthy: 2", "currentHealthy: 0");
    assert!(of_rule(&audit_findings(&quiet, &view), BLOCKED).is_empty());
}

/// A status older than the spec: the eviction API refuses every eviction until the controller
/// catches up.
#[test]
fn a_stale_status_blocks_every_eviction_and_is_said() {
    let stale = pdb_with_status(1, 1, 2, 2, 1)
        .replace("  namespace: default\n", "  namespace: default\n  generation: 3\n")
        .replace("status:\n", "status:\n  observedGeneration: 2\n");
    let view = view_with_pods(&web(2, ""), placed(&["n1", "n2"]));
    let f = audit_findings(&stale, &view);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert_eq!(b[0].path, "status.observedGeneration");
    assert!(b[0].what.contains("stale status (observedGeneration 2 < generation 3)"), "{}", b[0].what);
    // Current (observed = generation) and allowing one: nothing to say.
    let current = stale.replace("observedGeneration: 2", "observedGeneration: 3");
    assert!(of_rule(&audit_findings(&current, &view), BLOCKED).is_empty());
}

/// The apiserver creates every PDB with a zero status and no observedGeneration: no controller
/// has computed it, so it says nothing (neither blocked nor stale).
#[test]
fn the_zero_status_a_pdb_is_created_with_is_not_judged() {
    let created =
        pdb_with_status(1, 0, 0, 0, 0).replace("  namespace: default\n", "  namespace: default\n  generation: 1\n");
    let view = view_with_pods(&web(2, ""), placed(&["n1", "n2"]));
    assert!(of_rule(&audit_findings(&created, &view), BLOCKED).is_empty());
}

/// Blocked is what a drain meets: with every pod not Ready and unhealthyPodEvictionPolicy
/// AlwaysAllow, the eviction API lets each go without asking the budget, so nothing blocks
/// although the status allows 0; under IfHealthyBudget (the default) the same pods are refused.
#[test]
fn a_pdb_whose_pods_all_go_without_asking_is_not_blocked() {
    let mut pods = placed(&["n1", "n2"]);
    pods.iter_mut().for_each(|p| p.ready = false);
    let view = view_with_pods(&web(2, ""), pods);
    let if_healthy = pdb_with_status(1, 0, 2, 0, 1);
    assert_eq!(of_rule(&audit_findings(&if_healthy, &view), BLOCKED).len(), 1);
    let always = if_healthy.replace("  selector:", "  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:");
    assert!(of_rule(&audit_findings(&always, &view), BLOCKED).is_empty());
}

//! spread-zone-missing: a multi-replica workload on nodes of several zones, nothing spreading it
//! over them (live view only).

use crate::core::finding::Decision;
use crate::core::testing::*;
use rstest::rstest;

const RULE: &str = "spread-zone-missing";

/// A Node `name` in zone `zone` (no zone label when empty); `spec` is spliced into its spec.
fn node(name: &str, zone: &str, spec: &str) -> String {
    let zone = if zone.is_empty() { String::new() } else { format!("    topology.kubernetes.io/zone: {zone}\n") };
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n{zone}\
         spec:\n{}",
        indent(if spec.is_empty() { "{}" } else { spec }, 2)
    )
    .replace("spec:\n  {}\n", "spec: {}\n")
}

/// Two nodes in each of `zones`.
fn zones(zones: &[&str]) -> String {
    let nodes: Vec<String> =
        zones.iter().flat_map(|z| [node(&format!("{z}-1"), z, ""), node(&format!("{z}-2"), z, "")]).collect();
    nodes.join("---\n")
}

/// A spread (`what` = topologySpreadConstraints) on `key` against `app: <app>`.
fn spread(key: &str, app: &str) -> String {
    format!(
        "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: {key}\n  whenUnsatisfiable: ScheduleAnyway\n  \
         labelSelector:\n    matchLabels:\n      app: {app}\n"
    )
}

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// Web: `replicas` with a hostname spread, plus `pod`.
fn web(replicas: i32, pod: &str) -> String {
    deployment("web", &format!("replicas: {replicas}"), &format!("{}{pod}", spread(HOSTNAME, "web")))
}

#[test]
fn replicas_on_a_two_zone_cluster_without_a_zone_spread_warn() {
    let f = findings_in(&web(3, ""), &live_view(&zones(&["eu-west-1a", "eu-west-1b"])));
    let z = of_rule(&f, RULE);
    assert_eq!(z.len(), 1, "{f:#?}");
    let z = z[0];
    assert_eq!(z.action, Decision::Warn);
    assert_eq!(z.path, "spec.template.spec.topologySpreadConstraints");
    assert!(z.related.is_empty(), "{:?}", z.related);
    for part in [
        "Deployment web (replicas 3) runs at least 3 replicas and its pods can be scheduled in 2 zones (eu-west-1a, eu-west-1b)",
        "no topologySpreadConstraint and no pod anti-affinity on topology.kubernetes.io/zone",
        "that zone's outage takes them all",
    ] {
        assert!(z.what.contains(part), "{part:?} not in: {}", z.what);
    }
    assert!(
        z.fix.contains(
            "topologySpreadConstraint {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: \
             ScheduleAnyway, labelSelector: app=web}"
        ),
        "{}",
        z.fix
    );
}

/// The fix points beside a hostname spread only where the template has one (issue 51, item 5).
#[test]
fn the_fix_mentions_the_hostname_spread_only_when_there_is_one() {
    let view = live_view(&zones(&["eu-west-1a", "eu-west-1b"]));
    let with = findings_in(&web(3, ""), &view);
    assert!(of_rule(&with, RULE)[0].fix.ends_with("to the pod template, beside the one on kubernetes.io/hostname."));
    let without = findings_in(&deployment("web", "replicas: 3", ""), &view);
    let fix = &of_rule(&without, RULE)[0].fix;
    assert!(fix.ends_with("labelSelector: app=web} to the pod template."), "{fix}");
    assert!(!fix.contains("beside"), "{fix}");
}

#[rstest]
#[case::one_replica(1, &["a", "b"], false)]
#[case::two_replicas(2, &["a", "b"], true)]
#[case::one_zone(3, &["a"], false)]
#[case::three_zones(3, &["a", "b", "c"], true)]
fn boundary(#[case] replicas: i32, #[case] zone_names: &[&str], #[case] fires: bool) {
    let f = findings_in(&web(replicas, ""), &live_view(&zones(zone_names)));
    assert_eq!(of_rule(&f, RULE).len(), usize::from(fires), "{f:#?}");
}

#[test]
fn many_zones_are_counted_and_the_first_named() {
    let names = ["z1", "z2", "z3", "z4", "z5", "z6", "z7"];
    let f = findings_in(&web(3, ""), &live_view(&zones(&names)));
    let z = of_rule(&f, RULE);
    assert_eq!(z.len(), 1, "{f:#?}");
    assert!(z[0].what.contains("in 7 zones (z1, z2, z3, z4, z5 and 2 more)"), "{}", z[0].what);
}

#[rstest]
#[case::zone_spread(spread(ZONE, "web"))]
#[case::zone_spread_over_other_pods_is_the_selector_rules_business(spread(ZONE, "db"))]
#[case::beta_zone_key(spread("failure-domain.beta.kubernetes.io/zone", "web"))]
#[case::required_anti_affinity(format!("affinity:\n  podAntiAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n    - topologyKey: {ZONE}\n      labelSelector:\n        matchLabels:\n          app: web\n"))]
#[case::preferred_anti_affinity(format!("affinity:\n  podAntiAffinity:\n    preferredDuringSchedulingIgnoredDuringExecution:\n    - weight: 100\n      podAffinityTerm:\n        topologyKey: {ZONE}\n        labelSelector:\n          matchLabels:\n            app: web\n"))]
fn a_spread_over_zones_silences_it(#[case] pod: String) {
    // Without the hostname spread `web` has (one topologySpreadConstraints per pod spec).
    let f = findings_in(&deployment("web", "replicas: 3", &pod), &live_view(&zones(&["a", "b"])));
    assert!(of_rule(&f, RULE).is_empty(), "{f:#?}");
}

#[test]
fn an_anti_affinity_against_other_pods_does_not_spread_its_own() {
    let pod = format!(
        "affinity:\n  podAntiAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n    - topologyKey: {ZONE}\n      \
         labelSelector:\n        matchLabels:\n          app: db\n"
    );
    let f = findings_in(&web(3, &pod), &live_view(&zones(&["a", "b"])));
    assert_eq!(of_rule(&f, RULE).len(), 1, "{f:#?}");
}

/// Nodes a-1, a-2 in zone a, and `b` in zone b.
fn a_and(b: &str) -> String {
    format!("{}---\n{b}", zones(&["a"]))
}

#[rstest]
#[case::cordoned(node("b-1", "b", "unschedulable: true"), "", false)]
#[case::tainted(node("b-1", "b", "taints:\n- {key: dedicated, value: gpu, effect: NoSchedule}"), "", false)]
#[case::tainted_and_tolerated(
    node("b-1", "b", "taints:\n- {key: dedicated, value: gpu, effect: NoSchedule}"),
    "tolerations:\n- {key: dedicated, operator: Exists}\n",
    true
)]
#[case::prefer_no_schedule_only(
    node("b-1", "b", "taints:\n- {key: dedicated, value: gpu, effect: PreferNoSchedule}"),
    "",
    true
)]
#[case::no_zone_label(node("b-1", "", ""), "", false)]
#[case::node_selector_pins_zone_a(node("b-1", "b", ""), "nodeSelector:\n  topology.kubernetes.io/zone: a\n", false)]
#[case::node_affinity_pins_zone_a(
    node("b-1", "b", ""),
    "affinity:\n  nodeAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n      nodeSelectorTerms:\n      - matchExpressions:\n        - {key: topology.kubernetes.io/zone, operator: In, values: [a]}\n",
    false
)]
#[case::node_affinity_allows_both(
    node("b-1", "b", ""),
    "affinity:\n  nodeAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n      nodeSelectorTerms:\n      - matchExpressions:\n        - {key: topology.kubernetes.io/zone, operator: In, values: [a]}\n      - matchExpressions:\n        - {key: topology.kubernetes.io/zone, operator: NotIn, values: [a]}\n",
    true
)]
#[case::node_affinity_by_name(
    node("b-1", "b", ""),
    "affinity:\n  nodeAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n      nodeSelectorTerms:\n      - matchFields:\n        - {key: metadata.name, operator: NotIn, values: [b-1]}\n",
    false
)]
fn only_nodes_the_pods_can_use_count(#[case] b: String, #[case] pod: &str, #[case] fires: bool) {
    let f = findings_in(&web(3, pod), &live_view(&a_and(&b)));
    assert_eq!(of_rule(&f, RULE).len(), usize::from(fires), "{f:#?}");
}

#[test]
fn the_floor_comes_from_an_autoscaler() {
    let view = format!("{}---\n{}", zones(&["a", "b"]), hpa("web", "web", Some(2), 6));
    let f = findings_in(&web(1, ""), &live_view(&view));
    let z = of_rule(&f, RULE);
    assert_eq!(z.len(), 1, "{f:#?}");
    assert!(
        z[0].what.contains("Deployment web (replicas 1, HPA web min 2 max 6) runs at least 2 replicas"),
        "{}",
        z[0].what
    );
    assert_eq!(
        z[0].related,
        vec![crate::core::model::ObjectRef::new(crate::core::model::Kind::HorizontalPodAutoscaler, "default", "web")]
    );
    let view = format!("{}---\n{}", zones(&["a", "b"]), hpa("web", "web", None, 6));
    assert!(of_rule(&findings_in(&web(3, ""), &live_view(&view)), RULE).is_empty(), "floor 1 from the HPA");
}

#[test]
fn without_the_nodes_it_never_fires() {
    let nodes = zones(&["a", "b"]);
    for complete in [false, true] {
        let f = findings_in(&web(3, ""), &view(&nodes, complete));
        assert!(of_rule(&f, RULE).is_empty(), "{f:#?}");
    }
}

#[test]
fn a_statefulset_is_a_workload_too() {
    let sts = workload("StatefulSet", "db", "replicas: 3\nserviceName: db", "");
    let f = findings_in(&sts, &live_view(&zones(&["a", "b"])));
    let z = of_rule(&f, RULE);
    assert_eq!(z.len(), 1, "{f:#?}");
    assert!(z[0].what.starts_with("StatefulSet db (replicas 3)"), "{}", z[0].what);
}

//! replicas-colocated, host-network-colocation, spread-unsatisfiable.

use crate::core::finding::Decision;
use crate::core::model::{Kind, ObjectRef};
use crate::core::testing::*;
use rstest::rstest;

fn web() -> ObjectRef {
    ObjectRef::new(Kind::Deployment, "default", "web")
}

fn web_hpa() -> ObjectRef {
    ObjectRef::new(Kind::HorizontalPodAutoscaler, "default", "web")
}

/// A hostname spread against web's own pods.
fn hostname_spread(when: &str) -> String {
    format!(
        "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  whenUnsatisfiable: {when}\n  \
         labelSelector:\n    matchLabels:\n      app: web\n"
    )
}

/// A pod anti-affinity term (`required` or `preferred`) on `key` against pods `app: <app>`.
fn anti_affinity(required: bool, key: &str, app: &str) -> String {
    let term = format!("topologyKey: {key}\nlabelSelector:\n  matchLabels:\n    app: {app}\n");
    if required {
        format!(
            "affinity:\n  podAntiAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n    - {}",
            indent(&term, 6).trim_start()
        )
    } else {
        format!(
            "affinity:\n  podAntiAffinity:\n    preferredDuringSchedulingIgnoredDuringExecution:\n    - weight: 100\n      \
             podAffinityTerm:\n{}",
            indent(&term, 8)
        )
    }
}

// ---- replicas-colocated ----

#[test]
fn two_replicas_with_nothing_keeping_them_apart_warn() {
    let f = findings(&deployment("web", "replicas: 2", ""), "", false);
    let c = of_rule(&f, "replicas-colocated");
    assert_eq!(c.len(), 1, "{f:#?}");
    let c = c[0];
    assert_eq!(c.action, Decision::Warn);
    assert_eq!(c.path, "spec.template.spec.topologySpreadConstraints");
    assert_eq!(c.anchor, web());
    assert!(c.related.is_empty(), "{:?}", c.related);
    assert!(c.what.contains("Deployment web (replicas 2)"), "{}", c.what);
    assert!(c.what.contains("at least 2 replicas"), "{}", c.what);
    assert!(c.what.contains("kubernetes.io/hostname") && c.what.contains("anti-affinity"), "{}", c.what);
    assert!(c.what.contains("node failure or drain takes both"), "{}", c.what);
    assert!(
        c.fix.contains("maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway")
            && c.fix.contains("labelSelector: app=web"),
        "{}",
        c.fix
    );
}

#[rstest]
#[case::one_replica("replicas: 1")]
#[case::replicas_unset_defaults_to_one("")]
#[case::scaled_to_zero("replicas: 0")]
fn floor_of_one_or_less_does_not_warn(#[case] spec: &str) {
    let f = findings(&deployment("web", spec, ""), "", false);
    assert!(of_rule(&f, "replicas-colocated").is_empty(), "{f:#?}");
}

#[test]
fn floor_from_an_hpa_min_replicas_over_one_replica() {
    let f = findings(&deployment("web", "replicas: 1", ""), &hpa("web", "web", Some(2), 5), false);
    let c = of_rule(&f, "replicas-colocated");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert_eq!(c[0].path, "spec.template.spec.topologySpreadConstraints");
    assert_eq!(c[0].related, vec![web_hpa()]);
    assert_eq!(c[0].anchor, web());
    assert!(c[0].what.contains("Deployment web (replicas 1, HPA web min 2 max 5)"), "{}", c[0].what);
    assert!(c[0].what.contains("at least 2 replicas"), "{}", c[0].what);
}

#[test]
fn hpa_floor_of_one_over_three_replicas_does_not_warn() {
    // The HPA owns the replica count: its floor of 1 is the floor.
    let f = findings(&deployment("web", "replicas: 3", ""), &hpa("web", "web", None, 5), false);
    assert!(of_rule(&f, "replicas-colocated").is_empty(), "{f:#?}");
}

#[rstest]
#[case::preferred_anti_affinity_on_hostname(anti_affinity(false, "kubernetes.io/hostname", "web"))]
#[case::required_anti_affinity_on_hostname(anti_affinity(true, "kubernetes.io/hostname", "web"))]
#[case::preferred_anti_affinity_on_zone(anti_affinity(false, "topology.kubernetes.io/zone", "web"))]
#[case::hostname_spread_schedule_anyway(hostname_spread("ScheduleAnyway"))]
#[case::hostname_spread_do_not_schedule(hostname_spread("DoNotSchedule"))]
fn something_keeping_replicas_apart_silences_it(#[case] pod: String) {
    let f = findings(&deployment("web", "replicas: 3", &pod), "", false);
    assert!(of_rule(&f, "replicas-colocated").is_empty(), "{f:#?}");
}

#[rstest]
#[case::anti_affinity_against_other_pods(anti_affinity(true, "kubernetes.io/hostname", "db"))]
#[case::preferred_against_other_pods(anti_affinity(false, "kubernetes.io/hostname", "db"))]
#[case::zone_spread_only(edit(&hostname_spread("ScheduleAnyway"), "kubernetes.io/hostname", "topology.kubernetes.io/zone"))]
#[case::hostname_spread_over_other_pods(edit(&hostname_spread("ScheduleAnyway"), "app: web", "app: db"))]
fn what_does_not_keep_its_own_replicas_apart_still_warns(#[case] pod: String) {
    let f = findings(&deployment("web", "replicas: 3", &pod), "", false);
    let c = of_rule(&f, "replicas-colocated");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert!(c[0].what.contains("at least 3 replicas"), "{}", c[0].what);
}

#[test]
fn found_from_the_hpa_side() {
    let f = findings(&hpa("web", "web", Some(3), 6), &deployment("web", "replicas: 1", ""), false);
    let c = of_rule(&f, "replicas-colocated");
    assert_eq!(c.len(), 1, "{f:#?}");
    let c = c[0];
    assert_eq!(c.action, Decision::Warn);
    assert_eq!(c.object, web_hpa());
    assert_eq!(c.path, "spec.minReplicas");
    assert_eq!(c.anchor, web(), "the finding is about the Deployment");
    assert_eq!(c.related, vec![web()]);
    assert!(c.what.contains("Deployment web (replicas 1, HPA web min 3 max 6)"), "{}", c.what);
    assert!(c.what.contains("at least 3 replicas"), "{}", c.what);
}

#[test]
fn hpa_side_none_when_the_deployment_spreads_or_the_floor_is_one() {
    let spread = deployment("web", "replicas: 1", &hostname_spread("ScheduleAnyway"));
    let f = findings(&hpa("web", "web", Some(3), 6), &spread, false);
    assert!(of_rule(&f, "replicas-colocated").is_empty(), "{f:#?}");
    let f = findings(&hpa("web", "web", Some(1), 6), &deployment("web", "replicas: 1", ""), false);
    assert!(of_rule(&f, "replicas-colocated").is_empty(), "{f:#?}");
}

// ---- host-network-colocation ----

#[test]
fn host_network_with_two_replicas_denies() {
    let f = findings(&deployment("web", "replicas: 2", "hostNetwork: true"), "", false);
    let h = of_rule(&f, "host-network-colocation");
    assert_eq!(h.len(), 1, "{f:#?}");
    let h = h[0];
    assert_eq!(h.action, Decision::Deny);
    assert_eq!(h.path, "spec.template.spec.hostNetwork");
    assert_eq!(h.anchor, web());
    assert!(h.related.is_empty());
    assert!(h.what.contains("Deployment web (replicas 2)"), "{}", h.what);
    assert!(h.what.contains("hostNetwork: true") && h.what.contains("can run 2 replicas"), "{}", h.what);
    assert!(h.what.contains("host ports") && h.what.contains("crash-loops"), "{}", h.what);
    assert!(h.fix.contains("required pod anti-affinity on kubernetes.io/hostname"), "{}", h.fix);
    assert!(h.fix.contains("whenUnsatisfiable: DoNotSchedule"), "{}", h.fix);
}

#[rstest]
#[case::required_anti_affinity_on_hostname(anti_affinity(true, "kubernetes.io/hostname", "web"), false)]
#[case::do_not_schedule_hostname_spread(hostname_spread("DoNotSchedule"), false)]
#[case::schedule_anyway_spread(hostname_spread("ScheduleAnyway"), true)]
#[case::preferred_anti_affinity(anti_affinity(false, "kubernetes.io/hostname", "web"), true)]
#[case::required_anti_affinity_on_zone(anti_affinity(true, "topology.kubernetes.io/zone", "web"), true)]
#[case::required_anti_affinity_against_other_pods(anti_affinity(true, "kubernetes.io/hostname", "db"), true)]
fn host_network_needs_a_hard_one_per_node_rule(#[case] rule: String, #[case] denies: bool) {
    let pod = format!("hostNetwork: true\n{rule}");
    let f = findings(&deployment("web", "replicas: 2", &pod), "", false);
    let h = of_rule(&f, "host-network-colocation");
    assert_eq!(h.len(), usize::from(denies), "{f:#?}");
    if denies {
        assert_eq!(h[0].action, Decision::Deny);
    }
}

#[test]
fn host_network_ceiling_from_an_hpa() {
    let dep = deployment("web", "replicas: 1", "hostNetwork: true");
    // Deployment side: the HPA lets it run 2.
    let f = findings(&dep, &hpa("web", "web", None, 2), false);
    let h = of_rule(&f, "host-network-colocation");
    assert_eq!(h.len(), 1, "{f:#?}");
    assert_eq!(h[0].path, "spec.template.spec.hostNetwork");
    assert_eq!(h[0].related, vec![web_hpa()]);
    assert!(h[0].what.contains("can run 2 replicas") && h[0].what.contains("HPA web min 1 max 2"), "{}", h[0].what);
    assert!(of_rule(&f, "replicas-colocated").is_empty(), "the floor is 1");
    // HPA side.
    let f = findings(&hpa("web", "web", None, 2), &dep, false);
    let h = of_rule(&f, "host-network-colocation");
    assert_eq!(h.len(), 1, "{f:#?}");
    assert_eq!(h[0].object, web_hpa());
    assert_eq!(h[0].path, "spec.maxReplicas");
    assert_eq!(h[0].anchor, web());
    assert_eq!(h[0].related, vec![web()]);
}

#[rstest]
#[case::one_replica_no_hpa("replicas: 1", "hostNetwork: true", None)]
#[case::replicas_unset_no_hpa("", "hostNetwork: true", None)]
#[case::hpa_max_one("replicas: 1", "hostNetwork: true", Some(1))]
#[case::host_network_false("replicas: 2", "hostNetwork: false", None)]
#[case::host_network_unset("replicas: 2", "", None)]
fn host_network_does_not_fire(#[case] spec: &str, #[case] pod: &str, #[case] hpa_max: Option<i32>) {
    let view = hpa_max.map(|max| hpa("web", "web", None, max)).unwrap_or_default();
    let f = findings(&deployment("web", spec, pod), &view, false);
    assert!(of_rule(&f, "host-network-colocation").is_empty(), "{f:#?}");
}

// ---- spread-unsatisfiable ----

/// A Node labelled with its hostname and `pool: b` when its name ends in `b`, else `pool: a`.
fn node(name: &str, extra_spec: &str) -> String {
    let pool = if name.ends_with('b') { "b" } else { "a" };
    let spec =
        if extra_spec.is_empty() { "spec: {}\n".to_string() } else { format!("spec:\n{}", indent(extra_spec, 2)) };
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n    pool: {pool}\n{spec}"
    )
}

/// `n` plain schedulable nodes n1a, n2a, ...
fn nodes(n: usize) -> Vec<String> {
    (1..=n).map(|i| node(&format!("n{i}a"), "")).collect()
}

fn cluster(nodes: &[String]) -> String {
    nodes.join("\n---\n")
}

const AFFINITY_PATH: &str =
    "spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]";

fn one_per_node(replicas: i32, extra_pod: &str) -> String {
    deployment(
        "web",
        &format!("replicas: {replicas}"),
        &format!("{}{extra_pod}", anti_affinity(true, "kubernetes.io/hostname", "web")),
    )
}

#[test]
fn required_anti_affinity_over_too_few_nodes_warns() {
    let f = findings_in(&one_per_node(4, ""), &live_view(&cluster(&nodes(3))));
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    let u = u[0];
    assert_eq!(u.action, Decision::Warn);
    assert_eq!(u.path, AFFINITY_PATH);
    assert_eq!(u.anchor, web());
    assert!(u.related.is_empty());
    assert!(u.what.contains("Deployment web (replicas 4)") && u.what.contains("can run 4 replicas"), "{}", u.what);
    assert!(u.what.contains("3 schedulable nodes"), "{}", u.what);
    assert!(u.what.contains("required pod anti-affinity on kubernetes.io/hostname"), "{}", u.what);
    assert!(u.what.contains("at most 3 can be placed") && u.what.contains("Pending"), "{}", u.what);
    assert!(
        u.fix.contains("lower replicas") && u.fix.contains("maxReplicas") && u.fix.contains("add nodes"),
        "{}",
        u.fix
    );
}

#[rstest]
#[case::ceiling_equals_capacity(3, 3, false)]
#[case::ceiling_below_capacity(2, 3, false)]
#[case::one_above(4, 3, true)]
#[case::no_nodes_at_all(1, 0, false)]
#[case::no_nodes_at_all_many_replicas(5, 0, false)]
#[case::one_node(2, 1, true)]
fn required_anti_affinity_boundary(#[case] replicas: i32, #[case] n: usize, #[case] fires: bool) {
    let f = findings_in(&one_per_node(replicas, ""), &live_view(&cluster(&nodes(n))));
    assert_eq!(of_rule(&f, "spread-unsatisfiable").len(), usize::from(fires), "{f:#?}");
}

#[test]
fn cordoned_and_untolerated_tainted_nodes_do_not_count() {
    let mut all = nodes(3);
    all.push(node("cordoned", "unschedulable: true"));
    all.push(node("gpu", "taints:\n- {key: dedicated, value: gpu, effect: NoSchedule}"));
    all.push(node("evicting", "taints:\n- {key: dedicated, value: gpu, effect: NoExecute}"));
    let f = findings_in(&one_per_node(4, ""), &live_view(&cluster(&all)));
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    assert!(u[0].what.contains("3 schedulable nodes") && u[0].what.contains("at most 3"), "{}", u[0].what);
}

#[test]
fn a_prefer_no_schedule_taint_does_not_exclude_a_node() {
    let mut all = nodes(3);
    all.push(node("soft", "taints:\n- {key: dedicated, value: gpu, effect: PreferNoSchedule}"));
    let f = findings_in(&one_per_node(4, ""), &live_view(&cluster(&all)));
    assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{f:#?}");
}

#[rstest]
#[case::equal("- {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}", true)]
#[case::equal_by_default("- {key: dedicated, value: gpu}", true)]
#[case::exists_key("- {key: dedicated, operator: Exists}", true)]
#[case::exists_everything("- {operator: Exists}", true)]
#[case::other_value("- {key: dedicated, operator: Equal, value: cpu, effect: NoSchedule}", false)]
#[case::other_key("- {key: team, operator: Exists}", false)]
#[case::other_effect("- {key: dedicated, operator: Exists, effect: NoExecute}", false)]
fn a_toleration_makes_a_tainted_node_count(#[case] toleration: &str, #[case] tolerated: bool) {
    let mut all = nodes(3);
    all.push(node("gpu", "taints:\n- {key: dedicated, value: gpu, effect: NoSchedule}"));
    let pod = format!("\ntolerations:\n{toleration}\n");
    let f = findings_in(&one_per_node(4, &pod), &live_view(&cluster(&all)));
    // 4 replicas: placeable on 4 nodes when the gpu node counts, not on 3.
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.is_empty(), tolerated, "{f:#?}");
}

#[test]
fn a_node_selector_narrows_the_nodes() {
    // n1a, n2a in pool a; n3b in pool b.
    let all = vec![node("n1a", ""), node("n2a", ""), node("n3b", "")];
    let f = findings_in(&one_per_node(3, "\nnodeSelector:\n  pool: a\n"), &live_view(&cluster(&all)));
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    assert!(u[0].what.contains("2 schedulable nodes") && u[0].what.contains("at most 2"), "{}", u[0].what);
    let f = findings_in(&one_per_node(3, ""), &live_view(&cluster(&all)));
    assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{f:#?}");
}

#[test]
fn the_ceiling_comes_from_an_hpa() {
    let view = format!("{}\n---\n{}", cluster(&nodes(3)), hpa("web", "web", Some(2), 4));
    let f = findings_in(&one_per_node(2, ""), &live_view(&view));
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    assert!(u[0].what.contains("can run 4 replicas") && u[0].what.contains("HPA web min 2 max 4"), "{}", u[0].what);
}

fn min_domains_spread(replicas: i32, max_skew: i32, min_domains: i32, when: &str) -> String {
    deployment(
        "web",
        &format!("replicas: {replicas}"),
        &format!(
            "topologySpreadConstraints:\n- maxSkew: {max_skew}\n  minDomains: {min_domains}\n  topologyKey: \
             kubernetes.io/hostname\n  whenUnsatisfiable: {when}\n  labelSelector:\n    matchLabels:\n      app: web\n"
        ),
    )
}

#[test]
fn min_domains_above_the_node_count_caps_each_node_at_max_skew() {
    let f = findings_in(&min_domains_spread(4, 1, 5, "DoNotSchedule"), &live_view(&cluster(&nodes(3))));
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    let u = u[0];
    assert_eq!(u.action, Decision::Warn);
    assert_eq!(u.path, "spec.template.spec.topologySpreadConstraints[0].minDomains");
    assert!(u.what.contains("can run 4 replicas") && u.what.contains("3 schedulable nodes"), "{}", u.what);
    assert!(u.what.contains("minDomains 5") && u.what.contains("maxSkew 1"), "{}", u.what);
    assert!(u.what.contains("at most 3 can be placed"), "{}", u.what);
}

#[rstest]
#[case::ceiling_equals_capacity(3, 1, 5, "DoNotSchedule", false)]
#[case::max_skew_two_holds_six(6, 2, 5, "DoNotSchedule", false)]
#[case::max_skew_two_over_six(7, 2, 5, "DoNotSchedule", true)]
#[case::min_domains_equal_to_nodes(10, 1, 3, "DoNotSchedule", false)]
#[case::schedule_anyway_is_soft(10, 1, 5, "ScheduleAnyway", false)]
fn min_domains_boundary(
    #[case] replicas: i32,
    #[case] max_skew: i32,
    #[case] min_domains: i32,
    #[case] when: &str,
    #[case] fires: bool,
) {
    let f = findings_in(&min_domains_spread(replicas, max_skew, min_domains, when), &live_view(&cluster(&nodes(3))));
    assert_eq!(of_rule(&f, "spread-unsatisfiable").len(), usize::from(fires), "{f:#?}");
}

#[test]
fn without_knowledge_of_nodes_it_never_fires() {
    let view_yaml = cluster(&nodes(1));
    for subject in [one_per_node(10, ""), min_domains_spread(10, 1, 5, "DoNotSchedule")] {
        for complete in [false, true] {
            let f = findings_in(&subject, &view(&view_yaml, complete));
            assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{f:#?}");
        }
        // The same objects with nodes known do fire: the view flag is what silences it.
        let f = findings_in(&subject, &live_view(&view_yaml));
        assert_eq!(of_rule(&f, "spread-unsatisfiable").len(), 1, "{f:#?}");
    }
}

// ---- spread-unsatisfiable on empty and elastic clusters (issue 14, item 7) ----

/// What the issue saw on a fresh apiserver: 3 replicas, an ordinary DoNotSchedule hostname spread
/// (no minDomains), no Node yet. Nothing can be reasoned: no finding, and none names minDomains.
#[test]
fn an_ordinary_hard_hostname_spread_on_a_cluster_without_nodes_is_silent() {
    let spread = deployment("web", "replicas: 3", &hostname_spread("DoNotSchedule"));
    for view_yaml in [String::new(), cluster(&nodes(1)), cluster(&nodes(3))] {
        let f = findings_in(&spread, &live_view(&view_yaml));
        assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{view_yaml}: {f:#?}");
    }
}

#[test]
fn an_unset_min_domains_is_no_bound_and_never_named() {
    // 10 replicas, maxSkew 1, no minDomains, on 1 or 3 nodes: the skew is counted over the nodes
    // there are, so every replica can be placed.
    let spread = deployment(
        "web",
        "replicas: 10",
        "topologySpreadConstraints:\n- {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: \
         DoNotSchedule, labelSelector: {matchLabels: {app: web}}}\n",
    );
    for n in [1, 3] {
        let f = findings_in(&spread, &live_view(&cluster(&nodes(n))));
        assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{n} nodes: {f:#?}");
    }
    // With anti-affinity as well, the finding is the anti-affinity's: minDomains is not named.
    let both = deployment(
        "web",
        "replicas: 4",
        &format!(
            "{}topologySpreadConstraints:\n- {{maxSkew: 1, topologyKey: kubernetes.io/hostname, \
             whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: web}}}}}}\n",
            anti_affinity(true, "kubernetes.io/hostname", "web")
        ),
    );
    let f = findings_in(&both, &live_view(&cluster(&nodes(3))));
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    assert_eq!(u[0].path, AFFINITY_PATH);
    assert!(!u[0].message().contains("minDomains"), "names a field the object does not set: {}", u[0].message());
}

#[test]
fn no_node_the_pods_may_use_is_silent() {
    // Nodes exist, but none in pool c (a pool that scales from zero, say): nothing to count against.
    let f = findings_in(&one_per_node(3, "\nnodeSelector:\n  pool: c\n"), &live_view(&cluster(&nodes(3))));
    assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{f:#?}");
    // Every node cordoned: the same.
    let cordoned: Vec<_> = (1..=3).map(|i| node(&format!("c{i}a"), "unschedulable: true")).collect();
    let f = findings_in(&one_per_node(3, ""), &live_view(&cluster(&cordoned)));
    assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{f:#?}");
}

#[test]
fn without_a_node_autoscaler_the_message_does_not_mention_one() {
    let f = findings_in(&one_per_node(4, ""), &live_view(&cluster(&nodes(3))));
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    assert!(!u[0].message().contains("autoscaler is present"), "{}", u[0].message());
    assert!(!u[0].message().contains("today"), "{}", u[0].message());
}

/// A Deployment `name` in `namespace` with pods labelled `labels` (a YAML flow mapping).
fn system_deployment(namespace: &str, name: &str, labels: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  \
         replicas: 1\n  selector: {{matchLabels: {labels}}}\n  template:\n    metadata: {{labels: {labels}}}\n    \
         spec: {{containers: [{{name: c, image: registry.example/c:1}}]}}\n"
    )
}

#[rstest]
#[case::karpenter_node(node("k1a", "").replace("pool: a", "pool: a\n    karpenter.sh/nodepool: default"), "Karpenter: node k1a is labelled karpenter.sh/nodepool")]
#[case::karpenter_alpha_node(node("k1a", "").replace("pool: a", "pool: a\n    karpenter.sh/provisioner-name: default"), "Karpenter: node k1a is labelled karpenter.sh/provisioner-name")]
#[case::karpenter_deployment(
    system_deployment("kube-system", "karpenter", "{app.kubernetes.io/name: karpenter}"),
    "Karpenter: Deployment kube-system/karpenter"
)]
#[case::karpenter_namespace(
    system_deployment("karpenter", "karpenter", "{app: karpenter}"),
    "Karpenter: Deployment karpenter/karpenter"
)]
#[case::cluster_autoscaler_by_name(
    system_deployment("kube-system", "cluster-autoscaler", "{k8s-app: ca}"),
    "cluster-autoscaler: Deployment kube-system/cluster-autoscaler"
)]
#[case::cluster_autoscaler_by_label(
    system_deployment("kube-system", "ca", "{app.kubernetes.io/name: aws-cluster-autoscaler}"),
    "cluster-autoscaler: Deployment kube-system/ca"
)]
fn with_a_node_autoscaler_the_bound_is_todays_nodes(#[case] autoscaler: String, #[case] named: &str) {
    let view_yaml = format!("{}\n---\n{autoscaler}", cluster(&nodes(3)));
    // A Karpenter node is a fourth schedulable node.
    let today = if autoscaler.contains("kind: Node") { 4 } else { 3 };
    let f = findings_in(&one_per_node(5, ""), &live_view(&view_yaml));
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    let u = u[0];
    assert_eq!(u.action, Decision::Warn);
    assert_eq!(u.path, AFFINITY_PATH);
    let msg = u.message();
    for part in [
        "can run 5 replicas",
        &format!("{today} schedulable nodes today"),
        &format!("at most {today} can be placed on today's nodes"),
        &format!("A node autoscaler is present ({named})"),
        "the bound is today's nodes",
        "Fix: make sure the autoscaler may add nodes these pods can use",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
}

#[test]
fn an_autoscaler_elsewhere_or_by_another_name_is_not_recognised() {
    // A Deployment called cluster-autoscaler in an application namespace is not looked for, and
    // one in kube-system named otherwise is not one.
    for other in [
        system_deployment("default", "cluster-autoscaler", "{app: cluster-autoscaler}"),
        system_deployment("kube-system", "coredns", "{k8s-app: kube-dns}"),
    ] {
        let view_yaml = format!("{}\n---\n{other}", cluster(&nodes(3)));
        let f = findings_in(&one_per_node(4, ""), &live_view(&view_yaml));
        let u = of_rule(&f, "spread-unsatisfiable");
        assert_eq!(u.len(), 1, "{f:#?}");
        assert!(!u[0].what.contains("autoscaler is present"), "{}", u[0].what);
    }
}

#[test]
fn with_a_node_autoscaler_within_todays_nodes_is_still_silent() {
    let view_yaml =
        format!("{}\n---\n{}", cluster(&nodes(3)), system_deployment("kube-system", "karpenter", "{app: karpenter}"));
    let f = findings_in(&one_per_node(3, ""), &live_view(&view_yaml));
    assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{f:#?}");
}

// ---- what the messages name (issue 16) ----

/// A hostname spread without a selector is named, and the finding points at it.
#[test]
fn a_hostname_spread_without_a_selector_is_named_and_pointed_at() {
    let pod = "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  whenUnsatisfiable: ScheduleAnyway\n";
    let f = findings(&deployment("web", "replicas: 2", pod), "", false);
    let c = of_rule(&f, "replicas-colocated");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert_eq!(c[0].path, "spec.template.spec.topologySpreadConstraints[0]");
    assert!(
        c[0].what.contains("topologySpreadConstraints[0] on kubernetes.io/hostname has no labelSelector"),
        "{}",
        c[0].what
    );
    assert!(!c[0].what.contains("no topologySpreadConstraint on"), "it has one: {}", c[0].what);
    assert!(
        c[0].fix.contains("set topologySpreadConstraints[0].labelSelector to the workload's own selector (app=web)"),
        "{}",
        c[0].fix
    );
}

/// A spread or an anti-affinity against other pods is named, and pointed at.
#[rstest]
#[case::spread_on_other_pods(
    "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  whenUnsatisfiable: ScheduleAnyway\n  labelSelector:\n    matchLabels:\n      app: db\n",
    "spec.template.spec.topologySpreadConstraints[0]",
    "topologySpreadConstraints[0] on kubernetes.io/hostname selects other pods than its own (app=web)"
)]
#[case::required_anti_affinity_on_other_pods(
    &anti_affinity(true, "kubernetes.io/hostname", "db"),
    "spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector",
    "its required pod anti-affinity [0] selects other pods than its own (app=web)"
)]
#[case::preferred_anti_affinity_on_other_pods(
    &anti_affinity(false, "topology.kubernetes.io/zone", "db"),
    "spec.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.labelSelector",
    "its preferred pod anti-affinity [0] selects other pods than its own (app=web)"
)]
fn what_does_not_keep_replicas_apart_is_named(#[case] pod: &str, #[case] path: &str, #[case] why: &str) {
    let f = findings(&deployment("web", "replicas: 3", pod), "", false);
    let c = of_rule(&f, "replicas-colocated");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert_eq!(c[0].path, path);
    assert!(c[0].what.contains(why), "{}", c[0].what);
    assert!(!c[0].what.contains("no pod anti-affinity against"), "{}", c[0].what);
}

/// hostNetwork, as the scheduler sees it (issue 41 item 5): a declared port (with hostNetwork every
/// containerPort is a host port, or a hostPort) in any container makes the NodePorts filter place
/// the replicas on distinct nodes, so nothing co-locates them and neither host-network-colocation
/// nor replicas-colocated fires; with no declared port, the scheduler may co-locate two and the
/// second fails to bind: the deny stays, naming the field, the count and the fixes.
#[rstest]
#[case::no_ports_at_all("- name: app\n  image: nginx\n", true)]
#[case::two_containers_none_declares("- name: app\n  image: nginx\n- name: side\n  image: busybox\n", true)]
#[case::container_port_under_host_network("- name: app\n  image: nginx\n  ports:\n  - containerPort: 9808\n", false)]
#[case::host_port("- name: app\n  image: nginx\n  ports:\n  - containerPort: 80\n    hostPort: 8080\n", false)]
#[case::one_container_declares_one_not(
    "- name: app\n  image: nginx\n- name: probe\n  image: livenessprobe\n  ports:\n  - containerPort: 29652\n",
    false
)]
fn host_network_denies_only_what_the_scheduler_may_co_locate(#[case] containers: &str, #[case] denies: bool) {
    let pod = format!("hostNetwork: true\ncontainers:\n{containers}");
    let f = findings(&deployment("web", "replicas: 3", &pod), "", false);
    let h = of_rule(&f, "host-network-colocation");
    assert_eq!(h.len(), usize::from(denies), "{f:#?}");
    assert_eq!(of_rule(&f, "replicas-colocated").len(), usize::from(denies), "{f:#?}");
    let Some(h) = h.first() else { return };
    assert_eq!(h.action, Decision::Deny);
    assert_eq!(h.path, "spec.template.spec.hostNetwork");
    assert!(h.what.contains("hostNetwork: true") && h.what.contains("can run 3 replicas"), "{}", h.what);
    assert!(h.what.contains("no container declares a port (containerPort)"), "{}", h.what);
    assert!(h.what.contains("fails to bind") && h.what.contains("crash-loops"), "{}", h.what);
    assert!(!h.what.contains("Pending") && !h.what.contains("declared host port"), "{}", h.what);
    assert!(h.fix.contains("declare the ports the containers listen on (ports[].containerPort"), "{}", h.fix);
    assert!(h.fix.contains("required pod anti-affinity on kubernetes.io/hostname"), "{}", h.fix);
}

/// A declared host port without hostNetwork keeps replicas apart too.
#[test]
fn a_host_port_keeps_replicas_apart() {
    let pod = "containers:\n- name: app\n  image: nginx\n  ports:\n  - containerPort: 80\n    hostPort: 8080\n";
    let f = findings(&deployment("web", "replicas: 3", pod), "", false);
    assert!(of_rule(&f, "replicas-colocated").is_empty(), "{f:#?}");
    let pod = "containers:\n- name: app\n  image: nginx\n  ports:\n  - containerPort: 80\n";
    let f = findings(&deployment("web", "replicas: 3", pod), "", false);
    assert_eq!(
        of_rule(&f, "replicas-colocated").len(),
        1,
        "a containerPort without hostNetwork is no host port: {f:#?}"
    );
}

/// What declared ports cost is said by spread-unsatisfiable where the nodes are known: more
/// replicas than nodes, the rest Pending; named at the port, with the counts.
#[rstest]
#[case::more_replicas_than_nodes(4, 3, true)]
#[case::as_many_as_nodes(3, 3, false)]
#[case::fewer(2, 3, false)]
fn declared_host_ports_bound_the_replicas_by_the_nodes(#[case] replicas: i32, #[case] n: usize, #[case] fires: bool) {
    let pod = "hostNetwork: true\ncontainers:\n- name: app\n  image: nginx\n- name: probe\n  image: livenessprobe\n  \
               ports:\n  - containerPort: 29652\n  - containerPort: 29653\n";
    let dep = deployment("web", &format!("replicas: {replicas}"), pod);
    let f = findings_in(&dep, &live_view(&cluster(&nodes(n))));
    assert!(of_rule(&f, "host-network-colocation").is_empty(), "{f:#?}");
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), usize::from(fires), "{f:#?}");
    let Some(u) = u.first() else { return };
    assert_eq!(u.action, Decision::Warn);
    assert_eq!(u.path, "spec.template.spec.containers[1].ports[0].containerPort");
    assert!(
        u.what.contains(&format!("can run {replicas} replicas")) && u.what.contains(&format!("{n} schedulable nodes")),
        "{}",
        u.what
    );
    assert!(u.what.contains("declared host ports 29652, 29653 place at most one replica per node"), "{}", u.what);
    assert!(u.what.contains(&format!("at most {n} can be placed, the rest stay Pending")), "{}", u.what);
    assert!(u.what.contains("drained node's replica stays Pending"), "{}", u.what);
    assert!(u.fix.contains("lower replicas") && u.fix.contains("add nodes"), "{}", u.fix);
}

// ---- spread-unsatisfiable as the scheduler counts domains (issue 36, item 3) ----

fn hard_spread(extra: &str) -> String {
    deployment(
        "web",
        "replicas: 3",
        &format!(
            "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  whenUnsatisfiable: \
             DoNotSchedule\n  labelSelector: {{matchLabels: {{app: web}}}}\n{extra}"
        ),
    )
}

/// A control-plane node tainted NoSchedule: the default nodeTaintsPolicy (Ignore) counts it as a
/// domain where no replica may go, so each of the two workers holds one replica and the third
/// stays Pending; nodeTaintsPolicy: Honor leaves it out; tolerating the taint makes it usable.
#[test]
fn a_tainted_node_the_spread_counts_leaves_replicas_pending() {
    let control_plane = node("cp", "taints:\n- {key: node-role.kubernetes.io/control-plane, effect: NoSchedule}\n");
    let view = live_view(&cluster(&[control_plane, node("w1", ""), node("w2", "")]));
    let f = findings_in(&hard_spread(""), &view);
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    assert_eq!(u[0].path, "spec.template.spec.topologySpreadConstraints[0].nodeTaintsPolicy");
    for part in [
        "can run 3 replicas but the cluster has 2 schedulable nodes",
        "counts cp (taint node-role.kubernetes.io/control-plane:NoSchedule not tolerated) where no replica may go",
        "nodeTaintsPolicy Ignore (the default)",
        "at most 2 can be placed",
    ] {
        assert!(u[0].what.contains(part), "{part:?} not in: {}", u[0].what);
    }
    assert!(u[0].fix.contains("set nodeTaintsPolicy: Honor on topologySpreadConstraints[0]"), "{}", u[0].fix);
    let honor = hard_spread("  nodeTaintsPolicy: Honor\n");
    assert!(of_rule(&findings_in(&honor, &view), "spread-unsatisfiable").is_empty());
    let tolerant = format!(
        "{}      tolerations:\n      - {{key: node-role.kubernetes.io/control-plane, operator: Exists}}\n",
        hard_spread("")
    );
    assert!(of_rule(&findings_in(&tolerant, &view), "spread-unsatisfiable").is_empty(), "{tolerant}");
}

/// A cordoned node is a domain under the default policy too: while it is cordoned, replicas
/// beyond the other nodes stay Pending (what a drain meets).
#[test]
fn a_cordoned_node_the_spread_counts_holds_no_replica() {
    let view = live_view(&cluster(&[node("n1", "unschedulable: true\n"), node("n2", ""), node("n3", "")]));
    let u = of_rule(&findings_in(&hard_spread(""), &view), "spread-unsatisfiable")
        .into_iter()
        .map(|f| f.what.clone())
        .collect::<Vec<_>>();
    assert_eq!(u.len(), 1);
    assert!(u[0].contains("counts n1 (cordoned)"), "{}", u[0]);
    // Two replicas fit on the two others: the boundary.
    let two = hard_spread("").replace("replicas: 3", "replicas: 2");
    assert!(of_rule(&findings_in(&two, &view), "spread-unsatisfiable").is_empty());
}

/// nodeAffinityPolicy Ignore counts the nodes the pods' selector excludes: they pin the minimum.
#[test]
fn the_node_affinity_policy_decides_which_nodes_count() {
    let view = live_view(&cluster(&[node("n1a", ""), node("n1b", ""), node("n2b", "")]));
    let pinned = |policy: &str| format!("{}      nodeSelector: {{pool: b}}\n", hard_spread(policy));
    assert!(of_rule(&findings_in(&pinned(""), &view), "spread-unsatisfiable").is_empty());
    let u = findings_in(&pinned("  nodeAffinityPolicy: Ignore\n"), &view);
    let u = of_rule(&u, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{u:#?}");
    assert!(u[0].what.contains("counts n1a (the pods may not go there)"), "{}", u[0].what);
}

/// The count is the placement module's: a request no two replicas can share a node with is a
/// bound too, and the message names the filter that refuses and where.
#[test]
fn requests_that_fit_one_a_node_bound_the_replicas() {
    let node = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\nspec: {{}}\n\
             status:\n  allocatable: {{cpu: '8', memory: 32Gi, pods: '110'}}\n"
        )
    };
    let view = live_view(&cluster(&[node("n1"), node("n2")]));
    let big = deployment(
        "web",
        "replicas: 3",
        "containers:\n- name: app\n  image: nginx\n  resources: {requests: {cpu: '5'}}\n",
    );
    let f = findings_in(&big, &view);
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    for part in ["can run 3 replicas", "at most 2 can be placed", "not enough cpu on n1, n2"] {
        assert!(u[0].what.contains(part), "{part:?} not in: {}", u[0].what);
    }
    // Boundary: two replicas fit, one a node.
    let two = big.replace("replicas: 3", "replicas: 2");
    assert!(of_rule(&findings_in(&two, &view), "spread-unsatisfiable").is_empty());
    // Limits alone are the requests of the pods the apiserver stores (SetDefaults_Pod).
    let limits = big.replace("resources: {requests: {cpu: '5'}}", "resources: {limits: {cpu: '5'}}");
    assert_ne!(limits, big);
    let f = findings_in(&limits, &view);
    assert!(of_rule(&f, "spread-unsatisfiable")[0].what.contains("at most 2 can be placed"), "{f:#?}");
}

// ---- spread-unsatisfiable: bounded whatever the object declares ----

/// A node of zone `zone` with the given allocatable CPU.
fn zoned_node(name: &str, zone: &str, cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n    \
         topology.kubernetes.io/zone: {zone}\nspec: {{}}\nstatus:\n  allocatable: {{cpu: '{cpu}', memory: 64Gi, pods: '110'}}\n"
    )
}

const ZONE_SPREAD: &str = "topologySpreadConstraints:\n- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
                           whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}\n";

/// Zone a holds 2 replicas (one node of 1 CPU, 500m each), b and c 8: the spread keeps b and c
/// within maxSkew 1 of a, so 2 + 3 + 3 fit. The message names the zone and the numbers.
#[test]
fn the_smallest_zone_bounds_a_zone_spread() {
    let view =
        live_view(&cluster(&[zoned_node("a1", "a", "1"), zoned_node("b1", "b", "4"), zoned_node("c1", "c", "4")]));
    let pod =
        format!("containers:\n- name: app\n  image: nginx\n  resources: {{requests: {{cpu: 500m}}}}\n{ZONE_SPREAD}");
    let f = findings_in(&deployment("web", "replicas: 9", &pod), &view);
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    assert_eq!(u[0].path, "spec.template.spec.topologySpreadConstraints[0].maxSkew");
    for part in [
        "can run 9 replicas",
        "keeps every topology.kubernetes.io/zone domain within maxSkew 1 of the one with the fewest",
        "a holds at most 2 of these pods, so no domain takes more than 3",
        "at most 8 can be placed",
    ] {
        assert!(u[0].what.contains(part), "{part:?} not in: {}", u[0].what);
    }
    assert!(u[0].fix.contains("add nodes these pods may use to a"), "{}", u[0].fix);
    // Boundary: 8 fit.
    let f = findings_in(&deployment("web", "replicas: 8", &pod), &view);
    assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{f:#?}");
}

/// 2³¹−1 replicas: the bound is read off the nodes, not reached by placing them.
#[test]
fn the_largest_replica_count_is_judged_like_any_other() {
    let f = findings_in(&one_per_node(i32::MAX, ""), &live_view(&cluster(&nodes(3))));
    let u = of_rule(&f, "spread-unsatisfiable");
    assert_eq!(u.len(), 1, "{f:#?}");
    assert!(
        u[0].what.contains("can run 2147483647 replicas") && u[0].what.contains("at most 3 can be placed"),
        "{}",
        u[0].what
    );
}

/// Required pod affinity to another workload's pods: where they run is not in an admission's view,
/// so it bounds nothing (an empty view would make it "at most 0").
#[test]
fn pod_affinity_to_other_pods_is_not_counted_at_admission() {
    let pod = "affinity:\n  podAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n    - topologyKey: \
               kubernetes.io/hostname\n      labelSelector: {matchLabels: {app: cache}}\n";
    let f = findings_in(&deployment("web", "replicas: 3", pod), &live_view(&cluster(&nodes(3))));
    assert!(of_rule(&f, "spread-unsatisfiable").is_empty(), "{f:#?}");
}

/// A template over an input limit is not judged by the rules that read every node, and says so.
#[test]
fn over_an_input_limit_the_node_rules_say_they_did_not_judge() {
    let tolerations: Vec<String> = (0..300).map(|i| format!("{{key: k{i}, operator: Exists}}")).collect();
    let pod = format!("tolerations: [{}]\n", tolerations.join(", "));
    let view = live_view(&cluster(&[zoned_node("a1", "a", "4"), zoned_node("b1", "b", "4")]));
    let subject =
        deployment("web", "replicas: 4", &format!("{pod}{}", anti_affinity(true, "kubernetes.io/hostname", "web")));
    let eval = evaluate_in_view(&subject, &view);
    assert!(of_rule(&eval.findings, "spread-unsatisfiable").is_empty(), "{:#?}", eval.findings);
    let said: Vec<String> = eval.not_judged.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            "[spread-unsatisfiable] not judged: spec.template.spec.tolerations holds 300 tolerations, over the 256 \
             judged against every node (docs/operations.md, \"Input limits\")",
            "[spread-zone-missing] not judged: spec.template.spec.tolerations holds 300 tolerations, over the 256 \
             judged against every node (docs/operations.md, \"Input limits\")",
        ]
    );
    // Within the limit: judged (4 replicas, one a node, 2 nodes).
    let pod = format!("tolerations: [{}]\n", tolerations[..256].join(", "));
    let subject =
        deployment("web", "replicas: 4", &format!("{pod}{}", anti_affinity(true, "kubernetes.io/hostname", "web")));
    let eval = evaluate_in_view(&subject, &view);
    assert!(eval.not_judged.is_empty());
    assert_eq!(of_rule(&eval.findings, "spread-unsatisfiable").len(), 1, "{:#?}", eval.findings);
}

//! The closed form against the placement module: equal wherever the bound is exact, never below
//! the placement module's count, on hand-made and generated node sets.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PodSpec, Taint};
use proptest::prelude::*;

use super::*;
use crate::core::view::placement::{Nodes, place_replicas};

fn node(name: &str, zone: Option<&str>, cpu: Option<i64>, max_pods: Option<i64>) -> NodeInfo {
    let mut labels = BTreeMap::from([("kubernetes.io/hostname".to_string(), name.to_string())]);
    if let Some(z) = zone {
        labels.insert("topology.kubernetes.io/zone".into(), z.into());
    }
    NodeInfo {
        name: name.into(),
        labels,
        allocatable: cpu.map(|c| Resources { cpu_milli: c, memory: 1 << 40, ..Default::default() }),
        max_pods,
        ..Default::default()
    }
}

fn spec(yaml: &str) -> PodSpec {
    serde_saphyr::from_str(yaml).expect("a pod spec")
}

fn web() -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), "web".to_string())])
}

fn capacity(spec: &PodSpec, nodes: &[NodeInfo]) -> Capacity {
    let nodes: Vec<Arc<NodeInfo>> = nodes.iter().cloned().map(Arc::new).collect();
    replicas_capacity(Incoming { namespace: "default", labels: &web(), spec }, &NodeTable::new(nodes))
}

/// The placement module's count: `wanted` replicas placed one after the other on empty nodes.
fn placed(spec: &PodSpec, nodes: &[NodeInfo], wanted: usize) -> usize {
    let mut states = Nodes::empty(nodes.iter().cloned().map(Arc::new));
    place_replicas(Incoming { namespace: "default", labels: &web(), spec }, &mut states, wanted)
}

const CPU_500M: &str = "containers: [{name: app, image: x, resources: {requests: {cpu: 500m}}}]\n";

fn hard_spread(key: &str, extra: &str) -> String {
    format!(
        "topologySpreadConstraints: [{{maxSkew: 1, topologyKey: {key}, whenUnsatisfiable: DoNotSchedule, \
         labelSelector: {{matchLabels: {{app: web}}}}{extra}}}]\n"
    )
}

fn anti(key: &str, app: &str) -> String {
    format!(
        "affinity: {{podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: {key}, \
         labelSelector: {{matchLabels: {{app: {app}}}}}}}]}}}}\n"
    )
}

#[test]
fn requests_bound_each_node_by_its_allocatable() {
    let nodes = [node("n1", None, Some(1200), None), node("n2", None, Some(1000), None)];
    let c = capacity(&spec(CPU_500M), &nodes);
    assert_eq!((c.at_most, c.exact, c.usable, c.binding.clone()), (Some(4), true, 2, Binding::Nodes));
    assert_eq!(c.refusals.iter().map(ToString::to_string).collect::<Vec<_>>(), ["not enough cpu on n1, n2"]);
    assert_eq!(placed(&spec(CPU_500M), &nodes, 10), 4);
    // The pod count binds before the CPU does.
    let nodes = [node("n1", None, Some(1200), Some(1)), node("n2", None, Some(1000), None)];
    let c = capacity(&spec(CPU_500M), &nodes);
    assert_eq!(c.at_most, Some(3));
    assert_eq!(c.refusals[0].unfit, Unfit::NodeResourcesFit("pods".into()));
    // A node that reports no allocatable and requests of zero: no bound at all.
    let c = capacity(&spec("containers: [{name: app, image: x}]"), &[node("n1", None, None, None)]);
    assert_eq!((c.at_most, c.binding), (None, Binding::Nodes));
}

/// A request past `i64` (`memory: 1e30`, `cpu: 1E`: 10^18 cores) is more than any node has, also
/// a node that reports no allocatable: it fits nowhere, and the refusals say which resource.
#[test]
fn a_request_past_i64_fits_on_no_node() {
    let nodes = [
        node("big", None, Some(i64::MAX / 8), None),
        node("blank", None, None, None),
        node("small", None, Some(1000), Some(110)),
    ];
    for (yaml, resource) in [
        ("containers: [{name: app, image: x, resources: {requests: {memory: 1e30}}}]", "memory"),
        ("containers: [{name: app, image: x, resources: {requests: {cpu: 1E}}}]", "cpu"),
        ("containers: [{name: app, image: x, resources: {limits: {memory: 9Ei}}}]", "memory"),
    ] {
        let c = capacity(&spec(yaml), &nodes);
        assert_eq!((c.at_most, c.binding.clone()), (Some(0), Binding::Nodes), "{yaml}");
        assert_eq!(
            c.refusals.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [format!("not enough {resource} on big, blank, small")],
            "{yaml}"
        );
        assert_eq!(placed(&spec(yaml), &nodes, 3), 0, "{yaml}");
    }
}

#[test]
fn a_host_port_holds_one_replica_a_node() {
    let s = spec("containers: [{name: app, image: x, ports: [{containerPort: 80, hostPort: 8080}]}]");
    let nodes = [node("n1", None, None, None), node("n2", None, None, None)];
    let c = capacity(&s, &nodes);
    assert_eq!(c.at_most, Some(2));
    assert_eq!(c.refusals[0].to_string(), "host port 8080 in use on n1, n2");
    assert_eq!(placed(&s, &nodes, 5), 2);
}

#[test]
fn anti_affinity_against_its_own_pods_holds_one_a_domain() {
    let nodes: Vec<NodeInfo> = ["a", "a", "b", "b", "b"]
        .iter()
        .enumerate()
        .map(|(i, z)| node(&format!("n{i}"), Some(z), None, None))
        .collect();
    let per_node = spec(&format!("{CPU_500M}{}", anti(HOSTNAME_KEY, "web")));
    let c = capacity(&per_node, &nodes);
    assert_eq!(
        (c.at_most, c.exact, c.binding),
        (Some(5), true, Binding::AntiAffinity { term: 0, key: HOSTNAME_KEY.into(), per_node: true })
    );
    let per_zone = spec(&format!("{CPU_500M}{}", anti(ZONE_KEY, "web")));
    let c = capacity(&per_zone, &nodes);
    assert_eq!((c.at_most, c.exact), (Some(2), true));
    assert_eq!(placed(&per_zone, &nodes, 5), 2);
    // Against other pods: nothing of its own to keep apart, so no bound (the view holds no pods).
    let other = spec(&format!("containers: [{{name: app, image: x}}]\n{}", anti(HOSTNAME_KEY, "db")));
    assert_eq!(capacity(&other, &nodes).at_most, None);
}

const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
const ZONE_KEY: &str = "topology.kubernetes.io/zone";

/// The default nodeTaintsPolicy (Ignore) counts a tainted node as a domain where no replica
/// goes: the minimum stays 0 and each other node holds at most maxSkew.
#[test]
fn an_idle_domain_holds_the_others_at_max_skew() {
    let mut tainted = node("cp", None, None, None);
    tainted.taints = vec![Taint {
        key: "node-role.kubernetes.io/control-plane".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }];
    let nodes = [tainted, node("w1", None, None, None), node("w2", None, None, None)];
    let s = spec(&format!("containers: [{{name: app, image: x}}]\n{}", hard_spread(HOSTNAME_KEY, "")));
    let c = capacity(&s, &nodes);
    assert_eq!(c.at_most, Some(2));
    assert_eq!(
        c.binding,
        Binding::Spread {
            index: 0,
            limit: SpreadLimit::IdleDomains {
                described: vec!["cp (taint node-role.kubernetes.io/control-plane:NoSchedule not tolerated)".into()],
                domains: 1,
                usable: 2
            }
        }
    );
    assert_eq!(placed(&s, &nodes, 5), 2);
    // Honor leaves the tainted node out: no bound.
    let s = spec(&format!(
        "containers: [{{name: app, image: x}}]\n{}",
        hard_spread(HOSTNAME_KEY, ", nodeTaintsPolicy: Honor")
    ));
    assert_eq!(capacity(&s, &nodes).at_most, None);
}

#[test]
fn fewer_domains_than_min_domains_hold_max_skew_each() {
    let nodes = [node("a", None, None, None), node("b", None, None, None)];
    let s = spec(&format!("containers: [{{name: app, image: x}}]\n{}", hard_spread(HOSTNAME_KEY, ", minDomains: 3")));
    let c = capacity(&s, &nodes);
    assert_eq!(
        (c.at_most, c.binding),
        (Some(2), Binding::Spread { index: 0, limit: SpreadLimit::MinDomains { domains: 2, min_domains: 3 } })
    );
    // Boundary: as many domains as asked, no bound.
    let s = spec(&format!("containers: [{{name: app, image: x}}]\n{}", hard_spread(HOSTNAME_KEY, ", minDomains: 2")));
    assert_eq!(capacity(&s, &nodes).at_most, None);
}

/// A zone of one node that holds one replica: every other zone holds at most 1 + maxSkew.
#[test]
fn the_smallest_domain_bounds_the_others_at_its_size_plus_max_skew() {
    let nodes = [
        node("a1", Some("a"), None, None),
        node("b1", Some("b"), None, None),
        node("b2", Some("b"), None, None),
        node("b3", Some("b"), None, None),
    ];
    let s = spec(&format!(
        "containers: [{{name: app, image: x}}]\n{}{}",
        anti(HOSTNAME_KEY, "web"),
        hard_spread(ZONE_KEY, "")
    ));
    let c = capacity(&s, &nodes);
    assert_eq!(c.at_most, Some(3));
    assert!(c.exact);
    assert_eq!(
        c.binding,
        Binding::Spread { index: 0, limit: SpreadLimit::SmallestDomain { domain: "a".into(), holds: 1 } }
    );
    assert_eq!(placed(&s, &nodes, 6), 3);
}

/// `labelSelector: {}` selects every pod of the namespace, its own too (`LabelSelectorAsSelector`).
#[test]
fn an_empty_spread_selector_counts_its_own_pods() {
    let mut tainted = node("cp", None, None, None);
    tainted.unschedulable = true;
    let nodes = [tainted, node("w1", None, None, None)];
    let s = spec(
        "containers: [{name: app, image: x}]\ntopologySpreadConstraints: [{maxSkew: 1, topologyKey: \
         kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]",
    );
    assert_eq!(capacity(&s, &nodes).at_most, Some(1));
    assert_eq!(placed(&s, &nodes, 3), 1);
    // No selector at all counts nothing: the key is all it asks.
    let s = spec(
        "containers: [{name: app, image: x}]\ntopologySpreadConstraints: [{maxSkew: 1, topologyKey: \
         kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]",
    );
    assert_eq!(capacity(&s, &nodes).at_most, None);
}

#[test]
fn the_zones_are_those_of_the_nodes_the_pods_may_go_to() {
    let mut tainted = node("t", Some("z3"), None, None);
    tainted.taints = vec![Taint { key: "gpu".into(), effect: "NoSchedule".into(), ..Default::default() }];
    let mut cordoned = node("c", Some("z4"), None, None);
    cordoned.unschedulable = true;
    let nodes = [
        node("a", Some("z2"), None, None),
        node("b", Some("z1"), None, None),
        node("d", Some("z1"), None, None),
        node("n", None, None, None),
        tainted,
        cordoned,
    ];
    // In name order, each once; a node without the label, a tainted and a cordoned one add none.
    let c = capacity(&spec(CPU_500M), &nodes);
    assert_eq!(c.zones, ["z1", "z2"]);
    // Tolerated, the tainted node's zone counts; a node a hard spread cannot count (its key
    // missing) is still schedulable, so its zone counts too.
    let tolerant =
        spec(&format!("{CPU_500M}tolerations: [{{key: gpu, operator: Exists}}]\n{}", hard_spread("rack", "")));
    assert_eq!(capacity(&tolerant, &nodes).zones, ["z1", "z2", "z3"]);
    // A node affinity narrows them.
    let pinned = spec(&format!(
        "{CPU_500M}affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: \
         [{{matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [z2]}}]}}]}}}}}}\n"
    ));
    assert_eq!(capacity(&pinned, &nodes).zones, ["z2"]);
}

#[test]
fn a_hard_spreads_key_missing_makes_a_node_unusable() {
    let nodes = [node("a", Some("z1"), None, Some(2)), node("b", None, None, Some(2))];
    let s =
        spec(&format!("containers: [{{name: app, image: x}}]\n{}", hard_spread(ZONE_KEY, ", nodeTaintsPolicy: Honor")));
    let c = capacity(&s, &nodes);
    assert_eq!((c.usable, c.at_most), (1, Some(2)));
    assert!(c.refusals.iter().any(|r| r.unfit == Unfit::PodTopologySpread(0) && r.named == ["b"]), "{:?}", c.refusals);
}

#[test]
fn pod_affinity_bounds_nothing_and_the_count_is_only_an_upper_bound() {
    let nodes = [node("a", Some("z1"), Some(1000), None), node("b", Some("z2"), Some(1000), None)];
    let s = spec(&format!(
        "{CPU_500M}affinity: {{podAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: {ZONE_KEY}, \
         labelSelector: {{matchLabels: {{app: cache}}}}}}]}}}}"
    ));
    let c = capacity(&s, &nodes);
    assert_eq!((c.at_most, c.exact), (Some(4), false));
}

/// A message lists a few nodes and counts the rest.
#[test]
fn refusals_name_three_nodes_and_count_the_rest() {
    let nodes: Vec<NodeInfo> = (0..10)
        .map(|i| {
            let mut n = node(&format!("n{i}"), None, None, None);
            n.unschedulable = true;
            n
        })
        .collect();
    let c = capacity(&spec(CPU_500M), &nodes);
    assert_eq!((c.usable, c.at_most), (0, Some(0)));
    assert_eq!(c.refusals.iter().map(ToString::to_string).collect::<Vec<_>>(), ["cordoned on n0, n1, n2 and 7 more"]);
}

/// The replica count asked plays no part: 2³¹−1 replicas over 5,000 nodes is one pass over them.
/// Three zones of 1,666 nodes that take 8 replicas each: the spread fills them evenly.
#[test]
fn the_bound_does_not_depend_on_the_replicas_asked() {
    let nodes: Vec<NodeInfo> =
        (0..4998).map(|i| node(&format!("n{i:04}"), Some(["a", "b", "c"][i % 3]), Some(4000), Some(110))).collect();
    let s = spec(&format!("{CPU_500M}{}", hard_spread(ZONE_KEY, "")));
    let c = capacity(&s, &nodes);
    assert_eq!(c.at_most, Some(4998 * 8));
    assert!(c.exact);
}

// --- generated node sets -----------------------------------------------------------------------

#[derive(Clone, Debug)]
struct GenNode {
    zone: Option<u8>,
    hostname: bool,
    cordoned: bool,
    tainted: bool,
    cpu: Option<i64>,
    max_pods: Option<i64>,
}

fn gen_node() -> impl Strategy<Value = GenNode> {
    (
        prop::option::weighted(0.85, 0u8..3),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.15),
        prop::option::weighted(0.7, prop::sample::select(vec![0i64, 500, 1000, 2000, 3000])),
        prop::option::weighted(0.5, 0i64..5),
    )
        .prop_map(|(zone, hostname, cordoned, tainted, cpu, max_pods)| GenNode {
            zone,
            hostname,
            cordoned,
            tainted,
            cpu,
            max_pods,
        })
}

fn build(i: usize, g: &GenNode) -> NodeInfo {
    let name = format!("n{i}");
    let mut n = node(&name, g.zone.map(|z| ["a", "b", "c"][z as usize]), g.cpu, g.max_pods);
    if !g.hostname {
        n.labels.remove(HOSTNAME_KEY);
    }
    n.unschedulable = g.cordoned;
    if g.tainted {
        n.taints = vec![Taint { key: "dedicated".into(), effect: "NoSchedule".into(), ..Default::default() }];
    }
    n
}

/// A spread of the generated pod: key, maxSkew, minDomains, policies, selector.
fn gen_spread() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![HOSTNAME_KEY, ZONE_KEY]),
        1i32..4,
        prop::option::weighted(0.3, 1i32..5),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        prop::sample::select(vec!["{matchLabels: {app: web}}", "{matchLabels: {app: db}}", "{}", ""]),
    )
        .prop_map(|(key, skew, min_domains, honor, ignore_affinity, selector)| {
            let mut s = format!("{{maxSkew: {skew}, topologyKey: {key}, whenUnsatisfiable: DoNotSchedule");
            if let Some(m) = min_domains {
                s += &format!(", minDomains: {m}");
            }
            if honor {
                s += ", nodeTaintsPolicy: Honor";
            }
            if ignore_affinity {
                s += ", nodeAffinityPolicy: Ignore";
            }
            if !selector.is_empty() {
                s += &format!(", labelSelector: {selector}");
            }
            s + "}"
        })
}

fn gen_pod() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![0i64, 500, 1000]),
        prop::bool::weighted(0.15),
        prop::sample::select(vec!["", "hostname-web", "zone-web", "hostname-db"]),
        prop::collection::vec(gen_spread(), 0..3),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(cpu, port, anti_kind, spreads, tolerates, zone_a, affinity)| {
            let mut s = format!(
                "containers: [{{name: app, image: x, resources: {{requests: {{cpu: {cpu}m}}}}{}}}]\n",
                if port { ", ports: [{containerPort: 80, hostPort: 8080}]" } else { "" }
            );
            let mut affinity_parts = Vec::new();
            match anti_kind {
                "hostname-web" => affinity_parts.push(anti_part(HOSTNAME_KEY, "web")),
                "zone-web" => affinity_parts.push(anti_part(ZONE_KEY, "web")),
                "hostname-db" => affinity_parts.push(anti_part(HOSTNAME_KEY, "db")),
                _ => {}
            }
            if affinity {
                affinity_parts.push(format!(
                    "podAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: {ZONE_KEY}, \
                     labelSelector: {{matchLabels: {{app: web}}}}}}]}}"
                ));
            }
            if !affinity_parts.is_empty() {
                s += &format!("affinity: {{{}}}\n", affinity_parts.join(", "));
            }
            if !spreads.is_empty() {
                s += &format!("topologySpreadConstraints: [{}]\n", spreads.join(", "));
            }
            if tolerates {
                s += "tolerations: [{key: dedicated, operator: Exists}]\n";
            }
            if zone_a {
                s += &format!("nodeSelector: {{{ZONE_KEY}: a}}\n");
            }
            s
        })
}

fn anti_part(key: &str, app: &str) -> String {
    format!(
        "podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: {key}, labelSelector: \
         {{matchLabels: {{app: {app}}}}}}}]}}"
    )
}

/// Replicas asked of the placement module at most: a bound above it counts as none here.
const ASKED: u64 = 120;

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, .. ProptestConfig::default() })]

    /// Never below the placement module's count; equal to it wherever it says it is exact.
    #[test]
    fn the_closed_form_agrees_with_placing_replicas_one_by_one(
        generated in prop::collection::vec(gen_node(), 1..8),
        pod in gen_pod(),
    ) {
        let nodes: Vec<NodeInfo> = generated.iter().enumerate().map(|(i, g)| build(i, g)).collect();
        let s = spec(&pod);
        let c = capacity(&s, &nodes);
        let asked = c.at_most.map_or(ASKED, |b| (b + 1).min(ASKED));
        let placed = placed(&s, &nodes, asked as usize) as u64;
        if let Some(bound) = c.at_most {
            prop_assert!(placed <= bound, "placed {placed} above the bound {bound}: {c:?}\n{pod}");
        }
        if c.exact {
            prop_assert_eq!(placed, c.at_most.unwrap_or(ASKED).min(asked), "{:?}\n{}", c, pod);
        }
    }
}

/// nodeAffinityPolicy Honor (the default) counts only the nodes the pod's selector allows;
/// Ignore counts the others too, which then hold the minimum at 0.
#[test]
fn the_node_affinity_policy_decides_which_nodes_are_domains() {
    let nodes = [node("a", Some("a"), None, None), node("b", Some("a"), None, None), node("c", Some("b"), None, None)];
    let s = |policy: &str| {
        spec(&format!(
            "containers: [{{name: app, image: x}}]\nnodeSelector: {{{ZONE_KEY}: a}}\n{}",
            hard_spread(HOSTNAME_KEY, policy)
        ))
    };
    assert_eq!(capacity(&s(""), &nodes).at_most, None);
    let c = capacity(&s(", nodeAffinityPolicy: Ignore"), &nodes);
    assert_eq!(c.at_most, Some(2));
    assert!(matches!(c.binding, Binding::Spread { limit: SpreadLimit::IdleDomains { .. }, .. }), "{:?}", c.binding);
    assert_eq!(placed(&s(", nodeAffinityPolicy: Ignore"), &nodes, 4), 2);
}

//! The placement filters as they were before the drain replay was made faster (issue 48), kept
//! as the reference the optimised ones must answer alike: spreads counted per domain value in a
//! map at every placement, read back by value at every node. The test below places generated
//! pods on generated clusters both ways and asks for the same nodes and the same refusals.

use super::*;
use crate::core::model::resources::{HostPort, Resources, host_ports};
use k8s_openapi::api::core::v1::{PodAffinityTerm, TopologySpreadConstraint};
use serde_json::json;

/// A spread's domains (topology values) with their matching pods, and the minimum among them.
type SpreadDomains<'a> = (BTreeMap<&'a str, i32>, i32);

/// What the filters that count other pods read, counted once for a pod over every node (so a
/// placement costs one pass over the nodes, not one a candidate node).
struct OldCounted<'a> {
    /// Per `DoNotSchedule` spread of the pod (its index): the domains it counts with their matching
    /// pods and the minimum it skews against; `None` for a spread without a selector.
    spreads: Vec<(usize, Option<SpreadDomains<'a>>)>,
    /// Per required anti-affinity term: its topology key and the values whose domain holds a
    /// matching pod.
    anti: Vec<(&'a str, BTreeSet<&'a str>)>,
    /// The topology keys of the required affinity terms, and the (key, value) domains holding a
    /// pod that matches all of them; whether the first-pod escape applies.
    affinity: Vec<&'a str>,
    affinity_domains: BTreeSet<(&'a str, &'a str)>,
    affinity_escape: bool,
    /// The (key, value) domains where an existing pod's required anti-affinity term matches the
    /// pod.
    existing_anti: BTreeSet<(&'a str, &'a str)>,
}

fn old_counted<'a>(pod: Incoming<'a>, nodes: &'a Nodes) -> OldCounted<'a> {
    use crate::core::model::selector;
    let hard: Vec<(usize, &TopologySpreadConstraint)> = pod
        .spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.when_unsatisfiable == "DoNotSchedule")
        .collect();
    let spreads = hard
        .iter()
        .map(|(i, c)| {
            let Some(sel) = c.label_selector.as_ref() else { return (*i, None) };
            // The matching pods by node, from the nodes holding pods of the namespace. An empty
            // selector (`{}`) counts every pod of the namespace: `metav1.LabelSelectorAsSelector`
            // makes it `labels.Everything()`.
            let mut matching: HashMap<usize, i32> = HashMap::new();
            for at in nodes.holding(pod.namespace) {
                let n = nodes[at]
                    .in_namespace(pod.namespace)
                    .iter()
                    .filter(|p| !p.terminating && selector::matches(sel, &p.labels))
                    .count() as i32;
                matching.insert(at, n);
            }
            let mut domains: BTreeMap<&'a str, i32> = BTreeMap::new();
            for (at, n) in nodes.iter().enumerate() {
                if !hard.iter().all(|(_, h)| n.node.labels.contains_key(&h.topology_key))
                    || !spread_counts(c, &n.node, pod.spec)
                {
                    continue;
                }
                let Some(d) = n.node.labels.get(&c.topology_key) else { continue };
                *domains.entry(d.as_str()).or_default() += matching.get(&at).copied().unwrap_or(0);
            }
            let min = if (domains.len() as i32) < c.min_domains.unwrap_or(1) {
                0
            } else {
                domains.values().copied().min().unwrap_or(0)
            };
            (*i, Some((domains, min)))
        })
        .collect();
    let affinity = pod.spec.affinity.as_ref();
    let anti_terms: Vec<&'a PodAffinityTerm> = affinity
        .iter()
        .flat_map(|a| a.pod_anti_affinity.iter())
        .flat_map(|a| a.required_during_scheduling_ignored_during_execution.iter().flatten())
        .collect();
    let affinity_terms: Vec<&'a PodAffinityTerm> = affinity
        .iter()
        .flat_map(|a| a.pod_affinity.iter())
        .flat_map(|a| a.required_during_scheduling_ignored_during_execution.iter().flatten())
        .collect();
    // `getIncomingAffinityAntiAffinityCounts`: an anti-affinity term counts every pod it matches;
    // the affinity terms count only a pod that matches all of them, in each term's domain.
    let anti = anti_terms
        .iter()
        .map(|term| {
            let values = term_nodes(term, pod.namespace, nodes)
                .into_iter()
                .map(|at| &nodes[at])
                .filter(|n| term_pods(term, pod.namespace, n).any(|p| matches_term(term, pod, p, nodes)))
                .filter_map(|n| n.node.labels.get(&term.topology_key).map(String::as_str))
                .collect();
            (term.topology_key.as_str(), values)
        })
        .collect();
    let mut affinity_domains: BTreeSet<(&'a str, &'a str)> = BTreeSet::new();
    if let Some(first) = affinity_terms.first() {
        for at in term_nodes(first, pod.namespace, nodes) {
            let n = &nodes[at];
            let all = |p: &Placed| affinity_terms.iter().all(|t| matches_term(t, pod, p, nodes));
            if term_pods(first, pod.namespace, n).any(all) {
                for t in &affinity_terms {
                    if let Some(v) = n.node.labels.get(&t.topology_key) {
                        affinity_domains.insert((t.topology_key.as_str(), v.as_str()));
                    }
                }
            }
        }
    }
    // `satisfiesSelfAffinityCheck`: no pod anywhere matches all the terms, and the pod does.
    let own_namespace = Some(nodes.namespace_labels(pod.namespace));
    let affinity_escape = !affinity_terms.is_empty()
        && affinity_domains.is_empty()
        && affinity_terms
            .iter()
            .all(|t| term_matches(t, pod.namespace, pod.labels, pod.namespace, own_namespace, pod.labels));
    // `getExistingAntiAffinityCounts`: the existing pods' terms that match the incoming pod, with
    // the incoming pod's namespace labels for their namespaceSelectors.
    let mut existing_anti: BTreeSet<(&'a str, &'a str)> = BTreeSet::new();
    let mut check = |n: &'a NodeState, pods: &'a [Placed]| {
        for p in pods.iter().filter(|p| !p.anti_affinity.is_empty()) {
            for t in p.anti_affinity.iter() {
                let matches = term_matches(t, &p.namespace, &p.labels, pod.namespace, own_namespace, pod.labels);
                if let Some(v) = n.node.labels.get(&t.topology_key).filter(|_| matches) {
                    existing_anti.insert((t.topology_key.as_str(), v.as_str()));
                }
            }
        }
    };
    // Terms that read their own namespace only can match the pod only from pods of its namespace.
    for &at in nodes.anti_own.get(pod.namespace).into_iter().flat_map(BTreeMap::keys) {
        check(&nodes[at], nodes[at].in_namespace(pod.namespace));
    }
    for &at in nodes.anti_wide.keys() {
        check(&nodes[at], nodes[at].pods());
    }
    OldCounted {
        spreads,
        anti,
        affinity: affinity_terms.iter().map(|t| t.topology_key.as_str()).collect(),
        affinity_domains,
        affinity_escape,
        existing_anti,
    }
}

fn old_fits_counted(
    pod: Incoming,
    at: usize,
    nodes: &[NodeState],
    counted: &OldCounted,
    want: &Resources,
    wanted_ports: &[HostPort],
    volumes: &VolumeNeeds,
) -> Result<(), Unfit> {
    let here = &nodes[at];
    if !node_unschedulable(&here.node, pod.spec) {
        return Err(Unfit::NodeUnschedulable);
    }
    if let Some(t) = untolerated(&here.node, pod.spec) {
        return Err(Unfit::TaintToleration(format!("{}:{}", t.key, t.effect)));
    }
    if !node_affinity(&here.node, pod.spec) {
        return Err(Unfit::NodeAffinity);
    }
    if here.max_pods.is_some_and(|max| here.pods.len() as i64 + 1 > max) {
        return Err(Unfit::NodeResourcesFit("pods".into()));
    }
    if !want.is_zero() {
        let used = here.used();
        let free = |a: i64, u: i64| a.saturating_sub(u);
        if want.cpu_milli > free(here.allocatable.cpu_milli, used.cpu_milli) {
            return Err(Unfit::NodeResourcesFit("cpu".into()));
        }
        if want.memory > free(here.allocatable.memory, used.memory) {
            return Err(Unfit::NodeResourcesFit("memory".into()));
        }
        if want.ephemeral_storage > 0
            && want.ephemeral_storage > free(here.allocatable.ephemeral_storage, used.ephemeral_storage)
        {
            return Err(Unfit::NodeResourcesFit("ephemeral-storage".into()));
        }
        for (name, v) in &want.scalar {
            let a = here.allocatable.scalar.get(name).copied().unwrap_or(0);
            if *v > free(a, used.scalar.get(name).copied().unwrap_or(0)) {
                return Err(Unfit::NodeResourcesFit(name.clone()));
            }
        }
    }
    for wanted in wanted_ports {
        if here.pods.iter().flat_map(|p| &p.ports).any(|used| ports_conflict(wanted, used)) {
            return Err(Unfit::NodePorts(wanted.port));
        }
    }
    if !volumes.is_empty()
        && let Some(why) = volumes.refuses(&here.node, &here.volume_limits, &here.attached)
    {
        return Err(Unfit::Volume(why));
    }
    // InterPodAffinity's Filter, in its order. The pod's affinity: the node carries every term's
    // key, and each term's domain holds a pod matching all the terms, unless none exists anywhere
    // and the pod matches them itself (`nodeTopologyMatchesAffinity`).
    let domain = |key: &str| here.node.labels.get(key).map(String::as_str);
    if !counted.affinity.is_empty() {
        if let Some(key) = counted.affinity.iter().find(|k| domain(k).is_none()) {
            return Err(Unfit::InterPodAffinity(format!("required pod affinity on {key} (the node lacks the key)")));
        }
        let missing =
            counted.affinity.iter().find(|k| !counted.affinity_domains.contains(&(**k, domain(k).unwrap_or(""))));
        if let (Some(key), false) = (missing, counted.affinity_escape) {
            return Err(Unfit::InterPodAffinity(format!("required pod affinity on {key}")));
        }
    }
    // The pod's anti-affinity: no matching pod in the node's domain of each term
    // (`satisfyPodAntiAffinity`; a node without the key passes).
    for (key, values) in &counted.anti {
        if domain(key).is_some_and(|v| values.contains(v)) {
            return Err(Unfit::InterPodAffinity(format!("required pod anti-affinity on {key}")));
        }
    }
    // The existing pods' anti-affinity against this one (`satisfyExistingPodsAntiAffinity`).
    if let Some((key, _)) = counted.existing_anti.iter().find(|(k, v)| domain(k) == Some(*v)) {
        return Err(Unfit::InterPodAffinity(format!("an existing pod's required pod anti-affinity on {key}")));
    }
    // PodTopologySpread: the node must carry the key, and its domain's matching pods + 1 − the
    // minimum must not exceed maxSkew.
    let constraints: Vec<&TopologySpreadConstraint> = pod.spec.topology_spread_constraints.iter().flatten().collect();
    for (i, c) in &counted.spreads {
        let constraint = constraints[*i];
        let Some(value) = here.node.labels.get(&constraint.topology_key) else {
            return Err(Unfit::PodTopologySpread(*i));
        };
        let Some((domains, min)) = c else { continue };
        let sel = constraint.label_selector.as_ref().expect("counted with a selector");
        let own = i32::from(crate::core::model::selector::matches(sel, pod.labels));
        let here_count = domains.get(value.as_str()).copied().unwrap_or(0);
        if here_count + own - min > constraint.max_skew {
            return Err(Unfit::PodTopologySpread(*i));
        }
    }
    Ok(())
}

pub(super) fn old_feasible_with(
    pod: Incoming,
    nodes: &Nodes,
    replacing: &Replacing,
) -> Result<Vec<usize>, Vec<(String, Unfit)>> {
    let counted = old_counted(pod, nodes);
    let (want, ports) = (replacing.requests_of(pod.spec), host_ports(pod.spec));
    let volumes = &replacing.volumes;
    let mut ok = Vec::new();
    let mut why = Vec::new();
    for at in 0..nodes.len() {
        match old_fits_counted(pod, at, nodes, &counted, &want, &ports, volumes) {
            Ok(()) => ok.push(at),
            // Why a node refuses matters only while none takes the pod.
            Err(e) if ok.is_empty() => why.push((nodes[at].node.name.clone(), e)),
            Err(_) => {}
        }
    }
    if ok.is_empty() { Err(why) } else { Ok(ok) }
}

/// [`fits_with`], the reference's way.
fn old_fits_with(pod: Incoming, at: usize, nodes: &Nodes, replacing: &Replacing) -> Result<(), Unfit> {
    let (want, ports) = (replacing.requests_of(pod.spec), host_ports(pod.spec));
    old_fits_counted(pod, at, nodes, &old_counted(pod, nodes), &want, &ports, &replacing.volumes)
}

/// [`choose`], the reference's way.
fn old_choose(candidates: &[usize], nodes: &Nodes, namespace: &str, labels: &BTreeMap<String, String>) -> usize {
    let same: HashMap<usize, usize> = nodes
        .holding(namespace)
        .map(|at| (at, nodes[at].in_namespace(namespace).iter().filter(|p| *p.labels == *labels).count()))
        .collect();
    *candidates
        .iter()
        .min_by_key(|at| {
            let s = &nodes[**at];
            (same.get(*at).copied().unwrap_or(0), s.pods.len(), s.node.name.as_str())
        })
        .expect("candidates are not empty")
}

/// xorshift64*: the cases are the same at every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
    fn pick<'t, T>(&mut self, of: &'t [T]) -> &'t T {
        &of[self.below(of.len())]
    }
}

fn labels_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

const NAMESPACES: [&str; 3] = ["a", "b", "c"];
const APPS: [&str; 3] = ["web", "db", "cache"];
const KEYS: [&str; 3] = ["kubernetes.io/hostname", "zone", "rack"];

fn term(rng: &mut Rng) -> serde_json::Value {
    let mut t = json!({"topologyKey": rng.pick(&KEYS), "labelSelector": {"matchLabels": {"app": rng.pick(&APPS)}}});
    match rng.below(5) {
        0 => t["namespaces"] = json!(["a"]),
        1 => t["namespaceSelector"] = json!({}),
        2 => t["namespaceSelector"] = json!({"matchLabels": {"tenant": "yes"}}),
        _ => {}
    }
    t
}

fn cluster(rng: &mut Rng) -> Nodes {
    let states = (0..1 + rng.below(9))
        .map(|i| {
            let name = format!("n{i}");
            let mut labels = labels_of(&[("kubernetes.io/hostname", &name)]);
            if !rng.one_in(7) {
                labels.insert("zone".into(), format!("z{}", rng.below(3)));
            }
            if rng.one_in(2) {
                labels.insert("rack".into(), format!("r{}", rng.below(2)));
            }
            let mut taints = Vec::new();
            if rng.one_in(7) {
                taints.push(Taint { key: "dedicated".into(), effect: "NoSchedule".into(), ..Default::default() });
            }
            let cordoned = rng.one_in(7);
            if cordoned {
                taints.push(Taint {
                    key: crate::core::model::pod::CORDON_TAINT.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                });
            }
            let cpu = *rng.pick(&[500, 1000, 4000]);
            let node = NodeInfo {
                name,
                labels,
                unschedulable: cordoned,
                taints,
                allocatable: Some(Resources { cpu_milli: cpu, memory: 1 << 40, ..Default::default() }),
                max_pods: Some(*rng.pick(&[3, 110])),
            };
            let mut state = NodeState::new(Arc::new(node));
            state.volume_limits = Arc::new([("d0".to_string(), *rng.pick(&[1i64, 2, 64]))].into());
            for k in 0..rng.below(5) {
                let app = *rng.pick(&APPS);
                let mut labels = labels_of(&[("app", app)]);
                if rng.one_in(3) {
                    labels.insert("tier".into(), "x".into());
                }
                let anti: Arc<[PodAffinityTerm]> = if rng.one_in(6) {
                    Arc::from([serde_json::from_value(term(rng)).expect("a term")])
                } else {
                    Arc::default()
                };
                let volumes: Arc<[Attached]> = if rng.one_in(3) {
                    Arc::from([Attached { driver: "d0".into(), handle: format!("h{}", rng.below(4)).into() }])
                } else {
                    Arc::default()
                };
                state.push(Placed {
                    namespace: (*rng.pick(&NAMESPACES)).into(),
                    name: format!("p{i}-{k}").into(),
                    priority: 0,
                    labels: Arc::new(labels),
                    requests: Resources { cpu_milli: 100 * (1 + rng.below(4) as i64), ..Default::default() },
                    ports: if rng.one_in(8) {
                        vec![HostPort { protocol: "TCP".into(), ip: "0.0.0.0".into(), port: 9100 }]
                    } else {
                        Vec::new()
                    },
                    terminating: rng.one_in(10),
                    anti_affinity: anti,
                    claims: Arc::default(),
                    volumes,
                });
            }
            state
        })
        .collect();
    Nodes::new(states).with_namespace_labels([("a".to_string(), labels_of(&[("tenant", "yes")]))].into())
}

fn spread(rng: &mut Rng, app: &str) -> serde_json::Value {
    let mut c = json!({"maxSkew": 1 + rng.below(2), "topologyKey": rng.pick(&KEYS),
        "whenUnsatisfiable": if rng.one_in(5) { "ScheduleAnyway" } else { "DoNotSchedule" }});
    match rng.below(6) {
        0 => {}
        1 => c["labelSelector"] = json!({}),
        2 => c["labelSelector"] = json!({"matchLabels": {"app": rng.pick(&APPS)}}),
        _ => c["labelSelector"] = json!({"matchLabels": {"app": app}}),
    }
    if rng.one_in(4) {
        c["minDomains"] = json!(1 + rng.below(4));
    }
    if rng.one_in(4) {
        c["nodeAffinityPolicy"] = json!(if rng.one_in(2) { "Ignore" } else { "Honor" });
    }
    if rng.one_in(4) {
        c["nodeTaintsPolicy"] = json!(if rng.one_in(2) { "Ignore" } else { "Honor" });
    }
    c
}

fn incoming_spec(rng: &mut Rng, app: &str) -> PodSpec {
    let cpu = format!("{}m", 100 * (1 + rng.below(6)));
    let mut spec = json!({"containers": [{"name": "app", "image": "x", "resources": {"requests": {"cpu": cpu}}}]});
    let spreads: Vec<serde_json::Value> = (0..rng.below(3)).map(|_| spread(rng, app)).collect();
    if !spreads.is_empty() {
        spec["topologySpreadConstraints"] = json!(spreads);
    }
    if rng.one_in(5) {
        spec["nodeSelector"] = json!({"zone": format!("z{}", rng.below(3))});
    }
    if rng.one_in(6) {
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r0"]}]}]}}});
    }
    if rng.one_in(5) {
        spec["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
    }
    if rng.one_in(5) {
        spec["affinity"]["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [term(rng)]});
    }
    if rng.one_in(6) {
        spec["affinity"]["podAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [term(rng)]});
    }
    if rng.one_in(8) {
        spec["hostNetwork"] = json!(true);
        spec["containers"][0]["ports"] = json!([{"containerPort": 9100}]);
    }
    serde_json::from_value(spec).expect("a pod spec")
}

/// Generated pods on generated clusters (spreads on keys some nodes lack, minDomains, both
/// policies, selectors empty or absent; node selectors and affinity, taints, cordons; pod
/// (anti-)affinity of both sides; requests, ports, CSI volume limits): every node answers as
/// the reference, and so does the whole placement, before and after a node's labels change.
#[test]
fn the_filters_answer_as_the_reference_on_generated_clusters() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut refusals: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut placed = 0;
    for case in 0..1500 {
        let mut nodes = cluster(&mut rng);
        let app = *rng.pick(&APPS);
        let namespace = *rng.pick(&NAMESPACES[..2]);
        let own = labels_of(&[("app", app)]);
        let spec = incoming_spec(&mut rng, app);
        let pod = Incoming { namespace, labels: &own, spec: &spec };
        let replacing = Replacing {
            requests: Resources::default(),
            volumes: VolumeNeeds {
                attaches: (0..rng.below(3))
                    .map(|_| Attached { driver: "d0".into(), handle: format!("h{}", rng.below(6)).into() })
                    .collect(),
                ..Default::default()
            },
        };
        for round in 0..2 {
            let now = feasible_with(pod, &nodes, &replacing);
            assert_eq!(now, old_feasible_with(pod, &nodes, &replacing), "case {case} round {round}: {spec:?}");
            if let Ok(candidates) = &now {
                let to = choose(candidates, &nodes, namespace, &own);
                assert_eq!(to, old_choose(candidates, &nodes, namespace, &own), "case {case} round {round}");
                placed += 1;
            }
            for at in 0..nodes.len() {
                let fit = fits_with(pod, at, &nodes, &replacing);
                assert_eq!(fit, old_fits_with(pod, at, &nodes, &replacing), "case {case} round {round} node {at}");
                let name = match fit {
                    Ok(()) => "fits",
                    Err(Unfit::PodTopologySpread(_)) => "spread",
                    Err(Unfit::InterPodAffinity(_)) => "inter-pod affinity",
                    Err(Unfit::NodeResourcesFit(_)) => "resources",
                    Err(Unfit::Volume(_)) => "volume",
                    Err(Unfit::NodePorts(_)) => "ports",
                    Err(_) => "node",
                };
                *refusals.entry(name).or_default() += 1;
            }
            // A node relabelled (moved to another zone, its rack gone): the counts follow.
            let at = rng.below(nodes.len());
            let mut moved = (*nodes[at].node).clone();
            moved.labels.insert("zone".into(), format!("z{}", rng.below(4)));
            moved.labels.remove("rack");
            nodes.set_node(at, Arc::new(moved));
        }
    }
    // The cases reach every filter, and both answers.
    for name in ["fits", "spread", "inter-pod affinity", "resources", "volume", "ports", "node"] {
        assert!(refusals.get(name).copied().unwrap_or(0) >= 20, "{name}: {refusals:?}");
    }
    assert!((500..2900).contains(&placed), "{placed} of 3000 placements found a node");
}

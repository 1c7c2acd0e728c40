//! Where kube-scheduler may place a pod, and how many replicas a spread lets it place: the filters
//! that decide *whether* a pod can go on a node, each named after the scheduler plugin it follows
//! (`pkg/scheduler/framework/plugins/...` of Kubernetes 1.37), pure functions of the pod spec and
//! the view's nodes. One toleration test, one node-affinity test, for every rule that needs them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, PodSpec, Taint, Toleration, TopologySpreadConstraint};

use super::projection::NodeInfo;
use crate::core::model::resources::{HostPort, Resources, host_ports, pod_requests, ports_conflict};

/// `NodeUnschedulable`: a cordoned node (`spec.unschedulable`) takes only pods that tolerate
/// `node.kubernetes.io/unschedulable:NoSchedule`.
pub fn node_unschedulable(node: &NodeInfo, spec: &PodSpec) -> bool {
    !node.unschedulable
        || tolerations(spec).iter().any(|t| tolerates(t, crate::core::model::pod::CORDON_TAINT, None, "NoSchedule"))
}

/// `TaintToleration`: every NoSchedule and NoExecute taint of the node is tolerated
/// (PreferNoSchedule only scores; [`NodeInfo`] keeps the other two).
pub fn taint_toleration(node: &NodeInfo, spec: &PodSpec) -> bool {
    untolerated(node, spec).is_none()
}

/// The first taint of `node` that the pod does not tolerate.
pub fn untolerated<'n>(node: &'n NodeInfo, spec: &PodSpec) -> Option<&'n Taint> {
    let tolerations = tolerations(spec);
    node.taints
        .iter()
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, &taint.key, taint.value.as_deref(), &taint.effect)))
}

/// `NodeAffinity`: the pod's `nodeSelector` and its required node affinity both match.
pub fn node_affinity(node: &NodeInfo, spec: &PodSpec) -> bool {
    spec.node_selector.iter().flatten().all(|(k, v)| node.labels.get(k) == Some(v))
        && required_node_affinity(node, spec)
}

/// The filters of this module that need no other pod: the nodes a replacement may go to before
/// resources, ports and the pod (anti-)affinities and spreads are counted.
pub fn takes(node: &NodeInfo, spec: &PodSpec) -> bool {
    node_unschedulable(node, spec) && taint_toleration(node, spec) && node_affinity(node, spec)
}

/// The filters of [`takes`], prepared once for a pod and asked of many nodes: each distinct taint
/// is judged against the tolerations once however many nodes carry it, and the values of a node
/// affinity requirement are looked up in a set rather than scanned. What they answer is
/// [`takes`]'s; what they cost over a cluster is one pass over its nodes, whatever the pod lists.
pub struct NodeFilter<'s, 'n> {
    spec: &'s PodSpec,
    /// Whether the pod tolerates a taint, by (key, value, effect), as each is first met.
    tolerated: HashMap<(&'n str, Option<&'n str>, &'n str), bool>,
    cordon_tolerated: bool,
    /// The required node affinity's terms, each requirement's values as a set; `None`: no
    /// required node affinity.
    terms: Option<Vec<Vec<Requirement<'s>>>>,
}

/// One requirement of a node selector term, its values prepared.
struct Requirement<'s> {
    field: bool,
    key: &'s str,
    operator: &'s str,
    values: BTreeSet<&'s str>,
    first: Option<&'s str>,
}

impl<'s, 'n> NodeFilter<'s, 'n> {
    pub fn new(spec: &'s PodSpec) -> Self {
        let cordon_tolerated =
            tolerations(spec).iter().any(|t| tolerates(t, crate::core::model::pod::CORDON_TAINT, None, "NoSchedule"));
        let terms = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|required| {
                required
                    .node_selector_terms
                    .iter()
                    .map(|term| {
                        let prepare = |field: bool| {
                            move |r: &'s NodeSelectorRequirement| Requirement {
                                field,
                                key: &r.key,
                                operator: &r.operator,
                                values: r.values.iter().flatten().map(String::as_str).collect(),
                                first: r.values.as_ref().and_then(|v| v.first()).map(String::as_str),
                            }
                        };
                        let labels = term.match_expressions.iter().flatten().map(prepare(false));
                        labels.chain(term.match_fields.iter().flatten().map(prepare(true))).collect()
                    })
                    .collect()
            });
        NodeFilter { spec, tolerated: HashMap::new(), cordon_tolerated, terms }
    }

    /// [`takes`]: cordon, taints and node affinity let the pod go on `node`.
    pub fn takes(&mut self, node: &'n NodeInfo) -> bool {
        self.unfit(node).is_none()
    }

    /// The first of those filters that refuses `node`, in the scheduler's order.
    pub fn unfit(&mut self, node: &'n NodeInfo) -> Option<Unfit> {
        if !self.node_unschedulable(node) {
            return Some(Unfit::NodeUnschedulable);
        }
        if let Some(t) = self.untolerated(node) {
            return Some(Unfit::TaintToleration(format!("{}:{}", t.key, t.effect)));
        }
        if !self.node_affinity(node) {
            return Some(Unfit::NodeAffinity);
        }
        None
    }

    /// [`node_unschedulable`].
    pub fn node_unschedulable(&self, node: &NodeInfo) -> bool {
        !node.unschedulable || self.cordon_tolerated
    }

    /// [`untolerated`]: the first taint of `node` the pod does not tolerate.
    pub fn untolerated(&mut self, node: &'n NodeInfo) -> Option<&'n Taint> {
        let spec = self.spec;
        node.taints.iter().find(|taint| {
            let key = (taint.key.as_str(), taint.value.as_deref(), taint.effect.as_str());
            let ok = *self
                .tolerated
                .entry(key)
                .or_insert_with(|| tolerations(spec).iter().any(|t| tolerates(t, key.0, key.1, key.2)));
            !ok
        })
    }

    /// [`node_affinity`]: the nodeSelector and the required node affinity both match.
    pub fn node_affinity(&self, node: &NodeInfo) -> bool {
        self.spec.node_selector.iter().flatten().all(|(k, v)| node.labels.get(k) == Some(v))
            && self.terms.as_ref().is_none_or(|terms| terms.iter().any(|t| term_admits(t, node)))
    }
}

/// A node selector term with its requirements prepared ([`required_node_affinity`]'s rules): all
/// must hold, and a term with none matches no node.
fn term_admits(term: &[Requirement], node: &NodeInfo) -> bool {
    !term.is_empty()
        && term.iter().all(|r| {
            let value = if r.field {
                if r.key != "metadata.name" {
                    return false;
                }
                Some(node.name.as_str())
            } else {
                node.labels.get(r.key).map(String::as_str)
            };
            holds(r.operator, value, |v| r.values.contains(v), r.first)
        })
}

fn tolerations(spec: &PodSpec) -> &[Toleration] {
    spec.tolerations.as_deref().unwrap_or_default()
}

/// One toleration against one taint (`k8s.io/component-helpers` `ToleratesTaint`): an empty
/// effect matches every effect, an empty key with `Exists` every key, `Exists` any value, `Equal`
/// (or no operator) the same value.
pub fn tolerates(t: &Toleration, key: &str, value: Option<&str>, effect: &str) -> bool {
    let exists = t.operator.as_deref() == Some("Exists");
    let key_ok = match t.key.as_deref() {
        None | Some("") => exists,
        Some(k) => k == key,
    };
    let value_ok = exists || t.value.as_deref().unwrap_or("") == value.unwrap_or("");
    let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == effect);
    key_ok && value_ok && effect_ok
}

/// `requiredDuringSchedulingIgnoredDuringExecution` of the node affinity: its terms are ORed, a
/// term's requirements ANDed; a term with no requirement matches no node (as the scheduler has it).
fn required_node_affinity(node: &NodeInfo, spec: &PodSpec) -> bool {
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
    else {
        return true;
    };
    required.node_selector_terms.iter().any(|term| {
        let labels = term.match_expressions.iter().flatten();
        let fields = term.match_fields.iter().flatten();
        let mut any = false;
        let labels_ok = labels.into_iter().all(|r| {
            any = true;
            requirement(r, node.labels.get(&r.key).map(String::as_str))
        });
        let fields_ok = fields.into_iter().all(|r| {
            any = true;
            r.key == "metadata.name" && requirement(r, Some(&node.name))
        });
        any && labels_ok && fields_ok
    })
}

fn requirement(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    holds(&r.operator, value, |v| values.iter().any(|x| x == v), values.first().map(String::as_str))
}

/// One node selector operator on a node's `value` of the key: `has` says whether a value is among
/// the requirement's, `first` is its first value (what `Gt` and `Lt` compare with).
fn holds(operator: &str, value: Option<&str>, has: impl Fn(&str) -> bool, first: Option<&str>) -> bool {
    let number = |s: &str| s.parse::<i64>().ok();
    match operator {
        "In" => value.is_some_and(has),
        "NotIn" => value.is_none_or(|v| !has(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(number), first.and_then(number)), (Some(v), Some(x)) if v > x),
        "Lt" => matches!((value.and_then(number), first.and_then(number)), (Some(v), Some(x)) if v < x),
        _ => false,
    }
}

// --- PodTopologySpread ---------------------------------------------------------------------------

/// Whether the spread counts `node` as one of its domains (`podtopologyspread/common.go`): it
/// carries the topology key, and passes the node affinity (`nodeAffinityPolicy: Honor`, the
/// default) and the taints (`nodeTaintsPolicy: Honor`; the default, Ignore, counts a tainted or
/// cordoned node too).
pub fn spread_counts(c: &TopologySpreadConstraint, node: &NodeInfo, spec: &PodSpec) -> bool {
    node.labels.contains_key(&c.topology_key)
        && (c.node_affinity_policy.as_deref() == Some("Ignore") || node_affinity(node, spec))
        && (c.node_taints_policy.as_deref() != Some("Honor") || taint_toleration(node, spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str)], cordoned: bool) -> NodeInfo {
        let mut l: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        l.insert("kubernetes.io/hostname".into(), name.into());
        NodeInfo {
            name: name.into(),
            labels: l,
            unschedulable: cordoned,
            allocatable: None,
            max_pods: None,
            taints: taints
                .iter()
                .map(|(k, e)| Taint { key: k.to_string(), effect: e.to_string(), ..Default::default() })
                .collect(),
        }
    }

    fn spec(yaml: &str) -> PodSpec {
        serde_saphyr::from_str(yaml).expect("a pod spec")
    }

    const PLAIN: &str = "containers: [{name: app, image: nginx}]\n";

    #[test]
    fn tolerations_follow_the_scheduler() {
        let t: Toleration = serde_saphyr::from_str("operator: Exists").unwrap();
        assert!(tolerates(&t, "anything", Some("x"), "NoExecute"), "no key, Exists: every taint");
        let t: Toleration = serde_saphyr::from_str("key: k\neffect: NoSchedule").unwrap();
        assert!(tolerates(&t, "k", None, "NoSchedule"));
        assert!(!tolerates(&t, "k", Some("v"), "NoSchedule"), "Equal with no value matches no value only");
        assert!(!tolerates(&t, "k", None, "NoExecute"), "another effect");
        let t: Toleration = serde_saphyr::from_str("key: k\noperator: Exists").unwrap();
        assert!(tolerates(&t, "k", Some("v"), "NoExecute"), "no effect: every effect");
    }

    #[test]
    fn cordon_taints_node_selector_and_required_affinity_decide_where_a_pod_goes() {
        let plain = spec(PLAIN);
        assert!(takes(&node("a", &[], &[], false), &plain));
        assert!(!takes(&node("a", &[], &[], true), &plain), "cordoned");
        let tolerant =
            spec(&format!("{PLAIN}tolerations: [{{key: node.kubernetes.io/unschedulable, operator: Exists}}]"));
        assert!(takes(&node("a", &[], &[], true), &tolerant), "the cordon tolerated");
        assert!(!takes(&node("a", &[], &[("dedicated", "NoSchedule")], false), &plain));
        let zoned = spec(&format!("{PLAIN}nodeSelector: {{zone: a}}"));
        assert!(takes(&node("a", &[("zone", "a")], &[], false), &zoned));
        assert!(!takes(&node("b", &[("zone", "b")], &[], false), &zoned));
        let affine = spec(&format!(
            "{PLAIN}affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: \
             [{{matchExpressions: [{{key: pool, operator: NotIn, values: [gpu]}}]}}]}}}}}}"
        ));
        assert!(takes(&node("a", &[], &[], false), &affine), "NotIn matches a node without the label");
        assert!(!takes(&node("g", &[("pool", "gpu")], &[], false), &affine));
    }

    /// The prepared filter answers as `takes` on every filter it prepares: tolerations by distinct
    /// taint, requirement values as a set, match fields, Gt, empty terms.
    #[test]
    fn the_prepared_filter_answers_as_takes() {
        let nodes = [
            node("a", &[("zone", "a"), ("cpus", "8")], &[], false),
            node("b", &[("zone", "b"), ("cpus", "2")], &[("dedicated", "NoSchedule")], false),
            node("c", &[("zone", "c")], &[("dedicated", "NoSchedule"), ("gpu", "NoExecute")], true),
            node("d", &[], &[], false),
        ];
        let many: Vec<String> = (0..50).map(|i| format!("z{i}")).chain(["a".to_string(), "c".to_string()]).collect();
        let specs = [
            PLAIN.to_string(),
            format!("{PLAIN}tolerations: [{{key: dedicated, operator: Exists}}]"),
            format!("{PLAIN}tolerations: [{{operator: Exists}}]"),
            format!("{PLAIN}nodeSelector: {{zone: b}}\ntolerations: [{{key: dedicated, operator: Exists}}]"),
            format!(
                "{PLAIN}affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: \
                 [{{matchExpressions: [{{key: zone, operator: In, values: [{}]}}]}}, {{matchFields: [{{key: \
                 metadata.name, operator: In, values: [d]}}]}}]}}}}}}",
                many.join(", ")
            ),
            format!(
                "{PLAIN}affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: \
                 [{{matchExpressions: [{{key: cpus, operator: Gt, values: ['4']}}]}}, {{}}]}}}}}}"
            ),
        ];
        for yaml in &specs {
            let s = spec(yaml);
            let mut filter = NodeFilter::new(&s);
            for n in &nodes {
                assert_eq!(filter.takes(n), takes(n, &s), "node {} under {yaml}", n.name);
            }
        }
        // What each answer was, for the record: the set of values and the fields reach a and d.
        let s = spec(&specs[4]);
        let mut filter = NodeFilter::new(&s);
        assert_eq!(nodes.iter().filter(|n| filter.takes(n)).map(|n| n.name.as_str()).collect::<Vec<_>>(), ["a", "d"]);
    }
}

// --- a pod among other pods: the filters that count what is placed ------------------------------

/// A pod already bound to a node, as the filters that count other pods read it. Its namespace and
/// labels are shared with the pod they come from (a drain replay holds every pod of the cluster).
#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    pub namespace: Arc<str>,
    pub labels: Arc<BTreeMap<String, String>>,
    pub requests: Resources,
    pub ports: Vec<HostPort>,
    /// Being deleted: PodTopologySpread no longer counts it; the other filters still do.
    pub terminating: bool,
}

/// What pods may request of `node`: its `status.allocatable`; a node that reports none is not
/// bounded by CPU, memory or ephemeral storage (and offers no extended resource).
pub fn allocatable(node: &NodeInfo) -> Resources {
    node.allocatable.clone().unwrap_or(Resources {
        cpu_milli: i64::MAX / 4,
        memory: i64::MAX / 4,
        ephemeral_storage: i64::MAX / 4,
        ..Default::default()
    })
}

/// A node with what is on it: its pods, kept in namespace order (the filters that count pods
/// read one namespace, so a placement reads a few pods a node, not all of them) and their
/// requests summed.
#[derive(Clone, Debug)]
pub struct NodeState {
    pub node: Arc<NodeInfo>,
    pub allocatable: Resources,
    /// `allocatable.pods`; `None`: not known, unbounded.
    pub max_pods: Option<i64>,
    pods: Vec<Placed>,
    used: Resources,
}

impl NodeState {
    /// The node empty; what it does not report (`allocatable`) does not bound it.
    pub fn new(node: Arc<NodeInfo>) -> NodeState {
        let allocatable = allocatable(&node);
        NodeState { max_pods: node.max_pods, node, allocatable, pods: Vec::new(), used: Resources::default() }
    }

    pub fn pods(&self) -> &[Placed] {
        &self.pods
    }

    /// The pods of one namespace.
    pub fn in_namespace(&self, namespace: &str) -> &[Placed] {
        let from = self.pods.partition_point(|p| *p.namespace < *namespace);
        let to = from + self.pods[from..].partition_point(|p| *p.namespace == *namespace);
        &self.pods[from..to]
    }

    pub fn push(&mut self, pod: Placed) {
        self.used.add(&pod.requests);
        let at = self.pods.partition_point(|p| *p.namespace <= *pod.namespace);
        self.pods.insert(at, pod);
    }

    /// Takes off the first pod of `namespace` that `which` picks.
    pub fn remove(&mut self, namespace: &str, which: impl Fn(&Placed) -> bool) -> Option<Placed> {
        let from = self.pods.partition_point(|p| *p.namespace < *namespace);
        let at = from + self.pods[from..].iter().take_while(|p| *p.namespace == *namespace).position(which)?;
        let pod = self.pods.remove(at);
        // Summed again rather than subtracted: the sums saturate, and a node holds few pods.
        self.used = Resources::default();
        for p in &self.pods {
            self.used.add(&p.requests);
        }
        Some(pod)
    }

    /// The requests of the pods on it, summed.
    pub fn used(&self) -> &Resources {
        &self.used
    }
}

/// The nodes a pod is placed among, with where each namespace has pods: the filters that count
/// other pods read one namespace, so a placement visits the nodes that hold pods of it, not every
/// pod of the cluster (a drain replay of a large cluster places thousands of pods).
#[derive(Clone, Debug, Default)]
pub struct Nodes {
    states: Vec<NodeState>,
    /// Per namespace: the nodes holding pods of it (index into `states`), with how many.
    by_namespace: HashMap<Arc<str>, BTreeMap<usize, usize>>,
}

impl Nodes {
    pub fn new(states: Vec<NodeState>) -> Nodes {
        let mut by_namespace: HashMap<Arc<str>, BTreeMap<usize, usize>> = HashMap::new();
        for (at, s) in states.iter().enumerate() {
            for p in &s.pods {
                *by_namespace.entry(p.namespace.clone()).or_default().entry(at).or_default() += 1;
            }
        }
        Nodes { states, by_namespace }
    }

    /// The nodes empty.
    pub fn empty(nodes: impl IntoIterator<Item = Arc<NodeInfo>>) -> Nodes {
        Nodes::new(nodes.into_iter().map(NodeState::new).collect())
    }

    /// The nodes holding pods of `namespace`, in order.
    pub fn holding(&self, namespace: &str) -> impl Iterator<Item = usize> + '_ {
        self.by_namespace.get(namespace).into_iter().flat_map(|m| m.keys().copied())
    }

    pub fn push(&mut self, at: usize, pod: Placed) {
        *self.by_namespace.entry(pod.namespace.clone()).or_default().entry(at).or_default() += 1;
        self.states[at].push(pod);
    }

    /// Takes off `states[at]` the first pod of `namespace` that `which` picks.
    pub fn remove(&mut self, at: usize, namespace: &str, which: impl Fn(&Placed) -> bool) -> Option<Placed> {
        let pod = self.states[at].remove(namespace, which)?;
        if let Some(on) = self.by_namespace.get_mut(namespace)
            && let Some(n) = on.get_mut(&at)
        {
            *n -= 1;
            if *n == 0 {
                on.remove(&at);
            }
        }
        Some(pod)
    }

    /// Replaces the node of `states[at]` (a cordon, and the node as it was again).
    pub fn set_node(&mut self, at: usize, node: Arc<NodeInfo>) -> Arc<NodeInfo> {
        std::mem::replace(&mut self.states[at].node, node)
    }
}

impl std::ops::Deref for Nodes {
    type Target = [NodeState];
    fn deref(&self) -> &[NodeState] {
        &self.states
    }
}

/// Why a pod cannot go on a node: the filter that says no, named after the scheduler plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unfit {
    NodeUnschedulable,
    TaintToleration(String),
    NodeAffinity,
    NodeResourcesFit(String),
    NodePorts(i32),
    InterPodAffinity(String),
    PodTopologySpread(usize),
}

impl std::fmt::Display for Unfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unfit::NodeUnschedulable => f.write_str("cordoned"),
            Unfit::TaintToleration(t) => write!(f, "taint {t} not tolerated"),
            Unfit::NodeAffinity => f.write_str("nodeSelector or required node affinity not met"),
            Unfit::NodeResourcesFit(r) => write!(f, "not enough {r}"),
            Unfit::NodePorts(p) => write!(f, "host port {p} in use"),
            Unfit::InterPodAffinity(why) => f.write_str(why),
            Unfit::PodTopologySpread(i) => write!(f, "topologySpreadConstraints[{i}] would be skewed beyond maxSkew"),
        }
    }
}

/// The pod to place: its namespace, labels and spec (a replacement: its template's).
#[derive(Clone, Copy, Debug)]
pub struct Incoming<'a> {
    pub namespace: &'a str,
    pub labels: &'a std::collections::BTreeMap<String, String>,
    pub spec: &'a PodSpec,
}

/// A spread's domains (topology values) with their matching pods, and the minimum among them.
type SpreadDomains<'a> = (BTreeMap<&'a str, i32>, i32);

/// What the filters that count other pods read, counted once for a pod over every node (so a
/// placement costs one pass over the nodes, not one a candidate node).
struct Counted<'a> {
    /// Per `DoNotSchedule` spread of the pod (its index): the domains it counts with their matching
    /// pods and the minimum it skews against; `None` for a spread without a selector.
    spreads: Vec<(usize, Option<SpreadDomains<'a>>)>,
    /// Per required anti-affinity term: its topology key and the values whose domain holds a
    /// matching pod.
    anti: Vec<(&'a str, BTreeSet<&'a str>)>,
    /// The same for the required affinity terms, and whether the first-pod escape applies.
    affinity: Vec<(&'a str, BTreeSet<&'a str>)>,
    affinity_escape: bool,
}

/// Whether a pod of `namespace` with `labels` matches `term` of a pod in `own`.
pub(crate) fn term_matches(
    term: &k8s_openapi::api::core::v1::PodAffinityTerm,
    own: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let in_namespace = match term.namespaces.as_deref() {
        Some(list) if !list.is_empty() => list.iter().any(|n| n == namespace),
        _ => term.namespace_selector.is_some() || namespace == own,
    };
    in_namespace && term.label_selector.as_ref().is_some_and(|s| crate::core::model::selector::matches(s, labels))
}

/// Whether a pod on `n` matches `term` of a pod in `own`: only the namespaces the term reads.
fn any_matches(term: &k8s_openapi::api::core::v1::PodAffinityTerm, own: &str, n: &NodeState) -> bool {
    let hit = |pods: &[Placed]| pods.iter().any(|p| term_matches(term, own, &p.namespace, &p.labels));
    match term.namespaces.as_deref() {
        Some(list) if !list.is_empty() => list.iter().any(|ns| hit(n.in_namespace(ns))),
        _ if term.namespace_selector.is_some() => hit(n.pods()),
        _ => hit(n.in_namespace(own)),
    }
}

/// The nodes that may hold a pod matching `term` of a pod in `own`: those holding pods of the
/// namespaces the term reads.
fn term_nodes(term: &k8s_openapi::api::core::v1::PodAffinityTerm, own: &str, nodes: &Nodes) -> BTreeSet<usize> {
    match term.namespaces.as_deref() {
        Some(list) if !list.is_empty() => list.iter().flat_map(|ns| nodes.holding(ns)).collect(),
        _ if term.namespace_selector.is_some() => (0..nodes.len()).collect(),
        _ => nodes.holding(own).collect(),
    }
}

fn counted<'a>(pod: Incoming<'a>, nodes: &'a Nodes) -> Counted<'a> {
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
    let with_match = |terms: &[&'a k8s_openapi::api::core::v1::PodAffinityTerm]| -> Vec<(&'a str, BTreeSet<&'a str>)> {
        terms
            .iter()
            .map(|term| {
                let values = term_nodes(term, pod.namespace, nodes)
                    .into_iter()
                    .map(|at| &nodes[at])
                    .filter(|n| any_matches(term, pod.namespace, n))
                    .filter_map(|n| n.node.labels.get(&term.topology_key).map(String::as_str))
                    .collect();
                (term.topology_key.as_str(), values)
            })
            .collect()
    };
    let anti_terms: Vec<_> = affinity
        .iter()
        .flat_map(|a| a.pod_anti_affinity.iter())
        .flat_map(|a| a.required_during_scheduling_ignored_during_execution.iter().flatten())
        .collect();
    let affinity_terms: Vec<_> = affinity
        .iter()
        .flat_map(|a| a.pod_affinity.iter())
        .flat_map(|a| a.required_during_scheduling_ignored_during_execution.iter().flatten())
        .collect();
    let affinity_escape = !affinity_terms.is_empty()
        && !affinity_terms.iter().all(|t| {
            term_nodes(t, pod.namespace, nodes).into_iter().any(|at| any_matches(t, pod.namespace, &nodes[at]))
        })
        && affinity_terms.iter().all(|t| term_matches(t, pod.namespace, pod.namespace, pod.labels));
    Counted { spreads, anti: with_match(&anti_terms), affinity: with_match(&affinity_terms), affinity_escape }
}

/// Whether `pod` can go on `nodes[at]`, the other nodes as they are (for the affinities and the
/// spreads): `Ok`, or the first filter that refuses, in the scheduler's order.
pub fn fits(pod: Incoming, at: usize, nodes: &Nodes) -> Result<(), Unfit> {
    fits_counted(pod, at, nodes, &counted(pod, nodes), &pod_requests(pod.spec), &host_ports(pod.spec))
}

fn fits_counted(
    pod: Incoming,
    at: usize,
    nodes: &[NodeState],
    counted: &Counted,
    want: &Resources,
    wanted_ports: &[HostPort],
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
    // InterPodAffinity: anti-affinity refuses a node whose domain holds a matching pod (a node
    // without the key passes); affinity needs a match in the node's domain for every term (a node
    // without the key fails), unless no pod anywhere matches and the pod matches its own terms.
    for (key, values) in &counted.anti {
        if here.node.labels.get(*key).is_some_and(|v| values.contains(v.as_str())) {
            return Err(Unfit::InterPodAffinity(format!("required pod anti-affinity on {key}")));
        }
    }
    if !counted.affinity_escape {
        for (key, values) in &counted.affinity {
            if !here.node.labels.get(*key).is_some_and(|v| values.contains(v.as_str())) {
                return Err(Unfit::InterPodAffinity(format!("required pod affinity on {key}")));
            }
        }
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

/// Where the scheduler may put `pod` now: the nodes every filter lets it go to, or, when none
/// does, why each node refuses (the first filter that says no, by node name).
pub fn feasible(pod: Incoming, nodes: &Nodes) -> Result<Vec<usize>, Vec<(String, Unfit)>> {
    let counted = counted(pod, nodes);
    let (want, ports) = (pod_requests(pod.spec), host_ports(pod.spec));
    let mut ok = Vec::new();
    let mut why = Vec::new();
    for at in 0..nodes.len() {
        match fits_counted(pod, at, nodes, &counted, &want, &ports) {
            Ok(()) => ok.push(at),
            Err(e) => why.push((nodes[at].node.name.clone(), e)),
        }
    }
    if ok.is_empty() { Err(why) } else { Ok(ok) }
}

/// Where among `candidates` a new pod goes: the node with the fewest pods of the same labels in
/// the namespace (the scheduler's default spreading), then the fewest pods, then the name. The
/// scheduler scores more than this; the choice matters only where it changes what fits next.
pub fn choose(candidates: &[usize], nodes: &Nodes, namespace: &str, labels: &BTreeMap<String, String>) -> usize {
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

/// How many of `n` replicas of `pod` the scheduler places on `states`, one after the other, each
/// counted by the next (the rest stay Pending); the replicas placed are added to `states`.
pub fn place_replicas(pod: Incoming, states: &mut Nodes, n: usize) -> usize {
    let one = Placed {
        namespace: pod.namespace.into(),
        labels: Arc::new(pod.labels.clone()),
        requests: pod_requests(pod.spec),
        ports: host_ports(pod.spec),
        terminating: false,
    };
    for placed in 0..n {
        let Ok(candidates) = feasible(pod, states) else { return placed };
        let at = choose(&candidates, states, pod.namespace, pod.labels);
        states.push(at, one.clone());
    }
    n
}

#[cfg(test)]
mod pod_tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(name: &str, labels: &[(&str, &str)]) -> NodeInfo {
        let mut l: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        l.insert("kubernetes.io/hostname".into(), name.into());
        NodeInfo { name: name.into(), labels: l, ..Default::default() }
    }

    fn spec(yaml: &str) -> PodSpec {
        serde_saphyr::from_str(yaml).expect("a pod spec")
    }

    fn labels(app: &str) -> BTreeMap<String, String> {
        [("app".to_string(), app.to_string())].into()
    }

    fn placed(app: &str, cpu_milli: i64) -> Placed {
        Placed {
            namespace: "default".into(),
            labels: Arc::new(labels(app)),
            requests: Resources { cpu_milli, ..Default::default() },
            ports: Vec::new(),
            terminating: false,
        }
    }

    fn state(n: &NodeInfo, cpu: i64, pods: Vec<Placed>) -> NodeState {
        let mut s = NodeState::new(Arc::new(n.clone()));
        s.allocatable = Resources { cpu_milli: cpu, memory: 1 << 40, ..Default::default() };
        s.max_pods = Some(110);
        for p in pods {
            s.push(p);
        }
        s
    }

    /// The pods of a node in namespace order, the nodes holding each namespace and the requests
    /// summed follow every push and removal.
    #[test]
    fn nodes_keep_their_pods_by_namespace() {
        let (a, b) = (node("a", &[]), node("b", &[]));
        let mut nodes = Nodes::new(vec![state(&a, 1000, vec![]), state(&b, 1000, vec![])]);
        let in_ns = |ns: &str, app: &str, cpu: i64| Placed { namespace: ns.into(), ..placed(app, cpu) };
        nodes.push(0, in_ns("web", "x", 100));
        nodes.push(0, in_ns("api", "y", 200));
        nodes.push(0, in_ns("web", "z", 300));
        nodes.push(1, in_ns("web", "x", 400));
        let apps = |at: usize, ns: &str| -> Vec<String> {
            nodes[at].in_namespace(ns).iter().map(|p| p.labels["app"].clone()).collect()
        };
        assert_eq!(apps(0, "web"), ["x", "z"]);
        assert_eq!(apps(0, "api"), ["y"]);
        assert!(apps(0, "db").is_empty());
        assert_eq!(nodes.holding("web").collect::<Vec<_>>(), [0, 1]);
        assert_eq!(nodes[0].used().cpu_milli, 600);
        assert_eq!(nodes.remove(0, "web", |p| p.labels["app"] == "z").map(|p| p.requests.cpu_milli), Some(300));
        assert_eq!(nodes.remove(0, "web", |p| p.labels["app"] == "y"), None, "y is in api");
        assert_eq!(nodes[0].used().cpu_milli, 300);
        nodes.remove(1, "web", |_| true);
        assert_eq!(nodes.holding("web").collect::<Vec<_>>(), [0], "b holds no web pod now");
        assert_eq!(nodes.holding("api").collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn resources_that_do_not_fit_refuse_the_node() {
        let (a, b) = (node("a", &[]), node("b", &[]));
        let nodes = Nodes::new(vec![state(&a, 1000, vec![placed("other", 800)]), state(&b, 1000, vec![])]);
        let s = spec("containers: [{name: app, image: x, resources: {requests: {cpu: 500m}}}]");
        let pod = Incoming { namespace: "default", labels: &labels("web"), spec: &s };
        assert_eq!(fits(pod, 0, &nodes), Err(Unfit::NodeResourcesFit("cpu".into())));
        assert_eq!(feasible(pod, &nodes), Ok(vec![1]));
        // Boundary: exactly what is free fits.
        let s = spec("containers: [{name: app, image: x, resources: {requests: {cpu: 200m}}}]");
        assert_eq!(fits(Incoming { spec: &s, ..pod }, 0, &nodes), Ok(()));
    }

    #[test]
    fn host_ports_conflict_on_protocol_port_and_address() {
        let used = HostPort { protocol: "TCP".into(), ip: "0.0.0.0".into(), port: 9100 };
        let wanted = |ip: &str, protocol: &str| HostPort { protocol: protocol.into(), ip: ip.into(), port: 9100 };
        assert!(ports_conflict(&wanted("10.0.0.1", "TCP"), &used), "the wildcard takes every address");
        assert!(!ports_conflict(&wanted("0.0.0.0", "UDP"), &used), "another protocol");
        let specific = HostPort { ip: "10.0.0.1".into(), ..used.clone() };
        assert!(!ports_conflict(&wanted("10.0.0.2", "TCP"), &specific));
        let s = spec("hostNetwork: true\ncontainers: [{name: app, image: x, ports: [{containerPort: 9100}]}]");
        assert_eq!(host_ports(&s), vec![used.clone()], "with hostNetwork a container port is a host port");
        let n = node("a", &[]);
        let mut taken = placed("exporter", 0);
        taken.ports = vec![used];
        let nodes = Nodes::new(vec![state(&n, 1000, vec![taken])]);
        let pod = Incoming { namespace: "default", labels: &labels("exporter"), spec: &s };
        assert_eq!(fits(pod, 0, &nodes), Err(Unfit::NodePorts(9100)));
    }

    #[test]
    fn required_anti_affinity_on_hostname_keeps_one_a_node() {
        let (a, b) = (node("a", &[]), node("b", &[]));
        let s = spec(
            "containers: [{name: app, image: x}]\naffinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
             [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}}",
        );
        let nodes = Nodes::new(vec![state(&a, 1000, vec![placed("web", 0)]), state(&b, 1000, vec![placed("api", 0)])]);
        let pod = Incoming { namespace: "default", labels: &labels("web"), spec: &s };
        assert_eq!(feasible(pod, &nodes), Ok(vec![1]));
        let full = Nodes::new(vec![state(&a, 1000, vec![placed("web", 0)]), state(&b, 1000, vec![placed("web", 0)])]);
        let why = feasible(pod, &full).unwrap_err();
        assert_eq!(why[0].1, Unfit::InterPodAffinity("required pod anti-affinity on kubernetes.io/hostname".into()));
    }

    #[test]
    fn required_affinity_needs_a_match_in_the_domain_unless_none_exists_and_it_matches_itself() {
        let (a, b) = (node("a", &[("zone", "z1")]), node("b", &[("zone", "z2")]));
        let s = spec(
            "containers: [{name: app, image: x}]\naffinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
             [{topologyKey: zone, labelSelector: {matchLabels: {app: cache}}}]}}",
        );
        let nodes = Nodes::new(vec![state(&a, 1000, vec![placed("cache", 0)]), state(&b, 1000, vec![])]);
        let pod = Incoming { namespace: "default", labels: &labels("web"), spec: &s };
        assert_eq!(feasible(pod, &nodes), Ok(vec![0]));
        // No cache pod anywhere, and the pod is no cache pod: nowhere.
        let empty = Nodes::new(vec![state(&a, 1000, vec![]), state(&b, 1000, vec![])]);
        assert!(feasible(pod, &empty).is_err());
        // The first cache pod may go anywhere (it matches its own term).
        let first = Incoming { labels: &labels("cache"), ..pod };
        assert_eq!(feasible(first, &empty), Ok(vec![0, 1]));
    }

    /// The drain's case: a hostname spread, three nodes one a replica, one cordoned with its
    /// replica evicted. The cordoned node is still a domain (nodeTaintsPolicy Ignore) with 0, so
    /// the replacement fits nowhere; with Honor (and the cordon taint on the node) it goes.
    #[test]
    fn a_cordoned_domain_keeps_a_replacement_pending_under_the_default_policy() {
        let mut cordoned = node("a", &[]);
        cordoned.unschedulable = true;
        cordoned.taints = vec![k8s_openapi::api::core::v1::Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        let (b, c) = (node("b", &[]), node("c", &[]));
        let nodes = Nodes::new(vec![
            state(&cordoned, 1000, vec![]),
            state(&b, 1000, vec![placed("web", 0)]),
            state(&c, 1000, vec![placed("web", 0)]),
        ]);
        let spread = |policy: &str| {
            spec(&format!(
                "containers: [{{name: app, image: x}}]\ntopologySpreadConstraints: [{{maxSkew: 1, topologyKey: \
                 kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: web}}}}{policy}}}]"
            ))
        };
        let s = spread("");
        let pod = Incoming { namespace: "default", labels: &labels("web"), spec: &s };
        let why = feasible(pod, &nodes).unwrap_err();
        assert_eq!(
            why.iter().map(|(n, u)| (n.as_str(), u.clone())).collect::<Vec<_>>(),
            [("a", Unfit::NodeUnschedulable), ("b", Unfit::PodTopologySpread(0)), ("c", Unfit::PodTopologySpread(0))]
        );
        let s = spread(", nodeTaintsPolicy: Honor");
        assert_eq!(feasible(Incoming { spec: &s, ..pod }, &nodes), Ok(vec![1, 2]));
    }

    /// `labelSelector: {}` selects every pod of the namespace (`LabelSelectorAsSelector` makes it
    /// `labels.Everything()`): two pods of other apps on `a` skew it, the pod goes to `b`.
    #[test]
    fn an_empty_spread_selector_counts_every_pod_of_the_namespace() {
        let (a, b) = (node("a", &[]), node("b", &[]));
        let nodes = Nodes::new(vec![
            state(&a, 1000, vec![placed("api", 0), placed("db", 0)]),
            state(&b, 1000, vec![Placed { namespace: "other".into(), ..placed("api", 0) }]),
        ]);
        let s = spec(
            "containers: [{name: app, image: x}]\ntopologySpreadConstraints: [{maxSkew: 1, topologyKey: \
             kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]",
        );
        let pod = Incoming { namespace: "default", labels: &labels("web"), spec: &s };
        assert_eq!(fits(pod, 0, &nodes), Err(Unfit::PodTopologySpread(0)));
        assert_eq!(feasible(pod, &nodes), Ok(vec![1]), "another namespace's pod is not counted");
    }

    /// Replicas placed one after the other: a tainted node the default policy counts keeps each
    /// other node at maxSkew; with Honor the two usable nodes take them all, evenly.
    #[test]
    fn replicas_are_placed_one_after_the_other() {
        let mut tainted = node("cp", &[]);
        tainted.taints = vec![k8s_openapi::api::core::v1::Taint {
            key: "dedicated".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        let (a, b) = (node("a", &[]), node("b", &[]));
        let spread = |policy: &str| {
            spec(&format!(
                "containers: [{{name: app, image: x}}]\ntopologySpreadConstraints: [{{maxSkew: 1, topologyKey: \
                 kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: web}}}}{policy}}}]"
            ))
        };
        let fresh =
            || Nodes::new(vec![state(&tainted, 1000, vec![]), state(&a, 1000, vec![]), state(&b, 1000, vec![])]);
        let s = spread("");
        let pod = Incoming { namespace: "default", labels: &labels("web"), spec: &s };
        assert_eq!(place_replicas(pod, &mut fresh(), 4), 2);
        let s = spread(", nodeTaintsPolicy: Honor");
        let mut states = fresh();
        assert_eq!(place_replicas(Incoming { spec: &s, ..pod }, &mut states, 4), 4);
        assert_eq!(states.iter().map(|s| s.pods().len()).collect::<Vec<_>>(), [0, 2, 2]);
    }
}

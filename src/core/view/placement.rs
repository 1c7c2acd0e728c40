//! Where kube-scheduler may place a pod, and how many replicas a spread lets it place: the filters
//! that decide *whether* a pod can go on a node, each named after the scheduler plugin it follows
//! (`pkg/scheduler/framework/plugins/...` of Kubernetes 1.37), pure functions of the pod spec and
//! the view's nodes. One toleration test, one node-affinity test, for every rule that needs them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, PodAffinityTerm, PodSpec, Taint, Toleration, TopologySpreadConstraint,
};

use super::node_selector::{holds, node_selector_admits};
use super::nodes::{Column, NO_DOMAIN};
use super::projection::NodeInfo;
use super::storage::{Attached, VolumeNeeds, VolumeUnfit};
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
    node_selector_admits(required, node)
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
    /// Its name: a victim of preemption is named.
    pub name: Arc<str>,
    /// `spec.priority`: DefaultPreemption removes only pods of a lower one.
    pub priority: i32,
    pub labels: Arc<BTreeMap<String, String>>,
    pub requests: Resources,
    pub ports: Vec<HostPort>,
    /// Being deleted: PodTopologySpread no longer counts it; the other filters still do.
    pub terminating: bool,
    /// Its required pod anti-affinity terms: they keep the pods they match off its domains
    /// (InterPodAffinity's `satisfyExistingPodsAntiAffinity`).
    pub anti_affinity: Arc<[PodAffinityTerm]>,
    /// The claims it mounts (VolumeRestrictions) and the CSI volumes they attach to its node
    /// (NodeVolumeLimits).
    pub claims: Arc<[Arc<str>]>,
    pub volumes: Arc<[Attached]>,
}

/// The required pod anti-affinity terms of `spec`, as a [`Placed`] keeps them.
pub fn required_anti_affinity(spec: &PodSpec) -> Arc<[PodAffinityTerm]> {
    spec.affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref())
        .map(Arc::from)
        .unwrap_or_default()
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
    /// Its CSINode's volume limits, per driver (none: unbounded).
    pub volume_limits: Arc<BTreeMap<String, i64>>,
    pods: Vec<Placed>,
    /// The CSI volumes its pods attach, each once (NodeVolumeLimits).
    attached: Vec<Attached>,
    used: Resources,
}

impl NodeState {
    /// The node empty; what it does not report (`allocatable`) does not bound it.
    pub fn new(node: Arc<NodeInfo>) -> NodeState {
        let allocatable = allocatable(&node);
        NodeState {
            max_pods: node.max_pods,
            node,
            allocatable,
            volume_limits: Arc::default(),
            pods: Vec::new(),
            attached: Vec::new(),
            used: Resources::default(),
        }
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
        for v in pod.volumes.iter() {
            if !self.attached.contains(v) {
                self.attached.push(v.clone());
            }
        }
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
        self.attached.clear();
        for p in &self.pods {
            self.used.add(&p.requests);
            for v in p.volumes.iter() {
                if !self.attached.contains(v) {
                    self.attached.push(v.clone());
                }
            }
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
    /// The nodes holding pods with required anti-affinity terms, with how many: per namespace,
    /// those whose terms read only their own namespace (most: neither `namespaces` nor a
    /// `namespaceSelector`), so an incoming pod is checked against its own namespace's; and those
    /// with any term that reads others, checked for every pod.
    anti_own: HashMap<Arc<str>, BTreeMap<usize, usize>>,
    anti_wide: BTreeMap<usize, usize>,
    /// The namespaces' labels, for the terms' `namespaceSelector`s; a namespace not in it has
    /// none (as the scheduler takes a namespace it cannot find).
    namespace_labels: Arc<HashMap<String, BTreeMap<String, String>>>,
    /// The domains of each topology key a spread asked for, numbered over the nodes: a drain
    /// replay places thousands of pods on the same nodes, whose labels change only by
    /// [`Nodes::set_node`] (which forgets them if they do).
    columns: Columns,
}

/// [`Nodes`]' numbered domains, by topology key.
#[derive(Debug, Default)]
struct Columns(std::sync::Mutex<HashMap<String, Arc<Column>>>);

impl Columns {
    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Column>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Clone for Columns {
    fn clone(&self) -> Self {
        Columns(std::sync::Mutex::new(self.kept().clone()))
    }
}

/// No labels: a namespace [`Nodes`] does not know.
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl Nodes {
    pub fn new(states: Vec<NodeState>) -> Nodes {
        let mut nodes = Nodes::default();
        for (at, s) in states.iter().enumerate() {
            for p in &s.pods {
                *nodes.by_namespace.entry(p.namespace.clone()).or_default().entry(at).or_default() += 1;
                if let Some(counts) = nodes.anti_index(p) {
                    *counts.entry(at).or_default() += 1;
                }
            }
        }
        nodes.states = states;
        nodes
    }

    /// Where a pod with required anti-affinity terms is indexed (see `anti_own`); `None` for one
    /// without.
    fn anti_index(&mut self, pod: &Placed) -> Option<&mut BTreeMap<usize, usize>> {
        if pod.anti_affinity.is_empty() {
            return None;
        }
        let own_only = pod
            .anti_affinity
            .iter()
            .all(|t| t.namespaces.as_deref().is_none_or(<[String]>::is_empty) && t.namespace_selector.is_none());
        Some(match own_only {
            true => self.anti_own.entry(pod.namespace.clone()).or_default(),
            false => &mut self.anti_wide,
        })
    }

    /// With the namespaces' labels (the terms' `namespaceSelector`s read them).
    pub fn with_namespace_labels(mut self, labels: HashMap<String, BTreeMap<String, String>>) -> Nodes {
        self.namespace_labels = Arc::new(labels);
        self
    }

    /// The labels of `namespace`; none where it is not known.
    pub fn namespace_labels(&self, namespace: &str) -> &BTreeMap<String, String> {
        self.namespace_labels.get(namespace).unwrap_or(&NO_LABELS)
    }

    /// The nodes empty.
    pub fn empty(nodes: impl IntoIterator<Item = Arc<NodeInfo>>) -> Nodes {
        Nodes::new(nodes.into_iter().map(NodeState::new).collect())
    }

    /// The domains of the topology key `key` over the nodes (numbered at the first ask).
    pub fn column(&self, key: &str) -> Arc<Column> {
        let mut kept = self.columns.kept();
        if let Some(column) = kept.get(key) {
            return column.clone();
        }
        let column = Arc::new(Column::of(self.states.iter().map(|s| &*s.node), key));
        kept.insert(key.to_string(), column.clone());
        column
    }

    /// The nodes holding pods of `namespace`, in order.
    pub fn holding(&self, namespace: &str) -> impl Iterator<Item = usize> + '_ {
        self.by_namespace.get(namespace).into_iter().flat_map(|m| m.keys().copied())
    }

    pub fn push(&mut self, at: usize, pod: Placed) {
        *self.by_namespace.entry(pod.namespace.clone()).or_default().entry(at).or_default() += 1;
        if let Some(counts) = self.anti_index(&pod) {
            *counts.entry(at).or_default() += 1;
        }
        self.states[at].push(pod);
    }

    /// Takes off `states[at]` the first pod of `namespace` that `which` picks.
    pub fn remove(&mut self, at: usize, namespace: &str, which: impl Fn(&Placed) -> bool) -> Option<Placed> {
        let pod = self.states[at].remove(namespace, which)?;
        let less = |counts: &mut BTreeMap<usize, usize>| {
            if let Some(n) = counts.get_mut(&at) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&at);
                }
            }
        };
        if let Some(on) = self.by_namespace.get_mut(namespace) {
            less(on);
        }
        if let Some(counts) = self.anti_index(&pod) {
            less(counts);
        }
        Some(pod)
    }

    /// Replaces the node of `states[at]` (a cordon, and the node as it was again).
    pub fn set_node(&mut self, at: usize, node: Arc<NodeInfo>) -> Arc<NodeInfo> {
        if node.labels != self.states[at].node.labels {
            self.columns.kept().clear();
        }
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
    /// The volume filters (VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone).
    Volume(VolumeUnfit),
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
            Unfit::Volume(v) => v.fmt(f),
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

/// A `DoNotSchedule` spread of the pod, counted over the nodes.
struct Spread<'a> {
    /// Its index among the pod's spreads.
    index: usize,
    constraint: &'a TopologySpreadConstraint,
    /// Its key's domains, by node.
    column: Arc<Column>,
    /// The matching pods per domain (by number; 0 in a domain it does not count), and the minimum
    /// it skews against; `None` for a spread without a selector.
    counts: Option<(Vec<i32>, i32)>,
    /// Whether the pod itself matches the selector (1) or not (0).
    own: i32,
}

/// What the filters that count other pods read, counted once for a pod over every node (so a
/// placement costs one pass over the nodes, not one a candidate node).
struct Counted<'a> {
    spreads: Vec<Spread<'a>>,
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

/// Whether a pod of `namespace` (its namespace labelled `namespace_labels`; `None`: not known) with
/// `labels` matches `term` of a pod of `own` labelled `own_labels`. As kube-scheduler's
/// `AffinityTerm.Matches` (`k8s.io/kube-scheduler/framework/types.go`) reads a term: in the
/// namespaces it lists, or those its `namespaceSelector` selects (`{}`: all), or the pod's own
/// where it has neither; then its `labelSelector` (none selects nothing), with `matchLabelKeys` /
/// `mismatchLabelKeys` taken as the apiserver merges them into it (`In` / `NotIn` the owning pod's
/// value of the key, for the keys it carries). An unknown namespace's labels: its selector is
/// taken to select it (the admission counts, which read no namespace).
pub(crate) fn term_matches(
    term: &PodAffinityTerm,
    own: &str,
    own_labels: &BTreeMap<String, String>,
    namespace: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
    labels: &BTreeMap<String, String>,
) -> bool {
    use crate::core::model::selector;
    let listed = term.namespaces.as_deref().unwrap_or_default();
    let in_namespace = listed.iter().any(|n| n == namespace)
        || (listed.is_empty() && term.namespace_selector.is_none() && namespace == own)
        || term.namespace_selector.as_ref().is_some_and(|s| namespace_labels.is_none_or(|l| selector::matches(s, l)));
    let Some(sel) = term.label_selector.as_ref().filter(|_| in_namespace) else { return false };
    let keys_match =
        term.match_label_keys.iter().flatten().all(|k| own_labels.get(k).is_none_or(|v| labels.get(k) == Some(v)));
    let keys_mismatch =
        term.mismatch_label_keys.iter().flatten().all(|k| own_labels.get(k).is_none_or(|v| labels.get(k) != Some(v)));
    keys_match && keys_mismatch && selector::matches(sel, labels)
}

/// Whether a placed pod matches `term` of `pod`.
fn matches_term(term: &PodAffinityTerm, pod: Incoming, placed: &Placed, nodes: &Nodes) -> bool {
    let namespace_labels = nodes.namespace_labels(&placed.namespace);
    term_matches(term, pod.namespace, pod.labels, &placed.namespace, Some(namespace_labels), &placed.labels)
}

/// The required pod affinity terms of `spec`.
fn affinity_terms(spec: &PodSpec) -> &[PodAffinityTerm] {
    let affinity = spec.affinity.as_ref().and_then(|a| a.pod_affinity.as_ref());
    affinity.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref()).unwrap_or_default()
}

/// Whether `placed` matches every required pod affinity term of `pod` (`podMatchesAllAffinityTerms`;
/// a pod without such terms: no).
pub fn matches_all_affinity(pod: Incoming, placed: &Placed, nodes: &Nodes) -> bool {
    let terms = affinity_terms(pod.spec);
    !terms.is_empty() && terms.iter().all(|t| matches_term(t, pod, placed, nodes))
}

/// Whether the deletion of `gone` wakes a pod of `pod`'s making that InterPodAffinity refused
/// (`isSchedulableAfterAssignedPodChange`, its branch for a deleted pod): only when `gone` matches
/// one of the pod's required anti-affinity terms or the pod one of `gone`'s. A deleted pod that its
/// affinity matched does not, though it may be what closed the first-pod escape.
pub fn deletion_wakes(pod: Incoming, gone: &Placed, nodes: &Nodes) -> bool {
    let anti = pod.spec.affinity.as_ref().and_then(|a| a.pod_anti_affinity.as_ref());
    let anti = anti.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref()).unwrap_or_default();
    let own_namespace = Some(nodes.namespace_labels(pod.namespace));
    anti.iter().any(|t| matches_term(t, pod, gone, nodes))
        || gone
            .anti_affinity
            .iter()
            .any(|t| term_matches(t, &gone.namespace, &gone.labels, pod.namespace, own_namespace, pod.labels))
}

/// The pods on `n` that may match `term` of a pod in `own`: those of the namespaces it reads.
fn term_pods<'n>(term: &'n PodAffinityTerm, own: &str, n: &'n NodeState) -> Box<dyn Iterator<Item = &'n Placed> + 'n> {
    match term.namespaces.as_deref() {
        _ if term.namespace_selector.is_some() => Box::new(n.pods().iter()),
        Some(list) if !list.is_empty() => Box::new(list.iter().flat_map(move |ns| n.in_namespace(ns).iter())),
        _ => Box::new(n.in_namespace(own).iter()),
    }
}

/// The nodes that may hold a pod matching `term` of a pod in `own`: those holding pods of the
/// namespaces the term reads.
fn term_nodes(term: &PodAffinityTerm, own: &str, nodes: &Nodes) -> BTreeSet<usize> {
    match term.namespaces.as_deref() {
        _ if term.namespace_selector.is_some() => (0..nodes.len()).collect(),
        Some(list) if !list.is_empty() => list.iter().flat_map(|ns| nodes.holding(ns)).collect(),
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
    // Each spread's key's domains, numbered once for the nodes: a node counts for a spread only
    // where it carries every hard spread's key.
    let columns: Vec<Arc<Column>> = hard.iter().map(|(_, c)| nodes.column(&c.topology_key)).collect();
    let spreads = hard
        .iter()
        .zip(&columns)
        .map(|((i, c), column)| {
            let mut spread = Spread { index: *i, constraint: c, column: column.clone(), counts: None, own: 0 };
            let Some(sel) = c.label_selector.as_ref() else { return spread };
            spread.own = i32::from(selector::matches(sel, pod.labels));
            // The domains it counts: those of the nodes that carry every key and pass its node
            // affinity and taint policies.
            let counts_node: Vec<bool> = (0..nodes.len())
                .map(|at| {
                    columns.iter().all(|h| h.domain[at] != NO_DOMAIN) && spread_counts(c, &nodes[at].node, pod.spec)
                })
                .collect();
            let mut counted = vec![false; column.values.len()];
            for at in (0..nodes.len()).filter(|at| counts_node[*at]) {
                counted[column.domain[at] as usize] = true;
            }
            // The matching pods of those nodes, from the nodes holding pods of the namespace. An
            // empty selector (`{}`) counts every pod of the namespace:
            // `metav1.LabelSelectorAsSelector` makes it `labels.Everything()`.
            let mut counts = vec![0i32; column.values.len()];
            for at in nodes.holding(pod.namespace).filter(|at| counts_node[*at]) {
                let n = nodes[at]
                    .in_namespace(pod.namespace)
                    .iter()
                    .filter(|p| !p.terminating && selector::matches(sel, &p.labels))
                    .count() as i32;
                counts[column.domain[at] as usize] += n;
            }
            let domains = counted.iter().filter(|c| **c).count();
            let min = if (domains as i32) < c.min_domains.unwrap_or(1) {
                0
            } else {
                counts.iter().zip(&counted).filter(|(_, c)| **c).map(|(n, _)| *n).min().unwrap_or(0)
            };
            spread.counts = Some((counts, min));
            spread
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
    Counted {
        spreads,
        anti,
        affinity: affinity_terms.iter().map(|t| t.topology_key.as_str()).collect(),
        affinity_domains,
        affinity_escape,
        existing_anti,
    }
}

/// Whether `pod` can go on `nodes[at]`, the other nodes as they are (for the affinities and the
/// spreads): `Ok`, or the first filter that refuses, in the scheduler's order.
pub fn fits(pod: Incoming, at: usize, nodes: &Nodes) -> Result<(), Unfit> {
    let none = VolumeNeeds::default();
    fits_counted(pod, at, nodes, &counted(pod, nodes), &pod_requests(pod.spec), &host_ports(pod.spec), &none)
}

fn fits_counted(
    pod: Incoming,
    at: usize,
    nodes: &[NodeState],
    counted: &Counted,
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
    for spread in &counted.spreads {
        let domain = spread.column.domain[at];
        if domain == NO_DOMAIN {
            return Err(Unfit::PodTopologySpread(spread.index));
        }
        let Some((counts, min)) = &spread.counts else { continue };
        if counts[domain as usize] + spread.own - min > spread.constraint.max_skew {
            return Err(Unfit::PodTopologySpread(spread.index));
        }
    }
    Ok(())
}

/// Where the scheduler may put `pod` now: the nodes every filter lets it go to, or, when none
/// does, why each node refuses (the first filter that says no, by node name).
pub fn feasible(pod: Incoming, nodes: &Nodes) -> Result<Vec<usize>, Vec<(String, Unfit)>> {
    feasible_with(pod, nodes, &Replacing::default())
}

/// What a drain's replacement brings besides its template: the pod it replaces as the apiserver
/// stored it, whose requests hold what admission added to the template (LimitRange defaults,
/// RuntimeClass overhead), and what its claims need of a node.
#[derive(Clone, Debug, Default)]
pub struct Replacing {
    /// The stored pod's requests: the replacement asks the larger of these and its template's,
    /// per resource (a ReplicaSet's replacement is made from the template the pod was made from,
    /// with the same admission defaults).
    pub requests: Resources,
    pub volumes: VolumeNeeds,
}

impl Replacing {
    /// What the replacement of a pod made from `spec` asks of a node.
    pub fn requests_of(&self, spec: &PodSpec) -> Resources {
        let mut want = pod_requests(spec);
        want.max(&self.requests);
        want
    }
}

/// [`fits`] for a drain's replacement of a pod: see [`Replacing`].
pub fn fits_with(pod: Incoming, at: usize, nodes: &Nodes, replacing: &Replacing) -> Result<(), Unfit> {
    let (want, ports) = (replacing.requests_of(pod.spec), host_ports(pod.spec));
    fits_counted(pod, at, nodes, &counted(pod, nodes), &want, &ports, &replacing.volumes)
}

impl Unfit {
    /// Whether taking pods off the node might lift the refusal: DefaultPreemption considers only
    /// such nodes (the others' filters answer `UnschedulableAndUnresolvable`: cordon, taints, node
    /// affinity, the volumes' node and zone, the pod's own affinity). Whether it does is for a
    /// placement without them to say.
    pub fn preemption_might_help(&self) -> bool {
        match self {
            Unfit::NodeUnschedulable | Unfit::TaintToleration(_) | Unfit::NodeAffinity => false,
            Unfit::InterPodAffinity(why) => why.contains("anti-affinity"),
            Unfit::NodeResourcesFit(_) | Unfit::NodePorts(_) | Unfit::PodTopologySpread(_) => true,
            Unfit::Volume(v) => v.preemption_might_help(),
        }
    }
}

/// [`feasible`] for a drain's replacement of a pod: see [`Replacing`].
pub fn feasible_with(pod: Incoming, nodes: &Nodes, replacing: &Replacing) -> Result<Vec<usize>, Vec<(String, Unfit)>> {
    let counted = counted(pod, nodes);
    let (want, ports) = (replacing.requests_of(pod.spec), host_ports(pod.spec));
    let volumes = &replacing.volumes;
    let mut ok = Vec::new();
    let mut why = Vec::new();
    for at in 0..nodes.len() {
        match fits_counted(pod, at, nodes, &counted, &want, &ports, volumes) {
            Ok(()) => ok.push(at),
            // Why a node refuses matters only while none takes the pod.
            Err(e) if ok.is_empty() => why.push((nodes[at].node.name.clone(), e)),
            Err(_) => {}
        }
    }
    if ok.is_empty() { Err(why) } else { Ok(ok) }
}

/// Where among `candidates` a new pod goes: the node with the fewest pods of the same labels in
/// the namespace (the scheduler's default spreading), then the fewest pods, then the name. The
/// scheduler scores more than this; the choice matters only where it changes what fits next.
pub fn choose(candidates: &[usize], nodes: &Nodes, namespace: &str, labels: &BTreeMap<String, String>) -> usize {
    // By node: asked of every candidate, so a table rather than a map.
    let mut same = vec![0; nodes.len()];
    for at in nodes.holding(namespace) {
        same[at] = nodes[at].in_namespace(namespace).iter().filter(|p| *p.labels == *labels).count();
    }
    *candidates
        .iter()
        .min_by_key(|at| {
            let s = &nodes[**at];
            (same[**at], s.pods.len(), s.node.name.as_str())
        })
        .expect("candidates are not empty")
}

/// How many of `n` replicas of `pod` the scheduler places on `states`, one after the other, each
/// counted by the next (the rest stay Pending); the replicas placed are added to `states`.
pub fn place_replicas(pod: Incoming, states: &mut Nodes, n: usize) -> usize {
    let one = Placed {
        namespace: pod.namespace.into(),
        name: Arc::from(""),
        priority: 0,
        labels: Arc::new(pod.labels.clone()),
        requests: pod_requests(pod.spec),
        ports: host_ports(pod.spec),
        terminating: false,
        anti_affinity: required_anti_affinity(pod.spec),
        claims: Arc::default(),
        volumes: Arc::default(),
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
            name: Arc::from(app),
            priority: 0,
            namespace: "default".into(),
            labels: Arc::new(labels(app)),
            requests: Resources { cpu_milli, ..Default::default() },
            ports: Vec::new(),
            terminating: false,
            anti_affinity: Arc::default(),
            claims: Arc::default(),
            volumes: Arc::default(),
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

    fn in_namespace(ns: &str, app: &str) -> Placed {
        Placed { namespace: ns.into(), ..placed(app, 0) }
    }

    /// `satisfyExistingPodsAntiAffinity` (interpodaffinity/filtering.go): an existing pod's required
    /// anti-affinity term that matches the incoming pod keeps it out of that pod's domain, though
    /// the incoming pod has no affinity of its own; the term's namespaceSelector is asked of the
    /// incoming pod's namespace labels (`getExistingAntiAffinityCounts`).
    #[test]
    fn an_existing_pods_anti_affinity_keeps_the_pods_it_matches_out_of_its_domain() {
        let (a, b, c) = (node("a", &[("zone", "z1")]), node("b", &[("zone", "z1")]), node("c", &[("zone", "z2")]));
        let guard = |term: &str| {
            let s = spec(&format!(
                "containers: [{{name: db, image: x}}]\naffinity: {{podAntiAffinity: \
                 {{requiredDuringSchedulingIgnoredDuringExecution: [{{topologyKey: zone, {term}}}]}}}}"
            ));
            Placed { anti_affinity: required_anti_affinity(&s), ..in_namespace("data", "db") }
        };
        let plain = spec("containers: [{name: app, image: x}]");
        let web = labels("web");
        let pod = Incoming { namespace: "shop", labels: &web, spec: &plain };
        let world = |term: &str| {
            Nodes::new(vec![state(&a, 1000, vec![guard(term)]), state(&b, 1000, vec![]), state(&c, 1000, vec![])])
                .with_namespace_labels([("shop".to_string(), labels("tenant"))].into())
        };
        // The db pod keeps web pods of any namespace labelled app=tenant out of zone z1.
        let nodes = world("labelSelector: {matchLabels: {app: web}}, namespaceSelector: {matchLabels: {app: tenant}}");
        assert_eq!(feasible(pod, &nodes), Ok(vec![2]));
        assert_eq!(
            fits(pod, 1, &nodes),
            Err(Unfit::InterPodAffinity("an existing pod's required pod anti-affinity on zone".into())),
            "b holds no pod, but is in the db pod's zone"
        );
        // Its term reads only its own namespace by default: a web pod of shop is not kept away.
        let nodes = world("labelSelector: {matchLabels: {app: web}}");
        assert_eq!(feasible(pod, &nodes), Ok(vec![0, 1, 2]));
        // Nor where the namespaceSelector does not select shop.
        let nodes = world("labelSelector: {matchLabels: {app: web}}, namespaceSelector: {matchLabels: {app: other}}");
        assert_eq!(feasible(pod, &nodes), Ok(vec![0, 1, 2]));
        // The pod's own namespace listed: kept away again.
        let nodes = world("labelSelector: {matchLabels: {app: web}}, namespaces: [shop]");
        assert_eq!(feasible(pod, &nodes), Ok(vec![2]));
    }

    /// `updateWithAffinityTerms` and `podMatchesAllAffinityTerms`: an existing pod counts for the
    /// incoming pod's affinity only if it matches all its terms; `nodeTopologyMatchesAffinity`: the
    /// node must carry every term's key, and the first-pod escape applies only when no pod
    /// anywhere matches all the terms (`len(state.clusterWideAffinityCounts) == 0`).
    #[test]
    fn affinity_counts_only_pods_matching_all_terms_and_escapes_only_when_none_exists() {
        let (a, b, c) = (
            node("a", &[("zone", "z1"), ("rack", "r1")]),
            node("b", &[("zone", "z2"), ("rack", "r2")]),
            node("c", &[("zone", "z2")]),
        );
        let s = spec(
            "containers: [{name: app, image: x}]\naffinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [\
             {topologyKey: zone, labelSelector: {matchLabels: {tier: cache}}}, \
             {topologyKey: rack, labelSelector: {matchExpressions: [{key: app, operator: Exists}]}}]}}",
        );
        let cache = |app: &str| {
            let mut l = labels(app);
            l.insert("tier".into(), "cache".into());
            Placed { labels: Arc::new(l), ..placed(app, 0) }
        };
        let tiered = |tier: &str| {
            let mut l = labels("web");
            l.insert("tier".into(), tier.into());
            l
        };
        let own = tiered("web");
        let pod = Incoming { namespace: "default", labels: &own, spec: &s };
        // A pod matching both terms on a: only a's zone and rack qualify.
        let nodes =
            Nodes::new(vec![state(&a, 1000, vec![cache("redis")]), state(&b, 1000, vec![]), state(&c, 1000, vec![])]);
        assert_eq!(feasible(pod, &nodes), Ok(vec![0]));
        // A pod matching only the first term (no app label) counts for neither: no domain holds a
        // match, and the pod does not match its own first term: nowhere.
        let half = Placed { labels: Arc::new([("tier".to_string(), "cache".to_string())].into()), ..placed("x", 0) };
        let nodes =
            Nodes::new(vec![state(&a, 1000, vec![half.clone()]), state(&b, 1000, vec![]), state(&c, 1000, vec![])]);
        assert!(feasible(pod, &nodes).is_err());
        // The first cache pod (it matches both its terms) may go where every key is: a and b, not c.
        let first = tiered("cache");
        let first = Incoming { labels: &first, ..pod };
        assert_eq!(feasible(first, &nodes), Ok(vec![0, 1]));
        assert_eq!(
            fits(first, 2, &nodes),
            Err(Unfit::InterPodAffinity("required pod affinity on rack (the node lacks the key)".into()))
        );
        // Once a pod matching both exists (on b), the escape is gone: only b's domains.
        let nodes = Nodes::new(vec![
            state(&a, 1000, vec![half]),
            state(&b, 1000, vec![cache("memcached")]),
            state(&c, 1000, vec![]),
        ]);
        assert_eq!(feasible(first, &nodes), Ok(vec![1]));
    }

    /// `AffinityTerm.Matches` (k8s.io/kube-scheduler/framework/types.go): listed namespaces or
    /// the namespaceSelector's (`{}`: every namespace), the pod's own only when the term has
    /// neither; `matchLabelKeys` / `mismatchLabelKeys` as the apiserver merges them into the
    /// selector (pkg/registry/core/pod/strategy.go), for the keys the term's pod carries.
    #[test]
    fn a_term_reads_its_namespaces_and_label_keys_as_the_scheduler_does() {
        let term = |yaml: &str| -> PodAffinityTerm { serde_saphyr::from_str(yaml).unwrap() };
        let web = labels("web");
        let prod: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
        let none = BTreeMap::new();
        let m = |t: &PodAffinityTerm, ns: &str, ns_labels: &BTreeMap<String, String>| {
            term_matches(t, "own", &web, ns, Some(ns_labels), &web)
        };
        let default = term("topologyKey: k\nlabelSelector: {matchLabels: {app: web}}");
        assert!(m(&default, "own", &none) && !m(&default, "other", &none));
        let both = term(
            "topologyKey: k\nlabelSelector: {}\nnamespaces: [listed]\nnamespaceSelector: {matchLabels: {env: prod}}",
        );
        assert!(m(&both, "listed", &none), "listed");
        assert!(m(&both, "other", &prod), "selected");
        assert!(!m(&both, "own", &none), "its own namespace only by default");
        let all = term("topologyKey: k\nlabelSelector: {}\nnamespaceSelector: {}");
        assert!(m(&all, "anywhere", &none));
        let no_selector = term("topologyKey: k\nnamespaceSelector: {}");
        assert!(!m(&no_selector, "own", &none), "no labelSelector selects nothing");
        // Label keys: the owner is web at revision 1.
        let owner: BTreeMap<String, String> =
            [("app", "web"), ("rev", "1")].map(|(k, v)| (k.to_string(), v.to_string())).into();
        let at = |rev: &str| -> BTreeMap<String, String> {
            [("app", "web"), ("rev", rev)].map(|(k, v)| (k.to_string(), v.to_string())).into()
        };
        let same = term("topologyKey: k\nlabelSelector: {matchLabels: {app: web}}\nmatchLabelKeys: [rev, absent]");
        assert!(term_matches(&same, "own", &owner, "own", None, &at("1")));
        assert!(!term_matches(&same, "own", &owner, "own", None, &at("2")));
        let other = term("topologyKey: k\nlabelSelector: {matchLabels: {app: web}}\nmismatchLabelKeys: [rev]");
        assert!(!term_matches(&other, "own", &owner, "own", None, &at("1")));
        assert!(term_matches(&other, "own", &owner, "own", None, &at("2")));
        assert!(term_matches(&other, "own", &owner, "own", None, &web), "NotIn holds where the key is absent");
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

#[cfg(test)]
#[path = "tests/placement_reference.rs"]
mod reference;

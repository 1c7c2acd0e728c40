//! A drain replayed as `kubectl drain --ignore-daemonsets --delete-emptydir-data` runs it, and as
//! the control plane answers it (DESIGN.md §3, "Drains"): the nodes are cordoned; a pod without a
//! controller refuses the whole drain before anything is evicted (it needs `--force`); DaemonSet
//! and mirror pods are left; every other pod is evicted concurrently, a refused (429) eviction
//! retried, a pod under two PDBs answered 500 (kubectl gives up on it). Each evicted pod of a
//! workload gets a replacement from its controller, placed as kube-scheduler would
//! ([`placement::feasible`]) on the nodes not drained and Ready once placed; the budgets count it
//! as the disruption controller does. The replay stops when a round changes nothing: what is then
//! refused hangs the drain.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::budget::{Source, budget_now, refuses, selected_pods};
use super::lookup::View;
use super::placement::{Incoming, NodeState, Nodes, Placed, Replacing, Unfit, choose, feasible_with, fits_with};
use super::projection::{NodeInfo, PdbInfo, PodInfo, PodOwner, PodPhase};
use super::storage::VolumeNeeds;
use crate::core::model::ObjectRef;
use crate::core::model::arith;
use crate::core::model::pod::CORDON_TAINT;
use crate::core::model::words::{NAMED, list, names};
use k8s_openapi::api::core::v1::PodSpec;

/// How a drain ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Every pod evicted, every replacement placed.
    Completes,
    /// Every pod evicted; some replacements cannot be placed on the nodes that remain.
    LeavesPending,
    /// An eviction stays refused: the drain waits until its timeout (or forever).
    Hangs,
    /// kubectl drain refuses (a pod without a controller) or gives up on a pod (two PDBs: 500).
    Refused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completes => "completes",
            Outcome::LeavesPending => "leaves-pending",
            Outcome::Hangs => "hangs",
            Outcome::Refused => "refused",
        }
    }
}

/// What happened to one pod of the drained nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub namespace: String,
    pub pod: String,
    pub result: EvictionResult,
    /// The node its replacement went to, if it got one placed.
    pub replacement: Option<String>,
    /// Why it was refused or left, or why its replacement stays Pending.
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionResult {
    Evicted,
    Refused,
    /// Not evicted: a DaemonSet's or a mirror pod (kubectl drain leaves them), or the drain was
    /// refused before it evicted anything.
    Left,
}

impl EvictionResult {
    pub fn as_str(self) -> &'static str {
        match self {
            EvictionResult::Evicted => "evicted",
            EvictionResult::Refused => "refused",
            EvictionResult::Left => "left",
        }
    }
}

/// A replacement that stays Pending: the workload runs short until the nodes are uncordoned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub namespace: String,
    /// The evicted pod it replaces.
    pub pod: String,
    pub workload: ObjectRef,
    /// Why no node takes it: each node's first refusing filter, grouped.
    pub reason: String,
}

/// A pod that a replacement preempted (DefaultPreemption): taken off its node so that the
/// replacement of a pod of higher priority fits there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preempted {
    pub namespace: String,
    pub pod: String,
    pub priority: i32,
    pub node: String,
    /// The evicted pod whose replacement took its place: namespace/name.
    pub by: String,
    /// The node its own replacement went to; `None`: Pending, or not replaced.
    pub replacement: Option<String>,
}

/// A PDB that refused evictions until the end, and what it let go before.
#[derive(Clone, Debug, PartialEq)]
pub struct Blocked {
    pub pdb: Arc<PdbInfo>,
    pub healthy_before: i32,
    /// The pods it expects (the status's `expectedPods`, or as the controller counts them).
    pub expected: i32,
    pub desired: i32,
    pub evicted: Vec<Arc<str>>,
    pub refused: Vec<(Arc<str>, String)>,
    pub workloads: BTreeSet<ObjectRef>,
    pub stale: Option<(i64, i64)>,
}

/// A pod kubectl drain refuses: its namespace and name, its workload, the PDBs selecting it.
pub type RefusedPod = (String, Arc<str>, Option<ObjectRef>, Vec<ObjectRef>);

/// A drain replayed.
#[derive(Clone, Debug, PartialEq)]
pub struct DrainRun {
    pub nodes: Vec<String>,
    pub outcome: Outcome,
    pub evictions: Vec<Eviction>,
    pub pending: Vec<Pending>,
    /// The PDBs that refused until the end.
    pub blocked: Vec<Blocked>,
    /// Pods kubectl drain refuses: without a controller (before evicting anything), or under
    /// several PDBs (500), with the PDBs.
    pub refused: Vec<RefusedPod>,
    /// Whether replacements were placed (the view held the workloads' pod templates).
    pub replaces: bool,
    /// The namespaces whose pods it evicts or tries to (every pod not left), in name order: who
    /// else a drain asked about one namespace disrupts.
    pub namespaces: Vec<String>,
    /// The pods replacements preempted, in the order they were.
    pub preempts: Vec<Preempted>,
    /// The workloads declaring one replica whose pod the drain takes (filled by the drain rules,
    /// `rules::drain::single_replica_lost`): said in the drain's summary, not warned one by one.
    pub single_replica: Vec<ObjectRef>,
}

impl DrainRun {
    /// A run of `nodes` that ends `outcome`, with nothing evicted, refused or left yet.
    pub fn of(nodes: Vec<String>, outcome: Outcome) -> DrainRun {
        DrainRun {
            nodes,
            outcome,
            evictions: Vec::new(),
            pending: Vec::new(),
            blocked: Vec::new(),
            refused: Vec::new(),
            replaces: true,
            namespaces: Vec::new(),
            preempts: Vec::new(),
            single_replica: Vec::new(),
        }
    }

    /// The run as `--namespace NAMESPACE` reports it: the evictions and Pending replacements of
    /// that namespace, and the refused evictions of any (they decide how the drain ends); its
    /// outcome and `namespaces` stay the whole cluster's.
    pub fn narrowed_to(mut self, namespace: &str) -> DrainRun {
        self.evictions.retain(|e| e.namespace == namespace || e.result == EvictionResult::Refused);
        self.pending.retain(|p| p.namespace == namespace);
        self.single_replica.retain(|w| w.namespace == namespace);
        self
    }
}

/// A PDB's state during the replay.
struct Ledger {
    pdb: Arc<PdbInfo>,
    healthy_before: i32,
    expected: i32,
    current: i32,
    desired: i32,
    allowed: i32,
    stale: Option<(i64, i64)>,
    expects_none: Option<&'static str>,
    evicted: Vec<Arc<str>>,
    workloads: BTreeSet<ObjectRef>,
}

impl Ledger {
    /// The budget as the eviction API reads it ([`budget_now`]).
    fn open(view: &dyn View, pdb: Arc<PdbInfo>) -> Ledger {
        let (status, source, expects_none) = match budget_now(view, &pdb) {
            Some(n) => (n.status, n.source, n.expects_none),
            None => {
                // A value that is no amount (refused by the apiserver anyway) protects everything.
                let healthy = selected_pods(view, &pdb).iter().filter(|p| p.ready && !p.terminating).count() as i32;
                (
                    arith::Status { expected: healthy, desired_healthy: healthy, current_healthy: healthy, allowed: 0 },
                    Source::Computed,
                    None,
                )
            }
        };
        let stale = match source {
            Source::Stale { observed, generation } => Some((observed, generation)),
            _ => None,
        };
        Ledger {
            pdb,
            healthy_before: status.current_healthy,
            expected: status.expected,
            current: status.current_healthy,
            desired: status.desired_healthy,
            allowed: status.allowed,
            stale,
            expects_none,
            evicted: Vec::new(),
            workloads: BTreeSet::new(),
        }
    }

    fn status(&self) -> arith::Status {
        arith::Status {
            expected: self.expected,
            desired_healthy: self.desired,
            current_healthy: self.current,
            allowed: self.allowed,
        }
    }

    /// One eviction of `pod` (which only this PDB selects), as the eviction API decides it: `Ok`
    /// when it goes, else why it is refused (429).
    fn evict(&mut self, pod: &PodInfo) -> Result<(), String> {
        if refuses(&self.status(), self.pdb.always_allow_unhealthy, pod) {
            let mut why = if pod.healthy() {
                format!("{} healthy, {} needed: 0 disruptions allowed", self.current, self.desired)
            } else {
                format!(
                    "it is not Ready and the budget is not met ({} healthy, {} needed); unhealthyPodEvictionPolicy \
                     IfHealthyBudget (the default) keeps it",
                    self.current, self.desired
                )
            };
            if let Some(reason) = self.expects_none {
                why.push_str(&format!("; it expects no pods: {reason}"));
            }
            if let Some((kind, name)) = pod.workload() {
                self.workloads.insert(ObjectRef::new(kind, &self.pdb.id.namespace, name));
            }
            return Err(why);
        }
        // Not Ready and let go without asking the budget: it counts toward nothing.
        let unhealthy_exit =
            !pod.healthy() && (self.pdb.always_allow_unhealthy || (self.current >= self.desired && self.desired > 0));
        if !unhealthy_exit {
            self.allowed -= 1;
            if pod.healthy() {
                self.current -= 1;
            }
        }
        self.evicted.push(pod.name.clone());
        Ok(())
    }

    /// A pod it selects was preempted (deleted without asking the budget).
    fn lost(&mut self) {
        self.current -= 1;
        self.allowed = (self.current - self.desired).max(0);
    }

    /// A replacement became Ready: the disruption controller counts it healthy again.
    fn replaced(&mut self) {
        self.current += 1;
        self.allowed = if self.expected <= 0 { 0 } else { (self.current - self.desired).max(0) };
    }
}

/// What the eviction API answers one eviction of a pod (`pkg/registry/core/pod/storage/eviction.go`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvictionAnswer {
    /// 201: deleted without asking a budget (Pending, finished or terminating; no PDB selects it).
    Deleted,
    /// 201: its one PDB lets it go.
    Evicted,
    /// 429 Too Many Requests: its PDB refuses it, and why.
    Refused(String),
    /// 500: more than one PDB selects it, which the eviction subresource does not support.
    SeveralBudgets(Vec<ObjectRef>),
}

impl EvictionAnswer {
    /// The HTTP status the eviction API returns.
    pub fn code(&self) -> u16 {
        match self {
            EvictionAnswer::Deleted | EvictionAnswer::Evicted => 201,
            EvictionAnswer::Refused(_) => 429,
            EvictionAnswer::SeveralBudgets(_) => 500,
        }
    }
}

/// What the eviction API would answer an eviction of `pod` (in `namespace`) now, the first of a
/// drain: the same decision the replay makes for each pod ([`replay`]).
pub fn eviction_answer(view: &dyn View, namespace: &str, pod: &PodInfo) -> EvictionAnswer {
    if pod.phase.terminal() || pod.phase == PodPhase::Pending || pod.terminating {
        return EvictionAnswer::Deleted;
    }
    match view.pdbs_covering(namespace, &pod.labels).as_slice() {
        [] => EvictionAnswer::Deleted,
        [one] => {
            let mut ledger = Ledger::open(view, one.clone());
            match ledger.evict(pod) {
                Ok(()) => EvictionAnswer::Evicted,
                Err(why) => EvictionAnswer::Refused(why),
            }
        }
        many => EvictionAnswer::SeveralBudgets(many.iter().map(|p| p.id.clone()).collect()),
    }
}

/// The nodes and the pods on them, as a drain starts: the view's, or what earlier drains of
/// `--drain-each` left. Kept from one drain to the next rather than built again for each: a
/// rolling upgrade of a large cluster replays a drain a node.
#[derive(Clone, Debug)]
pub struct World {
    /// The scheduler's view of the nodes, for placing pods.
    states: Nodes,
    /// The pods on each node, by name: what a drain of it evicts.
    pods: Vec<Vec<(String, Arc<PodInfo>)>>,
}

impl World {
    /// The view's nodes and the pods on them (finished pods left out).
    pub fn of(view: &dyn View) -> World {
        let nodes = view.nodes();
        let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
        let at: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        let storage = view.storage();
        let mut states: Vec<NodeState> = nodes
            .iter()
            .map(|n| {
                let mut state = NodeState::new(n.clone());
                if let Some(limits) = storage.as_ref().and_then(|s| s.limits.get(&n.name)) {
                    state.volume_limits = limits.clone();
                }
                state
            })
            .collect();
        let mut pods: Vec<Vec<(String, Arc<PodInfo>)>> = vec![Vec::new(); nodes.len()];
        let mut namespaces: HashMap<String, Arc<str>> = HashMap::new();
        for (namespace, pod) in view.pods_on_nodes(&names) {
            if pod.phase.terminal() {
                continue;
            }
            if let Some(&i) = pod.node.as_deref().and_then(|n| at.get(n)) {
                let shared = namespaces.entry(namespace.clone()).or_insert_with(|| namespace.as_str().into()).clone();
                states[i].push(placed(view, shared, &pod));
                pods[i].push((namespace, pod));
            }
        }
        // The namespaces holding pods: what the affinity terms' namespaceSelectors are asked of.
        let labels = namespaces.into_keys().map(|ns| {
            let labels = view.namespace_labels(&ns).unwrap_or_default();
            (ns, labels)
        });
        World { states: Nodes::new(states).with_namespace_labels(labels.collect()), pods }
    }

    /// Cordons `drained`, with the taint the node lifecycle controller adds; gives back the nodes
    /// as they were, for [`World::uncordon`].
    fn cordon(&mut self, drained: &[String]) -> Vec<(usize, Arc<NodeInfo>)> {
        let mut was = Vec::new();
        for node in drained {
            let Some(at) = self.at(node) else { continue };
            let mut cordoned = (*self.states[at].node).clone();
            cordoned.unschedulable = true;
            if !cordoned.taints.iter().any(|t| t.key == CORDON_TAINT) {
                cordoned.taints.push(k8s_openapi::api::core::v1::Taint {
                    key: CORDON_TAINT.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                });
            }
            was.push((at, self.states.set_node(at, Arc::new(cordoned))));
        }
        was
    }

    fn uncordon(&mut self, was: Vec<(usize, Arc<NodeInfo>)>) {
        for (at, node) in was {
            self.states.set_node(at, node);
        }
    }

    fn at(&self, node: &str) -> Option<usize> {
        self.states.iter().position(|s| s.node.name == node)
    }
}

/// `pod` as the filters count it on its node: the CSI volumes its claims attach read from the
/// view's storage.
fn placed(view: &dyn View, namespace: Arc<str>, pod: &PodInfo) -> Placed {
    let volumes = match (view.storage(), pod.claims.is_empty() && pod.ephemeral_claims.is_empty()) {
        (Some(storage), false) => {
            let claims = pod.claims.iter().chain(pod.ephemeral_claims.iter());
            storage.attached(&namespace, claims, |c| view.pvc(&namespace, c)).collect()
        }
        _ => Arc::default(),
    };
    Placed {
        name: pod.name.clone(),
        priority: pod.priority,
        labels: pod.labels.clone(),
        requests: pod.requests.clone(),
        ports: pod.ports.clone(),
        terminating: pod.terminating,
        anti_affinity: pod.anti_affinity.clone(),
        claims: pod.claims.clone(),
        volumes,
        namespace,
    }
}

/// What the replacement of `pod` brings besides its template: `pod`'s requests as stored, and what
/// the claims it mounts again need of a node.
fn replacing(view: &dyn View, namespace: &str, pod: &PodInfo, template: &PodSpec, states: &Nodes) -> Replacing {
    Replacing { requests: pod.requests.clone(), volumes: volume_needs(view, namespace, pod, template, states) }
}

/// What the replacement of `pod` needs of a node for the claims it mounts again (none without
/// the view's storage): `states` holds the other pods, for a ReadWriteOncePod claim's other users.
/// The claims of its template's generic ephemeral volumes are made anew for the replacement.
fn volume_needs(view: &dyn View, namespace: &str, pod: &PodInfo, template: &PodSpec, states: &Nodes) -> VolumeNeeds {
    let ephemeral: Vec<(&str, Option<&str>)> = template
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            let claim = v.ephemeral.as_ref()?.volume_claim_template.as_ref()?;
            Some((v.name.as_str(), claim.spec.storage_class_name.as_deref()))
        })
        .collect();
    let Some(storage) = view.storage().filter(|_| !pod.claims.is_empty() || !ephemeral.is_empty()) else {
        return VolumeNeeds::default();
    };
    let used_by_another = |claim: &str| {
        states
            .holding(namespace)
            .any(|at| states[at].in_namespace(namespace).iter().any(|p| p.claims.iter().any(|c| &**c == claim)))
    };
    let mut needs = storage.needs(namespace, &pod.claims, |c| view.pvc(namespace, c), used_by_another);
    for (volume, class) in ephemeral {
        storage.new_claim(&mut needs, namespace, &format!("{}-{volume}", pod.name), class);
    }
    needs
}

/// How many new pods of `incoming` kube-scheduler places on the view's cluster as it stands (every
/// namespace's pods on its nodes, its storage), one a `claims` item, each mounting the claims listed
/// for it (a StatefulSet's pod its own by ordinal; its template's generic ephemeral volumes are made
/// for it): each placed pod counted by the next, and the pods left Pending tried again while one
/// more gets placed, as the scheduler retries an unschedulable pod when the cluster changes. The
/// spread cases against kube-scheduler ask it.
pub fn place_new(view: &dyn View, incoming: Incoming, claims: &[Arc<[Arc<str>]>]) -> usize {
    let mut world = World::of(view);
    let states = &mut world.states;
    let namespace = incoming.namespace;
    let mut waiting: Vec<PodInfo> = claims
        .iter()
        .enumerate()
        .map(|(i, claims)| PodInfo {
            name: format!("new-{i}").into(),
            owner: PodOwner::Unmanaged,
            node: None,
            labels: Arc::new(incoming.labels.clone()),
            unschedulable: None,
            phase: PodPhase::Pending,
            ready: false,
            terminating: false,
            tolerates_cordon: false,
            requests: Default::default(),
            ports: Vec::new(),
            anti_affinity: Default::default(),
            claims: claims.clone(),
            ephemeral_claims: Default::default(),
            priority: incoming.spec.priority.unwrap_or(0),
            preempts: false,
        })
        .collect();
    let mut placed = 0;
    loop {
        let before = placed;
        waiting.retain(|pod| {
            let replacing = replacing(view, namespace, pod, incoming.spec, states);
            let Ok(candidates) = feasible_with(incoming, states, &replacing) else { return true };
            let at = choose(&candidates, states, namespace, incoming.labels);
            states.push(at, new_placed(pod, incoming, &replacing));
            placed += 1;
            false
        });
        if placed == before || waiting.is_empty() {
            return placed;
        }
    }
}

/// Replays a drain of `drained` on the view.
pub fn replay(view: &dyn View, drained: &[String]) -> DrainRun {
    replay_in(view, &mut World::of(view), drained)
}

/// `--drain-each`: each node drained alone, in the order given, as a rolling node upgrade does:
/// each drain starts from what the one before left (its pods' replacements where they went, the
/// node uncordoned and the replacements that were Pending placed again).
pub fn replay_each(view: &dyn View, nodes: &[String]) -> Vec<DrainRun> {
    let mut world = World::of(view);
    let mut runs = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        // The drain leaves the evicted pods gone and their replacements placed in `world.states`;
        // the pods by name follow here.
        let run = replay_in(view, &mut world, std::slice::from_ref(node));
        let Some(at) = world.at(node) else { continue };
        let mut pending = Vec::new();
        for e in run.evictions.iter().filter(|e| e.result == EvictionResult::Evicted) {
            let Some(k) = world.pods[at].iter().position(|(ns, p)| *ns == e.namespace && *p.name == *e.pod) else {
                continue;
            };
            let (namespace, pod) = world.pods[at].remove(k);
            let Some(template) =
                pod.workload().and_then(|(kind, name)| view.template(&ObjectRef::new(kind, &namespace, name)))
            else {
                continue;
            };
            // A replacement preempted later in the same drain: where its own went, if anywhere.
            let mut went = e.replacement.clone();
            for p in run.preempts.iter().filter(|p| p.namespace == namespace && p.pod == e.pod) {
                if went.as_deref() == Some(p.node.as_str()) {
                    went = p.replacement.clone();
                }
            }
            match went.as_deref().and_then(|n| world.at(n)) {
                Some(to) => {
                    let replacement = replacement_of(&pod, &template, i, &world.states[to].node.name);
                    world.pods[to].push((namespace, Arc::new(replacement)));
                }
                None => pending.push((namespace, pod, template)),
            }
        }
        // Pods that were on their nodes before this drain and were preempted there by a
        // replacement: gone, and replaced by their controllers where the drain placed theirs, or
        // Pending. (A replacement preempted in the same drain is not listed yet: followed above.)
        for p in &run.preempts {
            let Some(on) = world.at(&p.node) else { continue };
            let Some(k) = world.pods[on].iter().position(|(ns, q)| *ns == p.namespace && *q.name == *p.pod) else {
                continue;
            };
            let (namespace, pod) = world.pods[on].remove(k);
            let Some(template) =
                pod.workload().and_then(|(kind, name)| view.template(&ObjectRef::new(kind, &namespace, name)))
            else {
                continue;
            };
            match p.replacement.as_deref().and_then(|n| world.at(n)) {
                Some(to) => {
                    let replacement = replacement_of(&pod, &template, i, &world.states[to].node.name);
                    world.pods[to].push((namespace, Arc::new(replacement)));
                }
                None => pending.push((namespace, pod, template)),
            }
        }
        // Uncordoned: what was Pending is placed again, now that the node takes pods.
        for (namespace, pod, template) in pending {
            let incoming = Incoming { namespace: &namespace, labels: &template.labels, spec: &template.spec };
            let replacing = replacing(view, &namespace, &pod, &template.spec, &world.states);
            let Ok(candidates) = feasible_with(incoming, &world.states, &replacing) else { continue };
            let to = choose(&candidates, &world.states, &namespace, &template.labels);
            let replacement = replacement_of(&pod, &template, i, &world.states[to].node.name);
            world.states.push(to, placed(view, namespace.as_str().into(), &replacement));
            world.pods[to].push((namespace, Arc::new(replacement)));
        }
        runs.push(run);
    }
    runs
}

/// The replacement a controller makes for `pod`: its template's labels, requests and ports, Ready.
fn replacement_of(pod: &PodInfo, template: &super::projection::Template, drain: usize, node: &str) -> PodInfo {
    PodInfo {
        name: format!("{}-replacement-{drain}", pod.name).into(),
        owner: pod.owner.clone(),
        node: Some(node.into()),
        labels: Arc::new(template.labels.clone()),
        unschedulable: None,
        phase: PodPhase::Running,
        ready: true,
        terminating: false,
        tolerates_cordon: pod.tolerates_cordon,
        requests: Replacing { requests: pod.requests.clone(), ..Default::default() }.requests_of(&template.spec),
        ports: crate::core::model::resources::host_ports(&template.spec),
        anti_affinity: super::placement::required_anti_affinity(&template.spec),
        claims: pod.claims.clone(),
        ephemeral_claims: Default::default(),
        priority: pod.priority,
        preempts: pod.preempts,
    }
}

/// A drain of `drained` from `world` (as it is before the cordon), which it leaves as the drain
/// does: the evicted pods off their nodes, their replacements placed (the nodes uncordoned again).
fn replay_in(view: &dyn View, world: &mut World, drained: &[String]) -> DrainRun {
    let was = world.cordon(drained);
    let run = drain(view, &mut world.states, &world.pods, drained);
    world.uncordon(was);
    run
}

fn drain(view: &dyn View, states: &mut Nodes, on_node: &[Vec<(String, Arc<PodInfo>)>], drained: &[String]) -> DrainRun {
    let mut run = DrainRun::of(drained.to_vec(), Outcome::Completes);
    // The pods of the drained nodes, in the order asked, then namespace and name.
    let mut to_evict: Vec<(String, Arc<PodInfo>)> = Vec::new();
    for node in drained {
        let Some(at) = states.iter().position(|s| s.node.name == *node) else { continue };
        for (namespace, pod) in &on_node[at] {
            if matches!(pod.owner, PodOwner::DaemonSet | PodOwner::Mirror) {
                run.evictions.push(Eviction {
                    namespace: namespace.clone(),
                    pod: pod.name.to_string(),
                    result: EvictionResult::Left,
                    replacement: None,
                    reason: if pod.owner == PodOwner::DaemonSet {
                        "a DaemonSet's pod: --ignore-daemonsets leaves it".into()
                    } else {
                        "a static pod's mirror: kubectl drain skips it".into()
                    },
                });
            } else {
                to_evict.push((namespace.clone(), pod.clone()));
            }
        }
    }
    // Pre-flight: a pod without a controller refuses the drain before anything is evicted.
    let unmanaged: Vec<&(String, Arc<PodInfo>)> =
        to_evict.iter().filter(|(_, p)| p.owner == PodOwner::Unmanaged && !p.phase.terminal()).collect();
    if !unmanaged.is_empty() {
        for (namespace, pod) in &unmanaged {
            run.refused.push((namespace.clone(), pod.name.clone(), None, Vec::new()));
        }
        for (namespace, pod) in &to_evict {
            let reason = if pod.owner == PodOwner::Unmanaged {
                "it has no controller: kubectl drain refuses it without --force (and --force deletes it for good)"
            } else {
                "kubectl drain refused before evicting anything (pods without a controller)"
            };
            run.evictions.push(Eviction {
                namespace: namespace.clone(),
                pod: pod.name.to_string(),
                result: if pod.owner == PodOwner::Unmanaged { EvictionResult::Refused } else { EvictionResult::Left },
                replacement: None,
                reason: reason.into(),
            });
        }
        run.outcome = Outcome::Refused;
        run.namespaces = disrupted(&run.evictions);
        return run;
    }
    let mut ledgers: BTreeMap<ObjectRef, Ledger> = BTreeMap::new();
    let mut results: BTreeMap<(String, Arc<str>), Eviction> = BTreeMap::new();
    let mut remaining: Vec<(String, Arc<PodInfo>)> = to_evict;
    loop {
        let mut progress = false;
        let mut still = Vec::new();
        for (namespace, pod) in remaining {
            let key = (namespace.clone(), pod.name.clone());
            let covering = view.pdbs_covering(&namespace, &pod.labels);
            let asks = !(pod.phase == PodPhase::Pending || pod.terminating);
            let answer: Result<(), (String, bool)> = match (asks, covering.as_slice()) {
                (false, _) | (true, []) => Ok(()),
                (true, [one]) => ledgers
                    .entry(one.id.clone())
                    .or_insert_with(|| Ledger::open(view, one.clone()))
                    .evict(&pod)
                    .map_err(|why| (why, false)),
                (true, many) => {
                    run.refused.push((
                        namespace.clone(),
                        pod.name.clone(),
                        pod.workload().map(|(k, n)| ObjectRef::new(k, &namespace, n)),
                        many.iter().map(|p| p.id.clone()).collect(),
                    ));
                    Err((
                        format!(
                            "{} PodDisruptionBudgets ({}) select it: the eviction API answers 500 and kubectl drain \
                             gives up on it",
                            many.len(),
                            names(many.iter().map(|p| &p.id.name))
                        ),
                        true,
                    ))
                }
            };
            match answer {
                Ok(()) => {
                    progress = true;
                    let replacement = evicted(view, &namespace, &pod, states, &mut ledgers, on_node, &mut run);
                    results.insert(
                        key,
                        Eviction {
                            namespace,
                            pod: pod.name.to_string(),
                            result: EvictionResult::Evicted,
                            replacement: replacement.0,
                            reason: replacement.1,
                        },
                    );
                }
                Err((why, final_)) if final_ => {
                    results.insert(
                        key,
                        Eviction {
                            namespace,
                            pod: pod.name.to_string(),
                            result: EvictionResult::Refused,
                            replacement: None,
                            reason: why,
                        },
                    );
                }
                Err((why, _)) => {
                    results.insert(
                        key.clone(),
                        Eviction {
                            namespace: namespace.clone(),
                            pod: pod.name.to_string(),
                            result: EvictionResult::Refused,
                            replacement: None,
                            reason: why,
                        },
                    );
                    still.push((namespace, pod));
                }
            }
        }
        remaining = still;
        if remaining.is_empty() || !progress {
            break;
        }
    }
    // What stays refused: each pod under one PDB, with that PDB's last word.
    let mut refused_by: BTreeMap<ObjectRef, Vec<(Arc<str>, String)>> = BTreeMap::new();
    for (namespace, pod) in &remaining {
        if let [one] = view.pdbs_covering(namespace, &pod.labels).as_slice() {
            let why = results.get(&(namespace.clone(), pod.name.clone())).map(|e| e.reason.clone()).unwrap_or_default();
            refused_by.entry(one.id.clone()).or_default().push((pod.name.clone(), why));
        }
    }
    run.evictions.extend(results.into_values());
    for (id, ledger) in ledgers {
        let Some(refused) = refused_by.remove(&id) else { continue };
        run.blocked.push(Blocked {
            pdb: ledger.pdb,
            healthy_before: ledger.healthy_before,
            expected: ledger.expected,
            desired: ledger.desired,
            evicted: ledger.evicted,
            refused,
            workloads: ledger.workloads,
            stale: ledger.stale,
        });
    }
    run.namespaces = disrupted(&run.evictions);
    run.outcome = if !run.refused.is_empty() {
        Outcome::Refused
    } else if !remaining.is_empty() {
        Outcome::Hangs
    } else if !run.pending.is_empty() {
        Outcome::LeavesPending
    } else {
        Outcome::Completes
    };
    run
}

/// The namespaces of the pods a drain evicts or tries to.
fn disrupted(evictions: &[Eviction]) -> Vec<String> {
    let names: BTreeSet<&str> =
        evictions.iter().filter(|e| e.result != EvictionResult::Left).map(|e| e.namespace.as_str()).collect();
    names.into_iter().map(str::to_string).collect()
}

/// `pod` was evicted: it leaves its node, and its controller makes a replacement, placed as the
/// scheduler would, Ready once placed. The node the replacement went to, or why it stays Pending.
fn evicted(
    view: &dyn View,
    namespace: &str,
    pod: &PodInfo,
    states: &mut Nodes,
    ledgers: &mut BTreeMap<ObjectRef, Ledger>,
    on_node: &[Vec<(String, Arc<PodInfo>)>],
    run: &mut DrainRun,
) -> (Option<String>, String) {
    let at = pod.node.as_deref().and_then(|n| states.iter().position(|s| s.node.name == n));
    let gone = at.and_then(|at| Some((at, states.remove(at, namespace, |p| p.labels == pod.labels)?)));
    let Some((kind, name)) = pod.workload() else {
        let why = match pod.owner {
            // A Job, a bare ReplicaSet, an operator's own kind: the simulation does not know when it
            // makes another pod, or where.
            PodOwner::Other => {
                "its controller is neither a Deployment nor a StatefulSet: replaced only if that \
                                controller recreates it, which the simulation does not place"
            }
            _ => "no controller replaces it",
        };
        return (None, why.into());
    };
    let workload = ObjectRef::new(kind, namespace, name);
    let Some(template) = view.template(&workload) else {
        run.replaces = false;
        return (None, format!("{workload} replaces it (its pod template is not in the view)"));
    };
    let incoming = Incoming { namespace, labels: &template.labels, spec: &template.spec };
    let replacing = replacing(view, namespace, pod, &template.spec, states);
    // The replacement is made as its pod is evicted, and first tried while that pod is still on its
    // node, terminating, which kube-scheduler counts: InterPodAffinity finds it matching the
    // replacement's affinity (the same labels), so the replacement goes to its domains if it can.
    // If it cannot, the pod's deletion does not try it again (`deletion_wakes`): where only the
    // first-pod escape would let it go, it stays Pending until the scheduler retries it anyway.
    let first =
        gone.filter(|(_, old)| super::placement::matches_all_affinity(incoming, old, states)).map(|(at, old)| {
            states.push(at, Placed { terminating: true, ..old.clone() });
            let first = feasible_with(incoming, states, &replacing);
            states.remove(at, namespace, |p| p.terminating && p.name == old.name);
            (first, super::placement::deletion_wakes(incoming, &old, states))
        });
    let now = feasible_with(incoming, states, &replacing);
    let stalled = matches!(&first, Some((Err(_), false))) && now.is_ok();
    match first.and_then(|(first, _)| first.ok()).map_or(now, Ok) {
        Ok(_) if stalled => {
            let reason = format!(
                "its first try found {} still on its node (kube-scheduler counts a terminating pod), matching its \
                 required pod affinity, and no node in that pod's domain took it; that pod's deletion does not \
                 try it again (InterPodAffinity's queueing hint skips a deleted pod its affinity matched), so it \
                 stays Pending until the scheduler retries unschedulable pods (after 5 minutes, \
                 podMaxInUnschedulablePodsDuration) or a node changes",
                pod.name
            );
            stays_pending(run, namespace, &pod.name, workload, reason)
        }
        Ok(candidates) => {
            let at = choose(&candidates, states, namespace, &template.labels);
            put_replacement(view, states, at, pod, incoming, &replacing, ledgers);
            let node = states[at].node.name.clone();
            (Some(node.clone()), format!("replaced on {node}"))
        }
        Err(why) => {
            if let Some(done) = preempt(view, namespace, pod, incoming, &replacing, states, ledgers, on_node, &why, run)
            {
                return done;
            }
            stays_pending(run, namespace, &pod.name, workload, explain(&why))
        }
    }
}

/// The replacement of `pod` (made from `incoming`, see [`Replacing`]) placed on `states[at]` and
/// Ready: its budgets count it healthy again.
fn put_replacement(
    view: &dyn View,
    states: &mut Nodes,
    at: usize,
    pod: &PodInfo,
    incoming: Incoming,
    replacing: &Replacing,
    ledgers: &mut BTreeMap<ObjectRef, Ledger>,
) {
    states.push(at, new_placed(pod, incoming, replacing));
    for pdb in view.pdbs_covering(incoming.namespace, incoming.labels) {
        if let Some(l) = ledgers.get_mut(&pdb.id) {
            l.replaced();
        }
    }
}

/// A new pod made from `incoming` in place of `pod` (its name, priority and claims), as the
/// filters count it once placed.
fn new_placed(pod: &PodInfo, incoming: Incoming, replacing: &Replacing) -> Placed {
    Placed {
        namespace: incoming.namespace.into(),
        name: pod.name.clone(),
        priority: pod.priority,
        labels: Arc::new(incoming.labels.clone()),
        requests: replacing.requests_of(incoming.spec),
        ports: crate::core::model::resources::host_ports(incoming.spec),
        terminating: false,
        anti_affinity: super::placement::required_anti_affinity(incoming.spec),
        claims: pod.claims.clone(),
        volumes: replacing.volumes.attaches.clone().into(),
    }
}

/// Nodes DefaultPreemption tries at most (it samples a share of the cluster, at least 100).
const PREEMPTION_CANDIDATES: usize = 100;

/// A node where preemption lets a pod fit: which, the pods that go, how many of them a budget
/// protects.
struct Candidate {
    at: usize,
    victims: Vec<Placed>,
    violations: usize,
}

/// DefaultPreemption (`pkg/scheduler/framework/plugins/defaultpreemption`, `SelectVictimsOnNode`
/// and `pickOneNodeForPreemption`): the replacement of `pod`, which fits nowhere, takes a node from
/// pods of lower priority. On each node that refused it only for what taking pods off could lift:
/// without every pod of lower priority, does it fit? Then the most important are reprieved one by
/// one while it still fits (those a budget protects first), and the rest go. The node: the fewest
/// budget violations, the lowest highest priority among its victims, the lowest sum, the fewest
/// victims, then the name. The victims are deleted without asking their budgets, and their own
/// replacements placed, preempting in turn where they may ([`victim_replaced`]). `None`: nowhere,
/// or `pod` may not preempt.
#[allow(clippy::too_many_arguments)]
fn preempt(
    view: &dyn View,
    namespace: &str,
    pod: &PodInfo,
    incoming: Incoming,
    replacing: &Replacing,
    states: &mut Nodes,
    ledgers: &mut BTreeMap<ObjectRef, Ledger>,
    on_node: &[Vec<(String, Arc<PodInfo>)>],
    why: &[(String, Unfit)],
    run: &mut DrainRun,
) -> Option<(Option<String>, String)> {
    if !pod.preempts {
        return None;
    }
    // What each budget allows now (the eviction API's view), spent victim by victim.
    let allowed: BTreeMap<ObjectRef, i32> = BTreeMap::new();
    let protected = |v: &Placed, allowed: &mut BTreeMap<ObjectRef, i32>| {
        let mut violates = false;
        for pdb in view.pdbs_covering(&v.namespace, &v.labels) {
            let left = allowed.entry(pdb.id.clone()).or_insert_with(|| match ledgers.get(&pdb.id) {
                Some(l) => l.allowed,
                None => Ledger::open(view, pdb.clone()).allowed,
            });
            *left -= 1;
            violates |= *left < 0;
        }
        violates
    };
    let mut candidates: Vec<Candidate> = Vec::new();
    let at_of: HashMap<&str, usize> = states.iter().enumerate().map(|(i, s)| (s.node.name.as_str(), i)).collect();
    let tried =
        why.iter().filter(|(_, u)| u.preemption_might_help()).filter_map(|(n, _)| at_of.get(n.as_str()).copied());
    let tried: Vec<usize> = tried.collect();
    for at in tried.into_iter().take(PREEMPTION_CANDIDATES) {
        let mut lower: Vec<Placed> = states[at].pods().iter().filter(|p| p.priority < pod.priority).cloned().collect();
        if lower.is_empty() {
            continue;
        }
        for v in &lower {
            states.remove(at, &v.namespace, |p| p.name == v.name);
        }
        if fits_with(incoming, at, states, replacing).is_err() {
            lower.into_iter().for_each(|v| states.push(at, v));
            continue;
        }
        lower.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.name.cmp(&b.name)));
        let mut spent = allowed.clone();
        let (violating, free): (Vec<Placed>, Vec<Placed>) = lower.into_iter().partition(|v| protected(v, &mut spent));
        let violating_count = violating.len();
        let mut victims = Vec::new();
        let mut violations = 0;
        for (i, v) in violating.into_iter().chain(free).enumerate() {
            states.push(at, v.clone());
            if fits_with(incoming, at, states, replacing).is_err() {
                states.remove(at, &v.namespace, |p| p.name == v.name);
                violations += usize::from(i < violating_count);
                victims.push(v);
            }
        }
        victims.iter().for_each(|v| states.push(at, v.clone()));
        candidates.push(Candidate { at, victims, violations });
    }
    let best = candidates.into_iter().min_by_key(|c| {
        let highest = c.victims.iter().map(|v| v.priority).max().unwrap_or(i32::MIN);
        let sum: i64 = c.victims.iter().map(|v| i64::from(v.priority)).sum();
        (c.violations, highest, sum, c.victims.len(), states[c.at].node.name.clone())
    })?;
    let node = states[best.at].node.name.clone();
    for v in &best.victims {
        states.remove(best.at, &v.namespace, |p| p.name == v.name);
        for pdb in view.pdbs_covering(&v.namespace, &v.labels) {
            ledgers.entry(pdb.id.clone()).or_insert_with(|| Ledger::open(view, pdb.clone())).lost();
        }
    }
    put_replacement(view, states, best.at, pod, incoming, replacing, ledgers);
    let by = format!("{namespace}/{}", pod.name);
    let mut named = Vec::new();
    for v in best.victims {
        named.push(format!("{}/{} (priority {})", v.namespace, v.name, v.priority));
        let replacement = victim_replaced(view, &v, (&node, best.at), &by, pod.priority, states, ledgers, on_node, run);
        run.preempts.push(Preempted {
            namespace: v.namespace.to_string(),
            pod: v.name.to_string(),
            priority: v.priority,
            node: node.clone(),
            by: by.clone(),
            replacement,
        });
    }
    let reason = format!("replaced on {node}, preempting {} (priority {} is higher)", names(&named), pod.priority);
    Some((Some(node), reason))
}

/// The victim `v` of a preemption on `node` (at `at`): its controller's replacement, placed where
/// it fits, or Pending. A replacement that fits nowhere preempts in turn where its own priority
/// and policy let it, as the scheduler does: it is a new pod, and DefaultPreemption runs for every
/// pod that fails the filters (`PodEligibleToPreemptOthers` asks only its `preemptionPolicy` and
/// a nomination it has not got). Each step takes only pods of a lower priority than the last, so a
/// chain ends. The node it went to.
#[allow(clippy::too_many_arguments)]
fn victim_replaced(
    view: &dyn View,
    v: &Placed,
    (node, at): (&str, usize),
    by: &str,
    priority: i32,
    states: &mut Nodes,
    ledgers: &mut BTreeMap<ObjectRef, Ledger>,
    on_node: &[Vec<(String, Arc<PodInfo>)>],
    run: &mut DrainRun,
) -> Option<String> {
    // A replacement placed earlier in this drain is not among the node's pods as the drain began:
    // it carries the name of the pod it replaces, on its drained node. Its controller replaces it
    // again all the same (a ReplicaSet's `manageReplicas`, a StatefulSet its ordinal).
    let same = |(ns, p): &&(String, Arc<PodInfo>)| **ns == *v.namespace && p.name == v.name;
    let (namespace, pod) = on_node[at].iter().find(same).or_else(|| on_node.iter().flatten().find(same))?;
    let (kind, name) = pod.workload()?;
    let workload = ObjectRef::new(kind, namespace, name);
    let template = view.template(&workload)?;
    let incoming = Incoming { namespace, labels: &template.labels, spec: &template.spec };
    let replacing = replacing(view, namespace, pod, &template.spec, states);
    match feasible_with(incoming, states, &replacing) {
        Ok(candidates) => {
            let at = choose(&candidates, states, namespace, &template.labels);
            put_replacement(view, states, at, pod, incoming, &replacing, ledgers);
            Some(states[at].node.name.clone())
        }
        Err(why) => {
            if let Some((to, _)) =
                preempt(view, namespace, pod, incoming, &replacing, states, ledgers, on_node, &why, run)
            {
                return to;
            }
            let reason = format!(
                "preempted on {node} by the replacement of {by} (priority {priority}, higher than its {}); its own \
                 replacement fits nowhere: {}",
                v.priority,
                explain(&why)
            );
            run.pending.push(Pending { namespace: namespace.clone(), pod: pod.name.to_string(), workload, reason });
            None
        }
    }
}

/// Why no node takes a pod: the refusing filters, each with the nodes it refused (the first few of
/// each, and how many more).
/// A replacement no node takes now: recorded among the drain's Pending pods, and said.
fn stays_pending(
    run: &mut DrainRun,
    namespace: &str,
    pod: &str,
    workload: ObjectRef,
    reason: String,
) -> (Option<String>, String) {
    let said = format!("its replacement stays Pending: {reason}");
    run.pending.push(Pending { namespace: namespace.to_string(), pod: pod.to_string(), workload, reason });
    (None, said)
}

fn explain(why: &[(String, Unfit)]) -> String {
    let mut by: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (node, unfit) in why {
        by.entry(unfit.to_string()).or_default().push(node);
    }
    // A cluster of thousands of nodes refuses on thousands: the first few named, the rest counted.
    if by.is_empty() {
        return "no node".into();
    }
    list(by.iter().map(|(u, nodes)| format!("{u} on {}", names(nodes))), NAMED, "; ")
}

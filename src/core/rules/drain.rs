//! What would a drain do? `ha-guard audit --drain NODE...` / `--drain-zone ZONE` replays a
//! `kubectl drain` of those nodes against the pods and budgets of the view: `drain-blocked` (an
//! eviction a PDB would refuse) and `drain-takes-all-replicas` (a workload whose every ready
//! replica is on them).
//!
//! The replay follows `kubectl drain` and the eviction API: every node is cordoned first, then
//! the nodes are drained one after the other, each node's pods in name order. DaemonSet pods
//! (`--ignore-daemonsets`) and static pods' mirrors are left; finished, terminating and Pending
//! pods are deleted without asking a budget. A pod covered by more than one PDB cannot be
//! evicted at all. Otherwise its PDB's arithmetic (DESIGN.md §3) decides, on the pods actually
//! running and ready now: a Ready pod goes while the budget allows a disruption, and each eviction
//! takes one healthy pod and one disruption away; a pod that is not Ready goes if the budget is
//! met (or its PDB says `unhealthyPodEvictionPolicy: AlwaysAllow`). Nothing replaces an evicted
//! pod during the replay: a refused eviction is one the drain waits on until a replacement is
//! Ready elsewhere, and hangs on if none can start.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::context::Emitter;
use super::posture::pod_names;
use super::zones::ZONE;
use crate::core::catalogue::Rule;
use crate::core::finding::Finding;
use crate::core::model::ObjectRef;
use crate::core::model::arith;
use crate::core::view::budget::{Source, budget_now, refuses, selected_pods};
use crate::core::view::{PdbInfo, PodInfo, PodOwner, PodPhase, View};
use crate::declare_rule;

declare_rule!(pub DRAIN_BLOCKED, "drain-blocked", Warn, judged: Drain, "audit --drain: a PDB would refuse an eviction of the drain (the PDB, the pods, why)");
declare_rule!(pub DRAIN_TAKES_ALL_REPLICAS, "drain-takes-all-replicas", Warn, judged: Drain, "audit --drain: a workload would lose every ready replica");

pub static RULES: &[&Rule] = &[&DRAIN_BLOCKED, &DRAIN_TAKES_ALL_REPLICAS];

/// The nodes labelled with `zone` (`topology.kubernetes.io/zone`), by name.
pub fn nodes_in_zone(view: &dyn View, zone: &str) -> Vec<String> {
    view.nodes().iter().filter(|n| n.labels.get(ZONE).is_some_and(|z| z == zone)).map(|n| n.name.clone()).collect()
}

/// A PDB's state during the replay.
struct Ledger {
    pdb: Arc<PdbInfo>,
    healthy_before: i32,
    current: i32,
    desired: i32,
    allowed: i32,
    /// Where the numbers come from, and why it expects no pod when it selects some.
    source: Source,
    expects_none: Option<&'static str>,
    evicted: Vec<Arc<str>>,
    /// Refused evictions: the pod and why.
    refused: Vec<(Arc<str>, String)>,
    /// Workloads of the refused pods.
    workloads: BTreeSet<ObjectRef>,
}

impl Ledger {
    /// The budget as the eviction API reads it: the PDB's status when it is current, else what the
    /// disruption controller computes from the pods ([`budget_now`]).
    fn open(view: &dyn View, pdb: Arc<PdbInfo>) -> Ledger {
        let now = budget_now(view, &pdb);
        // A value that is no amount (the apiserver refuses such a PDB) protects everything.
        let (status, source, expects_none) = match now {
            Some(n) => (n.status, n.source, n.expects_none),
            None => {
                let healthy = selected_pods(view, &pdb).iter().filter(|p| p.ready && !p.terminating).count() as i32;
                let status =
                    arith::Status { expected: healthy, desired_healthy: healthy, current_healthy: healthy, allowed: 0 };
                (status, Source::Computed, None)
            }
        };
        Ledger {
            pdb,
            healthy_before: status.current_healthy,
            current: status.current_healthy,
            desired: status.desired_healthy,
            allowed: status.allowed,
            source,
            expects_none,
            evicted: Vec::new(),
            refused: Vec::new(),
            workloads: BTreeSet::new(),
        }
    }

    /// Asks to evict `pod` as the eviction API decides ([`refuses`]): true when it would take it.
    /// An eviction the budget allows takes one disruption, and the pod's health if it had some.
    fn evict(&mut self, pod: &PodInfo) -> bool {
        let now = arith::Status {
            expected: 0,
            desired_healthy: self.desired,
            current_healthy: self.current,
            allowed: self.allowed,
        };
        if !refuses(&now, self.pdb.always_allow_unhealthy, pod) {
            // Not Ready and let go without asking the budget: it counts toward nothing.
            let unhealthy_exit = !pod.healthy()
                && (self.pdb.always_allow_unhealthy || (self.current >= self.desired && self.desired > 0));
            if !unhealthy_exit {
                self.allowed -= 1;
                if pod.healthy() {
                    self.current -= 1;
                }
            }
            self.evicted.push(pod.name.clone());
            return true;
        }
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
        self.refused.push((pod.name.clone(), why));
        if let Some((kind, name)) = pod.workload() {
            self.workloads.insert(ObjectRef::new(kind, &self.pdb.id.namespace, name));
        }
        false
    }

    /// Where its numbers came from, for the message: said only of a stale status.
    fn provenance(&self) -> String {
        match self.source {
            Source::Status | Source::Computed => String::new(),
            Source::Stale { observed, generation } => format!(
                " (its status is stale, observedGeneration {observed} < generation {generation}: the eviction API \
                 refuses every eviction until the disruption controller catches up; computed from the spec)"
            ),
        }
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
/// drain: the same decision the replay makes for each pod ([`simulate`]).
pub fn eviction_answer(view: &dyn View, namespace: &str, pod: &PodInfo) -> EvictionAnswer {
    if pod.phase.terminal() || pod.phase == PodPhase::Pending || pod.terminating {
        return EvictionAnswer::Deleted;
    }
    match view.pdbs_covering(namespace, &pod.labels).as_slice() {
        [] => EvictionAnswer::Deleted,
        [one] => {
            let mut ledger = Ledger::open(view, one.clone());
            if ledger.evict(pod) {
                EvictionAnswer::Evicted
            } else {
                EvictionAnswer::Refused(ledger.refused.pop().map(|(_, why)| why).unwrap_or_default())
            }
        }
        many => EvictionAnswer::SeveralBudgets(many.iter().map(|p| p.id.clone()).collect()),
    }
}

/// A workload with pods on the drained nodes.
#[derive(Default)]
struct Loss {
    ready_drained: Vec<Arc<str>>,
    pdbs: BTreeSet<ObjectRef>,
    refused: bool,
}

/// A pod covered by several PDBs: its namespace, name, workload, and the PDBs.
type Overlapped = (String, Arc<str>, Option<ObjectRef>, Vec<ObjectRef>);

/// Replays a drain of `nodes` (`drained`: how the user asked, e.g. "node a" or "zone z") and
/// returns its findings (rule defaults; the caller decides them).
pub fn simulate(view: &dyn View, nodes: &[String], drained: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut ledgers: BTreeMap<ObjectRef, Ledger> = BTreeMap::new();
    // Pods covered by several PDBs: (namespace, pod) → the PDBs.
    let mut multiple: Vec<Overlapped> = Vec::new();
    let mut losses: BTreeMap<ObjectRef, Loss> = BTreeMap::new();
    for (namespace, pod) in view.pods_on_nodes(nodes) {
        if matches!(pod.owner, PodOwner::DaemonSet | PodOwner::Mirror) || pod.phase.terminal() || pod.terminating {
            continue;
        }
        let workload = pod.workload().map(|(kind, name)| ObjectRef::new(kind, &namespace, name));
        let covering: Vec<Arc<PdbInfo>> = view.pdbs_covering(&namespace, &pod.labels);
        let mut refused = false;
        // The eviction API deletes a Pending pod without asking a budget.
        if pod.phase != PodPhase::Pending {
            match covering.as_slice() {
                [] => {}
                [one] => {
                    let ledger = ledgers.entry(one.id.clone()).or_insert_with(|| Ledger::open(view, one.clone()));
                    refused = !ledger.evict(&pod);
                }
                many => {
                    refused = true;
                    multiple.push((
                        namespace.clone(),
                        pod.name.clone(),
                        workload.clone(),
                        many.iter().map(|p| p.id.clone()).collect(),
                    ));
                }
            }
        }
        if let Some(w) = workload {
            let loss = losses.entry(w).or_default();
            if pod.healthy() {
                loss.ready_drained.push(pod.name.clone());
            }
            loss.pdbs.extend(covering.iter().map(|p| p.id.clone()));
            loss.refused |= refused;
        }
    }
    for ledger in ledgers.values().filter(|l| !l.refused.is_empty()) {
        let pdb = &ledger.pdb;
        let first = &ledger.refused[0];
        let evicted = if ledger.evicted.is_empty() {
            "evicts none of them".to_string()
        } else {
            format!("evicts {}", pod_names(ledger.evicted.iter().map(|n| &**n)))
        };
        let refused: Vec<String> = ledger.refused.iter().map(|(pod, _)| pod.to_string()).collect();
        let mut out = Emitter::new(&pdb.id, &mut findings);
        out.emit(
            &DRAIN_BLOCKED,
            pdb.budget().path(),
            format!(
                "a drain of {drained} (cordoned first, then each pod evicted, as kubectl drain does) meets {} \
                 ({}; {} of its pods healthy now, {} needed{}): it {evicted}, then refuses the eviction of {} \
                 ({}). The drain waits on it until a replacement is Ready on another node, and hangs if none can \
                 start there.",
                pdb.id,
                pdb.budget().describe(),
                ledger.healthy_before,
                ledger.desired,
                ledger.provenance(),
                pod_names(refused.iter().map(String::as_str)),
                first.1,
            ),
            "before the drain, make room for the replacements off these nodes (capacity, and spreads and \
             affinities they can meet), keep the replicas on different nodes so a drain takes one at a time \
             (see replicas-share-node), or run more replicas than the budget needs.",
        )
        .related(ledger.workloads.iter().cloned().collect());
    }
    for (namespace, pod, workload, pdbs) in multiple {
        let mut out = Emitter::new(&pdbs[0], &mut findings);
        let names: Vec<String> = pdbs.iter().map(|p| p.name.clone()).collect();
        out.emit(
            &DRAIN_BLOCKED,
            "spec.selector",
            format!(
                "a drain of {drained} cannot evict pod {namespace}/{pod}: {} PodDisruptionBudgets ({}) select it, \
                 and the eviction API refuses every eviction of a pod with more than one. The drain hangs on it.",
                pdbs.len(),
                names.join(", ")
            ),
            "make exactly one PDB cover each pod (see pdb-overlap): narrow or merge the selectors.",
        )
        .related(pdbs[1..].iter().cloned().chain(workload).collect());
    }
    for (id, loss) in losses {
        if loss.ready_drained.is_empty() {
            continue;
        }
        let ready_total = view.pods_of(&id).iter().filter(|p| p.healthy()).count();
        if loss.ready_drained.len() < ready_total {
            continue;
        }
        let pdbs: Vec<String> = loss.pdbs.iter().map(|p| p.name.clone()).collect();
        let how = if pdbs.is_empty() {
            "No PDB covers it, so the drain evicts them all at once: an outage until replacements are scheduled \
             elsewhere and Ready."
                .to_string()
        } else if loss.refused {
            format!(
                "Its PDB ({}) makes the drain wait for replacements (see drain-blocked), which holds only while \
                 they can start elsewhere; losing these nodes outright (a zone outage, a forced drain) takes every \
                 replica at once.",
                pdbs.join(", ")
            )
        } else {
            format!("Its PDB ({}) lets the drain evict them all.", pdbs.join(", "))
        };
        let scale = view.workload(id.kind, &id.namespace, &id.name).map(|w| format!(" (replicas {})", w.replicas));
        let mut out = Emitter::new(&id, &mut findings);
        out.emit(
            &DRAIN_TAKES_ALL_REPLICAS,
            "spec.replicas",
            format!(
                "{id}{}: every ready replica ({}) runs on {drained}: the drain takes them all. {how}",
                scale.unwrap_or_default(),
                pod_names(loss.ready_drained.iter().map(|n| &**n)),
            ),
            "run the replicas on different nodes and zones (a topologySpreadConstraint on kubernetes.io/hostname \
             and topology.kubernetes.io/zone), with a PDB that allows one disruption, before draining.",
        )
        .related(loss.pdbs.into_iter().collect());
    }
    findings
}

#[cfg(test)]
#[path = "tests/drain.rs"]
mod tests;

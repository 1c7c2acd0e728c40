//! What would a drain do? `ha-guard audit --drain NODE...` / `--drain-zone ZONE` replays a
//! `kubectl drain` of those nodes against the pods, budgets and nodes of the view
//! ([`replay`](crate::core::view::replay)): the nodes cordoned, a pod without a controller
//! refusing the drain, every other pod evicted as the eviction API answers, each evicted pod's
//! replacement placed as kube-scheduler would on the nodes that remain, the budgets counting the
//! replacements once Ready. The findings: `drain-blocked` (an eviction stays refused: the drain
//! hangs), `drain-refused` (kubectl drain refuses a pod: no controller, or two PDBs),
//! `drain-leaves-pending` (the drain completes, and replacements stay Pending), and
//! `drain-takes-all-replicas` (a workload whose every ready replica is on the drained nodes).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::context::Emitter;
use super::zones::ZONE;
use crate::core::catalogue::Rule;
use crate::core::finding::Finding;
use crate::core::model::ObjectRef;
use crate::core::model::arith::{Amount, Budget, amount};
use crate::core::model::words::{NAMED, list, names};
use crate::core::view::replay::EvictionResult;
use crate::core::view::{PdbInfo, PodOwner, PodPhase, View};
use crate::declare_rule;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

declare_rule!(pub DRAIN_BLOCKED, "drain-blocked", Warn, judged: Drain, "audit --drain: a PDB would refuse an eviction of the drain (the PDB, the pods, why)");
declare_rule!(pub DRAIN_TAKES_ALL_REPLICAS, "drain-takes-all-replicas", Warn, judged: Drain, "audit --drain: a workload would lose every ready replica");
declare_rule!(pub DRAIN_LEAVES_PENDING, "drain-leaves-pending", Warn, judged: Drain, "audit --drain: the drain completes but replacements cannot be placed on the nodes that remain");
declare_rule!(pub DRAIN_REFUSED, "drain-refused", Warn, judged: Drain, "audit --drain: kubectl drain refuses a pod (no controller, or two PDBs)");

pub static RULES: &[&Rule] = &[&DRAIN_BLOCKED, &DRAIN_TAKES_ALL_REPLICAS, &DRAIN_LEAVES_PENDING, &DRAIN_REFUSED];

pub use crate::core::view::replay::{DrainRun, EvictionAnswer, Outcome, eviction_answer, replay};

/// The nodes labelled with `zone` (`topology.kubernetes.io/zone`), by name.
pub fn nodes_in_zone(view: &dyn View, zone: &str) -> Vec<String> {
    view.nodes().iter().filter(|n| n.labels.get(ZONE).is_some_and(|z| z == zone)).map(|n| n.name.clone()).collect()
}

/// A workload with pods on the drained nodes.
#[derive(Default)]
struct Loss {
    ready_drained: Vec<Arc<str>>,
    pdbs: BTreeSet<ObjectRef>,
    refused: bool,
}

/// Replays a drain of `nodes` (`drained`: how the user asked, e.g. "node a" or "zone z") and
/// returns its findings (rule defaults; the caller decides them).
pub fn simulate(view: &dyn View, nodes: &[String], drained: &str) -> Vec<Finding> {
    run(view, nodes, drained).1
}

/// [`simulate`], with the replay itself (the `drains` of `audit --format json`).
pub fn run(view: &dyn View, nodes: &[String], drained: &str) -> (DrainRun, Vec<Finding>) {
    let replay = replay(view, nodes);
    let findings = findings_of(view, &replay, drained);
    (replay, findings)
}

/// The findings of a replayed drain (`drained`: how the user asked).
pub fn findings_of(view: &dyn View, replay: &DrainRun, drained: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    for b in &replay.blocked {
        let pdb = &b.pdb;
        let evicted = if b.evicted.is_empty() {
            "evicts none of them".to_string()
        } else {
            format!("evicts {}", names(b.evicted.iter().map(|n| &**n)))
        };
        let refused: Vec<&str> = b.refused.iter().map(|(pod, _)| &**pod).collect();
        let stale = b
            .stale
            .map(|(observed, generation)| {
                format!(
                    " (its status is stale, observedGeneration {observed} < generation {generation}: the eviction API \
                     refuses every eviction until the disruption controller catches up; computed from the spec)"
                )
            })
            .unwrap_or_default();
        // A budget that allows nothing even with every pod it expects healthy: no replacement, no
        // wait makes room; only changing the budget (or the replicas) does.
        let never = b.desired >= b.expected;
        let ending = if never {
            let why = if b.expected <= 0 {
                "It expects no pods, so it allows no disruption whatever the pods do".to_string()
            } else {
                format!(
                    "Even with all {} pods it expects healthy it allows no disruption ({} needs {} of them)",
                    b.expected,
                    pdb.budget().describe(),
                    b.desired
                )
            };
            format!(
                "{why}: no replacement can make room, so the drain hangs (kubectl drain retries every 5 s until its \
                 --timeout) until the budget changes."
            )
        } else if replay.replaces {
            let joined = list(
                replay
                    .pending
                    .iter()
                    .filter(|p| p.namespace == pdb.id.namespace && pdb.covers(&pod_labels(view, &p.workload)))
                    .map(|p| format!("the replacement of {} stays Pending ({})", p.pod, p.reason)),
                NAMED,
                "; ",
            );
            let why = if joined.is_empty() {
                String::new()
            } else {
                format!(" {}{}.", joined[..1].to_uppercase(), &joined[1..])
            };
            format!(
                "Replacements were counted as the controllers place them and the scheduler can: no replacement makes \
                 room, so the drain hangs (kubectl drain retries every 5 s until its --timeout).{why}"
            )
        } else {
            "The drain waits on it until a replacement is Ready on another node, and hangs if none can start there."
                .to_string()
        };
        // Pods of the budget the scheduler could not place before the drain: counted short by the
        // budget, for the scheduler's reason (pods-pending says it too), not a guess.
        let unplaced: Vec<(Arc<str>, Box<str>)> = b
            .workloads
            .iter()
            .flat_map(|w| view.pods_of(w))
            .filter(|p| p.phase == PodPhase::Pending && p.node.is_none() && !p.terminating)
            .filter_map(|p| Some((p.name.clone(), p.unschedulable.clone()?)))
            .collect();
        let before = match unplaced.first() {
            None => String::new(),
            Some((_, reason)) => format!(
                " Before the drain, {} {} Pending, which the budget counts short: the scheduler says: {} (see \
                 pods-pending).",
                names(unplaced.iter().map(|(n, _)| &**n)),
                if unplaced.len() == 1 { "is" } else { "are" },
                reason.trim_end_matches('.')
            ),
        };
        let mut out = Emitter::new(&pdb.id, &mut findings);
        out.emit(
            &DRAIN_BLOCKED,
            pdb.budget().path(),
            format!(
                "a drain of {drained} (cordoned first, then each pod evicted, as kubectl drain does) meets {} \
                 ({}; {} of its pods healthy now, {} needed{stale}): it {evicted}, then refuses the eviction of {} \
                 ({}). {ending}{before}",
                pdb.id,
                pdb.budget().describe(),
                b.healthy_before,
                b.desired,
                names(refused.iter().copied()),
                b.refused[0].1,
            ),
            if never {
                budget_fix(&pdb.budget(), b.expected, b.desired)
            } else {
                "before the drain, make room for the replacements off these nodes (capacity, and spreads and \
                 affinities they can meet), keep the replicas on different nodes so a drain takes one at a time \
                 (see replicas-share-node), or run more replicas than the budget needs."
                    .to_string()
            },
        )
        .related(b.workloads.iter().cloned().collect());
    }
    for (namespace, pod, workload, pdbs) in &replay.refused {
        if pdbs.is_empty() {
            // The finding is about the bare pod itself: its ownerReferences name no controller.
            let subject = ObjectRef::new(crate::core::model::Kind::Pod, namespace, &**pod);
            let mut out = Emitter::new(&subject, &mut findings);
            out.emit(
                &DRAIN_REFUSED,
                "metadata.ownerReferences",
                format!(
                    "a drain of {drained} is refused before it evicts anything: pod {namespace}/{pod} has no controller \
                     (no ownerReferences entry with controller: true), and kubectl drain refuses such a pod unless \
                     --force, which deletes it for good: nothing recreates it."
                ),
                "run the pod under a controller (a Deployment or StatefulSet), or delete it yourself before the drain \
                 if losing it is acceptable.",
            );
            continue;
        }
        let mut out = Emitter::new(&pdbs[0], &mut findings);
        out.emit(
            &DRAIN_REFUSED,
            "spec.selector",
            format!(
                "a drain of {drained} cannot evict pod {namespace}/{pod}: {} PodDisruptionBudgets ({}) select it, \
                 and the eviction API answers 500 for a pod with more than one; kubectl drain gives up on it.",
                pdbs.len(),
                names(pdbs.iter().map(|p| &p.name))
            ),
            "make exactly one PDB cover each pod (see pdb-overlap): narrow or merge the selectors.",
        )
        .related(pdbs[1..].iter().cloned().chain(workload.clone()).collect());
    }
    if replay.outcome == Outcome::LeavesPending {
        // What the simulation cannot know: a node autoscaler may add a node the replacements fit on.
        let table = view.node_table();
        let until_added = table.autoscaled_node().map(|(node, label)| {
            format!(
                " or a node is added (node {node} carries {label}: a node autoscaler may add one that takes them; the \
                 simulation places them on the nodes there are)"
            )
        });
        let mut by_workload: BTreeMap<&ObjectRef, Vec<&crate::core::view::replay::Pending>> = BTreeMap::new();
        for p in &replay.pending {
            by_workload.entry(&p.workload).or_default().push(p);
        }
        for (w, pending) in by_workload {
            let pods: Vec<&str> = pending.iter().map(|p| p.pod.as_str()).collect();
            let mut out = Emitter::new(w, &mut findings);
            out.emit(
                &DRAIN_LEAVES_PENDING,
                "spec.template.spec",
                format!(
                    "a drain of {drained} completes, but the {} of {} cannot be placed on the nodes that remain ({}): \
                     {w} runs {} short until the nodes are uncordoned{}.",
                    if pods.len() == 1 { "replacement" } else { "replacements" },
                    names(pods.iter().copied()),
                    pending[0].reason,
                    pods.len(),
                    until_added.as_deref().unwrap_or("")
                ),
                "make room for the replacements on the nodes that remain before the drain: capacity, a spread they \
                 can meet (nodeTaintsPolicy: Honor stops cordoned nodes counting as domains), free host ports, \
                 affinities other nodes satisfy; or drain when another node is there.",
            );
        }
    }
    // drain-takes-all-replicas: a workload whose every ready replica is on the drained nodes; one
    // that declares a single replica is in the drain's summary instead ([`single_replica_lost`]).
    for (id, loss) in losses(view, replay) {
        if declares_one_replica(view, &id) {
            continue;
        }
        let pdbs = names(loss.pdbs.iter().map(|p| &p.name));
        let how = if pdbs.is_empty() {
            "No PDB covers it, so the drain evicts them all at once: an outage until replacements are scheduled \
             elsewhere and Ready."
                .to_string()
        } else if loss.refused {
            format!(
                "Its PDB ({}) makes the drain wait for replacements (see drain-blocked), which holds only while \
                 they can start elsewhere; losing these nodes outright (a zone outage, a forced drain) takes every \
                 replica at once.",
                pdbs
            )
        } else {
            format!("Its PDB ({pdbs}) lets the drain evict them all.")
        };
        let scale = view.workload(id.kind, &id.namespace, &id.name).map(|w| format!(" (replicas {})", w.replicas));
        let mut out = Emitter::new(&id, &mut findings);
        out.emit(
            &DRAIN_TAKES_ALL_REPLICAS,
            "spec.replicas",
            format!(
                "{id}{}: every ready replica ({}) runs on {drained}: the drain takes them all. {how}",
                scale.unwrap_or_default(),
                names(loss.ready_drained.iter().map(|n| &**n)),
            ),
            "run the replicas on different nodes and zones (a topologySpreadConstraint on kubernetes.io/hostname \
             and topology.kubernetes.io/zone), with a PDB that allows one disruption, before draining.",
        )
        .related(loss.pdbs.into_iter().collect());
    }
    findings
}

/// The workloads whose every ready replica runs on the drained nodes, with what the drain does
/// to them.
fn losses(view: &dyn View, replay: &DrainRun) -> BTreeMap<ObjectRef, Loss> {
    let nodes = &replay.nodes;
    let mut losses: BTreeMap<ObjectRef, Loss> = BTreeMap::new();
    for (namespace, pod) in view.pods_on_nodes(nodes) {
        if matches!(pod.owner, PodOwner::DaemonSet | PodOwner::Mirror) || pod.phase.terminal() || pod.terminating {
            continue;
        }
        let Some(w) = pod.workload().map(|(kind, name)| ObjectRef::new(kind, &namespace, name)) else { continue };
        let covering: Vec<Arc<PdbInfo>> = view.pdbs_covering(&namespace, &pod.labels);
        let refused = replay
            .evictions
            .iter()
            .any(|e| e.namespace == namespace && *e.pod == *pod.name && e.result == EvictionResult::Refused);
        let loss = losses.entry(w).or_default();
        if pod.healthy() {
            loss.ready_drained.push(pod.name.clone());
        }
        loss.pdbs.extend(covering.iter().map(|p| p.id.clone()));
        loss.refused |= refused;
    }
    losses.retain(|id, loss| {
        !loss.ready_drained.is_empty()
            && loss.ready_drained.len() >= view.pods_of(id).iter().filter(|p| p.healthy()).count()
    });
    losses
}

/// Whether the workload declares `replicas: 1`: losing its only pod to a drain restates that, so
/// it is counted in the drain's summary rather than warned about one by one.
fn declares_one_replica(view: &dyn View, id: &ObjectRef) -> bool {
    view.workload(id.kind, &id.namespace, &id.name).is_some_and(|w| w.replicas == 1)
}

/// The workloads of `replays.nodes` that declare a single replica and whose pod the drain takes
/// (`DrainRun::single_replica`; the others are `drain-takes-all-replicas` findings).
pub fn single_replica_lost(view: &dyn View, replay: &DrainRun) -> Vec<ObjectRef> {
    losses(view, replay).into_keys().filter(|id| declares_one_replica(view, id)).collect()
}

/// The fix of a budget that allows no disruption even with every pod it expects healthy
/// (`expected` pods, `desired` of them needed): the field to change, to what.
fn budget_fix(budget: &Budget, expected: i32, desired: i32) -> String {
    match budget {
        Budget::MaxUnavailable(v) if expected > 0 => format!(
            "raise maxUnavailable from {} to 1 so that one of the {expected} pods it expects may go at a time: the \
             drain then evicts them one by one as their replacements become Ready (see pdb-blocks-eviction).",
            show(v)
        ),
        Budget::MinAvailable(v) if expected > 0 => {
            let grow = match amount(v) {
                // No number of replicas leaves one out of 100%.
                Ok(Amount::Percent(p)) if p >= 100 => None,
                Ok(Amount::Percent(_)) => Some("run more replicas so that it needs fewer than all of them".to_string()),
                _ => Some(format!(
                    "run {} replicas or more so that minAvailable {} leaves one disruption",
                    desired + 1,
                    show(v)
                )),
            };
            if expected >= 2 {
                format!(
                    "lower minAvailable from {} to {} (or set maxUnavailable: 1 instead) so that one of the {expected} pods \
                     it expects may go at a time{} (see pdb-blocks-eviction).",
                    show(v),
                    expected - 1,
                    grow.map(|g| format!(", or {g}")).unwrap_or_default()
                )
            } else {
                // minAvailable 0 over one pod protects nothing: maxUnavailable says so plainly.
                format!(
                    "{}replace minAvailable {} with maxUnavailable: 1 if the one replica may be down during a drain \
                     (see pdb-blocks-eviction).",
                    grow.map(|g| format!("{g}, or ")).unwrap_or_default(),
                    show(v)
                )
            }
        }
        // Neither field, or a maxUnavailable over pods without a controller: it expects no pods.
        _ => "give the budget a number it can count: maxUnavailable: 1 over pods of a Deployment or StatefulSet, or \
              an integer minAvailable (it counts the pods themselves) where the pods have no controller (see \
              pdb-blocks-eviction)."
            .to_string(),
    }
}

fn show(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// The pod labels of a workload (its template's), for the PDBs that cover it.
fn pod_labels(view: &dyn View, w: &ObjectRef) -> BTreeMap<String, String> {
    view.workload(w.kind, &w.namespace, &w.name).map(|w| w.template_labels.clone()).unwrap_or_default()
}

#[cfg(test)]
#[path = "tests/drain.rs"]
mod tests;

//! Live posture: what only a running cluster can answer, from its pods, nodes and PDB status.
//! `replicas-share-node`, `pdb-disruptions-blocked`, `spread-pending`, `pod-on-cordoned-node`.
//!
//! These rules judge where pods are now, not what a write asks for: they run in `ha-guard audit`
//! (and, once it exists, the background audit) through [`super::audit`], never at admission
//! ([`super::evaluate`] does not call this family; a test holds it to that).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::context::{Ctx, Emitter, pod_path};
use super::zones::{ZONE, spread_over_zones};
use crate::core::catalogue::Rule;
use crate::core::model::pod::{HOSTNAME, kept_apart, spread_constraints};
use crate::core::model::words::{NAMED, list, names};
use crate::core::model::{Subject, Workload, selector};
use crate::core::view::budget::{Source, budget_now, refuses};
use crate::core::view::placement::takes;
use crate::core::view::{PdbInfo, PodInfo, PodPhase, View, bounds};
use crate::declare_rule;

declare_rule!(pub REPLICAS_SHARE_NODE, "replicas-share-node", Warn, judged: Audit, "running replicas share a node (or a zone) that one failure or drain takes at once (audit)");
declare_rule!(pub PDB_DISRUPTIONS_BLOCKED, "pdb-disruptions-blocked", Warn, judged: Audit, "a PDB allows no disruption now (status.disruptionsAllowed 0): a drain would hang (audit)");
declare_rule!(pub SPREAD_PENDING, "spread-pending", Warn, judged: Audit, "pods stay Pending because a DoNotSchedule topology spread cannot be met (audit)");
declare_rule!(pub POD_ON_CORDONED_NODE, "pod-on-cordoned-node", Warn, judged: Audit, "pods tolerate the cordon taint and run on a cordoned node (audit)");
declare_rule!(pub PODS_PENDING, "pods-pending", Warn, judged: Audit, "pods stay Pending: the scheduler cannot place them, with its reason (audit)");

pub static RULES: &[&Rule] =
    &[&REPLICAS_SHARE_NODE, &PDB_DISRUPTIONS_BLOCKED, &SPREAD_PENDING, &POD_ON_CORDONED_NODE, &PODS_PENDING];

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    match ctx.subject {
        Subject::Workload(w) => {
            replicas_share_node(ctx, w, out);
            spread_pending(ctx, w, out);
            pods_pending(ctx, w, out);
            pod_on_cordoned_node(ctx, w, out);
        }
        Subject::Pdb(_) => {
            let id = ctx.id();
            if let Some(pdb) = ctx.view.pdb(&id.namespace, &id.name) {
                pdb_disruptions_blocked(ctx.view, &pdb, out);
            }
        }
        _ => {}
    }
}

/// The most pods in one place, the place, and how many places the pods could use.
struct Crowd<'p, 'k> {
    place: &'k str,
    pods: Vec<&'p PodInfo>,
    places: usize,
}

/// Groups `running` by `key` (pods without one are left out) and returns the largest group.
fn crowd<'p, 'k>(
    running: &[&'p PodInfo],
    key: impl Fn(&'p PodInfo) -> Option<&'k str>,
    places: usize,
) -> Option<Crowd<'p, 'k>> {
    let mut groups: BTreeMap<&str, Vec<&PodInfo>> = BTreeMap::new();
    for p in running {
        if let Some(k) = key(p) {
            groups.entry(k).or_default().push(p);
        }
    }
    let used = groups.len();
    // The first of the largest groups in name order (max_by_key keeps the last of equals): a
    // stable message.
    let (place, pods) = groups.into_iter().rev().max_by_key(|(_, pods)| pods.len())?;
    Some(Crowd { place, pods, places: places.max(used) })
}

/// `replicas-share-node`: a workload with floor > 1 whose running pods crowd one node (or one
/// zone) more than an even placement over the nodes (zones) they may use would: more than
/// `ceil(running / places)` there, and either more than half of them or, when its spread or
/// anti-affinity asks to keep replicas apart, any such excess.
fn replicas_share_node(ctx: &Ctx, full: &Workload, out: &mut Emitter) {
    let Some(w) = ctx.view.subject_workload() else { return };
    let b = bounds(w, ctx.view);
    if b.floor <= 1 {
        return;
    }
    let pods = ctx.view.pods_of(&w.id);
    let running: Vec<&PodInfo> = pods.iter().map(Arc::as_ref).filter(|p| p.running()).collect();
    let n = running.len();
    if n < 2 {
        return;
    }
    let apart = kept_apart(full);
    // The nodes (zones) these pods may be placed on: schedulable, taints tolerated, selectors met.
    let nodes = ctx.nodes();
    let usable: Vec<_> = match full.pod_spec() {
        Some(spec) => nodes.iter().filter(|node| takes(node, spec)).collect(),
        None => Vec::new(),
    };
    let zones: BTreeSet<&str> = usable.iter().filter_map(|n| n.labels.get(ZONE).map(String::as_str)).collect();
    let zone_by_node: BTreeMap<&str, &str> =
        nodes.iter().filter_map(|n| Some((n.name.as_str(), n.labels.get(ZONE)?.as_str()))).collect();
    let zone_of = |p: &PodInfo| zone_by_node.get(p.node.as_deref()?).copied();
    let crowded = |c: &Crowd<'_, '_>| {
        let even = n.div_ceil(c.places.max(1));
        c.pods.len() > even && (apart || c.pods.len() * 2 > n)
    };
    let on_node = crowd(&running, |p| p.node.as_deref(), usable.len()).filter(|c| crowded(c));
    // Zones count only where the pods could use two or more: one zone cannot be spread over.
    let in_zone = crowd(&running, zone_of, zones.len())
        .filter(|c| c.places >= 2 && c.pods.len() * 2 > n && crowded(c))
        // The same pods as on the node (one node a zone): said once.
        .filter(|z| on_node.as_ref().is_none_or(|c| c.pods.len() != z.pods.len()));
    if on_node.is_none() && in_zone.is_none() {
        return;
    }
    let mut what = Vec::new();
    if let Some(c) = &on_node {
        what.push(format!(
            "{} of its {n} running pods are on node {} ({}) although {} nodes could hold them apart{}",
            c.pods.len(),
            c.place,
            names(c.pods.iter().map(|p| &*p.name)),
            c.places,
            if apart { " and its spread/anti-affinity asks to keep replicas apart" } else { "" }
        ));
    }
    if let Some(c) = &in_zone {
        what.push(format!(
            "{} of its {n} running pods are in zone {} ({}) of the {} zones it may use",
            c.pods.len(),
            c.place,
            names(c.pods.iter().map(|p| &*p.name)),
            c.places
        ));
    }
    let sel =
        || w.selector.as_deref().map(selector::render).unwrap_or_else(|| selector::render_labels(&w.template_labels));
    let fix = if let (None, Some(z)) = (&on_node, &in_zone) {
        // Apart on nodes, together in a zone: a hostname spread does not help; a zone spread does.
        if spread_over_zones(full) {
            format!(
                "delete the pods in zone {} one at a time (kubectl delete pod) so the scheduler places the \
                 replacements in the other zones, make the spread on {ZONE} whenUnsatisfiable: DoNotSchedule so it \
                 cannot happen again, and let a descheduler (RemovePodsViolatingTopologySpreadConstraint) keep them \
                 apart as nodes come and go.",
                z.place
            )
        } else {
            format!(
                "add a topologySpreadConstraint {{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway, \
                 labelSelector: {}}} to the pod template, then roll the pods (kubectl rollout restart) so they are \
                 spread over the zones.",
                sel()
            )
        }
    } else if apart {
        "delete the crowded pods one at a time (kubectl delete pod) so the scheduler places the replacements \
         apart, make the spread whenUnsatisfiable: DoNotSchedule (or the anti-affinity required) so it cannot \
         happen again, and let a descheduler (RemovePodsViolatingTopologySpreadConstraint) keep them apart as \
         nodes come and go."
            .to_string()
    } else {
        format!(
            "add a topologySpreadConstraint {{maxSkew: 1, topologyKey: {HOSTNAME}, whenUnsatisfiable: \
             DoNotSchedule, labelSelector: {}}} (and one on {ZONE}) to the pod template, then roll the pods \
             (kubectl rollout restart) so they are placed apart.",
            sel()
        )
    };
    out.emit(
        &REPLICAS_SHARE_NODE,
        pod_path("topologySpreadConstraints"),
        format!(
            "{}: {}: {}.",
            b.describe(w),
            what.join("; and "),
            // What takes them at once: a node's failure where they share a node, a zone's outage
            // where they share only a zone.
            match (&on_node, &in_zone) {
                (Some(_), None) => {
                    "one node failure, drain or consolidation takes those replicas at once (two replicas on one \
                     node are one replica)"
                }
                (None, _) =>
                    "one zone's outage takes those replicas at once (replicas in one zone are one replica \
                              against its outage)",
                (Some(_), Some(_)) => {
                    "one node failure, drain or consolidation takes the replicas on that node at once (two replicas \
                     on one node are one replica), and one zone's outage those in that zone"
                }
            }
        ),
        fix,
    )
    .related(b.hpas.iter().map(|h| h.id.clone()).collect());
}

/// `spread-pending`: pods of the workload the scheduler leaves Pending because a topology spread
/// (a `DoNotSchedule` one: `ScheduleAnyway` never blocks) cannot be met.
fn spread_pending(ctx: &Ctx, full: &Workload, out: &mut Emitter) {
    let id = full.id();
    let pods = ctx.view.pods_of(&id);
    let pending: Vec<&PodInfo> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.phase == PodPhase::Pending && !p.terminating)
        .filter(|p| p.unschedulable.as_deref().is_some_and(blames_spread))
        .collect();
    let Some(first) = pending.first() else { return };
    let hard: Vec<(usize, &str)> = spread_constraints(full)
        .iter()
        .enumerate()
        .filter(|(_, c)| c.when_unsatisfiable == "DoNotSchedule")
        .map(|(i, c)| (i, c.topology_key.as_str()))
        .collect();
    let (path, constraint) = match hard.as_slice() {
        [(i, key)] => (
            pod_path(&format!("topologySpreadConstraints[{i}]")),
            format!("topologySpreadConstraints[{i}] (topologyKey {key}, DoNotSchedule)"),
        ),
        _ => (pod_path("topologySpreadConstraints"), "a DoNotSchedule topology spread".to_string()),
    };
    out.emit(
        &SPREAD_PENDING,
        path,
        format!(
            "{id}: {} of its pods {} Pending ({}) because the scheduler cannot meet {constraint} (it says: {}). \
             The workload runs short of its replicas until a node in the missing domain appears.",
            pending.len(),
            if pending.len() == 1 { "is" } else { "are" },
            names(pending.iter().map(|p| &*p.name)),
            first.unschedulable.as_deref().unwrap_or_default().trim_end_matches('.'),
        ),
        "add schedulable nodes in the topology domain the spread is short of (a zone, a node), check that the \
         nodes carry the topology label, lower the replicas or raise maxSkew, or make the spread \
         whenUnsatisfiable: ScheduleAnyway (a preference, placed even when uneven).",
    );
}

/// Whether the scheduler's message blames a topology spread: `spread-pending` says that case, with
/// the constraint.
fn blames_spread(message: &str) -> bool {
    message.contains("topology spread constraints")
}

/// `pods-pending`: pods of the workload the scheduler could not place (`PodScheduled` False,
/// `Unschedulable`), one finding per workload with the scheduler's own reason. A pod Pending for a
/// spread is `spread-pending`'s.
fn pods_pending(ctx: &Ctx, full: &Workload, out: &mut Emitter) {
    let id = full.id();
    let pods = ctx.view.pods_of(&id);
    let pending: Vec<&PodInfo> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| p.phase == PodPhase::Pending && !p.terminating && p.node.is_none())
        .filter(|p| p.unschedulable.as_deref().is_some_and(|m| !blames_spread(m)))
        .collect();
    let Some(first) = pending.first() else { return };
    let reason = first.unschedulable.as_deref().unwrap_or_default().trim_end_matches('.');
    let others = pending.iter().filter(|p| p.unschedulable.as_deref() != first.unschedulable.as_deref()).count();
    let also = match others {
        0 => String::new(),
        n => format!(
            " ({n} of them for another reason: `ha-guard audit --format json` or kubectl describe pod lists each)"
        ),
    };
    out.emit(
        &PODS_PENDING,
        "spec.replicas",
        format!(
            "{id}: {} of its {} pods {} Pending ({}): the scheduler says: {reason}{also}. The workload runs that many \
             replicas short until they are placed.",
            pending.len(),
            full.replicas,
            if pending.len() == 1 { "is" } else { "are" },
            names(pending.iter().map(|p| &*p.name)),
        ),
        "give the scheduler what its message asks for: room (capacity, or fewer or smaller requests), nodes that \
         match the pods' nodeSelector, affinity and tolerations, volumes the nodes can reach (a PersistentVolume's \
         node affinity or zone), free host ports; or lower the replicas.",
    );
}

/// `pod-on-cordoned-node`: the workload's pods tolerate the cordon taint and sit on a cordoned
/// node (a drain evicts them and the scheduler can put them straight back).
fn pod_on_cordoned_node(ctx: &Ctx, full: &Workload, out: &mut Emitter) {
    let id = full.id();
    let pods = ctx.view.pods_of(&id);
    let mut by_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in &pods {
        if p.tolerates_cordon
            && !p.phase.terminal()
            && !p.terminating
            && let Some(node) = p.node.as_deref()
            && ctx.view.node(node).is_some_and(|n| n.unschedulable)
        {
            by_node.entry(node).or_default().push(&p.name);
        }
    }
    if by_node.is_empty() {
        return;
    }
    let count: usize = by_node.values().map(Vec::len).sum();
    let places =
        list(by_node.iter().map(|(node, pods)| format!("{} on {node}", names(pods.iter().copied()))), NAMED, "; ");
    out.emit(
        &POD_ON_CORDONED_NODE,
        pod_path("tolerations"),
        format!(
            "{id} has {count} {} on cordoned nodes ({}) that tolerate the cordon taint \
             node.kubernetes.io/unschedulable:NoSchedule: a drain evicts them and the scheduler may place the \
             replacements straight back on the node being drained, so the drain never empties it and the pods die \
             with the node.",
            if count == 1 { "pod" } else { "pods" },
            places
        ),
        "remove the toleration of node.kubernetes.io/unschedulable (and any operator: Exists wildcard) from the \
         pod template (see toleration-wildcard), then delete these pods so they are rescheduled on schedulable \
         nodes.",
    );
}

/// `pdb-disruptions-blocked`: the PDB's status (what the eviction API reads) allows no eviction
/// now while it has pods to protect: it expects some, or has healthy ones it expects none of (a
/// budget with neither field, pods without a controller under a maxUnavailable); or the status is
/// stale, which refuses every eviction. Every drain of their nodes waits (and `kubectl drain`
/// hangs) until that changes. A PDB the disruption controller has not written yet (no status, or
/// the zero status the apiserver creates it with) is not judged.
fn pdb_disruptions_blocked(view: &dyn View, pdb: &PdbInfo, out: &mut Emitter) {
    if pdb.written_status().is_none() {
        return;
    }
    let covered = pdb.selector.as_ref().map(|s| view.workloads_selected_by(&pdb.id.namespace, s)).unwrap_or_default();
    let covering = if covered.is_empty() {
        String::new()
    } else {
        format!(" (covering {})", names(covered.iter().map(|w| format!("{} {}", w.id.kind, w.id.name))))
    };
    let related = covered.iter().map(|w| w.id.clone()).collect::<Vec<_>>();
    let Some(now) = budget_now(view, pdb) else { return };
    if let Source::Stale { observed, generation } = now.source {
        out.emit(
            &PDB_DISRUPTIONS_BLOCKED,
            "status.observedGeneration",
            format!(
                "{}{covering} has a stale status (observedGeneration {observed} < generation {generation}): the \
                 eviction API refuses every eviction of its pods until the disruption controller has computed the \
                 current spec, so a drain of their nodes waits.",
                pdb.id
            ),
            "check that kube-controller-manager runs with its disruption controller (its log, its leader \
             Lease); the status catches up within seconds when it does.",
        )
        .related(related);
        return;
    }
    let Some(status) = pdb.current_status() else { return };
    // Blocked is what a drain meets: the eviction API refuses some pod it selects. All its pods
    // not Ready under AlwaysAllow, say, go without asking: nothing to report then.
    if status.disruptions_allowed > 0 || !now.pods.iter().any(|p| refuses(&now.status, pdb.always_allow_unhealthy, p)) {
        return;
    }
    if status.expected_pods < 1 {
        let Some(why) = now.expects_none.filter(|_| status.current_healthy >= 1) else { return };
        out.emit(
            &PDB_DISRUPTIONS_BLOCKED,
            "status.disruptionsAllowed",
            format!(
                "{}{covering} allows 0 disruptions now and expects no pods although {} of its pods are healthy: \
                 {why}. Every eviction of them is refused, so a drain of their nodes (kubectl drain, node upgrades, \
                 autoscaler consolidation) hangs until that changes.",
                pdb.id, status.current_healthy
            ),
            "set maxUnavailable: 1 over pods of a Deployment or StatefulSet, or an integer minAvailable (it counts \
             the pods themselves) where the pods have no controller.",
        )
        .related(related);
        return;
    }
    let budget = pdb.budget().describe();
    // Unhealthy pods are the reason whenever some expected pod is not healthy, also when exactly
    // the needed number still is (minAvailable 1 over 2, one not Ready: 1 healthy, 1 needed, 0
    // allowed); too few replicas when even every pod healthy would leave no disruption.
    let too_few = status.expected_pods <= status.desired_healthy;
    let (reason, fix) = if status.current_healthy < status.expected_pods {
        let unhealthy: Vec<Arc<PodInfo>> = match &pdb.selector {
            Some(sel) => view
                .pods_in(&pdb.id.namespace)
                .into_iter()
                .filter(|p| !p.phase.terminal() && !p.healthy() && selector::matches(sel, &p.labels))
                .collect(),
            None => Vec::new(),
        };
        // Pods the scheduler cannot place are not Ready for its reason, said by pods-pending:
        // named apart, with that reason, rather than "make them Ready".
        let unplaced = |p: &&Arc<PodInfo>| {
            p.phase == PodPhase::Pending && p.node.is_none() && !p.terminating && p.unschedulable.is_some()
        };
        let (pending, not_ready): (Vec<&Arc<PodInfo>>, Vec<&Arc<PodInfo>>) = unhealthy.iter().partition(unplaced);
        let mut parts = Vec::new();
        if !not_ready.is_empty() {
            parts.push(format!("not Ready: {}", names(not_ready.iter().map(|p| &*p.name))));
        }
        if let Some(first) = pending.first() {
            parts.push(format!(
                "Pending, the scheduler cannot place {}: {} (see pods-pending)",
                names(pending.iter().map(|p| &*p.name)),
                first.unschedulable.as_deref().unwrap_or_default().trim_end_matches('.')
            ));
        }
        let named = if parts.is_empty() { String::new() } else { format!(" ({})", parts.join("; ")) };
        let policy = if pdb.always_allow_unhealthy {
            ""
        } else {
            " With unhealthyPodEvictionPolicy IfHealthyBudget (the default) even the unhealthy pods cannot be evicted."
        };
        let also = if too_few {
            " Even with every pod healthy it would allow none (too few replicas for the budget)."
        } else {
            ""
        };
        (
            format!(
                "unhealthy pods: {} of {} expected pods are healthy{named}, and {budget} needs {}.{also}{policy}",
                status.current_healthy, status.expected_pods, status.desired_healthy
            ),
            format!(
                "{}; set unhealthyPodEvictionPolicy: AlwaysAllow so a drain can evict pods that are already broken{}.",
                match (pending.is_empty(), not_ready.is_empty()) {
                    // Only Pending pods: what to do is the scheduler's reason, not "make them Ready".
                    (false, true) => {
                        "get the Pending pods placed: give the scheduler what its message above asks for (the \
                         pods-pending finding of their workload says it too)"
                    }
                    (false, false) => {
                        "get the Pending pods placed (their scheduler's message is above, see pods-pending), and make \
                         the others Ready again or replace them (kubectl describe pod, then fix or delete them)"
                    }
                    _ =>
                        "make the unhealthy pods Ready again or replace them (kubectl describe pod, then fix or delete them)",
                },
                if too_few { "; and run more replicas than the budget requires, or loosen the budget" } else { "" }
            ),
        )
    } else {
        (
            format!(
                "too few replicas: all {} healthy pods are needed, as {budget} over {} expected pods leaves no \
                 disruption even when every pod is healthy.",
                status.current_healthy, status.expected_pods
            ),
            "run more replicas than the budget requires (raise replicas or the HPA's minReplicas), or loosen the \
             budget (a lower minAvailable, or maxUnavailable: 1)."
                .to_string(),
        )
    };
    out.emit(
        &PDB_DISRUPTIONS_BLOCKED,
        "status.disruptionsAllowed",
        format!(
            "{}{covering} allows 0 disruptions now: {reason} Every eviction of its pods is refused, so a drain of \
             their nodes (kubectl drain, node upgrades, autoscaler consolidation) hangs until that changes.",
            pdb.id
        ),
        fix,
    )
    .related(related);
}

#[cfg(test)]
#[path = "tests/posture.rs"]
mod tests;

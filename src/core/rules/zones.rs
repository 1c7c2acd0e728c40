//! Replicas that one zone can take down together: `spread-zone-missing`. Needs the cluster's
//! nodes (the live view): a manifest alone does not say how many zones there are.

use super::context::{Ctx, Emitter, pod_path};
use crate::core::catalogue::Rule;
use crate::core::model::limits;
use crate::core::model::pod::{HOSTNAME, spread_constraints};
use crate::core::model::selector;
use crate::core::model::words::names;
use crate::core::model::{Subject, Workload};
use crate::core::view::{View, bounds};
use crate::declare_rule;

declare_rule!(pub SPREAD_ZONE_MISSING, "spread-zone-missing", Warn, judged: WithNodes, "several replicas on nodes in several zones, and nothing spreads them over zones (live view)");

pub static RULES: &[&Rule] = &[&SPREAD_ZONE_MISSING];

pub use crate::core::model::pod::ZONE;
/// The label it replaced; a spread on it spreads over zones too (nodes carried both for years).
const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    // The pod template decides both where the pods may go and whether they are spread: the
    // workload's own write, where the nodes are known.
    let Subject::Workload(full) = ctx.subject else { return };
    if !ctx.view.knows_nodes() || spread_over_zones(full) {
        return;
    }
    let Some(w) = ctx.view.subject_workload() else { return };
    let b = bounds(w, ctx.view);
    if b.floor <= 1 {
        return;
    }
    let Some(spec) = full.pod_spec() else { return };
    if let Some(over) = limits::over_node_limits(spec) {
        out.not_judged(&SPREAD_ZONE_MISSING, over);
        return;
    }
    // The zones of the nodes these pods may go to, from the count the colocation rules read too
    // (asked once per review, counted once per node snapshot).
    let Some(capacity) = ctx.capacity() else { return };
    let zones = &capacity.zones;
    if zones.len() < 2 {
        return;
    }
    let sel =
        w.selector.as_deref().map(selector::render).unwrap_or_else(|| selector::render_labels(&w.template_labels));
    out.emit(
        &SPREAD_ZONE_MISSING,
        pod_path("topologySpreadConstraints"),
        format!(
            "{} runs at least {} replicas and its pods can be scheduled in {} zones ({}), but nothing spreads \
             them over zones (no topologySpreadConstraint and no pod anti-affinity on {ZONE}): the scheduler may \
             put every replica in one zone, and that zone's outage takes them all.",
            b.describe(w),
            b.floor,
            zones.len(),
            names(zones)
        ),
        format!(
            "add a topologySpreadConstraint {{maxSkew: 1, topologyKey: {ZONE}, whenUnsatisfiable: ScheduleAnyway, \
             labelSelector: {sel}}} to the pod template{}.",
            // Said only where there is one to stand beside.
            if spread_constraints(full).iter().any(|c| c.topology_key == HOSTNAME) {
                ", beside the one on kubernetes.io/hostname"
            } else {
                ""
            }
        ),
    )
    .related(b.hpas.iter().map(|h| h.id.clone()).collect());
}

fn is_zone_key(key: &str) -> bool {
    key == ZONE || key == ZONE_BETA
}

/// A topology spread on the zone key (whatever its selector: the spread-selector rules judge
/// that), or a pod anti-affinity on it against the workload's own pods (required or preferred).
pub(super) fn spread_over_zones(w: &Workload) -> bool {
    if spread_constraints(w).iter().any(|c| is_zone_key(&c.topology_key)) {
        return true;
    }
    let Some(anti) = w.pod_spec().and_then(|s| s.affinity.as_ref()).and_then(|a| a.pod_anti_affinity.as_ref()) else {
        return false;
    };
    let required = anti.required_during_scheduling_ignored_during_execution.iter().flatten();
    let preferred =
        anti.preferred_during_scheduling_ignored_during_execution.iter().flatten().map(|p| &p.pod_affinity_term);
    required.chain(preferred).any(|t| {
        is_zone_key(&t.topology_key)
            // A manifest without spec.selector (a kustomize base) cannot tell its own pods apart.
            && (w.selector.is_none()
                || t.label_selector.as_ref().is_some_and(|s| selector::matches(s, w.template_labels())))
    })
}

#[cfg(test)]
#[path = "tests/zones.rs"]
mod tests;

//! HorizontalPodAutoscalers the apiserver or the cluster cannot honour: `hpa-replica-bounds`,
//! `hpa-target-missing`.

use super::context::{Ctx, Emitter};
use crate::core::catalogue::Rule;
use crate::core::model::Subject;
use crate::core::view::{HpaInfo, View};
use crate::declare_rule;

declare_rule!(pub HPA_REPLICA_BOUNDS, "hpa-replica-bounds", Deny, "an HPA's minReplicas is above maxReplicas, or below 1");
declare_rule!(pub HPA_TARGET_MISSING, "hpa-target-missing", Warn, "an HPA's scaleTargetRef names no workload (complete view)");

pub static RULES: &[&Rule] = &[&HPA_REPLICA_BOUNDS, &HPA_TARGET_MISSING];

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    let Subject::Hpa(_) = ctx.subject else { return };
    let id = ctx.subject.id();
    let Some(hpa) = ctx.view.hpa(&id.namespace, &id.name) else { return };
    bounds(&hpa, out);
    if ctx.view.is_complete()
        && let Some(target) = &hpa.target
        && ctx.view.workload(target.kind, &target.namespace, &target.name).is_none()
    {
        out.emit(
            &HPA_TARGET_MISSING,
            "spec.scaleTargetRef",
            format!(
                "{} scales {} but there is no such {} in namespace {}: the autoscaler does nothing \
                         (a typo, or a workload that was renamed).",
                hpa.id, hpa.target_description, target.kind, target.namespace
            ),
            "make spec.scaleTargetRef name the workload it should scale (kind, apiVersion and name), or \
                     delete the HPA."
                .to_string(),
        )
        .related(vec![target.clone()]);
    }
}

fn bounds(hpa: &HpaInfo, out: &mut Emitter) {
    let (min, max) = (hpa.min_replicas, hpa.max_replicas);
    if min < 1 {
        out.emit(
            &HPA_REPLICA_BOUNDS,
            "spec.minReplicas",
            format!(
                "{} has minReplicas {min}, below 1: the apiserver refuses it (scale-to-zero needs the \
                 HPAScaleToZero feature gate and an object or external metric), and a floor of 0 leaves no pod.",
                hpa.id
            ),
            "set minReplicas to at least 1 (2 or more for a highly available workload).".to_string(),
        );
    }
    if min > max {
        out.emit(
            &HPA_REPLICA_BOUNDS,
            "spec.minReplicas",
            format!(
                "{} has minReplicas {min} above maxReplicas {max}: the apiserver refuses it, and the bounds \
                 give the autoscaler no valid replica count.",
                hpa.id
            ),
            format!("set maxReplicas to at least {min}, or minReplicas to at most {max}."),
        );
    }
}

#[cfg(test)]
#[path = "tests/hpa.rs"]
mod tests;

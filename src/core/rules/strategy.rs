//! `strategy: Recreate` on workloads with failover: `csi-controller-recreate`,
//! `recreate-multi-replica`.

use super::context::{Ctx, Emitter, scaled_workload};
use crate::core::catalogue::Rule;
use crate::declare_rule;

declare_rule!(pub CSI_CONTROLLER_RECREATE, "csi-controller-recreate", Deny, "a multi-replica CSI controller uses strategy Recreate");
declare_rule!(pub RECREATE_MULTI_REPLICA, "recreate-multi-replica", Warn, "a multi-replica Deployment uses strategy Recreate");

pub static RULES: &[&Rule] = &[&CSI_CONTROLLER_RECREATE, &RECREATE_MULTI_REPLICA];

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    let Some(scaled) = scaled_workload(ctx) else { return };
    let w = &scaled.workload;
    let Some(containers) = &w.recreate_containers else { return };
    let ceiling = scaled.bounds.ceiling;
    if ceiling <= 1 {
        return;
    }
    let subject = ctx.id();
    let scale = scaled.bounds.describe(w);
    let path = if scaled.anchored_elsewhere { scaled.ceiling_path } else { "spec.strategy.type" };
    let csi = containers.iter().find(|c| ctx.config.csi_controller_images.iter().any(|i| i == *c));
    let (rule, what, fix) = match csi {
        Some(sidecar) => (
            &CSI_CONTROLLER_RECREATE,
            format!(
                "{scale} is a CSI controller ({sidecar}) with strategy Recreate and up to {ceiling} replicas: \
                 every upgrade stops all replicas before starting new ones, so the standby that leader election \
                 keeps for failover is gone exactly when the controller restarts, and volume operations stall."
            ),
            "use strategy RollingUpdate (for example maxSurge 0, maxUnavailable 1: leader election keeps one \
             active controller), or run a single replica.",
        ),
        None => (
            &RECREATE_MULTI_REPLICA,
            format!(
                "{scale} uses strategy Recreate with up to {ceiling} replicas: every rollout takes all replicas \
                 down before the new ones start, giving up the failover the extra replicas were added for."
            ),
            "use strategy RollingUpdate (maxUnavailable 1 keeps the others serving); keep Recreate only for \
             single-replica workloads that must never run two versions at once.",
        ),
    };
    out.emit(rule, path, what, fix).related(scaled.related(subject)).anchored_at(scaled.anchor());
}

#[cfg(test)]
#[path = "tests/strategy.rs"]
mod tests;

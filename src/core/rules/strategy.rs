//! `strategy: Recreate` on workloads with failover: `csi-controller-recreate`,
//! `recreate-multi-replica`.

use super::context::{Ctx, Emitter, scaled_workload};
use crate::core::catalogue::{CelRule, Rule, WORKLOADS};
use crate::declare_rule;

declare_rule!(pub CSI_CONTROLLER_RECREATE, "csi-controller-recreate", Deny, "a multi-replica CSI controller uses strategy Recreate");
declare_rule!(pub RECREATE_MULTI_REPLICA, "recreate-multi-replica", Warn, "a multi-replica Deployment uses strategy Recreate");

pub static RULES: &[&Rule] = &[&CSI_CONTROLLER_RECREATE, &RECREATE_MULTI_REPLICA];

/// The first of a Recreate Deployment's container names and image names
/// ([`recreate_containers`](crate::core::model::pod::recreate_containers)) that the configuration
/// lists as a CSI controller's (`variables.csiImages`, which the generator writes), in CEL: a
/// list of zero or one.
macro_rules! cel_csi_sidecar {
    () => {
        "(o.spec.template.spec.containers + o.spec.template.spec.?initContainers.orValue([])).map(c, [c.name] + \
         (has(c.image) ? [[c.image.split('@')[0].split('/')].map(p, p[size(p) - 1])[0].split(':')[0]] : []))\
         .flatten().filter(n, n in variables.csiImages)"
    };
}
/// Whether the object is a Deployment with strategy Recreate and more than one replica
/// (`spec.replicas`: an autoscaler's maxReplicas is in the view, not in the object).
macro_rules! cel_recreate_multi {
    () => {
        "request.kind.kind == 'Deployment' && o.spec.?strategy.?type.orValue('') == 'Recreate' && \
         o.spec.?replicas.orValue(1) > 1"
    };
}
/// The scale as [`Bounds::describe`](crate::core::view::Bounds) says it without an autoscaler.
macro_rules! cel_scale {
    () => {
        "'Deployment ' + o.metadata.?name.orValue('') + ' (replicas ' + string(o.spec.?replicas.orValue(1)) + ')'"
    };
}

/// `csi-controller-recreate` in CEL: the ceiling from `spec.replicas` only.
pub static CSI_CONTROLLER_RECREATE_CEL: CelRule = CelRule {
    rule: &CSI_CONTROLLER_RECREATE,
    resources: WORKLOADS,
    findings: concat!(
        cel_recreate_multi!(),
        " && size(",
        cel_csi_sidecar!(),
        ") > 0 ? [{'path': 'spec.strategy.type', 'action': 'deny', 'what': ",
        cel_scale!(),
        " + ' is a CSI controller (' + ",
        cel_csi_sidecar!(),
        "[0] + ') with strategy Recreate and up to ' + string(o.spec.?replicas.orValue(1)) + ' replicas: every \
         upgrade stops all replicas before starting new ones, so the standby that leader election keeps for failover \
         is gone exactly when the controller restarts, and volume operations stall.', 'fix': 'use strategy \
         RollingUpdate (for example maxSurge 0, maxUnavailable 1: leader election keeps one active controller), or \
         run a single replica.'}] : []"
    ),
    partial: Some(
        "a Deployment's own spec.replicas; where an HPA or ScaledObject raises the ceiling, and on the autoscaler's \
         and scale writes, the webhook's",
    ),
};

/// `recreate-multi-replica` in CEL: the ceiling from `spec.replicas` only.
pub static RECREATE_MULTI_REPLICA_CEL: CelRule = CelRule {
    rule: &RECREATE_MULTI_REPLICA,
    resources: WORKLOADS,
    findings: concat!(
        cel_recreate_multi!(),
        " && size(",
        cel_csi_sidecar!(),
        ") == 0 ? [{'path': 'spec.strategy.type', 'action': 'warn', 'what': ",
        cel_scale!(),
        " + ' uses strategy Recreate with up to ' + string(o.spec.?replicas.orValue(1)) + ' replicas: every rollout \
         takes all replicas down before the new ones start, giving up the failover the extra replicas were added \
         for.', 'fix': 'use strategy RollingUpdate (maxUnavailable 1 keeps the others serving); keep Recreate only \
         for single-replica workloads that must never run two versions at once.'}] : []"
    ),
    partial: Some(
        "a Deployment's own spec.replicas; where an HPA or ScaledObject raises the ceiling, and on the autoscaler's \
         and scale writes, the webhook's",
    ),
};

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
    out.emit(rule, path, what, fix)
        .related(scaled.related(subject))
        .anchored_at(scaled.anchor())
        .needing_view(scaled.from_view());
}

#[cfg(test)]
#[path = "tests/strategy.rs"]
mod tests;

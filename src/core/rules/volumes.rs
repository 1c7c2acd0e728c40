//! ReadWriteOnce volumes on workloads that run more than one pod: `rwo-volume-multi-replica`,
//! `rwo-volume-rolling-surge`.

use std::sync::Arc;

use super::context::{Ctx, Emitter, pod_path, scaled_workload};
use crate::core::catalogue::Rule;
use crate::core::model::arith::{self, Amount};
use crate::core::model::{Kind, Strategy, Subject, Workload};
use crate::core::view::{PvcInfo, View};
use crate::declare_rule;

declare_rule!(pub RWO_VOLUME_MULTI_REPLICA, "rwo-volume-multi-replica", Deny, "several replicas mount a ReadWriteOnce / ReadWriteOncePod claim");
declare_rule!(pub RWO_VOLUME_ROLLING_SURGE, "rwo-volume-rolling-surge", Warn, "a single-replica Deployment with a ReadWriteOnce claim surges a second pod on rollout");

pub static RULES: &[&Rule] = &[&RWO_VOLUME_MULTI_REPLICA, &RWO_VOLUME_ROLLING_SURGE];

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    let Some(scaled) = scaled_workload(ctx) else { return };
    let w = &scaled.workload;
    let ns = &w.id.namespace;
    // (index in volumes, claim) for every claim the view knows to be single-attach, once each
    // (a pod may mount one claim through two volumes).
    let mut rwo: Vec<(usize, Arc<PvcInfo>)> = Vec::new();
    for (i, name) in w.claim_names.iter().enumerate() {
        if rwo.iter().any(|(_, p)| p.id.name == *name) {
            continue;
        }
        if let Some(p) = ctx.view.pvc(ns, name).filter(|p| p.single_attach()) {
            rwo.push((i, p));
        }
    }
    if rwo.is_empty() {
        return;
    }
    let subject = ctx.id();
    let ceiling = scaled.bounds.ceiling;
    let scale = scaled.bounds.describe(w);
    if ceiling > 1 {
        for (i, pvc) in &rwo {
            let path = if let Subject::Workload(full) = ctx.subject {
                volume_path(full, &pvc.id.name).unwrap_or_else(|| pod_path(&format!("volumes[{i}]")))
            } else {
                scaled.ceiling_path.to_string()
            };
            let mut related = scaled.related(subject);
            related.push(pvc.id.clone());
            out.emit(
                &RWO_VOLUME_MULTI_REPLICA,
                path,
                format!(
                    "{scale} can run {ceiling} pods that all mount PersistentVolumeClaim {} (access modes {}): \
                     the volume attaches to one node only, so the extra pods hang in ContainerCreating with a \
                     Multi-Attach error while the install reports success.",
                    pvc.id.name,
                    pvc.access_modes.join(", ")
                ),
                "run one replica (and an HPA maxReplicas of 1), use a StatefulSet with volumeClaimTemplates so \
                 each replica gets its own claim, or use a ReadWriteMany volume."
                    .to_string(),
            )
            .related(related)
            .anchored_at(scaled.anchor());
        }
        return;
    }
    // A single replica: the rollout's surge pod is the second one. Scaled to 0 there is no old pod
    // to collide with (the Deployment controller surges nothing above 0 replicas).
    if ceiling < 1 {
        return;
    }
    let Subject::Workload(full) = ctx.subject else { return };
    if full.kind != Kind::Deployment {
        return;
    }
    let Strategy::RollingUpdate { max_surge, .. } = &full.strategy else { return };
    let surge = match arith::amount(max_surge) {
        Ok(Amount::Int(n)) => n,
        Ok(Amount::Percent(p)) => arith::percent_up(p, full.replicas),
        Err(_) => return,
    };
    if surge <= 0 {
        return;
    }
    let (_, pvc) = &rwo[0];
    out.emit(
        &RWO_VOLUME_ROLLING_SURGE,
        "spec.strategy.rollingUpdate.maxSurge",
        format!(
            "{scale} mounts ReadWriteOnce PersistentVolumeClaim {} and rolls out with maxSurge {} (resolves to \
             {surge}): the surge pod starts before the old one stops and, on another node, hangs on a \
             Multi-Attach error, so the rollout stalls.",
            pvc.id.name,
            match max_surge {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
            }
        ),
        "set strategy.rollingUpdate to maxSurge: 0 and maxUnavailable: 1, or use strategy Recreate.".to_string(),
    )
    .related(rwo.iter().map(|(_, p)| p.id.clone()).collect());
}

fn volume_path(w: &Workload, claim: &str) -> Option<String> {
    let volumes = w.pod_spec()?.volumes.as_ref()?;
    let i = volumes.iter().position(|v| v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == claim))?;
    Some(pod_path(&format!("volumes[{i}].persistentVolumeClaim.claimName")))
}

#[cfg(test)]
#[path = "tests/volumes.rs"]
mod tests;

//! `strategy: Recreate` on workloads with failover: `csi-controller-recreate`,
//! `recreate-multi-replica`.

use super::scaled_workload;
use crate::catalogue::{Action, Rule};
use crate::engine::{Ctx, Emitter};
use crate::model::{Kind, Strategy, Workload};

pub static RULES: &[Rule] = &[
    Rule {
        id: "csi-controller-recreate",
        default: Action::Deny,
        default_text: "deny",
        summary: "a multi-replica CSI controller uses strategy Recreate",
        doc: include_str!("../../docs/rules/csi-controller-recreate.md"),
    },
    Rule {
        id: "recreate-multi-replica",
        default: Action::Warn,
        default_text: "warn",
        summary: "a multi-replica Deployment uses strategy Recreate",
        doc: include_str!("../../docs/rules/recreate-multi-replica.md"),
    },
];

/// `registry.k8s.io/sig-storage/csi-provisioner:v5.0.1@sha256:…` → `csi-provisioner`.
pub fn image_name(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split(':').next().unwrap_or(last)
}

/// For a Recreate Deployment, the names and image names of its containers (what the CSI
/// controller detection reads); `None` otherwise.
pub fn recreate_containers(w: &Workload) -> Option<Vec<String>> {
    if w.kind != Kind::Deployment || w.strategy != Strategy::Recreate {
        return None;
    }
    let spec = w.pod_spec()?;
    let mut names = Vec::new();
    for c in spec.containers.iter().chain(spec.init_containers.iter().flatten()) {
        names.push(c.name.clone());
        if let Some(image) = &c.image {
            names.push(image_name(image).to_string());
        }
    }
    Some(names)
}

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    let Some(scaled) = scaled_workload(ctx) else { return };
    let w = &scaled.workload;
    let Some(containers) = &w.recreate_containers else { return };
    let ceiling = scaled.bounds.ceiling;
    if ceiling <= 1 {
        return;
    }
    let subject = ctx.subject.id();
    let scale = scaled.bounds.describe(w);
    let path = if scaled.anchored_elsewhere { scaled.ceiling_path } else { "spec.strategy.type" };
    let csi = containers.iter().find(|c| ctx.config.csi_controller_images.iter().any(|i| i == *c));
    match csi {
        Some(sidecar) => out.emit(
            "csi-controller-recreate",
            Action::Deny,
            path,
            format!(
                "{scale} is a CSI controller ({sidecar}) with strategy Recreate and up to {ceiling} replicas: \
                 every upgrade stops all replicas before starting new ones, so the standby that leader election \
                 keeps for failover is gone exactly when the controller restarts, and volume operations stall."
            ),
            "use strategy RollingUpdate (for example maxSurge 0, maxUnavailable 1: leader election keeps one \
             active controller), or run a single replica."
                .to_string(),
            scaled.related(&subject),
            scaled.anchor(),
        ),
        None => out.emit(
            "recreate-multi-replica",
            Action::Warn,
            path,
            format!(
                "{scale} uses strategy Recreate with up to {ceiling} replicas: every rollout takes all replicas \
                 down before the new ones start, giving up the failover the extra replicas were added for."
            ),
            "use strategy RollingUpdate (maxUnavailable 1 keeps the others serving); keep Recreate only for \
             single-replica workloads that must never run two versions at once."
                .to_string(),
            scaled.related(&subject),
            scaled.anchor(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::image_name;

    #[test]
    fn image_names() {
        assert_eq!(image_name("registry.k8s.io/sig-storage/csi-provisioner:v5.0.1"), "csi-provisioner");
        assert_eq!(image_name("csi-attacher"), "csi-attacher");
        assert_eq!(image_name("localhost:5000/csi-resizer@sha256:abc"), "csi-resizer");
        assert_eq!(image_name("gcr.io/x/csi-snapshotter:v1@sha256:abc"), "csi-snapshotter");
    }
}

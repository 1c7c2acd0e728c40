//! Pods that drains cannot move: `toleration-wildcard`.

use super::context::{Ctx, Emitter, pod_path};
use crate::core::catalogue::Rule;
use crate::core::model::Subject;
use crate::core::model::pod::{CORDON_TAINT, tolerates_cordon};
use crate::declare_rule;

declare_rule!(pub TOLERATION_WILDCARD, "toleration-wildcard", Warn, "pods tolerate every taint, or the cordon's: a drained pod lands back on its node");

pub static RULES: &[&Rule] = &[&TOLERATION_WILDCARD];

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    let Subject::Workload(w) = ctx.subject else { return };
    let Some(tolerations) = w.pod_spec().and_then(|s| s.tolerations.as_deref()) else { return };
    let id = w.id();
    for (i, t) in tolerations.iter().enumerate() {
        let Some((field, what)) = tolerates_cordon(t) else { continue };
        out.emit(
            &TOLERATION_WILDCARD,
            pod_path(&format!("tolerations[{i}].{field}")),
            format!(
                "{id}: tolerations[{i}] {what}: a pod evicted by a drain can be scheduled straight back onto the node being drained (or removed by the cluster \
                 autoscaler or Karpenter), so the drain never empties the node and node rollouts hang."
            ),
            format!(
                "tolerate only the specific taints these pods need (key and effect, e.g. \
                 node-role.kubernetes.io/control-plane:NoSchedule), never {CORDON_TAINT}; pods meant to run on \
                 every node belong in a DaemonSet."
            ),
        );
    }
}

#[cfg(test)]
#[path = "tests/tolerations.rs"]
mod tests;

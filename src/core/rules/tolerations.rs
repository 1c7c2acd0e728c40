//! Pods that drains cannot move: `toleration-wildcard`.

use k8s_openapi::api::core::v1::Toleration;

use super::context::{Ctx, Emitter, pod_path};
use crate::core::catalogue::Rule;
use crate::core::model::Subject;
use crate::declare_rule;

declare_rule!(pub TOLERATION_WILDCARD, "toleration-wildcard", Warn, "pods tolerate every taint, or the cordon's: a drained pod lands back on its node");

pub static RULES: &[&Rule] = &[&TOLERATION_WILDCARD];

/// The taint `kubectl cordon` (and `drain`) puts on a node: `node.kubernetes.io/unschedulable:NoSchedule`.
pub const CORDON_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Why a toleration lets pods onto a cordoned node, and the field that makes it so, or `None`.
fn tolerates_cordon(t: &Toleration) -> Option<(&'static str, String)> {
    let exists = t.operator.as_deref() == Some("Exists");
    let effect = t.effect.as_deref().unwrap_or("");
    // An empty effect matches every effect; the cordon taint's is NoSchedule.
    if !(effect.is_empty() || effect == "NoSchedule") {
        return None;
    }
    match t.key.as_deref().unwrap_or("") {
        "" if exists => Some((
            "operator",
            format!(
                "{} the cordon's {CORDON_TAINT}:NoSchedule included",
                if effect.is_empty() {
                    "(operator: Exists, no key, no effect) tolerates every taint,"
                } else {
                    "(operator: Exists, no key, effect: NoSchedule) tolerates every NoSchedule taint,"
                }
            ),
        )),
        // The cordon taint has no value: `Equal` (the default operator) matches it only with none.
        CORDON_TAINT if exists || t.value.as_deref().unwrap_or("").is_empty() => {
            Some(("key", format!("(key: {CORDON_TAINT}) tolerates the cordon taint {CORDON_TAINT}:NoSchedule itself")))
        }
        _ => None,
    }
}

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

//! Pods that drains cannot move: `toleration-wildcard`.

use super::context::{Ctx, Emitter, pod_path};
use crate::core::catalogue::{CelRule, Rule, WORKLOADS};
use crate::core::model::Subject;
use crate::core::model::pod::{CORDON_TAINT, tolerates_cordon};
use crate::declare_rule;

declare_rule!(pub TOLERATION_WILDCARD, "toleration-wildcard", Warn, "pods tolerate every taint, or the cordon's: a drained pod lands back on its node");

pub static RULES: &[&Rule] = &[&TOLERATION_WILDCARD];

/// `toleration-wildcard` in CEL: the whole rule ([`tolerates_cordon`] of each toleration).
pub static TOLERATION_WILDCARD_CEL: CelRule = CelRule {
    rule: &TOLERATION_WILDCARD,
    resources: WORKLOADS,
    findings: "o.spec.template.spec.?tolerations.orValue([]).transformList(i, t, (t.?effect.orValue('') == '' || \
               t.?effect.orValue('') == 'NoSchedule') && ((t.?key.orValue('') == '' && t.?operator.orValue('') == \
               'Exists') || (t.?key.orValue('') == 'node.kubernetes.io/unschedulable' && (t.?operator.orValue('') == \
               'Exists' || t.?value.orValue('') == ''))), {'path': 'spec.template.spec.tolerations[' + string(i) + \
               '].' + (t.?key.orValue('') == '' ? 'operator' : 'key'), 'action': 'warn', 'what': variables.id + \
               ': tolerations[' + string(i) + '] ' + (t.?key.orValue('') == '' ? (t.?effect.orValue('') == '' ? \
               '(operator: Exists, no key, no effect) tolerates every taint,' : '(operator: Exists, no key, effect: \
               NoSchedule) tolerates every NoSchedule taint,') + \" the cordon's node.kubernetes.io/unschedulable:NoSchedule \
               included\" : '(key: node.kubernetes.io/unschedulable) tolerates the cordon taint \
               node.kubernetes.io/unschedulable:NoSchedule itself') + ': a pod evicted by a drain can be scheduled \
               straight back onto the node being drained (or removed by the cluster autoscaler or Karpenter), so the \
               drain never empties the node and node rollouts hang.', 'fix': 'tolerate only the specific taints these \
               pods need (key and effect, e.g. node-role.kubernetes.io/control-plane:NoSchedule), never \
               node.kubernetes.io/unschedulable; pods meant to run on every node belong in a DaemonSet.'})",
    partial: None,
};

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

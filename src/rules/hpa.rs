//! HorizontalPodAutoscalers the apiserver or the cluster cannot honour: `hpa-replica-bounds`,
//! `hpa-target-missing`.

use crate::catalogue::{Action, Rule};
use crate::engine::{Ctx, Emitter};
use crate::model::Subject;
use crate::view::{HpaInfo, View};

pub static RULES: &[Rule] = &[
    Rule {
        id: "hpa-replica-bounds",
        default: Action::Deny,
        default_text: "deny",
        summary: "an HPA's minReplicas is above maxReplicas, or below 1",
        doc: include_str!("../../docs/rules/hpa-replica-bounds.md"),
    },
    Rule {
        id: "hpa-target-missing",
        default: Action::Warn,
        default_text: "warn",
        summary: "an HPA's scaleTargetRef names no workload (complete view)",
        doc: include_str!("../../docs/rules/hpa-target-missing.md"),
    },
];

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
            "hpa-target-missing",
            Action::Warn,
            "spec.scaleTargetRef",
            format!(
                "{} scales {} but there is no such {} in namespace {}: the autoscaler does nothing \
                         (a typo, or a workload that was renamed).",
                hpa.id, hpa.target_description, target.kind, target.namespace
            ),
            "make spec.scaleTargetRef name the workload it should scale (kind, apiVersion and name), or \
                     delete the HPA."
                .to_string(),
            vec![target.clone()],
            None,
        );
    }
}

fn bounds(hpa: &HpaInfo, out: &mut Emitter) {
    let (min, max) = (hpa.min_replicas, hpa.max_replicas);
    if min < 1 {
        out.emit(
            "hpa-replica-bounds",
            Action::Deny,
            "spec.minReplicas",
            format!(
                "{} has minReplicas {min}, below 1: the apiserver refuses it (scale-to-zero needs the \
                 HPAScaleToZero feature gate and an object or external metric), and a floor of 0 leaves no pod.",
                hpa.id
            ),
            "set minReplicas to at least 1 (2 or more for a highly available workload).".to_string(),
            vec![],
            None,
        );
    }
    if min > max {
        out.emit(
            "hpa-replica-bounds",
            Action::Deny,
            "spec.minReplicas",
            format!(
                "{} has minReplicas {min} above maxReplicas {max}: the apiserver refuses it, and the bounds \
                 give the autoscaler no valid replica count.",
                hpa.id
            ),
            format!("set maxReplicas to at least {min}, or minReplicas to at most {max}."),
            vec![],
            None,
        );
    }
}

//! HorizontalPodAutoscalers the apiserver or the cluster cannot honour, or that fight the
//! manifest: `hpa-replica-bounds`, `hpa-target-missing`, `hpa-replicas-conflict` (the last for
//! KEDA ScaledObjects too: they own the count as an HPA does).

use std::sync::Arc;

use super::context::{Ctx, Emitter, scaled_workload};
use crate::core::catalogue::{CelRule, HPAS, Rule};
use crate::core::model::words::{NAMED, list};
use crate::core::model::{Kind, ReplicasSource, Subject};
use crate::core::view::{HpaInfo, View, WorkloadInfo};
use crate::declare_rule;

declare_rule!(pub HPA_REPLICA_BOUNDS, "hpa-replica-bounds", Deny, "an HPA's minReplicas is above maxReplicas, or below 1");
declare_rule!(pub HPA_TARGET_MISSING, "hpa-target-missing", Warn, judged: WholeSet, "an HPA's scaleTargetRef names no workload (complete view)");
declare_rule!(pub HPA_REPLICAS_CONFLICT, "hpa-replicas-conflict", Warn, "a workload sets spec.replicas while an HPA or ScaledObject scales it: every apply resets the count");

pub static RULES: &[&Rule] = &[&HPA_REPLICA_BOUNDS, &HPA_TARGET_MISSING, &HPA_REPLICAS_CONFLICT];

/// `hpa-replica-bounds` in CEL: the whole rule (the HPA's own bounds; minReplicas defaults to 1,
/// as the view reads it). The apiserver's own validation refuses most such HPAs before any policy
/// runs; what reaches the policy is a minReplicas of 0 that the HPAScaleToZero gate lets through.
pub static HPA_REPLICA_BOUNDS_CEL: CelRule = CelRule {
    rule: &HPA_REPLICA_BOUNDS,
    resources: HPAS,
    findings: "(o.spec.?minReplicas.orValue(1) < 1 ? [{'path': 'spec.minReplicas', 'action': 'deny', 'what': \
               variables.id + ' has minReplicas ' + string(o.spec.?minReplicas.orValue(1)) + ', below 1: a floor of 0 \
               leaves no pod whenever the metric is idle. (The apiserver refuses it unless the HPAScaleToZero \
               feature gate, on by default from Kubernetes 1.37, and an object or external metric allow it.)', \
               'fix': 'set minReplicas to at least 1 (2 or more for a highly available workload).'}] : []) + \
               (o.spec.?minReplicas.orValue(1) > o.spec.?maxReplicas.orValue(0) ? [{'path': 'spec.minReplicas', \
               'action': 'deny', 'what': variables.id + ' has minReplicas ' + string(o.spec.?minReplicas.orValue(1)) \
               + ' above maxReplicas ' + string(o.spec.?maxReplicas.orValue(0)) + ': the apiserver refuses it, and \
               the bounds give the autoscaler no valid replica count.', 'fix': 'set maxReplicas to at least ' + \
               string(o.spec.?minReplicas.orValue(1)) + ', or minReplicas to at most ' + \
               string(o.spec.?maxReplicas.orValue(0)) + '.'}] : [])",
    partial: None,
};

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    replicas_conflict(ctx, out);
    let Subject::Hpa(_) = ctx.subject else { return };
    let id = ctx.id();
    let Some(hpa) = ctx.view.hpa(&id.namespace, &id.name) else { return };
    bounds(&hpa, out);
    // The target, when the view holds it, is the scaled workload (found once for every family).
    if ctx.absence_is_fact()
        && let Some(target) = &hpa.target
        && scaled_workload(ctx).is_none()
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

/// How messages name the autoscalers of a workload: "HPA web (min 2, max 10)", "ScaledObject web
/// (min 0, max 100)".
fn describe_hpas(hpas: &[Arc<HpaInfo>]) -> String {
    list(
        hpas.iter().map(|h| format!("{} (min {}, max {})", h.short_name(), h.min_replicas, h.max_replicas)),
        NAMED,
        " and ",
    )
}

/// What owns the count: "HPA" while only HPAs scale the workload, else "autoscaler" (a KEDA
/// ScaledObject, and on a live cluster the HPA KEDA makes for it).
fn owner(hpas: &[Arc<HpaInfo>]) -> &'static str {
    if hpas.iter().all(|h| h.id.kind == Kind::HorizontalPodAutoscaler) { "HPA" } else { "autoscaler" }
}

/// What every apply that sets the count is, in the messages.
const EVERY_APPLY: &str = "every apply of this manifest (kubectl apply, a Helm upgrade, an Argo CD or Flux sync)";

/// The fix, for the way the count is applied: a server-side apply's manager owns the field and
/// deletes it with the apply that drops it, as client-side apply's last-applied manifest does.
fn conflict_fix(owner: &str, source: &ReplicasSource) -> String {
    let remove = format!(
        "remove spec.replicas from the workload's manifest (and from the chart's values) and let the {owner} own \
         the count."
    );
    match source.applier() {
        Some(manager) => format!(
            "{remove} Field manager {manager} owns spec.replicas by server-side apply, so the apply that drops it \
             from the manifest also deletes it and the workload falls to 1 replica: hand the field over first \
             (kubectl apply --server-side --field-manager=handover-to-hpa of a manifest with only spec.replicas, \
             at the current count), then drop it."
        ),
        None => format!(
            "{remove} With client-side kubectl apply, first drop it from the last-applied configuration (kubectl \
             apply edit-last-applied), or the apply that removes the field resets the workload to 1 replica."
        ),
    }
}

/// `hpa-replicas-conflict`: on the workload's write (its manifest, or at admission this write,
/// sets the count) and on the autoscaler's (the workload in the view has a manifest that sets it).
/// Scale writes (the HPA controller's own, and KEDA's) are not judged.
fn replicas_conflict(ctx: &Ctx, out: &mut Emitter) {
    match ctx.subject {
        Subject::Workload(w) => {
            if !w.replicas_source.is_set() {
                return;
            }
            let id = w.id();
            let hpas = ctx.view.hpas_targeting(&id);
            if hpas.is_empty() {
                return;
            }
            let by = format!("{} {}", describe_hpas(&hpas), if hpas.len() == 1 { "scales" } else { "scale" });
            let owner = owner(&hpas);
            let what = match &w.replicas_source {
                ReplicasSource::Changed { from, applier } => format!(
                    "this write{} sets spec.replicas of {id} to {} (it was {from}) while {by} it: applying a \
                     manifest that sets replicas resets the count the {owner} chose, scaling the workload down in \
                     the middle of a peak (or up past what the load needs) until the {owner} corrects it.",
                    applier
                        .as_deref()
                        .map(|m| format!(", a server-side apply by field manager {m},"))
                        .unwrap_or_default(),
                    w.replicas
                ),
                source => {
                    let n = manifest_count(source, w.replicas);
                    format!(
                        "{id} sets spec.replicas: {n}{} while {by} it: {EVERY_APPLY} resets the count the {owner} \
                         chose to {n}, scaling a workload the {owner} had grown back down in the middle of a peak.",
                        applied_by(source)
                    )
                }
            };
            out.emit(&HPA_REPLICAS_CONFLICT, "spec.replicas", what, conflict_fix(owner, &w.replicas_source))
                .related(hpas.iter().map(|h| h.id.clone()).collect());
        }
        Subject::Hpa(_) | Subject::ScaledObject(_) => {
            let id = ctx.id();
            // The autoscaler's target (see `scaled_workload`).
            let Some(workload) = scaled_workload(ctx).map(|s| &s.workload) else { return };
            let Some(hpa) = ctx.view.autoscaler(id.kind, &id.namespace, &id.name) else { return };
            if !workload.replicas_source.is_set() {
                return;
            }
            out.emit(
                &HPA_REPLICAS_CONFLICT,
                "spec.scaleTargetRef",
                conflict_from_the_hpa(&hpa, workload),
                conflict_fix(
                    if id.kind == Kind::ScaledObject { "ScaledObject" } else { "HPA" },
                    &workload.replicas_source,
                ),
            )
            .related(vec![workload.id.clone()])
            .anchored_at(Some(workload.id.clone()));
        }
        _ => {}
    }
}

fn manifest_count(source: &ReplicasSource, replicas: i32) -> i32 {
    match source {
        ReplicasSource::Manifest(n) => *n,
        ReplicasSource::Applied { replicas, .. } => *replicas,
        _ => replicas,
    }
}

/// " by server-side apply (field manager M)" when one owns the count, else nothing.
fn applied_by(source: &ReplicasSource) -> String {
    source.applier().map(|m| format!(" by server-side apply (field manager {m})")).unwrap_or_default()
}

fn conflict_from_the_hpa(hpa: &HpaInfo, w: &WorkloadInfo) -> String {
    let n = manifest_count(&w.replicas_source, w.replicas);
    let this = if hpa.id.kind == Kind::ScaledObject { "ScaledObject" } else { "HPA" };
    format!(
        "{} (min {}, max {}) scales {}, whose manifest sets spec.replicas: {n}{}: {} resets the count this {this} \
         chose to {n}, scaling a workload the {this} had grown back down in the middle of a peak.",
        hpa.id,
        hpa.min_replicas,
        hpa.max_replicas,
        w.id,
        applied_by(&w.replicas_source),
        EVERY_APPLY.replace("this manifest", "that manifest")
    )
}

fn bounds(hpa: &HpaInfo, out: &mut Emitter) {
    let (min, max) = (hpa.min_replicas, hpa.max_replicas);
    if min < 1 {
        out.emit(
            &HPA_REPLICA_BOUNDS,
            "spec.minReplicas",
            format!(
                "{} has minReplicas {min}, below 1: a floor of 0 leaves no pod whenever the metric is idle. \
                 (The apiserver refuses it unless the HPAScaleToZero feature gate, on by default from \
                 Kubernetes 1.37, and an object or external metric allow it.)",
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

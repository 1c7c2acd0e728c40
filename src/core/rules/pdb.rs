//! PodDisruptionBudgets that block maintenance or protect nothing: `pdb-blocks-eviction`,
//! `pdb-overlap`, `pdb-selector-empty`, `pdb-selects-nothing`, `pdb-missing`,
//! `pdb-unhealthy-eviction-policy`. Found from the PDB's side and from its workloads' (and their
//! HPAs' and scale writes') side.

use std::sync::Arc;

use super::context::{Ctx, Emitter, scaled_workload};
use crate::core::catalogue::{CelRule, PDBS, Rule};
use crate::core::model::arith::{self, Amount, Budget, Disruption};
use crate::core::model::selector::{self, render};
use crate::core::model::words::names;
use crate::core::model::{ObjectRef, Subject};
use crate::core::view::budget::selected_pods;
use crate::core::view::{Bounds, PdbInfo, View, WorkloadInfo, bounds};
use crate::declare_rule;

declare_rule!(pub PDB_BLOCKS_EVICTION, "pdb-blocks-eviction", Deny, "a PDB allows zero disruptions when its workloads run at their floor");
declare_rule!(pub PDB_OVERLAP, "pdb-overlap", Deny, "a workload's pods are covered by more than one PDB");
declare_rule!(pub PDB_SELECTOR_EMPTY, "pdb-selector-empty", Warn, "a PDB selector is {}: it covers every pod in the namespace");
declare_rule!(pub PDB_SELECTS_NOTHING, "pdb-selects-nothing", Warn, judged: PartlyWholeSet, "a PDB has no selector, or covers no workload (complete view)");
declare_rule!(pub PDB_MISSING, "pdb-missing", Warn, judged: WholeSet, "a multi-replica workload has no PDB (complete view)");
declare_rule!(pub PDB_UNHEALTHY_EVICTION_POLICY, "pdb-unhealthy-eviction-policy", Warn, "a PDB sets unhealthyPodEvictionPolicy: IfHealthyBudget");

pub static RULES: &[&Rule] = &[
    &PDB_BLOCKS_EVICTION,
    &PDB_OVERLAP,
    &PDB_SELECTOR_EMPTY,
    &PDB_SELECTS_NOTHING,
    &PDB_MISSING,
    &PDB_UNHEALTHY_EVICTION_POLICY,
];

/// `pdb-selector-empty` in CEL: the whole rule.
pub static PDB_SELECTOR_EMPTY_CEL: CelRule = CelRule {
    rule: &PDB_SELECTOR_EMPTY,
    resources: PDBS,
    findings: concat!(
        "has(o.spec.selector) && ",
        crate::cel_selector_empty!("o.spec.selector"),
        " ? [{'path': 'spec.selector', 'action': 'warn', 'what': variables.id + ' has an empty selector {}: in \
         policy/v1 it covers every pod in namespace ' + request.namespace + ', so one budget is shared by unrelated \
         workloads and overlaps any other PDB there.', 'fix': 'set spec.selector to the selector of the one workload \
         it should protect.'}] : []"
    ),
    partial: None,
};

/// `pdb-selects-nothing` in CEL: the null selector only (that it covers no workload is an
/// absence, judged by the webhook and the audit).
pub static PDB_SELECTS_NOTHING_CEL: CelRule = CelRule {
    rule: &PDB_SELECTS_NOTHING,
    resources: PDBS,
    findings: "!has(o.spec.selector) ? [{'path': 'spec.selector', 'action': 'warn', 'what': variables.id + ' has no \
               selector: in policy/v1 a null selector matches no pod, so the budget protects nothing.', 'fix': 'set \
               spec.selector to the selector of the workload it should protect.'}] : []",
    partial: Some(
        "a null selector; that the selector covers no workload (an absence) is the webhook's and the audit's",
    ),
};

/// `pdb-unhealthy-eviction-policy` in CEL: the whole rule.
pub static PDB_UNHEALTHY_EVICTION_POLICY_CEL: CelRule = CelRule {
    rule: &PDB_UNHEALTHY_EVICTION_POLICY,
    resources: PDBS,
    findings: "o.spec.?unhealthyPodEvictionPolicy.orValue('') == 'IfHealthyBudget' ? [{'path': \
               'spec.unhealthyPodEvictionPolicy', 'action': 'warn', 'what': variables.id + ' sets \
               unhealthyPodEvictionPolicy: IfHealthyBudget: once the budget is unmet it refuses to evict running pods \
               that are not ready (crash-looping, failing readiness), so a drain hangs on a workload that is already \
               down.', 'fix': 'set unhealthyPodEvictionPolicy: AlwaysAllow (broken pods may always be evicted).'}] : []",
    partial: None,
};

/// `pdb-blocks-eviction` in CEL: a budget that allows no disruption by itself
/// ([`blocks_by_itself`], with [`self_blocking_message`]'s text).
pub static PDB_BLOCKS_EVICTION_CEL: CelRule = CelRule {
    rule: &PDB_BLOCKS_EVICTION,
    resources: PDBS,
    findings: "!has(o.spec.selector) ? [] : has(o.spec.maxUnavailable) ? ([o.spec.maxUnavailable].exists(v, type(v) \
               == int ? v <= 0 : (v.matches('^[0-9]+%$') && int(v.substring(0, size(v) - 1)) <= 0)) ? [{'path': \
               'spec.maxUnavailable', 'action': 'deny', 'what': variables.id + ' (maxUnavailable ' + \
               string(o.spec.maxUnavailable) + ') allows 0 disruptions whatever it covers: no pod may be unavailable, \
               so every voluntary eviction is refused: kubectl drain hangs, node upgrades stall and autoscaler \
               consolidation is blocked, while a node that dies is not prevented.', 'fix': 'use maxUnavailable: 1 (it \
               always leaves one pod to evict), or a minAvailable below the replicas it covers (minAvailable 1 over at \
               least 2 replicas).'}] : []) : has(o.spec.minAvailable) ? ([o.spec.minAvailable].exists(v, type(v) == \
               string && v.matches('^[0-9]+%$') && int(v.substring(0, size(v) - 1)) >= 100) ? [{'path': \
               'spec.minAvailable', 'action': 'deny', 'what': variables.id + ' (minAvailable ' + \
               string(o.spec.minAvailable) + ') allows 0 disruptions whatever it covers: every pod must stay healthy, \
               so every voluntary eviction is refused: kubectl drain hangs, node upgrades stall and autoscaler \
               consolidation is blocked, while a node that dies is not prevented.', 'fix': 'use maxUnavailable: 1 (it \
               always leaves one pod to evict), or a minAvailable below the replicas it covers (minAvailable 1 over at \
               least 2 replicas).'}] : []) : [{'path': 'spec.minAvailable', 'action': 'deny', 'what': variables.id + ' \
               sets neither minAvailable nor maxUnavailable: for such a budget the disruption controller expects no pods \
               and allows 0 disruptions however many of the pods it covers are healthy, so every voluntary eviction is \
               refused: kubectl drain hangs, node upgrades stall and autoscaler consolidation is blocked, while a node \
               that dies is not prevented.', 'fix': 'set maxUnavailable: 1 (it always leaves one pod to evict), or \
               minAvailable below the replicas.'}]",
    partial: Some(
        "a budget that allows no disruption by itself (maxUnavailable 0 or 0%, minAvailable 100%, neither set); one \
         too tight for the replicas of the workloads it covers (minAvailable 1 over one replica) needs them, and is \
         the webhook's and the audit's",
    ),
};

/// What every blocking budget leads to.
const CONSEQUENCE: &str = "so every voluntary eviction is refused: kubectl drain hangs, node upgrades stall and \
                           autoscaler consolidation is blocked, while a node that dies is not prevented.";

/// Whether `budget` allows no disruption whatever it covers (at least one pod): maxUnavailable 0
/// or 0 %, a minAvailable of 100 %, or neither field (the controller then expects no pods). What
/// the PDB alone says, so its CEL form ([`PDB_BLOCKS_EVICTION_CEL`]) gives it too.
fn blocks_by_itself(budget: &Budget) -> bool {
    match budget {
        Budget::MaxUnavailable(v) => matches!(arith::amount(v), Ok(Amount::Int(n) | Amount::Percent(n)) if n <= 0),
        Budget::MinAvailable(v) => matches!(arith::amount(v), Ok(Amount::Percent(p)) if p >= 100),
        Budget::Unset => true,
    }
}

/// The finding of a budget that blocks by itself: the PDB's own fields and nothing of the view,
/// the same with or without the workloads it covers (the text of [`PDB_BLOCKS_EVICTION_CEL`]).
fn self_blocking_message(pdb: &PdbInfo) -> (String, String) {
    let fix = "use maxUnavailable: 1 (it always leaves one pod to evict), or a minAvailable below the replicas it \
               covers (minAvailable 1 over at least 2 replicas).";
    match pdb.budget() {
        Budget::Unset => (
            format!(
                "{} sets neither minAvailable nor maxUnavailable: for such a budget the disruption controller expects \
                 no pods and allows 0 disruptions however many of the pods it covers are healthy, {CONSEQUENCE}",
                pdb.id
            ),
            "set maxUnavailable: 1 (it always leaves one pod to evict), or minAvailable below the replicas."
                .to_string(),
        ),
        budget @ Budget::MaxUnavailable(_) => (
            format!(
                "{} ({}) allows 0 disruptions whatever it covers: no pod may be unavailable, {CONSEQUENCE}",
                pdb.id,
                budget.describe()
            ),
            fix.to_string(),
        ),
        budget @ Budget::MinAvailable(_) => (
            format!(
                "{} ({}) allows 0 disruptions whatever it covers: every pod must stay healthy, {CONSEQUENCE}",
                pdb.id,
                budget.describe()
            ),
            fix.to_string(),
        ),
    }
}

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    match ctx.subject {
        Subject::Pdb(p) => {
            if let Some(pdb) = ctx.view.pdb(&ctx.id().namespace, &ctx.id().name) {
                let policy = p.spec.as_ref().and_then(|s| s.unhealthy_pod_eviction_policy.as_deref());
                pdb_side(ctx, &pdb, policy, out);
            }
        }
        _ => workload_side(ctx, out),
    }
}

/// The covered workloads with their bounds, and the arithmetic at their floors.
struct Coverage {
    workloads: Vec<(Arc<WorkloadInfo>, Bounds)>,
    disruption: Disruption,
}

fn coverage(view: &dyn View, pdb: &PdbInfo) -> Option<Coverage> {
    let sel = pdb.selector.as_ref()?;
    let workloads: Vec<_> = view
        .workloads_selected_by(&pdb.id.namespace, sel)
        .into_iter()
        .map(|w| {
            let b = bounds(&w, view);
            (w, b)
        })
        .collect();
    let expected = workloads.iter().map(|(_, b)| b.floor).sum();
    let disruption = arith::disruption(&pdb.budget(), expected).ok()?;
    Some(Coverage { workloads, disruption })
}

fn blocks_message(pdb: &PdbInfo, cov: &Coverage) -> (String, String) {
    let budget = pdb.budget();
    let d = cov.disruption;
    let covered = names(
        cov.workloads.iter().filter(|(_, b)| b.floor > 0).map(|(w, b)| format!("{} floor {}", b.describe(w), b.floor)),
    );
    let plural = |n: i32| if n == 1 { "" } else { "s" };
    let consequence = CONSEQUENCE;
    if budget == Budget::Unset {
        let what = format!(
            "{} sets neither minAvailable nor maxUnavailable and covers {}: for such a budget the disruption \
             controller expects no pods and allows 0 disruptions however many of the {} pod{} are healthy, {consequence}",
            pdb.id,
            covered,
            d.pods,
            plural(d.pods),
        );
        let fix = "set maxUnavailable: 1 (it always leaves one pod to evict), or minAvailable below the replicas.";
        return (what, fix.to_string());
    }
    let what = format!(
        "{} ({}) covers {}: at their floor of {} pod{} it requires {} healthy and allows {} disruption{}, {consequence}",
        pdb.id,
        budget.describe(),
        covered,
        d.pods,
        plural(d.pods),
        d.desired_healthy,
        d.allowed,
        plural(d.allowed),
    );
    let fix = if d.pods <= 1 {
        "use maxUnavailable: 1 in the PDB (it always leaves one pod to evict), or run at least 2 replicas \
         (HPA minReplicas 2) with minAvailable 1."
            .to_string()
    } else {
        format!(
            "lower the budget so at least one of the {} pods may be evicted (maxUnavailable: 1, or minAvailable \
             at most {}).",
            d.pods,
            d.pods - 1
        )
    };
    (what, fix)
}

fn related_of(cov: &Coverage, pdb: &PdbInfo, subject: &ObjectRef) -> Vec<ObjectRef> {
    std::iter::once(pdb.id.clone())
        .chain(
            cov.workloads
                .iter()
                .flat_map(|(w, b)| std::iter::once(w.id.clone()).chain(b.hpas.iter().map(|h| h.id.clone()))),
        )
        .filter(|r| r != subject)
        .collect()
}

fn pdb_side(ctx: &Ctx, pdb: &PdbInfo, policy: Option<&str>, out: &mut Emitter) {
    let subject = pdb.id.clone();
    if policy == Some("IfHealthyBudget") {
        out.emit(
            &PDB_UNHEALTHY_EVICTION_POLICY,
            "spec.unhealthyPodEvictionPolicy",
            format!(
                "{} sets unhealthyPodEvictionPolicy: IfHealthyBudget: once the budget is unmet it refuses to \
                 evict running pods that are not ready (crash-looping, failing readiness), so a drain hangs \
                 on a workload that is already down.",
                pdb.id
            ),
            "set unhealthyPodEvictionPolicy: AlwaysAllow (broken pods may always be evicted).".to_string(),
        );
    }
    let Some(sel) = &pdb.selector else {
        out.emit(
            &PDB_SELECTS_NOTHING,
            "spec.selector",
            format!(
                "{} has no selector: in policy/v1 a null selector matches no pod, so the budget protects nothing.",
                pdb.id
            ),
            "set spec.selector to the selector of the workload it should protect.".to_string(),
        );
        return;
    };
    if selector::is_empty(sel) {
        out.emit(
            &PDB_SELECTOR_EMPTY,
            "spec.selector",
            format!(
                "{} has an empty selector {{}}: in policy/v1 it covers every pod in namespace {}, so one \
                 budget is shared by unrelated workloads and overlaps any other PDB there.",
                pdb.id, pdb.id.namespace
            ),
            "set spec.selector to the selector of the one workload it should protect.".to_string(),
        );
    }
    let covered = coverage(ctx.view, pdb);
    let by_itself = blocks_by_itself(&pdb.budget());
    if by_itself {
        // Found on the PDB alone: the same finding whatever the view holds (its related objects
        // aside), so that the admission policy gives it word for word.
        let (what, fix) = self_blocking_message(pdb);
        let related = covered.as_ref().map(|cov| related_of(cov, pdb, &subject)).unwrap_or_default();
        out.emit(&PDB_BLOCKS_EVICTION, pdb.budget().path(), what, fix).related(related);
    }
    let Some(cov) = covered else { return };
    if cov.workloads.is_empty() {
        // Pods of no workload (bare pods, a Job's) are protected all the same, or blocked: an
        // integer minAvailable counts them, a maxUnavailable or a percentage expects none of them and
        // refuses every eviction (pdb-disruptions-blocked says so in the audit, whose view has pods).
        if ctx.absence_is_fact() && selected_pods(ctx.view, pdb).is_empty() {
            out.emit(
                &PDB_SELECTS_NOTHING,
                "spec.selector",
                format!(
                    "{} selects {} but no Deployment or StatefulSet in namespace {} has pods with those labels: \
                     the budget protects nothing (a typo, or a workload that was renamed).",
                    pdb.id,
                    render(sel),
                    pdb.id.namespace
                ),
                "make spec.selector match the pod template labels of the workload it should protect, or delete \
                 the PDB."
                    .to_string(),
            )
            .needing_view(true);
        }
        return;
    }
    if !by_itself && cov.disruption.blocks() {
        // Too tight for the floors of the workloads it covers: found with the view.
        let (what, fix) = blocks_message(pdb, &cov);
        out.emit(&PDB_BLOCKS_EVICTION, pdb.budget().path(), what, fix)
            .related(related_of(&cov, pdb, &subject))
            .needing_view(true);
    }
    for (w, _) in &cov.workloads {
        let others: Vec<_> = ctx
            .view
            .pdbs_covering(&pdb.id.namespace, &w.template_labels)
            .into_iter()
            .filter(|o| o.id != pdb.id)
            .collect();
        if !others.is_empty() {
            out.emit(
                &PDB_OVERLAP,
                "spec.selector",
                format!(
                    "{} (selector {}) covers the pods of {}, which {} also cover{}: the eviction API refuses \
                     every eviction of pods under more than one PDB, so they can never be drained.",
                    pdb.id,
                    render(sel),
                    w.id,
                    names(others.iter().map(|o| format!("PodDisruptionBudget {}", o.id.name))),
                    if others.len() == 1 { "s" } else { "" }
                ),
                "keep one PDB per workload: narrow this selector or merge the budgets.".to_string(),
            )
            .related(std::iter::once(w.id.clone()).chain(others.iter().map(|o| o.id.clone())).collect())
            .anchored_at(Some(w.id.clone()));
        }
    }
}

fn workload_side(ctx: &Ctx, out: &mut Emitter) {
    let Some(scaled) = scaled_workload(ctx) else { return };
    let w = &scaled.workload;
    let subject = ctx.id();
    let covering = ctx.view.pdbs_covering(&w.id.namespace, &w.template_labels);

    if covering.len() > 1 && matches!(ctx.subject, Subject::Workload(_)) {
        out.emit(
            &PDB_OVERLAP,
            "spec.template.metadata.labels",
            format!(
                "the pods of {} are covered by {} PodDisruptionBudgets ({}): the eviction API refuses every \
                 eviction of pods under more than one PDB, so they can never be drained.",
                w.id,
                covering.len(),
                names(covering.iter().map(|p| &p.id.name))
            ),
            "keep one PDB per workload: narrow the other PDBs' selectors or merge the budgets.".to_string(),
        )
        .related(covering.iter().map(|p| p.id.clone()).collect());
    }

    for pdb in &covering {
        let Some(cov) = coverage(ctx.view, pdb) else { continue };
        if cov.disruption.blocks() {
            let (what, fix) = blocks_message(pdb, &cov);
            out.emit(&PDB_BLOCKS_EVICTION, scaled.floor_path, what, fix)
                .related(related_of(&cov, pdb, subject))
                .anchored_at(Some(pdb.id.clone()))
                .needing_view(true);
        }
    }

    // A manifest reported as not checked (a kustomize patch without its selector) gets no
    // finding that asserts an absence: the PDB may well come with the rest of the kustomization.
    let fragment = matches!(ctx.subject, Subject::Workload(full) if !full.missing.is_empty());
    if covering.is_empty() && scaled.bounds.floor > 1 && ctx.absence_is_fact() && !fragment {
        out.emit(
            &PDB_MISSING,
            scaled.floor_path,
            format!(
                "{} runs at least {} replicas but no PodDisruptionBudget covers it: a drain or an autoscaler \
                 consolidation may evict all of them at once.",
                scaled.bounds.describe(w),
                scaled.bounds.floor
            ),
            // Never suggest an empty selector: pdb-selector-empty warns against it.
            match w
                .selector
                .as_deref()
                .filter(|s| !selector::is_empty(s))
                .map(render)
                .or_else(|| (!w.template_labels.is_empty()).then(|| selector::render_labels(&w.template_labels)))
            {
                Some(sel) => format!(
                    "add a PodDisruptionBudget with maxUnavailable: 1, unhealthyPodEvictionPolicy: AlwaysAllow and \
                     selector {sel}."
                ),
                None => "give the pod template labels and the workload a selector on them, then add a \
                         PodDisruptionBudget with maxUnavailable: 1, unhealthyPodEvictionPolicy: AlwaysAllow and that \
                         selector."
                    .to_string(),
            },
        )
        .related(scaled.related(subject))
        .anchored_at(scaled.anchor());
    }
}

#[cfg(test)]
#[path = "tests/pdb.rs"]
mod tests;

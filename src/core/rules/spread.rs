//! Topology spread constraints that count the wrong pods: `spread-selector-missing`,
//! `spread-selector-mismatch`, `spread-selector-overlap`.

use k8s_openapi::api::core::v1::TopologySpreadConstraint;

use super::context::{Ctx, Emitter, pod_path};
use crate::core::catalogue::{Action, CelRule, Rule, WORKLOADS};
use crate::core::model::Subject;
use crate::core::model::pod::{counting_selector, spread_constraints};
use crate::core::model::selector::{self, render, render_labels};
use crate::core::model::words::names;
use crate::core::view::View;
use crate::declare_rule;

declare_rule!(
    pub SPREAD_SELECTOR_MISSING,
    "spread-selector-missing",
    Deny ("deny (DoNotSchedule), warn (ScheduleAnyway)"),
    "a topologySpreadConstraint has no labelSelector, so it counts no pods"
);
declare_rule!(
    pub SPREAD_SELECTOR_MISMATCH,
    "spread-selector-mismatch",
    Deny ("deny (DoNotSchedule), warn (ScheduleAnyway)"),
    "a spread's labelSelector does not match the workload's own pods"
);
declare_rule!(pub SPREAD_SELECTOR_OVERLAP, "spread-selector-overlap", Warn, "a spread's labelSelector is {} or also matches another workload's pods");

pub static RULES: &[&Rule] = &[&SPREAD_SELECTOR_MISSING, &SPREAD_SELECTOR_MISMATCH, &SPREAD_SELECTOR_OVERLAP];

/// The pod template's spreads, in CEL.
macro_rules! cel_spreads {
    () => {
        "o.spec.template.spec.?topologySpreadConstraints.orValue([])"
    };
}
/// [`describe`] in CEL, of spread `c` at index `i`.
macro_rules! cel_describe {
    () => {
        "'topologySpreadConstraints[' + string(i) + '] (topologyKey ' + c.topologyKey + ', ' + c.whenUnsatisfiable + ')'"
    };
}
/// [`hard_or_soft`] in CEL.
macro_rules! cel_hard_or_soft {
    () => {
        "(c.whenUnsatisfiable == 'DoNotSchedule' ? 'deny' : 'warn')"
    };
}
/// The fix's suggestion (`evaluate`'s `suggestion`) in CEL.
macro_rules! cel_suggestion {
    () => {
        concat!(
            "(has(o.spec.selector) ? \"the workload's own selector (\" + ",
            crate::cel_render_selector!("o.spec.selector"),
            " + ')' : 'a selector matching the pod template labels (' + ",
            crate::cel_render_labels!("o.spec.template.?metadata.?labels.orValue({})"),
            " + ')')"
        )
    };
}

/// `spread-selector-missing` in CEL: the whole rule.
pub static SPREAD_SELECTOR_MISSING_CEL: CelRule = CelRule {
    rule: &SPREAD_SELECTOR_MISSING,
    resources: WORKLOADS,
    findings: concat!(
        cel_spreads!(),
        ".transformList(i, c, !has(c.labelSelector), {'path': 'spec.template.spec.topologySpreadConstraints[' + \
         string(i) + '].labelSelector', 'action': ",
        cel_hard_or_soft!(),
        ", 'what': ",
        cel_describe!(),
        " + ' has no labelSelector: it selects no pods, so the spread counts nothing and keeps no replicas apart.', \
         'fix': 'set labelSelector to ' + ",
        cel_suggestion!(),
        " + \", or let ha-guard's mutating webhook inject it.\"})"
    ),
    partial: None,
};

/// `spread-selector-overlap` in CEL: the empty selector `{}` only (that a selector also matches
/// another workload's pods is known from the view).
pub static SPREAD_SELECTOR_OVERLAP_CEL: CelRule = CelRule {
    rule: &SPREAD_SELECTOR_OVERLAP,
    resources: WORKLOADS,
    findings: concat!(
        cel_spreads!(),
        ".transformList(i, c, has(c.labelSelector) && ",
        crate::cel_selector_empty!("c.labelSelector"),
        ", {'path': 'spec.template.spec.topologySpreadConstraints[' + string(i) + '].labelSelector', 'action': 'warn', \
         'what': ",
        cel_describe!(),
        " + ' has an empty labelSelector {}, which counts every pod in namespace ' + request.namespace + \
         \": the skew is computed over other workloads' pods too, so this workload's replicas can still end up \
         together.\", 'fix': 'set labelSelector to ' + ",
        cel_suggestion!(),
        " + '.'})"
    ),
    partial: Some("an empty selector {}; one that also matches another workload's pods is found in the view"),
};

/// `spread-selector-mismatch` in CEL: the whole rule.
pub static SPREAD_SELECTOR_MISMATCH_CEL: CelRule = CelRule {
    rule: &SPREAD_SELECTOR_MISMATCH,
    resources: WORKLOADS,
    findings: concat!(
        cel_spreads!(),
        ".transformList(i, c, has(c.labelSelector) && !",
        crate::cel_selector_matches!("c.labelSelector", "o.spec.template.?metadata.?labels.orValue({})"),
        ", {'path': 'spec.template.spec.topologySpreadConstraints[' + string(i) + '].labelSelector', 'action': ",
        cel_hard_or_soft!(),
        ", 'what': ",
        cel_describe!(),
        " + ' has labelSelector ' + ",
        crate::cel_render_selector!("c.labelSelector"),
        " + ' which does not match this ' + request.kind.kind + \"'s pod template labels (\" + ",
        crate::cel_render_labels!("o.spec.template.?metadata.?labels.orValue({})"),
        " + '): the spread counts other pods, not its own, and does not keep its replicas apart.', \
         'fix': 'set labelSelector to ' + ",
        cel_suggestion!(),
        " + '.'})"
    ),
    partial: None,
};

/// DoNotSchedule spreads are hard: a broken one denies; ScheduleAnyway only warns.
fn hard_or_soft(c: &TopologySpreadConstraint) -> Action {
    if c.when_unsatisfiable == "DoNotSchedule" { Action::Deny } else { Action::Warn }
}

fn describe(i: usize, c: &TopologySpreadConstraint) -> String {
    format!("topologySpreadConstraints[{i}] (topologyKey {}, {})", c.topology_key, c.when_unsatisfiable)
}

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    let Subject::Workload(w) = ctx.subject else { return };
    let id = w.id();
    let own_labels = w.template_labels();
    let own_selector = w.selector.as_ref().map(render);
    let suggestion = match &own_selector {
        Some(s) => format!("the workload's own selector ({s})"),
        None => format!("a selector matching the pod template labels ({})", render_labels(own_labels)),
    };
    let mut reported = Vec::new();
    for (i, c) in spread_constraints(w).iter().enumerate() {
        let path = pod_path(&format!("topologySpreadConstraints[{i}].labelSelector"));
        let Some(sel) = &c.label_selector else {
            out.emit(
                &SPREAD_SELECTOR_MISSING,
                path,
                format!(
                    "{} has no labelSelector: it selects no pods, so the spread counts nothing and keeps no \
                     replicas apart.",
                    describe(i, c)
                ),
                format!("set labelSelector to {suggestion}, or let ha-guard's mutating webhook inject it."),
            )
            .acting(hard_or_soft(c));
            continue;
        };
        if !selector::matches(sel, own_labels) {
            out.emit(
                &SPREAD_SELECTOR_MISMATCH,
                path,
                format!(
                    "{} has labelSelector {} which does not match this {}'s pod template labels ({}): the \
                     spread counts other pods, not its own, and does not keep its replicas apart.",
                    describe(i, c),
                    render(sel),
                    id.kind,
                    render_labels(own_labels)
                ),
                format!("set labelSelector to {suggestion}."),
            )
            .acting(hard_or_soft(c));
            continue;
        }
        if selector::is_empty(sel) {
            out.emit(
                &SPREAD_SELECTOR_OVERLAP,
                path,
                format!(
                    "{} has an empty labelSelector {{}}, which counts every pod in namespace {}: the skew is \
                     computed over other workloads' pods too, so this workload's replicas can still end up together.",
                    describe(i, c),
                    id.namespace
                ),
                format!("set labelSelector to {suggestion}."),
            );
            continue;
        }
        // As the scheduler counts: matchLabelKeys merged in (a revision hash key counts this
        // workload's own pods only).
        let Some(counting) = counting_selector(c, w) else { continue };
        let others: Vec<_> =
            ctx.view.workloads_selected_by(&id.namespace, &counting).into_iter().filter(|o| o.id != id).collect();
        if !others.is_empty() {
            reported.extend(others.iter().map(|o| o.id.clone()));
            out.emit(
                &SPREAD_SELECTOR_OVERLAP,
                path,
                format!(
                    "{} has labelSelector {} which also matches the pods of {}: the skew counts their pods \
                     too, so this workload's replicas can end up on the same {}.",
                    describe(i, c),
                    render(sel),
                    names(others.iter().map(|o| &o.id)),
                    c.topology_key
                ),
                "narrow the labelSelector with a label only this workload's pods carry (for example \
                 app.kubernetes.io/instance), or give the other workloads distinct labels."
                    .to_string(),
            )
            .related(others.iter().map(|o| o.id.clone()).collect())
            .needing_view(true);
        }
    }
    // The other side: this workload's pods are counted by another workload's spread.
    for other in ctx.view.workloads_spreading_over(&id.namespace, own_labels) {
        if other.id == id || reported.contains(&other.id) {
            continue;
        }
        if let Some(sel) = other.spread_selectors.iter().find(|s| selector::matches(s, own_labels)) {
            out.emit(
                &SPREAD_SELECTOR_OVERLAP,
                "spec.template.metadata.labels",
                format!(
                    "the pod template labels ({}) are matched by the topology spread of {} (labelSelector {}): \
                     its skew counts this workload's pods, so its replicas can end up together.",
                    render_labels(own_labels),
                    other.id,
                    render(sel)
                ),
                format!("give these pods a label that {} does not select, or narrow its selector.", other.id),
            )
            .related(vec![other.id.clone()])
            .anchored_at(Some(other.id.clone()))
            .needing_view(true);
        }
    }
}

#[cfg(test)]
#[path = "tests/spread.rs"]
mod tests;

//! Topology spread constraints that count the wrong pods: `spread-selector-missing`,
//! `spread-selector-mismatch`, `spread-selector-overlap`.

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::pod_path;
use crate::catalogue::{Action, Rule};
use crate::engine::{Ctx, Emitter};
use crate::model::{Subject, Workload};
use crate::selector::{self, render, render_labels};
use crate::view::View;

pub static RULES: &[Rule] = &[
    Rule {
        id: "spread-selector-missing",
        default: Action::Deny,
        default_text: "deny (DoNotSchedule), warn (ScheduleAnyway)",
        summary: "a topologySpreadConstraint has no labelSelector, so it counts no pods",
        doc: include_str!("../../docs/rules/spread-selector-missing.md"),
    },
    Rule {
        id: "spread-selector-mismatch",
        default: Action::Deny,
        default_text: "deny (DoNotSchedule), warn (ScheduleAnyway)",
        summary: "a spread's labelSelector does not match the workload's own pods",
        doc: include_str!("../../docs/rules/spread-selector-mismatch.md"),
    },
    Rule {
        id: "spread-selector-overlap",
        default: Action::Warn,
        default_text: "warn",
        summary: "a spread's labelSelector is {} or also matches another workload's pods",
        doc: include_str!("../../docs/rules/spread-selector-overlap.md"),
    },
];

/// DoNotSchedule spreads are hard: a broken one denies; ScheduleAnyway only warns.
fn hard_or_soft(c: &TopologySpreadConstraint) -> Action {
    if c.when_unsatisfiable == "DoNotSchedule" { Action::Deny } else { Action::Warn }
}

pub(crate) fn constraints(w: &Workload) -> &[TopologySpreadConstraint] {
    w.pod_spec().and_then(|s| s.topology_spread_constraints.as_deref()).unwrap_or_default()
}

/// The non-empty selectors of a workload's spreads, kept in the view for the other side of
/// `spread-selector-overlap`.
pub fn selectors(w: &Workload) -> Vec<LabelSelector> {
    constraints(w).iter().filter_map(|c| c.label_selector.clone()).filter(|s| !selector::is_empty(s)).collect()
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
    for (i, c) in constraints(w).iter().enumerate() {
        let path = pod_path(&format!("topologySpreadConstraints[{i}].labelSelector"));
        let Some(sel) = &c.label_selector else {
            out.emit(
                "spread-selector-missing",
                hard_or_soft(c),
                path,
                format!(
                    "{} has no labelSelector: it selects no pods, so the spread counts nothing and keeps no \
                     replicas apart.",
                    describe(i, c)
                ),
                format!("set labelSelector to {suggestion}, or let ha-guard's mutating webhook inject it."),
                vec![],
                None,
            );
            continue;
        };
        if !selector::matches(sel, own_labels) {
            out.emit(
                "spread-selector-mismatch",
                hard_or_soft(c),
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
                vec![],
                None,
            );
            continue;
        }
        if selector::is_empty(sel) {
            out.emit(
                "spread-selector-overlap",
                Action::Warn,
                path,
                format!(
                    "{} has an empty labelSelector {{}}, which counts every pod in namespace {}: the skew is \
                     computed over other workloads' pods too, so this workload's replicas can still end up together.",
                    describe(i, c),
                    id.namespace
                ),
                format!("set labelSelector to {suggestion}."),
                vec![],
                None,
            );
            continue;
        }
        let others: Vec<_> =
            ctx.view.workloads_selected_by(&id.namespace, sel).into_iter().filter(|o| o.id != id).collect();
        if !others.is_empty() {
            reported.extend(others.iter().map(|o| o.id.clone()));
            let names: Vec<_> = others.iter().map(|o| o.id.to_string()).collect();
            out.emit(
                "spread-selector-overlap",
                Action::Warn,
                path,
                format!(
                    "{} has labelSelector {} which also matches the pods of {}: the skew counts their pods \
                     too, so this workload's replicas can end up on the same {}.",
                    describe(i, c),
                    render(sel),
                    names.join(", "),
                    c.topology_key
                ),
                "narrow the labelSelector with a label only this workload's pods carry (for example \
                 app.kubernetes.io/instance), or give the other workloads distinct labels."
                    .to_string(),
                others.iter().map(|o| o.id.clone()).collect(),
                None,
            );
        }
    }
    // The other side: this workload's pods are counted by another workload's spread.
    for other in ctx.view.workloads_spreading_over(&id.namespace, own_labels) {
        if other.id == id || reported.contains(&other.id) {
            continue;
        }
        if let Some(sel) = other.spread_selectors.iter().find(|s| selector::matches(s, own_labels)) {
            out.emit(
                "spread-selector-overlap",
                Action::Warn,
                "spec.template.metadata.labels",
                format!(
                    "the pod template labels ({}) are matched by the topology spread of {} (labelSelector {}): \
                     its skew counts this workload's pods, so its replicas can end up together.",
                    render_labels(own_labels),
                    other.id,
                    render(sel)
                ),
                format!("give these pods a label that {} does not select, or narrow its selector.", other.id),
                vec![other.id.clone()],
                Some(other.id.clone()),
            );
        }
    }
}

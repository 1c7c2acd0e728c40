//! The rules, one file per family. Each family declares its rules ([`declare_rule!`](crate::declare_rule)),
//! lists them in its `RULES`, and has an `evaluate` that runs them on the subject in context.
//!
//! Two entries: [`evaluate`] (admission and `check`: what a write or a manifest says) and
//! [`audit`] (`ha-guard audit`: the same, plus the live posture family, which judges where pods
//! are now). The posture and drain families are reached only from `audit` and the drain
//! simulation: admission never runs them, whatever view it has.

pub mod apiservices;
pub mod colocation;
pub mod context;
pub mod drain;
pub mod exemptions;
pub mod hpa;
pub mod pdb;
pub mod posture;
pub mod progress;
pub mod spread;
pub mod strategy;
pub mod termination;
pub mod tolerations;
pub mod volumes;
pub mod webhooks;
pub mod zones;

use crate::core::catalogue::{CelRule, Rule};
use crate::core::config::Config;
use crate::core::finding::{Finding, NotJudged};
use crate::core::model::Subject;
use crate::core::view::{Absences, Overlay, View};
use context::{Ctx, Emitter};
pub use progress::{Progress, Stage};

/// The families in catalogue order (DESIGN.md §2).
pub static FAMILIES: &[&[&Rule]] = &[
    spread::RULES,
    colocation::RULES,
    strategy::RULES,
    volumes::RULES,
    pdb::RULES,
    hpa::RULES,
    termination::RULES,
    webhooks::RULES,
    apiservices::RULES,
    tolerations::RULES,
    zones::RULES,
    exemptions::RULES,
    posture::RULES,
    drain::RULES,
];

/// The rules with a CEL form ([`CelRule`]: they read nothing but the object written), in
/// catalogue order: what `ha-guard policies` generates ValidatingAdmissionPolicies from.
pub static CEL_RULES: &[&CelRule] = &[
    &spread::SPREAD_SELECTOR_MISSING_CEL,
    &spread::SPREAD_SELECTOR_MISMATCH_CEL,
    &spread::SPREAD_SELECTOR_OVERLAP_CEL,
    &colocation::HOST_NETWORK_COLOCATION_CEL,
    &strategy::CSI_CONTROLLER_RECREATE_CEL,
    &strategy::RECREATE_MULTI_REPLICA_CEL,
    &pdb::PDB_BLOCKS_EVICTION_CEL,
    &pdb::PDB_SELECTOR_EMPTY_CEL,
    &pdb::PDB_SELECTS_NOTHING_CEL,
    &pdb::PDB_UNHEALTHY_EVICTION_POLICY_CEL,
    &termination::TERMINATION_GRACE_ZERO_CEL,
    &termination::PRESTOP_EXCEEDS_GRACE_CEL,
    &tolerations::TOLERATION_WILDCARD_CEL,
    &hpa::HPA_REPLICA_BOUNDS_CEL,
    &exemptions::EXEMPTION_UNKNOWN_RULE_CEL,
];

/// The rules a review at `stage` is judging: a family's, or none.
pub fn rules_of(stage: Stage) -> &'static [&'static Rule] {
    match stage {
        Stage::Family(i) => FAMILIES.get(i).copied().unwrap_or_default(),
        _ => &[],
    }
}

/// Every rule, in catalogue order.
pub fn all() -> impl Iterator<Item = &'static Rule> {
    FAMILIES.iter().flat_map(|family| family.iter().copied())
}

/// The result of evaluating one subject.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    /// Findings with the rule's own action (config, exemptions and modes come in `decide`).
    pub findings: Vec<Finding>,
    /// What could not be checked, and why (e.g. a manifest without `spec.selector`).
    pub unchecked: Vec<String>,
    /// Rules not judged on the subject, and why (an input over their limits).
    pub not_judged: Vec<NotJudged>,
}

/// Evaluates every admission rule on `subject`: pure, no I/O. Rules turned `off` in config are
/// dropped. The live posture rules are not among them (see [`audit`]).
pub fn evaluate(subject: &Subject, view: &dyn View, config: &Config) -> Evaluation {
    evaluate_with(subject, view, config, Absences::Judged, false, None)
}

/// [`evaluate`] in a review that may withhold absences (an admission: [`Absences::at_admission`])
/// and reports its progress (stopping when asked: what it returns is then partial).
pub fn evaluate_in(
    subject: &Subject,
    view: &dyn View,
    config: &Config,
    absences: Absences,
    progress: Option<&Progress>,
) -> Evaluation {
    evaluate_with(subject, view, config, absences, false, progress)
}

/// [`evaluate`] plus the live posture rules: the audit's entry.
pub fn audit(subject: &Subject, view: &dyn View, config: &Config) -> Evaluation {
    evaluate_with(subject, view, config, Absences::Judged, true, None)
}

fn evaluate_with(
    subject: &Subject,
    view: &dyn View,
    config: &Config,
    absences: Absences,
    posture: bool,
    progress: Option<&Progress>,
) -> Evaluation {
    let overlay = Overlay::new(view, subject);
    let ctx = Ctx::new(subject, &overlay, config).with_absences(absences);
    let mut findings = Vec::new();
    let mut out = Emitter::new(overlay.subject_id(), &mut findings);
    // The families in FAMILIES' order, each entered through the progress (a review past its
    // deadline stops at the next one).
    let families: [fn(&Ctx, &mut Emitter); 11] = [
        spread::evaluate,
        colocation::evaluate,
        strategy::evaluate,
        volumes::evaluate,
        pdb::evaluate,
        hpa::evaluate,
        termination::evaluate,
        webhooks::evaluate,
        apiservices::evaluate,
        tolerations::evaluate,
        zones::evaluate,
    ];
    let mut stopped = false;
    for (i, family) in families.iter().enumerate() {
        if !progress::may_enter(progress, Stage::Family(i)) {
            stopped = true;
            break;
        }
        family(&ctx, &mut out);
    }
    if !stopped && progress::may_enter(progress, Stage::Family(families.len())) {
        exemptions::evaluate(&ctx, &mut out, FAMILIES);
        if posture && progress::may_enter(progress, Stage::Family(families.len() + 1)) {
            posture::evaluate(&ctx, &mut out);
        }
    }
    let mut not_judged = out.take_not_judged();
    findings.retain(|f| !config.is_off(f.rule));
    not_judged.retain(|n| !config.is_off(n.rule));
    Evaluation { findings, unchecked: unchecked(subject, &overlay), not_judged }
}

/// What cannot be checked on `subject`, and why: required fields a manifest lacks (a kustomize
/// base), a scale write whose workload the view does not hold.
pub fn unchecked(subject: &Subject, view: &dyn View) -> Vec<String> {
    let mut unchecked = Vec::new();
    if let Subject::Workload(w) = subject {
        for field in &w.missing {
            unchecked.push(format!(
                "{}: {field} is missing, so the rules that read it were not checked (a kustomize base or \
                 template fragment? check the rendered manifest)",
                w.id()
            ));
        }
    }
    if let Subject::Scale { target, .. } = subject
        && view.workload(target.kind, &target.namespace, &target.name).is_none()
    {
        unchecked.push(format!("{target}: not in the view, so the scale could not be checked"));
    }
    unchecked
}

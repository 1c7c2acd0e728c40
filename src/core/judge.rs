//! The one entry every shell calls: a review in, a verdict out. The webhook asks it for the
//! findings (`/validate`) or the patch (`/mutate`) of one write, `check` for both on every object
//! of its files; the shells only translate requests and files in and verdicts out.

use crate::core::config::Config;
use crate::core::config::policy::Date;
use crate::core::decide::{self, Context, Decided, UnknownNamespace};
use crate::core::model::Subject;
use crate::core::mutations::{self, Plan};
use crate::core::rules::{self, Progress, Stage, progress::may_enter};
use crate::core::view::replay::DrainRun;
use crate::core::view::{Absences, View};

/// What a shell wants judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asks {
    /// The decided findings (the validating webhook).
    Findings,
    /// The mutation plan (the mutating webhook).
    Mutations,
    /// Both (`check`).
    Both,
}

impl Asks {
    fn findings(self) -> bool {
        self != Asks::Mutations
    }

    fn mutations(self) -> bool {
        self != Asks::Findings
    }
}

/// One object to judge.
pub struct Review<'a> {
    pub subject: &'a Subject,
    /// The object before an UPDATE, decoded only when ratcheting needs its findings.
    pub old: Option<&'a dyn Fn() -> Option<Subject>>,
    pub view: &'a dyn View,
    pub config: &'a Config,
    pub asks: Asks,
    /// Whether rules may assert absences: judged in `check` and the audit, withheld at an
    /// admission until the absence has lasted ([`Absences::at_admission`]).
    pub absences: Absences,
    /// Today (UTC), for the exceptions' expiry (the shell reads the clock).
    pub today: Option<Date>,
    /// Where the review has got, for a shell that runs it under a deadline (it stops when asked).
    pub progress: Option<&'a Progress>,
    /// What the overrides do where the namespace's labels are not known.
    pub unknown_namespace: UnknownNamespace,
}

/// What the review comes to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Why nothing was judged (an exempt namespace, a namespace in mode off), if so.
    pub skipped: Option<String>,
    /// The findings decided (config, exemptions, ratcheting, scale writes, namespace modes) and
    /// the warnings about the decision itself (an exemption without a reason).
    pub decided: Decided,
    /// The mutations, when asked for.
    pub plan: Plan,
    /// What could not be checked on the object, and why.
    pub unchecked: Vec<String>,
    /// Rules not judged on the object, and why (an input over their limits).
    pub not_judged: Vec<crate::core::finding::NotJudged>,
}

/// Judges one object: pure, no I/O.
pub fn judge(review: &Review) -> Verdict {
    judge_with(review, rules::evaluate_in)
}

/// [`judge`] for `ha-guard audit`: the live posture rules run too ([`rules::audit`]). Only the
/// audit calls it; the webhook's and `check`'s entry is [`judge`]. The audit reads the cluster
/// whole: its absences are always judged.
pub fn audit(review: &Review) -> Verdict {
    judge_with(review, |subject, view, config, _, _| rules::audit(subject, view, config))
}

/// A drain of `nodes` replayed on the view ([`rules::drain`]). Its findings are facts: the
/// configuration's actions apply, while exemptions (on the PDB or the workload), exempt namespaces
/// and namespace modes hide nothing and are said in the finding ([`decide::decide_facts`]).
pub fn drain(view: &dyn View, config: &Config, nodes: &[String], drained: &str) -> (DrainRun, Decided) {
    let mut run = rules::drain::replay(view, nodes);
    run.single_replica = rules::drain::single_replica_lost(view, &run);
    let decided = drain_decided(view, config, &run, drained);
    (run, decided)
}

/// The findings of a drain already replayed ([`rules::drain::findings_of`]), decided as facts.
pub fn drain_decided(view: &dyn View, config: &Config, run: &DrainRun, drained: &str) -> Decided {
    let mut all = Decided::default();
    for f in rules::drain::findings_of(view, run, drained) {
        if config.is_off(f.rule) {
            continue;
        }
        let namespace = f.object.namespace.clone();
        let ctx = Context { subject_exemptions: view.exemptions(&f.object), ..Default::default() };
        let eval = rules::Evaluation { findings: vec![f], ..Default::default() };
        let decided = decide::decide_facts(eval, &namespace, view, config, &ctx);
        all.findings.extend(decided.findings);
        all.warnings.extend(decided.warnings);
    }
    all.warnings.sort();
    all.warnings.dedup();
    all
}

type Evaluate = fn(&Subject, &dyn View, &Config, Absences, Option<&Progress>) -> rules::Evaluation;

fn judge_with(review: &Review, evaluate: Evaluate) -> Verdict {
    let Review { subject, view, config, asks, progress, .. } = *review;
    let namespace = subject.namespace();
    let unchecked = if asks.findings() { rules::unchecked(subject, view) } else { Vec::new() };
    if let Some(reason) = decide::skip_reason(namespace, view, config) {
        let decided = Decided { skipped: Some(reason.clone()), ..Default::default() };
        return Verdict { skipped: Some(reason), decided, unchecked, ..Default::default() };
    }
    let plan = if asks.mutations() && may_enter(progress, Stage::Mutations) {
        mutations::plan(subject, view, config)
    } else {
        Plan::default()
    };
    if !asks.findings() {
        return Verdict { plan, ..Default::default() };
    }
    let mut eval = evaluate(subject, view, config, review.absences, progress);
    eval.unchecked.clear();
    let not_judged = std::mem::take(&mut eval.not_judged);
    // `check` and the audit say them where they say what could not be checked; the webhook warns.
    let mut unchecked = unchecked;
    unchecked.extend(not_judged.iter().map(|n| format!("{}: {n}", subject.id())));
    let scale = matches!(subject, Subject::Scale { .. });
    let old = match review.old {
        Some(old) if decide::needs_old_findings(&eval, config, scale) => {
            old().map(|old| evaluate(&old, view, config, review.absences, progress).findings)
        }
        _ => None,
    };
    let subject_labels = if config.exceptions.is_empty() {
        None
    } else {
        subject.meta().and_then(|m| m.labels.as_ref()).map(|l| (subject.id(), l))
    };
    let ctx = Context {
        old: old.as_deref(),
        scale,
        subject_exemptions: subject.exemptions(),
        subject_labels,
        today: review.today,
        unknown_namespace: review.unknown_namespace,
    };
    may_enter(progress, Stage::Deciding);
    let decided = decide::decide(eval, namespace, view, config, &ctx);
    Verdict { skipped: None, decided, plan, unchecked, not_judged }
}

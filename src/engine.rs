//! The pure evaluation: (subject, view, config) → findings. No I/O, no clock, no globals.

use serde::Serialize;

use crate::catalogue::Action;
use crate::config::Config;
use crate::model::{ObjectRef, Subject};
use crate::rules;
use crate::view::{Overlay, View};

/// What a finding amounts to once decided: `allowed` is an exempted finding, still reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Deny,
    Warn,
    Allowed,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Deny => "deny",
            Decision::Warn => "warn",
            Decision::Allowed => "allowed",
        }
    }
}

/// One rule firing on one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub rule: &'static str,
    pub action: Decision,
    /// The object under review.
    pub object: ObjectRef,
    /// The field, e.g. `spec.minAvailable`.
    pub path: String,
    /// What is wrong, with the numbers, and why it matters.
    pub what: String,
    /// How to fix it.
    pub fix: String,
    pub related: Vec<ObjectRef>,
    /// For a cross-object finding, the object the finding is about (the PDB of
    /// `pdb-blocks-eviction`, the workload of `pdb-overlap`): `check` reports it once, there.
    pub anchor: ObjectRef,
    /// How the decision came about: "pre-existing", "exempted: <reason>", "namespace mode warn", ...
    pub notes: Vec<String>,
}

impl Finding {
    /// The full message: what, why, and how to fix.
    pub fn message(&self) -> String {
        format!("{} Fix: {}", self.what, self.fix)
    }
}

/// Builds findings for one subject; rules call [`Emitter::emit`].
pub struct Emitter<'a> {
    subject: ObjectRef,
    out: &'a mut Vec<Finding>,
}

impl<'a> Emitter<'a> {
    /// An emitter of findings about `subject` into `out` (what [`evaluate`] makes for the families;
    /// public so that one family can be run, and measured, alone).
    pub fn new(subject: ObjectRef, out: &'a mut Vec<Finding>) -> Self {
        Emitter { subject, out }
    }
}

impl Emitter<'_> {
    #[allow(clippy::too_many_arguments)]
    pub fn emit(
        &mut self,
        rule: &'static str,
        action: Action,
        path: impl Into<String>,
        what: impl Into<String>,
        fix: impl Into<String>,
        related: Vec<ObjectRef>,
        anchor: Option<ObjectRef>,
    ) {
        let action = match action {
            Action::Deny => Decision::Deny,
            Action::Warn | Action::Off => Decision::Warn,
        };
        self.out.push(Finding {
            rule,
            action,
            object: self.subject.clone(),
            path: path.into(),
            what: what.into(),
            fix: fix.into(),
            related,
            anchor: anchor.unwrap_or_else(|| self.subject.clone()),
            notes: Vec::new(),
        });
    }
}

/// What the rules get: the subject, the view with the subject overlaid, the configuration.
pub struct Ctx<'a> {
    pub subject: &'a Subject,
    pub view: &'a Overlay<'a>,
    pub config: &'a Config,
}

/// The result of evaluating one subject.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluation {
    /// Findings with the rule's own action (config, exemptions and modes come in `decide`).
    pub findings: Vec<Finding>,
    /// What could not be checked, and why (e.g. a manifest without `spec.selector`).
    pub unchecked: Vec<String>,
}

/// Evaluates every rule on `subject`. Rules turned `off` in config are not run.
pub fn evaluate(subject: &Subject, view: &dyn View, config: &Config) -> Evaluation {
    let overlay = Overlay::new(view, subject);
    let ctx = Ctx { subject, view: &overlay, config };
    let mut findings = Vec::new();
    let mut emitter = Emitter { subject: subject.id(), out: &mut findings };
    rules::evaluate(&ctx, &mut emitter);
    findings.retain(|f| config.rules.get(f.rule) != Some(&Action::Off));
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
        && overlay.subject_workload().is_none()
    {
        unchecked.push(format!("{target}: not in the view, so the scale could not be checked"));
    }
    Evaluation { findings, unchecked }
}

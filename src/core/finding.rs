//! What the rules produce and the decision refines: a finding, its decided action, and typed notes
//! saying how the decision came about.

use std::fmt;

use serde::Serialize;

use super::catalogue::{Action, Rule};
use super::model::{MODE_LABEL, ObjectRef};

/// A rule that was not judged on an object, and why (an input over the limits a rule reads, a
/// deadline): said as a warning, never silently dropped.
#[derive(Clone, Debug, PartialEq)]
pub struct NotJudged {
    pub rule: &'static Rule,
    pub why: String,
}

impl fmt::Display for NotJudged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] not judged: {}", self.rule.id, self.why)
    }
}

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

    /// The decision a rule's action makes before config, exemptions and modes (`off` rules are
    /// never run, so it does not occur).
    pub fn of(action: Action) -> Decision {
        match action {
            Action::Deny => Decision::Deny,
            Action::Warn | Action::Off => Decision::Warn,
        }
    }

    /// The action this decision came from (`allowed` is only ever made from a finding).
    pub fn action(self) -> Action {
        if self == Decision::Deny { Action::Deny } else { Action::Warn }
    }
}

/// Why a finding's action is not the rule's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// An exemption annotation on `by` (the object itself or one the finding names).
    Exempted { by: ObjectRef, reason: String },
    /// An exception of the configuration (`exceptions:`) allows it.
    Exception { name: String, reason: String, owner: Option<String>, expires: Option<String> },
    /// A deny on a scale subresource write, downgraded.
    ScaleWrite,
    /// A deny that also held for the old object of an UPDATE (ratcheting).
    PreExisting,
    /// A deny in a namespace labelled `ha-guard.io/mode: warn`.
    NamespaceWarn { namespace: String },
    /// A deny answered as a warning because ha-guard runs observe-only (config `mode: observe`).
    Observe,
    /// A fact (what a drain would do) reported whatever exempts the object from policy: `why`
    /// says what would have hidden a policy finding (an exemption, a namespace mode).
    Fact { why: String },
}

impl Note {
    /// The name and reason of the configuration's exception this note says allowed the finding.
    pub fn exception(&self) -> Option<(&str, &str)> {
        match self {
            Note::Exception { name, reason, .. } => Some((name, reason)),
            _ => None,
        }
    }

    /// The few words a one-line message says for a deny downgraded to a warning, if any.
    pub fn downgrade_reason(&self) -> Option<&'static str> {
        match self {
            Note::PreExisting => Some("pre-existing"),
            Note::NamespaceWarn { .. } => Some("namespace in warn mode"),
            Note::ScaleWrite => Some("scale writes only warn"),
            Note::Observe => Some("observe-only: enforce would deny"),
            Note::Exempted { .. } | Note::Exception { .. } | Note::Fact { .. } => None,
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Exempted { by, reason } => write!(f, "exempted by {by}: {reason}"),
            Note::Exception { name, reason, owner, expires } => {
                write!(f, "allowed by exception {name}: {reason}")?;
                match (owner, expires) {
                    (Some(o), Some(e)) => write!(f, " (owner {o}, until {e})"),
                    (Some(o), None) => write!(f, " (owner {o})"),
                    (None, Some(e)) => write!(f, " (until {e})"),
                    (None, None) => Ok(()),
                }
            }
            Note::ScaleWrite => f.write_str("scale writes are never denied"),
            Note::PreExisting => f.write_str("pre-existing"),
            Note::NamespaceWarn { namespace } => write!(f, "namespace {namespace} is labelled {MODE_LABEL}=warn"),
            Note::Observe => f.write_str("ha-guard runs with mode: observe; with mode: enforce this is denied"),
            Note::Fact { why } => write!(f, "reported although {why}: a drain is a fact, not a policy"),
        }
    }
}

impl Serialize for Note {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One rule firing on one object.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub rule: &'static Rule,
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
    /// How the decision came about.
    pub notes: Vec<Note>,
    /// Found with what the view holds beside the object written (another workload, an
    /// autoscaler's bounds, an absence): no admission policy gives it, since a policy reads the
    /// object alone. The rule's CEL form (`catalogue::CelRule`) gives every other finding of a
    /// rule that has one, so the webhook leaves those to the policies while they are in force.
    pub from_view: bool,
}

impl Finding {
    /// The full message: what, why, and how to fix.
    pub fn message(&self) -> String {
        let mut out = String::with_capacity(self.what.len() + self.fix.len() + 8);
        self.write_message(&mut out);
        out
    }

    /// Appends [`message`](Self::message) to `out`: for a line that holds it among other text
    /// (the webhook's warnings and denials), without a copy of it first.
    pub fn write_message(&self, out: &mut String) {
        out.push_str(&self.what);
        out.push_str(" Fix: ");
        out.push_str(&self.fix);
    }

    /// Names other objects of a cross-object finding.
    pub fn related(&mut self, related: Vec<ObjectRef>) -> &mut Self {
        self.related = related;
        self
    }

    /// The finding is about `anchor` (found from another object's side).
    pub fn anchored_at(&mut self, anchor: Option<ObjectRef>) -> &mut Self {
        if let Some(anchor) = anchor {
            self.anchor = anchor;
        }
        self
    }

    /// Marks the finding as found with the view ([`Finding::from_view`]) when `yes`.
    pub fn needing_view(&mut self, yes: bool) -> &mut Self {
        self.from_view |= yes;
        self
    }

    /// This case's action, for a rule whose action depends on the case.
    pub fn acting(&mut self, action: Action) -> &mut Self {
        self.action = Decision::of(action);
        self
    }
}

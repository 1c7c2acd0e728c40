//! What `check` reports: decided findings located in their files, the fixes, and what could not
//! be checked.

use crate::core::finding::{Decision, Finding};
use crate::core::model::ObjectRef;
use crate::core::mutations::Change;
use crate::manifest::{LoadError, Origin};

/// A decided finding and where its object came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Located {
    pub finding: Finding,
    /// The file, document and the line (and column) of the finding's field, or of its deepest
    /// ancestor present in the file.
    pub origin: Origin,
    /// The first segment of the finding's path that is not in the file (`None` when the field
    /// itself is there, or the document could not be located).
    pub missing: Option<String>,
    /// The text of the source line `origin.line`, for diagnostics.
    pub snippet: Option<String>,
}

/// The mutations one document would get.
#[derive(Clone, Debug, PartialEq)]
pub struct Fixable {
    pub object: ObjectRef,
    pub origin: Origin,
    pub changes: Vec<Change>,
    /// Where each change goes (same order as `changes`): the line of the field it adds or of its
    /// deepest existing ancestor.
    pub at: Vec<Origin>,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub findings: Vec<Located>,
    pub fixes: Vec<Fixable>,
    /// What could not be checked, with where.
    pub unchecked: Vec<(Origin, String)>,
    /// Warnings about the decision (e.g. an exemption without a reason).
    pub notices: Vec<(Origin, String)>,
    pub errors: Vec<LoadError>,
    pub objects: usize,
    pub files: usize,
    /// Every object checked, with the file it is shown in (for reports that list passes, JUnit).
    pub checked: Vec<(String, ObjectRef)>,
    /// The drains `audit --drain` replayed, each with its outcome (the JSON's `drains`).
    pub drains: Vec<crate::core::view::replay::DrainRun>,
    /// Objects not judged because their namespace is exempt or in mode `off`, with why (the
    /// audit reports them as skipped, not as clean).
    pub skipped: Vec<(ObjectRef, String)>,
    /// Objects of kinds ha-guard does not judge (a DaemonSet, a ConfigMap), by file, then kind:
    /// how many. They are no `objects`; `check` says so when they are all a run read.
    pub other_kinds: std::collections::BTreeMap<String, std::collections::BTreeMap<String, usize>>,
}

/// Which findings make `check` fail (exit 1): deny ones (the default), warn ones too, or none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    #[default]
    Deny,
    Warn,
    Never,
}

impl Report {
    pub fn count(&self, action: Decision) -> usize {
        self.findings.iter().filter(|l| l.finding.action == action).count()
    }

    /// 2: unusable input; 1: a finding that `fail_on` fails on; 0 otherwise.
    pub fn exit_code(&self, fail_on: FailOn) -> i32 {
        let failing = match fail_on {
            FailOn::Deny => self.count(Decision::Deny),
            FailOn::Warn => self.count(Decision::Deny) + self.count(Decision::Warn),
            FailOn::Never => 0,
        };
        if !self.errors.is_empty() {
            2
        } else if failing > 0 {
            1
        } else {
            0
        }
    }
}

/// Warnings about the configuration's exceptions after a run: one that has expired (it no longer
/// applies: what it allowed is judged again) and one that allowed nothing in this run (its match
/// may be wrong, or what it covered is gone).
pub fn exception_notices(
    config: &crate::core::config::Config,
    report: &Report,
    today: crate::core::config::policy::Date,
) -> Vec<String> {
    let used: std::collections::HashSet<&str> = report
        .findings
        .iter()
        .flat_map(|l| l.finding.notes.iter().filter_map(|n| n.exception()).map(|(name, _)| name))
        .collect();
    let mut out = Vec::new();
    for e in &config.exceptions {
        match e.expires {
            Some(day) if day <= today => out.push(format!(
                "exception {} expired on {day}: it no longer applies, so what it allowed ({}) is judged again; \
                 renew its expires date with a reason, or fix the objects",
                e.name,
                e.rules.join(", ")
            )),
            _ if !used.contains(e.name.as_str()) => out.push(format!(
                "exception {} allowed no finding here: its match (rules {}) covers nothing these objects break; \
                 check the match, or remove the exception",
                e.name,
                e.rules.join(", ")
            )),
            _ => {}
        }
    }
    out
}

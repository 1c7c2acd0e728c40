//! `ha-guard check`: lint manifests offline with the same engine the webhook runs.
//!
//! Every object in the given files forms the static view; every Deployment, StatefulSet, PDB and
//! HPA is then evaluated against it and decided (config, exemptions, namespace modes). A
//! cross-object finding is reported once, on the object it is about.

pub mod fix;
pub mod load;
pub mod locate;
pub mod output;

use std::collections::{BTreeMap, HashSet};

use crate::config::Config;
use crate::decide::{self, Context};
use crate::engine::{self, Decision, Finding};
use crate::model::{self, Object, ObjectRef, Subject};
use crate::mutations::{self, Change};
use crate::view::Index;
use load::{Document, LoadError, Loaded, Origin};

/// Options of `ha-guard check` (besides the paths and the format).
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub complete: bool,
    pub namespace: String,
    pub config: Config,
}

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
}

impl Report {
    pub fn count(&self, action: Decision) -> usize {
        self.findings.iter().filter(|l| l.finding.action == action).count()
    }

    /// 0: no deny finding; 1: a deny finding; 2: unusable input.
    pub fn exit_code(&self) -> i32 {
        if !self.errors.is_empty() {
            2
        } else if self.count(Decision::Deny) > 0 {
            1
        } else {
            0
        }
    }
}

/// A decoded object with its origin.
pub struct Decoded {
    pub object: Object,
    pub origin: Origin,
}

/// Decodes the documents of known kinds; other kinds are skipped quietly.
pub fn decode(documents: &[Document], namespace: &str, errors: &mut Vec<LoadError>) -> Vec<Decoded> {
    let mut out = Vec::new();
    for doc in documents {
        match model::decode(&doc.value, namespace) {
            Ok(Some(object)) => out.push(Decoded { object, origin: doc.origin.clone() }),
            Ok(None) => {}
            Err(e) => errors.push(LoadError {
                file: doc.origin.file.clone(),
                document: Some(doc.origin.document),
                message: match doc.origin.item {
                    Some(i) => format!("items[{i}]: {e}"),
                    None => e.to_string(),
                },
            }),
        }
    }
    out
}

/// Checks loaded documents.
pub fn check(loaded: &Loaded, options: &Options) -> Report {
    let mut errors = loaded.errors.clone();
    let decoded = decode(&loaded.documents, &options.namespace, &mut errors);
    let mut index = Index::new();
    index.set_complete(options.complete);
    for d in &decoded {
        index.insert_object(&d.object);
    }
    let checked: HashSet<ObjectRef> = decoded
        .iter()
        .filter_map(|d| match &d.object {
            Object::Subject(s) => Some(s.id()),
            _ => None,
        })
        .collect();
    let mut report = Report { objects: decoded.len(), files: loaded.sources.len(), ..Default::default() };
    let mut locator = locate::Locator::new(&loaded.sources);
    for d in &decoded {
        let Object::Subject(subject) = &d.object else { continue };
        let id = subject.id();
        // The object itself (a `List` item starts below its document's first line).
        let object_origin = locator.locate(&d.origin, "");
        let eval = engine::evaluate(subject, &index, &options.config);
        for u in &eval.unchecked {
            report.unchecked.push((object_origin.clone(), u.clone()));
        }
        let ctx = Context { subject_exemptions: subject.exemptions(), ..Default::default() };
        let decided = decide::decide(eval, &id.namespace, &index, &options.config, &ctx);
        for w in decided.warnings {
            report.notices.push((object_origin.clone(), w));
        }
        for f in decided.findings {
            // Reported on the object it is about when that object is checked too.
            if f.anchor != f.object && checked.contains(&f.anchor) {
                continue;
            }
            // Point at the finding's field, or its deepest ancestor present in the file.
            let (origin, missing) = match locator.resolve(&d.origin, &f.path) {
                Some((at, missing)) => (Origin { line: at.line, column: Some(at.column), ..d.origin.clone() }, missing),
                None => (d.origin.clone(), None),
            };
            let snippet = locator.source_line(&origin.file, origin.line).map(str::to_string);
            report.findings.push(Located { finding: f, origin, missing, snippet });
        }
        if decide::skip_reason(&id.namespace, &index, &options.config).is_none() {
            let plan = mutations::plan(subject, &index, &options.config);
            if !plan.is_empty() {
                // Where each change goes: the deepest existing ancestor of the field it adds.
                let at = plan.changes.iter().map(|c| locator.locate(&d.origin, &c.path())).collect();
                report.fixes.push(Fixable { object: id, origin: object_origin.clone(), changes: plan.changes, at });
            }
        }
    }
    report.errors = errors;
    report
}

/// Findings grouped per rule, for summaries.
pub fn by_rule(report: &Report) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for l in &report.findings {
        *m.entry(l.finding.rule).or_insert(0) += 1;
    }
    m
}

/// Whether a subject is in the checked set (used by `--fix` to re-plan).
pub fn is_subject(object: &Object) -> bool {
    matches!(object, Object::Subject(Subject::Workload(_) | Subject::Pdb(_)))
}

//! `ha-guard check`: lint manifests offline with the same engine the webhook runs.
//!
//! Every object in the given files forms the static view; every object of a kind the rules judge
//! (Deployment, StatefulSet, PDB, HPA, KEDA ScaledObject, Service, webhook configuration) is then
//! evaluated against it and decided (config, exemptions, namespace modes). A
//! cross-object finding is reported once, on the object it is about.

pub mod fix;
pub mod output;
pub mod report;

pub use report::{FailOn, Fixable, Located, Report};

use std::collections::{BTreeMap, HashSet};

use crate::core::config::Config;
use crate::core::judge::{Asks, Review, Verdict, judge};
use crate::core::model::{self, Object, ObjectRef};
use crate::core::view::Index;
use crate::manifest::cores::map_on_cores;
use crate::manifest::objects::{Decoded, decode_error};
use crate::manifest::{Document, LoadError, Loaded, Locator, Origin, Source};

/// Options of `ha-guard check` (besides the paths and the format).
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub complete: bool,
    pub namespace: String,
    pub config: Config,
}

/// API versions the cluster no longer serves for the kinds the engine checks: such a document is
/// not checked (a 1.25+ apiserver refuses it), and says so rather than passing silently.
fn removed_api(value: &serde_json::Value) -> Option<String> {
    let (api_version, kind) = model::type_of(value)?;
    let removed = matches!(
        (api_version, kind),
        ("policy/v1beta1", "PodDisruptionBudget")
            | ("extensions/v1beta1" | "apps/v1beta1" | "apps/v1beta2", "Deployment" | "StatefulSet")
            | ("autoscaling/v2beta1" | "autoscaling/v2beta2", "HorizontalPodAutoscaler")
            | (
                "admissionregistration.k8s.io/v1beta1",
                "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration"
            )
    );
    removed.then(|| {
        let name = value.pointer("/metadata/name").and_then(serde_json::Value::as_str).unwrap_or("?");
        format!(
            "{kind} {name}: {api_version} is no longer served by Kubernetes (removed in 1.16 to 1.26), so it \
             was not checked; move it to the current API version"
        )
    })
}

/// What `check` keeps of a document once it is read: its object, decoded, and whether its API
/// version is no longer served. Not its JSON tree: the trees of a large bundle take several times
/// its text, and [`run_with`] drops each one as soon as it is decoded.
pub struct Prepared {
    object: Result<Option<Object>, model::DecodeError>,
    removed: Option<String>,
}

impl Prepared {
    /// Decodes `value`; objects without a namespace are put in `namespace`.
    pub fn of(value: &serde_json::Value, namespace: &str) -> Prepared {
        Prepared { object: model::decode(value, namespace), removed: removed_api(value) }
    }
}

/// Checks loaded documents.
pub fn check(loaded: &Loaded, options: &Options) -> Report {
    let prepared = map_on_cores(&loaded.documents, |d| Prepared::of(&d.value, &options.namespace));
    let documents = loaded.documents.iter().zip(prepared).map(|(d, p)| Document { origin: d.origin.clone(), value: p });
    check_prepared(&loaded.sources, loaded.errors.clone(), documents, options)
}

/// Checks documents read with [`Prepared::of`] (`load_mapped`), taking their objects.
pub fn check_loaded(loaded: &mut Loaded<Prepared>, options: &Options) -> Report {
    let documents = std::mem::take(&mut loaded.documents);
    check_prepared(&loaded.sources, loaded.errors.clone(), documents, options)
}

fn check_prepared(
    sources: &[Source],
    mut errors: Vec<LoadError>,
    documents: impl IntoIterator<Item = Document<Prepared>>,
    options: &Options,
) -> Report {
    let mut decoded = Vec::new();
    let mut unchecked: Vec<(Origin, String)> = Vec::new();
    for Document { origin, value: Prepared { object, removed } } in documents {
        if let Some(message) = removed {
            unchecked.push((origin.clone(), message));
        }
        match object {
            Ok(Some(object)) => decoded.push(Decoded { object, origin }),
            Ok(None) => {}
            Err(e) => errors.push(decode_error(&origin, &e)),
        }
    }
    // Two documents describing one object: the view keeps the last, and says so.
    let mut duplicates = Vec::new();
    let mut seen: BTreeMap<(model::Kind, String, String), Origin> = BTreeMap::new();
    for d in &decoded {
        let id = match &d.object {
            Object::Subject(s) => s.id(),
            _ => continue,
        };
        if let Some(first) = seen.insert((id.kind, id.namespace.clone(), id.name.clone()), d.origin.clone()) {
            duplicates.push((
                d.origin.clone(),
                format!(
                    "{id} is also defined in {} (document {}): each is checked against the view holding this \
                     later one; check alternatives (base and patch, two variants) separately",
                    first.file, first.document
                ),
            ));
        }
    }
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
    let mut report = Report { objects: decoded.len(), files: sources.len(), ..Default::default() };
    report.unchecked.append(&mut unchecked);
    report.notices.append(&mut duplicates);
    // The rules, decisions and mutation plans of each object are pure and independent: on every
    // core. Locating findings in the source text (stateful, cached per document) stays in order.
    let judged = map_on_cores(&decoded, |d| {
        let Object::Subject(subject) = &d.object else { return None };
        Some(judge(&Review { subject, old: None, view: &index, config: &options.config, asks: Asks::Both }))
    });
    let mut locator = Locator::new(sources);
    // The documents that will be pointed into, parsed again for positions on every core first.
    locator.prefetch(decoded.iter().zip(&judged).filter_map(|(d, verdict)| {
        let v = verdict.as_ref()?;
        let reported = !v.unchecked.is_empty()
            || !v.decided.warnings.is_empty()
            || !v.decided.findings.is_empty()
            || !v.plan.is_empty();
        reported.then_some(&d.origin)
    }));
    for (d, verdict) in decoded.iter().zip(judged) {
        let (Object::Subject(subject), Some(Verdict { decided, plan, unchecked, .. })) = (&d.object, verdict) else {
            continue;
        };
        let id = subject.id();
        report.checked.push((d.origin.shown_file().to_string(), id.clone()));
        // The object itself (a `List` item starts below its document's first line), located only
        // when something is reported on it: locating parses the document's text a second time,
        // which costs about as much as loading it did.
        let mut located = None;
        let mut object_origin =
            |locator: &mut Locator| located.get_or_insert_with(|| locator.locate(&d.origin, "")).clone();
        for u in unchecked {
            report.unchecked.push((object_origin(&mut locator), u));
        }
        for w in decided.warnings {
            report.notices.push((object_origin(&mut locator), w));
        }
        for f in decided.findings {
            // Reported on the object it is about when that object is checked too.
            if f.anchor != f.object && checked.contains(&f.anchor) {
                continue;
            }
            // Point at the finding's field, or its deepest ancestor present in the file.
            let (origin, missing) = match locator.resolve(&d.origin, &f.path) {
                Some((at, missing)) => {
                    (Origin { line: at.line as usize, column: Some(at.column as usize), ..d.origin.clone() }, missing)
                }
                None => (d.origin.clone(), None),
            };
            let snippet = locator.source_line(&origin.file, origin.line).map(str::to_string);
            report.findings.push(Located { finding: f, origin, missing, snippet });
        }
        if !plan.is_empty() {
            // Where each change goes: the deepest existing ancestor of the field it adds.
            let at = plan.changes.iter().map(|c| locator.locate(&d.origin, &c.path())).collect();
            report.fixes.push(Fixable { object: id, origin: object_origin(&mut locator), changes: plan.changes, at });
        }
    }
    report.errors = errors;
    report
}

/// What a run of `check` did: the files read (their documents' objects are dropped once
/// checked), the report on them, and the files `--fix` rewrote (the report is on the files as
/// they are after it).
pub struct Run {
    pub loaded: Loaded<Prepared>,
    pub report: Report,
    pub fixed: Vec<String>,
}

/// Loads and checks `paths`; with `fix`, writes the mutations back and checks what was written.
pub fn run(paths: &[String], options: &Options, fix: bool) -> Result<Run, fix::FixError> {
    run_with(paths, &crate::manifest::LoadOptions::default(), options, fix)
}

/// [`run`], reading the paths with `load`.
pub fn run_with(
    paths: &[String],
    load: &crate::manifest::LoadOptions,
    options: &Options,
    fix: bool,
) -> Result<Run, fix::FixError> {
    let prepare = |value: serde_json::Value| Prepared::of(&value, &options.namespace);
    let mut loaded = crate::manifest::load_mapped(paths, load, &prepare);
    let report = check_loaded(&mut loaded, options);
    if !fix || report.fixes.is_empty() {
        return Ok(Run { loaded, report, fixed: Vec::new() });
    }
    let fixed = fix::apply(&loaded.sources, &report.fixes)?;
    let mut loaded = crate::manifest::load_mapped(paths, load, &prepare);
    let report = check_loaded(&mut loaded, options);
    Ok(Run { loaded, report, fixed })
}

#[cfg(test)]
mod notes_tests {
    use super::*;

    fn run(yaml: &str) -> Report {
        let mut loaded = Loaded::default();
        crate::manifest::add_text(&mut loaded, "t.yaml".into(), None, yaml.into(), false);
        check(&loaded, &Options { namespace: "default".into(), ..Default::default() })
    }

    #[test]
    fn a_removed_api_version_is_reported_as_not_checked() {
        let r = run(
            "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: old}\nspec: {minAvailable: 1}\n",
        );
        assert_eq!(r.objects, 0);
        assert_eq!(r.unchecked.len(), 1, "{:?}", r.unchecked);
        let (origin, message) = &r.unchecked[0];
        assert_eq!((origin.file.as_str(), origin.document), ("t.yaml", 0));
        assert!(message.contains("PodDisruptionBudget old") && message.contains("policy/v1beta1"), "{message}");
        assert_eq!(r.exit_code(FailOn::Deny), 0, "not an error: the rest is still checked");
        let r = run(
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: new}\nspec: {minAvailable: 1, selector: {matchLabels: {a: b}}}\n",
        );
        assert!(r.unchecked.is_empty());
    }

    #[test]
    fn two_documents_for_one_object_are_noticed() {
        let d = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n";
        let r = run(&format!("{d}---\n{d}"));
        assert_eq!(r.notices.len(), 1, "{:?}", r.notices);
        let (origin, message) = &r.notices[0];
        assert_eq!(origin.document, 1);
        assert!(message.contains("Deployment default/web is also defined in t.yaml (document 0)"), "{message}");
        let other = d.replace("name: web}", "name: api}");
        assert!(run(&format!("{d}---\n{other}")).notices.is_empty());
    }
}

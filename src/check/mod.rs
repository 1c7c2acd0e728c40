//! `ha-guard check`: lint manifests offline with the same engine the webhook runs.
//!
//! Every object in the given files forms the static view; every object of a kind the rules judge
//! (Deployment, StatefulSet, PDB, HPA, KEDA ScaledObject, Service, webhook configuration) is then
//! evaluated against it and decided (config, exemptions, namespace modes). A
//! cross-object finding is reported once, on the object it is about.

pub mod fix;
pub mod output;
pub mod preview;
pub mod report;

pub use report::{FailOn, Fixable, Located, Report};

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::core::config::Config;
use crate::core::decide::UnknownNamespace;
use crate::core::judge::{Asks, Review, Verdict, judge};
use crate::core::model::{self, Object, ObjectRef, Subject};
use crate::core::view::index::Projection;
use crate::core::view::{Absences, Index, View};
use crate::manifest::cores::map_on_cores;
use crate::manifest::locate::{resolve_in, skeleton_of};
use crate::manifest::objects::decode_error;
use crate::manifest::skeleton::{Node, Position};
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
            | ("apiregistration.k8s.io/v1beta1", "APIService")
    );
    removed.then(|| {
        let name = value.pointer("/metadata/name").and_then(serde_json::Value::as_str).unwrap_or("?");
        format!(
            "{kind} {name}: {api_version} is no longer served by Kubernetes (removed in 1.16 to 1.26), so it \
             was not checked; move it to the current API version"
        )
    })
}

/// What `check` keeps of a document after reading it the first time: what the view needs of its
/// object and the object's reference when it is judged, and whether its API version is no longer
/// served. Neither its JSON tree nor the object: on a large bundle they take over ten times the
/// text, so each document is read again, one at a time, when its object is judged.
pub struct Prepared {
    object: Result<Option<(Projection, Option<ObjectRef>)>, model::DecodeError>,
    removed: Option<String>,
    /// A Helm hook (annotation `helm.sh/hook`): created apart from the release's objects, at an
    /// install, upgrade or delete, so it is judged apart from them too.
    hook: bool,
    /// The kind of a Kubernetes object (a document with an `apiVersion` and a `kind`) of a kind
    /// ha-guard does not judge (a DaemonSet, a ConfigMap): counted, so that a file holding only
    /// such objects is not taken for one holding none.
    other: Option<String>,
}

impl Prepared {
    /// Decodes `value`; objects without a namespace are put in `namespace`.
    pub fn of(value: &serde_json::Value, namespace: &str) -> Prepared {
        let object = model::decode(value, namespace).map(|object| {
            object.map(|object| {
                let subject = match &object {
                    Object::Subject(s) => Some(s.id()),
                    _ => None,
                };
                (Projection::of(&object), subject)
            })
        });
        let hook = value.pointer("/metadata/annotations/helm.sh~1hook").is_some_and(|h| !h.is_null());
        let other = match &object {
            Ok(None) => other_kind(value),
            _ => None,
        };
        Prepared { object, removed: removed_api(value), hook, other }
    }
}

/// The kind of `value` when it reads as a Kubernetes object: a non-empty string `apiVersion` and
/// `kind`. A values file or a CI file has neither.
fn other_kind(value: &serde_json::Value) -> Option<String> {
    let text = |key: &str| value.get(key).and_then(serde_json::Value::as_str).filter(|t| !t.trim().is_empty());
    text("apiVersion")?;
    text("kind").map(str::to_string)
}

/// The subject decoded from `value`, if it is one.
fn subject_of(value: &serde_json::Value, namespace: &str) -> Option<Subject> {
    match model::decode(value, namespace) {
        Ok(Some(Object::Subject(subject))) => Some(subject),
        _ => None,
    }
}

/// Checks loaded documents.
pub fn check(loaded: &Loaded, options: &Options) -> Report {
    let prepared = map_on_cores(&loaded.documents, |d| Prepared::of(&d.value, &options.namespace));
    let documents = loaded.documents.iter().zip(prepared).map(|(d, p)| Document { origin: d.origin.clone(), value: p });
    // The trees are in memory: the subjects are decoded from them again.
    let subjects = |_: Option<&Source>, items: &[(usize, Origin)]| {
        let subjects = items.iter().map(|(i, _)| subject_of(&loaded.documents[*i].value, &options.namespace));
        (subjects.collect(), None)
    };
    check_prepared(&loaded.sources, loaded.errors.clone(), documents, options, &subjects)
}

/// Checks documents read with [`Prepared::of`] (`load_mapped`): each document holding a subject is
/// read again from its file's text when it is judged.
pub fn check_loaded(loaded: &mut Loaded<Prepared>, options: &Options) -> Report {
    let documents = std::mem::take(&mut loaded.documents);
    let subjects = |source: Option<&Source>, items: &[(usize, Origin)]| {
        let Some((value, skeleton)) = source.and_then(|s| crate::manifest::load::reread(s, items[0].1.document)) else {
            return (vec![None; items.len()], None);
        };
        let subjects = items.iter().map(|(_, origin)| {
            crate::manifest::load::item_of(&value, origin.item).and_then(|v| subject_of(v, &options.namespace))
        });
        (subjects.collect(), skeleton)
    };
    check_prepared(&loaded.sources, loaded.errors.clone(), documents, options, &subjects)
}

/// How the second pass gets the subjects of one document back (`items`: their index among the
/// documents and their origin), with the document's skeleton when reading it built one.
type Subjects<'a> = dyn Fn(Option<&Source>, &[(usize, Origin)]) -> (Vec<Option<Subject>>, Option<Node>) + Sync + 'a;

/// A judged subject, with where what is reported on it is: the object itself, each finding (and
/// the first segment of its path not in the file), each change.
struct Judged {
    verdict: Verdict,
    object_at: Option<Position>,
    findings_at: Vec<Option<(Position, Option<String>)>>,
    changes_at: Vec<Option<Position>>,
}

fn check_prepared(
    sources: &[Source],
    mut errors: Vec<LoadError>,
    documents: impl IntoIterator<Item = Document<Prepared>>,
    options: &Options,
    subjects: &Subjects,
) -> Report {
    // First pass: the view, the notes, and which documents hold subjects.
    let mut index = Index::new();
    index.set_complete(options.complete);
    let mut unchecked: Vec<(Origin, String)> = Vec::new();
    // Two documents describing one object: the view keeps the last, and says so.
    let mut duplicates = Vec::new();
    let mut seen: BTreeMap<(bool, model::Kind, String, String), Origin> = BTreeMap::new();
    let mut checked: HashSet<ObjectRef> = HashSet::new();
    let mut judged: Vec<(usize, Origin, ObjectRef)> = Vec::new();
    let mut objects = 0;
    let mut other_kinds: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for (i, Document { origin, value: Prepared { object, removed, hook, other } }) in documents.into_iter().enumerate()
    {
        if let Some(kind) = other {
            *other_kinds.entry(origin.shown_file().to_string()).or_default().entry(kind).or_default() += 1;
        }
        if let Some(message) = removed {
            unchecked.push((origin.clone(), message));
        }
        let (projection, subject) = match object {
            Ok(Some(object)) => object,
            Ok(None) => continue,
            Err(e) => {
                errors.push(decode_error(&origin, &e));
                continue;
            }
        };
        objects += 1;
        // A Helm hook is not part of the release's view (a hook copy of an object would replace
        // the release's own there): it is judged against the release's objects, and a hook copy
        // of one of them is no duplicate.
        if !hook {
            index.insert_projection(projection);
        }
        let Some(id) = subject else { continue };
        if let Some(first) = seen.insert((hook, id.kind, id.namespace.clone(), id.name.clone()), origin.clone()) {
            duplicates.push((
                origin.clone(),
                format!(
                    "{id} is also defined in {} ({}): the view keeps this later one, and both are checked \
                     against it; to check two variants of an object (a base and its patch, two overlays), \
                     check each separately",
                    first.shown_file(),
                    crate::manifest::document_label(first.document)
                ),
            ));
        }
        checked.insert(id.clone());
        judged.push((i, origin, id));
    }
    let mut report = Report { objects, files: sources.len(), other_kinds, ..Default::default() };
    report.unchecked.append(&mut unchecked);
    report.notices.append(&mut duplicates);
    report.notices.extend(unknown_namespaces(&index, &judged, options));

    // Second pass, document by document on every core: each is read again, its subjects judged
    // (rules, decisions and mutation plans are pure and independent) and what is reported on them
    // located in its skeleton; then everything is dropped but the verdict.
    let mut by_file: HashMap<&str, &Source> = HashMap::new();
    for s in sources {
        by_file.entry(s.file.as_str()).or_insert(s);
    }
    let mut groups: Vec<&[(usize, Origin, ObjectRef)]> = Vec::new();
    let mut rest = &judged[..];
    while let Some((_, first, _)) = rest.first() {
        let n = rest.iter().take_while(|(_, o, _)| o.file == first.file && o.document == first.document).count();
        let (group, tail) = rest.split_at(n);
        groups.push(group);
        rest = tail;
    }
    let today = Some(crate::config_file::today());
    let outcomes = map_on_cores(&groups, |group| {
        let source = by_file.get(group[0].1.file.as_str()).copied();
        let items: Vec<(usize, Origin)> = group.iter().map(|(i, o, _)| (*i, o.clone())).collect();
        let (decoded, skeleton) = subjects(source, &items);
        let mut tree = skeleton;
        let mut parsed = tree.is_some();
        let mut out = Vec::with_capacity(items.len());
        for ((_, origin), subject) in items.iter().zip(decoded) {
            let Some(subject) = subject else {
                out.push(None);
                continue;
            };
            let verdict = judge(&Review {
                subject: &subject,
                old: None,
                view: &index,
                config: &options.config,
                asks: Asks::Both,
                // The files are the set: an absence is judged as `--complete` says.
                absences: Absences::Judged,
                today,
                progress: None,
                // `--complete` says the files are the whole cluster: a namespace whose Namespace
                // is not among them gets the strictest action an override could give it.
                unknown_namespace: if options.complete {
                    UnknownNamespace::Strictest
                } else {
                    UnknownNamespace::NoOverride
                },
            });
            let v = &verdict;
            let reported = !v.unchecked.is_empty()
                || !v.decided.warnings.is_empty()
                || !v.decided.findings.is_empty()
                || !v.plan.is_empty();
            // Located only when something is reported on it.
            if reported && !parsed {
                tree = source.and_then(|s| skeleton_of(s, origin.document));
                parsed = true;
            }
            let tree = tree.as_ref().filter(|_| reported);
            let at = |path: &str| tree.map(|t| resolve_in(t, origin, path));
            out.push(Some(Judged {
                object_at: at("").map(|(p, _)| p),
                findings_at: v.decided.findings.iter().map(|f| at(&f.path)).collect(),
                changes_at: v.plan.changes.iter().map(|c| at(&c.path()).map(|(p, _)| p)).collect(),
                verdict,
            }));
        }
        out
    });
    let locator = Locator::new(sources);
    for ((_, origin, id), judged) in judged.iter().zip(outcomes.into_iter().flatten()) {
        let Some(Judged { verdict: Verdict { decided, plan, unchecked, .. }, object_at, findings_at, changes_at }) =
            judged
        else {
            continue;
        };
        report.checked.push((origin.shown_file().to_string(), id.clone()));
        // The origin moved to a position (the object itself, a field), or kept when not located.
        let moved = |at: Option<Position>| match at {
            Some(p) => Origin { line: p.line as usize, column: Some(p.column as usize), ..origin.clone() },
            None => origin.clone(),
        };
        for u in unchecked {
            report.unchecked.push((moved(object_at), u));
        }
        for w in decided.warnings {
            report.notices.push((moved(object_at), w));
        }
        for (f, at) in decided.findings.into_iter().zip(findings_at) {
            // Reported on the object it is about when that object is checked too.
            if f.anchor != f.object && checked.contains(&f.anchor) {
                continue;
            }
            // Point at the finding's field, or its deepest ancestor present in the file.
            let (origin, missing) = match at {
                Some((at, missing)) => (moved(Some(at)), missing),
                None => (origin.clone(), None),
            };
            let snippet = locator.source_line(&origin.file, origin.line).map(str::to_string);
            report.findings.push(Located { finding: f, origin, missing, snippet });
        }
        if !plan.is_empty() {
            // Where each change goes: the deepest existing ancestor of the field it adds.
            let at = changes_at.into_iter().map(moved).collect();
            report.fixes.push(Fixable { object: id.clone(), origin: moved(object_at), changes: plan.changes, at });
        }
    }
    report.errors = errors;
    report
}

/// The namespaces of judged objects whose labels the files do not give (no Namespace among them)
/// while an override selects namespaces by label: each named once, where its first object is, with
/// what its objects were judged by (the cluster-wide actions; with `--complete`, the strictest an
/// override gives) and the fix.
fn unknown_namespaces(
    index: &Index,
    judged: &[(usize, Origin, ObjectRef)],
    options: &Options,
) -> Vec<(Origin, String)> {
    let config = &options.config;
    if config.overrides.is_empty() {
        return Vec::new();
    }
    let mut named: BTreeMap<&str, &Origin> = BTreeMap::new();
    for (_, origin, id) in judged {
        let namespace = id.namespace.as_str();
        if !namespace.is_empty()
            && !config.namespace_exempt(namespace)
            && !named.contains_key(namespace)
            && index.namespace_labels(namespace).is_none()
        {
            named.insert(namespace, origin);
        }
    }
    let judged_by = if options.complete {
        "--complete says the files are the whole cluster, so its objects are judged at the strictest action an \
         override gives"
    } else {
        "its objects are judged by the cluster-wide actions, as if no override applied (with --complete, at the \
         strictest action an override gives)"
    };
    named
        .into_iter()
        .map(|(namespace, origin)| {
            (
                origin.clone(),
                format!(
                    "namespace {namespace}: its labels are not known (no Namespace {namespace} among the files), and \
                     the overrides select namespaces by label: {judged_by}; add the Namespace to the files to judge \
                     them by its labels"
                ),
            )
        })
        .collect()
}

/// What a run of `check` did: the files read (their documents' objects are dropped once
/// checked), the report on them, and the files `--fix` rewrote (the report is on the files as
/// they are after it).
pub struct Run {
    pub loaded: Loaded<Prepared>,
    pub report: Report,
    pub fixed: Vec<String>,
    /// Stdin's text, fixed, when `--fix` writes it to stdout (`--output -`).
    pub stdout: Option<String>,
}

/// What `--fix` does: nothing, write the files back, or that and stdin's fixed text to stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fix {
    No,
    Files,
    FilesAndStdout,
}

/// Loads and checks `paths`; with `fix`, writes the mutations back and checks what was written.
pub fn run(paths: &[String], options: &Options, fix: bool) -> Result<Run, fix::FixError> {
    let fix = if fix { Fix::Files } else { Fix::No };
    run_with(paths, &crate::manifest::LoadOptions::default(), options, fix)
}

/// [`run`], reading the paths with `load`.
pub fn run_with(
    paths: &[String],
    load: &crate::manifest::LoadOptions,
    options: &Options,
    fix: Fix,
) -> Result<Run, fix::FixError> {
    let prepare = |value: serde_json::Value| Prepared::of(&value, &options.namespace);
    let mut loaded = crate::manifest::load_mapped(paths, load, &prepare);
    let report = check_loaded(&mut loaded, options);
    // Stdin as read: what goes to stdout when nothing in it changes.
    let stdin = || loaded.sources.iter().find(|s| s.path.is_none() && s.file == "-").map(|s| s.text.clone());
    if fix == Fix::No || report.fixes.is_empty() {
        let stdout = if fix == Fix::FilesAndStdout { stdin() } else { None };
        return Ok(Run { loaded, report, fixed: Vec::new(), stdout });
    }
    let to_stdout = fix == Fix::FilesAndStdout;
    let (fixed, fixed_stdin) = fix::apply(&loaded.sources, &report.fixes, to_stdout)?;
    let stdout = if to_stdout { fixed_stdin.or_else(stdin) } else { None };
    // The texts as they were: the files hold the fixed ones now (stdin's is in `stdout`).
    drop(loaded);
    let files: Vec<String> = paths.iter().filter(|p| *p != "-").cloned().collect();
    let mut loaded = crate::manifest::load_mapped(&files, load, &prepare);
    if let Some(text) = &stdout {
        crate::manifest::add_text_mapped(&mut loaded, "-".into(), None, text.clone(), false, &prepare);
    }
    let report = check_loaded(&mut loaded, options);
    Ok(Run { loaded, report, fixed, stdout })
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
        assert!(message.contains("Deployment default/web is also defined in t.yaml (document 1)"), "{message}");
        let other = d.replace("name: web}", "name: api}");
        assert!(run(&format!("{d}---\n{other}")).notices.is_empty());
    }
}

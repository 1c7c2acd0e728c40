//! Fuzz target `check`: bytes (as UTF-8, lossy) → `manifest::add_text` → `check::check` with
//! `complete` false and true, under the shipped configuration and with every mutation on → the
//! text, JSON and SARIF renderings.
//!
//! Invariants (a panic anywhere is a finding too):
//! - a finding on a namespaced object names only objects of its namespace or cluster-scoped ones
//!   (`related`, the anchor); one on a cluster-scoped object (a webhook configuration) may name
//!   its backend in any namespace;
//! - each fix plan is add-only and applies (JSON Patch) to its document;
//! - planning again on the patched, re-decoded documents (the view rebuilt from them) is empty;
//! - `--fix` (`check::fix::apply`, on a scratch file) writes text whose documents are exactly the
//!   patched documents, and checking that file again plans no fix;
//! (The YAML readers are held to serde-saphyr by the `yaml` target, which tries far more inputs
//! than this one can.)
#![no_main]

mod common;

use std::path::PathBuf;
use std::sync::LazyLock;

use ha_guard::check::{self, Options, fix, output};
use ha_guard::core::config::Config;
use ha_guard::core::decide;
use ha_guard::core::model::{self, Object};
use ha_guard::core::mutations;
use ha_guard::core::view::Index;
use ha_guard::manifest::{self as load, Document, Loaded};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const NAMESPACE: &str = "default";

/// A scratch file for `--fix`, one per process (in memory where /dev/shm exists).
static SCRATCH: LazyLock<PathBuf> = LazyLock::new(|| {
    let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let dir = base.join(format!("ha-guard-fuzz-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir.join("input.yaml")
});

static CONFIGS: LazyLock<[(&'static str, Config); 2]> = LazyLock::new(common::configs);

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    let mut loaded = Loaded::default();
    load::add_text(&mut loaded, "input.yaml".into(), None, text.clone(), false);
    for (name, config) in CONFIGS.iter() {
        for complete in [false, true] {
            let options = Options { complete, namespace: NAMESPACE.into(), config: config.clone() };
            let report = check::check(&loaded, &options);
            let _ = output::text(&report, Default::default());
            // Built, not serialized: a `Value` always serializes, and serializing SARIF's
            // embedded rule documentation would take most of each run.
            let _ = output::json(&report);
            let _ = output::sarif(&report);
            let _ = report.exit_code(ha_guard::check::FailOn::Deny);
            for l in &report.findings {
                let f = &l.finding;
                for r in f.related.iter().chain(std::iter::once(&f.anchor)) {
                    assert!(
                        common::may_name(&f.object, r),
                        "{name}, complete {complete}: [{}] on {} names {r}",
                        f.rule,
                        f.object
                    );
                }
            }
            if report.fixes.is_empty() {
                continue;
            }
            let what = format!("{name}, complete {complete}");
            let patched = replan(&loaded, &report, &options, &what);
            // `--fix` proper only once per input: it is the same plan whatever `complete` is.
            if !complete {
                fix_round_trip(&text, &report, &patched, &options, &what);
            }
        }
    }
});

/// The documents with each fix applied; asserts that every plan applies and a second pass on the
/// patched documents plans nothing.
fn replan(loaded: &Loaded, report: &check::Report, options: &Options, what: &str) -> Vec<Document> {
    let mut documents = loaded.documents.clone();
    let mut fixed = Vec::new();
    for f in &report.fixes {
        let w = || format!("{what}: fix of {} (document {}, item {:?})", f.object, f.origin.document, f.origin.item);
        let plan = mutations::Plan { changes: f.changes.clone() };
        common::assert_add_only(&plan, &w);
        let at = documents
            .iter()
            .position(|d| {
                d.origin.file == f.origin.file
                    && d.origin.document == f.origin.document
                    && d.origin.item == f.origin.item
            })
            .unwrap_or_else(|| panic!("{}: no such document", w()));
        documents[at].value = common::apply(&documents[at].value, &plan.operations(), &w);
        fixed.push(at);
    }
    // The view as `check` builds it, from the patched documents.
    let decoded: Vec<Option<Object>> =
        documents.iter().map(|d| model::decode(&d.value, &options.namespace).ok().flatten()).collect();
    let mut index = Index::new();
    index.set_complete(options.complete);
    for o in decoded.iter().flatten() {
        index.insert_object(o);
    }
    for at in fixed {
        let Some(Object::Subject(subject)) = &decoded[at] else {
            panic!("{what}: document {at} no longer decodes after its fix: {}", documents[at].value);
        };
        if decide::skip_reason(&subject.id().namespace, &index, &options.config).is_some() {
            continue;
        }
        let again = mutations::plan(subject, &index, &options.config);
        assert!(
            again.is_empty(),
            "{what}: the second pass on {} plans {:?}\npatched: {}",
            subject.id(),
            again.changes,
            documents[at].value
        );
    }
    documents
}

/// `check --fix` on a scratch copy of the input: the text it writes must hold exactly the patched
/// documents (same documents, same order, same values), and a second check must plan no fix.
fn fix_round_trip(text: &str, report: &check::Report, patched: &[Document], options: &Options, what: &str) {
    let path = &*SCRATCH;
    let file = path.display().to_string();
    std::fs::write(path, text).expect("write the scratch file");
    let mut on_disk = Loaded::default();
    load::add_text(&mut on_disk, file.clone(), Some(path.clone()), text.to_string(), false);
    // The plans name the input's file; point them at the scratch file.
    let fixes: Vec<check::Fixable> = report
        .fixes
        .iter()
        .cloned()
        .map(|mut f| {
            f.origin.file = file.clone();
            f
        })
        .collect();
    let (written, _) = fix::apply(&on_disk.sources, &fixes, false)
        .unwrap_or_else(|e| panic!("{what}: --fix failed: {e}\ninput:\n{text}"));
    assert_eq!(written, vec![file.clone()], "{what}: --fix wrote {written:?}");
    let rewritten = std::fs::read_to_string(path).expect("read back");
    let reloaded = load::load(std::slice::from_ref(&file));
    let key = |d: &Document| (d.origin.document, d.origin.item, d.value.clone());
    let expected: Vec<(usize, Option<usize>, Value)> = patched.iter().map(key).collect();
    let got: Vec<(usize, Option<usize>, Value)> = reloaded.documents.iter().map(key).collect();
    if got != expected {
        panic!(
            "{what}: --fix wrote text whose documents are not the patched documents\n--- input:\n{text}\n--- written:\n{rewritten}\n--- expected: {}\n--- got: {}",
            serde_json::to_string(&expected).unwrap_or_default(),
            serde_json::to_string(&got).unwrap_or_default()
        );
    }
    assert_eq!(
        reloaded.errors.len(),
        on_disk.errors.len(),
        "{what}: --fix changed which documents are unusable\n--- written:\n{rewritten}\n{:?}",
        reloaded.errors
    );
    let again = check::check(&reloaded, options);
    assert!(
        again.fixes.is_empty(),
        "{what}: after --fix, check still plans {:?}\n--- written:\n{rewritten}",
        again.fixes
    );
}

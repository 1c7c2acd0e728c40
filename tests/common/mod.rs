//! Shared helpers for the integration tests: build subjects and views from YAML, evaluate, decide.
#![allow(dead_code)]

use ha_guard::config::Config;
use ha_guard::decide::{self, Context, Decided};
use ha_guard::engine::{self, Decision, Finding};
use ha_guard::model::{self, Object, Subject};
use ha_guard::mutations::{self, Plan};
use ha_guard::view::Index;

/// Parses one or more YAML documents into decoded objects (namespace `default` when unset).
pub fn objects(yaml: &str) -> Vec<Object> {
    let mut loaded = ha_guard::check::load::Loaded::default();
    ha_guard::check::load::add_text(&mut loaded, "test.yaml".into(), None, yaml.to_string(), false);
    assert!(loaded.errors.is_empty(), "bad test YAML: {:?}", loaded.errors);
    loaded
        .documents
        .iter()
        .map(|d| model::decode(&d.value, "default").expect("decodes").expect("a known kind"))
        .collect()
}

/// The single subject in `yaml`.
pub fn subject(yaml: &str) -> Subject {
    match objects(yaml).into_iter().next() {
        Some(Object::Subject(s)) => s,
        other => panic!("not a subject: {other:?}"),
    }
}

/// A static view of the objects in `yaml` (`complete`: the rules that assert absence run).
pub fn view(yaml: &str, complete: bool) -> Index {
    let mut index = Index::new();
    index.set_complete(complete);
    if !yaml.trim().is_empty() {
        for o in objects(yaml) {
            index.insert_object(&o);
        }
    }
    index
}

/// Evaluates `subject_yaml` against a view of `view_yaml` with the default config.
pub fn findings(subject_yaml: &str, view_yaml: &str, complete: bool) -> Vec<Finding> {
    engine::evaluate(&subject(subject_yaml), &view(view_yaml, complete), &Config::default()).findings
}

/// The findings of one rule.
pub fn of_rule<'a>(findings: &'a [Finding], rule: &str) -> Vec<&'a Finding> {
    findings.iter().filter(|f| f.rule == rule).collect()
}

/// Evaluates and decides with the default context.
pub fn decided(subject_yaml: &str, view_yaml: &str, complete: bool, config: &Config) -> Decided {
    let s = subject(subject_yaml);
    let v = view(view_yaml, complete);
    let eval = engine::evaluate(&s, &v, config);
    let ctx = Context { subject_exemptions: s.exemptions(), ..Default::default() };
    decide::decide(eval, &s.id().namespace, &v, config, &ctx)
}

pub fn plan(subject_yaml: &str, view_yaml: &str, config: &Config) -> Plan {
    mutations::plan(&subject(subject_yaml), &view(view_yaml, false), config)
}

pub fn actions(d: &Decided) -> Vec<(&'static str, Decision)> {
    d.findings.iter().map(|f| (f.rule, f.action)).collect()
}

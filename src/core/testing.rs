//! Helpers for the core's tests: build subjects and views from YAML, evaluate, decide.
#![allow(dead_code)]

use crate::core::config::Config;
use crate::core::decide::{self, Context, Decided};
use crate::core::finding::{Decision, Finding};
use crate::core::model::{self, Object, Subject};
use crate::core::mutations::{self, Plan};
use crate::core::rules;
use crate::core::view::Index;

/// Parses one or more YAML documents into decoded objects (namespace `default` when unset).
pub fn objects(yaml: &str) -> Vec<Object> {
    // Test YAML has no `---` inside block scalars: a line split is exact here.
    yaml.split("\n---\n")
        .filter(|doc| !doc.trim().is_empty())
        .filter_map(|doc| {
            let value: serde_json::Value =
                serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("bad test YAML: {e}\n{doc}"));
            (!value.is_null()).then_some(value)
        })
        .map(|value| model::decode(&value, "default").expect("decodes").expect("a known kind"))
        .collect()
}

/// The single subject in `yaml`, cut to the fields the rules read (a workload's pod template, an
/// HPA's spec) as the webhook decodes it ([`model::read`]): a rule that reads any other field
/// fails its tests.
pub fn subject(yaml: &str) -> Subject {
    match objects(yaml).into_iter().next() {
        Some(Object::Subject(s)) => model::read::only_read_fields_of(s),
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
    tidy(rules::evaluate(&subject(subject_yaml), &view(view_yaml, complete), &Config::default()).findings)
}

/// `findings`, each message and fix checked to read as one sentence a person can act on: no run
/// of spaces (a string literal broken across lines without `\`), no empty fix.
#[track_caller]
pub fn tidy(findings: Vec<Finding>) -> Vec<Finding> {
    for f in &findings {
        for (what, text) in [("message", &f.what), ("fix", &f.fix)] {
            assert!(!text.contains("  "), "{} {}: a run of spaces in its {what}: {text:?}", f.rule, f.object);
            assert!(!text.contains('\n'), "{} {}: a line break in its {what}: {text:?}", f.rule, f.object);
        }
        assert!(!f.fix.trim().is_empty(), "{} {}: no fix", f.rule, f.object);
    }
    findings
}

/// The findings of one rule.
pub fn of_rule<'a>(findings: &'a [Finding], rule: &str) -> Vec<&'a Finding> {
    findings.iter().filter(|f| f.rule == rule).collect()
}

/// Evaluates and decides with the default context.
pub fn decided(subject_yaml: &str, view_yaml: &str, complete: bool, config: &Config) -> Decided {
    let s = subject(subject_yaml);
    let v = view(view_yaml, complete);
    let eval = rules::evaluate(&s, &v, config);
    let ctx = Context { subject_exemptions: s.exemptions(), ..Default::default() };
    decide::decide(eval, &s.id().namespace, &v, config, &ctx)
}

pub fn plan(subject_yaml: &str, view_yaml: &str, config: &Config) -> Plan {
    mutations::plan(&subject(subject_yaml), &view(view_yaml, false), config)
}

pub fn actions(d: &Decided) -> Vec<(&'static str, Decision)> {
    d.findings.iter().map(|f| (f.rule.id, f.action)).collect()
}

/// Evaluates `subject_yaml` against a view of `view_yaml` with the given config.
pub fn findings_with(subject_yaml: &str, view_yaml: &str, complete: bool, config: &Config) -> Vec<Finding> {
    tidy(rules::evaluate(&subject(subject_yaml), &view(view_yaml, complete), config).findings)
}

/// Evaluates `subject_yaml` against an already built view, with the default config.
pub fn findings_in(subject_yaml: &str, view: &Index) -> Vec<Finding> {
    tidy(rules::evaluate(&subject(subject_yaml), view, &Config::default()).findings)
}

/// The whole evaluation (findings, rules not judged) of `subject_yaml` in `view`.
pub fn evaluate_in_view(subject_yaml: &str, view: &Index) -> rules::Evaluation {
    rules::evaluate(&subject(subject_yaml), view, &Config::default())
}

/// A view like the live one: complete, and it knows the cluster's nodes (`spread-unsatisfiable` runs).
pub fn live_view(yaml: &str) -> Index {
    let mut index = view(yaml, true);
    index.set_knows_nodes(true);
    index
}

/// `text` with every non-empty line indented by `n` spaces (to splice YAML fragments).
pub fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines().map(|l| if l.trim().is_empty() { String::new() } else { format!("{pad}{l}\n") }).collect()
}

/// A workload `name` of `kind` (`Deployment` or `StatefulSet`) in namespace `default`, selecting
/// and labelling its pods `app: <name>`. `spec` is spliced into `spec` (replicas, strategy, ...),
/// `pod` into the pod template's spec; a single container `app` (nginx) is added unless `pod`
/// has its own top-level `containers:`.
pub fn workload(kind: &str, name: &str, spec: &str, pod: &str) -> String {
    let mut pod = pod.to_string();
    if !pod.lines().any(|l| l.starts_with("containers:")) {
        pod.push_str("\ncontainers:\n- name: app\n  image: nginx:1.27\n");
    }
    format!(
        "apiVersion: apps/v1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{}  selector:\n    \
         matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n{}",
        indent(spec, 2),
        indent(&pod, 6)
    )
}

/// [`workload`] for a Deployment.
pub fn deployment(name: &str, spec: &str, pod: &str) -> String {
    workload("Deployment", name, spec, pod)
}

/// An autoscaling/v2 HPA `name` targeting Deployment `target`; `min` `None` leaves minReplicas unset.
pub fn hpa(name: &str, target: &str, min: Option<i32>, max: i32) -> String {
    let min = min.map(|m| format!("  minReplicas: {m}\n")).unwrap_or_default();
    format!(
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: {name}\n  namespace: default\n\
         spec:\n  scaleTargetRef:\n    apiVersion: apps/v1\n    kind: Deployment\n    name: {target}\n{min}  \
         maxReplicas: {max}\n"
    )
}

/// Joins YAML documents into one multi-document stream.
pub fn docs(parts: &[&str]) -> String {
    parts.join("\n---\n")
}

/// `yaml` with `from` replaced by `to`; panics when `from` is not there (so an edit cannot
/// silently leave the manifest unchanged and the test vacuous).
pub fn edit(yaml: &str, from: &str, to: &str) -> String {
    assert!(yaml.contains(from), "{from:?} not found in:\n{yaml}");
    yaml.replace(from, to)
}

/// A Running, Ready pod `name` of Deployment `owner` on `node` (none when empty), labelled
/// `app: <owner>` like the pods of [`workload`]; adjust the fields for other states.
pub fn pod(name: &str, owner: &str, node: &str) -> crate::core::view::PodInfo {
    use crate::core::view::{PodInfo, PodOwner, PodPhase};
    PodInfo {
        name: name.into(),
        owner: PodOwner::Workload(model::Kind::Deployment, owner.into()),
        node: (!node.is_empty()).then(|| node.into()),
        labels: std::sync::Arc::new([("app".to_string(), owner.to_string())].into()),
        unschedulable: None,
        phase: PodPhase::Running,
        ready: true,
        terminating: false,
        tolerates_cordon: false,
        requests: Default::default(),
        ports: Vec::new(),
        anti_affinity: Default::default(),
        claims: Default::default(),
        ephemeral_claims: Default::default(),
        priority: 0,
        preempts: true,
    }
}

/// [`live_view`] of `yaml` with `pods` in namespace `default`.
pub fn view_with_pods(yaml: &str, pods: Vec<crate::core::view::PodInfo>) -> Index {
    let mut index = live_view(yaml);
    for p in pods {
        index.upsert_pod("default", p);
    }
    index
}

/// [`view_with_pods`] that also keeps the workloads' pod templates (the drain replay places
/// replacements from them, as the audit's view for a drain does).
pub fn view_with_templates(yaml: &str, pods: Vec<crate::core::view::PodInfo>) -> Index {
    let mut index = Index::new();
    index.set_keeps_templates(true);
    index.set_complete(true);
    index.set_knows_nodes(true);
    for o in objects(yaml) {
        index.insert_object(&o);
    }
    for p in pods {
        index.upsert_pod("default", p);
    }
    index
}

/// Node objects: `(name, zone, cordoned)` (no zone label when the zone is empty).
pub fn nodes(list: &[(&str, &str, bool)]) -> String {
    list.iter()
        .map(|(name, zone, cordoned)| {
            let zone =
                if zone.is_empty() { String::new() } else { format!("    topology.kubernetes.io/zone: {zone}\n") };
            format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n\
                 {zone}spec:\n  unschedulable: {cordoned}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The findings of `subject_yaml` with the live posture rules (`rules::audit`), default config.
pub fn audit_findings(subject_yaml: &str, view: &Index) -> Vec<Finding> {
    tidy(rules::audit(&subject(subject_yaml), view, &Config::default()).findings)
}

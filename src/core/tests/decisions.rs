//! Decisions (DESIGN.md §4): config overrides, exemption annotations (on the subject and on related
//! objects), namespace modes and exemptions, ratcheting on UPDATE, and scale writes.

use crate::core::config::Config;
use crate::core::decide::{self, Context, Decided};
use crate::core::finding::{Decision, Finding};
use crate::core::model::{Kind, ObjectRef, Subject};
use crate::core::rules;
use crate::core::testing::{actions, decided, subject, view};

// ---------------------------------------------------------------------------------------------
// Manifests

/// Deployment `web` (pods `app: web`) with `replicas`, in `namespace`, with extra metadata lines
/// (`annotations` is YAML at the metadata level, may be empty).
fn web_in(namespace: &str, replicas: i32, image: &str, annotations: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {namespace}
{annotations}spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers: [{{name: c, image: {image}}}]
"
    )
}

fn web(replicas: i32) -> String {
    web_in("default", replicas, "nginx:1.27", "")
}

fn annotated(rule: &str, reason: &str) -> String {
    format!("  annotations:\n    ha-guard.io/allow-{rule}: \"{reason}\"\n")
}

/// PDB `pdb` over `app: web` in `namespace`, `minAvailable: 1`, with metadata extras.
fn pdb_in(namespace: &str, annotations: &str) -> String {
    format!(
        "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: pdb
  namespace: {namespace}
{annotations}spec:
  minAvailable: 1
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels: {{app: web}}
"
    )
}

fn pdb(annotations: &str) -> String {
    pdb_in("default", annotations)
}

fn empty_pdb() -> String {
    "apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: all, namespace: default}
spec:
  maxUnavailable: 1
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector: {}
"
    .to_string()
}

fn namespace(name: &str, mode: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n    ha-guard.io/mode: \"{mode}\"\n")
}

fn docs(parts: &[&str]) -> String {
    parts.join("---\n")
}

fn config(yaml: &str) -> Config {
    crate::core::registry::parse_config(yaml, "test-config.yaml").expect("valid config")
}

fn of<'a>(d: &'a Decided, rule: &str) -> Vec<&'a Finding> {
    d.findings.iter().filter(|f| f.rule == rule).collect()
}

fn only<'a>(d: &'a Decided, rule: &str) -> &'a Finding {
    let found = of(d, rule);
    assert_eq!(found.len(), 1, "expected one {rule} finding, got {:#?}", d.findings);
    found[0]
}

fn pdb_ref() -> ObjectRef {
    ObjectRef::new(Kind::PodDisruptionBudget, "default", "pdb")
}

// ---------------------------------------------------------------------------------------------
// Config overrides

#[test]
fn by_default_the_blocking_pdb_is_denied() {
    let d = decided(&web(1), &pdb(""), false, &Config::default());
    assert_eq!(only(&d, "pdb-blocks-eviction").action, Decision::Deny);
    assert!(d.denied());
    assert!(d.skipped.is_none());
}

#[test]
fn config_downgrades_a_deny_to_warn() {
    let c = config("rules:\n  pdb-blocks-eviction: warn\n");
    let d = decided(&web(1), &pdb(""), false, &c);
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Warn);
    assert!(!d.denied());
}

#[test]
fn config_off_removes_the_rule() {
    let c = config("rules:\n  pdb-blocks-eviction: off\n");
    let d = decided(&web(1), &pdb(""), false, &c);
    assert!(of(&d, "pdb-blocks-eviction").is_empty(), "{:#?}", d.findings);
    assert!(!d.denied());
    // Off already at evaluation: the rule's findings never reach the decision.
    let eval = rules::evaluate(&subject(&web(1)), &view(&pdb(""), false), &c);
    assert!(eval.findings.iter().all(|f| f.rule != "pdb-blocks-eviction"));
}

#[test]
fn config_upgrades_a_warn_to_deny() {
    let d = decided(&empty_pdb(), &web(3), false, &Config::default());
    assert_eq!(only(&d, "pdb-selector-empty").action, Decision::Warn);
    let c = config("rules:\n  pdb-selector-empty: deny\n");
    let d = decided(&empty_pdb(), &web(3), false, &c);
    assert_eq!(only(&d, "pdb-selector-empty").action, Decision::Deny);
    assert!(d.denied());
}

#[test]
fn config_for_one_rule_leaves_the_others_alone() {
    let c = config("rules:\n  pdb-overlap: warn\n");
    let d = decided(&web(1), &pdb(""), false, &c);
    assert_eq!(actions(&d), vec![("pdb-blocks-eviction", Decision::Deny)]);
}

// ---------------------------------------------------------------------------------------------
// Exemption annotations

#[test]
fn exemption_on_the_subject_allows_with_the_reason() {
    let subject = pdb(&annotated("pdb-blocks-eviction", "singleton controller, drains are manual"));
    let d = decided(&subject, &web(1), false, &Config::default());
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Allowed);
    assert!(
        f.notes.iter().any(|n| n.to_string().contains("PodDisruptionBudget default/pdb")
            && n.to_string().contains("singleton controller, drains are manual")),
        "{:?}",
        f.notes
    );
    assert!(!d.denied());
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn exemption_for_another_rule_does_not_apply() {
    let subject = pdb(&annotated("pdb-overlap", "reason"));
    let d = decided(&subject, &web(1), false, &Config::default());
    assert_eq!(only(&d, "pdb-blocks-eviction").action, Decision::Deny);
}

#[test]
fn exemption_on_a_related_pdb_allows_the_deployment_write() {
    let view_yaml = pdb(&annotated("pdb-blocks-eviction", "forced over one replica on purpose"));
    let d = decided(&web(1), &view_yaml, false, &Config::default());
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Allowed);
    assert!(
        f.notes.iter().any(|n| n.to_string().contains("PodDisruptionBudget default/pdb")
            && n.to_string().contains("forced over one replica on purpose")),
        "{:?}",
        f.notes
    );
    assert!(!d.denied());
}

#[test]
fn exemption_on_the_related_deployment_allows_the_pdb_write() {
    let view_yaml = web_in("default", 1, "nginx", &annotated("pdb-blocks-eviction", "leader-elected singleton"));
    let d = decided(&pdb(""), &view_yaml, false, &Config::default());
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Allowed);
    assert!(f.notes.iter().any(
        |n| n.to_string().contains("Deployment default/web") && n.to_string().contains("leader-elected singleton")
    ));
}

#[test]
fn exemption_removed_by_the_update_no_longer_applies() {
    // The cache holds the PDB with its annotation; the update drops it.
    let cached = pdb(&annotated("pdb-blocks-eviction", "was fine"));
    let d = decided(&pdb(""), &docs(&[&cached, &web(1)]), false, &Config::default());
    assert_eq!(only(&d, "pdb-blocks-eviction").action, Decision::Deny);
}

#[test]
fn empty_reason_is_ignored_with_a_warning() {
    for reason in ["", "   "] {
        let subject = pdb(&annotated("pdb-blocks-eviction", reason));
        let d = decided(&subject, &web(1), false, &Config::default());
        assert_eq!(only(&d, "pdb-blocks-eviction").action, Decision::Deny, "reason {reason:?}");
        assert!(d.denied());
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        let w = &d.warnings[0];
        assert!(w.contains("ha-guard.io/allow-pdb-blocks-eviction"), "{w}");
        assert!(w.contains("PodDisruptionBudget default/pdb") && w.contains("empty reason"), "{w}");
        assert!(w.starts_with("[pdb-blocks-eviction]"), "{w}");
    }
}

#[test]
fn empty_reason_on_a_related_object_is_ignored_with_a_warning() {
    let view_yaml = pdb(&annotated("pdb-blocks-eviction", ""));
    let d = decided(&web(1), &view_yaml, false, &Config::default());
    assert_eq!(only(&d, "pdb-blocks-eviction").action, Decision::Deny);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("ha-guard.io/allow-pdb-blocks-eviction")
                && w.contains("PodDisruptionBudget default/pdb"))
    );
}

// ---------------------------------------------------------------------------------------------
// Namespace modes and exempt namespaces

#[test]
fn namespace_mode_warn_turns_deny_into_warn_with_a_note() {
    let view_yaml = docs(&[&pdb(""), &namespace("default", "warn")]);
    let d = decided(&web(1), &view_yaml, false, &Config::default());
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Warn);
    assert!(
        f.notes.iter().any(|n| n.to_string().contains("ha-guard.io/mode=warn") && n.to_string().contains("default")),
        "{:?}",
        f.notes
    );
    assert!(!d.denied());
    assert!(d.skipped.is_none());
}

#[test]
fn namespace_mode_of_another_namespace_does_not_apply() {
    let view_yaml = docs(&[&pdb(""), &namespace("other", "warn")]);
    let d = decided(&web(1), &view_yaml, false, &Config::default());
    assert_eq!(only(&d, "pdb-blocks-eviction").action, Decision::Deny);
}

#[test]
fn namespace_mode_enforce_or_unknown_keeps_deny() {
    for mode in ["enforce", "bogus"] {
        let view_yaml = docs(&[&pdb(""), &namespace("default", mode)]);
        let d = decided(&web(1), &view_yaml, false, &Config::default());
        assert_eq!(only(&d, "pdb-blocks-eviction").action, Decision::Deny, "mode {mode}");
    }
}

#[test]
fn namespace_mode_off_skips_everything() {
    let view_yaml = docs(&[&pdb(""), &namespace("default", "off")]);
    let d = decided(&web(1), &view_yaml, false, &Config::default());
    assert!(d.findings.is_empty(), "{:#?}", d.findings);
    let why = d.skipped.expect("skipped");
    assert!(why.contains("default") && why.contains("ha-guard.io/mode=off"), "{why}");
}

#[test]
fn exempt_namespace_in_config_is_skipped() {
    let c = config("exemptNamespaces: [kube-system, default]\n");
    let d = decided(&web(1), &pdb(""), false, &c);
    assert!(d.findings.is_empty());
    let why = d.skipped.expect("skipped");
    assert!(why.contains("namespace default") && why.contains("exempt"), "{why}");
    // Another namespace is still enforced.
    let c = config("exemptNamespaces: [kube-system]\n");
    let d = decided(&web(1), &pdb(""), false, &c);
    assert!(d.skipped.is_none() && d.denied());
}

// ---------------------------------------------------------------------------------------------
// Ratcheting on UPDATE

/// Decides the UPDATE of `new_yaml` over `old_yaml`, with `view_yaml` as the cache (which holds the
/// old object, as the live caches do).
fn update(old_yaml: &str, new_yaml: &str, view_yaml: &str, config: &Config) -> Decided {
    let v = view(&docs(&[view_yaml, old_yaml]), false);
    let old = rules::evaluate(&subject(old_yaml), &v, config).findings;
    let new = subject(new_yaml);
    let eval = rules::evaluate(&new, &v, config);
    let ctx = Context { old: Some(&old), subject_exemptions: new.exemptions(), ..Default::default() };
    decide::decide(eval, "default", &v, config, &ctx)
}

#[test]
fn deny_that_held_on_the_old_object_is_a_pre_existing_warning() {
    // An urgent image update of a workload that was already blocked by its PDB.
    let old = web_in("default", 1, "nginx:1.27", "");
    let new = web_in("default", 1, "nginx:1.27.1", "");
    let d = update(&old, &new, &pdb(""), &Config::default());
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Warn);
    assert!(f.notes.contains(&crate::core::finding::Note::PreExisting), "{:?}", f.notes);
    assert!(!d.denied());
}

#[test]
fn new_deny_on_update_is_still_denied() {
    // Scaling 3 → 1 under minAvailable 1 introduces the violation.
    let d = update(&web(3), &web(1), &pdb(""), &Config::default());
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Deny);
    assert!(f.notes.is_empty(), "{:?}", f.notes);
}

#[test]
fn new_deny_on_update_from_a_different_pdb_is_still_denied() {
    // The old pods (app: web) were blocked by `pdb`; the update relabels them to app: api, under
    // `api-pdb`, which blocks them too. Same rule and field, but a different PDB: a new violation.
    let api_pdb = pdb("").replace("name: pdb", "name: api-pdb").replace("{app: web}", "{app: api}");
    let new = web(1)
        .replace("labels: {app: web}", "labels: {app: api, tier: x}")
        .replace("matchLabels: {app: web}", "matchLabels: {tier: x}");
    let d = update(&web(1), &new, &docs(&[&pdb(""), &api_pdb]), &Config::default());
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.anchor, ObjectRef::new(Kind::PodDisruptionBudget, "default", "api-pdb"));
    assert_eq!(f.action, Decision::Deny, "{:?}", f.notes);
}

#[test]
fn ratchet_false_keeps_the_deny() {
    let c = config("ratchet: false\n");
    let old = web_in("default", 1, "nginx:1.27", "");
    let new = web_in("default", 1, "nginx:1.27.1", "");
    let d = update(&old, &new, &pdb(""), &c);
    assert_eq!(only(&d, "pdb-blocks-eviction").action, Decision::Deny);
}

#[test]
fn ratchet_does_not_upgrade_or_touch_warnings() {
    let old = empty_pdb();
    let new = empty_pdb().replace("maxUnavailable: 1", "maxUnavailable: 2");
    let d = update(&old, &new, &web(3), &Config::default());
    let f = only(&d, "pdb-selector-empty");
    assert_eq!(f.action, Decision::Warn);
    assert!(f.notes.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Scale writes

fn decide_scale(replicas: i32, view_yaml: &str, complete: bool, config: &Config) -> Decided {
    let v = view(view_yaml, complete);
    let s = Subject::Scale { target: ObjectRef::new(Kind::Deployment, "default", "web"), replicas };
    let eval = rules::evaluate(&s, &v, config);
    let ctx = Context { scale: true, subject_exemptions: s.exemptions(), ..Default::default() };
    decide::decide(eval, "default", &v, config, &ctx)
}

#[test]
fn scale_write_deny_becomes_warn() {
    let d = decide_scale(1, &docs(&[&web(3), &pdb("")]), false, &Config::default());
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Warn);
    assert!(f.notes.iter().any(|n| n.to_string().contains("scale writes are never denied")), "{:?}", f.notes);
    assert!(!d.denied());
}

#[test]
fn scale_write_is_never_denied_even_when_config_says_deny() {
    // Scaling web to 4 with no PDB on a complete view: pdb-missing, upgraded to deny by config.
    let c = config("rules:\n  pdb-missing: deny\n");
    let d = decide_scale(4, &web(1), true, &c);
    let f = only(&d, "pdb-missing");
    assert_eq!(f.action, Decision::Warn);
    assert!(f.notes.iter().any(|n| n.to_string().contains("scale writes are never denied")));
    assert!(!d.denied());
    // The same upgrade on a Deployment write denies.
    let d = decided(&web(4), "", true, &c);
    assert_eq!(only(&d, "pdb-missing").action, Decision::Deny);
}

#[test]
fn scale_write_honours_the_workloads_exemption() {
    // `kubectl scale` carries no annotations: the workload's own (unchanged by a scale) count.
    let exempt = web_in("default", 3, "nginx", &annotated("pdb-blocks-eviction", "scaled down at night"));
    let d = decide_scale(1, &docs(&[&exempt, &pdb("")]), false, &Config::default());
    let f = only(&d, "pdb-blocks-eviction");
    assert_eq!(f.action, Decision::Allowed, "{:?}", f.notes);
    assert!(f.notes.iter().any(|n| n.to_string().contains("scaled down at night")));
}

#[test]
fn same_write_without_the_scale_flag_is_denied() {
    let v = view(&docs(&[&web(3), &pdb("")]), false);
    let s = Subject::Scale { target: ObjectRef::new(Kind::Deployment, "default", "web"), replicas: 1 };
    let eval = rules::evaluate(&s, &v, &Config::default());
    let d = decide::decide(eval, "default", &v, &Config::default(), &Context::default());
    assert_eq!(only(&d, "pdb-blocks-eviction").action, Decision::Deny);
    assert_eq!(only(&d, "pdb-blocks-eviction").anchor, pdb_ref());
}

#[test]
fn an_exemption_on_the_claim_counts_for_rwo_findings() {
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: db, namespace: default}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec:\n      containers: [{name: db, image: postgres}]\n      volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]\n";
    let pvc = |annotations: &str| {
        format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data, namespace: default{annotations}}}\nspec: {{accessModes: [ReadWriteOnce]}}\n"
        )
    };
    let exempt =
        pvc(", annotations: {ha-guard.io/allow-rwo-volume-multi-replica: \"one writer, the other waits on a lock\"}");
    let d = crate::core::testing::decided(deployment, &exempt, false, &Config::default());
    let f: Vec<_> = d.findings.iter().filter(|f| f.rule == "rwo-volume-multi-replica").collect();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].action, Decision::Allowed);
    assert!(
        f[0].notes
            .iter()
            .any(|n| n.to_string().contains("PersistentVolumeClaim default/data")
                && n.to_string().contains("one writer")),
        "{:?}",
        f[0].notes
    );
    let d = crate::core::testing::decided(deployment, &pvc(""), false, &Config::default());
    assert!(d.findings.iter().any(|f| f.rule == "rwo-volume-multi-replica" && f.action == Decision::Deny));
}

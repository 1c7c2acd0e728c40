//! What an admission that withholds absences still says (DESIGN.md §2, "Where rules are judged"):
//! the rules that assert an absence are silent, everything about the object itself or about
//! objects that exist is said as before, and `check --complete` and the audit say it all.

use crate::core::config::Config;
use crate::core::finding::Finding;
use crate::core::rules;
use crate::core::testing::*;
use crate::core::view::Absences;

fn withheld(subject_yaml: &str, view_yaml: &str) -> Vec<Finding> {
    rules::evaluate_in(&subject(subject_yaml), &view(view_yaml, true), &Config::default(), Absences::Withheld, None)
        .findings
}

fn judged(subject_yaml: &str, view_yaml: &str) -> Vec<Finding> {
    rules::evaluate_in(&subject(subject_yaml), &view(view_yaml, true), &Config::default(), Absences::Judged, None)
        .findings
}

fn ids(f: &[Finding]) -> Vec<&'static str> {
    let mut ids: Vec<_> = f.iter().map(|f| f.rule.id).collect();
    ids.sort();
    ids
}

fn pdb_over(app: &str, budget: &str) -> String {
    format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: {app}\n  namespace: default\nspec:\n  \
         {budget}\n  selector:\n    matchLabels:\n      app: {app}\n"
    )
}

const SPREAD: &str = "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  \
                      whenUnsatisfiable: ScheduleAnyway\n  labelSelector:\n    matchLabels:\n      app: web\n";

#[test]
fn pdb_missing_is_withheld_and_the_rest_of_the_workload_is_judged() {
    // Three replicas, no spread, no PDB: replicas-colocated is about the object itself.
    let web = deployment("web", "replicas: 3", "");
    assert_eq!(ids(&judged(&web, "")), ["pdb-missing", "replicas-colocated"]);
    assert_eq!(ids(&withheld(&web, "")), ["replicas-colocated"]);
    // The message is the same wherever it is said.
    let said = judged(&web, "");
    let missing = of_rule(&said, "pdb-missing");
    assert!(missing[0].what.contains("no PodDisruptionBudget covers it"), "{}", missing[0].what);
}

#[test]
fn hpa_target_missing_is_withheld_and_its_bounds_are_judged() {
    let ghost = hpa("ghost", "ghost", Some(3), 2);
    assert_eq!(ids(&judged(&ghost, "")), ["hpa-replica-bounds", "hpa-target-missing"]);
    assert_eq!(ids(&withheld(&ghost, "")), ["hpa-replica-bounds"]);
}

#[test]
fn pdb_selects_nothing_is_withheld_only_for_covering_no_workload() {
    let orphan = pdb_over("nobody", "maxUnavailable: 1");
    assert_eq!(ids(&judged(&orphan, "")), ["pdb-selects-nothing"]);
    assert!(withheld(&orphan, "").is_empty());
    // A null selector matches no pod whatever else exists: a fact of the object itself.
    let no_selector = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: none\n  namespace: \
                       default\nspec:\n  maxUnavailable: 1\n";
    assert_eq!(ids(&withheld(no_selector, "")), ["pdb-selects-nothing"]);
}

#[test]
fn relations_with_objects_that_exist_are_judged_when_absences_are_withheld() {
    // The PDB exists and blocks every eviction of the one replica: said on the workload's CREATE.
    let single = deployment("web", "replicas: 1", "");
    let blocking = pdb_over("web", "minAvailable: 1");
    assert_eq!(ids(&withheld(&single, &blocking)), ["pdb-blocks-eviction"]);
    // Two PDBs that exist and both cover the workload: said on its CREATE.
    let web = deployment("web", "replicas: 3", SPREAD);
    let second = edit(&pdb_over("web", "maxUnavailable: 1"), "  name: web\n", "  name: web-2\n");
    let two = docs(&[&pdb_over("web", "maxUnavailable: 1"), &second]);
    assert_eq!(ids(&withheld(&web, &two)), ["pdb-overlap"]);
}

#[test]
fn a_webhook_backend_without_a_pdb_is_not_held_against_it_while_absences_are_withheld() {
    let backend = deployment("policy", "replicas: 2", &SPREAD.replace("app: web", "app: policy"));
    let service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: policy-webhook\n  namespace: default\nspec:\n  \
                   selector:\n    app: policy\n  ports:\n  - port: 443\n";
    let vwc = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: \
               policy\nwebhooks:\n- name: h\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  clientConfig:\n    \
               service:\n      name: policy-webhook\n      namespace: default\n  rules:\n  - apiGroups: [\"\"]\n    \
               apiVersions: [v1]\n    resources: [pods]\n    operations: [CREATE]\n";
    let view = docs(&[service, vwc]);
    let said = judged(&backend, &view);
    let fail_closed = of_rule(&said, "webhook-fail-closed-unavailable");
    assert_eq!(fail_closed.len(), 1, "{said:#?}");
    assert!(fail_closed[0].what.contains("no PodDisruptionBudget covers it"), "{}", fail_closed[0].what);
    assert!(of_rule(&withheld(&backend, &view), "webhook-fail-closed-unavailable").is_empty());
    // One replica is a weakness of the object itself: said either way.
    let single = deployment("policy", "replicas: 1", "");
    assert_eq!(of_rule(&withheld(&single, &view), "webhook-fail-closed-unavailable").len(), 1);
}

#[test]
fn a_view_that_is_not_complete_asserts_no_absence_either_way() {
    let web = deployment("web", "replicas: 3", SPREAD);
    let partial = rules::evaluate_in(&subject(&web), &view("", false), &Config::default(), Absences::Judged, None);
    assert!(partial.findings.is_empty(), "{:#?}", partial.findings);
}

//! The hand-over to the admission policies (`decide::leave_to_policies`): the webhook leaves to the
//! policies in force the findings they give, and keeps every finding that needs the view, that an
//! exemption or exception allowed, and every rule without a policy.

use std::collections::BTreeSet;

use crate::core::config::Config;
use crate::core::decide::leave_to_policies;
use crate::core::finding::Decision;
use crate::core::testing::{actions, decided};

fn covered(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// Every rule with a CEL form.
fn all_cel() -> BTreeSet<String> {
    crate::core::rules::CEL_RULES.iter().map(|r| r.rule.id.to_string()).collect()
}

fn deployment(name: &str, labels: &str, extra_spec: &str, annotations: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: default
{annotations}spec:
  replicas: 3
  selector:
    matchLabels: {labels}
  template:
    metadata:
      labels: {labels}
    spec:
{extra_spec}      containers: [{{name: c, image: nginx}}]
"
    )
}

const ZERO_GRACE: &str = "      terminationGracePeriodSeconds: 0\n";

#[test]
fn a_covered_rules_findings_are_left_to_its_policy_and_named() {
    let mut d = decided(&deployment("web", "{app: web}", ZERO_GRACE, ""), "", false, &Config::default());
    assert!(actions(&d).contains(&("termination-grace-zero", Decision::Warn)), "{:?}", actions(&d));
    let left = leave_to_policies(&mut d, &covered(&["termination-grace-zero"]));
    assert_eq!(left, vec!["termination-grace-zero"]);
    assert!(!actions(&d).iter().any(|(r, _)| *r == "termination-grace-zero"), "{:?}", actions(&d));
}

#[test]
fn a_rule_whose_policy_is_not_in_force_stays_the_webhooks() {
    let mut d = decided(&deployment("web", "{app: web}", ZERO_GRACE, ""), "", false, &Config::default());
    let before = actions(&d);
    // Another rule's policy, or none at all.
    assert!(leave_to_policies(&mut d, &covered(&["toleration-wildcard"])).is_empty());
    assert!(leave_to_policies(&mut d, &BTreeSet::new()).is_empty());
    assert_eq!(actions(&d), before);
}

#[test]
fn an_exempted_finding_stays_the_webhooks() {
    // The policy's match condition leaves an annotated object out: the webhook says the exemption.
    let exempt = "  annotations:\n    ha-guard.io/allow-termination-grace-zero: \"batch job, drains are fine\"\n";
    let mut d = decided(&deployment("web", "{app: web}", ZERO_GRACE, exempt), "", false, &Config::default());
    let before = actions(&d);
    assert!(before.contains(&("termination-grace-zero", Decision::Allowed)), "{before:?}");
    assert!(leave_to_policies(&mut d, &all_cel()).is_empty());
    assert_eq!(actions(&d), before);
}

#[test]
fn an_excepted_finding_stays_the_webhooks() {
    let config = crate::core::registry::parse_config(
        "exceptions:\n  - name: jobs\n    rules: [termination-grace-zero]\n    match: {names: [web], namespaces: [default]}\n    reason: batch\n",
        "c.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut d = decided(&deployment("web", "{app: web}", ZERO_GRACE, ""), "", false, &config);
    let before = actions(&d);
    assert!(before.contains(&("termination-grace-zero", Decision::Allowed)), "{before:?}");
    assert!(leave_to_policies(&mut d, &all_cel()).is_empty());
    assert_eq!(actions(&d), before);
}

#[test]
fn a_partial_rules_view_findings_stay_and_its_own_part_goes() {
    // spread-selector-overlap: another workload's pods matched (the view) stays; {} (the object) goes.
    let spread = |selector: &str| {
        format!(
            "      topologySpreadConstraints:\n      - maxSkew: 1\n        topologyKey: kubernetes.io/hostname\n        \
             whenUnsatisfiable: ScheduleAnyway\n        labelSelector: {selector}\n"
        )
    };
    let other = deployment("api", "{app: web, tier: api}", "", "");
    let subject = deployment("web", "{app: web}", &spread("{matchLabels: {app: web}}"), "");
    let mut d = decided(&subject, &other, false, &Config::default());
    let overlap: Vec<bool> =
        d.findings.iter().filter(|f| f.rule.id == "spread-selector-overlap").map(|f| f.from_view).collect();
    assert_eq!(overlap, vec![true], "the other workload's pods are matched: a finding of the view");
    assert!(leave_to_policies(&mut d, &all_cel()).iter().all(|r| *r != "spread-selector-overlap"));
    assert!(actions(&d).iter().any(|(r, _)| *r == "spread-selector-overlap"), "kept: {:?}", actions(&d));

    let empty = deployment("web", "{app: web}", &spread("{}"), "");
    let mut d = decided(&empty, "", false, &Config::default());
    assert!(d.findings.iter().any(|f| f.rule.id == "spread-selector-overlap" && !f.from_view));
    assert!(leave_to_policies(&mut d, &all_cel()).contains(&"spread-selector-overlap"));
    assert!(!actions(&d).iter().any(|(r, _)| *r == "spread-selector-overlap"), "{:?}", actions(&d));
}

#[test]
fn replica_bound_findings_from_an_autoscaler_stay_the_webhooks() {
    let recreate = |replicas: i32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: default}}\nspec:\n  replicas: \
             {replicas}\n  strategy: {{type: Recreate}}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    \
             metadata:\n      labels: {{app: web}}\n    spec:\n      containers: [{{name: c, image: nginx}}]\n"
        )
    };
    // Its own replicas: the policy's.
    let mut d = decided(&recreate(3), "", false, &Config::default());
    assert!(leave_to_policies(&mut d, &all_cel()).contains(&"recreate-multi-replica"));
    // One replica, an HPA up to 5: only the webhook knows the ceiling.
    let hpa = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: web, namespace: default}\n\
               spec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  minReplicas: 1\n  \
               maxReplicas: 5\n";
    let mut d = decided(&recreate(1), hpa, false, &Config::default());
    assert!(d.findings.iter().any(|f| f.rule.id == "recreate-multi-replica" && f.from_view), "{:?}", actions(&d));
    assert!(leave_to_policies(&mut d, &all_cel()).is_empty());
    assert!(actions(&d).iter().any(|(r, _)| *r == "recreate-multi-replica"));
}

#[test]
fn a_finding_on_a_kind_its_policy_does_not_match_stays_the_webhooks() {
    // exemption-unknown-rule's policy matches workloads, PDBs and HPAs: a Service's stays here.
    let service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: default\n  annotations: \
                   {ha-guard.io/allow-pdb-mising: x}\nspec:\n  selector: {app: web}\n  ports: [{port: 80}]\n";
    let mut d = decided(service, "", false, &Config::default());
    assert!(actions(&d).contains(&("exemption-unknown-rule", Decision::Warn)), "{:?}", actions(&d));
    assert!(leave_to_policies(&mut d, &all_cel()).is_empty());
    assert!(actions(&d).contains(&("exemption-unknown-rule", Decision::Warn)));
    let annotated = deployment("web", "{app: web}", "", "  annotations: {ha-guard.io/allow-pdb-mising: x}\n");
    let mut d = decided(&annotated, "", false, &Config::default());
    assert!(leave_to_policies(&mut d, &all_cel()).contains(&"exemption-unknown-rule"));
    assert!(!actions(&d).iter().any(|(r, _)| *r == "exemption-unknown-rule"), "{:?}", actions(&d));
}

#[test]
fn a_pdb_that_blocks_by_itself_is_left_to_its_policy_and_one_too_tight_for_its_workload_is_not() {
    let pdb = |budget: &str| {
        format!(
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: web, namespace: default}}\nspec:\n  \
             {budget}\n  selector: {{matchLabels: {{app: web}}}}\n"
        )
    };
    let one_replica = deployment("web", "{app: web}", "", "").replace("replicas: 3", "replicas: 1");
    let mut d = decided(&pdb("maxUnavailable: 0"), &one_replica, false, &Config::default());
    assert!(leave_to_policies(&mut d, &all_cel()).contains(&"pdb-blocks-eviction"));
    let mut d = decided(&pdb("minAvailable: 1"), &one_replica, false, &Config::default());
    assert!(actions(&d).contains(&("pdb-blocks-eviction", Decision::Deny)), "{:?}", actions(&d));
    assert!(leave_to_policies(&mut d, &all_cel()).is_empty());
    assert!(actions(&d).contains(&("pdb-blocks-eviction", Decision::Deny)));
}

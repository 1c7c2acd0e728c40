//! The HPA family: `hpa-replica-bounds`, `hpa-target-missing`.

use crate::core::finding::{Decision, Finding};
use crate::core::model::{Kind, ObjectRef};
use crate::core::testing::{findings, of_rule};
use rstest::rstest;

/// An HPA `web` over `<kind> <target>` (apiVersion `api`); `min: None` leaves `minReplicas` out.
fn hpa_over(api: &str, kind: &str, target: &str, min: Option<i32>, max: i32) -> String {
    let min = min.map(|m| format!("  minReplicas: {m}\n")).unwrap_or_default();
    format!(
        "apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: web
spec:
  scaleTargetRef:
    apiVersion: {api}
    kind: {kind}
    name: {target}
{min}  maxReplicas: {max}
"
    )
}

fn hpa(min: Option<i32>, max: i32) -> String {
    hpa_over("apps/v1", "Deployment", "web", min, max)
}

fn workload(kind: &str, name: &str, namespace: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: {kind}
metadata:
  name: {name}
  namespace: {namespace}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers: [{{name: c, image: nginx}}]
"
    )
}

fn web() -> String {
    workload("Deployment", "web", "default")
}

fn none(fs: &[Finding], rule: &str) {
    assert!(of_rule(fs, rule).is_empty(), "expected no {rule} finding, got {fs:#?}");
}

fn one<'a>(fs: &'a [Finding], rule: &str) -> &'a Finding {
    let found = of_rule(fs, rule);
    assert_eq!(found.len(), 1, "expected exactly one {rule} finding, got {fs:#?}");
    found[0]
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for p in parts {
        assert!(message.contains(p), "message lacks {p:?}:\n{message}");
    }
}

// ---------------------------------------------------------------------------------------------
// hpa-replica-bounds

#[test]
fn min_above_max_is_denied_naming_both_numbers() {
    let fs = findings(&hpa(Some(5), 3), &web(), false);
    let f = one(&fs, "hpa-replica-bounds");
    assert_eq!(f.action, Decision::Deny);
    assert_eq!(f.path, "spec.minReplicas");
    assert_eq!(f.object, ObjectRef::new(Kind::HorizontalPodAutoscaler, "default", "web"));
    assert_mentions(
        &f.message(),
        &[
            "HorizontalPodAutoscaler default/web",
            "minReplicas 5 above maxReplicas 3",
            "apiserver refuses it",
            "Fix:",
            "maxReplicas to at least 5",
            "minReplicas to at most 3",
        ],
    );
}

#[test]
fn min_zero_is_denied() {
    let fs = findings(&hpa(Some(0), 3), &web(), false);
    let f = one(&fs, "hpa-replica-bounds");
    assert_eq!(f.action, Decision::Deny);
    assert_eq!(f.path, "spec.minReplicas");
    assert_mentions(&f.message(), &["minReplicas 0, below 1", "Fix:", "minReplicas to at least 1"]);
}

#[test]
fn min_negative_and_above_max_is_denied_once_for_each_reason() {
    // -1 < 1 and -1 ≤ max: only the floor is wrong.
    let fs = findings(&hpa(Some(-1), 3), &web(), false);
    assert_mentions(&one(&fs, "hpa-replica-bounds").what, &["minReplicas -1, below 1"]);
}

#[rstest]
#[case::min_equals_max(Some(3), 3)]
#[case::min_below_max(Some(1), 3)]
#[case::min_1_max_1(Some(1), 1)]
#[case::min_unset_defaults_to_1(None, 3)]
#[case::min_unset_max_1(None, 1)]
fn valid_bounds_are_silent(#[case] min: Option<i32>, #[case] max: i32) {
    none(&findings(&hpa(min, max), &web(), false), "hpa-replica-bounds");
}

#[test]
fn boundary_one_above_max() {
    let f = findings(&hpa(Some(4), 3), &web(), false);
    assert_mentions(&one(&f, "hpa-replica-bounds").what, &["minReplicas 4 above maxReplicas 3"]);
}

#[test]
fn bounds_are_checked_on_any_view_and_without_the_target() {
    // hpa-replica-bounds serves `check`: it needs nothing from the view.
    one(&findings(&hpa(Some(5), 3), "", false), "hpa-replica-bounds");
    one(&findings(&hpa(Some(5), 3), "", true), "hpa-replica-bounds");
}

#[test]
fn autoscaling_v1_bounds_are_checked_too() {
    let v1 = "apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 5
  maxReplicas: 3
  targetCPUUtilizationPercentage: 80
";
    let f = findings(v1, &web(), false);
    assert_mentions(&one(&f, "hpa-replica-bounds").what, &["minReplicas 5 above maxReplicas 3"]);
}

// ---------------------------------------------------------------------------------------------
// hpa-target-missing

#[test]
fn missing_target_warns_on_a_complete_view() {
    let fs = findings(&hpa(Some(2), 5), "", true);
    let f = one(&fs, "hpa-target-missing");
    assert_eq!(f.action, Decision::Warn);
    assert_eq!(f.path, "spec.scaleTargetRef");
    assert_eq!(f.related, vec![ObjectRef::new(Kind::Deployment, "default", "web")]);
    assert_mentions(
        &f.message(),
        &[
            "HorizontalPodAutoscaler default/web scales Deployment web",
            "no such Deployment in namespace default",
            "Fix:",
            "scaleTargetRef",
        ],
    );
}

#[test]
fn present_target_is_silent() {
    none(&findings(&hpa(Some(2), 5), &web(), true), "hpa-target-missing");
    let sts = workload("StatefulSet", "db", "default");
    none(&findings(&hpa_over("apps/v1", "StatefulSet", "db", Some(2), 5), &sts, true), "hpa-target-missing");
}

#[test]
fn incomplete_view_never_asserts_absence() {
    none(&findings(&hpa(Some(2), 5), "", false), "hpa-target-missing");
}

#[rstest]
#[case::a_deployment_of_that_name_in_another_namespace(workload("Deployment", "web", "other"), "Deployment")]
#[case::a_deployment_named_web_is_not_a_statefulset(web(), "StatefulSet")]
#[case::another_name(workload("Deployment", "api", "default"), "Deployment")]
fn a_workload_that_is_not_the_target_does_not_count(#[case] view_yaml: String, #[case] kind: &str) {
    let fs = findings(&hpa_over("apps/v1", kind, "web", Some(2), 5), &view_yaml, true);
    let f = one(&fs, "hpa-target-missing");
    assert_mentions(&f.what, &[&format!("scales {kind} web"), &format!("no such {kind} in namespace default")]);
}

#[rstest]
#[case::replica_set("apps/v1", "ReplicaSet")]
#[case::argo_rollout("argoproj.io/v1alpha1", "Rollout")]
#[case::custom_kind_called_deployment("example.com/v1", "Deployment")]
fn targets_other_than_workloads_are_not_checked(#[case] api: &str, #[case] kind: &str) {
    none(&findings(&hpa_over(api, kind, "web", Some(2), 5), "", true), "hpa-target-missing");
}

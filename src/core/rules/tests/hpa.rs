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
    // From 1.37 the apiserver may store it: the message says when, rather than that it never does.
    assert_mentions(
        &f.message(),
        &["HPAScaleToZero", "on by default from Kubernetes 1.37", "object or external metric"],
    );
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

// ---------------------------------------------------------------------------------------------
// hpa-replicas-conflict

mod replicas_conflict {
    use super::*;
    use crate::core::config::Config;
    use crate::core::model::{ReplicasSource, Subject};
    use crate::core::rules;
    use crate::core::testing::{edit, subject, view, workload as pod_workload};

    const RULE: &str = "hpa-replicas-conflict";

    fn dep() -> ObjectRef {
        ObjectRef::new(Kind::Deployment, "default", "web")
    }

    fn the_hpa() -> ObjectRef {
        ObjectRef::new(Kind::HorizontalPodAutoscaler, "default", "web")
    }

    /// Deployment web with `replicas` (a `spec` line, or "" for none).
    fn web_with(replicas: &str) -> String {
        pod_workload("Deployment", "web", replicas, "")
    }

    fn evaluate(s: &Subject, view_yaml: &str) -> Vec<Finding> {
        rules::evaluate(s, &view(view_yaml, false), &Config::default()).findings
    }

    /// `yaml` as the apiserver has it: a uid and resourceVersion, and `annotations` (a flow mapping).
    fn stored(yaml: &str, annotations: &str) -> String {
        edit(
            yaml,
            "  name: web\n",
            &format!(
                "  name: web\n  uid: 0f1e2d3c-aaaa-bbbb-cccc-000000000001\n  resourceVersion: '4711'\n  annotations: {annotations}\n"
            ),
        )
    }

    fn last_applied(spec: &str) -> String {
        let manifest = format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"web","namespace":"default"}},"spec":{{{spec}"selector":{{"matchLabels":{{"app":"web"}}}}}}}}"#
        );
        format!("{{kubectl.kubernetes.io/last-applied-configuration: '{manifest}'}}")
    }

    #[test]
    fn a_manifest_that_sets_replicas_under_an_hpa_warns_on_the_workload() {
        let fs = findings(&web_with("replicas: 3"), &hpa(Some(2), 10), false);
        let f = one(&fs, RULE);
        assert_eq!(f.action, Decision::Warn);
        assert_eq!(f.path, "spec.replicas");
        assert_eq!(f.object, dep());
        assert_eq!(f.anchor, dep());
        assert_eq!(f.related, vec![the_hpa()]);
        assert_mentions(
            &f.message(),
            &[
                "Deployment default/web sets spec.replicas: 3 while HPA web (min 2, max 10) scales it",
                "every apply of this manifest (kubectl apply, a Helm upgrade, an Argo CD or Flux sync) resets the \
                 count the HPA chose to 3",
                "Fix: remove spec.replicas from the workload's manifest",
                "kubectl apply edit-last-applied",
            ],
        );
    }

    #[test]
    fn a_statefulset_too() {
        let sts = pod_workload("StatefulSet", "db", "replicas: 2", "");
        let fs = findings(&sts, &hpa_over("apps/v1", "StatefulSet", "db", Some(2), 4), false);
        let f = one(&fs, RULE);
        assert_eq!(f.object, ObjectRef::new(Kind::StatefulSet, "default", "db"));
        assert_mentions(&f.what, &["StatefulSet default/db sets spec.replicas: 2"]);
    }

    #[test]
    fn a_manifest_without_replicas_is_silent_from_both_sides() {
        none(&findings(&web_with(""), &hpa(Some(2), 10), false), RULE);
        none(&findings(&hpa(Some(2), 10), &web_with(""), false), RULE);
    }

    #[rstest]
    #[case::no_hpa("")]
    #[case::an_hpa_of_another_deployment(hpa_over("apps/v1", "Deployment", "api", Some(2), 5))]
    #[case::an_hpa_of_a_statefulset_of_that_name(hpa_over("apps/v1", "StatefulSet", "web", Some(2), 5))]
    fn replicas_without_an_hpa_targeting_it_are_silent(#[case] view_yaml: String) {
        none(&findings(&web_with("replicas: 3"), &view_yaml, false), RULE);
    }

    #[test]
    fn every_hpa_targeting_it_is_named() {
        let second = hpa(Some(1), 4).replace("name: web\nspec", "name: web-2\nspec");
        let fs = findings(&web_with("replicas: 3"), &format!("{}\n---\n{second}", hpa(Some(2), 10)), false);
        let f = one(&fs, RULE);
        assert_mentions(&f.what, &["while HPA web (min 2, max 10) and HPA web-2 (min 1, max 4) scale it"]);
        assert_eq!(f.related.len(), 2);
    }

    #[test]
    fn found_from_the_hpa_side_anchored_at_the_workload() {
        let fs = findings(&hpa(Some(2), 10), &web_with("replicas: 3"), false);
        let f = one(&fs, RULE);
        assert_eq!(f.action, Decision::Warn);
        assert_eq!(f.object, the_hpa());
        assert_eq!(f.path, "spec.scaleTargetRef");
        assert_eq!(f.related, vec![dep()]);
        assert_eq!(f.anchor, dep(), "the fix is in the workload's manifest");
        assert_mentions(
            &f.message(),
            &[
                "HorizontalPodAutoscaler default/web (min 2, max 10) scales Deployment default/web, whose manifest sets \
                 spec.replicas: 3",
                "resets the count this HPA chose to 3",
                "Fix: remove spec.replicas",
            ],
        );
    }

    #[test]
    fn hpa_side_silent_without_the_target_in_view() {
        none(&findings(&hpa(Some(2), 10), "", false), RULE);
        none(&findings(&hpa(Some(2), 10), "", true), RULE);
    }

    // ---- what the webhook sees: defaulted objects ----

    #[test]
    fn an_object_from_the_apiserver_has_replicas_whether_set_or_not() {
        // spec.replicas present (defaulted), no last-applied configuration: not known to be set.
        let s = subject(&stored(&web_with("replicas: 1"), "{}"));
        let Subject::Workload(w) = &s else { panic!() };
        assert_eq!(w.replicas_source, ReplicasSource::Unset);
        none(&evaluate(&s, &hpa(Some(2), 10)), RULE);
        // kubectl apply's annotation says the manifest sets 3 (the HPA has since made it 9).
        let s = subject(&stored(&web_with("replicas: 9"), &last_applied(r#""replicas":3,"#)));
        let Subject::Workload(w) = &s else { panic!() };
        assert_eq!(w.replicas_source, ReplicasSource::Manifest(3));
        let fs = evaluate(&s, &hpa(Some(2), 10));
        assert_mentions(&one(&fs, RULE).what, &["sets spec.replicas: 3", "resets the count the HPA chose to 3"]);
        // The annotation's manifest leaves replicas out, or sets null, or is not JSON.
        for annotations in [
            last_applied(""),
            last_applied(r#""replicas":null,"#),
            "{kubectl.kubernetes.io/last-applied-configuration: '{\"replicas\": 3'}".to_string(),
        ] {
            let s = subject(&stored(&web_with("replicas: 9"), &annotations));
            let Subject::Workload(w) = &s else { panic!() };
            assert_eq!(w.replicas_source, ReplicasSource::Unset, "{annotations}");
        }
    }

    #[test]
    fn from_the_hpa_side_the_live_workload_is_judged_by_its_last_applied_manifest() {
        let live = stored(&web_with("replicas: 9"), &last_applied(r#""replicas":3,"#));
        let fs = findings(&hpa(Some(2), 10), &live, true);
        assert_mentions(&one(&fs, RULE).what, &["whose manifest sets spec.replicas: 3", "chose to 3"]);
        let live = stored(&web_with("replicas: 9"), &last_applied(""));
        none(&findings(&hpa(Some(2), 10), &live, true), RULE);
    }

    /// The webhook's subject: defaulted, then what the UPDATE did to the count.
    fn admitted(yaml: &str, before: Option<i32>) -> Subject {
        let mut s = subject(yaml);
        let Subject::Workload(w) = &mut s else { panic!() };
        w.admitted_replicas(before);
        s
    }

    #[test]
    fn at_admission_an_update_that_changes_the_count_under_an_hpa_warns() {
        let s = admitted(&stored(&web_with("replicas: 3"), "{}"), Some(9));
        let fs = evaluate(&s, &hpa(Some(2), 10));
        let f = one(&fs, RULE);
        assert_eq!(f.path, "spec.replicas");
        assert_mentions(
            &f.message(),
            &[
                "this write sets spec.replicas of Deployment default/web to 3 (it was 9) while HPA web (min 2, max 10) scales it",
                "resets the count the HPA chose",
                "Fix: remove spec.replicas",
            ],
        );
    }

    #[test]
    fn at_admission_boundaries() {
        // The same count as before and no last-applied replicas: nothing says the manifest sets it.
        none(&evaluate(&admitted(&stored(&web_with("replicas: 9"), "{}"), Some(9)), &hpa(Some(2), 10)), RULE);
        // A CREATE (no old count), defaulted to 1: the same.
        none(&evaluate(&admitted(&stored(&web_with("replicas: 1"), "{}"), None), &hpa(Some(2), 10)), RULE);
        // A CREATE by kubectl apply of a manifest that sets it: the annotation says so.
        let s = admitted(&stored(&web_with("replicas: 3"), &last_applied(r#""replicas":3,"#)), None);
        one(&evaluate(&s, &hpa(Some(2), 10)), RULE);
        // An unchanged count whose last-applied manifest sets it: the next apply will reset it.
        let s = admitted(&stored(&web_with("replicas: 9"), &last_applied(r#""replicas":3,"#)), Some(9));
        assert_mentions(&one(&evaluate(&s, &hpa(Some(2), 10)), RULE).what, &["sets spec.replicas: 3"]);
        // A changed count with no HPA: silent.
        none(&evaluate(&admitted(&stored(&web_with("replicas: 3"), "{}"), Some(9)), ""), RULE);
    }

    /// A KEDA ScaledObject `web` on Deployment web (unset counts: 0 and 100).
    fn scaled_object() -> String {
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: web\n  namespace: default\nspec:\n  \
         scaleTargetRef:\n    name: web\n  triggers:\n  - type: cpu\n    metadata: {value: '60'}\n"
            .to_string()
    }

    #[test]
    fn a_scaled_object_owns_the_count_too_from_either_side() {
        let so = ObjectRef::new(Kind::ScaledObject, "default", "web");
        let fs = findings(&web_with("replicas: 3"), &scaled_object(), false);
        let f = one(&fs, RULE);
        assert_eq!((f.path.as_str(), f.related.clone()), ("spec.replicas", vec![so.clone()]));
        assert_mentions(
            &f.message(),
            &[
                "Deployment default/web sets spec.replicas: 3 while ScaledObject web (min 0, max 100) scales it",
                "resets the count the autoscaler chose to 3",
                "let the autoscaler own the count",
            ],
        );
        let fs = findings(&scaled_object(), &web_with("replicas: 3"), false);
        let f = one(&fs, RULE);
        assert_eq!((f.object.clone(), f.anchor.clone(), f.path.as_str()), (so, dep(), "spec.scaleTargetRef"));
        assert_mentions(
            &f.message(),
            &[
                "ScaledObject default/web (min 0, max 100) scales Deployment default/web",
                "this ScaledObject chose to 3",
            ],
        );
        none(&findings(&scaled_object(), &web_with(""), false), RULE);
        // With the HPA KEDA makes for it, both are named.
        let keda_hpa = hpa(Some(1), 100).replace("name: web\nspec", "name: keda-hpa-web\nspec");
        let fs = findings(&web_with("replicas: 3"), &format!("{}\n---\n{keda_hpa}", scaled_object()), false);
        assert_mentions(
            &one(&fs, RULE).what,
            &["while HPA keda-hpa-web (min 1, max 100) and ScaledObject web (min 0, max 100) scale it"],
        );
    }

    // ---- server-side apply: who owns spec.replicas (metadata.managedFields) ----

    /// A managedFields entry: `manager`, `operation`, `subresource` ("" for none) and its field
    /// set (a flow mapping).
    fn entry(manager: &str, operation: &str, subresource: &str, fields: &str) -> String {
        let sub = if subresource.is_empty() { String::new() } else { format!(", subresource: {subresource}") };
        format!(
            "  - {{manager: {manager}, operation: {operation}{sub}, apiVersion: apps/v1, fieldsType: FieldsV1, \
             fieldsV1: {fields}}}\n"
        )
    }

    const OWNS_REPLICAS: &str = "{'f:spec': {'f:replicas': {}, 'f:template': {}}}";
    const TEMPLATE_ONLY: &str = "{'f:spec': {'f:selector': {}, 'f:template': {}}}";

    /// Deployment web as the apiserver holds it, with `replicas` and these managedFields entries.
    fn managed(replicas: i32, entries: &[String]) -> String {
        edit(
            &stored(&web_with(&format!("replicas: {replicas}")), "{}"),
            "  annotations: {}\n",
            &format!("  annotations: {{}}\n  managedFields:\n{}", entries.concat()),
        )
    }

    fn source(yaml: &str) -> ReplicasSource {
        let Subject::Workload(w) = subject(yaml) else { panic!("a workload") };
        w.replicas_source
    }

    #[rstest]
    #[case::argo_cd("argocd-controller")]
    #[case::flux("kustomize-controller")]
    #[case::helm_4("helm")]
    #[case::kubectl_server_side("kubectl")]
    #[case::any_name("my-own-pipeline")]
    fn an_apply_manager_owning_replicas_warns_whatever_its_name(#[case] manager: &str) {
        let yaml = managed(3, &[entry(manager, "Apply", "", OWNS_REPLICAS)]);
        assert_eq!(source(&yaml), ReplicasSource::Applied { replicas: 3, manager: manager.into() });
        let fs = evaluate(&subject(&yaml), &hpa(Some(2), 10));
        let f = one(&fs, RULE);
        assert_eq!((f.action, f.path.as_str(), f.related.clone()), (Decision::Warn, "spec.replicas", vec![the_hpa()]));
        assert_mentions(
            &f.message(),
            &[
                &format!(
                    "Deployment default/web sets spec.replicas: 3 by server-side apply (field manager {manager}) while \
                     HPA web (min 2, max 10) scales it"
                ),
                "every apply of this manifest (kubectl apply, a Helm upgrade, an Argo CD or Flux sync) resets the \
                 count the HPA chose to 3",
                "Fix: remove spec.replicas from the workload's manifest",
                &format!("Field manager {manager} owns spec.replicas by server-side apply"),
                "kubectl apply --server-side --field-manager=handover-to-hpa",
            ],
        );
        assert!(!f.message().contains("edit-last-applied"), "no last-applied configuration here: {}", f.message());
    }

    #[rstest]
    #[case::an_update_manager_only(&[entry("kubectl-client-side-apply", "Update", "", OWNS_REPLICAS)])]
    #[case::the_hpa_controller_through_scale(&[
        entry("kustomize-controller", "Apply", "", TEMPLATE_ONLY),
        entry("kube-controller-manager", "Update", "scale", "{'f:spec': {'f:replicas': {}}}"),
    ])]
    #[case::kubectl_scale(&[entry("kubectl", "Update", "scale", "{'f:spec': {'f:replicas': {}}}")])]
    #[case::an_apply_through_scale(&[entry("keda", "Apply", "scale", "{'f:spec': {'f:replicas': {}}}")])]
    #[case::an_apply_manager_without_replicas(&[entry("argocd-controller", "Apply", "", TEMPLATE_ONLY)])]
    #[case::status_writes(&[entry("kube-controller-manager", "Update", "status", "{'f:status': {'f:replicas': {}}}")])]
    fn no_apply_owner_of_replicas_is_silent(#[case] entries: &[String]) {
        let yaml = managed(7, entries);
        assert_eq!(source(&yaml), ReplicasSource::Unset);
        none(&evaluate(&subject(&yaml), &hpa(Some(2), 10)), RULE);
        none(&findings(&hpa(Some(2), 10), &yaml, true), RULE);
    }

    #[test]
    fn an_apply_owner_beside_an_update_owner_warns() {
        // Both set the same count (a create by kubectl create, then an apply of the same number).
        let yaml = managed(
            4,
            &[
                entry("kubectl-create", "Update", "", OWNS_REPLICAS),
                entry("kustomize-controller", "Apply", "", OWNS_REPLICAS),
            ],
        );
        assert_eq!(source(&yaml), ReplicasSource::Applied { replicas: 4, manager: "kustomize-controller".into() });
        assert_mentions(
            &one(&evaluate(&subject(&yaml), &hpa(Some(2), 10)), RULE).what,
            &["sets spec.replicas: 4 by server-side apply (field manager kustomize-controller)"],
        );
    }

    #[test]
    fn an_apply_owner_wins_over_the_last_applied_manifest() {
        // Migrated from client-side apply: the annotation is stale, the Apply entry is current.
        let yaml = edit(
            &managed(5, &[entry("argocd-controller", "Apply", "", OWNS_REPLICAS)]),
            "  annotations: {}\n",
            &format!("  annotations: {}\n", last_applied(r#""replicas":3,"#)),
        );
        assert_eq!(source(&yaml), ReplicasSource::Applied { replicas: 5, manager: "argocd-controller".into() });
    }

    #[test]
    fn from_the_hpa_side_an_apply_owner_names_its_manager() {
        let live = managed(3, &[entry("kustomize-controller", "Apply", "", OWNS_REPLICAS)]);
        let fs = findings(&hpa(Some(2), 10), &live, true);
        let f = one(&fs, RULE);
        assert_eq!((f.path.as_str(), f.anchor.clone()), ("spec.scaleTargetRef", dep()));
        assert_mentions(
            &f.message(),
            &[
                "HorizontalPodAutoscaler default/web (min 2, max 10) scales Deployment default/web, whose manifest sets \
                 spec.replicas: 3 by server-side apply (field manager kustomize-controller)",
                "every apply of that manifest (kubectl apply, a Helm upgrade, an Argo CD or Flux sync) resets the count \
                 this HPA chose to 3",
                "Field manager kustomize-controller owns spec.replicas by server-side apply",
            ],
        );
    }

    #[test]
    fn at_admission_a_server_side_apply_is_judged_by_its_managed_fields() {
        // A CREATE by server-side apply (no uid yet at admission): the Apply entry says it.
        let create = |entries: &[String]| {
            let yaml = edit(
                &web_with("replicas: 3"),
                "  name: web\n",
                &format!("  name: web\n  managedFields:\n{}", entries.concat()),
            );
            admitted(&yaml, None)
        };
        let s = create(&[entry("argocd-controller", "Apply", "", OWNS_REPLICAS)]);
        assert_mentions(
            &one(&evaluate(&s, &hpa(Some(2), 10)), RULE).what,
            &["sets spec.replicas: 3 by server-side apply"],
        );
        none(&evaluate(&create(&[entry("argocd-controller", "Apply", "", TEMPLATE_ONLY)]), &hpa(Some(2), 10)), RULE);
        // The sync that resets the count the HPA chose: the write and its manager are named.
        let s = admitted(&managed(3, &[entry("kustomize-controller", "Apply", "", OWNS_REPLICAS)]), Some(8));
        let Subject::Workload(w) = &s else { panic!() };
        assert_eq!(
            w.replicas_source,
            ReplicasSource::Changed { from: 8, applier: Some("kustomize-controller".into()) }
        );
        let f = one(&evaluate(&s, &hpa(Some(2), 10)), RULE).clone();
        assert_mentions(
            &f.message(),
            &[
                "this write, a server-side apply by field manager kustomize-controller, sets spec.replicas of \
                 Deployment default/web to 3 (it was 8)",
                "hand the field over first",
            ],
        );
        // An unchanged count the Apply manager owns: the next sync will reset it.
        let s = admitted(&managed(8, &[entry("kustomize-controller", "Apply", "", OWNS_REPLICAS)]), Some(8));
        assert_mentions(
            &one(&evaluate(&s, &hpa(Some(2), 10)), RULE).what,
            &["sets spec.replicas: 8 by server-side apply"],
        );
        // The HPA's own scale write took the field: an unrelated UPDATE is silent.
        let scaled = managed(
            8,
            &[
                entry("kustomize-controller", "Apply", "", TEMPLATE_ONLY),
                entry("kube-controller-manager", "Update", "scale", "{'f:spec': {'f:replicas': {}}}"),
            ],
        );
        none(&evaluate(&admitted(&scaled, Some(8)), &hpa(Some(2), 10)), RULE);
    }

    #[test]
    fn never_on_a_scale_write() {
        // The HPA controller's own writes go through deployments/scale.
        let view_yaml = format!("{}\n---\n{}", web_with("replicas: 3"), hpa(Some(2), 10));
        let s = Subject::Scale { target: dep(), replicas: 7 };
        none(&evaluate(&s, &view_yaml), RULE);
    }
}

//! webhook-fail-closed-unavailable: from the webhook configuration's, the Service's, the
//! workload's, its autoscaler's and a scale write's side.

use crate::core::config::Config;
use crate::core::finding::{Decision, Finding};
use crate::core::model::{Kind, ObjectRef, Subject};
use crate::core::rules;
use crate::core::testing::*;
use rstest::rstest;

const RULE: &str = "webhook-fail-closed-unavailable";

/// A hostname spread against `app: <app>` pods (keeps replicas apart).
fn spread(app: &str) -> String {
    format!(
        "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  whenUnsatisfiable: \
         ScheduleAnyway\n  labelSelector:\n    matchLabels:\n      app: {app}\n"
    )
}

/// The webhook's backend Deployment `policy` (pods `app: policy`), `replicas` and its pod spec.
fn backend(replicas: i32, pod: &str) -> String {
    deployment("policy", &format!("replicas: {replicas}"), pod)
}

/// Service `name` selecting `app: <app>` (no selector when `app` is empty).
fn service(name: &str, app: &str) -> String {
    let selector = if app.is_empty() { String::new() } else { format!("  selector:\n    app: {app}\n") };
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{selector}  ports:\n  \
         - port: 443\n    targetPort: 9443\n"
    )
}

/// One webhook `name` calling Service default/`svc`, on Pod CREATE; `policy` is its
/// failurePolicy line (empty: unset).
fn hook(name: &str, svc: &str, policy: &str) -> String {
    let policy = if policy.is_empty() { String::new() } else { format!("  failurePolicy: {policy}\n") };
    format!(
        "- name: {name}\n  admissionReviewVersions: [v1]\n  sideEffects: None\n{policy}  clientConfig:\n    service:\n      \
         name: {svc}\n      namespace: default\n      path: /validate\n  rules:\n  - apiGroups: [\"\"]\n    apiVersions: \
         [v1]\n    resources: [pods]\n    operations: [CREATE]\n"
    )
}

fn config(kind: &str, name: &str, hooks: &[String]) -> String {
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}\nwebhooks:\n{}",
        hooks.concat()
    )
}

fn vwc(hooks: &[String]) -> String {
    config("ValidatingWebhookConfiguration", "policy", hooks)
}

fn pdb(budget: &str) -> String {
    format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: policy\n  namespace: default\nspec:\n  \
         {budget}\n  selector:\n    matchLabels:\n      app: policy\n"
    )
}

fn scaled_object(min: Option<i32>) -> String {
    let min = min.map(|m| format!("  minReplicaCount: {m}\n")).unwrap_or_default();
    format!(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: policy\n  namespace: default\nspec:\n  \
         scaleTargetRef:\n    name: policy\n{min}  maxReplicaCount: 5\n  triggers:\n  - type: cpu\n    metadata: \
         {{value: \"60\"}}\n"
    )
}

fn vwc_id() -> ObjectRef {
    ObjectRef::new(Kind::ValidatingWebhookConfiguration, "", "policy")
}
fn svc_id() -> ObjectRef {
    ObjectRef::new(Kind::Service, "default", "policy-webhook")
}
fn dep_id() -> ObjectRef {
    ObjectRef::new(Kind::Deployment, "default", "policy")
}

fn rule(f: &[Finding]) -> Vec<&Finding> {
    of_rule(f, RULE)
}

/// What a sound backend has: 2 replicas on different nodes and a PDB letting one go.
fn sound() -> String {
    docs(&[&backend(2, &spread("policy")), &pdb("maxUnavailable: 1")])
}

// ---- the webhook configuration's side ----

#[test]
fn a_fail_closed_webhook_on_one_replica_warns_on_the_configuration() {
    let view = docs(&[&backend(1, ""), &service("policy-webhook", "policy")]);
    let f = findings(&vwc(&[hook("pods.policy.example.com", "policy-webhook", "")]), &view, false);
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    let w = w[0];
    assert_eq!(w.action, Decision::Warn);
    assert_eq!(w.path, "webhooks[0].failurePolicy");
    assert_eq!((w.object.clone(), w.anchor.clone()), (vwc_id(), vwc_id()));
    assert_eq!(w.related, vec![svc_id(), dep_id()]);
    for part in [
        "ValidatingWebhookConfiguration/policy: webhook pods.policy.example.com (failurePolicy Fail) calls Service \
         default/policy-webhook (selector app=policy)",
        "the only workload behind it is Deployment policy (replicas 1): it runs 1 replica at its floor",
        "the apiserver refuses every request it intercepts: pods CREATE in every namespace.",
    ] {
        assert!(w.what.contains(part), "{part:?} not in: {}", w.what);
    }
    assert!(
        w.fix.contains("run at least 2 replicas of Deployment default/policy") && w.fix.contains("maxUnavailable: 1"),
        "{}",
        w.fix
    );
    assert!(w.fix.contains("set failurePolicy: Ignore"), "{}", w.fix);
}

#[rstest]
#[case::unset_is_fail("", true)]
#[case::fail("Fail", true)]
#[case::ignore("Ignore", false)]
fn only_fail_closed_webhooks_count(#[case] policy: &str, #[case] fires: bool) {
    let view = docs(&[&backend(1, ""), &service("policy-webhook", "policy")]);
    let f = findings(&vwc(&[hook("h", "policy-webhook", policy)]), &view, false);
    assert_eq!(rule(&f).len(), usize::from(fires), "{f:#?}");
}

#[test]
fn a_sound_backend_does_not_warn() {
    let view = docs(&[&sound(), &service("policy-webhook", "policy")]);
    let f = findings(&vwc(&[hook("h", "policy-webhook", "")]), &view, true);
    assert!(rule(&f).is_empty(), "{f:#?}");
}

#[rstest]
#[case::two_replicas_nothing_apart(
    docs(&[&backend(2, ""), &pdb("maxUnavailable: 1")]),
    "it runs at least 2 replicas but nothing keeps them on different nodes",
    "keep the replicas of Deployment default/policy on different nodes"
)]
#[case::no_pdb(
    backend(2, &spread("policy")),
    "no PodDisruptionBudget covers it",
    "cover Deployment default/policy with one PodDisruptionBudget of maxUnavailable: 1 (selector app=policy)"
)]
#[case::pdb_allows_nothing(
    docs(&[&backend(2, &spread("policy")), &pdb("minAvailable: 2")]),
    "PodDisruptionBudget policy (minAvailable 2) allows no eviction at its floor",
    "cover Deployment default/policy with one PodDisruptionBudget"
)]
#[case::pdb_keeps_nothing(
    docs(&[&backend(2, &spread("policy")), &pdb("maxUnavailable: 100%")]),
    "PodDisruptionBudget policy (maxUnavailable 100%) keeps none of its pods up",
    "cover Deployment default/policy with one PodDisruptionBudget"
)]
#[case::scaled_to_zero_by_keda(
    docs(&[&backend(3, &spread("policy")), &pdb("maxUnavailable: 1"), &scaled_object(None)]),
    "Deployment policy (replicas 3, ScaledObject policy min 0 max 5): it can run 0 replicas",
    "run at least 2 replicas of Deployment default/policy"
)]
#[case::hpa_floor_one(
    docs(&[&backend(3, &spread("policy")), &pdb("maxUnavailable: 1"), &hpa("policy", "policy", None, 5)]),
    "Deployment policy (replicas 3, HPA policy min 1 max 5): it runs 1 replica at its floor",
    "run at least 2 replicas"
)]
fn each_weakness_is_named_with_its_fix(#[case] backend: String, #[case] why: &str, #[case] fix: &str) {
    let view = docs(&[&backend, &service("policy-webhook", "policy")]);
    let f = findings(&vwc(&[hook("h", "policy-webhook", "")]), &view, false);
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    assert!(w[0].what.contains(why), "{why:?} not in: {}", w[0].what);
    assert!(w[0].fix.contains(fix), "{fix:?} not in: {}", w[0].fix);
}

#[test]
fn an_autoscaler_floor_of_two_makes_one_replica_enough() {
    for autoscaler in [hpa("policy", "policy", Some(2), 5), scaled_object(Some(2))] {
        let view = docs(&[
            &backend(1, &spread("policy")),
            &pdb("maxUnavailable: 1"),
            &autoscaler,
            &service("policy-webhook", "policy"),
        ]);
        let f = findings(&vwc(&[hook("h", "policy-webhook", "")]), &view, false);
        assert!(rule(&f).is_empty(), "{autoscaler}: {f:#?}");
    }
}

#[rstest]
#[case::no_selector(service("policy-webhook", ""))]
#[case::selects_no_workload(service("policy-webhook", "someone-else"))]
#[case::not_in_the_view(String::new())]
fn a_backend_that_cannot_be_told_is_not_judged(#[case] svc: String) {
    let view = docs(&[&backend(1, ""), &svc]);
    let f = findings(&vwc(&[hook("h", "policy-webhook", "")]), &view, true);
    assert!(rule(&f).is_empty(), "{f:#?}");
}

#[test]
fn one_sound_workload_behind_the_service_is_enough() {
    // A second Deployment whose pods the Service selects too (app: policy, tier: b).
    let other = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: policy-b\n  namespace: default\nspec:\n  \
                 replicas: 2\n  selector:\n    matchLabels:\n      tier: b\n  template:\n    metadata:\n      labels:\n        \
                 app: policy\n        tier: b\n    spec:\n      topologySpreadConstraints:\n      - maxSkew: 1\n        \
                 topologyKey: kubernetes.io/hostname\n        whenUnsatisfiable: ScheduleAnyway\n        labelSelector:\n          \
                 matchLabels:\n            tier: b\n      containers:\n      - name: app\n        image: nginx\n";
    let budget = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: b\n  namespace: default\nspec:\n  \
                  maxUnavailable: 1\n  selector:\n    matchLabels:\n      tier: b\n";
    let view = docs(&[&backend(1, ""), other, budget, &service("policy-webhook", "policy")]);
    let f = findings(&vwc(&[hook("h", "policy-webhook", "")]), &view, false);
    assert!(rule(&f).is_empty(), "{f:#?}");
    // Without its PDB neither is sound: both are named.
    let view = docs(&[&backend(1, ""), other, &service("policy-webhook", "policy")]);
    let f = findings(&vwc(&[hook("h", "policy-webhook", "")]), &view, false);
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    assert!(w[0].what.contains("the workloads behind it are Deployment policy (replicas 1)"), "{}", w[0].what);
    assert!(w[0].what.contains("Deployment policy-b (replicas 2): no PodDisruptionBudget covers it"), "{}", w[0].what);
}

#[test]
fn webhooks_sharing_a_backend_make_one_finding_naming_them_all() {
    let names = ["a.kb.io", "b.kb.io", "c.kb.io", "d.kb.io", "e.kb.io"];
    // a and b only in some namespaces: the others, intercepting everywhere, are detailed first.
    let scoped = |h: String| format!("{h}  namespaceSelector:\n    matchLabels: {{kueue: managed}}\n");
    let mut hooks: Vec<String> = names.iter().map(|n| hook(n, "policy-webhook", "Fail")).collect();
    hooks[0] = scoped(hooks[0].clone());
    hooks[1] = scoped(hooks[1].clone());
    hooks.insert(2, hook("lenient.kb.io", "policy-webhook", "Ignore"));
    hooks.push(hook("other.kb.io", "other-webhook", ""));
    let view = docs(&[
        &backend(1, ""),
        &service("policy-webhook", "policy"),
        &deployment("other", "replicas: 1", ""),
        &service("other-webhook", "other"),
    ]);
    let f = findings(&config("MutatingWebhookConfiguration", "kueue", &hooks), &view, false);
    let w = rule(&f);
    assert_eq!(w.len(), 2, "one per backend: {f:#?}");
    let (first, second) = (w[0], w[1]);
    assert_eq!(first.path, "webhooks[0].failurePolicy");
    assert_eq!(second.path, "webhooks[6].failurePolicy");
    assert!(
        first.what.starts_with(
            "MutatingWebhookConfiguration/kueue: 5 webhooks with failurePolicy Fail call Service default/policy-webhook"
        ),
        "{}",
        first.what
    );
    assert!(
        first.what.ends_with(
            "they intercept: c.kb.io: pods CREATE in every namespace; d.kb.io: pods CREATE in every namespace; \
             e.kb.io: pods CREATE in every namespace; and 2 more: a.kb.io, b.kb.io."
        ),
        "{}",
        first.what
    );
    assert!(!first.what.contains("lenient.kb.io"), "an Ignore webhook is not named: {}", first.what);
    assert!(
        second.what.contains("webhook other.kb.io (failurePolicy Fail) calls")
            && second.what.contains("Service default/other-webhook"),
        "{}",
        second.what
    );
}

#[rstest]
#[case::unset("", true)]
#[case::ignore("Ignore", false)]
fn a_url_webhook_is_one_endpoint(#[case] policy: &str, #[case] fires: bool) {
    let policy = if policy.is_empty() { String::new() } else { format!("  failurePolicy: {policy}\n") };
    let yaml = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: \
         external\nwebhooks:\n- name: ext.example.com\n{policy}  clientConfig:\n    url: \
         https://policy.example.com/validate\n  rules:\n  - apiGroups: [apps]\n    apiVersions: [v1]\n    resources: \
         [deployments]\n    operations: [CREATE, UPDATE]\n    scope: Namespaced\n  namespaceSelector:\n    \
         matchLabels:\n      policy: enforced\n"
    );
    let f = findings(&yaml, "", false);
    let w = rule(&f);
    assert_eq!(w.len(), usize::from(fires), "{f:#?}");
    if fires {
        assert_eq!(w[0].path, "webhooks[0].clientConfig.url");
        assert!(
            w[0].what.contains(
                "webhook ext.example.com (failurePolicy Fail) calls the URL https://policy.example.com/validate, one \
                 endpoint"
            ),
            "{}",
            w[0].what
        );
        assert!(
            w[0].fix.contains("clientConfig.service")
                && w[0].fix.contains("ha-guard.io/allow-webhook-fail-closed-unavailable"),
            "{}",
            w[0].fix
        );
    }
}

#[test]
fn what_a_webhook_intercepts_is_rendered_from_its_rules() {
    let yaml = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: c\n\
                webhooks:\n- name: w\n  clientConfig:\n    url: https://x\n  rules:\n  - apiGroups: [cert-manager.io, \
                acme.cert-manager.io]\n    apiVersions: [v1]\n    resources: ['*/*']\n    operations: [CREATE, UPDATE]\n  \
                - apiGroups: ['']\n    apiVersions: [v1]\n    resources: [namespaces]\n    operations: ['*']\n    \
                scope: Cluster\n  namespaceSelector:\n    matchExpressions:\n    - {key: kubernetes.io/metadata.name, \
                operator: NotIn, values: [kube-system, cert-manager]}\n  objectSelector:\n    matchLabels: {managed: \
                'yes'}\n";
    let f = findings(yaml, "", false);
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    assert!(
        w[0].what.contains(
            "it intercepts: all resources and subresources (cert-manager.io, acme.cert-manager.io) CREATE,UPDATE; \
             namespaces (cluster-scoped) every operation in namespaces matching kubernetes.io/metadata.name notin \
             (kube-system,cert-manager), objects matching managed=yes."
        ),
        "{}",
        w[0].what
    );
}

#[test]
fn the_configuration_as_written_replaces_the_one_in_the_view() {
    // The view holds the old, fail-closed version; the write makes it fail-open.
    let old = vwc(&[hook("h", "policy-webhook", "Fail")]);
    let view = docs(&[&backend(1, ""), &service("policy-webhook", "policy"), &old]);
    let f = findings(&vwc(&[hook("h", "policy-webhook", "Ignore")]), &view, false);
    assert!(rule(&f).is_empty(), "{f:#?}");
}

// ---- the Service's side ----

#[test]
fn the_service_write_is_warned_and_anchored_at_the_configuration() {
    let view = docs(&[&backend(1, ""), &vwc(&[hook("h", "policy-webhook", "")])]);
    let f = findings(&service("policy-webhook", "policy"), &view, false);
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    assert_eq!((w[0].object.clone(), w[0].anchor.clone()), (svc_id(), vwc_id()));
    assert_eq!(w[0].path, "spec.selector");
    assert_eq!(w[0].related, vec![vwc_id(), dep_id()]);
    assert!(w[0].what.starts_with("ValidatingWebhookConfiguration/policy: webhook h"), "{}", w[0].what);
    // Both configurations calling it are named, one finding each.
    let view = docs(&[&view, &config("MutatingWebhookConfiguration", "policy", &[hook("m", "policy-webhook", "")])]);
    let f = findings(&service("policy-webhook", "policy"), &view, false);
    let anchors: Vec<_> = rule(&f).iter().map(|w| w.anchor.kind).collect();
    assert_eq!(anchors, [Kind::ValidatingWebhookConfiguration, Kind::MutatingWebhookConfiguration]);
}

#[rstest]
#[case::selects_another_workload(service("policy-webhook", "someone-else"), docs(&[&backend(1, ""), &vwc(&[hook("h", "policy-webhook", "")])]))]
#[case::no_webhook_calls_it(service("unrelated", "policy"), docs(&[&backend(1, ""), &vwc(&[hook("h", "policy-webhook", "")])]))]
#[case::the_webhook_is_fail_open(service("policy-webhook", "policy"), docs(&[&backend(1, ""), &vwc(&[hook("h", "policy-webhook", "Ignore")])]))]
#[case::a_sound_backend(service("policy-webhook", "policy"), docs(&[&sound(), &vwc(&[hook("h", "policy-webhook", "")])]))]
fn service_writes_that_do_not_warn(#[case] subject: String, #[case] view: String) {
    let f = findings(&subject, &view, true);
    assert!(rule(&f).is_empty(), "{f:#?}");
}

// ---- the workload's side ----

#[test]
fn the_workload_write_is_warned_at_the_field_that_makes_it_fragile() {
    let view = docs(&[&service("policy-webhook", "policy"), &vwc(&[hook("h", "policy-webhook", "")])]);
    let f = findings(&backend(1, ""), &view, false);
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    assert_eq!((w[0].object.clone(), w[0].anchor.clone()), (dep_id(), vwc_id()));
    assert_eq!(w[0].path, "spec.replicas");
    assert_eq!(w[0].related, vec![vwc_id(), svc_id()]);

    let f = findings(&backend(2, ""), &docs(&[&view, &pdb("maxUnavailable: 1")]), false);
    assert_eq!(
        rule(&f).iter().map(|w| w.path.as_str()).collect::<Vec<_>>(),
        ["spec.template.spec.topologySpreadConstraints"]
    );
    let f = findings(&backend(2, &spread("policy")), &view, false);
    assert_eq!(rule(&f).iter().map(|w| w.path.as_str()).collect::<Vec<_>>(), ["spec.template.metadata.labels"]);
    // Scaled up, spread and budgeted: quiet.
    let f = findings(&backend(2, &spread("policy")), &docs(&[&view, &pdb("maxUnavailable: 1")]), true);
    assert!(rule(&f).is_empty(), "{f:#?}");
    // Pods the Service does not select: quiet.
    let f = findings(&deployment("web", "replicas: 1", ""), &view, true);
    assert!(rule(&f).is_empty(), "{f:#?}");
}

#[test]
fn a_scale_write_down_to_one_is_warned() {
    let view =
        view(&docs(&[&sound(), &service("policy-webhook", "policy"), &vwc(&[hook("h", "policy-webhook", "")])]), false);
    let scale = |replicas| Subject::Scale { target: dep_id(), replicas };
    let f = rules::evaluate(&scale(1), &view, &Config::default()).findings;
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    assert_eq!((w[0].path.as_str(), w[0].anchor.clone()), ("spec.replicas", vwc_id()));
    assert!(w[0].what.contains("Deployment policy (replicas 1)"), "{}", w[0].what);
    let f = rules::evaluate(&scale(2), &view, &Config::default()).findings;
    assert!(rule(&f).is_empty(), "{f:#?}");
}

#[test]
fn an_autoscaler_write_that_lowers_the_floor_is_warned() {
    let view = docs(&[&sound(), &service("policy-webhook", "policy"), &vwc(&[hook("h", "policy-webhook", "")])]);
    let f = findings(&hpa("policy", "policy", Some(1), 4), &view, false);
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    assert_eq!((w[0].path.as_str(), w[0].anchor.clone()), ("spec.minReplicas", vwc_id()));
    let f = findings(&scaled_object(None), &view, false);
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    assert_eq!(w[0].path, "spec.minReplicaCount");
    assert_eq!(w[0].object, ObjectRef::new(Kind::ScaledObject, "default", "policy"));
    assert_eq!(w[0].related, vec![vwc_id(), svc_id(), dep_id()]);
    assert!(w[0].what.contains("ScaledObject policy min 0 max 5"), "{}", w[0].what);
    let f = findings(&scaled_object(Some(2)), &view, false);
    assert!(rule(&f).is_empty(), "{f:#?}");
}

// ---- decisions ----

#[test]
fn an_exemption_on_any_object_of_the_relation_counts() {
    let annotate = |yaml: &str| {
        edit(
            yaml,
            "metadata:\n  name:",
            "metadata:\n  annotations:\n    ha-guard.io/allow-webhook-fail-closed-unavailable: \"a canary cluster\"\n  name:",
        )
    };
    let subject = vwc(&[hook("h", "policy-webhook", "")]);
    for (subject, backend, svc) in [
        (annotate(&subject), backend(1, ""), service("policy-webhook", "policy")),
        (subject.clone(), annotate(&backend(1, "")), service("policy-webhook", "policy")),
        (subject.clone(), backend(1, ""), annotate(&service("policy-webhook", "policy"))),
    ] {
        let d = decided(&subject, &docs(&[&backend, &svc]), false, &Config::default());
        assert_eq!(actions(&d), [(RULE, Decision::Allowed)], "{d:#?}");
    }
    // deny is configurable.
    let config =
        crate::core::registry::parse_config("rules:\n  webhook-fail-closed-unavailable: deny\n", "c.yaml").unwrap();
    let d = decided(&subject, &docs(&[&backend(1, ""), &service("policy-webhook", "policy")]), false, &config);
    assert_eq!(actions(&d), [(RULE, Decision::Deny)]);
}

#[test]
fn an_exemption_on_the_configuration_in_the_view_counts_for_the_service_write() {
    let config = edit(
        &vwc(&[hook("h", "policy-webhook", "")]),
        "metadata:\n  name:",
        "metadata:\n  annotations:\n    ha-guard.io/allow-webhook-fail-closed-unavailable: \"drained by hand\"\n  name:",
    );
    let d =
        decided(&service("policy-webhook", "policy"), &docs(&[&backend(1, ""), &config]), false, &Config::default());
    assert_eq!(actions(&d), [(RULE, Decision::Allowed)], "{d:#?}");
}

/// While a configuration is under review, the Services it calls are the ones of the version
/// written, not of the one the view holds.
#[test]
fn the_backends_of_a_namespace_follow_the_configuration_under_review() {
    use crate::core::view::{Overlay, View};
    let old = vwc(&[hook("a", "old-webhook", ""), hook("b", "kept-webhook", "")]);
    let other = config("MutatingWebhookConfiguration", "other", &[hook("m", "old-webhook", "")]);
    let base = view(&docs(&[&old, &other]), false);
    assert_eq!(base.webhook_services_in("default"), ["kept-webhook", "old-webhook"]);
    let new = subject(&vwc(&[hook("b", "kept-webhook", ""), hook("c", "new-webhook", "")]));
    let overlay = Overlay::new(&base, &new);
    assert_eq!(overlay.webhook_services_in("default"), ["kept-webhook", "new-webhook", "old-webhook"]);
    let names = |cs: Vec<std::sync::Arc<crate::core::view::WebhookConfigInfo>>| {
        cs.iter().map(|c| c.id.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(names(overlay.webhooks_calling("default", "old-webhook")), ["MutatingWebhookConfiguration/other"]);
    assert_eq!(names(overlay.webhooks_calling("default", "new-webhook")), ["ValidatingWebhookConfiguration/policy"]);
    // Without the other configuration, the old Service is no backend any more.
    let base = view(&old, false);
    let overlay = Overlay::new(&base, &new);
    assert_eq!(overlay.webhook_services_in("default"), ["kept-webhook", "new-webhook"]);
}

// ---- which webhooks a message names first, and which it leaves out (issue 51) ----

/// A project's manifest from the corpus (`HA_GUARD_CORPUS`, else `../shared/corpus` beside the
/// repository, as tests/it/corpus.rs reads it): missing, the test fails, it never skips.
fn corpus_file(path: &str) -> String {
    let root = std::env::var_os("HA_GUARD_CORPUS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"));
    let file = root.join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("the corpus file {} ({e})", file.display()))
}

/// The documents of `file` whose `kind:` and `name:` lines are as given (name at any depth of
/// `metadata`), in file order.
fn corpus_docs(file: &str, wanted: &[(&str, &str)]) -> String {
    let docs: Vec<String> = file
        .split("\n---\n")
        .filter(|d| {
            wanted.iter().any(|(kind, name)| {
                d.lines().any(|l| l == format!("kind: {kind}"))
                    && d.lines().any(|l| l.trim_start() == format!("name: {name}") && l.starts_with("  name:"))
            })
        })
        .map(str::to_string)
        .collect();
    assert_eq!(docs.len(), wanted.len(), "found {} of {wanted:?}", docs.len());
    docs.join("\n---\n")
}

#[test]
fn kueues_pod_and_deployment_webhooks_are_named_first_not_among_the_many_more() {
    let kueue = corpus_file("kueue/kueue-v0.12.2.yaml");
    let backend = corpus_docs(
        &kueue,
        &[
            ("Deployment", "kueue-controller-manager"),
            ("Service", "kueue-webhook-service"),
            ("Namespace", "kueue-system"),
        ],
    );
    let config = corpus_docs(&kueue, &[("MutatingWebhookConfiguration", "kueue-mutating-webhook-configuration")]);
    let f = findings(&config, &backend, false);
    let w = rule(&f);
    assert_eq!(w.len(), 1, "{f:#?}");
    let what = &w[0].what;
    let details = what.split_once("they intercept: ").map(|(_, d)| d).unwrap_or_else(|| panic!("{what}"));
    let (named, more) = details.split_once("; and ").unwrap_or_else(|| panic!("{details}"));
    // Pods, Deployments and StatefulSets (in every namespace but kube-system and kueue-system)
    // before the custom resources, whatever their order in the file.
    assert!(
        named.starts_with("mpod.kb.io: pods CREATE in namespaces matching")
            && named.contains("; mdeployment.kb.io: deployments (apps) CREATE,UPDATE")
            && named.contains("; mstatefulset.kb.io: statefulsets (apps) CREATE,UPDATE"),
        "{named}"
    );
    assert!(more.starts_with("15 more: ") && !more.contains("mpod") && !more.contains("mdeployment"), "{more}");
    // The rest by reach too: Jobs, then the custom resources in file order.
    assert!(more.starts_with("15 more: mjob.kb.io, mappwrapper.kb.io"), "{more}");
}

/// Istio's sidecar injector: four webhooks on pod CREATE, two of which intercept only in
/// namespaces labelled for injection.
fn istio() -> (String, String) {
    let istio = corpus_file("istio/install.yaml");
    let config = corpus_docs(&istio, &[("MutatingWebhookConfiguration", "istio-sidecar-injector")]);
    // istiod at one replica (the file's HPA floor aside): a fragile backend.
    let backend = docs(&[
        &deployment("istiod", "replicas: 1", "").replace("namespace: default", "namespace: istio-system"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: istiod\n  namespace: istio-system\nspec:\n  selector:\n    \
         app: istiod\n  ports:\n  - port: 443\n",
    ]);
    (config, backend)
}

fn namespace(name: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/metadata.name: {name}\n{labels}"
    )
}

#[test]
fn a_webhook_whose_namespace_selector_matches_no_namespace_of_the_cluster_is_not_held_against_its_backend() {
    let (config, backend) = istio();
    let plain = docs(&[&backend, &namespace("istio-system", ""), &namespace("shop", "")]);
    // The cluster (a live view holds every namespace): no namespace asks for injection.
    let f = findings_in(&config, &live_view(&plain));
    let w = rule(&f);
    assert_eq!(w.len(), 1, "the object-selected injectors still intercept: {f:#?}");
    assert!(w[0].what.contains("2 webhooks with failurePolicy Fail"), "{}", w[0].what);
    for gone in ["rev.namespace.sidecar-injector.istio.io", "namespace.sidecar-injector.istio.io:"] {
        assert!(!w[0].what.contains(&format!(" {gone}")), "{gone} matches no namespace: {}", w[0].what);
    }
    // Namespaces labelled for injection (by the label, and by revision): all four count.
    let labelled = docs(&[
        &plain,
        &namespace("shop-injected", "    istio-injection: enabled\n"),
        &namespace("shop-revision", "    istio.io/rev: default\n"),
    ]);
    let f = findings_in(&config, &live_view(&labelled));
    assert!(rule(&f)[0].what.contains("4 webhooks with failurePolicy Fail"), "{f:#?}");
    // Files given to check are not the cluster: every webhook counts.
    let f = findings(&config, &plain, true);
    assert!(rule(&f)[0].what.contains("4 webhooks with failurePolicy Fail"), "{f:#?}");
}

#[test]
fn a_namespace_selector_does_not_limit_a_webhook_on_cluster_scoped_resources() {
    // kueue's ClusterQueue webhook scoped to labelled namespaces would still see every ClusterQueue.
    let scoped = format!(
        "{}  namespaceSelector:\n    matchLabels: {{kueue: managed}}\n",
        hook("cq.kb.io", "policy-webhook", "Fail").replace("resources: [pods]", "resources: [clusterqueues]")
    );
    let view = live_view(&docs(&[&backend(1, ""), &service("policy-webhook", "policy"), &namespace("default", "")]));
    let f = findings_in(&vwc(&[scoped]), &view);
    assert_eq!(rule(&f).len(), 1, "{f:#?}");
}

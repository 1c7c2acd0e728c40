//! `hpa-replicas-conflict` at admission, where the apiserver has already defaulted
//! `spec.replicas`: an UPDATE that changes the count under an HPA warns, a CREATE without a
//! last-applied manifest or an `Apply` field manager (server-side apply: Argo CD, Flux, Helm 4)
//! setting it does not, and scale subresource writes are never judged.

use std::sync::Arc;

use crate::server_support::{Server, index, warnings};
use ha_guard::core::config::Config;
use ha_guard::core::view::StaticSource;
use serde_json::{Value, json};

const RULE: &str = "[hpa-replicas-conflict]";

/// The cluster: Deployment shop/web as the apiserver holds it (the HPA made it 9) and HPA
/// shop/web over it; Deployment shop/lone with no HPA.
const CLUSTER: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, uid: 11111111-2222-4333-8444-555555555555, resourceVersion: "100"}
spec:
  replicas: 9
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: shop}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 10
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: lone, namespace: shop, uid: 11111111-2222-4333-8444-666666666666, resourceVersion: "101"}
spec:
  replicas: 2
  selector: {matchLabels: {app: lone}}
  template:
    metadata: {labels: {app: lone}}
    spec:
      containers: [{name: lone, image: "nginx:1.27"}]
"#;

/// Deployment `name` as the apiserver sends it: defaulted `replicas`, a uid, and `annotations`.
fn deployment(name: &str, replicas: i64, annotations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop", "uid": "11111111-2222-4333-8444-555555555555",
                     "resourceVersion": "100", "creationTimestamp": "2025-10-02T08:01:13Z", "annotations": annotations},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": name, "image": "nginx:1.27"}]}}},
    })
}

/// `kubectl apply`'s annotation for a manifest of Deployment `name` with `replicas` (`None`: unset).
fn last_applied(name: &str, replicas: Option<i64>) -> Value {
    let mut manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": name}}}});
    if let Some(r) = replicas {
        manifest["spec"]["replicas"] = json!(r);
    }
    json!({"kubectl.kubernetes.io/last-applied-configuration": manifest.to_string()})
}

fn review(
    operation: &str,
    resource: &str,
    sub: Option<&str>,
    kind: &str,
    name: &str,
    object: Value,
    old: Value,
) -> Value {
    let (group, version) = match kind {
        "HorizontalPodAutoscaler" => ("autoscaling", "v2"),
        "Scale" => ("autoscaling", "v1"),
        _ => ("apps", "v1"),
    };
    let resource_group = if resource == "horizontalpodautoscalers" { "autoscaling" } else { "apps" };
    let mut request = json!({
        "uid": format!("u-{operation}-{name}"),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": resource_group, "version": version, "resource": resource},
        "name": name, "namespace": "shop", "operation": operation,
        "userInfo": {"username": "someone"},
        "object": object, "oldObject": old,
    });
    if let Some(s) = sub {
        request["subResource"] = json!(s);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

async fn server() -> Server {
    Server::start_with(Arc::new(StaticSource(index(CLUSTER, true))), Config::default(), |_| {}).await
}

async fn conflict_warnings(server: &Server, review: &Value) -> Vec<String> {
    let out = server.review("/validate", review).await;
    let r = &out["response"];
    assert_eq!(r["allowed"], true, "a warn rule never denies: {r:#}");
    warnings(r).into_iter().filter(|w| w.starts_with(RULE)).collect()
}

#[tokio::test]
async fn an_update_that_resets_the_count_under_an_hpa_warns() {
    let server = server().await;
    let new = deployment("web", 3, json!({}));
    let old = deployment("web", 9, json!({}));
    let w = conflict_warnings(&server, &review("UPDATE", "deployments", None, "Deployment", "web", new, old)).await;
    assert_eq!(w.len(), 1, "{w:#?}");
    for part in [
        "[hpa-replicas-conflict] spec.replicas: this write sets spec.replicas of Deployment shop/web to 3 (it was 9)",
        "HPA web (min 2, max 10) scales it",
        "Fix: remove spec.replicas",
    ] {
        assert!(w[0].contains(part), "{part:?} not in {}", w[0]);
    }
}

#[tokio::test]
async fn an_update_that_keeps_the_count_or_a_create_is_silent_without_a_last_applied_replicas() {
    let server = server().await;
    // Another field changed, the count the HPA chose kept.
    let new = deployment("web", 9, json!({"note": "image bump"}));
    let old = deployment("web", 9, json!({}));
    let w = conflict_warnings(&server, &review("UPDATE", "deployments", None, "Deployment", "web", new, old)).await;
    assert!(w.is_empty(), "{w:#?}");
    // A CREATE: replicas 1 may be the apiserver's default; nothing says the manifest sets it.
    let created = deployment("web", 1, last_applied("web", None));
    let w =
        conflict_warnings(&server, &review("CREATE", "deployments", None, "Deployment", "web", created, Value::Null))
            .await;
    assert!(w.is_empty(), "{w:#?}");
    // A changed count on a Deployment no HPA targets.
    let new = deployment("lone", 5, json!({}));
    let old = deployment("lone", 2, json!({}));
    let w = conflict_warnings(&server, &review("UPDATE", "deployments", None, "Deployment", "lone", new, old)).await;
    assert!(w.is_empty(), "{w:#?}");
}

#[tokio::test]
async fn a_kubectl_applied_manifest_that_sets_replicas_warns_even_when_the_count_is_unchanged() {
    let server = server().await;
    let created = deployment("web", 3, last_applied("web", Some(3)));
    let w =
        conflict_warnings(&server, &review("CREATE", "deployments", None, "Deployment", "web", created, Value::Null))
            .await;
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(w[0].contains("Deployment shop/web sets spec.replicas: 3 while HPA web (min 2, max 10)"), "{}", w[0]);
}

#[tokio::test]
async fn the_hpa_controllers_scale_writes_are_never_judged() {
    let server = server().await;
    let scale = |n: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": n}})
    };
    let w =
        conflict_warnings(&server, &review("UPDATE", "deployments", Some("scale"), "Scale", "web", scale(4), scale(9)))
            .await;
    assert!(w.is_empty(), "{w:#?}");
}

#[tokio::test]
async fn an_hpa_over_a_workload_whose_applied_manifest_sets_replicas_warns() {
    // The view's web, this time applied with replicas 3 (the HPA has made it 9).
    let cluster = CLUSTER.replace(
        "resourceVersion: \"100\"}",
        &format!(
            "resourceVersion: \"100\", annotations: {{kubectl.kubernetes.io/last-applied-configuration: '{}'}}}}",
            last_applied("web", Some(3))["kubectl.kubernetes.io/last-applied-configuration"].as_str().unwrap()
        ),
    );
    assert_ne!(cluster, CLUSTER);
    let server = Server::start_with(Arc::new(StaticSource(index(&cluster, true))), Config::default(), |_| {}).await;
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web-2", "namespace": "shop"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 3, "maxReplicas": 12}});
    let w = conflict_warnings(
        &server,
        &review("CREATE", "horizontalpodautoscalers", None, "HorizontalPodAutoscaler", "web-2", hpa, Value::Null),
    )
    .await;
    assert_eq!(w.len(), 1, "{w:#?}");
    for part in [
        "[hpa-replicas-conflict] spec.scaleTargetRef: HorizontalPodAutoscaler shop/web-2 (min 3, max 12) scales Deployment shop/web",
        "whose manifest sets spec.replicas: 3",
    ] {
        assert!(w[0].contains(part), "{part:?} not in {}", w[0]);
    }
    // Without the annotation (CLUSTER as is), the same HPA is silent: the live object's replicas
    // are the apiserver's, not the manifest's.
    let plain = server_plain_hpa().await;
    assert!(plain.is_empty(), "{plain:#?}");
}

async fn server_plain_hpa() -> Vec<String> {
    let server = server().await;
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web-2", "namespace": "shop"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 3, "maxReplicas": 12}});
    conflict_warnings(
        &server,
        &review("CREATE", "horizontalpodautoscalers", None, "HorizontalPodAutoscaler", "web-2", hpa, Value::Null),
    )
    .await
}

// ---- server-side apply (Argo CD, Flux, Helm 4): the field managers say who sets the count ----

/// `object` with managedFields as the apiserver records a server-side apply by `manager`
/// (`owns_replicas`: its applied manifest sets spec.replicas) beside the controllers' entries.
fn applied_by(mut object: Value, manager: &str, owns_replicas: bool) -> Value {
    let spec = if owns_replicas {
        json!({"f:replicas": {}, "f:selector": {}, "f:template": {"f:spec": {}}})
    } else {
        json!({"f:selector": {}, "f:template": {"f:spec": {}}})
    };
    object["metadata"]["managedFields"] = json!([
        {"manager": manager, "operation": "Apply", "apiVersion": "apps/v1", "time": "2026-01-01T00:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": spec}},
        {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "apiVersion": "apps/v1",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}}
    ]);
    object
}

#[tokio::test]
async fn a_server_side_apply_that_sets_replicas_warns_whatever_the_manager() {
    let server = server().await;
    for manager in ["kustomize-controller", "argocd-controller", "helm"] {
        // The first apply: a CREATE, replicas 3 owned by the manager's Apply.
        let created = applied_by(deployment("web", 3, json!({})), manager, true);
        let w = conflict_warnings(
            &server,
            &review("CREATE", "deployments", None, "Deployment", "web", created, Value::Null),
        )
        .await;
        assert_eq!(w.len(), 1, "{manager}: {w:#?}");
        for part in [
            &format!(
                "Deployment shop/web sets spec.replicas: 3 by server-side apply (field manager {manager}) while HPA web"
            ),
            "every apply of this manifest (kubectl apply, a Helm upgrade, an Argo CD or Flux sync) resets the count",
            &format!("Field manager {manager} owns spec.replicas by server-side apply"),
        ] {
            assert!(w[0].contains(part), "{part:?} not in {}", w[0]);
        }
        // A sync that writes the manifest's 3 over the HPA's 9.
        let new = applied_by(deployment("web", 3, json!({})), manager, true);
        let w = conflict_warnings(
            &server,
            &review("UPDATE", "deployments", None, "Deployment", "web", new, deployment("web", 9, json!({}))),
        )
        .await;
        assert_eq!(w.len(), 1, "{manager}: {w:#?}");
        let part = format!(
            "this write, a server-side apply by field manager {manager}, sets spec.replicas of Deployment shop/web to 3 \
             (it was 9)"
        );
        assert!(w[0].contains(&part), "{part:?} not in {}", w[0]);
    }
}

#[tokio::test]
async fn a_server_side_apply_without_replicas_is_silent() {
    let server = server().await;
    // The apiserver defaulted replicas to 1; the Apply does not own it.
    let created = applied_by(deployment("web", 1, json!({})), "kustomize-controller", false);
    let w =
        conflict_warnings(&server, &review("CREATE", "deployments", None, "Deployment", "web", created, Value::Null))
            .await;
    assert!(w.is_empty(), "{w:#?}");
    // A sync of that manifest after the HPA scaled (the scale write took nothing from it).
    let new = applied_by(deployment("web", 9, json!({"note": "image bump"})), "kustomize-controller", false);
    let old = deployment("web", 9, json!({}));
    let w = conflict_warnings(&server, &review("UPDATE", "deployments", None, "Deployment", "web", new, old)).await;
    assert!(w.is_empty(), "{w:#?}");
}

#[tokio::test]
async fn an_hpa_over_a_workload_applied_server_side_with_replicas_warns() {
    let managed = "managedFields: [{manager: argocd-controller, operation: Apply, apiVersion: apps/v1, \
                   fieldsType: FieldsV1, fieldsV1: {'f:spec': {'f:replicas': {}, 'f:template': {}}}}]";
    let cluster = CLUSTER.replacen("resourceVersion: \"100\"}", &format!("resourceVersion: \"100\", {managed}}}"), 1);
    assert_ne!(cluster, CLUSTER);
    let server = Server::start_with(Arc::new(StaticSource(index(&cluster, true))), Config::default(), |_| {}).await;
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web-2", "namespace": "shop"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 3, "maxReplicas": 12}});
    let w = conflict_warnings(
        &server,
        &review("CREATE", "horizontalpodautoscalers", None, "HorizontalPodAutoscaler", "web-2", hpa, Value::Null),
    )
    .await;
    assert_eq!(w.len(), 1, "{w:#?}");
    let part = "scales Deployment shop/web, whose manifest sets spec.replicas: 9 by server-side apply (field manager \
                argocd-controller)";
    assert!(w[0].contains(part), "{part:?} not in {}", w[0]);
}

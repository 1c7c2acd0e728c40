//! What the load benchmark sends and the view it runs against, generated deterministically.
//!
//! The view: `namespaces` namespaces `ns-000`.., each with 100 Deployments (2-4 replicas, a
//! hostname spread, pod anti-affinity), 100 PodDisruptionBudgets (one per Deployment,
//! `maxUnavailable: 1`, `AlwaysAllow`), 50 HorizontalPodAutoscalers (for the even Deployments) and
//! a few PVCs, plus 12 nodes in 3 zones. Complete and node-aware, like the live view.
//!
//! The requests (all in namespace [`REQUEST_NS`]), as the kube-apiserver sends them after
//! defaulting, with `managedFields`:
//! - `deployment`: CREATE of the Deployment `checkout` (~5 KB object: 3 replicas, a hostname spread
//!   with a selector, a zone spread without one (a warning from /validate, a patch from /mutate),
//!   a ReadWriteMany PVC volume, sidecar, probes, env); its PDB and HPA are in the view;
//! - `pdb`: UPDATE of the PDB `app-010` (maxUnavailable 1 → minAvailable 50%), with oldObject;
//! - `hpa`: UPDATE of the HPA `app-010` (maxReplicas 6 → 8), with oldObject;
//! - `scale`: UPDATE of `deployments/scale` of `app-011` (3 → 5 replicas), as `kubectl scale` sends it.
#![allow(dead_code)]

use ha_guard::core::model::{self, Kind, Object, ObjectRef, Subject};
use ha_guard::core::view::Index;
use serde_json::{Value, json};

/// Workloads (and PDBs) per namespace; HPAs are half that.
pub const APPS_PER_NS: usize = 100;
/// Where the requests arrive.
pub const REQUEST_NS: &str = "ns-042";

pub fn ns_name(i: usize) -> String {
    format!("ns-{i:03}")
}

fn labels(ns: &str, app: &str) -> Value {
    json!({
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/instance": format!("{app}-prod"),
        "app.kubernetes.io/part-of": format!("{ns}-platform"),
        "app.kubernetes.io/component": "backend",
    })
}

fn selector(app: &str) -> Value {
    json!({"matchLabels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": format!("{app}-prod")}})
}

pub fn deployment(ns: &str, app: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns, "labels": labels(ns, app)},
        "spec": {
            "replicas": replicas,
            "selector": selector(app),
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels(ns, app)},
                "spec": {
                    "topologySpreadConstraints": [{
                        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector(app)
                    }],
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {"labelSelector": selector(app), "topologyKey": "kubernetes.io/hostname"}
                    }]}},
                    "containers": [{"name": "app", "image": format!("registry.example.com/{ns}/{app}:1.4.2")}]
                }
            }
        }
    })
}

pub fn pdb(ns: &str, name: &str, app: &str, budget: Value) -> Value {
    let mut spec = json!({"selector": selector(app), "unhealthyPodEvictionPolicy": "AlwaysAllow"});
    for (k, v) in budget.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns, "labels": labels(ns, app)},
        "spec": spec
    })
}

pub fn hpa(ns: &str, name: &str, app: &str, min: i64, max: i64) -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": ns, "labels": labels(ns, app)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
            "minReplicas": min, "maxReplicas": max,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]
        }
    })
}

fn pvc(ns: &str, name: &str, mode: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "10Gi"}}}
    })
}

fn node(i: usize) -> Value {
    let zone = ["a", "b", "c"][i % 3];
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{i:02}"), "labels": {
            "kubernetes.io/hostname": format!("node-{i:02}"),
            "topology.kubernetes.io/zone": format!("eu-west-1{zone}"),
            "node.kubernetes.io/instance-type": "m6i.xlarge"
        }},
        "spec": {}
    })
}

pub fn insert(index: &mut Index, value: &Value) {
    let ns = value["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
    let object: Object = model::decode(value, &ns).expect("decodes").expect("a kind the engine knows");
    index.insert_object(&object);
}

/// Objects of one namespace: 100 Deployments, 100 PDBs, 50 HPAs, 2 PVCs (252 objects).
pub fn fill_namespace(index: &mut Index, ns: &str) {
    insert(
        index,
        &json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}}),
    );
    for i in 0..APPS_PER_NS {
        let app = format!("app-{i:03}");
        insert(index, &deployment(ns, &app, 2 + (i % 3) as i64));
        insert(index, &pdb(ns, &app, &app, json!({"maxUnavailable": 1})));
        if i % 2 == 0 {
            insert(index, &hpa(ns, &app, &app, 2, 6));
        }
    }
    insert(index, &pvc(ns, "shared-cache", "ReadWriteMany"));
    insert(index, &pvc(ns, "db-data", "ReadWriteOnce"));
}

/// The view of the load benchmark: `namespaces` namespaces of [`fill_namespace`] (100 namespaces:
/// 10,000 Deployments, 10,000 PDBs, 5,000 HPAs), the request namespace's extras (the PDB, HPA
/// and PVC of the Deployment under review) and 12 nodes. Complete and node-aware.
pub fn view(namespaces: usize) -> Index {
    let mut index = Index::new();
    index.set_complete(true);
    index.set_knows_nodes(true);
    for n in 0..12 {
        insert(&mut index, &node(n));
    }
    for i in 0..namespaces {
        fill_namespace(&mut index, &ns_name(i));
    }
    request_namespace_extras(&mut index);
    index
}

/// The PDB, HPA and PVC of `checkout`, the Deployment the `deployment` request creates.
pub fn request_namespace_extras(index: &mut Index) {
    let ns = REQUEST_NS;
    insert(index, &pdb(ns, "checkout", "checkout", json!({"maxUnavailable": 1})));
    insert(index, &hpa(ns, "checkout", "checkout", 3, 10));
    insert(index, &pvc(ns, "checkout-cache", "ReadWriteMany"));
}

/// A view where the request namespace holds the usual 252 objects (plus the extras) and
/// `others` namespaces hold 250 objects each (100 Deployments, 100 PDBs, 50 HPAs): for checking
/// that evaluation does not grow with the rest of the cluster.
pub fn view_with_others(others: usize) -> Index {
    let mut index = Index::new();
    index.set_complete(true);
    index.set_knows_nodes(true);
    for n in 0..12 {
        insert(&mut index, &node(n));
    }
    fill_namespace(&mut index, REQUEST_NS);
    request_namespace_extras(&mut index);
    for i in 0..others {
        fill_namespace(&mut index, &format!("other-{i:04}"));
    }
    index
}

fn managed_fields(manager: &str, operation: &str, api_version: &str, fields: Value) -> Value {
    json!([{
        "manager": manager, "operation": operation, "apiVersion": api_version,
        "time": "2025-11-29T10:15:42Z", "fieldsType": "FieldsV1", "fieldsV1": fields
    }])
}

/// The Deployment under review, as the apiserver sends it on CREATE (defaulted, ~5 KB).
pub fn checkout_deployment() -> Value {
    let ns = REQUEST_NS;
    let app = "checkout";
    let mut env = Vec::new();
    for e in 0..14 {
        if e % 5 == 4 {
            env.push(json!({"name": format!("SECRET_{e}"), "valueFrom": {"secretKeyRef": {"name": "checkout-secrets", "key": format!("key-{e}")}}}));
        } else {
            env.push(json!({"name": format!("SETTING_{e}"), "value": format!("value-{:08x}", 0x9e37_79b9u32.wrapping_mul(e + 1))}));
        }
    }
    let probe = |path: &str, period: i64| {
        json!({
            "httpGet": {"path": path, "port": "http", "scheme": "HTTP"},
            "periodSeconds": period, "timeoutSeconds": 2, "successThreshold": 1, "failureThreshold": 3
        })
    };
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": app, "namespace": ns,
            "uid": "5f1d0c1e-2b9e-4d7f-9a41-0c6a8f3b7e21",
            "generation": 1,
            "creationTimestamp": "2025-11-29T10:15:42Z",
            "labels": {
                "app.kubernetes.io/name": app, "app.kubernetes.io/instance": "checkout-prod",
                "app.kubernetes.io/part-of": "ns-042-platform", "app.kubernetes.io/component": "backend",
                "app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "checkout-2.7.1"
            },
            "annotations": {"meta.helm.sh/release-name": app, "meta.helm.sh/release-namespace": ns},
            "managedFields": managed_fields("helm", "Update", "apps/v1", json!({
                "f:metadata": {"f:annotations": {".": {}, "f:meta.helm.sh/release-name": {}, "f:meta.helm.sh/release-namespace": {}},
                    "f:labels": {".": {}, "f:app.kubernetes.io/component": {}, "f:app.kubernetes.io/instance": {},
                    "f:app.kubernetes.io/managed-by": {}, "f:app.kubernetes.io/name": {}, "f:app.kubernetes.io/part-of": {}, "f:helm.sh/chart": {}}},
                "f:spec": {"f:replicas": {}, "f:selector": {}, "f:strategy": {"f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}}, "f:type": {}},
                    "f:template": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:containers": {}, "f:topologySpreadConstraints": {}, "f:volumes": {}}}}
            }))
        },
        "spec": {
            "replicas": 3,
            "selector": selector(app),
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "template": {
                "metadata": {
                    "labels": labels(ns, app),
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                        "checksum/config": "3f9a1c0e7b2d4a68c1e5f0b9d8a7c6e53f9a1c0e7b2d4a68c1e5f0b9d8a7c6e5"}
                },
                "spec": {
                    "serviceAccountName": app, "serviceAccount": app,
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                    "terminationGracePeriodSeconds": 45,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 10001, "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
                    "topologySpreadConstraints": [
                        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector(app)},
                        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
                    ],
                    "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "preference": {"matchExpressions": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m6i.xlarge", "m6i.2xlarge", "m7i.xlarge"]}]}}]}},
                    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "backend", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "app", "image": "registry.example.com/ns-042/checkout:2.7.1", "imagePullPolicy": "IfNotPresent",
                            "args": ["--config=/etc/checkout/config.yaml", "--log-format=json", "--port=8080"],
                            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}, {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                            "env": env,
                            "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                            "livenessProbe": probe("/healthz", 10), "readinessProbe": probe("/readyz", 5),
                            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "10"]}}},
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/checkout", "readOnly": true}, {"name": "cache", "mountPath": "/var/cache/checkout"}],
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                            "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}}
                        },
                        {
                            "name": "envoy", "image": "envoyproxy/envoy:v1.31.2", "imagePullPolicy": "IfNotPresent",
                            "args": ["-c", "/etc/envoy/envoy.yaml", "--log-level", "warn"],
                            "ports": [{"name": "proxy", "containerPort": 15001, "protocol": "TCP"}],
                            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"
                        }
                    ],
                    "volumes": [
                        {"name": "config", "configMap": {"name": "checkout-config", "defaultMode": 420}},
                        {"name": "cache", "persistentVolumeClaim": {"claimName": "checkout-cache"}}
                    ]
                }
            }
        },
        "status": {}
    })
}

#[allow(clippy::too_many_arguments)] // one field of the review each
pub fn review(
    uid: &str,
    kind: (&str, &str, &str),
    resource: (&str, &str),
    sub: Option<&str>,
    name: &str,
    operation: &str,
    object: Value,
    old: Option<Value>,
    user: &str,
) -> Value {
    let (group, version, k) = kind;
    let (rgroup, rresource) = resource;
    let mut request = json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": k},
        "resource": {"group": rgroup, "version": "v1", "resource": rresource},
        "requestKind": {"group": group, "version": version, "kind": k},
        "requestResource": {"group": rgroup, "version": "v1", "resource": rresource},
        "name": name, "namespace": REQUEST_NS, "operation": operation,
        "userInfo": {"username": user, "uid": "7d3c9f0a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
            "groups": ["system:authenticated"]},
        "object": object,
        "oldObject": old.unwrap_or(Value::Null),
        "dryRun": false,
        "options": {"kind": if operation == "CREATE" { "CreateOptions" } else { "UpdateOptions" }, "apiVersion": "meta.k8s.io/v1", "fieldManager": "helm"}
    });
    if let Some(s) = sub {
        request["subResource"] = json!(s);
        request["requestSubResource"] = json!(s);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

fn with_meta(mut v: Value, generation: i64, manager: &str, api_version: &str) -> Value {
    let meta = v["metadata"].as_object_mut().unwrap();
    meta.insert("uid".into(), json!("c3e1a2b4-5d6f-4a7b-8c9d-0e1f2a3b4c5d"));
    meta.insert("resourceVersion".into(), json!("48213377"));
    meta.insert("generation".into(), json!(generation));
    meta.insert("creationTimestamp".into(), json!("2025-10-02T08:01:13Z"));
    meta.insert("managedFields".into(), managed_fields(manager, "Update", api_version, json!({"f:spec": {}})));
    v
}

fn pdb_update() -> (Value, Value) {
    let ns = REQUEST_NS;
    let old = with_meta(pdb(ns, "app-010", "app-010", json!({"maxUnavailable": 1})), 1, "helm", "policy/v1");
    let new = with_meta(pdb(ns, "app-010", "app-010", json!({"minAvailable": "50%"})), 2, "helm", "policy/v1");
    (new, old)
}

fn hpa_update() -> (Value, Value) {
    let ns = REQUEST_NS;
    let old = with_meta(hpa(ns, "app-010", "app-010", 2, 6), 1, "helm", "autoscaling/v2");
    let new = with_meta(hpa(ns, "app-010", "app-010", 2, 8), 2, "helm", "autoscaling/v2");
    (new, old)
}

/// The target of the scale request and its new and old counts.
pub const SCALE_TARGET: &str = "app-011";
const SCALE_TO: i64 = 5;
const SCALE_FROM: i64 = 3;

/// The request bodies, by name: `deployment`, `pdb`, `hpa`, `scale`.
pub fn requests() -> Vec<(&'static str, Vec<u8>)> {
    let ns = REQUEST_NS;
    let deployment = review(
        "6f1b3a9e-0c2d-4e5f-8a7b-9c0d1e2f3a4b",
        ("apps", "v1", "Deployment"),
        ("apps", "deployments"),
        None,
        "checkout",
        "CREATE",
        checkout_deployment(),
        None,
        "system:serviceaccount:ci:helm",
    );
    let (new_pdb, old_pdb) = pdb_update();
    let pdb_review = review(
        "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5e",
        ("policy", "v1", "PodDisruptionBudget"),
        ("policy", "poddisruptionbudgets"),
        None,
        "app-010",
        "UPDATE",
        new_pdb,
        Some(old_pdb),
        "system:serviceaccount:ci:helm",
    );
    let (new_hpa, old_hpa) = hpa_update();
    let hpa_review = review(
        "2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6f",
        ("autoscaling", "v2", "HorizontalPodAutoscaler"),
        ("autoscaling", "horizontalpodautoscalers"),
        None,
        "app-010",
        "UPDATE",
        new_hpa,
        Some(old_hpa),
        "system:serviceaccount:ci:helm",
    );
    let scale = |replicas: i64| {
        json!({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": SCALE_TARGET, "namespace": ns, "uid": "d4e5f6a7-b8c9-4d0e-9f1a-2b3c4d5e6f7a", "resourceVersion": "48213390", "creationTimestamp": "2025-10-02T08:01:13Z"},
            "spec": {"replicas": replicas},
            "status": {"replicas": SCALE_FROM, "selector": format!("app.kubernetes.io/instance={SCALE_TARGET}-prod,app.kubernetes.io/name={SCALE_TARGET}")}
        })
    };
    let scale_review = review(
        "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e70",
        ("autoscaling", "v1", "Scale"),
        ("apps", "deployments"),
        Some("scale"),
        SCALE_TARGET,
        "UPDATE",
        scale(SCALE_TO),
        Some(scale(SCALE_FROM)),
        "kubernetes-admin",
    );
    [("deployment", deployment), ("pdb", pdb_review), ("hpa", hpa_review), ("scale", scale_review)]
        .into_iter()
        .map(|(name, v)| (name, serde_json::to_vec(&v).unwrap()))
        .collect()
}

/// The subjects of the four requests, as the webhook decodes them (for evaluating without HTTP).
pub struct Case {
    pub name: &'static str,
    pub new: Subject,
    /// `oldObject` on UPDATE (ratcheting evaluates it too).
    pub old: Option<Subject>,
    pub scale: bool,
}

fn subject(v: &Value) -> Subject {
    match model::decode(v, REQUEST_NS).expect("decodes") {
        Some(Object::Subject(s)) => s,
        _ => panic!("not a subject"),
    }
}

pub fn subjects() -> Vec<Case> {
    let (new_pdb, old_pdb) = pdb_update();
    let (new_hpa, old_hpa) = hpa_update();
    let target = |replicas: i64| Subject::Scale {
        target: ObjectRef::new(Kind::Deployment, REQUEST_NS.to_string(), SCALE_TARGET.to_string()),
        replicas: replicas as i32,
    };
    vec![
        Case { name: "deployment", new: subject(&checkout_deployment()), old: None, scale: false },
        Case { name: "pdb", new: subject(&new_pdb), old: Some(subject(&old_pdb)), scale: false },
        Case { name: "hpa", new: subject(&new_hpa), old: Some(subject(&old_hpa)), scale: false },
        Case { name: "scale", new: target(SCALE_TO), old: Some(target(SCALE_FROM)), scale: true },
    ]
}

// ---------------------------------------------------------------------------------------------
// Services and webhook configurations (webhook-fail-closed-unavailable)

/// Webhooks per configuration in [`add_webhook_backends`].
pub const WEBHOOKS_PER_CONFIG: usize = 3;

/// A Service `name` in `ns` selecting the pods of Deployment `app`.
pub fn service(ns: &str, name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns, "labels": labels(ns, app)},
        "spec": {"selector": selector(app)["matchLabels"], "ports": [{"name": "https", "port": 443, "targetPort": 9443}]}
    })
}

/// ValidatingWebhookConfiguration `policy-<ns>`: [`WEBHOOKS_PER_CONFIG`] fail-closed webhooks on
/// Pods, Deployments and Jobs calling Service `ns`/`app-000` (whose Deployment runs 2 replicas
/// kept apart with a PDB: a sound backend, so every rule runs to its end and reports nothing).
pub fn webhooks(ns: &str) -> Value {
    let hooks: Vec<Value> = [("", "pods"), ("apps", "deployments"), ("batch", "jobs")]
        .iter()
        .take(WEBHOOKS_PER_CONFIG)
        .map(|(group, resource)| {
            json!({
                "name": format!("{resource}.policy.{ns}.example.com"),
                "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
                "clientConfig": {"service": {"namespace": ns, "name": "app-000", "path": "/validate"},
                    "caBundle": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="},
                "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "resources": [resource],
                    "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": ["kube-system", ns]}]}
            })
        })
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": format!("policy-{ns}")},
        "webhooks": hooks
    })
}

/// A Service for every app of each namespace (100 a namespace) and one webhook configuration per
/// namespace calling `app-000` there: what a cluster with its Services and a policy engine per team
/// looks like to the view.
pub fn add_webhook_backends<'a>(index: &mut Index, namespaces: impl IntoIterator<Item = &'a str>) {
    for ns in namespaces {
        for i in 0..APPS_PER_NS {
            let app = format!("app-{i:03}");
            insert(index, &service(ns, &app, &app));
        }
        insert(index, &webhooks(ns));
    }
}

/// [`view`] with [`add_webhook_backends`] in every namespace: 10,000 Services and 100
/// configurations more.
pub fn view_with_webhooks(namespaces: usize) -> Index {
    let mut index = view(namespaces);
    let names: Vec<String> = (0..namespaces).map(ns_name).collect();
    add_webhook_backends(&mut index, names.iter().map(String::as_str));
    index
}

/// [`view_with_others`] with [`add_webhook_backends`] in every namespace.
pub fn view_with_others_and_webhooks(others: usize) -> Index {
    let mut index = view_with_others(others);
    let names: Vec<String> =
        std::iter::once(REQUEST_NS.to_string()).chain((0..others).map(|i| format!("other-{i:04}"))).collect();
    add_webhook_backends(&mut index, names.iter().map(String::as_str));
    index
}

fn service_update() -> (Value, Value) {
    let ns = REQUEST_NS;
    let old = with_meta(service(ns, "app-000", "app-000"), 1, "helm", "v1");
    let mut new = old.clone();
    new["metadata"]["labels"]["app.kubernetes.io/version"] = json!("1.4.3");
    (new, old)
}

fn webhooks_update() -> (Value, Value) {
    let old = with_meta(webhooks(REQUEST_NS), 1, "helm", "admissionregistration.k8s.io/v1");
    let mut new = old.clone();
    new["webhooks"][0]["timeoutSeconds"] = json!(5);
    (new, old)
}

/// The request bodies of the new kinds, by name: `service` (an UPDATE of Service `app-000`, the
/// backend of `policy-ns-042`) and `webhooks` (an UPDATE of that configuration: the apiserver does
/// not send these to webhooks, but `check` and a direct review judge them the same way).
pub fn webhook_requests() -> Vec<(&'static str, Vec<u8>)> {
    let (new_svc, old_svc) = service_update();
    let service_review = review(
        "4d5e6f7a-8b9c-4d0e-9f1a-2b3c4d5e6f80",
        ("", "v1", "Service"),
        ("", "services"),
        None,
        "app-000",
        "UPDATE",
        new_svc,
        Some(old_svc),
        "system:serviceaccount:ci:helm",
    );
    let (new_hooks, old_hooks) = webhooks_update();
    let mut hooks_review = review(
        "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a90",
        ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
        None,
        &format!("policy-{REQUEST_NS}"),
        "UPDATE",
        new_hooks,
        Some(old_hooks),
        "system:serviceaccount:ci:helm",
    );
    hooks_review["request"].as_object_mut().unwrap().remove("namespace");
    [("service", service_review), ("webhooks", hooks_review)]
        .into_iter()
        .map(|(name, v)| (name, serde_json::to_vec(&v).unwrap()))
        .collect()
}

/// The subjects of [`webhook_requests`].
pub fn webhook_subjects() -> Vec<Case> {
    let (new_svc, old_svc) = service_update();
    let (new_hooks, old_hooks) = webhooks_update();
    vec![
        Case { name: "service", new: subject(&new_svc), old: Some(subject(&old_svc)), scale: false },
        Case { name: "webhooks", new: subject(&new_hooks), old: Some(subject(&old_hooks)), scale: false },
    ]
}

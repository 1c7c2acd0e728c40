//! Manifests (JSON trees) into typed, defaulted objects.

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::defaults;
use super::keda::ScaledObject;
use super::object::{Kind, Object, Subject};
use super::webhook::WebhookConfiguration;

/// Why a document of a known kind could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("{kind} does not decode: {reason}")]
pub struct DecodeError {
    pub kind: String,
    pub reason: String,
}

/// [`Kind::Pod`] names findings only: [`Kind::from_type`] never gives it, so no decoder meets it.
fn not_decoded(kind_name: &str) -> DecodeError {
    DecodeError { kind: kind_name.to_string(), reason: "pods are not decoded".into() }
}

/// The `apiVersion` and `kind` of a manifest, if it has them.
pub fn type_of(value: &Value) -> Option<(&str, &str)> {
    Some((value.get("apiVersion")?.as_str()?, value.get("kind")?.as_str()?))
}

/// Decodes a manifest into a typed, defaulted object. `Ok(None)` for kinds the engine ignores.
/// `default_namespace` fills `metadata.namespace` for namespaced kinds that have none.
pub fn decode(value: &Value, default_namespace: &str) -> Result<Option<Object>, DecodeError> {
    let Some((api_version, kind_name)) = type_of(value) else { return Ok(None) };
    let Some(kind) = Kind::from_type(api_version, kind_name) else { return Ok(None) };
    let decoded = if decodes_as_written(value, kind, api_version) {
        decode_as_written(value, kind, kind_name, default_namespace)
    } else {
        decode_rewriting(value, kind, api_version, kind_name, default_namespace)
    };
    decoded.map(Some).map_err(|e| DecodeError { reason: at_path(value, kind, &e.reason), ..e })
}

/// serde's "invalid type: string \"3\", expected i32" as a user reads it, with the field it is
/// about: `spec.replicas: expected an integer, got the string "3"`. The path is found by decoding
/// once more with `serde_path_to_error`, only on this error path (it slows every decode otherwise).
fn at_path(value: &Value, kind: Kind, reason: &str) -> String {
    fn path_of<T: serde::de::DeserializeOwned>(value: &Value) -> Option<String> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Err(e) => Some(e.path().to_string()).filter(|p| p != "."),
            Ok(_) => None,
        }
    }
    let path = match kind {
        Kind::Deployment => path_of::<Deployment>(value),
        Kind::StatefulSet => path_of::<StatefulSet>(value),
        Kind::PodDisruptionBudget => path_of::<PodDisruptionBudget>(value),
        Kind::HorizontalPodAutoscaler => path_of::<HorizontalPodAutoscaler>(value),
        Kind::PersistentVolumeClaim => path_of::<PersistentVolumeClaim>(value),
        Kind::Node => path_of::<Node>(value),
        Kind::Namespace => path_of::<Namespace>(value),
        Kind::Service => path_of::<Service>(value),
        Kind::ScaledObject => path_of::<super::keda::StrictScaledObject>(value),
        Kind::ValidatingWebhookConfiguration | Kind::MutatingWebhookConfiguration => {
            path_of::<WebhookConfiguration>(value)
        }
        Kind::ApiService => path_of::<super::apiservice::ApiService>(value),
        Kind::Pod => None,
    };
    let reason = readable(reason);
    match path {
        Some(path) => format!("{path}: {reason}"),
        None => reason,
    }
}

/// `invalid type: string "3", expected i32` → `expected an integer, got the string "3"`.
fn readable(reason: &str) -> String {
    let Some(rest) = reason.strip_prefix("invalid type: ") else { return reason.to_string() };
    let Some((got, expected)) = rest.rsplit_once(", expected ") else { return reason.to_string() };
    let expected = match expected {
        "i32" | "i64" | "u32" | "u64" | "u16" | "i16" | "u8" | "i8" => "an integer",
        "a string" | "string" => "a string",
        "a boolean" | "bool" => "a boolean",
        "f64" | "f32" => "a number",
        e if e.starts_with("a sequence") || e.starts_with("a Vec") => "a list",
        e if e.starts_with("a map") || e.starts_with("struct ") => "a map",
        e => e,
    };
    let got = got.replace('`', "");
    let got = match got.split_once(' ') {
        Some(("string", s)) => format!("the string {s}"),
        Some(("integer", n)) => format!("the integer {n}"),
        Some(("floating", rest)) => format!("the number {}", rest.trim_start_matches("point ")),
        _ => got.clone(),
    };
    format!("expected {expected}, got {got}")
}

/// Most manifests: decoded straight from the tree (no copy of it), the namespace defaulted on the
/// typed object.
fn decode_as_written(
    value: &Value,
    kind: Kind,
    kind_name: &str,
    default_namespace: &str,
) -> Result<Object, DecodeError> {
    let err = |e: serde_json::Error| DecodeError { kind: kind_name.to_string(), reason: e.to_string() };
    let namespaced = !kind.is_cluster_scoped();
    let fill = |meta: &mut ObjectMeta| {
        if namespaced && meta.namespace.as_deref().is_none_or(str::is_empty) {
            meta.namespace = Some(default_namespace.to_string());
        }
    };
    let object = match kind {
        Kind::Pod => return Err(not_decoded(kind_name)),
        Kind::Deployment => {
            let mut d = Deployment::deserialize(value).map_err(err)?;
            fill(&mut d.metadata);
            Object::Subject(Subject::Workload(Box::new(defaults::deployment(d))))
        }
        Kind::StatefulSet => {
            let mut s = StatefulSet::deserialize(value).map_err(err)?;
            fill(&mut s.metadata);
            Object::Subject(Subject::Workload(Box::new(defaults::stateful_set(s))))
        }
        Kind::PodDisruptionBudget => {
            let mut p = PodDisruptionBudget::deserialize(value).map_err(err)?;
            fill(&mut p.metadata);
            Object::Subject(Subject::Pdb(Box::new(p)))
        }
        Kind::HorizontalPodAutoscaler => {
            let mut h = HorizontalPodAutoscaler::deserialize(value).map_err(err)?;
            fill(&mut h.metadata);
            defaults::hpa(&mut h);
            Object::Subject(Subject::Hpa(Box::new(h)))
        }
        Kind::PersistentVolumeClaim => {
            let mut c = PersistentVolumeClaim::deserialize(value).map_err(err)?;
            fill(&mut c.metadata);
            Object::Pvc(Box::new(c))
        }
        Kind::Node => Object::Node(Box::new(Node::deserialize(value).map_err(err)?)),
        Kind::Namespace => Object::Namespace(Box::new(Namespace::deserialize(value).map_err(err)?)),
        Kind::Service => {
            let mut s = Service::deserialize(value).map_err(err)?;
            fill(&mut s.metadata);
            Object::Subject(Subject::Service(Box::new(s)))
        }
        Kind::ScaledObject => {
            let mut s = ScaledObject::deserialize(value).map_err(err)?;
            if let Some(why) = s.unreadable.take() {
                return Err(DecodeError { kind: kind_name.to_string(), reason: why });
            }
            fill(&mut s.metadata);
            Object::Subject(Subject::ScaledObject(Box::new(s)))
        }
        Kind::ValidatingWebhookConfiguration | Kind::MutatingWebhookConfiguration => {
            let mut c = WebhookConfiguration::deserialize(value).map_err(err)?;
            c.mutating = kind == Kind::MutatingWebhookConfiguration;
            Object::Subject(Subject::Webhooks(Box::new(c)))
        }
        Kind::ApiService => {
            let a = super::apiservice::ApiService::deserialize(value).map_err(err)?;
            Object::Subject(Subject::ApiService(Box::new(a)))
        }
    };
    Ok(object)
}

/// A copy of the tree with the namespace defaulted and missing workload fields filled in (or an
/// autoscaling/v1 HPA made v2), then decoded.
fn decode_rewriting(
    value: &Value,
    kind: Kind,
    api_version: &str,
    kind_name: &str,
    default_namespace: &str,
) -> Result<Object, DecodeError> {
    let err = |e: serde_json::Error| DecodeError { kind: kind_name.to_string(), reason: e.to_string() };
    let mut value = value.clone();
    if !kind.is_cluster_scoped() {
        set_default_namespace(&mut value, default_namespace);
    }
    let object = match kind {
        Kind::Pod => return Err(not_decoded(kind_name)),
        Kind::Deployment | Kind::StatefulSet => {
            let missing = fill_required_workload_fields(&mut value);
            let mut workload = if kind == Kind::Deployment {
                let d: Deployment = serde_json::from_value(value).map_err(err)?;
                defaults::deployment(d)
            } else {
                let s: StatefulSet = serde_json::from_value(value).map_err(err)?;
                defaults::stateful_set(s)
            };
            if missing.contains(&"spec.selector") {
                workload.selector = None;
            }
            workload.missing = missing;
            Object::Subject(Subject::Workload(Box::new(workload)))
        }
        Kind::PodDisruptionBudget => {
            let p: PodDisruptionBudget = serde_json::from_value(value).map_err(err)?;
            Object::Subject(Subject::Pdb(Box::new(p)))
        }
        Kind::HorizontalPodAutoscaler => {
            let mut h: HorizontalPodAutoscaler =
                serde_json::from_value(strip_v1_hpa_fields(value, api_version)).map_err(err)?;
            defaults::hpa(&mut h);
            Object::Subject(Subject::Hpa(Box::new(h)))
        }
        Kind::PersistentVolumeClaim => Object::Pvc(Box::new(serde_json::from_value(value).map_err(err)?)),
        Kind::Node => Object::Node(Box::new(serde_json::from_value(value).map_err(err)?)),
        Kind::Namespace => Object::Namespace(Box::new(serde_json::from_value(value).map_err(err)?)),
        // Nothing to rewrite for these but a missing `metadata` or namespace: the same decoding.
        Kind::Service
        | Kind::ScaledObject
        | Kind::ValidatingWebhookConfiguration
        | Kind::MutatingWebhookConfiguration
        | Kind::ApiService => decode_as_written(&value, kind, kind_name, default_namespace)?,
    };
    Ok(object)
}

/// Whether `value` decodes into its type as it is: what the rewriting way below would change
/// (a missing `metadata`, a namespace that is not a string, the workload fields kustomize bases
/// leave out, an autoscaling/v1 HPA) is absent.
fn decodes_as_written(value: &Value, kind: Kind, api_version: &str) -> bool {
    let Some(meta) = value.get("metadata").and_then(Value::as_object) else { return false };
    if !meta.get("namespace").is_none_or(|ns| ns.is_string() || ns.is_null()) {
        return false;
    }
    match kind {
        Kind::HorizontalPodAutoscaler => api_version != "autoscaling/v1",
        Kind::Deployment | Kind::StatefulSet => {
            let present = |v: Option<&Value>| v.is_some_and(|v| !v.is_null());
            let Some(spec) = value.get("spec").and_then(Value::as_object) else { return false };
            let template = spec.get("template");
            present(spec.get("selector"))
                && present(template)
                && template.and_then(Value::as_object).is_none_or(|t| {
                    t.get("spec").is_some_and(|pod| pod.as_object().is_none_or(|p| present(p.get("containers"))))
                })
        }
        _ => true,
    }
}

fn set_default_namespace(value: &mut Value, default_namespace: &str) {
    if let Some(obj) = value.as_object_mut() {
        let meta = obj.entry("metadata").or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            let has_ns = meta.get("namespace").and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            if !has_ns {
                meta.insert("namespace".into(), Value::String(default_namespace.to_string()));
            }
        }
    }
}

/// Kustomize bases and Helm fragments often leave out fields the API requires (the selector,
/// the containers). Fill them with neutral placeholders so the rest can still be checked, and
/// return which were missing so that the rules depending on them report "not checked".
fn fill_required_workload_fields(value: &mut Value) -> Vec<&'static str> {
    let mut missing = Vec::new();
    let Some(obj) = value.as_object_mut() else { return missing };
    let spec = obj.entry("spec").or_insert_with(|| Value::Object(Default::default()));
    let Some(spec) = spec.as_object_mut() else { return missing };
    if spec.get("selector").is_none_or(Value::is_null) {
        missing.push("spec.selector");
        spec.insert("selector".into(), serde_json::json!({}));
    }
    if spec.get("template").is_none_or(Value::is_null) {
        missing.push("spec.template");
        spec.insert("template".into(), serde_json::json!({}));
    }
    if let Some(template) = spec.get_mut("template").and_then(Value::as_object_mut) {
        let pod = template.entry("spec").or_insert_with(|| serde_json::json!({}));
        if let Some(pod) = pod.as_object_mut()
            && pod.get("containers").is_none_or(Value::is_null)
        {
            missing.push("spec.template.spec.containers");
            pod.insert("containers".into(), serde_json::json!([]));
        }
    }
    missing
}

/// autoscaling/v1 HPAs carry `targetCPUUtilizationPercentage`, which v2 does not know; the bounds
/// and the target, all the rules read, are the same. The v2 type checks `apiVersion`, so it is
/// rewritten too.
fn strip_v1_hpa_fields(mut value: Value, api_version: &str) -> Value {
    if api_version == "autoscaling/v1" {
        if let Some(obj) = value.as_object_mut() {
            obj.insert("apiVersion".into(), Value::String("autoscaling/v2".into()));
        }
        if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("targetCPUUtilizationPercentage");
        }
        if let Some(obj) = value.as_object_mut() {
            obj.remove("status");
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of decoding, on a value the direct way takes: the same object, or the same error.
    fn both_ways(value: &Value) -> (String, String) {
        let (api_version, kind_name) = type_of(value).unwrap();
        let kind = Kind::from_type(api_version, kind_name).unwrap();
        assert!(decodes_as_written(value, kind, api_version), "{value}");
        let show = |r: Result<Object, DecodeError>| match r {
            Ok(o) => format!("{o:?}"),
            Err(e) => format!("error: {e}"),
        };
        (
            show(decode_as_written(value, kind, kind_name, "fallback")),
            show(decode_rewriting(value, kind, api_version, kind_name, "fallback")),
        )
    }

    #[test]
    fn decoding_in_place_gives_what_decoding_a_rewritten_copy_gives() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut taken = 0;
        for dir in ["examples", "manifests", "tests/fixtures"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
            for path in entries.flatten().map(|e| e.path()) {
                let Ok(text) = std::fs::read_to_string(&path) else { continue };
                // Manifests, and the objects of AdmissionReview fixtures.
                let values: Vec<Value> = match path.extension().and_then(|e| e.to_str()) {
                    // These files have no `---` inside block scalars: a line split is exact here.
                    Some("yaml" | "yml") => {
                        text.split("\n---").filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok()).collect()
                    }
                    Some("json") => serde_json::from_str::<Value>(&text)
                        .ok()
                        .and_then(|review| review.get("request").cloned())
                        .map(|r| ["object", "oldObject"].iter().filter_map(|k| r.get(k).cloned()).collect())
                        .unwrap_or_default(),
                    _ => Vec::new(),
                };
                for value in values {
                    let Some((api_version, kind_name)) = type_of(&value) else { continue };
                    let Some(kind) = Kind::from_type(api_version, kind_name) else { continue };
                    if decodes_as_written(&value, kind, api_version) {
                        let (direct, rewritten) = both_ways(&value);
                        assert_eq!(direct, rewritten, "{}", path.display());
                        taken += 1;
                    }
                }
            }
        }
        assert!(taken >= 10, "only {taken} manifests decoded in place");
    }

    #[test]
    fn the_namespace_is_defaulted_either_way() {
        for namespace in [serde_json::json!("team-a"), serde_json::json!(""), Value::Null] {
            for kind in ["PodDisruptionBudget", "Namespace"] {
                let api_version = if kind == "Namespace" { "v1" } else { "policy/v1" };
                let value = serde_json::json!({
                    "apiVersion": api_version, "kind": kind,
                    "metadata": {"name": "x", "namespace": namespace},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}
                });
                let (direct, rewritten) = both_ways(&value);
                assert_eq!(direct, rewritten, "{value}");
            }
            let mut value = serde_json::json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "x"}, "spec": {"maxUnavailable": "10%"}});
            if !namespace.is_null() {
                value["metadata"]["namespace"] = namespace.clone();
            }
            let Some(Object::Subject(subject)) = decode(&value, "fallback").unwrap() else { panic!() };
            let want = if namespace == "team-a" { "team-a" } else { "fallback" };
            assert_eq!(subject.id().namespace, want, "{value}");
            assert_eq!(subject.namespace(), want, "{value}");
        }
    }

    /// `Subject::namespace` is `Subject::id`'s namespace for every kind (the rules and the
    /// decision read it without copying the id).
    #[rstest::rstest]
    #[case::deployment(serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "x", "namespace": "a"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": []}}}}))]
    #[case::hpa(serde_json::json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "x", "namespace": "a"},
        "spec": {"maxReplicas": 3, "scaleTargetRef": {"kind": "Deployment", "name": "x"}}}))]
    #[case::service(serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "namespace": "a"}}))]
    #[case::cluster_scoped(serde_json::json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "x"}}))]
    fn a_subjects_namespace_is_its_ids(#[case] value: Value) {
        let Some(Object::Subject(subject)) = decode(&value, "a").unwrap() else { panic!("{value}") };
        assert_eq!(subject.namespace(), subject.id().namespace, "{value}");
    }

    #[test]
    fn a_bad_field_is_named_with_its_path_and_said_plainly() {
        let value = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"replicas": "3", "selector": {}, "template": {"spec": {"containers": []}}}});
        let e = decode(&value, "default").unwrap_err().to_string();
        assert_eq!(e, "Deployment does not decode: spec.replicas: expected an integer, got the string \"3\"");
        let value = serde_json::json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "x"},
            "spec": {"selector": {"matchLabels": {"app": 7}}}});
        let e = decode(&value, "default").unwrap_err().to_string();
        assert!(e.contains("spec.selector.matchLabels.app: expected a string, got the integer 7"), "{e}");
        let value = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "ports": {"a": 1}}]}}}});
        let e = decode(&value, "default").unwrap_err().to_string();
        assert!(e.contains("spec.template.spec.containers[0].ports: expected a list"), "{e}");
    }

    #[test]
    fn a_bad_field_is_the_same_error_either_way() {
        let value = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x"},
            "spec": {"replicas": "three", "selector": {}, "template": {"spec": {"containers": []}}}});
        let (direct, rewritten) = both_ways(&value);
        assert!(direct.starts_with("error: Deployment does not decode: invalid type"), "{direct}");
        assert_eq!(direct, rewritten);
    }

    #[test]
    fn what_needs_rewriting_is_not_decoded_in_place() {
        let workload = |spec: Value| {
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "x"}, "spec": spec})
        };
        let full = serde_json::json!({"selector": {}, "template": {"spec": {"containers": []}}});
        assert!(decodes_as_written(&workload(full), Kind::Deployment, "apps/v1"));
        for spec in [
            serde_json::json!({"template": {"spec": {"containers": []}}}),
            serde_json::json!({"selector": null, "template": {"spec": {"containers": []}}}),
            serde_json::json!({"selector": {}}),
            serde_json::json!({"selector": {}, "template": {}}),
            serde_json::json!({"selector": {}, "template": {"spec": {}}}),
            Value::Null,
        ] {
            assert!(!decodes_as_written(&workload(spec.clone()), Kind::Deployment, "apps/v1"), "{spec}");
        }
        let no_meta = serde_json::json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget"});
        assert!(!decodes_as_written(&no_meta, Kind::PodDisruptionBudget, "policy/v1"));
        let odd_ns = serde_json::json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"namespace": 7}});
        assert!(!decodes_as_written(&odd_ns, Kind::PodDisruptionBudget, "policy/v1"));
        let v1 = serde_json::json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h"}});
        assert!(!decodes_as_written(&v1, Kind::HorizontalPodAutoscaler, "autoscaling/v1"));
    }

    #[test]
    fn services_webhook_configurations_and_scaled_objects_decode_either_way() {
        let service = serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"selector": {"app": "a"}, "ports": [{"port": 443, "targetPort": "https"}]}});
        let config = serde_json::json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": "m"},
            "webhooks": [{"name": "w", "sideEffects": "None", "reinvocationPolicy": "IfNeeded",
                // A placeholder a CA injector fills at install: not base64, and not read.
                "clientConfig": {"caBundle": "${CA_BUNDLE}", "service": {"namespace": "n", "name": "s"}}}]});
        let scaled = serde_json::json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": "so"}, "spec": {"scaleTargetRef": {"name": "web"}, "triggers": [{"type": "cpu"}]}});
        for value in [&service, &config, &scaled] {
            let (direct, rewritten) = both_ways(value);
            assert_eq!(direct, rewritten, "{value}");
            assert!(!direct.starts_with("error"), "{direct}");
        }
        let id = |v: &Value| match decode(v, "fallback").unwrap() {
            Some(Object::Subject(s)) => s.id(),
            other => panic!("{other:?}"),
        };
        assert_eq!(id(&service), crate::core::model::ObjectRef::new(Kind::Service, "fallback", "s"));
        assert_eq!(id(&scaled), crate::core::model::ObjectRef::new(Kind::ScaledObject, "fallback", "so"));
        // Cluster-scoped: no namespace is filled in.
        assert_eq!(id(&config), crate::core::model::ObjectRef::new(Kind::MutatingWebhookConfiguration, "", "m"));
        // The removed v1beta1 API is not decoded (check reports it as not checked).
        let mut old = config.clone();
        old["apiVersion"] = "admissionregistration.k8s.io/v1beta1".into();
        assert!(decode(&old, "fallback").unwrap().is_none());
    }
}

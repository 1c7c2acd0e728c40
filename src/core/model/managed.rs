//! What ha-guard keeps of `metadata.managedFields`, the apiserver's record of which field manager
//! set which field: one fact, which managers own `spec.replicas` by server-side apply
//! (`hpa-replicas-conflict`: Argo CD, Flux and Helm 4 apply server-side and leave no
//! `last-applied-configuration` annotation, so only this says that their manifest sets the count).
//!
//! The rest (a tree per manager of every field it set, often half of an object) is dropped as an
//! object is read, by each reader: the webhook's wire types ([`AppliersRead`]), the audit's list
//! pages ([`kept_json`]) and a workload's defaults ([`keep_replicas_appliers`]), each keeping the
//! same entries in the same shape ([`kept_entry`]), so an object gives the same workload whichever
//! way it was read.
//!
//! Kubernetes' semantics (k8s.io/apimachinery/pkg/util/managedfields): an `Apply` entry lists the
//! fields its manager's applied configuration sets; an `Update` entry the fields its writes
//! changed. A write through the `scale` subresource (the HPA controller, KEDA, `kubectl scale`)
//! that changes the count takes `spec.replicas` from every other manager (the scale handler's
//! `ToParent` "steals" the path) and is recorded with `subresource: scale`; the next apply with
//! force (Argo CD's and Flux's) takes it back, and resets the count.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

/// The operation of a server-side apply.
pub const APPLY: &str = "Apply";

/// The manager of `entry` when it owns `spec.replicas` by server-side apply: an `Apply` of the
/// object itself (not of a subresource) whose field set holds `f:spec` → `f:replicas`.
pub fn replicas_applier(entry: &ManagedFieldsEntry) -> Option<&str> {
    let owns = entry.operation.as_deref() == Some(APPLY)
        && entry.subresource.as_deref().is_none_or(str::is_empty)
        && entry.fields_v1.as_ref().and_then(|f| f.0.get("f:spec")).and_then(|s| s.get("f:replicas")).is_some();
    if owns { entry.manager.as_deref() } else { None }
}

/// The managers that own `spec.replicas` by server-side apply, in the object's order.
pub fn replicas_appliers(meta: &ObjectMeta) -> impl Iterator<Item = &str> {
    meta.managed_fields.iter().flatten().filter_map(replicas_applier)
}

/// An entry as it is kept: its manager, `Apply`, and the one field `spec.replicas`.
pub fn kept_entry(manager: &str) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.to_string()),
        operation: Some(APPLY.to_string()),
        fields_type: Some("FieldsV1".to_string()),
        fields_v1: Some(FieldsV1(json!({"f:spec": {"f:replicas": {}}}))),
        ..Default::default()
    }
}

/// The entries kept of `managers` (in their order): `None` when there are none, as the apiserver
/// leaves the field out.
fn kept<'a>(managers: impl Iterator<Item = &'a str>) -> Option<Vec<ManagedFieldsEntry>> {
    let entries: Vec<ManagedFieldsEntry> = managers.map(kept_entry).collect();
    (!entries.is_empty()).then_some(entries)
}

/// Cuts `meta.managed_fields` down to what is kept. (Idempotent: kept entries are kept as they are.)
pub fn keep_replicas_appliers(meta: &mut ObjectMeta) {
    if meta.managed_fields.is_some() {
        meta.managed_fields = kept(replicas_appliers(meta));
    }
}

/// [`keep_replicas_appliers`] for `metadata.managedFields` as JSON (a listed item): the kept
/// entries as JSON, or `None` when there are none. Read in place, nothing copied but the kept
/// managers' names.
pub fn kept_json(entries: &Value) -> Option<Value> {
    let applier = |e: &'_ Value| -> Option<String> {
        let owns = e.get("operation").and_then(Value::as_str) == Some(APPLY)
            && e.get("subresource").and_then(Value::as_str).is_none_or(str::is_empty)
            && e.pointer("/fieldsV1/f:spec/f:replicas").is_some();
        owns.then(|| e.get("manager").and_then(Value::as_str).map(str::to_string)).flatten()
    };
    let managers: Vec<String> = entries.as_array()?.iter().filter_map(applier).collect();
    let entries = kept(managers.iter().map(String::as_str))?;
    serde_json::to_value(entries).ok()
}

/// `metadata.managedFields` decoded straight into what is kept ([`kept_entry`]s, `None` when
/// none), without building the entries' field trees: serde skips all of an entry but its
/// manager, operation, subresource and whether its field set holds `f:spec` → `f:replicas`.
#[derive(Debug, Default)]
pub struct AppliersRead(pub Option<Vec<ManagedFieldsEntry>>);

impl<'de> Deserialize<'de> for AppliersRead {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        enum Operation {
            Apply,
            #[serde(other)]
            Other,
        }
        // Names borrowed from the request's text where they have no escapes: no allocation for
        // the entries that are not kept.
        #[derive(Deserialize)]
        struct Entry<'a> {
            #[serde(borrow)]
            manager: Option<Cow<'a, str>>,
            operation: Option<Operation>,
            #[serde(borrow)]
            subresource: Option<Cow<'a, str>>,
            #[serde(rename = "fieldsV1")]
            fields_v1: Option<Fields>,
        }
        #[derive(Deserialize)]
        struct Fields {
            #[serde(rename = "f:spec")]
            spec: Option<Spec>,
        }
        #[derive(Deserialize)]
        struct Spec {
            #[serde(rename = "f:replicas")]
            replicas: Option<IgnoredAny>,
        }
        let entries = Option::<Vec<Entry<'de>>>::deserialize(deserializer)?.unwrap_or_default();
        let managers = entries.iter().filter_map(|e| {
            let owns = matches!(e.operation, Some(Operation::Apply))
                && e.subresource.as_deref().is_none_or(str::is_empty)
                && e.fields_v1.as_ref().and_then(|f| f.spec.as_ref()).is_some_and(|s| s.replicas.is_some());
            if owns { e.manager.as_deref() } else { None }
        });
        Ok(AppliersRead(kept(managers)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// managedFields as a Deployment applied by Flux, scaled by the HPA controller and touched
    /// by kubectl has them (the shapes of a real apiserver's entries).
    fn entries() -> Value {
        json!([
            {"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
             "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}, "f:selector": {}}}},
            {"manager": "argocd-controller", "operation": "Apply", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:template": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "scale",
             "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "someone", "operation": "Apply", "subresource": "scale",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "helm", "operation": "Apply", "subresource": "", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}}
        ])
    }

    fn meta_with(entries: Value) -> ObjectMeta {
        serde_json::from_value(json!({"name": "web", "managedFields": entries})).unwrap()
    }

    #[test]
    fn only_apply_owners_of_spec_replicas_on_the_object_itself_are_kept() {
        let meta = meta_with(entries());
        assert_eq!(replicas_appliers(&meta).collect::<Vec<_>>(), ["kustomize-controller", "helm"]);
        let mut cut = meta.clone();
        keep_replicas_appliers(&mut cut);
        assert_eq!(cut.managed_fields, Some(vec![kept_entry("kustomize-controller"), kept_entry("helm")]));
        assert_eq!(ObjectMeta { managed_fields: None, ..cut.clone() }, ObjectMeta { managed_fields: None, ..meta });
        let again = cut.clone();
        keep_replicas_appliers(&mut cut);
        assert_eq!(cut, again, "idempotent");
    }

    #[test]
    fn nothing_kept_is_none() {
        let mut meta = meta_with(json!([{"manager": "kubectl", "operation": "Update",
            "fieldsV1": {"f:spec": {"f:replicas": {}}}}]));
        keep_replicas_appliers(&mut meta);
        assert_eq!(meta.managed_fields, None);
        assert_eq!(kept_json(&json!([])), None);
        assert_eq!(kept_json(&json!("not a list")), None);
        assert_eq!(serde_json::from_value::<AppliersRead>(json!(null)).unwrap().0, None);
    }

    /// The three readers keep the same entries.
    #[test]
    fn every_reader_keeps_the_same() {
        let mut typed = meta_with(entries());
        keep_replicas_appliers(&mut typed);
        let from_json: Vec<ManagedFieldsEntry> = serde_json::from_value(kept_json(&entries()).unwrap()).unwrap();
        let from_wire = serde_json::from_value::<AppliersRead>(entries()).unwrap().0;
        assert_eq!(typed.managed_fields.as_ref(), Some(&from_json));
        assert_eq!(typed.managed_fields, from_wire);
    }
}

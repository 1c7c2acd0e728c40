//! Aggregated APIs (`apiregistration.k8s.io/v1` APIService), in the shape
//! `apiservice-unavailable` reads: which Service serves it, and whether the kube-aggregator says
//! it is Available.
//!
//! Hand-written rather than the kube-aggregator's types (k8s-openapi has none): `spec.caBundle`
//! is base64 there, and only these fields are read. Unknown fields are ignored.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

// The same reference a webhook configuration's clientConfig makes: namespace and name.
pub use super::webhook::ServiceReference;

/// An APIService.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ApiService {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ApiServiceSpec,
    #[serde(default)]
    pub status: Option<ApiServiceStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ApiServiceSpec {
    /// Where the API is served: `None` for a local API (served by the kube-apiserver itself).
    #[serde(default)]
    pub service: Option<ServiceReference>,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ApiServiceStatus {
    #[serde(default)]
    pub conditions: Option<Vec<Condition>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Condition {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

impl ApiService {
    /// The `Available` condition when it is `False`, with its index in `status.conditions`.
    pub fn unavailable(&self) -> Option<(usize, &Condition)> {
        let conditions = self.status.as_ref()?.conditions.as_deref()?;
        conditions.iter().enumerate().find(|(_, c)| c.type_ == "Available" && c.status == "False")
    }

    /// Whether it is served by Service `namespace/name`.
    pub fn calls(&self, namespace: &str, name: &str) -> bool {
        self.spec.service.as_ref().is_some_and(|s| s.namespace == namespace && s.name == name)
    }

    /// What a view keeps of it: its name, its `ha-guard.io/` annotations (exemptions), its spec
    /// and its conditions. The rest of its metadata (managedFields above all) is dropped: the live
    /// view holds every aggregated APIService, and keeps them small.
    pub fn slim(&self) -> ApiService {
        let annotations = self.metadata.annotations.as_ref().map(|a| {
            a.iter().filter(|(k, _)| k.starts_with("ha-guard.io/")).map(|(k, v)| (k.clone(), v.clone())).collect()
        });
        ApiService {
            metadata: ObjectMeta { name: self.metadata.name.clone(), annotations, ..Default::default() },
            spec: self.spec.clone(),
            status: self.status.clone(),
        }
    }

    /// `visibility.kueue.x-k8s.io/v1beta1`: the API it serves.
    pub fn api(&self) -> String {
        format!("{}/{}", self.spec.group, self.spec.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_condition_is_found_and_a_local_api_has_no_service() {
        let a: ApiService = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "v1beta1.visibility.kueue.x-k8s.io"},
            "spec": {"group": "visibility.kueue.x-k8s.io", "version": "v1beta1", "caBundle": "not base64",
                     "service": {"namespace": "kueue-system", "name": "kueue-visibility-server"}},
            "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints",
                                       "message": "endpoints for service/kueue-visibility-server in \"kueue-system\" have no addresses"}]}
        }))
        .unwrap();
        let (i, c) = a.unavailable().unwrap();
        assert_eq!((i, c.reason.as_deref()), (0, Some("MissingEndpoints")));
        assert_eq!(a.api(), "visibility.kueue.x-k8s.io/v1beta1");
        let local: ApiService = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1"},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}
        }))
        .unwrap();
        assert!(local.spec.service.is_none() && local.unavailable().is_none());
    }
}

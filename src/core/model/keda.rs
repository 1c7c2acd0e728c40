//! KEDA's ScaledObject (`keda.sh/v1alpha1`), an autoscaler like an HPA (DESIGN.md §2, second
//! round). Not in k8s-openapi (a custom resource), so a minimal type with only the fields read;
//! unknown fields are ignored.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ScaledObject {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<ScaledObjectSpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaledObjectSpec {
    pub scale_target_ref: Option<ScaleTargetRef>,
    /// Unset is 0: KEDA scales the target to zero when idle.
    pub min_replica_count: Option<i32>,
    /// Unset is 100.
    pub max_replica_count: Option<i32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// Unset is `apps/v1`.
    pub api_version: Option<String>,
    /// Unset is `Deployment`.
    pub kind: Option<String>,
    #[serde(default)]
    pub name: String,
}

//! KEDA's ScaledObject (`keda.sh/v1alpha1`), an autoscaler like an HPA (DESIGN.md §2, second
//! round). Not in k8s-openapi (a custom resource), so a minimal type with only the fields read;
//! unknown fields are ignored.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

#[derive(Clone, Debug, Default)]
pub struct ScaledObject {
    pub metadata: ObjectMeta,
    pub spec: Option<ScaledObjectSpec>,
    /// Why `spec` could not be read (it is then `None`). A custom resource's fields are whatever
    /// its CRD's schema allows, so one odd ScaledObject must not fail the watch of all of them:
    /// the watch keeps it without a spec, `check` and `audit` report it as not checked.
    pub unreadable: Option<String>,
}

impl<'de> Deserialize<'de> for ScaledObject {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Option<serde_json::Value>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let (spec, unreadable) = match raw.spec {
            None | Some(serde_json::Value::Null) => (None, None),
            Some(v) => match ScaledObjectSpec::deserialize(&v) {
                Ok(spec) => (Some(spec), None),
                Err(e) => (None, Some(e.to_string())),
            },
        };
        Ok(ScaledObject { metadata: raw.metadata, spec, unreadable })
    }
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

/// A ScaledObject decoded strictly: where its spec fails to decode (the path of an error).
#[derive(Deserialize)]
pub struct StrictScaledObject {
    #[serde(default)]
    pub spec: Option<ScaledObjectSpec>,
}

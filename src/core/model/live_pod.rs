//! A running Pod as the live posture rules and the drain simulation read it: only the fields they
//! need, so that decoding a page of thousands of pods skips everything else (containers, volumes,
//! status details). k8s-openapi's `Pod` would decode every field of every pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::resources::{HostPort, Resources, host_ports, pod_requests};

/// The annotation the kubelet puts on the API mirror of a static pod.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// A Pod, as much of it as is read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct LivePod {
    pub metadata: LivePodMeta,
    pub spec: LivePodSpec,
    pub status: LivePodStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LivePodMeta {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// Only the keys matter (the mirror annotation); the values are skipped.
    pub annotations: BTreeMap<String, IgnoredAny>,
    pub owner_references: Vec<OwnerReference>,
    pub deletion_timestamp: Option<IgnoredAny>,
}

/// An `ownerReferences` item.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub controller: Option<bool>,
}

impl OwnerReference {
    /// The API group of its `apiVersion`: `apps` of `apps/v1`, `` (the core group) of `v1`.
    pub fn group(&self) -> &str {
        self.api_version.split_once('/').map_or("", |(group, _)| group)
    }

    /// Whether it names a `kind` of API group `group`, of any version: a kind's name alone is not
    /// enough (OpenKruise's `apps.kruise.io` StatefulSet and DaemonSet are not `apps`' own).
    pub fn is(&self, group: &str, kind: &str) -> bool {
        self.kind == kind && self.group() == group
    }
}

/// The controller among `owners` (the one `controller: true` marks), if any.
pub fn controller_of(owners: &[OwnerReference]) -> Option<&OwnerReference> {
    owners.iter().find(|o| o.controller == Some(true))
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LivePodSpec {
    pub node_name: Option<String>,
    pub tolerations: Vec<Toleration>,
    /// What the scheduler reads of them: requests and ports (`LiveContainer`).
    pub containers: Vec<LiveContainer>,
    pub init_containers: Vec<LiveContainer>,
    pub host_network: Option<bool>,
    pub overhead: Option<BTreeMap<String, Quantity>>,
    /// Pod-level resources (the apiserver stores their requests defaulted).
    pub resources: Option<LiveResources>,
    pub affinity: Option<LiveAffinity>,
    /// Of its volumes, the claims (the volume filters of a drain read them).
    pub volumes: Vec<LiveVolume>,
    /// Its priority as the apiserver resolved its PriorityClass, and whether it may preempt
    /// (`preemptionPolicy: Never` may not).
    pub priority: Option<i32>,
    pub preemption_policy: Option<String>,
}

/// A volume, as much as the drain's volume filters read: its name, the claim it mounts, if any,
/// and whether it is a generic ephemeral volume (whose claim is named after the pod and it).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LiveVolume {
    pub name: String,
    pub persistent_volume_claim: Option<LiveClaimSource>,
    pub ephemeral: Option<IgnoredAny>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LiveClaimSource {
    pub claim_name: String,
}

/// Of a pod's affinity, what the placement of other pods reads: its required anti-affinity.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LiveAffinity {
    pub pod_anti_affinity: Option<LiveAntiAffinity>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LiveAntiAffinity {
    pub required_during_scheduling_ignored_during_execution: Vec<k8s_openapi::api::core::v1::PodAffinityTerm>,
}

/// A container, as much as placement reads: its requests, host ports and restart policy (a
/// restartable init container is a sidecar).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LiveContainer {
    pub resources: LiveResources,
    pub ports: Vec<ContainerPort>,
    pub restart_policy: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct LiveResources {
    pub requests: Option<BTreeMap<String, Quantity>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct LivePodStatus {
    pub phase: Option<String>,
    pub conditions: Vec<PodCondition>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

impl LivePod {
    fn condition(&self, type_: &str) -> Option<&PodCondition> {
        self.status.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Its `Ready` condition is `True`.
    pub fn ready(&self) -> bool {
        self.condition("Ready").is_some_and(|c| c.status == "True")
    }

    /// The scheduler's message when it could not place the pod (`PodScheduled` is `False` with
    /// reason `Unschedulable`).
    pub fn unschedulable(&self) -> Option<&str> {
        self.condition("PodScheduled")
            .filter(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
            .map(|c| c.message.as_deref().unwrap_or(""))
    }

    pub fn mirror(&self) -> bool {
        self.metadata.annotations.contains_key(MIRROR_ANNOTATION)
    }

    /// The spec as placement reads it (requests, ports), for [`pod_requests`] and [`host_ports`].
    fn placement_spec(&self) -> PodSpec {
        let container = |c: &LiveContainer| Container {
            resources: Some(ResourceRequirements { requests: c.resources.requests.clone(), ..Default::default() }),
            ports: Some(c.ports.clone()),
            restart_policy: c.restart_policy.clone(),
            ..Default::default()
        };
        PodSpec {
            containers: self.spec.containers.iter().map(container).collect(),
            init_containers: Some(self.spec.init_containers.iter().map(container).collect()),
            host_network: self.spec.host_network,
            overhead: self.spec.overhead.clone(),
            resources: self
                .spec
                .resources
                .as_ref()
                .map(|r| ResourceRequirements { requests: r.requests.clone(), ..Default::default() }),
            ..Default::default()
        }
    }

    /// Its required pod anti-affinity terms.
    pub fn required_anti_affinity(&self) -> std::sync::Arc<[k8s_openapi::api::core::v1::PodAffinityTerm]> {
        let terms = self.spec.affinity.as_ref().and_then(|a| a.pod_anti_affinity.as_ref());
        terms.map(|t| t.required_during_scheduling_ignored_during_execution.as_slice().into()).unwrap_or_default()
    }

    /// The PersistentVolumeClaims it mounts by name, which a replacement mounts again (a
    /// StatefulSet's are its pod's by name). A generic ephemeral volume's claim is not among them:
    /// it goes with its pod, and the replacement's is provisioned anew where it is placed.
    pub fn claims(&self) -> std::sync::Arc<[std::sync::Arc<str>]> {
        let mut claims = self.spec.volumes.iter().filter_map(|v| v.persistent_volume_claim.as_ref()).peekable();
        // Most pods mount no claim: the empty default shares one allocation-free value, where
        // collecting nothing would allocate one per pod of the view.
        if claims.peek().is_none() {
            return Default::default();
        }
        claims.map(|c| c.claim_name.as_str().into()).collect()
    }

    /// The claims of its generic ephemeral volumes, `<pod>-<volume>` as the ephemeral volume
    /// controller names them (`ephemeral.VolumeClaimName`): they go with the pod, but while it runs
    /// they are attached to its node (NodeVolumeLimits counts them).
    pub fn ephemeral_claims(&self) -> std::sync::Arc<[std::sync::Arc<str>]> {
        let mut volumes = self.spec.volumes.iter().filter(|v| v.ephemeral.is_some()).peekable();
        if volumes.peek().is_none() {
            return Default::default();
        }
        volumes.map(|v| format!("{}-{}", self.metadata.name, v.name).into()).collect()
    }

    /// What the pod asks of its node, as the scheduler sums it.
    pub fn requests(&self) -> Resources {
        pod_requests(&self.placement_spec())
    }

    /// Its host ports.
    pub fn host_ports(&self) -> Vec<HostPort> {
        host_ports(&self.placement_spec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only `persistentVolumeClaim` volumes are claims a replacement mounts again.
    #[test]
    fn the_claims_are_the_persistent_volume_claims_it_mounts() {
        let pod = |volumes: serde_json::Value| -> LivePod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "db-0"}, "spec": {"volumes": volumes}}))
                .expect("a pod")
        };
        let mounted = pod(serde_json::json!([
            {"name": "config", "configMap": {"name": "db"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
        ]));
        let claims = mounted.claims();
        let names: Vec<&str> = claims.iter().map(|c| &**c).collect();
        assert_eq!(names, ["data-db-0"]);
        let ephemeral = mounted.ephemeral_claims();
        assert_eq!(ephemeral.iter().map(|c| &**c).collect::<Vec<_>>(), ["db-0-scratch"], "named after pod and volume");
        assert!(pod(serde_json::json!([{"name": "config", "configMap": {"name": "db"}}])).claims().is_empty());
    }

    #[test]
    fn reads_only_what_is_needed_and_ignores_the_rest() {
        let pod: LivePod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"},
                "annotations": {"kubernetes.io/config.mirror": "abc", "big": {"nested": [1, 2]}},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9", "uid": "u", "controller": true}],
                "managedFields": [{"manager": "x"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints."},
                {"type": "Ready", "status": "False"}]}
        }))
        .unwrap();
        assert_eq!(pod.metadata.name, "web-1");
        assert!(pod.mirror());
        assert!(!pod.ready());
        assert_eq!(controller_of(&pod.metadata.owner_references).map(|o| o.name.as_str()), Some("web-5d9"));
        assert!(pod.unschedulable().unwrap().contains("topology spread"));
        assert_eq!(pod.spec.tolerations.len(), 1);
        let empty: LivePod = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(!empty.ready() && empty.unschedulable().is_none() && !empty.mirror());
    }

    /// What placement reads of a stored pod beyond its containers: pod-level requests and
    /// overhead (summed as the scheduler does), and its required anti-affinity terms.
    #[test]
    fn a_stored_pod_keeps_its_pod_level_requests_overhead_and_anti_affinity() {
        let pod: LivePod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "data"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "4"}},
                "overhead": {"cpu": "250m"},
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]},
                    "nodeAffinity": {"ignored": true}}}
        }))
        .unwrap();
        let r = pod.requests();
        assert_eq!((r.cpu_milli, r.memory), (2250, 1 << 30), "the pod-level requests, and the overhead on top");
        let terms = pod.required_anti_affinity();
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].topology_key, "kubernetes.io/hostname");
        let plain: LivePod =
            serde_json::from_value(serde_json::json!({"spec": {"containers": [{"name": "c"}]}})).unwrap();
        assert!(plain.required_anti_affinity().is_empty() && plain.requests().is_zero());
    }
}

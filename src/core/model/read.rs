//! Specs as the rules read them: the fields of a Deployment's or StatefulSet's spec, and of an
//! HPA's, that a rule, a mutation or the view's projection reads, decoded into the k8s-openapi
//! types with every other field left at its default.
//!
//! The webhook decodes the object of each request this way (`server::review::subject`): a pod
//! template is most of a workload, and k8s-openapi's deserializers for all of it (containers'
//! env, probes, resources, security contexts…) were half of `/validate`'s instructions for a
//! Deployment and most of its instruction-cache misses (benches/perf/lean-decode). The fields
//! not listed here are not read, so not type-checked either: the apiserver has decoded the
//! object into its own types before it calls admission, so they are well-typed by then.
//!
//! A rule that reads a field not listed here adds it here: the rules' own tests decode their
//! subjects through this module too ([`only_read_fields_of`], used by
//! `core::testing`), so a rule reading a field that is missing here fails its tests, and
//! `tests/it/read_fields.rs` checks that findings and patches are the same as with the whole
//! object on every fixture and corpus manifest.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::autoscaling::v2::{CrossVersionObjectReference, HorizontalPodAutoscalerSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, Lifecycle, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec,
    ResourceRequirements, Toleration, TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::defaults;
use super::object::{Kind, Workload};

/// The spec of a workload kind as the rules read it.
pub trait WorkloadSpecRead: DeserializeOwned {
    const KIND: Kind;

    /// Whether the spec states `selector` and `template.spec.containers`, each present and not
    /// null. The API requires both; a manifest without them (a kustomize base) is decoded the
    /// general way, which reports them missing, where k8s-openapi would silently default them.
    fn states_required_fields(&self) -> bool;

    /// The workload, defaulted, with this spec and `metadata`.
    fn into_workload(self, metadata: ObjectMeta) -> Workload;
}

fn states_containers(template: Option<&TemplateRead>) -> bool {
    template.and_then(|t| t.spec.as_ref()).is_some_and(|s| s.containers.is_some())
}

/// `spec` of a Deployment.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpecRead {
    replicas: Option<i32>,
    selector: Option<LabelSelector>,
    strategy: Option<DeploymentStrategy>,
    template: Option<TemplateRead>,
}

impl From<DeploymentSpecRead> for DeploymentSpec {
    fn from(s: DeploymentSpecRead) -> DeploymentSpec {
        DeploymentSpec {
            replicas: s.replicas,
            selector: s.selector.unwrap_or_default(),
            strategy: s.strategy,
            template: s.template.map(Into::into).unwrap_or_default(),
            ..Default::default()
        }
    }
}

impl WorkloadSpecRead for DeploymentSpecRead {
    const KIND: Kind = Kind::Deployment;

    fn states_required_fields(&self) -> bool {
        self.selector.is_some() && states_containers(self.template.as_ref())
    }

    fn into_workload(self, metadata: ObjectMeta) -> Workload {
        defaults::deployment(Deployment { metadata, spec: Some(self.into()), status: None })
    }
}

/// `spec` of a StatefulSet.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetSpecRead {
    replicas: Option<i32>,
    selector: Option<LabelSelector>,
    update_strategy: Option<StatefulSetUpdateStrategy>,
    template: Option<TemplateRead>,
}

impl From<StatefulSetSpecRead> for StatefulSetSpec {
    fn from(s: StatefulSetSpecRead) -> StatefulSetSpec {
        StatefulSetSpec {
            replicas: s.replicas,
            selector: s.selector.unwrap_or_default(),
            update_strategy: s.update_strategy,
            template: s.template.map(Into::into).unwrap_or_default(),
            ..Default::default()
        }
    }
}

impl WorkloadSpecRead for StatefulSetSpecRead {
    const KIND: Kind = Kind::StatefulSet;

    fn states_required_fields(&self) -> bool {
        self.selector.is_some() && states_containers(self.template.as_ref())
    }

    fn into_workload(self, metadata: ObjectMeta) -> Workload {
        defaults::stateful_set(StatefulSet { metadata, spec: Some(self.into()), status: None })
    }
}

/// `spec.template`: of its metadata, the labels (what selectors and PDBs match).
#[derive(Deserialize)]
pub struct TemplateRead {
    metadata: Option<TemplateMetaRead>,
    spec: Option<PodSpecRead>,
}

#[derive(Deserialize)]
struct TemplateMetaRead {
    labels: Option<BTreeMap<String, String>>,
}

impl From<TemplateRead> for PodTemplateSpec {
    fn from(t: TemplateRead) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: t.metadata.map(|m| ObjectMeta { labels: m.labels, ..Default::default() }),
            spec: t.spec.map(Into::into),
        }
    }
}

/// `spec.template.spec`: where replicas may run (spreads, affinity, tolerations, node selector,
/// host network and ports), what they mount, and how they stop.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecRead {
    affinity: Option<Affinity>,
    containers: Option<Vec<ContainerRead>>,
    host_network: Option<bool>,
    init_containers: Option<Vec<ContainerRead>>,
    node_selector: Option<BTreeMap<String, String>>,
    overhead: Option<BTreeMap<String, Quantity>>,
    termination_grace_period_seconds: Option<i64>,
    tolerations: Option<Vec<Toleration>>,
    topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    volumes: Option<Vec<VolumeRead>>,
}

impl From<PodSpecRead> for PodSpec {
    fn from(s: PodSpecRead) -> PodSpec {
        let containers = |list: Option<Vec<ContainerRead>>| list.map(|l| l.into_iter().map(Into::into).collect());
        PodSpec {
            affinity: s.affinity,
            containers: containers(s.containers).unwrap_or_default(),
            host_network: s.host_network,
            init_containers: containers(s.init_containers),
            node_selector: s.node_selector,
            overhead: s.overhead,
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: s.tolerations,
            topology_spread_constraints: s.topology_spread_constraints,
            volumes: s.volumes.map(|v| v.into_iter().map(Into::into).collect()),
            ..Default::default()
        }
    }
}

/// A container: its name and image (the CSI controller check), its lifecycle (preStop against
/// the grace period), its ports (host ports), its requests and restart policy (where the
/// scheduler can place replicas: `spread-unsatisfiable`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerRead {
    name: Option<String>,
    image: Option<String>,
    lifecycle: Option<Lifecycle>,
    ports: Option<Vec<ContainerPort>>,
    resources: Option<ResourcesRead>,
    restart_policy: Option<String>,
}

/// A container's `resources`: its requests, and its limits (a missing request is the limit on the
/// Pod the apiserver stores: `resources::pod_requests`).
#[derive(Deserialize)]
struct ResourcesRead {
    requests: Option<BTreeMap<String, Quantity>>,
    limits: Option<BTreeMap<String, Quantity>>,
}

impl From<ContainerRead> for Container {
    fn from(c: ContainerRead) -> Container {
        Container {
            name: c.name.unwrap_or_default(),
            image: c.image,
            lifecycle: c.lifecycle,
            ports: c.ports,
            resources: c.resources.map(|r| ResourceRequirements {
                requests: r.requests,
                limits: r.limits,
                ..Default::default()
            }),
            restart_policy: c.restart_policy,
            ..Default::default()
        }
    }
}

/// A volume: its claim, if it mounts a PVC.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolumeRead {
    name: Option<String>,
    persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
}

impl From<VolumeRead> for Volume {
    fn from(v: VolumeRead) -> Volume {
        Volume {
            name: v.name.unwrap_or_default(),
            persistent_volume_claim: v.persistent_volume_claim,
            ..Default::default()
        }
    }
}

/// `spec` of an autoscaling/v2 HorizontalPodAutoscaler: its target and bounds.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HpaSpecRead {
    scale_target_ref: Option<CrossVersionObjectReference>,
    min_replicas: Option<i32>,
    max_replicas: Option<i32>,
}

impl From<HpaSpecRead> for HorizontalPodAutoscalerSpec {
    fn from(s: HpaSpecRead) -> HorizontalPodAutoscalerSpec {
        HorizontalPodAutoscalerSpec {
            scale_target_ref: s.scale_target_ref.unwrap_or_default(),
            min_replicas: s.min_replicas,
            max_replicas: s.max_replicas.unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// A subject cut down to the fields read: what the webhook's decoding gives for the same object
/// (a workload's pod template, an HPA's spec without its status). For tests, which decode their
/// subjects the whole way and judge them in this shape.
#[cfg(test)]
pub fn only_read_fields_of(subject: super::object::Subject) -> super::object::Subject {
    use super::object::Subject;
    fn cut<R: DeserializeOwned + Into<T>, T: serde::Serialize>(whole: &T) -> T {
        let value = serde_json::to_value(whole).expect("a k8s-openapi object serializes");
        R::deserialize(&value).expect("a serialized k8s-openapi object decodes").into()
    }
    match subject {
        Subject::Workload(mut w) => {
            w.template = cut::<TemplateRead, _>(&w.template);
            Subject::Workload(w)
        }
        Subject::Hpa(mut h) => {
            h.spec = h.spec.as_ref().map(cut::<HpaSpecRead, _>);
            h.status = None;
            Subject::Hpa(h)
        }
        other => other,
    }
}

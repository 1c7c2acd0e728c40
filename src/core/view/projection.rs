//! Projections: what the view keeps of each object (only the fields the rules read), shared by
//! the static and the live views.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::core::model::arith::Budget;
use crate::core::model::{
    Exemptions, Kind, ObjectRef, ReplicasSource, Workload, exemptions_of, name_of, ns_of, pod, selector,
};

/// A workload as other objects' rules see it.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadInfo {
    pub id: ObjectRef,
    pub selector: Option<Arc<LabelSelector>>,
    pub template_labels: BTreeMap<String, String>,
    pub replicas: i32,
    /// Whether its manifest sets `replicas` (for `hpa-replicas-conflict` from the HPA's side).
    pub replicas_source: ReplicasSource,
    pub claim_names: Vec<String>,
    pub exemptions: Exemptions,
    /// Non-empty `labelSelector`s of its topology spread constraints (for overlap from the other side).
    /// One equal to `selector` (the usual hostname spread) shares it.
    pub spread_selectors: Vec<Arc<LabelSelector>>,
    /// A hostname spread or a pod anti-affinity against its own pods keeps replicas apart.
    pub kept_apart: bool,
    /// `hostNetwork: true` without a hard one-per-node rule.
    pub host_network_unprotected: bool,
    /// For a Deployment with `strategy: Recreate`: its container names and image names.
    pub recreate_containers: Option<Vec<String>>,
}

impl WorkloadInfo {
    pub fn of(w: &Workload) -> Self {
        let selector = w.selector.clone().map(Arc::new);
        let spread_selectors = pod::spread_selectors(w)
            .into_iter()
            .map(|s| match &selector {
                Some(own) if **own == s => own.clone(),
                _ => Arc::new(s),
            })
            .collect();
        WorkloadInfo {
            id: w.id(),
            selector,
            template_labels: w.template_labels().clone(),
            replicas: w.replicas,
            replicas_source: w.replicas_source,
            claim_names: w.claim_names(),
            exemptions: exemptions_of(&w.meta),
            spread_selectors,
            kept_apart: pod::kept_apart(w),
            host_network_unprotected: pod::host_network_unprotected(w),
            recreate_containers: pod::recreate_containers(w),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PdbInfo {
    pub id: ObjectRef,
    /// `None` is a null selector (matches no pod in policy/v1); `Some({})` matches every pod.
    pub selector: Option<LabelSelector>,
    pub min_available: Option<IntOrString>,
    pub max_unavailable: Option<IntOrString>,
    pub exemptions: Exemptions,
}

impl PdbInfo {
    pub fn of(p: &PodDisruptionBudget) -> Self {
        let spec = p.spec.clone().unwrap_or_default();
        PdbInfo {
            id: ObjectRef::new(Kind::PodDisruptionBudget, ns_of(&p.metadata), name_of(&p.metadata)),
            selector: spec.selector,
            min_available: spec.min_available,
            max_unavailable: spec.max_unavailable,
            exemptions: exemptions_of(&p.metadata),
        }
    }

    /// The budget its `minAvailable` / `maxUnavailable` set.
    pub fn budget(&self) -> Budget {
        Budget::new(self.min_available.as_ref(), self.max_unavailable.as_ref())
    }

    pub fn covers(&self, template_labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_some_and(|s| selector::matches(s, template_labels))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct HpaInfo {
    pub id: ObjectRef,
    /// The workload it scales, when its `scaleTargetRef` names a Deployment or StatefulSet.
    pub target: Option<ObjectRef>,
    pub target_description: String,
    pub min_replicas: i32,
    pub max_replicas: i32,
    pub exemptions: Exemptions,
}

impl HpaInfo {
    pub fn of(h: &HorizontalPodAutoscaler) -> Self {
        let ns = ns_of(&h.metadata);
        let spec = h.spec.clone().unwrap_or_default();
        let r = &spec.scale_target_ref;
        let target = Kind::workload_from_ref(r.api_version.as_deref(), &r.kind)
            .map(|k| ObjectRef::new(k, ns.clone(), r.name.clone()));
        HpaInfo {
            id: ObjectRef::new(Kind::HorizontalPodAutoscaler, ns, name_of(&h.metadata)),
            target,
            target_description: format!("{} {}", r.kind, r.name),
            min_replicas: spec.min_replicas.unwrap_or(crate::core::model::defaults::HPA_MIN_REPLICAS),
            max_replicas: spec.max_replicas,
            exemptions: exemptions_of(&h.metadata),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PvcInfo {
    pub id: ObjectRef,
    pub access_modes: Vec<String>,
    pub exemptions: Exemptions,
}

impl PvcInfo {
    pub fn of(p: &PersistentVolumeClaim) -> Self {
        PvcInfo {
            id: ObjectRef::new(Kind::PersistentVolumeClaim, ns_of(&p.metadata), name_of(&p.metadata)),
            access_modes: p.spec.as_ref().and_then(|s| s.access_modes.clone()).unwrap_or_default(),
            exemptions: exemptions_of(&p.metadata),
        }
    }

    /// Only ReadWriteOnce / ReadWriteOncePod: one node (or one pod) at a time.
    pub fn single_attach(&self) -> bool {
        !self.access_modes.is_empty()
            && self.access_modes.iter().all(|m| m == "ReadWriteOnce" || m == "ReadWriteOncePod")
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
}

impl NodeInfo {
    pub fn of(n: &Node) -> Self {
        let spec = n.spec.clone().unwrap_or_default();
        NodeInfo {
            name: name_of(&n.metadata),
            labels: n.metadata.labels.clone().unwrap_or_default(),
            unschedulable: spec.unschedulable.unwrap_or(false),
            taints: spec
                .taints
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                .collect(),
        }
    }
}

/// Whether one of `w`'s topology spread selectors matches pods with `labels`.
pub fn spreads_over(w: &WorkloadInfo, labels: &BTreeMap<String, String>) -> bool {
    w.spread_selectors.iter().any(|s| selector::matches(s, labels))
}

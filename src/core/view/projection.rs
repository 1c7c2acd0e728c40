//! Projections: what the view keeps of each object (only the fields the rules read), shared by
//! the static and the live views.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Service, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::core::model::arith::Budget;
use crate::core::model::defaults::{HPA_MIN_REPLICAS, KEDA_MAX_REPLICAS, KEDA_MIN_REPLICAS};
use crate::core::model::keda::ScaledObject;
use crate::core::model::live_pod::{LivePod, OwnerReference};
use crate::core::model::resources::{HostPort, Resources, quantity};
use crate::core::model::webhook::WebhookConfiguration;
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
            replicas_source: w.replicas_source.clone(),
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
    /// `unhealthyPodEvictionPolicy: AlwaysAllow`: a pod that is not Ready may be evicted whatever
    /// the budget (the drain simulation reads it).
    pub always_allow_unhealthy: bool,
    /// What the disruption controller last wrote in `status`, if it has (`pdb-disruptions-blocked`).
    pub status: Option<PdbStatus>,
    /// `metadata.generation`: a status observed at an older one is stale.
    pub generation: i64,
}

/// A PDB's `status` as the disruption controller writes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PdbStatus {
    pub disruptions_allowed: i32,
    pub expected_pods: i32,
    pub current_healthy: i32,
    pub desired_healthy: i32,
    /// The generation of the spec this status was computed for.
    pub observed_generation: i64,
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
            always_allow_unhealthy: spec.unhealthy_pod_eviction_policy.as_deref() == Some("AlwaysAllow"),
            status: p.status.as_ref().map(|s| PdbStatus {
                disruptions_allowed: s.disruptions_allowed,
                expected_pods: s.expected_pods,
                current_healthy: s.current_healthy,
                desired_healthy: s.desired_healthy,
                observed_generation: s.observed_generation.unwrap_or(0),
            }),
            generation: p.metadata.generation.unwrap_or(0),
        }
    }

    /// The status, when it was computed for the current spec: what the eviction API reads. A
    /// stale one (`observedGeneration` < `generation`) makes the eviction API refuse every
    /// eviction (429) until the disruption controller has caught up.
    pub fn current_status(&self) -> Option<PdbStatus> {
        self.written_status().filter(|s| s.observed_generation >= self.generation)
    }

    /// The status the disruption controller wrote, current or not: the apiserver creates every
    /// PDB with a zero status (`observedGeneration` unset), which no controller has computed.
    pub fn written_status(&self) -> Option<PdbStatus> {
        self.status.filter(|s| s.observed_generation >= 1 || self.generation == 0)
    }

    /// The controller wrote a status, for an older spec than the current one.
    pub fn status_is_stale(&self) -> bool {
        self.written_status().is_some_and(|s| s.observed_generation < self.generation)
    }

    /// The budget its `minAvailable` / `maxUnavailable` set.
    pub fn budget(&self) -> Budget {
        Budget::new(self.min_available.as_ref(), self.max_unavailable.as_ref())
    }

    pub fn covers(&self, template_labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_some_and(|s| selector::matches(s, template_labels))
    }
}

/// An autoscaler: a HorizontalPodAutoscaler or a KEDA ScaledObject (`id.kind` says which). Both
/// set a workload's floor and ceiling the same way (DESIGN.md §2), so the view keeps them alike and
/// everything that reads a workload's autoscalers (`hpas_targeting`, [`Bounds`](super::Bounds))
/// gets both.
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
        let default = HorizontalPodAutoscalerSpec::default();
        let spec = h.spec.as_ref().unwrap_or(&default);
        let r = &spec.scale_target_ref;
        let target = Kind::workload_from_ref(r.api_version.as_deref(), &r.kind)
            .map(|k| ObjectRef::new(k, ns.clone(), r.name.clone()));
        HpaInfo {
            id: ObjectRef::new(Kind::HorizontalPodAutoscaler, ns, name_of(&h.metadata)),
            target,
            target_description: format!("{} {}", r.kind, r.name),
            min_replicas: spec.min_replicas.unwrap_or(HPA_MIN_REPLICAS),
            max_replicas: spec.max_replicas,
            exemptions: exemptions_of(&h.metadata),
        }
    }

    /// A ScaledObject: `minReplicaCount` (unset 0) and `maxReplicaCount` (unset 100) are its
    /// bounds; its `scaleTargetRef` defaults to an apps/v1 Deployment.
    pub fn of_scaled_object(s: &ScaledObject) -> Self {
        let ns = ns_of(&s.metadata);
        let default = Default::default();
        let spec = s.spec.as_ref().unwrap_or(&default);
        let (target, target_description) = match &spec.scale_target_ref {
            Some(r) => {
                let kind = r.kind.as_deref().unwrap_or("Deployment");
                let target = Kind::workload_from_ref(Some(r.api_version.as_deref().unwrap_or("apps/v1")), kind)
                    .map(|k| ObjectRef::new(k, ns.clone(), r.name.clone()));
                (target, format!("{kind} {}", r.name))
            }
            None => (None, "nothing (no scaleTargetRef)".to_string()),
        };
        HpaInfo {
            id: ObjectRef::new(Kind::ScaledObject, ns, name_of(&s.metadata)),
            target,
            target_description,
            min_replicas: spec.min_replica_count.unwrap_or(KEDA_MIN_REPLICAS),
            max_replicas: spec.max_replica_count.unwrap_or(KEDA_MAX_REPLICAS),
            exemptions: exemptions_of(&s.metadata),
        }
    }

    /// "HPA web" or "ScaledObject web": how messages name it.
    pub fn short_name(&self) -> String {
        match self.id.kind {
            Kind::HorizontalPodAutoscaler => format!("HPA {}", self.id.name),
            kind => format!("{kind} {}", self.id.name),
        }
    }
}

/// A Service as `webhook-fail-closed-unavailable` reads it: whose pods it sends traffic to.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceInfo {
    pub id: ObjectRef,
    /// `spec.selector` as a label selector; `None` when unset or empty (no managed endpoints:
    /// the backends are whatever EndpointSlices someone writes, which the view does not know).
    pub selector: Option<LabelSelector>,
    pub exemptions: Exemptions,
}

impl ServiceInfo {
    pub fn of(s: &Service) -> Self {
        let selector = s
            .spec
            .as_ref()
            .and_then(|spec| spec.selector.clone())
            .filter(|m| !m.is_empty())
            .map(|m| LabelSelector { match_labels: Some(m), match_expressions: None });
        ServiceInfo {
            id: ObjectRef::new(Kind::Service, ns_of(&s.metadata), name_of(&s.metadata)),
            selector,
            exemptions: exemptions_of(&s.metadata),
        }
    }
}

/// Where a webhook sends its reviews.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Backend {
    /// `clientConfig.service`: the pods the Service selects.
    Service { namespace: String, name: String },
    /// `clientConfig.url`: one endpoint.
    Url(String),
}

/// A webhook that makes the apiserver refuse the writes it intercepts when it cannot be called.
#[derive(Clone, Debug, PartialEq)]
pub struct FailClosedWebhook {
    /// Its index in `webhooks` (for the field path).
    pub index: usize,
    pub name: String,
    pub backend: Backend,
    /// What it intercepts, rendered for messages once, here.
    pub intercepts: String,
    /// It has no namespaceSelector or objectSelector: it intercepts its resources everywhere.
    pub every_namespace: bool,
    /// How much it intercepts, for ordering the webhooks a message names (widest first).
    pub reach: Reach,
    /// Its namespaceSelector when it selects some namespaces only (not empty) and every resource
    /// it intercepts is namespaced (a cluster-scoped resource is intercepted whatever the
    /// selector says, a Namespace by its own labels): which namespaces it can intercept in.
    pub namespace_selector: Option<LabelSelector>,
}

/// How much of the cluster's writes a webhook intercepts: what a message names first when a
/// configuration has many. Compared as a whole, wider first ([`Reach::rank`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach {
    /// What it intercepts: 0 pods, namespaces, nodes or all resources (every workload's pods,
    /// every namespace's life); 1 another kind every cluster runs on (Deployments, StatefulSets,
    /// DaemonSets, ReplicaSets, Jobs, Services, ConfigMaps, Secrets); 2 other resources (custom
    /// resources, mostly).
    pub kinds: u8,
    /// 2: every namespace; 1: every namespace but some (a namespaceSelector that only excludes:
    /// `NotIn`, `DoesNotExist`); 0: namespaces or objects that carry some label.
    pub breadth: u8,
}

impl Reach {
    /// The kinds (resource names) whose interception reaches every workload.
    const WIDEST: &[&str] = &["pods", "namespaces", "nodes", "*"];
    /// The other kinds every cluster runs on.
    const CORE: &[&str] =
        &["deployments", "statefulsets", "daemonsets", "replicasets", "jobs", "services", "configmaps", "secrets"];

    pub fn of(w: &crate::core::model::webhook::Webhook) -> Reach {
        let resources = || {
            w.rules
                .iter()
                .flatten()
                .flat_map(|r| r.resources.iter().flatten())
                .map(|r| r.split('/').next().unwrap_or(r))
        };
        let kinds = if resources().any(|r| Self::WIDEST.contains(&r)) {
            0
        } else if resources().any(|r| Self::CORE.contains(&r)) {
            1
        } else {
            2
        };
        let empty = |s: &Option<LabelSelector>| s.as_ref().is_none_or(selector::is_empty);
        let excludes_only = |s: &LabelSelector| {
            s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && s.match_expressions.iter().flatten().all(|e| matches!(e.operator.as_str(), "NotIn" | "DoesNotExist"))
        };
        let breadth = match (&w.namespace_selector, empty(&w.object_selector)) {
            (_, false) => 0,
            (ns, true) if empty(ns) => 2,
            (Some(ns), true) if excludes_only(ns) => 1,
            _ => 0,
        };
        Reach { kinds, breadth }
    }

    /// Namespaced resources a webhook's rules commonly name: with only these (or rules scoped
    /// `Namespaced`), its namespaceSelector limits where it intercepts.
    const NAMESPACED: &[&str] = &[
        "pods",
        "deployments",
        "statefulsets",
        "daemonsets",
        "replicasets",
        "jobs",
        "cronjobs",
        "services",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "persistentvolumeclaims",
        "ingresses",
        "poddisruptionbudgets",
        "horizontalpodautoscalers",
    ];

    /// Whether every resource the webhook's rules name is namespaced.
    pub fn namespaced_only(w: &crate::core::model::webhook::Webhook) -> bool {
        let mut rules = w.rules.iter().flatten().peekable();
        rules.peek().is_some()
            && rules.all(|r| {
                r.scope.as_deref() == Some("Namespaced")
                    || r.resources
                        .iter()
                        .flatten()
                        .all(|res| Self::NAMESPACED.contains(&res.split('/').next().unwrap_or_default()))
            })
    }

    /// Sorts ascending with the widest first: by what it intercepts, then whether it does so in
    /// (nearly) every namespace; "every namespace but kube-system" is as wide as every namespace
    /// for this purpose.
    pub fn rank(self) -> (u8, bool) {
        (self.kinds, self.breadth == 0)
    }
}

/// A webhook configuration as the view keeps it: only its fail-closed webhooks (the others can
/// never block a write).
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookConfigInfo {
    pub id: ObjectRef,
    pub fail_closed: Vec<FailClosedWebhook>,
    pub exemptions: Exemptions,
}

impl WebhookConfigInfo {
    pub fn of(c: &WebhookConfiguration) -> Self {
        let fail_closed = c
            .webhooks()
            .iter()
            .enumerate()
            .filter(|(_, w)| w.fail_closed())
            .filter_map(|(index, w)| {
                let cc = w.client_config.as_ref()?;
                let backend = match (&cc.service, &cc.url) {
                    (Some(s), _) => Backend::Service { namespace: s.namespace.clone(), name: s.name.clone() },
                    (None, Some(url)) => Backend::Url(url.clone()),
                    (None, None) => return None,
                };
                Some(FailClosedWebhook {
                    index,
                    name: w.name.clone(),
                    backend,
                    intercepts: w.intercepts(),
                    every_namespace: w.namespace_selector.as_ref().is_none_or(selector::is_empty)
                        && w.object_selector.as_ref().is_none_or(selector::is_empty),
                    reach: Reach::of(w),
                    namespace_selector: w
                        .namespace_selector
                        .clone()
                        .filter(|s| !selector::is_empty(s) && Reach::namespaced_only(w)),
                })
            })
            .collect();
        WebhookConfigInfo {
            id: ObjectRef::new(c.kind(), "", name_of(&c.metadata)),
            fail_closed,
            exemptions: exemptions_of(&c.metadata),
        }
    }

    /// Whether one of its fail-closed webhooks calls Service `namespace/name`.
    pub fn calls(&self, namespace: &str, name: &str) -> bool {
        self.fail_closed
            .iter()
            .any(|w| matches!(&w.backend, Backend::Service { namespace: n, name: s } if n == namespace && s == name))
    }

    /// The Services its fail-closed webhooks call, each once, sorted.
    pub fn services(&self) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = self
            .fail_closed
            .iter()
            .filter_map(|w| match &w.backend {
                Backend::Service { namespace, name } => Some((namespace.as_str(), name.as_str())),
                Backend::Url(_) => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PvcInfo {
    pub id: ObjectRef,
    pub access_modes: Vec<String>,
    pub exemptions: Exemptions,
    /// The PersistentVolume it is bound to (`spec.volumeName`); empty: not bound.
    pub volume_name: String,
    /// Its StorageClass: the beta annotation, else `spec.storageClassName`, as
    /// `storagehelpers.GetPersistentVolumeClaimClass` reads it; empty: none.
    pub storage_class: String,
}

impl PvcInfo {
    pub fn of(p: &PersistentVolumeClaim) -> Self {
        PvcInfo {
            id: ObjectRef::new(Kind::PersistentVolumeClaim, ns_of(&p.metadata), name_of(&p.metadata)),
            access_modes: p.spec.as_ref().and_then(|s| s.access_modes.clone()).unwrap_or_default(),
            exemptions: exemptions_of(&p.metadata),
            volume_name: p.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default(),
            storage_class: p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class").cloned())
                .or_else(|| p.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
                .unwrap_or_default(),
        }
    }

    /// Only ReadWriteOnce / ReadWriteOncePod: one node (or one pod) at a time.
    pub fn single_attach(&self) -> bool {
        !self.access_modes.is_empty()
            && self.access_modes.iter().all(|m| m == "ReadWriteOnce" || m == "ReadWriteOncePod")
    }
}

/// A workload's pod template: what its controller makes a replacement pod from.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    pub labels: BTreeMap<String, String>,
    pub spec: k8s_openapi::api::core::v1::PodSpec,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
    /// `status.allocatable` (what pods may request here), `None` when the node reports none.
    pub allocatable: Option<Resources>,
    /// `status.allocatable.pods`: how many pods the node takes.
    pub max_pods: Option<i64>,
}

impl NodeInfo {
    pub fn of(n: &Node) -> Self {
        let spec = n.spec.clone().unwrap_or_default();
        let allocatable = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
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
            allocatable: allocatable.map(|a| Resources::of(Some(a))),
            max_pods: allocatable.and_then(|a| a.get("pods")).and_then(|q| quantity(&q.0)),
        }
    }
}

/// Who runs a pod, as the posture rules and the drain simulation read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodOwner {
    /// A Deployment (through the ReplicaSet that is the pod's controller) or a StatefulSet.
    Workload(Kind, Arc<str>),
    /// A DaemonSet: `kubectl drain --ignore-daemonsets` leaves its pods, which tolerate the cordon.
    DaemonSet,
    /// The API mirror of a static pod (the kubelet runs it; the API cannot evict it).
    Mirror,
    /// Another controller: a Job, a ReplicaSet of no Deployment, an operator's own kind.
    Other,
    /// No controller: `kubectl drain` refuses such a pod without `--force`.
    Unmanaged,
}

impl PodOwner {
    /// The owner of a pod whose controller is `controller`, `mirror` when it is a static pod's
    /// mirror; `replica_set_owner` names the Deployment a ReplicaSet belongs to. Matched by API
    /// group and kind: another group's kind of the same name (OpenKruise's `apps.kruise.io`
    /// StatefulSet, Advanced DaemonSet) is another controller. A DaemonSet is the one `kubectl
    /// drain` skips, as its `isControllerRefDaemonSet` (k8s.io/kubectl/pkg/drain/filters.go) knows
    /// it: kind `DaemonSet` of apiVersion `apps/v1`.
    pub fn resolve(
        controller: Option<&OwnerReference>,
        mirror: bool,
        replica_set_owner: impl FnOnce(&str) -> Option<Arc<str>>,
    ) -> PodOwner {
        if mirror {
            return PodOwner::Mirror;
        }
        let Some(c) = controller else { return PodOwner::Unmanaged };
        if c.is("apps", "ReplicaSet") {
            match replica_set_owner(&c.name) {
                Some(deployment) => PodOwner::Workload(Kind::Deployment, deployment),
                None => PodOwner::Other,
            }
        } else if c.is("apps", "StatefulSet") {
            PodOwner::Workload(Kind::StatefulSet, c.name.as_str().into())
        } else if c.kind == "DaemonSet" && c.api_version == "apps/v1" {
            PodOwner::DaemonSet
        } else if c.is("", "Node") {
            PodOwner::Mirror
        } else {
            PodOwner::Other
        }
    }
}

/// `status.phase`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    pub fn parse(phase: Option<&str>) -> PodPhase {
        match phase {
            Some("Pending") => PodPhase::Pending,
            Some("Running") => PodPhase::Running,
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            _ => PodPhase::Unknown,
        }
    }

    /// Succeeded or Failed: it runs nothing and no budget counts it.
    pub fn terminal(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

/// A pod as the view keeps it: who runs it, where, whether it is ready, its labels (for PDB
/// selectors), and, only for a pod the scheduler could not place, the scheduler's message. Pods
/// are the most numerous objects of a cluster, so this is kept small: strings that many pods
/// share (labels of one ReplicaSet, node names, owner names) are shared, not copied (`Pods`
/// interns them). The bytes per pod are not measured yet (issue 15's benchmark).
#[derive(Clone, Debug, PartialEq)]
pub struct PodInfo {
    pub name: Arc<str>,
    pub owner: PodOwner,
    pub node: Option<Arc<str>>,
    pub labels: Arc<BTreeMap<String, String>>,
    /// The scheduler's message when it could not place the pod (PodScheduled False, Unschedulable).
    pub unschedulable: Option<Box<str>>,
    pub phase: PodPhase,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// It has a deletionTimestamp: on its way out, counted healthy by no budget.
    pub terminating: bool,
    /// One of its tolerations lets it onto a cordoned node (see `toleration-wildcard`).
    pub tolerates_cordon: bool,
    /// What it asks of its node (`NodeResourcesFit`), and its host ports (`NodePorts`).
    pub requests: Resources,
    pub ports: Vec<HostPort>,
    /// Its required pod anti-affinity terms (InterPodAffinity keeps the pods they match away).
    pub anti_affinity: Arc<[k8s_openapi::api::core::v1::PodAffinityTerm]>,
    /// The PersistentVolumeClaims it mounts (the volume filters of a drain read them).
    pub claims: Arc<[Arc<str>]>,
    /// The claims of its generic ephemeral volumes (`<pod>-<volume>`): made for it and gone with
    /// it, counted on its node by NodeVolumeLimits while it runs.
    pub ephemeral_claims: Arc<[Arc<str>]>,
    /// `spec.priority` (0 where none), and whether it preempts lower-priority pods when it fits
    /// nowhere (not with `preemptionPolicy: Never`): its replacement is the same.
    pub priority: i32,
    pub preempts: bool,
}

impl PodInfo {
    /// The projection of `p`, whose owner the caller resolved (it needs the pod's ReplicaSet).
    pub fn of(p: &LivePod, owner: PodOwner) -> Self {
        PodInfo {
            name: p.metadata.name.as_str().into(),
            owner,
            node: p.spec.node_name.as_deref().filter(|n| !n.is_empty()).map(Arc::from),
            labels: Arc::new(p.metadata.labels.clone()),
            unschedulable: p.unschedulable().map(Box::from),
            phase: PodPhase::parse(p.status.phase.as_deref()),
            ready: p.ready(),
            terminating: p.metadata.deletion_timestamp.is_some(),
            tolerates_cordon: p.spec.tolerations.iter().any(|t| pod::tolerates_cordon(t).is_some()),
            requests: p.requests(),
            ports: p.host_ports(),
            anti_affinity: p.required_anti_affinity(),
            claims: p.claims(),
            ephemeral_claims: p.ephemeral_claims(),
            priority: p.spec.priority.unwrap_or(0),
            preempts: p.spec.preemption_policy.as_deref() != Some("Never"),
        }
    }

    /// Running, Ready and not terminating: what the disruption controller counts as healthy.
    pub fn healthy(&self) -> bool {
        self.phase == PodPhase::Running && self.ready && !self.terminating
    }

    /// Running on a node and not terminating (ready or not).
    pub fn running(&self) -> bool {
        self.phase == PodPhase::Running && self.node.is_some() && !self.terminating
    }

    /// The workload it belongs to, if any.
    pub fn workload(&self) -> Option<(Kind, &str)> {
        match &self.owner {
            PodOwner::Workload(kind, name) => Some((*kind, name)),
            _ => None,
        }
    }
}

/// Whether one of `w`'s topology spread selectors matches pods with `labels`.
pub fn spreads_over(w: &WorkloadInfo, labels: &BTreeMap<String, String>) -> bool {
    w.spread_selectors.iter().any(|s| selector::matches(s, labels))
}

#[cfg(test)]
mod owner_tests {
    use super::*;

    fn owner(api_version: &str, kind: &str, name: &str) -> OwnerReference {
        OwnerReference { api_version: api_version.into(), kind: kind.into(), name: name.into(), controller: Some(true) }
    }

    fn resolve(o: &OwnerReference) -> PodOwner {
        PodOwner::resolve(Some(o), false, |rs| rs.strip_suffix("-5d9").map(Arc::from))
    }

    /// Owners are matched by API group and kind: OpenKruise's StatefulSet and Advanced DaemonSet
    /// are other controllers, not the built-in ones of the same name.
    #[test]
    fn a_kruise_owner_is_not_the_built_in_kind_of_its_name() {
        assert_eq!(resolve(&owner("apps/v1", "StatefulSet", "db")), PodOwner::Workload(Kind::StatefulSet, "db".into()));
        assert_eq!(resolve(&owner("apps.kruise.io/v1beta1", "StatefulSet", "db")), PodOwner::Other);
        assert_eq!(resolve(&owner("apps/v1", "DaemonSet", "agent")), PodOwner::DaemonSet);
        // kubectl drain skips only apps/v1 DaemonSets' pods (isControllerRefDaemonSet): it evicts
        // a Kruise Advanced DaemonSet's.
        assert_eq!(resolve(&owner("apps.kruise.io/v1alpha1", "DaemonSet", "agent")), PodOwner::Other);
        assert_eq!(
            resolve(&owner("apps/v1", "ReplicaSet", "web-5d9")),
            PodOwner::Workload(Kind::Deployment, "web".into())
        );
        assert_eq!(resolve(&owner("example.com/v1", "ReplicaSet", "web-5d9")), PodOwner::Other);
        assert_eq!(resolve(&owner("apps.kruise.io/v1alpha1", "CloneSet", "web")), PodOwner::Other);
        assert_eq!(resolve(&owner("v1", "Node", "n1")), PodOwner::Mirror);
        assert_eq!(resolve(&owner("example.com/v1", "Node", "n1")), PodOwner::Other);
        assert_eq!(PodOwner::resolve(None, false, |_| None), PodOwner::Unmanaged);
    }

    #[test]
    fn the_group_is_the_api_versions_part_before_the_slash() {
        assert_eq!(owner("apps/v1", "", "").group(), "apps");
        assert_eq!(owner("apps.kruise.io/v1beta1", "", "").group(), "apps.kruise.io");
        assert_eq!(owner("v1", "", "").group(), "");
        assert!(owner("apps/v1beta2", "StatefulSet", "").is("apps", "StatefulSet"));
    }
}

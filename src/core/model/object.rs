//! Typed objects: the kinds the engine knows, the subject under review, and object references.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, PodTemplateSpec, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use super::apiservice::ApiService;
use super::keda::ScaledObject;
use super::managed;
use super::webhook::WebhookConfiguration;

/// The kinds the engine knows. Anything else is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Deployment,
    StatefulSet,
    PodDisruptionBudget,
    HorizontalPodAutoscaler,
    PersistentVolumeClaim,
    Node,
    Namespace,
    Service,
    ValidatingWebhookConfiguration,
    MutatingWebhookConfiguration,
    /// KEDA's `keda.sh/v1alpha1` ScaledObject: an autoscaler like an HPA (DESIGN.md §2, second round).
    ScaledObject,
    /// An aggregated API (`apiregistration.k8s.io/v1` APIService): decoded from files, listed by
    /// the audit, watched by the live view (those a Service serves) and judged at admission
    /// (`apiservice-unavailable`).
    ApiService,
    /// A pod, named by a finding about it alone (a bare pod that refuses a drain): never decoded
    /// from a file or a request, never watched, so it is not in [`Kind::ALL`].
    Pod,
}

impl Kind {
    /// Every kind the engine decodes and watches, in declaration order (not [`Kind::Pod`]).
    pub const ALL: [Kind; 12] = [
        Kind::Deployment,
        Kind::StatefulSet,
        Kind::PodDisruptionBudget,
        Kind::HorizontalPodAutoscaler,
        Kind::PersistentVolumeClaim,
        Kind::Node,
        Kind::Namespace,
        Kind::Service,
        Kind::ValidatingWebhookConfiguration,
        Kind::MutatingWebhookConfiguration,
        Kind::ScaledObject,
        Kind::ApiService,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::PodDisruptionBudget => "PodDisruptionBudget",
            Kind::HorizontalPodAutoscaler => "HorizontalPodAutoscaler",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::Node => "Node",
            Kind::Namespace => "Namespace",
            Kind::Service => "Service",
            Kind::ValidatingWebhookConfiguration => "ValidatingWebhookConfiguration",
            Kind::MutatingWebhookConfiguration => "MutatingWebhookConfiguration",
            Kind::ScaledObject => "ScaledObject",
            Kind::ApiService => "APIService",
            Kind::Pod => "Pod",
        }
    }

    /// The kind for an `apiVersion` + `kind` pair, for the API versions the engine decodes.
    /// `autoscaling/v1` HPAs are accepted (their bounds and target have the same shape as v2);
    /// removed versions (policy/v1beta1, extensions/v1beta1) are not: a 1.25+ cluster refuses them.
    pub fn from_type(api_version: &str, kind: &str) -> Option<Kind> {
        match (api_version, kind) {
            ("apps/v1", "Deployment") => Some(Kind::Deployment),
            ("apps/v1", "StatefulSet") => Some(Kind::StatefulSet),
            ("policy/v1", "PodDisruptionBudget") => Some(Kind::PodDisruptionBudget),
            ("autoscaling/v2" | "autoscaling/v1", "HorizontalPodAutoscaler") => Some(Kind::HorizontalPodAutoscaler),
            ("v1", "PersistentVolumeClaim") => Some(Kind::PersistentVolumeClaim),
            ("v1", "Node") => Some(Kind::Node),
            ("v1", "Namespace") => Some(Kind::Namespace),
            ("v1", "Service") => Some(Kind::Service),
            ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
                Some(Kind::ValidatingWebhookConfiguration)
            }
            ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
                Some(Kind::MutatingWebhookConfiguration)
            }
            ("keda.sh/v1alpha1", "ScaledObject") => Some(Kind::ScaledObject),
            ("apiregistration.k8s.io/v1", "APIService") => Some(Kind::ApiService),
            _ => None,
        }
    }

    /// Kind of a workload named by an HPA's `scaleTargetRef` (group-qualified or not).
    pub fn workload_from_ref(api_version: Option<&str>, kind: &str) -> Option<Kind> {
        let group_ok = |g: &str| api_version.is_none_or(|v| v.split('/').next() == Some(g));
        match kind {
            "Deployment" if group_ok("apps") => Some(Kind::Deployment),
            "StatefulSet" if group_ok("apps") => Some(Kind::StatefulSet),
            _ => None,
        }
    }

    pub fn is_workload(self) -> bool {
        matches!(self, Kind::Deployment | Kind::StatefulSet)
    }

    /// Kinds without a namespace.
    pub fn is_cluster_scoped(self) -> bool {
        matches!(
            self,
            Kind::Node
                | Kind::Namespace
                | Kind::ValidatingWebhookConfiguration
                | Kind::MutatingWebhookConfiguration
                | Kind::ApiService
        )
    }

    /// An HPA or a KEDA ScaledObject: what sets a workload's floor and ceiling.
    pub fn is_autoscaler(self) -> bool {
        matches!(self, Kind::HorizontalPodAutoscaler | Kind::ScaledObject)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Kind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Identity of an object: what findings name in `related`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ObjectRef {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectRef { kind, namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// The annotation prefix that exempts an object from a rule: `ha-guard.io/allow-<rule-id>`.
pub const EXEMPT_PREFIX: &str = "ha-guard.io/allow-";
/// The namespace label that sets the namespace mode.
pub const MODE_LABEL: &str = "ha-guard.io/mode";

/// Exemption annotations of an object, rule ID → reason (possibly empty).
pub type Exemptions = BTreeMap<String, String>;

pub fn exemptions_of(meta: &ObjectMeta) -> Exemptions {
    meta.annotations
        .iter()
        .flatten()
        .filter_map(|(k, v)| k.strip_prefix(EXEMPT_PREFIX).map(|rule| (rule.to_string(), v.clone())))
        .collect()
}

/// How a workload replaces its pods.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    Recreate,
    RollingUpdate {
        max_surge: IntOrString,
        max_unavailable: IntOrString,
    },
    /// StatefulSet `OnDelete`, or a StatefulSet rolling update (one pod at a time, no surge).
    Other(String),
}

/// Where a workload's `spec.replicas` comes from: whether applying its manifest sets the count an
/// autoscaler also sets (`hpa-replicas-conflict`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ReplicasSource {
    /// Not set by the manifest (the apiserver defaults it to 1), or not known to be.
    #[default]
    Unset,
    /// The manifest sets this count: a file's `spec.replicas`; for an object read from the
    /// apiserver, the one in the manifest client-side `kubectl apply` last applied (its annotation).
    Manifest(i32),
    /// Server-side apply sets it: field manager `manager` (Argo CD's `argocd-controller`, Flux's
    /// `kustomize-controller`, Helm 4's `helm`, `kubectl apply --server-side`'s `kubectl`, ...)
    /// owns `spec.replicas` by an `Apply` ([`managed`](super::managed)), so every apply of its
    /// manifest sets the count: `replicas`, the object's (a manager owns the value it applied;
    /// a write that changes it takes the field away).
    Applied { replicas: i32, manager: String },
    /// This write, an UPDATE of the object itself (not of its scale subresource), changes the
    /// count from `from`: at admission, the apply of a manifest that sets it. `applier`: the
    /// manager that owns the field by server-side apply after this write, if one does.
    Changed { from: i32, applier: Option<String> },
}

/// `spec.replicas` when unset (the apiserver's default for Deployments and StatefulSets).
pub const DEFAULT_REPLICAS: i32 = 1;

/// The annotation where client-side `kubectl apply` keeps the manifest it applied.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

impl ReplicasSource {
    /// For a decoded object: `replicas` is its `spec.replicas` as written, before defaulting. An
    /// object read from the apiserver (it has a uid, a resourceVersion or a creation time: the
    /// webhook's and the live view's objects, a `kubectl get -o yaml` dump) always has the field,
    /// defaulted or not, so there only its field managers (an `Apply` owner of the field) or the
    /// last-applied manifest say whether it is set.
    pub fn of(meta: &ObjectMeta, replicas: Option<i32>) -> ReplicasSource {
        let from_apiserver = meta.uid.as_deref().is_some_and(|u| !u.is_empty())
            || meta.resource_version.as_deref().is_some_and(|v| !v.is_empty())
            || meta.creation_timestamp.is_some();
        if from_apiserver {
            ReplicasSource::stored(meta, replicas.unwrap_or(DEFAULT_REPLICAS))
        } else {
            replicas.map_or(ReplicasSource::Unset, ReplicasSource::Manifest)
        }
    }

    /// Of an object as the apiserver holds it, whose count is `replicas`: an `Apply` owner of the
    /// field, else the last-applied manifest's count, else unset.
    fn stored(meta: &ObjectMeta, replicas: i32) -> ReplicasSource {
        match managed::replicas_appliers(meta).next() {
            Some(manager) => ReplicasSource::Applied { replicas, manager: manager.to_string() },
            None => applied_replicas(meta).map_or(ReplicasSource::Unset, ReplicasSource::Manifest),
        }
    }

    pub fn is_set(&self) -> bool {
        *self != ReplicasSource::Unset
    }

    /// The field manager that owns the count by server-side apply, if one does.
    pub fn applier(&self) -> Option<&str> {
        match self {
            ReplicasSource::Applied { manager, .. } => Some(manager),
            ReplicasSource::Changed { applier, .. } => applier.as_deref(),
            _ => None,
        }
    }
}

/// `spec.replicas` of the manifest `kubectl apply` last applied, if it sets one.
fn applied_replicas(meta: &ObjectMeta) -> Option<i32> {
    #[derive(serde::Deserialize)]
    struct Applied {
        spec: Option<AppliedSpec>,
    }
    #[derive(serde::Deserialize)]
    struct AppliedSpec {
        replicas: Option<i32>,
    }
    let text = meta.annotations.as_ref()?.get(LAST_APPLIED)?;
    // Most applied manifests are passed over without parsing them.
    if !text.contains("\"replicas\"") {
        return None;
    }
    serde_json::from_str::<Applied>(text).ok()?.spec?.replicas
}

/// A Deployment or StatefulSet, after the apiserver's defaults, in the shape the rules read.
#[derive(Clone, Debug)]
pub struct Workload {
    pub kind: Kind,
    pub meta: ObjectMeta,
    /// `None` when the manifest has no `spec.selector` (a kustomize base may omit it).
    pub selector: Option<LabelSelector>,
    pub replicas: i32,
    /// Whether the manifest (or this write) sets `replicas`; see [`ReplicasSource`].
    pub replicas_source: ReplicasSource,
    pub strategy: Strategy,
    pub template: PodTemplateSpec,
    /// Required fields the manifest lacks, and so could not be checked (e.g. `spec.selector`).
    pub missing: Vec<&'static str>,
}

impl Workload {
    pub fn id(&self) -> ObjectRef {
        ObjectRef::new(self.kind, ns_of(&self.meta), name_of(&self.meta))
    }

    pub fn namespace(&self) -> &str {
        self.meta.namespace.as_deref().unwrap_or("")
    }

    pub fn template_labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.template.metadata.as_ref().and_then(|m| m.labels.as_ref()).unwrap_or(&EMPTY)
    }

    pub fn pod_spec(&self) -> Option<&k8s_openapi::api::core::v1::PodSpec> {
        self.template.spec.as_ref()
    }

    /// At admission: `before` is the old object's count on an UPDATE of the object itself. A write
    /// that changes it while an autoscaler owns the count is what resets it; otherwise the field's
    /// managers (an `Apply` owner: the apiserver records this write's ownership before admission)
    /// or the last-applied manifest say whether the count is set (the object has been defaulted,
    /// and on a CREATE has no uid yet, so [`ReplicasSource::of`] cannot tell).
    pub fn admitted_replicas(&mut self, before: Option<i32>) {
        self.replicas_source = match before {
            Some(from) if from != self.replicas => ReplicasSource::Changed {
                from,
                applier: managed::replicas_appliers(&self.meta).next().map(str::to_string),
            },
            _ => ReplicasSource::stored(&self.meta, self.replicas),
        };
    }

    /// Names of the PVCs the pod template mounts through `volumes` (not volumeClaimTemplates).
    pub fn claim_names(&self) -> Vec<String> {
        self.pod_spec()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref().map(|c| c.claim_name.clone()))
            .collect()
    }
}

/// The object under review.
#[derive(Clone, Debug)]
pub enum Subject {
    Workload(Box<Workload>),
    Pdb(Box<PodDisruptionBudget>),
    Hpa(Box<HorizontalPodAutoscaler>),
    /// A `deployments/scale` or `statefulsets/scale` write: the target and its new replica count.
    Scale {
        target: ObjectRef,
        replicas: i32,
    },
    /// A KEDA ScaledObject: an autoscaler, judged as an HPA is.
    ScaledObject(Box<ScaledObject>),
    /// A Service: the backend of a webhook it may be.
    Service(Box<Service>),
    /// A Validating- or MutatingWebhookConfiguration.
    Webhooks(Box<WebhookConfiguration>),
    /// An aggregated API's APIService.
    ApiService(Box<ApiService>),
}

impl Subject {
    pub fn id(&self) -> ObjectRef {
        match self {
            Subject::Workload(w) => w.id(),
            Subject::Pdb(p) => ObjectRef::new(Kind::PodDisruptionBudget, ns_of(&p.metadata), name_of(&p.metadata)),
            Subject::Hpa(h) => ObjectRef::new(Kind::HorizontalPodAutoscaler, ns_of(&h.metadata), name_of(&h.metadata)),
            Subject::Scale { target, .. } => target.clone(),
            Subject::ScaledObject(s) => ObjectRef::new(Kind::ScaledObject, ns_of(&s.metadata), name_of(&s.metadata)),
            Subject::Service(s) => ObjectRef::new(Kind::Service, ns_of(&s.metadata), name_of(&s.metadata)),
            Subject::Webhooks(c) => ObjectRef::new(c.kind(), "", name_of(&c.metadata)),
            Subject::ApiService(a) => ObjectRef::new(Kind::ApiService, "", name_of(&a.metadata)),
        }
    }

    /// The namespace of [`Subject::id`], without copying it.
    pub fn namespace(&self) -> &str {
        match self {
            Subject::Scale { target, .. } => &target.namespace,
            Subject::Webhooks(_) | Subject::ApiService(_) => "",
            _ => self.meta().and_then(|m| m.namespace.as_deref()).unwrap_or(""),
        }
    }

    pub fn meta(&self) -> Option<&ObjectMeta> {
        match self {
            Subject::Workload(w) => Some(&w.meta),
            Subject::Pdb(p) => Some(&p.metadata),
            Subject::Hpa(h) => Some(&h.metadata),
            Subject::Scale { .. } => None,
            Subject::ScaledObject(s) => Some(&s.metadata),
            Subject::Service(s) => Some(&s.metadata),
            Subject::Webhooks(c) => Some(&c.metadata),
            Subject::ApiService(a) => Some(&a.metadata),
        }
    }

    pub fn exemptions(&self) -> Exemptions {
        self.meta().map(exemptions_of).unwrap_or_default()
    }
}

impl WebhookConfiguration {
    /// Which of the two kinds it is.
    pub fn kind(&self) -> Kind {
        if self.mutating { Kind::MutatingWebhookConfiguration } else { Kind::ValidatingWebhookConfiguration }
    }
}

/// Any object the engine decodes: subjects and the view-only kinds.
#[derive(Clone, Debug)]
pub enum Object {
    Subject(Subject),
    Pvc(Box<PersistentVolumeClaim>),
    Node(Box<Node>),
    Namespace(Box<Namespace>),
}

pub fn ns_of(meta: &ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

/// The object's name, or its `generateName` prefix on a CREATE that has no name yet.
pub fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().or_else(|| meta.generate_name.clone()).unwrap_or_default()
}

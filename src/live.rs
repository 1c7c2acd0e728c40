//! The live view: kube-runtime watchers for the kinds the rules read, cluster-wide, kept as
//! projections in one [`Index`] (only the fields the rules read, never whole objects).
//!
//! KEDA's ScaledObjects are a custom resource that many clusters do not serve: while the API
//! answers 404 for them, they count as synced and empty (readiness does not wait for a CRD that
//! is not installed), and the watcher keeps retrying with its backoff (at most 30 s apart), so a
//! KEDA installed later is picked up by itself.
//!
//! Consistency: the index follows each watch stream; an object written a moment ago may not be
//! in it yet. Cross-object rules are evaluated on the write of either object of a pair, so the
//! second write of a pair sees the first once the first has reached the cache.

use std::borrow::Cow;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::core::model::keda::ScaledObject;
use crate::core::model::webhook::WebhookConfiguration;
use crate::core::model::{Kind, defaults, name_of, ns_of};
use crate::core::view::{
    HpaInfo, Index, NodeInfo, PdbInfo, PvcInfo, ServiceInfo, View, ViewSource, WebhookConfigInfo, WorkloadInfo,
};

mod retry;
pub use retry::RetryPolicy;

// What one watched object contributes to the index: the same projection `check` builds, in the
// `Arc` the index keeps (a relist buffers thousands of these: a pointer each, not a projection
// each, and no move when swapped in).
pub use crate::core::view::index::Projection;

/// A kind the live view watches.
pub trait Tracked: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    const KIND: Kind;
    /// A custom resource the cluster may not serve: a 404 means none (see the module's doc).
    const OPTIONAL: bool = false;
    fn project(self) -> Projection;
    fn remove(&self, index: &mut Index);
}

impl Tracked for Deployment {
    const KIND: Kind = Kind::Deployment;
    fn project(self) -> Projection {
        Projection::Workload(Arc::new(WorkloadInfo::of(&defaults::deployment(self))))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_workload(Kind::Deployment, &ns_of(&self.metadata), &name_of(&self.metadata));
    }
}

impl Tracked for StatefulSet {
    const KIND: Kind = Kind::StatefulSet;
    fn project(self) -> Projection {
        Projection::Workload(Arc::new(WorkloadInfo::of(&defaults::stateful_set(self))))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_workload(Kind::StatefulSet, &ns_of(&self.metadata), &name_of(&self.metadata));
    }
}

impl Tracked for PodDisruptionBudget {
    const KIND: Kind = Kind::PodDisruptionBudget;
    fn project(self) -> Projection {
        Projection::Pdb(Arc::new(PdbInfo::of(&self)))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_pdb(&ns_of(&self.metadata), &name_of(&self.metadata));
    }
}

impl Tracked for HorizontalPodAutoscaler {
    const KIND: Kind = Kind::HorizontalPodAutoscaler;
    fn project(mut self) -> Projection {
        defaults::hpa(&mut self);
        Projection::Hpa(Arc::new(HpaInfo::of(&self)))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_hpa(&ns_of(&self.metadata), &name_of(&self.metadata));
    }
}

impl Tracked for PersistentVolumeClaim {
    const KIND: Kind = Kind::PersistentVolumeClaim;
    fn project(self) -> Projection {
        Projection::Pvc(Arc::new(PvcInfo::of(&self)))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_pvc(&ns_of(&self.metadata), &name_of(&self.metadata));
    }
}

impl Tracked for Node {
    const KIND: Kind = Kind::Node;
    fn project(self) -> Projection {
        Projection::Node(Arc::new(NodeInfo::of(&self)))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_node(&name_of(&self.metadata));
    }
}

impl Tracked for Namespace {
    const KIND: Kind = Kind::Namespace;
    fn project(self) -> Projection {
        Projection::Namespace(name_of(&self.metadata), self.metadata.labels.unwrap_or_default())
    }
    fn remove(&self, index: &mut Index) {
        index.remove_namespace(&name_of(&self.metadata));
    }
}

impl Tracked for Service {
    const KIND: Kind = Kind::Service;
    fn project(self) -> Projection {
        Projection::Service(Arc::new(ServiceInfo::of(&self)))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_service(&ns_of(&self.metadata), &name_of(&self.metadata));
    }
}

/// `kube::Resource` for the engine's own minimal types of kinds k8s-openapi types differently or
/// not at all (see `core::model::webhook`, `core::model::keda`): what the watcher needs to list and
/// watch them.
macro_rules! resource {
    ($ty:ty, $scope:ty, $kind:literal, $group:literal, $version:literal, $plural:literal, $meta:ident $(. $field:tt)*) => {
        impl Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self $(. $field)* .$meta
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self $(. $field)* .$meta
            }
        }
    };
}

/// A ValidatingWebhookConfiguration as the engine reads it.
#[derive(Clone, Debug, Deserialize)]
#[serde(transparent)]
pub struct ValidatingWebhooks(pub WebhookConfiguration);

/// A MutatingWebhookConfiguration as the engine reads it.
#[derive(Clone, Debug, Deserialize)]
#[serde(transparent)]
pub struct MutatingWebhooks(pub WebhookConfiguration);

resource!(
    ValidatingWebhooks,
    ClusterResourceScope,
    "ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    metadata.0
);
resource!(
    MutatingWebhooks,
    ClusterResourceScope,
    "MutatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    metadata.0
);
resource!(ScaledObject, NamespaceResourceScope, "ScaledObject", "keda.sh", "v1alpha1", "scaledobjects", metadata);

impl Tracked for ValidatingWebhooks {
    const KIND: Kind = Kind::ValidatingWebhookConfiguration;
    fn project(self) -> Projection {
        Projection::Webhooks(Arc::new(WebhookConfigInfo::of(&self.0)))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_webhook_config(Self::KIND, &name_of(&self.0.metadata));
    }
}

impl Tracked for MutatingWebhooks {
    const KIND: Kind = Kind::MutatingWebhookConfiguration;
    fn project(mut self) -> Projection {
        self.0.mutating = true;
        Projection::Webhooks(Arc::new(WebhookConfigInfo::of(&self.0)))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_webhook_config(Self::KIND, &name_of(&self.0.metadata));
    }
}

impl Tracked for ScaledObject {
    const KIND: Kind = Kind::ScaledObject;
    const OPTIONAL: bool = true;
    fn project(self) -> Projection {
        Projection::Hpa(Arc::new(HpaInfo::of_scaled_object(&self)))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_autoscaler(Kind::ScaledObject, &ns_of(&self.metadata), &name_of(&self.metadata));
    }
}

/// The kinds watched, in a fixed order (for readiness and metrics).
pub const KINDS: [Kind; 11] = [
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
];

/// The live view and its sync state.
pub struct LiveSource {
    index: RwLock<Index>,
    synced: [AtomicBool; KINDS.len()],
    /// Per kind, when its watch started failing (milliseconds since the epoch), 0 while it follows
    /// the cluster: up to when the view is current ([`ViewSource::current_as_of`]).
    failing_since_ms: [AtomicI64; KINDS.len()],
    /// How a failing watch is retried ([`retry`]).
    retry: RetryPolicy,
    /// Signalled on every change (serve's background audit runs early, debounced).
    changes: Arc<tokio::sync::Notify>,
}

impl Default for LiveSource {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveSource {
    pub fn new() -> Self {
        Self::with_retry(RetryPolicy::default())
    }

    /// A live view whose watches retry as `retry` says (tests shorten the delays).
    pub fn with_retry(retry: RetryPolicy) -> Self {
        let mut index = Index::new();
        // The cluster is the whole truth: rules asserting absence run, nodes are known.
        index.set_complete(true);
        index.set_knows_nodes(true);
        LiveSource {
            index: RwLock::new(index),
            synced: Default::default(),
            failing_since_ms: Default::default(),
            retry,
            changes: Default::default(),
        }
    }

    fn slot(kind: Kind) -> usize {
        KINDS.iter().position(|k| *k == kind).unwrap_or(0)
    }

    /// Notified (one stored permit) whenever an object changes or a kind is relisted.
    pub fn changes(&self) -> Arc<tokio::sync::Notify> {
        self.changes.clone()
    }

    pub fn is_synced(&self, kind: Kind) -> bool {
        self.synced[Self::slot(kind)].load(Ordering::SeqCst)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies one watch event. Relists are buffered (as projections) and swapped in at once, so
    /// the view never shows a half-listed kind.
    pub fn apply<K: Tracked>(&self, event: Event<K>, buffer: &mut Option<Vec<Projection>>) {
        if matches!(event, Event::Apply(_) | Event::Delete(_) | Event::InitDone) {
            self.changes.notify_one();
        }
        // `Init` only says a (re)list begins; anything else is the watch following again.
        if !matches!(event, Event::Init) {
            self.failing_since_ms[Self::slot(K::KIND)].store(0, Ordering::SeqCst);
        }
        match event {
            Event::Apply(obj) => {
                let p = obj.project();
                self.write().insert_projection(p);
            }
            Event::Delete(obj) => obj.remove(&mut self.write()),
            Event::Init => *buffer = Some(Vec::new()),
            Event::InitApply(obj) => buffer.get_or_insert_with(Vec::new).push(obj.project()),
            Event::InitDone => {
                let items = buffer.take().unwrap_or_default();
                let mut index = self.write();
                index.clear_kind(K::KIND);
                for p in items {
                    index.insert_projection(p);
                }
                drop(index);
                self.synced[Self::slot(K::KIND)].store(true, Ordering::SeqCst);
            }
        }
    }

    /// The watch of `kind` failed: the view holds its writes up to now at most, until the watch
    /// follows again (the first one of a run of failures counts).
    pub fn watch_failed(&self, kind: Kind) {
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond().max(1);
        let _ = self.failing_since_ms[Self::slot(kind)].compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The cluster does not serve `kind` (a custom resource whose CRD is not installed): none of
    /// it, and nothing to wait for.
    pub fn not_served(&self, kind: Kind) {
        self.write().clear_kind(kind);
        self.synced[Self::slot(kind)].store(true, Ordering::SeqCst);
    }

    /// Starts a watcher per kind, cluster-wide. They retry with a growing delay forever
    /// ([`retry`]); while one is failing, its kind keeps its last known state.
    pub fn start(self: &Arc<Self>, client: Client) {
        self.spawn::<Deployment>(client.clone());
        self.spawn::<StatefulSet>(client.clone());
        self.spawn::<PodDisruptionBudget>(client.clone());
        self.spawn::<HorizontalPodAutoscaler>(client.clone());
        self.spawn::<PersistentVolumeClaim>(client.clone());
        self.spawn::<Node>(client.clone());
        self.spawn::<Namespace>(client.clone());
        self.spawn::<Service>(client.clone());
        self.spawn::<ValidatingWebhooks>(client.clone());
        self.spawn::<MutatingWebhooks>(client.clone());
        self.spawn::<ScaledObject>(client);
    }

    fn spawn<K: Tracked>(self: &Arc<Self>, client: Client) {
        let this = self.clone();
        tokio::spawn(async move {
            let api: Api<K> = Api::all(client);
            let watch = || watcher::watcher(api.clone(), watcher::Config::default());
            let mut buffer = None;
            let absent = AtomicBool::new(false);
            let apply = |event: Event<K>| {
                // Every attempt to list starts with `Init`, the ones that then fail too.
                if !matches!(event, Event::Init) {
                    absent.store(false, Ordering::Relaxed);
                }
                this.apply(event, &mut buffer)
            };
            // A kind the cluster does not serve (its CRD is not installed) is not a failure: none
            // of it, said once, and looked for again at the slowest retry pace.
            let not_served = |e: &watcher::Error| {
                if !(K::OPTIONAL && is_not_found(e)) {
                    return false;
                }
                if !absent.swap(true, Ordering::Relaxed) {
                    tracing::info!(kind = %K::KIND, "not served by the cluster (its CRD is not installed): none; checking again");
                    this.not_served(K::KIND);
                }
                true
            };
            retry::follow(watch, K::KIND, this.retry, apply, not_served, || this.watch_failed(K::KIND)).await;
        });
    }
}

/// A list or watch the apiserver answered 404: the resource is not served.
fn is_not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

impl ViewSource for LiveSource {
    fn with_view(&self, f: &mut dyn FnMut(&dyn View)) {
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        f(&*index);
    }

    fn synced(&self) -> bool {
        KINDS.iter().all(|k| self.is_synced(*k))
    }

    fn current_as_of(&self, now: k8s_openapi::jiff::Timestamp) -> Option<k8s_openapi::jiff::Timestamp> {
        if !self.synced() {
            return None;
        }
        let failing_since = self.failing_since_ms.iter().map(|f| f.load(Ordering::SeqCst)).filter(|&ms| ms > 0).min();
        match failing_since {
            None => Some(now),
            Some(ms) => k8s_openapi::jiff::Timestamp::from_millisecond(ms).ok().map(|t| t.min(now)),
        }
    }

    fn stats(&self) -> Vec<(Kind, usize, bool)> {
        let counts = self.index.read().unwrap_or_else(|p| p.into_inner()).counts();
        KINDS.iter().map(|k| (*k, counts.get(k).copied().unwrap_or(0), self.is_synced(*k))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object<K: DeserializeOwned>(value: serde_json::Value) -> K {
        serde_json::from_value(value).expect("decodes")
    }

    fn service(name: &str, app: &str) -> Service {
        object(serde_json::json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "k"}, "spec": {"selector": {"app": app}}}))
    }

    fn counts(live: &LiveSource) -> Vec<(Kind, usize, bool)> {
        live.stats().into_iter().filter(|(k, _, _)| !matches!(k, Kind::Deployment | Kind::StatefulSet)).collect()
    }

    /// The new kinds go through the watcher's events like the others: a relist swapped in at once,
    /// then applies and deletes.
    #[test]
    fn services_webhook_configurations_and_scaled_objects_follow_their_events() {
        let live = LiveSource::new();
        let mut buffer = None;
        live.apply::<Service>(Event::Init, &mut buffer);
        live.apply(Event::InitApply(service("a", "a")), &mut buffer);
        assert!(!live.is_synced(Kind::Service));
        live.apply::<Service>(Event::InitDone, &mut buffer);
        assert!(live.is_synced(Kind::Service));
        live.apply(Event::Apply(service("b", "b")), &mut buffer);
        live.apply(Event::Delete(service("a", "a")), &mut buffer);

        let config: MutatingWebhooks = object(serde_json::json!({"metadata": {"name": "m"},
            "webhooks": [{"name": "w", "clientConfig": {"service": {"namespace": "k", "name": "b"}}}]}));
        live.apply(Event::Apply(config.clone()), &mut buffer);
        let scaled: ScaledObject = object(serde_json::json!({"metadata": {"name": "so", "namespace": "k"},
            "spec": {"scaleTargetRef": {"name": "web"}}}));
        live.apply(Event::Apply(scaled.clone()), &mut buffer);

        live.with_view(&mut |v| {
            assert!(v.service("k", "a").is_none() && v.service("k", "b").is_some());
            let calling = v.webhooks_calling("k", "b");
            assert_eq!(calling.len(), 1);
            assert_eq!(calling[0].id.kind, Kind::MutatingWebhookConfiguration, "the watcher's type says which");
            let target = crate::core::model::ObjectRef::new(Kind::Deployment, "k", "web");
            let autoscalers = v.hpas_targeting(&target);
            assert_eq!(autoscalers.len(), 1);
            assert_eq!(
                (autoscalers[0].id.kind, autoscalers[0].min_replicas, autoscalers[0].max_replicas),
                (Kind::ScaledObject, 0, 100)
            );
        });
        live.apply(Event::Delete(config), &mut buffer);
        live.apply(Event::Delete(scaled), &mut buffer);
        live.with_view(&mut |v| {
            assert!(v.webhooks_calling("k", "b").is_empty());
            assert!(v.autoscaler(Kind::ScaledObject, "k", "so").is_none());
        });
        let stats = counts(&live);
        assert!(stats.contains(&(Kind::Service, 1, true)), "{stats:?}");
        assert!(stats.contains(&(Kind::MutatingWebhookConfiguration, 0, false)), "{stats:?}");
    }

    /// How current the view is: unknown before every kind has synced, `now` while every watch
    /// follows, the start of a failure while one is failing, `now` again once it follows.
    #[test]
    fn the_view_is_current_up_to_the_first_failing_watch() {
        use k8s_openapi::jiff::Timestamp;
        let live = LiveSource::new();
        let now = Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(3600);
        assert_eq!(live.current_as_of(now), None, "never synced");
        for kind in KINDS {
            live.not_served(kind);
        }
        assert_eq!(live.current_as_of(now), Some(now));
        let before = Timestamp::now();
        live.watch_failed(Kind::PodDisruptionBudget);
        let failing = live.current_as_of(now).expect("synced");
        // Kept to the millisecond.
        assert!(failing.as_millisecond() >= before.as_millisecond() && failing < now, "{failing}: [{before}, {now})");
        // A second failure in the same run does not move it; another kind failing later neither.
        live.watch_failed(Kind::PodDisruptionBudget);
        live.watch_failed(Kind::Deployment);
        assert_eq!(live.current_as_of(now), Some(failing));
        // The PDB watch follows again (a relist begins with Init, which is no progress yet).
        let mut buffer = None;
        live.apply::<PodDisruptionBudget>(Event::Init, &mut buffer);
        assert_eq!(live.current_as_of(now), Some(failing));
        live.apply::<PodDisruptionBudget>(Event::InitDone, &mut buffer);
        let deployment_failed = live.current_as_of(now).expect("synced");
        assert!(deployment_failed >= failing && deployment_failed < now, "the Deployment watch still fails");
        live.apply::<Deployment>(Event::InitDone, &mut buffer);
        assert_eq!(live.current_as_of(now), Some(now));
    }

    /// A CRD that is not installed: none of its kind, and synced, so readiness does not wait.
    #[test]
    fn a_kind_the_cluster_does_not_serve_is_synced_and_empty() {
        let live = LiveSource::new();
        let mut buffer = None;
        live.apply(
            Event::Apply(object::<ScaledObject>(serde_json::json!({"metadata": {"name": "so", "namespace": "k"}}))),
            &mut buffer,
        );
        assert!(!live.is_synced(Kind::ScaledObject));
        live.not_served(Kind::ScaledObject);
        assert!(live.is_synced(Kind::ScaledObject));
        live.with_view(&mut |v| assert!(v.autoscaler(Kind::ScaledObject, "k", "so").is_none()));

        let status = |code: u16| {
            Box::new(
                kube::core::Status::failure("the server could not find the requested resource", "NotFound")
                    .with_code(code),
            )
        };
        assert!(is_not_found(&watcher::Error::InitialListFailed(kube::Error::Api(status(404)))));
        assert!(is_not_found(&watcher::Error::WatchStartFailed(kube::Error::Api(status(404)))));
        assert!(
            !is_not_found(&watcher::Error::InitialListFailed(kube::Error::Api(status(403)))),
            "forbidden is a failure"
        );
    }
}

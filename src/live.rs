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
use std::sync::{Arc, Mutex, MutexGuard};

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

use crate::core::model::apiservice::ApiService;
use crate::core::model::keda::ScaledObject;
use crate::core::model::live_pod::{LivePod, controller_of};
use crate::core::model::webhook::WebhookConfiguration;
use crate::core::model::{Kind, defaults, name_of, ns_of};
use crate::core::view::pods::PodsListed;
use crate::core::view::{
    HpaInfo, Index, NodeInfo, PdbInfo, PodInfo, PodOwner, PvcInfo, ServiceInfo, Snapshot, View, ViewSource,
    WebhookConfigInfo, WorkloadInfo,
};

pub mod changes;
pub(crate) mod retry;
pub use changes::ChangeLog;
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
    /// A fingerprint of what the rules read of this object beyond its projection: for the kinds
    /// the rules judge whole, the object without its status and the metadata every write changes.
    /// Combined with the projection's, it tells the background audit a change from noise.
    fn material(&self) -> u64 {
        0
    }
}

/// The fingerprint of what a status write never changes: the spec, and the metadata the rules read
/// (labels, annotations, owners, deletion).
fn spec_and_meta<S: serde::Serialize>(meta: &ObjectMeta, spec: &S) -> u64 {
    changes::of_json(&(&meta.labels, &meta.annotations, &meta.owner_references, &meta.deletion_timestamp, spec))
}

/// The same for the engine's own types, which have no status (Debug, with the metadata every
/// write changes cleared).
fn without_volatile_meta<K: Resource + Debug + Clone>(object: &K) -> u64 {
    let mut object = object.clone();
    let meta = object.meta_mut();
    meta.resource_version = None;
    meta.managed_fields = None;
    meta.generation = None;
    changes::of_debug(&object)
}

impl Tracked for Deployment {
    const KIND: Kind = Kind::Deployment;
    fn project(self) -> Projection {
        Projection::Workload(Arc::new(WorkloadInfo::of(&defaults::deployment(self))))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_workload(Kind::Deployment, &ns_of(&self.metadata), &name_of(&self.metadata));
    }
    fn material(&self) -> u64 {
        spec_and_meta(&self.metadata, &self.spec)
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
    fn material(&self) -> u64 {
        spec_and_meta(&self.metadata, &self.spec)
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
    fn material(&self) -> u64 {
        spec_and_meta(&self.metadata, &self.spec)
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
    fn material(&self) -> u64 {
        spec_and_meta(&self.metadata, &self.spec)
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
    fn material(&self) -> u64 {
        spec_and_meta(&self.metadata, &self.spec)
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
resource!(ApiService, ClusterResourceScope, "APIService", "apiregistration.k8s.io", "v1", "apiservices", metadata);

impl Tracked for ValidatingWebhooks {
    const KIND: Kind = Kind::ValidatingWebhookConfiguration;
    fn project(self) -> Projection {
        Projection::Webhooks(Arc::new(WebhookConfigInfo::of(&self.0)))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_webhook_config(Self::KIND, &name_of(&self.0.metadata));
    }
    fn material(&self) -> u64 {
        without_volatile_meta(self)
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
    fn material(&self) -> u64 {
        without_volatile_meta(self)
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
    fn material(&self) -> u64 {
        without_volatile_meta(self)
    }
}

/// Aggregated APIs (`apiservice-unavailable`). Few in any cluster, and only those a Service serves
/// are kept, each cut to what the rule reads ([`ApiService::slim`]). Its `Available` condition is
/// read, so a status write is a change.
impl Tracked for ApiService {
    const KIND: Kind = Kind::ApiService;
    fn project(self) -> Projection {
        Projection::ApiService(Arc::new(self.slim()))
    }
    fn remove(&self, index: &mut Index) {
        index.remove_apiservice(&name_of(&self.metadata));
    }
    fn material(&self) -> u64 {
        without_volatile_meta(self)
    }
}

/// The kinds watched, in a fixed order (for readiness and metrics): every kind the engine knows.
pub const KINDS: [Kind; 12] = Kind::ALL;

/// The live view and its sync state.
///
/// The watchers change `index` (each change under its lock, briefly) and mark it `dirty`; a
/// reader takes a snapshot: the last one published, after publishing a fresh one if the index
/// changed since and its lock is free this instant ([`Index`]'s clone is a few reference
/// counts). A review then reads its snapshot for as long as it takes, holding no lock: a slow
/// review never delays the watchers, nor they the reviews.
pub struct LiveSource {
    index: Mutex<Index>,
    published: Mutex<Arc<Index>>,
    /// `index` changed since `published` was taken, and since when (milliseconds since the epoch).
    dirty: AtomicBool,
    dirty_since_ms: AtomicI64,
    /// Since when (milliseconds since the epoch) a watch event has been being applied; 0 when
    /// none is: a view that stops following shows here ([`LiveSource::applying_for`]).
    applying_since_ms: AtomicI64,
    synced: [AtomicBool; KINDS.len()],
    /// Per kind, when its watch started failing (milliseconds since the epoch), 0 while it follows
    /// the cluster: up to when the view is current ([`ViewSource::current_as_of`]).
    failing_since_ms: [AtomicI64; KINDS.len()],
    /// Per kind, whether the cluster does not serve it (a CRD not installed).
    unserved: [AtomicBool; KINDS.len()],
    /// How a failing watch is retried ([`retry`]).
    retry: RetryPolicy,
    /// How often a kind the cluster does not serve is looked for again (default: the slowest
    /// retry): the audit's, once per full read.
    unserved_recheck: Option<std::time::Duration>,
    /// Signalled on every change.
    changes: Arc<tokio::sync::Notify>,
    /// The background audit's view: what changed, where ([`LiveSource::for_audit`]).
    log: Option<Arc<ChangeLog>>,
    /// The background audit's view also follows pods ([`LiveSource::start_pods`]).
    pods: PodsFollowed,
    /// Since when each failing watch fails (ms since the epoch), and why it last failed, by
    /// change log slot.
    watch_errors: std::sync::Mutex<std::collections::BTreeMap<usize, (i64, String)>>,
}

/// How stale a snapshot may be before a reader waits for the watcher holding the index.
const STALE_SNAPSHOT: std::time::Duration = std::time::Duration::from_millis(50);

/// The live index under its lock, being changed: marked changed (for the next snapshot) when let
/// go, before the lock is.
struct Written<'a> {
    index: MutexGuard<'a, Index>,
    dirty: &'a AtomicBool,
    dirty_since_ms: &'a AtomicI64,
}

impl std::ops::Deref for Written<'_> {
    type Target = Index;
    fn deref(&self) -> &Index {
        &self.index
    }
}

impl std::ops::DerefMut for Written<'_> {
    fn deref_mut(&mut self) -> &mut Index {
        &mut self.index
    }
}

impl Drop for Written<'_> {
    fn drop(&mut self) {
        if !self.dirty.swap(true, Ordering::AcqRel) {
            self.dirty_since_ms.store(k8s_openapi::jiff::Timestamp::now().as_millisecond(), Ordering::Release);
        }
    }
}

/// While a watch event is being applied: its start is in `applying_since_ms`.
struct Applying<'a>(&'a AtomicI64);

impl<'a> Applying<'a> {
    fn start(since: &'a AtomicI64) -> Self {
        since.store(k8s_openapi::jiff::Timestamp::now().as_millisecond().max(1), Ordering::SeqCst);
        Applying(since)
    }
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::SeqCst);
    }
}

/// The pods' watch state (only the background audit's view follows pods).
#[derive(Default)]
struct PodsFollowed {
    watched: AtomicBool,
    synced: AtomicBool,
    /// Pods that could not be read, by (namespace, name): why (reported as unreadable).
    unreadable: std::sync::Mutex<std::collections::BTreeMap<(String, String), String>>,
    /// How many pod events could not be read, ever (the audit counts them into its metric).
    unreadable_events: std::sync::atomic::AtomicU64,
}

/// How long a watch fails before its kind counts as not followed ([`LiveSource::unfollowed`]): a
/// watch that expired relists in well under this.
pub const UNFOLLOWED_AFTER: std::time::Duration = std::time::Duration::from_secs(20);

/// The change log's slot of pods (after the kinds of [`KINDS`]).
pub const POD_SLOT: usize = KINDS.len();

/// The name of a change log slot, for metrics.
pub fn slot_name(slot: usize) -> &'static str {
    KINDS.get(slot).map_or("Pod", |k| k.as_str())
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
            published: Mutex::new(Arc::new(index.clone())),
            index: Mutex::new(index),
            dirty: AtomicBool::new(false),
            dirty_since_ms: AtomicI64::new(0),
            applying_since_ms: AtomicI64::new(0),
            synced: Default::default(),
            failing_since_ms: Default::default(),
            unserved: Default::default(),
            retry,
            unserved_recheck: None,
            changes: Default::default(),
            log: None,
            pods: PodsFollowed::default(),
            watch_errors: Default::default(),
        }
    }

    /// The background audit's view: as the webhook's, and every change is fingerprinted into `log`
    /// (which namespaces to re-judge); pods are followed too once [`LiveSource::start_pods`] runs.
    pub fn for_audit(log: Arc<ChangeLog>) -> Self {
        let mut live = Self::new();
        live.log = Some(log);
        live
    }

    /// Looks for a kind the cluster does not serve (a CRD not installed) again every `every`
    /// rather than at the slowest retry pace: the audit, whose reads are once per interval, need
    /// not probe for a missing CRD more often than it reads the cluster.
    pub fn recheck_unserved_every(mut self, every: std::time::Duration) -> Self {
        self.unserved_recheck = Some(every);
        self
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

    /// The index, to change: the next snapshot is taken after the change.
    fn write(&self) -> Written<'_> {
        Written {
            index: self.index.lock().unwrap_or_else(|p| p.into_inner()),
            dirty: &self.dirty,
            dirty_since_ms: &self.dirty_since_ms,
        }
    }

    /// The index, to read in place (the watchers' own reads, between their changes).
    fn read(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The view as of the last change a snapshot could be taken after. While a watcher holds the
    /// index (one event, or a relist swapped in), the last snapshot published is as good, unless
    /// it has been stale for longer than [`STALE_SNAPSHOT`]: then the reader waits for that one
    /// change (an idle webhook's first request must not judge against minutes-old state).
    fn current(&self) -> Arc<Index> {
        if self.dirty.load(Ordering::Acquire) {
            let index = match self.index.try_lock() {
                Ok(index) => Some(index),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {
                    let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
                    let stale_ms = now.saturating_sub(self.dirty_since_ms.load(Ordering::Acquire));
                    (stale_ms > STALE_SNAPSHOT.as_millis() as i64).then(|| self.read())
                }
            };
            if let Some(index) = index
                && self.dirty.swap(false, Ordering::AcqRel)
            {
                let fresh = Arc::new(index.clone());
                drop(index);
                *self.published.lock().unwrap_or_else(|p| p.into_inner()) = fresh;
            }
        }
        self.published.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How long the watch event being applied now has taken, if one is: a view whose watchers
    /// cannot apply their events (readiness fails past a budget, `crate::server`).
    pub fn applying_for(&self, now_ms: i64) -> Option<std::time::Duration> {
        let since = self.applying_since_ms.load(Ordering::SeqCst);
        (since > 0).then(|| std::time::Duration::from_millis(now_ms.saturating_sub(since).max(0) as u64))
    }

    /// Applies one watch event. Relists are buffered (as projections) and swapped in at once, so
    /// the view never shows a half-listed kind.
    pub fn apply<K: Tracked>(&self, event: Event<K>, buffer: &mut Option<Vec<Projection>>) {
        let _applying = Applying::start(&self.applying_since_ms);
        if matches!(event, Event::Apply(_) | Event::Delete(_) | Event::InitDone) {
            self.changes.notify_one();
        }
        // `Init` only says a (re)list begins; anything else is the watch following again.
        if !matches!(event, Event::Init) {
            self.failing_since_ms[Self::slot(K::KIND)].store(0, Ordering::SeqCst);
            self.unserved[Self::slot(K::KIND)].store(false, Ordering::SeqCst);
            self.watch_follows(Self::slot(K::KIND));
        }
        let slot = Self::slot(K::KIND);
        match event {
            Event::Apply(obj) => {
                let seen = self.log.as_ref().map(|_| (ns_of(obj.meta()), name_of(obj.meta()), obj.material()));
                let p = obj.project();
                if let (Some(log), Some((ns, name, material))) = (&self.log, seen) {
                    let fingerprint = changes::fingerprint(&(material, changes::of_debug(&p)));
                    let before = (K::KIND == Kind::Node).then(|| self.namespaces_with_pods_on(&name));
                    if log.applied(slot, &ns, &name, fingerprint) {
                        self.reaches(log, K::KIND, &ns, &name, before);
                    }
                }
                self.write().insert_projection(p);
            }
            Event::Delete(obj) => {
                if let Some(log) = &self.log {
                    let (ns, name) = (ns_of(obj.meta()), name_of(obj.meta()));
                    log.deleted(slot, &ns, &name);
                    let before = (K::KIND == Kind::Node).then(|| self.namespaces_with_pods_on(&name));
                    self.reaches(log, K::KIND, &ns, &name, before);
                }
                obj.remove(&mut self.write())
            }
            Event::Init => {
                if let Some(log) = &self.log {
                    log.listing_begins(slot);
                }
                *buffer = Some(Vec::new())
            }
            Event::InitApply(obj) => {
                let seen = self.log.as_ref().map(|_| (ns_of(obj.meta()), name_of(obj.meta()), obj.material()));
                let p = obj.project();
                if let (Some(log), Some((ns, name, material))) = (&self.log, seen) {
                    let fingerprint = changes::fingerprint(&(material, changes::of_debug(&p)));
                    if log.applied(slot, &ns, &name, fingerprint) {
                        self.reaches(log, K::KIND, &ns, &name, None);
                    }
                }
                buffer.get_or_insert_with(Vec::new).push(p)
            }
            Event::InitDone => {
                if let Some(log) = &self.log {
                    log.listing_done(slot);
                }
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

    /// Namespaces with a pod on `node`.
    fn namespaces_with_pods_on(&self, node: &str) -> Vec<String> {
        let index = self.read();
        let mut namespaces: Vec<String> =
            index.pods_on_nodes(&[node.to_string()]).into_iter().map(|(ns, _)| ns).collect();
        namespaces.dedup();
        namespaces
    }

    /// What a change of `kind` `namespace/name` reaches beyond its own namespace: a node's, the
    /// namespaces with pods on it (before and after); a namespace's, its own objects (its labels
    /// set the mode) and the cluster-scoped report (webhooks select namespaces by label); a Service
    /// or pod behind a webhook, the cluster-scoped report (the webhook rules read them).
    fn reaches(&self, log: &ChangeLog, kind: Kind, namespace: &str, name: &str, before: Option<Vec<String>>) {
        match kind {
            Kind::Node => {
                let mut namespaces = before.unwrap_or_default();
                namespaces.extend(self.namespaces_with_pods_on(name));
                log.mark(namespaces.iter().map(String::as_str));
            }
            Kind::Namespace => log.mark([name, ""]),
            _ if !namespace.is_empty() && self.called_by_webhooks(namespace) => log.mark([""]),
            _ => {}
        }
    }

    /// Some webhook configuration calls a Service of `namespace`.
    fn called_by_webhooks(&self, namespace: &str) -> bool {
        let index = self.read();
        !index.webhook_services_in(namespace).is_empty()
    }

    /// The watch of `kind` failed: the view holds its writes up to now at most, until the watch
    /// follows again (the first one of a run of failures counts).
    pub fn watch_failed(&self, kind: Kind) {
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond().max(1);
        let _ = self.failing_since_ms[Self::slot(kind)].compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Why the watch of a change log slot (a kind of [`KINDS`], or [`POD_SLOT`]) last failed, kept
    /// until it follows again ([`LiveSource::unfollowed`]).
    fn watch_failed_because(&self, slot: usize, e: &watcher::Error) {
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let mut errors = self.watch_errors.lock().unwrap_or_else(|p| p.into_inner());
        let since = errors.get(&slot).map_or(now, |(since, _)| *since);
        errors.insert(slot, (since, e.to_string()));
    }

    /// The apiserver answered that it does not serve `kind`: nothing to follow is followed,
    /// whatever failed before (a 403 or a restart while its CRD was absent would otherwise stay
    /// said in every report).
    fn answered_none(&self, kind: Kind) {
        self.failing_since_ms[Self::slot(kind)].store(0, Ordering::SeqCst);
        self.watch_follows(Self::slot(kind));
    }

    fn watch_follows(&self, slot: usize) {
        let mut errors = self.watch_errors.lock().unwrap_or_else(|p| p.into_inner());
        if !errors.is_empty() {
            errors.remove(&slot);
        }
    }

    /// The kinds this view does not follow now, each with why: its watch fails (the apiserver's
    /// last answer: a 403 after an RBAC change, a 5xx), or its first list has not completed. Empty
    /// for a view that is whole and current.
    pub fn unfollowed(&self) -> Vec<(&'static str, String)> {
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let grace = UNFOLLOWED_AFTER.as_millis() as i64;
        let errors: std::collections::BTreeMap<usize, String> = self
            .watch_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, (since, _))| now - since >= grace)
            .map(|(slot, (_, why))| (*slot, why.clone()))
            .collect();
        let why =
            |slot: usize| errors.get(&slot).cloned().unwrap_or_else(|| "its first list has not completed".to_string());
        let mut out: Vec<(&'static str, String)> = KINDS
            .iter()
            .filter(|k| !self.is_synced(**k) || errors.contains_key(&Self::slot(**k)))
            .map(|k| (k.as_str(), why(Self::slot(*k))))
            .collect();
        if self.pods.watched.load(Ordering::SeqCst) && (!self.synced_pods() || errors.contains_key(&POD_SLOT)) {
            out.push(("Pod", why(POD_SLOT)));
        }
        out
    }

    /// The cluster does not serve `kind` (a custom resource whose CRD is not installed): none of
    /// it, and nothing to wait for.
    pub fn not_served(&self, kind: Kind) {
        self.write().clear_kind(kind);
        self.unserved[Self::slot(kind)].store(true, Ordering::SeqCst);
        self.synced[Self::slot(kind)].store(true, Ordering::SeqCst);
    }

    /// The kinds the cluster does not serve now (their CRD is not installed): nothing to list.
    pub fn unserved(&self) -> Vec<Kind> {
        KINDS.iter().copied().filter(|k| self.unserved[Self::slot(*k)].load(Ordering::SeqCst)).collect()
    }

    /// Starts a watcher per kind, cluster-wide. They retry with a growing delay forever
    /// ([`retry`]); while one is failing, its kind keeps its last known state.
    /// Returns the watch tasks (aborting them stops the view following).
    pub fn start(self: &Arc<Self>, client: Client) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            self.spawn::<Deployment>(client.clone()),
            self.spawn::<StatefulSet>(client.clone()),
            self.spawn::<PodDisruptionBudget>(client.clone()),
            self.spawn::<HorizontalPodAutoscaler>(client.clone()),
            self.spawn::<PersistentVolumeClaim>(client.clone()),
            self.spawn::<Node>(client.clone()),
            self.spawn::<Namespace>(client.clone()),
            self.spawn::<Service>(client.clone()),
            self.spawn::<ValidatingWebhooks>(client.clone()),
            self.spawn::<MutatingWebhooks>(client.clone()),
            self.spawn::<ScaledObject>(client.clone()),
            self.spawn::<ApiService>(client),
        ]
    }

    /// Follows pods too (the background audit's view: the posture rules read them), cluster-wide,
    /// each kept as its projection. Returns the watch task.
    pub fn start_pods(self: &Arc<Self>, client: Client) -> tokio::task::JoinHandle<()> {
        self.pods.watched.store(true, Ordering::SeqCst);
        let this = self.clone();
        tokio::spawn(async move {
            let api: Api<WatchedPod> = Api::all(client);
            let watch = || watcher::watcher(api.clone(), watcher::Config::default());
            let mut buffer = None;
            let apply = |event: Event<WatchedPod>| this.apply_pod(event, &mut buffer);
            // Pods are served by every cluster: every failure is one.
            let failed = |e: &watcher::Error| this.watch_failed_because(POD_SLOT, e);
            retry::follow(watch, "Pod", this.retry, this.retry.max, apply, |_: &watcher::Error| false, failed).await;
        })
    }

    /// Applies one event of the pods' watch.
    pub fn apply_pod(&self, event: Event<WatchedPod>, listed: &mut Option<PodsListed>) {
        let _applying = Applying::start(&self.applying_since_ms);
        if !matches!(event, Event::Init) {
            self.watch_follows(POD_SLOT);
        }
        let log = self.log.as_deref();
        match event {
            Event::Apply(pod) => {
                if let Some((ns, info)) = self.read_pod(pod) {
                    if let Some(log) = log {
                        let fingerprint = changes::of_debug(&info);
                        if log.applied(POD_SLOT, &ns, &info.name, fingerprint) {
                            self.reaches(log, Kind::Deployment, &ns, &info.name, None);
                        }
                    }
                    self.write().upsert_pod(&ns, info);
                }
            }
            Event::Delete(pod) => {
                let (ns, name) = (ns_of(&pod.metadata), name_of(&pod.metadata));
                self.unreadable_pods().remove(&(ns.clone(), name.clone()));
                if let Some(log) = log {
                    log.deleted(POD_SLOT, &ns, &name);
                    self.reaches(log, Kind::Deployment, &ns, &name, None);
                }
                self.write().remove_pod(&ns, &name);
            }
            // Pods outnumber everything else: a relist updates them in place (no second copy of
            // them all while it lasts) and at its end drops those it did not list again. The
            // audit's view may show a pod set half relisted for that while; its judging reads it
            // as a moment of the cluster's churn.
            Event::Init => {
                if let Some(log) = log {
                    log.listing_begins(POD_SLOT);
                }
                *listed = Some(PodsListed::new());
            }
            Event::InitApply(pod) => {
                if let Some((ns, info)) = self.read_pod(pod) {
                    if let Some(log) = log {
                        log.applied(POD_SLOT, &ns, &info.name, changes::of_debug(&info));
                    }
                    let names = listed.get_or_insert_with(PodsListed::new);
                    match names.get_mut(&ns) {
                        Some(names) => names.insert(info.name.clone()),
                        None => names.entry(ns.clone()).or_default().insert(info.name.clone()),
                    };
                    self.write().upsert_pod(&ns, info);
                }
            }
            Event::InitDone => {
                if let Some(log) = log {
                    log.listing_done(POD_SLOT);
                }
                self.write().retain_listed_pods(&listed.take().unwrap_or_default());
                self.pods.synced.store(true, Ordering::SeqCst);
            }
        }
    }

    fn unreadable_pods(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<(String, String), String>> {
        self.pods.unreadable.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A watched pod's namespace and projection; one that cannot be read is remembered as
    /// unreadable (and dropped from the view) rather than stopping the watch.
    fn read_pod(&self, pod: WatchedPod) -> Option<(String, PodInfo)> {
        let (ns, name) = (ns_of(&pod.metadata), name_of(&pod.metadata));
        match pod.pod {
            Ok(p) => {
                self.unreadable_pods().remove(&(ns.clone(), name));
                let info = PodInfo::of(&p, pod_owner(&p));
                Some((ns, info))
            }
            Err(why) => {
                self.pods.unreadable_events.fetch_add(1, Ordering::Relaxed);
                let first = self.unreadable_pods().insert((ns.clone(), name.clone()), why.clone()).is_none();
                if first {
                    tracing::warn!(namespace = %ns, pod = %name, error = %why, "cannot read a pod: reported as unreadable");
                }
                self.write().remove_pod(&ns, &name);
                None
            }
        }
    }

    /// Pods that could not be read, by namespace: (name, why).
    pub fn unreadable_pods_in(&self, namespace: &str) -> Vec<(String, String)> {
        self.unreadable_pods()
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((_, name), why)| (name.clone(), why.clone()))
            .collect()
    }

    /// The pods' first listing is in.
    pub fn synced_pods(&self) -> bool {
        self.pods.synced.load(Ordering::SeqCst)
    }

    /// Pod events that could not be read, since the start.
    pub fn unreadable_pod_events(&self) -> u64 {
        self.pods.unreadable_events.load(Ordering::Relaxed)
    }

    /// Namespaces the view knows of (the Namespace objects).
    pub fn namespaces(&self) -> Vec<String> {
        self.current().namespace_names()
    }

    fn spawn<K: Tracked>(self: &Arc<Self>, client: Client) -> tokio::task::JoinHandle<()> {
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
                this.answered_none(K::KIND);
                if !absent.swap(true, Ordering::Relaxed) {
                    tracing::info!(kind = %K::KIND, "not served by the cluster (its CRD is not installed): none; checking again");
                    this.not_served(K::KIND);
                }
                true
            };
            let recheck = this.unserved_recheck.unwrap_or(this.retry.max);
            let failed = |e: &watcher::Error| {
                this.watch_failed(K::KIND);
                this.watch_failed_because(Self::slot(K::KIND), e);
            };
            retry::follow(watch, K::KIND, this.retry, recheck, apply, not_served, failed).await;
        })
    }
}

/// A pod as the audit's watch reads it: its name, namespace and resourceVersion always (the
/// watcher needs them), the rest as [`LivePod`] if it can be read, else why not, so that one pod
/// the engine cannot read is reported rather than stopping the watch of every pod.
#[derive(Clone, Debug)]
pub struct WatchedPod {
    pub metadata: ObjectMeta,
    pub pod: Result<LivePod, String>,
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let text = |key: &str| value.pointer(&format!("/metadata/{key}")).and_then(|v| v.as_str()).map(str::to_string);
        let metadata = ObjectMeta {
            name: text("name"),
            namespace: text("namespace"),
            resource_version: text("resourceVersion"),
            ..Default::default()
        };
        let pod = LivePod::deserialize(&value).map_err(|e| e.to_string());
        Ok(WatchedPod { metadata, pod })
    }
}

resource!(WatchedPod, NamespaceResourceScope, "Pod", "", "v1", "pods", metadata);

/// Which workload runs a pod. A ReplicaSet's pod belongs to the Deployment whose name is the
/// ReplicaSet's less `-<pod-template-hash>`: the deployment controller names its ReplicaSets so
/// (`generateReplicaSetName`, pkg/controller/deployment/sync.go; it truncates only Deployment
/// names over 242 characters). Read from the pod alone, the audit need not list or watch
/// ReplicaSets (`ha-guard audit` reads their owner references instead; both agree on the
/// controller's ReplicaSets).
pub fn pod_owner(p: &LivePod) -> PodOwner {
    let controller = controller_of(&p.metadata.owner_references);
    PodOwner::resolve(controller, p.mirror(), |rs| {
        let hash = p.metadata.labels.get("pod-template-hash")?;
        let deployment = rs.strip_suffix(hash.as_str())?.strip_suffix('-')?;
        (!deployment.is_empty()).then(|| Arc::from(deployment))
    })
}

/// A list or watch the apiserver answered 404: the resource is not served.
pub fn is_not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

/// How long one watch event may take to apply before the view counts as stalled (a relist of
/// every pod of a large cluster takes well under a second).
pub const APPLY_STALL_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

impl ViewSource for LiveSource {
    fn snapshot(&self) -> Snapshot {
        self.current()
    }

    fn stalled(&self) -> Option<String> {
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let applying = self.applying_for(now).filter(|d| *d > APPLY_STALL_BUDGET)?;
        Some(format!(
            "the live view has been applying one watch event for {}, past its budget of {}",
            humantime::format_duration(std::time::Duration::from_secs(applying.as_secs())),
            humantime::format_duration(APPLY_STALL_BUDGET)
        ))
    }

    fn synced(&self) -> bool {
        KINDS.iter().all(|k| self.is_synced(*k))
            && (!self.pods.watched.load(Ordering::SeqCst) || self.pods.synced.load(Ordering::SeqCst))
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
        let counts = self.current().counts();
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

    /// Readiness follows this process's own stall (a watch event that takes past its budget to
    /// apply), never a cluster the watches cannot reach: every replica would see that at once.
    #[test]
    fn only_an_event_stuck_in_applying_is_a_stall() {
        let live = LiveSource::new();
        for kind in KINDS {
            live.not_served(kind);
        }
        assert_eq!(live.stalled(), None);
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        live.applying_since_ms.store(now - 5_000, Ordering::SeqCst);
        assert_eq!(live.stalled(), None, "within the budget");
        live.applying_since_ms.store(now - 11_000, Ordering::SeqCst);
        let why = live.stalled().expect("stalled");
        assert!(why.starts_with("the live view has been applying one watch event for 11s"), "{why}");
        live.applying_since_ms.store(0, Ordering::SeqCst);
        live.watch_failed(Kind::Deployment);
        live.watch_failed(Kind::Node);
        assert_eq!(live.stalled(), None, "watches failing: the apiserver out of reach, not this replica's fault");
        // An applied event clears its mark.
        let mut buffer = None;
        live.apply(Event::Apply(service("a", "a")), &mut buffer);
        assert_eq!(live.applying_since_ms.load(Ordering::SeqCst), 0);
    }

    /// A snapshot taken before a change keeps the view as it was; the next one has the change.
    #[test]
    fn a_snapshot_is_the_view_of_its_moment() {
        let live = Arc::new(LiveSource::new());
        let mut buffer = None;
        live.apply(Event::Apply(service("a", "a")), &mut buffer);
        let before = live.snapshot();
        live.apply(Event::Apply(service("b", "b")), &mut buffer);
        live.apply(Event::Delete(service("a", "a")), &mut buffer);
        assert!(before.service("k", "a").is_some() && before.service("k", "b").is_none());
        let after = live.snapshot();
        assert!(after.service("k", "a").is_none() && after.service("k", "b").is_some());
        // Nothing changed since: the same snapshot again, not a copy.
        let again = live.snapshot();
        assert!(Arc::ptr_eq(&after, &again));
        // A writer holding the index (a change under way) does not make a reader wait: it gets
        // the last snapshot published, while that is fresh enough.
        let held = live.index.lock().unwrap();
        live.dirty.store(true, Ordering::SeqCst);
        live.dirty_since_ms.store(k8s_openapi::jiff::Timestamp::now().as_millisecond(), Ordering::SeqCst);
        let during = live.snapshot();
        assert!(Arc::ptr_eq(&during, &after));
        // Stale for longer than the budget: the reader waits for the change under way.
        live.dirty_since_ms.store(0, Ordering::SeqCst);
        let reader = std::thread::spawn({
            let live = live.clone();
            move || live.snapshot()
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!reader.is_finished(), "waits for the writer");
        drop(held);
        let waited = reader.join().unwrap();
        assert!(!Arc::ptr_eq(&waited, &after), "a fresh snapshot");
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

    fn deployment(replicas: i32, ready: i32) -> Deployment {
        object(serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "resourceVersion": format!("{ready}{replicas}"),
                "generation": replicas},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"readyReplicas": ready, "observedGeneration": replicas}}))
    }

    fn node(name: &str, heartbeat: &str, unschedulable: bool) -> Node {
        object(serde_json::json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": heartbeat, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}}))
    }

    fn pod(ns: &str, name: &str, rs: &str, hash: &str, node: &str, ready: bool) -> WatchedPod {
        object(serde_json::json!({"metadata": {"name": name, "namespace": ns, "resourceVersion": "1",
                "labels": {"app": "web", "pod-template-hash": hash},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "controller": true, "uid": "u"}]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
    }

    /// Lists `objects` of K as a watcher's first listing does.
    fn listed<K: Tracked>(live: &LiveSource, objects: Vec<K>) {
        let mut buffer = None;
        live.apply::<K>(Event::Init, &mut buffer);
        for o in objects {
            live.apply(Event::InitApply(o), &mut buffer);
        }
        live.apply::<K>(Event::InitDone, &mut buffer);
    }

    #[test]
    fn status_only_updates_change_nothing_the_audit_reads_and_a_spec_change_does() {
        let log = Arc::new(ChangeLog::new());
        let live = LiveSource::for_audit(log.clone());
        let mut buffer = None;
        listed(&live, vec![deployment(2, 0)]);
        assert!(log.take().is_empty(), "the first listing is the full read's");
        // The rollout's status updates: ready 1, then 2.
        live.apply(Event::Apply(deployment(2, 1)), &mut buffer);
        live.apply(Event::Apply(deployment(2, 2)), &mut buffer);
        assert!(log.take().is_empty(), "status only");
        live.apply(Event::Apply(deployment(3, 2)), &mut buffer);
        let dirty = log.take();
        assert_eq!(dirty.namespaces.iter().map(String::as_str).collect::<Vec<_>>(), ["shop"]);
        assert!(!dirty.cluster);
        assert_eq!(log.counts(), [(LiveSource::slot_of(Kind::Deployment), 1, 2)]);
    }

    impl LiveSource {
        fn slot_of(kind: Kind) -> usize {
            Self::slot(kind)
        }
    }

    #[test]
    fn a_nodes_heartbeat_is_noise_and_its_cordon_reaches_the_namespaces_with_pods_on_it() {
        let log = Arc::new(ChangeLog::new());
        let live = LiveSource::for_audit(log.clone());
        let mut buffer = None;
        listed(&live, vec![node("n1", "2026-12-05T10:00:01Z", false), node("n2", "2026-12-05T10:00:01Z", false)]);
        let mut pods = None;
        live.apply_pod(Event::Init, &mut pods);
        live.apply_pod(Event::InitApply(pod("shop", "web-abc-1", "web-abc", "abc", "n1", true)), &mut pods);
        live.apply_pod(Event::InitApply(pod("bank", "api-def-1", "api-def", "def", "n2", true)), &mut pods);
        live.apply_pod(Event::InitDone, &mut pods);
        assert!(log.take().is_empty());
        live.apply(Event::Apply(node("n1", "2026-12-05T10:00:02Z", false)), &mut buffer);
        assert!(log.take().is_empty(), "a heartbeat changes nothing the rules read");
        live.apply(Event::Apply(node("n1", "2026-12-05T10:00:03Z", true)), &mut buffer);
        let dirty = log.take();
        assert_eq!(dirty.namespaces.iter().map(String::as_str).collect::<Vec<_>>(), ["shop"], "only n1's pods");
        // A pod's readiness is read by the rules.
        live.apply_pod(Event::Apply(pod("bank", "api-def-1", "api-def", "def", "n2", false)), &mut pods);
        assert_eq!(log.take().namespaces.iter().map(String::as_str).collect::<Vec<_>>(), ["bank"]);
        live.apply_pod(Event::Apply(pod("bank", "api-def-1", "api-def", "def", "n2", false)), &mut pods);
        assert!(log.take().is_empty(), "the same pod again");
        live.with_view(&mut |v| {
            let target = crate::core::model::ObjectRef::new(Kind::Deployment, "shop", "web");
            assert_eq!(v.pods_of(&target).len(), 1, "the ReplicaSet web-abc of hash abc is Deployment web's");
        });
    }

    #[test]
    fn a_pod_that_cannot_be_read_is_reported_and_the_others_are_kept() {
        let log = Arc::new(ChangeLog::new());
        let live = LiveSource::for_audit(log);
        let mut pods = None;
        let bad: WatchedPod = object(serde_json::json!({"metadata": {"name": "odd", "namespace": "shop",
            "resourceVersion": "3"}, "spec": {"containers": "not a list"}}));
        assert_eq!(bad.metadata.name.as_deref(), Some("odd"), "the watcher still has its name and version");
        live.apply_pod(Event::Init, &mut pods);
        live.apply_pod(Event::InitApply(bad.clone()), &mut pods);
        live.apply_pod(Event::InitApply(pod("shop", "web-abc-1", "web-abc", "abc", "n1", true)), &mut pods);
        live.apply_pod(Event::InitDone, &mut pods);
        assert!(live.synced_pods());
        let unreadable = live.unreadable_pods_in("shop");
        assert_eq!(unreadable.len(), 1);
        assert_eq!(unreadable[0].0, "odd");
        assert!(unreadable[0].1.contains("invalid type"), "{unreadable:?}");
        assert_eq!(live.unreadable_pod_events(), 1);
        live.with_view(&mut |v| assert_eq!(v.pods_in("shop").len(), 1));
        live.apply_pod(Event::Delete(bad), &mut pods);
        assert!(live.unreadable_pods_in("shop").is_empty(), "gone with the pod");
    }

    #[test]
    fn a_pods_deployment_is_its_replica_sets_name_less_the_template_hash() {
        let owner = |rs: &str, hash: &str| {
            let WatchedPod { pod, .. } = pod("shop", "p", rs, hash, "n1", true);
            pod_owner(&pod.expect("readable"))
        };
        assert_eq!(owner("web-7d9f8", "7d9f8"), PodOwner::Workload(Kind::Deployment, "web".into()));
        assert_eq!(owner("my-web-app-7d9f8", "7d9f8"), PodOwner::Workload(Kind::Deployment, "my-web-app".into()));
        assert_eq!(owner("standalone", "7d9f8"), PodOwner::Other, "a ReplicaSet not named by a Deployment");
        assert_eq!(owner("-7d9f8", "7d9f8"), PodOwner::Other);
    }

    /// An owner is its API group's kind: a pod of OpenKruise's StatefulSet (`apps.kruise.io`) is
    /// no pod of the built-in StatefulSet of its name.
    #[test]
    fn a_kruise_statefulsets_pod_is_another_controllers() {
        let owned = |api_version: &str, kind: &str| {
            let p: LivePod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "db-0", "namespace": "shop", "ownerReferences": [
                    {"apiVersion": api_version, "kind": kind, "name": "db", "uid": "u", "controller": true}]},
            }))
            .unwrap();
            pod_owner(&p)
        };
        assert_eq!(owned("apps/v1", "StatefulSet"), PodOwner::Workload(Kind::StatefulSet, "db".into()));
        assert_eq!(owned("apps.kruise.io/v1beta1", "StatefulSet"), PodOwner::Other);
        assert_eq!(owned("apps/v1", "DaemonSet"), PodOwner::DaemonSet);
        assert_eq!(owned("apps.kruise.io/v1alpha1", "DaemonSet"), PodOwner::Other);
    }

    /// A ScaledObject whose spec the engine cannot read (its CRD's schema allows anything) is kept
    /// without one: the watch of every other ScaledObject goes on.
    #[test]
    fn an_odd_scaled_object_does_not_stop_the_watch() {
        let odd: ScaledObject = object(serde_json::json!({"metadata": {"name": "odd", "namespace": "k"},
            "spec": {"minReplicaCount": "three", "scaleTargetRef": {"name": "web"}}}));
        assert!(odd.spec.is_none());
        assert!(odd.unreadable.as_deref().is_some_and(|w| w.contains("invalid type")), "{:?}", odd.unreadable);
        let live = LiveSource::new();
        listed(&live, vec![odd]);
        assert!(live.is_synced(Kind::ScaledObject));
        let value = serde_json::json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": "odd", "namespace": "k"}, "spec": {"minReplicaCount": "three"}});
        let Err(e) = crate::core::model::decode(&value, "k") else { panic!("check and audit say it is not checked") };
        assert!(e.to_string().contains("minReplicaCount") || e.to_string().contains("invalid type"), "{e}");
    }

    /// A pods relist updates in place and drops what it did not list again; ScaledObjects not
    /// served are said so (the audit does not list them per namespace).
    #[test]
    fn a_pods_relist_keeps_one_copy_and_drops_the_gone() {
        let log = Arc::new(ChangeLog::new());
        let live = LiveSource::for_audit(log.clone());
        let mut pods = None;
        for round in [vec!["a", "b", "c"], vec!["a", "c"]] {
            live.apply_pod(Event::Init, &mut pods);
            for name in round {
                live.apply_pod(Event::InitApply(pod("shop", name, "web-abc", "abc", "n1", true)), &mut pods);
            }
            live.apply_pod(Event::InitDone, &mut pods);
        }
        live.with_view(&mut |v| {
            let names: Vec<String> = v.pods_in("shop").iter().map(|p| p.name.to_string()).collect();
            assert_eq!(names, ["a", "c"]);
        });
        assert_eq!(log.take().namespaces.len(), 1, "b's deletion is a change of shop");
        assert!(live.unserved().is_empty());
        live.not_served(Kind::ScaledObject);
        assert_eq!(live.unserved(), [Kind::ScaledObject]);
        let mut buffer = None;
        live.apply::<ScaledObject>(Event::Init, &mut buffer);
        live.apply::<ScaledObject>(Event::InitDone, &mut buffer);
        assert!(live.unserved().is_empty(), "served again once listed");
    }

    #[test]
    fn a_kind_is_unfollowed_while_its_watch_fails_and_followed_once_the_apiserver_answers() {
        let live = LiveSource::new();
        let slot = LiveSource::slot(Kind::ScaledObject);
        live.not_served(Kind::ScaledObject);
        let old = k8s_openapi::jiff::Timestamp::now().as_millisecond() - UNFOLLOWED_AFTER.as_millis() as i64 - 1;
        let fresh = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        // Failing for a moment: not said yet.
        live.watch_errors.lock().unwrap().insert(slot, (fresh, "503".into()));
        assert!(!live.unfollowed().iter().any(|(k, _)| *k == "ScaledObject"));
        // Failing for longer than UNFOLLOWED_AFTER: said, with why.
        live.watch_errors.lock().unwrap().insert(slot, (old, "scaledobjects.keda.sh is forbidden".into()));
        assert!(live.unfollowed().contains(&("ScaledObject", "scaledobjects.keda.sh is forbidden".to_string())));
        // Its CRD still absent, the apiserver now answers 404: followed (as none) again.
        live.answered_none(Kind::ScaledObject);
        assert!(!live.unfollowed().iter().any(|(k, _)| *k == "ScaledObject"), "{:?}", live.unfollowed());
        // A served kind's error goes with its next event.
        let deployments = LiveSource::slot(Kind::Deployment);
        live.watch_errors.lock().unwrap().insert(deployments, (old, "forbidden".into()));
        let mut buffer = None;
        live.apply::<Deployment>(Event::Init, &mut buffer);
        assert!(live.watch_errors.lock().unwrap().contains_key(&deployments), "Init is no progress");
        live.apply::<Deployment>(Event::InitDone, &mut buffer);
        assert!(!live.watch_errors.lock().unwrap().contains_key(&deployments));
    }
}

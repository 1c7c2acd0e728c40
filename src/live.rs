//! The live view: kube-runtime watchers for the seven kinds the rules read, cluster-wide, kept as
//! projections in one [`Index`] (only the fields the rules read, never whole objects).
//!
//! Consistency: the index follows each watch stream; an object written a moment ago may not be
//! in it yet. Cross-object rules are evaluated on the write of either object of a pair, so the
//! second write of a pair sees the first once the first has reached the cache.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::core::model::{Kind, defaults, name_of, ns_of};
use crate::core::view::{HpaInfo, Index, NodeInfo, PdbInfo, PvcInfo, View, ViewSource, WorkloadInfo};

mod retry;
pub use retry::RetryPolicy;

/// What one object contributes to the index, already in the `Arc` the index keeps (a relist buffers
/// thousands of these: a pointer each, not a projection each, and no move when swapped in).
#[derive(Debug)]
pub enum Projection {
    Workload(Arc<WorkloadInfo>),
    Pdb(Arc<PdbInfo>),
    Hpa(Arc<HpaInfo>),
    Pvc(Arc<PvcInfo>),
    Node(Arc<NodeInfo>),
    Namespace(String, std::collections::BTreeMap<String, String>),
}

impl Projection {
    fn apply(self, index: &mut Index) {
        match self {
            Projection::Workload(w) => index.upsert_workload(w),
            Projection::Pdb(p) => index.upsert_pdb(p),
            Projection::Hpa(h) => index.upsert_hpa(h),
            Projection::Pvc(p) => index.upsert_pvc(p),
            Projection::Node(n) => index.upsert_node(n),
            Projection::Namespace(name, labels) => index.upsert_namespace_labels(name, labels),
        }
    }
}

/// A kind the live view watches.
pub trait Tracked: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    const KIND: Kind;
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

/// The kinds watched, in a fixed order (for readiness and metrics).
pub const KINDS: [Kind; 7] = [
    Kind::Deployment,
    Kind::StatefulSet,
    Kind::PodDisruptionBudget,
    Kind::HorizontalPodAutoscaler,
    Kind::PersistentVolumeClaim,
    Kind::Node,
    Kind::Namespace,
];

/// The live view and its sync state.
pub struct LiveSource {
    index: RwLock<Index>,
    synced: [AtomicBool; 7],
    /// How a failing watch is retried ([`retry`]).
    retry: RetryPolicy,
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
        LiveSource { index: RwLock::new(index), synced: Default::default(), retry }
    }

    fn slot(kind: Kind) -> usize {
        KINDS.iter().position(|k| *k == kind).unwrap_or(0)
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
        match event {
            Event::Apply(obj) => {
                let p = obj.project();
                p.apply(&mut self.write());
            }
            Event::Delete(obj) => obj.remove(&mut self.write()),
            Event::Init => *buffer = Some(Vec::new()),
            Event::InitApply(obj) => buffer.get_or_insert_with(Vec::new).push(obj.project()),
            Event::InitDone => {
                let items = buffer.take().unwrap_or_default();
                let mut index = self.write();
                index.clear_kind(K::KIND);
                for p in items {
                    p.apply(&mut index);
                }
                drop(index);
                self.synced[Self::slot(K::KIND)].store(true, Ordering::SeqCst);
            }
        }
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
        self.spawn::<Namespace>(client);
    }

    fn spawn<K: Tracked>(self: &Arc<Self>, client: Client) {
        let this = self.clone();
        tokio::spawn(async move {
            let api: Api<K> = Api::all(client);
            let watch = || watcher::watcher(api.clone(), watcher::Config::default());
            let mut buffer = None;
            retry::follow(watch, K::KIND, this.retry, |event| this.apply(event, &mut buffer)).await;
        });
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

    fn stats(&self) -> Vec<(Kind, usize, bool)> {
        let counts = self.index.read().unwrap_or_else(|p| p.into_inner()).counts();
        KINDS.iter().map(|k| (*k, counts.get(k).copied().unwrap_or(0), self.is_synced(*k))).collect()
    }
}

//! The indexed set of projections: the static view (`check`, `--cluster FILE`, tests) and the
//! store behind the live view. Indexed by namespace, and within a namespace workloads by label, so
//! that no lookup scans the whole cluster.

use std::collections::BTreeMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};

// foldhash rather than std's SipHash: every review looks up its namespace, workloads, PDBs and
// autoscalers by name here, and SipHash was 3-4% of a PDB or HPA review's instructions. Its seed
// is random per process, as std's is, so keys chosen by a user who can name objects do not
// collide at will.
use foldhash::fast::RandomState;
use foldhash::{HashMap, HashSet};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::lookup::View;
use super::namespace_labels::NamespaceLabels;
use super::nodes::NodeTable;
use super::pods::Pods;
use super::projection::{
    HpaInfo, NodeInfo, PdbInfo, PodInfo, PvcInfo, ServiceInfo, Template, WebhookConfigInfo, WorkloadInfo, spreads_over,
};
use crate::core::model::apiservice::ApiService;
use crate::core::model::{Kind, Object, ObjectRef, Subject, name_of, selector};

/// Projections of one namespace.
#[derive(Default, Debug, Clone)]
struct NamespaceIndex {
    workloads: HashMap<(Kind, String), Arc<WorkloadInfo>>,
    /// Hash of a pod template label's `key=value` → workloads carrying it. Only a hash: a
    /// collision adds candidates, and every candidate is matched against the selector anyway; so
    /// the index holds no copy of the label strings.
    by_label: HashMap<u64, Carriers>,
    label_hasher: RandomState,
    /// Hash of the first `matchLabels` pair of a workload's spread selector → workloads with
    /// such a selector: only they can spread over pods carrying that pair. Same hashing as
    /// `by_label`.
    spread_by_label: HashMap<u64, Carriers>,
    /// Workloads with a spread selector that has no `matchLabels` (expressions only): they may
    /// spread over pods with any labels, so they are always candidates.
    spread_by_expressions: HashSet<(Kind, String)>,
    pdbs: BTreeMap<String, Arc<PdbInfo>>,
    /// Hash of the first `matchLabels` pair of a PDB's selector → PDBs with such a selector:
    /// only they can cover pods carrying that pair (a selector's every pair must match). Same
    /// hashing as `by_label`.
    pdbs_by_label: HashMap<u64, Carriers>,
    /// PDBs whose selector has no `matchLabels` (`{}`, or expressions only): they may cover pods
    /// with any labels, so they are always candidates. A null selector covers nothing: in neither.
    pdbs_without_labels: HashSet<(Kind, String)>,
    /// Autoscalers (HPAs and KEDA ScaledObjects) by (kind, name).
    hpas: BTreeMap<(Kind, String), Arc<HpaInfo>>,
    /// Workload (kind, name) → autoscalers targeting it, sorted (nearly always one).
    hpas_by_target: HashMap<(Kind, String), Vec<(Kind, String)>>,
    pvcs: HashMap<String, Arc<PvcInfo>>,
    services: HashMap<String, Arc<ServiceInfo>>,
}

impl NamespaceIndex {
    fn label_hash(&self, key: &str, value: &str) -> u64 {
        self.label_hasher.hash_one((key, value))
    }

    /// Where `pdb` is filed among the candidates of [`View::pdbs_covering`]: under the hash of its
    /// selector's first `matchLabels` pair (`Some(Some(hash))`), with the PDBs that are always
    /// candidates (`Some(None)`), or nowhere (a null selector: it covers no pod).
    fn pdb_key(&self, pdb: &PdbInfo) -> Option<Option<u64>> {
        let selector = pdb.selector.as_ref()?;
        Some(selector.match_labels.as_ref().and_then(|m| m.iter().next()).map(|(k, v)| self.label_hash(k, v)))
    }

    fn add_pdb(&mut self, info: Arc<PdbInfo>) {
        self.remove_pdb(&info.id.name);
        let key = (Kind::PodDisruptionBudget, info.id.name.clone());
        match self.pdb_key(&info) {
            Some(Some(hash)) => add_carrier(&mut self.pdbs_by_label, hash, &key),
            Some(None) => {
                self.pdbs_without_labels.insert(key);
            }
            None => {}
        }
        self.pdbs.insert(info.id.name.clone(), info);
    }

    fn remove_pdb(&mut self, name: &str) {
        let Some(old) = self.pdbs.remove(name) else { return };
        let key = (Kind::PodDisruptionBudget, name.to_string());
        match self.pdb_key(&old) {
            Some(Some(hash)) => remove_carrier(&mut self.pdbs_by_label, hash, &key),
            Some(None) => {
                self.pdbs_without_labels.remove(&key);
            }
            None => {}
        }
    }

    /// Per spread selector of `w`: the hash its `spread_by_label` entry is under, or `None` for
    /// one without `matchLabels`.
    fn spread_keys(&self, w: &WorkloadInfo) -> Vec<Option<u64>> {
        w.spread_selectors
            .iter()
            .map(|s| s.match_labels.as_ref().and_then(|m| m.iter().next()).map(|(k, v)| self.label_hash(k, v)))
            .collect()
    }

    fn add_workload(&mut self, info: Arc<WorkloadInfo>) {
        let key = (info.id.kind, info.id.name.clone());
        let hashes: Vec<u64> = info.template_labels.iter().map(|(k, v)| self.label_hash(k, v)).collect();
        for hash in hashes {
            add_carrier(&mut self.by_label, hash, &key);
        }
        for spread in self.spread_keys(&info) {
            match spread {
                Some(hash) => add_carrier(&mut self.spread_by_label, hash, &key),
                None => {
                    self.spread_by_expressions.insert(key.clone());
                }
            }
        }
        self.workloads.insert(key, info);
    }

    fn remove_workload(&mut self, key: &(Kind, String)) {
        let Some(old) = self.workloads.remove(key) else { return };
        for (k, v) in &old.template_labels {
            let hash = self.label_hash(k, v);
            remove_carrier(&mut self.by_label, hash, key);
        }
        for spread in self.spread_keys(&old) {
            match spread {
                Some(hash) => remove_carrier(&mut self.spread_by_label, hash, key),
                None => {
                    self.spread_by_expressions.remove(key);
                }
            }
        }
    }
}

fn add_carrier(index: &mut HashMap<u64, Carriers>, hash: u64, key: &(Kind, String)) {
    match index.entry(hash) {
        Entry::Vacant(e) => {
            e.insert(Carriers::One(key.clone()));
        }
        Entry::Occupied(mut e) => e.get_mut().insert(key),
    }
}

fn remove_carrier(index: &mut HashMap<u64, Carriers>, hash: u64, key: &(Kind, String)) {
    if let Some(carriers) = index.get_mut(&hash)
        && carriers.remove(key)
    {
        index.remove(&hash);
    }
}

/// A `(kind, name)` key as the maps hold it, or borrowed: the maps keyed by `(Kind, String)` are
/// looked up through `&dyn KindName` built from a `(Kind, &str)`, so a lookup (every review makes
/// several) copies no name. std's maps take a borrowed form of the key only through `Borrow`, and
/// a tuple of an owned string cannot borrow as a tuple of `&str`: hence the trait object, which
/// hashes and orders as the tuple does, as `Borrow` requires.
trait KindName {
    fn key(&self) -> (Kind, &str);
}

impl KindName for (Kind, String) {
    fn key(&self) -> (Kind, &str) {
        (self.0, &self.1)
    }
}

impl KindName for (Kind, &str) {
    fn key(&self) -> (Kind, &str) {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn KindName + 'a> for (Kind, String) {
    fn borrow(&self) -> &(dyn KindName + 'a) {
        self
    }
}

impl std::hash::Hash for dyn KindName + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl PartialEq for dyn KindName + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for dyn KindName + '_ {}

impl PartialOrd for dyn KindName + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn KindName + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// `(kind, name)` as a key of the maps above, without copying `name`.
fn key(kind: Kind, name: &str) -> (Kind, &str) {
    (kind, name)
}

/// The workloads carrying one label. Most labels (`app.kubernetes.io/name`, `instance`,
/// `version`) are carried by a single workload, held without a set (and the set is boxed, so
/// that a slot of the map is that one workload's size).
#[derive(Debug, Clone)]
#[allow(clippy::box_collection)] // boxed on purpose: see above
enum Carriers {
    One((Kind, String)),
    Many(Box<HashSet<(Kind, String)>>),
}

impl Carriers {
    fn insert(&mut self, key: &(Kind, String)) {
        match self {
            Carriers::One(one) if one == key => {}
            Carriers::One(one) => *self = Carriers::Many(Box::new(HashSet::from_iter([one.clone(), key.clone()]))),
            Carriers::Many(set) => {
                set.insert(key.clone());
            }
        }
    }

    /// Removes `key`; true when no workload is left.
    fn remove(&mut self, key: &(Kind, String)) -> bool {
        match self {
            Carriers::One(one) => one == key,
            Carriers::Many(set) => {
                set.remove(key);
                if set.len() == 1 {
                    let last = set.drain().next().expect("one left");
                    *self = Carriers::One(last);
                    return false;
                }
                set.is_empty()
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Carriers::One(_) => 1,
            Carriers::Many(set) => set.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &(Kind, String)> {
        let (one, many) = match self {
            Carriers::One(one) => (Some(one), None),
            Carriers::Many(set) => (None, Some(&**set)),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// What the view keeps of an object: made from the object on any thread, so that the object can
/// be dropped before the view is built (`check` on a large bundle).
#[derive(Debug)]
pub enum Projection {
    Workload(Arc<WorkloadInfo>),
    Pdb(Arc<PdbInfo>),
    Hpa(Arc<HpaInfo>),
    Service(Arc<ServiceInfo>),
    Webhooks(Arc<WebhookConfigInfo>),
    Pvc(Arc<PvcInfo>),
    Node(Arc<NodeInfo>),
    /// An APIService (kept only while a Service serves it: [`ApiService::slim`]).
    ApiService(Arc<ApiService>),
    /// A namespace's name and labels.
    Namespace(String, BTreeMap<String, String>),
    /// What the view does not hold (a scale write).
    Nothing,
}

impl Projection {
    pub fn of(object: &Object) -> Projection {
        match object {
            Object::Subject(Subject::Workload(w)) => Projection::Workload(WorkloadInfo::of(w).into()),
            Object::Subject(Subject::Pdb(p)) => Projection::Pdb(PdbInfo::of(p).into()),
            Object::Subject(Subject::Hpa(h)) => Projection::Hpa(HpaInfo::of(h).into()),
            // A scale write.
            Object::Subject(Subject::Scale { .. }) => Projection::Nothing,
            Object::Subject(Subject::ApiService(a)) => Projection::ApiService(Arc::new(a.slim())),
            Object::Subject(Subject::ScaledObject(so)) => Projection::Hpa(HpaInfo::of_scaled_object(so).into()),
            Object::Subject(Subject::Service(svc)) => Projection::Service(ServiceInfo::of(svc).into()),
            Object::Subject(Subject::Webhooks(c)) => Projection::Webhooks(WebhookConfigInfo::of(c).into()),
            Object::Pvc(p) => Projection::Pvc(PvcInfo::of(p).into()),
            Object::Node(n) => Projection::Node(NodeInfo::of(n).into()),
            Object::Namespace(n) => {
                Projection::Namespace(name_of(&n.metadata), n.metadata.labels.clone().unwrap_or_default())
            }
        }
    }
}

/// Namespace → Service name → the webhook configurations calling it.
type WebhookBackends = HashMap<String, BTreeMap<String, Vec<(Kind, String)>>>;

/// An indexed set of projections: the static view, and the store behind the live view.
///
/// A clone is a snapshot that costs a few reference counts: every part is shared (`Arc`) and
/// copied only when one side changes it ([`Arc::make_mut`]): the top maps as a whole, a
/// namespace's objects and pods by namespace. The live view's watchers change their copy while
/// admissions read snapshots, so neither waits for the other (`crate::live`).
#[derive(Default, Debug, Clone)]
pub struct Index {
    namespaces: Arc<HashMap<String, Arc<NamespaceIndex>>>,
    nodes: Arc<BTreeMap<String, Arc<NodeInfo>>>,
    /// The nodes as a table, made at the first ask after they change and shared by the snapshots
    /// that hold the same nodes ([`View::node_table`]).
    node_table: Arc<OnceLock<Arc<NodeTable>>>,
    webhook_configs: Arc<BTreeMap<(Kind, String), Arc<WebhookConfigInfo>>>,
    /// Namespace → Service name → the configurations with a fail-closed webhook calling it: a
    /// Service's or a workload's write finds the webhooks it backs without a scan.
    webhook_backends: Arc<WebhookBackends>,
    namespace_labels: Arc<HashMap<String, BTreeMap<String, String>>>,
    /// The namespaces' labels by key, made at the first ask after they change and shared by the
    /// snapshots that hold the same namespaces ([`View::any_namespace_matching`]).
    namespace_label_index: Arc<OnceLock<Arc<NamespaceLabels>>>,
    /// Aggregated APIServices by (Service namespace, Service name, APIService name): a Service's
    /// or a workload's write finds the APIServices it serves without a scan. Local APIServices
    /// (no `spec.service`) are not kept.
    apiservices: Arc<BTreeMap<(String, String, String), Arc<ApiService>>>,
    /// APIService name → its key in `apiservices`.
    apiservice_keys: Arc<HashMap<String, (String, String, String)>>,
    /// Pods: only the audit's view holds them (the live posture rules and the drain read them).
    pods: Arc<Pods>,
    /// Workloads' pod templates, kept only when asked ([`Index::set_keeps_templates`]): the drain
    /// replay places replacements from them.
    templates: Option<Arc<HashMap<ObjectRef, Arc<Template>>>>,
    /// The cluster's storage, when read (the audit's, for a drain).
    storage: Option<Arc<super::storage::Storage>>,
    complete: bool,
    knows_nodes: bool,
}

impl Index {
    pub fn new() -> Self {
        Self::default()
    }

    /// The objects of `namespace`, to change (made if absent; copied first if a snapshot shares them).
    fn namespace_mut(&mut self, namespace: &str) -> &mut NamespaceIndex {
        let namespaces = Arc::make_mut(&mut self.namespaces);
        let ns = match namespaces.get_mut(namespace) {
            Some(_) => namespaces.get_mut(namespace).expect("just found"),
            None => namespaces.entry(namespace.to_string()).or_default(),
        };
        Arc::make_mut(ns)
    }

    /// The objects of `namespace` if it has any, to change (nothing is copied when it has none).
    fn existing_namespace_mut(&mut self, namespace: &str) -> Option<&mut NamespaceIndex> {
        if !self.namespaces.contains_key(namespace) {
            return None;
        }
        Arc::make_mut(&mut self.namespaces).get_mut(namespace).map(Arc::make_mut)
    }

    /// Every namespace's objects, to change.
    fn every_namespace_mut(&mut self) -> impl Iterator<Item = &mut NamespaceIndex> {
        Arc::make_mut(&mut self.namespaces).values_mut().map(Arc::make_mut)
    }

    /// Declare the view complete (`check --complete`, the live cluster).
    pub fn set_complete(&mut self, complete: bool) {
        self.complete = complete;
    }

    pub fn set_knows_nodes(&mut self, knows: bool) {
        self.knows_nodes = knows;
    }

    /// Add (or replace) any decoded object.
    pub fn insert_object(&mut self, object: &Object) {
        if let (Some(templates), Object::Subject(Subject::Workload(w))) = (self.templates.as_mut(), object)
            && let Some(spec) = w.pod_spec()
        {
            Arc::make_mut(templates)
                .insert(w.id(), Arc::new(Template { labels: w.template_labels().clone(), spec: spec.clone() }));
        }
        self.insert_projection(Projection::of(object));
    }

    /// Keep the pod templates of the workloads inserted from now on (the drain replay's view).
    pub fn set_keeps_templates(&mut self, keep: bool) {
        self.templates = keep.then(Arc::default);
    }

    /// The cluster's PersistentVolumes, StorageClasses and CSINodes, for a drain's volume filters.
    pub fn set_storage(&mut self, storage: super::storage::Storage) {
        self.storage = Some(Arc::new(storage));
    }

    /// Add (or replace) what the view keeps of an object.
    pub fn insert_projection(&mut self, projection: Projection) {
        match projection {
            Projection::Workload(w) => self.upsert_workload(w),
            Projection::Pdb(p) => self.upsert_pdb(p),
            Projection::Hpa(h) => self.upsert_hpa(h),
            Projection::Service(s) => self.upsert_service(s),
            Projection::Webhooks(c) => self.upsert_webhook_config(c),
            Projection::Pvc(p) => self.upsert_pvc(p),
            Projection::Node(n) => self.upsert_node(n),
            Projection::ApiService(a) => self.upsert_apiservice(a),
            Projection::Namespace(name, labels) => self.upsert_namespace_labels(name, labels),
            Projection::Nothing => {}
        }
    }

    pub fn upsert_workload(&mut self, info: impl Into<Arc<WorkloadInfo>>) {
        let info = info.into();
        self.remove_workload(info.id.kind, &info.id.namespace, &info.id.name);
        self.namespace_mut(&info.id.namespace.clone()).add_workload(info);
    }

    pub fn remove_workload(&mut self, kind: Kind, namespace: &str, name: &str) {
        if let Some(ns) = self.existing_namespace_mut(namespace) {
            ns.remove_workload(&(kind, name.to_string()));
        }
    }

    pub fn upsert_pdb(&mut self, info: impl Into<Arc<PdbInfo>>) {
        let info = info.into();
        let ns = self.namespace_mut(&info.id.namespace.clone());
        ns.add_pdb(info);
    }

    pub fn remove_pdb(&mut self, namespace: &str, name: &str) {
        if let Some(ns) = self.existing_namespace_mut(namespace) {
            ns.remove_pdb(name);
        }
    }

    /// Adds (or replaces) an autoscaler: an HPA or a KEDA ScaledObject.
    pub fn upsert_hpa(&mut self, info: impl Into<Arc<HpaInfo>>) {
        let info = info.into();
        self.remove_autoscaler(info.id.kind, &info.id.namespace.clone(), &info.id.name.clone());
        let ns = self.namespace_mut(&info.id.namespace.clone());
        let key = (info.id.kind, info.id.name.clone());
        if let Some(t) = &info.target {
            let keys = ns.hpas_by_target.entry((t.kind, t.name.clone())).or_default();
            if let Err(at) = keys.binary_search(&key) {
                keys.insert(at, key.clone());
            }
        }
        ns.hpas.insert(key, info);
    }

    pub fn remove_hpa(&mut self, namespace: &str, name: &str) {
        self.remove_autoscaler(Kind::HorizontalPodAutoscaler, namespace, name);
    }

    /// Removes an autoscaler of `kind` (HorizontalPodAutoscaler or ScaledObject).
    pub fn remove_autoscaler(&mut self, kind: Kind, namespace: &str, name: &str) {
        let Some(ns) = self.existing_namespace_mut(namespace) else { return };
        let key = (kind, name.to_string());
        if let Some(old) = ns.hpas.remove(&key)
            && let Some(t) = &old.target
        {
            let target = (t.kind, t.name.clone());
            if let Some(keys) = ns.hpas_by_target.get_mut(&target) {
                if let Ok(at) = keys.binary_search(&key) {
                    keys.remove(at);
                }
                if keys.is_empty() {
                    ns.hpas_by_target.remove(&target);
                }
            }
        }
    }

    pub fn upsert_pvc(&mut self, info: impl Into<Arc<PvcInfo>>) {
        let info = info.into();
        let ns = self.namespace_mut(&info.id.namespace.clone());
        ns.pvcs.insert(info.id.name.clone(), info);
    }

    pub fn remove_pvc(&mut self, namespace: &str, name: &str) {
        if let Some(ns) = self.existing_namespace_mut(namespace) {
            ns.pvcs.remove(name);
        }
    }

    pub fn upsert_service(&mut self, info: impl Into<Arc<ServiceInfo>>) {
        let info = info.into();
        let ns = self.namespace_mut(&info.id.namespace.clone());
        ns.services.insert(info.id.name.clone(), info);
    }

    pub fn remove_service(&mut self, namespace: &str, name: &str) {
        if let Some(ns) = self.existing_namespace_mut(namespace) {
            ns.services.remove(name);
        }
    }

    /// Adds (or replaces) an APIService; one without a Service (a local API) is dropped.
    pub fn upsert_apiservice(&mut self, api: impl Into<Arc<ApiService>>) {
        let api = api.into();
        let name = api.metadata.name.clone().unwrap_or_default();
        self.remove_apiservice(&name);
        let Some(svc) = &api.spec.service else { return };
        let key = (svc.namespace.clone(), svc.name.clone(), name.clone());
        Arc::make_mut(&mut self.apiservice_keys).insert(name, key.clone());
        Arc::make_mut(&mut self.apiservices).insert(key, api);
    }

    pub fn remove_apiservice(&mut self, name: &str) {
        if !self.apiservice_keys.contains_key(name) {
            return;
        }
        if let Some(key) = Arc::make_mut(&mut self.apiservice_keys).remove(name) {
            Arc::make_mut(&mut self.apiservices).remove(&key);
        }
    }

    /// Adds (or replaces) a webhook configuration (its `id.kind` says which of the two).
    pub fn upsert_webhook_config(&mut self, info: impl Into<Arc<WebhookConfigInfo>>) {
        let info = info.into();
        self.remove_webhook_config(info.id.kind, &info.id.name.clone());
        let key = (info.id.kind, info.id.name.clone());
        for (namespace, service) in info.services() {
            let callers = Arc::make_mut(&mut self.webhook_backends)
                .entry(namespace.to_string())
                .or_default()
                .entry(service.to_string())
                .or_default();
            if let Err(at) = callers.binary_search(&key) {
                callers.insert(at, key.clone());
            }
        }
        Arc::make_mut(&mut self.webhook_configs).insert(key, info);
    }

    pub fn remove_webhook_config(&mut self, kind: Kind, name: &str) {
        let key = (kind, name.to_string());
        if !self.webhook_configs.contains_key(&key) {
            return;
        }
        let Some(old) = Arc::make_mut(&mut self.webhook_configs).remove(&key) else { return };
        let backends = Arc::make_mut(&mut self.webhook_backends);
        for (namespace, service) in old.services() {
            let Some(by_service) = backends.get_mut(namespace) else { continue };
            if let Some(callers) = by_service.get_mut(service) {
                callers.retain(|k| *k != key);
                if callers.is_empty() {
                    by_service.remove(service);
                }
            }
            if by_service.is_empty() {
                backends.remove(namespace);
            }
        }
    }

    /// Adds or replaces a node. A node written again as it was (a kubelet's status heartbeat
    /// changes nothing the view keeps) changes nothing: a snapshot shares the map, which a change
    /// would copy whole.
    pub fn upsert_node(&mut self, info: impl Into<Arc<NodeInfo>>) {
        let info = info.into();
        if self.nodes.get(&info.name).is_some_and(|old| **old == *info) {
            return;
        }
        Arc::make_mut(&mut self.nodes).insert(info.name.clone(), info);
        self.node_table = Arc::default();
    }

    pub fn remove_node(&mut self, name: &str) {
        if self.nodes.contains_key(name) {
            Arc::make_mut(&mut self.nodes).remove(name);
            self.node_table = Arc::default();
        }
    }

    pub fn upsert_namespace(&mut self, ns: &Namespace) {
        self.upsert_namespace_labels(name_of(&ns.metadata), ns.metadata.labels.clone().unwrap_or_default());
    }

    /// The namespaces known: the Namespace objects, and those holding an object or a pod; sorted.
    pub fn namespace_names(&self) -> Vec<String> {
        let mut names: std::collections::BTreeSet<String> = self.namespace_labels.keys().cloned().collect();
        names.extend(self.namespaces.keys().filter(|n| !n.is_empty()).cloned());
        names.extend(self.pods.namespaces());
        names.into_iter().collect()
    }

    pub fn upsert_namespace_labels(&mut self, name: String, labels: BTreeMap<String, String>) {
        if self.namespace_labels.get(&name) == Some(&labels) {
            return;
        }
        Arc::make_mut(&mut self.namespace_labels).insert(name, labels);
        self.namespace_label_index = Arc::default();
    }

    /// Drops every object of `kind` (before a relist replaces them).
    pub fn clear_kind(&mut self, kind: Kind) {
        match kind {
            Kind::Deployment | Kind::StatefulSet => {
                for ns in self.every_namespace_mut() {
                    let names: Vec<_> = ns.workloads.keys().filter(|(k, _)| *k == kind).cloned().collect();
                    for key in names {
                        ns.remove_workload(&key);
                    }
                }
            }
            Kind::PodDisruptionBudget => self.every_namespace_mut().for_each(|ns| {
                ns.pdbs.clear();
                ns.pdbs_by_label.clear();
                ns.pdbs_without_labels.clear();
            }),
            Kind::HorizontalPodAutoscaler | Kind::ScaledObject => {
                let keys: Vec<(String, String)> = self
                    .namespaces
                    .iter()
                    .flat_map(|(ns, index)| {
                        index.hpas.keys().filter(|(k, _)| *k == kind).map(|(_, name)| (ns.clone(), name.clone()))
                    })
                    .collect();
                for (ns, name) in keys {
                    self.remove_autoscaler(kind, &ns, &name);
                }
            }
            Kind::PersistentVolumeClaim => self.every_namespace_mut().for_each(|ns| ns.pvcs.clear()),
            Kind::Service => self.every_namespace_mut().for_each(|ns| ns.services.clear()),
            Kind::ValidatingWebhookConfiguration | Kind::MutatingWebhookConfiguration => {
                let names: Vec<String> =
                    self.webhook_configs.keys().filter(|(k, _)| *k == kind).map(|(_, n)| n.clone()).collect();
                for name in names {
                    self.remove_webhook_config(kind, &name);
                }
            }
            Kind::Node => {
                self.nodes = Arc::default();
                self.node_table = Arc::default();
            }
            Kind::Namespace => {
                self.namespace_labels = Arc::default();
                self.namespace_label_index = Arc::default();
            }
            Kind::ApiService => {
                self.apiservices = Arc::default();
                self.apiservice_keys = Arc::default();
            }
            // Pods are relisted through their own table (retain_listed_pods), never as a kind.
            Kind::Pod => {}
        }
    }

    /// Adds (or replaces) a pod of `namespace`.
    pub fn upsert_pod(&mut self, namespace: &str, pod: PodInfo) {
        Arc::make_mut(&mut self.pods).upsert(namespace, pod);
    }

    pub fn remove_pod(&mut self, namespace: &str, name: &str) {
        Arc::make_mut(&mut self.pods).remove(namespace, name);
    }

    /// Drops the pods a relist did not list again.
    pub fn retain_listed_pods(&mut self, listed: &super::pods::PodsListed) {
        Arc::make_mut(&mut self.pods).retain_listed(listed);
    }

    /// Drops every pod (before a relist replaces them).
    pub fn clear_pods(&mut self) {
        self.pods = Arc::default();
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    pub fn remove_namespace(&mut self, name: &str) {
        if self.namespace_labels.contains_key(name) {
            Arc::make_mut(&mut self.namespace_labels).remove(name);
            self.namespace_label_index = Arc::default();
        }
    }

    /// Object counts per kind, for metrics and reports.
    pub fn counts(&self) -> BTreeMap<Kind, usize> {
        let mut counts = BTreeMap::new();
        for ns in self.namespaces.values() {
            for (kind, _) in ns.workloads.keys() {
                *counts.entry(*kind).or_insert(0) += 1;
            }
            *counts.entry(Kind::PodDisruptionBudget).or_insert(0) += ns.pdbs.len();
            for (kind, _) in ns.hpas.keys() {
                *counts.entry(*kind).or_insert(0) += 1;
            }
            *counts.entry(Kind::PersistentVolumeClaim).or_insert(0) += ns.pvcs.len();
            *counts.entry(Kind::Service).or_insert(0) += ns.services.len();
        }
        for (kind, _) in self.webhook_configs.keys() {
            *counts.entry(*kind).or_insert(0) += 1;
        }
        counts.insert(Kind::Node, self.nodes.len());
        counts.insert(Kind::ApiService, self.apiservices.len());
        counts.insert(Kind::Namespace, self.namespace_labels.len());
        counts
    }
}

impl View for Index {
    fn is_complete(&self) -> bool {
        self.complete
    }

    fn template(&self, workload: &ObjectRef) -> Option<Arc<Template>> {
        self.templates.as_ref()?.get(workload).cloned()
    }

    fn storage(&self) -> Option<Arc<super::storage::Storage>> {
        self.storage.clone()
    }

    fn knows_nodes(&self) -> bool {
        self.knows_nodes
    }

    fn workload(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<WorkloadInfo>> {
        self.namespaces.get(namespace)?.workloads.get(&key(kind, name) as &dyn KindName).cloned()
    }

    fn workloads_selected_by(&self, namespace: &str, sel: &LabelSelector) -> Vec<Arc<WorkloadInfo>> {
        let Some(ns) = self.namespaces.get(namespace) else { return Vec::new() };
        // Narrow by the rarest matchLabels pair; a selector of expressions only scans the namespace.
        let candidates: Box<dyn Iterator<Item = &Arc<WorkloadInfo>>> = match sel
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| ns.by_label.get(&ns.label_hash(k, v)))
            .min_by_key(|set| set.map_or(0, Carriers::len))
        {
            Some(None) => return Vec::new(),
            Some(Some(keys)) => Box::new(keys.iter().filter_map(|k| ns.workloads.get(k))),
            None => Box::new(ns.workloads.values()),
        };
        let mut found: Vec<_> = candidates.filter(|w| selector::matches(sel, &w.template_labels)).cloned().collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found
    }

    fn workloads_in(&self, namespace: &str) -> Vec<Arc<WorkloadInfo>> {
        let mut found: Vec<_> =
            self.namespaces.get(namespace).map(|ns| ns.workloads.values().cloned().collect()).unwrap_or_default();
        found.sort_by(|a: &Arc<WorkloadInfo>, b| a.id.cmp(&b.id));
        found
    }

    fn workloads_spreading_over(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<WorkloadInfo>> {
        // Asked once per workload checked: only workloads with a spread selector whose first
        // `matchLabels` pair is among `labels` (or with expressions only) can match, so those
        // alone are matched, not every workload of the namespace.
        let Some(ns) = self.namespaces.get(namespace) else { return Vec::new() };
        let mut candidates: Vec<&(Kind, String)> = ns.spread_by_expressions.iter().collect();
        for (k, v) in labels {
            if let Some(carriers) = ns.spread_by_label.get(&ns.label_hash(k, v)) {
                candidates.extend(carriers.iter());
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        let mut found: Vec<_> = candidates
            .into_iter()
            .filter_map(|key| ns.workloads.get(key))
            .filter(|w| spreads_over(w, labels))
            .cloned()
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found
    }

    fn pdbs_in(&self, namespace: &str) -> Vec<Arc<PdbInfo>> {
        self.namespaces.get(namespace).map(|ns| ns.pdbs.values().cloned().collect()).unwrap_or_default()
    }

    fn pdb(&self, namespace: &str, name: &str) -> Option<Arc<PdbInfo>> {
        self.namespaces.get(namespace)?.pdbs.get(name).cloned()
    }

    fn pdbs_covering(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<PdbInfo>> {
        // Candidates by the pod's labels (a PDB's first matchLabels pair must be among them) and
        // those without matchLabels: the PDBs of other workloads are not matched one by one.
        let Some(ns) = self.namespaces.get(namespace) else { return Vec::new() };
        let mut candidates: Vec<&(Kind, String)> = ns.pdbs_without_labels.iter().collect();
        for (k, v) in labels {
            if let Some(carriers) = ns.pdbs_by_label.get(&ns.label_hash(k, v)) {
                candidates.extend(carriers.iter());
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        candidates.into_iter().filter_map(|(_, name)| ns.pdbs.get(name)).filter(|p| p.covers(labels)).cloned().collect()
    }

    fn hpas_targeting(&self, target: &ObjectRef) -> Vec<Arc<HpaInfo>> {
        let Some(ns) = self.namespaces.get(&target.namespace) else { return Vec::new() };
        ns.hpas_by_target
            .get(&key(target.kind, &target.name) as &dyn KindName)
            .into_iter()
            .flatten()
            .filter_map(|key| ns.hpas.get(key).cloned())
            .collect()
    }

    fn autoscaler(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<HpaInfo>> {
        self.namespaces.get(namespace)?.hpas.get(&key(kind, name) as &dyn KindName).cloned()
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Arc<ServiceInfo>> {
        self.namespaces.get(namespace)?.services.get(name).cloned()
    }

    fn webhook_config(&self, kind: Kind, name: &str) -> Option<Arc<WebhookConfigInfo>> {
        self.webhook_configs.get(&key(kind, name) as &dyn KindName).cloned()
    }

    fn webhooks_calling(&self, namespace: &str, service: &str) -> Vec<Arc<WebhookConfigInfo>> {
        self.webhook_backends
            .get(namespace)
            .and_then(|by_service| by_service.get(service))
            .into_iter()
            .flatten()
            .filter_map(|key| self.webhook_configs.get(key).cloned())
            .collect()
    }

    fn webhook_services_in(&self, namespace: &str) -> Vec<String> {
        self.webhook_backends.get(namespace).map(|by_service| by_service.keys().cloned().collect()).unwrap_or_default()
    }

    fn apiservices_calling(&self, namespace: &str, service: &str) -> Vec<Arc<ApiService>> {
        let from = (namespace.to_string(), service.to_string(), String::new());
        self.apiservices
            .range(from..)
            .take_while(|((ns, svc, _), _)| ns == namespace && svc == service)
            .map(|(_, a)| a.clone())
            .collect()
    }

    fn apiservice_services_in(&self, namespace: &str) -> Vec<String> {
        let from = (namespace.to_string(), String::new(), String::new());
        let mut names: Vec<String> = self
            .apiservices
            .range(from..)
            .take_while(|((ns, _, _), _)| ns == namespace)
            .map(|((_, svc, _), _)| svc.clone())
            .collect();
        names.dedup();
        names
    }

    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PvcInfo>> {
        self.namespaces.get(namespace)?.pvcs.get(name).cloned()
    }

    fn nodes(&self) -> Vec<Arc<NodeInfo>> {
        self.node_table().nodes().to_vec()
    }

    fn node_table(&self) -> Arc<NodeTable> {
        self.node_table.get_or_init(|| Arc::new(NodeTable::new(self.nodes.values().cloned().collect()))).clone()
    }

    fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.namespace_labels.get(namespace).cloned()
    }

    /// Known where the view follows a cluster (the live view, the audit's): it holds every
    /// namespace there. Answered from the labels indexed by key ([`NamespaceLabels`]), in time
    /// linear in the selector and the namespaces carrying its keys.
    fn any_namespace_matching(&self, selector: &LabelSelector) -> Option<bool> {
        if !self.knows_nodes || self.namespace_labels.is_empty() {
            return None;
        }
        let index =
            self.namespace_label_index.get_or_init(|| Arc::new(NamespaceLabels::new(self.namespace_labels.values())));
        Some(index.any_matching(selector))
    }

    fn namespace_label(&self, namespace: &str, key: &str) -> Option<String> {
        self.namespace_labels.get(namespace)?.get(key).cloned()
    }

    fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.nodes.get(name).cloned()
    }

    fn pods_of(&self, workload: &ObjectRef) -> Vec<Arc<PodInfo>> {
        self.pods.of(workload.kind, &workload.namespace, &workload.name)
    }

    fn pods_in(&self, namespace: &str) -> Vec<Arc<PodInfo>> {
        self.pods.in_namespace(namespace)
    }

    fn pods_on_nodes(&self, nodes: &[String]) -> Vec<(String, Arc<PodInfo>)> {
        self.pods.on_nodes(nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::Exemptions;

    fn workload(name: &str, labels: &[(&str, &str)]) -> WorkloadInfo {
        WorkloadInfo {
            id: ObjectRef::new(Kind::Deployment, "ns", name),
            selector: None,
            template_labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            replicas: 2,
            replicas_source: Default::default(),
            claim_names: Vec::new(),
            exemptions: Exemptions::new(),
            spread_selectors: Vec::new(),
            kept_apart: false,
            host_network_unprotected: false,
            recreate_containers: None,
        }
    }

    fn selected(index: &Index, labels: &[(&str, &str)]) -> Vec<String> {
        let sel = LabelSelector {
            match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            match_expressions: None,
        };
        index.workloads_selected_by("ns", &sel).iter().map(|w| w.id.name.clone()).collect()
    }

    /// A clone is a snapshot: later changes to the original do not reach it, and what neither
    /// side changed stays shared (a namespace untouched since is the same allocation).
    #[test]
    fn a_clone_is_a_snapshot_that_shares_what_is_unchanged() {
        let mut index = Index::new();
        index.upsert_workload(workload("web", &[("app", "web")]));
        let mut other = workload("db", &[("app", "db")]);
        other.id.namespace = "data".into();
        index.upsert_workload(other);
        index.upsert_node(NodeInfo { name: "n1".into(), ..Default::default() });
        let snapshot = index.clone();
        assert!(Arc::ptr_eq(&index.namespaces, &snapshot.namespaces), "nothing copied by the clone itself");
        index.upsert_workload(workload("api", &[("app", "api")]));
        index.remove_workload(Kind::Deployment, "ns", "web");
        index.remove_node("n1");
        let names = |i: &Index| i.workloads_in("ns").iter().map(|w| w.id.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&snapshot), ["web"]);
        assert_eq!(names(&index), ["api"]);
        assert_eq!((snapshot.nodes().len(), index.nodes().len()), (1, 0));
        assert!(Arc::ptr_eq(&index.namespaces["data"], &snapshot.namespaces["data"]), "data was not touched");
        assert!(!Arc::ptr_eq(&index.namespaces["ns"], &snapshot.namespaces["ns"]));
        // Removing what is not there copies nothing.
        let before = index.clone();
        index.remove_workload(Kind::Deployment, "nowhere", "x");
        index.remove_node("n9");
        assert!(Arc::ptr_eq(&index.namespaces, &before.namespaces) && Arc::ptr_eq(&index.nodes, &before.nodes));
    }

    /// The node table lives as long as the nodes: snapshots of the same nodes share it (and the
    /// columns numbered in it), a node written again as it was (a status heartbeat) keeps it, and
    /// any change to a node makes the next ask build a new one.
    #[test]
    fn the_node_table_is_shared_until_a_node_changes() {
        let mut index = Index::new();
        let zone = |z: &str| BTreeMap::from([("zone".to_string(), z.to_string())]);
        index.upsert_node(NodeInfo { name: "n1".into(), labels: zone("z1"), ..Default::default() });
        let table = index.node_table();
        let snapshot = index.clone();
        assert!(Arc::ptr_eq(&table, &snapshot.node_table()));
        assert!(Arc::ptr_eq(&table.column("zone"), &snapshot.node_table().column("zone")));

        index.upsert_node(NodeInfo { name: "n1".into(), labels: zone("z1"), ..Default::default() });
        assert!(Arc::ptr_eq(&table, &index.node_table()), "written again as it was: nothing changed");
        assert!(Arc::ptr_eq(&index.nodes, &snapshot.nodes), "nor was the map copied");

        index.upsert_node(NodeInfo { name: "n1".into(), labels: zone("z2"), ..Default::default() });
        assert_eq!(index.node_table().column("zone").values, ["z2"]);
        assert_eq!(snapshot.node_table().column("zone").values, ["z1"], "the snapshot keeps its own");
        index.remove_node("n1");
        assert!(index.node_table().nodes().is_empty());
        index.upsert_node(NodeInfo { name: "n2".into(), ..Default::default() });
        index.clear_kind(Kind::Node);
        assert!(index.node_table().nodes().is_empty());
    }
    /// The spread index finds exactly what matching every workload of the namespace finds,
    /// through upserts that change selectors and removals.
    #[test]
    fn spread_index_finds_what_a_full_scan_finds() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let pair = |i: u64| (["app", "tier", "zone"][(i % 3) as usize].to_string(), format!("v{}", i / 3 % 3));
        let mut index = Index::new();
        for round in 0..40 {
            let name = format!("w{}", next(12));
            if round % 5 == 4 {
                index.remove_workload(Kind::Deployment, "ns", &name);
                continue;
            }
            let mut w = workload(&name, &[]);
            w.template_labels = (0..next(3)).map(|_| pair(next(9))).collect();
            w.spread_selectors = (0..next(3))
                .map(|_| {
                    let labels: BTreeMap<String, String> = (0..next(3)).map(|_| pair(next(9))).collect();
                    let expressions = (next(3) == 0).then(|| {
                        vec![LabelSelectorRequirement { key: pair(next(9)).0, operator: "Exists".into(), values: None }]
                    });
                    Arc::new(LabelSelector { match_labels: Some(labels), match_expressions: expressions })
                })
                .filter(|s| !selector::is_empty(s))
                .collect();
            index.upsert_workload(w);
            for _ in 0..10 {
                let labels: BTreeMap<String, String> = (0..next(4)).map(|_| pair(next(9))).collect();
                let ids = |ws: Vec<Arc<WorkloadInfo>>| ws.iter().map(|w| w.id.name.clone()).collect::<Vec<_>>();
                let mut scanned: Vec<_> =
                    index.workloads_in("ns").into_iter().filter(|w| spreads_over(w, &labels)).collect();
                scanned.sort_by(|a, b| a.id.cmp(&b.id));
                assert_eq!(ids(index.workloads_spreading_over("ns", &labels)), ids(scanned), "{labels:?}");
            }
        }
    }

    /// The PDB index finds exactly what matching every PDB of the namespace finds, through
    /// upserts that change selectors (to null, `{}`, expressions only), removals and a relist.
    #[test]
    fn pdb_index_finds_what_a_full_scan_finds() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        let mut seed = 11u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let pair = |i: u64| (["app", "tier", "zone"][(i % 3) as usize].to_string(), format!("v{}", i / 3 % 3));
        let mut index = Index::new();
        for round in 0..80 {
            let name = format!("p{}", next(12));
            if round % 7 == 6 {
                index.remove_pdb("ns", &name);
                continue;
            }
            if round == 40 {
                index.clear_kind(Kind::PodDisruptionBudget);
            }
            let selector = match next(5) {
                0 => None,
                1 => Some(LabelSelector::default()),
                _ => {
                    let labels: BTreeMap<String, String> = (0..next(3)).map(|_| pair(next(9))).collect();
                    let expressions = (next(3) == 0).then(|| {
                        vec![LabelSelectorRequirement { key: pair(next(9)).0, operator: "Exists".into(), values: None }]
                    });
                    Some(LabelSelector { match_labels: Some(labels), match_expressions: expressions })
                }
            };
            index.upsert_pdb(PdbInfo {
                id: ObjectRef::new(Kind::PodDisruptionBudget, "ns", &name),
                selector,
                min_available: None,
                max_unavailable: None,
                exemptions: Exemptions::new(),
                always_allow_unhealthy: false,
                status: None,
                generation: 1,
            });
            for _ in 0..10 {
                let labels: BTreeMap<String, String> = (0..next(4)).map(|_| pair(next(9))).collect();
                let ids = |ps: Vec<Arc<PdbInfo>>| ps.iter().map(|p| p.id.name.clone()).collect::<Vec<_>>();
                let scanned: Vec<_> = index.pdbs_in("ns").into_iter().filter(|p| p.covers(&labels)).collect();
                assert_eq!(ids(index.pdbs_covering("ns", &labels)), ids(scanned), "{labels:?}");
            }
        }
        assert!(index.pdbs_covering("elsewhere", &BTreeMap::new()).is_empty());
    }

    #[test]
    fn label_index_follows_upserts_and_removals() {
        let mut index = Index::new();
        index.upsert_workload(workload("a", &[("app", "a"), ("tier", "web")]));
        index.upsert_workload(workload("b", &[("app", "b"), ("tier", "web")]));
        index.upsert_workload(workload("c", &[("app", "c"), ("tier", "web")]));
        assert_eq!(selected(&index, &[("tier", "web")]), ["a", "b", "c"]);
        assert_eq!(selected(&index, &[("app", "b"), ("tier", "web")]), ["b"]);
        assert!(selected(&index, &[("app", "web")]).is_empty());
        assert!(selected(&index, &[("app", "d")]).is_empty());
        // A new version with other labels leaves nothing behind under the old ones.
        index.upsert_workload(workload("b", &[("app", "b"), ("tier", "db")]));
        assert_eq!(selected(&index, &[("tier", "web")]), ["a", "c"]);
        assert_eq!(selected(&index, &[("tier", "db")]), ["b"]);
        index.remove_workload(Kind::Deployment, "ns", "a");
        index.remove_workload(Kind::Deployment, "ns", "a");
        assert_eq!(selected(&index, &[("tier", "web")]), ["c"]);
        index.remove_workload(Kind::Deployment, "ns", "c");
        assert!(selected(&index, &[("tier", "web")]).is_empty());
        index.upsert_workload(workload("a", &[("tier", "web")]));
        assert_eq!(selected(&index, &[("tier", "web")]), ["a"]);
        index.clear_kind(Kind::Deployment);
        assert!(selected(&index, &[("tier", "web")]).is_empty());
        assert!(selected(&index, &[("app", "b")]).is_empty());
    }

    #[test]
    fn hpas_targeting_one_workload_come_sorted_by_name() {
        let mut index = Index::new();
        let hpa = |name: &str, target: &str| HpaInfo {
            id: ObjectRef::new(Kind::HorizontalPodAutoscaler, "ns", name),
            target: Some(ObjectRef::new(Kind::Deployment, "ns", target)),
            target_description: format!("Deployment {target}"),
            min_replicas: 1,
            max_replicas: 3,
            exemptions: Exemptions::new(),
        };
        let target = ObjectRef::new(Kind::Deployment, "ns", "web");
        let names = |index: &Index| -> Vec<String> {
            index.hpas_targeting(&target).iter().map(|h| h.id.name.clone()).collect()
        };
        index.upsert_hpa(hpa("z", "web"));
        index.upsert_hpa(hpa("a", "web"));
        index.upsert_hpa(hpa("m", "web"));
        index.upsert_hpa(hpa("a", "web"));
        assert_eq!(names(&index), ["a", "m", "z"]);
        index.upsert_hpa(hpa("m", "other"));
        assert_eq!(names(&index), ["a", "z"]);
        index.remove_hpa("ns", "a");
        index.remove_hpa("ns", "z");
        assert!(names(&index).is_empty());
    }

    fn apiservice(name: &str, service: Option<(&str, &str)>) -> ApiService {
        let mut v = serde_json::json!({"metadata": {"name": name, "annotations": {
                "ha-guard.io/allow-apiservice-unavailable": "known", "other.io/note": "x"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"group": "g.io", "version": "v1"}});
        if let Some((ns, svc)) = service {
            v["spec"]["service"] = serde_json::json!({"namespace": ns, "name": svc});
        }
        serde_json::from_value(v).expect("an APIService")
    }

    /// APIServices are found by the Service that serves them; local ones are not kept, and what is
    /// kept is cut to what the rule reads.
    #[test]
    fn apiservices_follow_upserts_and_removals_by_their_service() {
        let mut index = Index::new();
        let names = |v: Vec<Arc<ApiService>>| v.iter().map(|a| a.metadata.name.clone().unwrap()).collect::<Vec<_>>();
        index.insert_projection(Projection::ApiService(Arc::new(apiservice("v1.b", Some(("k", "svc"))).slim())));
        index.upsert_apiservice(apiservice("v1.a", Some(("k", "svc"))).slim());
        index.upsert_apiservice(apiservice("v1.c", Some(("k", "other"))).slim());
        index.upsert_apiservice(apiservice("v1.apps", None).slim());
        assert_eq!(names(index.apiservices_calling("k", "svc")), ["v1.a", "v1.b"]);
        assert_eq!(index.apiservice_services_in("k"), ["other", "svc"]);
        assert!(index.apiservice_services_in("kk").is_empty() && index.apiservices_calling("k", "s").is_empty());
        assert_eq!(index.counts().get(&Kind::ApiService), Some(&3), "the local APIService is not kept");
        let kept = &index.apiservices_calling("k", "other")[0];
        assert!(kept.metadata.managed_fields.is_none(), "{kept:?}");
        let annotations = kept.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.keys().collect::<Vec<_>>(), ["ha-guard.io/allow-apiservice-unavailable"]);
        // Moved to another Service, then made local: found where it is now, then not at all.
        index.upsert_apiservice(apiservice("v1.a", Some(("k2", "svc"))).slim());
        assert_eq!(names(index.apiservices_calling("k", "svc")), ["v1.b"]);
        assert_eq!(names(index.apiservices_calling("k2", "svc")), ["v1.a"]);
        index.upsert_apiservice(apiservice("v1.a", None).slim());
        assert!(index.apiservices_calling("k2", "svc").is_empty());
        index.remove_apiservice("v1.b");
        assert_eq!(index.apiservice_services_in("k"), ["other"]);
        index.clear_kind(Kind::ApiService);
        assert!(index.apiservice_services_in("k").is_empty());
    }

    fn webhooks(kind: &str, name: &str, services: &[(&str, &str)]) -> Arc<WebhookConfigInfo> {
        let hooks: String = services
            .iter()
            .enumerate()
            .map(|(i, (ns, svc))| {
                let policy = if *svc == "lenient" { "Ignore" } else { "Fail" };
                format!("- name: h{i}\n  failurePolicy: {policy}\n  clientConfig:\n    service: {{namespace: {ns}, name: {svc}}}\n")
            })
            .collect();
        let yaml = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}\nwebhooks:\n{hooks}"
        );
        match crate::core::testing::subject(&yaml) {
            Subject::Webhooks(c) => Arc::new(WebhookConfigInfo::of(&c)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn webhook_backends_follow_upserts_and_removals() {
        const V: Kind = Kind::ValidatingWebhookConfiguration;
        const M: Kind = Kind::MutatingWebhookConfiguration;
        let names =
            |cs: Vec<Arc<WebhookConfigInfo>>| cs.iter().map(|c| (c.id.kind, c.id.name.clone())).collect::<Vec<_>>();
        let mut index = Index::new();
        index.upsert_webhook_config(webhooks(
            "ValidatingWebhookConfiguration",
            "kueue",
            &[("k", "svc"), ("k", "svc"), ("k", "other")],
        ));
        index.upsert_webhook_config(webhooks("MutatingWebhookConfiguration", "kueue", &[("k", "svc")]));
        index.upsert_webhook_config(webhooks("ValidatingWebhookConfiguration", "soft", &[("k", "lenient")]));
        assert_eq!(names(index.webhooks_calling("k", "svc")), [(V, "kueue".to_string()), (M, "kueue".to_string())]);
        assert_eq!(index.webhook_services_in("k"), ["other", "svc"], "a fail-open webhook's Service is not a backend");
        assert!(index.webhooks_calling("k", "lenient").is_empty());
        assert!(index.webhook_services_in("elsewhere").is_empty());
        // A new version that calls another Service leaves nothing behind under the old one.
        index.upsert_webhook_config(webhooks("ValidatingWebhookConfiguration", "kueue", &[("k2", "svc")]));
        assert_eq!(names(index.webhooks_calling("k", "svc")), [(M, "kueue".to_string())]);
        assert_eq!(index.webhook_services_in("k"), ["svc"]);
        assert_eq!(index.webhook_services_in("k2"), ["svc"]);
        index.remove_webhook_config(M, "kueue");
        assert!(index.webhook_services_in("k").is_empty());
        assert_eq!(index.counts().get(&V), Some(&2));
        index.clear_kind(V);
        assert!(index.webhook_services_in("k2").is_empty());
        assert_eq!(index.counts().get(&V), None);
        assert!(index.webhook_config(V, "soft").is_none());
    }

    /// A borrowed `(kind, name)` finds exactly the entry its owned key would, in both kinds of map
    /// (`Borrow` requires the same hash and order), and nothing under another kind or name.
    #[test]
    fn borrowed_keys_find_what_owned_keys_find() {
        let kinds = [Kind::Deployment, Kind::StatefulSet, Kind::HorizontalPodAutoscaler];
        let names: Vec<String> = (0..300).map(|i| format!("app-{i}")).chain(["".into(), "é".into()]).collect();
        let mut hashed: HashMap<(Kind, String), usize> = HashMap::default();
        let mut ordered: BTreeMap<(Kind, String), usize> = BTreeMap::new();
        for (i, (kind, name)) in kinds.iter().flat_map(|k| names.iter().map(move |n| (*k, n))).enumerate() {
            if i % 3 == 2 {
                continue; // some absent
            }
            hashed.insert((kind, name.clone()), i);
            ordered.insert((kind, name.clone()), i);
        }
        for kind in kinds.iter().copied().chain([Kind::ScaledObject]) {
            for name in names.iter().map(String::as_str).chain(["app-", "app-3000"]) {
                let owned = (kind, name.to_string());
                assert_eq!(hashed.get(&key(kind, name) as &dyn KindName), hashed.get(&owned), "{kind:?} {name}");
                assert_eq!(ordered.get(&key(kind, name) as &dyn KindName), ordered.get(&owned), "{kind:?} {name}");
            }
        }
    }

    #[test]
    fn autoscalers_of_both_kinds_are_kept_and_cleared_apart() {
        let mut index = Index::new();
        let autoscaler = |kind: Kind, name: &str| HpaInfo {
            id: ObjectRef::new(kind, "ns", name),
            target: Some(ObjectRef::new(Kind::Deployment, "ns", "web")),
            target_description: "Deployment web".into(),
            min_replicas: 1,
            max_replicas: 3,
            exemptions: Exemptions::new(),
        };
        index.upsert_hpa(autoscaler(Kind::ScaledObject, "web"));
        index.upsert_hpa(autoscaler(Kind::HorizontalPodAutoscaler, "web"));
        let target = ObjectRef::new(Kind::Deployment, "ns", "web");
        let kinds = |index: &Index| index.hpas_targeting(&target).iter().map(|h| h.id.kind).collect::<Vec<_>>();
        assert_eq!(kinds(&index), [Kind::HorizontalPodAutoscaler, Kind::ScaledObject], "same name, both kept, sorted");
        assert!(index.hpa("ns", "web").is_some() && index.autoscaler(Kind::ScaledObject, "ns", "web").is_some());
        index.clear_kind(Kind::HorizontalPodAutoscaler);
        assert_eq!(kinds(&index), [Kind::ScaledObject]);
        assert_eq!(index.counts().get(&Kind::ScaledObject), Some(&1));
        index.remove_autoscaler(Kind::ScaledObject, "ns", "web");
        assert!(kinds(&index).is_empty());
    }
}

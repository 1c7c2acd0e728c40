//! Reading the cluster: every kind the live view watches, plus Pods (and the ReplicaSets that say
//! which Deployment a pod belongs to), with paged lists (`limit` + `continue`, as `kubectl get`
//! reads large collections), all kinds at once, each page turned into engine objects as it
//! arrives so that no kind is ever held whole as JSON.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::Client;
use kube::api::ListParams;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::progress::Progress;
use crate::core::model::live_pod::{LivePod, OwnerReference, controller_of};
use crate::core::model::{self, Kind, Object, ObjectRef, Subject, managed};
use crate::core::view::storage::Storage;
use crate::core::view::{Index, PodInfo, PodOwner};

/// Where a kind is listed.
#[derive(Clone, Copy, Debug)]
pub struct Listing {
    pub kind: Kind,
    pub api_version: &'static str,
    pub plural: &'static str,
    /// A custom resource the cluster may not serve: a 404 means none.
    pub optional: bool,
}

/// The kinds the live view watches (`live::KINDS`, with [`AUDIT_ONLY`]'s after them; a test holds
/// the lists together).
pub const LISTINGS: [Listing; 11] = [
    Listing { kind: Kind::Deployment, api_version: "apps/v1", plural: "deployments", optional: false },
    Listing { kind: Kind::StatefulSet, api_version: "apps/v1", plural: "statefulsets", optional: false },
    Listing {
        kind: Kind::PodDisruptionBudget,
        api_version: "policy/v1",
        plural: "poddisruptionbudgets",
        optional: false,
    },
    Listing {
        kind: Kind::HorizontalPodAutoscaler,
        api_version: "autoscaling/v2",
        plural: "horizontalpodautoscalers",
        optional: false,
    },
    Listing { kind: Kind::PersistentVolumeClaim, api_version: "v1", plural: "persistentvolumeclaims", optional: false },
    Listing { kind: Kind::Node, api_version: "v1", plural: "nodes", optional: false },
    Listing { kind: Kind::Namespace, api_version: "v1", plural: "namespaces", optional: false },
    Listing { kind: Kind::Service, api_version: "v1", plural: "services", optional: false },
    Listing {
        kind: Kind::ValidatingWebhookConfiguration,
        api_version: "admissionregistration.k8s.io/v1",
        plural: "validatingwebhookconfigurations",
        optional: false,
    },
    Listing {
        kind: Kind::MutatingWebhookConfiguration,
        api_version: "admissionregistration.k8s.io/v1",
        plural: "mutatingwebhookconfigurations",
        optional: false,
    },
    Listing { kind: Kind::ScaledObject, api_version: "keda.sh/v1alpha1", plural: "scaledobjects", optional: true },
];

/// Kinds the audit lists and judges apart from the others: APIServices (`apiservice-unavailable`),
/// which the live view watches too. A list of them the apiserver refuses
/// (an identity without the right, a cluster that does not serve the API) leaves them not judged,
/// said as such, and fails nothing else.
pub const AUDIT_ONLY: [Listing; 1] = [Listing {
    kind: Kind::ApiService,
    api_version: "apiregistration.k8s.io/v1",
    plural: "apiservices",
    optional: true,
}];

/// `/api/v1` or `/apis/GROUP/VERSION`.
fn base(api_version: &str) -> String {
    if api_version.contains('/') { format!("/apis/{api_version}") } else { format!("/api/{api_version}") }
}

/// The collection's path: in `namespace` when given and the kind has namespaces.
pub fn collection(api_version: &str, plural: &str, namespaced: bool, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if namespaced => format!("{}/namespaces/{ns}/{plural}", base(api_version)),
        _ => format!("{}/{plural}", base(api_version)),
    }
}

/// An object's API path without the leading `/` (`apis/apps/v1/namespaces/shop/deployments/web`):
/// where findings on a cluster object say they are, in every format (see `audit`'s module doc).
pub fn object_path(listing: &Listing, namespace: &str, name: &str) -> String {
    let ns = (!listing.kind.is_cluster_scoped()).then_some(namespace);
    let path = format!("{}/{name}", collection(listing.api_version, listing.plural, ns.is_some(), ns));
    path.trim_start_matches('/').to_string()
}

/// The path of a subject's object.
pub fn subject_path(id: &ObjectRef) -> String {
    match LISTINGS.iter().chain(AUDIT_ONLY.iter()).find(|l| l.kind == id.kind) {
        Some(listing) => object_path(listing, &id.namespace, &id.name),
        // A pod is read with the pods, not listed as a kind.
        None if id.kind == Kind::Pod => format!("api/v1/namespaces/{}/pods/{}", id.namespace, id.name),
        None => id.to_string(),
    }
}

/// One page of a list.
#[derive(Deserialize)]
struct Page<T> {
    #[serde(default)]
    metadata: ListMeta,
    /// `null` in an empty metadata-only list.
    #[serde(default = "Option::default")]
    items: Option<Vec<T>>,
}

/// What is read, and how.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Only this namespace (cluster-scoped kinds are read whole).
    pub namespace: Option<String>,
    /// A label selector: which subjects are judged (the view keeps every object).
    pub selector: Option<String>,
    /// Items per list request.
    pub page: u32,
    /// Keep the workloads' pod templates in the view (a drain places replacements from them).
    pub templates: bool,
    /// Read the PersistentVolumes, StorageClasses and CSINodes (a drain's volume filters).
    pub storage: bool,
}

/// A subject to judge and where it is.
pub struct Listed {
    pub subject: Subject,
    pub path: String,
}

/// The cluster as read: the view (complete, nodes and pods known), the subjects to judge, and what
/// could not be read.
pub struct Cluster {
    pub index: Index,
    pub subjects: Vec<Listed>,
    /// Objects that did not decode: their path and why (reported as not checked).
    pub unreadable: Vec<(String, String)>,
    /// With a label selector: the subjects it selects.
    pub selected: Option<HashSet<ObjectRef>>,
    pub namespaces: usize,
    pub pods: usize,
    /// Why the storage a drain reads (PersistentVolumes, StorageClasses, CSINodes) could not be
    /// read: the drain is simulated without its volume filters.
    pub storage_unread: Option<String>,
}

/// One collection to list: where, which labels (none: all), whether metadata only, and what the
/// progress line calls it.
struct Query<'a> {
    path: &'a str,
    selector: Option<&'a str>,
    metadata_only: bool,
    what: &'static str,
}

/// Lists every page of `q.path`, handing each page's items to `each`; the total is counted in
/// `progress` under `q.what`. A continue token that expired mid-list (410: the apiserver keeps a
/// paged list's snapshot for a few minutes) starts the list over as one unpaged list, as
/// client-go's pager does (`FullListIfExpired`): `each` is then told (`true`) that the items it
/// is handed start over, and what it kept of the earlier pages is to be dropped.
async fn list<T: DeserializeOwned>(
    client: &Client,
    q: Query<'_>,
    options: &ReadOptions,
    progress: &Progress,
    mut each: impl FnMut(Vec<T>, bool),
) -> Result<(), kube::Error> {
    let Query { path, selector, metadata_only, what } = q;
    let mut lp = ListParams::default().limit(options.page.max(1));
    if let Some(s) = selector {
        lp = lp.labels(s);
    }
    let mut again = false;
    loop {
        let request = kube::core::Request::new(path);
        let request = if metadata_only { request.list_metadata(&lp) } else { request.list(&lp) };
        let page: Page<T> = match client.request(request.map_err(kube::Error::BuildRequest)?).await {
            Err(kube::Error::Api(s)) if s.code == 410 && lp.continue_token.is_some() && !again => {
                tracing::info!(path, "a paged list's continue token expired: listing it again whole");
                lp = ListParams { limit: None, continue_token: None, ..lp };
                again = true;
                continue;
            }
            page => page?,
        };
        let items = page.items.unwrap_or_default();
        progress.add(what, items.len(), page.metadata.remaining_item_count);
        each(items, std::mem::take(&mut again));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => {
                if lp.continue_token.is_none() {
                    test_pause(path, &token).await;
                }
                lp = lp.continue_token(&token)
            }
            _ => return Ok(()),
        }
    }
}

/// Test-only, hidden: with `HA_GUARD_TEST_PAUSE_LISTS=FILE`, a paged list stops after its first
/// page while FILE exists, having appended its path and continue token (`PATH TOKEN`) to
/// `FILE.reached`. tests/e2e_expired_continue.rs holds the audit there until the apiserver's
/// compaction has made the token expire, so that the 410 happens on a real apiserver. Never set
/// outside that test; unset, nothing happens.
const TEST_PAUSE: &str = "HA_GUARD_TEST_PAUSE_LISTS";

async fn test_pause(path: &str, token: &str) {
    let Some(file) = std::env::var_os(TEST_PAUSE).map(std::path::PathBuf::from) else { return };
    if !file.exists() {
        return;
    }
    let mut reached = file.clone().into_os_string();
    reached.push(".reached");
    let line = format!("{path} {token}\n");
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&reached)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
    if let Err(e) = appended {
        tracing::warn!(error = %e, "{TEST_PAUSE}: cannot write {}", std::path::Path::new(&reached).display());
        return;
    }
    while file.exists() {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// What [`failed`] adds to a list the apiserver refused for lack of rights.
const FORBIDDEN: &str = " (the audit needs get and list on it: see README's Day 2 section)";

/// Whether a [`read`] failed because a list was forbidden (403): a caller may read less.
pub fn is_forbidden(message: &str) -> bool {
    message.contains(FORBIDDEN)
}

/// What [`failed`] adds to a list the apiserver does not serve (404).
const NOT_FOUND: &str = " (the cluster does not serve it)";

/// Why a list failed, for the user: which collection, and what the apiserver said.
fn failed(path: &str, e: kube::Error) -> String {
    let hint = match &e {
        kube::Error::Api(s) if s.code == 403 => FORBIDDEN,
        kube::Error::Api(s) if s.code == 404 => NOT_FOUND,
        kube::Error::Api(s) if s.code == 410 => {
            " (the list took longer than the apiserver keeps a paged list consistent: run the audit again, or with a \
             larger --chunk-size)"
        }
        _ => "",
    };
    format!("cannot list {path}: {e}{hint}")
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// A listed item as JSON, `metadata.managedFields` cut to the one fact a rule reads of them: which
/// managers own `spec.replicas` by server-side apply (`hpa-replicas-conflict`, for workloads that
/// Argo CD, Flux or Helm 4 apply; [`managed::kept_json`]). The rest, a tree per writer of every
/// field it set, is often half of a listed object; it is dropped as each item of a page is
/// parsed, so a page in memory holds none of it.
struct Stripped(Value);

impl<'de> Deserialize<'de> for Stripped {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(deserializer)?;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut)
            && let Some(entries) = meta.remove("managedFields")
            && let Some(kept) = managed::kept_json(&entries)
        {
            meta.insert("managedFields".into(), kept);
        }
        Ok(Stripped(value))
    }
}

/// One listed object, decoded as `check` decodes a manifest (the same `model::decode`, so the
/// same defaults and the same findings as `check` on a `kubectl get -o yaml` of it).
fn decode(listing: &Listing, Stripped(mut value): Stripped) -> Result<(Object, String), (String, String)> {
    let meta = |key: &str| value.pointer(&format!("/metadata/{key}")).and_then(Value::as_str).unwrap_or("").to_string();
    let (namespace, name) = (meta("namespace"), meta("name"));
    let path = object_path(listing, &namespace, &name);
    // Items of a list carry no apiVersion and kind of their own.
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), listing.api_version.into());
        map.insert("kind".into(), listing.kind.as_str().into());
    }
    match model::decode(&value, &namespace) {
        Ok(Some(object)) => Ok((object, path)),
        Ok(None) => Err((path, format!("{} is not a kind ha-guard reads", listing.kind))),
        Err(e) => Err((path, format!("{e}: not checked"))),
    }
}

/// The objects of every listing.
async fn read_objects(
    client: &Client,
    options: &ReadOptions,
    progress: &Progress,
) -> Result<(Vec<(Object, String)>, Vec<(String, String)>), String> {
    let (watched, audit_only) = futures::future::join(
        read_listings(client, LISTINGS.iter(), options, progress),
        read_listings(client, AUDIT_ONLY.iter(), options, progress),
    )
    .await;
    let (mut objects, mut unreadable) = watched?;
    match audit_only {
        Ok((mut o, mut u)) => {
            objects.append(&mut o);
            unreadable.append(&mut u);
        }
        // Not judged, and said: the rest of the audit stands.
        Err(e) => unreadable.push((
            AUDIT_ONLY.iter().map(|l| collection(l.api_version, l.plural, false, None)).collect::<Vec<_>>().join(", "),
            format!("{e}: APIServices were not judged (apiservice-unavailable)"),
        )),
    }
    Ok((objects, unreadable))
}

/// The objects of `listings` (in `options.namespace` for the namespaced ones), those that do not
/// decode apart: their path and why.
async fn read_listings(
    client: &Client,
    listings: impl Iterator<Item = &'static Listing>,
    options: &ReadOptions,
    progress: &Progress,
) -> Result<(Vec<(Object, String)>, Vec<(String, String)>), String> {
    let lists = listings.map(|listing| async move {
        let path = collection(
            listing.api_version,
            listing.plural,
            !listing.kind.is_cluster_scoped(),
            options.namespace.as_deref(),
        );
        let mut objects = Vec::new();
        let mut unreadable = Vec::new();
        let listed = list::<Stripped>(
            client,
            Query { path: &path, selector: None, metadata_only: false, what: "objects" },
            options,
            progress,
            |items, again| {
                if again {
                    objects.clear();
                    unreadable.clear();
                }
                for item in items {
                    match decode(listing, item) {
                        Ok(o) => objects.push(o),
                        Err(e) => unreadable.push(e),
                    }
                }
            },
        )
        .await;
        match listed {
            Ok(()) => Ok((objects, unreadable)),
            Err(e) if listing.optional && is_not_found(&e) => Ok((Vec::new(), Vec::new())),
            Err(e) => Err(failed(&path, e)),
        }
    });
    let mut objects = Vec::new();
    let mut unreadable = Vec::new();
    for (mut o, mut u) in futures::future::try_join_all(lists).await? {
        objects.append(&mut o);
        unreadable.append(&mut u);
    }
    Ok((objects, unreadable))
}

/// A ReplicaSet's metadata: which Deployment owns it.
#[derive(Deserialize)]
struct ReplicaSetMeta {
    metadata: OwnedMeta,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct OwnedMeta {
    name: String,
    namespace: String,
    owner_references: Vec<OwnerReference>,
}

/// (namespace, ReplicaSet) → its Deployment, from the ReplicaSets' metadata alone.
async fn read_replica_sets(
    client: &Client,
    options: &ReadOptions,
    progress: &Progress,
) -> Result<HashMap<(String, String), Arc<str>>, String> {
    let path = collection("apps/v1", "replicasets", true, options.namespace.as_deref());
    let mut owners = HashMap::new();
    list::<ReplicaSetMeta>(
        client,
        Query { path: &path, selector: None, metadata_only: true, what: "replicasets" },
        options,
        progress,
        // Keyed by name: a list started over writes the same entries again.
        |items, _| {
            for rs in items {
                let m = rs.metadata;
                if let Some(owner) = controller_of(&m.owner_references).filter(|o| o.is("apps", "Deployment")) {
                    owners.insert((m.namespace, m.name), Arc::from(owner.name.as_str()));
                }
            }
        },
    )
    .await
    .map_err(|e| failed(&path, e))?;
    Ok(owners)
}

/// A pod read, its owner resolved once the ReplicaSets are known.
struct ReadPod {
    namespace: String,
    pod: PodInfo,
    /// Its controller where that is a ReplicaSet (of `apps`).
    replica_set: Option<OwnerReference>,
}

async fn read_pods(client: &Client, options: &ReadOptions, progress: &Progress) -> Result<Vec<ReadPod>, String> {
    let path = collection("v1", "pods", true, options.namespace.as_deref());
    let mut pods = Vec::new();
    list::<LivePod>(
        client,
        Query { path: &path, selector: None, metadata_only: false, what: "pods" },
        options,
        progress,
        |items, again| {
            if again {
                pods.clear();
            }
            for p in items {
                let controller = controller_of(&p.metadata.owner_references);
                let replica_set = controller.filter(|c| c.is("apps", "ReplicaSet")).cloned();
                // A ReplicaSet's pods are resolved below; meanwhile they count as "another controller".
                let owner = PodOwner::resolve(controller, p.mirror(), |_| None);
                pods.push(ReadPod {
                    namespace: p.metadata.namespace.clone(),
                    pod: PodInfo::of(&p, owner),
                    replica_set,
                });
            }
        },
    )
    .await
    .map_err(|e| failed(&path, e))?;
    Ok(pods)
}

/// The PersistentVolumes, StorageClasses and CSINodes (all cluster-scoped), for a drain's volume
/// filters; a CSINode list the cluster does not serve is none.
async fn read_storage(client: &Client, options: &ReadOptions, progress: &Progress) -> Result<Storage, String> {
    use k8s_openapi::api::core::v1::PersistentVolume;
    use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
    let storage = std::sync::Mutex::new(Storage::default());
    let keep = || storage.lock().unwrap_or_else(|p| p.into_inner());
    let (volumes, classes, csi_nodes) =
        ("/api/v1/persistentvolumes", "/apis/storage.k8s.io/v1/storageclasses", "/apis/storage.k8s.io/v1/csinodes");
    let q = |path, what| Query { path, selector: None, metadata_only: false, what };
    // Each keyed by name: a list started over writes the same entries again.
    futures::future::try_join3(
        async {
            list::<PersistentVolume>(client, q(volumes, "persistentvolumes"), options, progress, |items, _| {
                items.iter().for_each(|pv| keep().insert_volume(pv))
            })
            .await
            .map_err(|e| failed(volumes, e))
        },
        async {
            list::<StorageClass>(client, q(classes, "storageclasses"), options, progress, |items, _| {
                items.iter().for_each(|c| keep().insert_class(c))
            })
            .await
            .map_err(|e| failed(classes, e))
        },
        async {
            list::<CSINode>(client, q(csi_nodes, "csinodes"), options, progress, |items, _| {
                items.iter().for_each(|n| keep().insert_csi_node(n))
            })
            .await
            .map_err(|e| failed(csi_nodes, e))
        },
    )
    .await?;
    Ok(storage.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// The objects the label selector selects (metadata only), among the kinds judged.
async fn read_selected(
    client: &Client,
    options: &ReadOptions,
    selector: &str,
    progress: &Progress,
) -> Result<HashSet<ObjectRef>, String> {
    let lists = LISTINGS.iter().chain(AUDIT_ONLY.iter()).filter(|l| judged(l.kind)).map(|listing| async move {
        let path = collection(
            listing.api_version,
            listing.plural,
            !listing.kind.is_cluster_scoped(),
            options.namespace.as_deref(),
        );
        let mut found = Vec::new();
        let listed = list::<ReplicaSetMeta>(
            client,
            Query { path: &path, selector: Some(selector), metadata_only: true, what: "selected" },
            options,
            progress,
            |items, again| {
                if again {
                    found.clear();
                }
                found.extend(
                    items.into_iter().map(|o| ObjectRef::new(listing.kind, o.metadata.namespace, o.metadata.name)),
                )
            },
        )
        .await;
        match listed {
            Ok(()) => Ok(found),
            Err(e) if listing.optional && is_not_found(&e) => Ok(Vec::new()),
            // An audit-only kind it may not list: not selected (read_objects says it is not judged).
            Err(_) if AUDIT_ONLY.iter().any(|l| l.kind == listing.kind) => Ok(Vec::new()),
            Err(e) => Err(failed(&path, e)),
        }
    });
    Ok(futures::future::try_join_all(lists).await?.into_iter().flatten().collect())
}

/// What [`read_scope`] read of one scope.
#[derive(Default)]
pub struct ScopeRead {
    /// The objects to judge, by kind and name.
    pub subjects: Vec<Listed>,
    /// The objects that do not decode: their path and why.
    pub unreadable: Vec<(String, String)>,
    /// The kinds the apiserver refused to list (403: RBAC; 404: a kind no longer served), and why:
    /// the scope is judged without them, and its report says so.
    pub refused: Vec<(Kind, String)>,
}

/// The objects to judge of one scope: a namespace's (`Some`), or the cluster-scoped ones (`None`),
/// each kind listed in pages as `read` lists. A kind the apiserver refuses (403, 404) is left out
/// and named; any other failure fails the scope. The background audit judges them against its live
/// view.
pub async fn read_scope(
    client: &Client,
    namespace: Option<&str>,
    page: u32,
    unserved: &[Kind],
) -> Result<ScopeRead, String> {
    let options = ReadOptions { namespace: namespace.map(str::to_string), page, ..Default::default() };
    let in_scope = move |l: &&Listing| {
        judged(l.kind) && l.kind.is_cluster_scoped() == namespace.is_none() && !unserved.contains(&l.kind)
    };
    let progress = Progress::new(false);
    let reads = LISTINGS.iter().chain(AUDIT_ONLY.iter()).filter(in_scope).map(|listing| {
        let (options, progress) = (&options, &progress);
        async move { (listing, read_listings(client, std::iter::once(listing), options, progress).await) }
    });
    let mut read = ScopeRead::default();
    for (listing, result) in futures::future::join_all(reads).await {
        match result {
            Ok((objects, mut unreadable)) => {
                read.unreadable.append(&mut unreadable);
                read.subjects.extend(objects.into_iter().filter_map(|(object, path)| match object {
                    Object::Subject(subject) => Some(Listed { subject, path }),
                    _ => None,
                }));
            }
            Err(e) if is_forbidden(&e) || e.contains(NOT_FOUND) => read.refused.push((listing.kind, e)),
            Err(e) => return Err(e),
        }
    }
    read.subjects.sort_by(|a, b| {
        let (x, y) = (a.subject.id(), b.subject.id());
        (x.kind, &x.name).cmp(&(y.kind, &y.name))
    });
    Ok(read)
}

/// Kinds whose objects are judged (the others only inform the view).
fn judged(kind: Kind) -> bool {
    !matches!(kind, Kind::PersistentVolumeClaim | Kind::Node | Kind::Namespace)
}

/// Reads the cluster (as `options` says) into a complete view and the subjects to judge.
pub async fn read(client: &Client, options: &ReadOptions, progress: &Progress) -> Result<Cluster, String> {
    let selected = async {
        match &options.selector {
            Some(s) => read_selected(client, options, s, progress).await.map(Some),
            None => Ok(None),
        }
    };
    let storage = async {
        match options.storage {
            true => match read_storage(client, options, progress).await {
                Ok(storage) => Ok((Some(storage), None)),
                Err(e) if is_forbidden(&e) => Ok((None, Some(e))),
                Err(e) => Err(e),
            },
            false => Ok((None, None)),
        }
    };
    let ((objects, unreadable), replica_sets, pods, selected, (storage, storage_unread)) = futures::future::try_join5(
        read_objects(client, options, progress),
        read_replica_sets(client, options, progress),
        read_pods(client, options, progress),
        selected,
        storage,
    )
    .await?;
    let mut index = Index::new();
    // The cluster is the whole truth for the namespaces read: the rules that assert absence run,
    // and the nodes are known.
    index.set_complete(true);
    index.set_knows_nodes(true);
    index.set_keeps_templates(options.templates);
    if let Some(storage) = storage {
        index.set_storage(storage);
    }
    let mut subjects = Vec::new();
    let mut namespaces: BTreeMap<String, ()> = BTreeMap::new();
    for (object, path) in objects {
        index.insert_object(&object);
        if let Object::Subject(subject) = object {
            let id = subject.id();
            // With --namespace, as with kubectl's -n, only that namespace's objects are judged: the
            // cluster-scoped ones (webhook configurations) inform the view, judged by a whole audit.
            if options.namespace.as_ref().is_some_and(|ns| *ns != id.namespace) {
                continue;
            }
            if !id.namespace.is_empty() {
                namespaces.insert(id.namespace.clone(), ());
            }
            subjects.push(Listed { subject, path });
        }
    }
    let pod_count = pods.len();
    for ReadPod { namespace, mut pod, replica_set } in pods {
        if let Some(rs) = replica_set {
            pod.owner = PodOwner::resolve(Some(&rs), false, |rs| {
                replica_sets.get(&(namespace.clone(), rs.to_string())).cloned()
            });
        }
        namespaces.insert(namespace.clone(), ());
        index.upsert_pod(&namespace, pod);
    }
    // In namespace order, then kind and name: the report reads namespace by namespace.
    subjects.sort_by(|a, b| {
        let (x, y) = (a.subject.id(), b.subject.id());
        (&x.namespace, x.kind, &x.name).cmp(&(&y.namespace, y.kind, &y.name))
    });
    let namespaces = namespaces.len();
    Ok(Cluster { index, subjects, unreadable, selected, namespaces, pods: pod_count, storage_unread })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A kube client answered by `answer` (request path and query → status and JSON body), every
    /// request's path and query kept in order.
    fn answered_by(
        answer: impl Fn(&str) -> (u16, Value) + Send + Sync + 'static,
    ) -> (Client, Arc<std::sync::Mutex<Vec<String>>>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let answer = Arc::new(answer);
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let uri = request.uri().to_string();
            log.lock().unwrap().push(uri.clone());
            let (status, body) = answer(&uri);
            async move {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body.to_string().into_bytes()))
                        .unwrap(),
                )
            }
        });
        (Client::new(service, "default"), seen)
    }

    fn page(names: &[&str], continue_: &str) -> Value {
        let items: Vec<Value> = names.iter().map(|n| json!({"metadata": {"name": n, "namespace": "shop"}})).collect();
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"continue": continue_}, "items": items})
    }

    #[tokio::test]
    async fn a_paged_list_whose_token_expired_is_listed_again_whole() {
        let (client, seen) = answered_by(|uri| {
            if uri.contains("continue=one") {
                let gone = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                    "message": "The provided continue parameter is too old", "code": 410});
                (410, gone)
            } else if uri.contains("limit=") {
                (200, page(&["a", "b"], "one"))
            } else {
                (200, page(&["a", "b", "c"], ""))
            }
        });
        let options = ReadOptions { page: 2, ..Default::default() };
        let q = Query { path: "/api/v1/namespaces/shop/pods", selector: None, metadata_only: true, what: "pods" };
        let mut names = Vec::new();
        let mut started_over = 0;
        list::<ReplicaSetMeta>(&client, q, &options, &Progress::new(false), |items, again| {
            if again {
                started_over += 1;
                names.clear();
            }
            names.extend(items.into_iter().map(|i| i.metadata.name));
        })
        .await
        .expect("the list completes");
        assert_eq!(names, ["a", "b", "c"], "every object once");
        assert_eq!(started_over, 1);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen[1].contains("continue=one"), "{seen:?}");
        assert!(!seen[2].contains("limit=") && !seen[2].contains("continue="), "listed whole: {seen:?}");
    }

    #[tokio::test]
    async fn a_first_page_gone_is_an_error_not_a_loop() {
        let (client, seen) = answered_by(|_| {
            (
                410,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Gone", "message": "gone", "code": 410}),
            )
        });
        let options = ReadOptions { page: 2, ..Default::default() };
        let q = Query { path: "/api/v1/namespaces/shop/pods", selector: None, metadata_only: true, what: "pods" };
        let listed = list::<ReplicaSetMeta>(&client, q, &options, &Progress::new(false), |_, _| {}).await;
        assert!(matches!(listed, Err(kube::Error::Api(s)) if s.code == 410));
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[test]
    fn the_audit_reads_every_kind_the_live_view_watches() {
        let listed: Vec<Kind> = LISTINGS.iter().chain(AUDIT_ONLY.iter()).map(|l| l.kind).collect();
        assert_eq!(listed, crate::live::KINDS);
    }

    /// Listed objects carry managedFields (a tree per writer of every field it set); kept for every
    /// object of a cluster they were most of the audit's memory. Kept: who owns spec.replicas by
    /// server-side apply, that one path, nothing else.
    #[test]
    fn a_listed_object_keeps_of_its_managed_fields_only_who_applies_its_replicas() {
        let deployments = &LISTINGS[0];
        let item = |managed: Value| {
            serde_json::json!({
                "metadata": {"name": "web", "namespace": "shop", "uid": "u-1", "labels": {"app": "web"},
                    "managedFields": managed},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}
            })
        };
        let decoded = |managed: Value| {
            let (object, path) =
                decode(deployments, serde_json::from_value(item(managed)).expect("JSON")).expect("a Deployment");
            assert_eq!(path, "apis/apps/v1/namespaces/shop/deployments/web");
            let Object::Subject(Subject::Workload(w)) = object else { panic!("a Deployment is a workload") };
            w
        };
        let w = decoded(serde_json::json!([
            {"manager": "kustomize-controller", "operation": "Apply", "fieldsType": "FieldsV1", "time": "2026-01-01T00:00:00Z",
             "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {}}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}}
        ]));
        assert_eq!(w.meta.managed_fields, Some(vec![managed::kept_entry("kustomize-controller")]));
        assert_eq!(
            w.replicas_source,
            crate::core::model::ReplicasSource::Applied { replicas: 2, manager: "kustomize-controller".into() }
        );
        assert_eq!(w.meta.name.as_deref(), Some("web"));
        assert!(w.meta.labels.as_ref().is_some_and(|l| l["app"] == "web"), "the rest of metadata is kept");
        // An Apply that does not set replicas, a scale write: nothing is kept.
        let w = decoded(serde_json::json!([
            {"manager": "argocd-controller", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "scale",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}
        ]));
        assert_eq!(w.meta.managed_fields, None);
        assert_eq!(w.replicas_source, crate::core::model::ReplicasSource::Unset);
    }

    #[test]
    fn paths_are_the_api_paths() {
        let deployments = &LISTINGS[0];
        assert_eq!(object_path(deployments, "shop", "web"), "apis/apps/v1/namespaces/shop/deployments/web");
        let nodes = LISTINGS.iter().find(|l| l.kind == Kind::Node).unwrap();
        assert_eq!(object_path(nodes, "", "n1"), "api/v1/nodes/n1");
        assert_eq!(collection("v1", "pods", true, Some("shop")), "/api/v1/namespaces/shop/pods");
        assert_eq!(collection("v1", "nodes", false, Some("shop")), "/api/v1/nodes");
        assert_eq!(
            subject_path(&ObjectRef::new(Kind::ValidatingWebhookConfiguration, "", "v")),
            "apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/v"
        );
    }

    #[test]
    fn a_listed_item_decodes_as_a_manifest_would() {
        let item = serde_json::json!({"metadata": {"name": "web", "namespace": "shop", "uid": "u"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let (object, path) = decode(&LISTINGS[0], serde_json::from_value(item).expect("JSON")).unwrap();
        assert_eq!(path, "apis/apps/v1/namespaces/shop/deployments/web");
        let Object::Subject(Subject::Workload(w)) = object else { panic!() };
        assert_eq!((w.replicas, w.id().to_string().as_str()), (1, "Deployment shop/web"), "defaulted");
        let bad = serde_json::json!({"metadata": {"name": "x", "namespace": "shop"}, "spec": {"replicas": "three"}});
        let (path, why) = decode(&LISTINGS[0], serde_json::from_value(bad).expect("JSON")).unwrap_err();
        assert_eq!(path, "apis/apps/v1/namespaces/shop/deployments/x");
        assert!(why.contains("spec.replicas") && why.contains("not checked"), "{why}");
    }
}

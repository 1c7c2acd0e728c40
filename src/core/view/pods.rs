//! The view's pods (only `ha-guard audit`'s view holds them): per namespace, by name and by the
//! workload that runs them. Pods outnumber every other kind, so the strings many of them share
//! are kept once: the label set of a ReplicaSet's pods, the node names, the workload names.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use super::projection::{PodInfo, PodOwner};
use crate::core::model::Kind;

type Labels = BTreeMap<String, String>;

/// The pods a relist has listed so far, by namespace (see [`Pods::retain_listed`]).
pub type PodsListed = HashMap<String, HashSet<Arc<str>>>;

/// The pods of one namespace.
#[derive(Default, Debug, Clone)]
struct NamespacePods {
    by_name: HashMap<Arc<str>, Arc<PodInfo>>,
    by_owner: HashMap<(Kind, Arc<str>), Vec<Arc<PodInfo>>>,
    /// Label sets, each kept once for the pods that carry it, with how many do.
    labels: HashMap<Arc<Labels>, usize>,
}

/// Every pod of the view. A copy shares each namespace's pods until one side changes them
/// (the view's snapshots: [`super::Index`]).
#[derive(Default, Debug, Clone)]
pub struct Pods {
    namespaces: HashMap<String, Arc<NamespacePods>>,
    /// Node names, each kept once for the pods on it, with how many there are.
    node_names: HashMap<Arc<str>, usize>,
}

impl Pods {
    /// Adds (or replaces) a pod of `namespace`.
    pub fn upsert(&mut self, namespace: &str, mut pod: PodInfo) {
        self.remove(namespace, &pod.name);
        if let Some(node) = &pod.node {
            pod.node = Some(intern(&mut self.node_names, node.clone()));
        }
        let ns = Arc::make_mut(self.namespaces.entry(namespace.to_string()).or_default());
        pod.labels = intern(&mut ns.labels, pod.labels);
        let owner_key = match &mut pod.owner {
            PodOwner::Workload(kind, name) => {
                let key = (*kind, name.clone());
                if let Some(((_, shared), _)) = ns.by_owner.get_key_value(&key) {
                    *name = shared.clone();
                }
                Some((*kind, name.clone()))
            }
            _ => None,
        };
        let pod = Arc::new(pod);
        if let Some(key) = owner_key {
            ns.by_owner.entry(key).or_default().push(pod.clone());
        }
        ns.by_name.insert(pod.name.clone(), pod);
    }

    pub fn remove(&mut self, namespace: &str, name: &str) {
        let Some(ns) = self.namespaces.get_mut(namespace) else { return };
        if !ns.by_name.contains_key(name) {
            return;
        }
        let ns = Arc::make_mut(ns);
        let Some(old) = ns.by_name.remove(name) else { return };
        if let PodOwner::Workload(kind, owner) = &old.owner {
            let key = (*kind, owner.clone());
            if let Some(pods) = ns.by_owner.get_mut(&key) {
                pods.retain(|p| !Arc::ptr_eq(p, &old));
                if pods.is_empty() {
                    ns.by_owner.remove(&key);
                }
            }
        }
        release(&mut ns.labels, &old.labels);
        if let Some(node) = &old.node {
            release(&mut self.node_names, node);
        }
        if ns.by_name.is_empty() {
            self.namespaces.remove(namespace);
        }
    }

    pub fn clear(&mut self) {
        self.namespaces.clear();
        self.node_names.clear();
    }

    /// Drops the pods a relist did not list again. `listed` holds the names the view keeps
    /// (`PodInfo::name`'s `Arc`), so a relist of every pod costs a pointer per pod, not a copy of
    /// every key.
    pub fn retain_listed(&mut self, listed: &PodsListed) {
        let mut gone = Vec::new();
        for (namespace, pods) in &self.namespaces {
            let kept = listed.get(namespace);
            gone.extend(
                pods.by_name
                    .keys()
                    .filter(|name| !kept.is_some_and(|k| k.contains(*name)))
                    .map(|name| (namespace.clone(), name.clone())),
            );
        }
        for (namespace, name) in gone {
            self.remove(&namespace, &name);
        }
    }

    /// The namespaces with a pod.
    pub fn namespaces(&self) -> impl Iterator<Item = String> + '_ {
        self.namespaces.keys().cloned()
    }

    pub fn len(&self) -> usize {
        self.namespaces.values().map(|ns| ns.by_name.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
    }

    /// The pods `kind`/`name` runs in `namespace`, sorted by name.
    pub fn of(&self, kind: Kind, namespace: &str, name: &str) -> Vec<Arc<PodInfo>> {
        let Some(ns) = self.namespaces.get(namespace) else { return Vec::new() };
        let mut found = ns.by_owner.get(&(kind, Arc::from(name))).cloned().unwrap_or_default();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }

    /// Every pod of `namespace`, sorted by name.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<PodInfo>> {
        let Some(ns) = self.namespaces.get(namespace) else { return Vec::new() };
        let mut found: Vec<_> = ns.by_name.values().cloned().collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found
    }

    /// The pods on `nodes` with their namespace, by node in the order given, then by namespace
    /// and name. A scan of every pod: only a drain simulation asks, once a run.
    pub fn on_nodes(&self, nodes: &[String]) -> Vec<(String, Arc<PodInfo>)> {
        let rank = |node: &str| nodes.iter().position(|n| n == node);
        let mut found: Vec<(usize, String, Arc<PodInfo>)> = self
            .namespaces
            .iter()
            .flat_map(|(namespace, ns)| {
                ns.by_name.values().filter_map(move |p| {
                    let at = rank(p.node.as_deref()?)?;
                    Some((at, namespace.clone(), p.clone()))
                })
            })
            .collect();
        found.sort_by(|a, b| (a.0, &a.1, &a.2.name).cmp(&(b.0, &b.1, &b.2.name)));
        found.into_iter().map(|(_, ns, p)| (ns, p)).collect()
    }
}

/// The kept copy of `value` (added if there is none), counted once more.
fn intern<T: ?Sized + Eq + Hash>(kept: &mut HashMap<Arc<T>, usize>, value: Arc<T>) -> Arc<T> {
    match kept.get_key_value(&value) {
        Some((shared, _)) => {
            let shared = shared.clone();
            *kept.get_mut(&shared).expect("just found") += 1;
            shared
        }
        None => {
            kept.insert(value.clone(), 1);
            value
        }
    }
}

/// Counts `value` once less, and forgets it with the last pod that held it.
fn release<T: ?Sized + Eq + Hash>(kept: &mut HashMap<Arc<T>, usize>, value: &Arc<T>) {
    if let Some(n) = kept.get_mut(value) {
        *n -= 1;
        if *n == 0 {
            kept.remove(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::view::projection::PodPhase;

    fn pod(name: &str, owner: &str, node: &str) -> PodInfo {
        PodInfo {
            name: name.into(),
            owner: PodOwner::Workload(Kind::Deployment, owner.into()),
            node: Some(node.into()),
            labels: Arc::new([("app".to_string(), owner.to_string())].into()),
            unschedulable: None,
            phase: PodPhase::Running,
            ready: true,
            terminating: false,
            tolerates_cordon: false,
            requests: Default::default(),
            ports: Vec::new(),
            anti_affinity: Default::default(),
            claims: Default::default(),
            ephemeral_claims: Default::default(),
            priority: 0,
            preempts: true,
        }
    }

    #[test]
    fn shared_strings_are_kept_once_and_dropped_with_the_last_pod() {
        let mut pods = Pods::default();
        pods.upsert("ns", pod("web-1", "web", "n1"));
        pods.upsert("ns", pod("web-2", "web", "n1"));
        pods.upsert("ns", pod("api-1", "api", "n2"));
        let web = pods.of(Kind::Deployment, "ns", "web");
        assert_eq!(web.iter().map(|p| &*p.name).collect::<Vec<_>>(), ["web-1", "web-2"]);
        assert!(Arc::ptr_eq(&web[0].labels, &web[1].labels), "one label set for both");
        assert!(Arc::ptr_eq(web[0].node.as_ref().unwrap(), web[1].node.as_ref().unwrap()));
        let (PodOwner::Workload(_, a), PodOwner::Workload(_, b)) = (&web[0].owner, &web[1].owner) else { panic!() };
        assert!(Arc::ptr_eq(a, b), "one owner name");
        // Replacing a pod keeps one entry; moving it to another node updates both indexes.
        pods.upsert("ns", pod("web-2", "web", "n2"));
        assert_eq!(pods.len(), 3);
        let on: Vec<_> = pods.on_nodes(&["n2".into(), "n1".into()]).into_iter().map(|(_, p)| p.name.clone()).collect();
        assert_eq!(on.iter().map(|n| &**n).collect::<Vec<_>>(), ["api-1", "web-2", "web-1"], "node order as given");
        pods.remove("ns", "web-1");
        pods.remove("ns", "web-2");
        assert!(pods.of(Kind::Deployment, "ns", "web").is_empty());
        assert_eq!(pods.namespaces["ns"].labels.len(), 1, "web's label set went with its last pod");
        assert_eq!(pods.node_names.len(), 1, "n1 is gone");
        pods.remove("ns", "api-1");
        assert!(pods.is_empty() && pods.node_names.is_empty());
    }

    #[test]
    fn a_relist_keeps_the_pods_it_listed_and_drops_the_others() {
        let mut pods = Pods::default();
        pods.upsert("ns", pod("web-1", "web", "n1"));
        pods.upsert("ns", pod("web-2", "web", "n1"));
        pods.upsert("other", pod("api-1", "api", "n2"));
        let listed: PodsListed = [("ns".to_string(), [Arc::from("web-2")].into())].into();
        pods.retain_listed(&listed);
        assert_eq!(pods.in_namespace("ns").iter().map(|p| &*p.name).collect::<Vec<_>>(), ["web-2"]);
        assert!(pods.in_namespace("other").is_empty(), "a namespace the relist did not list is emptied");
        assert_eq!(pods.node_names.len(), 1, "n2 went with api-1");
        pods.retain_listed(&PodsListed::new());
        assert!(pods.is_empty());
    }
}

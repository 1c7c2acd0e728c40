//! The view's nodes as one list, with the domains of a topology key numbered once per snapshot.
//!
//! Every Deployment or StatefulSet admission counts what the nodes hold per domain of a spread's
//! or an anti-affinity's key ([`super::capacity`]). Reading each node's label map for the key at
//! every admission is most of that cost on a cluster of thousands of nodes, and the answer only
//! changes when the nodes do: a [`NodeTable`] lives as long as the view's nodes are unchanged
//! (the [`Index`](super::Index) keeps one per snapshot) and numbers each key's domains the first
//! time an admission asks, once for all the admissions that read the same snapshot.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::{Arc, Mutex, OnceLock};

use super::projection::NodeInfo;

/// Keys whose domains a table keeps: a request naming others (a hostile one can name 32 keys)
/// gets its columns computed for it alone, so the memory a snapshot holds stays bounded.
const KEPT_COLUMNS: usize = 16;

/// A node that does not carry a column's key.
pub const NO_DOMAIN: u32 = u32::MAX;

/// Answers a table keeps (see [`NodeTable::remembered`]): a stream of distinct pods cannot grow
/// the memo past this.
const KEPT_ANSWERS: usize = 512;

/// What a table remembers of a pod: by the answer's type and the pod's hash. quick_cache's S3-FIFO
/// admits a new answer on probation and keeps the ones asked again: a stream of pods asked once
/// each (a tenant varying a label per request) evicts only its own answers, never the templates
/// that every rollout and scale write asks about (a memo emptied when full lost those too, and
/// their next admissions counted again, behind the stream's counts).
type Memo = quick_cache::sync::Cache<(TypeId, u64), Arc<dyn Any + Send + Sync>>;

/// A pod whose labels and spec are longer than this (as JSON) is not remembered: hashing it would
/// cost as much as counting, and such pods are hostile or rare.
const MEMO_SPEC_BYTES: usize = 64 * 1024;

/// Nodes from which a count the memo does not hold runs where [`count_apart_with`] says: below
/// this, a count costs less than starting a thread (about 50 ns a node).
pub const APART_NODES: usize = 1000;

/// A count to run apart: it owns what it reads (the table, the pod), so that the caller can
/// leave it behind ([`RunApart`]); its answer boxed.
pub type Work = Arc<dyn Fn() -> Box<dyn Any + Send> + Send + Sync>;

/// Runs a count somewhere else (the server: on a thread of lower CPU priority) and returns its
/// answer; a runner may also run `work` itself, once the count has waited `hand_over_after`
/// there ([`Apart::hand_over_after`]).
pub type RunApart = fn(work: Work, hand_over_after: std::time::Duration) -> Box<dyn Any + Send>;

/// Called between pieces of a count over the nodes (every [`PAUSE_NODES`] nodes): where the
/// server lets a thread of lower priority give the CPU back, and where a count left behind ends.
pub type Pause = fn();

/// Where and how the counts that the memo does not hold run ([`count_apart_with`]).
#[derive(Clone, Copy)]
pub struct Apart {
    pub run: RunApart,
    pub pause: Pause,
    /// How long a count may wait apart before the caller counts it itself: a thread of lower
    /// priority waits behind every other of its cgroup, and where that cgroup is shared with other
    /// processes (a control plane, a bare-metal host) they can hold it for seconds.
    pub hand_over_after: std::time::Duration,
}

static APART: OnceLock<Apart> = OnceLock::new();

/// Nodes counted between two [`pause_point`]s: about 5 µs of work.
pub const PAUSE_NODES: usize = 64;

/// Where the counts that the memo does not hold run, on tables of [`APART_NODES`] nodes or more,
/// and what they call between pieces: set once per process (by `serve`; the first call wins).
/// Counting a new template on a cluster of thousands of nodes is most of its admission's cost; at
/// a lower priority, a stream of new templates (a tenant's, or many rollouts at once) waits behind
/// the remembered ones, instead of delaying them. Without it the count runs on the caller's
/// thread and never pauses. The answer is the same.
pub fn count_apart_with(apart: Apart) {
    let _ = APART.set(apart);
}

/// Whether this process counts apart ([`count_apart_with`] was called).
pub fn counts_apart() -> bool {
    APART.get().is_some()
}

/// A point where a long count may pause ([`Apart::pause`]).
#[inline]
pub fn pause_point() {
    if let Some(apart) = APART.get() {
        (apart.pause)();
    }
}

/// The nodes of a view, in the view's order (by name), and what was computed of them so far: the
/// columns asked, the answers about pods ([`super::capacity`]'s counts), the first node a node
/// autoscaler labels.
#[derive(Debug)]
pub struct NodeTable {
    nodes: Vec<Arc<NodeInfo>>,
    columns: Mutex<HashMap<String, Arc<Column>>>,
    answers: Memo,
    /// Keys the pods' hashes: random per table, so no input can be made to collide.
    hasher: RandomState,
    autoscaled: OnceLock<Option<(String, &'static str)>>,
}

/// The domains of one topology key over a table's nodes.
#[derive(Debug, PartialEq)]
pub struct Column {
    /// Per node (in the table's order): its domain's number, or [`NO_DOMAIN`].
    pub domain: Vec<u32>,
    /// Per domain number, in order of first appearance: the key's value.
    pub values: Vec<String>,
    /// Whether every domain holds one node (hostname, or any key unique per node).
    pub single_nodes: bool,
}

impl Default for NodeTable {
    fn default() -> Self {
        NodeTable {
            nodes: Vec::new(),
            columns: Mutex::default(),
            answers: Memo::new(KEPT_ANSWERS),
            hasher: RandomState::default(),
            autoscaled: OnceLock::new(),
        }
    }
}

impl NodeTable {
    pub fn new(nodes: Vec<Arc<NodeInfo>>) -> Self {
        NodeTable { nodes, ..NodeTable::default() }
    }

    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    /// The domains of `key`: numbered at the first ask, then shared by every later one.
    pub fn column(&self, key: &str) -> Arc<Column> {
        let kept =
            |c: &Mutex<HashMap<String, Arc<Column>>>| c.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned();
        if let Some(column) = kept(&self.columns) {
            return column;
        }
        // Numbered outside the lock: two admissions asking at once both number it, neither waits.
        let column = Arc::new(Column::of(self.nodes.iter().map(|n| &**n), key));
        let mut columns = self.columns.lock().unwrap_or_else(|p| p.into_inner());
        if columns.len() < KEPT_COLUMNS {
            columns.entry(key.to_string()).or_insert_with(|| column.clone());
        }
        column
    }

    /// What the count that `prepare` makes answers about the pod that `namespace`, `labels` and
    /// `spec` describe, computed once per table: every rollout, scale write and UPDATE of a
    /// workload asks again about the same template, and so do the workloads of one chart. A pod is
    /// known by a hash of those three, which must be the whole of what the count reads of it; a pod
    /// whose labels and spec are over [`MEMO_SPEC_BYTES`] as JSON is answered afresh each time.
    /// `prepare` is called only when the memo lacks the answer; the count it makes owns its copy of
    /// the pod, because one run apart may outlive this call ([`Apart::hand_over_after`]).
    pub fn remembered<T, F>(
        self: &Arc<Self>,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
        spec: &impl serde::Serialize,
        prepare: impl FnOnce() -> F,
    ) -> Arc<T>
    where
        T: Send + Sync + 'static,
        F: Fn(&NodeTable) -> T + Send + Sync + 'static,
    {
        let Some(key) = self.key_of(namespace, labels, spec) else { return Arc::new(self.computed(prepare())) };
        let key = (TypeId::of::<T>(), key);
        if let Some(answer) = self.answers.get(&key).and_then(|a| a.downcast::<T>().ok()) {
            return answer;
        }
        // Computed outside the memo's locks, as the columns are numbered.
        let answer = Arc::new(self.computed(prepare()));
        self.answers.insert(key, answer.clone());
        answer
    }

    /// `compute`'s answer over this table, computed where [`count_apart_with`] says on a table of
    /// [`APART_NODES`] nodes or more.
    fn computed<T: Send + 'static>(self: &Arc<Self>, compute: impl Fn(&NodeTable) -> T + Send + Sync + 'static) -> T {
        let apart = APART.get().filter(|_| self.nodes.len() >= APART_NODES);
        let Some(Apart { run, hand_over_after, .. }) = apart else { return compute(self) };
        let table = self.clone();
        let compute = Arc::new(compute);
        let work: Work = {
            let compute = compute.clone();
            Arc::new(move || Box::new(compute(&table)) as Box<dyn Any + Send>)
        };
        match run(work, *hand_over_after).downcast::<T>() {
            Ok(answer) => *answer,
            // A runner that answered something else (none does): counted here.
            Err(_) => compute(self),
        }
    }

    /// The pod's hash, or `None` past [`MEMO_SPEC_BYTES`]. Serialised whole before its length is
    /// known: the request's own limits bound that (a megabyte costs about a millisecond).
    fn key_of(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
        spec: &impl serde::Serialize,
    ) -> Option<u64> {
        let labels = serde_json::to_vec(labels).ok()?;
        let spec = serde_json::to_vec(spec).ok()?;
        if labels.len() + spec.len() > MEMO_SPEC_BYTES {
            return None;
        }
        let mut hasher = self.hasher.build_hasher();
        // Each part ended by a byte none of them holds (JSON and names hold no NUL).
        for part in [namespace.as_bytes(), &labels, &spec] {
            hasher.write(part);
            hasher.write_u8(0);
        }
        Some(hasher.finish())
    }

    /// The first node (by name) labelled by a node autoscaler (Karpenter), and the label: looked
    /// for once per table.
    pub fn autoscaled_node(&self) -> Option<(&str, &'static str)> {
        self.autoscaled
            .get_or_init(|| {
                ["karpenter.sh/nodepool", "karpenter.sh/provisioner-name"].into_iter().find_map(|label| {
                    self.nodes.iter().find(|n| n.labels.contains_key(label)).map(|n| (n.name.clone(), label))
                })
            })
            .as_ref()
            .map(|(name, label)| (name.as_str(), *label))
    }
}

impl Column {
    /// The domains of `key` over `nodes`, numbered in their order.
    pub fn of<'n>(nodes: impl IntoIterator<Item = &'n NodeInfo>, key: &str) -> Column {
        let mut numbers: HashMap<&str, u32> = HashMap::new();
        let mut values: Vec<String> = Vec::new();
        let mut single_nodes = true;
        let domain = nodes
            .into_iter()
            .map(|n| match n.labels.get(key) {
                None => NO_DOMAIN,
                Some(v) => match numbers.get(v.as_str()) {
                    Some(d) => {
                        single_nodes = false;
                        *d
                    }
                    None => {
                        let d = values.len() as u32;
                        numbers.insert(v, d);
                        values.push(v.clone());
                        d
                    }
                },
            })
            .collect();
        Column { domain, values, single_nodes }
    }

    /// The key's value for domain `d`.
    pub fn value(&self, d: u32) -> &str {
        &self.values[d as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(name: &str, labels: &[(&str, &str)]) -> Arc<NodeInfo> {
        let labels: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Arc::new(NodeInfo { name: name.into(), labels, ..NodeInfo::default() })
    }

    #[test]
    fn a_column_numbers_the_domains_in_order_of_first_appearance() {
        let table = NodeTable::new(vec![
            node("a", &[("zone", "z2")]),
            node("b", &[("zone", "z1")]),
            node("c", &[]),
            node("d", &[("zone", "z2")]),
        ]);
        let zone = table.column("zone");
        assert_eq!(zone.domain, vec![0, 1, NO_DOMAIN, 0]);
        assert_eq!((zone.value(0), zone.value(1)), ("z2", "z1"));
        assert!(!zone.single_nodes, "z2 holds two nodes");
    }

    #[test]
    fn a_key_unique_per_node_makes_single_node_domains() {
        let table = NodeTable::new(vec![node("a", &[("host", "a")]), node("b", &[("host", "b")]), node("c", &[])]);
        let host = table.column("host");
        assert!(host.single_nodes);
        assert_eq!(host.domain, vec![0, 1, NO_DOMAIN]);
        // No node carries it: every node outside, no domain (and trivially single-node).
        let none = table.column("missing");
        assert_eq!((none.domain.as_slice(), none.values.len()), (&[NO_DOMAIN; 3][..], 0));
    }

    #[test]
    fn a_column_is_numbered_once_and_shared() {
        let table = NodeTable::new(vec![node("a", &[("zone", "z1")])]);
        assert!(Arc::ptr_eq(&table.column("zone"), &table.column("zone")));
    }

    /// An answer of its own type (the memo keeps each type apart).
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Counted(u64);

    fn counted(n: u64) -> Counted {
        Counted(n)
    }

    /// What [`NodeTable::remembered`] takes: makes a count that answers `Counted(n)`.
    fn counting(n: u64) -> impl FnOnce() -> Box<dyn Fn(&NodeTable) -> Counted + Send + Sync> {
        move || Box::new(move |_: &NodeTable| Counted(n))
    }

    #[test]
    fn a_pod_is_counted_once_per_table_and_any_change_to_it_counts_again() {
        let table = Arc::new(NodeTable::new(vec![node("a", &[])]));
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let spec = serde_json::json!({"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]});
        let counts = std::sync::atomic::AtomicUsize::new(0);
        // Made only when the memo lacks the answer.
        let count = |n| {
            counts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            move |_: &NodeTable| counted(n)
        };
        let first = table.remembered("shop", &labels, &spec, || count(3));
        let again = table.remembered("shop", &labels, &spec, || count(99));
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(
            (*again, counts.load(std::sync::atomic::Ordering::Relaxed)),
            (Counted(3), 1),
            "remembered, not counted again"
        );
        // Each of the three inputs is part of what the pod is known by.
        let other_labels: BTreeMap<String, String> = [("app".to_string(), "api".to_string())].into();
        let other_spec = serde_json::json!({"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}]});
        assert_eq!(*table.remembered("shop", &other_labels, &spec, || count(4)), Counted(4));
        assert_eq!(*table.remembered("blog", &labels, &spec, || count(5)), Counted(5));
        assert_eq!(*table.remembered("shop", &labels, &other_spec, || count(6)), Counted(6));
        assert_eq!(counts.load(std::sync::atomic::Ordering::Relaxed), 4);
        // Another answer about the same pod is kept apart from the count.
        assert_eq!(*table.remembered("shop", &labels, &spec, || |_: &NodeTable| "zones"), "zones");
        assert_eq!(*table.remembered("shop", &labels, &spec, || count(98)), Counted(3));
        // Another table (the nodes changed) remembers nothing of this one.
        let next = Arc::new(NodeTable::new(vec![node("a", &[]), node("b", &[])]));
        assert_eq!(*next.remembered("shop", &labels, &spec, || count(7)), Counted(7));
    }

    #[test]
    fn the_memo_is_bounded_and_a_long_spec_is_counted_afresh() {
        let table = Arc::new(NodeTable::new(vec![node("a", &[])]));
        let labels = BTreeMap::new();
        for i in 0..KEPT_ANSWERS + 10 {
            table.remembered("shop", &labels, &i, counting(i as u64));
        }
        assert!(table.answers.len() <= KEPT_ANSWERS);
        let long = "x".repeat(MEMO_SPEC_BYTES + 1);
        let a = table.remembered("shop", &labels, &long, counting(1));
        let b = table.remembered("shop", &labels, &long, counting(2));
        assert_eq!((*a, *b), (Counted(1), Counted(2)), "not remembered");
        let just = "x".repeat(MEMO_SPEC_BYTES - 4); // with its quotes and the labels' {}, at the limit
        let a = table.remembered("shop", &labels, &just, counting(1));
        let b = table.remembered("shop", &labels, &just, counting(2));
        assert_eq!((*a, *b), (Counted(1), Counted(1)), "remembered at the limit");
    }

    #[test]
    fn a_stream_of_pods_asked_once_does_not_evict_the_ones_asked_again() {
        let table = Arc::new(NodeTable::new(vec![node("a", &[])]));
        let labels = BTreeMap::new();
        let templates = 50u64;
        for t in 0..templates {
            table.remembered("shop", &labels, &format!("template-{t}"), counting(t));
        }
        // A tenant's stream of pods, each new, ten times the memo's size, with the templates'
        // rollouts asking again among them.
        for i in 0..10 * KEPT_ANSWERS as u64 {
            table.remembered("tenant", &labels, &i, counting(i));
            if i % 20 == 0 {
                let t = (i / 20) % templates;
                table.remembered("shop", &labels, &format!("template-{t}"), counting(t));
            }
        }
        let recounted = (0..templates)
            .filter(|t| {
                *table.remembered("shop", &labels, &format!("template-{t}"), counting(u64::MAX)) == Counted(u64::MAX)
            })
            .count();
        assert_eq!(recounted, 0, "templates asked again were evicted by pods asked once");
        assert!(table.answers.len() <= KEPT_ANSWERS);
    }

    /// A runner as `serve`'s: on a thread of its own, waited for. (Set for the whole test binary:
    /// it changes only where the large tables' counts run.)
    fn run_on_a_named_thread(work: Work, _: std::time::Duration) -> Box<dyn Any + Send> {
        std::thread::Builder::new()
            .name("apart".into())
            .spawn(move || work())
            .expect("a thread")
            .join()
            .expect("no panic")
    }

    #[test]
    fn a_count_on_a_large_table_that_the_memo_lacks_runs_apart() {
        // The first runner set wins: this one, or `serve`'s where a server test set it first.
        count_apart_with(Apart {
            run: run_on_a_named_thread,
            pause: || {},
            hand_over_after: std::time::Duration::from_secs(60),
        });
        let nodes = |n: usize| Arc::new(NodeTable::new((0..n).map(|i| node(&format!("n{i}"), &[])).collect()));
        let (large, small) = (nodes(APART_NODES), nodes(APART_NODES - 1));
        let labels = BTreeMap::new();
        let thread = || std::thread::current().name().map(str::to_string);
        let where_counted = || |_: &NodeTable| std::thread::current().name().map(str::to_string);
        let here = thread();
        let apart = large.remembered("shop", &labels, &1, where_counted);
        assert!(apart.is_some() && *apart != here, "counted on another thread: {apart:?}");
        assert_eq!(*small.remembered("shop", &labels, &1, where_counted), here, "below the size: here");
        // Remembered: answered here, with what was counted apart.
        assert_eq!(large.remembered("shop", &labels, &1, || |_: &NodeTable| None::<String>), apart);
        // Not remembered (too long): counted apart each time.
        let long = "x".repeat(MEMO_SPEC_BYTES + 1);
        assert_eq!(large.remembered("shop", &labels, &long, where_counted), apart);
    }

    #[test]
    fn the_autoscaled_node_is_the_first_labelled_one() {
        let table = NodeTable::new(vec![
            node("a", &[]),
            node("b", &[("karpenter.sh/provisioner-name", "old")]),
            node("c", &[("karpenter.sh/nodepool", "default")]),
        ]);
        // The current label first, then the old one.
        assert_eq!(table.autoscaled_node(), Some(("c", "karpenter.sh/nodepool")));
        assert_eq!(NodeTable::new(vec![node("a", &[])]).autoscaled_node(), None);
    }

    #[test]
    fn past_the_kept_columns_a_column_is_computed_for_its_asker_alone() {
        let table = NodeTable::new(vec![node("a", &[("k0", "v")])]);
        for i in 0..KEPT_COLUMNS {
            table.column(&format!("k{i}"));
        }
        let extra = table.column("one-more");
        assert!(!Arc::ptr_eq(&extra, &table.column("one-more")), "not kept");
        assert_eq!(table.columns.lock().unwrap().len(), KEPT_COLUMNS);
        assert!(Arc::ptr_eq(&table.column("k0"), &table.column("k0")), "the kept ones still are");
    }
}

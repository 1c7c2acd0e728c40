//! The view's nodes as one list, with the domains of a topology key numbered once per snapshot.
//!
//! Every Deployment or StatefulSet admission counts what the nodes hold per domain of a spread's
//! or an anti-affinity's key ([`super::capacity`]). Reading each node's label map for the key at
//! every admission is most of that cost on a cluster of thousands of nodes, and the answer only
//! changes when the nodes do: a [`NodeTable`] lives as long as the view's nodes are unchanged
//! (the [`Index`](super::Index) keeps one per snapshot) and numbers each key's domains the first
//! time an admission asks, once for all the admissions that read the same snapshot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::projection::NodeInfo;

/// Keys whose domains a table keeps: a request naming others (a hostile one can name 32 keys)
/// gets its columns computed for it alone, so the memory a snapshot holds stays bounded.
const KEPT_COLUMNS: usize = 16;

/// A node that does not carry a column's key.
pub const NO_DOMAIN: u32 = u32::MAX;

/// The nodes of a view, in the view's order (by name), and the columns asked of them so far.
#[derive(Debug, Default)]
pub struct NodeTable {
    nodes: Vec<Arc<NodeInfo>>,
    columns: Mutex<HashMap<String, Arc<Column>>>,
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

impl NodeTable {
    pub fn new(nodes: Vec<Arc<NodeInfo>>) -> Self {
        NodeTable { nodes, columns: Mutex::default() }
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
        let column = Arc::new(Column::of(&self.nodes, key));
        let mut columns = self.columns.lock().unwrap_or_else(|p| p.into_inner());
        if columns.len() < KEPT_COLUMNS {
            columns.entry(key.to_string()).or_insert_with(|| column.clone());
        }
        column
    }
}

impl Column {
    fn of(nodes: &[Arc<NodeInfo>], key: &str) -> Column {
        let mut numbers: HashMap<&str, u32> = HashMap::new();
        let mut values: Vec<String> = Vec::new();
        let mut single_nodes = true;
        let domain = nodes
            .iter()
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

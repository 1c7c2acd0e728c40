//! Lists in messages, bounded: a finding lands in an admission response, an audit annotation and
//! a PolicyReport (whose object the apiserver caps at 1.5 MiB), so a message names the first few
//! of a collection that grows with the cluster (nodes, pods, zones, webhooks) and counts the rest:
//! `a, b, c and 4997 more`. Nothing here imports anything of the crate, so every layer may use it.

use std::fmt::{Display, Write};

/// How many a message names before "and N more", unless a place says otherwise.
pub const NAMED: usize = 5;

/// The first `named` items joined with `sep`, then ` and N more` for the rest (N exact). The rest
/// is counted, never formatted: the cost past the first `named` is one step per item.
pub fn list<T: Display>(items: impl IntoIterator<Item = T>, named: usize, sep: &str) -> String {
    let mut out = String::new();
    let mut more = 0usize;
    for (i, item) in items.into_iter().enumerate() {
        if i < named {
            if i > 0 {
                out.push_str(sep);
            }
            let _ = write!(out, "{item}");
        } else {
            more += 1;
        }
    }
    out.push_str(&and_more(more));
    out
}

/// [`list`] with the usual count and `, `.
pub fn names<T: Display>(items: impl IntoIterator<Item = T>) -> String {
    list(items, NAMED, ", ")
}

/// ` and N more`, or nothing for 0: for a list whose named part is written elsewhere.
pub fn and_more(more: usize) -> String {
    if more > 0 { format!(" and {more} more") } else { String::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_list_is_written_whole() {
        assert_eq!(names(["a", "b"]), "a, b");
        assert_eq!(names(Vec::<String>::new()), "");
        assert_eq!(list(["a", "b", "c"], 3, "; "), "a; b; c");
    }

    #[test]
    fn a_long_list_names_the_first_and_counts_the_rest_exactly() {
        let nodes: Vec<String> = (0..5000).map(|i| format!("node-{i:05}")).collect();
        let said = names(&nodes);
        assert_eq!(said, "node-00000, node-00001, node-00002, node-00003, node-00004 and 4995 more");
        assert!(said.len() < 100, "{}", said.len());
        assert_eq!(list(&nodes, 2, "; "), "node-00000; node-00001 and 4998 more");
        assert_eq!(list(&nodes, 0, ", "), " and 5000 more");
    }

    #[test]
    fn and_more_says_nothing_of_nothing() {
        assert_eq!(and_more(0), "");
        assert_eq!(and_more(7), " and 7 more");
    }
}

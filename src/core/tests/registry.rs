//! The registry held to the contract (DESIGN.md §2), to the docs pages, to README.md and to
//! docs/gitops.md.

use std::collections::HashSet;

use crate::core::catalogue::Action;
use crate::core::registry::*;

/// Rule IDs and their order are contract (DESIGN.md §2), plus `pods-pending` and
/// `apiservice-unavailable` (issue 51), added after DESIGN's table was written.
const CONTRACT_RULES: [&str; 35] = [
    "spread-selector-missing",
    "spread-selector-mismatch",
    "spread-selector-overlap",
    "spread-unsatisfiable",
    "replicas-colocated",
    "host-network-colocation",
    "csi-controller-recreate",
    "recreate-multi-replica",
    "rwo-volume-multi-replica",
    "rwo-volume-rolling-surge",
    "pdb-blocks-eviction",
    "pdb-overlap",
    "pdb-selector-empty",
    "pdb-selects-nothing",
    "pdb-missing",
    "pdb-unhealthy-eviction-policy",
    "hpa-replica-bounds",
    "hpa-target-missing",
    "hpa-replicas-conflict",
    "termination-grace-zero",
    "prestop-exceeds-grace",
    "webhook-fail-closed-unavailable",
    "apiservice-unavailable",
    "toleration-wildcard",
    "spread-zone-missing",
    "exemption-unknown-rule",
    "replicas-share-node",
    "pdb-disruptions-blocked",
    "spread-pending",
    "pod-on-cordoned-node",
    "pods-pending",
    "drain-blocked",
    "drain-takes-all-replicas",
    "drain-leaves-pending",
    "drain-refused",
];

#[test]
fn the_catalogue_is_the_contract() {
    let ids: Vec<_> = rules().map(|r| r.id).collect();
    assert_eq!(ids, CONTRACT_RULES, "rule IDs and their order are contract (DESIGN.md §2)");
    let muts: Vec<_> = mutations().iter().map(|m| m.id).collect();
    assert_eq!(
        muts,
        [
            "inject-spread-selector",
            "inject-unhealthy-pod-eviction-policy",
            "inject-default-spread",
            "inject-match-label-keys"
        ]
    );
    let on: Vec<_> = mutations().iter().map(|m| m.default_on).collect();
    assert_eq!(on, [true, true, false, false]);
}

#[test]
fn the_defaults_are_the_contract() {
    let warn = [
        "webhook-fail-closed-unavailable",
        "apiservice-unavailable",
        "spread-zone-missing",
        "spread-selector-overlap",
        "spread-unsatisfiable",
        "replicas-colocated",
        "recreate-multi-replica",
        "rwo-volume-rolling-surge",
        "pdb-selector-empty",
        "pdb-selects-nothing",
        "pdb-missing",
        "pdb-unhealthy-eviction-policy",
        "hpa-target-missing",
        "hpa-replicas-conflict",
        "termination-grace-zero",
        "toleration-wildcard",
        "exemption-unknown-rule",
        "replicas-share-node",
        "pdb-disruptions-blocked",
        "spread-pending",
        "pod-on-cordoned-node",
        "pods-pending",
        "drain-blocked",
        "drain-takes-all-replicas",
        "drain-leaves-pending",
        "drain-refused",
    ];
    for r in rules() {
        let expected = if warn.contains(&r.id) { Action::Warn } else { Action::Deny };
        assert_eq!(r.default, expected, "{}", r.id);
    }
}

/// Each page starts with its ID, states the registry's default on its second line, and has
/// the sections every page has.
#[test]
fn every_entry_has_its_page() {
    let mut seen = HashSet::new();
    for (id, doc, summary) in
        rules().map(|r| (r.id, r.doc, r.summary)).chain(mutations().iter().map(|m| (m.id, m.doc, m.summary)))
    {
        assert!(seen.insert(id), "duplicate id {id}");
        assert!(doc.starts_with(&format!("# {id}\n")), "docs/rules/{id}.md must start with '# {id}'");
        let default = default_line(id).unwrap();
        assert_eq!(doc.lines().nth(2), Some(default.as_str()), "docs/rules/{id}.md: the default line");
        if let Some(judged) = judged_line(id) {
            let unwrapped = doc.replace('\n', " ");
            assert!(
                unwrapped.contains(&judged),
                "docs/rules/{id}.md must say where it is judged, in one paragraph: {judged}"
            );
        }
        for section in ["## What it catches", "## Why it matters", "## Example", "## How to fix", "## How to exempt"] {
            let section = if id.starts_with("inject-") {
                match section {
                    "## What it catches" => "## What it does",
                    "## How to fix" => "## When it applies",
                    "## How to exempt" => "## How to turn it off",
                    s => s,
                }
            } else {
                section
            };
            assert!(doc.contains(section), "docs/rules/{id}.md lacks '{section}'");
        }
        assert!(!summary.is_empty() && summary.len() <= 100, "{id}: summary must be one short line");
    }
}

/// README.md's tables are the registry's: the rule list cannot drift from the code.
#[test]
fn the_readme_tables_are_the_registrys() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
    let (start, end) = ("<!-- rules: generated from the registry; a test checks it -->\n", "<!-- /rules -->");
    let begin = readme.find(start).expect("README.md has the rules markers") + start.len();
    let stop = begin + readme[begin..].find(end).expect("README.md closes the rules markers");
    assert_eq!(readme[begin..stop], readme_tables(), "README.md's rule tables: replace them with this text");
}

/// What `ha-guard rules` prints names every rule and mutation with its default.
#[test]
fn the_listing_names_every_entry() {
    let listing = listing();
    for r in rules() {
        assert!(listing.lines().any(|l| l.starts_with(r.id) && l.contains(r.default_text)), "{}", r.id);
    }
    for m in mutations() {
        assert!(listing.lines().any(|l| l.starts_with(m.id)), "{}", m.id);
    }
}

#[test]
fn a_configuration_names_only_known_ids() {
    assert!(parse_config("rules:\n  pdb-overlap: warn\n", "c.yaml").is_ok());
    let e = parse_config("rules:\n  replica-colocated: warn\n", "c.yaml").unwrap_err().to_string();
    assert!(e.contains("rules.replica-colocated: unknown rule ID"), "{e}");
}

/// docs/gitops.md's Argo CD block is the registry's: an entry cannot drift from its mutation.
#[test]
fn the_docs_argocd_block_is_the_registrys() {
    let page = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/gitops.md"));
    let (start, end) = ARGOCD_MARKERS;
    let begin = page.find(start).expect("docs/gitops.md has the Argo CD markers") + start.len();
    let stop = begin + page[begin..].find(end).expect("docs/gitops.md closes the Argo CD markers");
    let expected = format!("```yaml\n{}```\n", argocd_ignore_differences());
    assert_eq!(page[begin..stop], expected, "docs/gitops.md's Argo CD block: replace it with this text");
}

/// Every mutation says where it writes, for every kind it writes: the plans of a Deployment, a
/// StatefulSet and a PDB with every mutation on (each mutation changing something) are covered
/// by the entries of the mutations that made them. A mutation added without its entries, or one
/// that starts writing a kind its entries do not name, fails here.
#[test]
fn every_mutation_names_what_it_writes_for_argo_cd() {
    use crate::core::model::Subject;
    use crate::core::testing::{plan, subject, workload};
    let config = parse_config("mutations: {inject-default-spread: true, inject-match-label-keys: true}\n", "c.yaml")
        .expect("a configuration");
    let unselected = "topologySpreadConstraints:\n- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
                      whenUnsatisfiable: DoNotSchedule}\n";
    let pdb = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\n\
               spec: {minAvailable: 1, selector: {matchLabels: {app: web}}}\n";
    let mut seen = HashSet::new();
    for yaml in [
        workload("Deployment", "web", "replicas: 3\n", unselected),
        workload("StatefulSet", "db", "replicas: 3\n", unselected),
        pdb.to_string(),
    ] {
        let kind = match subject(&yaml) {
            Subject::Workload(w) => w.kind.as_str(),
            Subject::Pdb(_) => "PodDisruptionBudget",
            other => panic!("{other:?}"),
        };
        for change in plan(&yaml, "", &config).changes {
            let m = change.mutation;
            assert!(
                m.ignored.iter().any(|e| e.kind == kind && !e.jq.is_empty()),
                "{} writes {} of a {kind}, but its ignored entries name no {kind}",
                m.id,
                change.path()
            );
            seen.insert(m.id);
        }
    }
    for m in mutations() {
        assert!(seen.contains(m.id), "{}: no sample above makes it change something; add one", m.id);
        for e in m.ignored {
            assert!(!e.jq.is_empty() && !e.group.is_empty(), "{}: an empty ignoreDifferences entry", m.id);
        }
    }
}

/// "Did you mean": an ID the typed one begins comes first, then edit distance (issue 51, item 7):
/// `pdb-blocks` is nearer `pdb-overlap` by edit distance alone.
#[test]
fn nearest_prefers_a_prefix_then_edit_distance() {
    assert_eq!(nearest("pdb-blocks", true, true), "pdb-blocks-eviction");
    assert_eq!(nearest("drain-block", true, true), "drain-blocked");
    // The typed ID goes on past a known one: that one.
    assert_eq!(nearest("drain-refused-pods", true, true), "drain-refused");
    // Of several that it begins, the nearest (the shortest).
    assert_eq!(nearest("spread-zone", true, true), "spread-zone-missing");
    assert_eq!(nearest("spread-selector-m", true, true), "spread-selector-missing");
    // No prefix: edit distance, as before.
    assert_eq!(nearest("pdb-block-eviction", true, true), "pdb-blocks-eviction");
    assert_eq!(nearest("replica-colocated", true, true), "replicas-colocated");
    // Only among what is asked for: a mutation ID is no rule's.
    assert_eq!(nearest("inject-default", false, true), "inject-default-spread");
}

//! The catalogue: every rule and mutation with its stable ID, default and documentation.
//! Each rule family declares its own entries next to its code; this module only gathers them.

use serde::{Deserialize, Serialize};

use crate::{mutations, rules};

/// What a rule does when it fires: the configurable action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Deny,
    Warn,
    Off,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Warn => "warn",
            Action::Off => "off",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "deny" => Some(Action::Deny),
            "warn" => Some(Action::Warn),
            "off" => Some(Action::Off),
            _ => None,
        }
    }
}

/// A validation rule.
#[derive(Debug)]
pub struct Rule {
    pub id: &'static str,
    /// The action when the rule fires and config says nothing. Some rules pick per case (a
    /// `DoNotSchedule` spread denies, `ScheduleAnyway` warns): `default_text` says how.
    pub default: Action,
    pub default_text: &'static str,
    pub summary: &'static str,
    /// The rule's page, `docs/rules/<id>.md`: what `explain` prints.
    pub doc: &'static str,
}

/// A mutation of the mutating webhook.
#[derive(Debug)]
pub struct Mutation {
    pub id: &'static str,
    pub default_on: bool,
    pub summary: &'static str,
    pub doc: &'static str,
}

/// Every rule, in catalogue order.
pub fn rules() -> impl Iterator<Item = &'static Rule> {
    rules::FAMILIES.iter().flat_map(|family| family.iter())
}

pub fn rule(id: &str) -> Option<&'static Rule> {
    rules().find(|r| r.id == id)
}

pub fn mutations() -> &'static [Mutation] {
    mutations::MUTATIONS
}

pub fn mutation(id: &str) -> Option<&'static Mutation> {
    mutations().iter().find(|m| m.id == id)
}

/// The documentation page of a rule or mutation.
pub fn doc(id: &str) -> Option<&'static str> {
    rule(id).map(|r| r.doc).or_else(|| mutation(id).map(|m| m.doc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const CONTRACT_RULES: [&str; 20] = [
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
        "termination-grace-zero",
        "prestop-exceeds-grace",
    ];

    #[test]
    fn catalogue_is_the_contract() {
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
    fn defaults_are_the_contract() {
        let warn = [
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
            "termination-grace-zero",
        ];
        for r in rules() {
            let expected = if warn.contains(&r.id) { Action::Warn } else { Action::Deny };
            assert_eq!(r.default, expected, "{}", r.id);
        }
    }

    #[test]
    fn every_entry_has_a_page_titled_with_its_id() {
        let mut seen = HashSet::new();
        for (id, doc, summary) in
            rules().map(|r| (r.id, r.doc, r.summary)).chain(mutations().iter().map(|m| (m.id, m.doc, m.summary)))
        {
            assert!(seen.insert(id), "duplicate id {id}");
            assert!(doc.starts_with(&format!("# {id}\n")), "docs/rules/{id}.md must start with '# {id}'");
            for section in
                ["## What it catches", "## Why it matters", "## Example", "## How to fix", "## How to exempt"]
            {
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
}

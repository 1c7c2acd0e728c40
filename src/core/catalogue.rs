//! How a rule and a mutation are declared: once, as a static, with its ID, default, summary and
//! documentation page (like rustc's `declare_lint!`). Everything else refers to the static: the
//! rule's code emits findings by reference, the registry lists the statics, the configuration
//! validates its keys against them, and `ha-guard rules`, `explain`, the README table and the
//! docs pages are checked against them. An ID is written in exactly one place.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a rule does when it fires: the configurable action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Deny,
    Warn,
    Off,
}

impl Action {
    pub const fn as_str(self) -> &'static str {
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

/// Where a rule is judged: what it must know to be true when it is said (DESIGN.md §2, "Where
/// rules are judged"). A rule about the object itself, or about objects that exist, is true at
/// admission; one that asserts an absence is true only of a whole set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judged {
    /// At admission (CREATE and UPDATE), in `check` and in the audit.
    Everywhere,
    /// Where the nodes are known: at admission with the live view, and in the audit.
    WithNodes,
    /// An absence: in `check --complete` and the audit; at admission only on an UPDATE once it has
    /// lasted (`serve --absence-grace`), never on a CREATE.
    WholeSet,
    /// Part of it (no selector at all) everywhere, the absence (covers no workload) as
    /// [`Judged::WholeSet`].
    PartlyWholeSet,
    /// In `ha-guard audit` only (the live posture: pods, nodes, budgets' status).
    Audit,
    /// In `ha-guard audit --drain`, `--drain-zone` and `--drain-each` only.
    Drain,
    /// In `check` and the audit, on a kind the webhook does not intercept (an APIService).
    CheckAndAudit,
}

impl Judged {
    /// The README table's word for it.
    pub const fn label(self) -> &'static str {
        match self {
            Judged::Everywhere => "everywhere",
            Judged::WithNodes => "with nodes",
            Judged::WholeSet => "whole set",
            Judged::PartlyWholeSet => "partly whole set",
            Judged::Audit => "audit",
            Judged::Drain => "drain",
            Judged::CheckAndAudit => "check and audit",
        }
    }

    /// What the docs page says under "Judged:".
    pub const fn text(self) -> &'static str {
        match self {
            Judged::Everywhere => "at admission (CREATE and UPDATE), in `check` and in the audit.",
            Judged::WithNodes => {
                "at admission with the live view and in the audit (it reads the nodes); not in `check`."
            }
            Judged::WholeSet => {
                "in `check --complete` and in the audit (and its PolicyReports); at admission only on an \
                 UPDATE of an object created longer ago than the grace (`serve --absence-grace`, 60 s), \
                 never on a CREATE: it asserts an absence, which the rest of an apply may fill a moment later."
            }
            Judged::PartlyWholeSet => {
                "no selector: at admission, in `check` and in the audit; covers no workload (an absence): in \
                 `check --complete` and the audit, and at admission only on an UPDATE of a PDB created longer \
                 ago than the grace (`serve --absence-grace`, 60 s), never on a CREATE."
            }
            Judged::Audit => "in `ha-guard audit` (and the background audit's reports) only, never at admission.",
            Judged::Drain => "in `ha-guard audit --drain`, `--drain-zone` and `--drain-each` only.",
            Judged::CheckAndAudit => {
                "in `check` and in the audit (and the background audit's reports); not at admission: the \
                 webhook does not intercept the kind it is judged on."
            }
        }
    }
}

/// A validation rule. Declare one with [`declare_rule!`](crate::declare_rule).
pub struct Rule {
    pub id: &'static str,
    /// The action when the rule fires and config says nothing. Some rules pick per case (a
    /// `DoNotSchedule` spread denies, `ScheduleAnyway` warns): `default_text` says how.
    pub default: Action,
    pub default_text: &'static str,
    /// One line: what `ha-guard rules` and the README table say the rule fires on.
    pub summary: &'static str,
    /// Where it is judged.
    pub judged: Judged,
    /// The rule's page, `docs/rules/<id>.md`: what `explain` prints.
    pub doc: &'static str,
}

/// A mutation of the mutating webhook. Declare one with [`declare_mutation!`](crate::declare_mutation).
pub struct Mutation {
    pub id: &'static str,
    pub default_on: bool,
    pub summary: &'static str,
    pub doc: &'static str,
    /// What it adds, as Argo CD's `ignoreDifferences` entries match it: one per kind it writes
    /// (the README's block and `ha-guard rules --argocd-ignore-differences` are made of these).
    pub ignored: &'static [IgnoreDifference],
}

/// An Argo CD `ignoreDifferences` entry: the objects of `group`/`kind`, and jq path expressions
/// (Argo CD deletes what each selects from both the live object and the desired one before
/// comparing them, in order). Each selects only what the mutation adds, as it adds it: a value the
/// manifest sets otherwise is still compared.
pub struct IgnoreDifference {
    pub group: &'static str,
    pub kind: &'static str,
    pub jq: &'static [&'static str],
}

// Rules and mutations are statics: two are the same when they are the same declaration.
impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for Rule {}
impl PartialEq for Mutation {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for Mutation {}

/// `rule == "pdb-overlap"` reads as comparing IDs, which is what tests and shells ask.
impl PartialEq<&str> for &Rule {
    fn eq(&self, other: &&str) -> bool {
        self.id == *other
    }
}
impl PartialEq<&str> for &Mutation {
    fn eq(&self, other: &&str) -> bool {
        self.id == *other
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id)
    }
}
impl fmt::Debug for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id)
    }
}
impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id)
    }
}
impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id)
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id)
    }
}

impl Serialize for Mutation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id)
    }
}

/// The rules and mutations a configuration may name (the registry's, in the shells; a smaller
/// one in tests).
#[derive(Clone, Copy, Debug)]
pub struct Catalogue {
    /// The rules, family by family.
    pub rules: &'static [&'static [&'static Rule]],
    pub mutations: &'static [&'static Mutation],
}

impl Catalogue {
    pub fn rules(&self) -> impl Iterator<Item = &'static Rule> + use<> {
        self.rules.iter().flat_map(|family| family.iter().copied())
    }

    pub fn rule(&self, id: &str) -> Option<&'static Rule> {
        self.rules().find(|r| r.id == id)
    }

    pub fn mutation(&self, id: &str) -> Option<&'static Mutation> {
        self.mutations.iter().copied().find(|m| m.id == id)
    }
}

/// Declares a rule: `declare_rule!(pub NAME, "rule-id", Deny, "summary");` or, for a rule whose
/// action depends on the case, `declare_rule!(pub NAME, "rule-id", Deny ("deny (...), warn (...)"),
/// "summary");`. A rule judged other than everywhere says where before its summary:
/// `declare_rule!(pub NAME, "rule-id", Warn, judged: WholeSet, "summary");` ([`Judged`]). Its page
/// is `docs/rules/<rule-id>.md`.
#[macro_export]
macro_rules! declare_rule {
    (@judged) => { $crate::core::catalogue::Judged::Everywhere };
    (@judged $judged:ident) => { $crate::core::catalogue::Judged::$judged };
    (@full $(#[$attr:meta])* $vis:vis $name:ident, $id:literal, $default:ident ($text:expr), [$($judged:ident)?], $summary:literal) => {
        $(#[$attr])*
        $vis static $name: $crate::core::catalogue::Rule = $crate::core::catalogue::Rule {
            id: $id,
            default: $crate::core::catalogue::Action::$default,
            default_text: $text,
            summary: $summary,
            judged: $crate::declare_rule!(@judged $($judged)?),
            doc: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/rules/", $id, ".md")),
        };
    };
    ($(#[$attr:meta])* $vis:vis $name:ident, $id:literal, $default:ident, $(judged: $judged:ident,)? $summary:literal $(,)?) => {
        $crate::declare_rule!(@full $(#[$attr])* $vis $name, $id, $default ($crate::core::catalogue::Action::$default.as_str()), [$($judged)?], $summary);
    };
    ($(#[$attr:meta])* $vis:vis $name:ident, $id:literal, $default:ident ($text:expr), $(judged: $judged:ident,)? $summary:literal $(,)?) => {
        $crate::declare_rule!(@full $(#[$attr])* $vis $name, $id, $default ($text), [$($judged)?], $summary);
    };
}

/// Declares a mutation: `declare_mutation!(pub NAME, "inject-...", on|off, "summary", ignored:
/// &[IgnoreDifference {..}, ..]);`. Its page is `docs/rules/<id>.md`; `ignored` says where it
/// writes, for Argo CD ([`IgnoreDifference`]): a mutation cannot be declared without it.
#[macro_export]
macro_rules! declare_mutation {
    (@on on) => { true };
    (@on off) => { false };
    ($(#[$attr:meta])* $vis:vis $name:ident, $id:literal, $on:ident, $summary:literal, ignored: $ignored:expr $(,)?) => {
        $(#[$attr])*
        $vis static $name: $crate::core::catalogue::Mutation = $crate::core::catalogue::Mutation {
            id: $id,
            default_on: $crate::declare_mutation!(@on $on),
            summary: $summary,
            doc: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/rules/", $id, ".md")),
            ignored: $ignored,
        };
    };
}

/// A kind the apiserver matches a policy on: API group, version, resource (plural).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CelResource {
    pub group: &'static str,
    pub version: &'static str,
    pub resource: &'static str,
    /// The kind of its objects, as [`Kind::as_str`](crate::core::model::Kind::as_str) names it.
    pub kind: &'static str,
}

/// Deployments and StatefulSets (the workloads), not their `scale` subresource: a scale write
/// only warns in the webhook, so no policy matches it.
pub const WORKLOADS: &[CelResource] = &[
    CelResource { group: "apps", version: "v1", resource: "deployments", kind: "Deployment" },
    CelResource { group: "apps", version: "v1", resource: "statefulsets", kind: "StatefulSet" },
];
/// HorizontalPodAutoscalers (autoscaling/v1 writes reach the policy as v2: matchPolicy
/// Equivalent).
pub const HPAS: &[CelResource] = &[CelResource {
    group: "autoscaling",
    version: "v2",
    resource: "horizontalpodautoscalers",
    kind: "HorizontalPodAutoscaler",
}];
/// PodDisruptionBudgets.
pub const PDBS: &[CelResource] =
    &[CelResource { group: "policy", version: "v1", resource: "poddisruptionbudgets", kind: "PodDisruptionBudget" }];

/// The CEL form of a rule, declared beside it (DESIGN.md §4 "In the apiserver as well"): what the
/// generated ValidatingAdmissionPolicies evaluate (src/core/policies.rs), the same findings with
/// the same text as the Rust form, computed from the object written and nothing else.
///
/// `findings` is a CEL expression over `o` (the object: the generator binds it to `object`, and to
/// `oldObject` for the ratchet) and `variables.id` (`Kind namespace/name`, as the Rust messages name
/// the object) that yields a list of maps with string values: `path`, `what`, `fix` (a finding's
/// parts as [`Finding`](crate::core::finding::Finding) has them) and `action` (`deny` or `warn`: the
/// rule's own action for that finding, before the configuration).
pub struct CelRule {
    pub rule: &'static Rule,
    pub resources: &'static [CelResource],
    pub findings: &'static str,
    /// `None`: the CEL form yields every finding the Rust form does with an empty view. `Some`: it
    /// covers part of the rule only (which, said here), and the webhook alone judges the rest.
    pub partial: Option<&'static str>,
}

impl CelRule {
    /// Whether its policies match objects of `kind` (a [`Kind::as_str`](crate::core::model::Kind::as_str)).
    pub fn matches(&self, kind: &str) -> bool {
        self.resources.iter().any(|r| r.kind == kind)
    }
}

/// How a mutation's CEL form patches: an RFC 6902 JSON Patch or an apply configuration (the
/// MutatingAdmissionPolicy's `patchType`), each a CEL expression over `object`.
pub enum CelPatch {
    JsonPatch(&'static str),
    ApplyConfiguration(&'static str),
}

/// The CEL form of a mutation, declared beside it: a MutatingAdmissionPolicy that makes the same
/// change as the webhook's JSON Patch where `when` (a match condition over `object`) holds.
pub struct CelMutation {
    pub mutation: &'static Mutation,
    pub resources: &'static [CelResource],
    pub when: &'static str,
    pub patch: CelPatch,
}

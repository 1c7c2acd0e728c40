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

/// A validation rule. Declare one with [`declare_rule!`](crate::declare_rule).
pub struct Rule {
    pub id: &'static str,
    /// The action when the rule fires and config says nothing. Some rules pick per case (a
    /// `DoNotSchedule` spread denies, `ScheduleAnyway` warns): `default_text` says how.
    pub default: Action,
    pub default_text: &'static str,
    /// One line: what `ha-guard rules` and the README table say the rule fires on.
    pub summary: &'static str,
    /// The rule's page, `docs/rules/<id>.md`: what `explain` prints.
    pub doc: &'static str,
}

/// A mutation of the mutating webhook. Declare one with [`declare_mutation!`](crate::declare_mutation).
pub struct Mutation {
    pub id: &'static str,
    pub default_on: bool,
    pub summary: &'static str,
    pub doc: &'static str,
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
/// "summary");`. Its page is `docs/rules/<rule-id>.md`.
#[macro_export]
macro_rules! declare_rule {
    ($(#[$attr:meta])* $vis:vis $name:ident, $id:literal, $default:ident, $summary:literal $(,)?) => {
        $crate::declare_rule!($(#[$attr])* $vis $name, $id, $default ($crate::core::catalogue::Action::$default.as_str()), $summary);
    };
    ($(#[$attr:meta])* $vis:vis $name:ident, $id:literal, $default:ident ($text:expr), $summary:literal $(,)?) => {
        $(#[$attr])*
        $vis static $name: $crate::core::catalogue::Rule = $crate::core::catalogue::Rule {
            id: $id,
            default: $crate::core::catalogue::Action::$default,
            default_text: $text,
            summary: $summary,
            doc: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/rules/", $id, ".md")),
        };
    };
}

/// Declares a mutation: `declare_mutation!(pub NAME, "inject-...", on|off, "summary");`. Its page
/// is `docs/rules/<id>.md`.
#[macro_export]
macro_rules! declare_mutation {
    (@on on) => { true };
    (@on off) => { false };
    ($(#[$attr:meta])* $vis:vis $name:ident, $id:literal, $on:ident, $summary:literal $(,)?) => {
        $(#[$attr])*
        $vis static $name: $crate::core::catalogue::Mutation = $crate::core::catalogue::Mutation {
            id: $id,
            default_on: $crate::declare_mutation!(@on $on),
            summary: $summary,
            doc: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/rules/", $id, ".md")),
        };
    };
}

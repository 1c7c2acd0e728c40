//! A platform team's policy beside the rule actions (DESIGN.md §5): exceptions that allow named
//! findings of matching objects until a date, overrides of rule actions where a namespace's labels
//! match, and the `*` globs both use for namespaces and names.
//!
//! Precedence, from the widest to the narrowest (README "Policy for platform teams"):
//! 1. an exempt namespace (`exemptNamespaces`, globs) or one labelled `ha-guard.io/mode: off` is
//!    not judged at all;
//! 2. a rule's action is its own default, then `rules:`, then each override whose
//!    `namespaceSelector` matches the namespace's labels, in file order (the last one that names
//!    the rule wins);
//! 3. a finding an exception (or an exemption annotation) covers is `allowed`;
//! 4. a deny on a ratcheted UPDATE or a scale write, or in a namespace labelled
//!    `ha-guard.io/mode: warn`, is a warning; `mode: observe` answers every deny as a warning.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
pub use k8s_openapi::jiff::civil::Date;
use serde::Deserialize;

use crate::core::catalogue::{Action, Catalogue};
use crate::core::model::selector;
use crate::core::model::{Kind, ObjectRef};

type Labels = BTreeMap<String, String>;

/// A namespace or object name pattern where `*` stands for any run of characters (none too).
/// Written by hand: the contract allows `*` alone, and glob crates accept (and would silently
/// honour) `?`, classes and braces, which a Kubernetes name cannot hold anyway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob(pub(super) String);

impl Glob {
    /// A pattern of the characters a Kubernetes name may hold (lower-case letters, digits, `-`
    /// and, for object names, `.`) and `*`.
    pub fn parse(pattern: &str, dots: bool) -> Result<Glob, String> {
        if pattern.is_empty() {
            return Err("an empty pattern matches nothing: write a name, or * for every one".into());
        }
        if let Some(bad) = pattern
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '*' || (dots && *c == '.')))
        {
            let allowed = if dots { "a-z, 0-9, '-', '.'" } else { "a-z, 0-9, '-'" };
            return Err(format!(
                "bad pattern {pattern:?}: {bad:?} is not allowed (a name holds {allowed}; the only wildcard is *)"
            ));
        }
        Ok(Glob(pattern.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_literal(&self) -> bool {
        !self.0.contains('*')
    }

    /// Whether it matches every name: `*` alone, however many (`**`).
    pub fn matches_everything(&self) -> bool {
        self.0.chars().all(|c| c == '*')
    }

    pub fn matches(&self, text: &str) -> bool {
        glob_matches(&self.0, text)
    }
}

/// Whether `pattern` (a checked [`Glob`]'s text) matches `text`.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let Some((first, rest_of_pattern)) = pattern.split_once('*') else { return pattern == text };
    let (middle, last) = rest_of_pattern.rsplit_once('*').unwrap_or(("", rest_of_pattern));
    // The two ends must not overlap: what is between them is matched left to right.
    if text.len() < first.len() + last.len() || !text.starts_with(first) || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in middle.split('*').filter(|p| !p.is_empty()) {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `globs` together match every name (a Kubernetes name starts and ends with a letter or
/// a digit): one of them is `*` alone, or their `c*` prefixes (or `*c` suffixes) cover every
/// first (or last) character.
pub fn every_name(globs: &[Glob]) -> bool {
    if globs.iter().any(Glob::matches_everything) {
        return true;
    }
    /// A pattern's first (or last) character and the rest.
    type End = fn(&str) -> Option<(char, &str)>;
    let ends: [End; 2] = [
        |p| p.chars().next().map(|c| (c, &p[c.len_utf8()..])),
        |p| p.chars().next_back().map(|c| (c, &p[..p.len() - c.len_utf8()])),
    ];
    ends.iter().any(|end| {
        let covered: std::collections::BTreeSet<char> = globs
            .iter()
            .filter_map(|g| end(g.as_str()))
            .filter(|(c, rest)| *c != '*' && !rest.is_empty() && rest.chars().all(|r| r == '*'))
            .map(|(c, _)| c)
            .collect();
        ('a'..='z').chain('0'..='9').all(|c| covered.contains(&c))
    })
}

/// The label every namespace carries, set by the apiserver to its name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Whether a namespaceSelector matches every namespace: empty (`{}`), or asking only that
/// `kubernetes.io/metadata.name` exists (every namespace has it).
pub fn every_namespace(s: &LabelSelector) -> bool {
    s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && s.match_expressions.iter().flatten().all(|e| e.key == NAMESPACE_NAME_LABEL && e.operator == "Exists")
}

/// An exception: findings of `rules` about objects its match covers are allowed, naming it.
#[derive(Clone, Debug, PartialEq)]
pub struct Exception {
    pub name: String,
    pub rules: Vec<String>,
    /// Empty: any kind.
    pub kinds: Vec<Kind>,
    /// Empty: any namespace (cluster-scoped objects included); else one must match.
    pub namespaces: Vec<Glob>,
    /// Empty: any name.
    pub names: Vec<Glob>,
    /// On the object's own labels.
    pub selector: Option<LabelSelector>,
    /// On the labels of the object's namespace.
    pub namespace_selector: Option<LabelSelector>,
    /// Said in the file (`clusterWide: true`): it applies in every namespace. Without it, an
    /// exception must be scoped by `namespaces` or `namespaceSelector` (checked when parsed).
    pub cluster_wide: bool,
    pub reason: String,
    pub owner: Option<String>,
    /// From this day on (UTC) it no longer applies.
    pub expires: Option<Date>,
}

/// What an exception is matched against besides the rule.
pub struct Matched<'a> {
    pub object: &'a ObjectRef,
    /// The object's labels, when known (the object judged; not the others a finding names).
    pub labels: Option<&'a Labels>,
    /// The labels of the object's namespace, when known.
    pub namespace_labels: Option<&'a Labels>,
}

impl Exception {
    /// Whether it still applies on `today` (`None`: the day is not known, so an exception with an
    /// expiry does not apply).
    pub fn applies_on(&self, today: Option<Date>) -> bool {
        match (self.expires, today) {
            (None, _) => true,
            (Some(expires), Some(today)) => today < expires,
            (Some(_), None) => false,
        }
    }

    /// The start (00:00 UTC) of its expiry day, in Unix seconds.
    pub fn expiry_timestamp(&self) -> Option<i64> {
        let day = self.expires?;
        let ts = day.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).ok()?.timestamp();
        Some(ts.as_second())
    }

    /// Whether it covers a finding of `rule` about `m.object` (its expiry aside). A selector
    /// whose labels are not known matches nothing.
    pub fn covers(&self, rule: &str, m: &Matched) -> bool {
        let object = m.object;
        self.rules.iter().any(|r| r == rule)
            && (self.kinds.is_empty() || self.kinds.contains(&object.kind))
            && (self.namespaces.is_empty()
                || (!object.namespace.is_empty() && self.namespaces.iter().any(|g| g.matches(&object.namespace))))
            && (self.names.is_empty() || self.names.iter().any(|g| g.matches(&object.name)))
            && self.selector.as_ref().is_none_or(|s| m.labels.is_some_and(|l| selector::matches(s, l)))
            && self
                .namespace_selector
                .as_ref()
                .is_none_or(|s| m.namespace_labels.is_some_and(|l| selector::matches(s, l)))
    }
}

/// Rule actions where a namespace's labels match.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub namespace_selector: LabelSelector,
    pub rules: BTreeMap<String, Action>,
}

// --- the file as written ------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawException {
    name: Option<String>,
    #[serde(default)]
    rules: Vec<String>,
    #[serde(rename = "match")]
    matching: Option<RawMatch>,
    reason: Option<String>,
    owner: Option<String>,
    expires: Option<serde_json::Value>,
    cluster_wide: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawMatch {
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    names: Vec<String>,
    selector: Option<RawSelector>,
    namespace_selector: Option<RawSelector>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSelector {
    match_labels: Option<BTreeMap<String, String>>,
    match_expressions: Option<Vec<RawRequirement>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequirement {
    key: String,
    operator: String,
    values: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawOverride {
    namespace_selector: Option<RawSelector>,
    rules: Option<BTreeMap<String, String>>,
}

/// Decodes `value` as `T`, naming the path of a bad field (`match.selector.matchLabel`).
fn decode<T: serde::de::DeserializeOwned>(value: &serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." { inner } else { format!("{path}: {inner}") }
    })
}

fn selector_of(raw: RawSelector, key: &str) -> Result<LabelSelector, String> {
    for (k, _) in raw.match_labels.iter().flatten() {
        if k.is_empty() {
            return Err(format!("{key}.matchLabels: a label key is not empty"));
        }
    }
    let mut expressions = Vec::new();
    for (i, e) in raw.match_expressions.into_iter().flatten().enumerate() {
        let at = format!("{key}.matchExpressions[{i}]");
        if e.key.is_empty() {
            return Err(format!("{at}.key: a label key is not empty"));
        }
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!("{at}.values: operator {} needs at least one value", e.operator));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!("{at}.values: operator {} takes no values", e.operator));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Err(format!("{at}.operator: bad value {other:?}: expected In, NotIn, Exists or DoesNotExist"));
            }
        }
        expressions.push(LabelSelectorRequirement { key: e.key, operator: e.operator, values: e.values });
    }
    Ok(LabelSelector {
        match_labels: raw.match_labels,
        match_expressions: (!expressions.is_empty()).then_some(expressions),
    })
}

/// The kinds an exception may match: the objects rules judge (not Nodes or Namespaces).
const EXCEPTION_KINDS: [Kind; 9] = [
    Kind::Deployment,
    Kind::StatefulSet,
    Kind::PodDisruptionBudget,
    Kind::HorizontalPodAutoscaler,
    Kind::ScaledObject,
    Kind::PersistentVolumeClaim,
    Kind::Service,
    Kind::ValidatingWebhookConfiguration,
    Kind::MutatingWebhookConfiguration,
];

fn kind_named(name: &str) -> Option<Kind> {
    EXCEPTION_KINDS.into_iter().find(|k| k.as_str() == name)
}

/// The exceptions of the file (`exceptions:`), checked: every error names the exception (by its
/// name, or its place in the list when it has none) and the key.
pub fn parse_exceptions(values: &[serde_json::Value], catalogue: &Catalogue) -> Result<Vec<Exception>, String> {
    let mut out: Vec<Exception> = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let named = value.get("name").and_then(|n| n.as_str()).filter(|n| !n.is_empty());
        let at = match named {
            Some(name) => format!("exceptions[{i}] ({name})"),
            None => format!("exceptions[{i}]"),
        };
        let raw: RawException = decode(value).map_err(|e| format!("{at}.{e}"))?;
        let name = raw
            .name
            .filter(|n| !n.trim().is_empty())
            .ok_or_else(|| format!("{at}.name: an exception needs a name (unique): its findings name it"))?;
        let lower_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
        let well_formed = name.len() <= 63
            && name.chars().all(|c| lower_alnum(c) || c == '-' || c == '.')
            && name.starts_with(lower_alnum)
            && name.ends_with(lower_alnum);
        if !well_formed {
            return Err(format!(
                "{at}.name: bad name {name:?}: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 characters (it labels metrics and alerts)"
            ));
        }
        if out.iter().any(|e| e.name == name) {
            return Err(format!("{at}.name: {name:?} names another exception too: names are unique"));
        }
        if raw.rules.is_empty() {
            return Err(format!("{at}.rules: list the rule IDs it allows (see `ha-guard rules`)"));
        }
        for rule in &raw.rules {
            if catalogue.rule(rule).is_none() {
                return Err(format!("{at}.rules: unknown rule ID {rule:?} (see `ha-guard rules`)"));
            }
        }
        let reason = raw.reason.filter(|r| !r.trim().is_empty()).ok_or_else(|| {
            format!("{at}.reason: an exception needs a reason: say why these findings are safe to allow")
        })?;
        let m = raw.matching.ok_or_else(|| {
            format!("{at}.match: say what it covers (kinds, namespaces, names, selector, namespaceSelector)")
        })?;
        let mut kinds = Vec::new();
        for k in &m.kinds {
            kinds.push(kind_named(k).ok_or_else(|| {
                let known: Vec<&str> = EXCEPTION_KINDS.iter().map(|k| k.as_str()).collect();
                format!("{at}.match.kinds: unknown kind {k:?} ({})", known.join(", "))
            })?);
        }
        let globs = |list: &[String], key: &str, dots: bool| -> Result<Vec<Glob>, String> {
            list.iter().map(|p| Glob::parse(p, dots).map_err(|e| format!("{at}.match.{key}: {e}"))).collect()
        };
        let namespaces = globs(&m.namespaces, "namespaces", false)?;
        let names = globs(&m.names, "names", true)?;
        let selector =
            m.selector.map(|s| selector_of(s, "match.selector")).transpose().map_err(|e| format!("{at}.{e}"))?;
        let namespace_selector = m
            .namespace_selector
            .map(|s| selector_of(s, "match.namespaceSelector"))
            .transpose()
            .map_err(|e| format!("{at}.{e}"))?;
        scope(&at, raw.cluster_wide == Some(true), &kinds, &namespaces, &names, &selector, &namespace_selector)?;
        let expires = match raw.expires {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(text)) => Some(text.parse::<Date>().map_err(|_| {
                format!("{at}.expires: bad date {text:?}: expected YYYY-MM-DD (the first day it no longer applies)")
            })?),
            Some(other) => {
                return Err(format!(
                    "{at}.expires: bad date {other}: expected YYYY-MM-DD (the first day it no longer applies)"
                ));
            }
        };
        out.push(Exception {
            name,
            rules: raw.rules,
            kinds,
            namespaces,
            names,
            selector,
            namespace_selector,
            cluster_wide: raw.cluster_wide == Some(true),
            reason,
            owner: raw.owner.filter(|o| !o.trim().is_empty()),
            expires,
        });
    }
    Ok(out)
}

/// Checks what an exception's match covers (`at` names it): never every object, however it is
/// spelled (`*` globs, every kind, empty selectors), and only some namespaces unless it says
/// `clusterWide: true`. An object `selector` alone is no scope: whoever writes a Deployment can
/// give it the labels, in any namespace.
fn scope(
    at: &str,
    cluster_wide: bool,
    kinds: &[Kind],
    namespaces: &[Glob],
    names: &[Glob],
    selector: &Option<LabelSelector>,
    namespace_selector: &Option<LabelSelector>,
) -> Result<(), String> {
    let every_kind = kinds.is_empty() || EXCEPTION_KINDS.iter().all(|k| kinds.contains(k));
    let every_ns_name = namespaces.is_empty() || every_name(namespaces);
    let every_ns_label = namespace_selector.as_ref().is_none_or(every_namespace);
    let every_object_name = names.is_empty() || every_name(names);
    let every_label = selector.as_ref().is_none_or(selector::is_empty);
    if every_kind && every_ns_name && every_ns_label && every_object_name && every_label {
        return Err(format!(
            "{at}.match: it matches every object (`*` globs, every kind and empty selectors match everything): name \
             kinds, namespaces, names or a selector (turn the rule off in `rules:` to allow it everywhere)"
        ));
    }
    let scoped = !every_ns_name || !every_ns_label;
    let cluster_scoped = !kinds.is_empty() && kinds.iter().all(|k| k.is_cluster_scoped());
    let given = |k: &str| format!("{at}.match.{k}");
    let (key, why) = if !namespaces.is_empty() && every_ns_name {
        let list: Vec<&str> = namespaces.iter().map(Glob::as_str).collect();
        (given("namespaces"), format!("{list:?} matches every namespace"))
    } else if namespace_selector.is_some() && every_ns_label {
        (
            given("namespaceSelector"),
            "an empty selector (or one on kubernetes.io/metadata.name alone) matches every namespace".to_string(),
        )
    } else {
        (format!("{at}.match"), "neither namespaces nor a namespaceSelector narrows it".to_string())
    };
    if cluster_scoped && (!namespaces.is_empty() || namespace_selector.is_some()) {
        return Err(format!(
            "{}: the kinds it names are cluster-scoped, so no namespace ever matches them: remove the \
             namespace match and say clusterWide: true",
            if namespaces.is_empty() { given("namespaceSelector") } else { given("namespaces") }
        ));
    }
    match (cluster_wide, scoped) {
        (false, false) if cluster_scoped => Err(format!(
            "{at}.clusterWide: the kinds it names are cluster-scoped, so it applies cluster-wide: say \
             clusterWide: true"
        )),
        (false, false) => Err(format!(
            "{key}: it would apply in every namespace ({why}), so anyone who can write a matching object in \
             any namespace (give a Deployment the labels its selector asks for) is exempted: scope it with \
             match.namespaces (names or globs other than *) or a non-empty match.namespaceSelector, or say \
             clusterWide: true if it is meant for the whole cluster"
        )),
        (true, true) => Err(format!(
            "{at}.clusterWide: true says it applies in every namespace, but its match names some: remove \
             clusterWide, or the namespace match"
        )),
        _ => Ok(()),
    }
}

/// The overrides of the file (`overrides:`), checked: errors name the override by its place.
pub fn parse_overrides(values: &[serde_json::Value], catalogue: &Catalogue) -> Result<Vec<Override>, String> {
    let mut out = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let at = format!("overrides[{i}]");
        let raw: RawOverride = decode(value).map_err(|e| format!("{at}.{e}"))?;
        let selector = raw
            .namespace_selector
            .ok_or_else(|| format!("{at}.namespaceSelector: say which namespaces (by their labels) it applies to"))?;
        let namespace_selector = selector_of(selector, "namespaceSelector").map_err(|e| format!("{at}.{e}"))?;
        if every_namespace(&namespace_selector) {
            return Err(format!(
                "{at}.namespaceSelector: an empty selector matches every namespace (as does one on kubernetes.io/metadata.name alone): set the action in `rules:` instead"
            ));
        }
        let mut rules = BTreeMap::new();
        for (id, value) in raw.rules.unwrap_or_default() {
            if catalogue.rule(&id).is_none() {
                return Err(format!("{at}.rules.{id}: unknown rule ID (see `ha-guard rules`)"));
            }
            let action = Action::parse(&value)
                .ok_or_else(|| format!("{at}.rules.{id}: bad value {value:?}: expected deny, warn or off"))?;
            rules.insert(id, action);
        }
        if rules.is_empty() {
            return Err(format!("{at}.rules: name the rules and their actions (rule-id: deny | warn | off)"));
        }
        out.push(Override { namespace_selector, rules });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_star_stands_for_any_run_of_characters() {
        let g = |p: &str| Glob::parse(p, true).unwrap();
        assert!(g("team-*").matches("team-a") && g("team-*").matches("team-"));
        assert!(!g("team-*").matches("team") && !g("team-*").matches("xteam-a"));
        assert!(g("*-prod").matches("shop-prod") && !g("*-prod").matches("shop-prod2"));
        assert!(g("a*b*c").matches("abc") && g("a*b*c").matches("a-b-b-c") && !g("a*b*c").matches("acb"));
        assert!(g("*").matches("") && g("*").matches("anything"));
        assert!(g("exact").matches("exact") && !g("exact").matches("exactly"));
        assert!(!g("ab*ba").matches("aba"), "the two ends do not share a character");
        assert!(g("cert-manager.io*").matches("cert-manager.io-webhook"));
    }

    #[test]
    fn a_bad_glob_names_the_character() {
        for (bad, what) in [("team_?", "'_'"), ("Team-a", "'T'"), ("a[b]", "'['"), ("x.y", "'.'")] {
            let e = Glob::parse(bad, false).unwrap_err();
            assert!(e.contains(what) && e.contains("the only wildcard is *"), "{bad}: {e}");
        }
        assert!(Glob::parse("x.y", true).is_ok(), "object names may hold dots");
        assert!(Glob::parse("", false).unwrap_err().contains("empty"));
    }
}

//! The configuration (DESIGN.md §5): per-rule actions, mutation switches, exempt namespaces, the
//! CSI controller images, ratcheting, and a platform team's exceptions and overrides ([`policy`]).
//! Parsed from the file's text against a [`Catalogue`] (the registry's): unknown IDs and bad
//! values are errors naming the key. Reading the file is the shells' business.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::catalogue::{Action, Catalogue, Mutation, Rule};
use crate::core::model::selector;

pub mod policy;

pub use policy::{Exception, Glob, Matched, Override};

type Labels = BTreeMap<String, String>;

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub rules: BTreeMap<String, Action>,
    pub mutations: BTreeMap<String, bool>,
    /// Names or `*` globs ([`Glob`], checked when parsed).
    pub exempt_namespaces: Vec<String>,
    pub csi_controller_images: Vec<String>,
    pub ratchet: bool,
    /// `mode: observe`: the webhook refuses nothing and patches nothing, cluster-wide.
    pub mode: Mode,
    pub exceptions: Vec<Exception>,
    pub overrides: Vec<Override>,
}

/// What the webhook does with its verdicts, cluster-wide (config `mode`). Pod Security
/// Admission's `warn`/`audit` against its `enforce`: in `observe` every deny is answered as a
/// warning and no mutation is applied, while `check`, the audit and its reports judge as `enforce`
/// would, so they list what enforcing would refuse. The namespace label `ha-guard.io/mode` narrows
/// it further (`warn`, `off`), never widens it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Denies refused, mutations applied (the default).
    #[default]
    Enforce,
    /// Denies answered as warnings, no mutation applied: an observe-only install.
    Observe,
}

impl Mode {
    pub fn parse(value: &str) -> Option<Mode> {
        match value {
            "enforce" => Some(Mode::Enforce),
            "observe" => Some(Mode::Observe),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Observe => "observe",
        }
    }
}

pub const DEFAULT_CSI_CONTROLLER_IMAGES: [&str; 4] =
    ["csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"];

impl Default for Config {
    fn default() -> Self {
        Config {
            rules: BTreeMap::new(),
            mutations: BTreeMap::new(),
            exempt_namespaces: Vec::new(),
            csi_controller_images: DEFAULT_CSI_CONTROLLER_IMAGES.iter().map(|s| s.to_string()).collect(),
            ratchet: true,
            mode: Mode::Enforce,
            exceptions: Vec::new(),
            overrides: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    #[error("{file}: cannot read: {message}")]
    Read { file: String, message: String },
}

/// The file as written, before its IDs and values are checked.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    rules: Option<BTreeMap<String, String>>,
    #[serde(default)]
    mutations: Option<BTreeMap<String, bool>>,
    #[serde(default)]
    exempt_namespaces: Option<Vec<String>>,
    #[serde(default)]
    csi_controller_images: Option<Vec<String>>,
    #[serde(default)]
    ratchet: Option<bool>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    exceptions: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    overrides: Option<Vec<serde_json::Value>>,
}

impl Config {
    /// The cluster-wide action for `rule` given the action the rule chose for this case.
    pub fn action(&self, rule: &Rule, natural: Action) -> Action {
        self.rules.get(rule.id).copied().unwrap_or(natural)
    }

    /// The action for `rule` in a namespace with `namespace_labels`: the cluster-wide one, then
    /// each override whose namespaceSelector matches, in file order (the last one naming the rule
    /// wins). Unknown labels match no override.
    pub fn action_in(&self, rule: &Rule, natural: Action, namespace_labels: Option<&Labels>) -> Action {
        let mut action = self.action(rule, natural);
        if let Some(labels) = namespace_labels {
            for o in &self.overrides {
                if let Some(a) = o.rules.get(rule.id)
                    && selector::matches(&o.namespace_selector, labels)
                {
                    action = *a;
                }
            }
        }
        action
    }

    /// The action for `rule` in a namespace whose labels are not known, when the decision must be
    /// no weaker than the configuration could make it there: the strictest (deny, then warn, then
    /// off) of the cluster-wide action and every override's for the rule (any of them may be the
    /// one that applies).
    pub fn strictest_action(&self, rule: &Rule, natural: Action) -> Action {
        let rank = |a: Action| match a {
            Action::Off => 0,
            Action::Warn => 1,
            Action::Deny => 2,
        };
        self.overrides
            .iter()
            .filter_map(|o| o.rules.get(rule.id).copied())
            .fold(self.action(rule, natural), |a, b| if rank(b) > rank(a) { b } else { a })
    }

    /// Whether `rule` is off everywhere: cluster-wide, and in no override turned on again.
    pub fn is_off(&self, rule: &Rule) -> bool {
        self.rules.get(rule.id) == Some(&Action::Off)
            && !self.overrides.iter().any(|o| o.rules.get(rule.id).is_some_and(|a| *a != Action::Off))
    }

    /// Whether `rule` may deny somewhere: cluster-wide or in an override.
    pub fn may_deny(&self, rule: &Rule, natural: Action) -> bool {
        self.action(rule, natural) == Action::Deny
            || self.overrides.iter().any(|o| o.rules.get(rule.id) == Some(&Action::Deny))
    }

    /// Whether deciding needs the namespace's labels (an override, or an exception that selects
    /// namespaces by label).
    pub fn reads_namespace_labels(&self) -> bool {
        !self.overrides.is_empty() || self.exceptions.iter().any(|e| e.namespace_selector.is_some())
    }

    /// The exception that allows a finding of `rule` matched as `m` on `today`, if any (the first
    /// in file order).
    pub fn exception_for(&self, rule: &str, m: &Matched, today: Option<policy::Date>) -> Option<&Exception> {
        self.exceptions.iter().find(|e| e.applies_on(today) && e.covers(rule, m))
    }

    pub fn mutation_on(&self, mutation: &Mutation) -> bool {
        self.mutations.get(mutation.id).copied().unwrap_or(mutation.default_on)
    }

    /// Whether the webhook only observes (config `mode: observe`): no deny, no patch.
    pub fn observes(&self) -> bool {
        self.mode == Mode::Observe
    }

    pub fn namespace_exempt(&self, namespace: &str) -> bool {
        self.exempting(namespace).is_some()
    }

    /// The `exemptNamespaces` entry (a name or a glob) that exempts `namespace`, if one does.
    pub fn exempting(&self, namespace: &str) -> Option<&str> {
        if namespace.is_empty() {
            return None;
        }
        self.exempt_namespaces.iter().find(|n| policy::glob_matches(n, namespace)).map(String::as_str)
    }

    /// Parses and checks a configuration against the rules and mutations of `catalogue`; `file`
    /// names it in errors.
    pub fn parse(text: &str, file: &str, catalogue: &Catalogue) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { file: file.to_string(), message };
        let raw: Option<RawConfig> = if text.trim().is_empty() {
            None
        } else {
            serde_saphyr::from_str(text).map_err(|e| invalid(e.to_string()))?
        };
        let raw = raw.unwrap_or_default();
        let mut config = Config::default();
        for (id, value) in raw.rules.unwrap_or_default() {
            if catalogue.rule(&id).is_none() {
                return Err(invalid(format!("rules.{id}: unknown rule ID (see `ha-guard rules`)")));
            }
            let action = Action::parse(&value)
                .ok_or_else(|| invalid(format!("rules.{id}: bad value {value:?}: expected deny, warn or off")))?;
            config.rules.insert(id, action);
        }
        for (id, on) in raw.mutations.unwrap_or_default() {
            if catalogue.mutation(&id).is_none() {
                return Err(invalid(format!("mutations.{id}: unknown mutation ID (see `ha-guard rules`)")));
            }
            config.mutations.insert(id, on);
        }
        if let Some(ns) = raw.exempt_namespaces {
            if let Some(bad) = ns.iter().find(|n| n.is_empty()) {
                return Err(invalid(format!("exemptNamespaces: bad value {bad:?}: a namespace name is not empty")));
            }
            for n in &ns {
                Glob::parse(n, false).map_err(|e| invalid(format!("exemptNamespaces: {e}")))?;
            }
            config.exempt_namespaces = ns;
        }
        if let Some(images) = raw.csi_controller_images {
            if images.iter().any(String::is_empty) {
                return Err(invalid("csiControllerImages: bad value \"\": an image name is not empty".into()));
            }
            config.csi_controller_images = images;
        }
        if let Some(r) = raw.ratchet {
            config.ratchet = r;
        }
        if let Some(list) = raw.exceptions {
            config.exceptions = policy::parse_exceptions(&list, catalogue).map_err(invalid)?;
        }
        if let Some(list) = raw.overrides {
            config.overrides = policy::parse_overrides(&list, catalogue).map_err(invalid)?;
        }
        if let Some(mode) = raw.mode {
            config.mode = Mode::parse(&mode)
                .ok_or_else(|| invalid(format!("mode: bad value {mode:?}: expected enforce or observe")))?;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::declare_rule!(PDB_BLOCKS_EVICTION, "pdb-blocks-eviction", Deny, "test");
    crate::declare_rule!(PDB_MISSING, "pdb-missing", Warn, "test");
    crate::declare_rule!(PDB_OVERLAP, "pdb-overlap", Deny, "test");
    crate::declare_rule!(RECREATE_MULTI_REPLICA, "recreate-multi-replica", Warn, "test");
    crate::declare_rule!(TERMINATION_GRACE_ZERO, "termination-grace-zero", Warn, "test");
    crate::declare_mutation!(INJECT_SPREAD_SELECTOR, "inject-spread-selector", on, "test", ignored: &[]);
    crate::declare_mutation!(INJECT_DEFAULT_SPREAD, "inject-default-spread", off, "test", ignored: &[]);
    crate::declare_mutation!(INJECT_MATCH_LABEL_KEYS, "inject-match-label-keys", off, "test", ignored: &[]);
    /// A catalogue of a few rules and mutations: the configuration knows only what it is given.
    static CATALOGUE: Catalogue = Catalogue {
        rules: &[&[&PDB_BLOCKS_EVICTION, &PDB_MISSING, &PDB_OVERLAP, &RECREATE_MULTI_REPLICA, &TERMINATION_GRACE_ZERO]],
        mutations: &[&INJECT_SPREAD_SELECTOR, &INJECT_DEFAULT_SPREAD, &INJECT_MATCH_LABEL_KEYS],
    };

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, "ha-guard.yaml", &CATALOGUE)
    }

    fn message(e: ConfigError) -> String {
        e.to_string()
    }

    #[test]
    fn the_documented_example_parses() {
        let c = parse(
            "rules:\n  recreate-multi-replica: deny\nmutations:\n  inject-default-spread: true\n\
             exemptNamespaces: [kube-system]\ncsiControllerImages: [csi-provisioner]\nratchet: false\n",
        )
        .unwrap();
        assert_eq!(c.rules["recreate-multi-replica"], Action::Deny);
        assert!(c.mutation_on(&INJECT_DEFAULT_SPREAD));
        assert!(c.mutation_on(&INJECT_SPREAD_SELECTOR), "on by default");
        assert!(!c.mutation_on(&INJECT_MATCH_LABEL_KEYS), "off by default");
        assert!(c.namespace_exempt("kube-system"));
        assert_eq!(c.csi_controller_images, ["csi-provisioner"]);
        assert!(!c.ratchet);
    }

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(parse("").unwrap(), Config::default());
        assert_eq!(parse("# nothing\n").unwrap(), Config::default());
        assert!(Config::default().ratchet);
    }

    #[test]
    fn unknown_rule_names_the_key() {
        let e = message(parse("rules:\n  no-such-rule: deny\n").unwrap_err());
        assert!(e.contains("ha-guard.yaml") && e.contains("rules.no-such-rule") && e.contains("unknown rule"), "{e}");
    }

    #[test]
    fn bad_action_names_the_key_and_the_value() {
        let e = message(parse("rules:\n  pdb-missing: block\n").unwrap_err());
        assert!(e.contains("rules.pdb-missing") && e.contains("\"block\"") && e.contains("deny, warn or off"), "{e}");
    }

    #[test]
    fn unknown_mutation_names_the_key() {
        let e = message(parse("mutations:\n  inject-everything: true\n").unwrap_err());
        assert!(e.contains("mutations.inject-everything"), "{e}");
    }

    #[test]
    fn unknown_top_level_key_is_named() {
        let e = message(parse("ratchett: true\n").unwrap_err());
        assert!(e.contains("ratchett"), "{e}");
    }

    #[test]
    fn bad_type_is_an_error() {
        let e = message(parse("ratchet: sometimes\n").unwrap_err());
        assert!(e.contains("ha-guard.yaml"), "{e}");
        let e = message(parse("mutations:\n  inject-default-spread: maybe\n").unwrap_err());
        assert!(e.contains("ha-guard.yaml"), "{e}");
    }

    #[test]
    fn mode_is_enforce_unless_observe_is_set() {
        assert_eq!(parse("").unwrap().mode, Mode::Enforce);
        assert!(!parse("mode: enforce\n").unwrap().observes());
        let c = parse("mode: observe\nrules:\n  pdb-missing: deny\n").unwrap();
        assert!(c.observes());
        assert_eq!(c.action(&PDB_MISSING, Action::Warn), Action::Deny, "the configured action is kept");
        assert!(c.mutation_on(&INJECT_SPREAD_SELECTOR), "mutations stay configured: the webhook skips them");
    }

    #[test]
    fn bad_mode_names_the_key_and_the_values() {
        for bad in ["warn", "Observe", "dry-run"] {
            let e = message(parse(&format!("mode: {bad}\n")).unwrap_err());
            assert!(
                e.contains("ha-guard.yaml")
                    && e.contains(&format!("mode: bad value \"{bad}\""))
                    && e.contains("enforce or observe"),
                "{e}"
            );
        }
    }

    /// An exception allowing `recreate-multi-replica` with `fields` (its match, and anything else).
    fn exception(fields: &str) -> Result<Config, ConfigError> {
        parse(&format!(
            "exceptions:\n  - name: vendor\n    rules: [recreate-multi-replica]\n    reason: by design\n{fields}"
        ))
    }

    fn refused(fields: &str) -> String {
        message(exception(fields).expect_err(fields))
    }

    #[test]
    fn an_exception_matched_by_an_object_selector_alone_is_refused() {
        let e = refused("    match: {selector: {matchLabels: {app: vendor}}}\n");
        assert!(e.contains("ha-guard.yaml: exceptions[0] (vendor).match: it would apply in every namespace"), "{e}");
        assert!(
            e.contains("match.namespaces") && e.contains("match.namespaceSelector") && e.contains("clusterWide: true"),
            "the fix: {e}"
        );
        // Kinds and names do not scope it to namespaces either.
        let e = refused("    match: {kinds: [Deployment], names: [vendor-operator]}\n");
        assert!(e.contains("(vendor).match: it would apply in every namespace"), "{e}");
    }

    #[test]
    fn cluster_wide_true_accepts_an_exception_in_every_namespace() {
        let c = exception("    clusterWide: true\n    match: {selector: {matchLabels: {app: vendor}}}\n").unwrap();
        assert!(c.exceptions[0].cluster_wide);
        let c =
            exception("    clusterWide: true\n    match: {kinds: [Deployment], names: [vendor-operator]}\n").unwrap();
        assert!(c.exceptions[0].cluster_wide);
        let e = refused("    clusterWide: false\n    match: {selector: {matchLabels: {app: vendor}}}\n");
        assert!(e.contains("(vendor).match: it would apply in every namespace"), "false says nothing: {e}");
        let scoped = exception("    match: {namespaces: [vendor], selector: {matchLabels: {app: vendor}}}\n").unwrap();
        assert!(!scoped.exceptions[0].cluster_wide, "absent: false");
        let e = refused("    clusterWide: true\n    match: {namespaces: [vendor]}\n");
        assert!(
            e.contains("(vendor).clusterWide: true says it applies in every namespace, but its match names some"),
            "{e}"
        );
    }

    #[test]
    fn namespaces_that_match_every_namespace_are_no_scope() {
        for spelled in ["[\"*\"]", "[\"**\"]", "[team-a, \"*\"]", "[\"***\"]"] {
            let e = refused(&format!("    match: {{kinds: [Deployment], namespaces: {spelled}}}\n"));
            assert!(
                e.contains("(vendor).match.namespaces: it would apply in every namespace")
                    && e.contains("matches every namespace"),
                "{spelled}: {e}"
            );
        }
        // Every first character, one glob each.
        let every: Vec<String> = ('a'..='z').chain('0'..='9').map(|c| format!("\"{c}*\"")).collect();
        let e = refused(&format!("    match: {{kinds: [Deployment], namespaces: [{}]}}\n", every.join(", ")));
        assert!(e.contains("(vendor).match.namespaces: it would apply in every namespace"), "{e}");
        let most: Vec<&String> = every.iter().filter(|g| *g != "\"q*\"").collect();
        let most: Vec<&str> = most.iter().map(|g| g.as_str()).collect();
        assert!(
            exception(&format!("    match: {{kinds: [Deployment], namespaces: [{}]}}\n", most.join(", "))).is_ok(),
            "q is left out"
        );
        assert!(exception("    match: {namespaces: [\"tigera-*\"]}\n").is_ok(), "a glob with a name in it scopes");
    }

    #[test]
    fn an_empty_namespace_selector_is_no_scope() {
        for spelled in [
            "{}",
            "{matchLabels: {}}",
            "{matchExpressions: []}",
            "{matchExpressions: [{key: kubernetes.io/metadata.name, operator: Exists}]}",
        ] {
            let e = refused(&format!("    match: {{kinds: [Deployment], namespaceSelector: {spelled}}}\n"));
            assert!(
                e.contains("(vendor).match.namespaceSelector: it would apply in every namespace"),
                "{spelled}: {e}"
            );
        }
        let c = exception("    match: {kinds: [Deployment], namespaceSelector: {matchLabels: {vendor: tigera}}}\n")
            .unwrap();
        assert!(c.exceptions[0].namespace_selector.is_some());
    }

    #[test]
    fn a_match_of_every_object_is_refused_however_spelled_even_cluster_wide() {
        for spelled in [
            "{names: [\"*\"]}",
            "{namespaces: [\"*\"], names: [\"**\"]}",
            "{selector: {}}",
            "{namespaceSelector: {}, selector: {matchLabels: {}}}",
            "{kinds: [Deployment, StatefulSet, PodDisruptionBudget, HorizontalPodAutoscaler, ScaledObject, PersistentVolumeClaim, Service, ValidatingWebhookConfiguration, MutatingWebhookConfiguration]}",
        ] {
            let e = refused(&format!("    clusterWide: true\n    match: {spelled}\n"));
            assert!(e.contains("(vendor).match: it matches every object"), "{spelled}: {e}");
        }
    }

    #[test]
    fn cluster_scoped_kinds_need_cluster_wide_and_no_namespace_match() {
        let e = refused("    match: {kinds: [ValidatingWebhookConfiguration], names: [vendor]}\n");
        assert!(e.contains("(vendor).clusterWide: the kinds it names are cluster-scoped"), "{e}");
        let e = refused("    match: {kinds: [ValidatingWebhookConfiguration], namespaces: [vendor]}\n");
        assert!(
            e.contains(
                "(vendor).match.namespaces: the kinds it names are cluster-scoped, so no namespace ever matches"
            ),
            "{e}"
        );
        assert!(
            exception("    clusterWide: true\n    match: {kinds: [ValidatingWebhookConfiguration], names: [vendor]}\n")
                .is_ok()
        );
    }

    #[test]
    fn a_tenant_who_adds_the_labels_in_another_namespace_is_not_exempted() {
        use crate::core::model::{Kind, ObjectRef};
        let c = exception("    match: {namespaces: [vendor], selector: {matchLabels: {app: vendor}}}\n").unwrap();
        let labels: Labels = [("app".to_string(), "vendor".to_string())].into();
        let in_ns = |namespace: &str| {
            let object = ObjectRef::new(Kind::Deployment, namespace, "operator");
            let m = Matched { object: &object, labels: Some(&labels), namespace_labels: None };
            c.exception_for("recreate-multi-replica", &m, None).is_some()
        };
        assert!(in_ns("vendor"), "the vendor's own Deployment");
        assert!(!in_ns("tenant"), "the same labels in a tenant's namespace");
        let tier: Labels = [("tier".to_string(), "vendor".to_string())].into();
        let c = exception(
            "    match: {namespaceSelector: {matchLabels: {tier: vendor}}, selector: {matchLabels: {app: vendor}}}\n",
        )
        .unwrap();
        let object = ObjectRef::new(Kind::Deployment, "tenant", "operator");
        let other: Labels = [("tier".to_string(), "tenant".to_string())].into();
        for (namespace_labels, allowed) in [(Some(&tier), true), (Some(&other), false), (None, false)] {
            let m = Matched { object: &object, labels: Some(&labels), namespace_labels };
            assert_eq!(c.exception_for("recreate-multi-replica", &m, None).is_some(), allowed, "{namespace_labels:?}");
        }
    }

    #[test]
    fn config_overrides_a_rule_action() {
        let c = parse("rules:\n  pdb-blocks-eviction: warn\n  termination-grace-zero: off\n").unwrap();
        assert_eq!(c.action(&PDB_BLOCKS_EVICTION, Action::Deny), Action::Warn);
        assert_eq!(c.action(&TERMINATION_GRACE_ZERO, Action::Warn), Action::Off);
        assert!(c.is_off(&TERMINATION_GRACE_ZERO));
        assert_eq!(c.action(&PDB_OVERLAP, Action::Deny), Action::Deny);
    }
}

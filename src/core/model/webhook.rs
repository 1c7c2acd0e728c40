//! Admission webhook configurations (`admissionregistration.k8s.io/v1`), in the shape
//! `webhook-fail-closed-unavailable` reads.
//!
//! Hand-written rather than k8s-openapi's types: those decode `clientConfig.caBundle` as base64,
//! and manifests often carry a placeholder there (a CA injector fills it at install), which would
//! make the whole object undecodable for a field no rule reads. Unknown fields are ignored.

use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;

use super::{selector, words};

/// A ValidatingWebhookConfiguration or a MutatingWebhookConfiguration.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WebhookConfiguration {
    /// Set after decoding: which of the two kinds it is (`kind()`, in `object`).
    #[serde(skip)]
    pub mutating: bool,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub webhooks: Option<Vec<Webhook>>,
}

impl WebhookConfiguration {
    pub fn webhooks(&self) -> &[Webhook] {
        self.webhooks.as_deref().unwrap_or_default()
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    #[serde(default)]
    pub name: String,
    /// `Fail` or `Ignore`; unset is `Fail` in admissionregistration/v1.
    pub failure_policy: Option<String>,
    #[serde(default)]
    pub client_config: Option<ClientConfig>,
    pub rules: Option<Vec<RuleWithOperations>>,
    pub namespace_selector: Option<LabelSelector>,
    pub object_selector: Option<LabelSelector>,
}

impl Webhook {
    /// The apiserver refuses the writes it intercepts when it cannot call it: `failurePolicy:
    /// Fail`, or unset (v1's default).
    pub fn fail_closed(&self) -> bool {
        self.failure_policy.as_deref() != Some("Ignore")
    }

    /// What it intercepts, for messages: each rule's resources (with their API groups),
    /// operations and scope, then where: `pods CREATE in namespaces matching
    /// kubernetes.io/metadata.name notin (kube-system)`; `jobs (batch) CREATE,UPDATE in every namespace`.
    pub fn intercepts(&self) -> String {
        let rules = self.rules.iter().flatten();
        let what = if rules.clone().next().is_none() {
            "nothing (no rules)".to_string()
        } else {
            words::list(rules.map(describe_rule), words::NAMED, "; ")
        };
        let namespaces = match &self.namespace_selector {
            Some(s) if !selector::is_empty(s) => format!("in namespaces matching {}", selector::render(s)),
            _ => "in every namespace".to_string(),
        };
        let objects = match &self.object_selector {
            Some(s) if !selector::is_empty(s) => format!(", objects matching {}", selector::render(s)),
            _ => String::new(),
        };
        format!("{what} {namespaces}{objects}")
    }
}

/// `pods CREATE`, `jobs (batch) CREATE,UPDATE`, `all resources (cert-manager.io, acme.cert-manager.io)
/// CREATE,UPDATE`, `namespaces (cluster-scoped) every operation`.
fn describe_rule(rule: &RuleWithOperations) -> String {
    let list = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
    let resources: Vec<String> = list(&rule.resources)
        .into_iter()
        .map(|r| match r.as_str() {
            "*" => "all resources".to_string(),
            "*/*" => "all resources and subresources".to_string(),
            _ => r,
        })
        .collect();
    let groups = list(&rule.api_groups);
    let groups = match groups.as_slice() {
        [] => String::new(),
        [only] if only.is_empty() => String::new(),
        [only] if only == "*" => " (any API group)".to_string(),
        _ => format!(" ({})", words::names(groups.iter().map(|g| if g.is_empty() { "core" } else { g.as_str() }))),
    };
    let operations = list(&rule.operations);
    let operations =
        if operations.iter().any(|o| o == "*") { "every operation".to_string() } else { operations.join(",") };
    let scope = match rule.scope.as_deref() {
        Some("Cluster") => " (cluster-scoped)",
        Some("Namespaced") => " (namespaced)",
        _ => "",
    };
    format!("{}{groups}{scope} {operations}", words::list(&resources, words::NAMED, ","))
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ClientConfig {
    pub service: Option<ServiceReference>,
    pub url: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ServiceReference {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub name: String,
}

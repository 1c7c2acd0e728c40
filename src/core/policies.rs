//! The admission policies generated from the registry (DESIGN.md §4 "In the apiserver as well",
//! §5 `ha-guard policies`): for every rule and mutation with a CEL form
//! ([`CelRule`], [`CelMutation`]), the ValidatingAdmissionPolicies and MutatingAdmissionPolicies
//! (admissionregistration.k8s.io/v1) and their bindings that make the apiserver itself give the
//! webhook's verdicts, for one configuration. Pure: a configuration in, JSON objects out.
//!
//! Per rule up to two validating policies, each with the same variables: `ha-guard-<rule-id>`,
//! bound with `validationActions: [Deny]`, fails on the findings the webhook would deny, and
//! `ha-guard-<rule-id>-warn`, bound with `[Warn]`, on those it would warn about (`mode: observe`:
//! only the second, bound with `[Warn, Audit]`). A finding's decision follows `decide`: the
//! configured action (cluster-wide, then the overrides whose namespaceSelector matches
//! `namespaceObject`'s labels), the ratchet on UPDATE (a deny finding at a path where `oldObject`
//! has one too warns, "pre-existing"), a namespace labelled `ha-guard.io/mode: warn`. The message
//! is the webhook's line for each finding (`[rule-id] path: what Fix: fix`, with the downgrade
//! reasons in parentheses), several joined by [`SEPARATOR`] ([`joined`] gives the same from
//! findings).
//!
//! Where the webhook judges alone (said on each object in the annotation [`WEBHOOK_ONLY`]): the
//! objects an exception of the configuration covers (CEL has no clock to judge an expiry, so
//! every excepted object is left out of the policy, expiring or not), an exemption annotation
//! without a reason (the webhook warns that it is ignored), scale subresource writes.
//!
//! No parameter resources (nothing the apiserver could fail to resolve), and `failurePolicy:
//! Ignore`: like the webhooks, a policy that cannot be evaluated must not stop the cluster; every
//! field read is guarded (`has()`, optionals), and tests/e2e_policies.rs holds the expressions to
//! the apiserver's type checking.

use serde_json::{Value, json};

use crate::core::catalogue::{CelMutation, CelPatch, CelResource, CelRule};
use crate::core::config::Config;
use crate::core::config::policy::{Date, Exception};
use crate::core::finding::Finding;
use crate::core::model::{EXEMPT_PREFIX, MODE_LABEL};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// What joins the lines of several findings of one rule in a policy's message (a message may
/// not hold a newline: the apiserver drops it).
pub const SEPARATOR: &str = " | ";
/// The apiserver's limit on a message made by `messageExpression`; a longer one is dropped for
/// the policy's static `message`.
pub const MESSAGE_LIMIT: usize = 5 * 1024;
/// The label every generated object carries, with value `ha-guard`.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The label naming the rule or mutation an object enforces.
pub const RULE_LABEL: &str = "ha-guard.io/rule";
/// The annotation saying what the policy leaves to the webhook (`ha-guard policies` prints it as
/// a comment too).
pub const WEBHOOK_ONLY: &str = "ha-guard.io/webhook-only";
/// The API group and version of the generated objects.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1";

/// Why a deny finding warns, as the webhook's line says it ([`Note::downgrade_reason`](crate::core::finding::Note)).
const PRE_EXISTING: &str = "pre-existing";
const NAMESPACE_WARN: &str = "namespace in warn mode";
const OBSERVE: &str = "observe-only: enforce would deny";

/// The policies and bindings for `config`, from every CEL form of the registry, in catalogue
/// order: each rule's validating policies and bindings, then each mutation's. `today` (UTC, read
/// by the shell) drops the exceptions already expired; `None` keeps them all.
pub fn generate(config: &Config, today: Option<Date>) -> Vec<Value> {
    generate_from(config, today, crate::core::rules::CEL_RULES, crate::core::mutations::CEL_MUTATIONS)
}

/// [`generate`] from the given forms.
pub fn generate_from(
    config: &Config,
    today: Option<Date>,
    rules: &[&CelRule],
    mutations: &[&CelMutation],
) -> Vec<Value> {
    let mut out = Vec::new();
    for r in rules {
        out.extend(validating(config, today, r));
    }
    if !config.observes() {
        for m in mutations.iter().filter(|m| config.mutation_on(m.mutation)) {
            out.extend(mutating(config, m));
        }
    }
    out
}

/// The message a policy of `rule` gives for these lines (one per finding, as the webhook writes
/// them): joined by [`SEPARATOR`], or the policy's static message past [`MESSAGE_LIMIT`].
pub fn joined(rule: &str, lines: &[String]) -> String {
    let text = lines.join(SEPARATOR);
    if text.len() > MESSAGE_LIMIT { static_message(rule) } else { text }
}

/// A finding's line as the webhook writes it (`server::review::respond::line`), for tests that
/// hold the policies to the webhook.
pub fn line_of(f: &Finding) -> String {
    let mut out = format!("[{}] ", f.rule);
    let why: Vec<&str> = f.notes.iter().filter_map(|n| n.downgrade_reason()).collect();
    if !why.is_empty() {
        out.push_str(&format!("({}) ", why.join(", ")));
    }
    out.push_str(&f.path);
    out.push_str(": ");
    f.write_message(&mut out);
    out
}

fn static_message(rule: &str) -> String {
    format!("[{rule}] the findings' description is over 5 KiB: run ha-guard check on the object for them")
}

/// A CEL string literal of `s`.
pub fn cel_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

fn cel_list(items: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let items: Vec<String> = items.into_iter().map(|s| cel_string(s.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// A glob of the configuration (`*` any run of characters) as an anchored RE2 pattern.
pub fn glob_regex(glob: &str) -> String {
    let parts: Vec<String> = glob.split('*').map(regex_escape).collect();
    format!("^{}$", parts.join(".*"))
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c.to_string() } else { format!("\\{c}") })
        .collect()
}

/// Whether the constant `selector` matches the label map `labels` (a CEL expression).
fn selector_matches(selector: &LabelSelector, labels: &str) -> String {
    let mut terms = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        let k = cel_string(k);
        terms.push(format!("({k} in {labels} && {labels}[{k}] == {})", cel_string(v)));
    }
    for e in selector.match_expressions.iter().flatten() {
        let k = cel_string(&e.key);
        let values = cel_list(e.values.iter().flatten());
        terms.push(match e.operator.as_str() {
            "In" => format!("({k} in {labels} && {labels}[{k}] in {values})"),
            "NotIn" => format!("(!({k} in {labels}) || !({labels}[{k}] in {values}))"),
            "Exists" => format!("({k} in {labels})"),
            "DoesNotExist" => format!("!({k} in {labels})"),
            _ => "false".to_string(),
        });
    }
    if terms.is_empty() { "true".to_string() } else { terms.join(" && ") }
}

/// The variable a CEL form reads the rule IDs from (every rule of the registry, in catalogue
/// order): given only to the policies whose form reads it.
const RULE_IDS: &str = "variables.ruleIds";

const OBJECT_LABELS: &str = "object.metadata.?labels.orValue({})";
const NAMESPACE_LABELS: &str = "variables.namespaceLabels";

/// Whether `e` covers the object under review (its match: kinds, namespaces, names, the object's
/// and its namespace's labels), as [`Exception::covers`] says.
fn exception_covers(e: &Exception) -> String {
    let mut terms = Vec::new();
    if !e.kinds.is_empty() {
        terms.push(format!("request.kind.kind in {}", cel_list(e.kinds.iter().map(|k| k.to_string()))));
    }
    if !e.namespaces.is_empty() {
        let any: Vec<String> = e
            .namespaces
            .iter()
            .map(|g| format!("request.namespace.matches({})", cel_string(&glob_regex(g.as_str()))))
            .collect();
        terms.push(format!("(request.namespace != '' && ({}))", any.join(" || ")));
    }
    if !e.names.is_empty() {
        let any: Vec<String> = e
            .names
            .iter()
            .map(|g| format!("object.metadata.?name.orValue('').matches({})", cel_string(&glob_regex(g.as_str()))))
            .collect();
        terms.push(format!("({})", any.join(" || ")));
    }
    if let Some(s) = &e.selector {
        terms.push(format!("({})", selector_matches(s, OBJECT_LABELS)));
    }
    if let Some(s) = &e.namespace_selector {
        terms.push(format!("({})", selector_matches(s, "namespaceObject.metadata.?labels.orValue({})")));
    }
    if terms.is_empty() { "true".to_string() } else { terms.join(" && ") }
}

fn labels(id: &str) -> Value {
    json!({ MANAGED_BY: "ha-guard", RULE_LABEL: id })
}

/// One resource rule per API group and version (in the order of `resources`), so that no rule
/// names a group, version and resource that do not go together.
fn resource_rules(resources: &[CelResource]) -> Value {
    let mut rules: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for r in resources {
        match rules.iter_mut().find(|(g, v, _)| *g == r.group && *v == r.version) {
            Some((_, _, names)) => names.push(r.resource),
            None => rules.push((r.group, r.version, vec![r.resource])),
        }
    }
    Value::Array(
        rules
            .into_iter()
            .map(|(group, version, names)| {
                json!({
                    "apiGroups": [group],
                    "apiVersions": [version],
                    "resources": names,
                    "operations": ["CREATE", "UPDATE"],
                })
            })
            .collect(),
    )
}

/// The namespaces a binding leaves out: those labelled `ha-guard.io/mode: off` and the exempt
/// namespaces named exactly (globs are match conditions: [`namespace_conditions`]).
fn namespace_selector(config: &Config) -> Value {
    let mut expressions = vec![json!({"key": MODE_LABEL, "operator": "NotIn", "values": ["off"]})];
    let exact: Vec<&str> = config.exempt_namespaces.iter().filter(|n| !n.contains('*')).map(String::as_str).collect();
    if !exact.is_empty() {
        expressions.push(json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": exact}));
    }
    json!({ "matchExpressions": expressions })
}

/// Match conditions for the exempt namespaces given as globs.
fn namespace_conditions(config: &Config) -> Vec<Value> {
    let globs: Vec<&String> = config.exempt_namespaces.iter().filter(|n| n.contains('*')).collect();
    if globs.is_empty() {
        return Vec::new();
    }
    let any: Vec<String> =
        globs.iter().map(|g| format!("request.namespace.matches({})", cel_string(&glob_regex(g)))).collect();
    vec![json!({"name": "not-in-an-exempt-namespace", "expression": format!("!({})", any.join(" || "))})]
}

/// The configured action of a finding `f` (a CEL expression), as `Config::action_in` gives it.
fn action_expression(config: &Config, rule: &CelRule) -> String {
    let id = rule.rule.id;
    let mut action = match config.rules.get(id) {
        Some(a) => cel_string(a.as_str()),
        None => "f.action".to_string(),
    };
    for o in &config.overrides {
        if let Some(a) = o.rules.get(id) {
            action = format!(
                "({} ? {} : {action})",
                selector_matches(&o.namespace_selector, NAMESPACE_LABELS),
                cel_string(a.as_str())
            );
        }
    }
    action
}

/// The webhook's line of finding `f` with `prefix` (a CEL expression) before its path.
fn line_expression(id: &str, prefix: &str) -> String {
    format!("{} + {prefix} + f.path + ': ' + f.what + ' Fix: ' + f.fix", cel_string(&format!("[{id}] ")))
}

/// Whether a deny of `rule` is possible anywhere under `config`: its own action where it denies
/// (a rule that picks per finding declares `deny` as its default), or a configured one.
fn may_deny(config: &Config, rule: &CelRule) -> bool {
    config.may_deny(rule.rule, rule.rule.default)
}

fn validating(config: &Config, today: Option<Date>, rule: &CelRule) -> Vec<Value> {
    let id = rule.rule.id;
    if config.is_off(rule.rule) {
        return Vec::new();
    }
    let observe = config.observes();
    let (deny, also) = if observe { ("warn", format!(", {OBSERVE}")) } else { ("deny", String::new()) };
    let alone = if observe { cel_string(&format!("({OBSERVE}) ")) } else { "''".to_string() };
    let downgraded = |reason: &str| cel_string(&format!("({reason}{also}) "));
    let ratchet = config.ratchet && may_deny(config, rule);
    let pre_existing = if ratchet { "f.path in variables.oldPaths" } else { "false" };
    let warn_mode = format!("{NAMESPACE_LABELS}[?{}].orValue('') == 'warn'", cel_string(MODE_LABEL));
    let decision = format!(
        "[{action}].map(a, a == 'off' ? {{'d': 'off', 'line': ''}} : a == 'warn' ? {{'d': 'warn', 'line': {plain}}} : \
         {pre_existing} ? {{'d': 'warn', 'line': {pre}}} : {warn_mode} ? {{'d': 'warn', 'line': {ns}}} : \
         {{'d': '{deny}', 'line': {enforced}}})[0]",
        action = action_expression(config, rule),
        plain = line_expression(id, "''"),
        pre = line_expression(id, &downgraded(PRE_EXISTING)),
        ns = line_expression(id, &downgraded(NAMESPACE_WARN)),
        enforced = line_expression(id, &alone),
    );
    let mut variables = vec![
        json!({"name": "id", "expression": "request.kind.kind + ' ' + request.namespace + '/' + object.metadata.?name.orValue('')"}),
        json!({"name": "namespaceLabels", "expression": "namespaceObject.metadata.?labels.orValue({})"}),
        json!({"name": "csiImages", "expression": cel_list(&config.csi_controller_images)}),
    ];
    if rule.findings.contains(RULE_IDS) {
        variables.push(json!({"name": "ruleIds", "expression": cel_list(crate::core::rules::all().map(|r| r.id))}));
    }
    variables.push(json!({"name": "findings", "expression": format!("[object].map(o, {})[0]", rule.findings)}));
    if ratchet {
        variables.push(json!({
            "name": "oldPaths",
            "expression": format!("request.operation == 'UPDATE' ? [oldObject].map(o, {})[0].map(f, f.path) : []", rule.findings),
        }));
    }
    variables.push(json!({"name": "decided", "expression": format!("variables.findings.map(f, {decision})")}));

    let mut conditions = namespace_conditions(config);
    let annotation = format!("{EXEMPT_PREFIX}{id}");
    conditions.push(json!({
        "name": "not-exempted-by-annotation",
        "expression": format!(
            "!(object.metadata.?annotations.orValue({{}})[?{}].orValue('').trim() != '')",
            cel_string(&annotation)
        ),
    }));
    let exceptions: Vec<&Exception> = config
        .exceptions
        .iter()
        .filter(|e| e.rules.iter().any(|r| r == id) && (today.is_none() || e.applies_on(today)))
        .collect();
    for e in &exceptions {
        conditions.push(json!({
            "name": format!("not-excepted-{}", sanitize(&e.name)),
            "expression": format!("!({})", exception_covers(e)),
        }));
    }
    let mut webhook_only = vec![
        "scale subresource writes (the webhook only warns on them)".to_string(),
        "an exemption annotation without a reason (the webhook warns that it is ignored)".to_string(),
    ];
    if let Some(part) = rule.partial {
        webhook_only.push(format!("the rest of the rule: this policy covers {part}"));
    }
    for e in &exceptions {
        match e.expires {
            Some(day) => webhook_only.push(format!(
                "the objects exception {} covers (it expires on {day}; CEL has no clock, so they are left out of this \
                 policy before and after that day)",
                e.name
            )),
            None => webhook_only.push(format!("the objects exception {} covers", e.name)),
        }
    }

    let mut out = Vec::new();
    let kinds: Vec<(&str, &str, Value)> = if observe {
        vec![("warn", "-warn", json!(["Warn", "Audit"]))]
    } else if may_deny(config, rule) {
        vec![("deny", "", json!(["Deny"])), ("warn", "-warn", json!(["Warn"]))]
    } else {
        vec![("warn", "-warn", json!(["Warn"]))]
    };
    for (d, suffix, actions) in kinds {
        let name = format!("ha-guard-{id}{suffix}");
        out.push(json!({
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {
                "name": name,
                "labels": labels(id),
                "annotations": {WEBHOOK_ONLY: webhook_only.join("; ")},
            },
            "spec": {
                "failurePolicy": "Ignore",
                "matchConstraints": {"resourceRules": resource_rules(rule.resources)},
                "matchConditions": conditions,
                "variables": variables,
                "validations": [{
                    "expression": format!("!variables.decided.exists(x, x.d == '{d}')"),
                    "messageExpression": format!(
                        "variables.decided.filter(x, x.d == '{d}').map(x, x.line).join({})",
                        cel_string(SEPARATOR)
                    ),
                    "message": static_message(id),
                    "reason": if d == "deny" { "Forbidden" } else { "Invalid" },
                }],
            },
        }));
        out.push(json!({
            "apiVersion": API_VERSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels(id)},
            "spec": {
                "policyName": name,
                "validationActions": actions,
                "matchResources": {"namespaceSelector": namespace_selector(config)},
            },
        }));
    }
    out
}

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c.to_ascii_lowercase() } else { '-' }).collect()
}

fn mutating(config: &Config, m: &CelMutation) -> Vec<Value> {
    let id = m.mutation.id;
    let name = format!("ha-guard-{id}");
    let mut conditions = namespace_conditions(config);
    conditions.push(json!({"name": "something-to-add", "expression": m.when}));
    let mutation = match &m.patch {
        CelPatch::JsonPatch(e) => json!({"patchType": "JSONPatch", "jsonPatch": {"expression": e}}),
        CelPatch::ApplyConfiguration(e) => {
            json!({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": e}})
        }
    };
    vec![
        json!({
            "apiVersion": API_VERSION,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels(id)},
            "spec": {
                "failurePolicy": "Ignore",
                "reinvocationPolicy": "Never",
                "matchConstraints": {"resourceRules": resource_rules(m.resources)},
                "matchConditions": conditions,
                "mutations": [mutation],
            },
        }),
        json!({
            "apiVersion": API_VERSION,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels(id)},
            "spec": {"policyName": name, "matchResources": {"namespaceSelector": namespace_selector(config)}},
        }),
    ]
}

/// `ha-guard policies`' output: each object a YAML document, after a comment saying what the
/// webhook alone judges ([`WEBHOOK_ONLY`]).
pub fn to_yaml(docs: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    for doc in docs {
        out.push_str("---\n");
        if let Some(note) =
            doc.pointer("/metadata/annotations").and_then(|a| a.get(WEBHOOK_ONLY)).and_then(Value::as_str)
        {
            for part in note.split("; ") {
                out.push_str(&format!("# judged by the webhook alone: {part}\n"));
            }
        }
        out.push_str(&serde_saphyr::to_string(doc).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

//! End-to-end: the admission policies `ha-guard policies` generates (src/core/policies.rs) give,
//! on a real kube-apiserver, the webhook's verdicts and messages, rule by rule, and the
//! MutatingAdmissionPolicies store what the webhook's JSON Patch would (DESIGN.md §4 "In the
//! apiserver as well").
//!
//! The generated policies (default configuration) are created, and each must pass the
//! apiserver's type checking (kube-controller-manager's policy status controller writes it) without a warning (a broken CEL expression fails here, not in a
//! cluster). No webhook is registered. Then every object of the judged kinds from the shared
//! corpus, the examples of the covered rules' pages and generated variants (fires / does not /
//! boundary, per covered rule) is written as a server-side dry-run CREATE:
//! - into a namespace no policy binds (the object as the apiserver defaults it);
//! - into one namespace per covered rule, where only that rule's policies (and the mutations) are
//!   bound: the apiserver's denial and warnings there are that rule's (only the first denial of
//!   a request is shown, and warnings past 4 KiB in all are cut: one rule at a time keeps each
//!   whole);
//! - into a namespace where only the mutating policies are bound: the object stored.
//!
//! The webhook's verdict is computed in-process by the core, as `serve` computes it (same
//! configuration, an empty view, a CREATE): its mutation plan applied to the defaulted object,
//! which the apiserver defaults again (as it does after a webhook's patch), must equal the object
//! the mutating policies stored; its findings on that object, per covered rule, give the lines the
//! policies must say (deny / warn / none, message equal). Every difference is printed; any fails.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ha_guard::core::config::Config;
use ha_guard::core::decide::UnknownNamespace;
use ha_guard::core::finding::Decision;
use ha_guard::core::judge::{Asks, Review, judge};
use ha_guard::core::policies;
use ha_guard::core::view::{Absences, Index};
use ha_guard::server::review::{self, respond::line};
use serde_json::{Value, json};
use support::*;

/// The kinds the covered rules and mutations judge: (apiVersion, kind, resource).
const JUDGED: &[(&str, &str, &str)] = &[
    ("apps/v1", "Deployment", "deployments"),
    ("apps/v1", "StatefulSet", "statefulsets"),
    ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
    ("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"),
];
/// The namespace label that says which validating policies bind there (the test's own).
const DIFF_LABEL: &str = "e2e.ha-guard.io/diff";
/// The namespace label that says which run's mutating policies bind there.
const RUN_LABEL: &str = "e2e.ha-guard.io/run";
/// Where no policy binds: the object as the apiserver defaults it.
const PLAIN: &str = "plain";

/// One configuration under test: its policies are renamed with `prefix` and bound only in its
/// namespaces (`<prefix>d-<rule>`, one per rule, and `<prefix>mutations`), which carry `labels`.
struct Run {
    prefix: &'static str,
    config: Config,
    labels: &'static [(&'static str, &'static str)],
}

impl Run {
    fn new(prefix: &'static str, config: &str, labels: &'static [(&'static str, &'static str)]) -> Run {
        let config = ha_guard::core::registry::parse_config(config, "run.yaml").unwrap_or_else(|e| panic!("{e}"));
        Run { prefix, config, labels }
    }

    fn rule_namespace(&self, id: &str) -> String {
        format!("{}d-{id}", self.prefix)
    }

    fn mutations_namespace(&self) -> String {
        format!("{}mutations", self.prefix)
    }

    fn policy(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The labels of one of its namespaces, as the apiserver keeps them.
    fn namespace_labels(&self, ns: &str, diff: Option<&str>) -> BTreeMap<String, String> {
        let mut labels: BTreeMap<String, String> =
            self.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        labels.insert(RUN_LABEL.into(), format!("{}run", self.prefix));
        if let Some(diff) = diff {
            labels.insert(DIFF_LABEL.into(), diff.to_string());
        }
        labels.insert("kubernetes.io/metadata.name".into(), ns.to_string());
        labels
    }

    fn create_namespaces(&self, cp: &ControlPlane, rules: &[&str]) {
        let mut all: Vec<(String, Option<String>)> = vec![(self.mutations_namespace(), None)];
        all.extend(rules.iter().map(|id| (self.rule_namespace(id), Some(self.policy(id)))));
        for (ns, diff) in all {
            let labels = self.namespace_labels(&ns, diff.as_deref());
            let pairs: Vec<(&str, &str)> = labels
                .iter()
                .filter(|(k, _)| k.as_str() != "kubernetes.io/metadata.name")
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            cp.namespace(&ns, &pairs);
        }
    }

    /// The generated policies, renamed, each binding narrowed to this run's namespaces: a rule's
    /// to its own namespace, the mutations' to all of them.
    fn generated(&self) -> Vec<Value> {
        let mut docs = policies::generate(&self.config, None);
        for doc in &mut docs {
            for field in ["/metadata/name", "/spec/policyName"] {
                if let Some(name) = doc.pointer_mut(field) {
                    *name = json!(self.policy(name.as_str().unwrap_or_default()));
                }
            }
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            if !kind.ends_with("Binding") {
                continue;
            }
            let rule = doc["metadata"]["labels"][policies::RULE_LABEL].as_str().unwrap_or_default().to_string();
            let narrowed = if kind.starts_with("Validating") {
                json!({"key": DIFF_LABEL, "operator": "In", "values": [self.policy(&rule)]})
            } else {
                json!({"key": RUN_LABEL, "operator": "In", "values": [format!("{}run", self.prefix)]})
            };
            let expressions = doc["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
                .as_array_mut()
                .expect("a generated binding selects namespaces by expressions");
            expressions.push(narrowed);
        }
        docs
    }
}

/// Waits until the apiserver has type-checked every validating policy, and fails on any warning.
fn type_checked(cp: &ControlPlane, names: &[String]) {
    let mut last = Value::Null;
    let checked = poll("the policies type-checked", Duration::from_secs(60), Duration::from_millis(500), || {
        let out = cp.kubectl(&["get", "validatingadmissionpolicies", "-o", "json"]);
        if !out.ok() {
            return Err(out.output());
        }
        last = out.json();
        let items = last["items"].as_array().cloned().unwrap_or_default();
        let done = names.iter().all(|n| {
            items.iter().any(|p| {
                p["metadata"]["name"] == n.as_str()
                    && p["status"]["observedGeneration"] == p["metadata"]["generation"]
                    && !p["status"]["typeChecking"].is_null()
            })
        });
        if done { Ok(items) } else { Err("not yet".to_string()) }
    });
    let items = checked.unwrap_or_else(|e| panic!("{e}: {last:#}"));
    let mut warnings = Vec::new();
    for p in &items {
        for w in p["status"]["typeChecking"]["expressionWarnings"].as_array().into_iter().flatten() {
            warnings.push(format!("{}: {}: {}", p["metadata"]["name"], w["fieldRef"], w["warning"]));
        }
        for c in p["status"]["conditions"].as_array().into_iter().flatten() {
            if c["status"] != "True" && c["type"] != "" {
                warnings.push(format!("{}: condition {c}", p["metadata"]["name"]));
            }
        }
    }
    assert!(warnings.is_empty(), "the apiserver's type checking warns:\n{}", warnings.join("\n"));
}

/// What one dry-run CREATE got: the status code, the stored object (when admitted), the
/// message (when refused) and the warnings.
#[derive(Debug)]
struct Answer {
    code: u16,
    body: Value,
    warnings: Vec<String>,
}

impl Answer {
    fn ok(&self) -> bool {
        self.code < 300
    }

    fn message(&self) -> String {
        self.body["message"].as_str().unwrap_or_default().to_string()
    }

    /// What policy `name` said: its denial or its warning (the apiserver's prefix taken off).
    fn said_by(&self, name: &str) -> (Option<String>, Option<String>) {
        let denied = format!("ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: ");
        let warned = format!("Validation failed for ValidatingAdmissionPolicy '{name}' with binding '{name}': ");
        let message = self.message();
        let denial =
            (!self.ok()).then(|| message.find(&denied).map(|at| message[at + denied.len()..].to_string())).flatten();
        let warning = self.warnings.iter().find_map(|w| w.strip_prefix(&warned).map(str::to_string));
        (denial, warning)
    }
}

/// A `Warning` header's text (`299 - "text"`, RFC 7234 quoting undone).
fn warning_text(header: &str) -> String {
    let quoted = header.split_once(" \"").map(|(_, q)| q).unwrap_or(header);
    let quoted = quoted.strip_suffix('"').unwrap_or(quoted);
    let mut out = String::new();
    let mut escaped = false;
    for c in quoted.chars() {
        if escaped || c != '\\' {
            out.push(c);
            escaped = false;
        } else {
            escaped = true;
        }
    }
    out
}

struct Api {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Api {
    /// A server-side dry-run CREATE of `obj` in namespace `ns`.
    fn dry_run(&self, ns: &str, resource: (&str, &str), obj: &Value) -> Answer {
        self.send("POST", ns, resource, None, obj, true)
    }

    /// A CREATE, stored.
    fn create(&self, ns: &str, resource: (&str, &str), obj: &Value) -> Answer {
        self.send("POST", ns, resource, None, obj, false)
    }

    /// A server-side dry-run UPDATE (PUT) of `obj`.
    fn dry_run_update(&self, ns: &str, resource: (&str, &str), obj: &Value) -> Answer {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        self.send("PUT", ns, resource, Some(&name), obj, true)
    }

    fn send(
        &self,
        method: &str,
        ns: &str,
        resource: (&str, &str),
        name: Option<&str>,
        obj: &Value,
        dry: bool,
    ) -> Answer {
        let (api_version, plural) = resource;
        let prefix =
            if api_version.contains('/') { format!("/apis/{api_version}") } else { format!("/api/{api_version}") };
        let mut obj = obj.clone();
        obj["metadata"]["namespace"] = json!(ns);
        let mut path = format!("{prefix}/namespaces/{ns}/{plural}");
        if let Some(name) = name {
            path.push('/');
            path.push_str(name);
        }
        path.push_str(if dry { "?dryRun=All&fieldManager=e2e" } else { "?fieldManager=e2e" });
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(kube::client::Body::from(serde_json::to_vec(&obj).expect("JSON")))
            .expect("a request");
        self.rt.block_on(async {
            let response = self.client.send(request).await.expect("the apiserver answers");
            let code = response.status().as_u16();
            let warnings = response
                .headers()
                .get_all("warning")
                .iter()
                .filter_map(|h| h.to_str().ok())
                .map(warning_text)
                .collect();
            let bytes = response.into_body().collect_bytes().await.expect("a body");
            Answer { code, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null), warnings }
        })
    }
}

/// The ratchet on UPDATE: a Deployment stored out of policy (admitted through its exemption
/// annotation), then updated without the annotation: the finding already there warns
/// "pre-existing" where `ratchet` is on and denies where it is off, and a new finding denies,
/// in the policies as in the webhook.
fn ratchet_differences(api: &Api, runs: &[Run]) -> Vec<String> {
    let mut differences = Vec::new();
    let resource = ("apps/v1", "deployments");
    let id = "prestop-exceeds-grace";
    let sleeping =
        |name: &str| container(json!({"name": name, "lifecycle": {"preStop": {"exec": {"command": ["sleep", "45"]}}}}));
    let mut stored = deployment("rt", json!({"containers": [sleeping("a")]}));
    stored["metadata"]["annotations"] = json!({format!("ha-guard.io/allow-{id}"): "stored before the policy"});
    let mut checked = 0;
    for run in runs.iter().filter(|r| r.prefix.is_empty() || r.prefix == "x-") {
        let ns = run.rule_namespace(id);
        let created = api.create(&ns, resource, &stored);
        assert!(created.ok(), "the exempted Deployment is admitted in {ns}: {}", created.message());
        for (what, containers) in [
            (
                "the same violation, image changed",
                json!([container(
                    json!({"name": "a", "image": "nginx:2", "lifecycle": {"preStop": {"exec": {"command": ["sleep", "45"]}}}})
                )]),
            ),
            ("the old violation and a new one", json!([sleeping("a"), sleeping("b")])),
            ("the violation fixed", json!([container(json!({"name": "a"}))])),
        ] {
            let mut update = created.body.clone();
            update["metadata"]["annotations"] = json!({});
            // Unconditional: the deployment controller writes the status meanwhile.
            update["metadata"].as_object_mut().map(|m| m.remove("resourceVersion"));
            update["spec"]["template"]["spec"]["containers"] = containers;
            // The new object as the apiserver defaults it.
            let mut fresh = update.clone();
            for field in ["resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"] {
                fresh["metadata"].as_object_mut().map(|m| m.remove(field));
            }
            let defaulted = api.dry_run(PLAIN, resource, &fresh);
            assert!(defaulted.ok(), "{what}: {}", defaulted.message());
            let hook = webhook_update(
                &run.config,
                &ns,
                run.namespace_labels(&ns, Some(&run.policy(id))),
                &defaulted.body,
                Some(&created.body),
                "deployments",
            );
            let (deny, warn) = hook.lines.get(id).cloned().unwrap_or_default();
            let answer = api.dry_run_update(&ns, resource, &update);
            let (denied, _) = answer.said_by(&run.policy(&format!("ha-guard-{id}")));
            let (_, warned) = answer.said_by(&run.policy(&format!("ha-guard-{id}-warn")));
            let want_deny = (!deny.is_empty()).then(|| policies::joined(id, &deny));
            let want_warn = (!warn.is_empty()).then(|| policies::joined(id, &warn));
            checked += usize::from(want_warn.as_deref().is_some_and(|w| w.contains("(pre-existing)")));
            if denied != want_deny || warned != want_warn {
                differences.push(format!(
                    "UPDATE, {what} (run {:?}) [{id}]:\n  apiserver: deny {denied:?} warn {warned:?}\n  webhook:   deny \
                     {want_deny:?} warn {want_warn:?}\n  the apiserver answered {} {} {:?}",
                    run.prefix,
                    answer.code,
                    answer.message(),
                    answer.warnings
                ));
            }
        }
    }
    assert!(checked >= 2, "the ratchet was exercised: a pre-existing violation warned ({checked})");
    differences
}

/// What the webhook says of `obj` (as the apiserver defaulted it) in namespace `ns`: the
/// mutation patch, and per rule its deny and warn lines.
struct Webhook {
    patch: Option<json_patch::Patch>,
    lines: BTreeMap<&'static str, (Vec<String>, Vec<String>)>,
}

fn webhook(config: &Config, ns: &str, labels: BTreeMap<String, String>, obj: &Value, resource: &str) -> Webhook {
    webhook_update(config, ns, labels, obj, None, resource)
}

/// The subject of `obj` in namespace `ns`, decoded as the webhook decodes a request's object.
fn subject_of(ns: &str, obj: &Value, resource: &str) -> ha_guard::core::model::Subject {
    let (group, version) = obj["apiVersion"].as_str().unwrap_or_default().split_once('/').unwrap_or(("", "v1"));
    let mut obj = obj.clone();
    obj["metadata"]["namespace"] = json!(ns);
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-4000-8000-000000000049",
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": resource},
            "name": obj["metadata"]["name"],
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": obj,
        }
    });
    let request = review::parse(&serde_json::to_vec(&review).expect("JSON")).expect("an AdmissionReview");
    review::subject(&request).expect("decodes").expect("a judged kind")
}

/// [`webhook`] of an UPDATE from `old` (as stored) when given.
fn webhook_update(
    config: &Config,
    ns: &str,
    labels: BTreeMap<String, String>,
    obj: &Value,
    old: Option<&Value>,
    resource: &str,
) -> Webhook {
    let subject = subject_of(ns, obj, resource);
    let old_subject = old.map(|o| subject_of(ns, o, resource));
    let old_fn = || old_subject.clone();
    let mut view = Index::new();
    view.upsert_namespace_labels(ns.to_string(), labels);
    let today = Some(k8s_openapi::jiff::Timestamp::now().to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).date());
    let verdict = judge(&Review {
        subject: &subject,
        old: Some(&old_fn),
        view: &view,
        config,
        asks: Asks::Both,
        absences: Absences::Withheld,
        today,
        progress: None,
        unknown_namespace: UnknownNamespace::Strictest,
    });
    let mut decided = verdict.decided;
    if config.observes() {
        ha_guard::core::decide::observe(&mut decided);
    }
    let mut lines: BTreeMap<&'static str, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for f in &decided.findings {
        let entry = lines.entry(f.rule.id).or_default();
        match f.action {
            Decision::Deny => entry.0.push(line(f)),
            Decision::Warn => entry.1.push(line(f)),
            Decision::Allowed => {}
        }
    }
    let patch = (!verdict.plan.is_empty() && !config.observes()).then(|| verdict.plan.patch());
    Webhook { patch, lines }
}

/// An object of the corpus or a page, made writable here: its name kept (or made), what the
/// apiserver sets itself dropped.
fn writable(mut obj: Value) -> Option<Value> {
    let api_version = obj["apiVersion"].as_str()?.to_string();
    let kind = obj["kind"].as_str()?.to_string();
    JUDGED.iter().find(|(v, k, _)| *v == api_version && *k == kind)?;
    let meta = obj["metadata"].as_object_mut()?;
    for field in
        ["namespace", "resourceVersion", "uid", "creationTimestamp", "managedFields", "generation", "ownerReferences"]
    {
        meta.remove(field);
    }
    if meta.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
        meta.insert("name".into(), json!("generated"));
    }
    meta.remove("generateName");
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    Some(obj)
}

fn resource_of(obj: &Value) -> (&'static str, &'static str) {
    let (v, _, r) =
        JUDGED.iter().find(|(v, k, _)| obj["apiVersion"] == *v && obj["kind"] == *k).expect("a judged kind");
    (v, r)
}

fn yaml_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// Every document of the judged kinds in `text` (documents that are not YAML objects skipped).
fn judged_docs(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple::<Value>(text).unwrap_or_default();
    docs.into_iter()
        .flat_map(|d| if d["kind"] == "List" { d["items"].as_array().cloned().unwrap_or_default() } else { vec![d] })
        .filter_map(writable)
        .collect()
}

/// The YAML examples of a docs page.
fn page_examples(page: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find("```yaml\n") {
        let body = &rest[start + 8..];
        let Some(end) = body.find("```") else { break };
        out.extend(judged_docs(&body[..end]));
        rest = &body[end..][3..];
    }
    out
}

fn deployment(name: &str, pod: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name, "tier": "web"}}, "spec": pod},
        }
    })
}

fn container(extra: Value) -> Value {
    let mut c = json!({"name": "app", "image": "nginx"});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(extra.clone());
    }
    c
}

fn spread(when: &str, selector: Option<Value>, keys: Option<Value>) -> Value {
    let mut s = json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": when});
    if let Some(sel) = selector {
        s["labelSelector"] = sel;
    }
    if let Some(keys) = keys {
        s["matchLabelKeys"] = keys;
    }
    s
}

fn pdb(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec})
}

fn sleep_exec(command: &[&str]) -> Value {
    json!({"lifecycle": {"preStop": {"exec": {"command": command}}}})
}

/// Generated variants: for each covered rule, objects that fire it, that do not, and at the
/// boundary.
fn variants() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let c = || container(json!({}));
    let mut add = |what: &str, obj: Value| out.push((format!("variant {what}"), obj));
    // spread-selector-missing: filled by the mutation where it is on (the API refuses
    // matchLabelKeys without a labelSelector, so every missing selector is fillable).
    for when in ["DoNotSchedule", "ScheduleAnyway"] {
        add(
            &format!("missing, {when}"),
            deployment("sf", json!({"containers": [c()], "topologySpreadConstraints": [spread(when, None, None)]})),
        );
    }
    let mut two_keys = deployment(
        "sk",
        json!({"containers": [c()], "topologySpreadConstraints": [spread("DoNotSchedule", None, None), spread("ScheduleAnyway", Some(json!({"matchLabels": {"app": "sk"}})), None), {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]}),
    );
    two_keys["spec"]["selector"] = json!({"matchLabels": {"tier": "web", "app": "sk"}, "matchExpressions": [{"key": "track", "operator": "DoesNotExist"}, {"key": "tier", "operator": "In", "values": ["web", "api"]}]});
    add("missing twice, selector with labels and expressions", two_keys);
    // spread-selector-mismatch: every operator, matching and not.
    let selectors = [
        ("labels match", json!({"matchLabels": {"app": "mm"}})),
        ("labels mismatch", json!({"matchLabels": {"app": "other"}})),
        ("two labels, one mismatching", json!({"matchLabels": {"tier": "web", "app": "other"}})),
        ("In match", json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "mm"]}]})),
        ("In mismatch", json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]})),
        ("NotIn match", json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]})),
        ("NotIn mismatch", json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["mm"]}]})),
        ("NotIn absent key", json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]})),
        ("Exists match", json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]})),
        ("Exists mismatch", json!({"matchExpressions": [{"key": "zone", "operator": "Exists"}]})),
        ("DoesNotExist match", json!({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]})),
        ("DoesNotExist mismatch", json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]})),
        (
            "labels and expressions mismatch",
            json!({"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [{"key": "app", "operator": "In", "values": ["p", "q"]}, {"key": "z", "operator": "Exists"}]}),
        ),
        ("empty", json!({})),
    ];
    for (what, sel) in selectors {
        for when in ["DoNotSchedule", "ScheduleAnyway"] {
            add(
                &format!("spread {what}, {when}"),
                deployment(
                    "mm",
                    json!({"containers": [c()], "topologySpreadConstraints": [spread(when, Some(sel.clone()), None)]}),
                ),
            );
        }
    }
    add(
        "two spreads, both broken",
        deployment(
            "m2",
            json!({"containers": [c()], "topologySpreadConstraints": [
                spread("DoNotSchedule", Some(json!({"matchLabels": {"app": "x"}})), None),
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "y"}}},
            ]}),
        ),
    );
    let mut sts = deployment(
        "st",
        json!({"containers": [c()], "topologySpreadConstraints": [spread("DoNotSchedule", Some(json!({"matchLabels": {"app": "x"}})), None)]}),
    );
    sts["kind"] = json!("StatefulSet");
    add("StatefulSet mismatch", sts);
    // termination-grace-zero and prestop-exceeds-grace.
    for grace in [0, 1, 29, 30, 31] {
        add(
            &format!("grace {grace}"),
            deployment("g", json!({"containers": [c()], "terminationGracePeriodSeconds": grace})),
        );
    }
    for (what, extra, grace) in [
        ("sleep 30, default grace", json!({"lifecycle": {"preStop": {"sleep": {"seconds": 30}}}}), None),
        ("sleep 29, default grace", json!({"lifecycle": {"preStop": {"sleep": {"seconds": 29}}}}), None),
        ("sleep 0, grace 0", json!({"lifecycle": {"preStop": {"sleep": {"seconds": 0}}}}), Some(0)),
        ("exec sleep 15", sleep_exec(&["sleep", "15"]), Some(15)),
        ("exec /bin/sleep 15s", sleep_exec(&["/bin/sleep", "15s"]), Some(16)),
        ("exec sh -c sleep 40; quit", sleep_exec(&["/bin/sh", "-c", "sleep 40; nginx -s quit"]), Some(45)),
        ("exec sh -c sleep 40; quit, grace 40", sleep_exec(&["/bin/sh", "-c", "sleep 40; nginx -s quit"]), Some(40)),
        ("exec sleep 1m && kill", sleep_exec(&["sh", "-c", "sleep 1m && kill 1"]), Some(60)),
        ("exec sleep 1.5m", sleep_exec(&["sh", "-c", "sleep 1.5m"]), Some(90)),
        ("exec sleep .5h", sleep_exec(&["sh", "-c", "sleep .5h"]), None),
        ("exec sleep infinity", sleep_exec(&["sleep", "infinity"]), Some(1)),
        ("exec quoted", sleep_exec(&["sh", "-c", "sleep '35'"]), None),
        ("exec two sleeps", sleep_exec(&["sh", "-c", "sleep 5;sleep 50&wait"]), Some(49)),
        ("exec tab", sleep_exec(&["sh", "-c", "sleep\t45"]), None),
        ("exec script", sleep_exec(&["/bin/drain.sh"]), None),
        ("exec sleep at the end", sleep_exec(&["sleep"]), None),
        ("httpGet", json!({"lifecycle": {"preStop": {"httpGet": {"path": "/q", "port": 8080}}}}), None),
    ] {
        let mut pod = json!({"containers": [c(), container(json!({"name": "side"})).as_object().map(|o| {
            let mut o = o.clone();
            o.extend(extra.as_object().cloned().unwrap_or_default());
            Value::Object(o)
        }).unwrap_or_default()]});
        if let Some(grace) = grace {
            pod["terminationGracePeriodSeconds"] = json!(grace);
        }
        add(&format!("preStop {what}"), deployment("ps", pod));
    }
    let mut sidecar = container(json!({"name": "sidecar", "restartPolicy": "Always"}));
    sidecar["lifecycle"] = json!({"preStop": {"exec": {"command": ["sleep", "40"]}}});
    add("init sidecar sleeping 40", deployment("is", json!({"containers": [c()], "initContainers": [sidecar]})));
    // The PDB rules and the mutation.
    for (what, spec) in [
        ("empty selector", json!({"maxUnavailable": 1, "selector": {}})),
        ("empty matchLabels", json!({"maxUnavailable": 1, "selector": {"matchLabels": {}}})),
        ("selector", json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}})),
        ("no selector", json!({"maxUnavailable": 1})),
        (
            "IfHealthyBudget",
            json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
        ),
        (
            "AlwaysAllow",
            json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
        ),
        ("IfHealthyBudget, empty selector", json!({"selector": {}, "unhealthyPodEvictionPolicy": "IfHealthyBudget"})),
    ] {
        add(&format!("PDB {what}"), pdb("b", spec));
    }
    // csi-controller-recreate and recreate-multi-replica.
    for replicas in [0, 1, 2, 3] {
        for (what, containers) in [
            ("plain", json!([c()])),
            (
                "CSI image",
                json!([c(), {"name": "prov", "image": "registry.k8s.io/sig-storage/csi-provisioner:v5.0.1@sha256:abc"}]),
            ),
            ("CSI container name", json!([{"name": "csi-attacher", "image": "example.com/attacher"}])),
            ("CSI-like image", json!([{"name": "x", "image": "example.com/csi-provisioner-extra:v1"}])),
        ] {
            let mut d = deployment("rc", json!({"containers": containers}));
            d["spec"]["replicas"] = json!(replicas);
            d["spec"]["strategy"] = json!({"type": "Recreate"});
            add(&format!("Recreate, {replicas} replicas, {what}"), d);
        }
    }
    let mut init = deployment(
        "ri",
        json!({"containers": [c()], "initContainers": [{"name": "init", "image": "localhost:5000/csi-resizer:v1"}]}),
    );
    init["spec"]["strategy"] = json!({"type": "Recreate"});
    add("Recreate, CSI init container", init);
    let mut rolling = deployment("rr", json!({"containers": [c()]}));
    rolling["spec"]["strategy"] = json!({"type": "RollingUpdate"});
    add("RollingUpdate", rolling);
    // host-network-colocation.
    let own = json!({"matchLabels": {"app": "hn"}});
    let other = json!({"matchLabels": {"app": "x"}});
    for replicas in [1, 2] {
        for (what, extra) in [
            ("nothing", json!({})),
            ("a declared port", json!({"containers": [container(json!({"ports": [{"containerPort": 8080}]}))]})),
            (
                "a sidecar's port",
                json!({"initContainers": [container(json!({"name": "side", "restartPolicy": "Always", "ports": [{"containerPort": 9090}]}))]}),
            ),
            (
                "a plain init container's port",
                json!({"initContainers": [container(json!({"name": "init", "ports": [{"containerPort": 9090}]}))]}),
            ),
            (
                "required anti-affinity on the hostname",
                json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": own}]}}}),
            ),
            (
                "required anti-affinity on other pods",
                json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname", "labelSelector": other}]}}}),
            ),
            (
                "required anti-affinity on the zone",
                json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "topology.kubernetes.io/zone", "labelSelector": own}]}}}),
            ),
            (
                "a DoNotSchedule hostname spread",
                json!({"topologySpreadConstraints": [spread("DoNotSchedule", Some(own.clone()), None)]}),
            ),
            (
                "a ScheduleAnyway hostname spread",
                json!({"topologySpreadConstraints": [spread("ScheduleAnyway", Some(own.clone()), None)]}),
            ),
        ] {
            let mut pod = json!({"hostNetwork": true, "containers": [c()]});
            for (k, v) in extra.as_object().cloned().unwrap_or_default() {
                pod[k] = v;
            }
            let mut d = deployment("hn", pod);
            d["spec"]["replicas"] = json!(replicas);
            add(&format!("hostNetwork, {replicas} replicas, {what}"), d);
        }
    }
    // toleration-wildcard.
    for (what, tolerations) in [
        ("Exists, no key", json!([{"operator": "Exists"}])),
        ("Exists, NoSchedule", json!([{"operator": "Exists", "effect": "NoSchedule"}])),
        ("Exists, NoExecute", json!([{"operator": "Exists", "effect": "NoExecute"}])),
        (
            "the cordon taint",
            json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]),
        ),
        ("the cordon taint, Equal", json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}])),
        ("the cordon taint, a value", json!([{"key": "node.kubernetes.io/unschedulable", "value": "x"}])),
        (
            "the cordon taint, NoExecute",
            json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}]),
        ),
        (
            "specific",
            json!([{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists"}]),
        ),
    ] {
        add(&format!("tolerations {what}"), deployment("tw", json!({"containers": [c()], "tolerations": tolerations})));
    }
    // Exempted by annotation (no finding), and an annotation without a reason (still judged).
    let mut exempt = deployment("ex", json!({"containers": [c()], "terminationGracePeriodSeconds": 0}));
    exempt["metadata"]["annotations"] = json!({"ha-guard.io/allow-termination-grace-zero": "a batch worker"});
    add("exempted by annotation", exempt);
    // hpa-replica-bounds: what the apiserver's validation lets through to the policy (a floor of
    // 0 with an object metric, HPAScaleToZero on by default in 1.37) fires; 1, 2 and the default
    // (1) do not; min == max is the boundary. (min > max and a floor of 0 with only resource
    // metrics the apiserver refuses itself, before any policy: not comparable here.)
    let hpa = |name: &str, min: Option<i64>, max: i64, object_metric: bool| {
        let mut h = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, "maxReplicas": max}});
        if let Some(min) = min {
            h["spec"]["minReplicas"] = json!(min);
        }
        h["spec"]["metrics"] = if object_metric {
            json!([{"type": "Object", "object": {"describedObject": {"apiVersion": "v1", "kind": "Service", "name": "q"},
                "metric": {"name": "queue_length"}, "target": {"type": "Value", "value": "10"}}}])
        } else {
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}])
        };
        h
    };
    add("hpa min 0, object metric", hpa("h0", Some(0), 3, true));
    add("hpa min 1", hpa("h1", Some(1), 3, false));
    add("hpa min 2 max 2 (boundary)", hpa("h2", Some(2), 2, false));
    add("hpa min 0 max 1 object metric", hpa("h3", Some(0), 1, true));
    add("hpa no minReplicas", hpa("h4", None, 5, false));
    // pdb-blocks-eviction: the budgets that block by themselves, and the nearest that do not (a
    // PDB alone: what covers too few replicas needs the view, left to the webhook).
    let web = json!({"matchLabels": {"app": "web"}});
    for (what, budget) in [
        ("maxUnavailable 0", json!({"maxUnavailable": 0})),
        ("maxUnavailable 0%", json!({"maxUnavailable": "0%"})),
        ("maxUnavailable 00%", json!({"maxUnavailable": "00%"})),
        ("maxUnavailable 1 (boundary)", json!({"maxUnavailable": 1})),
        ("maxUnavailable 1%", json!({"maxUnavailable": "1%"})),
        ("minAvailable 100%", json!({"minAvailable": "100%"})),
        ("minAvailable 99%", json!({"minAvailable": "99%"})),
        ("minAvailable 0", json!({"minAvailable": 0})),
        ("minAvailable 1", json!({"minAvailable": 1})),
        ("minAvailable 5", json!({"minAvailable": 5})),
        ("minAvailable 0%", json!({"minAvailable": "0%"})),
        ("neither field", json!({})),
        ("neither field, AlwaysAllow", json!({"unhealthyPodEvictionPolicy": "AlwaysAllow"})),
    ] {
        let mut spec = budget.clone();
        spec["selector"] = web.clone();
        add(&format!("PDB budget {what}"), pdb("pb", spec));
        let mut spec = budget;
        spec["selector"] = json!({});
        add(&format!("PDB budget {what}, empty selector"), pdb("pb", spec));
    }
    add("PDB budget maxUnavailable 0, no selector", pdb("pb", json!({"maxUnavailable": 0})));
    // exemption-unknown-rule: each tier of the suggestion, ambiguity, none, a mutation, several
    // keys, a known ID, an empty reason, the rule exempting itself, the longest name allowed.
    let annotated = |name: &str, annotations: Value| {
        let mut d = deployment(name, json!({"containers": [container(json!({}))]}));
        d["metadata"]["annotations"] = annotations;
        d
    };
    for (what, key) in [
        ("one edit", "replica-colocated"),
        ("case and underscores", "Replicas_Colocated"),
        ("dots", "pdb.blocks.eviction"),
        ("a missing hyphen", "hostnetwork-colocation"),
        ("a swap", "termination-grace-zreo"),
        ("words reordered", "colocated-replicas"),
        ("another form of a word", "spread-unsatisfied"),
        ("a word's first 4 letters", "hpa-repl-bounds"),
        ("3 letters of a word", "hpa-rep-bounds"),
        ("part of one ID", "colocated"),
        ("part of several", "spread-selector"),
        ("far from everything", "everything-is-fine"),
        ("two edits", "pdb-msing"),
        ("a mutation", "inject-spread-selector"),
        ("a mutation's misspelling", "inject-spread-selectors"),
        ("a known ID", "pdb-missing"),
        ("the longest name", "x-very-long-annotation-name-that-is-not-any-rule-at-all-x"),
    ] {
        add(&format!("exemption {what}"), annotated("ea", json!({format!("ha-guard.io/allow-{key}"): "why"})));
    }
    add(
        "exemptions, three unknown and one known",
        annotated(
            "eb",
            json!({"ha-guard.io/allow-pdb-mising": "a", "ha-guard.io/allow-Hpa_Replica_Bounds": "b",
                "ha-guard.io/allow-pdb-missing": "c", "ha-guard.io/allow-colocated": "d", "example.com/allow-x": "e"}),
        ),
    );
    add("exemption, an empty reason", annotated("ec", json!({"ha-guard.io/allow-pdb-mising": ""})));
    add(
        "exemption of the rule itself",
        annotated(
            "ed",
            json!({"ha-guard.io/allow-pdb-mising": "a", "ha-guard.io/allow-exemption-unknown-rule": "newer rules"}),
        ),
    );
    let many: serde_json::Map<String, Value> = (0..12)
        .map(|i| (format!("ha-guard.io/allow-termination-grace-zer{i}-typo-{i}"), json!("why")))
        .chain(std::iter::once(("ha-guard.io/allow-spread-selector-mismatsh".to_string(), json!("why"))))
        .collect();
    add("exemptions, thirteen unknown", annotated("ee", Value::Object(many)));
    let mut on_pdb = pdb("ep", json!({"maxUnavailable": 1, "selector": web}));
    on_pdb["metadata"]["annotations"] = json!({"ha-guard.io/allow-pdb-blocks-evictions": "why"});
    add("exemption on a PDB", on_pdb);
    let mut on_hpa = hpa("eh", Some(2), 4, false);
    on_hpa["metadata"]["annotations"] = json!({"ha-guard.io/allow-hpa-replica-bound": "why"});
    add("exemption on an HPA", on_hpa);
    out
}

/// The configurations under test, each in namespaces of its own.
fn runs() -> Vec<Run> {
    vec![
        Run::new("", "", &[]),
        // Turned off, turned up, overridden by namespace labels.
        Run::new(
            "b-",
            "mutations: {inject-spread-selector: false}\nrules: {termination-grace-zero: deny, pdb-selects-nothing: off}\n\
             overrides:\n- namespaceSelector: {matchLabels: {tier: prod}}\n  rules: {pdb-selector-empty: deny, \
             prestop-exceeds-grace: warn}\n- namespaceSelector: {matchExpressions: [{key: team, operator: In, values: \
             [a, b]}]}\n  rules: {spread-selector-mismatch: warn}\n",
            &[("tier", "prod"), ("team", "b")],
        ),
        // A namespace in warn mode.
        Run::new("w-", "", &[("ha-guard.io/mode", "warn")]),
        // Observe-only.
        Run::new("o-", "mode: observe\n", &[]),
        // Exceptions (one expiring), an exempt namespace (by glob), ratchet off.
        Run::new(
            "x-",
            "ratchet: false\nexemptNamespaces: [\"x-d-pdb-selector-*\"]\nexceptions:\n- name: mm-spreads\n  rules: \
             [spread-selector-mismatch]\n  match: {kinds: [Deployment], namespaces: [\"x-*\"], names: [\"m*\"]}\n  \
             reason: testing\n- name: ps-labelled\n  rules: [prestop-exceeds-grace, termination-grace-zero]\n  match: \
             {namespaces: [\"x-d-*\"], selector: {matchLabels: {app: ps}}}\n  reason: testing\n  expires: 2099-01-01\n",
            &[],
        ),
    ]
}

#[test]
fn the_generated_policies_give_the_webhooks_verdicts() {
    let runs = runs();
    let cp = ControlPlane::start_with_controllers().unwrap_or_else(|e| panic!("{e}"));
    cp.namespace(PLAIN, &[]);
    let mut names = Vec::new();
    let mut rules_of_run = Vec::new();
    for run in &runs {
        let docs = run.generated();
        let rules: Vec<&'static str> = ha_guard::core::rules::CEL_RULES
            .iter()
            .map(|r| r.rule.id)
            .filter(|id| docs.iter().any(|d| d["metadata"]["labels"][policies::RULE_LABEL] == *id))
            .collect();
        run.create_namespaces(&cp, &rules);
        cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&docs)).success();
        names.extend(
            docs.iter()
                .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
                .map(|d| d["metadata"]["name"].as_str().unwrap_or_default().to_string()),
        );
        rules_of_run.push(rules);
    }
    assert!(rules_of_run[0].len() >= 4, "the default configuration generates policies for the covered rules");
    type_checked(&cp, &names);

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let client = cp.kube_client(&rt);
    let api = Api { rt, client };

    // The policies in effect: a zero grace period warns, a PDB gets its policy.
    let probe = deployment("probe", json!({"containers": [container(json!({}))], "terminationGracePeriodSeconds": 0}));
    let warned = poll("the policies in effect", Duration::from_secs(30), Duration::from_millis(300), || {
        let a = api.dry_run(&runs[0].rule_namespace("termination-grace-zero"), ("apps/v1", "deployments"), &probe);
        let b = api.dry_run(
            &runs[0].mutations_namespace(),
            ("policy/v1", "poddisruptionbudgets"),
            &pdb("probe", json!({"maxUnavailable": 1})),
        );
        if !a.warnings.is_empty() && b.body["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow" {
            Ok(())
        } else {
            Err(format!("{a:?} {b:?}"))
        }
    });
    warned.unwrap_or_else(|e| panic!("{e}"));
    // Each run's bindings in effect too (the last created).
    std::thread::sleep(Duration::from_secs(2));

    let mut objects: Vec<(String, Value)> = Vec::new();
    let corpus = Path::new("/work/shared/corpus");
    let mut files = Vec::new();
    yaml_files(corpus, &mut files);
    assert!(!files.is_empty(), "the shared corpus is at {}", corpus.display());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (i, obj) in judged_docs(&text).into_iter().enumerate() {
            objects.push((format!("{} #{i}", file.display()), obj));
        }
    }
    let corpus_count = objects.len();
    let mut pages = 0;
    for id in ha_guard::core::rules::CEL_RULES
        .iter()
        .map(|r| r.rule.id)
        .chain(ha_guard::core::mutations::CEL_MUTATIONS.iter().map(|m| m.mutation.id))
    {
        let page = std::fs::read_to_string(repo().join(format!("docs/rules/{id}.md"))).expect("the page");
        for (i, obj) in page_examples(&page).into_iter().enumerate() {
            pages += 1;
            objects.push((format!("docs/rules/{id}.md example {i}"), obj));
        }
    }
    let generated_variants = variants();
    let variant_count = generated_variants.len();
    objects.extend(generated_variants);

    let mut differences = Vec::new();
    let mut invalid = Vec::new();
    let mut verdicts: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
    let mut judged = 0;
    // The rules whose own page has an example the policy fires on, per run.
    let mut page_fires: std::collections::BTreeSet<(&str, &str)> = std::collections::BTreeSet::new();
    for (what, obj) in &objects {
        let resource = resource_of(obj);
        let plain = api.dry_run(PLAIN, resource, obj);
        if !plain.ok() {
            invalid.push(format!("{what}: {}", plain.message()));
            continue;
        }
        judged += 1;
        for (run, rules) in runs.iter().zip(&rules_of_run) {
            let config = &run.config;
            let at =
                |_: &str| if run.prefix.is_empty() { what.clone() } else { format!("{what} (run {})", run.prefix) };
            // The mutations: the webhook's patch on the defaulted object, defaulted again, against
            // what the mutating policies stored.
            let mns = run.mutations_namespace();
            let before = webhook(config, &mns, run.namespace_labels(&mns, None), &plain.body, resource.1);
            let expected = match &before.patch {
                Some(patch) => {
                    let mut patched = plain.body.clone();
                    json_patch::patch(&mut patched, patch)
                        .unwrap_or_else(|e| panic!("{what}: the webhook's patch: {e}"));
                    let again = api.dry_run(PLAIN, resource, &writable(patched).expect("still judged"));
                    assert!(again.ok(), "{what}: the webhook's patched object is refused: {}", again.message());
                    again.body
                }
                None => plain.body.clone(),
            };
            let stored = api.dry_run(&mns, resource, obj);
            if !stored.ok() {
                differences.push(format!("{}: refused where only the mutations bind: {}", at(""), stored.message()));
            } else if stored.body["spec"] != expected["spec"] {
                differences.push(format!(
                    "{}: the mutating policies stored\n  {}\nthe webhook's patch gives\n  {}",
                    at(""),
                    stored.body["spec"],
                    expected["spec"]
                ));
            }
            // The validations, rule by rule, on the object as the webhook would see it.
            for id in rules {
                let ns = run.rule_namespace(id);
                let hook =
                    webhook(config, &ns, run.namespace_labels(&ns, Some(&run.policy(id))), &expected, resource.1);
                let (deny, warn) = hook.lines.get(id).cloned().unwrap_or_default();
                let answer = api.dry_run(&ns, resource, obj);
                let (denied, deny_as_warning) = answer.said_by(&run.policy(&format!("ha-guard-{id}")));
                let (warn_as_denial, warned) = answer.said_by(&run.policy(&format!("ha-guard-{id}-warn")));
                let want_deny = (!deny.is_empty()).then(|| policies::joined(id, &deny));
                let want_warn = (!warn.is_empty()).then(|| policies::joined(id, &warn));
                let verdict = if want_deny.is_some() {
                    "deny"
                } else if want_warn.is_some() {
                    "warn"
                } else {
                    "none"
                };
                *verdicts.entry((run.prefix, id, verdict)).or_default() += 1;
                if verdict != "none" && what.starts_with(&format!("docs/rules/{id}.md ")) {
                    page_fires.insert((run.prefix, *id));
                }
                if !answer.ok() && denied.is_none() {
                    differences.push(format!("{} [{id}]: refused, not by its policy: {}", at(""), answer.message()));
                }
                if denied != want_deny {
                    differences
                        .push(format!("{} [{id}]: deny\n  apiserver: {denied:?}\n  webhook:   {want_deny:?}", at("")));
                }
                if warned != want_warn {
                    differences
                        .push(format!("{} [{id}]: warn\n  apiserver: {warned:?}\n  webhook:   {want_warn:?}", at("")));
                }
                if deny_as_warning.is_some() || warn_as_denial.is_some() {
                    differences.push(format!(
                        "{} [{id}]: a policy answered with the other action: {deny_as_warning:?} {warn_as_denial:?}",
                        at("")
                    ));
                }
            }
        }
    }
    differences.extend(ratchet_differences(&api, &runs));
    eprintln!(
        "{} objects ({corpus_count} of the corpus, {pages} of the pages, {variant_count} variants), {judged} valid \
         and judged in {} configurations, {} refused by the apiserver's own validation",
        objects.len(),
        runs.len(),
        invalid.len()
    );
    for ((run, id, verdict), n) in &verdicts {
        eprintln!("  run {run:?} [{id}] {verdict}: {n}");
    }
    for i in &invalid {
        eprintln!("  not valid: {i}");
    }
    assert!(differences.is_empty(), "{} differences:\n{}", differences.len(), differences.join("\n"));
    // The objects exercise every verdict of every rule in the default configuration.
    for id in &rules_of_run[0] {
        let rule = ha_guard::core::registry::rule(id).expect("a rule");
        let verdicts_expected: &[&str] =
            if rule.default == ha_guard::core::catalogue::Action::Deny { &["deny", "none"] } else { &["warn", "none"] };
        for v in verdicts_expected {
            if *id == "spread-selector-missing" {
                // Filled by inject-spread-selector before validation: it fires where that is off.
                continue;
            }
            let n = verdicts.get(&("", *id, *v)).copied().unwrap_or(0);
            assert!(n > 0, "[{id}] no object had the verdict {v}: the objects do not exercise it");
        }
    }
    let missing_fires =
        verdicts.iter().any(|((run, id, v), _)| *run == "b-" && *id == "spread-selector-missing" && *v == "deny");
    assert!(missing_fires, "with inject-spread-selector off, spread-selector-missing denies some object");
}

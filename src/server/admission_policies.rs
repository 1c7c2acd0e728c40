//! `serve --admission-policies`: the admission policies generated from the registry
//! ([`crate::core::policies`]) put into the apiserver and kept there, so that the rules and
//! mutations that need only the written object are enforced while no replica answers (DESIGN.md
//! §4 "In the apiserver as well").
//!
//! The generator is Rust, so Helm cannot render the policies from values: as Kyverno's admission
//! controller does with the ValidatingAdmissionPolicies it generates, `serve` applies them at run
//! time (server-side apply, field manager `ha-guard`, forced), at start, whenever its
//! configuration reloads, and every [`RESYNC`] (an exception that expired since, an object edited
//! or deleted by hand). What it no longer generates (a rule turned off, an exception's change) and
//! labelled `app.kubernetes.io/managed-by: ha-guard` with an ownerReference to the same owner is
//! deleted; `--admission-policies off` deletes them all.
//!
//! Every object is owned (ownerReference) by `--admission-policies-owner`, the chart's
//! ValidatingWebhookConfiguration: `helm uninstall` deletes it, and the garbage collector the
//! policies and bindings with it; a missing owner means nothing is applied (what would delete
//! them?). The bindings also bind only where that webhook configuration sends objects: its
//! namespaceSelector and objectSelector are added to each binding's, its matchConditions to each
//! validating policy's (kube-system and the release namespace stay out, as from the webhooks).
//!
//! A rule is handed over (the webhook leaves its findings to its policies, [`InForce::rules`])
//! only once the apiserver has type-checked each of its ValidatingAdmissionPolicies at their
//! current generation without a warning (`status.typeChecking`, written by
//! kube-controller-manager): a policy whose CEL the apiserver warns about may fail at run time,
//! and `failurePolicy: Ignore` would then pass what the webhook no longer says. Until then, or for
//! good with a warning (logged), the webhook keeps judging the rule ([`InForce::held_back`]).
//!
//! Several replicas, rolling upgrades: every replica applies at start, so the newest replicas'
//! set wins; afterwards (a reload, a resync) a replica applies only while every object it would
//! touch was written by the same build ([`GENERATED_BY`]), so that an old replica still running
//! beside new ones never re-creates what the new version no longer generates nor takes back what
//! it added. Same build, same configuration file: the same objects, so concurrent applies agree.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::state::AppState;
pub use super::state::InForce;
use crate::core::config::Config;
use crate::core::policies::{self, API_VERSION, MANAGED_BY, RULE_LABEL};

/// The field manager of the applies.
pub const FIELD_MANAGER: &str = "ha-guard";
/// The annotation naming the build that wrote an object (`ha-guard --version`'s version and commit).
pub const GENERATED_BY: &str = "ha-guard.io/generated-by";
/// How often the policies are applied again without a reload.
pub const RESYNC: Duration = Duration::from_secs(600);
/// How long after a failed apply it is tried again.
pub const RETRY: Duration = Duration::from_secs(30);
/// How long after a change of the policies the webhook waits before it leaves findings to them:
/// the apiserver enforces a policy once its own informer has it (a delete, likewise, takes effect
/// a moment later), and every apiserver of the control plane has its own. Meanwhile the webhook
/// judges every rule: a violation may be said twice for these seconds, never not at all.
pub const SETTLE: Duration = Duration::from_secs(3);

/// How long a sync waits for the apiserver's type checking of the validating policies it applied
/// (kube-controller-manager's policy status controller writes it into `status.typeChecking`).
/// A rule whose policies are not type-checked by then is not handed over yet: the webhook keeps
/// judging it, and the sync comes again after [`RETRY`].
pub const TYPE_CHECK_WAIT: Duration = Duration::from_secs(15);

/// What the apiserver's type checking says of one applied ValidatingAdmissionPolicy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeCheck {
    /// Checked at its current generation, without a warning.
    Clean,
    /// Checked, with these warnings (`fieldRef: warning`, joined by `; `).
    Warned(String),
    /// Not checked at its current generation yet (or not readable).
    Pending,
}

/// [`TypeCheck`] of a ValidatingAdmissionPolicy as the apiserver holds it.
pub fn type_check(policy: &Value) -> TypeCheck {
    let status = &policy["status"];
    if status["observedGeneration"].is_null()
        || status["observedGeneration"] != policy["metadata"]["generation"]
        || status["typeChecking"].is_null()
    {
        return TypeCheck::Pending;
    }
    let warnings: Vec<String> = status["typeChecking"]["expressionWarnings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            format!(
                "{}: {}",
                w["fieldRef"].as_str().unwrap_or_default(),
                w["warning"].as_str().unwrap_or_default().trim()
            )
        })
        .collect();
    if warnings.is_empty() { TypeCheck::Clean } else { TypeCheck::Warned(warnings.join("; ")) }
}

/// The rules whose findings the webhook may leave to their policies: every rule bound in
/// `desired` whose validating policies all type-checked clean (`checks`, by policy name). The
/// others are held back, with why: the webhook keeps judging them (a violation may be said twice,
/// never not at all).
pub fn handed_over(
    desired: &[Value],
    checks: &BTreeMap<String, TypeCheck>,
) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let rule_of = |d: &Value| d["metadata"]["labels"][RULE_LABEL].as_str().unwrap_or_default().to_string();
    let mut rules = BTreeSet::new();
    let mut held_back = BTreeMap::new();
    for d in desired.iter().filter(|d| d["kind"] == "ValidatingAdmissionPolicyBinding") {
        rules.insert(rule_of(d));
    }
    for d in desired.iter().filter(|d| d["kind"] == "ValidatingAdmissionPolicy") {
        let id = rule_of(d);
        let why = match checks.get(name_of(d)).unwrap_or(&TypeCheck::Pending) {
            TypeCheck::Clean => continue,
            TypeCheck::Warned(w) => format!("{}: the apiserver's type checking warns: {w}", name_of(d)),
            TypeCheck::Pending => format!("{}: not type-checked by the apiserver yet", name_of(d)),
        };
        rules.remove(&id);
        held_back
            .entry(id)
            .and_modify(|w: &mut String| {
                w.push_str("; ");
                w.push_str(&why);
            })
            .or_insert(why);
    }
    (rules, held_back)
}

/// `--admission-policies`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Apply the policies the cluster serves (discovery): the ValidatingAdmissionPolicies
    /// (Kubernetes 1.30+), the MutatingAdmissionPolicies (1.36+) where served too.
    Auto,
    /// Apply them; a cluster without ValidatingAdmissionPolicies is an error logged at each try
    /// (the MutatingAdmissionPolicies are applied where served).
    On,
    /// Apply none, and delete those this owner has.
    #[default]
    Off,
}

/// Whether `serve` keeps the generated admission policies in the apiserver.
#[derive(clap::Args, Clone, Debug)]
pub struct AdmissionPolicyArgs {
    /// Keep the admission policies `ha-guard policies` prints (for the --config in force) in the
    /// apiserver, so that the rules and mutations needing only the written object are enforced
    /// while no replica answers: auto (those the cluster serves), on, or off (delete the ones
    /// --admission-policies-owner owns). Needs a live cluster. With them applied, the webhook
    /// leaves to them the findings they give.
    #[arg(long, value_enum, default_value = "off", value_name = "auto|on|off")]
    pub admission_policies: Mode,
    /// The ValidatingWebhookConfiguration that owns the policies (ownerReference: deleting it
    /// deletes them) and whose selectors and match conditions their bindings copy. Required
    /// unless --admission-policies off; with off and no owner nothing is touched.
    #[arg(long, value_name = "NAME")]
    pub admission_policies_owner: Option<String>,
}

/// One kind of generated object.
struct Kind {
    kind: &'static str,
    plural: &'static str,
    /// Bindings are applied after their policies and deleted before them.
    binding: bool,
}

const KINDS: [Kind; 4] = [
    Kind { kind: "ValidatingAdmissionPolicy", plural: "validatingadmissionpolicies", binding: false },
    Kind { kind: "MutatingAdmissionPolicy", plural: "mutatingadmissionpolicies", binding: false },
    Kind { kind: "ValidatingAdmissionPolicyBinding", plural: "validatingadmissionpolicybindings", binding: true },
    Kind { kind: "MutatingAdmissionPolicyBinding", plural: "mutatingadmissionpolicybindings", binding: true },
];

fn resource(kind: &Kind) -> ApiResource {
    ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: API_VERSION.into(),
        kind: kind.kind.into(),
        plural: kind.plural.into(),
    }
}

/// This build, as [`GENERATED_BY`] says it.
pub fn build() -> String {
    format!("{}+{}", crate::build_info::VERSION, crate::build_info::COMMIT)
}

/// The owner: its name and uid, and what its (first) webhook selects.
struct Owner {
    name: String,
    uid: String,
    namespace_selector: Option<Value>,
    object_selector: Option<Value>,
    match_conditions: Vec<Value>,
}

/// What one sync did.
#[derive(Debug)]
pub enum Synced {
    /// The set applied (and the stale deleted).
    Applied(InForce),
    /// Off: the owner's objects deleted (how many).
    Removed(usize),
    /// Left alone: objects written by another build are there (a rolling upgrade).
    OtherBuild(String),
}

/// Applies the generated admission policies for one owner.
pub struct Applier {
    pub client: kube::Client,
    pub mode: Mode,
    pub owner: String,
    /// Written into [`GENERATED_BY`]: [`build`], or a test's.
    pub build: String,
    /// [`SETTLE`], or a test's.
    pub settle: Duration,
    /// [`TYPE_CHECK_WAIT`], or a test's.
    pub type_check_wait: Duration,
}

impl Applier {
    /// The kinds the cluster serves (admissionregistration.k8s.io/v1 discovery).
    async fn served(&self) -> Result<BTreeSet<&'static str>, String> {
        match self.client.list_api_group_resources(API_VERSION).await {
            Ok(list) => {
                Ok(KINDS.iter().filter(|k| list.resources.iter().any(|r| r.name == k.plural)).map(|k| k.kind).collect())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(BTreeSet::new()),
            Err(e) => Err(format!("discovery of {API_VERSION}: {e}")),
        }
    }

    async fn owner(&self) -> Result<Option<Owner>, String> {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let Some(vwc) = api.get_opt(&self.owner).await.map_err(|e| format!("reading the owner: {e}"))? else {
            return Ok(None);
        };
        let first = vwc.webhooks.as_ref().and_then(|w| w.first());
        Ok(Some(Owner {
            name: self.owner.clone(),
            uid: vwc.metadata.uid.clone().unwrap_or_default(),
            namespace_selector: first
                .and_then(|w| w.namespace_selector.as_ref())
                .and_then(|s| serde_json::to_value(s).ok()),
            object_selector: first.and_then(|w| w.object_selector.as_ref()).and_then(|s| serde_json::to_value(s).ok()),
            match_conditions: first
                .and_then(|w| w.match_conditions.as_ref())
                .map(|m| m.iter().filter_map(|c| serde_json::to_value(c).ok()).collect())
                .unwrap_or_default(),
        }))
    }

    /// The objects of `kind` this owner has (labelled, with an ownerReference to it by name).
    async fn existing(&self, kind: &Kind) -> Result<Vec<DynamicObject>, String> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource(kind));
        let list = api
            .list(&ListParams::default().labels(&format!("{MANAGED_BY}=ha-guard")))
            .await
            .map_err(|e| format!("listing {}: {e}", kind.plural))?;
        Ok(list
            .items
            .into_iter()
            .filter(|o| {
                o.metadata.owner_references.iter().flatten().any(|r| {
                    r.kind == "ValidatingWebhookConfiguration" && r.name == self.owner && r.api_version == API_VERSION
                })
            })
            .collect())
    }

    /// Makes the apiserver hold what `config` generates (or, off, nothing of this owner's).
    /// `first`: this replica has not applied yet (it applies whatever build wrote the objects).
    pub async fn sync(&self, config: &Config, generation: u64, first: bool) -> Result<Synced, String> {
        let served = self.served().await?;
        let owner = self.owner().await?;
        let mut existing: BTreeMap<(&'static str, String), Held> = BTreeMap::new();
        for kind in KINDS.iter().filter(|k| served.contains(k.kind)) {
            for o in self.existing(kind).await? {
                let by = o.metadata.annotations.as_ref().and_then(|a| a.get(GENERATED_BY)).cloned();
                existing.insert(
                    (kind.kind, o.metadata.name.clone().unwrap_or_default()),
                    (by, o.metadata.resource_version.clone()),
                );
            }
        }
        let desired = match (self.mode, &owner) {
            (Mode::Off, _) => Vec::new(),
            (_, None) => {
                return Err(format!(
                    "the ValidatingWebhookConfiguration {} (--admission-policies-owner) does not exist: nothing is \
                     applied, since nothing would delete the policies with it",
                    self.owner
                ));
            }
            (mode, Some(owner)) => {
                if mode == Mode::On && !served.contains("ValidatingAdmissionPolicy") {
                    return Err(format!(
                        "--admission-policies on, but the apiserver does not serve {API_VERSION} \
                         validatingadmissionpolicies (Kubernetes 1.30 or later): nothing applied"
                    ));
                }
                let docs = policies::generate(config, Some(crate::config_file::today()));
                docs.into_iter()
                    .filter(|d| served.contains(d["kind"].as_str().unwrap_or_default()))
                    .map(|d| stamped(d, owner, &self.build))
                    .collect()
            }
        };
        if self.mode == Mode::Off {
            if existing.is_empty() {
                return Ok(Synced::Removed(0));
            }
        } else if !first
            && let Some((by, _)) = existing.values().find(|(by, _)| by.as_deref() != Some(self.build.as_str()))
        {
            return Ok(Synced::OtherBuild(by.clone().unwrap_or_else(|| "an unknown build".into())));
        }
        let wanted: BTreeSet<(String, String)> = desired
            .iter()
            .map(|d| (d["kind"].as_str().unwrap_or_default().to_string(), name_of(d).to_string()))
            .collect();
        // Policies before their bindings.
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let mut changed = false;
        for binding in [false, true] {
            for kind in KINDS.iter().filter(|k| k.binding == binding) {
                let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource(kind));
                for d in desired.iter().filter(|d| d["kind"] == kind.kind) {
                    let stored = api
                        .patch(name_of(d), &apply, &Patch::Apply(d))
                        .await
                        .map_err(|e| format!("applying {} {}: {e}", kind.kind, name_of(d)))?;
                    let before = existing.get(&(kind.kind, name_of(d).to_string())).and_then(|(_, rv)| rv.as_ref());
                    changed |= before.is_none() || before != stored.metadata.resource_version.as_ref();
                }
            }
        }
        // Bindings before their policies.
        let mut removed = 0;
        for binding in [true, false] {
            for kind in KINDS.iter().filter(|k| k.binding == binding) {
                let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource(kind));
                for (_, name) in
                    existing.keys().filter(|(k, n)| *k == kind.kind && !wanted.contains(&(k.to_string(), n.clone())))
                {
                    match api.delete(name, &DeleteParams::default()).await {
                        Ok(_) => {
                            removed += 1;
                            changed = true;
                        }
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => return Err(format!("deleting {} {name}: {e}", kind.kind)),
                    }
                }
            }
        }
        if self.mode == Mode::Off {
            return Ok(Synced::Removed(removed));
        }
        if changed {
            tokio::time::sleep(self.settle).await;
        }
        let checks = self.type_checks(&desired).await;
        let (rules, held_back) = handed_over(&desired, &checks);
        let mut in_force = InForce { generation, rules, held_back, ..InForce::default() };
        for d in desired.iter().filter(|d| d["kind"] == "MutatingAdmissionPolicyBinding") {
            in_force.mutations.insert(d["metadata"]["labels"][RULE_LABEL].as_str().unwrap_or_default().to_string());
        }
        Ok(Synced::Applied(in_force))
    }
}

impl Applier {
    /// The type checking of the validating policies in `desired`, by name: read until every one
    /// is checked at its generation or [`Applier::type_check_wait`] has passed.
    async fn type_checks(&self, desired: &[Value]) -> BTreeMap<String, TypeCheck> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource(&KINDS[0]));
        let names: Vec<&str> =
            desired.iter().filter(|d| d["kind"] == "ValidatingAdmissionPolicy").map(name_of).collect();
        let until = tokio::time::Instant::now() + self.type_check_wait;
        let mut checks: BTreeMap<String, TypeCheck> = BTreeMap::new();
        loop {
            let pending: Vec<&str> =
                names.iter().copied().filter(|n| checks.get(*n).is_none_or(|c| *c == TypeCheck::Pending)).collect();
            for name in pending {
                let check = match api.get_opt(name).await {
                    Ok(Some(p)) => serde_json::to_value(&p).map(|v| type_check(&v)).unwrap_or(TypeCheck::Pending),
                    _ => TypeCheck::Pending,
                };
                checks.insert(name.to_string(), check);
            }
            if !checks.values().any(|c| *c == TypeCheck::Pending) || tokio::time::Instant::now() >= until {
                return checks;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// An object of the owner's in the apiserver: the build that wrote it, its resourceVersion.
type Held = (Option<String>, Option<String>);

fn name_of(d: &Value) -> &str {
    d["metadata"]["name"].as_str().unwrap_or_default()
}

/// `doc` owned by `owner`, stamped with `build`, its binding narrowed to where the owner's
/// webhook sends objects, its validating policy given the owner's match conditions.
fn stamped(mut doc: Value, owner: &Owner, build: &str) -> Value {
    doc["metadata"]["ownerReferences"] = json!([{
        "apiVersion": API_VERSION,
        "kind": "ValidatingWebhookConfiguration",
        "name": owner.name,
        "uid": owner.uid,
    }]);
    if !doc["metadata"]["annotations"].is_object() {
        doc["metadata"]["annotations"] = json!({});
    }
    doc["metadata"]["annotations"][GENERATED_BY] = json!(build);
    let kind = doc["kind"].as_str().unwrap_or_default().to_string();
    if kind.ends_with("Binding") {
        let resources = &mut doc["spec"]["matchResources"];
        if let Some(theirs) = &owner.namespace_selector {
            resources["namespaceSelector"] = merged(&resources["namespaceSelector"], theirs);
        }
        if let Some(theirs) = &owner.object_selector {
            resources["objectSelector"] = merged(&resources["objectSelector"], theirs);
        }
    } else if kind == "ValidatingAdmissionPolicy" && !owner.match_conditions.is_empty() {
        let mut conditions: Vec<Value> = owner
            .match_conditions
            .iter()
            .map(|c| {
                let name = format!("webhook-{}", c["name"].as_str().unwrap_or_default());
                json!({"name": name.chars().take(63).collect::<String>(), "expression": c["expression"]})
            })
            .collect();
        if let Some(own) = doc["spec"]["matchConditions"].as_array() {
            conditions.extend(own.iter().cloned());
        }
        doc["spec"]["matchConditions"] = Value::Array(conditions);
    }
    doc
}

/// Two label selectors as one that needs both: their expressions, their labels (where both name
/// a key with different values, a selector that matches nothing).
fn merged(a: &Value, b: &Value) -> Value {
    let mut out = json!({});
    let mut expressions: Vec<Value> = Vec::new();
    for s in [a, b] {
        for e in s["matchExpressions"].as_array().into_iter().flatten() {
            if !expressions.contains(e) {
                expressions.push(e.clone());
            }
        }
    }
    let mut labels = serde_json::Map::new();
    for s in [a, b] {
        for (k, v) in s["matchLabels"].as_object().into_iter().flatten() {
            if labels.get(k).is_some_and(|kept| kept != v) {
                // Both name the key with different values: nothing can match both, so nothing
                // matches (the label equal to `v`, and not `v`).
                expressions.push(json!({"key": k, "operator": "NotIn", "values": [v]}));
            }
            labels.insert(k.clone(), v.clone());
        }
    }
    if !expressions.is_empty() {
        out["matchExpressions"] = Value::Array(expressions);
    }
    if !labels.is_empty() {
        out["matchLabels"] = Value::Object(labels);
    }
    out
}

/// Keeps the policies in step with the configuration until the process ends: a sync at start,
/// after every configuration reload and every [`RESYNC`]; a failure is tried again after
/// [`RETRY`]. What is in force is published to `state` (the webhook reads it), and cleared while
/// a sync fails or another build's objects are there.
pub async fn run(applier: Applier, state: Arc<AppState>) {
    let mut changed = state.config_changes();
    let mut first = true;
    loop {
        let (config, generation) = state.config_and_generation();
        if applier.mode != Mode::Off && state.policies_for(generation).is_none() {
            // A newer configuration than the one applied (or none applied yet): not current.
            state.metrics.set_admission_policies(Some((false, 0)));
        }
        let wait = match applier.sync(&config, generation, first).await {
            Ok(Synced::Applied(in_force)) => {
                tracing::info!(
                    owner = %applier.owner,
                    rules = in_force.rules.len(),
                    mutations = in_force.mutations.len(),
                    held_back = in_force.held_back.len(),
                    "admission policies applied: the apiserver enforces the rules that need only the written object"
                );
                for (rule, why) in &in_force.held_back {
                    tracing::warn!(
                        %rule, reason = %why,
                        "admission policy applied but not handed over: the webhook keeps judging the rule"
                    );
                }
                let wait = if in_force.held_back.is_empty() { RESYNC } else { RETRY };
                state.metrics.set_admission_policies(Some((true, in_force.held_back.len())));
                state.set_policies(Some(in_force));
                first = false;
                wait
            }
            Ok(Synced::Removed(n)) => {
                if n > 0 {
                    tracing::info!(owner = %applier.owner, removed = n, "admission policies off: deleted this owner's");
                }
                state.set_policies(None);
                state.metrics.set_admission_policies(None);
                first = false;
                RESYNC
            }
            Ok(Synced::OtherBuild(by)) => {
                tracing::info!(
                    owner = %applier.owner, generated_by = %by, build = %applier.build,
                    "admission policies written by another build (a rolling upgrade): left as they are; the webhook \
                     judges every rule meanwhile"
                );
                state.set_policies(None);
                state.metrics.set_admission_policies(Some((false, 0)));
                RESYNC
            }
            Err(e) => {
                tracing::error!(error = %e, owner = %applier.owner,
                    "admission policies not applied; the webhook judges every rule meanwhile");
                state.set_policies(None);
                state.metrics.set_admission_policies(Some((false, 0)));
                RETRY
            }
        };
        tokio::select! {
            _ = changed.changed() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            name: "ha-guard".into(),
            uid: "u-1".into(),
            namespace_selector: Some(json!({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "ha-guard"]},
                {"key": "ha-guard.io/mode", "operator": "NotIn", "values": ["off"]}]})),
            object_selector: Some(json!({"matchLabels": {"team": "a"}})),
            match_conditions: vec![json!({"name": "changes-what-ha-guard-reads", "expression": "true"})],
        }
    }

    fn generated(kind: &str) -> Value {
        policies::generate(&Config::default(), None)
            .into_iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} generated"))
    }

    #[test]
    fn every_object_is_owned_and_stamped() {
        for kind in KINDS.iter().map(|k| k.kind) {
            let d = stamped(generated(kind), &owner(), "1.0+abc");
            assert_eq!(
                d["metadata"]["ownerReferences"],
                json!([{"apiVersion": API_VERSION, "kind": "ValidatingWebhookConfiguration", "name": "ha-guard", "uid": "u-1"}]),
                "{kind}"
            );
            assert_eq!(d["metadata"]["annotations"][GENERATED_BY], "1.0+abc", "{kind}");
            assert_eq!(d["metadata"]["labels"][MANAGED_BY], "ha-guard", "{kind}");
        }
    }

    #[test]
    fn bindings_bind_only_where_the_webhook_is_called() {
        let d = stamped(generated("ValidatingAdmissionPolicyBinding"), &owner(), "b");
        let ns = &d["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"];
        let keys: Vec<(&str, &Value)> =
            ns.as_array().unwrap().iter().map(|e| (e["key"].as_str().unwrap(), &e["values"])).collect();
        // The generator's (mode off), once, and the webhook's exclusions.
        assert_eq!(
            keys,
            vec![
                ("ha-guard.io/mode", &json!(["off"])),
                ("kubernetes.io/metadata.name", &json!(["kube-system", "ha-guard"]))
            ],
            "{d}"
        );
        assert_eq!(d["spec"]["matchResources"]["objectSelector"], json!({"matchLabels": {"team": "a"}}));
        let m = stamped(generated("MutatingAdmissionPolicyBinding"), &owner(), "b");
        assert_eq!(m["spec"]["matchResources"]["objectSelector"], json!({"matchLabels": {"team": "a"}}));
    }

    #[test]
    fn validating_policies_get_the_webhooks_match_conditions_first() {
        let d = stamped(generated("ValidatingAdmissionPolicy"), &owner(), "b");
        let names: Vec<&str> =
            d["spec"]["matchConditions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names[0], "webhook-changes-what-ha-guard-reads", "{names:?}");
        assert!(names.contains(&"not-exempted-by-annotation"), "{names:?}");
        // The mutating policies keep their own (their condition says what there is to add).
        let m = stamped(generated("MutatingAdmissionPolicy"), &owner(), "b");
        assert!(!m["spec"]["matchConditions"].to_string().contains("webhook-"), "{m}");
    }

    fn checked(generation: i64, observed: Option<i64>, warnings: Option<Value>) -> Value {
        let mut p = json!({"metadata": {"name": "p", "generation": generation}, "status": {}});
        if let Some(o) = observed {
            p["status"]["observedGeneration"] = json!(o);
            if let Some(w) = warnings {
                p["status"]["typeChecking"] = json!({"expressionWarnings": w});
            }
        }
        p
    }

    #[test]
    fn type_checking_is_read_at_the_policys_generation() {
        assert_eq!(type_check(&checked(2, Some(2), Some(json!([])))), TypeCheck::Clean);
        let warned = json!([{"fieldRef": "spec.validations[0].expression", "warning": "no such key: x\n"}]);
        assert_eq!(
            type_check(&checked(2, Some(2), Some(warned.clone()))),
            TypeCheck::Warned("spec.validations[0].expression: no such key: x".into())
        );
        // A status of the previous generation, or none yet: pending.
        assert_eq!(type_check(&checked(3, Some(2), Some(json!([])))), TypeCheck::Pending);
        assert_eq!(type_check(&checked(3, Some(2), Some(warned))), TypeCheck::Pending);
        assert_eq!(type_check(&checked(1, None, None)), TypeCheck::Pending);
        let mut no_checking = checked(1, Some(1), None);
        no_checking["status"]["conditions"] = json!([]);
        assert_eq!(type_check(&no_checking), TypeCheck::Pending);
    }

    #[test]
    fn a_rule_is_handed_over_only_when_all_its_policies_type_checked_clean() {
        let config = crate::core::registry::parse_config("rules: {termination-grace-zero: deny}\n", "c.yaml").unwrap();
        let desired = policies::generate(&config, None);
        let vaps: Vec<String> = desired
            .iter()
            .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
            .map(|d| name_of(d).to_string())
            .collect();
        let mut checks: BTreeMap<String, TypeCheck> = vaps.iter().map(|n| (n.clone(), TypeCheck::Clean)).collect();
        let (rules, held_back) = handed_over(&desired, &checks);
        assert!(held_back.is_empty(), "{held_back:?}");
        assert!(rules.contains("termination-grace-zero") && rules.contains("pdb-blocks-eviction"), "{rules:?}");
        // One of a rule's two policies warned, another rule's not checked yet: both held back,
        // the rest handed over.
        checks.insert("ha-guard-termination-grace-zero-warn".into(), TypeCheck::Warned("f: w".into()));
        checks.remove("ha-guard-pdb-blocks-eviction");
        let (rules, held_back) = handed_over(&desired, &checks);
        assert!(!rules.contains("termination-grace-zero") && !rules.contains("pdb-blocks-eviction"), "{rules:?}");
        assert!(rules.contains("prestop-exceeds-grace"), "{rules:?}");
        assert_eq!(
            held_back["termination-grace-zero"],
            "ha-guard-termination-grace-zero-warn: the apiserver's type checking warns: f: w"
        );
        assert_eq!(
            held_back["pdb-blocks-eviction"],
            "ha-guard-pdb-blocks-eviction: not type-checked by the apiserver yet"
        );
        assert_eq!(held_back.len(), 2);
    }

    #[test]
    fn merged_selectors_need_both() {
        let a = json!({"matchLabels": {"x": "1"}});
        let b = json!({"matchLabels": {"x": "2", "y": "3"}});
        let m = merged(&a, &b);
        // x=1 and x=2 at once: nothing matches, as neither selector alone would match both.
        assert_eq!(m["matchLabels"], json!({"x": "2", "y": "3"}));
        assert_eq!(m["matchExpressions"], json!([{"key": "x", "operator": "NotIn", "values": ["2"]}]));
        let same =
            merged(&a, &json!({"matchLabels": {"x": "1"}, "matchExpressions": [{"key": "z", "operator": "Exists"}]}));
        assert_eq!(same, json!({"matchLabels": {"x": "1"}, "matchExpressions": [{"key": "z", "operator": "Exists"}]}));
        assert_eq!(merged(&json!({}), &json!({})), json!({}));
    }
}

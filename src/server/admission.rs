//! The webhook's core: an AdmissionReview in, an AdmissionReview out. Pure apart from the view
//! and config it is handed; the HTTP handlers only move bytes.

use std::collections::HashMap;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::catalogue::Action;
use crate::config::Config;
use crate::decide::{self, Context, Decided};
use crate::engine::{self, Decision, Finding};
use crate::model::{self, Kind, Object, ObjectRef, Subject};
use crate::mutations;
use crate::view::View;

/// Which endpoint answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Webhook {
    Validate,
    Mutate,
}

impl Webhook {
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Validate => "validate",
            Webhook::Mutate => "mutate",
        }
    }
}

/// A body that is not a usable AdmissionReview: HTTP 400 with this message.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct BadRequest(pub String);

/// What happened, for logs and metrics.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub uid: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub operation: String,
    pub dry_run: bool,
    /// `allowed`, `denied`, `warned`, `patched`, `skipped` (not a kind or operation we check).
    pub decision: &'static str,
    pub findings: Vec<(&'static str, Decision)>,
    pub mutations: Vec<&'static str>,
}

/// The apiserver's limit on the sum of warnings, and what it cuts each one to past it.
pub const WARNINGS_TOTAL_LIMIT: usize = 4096;
pub const WARNING_ITEM_LIMIT: usize = 256;

/// The most JSON values (scalars, arrays and objects, at any depth) a request body may hold.
/// Decoding costs memory per value, not per byte: an 8 MiB body of `"",` holds 2.8 million values
/// and took 0.7 GiB to decode through JSON trees (some 250-450 bytes a value), 0.24 GiB straight
/// into the typed objects (~90), so the count is checked before anything is decoded. Real objects
/// hold one value per ~20 bytes (the Deployments of `../shared/corpus`: 300-600 values in
/// 7-13 KB), so 65,536 values is an UPDATE of two ~650 KB Deployments, far beyond real ones.
pub const MAX_JSON_VALUES: usize = 65_536;

/// How deep serde_json nests before it gives up ("recursion limit exceeded").
const JSON_DEPTH_LIMIT: usize = 128;

/// An upper bound on the number of JSON values in `body` that decoding it would build, found
/// without decoding it: one, plus one per comma and per `[` / `{` outside strings (exact for
/// valid JSON with no empty array or object), not counting deeper than serde_json goes (a body
/// nested deeper is refused by the parser at that depth). Stops counting past
/// `MAX_JSON_VALUES + 1`.
pub fn count_values(body: &[u8]) -> usize {
    let (mut count, mut depth, mut in_string, mut escaped) = (1usize, 0usize, false, false);
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth <= JSON_DEPTH_LIMIT {
                    count += 1;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth <= JSON_DEPTH_LIMIT => count += 1,
            _ => {}
        }
        if count > MAX_JSON_VALUES {
            return count;
        }
    }
    count
}

/// A request as the webhook reads it: kube's [`AdmissionRequest`] for everything but the
/// objects, which stay the JSON text they were sent as until a rule needs them. Decoding them
/// into a JSON tree first (kube's `DynamicObject`, through a `#[serde(flatten)]` that buffers the
/// whole request once more) and then into the typed object was two thirds of a request's cost;
/// from the text they decode once, straight into the k8s-openapi types, and an `oldObject`
/// nobody reads is never decoded at all.
#[derive(Debug)]
pub struct Request {
    /// Every field of the request; `object` and `old_object` are always `None` here.
    pub header: AdmissionRequest<DynamicObject>,
    /// `request.object`: a JSON object, or `None` when absent or null.
    pub object: Option<Box<RawValue>>,
    /// `request.oldObject`: a JSON object, or `None` when absent or null.
    pub old_object: Option<Box<RawValue>>,
}

impl Request {
    /// The objects as JSON trees (for comparing requests: their text keeps the sender's layout).
    pub fn object_values(&self) -> [Option<Value>; 2] {
        [&self.object, &self.old_object].map(|o| o.as_ref().and_then(|raw| serde_json::from_str(raw.get()).ok()))
    }
}

/// The review as the apiserver sends it, read in one pass: [`AdmissionReview`] without its
/// flattened `TypeMeta` (which makes serde buffer the whole body) and with the objects as text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireReview {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    request: Option<WireRequest>,
}

/// [`AdmissionRequest`] field for field (the same names and defaults), the objects as text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: UserInfo,
    #[serde(default)]
    object: Option<Box<RawValue>>,
    #[serde(default)]
    old_object: Option<Box<RawValue>>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    options: Option<RawExtension>,
}

/// Decodes a request body. Only `admission.k8s.io/v1` with a `request` is usable, holding at
/// most [`MAX_JSON_VALUES`] values, whose objects (when present) are JSON objects.
pub fn parse(body: &[u8]) -> Result<Request, BadRequest> {
    parse_counted(body, count_values(body))
}

/// [`parse`] of a body whose [`count_values`] is `values` (the server counts once, for its
/// decoding budget, and does not count again).
pub fn parse_counted(body: &[u8], values: usize) -> Result<Request, BadRequest> {
    if values > MAX_JSON_VALUES {
        return Err(BadRequest(format!(
            "the body holds more than {MAX_JSON_VALUES} JSON values (an object the apiserver stores holds far fewer)"
        )));
    }
    // The usual body decodes in one pass, the objects kept as text. Whatever that does not take,
    // or takes but is not a v1 review with a request, goes the way below, which says what is
    // wrong with it.
    if let Ok(review) = serde_json::from_slice::<WireReview>(body)
        && review.kind == "AdmissionReview"
        && review.api_version == "admission.k8s.io/v1"
        && let Some(r) = review.request
        && r.object.as_deref().is_none_or(is_json_object)
        && r.old_object.as_deref().is_none_or(is_json_object)
    {
        let header = AdmissionRequest {
            types: TypeMeta { api_version: review.api_version, kind: review.kind },
            uid: r.uid,
            kind: r.kind,
            resource: r.resource,
            sub_resource: r.sub_resource,
            request_kind: r.request_kind,
            request_resource: r.request_resource,
            request_sub_resource: r.request_sub_resource,
            name: r.name,
            namespace: r.namespace,
            operation: r.operation,
            user_info: r.user_info,
            object: None,
            old_object: None,
            dry_run: r.dry_run,
            options: r.options,
        };
        return Ok(Request { header, object: r.object, old_object: r.old_object });
    }
    parse_via_tree(body)
}

/// serde_json keeps a raw value's text exactly, starting at its first character.
fn is_json_object(raw: &RawValue) -> bool {
    raw.get().starts_with('{')
}

/// [`parse`] by way of a JSON tree: slower, and says what is wrong with a body that is not usable.
fn parse_via_tree(body: &[u8]) -> Result<Request, BadRequest> {
    let mut value: Value = serde_json::from_slice(body).map_err(|e| BadRequest(format!("body is not JSON: {e}")))?;
    let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "AdmissionReview" || api_version != "admission.k8s.io/v1" {
        return Err(BadRequest(format!(
            "expected an AdmissionReview of apiVersion admission.k8s.io/v1, got kind {kind:?} apiVersion {api_version:?}"
        )));
    }
    let Some(request) = value.get_mut("request").and_then(Value::as_object_mut) else {
        return Err(if value.get("request").is_none_or(Value::is_null) {
            BadRequest("the AdmissionReview has no request".into())
        } else {
            BadRequest("not a usable AdmissionReview: request is not an object".into())
        });
    };
    let mut take = |field: &str| -> Result<Option<Box<RawValue>>, BadRequest> {
        match request.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v @ Value::Object(_)) => {
                serde_json::value::to_raw_value(&v).map(Some).map_err(|e| BadRequest(e.to_string()))
            }
            Some(_) => Err(BadRequest(format!("not a usable AdmissionReview: request.{field} is not an object"))),
        }
    };
    let (object, old_object) = (take("object")?, take("oldObject")?);
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(value).map_err(|e| BadRequest(format!("not a usable AdmissionReview: {e}")))?;
    let header = review.try_into().map_err(|_| BadRequest("the AdmissionReview has no request".into()))?;
    Ok(Request { header, object, old_object })
}

/// The subject of a request (its `object`), or `None` for kinds and operations ha-guard leaves
/// alone: what the rules judge, decoded and defaulted.
pub fn subject(request: &Request) -> Result<Option<Subject>, BadRequest> {
    subject_of(&request.header, request.object.as_deref())
}

/// The subject of a request's `object` (or `oldObject`), or `None` for kinds and operations
/// ha-guard leaves alone.
fn subject_of(req: &AdmissionRequest<DynamicObject>, object: Option<&RawValue>) -> Result<Option<Subject>, BadRequest> {
    let Some(object) = object else { return Ok(None) };
    let namespace = req.namespace.clone().unwrap_or_default();
    if req.sub_resource.as_deref() == Some("scale") {
        let kind = match (req.resource.group.as_str(), req.resource.resource.as_str()) {
            ("apps", "deployments") => Kind::Deployment,
            ("apps", "statefulsets") => Kind::StatefulSet,
            _ => return Ok(None),
        };
        let scale: Value = serde_json::from_str(object.get()).map_err(|e| BadRequest(e.to_string()))?;
        let replicas = scale
            .get("spec")
            .and_then(|s| s.get("replicas"))
            .map(|r| {
                r.as_i64()
                    .and_then(|r| i32::try_from(r).ok())
                    .ok_or_else(|| BadRequest("request.object.spec.replicas of the Scale is not an integer".into()))
            })
            .transpose()?
            .unwrap_or(0);
        return Ok(Some(Subject::Scale { target: ObjectRef::new(kind, namespace, req.name.clone()), replicas }));
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Ok(None);
    }
    if let Some(subject) = typed_subject(object, &namespace) {
        return Ok(Some(subject));
    }
    subject_via_tree(req, object, &namespace)
}

/// The subject by way of a JSON tree of the object and [`model::decode`]: any kind and shape.
fn subject_via_tree(
    req: &AdmissionRequest<DynamicObject>,
    object: &RawValue,
    namespace: &str,
) -> Result<Option<Subject>, BadRequest> {
    let mut value: Value =
        serde_json::from_str(object.get()).map_err(|e| BadRequest(format!("request.object: {e}")))?;
    // The object's own apiVersion/kind decide how it decodes; fall back to the request's kind.
    if let Some(obj) = value.as_object_mut() {
        let gvk = &req.kind;
        let api_version =
            if gvk.group.is_empty() { gvk.version.clone() } else { format!("{}/{}", gvk.group, gvk.version) };
        obj.entry("apiVersion").or_insert(Value::String(api_version));
        obj.entry("kind").or_insert(Value::String(gvk.kind.clone()));
    }
    match model::decode(&value, namespace) {
        Ok(Some(Object::Subject(s))) => Ok(Some(s)),
        Ok(_) => Ok(None),
        Err(e) => Err(BadRequest(format!("request.object: {e}"))),
    }
}

/// An object's text as the typed decoding reads it: its type, its metadata (all of
/// [`ObjectMeta`] but `managedFields`, which no rule reads and which can be most of an object),
/// and its spec and status as text, each decoded once it is known to be wanted.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireObject<'a> {
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<WireMeta>,
    #[serde(borrow)]
    spec: Option<&'a RawValue>,
    #[serde(borrow)]
    status: Option<&'a RawValue>,
}

/// [`ObjectMeta`] without `managedFields`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    annotations: Option<std::collections::BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

/// What a workload's spec must state for [`model::decode`] to take it as it is (it fills in a
/// missing selector, template or pod spec and reports them unchecked; k8s-openapi would default
/// them silently): `selector`, and `template.spec.containers`, each present and not null.
#[derive(Deserialize)]
struct WorkloadSpecShape<'a> {
    #[serde(borrow)]
    selector: Option<&'a RawValue>,
    template: Option<TemplateShape<'a>>,
}

#[derive(Deserialize)]
struct TemplateShape<'a> {
    #[serde(borrow)]
    spec: Option<PodSpecShape<'a>>,
}

#[derive(Deserialize)]
struct PodSpecShape<'a> {
    #[serde(borrow)]
    containers: Option<&'a RawValue>,
}

/// The subject decoded from the object's text straight into the k8s-openapi types, with no JSON
/// tree. Only for what is decoded exactly as [`model::decode`] would: a Deployment, StatefulSet,
/// PodDisruptionBudget or autoscaling/v2 HPA that states its apiVersion and kind, with a
/// workload's required fields present; `None` otherwise (and on any error), and the general way
/// runs. `managedFields` are left out: no rule reads them.
fn typed_subject(object: &RawValue, namespace: &str) -> Option<Subject> {
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;

    fn decoded<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<Option<T>> {
        match raw {
            None => Some(None),
            Some(raw) if raw.get() == "null" => Some(None),
            Some(raw) => serde_json::from_str(raw.get()).ok().map(Some),
        }
    }
    let wire: WireObject = serde_json::from_str(object.get()).ok()?;
    let kind = Kind::from_type(wire.api_version.as_deref()?, wire.kind.as_deref()?)?;
    let m = wire.metadata?;
    let mut metadata = ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
        managed_fields: None,
    };
    if metadata.namespace.as_deref().is_none_or(str::is_empty) {
        metadata.namespace = Some(namespace.to_string());
    }
    let workload_fields_present = || {
        let shape: WorkloadSpecShape = serde_json::from_str(wire.spec?.get()).ok()?;
        let present = |raw: Option<&RawValue>| raw.is_some_and(|r| r.get() != "null");
        (present(shape.selector) && present(shape.template?.spec?.containers)).then_some(())
    };
    Some(match kind {
        Kind::Deployment => {
            workload_fields_present()?;
            let d = Deployment { metadata, spec: decoded(wire.spec)?, status: decoded(wire.status)? };
            Subject::Workload(Box::new(crate::defaults::deployment(d)))
        }
        Kind::StatefulSet => {
            workload_fields_present()?;
            let s = StatefulSet { metadata, spec: decoded(wire.spec)?, status: decoded(wire.status)? };
            Subject::Workload(Box::new(crate::defaults::stateful_set(s)))
        }
        Kind::PodDisruptionBudget => Subject::Pdb(Box::new(PodDisruptionBudget {
            metadata,
            spec: decoded(wire.spec)?,
            status: decoded(wire.status)?,
        })),
        Kind::HorizontalPodAutoscaler if wire.api_version.as_deref() == Some("autoscaling/v2") => {
            let mut h = HorizontalPodAutoscaler { metadata, spec: decoded(wire.spec)?, status: decoded(wire.status)? };
            crate::defaults::hpa(&mut h);
            Subject::Hpa(Box::new(h))
        }
        _ => return None,
    })
}

/// Answers one request.
pub fn review(
    request: &Request,
    webhook: Webhook,
    view: &dyn View,
    config: &Config,
) -> Result<(AdmissionResponse, Outcome), BadRequest> {
    let req = &request.header;
    let mut outcome = Outcome {
        uid: req.uid.clone(),
        kind: req.kind.kind.clone(),
        namespace: req.namespace.clone().unwrap_or_default(),
        name: req.name.clone(),
        operation: format!("{:?}", req.operation).to_uppercase(),
        dry_run: req.dry_run,
        decision: "skipped",
        ..Default::default()
    };
    if req.sub_resource.as_deref() == Some("scale") {
        outcome.kind = format!("{}/scale", req.resource.resource);
    }
    let mut response = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Ok((response, outcome));
    }
    let Some(subject) = subject(request)? else { return Ok((response, outcome)) };
    let namespace = subject.id().namespace;
    if outcome.name.is_empty() {
        outcome.name = subject.id().name;
    }
    if let Some(reason) = decide::skip_reason(&namespace, view, config) {
        response.audit_annotations.insert("skipped".into(), reason);
        return Ok((response, outcome));
    }
    match webhook {
        Webhook::Mutate => {
            let plan = mutations::plan(&subject, view, config);
            outcome.decision = "allowed";
            if !plan.is_empty() {
                outcome.mutations = plan.applied();
                outcome.decision = "patched";
                response.audit_annotations.insert("mutations".into(), plan.applied().join(","));
                response = response.with_patch(plan.patch()).map_err(|e| BadRequest(e.to_string()))?;
            }
        }
        Webhook::Validate => {
            let eval = engine::evaluate(&subject, view, config);
            // Ratcheting reads the old object's findings only for a finding that denies (and never
            // on a scale write): decode and evaluate `oldObject` only then. Most UPDATEs deny
            // nothing, and this was a third of their cost.
            let scale = matches!(subject, Subject::Scale { .. });
            let may_ratchet = config.ratchet
                && !scale
                && eval.findings.iter().any(|f| {
                    let natural = if f.action == Decision::Deny { Action::Deny } else { Action::Warn };
                    config.action(f.rule, natural) == Action::Deny
                });
            let old_findings: Option<Vec<Finding>> = match (&req.operation, request.old_object.as_deref()) {
                (Operation::Update, old @ Some(_)) if may_ratchet => {
                    subject_of(req, old).ok().flatten().map(|old| engine::evaluate(&old, view, config).findings)
                }
                _ => None,
            };
            let ctx = Context { old: old_findings.as_deref(), scale, subject_exemptions: subject.exemptions() };
            let decided = decide::decide(eval, &namespace, view, config, &ctx);
            outcome.findings = decided.findings.iter().map(|f| (f.rule, f.action)).collect();
            outcome.decision = if decided.denied() {
                "denied"
            } else if decided.with(Decision::Warn).next().is_some() || !decided.warnings.is_empty() {
                "warned"
            } else {
                "allowed"
            };
            response = respond(response, &decided);
        }
    }
    Ok((response, outcome))
}

/// One line per finding: `[rule-id] Kind ns/name spec.path: what Fix: fix`.
/// A deny downgraded to a warning says why, so the user knows it would otherwise be refused.
pub fn line(f: &Finding) -> String {
    let why: Vec<&str> = f
        .notes
        .iter()
        .filter_map(|n| {
            if n == "pre-existing" {
                Some("pre-existing")
            } else if n.starts_with("namespace ") && n.ends_with("=warn") {
                Some("namespace in warn mode")
            } else if n.starts_with("scale writes") {
                Some("scale writes only warn")
            } else {
                None
            }
        })
        .collect();
    let why = if why.is_empty() { String::new() } else { format!("({}) ", why.join(", ")) };
    format!("[{}] {why}{}: {}", f.rule, f.path, f.message())
}

fn respond(mut response: AdmissionResponse, decided: &Decided) -> AdmissionResponse {
    let denials: Vec<String> = decided.with(Decision::Deny).map(line).collect();
    let warnings: Vec<String> =
        decided.with(Decision::Warn).map(line).chain(decided.warnings.iter().cloned()).collect();
    response.audit_annotations = audit_annotations(decided);
    if !warnings.is_empty() {
        response.warnings = Some(fit_warnings(warnings));
    }
    if !denials.is_empty() {
        response = response.deny(denials.join("\n"));
        response.result.code = 403;
        response.result.reason = "Forbidden".into();
    }
    response
}

fn audit_annotations(decided: &Decided) -> HashMap<String, String> {
    let mut a = HashMap::new();
    let findings: Vec<String> = decided.findings.iter().map(|f| format!("{}={}", f.rule, f.action.as_str())).collect();
    if !findings.is_empty() {
        a.insert("findings".into(), findings.join(","));
    }
    let exempted: Vec<String> =
        decided.with(Decision::Allowed).map(|f| format!("{}: {}", f.rule, f.notes.join("; "))).collect();
    if !exempted.is_empty() {
        a.insert("exempted".into(), exempted.join(" | "));
    }
    a
}

fn cut(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max_chars - 1).collect();
    out.push('…');
    out
}

/// The apiserver keeps warnings whole while their sum stays within 4 KiB, and cuts each to 256
/// characters past that. Do it ourselves so what is cut is predictable: whole messages when they
/// fit, else each cut to 256, else as many as fit and a last line saying how many were left out.
pub fn fit_warnings(warnings: Vec<String>) -> Vec<String> {
    let total = |w: &[String]| w.iter().map(|s| s.chars().count()).sum::<usize>();
    if total(&warnings) <= WARNINGS_TOTAL_LIMIT {
        return warnings;
    }
    let cut_all: Vec<String> = warnings.iter().map(|w| cut(w, WARNING_ITEM_LIMIT)).collect();
    if total(&cut_all) <= WARNINGS_TOTAL_LIMIT {
        return cut_all;
    }
    let mut kept = Vec::new();
    let mut used = 0;
    let reserve = 80;
    for w in &cut_all {
        let n = w.chars().count();
        if used + n + reserve > WARNINGS_TOTAL_LIMIT {
            break;
        }
        used += n;
        kept.push(w.clone());
    }
    let left = cut_all.len() - kept.len();
    kept.push(format!("[ha-guard] {left} more warnings left out (see the audit annotations)"));
    kept
}

/// The review to send back.
pub fn into_review(response: AdmissionResponse) -> AdmissionReview<DynamicObject> {
    response.into_review()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` warnings of exactly `len` characters, each starting `[rule-i]`.
    fn warnings(n: usize, len: usize, fill: char) -> Vec<String> {
        (0..n)
            .map(|i| {
                let mut w = format!("[rule-{i}] ");
                while w.chars().count() < len {
                    w.push(fill);
                }
                w
            })
            .collect()
    }

    fn total(w: &[String]) -> usize {
        w.iter().map(|s| s.chars().count()).sum()
    }

    #[test]
    fn under_the_limit_they_are_kept_whole() {
        let w = warnings(3, 1000, 'x');
        assert_eq!(fit_warnings(w.clone()), w);
        assert!(fit_warnings(Vec::new()).is_empty());
    }

    #[test]
    fn exactly_at_the_limit_they_are_kept_whole() {
        let w = warnings(4, WARNINGS_TOTAL_LIMIT / 4, 'x');
        assert_eq!(total(&w), WARNINGS_TOTAL_LIMIT);
        assert_eq!(fit_warnings(w.clone()), w);
    }

    #[test]
    fn one_character_over_cuts_each_long_one_to_256() {
        let mut w = warnings(4, WARNINGS_TOTAL_LIMIT / 4, 'x');
        w.push("[short] y".into());
        assert_eq!(total(&w), WARNINGS_TOTAL_LIMIT + 9);
        let fitted = fit_warnings(w.clone());
        assert_eq!(fitted.len(), 5, "nothing dropped: {fitted:?}");
        for (cut, orig) in fitted.iter().zip(&w).take(4) {
            assert_eq!(cut.chars().count(), WARNING_ITEM_LIMIT);
            assert!(cut.ends_with('…'), "{cut}");
            let kept: String = orig.chars().take(WARNING_ITEM_LIMIT - 1).collect();
            assert!(cut.starts_with(&kept), "the start (and the [rule-id] prefix) is kept");
        }
        assert_eq!(fitted[4], "[short] y", "a warning under 256 characters is not cut");
    }

    #[test]
    fn multibyte_characters_count_once_and_are_not_split() {
        // 3000 characters but 6000 bytes: whole.
        let w = warnings(3, 1000, 'é');
        assert_eq!(fit_warnings(w.clone()), w);
        // 5000 characters: cut on a character boundary.
        let w = warnings(5, 1000, 'é');
        let fitted = fit_warnings(w);
        assert!(fitted.iter().all(|f| f.chars().count() == WARNING_ITEM_LIMIT && f.ends_with("é…")));
    }

    #[test]
    fn far_over_the_limit_a_last_line_says_how_many_are_left_out() {
        let w = warnings(100, 300, 'x');
        let fitted = fit_warnings(w.clone());
        assert!(total(&fitted) <= WARNINGS_TOTAL_LIMIT, "{} characters", total(&fitted));
        let (last, kept) = fitted.split_last().unwrap();
        assert!(kept.len() >= 10, "as many as fit are kept: {}", kept.len());
        for (i, k) in kept.iter().enumerate() {
            assert!(k.starts_with(&format!("[rule-{i}] ")), "kept in order: {k}");
            assert_eq!(k.chars().count(), WARNING_ITEM_LIMIT);
        }
        let left = 100 - kept.len();
        assert_eq!(last, &format!("[ha-guard] {left} more warnings left out (see the audit annotations)"));
    }

    #[test]
    fn count_values_counts_every_value_and_ignores_strings() {
        let exact = |json: &str| {
            let v: Value = serde_json::from_str(json).unwrap();
            fn values(v: &Value) -> usize {
                1 + match v {
                    Value::Array(a) => a.iter().map(values).sum(),
                    Value::Object(o) => o.values().map(values).sum(),
                    _ => 0,
                }
            }
            assert_eq!(count_values(json.as_bytes()), values(&v), "{json}");
        };
        exact("0");
        exact(r#""a,b[c{d""#);
        exact(r#"[1,2,[3,{"k":"v","w":[4]}]]"#);
        exact(r#"{"a\",\"b":"c\\",  "d" : [ "e" , "]," ]}"#);
        exact(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}"#);
        // Empty containers are counted as holding one value: an upper bound.
        assert_eq!(count_values(b"[[],{}]"), 5);
        // Nothing deeper than the parser goes is counted: 100,000 nested arrays are refused by
        // the parser, at depth 128, not by the count.
        let deep = [vec![b'['; 100_000], vec![b']'; 100_000]].concat();
        assert_eq!(count_values(&deep), 1 + 128);
        let deep_lists = [vec![b'['; 100_000], b"1,2,3".to_vec(), vec![b']'; 100_000]].concat();
        assert_eq!(count_values(&deep_lists), 1 + 128);
    }

    #[test]
    fn a_body_with_too_many_values_is_refused_before_decoding() {
        let mut body = b"[".to_vec();
        body.extend(std::iter::repeat_n(&b"0,"[..], MAX_JSON_VALUES).flatten());
        body.extend(b"0]");
        assert_eq!(count_values(&body), MAX_JSON_VALUES + 1);
        let e = parse(&body).unwrap_err();
        assert!(e.0.contains("more than 65536 JSON values"), "{e}");
        // An array of MAX_JSON_VALUES - 1 numbers (MAX_JSON_VALUES values with the array) is
        // decoded, and refused for what it is.
        body.drain(1..5);
        assert_eq!(count_values(&body), MAX_JSON_VALUES);
        let e = parse(&body).unwrap_err();
        assert!(e.0.contains("expected an AdmissionReview"), "{e}");
    }

    /// The fast ways of decoding (straight into the review; the typed subject without a JSON
    /// tree) give what the tree ways give, for every fixture and for both objects of an UPDATE.
    #[test]
    fn fast_decoding_matches_the_tree_way_on_every_fixture() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut subjects = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let body = std::fs::read(entry.path()).unwrap();
            let (Ok(fast), Ok(tree)) = (parse(&body), parse_via_tree(&body)) else { continue };
            assert_eq!(format!("{:?}", fast.header), format!("{:?}", tree.header), "{}", entry.path().display());
            assert_eq!(fast.object_values(), tree.object_values(), "{}", entry.path().display());
            let namespace = fast.header.namespace.clone().unwrap_or_default();
            for object in [&fast.object, &fast.old_object].into_iter().flatten() {
                if fast.header.sub_resource.is_some() {
                    continue;
                }
                let Some(typed) = typed_subject(object, &namespace) else { continue };
                let via_tree = subject_via_tree(&fast.header, object, &namespace).unwrap().expect("a subject");
                assert_eq!(format!("{typed:?}"), format!("{via_tree:?}"), "{}", entry.path().display());
                subjects += 1;
            }
        }
        assert!(subjects >= 20, "the typed way was taken for {subjects} objects only");
    }

    fn review_of(object: Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
                "name": "web",
                "namespace": "shop",
                "operation": "UPDATE",
                "userInfo": {"username": "u"},
                "object": object,
                "oldObject": null,
            }
        }))
        .unwrap()
    }

    fn deployment(spec: Value) -> Value {
        serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "labels": {"app": "web"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
            },
            "spec": spec,
            "status": {"replicas": 3, "conditions": [{"type": "Available", "status": "True"}]},
        })
    }

    fn full_spec() -> Value {
        serde_json::json!({
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        })
    }

    /// What the apiserver sends (managedFields, status) decodes the fast way, to what the JSON
    /// tree way gives for the object without its managedFields (which no rule reads).
    #[test]
    fn an_object_as_the_apiserver_sends_it_decodes_the_typed_way() {
        let object = deployment(full_spec());
        let request = parse(&review_of(object.clone())).unwrap();
        assert!(request.old_object.is_none(), "a null oldObject is no object");
        let raw = request.object.as_deref().unwrap();
        let typed = typed_subject(raw, "shop").expect("the typed way takes it");
        let mut without = object;
        without["metadata"].as_object_mut().unwrap().remove("managedFields");
        let without = serde_json::value::to_raw_value(&without).unwrap();
        let via_tree = subject_via_tree(&request.header, &without, "shop").unwrap().unwrap();
        assert_eq!(format!("{typed:?}"), format!("{via_tree:?}"));
        assert!(format!("{typed:?}").contains("namespace: Some(\"shop\")"), "the request's namespace is filled in");
    }

    /// A workload whose spec lacks what the API requires goes the tree way, which reports the
    /// missing fields (k8s-openapi alone would silently default them to a match-all selector).
    #[test]
    fn a_workload_missing_required_fields_goes_the_tree_way() {
        let cases = [
            ("selector", serde_json::json!({"template": full_spec()["template"]})),
            ("null selector", serde_json::json!({"selector": null, "template": full_spec()["template"]})),
            ("template", serde_json::json!({"selector": {"matchLabels": {"app": "web"}}})),
            ("pod spec", serde_json::json!({"selector": {}, "template": {"metadata": {}}})),
            ("containers", serde_json::json!({"selector": {}, "template": {"spec": {"containers": null}}})),
        ];
        for (what, spec) in cases {
            let request = parse(&review_of(deployment(spec))).unwrap();
            let raw = request.object.as_deref().unwrap();
            assert!(typed_subject(raw, "shop").is_none(), "{what}: not the typed way");
            let Some(Subject::Workload(w)) = subject(&request).unwrap() else { panic!("{what}: a workload") };
            assert!(!w.missing.is_empty(), "{what}: reported missing");
        }
    }

    #[test]
    fn an_object_that_is_not_a_json_object_is_refused() {
        for (object, old) in [
            (serde_json::json!("web"), Value::Null),
            (serde_json::json!([1]), Value::Null),
            (deployment(full_spec()), serde_json::json!(7)),
        ] {
            let mut body: Value = serde_json::from_slice(&review_of(object)).unwrap();
            body["request"]["oldObject"] = old;
            let e = parse(&serde_json::to_vec(&body).unwrap()).unwrap_err();
            assert!(e.0.contains("is not an object"), "{e}");
        }
        // Absent and null objects are no object (a DELETE carries only oldObject).
        let mut body: Value = serde_json::from_slice(&review_of(Value::Null)).unwrap();
        body["request"].as_object_mut().unwrap().remove("oldObject");
        let request = parse(&serde_json::to_vec(&body).unwrap()).unwrap();
        assert!(request.object.is_none() && request.old_object.is_none());
    }

    #[test]
    fn cut_keeps_short_strings_and_marks_cut_ones() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
    }
}

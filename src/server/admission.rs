//! The webhook's core: an AdmissionReview in, an AdmissionReview out. Pure apart from the view
//! and config it is handed; the HTTP handlers only move bytes.

use std::collections::HashMap;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::Value;

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

/// Decodes a request body. Only `admission.k8s.io/v1` with a `request` is usable, holding at
/// most [`MAX_JSON_VALUES`] values.
pub fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, BadRequest> {
    parse_counted(body, count_values(body))
}

/// [`parse`] of a body whose [`count_values`] is `values` (the server counts once, for its
/// decoding budget, and does not count again).
pub fn parse_counted(body: &[u8], values: usize) -> Result<AdmissionRequest<DynamicObject>, BadRequest> {
    if values > MAX_JSON_VALUES {
        return Err(BadRequest(format!(
            "the body holds more than {MAX_JSON_VALUES} JSON values (an object the apiserver stores holds far fewer)"
        )));
    }
    // The usual body decodes straight into the review: no JSON tree first (building it took
    // about as long as the rest of the request). Whatever that does not take, or takes but is
    // not a v1 review with a request, goes the way below, which says what is wrong with it.
    if let Ok(review) = serde_json::from_slice::<AdmissionReview<DynamicObject>>(body)
        && review.types.kind == "AdmissionReview"
        && review.types.api_version == "admission.k8s.io/v1"
        && let Some(request) = review.request
    {
        return Ok(AdmissionRequest { types: review.types, ..request });
    }
    parse_via_tree(body)
}

/// [`parse`] by way of a JSON tree: slower, and says what is wrong with a body that is not usable.
fn parse_via_tree(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, BadRequest> {
    let value: Value = serde_json::from_slice(body).map_err(|e| BadRequest(format!("body is not JSON: {e}")))?;
    let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "AdmissionReview" || api_version != "admission.k8s.io/v1" {
        return Err(BadRequest(format!(
            "expected an AdmissionReview of apiVersion admission.k8s.io/v1, got kind {kind:?} apiVersion {api_version:?}"
        )));
    }
    if value.get("request").is_none_or(Value::is_null) {
        return Err(BadRequest("the AdmissionReview has no request".into()));
    }
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(value).map_err(|e| BadRequest(format!("not a usable AdmissionReview: {e}")))?;
    review.try_into().map_err(|_| BadRequest("the AdmissionReview has no request".into()))
}

/// The subject of a request, or `None` for kinds and operations ha-guard leaves alone.
fn subject_of(
    req: &AdmissionRequest<DynamicObject>,
    object: &Option<DynamicObject>,
) -> Result<Option<Subject>, BadRequest> {
    let Some(object) = object else { return Ok(None) };
    let namespace = req.namespace.clone().unwrap_or_default();
    if req.sub_resource.as_deref() == Some("scale") {
        let kind = match (req.resource.group.as_str(), req.resource.resource.as_str()) {
            ("apps", "deployments") => Kind::Deployment,
            ("apps", "statefulsets") => Kind::StatefulSet,
            _ => return Ok(None),
        };
        let replicas = object
            .data
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
    object: &DynamicObject,
    namespace: &str,
) -> Result<Option<Subject>, BadRequest> {
    let mut value = serde_json::to_value(object).map_err(|e| BadRequest(e.to_string()))?;
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

/// The subject decoded from the object's typed metadata and its borrowed JSON, without the
/// round trip through a JSON tree that [`model::decode`] takes (serialising the object, copying
/// it, deserialising it: most of a request's cost). Only for what is decoded exactly as that
/// would: a Deployment, StatefulSet, PodDisruptionBudget or autoscaling/v2 HPA that states its
/// apiVersion and kind, with a workload's required fields present; `None` otherwise (and on
/// any error), and the general way runs. `managedFields` are left out: no rule reads them.
fn typed_subject(object: &DynamicObject, namespace: &str) -> Option<Subject> {
    use k8s_openapi::api::apps::v1::{
        Deployment, DeploymentSpec, DeploymentStatus, StatefulSet, StatefulSetSpec, StatefulSetStatus,
    };
    use k8s_openapi::api::autoscaling::v2::{
        HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, HorizontalPodAutoscalerStatus,
    };
    use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
    use serde::Deserialize;

    fn field<'a, T: Deserialize<'a>>(data: &'a Value, name: &str) -> Option<Option<T>> {
        match data.get(name) {
            None | Some(Value::Null) => Some(None),
            Some(v) => T::deserialize(v).ok().map(Some),
        }
    }
    let types = object.types.as_ref()?;
    let kind = Kind::from_type(&types.api_version, &types.kind)?;
    let data = &object.data;
    if !data.is_object() {
        return None;
    }
    let m = &object.metadata;
    let mut metadata = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        annotations: m.annotations.clone(),
        creation_timestamp: m.creation_timestamp.clone(),
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp.clone(),
        finalizers: m.finalizers.clone(),
        generate_name: m.generate_name.clone(),
        generation: m.generation,
        labels: m.labels.clone(),
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        owner_references: m.owner_references.clone(),
        resource_version: m.resource_version.clone(),
        self_link: m.self_link.clone(),
        uid: m.uid.clone(),
        ..Default::default()
    };
    if metadata.namespace.as_deref().is_none_or(str::is_empty) {
        metadata.namespace = Some(namespace.to_string());
    }
    let workload_fields_present = || {
        let spec = data.get("spec").filter(|s| s.is_object())?;
        let template = spec.get("template").filter(|t| t.is_object())?;
        let pod = template.get("spec").filter(|p| p.is_object())?;
        (!spec.get("selector").is_none_or(Value::is_null) && !pod.get("containers").is_none_or(Value::is_null))
            .then_some(())
    };
    Some(match kind {
        Kind::Deployment => {
            workload_fields_present()?;
            let d = Deployment {
                metadata,
                spec: field::<DeploymentSpec>(data, "spec")?,
                status: field::<DeploymentStatus>(data, "status")?,
            };
            Subject::Workload(Box::new(crate::defaults::deployment(d)))
        }
        Kind::StatefulSet => {
            workload_fields_present()?;
            let s = StatefulSet {
                metadata,
                spec: field::<StatefulSetSpec>(data, "spec")?,
                status: field::<StatefulSetStatus>(data, "status")?,
            };
            Subject::Workload(Box::new(crate::defaults::stateful_set(s)))
        }
        Kind::PodDisruptionBudget => Subject::Pdb(Box::new(PodDisruptionBudget {
            metadata,
            spec: field::<PodDisruptionBudgetSpec>(data, "spec")?,
            status: field::<PodDisruptionBudgetStatus>(data, "status")?,
        })),
        Kind::HorizontalPodAutoscaler if types.api_version == "autoscaling/v2" => {
            let mut h = HorizontalPodAutoscaler {
                metadata,
                spec: field::<HorizontalPodAutoscalerSpec>(data, "spec")?,
                status: field::<HorizontalPodAutoscalerStatus>(data, "status")?,
            };
            crate::defaults::hpa(&mut h);
            Subject::Hpa(Box::new(h))
        }
        _ => return None,
    })
}

/// Answers one request.
pub fn review(
    req: &AdmissionRequest<DynamicObject>,
    webhook: Webhook,
    view: &dyn View,
    config: &Config,
) -> Result<(AdmissionResponse, Outcome), BadRequest> {
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
    let Some(subject) = subject_of(req, &req.object)? else { return Ok((response, outcome)) };
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
            let old_findings: Option<Vec<Finding>> = match (&req.operation, &req.old_object) {
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
            assert_eq!(format!("{fast:?}"), format!("{tree:?}"), "{}", entry.path().display());
            let namespace = fast.namespace.clone().unwrap_or_default();
            for object in [&fast.object, &fast.old_object].into_iter().flatten() {
                if fast.sub_resource.is_some() {
                    continue;
                }
                let Some(typed) = typed_subject(object, &namespace) else { continue };
                let via_tree = subject_via_tree(&fast, object, &namespace).unwrap().expect("a subject");
                assert_eq!(format!("{typed:?}"), format!("{via_tree:?}"), "{}", entry.path().display());
                subjects += 1;
            }
        }
        assert!(subjects >= 20, "the typed way was taken for {subjects} objects only");
    }

    #[test]
    fn cut_keeps_short_strings_and_marks_cut_ones() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
    }
}

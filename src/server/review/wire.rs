//! The AdmissionReview as it arrives, read in one pass. These are hand-copied wire types (kube's
//! [`AdmissionRequest`] field for field, [`ObjectMeta`] with `managedFields` cut to what is kept of
//! them), kept in this one
//! file: kube's own `AdmissionReview<DynamicObject>` flattens its `TypeMeta`, which makes serde
//! buffer the whole body once more, and decodes the objects into JSON trees nobody needs. A test
//! holds the copies to kube's types field for field.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::core::model::managed::AppliersRead;

/// A body that is not a usable AdmissionReview: HTTP 400 with this message.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct BadRequest(pub String);

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
    let (mut count, mut depth, mut at) = (1usize, 0usize, 0usize);
    while let Some(&b) = body.get(at) {
        at += 1;
        match b {
            // Most of a body is inside strings: jump from quote to quote (or escape), which
            // memchr does many bytes at a time, rather than look at each byte.
            b'"' => loop {
                let Some(i) = body.get(at..).and_then(|rest| memchr::memchr2(b'"', b'\\', rest)) else {
                    return count;
                };
                at += i + 1;
                if body[at - 1] == b'"' {
                    break;
                }
                at += 1; // the escaped character, whatever it is
            },
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

/// [`count_values`], or a bound above it that is cheaper to find: one plus every `,`, `[` and `{`
/// byte of the body, strings included (vector compares, a fraction of the exact count's cost,
/// which jumps from string to string). Every value the exact count counts is behind one of those
/// bytes, so the bound is never below it; when the bound is over [`MAX_JSON_VALUES`], the exact
/// count is returned, so a body is refused only for the values it really holds, never for commas
/// in its strings. What the server takes from the decoding budget and checks against the limit.
/// (Not inlined: the profiles find it by name.)
#[inline(never)]
pub fn value_bound(body: &[u8]) -> usize {
    // In chunks of at most 255 bytes, each counted into a u8, which the compiler vectorizes
    // (a plain `filter().count()` it does not, and costs 10 instructions a byte).
    let bound = 1 + body
        .chunks(255)
        .map(|chunk| usize::from(chunk.iter().fold(0u8, |n, &b| n + u8::from(matches!(b, b',' | b'[' | b'{')))))
        .sum::<usize>();
    if bound <= MAX_JSON_VALUES { bound } else { count_values(body) }
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
    parse_counted(body, value_bound(body))
}

/// [`parse`] of a body whose [`value_bound`] is `values` (the server counts once, for its
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
pub(crate) fn parse_via_tree(body: &[u8]) -> Result<Request, BadRequest> {
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

/// An object's text as the typed decoding reads it: its type, its metadata (all of
/// [`ObjectMeta`], of `managedFields` only who owns `spec.replicas` by server-side apply: the rest
/// no rule reads, and it can be most of an object), and its spec and status as text, each decoded
/// once it is known to be wanted.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireObject<'a> {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub metadata: Option<WireMeta>,
    #[serde(borrow)]
    pub spec: Option<&'a RawValue>,
    #[serde(borrow)]
    pub status: Option<&'a RawValue>,
}

/// [`ObjectMeta`] with `managedFields` read straight into what is kept of them
/// ([`AppliersRead`]): the `Apply` managers that own `spec.replicas`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireMeta {
    pub annotations: Option<BTreeMap<String, String>>,
    pub creation_timestamp: Option<Time>,
    pub deletion_grace_period_seconds: Option<i64>,
    pub deletion_timestamp: Option<Time>,
    pub finalizers: Option<Vec<String>>,
    pub generate_name: Option<String>,
    pub generation: Option<i64>,
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub managed_fields: AppliersRead,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub owner_references: Option<Vec<OwnerReference>>,
    pub resource_version: Option<String>,
    pub self_link: Option<String>,
    pub uid: Option<String>,
}

impl From<WireMeta> for ObjectMeta {
    fn from(m: WireMeta) -> ObjectMeta {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: m.managed_fields.0,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        exact(r#"["\\\"",["\\"],"\u002c,"]"#);
        // Cut-off bodies (the parser refuses them) are counted without reading past the end.
        assert_eq!(count_values(br#"["a","b\"#), 3);
        assert_eq!(count_values(br#"["a","b"#), 3);
        assert_eq!(count_values(br#"[1,"#), 3);
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
    fn the_value_bound_is_never_below_the_count_and_is_the_count_over_the_limit() {
        for json in [
            "0",
            r#""a,b[c{d""#,
            r#"[1,2,[3,{"k":"v","w":[4]}]]"#,
            r#"{"a\",\"b":"c\\",  "d" : [ "e" , "]," ]}"#,
            r#"["\\\"",["\\"],"\u002c,"]"#,
            r#"["a","b\"#,
            "[[],{}]",
        ] {
            let (bound, exact) = (value_bound(json.as_bytes()), count_values(json.as_bytes()));
            assert!(bound >= exact, "{json}: bound {bound} < count {exact}");
        }
        // Commas inside strings count in the bound, not in the count.
        assert_eq!(value_bound(br#"["a,b,c"]"#), 4);
        assert_eq!(count_values(br#"["a,b,c"]"#), 2);
        // A string of more commas than the limit: the bound is over it, so the exact count (2)
        // is what the server checks, and the body is not refused.
        let commas = [&b"[\""[..], &vec![b','; MAX_JSON_VALUES + 10], b"\"]"].concat();
        assert_eq!(value_bound(&commas), 2);
        assert!(parse(&commas).is_err_and(|e| !e.0.contains("JSON values")));
        // Nesting past the parser's depth: the bound is over the limit, the count is 1 + 128.
        let deep = [vec![b'['; 100_000], vec![b']'; 100_000]].concat();
        assert_eq!(value_bound(&deep), 1 + 128);
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

    /// A review with every field kube's `AdmissionRequest` serializes, each set.
    fn full_review() -> Value {
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
                "subResource": "scale",
                "requestKind": {"group": "apps", "version": "v1beta2", "kind": "Deployment"},
                "requestResource": {"group": "apps", "version": "v1beta2", "resource": "deployments"},
                "requestSubResource": "scale",
                "name": "web",
                "namespace": "shop",
                "operation": "UPDATE",
                "userInfo": {"username": "u", "uid": "1", "groups": ["g"], "extra": {"k": ["v"]}},
                "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
                "oldObject": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
                "dryRun": true,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions", "fieldManager": "kubectl"}
            }
        })
    }

    /// The hand-copied request reads every field kube's `AdmissionRequest` has, to the same value:
    /// a field kube has and the copy lacks would come out unset and differ here.
    #[test]
    fn the_wire_request_is_kubes_admission_request() {
        let review = full_review();
        let kube: AdmissionReview<DynamicObject> = serde_json::from_value(review.clone()).unwrap();
        let kube: AdmissionRequest<DynamicObject> = kube.try_into().unwrap();
        let mut theirs = serde_json::to_value(&kube).unwrap();
        // Every field kube serializes is set in the input, so none is tested at its default.
        let sent = review["request"].as_object().unwrap();
        for key in theirs.as_object().unwrap().keys() {
            assert!(sent.contains_key(key), "kube's AdmissionRequest has {key}: set it in full_review()");
        }
        let ours = parse(&serde_json::to_vec(&review).unwrap()).unwrap();
        for field in ["object", "oldObject"] {
            theirs.as_object_mut().unwrap().remove(field);
            assert!(serde_json::to_value(&ours.header).unwrap().get(field).is_none_or(Value::is_null));
        }
        let mut ours_value = serde_json::to_value(&ours.header).unwrap();
        ours_value.as_object_mut().unwrap().retain(|_, v| !v.is_null());
        theirs.as_object_mut().unwrap().retain(|_, v| !v.is_null());
        assert_eq!(ours_value, theirs);
        assert_eq!(
            ours.object_values(),
            [Some(review["request"]["object"].clone()), Some(review["request"]["oldObject"].clone())]
        );
    }

    /// `WireMeta` is `ObjectMeta` field for field, `managedFields` cut to what is kept of them.
    #[test]
    fn the_wire_meta_is_object_meta_with_managed_fields_cut() {
        let meta = serde_json::json!({
            "annotations": {"a": "b"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 30,
            "deletionTimestamp": "2026-01-02T00:00:00Z",
            "finalizers": ["f"],
            "generateName": "web-",
            "generation": 3,
            "labels": {"app": "web"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}},
                              {"manager": "kube-controller-manager", "operation": "Update",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}],
            "name": "web",
            "namespace": "shop",
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "1"}],
            "resourceVersion": "7",
            "selfLink": "/x",
            "uid": "u"
        });
        let full: ObjectMeta = serde_json::from_value(meta.clone()).unwrap();
        let every = serde_json::to_value(&full).unwrap();
        assert_eq!(
            every.as_object().unwrap().len(),
            meta.as_object().unwrap().len(),
            "set every ObjectMeta field above"
        );
        let wire: WireMeta = serde_json::from_value(meta).unwrap();
        let mut cut = full;
        crate::core::model::managed::keep_replicas_appliers(&mut cut);
        assert_eq!(cut.managed_fields.as_ref().map(Vec::len), Some(1), "kubectl's Apply of spec.replicas");
        assert_eq!(ObjectMeta::from(wire), cut);
    }
}

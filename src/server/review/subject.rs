//! The subject of a request: its object decoded and defaulted, the typed way when the object's
//! text allows it, else through a JSON tree and the manifest decoder.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::wire::{BadRequest, Request, WireMeta, WireObject};
use crate::core::model::read::{DeploymentSpecRead, HpaSpecRead, StatefulSetSpecRead, WorkloadSpecRead};
use crate::core::model::{self, Kind, Object, ObjectRef, Subject, defaults};

/// The subject of a request (its `object`), or `None` for kinds and operations ha-guard leaves
/// alone: what the rules judge, decoded and defaulted.
pub fn subject(request: &Request) -> Result<Option<Subject>, BadRequest> {
    subject_of(&request.header, request.object.as_deref())
}

/// [`subject`], and the text of the object's `spec` when decoding read it on the way (the typed
/// way; `None` otherwise, or when the object has no spec): what
/// [`changes_nothing_read`](super::unchanged::changes_nothing_read) compares first, without
/// reading the object again.
pub fn subject_and_spec(request: &Request) -> Result<(Option<Subject>, Option<&str>), BadRequest> {
    subject_and_spec_of(&request.header, request.object.as_deref())
}

/// The subject of a request's `object` (or `oldObject`), or `None` for kinds and operations
/// ha-guard leaves alone.
pub fn subject_of(
    req: &AdmissionRequest<DynamicObject>,
    object: Option<&RawValue>,
) -> Result<Option<Subject>, BadRequest> {
    subject_and_spec_of(req, object).map(|(subject, _)| subject)
}

/// [`subject_of`], and the text of the object's `spec` as [`subject_and_spec`] gives it.
pub fn subject_and_spec_of<'o>(
    req: &AdmissionRequest<DynamicObject>,
    object: Option<&'o RawValue>,
) -> Result<(Option<Subject>, Option<&'o str>), BadRequest> {
    let Some(object) = object else { return Ok((None, None)) };
    let namespace = req.namespace.clone().unwrap_or_default();
    if req.sub_resource.as_deref() == Some("scale") {
        let kind = match (req.resource.group.as_str(), req.resource.resource.as_str()) {
            ("apps", "deployments") => Kind::Deployment,
            ("apps", "statefulsets") => Kind::StatefulSet,
            _ => return Ok((None, None)),
        };
        let replicas = scale_replicas(object)?;
        let subject = Subject::Scale { target: ObjectRef::new(kind, namespace, req.name.clone()), replicas };
        return Ok((Some(subject), None));
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Ok((None, None));
    }
    // The spec's text is compared only on an UPDATE (`changes_nothing_read_given`): elsewhere a
    // workload's spec is decoded in the pass that reads its metadata.
    if !matches!(req.operation, Operation::Update) {
        let one_pass = match (req.kind.group.as_str(), req.kind.kind.as_str()) {
            ("apps", "Deployment") => workload_in_one_pass::<DeploymentSpecRead>(object, &namespace),
            ("apps", "StatefulSet") => workload_in_one_pass::<StatefulSetSpecRead>(object, &namespace),
            _ => None,
        };
        if let Some(subject) = one_pass {
            return Ok((Some(subject), None));
        }
    }
    if let Some((subject, spec)) = typed_subject_and_spec(object, &namespace) {
        return Ok((Some(subject), spec));
    }
    subject_via_tree(req, object, &namespace).map(|subject| (subject, None))
}

/// `spec.replicas` of a Scale (0 when absent), read without a tree of the object: only the text
/// of its `spec` and of the count are taken. An object whose keys repeat (which no apiserver
/// sends) is read through a tree, the last of each key winning, as before.
fn scale_replicas(object: &RawValue) -> Result<i32, BadRequest> {
    #[derive(Deserialize)]
    struct Scale<'a> {
        #[serde(borrow)]
        spec: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct ScaleSpec<'a> {
        // A stated `null` is kept (and refused below), not taken for an absent count.
        #[serde(default, borrow, deserialize_with = "stated")]
        replicas: Option<&'a RawValue>,
    }
    fn stated<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
        <&RawValue>::deserialize(d).map(Some)
    }
    let replicas = match serde_json::from_str::<Scale>(object.get()) {
        Ok(Scale { spec: Some(spec) }) if spec.get().starts_with('{') => {
            match serde_json::from_str::<ScaleSpec>(spec.get()) {
                Ok(spec) => spec.replicas.map(|r| serde_json::from_str::<i64>(r.get()).map_err(|_| not_an_integer())),
                Err(_) => return scale_replicas_via_tree(object),
            }
        }
        Ok(_) => None,
        Err(_) => return scale_replicas_via_tree(object),
    };
    replicas.transpose()?.map_or(Ok(0), |r| i32::try_from(r).map_err(|_| not_an_integer()))
}

fn not_an_integer() -> BadRequest {
    BadRequest("request.object.spec.replicas of the Scale is not an integer".into())
}

/// [`scale_replicas`] through a JSON tree of the object.
fn scale_replicas_via_tree(object: &RawValue) -> Result<i32, BadRequest> {
    let scale: Value = serde_json::from_str(object.get()).map_err(|e| BadRequest(e.to_string()))?;
    scale
        .get("spec")
        .and_then(|s| s.get("replicas"))
        .map(|r| r.as_i64().and_then(|r| i32::try_from(r).ok()).ok_or_else(not_an_integer))
        .transpose()
        .map(|r| r.unwrap_or(0))
}

/// When the object of the request was created (`metadata.creationTimestamp`): from the decoded
/// subject, or for a scale write from the Scale's metadata (which the apiserver copies from the
/// workload), read without decoding the rest of it.
pub fn created_at(request: &Request, subject: &Subject) -> Option<Timestamp> {
    if let Some(meta) = subject.meta() {
        return meta.creation_timestamp.as_ref().map(|t| t.0);
    }
    #[derive(Deserialize)]
    struct Object {
        metadata: Option<Meta>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        creation_timestamp: Option<Time>,
    }
    let object: Object = serde_json::from_str(request.object.as_deref()?.get()).ok()?;
    object.metadata?.creation_timestamp.map(|t| t.0)
}

/// `spec.replicas` of an UPDATE's `oldObject`, read without decoding the rest of it.
pub fn old_replicas(request: &Request) -> Option<i32> {
    #[derive(Deserialize)]
    struct Old {
        spec: Option<OldSpec>,
    }
    #[derive(Deserialize)]
    struct OldSpec {
        replicas: Option<i32>,
    }
    serde_json::from_str::<Old>(request.old_object.as_deref()?.get()).ok()?.spec?.replicas
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

/// A workload's object with its spec decoded as the rules read it, in one pass.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireWorkload<S> {
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<WireMeta>,
    spec: Option<S>,
}

/// The workload of kind `S::KIND` decoded in one pass over the object's text (its status skipped,
/// its `managedFields` cut to who owns `spec.replicas` by server-side apply), when it is one that states its apiVersion, kind and required fields
/// ([`WorkloadSpecRead::states_required_fields`]); `None` otherwise, and the general way runs.
fn workload_in_one_pass<S: WorkloadSpecRead>(object: &RawValue, namespace: &str) -> Option<Subject> {
    let wire: WireWorkload<S> = serde_json::from_str(object.get()).ok()?;
    if Kind::from_type(wire.api_version.as_deref()?, wire.kind.as_deref()?)? != S::KIND {
        return None;
    }
    let spec = wire.spec.filter(S::states_required_fields)?;
    Some(Subject::Workload(Box::new(spec.into_workload(metadata_in(wire.metadata?, namespace)))))
}

/// An object's metadata, its namespace the request's when it states none.
fn metadata_in(meta: WireMeta, namespace: &str) -> ObjectMeta {
    let mut metadata = ObjectMeta::from(meta);
    if metadata.namespace.as_deref().is_none_or(str::is_empty) {
        metadata.namespace = Some(namespace.to_string());
    }
    metadata
}

/// The subject decoded from the object's text straight into the k8s-openapi types, with no JSON
/// tree. Only for what is decoded as [`model::decode`] would: a Deployment, StatefulSet,
/// PodDisruptionBudget or autoscaling/v2 HPA that states its apiVersion and kind, with a
/// workload's required fields present; `None` otherwise (and on any error), and the general way
/// runs. Of `managedFields` only who owns `spec.replicas` by server-side apply is kept, and of a
/// workload its status and all of its spec but the fields [`model::read`] lists are left out: no
/// rule reads them. The rules' verdicts are the same as on the whole object
/// (tests/it/read_fields.rs).
///
/// For tests, which so also check that a CREATE's one pass over a workload
/// ([`workload_in_one_pass`]) takes the same objects and gives the same subject.
#[cfg(test)]
fn typed_subject(object: &RawValue, namespace: &str) -> Option<Subject> {
    let typed = typed_subject_and_spec(object, namespace).map(|(subject, _)| subject);
    let one_pass = workload_in_one_pass::<DeploymentSpecRead>(object, namespace)
        .or_else(|| workload_in_one_pass::<StatefulSetSpecRead>(object, namespace));
    let expected = if matches!(typed, Some(Subject::Workload(_))) { format!("{typed:?}") } else { "None".into() };
    assert_eq!(format!("{one_pass:?}"), expected, "one pass and two agree");
    typed
}

/// [`typed_subject`] and the text of the object's `spec` (`None` when absent or null).
fn typed_subject_and_spec<'o>(object: &'o RawValue, namespace: &str) -> Option<(Subject, Option<&'o str>)> {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;

    fn decoded<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<Option<T>> {
        match raw {
            None => Some(None),
            Some(raw) if raw.get() == "null" => Some(None),
            Some(raw) => serde_json::from_str(raw.get()).ok().map(Some),
        }
    }
    // A workload's status is not read, and of its spec only what `model::read` lists.
    fn workload<S: WorkloadSpecRead>(raw: Option<&RawValue>, metadata: ObjectMeta) -> Option<Subject> {
        let spec = decoded::<S>(raw)?.filter(S::states_required_fields)?;
        Some(Subject::Workload(Box::new(spec.into_workload(metadata))))
    }
    let wire: WireObject<'o> = serde_json::from_str(object.get()).ok()?;
    let spec = wire.spec.map(RawValue::get).filter(|s| *s != "null");
    let kind = Kind::from_type(wire.api_version.as_deref()?, wire.kind.as_deref()?)?;
    let metadata = metadata_in(wire.metadata?, namespace);
    let subject = match kind {
        Kind::Deployment => workload::<DeploymentSpecRead>(wire.spec, metadata)?,
        Kind::StatefulSet => workload::<StatefulSetSpecRead>(wire.spec, metadata)?,
        Kind::PodDisruptionBudget => Subject::Pdb(Box::new(PodDisruptionBudget {
            metadata,
            spec: decoded(wire.spec)?,
            status: decoded(wire.status)?,
        })),
        // Of an HPA, its target and bounds: its metrics, behavior and status are not read.
        Kind::HorizontalPodAutoscaler if wire.api_version.as_deref() == Some("autoscaling/v2") => {
            let spec = decoded::<HpaSpecRead>(wire.spec)?.map(Into::into);
            let mut h = HorizontalPodAutoscaler { metadata, spec, status: None };
            defaults::hpa(&mut h);
            Subject::Hpa(Box::new(h))
        }
        _ => return None,
    };
    Some((subject, spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::review::wire::{parse, parse_via_tree};

    /// A subject as the typed way decodes it: a workload's pod template cut to the fields read.
    fn read_fields(subject: Subject) -> Subject {
        model::read::only_read_fields_of(subject)
    }

    /// The fast ways of decoding (straight into the review; the typed subject without a JSON
    /// tree) give what the tree ways give, for every fixture and for both objects of an UPDATE:
    /// both accept a body or both refuse it, and what they accept is the same (a workload's pod
    /// template as far as the rules read it).
    #[test]
    fn fast_decoding_matches_the_tree_way_on_every_fixture() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut subjects = 0;
        let mut refused = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let body = std::fs::read(entry.path()).unwrap();
            // The AdmissionReviews (not the README or the SARIF schema beside them).
            if !String::from_utf8_lossy(&body).contains("\"AdmissionReview\"") {
                continue;
            }
            let (fast, tree) = match (parse(&body), parse_via_tree(&body)) {
                (Ok(fast), Ok(tree)) => (fast, tree),
                (Err(_), Err(_)) => {
                    refused += 1;
                    continue;
                }
                (fast, tree) => panic!(
                    "{}: one way accepts and the other refuses: fast {:?}, tree {:?}",
                    entry.path().display(),
                    fast.map(|r| r.header.uid),
                    tree.map(|r| r.header.uid)
                ),
            };
            assert_eq!(format!("{:?}", fast.header), format!("{:?}", tree.header), "{}", entry.path().display());
            assert_eq!(fast.object_values(), tree.object_values(), "{}", entry.path().display());
            let namespace = fast.header.namespace.clone().unwrap_or_default();
            for object in [&fast.object, &fast.old_object].into_iter().flatten() {
                if fast.header.sub_resource.is_some() {
                    continue;
                }
                let Some(typed) = typed_subject(object, &namespace) else { continue };
                let via_tree =
                    read_fields(subject_via_tree(&fast.header, object, &namespace).unwrap().expect("a subject"));
                assert_eq!(format!("{typed:?}"), format!("{via_tree:?}"), "{}", entry.path().display());
                subjects += 1;
            }
        }
        assert!(subjects >= 20, "the typed way was taken for {subjects} objects only");
        // Every fixture is an AdmissionReview the wire accepts (bad ones are the tree-way's
        // tests below); the count shows none was passed over.
        assert_eq!(refused, 0, "fixtures refused by both ways");
    }

    /// Bodies the wire must refuse are refused by both ways, and bodies it must accept are
    /// accepted by both: the one case the fixtures cannot show, one way accepting what the other
    /// refuses.
    #[test]
    fn fast_and_tree_decoding_accept_and_refuse_the_same_bodies() {
        let good = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deployment-spread-ok.json"),
        )
        .unwrap();
        let edited = |edit: &dyn Fn(&mut Value)| {
            let mut v: Value = serde_json::from_str(&good).unwrap();
            edit(&mut v);
            v.to_string()
        };
        let cases: Vec<(&str, String)> = vec![
            ("the fixture", good.clone()),
            ("not JSON", "nope".into()),
            ("empty", String::new()),
            ("an array", "[1]".into()),
            ("no request", r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.into()),
            ("null request", edited(&|v| v["request"] = Value::Null)),
            ("uid a number", edited(&|v| v["request"]["uid"] = serde_json::json!(42))),
            ("no uid", edited(&|v| drop(v["request"].as_object_mut().unwrap().remove("uid")))),
            ("wrong apiVersion", edited(&|v| v["apiVersion"] = serde_json::json!("admission.k8s.io/v1beta1"))),
            ("wrong kind", edited(&|v| v["kind"] = serde_json::json!("ConfigMap"))),
            ("operation unknown", edited(&|v| v["request"]["operation"] = serde_json::json!("PATCH"))),
            ("dryRun a string", edited(&|v| v["request"]["dryRun"] = serde_json::json!("yes"))),
            ("object a string", edited(&|v| v["request"]["object"] = serde_json::json!("x"))),
            ("object null", edited(&|v| v["request"]["object"] = Value::Null)),
            ("extra field", edited(&|v| v["request"]["extra"] = serde_json::json!({"a": [1, 2]}))),
            ("trailing garbage", format!("{good} x")),
            ("duplicate key", good.replacen("\"kind\"", "\"kind\": \"AdmissionReview\", \"kind\"", 1)),
        ];
        for (what, body) in &cases {
            let (fast, tree) = (parse(body.as_bytes()), parse_via_tree(body.as_bytes()));
            assert_eq!(
                fast.is_ok(),
                tree.is_ok(),
                "{what}: fast {:?} / tree {:?}",
                fast.as_ref().map(|r| &r.header.uid).map_err(|e| &e.0),
                tree.as_ref().map(|r| &r.header.uid).map_err(|e| &e.0)
            );
        }
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
    /// tree way gives: `object` (a Deployment) decoded both ways, as their debug text. Both keep
    /// of its managedFields only who owns spec.replicas by server-side apply.
    fn typed_and_via_tree(object: Value) -> (String, String) {
        let request = parse(&review_of(object)).unwrap();
        assert!(request.old_object.is_none(), "a null oldObject is no object");
        let object = request.object.as_deref().unwrap();
        let typed = typed_subject(object, "shop").expect("the typed way takes it");
        let via_tree = read_fields(subject_via_tree(&request.header, object, "shop").unwrap().unwrap());
        (format!("{typed:?}"), format!("{via_tree:?}"))
    }

    #[test]
    fn an_object_as_the_apiserver_sends_it_decodes_the_typed_way() {
        let (typed, via_tree) = typed_and_via_tree(deployment(full_spec()));
        assert_eq!(typed, via_tree);
        assert!(typed.contains("manager: Some(\"kubectl\")"), "kubectl's Apply of spec.replicas is kept: {typed}");
        assert!(typed.contains("namespace: Some(\"shop\")"), "the request's namespace is filled in");
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

    /// The boundary of [`WorkloadSpecRead::states_required_fields`]: a selector stated empty
    /// (`{}`) or with only expressions, and an empty list of containers, are stated: the typed
    /// way, and the same subject as the tree way in each case.
    #[test]
    fn a_workload_stating_its_required_fields_goes_the_typed_way_however_it_states_them() {
        let template = full_spec()["template"].clone();
        let labels = serde_json::json!({"matchLabels": {"app": "web"}});
        let expressions =
            serde_json::json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]});
        let no_container = serde_json::json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}});
        let cases = [
            ("empty selector", serde_json::json!({"selector": {}, "template": template})),
            ("expressions only", serde_json::json!({"selector": expressions, "template": template})),
            ("labels", serde_json::json!({"selector": labels, "template": template})),
            ("no container", serde_json::json!({"selector": labels, "template": no_container})),
        ];
        for (what, spec) in cases {
            let read: DeploymentSpecRead = serde_json::from_value(spec.clone()).unwrap();
            assert!(read.states_required_fields(), "{what}");
            let (typed, via_tree) = typed_and_via_tree(deployment(spec));
            assert_eq!(typed, via_tree, "{what}");
        }
    }

    /// A Scale's count read from its text is what the tree gives, for every shape of `spec`
    /// and `replicas`, repeated keys included; a count that is not an int32 is refused.
    #[test]
    fn a_scales_count_is_read_as_the_tree_reads_it() {
        let cases: [(&str, Option<i32>); 16] = [
            (r#"{"kind":"Scale","spec":{"replicas":5},"status":{"replicas":3}}"#, Some(5)),
            (r#"{"spec":{"replicas":-1}}"#, Some(-1)),
            (r#"{"spec":{"replicas":2147483647}}"#, Some(i32::MAX)),
            (r#"{"spec":{}}"#, Some(0)),
            (r#"{"kind":"Scale"}"#, Some(0)),
            (r#"{"spec":null}"#, Some(0)),
            (r#"{"spec":5}"#, Some(0)),
            (r#"{"spec":[{"replicas":5}]}"#, Some(0)),
            (r#"{"spec":{"replicas":5},"spec":{"replicas":7}}"#, Some(7)),
            (r#"{"spec":{"replicas":5,"replicas":7}}"#, Some(7)),
            (r#"{"spec":{"replicas":null}}"#, None),
            (r#"{"spec":{"replicas":"one"}}"#, None),
            (r#"{"spec":{"replicas":5.5}}"#, None),
            (r#"{"spec":{"replicas":1e2}}"#, None),
            (r#"{"spec":{"replicas":2147483648}}"#, None),
            (r#"{"spec":{"replicas":{"n":5}}}"#, None),
        ];
        for (text, expected) in cases {
            let raw = RawValue::from_string(text.to_string()).unwrap();
            let (got, via_tree) = (scale_replicas(&raw), scale_replicas_via_tree(&raw));
            assert_eq!(got.as_ref().ok(), expected.as_ref(), "{text}");
            assert_eq!(via_tree.as_ref().ok(), expected.as_ref(), "{text}: the tree");
            if let Err(e) = got {
                assert!(e.0.contains("spec.replicas of the Scale is not an integer"), "{text}: {e}");
            }
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

    /// The kinds judged besides workloads, PDBs and HPAs decode from a review the general way.
    #[test]
    fn services_webhook_configurations_and_scaled_objects_are_subjects() {
        let review = |group: &str,
                      version: &str,
                      kind: &str,
                      resource: &str,
                      namespace: Option<&str>,
                      object: Value| {
            let mut request = serde_json::json!({
                "uid": "u-2",
                "kind": {"group": group, "version": version, "kind": kind},
                "resource": {"group": group, "version": version, "resource": resource},
                "name": object["metadata"]["name"],
                "operation": "CREATE",
                "userInfo": {"username": "u"},
                "object": object,
            });
            if let Some(ns) = namespace {
                request["namespace"] = ns.into();
            }
            let body =
                serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
            parse(&serde_json::to_vec(&body).unwrap()).unwrap()
        };
        let cases = [
            review(
                "",
                "v1",
                "Service",
                "services",
                Some("shop"),
                serde_json::json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            ),
            review(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
                None,
                serde_json::json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "policy"}, "webhooks": [{"name": "w", "clientConfig": {"url": "https://x"}}]}),
            ),
            review(
                "keda.sh",
                "v1alpha1",
                "ScaledObject",
                "scaledobjects",
                Some("shop"),
                serde_json::json!({
                "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "web"},
                "spec": {"scaleTargetRef": {"name": "web"}, "minReplicaCount": 2}}),
            ),
            review(
                "apiregistration.k8s.io",
                "v1",
                "APIService",
                "apiservices",
                None,
                serde_json::json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": "v1beta1.visibility.kueue.x-k8s.io"},
                "spec": {"group": "visibility.kueue.x-k8s.io", "version": "v1beta1",
                         "service": {"namespace": "kueue-system", "name": "kueue-visibility-server"}}}),
            ),
        ];
        let ids: Vec<ObjectRef> = cases.iter().map(|r| subject(r).unwrap().expect("a subject").id()).collect();
        assert_eq!(
            ids,
            [
                ObjectRef::new(Kind::Service, "shop", "web"),
                ObjectRef::new(Kind::ValidatingWebhookConfiguration, "", "policy"),
                ObjectRef::new(Kind::ScaledObject, "shop", "web"),
                ObjectRef::new(Kind::ApiService, "", "v1beta1.visibility.kueue.x-k8s.io"),
            ]
        );
    }
}

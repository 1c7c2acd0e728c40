//! UPDATEs that change nothing ha-guard reads. The chart's webhooks do not send them at all (the
//! matchCondition `changes-what-ha-guard-reads` in `charts/ha-guard/templates/_webhooks.tpl`); when
//! one arrives anyway (a cluster before 1.30, a configuration without that condition), it is
//! answered as if it had not been sent: allowed, no warning, no patch. So the answers do not
//! depend on whether the apiserver filtered, and a controller's metadata-only write (the revision
//! annotation on every rollout, a finalizer, an ownerReference) is never refused or warned about
//! for an object it did not change, whatever `ratchet` says.
//!
//! What the rules and mutations read of such an object: its `spec`, and of its metadata the name
//! and namespace (which an UPDATE cannot change), the `ha-guard.io/*` annotations (exemptions,
//! `exemption-unknown-rule`) and `kubectl.kubernetes.io/last-applied-configuration`
//! (`hpa-replicas-conflict`). Labels are compared too, as the condition does: nothing reads them
//! today, and a rule that starts to is then covered.

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube::core::admission::Operation;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::wire::Request;
use crate::core::model::LAST_APPLIED;

/// The resources whose UPDATEs may be passed over, as (API group, resource): the same list as
/// the matchCondition's. Any other resource (a kind added later) is always judged.
pub const RESOURCES: [(&str, &str); 4] = [
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("policy", "poddisruptionbudgets"),
    ("autoscaling", "horizontalpodautoscalers"),
];

/// Annotations ha-guard reads: the `ha-guard.io/` prefix and kubectl's last-applied manifest.
pub fn reads_annotation(key: &str) -> bool {
    key.starts_with("ha-guard.io/") || key == LAST_APPLIED
}

/// What is compared of each object. The apiserver encodes `object` and `oldObject` the same way
/// (Go's encoder: struct fields in a fixed order, map keys sorted), so equal values have equal
/// text and the text is compared as it is.
#[derive(Deserialize)]
struct Read<'a> {
    #[serde(borrow, default)]
    metadata: Option<Meta<'a>>,
    #[serde(borrow, default)]
    spec: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow, default)]
    labels: Option<&'a RawValue>,
    #[serde(borrow, default)]
    annotations: Option<BTreeMap<Cow<'a, str>, &'a RawValue>>,
}

impl<'a> Read<'a> {
    fn parse(text: &'a str) -> Option<Read<'a>> {
        serde_json::from_str(text).ok()
    }

    fn labels(&self) -> Option<&str> {
        self.metadata.as_ref()?.labels.map(RawValue::get).filter(|l| *l != "null")
    }

    fn spec(&self) -> Option<&str> {
        self.spec.map(RawValue::get).filter(|s| *s != "null")
    }

    fn annotations(&self) -> impl Iterator<Item = (&str, &str)> {
        self.metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .into_iter()
            .flatten()
            .filter(|(k, _)| reads_annotation(k))
            .map(|(k, v)| (k.as_ref(), v.get()))
    }
}

/// Whether `request` is an UPDATE of one of [`RESOURCES`] (or its scale) whose spec, labels and
/// read annotations are those of its `oldObject`. Anything unreadable counts as changed.
pub fn changes_nothing_read(request: &Request) -> bool {
    changes_nothing_read_given(request, None, None)
}

/// [`changes_nothing_read`], given the text of `object`'s spec, and of `oldObject`'s, when they
/// are known already ([`subject_and_spec`](super::subject::subject_and_spec), and the old
/// object's decoding for ratcheting): an UPDATE whose spec differs from the old one's (the usual
/// UPDATE) is then told from the old object alone, or from the two texts when both are known,
/// neither object read again (nor, when no `"spec"` key of the old object's text is followed by
/// the new spec's text, the old one). The answer is the same either way.
pub fn changes_nothing_read_given(request: &Request, new_spec: Option<&str>, old_spec: Option<&str>) -> bool {
    let req = &request.header;
    if !matches!(req.operation, Operation::Update)
        || !RESOURCES.contains(&(req.resource.group.as_str(), req.resource.resource.as_str()))
    {
        return false;
    }
    let (Some(new), Some(old)) = (request.object.as_deref(), request.old_object.as_deref()) else { return false };
    if let (Some(new_spec), Some(old_spec)) = (new_spec, old_spec)
        && new_spec != old_spec
    {
        return false;
    }
    if old_spec.is_none() && new_spec.is_some_and(|spec| !spec_may_be(old.get(), spec)) {
        return false;
    }
    let Some(old) = Read::parse(old.get()) else { return false };
    if new_spec.is_some_and(|spec| old.spec() != Some(spec)) {
        return false;
    }
    let Some(new) = Read::parse(new.get()) else { return false };
    new.spec() == old.spec() && new.labels() == old.labels() && new.annotations().eq(old.annotations())
}

/// Whether `spec` may be the text of the `spec` of the object whose text is `object`: some `"spec"`
/// in it is followed by a colon and that text (JSON whitespace allowed between). When none is,
/// the object's spec is not `spec`, and the object need not be decoded to tell. The search is for
/// the short key with a finder made once (one for the whole spec's text would be set up on every
/// call, and costs more than decoding the object). A key spelled with
/// escapes (`"sp\u0065c"`, which no apiserver writes) is not found, and the UPDATE is judged as
/// one that changed its spec: never skipped where it should not be.
fn spec_may_be(object: &str, spec: &str) -> bool {
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"spec\""));
    let bytes = object.as_bytes();
    let json_space = |b: &&u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    KEY.find_iter(bytes).any(|at| {
        let rest = &bytes[at + 6..];
        let rest = &rest[rest.iter().take_while(json_space).count()..];
        let Some(rest) = rest.strip_prefix(b":") else { return false };
        rest[rest.iter().take_while(json_space).count()..].starts_with(spec.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::review::wire::parse;
    use serde_json::{Value, json};

    fn request(resource: (&str, &str), sub: Option<&str>, operation: &str, object: Value, old: Value) -> Request {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": resource.0, "version": "v1", "kind": "Deployment"},
                "resource": {"group": resource.0, "version": "v1", "resource": resource.1},
                "subResource": sub,
                "name": "web",
                "namespace": "shop",
                "operation": operation,
                "userInfo": {"username": "u"},
                "object": object,
                "oldObject": old,
            }
        });
        parse(&serde_json::to_vec(&body).unwrap()).unwrap()
    }

    fn deployment(meta: Value, replicas: i64) -> Value {
        let mut metadata = json!({"name": "web", "namespace": "shop", "resourceVersion": "7", "generation": 2});
        metadata.as_object_mut().unwrap().extend(meta.as_object().unwrap().clone());
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}},
               "status": {"replicas": 1}})
    }

    /// The answer, checked to be the same with the objects' specs given as the webhook gives
    /// them: the new one's, and the old one's too (when ratcheting decoded it).
    fn update(new: Value, old: Value) -> bool {
        use crate::server::review::subject::{subject_and_spec, subject_and_spec_of};
        let (has_spec, old_has_spec) = (new.get("spec").is_some(), old.get("spec").is_some());
        let request = request(("apps", "deployments"), None, "UPDATE", new, old);
        let answer = changes_nothing_read(&request);
        let spec = subject_and_spec(&request).ok().and_then(|(_, spec)| spec);
        assert_eq!(spec.is_some(), has_spec, "the typed decoding gives the spec it read");
        let old_spec =
            subject_and_spec_of(&request.header, request.old_object.as_deref()).ok().and_then(|(_, spec)| spec);
        assert_eq!(old_spec.is_some(), old_has_spec, "the typed decoding gives the old spec it read");
        assert_eq!(changes_nothing_read_given(&request, spec, None), answer, "with the spec given");
        assert_eq!(changes_nothing_read_given(&request, spec, old_spec), answer, "with both specs given");
        assert_eq!(changes_nothing_read_given(&request, None, old_spec), answer, "with the old spec given");
        answer
    }

    #[test]
    fn metadata_only_writes_change_nothing_read() {
        // The deployment controller's revision annotation, on an object with no labels.
        assert!(update(
            deployment(json!({"annotations": {"deployment.kubernetes.io/revision": "2"}}), 3),
            deployment(json!({"annotations": {"deployment.kubernetes.io/revision": "1"}}), 3),
        ));
        // The first annotation of an object that had none; a finalizer; a new resourceVersion.
        assert!(update(deployment(json!({"annotations": {"team": "a"}}), 3), deployment(json!({}), 3)));
        assert!(update(
            deployment(json!({"finalizers": ["x"], "resourceVersion": "8", "managedFields": [{"manager": "m"}]}), 3),
            deployment(json!({}), 3)
        ));
        // Status differs: no rule reads the subject's status.
        let mut new = deployment(json!({}), 3);
        new["status"]["replicas"] = json!(3);
        assert!(update(new, deployment(json!({}), 3)));
        // Neither has a spec (nothing to compare, nothing to read).
        let mut a = deployment(json!({}), 3);
        let mut b = a.clone();
        a.as_object_mut().unwrap().remove("spec");
        b.as_object_mut().unwrap().remove("spec");
        assert!(update(a, b));
    }

    #[test]
    fn what_a_rule_reads_changes_something() {
        let old = || deployment(json!({"labels": {"app": "web"}, "annotations": {"team": "a"}}), 3);
        // spec
        assert!(!update(deployment(json!({"labels": {"app": "web"}, "annotations": {"team": "a"}}), 4), old()));
        let mut no_spec = old();
        no_spec.as_object_mut().unwrap().remove("spec");
        assert!(!update(no_spec.clone(), old()));
        assert!(!update(old(), no_spec));
        // labels: changed, added, removed
        assert!(!update(deployment(json!({"labels": {"app": "x"}, "annotations": {"team": "a"}}), 3), old()));
        assert!(!update(deployment(json!({"annotations": {"team": "a"}}), 3), old()));
        assert!(!update(old(), deployment(json!({"annotations": {"team": "a"}}), 3)));
        // an exemption: added, changed, removed
        let exempt = |reason: &str| {
            deployment(
                json!({"labels": {"app": "web"}, "annotations": {"team": "a", "ha-guard.io/allow-pdb-missing": reason}}),
                3,
            )
        };
        assert!(!update(exempt("batch"), old()));
        assert!(!update(exempt("batch"), exempt("")));
        assert!(!update(old(), exempt("batch")));
        // The exemption kept, an unrelated annotation changed: nothing read changed.
        let mut other = exempt("batch");
        other["metadata"]["annotations"]["team"] = json!("b");
        assert!(update(other, exempt("batch")));
        // kubectl's last-applied manifest (hpa-replicas-conflict reads its spec.replicas)
        let applied = |text: &str| {
            deployment(json!({"labels": {"app": "web"}, "annotations": {"team": "a", LAST_APPLIED: text}}), 3)
        };
        assert!(!update(applied(r#"{"spec":{"replicas":3}}"#), applied(r#"{"spec":{}}"#)));
        assert!(!update(applied("{}"), old()));
        assert!(update(applied("{}"), applied("{}")));
        // The new spec's text found in the old object after a "spec" key, but not as its spec
        // (here its status's): still a change.
        let mut elsewhere = deployment(json!({}), 4);
        elsewhere["status"] = json!({"spec": deployment(json!({}), 3)["spec"].clone()});
        assert!(!update(deployment(json!({}), 3), elsewhere));
    }

    #[test]
    fn a_spec_is_looked_for_after_each_spec_key() {
        let spec = r#"{"replicas":3}"#;
        assert!(spec_may_be(r#"{"metadata":{},"spec":{"replicas":3},"status":{}}"#, spec));
        assert!(spec_may_be("{\"spec\" :\n\t{\"replicas\":3}}", spec), "JSON whitespace around the colon");
        assert!(spec_may_be(r#"{"status":{"spec":{}},"spec":{"replicas":3}}"#, spec), "the second key");
        assert!(!spec_may_be(r#"{"spec":{"replicas":4}}"#, spec));
        assert!(!spec_may_be(r#"{"replicas":3,"spec":null}"#, spec), "the text elsewhere, not after a key");
        assert!(!spec_may_be(r#"{"a":"\"spec\" {\"replicas\":3}"}"#, spec), "a key's text inside a string");
        assert!(!spec_may_be(r#"{"spec""#, spec), "the text ends at the key");
        assert!(!spec_may_be("", spec));
    }

    #[test]
    fn only_updates_of_the_listed_resources_are_passed_over() {
        let (new, old) = (deployment(json!({"annotations": {"a": "1"}}), 3), deployment(json!({}), 3));
        assert!(changes_nothing_read(&request(("apps", "deployments"), None, "UPDATE", new.clone(), old.clone())));
        assert!(!changes_nothing_read(&request(("apps", "deployments"), None, "CREATE", new.clone(), Value::Null)));
        assert!(!changes_nothing_read(&request(("", "services"), None, "UPDATE", new.clone(), old.clone())));
        assert!(!changes_nothing_read(&request(("keda.sh", "scaledobjects"), None, "UPDATE", new.clone(), old)));
        assert!(!changes_nothing_read(&request(("apps", "deployments"), None, "UPDATE", new, Value::Null)));
    }

    #[test]
    fn a_scale_write_that_keeps_the_count_changes_nothing_read() {
        let scale = |n: i64| {
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
                   "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "9"},
                   "spec": {"replicas": n}, "status": {"replicas": 3, "selector": "app=web"}})
        };
        let write =
            |new, old| changes_nothing_read(&request(("apps", "deployments"), Some("scale"), "UPDATE", new, old));
        assert!(write(scale(3), scale(3)));
        assert!(!write(scale(5), scale(3)));
    }

    /// The answer to an UPDATE that changes nothing read is a plain allow, from both webhooks, for
    /// an object that otherwise gets a warning (pre-existing), and a patch; the same UPDATE with its
    /// spec changed is judged as before.
    #[test]
    fn such_an_update_gets_a_plain_allow_from_both_webhooks() {
        use crate::core::config::Config;
        use crate::core::view::Index;
        use crate::server::review::{Webhook, review};

        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deployment-update-preexisting.json");
        let mut body: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let (view, config) = (Index::new(), Config::default());
        let answer = |body: &Value, webhook| {
            let request = parse(&serde_json::to_vec(body).unwrap()).unwrap();
            let (response, _) = review(&request, webhook, &view, &config, &test_clock()).unwrap();
            (
                response.allowed,
                response.warnings.unwrap_or_default(),
                response.patch.is_some(),
                response.audit_annotations,
            )
        };
        let (allowed, warnings, _, _) = answer(&body, Webhook::Validate);
        assert!(allowed && !warnings.is_empty(), "the fixture is warned: {warnings:?}");
        assert!(answer(&body, Webhook::Mutate).2, "and patched");

        // The same object, the old one differing only in an annotation ha-guard does not read.
        let mut old = body["request"]["object"].clone();
        old["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "1"});
        body["request"]["oldObject"] = old;
        for webhook in [Webhook::Validate, Webhook::Mutate] {
            let (allowed, warnings, patched, audit) = answer(&body, webhook);
            assert!(allowed && warnings.is_empty() && !patched, "{webhook:?}: {warnings:?}");
            assert_eq!(audit.get("skipped").map(String::as_str), Some(super::super::respond::UNCHANGED));
        }
    }

    /// What the condition leaves out is indeed not read: on every fixture, each object with all its
    /// other metadata replaced (annotations ha-guard does not read, finalizers, owners, versions,
    /// managedFields) and its status dropped gets the same answer from both webhooks.
    #[test]
    fn no_rule_or_mutation_reads_the_metadata_left_out() {
        use crate::core::config::Config;
        use crate::core::view::Index;
        use crate::server::review::{Webhook, review};

        let (view, config) = (Index::new(), Config::default());
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut compared = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let Ok(body) = serde_json::from_slice::<Value>(&std::fs::read(entry.path()).unwrap()) else { continue };
            if body["request"]["object"]["metadata"].is_null() {
                continue;
            }
            let mut other = body.clone();
            for key in ["object", "oldObject"] {
                let object = &mut other["request"][key];
                if object.is_null() {
                    continue;
                }
                object.as_object_mut().unwrap().remove("status");
                let meta = object["metadata"].as_object_mut().unwrap();
                let kept: serde_json::Map<String, Value> = meta
                    .get("annotations")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| reads_annotation(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let mut annotations = kept;
                annotations.insert("deployment.kubernetes.io/revision".into(), json!("9"));
                annotations.insert("example.com/ha-guard.io/allow-pdb-missing".into(), json!("not ours"));
                meta.insert("annotations".into(), Value::Object(annotations));
                meta.insert("finalizers".into(), json!(["example.com/keep"]));
                meta.insert(
                    "ownerReferences".into(),
                    json!([{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "1"}]),
                );
                meta.insert("resourceVersion".into(), json!("123"));
                meta.insert("generation".into(), json!(5));
                meta.insert("managedFields".into(), json!([{"manager": "someone", "operation": "Update"}]));
            }
            for webhook in [Webhook::Validate, Webhook::Mutate] {
                let answer = |body: &Value| {
                    let request = parse(&serde_json::to_vec(body).unwrap()).ok()?;
                    let (r, _) = review(&request, webhook, &view, &config, &test_clock()).ok()?;
                    Some((r.allowed, r.result.message, r.warnings, r.patch))
                };
                assert_eq!(answer(&body), answer(&other), "{} {webhook:?}", entry.path().display());
                compared += 1;
            }
        }
        assert!(compared >= 40, "{compared} answers compared");
    }

    fn test_clock() -> crate::core::view::AdmissionClock {
        use crate::core::view::{AdmissionClock, absence::DEFAULT_GRACE};
        AdmissionClock::current(k8s_openapi::jiff::Timestamp::now(), DEFAULT_GRACE)
    }
}

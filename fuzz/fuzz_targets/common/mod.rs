//! What both fuzz targets share: the configurations they run under and JSON Patch helpers.
#![allow(dead_code)]

use ha_guard::core::config::Config;
use ha_guard::core::model::ObjectRef;
use ha_guard::core::mutations::{Plan, MUTATIONS};
use serde_json::Value;

/// The shipped defaults, and every mutation switched on (`inject-default-spread` and
/// `inject-match-label-keys` are off by default but are part of the contract all the same).
pub fn configs() -> [(&'static str, Config); 2] {
    let mut all_on = Config::default();
    for m in MUTATIONS {
        all_on.mutations.insert(m.id.to_string(), true);
    }
    [("default", Config::default()), ("all-mutations-on", all_on)]
}

/// Whether a finding on `object` may name `other`: objects of its own namespace and cluster-scoped
/// ones; a cluster-scoped object (a webhook configuration) may name its backend anywhere.
pub fn may_name(object: &ObjectRef, other: &ObjectRef) -> bool {
    object.namespace.is_empty() || other.namespace.is_empty() || other.namespace == object.namespace
}

/// Applies `ops` to a copy of `object`; panics (a finding) when they do not apply.
pub fn apply(object: &Value, ops: &[json_patch::PatchOperation], what: &dyn Fn() -> String) -> Value {
    let mut patched = object.clone();
    if let Err(e) = json_patch::patch(&mut patched, ops) {
        panic!("{}: the patch does not apply: {e}\npatch: {}\nobject: {object}", what(), serde_json::to_string(ops).unwrap_or_default());
    }
    patched
}

/// Every operation only adds (DESIGN.md §2, Mutations).
pub fn assert_add_only(plan: &Plan, what: &dyn Fn() -> String) {
    for c in &plan.changes {
        assert!(matches!(c.operation, json_patch::PatchOperation::Add(_)), "{}: not an add: {:?}", what(), c.operation);
    }
}

/// Whether the JSON text `data` has no object with the same key twice. RFC 8259 leaves what such
/// a text means to the reader (first wins, last wins, or an error), so decoders may differ on it.
pub fn unique_keys(data: &[u8]) -> bool {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    struct Unique;
    impl<'de> DeserializeSeed<'de> for Unique {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(Unique)
        }
    }
    impl<'de> Visitor<'de> for Unique {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Unique)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key) {
                    return Err(serde::de::Error::custom("duplicate key"));
                }
                map.next_value_seed(Unique)?;
            }
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_slice(data);
    Unique.deserialize(&mut de).is_ok() && de.end().is_ok()
}

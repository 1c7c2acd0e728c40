//! What both fuzz targets share: the configurations they run under and JSON Patch helpers.
#![allow(dead_code)]

use ha_guard::config::Config;
use ha_guard::mutations::{Plan, MUTATIONS};
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

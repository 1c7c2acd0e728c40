//! A configuration change previewed (`--config NEW --baseline CURRENT`, check and audit): the same
//! objects judged under both files, and what the change would newly deny, newly warn and stop
//! reporting, object by object. Exit 1 when anything becomes denied, so a CI job can gate the
//! change of a policy as it gates the change of a manifest.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::report::Report;
use crate::core::finding::Decision;
use crate::core::model::ObjectRef;

/// What a rule says about one object under one configuration: its strongest decision, and the
/// exception that allowed it (when it was allowed by one).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Said {
    action: Decision,
    exception: Option<String>,
}

/// One rule's verdict on one object that differs between the two configurations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub object: ObjectRef,
    pub rule: &'static str,
    /// `None`: not reported (no finding, the rule off, the namespace skipped).
    pub before: Option<Decision>,
    pub after: Option<Decision>,
    /// The exception that allows it after the change, if one does.
    pub exception: Option<String>,
}

impl Change {
    /// How the change reads: `newly-denied`, `no-longer-denied` (still warned or allowed),
    /// `newly-warned`, `newly-allowed` (an exception or annotation now allows it), or
    /// `no-longer-reported`.
    pub fn kind(&self) -> &'static str {
        use Decision::*;
        match (self.before, self.after) {
            (_, Some(Deny)) => "newly-denied",
            (Some(Deny), Some(Warn)) => "no-longer-denied",
            (_, Some(Warn)) => "newly-warned",
            (_, Some(Allowed)) => "newly-allowed",
            (_, None) => "no-longer-reported",
        }
    }
}

fn said(report: &Report) -> BTreeMap<(ObjectRef, &'static str), Said> {
    let rank = |d: Decision| match d {
        Decision::Deny => 3,
        Decision::Warn => 2,
        Decision::Allowed => 1,
    };
    let mut out: BTreeMap<(ObjectRef, &'static str), Said> = BTreeMap::new();
    for l in &report.findings {
        let f = &l.finding;
        let exception = f.notes.iter().find_map(|n| n.exception()).map(|(name, _)| name.to_string());
        let key = (f.object.clone(), f.rule.id);
        let new = Said { action: f.action, exception };
        match out.get(&key) {
            Some(old) if rank(old.action) >= rank(new.action) => {}
            _ => {
                out.insert(key, new);
            }
        }
    }
    out
}

/// The differences between `before` (the baseline) and `after` (the new configuration), by object
/// then rule.
pub fn compare(before: &Report, after: &Report) -> Vec<Change> {
    let (b, a) = (said(before), said(after));
    let keys: BTreeSet<&(ObjectRef, &'static str)> = b.keys().chain(a.keys()).collect();
    let mut changes = Vec::new();
    for key in keys {
        let (was, is) = (b.get(key), a.get(key));
        if was.map(|s| s.action) == is.map(|s| s.action) {
            continue;
        }
        changes.push(Change {
            object: key.0.clone(),
            rule: key.1,
            before: was.map(|s| s.action),
            after: is.map(|s| s.action),
            exception: is.and_then(|s| s.exception.clone()),
        });
    }
    changes
}

/// 1 when something becomes denied, else 0.
pub fn exit_code(changes: &[Change]) -> u8 {
    u8::from(changes.iter().any(|c| c.kind() == "newly-denied"))
}

fn counts(changes: &[Change]) -> BTreeMap<&'static str, usize> {
    let mut n: BTreeMap<&'static str, usize> =
        ["newly-denied", "no-longer-denied", "newly-warned", "newly-allowed", "no-longer-reported"]
            .into_iter()
            .map(|k| (k, 0))
            .collect();
    for c in changes {
        *n.entry(c.kind()).or_default() += 1;
    }
    n
}

fn decision(d: Option<Decision>) -> &'static str {
    d.map_or("not reported", |d| d.as_str())
}

/// The text: each object whose verdict changes, its rules with before -> after, the
/// configuration's warnings (`warnings`: file, message), then the counts.
pub fn text(changes: &[Change], baseline: &str, config: &str, warnings: &[(String, String)]) -> String {
    let mut out = String::new();
    let objects: BTreeSet<&ObjectRef> = changes.iter().map(|c| &c.object).collect();
    out.push_str(&format!(
        "{config} against {baseline}: {} object{} change{}\n",
        objects.len(),
        if objects.len() == 1 { "" } else { "s" },
        if objects.len() == 1 { "s" } else { "" }
    ));
    for object in objects {
        out.push_str(&format!("\n{object}\n"));
        for c in changes.iter().filter(|c| &c.object == object) {
            let by = c.exception.as_ref().map(|e| format!(" (exception {e})")).unwrap_or_default();
            out.push_str(&format!(
                "  {:<19} {} ({} -> {}){by}\n",
                c.kind(),
                c.rule,
                decision(c.before),
                decision(c.after)
            ));
        }
    }
    for (file, message) in warnings {
        out.push_str(&format!("\nwarning: {message}\n  --> {file}\n"));
    }
    let n = counts(changes);
    out.push_str(&format!(
        "\n{} newly denied, {} no longer denied, {} newly warned, {} newly allowed, {} no longer reported\n",
        n["newly-denied"], n["no-longer-denied"], n["newly-warned"], n["newly-allowed"], n["no-longer-reported"]
    ));
    out
}

/// The JSON: `{"baseline", "config", "changes": [{kind, namespace, name, rule, before, after,
/// change, exception?}], "summary": {newly-denied: N, ...}, "diagnostics": [{level, message,
/// file}]}` (the configuration's warnings, as `check`'s JSON gives them).
pub fn json(changes: &[Change], baseline: &str, config: &str, warnings: &[(String, String)]) -> Value {
    let list: Vec<Value> = changes
        .iter()
        .map(|c| {
            let mut v = json!({
                "kind": c.object.kind.as_str(),
                "namespace": c.object.namespace,
                "name": c.object.name,
                "rule": c.rule,
                "before": c.before.map(|d| d.as_str()),
                "after": c.after.map(|d| d.as_str()),
                "change": c.kind(),
            });
            if let Some(e) = &c.exception {
                v["exception"] = json!(e);
            }
            v
        })
        .collect();
    let diagnostics: Vec<Value> =
        warnings.iter().map(|(file, message)| json!({"level": "warning", "message": message, "file": file})).collect();
    json!({"baseline": baseline, "config": config, "changes": list, "summary": counts(changes), "diagnostics": diagnostics})
}

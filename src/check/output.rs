//! The three formats of `check`: text (like a compiler's diagnostics), JSON (the contract of
//! DESIGN.md §5) and SARIF 2.1.0 (for code scanning).

use std::fmt::Write;

use serde_json::{json, Value};

use super::{Located, Report};
use crate::catalogue;
use crate::engine::Decision;

fn location(origin: &super::Origin) -> String {
    let item = origin.item.map(|i| format!(", items[{i}]")).unwrap_or_default();
    format!("{}:{} (document {}{item})", origin.file, origin.line, origin.document)
}

/// Human-readable diagnostics.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    for e in &report.errors {
        let _ = writeln!(out, "error: {e}");
    }
    for Located { finding: f, origin } in &report.findings {
        let _ = writeln!(out, "{}[{}]: {} at {}", f.action.as_str(), f.rule, f.object, f.path);
        let _ = writeln!(out, "  --> {}", location(origin));
        let _ = writeln!(out, "   | {}", f.what);
        let _ = writeln!(out, "   = fix: {}", f.fix);
        if !f.related.is_empty() {
            let related: Vec<_> = f.related.iter().map(ToString::to_string).collect();
            let _ = writeln!(out, "   = related: {}", related.join(", "));
        }
        for n in &f.notes {
            let _ = writeln!(out, "   = note: {n}");
        }
        out.push('\n');
    }
    for (origin, n) in &report.notices {
        let _ = writeln!(out, "warning: {n}\n  --> {}\n", location(origin));
    }
    for (origin, u) in &report.unchecked {
        let _ = writeln!(out, "note: {u}\n  --> {}\n", location(origin));
    }
    for fix in &report.fixes {
        for c in &fix.changes {
            let _ = writeln!(
                out,
                "fix[{}]: {} would get {} = {}\n  --> {}\n",
                c.mutation,
                fix.object,
                c.path(),
                match &c.operation {
                    json_patch::PatchOperation::Add(a) => a.value.to_string(),
                    _ => String::new(),
                },
                location(&fix.origin)
            );
        }
    }
    let fixes: usize = report.fixes.iter().map(|f| f.changes.len()).sum();
    let _ = writeln!(
        out,
        "{} deny, {} warn, {} allowed in {} objects from {} files{}{}",
        report.count(Decision::Deny),
        report.count(Decision::Warn),
        report.count(Decision::Allowed),
        report.objects,
        report.files,
        if fixes > 0 { format!("; {fixes} fixes available (run with --fix to write them)") } else { String::new() },
        if report.errors.is_empty() { String::new() } else { format!("; {} errors", report.errors.len()) },
    );
    out
}

/// `{"findings": [...], "summary": {...}}` as DESIGN.md §5 specifies, plus `mutations`,
/// `unchecked` and `errors`.
pub fn json(report: &Report) -> Value {
    let findings: Vec<Value> = report
        .findings
        .iter()
        .map(|Located { finding: f, origin }| {
            let mut v = json!({
                "rule": f.rule,
                "action": f.action.as_str(),
                "kind": f.object.kind.as_str(),
                "namespace": f.object.namespace,
                "name": f.object.name,
                "path": f.path,
                "message": f.message(),
                "related": f.related.iter().map(|r| json!({"kind": r.kind.as_str(), "namespace": r.namespace, "name": r.name})).collect::<Vec<_>>(),
                "file": origin.file,
                "document": origin.document,
                "line": origin.line,
            });
            if let Some(i) = origin.item {
                v["item"] = json!(i);
            }
            if !f.notes.is_empty() {
                v["notes"] = json!(f.notes);
            }
            v
        })
        .collect();
    let mutations: Vec<Value> = report
        .fixes
        .iter()
        .flat_map(|fix| {
            fix.changes.iter().map(move |c| {
                json!({
                    "mutation": c.mutation,
                    "kind": fix.object.kind.as_str(),
                    "namespace": fix.object.namespace,
                    "name": fix.object.name,
                    "patch": c.operation,
                    "file": fix.origin.file,
                    "document": fix.origin.document,
                })
            })
        })
        .collect();
    json!({
        "findings": findings,
        "summary": {
            "deny": report.count(Decision::Deny),
            "warn": report.count(Decision::Warn),
            "allowed": report.count(Decision::Allowed),
        },
        "mutations": mutations,
        "unchecked": report.unchecked.iter().map(|(o, m)| json!({"file": o.file, "document": o.document, "message": m})).collect::<Vec<_>>(),
        "errors": report.errors.iter().map(|e| json!({"file": e.file, "document": e.document, "message": e.message})).collect::<Vec<_>>(),
    })
}

const SARIF_SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// SARIF 2.1.0: one run, the catalogue as the tool's rules, one result per finding. Exempted
/// findings are results with an `inSource` suppression carrying the reason.
pub fn sarif(report: &Report) -> Value {
    let rules: Vec<Value> = catalogue::rules()
        .map(|r| {
            json!({
                "id": r.id,
                "name": r.id,
                "shortDescription": {"text": r.summary},
                "fullDescription": {"text": r.summary},
                "help": {"text": r.doc, "markdown": r.doc},
                "defaultConfiguration": {"level": level(r.default)},
                "properties": {"default": r.default_text},
            })
        })
        .collect();
    let index_of = |id: &str| catalogue::rules().position(|r| r.id == id).unwrap_or(0);
    let mut results: Vec<Value> = report
        .findings
        .iter()
        .map(|Located { finding: f, origin }| {
            let mut result = json!({
                "ruleId": f.rule,
                "ruleIndex": index_of(f.rule),
                "level": match f.action { Decision::Deny => "error", Decision::Warn => "warning", Decision::Allowed => "note" },
                "message": {"text": format!("{} at {}: {}", f.object, f.path, f.message())},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri(&origin.file)},
                        "region": {"startLine": origin.line.max(1)},
                    },
                    "logicalLocations": [{
                        "fullyQualifiedName": format!("{}/{}/{}", f.object.kind, f.object.namespace, f.object.name),
                        "kind": "object",
                    }],
                }],
                "partialFingerprints": {"haGuard/v1": format!("{}:{}:{}", f.rule, f.object, f.path)},
            });
            if f.action == Decision::Allowed {
                let reason = f.notes.iter().find(|n| n.starts_with("exempted")).cloned().unwrap_or_default();
                result["suppressions"] = json!([{"kind": "inSource", "justification": reason}]);
            }
            result
        })
        .collect();
    for e in &report.errors {
        results.push(json!({
            "ruleId": "input-error",
            "level": "error",
            "kind": "fail",
            "message": {"text": e.to_string()},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(&e.file)}}}],
        }));
    }
    json!({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ha-guard",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/ha-guard/ha-guard",
                "rules": rules,
            }},
            "results": results,
            "columnKind": "utf16CodeUnits",
        }],
    })
}

fn level(a: catalogue::Action) -> &'static str {
    match a {
        catalogue::Action::Deny => "error",
        catalogue::Action::Warn => "warning",
        catalogue::Action::Off => "none",
    }
}

/// A relative URI for a path as given (`./a b.yaml` → `a%20b.yaml`).
fn uri(file: &str) -> String {
    let file = file.strip_prefix("./").unwrap_or(file);
    let mut out = String::new();
    for b in file.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => out.push(b as char),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

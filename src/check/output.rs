//! The three formats of `check`: text (like a compiler's diagnostics), JSON (the contract of
//! DESIGN.md §5) and SARIF 2.1.0 (for code scanning).

use std::fmt::Write;

use serde_json::{Value, json};

use super::report::{Located, Report};
use crate::core::catalogue::Action;
use crate::core::finding::{Decision, Note};
use crate::core::registry;
use crate::manifest::skeleton::segments;

fn location(origin: &crate::manifest::Origin) -> String {
    let item = origin.item.map(|i| format!(", items[{i}]")).unwrap_or_default();
    let column = origin.column.map(|c| format!(":{c}")).unwrap_or_default();
    format!("{}:{}{column} (document {}{item})", origin.file, origin.line, origin.document)
}

/// A JSON pointer as a field path: `/spec/volumes/0/name` → `spec.volumes[0].name`.
pub fn pointer_to_path(pointer: &str) -> String {
    let mut out = String::new();
    for token in segments(pointer) {
        // An index, or a key that would not read as one segment (`app.kubernetes.io/name`).
        if token.parse::<usize>().is_ok() || token.contains(['.', '[', ']']) {
            let _ = write!(out, "[{token}]");
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&token);
        }
    }
    out
}

/// The source line with a gutter and a caret under the column, like a compiler's diagnostic.
fn snippet(out: &mut String, located: &Located) {
    let (Some(line), Some(column)) = (&located.snippet, located.origin.column) else { return };
    // At least two columns wide, so that the gutter lines up with `  -->` and `   =`.
    let number = format!("{:>2}", located.origin.line);
    let pad = " ".repeat(number.len());
    // The caret goes under the same character: keep tabs as tabs.
    let lead: String =
        line.chars().take(column.saturating_sub(1)).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
    let label = match located.missing.as_deref() {
        Some(segment) if segment.parse::<usize>().is_ok() => {
            format!(" item [{segment}] is not in the file: the nearest field present")
        }
        Some(segment) => format!(" `{segment}` is not set here"),
        None => String::new(),
    };
    let _ = writeln!(out, "{pad} |");
    let _ = writeln!(out, "{number} | {line}");
    let _ = writeln!(out, "{pad} | {lead}^{label}");
    let _ = writeln!(out, "{pad} |");
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Human-readable diagnostics, one block per finding:
///
/// ```text
/// deny[spread-selector-missing]: Deployment shop/api at spec.template.spec.topologySpreadConstraints[0].labelSelector
///   --> examples/spread-without-selector.yaml:19:11 (document 0)
///    |
/// 19 |         - maxSkew: 1
///    |           ^ `labelSelector` is not set here
///    |
///    = topologySpreadConstraints[0] (topologyKey kubernetes.io/hostname, DoNotSchedule) has no labelSelector: ...
///    = fix: set labelSelector to the workload's own selector (app=api), ...
/// ```
///
/// then notices, what could not be checked, the available fixes and a summary line.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    for e in &report.errors {
        let _ = writeln!(out, "error: {e}\n");
    }
    for located in &report.findings {
        let Located { finding: f, origin, .. } = located;
        let _ = writeln!(out, "{}[{}]: {} at {}", f.action.as_str(), f.rule, f.object, f.path);
        let _ = writeln!(out, "  --> {}", location(origin));
        snippet(&mut out, located);
        let _ = writeln!(out, "   = {}", f.what);
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
        for (i, c) in fix.changes.iter().enumerate() {
            let _ = writeln!(
                out,
                "fix[{}]: {} would get {} = {}\n  --> {}\n",
                c.mutation,
                fix.object,
                pointer_to_path(&c.path()),
                match &c.operation {
                    json_patch::PatchOperation::Add(a) => a.value.to_string(),
                    _ => String::new(),
                },
                location(fix.at.get(i).unwrap_or(&fix.origin))
            );
        }
    }
    let fixes: usize = report.fixes.iter().map(|f| f.changes.len()).sum();
    let _ = writeln!(
        out,
        "{} deny, {} warn, {} allowed in {} from {}{}{}",
        report.count(Decision::Deny),
        report.count(Decision::Warn),
        report.count(Decision::Allowed),
        plural(report.objects, "object", "objects"),
        plural(report.files, "file", "files"),
        if fixes > 0 {
            format!("; {} available (run with --fix to write them)", plural(fixes, "fix", "fixes"))
        } else {
            String::new()
        },
        if report.errors.is_empty() {
            String::new()
        } else {
            format!("; {}", plural(report.errors.len(), "error", "errors"))
        },
    );
    out
}

/// `{"findings": [...], "summary": {...}}` as DESIGN.md §5 specifies, plus `mutations`,
/// `unchecked` and `errors`.
pub fn json(report: &Report) -> Value {
    let findings: Vec<Value> = report
        .findings
        .iter()
        .map(|Located { finding: f, origin, .. }| {
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
            if let Some(c) = origin.column {
                v["column"] = json!(c);
            }
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
            fix.changes.iter().enumerate().map(move |(i, c)| {
                json!({
                    "mutation": c.mutation,
                    "kind": fix.object.kind.as_str(),
                    "namespace": fix.object.namespace,
                    "name": fix.object.name,
                    "patch": c.operation,
                    "file": fix.origin.file,
                    "document": fix.origin.document,
                    "line": fix.at.get(i).unwrap_or(&fix.origin).line,
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
        "unchecked": report.unchecked.iter().map(|(o, m)| json!({"file": o.file, "document": o.document, "line": o.line, "message": m})).collect::<Vec<_>>(),
        "errors": report.errors.iter().map(|e| json!({"file": e.file, "document": e.document, "message": e.message})).collect::<Vec<_>>(),
    })
}

/// The schema of the OASIS standard (errata 01), which `tests/fixtures/sarif-2.1.0.schema.json`
/// holds a copy of.
const SARIF_SCHEMA: &str = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// SARIF 2.1.0: one run, the catalogue as the tool's rules, one result per finding. Exempted
/// findings are results with an accepted `inSource` suppression carrying the reason. Unusable
/// input is not a finding: it is reported as a tool execution notification and makes
/// `executionSuccessful` false.
pub fn sarif(report: &Report) -> Value {
    let rules: Vec<Value> = registry::rules()
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
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|Located { finding: f, origin, .. }| {
            let mut region = json!({"startLine": origin.line.max(1)});
            if let Some(c) = origin.column {
                region["startColumn"] = json!(c.max(1));
            }
            let mut result = json!({
                "ruleId": f.rule,
                "level": match f.action { Decision::Deny => "error", Decision::Warn => "warning", Decision::Allowed => "note" },
                "message": {"text": format!("{} at {}: {}", f.object, f.path, f.message())},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri(&origin.file)},
                        "region": region,
                    },
                    "logicalLocations": [{
                        "fullyQualifiedName": format!("{}/{}/{}", f.object.kind, f.object.namespace, f.object.name),
                        "kind": "object",
                    }],
                }],
                "partialFingerprints": {"haGuard/v1": format!("{}:{}:{}", f.rule, f.object, f.path)},
                "properties": {"path": f.path, "action": f.action.as_str(), "document": origin.document},
            });
            if let Some(i) = registry::rules().position(|r| r.id == f.rule.id) {
                result["ruleIndex"] = json!(i);
            }
            if !f.related.is_empty() {
                result["relatedLocations"] = json!(f
                    .related
                    .iter()
                    .enumerate()
                    .map(|(i, r)| json!({
                        "id": i,
                        "message": {"text": r.to_string()},
                        "logicalLocations": [{"fullyQualifiedName": format!("{}/{}/{}", r.kind, r.namespace, r.name), "kind": "object"}],
                    }))
                    .collect::<Vec<_>>());
            }
            if f.action == Decision::Allowed {
                let reason = f
                    .notes
                    .iter()
                    .find(|n| matches!(n, Note::Exempted { .. }))
                    .map(ToString::to_string)
                    .unwrap_or_default();
                result["suppressions"] = json!([{"kind": "inSource", "status": "accepted", "justification": reason}]);
            }
            result
        })
        .collect();
    let notifications: Vec<Value> = report
        .errors
        .iter()
        .map(|e| {
            json!({
                "level": "error",
                "message": {"text": e.to_string()},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri(&e.file)}}}],
            })
        })
        .collect();
    json!({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ha-guard",
                "version": env!("CARGO_PKG_VERSION"),
                "semanticVersion": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/ha-guard/ha-guard",
                "rules": rules,
            }},
            "invocations": [{
                "executionSuccessful": report.errors.is_empty(),
                "toolExecutionNotifications": notifications,
            }],
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    })
}

fn level(a: Action) -> &'static str {
    match a {
        Action::Deny => "error",
        Action::Warn => "warning",
        Action::Off => "none",
    }
}

/// A URI for a path as given: relative paths stay relative (`./a b.yaml` → `a%20b.yaml`, resolved
/// against the checkout by code scanning), absolute ones become `file:` URIs.
fn uri(file: &str) -> String {
    let file = file.replace('\\', "/");
    let file = file.strip_prefix("./").unwrap_or(&file);
    let mut out = String::new();
    if file.starts_with('/') {
        out.push_str("file://");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_read_as_paths() {
        assert_eq!(
            pointer_to_path("/spec/template/spec/topologySpreadConstraints/0/labelSelector"),
            "spec.template.spec.topologySpreadConstraints[0].labelSelector"
        );
        assert_eq!(
            pointer_to_path("/metadata/labels/app.kubernetes.io~1name"),
            "metadata.labels[app.kubernetes.io/name]"
        );
        assert_eq!(pointer_to_path("/spec/unhealthyPodEvictionPolicy"), "spec.unhealthyPodEvictionPolicy");
    }

    #[test]
    fn uris() {
        assert_eq!(uri("./a b.yaml"), "a%20b.yaml");
        assert_eq!(uri("deploy/web.yaml"), "deploy/web.yaml");
        assert_eq!(uri("/tmp/x/web.yaml"), "file:///tmp/x/web.yaml");
        assert_eq!(uri("dir\\web.yaml"), "dir/web.yaml");
    }
}

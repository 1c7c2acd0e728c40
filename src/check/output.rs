//! The three formats of `check`: text (like a compiler's diagnostics), JSON (the contract of
//! DESIGN.md §5) and SARIF 2.1.0 (for code scanning).

use std::fmt::Write;

use annotate_snippets::{AnnotationKind, Element, Level, Origin as AnnotationOrigin, Renderer, Snippet};
use serde_json::{Value, json};

use super::report::{FailOn, Located, Report};
use crate::core::catalogue::Action;
use crate::core::causes;
use crate::core::finding::{Decision, Finding, Note};
use crate::core::model::words;
use crate::core::registry;
use crate::manifest::skeleton::segments;
use crate::manifest::{Origin, document_label};

/// Where an object's text is, as `file:line:col` (clickable in terminals and editors); which
/// document of the file it is goes into the header line, see [`document_note`].
fn location(origin: &Origin) -> String {
    // Line 0: an object with no source text (`audit` reads it from the cluster): its path alone.
    if origin.shown_line() == 0 {
        return origin.shown_file().to_string();
    }
    let column = origin.column.map(|c| format!(":{c}")).unwrap_or_default();
    format!("{}:{}{column}", origin.shown_file(), origin.shown_line())
}

/// Which document of a multi-document file (or of a rendered stream, or which item of a List) an
/// object is, as the end of a header line: ` (document 2)`, ` (document 3 of -)`, ` (document 1,
/// items[4])`; nothing for the first document of a plain file. Every text header (findings,
/// fixes, notices, what was not checked) puts it in the same place, and the `-->` line stays a
/// bare location.
fn document_note(origin: &Origin) -> String {
    match (&origin.template, origin.item) {
        (Some(_), _) => format!(" ({} of {})", document_label(origin.document), origin.file),
        (None, Some(i)) => format!(" ({}, items[{i}])", document_label(origin.document)),
        (None, None) if origin.document > 0 => format!(" ({})", document_label(origin.document)),
        (None, None) => String::new(),
    }
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

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How text output looks: styled for a terminal (colour), plain for pipes, files and `NO_COLOR`;
/// `quiet` prints the findings alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct TextStyle {
    pub color: bool,
    pub quiet: bool,
}

/// One finding as a compiler's diagnostic (rendered by annotate-snippets):
///
/// ```text
/// deny[spread-selector-missing]: Deployment shop/api at spec.template.spec.topologySpreadConstraints[0].labelSelector
///   --> examples/spread-without-selector.yaml:19:11
///    |
/// 19 |         - maxSkew: 1
///    |           ^ `labelSelector` is not set here
///    |
///    = topologySpreadConstraints[0] (topologyKey kubernetes.io/hostname, DoNotSchedule) has no labelSelector: ...
///    = fix: set labelSelector to the workload's own selector (app=api), ...
/// ```
///
/// A finding caused by another one of the run (`cause`: how the primary is named, see
/// [`causes`]) says so under its message.
fn finding_text(located: &Located, renderer: &Renderer, cause: Option<&str>) -> String {
    let Located { finding: f, origin, .. } = located;
    let level = match f.action {
        Decision::Deny => Level::ERROR.with_name("deny"),
        Decision::Warn => Level::WARNING.with_name("warn"),
        Decision::Allowed => Level::NOTE.with_name("allowed"),
    };
    let title = format!("{} at {}{}", f.object, f.path, document_note(origin));
    let path = origin.shown_file().to_string();
    let place: Element = match (&located.snippet, origin.column) {
        (Some(line), Some(column)) => {
            // The caret goes under the column's character (columns count characters).
            let start = line.char_indices().nth(column.saturating_sub(1)).map_or(line.len(), |(i, _)| i);
            let end = line[start..].chars().next().map_or(start, |c| start + c.len_utf8());
            let label = match located.missing.as_deref() {
                Some(segment) if segment.parse::<usize>().is_ok() => {
                    format!("item [{segment}] is not in the file: the nearest field present")
                }
                Some(segment) => format!("`{segment}` is not set here"),
                None => String::new(),
            };
            Snippet::source(line.as_str())
                .line_start(origin.shown_line())
                .path(path)
                .annotation(AnnotationKind::Primary.span(start..end).label(label))
                .into()
        }
        _ if origin.shown_line() == 0 => AnnotationOrigin::path(path).into(),
        _ => AnnotationOrigin::path(path).line(origin.shown_line()).into(),
    };
    let mut elements: Vec<Element> = vec![place, Level::NOTE.no_name().message(f.what.as_str()).into()];
    if let Some(cause) = cause {
        elements.push(
            Level::NOTE.with_name("caused by").message(format!("{cause} (above): fixing that fixes this too")).into(),
        );
    }
    elements.push(Level::HELP.with_name("fix").message(f.fix.as_str()).into());
    if !f.related.is_empty() {
        let related: Vec<_> = f.related.iter().map(ToString::to_string).collect();
        elements.push(Level::NOTE.with_name("related").message(related.join(", ")).into());
    }
    for n in &f.notes {
        elements.push(Level::NOTE.message(n.to_string()).into());
    }
    renderer.render(&[level.primary_title(title).id(f.rule.id).elements(elements)])
}

/// Human-readable diagnostics: one block per finding, then (unless quiet) the notices, what could
/// not be checked, the available fixes and a summary line. Errors are not here: `check` prints
/// them once, to stderr.
pub fn text(report: &Report, style: TextStyle) -> String {
    let renderer = if style.color { Renderer::styled() } else { Renderer::plain() };
    let mut out = String::new();
    // How the drains end comes first: it is the answer; the findings below say why.
    if !report.drains.is_empty() && !style.quiet {
        out.push_str(&drains_text(&report.drains));
    }
    // One cause, many findings: each primary, then the findings it causes indented under it.
    let refs: Vec<&Finding> = report.findings.iter().map(|l| &l.finding).collect();
    for (i, primary) in causes::grouped_order(&refs) {
        match primary {
            None => out.push_str(&finding_text(&report.findings[i], &renderer, None)),
            Some(p) => {
                let block = finding_text(&report.findings[i], &renderer, Some(&causes::cause_label(refs[p])));
                let indented: Vec<String> =
                    block.lines().map(|l| if l.is_empty() { String::new() } else { format!("    {l}") }).collect();
                out.push_str(&indented.join("\n"));
            }
        }
        out.push_str("\n\n");
    }
    if style.quiet {
        return out;
    }
    for (origin, n) in &report.notices {
        let _ = writeln!(out, "warning: {n}{}\n  --> {}\n", document_note(origin), location(origin));
    }
    for (origin, u) in &report.unchecked {
        let _ = writeln!(out, "note: {u}{}\n  --> {}\n", document_note(origin), location(origin));
    }
    for fix in &report.fixes {
        for (i, c) in fix.changes.iter().enumerate() {
            let at = fix.at.get(i).unwrap_or(&fix.origin);
            let _ = writeln!(
                out,
                "fix[{}]: {}{} would get {} = {}\n  --> {}\n",
                c.mutation,
                fix.object,
                document_note(at),
                pointer_to_path(&c.path()),
                match &c.operation {
                    json_patch::PatchOperation::Add(a) => a.value.to_string(),
                    _ => String::new(),
                },
                location(at)
            );
        }
    }
    let fixes: usize = report.fixes.iter().map(|f| f.changes.len()).sum();
    let _ = writeln!(
        out,
        "{}, {}, {} in {}{}{}{}{}",
        counted(report, Decision::Deny),
        counted(report, Decision::Warn),
        counted(report, Decision::Allowed),
        plural(report.objects, "object", "objects"),
        // No files: objects read from a cluster (`audit`).
        if report.files == 0 { String::new() } else { format!(" from {}", plural(report.files, "file", "files")) },
        // What was reported as not checked (an API version no longer served, a chart not
        // rendered): counted here too, so that a summary never reads cleaner than the run was.
        if report.unchecked.is_empty() { String::new() } else { format!("; {} not checked", report.unchecked.len()) },
        if fixes > 0 {
            format!("; {} available (run with --fix to write them)", plural(fixes, "fix", "fixes"))
        } else {
            String::new()
        },
        if report.errors.is_empty() {
            String::new()
        } else {
            format!("; {} (on stderr)", plural(report.errors.len(), "error", "errors"))
        },
    );
    out
}

/// How many rules a summary names per action before "and N more".
const SUMMARY_RULES: usize = 3;

/// `3 deny (pdb-blocks-eviction 2, pdb-overlap 1)`: how many findings of `action`, and of which
/// rules, the most frequent first (ties by ID), the first [`SUMMARY_RULES`] named and the others
/// counted; `0 warn` alone.
fn counted(report: &Report, action: Decision) -> String {
    let mut by_rule: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for l in report.findings.iter().filter(|l| l.finding.action == action) {
        *by_rule.entry(l.finding.rule.id).or_default() += 1;
    }
    let total: usize = by_rule.values().sum();
    if total == 0 {
        return format!("0 {}", action.as_str());
    }
    let mut rules: Vec<(&str, usize)> = by_rule.into_iter().collect();
    rules.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let named = words::list(rules.iter().map(|(id, n)| format!("{id} {n}")), SUMMARY_RULES, ", ");
    format!("{total} {} ({named})", action.as_str())
}

/// What `check` says besides its findings: errors (unusable input), warnings (a document defined
/// twice, an exemption without a reason) and notes (what was not checked, and why), each with
/// where, in every format.
pub fn diagnostics(report: &Report) -> Vec<Diagnostic<'_>> {
    let errors = report.errors.iter().map(|e| Diagnostic {
        level: "error",
        message: &e.message,
        file: &e.file,
        document: e.document,
        line: None,
    });
    let warnings = report.notices.iter().map(|(o, m)| Diagnostic::at("warning", m, o));
    let notes = report.unchecked.iter().map(|(o, m)| Diagnostic::at("note", m, o));
    errors.chain(warnings).chain(notes).collect()
}

/// One diagnostic of [`diagnostics`].
pub struct Diagnostic<'a> {
    /// `error`, `warning` or `note` (SARIF's levels).
    pub level: &'static str,
    pub message: &'a str,
    pub file: &'a str,
    pub document: Option<usize>,
    pub line: Option<usize>,
}

impl<'a> Diagnostic<'a> {
    fn at(level: &'static str, message: &'a str, origin: &'a Origin) -> Self {
        Diagnostic {
            level,
            message,
            file: origin.shown_file(),
            document: Some(origin.document),
            line: Some(origin.shown_line()),
        }
    }

    fn json(&self) -> Value {
        let mut v = json!({"level": self.level, "message": self.message, "file": self.file});
        if let Some(d) = self.document {
            v["document"] = json!(d);
        }
        if let Some(l) = self.line {
            v["line"] = json!(l);
        }
        v
    }
}

/// `{"findings": [...], "summary": {...}}` as DESIGN.md §5 specifies, plus `mutations`,
/// `unchecked`, `errors` and every `diagnostics` (errors, warnings, notes, with where).
pub fn json(report: &Report) -> Value {
    let refs: Vec<&Finding> = report.findings.iter().map(|l| &l.finding).collect();
    let primaries = causes::primaries(&refs);
    let findings: Vec<Value> = report
        .findings
        .iter()
        .zip(&primaries)
        .map(|(Located { finding: f, origin, .. }, primary)| {
            let mut v = json!({
                "rule": f.rule,
                "action": f.action.as_str(),
                "kind": f.object.kind.as_str(),
                "namespace": f.object.namespace,
                "name": f.object.name,
                "path": f.path,
                "message": f.message(),
                // The fix alone (it ends `message` too, after "Fix: "), for tools that show it apart.
                "fix": f.fix,
                "related": f.related.iter().map(|r| json!({"kind": r.kind.as_str(), "namespace": r.namespace, "name": r.name})).collect::<Vec<_>>(),
                "file": origin.shown_file(),
                "document": origin.document,
                "line": origin.shown_line(),
            });
            if origin.template.is_some() {
                v["stream"] = json!(origin.file);
            }
            if let Some(c) = origin.column {
                v["column"] = json!(c);
            }
            if let Some(i) = origin.item {
                v["item"] = json!(i);
            }
            if !f.notes.is_empty() {
                v["notes"] = json!(f.notes);
            }
            if let Some((name, reason)) = f.notes.iter().find_map(|n| n.exception()) {
                v["exception"] = json!(name);
                v["exceptionReason"] = json!(reason);
            }
            // One cause, many findings: a secondary names its primary (its rule and object).
            if let Some(p) = primary {
                v["causedBy"] = cause_json(refs[*p]);
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
                    "file": fix.origin.shown_file(),
                    "document": fix.origin.document,
                    "line": fix.at.get(i).unwrap_or(&fix.origin).shown_line(),
                })
            })
        })
        .collect();
    let mut out = json!({
        "findings": findings,
        "summary": {
            "deny": report.count(Decision::Deny),
            "warn": report.count(Decision::Warn),
            "allowed": report.count(Decision::Allowed),
        },
        "mutations": mutations,
        "unchecked": report.unchecked.iter().map(|(o, m)| json!({"file": o.shown_file(), "document": o.document, "line": o.shown_line(), "message": m})).collect::<Vec<_>>(),
        "errors": report.errors.iter().map(|e| json!({"file": e.file, "document": e.document, "message": e.message})).collect::<Vec<_>>(),
        "diagnostics": diagnostics(report).iter().map(Diagnostic::json).collect::<Vec<_>>(),
    });
    if !report.drains.is_empty() {
        out["drains"] = report.drains.iter().map(drain_json).collect();
    }
    out
}

/// The primary finding a secondary points at: `{"rule", "kind", "namespace", "name"}`.
fn cause_json(primary: &Finding) -> Value {
    json!({
        "rule": primary.rule.id,
        "kind": primary.object.kind.as_str(),
        "namespace": primary.object.namespace,
        "name": primary.object.name,
    })
}

/// How the drains end, for a person: one line per drain that does not complete, and for several
/// (`--drain-each`) a summary first, e.g. "3 of 40 nodes cannot be drained today".
fn drains_text(drains: &[crate::core::view::replay::DrainRun]) -> String {
    use crate::core::view::replay::Outcome;
    let mut out = String::new();
    let troubled: Vec<_> = drains.iter().filter(|d| d.outcome != Outcome::Completes).collect();
    if drains.len() > 1 {
        let _ = writeln!(
            out,
            "{} of {} nodes cannot be drained cleanly today{}",
            troubled.len(),
            drains.len(),
            if troubled.is_empty() { "." } else { ":" }
        );
    }
    for d in &troubled {
        let why = match d.outcome {
            Outcome::Hangs => d
                .evictions
                .iter()
                .filter(|e| e.result == crate::core::view::replay::EvictionResult::Refused)
                .map(|e| format!("{}/{} is refused ({})", e.namespace, e.pod, e.reason))
                .next()
                .unwrap_or_default(),
            Outcome::Refused => d
                .evictions
                .iter()
                .find(|e| e.result == crate::core::view::replay::EvictionResult::Refused)
                .map(|e| format!("{}/{}: {}", e.namespace, e.pod, e.reason))
                .unwrap_or_default(),
            Outcome::LeavesPending => {
                let pending = d.pending.iter().map(|p| format!("{} runs short ({})", p.workload, p.reason)).next();
                // Narrowed to a namespace, the Pending pod may be another's: a pod a replacement preempted.
                let preempted = || {
                    let p = d.preempts.iter().find(|p| p.replacement.is_none())?;
                    Some(format!("{}/{} preempted by the replacement of {}, and Pending", p.namespace, p.pod, p.by))
                };
                pending.or_else(preempted).unwrap_or_default()
            }
            Outcome::Completes => String::new(),
        };
        let _ = writeln!(out, "  drain of {}: {}: {why}", d.nodes.join(", "), d.outcome.as_str());
    }
    if drains.len() == 1 && troubled.is_empty() {
        let _ = writeln!(out, "drain of {}: completes", drains[0].nodes.join(", "));
    }
    // Replacements the cordon does not keep off (they tolerate it): the node is not emptied.
    for d in drains {
        let back: Vec<String> = d
            .evictions
            .iter()
            .filter(|e| e.replacement.as_ref().is_some_and(|r| d.nodes.contains(r)))
            .map(|e| format!("{}/{} ({})", e.namespace, e.pod, e.replacement.as_deref().unwrap_or_default()))
            .collect();
        if !back.is_empty() {
            let _ = writeln!(
                out,
                "  drain of {}: the replacement of {} lands back on the cordoned node: it tolerates \
                 node.kubernetes.io/unschedulable, so the node is not emptied",
                d.nodes.join(", "),
                crate::core::model::words::names(&back)
            );
        }
    }
    // Workloads of one replica lose their pod to any drain of its node: counted, not warned one by one.
    let single: Vec<String> = drains
        .iter()
        .flat_map(|d| d.single_replica.iter().map(move |w| (w, d)))
        .map(|(w, d)| {
            if drains.len() > 1 {
                format!("{}/{} ({})", w.namespace, w.name, d.nodes.join(", "))
            } else {
                format!("{}/{}", w.namespace, w.name)
            }
        })
        .collect();
    if !single.is_empty() {
        let _ = writeln!(
            out,
            "  {} workload{} of replicas 1 {} only pod while {} (drain-takes-all-replicas, counted here): {}",
            single.len(),
            if single.len() == 1 { "" } else { "s" },
            if single.len() == 1 { "loses its" } else { "lose their" },
            if drains.len() > 1 { "their node drains" } else { "it drains" },
            crate::core::model::words::names(&single)
        );
    }
    out.push('\n');
    out
}

/// One drain as `audit --drain --format json` gives it (DESIGN.md §5).
fn drain_json(run: &crate::core::view::replay::DrainRun) -> Value {
    json!({
        "nodes": run.nodes,
        "outcome": run.outcome.as_str(),
        "evictions": run.evictions.iter().map(|e| json!({
            "namespace": e.namespace,
            "pod": e.pod,
            "result": e.result.as_str(),
            "replacement": e.replacement,
            "reason": e.reason,
        })).collect::<Vec<_>>(),
        "pending": run.pending.iter().map(|p| json!({
            "namespace": p.namespace,
            "pod": p.pod,
            "workload": format!("{}/{}", p.workload.kind.as_str(), p.workload.name),
            "reason": p.reason,
        })).collect::<Vec<_>>(),
        "preempts": run.preempts.iter().map(|p| json!({
            "namespace": p.namespace,
            "pod": p.pod,
            "priority": p.priority,
            "node": p.node,
            "by": p.by,
            "replacement": p.replacement,
        })).collect::<Vec<_>>(),
        "namespaces": run.namespaces,
        "singleReplica": run.single_replica.iter().map(|w| json!({"kind": w.kind.as_str(), "namespace": w.namespace, "name": w.name})).collect::<Vec<_>>(),
    })
}

/// The schema of the OASIS standard (errata 01), which `tests/fixtures/sarif-2.1.0.schema.json`
/// holds a copy of.
const SARIF_SCHEMA: &str = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// The project's repository: SARIF's `informationUri`, and the rule pages under it.
const REPOSITORY: &str = "https://github.com/ha-guard/ha-guard";

/// The page of rule `id` (docs/rules/ID.md), as code scanning links it.
fn help_uri(id: &str) -> String {
    format!("{REPOSITORY}/blob/main/docs/rules/{id}.md")
}

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
                // The page itself is behind helpUri, and `help` says how to read it offline:
                // embedding every rule's page made one file's SARIF hundreds of kilobytes.
                "helpUri": help_uri(r.id),
                "help": {"text": format!("{}: `ha-guard explain {}`", r.summary, r.id)},
                "defaultConfiguration": {"level": level(r.default)},
                "properties": {"default": r.default_text},
            })
        })
        .collect();
    let refs: Vec<&Finding> = report.findings.iter().map(|l| &l.finding).collect();
    let primaries = causes::primaries(&refs);
    let results: Vec<Value> = report
        .findings
        .iter()
        .zip(&primaries)
        .map(|(Located { finding: f, origin, .. }, primary)| {
            let mut region = json!({"startLine": origin.shown_line().max(1)});
            if let Some(c) = origin.column {
                region["startColumn"] = json!(c.max(1));
            }
            let mut result = json!({
                "ruleId": f.rule,
                "level": match f.action { Decision::Deny => "error", Decision::Warn => "warning", Decision::Allowed => "note" },
                "message": {"text": format!("{} at {}: {}", f.object, f.path, f.message())},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri(origin.shown_file())},
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
            // One cause, many findings: the primary, as JSON's causedBy names it.
            if let Some(p) = primary {
                result["properties"]["causedBy"] = cause_json(refs[*p]);
            }
            // Line 0 is no line (an object read from the cluster): no region.
            if origin.shown_line() == 0
                && let Some(physical) = result["locations"][0]["physicalLocation"].as_object_mut()
            {
                physical.remove("region");
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
                // An annotation on the object is an in-source suppression; an exception of the
                // configuration is an external one.
                let (kind, reason) = f
                    .notes
                    .iter()
                    .find_map(|n| match n {
                        Note::Exempted { .. } => Some(("inSource", n.to_string())),
                        Note::Exception { .. } => Some(("external", n.to_string())),
                        _ => None,
                    })
                    .unwrap_or(("inSource", String::new()));
                result["suppressions"] = json!([{"kind": kind, "status": "accepted", "justification": reason}]);
            }
            result
        })
        .collect();
    let notifications: Vec<Value> = diagnostics(report)
        .iter()
        .map(|d| {
            let mut location = json!({"physicalLocation": {"artifactLocation": {"uri": uri(d.file)}}});
            if let Some(line) = d.line {
                location["physicalLocation"]["region"] = json!({"startLine": line.max(1)});
            }
            let text = match d.document {
                Some(doc) => format!("{} ({}): {}", d.file, document_label(doc), d.message),
                None => format!("{}: {}", d.file, d.message),
            };
            json!({"level": d.level, "message": {"text": text}, "locations": [location]})
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
                "informationUri": REPOSITORY,
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

/// JUnit XML, which GitLab, Jenkins and most CI systems show as test results: one test suite per
/// file, one test case per checked object and rule that found something (a `failure` when
/// `fail_on` makes it fail the run, else a passing case whose output carries the finding), a
/// passing case for each object with no finding, `skipped` for exempted findings, and an `error`
/// case per unusable input.
pub fn junit(report: &Report, fail_on: FailOn) -> String {
    use std::collections::BTreeMap;

    use quick_xml::Writer;
    use quick_xml::events::{BytesDecl, BytesText, Event};

    struct Case {
        name: String,
        failure: Option<(String, String)>,
        skipped: Option<String>,
        output: Option<String>,
        error: Option<String>,
    }
    let mut suites: BTreeMap<String, Vec<Case>> = BTreeMap::new();
    for l in &report.findings {
        let f = &l.finding;
        let text = format!(
            "{} at {}{}: {}\n  --> {}",
            f.object,
            f.path,
            document_note(&l.origin),
            f.message(),
            location(&l.origin)
        );
        let fails = match fail_on {
            FailOn::Deny => f.action == Decision::Deny,
            FailOn::Warn => matches!(f.action, Decision::Deny | Decision::Warn),
            FailOn::Never => false,
        };
        let mut case = Case {
            name: format!("{} [{}]", f.object, f.rule.id),
            failure: None,
            skipped: None,
            output: None,
            error: None,
        };
        match f.action {
            Decision::Allowed => {
                case.skipped = Some(f.notes.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
            }
            _ if fails => case.failure = Some((format!("[{}] {} at {}", f.rule.id, f.object, f.path), text)),
            _ => case.output = Some(format!("{}: {text}", f.action.as_str())),
        }
        suites.entry(l.origin.shown_file().to_string()).or_default().push(case);
    }
    for (file, object) in &report.checked {
        let reported = report.findings.iter().any(|l| l.origin.shown_file() == file && l.finding.object == *object);
        if !reported {
            let case = Case { name: object.to_string(), failure: None, skipped: None, output: None, error: None };
            suites.entry(file.clone()).or_default().push(case);
        }
    }
    for e in &report.errors {
        let name = match e.document {
            Some(d) => document_label(d),
            None => "read".to_string(),
        };
        let case = Case { name, failure: None, skipped: None, output: None, error: Some(e.message.clone()) };
        suites.entry(e.file.clone()).or_default().push(case);
    }
    let count = |cases: &[Case], f: fn(&Case) -> bool| cases.iter().filter(|c| f(c)).count().to_string();
    let all: Vec<&Case> = suites.values().flatten().collect();
    let total = |f: fn(&Case) -> bool| all.iter().filter(|c| f(c)).count().to_string();
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    let write = |w: &mut Writer<Vec<u8>>| -> std::io::Result<()> {
        w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        w.create_element("testsuites")
            .with_attributes([
                ("name", "ha-guard"),
                ("tests", all.len().to_string().as_str()),
                ("failures", total(|c| c.failure.is_some()).as_str()),
                ("errors", total(|c| c.error.is_some()).as_str()),
                ("skipped", total(|c| c.skipped.is_some()).as_str()),
            ])
            .write_inner_content(|w| {
                for (file, cases) in &suites {
                    w.create_element("testsuite")
                        .with_attributes([
                            ("name", file.as_str()),
                            ("tests", cases.len().to_string().as_str()),
                            ("failures", count(cases, |c| c.failure.is_some()).as_str()),
                            ("errors", count(cases, |c| c.error.is_some()).as_str()),
                            ("skipped", count(cases, |c| c.skipped.is_some()).as_str()),
                        ])
                        .write_inner_content(|w| {
                            for c in cases {
                                let case = w.create_element("testcase").with_attributes([
                                    ("name", c.name.as_str()),
                                    ("classname", file.as_str()),
                                    ("file", file.as_str()),
                                ]);
                                if c.failure.is_none() && c.skipped.is_none() && c.output.is_none() && c.error.is_none()
                                {
                                    case.write_empty()?;
                                    continue;
                                }
                                case.write_inner_content(|w| {
                                    if let Some((message, text)) = &c.failure {
                                        w.create_element("failure")
                                            .with_attributes([("message", message.as_str()), ("type", "ha-guard")])
                                            .write_text_content(BytesText::new(text))?;
                                    }
                                    if let Some(reason) = &c.skipped {
                                        w.create_element("skipped")
                                            .with_attribute(("message", reason.as_str()))
                                            .write_empty()?;
                                    }
                                    if let Some(message) = &c.error {
                                        w.create_element("error")
                                            .with_attributes([("message", "unusable input"), ("type", "ha-guard")])
                                            .write_text_content(BytesText::new(message))?;
                                    }
                                    if let Some(out) = &c.output {
                                        w.create_element("system-out").write_text_content(BytesText::new(out))?;
                                    }
                                    Ok(())
                                })?;
                            }
                            Ok(())
                        })?;
                }
                Ok(())
            })?;
        Ok(())
    };
    // Writing into a Vec cannot fail.
    let _ = write(&mut w);
    let mut xml = String::from_utf8(w.into_inner()).unwrap_or_default();
    xml.push('\n');
    xml
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
    use crate::core::model::{Kind, ObjectRef};
    use crate::core::view::replay::{DrainRun, Eviction, EvictionResult, Outcome};

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

    fn drain_of(node: &str, outcome: Outcome, replacement: Option<&str>, single: &[&str]) -> DrainRun {
        let mut run = DrainRun::of(vec![node.to_string()], outcome);
        run.evictions.push(Eviction {
            namespace: "ops".into(),
            pod: "operator-0".into(),
            result: EvictionResult::Evicted,
            replacement: replacement.map(str::to_string),
            reason: String::new(),
        });
        run.namespaces = vec!["ops".into()];
        run.single_replica = single.iter().map(|n| ObjectRef::new(Kind::Deployment, "shop", *n)).collect();
        run
    }

    #[test]
    fn a_drain_is_summed_up_before_the_findings_with_what_json_alone_said() {
        let report = Report {
            drains: vec![drain_of("n1", Outcome::Completes, Some("n1"), &["cart", "till"])],
            findings: Vec::new(),
            ..Default::default()
        };
        let text = text(&report, TextStyle { color: false, quiet: false });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "drain of n1: completes", "{text}");
        assert!(
            text.contains("drain of n1: the replacement of ops/operator-0 (n1) lands back on the cordoned node"),
            "{text}"
        );
        assert!(
            text.contains("2 workloads of replicas 1 lose their only pod while it drains (drain-takes-all-replicas, counted here): shop/cart, shop/till"),
            "{text}"
        );
        // --drain-each: which node each one is on; a replacement elsewhere is no note.
        let each = Report {
            drains: vec![
                drain_of("n1", Outcome::Completes, Some("n2"), &["cart"]),
                drain_of("n2", Outcome::Completes, Some("n3"), &[]),
            ],
            ..Default::default()
        };
        let text = super::text(&each, TextStyle { color: false, quiet: false });
        assert!(text.starts_with("0 of 2 nodes cannot be drained cleanly today."), "{text}");
        assert!(!text.contains("lands back"), "{text}");
        assert!(text.contains("1 workload of replicas 1 loses its only pod while their node drains"), "{text}");
        assert!(text.contains(": shop/cart (n1)"), "{text}");
    }

    fn located(
        rule: &'static crate::core::catalogue::Rule,
        action: Decision,
        object: ObjectRef,
        related: &[ObjectRef],
    ) -> Located {
        Located {
            finding: Finding {
                rule,
                action,
                anchor: object.clone(),
                path: "spec".into(),
                what: format!("{object} is what {} says.", rule.id),
                fix: "fix it.".into(),
                object,
                related: related.to_vec(),
                notes: Vec::new(),
                from_view: false,
            },
            origin: Origin { file: "f.yaml".into(), document: 0, item: None, line: 0, column: None, template: None },
            missing: None,
            snippet: None,
        }
    }

    /// One budget over one replica, and a pod Pending elsewhere: three findings, two causes.
    fn one_cause_report() -> Report {
        use crate::core::rules::pdb::{PDB_BLOCKS_EVICTION, PDB_OVERLAP};
        use crate::core::rules::posture::{PDB_DISRUPTIONS_BLOCKED, PODS_PENDING};
        let pdb = ObjectRef::new(Kind::PodDisruptionBudget, "shop", "web");
        let web = ObjectRef::new(Kind::Deployment, "shop", "web");
        let db = ObjectRef::new(Kind::StatefulSet, "shop", "db");
        Report {
            findings: vec![
                located(&PDB_DISRUPTIONS_BLOCKED, Decision::Warn, pdb.clone(), std::slice::from_ref(&web)),
                located(&PODS_PENDING, Decision::Warn, db.clone(), &[]),
                located(&PDB_BLOCKS_EVICTION, Decision::Deny, pdb.clone(), std::slice::from_ref(&web)),
                located(&PDB_OVERLAP, Decision::Deny, web.clone(), &[]),
            ],
            objects: 3,
            ..Default::default()
        }
    }

    #[test]
    fn a_finding_caused_by_another_is_indented_under_it_and_names_it() {
        let text = text(&one_cause_report(), TextStyle { color: false, quiet: false });
        let blocks = text.find("deny[pdb-blocks-eviction]").unwrap_or_else(|| panic!("{text}"));
        let under = text.find("    warn[pdb-disruptions-blocked]").unwrap_or_else(|| panic!("{text}"));
        assert!(blocks < under, "the primary first, its consequence under it:\n{text}");
        assert!(
            text.contains("    = caused by: [pdb-blocks-eviction] PodDisruptionBudget shop/web (above): fixing that fixes this too"),
            "{text}"
        );
        // Every line of the secondary's block is indented; the others are not.
        let block = &text[under..];
        let block = &block[..block.find("\n\n").unwrap()];
        assert!(block.lines().all(|l| l.starts_with("    ")), "{block}");
        assert!(text.contains("\nwarn[pods-pending]") || text.starts_with("warn[pods-pending]"), "{text}");
        // Grouping hides nothing: every finding is counted, per rule.
        assert!(
            text.ends_with(
                "2 deny (pdb-blocks-eviction 1, pdb-overlap 1), 2 warn (pdb-disruptions-blocked 1, pods-pending 1), 0 \
                 allowed in 3 objects\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn json_names_the_primary_of_a_secondary_and_nothing_on_the_others() {
        let v = json(&one_cause_report());
        let findings = v["findings"].as_array().unwrap();
        assert_eq!(
            findings[0]["causedBy"],
            serde_json::json!({"rule": "pdb-blocks-eviction", "kind": "PodDisruptionBudget", "namespace": "shop", "name": "web"})
        );
        for f in &findings[1..] {
            assert!(f.get("causedBy").is_none(), "{f}");
        }
        // SARIF says the same in the result's properties.
        let results = sarif(&one_cause_report())["runs"][0]["results"].clone();
        assert_eq!(results[0]["properties"]["causedBy"], findings[0]["causedBy"]);
        assert!(results[2]["properties"].get("causedBy").is_none());
        // The contract fields and the summary are unchanged.
        assert_eq!(findings[0]["rule"], "pdb-disruptions-blocked");
        assert_eq!(v["summary"], serde_json::json!({"deny": 2, "warn": 2, "allowed": 0}));
    }

    #[test]
    fn the_summary_names_the_three_most_frequent_rules_and_counts_the_rest() {
        use crate::core::rules::{colocation, pdb, posture, termination};
        let w = |rule, name: &str| located(rule, Decision::Warn, ObjectRef::new(Kind::Deployment, "shop", name), &[]);
        let mut findings = vec![
            w(&termination::TERMINATION_GRACE_ZERO, "a"),
            w(&pdb::PDB_MISSING, "a"),
            w(&pdb::PDB_MISSING, "b"),
            w(&posture::PODS_PENDING, "a"),
            w(&colocation::REPLICAS_COLOCATED, "a"),
            w(&colocation::REPLICAS_COLOCATED, "b"),
            w(&colocation::REPLICAS_COLOCATED, "c"),
        ];
        findings.push(located(
            &pdb::PDB_BLOCKS_EVICTION,
            Decision::Allowed,
            ObjectRef::new(Kind::PodDisruptionBudget, "shop", "x"),
            &[],
        ));
        let report = Report { findings, objects: 4, ..Default::default() };
        assert_eq!(counted(&report, Decision::Deny), "0 deny");
        assert_eq!(
            counted(&report, Decision::Warn),
            "7 warn (replicas-colocated 3, pdb-missing 2, pods-pending 1 and 1 more)"
        );
        assert_eq!(counted(&report, Decision::Allowed), "1 allowed (pdb-blocks-eviction 1)");
    }

    #[test]
    fn uris() {
        assert_eq!(uri("./a b.yaml"), "a%20b.yaml");
        assert_eq!(uri("deploy/web.yaml"), "deploy/web.yaml");
        assert_eq!(uri("/tmp/x/web.yaml"), "file:///tmp/x/web.yaml");
        assert_eq!(uri("dir\\web.yaml"), "dir/web.yaml");
    }
}

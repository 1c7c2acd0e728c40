//! A request judged and answered: the thin handler between the wire and [`judge`].

use std::borrow::Cow;
use std::collections::HashMap;

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview, Operation};

use super::subject::{created_at, old_replicas, subject_and_spec, subject_and_spec_of};
use super::unchanged::changes_nothing_read_given;
use super::wire::{BadRequest, Request};
use crate::core::catalogue::{Mutation, Rule};
use crate::core::config::Config;
use crate::core::decide::{Decided, UnknownNamespace};
use crate::core::finding::{Decision, Finding};
use crate::core::judge::{Asks, Review, judge};
use crate::core::model::Subject;
use crate::core::rules::Progress;
use crate::core::view::{Absences, AdmissionClock, View};

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

/// `operation` as the apiserver spells it.
pub fn operation_name(operation: &Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// What happened, for logs and metrics: its texts borrowed from the request where it has them.
#[derive(Clone, Debug, Default)]
pub struct Outcome<'a> {
    pub uid: &'a str,
    /// The kind, or `deployments/scale` for a scale write.
    pub kind: Cow<'a, str>,
    pub namespace: &'a str,
    /// The name, or on a CREATE without one its `generateName` prefix.
    pub name: Cow<'a, str>,
    /// As the apiserver spells it: `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: &'static str,
    pub dry_run: bool,
    pub decision: AdmissionDecision,
    pub findings: Vec<(&'static Rule, Decision)>,
    /// The configuration's exceptions that allowed a finding: (exception, rule).
    pub exceptions: Vec<(String, &'static Rule)>,
    pub mutations: Vec<&'static Mutation>,
    /// Who wrote: the user and their groups, as the apiserver authenticated them.
    pub user: &'a str,
    pub groups: &'a [String],
}

/// What the webhook answered, as the `decision` label of the request metric says it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdmissionDecision {
    Allowed,
    Denied,
    Warned,
    Patched,
    /// Not a kind or operation ha-guard checks, a namespace it skips, or an UPDATE that changes
    /// nothing it reads and would otherwise have been warned, denied or patched.
    #[default]
    Skipped,
}

impl AdmissionDecision {
    /// Whether the answer says anything to whoever wrote the object: a denial, a warning or a
    /// patch (the log line of such an answer is at info; a plain allow's or a skip's at debug).
    pub fn tells_the_user(self) -> bool {
        matches!(self, AdmissionDecision::Denied | AdmissionDecision::Warned | AdmissionDecision::Patched)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionDecision::Allowed => "allowed",
            AdmissionDecision::Denied => "denied",
            AdmissionDecision::Warned => "warned",
            AdmissionDecision::Patched => "patched",
            AdmissionDecision::Skipped => "skipped",
        }
    }
}

/// The apiserver's limit on the sum of warnings, and what it cuts each one to past it.
pub const WARNINGS_TOTAL_LIMIT: usize = 4096;
pub const WARNING_ITEM_LIMIT: usize = 256;

/// Why an UPDATE got a plain allow (audit annotation `skipped`): see [`super::unchanged`].
pub const UNCHANGED: &str = "an UPDATE that changes nothing ha-guard reads (spec, labels, ha-guard.io/* and \
                             last-applied annotations)";

/// The audit annotation naming the rules whose findings the answer left to the admission
/// policies in force.
pub const LEFT_TO_POLICIES: &str = "left-to-admission-policies";

/// Answers one request. `clock` says whether an absence has lasted long enough to be said
/// ([`Absences::at_admission`]).
pub fn review<'a>(
    request: &'a Request,
    webhook: Webhook,
    view: &dyn View,
    config: &Config,
    clock: &AdmissionClock,
) -> Result<(AdmissionResponse, Outcome<'a>), BadRequest> {
    review_with_progress(request, webhook, view, config, clock, None, None)
}

/// [`review`], saying where it has got in `progress` and stopping when asked (the server's
/// deadline): an answer then is partial, and the server answers for it. `policies`: the rules
/// whose admission policies are in force for `config` ([`crate::core::decide::leave_to_policies`]);
/// the validating answer leaves their findings to them.
pub fn review_with_progress<'a>(
    request: &'a Request,
    webhook: Webhook,
    view: &dyn View,
    config: &Config,
    clock: &AdmissionClock,
    progress: Option<&Progress>,
    policies: Option<&std::collections::BTreeSet<String>>,
) -> Result<(AdmissionResponse, Outcome<'a>), BadRequest> {
    let req = &request.header;
    let mut outcome = Outcome {
        uid: &req.uid,
        kind: Cow::Borrowed(&req.kind.kind),
        namespace: req.namespace.as_deref().unwrap_or_default(),
        name: Cow::Borrowed(&req.name),
        operation: operation_name(&req.operation),
        dry_run: req.dry_run,
        decision: AdmissionDecision::Skipped,
        user: req.user_info.username.as_deref().unwrap_or_default(),
        groups: req.user_info.groups.as_deref().unwrap_or_default(),
        ..Default::default()
    };
    if req.sub_resource.as_deref() == Some("scale") {
        outcome.kind = Cow::Owned(format!("{}/scale", req.resource.resource));
    }
    let mut response = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Ok((response, outcome));
    }
    let (subject, spec) = subject_and_spec(request)?;
    let Some(mut subject) = subject else { return Ok((response, outcome)) };
    // The apiserver has defaulted spec.replicas, so its presence says nothing: what this write
    // does to the count does (hpa-replicas-conflict). Only read where an autoscaler owns the count.
    if let Subject::Workload(w) = &mut subject
        && !view.hpas_targeting(&w.id()).is_empty()
    {
        let before = if matches!(req.operation, Operation::Update) { old_replicas(request) } else { None };
        w.admitted_replicas(before);
    }
    if outcome.name.is_empty() {
        outcome.name = Cow::Owned(subject.id().name);
    }
    // The old object's spec, as its decoding for ratcheting read it (if it ran): compared with
    // the new one's below without reading `oldObject` again.
    let old_spec = std::cell::Cell::new(None);
    let old = || match (&req.operation, request.old_object.as_deref()) {
        (Operation::Update, old @ Some(_)) => {
            let (subject, spec) = subject_and_spec_of(req, old).ok()?;
            old_spec.set(spec);
            subject
        }
        _ => None,
    };
    let asks = match webhook {
        Webhook::Validate => Asks::Findings,
        Webhook::Mutate => Asks::Mutations,
    };
    // An absence is said only once it has lasted: never on a CREATE (the rest of the apply may be
    // a few milliseconds behind), on an UPDATE once the object is older than the grace.
    let update = matches!(req.operation, Operation::Update);
    let absences = match webhook {
        Webhook::Validate if update => Absences::at_admission(true, created_at(request, &subject), clock),
        _ => Absences::Withheld,
    };
    let today = Some(clock.now.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).date());
    // The server has read a namespace the view did not know yet, where it could: one still not
    // known gets the strictest action an override could give it, never the weaker default.
    let unknown_namespace = UnknownNamespace::Strictest;
    let verdict = judge(&Review {
        subject: &subject,
        old: Some(&old),
        view,
        config,
        asks,
        absences,
        today,
        progress,
        unknown_namespace,
    });
    if let Some(reason) = verdict.skipped {
        response.audit_annotations.insert("skipped".into(), reason);
        return Ok((response, outcome));
    }
    // Asked only when there is something to say, so that the usual answer costs nothing more:
    // the answer is the same either way.
    let says_something =
        !verdict.plan.is_empty() || !verdict.decided.findings.is_empty() || !verdict.decided.warnings.is_empty();
    if says_something && changes_nothing_read_given(request, spec, old_spec.get()) {
        response.audit_annotations.insert("skipped".into(), UNCHANGED.into());
        return Ok((response, outcome));
    }
    match webhook {
        Webhook::Mutate => {
            let plan = verdict.plan;
            outcome.decision = AdmissionDecision::Allowed;
            if !plan.is_empty() && config.observes() {
                // Observe-only: nothing is changed; the audit log says what enforce would add.
                let would: Vec<&str> = plan.applied().iter().map(|m| m.id).collect();
                response.audit_annotations.insert("observed-mutations".into(), would.join(","));
            } else if !plan.is_empty() {
                outcome.mutations = plan.applied();
                outcome.decision = AdmissionDecision::Patched;
                let applied: Vec<&str> = plan.applied().iter().map(|m| m.id).collect();
                response.audit_annotations.insert("mutations".into(), applied.join(","));
                response = response.with_patch(plan.patch()).map_err(|e| BadRequest(e.to_string()))?;
            }
        }
        Webhook::Validate => {
            let mut decided = verdict.decided;
            if config.observes() {
                crate::core::decide::observe(&mut decided);
            }
            // A rule not judged (an input over its limits) is said, never silently passed.
            decided.warnings.extend(verdict.not_judged.iter().map(ToString::to_string));
            outcome.findings = decided.findings.iter().map(|f| (f.rule, f.action)).collect();
            outcome.exceptions = decided
                .findings
                .iter()
                .filter_map(|f| f.notes.iter().find_map(|n| n.exception()).map(|(name, _)| (name.to_string(), f.rule)))
                .collect();
            // What the admission policies in force already said (the apiserver shows theirs): not
            // said twice. Counted above all the same; no policy matches a scale write.
            let left = match policies {
                Some(covered) if req.sub_resource.is_none() => {
                    crate::core::decide::leave_to_policies(&mut decided, covered)
                }
                _ => Vec::new(),
            };
            outcome.decision = if decided.denied() {
                AdmissionDecision::Denied
            } else if decided.with(Decision::Warn).next().is_some() || !decided.warnings.is_empty() {
                AdmissionDecision::Warned
            } else {
                AdmissionDecision::Allowed
            };
            response = respond(response, &decided);
            if !left.is_empty() {
                response.audit_annotations.insert(LEFT_TO_POLICIES.into(), left.join(","));
            }
            if !verdict.not_judged.is_empty() {
                let rules: Vec<&str> = verdict.not_judged.iter().map(|n| n.rule.id).collect();
                response.audit_annotations.insert("not-judged".into(), rules.join(","));
            }
        }
    }
    Ok((response, outcome))
}

/// One line per finding: `[rule-id] spec.path: what Fix: fix`.
/// A deny downgraded to a warning says why, so the user knows it would otherwise be refused.
/// Written into one String sized up front: a message is often most of a kilobyte, and this is
/// the only copy of it the answer needs.
pub fn line(f: &Finding) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(f.path.len() + f.what.len() + f.fix.len() + 64);
    // Writing into a String cannot fail.
    let _ = write!(out, "[{}] ", f.rule);
    let mut why = f.notes.iter().filter_map(|n| n.downgrade_reason());
    if let Some(first) = why.next() {
        out.push('(');
        out.push_str(first);
        for reason in why {
            out.push_str(", ");
            out.push_str(reason);
        }
        out.push_str(") ");
    }
    out.push_str(&f.path);
    out.push_str(": ");
    f.write_message(&mut out);
    out
}

fn respond(mut response: AdmissionResponse, decided: &Decided) -> AdmissionResponse {
    let denials: Vec<String> = decided.with(Decision::Deny).map(line).collect();
    // A finding an exception of the configuration allows is said too: the writer learns their
    // object relies on it, and until when.
    let excepted = decided
        .with(Decision::Allowed)
        .filter_map(|f| f.notes.iter().find(|n| n.exception().is_some()).map(|n| format!("[{}] {n}", f.rule)));
    let warnings: Vec<String> =
        decided.with(Decision::Warn).map(line).chain(decided.warnings.iter().cloned()).chain(excepted).collect();
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
    if !decided.findings.is_empty() {
        let mut findings = String::new();
        for f in &decided.findings {
            if !findings.is_empty() {
                findings.push(',');
            }
            findings.push_str(f.rule.id);
            findings.push('=');
            findings.push_str(f.action.as_str());
        }
        a.insert("findings".into(), findings);
    }
    let exempted: Vec<String> =
        decided.with(Decision::Allowed).map(|f| format!("{}: {}", f.rule, join(&f.notes, "; "))).collect();
    if !exempted.is_empty() {
        a.insert("exempted".into(), exempted.join(" | "));
    }
    a
}

fn join(notes: &[crate::core::finding::Note], separator: &str) -> String {
    notes.iter().map(ToString::to_string).collect::<Vec<_>>().join(separator)
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
    // Bytes are never fewer than characters: within the limit in bytes needs no count.
    if warnings.iter().map(String::len).sum::<usize>() <= WARNINGS_TOTAL_LIMIT {
        return warnings;
    }
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

/// The review to send back, as JSON, written into a buffer sized for it: `serde_json::to_vec`
/// starts at 128 bytes and doubles, copying a warned answer three times over.
pub fn review_json(response: AdmissionResponse) -> serde_json::Result<Vec<u8>> {
    // Escapes and keys aside, the answer is its texts; the patch goes out in base64.
    let texts = response.warnings.iter().flatten().map(String::len).sum::<usize>()
        + response.audit_annotations.iter().map(|(k, v)| k.len() + v.len() + 8).sum::<usize>()
        + response.result.message.len()
        + response.patch.as_ref().map_or(0, |p| p.len().div_ceil(3) * 4);
    let mut out = Vec::with_capacity(256 + texts + texts / 8);
    serde_json::to_writer(&mut out, &into_review(response))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::finding::Note;

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

    #[rstest::rstest]
    #[case::no_note(vec![], "[hpa-replicas-conflict] spec.replicas: web sets 3. Fix: remove it.")]
    #[case::an_exemption_says_nothing_here(
        vec![Note::Exempted { by: web(), reason: "r".into() }],
        "[hpa-replicas-conflict] spec.replicas: web sets 3. Fix: remove it."
    )]
    #[case::one_reason(vec![Note::PreExisting], "[hpa-replicas-conflict] (pre-existing) spec.replicas: web sets 3. Fix: remove it.")]
    #[case::reasons_in_order(
        vec![Note::ScaleWrite, Note::Exempted { by: web(), reason: "r".into() }, Note::PreExisting],
        "[hpa-replicas-conflict] (scale writes only warn, pre-existing) spec.replicas: web sets 3. Fix: remove it."
    )]
    fn a_findings_line_names_rule_downgrades_path_message_and_fix(#[case] notes: Vec<Note>, #[case] expected: &str) {
        let f = Finding {
            rule: &crate::core::rules::hpa::HPA_REPLICAS_CONFLICT,
            action: Decision::Warn,
            object: web(),
            path: "spec.replicas".into(),
            what: "web sets 3.".into(),
            fix: "remove it.".into(),
            related: vec![],
            anchor: web(),
            notes,
            from_view: false,
        };
        assert_eq!(line(&f), expected);
        // The same text as the message the other outputs show, after the rule and the reasons.
        assert!(line(&f).ends_with(&format!("spec.replicas: {}", f.message())));
    }

    fn web() -> crate::core::model::ObjectRef {
        crate::core::model::ObjectRef::new(crate::core::model::Kind::Deployment, "ns", "web")
    }

    /// `review_json` writes what `serde_json::to_vec` of the review writes, whatever the answer
    /// holds (its buffer is only sized ahead).
    #[rstest::rstest]
    #[case::plain(AdmissionResponse::invalid("x"))]
    #[case::warned({
        let mut r = AdmissionResponse::invalid("x");
        r.allowed = true;
        r.warnings = Some(warnings(3, 300, '\u{e9}'));
        r.audit_annotations.insert("findings".into(), "hpa-replicas-conflict=warn".into());
        r
    })]
    #[case::denied(AdmissionResponse::invalid("x").deny("[rule] spec: \"quoted\"\n".repeat(40)))]
    #[case::patched({
        let mut r = AdmissionResponse::invalid("x");
        r.allowed = true;
        r.with_patch(json_patch::Patch(vec![json_patch::PatchOperation::Add(json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::parse("/spec/x").unwrap(),
            value: serde_json::json!("y".repeat(500)),
        })]))
        .unwrap()
    })]
    fn the_answer_is_what_serde_json_writes(#[case] response: AdmissionResponse) {
        let expected = serde_json::to_vec(&response.clone().into_review()).unwrap();
        assert_eq!(String::from_utf8(review_json(response).unwrap()).unwrap(), String::from_utf8(expected).unwrap());
    }

    #[test]
    fn operations_are_named_as_the_apiserver_sends_them() {
        for op in [Operation::Create, Operation::Update, Operation::Delete, Operation::Connect] {
            let sent = serde_json::to_value(&op).unwrap();
            assert_eq!(sent, operation_name(&op), "{op:?}");
        }
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
    fn cut_keeps_short_strings_and_marks_cut_ones() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
    }
}

/// `mode: observe` at the webhook: what enforce denies is allowed with the same lines as warnings,
/// saying enforce would deny; what enforce patches is not patched, and the audit log names it.
#[cfg(test)]
mod observe_tests {
    use serde_json::Value;

    use super::{Webhook, review};
    use crate::core::config::{Config, Mode};
    use crate::core::view::absence::DEFAULT_GRACE;
    use crate::core::view::{AdmissionClock, Index};
    use crate::server::review::wire::parse;

    #[test]
    fn observe_refuses_nothing_and_patches_nothing() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deployment-update-preexisting.json");
        let mut body: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        // As a CREATE, the fixture's pre-existing deny is a deny.
        body["request"]["operation"] = "CREATE".into();
        body["request"]["oldObject"] = Value::Null;
        let request = parse(&serde_json::to_vec(&body).unwrap()).unwrap();
        let view = Index::new();
        let clock = AdmissionClock::current(k8s_openapi::jiff::Timestamp::now(), DEFAULT_GRACE);
        let enforce = Config::default();
        let observe = Config { mode: Mode::Observe, ..Config::default() };

        let (denied, _) = review(&request, Webhook::Validate, &view, &enforce, &clock).unwrap();
        assert!(!denied.allowed, "enforce denies the fixture");
        let refused = denied.result.message.clone();
        let (patched, _) = review(&request, Webhook::Mutate, &view, &enforce, &clock).unwrap();
        assert!(patched.patch.is_some(), "enforce patches it");

        let (warned, outcome) = review(&request, Webhook::Validate, &view, &observe, &clock).unwrap();
        assert!(warned.allowed, "{:?}", warned.result);
        assert_eq!(outcome.decision, super::AdmissionDecision::Warned);
        let warnings = warned.warnings.unwrap_or_default();
        for line in refused.lines() {
            let rule = line.split(']').next().unwrap();
            assert!(
                warnings.iter().any(|w| w.starts_with(&format!("{rule}] (observe-only: enforce would deny)"))),
                "{line} is a warning saying enforce would deny it: {warnings:?}"
            );
        }
        let (unpatched, outcome) = review(&request, Webhook::Mutate, &view, &observe, &clock).unwrap();
        assert!(unpatched.patch.is_none() && unpatched.allowed);
        assert_eq!(outcome.decision, super::AdmissionDecision::Allowed);
        assert!(outcome.mutations.is_empty());
        assert!(!unpatched.audit_annotations["observed-mutations"].is_empty(), "{:?}", unpatched.audit_annotations);
    }
}

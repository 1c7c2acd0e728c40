//! Decisions (DESIGN.md §4): config actions, namespace modes and exemptions, exemption
//! annotations, ratcheting and the scale subresource. Pure functions of the findings and context.

use std::collections::BTreeMap;

use crate::core::catalogue::Action;
use crate::core::config::policy::Date;
use crate::core::config::{Config, Exception, Matched};
use crate::core::finding::{Decision, Finding, Note};
use crate::core::model::{EXEMPT_PREFIX, Exemptions, MODE_LABEL, ObjectRef};
use crate::core::rules::Evaluation;
use crate::core::view::View;

/// What the decision needs besides the findings.
#[derive(Clone, Debug, Default)]
pub struct Context<'a> {
    /// Findings of `oldObject` on UPDATE (for ratcheting); `None` on CREATE or in `check`.
    pub old: Option<&'a [Finding]>,
    /// A `scale` subresource write: warnings only.
    pub scale: bool,
    /// Exemption annotations of the subject itself (the view may hold an older version).
    pub subject_exemptions: Exemptions,
    /// The subject and its labels, for the exceptions that select objects by label (only the
    /// subject's labels are known: the view keeps no other object's).
    pub subject_labels: Option<(ObjectRef, &'a BTreeMap<String, String>)>,
    /// Today (UTC), for the exceptions' expiry: the shells read the clock, the core does not.
    /// `None`: no exception with an expiry applies.
    pub today: Option<Date>,
    /// What the overrides do where the namespace's labels are not known.
    pub unknown_namespace: UnknownNamespace,
}

/// What the overrides (`overrides:`, by namespace labels) do for an object whose namespace's
/// labels are not known: a namespace created in the same apply as its workloads and not yet in
/// the view, or one whose Namespace is not among the files `check` reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownNamespace {
    /// None applies: the cluster-wide actions do (`check` of some files, which says so).
    #[default]
    NoOverride,
    /// The strictest action any override could give it ([`Config::strictest_action`]), said in a
    /// warning: the webhook, once the shell has tried to read the namespace, and `check
    /// --complete`. An override is then never weaker than configured.
    Strictest,
}

/// The namespace mode from its `ha-guard.io/mode` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Enforce,
    Warn,
    Off,
}

pub fn namespace_mode(labels: Option<&BTreeMap<String, String>>) -> Mode {
    mode_of_label(labels.and_then(|l| l.get(MODE_LABEL)).map(String::as_str))
}

fn mode_of_label(value: Option<&str>) -> Mode {
    match value {
        Some("warn") => Mode::Warn,
        Some("off") => Mode::Off,
        _ => Mode::Enforce,
    }
}

/// The mode of `namespace` in the view: [`namespace_mode`] of its labels, without copying them.
fn mode_of(namespace: &str, view: &dyn View) -> Mode {
    mode_of_label(view.namespace_label(namespace, MODE_LABEL).as_deref())
}

/// The decided findings, and the messages about the decision itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decided {
    pub findings: Vec<Finding>,
    /// Why nothing was evaluated (exempt namespace, mode off), if so.
    pub skipped: Option<String>,
    /// Extra warnings, e.g. an exemption annotation without a reason.
    pub warnings: Vec<String>,
}

impl Decided {
    pub fn denied(&self) -> bool {
        self.findings.iter().any(|f| f.action == Decision::Deny)
    }

    pub fn with(&self, action: Decision) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.action == action)
    }
}

/// Whether the namespace is skipped altogether (config exemption or mode off), and why.
pub fn skip_reason(namespace: &str, view: &dyn View, config: &Config) -> Option<String> {
    if let Some(entry) = config.exempting(namespace) {
        let glob = if entry == namespace { String::new() } else { format!(" (by {entry:?})") };
        return Some(format!("namespace {namespace} is exempt in the configuration: exemptNamespaces{glob}"));
    }
    if mode_of(namespace, view) == Mode::Off {
        return Some(format!("namespace {namespace} is labelled {MODE_LABEL}=off"));
    }
    None
}

pub fn decide(eval: Evaluation, namespace: &str, view: &dyn View, config: &Config, ctx: &Context) -> Decided {
    if let Some(reason) = skip_reason(namespace, view, config) {
        return Decided { skipped: Some(reason), ..Default::default() };
    }
    let mode = mode_of(namespace, view);
    let namespace_labels = config.reads_namespace_labels().then(|| view.namespace_labels(namespace)).flatten();
    let mut decided = Decided { findings: Vec::with_capacity(eval.findings.len()), ..Default::default() };
    for mut f in eval.findings {
        f.action = match configured(&f, namespace, namespace_labels.as_ref(), config, ctx, &mut decided.warnings) {
            Action::Deny => Decision::Deny,
            Action::Warn => Decision::Warn,
            Action::Off => continue,
        };
        if let Some((who, reason)) = exemption(&f, view, ctx, &mut decided.warnings) {
            f.action = Decision::Allowed;
            f.notes.push(Note::Exempted { by: who, reason });
            decided.findings.push(f);
            continue;
        }
        if let Some(e) = exception(&f, config, ctx, namespace_labels.as_ref()) {
            f.action = Decision::Allowed;
            f.notes.push(exception_note(e));
            decided.findings.push(f);
            continue;
        }
        if f.action == Decision::Deny {
            if ctx.scale {
                f.action = Decision::Warn;
                f.notes.push(Note::ScaleWrite);
            } else if config.ratchet && ctx.old.is_some_and(|old| old.iter().any(|o| same(o, &f))) {
                f.action = Decision::Warn;
                f.notes.push(Note::PreExisting);
            } else if mode == Mode::Warn {
                f.action = Decision::Warn;
                f.notes.push(Note::NamespaceWarn { namespace: namespace.to_string() });
            }
        }
        decided.findings.push(f);
    }
    decided.warnings.sort();
    decided.warnings.dedup();
    decided
}

/// An observe-only answer (config `mode: observe`, [`Config::observes`]): every deny becomes a
/// warning that says enforce would refuse it. The webhook applies it to its answer (and applies no
/// mutation); `check`, the audit and its reports keep the decided actions, so they list what
/// enforcing would refuse.
pub fn observe(decided: &mut Decided) {
    for f in decided.findings.iter_mut().filter(|f| f.action == Decision::Deny) {
        f.action = Decision::Warn;
        f.notes.push(Note::Observe);
    }
}

/// The hand-over to the admission policies (DESIGN.md §4 "In the apiserver as well": a user sees
/// each violation once): removes from the webhook's answer the findings the policies in force
/// already give — those of the rules in `covered` (whose policies are bound for this
/// configuration), found from the object alone ([`Finding::from_view`] unset), on an object no
/// exemption or exception takes out of the policy, of a kind the policy matches. Returns the rules
/// of the findings removed.
/// What needs the view, what an exemption or exception allowed, and every rule without a policy
/// stay the webhook's. Scale subresource writes, which no policy matches, are not to be given
/// here (the caller keeps them whole).
pub fn leave_to_policies(decided: &mut Decided, covered: &std::collections::BTreeSet<String>) -> Vec<&'static str> {
    let mut left: Vec<&'static str> = Vec::new();
    decided.findings.retain(|f| {
        let given = covered.contains(f.rule.id)
            && !f.from_view
            && crate::core::rules::CEL_RULES
                .iter()
                .any(|c| c.rule.id == f.rule.id && c.matches(f.object.kind.as_str()))
            && matches!(f.action, Decision::Deny | Decision::Warn)
            && !f.notes.iter().any(|n| matches!(n, Note::Exempted { .. } | Note::Exception { .. }));
        if given && !left.contains(&f.rule.id) {
            left.push(f.rule.id);
        }
        !given
    });
    left
}

/// Decides findings that are facts (what a drain would do, DESIGN.md §3 "Drains"): the
/// configuration's action applies (`off` turns the rule off, `deny` makes an audit fail), while an
/// exemption, an exempt namespace or a namespace mode hides nothing: the finding says it instead.
pub fn decide_facts(eval: Evaluation, namespace: &str, view: &dyn View, config: &Config, ctx: &Context) -> Decided {
    let mut decided = Decided { findings: Vec::with_capacity(eval.findings.len()), ..Default::default() };
    let skipped = skip_reason(namespace, view, config);
    let mode = mode_of(namespace, view);
    let namespace_labels = config.reads_namespace_labels().then(|| view.namespace_labels(namespace)).flatten();
    for mut f in eval.findings {
        f.action = match configured(&f, namespace, namespace_labels.as_ref(), config, ctx, &mut decided.warnings) {
            Action::Deny => Decision::Deny,
            Action::Warn => Decision::Warn,
            Action::Off => continue,
        };
        if let Some((who, reason)) = exemption(&f, view, ctx, &mut decided.warnings) {
            f.notes.push(Note::Fact { why: format!("{who} is exempt from {} ({reason})", f.rule) });
        }
        if let Some(e) = exception(&f, config, ctx, namespace_labels.as_ref()) {
            f.notes.push(Note::Fact { why: format!("exception {} allows {} ({})", e.name, f.rule, e.reason) });
        }
        if let Some(reason) = &skipped {
            f.notes.push(Note::Fact { why: reason.clone() });
        } else if mode == Mode::Warn {
            f.notes.push(Note::Fact { why: format!("namespace {namespace} is labelled {MODE_LABEL}=warn") });
        }
        decided.findings.push(f);
    }
    decided.warnings.sort();
    decided.warnings.dedup();
    decided
}

/// The configured action of `f` in `namespace` (labelled `namespace_labels`, when known): the
/// cluster-wide one and the overrides' ([`Config::action_in`]); where the labels are not known and
/// `ctx` asks for it, the strictest an override could give, with a warning when that is not the
/// cluster-wide action.
fn configured(
    f: &Finding,
    namespace: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
    config: &Config,
    ctx: &Context,
    warnings: &mut Vec<String>,
) -> Action {
    let natural = f.action.action();
    let unknown = namespace_labels.is_none() && !namespace.is_empty() && !config.overrides.is_empty();
    if !unknown || ctx.unknown_namespace == UnknownNamespace::NoOverride {
        return config.action_in(f.rule, natural, namespace_labels);
    }
    let strictest = config.strictest_action(f.rule, natural);
    let default = config.action(f.rule, natural);
    if strictest != default {
        warnings.push(format!(
            "[{}] the labels of namespace {namespace} are not known, so an override that selects namespaces by \
             label may apply: judged at the strictest action one gives, {}, not the cluster-wide {}",
            f.rule,
            strictest.as_str(),
            default.as_str()
        ));
    }
    strictest
}

/// Whether the decision would read the old object's findings: only a finding that denies after
/// config can be ratcheted, and never on a scale write. Most UPDATEs deny nothing, and decoding
/// and evaluating `oldObject` was a third of their cost, so shells decode it only when this says so.
pub fn needs_old_findings(eval: &Evaluation, config: &Config, scale: bool) -> bool {
    config.ratchet && !scale && eval.findings.iter().any(|f| config.may_deny(f.rule, f.action.action()))
}

/// The configuration's exception that allows `f`, if one does today.
fn exception<'c>(
    f: &Finding,
    config: &'c Config,
    ctx: &Context,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Option<&'c Exception> {
    if config.exceptions.is_empty() {
        return None;
    }
    let labels = ctx.subject_labels.as_ref().filter(|(id, _)| *id == f.object).map(|(_, l)| *l);
    let m = Matched { object: &f.object, labels, namespace_labels };
    config.exception_for(f.rule.id, &m, ctx.today)
}

fn exception_note(e: &Exception) -> Note {
    Note::Exception {
        name: e.name.clone(),
        reason: e.reason.clone(),
        owner: e.owner.clone(),
        expires: e.expires.map(|d| d.to_string()),
    }
}

/// The same violation on the old object: same rule at the same field, about the same object (a
/// workload relabelled under another blocking PDB has a new violation, not the old one).
fn same(old: &Finding, new: &Finding) -> bool {
    old.rule == new.rule && old.path == new.path && old.anchor == new.anchor
}

/// The exemption that applies to `f`: on the subject, or on any object the finding names (each
/// once, in that order). Nothing is copied unless an annotation is found: every finding asks.
fn exemption(f: &Finding, view: &dyn View, ctx: &Context, warnings: &mut Vec<String>) -> Option<(ObjectRef, String)> {
    let mut found = None;
    let mut consider = |who: &ObjectRef, exemptions: &Exemptions| {
        let Some(reason) = exemptions.get(f.rule.id) else { return };
        if reason.trim().is_empty() {
            warnings.push(format!(
                "[{}] the annotation {EXEMPT_PREFIX}{} on {who} has an empty reason and is ignored: say why the \
                 exemption is safe",
                f.rule, f.rule
            ));
        } else if found.is_none() {
            found = Some((who.clone(), reason.clone()));
        }
    };
    if ctx.scale {
        // A scale write carries no annotations and does not change them: the workload's count.
        let mut own = ctx.subject_exemptions.clone();
        for (rule, reason) in view.exemptions(&f.object) {
            own.entry(rule).or_insert(reason);
        }
        consider(&f.object, &own);
    } else {
        consider(&f.object, &ctx.subject_exemptions);
    }
    let named = f.related.iter().chain(std::iter::once(&f.anchor));
    for (i, r) in named.enumerate() {
        // The anchor comes after every related object: `related[..i]` is what came before.
        if *r != f.object && !f.related[..i.min(f.related.len())].contains(r) {
            consider(r, &view.exemptions(r));
        }
    }
    found
}

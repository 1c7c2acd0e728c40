//! Exemption annotations that exempt nothing: `exemption-unknown-rule`.

use super::context::{Ctx, Emitter};
use crate::core::catalogue::Rule;
use crate::core::model::EXEMPT_PREFIX;
use crate::declare_rule;

declare_rule!(pub EXEMPTION_UNKNOWN_RULE, "exemption-unknown-rule", Warn, "an ha-guard.io/allow-<x> annotation names no rule ID, so it exempts nothing");

pub static RULES: &[&Rule] = &[&EXEMPTION_UNKNOWN_RULE];

/// Mutations are named `inject-...`; they are switched in the configuration, not by annotation.
const MUTATION_PREFIX: &str = "inject-";

/// The rule ID `x` was most likely meant to be: the closest by edit distance (a transposition
/// counts as one edit) when within a third of its length (at least 2 edits), else the only ID
/// that contains it (`allow-colocated`). `None` when nothing is close or the guess is ambiguous.
fn nearest(x: &str, ids: &[&'static str]) -> Option<&'static str> {
    let x = x.to_ascii_lowercase().replace('_', "-");
    let (distance, best) = ids.iter().map(|id| (strsim::damerau_levenshtein(&x, id), *id)).min()?;
    if distance <= (x.len() / 3).max(2) {
        return Some(best);
    }
    let mut containing = ids.iter().filter(|id| x.len() >= 4 && id.contains(x.as_str()));
    match (containing.next(), containing.next()) {
        (Some(id), None) => Some(id),
        _ => None,
    }
}

/// Runs on every subject with metadata (workloads, PDBs, HPAs, and any kind added later):
/// `families` are the rules an annotation may name (passed in by `rules::evaluate`, so that this
/// family does not import the list it belongs to).
pub fn evaluate(ctx: &Ctx, out: &mut Emitter, families: &[&[&'static Rule]]) {
    let exemptions = ctx.subject.exemptions();
    if exemptions.is_empty() {
        return;
    }
    let ids: Vec<&'static str> = families.iter().flat_map(|f| f.iter().map(|r| r.id)).collect();
    let subject = ctx.id();
    for x in exemptions.keys() {
        if ids.contains(&x.as_str()) {
            continue;
        }
        let key = format!("{EXEMPT_PREFIX}{x}");
        let what = format!(
            "{subject}: the annotation {key} names no rule ({}), so it exempts nothing: the findings it was \
             meant to allow still deny or warn as before.",
            if x.is_empty() { "nothing follows allow-".to_string() } else { format!("{x} is not a rule ID") }
        );
        let fix = if x.starts_with(MUTATION_PREFIX) {
            format!(
                "{x} looks like a mutation: mutations are not exempted by annotation but switched in the \
                 configuration file (mutations: {{{x}: false}}); remove the annotation."
            )
        } else {
            match nearest(x, &ids) {
                Some(id) => format!(
                    "did you mean {EXEMPT_PREFIX}{id}? Rename the annotation to it (keeping the reason), or remove it; \
                     `ha-guard rules` lists the rule IDs."
                ),
                None => "no rule ID is close: `ha-guard rules` lists them; name the rule the exemption is for, or \
                         remove the annotation."
                    .to_string(),
            }
        };
        out.emit(&EXEMPTION_UNKNOWN_RULE, format!("metadata.annotations[{key}]"), what, fix);
    }
}

#[cfg(test)]
#[path = "tests/exemptions.rs"]
mod tests;

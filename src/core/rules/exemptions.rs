//! Exemption annotations that exempt nothing: `exemption-unknown-rule`.

use super::context::{Ctx, Emitter};
use crate::core::catalogue::{CelRule, HPAS, PDBS, Rule, WORKLOADS};
use crate::core::model::EXEMPT_PREFIX;
use crate::declare_rule;

declare_rule!(pub EXEMPTION_UNKNOWN_RULE, "exemption-unknown-rule", Warn, "an ha-guard.io/allow-<x> annotation names no rule ID, so it exempts nothing");

pub static RULES: &[&Rule] = &[&EXEMPTION_UNKNOWN_RULE];

/// Mutations are named `inject-...`; they are switched in the configuration, not by annotation.
const MUTATION_PREFIX: &str = "inject-";

/// The rule ID `x` was most likely meant to be, by the first of these that holds for any ID (the
/// same tiers as the CEL form, [`EXEMPTION_UNKNOWN_RULE_CEL`], computes; `x` lowercased, `_` and
/// `.` read as `-`):
/// 1. the same letters and digits (another case, `_` for `-`, a missing or extra `-`);
/// 2. one edit away: a letter missing, extra or wrong, or two neighbours swapped;
/// 3. the same words in another order;
/// 4. as many words, each the same, one edit away, or sharing its first 4 letters with the ID's
///    word (at least 4 long: `unsatisfied` for `unsatisfiable`);
/// 5. contained in the ID (at least 4 characters: `allow-colocated`).
///
/// `None` when no tier holds, or when the first that holds does for several IDs (ambiguous).
fn nearest(x: &str, ids: &[&'static str]) -> Option<&'static str> {
    let n = normalized(x);
    // What the tiers read of `n`, worked out once rather than once per rule ID: an object may carry
    // thousands of annotations.
    let letters = n.replace('-', "");
    let words: Vec<&str> = n.split('-').collect();
    let mut sorted_words = words.clone();
    sorted_words.sort_unstable();
    let tiers: [&dyn Fn(&str) -> bool; 5] = [
        &|id| id.chars().filter(|c| *c != '-').eq(letters.chars()),
        &|id| one_edit(&n, id),
        &|id| {
            let mut id_words: Vec<&str> = id.split('-').collect();
            id_words.sort_unstable();
            id_words == sorted_words
        },
        &|id| {
            let id_words: Vec<&str> = id.split('-').collect();
            words.len() == id_words.len()
                && words.iter().zip(&id_words).all(|(w, v)| w == v || one_edit(w, v) || same_stem(w, v))
        },
        &|id| n.chars().count() >= 4 && id.contains(n.as_str()),
    ];
    for tier in tiers {
        let mut found = ids.iter().filter(|id| tier(id));
        match (found.next(), found.next()) {
            (None, _) => continue,
            (Some(id), None) => return Some(id),
            (Some(_), Some(_)) => return None,
        }
    }
    None
}

/// `x` lowercased (ASCII), `_` and `.` read as `-` (the other characters an annotation name allows).
fn normalized(x: &str) -> String {
    x.to_ascii_lowercase().replace(['_', '.'], "-")
}

/// Whether `a` and `b` differ by exactly one edit: one character missing, extra or replaced, or
/// two neighbours swapped (optimal string alignment distance 1). Counted in characters, as CEL's
/// `size` and `substring` count them.
fn one_edit(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // One character of `long` dropped gives `short`: dropping it at their first difference does
    // whenever dropping it anywhere does.
    let one_dropped = |long: &[char], short: &[char]| {
        let first_difference = short.iter().zip(long).take_while(|(s, l)| s == l).count();
        long[first_difference + 1..] == short[first_difference..]
    };
    if a.len() == b.len() {
        (0..a.len()).any(|i| {
            a[..i] == b[..i]
                && (a[i + 1..] == b[i + 1..]
                    || (i + 1 < a.len() && a[i] == b[i + 1] && a[i + 1] == b[i] && a[i + 2..] == b[i + 2..]))
        }) && a != b
    } else if a.len() == b.len() + 1 {
        one_dropped(&a, &b)
    } else if b.len() == a.len() + 1 {
        one_dropped(&b, &a)
    } else {
        false
    }
}

/// Words of one stem: both at least 4 characters, the first 4 the same.
fn same_stem(w: &str, v: &str) -> bool {
    let (w, v): (Vec<char>, Vec<char>) = (w.chars().collect(), v.chars().collect());
    w.len() >= 4 && v.len() >= 4 && w[..4] == v[..4]
}

/// Indexes over an annotation key's name part, which the apiserver bounds to 63 characters
/// (`k8s.io/apimachinery/pkg/util/validation`, `IsQualifiedName`): every position of a rule ID and
/// of a word or key one edit from it (a test holds the IDs under 62 characters).
macro_rules! cel_indexes {
    () => {
        "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62]"
    };
}

/// [`one_edit`] in CEL, over `a` and `b` (comprehension variables).
macro_rules! cel_one_edit {
    ($a:literal, $b:literal) => {
        concat!(
            "(size(",
            $a,
            ") == size(",
            $b,
            ") ? ",
            $a,
            " != ",
            $b,
            " && ",
            cel_indexes!(),
            ".exists(i, i < size(",
            $a,
            ") && ",
            $a,
            ".substring(0, i) == ",
            $b,
            ".substring(0, i) && (",
            $a,
            ".substring(i + 1) == ",
            $b,
            ".substring(i + 1) || (i + 1 < size(",
            $a,
            ") && ",
            $a,
            ".charAt(i) == ",
            $b,
            ".charAt(i + 1) && ",
            $a,
            ".charAt(i + 1) == ",
            $b,
            ".charAt(i) && ",
            $a,
            ".substring(i + 2) == ",
            $b,
            ".substring(i + 2)))) : size(",
            $a,
            ") == size(",
            $b,
            ") + 1 ? ",
            cel_indexes!(),
            ".exists(i, i < size(",
            $a,
            ") && ",
            $a,
            ".substring(0, i) + ",
            $a,
            ".substring(i + 1) == ",
            $b,
            ") : size(",
            $b,
            ") == size(",
            $a,
            ") + 1 ? ",
            cel_indexes!(),
            ".exists(i, i < size(",
            $b,
            ") && ",
            $b,
            ".substring(0, i) + ",
            $b,
            ".substring(i + 1) == ",
            $a,
            ") : false)"
        )
    };
}

/// [`nearest`] in CEL: the IDs of the first tier that holds for any (`n`: the normalized name).
macro_rules! cel_candidates {
    () => {
        concat!(
            "[variables.ruleIds.filter(id, id.replace('-', '') == n.replace('-', ''))].map(t1, size(t1) > 0 ? t1 : ",
            "[variables.ruleIds.filter(id, ",
            cel_one_edit!("n", "id"),
            ")].map(t2, size(t2) > 0 ? t2 : ",
            "[variables.ruleIds.filter(id, n.split('-').sort() == id.split('-').sort())].map(t3, size(t3) > 0 ? t3 : ",
            "[variables.ruleIds.filter(id, [n.split('-')].exists(ws, [id.split('-')].exists(vs, size(ws) == size(vs) \
             && ws.all(j, w, [vs[j]].exists(v, w == v || ",
            cel_one_edit!("w", "v"),
            " || (size(w) >= 4 && size(v) >= 4 && w.substring(0, 4) == v.substring(0, 4)))))))].map(t4, size(t4) > 0 \
             ? t4 : variables.ruleIds.filter(id, size(n) >= 4 && id.contains(n)))[0])[0])[0])[0]"
        )
    };
}

/// `exemption-unknown-rule` in CEL: the whole rule on the kinds both judge (a Service's, a
/// ScaledObject's or an APIService's annotations stay the webhook's: no policy matches them). The
/// rule IDs are `variables.ruleIds`, which the generator gives from the registry.
pub static EXEMPTION_UNKNOWN_RULE_CEL: CelRule = CelRule {
    rule: &EXEMPTION_UNKNOWN_RULE,
    resources: &[WORKLOADS[0], WORKLOADS[1], PDBS[0], HPAS[0]],
    findings: concat!(
        "o.metadata.?annotations.orValue({}).filter(k, k.startsWith('ha-guard.io/allow-') && !(k.substring(18) in \
         variables.ruleIds)).sort().map(k, [k.substring(18)].map(x, {'path': 'metadata.annotations[' + k + ']', \
         'action': 'warn', 'what': variables.id + ': the annotation ' + k + ' names no rule (' + (x == '' ? 'nothing \
         follows allow-' : x + ' is not a rule ID') + '), so it exempts nothing: the findings it was meant to allow \
         still deny or warn as before.', 'fix': x.startsWith('inject-') ? x + ' looks like a mutation: mutations are \
         not exempted by annotation but switched in the configuration file (mutations: {' + x + ': false}); remove \
         the annotation.' : [[x.lowerAscii().replace('_', '-').replace('.', '-')].map(n, ",
        cel_candidates!(),
        ")[0]].map(s, size(s) == 1 ? 'did you mean ha-guard.io/allow-' + s[0] + '? Rename the annotation to it \
         (keeping the reason), or remove it; `ha-guard rules` lists the rule IDs.' : 'no rule ID is close: \
         `ha-guard rules` lists them; name the rule the exemption is for, or remove the annotation.')[0]})[0])"
    ),
    partial: None,
};

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

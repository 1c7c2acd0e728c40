//! Every rule and mutation, and what is derived from the list: the catalogue a configuration is
//! checked against, the pages `explain` prints, the `ha-guard rules` listing, the README's
//! rules table and docs/gitops.md's Argo CD `ignoreDifferences` block (tests hold README.md,
//! docs/gitops.md and each page's default line to them).

use std::fmt::Write as _;

use crate::core::catalogue::{Catalogue, CelMutation, CelRule, Mutation, Rule};
use crate::core::config::{Config, ConfigError};
use crate::core::{mutations, rules};

/// The rules (family by family, in catalogue order) and the mutations.
pub static CATALOGUE: Catalogue = Catalogue { rules: rules::FAMILIES, mutations: mutations::MUTATIONS };

/// Every rule, in catalogue order.
pub fn rules() -> impl Iterator<Item = &'static Rule> {
    CATALOGUE.rules()
}

pub fn rule(id: &str) -> Option<&'static Rule> {
    CATALOGUE.rule(id)
}

pub fn mutations() -> &'static [&'static Mutation] {
    CATALOGUE.mutations
}

pub fn mutation(id: &str) -> Option<&'static Mutation> {
    CATALOGUE.mutation(id)
}

/// The CEL form of a rule, if it has one (DESIGN.md §4 "In the apiserver as well").
pub fn cel_rule(id: &str) -> Option<&'static CelRule> {
    rules::CEL_RULES.iter().copied().find(|c| c.rule.id == id)
}

/// The CEL form of a mutation, if it has one.
pub fn cel_mutation(id: &str) -> Option<&'static CelMutation> {
    mutations::CEL_MUTATIONS.iter().copied().find(|c| c.mutation.id == id)
}

/// What the `POLICY` column of `ha-guard rules` says of a rule or mutation: `yes` (the apiserver
/// enforces it too, from a generated admission policy), `part` (only part of the rule: see its
/// page), `-` (the webhook alone).
pub fn policy_column(id: &str) -> &'static str {
    match (cel_rule(id), cel_mutation(id)) {
        (Some(r), _) if r.partial.is_some() => "part",
        (Some(_), _) | (_, Some(_)) => "yes",
        _ => "-",
    }
}

/// The documentation page of a rule or mutation.
pub fn doc(id: &str) -> Option<&'static str> {
    rule(id).map(|r| r.doc).or_else(|| mutation(id).map(|m| m.doc))
}

/// The known ID nearest to `id`, for "did you mean": among the rules, the mutations, or both. An
/// ID that `id` begins (or that begins `id`) comes first, the nearest of those by edit distance:
/// `pdb-blocks` is the start of `pdb-blocks-eviction`, which edit distance alone puts behind
/// `pdb-overlap`. Otherwise the nearest by edit distance.
pub fn nearest(id: &str, rules_too: bool, mutations_too: bool) -> &'static str {
    let rule_ids = rules().map(|r| r.id).filter(|_| rules_too);
    let mutation_ids = mutations().iter().map(|m| m.id).filter(|_| mutations_too);
    let ids: Vec<&'static str> = rule_ids.chain(mutation_ids).collect();
    let distance = |known: &&&'static str| strsim::levenshtein(id, known);
    let prefixed = ids.iter().filter(|known| !id.is_empty() && (known.starts_with(id) || id.starts_with(**known)));
    prefixed.min_by_key(distance).or_else(|| ids.iter().min_by_key(distance)).copied().unwrap_or_default()
}

/// Parses a configuration file's text against every rule and mutation; `file` names it in errors.
pub fn parse_config(text: &str, file: &str) -> Result<Config, ConfigError> {
    Config::parse(text, file, &CATALOGUE)
}

/// What `ha-guard rules` prints.
pub fn listing() -> String {
    let mut out = format!("{:<31} {:<44} {:<6} {}\n", "RULE", "DEFAULT", "POLICY", "WHAT");
    for r in rules() {
        let _ = writeln!(out, "{:<31} {:<44} {:<6} {}", r.id, r.default_text, policy_column(r.id), r.summary);
    }
    out.push_str("\nMUTATION                              DEFAULT  POLICY WHAT\n");
    for m in mutations() {
        let on = if m.default_on { "on" } else { "off" };
        let _ = writeln!(out, "{:<37} {:<8} {:<6} {}", m.id, on, policy_column(m.id), m.summary);
    }
    out.push_str(POLICY_FOOTNOTE);
    out
}

/// What the listings say under the tables about the `POLICY` column.
const POLICY_FOOTNOTE: &str = "\nPOLICY: yes = also enforced by the apiserver from a generated admission policy (ha-guard \
                               policies), part = only part of the rule, - = the webhook alone.\n";

/// The README's tables of rules and mutations (between its `<!-- rules -->` markers).
pub fn readme_tables() -> String {
    let mut out = String::from("| ID | default | judged | fires when |\n|---|---|---|---|\n");
    for r in rules() {
        let _ = writeln!(
            out,
            "| [`{}`](docs/rules/{}.md) | {} | {} | {} |",
            r.id,
            r.id,
            r.default_text,
            r.judged.label(),
            r.summary
        );
    }
    out.push_str("\n| Mutation | default | what it does |\n|---|---|---|\n");
    for m in mutations() {
        let on = if m.default_on { "on" } else { "off" };
        let _ = writeln!(out, "| [`{}`](docs/rules/{}.md) | {on} | {} |", m.id, m.id, m.summary);
    }
    out
}

/// The marker lines around docs/gitops.md's Argo CD block (a test holds the block to
/// [`argocd_ignore_differences`]).
pub const ARGOCD_MARKERS: (&str, &str) =
    ("<!-- argocd: generated from the registry; a test checks it -->\n", "<!-- /argocd -->");

/// What `ha-guard rules --argocd-ignore-differences` prints, and docs/gitops.md's Argo CD block: an
/// Application's `spec.ignoreDifferences` for what every mutation adds, one entry per mutation and
/// kind, in catalogue order, from each mutation's [`IgnoreDifference`](crate::core::catalogue::IgnoreDifference)s.
pub fn argocd_ignore_differences() -> String {
    let entries = mutations().iter().map(|m| {
        (*m, if m.default_on { "on by default" } else { "off by default: for a configuration that turns it on" })
    });
    ignore_differences_block("# (ha-guard rules --argocd-ignore-differences)\n", entries)
}

/// [`argocd_ignore_differences`] for one configuration (`rules --argocd-ignore-differences
/// --config FILE`): only the mutations it turns on, and none in `mode: observe`, which patches
/// nothing. `file` names the configuration in the header.
pub fn argocd_ignore_differences_for(config: &Config, file: &str) -> String {
    let header = format!("# (ha-guard rules --argocd-ignore-differences --config {file})\n");
    if config.observes() {
        return format!(
            "{IGNORE_DIFFERENCES_TITLE}{header}# mode: observe: ha-guard patches nothing, so nothing is left out\n\
             spec:\n  ignoreDifferences: []\n"
        );
    }
    let on = mutations().iter().filter(|m| config.mutation_on(m)).map(|m| (*m, "on in this configuration"));
    ignore_differences_block(&header, on)
}

const IGNORE_DIFFERENCES_TITLE: &str = "# Argo CD: what ha-guard's mutations add, left out of an Application's diff\n";

fn ignore_differences_block<'a>(header: &str, entries: impl Iterator<Item = (&'a Mutation, &'a str)>) -> String {
    let mut out = format!("{IGNORE_DIFFERENCES_TITLE}{header}spec:\n  ignoreDifferences:\n");
    let mut any = false;
    for (m, state) in entries {
        any = true;
        let _ = writeln!(out, "    # {} ({state})", m.id);
        for entry in m.ignored {
            let _ = writeln!(out, "    - group: {}\n      kind: {}\n      jqPathExpressions:", entry.group, entry.kind);
            for jq in entry.jq {
                let _ = writeln!(out, "        - '{}'", jq.replace('\'', "''"));
            }
        }
    }
    if !any {
        out = out.replace("  ignoreDifferences:\n", "  ignoreDifferences: []  # every mutation is off\n");
    }
    out
}

/// What `ha-guard rules --config FILE` prints: [`listing`] with the action each rule has in the
/// configuration (`deny`, `warn`, `off`, or `default`; `+overrides` when a namespace override
/// names it) and each mutation on or off there.
pub fn listing_for(config: &Config) -> String {
    let mut out = format!("{:<31} {:<44} {:<20} {:<6} {}\n", "RULE", "DEFAULT", "CONFIGURED", "POLICY", "WHAT");
    for r in rules() {
        let mut configured = config.rules.get(r.id).map_or("default", |a| a.as_str()).to_string();
        if config.overrides.iter().any(|o| o.rules.contains_key(r.id)) {
            configured.push_str(" +overrides");
        }
        if config.observes() && configured != "off" {
            configured.push_str(" (observe)");
        }
        let policy = if configured == "off" { "-" } else { policy_column(r.id) };
        let _ = writeln!(out, "{:<31} {:<44} {:<20} {:<6} {}", r.id, r.default_text, configured, policy, r.summary);
    }
    out.push_str("\nMUTATION                              DEFAULT  CONFIGURED     POLICY WHAT\n");
    for m in mutations() {
        let configured = match (config.mutation_on(m), config.observes()) {
            (true, false) => "on",
            (true, true) => "off (observe)",
            (false, _) => "off",
        };
        let policy = if configured == "on" { policy_column(m.id) } else { "-" };
        let _ = writeln!(
            out,
            "{:<37} {:<8} {:<14} {:<6} {}",
            m.id,
            if m.default_on { "on" } else { "off" },
            configured,
            policy,
            m.summary
        );
    }
    out.push_str(POLICY_FOOTNOTE);
    out
}

/// The line every page carries under its title, saying the default.
pub fn default_line(id: &str) -> Option<String> {
    rule(id)
        .map(|r| format!("Default: **{}**", r.default_text))
        .or_else(|| mutation(id).map(|m| format!("Default: **{}**", if m.default_on { "on" } else { "off" })))
}

/// The line every rule's page carries, saying where the rule is judged.
pub fn judged_line(id: &str) -> Option<String> {
    rule(id).map(|r| format!("Judged: {}", r.judged.text()))
}

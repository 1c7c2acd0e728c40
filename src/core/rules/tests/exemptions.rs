//! exemption-unknown-rule.

use super::{EXEMPTION_UNKNOWN_RULE_CEL, nearest, one_edit};
use crate::core::config::Config;
use crate::core::finding::{Decision, Finding, Note};
use crate::core::model::{Kind, ObjectRef};
use crate::core::testing::*;
use rstest::rstest;

const RULE: &str = "exemption-unknown-rule";

/// `yaml` with `metadata.annotations` set to `annotations` (a YAML flow mapping), after its name line.
fn annotated(yaml: &str, name: &str, annotations: &str) -> String {
    edit(yaml, &format!("  name: {name}\n"), &format!("  name: {name}\n  annotations: {annotations}\n"))
}

fn web(annotations: &str) -> String {
    annotated(&deployment("web", "replicas: 2", ""), "web", annotations)
}

fn unknown(f: &[Finding]) -> Vec<&Finding> {
    of_rule(f, RULE)
}

#[test]
fn a_misspelt_rule_id_warns_and_suggests_the_nearest() {
    let f = findings(&web("{ha-guard.io/allow-replica-colocated: one node pool}"), "", false);
    let u = unknown(&f);
    assert_eq!(u.len(), 1, "{f:#?}");
    let u = u[0];
    assert_eq!(u.action, Decision::Warn);
    assert_eq!(u.path, "metadata.annotations[ha-guard.io/allow-replica-colocated]");
    assert_eq!(u.object, ObjectRef::new(Kind::Deployment, "default", "web"));
    assert!(u.related.is_empty());
    let msg = u.message();
    for part in [
        "Deployment default/web: the annotation ha-guard.io/allow-replica-colocated names no rule",
        "replica-colocated is not a rule ID",
        "exempts nothing",
        "Fix: did you mean ha-guard.io/allow-replicas-colocated?",
        "keeping the reason",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    // And it exempts nothing: the finding it was meant for is still there.
    assert_eq!(of_rule(&f, "replicas-colocated").len(), 1, "{f:#?}");
}

#[rstest]
#[case::one_letter_missing("pdb-blocks-evictio", "pdb-blocks-eviction")]
#[case::plural("pdb-blocks-evictions", "pdb-blocks-eviction")]
#[case::transposed("termination-grace-zreo", "termination-grace-zero")]
#[case::other_ending("spread-unsatisfied", "spread-unsatisfiable")]
#[case::hyphen_missing("hostnetwork-colocation", "host-network-colocation")]
#[case::case_and_underscores("Replicas_Colocated", "replicas-colocated")]
#[case::a_part_of_one_id("colocated", "replicas-colocated")]
#[case::new_rule("toleration-wildcards", "toleration-wildcard")]
#[case::dots_and_case("PDB.Blocks.Eviction", "pdb-blocks-eviction")]
#[case::words_reordered("colocated-replicas", "replicas-colocated")]
#[case::one_edit_per_word("hpa-replicas-bound", "hpa-replica-bounds")]
#[case::another_form_of_a_word("spread-selector-missed", "spread-selector-missing")]
#[case::four_letters_of_a_word("hpa-repl-bounds", "hpa-replica-bounds")]
fn the_suggestion(#[case] x: &str, #[case] suggested: &str) {
    let f = findings(&web(&format!("{{ha-guard.io/allow-{x}: why}}")), "", false);
    let u = unknown(&f);
    assert_eq!(u.len(), 1, "{f:#?}");
    assert!(u[0].fix.starts_with(&format!("did you mean ha-guard.io/allow-{suggested}?")), "{x}: {}", u[0].fix);
}

#[rstest]
#[case::far_from_everything("everything-is-fine")]
#[case::part_of_several_ids("pdb")]
#[case::part_of_several_longer("spread-selector")]
#[case::part_of_two("spread-selector-mis")]
// Boundaries: two edits in one word; a word sharing only 3 letters; 3 characters contained.
#[case::two_edits_in_a_word("pdb-msing")]
#[case::two_edits_and_one("pdb-blok-evictions")]
#[case::three_letters_of_a_word("hpa-rep-bounds")]
#[case::three_characters("dis")]
fn no_suggestion_when_nothing_is_close_or_several_are(#[case] x: &str) {
    let f = findings(&web(&format!("{{ha-guard.io/allow-{x}: why}}")), "", false);
    let u = unknown(&f);
    assert_eq!(u.len(), 1, "{f:#?}");
    assert!(u[0].fix.starts_with("no rule ID is close: `ha-guard rules` lists them"), "{x}: {}", u[0].fix);
}

#[test]
fn a_mutation_is_not_exempted_by_annotation() {
    let f = findings(&web("{ha-guard.io/allow-inject-default-spread: no thanks}"), "", false);
    let u = unknown(&f);
    assert_eq!(u.len(), 1, "{f:#?}");
    assert!(u[0].what.contains("inject-default-spread is not a rule ID"), "{}", u[0].what);
    assert!(u[0].fix.contains("mutations: {inject-default-spread: false}"), "{}", u[0].fix);
}

#[test]
fn nothing_after_the_prefix() {
    let f = findings(&web("{ha-guard.io/allow-: why}"), "", false);
    let u = unknown(&f);
    assert_eq!(u.len(), 1, "{f:#?}");
    assert_eq!(u[0].path, "metadata.annotations[ha-guard.io/allow-]");
    assert!(u[0].what.contains("names no rule (nothing follows allow-)"), "{}", u[0].what);
}

#[rstest]
#[case::a_rule_id("{ha-guard.io/allow-replicas-colocated: one node pool}")]
#[case::its_own_id("{ha-guard.io/allow-exemption-unknown-rule: annotations for a newer ha-guard}")]
#[case::the_mode_label_as_annotation("{ha-guard.io/mode: warn}")]
#[case::another_domain("{example.com/allow-replica-colocated: x}")]
#[case::no_prefix("{allow-replica-colocated: x}")]
#[case::empty_reason_of_a_known_rule("{ha-guard.io/allow-pdb-missing: ''}")]
fn does_not_fire(#[case] annotations: &str) {
    let f = findings(&web(annotations), "", false);
    assert!(unknown(&f).is_empty(), "{annotations}: {f:#?}");
}

#[test]
fn one_finding_per_unknown_annotation() {
    let f = findings(
        &web(
            "{ha-guard.io/allow-replica-colocated: a, ha-guard.io/allow-pdb-missing: b, ha-guard.io/allow-pdb-mising: c}",
        ),
        "",
        false,
    );
    let paths: Vec<_> = unknown(&f).iter().map(|u| u.path.clone()).collect();
    assert_eq!(
        paths,
        [
            "metadata.annotations[ha-guard.io/allow-pdb-mising]",
            "metadata.annotations[ha-guard.io/allow-replica-colocated]"
        ]
    );
}

#[test]
fn on_every_kind_ha_guard_judges() {
    let sts = annotated(&workload("StatefulSet", "db", "replicas: 1", ""), "db", "{ha-guard.io/allow-pdb-mising: x}");
    let pdb = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\n  annotations: \
               {ha-guard.io/allow-pdb-blocks-evictions: x}\nspec:\n  maxUnavailable: 1\n  selector: {matchLabels: {app: web}}\n";
    let hpa_yaml = annotated(&hpa("web", "web", Some(2), 4), "web", "{ha-guard.io/allow-hpa-replicas-bound: x}");
    for (yaml, kind, suggested) in [
        (sts, Kind::StatefulSet, "pdb-missing"),
        (pdb.to_string(), Kind::PodDisruptionBudget, "pdb-blocks-eviction"),
        (hpa_yaml, Kind::HorizontalPodAutoscaler, "hpa-replica-bounds"),
    ] {
        let f = findings(&yaml, "", false);
        let u = unknown(&f);
        assert_eq!(u.len(), 1, "{kind}: {f:#?}");
        assert_eq!(u[0].object.kind, kind);
        assert!(u[0].fix.contains(&format!("ha-guard.io/allow-{suggested}?")), "{kind}: {}", u[0].fix);
    }
}

#[test]
fn only_the_subjects_own_annotations() {
    // The Deployment in the view has the typo; the HPA written now does not: reported on the
    // Deployment's own write, not on every object that names it.
    let f = findings(&hpa("web", "web", Some(2), 4), &web("{ha-guard.io/allow-replica-colocated: x}"), true);
    assert!(unknown(&f).is_empty(), "{f:#?}");
}

#[test]
fn it_is_exempted_like_any_rule() {
    // An annotation for a rule of a newer ha-guard, kept on purpose while versions differ.
    let yaml = web("{ha-guard.io/allow-some-future-rule: rolled out before ha-guard 2.0, \
          ha-guard.io/allow-exemption-unknown-rule: 'ha-guard 2.0 rolls out next week'}");
    let d = decided(&yaml, "", false, &Config::default());
    let u: Vec<_> = d.findings.iter().filter(|f| f.rule == RULE).collect();
    assert_eq!(u.len(), 1, "{:#?}", d.findings);
    assert_eq!(u[0].action, Decision::Allowed);
    assert!(matches!(&u[0].notes[..], [Note::Exempted { reason, .. }] if reason == "ha-guard 2.0 rolls out next week"));
    // Without that annotation, a warning.
    let d = decided(&web("{ha-guard.io/allow-some-future-rule: x}"), "", false, &Config::default());
    assert_eq!(d.findings.iter().find(|f| f.rule == RULE).map(|f| f.action), Some(Decision::Warn));
}

#[test]
fn the_nearest_id_tiers() {
    let ids = ["pdb-blocks-eviction", "pdb-missing", "replicas-colocated", "drain-blocked", "drain-refused"];
    // The first tier that holds decides: same letters before one edit, one edit before words.
    assert_eq!(nearest("pdbmissing", &ids), Some("pdb-missing"));
    assert_eq!(nearest("pdb-missin", &ids), Some("pdb-missing"));
    assert_eq!(nearest("eviction-blocks-pdb", &ids), Some("pdb-blocks-eviction"));
    // Several in the deciding tier: none.
    assert_eq!(nearest("drain", &ids), None);
    assert_eq!(nearest("drain-refuse", &["drain-refused", "drain-refuser"]), None);
    assert_eq!(nearest("drain-refuse", &["drain-refused", "drain-blocked"]), Some("drain-refused"));
    assert_eq!(nearest("", &ids), None);
    // An exact ID is not "one edit" from itself.
    assert!(!one_edit("pdb-missing", "pdb-missing"));
    assert!(one_edit("ab", "ba") && one_edit("abc", "abd") && one_edit("abc", "ab") && one_edit("ab", "abc"));
    assert!(!one_edit("abc", "cba") && !one_edit("abcd", "ab"));
}

/// The CEL form iterates indexes 0..=62 (an annotation name part is at most 63 characters): every
/// rule ID must be shorter, so that every position of an ID and of a name one edit from it is
/// among them.
#[test]
fn the_cel_indexes_cover_every_rule_id() {
    let indexes: Vec<String> = (0..63).map(|i| i.to_string()).collect();
    assert!(EXEMPTION_UNKNOWN_RULE_CEL.findings.contains(&format!("[{}]", indexes.join(", "))));
    for r in crate::core::rules::all() {
        assert!(r.id.len() < 62, "{} is too long for the CEL form's indexes", r.id);
    }
}

/// `one_edit` against its definition, over every pair of strings of up to 5 characters from
/// three letters: one character dropped anywhere, replaced anywhere, or two neighbours swapped.
#[test]
fn one_edit_is_one_drop_replacement_or_swap() {
    fn all(len: usize) -> Vec<String> {
        (0..3usize.pow(len as u32))
            .map(|mut i| {
                (0..len)
                    .map(|_| {
                        let c = ['a', 'b', '-'][i % 3];
                        i /= 3;
                        c
                    })
                    .collect()
            })
            .collect()
    }
    fn by_definition(a: &str, b: &str) -> bool {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let dropped = |s: &[char], i: usize| -> Vec<char> { s[..i].iter().chain(&s[i + 1..]).copied().collect() };
        let replaced = a.len() == b.len() && a.iter().zip(&b).filter(|(x, y)| x != y).count() == 1;
        let swapped = a.len() == b.len()
            && (0..a.len().saturating_sub(1)).any(|i| {
                let mut s = a.clone();
                s.swap(i, i + 1);
                s == b && a != b
            });
        let drop_a = a.len() == b.len() + 1 && (0..a.len()).any(|i| dropped(&a, i) == b);
        let drop_b = b.len() == a.len() + 1 && (0..b.len()).any(|i| dropped(&b, i) == a);
        replaced || swapped || drop_a || drop_b
    }
    let strings: Vec<String> = (0..=5).flat_map(all).collect();
    for a in &strings {
        for b in &strings {
            assert_eq!(super::one_edit(a, b), by_definition(a, b), "{a:?} {b:?}");
        }
    }
}

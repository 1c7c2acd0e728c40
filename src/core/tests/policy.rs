//! A platform team's policy (DESIGN.md §5, issue 39): the configuration's exceptions (each match
//! field, globs, label selectors, namespace selectors, expiry on the boundary day), overrides by
//! namespace labels and their precedence with the cluster-wide actions, the namespace mode label
//! and exemption annotations, exempt namespace globs, and every error message of the keys.

use crate::core::config::Config;
use crate::core::config::policy::Date;
use crate::core::finding::{Decision, Note};
use crate::core::judge::{Asks, Review, Verdict, judge};
use crate::core::registry;
use crate::core::testing::{subject, view};
use crate::core::view::Absences;

/// Deployment `web` in `namespace`: 3 replicas, strategy Recreate (`recreate-multi-replica`),
/// labelled `app: web` (and `extra`).
fn web(namespace: &str, extra: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {namespace}
  labels: {{app: web{extra}}}
spec:
  replicas: 3
  strategy: {{type: Recreate}}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers: [{{name: c, image: nginx:1.27}}]
"
    )
}

fn namespace(name: &str, labels: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\n")
}

fn config(text: &str) -> Config {
    registry::parse_config(text, "policy.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn error(text: &str) -> String {
    registry::parse_config(text, "policy.yaml").expect_err("an error").to_string()
}

fn day(text: &str) -> Option<Date> {
    Some(text.parse().unwrap())
}

/// The verdict on `subject_yaml` in a view of `view_yaml` (complete), on `today`.
fn judged(subject_yaml: &str, view_yaml: &str, config: &Config, today: Option<Date>) -> Verdict {
    let s = subject(subject_yaml);
    let v = view(view_yaml, true);
    judge(&Review {
        subject: &s,
        old: None,
        view: &v,
        config,
        asks: Asks::Findings,
        absences: Absences::Judged,
        today,
        progress: None,
        unknown_namespace: Default::default(),
    })
}

/// The decision on `recreate-multi-replica`, and the exception that allowed it, if one did.
fn recreate(v: &Verdict) -> (Decision, Option<String>) {
    let f = v.decided.findings.iter().find(|f| f.rule == "recreate-multi-replica").expect("recreate-multi-replica");
    (f.action, f.notes.iter().find_map(|n| n.exception()).map(|(name, _)| name.to_string()))
}

const DENY: &str = "rules:\n  recreate-multi-replica: deny\n";

/// A configuration denying `recreate-multi-replica` with one exception for it. A match that names
/// no namespaces says `clusterWide: true`, as the configuration asks.
fn with_exception(matching: &str, extra: &str) -> Config {
    let scoped = matching.contains("namespaces:") || matching.contains("namespaceSelector:");
    let wide = if scoped { "" } else { "    clusterWide: true\n" };
    config(&format!(
        "{DENY}exceptions:\n  - name: web-recreate\n    rules: [recreate-multi-replica]\n    match:\n{matching}    reason: \"one writer at a time: the database migration needs it\"\n{wide}{extra}"
    ))
}

#[test]
fn an_exception_allows_the_findings_it_matches_and_names_itself() {
    let c = with_exception(
        "      kinds: [Deployment]\n      namespaces: [\"shop-*\"]\n      names: [web]\n      selector: {matchLabels: {app: web}}\n",
        "    owner: platform@example.com\n",
    );
    let v = judged(&web("shop-eu", ""), "", &c, day("2026-12-05"));
    assert_eq!(recreate(&v), (Decision::Allowed, Some("web-recreate".into())));
    let f = v.decided.findings.iter().find(|f| f.rule == "recreate-multi-replica").unwrap();
    assert_eq!(
        f.notes.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "allowed by exception web-recreate: one writer at a time: the database migration needs it (owner platform@example.com)"
        ]
    );
    assert!(
        v.decided.findings.iter().filter(|f| f.rule != "recreate-multi-replica").all(|f| f.action != Decision::Allowed),
        "only the rules it names"
    );
}

#[test]
fn every_match_field_must_match() {
    let today = day("2026-12-05");
    for (matching, subject, why) in [
        ("      kinds: [StatefulSet]\n", web("shop", ""), "another kind"),
        ("      namespaces: [\"shop-*\"]\n", web("shop", ""), "shop-* needs the dash"),
        ("      namespaces: [\"shop-*\"]\n", web("myshop-eu", ""), "a glob is anchored at both ends"),
        ("      names: [api, \"web-*\"]\n", web("shop", ""), "no name matches"),
        ("      selector: {matchLabels: {app: api}}\n", web("shop", ""), "other labels"),
        ("      selector: {matchExpressions: [{key: tier, operator: Exists}]}\n", web("shop", ""), "no tier label"),
        ("      kinds: [Deployment]\n      names: [api]\n", web("shop", ""), "one field of two"),
    ] {
        let v = judged(&subject, "", &with_exception(matching, ""), today);
        assert_eq!(recreate(&v), (Decision::Deny, None), "{why}");
    }
    for (matching, subject, why) in [
        ("      kinds: [Deployment]\n", web("shop", ""), "the kind"),
        ("      namespaces: [other, \"shop*\"]\n", web("shop", ""), "one glob of the list"),
        ("      namespaces: [shop]\n      names: [\"*\"]\n", web("shop", ""), "any name"),
        (
            "      selector: {matchExpressions: [{key: tier, operator: In, values: [db]}]}\n",
            web("shop", ", tier: db"),
            "an expression",
        ),
    ] {
        let v = judged(&subject, "", &with_exception(matching, ""), today);
        assert_eq!(recreate(&v).0, Decision::Allowed, "{why}");
    }
}

#[test]
fn a_namespace_selector_reads_the_namespaces_labels_and_unknown_labels_match_nothing() {
    let c = with_exception("      namespaceSelector: {matchLabels: {vendor: tigera}}\n", "");
    let today = day("2026-12-05");
    let tigera = namespace("tigera-operator", "vendor: tigera");
    assert_eq!(recreate(&judged(&web("tigera-operator", ""), &tigera, &c, today)).0, Decision::Allowed);
    let other = namespace("tigera-operator", "vendor: other");
    assert_eq!(recreate(&judged(&web("tigera-operator", ""), &other, &c, today)).0, Decision::Deny);
    assert_eq!(recreate(&judged(&web("tigera-operator", ""), "", &c, today)).0, Decision::Deny, "no Namespace known");
}

#[test]
fn an_exception_no_longer_applies_from_its_expiry_day_on() {
    let c = with_exception("      names: [web]\n", "    expires: 2026-12-05\n");
    assert_eq!(c.exceptions[0].expires, day("2026-12-05"));
    assert_eq!(c.exceptions[0].expiry_timestamp(), Some(1_796_428_800), "2026-12-05T00:00:00Z");
    let on = |today| recreate(&judged(&web("shop", ""), "", &c, today)).0;
    assert_eq!(on(day("2026-12-04")), Decision::Allowed, "the day before");
    assert_eq!(on(day("2026-12-05")), Decision::Deny, "the day itself");
    assert_eq!(on(day("2027-01-01")), Decision::Deny);
    assert_eq!(on(None), Decision::Deny, "no day known: an expiring exception does not apply");
    let forever = with_exception("      names: [web]\n", "");
    assert_eq!(recreate(&judged(&web("shop", ""), "", &forever, None)).0, Decision::Allowed);
}

#[test]
fn an_exemption_annotation_comes_before_an_exception() {
    let c = with_exception("      names: [web]\n", "");
    let annotated = web("shop", "").replace(
        "  labels: {app: web}\n",
        "  labels: {app: web}\n  annotations:\n    ha-guard.io/allow-recreate-multi-replica: \"by the team\"\n",
    );
    let v = judged(&annotated, "", &c, day("2026-12-05"));
    let f = v.decided.findings.iter().find(|f| f.rule == "recreate-multi-replica").unwrap();
    assert_eq!(f.action, Decision::Allowed);
    assert!(matches!(&f.notes[..], [Note::Exempted { .. }]), "{:?}", f.notes);
}

#[test]
fn overrides_apply_in_file_order_after_the_cluster_wide_actions() {
    let c = config(concat!(
        "rules:\n  recreate-multi-replica: warn\n  pdb-missing: off\noverrides:\n",
        "  - namespaceSelector: {matchLabels: {tier: prod}}\n    rules: {recreate-multi-replica: deny, pdb-missing: deny}\n",
        "  - namespaceSelector: {matchLabels: {team: legacy}}\n    rules: {recreate-multi-replica: warn}\n",
    ));
    let today = day("2026-12-05");
    let in_ns = |labels: &str| judged(&web("shop", ""), &namespace("shop", labels), &c, today);
    let rules_of = |v: &Verdict, rule: &str| {
        v.decided.findings.iter().filter(|f| f.rule == rule).map(|f| f.action).collect::<Vec<_>>()
    };
    let prod = in_ns("tier: prod");
    assert_eq!(recreate(&prod).0, Decision::Deny, "prod denies");
    assert_eq!(rules_of(&prod, "pdb-missing"), [Decision::Deny], "off cluster-wide, on again in prod");
    let dev = in_ns("tier: dev");
    assert_eq!(recreate(&dev).0, Decision::Warn, "development warns");
    assert!(rules_of(&dev, "pdb-missing").is_empty(), "off outside prod");
    assert_eq!(recreate(&in_ns("tier: prod, team: legacy")).0, Decision::Warn, "the later override wins");
    // The namespace mode label narrows what an override widens.
    let warn = in_ns("tier: prod, ha-guard.io/mode: warn");
    assert_eq!(recreate(&warn).0, Decision::Warn);
    assert!(warn.decided.findings.iter().any(|f| f.notes.iter().any(|n| matches!(n, Note::NamespaceWarn { .. }))));
    assert!(
        judged(&web("shop", ""), &namespace("shop", "tier: prod, ha-guard.io/mode: \"off\""), &c, today)
            .skipped
            .is_some()
    );
    assert!(!c.is_off(registry::rule("pdb-missing").unwrap()), "an override turns it on somewhere");
}

#[test]
fn where_the_namespace_is_not_known_the_overrides_apply_at_their_strictest_when_asked() {
    use crate::core::decide::UnknownNamespace;
    let c = config(concat!(
        "rules:\n  recreate-multi-replica: warn\noverrides:\n",
        "  - namespaceSelector: {matchLabels: {tier: prod}}\n    rules: {recreate-multi-replica: deny}\n",
        "  - namespaceSelector: {matchLabels: {team: legacy}}\n    rules: {recreate-multi-replica: \"off\"}\n",
    ));
    let s = subject(&web("fresh", ""));
    let v = view("", true);
    let judged_with = |unknown_namespace| {
        judge(&Review {
            subject: &s,
            old: None,
            view: &v,
            config: &c,
            asks: Asks::Findings,
            absences: Absences::Judged,
            today: None,
            progress: None,
            unknown_namespace,
        })
    };
    let lenient = judged_with(UnknownNamespace::NoOverride);
    assert_eq!(recreate(&lenient).0, Decision::Warn, "check of some files: the cluster-wide action");
    assert!(lenient.decided.warnings.is_empty(), "{:?}", lenient.decided.warnings);
    let strict = judged_with(UnknownNamespace::Strictest);
    assert_eq!(recreate(&strict).0, Decision::Deny, "deny before warn before off");
    assert_eq!(
        strict.decided.warnings,
        ["[recreate-multi-replica] the labels of namespace fresh are not known, so an override that selects \
          namespaces by label may apply: judged at the strictest action one gives, deny, not the cluster-wide warn"]
    );
    // Known labels: the overrides that match, whatever is asked.
    let known = view(&namespace("fresh", "team: legacy"), true);
    let v = judge(&Review {
        subject: &s,
        old: None,
        view: &known,
        config: &c,
        asks: Asks::Findings,
        absences: Absences::Judged,
        today: None,
        progress: None,
        unknown_namespace: UnknownNamespace::Strictest,
    });
    assert!(v.decided.findings.iter().all(|f| f.rule != "recreate-multi-replica"), "off in legacy namespaces");
}

#[test]
fn exempt_namespaces_take_globs() {
    let c = config("exemptNamespaces: [kube-system, \"team-sandbox-*\"]\n");
    let today = day("2026-12-05");
    let v = judged(&web("team-sandbox-7", ""), "", &c, today);
    assert_eq!(
        v.skipped.as_deref(),
        Some("namespace team-sandbox-7 is exempt in the configuration: exemptNamespaces (by \"team-sandbox-*\")"),
        "names the key and the glob that matched"
    );
    let by_name = judged(&web("kube-system", ""), "", &c, today);
    assert_eq!(
        by_name.skipped.as_deref(),
        Some("namespace kube-system is exempt in the configuration: exemptNamespaces")
    );
    assert!(judged(&web("team-sandbox", ""), "", &c, today).skipped.is_none(), "the dash is part of the glob");
    assert!(c.namespace_exempt("kube-system") && !c.namespace_exempt("kube-public"));
}

#[test]
fn every_bad_key_is_an_error_naming_the_exception_and_the_key() {
    let exception = |body: &str| format!("exceptions:\n  - name: vendor\n{body}");
    let base = "    rules: [toleration-wildcard]\n    match: {kinds: [Deployment], namespaces: [vendor]}\n";
    for (text, expected) in [
        (
            exception("    rules: [toleration-wildcard]\n    match: {kinds: [Deployment]}\n"),
            "policy.yaml: exceptions[0] (vendor).reason: an exception needs a reason: say why these findings are safe to allow",
        ),
        (
            exception(&format!("{base}    reason: \"   \"\n")),
            "exceptions[0] (vendor).reason: an exception needs a reason",
        ),
        (
            exception(&format!("{base}    reason: r\n    expires: 2027-02-30\n")),
            "exceptions[0] (vendor).expires: bad date \"2027-02-30\": expected YYYY-MM-DD (the first day it no longer applies)",
        ),
        (
            exception(&format!("{base}    reason: r\n    expires: next week\n")),
            "exceptions[0] (vendor).expires: bad date \"next week\"",
        ),
        (
            exception(&format!("{base}    reason: r\n    expiry: 2027-01-01\n")),
            "exceptions[0] (vendor).expiry: unknown field `expiry`",
        ),
        (
            exception("    rules: [toleration-wildcard]\n    match: {selector: {matchLabel: {a: b}}}\n    reason: r\n"),
            "exceptions[0] (vendor).match.selector.matchLabel: unknown field `matchLabel`",
        ),
        (
            exception(
                "    rules: [toleration-wildcard]\n    match: {namespaceSelector: {matchExpressions: [{key: a, operator: Equals, values: [b]}]}}\n    reason: r\n",
            ),
            "exceptions[0] (vendor).match.namespaceSelector.matchExpressions[0].operator: bad value \"Equals\": expected In, NotIn, Exists or DoesNotExist",
        ),
        (
            exception(
                "    rules: [toleration-wildcard]\n    match: {selector: {matchExpressions: [{key: a, operator: In}]}}\n    reason: r\n",
            ),
            "exceptions[0] (vendor).match.selector.matchExpressions[0].values: operator In needs at least one value",
        ),
        (
            exception("    rules: [toleration-wildcard]\n    match: {namespaces: [\"team_?\"]}\n    reason: r\n"),
            "exceptions[0] (vendor).match.namespaces: bad pattern \"team_?\": '_' is not allowed",
        ),
        (
            exception("    rules: [toleration-wildcard]\n    match: {kinds: [Pod]}\n    reason: r\n"),
            "exceptions[0] (vendor).match.kinds: unknown kind \"Pod\"",
        ),
        (
            exception("    rules: [toleration-wildcard]\n    match: {}\n    reason: r\n"),
            "exceptions[0] (vendor).match: it matches every object",
        ),
        (
            exception("    rules: [toleration-wildcards]\n    match: {kinds: [Deployment]}\n    reason: r\n"),
            "exceptions[0] (vendor).rules: unknown rule ID \"toleration-wildcards\"",
        ),
        (
            exception("    match: {kinds: [Deployment]}\n    reason: r\n"),
            "exceptions[0] (vendor).rules: list the rule IDs it allows",
        ),
        (
            format!("{}  - name: vendor\n{base}    reason: r\n", exception(&format!("{base}    reason: r\n"))),
            "exceptions[1] (vendor).name: \"vendor\" names another exception too: names are unique",
        ),
        (
            "exceptions:\n  - rules: [toleration-wildcard]\n    match: {kinds: [Deployment]}\n    reason: r\n"
                .to_string(),
            "exceptions[0].name: an exception needs a name",
        ),
        (
            "overrides:\n  - namespaceSelector: {matchLabels: {tier: prod}}\n    rules: {pdb-missing: block}\n"
                .to_string(),
            "overrides[0].rules.pdb-missing: bad value \"block\": expected deny, warn or off",
        ),
        (
            "overrides:\n  - namespaceSelector: {}\n    rules: {pdb-missing: deny}\n".to_string(),
            "overrides[0].namespaceSelector: an empty selector matches every namespace",
        ),
        (
            "overrides:\n  - rules: {pdb-missing: deny}\n".to_string(),
            "overrides[0].namespaceSelector: say which namespaces",
        ),
        (
            "overrides:\n  - namespaceSelector: {matchLabels: {tier: prod}}\n    rules: {pdb-mising: deny}\n"
                .to_string(),
            "overrides[0].rules.pdb-mising: unknown rule ID",
        ),
        (
            "exceptions:\n  - name: Vendor Tolerations\n    rules: [toleration-wildcard]\n    match: {kinds: [Deployment]}\n    reason: r\n".to_string(),
            "exceptions[0] (Vendor Tolerations).name: bad name \"Vendor Tolerations\": lower-case letters",
        ),
        (
            "exemptNamespaces: [\"Team-*\"]\n".to_string(),
            "exemptNamespaces: bad pattern \"Team-*\": 'T' is not allowed",
        ),
    ] {
        let e = error(&text);
        assert!(e.contains(expected), "{text}\n  said: {e}\n  expected: {expected}");
    }
}

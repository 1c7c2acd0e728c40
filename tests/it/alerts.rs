//! The chart's alerts (`charts/ha-guard/templates/prometheusrule.yaml`) run by Prometheus' own rule
//! engine: the PrometheusRule rendered by the pinned helm, its `spec.groups` written as a rules
//! file, `promtool check rules` on it, and `promtool test rules` with unit tests written here: for
//! each background-audit alert, series where it fires (the alert, its labels and annotations at
//! the right time) and series where it must not, and for the exception expiry alerts, exceptions
//! expiring soon, later, and already past. promtool is built from its Go module by
//! `tests/e2e/promtool/build.sh` on first use (cached outside the repository, like helm): a
//! promtool that cannot be built fails the test, never skips it. Each expectation is shown to
//! catch a wrong rule: the same unit tests fail against rules with one piece taken out.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::chart::{objects, one, refused, repo};

/// The pinned promtool, built once per machine (a cached build returns at once).
fn promtool() -> &'static Path {
    static PROMTOOL: OnceLock<PathBuf> = OnceLock::new();
    PROMTOOL.get_or_init(|| {
        let script = repo().join("tests/e2e/promtool/build.sh");
        let out = Command::new(&script)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{} failed ({}):\n{stderr}", script.display(), out.status);
        let path = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
        assert!(path.is_file(), "{} printed no promtool path: {stdout:?}\n{stderr}", script.display());
        path
    })
}

fn run(args: &[&str], dir: &Path) -> Output {
    Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run promtool: {e}"))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The rendered PrometheusRule's `spec` (its `groups`): a Prometheus rules file as it stands.
fn rules(extra: &[&str]) -> Value {
    let mut args = vec!["--set", "metrics.prometheusRule.enabled=true"];
    args.extend_from_slice(extra);
    let d = objects(&args);
    let spec = one(&d, "PrometheusRule")["spec"].clone();
    assert!(spec["groups"].as_array().is_some_and(|g| !g.is_empty()), "{spec}");
    spec
}

/// The rule of `alert` in a rules file.
fn rule<'a>(rules: &'a Value, alert: &str) -> &'a Value {
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .find(|r| r["alert"] == alert)
        .unwrap_or_else(|| panic!("no alert {alert}"))
}

fn rule_mut<'a>(rules: &'a mut Value, alert: &str) -> &'a mut Value {
    rules["groups"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .flat_map(|g| g["rules"].as_array_mut().unwrap())
        .find(|r| r["alert"] == alert)
        .unwrap_or_else(|| panic!("no alert {alert}"))
}

/// The audit's series labels as its ServiceMonitor scrapes them (job: its Service's name).
const JOB: &str = r#"job="ha-guard-audit", namespace="ha-guard""#;
const POD: &str = "ha-guard-audit-7c9d-a";

fn series(name: &str, labels: &str, values: &str) -> Value {
    let sep = if labels.is_empty() { "" } else { ", " };
    json!({"series": format!(r#"{name}{{{JOB}, pod="{POD}"{sep}{labels}}}"#), "values": values})
}

/// What promtool must see for an alert of one pod's counter: its labels (the series' and the
/// rule's) and its annotations with the pod filled in.
fn fired(rules: &Value, alert: &str, labels: Value) -> Value {
    let r = rule(rules, alert);
    let mut exp_labels = json!({"job": "ha-guard-audit", "namespace": "ha-guard", "pod": POD});
    for (k, v) in labels.as_object().unwrap().iter().chain(r["labels"].as_object().unwrap()) {
        exp_labels[k] = v.clone();
    }
    let mut annotations = r["annotations"].clone();
    for (_, v) in annotations.as_object_mut().unwrap() {
        let s = v.as_str().unwrap().replace("{{ $labels.pod }}", POD);
        assert!(!s.contains("{{"), "{alert}: a template this test does not expand: {s}");
        *v = json!(s);
    }
    json!({"exp_labels": exp_labels, "exp_annotations": annotations})
}

fn at(eval_time: &str, alert: &str, exp_alerts: Vec<Value>) -> Value {
    json!({"eval_time": eval_time, "alertname": alert, "exp_alerts": exp_alerts})
}

fn case(name: &str, input: Vec<Value>, checks: Vec<Value>) -> Value {
    json!({"name": name, "interval": "1m", "input_series": input, "alert_rule_test": checks})
}

const COUNTER_ALERTS: [&str; 5] = [
    "HaGuardAuditRunsFailing",
    "HaGuardAuditReportWritesFailing",
    "HaGuardAuditReportTruncated",
    "HaGuardAuditUnreadableObjects",
    "HaGuardAuditKindUnreadable",
];

/// The unit tests of the audit's alerts, for rules rendered with `audit.interval` 5m (NoLeader
/// waits 10m).
fn unit_tests(rules: &Value) -> Vec<Value> {
    let none = |t: &str| -> Vec<Value> { COUNTER_ALERTS.iter().map(|a| at(t, a, vec![])).collect() };
    let mut tests = Vec::new();

    // Runs: a failure fires at once with the pod's labels, and is forgotten 15 minutes later.
    let failure = json!({"result": "failure"});
    tests.push(case(
        "a failed run",
        vec![series("ha_guard_audit_runs_total", r#"result="failure""#, "0x2 1x30")],
        vec![
            at("2m", "HaGuardAuditRunsFailing", vec![]),
            at("5m", "HaGuardAuditRunsFailing", vec![fired(rules, "HaGuardAuditRunsFailing", failure)]),
            at("25m", "HaGuardAuditRunsFailing", vec![]),
        ],
    ));
    // Successful runs only (and failures long before): nothing.
    tests.push(case(
        "runs all succeed",
        vec![
            series("ha_guard_audit_runs_total", r#"result="success""#, "0+1x40"),
            series("ha_guard_audit_runs_total", r#"result="failure""#, "3x40"),
        ],
        none("20m").into_iter().chain(none("40m")).collect(),
    ));

    // Errors: each alert fires on its cause only.
    for (cause, alert) in [
        ("write", "HaGuardAuditReportWritesFailing"),
        ("report-truncated", "HaGuardAuditReportTruncated"),
        ("decode", "HaGuardAuditUnreadableObjects"),
        ("kind-unreadable", "HaGuardAuditKindUnreadable"),
    ] {
        let mut checks = vec![at("5m", alert, vec![fired(rules, alert, json!({"cause": cause}))])];
        checks.extend(COUNTER_ALERTS.iter().filter(|a| **a != alert).map(|a| at("5m", a, vec![])));
        checks.push(at("30m", alert, vec![]));
        tests.push(case(
            &format!("errors of cause {cause}"),
            vec![series("ha_guard_audit_errors_total", &format!(r#"cause="{cause}""#), "0x1 1+1x3 4x30")],
            checks,
        ));
    }
    // Errors of the other causes, and a constant count of every cause: none of them.
    let mut quiet = Vec::new();
    for cause in ["read", "namespace-gone", "crd-missing"] {
        quiet.push(series("ha_guard_audit_errors_total", &format!(r#"cause="{cause}""#), "0+1x40"));
    }
    for cause in ["write", "report-truncated", "decode", "kind-unreadable"] {
        quiet.push(series("ha_guard_audit_errors_total", &format!(r#"cause="{cause}""#), "2x40"));
    }
    tests.push(case("errors of other causes", quiet, none("20m").into_iter().chain(none("40m")).collect()));

    // The Lease: nobody holds it for two intervals (10m) -> fires, without a pod label.
    let no_leader = |labels: Value| {
        let r = rule(rules, "HaGuardAuditNoLeader");
        let mut exp_labels = labels;
        for (k, v) in r["labels"].as_object().unwrap() {
            exp_labels[k] = v.clone();
        }
        json!({"exp_labels": exp_labels, "exp_annotations": r["annotations"]})
    };
    let leader = |pod: &str, values: &str| json!({"series": format!(r#"ha_guard_audit_leader{{{JOB}, pod="{pod}"}}"#), "values": values});
    tests.push(case(
        "no pod holds the Lease",
        vec![leader("a", "0x30"), leader("b", "0x30")],
        vec![
            at("9m", "HaGuardAuditNoLeader", vec![]),
            at("10m", "HaGuardAuditNoLeader", vec![no_leader(json!({}))]),
            at("30m", "HaGuardAuditNoLeader", vec![no_leader(json!({}))]),
        ],
    ));
    // No audit pod scraped at all (the Deployment scaled to 0, every pod crashing).
    tests.push(case(
        "no audit pod scraped",
        vec![json!({"series": format!(r#"up{{{JOB}, pod="a"}}"#), "values": "0x30"})],
        vec![
            at("9m", "HaGuardAuditNoLeader", vec![]),
            at(
                "10m",
                "HaGuardAuditNoLeader",
                vec![no_leader(json!({"job": "ha-guard-audit", "namespace": "ha-guard"}))],
            ),
        ],
    ));
    // One pod holds it, the other waits: nothing.
    tests.push(case(
        "a leader",
        vec![leader("a", "1x40"), leader("b", "0x40")],
        vec![at("15m", "HaGuardAuditNoLeader", vec![]), at("40m", "HaGuardAuditNoLeader", vec![])],
    ));
    // Nobody for 8 minutes (a handover after a crash), then a leader again: nothing.
    tests.push(case(
        "the Lease unheld for less than two intervals",
        vec![leader("a", "1x5 0x7 1x20"), leader("b", "0x32")],
        vec![
            at("12m", "HaGuardAuditNoLeader", vec![]),
            at("13m", "HaGuardAuditNoLeader", vec![]),
            at("20m", "HaGuardAuditNoLeader", vec![]),
        ],
    ));

    // Full reads: none succeeded for two intervals (10m) since the last (or since the Lease was
    // taken, at 1m) -> fires, without a pod label; one every interval -> nothing.
    let stalled = {
        let r = rule(rules, "HaGuardAuditStalled");
        json!({"exp_labels": r["labels"], "exp_annotations": r["annotations"]})
    };
    let full_read = |values: &str| series("ha_guard_audit_last_full_read_timestamp_seconds", "", values);
    tests.push(case(
        "no full read since the Lease was taken",
        vec![full_read("0 60x40")],
        vec![
            at("5m", "HaGuardAuditStalled", vec![]),
            at("11m", "HaGuardAuditStalled", vec![]),
            at("12m", "HaGuardAuditStalled", vec![stalled.clone()]),
            at("40m", "HaGuardAuditStalled", vec![stalled.clone()]),
        ],
    ));
    tests.push(case(
        "a full read every interval",
        vec![full_read("60x4 300x4 600x4 900x4 1200x4 1500x4 1800x4 2100x4")],
        vec![at("12m", "HaGuardAuditStalled", vec![]), at("39m", "HaGuardAuditStalled", vec![])],
    ));
    tests.push(case(
        "full reads stop, then start again",
        vec![full_read("60x4 300x14 1200x20")],
        vec![
            at("15m", "HaGuardAuditStalled", vec![]),
            at("16m", "HaGuardAuditStalled", vec![stalled.clone()]),
            at("20m", "HaGuardAuditStalled", vec![]),
        ],
    ));
    tests
}

/// Writes `rules` and `tests` into `dir` and runs `promtool test rules`.
fn test_rules(dir: &Path, rules: &Value, tests: &[Value]) -> Output {
    std::fs::write(dir.join("rules.yaml"), serde_json::to_string_pretty(rules).unwrap()).unwrap();
    let file = json!({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests});
    std::fs::write(dir.join("tests.yaml"), serde_json::to_string_pretty(&file).unwrap()).unwrap();
    run(&["test", "rules", "tests.yaml"], dir)
}

#[test]
fn the_rules_pass_promtool_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, extra) in [
        ("defaults", &[][..]),
        ("certManager", &["--set", "certificates.mode=certManager"][..]),
        ("audit off", &["--set", "audit.enabled=false"][..]),
    ] {
        let file = dir.path().join("rules.yaml");
        std::fs::write(&file, serde_json::to_string_pretty(&rules(extra)).unwrap()).unwrap();
        let out = run(&["check", "rules", "rules.yaml"], dir.path());
        let said = text(&out);
        assert!(out.status.success(), "{name}: promtool check rules:\n{said}");
        let count = if name == "audit off" { 11 } else { 18 };
        assert!(said.contains(&format!("SUCCESS: {count} rules found")), "{name}: {said}");
    }
    // promtool does refuse a broken rule: the check above can fail.
    let mut broken = rules(&[]);
    rule_mut(&mut broken, "HaGuardAuditNoLeader")["expr"] = json!("max(ha_guard_audit_leader{job=}) < 1");
    std::fs::write(dir.path().join("rules.yaml"), serde_json::to_string_pretty(&broken).unwrap()).unwrap();
    let out = run(&["check", "rules", "rules.yaml"], dir.path());
    assert!(!out.status.success(), "a bad expression passed: {}", text(&out));
}

#[test]
fn the_audit_alerts_fire_when_they_should_and_only_then() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = rules(&[]);
    let tests = unit_tests(&good);
    let out = test_rules(dir.path(), &good, &tests);
    assert!(out.status.success(), "promtool test rules:\n{}", text(&out));
    assert!(text(&out).contains("SUCCESS"), "{}", text(&out));

    // The for: of HaGuardAuditNoLeader follows audit.interval: 90s -> 3m.
    let short = rules(&["--set", "audit.interval=90s"]);
    assert_eq!(rule(&short, "HaGuardAuditNoLeader")["for"], "3m");
    let no_leader = rule(&short, "HaGuardAuditNoLeader");
    let expected = json!({"exp_labels": no_leader["labels"], "exp_annotations": no_leader["annotations"]});
    let leader0 = json!({"series": format!(r#"ha_guard_audit_leader{{{JOB}, pod="a"}}"#), "values": "0x10"});
    let tests = [case(
        "no leader, 90s interval",
        vec![leader0],
        vec![at("2m", "HaGuardAuditNoLeader", vec![]), at("3m", "HaGuardAuditNoLeader", vec![expected])],
    )];
    let out = test_rules(dir.path(), &short, &tests);
    assert!(out.status.success(), "promtool test rules (audit.interval=90s):\n{}", text(&out));
}

/// HaGuardDeadlineExceeded fires on a replica that answered at its deadline in the last 15
/// minutes, naming the rule, and is forgotten after; a counter that stays put does not fire it.
#[test]
fn the_deadline_alert_fires_when_a_rule_was_answered_at_the_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = rules(&[]);
    let r = rule(&good, "HaGuardDeadlineExceeded");
    let webhook = r#"job="ha-guard", namespace="ha-guard""#;
    let counter = |rule: &str, values: &str| json!({"series": format!(r#"ha_guard_rule_deadline_exceeded_total{{{webhook}, pod="ha-guard-5d8-a", rule="{rule}"}}"#), "values": values});
    let mut labels =
        json!({"job": "ha-guard", "namespace": "ha-guard", "pod": "ha-guard-5d8-a", "rule": "spread-unsatisfiable"});
    for (k, v) in r["labels"].as_object().unwrap() {
        labels[k] = v.clone();
    }
    let mut annotations = r["annotations"].clone();
    for (_, v) in annotations.as_object_mut().unwrap() {
        let s = v
            .as_str()
            .unwrap()
            .replace("{{ $labels.pod }}", "ha-guard-5d8-a")
            .replace("{{ $labels.rule }}", "spread-unsatisfiable");
        *v = json!(s);
    }
    let fired = json!({"exp_labels": labels, "exp_annotations": annotations});
    let tests = [
        case(
            "one admission answered at the deadline",
            vec![counter("spread-unsatisfiable", "0x3 1x30"), counter("pdb-blocks-eviction", "0x33")],
            vec![
                at("2m", "HaGuardDeadlineExceeded", vec![]),
                at("5m", "HaGuardDeadlineExceeded", vec![fired]),
                at("25m", "HaGuardDeadlineExceeded", vec![]),
            ],
        ),
        case(
            "answered at the deadline long ago",
            vec![counter("spread-unsatisfiable", "4x40")],
            vec![at("20m", "HaGuardDeadlineExceeded", vec![]), at("40m", "HaGuardDeadlineExceeded", vec![])],
        ),
    ];
    let out = test_rules(dir.path(), &good, &tests);
    assert!(out.status.success(), "promtool test rules:\n{}", text(&out));
    assert!(
        r["annotations"]["description"].as_str().unwrap().contains("admitted unchecked (failurePolicy Ignore)"),
        "{r}"
    );
    // With failurePolicy Fail, the description says the writes were refused.
    let fail = rules(&["--set", "webhook.failurePolicy=Fail"]);
    let description =
        rule(&fail, "HaGuardDeadlineExceeded")["annotations"]["description"].as_str().unwrap().to_string();
    assert!(description.contains("refused (failurePolicy Fail)"), "{description}");
    // And the unit tests catch a rule that counts instead of increasing.
    let mut bad = good.clone();
    rule_mut(&mut bad, "HaGuardDeadlineExceeded")["expr"] =
        json!(format!("ha_guard_rule_deadline_exceeded_total{{{webhook}}} > 0"));
    let out = test_rules(dir.path(), &bad, &tests);
    assert!(!out.status.success(), "a wrong rule passed:\n{}", text(&out));
}

/// HaGuardWebhookUnreachable reads the kube-apiserver's own counters: with failurePolicy Ignore the
/// calls that failed open, per webhook, and is forgotten 10 minutes after the last; another
/// webhook's failures do not fire it. With Fail it reads the calls the apiserver refused for want of
/// an answer, not the writes ha-guard itself denied.
#[test]
fn the_unreachable_alert_follows_the_apiservers_own_counters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let apiserver = r#"job="apiserver", instance="10.0.0.1:6443""#;
    let fail_open = |name: &str, values: &str| json!({"series": format!(r#"apiserver_admission_webhook_fail_open_count{{{apiserver}, name="{name}", type="validating"}}"#), "values": values});
    let expected = |r: &Value| {
        let mut labels = json!({"name": "validate.ha-guard.io", "type": "validating"});
        for (k, v) in r["labels"].as_object().unwrap() {
            labels[k] = v.clone();
        }
        let mut annotations = r["annotations"].clone();
        for (_, v) in annotations.as_object_mut().unwrap() {
            *v = json!(v.as_str().unwrap().replace("{{ $labels.name }}", "validate.ha-guard.io"));
        }
        json!({"exp_labels": labels, "exp_annotations": annotations})
    };
    let ignore = rules(&[]);
    let r = rule(&ignore, "HaGuardWebhookUnreachable");
    assert!(
        r["annotations"]["description"].as_str().unwrap().contains("admitted unchecked (failurePolicy Ignore)"),
        "{r}"
    );
    let tests = [
        case(
            "ha-guard's validating webhook failed open three times",
            vec![fail_open("validate.ha-guard.io", "0x3 3x40"), fail_open("sidecar-injector.istio.io", "0+5x43")],
            vec![
                at("2m", "HaGuardWebhookUnreachable", vec![]),
                at("6m", "HaGuardWebhookUnreachable", vec![expected(r)]),
                at("20m", "HaGuardWebhookUnreachable", vec![]),
            ],
        ),
        case(
            "another webhook fails open",
            vec![fail_open("sidecar-injector.istio.io", "0+5x40")],
            vec![at("10m", "HaGuardWebhookUnreachable", vec![])],
        ),
    ];
    let out = test_rules(dir.path(), &ignore, &tests);
    assert!(out.status.success(), "promtool test rules:\n{}", text(&out));
    // A rule that ignores which webhook failed is caught.
    let mut bad = ignore.clone();
    rule_mut(&mut bad, "HaGuardWebhookUnreachable")["expr"] =
        json!("sum by (name, type) (increase(apiserver_admission_webhook_fail_open_count[10m])) > 0");
    let out = test_rules(dir.path(), &bad, &tests);
    assert!(!out.status.success(), "a wrong rule passed:\n{}", text(&out));

    // failurePolicy Fail: the calls refused with calling_webhook_error count, ha-guard's own denials
    // (no_error, code 403) do not.
    let fail = rules(&["--set", "webhook.failurePolicy=Fail"]);
    let r = rule(&fail, "HaGuardWebhookUnreachable");
    assert!(r["annotations"]["description"].as_str().unwrap().contains("refused (failurePolicy Fail)"), "{r}");
    let rejected = |error_type: &str, code: &str, values: &str| json!({"series": format!(r#"apiserver_admission_webhook_rejection_count{{{apiserver}, name="validate.ha-guard.io", type="validating", operation="CREATE", error_type="{error_type}", rejection_code="{code}"}}"#), "values": values});
    let tests = [
        case(
            "calls that got no answer",
            vec![rejected("calling_webhook_error", "0", "0x3 2x40")],
            vec![at("6m", "HaGuardWebhookUnreachable", vec![expected(r)])],
        ),
        case(
            "writes ha-guard denied",
            vec![rejected("no_error", "403", "0+4x40")],
            vec![at("10m", "HaGuardWebhookUnreachable", vec![])],
        ),
    ];
    let out = test_rules(dir.path(), &fail, &tests);
    assert!(out.status.success(), "promtool test rules (failurePolicy Fail):\n{}", text(&out));
}

/// The unit tests catch a wrong rule: each mutation of a rule fails them, naming the alert.
#[test]
fn the_unit_tests_fail_on_a_wrong_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = rules(&[]);
    let tests = unit_tests(&good);
    let sel = JOB;
    let mutations: [(&str, &str, &str, &str); 7] = [
        ("HaGuardAuditNoLeader", "expr", "without absent()", "max(ha_guard_audit_leader{SEL}) < 1"),
        (
            "HaGuardAuditNoLeader",
            "expr",
            "min instead of max",
            "min(ha_guard_audit_leader{SEL}) < 1 or absent(ha_guard_audit_leader{SEL})",
        ),
        ("HaGuardAuditNoLeader", "for", "for: 5m", "5m"),
        ("HaGuardAuditRunsFailing", "expr", "every result", "increase(ha_guard_audit_runs_total{SEL}[15m]) > 0"),
        (
            "HaGuardAuditRunsFailing",
            "expr",
            "the webhook's job",
            r#"increase(ha_guard_audit_runs_total{job="ha-guard", namespace="ha-guard", result="failure"}[15m]) > 0"#,
        ),
        ("HaGuardAuditReportWritesFailing", "expr", "any cause", "increase(ha_guard_audit_errors_total{SEL}[15m]) > 0"),
        (
            "HaGuardAuditUnreadableObjects",
            "expr",
            "a count, not an increase",
            r#"ha_guard_audit_errors_total{SEL, cause="decode"} > 0"#,
        ),
    ];
    for (alert, field, what, value) in mutations {
        let mut bad = good.clone();
        rule_mut(&mut bad, alert)[field] = json!(value.replace("SEL", sel));
        let out = test_rules(dir.path(), &bad, &tests);
        let said = text(&out);
        assert!(!out.status.success(), "{alert} {what}: the unit tests still pass:\n{said}");
        assert!(said.contains(alert), "{alert} {what}: promtool fails, but not on {alert}:\n{said}");
    }
    // A lower severity is part of the expectation too.
    let mut bad = good.clone();
    rule_mut(&mut bad, "HaGuardAuditReportTruncated")["labels"] = json!({"severity": "warning"});
    let out = test_rules(dir.path(), &bad, &tests);
    assert!(!out.status.success(), "severity not checked:\n{}", text(&out));
}

#[test]
fn alert_labels_selectors_and_for_follow_the_values() {
    let labels = |r: &Value, alert: &str| rule(r, alert)["labels"].clone();
    // Defaults: warning, and info for the two lesser audit alerts.
    let r = rules(&[]);
    for alert in ["HaGuardDown", "HaGuardAuditRunsFailing", "HaGuardAuditReportWritesFailing", "HaGuardAuditNoLeader"] {
        assert_eq!(labels(&r, alert), json!({"severity": "warning"}), "{alert}");
    }
    for alert in ["HaGuardAuditReportTruncated", "HaGuardAuditUnreadableObjects"] {
        assert_eq!(labels(&r, alert), json!({"severity": "info"}), "{alert}");
    }
    // alertLabels reach every alert; the lesser ones keep severity info.
    let r = rules(&[
        "--set",
        "metrics.prometheusRule.alertLabels.severity=critical",
        "--set",
        "metrics.prometheusRule.alertLabels.team=sre",
    ]);
    assert_eq!(labels(&r, "HaGuardAuditNoLeader"), json!({"severity": "critical", "team": "sre"}));
    assert_eq!(labels(&r, "HaGuardAuditReportTruncated"), json!({"severity": "info", "team": "sre"}));
    // No severity in alertLabels: none added.
    let r = rules(&[
        "--set",
        "metrics.prometheusRule.alertLabels.severity=null",
        "--set",
        "metrics.prometheusRule.alertLabels.team=sre",
    ]);
    assert_eq!(labels(&r, "HaGuardAuditUnreadableObjects"), json!({"team": "sre"}));
    assert_eq!(labels(&r, "HaGuardAuditRunsFailing"), json!({"team": "sre"}));

    // The selectors: the audit's job by default, the user's when given, other releases' names.
    let r = rules(&["--set-string", r#"metrics.prometheusRule.auditSelector=job="audit""#]);
    assert_eq!(
        rule(&r, "HaGuardAuditNoLeader")["expr"],
        r#"max(ha_guard_audit_leader{job="audit"}) < 1 or absent(ha_guard_audit_leader{job="audit"})"#
    );
    assert!(rule(&r, "HaGuardDown")["expr"].as_str().unwrap().contains(r#"job="ha-guard""#), "the webhook's unchanged");
    let other = crate::chart::render_release("hg", "policy", &["--set", "metrics.prometheusRule.enabled=true"]);
    let r = &one(&other, "PrometheusRule")["spec"];
    assert_eq!(
        rule(r, "HaGuardAuditReportWritesFailing")["expr"],
        r#"increase(ha_guard_audit_errors_total{job="hg-ha-guard-audit", namespace="policy", cause="write"}[15m]) > 0"#
    );

    // for: two intervals, whatever unit audit.interval is in.
    for (interval, want) in [
        ("5m", "10m"),
        ("30s", "1m"),
        ("45s", "90s"),
        ("90s", "3m"),
        ("2m30s", "5m"),
        ("1h", "2h"),
        ("1h30m", "3h"),
        ("1h1s", "7202s"),
        ("1d", "48h"),
        ("30500ms", "61s"),
        ("30001ms", "60002ms"),
    ] {
        let r = rules(&["--set", &format!("audit.interval={interval}")]);
        assert_eq!(rule(&r, "HaGuardAuditNoLeader")["for"], want, "audit.interval={interval}");
        let description = rule(&r, "HaGuardAuditNoLeader")["annotations"]["description"].as_str().unwrap().to_string();
        assert!(description.starts_with(&format!("For {want} (two audit intervals of {interval})")), "{description}");
    }
}

/// The webhook's series labels as its ServiceMonitor scrapes them.
const WEBHOOK_JOB: &str = r#"job="ha-guard", namespace="ha-guard""#;

/// Prometheus' `humanizeDuration` of a whole number of seconds (template_funcs' format).
fn humanize_duration(seconds: i64) -> String {
    let sign = if seconds < 0 { "-" } else { "" };
    let s = seconds.abs();
    let (days, hours, minutes, secs) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if days != 0 {
        format!("{sign}{days}d {hours}h {minutes}m {secs}s")
    } else if hours != 0 {
        format!("{sign}{hours}h {minutes}m {secs}s")
    } else if minutes != 0 {
        format!("{sign}{minutes}m {secs}s")
    } else {
        format!("{sign}{s}s")
    }
}

/// The expiry gauge of `exception` on one webhook pod.
fn expiry(pod: &str, exception: &str, values: &str) -> Value {
    json!({
        "series": format!(r#"ha_guard_exception_expiry_timestamp_seconds{{{WEBHOOK_JOB}, pod="{pod}", exception="{exception}"}}"#),
        "values": values,
    })
}

/// What promtool must see for an exception alert: the exception (no pod: one alert per exception,
/// whatever the replicas), the rule's labels, its annotations with the exception and the value.
fn exception_alert(rules: &Value, alert: &str, exception: &str, seconds: i64) -> Value {
    let r = rule(rules, alert);
    let mut exp_labels = json!({"exception": exception});
    for (k, v) in r["labels"].as_object().unwrap() {
        exp_labels[k] = v.clone();
    }
    let mut annotations = r["annotations"].clone();
    for (_, v) in annotations.as_object_mut().unwrap() {
        let s = v
            .as_str()
            .unwrap()
            .replace("{{ $labels.exception }}", exception)
            .replace("{{ $value | humanizeDuration }}", &humanize_duration(seconds));
        assert!(!s.contains("{{"), "{alert}: a template this test does not expand: {s}");
        *v = json!(s);
    }
    json!({"exp_labels": exp_labels, "exp_annotations": annotations})
}

const DAY: i64 = 86400;

/// The unit tests of HaGuardExceptionExpiring / HaGuardExceptionExpired, for rules rendered with
/// `exceptionExpiryWarning` 14. Test time starts at the Unix epoch: an expiry timestamp of N
/// seconds is N seconds after the start of the test.
fn exception_unit_tests(rules: &Value) -> Vec<Value> {
    let expiring = |exception: &str, left: i64| exception_alert(rules, "HaGuardExceptionExpiring", exception, left);
    let expired = |exception: &str, ago: i64| exception_alert(rules, "HaGuardExceptionExpired", exception, ago);
    let at_both = |t: &str, expiring: Vec<Value>, expired: Vec<Value>| {
        vec![at(t, "HaGuardExceptionExpiring", expiring), at(t, "HaGuardExceptionExpired", expired)]
    };
    let mut tests = Vec::new();

    // In 10 days (from 15 minutes in): Expiring, once it has held for 15 minutes; not Expired.
    let ten = 10 * DAY + 900;
    let mut checks = at_both("14m", vec![], vec![]);
    checks.extend(at_both("15m", vec![expiring("in-10-days", 10 * DAY)], vec![]));
    checks.extend(at_both("60m", vec![expiring("in-10-days", 10 * DAY - 2700)], vec![]));
    tests.push(case(
        "an exception expiring in 10 days",
        vec![
            expiry("ha-guard-a", "in-10-days", &format!("{ten}x60")),
            expiry("ha-guard-b", "in-10-days", &format!("{ten}x60")),
        ],
        checks,
    ));
    // In 20 days, and one without a date (no series): nothing.
    let mut checks = at_both("20m", vec![], vec![]);
    checks.extend(at_both("60m", vec![], vec![]));
    tests.push(case(
        "an exception expiring in 20 days",
        vec![expiry("ha-guard-a", "in-20-days", &format!("{}x60", 20 * DAY))],
        checks,
    ));
    // Past (its day began at the epoch): Expired at once, with how long ago; not Expiring.
    let mut checks = at_both("0m", vec![], vec![expired("past", 0)]);
    checks.extend(at_both("20m", vec![], vec![expired("past", 1200)]));
    tests.push(case("an exception already expired", vec![expiry("ha-guard-a", "past", "0x30")], checks));
    // Renewed: a pod still on the old configuration (10 days) and one on the new (40 days): the
    // later date counts, nothing fires.
    let mut checks = at_both("20m", vec![], vec![]);
    checks.extend(at_both("40m", vec![], vec![]));
    tests.push(case(
        "an exception renewed, one pod not reloaded yet",
        vec![
            expiry("ha-guard-a", "renewed", &format!("{ten}x60")),
            expiry("ha-guard-b", "renewed", &format!("{}x60", 40 * DAY)),
        ],
        checks,
    ));
    // Through its expiry day's start (30 minutes in): Expiring until then, Expired from then on.
    let mut checks = at_both("20m", vec![expiring("at-30m", 600)], vec![]);
    checks.extend(at_both("29m", vec![expiring("at-30m", 60)], vec![]));
    checks.extend(at_both("30m", vec![], vec![expired("at-30m", 0)]));
    checks.extend(at_both("45m", vec![], vec![expired("at-30m", 900)]));
    tests.push(case("an exception reaching its expiry", vec![expiry("ha-guard-a", "at-30m", "1800x60")], checks));
    // Two exceptions: one alert each, by name.
    tests.push(case(
        "two exceptions",
        vec![expiry("ha-guard-a", "first", &format!("{}x30", 3 * DAY)), expiry("ha-guard-a", "second", "0x30")],
        at_both("15m", vec![expiring("first", 3 * DAY - 900)], vec![expired("second", 900)]),
    ));
    tests
}

#[test]
fn the_exception_alerts_fire_ahead_of_and_after_expiry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = rules(&[]);
    assert_eq!(rule(&good, "HaGuardExceptionExpiring")["for"], "15m");
    assert!(rule(&good, "HaGuardExceptionExpired").get("for").is_none());
    let tests = exception_unit_tests(&good);
    let out = test_rules(dir.path(), &good, &tests);
    assert!(out.status.success(), "promtool test rules:\n{}", text(&out));

    // The window follows metrics.prometheusRule.exceptionExpiryWarning: at 30 days, one in 20 fires.
    let wide = rules(&["--set", "metrics.prometheusRule.exceptionExpiryWarning=30"]);
    let description = rule(&wide, "HaGuardExceptionExpiring")["annotations"]["description"].as_str().unwrap();
    assert!(description.contains("(alert threshold 30 days)"), "{description}");
    let tests = [case(
        "an exception expiring in 20 days, 30 days' warning",
        vec![expiry("ha-guard-a", "in-20-days", &format!("{}x30", 20 * DAY))],
        vec![
            at(
                "15m",
                "HaGuardExceptionExpiring",
                vec![exception_alert(&wide, "HaGuardExceptionExpiring", "in-20-days", 20 * DAY - 900)],
            ),
            at("15m", "HaGuardExceptionExpired", vec![]),
        ],
    )];
    let out = test_rules(dir.path(), &wide, &tests);
    assert!(out.status.success(), "promtool test rules (exceptionExpiryWarning=30):\n{}", text(&out));
    let e = refused(&[
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.exceptionExpiryWarning=0",
    ]);
    assert!(e.contains("/metrics/prometheusRule/exceptionExpiryWarning"), "{e}");

    // What the descriptions tell: the exception, where it is configured, what to do.
    for alert in ["HaGuardExceptionExpiring", "HaGuardExceptionExpired"] {
        let d = rule(&good, alert)["annotations"]["description"].as_str().unwrap();
        for part in [
            "{{ $labels.exception }}",
            "config.exceptions",
            "ha-guard/ha-guard-config",
            "renew",
            "expires date",
            "are refused",
        ] {
            assert!(d.contains(part), "{alert}: {part:?} not in {d}");
        }
    }
    let observe = rules(&["--set", "mode=observe"]);
    let d = rule(&observe, "HaGuardExceptionExpired")["annotations"]["description"].as_str().unwrap();
    assert!(d.contains("answered with a warning (mode observe"), "{d}");

    // The unit tests catch a wrong rule.
    let sel = WEBHOOK_JOB;
    let mutations: [(&str, &str, &str, String); 6] = [
        (
            "HaGuardExceptionExpiring",
            "expr",
            "expired ones too",
            format!(
                "(max by (exception) (ha_guard_exception_expiry_timestamp_seconds{{{sel}}}) - time()) < 14 * 86400"
            ),
        ),
        (
            "HaGuardExceptionExpiring",
            "expr",
            "min over pods",
            format!(
                "(min by (exception) (ha_guard_exception_expiry_timestamp_seconds{{{sel}}}) - time()) < 14 * 86400 > 0"
            ),
        ),
        (
            "HaGuardExceptionExpiring",
            "expr",
            "a threshold in seconds, not days",
            format!("(max by (exception) (ha_guard_exception_expiry_timestamp_seconds{{{sel}}}) - time()) < 14 > 0"),
        ),
        ("HaGuardExceptionExpiring", "for", "for: 1h", "1h".to_string()),
        (
            "HaGuardExceptionExpired",
            "expr",
            "strictly after the day's start",
            format!("time() - max by (exception) (ha_guard_exception_expiry_timestamp_seconds{{{sel}}}) > 0"),
        ),
        (
            "HaGuardExceptionExpired",
            "expr",
            "per pod",
            format!("time() - max by (exception, pod) (ha_guard_exception_expiry_timestamp_seconds{{{sel}}}) >= 0"),
        ),
    ];
    let tests = exception_unit_tests(&good);
    for (alert, field, what, value) in mutations {
        let mut bad = good.clone();
        rule_mut(&mut bad, alert)[field] = json!(value);
        let out = test_rules(dir.path(), &bad, &tests);
        let said = text(&out);
        assert!(!out.status.success(), "{alert} {what}: the unit tests still pass:\n{said}");
        assert!(said.contains(alert), "{alert} {what}: promtool fails, but not on {alert}:\n{said}");
    }
}

/// HaGuardAdmissionPoliciesNotApplied: a pod whose policies are not applied for 15 minutes, per
/// pod; applied, back within 15 minutes, or off (no sample at all): nothing.
#[test]
fn the_admission_policies_alert_fires_when_a_pod_has_not_applied_them_for_15_minutes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = rules(&[]);
    let r = rule(&good, "HaGuardAdmissionPoliciesNotApplied");
    let webhook = r#"job="ha-guard", namespace="ha-guard""#;
    let gauge = |pod: &str, values: &str| json!({"series": format!(r#"ha_guard_admission_policies_applied{{{webhook}, pod="{pod}"}}"#), "values": values});
    let mut labels = json!({"namespace": "ha-guard", "pod": "ha-guard-5d8-a"});
    for (k, v) in r["labels"].as_object().unwrap() {
        labels[k] = v.clone();
    }
    let mut annotations = r["annotations"].clone();
    for (_, v) in annotations.as_object_mut().unwrap() {
        let s = v.as_str().unwrap().replace("{{ $labels.pod }}", "ha-guard-5d8-a");
        assert!(!s.contains("{{"), "a template this test does not expand: {s}");
        *v = json!(s);
    }
    let fired = json!({"exp_labels": labels, "exp_annotations": annotations});
    let alert = "HaGuardAdmissionPoliciesNotApplied";
    let tests = [
        case(
            "one pod cannot apply them",
            vec![gauge("ha-guard-5d8-a", "0x40"), gauge("ha-guard-5d8-b", "1x40")],
            vec![at("14m", alert, vec![]), at("16m", alert, vec![fired.clone()]), at("40m", alert, vec![fired])],
        ),
        case(
            "applied again within 15 minutes (a rolling upgrade)",
            vec![gauge("ha-guard-5d8-a", "0x10 1x30")],
            vec![at("10m", alert, vec![]), at("16m", alert, vec![]), at("40m", alert, vec![])],
        ),
        case(
            "policies off: no sample",
            vec![
                json!({"series": format!(r#"ha_guard_build_info{{{webhook}, pod="ha-guard-5d8-a"}}"#), "values": "1x40"}),
            ],
            vec![at("20m", alert, vec![]), at("40m", alert, vec![])],
        ),
    ];
    let out = test_rules(dir.path(), &good, &tests);
    assert!(out.status.success(), "promtool test rules:\n{}", text(&out));
    // And the unit tests catch a rule that fires on an applied set.
    let mut bad = good.clone();
    rule_mut(&mut bad, alert)["expr"] =
        json!(format!("min by (namespace, pod) (ha_guard_admission_policies_applied{{{webhook}}}) >= 0"));
    let out = test_rules(dir.path(), &bad, &tests);
    assert!(!out.status.success(), "a wrong rule passed:\n{}", text(&out));
}

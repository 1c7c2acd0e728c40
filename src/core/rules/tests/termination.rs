//! termination-grace-zero, prestop-exceeds-grace.

use crate::core::finding::Decision;
use crate::core::model::{Kind, ObjectRef};
use crate::core::testing::*;
use rstest::rstest;

/// `terminationGracePeriodSeconds: <grace>` or nothing.
fn grace_field(grace: Option<i64>) -> String {
    grace.map(|g| format!("terminationGracePeriodSeconds: {g}\n")).unwrap_or_default()
}

/// Deployment `web` whose container `app` has the given preStop handler (YAML under `preStop:`).
fn with_prestop(grace: Option<i64>, pre_stop: &str) -> String {
    let pod = format!(
        "{}containers:\n- name: app\n  image: nginx:1.27\n  lifecycle:\n    preStop:\n{}",
        grace_field(grace),
        indent(pre_stop, 6)
    );
    deployment("web", "replicas: 2", &pod)
}

fn sleep_action(seconds: i64) -> String {
    format!("sleep:\n  seconds: {seconds}\n")
}

fn exec(command: &str) -> String {
    format!("exec:\n  command: {command}\n")
}

const PRESTOP_PATH: &str = "spec.template.spec.containers[0].lifecycle.preStop";

// ---- termination-grace-zero ----

#[test]
fn zero_grace_warns() {
    let f = findings(&deployment("web", "replicas: 2", "terminationGracePeriodSeconds: 0"), "", false);
    let z = of_rule(&f, "termination-grace-zero");
    assert_eq!(z.len(), 1, "{f:#?}");
    let z = z[0];
    assert_eq!(z.action, Decision::Warn);
    assert_eq!(z.path, "spec.template.spec.terminationGracePeriodSeconds");
    assert_eq!(z.anchor, ObjectRef::new(Kind::Deployment, "default", "web"));
    assert!(z.related.is_empty());
    assert!(z.what.contains("Deployment default/web"), "{}", z.what);
    assert!(
        z.what.contains("terminationGracePeriodSeconds: 0") && z.what.contains("preStop hooks are skipped"),
        "{}",
        z.what
    );
    assert!(z.fix.contains("remove the field (30 s by default)"), "{}", z.fix);
}

#[rstest]
#[case::one_second(Some(1))]
#[case::unset(None)]
#[case::the_default(Some(30))]
fn non_zero_grace_does_not_warn(#[case] grace: Option<i64>) {
    let f = findings(&deployment("web", "replicas: 2", &grace_field(grace)), "", false);
    assert!(of_rule(&f, "termination-grace-zero").is_empty(), "{f:#?}");
}

#[test]
fn zero_grace_on_a_statefulset() {
    let sts = workload("StatefulSet", "db", "replicas: 1\nserviceName: db", "terminationGracePeriodSeconds: 0");
    let f = findings(&sts, "", false);
    let z = of_rule(&f, "termination-grace-zero");
    assert_eq!(z.len(), 1, "{f:#?}");
    assert!(z[0].what.contains("StatefulSet default/db"), "{}", z[0].what);
}

// ---- prestop-exceeds-grace ----

#[test]
fn sleep_action_equal_to_the_default_grace_denies() {
    let f = findings(&with_prestop(None, &sleep_action(30)), "", false);
    let p = of_rule(&f, "prestop-exceeds-grace");
    assert_eq!(p.len(), 1, "{f:#?}");
    let p = p[0];
    assert_eq!(p.action, Decision::Deny);
    assert_eq!(p.path, PRESTOP_PATH);
    assert_eq!(p.anchor, ObjectRef::new(Kind::Deployment, "default", "web"));
    assert!(p.related.is_empty());
    assert!(p.what.contains("container app of Deployment default/web"), "{}", p.what);
    assert!(p.what.contains("sleeps 30 s") && p.what.contains("termination grace period of 30 s"), "{}", p.what);
    assert!(p.what.contains("never") && p.what.contains("SIGTERM"), "{}", p.what);
    assert!(p.fix.contains("terminationGracePeriodSeconds above 30"), "{}", p.fix);
    assert!(p.fix.contains("for example 60") && p.fix.contains("shorten the sleep"), "{}", p.fix);
}

#[rstest]
#[case::sleep_below_default_grace(None, sleep_action(29), None)]
#[case::sleep_equal_default_grace(None, sleep_action(30), Some((30, 30)))]
#[case::sleep_above_default_grace(None, sleep_action(31), Some((31, 30)))]
#[case::exec_sleep_below_grace(Some(60), exec("[sleep, \"45\"]"), None)]
#[case::exec_sleep_above_grace(Some(40), exec("[sleep, \"45\"]"), Some((45, 40)))]
#[case::exec_sleep_equal_grace(Some(45), exec("[/bin/sleep, \"45\"]"), Some((45, 45)))]
#[case::exec_sleep_with_unit(Some(90), exec("[sleep, 2m]"), Some((120, 90)))]
#[case::shell_sleep_then_quit(Some(5), exec("[/bin/sh, -c, \"sleep 10; nginx -s quit\"]"), Some((10, 5)))]
#[case::shell_sleep_within_grace(Some(15), exec("[/bin/sh, -c, \"sleep 10; nginx -s quit\"]"), None)]
#[case::not_a_plain_sleep(Some(1), exec("[/usr/local/bin/drain.sh]"), None)]
#[case::http_get(Some(1), "httpGet:\n  path: /shutdown\n  port: 8080\n".to_string(), None)]
fn prestop_against_grace(#[case] grace: Option<i64>, #[case] pre_stop: String, #[case] denied: Option<(i64, i64)>) {
    let f = findings(&with_prestop(grace, &pre_stop), "", false);
    let p = of_rule(&f, "prestop-exceeds-grace");
    match denied {
        Some((sleep, grace)) => {
            assert_eq!(p.len(), 1, "{f:#?}");
            assert_eq!(p[0].action, Decision::Deny);
            assert_eq!(p[0].path, PRESTOP_PATH);
            assert!(
                p[0].what.contains(&format!("sleeps {sleep} s"))
                    && p[0].what.contains(&format!("termination grace period of {grace} s")),
                "{}",
                p[0].what
            );
            assert!(p[0].fix.contains(&format!("above {sleep}")), "{}", p[0].fix);
        }
        None => assert!(p.is_empty(), "{f:#?}"),
    }
}

#[test]
fn sidecar_in_init_containers_is_checked_too() {
    let pod = "terminationGracePeriodSeconds: 20\ninitContainers:\n- name: proxy\n  image: envoyproxy/envoy:v1.31\n  \
               restartPolicy: Always\n  lifecycle:\n    preStop:\n      exec:\n        command: [sleep, \"25\"]\n";
    let f = findings(&deployment("web", "replicas: 2", pod), "", false);
    let p = of_rule(&f, "prestop-exceeds-grace");
    assert_eq!(p.len(), 1, "{f:#?}");
    assert_eq!(p[0].path, "spec.template.spec.initContainers[0].lifecycle.preStop");
    assert!(p[0].what.contains("container proxy") && p[0].what.contains("sleeps 25 s"), "{}", p[0].what);
    assert!(p[0].what.contains("grace period of 20 s"), "{}", p[0].what);
}

#[test]
fn each_offending_container_is_named_at_its_index() {
    let pod = "terminationGracePeriodSeconds: 10\ncontainers:\n\
               - name: ok\n  image: nginx:1.27\n  lifecycle: {preStop: {sleep: {seconds: 5}}}\n\
               - name: slow\n  image: nginx:1.27\n  lifecycle: {preStop: {sleep: {seconds: 10}}}\n\
               - name: slower\n  image: nginx:1.27\n  lifecycle: {preStop: {exec: {command: [sleep, \"12\"]}}}\n";
    let f = findings(&deployment("web", "replicas: 2", pod), "", false);
    let paths: Vec<_> = of_rule(&f, "prestop-exceeds-grace").iter().map(|p| p.path.clone()).collect();
    assert_eq!(
        paths,
        ["spec.template.spec.containers[1].lifecycle.preStop", "spec.template.spec.containers[2].lifecycle.preStop"],
        "{f:#?}"
    );
}

#[test]
fn zero_grace_with_a_sleep_is_both_and_a_zero_sleep_is_neither() {
    let f = findings(&with_prestop(Some(0), &sleep_action(5)), "", false);
    assert_eq!(of_rule(&f, "termination-grace-zero").len(), 1, "{f:#?}");
    let p = of_rule(&f, "prestop-exceeds-grace");
    assert_eq!(p.len(), 1, "{f:#?}");
    assert!(p[0].what.contains("sleeps 5 s") && p[0].what.contains("grace period of 0 s"), "{}", p[0].what);
    let f = findings(&with_prestop(Some(0), &sleep_action(0)), "", false);
    assert_eq!(of_rule(&f, "termination-grace-zero").len(), 1, "{f:#?}");
    assert!(of_rule(&f, "prestop-exceeds-grace").is_empty(), "a zero sleep does not sleep: {f:#?}");
}

#[test]
fn statefulset_prestop_is_checked() {
    let pod = "containers:\n- name: db\n  image: postgres:17\n  lifecycle:\n    preStop:\n      sleep:\n        seconds: 60\n";
    let f = findings(&workload("StatefulSet", "db", "replicas: 3\nserviceName: db", pod), "", false);
    let p = of_rule(&f, "prestop-exceeds-grace");
    assert_eq!(p.len(), 1, "{f:#?}");
    assert!(p[0].what.contains("of StatefulSet default/db sleeps 60 s"), "{}", p[0].what);
}

//! End-to-end: the background audit's reports converge to the truth, and its stalls show, on a
//! real kube-apiserver (etcd + kube-apiserver; no controller runs).
//!
//! 1. `heal`: a report deleted, emptied or edited by hand is written again within seconds (the
//!    audit watches its own reports), with the results `ha-guard audit` gives.
//! 2. `revoked`: run as a ServiceAccount that may not list pods, the audit does not wait in
//!    silence: after its view's sync budget every report it writes carries an `error` result
//!    (rule `unreadable-kind`) naming Pod and the apiserver's answer, the runs fail,
//!    `ha_guard_audit_errors_total{cause="kind-unreadable"}` counts, `ha_guard_audit_leader` stays 0
//!    and no full read succeeds (`ha_guard_audit_last_full_read_timestamp_seconds` stays at the
//!    time it took the Lease: `HaGuardAuditStalled`, whose expression tests/it/alerts.rs checks
//!    with promtool, fires two intervals later).
//! 3. `restored`: the right given back, the watch follows again, the error result is gone, the
//!    leader is 1 and a full read succeeds.

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::reports::*;
use support::*;

/// ha-guard's namespace: the Lease, and the chart's ServiceAccounts.
const NS: &str = REPORTS_NS;

fn rows(cp: &ControlPlane, namespace: &str) -> Option<Vec<(String, String)>> {
    let r = report(cp, namespace)?;
    Some(
        r["results"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .map(|x| {
                        (x["rule"].as_str().unwrap_or("").to_string(), x["result"].as_str().unwrap_or("").to_string())
                    })
                    .collect()
            })
            .unwrap_or_default(),
    )
}

/// Waits until the report of `namespace` says what `ha-guard audit` says; returns how long it took.
fn agrees_within(cp: &ControlPlane, namespace: &str, within: Duration, what: &str) -> Duration {
    let started = Instant::now();
    let want = rows_of_audit(&audit_json(cp), namespace);
    poll(what, within, Duration::from_millis(200), || match report(cp, namespace) {
        Some(r) if rows_of_report(&r) == want => Ok(()),
        Some(r) => Err(format!("report {:?}\nwant {want:?}", rows_of_report(&r))),
        None => Err(format!("no report in {namespace:?}")),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    started.elapsed()
}

/// A ServiceAccount `auditor` bound to a ClusterRole `auditor` with the chart's audit rules, minus
/// pods when `pods` is false, and to the Lease Role.
fn auditor_rbac(cp: &ControlPlane, pods: bool) {
    let role = cp.kubectl(&["get", "clusterrole", "ha-guard-audit", "-o", "json"]).success().json();
    let rules: Vec<Value> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if !pods && let Some(resources) = r["resources"].as_array() {
                r["resources"] = json!(resources.iter().filter(|x| *x != "pods").cloned().collect::<Vec<_>>());
            }
            r
        })
        .filter(|r| r["resources"].as_array().is_none_or(|x| !x.is_empty()))
        .collect();
    cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&[
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "auditor", "namespace": NS}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "auditor"}, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "auditor"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "auditor"},
            "subjects": [{"kind": "ServiceAccount", "name": "auditor", "namespace": NS}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "auditor-lease", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ha-guard-audit"},
            "subjects": [{"kind": "ServiceAccount", "name": "auditor", "namespace": NS}]}),
    ])).success();
    let user = format!("system:serviceaccount:{NS}:auditor");
    let can =
        cp.kubectl(&["auth", "can-i", "list", "pods", "--all-namespaces", "--as", &user]).output().trim() == "yes";
    assert_eq!(can, pods, "auditor may list pods");
}

/// A merge patch of shop's report, as a person editing it by hand.
fn patch_report(cp: &ControlPlane, patch: &Value) {
    let patch = patch.to_string();
    cp.kubectl(&["-n", "shop", "patch", "policyreports.wgpolicyk8s.io", "ha-guard", "--type=merge", "-p", &patch])
        .success();
}

#[test]
fn reports_heal_and_stalls_show() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    for ns in [NS, "shop"] {
        cp.namespace(ns, &[]);
    }
    cp.nodes(&["n1", "n2"]);
    cp.kubectl_in(
        &["apply", "-f", "-"],
        &yaml_file(&[
            // pdb-blocks-eviction (deny): minAvailable 1 over one replica.
            deployment("shop", "lone", 1),
            pdb("shop", "lone", "lone", json!({"minAvailable": 1})),
            // host-network-colocation (deny), pdb-missing (warn).
            pod(deployment("shop", "hostnet", 2), json!({"hostNetwork": true})),
        ]),
    )
    .success();
    install_report_crds(&cp);
    install_chart_rbac(&cp);

    // 1. heal
    let audit = Reports::start(&cp, "heal", &cp.kubeconfig(), &["--interval=5m"]);
    agrees_within(&cp, "shop", WAIT, "the first report");
    let writes = audit.counter("ha_guard_audit_report_writes_total", &[]);
    cp.kubectl(&["-n", "shop", "delete", "policyreports.wgpolicyk8s.io", "ha-guard"]).success();
    let took = agrees_within(&cp, "shop", Duration::from_secs(15), "a deleted report is restored");
    eprintln!("[e2e] 1 heal: deleted, restored in {took:?}");
    let emptied = json!({"results": [], "summary": {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}});
    patch_report(&cp, &emptied);
    let took = agrees_within(&cp, "shop", Duration::from_secs(15), "an emptied report is restored");
    eprintln!("[e2e] 1 heal: emptied, restored in {took:?}");
    let mut edited = report(&cp, "shop").expect("the report");
    for r in edited["results"].as_array_mut().expect("results") {
        r["result"] = json!("pass");
    }
    let patch = json!({"results": edited["results"]});
    patch_report(&cp, &patch);
    let took = agrees_within(&cp, "shop", Duration::from_secs(15), "an edited report is restored");
    eprintln!("[e2e] 1 heal: edited, restored in {took:?}");
    // Each fault cost one write; its own writes coming back through the watch cost none.
    std::thread::sleep(Duration::from_secs(3));
    let now = audit.counter("ha_guard_audit_report_writes_total", &[]);
    assert_eq!(now - writes, 3.0, "one write per fault:\n{}", audit.log_tail());
    audit.stop();

    // 2. revoked: may not list pods.
    auditor_rbac(&cp, false);
    let auditor = token_kubeconfig(&cp, "auditor");
    let audit = Reports::start(&cp, "revoked", &auditor, &["--interval=30s"]);
    let started = Instant::now();
    let error_row = ("unreadable-kind".to_string(), "error".to_string());
    poll(
        "the report names the kind it cannot read",
        Duration::from_secs(90),
        Duration::from_millis(500),
        || match rows(&cp, "shop") {
            Some(rows) if rows.contains(&error_row) => Ok(()),
            other => Err(format!("rows {other:?}")),
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", audit.log_tail()));
    eprintln!("[e2e] 2 revoked: an error result after {:?}", started.elapsed());
    let r = report(&cp, "shop").expect("report");
    let error =
        r["results"].as_array().unwrap().iter().find(|x| x["rule"] == "unreadable-kind").expect("the error").clone();
    assert_eq!(error["resources"], json!([{"apiVersion": "v1", "kind": "Pod"}]), "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("Pod objects") && message.contains("forbidden"),
        "names the kind and the answer: {message}"
    );
    assert!(
        r["results"].as_array().unwrap().iter().any(|x| x["rule"] == "pdb-blocks-eviction"),
        "the rest still judged: {r}"
    );
    let m = audit.metrics();
    assert!(m.sum("ha_guard_audit_errors_total", &[("cause", "kind-unreadable")]) >= 1.0, "{}", audit.log_tail());
    assert!(m.sum("ha_guard_audit_runs_total", &[("result", "failure")]) >= 1.0);
    assert_eq!(m.sum("ha_guard_audit_leader", &[]), 0.0, "not leading before its view synced");
    let took_lease = m.sum("ha_guard_audit_last_full_read_timestamp_seconds", &[]);
    assert!(took_lease > 0.0, "set when it took the Lease");

    // 3. restored
    auditor_rbac(&cp, true);
    let restored = Instant::now();
    poll("the error result is gone", Duration::from_secs(150), Duration::from_millis(500), || {
        match rows(&cp, "shop") {
            Some(rows) if !rows.contains(&error_row) => Ok(()),
            other => Err(format!("rows {other:?}")),
        }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", audit.log_tail()));
    eprintln!("[e2e] 3 restored: the error result gone after {:?}", restored.elapsed());
    agrees_within(&cp, "shop", WAIT, "the report agrees with ha-guard audit again");
    poll("a full read succeeds and the replica leads", Duration::from_secs(60), Duration::from_millis(500), || {
        let m = audit.metrics();
        let (leader, full) =
            (m.sum("ha_guard_audit_leader", &[]), m.sum("ha_guard_audit_last_full_read_timestamp_seconds", &[]));
        if leader == 1.0 && full > took_lease { Ok(()) } else { Err(format!("leader {leader}, last full read {full}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", audit.log_tail()));
    audit.stop();
}

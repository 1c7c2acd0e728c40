//! End-to-end: `ha-guard reports`, the background audit as a process of its own, against a real
//! kube-apiserver: what it costs (nothing for noise, one namespace for a change), who may read
//! what (the chart's two ServiceAccounts), and that its failures show.
//!
//! One control plane (etcd + kube-apiserver; no controller runs, so every status is written by
//! the test). Steps:
//! 1. `crd-missing`: without the report CRDs, a run is a success that writes nothing and counts
//!    `ha_guard_audit_errors_total{cause="crd-missing"}`.
//! 2. `synced`: with them, every namespace's report says what `ha-guard audit` says.
//! 3. `noise`: 10 status-only updates of an HPA, 10 of a Deployment, 5 node heartbeats start no
//!    run, read nothing and write nothing (`ha_guard_audit_runs_total`, `_reads_total`,
//!    `_report_writes_total`), each counted as ignored (`ha_guard_audit_changes_total`).
//! 4. `fix`: scaling one Deployment of `shop` re-reads `shop` alone and rewrites its report
//!    alone, within 15 s; `bank`'s and `calm`'s reports keep their resourceVersion.
//! 5. `decode`: a ScaledObject the engine cannot read is an `error` result in its namespace's
//!    report, counted (`cause="decode"`), and the rest of the namespace is still judged.
//! 6. `truncated`: a report over the size limit keeps its most severe results and the summary of
//!    all, says so in an annotation, and counts `cause="report-truncated"`.
//! 7. `namespace-gone`: a namespace deleted between the read and the write is counted as such,
//!    not as a missing CRD, and is not a failed run.
//! 8. `rbac`: the chart's webhook ServiceAccount is refused `list pods` (SelfSubjectAccessReview
//!    and a real 403), the audit's is allowed; run as a ServiceAccount that may not write reports,
//!    the runs fail and `cause="write"` counts.
//! 9. `alerts`: the chart's PrometheusRule expressions, evaluated by promtool over the series the
//!    processes above exposed, fire for the failed writes and runs and for no Lease holder.
//! 10. `webhook`: the webhook answers (its warning shown by kubectl) while the audit process is
//!     killed.

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::reports::*;
use support::*;

/// ha-guard's namespace: the Lease, and the chart's ServiceAccounts.
const NS: &str = REPORTS_NS;

fn resource_version(report: &Value) -> String {
    report["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string()
}

/// Waits until the report of `namespace` says what `ha-guard audit` says about it now.
fn reports_agree(cp: &ControlPlane, namespace: &str, within: Duration) -> Value {
    poll(&format!("the report of {namespace:?} agrees with ha-guard audit"), within, Duration::from_millis(200), || {
        let want = rows_of_audit(&audit_json(cp), namespace);
        match report(cp, namespace) {
            Some(r) if rows_of_report(&r) == want => Ok(r),
            Some(r) => Err(format!("report {:?}\nwant {want:?}", rows_of_report(&r))),
            None => Err(format!("no report in {namespace:?} yet")),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn objects(ns: &str) -> Vec<Value> {
    vec![
        // pdb-blocks-eviction (deny): minAvailable 1 over one replica.
        deployment(ns, "lone", 1),
        pdb(ns, "lone", "lone", json!({"minAvailable": 1})),
        // host-network-colocation (deny), pdb-missing (warn); an HPA whose status the test writes.
        pod(deployment(ns, "hostnet", 2), json!({"hostNetwork": true})),
        hpa(ns, "hostnet", "hostnet", 2, 4),
    ]
}

/// KEDA's ScaledObject CRD as permissive as a CRD can be: any spec is stored.
fn install_scaled_object_crd(cp: &ControlPlane) {
    cp.apply(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "scaledobjects.keda.sh"},
        "spec": {"group": "keda.sh", "scope": "Namespaced",
            "names": {"kind": "ScaledObject", "plural": "scaledobjects", "singular": "scaledobject", "listKind": "ScaledObjectList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}))
    .success();
    cp.kubectl(&["wait", "--for", "condition=established", "--timeout=30s", "crd/scaledobjects.keda.sh"]).success();
}

/// `kubectl auth can-i` as `service_account` (a SelfSubjectAccessReview under impersonation).
fn can_i(cp: &ControlPlane, service_account: &str, verb: &str, resource: &str) -> bool {
    let user = format!("system:serviceaccount:{NS}:{service_account}");
    let k = cp.kubectl(&["auth", "can-i", verb, resource, "--all-namespaces", "--as", &user]);
    k.output().trim() == "yes"
}

#[test]
fn reports_cost_what_changed_and_their_failures_show() {
    let mut cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    for ns in [NS, "shop", "bank", "calm"] {
        cp.namespace(ns, &[]);
    }
    cp.nodes(&["n1", "n2"]);
    let mut docs = objects("shop");
    docs.extend(objects("bank"));
    docs.push(spread_out(deployment("calm", "web", 3)));
    docs.push(pdb("calm", "web", "web", json!({"maxUnavailable": 1})));
    cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&docs)).success();
    let admin = cp.kubeconfig();

    // 1. No report CRDs: a successful run that writes nothing, counted.
    let first = Reports::start(&cp, "first", &admin, &[]);
    poll("a run without the report CRDs", WAIT, Duration::from_millis(200), || {
        let m = first.metrics();
        let (missing, ok) = (
            m.sum("ha_guard_audit_errors_total", &[("cause", "crd-missing")]),
            m.sum("ha_guard_audit_runs_total", &[("result", "success")]),
        );
        if missing >= 1.0 && ok >= 1.0 { Ok(()) } else { Err(format!("crd-missing {missing}, successful runs {ok}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", first.log_tail()));
    assert_eq!(first.counter("ha_guard_audit_report_writes_total", &[]), 0.0);
    assert_eq!(first.counter("ha_guard_audit_runs_total", &[("result", "failure")]), 0.0, "not a failure");
    // Its memory in 4 KiB pages: transparent huge pages made the idle audit grow by a quarter.
    let status = std::fs::read_to_string(format!("/proc/{}/status", first.child.id())).expect("its /proc status");
    assert!(status.contains("THP_enabled:\t0"), "THP off for the reports process:\n{status}");
    first.stop();
    eprintln!("[e2e] 1 crd-missing: counted, the run a success");

    // 2. The reports say what `ha-guard audit` says.
    install_report_crds(&cp);
    install_scaled_object_crd(&cp);
    let main = Reports::start(&cp, "main", &admin, &["--report-bytes-max=6000"]);
    for ns in ["shop", "bank", "calm"] {
        reports_agree(&cp, ns, WAIT);
    }
    let settled = |what: &str| {
        // Runs settle: the count stops moving for 3 s.
        let mut last = -1.0;
        poll(what, WAIT, Duration::from_secs(3), || {
            let runs = main.counter("ha_guard_audit_runs_total", &[]);
            if runs == last {
                Ok(())
            } else {
                last = runs;
                Err(format!("runs {runs}"))
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    };
    settled("the first full read is done");
    let m0 = main.metrics();
    assert_eq!(m0.sum("ha_guard_audit_reads_total", &[("scope", "cluster")]), 1.0, "one full read");
    eprintln!("[e2e] 2 synced: every report agrees with ha-guard audit");

    // 3. Status-only noise: nothing starts.
    for i in 0..10 {
        let replicas = 2 + i % 2;
        cp.kubectl(&[
            "-n",
            "shop",
            "patch",
            "hpa",
            "hostnet",
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({"status": {"currentReplicas": replicas, "desiredReplicas": replicas}}).to_string(),
        ])
        .success();
        cp.kubectl(&[
            "-n",
            "shop",
            "patch",
            "deployment",
            "hostnet",
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({"status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": i % 3, "updatedReplicas": 2}})
                .to_string(),
        ])
        .success();
    }
    for i in 0..5 {
        let now = format!("2026-12-05T10:00:{i:02}Z");
        cp.kubectl(&[
            "patch",
            "node",
            "n1",
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": now, "lastTransitionTime": "2026-12-05T09:00:00Z"}]}})
            .to_string(),
        ])
        .success();
    }
    std::thread::sleep(Duration::from_secs(4));
    let m1 = main.metrics();
    let ignored =
        |m: &Metrics, kind: &str| m.sum("ha_guard_audit_changes_total", &[("kind", kind), ("effect", "ignored")]);
    assert!(ignored(&m1, "HorizontalPodAutoscaler") >= 10.0, "{:?}", m1.all("ha_guard_audit_changes_total", &[]));
    assert!(ignored(&m1, "Deployment") >= 10.0, "{:?}", m1.all("ha_guard_audit_changes_total", &[]));
    assert!(ignored(&m1, "Node") >= 5.0, "{:?}", m1.all("ha_guard_audit_changes_total", &[]));
    for (name, labels) in [
        ("ha_guard_audit_runs_total", vec![]),
        ("ha_guard_audit_reads_total", vec![]),
        ("ha_guard_audit_report_writes_total", vec![]),
    ] {
        assert_eq!(m1.sum(name, &labels), m0.sum(name, &labels), "{name}: noise started work\n{}", main.log_tail());
    }
    eprintln!("[e2e] 3 noise: 10 HPA, 10 Deployment status updates and 5 heartbeats started no run");

    // 4. A fix in shop re-reads and rewrites shop alone.
    let before: Vec<String> =
        ["bank", "calm", ""].iter().map(|ns| resource_version(&report(&cp, ns).expect("report"))).collect();
    let changed_at = Instant::now();
    cp.kubectl(&["-n", "shop", "scale", "deployment", "lone", "--replicas=2"]).success();
    let shop = reports_agree(&cp, "shop", Duration::from_secs(15));
    let took = changed_at.elapsed();
    assert!(
        !rows_of_report(&shop).iter().any(|(_, rule, _, _, name)| rule == "pdb-blocks-eviction" && name == "lone"),
        "{shop}"
    );
    settled("the change's run is done");
    let m2 = main.metrics();
    assert_eq!(
        m2.sum("ha_guard_audit_report_writes_total", &[]),
        m1.sum("ha_guard_audit_report_writes_total", &[]) + 1.0,
        "one report written"
    );
    assert_eq!(
        m2.sum("ha_guard_audit_reads_total", &[("scope", "namespace")]),
        m1.sum("ha_guard_audit_reads_total", &[("scope", "namespace")]) + 1.0,
        "one namespace read"
    );
    assert_eq!(m2.sum("ha_guard_audit_reads_total", &[("scope", "cluster")]), 1.0, "no full read");
    let after: Vec<String> =
        ["bank", "calm", ""].iter().map(|ns| resource_version(&report(&cp, ns).expect("report"))).collect();
    assert_eq!(before, after, "bank's, calm's and the cluster's reports were not written");
    eprintln!("[e2e] 4 fix: shop's report rewritten alone in {} ms", took.as_millis());

    // 5. An unreadable ScaledObject: an error result, the rest judged.
    cp.apply(json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "odd", "namespace": "bank"},
        "spec": {"scaleTargetRef": {"name": "hostnet"}, "minReplicaCount": "three"}}))
        .success();
    let bank = poll(
        "bank's report names the unreadable ScaledObject",
        Duration::from_secs(15),
        Duration::from_millis(200),
        || {
            let r = report(&cp, "bank").ok_or("no report")?;
            let rows = rows_of_report(&r);
            if rows.contains(&("bank".into(), "unreadable".into(), "error".into(), "ScaledObject".into(), "odd".into()))
            {
                Ok(r)
            } else {
                Err(format!("{rows:?}"))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", main.log_tail()));
    let odd = bank["results"].as_array().unwrap().iter().find(|r| r["rule"] == "unreadable").unwrap().clone();
    assert!(odd["message"].as_str().unwrap_or_default().contains("minReplicaCount"), "{odd}");
    assert_eq!(bank["summary"]["error"], 1, "{}", bank["summary"]);
    assert!(rows_of_report(&bank).iter().any(|(_, rule, _, _, name)| rule == "pdb-blocks-eviction" && name == "lone"));
    assert!(main.counter("ha_guard_audit_errors_total", &[("cause", "decode")]) >= 1.0);
    eprintln!("[e2e] 5 decode: the ScaledObject reported as unreadable, bank still judged");

    // 6. Over the size limit (6,000 bytes here): the most severe kept, the summary whole, said.
    let many: Vec<Value> =
        (0..12).map(|i| pod(deployment("calm", &format!("hostnet-{i}"), 2), json!({"hostNetwork": true}))).collect();
    cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&many)).success();
    let calm = poll("calm's report is cut", Duration::from_secs(15), Duration::from_millis(200), || {
        let r = report(&cp, "calm").ok_or("no report")?;
        match r["metadata"]["annotations"]["ha-guard.io/truncated"].as_str() {
            Some(_) => Ok(r),
            None => Err(format!("{} results", r["results"].as_array().map_or(0, Vec::len))),
        }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", main.log_tail()));
    let kept = calm["results"].as_array().unwrap().len() as i64;
    let summary = &calm["summary"];
    let total = ["fail", "warn", "error", "skip"].iter().map(|k| summary[k].as_i64().unwrap_or(0)).sum::<i64>();
    let want = rows_of_audit(&audit_json(&cp), "calm").len() as i64;
    assert_eq!(total, want, "the summary counts every result: {summary}");
    assert!(kept < total, "kept {kept} of {total}");
    let note = calm["metadata"]["annotations"]["ha-guard.io/truncated"].as_str().unwrap();
    assert!(
        note.contains(&format!("{kept} of {total} results kept")) && note.contains("ha-guard audit -n calm"),
        "{note}"
    );
    assert!(main.counter("ha_guard_audit_errors_total", &[("cause", "report-truncated")]) >= 1.0);
    eprintln!("[e2e] 6 truncated: {kept} of {total} results kept, said");

    // 7. A namespace deleted between the read and the write (no namespace controller runs here, so
    // it stays Terminating: its objects are still listed, a new report cannot be created).
    let failures = main.counter("ha_guard_audit_runs_total", &[("result", "failure")]);
    let missing = main.counter("ha_guard_audit_errors_total", &[("cause", "crd-missing")]);
    cp.namespace("brief", &[]);
    cp.apply(deployment("brief", "lone", 1)).success();
    cp.kubectl(&["delete", "namespace", "brief", "--wait=false"]).success();
    poll("the vanished namespace is counted", Duration::from_secs(15), Duration::from_millis(200), || {
        let n = main.counter("ha_guard_audit_errors_total", &[("cause", "namespace-gone")]);
        if n >= 1.0 { Ok(()) } else { Err(format!("namespace-gone {n}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", main.log_tail()));
    assert_eq!(main.counter("ha_guard_audit_errors_total", &[("cause", "crd-missing")]), missing, "not a missing CRD");
    assert_eq!(main.counter("ha_guard_audit_runs_total", &[("result", "failure")]), failures, "not a failure");
    eprintln!("[e2e] 7 namespace-gone: counted, not a missing CRD");

    // 8. RBAC: the webhook's ServiceAccount cannot list pods, the audit's can.
    install_chart_rbac(&cp);
    assert!(!can_i(&cp, "ha-guard", "list", "pods"), "the webhook's ServiceAccount lists pods");
    assert!(!can_i(&cp, "ha-guard", "list", "replicasets"));
    assert!(can_i(&cp, "ha-guard-audit", "list", "pods"));
    assert!(can_i(&cp, "ha-guard-audit", "watch", "pods"));
    let webhook_sa = token_kubeconfig(&cp, "ha-guard");
    let refused = kubectl(&webhook_sa, &["get", "pods", "-A"], None);
    assert!(!refused.ok() && refused.output().contains("Forbidden"), "{}", refused.output());
    let audit_sa = token_kubeconfig(&cp, "ha-guard-audit");
    kubectl(&audit_sa, &["get", "pods", "-A"], None).success();
    eprintln!("[e2e] 8 rbac: list pods refused to the webhook (403), allowed to the audit");
    // The chart's audit ServiceAccount runs the audit (the main one stops: one Lease).
    main.stop();
    let audit = Reports::start(&cp, "chart-sa", &audit_sa, &[]);
    poll("the audit runs as the chart's ServiceAccount", WAIT, Duration::from_millis(200), || {
        let ok = audit.counter("ha_guard_audit_runs_total", &[("result", "success")]);
        if ok >= 1.0 { Ok(()) } else { Err(format!("successful runs {ok}")) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", audit.log_tail()));
    assert_eq!(audit.counter("ha_guard_audit_runs_total", &[("result", "failure")]), 0.0, "{}", audit.log_tail());
    let series_ok = audit.metrics();
    audit.stop();
    // A ServiceAccount that reads as the audit's does but may not write reports: failed runs.
    let reader_rules: Vec<Value> = {
        let role = cp.kubectl(&["get", "clusterrole", "ha-guard-audit", "-o", "json"]).success().json();
        role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter(|r| {
                !r["apiGroups"].to_string().contains("wgpolicyk8s.io")
                    && !r["apiGroups"].to_string().contains("openreports.io")
            })
            .cloned()
            .collect()
    };
    cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&[
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": NS}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"},
            "rules": reader_rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader-lease", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ha-guard-audit"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}]}),
    ])).success();
    let reader = Reports::start(&cp, "reader", &token_kubeconfig(&cp, "reader"), &[]);
    poll("runs that cannot write fail", WAIT, Duration::from_millis(200), || {
        let m = reader.metrics();
        let (failed, writes) = (
            m.sum("ha_guard_audit_runs_total", &[("result", "failure")]),
            m.sum("ha_guard_audit_errors_total", &[("cause", "write")]),
        );
        if failed >= 1.0 && writes >= 1.0 {
            Ok(())
        } else {
            Err(format!("failed runs {failed}, write errors {writes}"))
        }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", reader.log_tail()));
    assert_eq!(reader.counter("ha_guard_audit_runs_total", &[("result", "success")]), 0.0);
    let series_failing = reader.metrics();
    eprintln!("[e2e] 8 write: a run whose writes are refused is a failure, counted");

    // 9. The chart's alerts over these series.
    alerts_fire(&cp, &series_ok, &series_failing);
    eprintln!("[e2e] 9 alerts: writes failing, runs failing and no Lease holder fire; none on the healthy series");

    // 10. The webhook answers while the audit is killed.
    let webhook = HaGuard::start(&cp).unwrap_or_else(|e| panic!("webhook: {e}"));
    register(&cp, &webhook, &[Webhooks::Validating]).unwrap_or_else(|e| panic!("register: {e}"));
    drop(reader);
    let k = cp.apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "abrupt", "namespace": "shop"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "abrupt"}},
            "template": {"metadata": {"labels": {"app": "abrupt"}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "i"}]}}}}));
    k.success().warns(&["termination-grace-zero"]);
    eprintln!("[e2e] 10 webhook: answered with the audit process killed");
    cp.stop().unwrap_or_else(|e| panic!("{e}"));
}

/// promtool's verdict on the chart's audit alerts over series made of what the processes exposed:
/// the healthy process's counters steady, the failing one's growing as measured, and then no
/// leader at all.
fn alerts_fire(cp: &ControlPlane, healthy: &Metrics, failing: &Metrics) {
    let promtool = promtool();
    let helm = helm().unwrap_or_else(|e| panic!("helm: {e}"));
    let chart = repo().join("charts/ha-guard");
    let out = Command::new(helm)
        .args([
            "template",
            "ha-guard",
            chart.to_str().expect("path"),
            "--namespace",
            NS,
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ])
        .output()
        .expect("helm template");
    assert!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
    let rule = yaml_docs(&String::from_utf8_lossy(&out.stdout)).into_iter().next().expect("the PrometheusRule");
    let dir = cp.dir().join("alerts");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("rules.yaml"), serde_json::to_string(&json!({"groups": rule["spec"]["groups"]})).unwrap())
        .expect("rules");
    // Each series over 20 minutes, one sample a minute: the value measured, held (healthy) or
    // reached from 0 in the first minute (failing).
    let series = |name: &str, labels: &str, from: f64, to: f64| {
        json!({"series": format!("{name}{{job=\"ha-guard-audit\", namespace=\"{NS}\", pod=\"p\"{labels}}}"),
            "values": format!("{from} {to}x20")})
    };
    let value = |m: &Metrics, name: &str, labels: &[(&str, &str)]| m.sum(name, labels);
    let failed_runs = value(failing, "ha_guard_audit_runs_total", &[("result", "failure")]);
    let write_errors = value(failing, "ha_guard_audit_errors_total", &[("cause", "write")]);
    assert!(failed_runs >= 1.0 && write_errors >= 1.0);
    let ok_runs = value(healthy, "ha_guard_audit_runs_total", &[("result", "success")]);
    // The annotations an alert of the rendered rule has, for pod `p` (promtool compares them too).
    let annotations = |alert: &str| -> Value {
        let rule = rule["spec"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .find(|r| r["alert"] == alert)
            .unwrap_or_else(|| panic!("no alert {alert} in the chart's PrometheusRule"));
        let mut a = rule["annotations"].clone();
        for v in a.as_object_mut().expect("annotations").values_mut() {
            *v = json!(v.as_str().unwrap_or_default().replace("{{ $labels.pod }}", "p"));
        }
        a
    };
    let tests = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {   // The failing process: writes and runs fail.
                "interval": "1m",
                "input_series": [
                    series("ha_guard_audit_runs_total", ", result=\"failure\"", 0.0, failed_runs),
                    series("ha_guard_audit_errors_total", ", cause=\"write\"", 0.0, write_errors),
                    series("ha_guard_audit_leader", "", 1.0, 1.0),
                ],
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": "HaGuardAuditRunsFailing",
                     "exp_alerts": [{"exp_labels": {"job": "ha-guard-audit", "namespace": NS, "pod": "p", "result": "failure", "severity": "warning"},
                        "exp_annotations": annotations("HaGuardAuditRunsFailing")}]},
                    {"eval_time": "5m", "alertname": "HaGuardAuditReportWritesFailing",
                     "exp_alerts": [{"exp_labels": {"job": "ha-guard-audit", "namespace": NS, "pod": "p", "cause": "write", "severity": "warning"},
                        "exp_annotations": annotations("HaGuardAuditReportWritesFailing")}]},
                    {"eval_time": "5m", "alertname": "HaGuardAuditNoLeader", "exp_alerts": []},
                ]
            },
            {   // The healthy process: nothing fires.
                "interval": "1m",
                "input_series": [
                    series("ha_guard_audit_runs_total", ", result=\"success\"", ok_runs, ok_runs),
                    series("ha_guard_audit_runs_total", ", result=\"failure\"", 0.0, 0.0),
                    series("ha_guard_audit_errors_total", ", cause=\"write\"", 0.0, 0.0),
                    series("ha_guard_audit_leader", "", 1.0, 1.0),
                ],
                "alert_rule_test": [
                    {"eval_time": "15m", "alertname": "HaGuardAuditRunsFailing", "exp_alerts": []},
                    {"eval_time": "15m", "alertname": "HaGuardAuditReportWritesFailing", "exp_alerts": []},
                    {"eval_time": "15m", "alertname": "HaGuardAuditNoLeader", "exp_alerts": []},
                ]
            },
            {   // Two replicas up, neither holding the Lease (the audit processes stopped above
                // hold none either) for longer than two intervals.
                "interval": "1m",
                "input_series": [
                    {"series": format!("ha_guard_audit_leader{{job=\"ha-guard-audit\", namespace=\"{NS}\", pod=\"a\"}}"), "values": "0x30"},
                    {"series": format!("ha_guard_audit_leader{{job=\"ha-guard-audit\", namespace=\"{NS}\", pod=\"b\"}}"), "values": "0x30"},
                ],
                "alert_rule_test": [
                    {"eval_time": "25m", "alertname": "HaGuardAuditNoLeader",
                     "exp_alerts": [{"exp_labels": {"severity": "warning"}, "exp_annotations": annotations("HaGuardAuditNoLeader")}]},
                ]
            }
        ]
    });
    std::fs::write(dir.join("tests.yaml"), serde_json::to_string(&tests).unwrap()).expect("tests");
    let out =
        Command::new(promtool).args(["test", "rules", "tests.yaml"]).current_dir(&dir).output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}\nrules: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(dir.join("rules.yaml")).unwrap_or_default()
    );
}

/// The pinned promtool, built from the Go module proxy by tests/e2e/promtool/build.sh.
fn promtool() -> PathBuf {
    let script = repo().join("tests/e2e/promtool/build.sh");
    let out = Command::new(&script).stdin(Stdio::null()).output().expect("run promtool/build.sh");
    assert!(out.status.success(), "{}: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().expect("the path").trim())
}

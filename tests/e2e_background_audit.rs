//! End-to-end: `serve --audit-interval`, the background audit, against a real kube-apiserver
//! (issue 15, acceptance 3): two replicas, one Lease, PolicyReports as Policy Reporter reads them.
//!
//! The report CRDs are installed from the chart's `crds/` folder, as `helm install` installs
//! them. No webhook is registered (the objects are stored as a cluster that predates ha-guard
//! stores them), so no write goes through ha-guard and there is no fail-open to count.
//!
//! Steps (one control plane, two replicas `a` and `b` with `--audit-interval 2s`):
//! 1. `reports`: a PolicyReport `ha-guard` per namespace whose results are exactly `ha-guard audit
//!    --format json`'s findings (deny → fail, warn → warn, allowed → skip with the exemption's
//!    reason), a clean namespace's report with no result, the ClusterPolicyReport with the
//!    fail-closed webhook configuration (and the `default` namespace's, for its `kubernetes` Service).
//! 2. `one-writer`: the Lease holder alone has written reports and shows the gauge
//!    `ha_guard_audit_findings`; the other replica has written nothing and shows no finding.
//! 3. `fixed`: a fixed object's result is gone within one interval (plus the run), from the report
//!    and the gauge; a namespace whose objects are all deleted loses its report.
//! 4. `failover`: the holder stops (SIGTERM) and releases the Lease on its way out; the other
//!    replica takes the Lease and keeps the reports current.
//! 5. `openreports`: a replica with `--audit-report-api openreports.io/v1alpha1` writes the same
//!    results as Reports / a ClusterReport (`openreports.io/v1alpha1`), the chart's other CRDs.

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::reports::*;
use support::*;

/// ha-guard's namespace: where the Lease is.
const NS: &str = "ha-guard";
const INTERVAL: Duration = Duration::from_secs(2);

/// The PolicyReport `ha-guard` of `namespace` (the ClusterPolicyReport for `""`), if any.
fn report(cp: &ControlPlane, namespace: &str) -> Option<Value> {
    report_of(cp, ("policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"), namespace)
}

/// The report `ha-guard` of `namespace` (the cluster-scoped one for `""`) among `resources`
/// (namespaced, cluster-scoped), if any.
fn report_of(cp: &ControlPlane, resources: (&str, &str), namespace: &str) -> Option<Value> {
    let k = if namespace.is_empty() {
        cp.kubectl(&["get", resources.1, "ha-guard", "-o", "json"])
    } else {
        cp.kubectl(&["-n", namespace, "get", resources.0, "ha-guard", "-o", "json"])
    };
    k.ok().then(|| k.json())
}

fn objects(ns: &str) -> Vec<Value> {
    let mut exempted = pdb(ns, "legacy", "legacy", json!({"minAvailable": 1}));
    exempted["metadata"]["annotations"] =
        json!({"ha-guard.io/allow-pdb-blocks-eviction": "singleton by design, drained by hand"});
    vec![
        // pdb-blocks-eviction (deny): minAvailable 1 over one replica.
        deployment(ns, "lone", 1),
        pdb(ns, "lone", "lone", json!({"minAvailable": 1})),
        // host-network-colocation (deny), replicas-colocated and pdb-missing (warn).
        pod(deployment(ns, "hostnet", 2), json!({"hostNetwork": true})),
        // The same as `lone`, exempted: a skip result with its reason.
        deployment(ns, "legacy", 1),
        exempted,
    ]
}

/// A namespace with nothing wrong.
fn clean(ns: &str) -> Vec<Value> {
    vec![spread_out(deployment(ns, "web", 3)), pdb(ns, "web", "web", json!({"maxUnavailable": 1}))]
}

fn fail_closed_webhook() -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "legacy-policy"},
        "webhooks": [{"name": "legacy.example.com", "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["widgets"]}]}]})
}

fn start_replica(cp: &ControlPlane, name: &str, extra: &[&str]) -> HaGuard {
    let mut spec = Spec::new(cp, name);
    spec.args = vec!["--audit-interval".into(), format!("{}s", INTERVAL.as_secs())];
    spec.args.extend(extra.iter().map(|a| a.to_string()));
    spec.env = vec![("POD_NAMESPACE".into(), NS.into())];
    HaGuard::start_spec(cp, &spec).unwrap_or_else(|e| panic!("ha-guard {name}: {e}"))
}

fn writes(hg: &HaGuard) -> f64 {
    hg.metrics().get("ha_guard_audit_report_writes_total", &[]).unwrap_or(0.0)
}

fn leader(hg: &HaGuard) -> bool {
    hg.metrics().get("ha_guard_audit_leader", &[]) == Some(1.0)
}

/// The Lease's holder.
fn holder(cp: &ControlPlane) -> String {
    let lease = cp.kubectl(&["-n", NS, "get", "lease", "ha-guard-audit", "-o", "json"]).success().json();
    lease["spec"]["holderIdentity"].as_str().unwrap_or_default().to_string()
}

/// Waits until the report of `namespace` says what `ha-guard audit` says about it now.
fn reports_agree(cp: &ControlPlane, namespace: &str, what: &str) -> Value {
    poll(what, WAIT, Duration::from_millis(200), || {
        let want = rows_of_audit(&audit_json(cp), namespace);
        match report(cp, namespace) {
            Some(r) if rows_of_report(&r) == want => Ok(r),
            Some(r) => Err(format!("report {:?}\nwant {want:?}", rows_of_report(&r))),
            None => Err(format!("no report in {namespace:?} yet")),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn reports(cp: &ControlPlane) {
    let shop = reports_agree(cp, "shop", "the PolicyReport of shop says what ha-guard audit says");
    let rows = rows_of_report(&shop);
    let row = |rule: &str, result: &str, kind: &str, name: &str| {
        ("shop".to_string(), rule.to_string(), result.to_string(), kind.to_string(), name.to_string())
    };
    for want in [
        row("pdb-blocks-eviction", "fail", "PodDisruptionBudget", "lone"),
        row("host-network-colocation", "fail", "Deployment", "hostnet"),
        row("replicas-colocated", "warn", "Deployment", "hostnet"),
        row("pdb-missing", "warn", "Deployment", "hostnet"),
        row("pdb-blocks-eviction", "skip", "PodDisruptionBudget", "legacy"),
    ] {
        assert!(rows.contains(&want), "{want:?} in {rows:?}");
    }
    let results = shop["results"].as_array().expect("results");
    let skipped = results.iter().find(|r| r["result"] == "skip").expect("a skip result");
    let message = skipped["message"].as_str().unwrap_or_default();
    assert!(message.contains("singleton by design, drained by hand"), "the exemption's reason: {skipped}");
    let lone = results.iter().find(|r| r["resources"][0]["name"] == "lone").expect("lone's result");
    assert!(lone["message"].as_str().unwrap_or_default().contains("minAvailable"), "{lone}");
    for r in results {
        assert_eq!((&r["policy"], &r["source"]), (&json!("ha-guard"), &json!("ha-guard")), "{r}");
        assert!(r["timestamp"]["seconds"].as_i64().unwrap_or(0) > 1_700_000_000, "{r}");
    }
    let count = |result: &str| results.iter().filter(|r| r["result"] == result).count();
    assert_eq!(
        shop["summary"],
        json!({"pass": 0, "fail": count("fail"), "warn": count("warn"), "error": 0, "skip": count("skip")})
    );
    assert!(count("fail") >= 2 && count("warn") >= 2 && count("skip") == 1, "{}", shop["summary"]);
    // README's Day 2 commands, as written.
    let listed = cp.kubectl(&["get", "policyreports", "-A"]).success().stdout;
    eprintln!("[e2e] kubectl get policyreports -A:\n{listed}");
    let shop_line = listed.lines().find(|l| l.starts_with("shop ")).unwrap_or_default().to_string();
    let columns: Vec<&str> = shop_line.split_whitespace().collect();
    assert_eq!(
        columns.get(2..7).map(<[&str]>::to_vec),
        Some(vec!["0", &count("fail").to_string(), &count("warn").to_string(), "0", &count("skip").to_string()]),
        "PASS FAIL WARN ERROR SKIP of shop: {listed}"
    );
    let yaml = cp.kubectl(&["-n", "shop", "get", "policyreport", "ha-guard", "-o", "yaml"]).success().stdout;
    assert!(yaml.contains("rule: pdb-blocks-eviction") && yaml.contains("result: fail"), "{yaml}");

    // A clean namespace: a report with no result.
    let calm = reports_agree(cp, "calm", "the clean namespace's report");
    assert_eq!(calm["results"].as_array().map_or(0, Vec::len), 0, "{calm}");
    assert_eq!(calm["summary"]["fail"], 0);

    // Cluster-scoped: the webhook configuration.
    let cluster = reports_agree(cp, "", "the ClusterPolicyReport");
    let yaml = cp.kubectl(&["get", "clusterpolicyreport", "ha-guard", "-o", "yaml"]).success().stdout;
    assert!(yaml.contains("rule: webhook-fail-closed-unavailable"), "{yaml}");
    let rows = rows_of_report(&cluster);
    assert!(
        rows.contains(&(
            String::new(),
            "webhook-fail-closed-unavailable".into(),
            "warn".into(),
            "ValidatingWebhookConfiguration".into(),
            "legacy-policy".into()
        )),
        "{rows:?}"
    );
}

/// The holder and the other, by the Lease and by their metrics.
fn holder_and_other<'a>(cp: &ControlPlane, a: &'a HaGuard, b: &'a HaGuard) -> (&'a HaGuard, &'a HaGuard) {
    let holder = holder(cp);
    let is = |hg: &HaGuard| holder.ends_with(&format!("_{}", hg.pid().expect("running")));
    match (is(a), is(b)) {
        (true, false) => (a, b),
        (false, true) => (b, a),
        _ => panic!("the Lease is held by {holder:?}, neither a ({:?}) nor b ({:?})", a.pid(), b.pid()),
    }
}

fn one_writer(cp: &ControlPlane, a: &HaGuard, b: &HaGuard) {
    let (holder, other) = holder_and_other(cp, a, b);
    assert!(leader(holder) && !leader(other), "ha_guard_audit_leader: 1 on the holder only");
    assert!(writes(holder) >= 3.0, "the holder wrote shop's, calm's and the cluster's reports: {}", writes(holder));
    assert_eq!(writes(other), 0.0, "the other replica has written no report");
    // The gauge: on the holder, as the report says; none on the other.
    let m = holder.metrics();
    let lone = [("namespace", "shop"), ("rule", "pdb-blocks-eviction"), ("action", "deny")];
    assert_eq!(m.get("ha_guard_audit_findings", &lone), Some(1.0));
    let exempted = [("namespace", "shop"), ("rule", "pdb-blocks-eviction"), ("action", "allowed")];
    assert_eq!(m.get("ha_guard_audit_findings", &exempted), Some(1.0));
    let webhook = [("namespace", ""), ("rule", "webhook-fail-closed-unavailable"), ("action", "warn")];
    assert_eq!(m.get("ha_guard_audit_findings", &webhook), Some(1.0));
    let audit = audit_json(cp);
    let total = audit["findings"].as_array().map_or(0, Vec::len) as f64;
    assert_eq!(m.sum("ha_guard_audit_findings", &[]), total, "the gauge counts every finding of ha-guard audit");
    assert_eq!(other.metrics().all("ha_guard_audit_findings", &[]), vec![], "no finding shown by the other replica");
    // Unchanged: the next runs write nothing.
    let before = writes(holder);
    std::thread::sleep(INTERVAL * 2 + Duration::from_millis(500));
    assert_eq!(writes(holder), before, "an unchanged cluster costs no report write");
    assert!(holder.metrics().get("ha_guard_audit_runs_total", &[("result", "success")]).unwrap_or(0.0) >= 2.0);
}

fn fixed(cp: &ControlPlane, a: &HaGuard, b: &HaGuard) {
    let (holder, _) = holder_and_other(cp, a, b);
    cp.kubectl(&[
        "-n",
        "shop",
        "patch",
        "pdb",
        "lone",
        "--type",
        "merge",
        "-p",
        r#"{"spec": {"minAvailable": null, "maxUnavailable": 1}}"#,
    ])
    .success();
    let fixed_at = Instant::now();
    poll("lone's result gone from the report", WAIT, Duration::from_millis(100), || {
        let r = report(cp, "shop").ok_or("no report")?;
        let rows = rows_of_report(&r);
        if rows.iter().any(|(_, rule, _, _, name)| rule == "pdb-blocks-eviction" && name == "lone") {
            Err(format!("{rows:?}"))
        } else {
            Ok(())
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let took = fixed_at.elapsed();
    eprintln!("[e2e] the fixed PDB's result was gone from the PolicyReport after {took:?} (interval {INTERVAL:?})");
    // One interval, plus the run itself and the poll.
    assert!(took <= INTERVAL + Duration::from_secs(2), "gone within one interval: {took:?}");
    let lone = [("namespace", "shop"), ("rule", "pdb-blocks-eviction"), ("action", "deny")];
    poll("the gauge's series of the fixed finding removed", WAIT, Duration::from_millis(100), || {
        match holder.metrics().get("ha_guard_audit_findings", &lone) {
            None => Ok(()),
            Some(v) => Err(format!("still {v}")),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    reports_agree(cp, "shop", "the rest of shop's report unchanged");

    // A namespace left with nothing to judge loses its report.
    cp.kubectl(&["-n", "calm", "delete", "deployment,pdb", "--all"]).success();
    poll("calm's report deleted", WAIT, Duration::from_millis(200), || match report(cp, "calm") {
        None => Ok(()),
        Some(r) => Err(format!("{r}")),
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

fn failover(cp: &ControlPlane, a: &mut HaGuard, b: &mut HaGuard) {
    let holder_pid = holder_and_other(cp, a, b).0.pid();
    let (gone, stays) = if a.pid() == holder_pid { (a, b) } else { (b, a) };
    let gone_identity = holder(cp);
    gone.stop();
    // Released on SIGTERM: by the time the process has exited, the Lease names no holder (or
    // already the other replica), rather than the stopped one until it runs out.
    let after = holder(cp);
    assert_ne!(after, gone_identity, "the stopped holder did not release the Lease");
    assert!(
        std::fs::read_to_string(gone.log_path()).unwrap_or_default().contains("the Lease released"),
        "the stopped holder says it released the Lease"
    );
    // The Lease runs out (15 s) unless released; the other replica then holds it.
    poll("the other replica takes the Lease", Duration::from_secs(40), Duration::from_millis(250), || {
        if leader(stays) { Ok(()) } else { Err(holder(cp)) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(holder(cp).ends_with(&format!("_{}", stays.pid().expect("running"))));
    cp.kubectl(&[
        "-n",
        "shop",
        "patch",
        "deployment",
        "hostnet",
        "--type",
        "json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/template/spec/hostNetwork"}]"#,
    ])
    .success();
    let shop = reports_agree(cp, "shop", "the new holder keeps shop's report current");
    assert!(!rows_of_report(&shop).iter().any(|(_, rule, _, _, _)| rule == "host-network-colocation"), "{shop}");
    assert!(writes(stays) >= 1.0, "the new holder writes");
}

/// The last wgpolicyk8s replica stops; one writing OpenReports takes over and writes the same
/// results under `openreports.io/v1alpha1`.
fn openreports(cp: &ControlPlane, running: &mut [&mut HaGuard]) -> HaGuard {
    for hg in running.iter_mut() {
        hg.stop();
    }
    let c = start_replica(cp, "c", &["--audit-report-api", "openreports.io/v1alpha1"]);
    let resources = ("reports.openreports.io", "clusterreports.openreports.io");
    for namespace in ["shop", ""] {
        let report = poll("an OpenReports report as `ha-guard audit` says", WAIT, Duration::from_millis(250), || {
            let want = rows_of_audit(&audit_json(cp), namespace);
            match report_of(cp, resources, namespace) {
                Some(r) if rows_of_report(&r) == want && !want.is_empty() => Ok(r),
                Some(r) => Err(format!("report {:?}\nwant {want:?}", rows_of_report(&r))),
                None => Err(format!("no Report in {namespace:?} yet (holder {})", holder(cp))),
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let kind = if namespace.is_empty() { "ClusterReport" } else { "Report" };
        assert_eq!(
            (report["apiVersion"].as_str(), report["kind"].as_str()),
            (Some("openreports.io/v1alpha1"), Some(kind))
        );
        assert_eq!(report["metadata"]["labels"]["app.kubernetes.io/managed-by"], "ha-guard");
    }
    let listed = cp.kubectl(&["get", "reports.openreports.io", "-A"]).success().stdout;
    eprintln!("[e2e] kubectl get reports.openreports.io -A:\n{listed}");
    assert!(listed.contains("shop"), "{listed}");
    c
}

#[test]
fn background_audit_writes_policy_reports_from_one_replica() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    cp.namespace(NS, &[]);
    install_report_crds(&cp);
    let dir = tempfile::tempdir().expect("tempdir");
    for (ns, objects) in [("shop", objects("shop")), ("calm", clean("calm"))] {
        cp.namespace(ns, &[]);
        let file = dir.path().join(format!("{ns}.yaml"));
        std::fs::write(&file, yaml_file(&objects)).expect("write manifests");
        cp.kubectl(&["apply", "-f", file.to_str().expect("path")]).success();
    }
    cp.apply(fail_closed_webhook()).success();
    let mut a = start_replica(&cp, "a", &[]);
    let mut b = start_replica(&cp, "b", &[]);
    let logs = [a.log_path(), b.log_path()];
    let mut steps = Steps::new(move || logs.iter().map(|p| format!("--- {}\n{}", p.display(), tail(p, 40))).collect());
    steps.run("reports", || reports(&cp));
    steps.run("one-writer", || one_writer(&cp, &a, &b));
    steps.run("fixed", || fixed(&cp, &a, &b));
    steps.run("failover", || failover(&cp, &mut a, &mut b));
    let mut c = None;
    steps.run("openreports", || c = Some(openreports(&cp, &mut [&mut a, &mut b])));
    a.stop();
    b.stop();
    if let Some(c) = c.as_mut() {
        c.stop();
    }
    steps.finish();
}

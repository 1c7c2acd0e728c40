//! End-to-end: `ha-guard audit --drain-each` against a rolling node upgrade done for real (issue
//! 37): on six nodes that kwok keeps, with workloads the scheduler placed and budgets the
//! disruption controller computes, each node is drained in turn with `kubectl drain` and
//! uncordoned before the next; every node's outcome must be the one `--drain-each` predicted
//! before the first drain.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");
const NS: &str = "rolling";
const NODES: [&str; 6] = ["node-1", "node-2", "node-3", "node-4", "node-5", "node-6"];

fn pods(cp: &ControlPlane) -> Vec<(String, String, String)> {
    let list = cp.kubectl(&["-n", NS, "get", "pods", "-o", "json"]).success().json();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (s(&p["metadata"]["name"]), s(&p["spec"]["nodeName"]), s(&p["status"]["phase"]))
        })
        .collect()
}

fn workload(name: &str, replicas: i64, spec: Value) -> Value {
    let mut pod = json!({"containers": [{"name": "app", "image": "nginx:1.27"}]});
    for (k, v) in spec.as_object().expect("spec") {
        pod[k] = v.clone();
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}})
}

fn budget(name: &str, fields: Value) -> Value {
    let mut spec = json!({"selector": {"matchLabels": {"app": name}}});
    for (k, v) in fields.as_object().expect("fields") {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

/// Every Deployment rolled out and no pod Pending: the cluster back at rest after an uncordon.
fn at_rest(cp: &ControlPlane) {
    poll("the workloads at rest", WAIT, Duration::from_millis(300), || {
        let d = cp.kubectl(&["-n", NS, "get", "deployments", "-o", "json"]).success().json();
        let ready = d["items"].as_array().into_iter().flatten().all(|d| {
            d["status"]["availableReplicas"].as_i64().unwrap_or(0) == d["spec"]["replicas"].as_i64().unwrap_or(1)
        });
        let pending = pods(cp).iter().filter(|(_, _, phase)| phase == "Pending").count();
        if ready && pending == 0 { Ok(()) } else { Err(format!("{pending} pending")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(1500));
}

/// The background audit finds a pod's Deployment from its ReplicaSet's name (it reads no
/// ReplicaSets): on pods the real deployment controller made and the scheduler placed, its report
/// says what `ha-guard audit` (which reads the ReplicaSets' owners) says, a finding that only the
/// pods show included: `pair`'s two replicas, kept together by their own affinity, share a node.
/// `pair` is gone again before the drains.
fn reports_read_the_controllers_pods(cp: &ControlPlane) {
    use support::reports::*;
    const OWNERS: &str = "owners";
    cp.namespace(OWNERS, &[]);
    let together = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "pair"}}}]}}});
    let mut pair = workload("pair", 2, together);
    pair["metadata"]["namespace"] = json!(OWNERS);
    cp.apply(pair).success();
    let running = |cp: &ControlPlane| {
        let list = cp.kubectl(&["-n", OWNERS, "get", "pods", "-o", "json"]).success().json();
        list["items"].as_array().map_or(0, |items| items.iter().filter(|p| p["status"]["phase"] == "Running").count())
    };
    poll("pair's two pods run", WAIT, Duration::from_millis(300), || {
        if running(cp) == 2 { Ok(()) } else { Err(format!("{} running", running(cp))) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    install_report_crds(cp);
    let log = cp.root().join("reports.log");
    let out = std::fs::File::create(&log).expect("log");
    let mut reports = std::process::Command::new(BIN)
        .args(["reports", "--lease-namespace", "default", "--debounce", "1s"])
        .arg(format!("--probe-listen=127.0.0.1:{}", free_port()))
        .env("KUBECONFIG", cp.kubeconfig())
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("start ha-guard reports");
    let agreed = poll("the reports say what ha-guard audit says", WAIT, Duration::from_millis(300), || {
        let audit = audit_json(cp);
        let mut rows = Vec::new();
        for ns in [OWNERS, NS] {
            let want = rows_of_audit(&audit, ns);
            let k = cp.kubectl(&["-n", ns, "get", "policyreports.wgpolicyk8s.io", "ha-guard", "-o", "json"]);
            if !k.ok() {
                return Err(format!("no report in {ns} yet"));
            }
            let got = rows_of_report(&k.json());
            if got != want {
                return Err(format!("{ns}: report {got:?}\nwant {want:?}"));
            }
            rows.extend(got);
        }
        Ok(rows)
    });
    let _ = reports.kill();
    let _ = reports.wait();
    let rows = agreed.unwrap_or_else(|e| panic!("{e}\n{}", tail(&log, 20)));
    assert!(
        rows.iter()
            .any(|(_, rule, _, kind, name)| rule == "replicas-share-node" && kind == "Deployment" && name == "pair"),
        "pair's pods are pair's: {rows:?}"
    );
    cp.kubectl(&["-n", OWNERS, "delete", "deployment", "pair"]).success();
    poll("pair's pods gone", WAIT, Duration::from_millis(300), || {
        let left = cp.kubectl(&["-n", OWNERS, "get", "pods", "-o", "name"]).success().stdout;
        if left.trim().is_empty() { Ok(()) } else { Err(left) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn drain_each_predicts_a_rolling_upgrade() {
    let h = Harness::start(Setup { controllers: true, nodes: &NODES, webhooks: &[], ..Default::default() });
    let cp = &h.cp;
    cp.namespace(NS, &[]);
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "api"}}}]}}});
    let objects = [
        // Four replicas spread one a node: a drain's replacement goes to a free node.
        workload("web", 4, spread),
        budget("web", json!({"maxUnavailable": 1})),
        // Two replicas pinned to node-1: its drain hangs on the budget.
        workload("db", 2, json!({"nodeSelector": {"kubernetes.io/hostname": "node-1"}})),
        budget("db", json!({"maxUnavailable": 1})),
        // Three replicas kept apart, a budget that wants them all: every node with one hangs.
        workload("api", 3, anti),
        budget("api", json!({"minAvailable": 3})),
        // One replica and no budget: drained without a word.
        workload("tool", 1, json!({})),
    ];
    let file = cp.root().join("rolling.yaml");
    std::fs::write(&file, yaml_file(&objects)).expect("rolling.yaml");
    cp.kubectl(&["create", "-f", file.to_str().expect("path")]).success();
    poll("everything placed", WAIT, Duration::from_millis(300), || {
        let running = pods(cp).iter().filter(|(_, _, phase)| phase == "Running").count();
        if running == 10 { Ok(()) } else { Err(format!("{running} running")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    at_rest(cp);
    reports_read_the_controllers_pods(cp);

    // The prediction, before anything is drained.
    let out = std::process::Command::new(BIN)
        .args(["audit", "--drain-each", "--format", "json"])
        .env("KUBECONFIG", cp.kubeconfig())
        .output()
        .expect("run ha-guard audit");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("audit json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let predicted: BTreeMap<String, String> = report["drains"]
        .as_array()
        .expect("drains")
        .iter()
        .map(|d| {
            (
                d["nodes"][0].as_str().unwrap_or_default().to_string(),
                d["outcome"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(predicted.len(), NODES.len(), "{predicted:?}");
    // The exit follows the outcomes: hangs and refused by default, the README's gate adds
    // leaves-pending, `none` never fails.
    let exit = |outcomes: Option<&str>| {
        let mut args = vec!["audit", "--drain-each"];
        if let Some(o) = outcomes {
            args.extend(["--fail-on-outcome", o]);
        }
        let out =
            std::process::Command::new(BIN).args(&args).env("KUBECONFIG", cp.kubeconfig()).output().expect("audit");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let any = |among: &[&str]| i32::from(predicted.values().any(|o| among.contains(&o.as_str())));
    let (code, said) = exit(None);
    assert_eq!(code, Some(any(&["hangs", "refused"])), "default --fail-on-outcome: {said}");
    // ha-guard audit --drain-each --fail-on-outcome hangs,refused,leaves-pending
    let (code, said) = exit(Some("hangs,refused,leaves-pending"));
    assert_eq!(code, Some(any(&["hangs", "refused", "leaves-pending"])), "{said}");
    assert_eq!(code, Some(1), "this cluster has a node whose drain does not end cleanly: {predicted:?}");
    assert!(said.contains("--fail-on-outcome hangs,refused,leaves-pending"), "says why: {said}");
    assert_eq!(exit(Some("none")).0, Some(0));

    // The rolling upgrade, for real: each node drained, then uncordoned before the next.
    let mut real: BTreeMap<String, String> = BTreeMap::new();
    for node in NODES {
        let before = pods(cp);
        let out = cp.kubectl(&["drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=12s"]);
        let text = out.output();
        let outcome = if out.ok() {
            std::thread::sleep(Duration::from_secs(2));
            let pending_before = before.iter().filter(|(_, _, phase)| phase == "Pending").count();
            let pending = pods(cp).iter().filter(|(_, _, phase)| phase == "Pending").count();
            if pending > pending_before { "leaves-pending" } else { "completes" }
        } else if text.contains("declare no controller") || text.contains("more than one PodDisruptionBudget") {
            "refused"
        } else if text.contains("Cannot evict pod as it would violate the pod's disruption budget") {
            "hangs"
        } else {
            panic!("kubectl drain {node} failed otherwise: {text}")
        };
        real.insert(node.to_string(), outcome.to_string());
        cp.kubectl(&["uncordon", node]).success();
        at_rest(cp);
    }
    let mut table = String::new();
    for node in NODES {
        let (p, r) = (&predicted[node], &real[node]);
        let _ = writeln!(
            table,
            "{node}: --drain-each {p:<15} kubectl drain {r:<15}{}",
            if p == r { "" } else { "   <-- differs" }
        );
    }
    eprintln!("[e2e] a rolling upgrade of six nodes, predicted and done:\n{table}");
    assert_eq!(predicted, real, "{table}");
    assert!(real.values().any(|o| o == "hangs") && real.values().any(|o| o == "completes"), "{real:?}");
}

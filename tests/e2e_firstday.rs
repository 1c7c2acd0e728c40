//! End-to-end: the first day on a cluster already running real software (issue 51, Show 1).
//!
//! A control plane whose kube-controller-manager, kube-scheduler and kwok place, count and replace
//! the pods, 9 kwok nodes over 3 zones, and copies of several projects of the shared corpus, as
//! their manifests are written (kinds this cluster cannot serve, CRDs and the custom resources of
//! their operators, left out):
//! - `k8s-website/zookeeper.yaml` (a StatefulSet of 3 with a volume claim template, a PDB of
//!   maxUnavailable 1) in `zookeeper`;
//! - `k8s-website/wordpress-mysql-deployment.yaml` (one replica with a claim) in `wordpress`;
//! - `k8s-website/php-apache.yaml` and its HPA in `php`;
//! - kueue v0.12.2 in `kueue-system`: its controller (one replica), Services, its aggregated
//!   APIService `v1beta1.visibility.kueue.x-k8s.io` (no pod behind it answers here) and its
//!   webhook configurations (applied once every pod is placed: kueue's pod webhook is
//!   `failurePolicy: Fail`, and nothing serves it);
//! - coredns (its Service's `clusterIP` placeholder left to the apiserver), metrics-server's
//!   high-availability variant (2 replicas and its PDB, as its kustomization builds it) and the AWS
//!   EBS CSI controller and its PDB in `kube-system`, which the chart exempts.
//!
//! The claims are bound to local PersistentVolumes of given nodes (pre-bound with `claimRef`, as an
//! administrator provisions local disks), so where the stateful pods run is known: `zk-0`'s and
//! mysql's volumes are in zone-a. The configuration is the chart's, as README's observe install
//! renders it (`--set mode=observe`: kube-system exempt).
//!
//! Then the real binary, as a user runs it on the first day, and every item of the Build
//! list asserted on its output (the outputs are printed):
//! 1. `drain-each`: before any trouble, no drain hangs or is refused: exit 0 although drain
//!    warnings are reported; `--fail-on-outcome hangs,refused,leaves-pending` exits 1 and says
//!    why; the summary is the first line, on a terminal too; single-replica workloads are
//!    counted in the summary, not one warning each.
//! 2. `drain-zone`: `--drain-zone zone-a` predicts the replacements left Pending (the volumes
//!    pinned to zone-a), and the real drain of zone-a (`kubectl drain` of its 3 nodes) leaves
//!    exactly those Pending.
//! 3. `audit`: each Pending workload reported once by `pods-pending` with the scheduler's own
//!    reason (the pod's `PodScheduled` condition, read here from the pod); the zookeeper budget's
//!    finding grouped under it (`causedBy`, text and JSON), one primary per cause; kube-system
//!    said not judged, naming the key, with no finding of it; the APIService rule on kueue's
//!    aggregated API.
//! 4. `drain-each` after the zone drain: the zookeeper budget allows nothing, so draining a node
//!    holding a zookeeper pod hangs: exit 1 by default, naming the outcome.
//! 5. `reports`: `ha-guard reports` with the same configuration: kube-system's PolicyReport holds
//!    one result naming the key that skips it and nothing that looks like a finding; zookeeper's
//!    report carries the grouping (`causedBy`).
//!
//! No ha-guard webhook is registered: the first day is read from outside (`audit`, `reports`).

#[path = "support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");
const ZONE: &str = "topology.kubernetes.io/zone";
/// The chart's release namespace (the reports' Lease).
const RELEASE_NS: &str = "ha-guard";
const KUEUE_API: &str = "v1beta1.visibility.kueue.x-k8s.io";

fn corpus() -> PathBuf {
    std::env::var_os("HA_GUARD_CORPUS").map(PathBuf::from).unwrap_or_else(|| repo().join("../shared/corpus"))
}

/// The documents of a corpus file.
fn corpus_docs(file: &str) -> Vec<Value> {
    let path = corpus().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    yaml_docs(&text).into_iter().filter(|d| d.is_object()).collect()
}

/// What a run of the binary returned.
struct Run {
    command: String,
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn show(&self) -> String {
        format!("`{}` exited {}\n--- stdout\n{}\n--- stderr\n{}", self.command, self.code, self.stdout, self.stderr)
    }

    #[track_caller]
    fn exits(self, code: i32) -> Self {
        assert_eq!(self.code, code, "{}", self.show());
        self
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.show()))
    }
}

/// `ha-guard ARGS` with the control plane's kubeconfig, stdin closed (not a terminal).
fn ha_guard(cp: &ControlPlane, args: &[&str]) -> Run {
    let out = Command::new(BIN)
        .args(args)
        .env("KUBECONFIG", cp.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {BIN}: {e}"));
    let run = Run {
        command: format!("ha-guard {}", args.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!("[e2e] {}", run.show());
    run
}

/// `ha-guard ARGS` on a pseudo-terminal (script(1)): stdout and stderr as a person sees them.
fn on_terminal(cp: &ControlPlane, args: &[&str]) -> Run {
    let command = format!("{BIN} {}", args.join(" "));
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("KUBECONFIG", cp.kubeconfig())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("script(1)");
    Run {
        command: format!("script -qec '{command}'"),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The chart's `config.yaml` for `helm template ha-guard charts/ha-guard --namespace ha-guard ARGS`.
fn chart_config(args: &[&str]) -> String {
    let helm = helm().unwrap_or_else(|e| panic!("helm: {e}"));
    let out = Command::new(helm)
        .args(["template", "ha-guard", "charts/ha-guard", "--namespace", RELEASE_NS])
        .args(args)
        .current_dir(repo())
        .output()
        .expect("helm template");
    assert!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
    let docs = yaml_docs(&String::from_utf8_lossy(&out.stdout));
    let cm = docs.iter().find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "ha-guard-config");
    cm.and_then(|c| c["data"]["config.yaml"].as_str()).expect("the chart's config.yaml").to_string()
}

// --- the cluster ------------------------------------------------------------------------------

/// 9 nodes, 3 a zone.
fn nodes() -> Vec<(String, String)> {
    ["a", "b", "c"].iter().flat_map(|z| (1..=3).map(move |i| (format!("z-{z}{i}"), format!("zone-{z}")))).collect()
}

/// A local PersistentVolume of `node`, pre-bound to claim `ns/claim`.
fn local_pv(node: &str, ns: &str, claim: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": format!("{ns}-{claim}")},
        "spec": {"capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain", "local": {"path": format!("/mnt/disks/{claim}")},
            "claimRef": {"namespace": ns, "name": claim},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}})
}

/// `docs` in namespace `ns` (where they name none), without the kinds this cluster does not serve
/// (CRDs and their custom resources) and without webhook configurations (applied later).
fn installable(docs: Vec<Value>, ns: Option<&str>) -> Vec<Value> {
    const SERVED: &[&str] = &[
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "Service",
        "Deployment",
        "StatefulSet",
        "PodDisruptionBudget",
        "PersistentVolumeClaim",
        "HorizontalPodAutoscaler",
        "APIService",
    ];
    docs.into_iter()
        .filter(|d| d["kind"].as_str().is_some_and(|k| SERVED.contains(&k)))
        .map(|mut d| {
            let cluster_scoped =
                matches!(d["kind"].as_str(), Some("Namespace" | "ClusterRole" | "ClusterRoleBinding" | "APIService"));
            if let (Some(ns), false) = (ns, cluster_scoped)
                && d["metadata"]["namespace"].is_null()
            {
                d["metadata"]["namespace"] = json!(ns);
            }
            d
        })
        .collect()
}

/// Each pod template's ServiceAccount that `docs` name but do not make (the ServiceAccount
/// admission refuses a pod whose account does not exist; the projects' charts make them).
fn missing_service_accounts(docs: &[Value]) -> Vec<Value> {
    let made: BTreeSet<(String, String)> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceAccount")
        .map(|d| {
            (
                d["metadata"]["namespace"].as_str().unwrap_or("").into(),
                d["metadata"]["name"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    let named: BTreeSet<(String, String)> = docs
        .iter()
        .filter_map(|d| {
            let sa = d["spec"]["template"]["spec"]["serviceAccountName"].as_str()?;
            Some((d["metadata"]["namespace"].as_str().unwrap_or("").to_string(), sa.to_string()))
        })
        .collect();
    named
        .difference(&made)
        .map(|(ns, name)| json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}))
        .collect()
}

/// metrics-server's high-availability variant as its kustomization builds it: the base Deployment
/// with the high-availability patch merged in, the label `k8s-app: metrics-server` its
/// `commonLabels` gives (metadata, selector, pod template), and its PDB (policy/v1beta1, which
/// this apiserver no longer serves, as policy/v1).
fn metrics_server() -> Vec<Value> {
    let base = corpus_docs("metrics-server/base-deployment.yaml").remove(0);
    let patch = corpus_docs("metrics-server/high-availability-patch.yaml").remove(0);
    let label = json!({"k8s-app": "metrics-server"});
    let deployment = merge(
        merge(base, patch),
        json!({"metadata": {"labels": label}, "spec": {"selector": {"matchLabels": label},
            "template": {"metadata": {"labels": label}}}}),
    );
    let mut pdb = corpus_docs("metrics-server/high-availability-pdb.yaml").remove(0);
    pdb["apiVersion"] = json!("policy/v1");
    vec![deployment, pdb]
}

struct Install {
    /// The objects applied, by project.
    projects: BTreeMap<&'static str, Vec<Value>>,
    /// kueue's APIService and webhook configurations, applied once every pod is placed: an
    /// unavailable aggregated API fails discovery of its group, and kueue's pod webhook is
    /// fail-closed with nothing serving it.
    kueue_late: Vec<Value>,
}

fn install(cp: &ControlPlane) -> Install {
    let zoned: Vec<(String, String)> = nodes();
    // The labels a kubelet gives its node (the projects' pods select kubernetes.io/os).
    let labels: Vec<[(&str, &str); 3]> = zoned
        .iter()
        .map(|(_, z)| [(ZONE, z.as_str()), ("kubernetes.io/os", "linux"), ("kubernetes.io/arch", "amd64")])
        .collect();
    let refs: Vec<(&str, &[(&str, &str)])> =
        zoned.iter().zip(&labels).map(|((n, _), l)| (n.as_str(), &l[..])).collect();
    cp.kwok_nodes(&refs);
    for ns in ["zookeeper", "wordpress", "php", RELEASE_NS] {
        cp.namespace(ns, &[]);
    }
    // Local disks: zk-0's and mysql's in zone-a, zk-1's in zone-b, zk-2's in zone-c.
    let pvs = [
        local_pv("z-a1", "zookeeper", "datadir-zk-0"),
        local_pv("z-b1", "zookeeper", "datadir-zk-1"),
        local_pv("z-c1", "zookeeper", "datadir-zk-2"),
        local_pv("z-a2", "wordpress", "mysql-pv-claim"),
    ];
    cp.apply(yaml_file(&pvs)).success();

    let mut projects: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
    projects.insert("zookeeper", installable(corpus_docs("k8s-website/zookeeper.yaml"), Some("zookeeper")));
    projects.insert(
        "wordpress-mysql",
        installable(corpus_docs("k8s-website/wordpress-mysql-deployment.yaml"), Some("wordpress")),
    );
    let mut php = corpus_docs("k8s-website/php-apache.yaml");
    php.extend(corpus_docs("k8s-website/hpa-php-apache.yaml"));
    projects.insert("php-apache", installable(php, Some("php")));
    let kueue = corpus_docs("kueue/kueue-v0.12.2.yaml");
    let kueue_webhooks: Vec<Value> = kueue
        .iter()
        .filter(|d| d["kind"].as_str().is_some_and(|k| k.ends_with("WebhookConfiguration")))
        .cloned()
        .collect();
    projects.insert("kueue", installable(kueue, None));
    // coredns's manifest is a template: its Service's clusterIP placeholder left to the apiserver.
    let mut coredns = corpus_docs("coredns/coredns.yaml");
    for d in coredns.iter_mut().filter(|d| d["kind"] == "Service") {
        d["spec"].as_object_mut().expect("spec").remove("clusterIP");
    }
    projects.insert("coredns", installable(coredns, Some("kube-system")));
    projects.insert("metrics-server", installable(metrics_server(), Some("kube-system")));
    projects.insert(
        "aws-ebs-csi-driver",
        installable(
            [
                corpus_docs("aws-ebs-csi-driver/controller.yaml"),
                corpus_docs("aws-ebs-csi-driver/poddisruptionbudget-controller.yaml"),
            ]
            .concat(),
            Some("kube-system"),
        ),
    );
    let all: Vec<Value> = projects.values().flatten().cloned().collect();
    let (apiservices, rest): (Vec<Value>, Vec<Value>) = all.into_iter().partition(|d| d["kind"] == "APIService");
    assert_eq!(apiservices.len(), 1, "kueue's APIService: {apiservices:?}");
    // Namespaces and accounts first, then the rest.
    let (first, rest): (Vec<Value>, Vec<Value>) =
        rest.into_iter().partition(|d| matches!(d["kind"].as_str(), Some("Namespace" | "ServiceAccount")));
    cp.apply(yaml_file(&first)).success();
    let mut accounts = missing_service_accounts(&rest);
    accounts.retain(|a| !first.iter().any(|f| f["kind"] == "ServiceAccount" && f["metadata"] == a["metadata"]));
    if !accounts.is_empty() {
        cp.apply(yaml_file(&accounts)).success();
    }
    cp.apply(yaml_file(&rest)).success();
    placed(cp);
    let mut kueue_late = apiservices;
    kueue_late.extend(kueue_webhooks);
    Install { projects, kueue_late }
}

/// Every workload's pods placed and Running (kwok makes them so once bound).
fn placed(cp: &ControlPlane) {
    poll("every pod Running", Duration::from_secs(120), Duration::from_millis(500), || {
        let pods = cp.kubectl(&["get", "pods", "-A", "-o", "json"]).success().json();
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        let waiting: Vec<String> = items
            .iter()
            .filter(|p| p["status"]["phase"] != "Running")
            .map(|p| format!("{}/{} {}", p["metadata"]["namespace"], p["metadata"]["name"], p["status"]["phase"]))
            .collect();
        // zookeeper's 3 (OrderedReady: one after another), mysql, php-apache, kueue, coredns,
        // metrics-server's 2 and the EBS controller's 2.
        let zk = items.iter().filter(|p| p["metadata"]["namespace"] == "zookeeper").count();
        let deployments = cp.kubectl(&["get", "deployments", "-A", "-o", "json"]).success().json();
        let short: Vec<String> = deployments["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| {
                d["status"]["readyReplicas"].as_i64().unwrap_or(0) < d["spec"]["replicas"].as_i64().unwrap_or(1)
            })
            .map(|d| format!("{}/{}", d["metadata"]["namespace"], d["metadata"]["name"]))
            .collect();
        if waiting.is_empty() && zk == 3 && short.is_empty() {
            Ok(())
        } else {
            Err(format!("waiting: {waiting:?}, zookeeper pods {zk}, deployments short: {short:?}"))
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let pods = cp.kubectl(&["get", "pods", "-A", "-o", "wide"]).success().stdout;
    eprintln!("[e2e] the cluster before the first day:\n{pods}");
}

/// The node each pod of `ns` runs on, by pod name.
fn pod_nodes(cp: &ControlPlane, ns: &str) -> BTreeMap<String, String> {
    let pods = cp.kubectl(&["-n", ns, "get", "pods", "-o", "json"]).success().json();
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (s(&p["metadata"]["name"]), s(&p["spec"]["nodeName"]))
        })
        .collect()
}

// --- reading the outputs ------------------------------------------------------------------------

fn findings(report: &Value) -> Vec<Value> {
    report["findings"].as_array().expect("findings").clone()
}

fn drains(report: &Value) -> Vec<Value> {
    report["drains"].as_array().cloned().unwrap_or_default()
}

fn outcomes(report: &Value) -> BTreeMap<String, String> {
    drains(report)
        .iter()
        .map(|d| {
            let nodes: Vec<&str> = d["nodes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            (nodes.join(","), d["outcome"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

fn text_of(f: &Value, key: &str) -> String {
    f[key].as_str().unwrap_or_default().to_string()
}

/// The first line of `text` that is not empty.
fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default()
}

// --- the steps ---------------------------------------------------------------------------------

/// 1. Every node drained alone, before any trouble.
fn drain_each_before(cp: &ControlPlane, config: &str) {
    let json_run = ha_guard(cp, &["audit", "--config", config, "--drain-each", "--format", "json"]);
    let report = json_run.json();
    let outcomes = outcomes(&report);
    assert_eq!(outcomes.len(), 9, "one drain a schedulable node: {outcomes:?}");
    let failing: Vec<_> = outcomes.iter().filter(|(_, o)| *o == "hangs" || *o == "refused").collect();
    assert!(failing.is_empty(), "no budget here refuses a single node's drain: {outcomes:?}");
    let leaves_pending: Vec<_> = outcomes.iter().filter(|(_, o)| *o == "leaves-pending").collect();
    // zk-0's node and mysql's: their replacements cannot follow their local volumes.
    assert!(
        outcomes.get("z-a1").map(String::as_str) == Some("leaves-pending")
            && outcomes.get("z-a2").map(String::as_str) == Some("leaves-pending"),
        "the nodes of the local volumes leave their pods Pending: {outcomes:?}"
    );
    let warn = report["summary"]["warn"].as_u64().unwrap_or(0);
    assert!(warn > 0, "drain warnings are reported: {}", json_run.show());
    assert_eq!(report["summary"]["deny"], 0, "observe config, and no deny-level finding here: {}", json_run.show());
    // The outcome-based exit: warnings alone, and drains that finish or leave pods Pending: 0.
    assert_eq!(json_run.code, 0, "{}", json_run.show());
    let gated = ha_guard(
        cp,
        &["audit", "--config", config, "--drain-each", "--fail-on-outcome", "hangs,refused,leaves-pending"],
    );
    assert_eq!(gated.code, 1, "leaves-pending gates when asked: {}", gated.show());
    assert!(gated.stderr.contains("leaves-pending"), "the exit says which outcome: {}", gated.show());
    eprintln!("[e2e] --drain-each before the zone drain: {} leave pods Pending, {warn} warnings", leaves_pending.len());

    // The summary first, in text and on a terminal, counting the nodes that are not clean.
    let summary = format!("{} of 9 nodes cannot be drained cleanly today:", leaves_pending.len());
    let text = ha_guard(cp, &["audit", "--config", config, "--drain-each"]).exits(0);
    assert_eq!(first_line(&text.stdout), summary, "the summary is the first line: {}", text.show());
    // On a terminal the progress line is redrawn in place (`\r`, erase line) and erased before the
    // report: what stays on the screen starts with the summary.
    let tty = on_terminal(cp, &["audit", "--config", config, "--drain-each"]);
    let screen = tty.stdout.replace("\u{1b}[K", "");
    let shown: Vec<&str> = screen.split(['\n', '\r']).filter(|l| !l.trim().is_empty()).collect();
    let progress = |l: &str| l.starts_with("reading the cluster") || l.starts_with("judging ");
    assert!(shown.iter().any(|l| progress(l)), "a progress line on a terminal: {}", tty.show());
    assert_eq!(shown.iter().find(|l| !progress(l)).copied(), Some(summary.as_str()), "{}", tty.show());
    // Single-replica workloads: counted in the drain's summary, not one warning each.
    let single: Vec<String> = findings(&report)
        .iter()
        .filter(|f| f["rule"] == "drain-takes-all-replicas")
        .map(|f| format!("{}/{}", text_of(f, "namespace"), text_of(f, "name")))
        .collect();
    for one in ["kueue-system/kueue-controller-manager", "wordpress/wordpress-mysql", "php/php-apache"] {
        assert!(!single.iter().any(|s| s == one), "{one} has replicas: 1: in the summary, not a warning: {single:?}");
    }
    let counted: BTreeSet<String> = drains(&report)
        .iter()
        .flat_map(|d| d["singleReplica"].as_array().cloned().unwrap_or_default())
        .map(|w| w.as_str().map(str::to_string).unwrap_or_else(|| w.to_string()))
        .collect();
    eprintln!("[e2e] single-replica workloads in the drains' summaries: {counted:?}");
    assert!(counted.iter().any(|w| w.contains("wordpress-mysql")), "{counted:?}");
}

/// 2. The zone drain: predicted, then done.
fn drain_zone(cp: &ControlPlane, config: &str) -> BTreeMap<String, String> {
    let predicted = ha_guard(cp, &["audit", "--config", config, "--drain-zone", "zone-a", "--format", "json"]);
    let report = predicted.json();
    let runs = drains(&report);
    assert_eq!(runs.len(), 1, "{}", predicted.show());
    let outcome = text_of(&runs[0], "outcome");
    assert!(outcome == "leaves-pending" || outcome == "completes", "{}", predicted.show());
    assert_eq!(predicted.code, 0, "default --fail-on-outcome is hangs,refused: {}", predicted.show());
    // Each Pending replacement as `namespace/Kind/name` of its workload, and why.
    let pending: BTreeMap<String, String> = runs[0]["pending"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| (format!("{}/{}", text_of(p, "namespace"), text_of(p, "workload")), text_of(p, "reason")))
        .collect();
    eprintln!("[e2e] --drain-zone zone-a predicts {outcome}, Pending: {pending:?}");
    assert!(
        pending.contains_key("zookeeper/StatefulSet/zk")
            && pending.contains_key("wordpress/Deployment/wordpress-mysql"),
        "zk-0's and mysql's volumes are in zone-a: {}",
        predicted.show()
    );
    // The real drain.
    let zone_a: Vec<String> = nodes().into_iter().filter(|(_, z)| z == "zone-a").map(|(n, _)| n).collect();
    let mut args = vec!["drain", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s"];
    args.extend(zone_a.iter().map(String::as_str));
    cp.kubectl(&args).success();
    pending
}

/// The Pending pods (namespace/name) and each one's PodScheduled message, once the scheduler
/// said why.
fn pending_pods(cp: &ControlPlane, namespaces: &[&str]) -> BTreeMap<String, String> {
    poll("the Pending pods and the scheduler's reason", WAIT, Duration::from_millis(500), || {
        let mut out = BTreeMap::new();
        for ns in namespaces {
            let pods = cp.kubectl(&["-n", ns, "get", "pods", "--field-selector=status.phase=Pending", "-o", "json"]);
            for p in pods.success().json()["items"].as_array().into_iter().flatten() {
                let reason = p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
                    .and_then(|c| c["message"].as_str())
                    .ok_or_else(|| format!("{ns}/{} has no PodScheduled message yet", p["metadata"]["name"]))?;
                out.insert(format!("{ns}/{}", text_of(&p["metadata"], "name")), reason.to_string());
            }
        }
        if out.len() >= namespaces.len() { Ok(out) } else { Err(format!("{out:?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The workloads (`namespace/Kind/name`) of the Pending pods of `namespaces`: a StatefulSet's own,
/// a Deployment's through its ReplicaSet (whose name is the Deployment's and the template hash).
fn pending_workloads(cp: &ControlPlane, namespaces: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for ns in namespaces {
        let pods = cp.kubectl(&["-n", ns, "get", "pods", "--field-selector=status.phase=Pending", "-o", "json"]);
        for p in pods.success().json()["items"].as_array().into_iter().flatten() {
            let owner = &p["metadata"]["ownerReferences"][0];
            let (kind, name) = match owner["kind"].as_str() {
                Some("ReplicaSet") => {
                    let hash = text_of(&p["metadata"]["labels"], "pod-template-hash");
                    let rs = text_of(owner, "name");
                    ("Deployment".to_string(), rs.strip_suffix(&format!("-{hash}")).unwrap_or(&rs).to_string())
                }
                _ => (text_of(owner, "kind"), text_of(owner, "name")),
            };
            out.insert(format!("{ns}/{kind}/{name}"));
        }
    }
    out
}

/// Applies kueue's APIService and webhook configurations (the pods are all placed now).
fn aggregated(cp: &ControlPlane, install: &Install) {
    cp.apply(yaml_file(&install.kueue_late)).success();
}

/// 3. `audit` after the zone drain.
fn audit_after(cp: &ControlPlane, config: &str, pending: &BTreeMap<String, String>) {
    let run = ha_guard(cp, &["audit", "--config", config, "--format", "json"]);
    let report = run.json();
    let all = findings(&report);
    let deny = report["summary"]["deny"].as_u64().unwrap_or(0);
    assert_eq!(run.code, if deny > 0 { 1 } else { 0 }, "exit by --fail-on deny: {}", run.show());

    // Every message and fix reads as written: no run of spaces, no line break.
    for f in &all {
        for key in ["message", "fix"] {
            let text = text_of(f, key);
            assert!(!text.contains("  ") && !text.contains('\n'), "{} of {}: {text:?}", key, f["rule"]);
        }
    }

    // Pending pods: one pods-pending finding per workload, with the scheduler's own words.
    let pods_pending: Vec<&Value> = all.iter().filter(|f| f["rule"] == "pods-pending").collect();
    for (workload, kind) in [("zookeeper/zk", "StatefulSet"), ("wordpress/wordpress-mysql", "Deployment")] {
        let (ns, name) = workload.split_once('/').expect("ns/name");
        let of: Vec<&&Value> = pods_pending.iter().filter(|f| f["namespace"] == ns && f["name"] == name).collect();
        assert_eq!(of.len(), 1, "one pods-pending finding for {workload}: {pods_pending:#?}");
        assert_eq!(of[0]["kind"], kind, "{:#}", of[0]);
        let message = text_of(of[0], "message");
        let (pod, reason) = pending
            .iter()
            .find(|(p, _)| p.starts_with(&format!("{ns}/{name}-")))
            .unwrap_or_else(|| panic!("{workload}'s Pending pod: {pending:?}"));
        let pod_name = pod.split_once('/').expect("ns/pod").1;
        assert!(message.contains(pod_name), "the message names the Pending pod {pod_name}: {message}");
        // The scheduler's reason, as the pod's condition says it (its leading "0/N nodes are
        // available: " may be kept or not; the reasons themselves must be there).
        let reasons = reason.split_once(": ").map_or(reason.as_str(), |(_, r)| r).trim_end_matches('.');
        for part in reasons.split(", ").map(|p| p.trim()) {
            let part = part.split(". preemption").next().unwrap_or(part);
            assert!(message.contains(part), "{workload}: the scheduler's {part:?} (from {reason:?}) in: {message}");
        }
        eprintln!("[e2e] pods-pending {workload}: {message}");
    }

    // One primary per cause: every secondary names a primary that is reported and is no one's
    // secondary; the zookeeper budget's finding is grouped under the Pending StatefulSet.
    let key = |f: &Value| (text_of(f, "rule"), text_of(f, "kind"), text_of(f, "namespace"), text_of(f, "name"));
    let reported: BTreeSet<_> = all.iter().map(key).collect();
    let secondaries: Vec<&Value> = all.iter().filter(|f| f.get("causedBy").is_some()).collect();
    for s in &secondaries {
        let p = &s["causedBy"];
        let primary = key(p);
        assert!(reported.contains(&primary), "the primary of {s:#} is reported");
        assert!(
            all.iter().filter(|f| key(f) == primary).all(|f| f.get("causedBy").is_none()),
            "a primary is no one's secondary: {p:#}"
        );
    }
    let zk_budget = all
        .iter()
        .find(|f| f["rule"] == "pdb-disruptions-blocked" && f["namespace"] == "zookeeper")
        .unwrap_or_else(|| panic!("the zookeeper budget allows nothing now: {}", run.show()));
    assert_eq!(
        zk_budget["causedBy"],
        json!({"rule": "pods-pending", "kind": "StatefulSet", "namespace": "zookeeper", "name": "zk"}),
        "{zk_budget:#}"
    );
    assert!(
        text_of(zk_budget, "message").contains("pods-pending"),
        "the budget's finding points at pods-pending instead of guessing: {zk_budget:#}"
    );
    eprintln!(
        "[e2e] {} findings, {} of them grouped under a primary: {:?}",
        all.len(),
        secondaries.len(),
        secondaries
            .iter()
            .map(|s| (text_of(s, "rule"), text_of(s, "name"), s["causedBy"]["rule"].clone()))
            .collect::<Vec<_>>()
    );

    // kube-system: exempt by the chart's configuration. Not a finding of it, and said why.
    assert!(!all.iter().any(|f| f["namespace"] == "kube-system"), "kube-system is not judged: {}", run.show());
    let text = ha_guard(cp, &["audit", "--config", config]);
    let skipped: Vec<&str> =
        text.stdout.lines().chain(text.stderr.lines()).filter(|l| l.contains("not judged")).collect();
    assert!(
        skipped.iter().any(|l| l.contains("kube-system") && l.contains("exemptNamespaces")),
        "the audit says kube-system is not judged, and by which key: {}",
        text.show()
    );
    // The grouping in text: the budget's finding under the Pending StatefulSet.
    assert!(text.stdout.contains("= caused by: [pods-pending] StatefulSet zookeeper/zk (above)"), "{}", text.show());
    // Per-rule counts in the summary line.
    let summary = text.stdout.lines().rev().find(|l| l.contains(" warn (")).unwrap_or_default();
    assert!(summary.contains("pods-pending 2"), "per-rule counts: {summary:?}\n{}", text.show());

    // The APIService rule: kueue's aggregated API, backed by one replica.
    let api: Vec<&Value> = all.iter().filter(|f| f["rule"] == "apiservice-unavailable").collect();
    assert_eq!(api.len(), 1, "{api:#?}");
    assert_eq!(
        (api[0]["kind"].as_str(), api[0]["name"].as_str()),
        (Some("APIService"), Some(KUEUE_API)),
        "{:#}",
        api[0]
    );
    let message = text_of(api[0], "message");
    for part in [
        "through Service kueue-system/kueue-visibility-server",
        "Deployment kueue-controller-manager (replicas 1)",
        "every namespace being deleted stays Terminating",
    ] {
        assert!(message.contains(part), "{part:?} in: {message}");
    }
    // kueue's webhooks, fail-closed and served by that one replica.
    let hooks: Vec<&Value> = all.iter().filter(|f| f["rule"] == "webhook-fail-closed-unavailable").collect();
    assert!(
        hooks.iter().any(|f| text_of(f, "name").starts_with("kueue-")),
        "kueue's fail-closed webhooks behind one replica: {hooks:#?}"
    );
}

/// 4. `--drain-each` after the zone drain: a node with a zookeeper pod cannot be drained.
fn drain_each_after(cp: &ControlPlane, config: &str, pending: &BTreeMap<String, String>) {
    let run = ha_guard(cp, &["audit", "--config", config, "--drain-each", "--format", "json"]);
    let report = run.json();
    let outcomes = outcomes(&report);
    assert_eq!(outcomes.len(), 6, "zone-a's nodes are cordoned: {outcomes:?}");
    let zk = pod_nodes(cp, "zookeeper");
    for (pod, node) in zk.iter().filter(|(_, n)| !n.is_empty()) {
        assert_eq!(
            outcomes.get(node).map(String::as_str),
            Some("hangs"),
            "{pod} on {node}: its budget allows nothing while zk-0 is Pending: {outcomes:?}"
        );
    }
    assert_eq!(run.code, 1, "a drain that hangs fails by default: {}", run.show());
    assert!(run.stderr.contains("hangs"), "{}", run.show());
    let blocked = findings(&report)
        .into_iter()
        .find(|f| f["rule"] == "drain-blocked" && f["namespace"] == "zookeeper")
        .unwrap_or_else(|| panic!("drain-blocked on zookeeper: {}", run.show()));
    // A drain reports the drain's findings; the Pending pod's own finding is the audit's (step 3):
    // the drain's names it, with the scheduler's reason, and points there instead of guessing.
    let message = text_of(&blocked, "message");
    let zk0 = pending.get("zookeeper/zk-0").expect("zk-0 is Pending");
    // The condition's message, its closing period left for the parenthesis that follows.
    let said = zk0.trim_end_matches('.');
    for part in [
        "Before the drain, zk-0 is Pending, which the budget counts short: the scheduler says: ",
        said,
        "(see pods-pending)",
    ] {
        assert!(message.contains(part), "{part:?} in: {message}");
    }
    let none = ha_guard(cp, &["audit", "--config", config, "--drain-each", "--fail-on-outcome", "none"]);
    assert_eq!(none.code, if report["summary"]["deny"].as_u64().unwrap_or(0) > 0 { 1 } else { 0 }, "{}", none.show());
}

/// 5. The reports.
fn reports(cp: &ControlPlane, config: &Path) {
    reports::install_report_crds(cp);
    let process = reports::ReportsProcess::start(cp, "firstday", config, RELEASE_NS);
    let get = |ns: &str| {
        let k = cp.kubectl(&["-n", ns, "get", "policyreports.wgpolicyk8s.io", "ha-guard", "-o", "json"]);
        if k.ok() { Ok(k.json()) } else { Err(k.output()) }
    };
    let kube_system = poll("kube-system's report", WAIT, Duration::from_millis(300), || get("kube-system"))
        .unwrap_or_else(|e| panic!("{e}\n{}", tail(&process.log, 20)));
    let results = kube_system["results"].as_array().cloned().unwrap_or_default();
    eprintln!("[e2e] kube-system's report: {results:#?}");
    assert_eq!(results.len(), 1, "one result, not rows that read as findings: {results:#?}");
    assert_eq!(results[0]["rule"], "namespace-skipped");
    assert_eq!(results[0]["result"], "skip");
    let message = text_of(&results[0], "message");
    assert!(message.contains("exemptNamespaces"), "names the key: {message}");
    let zookeeper = poll("zookeeper's report, grouped", WAIT, Duration::from_millis(300), || {
        let r = get("zookeeper")?;
        let grouped = r["results"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|x| x["rule"] == "pdb-disruptions-blocked" && x["properties"]["causedBy"].is_string());
        if grouped { Ok(r) } else { Err(r.to_string()) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", tail(&process.log, 20)));
    let budget = zookeeper["results"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|x| x["rule"] == "pdb-disruptions-blocked")
        .cloned()
        .expect("found above");
    assert_eq!(budget["properties"]["causedBy"], "[pods-pending] StatefulSet zookeeper/zk", "{budget:#}");
    // The aggregated API's finding is the APIService's: in the ClusterPolicyReport, once. The
    // report of kueue-system, judged as a scope of its own (the APIService is not in it), carries
    // it on the Service and the Deployment that back the API, where the fix (the replicas) is
    // made, as it carries the fail-closed webhooks' on them: once each, the same message.
    let cluster = poll("the ClusterPolicyReport names kueue's APIService", WAIT, Duration::from_millis(300), || {
        let k = cp.kubectl(&["get", "clusterpolicyreports.wgpolicyk8s.io", "ha-guard", "-o", "json"]);
        if !k.ok() {
            return Err(k.output());
        }
        let r = k.json();
        let rows: Vec<Value> = r["results"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|x| x["rule"] == "apiservice-unavailable")
            .cloned()
            .collect();
        if rows.is_empty() { Err(r.to_string()) } else { Ok(rows) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", tail(&process.log, 20)));
    assert_eq!(cluster.len(), 1, "{cluster:#?}");
    assert_eq!(cluster[0]["resources"][0]["name"], KUEUE_API, "{:#}", cluster[0]);
    let kueue = get("kueue-system").unwrap_or_default();
    let rows = |rule: &str| -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> = kueue["results"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|x| x["rule"] == rule)
            .map(|x| (text_of(&x["resources"][0], "kind"), text_of(&x["resources"][0], "name")))
            .collect();
        rows.sort();
        rows
    };
    eprintln!(
        "[e2e] kueue-system's report: apiservice-unavailable on {:?}, webhook-fail-closed-unavailable on {:?}",
        rows("apiservice-unavailable"),
        rows("webhook-fail-closed-unavailable")
    );
    assert_eq!(
        rows("apiservice-unavailable"),
        [
            ("Deployment".to_string(), "kueue-controller-manager".to_string()),
            ("Service".to_string(), "kueue-visibility-server".to_string())
        ],
        "{kueue:#}"
    );
    let message = |kind: &str| {
        kueue["results"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["rule"] == "apiservice-unavailable" && x["resources"][0]["kind"] == kind)
            .map(|x| text_of(x, "message"))
            .unwrap_or_default()
    };
    assert_eq!(message("Service"), message("Deployment"));
    assert!(message("Service").starts_with(&format!("APIService/{KUEUE_API} serves")), "{}", message("Service"));
    assert!(
        zookeeper["results"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|x| x["rule"] == "pods-pending" && x["result"] == "warn"),
        "{zookeeper:#}"
    );
}

#[test]
fn the_first_day_on_a_cluster_running_real_software() {
    let cp = ControlPlane::start_with_controllers().unwrap_or_else(|e| panic!("control plane: {e}"));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    let observe = chart_config(&["--set", "mode=observe"]);
    assert!(observe.contains("mode: observe") && observe.contains("kube-system"), "{observe}");
    std::fs::write(&config, &observe).expect("write");
    let config_arg = config.to_str().expect("path").to_string();
    let install = install(&cp);
    eprintln!(
        "[e2e] installed: {}",
        install.projects.iter().map(|(p, d)| format!("{p} ({} objects)", d.len())).collect::<Vec<_>>().join(", ")
    );
    let mut steps = Steps::new(String::new);
    steps.run("1 drain-each before", || drain_each_before(&cp, &config_arg));
    let mut predicted = BTreeMap::new();
    steps.run("2 drain-zone, then the real zone drain", || predicted = drain_zone(&cp, &config_arg));
    let pending = pending_pods(&cp, &["zookeeper", "wordpress"]);
    eprintln!("[e2e] Pending after the zone drain: {pending:#?}");
    let happened = pending_workloads(&cp, &["zookeeper", "wordpress", "php", "kueue-system", "kube-system"]);
    let predicted_workloads: BTreeSet<String> = predicted.keys().cloned().collect();
    assert_eq!(
        happened, predicted_workloads,
        "the workloads left Pending: predicted, and what the real zone drain did"
    );
    // And why, in the scheduler's words: the filter that refuses the nodes left is named as
    // kube-scheduler's VolumeBinding names it in the pods' conditions.
    const PV_AFFINITY: &str = "didn't match PersistentVolume's node affinity";
    for (workload, why) in &predicted {
        assert!(why.contains(PV_AFFINITY), "{workload}: the prediction says {why:?}");
    }
    assert!(pending.values().all(|m| m.contains(PV_AFFINITY)), "{pending:#?}");
    aggregated(&cp, &install);
    steps.run("3 audit", || audit_after(&cp, &config_arg, &pending));
    steps.run("4 drain-each after", || drain_each_after(&cp, &config_arg, &pending));
    steps.run("5 reports", || reports(&cp, &config));
    steps.finish();
}

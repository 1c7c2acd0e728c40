//! End-to-end: Kubernetes as the judge (issue 36). A real control plane without kubelets
//! (`ControlPlane::start_with_controllers`: kube-controller-manager, kube-scheduler and kwok beside
//! kube-apiserver and etcd) decides what ha-guard predicts, and the predictions are held to it:
//!
//! 1. `arithmetic`: a few hundred generated PDB / workload / readiness combinations (unset
//!    budgets, integers and percentages of both fields, maxUnavailable above the replicas, pods
//!    without a controller, pods not Ready, two PDBs over the same pods, AlwaysAllow and
//!    IfHealthyBudget). The disruption controller writes each PDB's status; ha-guard computes
//!    expected pods, desired healthy, current healthy and disruptions allowed from the same pods
//!    without reading that status. They must be equal, and `pdb-blocks-eviction` must fire on a
//!    PDB over Ready workloads at rest exactly where the controller allows none.
//! 2. `evictions`: a dry-run eviction of every one of those pods against the eviction API; its
//!    answer (201 / 429 / 500) must be the one ha-guard predicts, from the status and from its own
//!    arithmetic alike; and the audit's `pdb-disruptions-blocked` must fire exactly on the PDBs
//!    some of whose pods the eviction API refuses.
//! 3. `controllers`: the scenarios' namespace deleted, then rollouts, `kubectl scale`, a drain and
//!    a namespace deletion, with both webhooks fail-closed: the apiserver counts no rejected or
//!    failed call, and ha-guard denied nothing.
//! 4. `drill`: the HA guides' drill with both webhooks registered fail-closed: an HA workload
//!    (3 replicas, a PDB with minAvailable 2, a hostname spread with its selector) applied without
//!    a warning, one node drained with `kubectl drain`, `kubectl rollout status`, uncordon.
//!
//! 5. `posture`: the audit's live posture rules on what the scheduler placed, kwok reported and the
//!    disruption controller computed (replicas sharing a node, a budget blocked by pods not Ready,
//!    a zone spread leaving a replica Pending until a node of a third zone comes, pods on a
//!    cordoned node).
//! 6. `drains`: `ha-guard audit --drain` / `--drain-zone` on those placements, and the drain it
//!    predicts to hang run with `kubectl drain`.
//!
//! The oracle steps run before the webhooks are registered: their PDBs are the cluster's as it was
//! before ha-guard (many of them would be refused).

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use ha_guard::core::config::Config;
use ha_guard::core::model::Subject;
use ha_guard::core::rules;
use ha_guard::core::rules::drain::eviction_answer;
use ha_guard::core::view::budget::budget_now;
use ha_guard::core::view::{Index, PdbInfo, View};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use support::*;

const NS: &str = "judge";
const NODES: [&str; 4] = ["node-a", "node-b", "node-c", "node-d"];

#[test]
fn kubernetes_is_the_judge() {
    // The webhooks are registered after the oracle steps (see the module's doc).
    let mut h = Harness::start(Setup { controllers: true, nodes: &NODES, webhooks: &[], ..Default::default() });
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let client = h.cp.kube_client(&rt);

    let mut steps = h.steps();
    let guard = h.guard();
    let scenarios = scenarios();
    let (cp, hg) = (&h.cp, &h.hg);
    steps.run("1 arithmetic against the disruption controller", || arithmetic(cp, &rt, &client, &scenarios));
    steps.run("2 evictions against the eviction API", || evictions(cp, &rt, &client, &scenarios));
    register_fail_closed(cp, hg);
    steps.run("3 controllers are never refused", || controllers(cp, hg));
    steps.run("4 the HA drill: drain one node of an HA workload", || drill(cp, hg));
    steps.run("5 live posture on the controllers' placements and budgets", || posture_on_real_placements(cp));
    steps.run("6 drain predictions on real placements, and a real drain", || drain_predictions(cp));
    steps.run("no webhook call failed", || guard.finish(cp));
    steps.finish();
}

// --- scenarios ---------------------------------------------------------------------------------

/// One PDB and what it selects: `ready` replicas of a Deployment whose pods become Ready,
/// `unready` of one whose pods stay Running and not Ready, `bare` pods without a controller; a
/// second PDB over the Ready Deployment's pods when `second`.
#[derive(Clone, Debug)]
struct Scenario {
    name: String,
    ready: i64,
    unready: i64,
    bare: usize,
    budget: Value,
    always_allow: bool,
    second: bool,
}

/// The budgets: neither field, integers and percentages of both, values above the replicas.
fn budgets() -> Vec<Value> {
    let mut b = vec![json!({})];
    for n in [0, 1, 2, 3, 5] {
        b.push(json!({"minAvailable": n}));
    }
    for p in ["0%", "25%", "50%", "100%"] {
        b.push(json!({"minAvailable": p}));
    }
    for n in [0, 1, 2, 5] {
        b.push(json!({"maxUnavailable": n}));
    }
    for p in ["0%", "34%", "50%", "100%"] {
        b.push(json!({"maxUnavailable": p}));
    }
    b
}

/// 216 scenarios: every budget twelve times, over readiness mixes taken in turn (a fixed
/// sequence, so a failure is the same on every run).
fn scenarios() -> Vec<Scenario> {
    let budgets = budgets();
    let mut mixes = Vec::new();
    for ready in 0..=3 {
        for unready in 0..=2 {
            for bare in 0..=2usize {
                mixes.push((ready, unready, bare));
            }
        }
    }
    (0..budgets.len() * 12)
        .map(|i| {
            let (ready, unready, bare) = mixes[(i * 7 + i / budgets.len()) % mixes.len()];
            Scenario {
                name: format!("s{i}"),
                ready,
                unready,
                bare,
                budget: budgets[i % budgets.len()].clone(),
                always_allow: i % 3 == 0,
                second: i % 19 == 5,
            }
        })
        .collect()
}

fn objects_of(s: &Scenario) -> Vec<Value> {
    let labels = |app: &str| json!({"group": s.name, "app": format!("{}-{app}", s.name)});
    let workload = |app: &str, replicas: i64, not_ready: bool| {
        let mut pod_labels = labels(app);
        if not_ready {
            pod_labels[NOT_READY] = json!("true");
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("{}-{app}", s.name), "namespace": NS},
            "spec": {"replicas": replicas,
                "selector": {"matchLabels": {"app": format!("{}-{app}", s.name)}},
                "template": {"metadata": {"labels": pod_labels},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}}})
    };
    let mut out = vec![workload("ready", s.ready, false), workload("unready", s.unready, true)];
    for k in 0..s.bare {
        out.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{}-bare-{k}", s.name), "namespace": NS, "labels": labels("bare")},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}));
    }
    let mut spec = json!({"selector": {"matchLabels": {"group": s.name}}});
    for (k, v) in s.budget.as_object().expect("budget") {
        spec[k] = v.clone();
    }
    spec["unhealthyPodEvictionPolicy"] = json!(if s.always_allow { "AlwaysAllow" } else { "IfHealthyBudget" });
    out.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": s.name, "namespace": NS}, "spec": spec}));
    if s.second {
        out.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": format!("{}-also", s.name), "namespace": NS},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": format!("{}-ready", s.name)}}}}));
    }
    out
}

// --- the cluster as it settles ------------------------------------------------------------------

/// Waits until every Deployment has its pods, every pod runs on a node, and every PDB's status
/// was computed for its spec and no longer changes: what the controllers decided, settled.
fn settled(cp: &ControlPlane, what: &str) {
    let mut last = String::new();
    let mut stable = 0;
    let started = Instant::now();
    poll(what, Duration::from_secs(240), Duration::from_millis(1000), || {
        let deployments = cp.kubectl(&["-n", NS, "get", "deployments", "-o", "json"]).success().json();
        for d in deployments["items"].as_array().into_iter().flatten() {
            let want = d["spec"]["replicas"].as_i64().unwrap_or(1);
            let have = d["status"]["replicas"].as_i64().unwrap_or(0);
            if want != have || d["status"]["observedGeneration"] != d["metadata"]["generation"] {
                return Err(format!("{}: {have} of {want} pods", d["metadata"]["name"]));
            }
        }
        let pods = cp.kubectl(&["-n", NS, "get", "pods", "-o", "json"]).success().json();
        for p in pods["items"].as_array().into_iter().flatten() {
            if p["status"]["phase"] != "Running" || p["metadata"]["deletionTimestamp"].is_string() {
                return Err(format!("pod {} is {}", p["metadata"]["name"], p["status"]["phase"]));
            }
            // kwok has written its final word: Ready, or (labelled so) Running and not Ready.
            let ready = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            if ready == p["metadata"]["labels"][NOT_READY].is_string() {
                return Err(format!("pod {} is not in its final readiness yet", p["metadata"]["name"]));
            }
        }
        let pdbs = cp.kubectl(&["-n", NS, "get", "pdb", "-o", "json"]).success().json();
        let mut state = String::new();
        for p in pdbs["items"].as_array().into_iter().flatten() {
            if p["status"]["observedGeneration"] != p["metadata"]["generation"] {
                return Err(format!("pdb {}: status not observed", p["metadata"]["name"]));
            }
            let _ = write!(state, "{}{};", p["metadata"]["name"], p["status"]);
        }
        // Looks a second apart that agree for three seconds: the disruption controller has worked
        // off the events of the pods' last changes.
        if state == last {
            stable += 1;
        } else {
            stable = 0;
            last = state;
        }
        if stable >= 3 { Ok(()) } else { Err("the PDBs' statuses still change".into()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("[e2e] {what}: {:.1?}", started.elapsed());
}

/// The namespace as `ha-guard audit` reads it: the view, and the PDB subjects.
fn read(rt: &tokio::runtime::Runtime, client: &kube::Client) -> (Index, Vec<Subject>) {
    let options = ha_guard::audit::read::ReadOptions { namespace: Some(NS.into()), ..Default::default() };
    let progress = ha_guard::audit::progress::Progress::new(false);
    let cluster = rt.block_on(ha_guard::audit::read::read(client, &options, &progress)).expect("read the cluster");
    assert!(cluster.unreadable.is_empty(), "{:?}", cluster.unreadable);
    let subjects = cluster.subjects.into_iter().map(|l| l.subject).filter(|s| matches!(s, Subject::Pdb(_))).collect();
    (cluster.index, subjects)
}

/// `view` with every PDB's status removed: ha-guard's own arithmetic, not the controller's.
fn without_status(mut view: Index) -> Index {
    for pdb in view.pdbs_in(NS) {
        view.upsert_pdb(PdbInfo { status: None, ..(*pdb).clone() });
    }
    view
}

// --- 1. arithmetic -------------------------------------------------------------------------------

fn arithmetic(cp: &ControlPlane, rt: &tokio::runtime::Runtime, client: &kube::Client, scenarios: &[Scenario]) {
    cp.namespace(NS, &[]);
    let docs: Vec<Value> = scenarios.iter().flat_map(objects_of).collect();
    let file = cp.root().join("scenarios.yaml");
    std::fs::write(&file, yaml_file(&docs)).expect("scenarios.yaml");
    let started = Instant::now();
    cp.kubectl(&["create", "-f", file.to_str().expect("path")]).success();
    eprintln!("[e2e] {} objects of {} scenarios created in {:.1?}", docs.len(), scenarios.len(), started.elapsed());
    settled(cp, "the controllers settled the scenarios");

    let (view, subjects) = read(rt, client);
    let computed = without_status(read(rt, client).0);
    let mut table =
        String::from("PDB        budget                     ready unready bare | expected desired healthy allowed\n");
    let mut wrong = Vec::new();
    let mut blocks_checked = 0;
    for s in scenarios {
        for name in std::iter::once(s.name.clone()).chain(s.second.then(|| format!("{}-also", s.name))) {
            let pdb = view.pdb(NS, &name).unwrap_or_else(|| panic!("PDB {name} in the view"));
            let status = pdb.status.unwrap_or_else(|| panic!("PDB {name} has a status"));
            let truth =
                (status.expected_pods, status.desired_healthy, status.current_healthy, status.disruptions_allowed);
            let ours = budget_now(&computed, &computed.pdb(NS, &name).expect("PDB")).expect("a budget").status;
            let predicted = (ours.expected, ours.desired_healthy, ours.current_healthy, ours.allowed);
            let _ = writeln!(
                table,
                "{name:<10} {:<26} {:>5} {:>7} {:>4} | {:>8} {:>7} {:>7} {:>7}{}",
                s.budget.to_string(),
                s.ready,
                s.unready,
                s.bare,
                truth.0,
                truth.1,
                truth.2,
                truth.3,
                if truth == predicted { String::new() } else { format!("   ha-guard: {predicted:?}") }
            );
            if truth != predicted {
                wrong.push(format!("{name} {}: controller {truth:?}, ha-guard {predicted:?}", s.budget));
            }
        }
        // pdb-blocks-eviction, where the PDB covers Ready workloads at rest and nothing else.
        if s.unready == 0 && s.bare == 0 && !s.second && s.ready >= 1 {
            let subject = subjects
                .iter()
                .find(|p| p.id().name == s.name)
                .unwrap_or_else(|| panic!("PDB {} among the subjects", s.name));
            let findings = rules::evaluate(subject, &computed, &Config::default()).findings;
            let fires = findings.iter().any(|f| f.rule == "pdb-blocks-eviction");
            let allows_none = view.pdb(NS, &s.name).and_then(|p| p.status).expect("status").disruptions_allowed == 0;
            if fires != allows_none {
                wrong.push(format!(
                    "{} {}: pdb-blocks-eviction {} but the controller allows {}",
                    s.name,
                    s.budget,
                    if fires { "fires" } else { "is silent" },
                    if allows_none { "none" } else { "some" }
                ));
            }
            blocks_checked += 1;
        }
    }
    eprintln!("[e2e] the disruption controller's status and ha-guard's arithmetic:\n{table}");
    eprintln!("[e2e] pdb-blocks-eviction held to the controller on {blocks_checked} PDBs over Ready workloads at rest");
    assert!(blocks_checked >= 12, "{blocks_checked}");
    assert!(wrong.is_empty(), "{} PDBs where ha-guard and the controller disagree:\n{}", wrong.len(), wrong.join("\n"));
}

// --- 2. evictions --------------------------------------------------------------------------------

/// A dry-run eviction of `pod`: the HTTP status the eviction API answers.
async fn evict_dry_run(pods: &kube::Api<Pod>, name: &str) -> u16 {
    let params = kube::api::EvictParams {
        delete_options: Some(kube::api::DeleteParams { dry_run: true, ..Default::default() }),
        post_options: kube::api::PostParams { dry_run: true, ..Default::default() },
    };
    match pods.evict(name, &params).await {
        Ok(_) => 201,
        Err(kube::Error::Api(status)) => status.code,
        Err(e) => panic!("eviction of {name}: {e}"),
    }
}

/// A client that does not retry: kube's default one retries a 429 (the answer under test) with
/// a backoff of seconds.
fn client_without_retries(cp: &ControlPlane, rt: &tokio::runtime::Runtime) -> kube::Client {
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(cp.kubeconfig()).expect("kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
        config.default_retry = false;
        kube::Client::try_from(config).expect("client")
    })
}

fn evictions(cp: &ControlPlane, rt: &tokio::runtime::Runtime, client: &kube::Client, scenarios: &[Scenario]) {
    use futures::StreamExt;
    let (view, subjects) = read(rt, client);
    let computed = without_status(read(rt, client).0);
    let api: kube::Api<Pod> = kube::Api::namespaced(client_without_retries(cp, rt), NS);
    let pods = view.pods_in(NS);
    assert!(pods.len() >= 300, "{} pods", pods.len());
    let started = Instant::now();
    let answers: BTreeMap<String, u16> = rt.block_on(
        futures::stream::iter(pods.iter().map(|p| {
            let api = api.clone();
            let name = p.name.to_string();
            async move {
                let code = evict_dry_run(&api, &name).await;
                (name, code)
            }
        }))
        .buffer_unordered(16)
        .collect(),
    );
    eprintln!("[e2e] {} dry-run evictions in {:.1?}", answers.len(), started.elapsed());
    let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
    let mut wrong = Vec::new();
    for pod in &pods {
        let truth = answers[&*pod.name];
        let from_status = eviction_answer(&view, NS, pod);
        let from_arithmetic = eviction_answer(&computed, NS, pod);
        *counts.entry(truth).or_default() += 1;
        if from_status.code() != truth || from_arithmetic.code() != truth {
            wrong.push(format!(
                "{}: the eviction API answers {truth}; ha-guard from the status {from_status:?}, from its arithmetic \
                 {from_arithmetic:?}",
                pod.name
            ));
        }
    }
    // pdb-disruptions-blocked (the audit's, from the status) fires exactly where the eviction API
    // refuses some pod the PDB alone selects: what a drain would meet now.
    let (mut blocked, mut judged) = (0, 0);
    for s in scenarios.iter().filter(|s| !s.second) {
        judged += 1;
        let selected = pods.iter().filter(|p| p.labels.get("group").is_some_and(|g| *g == s.name));
        let truth = selected.into_iter().any(|p| answers[&*p.name] == 429);
        let subject = subjects.iter().find(|p| p.id().name == s.name).expect("the PDB");
        let said = rules::audit(subject, &view, &Config::default())
            .findings
            .iter()
            .any(|f| f.rule == "pdb-disruptions-blocked");
        if said != truth {
            wrong.push(format!(
                "{} {} (ready {}, not ready {}, bare {}, AlwaysAllow {}): pdb-disruptions-blocked {} but the eviction \
                 API refuses {}",
                s.name,
                s.budget,
                s.ready,
                s.unready,
                s.bare,
                s.always_allow,
                if said { "fires" } else { "is silent" },
                if truth { "some pod" } else { "none" }
            ));
        }
        blocked += usize::from(truth);
    }
    eprintln!("[e2e] pdb-disruptions-blocked held to the eviction API on {judged} PDBs ({blocked} blocked)");
    eprintln!("[e2e] dry-run evictions of {} pods, by answer: {counts:?}", pods.len());
    for code in [201, 429, 500] {
        assert!(counts.get(&code).copied().unwrap_or(0) >= 5, "few answers {code}: {counts:?}");
    }
    assert!(wrong.is_empty(), "{} evictions predicted wrong:\n{}", wrong.len(), wrong.join("\n"));
}

// --- 4. the drill --------------------------------------------------------------------------------

/// Both shipped webhook configurations, fail-closed (`failurePolicy: Fail`).
fn register_fail_closed(cp: &ControlPlane, hg: &HaGuard) {
    let mut docs = webhook_configurations(hg);
    for doc in &mut docs {
        for hook in doc["webhooks"].as_array_mut().into_iter().flatten() {
            hook["failurePolicy"] = json!("Fail");
        }
    }
    register_configurations(cp, hg, &docs, &[]).unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(20)));
}

fn denied(hg: &HaGuard) -> f64 {
    hg.metrics().sum("ha_guard_admission_requests_total", &[("webhook", "validate"), ("decision", "denied")])
}

fn node_of(cp: &ControlPlane, ns: &str, pod: &str) -> String {
    cp.kubectl(&["-n", ns, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"]).success().stdout
}

fn drill(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "drill";
    cp.namespace(ns, &[]);
    let web = spread_out(deployment(ns, "web", 3));
    let budget = pdb(ns, "web", "web", json!({"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"}));
    let file = cp.root().join("drill.yaml");
    std::fs::write(&file, yaml_file(&[web, budget])).expect("drill.yaml");
    let findings_before = hg.metrics().sum("ha_guard_findings_total", &[]);
    cp.kubectl(&["apply", "-f", file.to_str().expect("path")]).success().no_warnings();
    cp.kubectl(&["-n", ns, "rollout", "status", "deployment/web", "--timeout=90s"]).success();

    let pods =
        cp.kubectl(&["-n", ns, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].metadata.name}"]).success();
    let first = pods.stdout.split_whitespace().next().expect("a pod").to_string();
    let node = node_of(cp, ns, &first);
    let started = Instant::now();
    let drained = cp
        .kubectl(&["drain", &node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s"])
        .success()
        .no_warnings();
    eprintln!("[e2e] kubectl drain {node} in {:.1?}: {}", started.elapsed(), drained.stdout.trim().replace('\n', "; "));
    assert!(drained.stdout.contains(&format!("pod/{first} evicted")), "{}", drained.output());
    cp.kubectl(&["-n", ns, "rollout", "status", "deployment/web", "--timeout=90s"]).success();
    let placed: Vec<String> = cp
        .kubectl(&["-n", ns, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.nodeName}"])
        .success()
        .stdout
        .split_whitespace()
        .map(str::to_string)
        .collect();
    eprintln!("[e2e] after the drain of {node}: replicas on {placed:?}");
    assert_eq!(placed.len(), 3, "{placed:?}");
    assert!(!placed.contains(&node), "a replica on the drained node: {placed:?}");
    let mut distinct = placed.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "the spread keeps one replica per node: {placed:?}");
    cp.kubectl(&["uncordon", &node]).success();
    assert_eq!(hg.metrics().sum("ha_guard_findings_total", &[]), findings_before, "ha-guard found nothing to say");
}

// --- 3. controllers ------------------------------------------------------------------------------

fn controllers(cp: &ControlPlane, hg: &HaGuard) {
    let calls_before = ApiserverCalls::of(&cp.metrics());
    let denied_before = denied(hg);
    // The scenarios' namespace goes: hundreds of workloads and budgets that ha-guard would refuse
    // today, emptied by the namespace controller and the garbage collector.
    let started = Instant::now();
    cp.kubectl(&["delete", "namespace", NS, "--wait=true", "--timeout=180s"]).success();
    eprintln!("[e2e] namespace {NS} deleted in {:.1?}", started.elapsed());
    let ns = "busy";
    cp.namespace(ns, &[]);
    // An HA workload and its budget, then what operators and controllers do to it.
    cp.apply(spread_out(deployment(ns, "api", 3))).success();
    cp.apply(pdb(ns, "api", "api", json!({"maxUnavailable": 1}))).success();
    cp.kubectl(&["-n", ns, "rollout", "status", "deployment/api", "--timeout=90s"]).success();
    // A rollout: the deployment controller replaces every pod.
    cp.kubectl(&["-n", ns, "set", "image", "deployment/api", "app=nginx:1.28"]).success();
    cp.kubectl(&["-n", ns, "rollout", "status", "deployment/api", "--timeout=90s"]).success();
    cp.kubectl(&["-n", ns, "rollout", "restart", "deployment/api"]).success();
    cp.kubectl(&["-n", ns, "rollout", "status", "deployment/api", "--timeout=90s"]).success();
    // kubectl scale: a write of the scale subresource, warned at most.
    cp.kubectl(&["-n", ns, "scale", "deployment/api", "--replicas=4"]).success();
    cp.kubectl(&["-n", ns, "rollout", "status", "deployment/api", "--timeout=90s"]).success();
    // A drain of the node of one of its pods, then uncordon.
    let pod = cp
        .kubectl(&["-n", ns, "get", "pods", "-l", "app=api", "-o", "jsonpath={.items[0].metadata.name}"])
        .success()
        .stdout;
    let node = node_of(cp, ns, &pod);
    cp.kubectl(&["drain", &node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s"]).success();
    cp.kubectl(&["uncordon", &node]).success();
    cp.kubectl(&["-n", ns, "rollout", "status", "deployment/api", "--timeout=90s"]).success();
    // The namespace deleted: the namespace controller and the garbage collector empty it.
    cp.kubectl(&["delete", "namespace", ns, "--wait=true", "--timeout=120s"]).success();
    let calls = ApiserverCalls::of(&cp.metrics()).minus(calls_before);
    eprintln!("[e2e] webhook calls while controllers worked: {calls:?}");
    assert!(calls.calls > 0.0, "the writes went through the webhooks: {calls:?}");
    assert_eq!((calls.rejected, calls.failed, calls.fail_open), (0.0, 0.0, 0.0), "{calls:?}");
    assert_eq!(denied(hg), denied_before, "ha-guard denied nothing");
}

// --- 5. posture and 6. drain predictions, on real placements -------------------------------------

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");
const POSTURE: [&str; 5] =
    ["replicas-share-node", "pdb-disruptions-blocked", "spread-pending", "pod-on-cordoned-node", "pods-pending"];
const ZONE: &str = "topology.kubernetes.io/zone";

/// `ha-guard audit ARGS --format json` (exit 0 or 1 as the findings say): the report.
fn audit_json(cp: &ControlPlane, args: &[&str]) -> Value {
    let out = std::process::Command::new(BIN)
        .arg("audit")
        .args(args)
        .args(["--format", "json"])
        .env("KUBECONFIG", cp.kubeconfig())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run ha-guard audit");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "ha-guard audit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("audit json ({e})"))
}

/// (rule, name, message) of the report's findings of `rules`, sorted.
fn of_rules(report: &Value, rules: &[&str]) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| rules.contains(&f["rule"].as_str().unwrap_or_default()))
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("rule"), s("name"), s("message"))
        })
        .collect();
    out.sort();
    out
}

#[track_caller]
fn only(found: &[(String, String, String)], expected: &[(&str, &str)], needles: &[&str]) {
    let got: Vec<(&str, &str)> = found.iter().map(|(r, n, _)| (r.as_str(), n.as_str())).collect();
    assert_eq!(got, expected, "{found:#?}");
    for needle in needles {
        assert!(found.iter().any(|(_, _, m)| m.contains(needle)), "{needle:?} in the messages: {found:#?}");
    }
}

/// The live posture findings of namespace `ns`, once the PDBs' statuses and the pods have settled.
fn posture(cp: &ControlPlane, ns: &str) -> Vec<(String, String, String)> {
    of_rules(&audit_json(cp, &["--namespace", ns]), &POSTURE)
}

/// The names of the pods of `app` in `ns`, sorted.
fn pods_of(cp: &ControlPlane, ns: &str, app: &str) -> Vec<String> {
    let out =
        cp.kubectl(&["-n", ns, "get", "pods", "-l", &format!("app={app}"), "-o", "jsonpath={.items[*].metadata.name}"]);
    let mut names: Vec<String> = out.success().stdout.split_whitespace().map(str::to_string).collect();
    names.sort();
    names
}

/// Waits until Deployment `name` has rolled out, and the PDBs of `ns` have a current status.
fn rolled_out(cp: &ControlPlane, ns: &str, name: &str) {
    cp.kubectl(&["-n", ns, "rollout", "status", &format!("deployment/{name}"), "--timeout=90s"]).success();
    poll("the PDBs' statuses are current", WAIT, Duration::from_millis(200), || {
        let pdbs = cp.kubectl(&["-n", ns, "get", "pdb", "-o", "json"]).success().json();
        let stale = pdbs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["status"]["observedGeneration"] != p["metadata"]["generation"]);
        if stale { Err("stale".into()) } else { Ok(()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Required node affinity: only the nodes without a zone (node-a .. node-d).
fn unzoned() -> Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ZONE, "operator": "DoesNotExist"}]}]}}})
}

fn posture_on_real_placements(cp: &ControlPlane) {
    let ns = "posture";
    cp.namespace(ns, &[]);
    cp.kwok_nodes(&[
        ("z-a1", &[(ZONE, "zone-a"), ("pool", "first")]),
        ("z-a2", &[(ZONE, "zone-a")]),
        ("z-b1", &[(ZONE, "zone-b")]),
    ]);
    assert_eq!(posture(cp, ns), vec![], "an empty namespace");

    // Two replicas of a pool that had one node when they were placed, Running and never Ready
    // (kwok), under a budget that keeps unhealthy pods (IfHealthyBudget): the disruption controller
    // allows nothing. Then the pool grows to three nodes: the replicas still share the first.
    let mut pair = pod(deployment(ns, "pair", 2), json!({"nodeSelector": {"pool": "first"}}));
    pair["spec"]["template"]["metadata"]["labels"][NOT_READY] = json!("true");
    cp.apply(&pair).success();
    cp.apply(pdb(ns, "pair", "pair", json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "IfHealthyBudget"})))
        .success()
        .warns(&["pdb-unhealthy-eviction-policy"]);
    poll("pair's pods Running", WAIT, Duration::from_millis(200), || {
        let running = cp.kubectl(&[
            "-n",
            ns,
            "get",
            "pods",
            "-l",
            "app=pair",
            "--field-selector=status.phase=Running",
            "-o",
            "name",
        ]);
        if running.success().stdout.lines().count() == 2 { Ok(()) } else { Err("not yet".into()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    for n in ["z-a2", "z-b1"] {
        cp.kubectl(&["label", "node", n, "pool=first"]).success();
    }
    poll("the controller's word on pair", WAIT, Duration::from_millis(250), || {
        let found = posture(cp, ns);
        if found.len() == 2 { Ok(()) } else { Err(format!("{found:#?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let names = pods_of(cp, ns, "pair");
    only(
        &posture(cp, ns),
        &[("pdb-disruptions-blocked", "pair"), ("replicas-share-node", "pair")],
        &[
            &format!(
                "2 of its 2 running pods are on node z-a1 ({}, {}) although 3 nodes could hold them apart",
                names[0], names[1]
            ),
            "unhealthy pods: 0 of 2 expected pods are healthy",
            "and minAvailable 1 needs 1",
        ],
    );

    // Ready, and spread over nodes without a zone, one a node (a rollout): nothing left.
    let apart = json!({"spec": {"template": {"metadata": {"labels": {NOT_READY: null}},
        "spec": {"nodeSelector": null, "affinity": unzoned(),
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "pair"}}}]}}}});
    cp.kubectl(&["-n", ns, "patch", "deployment", "pair", "--type=merge", "-p", &apart.to_string()]).success();
    rolled_out(cp, ns, "pair");
    poll("nothing left of pair", WAIT, Duration::from_millis(250), || {
        let found = posture(cp, ns);
        if found.is_empty() { Ok(()) } else { Err(format!("{found:#?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));

    // A DoNotSchedule zone spread asking for three zones where the scheduler knows two: it places
    // one replica a zone and leaves the third Pending.
    let zonal = pod(
        deployment(ns, "zonal", 3),
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "minDomains": 3, "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "zonal"}}}]}),
    );
    cp.apply(&zonal).success();
    poll("zonal's third replica Pending", WAIT, Duration::from_millis(250), || {
        let found = posture(cp, ns);
        if found.iter().any(|(r, _, _)| r == "spread-pending") { Ok(()) } else { Err(format!("{found:#?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    only(
        &posture(cp, ns),
        &[("spread-pending", "zonal")],
        &["1 of its pods is Pending", "topologySpreadConstraints[0] (topologyKey topology.kubernetes.io/zone"],
    );
    // A node in a third zone: the scheduler places it.
    cp.kwok_nodes(&[("z-c1", &[(ZONE, "zone-c")])]);
    rolled_out(cp, ns, "zonal");
    only(&posture(cp, ns), &[], &[]);

    // Pods no node has room for (a kwok node has 1k CPUs): one pods-pending finding with the
    // scheduler's own words.
    let greedy = pod(
        deployment(ns, "greedy", 2),
        json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "5000"}}}]}),
    );
    cp.apply(&greedy).success();
    poll("greedy's pods Pending, the scheduler's reason read", WAIT, Duration::from_millis(250), || {
        let found = posture(cp, ns);
        if found.iter().any(|(r, _, m)| r == "pods-pending" && m.contains("2 of its 2 pods are Pending")) {
            Ok(())
        } else {
            Err(format!("{found:#?}"))
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    only(&posture(cp, ns), &[("pods-pending", "greedy")], &["the scheduler says: 0/", "Insufficient cpu"]);
    cp.kubectl(&["-n", ns, "delete", "deployment", "greedy", "--wait=true"]).success();
    poll("greedy gone", WAIT, Duration::from_millis(250), || {
        let found = posture(cp, ns);
        if found.is_empty() { Ok(()) } else { Err(format!("{found:#?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));

    // Pods that tolerate the cordon taint, and their node cordoned.
    let sticky = pod(
        spread_out(deployment(ns, "sticky", 2)),
        json!({"affinity": unzoned(), "tolerations": [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}),
    );
    cp.apply(&sticky).success();
    rolled_out(cp, ns, "sticky");
    only(&posture(cp, ns), &[], &[]);
    let first = pods_of(cp, ns, "sticky").remove(0);
    let node = node_of(cp, ns, &first);
    cp.kubectl(&["cordon", &node]).success();
    only(
        &posture(cp, ns),
        &[("pod-on-cordoned-node", "sticky")],
        &[&format!("1 pod on cordoned nodes ({first} on {node})")],
    );
    cp.kubectl(&["uncordon", &node]).success();
    only(&posture(cp, ns), &[], &[]);
}

/// `ha-guard audit --drain` on pods the scheduler placed and budgets the controller computed, then
/// the drain it predicts to hang, run for real.
fn drain_predictions(cp: &ControlPlane) {
    let ns = "drains";
    cp.namespace(ns, &[]);
    // Both replicas of `both` on z-b1 (the only node of zone-b), a budget that allows one.
    cp.apply(pod(deployment(ns, "both", 2), json!({"nodeSelector": {"kubernetes.io/hostname": "z-b1"}}))).success();
    cp.apply(pdb(ns, "both", "both", json!({"maxUnavailable": 1}))).success();
    // Three replicas, one a node (among the nodes without a zone), a budget that allows one.
    cp.apply(pod(spread_out(deployment(ns, "three", 3)), json!({"affinity": unzoned()}))).success();
    cp.apply(pdb(ns, "three", "three", json!({"minAvailable": 2}))).success();
    rolled_out(cp, ns, "both");
    rolled_out(cp, ns, "three");
    let both = pods_of(cp, ns, "both");
    let three = pods_of(cp, ns, "three");
    let drained = |args: &[&str]| {
        let mut all = vec!["--namespace", ns];
        all.extend_from_slice(args);
        of_rules(
            &audit_json(cp, &all),
            &["drain-blocked", "drain-takes-all-replicas", "drain-leaves-pending", "drain-refused"],
        )
    };
    let expected = [("drain-blocked", "both"), ("drain-takes-all-replicas", "both")];
    let evicts = format!("evicts {}, then refuses the eviction of {}", both[0], both[1]);
    let needles = [evicts.as_str(), "1 healthy, 1 needed: 0 disruptions allowed"];
    only(&drained(&["--drain", "z-b1"]), &expected, &needles);
    let report = audit_json(cp, &["--namespace", ns, "--drain", "z-b1"]);
    let run = &report["drains"][0];
    assert_eq!((run["nodes"].clone(), run["outcome"].clone()), (json!(["z-b1"]), json!("hangs")), "{run}");
    let results: Vec<(&str, &str)> = run["evictions"]
        .as_array()
        .expect("evictions")
        .iter()
        .map(|e| (e["pod"].as_str().unwrap_or_default(), e["result"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(results, [(both[0].as_str(), "evicted"), (both[1].as_str(), "refused")], "{run}");
    only(&drained(&["--drain-zone", "zone-b"]), &expected, &["zone zone-b"]);
    // --drain-each: every schedulable node alone, the same replay as --drain of that node.
    let each = audit_json(cp, &["--namespace", ns, "--drain-each"]);
    let outcomes: BTreeMap<String, String> = each["drains"]
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
    let schedulable =
        cp.kubectl(&["get", "nodes", "--field-selector=spec.unschedulable=false", "-o", "name"]).success();
    assert_eq!(outcomes.len(), schedulable.stdout.lines().count(), "one drain a schedulable node: {outcomes:?}");
    assert_eq!(outcomes.get("z-b1").map(String::as_str), Some("hangs"), "{outcomes:?}");
    for (node, outcome) in &outcomes {
        let alone = audit_json(cp, &["--namespace", ns, "--drain", node]);
        assert_eq!(alone["drains"][0]["outcome"].as_str(), Some(outcome.as_str()), "{node}");
    }
    let text = std::process::Command::new(BIN)
        .args(["audit", "--namespace", ns, "--drain-each"])
        .env("KUBECONFIG", cp.kubeconfig())
        .output()
        .expect("run ha-guard audit");
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    let troubled = outcomes.values().filter(|o| *o != "completes").count();
    assert!(
        text.contains(&format!("{troubled} of {} nodes cannot be drained cleanly today:", outcomes.len()))
            && text.contains("drain of z-b1: hangs: drains/"),
        "{text}"
    );
    eprintln!("[e2e] ha-guard audit --drain-each --namespace {ns}:\n{text}");

    // One of three replicas: its replacement goes to the fourth node, nothing to say. Two of three:
    // the first replacement takes the fourth node, the budget lets the second go, and its
    // replacement fits nowhere (the cordoned nodes are still domains of the hostname spread):
    // the drain completes and leaves it Pending.
    let nodes: Vec<String> = three.iter().map(|p| node_of(cp, ns, p)).collect();
    only(&drained(&["--drain", &nodes[0]]), &[], &[]);
    let two = &["--drain", nodes[0].as_str(), nodes[1].as_str()];
    only(
        &drained(two),
        &[("drain-leaves-pending", "three")],
        &["completes, but the replacement of", "topologySpreadConstraints[0] would be skewed beyond maxSkew"],
    );
    let mut all = vec!["--namespace", ns];
    all.extend_from_slice(two);
    let report = audit_json(cp, &all);
    assert_eq!(report["drains"][0]["outcome"], "leaves-pending", "{}", report["drains"]);
    // Held to kubectl drain: it completes, and one replica of three stays Pending until uncordon.
    let out =
        cp.kubectl(&["drain", &nodes[0], &nodes[1], "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"]);
    assert!(out.ok(), "the drain completes: {}", out.output());
    let pending = cp
        .kubectl(&["-n", ns, "get", "pods", "-l", "app=three", "--field-selector=status.phase=Pending", "-o", "name"])
        .success()
        .stdout;
    assert_eq!(pending.lines().count(), 1, "one replica Pending: {pending}");
    for n in &nodes[..2] {
        cp.kubectl(&["uncordon", n]).success();
    }
    rolled_out(cp, ns, "three");

    // The prediction held to kubectl drain: the second of `both` is refused until the drain gives
    // up, and its replacement (which only z-b1 could take) stays Pending.
    let out = cp.kubectl(&["drain", "z-b1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=20s"]);
    assert!(!out.ok(), "the drain hangs on both's budget: {}", out.output());
    assert!(
        out.stderr.contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{}",
        out.output()
    );
    let left: Vec<String> = pods_of(cp, ns, "both").into_iter().filter(|p| node_of(cp, ns, p) == "z-b1").collect();
    assert_eq!(left.len(), 1, "one of both's replicas is left on z-b1: {left:?}");
    cp.kubectl(&["uncordon", "z-b1"]).success();
    rolled_out(cp, ns, "both");
}

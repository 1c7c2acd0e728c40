//! End-to-end: will this drain finish? (issue 37). On a control plane whose scheduler,
//! controllers and kwok place, count and replace the pods, each generated scenario is predicted
//! with `ha-guard audit --drain NODE --format json` and then really drained with `kubectl drain
//! NODE --ignore-daemonsets --delete-emptydir-data`; the predicted outcome, the pods evicted and
//! the replacements left Pending must be what happened, scenario by scenario (the table is
//! printed).
//!
//! Each scenario has its own namespace and its own three nodes (labelled `scenario: NAME`, which
//! its pods select), so scenarios drain side by side without touching each other. A drain that
//! hangs is told by kubectl giving up on a budget's refusal after a short timeout, while the
//! budget's status no longer changes: kwok makes replacements Ready at once, so a refusal that
//! outlives a few retries is final.
//!
//! Then spreads against the scheduler: for node sets with taints, cordons, zones and missing keys,
//! and hostname or zone spreads (both taint policies, minDomains) or a required anti-affinity, the
//! number of replicas ha-guard's placement module places equals the number kube-scheduler places.
//!
//! No ha-guard webhook is registered: many scenarios are budgets ha-guard would refuse.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");

/// What keeps replicas apart or limits where they go.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Constraint {
    None,
    /// A DoNotSchedule hostname spread, maxSkew 1.
    Spread,
    /// The same with nodeTaintsPolicy: Honor.
    SpreadHonor,
    /// A required pod anti-affinity on the hostname.
    AntiAffinity,
    /// A request of 600 CPUs: kwok's nodes have 1000, so one such pod a node.
    Cpu,
    /// A host port: one such pod a node.
    HostPort,
}

#[derive(Clone, Debug)]
struct Scenario {
    name: String,
    replicas: i64,
    budget: Option<Value>,
    constraint: Constraint,
    /// Extra: a pod without a controller on the drained node; a second PDB; pods never Ready.
    bare: bool,
    second_pdb: bool,
    not_ready: bool,
    /// A `guard` pod created once the replicas run, on a node of its own, whose required
    /// anti-affinity on the hostname keeps the replicas off its node (InterPodAffinity's
    /// `satisfyExistingPodsAntiAffinity`): a replacement cannot go there either.
    guard: bool,
    /// Another namespace's pod (`NAME-crowd`), created first, taking the one node the replicas
    /// leave: `audit --namespace NAME --drain` must count it (a drain is simulated on the whole
    /// cluster), or it says the replacement fits there.
    crowd: bool,
}

fn scenarios() -> Vec<Scenario> {
    let budgets = [
        Some(json!({"maxUnavailable": 1})),
        Some(json!({"minAvailable": 1})),
        Some(json!({"minAvailable": 2})),
        Some(json!({})),
        None,
    ];
    let constraints = [
        Constraint::None,
        Constraint::Spread,
        Constraint::SpreadHonor,
        Constraint::AntiAffinity,
        Constraint::Cpu,
        Constraint::HostPort,
    ];
    let mut out = Vec::new();
    for (c, constraint) in constraints.iter().enumerate() {
        for (b, budget) in budgets.iter().enumerate() {
            for replicas in [2, 3] {
                // Not every combination: every constraint with every budget, replicas alternating.
                if (b + c + replicas as usize) % 2 == 1 && *constraint != Constraint::Spread {
                    continue;
                }
                out.push(Scenario {
                    name: format!("d{}", out.len()),
                    replicas,
                    budget: budget.clone(),
                    constraint: *constraint,
                    bare: false,
                    second_pdb: false,
                    not_ready: false,
                    guard: false,
                    crowd: false,
                });
            }
        }
    }
    let special = |replicas, budget: Value, constraint, bare, second_pdb, not_ready| Scenario {
        name: String::new(),
        replicas,
        budget: Some(budget),
        constraint,
        bare,
        second_pdb,
        not_ready,
        guard: false,
        crowd: false,
    };
    for s in [
        special(3, json!({"maxUnavailable": 1}), Constraint::Spread, true, false, false),
        special(3, json!({"maxUnavailable": 1}), Constraint::None, false, true, false),
        special(
            2,
            json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
            Constraint::None,
            false,
            false,
            true,
        ),
        special(
            2,
            json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
            Constraint::None,
            false,
            false,
            true,
        ),
        special(3, json!({"maxUnavailable": 1}), Constraint::AntiAffinity, false, true, false),
        special(3, json!({"minAvailable": 2}), Constraint::Cpu, true, false, false),
    ] {
        out.push(Scenario { name: format!("d{}", out.len()), ..s });
    }
    // An existing pod's anti-affinity: the replacement has nowhere else to go (its own
    // anti-affinity or spread keeps it off the other replica's node), and the guard's node refuses it.
    for constraint in [Constraint::AntiAffinity, Constraint::Spread, Constraint::None] {
        let budget = Some(json!({"maxUnavailable": 1}));
        let (bare, second_pdb, not_ready) = (false, false, false);
        let name = format!("d{}", out.len());
        out.push(Scenario {
            name,
            replicas: 2,
            budget,
            constraint,
            bare,
            second_pdb,
            not_ready,
            guard: true,
            crowd: false,
        });
    }
    // Another namespace's pod fills the node the replacement would take.
    for constraint in [Constraint::Cpu, Constraint::None] {
        let budget = Some(json!({"maxUnavailable": 1}));
        let (bare, second_pdb, not_ready, guard) = (false, false, false, false);
        let name = format!("d{}", out.len());
        out.push(Scenario { name, replicas: 2, budget, constraint, bare, second_pdb, not_ready, guard, crowd: true });
    }
    out
}

/// The crowd of a scenario: a Deployment in namespace `NS-crowd` whose one pod asks 600 CPUs on
/// the scenario's nodes (kwok's have 1,000): no replica asking as much fits beside it.
fn crowd(ns: &str) -> Vec<Value> {
    let labels = json!({"app": "crowd"});
    let other = format!("{ns}-crowd");
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "crowd", "namespace": other},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
                "spec": {"nodeSelector": {"scenario": ns}, "containers": [{"name": "crowd", "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "600"}}}]}}}}),
    ]
}

/// The guard of a scenario: one pod on the scenario's nodes, keeping `app` pods off its node.
fn guard(ns: &str) -> Value {
    let labels = json!({"app": "guard"});
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "guard", "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
            "spec": {"nodeSelector": {"scenario": ns}, "containers": [{"name": "guard", "image": "nginx:1.27"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "app"}}}]}}}}}})
}

fn objects(s: &Scenario) -> Vec<Value> {
    let ns = &s.name;
    let app = "app";
    let mut spec = json!({"nodeSelector": {"scenario": ns}, "containers": [{"name": "app", "image": "nginx:1.27"}]});
    let own = json!({"matchLabels": {"app": app}});
    match s.constraint {
        Constraint::None => {}
        Constraint::Spread | Constraint::SpreadHonor => {
            let mut c = json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": own});
            if s.constraint == Constraint::SpreadHonor {
                c["nodeTaintsPolicy"] = json!("Honor");
            }
            spec["topologySpreadConstraints"] = json!([c]);
        }
        Constraint::AntiAffinity => {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": own}]}});
        }
        Constraint::Cpu => spec["containers"][0]["resources"] = json!({"requests": {"cpu": "600"}}),
        Constraint::HostPort => spec["containers"][0]["ports"] = json!([{"containerPort": 8080, "hostPort": 18080}]),
    }
    let mut labels = json!({"app": app});
    if s.not_ready {
        labels[NOT_READY] = json!("true");
    }
    let mut out =
        vec![json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app, "namespace": ns},
        "spec": {"replicas": s.replicas, "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": labels}, "spec": spec}}})];
    if let Some(budget) = &s.budget {
        let mut pdb_spec = json!({"selector": {"matchLabels": {"app": app}}});
        for (k, v) in budget.as_object().expect("budget") {
            pdb_spec[k] = v.clone();
        }
        out.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": app, "namespace": ns}, "spec": pdb_spec}));
    }
    if s.second_pdb {
        out.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "also", "namespace": ns}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}}}));
    }
    out
}

fn pods(cp: &ControlPlane, ns: &str) -> Vec<(String, String, String)> {
    let list = cp.kubectl(&["-n", ns, "get", "pods", "-o", "json"]).success().json();
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

/// What a drain did or is predicted to do: its outcome, the pods evicted, the replacements left Pending.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Result {
    outcome: String,
    evicted: BTreeSet<String>,
    pending: usize,
}

fn predict(cp: &ControlPlane, ns: &str, node: &str) -> (Result, Value) {
    let out = std::process::Command::new(BIN)
        .args(["audit", "--namespace", ns, "--drain", node, "--format", "json"])
        .env("KUBECONFIG", cp.kubeconfig())
        .output()
        .expect("run ha-guard audit");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("audit json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let run = report["drains"][0].clone();
    let evicted = run["evictions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["result"] == "evicted")
        .map(|e| e["pod"].as_str().unwrap_or_default().to_string())
        .collect();
    let pending = run["pending"].as_array().map_or(0, Vec::len);
    (Result { outcome: run["outcome"].as_str().unwrap_or_default().to_string(), evicted, pending }, run)
}

/// The real drain of `node`: kubectl drain with a short timeout, then the pods as they settle.
fn drain(cp: &ControlPlane, ns: &str, node: &str, before: &[(String, String, String)]) -> (Result, String) {
    let out = cp.kubectl(&["drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=12s"]);
    let text = out.output();
    let outcome = if out.ok() {
        None
    } else if text.contains("declare no controller") || text.contains("more than one PodDisruptionBudget") {
        Some("refused")
    } else if text.contains("Cannot evict pod as it would violate the pod's disruption budget") {
        Some("hangs")
    } else {
        panic!("kubectl drain {node} failed otherwise: {text}");
    };
    // Settled: every replacement Running or Pending for good (kwok runs a placed pod at once).
    std::thread::sleep(Duration::from_secs(2));
    let after = pods(cp, ns);
    let names: BTreeSet<&str> = after.iter().map(|(n, _, _)| n.as_str()).collect();
    let evicted: BTreeSet<String> = before
        .iter()
        .filter(|(n, on, _)| on == node && !names.contains(n.as_str()))
        .map(|(n, _, _)| n.clone())
        .collect();
    let pending_before = before.iter().filter(|(_, _, phase)| phase == "Pending").count();
    let pending = after.iter().filter(|(_, _, phase)| phase == "Pending").count().saturating_sub(pending_before);
    let outcome = outcome.unwrap_or(if pending > 0 { "leaves-pending" } else { "completes" }).to_string();
    (Result { outcome, evicted, pending }, text)
}

fn describe(s: &Scenario) -> String {
    let mut d = format!(
        "{} replicas {} {:?} {}",
        s.name,
        s.replicas,
        s.constraint,
        s.budget.as_ref().map_or("no PDB".to_string(), Value::to_string)
    );
    if s.bare {
        d.push_str(" +bare pod");
    }
    if s.second_pdb {
        d.push_str(" +second PDB");
    }
    if s.not_ready {
        d.push_str(" not Ready");
    }
    if s.guard {
        d.push_str(" +guard's anti-affinity");
    }
    if s.crowd {
        d.push_str(" +another namespace's 600-CPU pod");
    }
    d
}

/// One scenario: set up, wait, predict, drain, compare. The table row, and the mismatch if any.
fn run(cp: &ControlPlane, s: &Scenario) -> (String, Option<String>) {
    let ns = &s.name;
    if s.crowd {
        cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&crowd(ns))).success();
        let other = format!("{ns}-crowd");
        poll("the crowd Running", WAIT, Duration::from_millis(200), || {
            let running = pods(cp, &other).iter().any(|(_, _, phase)| phase == "Running");
            if running { Ok(()) } else { Err(format!("{:?}", pods(cp, &other))) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let file = cp.root().join(format!("{ns}.yaml"));
    std::fs::write(&file, yaml_file(&objects(s))).expect("scenario file");
    cp.kubectl(&["create", "-f", file.to_str().expect("path")]).success();
    let want = s.replicas as usize;
    poll(&format!("{ns} placed"), WAIT, Duration::from_millis(300), || {
        let p = pods(cp, ns);
        let running = p.iter().filter(|(_, _, phase)| phase == "Running").count();
        if running == want { Ok(()) } else { Err(format!("{p:?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    if s.guard {
        cp.apply(guard(ns)).success();
        poll("the guard Running", WAIT, Duration::from_millis(200), || {
            let running = pods(cp, ns).iter().any(|(n, _, phase)| n.starts_with("guard-") && phase == "Running");
            if running { Ok(()) } else { Err(format!("{:?}", pods(cp, ns))) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    // The pod to drain: the node of the first replica (a bare pod joins it there).
    let placed = pods(cp, ns);
    let replicas = placed.iter().filter(|(n, _, _)| n.starts_with("app-"));
    let node = replicas.map(|(_, on, _)| on.clone()).min().expect("a placed pod");
    if s.bare {
        cp.apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": ns},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx:1.27"}]}}))
            .success();
        poll("the bare pod Running", WAIT, Duration::from_millis(200), || {
            let running = pods(cp, ns).iter().any(|(n, _, phase)| n == "bare" && phase == "Running");
            if running { Ok(()) } else { Err(String::new()) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    // The PDBs' statuses current.
    poll(&format!("{ns}'s budgets observed"), WAIT, Duration::from_millis(200), || {
        let pdbs = cp.kubectl(&["-n", ns, "get", "pdb", "-o", "json"]).success().json();
        let current = pdbs["items"].as_array().into_iter().flatten().all(|p| {
            p["status"]["observedGeneration"] == p["metadata"]["generation"]
                && p["status"]["currentHealthy"].as_i64().is_some()
        });
        if current { Ok(()) } else { Err("not yet".into()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(1500));
    let before = pods(cp, ns);
    let (predicted, replay) = predict(cp, ns, &node);
    let (real, text) = drain(cp, ns, &node, &before);
    let row = format!(
        "{:<60} {:<8} | predicted {:<15} evicted {} pending {} | real {:<15} evicted {} pending {}{}",
        describe(s),
        node.trim_start_matches(&format!("{ns}-")),
        predicted.outcome,
        predicted.evicted.len(),
        predicted.pending,
        real.outcome,
        real.evicted.len(),
        real.pending,
        if predicted == real { "" } else { "   <-- differs" }
    );
    let mismatch = (predicted != real).then(|| {
        format!("{}: predicted {predicted:?}, real {real:?}\nreplay: {replay}\nkubectl drain: {text}", describe(s))
    });
    (row, mismatch)
}

#[test]
fn drains_end_as_predicted() {
    let scenarios = scenarios();
    assert!(scenarios.len() >= 40, "{} scenarios", scenarios.len());
    let h = Harness::start(Setup { controllers: true, webhooks: &[], ..Default::default() });
    let cp = &h.cp;
    let nodes: Vec<(String, Vec<(String, String)>)> = scenarios
        .iter()
        .flat_map(|s| {
            (1..=3).map(move |i| (format!("{}-n{i}", s.name), vec![("scenario".to_string(), s.name.clone())]))
        })
        .collect();
    let refs: Vec<(&str, Vec<(&str, &str)>)> =
        nodes.iter().map(|(n, l)| (n.as_str(), l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())).collect();
    let refs: Vec<(&str, &[(&str, &str)])> = refs.iter().map(|(n, l)| (*n, l.as_slice())).collect();
    let started = Instant::now();
    cp.kwok_nodes(&refs);
    let namespaces: Vec<Value> = scenarios
        .iter()
        .map(|s| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.name}}))
        .collect();
    cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&namespaces)).success();
    eprintln!("[e2e] {} nodes and {} namespaces in {:.1?}", refs.len(), scenarios.len(), started.elapsed());
    let started = Instant::now();
    // Eight at a time: each scenario has its own nodes and namespace.
    let results: Vec<(String, Option<String>)> = std::thread::scope(|scope| {
        scenarios
            .chunks(scenarios.len().div_ceil(8))
            .map(|chunk| scope.spawn(move || chunk.iter().map(|s| run(cp, s)).collect::<Vec<_>>()))
            .collect::<Vec<_>>()
            .into_iter()
            .flat_map(|t| t.join().expect("a scenario thread"))
            .collect()
    });
    let mut table = String::new();
    for (row, _) in &results {
        let _ = writeln!(table, "{row}");
    }
    eprintln!("[e2e] {} drains predicted and run in {:.1?}:\n{table}", results.len(), started.elapsed());
    let outcomes: BTreeSet<&str> =
        results.iter().filter_map(|(row, _)| row.split("| real ").nth(1)?.split_whitespace().next()).collect();
    eprintln!("[e2e] outcomes seen: {outcomes:?}");
    let wrong: Vec<&String> = results.iter().filter_map(|(_, m)| m.as_ref()).collect();
    assert!(
        wrong.is_empty(),
        "{} of {} drains not as predicted:\n{}",
        wrong.len(),
        results.len(),
        wrong.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n\n")
    );
    for want in ["completes", "leaves-pending", "hangs", "refused"] {
        assert!(outcomes.contains(want), "no scenario {want}: {outcomes:?}");
    }
    // The placement module against the scheduler, on node sets of their own.
    spreads(cp);
}

// --- spreads against the scheduler ---------------------------------------------------------------

/// A node of a spread case: (suffix, labels, tainted, cordoned).
type SpreadNode = (&'static str, Vec<(&'static str, &'static str)>, bool, bool);

/// A node set and a placement rule: how many of `replicas` the scheduler places.
struct SpreadCase {
    name: String,
    /// Nodes: (suffix, labels, tainted, cordoned).
    nodes: Vec<SpreadNode>,
    rule: Value,
    replicas: i64,
}

fn spread_cases() -> Vec<SpreadCase> {
    let hostname = |extra: Value| {
        let mut c = json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "app"}}});
        for (k, v) in extra.as_object().expect("extra") {
            c[k] = v.clone();
        }
        json!({"topologySpreadConstraints": [c]})
    };
    let zone = |extra: Value| {
        let mut c = json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "app"}}});
        for (k, v) in extra.as_object().expect("extra") {
            c[k] = v.clone();
        }
        json!({"topologySpreadConstraints": [c]})
    };
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "app"}}}]}}});
    let plain = |n: usize| (0..n).map(|i| (["a", "b", "c", "d"][i], vec![], false, false)).collect::<Vec<_>>();
    let tainted = vec![("a", vec![], true, false), ("b", vec![], false, false), ("c", vec![], false, false)];
    let cordoned = vec![("a", vec![], false, true), ("b", vec![], false, false), ("c", vec![], false, false)];
    let zoned = vec![
        ("a", vec![("topology.kubernetes.io/zone", "za")], false, false),
        ("b", vec![("topology.kubernetes.io/zone", "za")], false, false),
        ("c", vec![("topology.kubernetes.io/zone", "zb")], false, false),
        ("d", vec![("topology.kubernetes.io/zone", "zb")], false, false),
    ];
    let missing_key = vec![
        ("a", vec![("topology.kubernetes.io/zone", "za")], false, false),
        ("b", vec![("topology.kubernetes.io/zone", "zb")], false, false),
        ("c", vec![], false, false),
    ];
    let cases = [
        (plain(3), hostname(json!({})), 5),
        (tainted.clone(), hostname(json!({})), 5),
        (tainted, hostname(json!({"nodeTaintsPolicy": "Honor"})), 5),
        (cordoned.clone(), hostname(json!({})), 4),
        (cordoned, anti.clone(), 4),
        (plain(3), anti, 5),
        (zoned.clone(), zone(json!({})), 6),
        (zoned.clone(), zone(json!({"minDomains": 3})), 5),
        (zoned, hostname(json!({"minDomains": 5})), 9),
        (missing_key.clone(), zone(json!({})), 5),
        (missing_key, hostname(json!({})), 5),
        (plain(4), hostname(json!({"maxSkew": 2, "minDomains": 6})), 12),
    ];
    cases
        .into_iter()
        .enumerate()
        .map(|(i, (nodes, rule, replicas))| SpreadCase { name: format!("sp{i}"), nodes, rule, replicas })
        .collect()
}

fn spread_deployment(c: &SpreadCase) -> Value {
    let mut spec =
        json!({"nodeSelector": {"scenario": c.name}, "containers": [{"name": "app", "image": "nginx:1.27"}]});
    for (k, v) in c.rule.as_object().expect("rule") {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app", "namespace": c.name},
        "spec": {"replicas": c.replicas, "selector": {"matchLabels": {"app": "app"}},
            "template": {"metadata": {"labels": {"app": "app"}}, "spec": spec}}})
}

/// How many replicas ha-guard's placement module places on the cluster as the audit reads it.
fn predicted_placed(cp: &ControlPlane, rt: &tokio::runtime::Runtime, c: &SpreadCase) -> usize {
    use ha_guard::core::view::View;
    use ha_guard::core::view::placement::{Incoming, Nodes, place_replicas};
    let client = cp.kube_client(rt);
    let options = ha_guard::audit::read::ReadOptions { namespace: Some(c.name.clone()), ..Default::default() };
    let progress = ha_guard::audit::progress::Progress::new(false);
    let cluster = rt.block_on(ha_guard::audit::read::read(&client, &options, &progress)).expect("read the cluster");
    let nodes = cluster.index.nodes();
    let mut states = Nodes::empty(nodes);
    let d = spread_deployment(c);
    let spec: k8s_openapi::api::core::v1::PodSpec =
        serde_json::from_value(d["spec"]["template"]["spec"].clone()).expect("a pod spec");
    let labels: std::collections::BTreeMap<String, String> =
        serde_json::from_value(d["spec"]["template"]["metadata"]["labels"].clone()).expect("labels");
    place_replicas(Incoming { namespace: &c.name, labels: &labels, spec: &spec }, &mut states, c.replicas as usize)
}

fn spreads(cp: &ControlPlane) {
    let cases = spread_cases();
    let mut nodes: Vec<(String, Vec<(&str, String)>)> = Vec::new();
    for c in &cases {
        for (suffix, labels, _, _) in &c.nodes {
            let mut l: Vec<(&str, String)> = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
            l.push(("scenario", c.name.clone()));
            nodes.push((format!("{}-{suffix}", c.name), l));
        }
    }
    let refs: Vec<(&str, Vec<(&str, &str)>)> =
        nodes.iter().map(|(n, l)| (n.as_str(), l.iter().map(|(k, v)| (*k, v.as_str())).collect())).collect();
    let refs: Vec<(&str, &[(&str, &str)])> = refs.iter().map(|(n, l)| (*n, l.as_slice())).collect();
    cp.kwok_nodes(&refs);
    for c in &cases {
        for (suffix, _, tainted, cordoned) in &c.nodes {
            let node = format!("{}-{suffix}", c.name);
            if *tainted {
                cp.kubectl(&["taint", "node", &node, "dedicated=db:NoSchedule"]).success();
            }
            if *cordoned {
                cp.kubectl(&["cordon", &node]).success();
            }
        }
        cp.namespace(&c.name, &[]);
    }
    // The node lifecycle controller adds the cordon taint: wait for it (nodeTaintsPolicy reads it).
    std::thread::sleep(Duration::from_secs(2));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let mut table = String::new();
    let mut wrong = Vec::new();
    for c in &cases {
        let predicted = predicted_placed(cp, &rt, c);
        cp.apply(spread_deployment(c)).success();
        let mut last = (usize::MAX, 0);
        let mut stable = 0;
        let real = poll(&format!("{} settled", c.name), WAIT, Duration::from_millis(500), || {
            let p = pods(cp, &c.name);
            let running = p.iter().filter(|(_, _, phase)| phase == "Running").count();
            let pending = p.iter().filter(|(_, _, phase)| phase == "Pending").count();
            if running + pending == c.replicas as usize && (running, pending) == last {
                stable += 1;
            } else {
                stable = 0;
                last = (running, pending);
            }
            if stable >= 4 { Ok(running) } else { Err(format!("{running} running, {pending} pending")) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let nodes: Vec<String> = c
            .nodes
            .iter()
            .map(|(s, l, t, k)| {
                format!(
                    "{s}{}{}{}",
                    if l.is_empty() { "" } else { "(zone)" },
                    if *t { "(tainted)" } else { "" },
                    if *k { "(cordoned)" } else { "" }
                )
            })
            .collect();
        let _ = writeln!(
            table,
            "{:<5} nodes {:<40} {:<110} replicas {:>2} | ha-guard places {:>2} | scheduler {:>2}{}",
            c.name,
            nodes.join(" "),
            c.rule.to_string(),
            c.replicas,
            predicted,
            real,
            if predicted == real { "" } else { "   <-- differs" }
        );
        if predicted != real {
            wrong.push(format!("{}: ha-guard places {predicted}, the scheduler {real}", c.name));
        }
    }
    eprintln!("[e2e] replicas placed, ha-guard and kube-scheduler:\n{table}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

//! `ha-guard audit` over a generated cluster through the real apiserver: wall time, peak memory,
//! and what each pod costs in memory (issue 15, acceptance 4).
//!
//!     cargo bench --bench audit -- --workloads 10000 --pods 30000 --rounds 3
//!
//! One control plane (etcd + kube-apiserver from `tests/e2e/control-plane/`, via the end-to-end
//! harness in `tests/support/mod.rs`; no controller-manager, so nothing adds or removes objects
//! behind the bench). Then:
//!
//! 1. (the generator, shared with `benches/audit_cost.rs`: `benches/common/cluster.rs`)
//!    `--namespaces` namespaces, `--nodes` Nodes, and `--workloads` workloads spread over the
//!    namespaces: 3 in 4 Deployments (each with a ReplicaSet owned by it, as the deployment
//!    controller would write; `audit` reads ReplicaSets to find a pod's Deployment), 1 in 4
//!    StatefulSets; every second one with a PDB (status written as the disruption controller would),
//!    every fifth Deployment with an HPA; some break rules on purpose (one replica, no spread, a PDB
//!    with `maxUnavailable: 0`), so the report is not empty.
//! 2. `ha-guard audit --format json` (the release binary) `--rounds` times: the **0-pod baseline**.
//! 3. `--pods` Pods spread over the workloads (spec.nodeName set at create, owned by the
//!    ReplicaSet or the StatefulSet, status patched Running/Ready for most, Pending for a few; every
//!    13th workload has all its pods on one node), then `audit` `--rounds` times again.
//!
//! Writes go out from one kube-rs client, `--concurrency` at a time. Each audit runs under
//! `/usr/bin/time` (wall seconds and peak RSS, `%M`) and `nice -n 10`; its JSON is checked (findings
//! present, posture rules among them once pods exist). **Bytes per pod** = (median peak RSS with the
//! pods - median peak RSS with none) / pods: RSS-based, so it includes the decode buffers of a page
//! of pods and allocator slack, not only what is kept. For comparison the bench also measures, in its
//! own process with a counting allocator, the heap the kept projection (`PodInfo` in an `Arc`, as the
//! view holds it) takes per pod; the index's per-pod entries (owner and node lists) come on top.
//! `serve`'s background audit reads with the same code (`audit::read`), so the figure holds there.
//!
//! Flags (after `--`): `--workloads N` (10000), `--pods N` (30000), `--rounds N` (3),
//! `--namespaces N` (100), `--nodes N` (200), `--concurrency N` (64).

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/cluster.rs"]
mod cluster;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use ha_guard::core::model::Kind;
use ha_guard::core::model::live_pod::LivePod;
use ha_guard::core::view::{PodInfo, PodOwner};
use serde_json::{Value, json};
use support::*;

/// Counts live heap bytes, for the projection's size (the audit binary itself uses mimalloc).
struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The most LIVE has been since it was last reset.
static PEAK: AtomicIsize = AtomicIsize::new(0);
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(l.size() as isize, Ordering::Relaxed) + l.size() as isize;
        PEAK.fetch_max(now, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let now =
            LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed) + new as isize - l.size() as isize;
        PEAK.fetch_max(now, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}
#[global_allocator]
static ALLOC: Counting = Counting;

struct Args {
    workloads: usize,
    pods: usize,
    rounds: usize,
    namespaces: usize,
    nodes: usize,
    concurrency: usize,
}

fn args() -> Args {
    let mut a = Args { workloads: 10_000, pods: 30_000, rounds: 3, namespaces: 100, nodes: 200, concurrency: 64 };
    let list: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut it = list.iter();
    while let Some(flag) = it.next() {
        let v = it.next().and_then(|v| v.parse::<usize>().ok()).unwrap_or_else(|| {
            eprintln!("{flag}: expected a number after it");
            std::process::exit(2)
        });
        match flag.as_str() {
            "--workloads" if v > 0 => a.workloads = v,
            "--pods" => a.pods = v,
            "--rounds" if v > 0 => a.rounds = v,
            "--namespaces" if v > 0 => a.namespaces = v,
            "--nodes" if v > 0 => a.nodes = v,
            "--concurrency" if v > 0 => a.concurrency = v,
            other => {
                eprintln!(
                    "bad argument {other:?} {v}: --workloads N --pods N --rounds N --namespaces N --nodes N --concurrency N"
                );
                std::process::exit(2)
            }
        }
    }
    a
}

/// One audit run: wall seconds, peak RSS (KiB), and its report.
struct Run {
    wall: f64,
    rss_kib: u64,
    report: Value,
}

fn audit(binary: &Path, kubeconfig: &Path, dir: &Path) -> Run {
    let out = dir.join("audit.json");
    let timing = dir.join("time.txt");
    let _ = std::fs::remove_file(&out);
    let result = Command::new("/usr/bin/time")
        .args(["-f", "%e %M", "-o"])
        .arg(&timing)
        .args(["nice", "-n", "10"])
        .arg(binary)
        .args(["audit", "--format", "json", "--fail-on", "never"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--output")
        .arg(&out)
        .output()
        .expect("run /usr/bin/time ha-guard audit");
    let stderr = String::from_utf8_lossy(&result.stderr).to_string();
    assert!(result.status.success(), "ha-guard audit failed ({}):\n{stderr}", result.status);
    let t = std::fs::read_to_string(&timing).expect("time's output");
    let mut f = t.split_whitespace();
    let wall: f64 = f.next().and_then(|x| x.parse().ok()).expect("wall seconds");
    let rss_kib: u64 = f.next().and_then(|x| x.parse().ok()).expect("peak RSS");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("audit's report")).expect("json");
    Run { wall, rss_kib, report }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Counts of the report: findings, distinct objects with a finding, findings per rule.
fn describe(report: &Value) -> (usize, usize, std::collections::BTreeMap<String, usize>) {
    let findings = report["findings"].as_array().cloned().unwrap_or_default();
    let mut objects = std::collections::BTreeSet::new();
    let mut rules = std::collections::BTreeMap::new();
    for f in &findings {
        objects.insert((f["kind"].to_string(), f["namespace"].to_string(), f["name"].to_string()));
        *rules.entry(f["rule"].as_str().unwrap_or("?").to_string()).or_insert(0) += 1;
    }
    (findings.len(), objects.len(), rules)
}

/// Heap per pod of the kept projection: `n` pods like the generated ones decoded as the audit
/// decodes them (`LivePod`), projected (`PodInfo::of`) into `Arc`s, the decoded pod dropped.
fn projection_bytes(n: usize) -> f64 {
    let owners: Vec<Arc<str>> = (0..n / 3 + 1).map(|i| Arc::from(format!("app-{i:05}").as_str())).collect();
    let before = LIVE.load(Ordering::Relaxed);
    let mut kept = Vec::with_capacity(n);
    let vec_bytes = LIVE.load(Ordering::Relaxed) - before;
    for k in 0..n {
        let w = k / 3;
        let name = format!("app-{w:05}");
        let value = json!({"metadata": {"name": format!("{name}-5d9c7f-{k:05x}"), "namespace": "ns-001",
            "labels": {"app": name, "pod-template-hash": "5d9c7f"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{name}-5d9c7f"), "uid": "x", "controller": true}]},
            "spec": {"nodeName": format!("node-{:04}", k % 200), "containers": [{"name": "app", "image": "x"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        let pod: LivePod = serde_json::from_value(value).expect("LivePod");
        kept.push(Arc::new(PodInfo::of(&pod, PodOwner::Workload(Kind::Deployment, owners[w].clone()))));
    }
    let used = LIVE.load(Ordering::Relaxed) - before - vec_bytes;
    drop(kept);
    used as f64 / n as f64
}

/// Where the audit's heap goes, in this process (counted allocations, no allocator slack): the
/// read's peak, what the read cluster keeps (subjects to judge, the view), the judging's peak and
/// the report. MiB.
struct HeapPhases {
    read_peak: f64,
    subjects: f64,
    view: f64,
    judge_peak: f64,
    report: f64,
}

fn heap_phases(rt: &tokio::runtime::Runtime, client: &kube::Client) -> HeapPhases {
    let mib = |b: isize| b as f64 / (1024.0 * 1024.0);
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let options =
        ha_guard::audit::ReadOptions { namespace: None, selector: None, page: 500, templates: false, storage: false };
    let progress = ha_guard::audit::progress::Progress::new(false);
    let cluster = rt.block_on(ha_guard::audit::read(client, &options, &progress)).expect("read the cluster");
    let read_peak = PEAK.load(Ordering::Relaxed) - base;
    let kept = LIVE.load(Ordering::Relaxed);
    PEAK.store(kept, Ordering::Relaxed);
    let report = ha_guard::audit::audit(&cluster, &ha_guard::core::config::Config::default());
    let judge_peak = PEAK.load(Ordering::Relaxed) - kept;
    let with_report = LIVE.load(Ordering::Relaxed);
    drop(report);
    let report_bytes = with_report - LIVE.load(Ordering::Relaxed);
    let ha_guard::audit::Cluster { index, subjects, .. } = cluster;
    let before = LIVE.load(Ordering::Relaxed);
    drop(subjects);
    let subjects_bytes = before - LIVE.load(Ordering::Relaxed);
    let before = LIVE.load(Ordering::Relaxed);
    drop(index);
    let view_bytes = before - LIVE.load(Ordering::Relaxed);
    HeapPhases {
        read_peak: mib(read_peak),
        subjects: mib(subjects_bytes),
        view: mib(view_bytes),
        judge_peak: mib(judge_peak),
        report: mib(report_bytes),
    }
}

fn main() {
    let a = args();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let mut cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    let client = cp.kube_client(&rt);
    let dir = cp.root().to_path_buf();
    let kubeconfig = cp.kubeconfig();
    let conc = a.concurrency;

    let started = Instant::now();
    let shape = cluster::Shape { workloads: a.workloads, pods: a.pods, namespaces: a.namespaces, nodes: a.nodes };
    rt.block_on(cluster::create_namespaces_and_nodes(&client, &shape, conc));
    let owners = rt.block_on(cluster::create_workloads(&client, &shape, conc));
    let workloads_took = started.elapsed();
    eprintln!("[audit-bench] {} workloads (+ReplicaSets, PDBs, HPAs) in {workloads_took:.1?}", a.workloads);

    // HA_GUARD_AUDIT_BASELINE=/path/to/ha-guard: another build, run in the same rounds (order
    // alternating), for a side-by-side comparison on the same cluster.
    let this = Path::new(env!("CARGO_BIN_EXE_ha-guard")).to_path_buf();
    let baseline = std::env::var_os("HA_GUARD_AUDIT_BASELINE").map(std::path::PathBuf::from);
    let mut compared: Vec<(String, Vec<Run>, Vec<Run>)> = Vec::new();
    let mut run_rounds = |label: &str| -> Vec<Run> {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for r in 0..a.rounds {
            let mut order = vec![(false, &this)];
            if let Some(b) = &baseline {
                order.insert(r % 2, (true, b));
            }
            for (is_baseline, binary) in order {
                let run = audit(binary, &kubeconfig, &dir);
                let who = if is_baseline { "baseline" } else { "this build" };
                eprintln!(
                    "[audit-bench] {label} round {} ({who}): {:.2} s, {} MiB peak",
                    r + 1,
                    run.wall,
                    run.rss_kib / 1024
                );
                if is_baseline { theirs.push(run) } else { ours.push(run) }
            }
        }
        if baseline.is_some() {
            for (o, t) in ours.iter().zip(&theirs) {
                assert_eq!(describe(&o.report), describe(&t.report), "the baseline and this build disagree ({label})");
            }
            let copy = |runs: &[Run]| {
                runs.iter().map(|r| Run { wall: r.wall, rss_kib: r.rss_kib, report: Value::Null }).collect()
            };
            compared.push((label.to_string(), copy(&ours), theirs));
        }
        ours
    };
    let empty = run_rounds("0 pods");
    let heap_empty = heap_phases(&rt, &client);

    let started = Instant::now();
    rt.block_on(cluster::create_all_pods(&client, &shape, &owners, conc));
    let pods_took = started.elapsed();
    eprintln!("[audit-bench] {} pods (create + status) in {pods_took:.1?}", a.pods);
    let full = run_rounds(&format!("{} pods", a.pods));
    let heap_full = heap_phases(&rt, &client);

    // Sanity: findings present; with pods, the live posture rules speak too; same objects each round.
    let (n0, o0, rules0) = describe(&empty[0].report);
    let (n1, o1, rules1) = describe(&full[0].report);
    assert!(n0 > 0 && n1 > 0, "the generated cluster breaks rules; the audit found nothing");
    assert!(rules1.contains_key("replicas-share-node"), "pods share a node on purpose: {rules1:?}");
    for r in &full {
        assert_eq!(describe(&r.report).0, n1, "rounds disagree on the findings");
    }

    let wall0 = median(empty.iter().map(|r| r.wall).collect());
    let wall1 = median(full.iter().map(|r| r.wall).collect());
    let rss0 = median(empty.iter().map(|r| r.rss_kib as f64).collect());
    let rss1 = median(full.iter().map(|r| r.rss_kib as f64).collect());
    let per_pod = if a.pods > 0 { (rss1 - rss0) * 1024.0 / a.pods as f64 } else { f64::NAN };
    let projection = projection_bytes(a.pods.clamp(1000, 30_000));

    println!();
    println!(
        "ha-guard audit, {} namespaces, {} nodes, {} workloads; {} round(s) each (median; min-max)",
        a.namespaces, a.nodes, a.workloads, a.rounds
    );
    println!("created: workloads etc. in {workloads_took:.1?}; pods in {pods_took:.1?}");
    println!();
    println!("| pods | wall (s) | peak RSS (MiB) | findings | objects with findings |");
    println!("|---:|---:|---:|---:|---:|");
    for (pods, runs, n, o, wall, rss) in [(0, &empty, n0, o0, wall0, rss0), (a.pods, &full, n1, o1, wall1, rss1)] {
        let lo = runs.iter().map(|r| r.wall).fold(f64::INFINITY, f64::min);
        let hi = runs.iter().map(|r| r.wall).fold(0.0, f64::max);
        let rlo = runs.iter().map(|r| r.rss_kib).min().unwrap_or(0) as f64 / 1024.0;
        let rhi = runs.iter().map(|r| r.rss_kib).max().unwrap_or(0) as f64 / 1024.0;
        println!("| {pods} | {wall:.2} ({lo:.2}-{hi:.2}) | {:.1} ({rlo:.1}-{rhi:.1}) | {n} | {o} |", rss / 1024.0);
    }
    println!();
    println!("bytes per pod, peak RSS difference / pods: {per_pod:.0} B (includes decode buffers and allocator slack)");
    println!(
        "bytes per pod, kept projection (Arc<PodInfo> + its strings and labels, counted heap): {projection:.0} B \
         (size_of PodInfo = {} B; the index's lists come on top)",
        std::mem::size_of::<PodInfo>()
    );
    println!();
    println!(
        "where the heap goes: `audit::read` and `audit::audit` in this process, counted allocations (MiB; no allocator slack):"
    );
    println!();
    println!(
        "| pods | read's peak | kept: subjects (judged objects) | kept: the view | judging's peak above that | the report |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for (pods, h) in [(0, &heap_empty), (a.pods, &heap_full)] {
        println!(
            "| {pods} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            h.read_peak, h.subjects, h.view, h.judge_peak, h.report
        );
    }
    println!();
    if let Some(b) = &baseline {
        println!(
            "side by side with HA_GUARD_AUDIT_BASELINE={} (same cluster, same rounds, order alternating; same findings):",
            b.display()
        );
        println!();
        println!("| pods | build | wall (s) | peak RSS (MiB) |");
        println!("|---:|---|---:|---:|");
        for (label, ours, theirs) in &compared {
            for (who, runs) in [("baseline", theirs), ("this build", ours)] {
                let wall = median(runs.iter().map(|r| r.wall).collect());
                let rss = median(runs.iter().map(|r| r.rss_kib as f64).collect()) / 1024.0;
                println!("| {label} | {who} | {wall:.2} | {rss:.1} |");
            }
        }
        println!();
    }
    println!("findings by rule, 0 pods: {rules0:?}");
    println!("findings by rule, {} pods: {rules1:?}", a.pods);
    drop(client);
    let _ = cp.stop();
}

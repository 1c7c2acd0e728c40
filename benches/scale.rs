//! Scale benchmark at Kubernetes' limits (issue 47, acceptance 2): ha-guard on clusters of up to
//! 5,000 nodes and 150,000 pods, behind a real apiserver with its controllers, under a write mix.
//! Run by hand, never in CI (an hour for the default sizes):
//!
//!     cargo bench --bench scale -- --sizes 500,2000,5000
//!     cargo bench --bench scale -- --sizes 100 --minutes 1        # a smoke run
//!
//! Per size (a number of nodes), from nothing:
//!
//! 1. A control plane with controllers in a temporary directory (`ControlPlane::start_with_controllers`:
//!    etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok). Through the environment
//!    up.sh and start.sh pass on: etcd's space quota is raised to 8 GiB (`ETCD_QUOTA_BACKEND_BYTES`;
//!    150,000 pods and their revisions come near its default 2 GiB, past which it refuses every
//!    write), and kwok renews the Leases and writes the pods' status with 16 workers each instead of
//!    4 (`KWOK_EXTRA_FLAGS`, a KwokConfiguration): 5,000 kubelets renew a Lease every 10 s each on
//!    their own, 500 renewals a second, which 4 workers do not keep up with once the apiserver is
//!    busy, and a Lease that runs out makes its Node NotReady and its pods evicted. `nodes` kwok
//!    Nodes over three zones (`cluster::create_kwok_nodes`, `--concurrency` at a time), until all
//!    are Ready.
//! 2. The cluster of `benches/common/cluster.rs`: nodes/50 namespaces, pods/3 workloads (3 in 4
//!    Deployments with their ReplicaSet, 1 in 4 StatefulSets, PDBs, HPAs) and `nodes × --pods-per-node`
//!    pods (at most `--max-pods`) bound to the nodes with spec.nodeName (`cluster::create_kwok_pods`:
//!    kwok makes them Running and Ready), written by the bench so that no controller creates or
//!    schedules 150,000 pods at its QPS; each workload is followed by its pods, so that a creation
//!    stopped short leaves no workload without them.
//!    kube-controller-manager is stopped meanwhile and started again after with its recorded command
//!    line: running, its ReplicaSet controller would create each ReplicaSet's pods the moment the
//!    ReplicaSet is written, racing the bench's own; started after, it finds them there, as after a
//!    restart. Its StatefulSet controller stays off: the bench's StatefulSet pods lack the
//!    `controller-revision-hash` label (the controller's hash of the template), so it would replace
//!    every one of them, one at a time. Its Deployment and ReplicaSet controllers get 20 workers
//!    (5 by default) to catch up with tens of thousands written at once. The bench then waits until
//!    they have caught up: every Deployment carries the deployment controller's revision annotation
//!    and the apiserver takes under 5 writes a second besides Leases, Events and Nodes (kwok's
//!    heartbeats), for at most `--settle-minutes`.
//!    **Memory**: the pods are planned to fit MemAvailable (/proc/meminfo) before the size, less
//!    `--reserve-gib`, at the cost the sizes before measured ([`cost`]: the peak resident memory of
//!    the control plane's processes and ha-guard's after the writes, against the pods; the first
//!    size assumes 2 GiB and 64 KiB a pod). Creation also stops when MemAvailable falls under half
//!    the reserve or after `--create-minutes`. The report says which limit cut the pods, if any.
//! 3. `ha-guard serve --cluster live --deadline 2000ms --failure-policy Ignore --audit-interval 0
//!    --config` (the chart's arguments and ConfigMap) of this build, both shipped webhook
//!    configurations registered for it (`support::register`: failurePolicy Ignore, timeoutSeconds 5,
//!    the matchConditions), and `ha-guard reports --interval` (2m; the report CRDs installed first),
//!    waited for until its first full read is done. Each is moved to a cpu cgroup of its own where
//!    the machine allows it (root; `common/cgroup.rs`), as the kubelet gives each container one;
//!    the report says where they ran.
//! 4. `--minutes` of writes through the apiserver, `--rate` a second in all (4), open loop, as admin,
//!    taking turns: a rollout (`kubectl rollout restart` of a Deployment of a few replicas: its
//!    template's `restartedAt` annotation, which the deployment controller rolls out), a scale
//!    (`deployments/scale` r ↔ r+1 of one without an HPA, as `kubectl scale` or the HPA controller
//!    writes it), an HPA's `maxReplicas` 6 ↔ 7, a PDB's `maxUnavailable: 1` ↔ `minAvailable: r-1`.
//!    Each object's first visit writes the first value, its second the other. A write is counted
//!    ok, denied (by ha-guard) or failed (anything else, or no answer in 30 s).
//! 5. Measured over the writes' window: the apiserver's
//!    `apiserver_admission_webhook_admission_duration_seconds` for each webhook (its buckets start at
//!    5 and 25 ms, so a p50 under 5 ms is an interpolation within the first), ha-guard's own
//!    `ha_guard_admission_duration_seconds` per webhook (the time in the handler), p50 and p99 by
//!    bucket interpolation (Prometheus' `histogram_quantile`); serve's and reports' VmRSS and VmHWM
//!    after the window; reports' full-read time (its log line `background audit done` with
//!    `run=full`: `elapsed_ms`, the read and judgement of every namespace, split into its
//!    `reading_ms`, `judging_ms` and `writing_ms`; the view's first sync is logged apart and shown
//!    apart); `ha_guard_rule_deadline_exceeded_total` since serve started
//!    (must be 0), `ha_guard_counts_handed_over_total` (counts that waited apart so long that the
//!    request counted itself) and the apiserver's failed, failed-open and error-refused calls to ha-guard
//!    (`support::ApiserverCalls`; must be 0).
//!
//! Output: a markdown table (one row per size) and per-size details on stdout and in
//! `--out`/report.md (rewritten after each size), with the command line, `git describe` and the
//! load average; each size's logs are removed with its control plane (`HA_GUARD_E2E_KEEP=1` keeps
//! them).
//!
//! Flags (after `--`): `--sizes N,N,...` (500,2000,5000), `--pods-per-node N` (30), `--max-pods N`
//! (150000), `--minutes M` (3), `--rate N` writes/s (4), `--interval D` of reports (2m),
//! `--concurrency N` creations at a time (48), `--reserve-gib N` (4), `--create-minutes M` (60),
//! `--settle-minutes M` (45), `--out DIR` (target/scale).

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/cluster.rs"]
mod cluster;

#[path = "common/flags.rs"]
mod flags;

#[path = "common/cgroup.rs"]
mod cgroup;

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

/// What the control plane and a pod cost before a size measured them (KiB).
const FIRST_COST: Cost = Cost { base_kib: 2 << 20, pod_kib: 64.0, measured: false };
/// kube-controller-manager's flags on its start after the pods (see the top of the file).
const KCM_FLAGS: [&str; 3] =
    ["--controllers=-statefulset-controller", "--concurrent-deployment-syncs=20", "--concurrent-replicaset-syncs=20"];
/// kwok's workers for Leases and for pod status, 16 each (4 by default; see the top of the file).
/// kwok applies its defaults only when no KwokConfiguration is given: the other options are its
/// defaults, written out (the flags up.sh passes override those it names).
const KWOK_CONFIG: &str = "\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: 16
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 4
  podsOnNodeSyncParallelism: 1
  manageAllNodes: false
  enableDebuggingHandlers: true
  enableContentionProfiling: false
  enableProfilingHandler: true
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
";
/// How long a single write of the mix may take before it counts as failed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Writes a second, besides Leases, Events and Nodes, under which the controllers count as caught up.
const SETTLED_WRITES: f64 = 5.0;
/// The apiserver's write verbs in `apiserver_request_total`.
const WRITE_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "DELETE", "APPLY"];

struct Args {
    sizes: Vec<usize>,
    pods_per_node: usize,
    max_pods: usize,
    minutes: f64,
    rate: f64,
    interval: Duration,
    concurrency: usize,
    reserve_kib: u64,
    create_for: Duration,
    settle_for: Duration,
    out: PathBuf,
}

fn args() -> Args {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo().join("target"));
    let mut a = Args {
        sizes: vec![500, 2000, 5000],
        pods_per_node: 30,
        max_pods: 150_000,
        minutes: 3.0,
        rate: 4.0,
        interval: Duration::from_secs(120),
        concurrency: 48,
        reserve_kib: 4 << 20,
        create_for: Duration::from_secs(3600),
        settle_for: Duration::from_secs(2700),
        out: target.join("scale"),
    };
    let usage = "--sizes N,N,... --pods-per-node N --max-pods N --minutes M --rate N --interval D --concurrency N \
                 --reserve-gib N --create-minutes M --settle-minutes M --out DIR";
    for (flag, v) in flags::pairs(usage) {
        let (flag, v) = (flag.as_str(), v.as_str());
        let bad = || -> ! { flags::bad(flag, v, usage) };
        let n = || v.parse::<usize>().ok().filter(|n| *n > 0).unwrap_or_else(|| bad());
        let f = || v.parse::<f64>().ok().filter(|x| *x > 0.0).unwrap_or_else(|| bad());
        let minutes = || Duration::from_secs_f64(f() * 60.0);
        match flag {
            "--sizes" => {
                a.sizes = v
                    .split(',')
                    .map(|s| s.trim().parse().ok().filter(|n| *n > 0))
                    .collect::<Option<_>>()
                    .unwrap_or_else(|| bad())
            }
            "--pods-per-node" => a.pods_per_node = n(),
            "--max-pods" => a.max_pods = n(),
            "--minutes" => a.minutes = f(),
            "--rate" => a.rate = f(),
            "--interval" => a.interval = humantime::parse_duration(v).unwrap_or_else(|_| bad()),
            "--concurrency" => a.concurrency = n(),
            "--reserve-gib" => a.reserve_kib = (f() * (1 << 20) as f64) as u64,
            "--create-minutes" => a.create_for = minutes(),
            "--settle-minutes" => a.settle_for = minutes(),
            "--out" => a.out = PathBuf::from(v),
            _ => bad(),
        }
    }
    a
}

// --- the machine -------------------------------------------------------------------------------

/// A field in KiB of a `/proc` file of `Name: value kB` lines; 0 when there is no such file or field.
fn kib_in(path: &str, field: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// A `/proc/meminfo` field in KiB (MemAvailable, MemTotal).
fn meminfo_kib(field: &str) -> u64 {
    kib_in("/proc/meminfo", field)
}

/// A `/proc/PID/status` field in KiB (VmRSS, VmHWM); 0 when the process is gone.
fn status_kib(pid: u32, field: &str) -> u64 {
    kib_in(&format!("/proc/{pid}/status"), field)
}

fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn git_describe() -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(repo())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn gib(kib: u64) -> f64 {
    kib as f64 / (1u64 << 20) as f64
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

// --- kube-controller-manager -----------------------------------------------------------------

/// The pid in the control plane's `NAME.pid`.
fn pid_of(cp: &ControlPlane, name: &str) -> Option<u32> {
    std::fs::read_to_string(cp.dir().join(format!("{name}.pid"))).ok()?.trim().parse().ok()
}

/// kube-controller-manager, stopped while the bench writes the cluster and started again after
/// with the command line up.sh recorded (`controller-manager.args`) plus `extra`; its pid goes to
/// `controller-manager.pid`, so that stop.sh and the reaper stop it as they would up.sh's.
struct ControllerManager {
    child: Option<Child>,
}

impl ControllerManager {
    /// Stops the one up.sh started (SIGTERM, SIGKILL after 20 s) and waits until it is gone.
    fn stop(cp: &ControlPlane) -> ControllerManager {
        let pid = pid_of(cp, "controller-manager").expect("controller-manager.pid");
        let gone = || std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "));
        let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !gone() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if !gone() {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        ControllerManager { child: None }
    }

    fn start(&mut self, cp: &ControlPlane, extra: &[&str]) -> Result<(), String> {
        let dir = cp.dir();
        let recorded =
            std::fs::read(dir.join("controller-manager.args")).map_err(|e| format!("controller-manager.args: {e}"))?;
        let mut args: Vec<String> = recorded
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("controller-manager.log"))
            .map_err(|e| format!("controller-manager.log: {e}"))?;
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", args[0]))?;
        std::fs::write(dir.join("controller-manager.pid"), child.id().to_string()).map_err(|e| e.to_string())?;
        self.child = Some(child);
        let port = args.iter().find_map(|a| a.strip_prefix("--secure-port=")).ok_or("no --secure-port")?.to_string();
        poll("kube-controller-manager /healthz", WAIT, Duration::from_millis(500), || {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Ok(Err(format!(
                    "kube-controller-manager exited ({status}):\n{}",
                    tail(&dir.join("controller-manager.log"), 20)
                )));
            }
            let out = Command::new("curl")
                .args(["-sk", "--max-time", "2", &format!("https://127.0.0.1:{port}/healthz")])
                .output()
                .map_err(|e| e.to_string())?;
            if out.stdout == b"ok" { Ok(Ok(())) } else { Err(String::from_utf8_lossy(&out.stdout).into_owned()) }
        })?
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }
}

impl Drop for ControllerManager {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// --- the cluster ---------------------------------------------------------------------------------

/// How many pods a size gets, and what cut them.
struct Plan {
    shape: cluster::Shape,
    /// `nodes × --pods-per-node`, at most `--max-pods`.
    wanted: usize,
    /// Why fewer than wanted, if so.
    cut: Option<String>,
}

/// What the control plane and ha-guard take in resident memory: before any pod (the control plane
/// and the Nodes), and per pod on top.
#[derive(Clone, Copy)]
struct Cost {
    base_kib: u64,
    pod_kib: f64,
    /// Measured at a size before, or assumed.
    measured: bool,
}

fn plan(a: &Args, nodes: usize, cost: Cost) -> Plan {
    let wanted = (nodes * a.pods_per_node).min(a.max_pods);
    let available = meminfo_kib("MemAvailable");
    let fit = (available.saturating_sub(a.reserve_kib + cost.base_kib) as f64 / cost.pod_kib) as usize;
    let mut pods = wanted;
    let mut cut = None;
    if fit < wanted {
        // Whole workloads of 3 pods.
        pods = fit / 3 * 3;
        cut = Some(format!(
            "memory: MemAvailable {:.1} GiB less the {:.1} GiB reserve and {:.1} GiB for the control plane fits about \
             {fit} pods at {:.0} KiB a pod ({})",
            gib(available),
            gib(a.reserve_kib),
            gib(cost.base_kib),
            cost.pod_kib,
            if cost.measured { "as the sizes before measured it" } else { "assumed for a first size" }
        ));
    }
    let shape = cluster::Shape { workloads: (pods / 3).max(1), pods, namespaces: (nodes / 50).max(1), nodes };
    Plan { shape, wanted, cut }
}

/// What creating the workloads and their pods did.
struct Created {
    /// Which workloads were created with their pods.
    made: Vec<bool>,
    pods: usize,
    failed: Vec<String>,
    /// Why creation stopped before the last workload, if it did.
    stopped: Option<String>,
    took: Duration,
}

/// Why creation must stop now, if it must.
fn must_stop(started: Instant, budget: Duration, floor_kib: u64) -> Option<String> {
    let available = meminfo_kib("MemAvailable");
    if available < floor_kib {
        return Some(format!(
            "memory: MemAvailable {:.1} GiB, under the floor of {:.1} GiB",
            gib(available),
            gib(floor_kib)
        ));
    }
    (started.elapsed() > budget).then(|| format!("time: --create-minutes {:.0} passed", budget.as_secs_f64() / 60.0))
}

/// Creates each workload followed by its pods, `conc` workloads at a time, until the last or until
/// [`must_stop`] says so.
async fn create_cluster(
    client: &kube::Client,
    s: &cluster::Shape,
    conc: usize,
    budget: Duration,
    floor_kib: u64,
) -> Created {
    let started = Instant::now();
    let stop: OnceLock<String> = OnceLock::new();
    let done = AtomicUsize::new(0);
    let every = (s.workloads / 20).max(1);
    let results: Vec<(usize, Result<bool, String>)> = futures::stream::iter(0..s.workloads)
        .map(|i| {
            let (stop, done) = (&stop, &done);
            async move {
                if stop.get().is_some() {
                    return (i, Ok(false));
                }
                if let Some(why) = must_stop(started, budget, floor_kib) {
                    let _ = stop.set(why);
                    return (i, Ok(false));
                }
                let made = match cluster::create_workload(client, s, i).await {
                    Ok(owner) => cluster::create_kwok_pods(client, s, i, &owner).await.map(|()| true),
                    Err(e) => Err(e),
                };
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(every) {
                    eprintln!(
                        "[scale]   {n} of {} workloads with their pods, {:.0?}, MemAvailable {:.1} GiB",
                        s.workloads,
                        started.elapsed(),
                        gib(meminfo_kib("MemAvailable"))
                    );
                }
                (i, made)
            }
        })
        .buffer_unordered(conc)
        .collect()
        .await;
    let mut made = vec![false; s.workloads];
    let mut failed = Vec::new();
    for (i, r) in results {
        match r {
            Ok(m) => made[i] = m,
            Err(e) => failed.push(e),
        }
    }
    let pods = (0..s.workloads).filter(|i| made[*i]).map(|i| cluster::workload(s, i).pods).sum();
    Created { made, pods, failed, stopped: stop.into_inner(), took: started.elapsed() }
}

/// The number of `K` objects in the apiserver (one list of one item: the rest is its
/// `remainingItemCount`).
async fn count<K>(client: &kube::Client) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    match Api::<K>::all(client.clone()).list_metadata(&ListParams::default().limit(1)).await {
        Ok(l) => l.items.len() + l.metadata.remaining_item_count.unwrap_or(0) as usize,
        Err(e) => panic!("list: {e}"),
    }
}

async fn ready_nodes(client: &kube::Client) -> usize {
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("list nodes");
    let ready = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    nodes.items.iter().filter(|n| ready(n)).count()
}

/// The apiserver's write requests so far: all, the Leases', and those the settle check watches
/// (all but Leases, Events and Nodes).
fn writes(m: &Metrics) -> (f64, f64, f64) {
    let mut all = 0.0;
    let mut leases = 0.0;
    let mut background = 0.0;
    for (labels, v) in m.all("apiserver_request_total", &[]) {
        if !labels.get("verb").is_some_and(|verb| WRITE_VERBS.contains(&verb.as_str())) {
            continue;
        }
        all += v;
        match labels.get("resource").map(String::as_str) {
            Some("leases") => leases += v,
            Some("events" | "nodes") => {}
            _ => background += v,
        }
    }
    (all, leases, background)
}

/// Waits until the controllers have caught up with the written cluster (see the top of the file);
/// how long it took, and the last rate of writes besides Leases, Events and Nodes.
fn settle(
    cp: &ControlPlane,
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    limit: Duration,
) -> (Duration, bool, f64) {
    let started = Instant::now();
    let every = Duration::from_secs(15);
    let mut last = writes(&cp.metrics()).2;
    loop {
        std::thread::sleep(every);
        let now = writes(&cp.metrics()).2;
        let rate = (now - last) / every.as_secs_f64();
        last = now;
        let unsynced = rt.block_on(async {
            let list = Api::<Deployment>::all(client.clone())
                .list_metadata(&ListParams::default())
                .await
                .expect("deployments");
            let revised = |d: &kube::core::PartialObjectMeta<Deployment>| {
                d.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("deployment.kubernetes.io/revision"))
            };
            list.items.iter().filter(|d| !revised(d)).count()
        });
        eprintln!(
            "[scale]   controllers: {rate:.1} writes/s besides Leases, Events and Nodes; {unsynced} Deployments not synced yet ({:.0?})",
            started.elapsed()
        );
        if unsynced == 0 && rate < SETTLED_WRITES {
            return (started.elapsed(), true, rate);
        }
        if started.elapsed() > limit {
            return (started.elapsed(), false, rate);
        }
    }
}

// --- ha-guard --------------------------------------------------------------------------------------

/// The shipped configuration (the chart's ConfigMap `config.yaml`), written into `dir`.
fn shipped_config(dir: &Path) -> PathBuf {
    let text = shipped_manifests()
        .into_iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"]["config.yaml"].is_string())
        .and_then(|d| d["data"]["config.yaml"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("{SHIPPED} has no ConfigMap with a config.yaml"));
    let path = dir.join("config.yaml");
    std::fs::write(&path, text).expect("config.yaml");
    path
}

/// `ha-guard reports` (killed on drop); argv[0] names the control plane's root, so that the harness's
/// reaper stops it if this process dies without unwinding.
struct Reports {
    child: Child,
    log: PathBuf,
    probe_port: u16,
    pidfile: PathBuf,
}

impl Reports {
    fn start(cp: &ControlPlane, config: &Path, interval: Duration) -> Reports {
        use std::os::unix::process::CommandExt;
        let root = cp.root();
        let log = root.join("reports.log");
        let file = std::fs::File::create(&log).expect("reports.log");
        let probe_port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
            .arg0(root.join("ha-guard-reports"))
            .args(["reports", "--interval", &humantime::format_duration(interval).to_string()])
            .args(["--lease-namespace", "ha-guard", "--log-format", "json"])
            .args(["--probe-listen", &format!("127.0.0.1:{probe_port}")])
            .arg("--config")
            .arg(config)
            .env("KUBECONFIG", cp.kubeconfig())
            .env("POD_NAME", "reports")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("ha-guard reports");
        let pidfile = root.join("reports.pid");
        std::fs::write(&pidfile, child.id().to_string()).expect("reports.pid");
        Reports { child, log, probe_port, pidfile }
    }

    /// Runs done, successful or not.
    fn runs(&mut self) -> Result<f64, String> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Err(format!("ha-guard reports exited ({status}):\n{}", tail(&self.log, 20)));
        }
        match http_get(self.probe_port, "/metrics") {
            Ok((200, body)) => Ok(Metrics::parse(&body).sum("ha_guard_audit_runs_total", &[])),
            // Not listening yet.
            Ok(_) | Err(_) => Ok(0.0),
        }
    }

    /// Milliseconds of its view's first sync and of each full read so far (its log).
    fn times(&self) -> (Option<f64>, Vec<f64>) {
        let (synced, full) = self.full_reads();
        (synced, full.iter().map(|f| f[0]).collect())
    }

    /// Milliseconds of its view's first sync, and of each full read so far: in all, reading the
    /// namespaces from the apiserver, judging them, writing the reports (its log).
    fn full_reads(&self) -> (Option<f64>, Vec<[f64; 4]>) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut synced = None;
        let mut full = Vec::new();
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
            let field = |k: &str| {
                v.get(k).filter(|x| !x.is_null()).or_else(|| v["fields"].get(k)).cloned().unwrap_or(Value::Null)
            };
            let message = field("message");
            let elapsed = field("elapsed_ms").as_f64();
            if message == "background audit: view synced" {
                synced = synced.or(elapsed);
            } else if message == "background audit done" && field("run") == "full" {
                let part = |k: &str| field(k).as_f64().unwrap_or(f64::NAN);
                full.extend(elapsed.map(|e| [e, part("reading_ms"), part("judging_ms"), part("writing_ms")]));
            }
        }
        (synced, full)
    }
}

impl Drop for Reports {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

/// Installs the report CRDs and the Lease's namespace.
fn install_reports(cp: &ControlPlane) {
    support::reports::install_report_crds(cp);
    cp.namespace("ha-guard", &[]);
}

// --- the write mix -----------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum WriteKind {
    Rollout,
    Scale,
    Hpa,
    Pdb,
}

const WRITE_KINDS: [WriteKind; 4] = [WriteKind::Rollout, WriteKind::Scale, WriteKind::Hpa, WriteKind::Pdb];

impl WriteKind {
    fn name(self) -> &'static str {
        match self {
            WriteKind::Rollout => "rollout",
            WriteKind::Scale => "scale",
            WriteKind::Hpa => "HPA maxReplicas",
            WriteKind::Pdb => "PDB budget",
        }
    }
}

/// An object the mix writes: namespace, name, and its workload's replicas.
#[derive(Clone)]
struct Target {
    ns: String,
    name: String,
    replicas: usize,
}

/// The objects of each kind of write, in a fixed shuffled order, from the workloads made.
fn targets(s: &cluster::Shape, made: &[bool]) -> BTreeMap<WriteKind, Vec<Target>> {
    let mut order: Vec<usize> = (0..s.workloads).filter(|i| made[*i]).collect();
    order.sort_by_key(|i| common::mix(*i, 47));
    let mut out: BTreeMap<WriteKind, Vec<Target>> = WRITE_KINDS.iter().map(|k| (*k, Vec::new())).collect();
    for i in order {
        let g = cluster::workload(s, i);
        let replicas = cluster::replicas(i, &g);
        let t = Target { ns: g.ns.clone(), name: g.name.clone(), replicas };
        // Every 10th runs one replica (a finding): left alone, as a rollout or a budget there only
        // repeats it.
        let few = !i.is_multiple_of(10) && (2..=5).contains(&replicas);
        let hpa = cluster::has_hpa(s, i);
        if !g.sts && few {
            out.get_mut(&WriteKind::Rollout).unwrap().push(t.clone());
            if !hpa {
                out.get_mut(&WriteKind::Scale).unwrap().push(t.clone());
            }
        }
        if hpa {
            out.get_mut(&WriteKind::Hpa).unwrap().push(t.clone());
        }
        // The budgets of maxUnavailable 1 (every 20th has 0, a finding).
        if i.is_multiple_of(2) && !i.is_multiple_of(20) && few {
            out.get_mut(&WriteKind::Pdb).unwrap().push(t);
        }
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Ok,
    Denied,
    Failed,
}

struct Written {
    kind: WriteKind,
    answer: Answer,
    seconds: f64,
    error: Option<String>,
}

/// Write `k` of the mix: its kind in turn, its object in the kind's order, the first value on an
/// object's odd visits and the other on its even ones.
async fn write(client: kube::Client, targets: Arc<BTreeMap<WriteKind, Vec<Target>>>, k: usize) -> Option<Written> {
    let kind = WRITE_KINDS[k % WRITE_KINDS.len()];
    let list = &targets[&kind];
    if list.is_empty() {
        return None;
    }
    let visit = k / WRITE_KINDS.len();
    let t = &list[visit % list.len()];
    let back = (visit / list.len()) % 2 == 1;
    let pp = PatchParams::default();
    let started = Instant::now();
    let call = async {
        match kind {
            WriteKind::Rollout => {
                let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
                let patch = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": at}}}}});
                Api::<Deployment>::namespaced(client, &t.ns).patch(&t.name, &pp, &Patch::Merge(patch)).await.map(drop)
            }
            WriteKind::Scale => {
                let replicas = if back { t.replicas } else { t.replicas + 1 };
                let patch = json!({"spec": {"replicas": replicas}});
                Api::<Deployment>::namespaced(client, &t.ns)
                    .patch_scale(&t.name, &pp, &Patch::Merge(patch))
                    .await
                    .map(drop)
            }
            WriteKind::Hpa => {
                let patch = json!({"spec": {"maxReplicas": if back { 6 } else { 7 }}});
                Api::<HorizontalPodAutoscaler>::namespaced(client, &t.ns)
                    .patch(&t.name, &pp, &Patch::Merge(patch))
                    .await
                    .map(drop)
            }
            WriteKind::Pdb => {
                let spec = if back {
                    json!({"minAvailable": null, "maxUnavailable": 1})
                } else {
                    json!({"maxUnavailable": null, "minAvailable": t.replicas - 1})
                };
                let patch = json!({"spec": spec});
                Api::<PodDisruptionBudget>::namespaced(client, &t.ns)
                    .patch(&t.name, &pp, &Patch::Merge(patch))
                    .await
                    .map(drop)
            }
        }
    };
    let result = tokio::time::timeout(WRITE_TIMEOUT, call).await;
    let seconds = started.elapsed().as_secs_f64();
    let (answer, error) = match result {
        Ok(Ok(())) => (Answer::Ok, None),
        Ok(Err(kube::Error::Api(s)))
            if s.message.contains("denied the request") && s.message.contains(".ha-guard.io") =>
        {
            (Answer::Denied, Some(s.message.clone()))
        }
        Ok(Err(e)) => (Answer::Failed, Some(e.to_string())),
        Err(_) => (Answer::Failed, Some(format!("no answer in {WRITE_TIMEOUT:?}"))),
    };
    Some(Written { kind, answer, seconds, error: error.map(|e| format!("{} {}/{}: {e}", kind.name(), t.ns, t.name)) })
}

/// `rate` writes a second for `length`, each started on its schedule whatever the ones before
/// it are doing (open loop); returns once all have been answered.
async fn write_mix(
    client: kube::Client,
    targets: BTreeMap<WriteKind, Vec<Target>>,
    rate: f64,
    length: Duration,
) -> Vec<Written> {
    let targets = Arc::new(targets);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let end = tokio::time::Instant::now() + length;
    let mut tasks = tokio::task::JoinSet::new();
    let mut k = 0;
    loop {
        let at = tick.tick().await;
        if at >= end {
            break;
        }
        tasks.spawn(write(client.clone(), targets.clone(), k));
        k += 1;
    }
    tasks.join_all().await.into_iter().flatten().collect()
}

// --- histograms ------------------------------------------------------------------------------------

/// The increase of a Prometheus histogram between two scrapes, over the series a filter keeps.
#[derive(Default)]
struct Histogram {
    /// Cumulative counts by upper bound (`le`), in order.
    buckets: Vec<(f64, f64)>,
    count: f64,
}

impl Histogram {
    fn increase(after: &Metrics, before: &Metrics, name: &str, labels: &[(&str, &str)]) -> Histogram {
        let bucket = format!("{name}_bucket");
        let mut by_le: BTreeMap<String, f64> = BTreeMap::new();
        for (series, v) in after.all(&bucket, labels) {
            let was: f64 = before.0.iter().filter(|(n, l, _)| *n == bucket && *l == series).map(|(_, _, v)| v).sum();
            *by_le.entry(series["le"].clone()).or_default() += v - was;
        }
        let le = |s: &str| if s == "+Inf" { f64::INFINITY } else { s.parse().unwrap_or(f64::NAN) };
        let mut buckets: Vec<(f64, f64)> = by_le.into_iter().map(|(k, v)| (le(&k), v)).collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let count = buckets.last().map_or(0.0, |b| b.1);
        Histogram { buckets, count }
    }

    /// The q-quantile in seconds, interpolated linearly within its bucket (Prometheus'
    /// `histogram_quantile`).
    fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q * self.count;
        let mut lower = (0.0, 0.0);
        for &(le, cum) in &self.buckets {
            if cum >= rank {
                if le.is_infinite() {
                    return Some(lower.0);
                }
                let width = cum - lower.1;
                let within = if width > 0.0 { (rank - lower.1) / width } else { 1.0 };
                return Some(lower.0 + (le - lower.0) * within);
            }
            lower = (le, cum);
        }
        None
    }

    /// "p50 / p99" in milliseconds, and the number of observations.
    fn cell(&self) -> String {
        match (self.quantile(0.5), self.quantile(0.99)) {
            (Some(p50), Some(p99)) => format!("{:.2} / {:.2} ms ({:.0})", p50 * 1e3, p99 * 1e3, self.count),
            _ => "- (0)".into(),
        }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

// --- one size ----------------------------------------------------------------------------------------

/// What one size measured.
struct Row {
    nodes: usize,
    nodes_ready: usize,
    plan: Plan,
    created: Created,
    /// Pods and ReplicaSets in the apiserver once the controllers caught up.
    pods: usize,
    replicasets: usize,
    nodes_took: Duration,
    settle: (Duration, bool, f64),
    written: Vec<Written>,
    window: Duration,
    /// The apiserver's calls to each webhook, and the handler's time, over the window.
    apiserver: [Histogram; 2],
    handler: [Histogram; 2],
    calls: ApiserverCalls,
    calls_since_registered: ApiserverCalls,
    /// The apiserver's writes a second over the window: all, and Leases.
    apiserver_writes: (f64, f64),
    deadline_exceeded: f64,
    /// `ha_guard_counts_handed_over_total` since serve started.
    counts_handed_over: f64,
    /// Where serve and reports ran for the CPU (`common/cgroup.rs`).
    cgroups: String,
    serve_kib: (u64, u64),
    reports_kib: (u64, u64),
    reports_synced_ms: Option<f64>,
    /// Full reads before the window, and during it.
    full_reads: (Vec<f64>, Vec<f64>),
    /// Every full read: in all, reading, judging, writing (milliseconds).
    full_parts: Vec<[f64; 4]>,
    /// VmRSS and VmHWM of the control plane's processes after the window.
    components_kib: Vec<(&'static str, (u64, u64))>,
    /// The control plane's VmRSS once the Nodes were Ready, before any workload.
    base_kib: u64,
    mem_before_kib: u64,
    mem_after_kib: u64,
    load: (String, String),
    phases: Vec<(&'static str, Duration)>,
    took: Duration,
}

impl Row {
    /// The peak resident memory of every process after the writes (so the reports' reads are in).
    fn peak_kib(&self) -> u64 {
        self.components_kib.iter().map(|(_, (_, hwm))| hwm).sum::<u64>() + self.serve_kib.1 + self.reports_kib.1
    }
}

/// What the sizes measured so far say a size costs: with two, the line through them (what a pod
/// adds, and the rest); with one, its control plane before the workloads and the peak above that
/// per pod (which counts what does not grow with the pods as theirs: an over-estimate).
fn cost(rows: &[Row]) -> Cost {
    let measured = |r: &&Row| r.pods > 0;
    match rows.iter().filter(measured).rev().take(2).collect::<Vec<_>>()[..] {
        [b, a] if b.pods > a.pods && b.peak_kib() > a.peak_kib() => {
            let pod_kib = (b.peak_kib() - a.peak_kib()) as f64 / (b.pods - a.pods) as f64;
            let base_kib = (b.peak_kib() as f64 - pod_kib * b.pods as f64).max(0.0) as u64;
            Cost { base_kib, pod_kib, measured: true }
        }
        [r, ..] => Cost {
            base_kib: r.base_kib,
            pod_kib: r.peak_kib().saturating_sub(r.base_kib) as f64 / r.pods as f64,
            measured: true,
        },
        [] => FIRST_COST,
    }
}

/// VmRSS and VmHWM of the control plane's processes (kube-controller-manager: `kcm`, 0 while it
/// is stopped).
fn components(cp: &ControlPlane, kcm: u32) -> Vec<(&'static str, (u64, u64))> {
    let pids = [
        ("etcd", pid_of(cp, "etcd")),
        ("kube-apiserver", pid_of(cp, "apiserver")),
        ("kube-controller-manager", Some(kcm)),
        ("kube-scheduler", pid_of(cp, "scheduler")),
        ("kwok", pid_of(cp, "kwok")),
    ];
    pids.into_iter()
        .map(|(name, pid)| (name, pid.map_or((0, 0), |p| (status_kib(p, "VmRSS"), status_kib(p, "VmHWM")))))
        .collect()
}

/// How long each phase of a size took.
struct Phases {
    done: Vec<(&'static str, Duration)>,
    at: Instant,
}

impl Phases {
    fn lap(&mut self, name: &'static str) {
        self.done.push((name, self.at.elapsed()));
        self.at = Instant::now();
    }
}

fn measure(a: &Args, rt: &tokio::runtime::Runtime, nodes: usize, cost: Cost) -> Row {
    let started = Instant::now();
    let load_start = loadavg();
    let mem_before_kib = meminfo_kib("MemAvailable");
    let plan = plan(a, nodes, cost);
    let shape = plan.shape;
    eprintln!(
        "[scale] {nodes} nodes: {} pods (wanted {}), {} workloads, {} namespaces; MemAvailable {:.1} GiB, load {load_start}",
        shape.pods,
        plan.wanted,
        shape.workloads,
        shape.namespaces,
        gib(mem_before_kib)
    );
    let mut phases = Phases { done: Vec::new(), at: Instant::now() };

    let mut cp = ControlPlane::start_with_controllers().unwrap_or_else(|e| panic!("control plane: {e}"));
    let mut kcm = ControllerManager::stop(&cp);
    let client = cp.kube_client(rt);
    phases.lap("control plane");

    let failed = rt.block_on(cluster::create_kwok_nodes(&client, &shape, a.concurrency));
    assert!(failed.is_empty(), "{} nodes not created, e.g. {:?}", failed.len(), &failed[..failed.len().min(3)]);
    poll(&format!("{nodes} nodes Ready"), Duration::from_secs(600), Duration::from_secs(5), || {
        let ready = rt.block_on(ready_nodes(&client));
        if ready == nodes { Ok(()) } else { Err(format!("{ready} Ready")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let nodes_took = phases.at.elapsed();
    let base_kib = components(&cp, 0).iter().map(|(_, (rss, _))| rss).sum();
    eprintln!("[scale]   {nodes} nodes Ready in {nodes_took:.1?}");
    phases.lap("nodes");

    rt.block_on(cluster::create_namespaces(&client, &shape));
    let floor = a.reserve_kib / 2;
    let created = rt.block_on(create_cluster(&client, &shape, a.concurrency, a.create_for, floor));
    eprintln!(
        "[scale]   {} pods created in {:.1?} ({:.0} pods/s){}",
        created.pods,
        created.took,
        created.pods as f64 / created.took.as_secs_f64(),
        created.stopped.as_ref().map(|w| format!("; stopped short, {w}")).unwrap_or_default()
    );
    phases.lap("workloads and pods");

    kcm.start(&cp, &KCM_FLAGS).unwrap_or_else(|e| panic!("{e}"));
    let settle = settle(&cp, rt, &client, a.settle_for);
    let (pods, replicasets) = rt.block_on(async { (count::<Pod>(&client).await, count::<ReplicaSet>(&client).await) });
    phases.lap("controllers caught up");

    let config = shipped_config(cp.root());
    let mut spec = Spec::new(&cp, "serve");
    spec.args = vec!["--deadline".into(), "2000ms".into(), "--failure-policy".into(), "Ignore".into()];
    spec.args.extend(["--audit-interval".into(), "0".into(), "--config".into(), config.display().to_string()]);
    let mut hg = HaGuard::spawn_spec(&cp, &spec).unwrap_or_else(|e| panic!("ha-guard serve: {e}"));
    // Each in a cpu cgroup of its own, as in a cluster (`common/cgroup.rs`), where this machine lets us.
    let serve_cgroup = cgroup::CpuCgroup::enter("ha-guard-bench-serve", hg.pid().unwrap_or(0));
    hg.wait_ready(Duration::from_secs(600)).unwrap_or_else(|e| panic!("ha-guard serve: {e}"));
    register(&cp, &hg, &[Webhooks::Mutating, Webhooks::Validating])
        .unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(20)));
    let registered = ApiserverCalls::of(&cp.metrics());
    phases.lap("serve ready and registered");

    install_reports(&cp);
    let mut reports = Reports::start(&cp, &config, a.interval);
    let reports_cgroup = cgroup::CpuCgroup::enter("ha-guard-bench-reports", reports.child.id());
    let cgroups = match (&serve_cgroup, &reports_cgroup) {
        (Ok(s), Ok(r)) => format!("each in a cpu cgroup of its own ({}, {})", s.dir().display(), r.dir().display()),
        (Err(e), _) | (_, Err(e)) => format!("**in the bench's own cgroup**, beside the control plane ({e})"),
    };
    eprintln!("[scale]   serve and reports: {cgroups}");
    poll("ha-guard reports' first full read", Duration::from_secs(1800), Duration::from_secs(2), || {
        match reports.runs() {
            Ok(n) if n >= 1.0 => Ok(Ok(())),
            Ok(n) => Err(format!("{n} runs")),
            Err(e) => Ok(Err(e)),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"))
    .unwrap_or_else(|e| panic!("{e}"));
    phases.lap("reports' first full read");

    let targets = targets(&shape, &created.made);
    let (_, full_before) = reports.times();
    let api_before = cp.metrics();
    let hg_before = hg.metrics();
    let window_started = Instant::now();
    let length = Duration::from_secs_f64(a.minutes * 60.0);
    eprintln!("[scale]   writes for {length:?} at {} a second", a.rate);
    let written = rt.block_on(write_mix(client.clone(), targets, a.rate, length));
    let window = window_started.elapsed();
    let api_after = cp.metrics();
    let hg_after = hg.metrics();
    phases.lap("writes");

    let webhooks = [("validate.ha-guard.io", "validate"), ("mutate.ha-guard.io", "mutate")];
    let apiserver = webhooks.map(|(name, _)| {
        Histogram::increase(
            &api_after,
            &api_before,
            "apiserver_admission_webhook_admission_duration_seconds",
            &[("name", name)],
        )
    });
    let handler = webhooks.map(|(_, w)| {
        Histogram::increase(&hg_after, &hg_before, "ha_guard_admission_duration_seconds", &[("webhook", w)])
    });
    let (w1, l1, _) = writes(&api_after);
    let (w0, l0, _) = writes(&api_before);
    let secs = window.as_secs_f64();
    let serve_pid = hg.pid().unwrap_or(0);
    let reports_pid = reports.child.id();
    let (synced, full) = reports.times();
    let (_, full_parts) = reports.full_reads();
    let row = Row {
        nodes,
        nodes_ready: rt.block_on(ready_nodes(&client)),
        pods,
        replicasets,
        nodes_took,
        settle,
        written,
        window,
        apiserver,
        handler,
        calls: ApiserverCalls::of(&api_after).minus(ApiserverCalls::of(&api_before)),
        calls_since_registered: ApiserverCalls::of(&api_after).minus(registered),
        apiserver_writes: ((w1 - w0) / secs, (l1 - l0) / secs),
        deadline_exceeded: hg_after.sum("ha_guard_rule_deadline_exceeded_total", &[]),
        counts_handed_over: hg_after.sum("ha_guard_counts_handed_over_total", &[]),
        cgroups,
        serve_kib: (status_kib(serve_pid, "VmRSS"), status_kib(serve_pid, "VmHWM")),
        reports_kib: (status_kib(reports_pid, "VmRSS"), status_kib(reports_pid, "VmHWM")),
        reports_synced_ms: synced,
        full_parts,
        full_reads: (
            full[..full_before.len().min(full.len())].to_vec(),
            full[full_before.len().min(full.len())..].to_vec(),
        ),
        components_kib: components(&cp, kcm.pid()),
        base_kib,
        mem_before_kib,
        mem_after_kib: meminfo_kib("MemAvailable"),
        load: (load_start, loadavg()),
        phases: phases.done,
        took: Duration::ZERO,
        plan,
        created,
    };
    drop(reports);
    hg.stop();
    drop(kcm);
    drop(client);
    if let Err(e) = cp.stop() {
        eprintln!("[scale] {e}");
    }
    Row { took: started.elapsed(), ..row }
}

// --- the report ------------------------------------------------------------------------------------

fn ms(seconds: f64) -> String {
    if seconds.is_finite() { format!("{:.1} ms", seconds * 1e3) } else { "-".into() }
}

fn secs(ms: &[f64]) -> String {
    if ms.is_empty() {
        return "-".into();
    }
    ms.iter().map(|m| format!("{:.1} s", m / 1e3)).collect::<Vec<_>>().join(", ")
}

fn table(rows: &[Row]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| nodes | pods | workloads | writes (failed) | apiserver → validate p50 / p99 | apiserver → mutate p50 / p99 | \
         handler validate p50 / p99 | handler mutate p50 / p99 | serve RSS (peak) | reports RSS (peak) | reports full read \
         (in the window) | deadline exceeded | fail-open | load average |"
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|---|---|---|---|---:|---:|---|---:|---:|---|");
    for r in rows {
        let failed = r.written.iter().filter(|w| w.answer == Answer::Failed).count();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} ({failed}) | {} | {} | {} | {} | {:.0} MiB ({:.0}) | {:.0} MiB ({:.0}) | {} ({}) | {} | {} | {} → {} |",
            r.nodes,
            r.pods,
            r.created.made.iter().filter(|m| **m).count(),
            r.written.len(),
            r.apiserver[0].cell(),
            r.apiserver[1].cell(),
            r.handler[0].cell(),
            r.handler[1].cell(),
            mib(r.serve_kib.0),
            mib(r.serve_kib.1),
            mib(r.reports_kib.0),
            mib(r.reports_kib.1),
            secs(&r.full_reads.0),
            secs(&r.full_reads.1),
            r.deadline_exceeded,
            r.calls.fail_open,
            r.load.0,
            r.load.1,
        );
    }
    md
}

fn details(r: &Row, a: &Args) -> String {
    let mut md = String::new();
    let s = &r.plan.shape;
    let _ = writeln!(md, "\n### {} nodes ({:.1} min in all)\n", r.nodes, r.took.as_secs_f64() / 60.0);
    let _ = writeln!(
        md,
        "- Nodes: {} created in {:.1} s, {} Ready at the end of the writes.",
        r.nodes,
        r.nodes_took.as_secs_f64(),
        r.nodes_ready
    );
    let made = r.created.made.iter().filter(|m| **m).count();
    let _ = writeln!(
        md,
        "- Pods: {} created with {made} of {} workloads in {:.0} s ({:.0} pods/s, {} at a time), of {} planned ({} wanted: \
         {} nodes × {}, at most {}); {} namespaces.{}{}",
        r.created.pods,
        s.workloads,
        r.created.took.as_secs_f64(),
        r.created.pods as f64 / r.created.took.as_secs_f64().max(1e-9),
        a.concurrency,
        s.pods,
        r.plan.wanted,
        r.nodes,
        a.pods_per_node,
        a.max_pods,
        s.namespaces,
        r.plan.cut.as_ref().map(|c| format!(" **Planned short of the wanted**, {c}.")).unwrap_or_default(),
        r.created.stopped.as_ref().map(|c| format!(" **Creation stopped short**, {c}.")).unwrap_or_default(),
    );
    let _ = writeln!(md, "- serve and reports: {}.", r.cgroups);
    if !r.created.failed.is_empty() {
        let _ = writeln!(
            md,
            "- {} workloads failed, e.g. {:?}",
            r.created.failed.len(),
            &r.created.failed[..r.created.failed.len().min(3)]
        );
    }
    let (took, settled, rate) = r.settle;
    let _ = writeln!(
        md,
        "- Controllers (kube-controller-manager started again after the pods): {} in {:.0} s ({rate:.1} writes/s besides \
         Leases, Events and Nodes at the end). Then {} pods and {} ReplicaSets in the apiserver (the ReplicaSet controller \
         removes the pods over a 1-replica Deployment's replicas).",
        if settled { "caught up" } else { "**still busy at --settle-minutes**" },
        took.as_secs_f64(),
        r.pods,
        r.replicasets
    );
    let _ = writeln!(
        md,
        "- reports: view synced in {}; full reads before the writes: {}; during them: {}.",
        r.reports_synced_ms.map_or("-".into(), |m| format!("{:.1} s", m / 1e3)),
        secs(&r.full_reads.0),
        secs(&r.full_reads.1)
    );
    let split: Vec<String> = r
        .full_parts
        .iter()
        .map(|[all, read, judge, write]| {
            format!(
                "{:.1} s = reading {:.1} s + judging {:.1} s + writing {:.1} s",
                all / 1e3,
                read / 1e3,
                judge / 1e3,
                write / 1e3
            )
        })
        .collect();
    let _ = writeln!(
        md,
        "  Where each full read's time went (reading every namespace's objects from the apiserver, judging them, writing \
         the reports): {}.",
        if split.is_empty() { "-".to_string() } else { split.join("; ") }
    );
    let _ = writeln!(md, "- Writes over {:.0} s at {} a second, open loop:", r.window.as_secs_f64(), a.rate);
    for kind in WRITE_KINDS {
        let of: Vec<&Written> = r.written.iter().filter(|w| w.kind == kind).collect();
        let n = |x: Answer| of.iter().filter(|w| w.answer == x).count();
        let mut t: Vec<f64> = of.iter().map(|w| w.seconds).collect();
        t.sort_by(f64::total_cmp);
        let _ = writeln!(
            md,
            "  - {}: {} ({} ok, {} denied, {} failed), answered in p50 {} / p99 {}",
            kind.name(),
            of.len(),
            n(Answer::Ok),
            n(Answer::Denied),
            n(Answer::Failed),
            ms(percentile(&t, 0.5)),
            ms(percentile(&t, 0.99))
        );
    }
    let errors: Vec<&String> = r.written.iter().filter_map(|w| w.error.as_ref()).take(3).collect();
    if !errors.is_empty() {
        let _ = writeln!(md, "  - first denials and failures: {errors:?}");
    }
    let c = &r.calls;
    let _ = writeln!(
        md,
        "- The apiserver's calls to ha-guard during the writes: {} (denials {}), failed {}, failed open {}, refused for an \
         error {}; since the webhooks were registered: {} calls, {} failed, {} failed open. \
         `ha_guard_rule_deadline_exceeded_total`: {}; `ha_guard_counts_handed_over_total`: {}.",
        c.calls,
        c.rejected,
        c.failed,
        c.fail_open,
        c.rejected_for_errors,
        r.calls_since_registered.calls,
        r.calls_since_registered.failed,
        r.calls_since_registered.fail_open,
        r.deadline_exceeded,
        r.counts_handed_over
    );
    let _ = writeln!(
        md,
        "- The apiserver took {:.0} writes/s during the writes, {:.0} of them kwok's Lease renewals.",
        r.apiserver_writes.0, r.apiserver_writes.1
    );
    let components: Vec<String> =
        r.components_kib.iter().map(|(n, (rss, hwm))| format!("{n} {:.0} ({:.0})", mib(*rss), mib(*hwm))).collect();
    let _ = writeln!(
        md,
        "- Memory: RSS after the writes (peak), MiB: {}, serve {:.0} ({:.0}), reports {:.0} ({:.0}); the control plane's \
         before the workloads {:.0} MiB, so {:.0} KiB a pod above it. MemAvailable {:.1} GiB before the size, {:.1} GiB after the \
         writes (other work on the machine moves it too).",
        components.join(", "),
        mib(r.serve_kib.0),
        mib(r.serve_kib.1),
        mib(r.reports_kib.0),
        mib(r.reports_kib.1),
        mib(r.base_kib),
        r.peak_kib().saturating_sub(r.base_kib) as f64 / r.pods.max(1) as f64,
        gib(r.mem_before_kib),
        gib(r.mem_after_kib),
    );
    let phases: Vec<String> = r.phases.iter().map(|(n, d)| format!("{n} {:.0} s", d.as_secs_f64())).collect();
    let _ = writeln!(md, "- Phases: {}; load average {} → {}.", phases.join(", "), r.load.0, r.load.1);
    md
}

fn report(a: &Args, rows: &[Row], command: &str, describe: &str, started: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "## ha-guard at Kubernetes' limits (`benches/scale.rs`)\n");
    let _ = writeln!(
        md,
        "`{command}` at {describe}, started {started}; {} cores, {:.1} GiB of memory; load average now {}.\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        gib(meminfo_kib("MemTotal")),
        loadavg()
    );
    md.push_str(&table(rows));
    let _ = writeln!(
        md,
        "\nLatencies are p50 / p99 over the writes' window with the number of calls in brackets: `apiserver →` is the \
         apiserver's `apiserver_admission_webhook_admission_duration_seconds` for the webhook (buckets at 5, 25, 100 ms, ...: \
         a quantile under 5 ms is interpolated within the first), `handler` is ha-guard's \
         `ha_guard_admission_duration_seconds` (buckets doubling from 50 µs). RSS after the writes, peak (VmHWM) in brackets. \
         Full reads: `ha-guard reports`' `background audit done` lines with `run=full` (every namespace read and judged; \
         the first read, before the writes, follows the view's first sync). Deadline exceeded: \
         `ha_guard_rule_deadline_exceeded_total` since serve started; fail-open: the apiserver's \
         `apiserver_admission_webhook_fail_open_count` for ha-guard's webhooks over the window."
    );
    for r in rows {
        md.push_str(&details(r, a));
    }
    md
}

fn main() {
    let a = args();
    std::fs::create_dir_all(&a.out).unwrap_or_else(|e| panic!("{}: {e}", a.out.display()));
    let kwok = a.out.join("kwok.yaml");
    std::fs::write(&kwok, KWOK_CONFIG).unwrap_or_else(|e| panic!("{}: {e}", kwok.display()));
    // SAFETY: no other thread runs yet. up.sh and start.sh pass their environment on: etcd reads
    // its flags from ETCD_* too, and up.sh gives kwok KWOK_EXTRA_FLAGS after its own flags.
    unsafe {
        std::env::set_var("ETCD_QUOTA_BACKEND_BYTES", (8u64 << 30).to_string());
        std::env::set_var("KWOK_EXTRA_FLAGS", format!("--config={}", kwok.display()));
    }
    let argv: Vec<String> = std::env::args().skip(1).filter(|x| x != "--bench").collect();
    let command = format!("cargo bench --bench scale -- {}", argv.join(" "));
    let describe = git_describe();
    let started = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let mut rows: Vec<Row> = Vec::new();
    for &nodes in &a.sizes {
        let row = measure(&a, &rt, nodes, cost(&rows));
        eprintln!("[scale] {nodes} nodes done in {:.1} min", row.took.as_secs_f64() / 60.0);
        rows.push(row);
        let md = report(&a, &rows, &command, &describe, &started);
        std::fs::write(a.out.join("report.md"), &md).unwrap_or_else(|e| panic!("report.md: {e}"));
    }
    print!("\n{}", report(&a, &rows, &command, &describe, &started));
    eprintln!("[scale] {} written", a.out.join("report.md").display());
}

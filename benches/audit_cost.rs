//! What the background audit costs the cluster: two audit implementations side by side on one
//! generated cluster under status churn, each its own apiserver user, measured in the apiserver's
//! audit log, its CPU, their memory, and how fast a spec change reaches each one's report.
//!
//!     HA_GUARD_AUDIT_BASELINE=/tmp/ha-guard-main cargo bench --bench audit_cost
//!     cargo bench --bench audit_cost -- --minutes 2 --workloads 200 --pods 600 --namespaces 10 --window 20s --interval 1m
//!
//! - **before**: `ha-guard serve --audit-interval INTERVAL` (the audit in the webhook process, with
//!   the webhook's live view; a change it sees starts a run early) of `HA_GUARD_AUDIT_BASELINE`
//!   (default: this build), Lease namespace `ha-guard`, writing wgpolicyk8s.io PolicyReports, as
//!   user `audit-before`.
//! - **after**: `ha-guard reports --interval INTERVAL --lease-namespace ha-guard-after --debounce 2s
//!   --report-api openreports.io/v1alpha1 --probe-listen ADDR` of `HA_GUARD_AUDIT_AFTER` (default:
//!   this build), as user `audit-after`, writing openreports.io Reports (so the two never write the
//!   same objects). A binary without the `reports` subcommand runs `serve` in its place, which the
//!   output says (`after = stand-in`). `HA_GUARD_AUDIT_AFTER_ARGS`: more flags, space-separated.
//!
//! The control plane is the e2e one (`tests/support`: etcd + kube-apiserver, no controllers) with a
//! static token file (both users in `system:masters`) and an audit policy that logs these two users
//! only, at level Metadata, as JSON. `apiserver_request_total` has no user label, so the audit log
//! is what attributes requests: every event's `user.username`, `verb`, `objectRef.resource` and
//! `objectRef.namespace` (a list without a namespace is cluster-wide; `continue=` in the URI is a
//! further page). The log has no sizes, so there are no bytes.
//!
//! The cluster is `benches/audit.rs`'s (`benches/common/cluster.rs`). Then, for `--minutes`:
//! - **noise**: every `--noise` (15 s) a status-only update of every Deployment (ready, updated and
//!   available replicas alternating) and of every HPA (current and desired replicas alternating, a
//!   condition's lastTransitionTime), `--concurrency` writes at a time, as the admin user (not in the
//!   audit log).
//! - **windows** of `--window` cycling none, before, after: only that audit runs, the other is
//!   SIGSTOPped (SIGCONT when its turn comes; each has its own Lease namespace, so a stopped holder
//!   only loses its own Lease). The apiserver's, etcd's and the audits' CPU are sampled every second
//!   from /proc; a window's apiserver CPU minus the median of the `none` windows is what the running
//!   audit cost it. The first `min(15 s, window/3)` of a window is reported apart ("resume"): a
//!   process resumed after minutes finds its watches closed and may relist, which a process that was
//!   never stopped would not.
//! - **spec changes**: in each before/after window, at the end of its resume period and then every
//!   `--change` (60 s): a Deployment with several replicas, never changed before, in a random namespace gets
//!   `spec.strategy.type: Recreate` (rule `recreate-multi-replica` warns), then, once the running
//!   audit's report in that namespace shows it (polled every 0.5 s), back to RollingUpdate (the
//!   result must go). Latency = from the write's answer to the first poll that shows it; at most 60 s
//!   and never past the window's end (then "not within").
//!
//! Output: a markdown report on stdout and in `target/audit-cost/report.md` (or `--out DIR`), the raw
//! numbers in `raw.json`, the audits' logs beside them. Targets are printed PASS/FAIL and never fail
//! the bench.
//!
//! Flags (after `--`): `--minutes N` (30), `--workloads N` (10000), `--pods N` (30000),
//! `--namespaces N` (100), `--nodes N` (200), `--window D` (2m), `--interval D` (5m),
//! `--concurrency N` (32), `--noise D` (15s), `--change D` (60s), `--out DIR`; `--hold D` generates
//! the cluster, prints the audit user's kubeconfig, keeps it for D and measures nothing (to profile
//! an audit by hand against the same cluster).

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/cluster.rs"]
mod cluster;

#[path = "common/flags.rs"]
mod flags;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

const BEFORE_USER: &str = "audit-before";
const AFTER_USER: &str = "audit-after";
/// The rule a spec change turns on and off.
const RULE: &str = "recreate-multi-replica";
/// Cluster-scoped resources: a list of them is cluster-wide by nature.
const CLUSTER_SCOPED: [&str; 9] = [
    "nodes",
    "namespaces",
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
    "clusterpolicyreports",
    "clusterreports",
    "customresourcedefinitions",
    "persistentvolumes",
    "storageclasses",
];

struct Args {
    minutes: f64,
    shape: cluster::Shape,
    window: Duration,
    interval: Duration,
    concurrency: usize,
    noise: Duration,
    change: Duration,
    out: PathBuf,
    /// Keep the generated cluster this long and measure nothing (profiling by hand).
    hold: Option<Duration>,
}

fn args() -> Args {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo().join("target"));
    let mut a = Args {
        minutes: 30.0,
        shape: cluster::Shape { workloads: 10_000, pods: 30_000, namespaces: 100, nodes: 200 },
        window: Duration::from_secs(120),
        interval: Duration::from_secs(300),
        concurrency: 32,
        noise: Duration::from_secs(15),
        change: Duration::from_secs(60),
        out: target.join("audit-cost"),
        hold: None,
    };
    let usage = "--minutes N --workloads N --pods N --namespaces N --nodes N --window D --interval D \
                 --concurrency N --noise D --change D --out DIR --hold D";
    for (flag, v) in flags::pairs(usage) {
        let (flag, v) = (flag.as_str(), v.as_str());
        let bad = || -> ! { flags::bad(flag, v, usage) };
        let n = || v.parse::<usize>().ok().filter(|n| *n > 0).unwrap_or_else(|| bad());
        let d = || humantime::parse_duration(v).ok().filter(|d| !d.is_zero()).unwrap_or_else(|| bad());
        match flag {
            "--minutes" => a.minutes = v.parse::<f64>().ok().filter(|m| *m > 0.0).unwrap_or_else(|| bad()),
            "--workloads" => a.shape.workloads = n(),
            "--pods" => a.shape.pods = v.parse().unwrap_or_else(|_| bad()),
            "--namespaces" => a.shape.namespaces = n(),
            "--nodes" => a.shape.nodes = n(),
            "--window" => a.window = d(),
            "--interval" => a.interval = d(),
            "--concurrency" => a.concurrency = n(),
            "--noise" => a.noise = d(),
            "--change" => a.change = d(),
            "--out" => a.out = PathBuf::from(v),
            "--hold" => a.hold = Some(d()),
            _ => bad(),
        }
    }
    a
}

// --- the two audits ----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    None,
    Before,
    After,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::None => "none",
            Who::Before => "before",
            Who::After => "after",
        }
    }
    fn user(self) -> &'static str {
        match self {
            Who::Before => BEFORE_USER,
            Who::After => AFTER_USER,
            Who::None => "",
        }
    }
    /// The report each one writes (namespaced).
    fn report(self) -> ApiResource {
        let (group, version, kind, plural) = match self {
            Who::After => ("openreports.io", "v1alpha1", "Report", "reports"),
            _ => ("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports"),
        };
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: format!("{group}/{version}"),
            kind: kind.into(),
            plural: plural.into(),
        }
    }
}

const KINDS: [Who; 3] = [Who::None, Who::Before, Who::After];

/// A running audit process (killed on drop, also when stopped).
struct Audited {
    who: Who,
    child: Option<Child>,
    probe_port: u16,
    stopped: bool,
    log: PathBuf,
    pidfile: PathBuf,
}

impl Audited {
    fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }
    fn signal(&self, sig: &str) {
        let _ = Command::new("kill").args([sig, &self.pid().to_string()]).status();
    }
    fn pause(&mut self) {
        if !self.stopped {
            self.signal("-STOP");
            self.stopped = true;
        }
    }
    fn resume(&mut self) {
        if self.stopped {
            self.signal("-CONT");
            self.stopped = false;
        }
    }
    fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
    fn metrics(&self) -> Option<Metrics> {
        match http_get(self.probe_port, "/metrics") {
            Ok((200, body)) => Some(Metrics::parse(&body)),
            _ => None,
        }
    }
    /// SIGTERM (after SIGCONT), then SIGKILL after 10 s.
    fn stop(&mut self) {
        self.resume();
        let Some(mut child) = self.child.take() else { return };
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

impl Drop for Audited {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

/// Starts `binary` with `args`; its argv[0] names the control plane's root, so that the harness's
/// reaper stops it if this process dies without unwinding.
fn spawn(
    who: Who,
    binary: &Path,
    args: &[String],
    env: &[(&str, String)],
    root: &Path,
    out: &Path,
    probe_port: u16,
) -> Audited {
    use std::os::unix::process::CommandExt;
    let log = out.join(format!("{}.log", who.name()));
    let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let child = Command::new(binary)
        .arg0(root.join(format!("ha-guard-{}", who.name())))
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let pidfile = root.join(format!("audit-{}.pid", who.name()));
    std::fs::write(&pidfile, child.id().to_string()).expect("pid file");
    Audited { who, child: Some(child), probe_port, stopped: false, log, pidfile }
}

// --- /proc sampling ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    /// Seconds since the bench's epoch.
    t: f64,
    apiserver: f64,
    etcd: f64,
    before: f64,
    after: f64,
    before_rss: u64,
    after_rss: u64,
    /// Noise writes answered so far.
    noise: f64,
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32, tick: f64) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return f64::NAN };
    let Some((_, rest)) = stat.rsplit_once(')') else { return f64::NAN };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(f64::NAN);
    (num(11) + num(12)) / tick
}

/// A `/proc/PID/status` field in KiB (VmRSS, VmHWM).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.trim_start_matches(':').split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The sample nearest to `t` (seconds since the epoch).
fn at(samples: &[Sample], t: f64) -> Sample {
    samples.iter().min_by(|a, b| (a.t - t).abs().total_cmp(&(b.t - t).abs())).copied().unwrap_or_default()
}

// --- load --------------------------------------------------------------------------------------

#[derive(Default)]
struct NoiseStats {
    rounds: usize,
    writes: usize,
    errors: usize,
    /// Seconds each round took.
    took: Vec<f64>,
    first_error: Option<String>,
}

/// Noise writes answered so far (read by the sampler every second).
static NOISE_WRITES: AtomicU64 = AtomicU64::new(0);

async fn noise(
    client: kube::Client,
    shape: cluster::Shape,
    every: Duration,
    conc: usize,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<NoiseStats>>,
) {
    let deployments: Vec<(String, String, usize)> = (0..shape.workloads)
        .map(|i| (i, cluster::workload(&shape, i)))
        .filter(|(_, g)| !g.sts)
        .map(|(i, g)| (g.ns.clone(), g.name.clone(), cluster::replicas(i, &g)))
        .collect();
    let hpas: Vec<(String, String)> = (0..shape.workloads)
        .filter(|i| cluster::has_hpa(&shape, *i))
        .map(|i| {
            let g = cluster::workload(&shape, i);
            (g.ns, g.name)
        })
        .collect();
    let mut round = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let started = tokio::time::Instant::now();
        let odd = round % 2;
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        type Write = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), kube::Error>> + Send>>;
        let mut writes: Vec<Write> = Vec::with_capacity(deployments.len() + hpas.len());
        for (ns, name, n) in &deployments {
            let api = Api::<Deployment>::namespaced(client.clone(), ns);
            let ready = n.saturating_sub(odd);
            let status = json!({"status": {"replicas": n, "readyReplicas": ready, "updatedReplicas": ready,
                "availableReplicas": ready}});
            let name = name.clone();
            writes.push(Box::pin(async move {
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.map(|_| ())
            }));
        }
        for (ns, name) in &hpas {
            let api = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns);
            let status = json!({"status": {"currentReplicas": 2 + odd, "desiredReplicas": 2 + odd,
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                    "lastTransitionTime": now}]}});
            let name = name.clone();
            writes.push(Box::pin(async move {
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.map(|_| ())
            }));
        }
        let results: Vec<Result<(), kube::Error>> = futures::stream::iter(writes)
            .buffer_unordered(conc)
            .inspect(|_| {
                NOISE_WRITES.fetch_add(1, Ordering::Relaxed);
            })
            .collect()
            .await;
        {
            let mut s = stats.lock().unwrap();
            s.rounds += 1;
            s.writes += results.len();
            for r in &results {
                if let Err(e) = r {
                    s.errors += 1;
                    s.first_error.get_or_insert_with(|| e.to_string());
                }
            }
            s.took.push(started.elapsed().as_secs_f64());
        }
        round += 1;
        let until = started + every;
        while !stop.load(Ordering::SeqCst) && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(200).min(until - tokio::time::Instant::now())).await;
        }
    }
}

/// Whether `who`'s report in `ns` has the rule's result on Deployment `name`; `None`: no report.
async fn shows(client: &kube::Client, who: Who, ns: &str, name: &str) -> Result<Option<bool>, String> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &who.report());
    let Some(report) = api.get_opt("ha-guard").await.map_err(|e| e.to_string())? else { return Ok(None) };
    let results = report.data["results"].as_array().cloned().unwrap_or_default();
    Ok(Some(results.iter().any(|r| {
        r["rule"] == RULE
            && r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x["name"] == name && x["kind"] == "Deployment"))
    })))
}

#[derive(Clone, Debug)]
enum Outcome {
    /// Seconds from the write's answer to the first poll that showed it.
    Reflected(f64),
    /// Not shown within this many seconds (60 s, or the window's end).
    NotWithin(f64),
    /// Not measured, and why.
    Skipped(String),
}

#[derive(Clone, Debug)]
struct Change {
    /// Seconds since the bench's epoch.
    t: f64,
    window: usize,
    who: Who,
    /// "set" (strategy Recreate: the result appears) or "revert" (RollingUpdate: it goes).
    what: &'static str,
    ns: String,
    name: String,
    outcome: Outcome,
}

/// Writes the strategy of Deployment `ns/name` and waits (polling `who`'s report every 0.5 s) until
/// the report shows the result (`recreate`) or no longer does, until `deadline`.
fn change(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    who: Who,
    ns: &str,
    name: &str,
    recreate: bool,
    deadline: Instant,
) -> Result<Outcome, String> {
    rt.block_on(async {
        let prior = shows(client, who, ns, name).await?;
        let patch = if recreate {
            json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}}})
        } else {
            json!({"spec": {"strategy": {"type": "RollingUpdate"}}})
        };
        Api::<Deployment>::namespaced(client.clone(), ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("patch {ns}/{name}: {e}"))?;
        let written = Instant::now();
        match prior {
            None => return Ok(Outcome::Skipped(format!("no {} report in {ns}", who.name()))),
            Some(p) if p == recreate => {
                return Ok(Outcome::Skipped("the report did not show the prior state".into()));
            }
            Some(_) => {}
        }
        let deadline = deadline.min(written + Duration::from_secs(60));
        loop {
            if shows(client, who, ns, name).await? == Some(recreate) {
                return Ok(Outcome::Reflected(written.elapsed().as_secs_f64()));
            }
            if Instant::now() >= deadline {
                return Ok(Outcome::NotWithin(written.elapsed().as_secs_f64()));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

// --- the apiserver's audit log --------------------------------------------------------------------

/// One request of an audit user.
struct Request {
    user: String,
    verb: String,
    /// `resource` or `resource/subresource`.
    resource: String,
    namespaced: bool,
    /// A list's further page (`continue=`).
    page: bool,
    /// Seconds since the bench's epoch (requestReceivedTimestamp).
    t: f64,
    /// The answer's status code (0: none in the event).
    code: u64,
}

/// Each request once: a watch when it starts (ResponseStarted), anything else when it completes.
fn read_audit_log(path: &Path, epoch: SystemTime) -> Vec<Request> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else { continue };
        let verb = e["verb"].as_str().unwrap_or("").to_string();
        let stage = e["stage"].as_str().unwrap_or("");
        let counted = if verb == "watch" { stage == "ResponseStarted" } else { stage == "ResponseComplete" };
        if !counted {
            continue;
        }
        let o = &e["objectRef"];
        let mut resource = o["resource"].as_str().unwrap_or("(none)").to_string();
        if let Some(sub) = o["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let t = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
            .map(|s| match s.duration_since(epoch) {
                Ok(d) => d.as_secs_f64(),
                Err(e) => -e.duration().as_secs_f64(),
            })
            .unwrap_or(f64::NAN);
        out.push(Request {
            user: e["user"]["username"].as_str().unwrap_or("").to_string(),
            verb,
            resource,
            namespaced: o["namespace"].as_str().is_some_and(|n| !n.is_empty()),
            page: e["requestURI"].as_str().is_some_and(|u| u.contains("continue=")),
            t,
            code: e["responseStatus"]["code"].as_u64().unwrap_or(0),
        });
    }
    out
}

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    total: usize,
    lists: usize,
    lists_cluster: usize,
    lists_namespaced: usize,
    pages: usize,
    watches: usize,
    gets: usize,
    writes: usize,
}

impl Counts {
    fn add(&mut self, r: &Request) {
        self.total += 1;
        match r.verb.as_str() {
            "list" => {
                self.lists += 1;
                if r.namespaced {
                    self.lists_namespaced += 1
                } else {
                    self.lists_cluster += 1
                }
                if r.page {
                    self.pages += 1;
                }
            }
            "watch" => self.watches += 1,
            "get" => self.gets += 1,
            "create" | "update" | "patch" | "delete" | "deletecollection" => self.writes += 1,
            _ => {}
        }
    }
    fn json(&self) -> Value {
        json!({"total": self.total, "lists": self.lists, "lists_cluster": self.lists_cluster,
            "lists_namespaced": self.lists_namespaced, "list_pages": self.pages, "watches": self.watches,
            "gets": self.gets, "writes": self.writes})
    }
}

// --- windows ------------------------------------------------------------------------------------

struct Window {
    kind: Who,
    /// Seconds since the bench's epoch.
    start: f64,
    end: f64,
    settle: f64,
    /// The running audit's /metrics when the window began and ended.
    m_start: Option<Metrics>,
    m_end: Option<Metrics>,
}

fn counter(m: &Option<Metrics>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let m = m.as_ref()?;
    let all = m.all(name, labels);
    if all.is_empty() { None } else { Some(all.iter().map(|(_, v)| v).sum()) }
}

impl Window {
    fn delta(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        Some(counter(&self.m_end, name, labels)? - counter(&self.m_start, name, labels).unwrap_or(0.0))
    }
    fn minutes(&self) -> f64 {
        (self.end - self.start) / 60.0
    }
}

/// The sum over `who`'s windows of a counter's increase in each.
fn sum_windows(windows: &[Window], who: Who, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let v: Vec<f64> = windows.iter().filter(|w| w.kind == who).filter_map(|w| w.delta(name, labels)).collect();
    if v.is_empty() { None } else { Some(v.iter().sum()) }
}

/// CPU seconds a minute of a sampled counter between two times.
fn cpu_per_min(samples: &[Sample], f: fn(&Sample) -> f64, from: f64, to: f64) -> f64 {
    (f(&at(samples, to)) - f(&at(samples, from))) / ((to - from) / 60.0)
}

fn median_over(ws: &[(usize, &Window)], f: impl Fn(usize, &Window) -> f64) -> f64 {
    median(ws.iter().map(|(i, w)| f(*i, w)).collect())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "n/a".into(),
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn git_describe() -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(repo())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn main() {
    let a = args();
    let bench_started = Instant::now();
    std::fs::create_dir_all(&a.out).unwrap_or_else(|e| panic!("{}: {e}", a.out.display()));
    let this = PathBuf::from(env!("CARGO_BIN_EXE_ha-guard"));
    let before_bin = std::env::var_os("HA_GUARD_AUDIT_BASELINE").map(PathBuf::from).unwrap_or_else(|| this.clone());
    let after_bin = std::env::var_os("HA_GUARD_AUDIT_AFTER").map(PathBuf::from).unwrap_or_else(|| this.clone());
    let after_extra: Vec<String> =
        std::env::var("HA_GUARD_AUDIT_AFTER_ARGS").unwrap_or_default().split_whitespace().map(str::to_string).collect();
    let after_has_reports = Command::new(&after_bin)
        .args(["reports", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let after_mode = if after_has_reports { "reports" } else { "stand-in (serve)" };
    eprintln!("[audit-cost] before: {} serve; after: {} {after_mode}", before_bin.display(), after_bin.display());
    let (before_token, after_token) = ("audit-before-3f9c1a7e5b", "audit-after-8d2e6b4c1f");

    // The control plane, with the two users and an audit log of their requests.
    let mut cp = ControlPlane::start_with(|root| {
        let tokens = root.join("tokens.csv");
        std::fs::write(
            &tokens,
            format!(
                "{before_token},{BEFORE_USER},{BEFORE_USER},\"system:masters\"\n\
                 {after_token},{AFTER_USER},{AFTER_USER},\"system:masters\"\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        let policy = root.join("audit-policy.yaml");
        std::fs::write(
            &policy,
            format!(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
                 - level: Metadata\n  users: [{BEFORE_USER}, {AFTER_USER}]\n- level: None\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        Ok(vec![
            format!("--token-auth-file={}", tokens.display()),
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", root.join("audit.log").display()),
            "--audit-log-format=json".into(),
            // lumberjack rotates at 100 MB unless told otherwise.
            "--audit-log-maxsize=100000".into(),
        ])
    })
    .unwrap_or_else(|e| panic!("control plane: {e}"));
    let root = cp.root().to_path_buf();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let client = cp.kube_client(&rt);
    let before_kc = cp.token_kubeconfig(before_token, &root.join("before.kubeconfig"));
    let after_kc = cp.token_kubeconfig(after_token, &root.join("after.kubeconfig"));
    let pid_of = |name: &str| -> u32 {
        std::fs::read_to_string(cp.dir().join(format!("{name}.pid")))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let (apiserver_pid, etcd_pid) = (pid_of("apiserver"), pid_of("etcd"));

    // The report CRDs and the Lease namespaces.
    support::reports::install_report_crds(&cp);
    rt.block_on(async {
        for name in ["ha-guard", "ha-guard-after"] {
            let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace");
        }
    });

    // The cluster.
    let shape = a.shape;
    let conc = a.concurrency.max(16);
    let started = Instant::now();
    rt.block_on(cluster::create_namespaces_and_nodes(&client, &shape, conc));
    let owners = rt.block_on(cluster::create_workloads(&client, &shape, conc));
    let workloads_took = started.elapsed();
    let started = Instant::now();
    rt.block_on(cluster::create_all_pods(&client, &shape, &owners, conc));
    let pods_took = started.elapsed();
    eprintln!(
        "[audit-cost] {} workloads in {workloads_took:.1?}, {} pods in {pods_took:.1?}",
        shape.workloads, shape.pods
    );

    if let Some(hold) = a.hold {
        eprintln!(
            "[audit-cost] holding the cluster for {}: KUBECONFIG={} (the after user's; the admin's: {})",
            humantime::format_duration(hold),
            after_kc.display(),
            cp.kubeconfig().display()
        );
        std::thread::sleep(hold);
        return;
    }

    // The two audits.
    let interval = humantime::format_duration(a.interval).to_string();
    let certs = root.join("audit-certs");
    let out = Command::new(&before_bin)
        .args(["certs", "--out"])
        .arg(&certs)
        .args(["--dns", "localhost", "--ip", "127.0.0.1"])
        .output()
        .expect("ha-guard certs");
    assert!(out.status.success(), "ha-guard certs: {}", String::from_utf8_lossy(&out.stderr));
    let serve_args = |probe: u16, report_api: &str| -> Vec<String> {
        let mut v: Vec<String> = vec!["serve".into(), "--listen".into(), format!("127.0.0.1:{}", free_port())];
        v.extend(["--probe-listen".into(), format!("127.0.0.1:{probe}")]);
        v.extend(["--tls-cert".into(), certs.join("tls.crt").display().to_string()]);
        v.extend(["--tls-key".into(), certs.join("tls.key").display().to_string()]);
        v.extend(["--cluster", "live", "--log-format", "json", "--audit-interval"].map(String::from));
        v.push(interval.clone());
        v.extend(["--audit-report-api".into(), report_api.into()]);
        v
    };
    let before_probe = free_port();
    let mut before = spawn(
        Who::Before,
        &before_bin,
        &serve_args(before_probe, "wgpolicyk8s.io/v1alpha2"),
        &[
            ("KUBECONFIG", before_kc.display().to_string()),
            ("POD_NAMESPACE", "ha-guard".into()),
            ("POD_NAME", "before".into()),
        ],
        &root,
        &a.out,
        before_probe,
    );
    let after_probe = loop {
        let p = free_port();
        if p != before_probe {
            break p;
        }
    };
    let mut after_args = if after_has_reports {
        let mut v: Vec<String> = ["reports", "--interval"].map(String::from).to_vec();
        v.push(interval.clone());
        v.extend(
            ["--lease-namespace", "ha-guard-after", "--debounce", "2s", "--report-api", "openreports.io/v1alpha1"]
                .map(String::from),
        );
        v.extend(["--probe-listen".into(), format!("127.0.0.1:{after_probe}")]);
        v
    } else {
        serve_args(after_probe, "openreports.io/v1alpha1")
    };
    after_args.extend(after_extra.iter().cloned());
    let mut after = spawn(
        Who::After,
        &after_bin,
        &after_args,
        &[
            ("KUBECONFIG", after_kc.display().to_string()),
            ("POD_NAMESPACE", "ha-guard-after".into()),
            ("POD_NAME", "after".into()),
        ],
        &root,
        &a.out,
        after_probe,
    );

    // /proc sampling from here on.
    let epoch_wall = SystemTime::now();
    let epoch = Instant::now();
    let tick = clock_ticks();
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (samples, sampling) = (samples.clone(), sampling.clone());
        let (bp, ap) = (before.pid(), after.pid());
        std::thread::spawn(move || {
            while sampling.load(Ordering::SeqCst) {
                let s = Sample {
                    t: epoch.elapsed().as_secs_f64(),
                    apiserver: cpu_seconds(apiserver_pid, tick),
                    etcd: cpu_seconds(etcd_pid, tick),
                    before: cpu_seconds(bp, tick),
                    after: cpu_seconds(ap, tick),
                    before_rss: status_kib(bp, "VmRSS"),
                    after_rss: status_kib(ap, "VmRSS"),
                    noise: NOISE_WRITES.load(Ordering::Relaxed) as f64,
                };
                samples.lock().unwrap().push(s);
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };

    // Warm-up: each one's first run done (`ha_guard_audit_runs_total{result="success"}`) and its
    // report in the last namespace there.
    let last_ns = format!("ns-{:03}", shape.namespaces - 1);
    let warm = Instant::now();
    for p in [&mut before, &mut after] {
        let who = p.who;
        let ok = poll(
            &format!("{} writes its first reports", who.name()),
            Duration::from_secs(900),
            Duration::from_secs(1),
            || {
                if !p.running() {
                    return Ok(Err(format!("{} exited; its log:\n{}", who.name(), tail(&p.log, 30))));
                }
                let runs = p.metrics().and_then(|m| m.get("ha_guard_audit_runs_total", &[("result", "success")]));
                if runs.unwrap_or(0.0) < 1.0 {
                    return Err("no run done yet".into());
                }
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &last_ns, &who.report());
                match rt.block_on(api.get_opt("ha-guard")) {
                    Ok(Some(_)) => Ok(Ok(())),
                    Ok(None) => Err("no report yet".into()),
                    Err(e) => Err(e.to_string()),
                }
            },
        );
        if let Err(e) | Ok(Err(e)) = ok {
            panic!("{e}\n{} log:\n{}", who.name(), tail(&p.log, 30));
        }
    }
    let warm_took = warm.elapsed();
    eprintln!("[audit-cost] both audits wrote their first reports in {warm_took:.1?}");
    let api_cpu_metric_start = cp.metrics().get("process_cpu_seconds_total", &[]);
    let before_m0 = before.metrics();
    let after_m0 = after.metrics();

    // The noise.
    let noise_stop = Arc::new(AtomicBool::new(false));
    let noise_stats: Arc<Mutex<NoiseStats>> = Arc::default();
    let noise_task =
        rt.spawn(noise(client.clone(), shape, a.noise, a.concurrency, noise_stop.clone(), noise_stats.clone()));

    // The windows.
    let total = Duration::from_secs_f64(a.minutes * 60.0);
    let n_windows = (total.as_secs_f64() / a.window.as_secs_f64()).ceil().max(1.0) as usize;
    if n_windows < 3 {
        eprintln!("[audit-cost] only {n_windows} window(s): not every kind gets one (--minutes / --window)");
    }
    let settle = Duration::from_secs(15).min(a.window / 3);
    // Deployments with several replicas, in a fixed pseudo-random order.
    let mut candidates: Vec<usize> = (0..shape.workloads)
        .filter(|i| {
            let g = cluster::workload(&shape, *i);
            !g.sts && cluster::replicas(*i, &g) > 1
        })
        .collect();
    candidates.sort_by_key(|i| mix64(*i as u64));
    let mut candidates = candidates.into_iter();
    let mut windows: Vec<Window> = Vec::new();
    let mut changes: Vec<Change> = Vec::new();
    let secs = |i: Instant| i.duration_since(epoch).as_secs_f64();
    for w in 0..n_windows {
        let kind = KINDS[w % KINDS.len()];
        let start = Instant::now();
        for p in [&mut before, &mut after] {
            if p.who != kind {
                p.pause();
            }
        }
        let mut m_start = None;
        for p in [&mut before, &mut after] {
            if p.who == kind {
                p.resume();
                m_start = p.metrics();
            }
        }
        let end = start + a.window;
        eprintln!("[audit-cost] window {}/{n_windows}: {} (load {})", w + 1, kind.name(), loadavg());
        // The first change once the resumed process has caught up.
        let mut next_change = start + settle;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            if kind != Who::None && now >= next_change {
                let due = next_change;
                next_change += a.change;
                if due + Duration::from_secs(1) > end {
                    continue;
                }
                let Some(i) = candidates.next() else { continue };
                let g = cluster::workload(&shape, i);
                for (what, recreate) in [("set", true), ("revert", false)] {
                    let t = secs(Instant::now());
                    let outcome = match changes.last() {
                        Some(c) if what == "revert" && !matches!(c.outcome, Outcome::Reflected(_)) => {
                            // Put it back; nothing to measure from a set that was not seen.
                            let _ = change(&rt, &client, kind, &g.ns, &g.name, false, Instant::now());
                            Outcome::Skipped("the set was not reflected".into())
                        }
                        _ => change(&rt, &client, kind, &g.ns, &g.name, recreate, end).unwrap_or_else(Outcome::Skipped),
                    };
                    eprintln!("[audit-cost]   {what} {}/{}: {} {outcome:?}", g.ns, g.name, kind.name());
                    changes.push(Change {
                        t,
                        window: w,
                        who: kind,
                        what,
                        ns: g.ns.clone(),
                        name: g.name.clone(),
                        outcome,
                    });
                }
                continue;
            }
            let wake = if kind == Who::None { end } else { end.min(next_change) };
            std::thread::sleep(wake.saturating_duration_since(now).min(Duration::from_millis(500)));
        }
        let m_end = [&before, &after].into_iter().find(|p| p.who == kind).and_then(|p| p.metrics());
        let end_t = secs(Instant::now());
        windows.push(Window {
            kind,
            start: secs(start),
            end: end_t,
            settle: secs(start) + settle.as_secs_f64(),
            m_start,
            m_end,
        });
    }
    let measured_end = secs(Instant::now());

    // The end: noise off, both running, their state read.
    noise_stop.store(true, Ordering::SeqCst);
    let _ = rt.block_on(noise_task);
    before.resume();
    after.resume();
    std::thread::sleep(Duration::from_secs(2));
    let before_m1 = before.metrics();
    let after_m1 = after.metrics();
    let before_hwm = status_kib(before.pid(), "VmHWM");
    let after_hwm = status_kib(after.pid(), "VmHWM");
    let before_alive = before.running();
    let after_alive = after.running();
    let api_cpu_metric_end = cp.metrics().get("process_cpu_seconds_total", &[]);
    sampling.store(false, Ordering::SeqCst);
    let _ = sampler.join();
    before.stop();
    after.stop();
    let samples = samples.lock().unwrap().clone();
    let requests = read_audit_log(&root.join("audit.log"), epoch_wall);
    let noise_stats = std::mem::take(&mut *noise_stats.lock().unwrap());

    // --- analysis ---------------------------------------------------------------------------------
    let window_of = |t: f64| windows.iter().position(|w| w.start <= t && t < w.end);
    let users = [Who::Before, Who::After];
    // Per user: (verb, resource) counts over the measured windows; per (window kind, user) counts.
    let mut by_verb: BTreeMap<(&str, String, String), usize> = BTreeMap::new();
    let mut per_user: BTreeMap<&str, Counts> = BTreeMap::new();
    // Answers other than 2xx, by user, resource, verb and code.
    let mut failed: BTreeMap<(&str, String, String, u64), usize> = BTreeMap::new();
    let mut warmup: BTreeMap<&str, Counts> = BTreeMap::new();
    let mut per_window: Vec<BTreeMap<&str, Counts>> = vec![BTreeMap::new(); windows.len()];
    let mut per_window_settle: Vec<BTreeMap<&str, Counts>> = vec![BTreeMap::new(); windows.len()];
    // The after's cluster-wide list starts of namespaced resources after the resume period, by resource.
    let mut after_cluster_lists_steady: BTreeMap<String, usize> = BTreeMap::new();
    let mut after_cluster_lists_settle: BTreeMap<String, usize> = BTreeMap::new();
    for r in &requests {
        let Some(who) = users.iter().find(|u| u.user() == r.user) else { continue };
        let user = who.user();
        match window_of(r.t) {
            Some(w) => {
                *by_verb.entry((user, r.resource.clone(), r.verb.clone())).or_default() += 1;
                if !(200..300).contains(&r.code) {
                    *failed.entry((user, r.resource.clone(), r.verb.clone(), r.code)).or_default() += 1;
                }
                per_user.entry(user).or_default().add(r);
                per_window[w].entry(user).or_default().add(r);
                let in_settle = r.t < windows[w].settle;
                if in_settle {
                    per_window_settle[w].entry(user).or_default().add(r);
                }
                let base = r.resource.split('/').next().unwrap_or("");
                if *who == Who::After && r.verb == "list" && !r.namespaced && !r.page && !CLUSTER_SCOPED.contains(&base)
                {
                    let m = if in_settle { &mut after_cluster_lists_settle } else { &mut after_cluster_lists_steady };
                    *m.entry(r.resource.clone()).or_default() += 1;
                }
            }
            None if r.t < windows.first().map_or(f64::MAX, |w| w.start) => warmup.entry(user).or_default().add(r),
            None => {}
        }
    }
    struct KindRow {
        kind: Who,
        n: usize,
        api: f64,
        api_resume: f64,
        api_steady: f64,
        etcd: f64,
        own: f64,
        requests: f64,
        lists: f64,
        lists_cluster: f64,
        runs: Option<f64>,
        reads_cluster: Option<f64>,
        reads_ns: Option<f64>,
        /// Noise writes answered a minute.
        noise: f64,
        /// Apiserver CPU a minute minus what its noise writes cost at the `none` windows' rate.
        api_net: f64,
    }
    // The apiserver's CPU seconds per noise write in the `none` windows (median of the windows).
    let per_write = median(
        windows
            .iter()
            .filter(|w| w.kind == Who::None)
            .map(|w| {
                let (s0, s1) = (at(&samples, w.start), at(&samples, w.end));
                (s1.apiserver - s0.apiserver) / (s1.noise - s0.noise)
            })
            .collect(),
    );
    let mut kind_rows = Vec::new();
    for kind in KINDS {
        let ws: Vec<(usize, &Window)> = windows.iter().enumerate().filter(|(_, w)| w.kind == kind).collect();
        let own_cpu: fn(&Sample) -> f64 = match kind {
            Who::Before => |s| s.before,
            Who::After => |s| s.after,
            Who::None => |_| 0.0,
        };
        let user = kind.user();
        let per_min = |c: fn(&Counts) -> usize| {
            median_over(&ws, |i, w| per_window[i].get(user).map_or(0, c) as f64 / w.minutes())
        };
        let opt = |v: f64| if v.is_finite() { Some(v) } else { None };
        let delta = |name: &str, scope: Option<&str>| {
            opt(median_over(&ws, |_, w| {
                let labels: Vec<(&str, &str)> = scope.map(|s| ("scope", s)).into_iter().collect();
                w.delta(name, &labels).unwrap_or(f64::NAN)
            }))
        };
        let cpu = |f: fn(&Sample) -> f64, part: fn(&Window) -> (f64, f64)| {
            median_over(&ws, |_, w| {
                let (from, to) = part(w);
                cpu_per_min(&samples, f, from, to)
            })
        };
        kind_rows.push(KindRow {
            kind,
            n: ws.len(),
            api: cpu(|s| s.apiserver, |w| (w.start, w.end)),
            api_resume: cpu(|s| s.apiserver, |w| (w.start, w.settle)),
            api_steady: cpu(|s| s.apiserver, |w| (w.settle, w.end)),
            etcd: cpu(|s| s.etcd, |w| (w.start, w.end)),
            own: cpu(own_cpu, |w| (w.start, w.end)),
            requests: per_min(|c| c.total),
            lists: per_min(|c| c.lists),
            lists_cluster: per_min(|c| c.lists_cluster),
            runs: delta("ha_guard_audit_runs_total", None),
            reads_cluster: delta("ha_guard_audit_reads_total", Some("cluster")),
            reads_ns: delta("ha_guard_audit_reads_total", Some("namespace")),
            noise: cpu(|s| s.noise, |w| (w.start, w.end)),
            api_net: median_over(&ws, |_, w| {
                let (s0, s1) = (at(&samples, w.start), at(&samples, w.end));
                (s1.apiserver - s0.apiserver - (s1.noise - s0.noise) * per_write) / w.minutes()
            }),
        });
    }
    let none_api = kind_rows[0].api;
    let none_steady = kind_rows[0].api_steady;
    let none_resume = kind_rows[0].api_resume;
    let none_etcd = kind_rows[0].etcd;
    let after_reads_cluster = sum_windows(&windows, Who::After, "ha_guard_audit_reads_total", &[("scope", "cluster")]);
    let after_reads_ns = sum_windows(&windows, Who::After, "ha_guard_audit_reads_total", &[("scope", "namespace")]);
    let runs_in = |who: Who| sum_windows(&windows, who, "ha_guard_audit_runs_total", &[]);
    let max_rss = |f: fn(&Sample) -> u64| samples.iter().map(f).max().unwrap_or(0);
    let (before_rss_max, after_rss_max) = (max_rss(|s| s.before_rss), max_rss(|s| s.after_rss));
    // (reflected latencies, not within 60 s, cut by the window's end after how long each, not measured)
    let latencies = |who: Who| -> (Vec<f64>, usize, Vec<f64>, usize) {
        let mine: Vec<&Change> = changes.iter().filter(|c| c.who == who).collect();
        let ok: Vec<f64> =
            mine.iter().filter_map(|c| if let Outcome::Reflected(s) = c.outcome { Some(s) } else { None }).collect();
        let waited: Vec<f64> =
            mine.iter().filter_map(|c| if let Outcome::NotWithin(s) = c.outcome { Some(s) } else { None }).collect();
        let late = waited.iter().filter(|s| **s >= 59.0).count();
        let cut: Vec<f64> = waited.into_iter().filter(|s| *s < 59.0).collect();
        let skipped = mine.iter().filter(|c| matches!(c.outcome, Outcome::Skipped(_))).count();
        (ok, late, cut, skipped)
    };
    let minutes_measured = (measured_end - windows.first().map_or(measured_end, |w| w.start)) / 60.0;

    // --- the report -------------------------------------------------------------------------------
    let mut md = String::new();
    let when = humantime::format_rfc3339_seconds(epoch_wall);
    let _ = writeln!(md, "## Background audit cost, before vs after (`cargo bench --bench audit_cost`)\n");
    let _ = writeln!(
        md,
        "{when} UTC, commit {}; {} namespaces, {} nodes, {} workloads, {} pods; {:.1} min measured in {} windows of {} \
         (none, before, after in turn); audit interval {interval}; noise every {} ({} Deployment + HPA status \
         writes a round), a spec change every {}. Load average at the end: {}.\n",
        git_describe(),
        shape.namespaces,
        shape.nodes,
        shape.workloads,
        shape.pods,
        minutes_measured,
        windows.len(),
        humantime::format_duration(a.window),
        humantime::format_duration(a.noise),
        noise_stats.writes / noise_stats.rounds.max(1),
        humantime::format_duration(a.change),
        loadavg(),
    );
    let _ = writeln!(
        md,
        "- before: `{} serve --audit-interval {interval}` (user `{BEFORE_USER}`, wgpolicyk8s.io PolicyReports)\n\
         - after: `{} {}` (user `{AFTER_USER}`, openreports.io Reports){}\n\
         - setup: workloads created in {workloads_took:.1?}, pods in {pods_took:.1?}; first reports of both in \
         {warm_took:.1?}; noise rounds: {} (median {:.1} s, max {:.1} s each; {} failed writes{})\n",
        before_bin.display(),
        after_bin.display(),
        after_args.join(" "),
        if after_has_reports {
            String::new()
        } else {
            ": **stand-in**: this binary has no `reports` subcommand, so it runs `serve` like the before".into()
        },
        noise_stats.rounds,
        median(noise_stats.took.clone()),
        noise_stats.took.iter().copied().fold(0.0, f64::max),
        noise_stats.errors,
        noise_stats.first_error.as_deref().map(|e| format!(", first: {e}")).unwrap_or_default(),
    );
    let _ = writeln!(
        md,
        "Requests are counted from the apiserver's audit log (policy: level Metadata for the two users, nothing \
         else), because `apiserver_request_total` has no user label. A watch counts when it starts, anything else \
         when it completes; the log has no sizes, so no bytes. Only requests inside the windows count, where only \
         one audit runs at a time.\n"
    );
    let _ = writeln!(md, "### Requests by user, verb and resource (all windows)\n");
    let verbs = ["list", "watch", "get", "create", "update", "patch", "delete"];
    let _ = writeln!(md, "| user | resource | {} | other |", verbs.join(" | "));
    let _ = writeln!(md, "|---|---|{}---:|", "---:|".repeat(verbs.len()));
    let mut rows: BTreeMap<(&str, String), BTreeMap<String, usize>> = BTreeMap::new();
    for ((user, resource, verb), n) in &by_verb {
        *rows.entry((user, resource.clone())).or_default().entry(verb.clone()).or_default() += n;
    }
    for ((user, resource), vs) in &rows {
        let cells: Vec<String> = verbs.iter().map(|v| vs.get(*v).map_or("".into(), |n| n.to_string())).collect();
        let other: usize = vs.iter().filter(|(v, _)| !verbs.contains(&v.as_str())).map(|(_, n)| n).sum();
        let _ = writeln!(
            md,
            "| {user} | {resource} | {} | {} |",
            cells.join(" | "),
            if other > 0 { other.to_string() } else { String::new() }
        );
    }
    if !failed.is_empty() {
        let list: Vec<String> = failed.iter().map(|((u, r, v, c), n)| format!("{u} {v} {r} → {c}: {n}")).collect();
        let _ = writeln!(md, "\nAnswers other than 2xx (in the counts above): {}.", list.join("; "));
    }
    let _ = writeln!(md, "\n### Per audit (all windows; each ran in a third of them)\n");
    let _ = writeln!(
        md,
        "| | requests | lists | lists cluster-wide | lists in a namespace | of the lists: further pages | watches | gets | writes | runs (failed) | full reads (cluster) | namespace reads | peak RSS (VmHWM), MiB | max sampled RSS, MiB |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (who, hwm, rss) in [(Who::Before, before_hwm, before_rss_max), (Who::After, after_hwm, after_rss_max)] {
        let c = per_user.get(who.user()).copied().unwrap_or_default();
        let (rc, rn) = if who == Who::After { (after_reads_cluster, after_reads_ns) } else { (None, None) };
        let failed = sum_windows(&windows, who, "ha_guard_audit_runs_total", &[("result", "failure")]);
        let runs = format!("{} ({})", fmt_opt(runs_in(who), 0), fmt_opt(failed, 0));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} |",
            who.name(),
            c.total,
            c.lists,
            c.lists_cluster,
            c.lists_namespaced,
            c.pages,
            c.watches,
            c.gets,
            c.writes,
            runs,
            fmt_opt(rc, 0),
            fmt_opt(rn, 0),
            mib(hwm),
            mib(rss),
        );
    }
    let warm_line = |who: Who| {
        let c = warmup.get(who.user()).copied().unwrap_or_default();
        format!(
            "{}: {} requests ({} lists, {} cluster-wide; {} watches; {} gets; {} writes)",
            who.name(),
            c.total,
            c.lists,
            c.lists_cluster,
            c.watches,
            c.gets,
            c.writes
        )
    };
    let _ = writeln!(
        md,
        "\nBefore the windows, from the start until both had written their first reports ({warm_took:.1?}): {}; {}. \
         A watch that lasts through the windows was counted there.",
        warm_line(Who::Before),
        warm_line(Who::After)
    );
    let _ = writeln!(
        md,
        "\n### Per window kind (median over the windows of a kind; per minute)\n\n\
         The apiserver's CPU from /proc every second (its `process_cpu_seconds_total` read through /metrics at \
         the start and the end: {} s and {} s, {:.1} s in all); \"resume\" is the first {} of a window, when the \
         resumed process catches up, \"steady\" the rest; Δ = minus the `none` windows' median. When the noise \
         alone keeps the apiserver busy, an audit's requests slow the noise down rather than add CPU, so \
         \"net of noise\" also takes off what the window's noise writes cost at the `none` windows' rate ({:.2} ms \
         of apiserver CPU a write).\n",
        fmt_opt(api_cpu_metric_start, 1),
        fmt_opt(api_cpu_metric_end, 1),
        api_cpu_metric_end.zip(api_cpu_metric_start).map_or(f64::NAN, |(e, s)| e - s),
        humantime::format_duration(Duration::from_secs(settle.as_secs())),
        per_write * 1000.0,
    );
    let _ = writeln!(
        md,
        "| window | n | noise writes/min | apiserver CPU s/min | Δ | Δ resume | Δ steady | net of noise, s/min | Δ | \
         etcd CPU s/min | Δ |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let none_net = kind_rows[0].api_net;
    for r in &kind_rows {
        let none = r.kind == Who::None;
        let d = |x: f64, base: f64| if none { "".to_string() } else { format!("{:+.2}", x - base) };
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.2} | {} | {} | {} | {:.2} | {} | {:.2} | {} |",
            r.kind.name(),
            r.n,
            r.noise,
            r.api,
            d(r.api, none_api),
            d(r.api_resume, none_resume),
            d(r.api_steady, none_steady),
            r.api_net,
            d(r.api_net, none_net),
            r.etcd,
            d(r.etcd, none_etcd),
        );
    }
    let _ = writeln!(
        md,
        "\n| window | the audit's own CPU s/min | its requests/min | lists/min | cluster-wide lists/min | runs/window | \
         full reads/window | namespace reads/window |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in kind_rows.iter().filter(|r| r.kind != Who::None) {
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.1} | {:.1} | {:.1} | {} | {} | {} |",
            r.kind.name(),
            r.own,
            r.requests,
            r.lists,
            r.lists_cluster,
            fmt_opt(r.runs, 0),
            fmt_opt(r.reads_cluster, 0),
            fmt_opt(r.reads_ns, 0),
        );
    }
    let _ = writeln!(md, "\n### Spec change → report (`{RULE}` on, then off; polled every 0.5 s)\n");
    let _ = writeln!(
        md,
        "| audit | changes measured | reflected | median s (of the reflected) | max s | not within 60 s | \
         cut by the window's end (after s) | not measured |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---|---:|");
    let mut lat = BTreeMap::new();
    for who in users {
        let (ok, late, cut, skipped) = latencies(who);
        let max = ok.iter().copied().fold(f64::NAN, f64::max);
        let cut_cell: Vec<String> = cut.iter().map(|s| format!("{s:.1}")).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {late} | {} {} | {skipped} |",
            who.name(),
            ok.len() + late,
            ok.len(),
            fmt_opt(Some(median(ok.clone())), 1),
            fmt_opt(Some(max), 1),
            cut.len(),
            if cut.is_empty() { String::new() } else { format!("({})", cut_cell.join(", ")) },
        );
        lat.insert(who, (ok, late, cut));
    }

    // Targets.
    let _ = writeln!(md, "\n### Targets (informational: the bench never fails on them)\n");
    let pass = |b: bool| if b { "PASS" } else { "FAIL" };
    let expected_reads = minutes_measured / (a.interval.as_secs_f64() / 60.0);
    let t1 = after_reads_cluster.map(|r| r <= expected_reads.ceil() + 1.0);
    let _ = writeln!(
        md,
        "- {} after's full reads ≈ minutes / interval: {} full reads in the windows, {:.1} min / {interval} = {:.1} \
         (pass: at most {:.0})",
        t1.map_or("n/a ", pass),
        fmt_opt(after_reads_cluster, 0),
        minutes_measured,
        expected_reads,
        expected_reads.ceil() + 1.0,
    );
    let allowance = after_reads_cluster.unwrap_or(0.0);
    let offenders: Vec<String> = after_cluster_lists_steady
        .iter()
        .filter(|(_, n)| **n as f64 > allowance)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    let after_counts = per_user.get(AFTER_USER).copied().unwrap_or_default();
    let _ = writeln!(
        md,
        "- {} after's lists otherwise namespace-scoped: cluster-wide first pages of namespaced resources outside \
         the resume periods, by resource, at most its full reads ({allowance:.0}): {:?}{}; in the resume periods: \
         {:?}; namespaced lists in all: {}",
        pass(offenders.is_empty()),
        after_cluster_lists_steady,
        if offenders.is_empty() { String::new() } else { format!(" — over: {}", offenders.join(", ")) },
        after_cluster_lists_settle,
        after_counts.lists_namespaced,
    );
    for who in users {
        let (ok, late, cut) = &lat[&who];
        let max = ok.iter().copied().fold(0.0, f64::max);
        // A change cut by the window's end after 15 s or more was not reflected within 15 s either.
        let good = !ok.is_empty() && *late == 0 && max <= 15.0 && cut.iter().all(|s| *s < 15.0);
        let _ = writeln!(
            md,
            "- {} {}: spec change reflected within 15 s: {} of {} measured, max {:.1} s{}",
            pass(good),
            who.name(),
            ok.iter().filter(|s| **s <= 15.0).count(),
            ok.len() + late,
            max,
            if who == Who::Before { " (not a target for the before; for comparison)" } else { "" },
        );
    }
    let _ = writeln!(
        md,
        "- {} after's peak RSS < 128 MiB: {:.1} MiB (VmHWM; before: {:.1} MiB, which includes the webhook's live view)",
        pass(after_hwm > 0 && mib(after_hwm) < 128.0),
        mib(after_hwm),
        mib(before_hwm),
    );
    let _ = writeln!(
        md,
        "\nNoise: 2 shared cores carry the apiserver, etcd, the noise writer (this process), the audit that runs \
         and whatever else the host does (load average {} at the end); compare a Δ with the spread of the \
         windows of one kind in raw.json before reading anything into it.{} The before's figures include the \
         webhook's live view (its watches), which `serve` keeps with or without the audit. A process resumed after \
         two windows stopped finds its watches closed and its Lease run out; what that costs is in the resume \
         column and is an artefact of the method.{}{}",
        loadavg(),
        if median(noise_stats.took.clone()) > a.noise.as_secs_f64() * 0.9 {
            format!(
                " The noise alone kept the apiserver busy (its rounds took a median {:.1} s, every {} asked): \
                 the audits' work displaced noise writes more than it added CPU, so read the net-of-noise column.",
                median(noise_stats.took.clone()),
                humantime::format_duration(a.noise)
            )
        } else {
            String::new()
        },
        if before_alive { "" } else { " **The before exited before the end.**" },
        if after_alive { "" } else { " **The after exited before the end.**" },
    );
    print!("\n{md}");
    std::fs::write(a.out.join("report.md"), &md).expect("report.md");

    let raw = json!({
        "when": when.to_string(),
        "commit": git_describe(),
        "args": {"minutes": a.minutes, "workloads": shape.workloads, "pods": shape.pods, "namespaces": shape.namespaces,
            "nodes": shape.nodes, "window_s": a.window.as_secs_f64(), "interval_s": a.interval.as_secs_f64(),
            "concurrency": a.concurrency, "noise_s": a.noise.as_secs_f64(), "change_s": a.change.as_secs_f64()},
        "before": {"binary": before_bin.display().to_string(), "vmhwm_kib": before_hwm, "rss_max_kib": before_rss_max,
            "alive_at_end": before_alive,
            "runs_total": counter(&before_m1, "ha_guard_audit_runs_total", &[]),
            "runs_at_warmup_end": counter(&before_m0, "ha_guard_audit_runs_total", &[])},
        "after": {"binary": after_bin.display().to_string(), "mode": after_mode, "args": after_args,
            "vmhwm_kib": after_hwm, "rss_max_kib": after_rss_max, "alive_at_end": after_alive,
            "runs_total": counter(&after_m1, "ha_guard_audit_runs_total", &[]),
            "runs_at_warmup_end": counter(&after_m0, "ha_guard_audit_runs_total", &[]),
            "reads_cluster_total": counter(&after_m1, "ha_guard_audit_reads_total", &[("scope", "cluster")]),
            "reads_namespace_total": counter(&after_m1, "ha_guard_audit_reads_total", &[("scope", "namespace")]),
            "reads_cluster_in_windows": after_reads_cluster, "reads_namespace_in_windows": after_reads_ns,
            "cluster_lists_steady": after_cluster_lists_steady, "cluster_lists_resume": after_cluster_lists_settle},
        "setup_s": {"workloads": workloads_took.as_secs_f64(), "pods": pods_took.as_secs_f64(), "warmup": warm_took.as_secs_f64(),
            "bench": bench_started.elapsed().as_secs_f64()},
        "apiserver_process_cpu_seconds_total": {"start": api_cpu_metric_start, "end": api_cpu_metric_end},
        "noise": {"rounds": noise_stats.rounds, "writes": noise_stats.writes, "errors": noise_stats.errors,
            "round_seconds": noise_stats.took, "first_error": noise_stats.first_error},
        "requests": {
            "not_2xx": failed.iter().map(|((u, r, v, c), n)| json!({"user": u, "resource": r, "verb": v, "code": c, "n": n})).collect::<Vec<_>>(),
            "by_user_resource_verb": by_verb.iter().map(|((u, r, v), n)| json!({"user": u, "resource": r, "verb": v, "n": n})).collect::<Vec<_>>(),
            "per_user": per_user.iter().map(|(u, c)| (u.to_string(), c.json())).collect::<serde_json::Map<_, _>>(),
            "warmup": warmup.iter().map(|(u, c)| (u.to_string(), c.json())).collect::<serde_json::Map<_, _>>(),
        },
        "windows": windows.iter().enumerate().map(|(i, w)| json!({
            "kind": w.kind.name(), "start_s": w.start, "end_s": w.end, "settle_end_s": w.settle,
            "apiserver_cpu_s": at(&samples, w.end).apiserver - at(&samples, w.start).apiserver,
            "apiserver_cpu_resume_s": at(&samples, w.settle).apiserver - at(&samples, w.start).apiserver,
            "etcd_cpu_s": at(&samples, w.end).etcd - at(&samples, w.start).etcd,
            "noise_writes": at(&samples, w.end).noise - at(&samples, w.start).noise,
            "before_cpu_s": at(&samples, w.end).before - at(&samples, w.start).before,
            "after_cpu_s": at(&samples, w.end).after - at(&samples, w.start).after,
            "runs": w.delta("ha_guard_audit_runs_total", &[]),
            "reads_cluster": w.delta("ha_guard_audit_reads_total", &[("scope", "cluster")]),
            "reads_namespace": w.delta("ha_guard_audit_reads_total", &[("scope", "namespace")]),
            "requests": per_window[i].iter().map(|(u, c)| (u.to_string(), c.json())).collect::<serde_json::Map<_, _>>(),
            "requests_resume": per_window_settle[i].iter().map(|(u, c)| (u.to_string(), c.json())).collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
        "changes": changes.iter().map(|c| json!({"t_s": c.t, "window": c.window, "audit": c.who.name(), "what": c.what,
            "namespace": c.ns, "deployment": c.name, "outcome": format!("{:?}", c.outcome),
            "latency_s": if let Outcome::Reflected(s) = c.outcome { Some(s) } else { None },
            "not_within_s": if let Outcome::NotWithin(s) = c.outcome { Some(s) } else { None },
            "skipped": if let Outcome::Skipped(why) = &c.outcome { Some(why.clone()) } else { None }})).collect::<Vec<_>>(),
        "samples": samples.iter().map(|s| json!([s.t, s.apiserver, s.etcd, s.before, s.after, s.before_rss, s.after_rss, s.noise])).collect::<Vec<_>>(),
        "samples_columns": ["t_s", "apiserver_cpu_s", "etcd_cpu_s", "before_cpu_s", "after_cpu_s", "before_rss_kib", "after_rss_kib", "noise_writes"],
    });
    std::fs::write(a.out.join("raw.json"), serde_json::to_string_pretty(&raw).unwrap()).expect("raw.json");
    eprintln!(
        "[audit-cost] {} and raw.json written; the audits' logs: {}, {}; the bench took {:.1?}",
        a.out.join("report.md").display(),
        before.log.display(),
        after.log.display(),
        bench_started.elapsed()
    );
    drop(client);
    let _ = cp.stop();
}

/// splitmix64, for a fixed shuffled order.
fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

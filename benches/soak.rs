//! Soak: two ha-guard replicas behind one webhook on the e2e control plane (`tests/support`,
//! `tests/e2e/control-plane`), under churn and faults for a configurable time. Not part of
//! `cargo test`; run it with
//!
//!     cargo bench --bench soak -- --duration 30m [--out DIR] [--writers 4]
//!
//! (`--profile dev` builds it and ha-guard without optimisation, reusing `cargo test`'s build:
//! what CI's 3-minute smoke does). benches/SOAK.md records a 30-minute run.
//!
//! The control plane is a whole one without kubelets (`ControlPlane::start_with_controllers`):
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, which plays the kubelets
//! of `--nodes` (51) Nodes over three zones. The writers' Deployments and StatefulSets get real
//! ReplicaSets and Pods, scheduled and Running; the HPA controller writes scales through the
//! webhook; deleted namespaces are emptied by the namespace controller. `--no-controllers` runs
//! etcd + kube-apiserver only, with three bare Nodes, as the harness first did.
//!
//! The setup is the chart's shape: replicas `a` and `b` serve the same certificate (a CA of the
//! harness, laid out as the kubelet mounts a TLS Secret), the same config file, and the apiserver
//! reaches them through one round-robin TCP balancer on loopback (kube-proxy's part). Each
//! replica watches the apiserver through a relay of its own, which the harness can cut. Beside
//! them the background audit runs as the chart runs it: `ha-guard reports --interval 30s
//! --debounce 1s` with the same config, as the chart's audit ServiceAccount (the chart's RBAC,
//! rendered by helm; the report CRDs), through a relay of its own too.
//!
//! Writers (tokio tasks, one kube client) each create a namespace, run scenarios in it, then
//! delete it (left to the namespace controller; without the controllers, emptied and finalized
//! as it would), and start over in a new one. Scenarios create, update, scale and delete Deployments,
//! StatefulSets, PDBs and HPAs with known answers: admitted ones, refused single objects
//! (`prestop-exceeds-grace`), refused second objects of pairs (`pdb-blocks-eviction` from either
//! side, `pdb-overlap`, a scale below a PDB's floor), `recreate-multi-replica` as the config
//! says, and now and then a pair written at the same instant (the documented window: either
//! outcome); the scale subresource of an HPA's target written as the HPA controller does, then
//! the HPA's floor raised (the controller scales to it through the webhook); a PDB edited to
//! other budgets (admitted) and to one that leaves no eviction (refused). With the controllers, a
//! drainer cordons a kwok node every 10 s, evicts its pods through the eviction API (PDBs may
//! refuse) and uncordons it. Before the second write of a pair the harness waits until every replica that is up
//! and watching would refuse it (a direct call to each), which is also how a replica whose watch
//! silently stopped would show.
//!
//! Faults, in turn, one every `--fault-every` after the last one ended ([`FAULTS`]): rotate the
//! serving certificate (then the balancer cuts its connections, so that the apiserver handshakes
//! with the new one), reload the config (`recreate-multi-replica` warn <-> deny, in the audit's
//! copy too), kill -9 replica `b` and start it again, cut replica `a`'s watch for `--cut-for`,
//! delete the steady namespace's report by hand (restored within 30 s, or the fault failed), kill
//! -9 the reports process and start another (it must lead again once the Lease runs out), pause
//! etcd (SIGSTOP for `--etcd-pause`, 30 s, then SIGCONT), restart the apiserver, take `pods` out of
//! the audit's ClusterRole and cut its watches (the steady report must carry an `error` result
//! within two intervals) then give it back (the error must go and the audit lead again). Replica
//! `a` is never killed: its RSS over the whole run is the memory series.
//!
//! The oracle: every write and its answer is logged (`writes.jsonl` in `--out`); a write whose
//! answer differs from the expected one is a wrong verdict unless a fault window was open
//! (replica `b` down, apiserver restarting, etcd paused, replica `a`'s view stale while its watch
//! is cut; the audit's faults open none: admission does not depend on it) or it
//! was a concurrent pair, counted apart by window. At checkpoints and at the end, the stored
//! objects of each namespace (kubectl) go through `ha-guard check --complete`: every deny finding
//! must be explained by such a write, else it is a wrong verdict too. Then, the writers paused,
//! every ha-guard report (each namespace not being deleted, and the cluster's) must equal what
//! `ha-guard audit --format json` says with the same config (rows: rule, result, kind, name)
//! within one audit interval (and 15 s for the audit's own read); the same at the end. The rotation and the reload
//! are done between writes (the writers pause), so they get no window: any failure there counts.
//! At the end, each replica's `ha_guard_cache_objects` must equal what the apiserver holds (no
//! leak from deleted namespaces), and replica `a`'s RSS must be flat over the last 2/3; the RSS
//! slope of every ha-guard process (both replicas, the reports process) after that warm-up is
//! printed (least squares, MiB an hour, each incarnation of a restarted one apart); no ha-guard
//! log may hold a "panicked" line, and kube-controller-manager's log no write an admission
//! webhook denied.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use support::reports::{REPORTS_NS, Reports, install_chart_rbac, install_report_crds, rows_of_audit, rows_of_report};
use support::*;

// --- options -------------------------------------------------------------------------------------

struct Options {
    duration: Duration,
    writers: usize,
    pace: Duration,
    fault_every: Duration,
    cut_for: Duration,
    checkpoint_every: Duration,
    out: PathBuf,
    /// kube-controller-manager, kube-scheduler and kwok with `nodes` Nodes over three zones
    /// (`ControlPlane::start_with_controllers`); off: etcd + kube-apiserver and three bare Nodes,
    /// the namespaces emptied and finalized by the writers.
    controllers: bool,
    nodes: usize,
    etcd_pause: Duration,
}

impl Options {
    fn parse() -> Options {
        let mut o = Options {
            duration: Duration::from_secs(30 * 60),
            writers: 4,
            pace: Duration::from_millis(250),
            fault_every: Duration::ZERO,
            cut_for: Duration::ZERO,
            checkpoint_every: Duration::ZERO,
            out: repo().join("target/soak"),
            controllers: true,
            nodes: 51,
            etcd_pause: Duration::ZERO,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut i = 0;
        let dur = |s: &str| humantime::parse_duration(s).unwrap_or_else(|e| usage(&format!("{s}: {e}")));
        while i < args.len() {
            let value = || args.get(i + 1).cloned().unwrap_or_else(|| usage(&format!("{} needs a value", args[i])));
            match args[i].as_str() {
                "--duration" => o.duration = dur(&value()),
                "--writers" => o.writers = value().parse().unwrap_or_else(|e| usage(&format!("--writers: {e}"))),
                "--pace" => o.pace = dur(&value()),
                "--fault-every" => o.fault_every = dur(&value()),
                "--cut-for" => o.cut_for = dur(&value()),
                "--etcd-pause" => o.etcd_pause = dur(&value()),
                "--checkpoint-every" => o.checkpoint_every = dur(&value()),
                "--out" => o.out = PathBuf::from(value()),
                "--nodes" => o.nodes = value().parse().unwrap_or_else(|e| usage(&format!("--nodes: {e}"))),
                "--no-controllers" => {
                    o.controllers = false;
                    i += 1;
                    continue;
                }
                // What `cargo bench` passes to every bench target.
                "--bench" => {
                    i += 1;
                    continue;
                }
                other => usage(&format!("unknown argument {other}")),
            }
            i += 2;
        }
        // Five rounds of faults in the run if each took no time (the slow ones make it fewer), five
        // checkpoints; the watch cut a minute, or less in a short run.
        if o.fault_every.is_zero() {
            o.fault_every = (o.duration / (5 * FAULTS.len() as u32 + 1)).max(Duration::from_secs(6));
        }
        if o.cut_for.is_zero() {
            o.cut_for = Duration::from_secs(60).min(o.fault_every * 9 / 10);
        }
        // etcd paused 30 s, less in a short run.
        if o.etcd_pause.is_zero() {
            o.etcd_pause = Duration::from_secs(30).min(o.fault_every * 3);
        }
        if o.checkpoint_every.is_zero() {
            o.checkpoint_every = (o.duration / 5).max(Duration::from_secs(30));
        }
        o
    }
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "soak: {problem}\nusage: cargo bench --bench soak -- [--duration 30m] [--writers 4] [--pace 250ms] \
         [--fault-every D] [--cut-for D] [--etcd-pause D] [--checkpoint-every D] [--out DIR] [--nodes 51] [--no-controllers]"
    );
    std::process::exit(2)
}

/// Printed at once, past any capture.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "[soak {}] {line}", clock());
}

fn clock() -> String {
    let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    format!("{:02}:{:02}:{:02}", (secs / 3600) % 24, (secs / 60) % 60, secs % 60)
}

// The Service stood in for: `support::balancer::Balancer`, round-robin, skipping a backend that
// refuses (a killed replica: kube-proxy would have dropped its endpoint), its connections cuttable.

// --- certificates and config ---------------------------------------------------------------------

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// A serving certificate and key for 127.0.0.1 from `ca`.
fn issue(ca: &ha_guard::server::certs::Ca) -> (String, String) {
    ca.issue_serving(
        &["localhost".into()],
        &[std::net::IpAddr::from([127, 0, 0, 1])],
        now() - time::Duration::hours(1),
        now() + time::Duration::days(7),
    )
    .expect("a serving certificate")
}

/// `cert` and `key` laid out in `dir` as the kubelet mounts a TLS Secret (`tls.crt ->
/// ..data/tls.crt`, `..data -> ..VERSION`, swapped with one rename): the same Secret in both
/// replicas' pods.
fn install_secret(dir: &Path, version: u32, ca: &ha_guard::server::certs::Ca, (cert, key): &(String, String)) {
    let payload = dir.join(format!("..v{version}"));
    std::fs::create_dir_all(&payload).expect("secret payload dir");
    std::fs::write(payload.join("tls.crt"), cert).expect("tls.crt");
    std::fs::write(payload.join("tls.key"), key).expect("tls.key");
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..v{version}"), &tmp).expect("..data_tmp");
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    if !dir.join("ca.crt").exists() {
        std::fs::write(dir.join("ca.crt"), &ca.cert_pem).expect("ca.crt");
        std::os::unix::fs::symlink("..data/tls.crt", dir.join("tls.crt")).expect("tls.crt link");
        std::os::unix::fs::symlink("..data/tls.key", dir.join("tls.key")).expect("tls.key link");
    }
    // The one before the previous: nothing reads it any more.
    if version > 2 {
        let _ = std::fs::remove_dir_all(dir.join(format!("..v{}", version - 2)));
    }
}

fn config_text(deny_recreate: bool) -> String {
    format!("rules:\n  recreate-multi-replica: {}\n", if deny_recreate { "deny" } else { "warn" })
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

// --- windows -------------------------------------------------------------------------------------

/// A fault window: from `from` to `to` (open while `None`), seconds since the start.
#[derive(Clone, Debug)]
struct Window {
    what: &'static str,
    from: f64,
    to: Option<f64>,
}

/// The fault windows, open and closed, and the run's clock.
struct Windows {
    started: Instant,
    all: Mutex<Vec<Window>>,
}

impl Windows {
    fn t(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn open(&self, what: &'static str) -> usize {
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        all.push(Window { what, from: self.t(), to: None });
        all.len() - 1
    }

    fn close(&self, id: usize) {
        let t = self.t();
        self.all.lock().unwrap_or_else(|p| p.into_inner())[id].to = Some(t);
    }

    /// The windows that overlap `[from, to]`.
    fn during(&self, from: f64, to: f64) -> Vec<&'static str> {
        let all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<&'static str> =
            all.iter().filter(|w| w.from <= to && w.to.is_none_or(|end| end >= from)).map(|w| w.what).collect();
        out.sort();
        out.dedup();
        out
    }
}

// --- writes and their answers --------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Allowed,
    Denied(&'static str),
    /// A concurrent pair: either.
    Either,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Admitted,
    Denied(String),
    /// Neither: the call failed (apiserver down, a timeout, ...), with the error.
    Failed(String),
}

/// One object, as the check's findings name them.
type Id = (String, String, String);

#[derive(Default)]
struct Tally {
    writes: u64,
    /// Writes whose call overlapped a fault window.
    writes_in_windows: u64,
    answered_as_expected: u64,
    denied_as_expected: BTreeMap<&'static str, u64>,
    concurrent_pairs: u64,
    /// Scale-subresource writes to a PDB's floor: warned, not refused, by design.
    scaled_below_floor: u64,
    /// Writes through the scale subresource of an HPA's target, and PDB edits.
    hpa_scales: u64,
    pdb_edits: u64,
    concurrent_both_admitted: u64,
    /// Answers other than expected inside fault windows, by window.
    in_window_mismatch: BTreeMap<String, u64>,
    /// Failed calls inside fault windows, by window.
    in_window_failed: BTreeMap<String, u64>,
    wrong_verdicts: Vec<String>,
    failed_outside: Vec<String>,
    /// The view of a replica that is up and watching did not converge in time.
    not_converged: Vec<String>,
    converged_ms: Vec<u64>,
    /// Objects admitted when they should not have been, inside a window (or a concurrent pair):
    /// the deny findings they cause at checkpoints are explained.
    excused: BTreeSet<Id>,
    /// Drains of kwok nodes done (cordoned, evicted, uncordoned), the pods evicted, evictions a
    /// PDB still refused after 10 s (429), evictions or cordons that failed otherwise.
    drains: u64,
    evicted: u64,
    eviction_refused: u64,
    eviction_unanswered: u64,
    drain_failed: Vec<String>,
}

struct Run {
    client: kube::Client,
    windows: Arc<Windows>,
    tally: Mutex<Tally>,
    log: Mutex<std::fs::File>,
    /// Held (read) by each write; taken (write) to rotate the certificate and cut the balancer,
    /// or to reload the config, between writes.
    pause: tokio::sync::RwLock<()>,
    /// `recreate-multi-replica` is deny (the config as last reloaded by both replicas).
    deny_recreate: AtomicBool,
    /// Replicas' webhook ports and whether each is up and watching now.
    replicas: [u16; 2],
    up: [AtomicBool; 2],
    watching: [AtomicBool; 2],
    ca_pem: String,
    stop: AtomicBool,
    /// Between a writer's writes.
    pace: Duration,
    /// Namespaces a writer could not finalize (apiserver down): retried at the end.
    unfinished: Mutex<Vec<String>>,
    /// The namespace controller runs: a deleted namespace is emptied and finalized by it.
    controllers: bool,
}

fn ar(kind: &str) -> ApiResource {
    match kind {
        "Deployment" => ApiResource::erase::<Deployment>(&()),
        "StatefulSet" => ApiResource::erase::<StatefulSet>(&()),
        "PodDisruptionBudget" => ApiResource::erase::<PodDisruptionBudget>(&()),
        "HorizontalPodAutoscaler" => ApiResource::erase::<HorizontalPodAutoscaler>(&()),
        other => panic!("no API for {other}"),
    }
}

/// Takes `pause` (the writers and the drainer wait), saying so every 30 s while a holder keeps it.
fn pause_writers<'a>(rt: &tokio::runtime::Runtime, run: &'a Run, why: &str) -> tokio::sync::RwLockWriteGuard<'a, ()> {
    let started = Instant::now();
    loop {
        if let Ok(guard) = rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), run.pause.write()).await })
        {
            return guard;
        }
        say(&format!("{why}: still waiting for the writers to pause after {:.0?}", started.elapsed()));
    }
}

/// How long a call made while holding `pause` may take (a webhook call is 10 s at most).
const CALL_TIMEOUT: Duration = Duration::from_secs(40);

/// `f` within [`CALL_TIMEOUT`], its error or the timeout said.
async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("{what}: no answer within {CALL_TIMEOUT:?}")),
    }
}

/// What a write does.
enum Op {
    Create(Value),
    Patch(&'static str, String, Value),
    Scale(&'static str, String, i64),
    Delete(&'static str, String),
}

impl Run {
    fn api(&self, kind: &str, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &ar(kind))
    }

    /// [`Run::call_once`], bounded: a call that hangs would hold `pause` for ever.
    async fn call(&self, ns: &str, op: &Op) -> Answer {
        tokio::time::timeout(CALL_TIMEOUT, self.call_once(ns, op))
            .await
            .unwrap_or_else(|_| Answer::Failed(format!("no answer within {CALL_TIMEOUT:?}")))
    }

    async fn call_once(&self, ns: &str, op: &Op) -> Answer {
        let result: Result<(), kube::Error> = match op {
            Op::Create(o) => {
                let kind = o["kind"].as_str().unwrap_or_default();
                match serde_json::from_value::<DynamicObject>(o.clone()) {
                    Ok(obj) => self.api(kind, ns).create(&PostParams::default(), &obj).await.map(drop),
                    Err(e) => return Answer::Failed(format!("not an object: {e}")),
                }
            }
            Op::Patch(kind, name, patch) => {
                self.api(kind, ns).patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.map(drop)
            }
            Op::Scale(kind, name, replicas) => self
                .api(kind, ns)
                .patch_scale(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": replicas}})))
                .await
                .map(drop),
            Op::Delete(kind, name) => self.api(kind, ns).delete(name, &DeleteParams::default()).await.map(drop),
        };
        match result {
            Ok(()) => Answer::Admitted,
            Err(kube::Error::Api(s))
                if s.code == 403 && s.message.contains("admission webhook \"validate.ha-guard.io\" denied") =>
            {
                Answer::Denied(s.message.clone())
            }
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    /// Sends `op` in `ns`, logs it and judges the answer against `expect`. True when admitted.
    async fn write(&self, ns: &str, op: Op, expect: Expect) -> bool {
        let _between_pauses = self.pause.read().await;
        self.write_unpaused(ns, op, expect).await
    }

    /// [`Run::write`] for a caller that holds `pause` already.
    async fn write_unpaused(&self, ns: &str, op: Op, expect: Expect) -> bool {
        let (verb, kind, name) = describe(&op);
        let from = self.windows.t();
        let answer = self.call(ns, &op).await;
        let to = self.windows.t();
        let windows = self.windows.during(from, to);
        self.judge(ns, verb, kind, &name, expect, &answer, &windows, from, to);
        answer == Answer::Admitted
    }

    #[allow(clippy::too_many_arguments)]
    fn judge(
        &self,
        ns: &str,
        verb: &str,
        kind: &str,
        name: &str,
        expect: Expect,
        answer: &Answer,
        windows: &[&'static str],
        from: f64,
        to: f64,
    ) {
        let what = format!("{verb} {kind} {ns}/{name}");
        let answer_text = match answer {
            Answer::Admitted => "admitted".to_string(),
            Answer::Denied(m) => format!("denied: {}", rules_in(m).join(",")),
            Answer::Failed(e) => format!("failed: {e}"),
        };
        let line = json!({"t": from, "took_ms": ((to - from) * 1000.0) as u64, "write": what,
            "expect": format!("{expect:?}"), "answer": answer_text, "windows": windows});
        let _ = writeln!(self.log.lock().unwrap_or_else(|p| p.into_inner()), "{line}");
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.writes += 1;
        t.writes_in_windows += u64::from(!windows.is_empty());
        let as_expected = match (expect, answer) {
            (Expect::Either, Answer::Admitted | Answer::Denied(_)) => true,
            (Expect::Allowed, Answer::Admitted) => true,
            (Expect::Denied(rule), Answer::Denied(m)) => m.contains(&format!("[{rule}] ")),
            _ => false,
        };
        if as_expected {
            t.answered_as_expected += 1;
            if let Expect::Denied(rule) = expect {
                *t.denied_as_expected.entry(rule).or_default() += 1;
            }
            return;
        }
        let at = format!("{what} at {from:.1}s: expected {expect:?}, {answer_text}");
        let in_window = windows.join("+");
        match answer {
            Answer::Failed(_) if windows.is_empty() => t.failed_outside.push(at),
            Answer::Failed(_) => *t.in_window_failed.entry(in_window).or_default() += 1,
            _ if windows.is_empty() => t.wrong_verdicts.push(at),
            _ => {
                *t.in_window_mismatch.entry(in_window).or_default() += 1;
                if *answer == Answer::Admitted {
                    t.excused.insert((kind.to_string(), ns.to_string(), name.to_string()));
                }
            }
        }
    }

    /// Waits until every replica that is up and watching would refuse `second` (a direct call to
    /// each): the first object of its pair has reached their views.
    async fn converged(&self, second: &Value, rule: &str) {
        let review = admission_review(second).to_string();
        let started = Instant::now();
        let mut pending: Vec<usize> = (0..2).collect();
        while !pending.is_empty() {
            pending.retain(|&r| {
                if !self.up[r].load(Ordering::SeqCst) || !self.watching[r].load(Ordering::SeqCst) {
                    return false;
                }
                // A blocking call of a few milliseconds, off the runtime's threads' async work.
                let answer = tokio::task::block_in_place(|| {
                    webhook_call(self.replicas[r], &self.ca_pem, None, None, "/validate", review.as_bytes())
                });
                !matches!(answer, Ok(Call::Answered { status: 200, ref body, .. }) if body.contains(&format!("[{rule}] ")))
            });
            if pending.is_empty() {
                break;
            }
            if started.elapsed() > Duration::from_secs(10) {
                let windows = self.windows.during(self.windows.t() - 10.0, self.windows.t());
                let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
                if windows.is_empty() {
                    t.not_converged.push(format!(
                        "replicas {pending:?} did not see the first of the pair of {} {} within 10 s",
                        second["kind"], second["metadata"]["name"]
                    ));
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.tally.lock().unwrap_or_else(|p| p.into_inner()).converged_ms.push(started.elapsed().as_millis() as u64);
    }
}

fn describe(op: &Op) -> (&'static str, &'static str, String) {
    match op {
        Op::Create(o) => (
            "create",
            match o["kind"].as_str() {
                Some("Deployment") => "Deployment",
                Some("StatefulSet") => "StatefulSet",
                Some("PodDisruptionBudget") => "PodDisruptionBudget",
                Some("HorizontalPodAutoscaler") => "HorizontalPodAutoscaler",
                _ => "?",
            },
            o["metadata"]["name"].as_str().unwrap_or("?").to_string(),
        ),
        Op::Patch(kind, name, _) => ("update", kind, name.clone()),
        Op::Scale(kind, name, _) => ("scale", kind, name.clone()),
        Op::Delete(kind, name) => ("delete", kind, name.clone()),
    }
}

/// The `[rule-id]`s in a denial's message.
fn rules_in(message: &str) -> Vec<String> {
    let mut out: Vec<String> = message
        .match_indices('[')
        .filter_map(|(i, _)| {
            let rest = &message[i + 1..];
            let end = rest.find(']')?;
            let id = &rest[..end];
            (!id.is_empty() && id.chars().all(|c| c.is_ascii_lowercase() || c == '-')).then(|| id.to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

// --- the writers ---------------------------------------------------------------------------------

/// xorshift64*: the scenario mix needs a cheap, seedable sequence, not a random-number crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn statefulset(ns: &str, name: &str, replicas: i64) -> Value {
    let mut s = spread_out(deployment(ns, name, replicas));
    s["kind"] = json!("StatefulSet");
    s["spec"]["serviceName"] = json!(name);
    s
}

fn image(tag: &str) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": format!("nginx:{tag}")}]}}}})
}

async fn writer(run: Arc<Run>, w: usize, scenarios_per_namespace: u64) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1));
    let mut generation = 0u64;
    while !run.stop.load(Ordering::SeqCst) {
        let ns = format!("soak-w{w}-g{generation}");
        generation += 1;
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"ha-guard-soak": "true"}}});
        let created = Api::<Namespace>::all(run.client.clone())
            .create(&PostParams::default(), &serde_json::from_value(namespace).expect("a namespace"))
            .await;
        if created.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        for n in 0..scenarios_per_namespace {
            if run.stop.load(Ordering::SeqCst) {
                break;
            }
            let app = format!("app-{n}");
            match rng.below(12) {
                0 | 1 => good_app(&run, &ns, &app).await,
                2 => good_statefulset(&run, &ns, &app).await,
                3 => pair_workload_first(&run, &ns, &app).await,
                4 => pair_pdb_first(&run, &ns, &app).await,
                5 => scale_below_floor(&run, &ns, &app).await,
                6 => overlap(&run, &ns, &app).await,
                7 => recreate(&run, &ns, &app).await,
                8 => refused_single(&run, &ns, &app).await,
                9 => hpa_scales(&run, &ns, &app).await,
                10 => pdb_edits(&run, &ns, &app).await,
                _ => concurrent_pair(&run, &ns, &app).await,
            }
        }
        if run.stop.load(Ordering::SeqCst) {
            // Kept for the last checkpoint; deleted after it.
            run.unfinished.lock().unwrap_or_else(|p| p.into_inner()).push(ns);
            break;
        }
        delete_namespace(&run, &ns).await;
    }
}

async fn pace(run: &Run) {
    tokio::time::sleep(run.pace).await;
}

/// A 2-replica Deployment spread out, a PDB over it (maxUnavailable 1), an HPA (2..4); updated,
/// scaled, and deleted: all admitted.
async fn good_app(run: &Run, ns: &str, app: &str) {
    if !run.write(ns, Op::Create(spread_out(deployment(ns, app, 2))), Expect::Allowed).await {
        return;
    }
    pace(run).await;
    let pdb_ok = run.write(ns, Op::Create(pdb(ns, app, app, json!({"maxUnavailable": 1}))), Expect::Allowed).await;
    pace(run).await;
    let hpa_ok = run.write(ns, Op::Create(hpa(ns, app, app, 2, 4)), Expect::Allowed).await;
    pace(run).await;
    run.write(ns, Op::Patch("Deployment", app.to_string(), image("1.28")), Expect::Allowed).await;
    pace(run).await;
    run.write(ns, Op::Scale("Deployment", app.to_string(), 3), Expect::Allowed).await;
    pace(run).await;
    if hpa_ok {
        let bounds = json!({"spec": {"minReplicas": 3, "maxReplicas": 6}});
        run.write(ns, Op::Patch("HorizontalPodAutoscaler", app.to_string(), bounds), Expect::Allowed).await;
        pace(run).await;
        run.write(ns, Op::Delete("HorizontalPodAutoscaler", app.to_string()), Expect::Allowed).await;
        pace(run).await;
    }
    if pdb_ok {
        run.write(ns, Op::Delete("PodDisruptionBudget", app.to_string()), Expect::Allowed).await;
        pace(run).await;
    }
    run.write(ns, Op::Delete("Deployment", app.to_string()), Expect::Allowed).await;
    pace(run).await;
}

async fn good_statefulset(run: &Run, ns: &str, app: &str) {
    if !run.write(ns, Op::Create(statefulset(ns, app, 3)), Expect::Allowed).await {
        return;
    }
    pace(run).await;
    let pdb_ok = run.write(ns, Op::Create(pdb(ns, app, app, json!({"maxUnavailable": 1}))), Expect::Allowed).await;
    pace(run).await;
    run.write(ns, Op::Patch("StatefulSet", app.to_string(), image("1.28")), Expect::Allowed).await;
    pace(run).await;
    run.write(ns, Op::Scale("StatefulSet", app.to_string(), 4), Expect::Allowed).await;
    pace(run).await;
    if pdb_ok {
        run.write(ns, Op::Delete("PodDisruptionBudget", app.to_string()), Expect::Allowed).await;
        pace(run).await;
    }
    run.write(ns, Op::Delete("StatefulSet", app.to_string()), Expect::Allowed).await;
    pace(run).await;
}

/// A 1-replica Deployment, then a PDB with minAvailable 1 over it: the PDB is refused.
async fn pair_workload_first(run: &Run, ns: &str, app: &str) {
    if !run.write(ns, Op::Create(deployment(ns, app, 1)), Expect::Allowed).await {
        return;
    }
    let second = pdb(ns, app, app, json!({"minAvailable": 1}));
    run.converged(&second, "pdb-blocks-eviction").await;
    run.write(ns, Op::Create(second), Expect::Denied("pdb-blocks-eviction")).await;
    pace(run).await;
    run.write(ns, Op::Delete("Deployment", app.to_string()), Expect::Allowed).await;
    pace(run).await;
}

/// A PDB with minAvailable 1, then a 1-replica Deployment under it: the Deployment is refused.
async fn pair_pdb_first(run: &Run, ns: &str, app: &str) {
    if !run.write(ns, Op::Create(pdb(ns, app, app, json!({"minAvailable": 1}))), Expect::Allowed).await {
        return;
    }
    let second = deployment(ns, app, 1);
    run.converged(&second, "pdb-blocks-eviction").await;
    run.write(ns, Op::Create(second), Expect::Denied("pdb-blocks-eviction")).await;
    pace(run).await;
    run.write(ns, Op::Delete("PodDisruptionBudget", app.to_string()), Expect::Allowed).await;
    pace(run).await;
}

/// A 2-replica Deployment under a PDB with minAvailable 1 (admitted); its spec.replicas updated to
/// 1: refused. Then scaled to 1 through the scale subresource: admitted with a warning, by design
/// (it is how the HPA controller and `kubectl scale` write; README), so the stored pair is
/// explained at the checkpoints; then scaled back.
async fn scale_below_floor(run: &Run, ns: &str, app: &str) {
    if !run.write(ns, Op::Create(spread_out(deployment(ns, app, 2))), Expect::Allowed).await {
        return;
    }
    pace(run).await;
    let budget = pdb(ns, app, app, json!({"minAvailable": 1}));
    if run.write(ns, Op::Create(budget), Expect::Allowed).await {
        // Wait until the views have the PDB: a 1-replica Deployment of this app is refused.
        run.converged(&deployment(ns, app, 1), "pdb-blocks-eviction").await;
        let one = json!({"spec": {"replicas": 1}});
        run.write(ns, Op::Patch("Deployment", app.to_string(), one), Expect::Denied("pdb-blocks-eviction")).await;
        pace(run).await;
        {
            let mut t = run.tally.lock().unwrap_or_else(|p| p.into_inner());
            t.scaled_below_floor += 1;
            t.excused.insert(("Deployment".into(), ns.into(), app.into()));
        }
        if run.write(ns, Op::Scale("Deployment", app.to_string(), 1), Expect::Allowed).await {
            pace(run).await;
            run.write(ns, Op::Scale("Deployment", app.to_string(), 2), Expect::Allowed).await;
        }
        pace(run).await;
        run.write(ns, Op::Delete("PodDisruptionBudget", app.to_string()), Expect::Allowed).await;
        pace(run).await;
    }
    run.write(ns, Op::Delete("Deployment", app.to_string()), Expect::Allowed).await;
    pace(run).await;
}

/// Two PDBs over the same Deployment: the second is refused.
async fn overlap(run: &Run, ns: &str, app: &str) {
    if !run.write(ns, Op::Create(spread_out(deployment(ns, app, 3))), Expect::Allowed).await {
        return;
    }
    pace(run).await;
    if run.write(ns, Op::Create(pdb(ns, app, app, json!({"maxUnavailable": 1}))), Expect::Allowed).await {
        let second = pdb(ns, &format!("{app}-again"), app, json!({"maxUnavailable": 1}));
        run.converged(&second, "pdb-overlap").await;
        run.write(ns, Op::Create(second), Expect::Denied("pdb-overlap")).await;
        pace(run).await;
        run.write(ns, Op::Delete("PodDisruptionBudget", app.to_string()), Expect::Allowed).await;
        pace(run).await;
    }
    run.write(ns, Op::Delete("Deployment", app.to_string()), Expect::Allowed).await;
    pace(run).await;
}

/// A 2-replica Recreate Deployment: admitted while the config says warn, refused when deny.
async fn recreate(run: &Run, ns: &str, app: &str) {
    let obj = merge(spread_out(deployment(ns, app, 2)), json!({"spec": {"strategy": {"type": "Recreate"}}}));
    // The config cannot change while this write is in flight (a reload takes `pause`).
    let admitted = {
        let _between_reloads = run.pause.read().await;
        let expect = if run.deny_recreate.load(Ordering::SeqCst) {
            Expect::Denied("recreate-multi-replica")
        } else {
            Expect::Allowed
        };
        run.write_unpaused(ns, Op::Create(obj), expect).await
    };
    if admitted {
        pace(run).await;
        run.write(ns, Op::Delete("Deployment", app.to_string()), Expect::Allowed).await;
    }
    pace(run).await;
}

/// A Deployment whose preStop outlasts its grace period: refused whatever the view.
async fn refused_single(run: &Run, ns: &str, app: &str) {
    run.write(ns, Op::Create(slow_prestop(deployment(ns, app, 1))), Expect::Denied("prestop-exceeds-grace")).await;
    pace(run).await;
}

/// A 2-replica Deployment under a PDB (maxUnavailable 1) and an HPA (2..5); the HPA's target,
/// read from the HPA, scaled through its scale subresource as the HPA controller writes (4, 5,
/// 3): admitted; then the HPA's floor raised to 4: admitted, and the HPA controller (when it
/// runs) scales the target to it through the webhook. Left in place until the namespace goes, so
/// that the controller's sync (every 15 s) comes by.
async fn hpa_scales(run: &Run, ns: &str, app: &str) {
    if !run.write(ns, Op::Create(spread_out(deployment(ns, app, 2))), Expect::Allowed).await {
        return;
    }
    pace(run).await;
    run.write(ns, Op::Create(pdb(ns, app, app, json!({"maxUnavailable": 1}))), Expect::Allowed).await;
    pace(run).await;
    if !run.write(ns, Op::Create(hpa(ns, app, app, 2, 5)), Expect::Allowed).await {
        return;
    }
    pace(run).await;
    let target = Api::<HorizontalPodAutoscaler>::namespaced(run.client.clone(), ns)
        .get(app)
        .await
        .ok()
        .and_then(|h| h.spec)
        .map(|s| s.scale_target_ref);
    if let Some(target) = target {
        let kind = if target.kind == "StatefulSet" { "StatefulSet" } else { "Deployment" };
        for replicas in [4, 5, 3] {
            run.write(ns, Op::Scale(kind, target.name.clone(), replicas), Expect::Allowed).await;
            run.tally.lock().unwrap_or_else(|p| p.into_inner()).hpa_scales += 1;
            pace(run).await;
        }
    }
    let floor = json!({"spec": {"minReplicas": 4}});
    run.write(ns, Op::Patch("HorizontalPodAutoscaler", app.to_string(), floor), Expect::Allowed).await;
    pace(run).await;
}

/// A 3-replica Deployment under a PDB (maxUnavailable 1), the PDB edited as its owners would: to
/// minAvailable 2, to minAvailable 50 % (admitted), to minAvailable 3, which leaves no eviction
/// possible (refused); then deleted.
async fn pdb_edits(run: &Run, ns: &str, app: &str) {
    if !run.write(ns, Op::Create(spread_out(deployment(ns, app, 3))), Expect::Allowed).await {
        return;
    }
    pace(run).await;
    if run.write(ns, Op::Create(pdb(ns, app, app, json!({"maxUnavailable": 1}))), Expect::Allowed).await {
        pace(run).await;
        for budget in [json!({"maxUnavailable": null, "minAvailable": 2}), json!({"minAvailable": "50%"})] {
            run.write(ns, Op::Patch("PodDisruptionBudget", app.to_string(), json!({"spec": budget})), Expect::Allowed)
                .await;
            run.tally.lock().unwrap_or_else(|p| p.into_inner()).pdb_edits += 1;
            pace(run).await;
        }
        // The Deployment has long reached the views; waited for as the pairs are, all the same.
        run.converged(&pdb(ns, app, app, json!({"minAvailable": 3})), "pdb-blocks-eviction").await;
        let all = json!({"spec": {"minAvailable": 3}});
        run.write(ns, Op::Patch("PodDisruptionBudget", app.to_string(), all), Expect::Denied("pdb-blocks-eviction"))
            .await;
        run.tally.lock().unwrap_or_else(|p| p.into_inner()).pdb_edits += 1;
        pace(run).await;
        run.write(ns, Op::Delete("PodDisruptionBudget", app.to_string()), Expect::Allowed).await;
        pace(run).await;
    }
    run.write(ns, Op::Delete("Deployment", app.to_string()), Expect::Allowed).await;
    pace(run).await;
}

/// Drains kwok nodes in turn, one every 10 s, as `kubectl drain` does: cordoned, each pod on it
/// evicted through the eviction API (a PDB's refusal, 429, retried for 10 s), uncordoned 3 s
/// later. Neither Nodes nor evictions go through ha-guard: what it answers is the writes the
/// evictions cause (the controllers' replacements are Pods, not judged either); what the drains
/// test is the views and reports under the churn, and that nothing refuses the controllers.
async fn drainer(run: Arc<Run>, nodes: Vec<String>) {
    let mut turn = 0usize;
    while !run.stop.load(Ordering::SeqCst) {
        for _ in 0..20 {
            if run.stop.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let node = &nodes[turn % nodes.len()];
        turn += 1;
        let from = run.windows.t();
        let (evicted, refused, unanswered, mut failed) = drain(&run, node).await;
        let line = json!({"t": from, "took_ms": ((run.windows.t() - from) * 1000.0) as u64, "drain": node,
            "evicted": evicted, "refused": refused, "unanswered": unanswered, "failed": failed});
        let _ = writeln!(run.log.lock().unwrap_or_else(|p| p.into_inner()), "{line}");
        let windows = run.windows.during(from, run.windows.t());
        let mut t = run.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.drains += 1;
        t.evicted += evicted;
        t.eviction_refused += refused;
        t.eviction_unanswered += unanswered;
        if windows.is_empty() {
            t.drain_failed.append(&mut failed);
        }
    }
}

/// How long an eviction may take before the drain gives up on that pod.
const EVICTION_TIMEOUT: Duration = Duration::from_secs(10);

/// One drain of `node`: (pods evicted, evictions still refused, evictions unanswered, failures).
async fn drain(run: &Run, node: &str) -> (u64, u64, u64, Vec<String>) {
    let nodes = Api::<Node>::all(run.client.clone());
    let (mut evicted, mut refused, mut unanswered, mut failed) = (0, 0, 0, Vec::new());
    let cordon = |on: bool| json!({"spec": {"unschedulable": on}});
    {
        let _between_pauses = run.pause.read().await;
        if let Err(e) = bounded("cordon", nodes.patch(node, &PatchParams::default(), &Patch::Merge(cordon(true)))).await
        {
            failed.push(format!("cordon {node}: {e}"));
            return (0, 0, 0, failed);
        }
    }
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let pods = bounded("list", Api::<Pod>::all(run.client.clone()).list(&on_node)).await;
    match pods {
        Ok(pods) => {
            for p in pods {
                let (ns, name) = (p.metadata.namespace.unwrap_or_default(), p.metadata.name.unwrap_or_default());
                let api = Api::<Pod>::namespaced(run.client.clone(), &ns);
                let started = Instant::now();
                loop {
                    let answer = {
                        let _between_pauses = run.pause.read().await;
                        tokio::time::timeout(EVICTION_TIMEOUT, api.evict(&name, &EvictParams::default())).await
                    };
                    match answer {
                        // Seen with the steady namespace's pod (a PDB that lets none go): the
                        // apiserver holds the eviction instead of answering 429. Counted apart.
                        Err(_) => unanswered += 1,
                        Ok(Ok(_)) => evicted += 1,
                        Ok(Err(kube::Error::Api(s)))
                            if s.code == 429 && started.elapsed() < Duration::from_secs(10) =>
                        {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                        Ok(Err(kube::Error::Api(s))) if s.code == 429 => refused += 1,
                        // Gone already, or its namespace is being deleted.
                        Ok(Err(kube::Error::Api(s)))
                            if s.code == 404 || s.code == 403 && s.message.contains("terminat") => {}
                        Ok(Err(e)) => failed.push(format!("evict {ns}/{name} from {node}: {e}")),
                    }
                    break;
                }
            }
        }
        Err(e) => failed.push(format!("list the pods of {node}: {e}")),
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Uncordoned whatever happened (retried through an apiserver restart): a node left cordoned
    // would shrink the cluster for the rest of the run.
    let started = Instant::now();
    loop {
        let answer = {
            let _between_pauses = run.pause.read().await;
            bounded("uncordon", nodes.patch(node, &PatchParams::default(), &Patch::Merge(cordon(false)))).await
        };
        match answer {
            Ok(_) => break,
            Err(e) if started.elapsed() > Duration::from_secs(180) => {
                failed.push(format!("uncordon {node}: {e}"));
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    (evicted, refused, unanswered, failed)
}

/// A 1-replica Deployment and a PDB with minAvailable 1 over it, written at the same instant:
/// neither may see the other (the documented window), so either answer goes; if both are
/// admitted the check at the next checkpoint finds the pair, explained by this write.
async fn concurrent_pair(run: &Run, ns: &str, app: &str) {
    let (a, b) = tokio::join!(
        run.write(ns, Op::Create(deployment(ns, app, 1)), Expect::Either),
        run.write(ns, Op::Create(pdb(ns, app, app, json!({"minAvailable": 1}))), Expect::Either),
    );
    {
        let mut t = run.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.concurrent_pairs += 1;
        if a && b {
            t.concurrent_both_admitted += 1;
            t.excused.insert(("Deployment".into(), ns.into(), app.into()));
            t.excused.insert(("PodDisruptionBudget".into(), ns.into(), app.into()));
        }
    }
    pace(run).await;
    if b {
        run.write(ns, Op::Delete("PodDisruptionBudget", app.to_string()), Expect::Allowed).await;
        pace(run).await;
    }
    if a {
        run.write(ns, Op::Delete("Deployment", app.to_string()), Expect::Allowed).await;
        pace(run).await;
    }
}

/// The namespace deleted. With the controllers, the namespace controller empties and finalizes
/// it (a real namespace deletion: its Pods, ReplicaSets, ServiceAccount and ConfigMap too);
/// without, what it would do is done here: what is left in it deleted, the `kubernetes` finalizer
/// dropped through the finalize subresource.
async fn delete_namespace(run: &Run, ns: &str) {
    let _between_pauses = run.pause.read().await;
    let namespaces = Api::<Namespace>::all(run.client.clone());
    let mut done = bounded("delete", namespaces.delete(ns, &DeleteParams::default())).await.is_ok();
    if run.controllers {
        // Deleted unless it is still there and not being deleted (or that cannot be known).
        let deleting = match bounded("get", namespaces.get_opt(ns)).await {
            Ok(Some(n)) => n.metadata.deletion_timestamp.is_some(),
            Ok(None) => true,
            Err(_) => false,
        };
        if !done && !deleting {
            run.unfinished.lock().unwrap_or_else(|p| p.into_inner()).push(ns.to_string());
        }
        return;
    }
    for kind in ["HorizontalPodAutoscaler", "PodDisruptionBudget", "StatefulSet", "Deployment"] {
        let api = run.api(kind, ns);
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                for o in list {
                    done &= api.delete(&o.metadata.name.unwrap_or_default(), &DeleteParams::default()).await.is_ok();
                }
            }
            Err(_) => done = false,
        }
    }
    done = done && finalize(run, ns).await;
    if !done {
        run.unfinished.lock().unwrap_or_else(|p| p.into_inner()).push(ns.to_string());
    }
}

async fn finalize(run: &Run, ns: &str) -> bool {
    let namespaces = Api::<Namespace>::all(run.client.clone());
    let Ok(mut current) = namespaces.get(ns).await else { return true };
    if let Some(spec) = current.spec.as_mut() {
        spec.finalizers = Some(Vec::new());
    }
    namespaces.replace_subresource("finalize", ns, &PostParams::default(), &current).await.is_ok()
}

// --- checkpoints: the stored objects against the check ---------------------------------------------

#[derive(Default, Debug)]
struct Checked {
    namespaces: usize,
    objects: usize,
    deny_findings: usize,
    explained: usize,
    unexplained: Vec<String>,
}

fn checkpoint(cp: &ControlPlane, run: &Run, dir: &Path, label: &str) -> Checked {
    let mut out = Checked::default();
    let list = cp.kubectl(&["get", "namespaces", "-l", "ha-guard-soak=true", "-o", "json"]);
    if !list.ok() {
        return out;
    }
    let config = dir.join("check-config.yaml");
    // The check judges with recreate-multi-replica at warn: Recreate Deployments admitted while
    // the config said warn stay stored (the config's deny phase is judged write by write).
    write_atomically(&config, &config_text(false));
    for ns in list.json()["items"].as_array().cloned().unwrap_or_default() {
        let name = ns["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if ns["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let dump = cp.kubectl(&[
            "get",
            "deployments,statefulsets,poddisruptionbudgets,horizontalpodautoscalers",
            "-n",
            &name,
            "-o",
            "json",
        ]);
        if !dump.ok() {
            continue;
        }
        let items = dump.json()["items"].as_array().map_or(0, Vec::len);
        let file = dir.join(format!("checkpoint-{label}-{name}.json"));
        std::fs::write(&file, &dump.stdout).expect("dump");
        let check = std::process::Command::new(env!("CARGO_BIN_EXE_ha-guard"))
            // A namespace the writers have not filled yet dumps an empty List: zero objects is
            // a valid checkpoint here, not a mistyped path.
            .args(["check", "--complete", "--allow-empty", "--format", "json", "--namespace", &name, "--config"])
            .arg(&config)
            .arg("-f")
            .arg(&file)
            .output()
            .expect("ha-guard check");
        let report: Value = serde_json::from_slice(&check.stdout).unwrap_or_else(|e| {
            panic!("check of {}: not JSON ({e}): {}", file.display(), String::from_utf8_lossy(&check.stderr))
        });
        out.namespaces += 1;
        out.objects += items;
        let tally = run.tally.lock().unwrap_or_else(|p| p.into_inner());
        for f in report["findings"].as_array().cloned().unwrap_or_default() {
            if f["action"] != "deny" {
                continue;
            }
            out.deny_findings += 1;
            let id = |v: &Value| -> Id {
                (
                    v["kind"].as_str().unwrap_or_default().to_string(),
                    v["namespace"].as_str().unwrap_or_default().to_string(),
                    v["name"].as_str().unwrap_or_default().to_string(),
                )
            };
            let mut involved = vec![id(&f)];
            involved.extend(f["related"].as_array().into_iter().flatten().map(id));
            if involved.iter().any(|i| tally.excused.contains(i)) {
                out.explained += 1;
            } else {
                out.unexplained.push(format!("[{}] {}/{}: {}", f["rule"], f["namespace"], f["name"], f["message"]));
            }
        }
        if out.deny_findings == 0 {
            let _ = std::fs::remove_file(&file);
        }
    }
    out
}

// --- the background audit: reports against `ha-guard audit` ----------------------------------------

/// `ha-guard reports --interval`, as the chart's default is 5m: short enough that a soak sees many
/// full reads, and what "within one interval" is measured against.
const AUDIT_INTERVAL: Duration = Duration::from_secs(30);

/// A namespace outside the writers' churn whose report always has a finding (a 1-replica
/// Deployment under a PDB of minAvailable 1, stored before the webhook is registered): the report
/// the faults delete, and where the RBAC fault's error result is looked for.
const STEADY_NS: &str = "soak-steady";

/// A kubeconfig of the chart's audit ServiceAccount (`ha-guard-audit`), its token valid for
/// `valid` (the soak's length and more: a token of `token_kubeconfig` lasts an hour).
fn audit_kubeconfig(cp: &ControlPlane, valid: Duration) -> Result<PathBuf, String> {
    let duration = format!("--duration={}s", valid.as_secs());
    let token = cp.kubectl(&["-n", REPORTS_NS, "create", "token", "ha-guard-audit", &duration]);
    if !token.ok() {
        return Err(format!("create token: {}", token.output()));
    }
    Ok(cp.token_kubeconfig(token.stdout.trim(), &cp.dir().join("ha-guard-audit.kubeconfig")))
}

/// The reports process as the chart runs it: `--interval 30s --debounce 1s`, the config file the
/// replicas read, as the chart's audit ServiceAccount, through `relay` (its watches can be cut).
fn start_reports(cp: &ControlPlane, n: usize, kubeconfig: &Path, config: &Path) -> Reports {
    let interval = format!("--interval={}s", AUDIT_INTERVAL.as_secs());
    let config = format!("--config={}", config.display());
    Reports::start(cp, &format!("audit-{n}"), kubeconfig, &[&interval, &config])
}

/// ha-guard's reports (rows: namespace, rule, result, kind, name) against `ha-guard audit --format
/// json` with the same config, in every namespace that is not being deleted and at cluster scope:
/// the namespaces and rows compared, or the differences.
fn reports_vs_audit(cp: &ControlPlane, config: &Path) -> Result<(usize, usize), String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["audit", "--format", "json", "--config"])
        .arg(config)
        .env("KUBECONFIG", cp.kubeconfig())
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("ha-guard audit: {e}"))?;
    let audit: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("ha-guard audit: not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)))?;
    if !audit["findings"].is_array() {
        return Err(format!("ha-guard audit: no findings: {audit}"));
    }
    let namespaces = cp.kubectl(&["get", "namespaces", "-o", "json"]);
    let reports = cp.kubectl(&["get", "policyreports.wgpolicyk8s.io", "-A", "-o", "json"]);
    let cluster = cp.kubectl(&["get", "clusterpolicyreports.wgpolicyk8s.io", "-o", "json"]);
    if !namespaces.ok() || !reports.ok() || !cluster.ok() {
        return Err("kubectl get failed".into());
    }
    let ours = |list: &Kubectl| -> BTreeMap<String, Value> {
        list.json()["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["metadata"]["name"] == "ha-guard")
            .map(|r| (r["metadata"]["namespace"].as_str().unwrap_or_default().to_string(), r.clone()))
            .collect()
    };
    let mut stored = ours(&reports);
    stored.extend(ours(&cluster));
    let mut scopes: Vec<String> = namespaces.json()["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| !n["metadata"]["deletionTimestamp"].is_string())
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    scopes.push(String::new());
    let (mut rows, mut differ) = (0, Vec::new());
    for ns in &scopes {
        let want = rows_of_audit(&audit, ns);
        let got = stored.get(ns).map(rows_of_report).unwrap_or_default();
        rows += want.len();
        if want != got {
            let missing: Vec<_> = want.difference(&got).take(3).collect();
            let extra: Vec<_> = got.difference(&want).take(3).collect();
            differ.push(format!("{ns:?}: missing {missing:?}, not in the audit {extra:?}"));
        }
    }
    if differ.is_empty() {
        Ok((scopes.len(), rows))
    } else {
        // The first three scopes: a kind the audit cannot follow shows in every one.
        Err(format!("{} scopes differ: {}", differ.len(), differ[..differ.len().min(3)].join("; ")))
    }
}

/// A checkpoint of the reports: the writers paused, the reports must equal the audit within one
/// interval (and 15 s for the audit's own read): how long they took, or how they still differ.
fn reports_checkpoint(cp: &ControlPlane, run: &Run, rt: &tokio::runtime::Runtime, config: &Path) -> ReportsCheck {
    let _paused = pause_writers(rt, run, "a reports checkpoint");
    let started = Instant::now();
    let mut last = Err(String::new());
    while started.elapsed() < AUDIT_INTERVAL + Duration::from_secs(15) {
        last = reports_vs_audit(cp, config);
        if last.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    ReportsCheck { at: run.windows.t(), took: started.elapsed(), result: last }
}

struct ReportsCheck {
    at: f64,
    took: Duration,
    /// Namespaces (and cluster scope) and rows compared, or the differences left.
    result: Result<(usize, usize), String>,
}

// --- faults -------------------------------------------------------------------------------------

/// The faults, in turn.
const FAULTS: [&str; 9] = [
    "rotate the serving certificate, cut the balancer's connections",
    "reload the config",
    "kill -9 replica b, start it again",
    "cut replica a's watch",
    "delete a report by hand",
    "kill -9 the reports process, start another",
    "pause etcd",
    "restart the apiserver",
    "revoke the audit's list pods, cut its watches, restore",
];

/// About how long fault `i` of [`FAULTS`] takes, its recovery included (the slow ones as seen in
/// runs: an apiserver restart's watches ~60 s, the RBAC fault two audit intervals and a watch
/// retry of a minute).
fn fault_length(i: usize, o: &Options) -> Duration {
    match i {
        5 => Duration::from_secs(30),
        6 => o.etcd_pause + Duration::from_secs(20),
        7 => Duration::from_secs(60),
        8 => AUDIT_INTERVAL * 2 + Duration::from_secs(60),
        _ => Duration::ZERO,
    }
}

/// etcd stopped (SIGSTOP) for `for_`, then continued: the apiserver's storage hangs, then resumes.
fn pause_etcd(cp: &ControlPlane, for_: Duration) -> Result<(), String> {
    let pid = std::fs::read_to_string(cp.dir().join("etcd.pid")).map_err(|e| format!("etcd.pid: {e}"))?;
    let pid = pid.trim();
    let signal = |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, pid])
            .status()
            .map_err(|e| e.to_string())
            .and_then(|s| if s.success() { Ok(()) } else { Err(format!("kill {sig} {pid}: {s}")) })
    };
    signal("-STOP")?;
    std::thread::sleep(for_);
    signal("-CONT")
}

/// The steady namespace's report holds a result `result` (and is there).
fn steady_report_has(cp: &ControlPlane, result: &str) -> Result<(), String> {
    let r = support::reports::report(cp, STEADY_NS).ok_or("no report")?;
    let rows = rows_of_report(&r);
    if rows.iter().any(|row| row.2 == result) { Ok(()) } else { Err(format!("rows {rows:?}")) }
}

/// The reports process holds the Lease and its view has synced (`ha_guard_audit_leader` 1).
fn audit_leading(reports: &Reports) -> Result<(), String> {
    let (_, text) = http_get(reports.port, "/metrics")?;
    let leader = Metrics::parse(&text).sum("ha_guard_audit_leader", &[]);
    if leader == 1.0 { Ok(()) } else { Err(format!("ha_guard_audit_leader {leader}")) }
}

/// `pods` taken out of the ClusterRole `ha-guard-audit` the reports process is bound to, its
/// watches cut (they list again, refused): the steady report must say so (an `error` result)
/// within two intervals; the rule given back, the error must go and the audit lead again.
fn revoke_audit_rbac(cp: &ControlPlane, relay: &mut Relay, reports: &Reports) -> Result<String, String> {
    let role = cp.kubectl(&["get", "clusterrole", "ha-guard-audit", "-o", "json"]);
    if !role.ok() {
        return Err(format!("get clusterrole: {}", role.output()));
    }
    let mut original = role.json();
    for field in ["resourceVersion", "uid", "creationTimestamp", "managedFields"] {
        original["metadata"].as_object_mut().map(|m| m.remove(field));
    }
    let mut revoked = original.clone();
    let rules: Vec<Value> = revoked["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut r| {
            if let Some(resources) = r["resources"].as_array() {
                r["resources"] = json!(resources.iter().filter(|x| *x != "pods").cloned().collect::<Vec<_>>());
            }
            r
        })
        .filter(|r| r["resources"].as_array().is_none_or(|x| !x.is_empty()))
        .collect();
    revoked["rules"] = json!(rules);
    let replaced = cp.kubectl_in(&["replace", "-f", "-"], &revoked.to_string());
    if !replaced.ok() {
        return Err(format!("replace clusterrole: {}", replaced.output()));
    }
    let started = Instant::now();
    relay.close();
    std::thread::sleep(Duration::from_secs(1));
    let reopened = relay.open();
    let seen = reopened.and_then(|()| {
        poll(
            "the steady report names the kind it cannot read",
            AUDIT_INTERVAL * 2 + Duration::from_secs(30),
            Duration::from_millis(500),
            || steady_report_has(cp, "error"),
        )
    });
    let error_after = started.elapsed();
    // Given back whatever happened above.
    let restored = cp.kubectl_in(&["replace", "-f", "-"], &original.to_string());
    if !restored.ok() {
        return Err(format!("restore clusterrole: {}", restored.output()));
    }
    let back = Instant::now();
    let recovered =
        poll("the error result goes, the audit leads", Duration::from_secs(150), Duration::from_millis(500), || {
            match steady_report_has(cp, "error") {
                Ok(()) => Err("the error result is still there".to_string()),
                Err(_) => steady_report_has(cp, "fail").and_then(|()| audit_leading(reports)),
            }
        });
    seen.map_err(|e| format!("no error result within {error_after:.1?}: {e}"))?;
    recovered.map(|()| {
        format!(
            "an error result {error_after:.1?} after the revocation; gone, leading again {:.1?} after the restore",
            back.elapsed()
        )
    })
}

// --- memory and the view -----------------------------------------------------------------------------

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The apiserver's calls to ha-guard, added up across its restarts and split by whether a fault
/// window overlapped the interval between two looks.
#[derive(Default)]
struct CallsSeen {
    last: ApiserverCalls,
    last_t: f64,
    inside: ApiserverCalls,
    outside: ApiserverCalls,
}

impl CallsSeen {
    fn look(&mut self, cp: &ControlPlane, windows: &Windows) {
        let raw = cp.kubectl(&["get", "--raw", "/metrics"]);
        if !raw.ok() {
            return;
        }
        let now = ApiserverCalls::of(&Metrics::parse(&raw.stdout));
        let t = windows.t();
        // A counter that went down: the apiserver restarted, and counts from 0.
        let moved = if now.calls < self.last.calls { now } else { now.minus(self.last) };
        if windows.during(self.last_t, t).is_empty() {
            self.outside = self.outside.plus(moved);
        } else {
            self.inside = self.inside.plus(moved);
        }
        (self.last, self.last_t) = (now, t);
    }
}

/// What the apiserver holds of each kind the live view watches ([`WATCHED_KINDS`]).
fn apiserver_counts(cp: &ControlPlane) -> Option<BTreeMap<&'static str, u64>> {
    let mut out = BTreeMap::new();
    // No KEDA CRD on this control plane: the view holds no ScaledObject.
    out.insert("ScaledObject", 0);
    for (kind, resource) in [
        ("Deployment", "deployments"),
        ("StatefulSet", "statefulsets"),
        ("PodDisruptionBudget", "poddisruptionbudgets"),
        ("HorizontalPodAutoscaler", "horizontalpodautoscalers"),
        ("PersistentVolumeClaim", "persistentvolumeclaims"),
        ("Node", "nodes"),
        ("Namespace", "namespaces"),
        ("Service", "services"),
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
    ] {
        let got = cp.kubectl(&["get", resource, "-A", "-o", "name"]);
        if !got.ok() {
            return None;
        }
        out.insert(kind, got.stdout.lines().filter(|l| !l.trim().is_empty()).count() as u64);
    }
    // The view keeps only the APIServices a Service serves: the local ones no rule reads.
    let got = cp.kubectl(&["get", "apiservices", "-o", "json"]);
    let list: Value = serde_json::from_str(&got.stdout).ok().filter(|_| got.ok())?;
    let served = list["items"].as_array()?.iter().filter(|a| !a["spec"]["service"].is_null()).count();
    out.insert("APIService", served as u64);
    let mut watched: Vec<&str> = WATCHED_KINDS.to_vec();
    watched.sort_unstable();
    assert_eq!(out.keys().copied().collect::<Vec<_>>(), watched, "count every kind the view watches, no other");
    Some(out)
}

fn view_counts(hg: &HaGuard) -> Result<BTreeMap<&'static str, u64>, String> {
    let m = hg.metrics_opt()?;
    Ok(WATCHED_KINDS
        .iter()
        .map(|k| (*k, m.get("ha_guard_cache_objects", &[("kind", k)]).unwrap_or(0.0) as u64))
        .collect())
}

/// Every watch of `hg` that logged "watch failing" has logged "watch recovered" since.
fn watches_recovered(hg: &HaGuard) -> Result<(), String> {
    let text = std::fs::read_to_string(hg.log_path()).map_err(|e| e.to_string())?;
    let mut failing = BTreeMap::<String, i64>::new();
    for l in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(l) else { continue };
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        match v["message"].as_str() {
            Some(m) if m.starts_with("watch failing") => *failing.entry(kind).or_default() = 1,
            Some(m) if m.starts_with("watch recovered") => *failing.entry(kind).or_default() = 0,
            _ => {}
        }
    }
    let still: Vec<&String> = failing.iter().filter(|(_, v)| **v == 1).map(|(k, _)| k).collect();
    if still.is_empty() { Ok(()) } else { Err(format!("still failing: {still:?}")) }
}

/// The DER of the first certificate of the PEM file `path`.
fn cert_der(path: &Path) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    let pem = std::fs::read(path).unwrap_or_default();
    rustls_pki_types::CertificateDer::pem_slice_iter(&pem)
        .next()
        .and_then(Result::ok)
        .map(|c| c.to_vec())
        .unwrap_or_default()
}

// --- the run ---------------------------------------------------------------------------------------

fn main() {
    let o = Options::parse();
    std::fs::create_dir_all(&o.out).unwrap_or_else(|e| panic!("{}: {e}", o.out.display()));
    say(&format!(
        "{:?} with {} writers (pace {:?}), a fault every {:?} (watch cut {:?}), a checkpoint every {:?}; output in {}",
        o.duration,
        o.writers,
        o.pace,
        o.fault_every,
        o.cut_for,
        o.checkpoint_every,
        o.out.display()
    ));
    let code = match soak(&o) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            say(&format!("could not run: {e}"));
            2
        }
    };
    std::process::exit(code);
}

/// `n` kwok Nodes over three zones (`topology.kubernetes.io/zone` zone-a, zone-b, zone-c).
fn kwok_nodes(n: usize) -> Vec<(String, String)> {
    (0..n).map(|i| (format!("kwok-{i:03}"), format!("zone-{}", ["a", "b", "c"][i % 3]))).collect()
}

fn soak(o: &Options) -> Result<bool, String> {
    let cp = if o.controllers { ControlPlane::start_with_controllers()? } else { ControlPlane::start()? };
    if o.controllers {
        let nodes = kwok_nodes(o.nodes);
        let labels: Vec<[(&str, &str); 1]> =
            nodes.iter().map(|(_, zone)| [("topology.kubernetes.io/zone", zone.as_str())]).collect();
        let refs: Vec<(&str, &[(&str, &str)])> =
            nodes.iter().zip(&labels).map(|((n, _), l)| (n.as_str(), l.as_slice())).collect();
        cp.kwok_nodes(&refs);
    } else {
        cp.nodes(&["node-a", "node-b", "node-c"]);
    }
    let apiserver: SocketAddr = cp.server().trim_start_matches("https://").parse().map_err(|e| format!("{e}"))?;
    let ca = ha_guard::server::certs::Ca::generate(
        "ha-guard soak CA",
        now() - time::Duration::hours(1),
        now() + time::Duration::days(30),
    )
    .map_err(|e| e.to_string())?;

    // Two replicas: same certificate and config, each watching through a relay of its own.
    let first_cert = issue(&ca);
    let names = ["replica-a", "replica-b"];
    let mut relays: Vec<Relay> = Vec::new();
    let mut guards: Vec<HaGuard> = Vec::new();
    let mut configs = Vec::new();
    let mut cert_version = 1;
    for name in names {
        let dir = HaGuard::dir_of(cp.root(), name);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        install_secret(&dir, cert_version, &ca, &first_cert);
        let config = dir.join("config.yaml");
        write_atomically(&config, &config_text(false));
        let mut relay = Relay::new(apiserver);
        relay.open()?;
        let kubeconfig = relay.kubeconfig(&cp.kubeconfig(), &dir.join("relayed.kubeconfig"));
        let spec = Spec {
            kubeconfig: Some(kubeconfig),
            generate_certs: false,
            args: vec!["--config".into(), config.display().to_string(), "--reload-interval".into(), "0.5".into()],
            ..Spec::new(&cp, name)
        };
        guards.push(HaGuard::start_spec(&cp, &spec)?);
        relays.push(relay);
        configs.push(config);
    }
    // The background audit as the chart runs it: the report CRDs, the chart's RBAC, a process of
    // its own as the audit's ServiceAccount, through a relay, with a copy of the config (the same
    // ConfigMap in the chart). The steady namespace's finding is stored before the webhook exists.
    install_report_crds(&cp);
    cp.namespace(REPORTS_NS, &[]);
    install_chart_rbac(&cp);
    cp.namespace(STEADY_NS, &[]);
    cp.apply(yaml_file(&[
        deployment(STEADY_NS, "lone", 1),
        pdb(STEADY_NS, "lone", "lone", json!({"minAvailable": 1})),
    ]))
    .success();
    let audit_config = cp.root().join("audit-config.yaml");
    write_atomically(&audit_config, &config_text(false));
    let mut audit_relay = Relay::new(apiserver);
    audit_relay.open()?;
    let audit_kubeconfig = audit_relay.kubeconfig(
        &audit_kubeconfig(&cp, o.duration + Duration::from_secs(7200))?,
        &cp.dir().join("audit-relayed.kubeconfig"),
    );
    let mut reports_started = 1;
    let mut reports = start_reports(&cp, reports_started, &audit_kubeconfig, &audit_config);
    let balancer = support::balancer::Balancer::start(guards.iter().map(|g| g.webhook_port).collect());
    register_at(&cp, &guards[0], balancer.port, &[Webhooks::Mutating, Webhooks::Validating])?;
    say(&format!(
        "control plane up; replicas on {} and {}, behind the balancer on {}",
        guards[0].webhook_port, guards[1].webhook_port, balancer.port
    ));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let windows = Arc::new(Windows { started: Instant::now(), all: Mutex::default() });
    let log = std::fs::File::create(o.out.join("writes.jsonl")).map_err(|e| e.to_string())?;
    let run = Arc::new(Run {
        client: cp.kube_client(&rt),
        windows: windows.clone(),
        tally: Mutex::default(),
        log: Mutex::new(log),
        pause: tokio::sync::RwLock::new(()),
        deny_recreate: AtomicBool::new(false),
        replicas: [guards[0].webhook_port, guards[1].webhook_port],
        up: [AtomicBool::new(true), AtomicBool::new(true)],
        watching: [AtomicBool::new(true), AtomicBool::new(true)],
        ca_pem: ca.cert_pem.clone(),
        stop: AtomicBool::new(false),
        pace: o.pace,
        unfinished: Mutex::default(),
        controllers: o.controllers,
    });
    let mut writers: Vec<_> = (0..o.writers).map(|w| rt.spawn(writer(run.clone(), w, 8))).collect();
    if o.controllers {
        writers.push(rt.spawn(drainer(run.clone(), kwok_nodes(o.nodes).into_iter().map(|(n, _)| n).collect())));
    }

    // The faults, in turn; RSS and the views sampled every 10 s; checkpoints.
    let started = Instant::now();
    let end = started + o.duration;
    let mut rss: Vec<Sample> = Vec::new();
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut fault_log: Vec<String> = Vec::new();
    let mut checks: Vec<(f64, Checked)> = Vec::new();
    let mut report_checks: Vec<ReportsCheck> = Vec::new();
    let (mut next_fault, mut next_sample, mut next_check) =
        (started + o.fault_every, started, started + o.checkpoint_every);
    let mut turn = 0usize;
    let mut cut_until: Option<(Instant, usize)> = None;
    let mut kills_b = 0;
    let mut calls = CallsSeen::default();
    calls.look(&cp, &windows);
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_sample {
            let t = windows.t();
            let pid = [guards[0].pid(), guards[1].pid(), Some(reports.child.id())];
            rss.push(Sample { t, kib: pid.map(|p| p.and_then(rss_kib)), pid });
            calls.look(&cp, &windows);
            next_sample = now + Duration::from_secs(10);
        }
        if let Some((until, id)) = cut_until
            && now >= until
        {
            relays[0].open()?;
            // Stale until every watch has recovered: its retry delay may have grown to a
            // minute (30 s, jittered).
            let opened = Instant::now();
            let resumed =
                poll("replica a's watches recover", Duration::from_secs(120), Duration::from_millis(500), || {
                    watches_recovered(&guards[0])
                })
                .map(|()| format!("recovered {:.1?} after the relay opened", opened.elapsed()));
            run.watching[0].store(true, Ordering::SeqCst);
            windows.close(id);
            let line = format!("{:.0}s: replica a's watch restored: {resumed:?}", windows.t());
            say(&line);
            fault_log.push(line);
            if let Err(e) = resumed {
                run.tally.lock().unwrap_or_else(|p| p.into_inner()).failed_outside.push(e);
            }
            cut_until = None;
        }
        if now >= next_check {
            let label = format!("{:04.0}s", windows.t());
            let c = checkpoint(&cp, &run, &o.out, &label);
            say(&format!("checkpoint {label}: {c:?}"));
            checks.push((windows.t(), c));
            let r = reports_checkpoint(&cp, &run, &rt, &audit_config);
            say(&format!("reports at {label}: {:?} after {:.1?}", r.result, r.took));
            report_checks.push(r);
            next_check = now + o.checkpoint_every;
        }
        // A fault starts only if it can end before the run does (the smoke stays short): the
        // rotation waits there, and the later kinds come in a longer run.
        if now >= next_fault && now + o.fault_every / 2 + fault_length(turn % FAULTS.len(), o) < end {
            let what = FAULTS[turn % FAULTS.len()];
            let at = windows.t();
            let result: Result<String, String> = match turn % FAULTS.len() {
                0 => {
                    let _paused = pause_writers(&rt, &run, "the certificate rotation");
                    cert_version += 1;
                    let next = issue(&ca);
                    for g in &guards {
                        install_secret(g.dir(), cert_version, &ca, &next);
                    }
                    let new_cert = cert_der(&guards[0].dir().join("tls.crt"));
                    let reloaded = poll(
                        "both replicas serve the new certificate",
                        WAIT,
                        Duration::from_millis(100),
                        || {
                            let body = admission_review(&deployment("default", "probe", 1)).to_string();
                            let n = guards
                            .iter()
                            .filter(|g| {
                                matches!(webhook_call(g.webhook_port, &ca.cert_pem, None, None, "/validate", body.as_bytes()),
                                    Ok(Call::Answered { ref server_cert, .. }) if *server_cert == new_cert)
                            })
                            .count();
                            if n == 2 { Ok(()) } else { Err(format!("{n} of 2")) }
                        },
                    );
                    let cut = balancer.cut();
                    std::thread::sleep(Duration::from_millis(300));
                    reloaded.map(|()| format!("certificate v{cert_version}, {cut} connections cut"))
                }
                1 => {
                    let _paused = pause_writers(&rt, &run, "the config reload");
                    let deny = !run.deny_recreate.load(Ordering::SeqCst);
                    let before: Vec<f64> = guards
                        .iter()
                        .map(|g| {
                            g.metrics().get("ha_guard_config_reloads_total", &[("result", "success")]).unwrap_or(0.0)
                        })
                        .collect();
                    let audit_before =
                        reports.metrics().get("ha_guard_config_reloads_total", &[("result", "success")]).unwrap_or(0.0);
                    for c in configs.iter().chain([&audit_config]) {
                        write_atomically(c, &config_text(deny));
                    }
                    let reloaded = poll("both replicas reload the config", WAIT, Duration::from_millis(100), || {
                        let n = guards
                            .iter()
                            .zip(&before)
                            .filter(|(g, b)| {
                                g.metrics_opt()
                                    .ok()
                                    .and_then(|m| m.get("ha_guard_config_reloads_total", &[("result", "success")]))
                                    > Some(**b)
                            })
                            .count();
                        let audit = http_get(reports.port, "/metrics").ok().and_then(|(_, m)| {
                            Metrics::parse(&m).get("ha_guard_config_reloads_total", &[("result", "success")])
                        }) > Some(audit_before);
                        if n == 2 && audit { Ok(()) } else { Err(format!("{n} of 2 replicas, the audit {audit}")) }
                    });
                    run.deny_recreate.store(deny, Ordering::SeqCst);
                    reloaded.map(|()| format!("recreate-multi-replica: {}", if deny { "deny" } else { "warn" }))
                }
                2 => {
                    let id = windows.open("replica b down");
                    run.up[1].store(false, Ordering::SeqCst);
                    guards[1].kill();
                    kills_b += 1;
                    std::thread::sleep(Duration::from_secs(2));
                    let restarted = guards[1].restart();
                    run.up[1].store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_secs(2));
                    windows.close(id);
                    restarted.map(|()| "ready again".to_string())
                }
                4 => {
                    // Admission is not involved: no window. The audit watches its own reports.
                    let deleted = cp.kubectl(&["delete", "policyreports.wgpolicyk8s.io", "ha-guard", "-n", STEADY_NS]);
                    let started = Instant::now();
                    if deleted.ok() {
                        poll(
                            "the deleted report is restored",
                            Duration::from_secs(30),
                            Duration::from_millis(200),
                            || steady_report_has(&cp, "fail"),
                        )
                        .map(|()| format!("restored in {:.1?}", started.elapsed()))
                    } else {
                        Err(format!("kubectl delete: {}", deleted.output()))
                    }
                }
                5 => {
                    let _ = reports.child.kill();
                    let _ = reports.child.wait();
                    reports_started += 1;
                    let started = Instant::now();
                    // A new pod's name: it takes the Lease once the killed one's runs out (15 s).
                    reports = start_reports(&cp, reports_started, &audit_kubeconfig, &audit_config);
                    poll("the new reports process leads", Duration::from_secs(120), Duration::from_millis(500), || {
                        audit_leading(&reports)
                    })
                    .map(|()| format!("audit-{reports_started} leads {:.1?} after the kill", started.elapsed()))
                }
                6 => {
                    let id = windows.open("etcd paused");
                    let paused = pause_etcd(&cp, o.etcd_pause);
                    // Stale views until every watch of both replicas has recovered.
                    let resumed = Instant::now();
                    let recovered = paused.and_then(|()| {
                        poll(
                            "the apiserver and the watches recover",
                            Duration::from_secs(120),
                            Duration::from_millis(500),
                            || {
                                let ready = cp.kubectl(&["get", "--raw", "/readyz"]);
                                if !ready.ok() {
                                    return Err(format!("readyz: {}", ready.output()));
                                }
                                watches_recovered(&guards[0]).and_then(|()| watches_recovered(&guards[1]))
                            },
                        )
                    });
                    std::thread::sleep(Duration::from_secs(2));
                    windows.close(id);
                    recovered.map(|()| {
                        format!(
                            "SIGSTOP for {:?}; ready, watches recovered {:.1?} after SIGCONT",
                            o.etcd_pause,
                            resumed.elapsed()
                        )
                    })
                }
                8 => revoke_audit_rbac(&cp, &mut audit_relay, &reports),
                3 => {
                    let id = windows.open("replica a's watch cut");
                    run.watching[0].store(false, Ordering::SeqCst);
                    relays[0].close();
                    cut_until = Some((Instant::now() + o.cut_for, id));
                    Ok(format!("for {:?}", o.cut_for))
                }
                _ => {
                    // 7. Its counters start over: count what they hold first.
                    calls.look(&cp, &windows);
                    let id = windows.open("apiserver restarting");
                    let stopped = cp.stop_apiserver(Duration::from_secs(5));
                    std::thread::sleep(Duration::from_secs(2));
                    let started_again = stopped.and_then(|()| cp.start_apiserver());
                    // Stale views until every watch of both replicas has recovered.
                    let up = Instant::now();
                    let recovered = started_again.and_then(|()| {
                        poll(
                            "both replicas' watches recover",
                            Duration::from_secs(120),
                            Duration::from_millis(500),
                            || watches_recovered(&guards[0]).and_then(|()| watches_recovered(&guards[1])),
                        )
                    });
                    std::thread::sleep(Duration::from_secs(2));
                    windows.close(id);
                    recovered.map(|()| format!("up again; the watches recovered {:.1?} later", up.elapsed()))
                }
            };
            *faults.entry(what).or_default() += 1;
            let line =
                format!("{at:.0}s: {what}: {}", result.as_ref().map_or_else(|e| format!("FAILED: {e}"), |s| s.clone()));
            say(&line);
            fault_log.push(line);
            if let Err(e) = result {
                run.tally.lock().unwrap_or_else(|p| p.into_inner()).failed_outside.push(format!("fault {what}: {e}"));
            }
            turn += 1;
            next_fault = Instant::now() + o.fault_every;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Some((_, id)) = cut_until.take() {
        relays[0].open()?;
        run.watching[0].store(true, Ordering::SeqCst);
        windows.close(id);
    }

    // The end: writers stop, unfinished namespaces are finalized, the last checkpoint.
    run.stop.store(true, Ordering::SeqCst);
    rt.block_on(async {
        for w in writers {
            let _ = w.await;
        }
    });
    let elapsed = started.elapsed();
    let last = checkpoint(&cp, &run, &o.out, "end");
    say(&format!("last checkpoint: {last:?}"));
    checks.push((windows.t(), last));
    let r = reports_checkpoint(&cp, &run, &rt, &audit_config);
    say(&format!("reports at the end: {:?} after {:.1?}", r.result, r.took));
    report_checks.push(r);

    // No leak: each replica's view holds what the apiserver holds, with the writers' last
    // namespaces and then once every namespace of the run is deleted.
    let mut views = Vec::new();
    let mut expected = BTreeMap::new();
    for when in ["with the last namespaces", "after deleting every namespace"] {
        if when.starts_with("after") {
            let unfinished: Vec<String> =
                std::mem::take(&mut *run.unfinished.lock().unwrap_or_else(|p| p.into_inner()));
            for ns in &unfinished {
                rt.block_on(delete_namespace(&run, ns));
            }
        }
        if o.controllers && when.starts_with("after") {
            // Any left by a writer whose delete failed, and not retried (the apiserver was down).
            cp.kubectl(&["delete", "namespaces", "-l", "ha-guard-soak=true", "--wait=false"]);
        }
        if o.controllers {
            // The namespace controller empties what was deleted: counts move until it is done.
            let gone = poll("no namespace is terminating", Duration::from_secs(300), Duration::from_secs(1), || {
                let list = cp.kubectl(&["get", "namespaces", "-o", "json"]);
                let terminating = list.ok().then(|| list.json()).map_or(usize::MAX, |l| {
                    l["items"]
                        .as_array()
                        .map_or(0, |i| i.iter().filter(|n| n["metadata"]["deletionTimestamp"].is_string()).count())
                });
                if terminating == 0 { Ok(()) } else { Err(format!("{terminating} terminating")) }
            });
            say(&format!("namespaces {when}: {gone:?}"));
        }
        expected = apiserver_counts(&cp).ok_or("kubectl get at the end failed")?;
        for (name, g) in names.iter().zip(&guards) {
            let got = poll("the view equals the apiserver", WAIT, Duration::from_millis(500), || {
                let v = view_counts(g)?;
                if v == expected { Ok(v) } else { Err(format!("{v:?}")) }
            });
            say(&format!("{name}'s view {when}: {}", if got.is_ok() { "equal to the apiserver's" } else { "DIFFERS" }));
            views.push(got.map(|v| format!("{when}: {v:?}")));
        }
    }
    let answers: Vec<usize> = guards
        .iter()
        .map(|g| {
            std::fs::read_to_string(g.log_path())
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(r#""message":"admission""#))
                .count()
        })
        .collect();
    let watch_lines: Vec<(usize, usize)> = guards
        .iter()
        .map(|g| {
            let text = std::fs::read_to_string(g.log_path()).unwrap_or_default();
            (text.matches("watch failing").count(), text.matches("watch recovered").count())
        })
        .collect();
    calls.look(&cp, &windows);
    for entry in std::fs::read_dir(cp.dir()).map_err(|e| e.to_string())?.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("reports-") && name.ends_with(".log") {
            let _ = std::fs::copy(entry.path(), o.out.join(name));
        }
    }
    for g in &guards {
        let _ = std::fs::copy(
            g.log_path(),
            o.out.join(format!("{}.log", g.dir().file_name().unwrap_or_default().to_string_lossy())),
        );
    }
    drop(rt);

    let t = run.tally.lock().unwrap_or_else(|p| p.into_inner());
    let unexplained: usize = checks.iter().map(|(_, c)| c.unexplained.len()).sum();
    let rss_verdict = rss_flat(&rss);
    let warm = rss.last().map_or(0.0, |r| r.t / 3.0);
    let slopes: Vec<String> = ["replica a", "replica b", "reports"]
        .iter()
        .enumerate()
        .map(|(i, name)| match rss_slope(&rss, i, warm) {
            Some((slope, n, runs)) => format!("{name} {slope:+.2} MiB/h ({n} samples, {runs} process(es))"),
            None => format!("{name}: too few samples"),
        })
        .collect();
    // Panics in any ha-guard process (both replicas' logs, every reports process's), and the
    // controllers' writes ha-guard refused (kube-controller-manager logs each refused write).
    let mut logs: Vec<PathBuf> = guards.iter().map(HaGuard::log_path).collect();
    logs.extend(
        std::fs::read_dir(cp.dir())
            .map_err(|e| e.to_string())?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("reports-"))),
    );
    let panics: Vec<String> = logs
        .iter()
        .flat_map(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy().to_string();
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("panicked"))
                .map(|l| format!("{name}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect();
    let kcm = std::fs::read_to_string(cp.dir().join("controller-manager.log")).unwrap_or_default();
    let refused_controllers: Vec<&str> =
        kcm.lines().filter(|l| l.contains("admission webhook") && l.contains("denied")).collect();
    let failed_webhook_calls = kcm.lines().filter(|l| l.contains("failed calling webhook")).count();
    if o.controllers {
        let _ = std::fs::copy(cp.dir().join("controller-manager.log"), o.out.join("controller-manager.log"));
    }
    let mut ok = true;
    let mut report = String::new();
    let mut line = |s: String| {
        say(&s);
        report.push_str(&s);
        report.push('\n');
    };
    line(format!("ran {elapsed:.0?} with {} writers; commit {}", o.writers, ha_guard::build_info::long_version()));
    line(format!(
        "writes {} ({:.1}/s), answered as expected {}; denied as expected {:?}; concurrent pairs {} (both admitted {}); \
         scaled to a PDB's floor through the scale subresource (warned by design) {}",
        t.writes,
        t.writes as f64 / elapsed.as_secs_f64(),
        t.answered_as_expected,
        t.denied_as_expected,
        t.concurrent_pairs,
        t.concurrent_both_admitted,
        t.scaled_below_floor
    ));
    line(format!(
        "HPA targets scaled through the scale subresource {}; PDB edits {}; drains of kwok nodes {} (pods evicted {}, \
         evictions a PDB still refused after 10 s {}, unanswered within 10 s {}, drain calls failed outside windows {})",
        t.hpa_scales,
        t.pdb_edits,
        t.drains,
        t.evicted,
        t.eviction_refused,
        t.eviction_unanswered,
        t.drain_failed.len()
    ));
    line(format!("faults: {faults:?}; replica b killed {kills_b} times"));
    line(format!(
        "inside fault windows ({} writes): other answers than expected {:?}, failed calls {:?}",
        t.writes_in_windows, t.in_window_mismatch, t.in_window_failed
    ));
    line(format!(
        "WRONG VERDICTS outside windows: {} by the answers, {unexplained} by the checkpoints (deny findings in stored objects not explained by a window)",
        t.wrong_verdicts.len()
    ));
    line(format!(
        "failed calls outside windows: {}; views that did not converge: {}",
        t.failed_outside.len(),
        t.not_converged.len()
    ));
    let mut conv = t.converged_ms.clone();
    conv.sort_unstable();
    let pct = |p: f64| conv.get(((conv.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(0);
    line(format!(
        "view convergence before a pair's second write: n {} p50 {} ms p99 {} ms max {} ms",
        conv.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    ));
    line(format!(
        "checkpoints: {}",
        checks
            .iter()
            .map(|(at, c)| format!(
                "{at:.0}s {} ns/{} objects, {} deny ({} explained)",
                c.namespaces, c.objects, c.deny_findings, c.explained
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    line(format!(
        "admission answers logged: replica a {}, replica b {}; the balancer relayed {} connections",
        answers[0],
        answers[1],
        balancer.accepted()
    ));
    line(format!(
        "the apiserver's calls to ha-guard (its metrics, across restarts): outside fault windows {:?}; inside {:?}",
        calls.outside, calls.inside
    ));
    line(format!("watch log lines (failing, recovered): a {:?}, b {:?}", watch_lines[0], watch_lines[1]));
    line(format!("apiserver after deleting every namespace of the run: {expected:?}"));
    for (g, v) in names.iter().cycle().zip(&views) {
        line(format!(
            "view of {g} equal to the apiserver {}",
            match v {
                Ok(v) => v.clone(),
                Err(e) => format!("NOT: {e}"),
            }
        ));
    }
    let settled: Vec<f64> = report_checks.iter().filter(|r| r.result.is_ok()).map(|r| r.took.as_secs_f64()).collect();
    line(format!(
        "reports equal to `ha-guard audit` (writers paused, within {:?}): {} of {} checkpoints, settled in max {:.1}s; {}",
        AUDIT_INTERVAL + Duration::from_secs(15),
        settled.len(),
        report_checks.len(),
        settled.iter().copied().fold(0.0, f64::max),
        report_checks
            .iter()
            .map(|r| match &r.result {
                Ok((scopes, rows)) => format!("{:.0}s {scopes} scopes/{rows} rows in {:.1?}", r.at, r.took),
                Err(e) => format!("{:.0}s DIFFER: {e}", r.at),
            })
            .collect::<Vec<_>>()
            .join("; ")
    ));
    line(format!(
        "RSS slope after warm-up (t >= {warm:.0}s; least squares, each process apart): {}",
        slopes.join(", ")
    ));
    line(format!("panics in ha-guard logs ({} files): {}", logs.len(), panics.len()));
    line(if o.controllers {
        format!(
            "controller writes refused by ha-guard (kube-controller-manager log): {}; its webhook calls that failed (fault windows): {failed_webhook_calls}",
            refused_controllers.len()
        )
    } else {
        "controller writes refused: no controllers (--no-controllers)".to_string()
    });
    line(format!("RSS: {}", rss_verdict.as_ref().map_or_else(|e| format!("GROWS: {e}"), |s| s.clone())));
    for e in t.wrong_verdicts.iter().chain(&t.failed_outside).chain(&t.not_converged).chain(&t.drain_failed).take(30) {
        line(format!("  {e}"));
    }
    for e in panics.iter().map(String::as_str).chain(refused_controllers.iter().copied()).take(10) {
        line(format!("  {e}"));
    }
    for (_, c) in &checks {
        for e in c.unexplained.iter().take(10) {
            line(format!("  unexplained: {e}"));
        }
    }
    ok &= t.wrong_verdicts.is_empty() && unexplained == 0 && t.failed_outside.is_empty() && t.not_converged.is_empty();
    ok &= t.drain_failed.is_empty() && panics.is_empty() && refused_controllers.is_empty();
    ok &= views.iter().all(Result::is_ok) && rss_verdict.is_ok();
    ok &= !report_checks.is_empty() && report_checks.iter().all(|r| r.result.is_ok());
    // No call failed or failed open outside the windows (the answers above would not show a
    // failed call whose write was to be admitted anyway).
    ok &= calls.outside.went_wrong() == 0.0 && calls.outside.calls > 0.0;
    ok &= t.writes > 0 && faults.len() == FAULTS.len().min(turn);
    line(format!("soak: {}", if ok { "PASSED" } else { "FAILED" }));

    // The record: report, faults, RSS table.
    let mut md = format!("# soak run\n\n```\n{report}```\n\n## Faults\n\n");
    for f in &fault_log {
        md.push_str(&format!("- {f}\n"));
    }
    md.push_str("\n## RSS (KiB, VmRSS)\n\n| t (s) | replica a | replica b | reports |\n|---:|---:|---:|---:|\n");
    let step = (rss.len() / 30).max(1);
    for r in rss.iter().step_by(step) {
        let show = |v: &Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        md.push_str(&format!("| {:.0} | {} | {} | {} |\n", r.t, show(&r.kib[0]), show(&r.kib[1]), show(&r.kib[2])));
    }
    std::fs::write(o.out.join("report.md"), md).map_err(|e| e.to_string())?;
    let csv: String = rss
        .iter()
        .map(|r| {
            let v = |i: usize| format!("{},{}", r.kib[i].unwrap_or(0), r.pid[i].unwrap_or(0));
            format!("{:.1},{},{},{}\n", r.t, v(0), v(1), v(2))
        })
        .collect();
    std::fs::write(
        o.out.join("rss.csv"),
        format!("t_s,replica_a_kib,replica_a_pid,replica_b_kib,replica_b_pid,reports_kib,reports_pid\n{csv}"),
    )
    .map_err(|e| e.to_string())?;
    drop(balancer);
    drop(guards);
    drop(relays);
    drop(reports);
    drop(audit_relay);
    Ok(ok)
}

/// One look at the RSS of replica a, replica b and the reports process, and their pids.
struct Sample {
    t: f64,
    kib: [Option<u64>; 3],
    pid: [Option<u32>; 3],
}

/// The RSS slope of process `i` in MiB an hour after `warm` (s), by least squares, each process
/// (pid: a killed one is started again) apart and after its own first minute: the slope of
/// Σ(t - t̄ₚ)(y - ȳₚ) / Σ(t - t̄ₚ)², with the samples and the processes counted.
fn rss_slope(rss: &[Sample], i: usize, warm: f64) -> Option<(f64, usize, usize)> {
    let mut by_pid: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    let mut first_seen: BTreeMap<u32, f64> = BTreeMap::new();
    for r in rss {
        let (Some(pid), Some(kib)) = (r.pid[i], r.kib[i]) else { continue };
        let first = *first_seen.entry(pid).or_insert(r.t);
        if r.t >= warm && r.t >= first + 60.0 {
            by_pid.entry(pid).or_default().push((r.t, kib as f64));
        }
    }
    by_pid.retain(|_, v| v.len() >= 3);
    let (mut sxy, mut sxx, mut n) = (0.0, 0.0, 0);
    for v in by_pid.values() {
        let (mt, my) =
            (v.iter().map(|x| x.0).sum::<f64>() / v.len() as f64, v.iter().map(|x| x.1).sum::<f64>() / v.len() as f64);
        sxy += v.iter().map(|(t, y)| (t - mt) * (y - my)).sum::<f64>();
        sxx += v.iter().map(|(t, _)| (t - mt).powi(2)).sum::<f64>();
        n += v.len();
    }
    (sxx > 0.0).then(|| (sxy / sxx * 3600.0 / 1024.0, n, by_pid.len()))
}

/// Replica a's RSS (never killed) over the last 2/3 of the run: its growth (median of the last
/// five samples minus median of the first five of that span) within noise, max(4 MiB, 5%).
fn rss_flat(rss: &[Sample]) -> Result<String, String> {
    let a: Vec<(f64, u64)> = rss.iter().filter_map(|r| r.kib[0].map(|v| (r.t, v))).collect();
    if a.len() < 12 {
        return Ok(format!("{} samples of replica a only: too short a run to judge", a.len()));
    }
    let span = &a[a.len() / 3..];
    let median = |xs: &[(f64, u64)]| {
        let mut v: Vec<u64> = xs.iter().map(|(_, r)| *r).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (first, last) = (median(&span[..5]), median(&span[span.len() - 5..]));
    let (min, max) = (span.iter().map(|x| x.1).min().unwrap_or(0), span.iter().map(|x| x.1).max().unwrap_or(0));
    let growth = last as i64 - first as i64;
    let noise = (4 * 1024).max(first as i64 / 20);
    let text = format!(
        "replica a over the last 2/3 ({:.0}s..{:.0}s): {first} -> {last} KiB (growth {growth} KiB, noise bound {noise} KiB; min {min}, max {max})",
        span[0].0,
        span[span.len() - 1].0
    );
    // Minutes of allocator warm-up under a new write mix move RSS by more than the bound: a span
    // that short says nothing about a leak (the 3-minute CI smoke), so it is shown, not judged.
    let judged_from = RSS_JUDGED_SPAN.as_secs_f64();
    if span[span.len() - 1].0 - span[0].0 < judged_from {
        return Ok(format!("{text}; not judged: a span under {judged_from:.0}s"));
    }
    if growth <= noise { Ok(text) } else { Err(text) }
}

/// The shortest span of replica a's samples whose RSS growth is judged ([`rss_flat`]).
const RSS_JUDGED_SPAN: Duration = Duration::from_secs(600);

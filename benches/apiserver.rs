//! Through the real apiserver: what registering ha-guard costs the writes it intercepts.
//!
//!     cargo bench --bench apiserver            # or benches/run.sh, which adds it to RESULTS.md
//!
//! One control plane (etcd + kube-apiserver from `tests/e2e/control-plane/`, built on first use)
//! and the real `ha-guard serve --cluster live` watching it, both from the end-to-end harness
//! (`tests/support/mod.rs`). Then, in rounds, a batch of writes with ha-guard's webhook
//! configurations (from `manifests/ha-guard.yaml`, pointed at it) registered and a batch with them
//! deleted; the order alternates per round so that neither side always runs on the fuller etcd.
//! A batch, each in a namespace of its own: create 1,000 Deployments (2 replicas, a hostname spread,
//! about 0.8 KB) and 1,000 PodDisruptionBudgets over them (`maxUnavailable: 1`), then update all
//! 2,000 (a new image; a new annotation), from `--concurrency` tasks of one kube-rs client. Every
//! write must succeed: these objects pass every rule (the mutating webhook adds
//! `unhealthyPodEvictionPolicy` to the PDBs), and any error is counted and fails the run.
//!
//! Reported: writes per second by phase, the ratio registered / not (median over rounds), and for
//! the registered batches the apiserver's own `apiserver_admission_webhook_admission_duration_seconds`
//! for ha-guard's two webhooks (the time the apiserver waited for a call, its TLS and HTTP/2 included)
//! with ha-guard's `ha_guard_admission_duration_seconds` beside it (the time inside the handler).
//! The apiserver's histogram has buckets at 5, 25, 100 ms, ...: a quantile is interpolated within a
//! bucket as Prometheus' `histogram_quantile` does, so the share of calls under 5 ms is given too.
//!
//! Flags (after `--`): `--rounds N` (2), `--objects N` Deployments (and as many PDBs) per batch
//! (1,000), `--concurrency N` (16), `--out FILE` (also write the markdown there).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

struct Args {
    rounds: usize,
    objects: usize,
    concurrency: usize,
    out: Option<String>,
}

fn args() -> Args {
    let mut a = Args { rounds: 2, objects: 1_000, concurrency: 16, out: None };
    // `cargo bench` passes `--bench`.
    let list: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut it = list.iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next().unwrap_or_else(|| {
                eprintln!("{name} needs a value");
                std::process::exit(2)
            })
        };
        let number = |name: &str, v: &String| {
            v.parse::<usize>().ok().filter(|n| *n > 0).unwrap_or_else(|| {
                eprintln!("{name}: expected a positive number, got {v:?}");
                std::process::exit(2)
            })
        };
        match flag.as_str() {
            "--rounds" => a.rounds = number("--rounds", value("--rounds")),
            "--objects" => a.objects = number("--objects", value("--objects")),
            "--concurrency" => a.concurrency = number("--concurrency", value("--concurrency")),
            "--out" => a.out = Some(value("--out").clone()),
            other => {
                eprintln!("unknown argument {other:?}: --rounds N --objects N --concurrency N --out FILE");
                std::process::exit(2)
            }
        }
    }
    a
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Without,
    With,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Without => "without ha-guard",
            Mode::With => "with ha-guard",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Create,
    Update,
}

/// One phase of one batch.
struct Run {
    writes: u64,
    errors: u64,
    took: Duration,
    /// CPU seconds each process spent during the phase, as [`PROCESSES`].
    cpu: [f64; 4],
}

/// Whose CPU time is counted: the processes of the run, all on the same two cores.
const PROCESSES: [&str; 4] = ["kube-apiserver", "etcd", "ha-guard", "client (this process)"];

/// utime + stime of `pid` in seconds (`/proc/PID/stat` fields 14 and 15, in clock ticks of 10 ms).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

impl Run {
    fn rate(&self) -> f64 {
        self.writes as f64 / self.took.as_secs_f64()
    }
}

fn main() {
    let args = args();
    let started = Instant::now();
    eprintln!("apiserver bench: starting etcd + kube-apiserver (built on first use) and ha-guard");
    let cp = ControlPlane::start().unwrap_or_else(|e| fail(&format!("control plane: {e}")));
    let hg = HaGuard::start(&cp).unwrap_or_else(|e| fail(&format!("ha-guard: {e}")));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let client = cp.kube_client(&rt);

    let mut runs: BTreeMap<(Mode, Phase), Vec<Run>> = BTreeMap::new();
    let mut apiserver_hist: BTreeMap<Phase, Histogram> = BTreeMap::new();
    let mut ha_guard_hist: BTreeMap<Phase, Histogram> = BTreeMap::new();
    let pid_file = |name: &str| {
        std::fs::read_to_string(cp.dir().join(name))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|e| fail(&format!("{}: {e}", cp.dir().join(name).display())))
    };
    let pids = [
        pid_file("apiserver.pid"),
        pid_file("etcd.pid"),
        hg.pid().map(|p| p.to_string()).unwrap_or_else(|| fail("ha-guard has no pid")),
        "self".to_string(),
    ];
    let cpu_now = || -> [f64; 4] { std::array::from_fn(|i| cpu_seconds(&pids[i])) };
    let mut registered = false;
    for round in 0..args.rounds {
        let order = if round % 2 == 0 { [Mode::Without, Mode::With] } else { [Mode::With, Mode::Without] };
        for mode in order {
            let want = mode == Mode::With;
            if want && !registered {
                register(&cp, &hg, &[Webhooks::Mutating, Webhooks::Validating])
                    .unwrap_or_else(|e| fail(&format!("registering: {e}")));
            } else if !want && registered {
                for w in [Webhooks::Mutating, Webhooks::Validating] {
                    unregister(&cp, w).unwrap_or_else(|e| fail(&format!("unregistering: {e}")));
                }
            }
            registered = want;
            let ns = format!("bench-{}-{round}", if want { "with" } else { "without" });
            cp.namespace(&ns, &[]);
            for phase in [Phase::Create, Phase::Update] {
                let before = (cp.metrics(), hg.metrics());
                let cpu_before = cpu_now();
                let mut run = rt.block_on(batch(&client, &ns, phase, args.objects, args.concurrency));
                let cpu_after = cpu_now();
                run.cpu = std::array::from_fn(|i| cpu_after[i] - cpu_before[i]);
                eprintln!(
                    "apiserver bench: round {} {} {:?}: {} writes in {:.2?} ({:.0}/s), {} errors",
                    round + 1,
                    mode.name(),
                    phase,
                    run.writes,
                    run.took,
                    run.rate(),
                    run.errors
                );
                if want {
                    let after = (cp.metrics(), hg.metrics());
                    apiserver_hist.entry(phase).or_default().add_difference(
                        &after.0,
                        &before.0,
                        "apiserver_admission_webhook_admission_duration_seconds",
                        &|l| l.get("name").is_some_and(|n| n.ends_with(".ha-guard.io")),
                    );
                    ha_guard_hist.entry(phase).or_default().add_difference(
                        &after.1,
                        &before.1,
                        "ha_guard_admission_duration_seconds",
                        &|_| true,
                    );
                }
                runs.entry((mode, phase)).or_default().push(run);
            }
        }
    }
    drop(hg);
    drop(cp);

    let errors: u64 = runs.values().flatten().map(|r| r.errors).sum();
    let markdown = report(&args, &runs, &apiserver_hist, &ha_guard_hist, started.elapsed());
    println!("{markdown}");
    if let Some(out) = &args.out {
        std::fs::write(out, &markdown).unwrap_or_else(|e| fail(&format!("writing {out}: {e}")));
    }
    if errors > 0 {
        fail(&format!("{errors} writes failed"));
    }
}

fn fail(why: &str) -> ! {
    eprintln!("apiserver bench: {why}");
    std::process::exit(1)
}

/// Deployment `app-i` (2 replicas kept apart) and the PDB `app-i` over it.
fn pair(ns: &str, i: usize) -> [Value; 2] {
    let name = format!("app-{i}");
    [spread_out(deployment(ns, &name, 2)), pdb(ns, &name, &name, json!({"maxUnavailable": 1}))]
}

async fn batch(client: &kube::Client, ns: &str, phase: Phase, objects: usize, concurrency: usize) -> Run {
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kube::api::ApiResource::erase::<Deployment>(&()));
    let pdbs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kube::api::ApiResource::erase::<PodDisruptionBudget>(&()));
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let total = objects * 2;
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (deployments, pdbs, next, errors) = (deployments.clone(), pdbs.clone(), next.clone(), errors.clone());
            let ns = ns.to_string();
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= total {
                        break;
                    }
                    // Alternate Deployment and PDB, so that both kinds are written throughout.
                    let (i, is_pdb) = (n / 2, n % 2 == 1);
                    let api = if is_pdb { &pdbs } else { &deployments };
                    let name = format!("app-{i}");
                    let result = match phase {
                        Phase::Create => {
                            let obj: DynamicObject =
                                serde_json::from_value(pair(&ns, i)[usize::from(is_pdb)].clone()).expect("object");
                            api.create(&PostParams::default(), &obj).await.map(drop)
                        }
                        Phase::Update => {
                            let patch = if is_pdb {
                                json!({"metadata": {"annotations": {"bench.ha-guard.io/updated": "true"}}})
                            } else {
                                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}})
                            };
                            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
                        }
                    };
                    if let Err(e) = result
                        && errors.fetch_add(1, Ordering::Relaxed) < 5 {
                            eprintln!("apiserver bench: {phase:?} {ns}/{name} ({}): {e}", if is_pdb { "PDB" } else { "Deployment" });
                        }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a write task panicked");
    }
    Run { writes: total as u64, errors: errors.load(Ordering::Relaxed), took: started.elapsed(), cpu: [0.0; 4] }
}

/// A cumulative histogram: upper bound -> count, summed over series.
#[derive(Default)]
struct Histogram {
    buckets: BTreeMap<OrdF64, f64>,
    count: f64,
    sum: f64,
}

#[derive(Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Histogram {
    /// Adds `after - before` of the series of histogram `name` whose labels pass `ours`.
    fn add_difference(
        &mut self,
        after: &Metrics,
        before: &Metrics,
        name: &str,
        ours: &dyn Fn(&BTreeMap<String, String>) -> bool,
    ) {
        let value = |m: &Metrics, series: &str, labels: &BTreeMap<String, String>| -> f64 {
            m.0.iter().filter(|(n, l, _)| n == series && l == labels).map(|(_, _, v)| v).sum()
        };
        for (labels, v) in after.all(&format!("{name}_bucket"), &[]) {
            if !ours(&labels) {
                continue;
            }
            let le = match labels.get("le").map(String::as_str) {
                Some("+Inf") => f64::INFINITY,
                Some(x) => x.parse().unwrap_or(f64::NAN),
                None => continue,
            };
            *self.buckets.entry(OrdF64(le)).or_default() += v - value(before, &format!("{name}_bucket"), &labels);
        }
        for (labels, v) in after.all(&format!("{name}_count"), &[]) {
            if ours(&labels) {
                self.count += v - value(before, &format!("{name}_count"), &labels);
            }
        }
        for (labels, v) in after.all(&format!("{name}_sum"), &[]) {
            if ours(&labels) {
                self.sum += v - value(before, &format!("{name}_sum"), &labels);
            }
        }
    }

    /// The q-quantile, interpolated linearly within its bucket (Prometheus' `histogram_quantile`).
    fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q * self.count;
        let mut lower = (0.0, 0.0);
        for (le, &cum) in &self.buckets {
            if cum >= rank {
                if le.0.is_infinite() {
                    return Some(lower.0);
                }
                let width = cum - lower.1;
                let within = if width > 0.0 { (rank - lower.1) / width } else { 1.0 };
                return Some(lower.0 + (le.0 - lower.0) * within);
            }
            lower = (le.0, cum);
        }
        None
    }

    /// The share of observations at or under `bound` (an exact bucket bound).
    fn share_under(&self, bound: f64) -> Option<f64> {
        let cum = self.buckets.iter().find(|(le, _)| (le.0 - bound).abs() < 1e-12).map(|(_, c)| *c)?;
        (self.count > 0.0).then(|| cum / self.count)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn ms(seconds: Option<f64>) -> String {
    seconds.map_or("-".to_string(), |s| format!("{:.2} ms", s * 1e3))
}

fn report(
    args: &Args,
    runs: &BTreeMap<(Mode, Phase), Vec<Run>>,
    apiserver: &BTreeMap<Phase, Histogram>,
    ha_guard: &BTreeMap<Phase, Histogram>,
    elapsed: Duration,
) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Writes through kube-apiserver {} (etcd on loopback), {} rounds, each a batch without and a batch \
         with ha-guard registered (order alternating); a batch is {} Deployments and {} PDBs created, then \
         all {} updated, by {} concurrent tasks of one kube-rs client. `cargo bench --bench apiserver -- \
         --rounds {} --objects {} --concurrency {}`; {:.0} s in all.\n",
        kube_apiserver_version(),
        args.rounds,
        args.objects,
        args.objects,
        args.objects * 2,
        args.concurrency,
        args.rounds,
        args.objects,
        args.concurrency,
        elapsed.as_secs_f64()
    );
    let _ = writeln!(md, "| phase | without ha-guard, writes/s | with ha-guard, writes/s | with / without | errors |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    for phase in [Phase::Create, Phase::Update] {
        let rates = |mode| -> Vec<f64> { runs.get(&(mode, phase)).into_iter().flatten().map(Run::rate).collect() };
        let (without, with) = (rates(Mode::Without), rates(Mode::With));
        let ratios: Vec<f64> = without.iter().zip(&with).map(|(a, b)| b / a).collect();
        let errors: u64 = [Mode::Without, Mode::With]
            .iter()
            .flat_map(|m| runs.get(&(*m, phase)).into_iter().flatten())
            .map(|r| r.errors)
            .sum();
        let list = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(", ");
        let _ = writeln!(
            md,
            "| {} | {:.0} ({}) | {:.0} ({}) | **{:.2}** (per round: {}) | {} |",
            if phase == Phase::Create { "create" } else { "update" },
            median(without.clone()),
            list(&without),
            median(with.clone()),
            list(&with),
            median(ratios.clone()),
            ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
            errors
        );
    }
    let _ = writeln!(
        md,
        "\nRates: the median over rounds (each round's value in brackets); the ratio is the median of the per-round ratios.\n"
    );
    let _ = writeln!(
        md,
        "| phase, registered batches | webhook calls | apiserver: p50 | apiserver: p99 | apiserver: calls ≤ 5 ms | apiserver: mean | ha-guard handler: p50 | p99 |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for phase in [Phase::Create, Phase::Update] {
        let (Some(a), Some(h)) = (apiserver.get(&phase), ha_guard.get(&phase)) else { continue };
        let _ = writeln!(
            md,
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} |",
            if phase == Phase::Create { "create" } else { "update" },
            a.count,
            ms(a.quantile(0.5)),
            ms(a.quantile(0.99)),
            a.share_under(0.005).map_or("-".to_string(), |s| format!("{:.2}%", s * 100.0)),
            ms((a.count > 0.0).then(|| a.sum / a.count)),
            ms(h.quantile(0.5)),
            ms(h.quantile(0.99)),
        );
    }
    let _ = writeln!(
        md,
        "\nCPU time per write (ms, summed over the phase's batches and divided by their writes; \
         `/proc/PID/stat`, 10 ms ticks):\n"
    );
    let _ = writeln!(md, "| phase | mode | {} | all |", PROCESSES.join(" | "));
    let _ = writeln!(md, "|---|---|{}---:|", "---:|".repeat(PROCESSES.len()));
    for phase in [Phase::Create, Phase::Update] {
        for mode in [Mode::Without, Mode::With] {
            let batches: Vec<&Run> = runs.get(&(mode, phase)).into_iter().flatten().collect();
            let writes: u64 = batches.iter().map(|r| r.writes).sum();
            if writes == 0 {
                continue;
            }
            let per: Vec<f64> = (0..PROCESSES.len())
                .map(|i| batches.iter().map(|r| r.cpu[i]).sum::<f64>() * 1e3 / writes as f64)
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} |",
                if phase == Phase::Create { "create" } else { "update" },
                mode.name(),
                per.iter().map(|c| format!("{c:.2}")).collect::<Vec<_>>().join(" | "),
                per.iter().sum::<f64>()
            );
        }
    }
    let _ = writeln!(
        md,
        "\n`apiserver:` is `apiserver_admission_webhook_admission_duration_seconds` summed over \
         `validate.ha-guard.io` and `mutate.ha-guard.io` (one call each per write); its first bucket ends at \
         5 ms, so a p50 or p99 under 5 ms is an interpolation inside that bucket and the share of calls \
         ≤ 5 ms is the exact figure. `ha-guard handler:` is `ha_guard_admission_duration_seconds` (buckets \
         doubling from 50 µs)."
    );
    md
}

fn kube_apiserver_version() -> String {
    let go_mod = repo().join("tests/e2e/control-plane/go.mod");
    std::fs::read_to_string(go_mod)
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.trim_start().starts_with("k8s.io/kubernetes "))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .unwrap_or_else(|| "(version unknown)".to_string())
}

//! Through the real apiserver: what registering ha-guard costs the writes it intercepts, and what
//! the matchConditions save.
//!
//!     cargo bench --bench apiserver            # or benches/run.sh, which adds it to RESULTS.md
//!
//! One control plane (etcd + kube-apiserver from `tests/e2e/control-plane/`, built on first use)
//! and the real `ha-guard serve --cluster live` watching it, both from the end-to-end harness
//! (`tests/support/mod.rs`). Then, in rounds, one batch of writes per mode, the order of the modes
//! rotating from round to round (so that no mode always runs first), and what a batch wrote
//! deleted after it (not measured), so that every batch starts from the same etcd and heap, and
//! each phase only once the apiserver and etcd are quiet again (under a tenth of a core; at most
//! 15 s):
//!
//! - `none`: no admission webhook registered;
//! - `before`: ha-guard's webhook configurations as shipped before the matchConditions work
//!   (commit 15eabd4): the mutating webhook with `workload-or-pdb-without-eviction-policy`, the
//!   validating one without conditions;
//! - `shipped`: the configurations of `manifests/ha-guard.yaml`, pointed at the local ha-guard;
//! - experiments (`--modes`): `all-conditioned` (both webhooks with `changes-what-ha-guard-reads`,
//!   the mutating one with the old PDB condition too), `split` (the validating webhook split in a
//!   CREATE webhook without conditions and an UPDATE one with `changes-what-ha-guard-reads`; the
//!   mutating one as shipped), `mutating-only` (the validating webhook without conditions; the
//!   mutating one as shipped);
//! - `policies` (`--modes`): the shipped webhooks **and** the admission policies `ha-guard policies`
//!   generates for the default configuration, as the chart's `admissionPolicies.enabled` keeps them
//!   (issue 49, Show 4: their cost beside the webhook alone, `shipped`, in one run:
//!   `--modes none,shipped,policies`); applied when the mode starts, deleted when it ends, each
//!   waited for until the apiserver enforces (or stops enforcing) them;
//! - ha-guard's peers (`--modes`, `benches/peers/`): `cel` (ValidatingAdmissionPolicies and
//!   MutatingAdmissionPolicies for the same rules, as far as CEL reaches) and `kyverno` (Kyverno's
//!   admission controller, built on first use, with equivalent ClusterPolicies); with either, the
//!   report adds a peers table (admission step histograms, engine CPU, and which violation classes
//!   each mode caught, from one write per class before the mode's first batch).
//!
//! A batch, in a namespace of its own, is `--objects` apps, each a Deployment (2 replicas, a
//! hostname spread, labels, resources and probes as a chart writes them: about 2 KB as stored),
//! its PDB and its HPA, written as a cluster writes them. **Create phase**, per app: create the
//! Deployment, the PDB and the HPA, then the deployment controller's `deployment.kubernetes.io/revision:
//! "1"` annotation (a metadata-only UPDATE). **Update phase**, per app: a new image (a strategic
//! merge patch, as `kubectl set image`), the revision annotation "2" that the rollout brings, the HPA
//! controller's scale write (`deployments/scale` 2 → 3) and a tool's annotation on the PDB (another
//! metadata-only UPDATE). So 8 writes per app, 3 of them metadata-only, from `--concurrency` tasks
//! of one kube-rs client (each task writes one app's phase in order). Every write must succeed: the
//! objects pass every rule (the mutating webhook adds `unhealthyPodEvictionPolicy` to the PDBs).
//!
//! Reported: writes per second by phase and mode; CPU time per write of each process
//! (`/proc/PID/stat`) and, the figure this bench is for, the **apiserver CPU added per write** by
//! registering ha-guard (a mode's apiserver CPU per write minus that of `none` in the same round);
//! the apiserver's own `apiserver_admission_webhook_admission_duration_seconds` for ha-guard's two
//! webhooks (the time the apiserver waited for a call, its TLS and HTTP/2 included) with ha-guard's
//! `ha_guard_admission_duration_seconds` beside it (the time inside the handler); the calls made
//! and the calls the matchConditions left out (`apiserver_admission_match_condition_exclusions_total`).
//! The apiserver's histogram has buckets at 5, 25, 100 ms, ...: a quantile is interpolated within a
//! bucket as Prometheus' `histogram_quantile` does, so the share of calls under 5 ms is given too.
//!
//! Flags (after `--`): `--rounds N` (3), `--objects N` apps per batch (500), `--concurrency N`
//! (16), `--modes none,before,shipped` (the default; also `all-conditioned`, `split`, `mutating-only`,
//! `cel`, `kyverno`, `policies`; the peers table: `--modes none,shipped,cel,kyverno`),
//! `--out FILE` (also write the markdown there).

#[path = "peers/mod.rs"]
mod peers;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

struct Args {
    rounds: usize,
    objects: usize,
    concurrency: usize,
    modes: Vec<Mode>,
    out: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        rounds: 3,
        objects: 500,
        concurrency: 16,
        modes: vec![Mode::None, Mode::Before, Mode::Shipped],
        out: None,
    };
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
            "--modes" => {
                a.modes = value("--modes")
                    .split(',')
                    .map(|m| {
                        Mode::ALL.iter().copied().find(|x| x.flag() == m).unwrap_or_else(|| {
                            eprintln!("--modes: unknown mode {m:?}");
                            std::process::exit(2)
                        })
                    })
                    .collect();
                a.modes.sort();
                a.modes.dedup();
            }
            "--out" => a.out = Some(value("--out").clone()),
            other => {
                eprintln!(
                    "unknown argument {other:?}: --rounds N --objects N --concurrency N --modes none,before,shipped --out FILE"
                );
                std::process::exit(2)
            }
        }
    }
    if !a.modes.contains(&Mode::None) {
        eprintln!("--modes: `none` is needed (what registering adds is measured against it)");
        std::process::exit(2)
    }
    a
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    None,
    Before,
    Shipped,
    AllConditioned,
    Split,
    MutatingOnly,
    /// ValidatingAdmissionPolicies + MutatingAdmissionPolicies (`benches/peers/cel/`).
    Cel,
    /// Kyverno's admission controller with `benches/peers/kyverno/policies.yaml`.
    Kyverno,
    /// ha-guard's webhooks as shipped plus the admission policies `ha-guard policies` generates
    /// (what the chart's `admissionPolicies.enabled` keeps in the cluster).
    Policies,
}

/// One webhook of a variant: name, operations, the names of its matchConditions (see [`conditions`]).
type Hook = (&'static str, &'static [&'static str], &'static [&'static str]);

/// A variant of the webhook configurations: the validating webhooks, the mutating webhook's
/// conditions, and how many webhooks the probe writes reach (metadata, spec).
struct Variant {
    validating: &'static [Hook],
    mutating: &'static [&'static str],
    probes: (f64, f64),
}

impl Mode {
    const ALL: [Mode; 9] = [
        Mode::None,
        Mode::Before,
        Mode::Shipped,
        Mode::AllConditioned,
        Mode::Split,
        Mode::MutatingOnly,
        Mode::Cel,
        Mode::Kyverno,
        Mode::Policies,
    ];

    fn flag(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Before => "before",
            Mode::Shipped => "shipped",
            Mode::AllConditioned => "all-conditioned",
            Mode::Split => "split",
            Mode::MutatingOnly => "mutating-only",
            Mode::Cel => "cel",
            Mode::Kyverno => "kyverno",
            Mode::Policies => "policies",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::None => "no webhook",
            Mode::Before => {
                "ha-guard's webhooks as shipped before this work (commit 15eabd4): the mutating one with \
                 `workload-or-pdb-without-eviction-policy`, the validating one without conditions"
            }
            Mode::Shipped => "ha-guard's webhooks as `manifests/ha-guard.yaml` ships them now",
            Mode::AllConditioned => {
                "both webhooks with `changes-what-ha-guard-reads` (the mutating one also with \
                 `workload-or-pdb-without-eviction-policy`)"
            }
            Mode::Split => {
                "validating split: CREATE without conditions, UPDATE with `changes-what-ha-guard-reads`; mutating \
                 with `needs-a-mutation` and `changes-what-ha-guard-reads`"
            }
            Mode::MutatingOnly => {
                "validating without conditions; mutating with `needs-a-mutation` and `changes-what-ha-guard-reads`"
            }
            Mode::Cel => {
                "no webhook: the ValidatingAdmissionPolicies and MutatingAdmissionPolicies of `benches/peers/cel/` \
                 (CEL inside kube-apiserver)"
            }
            Mode::Kyverno => {
                "Kyverno's admission controller (out of cluster, on loopback) with the ClusterPolicies of \
                 `benches/peers/kyverno/policies.yaml`"
            }
            Mode::Policies => {
                "ha-guard's webhooks as shipped **and** the admission policies `ha-guard policies` generates for \
                 the default configuration (what `admissionPolicies.enabled` keeps in the cluster)"
            }
        }
    }

    /// The variant a mode registers (`None` for `none` and `shipped`).
    fn variant(self) -> Option<Variant> {
        const BOTH: &[&str] = &["CREATE", "UPDATE"];
        let (validating, mutating, probes): (&'static [Hook], &'static [&'static str], _) = match self {
            Mode::None | Mode::Shipped | Mode::Cel | Mode::Kyverno | Mode::Policies => return None,
            Mode::Before => (&[("validate.ha-guard.io", BOTH, &[])], &[OLD_PDB], (2.0, 2.0)),
            Mode::AllConditioned => {
                (&[("validate.ha-guard.io", BOTH, &[CONDITION])], &[OLD_PDB, CONDITION], (0.0, 2.0))
            }
            Mode::Split => (
                &[
                    ("validate.ha-guard.io", &["CREATE"], &[]),
                    ("validate-update.ha-guard.io", &["UPDATE"], &[CONDITION]),
                ],
                &[NEEDS_MUTATION, CONDITION],
                (0.0, 1.0),
            ),
            Mode::MutatingOnly => (&[("validate.ha-guard.io", BOTH, &[])], &[NEEDS_MUTATION, CONDITION], (1.0, 1.0)),
        };
        Some(Variant { validating, mutating, probes })
    }

    /// Whether the mode registers ha-guard's webhooks.
    fn is_ha_guard(self) -> bool {
        !matches!(self, Mode::None | Mode::Cel | Mode::Kyverno)
    }

    /// Registers what the mode needs (and nothing else), waiting until the apiserver uses it. One
    /// engine at a time: whatever the previous mode had is taken away first.
    fn configure(self, cp: &ControlPlane, hg: &HaGuard, peers: &mut peers::Peers) -> Result<(), String> {
        // First: the generated MutatingAdmissionPolicies add what the mutating webhook adds, so the
        // check that it is no longer called below would see their patch.
        if self == Mode::Policies {
            generated_on(cp)?;
        } else {
            generated_off(cp)?;
        }
        if !self.is_ha_guard() {
            for w in [Webhooks::Mutating, Webhooks::Validating] {
                if cp.kubectl(&["get", w.resource(), "ha-guard"]).ok() {
                    unregister(cp, w)?;
                }
            }
        }
        if self != Mode::Cel {
            peers.cel_off(cp)?;
        }
        if self != Mode::Kyverno {
            peers.kyverno_off(cp)?;
        }

        match self {
            Mode::None => return Ok(()),
            Mode::Cel => return peers.cel_on(cp),
            Mode::Kyverno => return peers.kyverno_on(cp),
            _ => {}
        }
        let shipped = webhook_configurations(hg);
        let Some(Variant { validating, mutating, probes: (metadata, spec) }) = self.variant() else {
            // As shipped: the probes as the shipped conditions treat them.
            return register_configurations(cp, hg, &shipped, &[(Probe::Metadata, 0.0), (Probe::Spec, 1.0)]);
        };
        let text = conditions(&shipped);
        let mut docs = shipped;
        for doc in &mut docs {
            let is_mutating = doc["kind"] == Webhooks::Mutating.kind();
            let hooks = doc["webhooks"].as_array_mut().ok_or("no webhooks")?;
            let template = hooks[0].clone();
            let with = |names: &[&str]| -> Value {
                Value::Array(names.iter().map(|n| json!({"name": n, "expression": text[n]})).collect())
            };
            *hooks = if is_mutating {
                let mut m = template;
                m["matchConditions"] = with(mutating);
                vec![m]
            } else {
                validating
                    .iter()
                    .map(|(name, operations, names)| {
                        let mut v = template.clone();
                        v["name"] = json!(name);
                        for rule in v["rules"].as_array_mut().into_iter().flatten() {
                            rule["operations"] = json!(operations);
                        }
                        let obj = v.as_object_mut().expect("a webhook");
                        obj.remove("matchConditions");
                        if !names.is_empty() {
                            obj.insert("matchConditions".into(), with(names));
                        }
                        v
                    })
                    .collect()
            };
        }
        register_configurations(cp, hg, &docs, &[(Probe::Metadata, metadata), (Probe::Spec, spec)])
    }
}

/// The kinds of the generated admission policies, for kubectl.
const GENERATED_KINDS: &str = "validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings";

/// Whether the generated policies are in effect: a server-side dry run of a Deployment with a zero
/// grace period draws the warning of `ha-guard-termination-grace-zero-warn`.
fn generated_live(cp: &ControlPlane) -> bool {
    let canary = pod(deployment("default", "policies-canary", 1), json!({"terminationGracePeriodSeconds": 0}));
    let out = cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &canary.to_string());
    out.stderr.contains("ValidatingAdmissionPolicy 'ha-guard-termination-grace-zero-warn'")
}

/// Creates the admission policies `ha-guard policies` generates (default configuration) and waits
/// until the apiserver enforces them.
fn generated_on(cp: &ControlPlane) -> Result<(), String> {
    let docs = ha_guard::core::policies::generate(&ha_guard::core::config::Config::default(), None);
    let out = cp.kubectl_in(&["apply", "--server-side", "-f", "-"], &yaml_file(&docs));
    if !out.ok() {
        return Err(format!("applying the generated policies: {}", out.output()));
    }
    poll("the generated policies in effect", WAIT, Duration::from_millis(200), || {
        if generated_live(cp) { Ok(()) } else { Err("not yet".into()) }
    })
}

/// Deletes the generated policies, if any, and waits until the apiserver no longer enforces them.
fn generated_off(cp: &ControlPlane) -> Result<(), String> {
    let held = cp.kubectl(&["get", GENERATED_KINDS, "-l", "app.kubernetes.io/managed-by=ha-guard", "-o", "name"]);
    if held.stdout.trim().is_empty() {
        return Ok(());
    }
    let out = cp.kubectl(&["delete", GENERATED_KINDS, "-l", "app.kubernetes.io/managed-by=ha-guard"]);
    if !out.ok() {
        return Err(format!("deleting the generated policies: {}", out.output()));
    }
    poll("the generated policies gone", WAIT, Duration::from_millis(200), || {
        if generated_live(cp) { Err("still in effect".into()) } else { Ok(()) }
    })
}

/// The shipped matchCondition that skips UPDATEs changing nothing ha-guard reads.
const CONDITION: &str = "changes-what-ha-guard-reads";
/// The mutating webhook's only condition before this work.
const OLD_PDB: &str = "workload-or-pdb-without-eviction-policy";
/// A condition that sends the mutating webhook only what a default mutation can change.
const NEEDS_MUTATION: &str = "needs-a-mutation";

/// The expressions of the conditions the variants use: `changes-what-ha-guard-reads` as shipped,
/// the two others as written here (the default configuration's mutations).
fn conditions(shipped: &[Value]) -> BTreeMap<&'static str, String> {
    let changes = shipped
        .iter()
        .flat_map(|d| d["webhooks"].as_array().into_iter().flatten())
        .flat_map(|h| h["matchConditions"].as_array().into_iter().flatten())
        .find(|c| c["name"] == CONDITION)
        .and_then(|c| c["expression"].as_str())
        .unwrap_or_else(|| fail(&format!("{SHIPPED} has no matchCondition {CONDITION}")))
        .to_string();
    BTreeMap::from([
        (CONDITION, changes),
        (
            OLD_PDB,
            "request.resource.resource != 'poddisruptionbudgets' || \
             (has(object.spec) && !has(object.spec.unhealthyPodEvictionPolicy))"
                .to_string(),
        ),
        (
            NEEDS_MUTATION,
            "request.resource.resource == 'poddisruptionbudgets' ? \
             (has(object.spec) && !has(object.spec.unhealthyPodEvictionPolicy)) : \
             (has(object.spec) && has(object.spec.template) && has(object.spec.template.spec) && \
             has(object.spec.template.spec.topologySpreadConstraints) && \
             object.spec.template.spec.topologySpreadConstraints.exists(c, !has(c.labelSelector)))"
                .to_string(),
        ),
    ])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Create,
    Update,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Create => "create",
            Phase::Update => "update",
        }
    }

    /// What each app gets in the phase, in order.
    fn writes(self) -> [Write; 4] {
        match self {
            Phase::Create => [Write::CreateDeployment, Write::CreatePdb, Write::CreateHpa, Write::Revision(1)],
            Phase::Update => [Write::Image, Write::Revision(2), Write::Scale, Write::PdbAnnotation],
        }
    }
}

/// One write of the mix.
#[derive(Clone, Copy, Debug)]
enum Write {
    CreateDeployment,
    CreatePdb,
    CreateHpa,
    /// The deployment controller's `deployment.kubernetes.io/revision` (metadata only).
    Revision(u32),
    /// A new image, as `kubectl set image` sends it.
    Image,
    /// `deployments/scale` to 3, as the HPA controller writes it.
    Scale,
    /// A tool's annotation on the PDB (metadata only).
    PdbAnnotation,
}

impl Write {
    fn what(self) -> &'static str {
        match self {
            Write::CreateDeployment => "create Deployment",
            Write::CreatePdb => "create PDB",
            Write::CreateHpa => "create HPA",
            Write::Revision(_) => "Deployment revision annotation (metadata only)",
            Write::Image => "Deployment image (strategic merge patch)",
            Write::Scale => "deployments/scale 2 → 3",
            Write::PdbAnnotation => "PDB annotation (metadata only)",
        }
    }
}

/// One phase of one batch.
struct Run {
    writes: u64,
    errors: u64,
    took: Duration,
    /// CPU seconds each process spent during the phase, as [`PROCESSES`].
    cpu: [f64; 5],
}

/// Whose CPU time is counted: the processes of the run, all on the same two cores.
const PROCESSES: [&str; 5] = ["kube-apiserver", "etcd", "ha-guard", "Kyverno", "client (this process)"];
/// Indices into [`PROCESSES`].
const HA_GUARD: usize = 2;
const KYVERNO: usize = 3;

/// utime + stime of `pid` in seconds (`/proc/PID/stat` fields 14 and 15, in clock ticks of 10 ms).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Waits until `pids` (the apiserver and etcd) are quiet: together under a tenth of a core over
/// half a second, for at most 15 s. What the previous batch left them to do (its deletions' watch
/// events and garbage, the configuration of a mode, a peer's reports) would otherwise be counted
/// against the next batch, and always against the same mode, the one that follows it in the
/// rotation. Returns how long it waited.
fn settle(pids: &[String]) -> Duration {
    const WINDOW: Duration = Duration::from_millis(500);
    let started = Instant::now();
    let busy = || pids.iter().map(|p| cpu_seconds(p)).sum::<f64>();
    loop {
        let before = busy();
        std::thread::sleep(WINDOW);
        if busy() - before <= WINDOW.as_secs_f64() / 10.0 || started.elapsed() >= Duration::from_secs(15) {
            return started.elapsed();
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

impl Run {
    fn rate(&self) -> f64 {
        self.writes as f64 / self.took.as_secs_f64()
    }

    /// CPU milliseconds per write of process `i`.
    fn per_write(&self, i: usize) -> f64 {
        self.cpu[i] * 1e3 / self.writes as f64
    }
}

/// What the apiserver's metrics say of one mode and phase, summed over its batches.
#[derive(Default)]
struct Seen {
    /// `apiserver_admission_step_admission_duration_seconds` of the mutating (`admit`) and the
    /// validating (`validate`) step: every plugin of the step, webhooks and policies included.
    step_admit: Histogram,
    step_validate: Histogram,
    /// The engine's webhooks (`apiserver_admission_webhook_admission_duration_seconds`).
    apiserver: Histogram,
    ha_guard: Histogram,
    /// Calls left out by a matchCondition of ha-guard's webhooks.
    excluded: f64,
}

fn main() {
    let args = args();
    let started = Instant::now();
    let load_before = loadavg();
    eprintln!("apiserver bench: starting etcd + kube-apiserver (built on first use) and ha-guard");
    let cp = ControlPlane::start().unwrap_or_else(|e| fail(&format!("control plane: {e}")));
    let hg = HaGuard::start(&cp).unwrap_or_else(|e| fail(&format!("ha-guard: {e}")));
    let mut peers = peers::Peers::new(&cp);
    if args.modes.contains(&Mode::Kyverno) {
        eprintln!("apiserver bench: setting Kyverno up (built on first use: benches/peers/kyverno/build.sh)");
        peers.kyverno_setup(&cp).unwrap_or_else(|e| fail(&format!("Kyverno: {e}")));
    }
    let mut caught: BTreeMap<Mode, Vec<(peers::Case, peers::Outcome)>> = BTreeMap::new();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let client = cp.kube_client(&rt);

    let mut runs: BTreeMap<(Mode, Phase), Vec<Run>> = BTreeMap::new();
    let mut seen: BTreeMap<(Mode, Phase), Seen> = BTreeMap::new();
    let pid_file = |name: &str| {
        std::fs::read_to_string(cp.dir().join(name))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|e| fail(&format!("{}: {e}", cp.dir().join(name).display())))
    };
    let mut pids = [
        pid_file("apiserver.pid"),
        pid_file("etcd.pid"),
        hg.pid().map(|p| p.to_string()).unwrap_or_else(|| fail("ha-guard has no pid")),
        String::new(),
        "self".to_string(),
    ];
    for round in 0..args.rounds {
        let mut order = args.modes.clone();
        let len = order.len();
        order.rotate_left(round % len);
        for mode in order {
            mode.configure(&cp, &hg, &mut peers).unwrap_or_else(|e| fail(&format!("{}: {e}", mode.name())));
            // Kyverno runs only in its own mode (its pid changes from batch to batch).
            pids[KYVERNO] = peers.kyverno_pid().map_or_else(String::new, |p| p.to_string());
            let cpu_now = || -> [f64; 5] { std::array::from_fn(|i| cpu_seconds(&pids[i])) };
            if round == 0 {
                // Which violations the mode's engine catches: once, outside the measured batches.
                caught.insert(mode, peers::caught(&cp, &format!("caught-{}", mode.flag())));
            }
            let ns = format!("bench-{}-{round}", mode.flag());
            cp.namespace(&ns, &[]);
            for phase in [Phase::Create, Phase::Update] {
                let settled = settle(&pids[..2]);
                let before = (cp.metrics(), hg.metrics());
                let cpu_before = cpu_now();
                let mut run = rt.block_on(batch(&client, &ns, phase, args.objects, args.concurrency));
                let cpu_after = cpu_now();
                run.cpu = std::array::from_fn(|i| cpu_after[i] - cpu_before[i]);
                eprintln!(
                    "apiserver bench: round {} {} {}: {} writes in {:.2?} ({:.0}/s), apiserver {:.3} ms CPU/write, {} errors (quiet after {:.1?})",
                    round + 1,
                    mode.flag(),
                    phase.name(),
                    run.writes,
                    run.took,
                    run.rate(),
                    run.per_write(0),
                    run.errors,
                    settled
                );
                let after = (cp.metrics(), hg.metrics());
                let s = seen.entry((mode, phase)).or_default();
                // The engine's webhooks: ha-guard's, or Kyverno's.
                let ours = |l: &BTreeMap<String, String>| {
                    l.get("name").is_some_and(|n| match mode {
                        Mode::Kyverno => n.contains("kyverno"),
                        _ => mode.is_ha_guard() && n.ends_with(".ha-guard.io"),
                    })
                };
                for (step, h) in [("admit", &mut s.step_admit), ("validate", &mut s.step_validate)] {
                    h.add_difference(
                        &after.0,
                        &before.0,
                        "apiserver_admission_step_admission_duration_seconds",
                        &|l: &BTreeMap<String, String>| l.get("type").is_some_and(|t| t == step),
                    );
                }
                s.apiserver.add_difference(
                    &after.0,
                    &before.0,
                    "apiserver_admission_webhook_admission_duration_seconds",
                    &ours,
                );
                s.ha_guard.add_difference(&after.1, &before.1, "ha_guard_admission_duration_seconds", &|_| true);
                let excluded = |m: &Metrics| -> f64 {
                    m.all("apiserver_admission_match_condition_exclusions_total", &[])
                        .iter()
                        .filter(|(l, _)| ours(l))
                        .map(|(_, v)| v)
                        .sum()
                };
                s.excluded += excluded(&after.0) - excluded(&before.0);
                runs.entry((mode, phase)).or_default().push(run);
            }
            // The next batch starts from the same etcd and apiserver heap (no controller-manager
            // runs here to empty a deleted namespace).
            rt.block_on(cleanup(&client, &ns));
        }
    }
    let kyverno_version = peers.kyverno_version().map(str::to_string);
    drop(peers);
    drop(hg);
    drop(cp);

    let errors: u64 = runs.values().flatten().map(|r| r.errors).sum();
    let mut markdown = report(&args, &runs, &seen, started.elapsed(), (&load_before, &loadavg()));
    if args.modes.iter().any(|m| matches!(m, Mode::Cel | Mode::Kyverno)) {
        markdown.push_str(&peers_report(&args, &runs, &seen, &caught, kyverno_version.as_deref()));
    }
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

/// Deletes what a batch wrote (not measured), and lets the watchers catch up.
async fn cleanup(client: &kube::Client, ns: &str) {
    let api = |r: ApiResource| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &r);
    for r in [
        ApiResource::erase::<HorizontalPodAutoscaler>(&()),
        ApiResource::erase::<PodDisruptionBudget>(&()),
        ApiResource::erase::<Deployment>(&()),
    ] {
        if let Err(e) = api(r).delete_collection(&DeleteParams::default(), &ListParams::default()).await {
            fail(&format!("cleaning {ns} up: {e}"));
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Deployment `app-i` as a chart writes it: 2 replicas kept apart, recommended labels, resources
/// and probes (about 2 KB once stored with the apiserver's defaults).
fn app_deployment(ns: &str, name: &str) -> Value {
    let labels = json!({"app": name, "app.kubernetes.io/name": name, "app.kubernetes.io/instance": name,
        "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "shop-1.4.2"});
    let probe = |path: &str| json!({"httpGet": {"path": path, "port": "http"}, "periodSeconds": 10});
    merge(
        spread_out(deployment(ns, name, 2)),
        json!({
            "metadata": {"labels": labels},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": {
                "containers": [{
                    "name": "app", "image": "nginx:1.27",
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                    "readinessProbe": probe("/ready"), "livenessProbe": probe("/healthz")
                }]
            }}}
        }),
    )
}

async fn batch(client: &kube::Client, ns: &str, phase: Phase, apps: usize, concurrency: usize) -> Run {
    let api = |r: ApiResource| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &r);
    let deployments = api(ApiResource::erase::<Deployment>(&()));
    let pdbs = api(ApiResource::erase::<PodDisruptionBudget>(&()));
    let hpas = api(ApiResource::erase::<HorizontalPodAutoscaler>(&()));
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (deployments, pdbs, hpas) = (deployments.clone(), pdbs.clone(), hpas.clone());
            let (next, errors, ns) = (next.clone(), errors.clone(), ns.to_string());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= apps {
                        break;
                    }
                    let name = format!("app-{i}");
                    for w in phase.writes() {
                        let object = |v: Value| -> DynamicObject { serde_json::from_value(v).expect("object") };
                        let merge_patch = |v: Value| Patch::Merge(v);
                        let pp = PatchParams::default();
                        let result = match w {
                            Write::CreateDeployment => deployments
                                .create(&PostParams::default(), &object(app_deployment(&ns, &name)))
                                .await
                                .map(drop),
                            Write::CreatePdb => pdbs
                                .create(&PostParams::default(), &object(pdb(&ns, &name, &name, json!({"maxUnavailable": 1}))))
                                .await
                                .map(drop),
                            Write::CreateHpa => {
                                hpas.create(&PostParams::default(), &object(hpa(&ns, &name, &name, 2, 5))).await.map(drop)
                            }
                            Write::Revision(n) => deployments
                                .patch(
                                    &name,
                                    &pp,
                                    &merge_patch(json!({"metadata": {"annotations": {"deployment.kubernetes.io/revision": n.to_string()}}})),
                                )
                                .await
                                .map(drop),
                            Write::Image => deployments
                                .patch(
                                    &name,
                                    &pp,
                                    &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}})),
                                )
                                .await
                                .map(drop),
                            Write::Scale => {
                                deployments.patch_scale(&name, &pp, &merge_patch(json!({"spec": {"replicas": 3}}))).await.map(drop)
                            }
                            Write::PdbAnnotation => pdbs
                                .patch(&name, &pp, &merge_patch(json!({"metadata": {"annotations": {"example.com/synced-by": "gitops"}}})))
                                .await
                                .map(drop),
                        };
                        if let Err(e) = result
                            && errors.fetch_add(1, Ordering::Relaxed) < 5
                        {
                            eprintln!("apiserver bench: {} {ns}/{name}: {e}", w.what());
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a write task panicked");
    }
    let writes = (apps * phase.writes().len()) as u64;
    Run { writes, errors: errors.load(Ordering::Relaxed), took: started.elapsed(), cpu: [0.0; 5] }
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
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// `median (min–max)` of `v`, each with `digits` decimals.
fn spread(v: &[f64], digits: usize) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.len() == 1 {
        return format!("{:.*}", digits, v[0]);
    }
    format!("{:.*} ({:.*}–{:.*})", digits, median(v.to_vec()), digits, min, digits, max)
}

/// What `shipped` saves against `before`, from the rounds' paired figures: 1 − mean(`shipped`) ÷
/// mean(`before`), in percent, with mean ± 2 standard errors of the per-round difference as an
/// approximate 95% interval. Not the median of per-round ratios: a round whose `before` adds
/// almost nothing (a few 10 ms ticks over a short batch) makes its ratio swing past ±1,000%.
fn saved(before: &[f64], shipped: &[f64]) -> String {
    let n = before.len().min(shipped.len());
    if n == 0 {
        return "-".into();
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let base = mean(&before[..n]);
    if base <= 0.0 {
        return "- (`before` added nothing)".into();
    }
    let diff: Vec<f64> = before.iter().zip(shipped).map(|(b, s)| b - s).collect();
    let d = mean(&diff);
    let point = format!("{:.0} %", d / base * 100.0);
    if n < 2 {
        return point;
    }
    let sd = (diff.iter().map(|x| (x - d).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    let half = 2.0 * sd / (n as f64).sqrt();
    format!("{point} ({:.0}–{:.0} %)", (d - half) / base * 100.0, (d + half) / base * 100.0)
}

fn ms(seconds: Option<f64>) -> String {
    seconds.map_or("-".to_string(), |s| format!("{:.2} ms", s * 1e3))
}

/// The phases a table row covers: one, or both (the whole mix).
#[derive(Clone, Copy)]
enum Rows {
    One(Phase),
    Mix,
}

impl Rows {
    const ALL: [Rows; 3] = [Rows::One(Phase::Create), Rows::One(Phase::Update), Rows::Mix];

    fn name(self) -> &'static str {
        match self {
            Rows::One(p) => p.name(),
            Rows::Mix => "**the whole mix**",
        }
    }

    fn phases(self) -> &'static [Phase] {
        match self {
            Rows::One(Phase::Create) => &[Phase::Create],
            Rows::One(Phase::Update) => &[Phase::Update],
            Rows::Mix => &[Phase::Create, Phase::Update],
        }
    }
}

/// Per round, process `i`'s CPU milliseconds per write over `rows` in `mode`.
fn per_round(runs: &BTreeMap<(Mode, Phase), Vec<Run>>, mode: Mode, rows: Rows, i: usize) -> Vec<f64> {
    let n = rows.phases().iter().map(|p| runs.get(&(mode, *p)).map_or(0, Vec::len)).min().unwrap_or(0);
    (0..n)
        .map(|round| {
            let batch: Vec<&Run> = rows.phases().iter().map(|p| &runs[&(mode, *p)][round]).collect();
            batch.iter().map(|r| r.cpu[i]).sum::<f64>() * 1e3 / batch.iter().map(|r| r.writes).sum::<u64>() as f64
        })
        .collect()
}

fn report(
    args: &Args,
    runs: &BTreeMap<(Mode, Phase), Vec<Run>>,
    seen: &BTreeMap<(Mode, Phase), Seen>,
    elapsed: Duration,
    load: (&str, &str),
) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let modes = args.modes.join_flags();
    let _ = writeln!(
        md,
        "Writes through kube-apiserver {} (etcd on loopback), {} rounds, each a batch per mode (modes: \
         {modes}; their order rotating by round; each phase started once kube-apiserver and etcd were \
         quiet, under a tenth of a core, or after 15 s); a batch is {} apps (a Deployment, its PDB and its HPA) \
         written as a cluster writes them, {} writes per app ({} of them metadata-only), by {} concurrent \
         tasks of one kube-rs client: {} writes per batch. `cargo bench --bench apiserver -- --rounds {} \
         --objects {} --concurrency {} --modes {modes}`; {:.0} s in all; load average (1, 5, 15 min) \
         before {}, after {}.\n",
        kube_apiserver_version(),
        args.rounds,
        args.objects,
        Phase::Create.writes().len() + Phase::Update.writes().len(),
        Phase::Create
            .writes()
            .iter()
            .chain(&Phase::Update.writes())
            .filter(|w| matches!(w, Write::Revision(_) | Write::PdbAnnotation))
            .count(),
        args.concurrency,
        args.objects * (Phase::Create.writes().len() + Phase::Update.writes().len()),
        args.rounds,
        args.objects,
        args.concurrency,
        elapsed.as_secs_f64(),
        load.0,
        load.1,
    );
    let _ = writeln!(md, "| modes | what is registered |\n|---|---|");
    for m in &args.modes {
        let _ = writeln!(md, "| `{}` | {} |", m.flag(), m.name());
    }
    let _ = writeln!(
        md,
        "\nThe mix, per app: create phase: {}; update phase: {}.\n",
        Phase::Create.writes().map(Write::what).join(", "),
        Phase::Update.writes().map(Write::what).join(", ")
    );

    // The figure this bench is for.
    let registered: Vec<Mode> = args.modes.iter().copied().filter(|m| *m != Mode::None).collect();
    let _ = writeln!(
        md,
        "**kube-apiserver CPU per write** (ms; median over rounds, min–max in brackets). *Added* is the \
         mode's figure minus `none`'s of the same round; *saved* is 1 − mean added(`shipped`) ÷ mean \
         added(`before`) over the rounds, and in brackets that ± two standard errors of the per-round \
         difference (about a 95% interval):\n"
    );
    let mut header = "| phase | `none` |".to_string();
    for m in &registered {
        let _ = write!(header, " `{}` | added by `{}` |", m.flag(), m.flag());
    }
    let both = registered.contains(&Mode::Before) && registered.contains(&Mode::Shipped);
    if both {
        header.push_str(" saved: `shipped` against `before` |");
    }
    let _ = writeln!(md, "{header}\n|---|{}", "---:|".repeat(header.matches('|').count() - 2));
    for rows in Rows::ALL {
        let none = per_round(runs, Mode::None, rows, 0);
        let mut line = format!("| {} | {} |", rows.name(), spread(&none, 3));
        let mut added: BTreeMap<Mode, Vec<f64>> = BTreeMap::new();
        for m in &registered {
            let with = per_round(runs, *m, rows, 0);
            let a: Vec<f64> = with.iter().zip(&none).map(|(w, n)| w - n).collect();
            let _ = write!(line, " {} | {} |", spread(&with, 3), spread(&a, 3));
            added.insert(*m, a);
        }
        if both {
            let _ = write!(line, " **{}** |", saved(&added[&Mode::Before], &added[&Mode::Shipped]));
        }
        let _ = writeln!(md, "{line}");
    }

    let _ = writeln!(md, "\nWrites per second (median over rounds, min–max in brackets):\n");
    let _ = writeln!(
        md,
        "| phase | {} |\n|---|{}",
        args.modes.iter().map(|m| format!("`{}`", m.flag())).collect::<Vec<_>>().join(" | "),
        "---:|".repeat(args.modes.len())
    );
    for phase in [Phase::Create, Phase::Update] {
        let cells: Vec<String> = args
            .modes
            .iter()
            .map(|m| spread(&runs.get(&(*m, phase)).into_iter().flatten().map(Run::rate).collect::<Vec<_>>(), 0))
            .collect();
        let _ = writeln!(md, "| {} | {} |", phase.name(), cells.join(" | "));
    }

    let _ = writeln!(
        md,
        "\nCPU time per write of every process (ms, median over rounds; `/proc/PID/stat`, 10 ms ticks):\n"
    );
    let _ = writeln!(md, "| phase | mode | {} | all |", PROCESSES.join(" | "));
    let _ = writeln!(md, "|---|---|{}---:|", "---:|".repeat(PROCESSES.len()));
    for rows in Rows::ALL {
        for m in &args.modes {
            let per: Vec<f64> = (0..PROCESSES.len()).map(|i| median(per_round(runs, *m, rows, i))).collect();
            let _ = writeln!(
                md,
                "| {} | `{}` | {} | {:.2} |",
                rows.name(),
                m.flag(),
                per.iter().map(|c| format!("{c:.2}")).collect::<Vec<_>>().join(" | "),
                per.iter().sum::<f64>()
            );
        }
    }

    let _ = writeln!(
        md,
        "\nha-guard's webhooks as the apiserver saw them (all rounds; `calls/write`: webhook calls per write; \
         `left out/write`: calls a matchCondition of ha-guard's webhooks left out):\n"
    );
    let _ = writeln!(
        md,
        "| phase | mode | calls/write | left out/write | apiserver: p50 | p99 | calls ≤ 5 ms | mean | ha-guard handler: p50 | p99 |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for phase in [Phase::Create, Phase::Update] {
        for m in &registered {
            let (Some(s), Some(batches)) = (seen.get(&(*m, phase)), runs.get(&(*m, phase))) else { continue };
            let writes: u64 = batches.iter().map(|r| r.writes).sum();
            let (a, h) = (&s.apiserver, &s.ha_guard);
            let _ = writeln!(
                md,
                "| {} | `{}` | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} |",
                phase.name(),
                m.flag(),
                a.count / writes as f64,
                s.excluded / writes as f64,
                ms(a.quantile(0.5)),
                ms(a.quantile(0.99)),
                a.share_under(0.005).map_or("-".to_string(), |s| format!("{:.1}%", s * 100.0)),
                ms((a.count > 0.0).then(|| a.sum / a.count)),
                ms(h.quantile(0.5)),
                ms(h.quantile(0.99)),
            );
        }
    }
    let _ = writeln!(
        md,
        "\n`apiserver:` is `apiserver_admission_webhook_admission_duration_seconds` summed over \
         `validate.ha-guard.io` and `mutate.ha-guard.io`; its first bucket ends at 5 ms, so a p50 or p99 \
         under 5 ms is an interpolation inside that bucket and the share of calls ≤ 5 ms is the exact \
         figure. `ha-guard handler:` is `ha_guard_admission_duration_seconds` (buckets doubling from 50 µs)."
    );
    md
}

trait JoinFlags {
    fn join_flags(&self) -> String;
}

impl JoinFlags for Vec<Mode> {
    fn join_flags(&self) -> String {
        self.iter().map(|m| m.flag()).collect::<Vec<_>>().join(",")
    }
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

/// The peers table: the same mix with no admission, with CEL policies, with ha-guard (`shipped`
/// and the other ha-guard modes run) and with Kyverno, and which violations each caught.
fn peers_report(
    args: &Args,
    runs: &BTreeMap<(Mode, Phase), Vec<Run>>,
    seen: &BTreeMap<(Mode, Phase), Seen>,
    caught: &BTreeMap<Mode, Vec<(peers::Case, peers::Outcome)>>,
    kyverno_version: Option<&str>,
) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let modes = args.modes.join_flags();
    let _ = writeln!(
        md,
        "\n### Peers through the same apiserver\n\nOne run, one kube-apiserver {} (MutatingAdmissionPolicy \
         GA and on by default since 1.36), ha-guard at commit {}, Kyverno {}: `cargo bench --bench apiserver -- --rounds {} \
         --objects {} --concurrency {} --modes {modes}`. One engine at a time is registered; the others' \
         webhooks or policies are taken away (Kyverno's process stopped) before a mode's batches.\n",
        kube_apiserver_version(),
        peers::commit(repo()),
        kyverno_version.unwrap_or("(not run)"),
        args.rounds,
        args.objects,
        args.concurrency,
    );
    // Whole-mix histograms of a mode: both phases summed.
    let merged = |mode: Mode, pick: &dyn Fn(&Seen) -> &Histogram| -> Histogram {
        let mut h = Histogram::default();
        for phase in [Phase::Create, Phase::Update] {
            if let Some(s) = seen.get(&(mode, phase)) {
                let x = pick(s);
                for (le, c) in &x.buckets {
                    *h.buckets.entry(*le).or_default() += c;
                }
                h.count += x.count;
                h.sum += x.sum;
            }
        }
        h
    };
    let steps = |m: Mode| (merged(m, &|s| &s.step_admit), merged(m, &|s| &s.step_validate));
    let p99_sum = |m: Mode| {
        let (a, v) = steps(m);
        a.quantile(0.99).unwrap_or(0.0) + v.quantile(0.99).unwrap_or(0.0)
    };
    let mean_sum = |m: Mode| {
        let (a, v) = steps(m);
        let mean = |h: &Histogram| if h.count > 0.0 { h.sum / h.count } else { 0.0 };
        mean(&a) + mean(&v)
    };
    let engine_cpu = |m: Mode| -> Option<f64> {
        match m {
            Mode::None | Mode::Cel => None,
            Mode::Kyverno => Some(median(per_round(runs, m, Rows::Mix, KYVERNO))),
            _ => Some(median(per_round(runs, m, Rows::Mix, HA_GUARD))),
        }
    };
    let added_apiserver = |m: Mode| -> Vec<f64> {
        let none = per_round(runs, Mode::None, Rows::Mix, 0);
        per_round(runs, m, Rows::Mix, 0).iter().zip(&none).map(|(w, n)| w - n).collect()
    };
    let _ = writeln!(
        md,
        "| row | mode | writes/s create | writes/s update | admit step p50 / p99 / mean | validate step p50 / p99 / mean | \
         added p99 (admit + validate) | engine webhook calls/write, p50 / p99 | apiserver CPU/write (added) | engine CPU/write | \
         violations caught |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let row_of = |m: Mode| match m {
        Mode::None => "(a)",
        Mode::Cel => "(b)",
        Mode::Kyverno => "(d)",
        _ => "(c)",
    };
    for m in &args.modes {
        let rate =
            |phase: Phase| spread(&runs.get(&(*m, phase)).into_iter().flatten().map(Run::rate).collect::<Vec<_>>(), 0);
        let (a, v) = steps(*m);
        let three = |h: &Histogram| {
            format!(
                "{} / {} / {}",
                ms(h.quantile(0.5)),
                ms(h.quantile(0.99)),
                ms((h.count > 0.0).then(|| h.sum / h.count))
            )
        };
        let writes: u64 = [Phase::Create, Phase::Update]
            .iter()
            .flat_map(|p| runs.get(&(*m, *p)).into_iter().flatten())
            .map(|r| r.writes)
            .sum();
        let hooks = merged(*m, &|s| &s.apiserver);
        let hooks = if hooks.count > 0.0 {
            format!(
                "{:.2}, {} / {}",
                hooks.count / writes.max(1) as f64,
                ms(hooks.quantile(0.5)),
                ms(hooks.quantile(0.99))
            )
        } else {
            "-".to_string()
        };
        let apiserver = median(per_round(runs, *m, Rows::Mix, 0));
        let added = if *m == Mode::None { String::new() } else { format!(" ({:+.3})", median(added_apiserver(*m))) };
        let engine = match (m, engine_cpu(*m)) {
            (Mode::Cel, _) => "in the apiserver".to_string(),
            (_, Some(c)) => format!("{c:.3}"),
            _ => "-".to_string(),
        };
        let checks = caught
            .get(m)
            .map_or("-".to_string(), |c| format!("{} of {}", c.iter().filter(|(_, o)| o.caught()).count(), c.len()));
        let _ = writeln!(
            md,
            "| {} | `{}` | {} | {} | {} | {} | {} | {} | {apiserver:.3}{added} | {engine} | {checks} |",
            row_of(*m),
            m.flag(),
            rate(Phase::Create),
            rate(Phase::Update),
            three(&a),
            three(&v),
            if *m == Mode::None { "-".to_string() } else { ms(Some(p99_sum(*m) - p99_sum(Mode::None))) },
            hooks,
        );
    }
    let _ = writeln!(
        md,
        "\nSteps: `apiserver_admission_step_admission_duration_seconds` (type `admit`: the mutating plugins, \
         webhooks and MutatingAdmissionPolicies included; `validate`: the validating ones), all writes of the mode; \
         its buckets end at 5, 25, 100, 500 ms, so a p50 or p99 is interpolated within a bucket and the mean \
         (sum ÷ count) is the exact figure. *Added p99* is the mode's p99 of the admit step plus that of the \
         validate step, minus the same sum for `none`. Webhook calls: \
         `apiserver_admission_webhook_admission_duration_seconds` of the engine's webhooks. CPU: ms per write \
         over the whole mix, median over rounds (`/proc/PID/stat`); *added* is the apiserver's minus `none`'s in \
         the same round; the engine is ha-guard's process, or Kyverno's; CEL runs inside the apiserver.\n"
    );

    // Which violation each engine caught.
    let checked: Vec<Mode> = args.modes.iter().copied().filter(|m| caught.contains_key(m)).collect();
    if let Some(first) = checked.first().and_then(|m| caught.get(m)) {
        let _ = writeln!(
            md,
            "Violations caught (one write per class, after a `web` Deployment with its PDB and a `solo` \
             Deployment without one; `benches/peers/mod.rs`, `cases`): *denied* / *warned* name the \
             ha-guard rule ID in the message, *fixed* is the stored object repaired by a mutation.\n"
        );
        let _ = writeln!(
            md,
            "| ha-guard rule | ha-guard default | needs another object | {} |\n|---|---|---|{}",
            checked.iter().map(|m| format!("`{}`", m.flag())).collect::<Vec<_>>().join(" | "),
            "---|".repeat(checked.len())
        );
        for (i, (case, _)) in first.iter().enumerate() {
            let cells: Vec<String> = checked
                .iter()
                .map(|m| caught[m].get(i).map_or("-".to_string(), |(_, o)| peers::outcome_name(o)))
                .collect();
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {} |",
                case.rule,
                case.default.name(),
                if case.cross_object { "yes" } else { "no" },
                cells.join(" | ")
            );
        }
    }

    // The acceptance figure: ha-guard against Kyverno.
    if args.modes.contains(&Mode::Kyverno) && args.modes.contains(&Mode::Shipped) {
        let added_p99 = |m: Mode| p99_sum(m) - p99_sum(Mode::None);
        let total_cpu = |m: Mode| median(added_apiserver(m)) + engine_cpu(m).unwrap_or(0.0);
        let (hp, kp) = (added_p99(Mode::Shipped), added_p99(Mode::Kyverno));
        let (hm, km) = (mean_sum(Mode::Shipped) - mean_sum(Mode::None), mean_sum(Mode::Kyverno) - mean_sum(Mode::None));
        let (hc, kc) = (total_cpu(Mode::Shipped), total_cpu(Mode::Kyverno));
        let ratio =
            |h: f64, k: f64| if h > 0.0 { format!("{:.1}×", k / h) } else { "n/a (ha-guard added ≤ 0)".to_string() };
        let _ = writeln!(
            md,
            "\n**ha-guard (`shipped`) against Kyverno on this mix**: added p99 admission latency {} against {} \
             ({}); added mean admission latency {} against {} ({}); CPU per write, the engine's own plus what it \
             adds to the apiserver, {hc:.3} ms against {kc:.3} ms ({}).",
            ms(Some(hp)),
            ms(Some(kp)),
            ratio(hp, kp),
            ms(Some(hm)),
            ms(Some(km)),
            ratio(hm, km),
            ratio(hc, kc),
        );
    }
    md
}

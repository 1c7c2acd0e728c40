//! Benchmarks of `ha-guard check` on generated bundles (see benches/README.md).
//!
//! The bundle is a deterministic multi-document YAML stream: 50% Deployments (3-5 KB each), 30%
//! PodDisruptionBudgets, 20% HorizontalPodAutoscalers, spread over 100 namespaces, at 1,000 /
//! 10,000 / 50,000 objects. Groups:
//!
//! - `check/parse+evaluate/N`: from the YAML text, `load::add_text` + `check::check` (what
//!   `ha-guard check -f bundle.yaml` does minus reading the file and printing).
//! - `check/evaluate/N`: `check::check` on the already parsed documents (decode, index, every
//!   rule on every object, decisions, mutation plans).
//! - `engine/evaluate-one/{deployment,pdb,hpa}`: `rules::evaluate` of one subject against a view
//!   (`Index`) of the 10,000-object bundle: the per-request cost of the webhook's rule engine.
//!
//! Environment knobs (all optional):
//! - `HA_GUARD_BENCH_CLOCK=cpu`: measure the thread's CPU time instead of wall time (groups are
//!   then prefixed `cpu:`), for a machine shared with other builds.
//! - `HA_GUARD_BENCH_PHASES=1`: no criterion run; time each phase of `check` once per size and
//!   print the breakdown (`HA_GUARD_BENCH_SIZES=1000,10000` to pick sizes).
//! - `HA_GUARD_BENCH_WRITE=DIR`: also write the bundles to `DIR/bundle-N.yaml` (to profile
//!   `ha-guard check -f` end to end).
//! - `HA_GUARD_BENCH_RSS=1`: no criterion run; run the built binary, `ha-guard check -f
//!   bundle-N.yaml --format json`, on each size and print its wall time and peak RSS (the child's
//!   `ru_maxrss`) against the bundle's size. `HA_GUARD_BENCH_ROUNDS` (default 3) rounds;
//!   `HA_GUARD_BENCH_BINARY=PATH[,PATH...]`: other builds to run interleaved with it (main's, to
//!   compare side by side); `HA_GUARD_BENCH_SIZES` as above.

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};

use ha_guard::check::{self, Options};
use ha_guard::core::config::Config;
use ha_guard::core::model::{Kind, Object, Subject};
use ha_guard::core::view::Index;
use ha_guard::core::{decide, mutations, rules};
use ha_guard::manifest::objects::decode;
use ha_guard::manifest::{self as load, locate};

mod common;
use common::mix;

/// The allocator of the `ha-guard` binary (src/main.rs), so that the bench measures what it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NAMESPACES: usize = 100;
const SIZES: [usize; 3] = [1_000, 10_000, 50_000];

/// Counts per kind for `objects` objects: 50% Deployments, 30% PDBs, 20% HPAs.
fn counts(objects: usize) -> (usize, usize, usize) {
    let deployments = objects / 2;
    let pdbs = objects * 3 / 10;
    (deployments, pdbs, objects - deployments - pdbs)
}

fn namespace(i: usize) -> String {
    format!("team-{:02}", i % NAMESPACES)
}

/// Deployment `i` lives in namespace `i % 100`; PDB `j` covers Deployment `j` and HPA `k`
/// targets Deployment `2k + 1`, so each is in the namespace of the workload it is about.
fn deployment(out: &mut String, i: usize) {
    let ns = namespace(i);
    let name = format!("svc-{i:05}");
    let tier = ["frontend", "backend", "worker", "cache"][i % 4];
    let with_pvc = i % 10 == 7;
    // Workloads with a single-attach volume run one replica; others 2-6.
    let replicas = if with_pvc { 1 } else { 2 + mix(i, 1) % 5 };
    let env_vars = 2 + (mix(i, 2) % 9) as usize;
    let sidecar = mix(i, 3).is_multiple_of(3);
    let hard = if mix(i, 4).is_multiple_of(4) { "DoNotSchedule" } else { "ScheduleAnyway" };
    let strategy = if with_pvc {
        "    type: Recreate\n".to_string()
    } else {
        "    type: RollingUpdate\n    rollingUpdate:\n      maxSurge: 25%\n      maxUnavailable: 0\n".to_string()
    };
    let _ = write!(
        out,
        r#"---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
  labels:
    app.kubernetes.io/name: {name}
    app.kubernetes.io/instance: {name}-prod
    app.kubernetes.io/part-of: {ns}-platform
    app.kubernetes.io/component: {tier}
    app.kubernetes.io/managed-by: Helm
    helm.sh/chart: {name}-1.{minor}.{patch}
  annotations:
    meta.helm.sh/release-name: {name}
    meta.helm.sh/release-namespace: {ns}
    deployment.kubernetes.io/revision: "{rev}"
spec:
  replicas: {replicas}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      app.kubernetes.io/name: {name}
      app.kubernetes.io/instance: {name}-prod
  strategy:
{strategy}  template:
    metadata:
      labels:
        app.kubernetes.io/name: {name}
        app.kubernetes.io/instance: {name}-prod
        app.kubernetes.io/part-of: {ns}-platform
        app.kubernetes.io/component: {tier}
        app.kubernetes.io/version: "1.{minor}.{patch}"
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "9090"
        checksum/config: "{checksum:016x}{checksum:016x}"
    spec:
      serviceAccountName: {name}
      terminationGracePeriodSeconds: 45
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        fsGroup: 10001
        seccompProfile:
          type: RuntimeDefault
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: {hard}
          labelSelector:
            matchLabels:
              app.kubernetes.io/name: {name}
              app.kubernetes.io/instance: {name}-prod
        - maxSkew: 1
          topologyKey: topology.kubernetes.io/zone
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              app.kubernetes.io/name: {name}
      tolerations:
        - key: dedicated
          operator: Equal
          value: {tier}
          effect: NoSchedule
      containers:
        - name: app
          image: registry.example.com/{ns}/{name}:1.{minor}.{patch}
          imagePullPolicy: IfNotPresent
          args: ["--config=/etc/{name}/config.yaml", "--log-format=json", "--port=8080"]
          ports:
            - name: http
              containerPort: 8080
              protocol: TCP
            - name: metrics
              containerPort: 9090
              protocol: TCP
          env:
"#,
        minor = i % 17,
        patch = i % 7,
        rev = 1 + i % 40,
        checksum = mix(i, 5),
    );
    for e in 0..env_vars {
        if e % 5 == 4 {
            let _ = write!(
                out,
                "            - name: SECRET_{e}\n              valueFrom:\n                secretKeyRef:\n                  \
                 name: {name}-secrets\n                  key: key-{e}\n"
            );
        } else {
            let _ = write!(
                out,
                "            - name: SETTING_{e}\n              value: \"value-{:x}\"\n",
                mix(i * 31 + e, 6)
            );
        }
    }
    let _ = write!(
        out,
        r#"          resources:
            requests:
              cpu: {cpu}m
              memory: {mem}Mi
            limits:
              memory: {mem2}Mi
          livenessProbe:
            httpGet:
              path: /healthz
              port: http
            initialDelaySeconds: 10
            periodSeconds: 10
            timeoutSeconds: 2
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: http
            periodSeconds: 5
            failureThreshold: 2
          lifecycle:
            preStop:
              sleep:
                seconds: 10
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
          volumeMounts:
            - name: config
              mountPath: /etc/{name}
              readOnly: true
            - name: tmp
              mountPath: /tmp
"#,
        cpu = 100 + (mix(i, 7) % 8) * 50,
        mem = 128 << (mix(i, 8) % 4),
        mem2 = 256 << (mix(i, 8) % 4),
    );
    if with_pvc {
        out.push_str("            - name: data\n              mountPath: /var/lib/data\n");
    }
    if sidecar {
        let _ = write!(
            out,
            r#"        - name: proxy
          image: registry.example.com/mesh/proxy:2.{minor}
          args: ["proxy", "--upstream=127.0.0.1:8080", "--listen=0.0.0.0:15001"]
          ports:
            - name: proxy
              containerPort: 15001
          resources:
            requests:
              cpu: 50m
              memory: 64Mi
            limits:
              memory: 128Mi
"#,
            minor = i % 9,
        );
    }
    let _ = write!(
        out,
        r#"      volumes:
        - name: config
          configMap:
            name: {name}-config
        - name: tmp
          emptyDir:
            sizeLimit: 256Mi
"#
    );
    if with_pvc {
        let _ =
            write!(out, "        - name: data\n          persistentVolumeClaim:\n            claimName: {name}-data\n");
    }
}

fn pdb(out: &mut String, j: usize) {
    let ns = namespace(j);
    let target = format!("svc-{j:05}");
    let budget = match j % 4 {
        0 => "minAvailable: 1".to_string(),
        1 => "minAvailable: \"50%\"".to_string(),
        2 => "maxUnavailable: 1".to_string(),
        _ => "maxUnavailable: \"25%\"".to_string(),
    };
    let policy = if j.is_multiple_of(3) { "\n  unhealthyPodEvictionPolicy: AlwaysAllow" } else { "" };
    let _ = write!(
        out,
        r#"---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {target}
  namespace: {ns}
  labels:
    app.kubernetes.io/name: {target}
    app.kubernetes.io/managed-by: Helm
spec:
  {budget}{policy}
  selector:
    matchLabels:
      app.kubernetes.io/name: {target}
      app.kubernetes.io/instance: {target}-prod
"#
    );
}

fn hpa(out: &mut String, k: usize) {
    let d = 2 * k + 1;
    let ns = namespace(d);
    let target = format!("svc-{d:05}");
    let min = 2 + k % 3;
    let max = min + 2 + (mix(k, 9) % 10) as usize;
    let _ = write!(
        out,
        r#"---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {target}
  namespace: {ns}
  labels:
    app.kubernetes.io/name: {target}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {target}
  minReplicas: {min}
  maxReplicas: {max}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: 70
    - type: Resource
      resource:
        name: memory
        target:
          type: Utilization
          averageUtilization: 80
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 300
      policies:
        - type: Pods
          value: 1
          periodSeconds: 60
"#
    );
}

/// The whole bundle, kinds interleaved as a rendered chart per workload would be.
fn bundle(objects: usize) -> String {
    let (deployments, pdbs, hpas) = counts(objects);
    let mut out = String::with_capacity(deployments * 4_500 + (pdbs + hpas) * 700);
    for i in 0..deployments {
        deployment(&mut out, i);
        if i < pdbs {
            pdb(&mut out, i);
        }
        if i % 2 == 1 && i / 2 < hpas {
            hpa(&mut out, i / 2);
        }
    }
    out
}

fn options() -> Options {
    Options { complete: false, namespace: "default".into(), config: Config::default() }
}

fn load_text(text: String) -> load::Loaded {
    let mut loaded = load::Loaded::default();
    load::add_text(&mut loaded, "bundle.yaml".into(), None, text, false);
    loaded
}

/// What `ha-guard check` does with the text: each document decoded as soon as it is read, its
/// JSON tree dropped, then checked.
fn load_and_check(text: String, options: &Options) -> (load::Loaded<check::Prepared>, check::Report) {
    let mut loaded = load::Loaded::default();
    let prepare = |value: serde_json::Value| check::Prepared::of(&value, &options.namespace);
    load::add_text_mapped(&mut loaded, "bundle.yaml".into(), None, text, false, &prepare);
    let report = check::check_loaded(&mut loaded, options);
    (loaded, report)
}

/// Size of the bundle and of its Deployments.
fn describe(objects: usize, text: &str) -> String {
    let sizes: Vec<usize> = (0..counts(objects).0)
        .map(|i| {
            let mut s = String::new();
            deployment(&mut s, i);
            s.len()
        })
        .collect();
    format!(
        "{:.1} MB of YAML, Deployments of {}..{} bytes (mean {})",
        text.len() as f64 / 1e6,
        sizes.iter().min().unwrap(),
        sizes.iter().max().unwrap(),
        sizes.iter().sum::<usize>() / sizes.len()
    )
}

/// Checks that the generator does what it says, once per size, before timing it.
fn sanity(objects: usize, text: &str) {
    let loaded = load_text(text.to_string());
    assert!(loaded.errors.is_empty(), "{:?}", &loaded.errors[..1]);
    assert_eq!(loaded.documents.len(), objects);
    let report = check::check(&loaded, &options());
    assert_eq!(report.objects, objects);
    assert!(report.errors.is_empty());
    eprintln!(
        "bundle {objects}: {}; {} findings, {} fixes",
        describe(objects, text),
        report.findings.len(),
        report.fixes.len()
    );
}

fn bench_check<M: Measurement>(c: &mut Criterion<M>, prefix: &str) {
    let write_dir = std::env::var_os("HA_GUARD_BENCH_WRITE");
    let texts: Vec<(usize, String)> = SIZES.iter().map(|&n| (n, bundle(n))).collect();
    if let Some(dir) = &write_dir {
        for (n, text) in &texts {
            std::fs::write(std::path::Path::new(dir).join(format!("bundle-{n}.yaml")), text).unwrap();
        }
    }

    // Setup happens inside the closures (which only run when the benchmark is selected), so that
    // `cargo bench --bench check -- engine` does not parse 50,000 objects first.
    let mut parse_group = c.benchmark_group(format!("{prefix}check/parse+evaluate"));
    parse_group.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_secs(1));
    for (n, text) in &texts {
        // The 50,000 size takes seconds per iteration: 10 samples (criterion's minimum) in ~1 min.
        parse_group.measurement_time(Duration::from_secs(if *n >= 50_000 { 40 } else { 10 }));
        parse_group.throughput(Throughput::Elements(*n as u64));
        let mut checked = false;
        parse_group.bench_with_input(BenchmarkId::from_parameter(n), text, |b, text| {
            // The generator is the same at every size: checking it at 50,000 would cost one more
            // 20-second iteration.
            if !checked && *n <= 10_000 {
                sanity(*n, text);
                checked = true;
            }
            let options = options();
            // The text is copied outside the timing (add_text takes it by value, as `load` does);
            // the Loaded and Report are dropped outside the timing too.
            b.iter_batched(|| text.clone(), |text| load_and_check(text, &options), criterion::BatchSize::PerIteration);
        });
    }
    parse_group.finish();

    let mut eval_group = c.benchmark_group(format!("{prefix}check/evaluate"));
    eval_group.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_secs(1));
    for (n, text) in &texts {
        eval_group.measurement_time(Duration::from_secs(if *n >= 50_000 { 20 } else { 5 }));
        eval_group.throughput(Throughput::Elements(*n as u64));
        let mut loaded = None;
        eval_group.bench_function(BenchmarkId::from_parameter(n), |b| {
            let loaded = loaded.get_or_insert_with(|| load_text(text.clone()));
            let options = options();
            b.iter(|| check::check(black_box(&*loaded), &options));
        });
    }
    eval_group.finish();
}

/// `rules::evaluate` of one subject against the Index of the 10,000-object bundle.
fn bench_engine<M: Measurement>(c: &mut Criterion<M>, prefix: &str) {
    // Built on first use only (see bench_check).
    let setup = std::cell::LazyCell::new(|| {
        let loaded = load_text(bundle(10_000));
        let mut errors = Vec::new();
        let decoded = decode(&loaded.documents, "default", &mut errors);
        assert!(errors.is_empty());
        let mut index = Index::new();
        for d in &decoded {
            index.insert_object(&d.object);
        }
        let find = |kind: Kind, name: &str| -> Subject {
            decoded
                .iter()
                .find_map(|d| match &d.object {
                    Object::Subject(s) if s.id().kind == kind && s.id().name == name => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{kind} {name} not in the bundle"))
        };
        // Deployment svc-00001 (namespace team-01) is covered by PDB svc-00001 (minAvailable 50%)
        // and scaled by HPA svc-00001: each subject's rules look at the other two and at the 50
        // Deployments / 30 PDBs / 20 HPAs of its namespace.
        let subjects = [
            find(Kind::Deployment, "svc-00001"),
            find(Kind::PodDisruptionBudget, "svc-00001"),
            find(Kind::HorizontalPodAutoscaler, "svc-00001"),
        ];
        (index, subjects)
    });
    let config = Config::default();
    let mut group = c.benchmark_group(format!("{prefix}engine/evaluate-one"));
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(1));
    for (i, label) in ["deployment", "pdb", "hpa"].into_iter().enumerate() {
        group.bench_function(BenchmarkId::new(label, "view-of-10000"), |b| {
            let (index, subjects) = &*setup;
            let subject = &subjects[i];
            b.iter(|| rules::evaluate(black_box(subject), index, &config));
        });
    }
    group.finish();
}

/// CPU time of the benchmarking thread (`CLOCK_THREAD_CPUTIME_ID`), for a machine shared with
/// other builds: wall time there includes the time spent waiting for a core. `check` is
/// single-threaded, so this is the work it does.
struct ThreadCpuTime(WallTime);

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

unsafe extern "C" {
    fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
}

fn thread_cpu() -> Duration {
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut t = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec (64-bit Linux layout) that the call fills in.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, d: &Duration) -> f64 {
        d.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.0.formatter()
    }
}

/// `HA_GUARD_BENCH_PHASES=1`: instead of benchmarking, time each phase of `check` once per size
/// (wall and thread CPU time) and print where the time goes.
fn phases() {
    fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration, Duration) {
        let (w, c) = (Instant::now(), thread_cpu());
        let out = f();
        (out, w.elapsed(), thread_cpu() - c)
    }
    let sizes: Vec<usize> = std::env::var("HA_GUARD_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').map(|n| n.trim().parse().expect("HA_GUARD_BENCH_SIZES: numbers")).collect())
        .unwrap_or(SIZES.to_vec());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for n in sizes {
        let text = bundle(n);
        println!("\n{n} objects: {}", describe(n, &text));
        println!("  {:<44} {:>8} {:>8} {:>8}", "phase", "wall ms", "cpu ms", "cpu us/object");
        let mut rows: Vec<(&str, Duration, Duration)> = Vec::new();
        let (loaded, w, c) = timed(|| load_text(text.clone()));
        rows.push(("load::add_text (split + YAML -> Value)", w, c));
        let mut errors = Vec::new();
        let (decoded, w, c) = timed(|| decode(&loaded.documents, "default", &mut errors));
        rows.push(("manifest::objects::decode (Value -> typed, defaults)", w, c));
        let (index, w, c) = timed(|| {
            let mut index = Index::new();
            for d in &decoded {
                index.insert_object(&d.object);
            }
            index
        });
        rows.push(("Index::insert_object (the view)", w, c));
        let config = Config::default();
        let subjects: Vec<&Subject> = decoded
            .iter()
            .filter_map(|d| match &d.object {
                Object::Subject(s) => Some(s),
                _ => None,
            })
            .collect();
        let (evals, w, c) = timed(|| subjects.iter().map(|s| rules::evaluate(s, &index, &config)).collect::<Vec<_>>());
        rows.push(("rules::evaluate (every rule, every object)", w, c));
        let ((), w, c) = timed(|| {
            for (s, e) in subjects.iter().zip(evals) {
                let ctx = decide::Context { subject_exemptions: s.exemptions(), ..Default::default() };
                black_box(decide::decide(e, &s.id().namespace, &index, &config, &ctx));
            }
        });
        rows.push(("decide::decide", w, c));
        let ((), w, c) = timed(|| {
            for s in &subjects {
                black_box(mutations::plan(s, &index, &config));
            }
        });
        rows.push(("mutations::plan", w, c));
        let ((), w, c) = timed(|| {
            let mut locator = locate::Locator::new(&loaded.sources);
            for d in &decoded {
                black_box(locator.locate(&d.origin, ""));
            }
        });
        rows.push(("locate (2nd YAML parse, positions)", w, c));
        let (_, w, c) = timed(|| check::check(&loaded, &options()));
        rows.push(("= check::check, all of the above but add_text", w, c));
        let (_, w, c) = timed(|| load_and_check(text.clone(), &options()));
        rows.push(("= add_text_mapped + check_loaded (the command)", w, c));
        for (what, w, c) in rows {
            println!("  {what:<44} {:>8.0} {:>8.0} {:>8.1}", ms(w), ms(c), c.as_secs_f64() * 1e6 / n as f64);
        }
    }
}

/// `ru_maxrss` and the rest of `struct rusage` (64-bit Linux: two `timeval`s, 14 `long`s).
#[repr(C)]
struct Rusage([i64; 18]);

unsafe extern "C" {
    fn wait4(pid: i32, status: *mut i32, options: i32, usage: *mut Rusage) -> i32;
}

/// Runs `binary check -f bundle --format json` (the report to /dev/null): its wall time, its peak
/// resident set in bytes, and its exit code.
fn run_check(binary: &str, bundle: &Path) -> (Duration, u64, i32) {
    let start = Instant::now();
    // Reaped by wait4 below, which also gives its resource usage (std's wait does not).
    #[allow(clippy::zombie_processes)]
    let child = Command::new(binary)
        .args(["check", "--format", "json", "-f"])
        .arg(bundle)
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{binary}: {e}"));
    let (mut status, mut usage) = (0, Rusage([0; 18]));
    // SAFETY: `child` is our child, not waited for yet; `status` and `usage` are valid for writes
    // (`usage` has the layout of 64-bit Linux's `struct rusage`).
    let pid = unsafe { wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4 failed");
    // ru_maxrss is in KiB on Linux.
    (start.elapsed(), usage.0[4] as u64 * 1024, (status >> 8) & 0xff)
}

/// `HA_GUARD_BENCH_RSS=1`: the whole command's peak memory and wall time on each bundle, as a
/// user runs it; with `HA_GUARD_BENCH_BINARY`, other builds interleaved with this one.
fn peak_rss() {
    let sizes: Vec<usize> = std::env::var("HA_GUARD_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').map(|n| n.trim().parse().expect("HA_GUARD_BENCH_SIZES: numbers")).collect())
        .unwrap_or(vec![1_000, 10_000]);
    let rounds: usize = std::env::var("HA_GUARD_BENCH_ROUNDS").map_or(3, |v| v.parse().expect("HA_GUARD_BENCH_ROUNDS"));
    let mut binaries = vec![env!("CARGO_BIN_EXE_ha-guard").to_string()];
    if let Ok(others) = std::env::var("HA_GUARD_BENCH_BINARY") {
        binaries.extend(others.split(',').map(str::to_string));
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    for n in sizes {
        let path = dir.path().join(format!("bundle-{n}.yaml"));
        let text = bundle(n);
        std::fs::write(&path, &text).expect("writing the bundle");
        let bytes = text.len() as f64;
        println!("\n{n} objects: {} ({} bytes)", describe(n, &text), text.len());
        drop(text);
        println!("  {:<8} {:>8} {:>10} {:>9} {:>5}  binary", "round", "wall ms", "peak MB", "x input", "exit");
        for round in 1..=rounds {
            for binary in &binaries {
                let (wall, rss, code) = run_check(binary, &path);
                println!(
                    "  {round:<8} {:>8.0} {:>10.1} {:>9.2} {code:>5}  {binary}",
                    wall.as_secs_f64() * 1e3,
                    rss as f64 / 1e6,
                    rss as f64 / bytes
                );
            }
        }
    }
}

fn main() {
    if std::env::var_os("HA_GUARD_BENCH_PHASES").is_some() {
        phases();
        return;
    }
    if std::env::var_os("HA_GUARD_BENCH_RSS").is_some() {
        peak_rss();
        return;
    }
    // HA_GUARD_BENCH_CLOCK=cpu: measure thread CPU time instead of wall time (names get `cpu:`).
    if std::env::var("HA_GUARD_BENCH_CLOCK").is_ok_and(|v| v == "cpu") {
        let mut c = Criterion::default().with_measurement(ThreadCpuTime(WallTime)).configure_from_args();
        bench_check(&mut c, "cpu:");
        bench_engine(&mut c, "cpu:");
        c.final_summary();
    } else {
        let mut c = Criterion::default().configure_from_args();
        bench_check(&mut c, "");
        bench_engine(&mut c, "");
        c.final_summary();
    }
}

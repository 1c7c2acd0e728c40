//! End-to-end harness shared by `tests/e2e_*.rs`: a real etcd + kube-apiserver
//! ([`ControlPlane`], `tests/e2e/control-plane/`), the real `ha-guard serve` binary watching it
//! ([`HaGuard`]), webhook configurations generated from the shipped `manifests/ha-guard.yaml`, a `kubectl`
//! runner, and a step runner ([`Steps`]).
//!
//! Nothing is mocked and everything is started and stopped here:
//! - ports are chosen at run time (the kernel picks free ones);
//! - every process is stopped by a `Drop` guard, also when a step panics;
//! - if the test process itself dies without unwinding (SIGKILL, a timeout, ctrl-c), a small
//!   reaper process (its own process group, so ctrl-c spares it) notices that its stdin pipe from
//!   the test process closed and stops ha-guard, kube-apiserver and etcd by their pid files, then
//!   removes the temporary directory;
//! - a control plane that cannot be built or started is a test failure with the reason, never a
//!   skip.
//!
//! Each test binary runs one `#[test]` that starts one control plane and one ha-guard and runs
//! named steps against them, each in its own namespace ([`Steps`] reports every failed step by
//! name). Statics are never dropped in Rust, so a shared fixture in a `OnceLock` would leave its
//! processes behind; one test function with locals is what makes the `Drop` guards run.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub mod balancer;
pub mod helm;
pub mod reports;

/// The kinds the live view watches, as ha-guard's metrics label them. This control plane has no
/// KEDA CRD: ScaledObjects count as synced and empty (`src/live.rs`).
pub const WATCHED_KINDS: [&str; 12] = [
    "Deployment",
    "StatefulSet",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "PersistentVolumeClaim",
    "Node",
    "Namespace",
    "Service",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ScaledObject",
    "APIService",
];

/// How long any single wait in the harness may take before it is a failure.
pub const WAIT: Duration = Duration::from_secs(60);

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn control_plane_script(name: &str) -> PathBuf {
    repo().join("tests/e2e/control-plane").join(name)
}

/// Polls `f` every `every` until it returns `Some`, for at most `timeout`; the error says what was
/// awaited and the last state seen.
pub fn poll<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let started = Instant::now();
    loop {
        match f() {
            Ok(t) => return Ok(t),
            Err(last) if started.elapsed() >= timeout => {
                return Err(format!("{what}: still not the case after {:?}; last: {last}", timeout));
            }
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// Last `n` lines of a file (for failure messages).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// --- build -----------------------------------------------------------------------------------

/// Builds (once per machine: cached outside the repository) and returns the kube-apiserver
/// binary, by running `tests/e2e/control-plane/build.sh`, which also installs etcd if missing.
/// The first build takes minutes; later calls take well under a second.
pub fn kube_apiserver() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = control_plane_script("build.sh");
            let started = Instant::now();
            let out = Command::new(&script)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                return Err(format!(
                    "{} failed ({}), so there is no control plane to test against:\n{stderr}",
                    script.display(),
                    out.status
                ));
            }
            let path = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
            if !path.is_file() {
                return Err(format!("{} printed no kube-apiserver path: {stdout:?}\n{stderr}", script.display()));
            }
            eprintln!("[e2e] kube-apiserver: {} (build.sh took {:.1?})", path.display(), started.elapsed());
            Ok(path)
        })
        .clone()
}

/// Builds (once per machine: cached outside the repository) the whole control plane's binaries
/// (`build.sh --all`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) and
/// returns them by name. The first build takes minutes; later calls well under a second.
pub fn control_plane_binaries() -> Result<BTreeMap<String, PathBuf>, String> {
    static BUILT: OnceLock<Result<BTreeMap<String, PathBuf>, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = control_plane_script("build.sh");
            let started = Instant::now();
            let out = Command::new(&script)
                .arg("--all")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                return Err(format!("{} --all failed ({}):\n{stderr}", script.display(), out.status));
            }
            let bins: BTreeMap<String, PathBuf> = stdout
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(name, path)| (name.to_string(), PathBuf::from(path.trim())))
                .collect();
            if let Some((name, path)) = bins.iter().find(|(_, p)| !p.is_file()) {
                return Err(format!("{} --all: no {name} at {}\n{stderr}", script.display(), path.display()));
            }
            eprintln!("[e2e] control plane binaries: {bins:?} (build.sh --all took {:.1?})", started.elapsed());
            Ok(bins)
        })
        .clone()
}

/// Builds (once per machine: cached outside the repository) and returns the pinned helm, by
/// running `tests/e2e/helm/build.sh` (from helm's Go module; ~2.5 min the first time, then a
/// no-op). A helm that cannot be built is a test failure with the script's output, never a skip.
pub fn helm() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = repo().join("tests/e2e/helm/build.sh");
            let started = Instant::now();
            let out = Command::new(&script)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                return Err(format!("{} failed ({}):\n{stderr}", script.display(), out.status));
            }
            let path = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
            if !path.is_file() {
                return Err(format!("{} printed no helm path: {stdout:?}\n{stderr}", script.display()));
            }
            eprintln!("[e2e] helm: {} (build.sh took {:.1?})", path.display(), started.elapsed());
            Ok(path)
        })
        .clone()
}

// --- reaper ----------------------------------------------------------------------------------

/// Stops whatever is left under a root directory when the test process dies without running its
/// `Drop`s. It waits on a pipe from this process: "done" means all was stopped normally; end of
/// file means this process is gone.
struct Reaper {
    child: Child,
    stdin: Option<ChildStdin>,
}

const REAPER: &str = r#"
root="$1"; stop="$2"
IFS= read -r line
[ "$line" = done ] && exit 0
for p in "$root"/*.pid; do
  [ -s "$p" ] || continue
  pid="$(cat "$p")"
  # Only a process of ours: its command line names the root directory.
  if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$root"; then kill -KILL "$pid"; fi
done
[ -d "$root/cp" ] && "$stop" "$root/cp" >/dev/null 2>&1
rm -rf "$root"
"#;

impl Reaper {
    fn spawn(root: &Path) -> Result<Reaper, String> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(REAPER)
            .arg("ha-guard-e2e-reaper")
            .arg(root)
            .arg(control_plane_script("stop.sh"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start the reaper (bash): {e}"))?;
        let stdin = child.stdin.take();
        Ok(Reaper { child, stdin })
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"done\n");
        }
        let _ = self.child.wait();
    }
}

// --- control plane ---------------------------------------------------------------------------

/// A Pod label kwok's stages read (`tests/e2e/control-plane/kwok-stages.yaml`): a Pod carrying it
/// becomes Running but never Ready, as with a failing readiness probe.
pub const NOT_READY: &str = "e2e.ha-guard.io/not-ready";

/// etcd + kube-apiserver on loopback (`start.sh` in a temporary directory; `Drop` runs `stop.sh`).
/// The temporary directory is also where [`HaGuard`] keeps its certificates, logs and pid file.
pub struct ControlPlane {
    // Field order is drop order: the reaper is told "done" only after `drop` stopped everything,
    // and the directory goes last.
    reaper: Reaper,
    /// `None` once kept (`HA_GUARD_E2E_KEEP`).
    root: Option<tempfile::TempDir>,
    root_path: PathBuf,
    stopped: bool,
}

impl ControlPlane {
    /// Builds the control plane if needed, then starts it. Every failure says why.
    pub fn start() -> Result<ControlPlane, String> {
        Self::start_with(|_| Ok(Vec::new()))
    }

    /// [`ControlPlane::start`] with more kube-apiserver flags: `prepare` gets the temporary root
    /// directory (where it may write files the flags name, e.g. an AdmissionConfiguration) before
    /// the apiserver starts, and returns the flags (`--name=value`, one an item).
    pub fn start_with(prepare: impl FnOnce(&Path) -> Result<Vec<String>, String>) -> Result<ControlPlane, String> {
        let apiserver = kube_apiserver()?;
        Self::start_script("start.sh", vec![("KUBE_APISERVER", apiserver)], prepare)
    }

    /// A whole control plane without kubelets (`up.sh`): etcd + kube-apiserver as
    /// [`ControlPlane::start`], plus kube-controller-manager, kube-scheduler and kwok, which keeps
    /// the Nodes of [`ControlPlane::kwok_nodes`] Ready and plays their kubelets (Pods bound there
    /// become Running and Ready, or Running and never Ready with the label
    /// [`NOT_READY`]; deleted Pods go away). What the controllers decide (a PDB's status, a
    /// replacement's node, an eviction's answer) is theirs, not the test's.
    pub fn start_with_controllers() -> Result<ControlPlane, String> {
        let bins = control_plane_binaries()?;
        let env = [
            ("KUBE_APISERVER", "kube-apiserver"),
            ("KUBE_CONTROLLER_MANAGER", "kube-controller-manager"),
            ("KUBE_SCHEDULER", "kube-scheduler"),
            ("KWOK", "kwok"),
        ]
        .into_iter()
        .map(|(var, name)| bins.get(name).cloned().map(|p| (var, p)).ok_or(format!("build.sh --all built no {name}")))
        .collect::<Result<Vec<_>, String>>()?;
        Self::start_script("up.sh", env, |_| Ok(Vec::new()))
    }

    fn start_script(
        name: &str,
        binaries: Vec<(&str, PathBuf)>,
        prepare: impl FnOnce(&Path) -> Result<Vec<String>, String>,
    ) -> Result<ControlPlane, String> {
        let root = tempfile::Builder::new()
            .prefix("ha-guard-e2e-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let reaper = Reaper::spawn(root.path())?;
        let root_path = root.path().to_path_buf();
        let mut cp = ControlPlane { reaper, root: Some(root), root_path, stopped: false };
        let flags = prepare(cp.root())?;
        if let Some(bad) = flags.iter().find(|f| f.contains('\n') || !f.starts_with("--")) {
            return Err(format!("not a kube-apiserver flag: {bad:?}"));
        }
        let script = control_plane_script(name);
        let started = Instant::now();
        let out = Command::new(&script)
            .arg(cp.dir())
            .envs(binaries)
            .env("KUBE_APISERVER_EXTRA_FLAGS", flags.join("\n"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            cp.stopped = true; // start.sh stops what it started when it fails
            return Err(format!(
                "{} {} failed ({}):\n{}",
                script.display(),
                cp.dir().display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        eprintln!(
            "[e2e] control plane up in {:.1?}: kubectl --kubeconfig {}",
            started.elapsed(),
            cp.kubeconfig().display()
        );
        Ok(cp)
    }

    pub fn root(&self) -> &Path {
        &self.root_path
    }

    /// start.sh's directory: kubeconfig, pid files, logs.
    pub fn dir(&self) -> PathBuf {
        self.root_path.join("cp")
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir().join("kubeconfig")
    }

    /// `https://127.0.0.1:PORT` of the apiserver, from the kubeconfig.
    pub fn server(&self) -> String {
        let text = std::fs::read_to_string(self.kubeconfig()).unwrap_or_default();
        text.lines().find_map(|l| l.trim().strip_prefix("server: ")).map(str::to_string).unwrap_or_default()
    }

    /// A kubeconfig for this control plane (its server and CA) whose only credential is `token`
    /// (e.g. a ServiceAccount's, from `kubectl create token`), written to `out`.
    pub fn token_kubeconfig(&self, token: &str, out: &Path) -> PathBuf {
        let admin = std::fs::read_to_string(self.kubeconfig()).expect("kubeconfig");
        let ca = admin
            .lines()
            .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
            .expect("certificate-authority-data in the admin kubeconfig")
            .to_string();
        std::fs::write(
            out,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {}\n    \
                 certificate-authority-data: {ca}\nusers:\n- name: token\n  user:\n    token: {token}\n\
                 contexts:\n- name: e2e\n  context: {{cluster: e2e, user: token}}\ncurrent-context: e2e\n",
                self.server()
            ),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        out.to_path_buf()
    }

    /// The apiserver's own `/metrics`.
    pub fn metrics(&self) -> Metrics {
        Metrics::parse(&self.kubectl(&["get", "--raw", "/metrics"]).success().stdout)
    }

    /// A kube-rs client of this control plane (admin), made on `rt`.
    pub fn kube_client(&self, rt: &tokio::runtime::Runtime) -> kube::Client {
        rt.block_on(async {
            let kc = kube::config::Kubeconfig::read_from(self.kubeconfig()).expect("kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
            kube::Client::try_from(config).expect("client")
        })
    }

    /// Runs kubectl against this control plane.
    pub fn kubectl(&self, args: &[&str]) -> Kubectl {
        kubectl(&self.kubeconfig(), args, None)
    }

    /// Runs kubectl with `stdin` (YAML or JSON), e.g. `cp.kubectl_in(&["apply", "-f", "-"], yaml)`.
    pub fn kubectl_in(&self, args: &[&str], stdin: &str) -> Kubectl {
        kubectl(&self.kubeconfig(), args, Some(stdin))
    }

    /// `kubectl apply -f -` of `doc` (YAML or JSON).
    pub fn apply(&self, doc: impl std::fmt::Display) -> Kubectl {
        self.kubectl_in(&["apply", "-f", "-"], &doc.to_string())
    }

    /// Creates a namespace with labels (must succeed).
    pub fn namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}});
        self.apply(&ns).success();
    }

    /// Creates Node objects that a scheduler would consider: labelled with their hostname and
    /// without the `not-ready` taint the apiserver's TaintNodesByCondition admission adds (no
    /// kubelet runs here to clear it, as it would once the node is Ready).
    pub fn nodes(&self, names: &[&str]) {
        for name in names {
            let node = json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}});
            self.apply(&node).success();
            let taints = self.kubectl(&["get", "node", name, "-o", "jsonpath={.spec.taints}"]).success().stdout;
            if taints.contains("node.kubernetes.io/not-ready") {
                self.kubectl(&["taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-"]).success();
            }
        }
    }

    /// Nodes that kwok manages (annotated `kwok.x-k8s.io/node=fake`), each `(name, labels)` with
    /// `kubernetes.io/hostname` added, and waits until every one is Ready (only with
    /// [`ControlPlane::start_with_controllers`]).
    pub fn kwok_nodes(&self, nodes: &[(&str, &[(&str, &str)])]) {
        if nodes.is_empty() {
            return;
        }
        // One apply of them all: a test may want a hundred.
        let docs: Vec<Value> = nodes
            .iter()
            .map(|(name, labels)| {
                let mut l: BTreeMap<&str, &str> = labels.iter().copied().collect();
                l.insert("kubernetes.io/hostname", name);
                json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": l, "annotations": {"kwok.x-k8s.io/node": "fake"}}})
            })
            .collect();
        self.kubectl_in(&["apply", "-f", "-"], &yaml_file(&docs)).success();
        let names: Vec<&str> = nodes.iter().map(|(n, _)| *n).collect();
        let mut args = vec!["wait", "--for=condition=Ready", "--timeout=60s"];
        let refs: Vec<String> = names.iter().map(|n| format!("node/{n}")).collect();
        args.extend(refs.iter().map(String::as_str));
        self.kubectl(&args).success();
    }

    /// Stops etcd and kube-apiserver (`stop.sh`); also done on drop.
    pub fn stop(&mut self) -> Result<(), String> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let script = control_plane_script("stop.sh");
        let out = Command::new(&script)
            .arg(self.dir())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// Stops only kube-apiserver (`apiserver.sh stop`: SIGTERM, then SIGKILL after `grace`);
    /// etcd keeps running. A terminating kube-apiserver stops listening at once but keeps the
    /// watches it serves open for a while (about 20 s here), so a short `grace` saves time.
    pub fn stop_apiserver(&self, grace: Duration) -> Result<(), String> {
        self.apiserver_script("stop", &[("STOP_TIMEOUT", grace.as_secs().max(1).to_string())])
    }

    /// Starts kube-apiserver again with the command line it had (`apiserver.sh start`: same port,
    /// certificates, flags and etcd data) and waits for its `/readyz`.
    pub fn start_apiserver(&self) -> Result<(), String> {
        self.apiserver_script("start", &[])
    }

    fn apiserver_script(&self, what: &str, env: &[(&str, String)]) -> Result<(), String> {
        let script = control_plane_script("apiserver.sh");
        let out = Command::new(&script)
            .arg(what)
            .arg(self.dir())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {what} failed ({}):\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    pub fn apiserver_log_tail(&self, n: usize) -> String {
        tail(&self.dir().join("apiserver.log"), n)
    }
}

impl Drop for ControlPlane {
    /// Stops etcd and kube-apiserver; the directory (certificates, logs, etcd data) is removed
    /// unless `HA_GUARD_E2E_KEEP` is set, for looking at the logs after a failure.
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("[e2e] {e}");
        }
        if let (Some(_), Some(root)) = (std::env::var_os("HA_GUARD_E2E_KEEP"), self.root.take()) {
            eprintln!("[e2e] HA_GUARD_E2E_KEEP: logs kept in {}", root.keep().display());
        }
    }
}

// --- kubectl ---------------------------------------------------------------------------------

/// What a kubectl run returned.
#[derive(Clone, Debug)]
pub struct Kubectl {
    pub command: String,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `kubectl --kubeconfig KUBECONFIG --request-timeout 30s ARGS` (with `stdin` if given).
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Kubectl {
    let command = format!("kubectl {}", args.join(" "));
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(kubeconfig).arg("--request-timeout=30s").args(args);
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {command}: {e} (is kubectl on PATH?)"));
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        let text = text.to_string();
        // Written from a thread so a large input cannot deadlock against a full stdout pipe.
        std::thread::spawn(move || {
            let _ = pipe.write_all(text.as_bytes());
        });
    }
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{command}: {e}"));
    Kubectl {
        command,
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

impl Kubectl {
    pub fn ok(&self) -> bool {
        self.code == 0
    }

    /// Both streams, for assertions on what the user sees and for failure messages.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    fn show(&self) -> String {
        format!("`{}` exited {}\n--- stdout\n{}\n--- stderr\n{}", self.command, self.code, self.stdout, self.stderr)
    }

    /// Panics unless it exited 0.
    #[track_caller]
    pub fn success(self) -> Self {
        assert!(self.ok(), "expected success: {}", self.show());
        self
    }

    /// Panics unless it failed.
    #[track_caller]
    pub fn failure(self) -> Self {
        assert!(!self.ok(), "expected a failure: {}", self.show());
        self
    }

    /// Panics unless stdout or stderr contains every one of `needles`.
    #[track_caller]
    pub fn shows(self, needles: &[&str]) -> Self {
        let all = self.output();
        for n in needles {
            assert!(all.contains(n), "expected {n:?} in the output of {}", self.show());
        }
        self
    }

    /// Panics if stdout or stderr contains any of `needles`.
    #[track_caller]
    pub fn hides(self, needles: &[&str]) -> Self {
        let all = self.output();
        for n in needles {
            assert!(!all.contains(n), "did not expect {n:?} in the output of {}", self.show());
        }
        self
    }

    /// The `Warning: ...` lines kubectl printed (one per admission warning).
    pub fn warnings(&self) -> Vec<String> {
        self.stderr.lines().filter_map(|l| l.strip_prefix("Warning: ")).map(str::to_string).collect()
    }

    /// Panics unless kubectl printed a `Warning: [rule] ...` line for each of `rules`.
    #[track_caller]
    pub fn warns(self, rules: &[&str]) -> Self {
        let warnings = self.warnings();
        for r in rules {
            let prefix = format!("[{r}] ");
            assert!(
                warnings.iter().any(|w| w.starts_with(&prefix)),
                "expected `Warning: [{r}] ...` from {}",
                self.show()
            );
        }
        self
    }

    /// Panics if kubectl printed a warning of ha-guard's (`Warning: [...`). The apiserver's own
    /// warnings (e.g. "a null labelSelector results in matching no pod") do not count.
    #[track_caller]
    pub fn no_warnings(self) -> Self {
        let ours: Vec<String> = self.warnings().into_iter().filter(|w| w.starts_with('[')).collect();
        assert!(ours.is_empty(), "expected no warnings from ha-guard, got {ours:?} from {}", self.show());
        self
    }

    /// Panics unless the write was refused by ha-guard's validating webhook with each of `rules`
    /// in the message, as kubectl shows it.
    #[track_caller]
    pub fn denied(self, rules: &[&str]) -> Self {
        let this = self.failure().shows(&["admission webhook \"validate.ha-guard.io\" denied the request"]);
        for r in rules {
            assert!(this.stderr.contains(&format!("[{r}] ")), "expected the denial to name [{r}]: {}", this.show());
        }
        this
    }

    /// stdout as JSON (for `-o json`).
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.show()))
    }
}

/// A multi-document YAML file of `docs`, as a user would keep it.
pub fn yaml_file(docs: &[Value]) -> String {
    docs.iter()
        .map(|d| serde_saphyr::to_string(d).unwrap_or_else(|e| panic!("cannot render YAML: {e}")))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Parses one or more YAML documents (kubectl's `-o yaml` output, test manifests).
pub fn yaml_docs(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("bad YAML ({e}):\n{text}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

// --- ha-guard --------------------------------------------------------------------------------

/// Two distinct free loopback ports (the kernel picks them; released just before use).
fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let b = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    (a.local_addr().expect("addr").port(), b.local_addr().expect("addr").port())
}

/// A free loopback port (the kernel picks it; released at once), for a port that must be known
/// before ha-guard starts (e.g. named in the apiserver's admission kubeconfig).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind 127.0.0.1:0").port()
}

/// How to start ha-guard ([`HaGuard::spawn_spec`]). [`Spec::new`] is what [`HaGuard::start`]
/// does: `--cluster live` with the control plane's kubeconfig, certificates from
/// `ha-guard certs`, free ports.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Its directory under the control plane's root ([`HaGuard::dir_of`]: certificates, log) and
    /// the name of its pid file.
    pub name: String,
    /// `None`: no KUBECONFIG and a HOME without `.kube` (no cluster to find).
    pub kubeconfig: Option<PathBuf>,
    /// `--cluster`.
    pub cluster: String,
    /// Run `ha-guard certs` into its directory first; `false`: the caller has put `ca.crt`,
    /// `tls.crt` and `tls.key` there (files or symlinks).
    pub generate_certs: bool,
    /// The webhook port; `None`: a free one.
    pub webhook_port: Option<u16>,
    /// More `serve` flags, e.g. `--config FILE`, `--client-ca FILE`, `--reload-interval 0.5`.
    pub args: Vec<String>,
    /// More environment variables, e.g. `POD_NAMESPACE`.
    pub env: Vec<(String, String)>,
}

impl Spec {
    pub fn new(cp: &ControlPlane, name: &str) -> Spec {
        Spec {
            name: name.to_string(),
            kubeconfig: Some(cp.kubeconfig()),
            cluster: "live".to_string(),
            generate_certs: true,
            webhook_port: None,
            args: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// The real `ha-guard serve` binary with `--cluster live`, watching the control plane.
pub struct HaGuard {
    name: String,
    dir: PathBuf,
    pidfile: PathBuf,
    /// `None`: no KUBECONFIG and a HOME without `.kube` (no cluster to find).
    kubeconfig: Option<PathBuf>,
    /// `--cluster`: `live` unless said otherwise.
    cluster: String,
    /// More `serve` flags ([`Spec::args`]).
    args: Vec<String>,
    /// More environment variables ([`Spec::env`]).
    env: Vec<(String, String)>,
    pub webhook_port: u16,
    pub probe_port: u16,
    child: Option<Child>,
}

impl HaGuard {
    /// Starts ha-guard against `cp` and waits until `/readyz` answers 200. Ports are picked free
    /// just before the start; if another process took one meanwhile, it tries again with others.
    pub fn start(cp: &ControlPlane) -> Result<HaGuard, String> {
        Self::start_spec(cp, &Spec::new(cp, "ha-guard"))
    }

    /// Starts ha-guard as `spec` says and waits until `/readyz` answers 200 (with free ports:
    /// tried again with others if one was taken meanwhile).
    pub fn start_spec(cp: &ControlPlane, spec: &Spec) -> Result<HaGuard, String> {
        let mut last = String::new();
        for _ in 0..3 {
            let mut hg = Self::spawn_spec(cp, spec)?;
            match hg.wait_ready(WAIT) {
                Ok(()) => return Ok(hg),
                Err(e) if e.contains("Address already in use") && spec.webhook_port.is_none() => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Starts ha-guard (`--cluster live`) with its own `kubeconfig` (named `name` within the
    /// control plane's directory), without waiting for readiness.
    pub fn spawn_with(cp: &ControlPlane, name: &str, kubeconfig: &Path) -> Result<HaGuard, String> {
        Self::spawn_cluster(cp, name, Some(kubeconfig), "live")
    }

    /// Starts ha-guard with `--cluster cluster`, with `kubeconfig` or with none to be found,
    /// without waiting for readiness.
    pub fn spawn_cluster(
        cp: &ControlPlane,
        name: &str,
        kubeconfig: Option<&Path>,
        cluster: &str,
    ) -> Result<HaGuard, String> {
        let spec =
            Spec { kubeconfig: kubeconfig.map(Path::to_path_buf), cluster: cluster.to_string(), ..Spec::new(cp, name) };
        Self::spawn_spec(cp, &spec)
    }

    /// The directory of the ha-guard named `name` (certificates, log): where a caller puts the
    /// certificates of a [`Spec`] with `generate_certs: false`.
    pub fn dir_of(root: &Path, name: &str) -> PathBuf {
        root.join(name)
    }

    /// Starts ha-guard as `spec` says, without waiting for readiness.
    pub fn spawn_spec(cp: &ControlPlane, spec: &Spec) -> Result<HaGuard, String> {
        let dir = Self::dir_of(cp.root(), &spec.name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if spec.generate_certs {
            let out = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
                .args(["certs", "--out"])
                .arg(&dir)
                .args(["--dns", "localhost", "--ip", "127.0.0.1"])
                .output()
                .map_err(|e| format!("cannot run ha-guard certs: {e}"))?;
            if !out.status.success() {
                return Err(format!("ha-guard certs failed: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
        let (webhook_port, probe_port) = match spec.webhook_port {
            Some(port) => (
                port,
                loop {
                    let p = free_port();
                    if p != port {
                        break p;
                    }
                },
            ),
            None => free_ports(),
        };
        let mut hg = HaGuard {
            name: spec.name.clone(),
            pidfile: cp.root().join(format!("{}.pid", spec.name)),
            dir,
            kubeconfig: spec.kubeconfig.clone(),
            cluster: spec.cluster.clone(),
            args: spec.args.clone(),
            env: spec.env.clone(),
            webhook_port,
            probe_port,
            child: None,
        };
        hg.spawn()?;
        Ok(hg)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("{}: {e}", self.log_path().display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ha-guard"));
        match &self.kubeconfig {
            Some(k) => cmd.env("KUBECONFIG", k),
            None => cmd.env_remove("KUBECONFIG").env("HOME", &self.dir),
        };
        let child = cmd
            .arg("serve")
            .args(["--listen", &format!("127.0.0.1:{}", self.webhook_port)])
            .args(["--probe-listen", &format!("127.0.0.1:{}", self.probe_port)])
            .arg("--tls-cert")
            .arg(self.dir.join("tls.crt"))
            .arg("--tls-key")
            .arg(self.dir.join("tls.key"))
            .args(["--cluster", &self.cluster, "--log-format", "json"])
            // Readiness drops at once on SIGTERM: nothing routes through a Service here.
            .args(["--shutdown-delay", "0.2"])
            .args(&self.args)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", env!("CARGO_BIN_EXE_ha-guard")))?;
        std::fs::write(&self.pidfile, child.id().to_string())
            .map_err(|e| format!("{}: {e}", self.pidfile.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("ha-guard.log")
    }

    /// Its directory (certificates, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pid of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.log_path(), n)
    }

    /// `ca.crt` as the webhook configurations' `caBundle` wants it (base64 of the PEM).
    pub fn ca_bundle(&self) -> String {
        base64(&std::fs::read(self.dir.join("ca.crt")).expect("ca.crt written by ha-guard certs"))
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.webhook_port)
    }

    /// The exit status once it has exited (`None` while it runs or after [`HaGuard::stop`]).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits until `/readyz` answers 200; fails at once if the process exited.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        poll("ha-guard /readyz 200", timeout, Duration::from_millis(100), || {
            if !self.running() {
                return Ok(Err(format!("ha-guard is not running; its log:\n{}", self.log_tail(30))));
            }
            match self.get("/readyz") {
                Ok((200, _)) => Ok(Ok(())),
                Ok((code, body)) => Err(format!("{code} {}", body.trim())),
                Err(e) => Err(e),
            }
        })?
    }

    /// Stops ha-guard as Kubernetes would (SIGTERM, then SIGKILL after 20 s) and waits for it.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let _ = std::fs::remove_file(&self.pidfile);
    }

    /// Kills it with SIGKILL (a crash, an OOM kill: nothing is cleaned up) and returns how it
    /// ended; `None` if it was not running.
    pub fn kill(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        let status = child.wait().ok();
        let _ = std::fs::remove_file(&self.pidfile);
        status
    }

    /// Starts it again on the same ports (the webhook configurations name them) and waits until
    /// it is ready.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.spawn()?;
        self.wait_ready(WAIT)
    }

    /// GET on the probe port (plain HTTP): status and body.
    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        http_get(self.probe_port, path)
    }

    /// `/metrics`, or why it could not be read.
    pub fn metrics_opt(&self) -> Result<Metrics, String> {
        match self.get("/metrics")? {
            (200, body) => Ok(Metrics::parse(&body)),
            (code, body) => Err(format!("GET /metrics: {code} {body}")),
        }
    }

    pub fn metrics(&self) -> Metrics {
        let (code, body) = self.get("/metrics").unwrap_or_else(|e| panic!("GET /metrics: {e}"));
        assert_eq!(code, 200, "GET /metrics: {body}");
        Metrics::parse(&body)
    }

    /// `ha_guard_cache_objects{kind}`.
    pub fn cache_objects(&self, kind: &str) -> u64 {
        self.metrics().get("ha_guard_cache_objects", &[("kind", kind)]).unwrap_or(0.0) as u64
    }

    /// Waits until `ha_guard_cache_objects{kind}` satisfies `ok`. This is how a test waits for
    /// ha-guard's live view to have seen a write: the view follows the watch streams and is only
    /// eventually consistent (see the doc comment of `src/live.rs`), so the second write of a
    /// cross-object pair is only judged against the first once the first has reached the cache.
    #[track_caller]
    pub fn wait_cache(&self, kind: &str, what: &str, ok: impl Fn(u64) -> bool) -> u64 {
        poll(&format!("ha_guard_cache_objects{{kind=\"{kind}\"}} {what}"), WAIT, Duration::from_millis(50), || {
            let n = self.cache_objects(kind);
            if ok(n) { Ok(n) } else { Err(format!("{n}")) }
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `write` (which must create `kind` objects) and waits until the cache holds `n` more.
    #[track_caller]
    pub fn created<T>(&self, kind: &str, n: u64, write: impl FnOnce() -> T) -> T {
        let before = self.cache_objects(kind);
        let out = write();
        self.wait_cache(kind, &format!(">= {}", before + n), |c| c >= before + n);
        out
    }
}

impl Drop for HaGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

/// A minimal HTTP/1.1 GET over plain TCP (the probe port), bounded by timeouts.
pub fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))
        .map_err(|e| format!("connect 127.0.0.1:{port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("GET {path}: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| format!("GET {path}: no HTTP response: {text:?}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("GET {path}: bad status line: {head:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    Ok((code, if chunked { dechunk(body) } else { body.to_string() }))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Samples of a Prometheus text exposition.
#[derive(Clone, Debug, Default)]
pub struct Metrics(pub Vec<(String, BTreeMap<String, String>, f64)>);

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let (name_labels, value) = match line.rsplit_once(' ') {
                Some(x) => x,
                None => continue,
            };
            let (name, labels) = match name_labels.split_once('{') {
                Some((n, rest)) => (n.to_string(), parse_labels(rest.trim_end_matches('}'))),
                None => (name_labels.to_string(), BTreeMap::new()),
            };
            if let Ok(v) = value.parse::<f64>() {
                samples.push((name, labels, v));
            }
        }
        Metrics(samples)
    }

    /// The sample of `name` whose labels include all of `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.all(name, labels).first().map(|(_, v)| *v)
    }

    /// The samples of `name` whose labels include all of `labels`.
    pub fn all(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(BTreeMap<String, String>, f64)> {
        self.0
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, l, v)| (l.clone(), *v))
            .collect()
    }

    /// The sum of the samples of `name` whose labels include all of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.all(name, labels).iter().map(|(_, v)| v).sum()
    }
}

/// The apiserver's counts of its calls to ha-guard's webhooks (`*.ha-guard.io`), from its own
/// `/metrics` ([`ControlPlane::metrics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WebhookCalls {
    /// `apiserver_admission_webhook_request_total`.
    pub calls: f64,
    /// Denied by the webhook: `apiserver_admission_webhook_rejection_count{error_type="no_error"}`.
    pub denied: f64,
    /// Calls that failed (no usable answer): `fail_open` plus `rejected_for_errors`.
    pub failed: f64,
    /// Failed and let through (failurePolicy Ignore): `apiserver_admission_webhook_fail_open_count`.
    pub fail_open: f64,
    /// Failed and the write refused (failurePolicy Fail): `apiserver_admission_webhook_rejection_count`
    /// with `error_type` `calling_webhook_error` or `apiserver_internal_error`.
    pub rejected_for_errors: f64,
}

impl WebhookCalls {
    pub fn of(m: &Metrics) -> WebhookCalls {
        let ours = |l: &BTreeMap<String, String>| l.get("name").is_some_and(|n| n.ends_with(".ha-guard.io"));
        let of = |name: &str, f: &dyn Fn(&BTreeMap<String, String>) -> bool| -> f64 {
            m.all(name, &[]).iter().filter(|(l, _)| ours(l) && f(l)).map(|(_, v)| v).sum()
        };
        let no_error = |l: &BTreeMap<String, String>| l.get("error_type").map(String::as_str) == Some("no_error");
        let rejections = "apiserver_admission_webhook_rejection_count";
        let fail_open = of("apiserver_admission_webhook_fail_open_count", &|_| true);
        let rejected_for_errors = of(rejections, &|l| !no_error(l));
        WebhookCalls {
            calls: of("apiserver_admission_webhook_request_total", &|_| true),
            denied: of(rejections, &no_error),
            failed: fail_open + rejected_for_errors,
            fail_open,
            rejected_for_errors,
        }
    }

    /// What happened between `before` and `self`.
    pub fn since(&self, before: &WebhookCalls) -> WebhookCalls {
        WebhookCalls {
            calls: self.calls - before.calls,
            denied: self.denied - before.denied,
            failed: self.failed - before.failed,
            fail_open: self.fail_open - before.fail_open,
            rejected_for_errors: self.rejected_for_errors - before.rejected_for_errors,
        }
    }
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        let key: String =
            chars.by_ref().take_while(|c| *c != '=').collect::<String>().trim_start_matches(',').trim().to_string();
        if key.is_empty() || chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(key, value);
    }
    out
}

pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

// --- webhook registration --------------------------------------------------------------------

/// Which of the two shipped webhook configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Webhooks {
    Mutating,
    Validating,
}

impl Webhooks {
    pub fn kind(self) -> &'static str {
        match self {
            Webhooks::Mutating => "MutatingWebhookConfiguration",
            Webhooks::Validating => "ValidatingWebhookConfiguration",
        }
    }

    pub fn resource(self) -> &'static str {
        match self {
            Webhooks::Mutating => "mutatingwebhookconfiguration",
            Webhooks::Validating => "validatingwebhookconfiguration",
        }
    }
}

/// The shipped install (the chart rendered with its defaults, `scripts/render-manifests.sh`).
pub const SHIPPED: &str = "manifests/ha-guard.yaml";

/// The documents of the shipped install.
pub fn shipped_manifests() -> Vec<Value> {
    let path = repo().join(SHIPPED);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    yaml_docs(&text)
}

/// The shipped webhook configurations (from [`SHIPPED`]: same rules, failurePolicy, timeouts,
/// namespaceSelector, matchConditions, ...) pointed at `hg`: each `clientConfig.service` becomes
/// `url: https://127.0.0.1:PORT<service.path>` with `caBundle` set to ha-guard's CA.
pub fn webhook_configurations(hg: &HaGuard) -> Vec<Value> {
    webhook_configurations_at(hg, hg.webhook_port)
}

/// [`webhook_configurations`] with the calls sent to `port` (a relay or balancer in front of
/// ha-guard) instead of ha-guard's own.
pub fn webhook_configurations_at(hg: &HaGuard, port: u16) -> Vec<Value> {
    let path = repo().join(SHIPPED);
    let mut docs: Vec<Value> = shipped_manifests()
        .into_iter()
        .filter(|d| d["kind"] == Webhooks::Mutating.kind() || d["kind"] == Webhooks::Validating.kind())
        .collect();
    assert_eq!(docs.len(), 2, "{}: expected the mutating and the validating configuration", path.display());
    for doc in &mut docs {
        let hooks = doc["webhooks"]
            .as_array_mut()
            .unwrap_or_else(|| panic!("{}: a configuration without webhooks", path.display()));
        for hook in hooks {
            let service_path = hook["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or_else(|| {
                    panic!("{}: webhook {} has no clientConfig.service.path", path.display(), hook["name"])
                })
                .to_string();
            let url = format!("https://127.0.0.1:{port}{service_path}");
            hook["clientConfig"] = json!({"url": url, "caBundle": hg.ca_bundle()});
        }
    }
    docs
}

/// The shipped configuration of `which`, as JSON for `kubectl apply -f -`.
pub fn webhook_configuration(hg: &HaGuard, which: Webhooks) -> Value {
    webhook_configurations(hg)
        .into_iter()
        .find(|d| d["kind"] == which.kind())
        .unwrap_or_else(|| panic!("{SHIPPED} has no {}", which.kind()))
}

/// A Deployment that ha-guard always refuses, whatever the view (`prestop-exceeds-grace`).
pub fn canary_deny(namespace: &str) -> String {
    slow_prestop(deployment(namespace, "canary", 1)).to_string()
}

/// A PDB without `unhealthyPodEvictionPolicy` (the mutating webhook adds it).
pub fn canary_mutate(namespace: &str) -> String {
    format!(
        r#"apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: canary, namespace: {namespace}}}
spec:
  maxUnavailable: 1
  selector: {{matchLabels: {{app: canary}}}}
"#
    )
}

/// Whether ha-guard's validating webhook answers writes now (a dry-run of the canary is denied).
pub fn validating_live(cp: &ControlPlane, namespace: &str) -> Result<(), String> {
    let out = cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &canary_deny(namespace));
    if !out.ok() && out.stderr.contains("[prestop-exceeds-grace]") { Ok(()) } else { Err(out.output()) }
}

/// Whether ha-guard's mutating webhook answers writes now (a dry-run PDB comes back mutated).
pub fn mutating_live(cp: &ControlPlane, namespace: &str) -> Result<(), String> {
    let out = cp.kubectl_in(&["apply", "--dry-run=server", "-o", "json", "-f", "-"], &canary_mutate(namespace));
    if out.ok() && out.json()["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow" {
        Ok(())
    } else {
        Err(out.output())
    }
}

/// Namespace of the canary writes that tell whether the webhooks are live.
pub const CANARY_NS: &str = "e2e-canary";

/// Registers `which` of the shipped webhook configurations for `hg`, then waits until the
/// apiserver calls it (its configuration informer picks new configurations up asynchronously).
pub fn register(cp: &ControlPlane, hg: &HaGuard, which: &[Webhooks]) -> Result<(), String> {
    register_at(cp, hg, hg.webhook_port, which)
}

/// [`register`] with the calls sent to `port` (a relay or balancer in front of `hg`).
pub fn register_at(cp: &ControlPlane, hg: &HaGuard, port: u16, which: &[Webhooks]) -> Result<(), String> {
    if cp.kubectl(&["get", "namespace", CANARY_NS]).code != 0 {
        cp.namespace(CANARY_NS, &[]);
    }
    let configurations = webhook_configurations_at(hg, port);
    for w in which {
        let doc = configurations.iter().find(|d| d["kind"] == w.kind()).expect("both configurations");
        let out = cp.kubectl_in(&["apply", "-f", "-"], &doc.to_string());
        if !out.ok() {
            return Err(format!("registering the {}: {}", w.kind(), out.output()));
        }
    }
    for w in which {
        match w {
            Webhooks::Validating => {
                poll("the validating webhook denies the canary", WAIT, Duration::from_millis(200), || {
                    validating_live(cp, CANARY_NS)
                })?
            }
            Webhooks::Mutating => {
                poll("the mutating webhook mutates the canary", WAIT, Duration::from_millis(200), || {
                    mutating_live(cp, CANARY_NS)
                })?
            }
        }
    }
    Ok(())
}

/// Deletes `which` and waits until the apiserver no longer calls it.
pub fn unregister(cp: &ControlPlane, which: Webhooks) -> Result<(), String> {
    let out = cp.kubectl(&["delete", which.resource(), "ha-guard"]);
    if !out.ok() {
        return Err(format!("deleting the {}: {}", which.kind(), out.output()));
    }
    poll(&format!("the {} is no longer called", which.kind()), WAIT, Duration::from_millis(200), || {
        let live = match which {
            Webhooks::Validating => validating_live(cp, CANARY_NS),
            Webhooks::Mutating => mutating_live(cp, CANARY_NS),
        };
        match live {
            Ok(()) => Err("still called".to_string()),
            Err(_) => Ok(()),
        }
    })
}

/// Registers both shipped webhook configurations for `hg` with the matchConditions named in
/// `without` taken out (none: as shipped), then waits until the apiserver uses exactly these:
/// both webhooks answer the canaries, and a metadata-only write of a probe Deployment (which the
/// shipped condition `changes-what-ha-guard-reads` leaves out) reaches `probe_calls` of them.
pub fn register_variant(cp: &ControlPlane, hg: &HaGuard, without: &[&str], probe_calls: f64) -> Result<(), String> {
    let mut docs = webhook_configurations(hg);
    for doc in &mut docs {
        for hook in doc["webhooks"].as_array_mut().into_iter().flatten() {
            let Some(conditions) = hook["matchConditions"].as_array_mut() else { continue };
            conditions.retain(|c| !without.iter().any(|w| c["name"] == *w));
            if conditions.is_empty() {
                hook.as_object_mut().map(|h| h.remove("matchConditions"));
            }
        }
    }
    register_configurations(cp, hg, &docs, &[(Probe::Metadata, probe_calls)])
}

/// A write of the probe Deployment (in [`CANARY_NS`]) that tells webhook configurations apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// An annotation that is not ha-guard's: changes nothing ha-guard reads.
    Metadata,
    /// A new image: a spec change.
    Spec,
}

/// Applies the webhook configurations `docs` (pointed at `hg`), then waits until the apiserver
/// uses them: both webhooks answer the canaries, and each probe write reaches as many webhooks as
/// `probes` says (which is how a change of matchConditions is seen to have been picked up).
pub fn register_configurations(
    cp: &ControlPlane,
    hg: &HaGuard,
    docs: &[Value],
    probes: &[(Probe, f64)],
) -> Result<(), String> {
    if cp.kubectl(&["get", "namespace", CANARY_NS]).code != 0 {
        cp.namespace(CANARY_NS, &[]);
    }
    for doc in docs {
        let out = cp.kubectl_in(&["apply", "-f", "-"], &doc.to_string());
        if !out.ok() {
            return Err(format!("registering the {}: {}", doc["kind"], out.output()));
        }
    }
    if cp.kubectl(&["get", "deployment", "probe", "-n", CANARY_NS]).code != 0 {
        let out = cp.apply(spread_out(deployment(CANARY_NS, "probe", 1)));
        if !out.ok() {
            return Err(format!("creating the probe: {}", out.output()));
        }
    }
    let requests = || hg.metrics_opt().map(|m| m.sum("ha_guard_admission_requests_total", &[]));
    let mut n = 0;
    poll("the webhook configurations in effect", WAIT, Duration::from_millis(200), || {
        validating_live(cp, CANARY_NS)?;
        mutating_live(cp, CANARY_NS)?;
        for (probe, calls) in probes {
            n += 1;
            let before = requests()?;
            let out = match probe {
                Probe::Metadata => {
                    let value = format!("e2e.ha-guard.io/probe={n}");
                    cp.kubectl(&["annotate", "--overwrite", "deployment", "probe", "-n", CANARY_NS, &value])
                }
                Probe::Spec => {
                    let image = format!("app=nginx:1.{n}");
                    cp.kubectl(&["set", "image", "deployment/probe", "-n", CANARY_NS, &image])
                }
            };
            if !out.ok() {
                return Err(out.output());
            }
            let sent = requests()? - before;
            if sent != *calls {
                return Err(format!("the {probe:?} probe reached {sent} webhook(s), not {calls}"));
            }
        }
        Ok(())
    })
}

// --- steps -----------------------------------------------------------------------------------

/// Runs named steps, each caught on its own: a failed step is reported by name (with its panic
/// message) and the others still run; [`Steps::finish`] fails the test if any step failed.
pub struct Steps {
    failed: Vec<String>,
    started: Instant,
    /// Printed after a failure (e.g. the tail of ha-guard's log).
    context: Box<dyn Fn() -> String>,
}

impl Steps {
    pub fn new(context: impl Fn() -> String + 'static) -> Steps {
        Steps { failed: Vec::new(), started: Instant::now(), context: Box::new(context) }
    }

    pub fn run(&mut self, name: &str, f: impl FnOnce()) {
        let started = Instant::now();
        eprintln!("[e2e] step {name} ...");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        match result {
            Ok(()) => eprintln!("[e2e] step {name}: ok ({:.1?})", started.elapsed()),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "(no message)".into());
                eprintln!(
                    "[e2e] step {name}: FAILED ({:.1?}): {msg}\n--- context\n{}",
                    started.elapsed(),
                    (self.context)()
                );
                self.failed.push(name.to_string());
            }
        }
    }

    pub fn finish(self) {
        eprintln!("[e2e] all steps done in {:.1?}", self.started.elapsed());
        assert!(self.failed.is_empty(), "failed steps: {} (messages above)", self.failed.join(", "));
    }
}

// --- objects ---------------------------------------------------------------------------------

/// RFC 7386 JSON merge patch (objects merge, anything else replaces; `null` deletes).
pub fn merge(mut base: Value, patch: Value) -> Value {
    fn go(base: &mut Value, patch: Value) {
        match (base, patch) {
            (Value::Object(b), Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        b.remove(&k);
                    } else {
                        go(b.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
            (b, p) => *b = p,
        }
    }
    go(&mut base, patch);
    base
}

/// A Deployment `name` in `ns` with `replicas`, pods labelled `app: name`, one nginx container.
pub fn deployment(ns: &str, name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}
            }
        }
    })
}

/// `d` with a `DoNotSchedule` hostname spread over its own pods: replicas kept apart, so the
/// multi-replica warnings about colocation stay quiet.
pub fn spread_out(d: Value) -> Value {
    let name = d["metadata"]["name"].as_str().expect("name").to_string();
    merge(
        d,
        json!({"spec": {"template": {"spec": {"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": name}}
        }]}}}}),
    )
}

/// `d`'s pod spec merged with `spec`.
pub fn pod(d: Value, spec: Value) -> Value {
    merge(d, json!({"spec": {"template": {"spec": spec}}}))
}

/// A PodDisruptionBudget over `app: target` with `budget` (e.g. `json!({"minAvailable": 1})`).
pub fn pdb(ns: &str, name: &str, target: &str, budget: Value) -> Value {
    merge(
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": target}}}
        }),
        json!({"spec": budget}),
    )
}

/// An autoscaling/v2 HPA on Deployment `target`.
pub fn hpa(ns: &str, name: &str, target: &str, min: i64, max: i64) -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": min, "maxReplicas": max,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
        }
    })
}

/// A PersistentVolumeClaim with one access mode.
pub fn pvc(ns: &str, name: &str, mode: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}}
    })
}

/// `d` mounting claim `claim` at /data.
pub fn mounting(d: Value, claim: &str) -> Value {
    pod(
        d,
        json!({
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            "containers": [{"name": "app", "image": "nginx:1.27", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]
        }),
    )
}

/// `d` with a preStop hook that sleeps 20 s under a termination grace of 10 s
/// (`prestop-exceeds-grace`). An exec of `sleep`: the apiserver itself refuses a `sleep` action
/// at least as long as the grace, before any webhook is called.
pub fn slow_prestop(d: Value) -> Value {
    pod(
        d,
        json!({
            "terminationGracePeriodSeconds": 10,
            "containers": [{"name": "app", "image": "nginx:1.27",
                "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 20; nginx -s quit"]}}}}]
        }),
    )
}

/// A Service `name` in `ns` selecting pods `app: <app>`.
pub fn service(ns: &str, name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"app": app}, "ports": [{"port": 443, "targetPort": 9443}]}
    })
}

/// The label that puts a namespace under the test webhooks of [`fail_closed_webhooks`]; no
/// namespace carries it, so they never intercept anything.
pub const E2E_TARGET_LABEL: &str = "e2e.ha-guard.io/webhook-target";

/// A ValidatingWebhookConfiguration `name` with one webhook, `failurePolicy: Fail`, calling
/// Service `ns`/`service`, on ConfigMap CREATE in namespaces labelled [`E2E_TARGET_LABEL`]: a
/// fail-closed webhook whose backend may be missing without breaking any other write of a test.
pub fn fail_closed_webhooks(name: &str, ns: &str, service: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": format!("{name}.e2e.ha-guard.io"),
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "clientConfig": {"service": {"namespace": ns, "name": service, "path": "/validate"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE"]}],
            "namespaceSelector": {"matchLabels": {E2E_TARGET_LABEL: "true"}}
        }]
    })
}

/// A KEDA ScaledObject on Deployment `target` (min and max replica counts).
pub fn scaled_object(ns: &str, name: &str, target: &str, min: i64, max: i64) -> Value {
    json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"name": target},
            "minReplicaCount": min, "maxReplicaCount": max,
            "triggers": [{"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}}]
        }
    })
}

/// A CustomResourceDefinition for KEDA's ScaledObjects, as small as the apiserver takes (the
/// schema keeps every field): enough to serve `keda.sh/v1alpha1` without KEDA.
pub fn scaled_object_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "scaledobjects.keda.sh"},
        "spec": {
            "group": "keda.sh", "scope": "Namespaced",
            "names": {"kind": "ScaledObject", "listKind": "ScaledObjectList", "plural": "scaledobjects", "singular": "scaledobject"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

// --- relay -----------------------------------------------------------------------------------

/// A TCP relay to the apiserver on a port of its own, which can be closed and opened again: an
/// apiserver that is not up yet, or goes away and comes back, as ha-guard sees it. TLS passes
/// through untouched (the apiserver's certificate is valid for 127.0.0.1).
pub struct Relay {
    pub port: u16,
    target: std::net::SocketAddr,
    run: Option<RelayRun>,
}

struct RelayRun {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
    accept: std::thread::JoinHandle<()>,
}

impl Relay {
    /// A relay to `target` on a free port, closed (connections are refused) until [`Relay::open`].
    pub fn new(target: std::net::SocketAddr) -> Relay {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        Relay { port, target, run: None }
    }

    /// A copy of `kubeconfig` whose server is this relay.
    pub fn kubeconfig(&self, kubeconfig: &Path, out: &Path) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
        let relayed: String = text
            .lines()
            .map(|l| match l.split_once("server: ") {
                Some((indent, _)) => format!("{indent}server: https://127.0.0.1:{}\n", self.port),
                None => format!("{l}\n"),
            })
            .collect();
        std::fs::write(out, relayed).expect("write the relayed kubeconfig");
        out.to_path_buf()
    }

    /// Starts accepting (and relaying) connections.
    pub fn open(&mut self) -> Result<(), String> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        if self.run.is_some() {
            return Ok(());
        }
        let listener = poll("the relay port is free", Duration::from_secs(10), Duration::from_millis(50), || {
            TcpListener::bind(("127.0.0.1", self.port)).map_err(|e| e.to_string())
        })?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (stop2, conns2, target) = (stop.clone(), conns.clone(), self.target);
        let accept = std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                let client = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    Err(_) => continue,
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(target) else { continue };
                let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) =
                    (client.try_clone(), server.try_clone(), client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                conns2.lock().unwrap_or_else(|p| p.into_inner()).extend([c3, s3]);
                for (mut from, mut to) in [(client, s2), (server, c2)] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
            // The listener is dropped here: new connections are refused.
        });
        self.run = Some(RelayRun { stop, conns, accept });
        Ok(())
    }

    /// Stops accepting and cuts every relayed connection.
    pub fn close(&mut self) {
        let Some(run) = self.run.take() else { return };
        run.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = run.accept.join();
        for c in run.conns.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.close();
    }
}

// --- direct calls to the webhook port --------------------------------------------------------

/// A client certificate and its key (PEM), presented to ha-guard's webhook port.
#[derive(Clone, Debug)]
pub struct ClientIdentity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl ClientIdentity {
    /// `client.crt` and `client.key` as `ha-guard certs --client NAME` writes them into `dir`.
    pub fn read(dir: &Path) -> ClientIdentity {
        let read =
            |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{}: {e}", dir.join(f).display()));
        ClientIdentity { cert_pem: read("client.crt"), key_pem: read("client.key") }
    }
}

/// How a call straight to ha-guard's webhook port (not through the apiserver) ended.
#[derive(Debug)]
pub enum Call {
    /// An HTTP answer, and the certificate the server presented (DER).
    Answered { status: u16, body: String, server_cert: Vec<u8> },
    /// The TLS handshake failed as the client saw it (over TLS 1.2 a refused client certificate
    /// ends the handshake itself).
    HandshakeFailed(rustls::Error),
    /// The client's side of the handshake completed, then the server ended the connection with a
    /// TLS alert and no HTTP answer: over TLS 1.3 the server checks the client's certificate after
    /// the client has sent its Finished, so a refusal arrives on the first read.
    RefusedAfterHandshake(rustls::Error),
}

impl Call {
    /// The TLS error of a refused call.
    pub fn tls_error(&self) -> Option<&rustls::Error> {
        match self {
            Call::Answered { .. } => None,
            Call::HandshakeFailed(e) | Call::RefusedAfterHandshake(e) => Some(e),
        }
    }
}

/// The rustls error inside an I/O error, if that is what it is.
fn rustls_error(e: &std::io::Error) -> Option<rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()).cloned()
}

/// `POST path` with `body` (JSON) to ha-guard's webhook port on 127.0.0.1, over HTTP/1.1 and
/// TLS (`version`, or 1.3 or 1.2 as negotiated), trusting `ca_pem` and presenting `id` if given.
/// `Err` for anything that is neither an HTTP answer nor a TLS refusal (connection refused, a
/// timeout, ...).
pub fn webhook_call(
    port: u16,
    ca_pem: &str,
    id: Option<&ClientIdentity>,
    version: Option<&'static rustls::SupportedProtocolVersion>,
    path: &str,
    body: &[u8],
) -> Result<Call, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use std::sync::Arc;

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.map_err(|e| format!("CA PEM: {e}"))?).map_err(|e| format!("CA: {e}"))?;
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = match version {
        Some(v) => vec![v],
        None => vec![&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match id {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(id.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("client certificate PEM: {e}"))?;
            let key =
                PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).map_err(|e| format!("client key PEM: {e}"))?;
            builder.with_client_auth_cert(certs, key).map_err(|e| format!("client identity: {e}"))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let server = ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into());
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server).map_err(|e| e.to_string())?;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut tcp =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("connect {addr}: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut tcp) {
            return match rustls_error(&e) {
                Some(tls) => Ok(Call::HandshakeFailed(tls)),
                None => Err(format!("TLS handshake with {addr}: {e}")),
            };
        }
    }
    let server_cert = conn.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).unwrap_or_default();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut raw = Vec::new();
    let sent = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).and_then(|()| stream.flush());
    let received = sent.and_then(|()| stream.read_to_end(&mut raw));
    match received {
        Ok(_) => {}
        // Closed without close_notify after a whole answer: the answer counts.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => {
            if let Some(tls) = rustls_error(&e) {
                return Ok(Call::RefusedAfterHandshake(tls));
            }
            // The server closed while the request was being written: its alert may still be
            // waiting to be read.
            loop {
                match stream.conn.read_tls(&mut stream.sock) {
                    Ok(0) | Err(_) => return Err(format!("POST {path}: {e} (no TLS alert from the server)")),
                    Ok(_) => {
                        if let Err(tls) = stream.conn.process_new_packets() {
                            return Ok(Call::RefusedAfterHandshake(tls));
                        }
                    }
                }
            }
        }
    }
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| format!("POST {path}: no HTTP response: {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("POST {path}: bad status line: {head:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    Ok(Call::Answered { status, body: if chunked { dechunk(body) } else { body.to_string() }, server_cert })
}

/// The serial number of a DER certificate, as its INTEGER's content octets without a leading
/// zero (enough for comparing; no X.509 parser needed: it is the first INTEGER of the
/// TBSCertificate, after the optional `[0]` version).
pub fn cert_serial(der: &[u8]) -> Option<Vec<u8>> {
    /// One DER TLV: tag, content, what follows.
    fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let tag = *b.first()?;
        let first = usize::from(*b.get(1)?);
        let (len, header) = if first < 0x80 {
            (first, 2)
        } else {
            let n = first & 0x7f;
            if n == 0 || n > 4 {
                return None;
            }
            let mut len = 0usize;
            for i in 0..n {
                len = (len << 8) | usize::from(*b.get(2 + i)?);
            }
            (len, 2 + n)
        };
        Some((tag, b.get(header..header + len)?, b.get(header + len..)?))
    }
    let (0x30, cert, _) = tlv(der)? else { return None };
    let (0x30, tbs, _) = tlv(cert)? else { return None };
    let (mut tag, mut content, rest) = tlv(tbs)?;
    if tag == 0xa0 {
        (tag, content, _) = tlv(rest)?;
    }
    if tag != 0x02 {
        return None;
    }
    let trimmed = match content {
        [0, rest @ ..] if !rest.is_empty() => rest,
        c => c,
    };
    Some(trimmed.to_vec())
}

/// The `admission.k8s.io/v1` AdmissionReview the apiserver would send for a CREATE of `obj` (a
/// Deployment, StatefulSet, PDB or HPA), for calls straight to the webhook port.
pub fn admission_review(obj: &Value) -> Value {
    let kind = obj["kind"].as_str().expect("kind");
    let (group, version) = match obj["apiVersion"].as_str().expect("apiVersion").split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), obj["apiVersion"].as_str().unwrap_or_default().to_string()),
    };
    let resource = match kind {
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        "PodDisruptionBudget" => "poddisruptionbudgets",
        "HorizontalPodAutoscaler" => "horizontalpodautoscalers",
        other => panic!("admission_review: no resource for {other}"),
    };
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let uid = format!("00000000-0000-4000-8000-{:012}", SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
    let gvk = json!({"group": group, "version": version, "kind": kind});
    let gvr = json!({"group": group, "version": version, "resource": resource});
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "ha-guard-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": obj, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

// --- the apiserver's count of its calls to ha-guard -------------------------------------------

/// The apiserver's counts of its calls to ha-guard's webhooks (those named `*.ha-guard.io`), from
/// its `/metrics`. With the shipped `failurePolicy: Ignore`, a write that ha-guard should have
/// checked also passes when the call failed or timed out: a test that only sees "admitted" cannot
/// tell, these counters can.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ApiserverCalls {
    /// All calls.
    pub calls: f64,
    /// Answered with a denial.
    pub rejected: f64,
    /// Neither allowed (HTTP 200) nor a denial: calls that failed.
    pub failed: f64,
    /// Failed and let through (`apiserver_admission_webhook_fail_open_count`).
    pub fail_open: f64,
    /// `apiserver_admission_webhook_rejection_count` for an error rather than a denial
    /// (`error_type` other than `no_error`).
    pub rejected_for_errors: f64,
}

impl ApiserverCalls {
    pub fn of(m: &Metrics) -> ApiserverCalls {
        let ours = |l: &BTreeMap<String, String>| l.get("name").is_some_and(|n| n.ends_with(".ha-guard.io"));
        let is = |l: &BTreeMap<String, String>, k: &str, v: &str| l.get(k).map(String::as_str) == Some(v);
        let sum = |name: &str, f: &dyn Fn(&BTreeMap<String, String>) -> bool| -> f64 {
            m.all(name, &[]).iter().filter(|(l, _)| ours(l) && f(l)).map(|(_, v)| v).sum()
        };
        ApiserverCalls {
            calls: sum("apiserver_admission_webhook_request_total", &|_| true),
            rejected: sum("apiserver_admission_webhook_request_total", &|l| is(l, "rejected", "true")),
            failed: sum("apiserver_admission_webhook_request_total", &|l| {
                !is(l, "rejected", "true") && !is(l, "code", "200")
            }),
            fail_open: sum("apiserver_admission_webhook_fail_open_count", &|_| true),
            rejected_for_errors: sum("apiserver_admission_webhook_rejection_count", &|l| {
                !is(l, "error_type", "no_error")
            }),
        }
    }

    fn zip(self, o: ApiserverCalls, f: impl Fn(f64, f64) -> f64) -> ApiserverCalls {
        ApiserverCalls {
            calls: f(self.calls, o.calls),
            rejected: f(self.rejected, o.rejected),
            failed: f(self.failed, o.failed),
            fail_open: f(self.fail_open, o.fail_open),
            rejected_for_errors: f(self.rejected_for_errors, o.rejected_for_errors),
        }
    }

    pub fn minus(self, o: ApiserverCalls) -> ApiserverCalls {
        self.zip(o, |a, b| a - b)
    }

    pub fn plus(self, o: ApiserverCalls) -> ApiserverCalls {
        self.zip(o, |a, b| a + b)
    }

    /// Calls that failed, failed open or were refused for an error.
    pub fn went_wrong(&self) -> f64 {
        self.failed + self.fail_open + self.rejected_for_errors
    }
}

/// Follows [`ApiserverCalls`] over a whole test. The steps that make calls fail on purpose (ha-guard
/// stopped while writes go on) run inside [`FailOpen::on_purpose`], which sets their counts aside
/// by name; [`FailOpen::finish`] asserts that no other call failed, failed open or was refused for
/// an error. The apiserver's counters start over when it restarts: call [`FailOpen::checkpoint`]
/// just before stopping it.
pub struct FailOpen {
    last: ApiserverCalls,
    elsewhere: ApiserverCalls,
    on_purpose: Vec<(String, ApiserverCalls)>,
}

impl FailOpen {
    pub fn start(cp: &ControlPlane) -> FailOpen {
        FailOpen { last: ApiserverCalls::of(&cp.metrics()), elsewhere: Default::default(), on_purpose: Vec::new() }
    }

    /// What the counters moved by since the last look (all of them after a restart, when a
    /// counter went down).
    fn advance(&mut self, cp: &ControlPlane) -> ApiserverCalls {
        let now = ApiserverCalls::of(&cp.metrics());
        let restarted = now.calls < self.last.calls || now.fail_open < self.last.fail_open;
        let moved = if restarted { now } else { now.minus(self.last) };
        self.last = now;
        moved
    }

    /// Counts what happened since the last look as outside the on-purpose sections.
    pub fn checkpoint(&mut self, cp: &ControlPlane) {
        let moved = self.advance(cp);
        self.elsewhere = self.elsewhere.plus(moved);
    }

    /// Runs `f`, whose failed calls are on purpose (`what` names them in the report).
    pub fn on_purpose<T>(&mut self, cp: &ControlPlane, what: &str, f: impl FnOnce() -> T) -> T {
        self.checkpoint(cp);
        let out = f();
        let moved = self.advance(cp);
        self.on_purpose.push((what.to_string(), moved));
        out
    }

    /// Asserts that no call failed, failed open or was refused for an error outside the
    /// on-purpose sections, and prints what happened inside them.
    #[track_caller]
    pub fn finish(mut self, cp: &ControlPlane) {
        self.checkpoint(cp);
        let _ = writeln!(
            std::io::stderr().lock(),
            "[e2e] apiserver calls to ha-guard outside the on-purpose steps: {:?}",
            self.elsewhere
        );
        for (what, calls) in &self.on_purpose {
            let _ = writeln!(std::io::stderr().lock(), "[e2e]   on purpose, {what}: {calls:?}");
        }
        assert!(self.elsewhere.calls > 0.0, "the apiserver called ha-guard: {:?}", self.elsewhere);
        assert_eq!(
            self.elsewhere.went_wrong(),
            0.0,
            "webhook calls failed, failed open or were refused for an error outside the steps that do it on purpose \
             (a write 'admitted' there may have passed unchecked): {:?}",
            self.elsewhere
        );
    }
}

// --- the usual set-up, in one constructor --------------------------------------------------------

/// Run on the control plane before ha-guard starts.
pub type BeforeStart<'a> = Box<dyn FnOnce(&ControlPlane) + 'a>;
/// Changes to ha-guard's `serve` flags and environment.
pub type SpecEdit<'a> = Box<dyn FnOnce(&mut Spec) + 'a>;

/// How an end-to-end test wants its cluster: [`Harness::start`] does what the e2e tests each used
/// to do by hand (control plane, nodes, ha-guard, the webhooks registered and seen to answer, the
/// guard that counts failed and failed-open webhook calls).
pub struct Setup<'a> {
    /// kube-controller-manager, kube-scheduler and kwok too ([`ControlPlane::start_with_controllers`]);
    /// else etcd and kube-apiserver only.
    pub controllers: bool,
    /// Nodes: kwok's (kept Ready) with `controllers`, else plain Node objects ([`ControlPlane::nodes`]).
    pub nodes: &'a [&'a str],
    /// Run on the control plane before ha-guard starts (objects that predate the guardrail).
    pub before: Option<BeforeStart<'a>>,
    /// ha-guard's `serve` flags and environment.
    pub spec: Option<SpecEdit<'a>>,
    /// The shipped webhook configurations to register.
    pub webhooks: &'a [Webhooks],
    /// Register them with `failurePolicy: Fail` (the shipped default is Ignore).
    pub fail_closed: bool,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Setup {
            controllers: false,
            nodes: &[],
            before: None,
            spec: None,
            webhooks: &[Webhooks::Mutating, Webhooks::Validating],
            fail_closed: false,
        }
    }
}

/// A control plane, ha-guard registered with it, and the guard over the apiserver's webhook calls.
pub struct Harness {
    // Field order is drop order: ha-guard before its control plane.
    pub hg: HaGuard,
    pub fail_open: Option<FailOpen>,
    pub cp: ControlPlane,
}

impl Harness {
    /// Sets up as `setup` says; every failure panics with what went wrong (and ha-guard's log).
    pub fn start(setup: Setup) -> Harness {
        let cp = if setup.controllers { ControlPlane::start_with_controllers() } else { ControlPlane::start() }
            .unwrap_or_else(|e| panic!("control plane: {e}"));
        if setup.controllers {
            let nodes: Vec<(&str, &[(&str, &str)])> = setup.nodes.iter().map(|n| (*n, &[][..])).collect();
            cp.kwok_nodes(&nodes);
        } else if !setup.nodes.is_empty() {
            cp.nodes(setup.nodes);
        }
        if let Some(before) = setup.before {
            before(&cp);
        }
        let fail_open = FailOpen::start(&cp);
        let mut spec = Spec::new(&cp, "ha-guard");
        if let Some(f) = setup.spec {
            f(&mut spec);
        }
        let hg = HaGuard::start_spec(&cp, &spec).unwrap_or_else(|e| panic!("ha-guard: {e}"));
        if !setup.webhooks.is_empty() {
            let mut docs: Vec<Value> = webhook_configurations(&hg)
                .into_iter()
                .filter(|d| setup.webhooks.iter().any(|w| d["kind"] == w.kind()))
                .collect();
            if setup.fail_closed {
                for hook in docs.iter_mut().flat_map(|d| d["webhooks"].as_array_mut().into_iter().flatten()) {
                    hook["failurePolicy"] = json!("Fail");
                }
            }
            let registered = if setup.webhooks.len() == 2 {
                register_configurations(&cp, &hg, &docs, &[])
            } else {
                assert!(!setup.fail_closed, "fail-closed registration is of both webhooks");
                register(&cp, &hg, setup.webhooks)
            };
            registered.unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(20)));
        }
        Harness { hg, fail_open: Some(fail_open), cp }
    }

    /// The steps' runner, with ha-guard's last log lines shown under a failed step.
    pub fn steps(&self) -> Steps {
        let log = self.hg.log_path();
        Steps::new(move || format!("ha-guard log (last lines):\n{}", tail(&log, 12)))
    }

    /// The guard over the webhook calls, for the last step: [`FailOpen::finish`].
    pub fn guard(&mut self) -> FailOpen {
        self.fail_open.take().expect("the guard is taken once")
    }
}

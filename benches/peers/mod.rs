//! ha-guard's peers for `benches/apiserver.rs`: the same rules as ValidatingAdmissionPolicies and
//! MutatingAdmissionPolicies (CEL inside kube-apiserver, `cel/*.yaml`) and as Kyverno
//! ClusterPolicies served by Kyverno's admission controller run out of cluster (`kyverno/`), each
//! switched on before its batches and off after them, so that one engine at a time judges the
//! writes; and [`caught`], one write per violation class, to see which engine catches what.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

fn peers_dir() -> PathBuf {
    repo().join("benches/peers")
}

/// Whether any engine denies the canary (a preStop sleep over the grace period) or mutates the
/// canary PDB now: ha-guard's, the CEL policies and Kyverno's rules all do both.
fn engine_live(cp: &ControlPlane) -> Result<(), String> {
    validating_live(cp, CANARY_NS)?;
    mutating_live(cp, CANARY_NS)
}

fn nothing_live(cp: &ControlPlane) -> Result<(), String> {
    match (validating_live(cp, CANARY_NS), mutating_live(cp, CANARY_NS)) {
        (Err(_), Err(_)) => Ok(()),
        _ => Err("an engine still answers the canaries".to_string()),
    }
}

/// The engines other than ha-guard, and their state.
pub struct Peers {
    cel: bool,
    kyverno: Option<Kyverno>,
}

impl Peers {
    pub fn new(cp: &ControlPlane) -> Peers {
        if cp.kubectl(&["get", "namespace", CANARY_NS]).code != 0 {
            cp.namespace(CANARY_NS, &[]);
        }
        Peers { cel: false, kyverno: None }
    }

    /// Applies `cel/` and waits until the apiserver enforces it.
    pub fn cel_on(&mut self, cp: &ControlPlane) -> Result<(), String> {
        let dir = peers_dir().join("cel");
        let out = cp.kubectl(&["apply", "-f", &dir.to_string_lossy()]);
        if !out.ok() {
            return Err(format!("applying {}: {}", dir.display(), out.output()));
        }
        self.cel = true;
        poll("the CEL policies in effect", WAIT, Duration::from_millis(200), || engine_live(cp))
    }

    pub fn cel_off(&mut self, cp: &ControlPlane) -> Result<(), String> {
        if !self.cel {
            return Ok(());
        }
        let dir = peers_dir().join("cel");
        let out = cp.kubectl(&["delete", "--ignore-not-found", "-f", &dir.to_string_lossy()]);
        if !out.ok() {
            return Err(format!("deleting {}: {}", dir.display(), out.output()));
        }
        self.cel = false;
        poll("the CEL policies gone", WAIT, Duration::from_millis(200), || nothing_live(cp))
    }

    /// Builds Kyverno if needed (`kyverno/build.sh`), installs its CRDs, namespace, ConfigMap and
    /// the ClusterPolicies (before it first runs: no policy webhook to pass yet).
    pub fn kyverno_setup(&mut self, cp: &ControlPlane) -> Result<(), String> {
        let script = peers_dir().join("kyverno/build.sh");
        let out = Command::new(&script)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!("{} failed ({}): Kyverno cannot be built here", script.display(), out.status));
        }
        let binary = PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").trim());
        let version = binary
            .parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("kyverno-"))
            .unwrap_or("?")
            .to_string();
        let crds = binary.with_file_name("crds");
        let out = cp.kubectl(&["apply", "--server-side", "-R", "-f", &crds.to_string_lossy()]);
        if !out.ok() {
            return Err(format!("Kyverno's CRDs: {}", out.output()));
        }
        // A CRD created a moment ago may have no status yet, which `kubectl wait` reports as an
        // error ("status.conditions accessor error") rather than waiting: ask again.
        let mut out = cp.kubectl(&["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"]);
        for _ in 0..10 {
            if out.ok() {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
            out = cp.kubectl(&["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"]);
        }
        if !out.ok() {
            return Err(format!("Kyverno's CRDs not established: {}", out.output()));
        }
        for file in ["kyverno/install.yaml", "kyverno/policies.yaml"] {
            let path = peers_dir().join(file);
            let out = cp.kubectl(&["apply", "-f", &path.to_string_lossy()]);
            if !out.ok() {
                return Err(format!("{}: {}", path.display(), out.output()));
            }
        }
        self.kyverno = Some(Kyverno { binary, version, child: None, root: cp.root().to_path_buf() });
        Ok(())
    }

    pub fn kyverno_version(&self) -> Option<&str> {
        self.kyverno.as_ref().map(|k| k.version.as_str())
    }

    /// The running Kyverno's pid (for its CPU time).
    pub fn kyverno_pid(&self) -> Option<u32> {
        self.kyverno.as_ref().and_then(|k| k.child.as_ref()).map(Child::id)
    }

    /// Starts Kyverno's admission controller and waits until its webhooks judge writes.
    pub fn kyverno_on(&mut self, cp: &ControlPlane) -> Result<(), String> {
        let k = self.kyverno.as_mut().ok_or("Kyverno is not set up")?;
        k.start(cp)?;
        let log = k.root.join("kyverno.log");
        poll("Kyverno's webhooks in effect", Duration::from_secs(240), Duration::from_millis(500), || {
            if let Some(child) = k.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                // Not a wait-and-see: say why and stop polling.
                let tail = tail(&log, 30);
                fail_now(&format!("Kyverno exited ({status}); last lines of {}:\n{tail}", log.display()));
            }
            engine_live(cp)
        })
    }

    /// Stops Kyverno and deletes the webhook configurations it made (it would make them again).
    pub fn kyverno_off(&mut self, cp: &ControlPlane) -> Result<(), String> {
        let Some(k) = self.kyverno.as_mut() else { return Ok(()) };
        if k.child.is_none() {
            return Ok(());
        }
        k.stop();
        for kind in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
            let out =
                cp.kubectl(&["delete", kind, "-l", "webhook.kyverno.io/managed-by=kyverno", "--ignore-not-found"]);
            if !out.ok() {
                return Err(format!("deleting Kyverno's {kind}: {}", out.output()));
            }
        }
        poll("Kyverno's webhooks gone", WAIT, Duration::from_millis(200), || nothing_live(cp))
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        if let Some(k) = self.kyverno.as_mut() {
            k.stop();
        }
    }
}

fn fail_now(why: &str) -> ! {
    eprintln!("apiserver bench: {why}");
    std::process::exit(1)
}

pub struct Kyverno {
    binary: PathBuf,
    version: String,
    child: Option<Child>,
    /// The control plane's root: the log and pid file go there (its reaper stops what the pid
    /// file names if the bench dies).
    root: PathBuf,
}

impl Kyverno {
    /// As DEVELOPMENT.md of Kyverno runs it out of cluster, with the chart's defaults, all on
    /// loopback. Decisions: `--admissionReports=false` (without the reports controller nobody
    /// would consume them), `--generateValidatingAdmissionPolicy=false` (else Kyverno hands its
    /// CEL-only rules to the apiserver, which is row `cel`), events as the chart omits them.
    fn start(&mut self, cp: &ControlPlane) -> Result<(), String> {
        let webhook_port = free_port();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("kyverno.log"))
            .map_err(|e| format!("kyverno.log: {e}"))?;
        let child = Command::new(&self.binary)
            .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
            .arg(format!("--serverIP=127.0.0.1:{webhook_port}"))
            .arg("--webhookServerHost=127.0.0.1")
            .arg(format!("--webhookServerPort={webhook_port}"))
            .arg("--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca")
            .arg("--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair")
            .arg("--backgroundServiceAccountName=system:serviceaccount:kyverno:kyverno-background-controller")
            .arg("--reportsServiceAccountName=system:serviceaccount:kyverno:kyverno-reports-controller")
            .arg("--metricsHost=127.0.0.1")
            .arg(format!("--metricsPort={}", free_port()))
            .arg("--controllerRuntimeMetricsAddress=0")
            .arg("--admissionReports=false")
            .arg("--generateValidatingAdmissionPolicy=false")
            .arg("--omitEvents=PolicyApplied,PolicySkipped")
            .arg("--loggingFormat=text")
            .arg("--disableLogColor")
            .arg("--v=2")
            .env("KYVERNO_NAMESPACE", "kyverno")
            .env("KYVERNO_SERVICEACCOUNT_NAME", "kyverno-admission-controller")
            .env("KYVERNO_DEPLOYMENT", "kyverno-admission-controller")
            .env("KYVERNO_POD_NAME", "kyverno-bench")
            .env("INIT_CONFIG", "kyverno")
            .env("METRICS_CONFIG", "kyverno-metrics")
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?;
        let _ = std::fs::write(self.root.join("kyverno.pid"), child.id().to_string());
        self.child = Some(child);
        Ok(())
    }

    /// SIGTERM, then SIGKILL after 20 s.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..100 {
            if matches!(child.try_wait(), Ok(Some(_))) {
                let _ = std::fs::remove_file(self.root.join("kyverno.pid"));
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(self.root.join("kyverno.pid"));
    }
}

/// What ha-guard does by default with a violation class (its rule's default action, or the
/// mutation that repairs it).
#[derive(Clone, Copy)]
pub enum Action {
    Deny,
    Warn,
    Fix,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Warn => "warn",
            Action::Fix => "mutate",
        }
    }
}

/// One violation class of the check: the write, and how its result is read.
pub struct Case {
    pub rule: &'static str,
    pub default: Action,
    /// Needs another object than the one written.
    pub cross_object: bool,
    write: Value,
    /// For a class a mutation repairs: whether the stored object was repaired.
    fixed: Option<fn(&Value) -> bool>,
}

/// The cases, in namespace `ns`, after [`SETUP`]'s objects: Deployment `web` (2 replicas, a
/// hostname spread) with PDB `web`, Deployment `solo` (2 replicas) without one.
pub fn cases(ns: &str) -> Vec<Case> {
    let web = |name: &str| spread_out(deployment(ns, name, 2));
    let no_selector =
        json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]);
    let spreads_have_selector = |v: &Value| {
        v["spec"]["template"]["spec"]["topologySpreadConstraints"]
            .as_array()
            .is_some_and(|a| a.iter().all(|c| c.get("labelSelector").is_some()))
    };
    vec![
        Case {
            rule: "spread-selector-missing",
            default: Action::Fix,
            cross_object: false,
            write: pod(deployment(ns, "missing", 2), json!({"topologySpreadConstraints": no_selector})),
            fixed: Some(spreads_have_selector),
        },
        Case {
            rule: "spread-selector-mismatch",
            default: Action::Deny,
            cross_object: false,
            write: pod(
                deployment(ns, "mismatch", 2),
                json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "other"}}}]}),
            ),
            fixed: None,
        },
        Case {
            rule: "termination-grace-zero",
            default: Action::Warn,
            cross_object: false,
            write: pod(web("grace"), json!({"terminationGracePeriodSeconds": 0})),
            fixed: None,
        },
        Case {
            rule: "prestop-exceeds-grace",
            default: Action::Deny,
            cross_object: false,
            write: pod(
                web("prestop"),
                json!({"containers": [{"name": "app", "image": "nginx:1.27",
                    "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 40; nginx -s quit"]}}}}]}),
            ),
            fixed: None,
        },
        Case {
            rule: "csi-controller-recreate",
            default: Action::Deny,
            cross_object: false,
            write: merge(
                pod(
                    web("csi"),
                    json!({"containers": [{"name": "provisioner", "image": "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0"}]}),
                ),
                json!({"spec": {"strategy": {"type": "Recreate"}}}),
            ),
            fixed: None,
        },
        Case {
            rule: "hpa-replica-bounds",
            default: Action::Deny,
            cross_object: false,
            write: hpa(ns, "bounds", "web", 5, 3),
            fixed: None,
        },
        Case {
            rule: "inject-unhealthy-pod-eviction-policy",
            default: Action::Fix,
            cross_object: false,
            write: pdb(ns, "fresh", "fresh", json!({"maxUnavailable": 1})),
            fixed: Some(|v| v["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"),
        },
        Case {
            rule: "pdb-overlap",
            default: Action::Deny,
            cross_object: true,
            write: pdb(ns, "web-again", "web", json!({"maxUnavailable": 1})),
            fixed: None,
        },
        Case {
            rule: "pdb-blocks-eviction",
            default: Action::Deny,
            cross_object: true,
            write: pdb(ns, "solo", "solo", json!({"minAvailable": 2})),
            fixed: None,
        },
        Case { rule: "pdb-missing", default: Action::Warn, cross_object: true, write: web("lonely"), fixed: None },
        Case {
            rule: "hpa-target-missing",
            default: Action::Warn,
            cross_object: true,
            write: hpa(ns, "orphan", "nothing", 2, 5),
            fixed: None,
        },
    ]
}

/// What the check found for one case.
pub fn outcome_name(o: &Outcome) -> String {
    match o {
        Outcome::Denied => "denied".into(),
        Outcome::Warned => "warned".into(),
        Outcome::Fixed => "fixed".into(),
        Outcome::RefusedByApiserver => "refused by the apiserver's own validation".into(),
        Outcome::Missed => "**missed**".into(),
        Outcome::Error(e) => format!("error: {e}"),
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Denied,
    Warned,
    Fixed,
    /// Refused, but not by the engine: the apiserver's validation (before validating admission).
    RefusedByApiserver,
    Missed,
    Error(String),
}

impl Outcome {
    /// Caught by the engine under test.
    pub fn caught(&self) -> bool {
        matches!(self, Outcome::Denied | Outcome::Warned | Outcome::Fixed)
    }
}

/// Writes the setup, then each case, in namespace `ns` with whatever engine is live, and reads
/// what happened: denied or warned naming the rule (every engine's messages here start with
/// `[rule-id]`), repaired, or let through. Everything it wrote is deleted after.
pub fn caught(cp: &ControlPlane, ns: &str) -> Vec<(Case, Outcome)> {
    cp.namespace(ns, &[]);
    let setup = [
        spread_out(deployment(ns, "web", 2)),
        pdb(ns, "web", "web", json!({"maxUnavailable": 1})),
        spread_out(deployment(ns, "solo", 2)),
    ];
    for doc in &setup {
        let out = cp.kubectl_in(&["create", "-f", "-"], &doc.to_string());
        if !out.ok() {
            fail_now(&format!("the caught check's setup in {ns}: {}", out.output()));
        }
    }
    // ha-guard judges from its watch cache: let it see the setup.
    std::thread::sleep(Duration::from_secs(3));
    let mut results = Vec::new();
    for case in cases(ns) {
        let tag = format!("[{}]", case.rule);
        let out = cp.kubectl_in(&["create", "-f", "-"], &case.write.to_string());
        let outcome = if !out.ok() {
            if out.stderr.contains(&tag) {
                Outcome::Denied
            } else if out.stderr.contains("is invalid") && !out.stderr.contains("denied") {
                Outcome::RefusedByApiserver
            } else {
                Outcome::Error(out.stderr.lines().next().unwrap_or("").chars().take(160).collect())
            }
        } else if out.warnings().iter().any(|w| w.contains(&tag)) {
            Outcome::Warned
        } else if let Some(fixed) = case.fixed {
            let kind = case.write["kind"].as_str().unwrap_or("");
            let name = case.write["metadata"]["name"].as_str().unwrap_or("");
            let stored = cp.kubectl(&["get", kind, name, "-n", ns, "-o", "json"]);
            if stored.ok() && fixed(&stored.json()) { Outcome::Fixed } else { Outcome::Missed }
        } else {
            Outcome::Missed
        };
        eprintln!("apiserver bench: caught check in {ns}: {} → {outcome:?}", case.rule);
        results.push((case, outcome));
    }
    let out = cp.kubectl(&["delete", "deployments,poddisruptionbudgets,horizontalpodautoscalers", "--all", "-n", ns]);
    if !out.ok() {
        fail_now(&format!("cleaning {ns} up: {}", out.output()));
    }
    results
}

/// The short commit of the repository, `-dirty` when the work tree has changes, for the report.
pub fn commit(repo: &Path) -> String {
    Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["describe", "--always", "--dirty", "--abbrev=7"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".to_string())
}

//! End-to-end: the Helm chart `charts/ha-guard` installed into the real kube-apiserver of the e2e
//! suite (`tests/e2e/README.md`), ha-guard run exactly as the chart's Deployment runs it, writes
//! driven through the chart's own webhook configurations, then upgraded and uninstalled (issue 12,
//! acceptance 3 and 5; README "Installing in a cluster").
//!
//! **The chart's, unchanged:** every object `helm template` renders with the default values
//! (managed certificates): both webhook configurations, the ClusterRoles, Role and bindings, the
//! empty Secret, the ConfigMap, the ServiceAccounts, the Services, the Deployments (webhook and
//! audit) and the PDBs; helm
//! installs, upgrades and uninstalls them (pre-delete hooks included).
//!
//! **Stood in for**, because the e2e control plane has no kube-proxy, no kubelet, no
//! controller-manager and no cluster network (traffic stays on loopback):
//! - *The route from the Service to the pods* (kube-proxy): the Service becomes `type:
//!   ExternalName`, `externalName: localhost`, and each webhook's `clientConfig.service.port` the
//!   port of a round-robin TCP balancer on loopback in front of the replicas ([`Balancer`]). The
//!   apiserver resolves the chart's Service `ha-guard.ha-guard` to `localhost:PORT` and still
//!   verifies the certificate for `ha-guard.ha-guard.svc` against the injected caBundle. These two
//!   fields are the only difference from the rendering: set with `kubectl patch` after
//!   `kubectl apply` (phase 1), and by a kustomize post-renderer (`helm --post-renderer`, phase 2,
//!   so that `helm upgrade` keeps them); the test checks that the release holds the rendering with
//!   exactly these changes.
//! - *The kubelet*: each replica is the `ha-guard` binary started with the container's `args` and
//!   `env` as the apiserver holds the Deployment; the projected volume's files (the ConfigMap's
//!   `config.yaml`) are written under a directory of the replica's own and the mount path in the
//!   args is rewritten to it (the only change to the args); `POD_NAMESPACE` is resolved from its
//!   `fieldRef` as the downward API does; the environment holds nothing else but, in place of the
//!   mounted service-account token, `KUBECONFIG`: a kubeconfig whose only credential is the
//!   ServiceAccount's token from `kubectl create token`. The pod's own network namespace becomes
//!   loopback ports of the replica's own (`--listen`/`--probe-listen` added; the test checks that
//!   the container ports are serve's defaults). A replica counts as ready when its readinessProbe
//!   (`/readyz`) answers 200; a ConfigMap change reaches its file as the kubelet's atomic update
//!   would; the replica runs in an empty working directory, which must stay empty
//!   (readOnlyRootFilesystem).
//! - *The Deployment controller's status* (for `kubectl rollout status`), written by the test once
//!   the replicas are ready, and *the namespace controller* (a deleted Namespace is finalized).
//!
//! - *The scheduler, the kubelet and the image for `helm test`'s Pod* (issue 51, Show 2): see
//!   [`run_test_pod`] and tests/e2e/README.md; helm, the test hooks, the token, RBAC, the dry run,
//!   the webhooks, the replicas and `ha-guard probe-webhook` are real.
//!
//! **Phase 1, without Helm**: `helm template | kubectl apply --server-side` (and docs/operations.md's
//! `kubectl apply --server-side -f manifests/ha-guard.yaml`, the same objects: a no-op); two
//! replicas make one CA in the chart's Secret and inject it into the chart's webhook
//! configurations; kubectl writes are denied, warned and mutated, and the apiserver's metrics show
//! no call failed or failed open; the ServiceAccount gets 403 for anything but its Secret and its
//! two webhook configurations; docs/operations.md's uninstall without Helm leaves nothing behind.
//! **Phase 2, with Helm**: `helm install`, `kubectl rollout status`, `helm test` (passes, fails
//! saying ha-guard did not answer with every replica stopped, passes again), README's gradual
//! rollout (`kubectl label ns --all ha-guard.io/mode=warn`, then the label removed); the audit's own
//! Deployment run beside (two `ha-guard reports` replicas with its ServiceAccount's token: one
//! writes the reports, the webhook's replicas none), `helm upgrade -f
//! my-values.yaml` (docs/operations.md's example: 3 replicas, a rule turned to deny) under a stream of writes:
//! the Secret's certificates and the caBundle are kept, the new rule is enforced, no write fails
//! or passes unchecked; `helm upgrade --set webhook.failurePolicy=Fail`, then ha-guard down: writes
//! are refused except in the release namespace and kube-system; `helm uninstall` deletes the webhook
//! configurations before anything else (etcd's order of the deletions), none is left, and writes
//! succeed though failurePolicy was Fail and ha-guard is down.
//! **Phase 3, `certificates.mode=secret`** (docs/operations.md "Certificates"): a certificate from `ha-guard
//! certs` in a Secret of the user's, its CA given with `--set-file`: the replicas serve the mounted
//! files, and a certificate re-issued from the kept CA reaches them and stays trusted.
//! (`certManager` needs cert-manager, which this control plane does not run.)

#[path = "support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};
use support::balancer::Balancer;
use support::helm::{Helm, post_renderer};
use support::*;

/// Release, namespace and the chart's resource names (release `ha-guard` contains the chart's
/// name, so its full name is the release name).
const RELEASE: &str = "ha-guard";
const NS: &str = "ha-guard";
const NAME: &str = "ha-guard";
const SECRET: &str = "ha-guard-tls";
const CHART: &str = "charts/ha-guard";
/// The ServiceAccount as `kubectl auth can-i --as` names it.
const SA: &str = "system:serviceaccount:ha-guard:ha-guard";
/// The audit's Deployment and ServiceAccount (`ha-guard reports`).
const AUDIT: &str = "ha-guard-audit";
const AUDIT_SA: &str = "system:serviceaccount:ha-guard:ha-guard-audit";
const WEBHOOK_KINDS: [&str; 2] = ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"];

/// Printed past the test harness's capture, so that CI logs show the figures of a passing run.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "[e2e install] {line}");
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s.trim()).unwrap_or_else(|e| panic!("not base64 ({e}): {s}"))
}

/// docs/operations.md's manifests/ha-guard.yaml, for kubectl.
fn shipped_path() -> String {
    repo().join(SHIPPED).to_string_lossy().into_owned()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().map(|s| s.as_str().expect("a string").to_string()).collect()).unwrap_or_default()
}

/// The time of one of ha-guard's JSON log lines, seconds since the epoch.
fn event_time(v: &Value) -> f64 {
    humantime::parse_rfc3339(v["timestamp"].as_str().unwrap_or_default())
        .map(|at| at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64())
        .unwrap_or(0.0)
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64()
}

// --- helm ----------------------------------------------------------------------------------------

/// The chart's release objects with `args` (`helm template`, hooks left out).
fn template(helm: &Helm, args: &[&str]) -> String {
    let mut all = vec!["template", RELEASE, CHART, "--namespace", NS, "--no-hooks"];
    all.extend_from_slice(args);
    helm.run(&all).success().stdout
}

// --- the route from the Service to the replicas, stood in for -------------------------------------

/// The stand-in applied to rendered objects: the Service `ExternalName` to localhost, every
/// webhook's service port the balancer's.
fn stand_in(docs: &mut [Value], port: u16) {
    for doc in docs {
        match doc["kind"].as_str() {
            Some("Service") if doc["metadata"]["name"] == NAME => {
                doc["spec"]["type"] = json!("ExternalName");
                doc["spec"]["externalName"] = json!("localhost");
            }
            Some("ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration") => {
                for hook in doc["webhooks"].as_array_mut().expect("webhooks") {
                    hook["clientConfig"]["service"]["port"] = json!(port);
                }
            }
            _ => {}
        }
    }
}

/// The same stand-in on installed objects (phase 1): `kubectl patch`.
fn patch_route(cp: &ControlPlane, port: u16) {
    let service = r#"{"spec":{"type":"ExternalName","externalName":"localhost"}}"#;
    cp.kubectl(&["-n", NS, "patch", "service", NAME, "--type=merge", "-p", service]).success();
    for kind in WEBHOOK_KINDS {
        let hooks =
            cp.kubectl(&["get", kind, NAME, "-o", "json"]).success().json()["webhooks"].as_array().map_or(0, Vec::len);
        let ops: Vec<Value> = (0..hooks)
            .map(
                |i| json!({"op": "replace", "path": format!("/webhooks/{i}/clientConfig/service/port"), "value": port}),
            )
            .collect();
        cp.kubectl(&["patch", kind, NAME, "--type=json", "-p", &Value::from(ops).to_string()]).success();
    }
}

/// Objects keyed by kind and name, for comparing sets of manifests whatever their order.
fn by_name(docs: Vec<Value>) -> BTreeMap<String, Value> {
    docs.into_iter()
        .map(|d| {
            (format!("{}/{}", d["kind"].as_str().unwrap_or("?"), d["metadata"]["name"].as_str().unwrap_or("?")), d)
        })
        .collect()
}

// --- the replicas, run as the kubelet would run the chart's pods ----------------------------------

/// One ha-guard replica: the container of the Deployment's pod template, run as a process.
struct Pod {
    name: String,
    dir: PathBuf,
    pidfile: PathBuf,
    namespace: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    kubeconfig: PathBuf,
    /// `(mountPath, the directory standing for it, the volume)`.
    mounts: Vec<(String, PathBuf, Value)>,
    readiness_path: String,
    /// The webhook's container (`serve`), or the audit's (`reports`: a probe port only).
    webhook: bool,
    webhook_port: u16,
    probe_port: u16,
    child: Option<Child>,
}

impl Pod {
    /// Starts the container of `deployment` (as the apiserver holds it) as the replica `name`,
    /// without waiting for it to be ready.
    fn spawn(cp: &ControlPlane, name: &str, deployment: &Value, kubeconfig: &Path) -> Pod {
        let namespace = deployment["metadata"]["namespace"].as_str().expect("the Deployment's namespace").to_string();
        let spec = &deployment["spec"]["template"]["spec"];
        let containers = spec["containers"].as_array().expect("containers");
        assert_eq!(containers.len(), 1, "one container in the chart's pod");
        let c = &containers[0];
        assert!(c.get("command").is_none(), "the image's ENTRYPOINT (/ha-guard) runs: no command");
        let dir = cp.root().join(name);
        for d in ["cwd", "home"] {
            std::fs::create_dir_all(dir.join(d)).expect("the replica's directories");
        }
        let volumes: BTreeMap<&str, &Value> =
            spec["volumes"].as_array().into_iter().flatten().map(|v| (v["name"].as_str().unwrap_or(""), v)).collect();
        let mut mounts = Vec::new();
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let path = m["mountPath"].as_str().expect("mountPath").to_string();
            let volume = volumes.get(m["name"].as_str().unwrap_or("")).expect("the mount's volume");
            let host = dir.join("mnt").join(path.trim_start_matches('/'));
            project(cp, &namespace, volume, &host);
            mounts.push((path, host, (*volume).clone()));
        }
        // The admission policies off: their owner is the webhook configuration, and this control
        // plane runs no garbage collector to remove them when it goes (the uninstall steps), nor
        // should they take over what this test holds the webhooks to. tests/e2e_admission_policies.rs
        // shows them with the chart's value, kube-controller-manager running.
        let args: Vec<String> = strings(&c["args"])
            .into_iter()
            .map(|a| mounts.iter().fold(a, |a, (path, host, _)| a.replace(path.as_str(), &host.to_string_lossy())))
            .map(|a| if a.starts_with("--admission-policies=") { "--admission-policies=off".to_string() } else { a })
            .collect();
        let env = c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let var = e["name"].as_str().expect("env name").to_string();
                // The downward API: the pod's namespace is the Deployment's, its name the replica's.
                let value = match (&e["value"], e["valueFrom"]["fieldRef"]["fieldPath"].as_str()) {
                    (Value::String(v), _) => v.clone(),
                    (_, Some("metadata.namespace")) => namespace.clone(),
                    (_, Some("metadata.name")) => name.to_string(),
                    _ => panic!("env {var}: the stand-in kubelet resolves values and metadata fieldRefs only: {e}"),
                };
                (var, value)
            })
            .collect();
        let ports: BTreeMap<&str, u64> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| (p["name"].as_str().unwrap_or(""), p["containerPort"].as_u64().unwrap_or(0)))
            .collect();
        let probe = &c["readinessProbe"]["httpGet"];
        let (listen, probe_listen) = serve_default_ports();
        let webhook = args.first().map(String::as_str) == Some("serve");
        assert!(webhook || args.first().map(String::as_str) == Some("reports"), "serve or reports: {args:?}");
        assert_eq!(ports.get(probe["port"].as_str().unwrap_or("")), Some(&probe_listen), "readiness: --probe-listen");
        if webhook {
            assert_eq!(ports.get("https"), Some(&listen), "the webhook's container port: serve's default --listen");
        } else {
            assert_eq!(ports.len(), 1, "the audit's pod has its probe port only: {ports:?}");
        }
        assert!(
            !args.iter().any(|a| a.starts_with("--listen") || a.starts_with("--probe-listen")),
            "the chart relies on serve's default addresses: {args:?}"
        );
        let mut pod = Pod {
            name: name.to_string(),
            pidfile: cp.root().join(format!("{name}.pid")),
            dir,
            namespace,
            args,
            env,
            kubeconfig: kubeconfig.to_path_buf(),
            mounts,
            readiness_path: probe["path"].as_str().expect("readinessProbe path").to_string(),
            webhook,
            webhook_port: 0,
            probe_port: 0,
            child: None,
        };
        pod.start().unwrap_or_else(|e| panic!("{name}: {e}"));
        pod
    }

    fn start(&mut self) -> Result<(), String> {
        self.webhook_port = free_port();
        self.probe_port = loop {
            let p = free_port();
            if p != self.webhook_port {
                break p;
            }
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("{}: {e}", self.log_path().display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        // The pod's network namespace: its own ports, on loopback.
        let listen = format!("127.0.0.1:{}", self.webhook_port);
        let listen: &[&str] = if self.webhook { &["--listen", &listen] } else { &[] };
        let child = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
            .args(&self.args)
            .args(listen)
            .args(["--probe-listen", &format!("127.0.0.1:{}", self.probe_port)])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.join("home"))
            .current_dir(self.dir.join("cwd"))
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

    fn log_path(&self) -> PathBuf {
        self.dir.join("ha-guard.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// ha-guard's JSON log lines whose message starts with `message`.
    fn events(&self, message: &str) -> Vec<Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["message"].as_str().is_some_and(|m| m.starts_with(message)))
            .collect()
    }

    /// Log lines above INFO (a refused API call, a failing watch, a bad configuration).
    fn warnings(&self) -> Vec<String> {
        self.log().lines().filter(|l| !l.contains(r#""level":"INFO""#)).map(str::to_string).collect()
    }

    fn get(&self, path: &str) -> Result<(u16, String), String> {
        http_get(self.probe_port, path)
    }

    fn metrics(&self) -> Metrics {
        match self.get("/metrics") {
            Ok((200, body)) => Metrics::parse(&body),
            other => panic!("{}: GET /metrics: {other:?}", self.name),
        }
    }

    /// Waits until the readinessProbe's path answers 200 (started again on other ports if a port
    /// was taken meanwhile).
    fn wait_ready(&mut self) -> Result<(), String> {
        let path = self.readiness_path.clone();
        for _ in 0..3 {
            let result = poll(&format!("{} {path} 200", self.name), WAIT, Duration::from_millis(100), || {
                if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                    return Ok(Err(format!(
                        "{} exited ({status}); its log:\n{}",
                        self.name,
                        tail(&self.log_path(), 30)
                    )));
                }
                match self.get(&path) {
                    Ok((200, _)) => Ok(Ok(())),
                    Ok((code, body)) => Err(format!("{code} {}", body.trim())),
                    Err(e) => Err(e),
                }
            })?;
            match result {
                Ok(()) => return Ok(()),
                Err(e) if e.contains("Address already in use") => self.start()?,
                Err(e) => return Err(e),
            }
        }
        Err(format!("{}: no free ports", self.name))
    }

    /// What the kubelet does when the ConfigMap (or Secret) behind a projected volume changes:
    /// the files are replaced, atomically.
    fn sync_volumes(&self, cp: &ControlPlane) {
        for (_, host, volume) in &self.mounts {
            project(cp, &self.namespace, volume, host);
        }
    }

    /// SIGTERM, as the kubelet stops a pod (ha-guard then drains for --shutdown-delay and
    /// --shutdown-timeout).
    fn terminate(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        }
    }

    /// Waits for the process to exit (SIGKILL after `grace`, as the kubelet does after the
    /// pod's terminationGracePeriodSeconds); its exit status.
    fn wait_exit(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let deadline = Instant::now() + grace;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                _ => {
                    let _ = child.kill();
                    break child.wait().ok();
                }
            }
        };
        let _ = std::fs::remove_file(&self.pidfile);
        status
    }

    /// The working directory must stay empty: the image's root filesystem is read-only.
    fn wrote_nothing(&self) -> Vec<String> {
        std::fs::read_dir(self.dir.join("cwd"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

/// The ports of `serve`'s default `--listen` and `--probe-listen` (from `serve --help`), where the
/// chart's container ports must be since its args leave both out.
fn serve_default_ports() -> (u64, u64) {
    static PORTS: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();
    *PORTS.get_or_init(|| {
        let out =
            Command::new(env!("CARGO_BIN_EXE_ha-guard")).args(["serve", "--help"]).output().expect("serve --help");
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let default_of = |flag: &str| -> u64 {
            let after = &help[help.find(&format!("{flag} <ADDR>")).unwrap_or_else(|| panic!("{flag} in:\n{help}"))..];
            let value = &after[after.find("[default: ").expect("a default") + "[default: ".len()..];
            value[..value.find(']').unwrap()].rsplit(':').next().unwrap().parse().expect("a port")
        };
        (default_of("--listen"), default_of("--probe-listen"))
    })
}

/// Writes the files of a projected volume (ConfigMap and Secret sources) under `dir`, each
/// replaced atomically (write, then rename), as the kubelet's `..data` swap does.
fn project(cp: &ControlPlane, ns: &str, volume: &Value, dir: &Path) {
    let sources = volume["projected"]["sources"].as_array().unwrap_or_else(|| {
        panic!("volume {}: the stand-in kubelet projects `projected` volumes only: {volume}", volume["name"])
    });
    for source in sources {
        let (kind, src) = match (source.get("configMap"), source.get("secret")) {
            (Some(c), _) => ("configmap", c),
            (_, Some(s)) => ("secret", s),
            _ => panic!("a projected source the stand-in kubelet does not know: {source}"),
        };
        let name = src["name"].as_str().expect("the source's name");
        let obj = cp.kubectl(&["get", kind, name, "-n", ns, "-o", "json"]).success().json();
        for item in src["items"].as_array().expect("the chart names its items") {
            let key = item["key"].as_str().expect("key");
            let text = obj["data"][key].as_str().unwrap_or_else(|| panic!("{kind} {ns}/{name} has no key {key}"));
            let bytes = if kind == "secret" { b64(text) } else { text.as_bytes().to_vec() };
            let file = dir.join(item["path"].as_str().expect("path"));
            std::fs::create_dir_all(file.parent().unwrap()).expect("the volume's directories");
            let tmp = file.with_extension("kubelet-tmp");
            std::fs::write(&tmp, bytes).expect("a projected file");
            std::fs::rename(&tmp, &file).expect("the atomic swap");
        }
    }
}

/// Starts `n` replicas of the Deployment as the apiserver holds it now (all at once, as a
/// ReplicaSet does), waits until each is ready, and puts them behind the balancer.
fn start_replicas(cp: &ControlPlane, prefix: &str, n: usize, kubeconfig: &Path, balancer: &Balancer) -> Vec<Pod> {
    let deployment = cp.kubectl(&["get", "deployment", NAME, "-n", NS, "-o", "json"]).success().json();
    let started = Instant::now();
    let mut pods: Vec<Pod> =
        (0..n).map(|i| Pod::spawn(cp, &format!("{prefix}-{i}"), &deployment, kubeconfig)).collect();
    for p in &mut pods {
        p.wait_ready().unwrap_or_else(|e| panic!("{e}"));
    }
    report(&format!("{n} replicas ready {:.1?} after they started", started.elapsed()));
    let mut ports = balancer.backends();
    ports.extend(pods.iter().map(|p| p.webhook_port));
    balancer.set_backends(ports);
    pods
}

/// Stops replicas as the kubelet stops pods (SIGTERM to all, then each waited for), after taking
/// them out of the balancer (the endpoints controller drops a pod that is shutting down).
fn stop_replicas(pods: &mut [Pod], balancer: &Balancer) {
    let leaving: BTreeSet<u16> = pods.iter().map(|p| p.webhook_port).collect();
    balancer.set_backends(balancer.backends().into_iter().filter(|p| !leaving.contains(p)).collect());
    for p in pods.iter() {
        p.terminate();
    }
    for p in pods.iter_mut() {
        let status = p.wait_exit(Duration::from_secs(30));
        assert!(status.is_some_and(|s| s.success()), "{} exits 0 on SIGTERM: {status:?}", p.name);
    }
    balancer.cut();
}

/// What the Deployment controller would report once `ready` replicas are available.
fn report_deployment_status(cp: &ControlPlane, ready: usize) {
    let d = cp.kubectl(&["get", "deployment", NAME, "-n", NS, "-o", "json"]).success().json();
    let want = d["spec"]["replicas"].as_u64().expect("replicas") as usize;
    assert_eq!(ready, want, "as many ready replicas as the Deployment asks for");
    let status = json!({"status": {"observedGeneration": d["metadata"]["generation"], "replicas": ready,
        "updatedReplicas": ready, "readyReplicas": ready, "availableReplicas": ready}});
    cp.kubectl(&[
        "-n",
        NS,
        "patch",
        "deployment",
        NAME,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ])
    .success();
}

// --- the cluster side ----------------------------------------------------------------------------

/// The Secret's data, decoded.
fn secret(cp: &ControlPlane) -> BTreeMap<String, Vec<u8>> {
    let s = cp.kubectl(&["get", "secret", SECRET, "-n", NS, "-o", "json"]).success().json();
    s["data"]
        .as_object()
        .map(|d| d.iter().map(|(k, v)| (k.clone(), b64(v.as_str().unwrap_or_default()))).collect())
        .unwrap_or_default()
}

/// Every webhook's caBundle in both configurations, decoded, by webhook name.
fn bundles(cp: &ControlPlane) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for kind in WEBHOOK_KINDS {
        let c = cp.kubectl(&["get", kind, NAME, "-o", "json"]).success().json();
        for hook in c["webhooks"].as_array().expect("webhooks") {
            let bundle = hook["clientConfig"]["caBundle"].as_str().map(b64).unwrap_or_default();
            out.insert(hook["name"].as_str().unwrap_or_default().to_string(), bundle);
        }
    }
    out
}

/// The Secret filled by the replicas with one CA, made by exactly one of them (the others
/// followed), and that CA in every webhook of both configurations.
fn certificates_made_and_injected(cp: &ControlPlane, pods: &[Pod]) {
    let data = secret(cp);
    assert_eq!(data.keys().map(String::as_str).collect::<Vec<_>>(), ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    let cas = String::from_utf8_lossy(&data["ca.crt"]).matches("BEGIN CERTIFICATE").count();
    assert_eq!(cas, 1, "one CA in ca.crt");
    let made: usize = pods.iter().map(|p| p.events("managed TLS: made a new CA").len()).sum();
    assert_eq!(made, 1, "of the replicas racing on the empty Secret, one made the CA");
    let all = bundles(cp);
    assert_eq!(all.keys().map(String::as_str).collect::<Vec<_>>(), ["mutate.ha-guard.io", "validate.ha-guard.io"]);
    for (hook, bundle) in &all {
        assert_eq!(bundle, &data["ca.crt"], "{hook}: the caBundle is the Secret's ca.crt");
    }
    for p in pods {
        let m = p.metrics();
        let cert = m.get("ha_guard_tls_cert_not_after_seconds", &[]).unwrap_or(0.0);
        let ca = m.get("ha_guard_tls_ca_not_after_seconds", &[]).unwrap_or(0.0);
        assert!(cert > unix_now() + 80.0 * 86400.0, "{}: a 90-day serving certificate (chart default): {cert}", p.name);
        assert!(ca > unix_now() + 4.0 * 365.0 * 86400.0, "{}: a 5-year CA (chart default): {ca}", p.name);
    }
}

/// Waits until every replica's view holds at least `n` objects of `kind`.
fn wait_views(pods: &[Pod], kind: &str, n: u64) {
    for p in pods {
        poll(&format!("{}: {n} {kind} in the view", p.name), WAIT, Duration::from_millis(50), || {
            let have = p.metrics().get("ha_guard_cache_objects", &[("kind", kind)]).unwrap_or(0.0) as u64;
            if have >= n { Ok(()) } else { Err(format!("{have}")) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

fn sum_over(pods: &[Pod], name: &str, labels: &[(&str, &str)]) -> f64 {
    pods.iter().map(|p| p.metrics().sum(name, labels)).sum()
}

fn assert_quiet(pods: &[Pod]) {
    for p in pods {
        let w = p.warnings();
        assert!(w.is_empty(), "{}: no warning (no API call refused, no watch failing): {w:#?}", p.name);
        assert!(p.wrote_nothing().is_empty(), "{} wrote into its working directory: {:?}", p.name, p.wrote_nothing());
    }
}

/// Neither webhook configuration of the release is left: none named like it, none labelled as
/// its instance.
fn no_webhook_configuration_left(cp: &ControlPlane) {
    for kind in WEBHOOK_KINDS {
        let all = cp.kubectl(&["get", kind, "-o", "json"]).success().json();
        let left: Vec<&Value> = all["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter(|c| {
                c["metadata"]["name"] == NAME || c["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
            })
            .collect();
        assert!(left.is_empty(), "no {kind} of the release left: {left:?}");
    }
}

fn assert_no_failed_call(calls: &WebhookCalls) {
    assert_eq!(calls.fail_open, 0.0, "no webhook call failed open: {calls:?}");
    assert_eq!(calls.failed, 0.0, "every webhook call was answered: {calls:?}");
    assert_eq!(calls.rejected_for_errors, 0.0, "no write refused for a failed call: {calls:?}");
}

/// A Deployment ha-guard denies whatever the view (`prestop-exceeds-grace`): proof that a write
/// passes unchecked when it is admitted.
fn denied_deployment(ns: &str, name: &str) -> Value {
    slow_prestop(deployment(ns, name, 1))
}

// --- the test ------------------------------------------------------------------------------------

#[test]
fn the_chart_installed_upgraded_and_uninstalled_on_a_real_apiserver() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    let helm = Helm::new(&cp);
    cp.nodes(&["node-a", "node-b", "node-c"]);
    let balancer = Balancer::start(Vec::new());
    let logs: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let context_logs = logs.clone();
    let apiserver_log = cp.dir().join("apiserver.log");
    let mut steps = Steps::new(move || {
        let mut out: String =
            context_logs.lock().unwrap().iter().map(|l| format!("{}:\n{}\n", l.display(), tail(l, 12))).collect();
        out.push_str(&format!("{}:\n{}\n", apiserver_log.display(), tail(&apiserver_log, 8)));
        out
    });
    let mut pods: Vec<Pod> = Vec::new();
    let track = |pods: &[Pod]| {
        let mut logs = logs.lock().unwrap();
        for p in pods.iter().map(Pod::log_path) {
            if !logs.contains(&p) {
                logs.push(p);
            }
        }
    };

    // Phase 1: without Helm.
    steps.run("install: helm template | kubectl apply --server-side, the chart's objects as rendered", || {
        install_rendered(&cp, &helm, balancer.port)
    });
    steps.run("two replicas as the Deployment runs them, the token their only credential: one CA, injected", || {
        let token = cp.kubectl(&["create", "token", NAME, "-n", NS, "--duration=2h"]).success().stdout;
        let kubeconfig = cp.token_kubeconfig(token.trim(), &cp.root().join("sa-1.kubeconfig"));
        pods = start_replicas(&cp, "rendered", 2, &kubeconfig, &balancer);
        track(&pods);
        certificates_made_and_injected(&cp, &pods);
    });
    steps.run("kubectl writes through the chart's webhooks: denied, warned, mutated; none failed open", || {
        writes(&cp, &pods)
    });
    steps.run("the ServiceAccount writes nothing but its Secret and its webhook configurations (403)", || {
        least_privilege(&cp)
    });
    steps.run("uninstall without Helm (docs/operations.md): webhooks first, nothing left, writes pass", || {
        uninstall_rendered(&cp, &mut pods, &balancer)
    });
    pods.clear();

    // Phase 2: with Helm.
    let renderer = post_renderer(&cp.root().join("stand-in"), NAME, balancer.port);
    let renderer = renderer.to_str().expect("a UTF-8 path");
    steps.run("helm install: the release is the rendering, the route stood in for", || {
        helm_install(&cp, &helm, renderer, balancer.port)
    });
    steps.run("replicas of the release; kubectl rollout status; writes judged", || {
        let token = cp.kubectl(&["create", "token", NAME, "-n", NS, "--duration=2h"]).success().stdout;
        let kubeconfig = cp.token_kubeconfig(token.trim(), &cp.root().join("sa-2.kubeconfig"));
        pods = start_replicas(&cp, "release", 2, &kubeconfig, &balancer);
        track(&pods);
        certificates_made_and_injected(&cp, &pods);
        report_deployment_status(&cp, pods.len());
        cp.kubectl(&["-n", NS, "rollout", "status", "deployment/ha-guard"])
            .success()
            .shows(&["successfully rolled out"]);
        cp.namespace("apps-2", &[]);
        poll("the validating webhook denies", WAIT, Duration::from_millis(200), || validating_live(&cp, "apps-2"))
            .unwrap_or_else(|e| panic!("{e}"));
        poll("the mutating webhook mutates", WAIT, Duration::from_millis(200), || mutating_live(&cp, "apps-2"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_quiet(&pods);
        background_audit_reports(&cp, &pods);
    });
    steps.run("helm test: passes with replicas, fails saying ha-guard did not answer without, passes again", || {
        probe_node(&cp);
        let kubeconfig = cp.root().join("sa-2.kubeconfig");
        helm_test_up_and_down(&cp, &helm, &mut pods, &kubeconfig, &balancer);
        track(&pods);
    });
    steps.run("rolling out gradually (README): mode=warn everywhere, then enforced namespace by namespace", || {
        gradual_rollout(&cp)
    });
    steps.run("helm upgrade -f my-values.yaml under writes: certificates and caBundle kept, none refused", || {
        let kubeconfig = cp.root().join("sa-2.kubeconfig");
        upgrade(&cp, &helm, renderer, &mut pods, &kubeconfig, &balancer);
        track(&pods);
    });
    steps.run(
        "failurePolicy Fail: caBundle kept; ha-guard down refuses writes but in its namespace and kube-system",
        || fail_closed(&cp, &helm, renderer, &mut pods, &balancer),
    );
    steps.run("helm uninstall: webhook configurations deleted first, none left, writes pass", || {
        helm_uninstall(&cp, &helm)
    });
    pods.clear();

    // Phase 3: certificates from a Secret of the user's.
    steps.run("certificates.mode=secret: the user's Secret served, a re-issued certificate picked up", || {
        pods = secret_mode(&cp, &helm, renderer, &balancer);
        track(&pods);
    });
    steps.finish();
}

// --- phase 1: without Helm -----------------------------------------------------------------------

fn install_rendered(cp: &ControlPlane, helm: &Helm, port: u16) {
    // As `helm install --create-namespace` does; manifests/ha-guard.yaml carries the Namespace.
    cp.kubectl(&["create", "namespace", NS]).success();
    let rendered = template(helm, &[]);
    let docs = yaml_docs(&rendered);
    let applied = cp.kubectl_in(&["apply", "--server-side", "-f", "-"], &rendered).success();
    assert_eq!(applied.stdout.matches("serverside-applied").count(), docs.len(), "{}", applied.stdout);

    // docs/operations.md's install without Helm applies the same objects (plus the Namespace's labels): a
    // no-op for every object of the release.
    let shipped = shipped_manifests();
    let shipped_path = shipped_path();
    let mut release = by_name(shipped.clone());
    release.retain(|k, _| !k.starts_with("Namespace/"));
    assert_eq!(release, by_name(docs.clone()), "{SHIPPED} is the chart's default rendering");
    let versions = |cp: &ControlPlane| -> BTreeMap<String, String> {
        let list = cp.kubectl(&["get", "-f", &shipped_path, "-o", "json"]).success().json();
        list["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter(|o| o["kind"] != "Namespace")
            .map(|o| {
                (format!("{}/{}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap()), {
                    o["metadata"]["resourceVersion"].as_str().unwrap().to_string()
                })
            })
            .collect()
    };
    let before = versions(cp);
    let out = cp.kubectl(&["apply", "--server-side", "-f", &shipped_path]).success();
    assert_eq!(out.stdout.matches("serverside-applied").count(), shipped.len(), "{}", out.stdout);
    assert_eq!(versions(cp), before, "kubectl apply --server-side -f {SHIPPED} changed nothing");
    let labels = cp.kubectl(&["get", "namespace", NS, "-o", "json"]).success().json()["metadata"]["labels"].clone();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted", "the shipped Namespace's labels");

    // Nothing of the certificates yet: the Secret is empty, the webhooks have no caBundle.
    assert!(secret(cp).is_empty(), "the chart creates the Secret empty");
    assert!(bundles(cp).values().all(Vec::is_empty), "the chart ships no caBundle");
    patch_route(cp, port);
}

fn writes(cp: &ControlPlane, pods: &[Pod]) {
    let ns = "apps";
    cp.namespace(ns, &[]);
    // The apiserver picks the injected caBundle up asynchronously (its informer).
    poll("the validating webhook denies", WAIT, Duration::from_millis(200), || validating_live(cp, ns))
        .unwrap_or_else(|e| panic!("{e}"));
    poll("the mutating webhook mutates", WAIT, Duration::from_millis(200), || mutating_live(cp, ns))
        .unwrap_or_else(|e| panic!("{e}"));
    let before = WebhookCalls::of(&cp.metrics());
    let denied_before = sum_over(pods, "ha_guard_admission_requests_total", &[("decision", "denied")]);

    // Denied, and nothing stored.
    cp.kubectl_in(&["apply", "-f", "-"], &canary_deny(ns)).denied(&["prestop-exceeds-grace"]);
    assert!(!cp.kubectl(&["get", "deployment", "canary", "-n", ns]).ok(), "nothing stored");
    // Warned (its pods are killed without a grace) and mutated (its spread gets the workload's
    // selector).
    let web = pod(
        deployment(ns, "web", 2),
        json!({"terminationGracePeriodSeconds": 0,
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}),
    );
    cp.apply(&web).success().warns(&["termination-grace-zero"]);
    let got = cp.kubectl(&["get", "deployment", "web", "-n", ns, "-o", "json"]).success().json();
    assert_eq!(
        got["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"],
        json!({"matchLabels": {"app": "web"}}),
        "the spread's missing selector filled in"
    );
    // Cross-object, from the live view (the ServiceAccount's list/watch): a PDB that would block
    // every eviction of web is denied once both replicas have seen web.
    wait_views(pods, "Deployment", 1);
    cp.apply(pdb(ns, "web-strict", "web", json!({"minAvailable": 2}))).denied(&["pdb-blocks-eviction"]);
    // Mutated: the PDB gets unhealthyPodEvictionPolicy AlwaysAllow.
    cp.apply(pdb(ns, "web", "web", json!({"maxUnavailable": 1}))).success().no_warnings();
    let got = cp.kubectl(&["get", "pdb", "web", "-n", ns, "-o", "json"]).success().json();
    assert_eq!(got["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");

    let calls = WebhookCalls::of(&cp.metrics()).since(&before);
    report(&format!("writes through the chart's webhooks: {calls:?}"));
    assert_no_failed_call(&calls);
    assert_eq!(calls.denied, 2.0, "the apiserver saw exactly the two denials: {calls:?}");
    // The mutating webhook is sent only what a mutation could change (the matchCondition
    // needs-a-mutation): canary has no spread, so it goes to the validating webhook alone; web and
    // both PDBs go through both.
    assert_eq!(calls.calls, 7.0, "four writes, three of them through both webhooks: {calls:?}");
    let denied = sum_over(pods, "ha_guard_admission_requests_total", &[("decision", "denied")]) - denied_before;
    assert_eq!(denied, 2.0, "ha-guard's own count of denials");
    assert_quiet(pods);
}

/// With the chart's CRDs installed by helm (`crds/`): the audit's own Deployment (`ha-guard
/// reports`, two replicas with the audit ServiceAccount's token) writes the reports, one replica
/// only, with that ServiceAccount's rights (server-side apply creates them: `create` limited by
/// name is enough), and may touch no other report. The webhook's replicas write none.
fn background_audit_reports(cp: &ControlPlane, webhook: &[Pod]) {
    let deployment = cp.kubectl(&["get", "deployment", AUDIT, "-n", NS, "-o", "json"]).success().json();
    let token = cp.kubectl(&["create", "token", AUDIT, "-n", NS, "--duration=1h"]).success().stdout;
    let kubeconfig = cp.token_kubeconfig(token.trim(), &cp.root().join("audit-sa.kubeconfig"));
    let mut pods: Vec<Pod> = (0..2).map(|i| Pod::spawn(cp, &format!("audit-{i}"), &deployment, &kubeconfig)).collect();
    for p in &mut pods {
        p.wait_ready().unwrap_or_else(|e| panic!("{e}"));
    }
    let report = poll("the ClusterPolicyReport written by the Lease holder", WAIT, Duration::from_millis(200), || {
        let r = cp.kubectl(&["get", "clusterpolicyreport", "ha-guard", "-o", "json", "--show-managed-fields"]);
        if r.ok() { Ok(r.json()) } else { Err(r.output()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report["metadata"]["managedFields"][0]["manager"], "ha-guard", "{report}");
    let writers: Vec<&str> = pods
        .iter()
        .filter(|p| p.metrics().get("ha_guard_audit_report_writes_total", &[]).unwrap_or(0.0) > 0.0)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(writers.len(), 1, "one replica writes the reports: {writers:?}");
    for p in webhook {
        assert_eq!(p.metrics().get("ha_guard_audit_report_writes_total", &[]), Some(0.0), "{} writes reports", p.name);
    }
    for p in &pods {
        assert!(p.warnings().is_empty(), "{}: {:?}", p.name, p.warnings());
    }
    for p in &pods {
        p.terminate();
    }
    for p in &mut pods {
        let status = p.wait_exit(Duration::from_secs(30));
        assert!(status.is_some_and(|s| s.success()), "{} exits 0 on SIGTERM: {status:?}", p.name);
    }
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", AUDIT_SA]);
        cp.kubectl(&all).stdout.trim() == "yes"
    };
    for args in [
        &["list", "pods", "--all-namespaces"][..],
        &["watch", "pods", "--all-namespaces"],
        &["patch", "leases.coordination.k8s.io/ha-guard-audit", "-n", NS],
    ] {
        assert!(can(args), "the audit's ServiceAccount may {args:?}");
    }
    for args in [&["list", "replicasets", "--all-namespaces"][..], &["get", "secret/ha-guard-tls", "-n", NS]] {
        assert!(!can(args), "the audit's ServiceAccount may not {args:?}");
    }
    for args in [
        &["create", "policyreports.wgpolicyk8s.io/ha-guard", "-n", "apps"][..],
        &["patch", "policyreports.wgpolicyk8s.io/ha-guard", "-n", "apps"],
        &["delete", "policyreports.wgpolicyk8s.io/ha-guard", "-n", "apps"],
        &["patch", "clusterpolicyreports.wgpolicyk8s.io/ha-guard"],
        &["list", "policyreports.wgpolicyk8s.io", "--all-namespaces"],
    ] {
        assert!(can(args), "the audit's ServiceAccount may {args:?}");
    }
    for args in [
        &["create", "policyreports.wgpolicyk8s.io", "-n", "apps"][..],
        &["patch", "policyreports.wgpolicyk8s.io/other", "-n", "apps"],
        &["delete", "clusterpolicyreports.wgpolicyk8s.io/other"],
        &["update", "policyreports.wgpolicyk8s.io/ha-guard", "-n", "apps"],
    ] {
        assert!(!can(args), "the ServiceAccount may not {args:?}");
    }
}

fn least_privilege(cp: &ControlPlane) {
    // Another webhook configuration, that the ServiceAccount must not touch.
    cp.apply(json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "someone-else"}, "webhooks": []}))
        .success();
    let can = |args: &[&str]| -> bool {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", SA]);
        let out = cp.kubectl(&all);
        match out.stdout.trim() {
            "yes" => true,
            "no" => false,
            _ => panic!("kubectl auth can-i: {}", out.output()),
        }
    };
    let may = [
        vec!["get", "secret/ha-guard-tls", "-n", NS],
        vec!["update", "secret/ha-guard-tls", "-n", NS],
        vec!["watch", "secret/ha-guard-tls", "-n", NS],
        vec!["patch", "validatingwebhookconfiguration/ha-guard"],
        vec!["update", "mutatingwebhookconfiguration/ha-guard"],
        vec!["list", "deployments", "--all-namespaces"],
        vec!["watch", "nodes"],
    ];
    for args in &may {
        assert!(can(args), "the ServiceAccount may {args:?}");
    }
    let may_not = [
        vec!["create", "secrets", "-n", NS],
        vec!["list", "secrets", "-n", NS],
        vec!["get", "secret/other", "-n", NS],
        vec!["get", "secret/ha-guard-tls", "-n", "default"],
        vec!["delete", "secret/ha-guard-tls", "-n", NS],
        vec!["create", "configmaps", "-n", NS],
        vec!["update", "configmap/ha-guard-config", "-n", NS],
        vec!["create", "deployments", "-n", "apps"],
        vec!["patch", "deployment/ha-guard", "-n", NS],
        vec!["create", "validatingwebhookconfigurations"],
        vec!["patch", "validatingwebhookconfiguration/someone-else"],
        vec!["delete", "validatingwebhookconfiguration/ha-guard"],
        vec!["delete", "mutatingwebhookconfiguration/ha-guard"],
        vec!["get", "pods", "-n", "apps"],
        vec!["watch", "pods", "--all-namespaces"],
        // The audit runs apart (its own ServiceAccount): no pods, no ReplicaSets, no Lease, no report.
        vec!["list", "pods", "--all-namespaces"],
        vec!["list", "replicasets", "--all-namespaces"],
        vec!["patch", "leases.coordination.k8s.io/ha-guard-audit", "-n", NS],
        vec!["patch", "policyreports.wgpolicyk8s.io/ha-guard", "-n", "apps"],
        vec!["delete", "pods", "-n", "apps"],
        vec!["patch", "leases.coordination.k8s.io/other", "-n", NS],
        vec!["create", "leases.coordination.k8s.io", "-n", "apps"],
        vec!["create", "clusterrolebindings"],
        vec!["escalate", "clusterroles"],
    ];
    for args in &may_not {
        assert!(!can(args), "the ServiceAccount may not {args:?}");
    }
    // And with its own token: each attempt is a 403.
    let token = cp.kubectl(&["create", "token", NAME, "-n", NS, "--duration=10m"]).success().stdout;
    let kubeconfig = cp.token_kubeconfig(token.trim(), &cp.root().join("sa-attempts.kubeconfig"));
    let sa = |args: &[&str], stdin: Option<&str>| kubectl(&kubeconfig, args, stdin);
    // What it may do, it can: read its Secret, change its own webhook configuration.
    sa(&["get", "secret", SECRET, "-n", NS], None).success();
    let touch = r#"{"metadata":{"annotations":{"e2e.ha-guard.io/touched":"by its ServiceAccount"}}}"#;
    sa(&["patch", "mutatingwebhookconfiguration", NAME, "--type=merge", "-p", touch], None).success();
    let forbidden = |out: Kubectl, what: &str| {
        assert!(
            !out.ok() && out.stderr.contains("forbidden: User \"system:serviceaccount:ha-guard:ha-guard\" cannot"),
            "{what}: expected a 403 for {SA}: {}",
            out.output()
        );
    };
    forbidden(sa(&["create", "secret", "generic", "other", "-n", NS], None), "create another Secret");
    forbidden(sa(&["get", "secrets", "-n", NS], None), "list Secrets");
    forbidden(sa(&["delete", "secret", SECRET, "-n", NS], None), "delete its Secret");
    forbidden(sa(&["create", "configmap", "other", "-n", NS], None), "create a ConfigMap");
    forbidden(
        sa(&["patch", "configmap", "ha-guard-config", "-n", NS, "--type=merge", "-p", r#"{"data":{"x":"y"}}"#], None),
        "change its own configuration",
    );
    let sneaky = deployment("apps", "sneaky", 1).to_string();
    forbidden(sa(&["create", "-f", "-"], Some(&sneaky)), "create a Deployment");
    forbidden(
        sa(&["patch", "deployment", NAME, "-n", NS, "--type=merge", "-p", r#"{"spec":{"replicas":0}}"#], None),
        "scale its own Deployment",
    );
    forbidden(
        sa(
            &[
                "patch",
                "validatingwebhookconfiguration",
                "someone-else",
                "--type=merge",
                "-p",
                r#"{"metadata":{"labels":{"x":"y"}}}"#,
            ],
            None,
        ),
        "patch another webhook configuration",
    );
    forbidden(sa(&["delete", "validatingwebhookconfiguration", NAME], None), "delete its validating configuration");
    forbidden(sa(&["delete", "mutatingwebhookconfiguration", NAME], None), "delete its mutating configuration");
    cp.kubectl(&["delete", "validatingwebhookconfiguration", "someone-else"]).success();
}

fn uninstall_rendered(cp: &ControlPlane, pods: &mut [Pod], balancer: &Balancer) {
    // docs/operations.md: the webhook configurations first, then the rest. `--wait=false` and the finalize
    // below stand for the namespace controller, which empties and removes a deleted Namespace.
    cp.kubectl(&["delete", "validatingwebhookconfiguration,mutatingwebhookconfiguration", NAME]).success();
    cp.kubectl(&["delete", "-f", &shipped_path(), "--ignore-not-found", "--wait=false"]).success();
    let mut ns = cp.kubectl(&["get", "namespace", NS, "-o", "json"]).success().json();
    ns["spec"]["finalizers"] = json!([]);
    cp.kubectl_in(&["replace", "--raw", &format!("/api/v1/namespaces/{NS}/finalize"), "-f", "-"], &ns.to_string())
        .success();
    poll("the namespace is gone", WAIT, Duration::from_millis(100), || {
        if cp.kubectl(&["get", "namespace", NS]).ok() { Err("still there".to_string()) } else { Ok(()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    // The apiserver drops the webhooks from its informer asynchronously.
    poll("writes are no longer sent to ha-guard", WAIT, Duration::from_millis(200), || {
        match validating_live(cp, "apps") {
            Ok(()) => Err("still denied".to_string()),
            Err(_) => Ok(()),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let before = WebhookCalls::of(&cp.metrics());
    // Still running, ha-guard is asked nothing: what it would deny is admitted.
    cp.apply(denied_deployment("apps", "after-uninstall")).success();
    stop_replicas(pods, balancer);
    cp.apply(denied_deployment("apps", "after-uninstall-down")).success();
    let calls = WebhookCalls::of(&cp.metrics()).since(&before);
    assert_eq!(calls, WebhookCalls::default(), "no call to ha-guard's webhooks, none failed open");
    no_webhook_configuration_left(cp);
    for (kind, name) in [("clusterrole", NAME), ("clusterrolebinding", NAME), ("clusterrole", "ha-guard-webhooks")] {
        assert!(!cp.kubectl(&["get", kind, name]).ok(), "{kind} {name} removed");
    }
}

// --- phase 2: with Helm --------------------------------------------------------------------------

fn helm_install(cp: &ControlPlane, helm: &Helm, renderer: &str, port: u16) {
    // The test's Pod placed on a node of its own (tests.nodeSelector, tests.tolerations).
    let values = probe_values(cp.root());
    let values = values.to_str().expect("a UTF-8 path");
    helm.run(&[
        "install",
        RELEASE,
        CHART,
        "--namespace",
        NS,
        "--create-namespace",
        "-f",
        values,
        "--post-renderer",
        renderer,
    ])
    .success()
    .shows(&["STATUS: deployed", "Certificates: managed."]);
    // The release holds the chart's rendering with exactly the route stood in for.
    let manifest = helm.run(&["get", "manifest", RELEASE, "--namespace", NS]).success().stdout;
    let mut want = yaml_docs(&template(helm, &["-f", values]));
    stand_in(&mut want, port);
    let (have, want) = (by_name(yaml_docs(&manifest)), by_name(want));
    assert_eq!(have.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (k, v) in &want {
        assert_eq!(&have[k], v, "{k}: the release holds the rendering, but for the route");
    }
    // And the uninstall hooks: both webhook configurations, as pre-delete hooks.
    let hooks = yaml_docs(&helm.run(&["get", "hooks", RELEASE, "--namespace", NS]).success().stdout);
    let hooked: BTreeSet<String> = hooks
        .iter()
        .filter(|h| h["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete")
        .map(|h| format!("{}/{}", h["kind"].as_str().unwrap_or(""), h["metadata"]["name"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        hooked,
        BTreeSet::from([
            "MutatingWebhookConfiguration/ha-guard".to_string(),
            "ValidatingWebhookConfiguration/ha-guard".into()
        ])
    );
    assert!(secret(cp).is_empty() && bundles(cp).values().all(Vec::is_empty), "no certificate before ha-guard runs");
}

/// README "Rolling out gradually": every namespace labelled `ha-guard.io/mode=warn` (a denial
/// becomes a warning), then the label removed from one namespace (denied again), then from all.
fn gradual_rollout(cp: &ControlPlane) {
    let ns = "apps-2";
    cp.kubectl(&["label", "ns", "--all", "ha-guard.io/mode=warn"]).success();
    // ha-guard reads the label from its view of the Namespaces (a watch): eventually.
    poll("a denial becomes a warning", WAIT, Duration::from_millis(200), || {
        let out = cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &canary_deny(ns));
        if out.ok() && out.warnings().iter().any(|w| w.starts_with("[prestop-exceeds-grace] ")) {
            Ok(())
        } else {
            Err(out.output())
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    cp.kubectl(&["label", "ns", ns, "ha-guard.io/mode-"]).success();
    poll("denied again", WAIT, Duration::from_millis(200), || validating_live(cp, ns))
        .unwrap_or_else(|e| panic!("{e}"));
    cp.kubectl(&["label", "ns", "--all", "ha-guard.io/mode-"]).success();
    let labelled = cp.kubectl(&["get", "ns", "-l", "ha-guard.io/mode", "-o", "name"]).success();
    assert_eq!(labelled.stdout.trim(), "", "no namespace left in warn mode");
}

/// The `my-values.yaml` example of docs/operations.md ("Upgrade": the block after
/// "# my-values.yaml").
fn readme_values() -> String {
    let readme = std::fs::read_to_string(repo().join("docs/operations.md")).expect("docs/operations.md");
    let start = readme.find("# my-values.yaml\n").expect("docs/operations.md shows a my-values.yaml");
    let block = &readme[start..];
    block[..block.find("```").expect("the end of the my-values.yaml block")].to_string()
}

/// A stream of writes through the webhooks while something else happens: each one denied
/// (`prestop-exceeds-grace`) or mutated (a PDB), as expected, or counted as failed or unchecked.
#[derive(Debug, Default)]
struct Tally {
    sent: u64,
    denied: u64,
    mutated: u64,
    failed: u64,
    unchecked: u64,
    failures: Vec<String>,
}

fn writer(kubeconfig: PathBuf, ns: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Tally> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
            let client = kube::Client::try_from(config).expect("client");
            let deployments: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<Deployment>(&()));
            let pdbs: Api<DynamicObject> =
                Api::namespaced_with(client, &ns, &ApiResource::erase::<PodDisruptionBudget>(&()));
            let mut t = Tally::default();
            let fail = |t: &mut Tally, what: String| {
                t.failed += 1;
                if t.failures.len() < 20 {
                    t.failures.push(what);
                }
            };
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let d: DynamicObject = serde_json::from_value(denied_deployment(&ns, &format!("slow-{n}"))).unwrap();
                t.sent += 1;
                match deployments.create(&PostParams::default(), &d).await {
                    Err(kube::Error::Api(s))
                        if s.code == 403
                            && s.message.contains("admission webhook \"validate.ha-guard.io\" denied the request")
                            && s.message.contains("[prestop-exceeds-grace] ") =>
                    {
                        t.denied += 1
                    }
                    Ok(_) => t.unchecked += 1,
                    Err(e) => fail(&mut t, format!("create Deployment slow-{n}: {e}")),
                }
                let p: DynamicObject =
                    serde_json::from_value(pdb(&ns, &format!("p-{n}"), "nothing", json!({"maxUnavailable": 1})))
                        .unwrap();
                t.sent += 1;
                match pdbs.create(&PostParams::default(), &p).await {
                    Ok(o) if o.data["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow" => {
                        t.mutated += 1;
                        t.sent += 1;
                        if let Err(e) = pdbs.delete(&format!("p-{n}"), &DeleteParams::default()).await {
                            fail(&mut t, format!("delete PDB p-{n}: {e}"));
                        }
                    }
                    Ok(_) => t.unchecked += 1,
                    Err(e) => fail(&mut t, format!("create PDB p-{n}: {e}")),
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            t
        })
    })
}

fn upgrade(
    cp: &ControlPlane,
    helm: &Helm,
    renderer: &str,
    pods: &mut Vec<Pod>,
    kubeconfig: &Path,
    balancer: &Balancer,
) {
    let ns = "apps-2";
    // Two replicas and nothing keeps them apart.
    let colocated = deployment(ns, "colocated", 2);
    // Before: replicas-colocated warns (its default).
    cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &colocated.to_string())
        .success()
        .warns(&["replicas-colocated"]);
    let values = cp.root().join("my-values.yaml");
    let readme_values = readme_values();
    assert!(
        readme_values.contains("replicaCount: 3") && readme_values.contains("replicas-colocated: deny"),
        "{readme_values}"
    );
    std::fs::write(&values, &readme_values).expect("my-values.yaml");

    let secret_before = secret(cp);
    let bundles_before = bundles(cp);
    let old = cp.kubectl(&["get", "deployment", NAME, "-n", NS, "-o", "json"]).success().json();
    cp.namespace("load", &[]);
    let calls_before = WebhookCalls::of(&cp.metrics());
    let upgrade_started = unix_now();
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let load = writer(cp.kubeconfig(), "load".into(), stop.clone());
    std::thread::sleep(Duration::from_secs(1));

    // docs/operations.md: helm upgrade ha-guard charts/ha-guard --namespace ha-guard -f my-values.yaml
    let upgraded = Instant::now();
    helm.run(&[
        "upgrade",
        RELEASE,
        CHART,
        "--namespace",
        NS,
        "-f",
        values.to_str().unwrap(),
        "--post-renderer",
        renderer,
    ])
    .success()
    .shows(&["STATUS: deployed", "REVISION: 2", "(3 replicas)"]);
    let new = cp.kubectl(&["get", "deployment", NAME, "-n", NS, "-o", "json"]).success().json();
    assert_eq!(new["spec"]["replicas"], 3);
    // The pod template is unchanged (the configuration is a mounted ConfigMap): the Deployment
    // controller scales up, rolls nothing; the kubelet updates the mounted file.
    assert_eq!(new["spec"]["template"], old["spec"]["template"], "no rollout");
    for p in pods.iter() {
        p.sync_volumes(cp);
    }
    let mut third = start_replicas(cp, "release-upgraded", 1, kubeconfig, balancer);
    pods.append(&mut third);
    for p in &pods[..2] {
        poll(&format!("{} reloaded its configuration", p.name), WAIT, Duration::from_millis(100), || {
            let m = p.metrics();
            match m.get("ha_guard_config_reloads_total", &[("result", "success")]) {
                Some(n) if n >= 1.0 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let applied = upgraded.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    let t = load.join().expect("the writer panicked");
    let calls = WebhookCalls::of(&cp.metrics()).since(&calls_before);
    report(&format!(
        "upgrade: applied in {applied:.1?} (helm, a third replica ready, the configuration reloaded); writes meanwhile: \
         {} sent over {:.1?}, {} denied, {} mutated, {} failed, {} unchecked; apiserver: {calls:?}",
        t.sent,
        started.elapsed(),
        t.denied,
        t.mutated,
        t.failed,
        t.unchecked
    ));
    assert!(t.failures.is_empty() && t.failed == 0, "{} writes failed:\n{}", t.failed, t.failures.join("\n"));
    assert_eq!(t.unchecked, 0, "writes passed unchecked");
    assert!(t.denied >= 5 && t.mutated >= 5, "the writes ran across the upgrade: {t:?}");
    assert_no_failed_call(&calls);
    assert_eq!(calls.denied, t.denied as f64, "the apiserver saw exactly the writer's denials: {calls:?}");

    // After: the new rule is enforced, by every replica.
    for _ in 0..pods.len() {
        cp.kubectl_in(&["apply", "-f", "-"], &colocated.to_string()).denied(&["replicas-colocated"]);
    }
    // The certificates are those of before: the Secret's data and every caBundle unchanged, and
    // no replica made or issued anything; the new replica serves what the Secret holds.
    assert!(secret(cp) == secret_before, "the Secret's certificates are kept across the upgrade");
    assert!(bundles(cp) == bundles_before, "the caBundle is kept across the upgrade");
    for p in pods.iter() {
        let since: Vec<Value> = [p.events("managed TLS: made a new CA"), p.events("managed TLS: issued")]
            .concat()
            .into_iter()
            .filter(|v| event_time(v) >= upgrade_started)
            .collect();
        assert!(since.is_empty(), "{}: no CA made, no certificate issued since the upgrade: {since:?}", p.name);
    }
    assert!(
        !pods[2].events("managed TLS: serving the certificate from the Secret").is_empty(),
        "the new replica serves the Secret's certificate"
    );
    report_deployment_status(cp, pods.len());
    cp.kubectl(&["-n", NS, "rollout", "status", "deployment/ha-guard"]).success().shows(&["successfully rolled out"]);
    assert_quiet(pods);
}

fn fail_closed(cp: &ControlPlane, helm: &Helm, renderer: &str, pods: &mut [Pod], balancer: &Balancer) {
    let bundles_before = bundles(cp);
    helm.run(&[
        "upgrade",
        RELEASE,
        CHART,
        "--namespace",
        NS,
        "--reuse-values",
        "--set",
        "webhook.failurePolicy=Fail",
        "--post-renderer",
        renderer,
    ])
    .success()
    .shows(&["failurePolicy Fail: while no replica answers, those writes are refused"]);
    for kind in WEBHOOK_KINDS {
        let c = cp.kubectl(&["get", kind, NAME, "-o", "json"]).success().json();
        assert_eq!(c["webhooks"][0]["failurePolicy"], "Fail", "{kind}");
    }
    assert!(bundles(cp) == bundles_before, "a helm upgrade that changes the webhooks keeps the caBundle");
    // Still judged, as before.
    poll("the validating webhook denies", WAIT, Duration::from_millis(200), || validating_live(cp, "apps-2"))
        .unwrap_or_else(|e| panic!("{e}"));

    // ha-guard down: every replica stopped. (The apiserver reads webhook configurations through
    // an informer: it is given the time to see Fail.)
    stop_replicas(pods, balancer);
    let down = deployment("apps-2", "while-down", 1).to_string();
    poll("writes are refused", WAIT, Duration::from_millis(200), || {
        let out = cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &down);
        if out.ok() { Err("admitted".to_string()) } else { Ok(()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let before = WebhookCalls::of(&cp.metrics());
    let refused = cp.kubectl_in(&["apply", "-f", "-"], &down).failure();
    // No spread, so no mutation to make: the mutating webhook is not called (needs-a-mutation),
    // the validating one is, and fails closed.
    assert!(
        refused.stderr.contains("failed calling webhook \"validate.ha-guard.io\""),
        "refused because ha-guard does not answer: {}",
        refused.output()
    );
    // ha-guard's own namespace and kube-system are never sent: ha-guard can be repaired.
    cp.apply(denied_deployment(NS, "repair")).success();
    cp.apply(denied_deployment("kube-system", "repair")).success();
    let calls = WebhookCalls::of(&cp.metrics()).since(&before);
    report(&format!("failurePolicy Fail, ha-guard down: {calls:?}"));
    assert_eq!(calls.fail_open, 0.0, "nothing failed open: {calls:?}");
    assert_eq!(calls.denied, 0.0, "nothing was judged: {calls:?}");
    assert_eq!(calls.failed, 1.0, "one call, to the validating webhook, failed: {calls:?}");
    assert_eq!(calls.rejected_for_errors, 1.0, "the apiserver refused the write for it: {calls:?}");
    assert!(!cp.kubectl(&["get", "deployment", "while-down", "-n", "apps-2"]).ok(), "nothing stored");
    cp.kubectl(&["delete", "deployment", "repair", "-n", NS]).success();
    cp.kubectl(&["delete", "deployment", "repair", "-n", "kube-system"]).success();
}

fn helm_uninstall(cp: &ControlPlane, helm: &Helm) {
    // Every deletion gets a resourceVersion from etcd's one revision counter: their order is
    // the order of the resourceVersions, replayed below by watches from before the uninstall.
    let from = cp.kubectl(&["get", "--raw", "/api/v1/namespaces/ha-guard/services"]).success().json()["metadata"]
        ["resourceVersion"]
        .as_str()
        .expect("a list's resourceVersion")
        .to_string();
    let before = WebhookCalls::of(&cp.metrics());
    helm.run(&["uninstall", RELEASE, "--namespace", NS]).success().shows(&["release \"ha-guard\" uninstalled"]);
    let paths = [
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "/api/v1/namespaces/ha-guard/services",
        "/apis/apps/v1/namespaces/ha-guard/deployments",
        "/api/v1/namespaces/ha-guard/serviceaccounts",
        "/api/v1/namespaces/ha-guard/secrets",
    ];
    let kubeconfig = cp.kubeconfig();
    let replays: Vec<_> = paths
        .iter()
        .map(|path| {
            let (kubeconfig, url) =
                (kubeconfig.clone(), format!("{path}?watch=1&resourceVersion={from}&timeoutSeconds=1"));
            std::thread::spawn(move || kubectl(&kubeconfig, &["get", "--raw", &url], None))
        })
        .collect();
    // (type, kind, name, resourceVersion, a hook?)
    let mut events: Vec<(String, String, String, u64, bool)> = Vec::new();
    for (path, replay) in paths.iter().zip(replays) {
        let out = replay.join().expect("a watch").success();
        for line in out.stdout.lines().filter(|l| !l.trim().is_empty()) {
            let e: Value = serde_json::from_str(line).unwrap_or_else(|err| panic!("{path}: {err}: {line}"));
            let o = &e["object"];
            events.push((
                e["type"].as_str().unwrap_or("").to_string(),
                path.rsplit('/').next().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                o["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).expect("resourceVersion"),
                o["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete",
            ));
        }
    }
    events.sort_by_key(|e| e.3);
    let order: Vec<String> =
        events.iter().map(|(t, k, n, rv, h)| format!("{rv} {t} {k}/{n}{}", if *h { " (hook)" } else { "" })).collect();
    report(&format!("helm uninstall, in etcd's order: {}", order.join(", ")));
    let is_webhook = |k: &str| k.ends_with("webhookconfigurations");
    let deletions = |f: &dyn Fn(&str) -> bool| -> Vec<u64> {
        events
            .iter()
            .filter(|e| e.0 == "DELETED" && f(&e.1) && e.2 != "sh.helm.release.v1.ha-guard.v1")
            .map(|e| e.3)
            .collect()
    };
    let webhooks = deletions(&|k| is_webhook(k));
    let others = deletions(&|k| !is_webhook(k));
    // Each configuration: deleted (before-hook-creation), created again as the hook, deleted.
    assert_eq!(webhooks.len(), 4, "{order:#?}");
    assert_eq!(events.iter().filter(|e| e.0 == "ADDED" && is_webhook(&e.1) && e.4).count(), 2, "{order:#?}");
    assert!(others.len() >= 4, "the Service, the Deployment, the ServiceAccount and the Secret deleted: {order:#?}");
    assert!(
        webhooks.iter().max() < others.iter().min(),
        "the webhook configurations are gone before anything else is deleted: {order:#?}"
    );

    no_webhook_configuration_left(cp);
    assert_eq!(helm.run(&["list", "--namespace", NS, "--all", "-q"]).success().stdout.trim(), "", "no release left");
    // failurePolicy was Fail and ha-guard is down: a webhook left behind would refuse these.
    poll("writes pass again", WAIT, Duration::from_millis(200), || {
        let out =
            cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &denied_deployment("apps-2", "after").to_string());
        if out.ok() { Ok(()) } else { Err(out.output()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let mid = WebhookCalls::of(&cp.metrics());
    cp.apply(denied_deployment("apps-2", "after")).success();
    cp.apply(pdb("apps-2", "after", "after", json!({"maxUnavailable": 1}))).success();
    let got = cp.kubectl(&["get", "pdb", "after", "-n", "apps-2", "-o", "json"]).success().json();
    assert!(got["spec"].get("unhealthyPodEvictionPolicy").is_none(), "no mutation either: {got}");
    let calls = WebhookCalls::of(&cp.metrics());
    assert_eq!(calls.since(&mid), WebhookCalls::default(), "no webhook called after the uninstall");
    report(&format!("uninstall: {:?} between the uninstall and the first write that passed", calls.since(&before)));
}

// --- phase 3: a Secret of the user's -------------------------------------------------------------

/// docs/operations.md's `certificates.mode=secret`: a certificate from `ha-guard certs` in a Secret of the
/// user's, its CA given to the chart; the replicas read the mounted files (the projected volume
/// the chart adds in this mode), and a certificate re-issued from the same CA reaches them as the
/// kubelet updates the Secret's files. Returns the replicas (still running).
fn secret_mode(cp: &ControlPlane, helm: &Helm, renderer: &str, balancer: &Balancer) -> Vec<Pod> {
    let certs = cp.root().join("certs");
    let certs_dir = certs.to_str().expect("a UTF-8 path");
    let issue = || {
        let out = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
            .args(["certs", "--out", certs_dir, "--dns", "ha-guard.ha-guard.svc"])
            .output()
            .expect("ha-guard certs runs");
        assert!(out.status.success(), "ha-guard certs: {}", String::from_utf8_lossy(&out.stderr));
    };
    issue();
    let (crt, key) = (format!("--cert={certs_dir}/tls.crt"), format!("--key={certs_dir}/tls.key"));
    cp.kubectl(&["-n", NS, "create", "secret", "tls", "my-tls", &crt, &key]).success();
    let ca = format!("certificates.secret.caBundle={certs_dir}/ca.crt");
    helm.run(&[
        "install",
        RELEASE,
        CHART,
        "--namespace",
        NS,
        "--set",
        "certificates.mode=secret",
        "--set",
        "certificates.secret.name=my-tls",
        "--set-file",
        &ca,
        "--post-renderer",
        renderer,
    ])
    .success()
    .shows(&["Certificates: secret."]);
    let ca_pem = std::fs::read(certs.join("ca.crt")).expect("ca.crt");
    assert!(bundles(cp).values().all(|b| *b == ca_pem), "the chart puts the given CA into both webhooks");
    // Read-only RBAC in this mode: no Secret, no webhook configuration to write.
    for args in [
        ["update", "secret/my-tls", "-n", NS, "--as", SA],
        ["patch", "validatingwebhookconfiguration/ha-guard", "-n", NS, "--as", SA],
    ] {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(&args);
        assert_eq!(cp.kubectl(&all).stdout.trim(), "no", "{args:?}");
    }

    let token = cp.kubectl(&["create", "token", NAME, "-n", NS, "--duration=2h"]).success().stdout;
    let kubeconfig = cp.token_kubeconfig(token.trim(), &cp.root().join("sa-3.kubeconfig"));
    let pods = start_replicas(cp, "secret", 2, &kubeconfig, balancer);
    for p in &pods {
        assert!(
            p.args.iter().any(|a| a.starts_with("--tls-cert=") && a.ends_with("/etc/ha-guard/tls/tls.crt")),
            "{}: the mounted certificate: {:?}",
            p.name,
            p.args
        );
    }
    poll("the validating webhook denies", WAIT, Duration::from_millis(200), || validating_live(cp, "apps-2"))
        .unwrap_or_else(|e| panic!("{e}"));
    poll("the mutating webhook mutates", WAIT, Duration::from_millis(200), || mutating_live(cp, "apps-2"))
        .unwrap_or_else(|e| panic!("{e}"));

    // Renewal is the user's: `ha-guard certs` again re-issues from the CA it kept, the Secret is
    // updated, the kubelet updates the files, ha-guard re-reads them.
    let before: Vec<f64> =
        pods.iter().map(|p| p.metrics().get("ha_guard_tls_cert_not_after_seconds", &[]).unwrap_or(0.0)).collect();
    std::thread::sleep(Duration::from_millis(1100)); // a later notAfter, to the second
    issue();
    let secret =
        cp.kubectl(&["-n", NS, "create", "secret", "tls", "my-tls", &crt, &key, "--dry-run=client", "-o", "json"]);
    cp.kubectl_in(&["-n", NS, "apply", "-f", "-"], &secret.success().stdout).success();
    for (p, before) in pods.iter().zip(before) {
        p.sync_volumes(cp);
        poll(&format!("{} serves the re-issued certificate", p.name), WAIT, Duration::from_millis(100), || {
            let now = p.metrics().get("ha_guard_tls_cert_not_after_seconds", &[]).unwrap_or(0.0);
            if now > before { Ok(()) } else { Err(format!("notAfter {now}")) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!p.events("reloaded the TLS certificate").is_empty(), "{}", p.name);
    }
    // New connections, new handshakes: the unchanged caBundle trusts the re-issued certificate.
    balancer.cut();
    std::thread::sleep(Duration::from_millis(300));
    let calls = WebhookCalls::of(&cp.metrics());
    cp.kubectl_in(&["apply", "-f", "-"], &canary_deny("apps-2")).denied(&["prestop-exceeds-grace"]);
    cp.apply(pdb("apps-2", "renewed", "renewed", json!({"maxUnavailable": 1}))).success();
    let got = cp.kubectl(&["get", "pdb", "renewed", "-n", "apps-2", "-o", "json"]).success().json();
    assert_eq!(got["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    let calls = WebhookCalls::of(&cp.metrics()).since(&calls);
    assert_no_failed_call(&calls);
    assert_eq!(calls.denied, 1.0, "{calls:?}");
    assert_quiet(&pods);

    helm.run(&["uninstall", RELEASE, "--namespace", NS]).success();
    no_webhook_configuration_left(cp);
    pods
}

// --- helm test, its Pod run by a stand-in scheduler and kubelet ------------------------------------

/// The node of the helm test's Pod: labelled and tainted so that only a Pod placed by
/// tests.nodeSelector and tests.tolerations lands there (no kubelet runs on it: the test plays it).
const PROBE_NODE: &str = "probe-runner";
const PROBE_LABEL: &str = "ha-guard.io/probe-runner";
/// The chart's test Pod (`<fullname>-test`) and its ServiceAccount.
const TEST_POD: &str = "ha-guard-test";

/// The values `helm install` is given: the test's Pod placed on [`PROBE_NODE`].
fn probe_values(dir: &Path) -> PathBuf {
    let path = dir.join("probe-values.yaml");
    let values = format!(
        "tests:\n  nodeSelector:\n    {PROBE_LABEL}: \"true\"\n  tolerations:\n    - key: {PROBE_LABEL}\n      \
         operator: Exists\n      effect: NoSchedule\n"
    );
    std::fs::write(&path, values).expect("probe-values.yaml");
    path
}

/// The node that only the test's Pod tolerates; the not-ready taint cleared as its kubelet would.
fn probe_node(cp: &ControlPlane) {
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": PROBE_NODE, "labels": {"kubernetes.io/hostname": PROBE_NODE, PROBE_LABEL: "true"}},
        "spec": {"taints": [{"key": PROBE_LABEL, "value": "true", "effect": "NoSchedule"}]}});
    cp.apply(&node).success();
    let taints = cp.kubectl(&["get", "node", PROBE_NODE, "-o", "jsonpath={.spec.taints}"]).success().stdout;
    if taints.contains("node.kubernetes.io/not-ready") {
        cp.kubectl(&["taint", "node", PROBE_NODE, "node.kubernetes.io/not-ready:NoSchedule-"]).success();
    }
}

/// Whether `pod` may run on `node` as kube-scheduler's NodeAffinity (nodeSelector) and
/// TaintToleration plugins decide, for the fields they read here (NoSchedule/NoExecute taints).
fn feasible(pod: &Value, node: &Value) -> bool {
    let labels = &node["metadata"]["labels"];
    let selected = pod["spec"]["nodeSelector"].as_object().into_iter().flatten().all(|(k, v)| labels[k.as_str()] == *v);
    let tolerations = pod["spec"]["tolerations"].as_array().cloned().unwrap_or_default();
    let tolerated = node["spec"]["taints"].as_array().into_iter().flatten().all(|taint| {
        taint["effect"] == "PreferNoSchedule"
            || tolerations.iter().any(|t| {
                let key = t["key"].is_null() || t["key"] == taint["key"];
                let value = t["operator"] == "Exists"
                    || t["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or("");
                let effect = t["effect"].is_null() || t["effect"] == taint["effect"];
                key && value && effect
            })
    });
    selected && tolerated
}

/// A container's log as the kubelet keeps a termination message from it
/// (FallbackToLogsOnError: its last 80 lines, at most the last 2048 bytes; pkg/kubelet/kuberuntime
/// readLastStringFromContainerLogs, MaxContainerTerminationMessageLogLines/Length).
fn termination_message_from_logs(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(80)..].join("\n") + if log.ends_with('\n') { "\n" } else { "" };
    let bytes = tail.as_bytes();
    String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(2048)..]).into_owned()
}

/// What the stand-in kubelet saw of one run of the test's Pod.
struct TestRun {
    uid: String,
    exit: i32,
    log: String,
}

/// kube-scheduler and the kubelet for the chart's test Pod, once: waits for a new Pod (not `seen`),
/// binds it to the one feasible node, runs its container's `args` with the local `ha-guard`
/// binary (the image's ENTRYPOINT) under the Pod's ServiceAccount, and writes the Pod's status as
/// the kubelet does (Running, then Succeeded/Failed with the exit code and termination message).
fn run_test_pod(cp: &ControlPlane, seen: &[String]) -> TestRun {
    let pod = poll("helm creates the test's Pod", WAIT, Duration::from_millis(100), || {
        let out = cp.kubectl(&["get", "pod", TEST_POD, "-n", NS, "-o", "json", "--ignore-not-found"]);
        let pod = if out.ok() && !out.stdout.trim().is_empty() { out.json() } else { Value::Null };
        match pod["metadata"]["uid"].as_str() {
            Some(uid) if !seen.iter().any(|s| s == uid) => Ok(pod),
            _ => Err(format!("no new Pod {NS}/{TEST_POD}")),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let spec = &pod["spec"];
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test", "{pod}");
    assert!(spec["nodeName"].is_null(), "not bound yet: {spec}");

    // The scheduler: the one node the Pod's nodeSelector and tolerations allow.
    let nodes = cp.kubectl(&["get", "nodes", "-o", "json"]).success().json();
    let feasible: Vec<&str> = nodes["items"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| feasible(&pod, n))
        .map(|n| n["metadata"]["name"].as_str().expect("node name"))
        .collect();
    assert_eq!(feasible, [PROBE_NODE], "tests.nodeSelector/tests.tolerations place the Pod: {spec}");
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": TEST_POD, "namespace": NS},
        "target": {"apiVersion": "v1", "kind": "Node", "name": PROBE_NODE}});
    cp.kubectl_in(
        &["create", "--raw", &format!("/api/v1/namespaces/{NS}/pods/{TEST_POD}/binding"), "-f", "-"],
        &binding.to_string(),
    )
    .success();

    // The kubelet: the container as the Pod says, nothing else.
    let containers = spec["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one container: {spec}");
    let c = &containers[0];
    assert!(c.get("command").is_none(), "the image's ENTRYPOINT (/ha-guard) runs: no command");
    assert!(c.get("env").is_none() && c.get("volumeMounts").is_none(), "no env, no mount but the token's: {c}");
    assert_eq!(spec["automountServiceAccountToken"], true);
    let sa = spec["serviceAccountName"].as_str().expect("serviceAccountName");
    // The projected token volume: a TokenRequest bound to the Pod, the cluster's CA, the namespace.
    let token = cp
        .kubectl(&[
            "create",
            "token",
            sa,
            "-n",
            NS,
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            TEST_POD,
            "--bound-object-uid",
            &uid,
            "--duration=1h",
        ])
        .success()
        .stdout;
    let dir = cp.root().join(format!("test-pod-{uid}"));
    let sa_dir = dir.join("serviceaccount");
    let cwd = dir.join("cwd");
    for d in [&sa_dir, &cwd] {
        std::fs::create_dir_all(d).expect("the Pod's directories");
    }
    let admin = std::fs::read_to_string(cp.kubeconfig()).expect("kubeconfig");
    let ca = admin.lines().find_map(|l| l.trim().strip_prefix("certificate-authority-data: ")).expect("the CA");
    std::fs::write(sa_dir.join("token"), token.trim()).expect("token");
    std::fs::write(sa_dir.join("ca.crt"), b64(ca)).expect("ca.crt");
    std::fs::write(sa_dir.join("namespace"), NS).expect("namespace");
    use std::os::unix::fs::PermissionsExt;
    for d in [&dir, &sa_dir, &cwd] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // The apiserver's address as the kubelet gives it to every container (the `kubernetes` Service).
    let server = cp.server();
    let (host, port) = server.trim_start_matches("https://").rsplit_once(':').expect("host:port");
    let user = &spec["securityContext"];
    let (uid_n, gid_n) =
        (user["runAsUser"].as_u64().expect("runAsUser"), user["runAsGroup"].as_u64().expect("runAsGroup"));
    assert_eq!(user["runAsNonRoot"], true);
    let running = json!({"status": {"phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
        "startTime": humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "", "ready": true,
            "restartCount": 0, "started": true,
            "state": {"running": {"startedAt": humantime::format_rfc3339_seconds(SystemTime::now()).to_string()}}}]}});
    cp.kubectl(&[
        "-n",
        NS,
        "patch",
        "pod",
        TEST_POD,
        "--subresource=status",
        "--type=merge",
        "-p",
        &running.to_string(),
    ])
    .success();
    let started = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    // The container's filesystem view of the token: the fixed in-cluster path, for this process
    // only (a mount namespace of its own over an empty /run), as the user the Pod runs as, without
    // capabilities or privilege escalation (securityContext).
    let log_path = dir.join("container.log");
    let log = std::fs::File::create(&log_path).expect("the container's log");
    let script = "mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount \
                  && mount --bind \"$0\" /run/secrets/kubernetes.io/serviceaccount && cd \"$1\" && shift && exec \"$@\"";
    let status = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .arg(&sa_dir)
        .arg(&cwd)
        .args([
            "setpriv",
            "--reuid",
            &uid_n.to_string(),
            "--regid",
            &gid_n.to_string(),
            "--clear-groups",
            "--no-new-privs",
        ])
        .args(["--inh-caps=-all", "--bounding-set=-all", "env", "-i"])
        .arg(format!("KUBERNETES_SERVICE_HOST={host}"))
        .arg(format!("KUBERNETES_SERVICE_PORT={port}"))
        .arg(format!("HOSTNAME={TEST_POD}"))
        .arg("HOME=/nonexistent")
        .arg(env!("CARGO_BIN_EXE_ha-guard"))
        .args(strings(&c["args"]))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .status()
        .expect("unshare");
    let exit = status.code().unwrap_or(-1);
    // readOnlyRootFilesystem is not enforced here: the command must not have written anything.
    let written: Vec<_> = std::fs::read_dir(&cwd).expect("cwd").collect();
    assert!(written.is_empty(), "the probe writes no file (readOnlyRootFilesystem): {written:?}");
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let message = if exit != 0 && c["terminationMessagePolicy"] == "FallbackToLogsOnError" {
        termination_message_from_logs(&log)
    } else {
        String::new() // Nothing writes /dev/termination-log.
    };
    let finished = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let (phase, reason) = if exit == 0 { ("Succeeded", "Completed") } else { ("Failed", "Error") };
    let mut terminated = json!({"exitCode": exit, "reason": reason, "startedAt": started, "finishedAt": finished});
    if !message.is_empty() {
        terminated["message"] = json!(message);
    }
    let done = json!({"status": {"phase": phase,
        "containerStatuses": [{"name": c["name"], "image": c["image"], "imageID": "", "ready": false,
            "restartCount": 0, "started": false, "state": {"terminated": terminated}}]}});
    cp.kubectl(&["-n", NS, "patch", "pod", TEST_POD, "--subresource=status", "--type=merge", "-p", &done.to_string()])
        .success();
    report(&format!("helm test's Pod {uid}: exit {exit}; its log:\n{log}"));
    TestRun { uid, exit, log }
}

/// `helm test` of the release in a thread, its Pod run meanwhile: (helm's outcome, the Pod's run).
fn helm_test(cp: &ControlPlane, helm: &Helm, seen: &mut Vec<String>) -> (Kubectl, TestRun) {
    std::thread::scope(|s| {
        let helm = s.spawn(|| helm.run(&["test", RELEASE, "--namespace", NS, "--timeout", "2m"]));
        let run = run_test_pod(cp, seen);
        seen.push(run.uid.clone());
        (helm.join().expect("helm test"), run)
    })
}

/// Issue 51, Show 2: `helm test` passes while the replicas answer; with every replica stopped
/// (failurePolicy Ignore: the apiserver fails open) it fails, and the Pod's status says that
/// ha-guard did not answer; with replicas back it passes again (the failed Pod replaced).
fn helm_test_up_and_down(cp: &ControlPlane, helm: &Helm, pods: &mut Vec<Pod>, kubeconfig: &Path, balancer: &Balancer) {
    let mut seen = Vec::new();
    let (out, run) = helm_test(cp, helm, &mut seen);
    let out = out.success().shows(&["TEST SUITE:     ha-guard-test", "Phase:          Succeeded"]).hides(&["Failed"]);
    assert_eq!(run.exit, 0, "{}", out.output());
    assert!(
        run.log.contains("ha-guard answered the dry run of Deployment default/ha-guard-probe")
            && run.log.contains("[replicas-colocated]")
            && run.log.contains("[termination-grace-zero]"),
        "the probe names ha-guard's answer: {}",
        run.log
    );
    // Passed: helm deletes its hooks (hook-succeeded); the dry run stored nothing.
    for (kind, ns) in [("pod", NS), ("serviceaccount", NS), ("role", "default"), ("rolebinding", "default")] {
        poll(&format!("{kind} {TEST_POD} deleted"), WAIT, Duration::from_millis(200), || {
            let out = cp.kubectl(&["get", kind, TEST_POD, "-n", ns, "--ignore-not-found", "-o", "name"]).success();
            if out.stdout.trim().is_empty() { Ok(()) } else { Err(out.stdout) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(!cp.kubectl(&["get", "deployment", "ha-guard-probe", "-n", "default"]).ok(), "a dry run stores nothing");

    // Every replica stopped: with failurePolicy Ignore the apiserver admits without ha-guard.
    stop_replicas(pods, balancer);
    let before = WebhookCalls::of(&cp.metrics());
    let (out, run) = helm_test(cp, helm, &mut seen);
    let out = out.failure().shows(&["Phase:          Failed"]);
    assert!(out.output().contains(&format!("pod {TEST_POD} failed")), "helm names the failed Pod: {}", out.output());
    assert_eq!(run.exit, 1, "{}", run.log);
    let calls = WebhookCalls::of(&cp.metrics()).since(&before);
    assert!(calls.fail_open >= 1.0, "the apiserver failed open on ha-guard: {calls:?}");
    let pod = cp.kubectl(&["get", "pod", TEST_POD, "-n", NS, "-o", "json"]).success().json();
    assert_eq!(pod["status"]["phase"], "Failed", "a failed test's Pod is kept to read");
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 1);
    let message = terminated["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "ha-guard did not answer: the apiserver admitted the dry run of Deployment default/ha-guard-probe"
        ) && message.contains("no ha-guard replica answers"),
        "the Pod's termination message says why: {pod}"
    );
    // README: `kubectl -n ha-guard describe pod ha-guard-test` shows why.
    cp.kubectl(&["-n", NS, "describe", "pod", TEST_POD]).success().shows(&[
        "Status:           Failed",
        "State:      Terminated",
        "Reason:   Error",
        "Exit Code:    1",
        "Message:  ha-guard did not answer: the apiserver admitted the dry run",
    ]);
    report(&format!("helm test with no replica: {}\n  the Pod's message: {message}", out.output().trim()));

    // Replicas back: the test passes again; helm deletes the failed Pod first (before-hook-creation).
    *pods = start_replicas(cp, "release-back", 2, kubeconfig, balancer);
    poll("the validating webhook denies", WAIT, Duration::from_millis(200), || validating_live(cp, "apps-2"))
        .unwrap_or_else(|e| panic!("{e}"));
    let (out, run) = helm_test(cp, helm, &mut seen);
    out.success().shows(&["Phase:          Succeeded"]).hides(&["Failed"]);
    assert_eq!(run.exit, 0, "{}", run.log);
}

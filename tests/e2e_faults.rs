//! End-to-end faults: the real `ha-guard serve` behind a real kube-apiserver (see
//! `tests/e2e/README.md`) while things go wrong around it.
//!
//! - (c) A 60-second load of Deployment and PDB writes through the apiserver (kube-rs, a few
//!   tasks, bounded rate, loopback) with, in the middle, a rotation of ha-guard's serving
//!   certificate (a new one from the same CA, swapped in as the kubelet updates a mounted
//!   Secret) and a reload of its config file (`recreate-multi-replica` turned to deny). No
//!   request may fail: every write expected to be admitted is, every write expected to be denied
//!   is denied with its rule ID, and no webhook call fails open (the shipped failurePolicy is
//!   Ignore, so a failed call would pass a write unchecked: the apiserver's own
//!   `apiserver_admission_webhook_fail_open_count` must not move). The apiserver reaches ha-guard
//!   through a relay: right after the rotation the relay cuts its connections (between requests),
//!   so the apiserver connects anew and handshakes with the rotated certificate, not only the
//!   test's own probes.
//! - (b) ha-guard killed with SIGKILL and started again: once `/readyz` is 200 its view holds what
//!   was written while it was down, without waiting for anything else.
//! - (a) kube-apiserver stopped and started again on the same port and etcd: meanwhile ha-guard
//!   stays ready and answers from its last known state (docs/architecture.md "Consistency of the live view");
//!   afterwards every watch resumes.
//!
//! They run in the order c, b, a on one control plane and one ha-guard: so (b) and (a) also show
//! that a restarted ha-guard and a restarted apiserver (new connections, new handshakes) work
//! with the rotated certificate and the reloaded config. Last, the apiserver's counters must show
//! no webhook call that failed or failed open but while ha-guard was down in (b), on purpose.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

/// Load: tasks, each in its own namespace, one request per `PACE` each.
const WORKERS: usize = 4;
const PACE: Duration = Duration::from_millis(250);
const LOAD: Duration = Duration::from_secs(60);
/// When, into the load, the certificate is rotated and the config reloaded.
const ROTATE_AT: Duration = Duration::from_secs(20);
const RECONFIGURE_AT: Duration = Duration::from_secs(40);

/// The serial numbers of the first and the rotated serving certificate.
const SERIAL_1: [u8; 2] = [0x10, 0x01];
const SERIAL_2: [u8; 2] = [0x10, 0x02];

const CONFIG_WARN: &str = "# e2e faults: before the reload\nrules:\n  recreate-multi-replica: warn\n";
const CONFIG_DENY: &str = "# e2e faults: after the reload\nrules:\n  recreate-multi-replica: deny\n";

/// Printed straight to stderr, past the test harness's capture, so that CI logs show the
/// figures of a passing run too.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "[e2e faults] {line}");
}

// --- PKI: a CA of our own, so that a new serving certificate can come from the same CA --------

struct Ca {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    pem: String,
}

/// A serving certificate and key, in PEM, and its notAfter (seconds since the epoch).
struct Serving {
    cert_pem: String,
    key_pem: String,
    not_after: i64,
}

impl Ca {
    fn new() -> Ca {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(DnType::CommonName, "ha-guard e2e faults CA");
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(30);
        let key = KeyPair::generate().expect("CA key");
        let pem = params.self_signed(&key).expect("CA certificate").pem();
        Ca { params, key, pem }
    }

    /// A serving certificate for 127.0.0.1 and localhost with `serial`, valid for `days`.
    fn issue(&self, serial: &[u8], days: i64) -> Serving {
        use rcgen::{
            CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
        };
        let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).expect("leaf params");
        leaf.subject_alt_names.push(SanType::IpAddress([127, 0, 0, 1].into()));
        leaf.distinguished_name.push(DnType::CommonName, "localhost");
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        leaf.serial_number = Some(SerialNumber::from_slice(serial));
        let now = time::OffsetDateTime::now_utc().replace_nanosecond(0).expect("whole seconds");
        leaf.not_before = now - time::Duration::hours(1);
        leaf.not_after = now + time::Duration::days(days);
        let key = KeyPair::generate().expect("leaf key");
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = leaf.signed_by(&key, &issuer).expect("leaf certificate");
        Serving { cert_pem: cert.pem(), key_pem: key.serialize_pem(), not_after: leaf.not_after.unix_timestamp() }
    }
}

/// Lays `s` out in `dir` as the kubelet mounts a TLS Secret: `tls.crt -> ..data/tls.crt`,
/// `..data -> ..<version>`; the first time also `ca.crt` and the two file symlinks. Later calls
/// swap `..data` with one rename, so the certificate and key change together.
fn install_secret(dir: &Path, version: &str, ca_pem: &str, s: &Serving) {
    let payload = dir.join(format!("..{version}"));
    std::fs::create_dir_all(&payload).expect("secret payload dir");
    std::fs::write(payload.join("tls.crt"), &s.cert_pem).expect("tls.crt");
    std::fs::write(payload.join("tls.key"), &s.key_pem).expect("tls.key");
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..{version}"), &tmp).expect("..data_tmp");
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    if !dir.join("ca.crt").exists() {
        std::fs::write(dir.join("ca.crt"), ca_pem).expect("ca.crt");
        std::os::unix::fs::symlink("..data/tls.crt", dir.join("tls.crt")).expect("tls.crt link");
        std::os::unix::fs::symlink("..data/tls.key", dir.join("tls.key")).expect("tls.key link");
    }
}

/// Writes `text` to `path` by rename, as a config management tool would.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write the new file");
    std::fs::rename(&tmp, path).expect("rename it into place");
}

/// The local ports of the established TCP connections to 127.0.0.1:`port` (the apiserver's
/// connections to ha-guard's webhook port), from /proc/net/tcp.
fn connections_to(port: u16) -> std::collections::BTreeSet<u16> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[2] == remote && f[3] == "01").then(|| f[1].rsplit_once(':')).flatten()
        })
        .filter_map(|(_, p)| u16::from_str_radix(p, 16).ok())
        .collect()
}

/// Calls [`served_serial`] made (they reach ha-guard's `/validate`, not through the apiserver).
static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The serial of the certificate ha-guard's webhook port serves to a new connection.
fn served_serial(hg: &HaGuard, ca_pem: &str) -> Result<Vec<u8>, String> {
    PROBES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let body = admission_review(&deployment("default", "probe", 1)).to_string();
    match webhook_call(hg.webhook_port, ca_pem, None, None, "/validate", body.as_bytes())? {
        Call::Answered { status: 200, server_cert, .. } => {
            cert_serial(&server_cert).ok_or_else(|| "no serial in the certificate".to_string())
        }
        other => Err(format!("{other:?}")),
    }
}

// --- the test ----------------------------------------------------------------------------------

#[test]
fn faults_around_a_real_apiserver() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    cp.nodes(&["node-a", "node-b", "node-c"]);

    // ha-guard serving a certificate from a CA of ours (the caBundle registered with the
    // apiserver), with a config file, both polled every 0.5 s.
    let ca = Ca::new();
    let dir = HaGuard::dir_of(cp.root(), "ha-guard");
    std::fs::create_dir_all(&dir).expect("ha-guard dir");
    let first = ca.issue(&SERIAL_1, 20);
    install_secret(&dir, "v1", &ca.pem, &first);
    let config = dir.join("config.yaml");
    std::fs::write(&config, CONFIG_WARN).expect("config");
    let spec = Spec {
        generate_certs: false,
        args: vec!["--config".into(), config.display().to_string(), "--reload-interval".into(), "0.5".into()],
        ..Spec::new(&cp, "ha-guard")
    };
    let mut fail_open = FailOpen::start(&cp);
    let mut hg = HaGuard::start_spec(&cp, &spec).unwrap_or_else(|e| panic!("ha-guard: {e}"));
    // The apiserver reaches ha-guard through a relay that can cut its connections: so that after
    // the rotation it connects anew, and handshakes with the rotated certificate.
    let mut relay = Relay::new(std::net::SocketAddr::from(([127, 0, 0, 1], hg.webhook_port)));
    relay.open().unwrap_or_else(|e| panic!("relay: {e}"));
    register_at(&cp, &hg, relay.port, &[Webhooks::Mutating, Webhooks::Validating])
        .unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(20)));

    let log = hg.log_path();
    let mut steps = Steps::new(move || format!("ha-guard log (last lines):\n{}", tail(&log, 12)));
    steps.run("c 60 s of writes with a certificate rotation and a config reload: none fails", || {
        load(&cp, &hg, &ca, &first, &config, &mut relay)
    });
    steps.run("b ha-guard killed (SIGKILL) and restarted: ready with what it missed", || {
        killed(&cp, &mut hg, &ca, &mut fail_open)
    });
    steps.run("a kube-apiserver restarted: ready on the last state meanwhile, watches resume", || {
        apiserver_restart(&cp, &hg, &mut fail_open)
    });
    steps.run("no webhook call failed or failed open but while ha-guard was down on purpose", || fail_open.finish(&cp));
    steps.finish();
}

// --- (c) load ----------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Allowed,
    Denied(&'static str),
}

/// `recreate-multi-replica` as configured; the config switch holds the write lock, so no
/// Recreate write is in flight while it changes (its outcome would depend on the instant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Warn,
    Deny,
}

#[derive(Default)]
struct Tally {
    sent: u64,
    failed: u64,
    allowed: u64,
    /// Denials as expected, by rule.
    denied: BTreeMap<&'static str, u64>,
    /// Recreate writes admitted (config warn) and denied (config deny).
    recreate_admitted: u64,
    recreate_denied: u64,
    /// Creates and updates of Deployments and PDBs: the writes the validating webhook is called for.
    intercepted: u64,
    /// Of those, the writes the mutating webhook's matchCondition `needs-a-mutation` leaves out:
    /// all but the creates of a PDB without `unhealthyPodEvictionPolicy` or of a workload with a
    /// spread that has no labelSelector (the patches here add neither).
    not_for_mutate: u64,
    slowest: Duration,
    failures: Vec<String>,
}

struct Load {
    client: kube::Client,
    tally: Mutex<Tally>,
    gate: tokio::sync::RwLock<Phase>,
    /// Held (read) by each request; taken (write) to cut the relay's connections between requests.
    cut: tokio::sync::RwLock<()>,
}

fn api(client: &kube::Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    let ar = match kind {
        "Deployment" => ApiResource::erase::<Deployment>(&()),
        "PodDisruptionBudget" => ApiResource::erase::<PodDisruptionBudget>(&()),
        other => panic!("no API for {other}"),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// What a load request does.
enum Op {
    Create(Value),
    MergePatch(&'static str, String, Value),
    Delete(&'static str, String),
}

impl Load {
    /// Sends `op` in `ns` and judges the outcome against `expect`.
    async fn send(&self, ns: &str, op: Op, expect: Expect) -> bool {
        let for_mutate = match &op {
            Op::Create(o) if o["kind"] == "PodDisruptionBudget" => {
                o["spec"].get("unhealthyPodEvictionPolicy").is_none()
            }
            Op::Create(o) => o["spec"]["template"]["spec"]["topologySpreadConstraints"]
                .as_array()
                .is_some_and(|spreads| spreads.iter().any(|c| c.get("labelSelector").is_none())),
            _ => false,
        };
        let (what, intercepted) = match &op {
            Op::Create(o) => (
                format!(
                    "create {} {ns}/{}",
                    o["kind"].as_str().unwrap_or("?"),
                    o["metadata"]["name"].as_str().unwrap_or("?")
                ),
                true,
            ),
            Op::MergePatch(kind, name, _) => (format!("patch {kind} {ns}/{name}"), true),
            Op::Delete(kind, name) => (format!("delete {kind} {ns}/{name}"), false),
        };
        let _between_cuts = self.cut.read().await;
        let started = Instant::now();
        let result: Result<(), kube::Error> = match op {
            Op::Create(o) => {
                let kind = o["kind"].as_str().expect("kind").to_string();
                let obj: DynamicObject = serde_json::from_value(o).expect("an object");
                api(&self.client, &kind, ns).create(&PostParams::default(), &obj).await.map(drop)
            }
            Op::MergePatch(kind, name, patch) => {
                api(&self.client, kind, ns).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
            }
            Op::Delete(kind, name) => {
                api(&self.client, kind, ns).delete(&name, &DeleteParams::default()).await.map(drop)
            }
        };
        let took = started.elapsed();
        let verdict = match (expect, &result) {
            (Expect::Allowed, Ok(())) => Ok(()),
            (Expect::Allowed, Err(e)) => Err(format!("expected success, got: {e}")),
            (Expect::Denied(rule), Err(kube::Error::Api(s)))
                if s.code == 403
                    && s.message.contains("admission webhook \"validate.ha-guard.io\" denied the request")
                    && s.message.contains(&format!("[{rule}] ")) =>
            {
                Ok(())
            }
            (Expect::Denied(rule), Ok(())) => Err(format!("expected a denial naming [{rule}], it was admitted")),
            (Expect::Denied(rule), Err(e)) => Err(format!("expected a denial naming [{rule}], got: {e}")),
        };
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.sent += 1;
        t.intercepted += u64::from(intercepted);
        t.not_for_mutate += u64::from(intercepted && !for_mutate);
        t.slowest = t.slowest.max(took);
        match verdict {
            Ok(()) => {
                match expect {
                    Expect::Allowed => t.allowed += 1,
                    Expect::Denied(rule) => *t.denied.entry(rule).or_default() += 1,
                }
                true
            }
            Err(e) => {
                t.failed += 1;
                if t.failures.len() < 20 {
                    t.failures.push(format!("{what} after {took:.1?}: {e}"));
                }
                false
            }
        }
    }
}

/// One task of the load: in its namespace, until `until`, one request per tick, a cycle of
///   create a 2-replica Deployment (spread out) and a PDB over it (maxUnavailable 1), update
///   both, and delete them: admitted (warnings at most);
///   a Deployment whose preStop outlasts its grace: denied, `prestop-exceeds-grace`;
///   a 1-replica Deployment covered by the namespace's `minAvailable: 1` PDB (created before the
///   load): denied, `pdb-blocks-eviction` (the view under load);
///   a 2-replica Recreate Deployment: admitted while the config says warn, denied naming
///   `recreate-multi-replica` once it says deny.
async fn worker(load: Arc<Load>, ns: String, until: Instant) {
    let mut tick = tokio::time::interval(PACE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0u64;
    while Instant::now() < until {
        let app = format!("app-{n}");
        tick.tick().await;
        let created = load.send(&ns, Op::Create(spread_out(deployment(&ns, &app, 2))), Expect::Allowed).await;
        tick.tick().await;
        let budgeted =
            load.send(&ns, Op::Create(pdb(&ns, &app, &app, json!({"maxUnavailable": 1}))), Expect::Allowed).await;
        tick.tick().await;
        if created {
            let image =
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}});
            load.send(&ns, Op::MergePatch("Deployment", app.clone(), image), Expect::Allowed).await;
            tick.tick().await;
        }
        let slow = slow_prestop(deployment(&ns, &format!("slow-{n}"), 1));
        load.send(&ns, Op::Create(slow), Expect::Denied("prestop-exceeds-grace")).await;
        tick.tick().await;
        load.send(&ns, Op::Create(blocked(&ns, n)), Expect::Denied("pdb-blocks-eviction")).await;
        tick.tick().await;
        let recreate_name = format!("recreate-{n}");
        let recreate =
            merge(spread_out(deployment(&ns, &recreate_name, 2)), json!({"spec": {"strategy": {"type": "Recreate"}}}));
        let recreated = {
            let phase = load.gate.read().await;
            let expect = match *phase {
                Phase::Warn => Expect::Allowed,
                Phase::Deny => Expect::Denied("recreate-multi-replica"),
            };
            let ok = load.send(&ns, Op::Create(recreate), expect).await;
            let mut t = load.tally.lock().unwrap_or_else(|p| p.into_inner());
            match (ok, expect) {
                (true, Expect::Allowed) => t.recreate_admitted += 1,
                (true, Expect::Denied(_)) => t.recreate_denied += 1,
                _ => {}
            }
            ok && expect == Expect::Allowed
        };
        tick.tick().await;
        if budgeted {
            load.send(
                &ns,
                Op::MergePatch("PodDisruptionBudget", app.clone(), json!({"spec": {"maxUnavailable": 2}})),
                Expect::Allowed,
            )
            .await;
            tick.tick().await;
            load.send(&ns, Op::Delete("PodDisruptionBudget", app.clone()), Expect::Allowed).await;
            tick.tick().await;
        }
        if created {
            load.send(&ns, Op::Delete("Deployment", app.clone()), Expect::Allowed).await;
            tick.tick().await;
        }
        if recreated {
            load.send(&ns, Op::Delete("Deployment", recreate_name), Expect::Allowed).await;
        }
        n += 1;
    }
}

/// A 1-replica Deployment whose pods are `app: blocked`: the namespace's `blocker` PDB
/// (`minAvailable: 1`) then leaves no disruption.
fn blocked(ns: &str, n: u64) -> Value {
    merge(
        deployment(ns, &format!("blocked-{n}"), 1),
        json!({"spec": {"selector": {"matchLabels": {"app": "blocked"}}, "template": {"metadata": {"labels": {"app": "blocked"}}}}}),
    )
}

/// The apiserver's counts of its calls to ha-guard's two webhooks.
#[derive(Debug, Default, PartialEq)]
struct WebhookCalls {
    /// All calls.
    calls: f64,
    /// Answered with a denial.
    rejected: f64,
    /// Neither allowed (200) nor a denial: a call that failed.
    failed: f64,
    /// Failed and let through (failurePolicy Ignore).
    fail_open: f64,
}

fn webhook_calls(m: &Metrics) -> WebhookCalls {
    let ours = |l: &BTreeMap<String, String>| l.get("name").is_some_and(|n| n.ends_with(".ha-guard.io"));
    let is = |l: &BTreeMap<String, String>, k: &str, v: &str| l.get(k).map(String::as_str) == Some(v);
    let requests = m.all("apiserver_admission_webhook_request_total", &[]);
    let sum = |f: &dyn Fn(&BTreeMap<String, String>) -> bool| {
        requests.iter().filter(|(l, _)| ours(l) && f(l)).map(|(_, v)| v).sum()
    };
    WebhookCalls {
        calls: sum(&|_| true),
        rejected: sum(&|l| is(l, "rejected", "true")),
        failed: sum(&|l| !is(l, "rejected", "true") && !is(l, "code", "200")),
        fail_open: m
            .all("apiserver_admission_webhook_fail_open_count", &[])
            .iter()
            .filter(|(l, _)| ours(l))
            .map(|(_, v)| v)
            .sum(),
    }
}

fn load(cp: &ControlPlane, hg: &HaGuard, ca: &Ca, first: &Serving, config: &Path, relay: &mut Relay) {
    let namespaces: Vec<String> = (0..WORKERS).map(|w| format!("load-{w}")).collect();
    for ns in &namespaces {
        hg.created("Namespace", 1, || cp.namespace(ns, &[]));
        hg.created("PodDisruptionBudget", 1, || {
            cp.apply(pdb(ns, "blocker", "blocked", json!({"minAvailable": 1}))).success()
        });
    }
    // Before: the first certificate is served, and the config lets Recreate through.
    assert_eq!(
        served_serial(hg, &ca.pem).unwrap_or_else(|e| panic!("{e}")),
        SERIAL_1.to_vec(),
        "the first certificate"
    );
    let m = hg.metrics();
    assert_eq!(m.get("ha_guard_tls_cert_not_after_seconds", &[]), Some(first.not_after as f64), "{m:?}");
    let recreate = |ns: &str, name: &str| {
        merge(spread_out(deployment(ns, name, 2)), json!({"spec": {"strategy": {"type": "Recreate"}}}))
    };
    cp.apply(recreate("load-0", "before")).success().warns(&["recreate-multi-replica"]);

    let hg_before = hg.metrics();
    let api_before = cp.metrics();
    let probes_before = PROBES.load(std::sync::atomic::Ordering::SeqCst);

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let load = Arc::new(Load {
        client: cp.kube_client(&rt),
        tally: Mutex::default(),
        gate: tokio::sync::RwLock::new(Phase::Warn),
        cut: tokio::sync::RwLock::new(()),
    });
    let started = Instant::now();
    let until = started + LOAD;
    let tasks: Vec<_> = namespaces.iter().map(|ns| rt.spawn(worker(load.clone(), ns.clone(), until))).collect();
    report(&format!("load: {WORKERS} tasks, one request per {PACE:?} each, for {LOAD:?}"));

    // Rotation: a new certificate and key from the same CA, swapped in at once.
    std::thread::sleep(ROTATE_AT.saturating_sub(started.elapsed()));
    let second = ca.issue(&SERIAL_2, 40);
    let old_connections = connections_to(hg.webhook_port);
    let rotated = Instant::now();
    install_secret(hg.dir(), "v2", &ca.pem, &second);
    let serial = poll("the rotated certificate is served", Duration::from_secs(10), Duration::from_millis(100), || {
        served_serial(hg, &ca.pem).and_then(|s| if s == SERIAL_2 { Ok(s) } else { Err(format!("serial {s:02x?}")) })
    });
    // The apiserver keeps its connections open while they are busy: cut them (no request in
    // flight), so that it connects anew and handshakes with the rotated certificate, which is
    // all that new connections get (as the probe above shows).
    let calls_at_cut = {
        let _paused = load.cut.blocking_write();
        relay.close();
        relay.open().unwrap_or_else(|e| panic!("relay: {e}"));
        webhook_calls(&cp.metrics()).calls
    };
    report(&format!(
        "certificate rotated at {:.1?}: {}",
        rotated - started,
        match &serial {
            Ok(_) => format!("new connections get serial {SERIAL_2:02x?} after {:.1?}", rotated.elapsed()),
            Err(e) => e.clone(),
        }
    ));

    // Config reload: recreate-multi-replica turned to deny. No Recreate write is in flight
    // while the file changes and until ha-guard has reloaded it.
    std::thread::sleep(RECONFIGURE_AT.saturating_sub(started.elapsed()));
    let reloads =
        |m: &Metrics, result: &str| m.get("ha_guard_config_reloads_total", &[("result", result)]).unwrap_or(0.0);
    let reloaded = {
        let mut phase = load.gate.blocking_write();
        let before = reloads(&hg.metrics(), "success");
        let switched = Instant::now();
        write_atomically(config, CONFIG_DENY);
        let reloaded = poll("ha-guard reloads the config", Duration::from_secs(10), Duration::from_millis(50), || {
            let now = reloads(&hg.metrics(), "success");
            if now > before { Ok(switched.elapsed()) } else { Err(format!("{now}")) }
        });
        *phase = Phase::Deny;
        reloaded
    };
    report(&format!(
        "config reloaded at {:.1?}: {}",
        started.elapsed(),
        match &reloaded {
            Ok(took) => format!("recreate-multi-replica: deny, in effect after {took:.1?}"),
            Err(e) => e.clone(),
        }
    ));

    rt.block_on(async {
        for t in tasks {
            t.await.expect("a load task panicked");
        }
    });
    let elapsed = started.elapsed();
    let connections = connections_to(hg.webhook_port);
    drop(rt);

    let hg_after = hg.metrics();
    let api_after = cp.metrics();
    let t = load.tally.lock().unwrap_or_else(|p| p.into_inner());
    let denied: Vec<String> = t.denied.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let answered = |m: &Metrics, webhook: &str| {
        m.sum("ha_guard_admission_requests_total", &[("webhook", webhook), ("dry_run", "false")])
    };
    let validated = answered(&hg_after, "validate") - answered(&hg_before, "validate");
    let mutated = answered(&hg_after, "mutate") - answered(&hg_before, "mutate");
    let (api_before, api_after) = (webhook_calls(&api_before), webhook_calls(&api_after));
    let api = WebhookCalls {
        calls: api_after.calls - api_before.calls,
        rejected: api_after.rejected - api_before.rejected,
        failed: api_after.failed - api_before.failed,
        fail_open: api_after.fail_open - api_before.fail_open,
    };
    let denials: u64 = t.denied.values().sum();
    let handshakes_failed = hg_after.get("ha_guard_tls_handshake_failures_total", &[]).unwrap_or(0.0)
        - hg_before.get("ha_guard_tls_handshake_failures_total", &[]).unwrap_or(0.0);
    report(&format!(
        "load: {} requests sent in {elapsed:.1?} ({:.1}/s), {} failed; {} admitted as expected, denied as expected: {}; \
         Recreate admitted {} (warn) / denied {} (deny); slowest {:.1?}",
        t.sent,
        t.sent as f64 / elapsed.as_secs_f64(),
        t.failed,
        t.allowed,
        denied.join(", "),
        t.recreate_admitted,
        t.recreate_denied,
        t.slowest
    ));
    let probes = PROBES.load(std::sync::atomic::Ordering::SeqCst) - probes_before;
    report(&format!(
        "load: {} intercepted writes; the apiserver called ha-guard {} times: {} denials, {} failed, {} failed open; \
         ha-guard answered {} validate calls (and {probes} direct probes of its certificate) and {mutated} mutate calls \
         (the {} updates of PDBs that have unhealthyPodEvictionPolicy are not sent to /mutate), \
         {handshakes_failed} TLS handshakes failed",
        t.intercepted,
        api.calls,
        api.rejected,
        api.failed,
        api.fail_open,
        validated - probes as f64,
        t.not_for_mutate
    ));
    let calls_after_cut = api_after.calls - calls_at_cut;
    report(&format!(
        "load: relayed connections to ha-guard at the rotation {old_connections:?}, at the end {connections:?} \
         ({} opened after the rotation, when the relay cut the old ones); {calls_after_cut} calls after the cut",
        connections.difference(&old_connections).count()
    ));

    assert!(
        t.failures.is_empty() && t.failed == 0,
        "{} of {} requests failed, first ones:\n{}",
        t.failed,
        t.sent,
        t.failures.join("\n")
    );
    assert!(t.sent > 0 && t.denied.len() == 3, "every kind of request was sent: {denied:?}");
    serial.unwrap_or_else(|e| panic!("{e}"));
    reloaded.unwrap_or_else(|e| panic!("{e}"));
    assert!(t.recreate_admitted > 0 && t.recreate_denied > 0, "Recreate writes on both sides of the reload");
    assert_eq!(api.fail_open, 0.0, "no webhook call failed open (a write passed unchecked): {api:?}");
    assert_eq!(api.failed, 0.0, "every webhook call was answered: {api:?}");
    assert_eq!(api.rejected, denials as f64, "the apiserver saw exactly the expected denials: {api:?}");
    let validated = validated - probes as f64;
    assert!(
        validated >= t.intercepted as f64,
        "ha-guard answered every intercepted write: {validated} < {}",
        t.intercepted
    );
    let for_mutate = t.intercepted - t.not_for_mutate;
    assert!(
        mutated >= for_mutate as f64,
        "ha-guard was asked to mutate every intercepted write but the {} its matchConditions leave out: \
         {mutated} < {for_mutate}",
        t.not_for_mutate
    );
    assert_eq!(handshakes_failed, 0.0, "no TLS handshake failed");
    // The rotation reached the apiserver: every connection it had before was cut, the ones it
    // has now were opened after the rotation (so handshook with certificate 2, the only one
    // served to new connections), and its calls through them were answered (none failed, above).
    assert!(!old_connections.is_empty(), "the apiserver was connected before the rotation");
    assert!(
        !connections.is_empty() && connections.is_disjoint(&old_connections),
        "after the cut the apiserver connected anew: before {old_connections:?}, at the end {connections:?}"
    );
    assert!(calls_after_cut > 20.0, "the apiserver called ha-guard on its new connections: {calls_after_cut}");
    assert_eq!(reloads(&hg_after, "failure"), 0.0, "the config reload did not fail");
    assert_eq!(
        hg_after.get("ha_guard_tls_cert_not_after_seconds", &[]),
        Some(second.not_after as f64),
        "the gauge follows the rotation"
    );
    assert_eq!(
        served_serial(hg, &ca.pem).unwrap_or_else(|e| panic!("{e}")),
        SERIAL_2.to_vec(),
        "still the rotated certificate"
    );
    // The new config, as a user sees it.
    cp.apply(recreate("load-0", "after")).denied(&["recreate-multi-replica"]).shows(&["uses strategy Recreate"]);
    cp.kubectl(&["get", "deployment", "after", "-n", "load-0"]).failure().shows(&["NotFound"]);
}

// --- (b) ha-guard killed -----------------------------------------------------------------------

fn killed(cp: &ControlPlane, hg: &mut HaGuard, ca: &Ca, fail_open: &mut FailOpen) {
    let ns = "crash";
    hg.created("Namespace", 1, || cp.namespace(ns, &[]));
    // In the view before the crash, deleted while ha-guard is down.
    hg.created("PodDisruptionBudget", 1, || cp.apply(pdb(ns, "gone", "gone", json!({"minAvailable": 1}))).success());
    cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &deployment(ns, "gone", 1).to_string())
        .denied(&["pdb-blocks-eviction"]);

    // From the kill until the webhook answers again, calls fail open: on purpose.
    fail_open.on_purpose(cp, "ha-guard killed until it answers again", || down_and_up(cp, hg, ns));
    // The new process serves the rotated certificate (the files as they are now) ...
    assert_eq!(
        served_serial(hg, &ca.pem).unwrap_or_else(|e| panic!("{e}")),
        SERIAL_2.to_vec(),
        "the rotated certificate"
    );
    // The second object of the pair whose first was written while ha-guard was down.
    cp.apply(deployment(ns, "late", 1)).denied(&["pdb-blocks-eviction"]).shows(&["PodDisruptionBudget crash/late"]);
    cp.kubectl(&["get", "deployment", "late", "-n", ns]).failure().shows(&["NotFound"]);
    // And the PDB deleted meanwhile no longer counts.
    cp.apply(deployment(ns, "gone", 1)).success().no_warnings();
}

/// Kills ha-guard, writes while it is down, starts it again and waits until the apiserver calls it.
fn down_and_up(cp: &ControlPlane, hg: &mut HaGuard, ns: &str) {
    use std::os::unix::process::ExitStatusExt;
    let pdbs = hg.cache_objects("PodDisruptionBudget");
    let pid = hg.pid().expect("running");
    let status = hg.kill().expect("it was running");
    assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status:?}");
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} is gone");
    assert!(hg.get("/healthz").is_err(), "nothing answers on its probe port");

    // While it is down the apiserver cannot call it (failurePolicy Ignore: writes pass unchecked).
    cp.apply(pdb(ns, "late", "late", json!({"minAvailable": 1}))).success();
    cp.kubectl(&["delete", "pdb", "gone", "-n", ns]).success();
    let got = cp.kubectl(&["get", "pdb", "late", "-n", ns, "-o", "json"]).success().json();
    assert!(got["spec"].get("unhealthyPodEvictionPolicy").is_none(), "not mutated: written while ha-guard was down");

    let started = Instant::now();
    hg.restart().unwrap_or_else(|e| panic!("restart: {e}"));
    report(&format!("ha-guard SIGKILLed and started again: /readyz 200 after {:.1?}", started.elapsed()));
    // Ready means synced: the view already holds "late" and has dropped "gone" (one in, one
    // out), with no waiting.
    let m = hg.metrics();
    assert!(m.all("ha_guard_cache_synced", &[]).iter().all(|(_, v)| *v == 1.0), "{m:?}");
    assert_eq!(hg.cache_objects("PodDisruptionBudget"), pdbs, "late in, gone out");
    // The apiserver reaches it on a new connection, so with a new handshake against the
    // unchanged caBundle (its connection to the old process is gone).
    poll("the validating webhook answers again", WAIT, Duration::from_millis(200), || validating_live(cp, CANARY_NS))
        .unwrap_or_else(|e| panic!("{e}"));
}

// --- (a) kube-apiserver restarted --------------------------------------------------------------

/// The review of `obj` sent straight to ha-guard (not through the apiserver): allowed, and the
/// message.
fn direct(hg: &HaGuard, ca_pem: &str, obj: &Value) -> (bool, String) {
    let body = admission_review(obj).to_string();
    match webhook_call(hg.webhook_port, ca_pem, None, None, "/validate", body.as_bytes()) {
        Ok(Call::Answered { status: 200, body, .. }) => {
            let review: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
            let response = &review["response"];
            (response["allowed"] == true, response["status"]["message"].as_str().unwrap_or_default().to_string())
        }
        other => panic!("a direct call to ha-guard: {other:?}"),
    }
}

fn apiserver_restart(cp: &ControlPlane, hg: &HaGuard, fail_open: &mut FailOpen) {
    let ns = "restart";
    hg.created("Namespace", 1, || cp.namespace(ns, &[]));
    hg.created("PodDisruptionBudget", 1, || {
        cp.apply(pdb(ns, "before", "before", json!({"minAvailable": 1}))).success()
    });
    let before = deployment(ns, "before", 1);
    let ca_pem = std::fs::read_to_string(hg.dir().join("ca.crt")).expect("ca.crt");
    let counts = |m: &Metrics| -> Vec<(String, f64)> {
        WATCHED_KINDS
            .iter()
            .map(|k| (k.to_string(), m.get("ha_guard_cache_objects", &[("kind", k)]).unwrap_or(-1.0)))
            .collect()
    };
    let last_state = counts(&hg.metrics());
    let log_lines = std::fs::read_to_string(hg.log_path()).unwrap_or_default().lines().count();

    // Its counters start over.
    fail_open.checkpoint(cp);
    let stopped = Instant::now();
    cp.stop_apiserver(Duration::from_secs(5)).unwrap_or_else(|e| panic!("{e}"));
    let stop_took = stopped.elapsed();
    assert!(cp.kubectl(&["get", "--raw", "/readyz"]).code != 0, "the apiserver is down");
    // ha-guard notices (its watches fail and are retried, and it says so) ...
    poll("ha-guard logs its failing watches", WAIT, Duration::from_millis(200), || {
        let text = std::fs::read_to_string(hg.log_path()).unwrap_or_default();
        let failed = text
            .lines()
            .skip(log_lines)
            .filter(|l| l.contains("watch failing; serving the last known state and retrying"))
            .count();
        if failed > 0 { Ok(()) } else { Err("no such line yet".to_string()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    // ... and stays ready, serving the last known state, as documented.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(3) {
        assert_eq!(hg.get("/readyz").expect("/readyz"), (200, "ok\n".to_string()), "ready while the apiserver is down");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(hg.get("/healthz").expect("/healthz").0, 200);
    let m = hg.metrics();
    assert!(m.all("ha_guard_cache_synced", &[]).iter().all(|(_, v)| *v == 1.0), "still synced: {m:?}");
    assert_eq!(counts(&m), last_state, "the last known state");
    let (allowed, message) = direct(hg, &ca_pem, &before);
    assert!(!allowed && message.contains("[pdb-blocks-eviction] "), "decided on the last known state: {message}");
    let (allowed, message) = direct(hg, &ca_pem, &spread_out(deployment(ns, "free", 1)));
    assert!(allowed, "{message}");

    cp.start_apiserver().unwrap_or_else(|e| panic!("{e}"));
    report(&format!(
        "kube-apiserver stopped (SIGTERM, SIGKILL after 5 s: took {stop_took:.1?}) and started again on the same port: down for {:.1?}",
        stopped.elapsed()
    ));

    // Every watch resumes: one new object of each kind, written after the restart, reaches the
    // view (its gauge), and the apiserver calls the webhooks again (new connections: the
    // rotated certificate against the same caBundle).
    let resumed = Instant::now();
    hg.created("Namespace", 1, || cp.namespace("restart-after", &[]));
    hg.created("Node", 1, || cp.nodes(&["node-d"]));
    hg.created("PersistentVolumeClaim", 1, || cp.apply(pvc(ns, "data", "ReadWriteOnce")).success());
    hg.created("Deployment", 1, || cp.apply(spread_out(deployment(ns, "web", 2))).success());
    hg.created("HorizontalPodAutoscaler", 1, || cp.apply(hpa(ns, "web", "web", 2, 4)).success());
    let mut sts = deployment(ns, "db", 1);
    sts["kind"] = json!("StatefulSet");
    sts["spec"]["serviceName"] = json!("db");
    hg.created("StatefulSet", 1, || cp.apply(&sts).success());
    hg.created("PodDisruptionBudget", 1, || cp.apply(pdb(ns, "after", "after", json!({"minAvailable": 1}))).success());
    hg.created("Service", 1, || cp.apply(service(ns, "after", "after")).success());
    hg.created("ValidatingWebhookConfiguration", 1, || {
        cp.apply(fail_closed_webhooks("e2e-after-restart", ns, "after")).success()
    });
    cp.kubectl(&["delete", "validatingwebhookconfiguration", "e2e-after-restart"]).success();
    report(&format!(
        "after the apiserver restart every watch delivered new objects within {:.1?} (ScaledObjects aside: no CRD \
         here, which the watch takes as none)",
        resumed.elapsed()
    ));
    // The view decides with what came after the restart ...
    cp.apply(deployment(ns, "after", 1)).denied(&["pdb-blocks-eviction"]).shows(&["PodDisruptionBudget restart/after"]);
    cp.kubectl(&["get", "deployment", "after", "-n", ns]).failure().shows(&["NotFound"]);
    // ... and with updates too: "before" relaxed, its Deployment is admitted.
    cp.kubectl(&[
        "patch",
        "pdb",
        "before",
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"minAvailable":null,"maxUnavailable":1}}"#,
    ])
    .success();
    poll("the relaxed PDB reaches the view", WAIT, Duration::from_millis(200), || {
        let out = cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &before.to_string());
        if out.ok() { Ok(()) } else { Err(out.output()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let m = hg.metrics();
    assert!(m.all("ha_guard_cache_synced", &[]).iter().all(|(_, v)| *v == 1.0), "{m:?}");
}

//! End-to-end: `serve --tls-mode managed` behind a real kube-apiserver (see `tests/e2e/README.md`).
//!
//! Two replicas run as a chart would run them: `--tls-mode managed`, `POD_NAMESPACE`, and as
//! their only credential the token of a least-privileged ServiceAccount (`kubectl create token`;
//! get/watch/update/patch on their one Secret, get/patch on their two webhook configurations,
//! the live view's read RBAC from the shipped `manifests/ha-guard.yaml`). The Secret starts empty
//! and the shipped webhook configurations have no caBundle. The Service in front of the replicas is
//! stood in for as kube-proxy would: an ExternalName Service `ha-guard.ha-guard` (the apiserver
//! connects to `localhost:PORT` and checks the certificate for `ha-guard.ha-guard.svc`) and, on
//! that port, a round-robin TCP balancer to the two replicas (loopback only).
//!
//! Steps: both replicas become ready with one CA between them; the caBundle is injected; writes
//! through the webhooks are denied, warned and mutated; the ServiceAccount cannot write anything
//! else; then, with short validities (certificate 20 s, CA 60 s), writes go on for 75 s while
//! the serving certificate and the CA rotate: no call fails, no write passes unchecked.
//!
//! The apiserver keeps its connections to a webhook open, and a rotated certificate reaches only
//! new connections (a caBundle change makes it open new ones by itself). So that every serving
//! certificate meets the apiserver, the balancer cuts its connections every few seconds while no
//! write is in flight (the writers pause), and the test counts, from ha-guard's logs, the
//! certificates each replica handshook with for the name the apiserver asks for. Between those
//! handshakes, a prober handshakes with both replicas every ~50 ms and checks the certificate
//! against both configurations' caBundle as just read: at no moment does a replica serve a
//! certificate the bundles do not trust (a controller that served a new CA's certificate before
//! injecting the CA fails this).

#[path = "support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use ha_guard::server::managed_tls::Cert;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};
use support::balancer::Balancer;
use support::*;

const NS: &str = "ha-guard";
const SECRET: &str = "ha-guard-tls";
const NAME: &str = "ha-guard";
/// The name the apiserver checks the serving certificate for (and asks for by SNI).
const SERVICE_DNS: &str = "ha-guard.ha-guard.svc";
/// Another name of the certificate, which the test's own TLS clients ask for: ha-guard logs
/// the first handshake per certificate and name, so the apiserver's are told from the test's.
const TEST_DNS: &str = "ha-guard.ha-guard";
const CERT_VALIDITY: &str = "20s";
const CA_VALIDITY: &str = "60s";

/// The load: writers, one request per `PACE` each, for `LOAD`; the balancer's connections cut
/// every `CUT_EVERY`.
const WRITERS: usize = 3;
const PACE: Duration = Duration::from_millis(200);
const LOAD: Duration = Duration::from_secs(75);
const CUT_EVERY: Duration = Duration::from_secs(4);

/// Printed past the test harness's capture, so that CI logs show the figures of a passing run.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "[e2e managed-tls] {line}");
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s.trim()).unwrap_or_else(|e| panic!("not base64 ({e}): {s}"))
}

fn certs_of(pem: &[u8]) -> Vec<Cert> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::pem_slice_iter(pem)
        .map(|d| Cert::parse(d.expect("PEM").as_ref()).expect("a certificate"))
        .collect()
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
}

// --- the Service stood in for: a round-robin TCP balancer ----------------------------------------

// --- the cluster side ----------------------------------------------------------------------------

/// What the chart's RBAC grants, for the certificates: the Secret (a Role with resourceNames)
/// and the two webhook configurations (a ClusterRole with resourceNames; get and patch only).
fn certificate_rbac() -> Vec<Value> {
    let sa = json!([{"kind": "ServiceAccount", "name": NAME, "namespace": NS}]);
    vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "ha-guard-tls", "namespace": NS},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SECRET],
                       "verbs": ["get", "watch", "update", "patch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "ha-guard-tls", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ha-guard-tls"},
            "subjects": sa}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "ha-guard-webhooks"},
            "rules": [{"apiGroups": ["admissionregistration.k8s.io"],
                       "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
                       "resourceNames": [NAME], "verbs": ["get", "patch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "ha-guard-webhooks"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ha-guard-webhooks"},
            "subjects": sa}),
    ]
}

/// The shipped webhook configurations as they are (clientConfig.service ha-guard/ha-guard, no
/// caBundle), with the Service port that the balancer listens on.
fn shipped_webhooks(port: u16) -> Vec<Value> {
    let mut docs: Vec<Value> = shipped_manifests()
        .into_iter()
        .filter(|d| d["kind"] == Webhooks::Mutating.kind() || d["kind"] == Webhooks::Validating.kind())
        .collect();
    assert_eq!(docs.len(), 2, "{SHIPPED}: the two webhook configurations");
    for doc in &mut docs {
        for hook in doc["webhooks"].as_array_mut().expect("webhooks") {
            assert_eq!(hook["clientConfig"]["service"]["name"], NAME);
            assert!(hook["clientConfig"].get("caBundle").is_none(), "shipped without a caBundle");
            hook["clientConfig"]["service"]["port"] = json!(port);
        }
    }
    docs
}

/// A kubeconfig for `cp` whose only credential is the ServiceAccount's token.
fn service_account_kubeconfig(cp: &ControlPlane) -> PathBuf {
    let token = cp.kubectl(&["create", "token", NAME, "-n", NS, "--duration=2h"]).success().stdout.trim().to_string();
    let admin = std::fs::read_to_string(cp.kubeconfig()).expect("kubeconfig");
    let ca = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .expect("certificate-authority-data")
        .to_string();
    let path = cp.root().join("service-account.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: ha-guard\n  user:\n    token: {token}\n\
             contexts:\n- name: e2e\n  context: {{cluster: e2e, user: ha-guard}}\ncurrent-context: e2e\n",
            cp.server()
        ),
    )
    .expect("write the kubeconfig");
    path
}

/// The Secret's data, decoded.
fn secret(cp: &ControlPlane) -> BTreeMap<String, Vec<u8>> {
    let s = cp.kubectl(&["get", "secret", SECRET, "-n", NS, "-o", "json"]).success().json();
    s["data"]
        .as_object()
        .map(|d| d.iter().map(|(k, v)| (k.clone(), b64(v.as_str().unwrap_or_default()))).collect())
        .unwrap_or_default()
}

/// Every webhook's caBundle, decoded, in both configurations.
fn bundles(cp: &ControlPlane) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        let c = cp.kubectl(&["get", kind, NAME, "-o", "json"]).success().json();
        for hook in c["webhooks"].as_array().expect("webhooks") {
            let bundle = hook["clientConfig"]["caBundle"].as_str().map(b64).unwrap_or_default();
            out.push((hook["name"].as_str().unwrap_or_default().to_string(), bundle));
        }
    }
    out
}

/// ha-guard's JSON log lines whose message is `message`.
fn log_events(path: &Path, message: &str) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == message)
        .collect()
}

/// The event's time, seconds since the epoch (RFC 3339 `timestamp` of the JSON log).
fn event_time(v: &Value) -> f64 {
    humantime::parse_rfc3339(v["timestamp"].as_str().unwrap_or_default())
        .map(|at| at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64())
        .unwrap_or(0.0)
}

/// The serial of a certificate as the logs print it: hex bytes separated by ':'.
fn serial_in(text: &str) -> Option<String> {
    let start = text.find("(serial ")? + "(serial ".len();
    text[start..].split(',').next().map(str::to_string)
}

/// The certificate a replica serves to a new connection for [`TEST_DNS`], verified against
/// `ca_pem` (DER), or why not.
fn served(port: u16, ca_pem: &[u8]) -> Result<Vec<u8>, String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(c.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from(TEST_DNS).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    conn.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).ok_or_else(|| "no certificate".into())
}

/// Verifies `cert` (DER) for [`TEST_DNS`] against the CAs of `ca_pem`, as a TLS client does.
fn trusted_by(ca_pem: &[u8], cert: &[u8]) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(c.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let name = rustls_pki_types::ServerName::try_from(TEST_DNS).unwrap();
    let cert = rustls_pki_types::CertificateDer::from(cert.to_vec());
    verifier
        .verify_server_cert(&cert, &[], &name, &[], rustls_pki_types::UnixTime::now())
        .map(drop)
        .map_err(|e| e.to_string())
}

/// What the prober saw: handshakes with each replica, each certificate checked against both
/// configurations' caBundle as read just before.
#[derive(Debug, Default)]
struct Probed {
    checked: u64,
    /// Read and handshake more than a second apart (a starved machine): not judged.
    skipped: u64,
    untrusted: Vec<String>,
}

/// Until `stop`: reads both webhook configurations' caBundle, then handshakes with each replica
/// and checks that the certificate it serves is trusted by both: at no moment does a replica
/// serve a certificate the bundles (as the API holds them) do not trust.
fn probe(rt: tokio::runtime::Runtime, client: kube::Client, ports: [u16; 2], stop: Arc<AtomicBool>) -> Probed {
    use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
    let mut probed = Probed::default();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client);
    while !stop.load(Ordering::SeqCst) {
        let read = Instant::now();
        let bundles = rt.block_on(async {
            let v = validating.get(NAME).await.ok()?;
            let m = mutating.get(NAME).await.ok()?;
            let mut out: Vec<Vec<u8>> = Vec::new();
            out.extend(v.webhooks?.into_iter().map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()));
            out.extend(m.webhooks?.into_iter().map(|w| w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()));
            Some(out)
        });
        let Some(bundles) = bundles else { continue };
        for port in ports {
            let verdict = served(port, &bundles[0])
                .and_then(|cert| bundles[1..].iter().try_for_each(|b| trusted_by(b, &cert)).map(|()| cert));
            match verdict {
                Ok(_) => probed.checked += 1,
                Err(_) if read.elapsed() > Duration::from_secs(1) => probed.skipped += 1,
                Err(e) => probed.untrusted.push(format!("port {port}: {e}")),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    probed
}

// --- the test ------------------------------------------------------------------------------------

#[test]
fn managed_certificates_on_a_real_apiserver() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    cp.nodes(&["node-a", "node-b", "node-c"]);
    let fail_open = FailOpen::start(&cp);
    let replicas = ["replica-a", "replica-b"];
    let ports = [free_port(), free_port()];
    let balancer = Balancer::start(ports.to_vec());

    // What the chart installs: namespace, empty Secret, ServiceAccount and RBAC, the Service, the
    // webhook configurations without caBundle.
    cp.namespace(NS, &[]);
    cp.kubectl(&["create", "secret", "generic", SECRET, "-n", NS]).success();
    // The shipped ServiceAccount and the live view's read-only RBAC (ClusterRole and binding
    // `ha-guard`); the certificates' RBAC is the narrower one below.
    for doc in shipped_manifests().into_iter().filter(|d| {
        d["kind"] == "ServiceAccount"
            || (matches!(d["kind"].as_str(), Some("ClusterRole" | "ClusterRoleBinding"))
                && d["metadata"]["name"] == NAME)
    }) {
        cp.apply(doc).success();
    }
    for doc in certificate_rbac() {
        cp.apply(doc).success();
    }
    cp.apply(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME, "namespace": NS},
        "spec": {"type": "ExternalName", "externalName": "localhost"}}))
        .success();
    for doc in shipped_webhooks(balancer.port) {
        cp.apply(doc).success();
    }
    let sa_kubeconfig = service_account_kubeconfig(&cp);

    let mut guards: Vec<HaGuard> = replicas
        .iter()
        .zip(ports)
        .map(|(name, port)| {
            let spec = Spec {
                kubeconfig: Some(sa_kubeconfig.clone()),
                generate_certs: false,
                webhook_port: Some(port),
                env: vec![("POD_NAMESPACE".into(), NS.into())],
                args: [
                    "--tls-mode",
                    "managed",
                    "--tls-secret",
                    SECRET,
                    "--tls-service",
                    NAME,
                    "--tls-webhook",
                    NAME,
                    "--tls-cert-validity",
                    CERT_VALIDITY,
                    "--tls-ca-validity",
                    CA_VALIDITY,
                    // Long: the Secret's changes must reach the replicas through the watch.
                    "--reload-interval",
                    "30",
                    // Only the certificates' RBAC is granted here (the background audit's is
                    // tested in e2e_background_audit and e2e_install).
                    "--audit-interval",
                    "0",
                ]
                .map(String::from)
                .to_vec(),
                ..Spec::new(&cp, name)
            };
            HaGuard::spawn_spec(&cp, &spec).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect();
    let started = Instant::now();
    for g in &mut guards {
        g.wait_ready(WAIT).unwrap_or_else(|e| panic!("{e}"));
    }
    report(&format!("both replicas ready {:.1?} after they started, from an empty Secret", started.elapsed()));
    let logs: Vec<PathBuf> = guards.iter().map(HaGuard::log_path).collect();
    let context_logs = logs.clone();
    let mut steps = Steps::new(move || {
        context_logs.iter().map(|l| format!("{}:\n{}\n", l.display(), tail(l, 15))).collect::<String>()
    });
    let (a, b) = (&guards[0], &guards[1]);

    steps.run("one CA for both replicas, and both serve the Secret's certificate", || one_ca(&cp, [a, b], &logs));
    steps.run("the caBundle is in every webhook of both configurations", || injected(&cp));
    steps.run("writes through the webhooks: denied, warned, mutated", || writes(&cp));
    steps.run("the ServiceAccount can write nothing but its Secret and webhook configurations", || {
        least_privilege(&cp, &sa_kubeconfig)
    });
    steps.run("garbage written into the Secret is named and repaired at once (the watch)", || garbage(&cp, [a, b]));
    steps.run("75 s of writes while the serving certificate and the CA rotate: none fails", || {
        rotation_under_load(&cp, [a, b], &balancer)
    });
    steps.run("no warning but the garbage's (the Secret watch authorized, no API call refused)", || {
        for g in [a, b] {
            let text = std::fs::read_to_string(g.log_path()).unwrap_or_default();
            let warnings: Vec<&str> = text
                .lines()
                .filter(|l| !l.contains(r#""level":"INFO""#))
                .filter(|l| !(l.contains(r#""topic":"contents""#) && l.contains(GARBAGE_NAMED)))
                .collect();
            assert!(warnings.is_empty(), "{}: {warnings:#?}", g.log_path().display());
            assert!(
                text.contains("managed TLS: serving the certificate from the Secret"),
                "{}",
                g.log_path().display()
            );
        }
    });
    steps.run("no webhook call failed or failed open, from the install on", || fail_open.finish(&cp));
    steps.finish();
}

fn one_ca(cp: &ControlPlane, guards: [&HaGuard; 2], logs: &[PathBuf]) {
    let data = secret(cp);
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    let cas = certs_of(&data["ca.crt"]);
    assert_eq!(cas.len(), 1, "one CA: {cas:?}");
    let made: usize = logs.iter().map(|l| log_events(l, "managed TLS: made a new CA").len()).sum();
    assert_eq!(made, 1, "of the two replicas racing on the empty Secret, one made the CA; the other followed");
    let followed = logs.iter().filter(|l| log_events(l, "managed TLS: made a new CA").is_empty()).count();
    assert_eq!(followed, 1);
    let leaf = &certs_of(&data["tls.crt"])[0];
    assert!(leaf.signed_by(&cas[0]), "tls.crt comes from ca.crt");
    assert!(leaf.dns_names.contains(&SERVICE_DNS.to_string()), "{:?}", leaf.dns_names);
    assert!(leaf.not_after - leaf.not_before <= 22, "20 s and a little backdating: {leaf:?}");
    // Each replica serves what the Secret holds (the Secret is read again: it renews every ~15 s).
    for g in guards {
        poll("the replica serves the Secret's certificate", WAIT, Duration::from_millis(200), || {
            let data = secret(cp);
            let served = served(g.webhook_port, &data["ca.crt"])?;
            if served == certs_of(&data["tls.crt"])[0].der { Ok(()) } else { Err("another certificate".into()) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let m = g.metrics();
        let (cert, ca) = (
            m.get("ha_guard_tls_cert_not_after_seconds", &[]).unwrap_or(0.0) as i64,
            m.get("ha_guard_tls_ca_not_after_seconds", &[]).unwrap_or(0.0) as i64,
        );
        assert!(cert > unix_now() && ca >= cert, "the metrics follow the certificates: cert {cert}, CA {ca}");
    }
}

fn injected(cp: &ControlPlane) {
    poll("every caBundle is the Secret's ca.crt", WAIT, Duration::from_millis(200), || {
        let ca = secret(cp)["ca.crt"].clone();
        let all = bundles(cp);
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["validate.ha-guard.io", "mutate.ha-guard.io"]);
        if all.iter().all(|(_, b)| *b == ca) { Ok(()) } else { Err(format!("{} bundles differ", all.len())) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

/// How ha-guard names the garbage the test writes into tls.crt.
const GARBAGE_NAMED: &str =
    "Secret ha-guard/ha-guard-tls: tls.crt: no PEM certificate in it; replacing what is unusable";

/// Writes garbage into the Secret's tls.crt: the replicas hear of it through their watch (their
/// poll is 30 s), name it, re-issue the certificate from the same CA, and keep serving the
/// previous one meanwhile.
fn garbage(cp: &ControlPlane, guards: [&HaGuard; 2]) {
    let before = secret(cp);
    let written = Instant::now();
    cp.kubectl(&["patch", "secret", SECRET, "-n", NS, "--type=merge", "-p", r#"{"data":{"tls.crt":"Z2FyYmFnZQ=="}}"#])
        .success();
    let repaired = poll("tls.crt is a certificate again", Duration::from_secs(10), Duration::from_millis(50), || {
        let data = secret(cp);
        match std::panic::catch_unwind(|| certs_of(&data["tls.crt"])) {
            Ok(c) if !c.is_empty() => Ok((written.elapsed(), data)),
            _ => Err("garbage".to_string()),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    report(&format!("garbage in tls.crt replaced after {:.1?} (the replicas poll every 30 s)", repaired.0));
    assert!(repaired.0 < Duration::from_secs(5), "through the watch, not the poll: {:?}", repaired.0);
    let data = repaired.1;
    assert_eq!(data["ca.crt"], before["ca.crt"], "the CA was usable: kept");
    assert_eq!(data["ca.key"], before["ca.key"]);
    assert!(certs_of(&data["tls.crt"])[0].signed_by(&certs_of(&data["ca.crt"])[0]));
    let named = guards
        .iter()
        .flat_map(|g| log_events(&g.log_path(), "managed TLS"))
        .any(|v| v["error"].as_str().is_some_and(|e| e == GARBAGE_NAMED));
    assert!(named, "a replica named the garbage");
    for g in guards {
        poll("the replica serves a certificate of the CA", WAIT, Duration::from_millis(100), || {
            served(g.webhook_port, &data["ca.crt"]).map(drop)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

fn writes(cp: &ControlPlane) {
    let ns = "writes";
    cp.namespace(ns, &[]);
    poll("the validating webhook denies", WAIT, Duration::from_millis(200), || validating_live(cp, ns))
        .unwrap_or_else(|e| panic!("{e}"));
    cp.kubectl_in(&["apply", "-f", "-"], &canary_deny(ns)).denied(&["prestop-exceeds-grace"]);
    poll("the mutating webhook mutates", WAIT, Duration::from_millis(200), || mutating_live(cp, ns))
        .unwrap_or_else(|e| panic!("{e}"));
    // Warned and mutated: a spread without labelSelector gets one; its pods get no grace.
    let doc = pod(
        deployment(ns, "web", 2),
        json!({"terminationGracePeriodSeconds": 0,
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}),
    );
    cp.apply(&doc).success().warns(&["termination-grace-zero"]);
    let got = cp.kubectl(&["get", "deployment", "web", "-n", ns, "-o", "json"]).success().json();
    assert_eq!(
        got["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"],
        json!({"matchLabels": {"app": "web"}}),
        "mutated"
    );
    cp.apply(canary_mutate(ns)).success();
    let got = cp.kubectl(&["get", "pdb", "canary", "-n", ns, "-o", "json"]).success().json();
    assert_eq!(got["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
}

fn least_privilege(cp: &ControlPlane, kubeconfig: &Path) {
    let sa = |args: &[&str]| kubectl(kubeconfig, args, None);
    let forbidden = |out: Kubectl, what: &str| {
        assert!(
            !out.ok() && out.stderr.to_lowercase().contains("forbidden"),
            "{what}: expected a 403: {}",
            out.output()
        );
    };
    // What it may do.
    sa(&["get", "secret", SECRET, "-n", NS]).success();
    sa(&["get", "validatingwebhookconfiguration", NAME]).success();
    // Anything else is forbidden (403).
    forbidden(sa(&["create", "secret", "generic", "other", "-n", NS]), "create another Secret");
    forbidden(sa(&["get", "secrets", "-n", NS]), "list Secrets");
    forbidden(sa(&["get", "secret", "other", "-n", "default"]), "read a Secret of another namespace");
    forbidden(sa(&["delete", "secret", SECRET, "-n", NS]), "delete its Secret");
    forbidden(sa(&["create", "configmap", "other", "-n", NS]), "create a ConfigMap");
    cp.apply(json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "someone-else"}, "webhooks": []}))
        .success();
    forbidden(
        sa(&[
            "patch",
            "validatingwebhookconfiguration",
            "someone-else",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"x":"y"}}}"#,
        ]),
        "patch another webhook configuration",
    );
    forbidden(sa(&["delete", "mutatingwebhookconfiguration", NAME]), "delete its webhook configuration");
    let deployment = deployment(NS, "sneaky", 1).to_string();
    forbidden(kubectl(kubeconfig, &["create", "-f", "-"], Some(&deployment)), "create a Deployment");
}

// --- rotation under load -------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    sent: u64,
    failed: u64,
    allowed: u64,
    denied: u64,
    mutated: u64,
    /// Writes that should have been denied or mutated and were not: passed unchecked.
    unchecked: u64,
    failures: Vec<String>,
}

struct Load {
    client: kube::Client,
    tally: Mutex<Tally>,
    /// Held (read) by each write; taken (write) to cut the balancer's connections between writes.
    gate: tokio::sync::RwLock<()>,
}

fn api(client: &kube::Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    let ar = match kind {
        "Deployment" => ApiResource::erase::<Deployment>(&()),
        "PodDisruptionBudget" => ApiResource::erase::<PodDisruptionBudget>(&()),
        other => panic!("no API for {other}"),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

#[derive(Clone, Copy, PartialEq)]
enum Expect {
    Allowed,
    /// Admitted, with `spec.unhealthyPodEvictionPolicy` set by the mutating webhook.
    Mutated,
    Denied,
}

impl Load {
    async fn create(&self, ns: &str, obj: Value, expect: Expect) -> bool {
        let _gate = self.gate.read().await;
        let kind = obj["kind"].as_str().expect("kind").to_string();
        let what = format!("create {kind} {ns}/{}", obj["metadata"]["name"].as_str().unwrap_or("?"));
        let obj: DynamicObject = serde_json::from_value(obj).expect("an object");
        let result = api(&self.client, &kind, ns).create(&PostParams::default(), &obj).await;
        self.judge(what, result.map(|o| o.data), expect)
    }

    async fn delete(&self, ns: &str, kind: &str, name: &str) {
        let _gate = self.gate.read().await;
        let result = api(&self.client, kind, ns).delete(name, &DeleteParams::default()).await;
        self.judge(format!("delete {kind} {ns}/{name}"), result.map(|_| Value::Null), Expect::Allowed);
    }

    fn judge(&self, what: String, result: Result<Value, kube::Error>, expect: Expect) -> bool {
        let mut t = self.tally.lock().unwrap();
        t.sent += 1;
        let verdict = match (expect, &result) {
            (Expect::Allowed, Ok(_)) => Ok(()),
            (Expect::Mutated, Ok(o)) if o["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow" => {
                t.mutated += 1;
                Ok(())
            }
            (Expect::Mutated, Ok(_)) => {
                t.unchecked += 1;
                Err("admitted without the mutation".to_string())
            }
            (Expect::Denied, Err(kube::Error::Api(s)))
                if s.code == 403
                    && s.message.contains("admission webhook \"validate.ha-guard.io\" denied the request")
                    && s.message.contains("[prestop-exceeds-grace] ") =>
            {
                t.denied += 1;
                Ok(())
            }
            (Expect::Denied, Ok(_)) => {
                t.unchecked += 1;
                Err("admitted, though ha-guard denies it".to_string())
            }
            (_, Err(e)) => Err(format!("{e}")),
        };
        match verdict {
            Ok(()) => {
                t.allowed += u64::from(expect != Expect::Denied);
                true
            }
            Err(e) => {
                t.failed += 1;
                if t.failures.len() < 20 {
                    t.failures.push(format!("{what}: {e}"));
                }
                false
            }
        }
    }
}

/// One writer: in its namespace, until `until`, a cycle of a denied Deployment, an admitted
/// Deployment, a PDB over it (mutated), and their deletion.
async fn writer(load: Arc<Load>, ns: String, until: Instant) {
    let mut tick = tokio::time::interval(PACE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0u64;
    while Instant::now() < until {
        let app = format!("app-{n}");
        tick.tick().await;
        load.create(&ns, slow_prestop(deployment(&ns, &format!("slow-{n}"), 1)), Expect::Denied).await;
        tick.tick().await;
        let created = load.create(&ns, spread_out(deployment(&ns, &app, 2)), Expect::Allowed).await;
        tick.tick().await;
        let budgeted = load.create(&ns, pdb(&ns, &app, &app, json!({"maxUnavailable": 1})), Expect::Mutated).await;
        if budgeted {
            tick.tick().await;
            load.delete(&ns, "PodDisruptionBudget", &app).await;
        }
        if created {
            tick.tick().await;
            load.delete(&ns, "Deployment", &app).await;
        }
        n += 1;
    }
}

/// The apiserver's counts of its calls to ha-guard's two webhooks.
#[derive(Debug, Default, PartialEq)]
struct WebhookCalls {
    calls: f64,
    /// Answered with a denial.
    rejected: f64,
    /// Neither allowed (200) nor a denial: a call that failed.
    failed: f64,
    /// Failed and let through (failurePolicy Ignore).
    fail_open: f64,
    /// `apiserver_admission_webhook_rejection_count` other than a webhook's own denial
    /// (`error_type` `calling_webhook_error` or `apiserver_internal_error`).
    rejected_for_errors: f64,
}

fn webhook_calls(m: &Metrics) -> WebhookCalls {
    let ours = |l: &BTreeMap<String, String>| l.get("name").is_some_and(|n| n.ends_with(".ha-guard.io"));
    let is = |l: &BTreeMap<String, String>, k: &str, v: &str| l.get(k).map(String::as_str) == Some(v);
    let requests = m.all("apiserver_admission_webhook_request_total", &[]);
    let sum = |f: &dyn Fn(&BTreeMap<String, String>) -> bool| -> f64 {
        requests.iter().filter(|(l, _)| ours(l) && f(l)).map(|(_, v)| v).sum()
    };
    let of = |name: &str, f: &dyn Fn(&BTreeMap<String, String>) -> bool| -> f64 {
        m.all(name, &[]).iter().filter(|(l, _)| ours(l) && f(l)).map(|(_, v)| v).sum()
    };
    WebhookCalls {
        calls: sum(&|_| true),
        rejected: sum(&|l| is(l, "rejected", "true")),
        failed: sum(&|l| !is(l, "rejected", "true") && !is(l, "code", "200")),
        fail_open: of("apiserver_admission_webhook_fail_open_count", &|_| true),
        rejected_for_errors: of("apiserver_admission_webhook_rejection_count", &|l| !is(l, "error_type", "no_error")),
    }
}

fn rotation_under_load(cp: &ControlPlane, guards: [&HaGuard; 2], balancer: &Balancer) {
    let namespaces: Vec<String> = (0..WRITERS).map(|w| format!("load-{w}")).collect();
    for ns in &namespaces {
        cp.namespace(ns, &[]);
    }
    let failures = |g: &HaGuard| g.metrics().get("ha_guard_tls_handshake_failures_total", &[]).unwrap_or(0.0);
    let hg_before: Vec<f64> = guards.iter().map(|g| failures(g)).collect();
    let api_before = webhook_calls(&cp.metrics());
    let secret_before = secret(cp);
    let first_ca = certs_of(&secret_before["ca.crt"])[0].clone();

    let probe_rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let probe_client = cp.kube_client(&probe_rt);
    let probe_stop = Arc::new(AtomicBool::new(false));
    let ports = [guards[0].webhook_port, guards[1].webhook_port];
    let prober = {
        let stop = probe_stop.clone();
        std::thread::spawn(move || probe(probe_rt, probe_client, ports, stop))
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let load =
        Arc::new(Load { client: cp.kube_client(&rt), tally: Mutex::default(), gate: tokio::sync::RwLock::new(()) });
    let started = Instant::now();
    let start_time = unix_now() as f64;
    let until = started + LOAD;
    let tasks: Vec<_> = namespaces.iter().map(|ns| rt.spawn(writer(load.clone(), ns.clone(), until))).collect();
    report(&format!(
        "load: {WRITERS} writers, one write per {PACE:?} each, for {LOAD:?}; certificate {CERT_VALIDITY}, CA {CA_VALIDITY}; \
         the balancer's connections cut every {CUT_EVERY:?} between writes"
    ));

    // Meanwhile: cut the balancer's connections now and then (no write in flight), and watch the
    // Secret: the serving certificates and CAs it holds over time, and that it never holds an
    // expired CA or more than two.
    let (mut cuts, mut cut_connections) = (0, 0);
    let (mut leaves, mut cas) = (BTreeSet::new(), BTreeSet::new());
    let mut max_cas = 0;
    let mut next_cut = Instant::now() + CUT_EVERY;
    while Instant::now() < until {
        let data = secret(cp);
        let bundle = certs_of(&data["ca.crt"]);
        max_cas = max_cas.max(bundle.len());
        let now = unix_now();
        assert!(bundle.iter().all(|c| c.not_after + 2 > now), "an expired CA stays in ca.crt: {bundle:?}");
        cas.insert(bundle[0].serial.clone());
        leaves.insert(certs_of(&data["tls.crt"])[0].serial.clone());
        if Instant::now() >= next_cut {
            let _paused = load.gate.blocking_write();
            cut_connections += balancer.cut();
            cuts += 1;
            std::thread::sleep(Duration::from_millis(300));
            next_cut = Instant::now() + CUT_EVERY;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    rt.block_on(async {
        for t in tasks {
            t.await.expect("a writer panicked");
        }
    });
    let elapsed = started.elapsed();
    drop(rt);
    probe_stop.store(true, Ordering::SeqCst);
    let probed = prober.join().expect("the prober panicked");

    let api_after = webhook_calls(&cp.metrics());
    let api = WebhookCalls {
        calls: api_after.calls - api_before.calls,
        rejected: api_after.rejected - api_before.rejected,
        failed: api_after.failed - api_before.failed,
        fail_open: api_after.fail_open - api_before.fail_open,
        rejected_for_errors: api_after.rejected_for_errors - api_before.rejected_for_errors,
    };
    let handshake_failures: f64 = guards.iter().zip(&hg_before).map(|(g, before)| failures(g) - before).sum();
    let t = load.tally.lock().unwrap();

    // What the replicas did, from their logs: certificates issued and CAs made (by either), and
    // the certificates each handshook with for the first time for the name the apiserver asks
    // for (the test's own clients ask for another).
    let during = |v: &Value| event_time(v) >= start_time;
    let mut issued = Vec::new();
    let mut made = Vec::new();
    let mut handshaken: Vec<BTreeSet<String>> = Vec::new();
    for g in guards {
        let log = g.log_path();
        issued.extend(log_events(&log, "managed TLS: issued a serving certificate").into_iter().filter(during));
        made.extend(log_events(&log, "managed TLS: made a new CA").into_iter().filter(during));
        handshaken.push(
            log_events(&log, "first TLS handshake with this serving certificate")
                .into_iter()
                .filter(during)
                .filter(|v| v["server_name"] == SERVICE_DNS)
                .filter_map(|v| v["serial"].as_str().map(str::to_string))
                .collect(),
        );
    }
    let issued_serials: Vec<(f64, String)> =
        issued.iter().filter_map(|v| Some((event_time(v), serial_in(v["certificate"].as_str()?)?))).collect();
    let all_handshaken: BTreeSet<&String> = handshaken.iter().flatten().collect();
    let issued_and_handshaken = issued_serials.iter().filter(|(_, s)| all_handshaken.contains(s)).count();
    // A certificate issued after the first CA rotation of the load comes from the new CA.
    let rotation_time = made.iter().map(event_time).fold(f64::INFINITY, f64::min);
    let from_new_ca: Vec<&String> =
        issued_serials.iter().filter(|(at, _)| *at > rotation_time).map(|(_, s)| s).collect();
    let from_new_ca_handshaken = from_new_ca.iter().filter(|s| all_handshaken.contains(*s)).count();
    let dropped: usize = guards
        .iter()
        .map(|g| log_events(&g.log_path(), "managed TLS: dropped a CA from ca.crt").into_iter().filter(during).count())
        .sum();

    report(&format!(
        "load: {} writes in {elapsed:.1?} ({:.1}/s), {} failed; {} admitted ({} mutated), {} denied as expected, {} passed unchecked",
        t.sent,
        t.sent as f64 / elapsed.as_secs_f64(),
        t.failed,
        t.allowed,
        t.mutated,
        t.denied,
        t.unchecked
    ));
    report(&format!(
        "apiserver: {} calls to ha-guard, {} denials, {} failed, {} failed open, {} rejections for errors; \
         ha-guard: {handshake_failures} TLS handshakes failed",
        api.calls, api.rejected, api.failed, api.fail_open, api.rejected_for_errors
    ));
    report(&format!(
        "rotations during the load: {} serving certificates issued, {} CAs made, {dropped} expired CAs dropped; \
         the Secret showed {} serving certificates and {} CAs (at most {max_cas} CAs in ca.crt at once)",
        issued_serials.len(),
        made.len(),
        leaves.len(),
        cas.len()
    ));
    report(&format!(
        "handshakes: the apiserver handshook with {issued_and_handshaken} of the {} certificates issued during the load \
         ({} of the {} issued from a CA made during the load); per replica {:?} distinct certificates; \
         {cuts} cuts closed {cut_connections} connections, the balancer relayed {} connections in all",
        issued_serials.len(),
        from_new_ca_handshaken,
        from_new_ca.len(),
        handshaken.iter().map(BTreeSet::len).collect::<Vec<_>>(),
        balancer.accepted()
    ));

    report(&format!(
        "prober: {} handshakes with a replica checked against both caBundles as just read, {} untrusted, {} skipped",
        probed.checked,
        probed.untrusted.len(),
        probed.skipped
    ));
    assert!(
        probed.untrusted.is_empty(),
        "a replica served a certificate the caBundles do not trust: {:?}",
        probed.untrusted
    );
    assert!(probed.checked > 200, "the prober ran: {probed:?}");
    assert!(
        t.failures.is_empty() && t.failed == 0,
        "{} of {} writes failed:\n{}",
        t.failed,
        t.sent,
        t.failures.join("\n")
    );
    assert_eq!(t.unchecked, 0, "writes passed unchecked");
    assert!(t.sent > 200 && t.denied > 50 && t.mutated > 50, "the load ran: {} sent", t.sent);
    assert_eq!(api.fail_open, 0.0, "no webhook call failed open: {api:?}");
    assert_eq!(api.failed, 0.0, "every webhook call was answered: {api:?}");
    assert_eq!(api.rejected_for_errors, 0.0, "no rejection for an error: {api:?}");
    assert_eq!(api.rejected, t.denied as f64, "the apiserver saw exactly the expected denials: {api:?}");
    assert_eq!(handshake_failures, 0.0, "no TLS handshake failed");
    assert!(!made.is_empty(), "the CA rotated during the load");
    assert!(
        !certs_of(&secret(cp)["ca.crt"]).iter().any(|c| c.der == first_ca.der),
        "the CA of before the load expired and left ca.crt"
    );
    assert!(issued_serials.len() >= 4, "the serving certificate rotated: {}", issued_serials.len());
    assert_eq!(max_cas, 2, "old and new CA side by side, never more");
    assert!(dropped >= 1, "the CA that expired left the bundle");
    assert!(
        issued_and_handshaken + 1 >= issued_serials.len(),
        "the apiserver handshook with every certificate but at most the last: {issued_and_handshaken} of {}",
        issued_serials.len()
    );
    assert!(from_new_ca_handshaken >= 1, "the apiserver handshook with a certificate from the new CA");
    // Afterwards: every bundle is the Secret's ca.crt, and both replicas are ready.
    injected(cp);
    for g in guards {
        assert_eq!(g.get("/readyz").expect("/readyz"), (200, "ok\n".to_string()));
    }
}

//! End-to-end client authentication: `ha-guard serve --client-ca` behind a real kube-apiserver
//! that presents a client certificate to its webhooks, configured the documented way ("Authenticate
//! apiservers" in the Kubernetes admission webhook docs): `--admission-control-config-file` names
//! an AdmissionConfiguration whose ValidatingAdmissionWebhook and MutatingAdmissionWebhook plugins
//! each get a WebhookAdmissionConfiguration, whose `kubeConfigFile` has a `users` entry named for
//! the webhook's `host:port` (`127.0.0.1:PORT`, from the webhook's URL) with the certificate and
//! key.
//!
//! The certificates come from `ha-guard certs --client kube-apiserver`: one CA signs ha-guard's
//! serving certificate and the apiserver's client certificate, and is both the webhooks' caBundle
//! and ha-guard's `--client-ca`.
//!
//! Shown: writes through that apiserver are judged by ha-guard (its certificate was accepted);
//! a caller without a certificate, or with one from another CA, is refused in the TLS handshake
//! and never gets an HTTP answer; an apiserver without the client certificate cannot reach
//! ha-guard either (its calls fail open, as failurePolicy Ignore ships).

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::*;

/// The apiserver's client certificate's common name.
const APISERVER_CLIENT: &str = "kube-apiserver";

/// `ha-guard certs --out DIR --dns localhost --ip 127.0.0.1 --client NAME`.
fn certs(dir: &Path, client: &str) -> Result<(), String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["certs", "--out"])
        .arg(dir)
        .args(["--dns", "localhost", "--ip", "127.0.0.1", "--client", client])
        .output()
        .map_err(|e| format!("cannot run ha-guard certs: {e}"))?;
    if !out.status.success() {
        return Err(format!("ha-guard certs --client {client} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let printed = String::from_utf8_lossy(&out.stdout);
    for f in ["ca.crt", "tls.crt", "tls.key", "client.crt", "client.key"] {
        if !printed.contains(&dir.join(f).display().to_string()) {
            return Err(format!("ha-guard certs did not say it wrote {f}: {printed}"));
        }
    }
    Ok(())
}

/// Writes the AdmissionConfiguration (and the kubeconfig it names) that makes the apiserver
/// present `dir`'s client certificate to the webhook at `127.0.0.1:port`; returns the
/// apiserver flag.
fn admission_configuration(root: &Path, dir: &Path, port: u16) -> Result<String, String> {
    let conf = root.join("admission");
    std::fs::create_dir_all(&conf).map_err(|e| format!("{}: {e}", conf.display()))?;
    let kubeconfig = conf.join("webhook-kubeconfig.yaml");
    let kubeconfig_text = format!(
        r#"apiVersion: v1
kind: Config
# The apiserver picks the user whose name is the webhook's host:port (its URL's host and port).
users:
- name: "127.0.0.1:{port}"
  user:
    client-certificate: "{cert}"
    client-key: "{key}"
"#,
        cert = dir.join("client.crt").display(),
        key = dir.join("client.key").display()
    );
    let plugin = |name: &str| {
        format!(
            r#"- name: {name}
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: "{}"
"#,
            kubeconfig.display()
        )
    };
    let admission = conf.join("admission.yaml");
    let admission_text = format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
        plugin("ValidatingAdmissionWebhook"),
        plugin("MutatingAdmissionWebhook")
    );
    for (path, text) in [(&kubeconfig, kubeconfig_text), (&admission, admission_text)] {
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(format!("--admission-control-config-file={}", admission.display()))
}

#[test]
fn apiserver_authenticates_to_ha_guard() {
    // ha-guard's port is named in the apiserver's admission kubeconfig, so it is chosen first.
    let port = free_port();
    let cp = ControlPlane::start_with(|root| {
        let dir = HaGuard::dir_of(root, "ha-guard");
        certs(&dir, APISERVER_CLIENT)?;
        Ok(vec![admission_configuration(root, &dir, port)?])
    })
    .unwrap_or_else(|e| panic!("control plane: {e}"));
    let dir = HaGuard::dir_of(cp.root(), "ha-guard");
    let spec = Spec {
        generate_certs: false,
        webhook_port: Some(port),
        args: vec!["--client-ca".into(), dir.join("ca.crt").display().to_string()],
        ..Spec::new(&cp, "ha-guard")
    };
    let fail_open = FailOpen::start(&cp);
    let hg = HaGuard::start_spec(&cp, &spec).unwrap_or_else(|e| panic!("ha-guard: {e}"));
    assert!(hg.log_tail(50).contains("client certificates required"), "{}", hg.log_tail(50));
    register(&cp, &hg, &[Webhooks::Mutating, Webhooks::Validating])
        .unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(20)));

    let log = hg.log_path();
    let mut steps = Steps::new(move || format!("ha-guard log (last lines):\n{}", tail(&log, 12)));
    steps.run("1 through the apiserver presenting its certificate, ha-guard judges the writes", || {
        apiserver_accepted(&cp, &hg)
    });
    steps.run("2 a caller without a client certificate is refused in the handshake", || no_certificate(&hg));
    steps.run("3 a client certificate from another CA is refused in the handshake", || other_ca(&cp, &hg));
    steps.run("4 the apiserver's certificate, presented directly, is answered", || same_certificate(&hg));
    steps.run("5 an apiserver without the client certificate cannot reach ha-guard", || {
        apiserver_without_certificate(&hg)
    });
    // The second apiserver's calls fail open on purpose; this one's never do.
    steps.run("no call of the apiserver with the client certificate failed or failed open", || fail_open.finish(&cp));
    steps.finish();
}

fn handshake_failures(hg: &HaGuard) -> f64 {
    hg.metrics().get("ha_guard_tls_handshake_failures_total", &[]).unwrap_or(0.0)
}

fn ca_pem(hg: &HaGuard) -> String {
    std::fs::read_to_string(hg.dir().join("ca.crt")).expect("ca.crt")
}

/// (1) Denied and mutated by ha-guard through the apiserver, and no handshake refused meanwhile.
fn apiserver_accepted(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "authn";
    let failures = handshake_failures(hg);
    hg.created("Namespace", 1, || cp.namespace(ns, &[]));
    cp.apply(slow_prestop(deployment(ns, "slow", 1)))
        .denied(&["prestop-exceeds-grace"])
        .shows(&["[prestop-exceeds-grace] "]);
    cp.kubectl(&["get", "deployment", "slow", "-n", ns]).failure().shows(&["NotFound"]);
    // A cross-object denial: the view behind the authenticated calls is the live one.
    hg.created("Deployment", 1, || cp.apply(spread_out(deployment(ns, "solo", 2))).success());
    hg.created("PodDisruptionBudget", 1, || cp.apply(pdb(ns, "solo", "solo", json!({"maxUnavailable": 1}))).success());
    let stored = cp.kubectl(&["get", "pdb", "solo", "-n", ns, "-o", "json"]).success().json();
    assert_eq!(
        stored["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow",
        "mutated: the mutating webhook was reached too"
    );
    cp.apply(pdb(ns, "solo-again", "solo", json!({"minAvailable": 1}))).denied(&["pdb-overlap"]);
    assert_eq!(handshake_failures(hg), failures, "the apiserver's handshakes all succeeded");
    let m = hg.metrics();
    assert!(
        m.sum("ha_guard_admission_requests_total", &[("webhook", "validate"), ("decision", "denied")]) >= 2.0,
        "{m:?}"
    );
}

/// Asserts that a direct caller presenting `id` gets no HTTP answer, only the server's TLS alert:
/// over TLS 1.2 in the handshake itself, over TLS 1.3 on the first read (there the client's
/// side of the handshake is over before the server checks its certificate). ha-guard counts both
/// as failed handshakes.
fn assert_refused(hg: &HaGuard, id: Option<&ClientIdentity>, what: &str) -> Vec<rustls::Error> {
    let ca = ca_pem(hg);
    let body = admission_review(&slow_prestop(deployment("authn", "direct", 1))).to_string();
    let before = handshake_failures(hg);
    let mut errors = Vec::new();
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let call = webhook_call(hg.webhook_port, &ca, id, Some(version), "/validate", body.as_bytes())
            .unwrap_or_else(|e| panic!("{what} over {:?}: {e}", version.version));
        match (&call, version.version) {
            (Call::HandshakeFailed(rustls::Error::AlertReceived(_)), rustls::ProtocolVersion::TLSv1_2)
            | (Call::RefusedAfterHandshake(rustls::Error::AlertReceived(_)), rustls::ProtocolVersion::TLSv1_3) => {}
            _ => panic!("{what} over {:?}: expected the server's alert and no answer, got {call:?}", version.version),
        }
        errors.push(call.tls_error().cloned().expect("a TLS error"));
    }
    let counted =
        poll("ha-guard counts the refused handshakes", Duration::from_secs(10), Duration::from_millis(50), || {
            let n = handshake_failures(hg) - before;
            if n >= 2.0 { Ok(n) } else { Err(format!("{n}")) }
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(counted, 2.0, "{what}: one failed handshake per call");
    errors
}

/// (2) No certificate at all.
fn no_certificate(hg: &HaGuard) {
    let errors = assert_refused(hg, None, "no client certificate");
    // TLS 1.3 names the reason (RFC 8446: certificate_required).
    assert_eq!(errors[1], rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired), "{errors:?}");
    assert!(hg.log_tail(20).contains("TLS handshake failed"), "{}", hg.log_tail(20));
}

/// (3) Certificates that are valid for client authentication, with the apiserver's name, but
/// from CAs ha-guard does not trust: another `ha-guard certs --client` (its CA has the same
/// name as the trusted one, so the chain is built and its signature fails to verify:
/// decrypt_error), and a CA of another name (no issuer found: unknown_ca).
fn other_ca(cp: &ControlPlane, hg: &HaGuard) {
    use rustls::AlertDescription::{DecryptError, UnknownCA};
    let other = cp.root().join("other-ca");
    certs(&other, APISERVER_CLIENT).unwrap_or_else(|e| panic!("{e}"));
    let errors =
        assert_refused(hg, Some(&ClientIdentity::read(&other)), "a client certificate from another ha-guard CA");
    assert!(
        errors.iter().all(|e| *e == rustls::Error::AlertReceived(DecryptError)),
        "its signature does not verify: {errors:?}"
    );

    let errors =
        assert_refused(hg, Some(&foreign_identity(APISERVER_CLIENT)), "a client certificate from a foreign CA");
    assert!(errors.iter().all(|e| *e == rustls::Error::AlertReceived(UnknownCA)), "its issuer is unknown: {errors:?}");
}

/// A client certificate named `name` from a CA of its own, named "some other CA".
fn foreign_identity(name: &str) -> ClientIdentity {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(DnType::CommonName, "some other CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_key = KeyPair::generate().expect("CA key");
    let mut client = CertificateParams::new(Vec::<String>::new()).expect("client params");
    client.distinguished_name.push(DnType::CommonName, name);
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    client.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().expect("client key");
    let cert = client.signed_by(&key, &Issuer::from_params(&ca, &ca_key)).expect("client certificate");
    ClientIdentity { cert_pem: cert.pem(), key_pem: key.serialize_pem() }
}

/// (4) The same client code with the apiserver's certificate gets an answer: what refused the
/// other calls was their certificate.
fn same_certificate(hg: &HaGuard) {
    let id = ClientIdentity::read(hg.dir());
    let body = admission_review(&slow_prestop(deployment("authn", "direct", 1))).to_string();
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        match webhook_call(hg.webhook_port, &ca_pem(hg), Some(&id), Some(version), "/validate", body.as_bytes()) {
            Ok(Call::Answered { status: 200, body, .. }) => {
                let review: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
                assert_eq!(review["response"]["allowed"], false, "{review}");
                let message = review["response"]["status"]["message"].as_str().unwrap_or_default();
                assert!(message.contains("[prestop-exceeds-grace] "), "{review}");
            }
            other => panic!("with the apiserver's certificate over {:?}: {other:?}", version.version),
        }
    }
}

/// (5) A second apiserver, started without the AdmissionConfiguration, registers the same
/// webhooks: its calls are refused in the handshake (ha-guard counts them) and, with the shipped
/// failurePolicy Ignore, its writes pass unchecked: the apiserver counts the calls as failed open.
fn apiserver_without_certificate(hg: &HaGuard) {
    let plain = ControlPlane::start().unwrap_or_else(|e| panic!("second control plane: {e}"));
    let ns = "plain";
    plain.namespace(ns, &[]);
    for which in [Webhooks::Mutating, Webhooks::Validating] {
        plain.apply(webhook_configuration(hg, which)).success();
    }
    let before = handshake_failures(hg);
    // The apiserver picks new webhook configurations up asynchronously: write until it calls
    // ha-guard (seen as a refused handshake), each write a new object.
    let mut n = 0;
    poll("the second apiserver calls ha-guard", WAIT, Duration::from_millis(200), || {
        n += 1;
        plain.apply(slow_prestop(deployment(ns, &format!("unchecked-{n}"), 1))).success();
        let now = handshake_failures(hg);
        if now > before { Ok(()) } else { Err(format!("{now}")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    // Now that it calls: refused, so unchecked.
    plain.apply(slow_prestop(deployment(ns, "unchecked", 1))).success().no_warnings();
    let m = plain.metrics();
    let fail_open: f64 = m
        .all("apiserver_admission_webhook_fail_open_count", &[])
        .iter()
        .filter(|(l, _)| l.get("name").is_some_and(|n| n.ends_with(".ha-guard.io")))
        .map(|(_, v)| v)
        .sum();
    assert!(
        fail_open >= 1.0,
        "the second apiserver's calls to ha-guard failed open: {:?}",
        m.all("apiserver_admission_webhook_fail_open_count", &[])
    );
    let log = plain.apiserver_log_tail(200);
    assert!(log.contains("ha-guard.io") && log.contains("failed calling webhook"), "its log says why:\n{log}");
}

//! `ha-guard certs` (the CA key kept, re-issuing from the CA in the directory, `--new-ca`) and
//! the certificates `ha-guard serve` starts with (development ones generated whatever the
//! cluster; a half pair or a missing namespace an error naming the fix), driven through the real
//! binary. Certificates are checked the way a TLS client checks them: rustls's WebPKI verifier
//! against `ca.crt`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::ServerCertVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use crate::cli::{BIN, Run, ha_guard};

/// Runs the binary in `dir` with no cluster to be found (no KUBECONFIG, HOME without `.kube`,
/// not in a pod) plus `env`.
fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    ha_guard(args)
        .dir(dir)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("POD_NAMESPACE")
        .env("HOME", dir)
        .envs(env)
        .run()
}

fn certs(dir: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["certs", "--out", "pki", "--dns", "ha-guard.ha-guard.svc", "localhost", "--ip", "127.0.0.1"];
    args.extend_from_slice(extra);
    run(dir, &args, &[])
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ders(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem).collect::<Result<_, _>>().expect("PEM certificates")
}

/// Verifies the serving certificate `cert_pem` for `name` as a TLS client trusting `ca_pem` does.
fn verify(ca_pem: &[u8], cert_pem: &[u8], name: &str) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for c in ders(ca_pem) {
        roots.add(c).expect("a usable root");
    }
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .expect("verifier");
    let chain = ders(cert_pem);
    let name = ServerName::try_from(name.to_string()).expect("a server name");
    verifier.verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now()).map(drop)
}

/// Verifies the client certificate `cert_pem` as a server requiring ones signed by `ca_pem` does.
fn verify_client(ca_pem: &[u8], cert_pem: &[u8]) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for c in ders(ca_pem) {
        roots.add(c).expect("a usable root");
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .expect("verifier");
    let chain = ders(cert_pem);
    verifier.verify_client_cert(&chain[0], &chain[1..], UnixTime::now()).map(drop)
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

/// The notAfter of the first certificate in `pem`, as a day (YYYY-MM-DD).
fn not_after_day(pem: &[u8]) -> String {
    let der = ders(pem).remove(0);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("a certificate");
    let t = time::OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp()).unwrap();
    t.date().to_string()
}

/// `--validity` and `--ca-validity` set what is issued; the defaults are a year and ten years;
/// stderr says until when, and a certificate never outlives its CA.
#[test]
fn certs_validity_is_settable_and_said() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    let day = |days: i64| (time::OffsetDateTime::now_utc() + time::Duration::days(days)).date().to_string();
    let said = |cert: &str, ca: &str| {
        format!("the certificate is valid until {cert} (UTC), the CA until {ca}: run this command again before then\n")
    };
    let first = certs(tmp.path(), &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(
        (not_after_day(&read(&pki.join("tls.crt"))), not_after_day(&read(&pki.join("ca.crt")))),
        (day(365), day(3650))
    );
    assert!(first.stderr.ends_with(&said(&day(365), &day(3650))), "{}", first.stderr);
    let again = certs(tmp.path(), &["--new-ca", "--validity", "90d", "--ca-validity", "2y"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    // humantime's year is 365.25 days.
    let ca_day = (time::OffsetDateTime::now_utc() + time::Duration::hours(2 * 8766)).date().to_string();
    assert_eq!(not_after_day(&read(&pki.join("tls.crt"))), day(90));
    assert_eq!(not_after_day(&read(&pki.join("ca.crt"))), ca_day);
    assert!(again.stderr.ends_with(&said(&day(90), &ca_day)), "{}", again.stderr);
    // Longer than the kept CA: the certificate ends with it.
    let capped = certs(tmp.path(), &["--validity", "5y"]);
    assert!(capped.stderr.ends_with(&said(&ca_day, &ca_day)), "{}", capped.stderr);
    assert_eq!(not_after_day(&read(&pki.join("tls.crt"))), ca_day);
}

/// A validity past what a certificate can hold is a usage error (exit 2) naming the maximum, for
/// `certs` and for `serve`'s managed-TLS flags alike; it panicked when added to the clock.
#[test]
fn a_validity_past_100_years_is_refused_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    for flag in ["--validity", "--ca-validity"] {
        let r = certs(tmp.path(), &[flag, "100000y"]);
        assert_eq!(r.code, 2, "{flag}: {}", r.stderr);
        assert!(r.stderr.contains("longer than the maximum of 100years"), "{flag}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
    assert!(!tmp.path().join("pki").exists(), "nothing written");
    let r = run(tmp.path(), &["serve", "--tls-cert-validity", "100000y"], &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("longer than the maximum of 100years"), "{}", r.stderr);
    // The maximum itself is issued.
    let ok = certs(tmp.path(), &["--validity", "100y", "--ca-validity", "100y"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
}

#[test]
fn certs_keeps_the_ca_key_and_reissues_from_that_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    let first = certs(tmp.path(), &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let listed: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(listed, ["pki/ca.crt", "pki/ca.key", "pki/tls.crt", "pki/tls.key"]);
    assert!(
        first.stderr.contains("new CA: the webhook configurations' caBundle must hold pki/ca.crt"),
        "{}",
        first.stderr
    );
    #[cfg(unix)]
    {
        assert_eq!(mode(&pki.join("ca.key")), 0o600, "the CA key is its owner's only");
        assert_eq!(mode(&pki.join("tls.key")), 0o600);
    }
    let (ca, ca_key, cert1) = (read(&pki.join("ca.crt")), read(&pki.join("ca.key")), read(&pki.join("tls.crt")));
    assert!(String::from_utf8_lossy(&ca_key).contains("-----BEGIN PRIVATE KEY-----"));
    verify(&ca, &cert1, "ha-guard.ha-guard.svc").expect("the first certificate chains to ca.crt");

    // Again: the serving certificate is re-issued from the kept CA; ca.crt and ca.key untouched.
    let second = certs(tmp.path(), &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(second.stdout.lines().collect::<Vec<_>>(), ["pki/tls.crt", "pki/tls.key"]);
    assert!(second.stderr.contains("issued from the CA in pki/ca.crt (kept)"), "{}", second.stderr);
    assert_eq!(read(&pki.join("ca.crt")), ca, "ca.crt kept byte for byte");
    assert_eq!(read(&pki.join("ca.key")), ca_key);
    let cert2 = read(&pki.join("tls.crt"));
    assert_ne!(cert2, cert1, "a new serving certificate");
    // What a caBundle holding the first ca.crt makes of it: trusted, for every name asked for.
    for name in ["ha-guard.ha-guard.svc", "localhost", "127.0.0.1"] {
        verify(&ca, &cert2, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let e = verify(&ca, &cert2, "other.example").expect_err("not for other names");
    assert!(format!("{e:?}").contains("NotValidForName"), "{e:?}");
    // And the new key is the new certificate's: a server identity rustls accepts.
    let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(&read(&pki.join("tls.key"))).unwrap();
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).unwrap();
    rustls::sign::CertifiedKey::new(ders(&cert2), signer).keys_match().expect("key matches the certificate");
}

#[test]
fn new_ca_makes_a_new_ca_that_the_old_bundle_does_not_trust() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    assert_eq!(certs(tmp.path(), &[]).code, 0);
    let old_ca = read(&pki.join("ca.crt"));
    let forced = certs(tmp.path(), &["--new-ca"]);
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert_eq!(forced.stdout.lines().count(), 4);
    let (new_ca, cert) = (read(&pki.join("ca.crt")), read(&pki.join("tls.crt")));
    assert_ne!(new_ca, old_ca);
    verify(&new_ca, &cert, "localhost").expect("chains to the new CA");
    // Both CAs are named "ha-guard CA": the old one is tried as the issuer and its key refuses
    // the signature.
    let e = verify(&old_ca, &cert, "localhost").expect_err("not to the old one");
    assert!(format!("{e:?}").contains("BadSignature"), "{e:?}");
}

#[test]
fn a_client_certificate_comes_from_the_kept_ca_too() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    assert_eq!(certs(tmp.path(), &[]).code, 0);
    let ca = read(&pki.join("ca.crt"));
    let out = certs(tmp.path(), &["--client", "kube-apiserver"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout.lines().collect::<Vec<_>>(),
        ["pki/tls.crt", "pki/tls.key", "pki/client.crt", "pki/client.key"]
    );
    verify_client(&ca, &read(&pki.join("client.crt"))).expect("the client certificate chains to the kept CA");
}

#[test]
fn a_ca_that_cannot_sign_is_an_error_naming_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    assert_eq!(certs(tmp.path(), &[]).code, 0);
    let cert = read(&pki.join("tls.crt"));

    // ca.crt without ca.key (as older versions of `ha-guard certs` left it).
    let key = read(&pki.join("ca.key"));
    std::fs::remove_file(pki.join("ca.key")).unwrap();
    let out = certs(tmp.path(), &[]);
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(
        out.stderr.contains("pki/ca.crt exists but pki/ca.key does not")
            && out.stderr.contains("put its key at pki/ca.key, or pass --new-ca"),
        "{}",
        out.stderr
    );
    assert_eq!(read(&pki.join("tls.crt")), cert, "nothing written");

    // ca.key of another CA.
    let other = tempfile::tempdir().unwrap();
    assert_eq!(certs(other.path(), &[]).code, 0);
    std::fs::write(pki.join("ca.key"), read(&other.path().join("pki/ca.key"))).unwrap();
    let out = certs(tmp.path(), &[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("the key does not belong to the CA certificate") && out.stderr.contains("--new-ca"),
        "{}",
        out.stderr
    );

    // ca.key without ca.crt.
    std::fs::write(pki.join("ca.key"), &key).unwrap();
    std::fs::remove_file(pki.join("ca.crt")).unwrap();
    let out = certs(tmp.path(), &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("pki/ca.key exists but pki/ca.crt does not"), "{}", out.stderr);

    // --new-ca gets out of each.
    let out = certs(tmp.path(), &["--new-ca"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    verify(&read(&pki.join("ca.crt")), &read(&pki.join("tls.crt")), "localhost").expect("a working pair");
}

// --- serve: the certificates it starts with ------------------------------------------------------

/// A `serve` process, killed when dropped.
struct Serving {
    child: Child,
    log: PathBuf,
    webhook: u16,
    probe: u16,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serving {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// Starts `serve` in `dir` (logs to `dir/serve.log`) with `env`.
fn serve(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Serving {
    let (webhook, probe) = (free_port(), free_port());
    let log = dir.join("serve.log");
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new(BIN)
        .arg("serve")
        .args(["--listen", &format!("127.0.0.1:{webhook}"), "--probe-listen", &format!("127.0.0.1:{probe}")])
        .args(args)
        .current_dir(dir)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("POD_NAMESPACE")
        .env("HOME", dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("serve starts");
    Serving { child, log, webhook, probe }
}

/// Status and body of a plain HTTP GET on the probe port.
fn probe(port: u16, path: &str) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).map_err(|e| e.to_string())?;
    let code = raw.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or(raw.clone())?;
    Ok((code, raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

/// POSTs a fixture to `/validate` over TLS, trusting only `ca_pem` and checking the name
/// `localhost`: the HTTP status.
fn validate(port: u16, ca_pem: &[u8]) -> Result<u16, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in ders(ca_pem) {
        roots.add(c).map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap())
        .map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let body = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deployment-spread-no-selector.json"));
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).and_then(|()| tls.write_all(&body)).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    let text = String::from_utf8_lossy(&raw);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(|| text.into_owned())
}

/// Waits (10 s at most) until `f` is `Ok`.
fn eventually<T>(what: &str, s: &mut Serving, mut f: impl FnMut(&Serving) -> Result<T, String>) -> T {
    let start = Instant::now();
    loop {
        match f(s) {
            Ok(t) => return t,
            Err(e) if start.elapsed() > Duration::from_secs(10) => panic!("{what}: {e}\n{}", s.log()),
            Err(_) => {}
        }
        if let Ok(Some(status)) = s.child.try_wait() {
            panic!("{what}: serve exited ({status}):\n{}", s.log());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_with_a_kubeconfig_and_no_certificates_makes_development_ones() {
    let tmp = tempfile::tempdir().unwrap();
    // A kubeconfig whose cluster is a loopback port nothing listens on: a cluster is "found",
    // and its caches never sync.
    let dead = free_port();
    let kubeconfig = tmp.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster:\n    server: https://127.0.0.1:{dead}\n\
             users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: dead\n  context: {{cluster: dead, user: u}}\n\
             current-context: dead\n"
        ),
    )
    .unwrap();
    let mut s = serve(tmp.path(), &[], &[("KUBECONFIG", kubeconfig.to_str().unwrap())]);
    let certs_dir = tmp.path().join("certs");
    let ca = eventually("certs/ca.crt is written", &mut s, |_| {
        std::fs::read(certs_dir.join("ca.crt")).map_err(|e| e.to_string())
    });
    let status =
        eventually("the TLS port answers with the development certificate", &mut s, |s| validate(s.webhook, &ca));
    assert_eq!(status, 200);
    for f in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(certs_dir.join(f).is_file(), "{f}");
    }
    let log = s.log();
    assert!(
        log.contains("a development CA and serving certificate")
            && log.contains("for development only")
            && log.contains("certs/ca.crt")
            && log.contains("certs/tls.key"),
        "says what it made and where:\n{log}"
    );
    assert!(
        log.contains(
            "serving certificate (for localhost, ha-guard, ha-guard.ha-guard.svc, 127.0.0.1, ::1; for development only)"
        ),
        "names every host the certificate holds:\n{log}"
    );
    // The live view of the dead cluster never syncs: not ready, and it says why.
    assert_eq!(probe(s.probe, "/readyz").unwrap(), (503, "cluster caches not synced\n".to_string()));
    assert_eq!(probe(s.probe, "/healthz").unwrap().0, 200);
    drop(s);

    // Started again, it serves the certificates it made (no new ones).
    let tls = read(&certs_dir.join("tls.crt"));
    let mut s = serve(tmp.path(), &["--cluster", "none"], &[]);
    assert_eq!(eventually("the TLS port answers", &mut s, |s| validate(s.webhook, &ca)), 200);
    assert_eq!(read(&certs_dir.join("tls.crt")), tls);
    assert!(!s.log().contains("development CA"), "{}", s.log());
}

#[test]
fn serve_refuses_half_a_pair_and_no_certificate_in_a_pod() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("certs")).unwrap();
    std::fs::write(tmp.path().join("certs/tls.crt"), "x").unwrap();
    let out = run(
        tmp.path(),
        &["serve", "--cluster", "none", "--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"],
        &[],
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("certs/tls.crt exists but certs/tls.key does not")
            && out.stderr.contains("remove certs/tls.crt to have a development CA and certificate generated"),
        "{}",
        out.stderr
    );
    assert!(!tmp.path().join("certs/ca.crt").exists(), "nothing generated");

    std::fs::remove_file(tmp.path().join("certs/tls.crt")).unwrap();
    let pod = [("KUBERNETES_SERVICE_HOST", "10.0.0.1")];
    let out = run(
        tmp.path(),
        &["serve", "--cluster", "none", "--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"],
        &pod,
    );
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("inside a pod") && out.stderr.contains("--tls-mode managed"), "{}", out.stderr);
    assert!(!tmp.path().join("certs/tls.crt").exists(), "nothing generated in a pod");
}

#[test]
fn managed_mode_names_what_it_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "serve",
        "--tls-mode",
        "managed",
        "--cluster",
        "none",
        "--listen",
        "127.0.0.1:0",
        "--probe-listen",
        "127.0.0.1:0",
    ];
    let out = run(tmp.path(), &args, &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("POD_NAMESPACE") && out.stderr.contains("serviceaccount/namespace"), "{}", out.stderr);
    let out = run(tmp.path(), &args, &[("POD_NAMESPACE", "ha-guard")]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("needs the Kubernetes API") && out.stderr.contains("--tls-mode files"),
        "{}",
        out.stderr
    );
    let out = run(tmp.path(), &["serve", "--tls-mode", "managed", "--tls-cert-validity", "1s"], &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--tls-cert-validity") && out.stderr.contains("minimum of 10s"), "{}", out.stderr);
}

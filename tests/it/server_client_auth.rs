//! `serve --client-ca`: only callers presenting a certificate signed by the client CA are
//! answered; the others are refused in the TLS handshake (no HTTP status ever reaches them). The
//! CA file is re-read like the serving certificate. Without the flag, no certificate is asked for.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::server_support::{Pki, RawResponse, Server, VIEW, fixture, index, read_response, write_head};
use ha_guard::core::config::Config;
use ha_guard::core::view::StaticSource;
use ha_guard::server::certs::{self, Bundle};
use rstest::rstest;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A CA with a serving certificate for 127.0.0.1 and a client certificate named `client`.
fn bundle(client: &str) -> Bundle {
    certs::generate_with_client(&["localhost".into()], &["127.0.0.1".parse().unwrap()], Some(client)).unwrap()
}

/// The PEM of a client certificate and its key, as reqwest and rustls take them.
struct ClientId {
    cert_pem: String,
    key_pem: String,
}

fn client_id(b: &Bundle) -> ClientId {
    let c = b.client.as_ref().expect("a client certificate");
    ClientId { cert_pem: c.cert_pem.clone(), key_pem: c.key_pem.clone() }
}

/// A server for bundle `b`'s serving certificate whose client CA file (`client-ca.crt` in its
/// directory) holds `client_ca_pem`.
async fn server_requiring(b: &Bundle, client_ca_pem: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    certs::write(dir.path(), b).unwrap();
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, client_ca_pem).unwrap();
    let pki = Pki { ca_pem: b.ca_pem.clone(), cert: dir.path().join("tls.crt"), key: dir.path().join("tls.key") };
    Server::start_in(dir, pki, Arc::new(StaticSource(index(VIEW, false))), Config::default(), |o| {
        o.client_ca = Some(ca_file);
        o.reload_interval = Duration::from_millis(100);
    })
    .await
}

/// POST /validate with reqwest (HTTP/2 over TLS 1.3 against this server), presenting `id` if
/// given: `Ok(status)` when an HTTP answer came back, `Err(the error)` when none did.
async fn call(server: &Server, id: Option<&ClientId>) -> Result<u16, reqwest::Error> {
    call_with(server, id, reqwest::Client::builder()).await
}

/// [`call`] over TLS 1.2, where the client sees the refusal of its certificate as the handshake
/// failing. (Over TLS 1.3 the client's side of the handshake is over before the server checks the
/// certificate: the refusal arrives as an alert on the first read, and HTTP/2 passes it on as a
/// message only, or as the connection closing; [`raw`] checks that alert.)
async fn call_tls12(server: &Server, id: Option<&ClientId>) -> Result<u16, reqwest::Error> {
    call_with(server, id, reqwest::Client::builder().max_tls_version(reqwest::tls::Version::TLS_1_2)).await
}

async fn call_with(
    server: &Server,
    id: Option<&ClientId>,
    builder: reqwest::ClientBuilder,
) -> Result<u16, reqwest::Error> {
    let mut builder = builder
        .use_rustls_tls()
        .timeout(Duration::from_secs(30))
        .add_root_certificate(reqwest::Certificate::from_pem(server.ca_pem.as_bytes()).unwrap());
    if let Some(id) = id {
        let pem = format!("{}{}", id.cert_pem, id.key_pem);
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("client identity"));
    }
    let body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    let response = builder
        .build()
        .unwrap()
        .post(server.url("/validate"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    Ok(response.status().as_u16())
}

/// The rustls error somewhere in `e`'s chain (an `io::Error` hides its inner error from
/// `source()`, so it is unwrapped by hand).
fn tls_error_in(e: &(dyn std::error::Error + 'static)) -> Option<rustls::Error> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return Some(t.clone());
        }
        next = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// Records whether the server asked for a client certificate (and which CAs it named), and
/// presents `id` if it has one.
#[derive(Debug)]
struct Recorder {
    asked: AtomicBool,
    hints: Mutex<Vec<Vec<u8>>>,
    key: Option<Arc<rustls::sign::CertifiedKey>>,
}

impl rustls::client::ResolvesClientCert for Recorder {
    fn resolve(&self, hints: &[&[u8]], _: &[rustls::SignatureScheme]) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.asked.store(true, Ordering::SeqCst);
        self.hints.lock().unwrap().extend(hints.iter().map(|h| h.to_vec()));
        self.key.clone()
    }
    fn has_certs(&self) -> bool {
        self.key.is_some()
    }
}

fn recorder(id: Option<&ClientId>) -> Arc<Recorder> {
    let provider = rustls::crypto::ring::default_provider();
    let key = id.map(|id| {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(id.cert_pem.as_bytes()).collect::<Result<_, _>>().unwrap();
        let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap();
        Arc::new(rustls::sign::CertifiedKey::from_der(certs, key, &provider).unwrap())
    });
    Arc::new(Recorder { asked: AtomicBool::new(false), hints: Mutex::new(Vec::new()), key })
}

/// One request by hand over rustls limited to `version`: the response, or the TLS error that
/// ended the connection (any other I/O error fails the test).
fn raw_call(
    addr: SocketAddr,
    ca_pem: &str,
    version: &'static rustls::SupportedProtocolVersion,
    resolver: Arc<Recorder>,
) -> Result<RawResponse, rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    let body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    let exchange = (|| {
        write_head(&mut stream, "/validate", body.len())?;
        stream.write_all(&body)?;
        stream.flush()?;
        read_response(&mut stream)
    })();
    exchange.map_err(|e| {
        if let Some(tls) = tls_error_in(&e) {
            return tls;
        }
        // The server closed the connection while the request was being written (over TLS 1.3
        // the client's handshake is over first): what it sent before closing is still to be read.
        let (conn, sock) = (&mut stream.conn, &mut stream.sock);
        loop {
            match conn.read_tls(sock) {
                Ok(0) | Err(_) => panic!("not a TLS error, and no alert from the server: {e:?}"),
                Ok(_) => {
                    if let Err(tls) = conn.process_new_packets() {
                        return tls;
                    }
                }
            }
        }
    })
}

/// Asserts that a caller presenting `id` is refused in the TLS handshake, with TLS 1.2 (reqwest:
/// a connect error caused by a TLS alert, no HTTP status) and TLS 1.3 and 1.2 by hand (the
/// server's alert ends the connection).
async fn assert_refused(server: &Server, id: Option<&ClientId>, what: &str) {
    match call_tls12(server, id).await {
        Ok(status) => panic!("{what}: answered with HTTP {status}"),
        Err(e) => {
            assert!(e.status().is_none() && e.is_connect(), "{what}: not a connection failure: {e:?}");
            let tls = tls_error_in(&e).unwrap_or_else(|| panic!("{what}: not a TLS error: {e:?}"));
            assert!(matches!(tls, rustls::Error::AlertReceived(_)), "{what}: {tls:?}");
        }
    }
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let e = raw(server, version, recorder(id)).await.expect_err("refused");
        assert!(matches!(e, rustls::Error::AlertReceived(_)), "{what} over {version:?}: the server's alert, got {e:?}");
    }
    // And with the default client (HTTP/2 over TLS 1.3): no HTTP status either.
    let e = call(server, id).await.expect_err("refused");
    assert!(e.status().is_none(), "{what}: {e:?}");
}

async fn raw(
    server: &Server,
    version: &'static rustls::SupportedProtocolVersion,
    resolver: Arc<Recorder>,
) -> Result<RawResponse, rustls::Error> {
    let (addr, ca) = (server.addr, server.ca_pem.clone());
    tokio::task::spawn_blocking(move || raw_call(addr, &ca, version, resolver)).await.unwrap()
}

fn handshake_failures(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("ha_guard_tls_handshake_failures_total "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no ha_guard_tls_handshake_failures_total in\n{metrics}"))
}

async fn eventually(limit: Duration, what: &str, mut f: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_client_with_a_certificate_from_the_client_ca_is_answered() {
    let b = bundle("kube-apiserver");
    let server = server_requiring(&b, &b.ca_pem).await;
    assert_eq!(call(&server, Some(&client_id(&b))).await.expect("answered"), 200);
    // The review itself is answered as usual.
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let rec = recorder(Some(&client_id(&b)));
        let response = raw(&server, version, rec.clone()).await.expect("answered");
        assert_eq!(response.status, 200, "{response:?}");
        assert!(response.body.contains(r#""allowed":true"#), "{response:?}");
        assert!(rec.asked.load(Ordering::SeqCst), "the server asked for a client certificate");
        let hints = rec.hints.lock().unwrap();
        assert!(
            hints.iter().any(|h| h.windows(b"ha-guard CA".len()).any(|w| w == b"ha-guard CA")),
            "the server names the client CA it accepts"
        );
    }
}

#[derive(Debug, Clone, Copy)]
enum Caller {
    /// Presents no certificate.
    NoCertificate,
    /// Presents a client certificate signed by another CA.
    OtherCa,
    /// Presents a certificate signed by the client CA but not for client authentication (the
    /// webhook's own serving certificate).
    ServingCertificate,
}

/// Refused in the handshake: reqwest gets an error carrying a rustls error, never an HTTP status;
/// over TLS 1.3 and 1.2 by hand, the connection ends in a TLS alert; the failure is counted.
#[rstest]
#[case::no_certificate(Caller::NoCertificate)]
#[case::certificate_from_another_ca(Caller::OtherCa)]
#[case::serving_certificate_of_the_right_ca(Caller::ServingCertificate)]
#[tokio::test]
async fn callers_without_an_accepted_certificate_are_refused_in_the_handshake(#[case] caller: Caller) {
    let b = bundle("kube-apiserver");
    let server = server_requiring(&b, &b.ca_pem).await;
    let other = bundle("kube-apiserver");
    let id = match caller {
        Caller::NoCertificate => None,
        Caller::OtherCa => Some(client_id(&other)),
        Caller::ServingCertificate => Some(ClientId { cert_pem: b.cert_pem.clone(), key_pem: b.key_pem.clone() }),
    };

    let before = handshake_failures(&server.get_probe("/metrics").await.1);
    assert_refused(&server, id.as_ref(), &format!("{caller:?}")).await;
    // Counted on the server (the failed handshake is seen there just after the client's).
    eventually(Duration::from_secs(10), "the refused handshakes are counted", async || {
        handshake_failures(&server.get_probe("/metrics").await.1) >= before + 4
    })
    .await;

    // The right client is still answered.
    assert_eq!(call(&server, Some(&client_id(&b))).await.expect("answered"), 200);
}

/// Without `--client-ca` no certificate is asked for: a caller without one is answered, and one
/// with one is never asked for it.
#[tokio::test]
async fn without_client_ca_no_certificate_is_asked_for() {
    let server = Server::start().await;
    let b = bundle("kube-apiserver");
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let rec = recorder(Some(&client_id(&b)));
        let response = raw(&server, version, rec.clone()).await.expect("answered");
        assert_eq!(response.status, 200, "{response:?}");
        assert!(!rec.asked.load(Ordering::SeqCst), "{version:?}: a client certificate was asked for");
    }
    server.still_serving().await;
}

/// The client CA file is re-read while serving: after it changes from CA A to CA B, clients of B
/// are answered and clients of A refused, without a restart. A broken file keeps the CA in force
/// (it never falls back to answering everyone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_client_ca_takes_effect_without_restart() {
    let (a, b) = (bundle("apiserver-a"), bundle("apiserver-b"));
    let serving = bundle("unused");
    let server = server_requiring(&serving, &a.ca_pem).await;
    let ca_file = server.dir.path().join("client-ca.crt");
    let replace = |pem: &str| {
        let tmp = ca_file.with_extension("tmp");
        std::fs::write(&tmp, pem).unwrap();
        std::fs::rename(&tmp, &ca_file).unwrap();
    };
    assert_eq!(call(&server, Some(&client_id(&a))).await.expect("A is answered"), 200);
    assert_refused(&server, Some(&client_id(&b)), "B before the rotation").await;

    replace(&b.ca_pem);
    eventually(Duration::from_secs(15), "a client of CA B is answered", async || {
        call(&server, Some(&client_id(&b))).await.is_ok_and(|s| s == 200)
    })
    .await;
    assert_refused(&server, Some(&client_id(&a)), "A after the rotation").await;

    // A file that is not a CA (a Secret seen half-written, a bad edit): B stays in force.
    replace("not a certificate\n");
    eventually(Duration::from_secs(15), "the broken CA file is refused (and counted)", async || {
        server.get_probe("/metrics").await.1.contains(r#"ha_guard_tls_reloads_total{result="failure"} 1"#)
    })
    .await;
    assert_eq!(call(&server, Some(&client_id(&b))).await.expect("B is still answered"), 200);
    assert_refused(&server, None, "no certificate, with a broken CA file").await;
    assert_refused(&server, Some(&client_id(&a)), "A, with a broken CA file").await;

    // Both CAs in one bundle: both are answered.
    replace(&format!("{}{}", a.ca_pem, b.ca_pem));
    eventually(Duration::from_secs(15), "a client of CA A is answered again", async || {
        call(&server, Some(&client_id(&a))).await.is_ok_and(|s| s == 200)
    })
    .await;
    assert_eq!(call(&server, Some(&client_id(&b))).await.expect("B is answered"), 200);
}

/// `ha-guard certs --client NAME` writes client.crt / client.key beside the usual four files,
/// signed by the same CA: a webhook run with `--client-ca ca.crt` answers the caller presenting
/// them. Without `--client`, the output is the four files (the CA's key kept as ca.key).
#[tokio::test]
async fn certs_client_writes_a_client_certificate_the_webhook_accepts() {
    let run = |dir: &Path, extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ha-guard"))
            .args(["certs", "--out"])
            .arg(dir)
            .args(["--dns", "localhost", "--ip", "127.0.0.1"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = tempfile::tempdir().unwrap();
    let names =
        |dir: &Path, files: &[&str]| files.iter().map(|f| format!("{}\n", dir.join(f).display())).collect::<String>();
    assert_eq!(run(plain.path(), &[]), names(plain.path(), &["ca.crt", "ca.key", "tls.crt", "tls.key"]));
    assert!(!plain.path().join("client.crt").exists());

    let dir = tempfile::tempdir().unwrap();
    let stdout = run(dir.path(), &["--client", "kube-apiserver"]);
    assert_eq!(stdout, names(dir.path(), &["ca.crt", "ca.key", "tls.crt", "tls.key", "client.crt", "client.key"]));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("client.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "client.key is readable by its owner only: {mode:o}");
    }
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    let pki = Pki { ca_pem: read("ca.crt"), cert: dir.path().join("tls.crt"), key: dir.path().join("tls.key") };
    let ca_file = dir.path().join("ca.crt");
    let id = ClientId { cert_pem: read("client.crt"), key_pem: read("client.key") };
    let server = Server::start_in(dir, pki, Arc::new(StaticSource(index(VIEW, false))), Config::default(), |o| {
        o.client_ca = Some(ca_file);
    })
    .await;
    assert_eq!(call(&server, Some(&id)).await.expect("answered"), 200);
    assert_refused(&server, None, "no client certificate").await;
}

/// A client CA file that is missing, empty or not PEM stops `serve` at start with an error naming it.
#[rstest]
#[case::missing(None)]
#[case::empty(Some(""))]
#[case::not_pem(Some("not a certificate\n"))]
fn a_bad_client_ca_is_an_error_naming_the_file(#[case] content: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::server_support::pki(dir.path());
    let ca_file = dir.path().join("client-ca.crt");
    if let Some(c) = content {
        std::fs::write(&ca_file, c).unwrap();
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["serve", "--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0", "--cluster", "none"])
        .arg("--tls-cert")
        .arg(&pki.cert)
        .arg("--tls-key")
        .arg(&pki.key)
        .arg("--client-ca")
        .arg(&ca_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("client-ca.crt"), "{stderr}");
}

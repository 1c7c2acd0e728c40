//! Shared by the server tests (`tests/server_*.rs`): certificates, an in-process server on ports
//! chosen at run time, an HTTPS client trusting the generated CA, a raw TLS client for slow
//! uploads, fixtures and JSON Patch decoding.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ha_guard::core::config::Config;
use ha_guard::core::model::{self, Object};
use ha_guard::core::view::Index;
use ha_guard::core::view::{StaticSource, ViewSource};
use ha_guard::server::{self, AppState, Listeners, ServeOptions};
use serde_json::Value;

/// The deadline of the test servers (below their request timeout, 8 s); the deadline's own tests
/// set theirs ([`Server::start_admitting`]).
pub const TEST_DEADLINE: Duration = Duration::from_secs(6);

/// The cluster the tests' admission requests arrive in (namespace `shop`; `relaxed` is in warn
/// mode): `tests/fixtures/view.yaml`, which README's example serves too.
pub const VIEW: &str = include_str!("../fixtures/view.yaml");

/// A static view of the YAML documents in `yaml` (`complete`: the rules that assert absence run).
pub fn index(yaml: &str, complete: bool) -> Index {
    let mut index = Index::new();
    index.set_complete(complete);
    for doc in yaml.split("\n---\n").filter(|d| !d.trim().is_empty()) {
        let value: Value = serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("bad view YAML: {e}\n{doc}"));
        let object: Object = model::decode(&value, "default").expect("decodes").expect("a kind the engine knows");
        index.insert_object(&object);
    }
    index
}

/// A fixture from `tests/fixtures/`.
pub fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A CA and a serving certificate for 127.0.0.1 / localhost, written as `ca.crt`, `tls.crt`,
/// `tls.key` into `dir`.
pub struct Pki {
    pub ca_pem: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn pki(dir: &Path) -> Pki {
    let bundle = server::certs::generate(&["localhost".into()], &["127.0.0.1".parse().unwrap()]).expect("certificates");
    server::certs::write(dir, &bundle).expect("write certificates");
    Pki { ca_pem: bundle.ca_pem, cert: dir.join("tls.crt"), key: dir.join("tls.key") }
}

/// Options for an in-process server on `listeners`; short timeouts where a test waits on them.
pub fn options(listeners: &Listeners, pki: &Pki) -> ServeOptions {
    ServeOptions {
        listen: listeners.webhook_addr().unwrap(),
        probe_listen: listeners.probe_addr().unwrap(),
        tls_cert: pki.cert.clone(),
        tls_key: pki.key.clone(),
        config: None,
        reload_interval: Duration::from_millis(200),
        request_timeout: Duration::from_secs(8),
        shutdown_delay: Duration::ZERO,
        shutdown_timeout: Duration::from_secs(5),
        generate_dev_certs: false,
        ..ServeOptions::default()
    }
}

/// The real server, in-process, on 127.0.0.1 with ports chosen by the kernel.
pub struct Server {
    pub addr: SocketAddr,
    pub probe: SocketAddr,
    pub state: Arc<AppState>,
    pub ca_pem: String,
    pub dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), server::ServeError>>>,
    client: reqwest::Client,
}

impl Server {
    /// A server over [`VIEW`] with the default configuration.
    pub async fn start() -> Server {
        Server::start_with(Arc::new(StaticSource(index(VIEW, false))), Config::default(), |_| {}).await
    }

    pub async fn start_with(
        view: Arc<dyn ViewSource>,
        config: Config,
        tweak: impl FnOnce(&mut ServeOptions),
    ) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let pki = pki(dir.path());
        Server::start_in(dir, pki, view, config, tweak).await
    }

    /// A server over [`VIEW`] serving the certificate and key of `pki` (kept in `dir`). Its
    /// deadline is [`TEST_DEADLINE`]: this debug build decodes the multi-MiB bodies of the limit
    /// tests, on a machine running the other tests at once, slower than a release build would.
    pub async fn start_in(
        dir: tempfile::TempDir,
        pki: Pki,
        view: Arc<dyn ViewSource>,
        config: Config,
        tweak: impl FnOnce(&mut ServeOptions),
    ) -> Server {
        let admission = server::AdmissionSettings { deadline: TEST_DEADLINE, ..Default::default() };
        Server::start_admitting(dir, pki, view, config, admission, tweak).await
    }

    /// [`Server::start_in`] with the deadline and failure policy of admissions.
    pub async fn start_admitting(
        dir: tempfile::TempDir,
        pki: Pki,
        view: Arc<dyn ViewSource>,
        config: Config,
        admission: server::AdmissionSettings,
        tweak: impl FnOnce(&mut ServeOptions),
    ) -> Server {
        let listeners = Listeners::bind("127.0.0.1:0".parse().unwrap(), "127.0.0.1:0".parse().unwrap()).unwrap();
        let (addr, probe) = (listeners.webhook_addr().unwrap(), listeners.probe_addr().unwrap());
        let mut opts = options(&listeners, &pki);
        tweak(&mut opts);
        let state = AppState::with_settings(view, config, Duration::from_secs(60), admission);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server::serve_with_listeners(opts, listeners, state.clone(), async move {
            let _ = stopped.await;
        }));
        let client = client(&[&pki.ca_pem]);
        Server { addr, probe, state, ca_pem: pki.ca_pem, dir, stop: Some(stop), task: Some(task), client }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    pub fn probe_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.probe)
    }

    /// POSTs `body` to `path`: the HTTP status and the body.
    pub async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, String) {
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e:?}"));
        let status = response.status().as_u16();
        (status, response.text().await.expect("response body"))
    }

    /// POSTs an AdmissionReview and returns the review that comes back (HTTP 200 asserted).
    pub async fn review(&self, path: &str, review: &Value) -> Value {
        let (status, body) = self.post(path, serde_json::to_vec(review).unwrap()).await;
        assert_eq!(status, 200, "{path}: {body}");
        let out: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {body}"));
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1", "{out}");
        assert_eq!(out["kind"], "AdmissionReview", "{out}");
        assert_eq!(out["response"]["uid"], review["request"]["uid"], "the response echoes the request's uid: {out}");
        out
    }

    /// The `response` of the review for `fixture` at `path`.
    pub async fn respond(&self, path: &str, fixture_name: &str) -> Value {
        self.review(path, &fixture(fixture_name)).await["response"].clone()
    }

    /// A request that must succeed: the server is still serving.
    pub async fn still_serving(&self) {
        let r = self.respond("/validate", "deployment-spread-ok.json").await;
        assert_eq!(r["allowed"], true, "{r}");
    }

    pub async fn get_probe(&self, path: &str) -> (u16, String) {
        let response = reqwest::get(self.probe_url(path)).await.expect("probe");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    /// Stops the server (as on SIGTERM) and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = self.task.take().unwrap();
        let result = tokio::time::timeout(Duration::from_secs(20), task).await.expect("the server stops");
        result.expect("the server task").expect("the server returns Ok");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// An HTTPS client trusting only the given CAs (no built-in roots), with an upper bound per request.
pub fn client(ca_pems: &[&str]) -> reqwest::Client {
    let mut builder = reqwest::Client::builder().use_rustls_tls().timeout(Duration::from_secs(30));
    for pem in ca_pems {
        builder = builder.add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).expect("CA PEM"));
    }
    builder.build().expect("client")
}

/// The JSON Patch of an admission response, whether `patch` is a base64 string (what Go's
/// encoding/json writes for `[]byte`) or an array of byte values (what kube-rs writes; Go's
/// encoding/json decodes a JSON array of numbers into `[]byte` too). `None` when there is no patch.
pub fn patch_of(response: &Value) -> Option<json_patch::Patch> {
    let bytes = match response.get("patch")? {
        Value::Null => return None,
        Value::String(s) => base64_decode(s),
        Value::Array(items) => {
            items.iter().map(|b| u8::try_from(b.as_u64().expect("a byte")).expect("a byte")).collect()
        }
        other => panic!("patch is neither base64 nor bytes: {other}"),
    };
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    Some(
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("the patch is not a JSON Patch ({e}): {}", String::from_utf8_lossy(&bytes))),
    )
}

/// Standard base64 with padding.
pub fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a') as u32 + 26,
            b'0'..=b'9' => (c - b'0') as u32 + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c:?}"),
        }
    };
    let data: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in data.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c) << (18 - 6 * i);
        }
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

/// A blocking TLS connection trusting `ca_pem`, HTTP/1.1 only (for requests written by hand).
pub fn tls_connect(addr: SocketAddr, ca_pem: &str) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(Arc::new(config), name).expect("TLS client");
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    tcp.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// A response read by hand: the status and the body.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    pub body: String,
}

/// Writes the head of `POST path` with `Content-Length: len` and returns the stream.
pub fn write_head(stream: &mut impl Write, path: &str, len: usize) -> std::io::Result<()> {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes())?;
    stream.flush()
}

/// Reads one HTTP/1.1 response with a Content-Length (what the server sends).
pub fn read_response(stream: &mut impl Read) -> std::io::Result<RawResponse> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before the response head"));
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let status: u16 = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status line");
    let len: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    Ok(RawResponse { status, body: String::from_utf8_lossy(&body).to_string() })
}

/// Rule IDs of lines prefixed `[rule-id]`.
pub fn rule_ids<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut ids: Vec<String> = lines
        .into_iter()
        .map(|l| {
            assert!(l.starts_with('['), "not prefixed [rule-id]: {l}");
            l[1..l.find(']').unwrap_or_else(|| panic!("no ] in {l}"))].to_string()
        })
        .collect();
    ids.sort();
    ids
}

/// The `warnings` of a response, empty when there are none.
pub fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|w| w.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// A free port on 127.0.0.1 (bound, read and released: for the child process).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

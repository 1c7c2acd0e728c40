//! Overload: requests past `--max-concurrent-requests` or `--max-body-memory` get 503 at once (not
//! a queue), bodies holding too many JSON values are refused before decoding, connections past
//! `--max-connections` are closed at once, and a connection that never starts its TLS handshake
//! is closed after `--tls-handshake-timeout`; the server keeps serving throughout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::server_support::{Server, VIEW, client, fixture, index, read_response, tls_connect, write_head};
use ha_guard::core::config::Config;
use ha_guard::core::view::StaticSource;
use ha_guard::server::ServeOptions;
use ha_guard::server::review::{MAX_JSON_VALUES, count_values};
use serde_json::Value;

async fn server(tweak: impl FnOnce(&mut ServeOptions)) -> Server {
    Server::start_with(Arc::new(StaticSource(index(VIEW, false))), Config::default(), tweak).await
}

/// The value of the sample `name` (with its labels, as printed) on `/metrics`, 0 when absent.
async fn metric(server: &Server, name: &str) -> f64 {
    let (_, text) = server.get_probe("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

async fn eventually(limit: Duration, what: &str, mut f: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An upload that sends its head and half its body, then waits for `go` before sending the rest.
fn slow_upload(
    server: &Server,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<crate::server_support::RawResponse>>) {
    slow_upload_of(server, serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap())
}

fn slow_upload_of(
    server: &Server,
    body: Vec<u8>,
) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<crate::server_support::RawResponse>>) {
    let (addr, ca) = (server.addr, server.ca_pem.clone());
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::task::spawn_blocking(move || {
        let mut stream = tls_connect(addr, &ca);
        write_head(&mut stream, "/validate", body.len())?;
        let half = body.len() / 2;
        stream.write_all(&body[..half])?;
        stream.flush()?;
        let _ = go_rx.blocking_recv();
        stream.write_all(&body[half..])?;
        stream.flush()?;
        read_response(&mut stream)
    });
    (go_tx, task)
}

/// Two uploads hold both request slots; a third request is answered 503 with a one-line JSON
/// error while they are still in flight (it does not wait for a slot), and is counted. Once the
/// uploads finish they are answered 200, and requests succeed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_request_limit_a_request_gets_503_at_once_and_service_resumes() {
    // A request timeout far beyond the test's own bounds: nothing here is cut off by it.
    let server = server(|o| {
        o.max_concurrent_requests = 2;
        o.request_timeout = Duration::from_secs(600);
    })
    .await;
    let (go_a, upload_a) = slow_upload(&server);
    let (go_b, upload_b) = slow_upload(&server);
    eventually(Duration::from_secs(30), "both uploads hold a request slot", async || {
        metric(&server, "ha_guard_requests_in_flight").await == 2.0
    })
    .await;

    for path in ["/validate", "/mutate"] {
        let (status, body) =
            server.post(path, serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap()).await;
        assert_eq!(status, 503, "{path}: {body}");
        assert!(body.ends_with('\n') && !body.trim_end().contains('\n'), "one line: {body:?}");
        let error: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not a JSON error ({e}): {body}"));
        let error = error["error"].as_str().expect("an error field");
        assert!(error.contains("overloaded") && error.contains("--max-concurrent-requests"), "{error}");
    }
    // The refusals were answered while both uploads were still waiting on the test.
    assert!(!upload_a.is_finished() && !upload_b.is_finished());
    assert_eq!(metric(&server, "ha_guard_requests_in_flight").await, 2.0);
    assert_eq!(metric(&server, r#"ha_guard_rejected_total{reason="max-concurrent-requests"}"#).await, 2.0);
    // The probes are not limited.
    assert_eq!(server.get_probe("/readyz").await.0, 200);

    go_a.send(()).unwrap();
    go_b.send(()).unwrap();
    for upload in [upload_a, upload_b] {
        let response = tokio::time::timeout(Duration::from_secs(30), upload)
            .await
            .expect("answered")
            .unwrap()
            .expect("a response");
        assert_eq!(response.status, 200, "{response:?}");
        assert!(response.body.contains(r#""allowed":true"#), "{response:?}");
    }
    eventually(Duration::from_secs(30), "the slots are given back", async || {
        metric(&server, "ha_guard_requests_in_flight").await == 0.0
    })
    .await;
    server.still_serving().await;
    server.still_serving().await;
}

/// A review padded with spaces to `len` bytes.
fn padded_review(len: usize) -> Vec<u8> {
    let mut body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    assert!(body.len() <= len);
    body.resize(len, b' ');
    body
}

/// Bodies are weighed by their length: with 8 MiB of body memory and a 6 MiB upload in flight, a
/// 3 MiB request gets 503 while a small one is answered; once the upload is done, the 3 MiB one is
/// answered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_body_memory_a_large_request_gets_503_and_small_ones_are_answered() {
    const MIB: usize = 1024 * 1024;
    let server = server(|o| {
        o.max_body_memory = 8 * MIB;
        o.request_timeout = Duration::from_secs(600);
    })
    .await;
    let (go, upload) = slow_upload_of(&server, padded_review(6 * MIB));
    eventually(Duration::from_secs(30), "the upload is in flight", async || {
        metric(&server, "ha_guard_requests_in_flight").await == 1.0
    })
    .await;

    let (status, body) = server.post("/validate", padded_review(3 * MIB)).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("--max-body-memory"), "{body}");
    assert_eq!(metric(&server, r#"ha_guard_rejected_total{reason="max-body-memory"}"#).await, 1.0);
    server.still_serving().await;
    assert!(!upload.is_finished());

    go.send(()).unwrap();
    let response =
        tokio::time::timeout(Duration::from_secs(60), upload).await.expect("answered").unwrap().expect("a response");
    assert_eq!(response.status, 200, "{response:?}");
    eventually(Duration::from_secs(30), "the upload's share is given back", async || {
        metric(&server, "ha_guard_requests_in_flight").await == 0.0
    })
    .await;
    let (status, body) = server.post("/validate", padded_review(3 * MIB)).await;
    assert_eq!(status, 200, "{body}");
}

/// A review whose container has `args` empty strings.
fn review_with_args(args: usize) -> Vec<u8> {
    let mut review = fixture("deployment-spread-ok.json");
    review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["args"] =
        Value::Array(vec![Value::from(""); args]);
    serde_json::to_vec(&review).unwrap()
}

/// A body of more JSON values than the limit (here 8 MiB of `"",`: 2.8 million values) is refused
/// with 400 before it is decoded; one at the limit is answered, and several at the limit sent at
/// once are all answered (they wait for their turn to decode rather than being refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_value_limit_are_refused_and_those_at_it_are_answered() {
    let server = server(|_| {}).await;
    let base = count_values(&review_with_args(1));
    let at_limit = review_with_args(MAX_JSON_VALUES - base + 1);
    assert_eq!(count_values(&at_limit), MAX_JSON_VALUES);
    let over = review_with_args(MAX_JSON_VALUES - base + 2);
    let flood = review_with_args((ha_guard::server::MAX_BODY_BYTES - 2000) / 3);
    assert!(flood.len() <= ha_guard::server::MAX_BODY_BYTES);

    for body in [over, flood] {
        let (status, text) = server.post("/validate", body).await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains(&format!("more than {MAX_JSON_VALUES} JSON values")), "{text}");
        assert!(!text.trim_end().contains('\n'), "one line: {text}");
    }
    let sends = (0..6).map(|_| server.post("/validate", at_limit.clone()));
    for (status, text) in futures::future::join_all(sends).await {
        assert_eq!(status, 200, "{}", &text[..text.len().min(500)]);
    }
    server.still_serving().await;
}

/// An upload whose client goes away mid-body gives its slot back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_slot_is_given_back_when_its_client_goes_away() {
    let server = server(|o| {
        o.max_concurrent_requests = 1;
        o.request_timeout = Duration::from_secs(600);
    })
    .await;
    let (addr, ca) = (server.addr, server.ca_pem.clone());
    let stream = tokio::task::spawn_blocking(move || {
        let mut stream = tls_connect(addr, &ca);
        write_head(&mut stream, "/validate", 1000).unwrap();
        stream.write_all(b"{").unwrap();
        stream.flush().unwrap();
        stream
    })
    .await
    .unwrap();
    eventually(Duration::from_secs(30), "the upload holds the slot", async || {
        metric(&server, "ha_guard_requests_in_flight").await == 1.0
    })
    .await;
    assert_eq!(server.post("/validate", b"{}".to_vec()).await.0, 503);
    stream.sock.shutdown(std::net::Shutdown::Both).unwrap();
    drop(stream);
    eventually(Duration::from_secs(30), "the slot is given back", async || {
        metric(&server, "ha_guard_requests_in_flight").await == 0.0
    })
    .await;
    server.still_serving().await;
}

/// A TCP connection that never sends a ClientHello is closed by the server after the handshake
/// timeout (the read below ends with the server's close, not with its own 30 s timeout), and
/// the server answers others meanwhile. The failed handshake is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_sends_a_client_hello_is_closed_after_the_handshake_timeout() {
    let server = server(|o| o.tls_handshake_timeout = Duration::from_secs(1)).await;
    let addr = server.addr;
    let (connected_tx, connected_rx) = tokio::sync::oneshot::channel();
    let silent = tokio::task::spawn_blocking(move || {
        let mut tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = connected_tx.send(());
        let mut buf = [0u8; 64];
        tcp.read(&mut buf)
    });
    connected_rx.await.unwrap();
    server.still_serving().await;
    let outcome = tokio::time::timeout(Duration::from_secs(60), silent).await.expect("ended").unwrap();
    match outcome {
        Ok(n) => assert_eq!(n, 0, "the server sent {n} bytes to a client that said nothing"),
        Err(e) => assert!(
            !matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock),
            "the server did not close the connection: {e}"
        ),
    }
    assert!(metric(&server, "ha_guard_tls_handshake_failures_total").await >= 1.0);
    server.still_serving().await;
}

/// With `--max-connections 2` and two connections open, a third is closed at once, before its
/// handshake (no HTTP status reaches it); once one of the two closes, new connections are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_limit_a_connection_is_closed_at_once() {
    let server = server(|o| {
        o.max_connections = 2;
        o.request_timeout = Duration::from_secs(600);
    })
    .await;
    let (addr, ca) = (server.addr, server.ca_pem.clone());
    // Two connections with their handshakes done (so each holds a slot), idle.
    let held = tokio::task::spawn_blocking(move || {
        (0..2)
            .map(|_| {
                let mut s = tls_connect(addr, &ca);
                while s.conn.is_handshaking() {
                    s.conn.complete_io(&mut s.sock).expect("handshake");
                }
                s
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();

    // A new client (a new connection) is refused at the TLS layer.
    let body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    let e =
        client(&[&server.ca_pem]).post(server.url("/validate")).body(body.clone()).send().await.expect_err("refused");
    assert!(e.status().is_none() && e.is_connect(), "{e:?}");
    // Counted by the accept loop as it closes the connection: the client may see the close first.
    eventually(Duration::from_secs(10), "the refused connection is counted", async || {
        metric(&server, r#"ha_guard_rejected_total{reason="max-connections"}"#).await == 1.0
    })
    .await;

    drop(held);
    eventually(Duration::from_secs(30), "a new connection is served once the held ones closed", async || {
        let fresh = client(&[&server.ca_pem]);
        matches!(fresh.post(server.url("/validate")).body(body.clone()).send().await, Ok(r) if r.status() == 200)
    })
    .await;
}

/// The limits must be at least 1 (and the body memory at least one body at the limit, 8 MiB).
#[test]
fn zero_limits_are_refused_by_serve() {
    for flag in ["--max-concurrent-requests", "--max-connections", "--max-body-memory"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ha-guard"))
            .args(["serve", "--cluster", "none", flag, "0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(flag), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

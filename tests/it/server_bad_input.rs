//! Bodies that are not usable AdmissionReviews: the HTTP status, a one-line JSON error, and a
//! server that keeps serving afterwards.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use crate::server_support::{Server, VIEW, fixture, index, read_response, tls_connect, write_head};
use ha_guard::core::config::Config;
use ha_guard::core::view::StaticSource;
use ha_guard::server::MAX_BODY_BYTES;
use rstest::rstest;
use serde_json::{Value, json};

fn review_with(edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v = fixture("deployment-spread-ok.json");
    edit(&mut v);
    serde_json::to_vec(&v).unwrap()
}

fn deep_nesting(depth: usize) -> Vec<u8> {
    let mut body = vec![b'['; depth];
    body.extend(std::iter::repeat_n(b']', depth));
    body
}

#[rstest]
#[case::not_json(b"this is not JSON".to_vec(), 400, "body is not JSON")]
#[case::empty_body(Vec::new(), 400, "body is not JSON")]
#[case::truncated_json(br#"{"apiVersion": "admission.k8s.io/v1", "kind": "Admissi"#.to_vec(), 400, "body is not JSON")]
#[case::empty_object(b"{}".to_vec(), 400, "expected an AdmissionReview of apiVersion admission.k8s.io/v1")]
#[case::a_json_array(b"[1, 2, 3]".to_vec(), 400, "expected an AdmissionReview")]
#[case::wrong_api_version(
    review_with(|v| v["apiVersion"] = json!("admission.k8s.io/v1beta1")),
    400,
    r#"apiVersion "admission.k8s.io/v1beta1""#
)]
#[case::wrong_kind(review_with(|v| v["kind"] = json!("ConfigMap")), 400, r#"got kind "ConfigMap""#)]
#[case::missing_request(
    br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#.to_vec(),
    400,
    "the AdmissionReview has no request"
)]
#[case::null_request(review_with(|v| v["request"] = Value::Null), 400, "the AdmissionReview has no request")]
#[case::request_of_the_wrong_shape(review_with(|v| v["request"]["uid"] = json!(42)), 400, "not a usable AdmissionReview")]
#[case::request_without_uid(
    review_with(|v| { v["request"].as_object_mut().unwrap().remove("uid"); }),
    400,
    "not a usable AdmissionReview"
)]
#[case::deployment_replicas_not_a_number(
    serde_json::to_vec(&fixture("deployment-replicas-not-a-number.json")).unwrap(),
    400,
    r#"request.object: Deployment does not decode: spec.replicas: expected an integer, got the string "three""#
)]
#[case::scale_replicas_not_a_number(
    { let mut v = fixture("scale-deployment-to-one.json"); v["request"]["object"]["spec"]["replicas"] = json!("one"); serde_json::to_vec(&v).unwrap() },
    400,
    "spec.replicas of the Scale is not an integer"
)]
#[case::nesting_100_000_deep(deep_nesting(100_000), 400, "recursion limit exceeded")]
#[case::over_the_body_limit(vec![b' '; MAX_BODY_BYTES + 1], 413, "over the limit of 8388608 bytes")]
#[tokio::test]
async fn bad_bodies(#[case] body: Vec<u8>, #[case] status: u16, #[case] message: &str) {
    let server = Server::start().await;
    for path in ["/validate", "/mutate"] {
        let (got, text) = server.post(path, body.clone()).await;
        assert_eq!(got, status, "{path}: {text}");
        assert!(text.ends_with('\n') && !text.trim_end().contains('\n'), "one line: {text:?}");
        let error: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not a JSON error ({e}): {text}"));
        let error = error["error"].as_str().unwrap_or_else(|| panic!("no error field: {text}"));
        assert!(error.contains(message), "{path}: {error:?} does not contain {message:?}");
        server.still_serving().await;
    }
}

/// A body at the limit exactly is read (and refused for what it is, not for its size).
#[tokio::test]
async fn a_body_at_the_limit_is_read() {
    let server = Server::start().await;
    let (status, text) = server.post("/validate", vec![b' '; MAX_BODY_BYTES]).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("body is not JSON"), "{text}");
    // A real review padded to the limit with whitespace is answered.
    let mut body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    body.resize(MAX_BODY_BYTES, b' ');
    let (status, text) = server.post("/validate", body).await;
    assert_eq!(status, 200, "{text}");
    server.still_serving().await;
}

/// A request that declares a body past the limit is answered 413 at once, before any of its body
/// is sent: not after the request timeout (408), which is what reading it first would take with a
/// client that sends slowly or not at all. The body memory it would have claimed is not taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_oversize_body_gets_413_before_it_is_read() {
    let server = Server::start_with(Arc::new(StaticSource(index(VIEW, false))), Config::default(), |o| {
        o.request_timeout = Duration::from_secs(60);
    })
    .await;
    for (path, declared) in [("/validate", MAX_BODY_BYTES + 1), ("/mutate", 1 << 40)] {
        let (addr, ca) = (server.addr, server.ca_pem.clone());
        let started = std::time::Instant::now();
        let answered = tokio::task::spawn_blocking(move || {
            let mut stream = tls_connect(addr, &ca);
            write_head(&mut stream, path, declared)?;
            stream.write_all(b"{")?;
            stream.flush()?;
            read_response(&mut stream)
        });
        let response = tokio::time::timeout(Duration::from_secs(10), answered)
            .await
            .expect("answered within 10 s, not after the 60 s request timeout")
            .unwrap()
            .expect("a response");
        assert_eq!(response.status, 413, "{path}: {response:?}");
        assert!(
            response.body.contains(&format!("declares a body of {declared} bytes"))
                && response.body.contains("over the limit of 8388608 bytes"),
            "{}",
            response.body
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{path}: answered after {:?}", started.elapsed());
    }
    let (_, metrics) = server.get_probe("/metrics").await;
    assert!(metrics.contains("ha_guard_requests_in_flight 0"), "{metrics}");
    server.still_serving().await;
}

#[tokio::test]
async fn wrong_method_and_path() {
    let server = Server::start().await;
    let (status, _) = server.post("/nope", b"{}".to_vec()).await;
    assert_eq!(status, 404);
    let response = crate::server_support::client(&[&server.ca_pem]).get(server.url("/validate")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    server.still_serving().await;
}

fn slow_server() -> impl std::future::Future<Output = Server> {
    Server::start_with(Arc::new(StaticSource(index(VIEW, false))), Config::default(), |o| {
        o.request_timeout = Duration::from_secs(1);
    })
}

/// Headers, one byte of the body, then nothing for longer than the request timeout: the client
/// gets a 408, and the server answers other clients meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_gets_408_and_others_are_served_meanwhile() {
    let server = slow_server().await;
    let (addr, ca) = (server.addr, server.ca_pem.clone());
    let body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let slow = tokio::task::spawn_blocking(move || {
        let mut stream = tls_connect(addr, &ca);
        write_head(&mut stream, "/validate", body.len())?;
        stream.write_all(&body[..1])?;
        stream.flush()?;
        let _ = started_tx.send(());
        read_response(&mut stream)
    });
    started_rx.await.expect("the slow client started");
    // While it stalls, another client is answered.
    server.still_serving().await;
    let response =
        tokio::time::timeout(Duration::from_secs(30), slow).await.expect("answered").unwrap().expect("a response");
    assert_eq!(response.status, 408, "{response:?}");
    server.still_serving().await;
}

/// A body dribbled in small pieces, each within the timeout but all of it taking longer: the
/// timeout bounds the whole request, so it is not answered 200 (408, or the connection is closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dribbled_body_is_cut_off_by_the_request_timeout() {
    let server = slow_server().await;
    let (addr, ca) = (server.addr, server.ca_pem.clone());
    let body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let slow = tokio::task::spawn_blocking(move || {
        let mut stream = tls_connect(addr, &ca);
        write_head(&mut stream, "/validate", body.len())?;
        let _ = started_tx.send(());
        // 30 pieces, 100 ms apart: 3 s for the whole body, against a 1 s timeout.
        let size = body.len().div_ceil(30);
        for piece in body.chunks(size) {
            std::thread::sleep(Duration::from_millis(100));
            if stream.write_all(piece).and_then(|_| stream.flush()).is_err() {
                break; // the server gave up on us; read what it said
            }
        }
        read_response(&mut stream)
    });
    started_rx.await.expect("the slow client started");
    server.still_serving().await;
    let outcome = tokio::time::timeout(Duration::from_secs(30), slow).await.expect("answered").unwrap();
    match outcome {
        Ok(response) => assert_eq!(response.status, 408, "{response:?}"),
        Err(e) => eprintln!("connection closed by the server: {e}"),
    }
    server.still_serving().await;
}

/// A connection that sends part of its headers and stalls is closed after the request timeout
/// (without it, the read below would wait for its own 30 s timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_headers_are_cut_off() {
    let server = slow_server().await;
    let (addr, ca) = (server.addr, server.ca_pem.clone());
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let stalled = tokio::task::spawn_blocking(move || {
        let mut stream = tls_connect(addr, &ca);
        stream.write_all(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Ty")?;
        stream.flush()?;
        let _ = started_tx.send(());
        read_response(&mut stream)
    });
    started_rx.await.expect("the stalled client started");
    server.still_serving().await;
    let outcome = tokio::time::timeout(Duration::from_secs(60), stalled).await.expect("ended").unwrap();
    match outcome {
        Ok(response) => panic!("a response to half a request: {response:?}"),
        Err(e) => assert!(
            !matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock),
            "the server did not close the connection: {e}"
        ),
    }
    server.still_serving().await;
}

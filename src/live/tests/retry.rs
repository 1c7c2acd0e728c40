use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::core::view::ViewSource;
use crate::live::{KINDS, LiveSource};
use crate::server::log_format::LogBuffer as Captured;

fn policy(first_ms: u64, max_ms: u64, reset_ms: u64) -> RetryPolicy {
    RetryPolicy {
        first: Duration::from_millis(first_ms),
        max: Duration::from_millis(max_ms),
        jitter: false,
        reset_after: Duration::from_millis(reset_ms),
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

#[tokio::test]
async fn the_delay_doubles_to_its_cap_and_only_the_first_failure_is_a_change() {
    let mut h = WatchHealth::new(policy(100, 1000, 60_000));
    let mut delays = Vec::new();
    for i in 0..7 {
        let (delay, change) = h.failed();
        delays.push(ms(delay));
        if i == 0 {
            assert_eq!(change, Some(Change::Failing { attempt: 1, retry_in: delay }));
        } else {
            assert_eq!(change, None, "attempt {}: no new line while still failing", i + 1);
        }
    }
    assert_eq!(delays, [100, 200, 400, 800, 1000, 1000, 1000]);
    match h.progressed() {
        Some(Change::Recovered { attempts: 7, .. }) => {}
        other => panic!("expected Recovered after 7 attempts, got {other:?}"),
    }
    assert_eq!(h.progressed(), None, "progress while healthy is no change");
}

#[tokio::test]
async fn a_watch_that_recovers_and_fails_at_once_keeps_backing_off() {
    // A list that works and a watch that fails right after: each cycle is a change (one line
    // each way), but the delay keeps growing instead of starting over at every list.
    let mut h = WatchHealth::new(policy(100, 1000, 60_000));
    let mut delays = Vec::new();
    for _ in 0..5 {
        let (delay, change) = h.failed();
        assert!(matches!(change, Some(Change::Failing { attempt: 1, .. })), "{change:?}");
        delays.push(ms(delay));
        assert!(matches!(h.progressed(), Some(Change::Recovered { attempts: 1, .. })));
    }
    assert_eq!(delays, [100, 200, 400, 800, 1000]);
}

#[tokio::test]
async fn the_schedule_starts_over_after_staying_healthy() {
    let mut h = WatchHealth::new(policy(100, 1000, 50));
    for _ in 0..4 {
        h.failed();
    }
    h.progressed();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let (delay, change) = h.failed();
    assert_eq!(ms(delay), 100, "healthy longer than reset_after: from the first delay again");
    assert_eq!(change, Some(Change::Failing { attempt: 1, retry_in: delay }));
}

#[tokio::test]
async fn the_default_is_client_gos_schedule_capped_with_jitter() {
    let p = RetryPolicy::default();
    assert_eq!((ms(p.first), ms(p.max), p.jitter), (800, 30_000, true));
    let mut h = WatchHealth::new(p);
    let delays: Vec<u64> = (0..20).map(|_| ms(h.failed().0)).collect();
    // Jitter adds up to the delay itself: 0.8 s..1.6 s first, never past 60 s.
    assert!((800..1600).contains(&delays[0]), "{delays:?}");
    assert!(delays.iter().all(|d| *d <= 60_000), "{delays:?}");
    assert!(delays[10..].iter().all(|d| *d >= 30_000), "capped at 30 s before jitter: {delays:?}");
}

// --- against a loopback apiserver that answers errors ----------------------------------------

/// The fake apiserver: 500 for everything while `failing`; then an empty list for a list and a
/// watch that stays open with nothing to say. Records when each path was asked for.
#[derive(Clone, Default)]
struct Fake {
    failing: Arc<AtomicBool>,
    /// Only the watches fail (the lists work).
    failing_watches: Arc<AtomicBool>,
    /// KEDA's CRD is not installed: 404 for its paths (once the apiserver answers at all).
    no_keda: Arc<AtomicBool>,
    asked: Arc<Mutex<BTreeMap<String, Vec<tokio::time::Instant>>>>,
}

async fn fake_apiserver(fake: Fake) -> std::net::SocketAddr {
    use axum::body::Body;
    use axum::http::{StatusCode, Uri};
    use axum::response::IntoResponse;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move |uri: Uri| {
        let fake = fake.clone();
        async move {
            let watch = uri.query().unwrap_or_default().contains("watch=true");
            if !watch {
                fake.asked.lock().unwrap().entry(uri.path().to_string()).or_default().push(tokio::time::Instant::now());
            }
            let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
            if fake.failing.load(Ordering::SeqCst) || (watch && fake.failing_watches.load(Ordering::SeqCst)) {
                let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcdserver: request timed out","reason":"InternalError","code":500}"#;
                (StatusCode::INTERNAL_SERVER_ERROR, json, status).into_response()
            } else if fake.no_keda.load(Ordering::SeqCst) && uri.path().starts_with("/apis/keda.sh/") {
                let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#;
                (StatusCode::NOT_FOUND, json, status).into_response()
            } else if watch {
                let open = futures::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
                (StatusCode::OK, json, Body::from_stream(open)).into_response()
            } else {
                let list = r#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"7"},"items":[]}"#;
                (StatusCode::OK, json, list).into_response()
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// Log lines written on this thread, from now until the guard is dropped.
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

/// Lists work, watches fail, then work again, in kinds where nothing happens (no event would
/// tell): the recovery is seen all the same, because a failed watcher is made anew and lists.
#[test]
fn a_watch_that_comes_back_in_a_quiet_kind_is_seen_to_recover() {
    let (captured, _guard) = capture();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let fake = Fake::default();
        fake.failing_watches.store(true, Ordering::SeqCst);
        let addr = fake_apiserver(fake.clone()).await;
        let client = kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap();
        let live = Arc::new(LiveSource::with_retry(policy(20, 200, 60_000)));
        live.start(client);
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(live.synced(), "the lists worked");
        let failing = captured.lines_with("watch failing").len();
        assert!(failing >= KINDS.len(), "each kind's watch failed: {failing}");
        fake.failing_watches.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let (failing, recovered) =
            (captured.lines_with("watch failing").len(), captured.lines_with("watch recovered").len());
        assert_eq!(failing, recovered, "every failure was followed by its recovery");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(captured.lines_with("watch failing").len(), failing, "and stays healthy");
    });
}

/// Against an apiserver that answers 500: one WARN line per kind however long it lasts, retries
/// spaced out more and more, then one INFO line per kind when it answers again.
#[test]
fn against_an_apiserver_answering_errors_one_line_per_kind_and_state_change() {
    let (captured, _guard) = capture();
    // One thread: every task (the watchers, the fake) logs through the subscriber set here.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let fake = Fake::default();
        fake.failing.store(true, Ordering::SeqCst);
        let addr = fake_apiserver(fake.clone()).await;
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let live = Arc::new(LiveSource::with_retry(policy(20, 200, 60_000)));
        live.start(client);

        tokio::time::sleep(Duration::from_millis(1600)).await;
        let failing = captured.lines_with("watch failing");
        assert_eq!(failing.len(), KINDS.len(), "one WARN per kind, not one per attempt:\n{}", failing.join("\n"));
        for kind in KINDS {
            assert_eq!(
                failing.iter().filter(|l| l.contains(&format!("kind={kind} "))).count(),
                1,
                "{kind}: {failing:?}"
            );
        }
        assert!(failing.iter().all(|l| l.contains("WARN") && l.contains("attempt=1") && l.contains("retry_in_ms=20")));
        {
            let asked = fake.asked.lock().unwrap();
            assert_eq!(asked.len(), KINDS.len(), "every kind's list was tried: {:?}", asked.keys());
            for (path, times) in asked.iter() {
                // 20, 40, 80, 160, 200, 200 ... ms: about ten attempts in 1.6 s, not hundreds.
                assert!((5..=14).contains(&times.len()), "{path}: {} attempts", times.len());
                let gaps: Vec<u128> = times.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
                assert!(gaps[0] < 100 && *gaps.last().unwrap() >= 180, "{path}: the delay grows: {gaps:?} ms");
            }
        }
        assert!(!live.synced());

        fake.failing.store(false, Ordering::SeqCst);
        let started = tokio::time::Instant::now();
        while !live.synced() {
            assert!(started.elapsed() < Duration::from_secs(5), "the view syncs once the apiserver answers");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let recovered = captured.lines_with("watch recovered");
        assert_eq!(recovered.len(), KINDS.len(), "one INFO per kind:\n{}", recovered.join("\n"));
        assert!(recovered.iter().all(|l| l.contains("INFO") && !l.contains("attempts=0")), "{recovered:?}");
        assert_eq!(captured.lines_with("watch failing").len(), KINDS.len(), "nothing more once healthy");
    });
}

/// A kind whose CRD is not installed (KEDA's ScaledObject) recovers with the others when the
/// apiserver answers again: its 404 is an answer, not a failure (the soak's watch cut showed a
/// ScaledObject watch that failed on the cut and then never said it had recovered).
#[test]
fn a_kind_not_served_recovers_when_the_apiserver_answers_again() {
    let (captured, _guard) = capture();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let fake = Fake::default();
        fake.failing.store(true, Ordering::SeqCst);
        fake.no_keda.store(true, Ordering::SeqCst);
        let addr = fake_apiserver(fake.clone()).await;
        let client = kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap();
        let live = Arc::new(LiveSource::with_retry(policy(20, 200, 60_000)));
        live.start(client);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(captured.lines_with("watch failing").len(), KINDS.len(), "each kind failed once");
        fake.failing.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(live.synced(), "synced, ScaledObject as none");
        let recovered = captured.lines_with("watch recovered");
        assert_eq!(recovered.len(), KINDS.len(), "every kind recovered, ScaledObject too:\n{}", recovered.join("\n"));
        assert!(recovered.iter().any(|l| l.contains("kind=ScaledObject ")), "{recovered:?}");
        assert_eq!(captured.lines_with("not served by the cluster").len(), 1, "said once");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(captured.lines_with("watch failing").len(), KINDS.len(), "and nothing fails after");
        assert_eq!(captured.lines_with("not served by the cluster").len(), 1, "still said once");
    });
}

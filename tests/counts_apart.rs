//! Where a count that the node table does not remember runs: on a thread of its own at the lowest
//! CPU priority only in a process that answers admissions (`serve`), where it waits behind them.
//! `reports` makes the same probe-port state and judges whole clusters: there, a thread for each
//! new template, starved beside a busy control plane, made a full read's judging of 2,000 nodes
//! take 101 s instead of 9 s. A test binary of its own, because the setting is made once per
//! process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ha_guard::core::config::Config;
use ha_guard::core::view::{Index, StaticSource, nodes};
use ha_guard::server::{self, AppState, Listeners, ServeOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_run_apart_once_serving_and_never_for_the_probe_state_alone() {
    let _probe_state = AppState::new(Arc::new(StaticSource(Index::new())), Config::default());
    assert!(
        !nodes::counts_apart(),
        "making the probe port's state, as `reports` does, moved the counts to threads of their own"
    );

    let certs = tempfile::tempdir().unwrap();
    let listeners = Listeners::bind("127.0.0.1:0".parse().unwrap(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let options = ServeOptions {
        listen: listeners.webhook_addr().unwrap(),
        probe_listen: listeners.probe_addr().unwrap(),
        tls_cert: certs.path().join("tls.crt"),
        tls_key: certs.path().join("tls.key"),
        generate_dev_certs: true,
        ..ServeOptions::default()
    };
    let state = AppState::new(Arc::new(StaticSource(Index::new())), Config::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::serve_with_listeners(options, listeners, state, async {
        let _ = stopped.await;
    }));
    let started = Instant::now();
    while !nodes::counts_apart() {
        assert!(!serving.is_finished(), "serve ended before it answered anything");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "serving for 10 s, and the counts still run on the caller's thread"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

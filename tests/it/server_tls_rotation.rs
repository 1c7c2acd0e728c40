//! Certificate rotation under load: the serving certificate and key are replaced while a client
//! keeps sending requests on new connections. New connections get the new certificate; no request
//! fails.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::server_support::{Pki, Server, VIEW, client, fixture, index};
use ha_guard::core::config::Config;
use ha_guard::core::view::StaticSource;
use ha_guard::server;

/// How the files change.
#[derive(Clone, Copy, Debug)]
enum Swap {
    /// Each file written beside and renamed over the old one: for a moment the new certificate
    /// sits beside the old key.
    RenameEach,
    /// What the kubelet does for a mounted Secret: `tls.crt -> ..data/tls.crt`, `..data -> ..<ts>`,
    /// and a new `..data` symlink renamed over the old one (both files change at once).
    SecretSymlink,
}

fn bundle() -> server::certs::Bundle {
    server::certs::generate(&["localhost".into()], &["127.0.0.1".parse().unwrap()]).unwrap()
}

fn write_secret_dir(dir: &Path, name: &str, b: &server::certs::Bundle) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("tls.crt"), &b.cert_pem).unwrap();
    std::fs::write(d.join("tls.key"), &b.key_pem).unwrap();
}

/// Lays out certificate A the way `swap` will later replace it; returns the paths to serve.
fn install(dir: &Path, swap: Swap, a: &server::certs::Bundle) -> (PathBuf, PathBuf) {
    match swap {
        Swap::RenameEach => {
            std::fs::write(dir.join("tls.crt"), &a.cert_pem).unwrap();
            std::fs::write(dir.join("tls.key"), &a.key_pem).unwrap();
        }
        Swap::SecretSymlink => {
            write_secret_dir(dir, "..2025_01_01_00_00_00.1", a);
            std::os::unix::fs::symlink("..2025_01_01_00_00_00.1", dir.join("..data")).unwrap();
            std::os::unix::fs::symlink("..data/tls.crt", dir.join("tls.crt")).unwrap();
            std::os::unix::fs::symlink("..data/tls.key", dir.join("tls.key")).unwrap();
        }
    }
    (dir.join("tls.crt"), dir.join("tls.key"))
}

async fn accepted_by(ca_pem: &str, server: &Server) -> Result<(), String> {
    let body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    let response =
        client(&[ca_pem]).post(server.url("/validate")).body(body).send().await.map_err(|e| format!("{e:?}"))?;
    if response.status() != 200 {
        return Err(format!("HTTP {}", response.status()));
    }
    let review: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
    if review["response"]["allowed"] != true {
        return Err(review.to_string());
    }
    Ok(())
}

/// Waits (up to `limit`) for `f` to be true.
async fn eventually(limit: Duration, what: &str, mut f: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn rotate_under_load(swap: Swap) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (bundle(), bundle());
    let (cert, key) = install(dir.path(), swap, &a);
    let pki = Pki { ca_pem: a.ca_pem.clone(), cert, key };
    let view = Arc::new(StaticSource(index(VIEW, false)));
    let server = Arc::new(
        Server::start_in(dir, pki, view, Config::default(), |o| o.reload_interval = Duration::from_millis(200)).await,
    );

    // The looping client: trusts both CAs, a new client (so a new connection) for every request.
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let looping = {
        let (server, sent, failed, errors, stop) =
            (server.clone(), sent.clone(), failed.clone(), errors.clone(), stop.clone());
        let both = format!("{}{}", a.ca_pem, b.ca_pem);
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let result = accepted_by(&both, &server).await;
                sent.fetch_add(1, Ordering::SeqCst);
                if let Err(e) = result {
                    failed.fetch_add(1, Ordering::SeqCst);
                    errors.lock().unwrap().push(e);
                }
            }
        })
    };
    eventually(Duration::from_secs(30), "the looping client is running", async || sent.load(Ordering::SeqCst) >= 5)
        .await;
    assert!(accepted_by(&a.ca_pem, &server).await.is_ok(), "certificate A is served");
    assert!(accepted_by(&b.ca_pem, &server).await.is_err(), "certificate B is not served yet");

    let dir = server.dir.path().to_path_buf();
    match swap {
        Swap::RenameEach => {
            std::fs::write(dir.join("tls.crt.tmp"), &b.cert_pem).unwrap();
            std::fs::rename(dir.join("tls.crt.tmp"), dir.join("tls.crt")).unwrap();
            // Certificate B beside key A: the pair is refused (and counted), and A is still served.
            eventually(Duration::from_secs(15), "the mismatched pair is refused", async || {
                server.get_probe("/metrics").await.1.contains(r#"ha_guard_tls_reloads_total{result="failure"} 1"#)
            })
            .await;
            assert!(accepted_by(&a.ca_pem, &server).await.is_ok(), "A is kept while the pair does not match");
            std::fs::write(dir.join("tls.key.tmp"), &b.key_pem).unwrap();
            std::fs::rename(dir.join("tls.key.tmp"), dir.join("tls.key")).unwrap();
        }
        Swap::SecretSymlink => {
            write_secret_dir(&dir, "..2025_02_01_00_00_00.2", &b);
            std::os::unix::fs::symlink("..2025_02_01_00_00_00.2", dir.join("..data_tmp")).unwrap();
            std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        }
    }

    // New connections see certificate B: a client trusting only CA B gets through.
    eventually(Duration::from_secs(15), "a client trusting only CA B is accepted", async || {
        accepted_by(&b.ca_pem, &server).await.is_ok()
    })
    .await;
    let after = sent.load(Ordering::SeqCst);
    eventually(Duration::from_secs(30), "the looping client goes on", async || {
        sent.load(Ordering::SeqCst) >= after + 5
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    looping.await.unwrap();
    let metrics = server.get_probe("/metrics").await.1;
    assert!(metrics.contains(r#"ha_guard_tls_reloads_total{result="success"} 1"#), "{metrics}");
    let err = accepted_by(&a.ca_pem, &server).await.expect_err("certificate A is no longer served");
    assert!(err.to_lowercase().contains("certificate") || err.contains("UnknownIssuer"), "{err}");

    let (sent, failed) = (sent.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    eprintln!("{swap:?}: {sent} requests sent, {failed} failed");
    assert!(sent >= 10, "{sent}");
    assert_eq!(failed, 0, "requests failed during the rotation: {:#?}", errors.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_renaming_each_file() {
    rotate_under_load(Swap::RenameEach).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_secret_symlink_swap() {
    rotate_under_load(Swap::SecretSymlink).await;
}

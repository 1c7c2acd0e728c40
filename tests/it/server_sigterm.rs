//! SIGTERM on the real binary: readiness drops first, requests in flight finish, the process
//! exits 0.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::io::Write;

use crate::server_support::{RawResponse, fixture, free_port, pki, read_response, tls_connect, write_head};

/// Kills the child if the test fails before it exits.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET on the probe port by hand (plain HTTP/1.1): the status, or `None` if nothing answers.
fn probe_status(addr: SocketAddr, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

fn wait_until(limit: Duration, what: &str, child: &mut Child, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the server exited ({status}) while waiting for: {what}");
        }
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_drops_readiness_finishes_in_flight_requests_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let (port, probe_port) = (free_port(), free_port());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let probe: SocketAddr = format!("127.0.0.1:{probe_port}").parse().unwrap();
    let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["serve", "--listen", &addr.to_string(), "--probe-listen", &probe.to_string()])
        .arg("--tls-cert")
        .arg(&pki.cert)
        .arg("--tls-key")
        .arg(&pki.key)
        .args(["--cluster", "none", "--shutdown-delay", "1", "--shutdown-timeout", "10"])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start ha-guard serve");
    let mut guard = Guard(child);
    let pid = guard.0.id();
    let server_log = || std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();

    wait_until(Duration::from_secs(30), "/readyz answers 200", &mut guard.0, || {
        probe_status(probe, "/readyz") == Some(200)
    });
    // Its memory in 4 KiB pages: a huge page's first touch zeroes 2 MiB on the request path.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its /proc status");
    assert!(status.contains("THP_enabled:\t0"), "THP off for serve:\n{status}");

    // Requests in flight: each has sent its head (so its TLS handshake is done) when SIGTERM comes,
    // and uploads its body in pieces over 1.5 s, past the 1 s shutdown delay.
    let body = serde_json::to_vec(&fixture("deployment-spread-ok.json")).unwrap();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let in_flight: Vec<_> = (0..4)
        .map(|_| {
            let (body, ca, started) = (body.clone(), pki.ca_pem.clone(), started_tx.clone());
            std::thread::spawn(move || -> std::io::Result<RawResponse> {
                let mut stream = tls_connect(addr, &ca);
                write_head(&mut stream, "/validate", body.len())?;
                let _ = started.send(());
                for piece in body.chunks(body.len().div_ceil(15)) {
                    std::thread::sleep(Duration::from_millis(100));
                    stream.write_all(piece)?;
                    stream.flush()?;
                }
                read_response(&mut stream)
            })
        })
        .collect();
    for _ in 0..4 {
        started_rx.recv_timeout(Duration::from_secs(30)).expect("the request started");
    }

    let kill = Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
    assert!(kill.success());
    let signalled = Instant::now();

    // Readiness drops while the process is still up.
    wait_until(Duration::from_secs(5), "/readyz answers 503 after SIGTERM", &mut guard.0, || {
        probe_status(probe, "/readyz") == Some(503)
    });
    assert!(guard.0.try_wait().unwrap().is_none(), "still running when readiness is down");
    assert_eq!(probe_status(probe, "/healthz"), Some(200), "alive while draining");

    for t in in_flight {
        let response =
            t.join().unwrap().unwrap_or_else(|e| panic!("an in-flight request failed: {e}\n{}", server_log()));
        assert_eq!(response.status, 200, "{response:?}");
        let review: serde_json::Value = serde_json::from_str(&response.body).unwrap();
        assert_eq!(review["response"]["allowed"], true, "{review}");
    }

    let status = loop {
        if let Some(status) = guard.0.try_wait().unwrap() {
            break status;
        }
        assert!(signalled.elapsed() < Duration::from_secs(15), "no exit within 15 s of SIGTERM\n{}", server_log());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}\n{}", server_log());
    let log = server_log();
    assert!(log.contains("shutting down: readiness is down") && log.contains("stopped"), "{log}");
}

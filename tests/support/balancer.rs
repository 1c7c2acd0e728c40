//! A Service's route stood in for on loopback: a TCP balancer that relays each connection to the
//! next of its backends in turn (skipping one that refuses), as kube-proxy spreads a Service's
//! connections over its ready endpoints. Backends can be changed while it runs (a pod joins when
//! it is ready, leaves when it stops), and every relayed connection can be cut.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Balancer {
    pub port: u16,
    backends: Arc<Mutex<Vec<u16>>>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    accepted: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Balancer {
    /// Listens on a free loopback port and relays to `backends` (loopback ports).
    pub fn start(backends: Vec<u16>) -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the balancer");
        let port = listener.local_addr().expect("the balancer's address").port();
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let backends = Arc::new(Mutex::new(backends));
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let accepted = Arc::new(AtomicU64::new(0));
        let (backends2, stop2, conns2, accepted2) = (backends.clone(), stop.clone(), conns.clone(), accepted.clone());
        let thread = std::thread::spawn(move || {
            let mut next = 0usize;
            while !stop2.load(Ordering::SeqCst) {
                let client = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    Err(_) => continue,
                };
                let _ = client.set_nonblocking(false);
                let ports = backends2.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let server = (0..ports.len()).find_map(|i| {
                    let port = ports[(next + i) % ports.len()];
                    TcpStream::connect(("127.0.0.1", port)).ok()
                });
                next = next.wrapping_add(1);
                // No backend: the connection is closed, as a Service without endpoints refuses it.
                let Some(server) = server else { continue };
                accepted2.fetch_add(1, Ordering::SeqCst);
                let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) =
                    (client.try_clone(), server.try_clone(), client.try_clone(), server.try_clone())
                else {
                    continue;
                };
                {
                    let mut conns = conns2.lock().unwrap_or_else(|p| p.into_inner());
                    // Forget the ones already closed, so a long run (the soak) does not pile them up.
                    conns.retain(|c| c.peer_addr().is_ok());
                    conns.extend([c3, s3]);
                }
                for (mut from, mut to) in [(client, s2), (server, c2)] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Balancer { port, backends, stop, conns, accepted, thread: Some(thread) }
    }

    /// The backends new connections go to from now on (open connections keep theirs).
    pub fn set_backends(&self, ports: Vec<u16>) {
        *self.backends.lock().unwrap_or_else(|p| p.into_inner()) = ports;
    }

    pub fn backends(&self) -> Vec<u16> {
        self.backends.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Connections relayed so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Cuts every connection relayed so far: callers open new ones (new TLS handshakes). Returns
    /// how many were cut.
    pub fn cut(&self) -> usize {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        let n = conns.len() / 2;
        for c in conns.drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        n
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.cut();
    }
}

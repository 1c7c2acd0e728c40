//! Reading a namespace the view does not know yet, before a review is judged: a namespace created
//! in the same apply (or sync) as its workloads reaches the webhook before its watch event reaches
//! the view, and its labels decide which overrides apply. The rules stay pure: the shell reads
//! here, then judges against the view with the labels read ([`WithNamespace`]); what it cannot
//! read is judged at the strictest action an override could give ([`UnknownNamespace::Strictest`](crate::core::decide::UnknownNamespace)).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::admission::Operation;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::metrics::ResultLabels;
use super::review::Request;
use crate::core::config::Config;
use crate::core::view::{View, WithNamespace};

type Labels = BTreeMap<String, String>;

/// Reads a namespace's labels from the cluster.
pub trait ReadNamespace: Send + Sync {
    /// The labels of namespace `name` (`Ok(None)`: there is no such namespace), waiting at most
    /// `within`. Called on a review's thread, never an async worker: it blocks until answered.
    fn labels(&self, name: &str, within: Duration) -> Result<Option<Labels>, String>;
}

/// [`ReadNamespace`] through the server's kube client: one GET.
pub struct ApiNamespaces {
    client: kube::Client,
    runtime: tokio::runtime::Handle,
}

impl ApiNamespaces {
    /// Made on the server's runtime, which drives the GET (a review's thread has none of its own).
    pub fn new(client: kube::Client) -> ApiNamespaces {
        ApiNamespaces { client, runtime: tokio::runtime::Handle::current() }
    }
}

impl ReadNamespace for ApiNamespaces {
    fn labels(&self, name: &str, within: Duration) -> Result<Option<Labels>, String> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        match self.runtime.block_on(tokio::time::timeout(within, api.get_opt(name))) {
            Ok(Ok(namespace)) => Ok(namespace.map(|n| n.metadata.labels.unwrap_or_default())),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {}", humantime::format_duration(within))),
        }
    }
}

/// How long an answer read is kept: the namespaces asked for again meanwhile (the other objects
/// of one apply, or a flood of reviews for a namespace that does not exist) cost no GET. The view
/// normally learns a new namespace within milliseconds, and is asked first.
pub const REMEMBER: Duration = Duration::from_secs(5);

/// GETs a second at most, on average; up to [`READS_BURST`] at once. A read over the budget waits
/// for it within the time it has, then gives up: the overrides apply at their strictest.
pub const READS_PER_SECOND: f64 = 20.0;

/// GETs at once before [`READS_PER_SECOND`] holds them back (a GitOps sync creating a few dozen
/// namespaces with their workloads reads each once, without waiting).
pub const READS_BURST: f64 = 50.0;

/// Answers kept at most: a flood of distinct names cannot grow the memory past it.
const REMEMBERED_MAX: usize = 4096;

type Answer = Result<Option<Labels>, ReadError>;

/// Why a namespace's labels are not known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The GET failed, or did not answer in time.
    Failed(String),
    /// Over the budget of GETs ([`READS_PER_SECOND`]): not asked.
    Limited,
}

/// One GET under way: who asks for the same namespace meanwhile waits for its answer.
#[derive(Default)]
struct Flight {
    answer: std::sync::Mutex<Option<Answer>>,
    done: std::sync::Condvar,
}

impl Flight {
    fn finish(&self, answer: Answer) {
        *self.answer.lock().unwrap_or_else(|p| p.into_inner()) = Some(answer);
        self.done.notify_all();
    }

    fn wait(&self, within: Duration) -> Answer {
        let answer = self.answer.lock().unwrap_or_else(|p| p.into_inner());
        let (answer, _) =
            self.done.wait_timeout_while(answer, within, |a| a.is_none()).unwrap_or_else(|p| p.into_inner());
        answer.clone().unwrap_or_else(|| {
            Err(ReadError::Failed(format!("no answer within {}", humantime::format_duration(within))))
        })
    }
}

#[derive(Default)]
struct Known {
    /// Answers of the last [`REMEMBER`], by namespace (`None`: there is no such namespace).
    remembered: HashMap<String, (Instant, Option<Labels>)>,
    flights: HashMap<String, Arc<Flight>>,
    /// The budget: GETs that may start now, refilled at [`READS_PER_SECOND`].
    tokens: f64,
    refilled: Option<Instant>,
}

/// What bounds the GETs of namespaces at admission, whatever the reviews ask for: one GET per
/// namespace at a time (single-flight), its answer kept [`REMEMBER`], and at most
/// [`READS_PER_SECOND`] GETs a second. Counted in `ha_guard_namespace_reads_total{result}`.
pub struct Reads {
    remember: Duration,
    per_second: f64,
    burst: f64,
    known: std::sync::Mutex<Known>,
    counted: Family<ResultLabels, Counter>,
}

impl Reads {
    pub fn new(counted: Family<ResultLabels, Counter>) -> Reads {
        Reads::with_limits(counted, REMEMBER, READS_PER_SECOND, READS_BURST)
    }

    /// [`Reads::new`] with other limits (tests).
    pub fn with_limits(
        counted: Family<ResultLabels, Counter>,
        remember: Duration,
        per_second: f64,
        burst: f64,
    ) -> Reads {
        Reads { remember, per_second, burst, known: Default::default(), counted }
    }

    fn count(&self, result: &'static str) {
        self.counted.get_or_create(&ResultLabels { result }).inc();
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The labels of namespace `name` (`Ok(None)`: there is none), through `reader` unless a read
    /// of it is under way or answered recently, within `within`.
    pub fn labels(&self, reader: &dyn ReadNamespace, name: &str, within: Duration) -> Answer {
        let started = Instant::now();
        let flight = {
            let mut known = self.known();
            if let Some((at, labels)) = known.remembered.get(name)
                && at.elapsed() < self.remember
            {
                self.count("shared");
                return Ok(labels.clone());
            }
            if let Some(flight) = known.flights.get(name).cloned() {
                drop(known);
                self.count("shared");
                return flight.wait(within);
            }
            let flight = Arc::new(Flight::default());
            known.flights.insert(name.to_string(), flight.clone());
            flight
        };
        let answer = match self.budget(started, within) {
            false => {
                self.count("limited");
                tracing::debug!(
                    namespace = name,
                    "over the budget of namespace reads: the overrides apply at their strictest"
                );
                Err(ReadError::Limited)
            }
            true => {
                let left = within.saturating_sub(started.elapsed());
                let answer = reader.labels(name, left);
                match &answer {
                    Ok(Some(_)) => {
                        self.count("found");
                        tracing::debug!(
                            namespace = name,
                            "namespace not in the view yet: its labels read from the apiserver"
                        );
                    }
                    Ok(None) => {
                        self.count("not-found");
                        tracing::warn!(namespace = name, "namespace not found: the overrides apply at their strictest");
                    }
                    Err(error) => {
                        self.count("error");
                        tracing::warn!(
                            namespace = name,
                            %error,
                            "cannot read the namespace's labels: the overrides apply at their strictest"
                        );
                    }
                }
                answer.map_err(ReadError::Failed)
            }
        };
        let mut known = self.known();
        known.flights.remove(name);
        if let Ok(labels) = &answer {
            if known.remembered.len() >= REMEMBERED_MAX {
                let remember = self.remember;
                known.remembered.retain(|_, (at, _)| at.elapsed() < remember);
            }
            if known.remembered.len() < REMEMBERED_MAX {
                known.remembered.insert(name.to_string(), (Instant::now(), labels.clone()));
            }
        }
        drop(known);
        flight.finish(answer.clone());
        answer
    }

    /// Takes one GET of the budget, waiting for it at most until `within` after `started`;
    /// `false`: none came in time.
    fn budget(&self, started: Instant, within: Duration) -> bool {
        loop {
            let wait = {
                let mut known = self.known();
                let now = Instant::now();
                let refilled = known.refilled.unwrap_or(now);
                let since = now.duration_since(refilled).as_secs_f64();
                known.tokens = if known.refilled.is_none() {
                    self.burst
                } else {
                    (known.tokens + since * self.per_second).min(self.burst)
                };
                known.refilled = Some(now);
                if known.tokens >= 1.0 {
                    known.tokens -= 1.0;
                    return true;
                }
                Duration::from_secs_f64((1.0 - known.tokens) / self.per_second)
            };
            if started.elapsed() + wait > within {
                return false;
            }
            std::thread::sleep(wait);
        }
    }
}

/// The labels of the request's namespace when the configuration decides by them (overrides, an
/// exception's namespaceSelector) and the view does not know the namespace: read from the cluster,
/// as [`Reads`] bounds it. `None` when there is nothing to read, or it could not be read (logged
/// by [`Reads`]: the review then applies the overrides at their strictest and says so in a
/// warning). `reader`: the server's (none without a live cluster); `deadline`: the admission's.
pub fn read_for(
    reads: &Reads,
    reader: Option<&dyn ReadNamespace>,
    deadline: Duration,
    config: &Config,
    view: &dyn View,
    request: &Request,
) -> Option<(String, Labels)> {
    let header = &request.header;
    let namespace = header.namespace.as_deref().filter(|n| !n.is_empty())?;
    if !matches!(header.operation, Operation::Create | Operation::Update)
        || !config.reads_namespace_labels()
        || config.namespace_exempt(namespace)
        || view.namespace_labels(namespace).is_some()
    {
        return None;
    }
    let Some(reader) = reader else {
        tracing::warn!(
            namespace,
            "namespace not in the view and no cluster to read it from: the overrides apply at their strictest"
        );
        return None;
    };
    // Half the deadline: what is left answers the review.
    let labels = reads.labels(reader, namespace, deadline / 2).ok()??;
    Some((namespace.to_string(), labels))
}

/// `view` with the namespace read, if one was.
pub fn with_read<'a>(view: &'a dyn View, read: Option<(String, Labels)>) -> Option<WithNamespace<'a>> {
    read.map(|(namespace, labels)| WithNamespace { base: view, namespace, labels })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Answers `tier: prod` for a name, none for a name starting with `ghost`, after `delay`;
    /// counts the GETs.
    struct Slow {
        delay: Duration,
        asked: std::sync::atomic::AtomicUsize,
    }

    impl ReadNamespace for Slow {
        fn labels(&self, name: &str, _within: Duration) -> Result<Option<Labels>, String> {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(self.delay);
            Ok((!name.starts_with("ghost")).then(|| [("tier".to_string(), "prod".to_string())].into()))
        }
    }

    fn slow(delay: Duration) -> Arc<Slow> {
        Arc::new(Slow { delay, asked: Default::default() })
    }

    fn counts(family: &Family<ResultLabels, Counter>) -> BTreeMap<&'static str, u64> {
        super::super::metrics::NAMESPACE_READ_RESULTS
            .iter()
            .map(|&result| (result, family.get_or_create(&ResultLabels { result }).get()))
            .collect()
    }

    /// Issue 50: reviews for a namespace that does not exist (a forged flood, or the objects of one
    /// apply) make one GET while it is under way, and none while its answer is remembered.
    #[test]
    fn reviews_for_one_namespace_share_one_get() {
        let family = Family::<ResultLabels, Counter>::default();
        let reads = Arc::new(Reads::with_limits(family.clone(), Duration::from_millis(300), 1000.0, 1000.0));
        let reader = slow(Duration::from_millis(200));
        let asks: Vec<_> = (0..32)
            .map(|_| {
                let (reads, reader) = (reads.clone(), reader.clone());
                std::thread::spawn(move || reads.labels(&*reader, "ghost-1", Duration::from_secs(5)))
            })
            .collect();
        for ask in asks {
            assert_eq!(ask.join().unwrap(), Ok(None));
        }
        assert_eq!(reader.asked.load(std::sync::atomic::Ordering::SeqCst), 1, "32 asks at once, one GET");
        // Remembered: no GET.
        assert_eq!(reads.labels(&*reader, "ghost-1", Duration::from_secs(5)), Ok(None));
        assert_eq!(reader.asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        let c = counts(&family);
        assert_eq!((c["not-found"], c["shared"], c["found"], c["limited"]), (1, 32, 0, 0), "{c:?}");
        // Past REMEMBER the namespace is read again: it may have been created since.
        std::thread::sleep(Duration::from_millis(350));
        assert_eq!(reads.labels(&*reader, "ghost-1", Duration::from_secs(5)), Ok(None));
        assert_eq!(reader.asked.load(std::sync::atomic::Ordering::SeqCst), 2);
        // A namespace that exists: its labels, remembered the same way.
        let prod = Ok(Some([("tier".to_string(), "prod".to_string())].into()));
        assert_eq!(reads.labels(&*reader, "shop", Duration::from_secs(5)), prod);
        assert_eq!(reads.labels(&*reader, "shop", Duration::from_secs(5)), prod);
        assert_eq!(reader.asked.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(counts(&family)["found"], 1);
    }

    /// Issue 50: a flood of reviews for distinct namespaces that do not exist cannot make one GET
    /// each: past the burst, GETs are held to the rate; a review that cannot get one within its time
    /// is answered without (`limited`, judged at the strictest), on time.
    #[test]
    fn a_flood_of_distinct_namespaces_is_held_to_the_budget() {
        let family = Family::<ResultLabels, Counter>::default();
        let (per_second, burst) = (20.0, 5.0);
        let reads = Arc::new(Reads::with_limits(family.clone(), REMEMBER, per_second, burst));
        let reader = slow(Duration::from_millis(1));
        let within = Duration::from_millis(200);
        let started = Instant::now();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (reads, reader) = (reads.clone(), reader.clone());
                std::thread::spawn(move || {
                    let mut slowest = Duration::ZERO;
                    for i in 0..20 {
                        let asked = Instant::now();
                        let answer = reads.labels(&*reader, &format!("ghost-{t}-{i}"), within);
                        assert!(matches!(answer, Ok(None) | Err(ReadError::Limited)), "{answer:?}");
                        slowest = slowest.max(asked.elapsed());
                    }
                    slowest
                })
            })
            .collect();
        let slowest = threads.into_iter().map(|t| t.join().unwrap()).max().unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        let gets = reader.asked.load(std::sync::atomic::Ordering::SeqCst);
        let bound = burst + per_second * elapsed + 1.0;
        assert!((gets as f64) <= bound, "{gets} GETs in {elapsed:.2}s: more than burst {burst} + {per_second}/s");
        assert!(gets >= 5, "the burst is read: {gets} GETs");
        let c = counts(&family);
        assert_eq!(c["not-found"] + c["limited"], 160, "{c:?}");
        assert_eq!(c["not-found"], gets as u64, "{c:?}");
        assert!(c["limited"] > 0, "{c:?}");
        // Nobody waits for the budget past its time (plus the scheduling of 8 threads on a busy machine).
        assert!(slowest < within + Duration::from_millis(150), "a read took {slowest:?}, within {within:?}");
    }

    /// The GET runs from a review's thread (the blocking pool), driven by the server's runtime:
    /// against a one-shot apiserver answering `GET /api/v1/namespaces/fresh`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_namespace_is_read_from_a_reviews_thread() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let apiserver = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0; 4096];
            let n = stream.read(&mut request).await.unwrap();
            let body = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"fresh","labels":{"tier":"prod"}}}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&request[..n]).into_owned()
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let reader = ApiNamespaces::new(kube::Client::try_from(config).unwrap());
        let labels = tokio::task::spawn_blocking(move || reader.labels("fresh", Duration::from_secs(5))).await.unwrap();
        assert_eq!(labels, Ok(Some([("tier".to_string(), "prod".to_string())].into())));
        let request = apiserver.await.unwrap();
        assert!(request.starts_with("GET /api/v1/namespaces/fresh"), "{request}");
    }
}

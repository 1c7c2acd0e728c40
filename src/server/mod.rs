//! `ha-guard serve`: the engine behind the kube-apiserver. Transport only: TLS with reload, body
//! limits, timeouts, probes, metrics, graceful shutdown. The answers come from [`admission`].

pub mod admission_policies;
pub mod certs;
pub mod lanes;
pub mod log_format;
pub mod managed_tls;
pub mod metrics;
pub mod namespaces;
pub mod review;
pub mod state;
pub mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;

use crate::core::rules::{Progress, Stage, rules_of};
use metrics::{
    ExceptionRuleLabels, FindingLabels, ReasonLabels, RequestLabels, ResultLabels, RuleLabels, WebhookLabels,
};
use review::Webhook;
pub use state::{AdmissionSettings, AppState, DECODE_BUDGET, DEFAULT_DEADLINE, FailurePolicy};

/// The largest request body accepted. The apiserver sends objects of up to ~3 MiB, twice on
/// UPDATE (object and oldObject) plus the review's own fields: 8 MiB covers that with room.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Default of `--max-concurrent-requests`: a bound on tasks, not on memory (a request with a
/// small body costs little; [`DEFAULT_MAX_BODY_MEMORY`] bounds the bodies).
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 256;
/// Default of `--max-body-memory`: request bodies held at once, by their Content-Length (a body
/// of unknown length counts as [`MAX_BODY_BYTES`]). 64 MiB is eight bodies at the limit; with the
/// decoding budget and the process's own needs, the measured peak under a flood of 8 MiB bodies
/// stays near 120 MiB (docs/webhook.md), under half the Deployment's 512Mi memory limit (the
/// rest is the background audit's, docs/operations.md "The background audit").
pub const DEFAULT_MAX_BODY_MEMORY: usize = 64 * 1024 * 1024;
/// Default of `--max-connections`: open TLS connections, in the handshake or established.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default of `--tls-handshake-timeout`.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS port's routes, `POST /validate` and `POST /mutate`, with their body limit, request
/// timeout and panic guard; [`webhook_router`] adds the admission limits in front.
fn routes(state: Arc<AppState>, request_timeout: Duration) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, request_timeout))
        .layer(CatchPanicLayer::custom(|_| {
            json_error(StatusCode::INTERNAL_SERVER_ERROR, "internal error while answering")
        }))
        .with_state(state)
}

/// The Content-Length a request declares, if it declares one.
fn declared_length(req: &axum::extract::Request) -> Option<u64> {
    req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
}

/// The answer to a request whose Content-Length, `declared`, is past [`MAX_BODY_BYTES`]: 413 at
/// once, its body unread. Reading it only to refuse it would hold the connection (and its share of
/// the body memory) until the request timeout when the client sends slowly or not at all.
fn declared_oversize(req: &axum::extract::Request, declared: u64) -> Response {
    tracing::warn!(path = %req.uri().path(), content_length = declared, "request body over the limit: refused unread");
    json_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "the request declares a body of {declared} bytes (Content-Length), over the limit of {MAX_BODY_BYTES} bytes"
        ),
    )
}

/// Bounds on the requests answered at once.
#[derive(Clone, Copy, Debug)]
pub struct RequestLimits {
    /// Requests (`--max-concurrent-requests`).
    pub requests: usize,
    /// Bytes of request bodies, by Content-Length (`--max-body-memory`).
    pub body_bytes: usize,
}

/// The TLS port's router: [`routes`] behind one middleware that refuses a declared oversize body
/// (413, [`declared_oversize`]) and keeps the requests within `limits`. A request past either limit
/// is answered at once with HTTP 503 and a one-line JSON error (its body is not read), so a flood
/// costs bounded memory instead of queueing bodies. The apiserver treats the 503 like any failed
/// call (its `failurePolicy` decides). One middleware rather than one per check: each `from_fn`
/// layer boxes the rest of the request's future and polls through it, on every request.
pub fn webhook_router(state: Arc<AppState>, request_timeout: Duration, limits: RequestLimits) -> Router {
    let clamp = |n: usize| n.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
    let requests = Arc::new(tokio::sync::Semaphore::new(clamp(limits.requests)));
    // In KiB, so that a permit count fits in a u32.
    let body_kib = Arc::new(tokio::sync::Semaphore::new(clamp(limits.body_bytes / 1024)));
    let limit_state = state.clone();
    routes(state, request_timeout).layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let (requests, body_kib, state) = (requests.clone(), body_kib.clone(), limit_state.clone());
            async move {
                let refuse = |reason: &'static str, message: String| {
                    state.metrics.rejected.get_or_create(&ReasonLabels { reason }).inc();
                    tracing::debug!(reason, path = %req.uri().path(), "overloaded: request refused");
                    let mut response = json_error(StatusCode::SERVICE_UNAVAILABLE, &message);
                    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
                    response
                };
                let declared = declared_length(&req);
                // Refused at once (413), before any slot is taken.
                if let Some(n) = declared.filter(|&n| n > MAX_BODY_BYTES as u64) {
                    return declared_oversize(&req, n);
                }
                let Ok(permit) = requests.try_acquire_owned() else {
                    return refuse(
                        "max-concurrent-requests",
                        format!(
                            "overloaded: {} requests are being answered (--max-concurrent-requests); retry",
                            limits.requests
                        ),
                    );
                };
                // Without a Content-Length, a body counts as the limit (it is refused, 413, past it).
                let length = declared.map_or(MAX_BODY_BYTES, |n| usize::try_from(n).unwrap_or(MAX_BODY_BYTES));
                let kib = u32::try_from(length.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
                let Ok(body_permit) = body_kib.try_acquire_many_owned(kib) else {
                    return refuse(
                        "max-body-memory",
                        format!(
                            "overloaded: the request bodies being read fill {} MiB (--max-body-memory); retry",
                            limits.body_bytes / (1024 * 1024)
                        ),
                    );
                };
                // Counted until the request ends, however it ends (a dropped connection included).
                let _in_flight = InFlight::new(&state.metrics.in_flight, permit, body_permit);
                next.run(req).await
            }
        },
    ))
}

/// Per-stream HTTP/2 flow-control window: the protocol's default (RFC 9113 §6.9.2), instead of
/// hyper's 1 MiB (see where the server is built).
const H2_STREAM_WINDOW: u32 = 65_535;

/// Holds a request slot and counts it in `ha_guard_requests_in_flight` until dropped.
struct InFlight {
    gauge: prometheus_client::metrics::gauge::Gauge,
    _permits: (tokio::sync::OwnedSemaphorePermit, tokio::sync::OwnedSemaphorePermit),
}

impl InFlight {
    fn new(
        gauge: &prometheus_client::metrics::gauge::Gauge,
        request: tokio::sync::OwnedSemaphorePermit,
        body: tokio::sync::OwnedSemaphorePermit,
    ) -> Self {
        gauge.inc();
        InFlight { gauge: gauge.clone(), _permits: (request, body) }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// The probe port's routes: `/healthz`, `/readyz`, `/metrics`.
pub fn probe_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

fn json_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body + "\n").into_response()
}

async fn validate(State(state): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    match body {
        Ok(body) => answer_within_budget(state, Webhook::Validate, body).await,
        Err(e) => body_error(Webhook::Validate, e),
    }
}

async fn mutate(State(state): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    match body {
        Ok(body) => answer_within_budget(state, Webhook::Mutate, body).await,
        Err(e) => body_error(Webhook::Mutate, e),
    }
}

/// [`answer`] once the body's JSON values fit in the decoding budget, judged off the async
/// workers (a review is CPU work: apart, it delays no other request's I/O; a large one apart from
/// the ordinary ones too, [`lanes`]) and within the deadline: past it, the answer is [`past_deadline`]'s, and the review is asked to
/// stop at its next stage. A body over [`review::MAX_JSON_VALUES`] takes nothing: it is refused
/// before decoding.
async fn answer_within_budget(state: Arc<AppState>, webhook: Webhook, body: Bytes) -> Response {
    let started = Instant::now();
    let values = review::value_bound(&body);
    let permit = if values <= review::MAX_JSON_VALUES {
        // Never closed; the request timeout bounds the wait.
        let n = u32::try_from(values.min(DECODE_BUDGET)).unwrap_or(u32::MAX);
        state.decoding.clone().acquire_many_owned(n).await.ok()
    } else {
        None
    };
    let progress = Arc::new(Progress::new());
    let uid = Arc::new(std::sync::OnceLock::new());
    let judged = lanes::judge_apart(&state.large, body.len(), values, {
        let (state, progress, uid) = (state.clone(), progress.clone(), uid.clone());
        move || {
            let _judging = state.judging.start();
            let response = answer(&state, webhook, &body, values, &progress, &uid);
            drop(permit);
            response
        }
    });
    let deadline = state.admission.deadline.saturating_sub(started.elapsed());
    match tokio::time::timeout(deadline, judged).await {
        Ok(Ok(response)) => response,
        // A panic while answering: what the panic guard answers for a handler.
        Ok(Err(_)) => json_error(StatusCode::INTERNAL_SERVER_ERROR, "internal error while answering"),
        Err(_) => {
            progress.stop();
            past_deadline(&state, webhook, progress.stage(), uid.get(), started.elapsed())
        }
    }
}

/// The answer to a review still running at the deadline: what the webhook configurations'
/// failurePolicy would make of no answer (Ignore: admitted; Fail: refused), said in a warning
/// that names the rules not judged, a log line and `ha_guard_rule_deadline_exceeded_total`. When
/// the request's uid is not known yet (still decoding), no AdmissionReview can be written: a 503,
/// which the apiserver treats by that same failurePolicy.
fn past_deadline(
    state: &AppState,
    webhook: Webhook,
    stage: Stage,
    uid: Option<&RequestId>,
    elapsed: Duration,
) -> Response {
    let settings = state.admission;
    let config = state.config();
    let rules: Vec<&'static str> =
        rules_of(stage).iter().filter(|r| !config.is_off(r)).map(|r| r.id).collect::<Vec<_>>();
    let named: Vec<&str> = if rules.is_empty() { vec![stage.name()] } else { rules.clone() };
    for what in &named {
        state.metrics.rule_deadline_exceeded.get_or_create(&RuleLabels { rule: what }).inc();
    }
    let deadline = humantime::format_duration(settings.deadline).to_string();
    let policy = settings.failure_policy;
    tracing::warn!(
        webhook = webhook.as_str(),
        uid = uid.map_or("", |u| u.uid.as_str()),
        kind = uid.map_or("", |u| u.kind.as_str()),
        object = uid.map_or(String::new(), |u| format!("{}/{}", u.namespace, u.name)),
        stage = stage.name(),
        rules = %named.join(","),
        deadline = %deadline,
        failure_policy = policy.as_str(),
        latency_us = elapsed.as_micros() as u64,
        "deadline passed: answered as the failure policy says"
    );
    let Some(id) = uid else {
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("the request was not decoded within ha-guard's deadline of {deadline}"),
        );
    };
    let outcome = match policy {
        FailurePolicy::Ignore => "the write is admitted unchecked (failurePolicy Ignore)",
        FailurePolicy::Fail => "the write is refused (failurePolicy Fail): try again",
    };
    let warnings: Vec<String> = named
        .iter()
        .map(|what| match rules.is_empty() {
            false => {
                format!("[{what}] not judged: ha-guard's deadline of {deadline} passed while judging it; {outcome}.")
            }
            true => {
                format!("[ha-guard] not judged: ha-guard's deadline of {deadline} passed during the {what}; {outcome}.")
            }
        })
        .collect();
    let mut response = kube::core::admission::AdmissionResponse::invalid("");
    response.uid = id.uid.clone();
    response.allowed = true;
    response.result = Default::default();
    response.warnings = Some(review::fit_warnings(warnings.clone()));
    response.audit_annotations.insert("deadline-exceeded".into(), named.join(","));
    if policy == FailurePolicy::Fail {
        response = response.deny(warnings.join("\n"));
        response.result.code = 503;
        response.result.reason = "ServiceUnavailable".into();
    }
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            webhook: webhook.as_str(),
            kind: metrics::kind_label(&id.kind),
            operation: id.operation,
            decision: if policy == FailurePolicy::Fail { "denied" } else { "allowed" },
            dry_run: if id.dry_run { "true" } else { "false" },
        })
        .inc();
    match review::review_json(response) {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// What identifies a request once decoded: enough to answer it past the deadline.
#[derive(Debug)]
struct RequestId {
    uid: String,
    kind: String,
    namespace: String,
    name: String,
    operation: &'static str,
    dry_run: bool,
}

/// A body that could not be read: over the limit (413) or cut off (400). The same one-line JSON
/// error as a body that is not an AdmissionReview, rather than axum's plain-text rejection.
fn body_error(webhook: Webhook, e: BytesRejection) -> Response {
    let status = e.status();
    let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
        format!("the request body is over the limit of {MAX_BODY_BYTES} bytes")
    } else {
        format!("cannot read the request body: {}", e.body_text())
    };
    tracing::warn!(webhook = webhook.as_str(), status = status.as_u16(), error = %message, "bad request body");
    json_error(status, &message)
}

/// The per-admission log line, at the level given (`info` or `debug`: tracing fixes an event's
/// level where it is written).
macro_rules! admission_line {
    ($level:ident, $webhook:expr, $outcome:expr, $elapsed:expr) => {
        tracing::$level!(
            webhook = $webhook.as_str(),
            uid = %$outcome.uid,
            kind = %$outcome.kind,
            object = %ObjectField(&$outcome),
            operation = %$outcome.operation,
            user = %$outcome.user,
            groups = %GroupsField($outcome.groups),
            dry_run = $outcome.dry_run,
            decision = $outcome.decision.as_str(),
            rules = %RulesField(&$outcome),
            latency_us = $elapsed.as_micros() as u64,
            "admission"
        )
    };
}

/// Answers a body of at most `values` JSON values ([`review::value_bound`]), saying where it has
/// got in `progress` and the request's identity in `uid` once decoded. Its log line is at
/// info when the answer tells the user something (denied, warned, patched) and at debug when it
/// is a plain allow or a skip: on a cluster-wide webhook those are most writes, one line each is
/// log volume nobody reads (Gatekeeper logs only denials, and only when asked), and the
/// `ha_guard_admission_requests_total` counter still counts them by decision.
fn answer(
    state: &AppState,
    webhook: Webhook,
    body: &[u8],
    values: usize,
    progress: &Progress,
    uid: &std::sync::OnceLock<RequestId>,
) -> Response {
    let started = Instant::now();
    // Kept until the answer is written: the outcome borrows its texts.
    let request = review::parse_counted(body, values);
    if let Ok(req) = &request {
        let h = &req.header;
        let _ = uid.set(RequestId {
            uid: h.uid.clone(),
            kind: h.kind.kind.clone(),
            namespace: h.namespace.clone().unwrap_or_default(),
            name: h.name.clone(),
            operation: review::respond::operation_name(&h.operation),
            dry_run: h.dry_run,
        });
    }
    let result = request.as_ref().map_err(|e| review::BadRequest(e.0.clone())).and_then(|req| {
        // The configuration and the admission policies generated from it, as one.
        let (config, generation) = state.config_and_generation();
        let policies = state.policies_for(generation);
        let clock = state.admission_clock();
        // A snapshot: the review holds no lock the watchers need, however long it takes.
        let view = state.view.snapshot();
        // A namespace the view does not know yet is read first, outside the snapshot and any lock.
        let reader = state.namespaces.get().map(|r| &**r);
        let read = namespaces::read_for(&state.namespace_reads, reader, state.admission.deadline, &config, &*view, req);
        let labelled = namespaces::with_read(&*view, read);
        let view: &dyn crate::core::view::View = match &labelled {
            Some(v) => v,
            None => &*view,
        };
        review::review_with_progress(
            req,
            webhook,
            view,
            &config,
            &clock,
            Some(progress),
            policies.as_ref().map(|p| &p.rules),
        )
    });
    if progress.stopped() {
        // Answered at the deadline already (`past_deadline`).
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let elapsed = started.elapsed();
    state.metrics.duration.get_or_create(&WebhookLabels { webhook: webhook.as_str() }).observe(elapsed.as_secs_f64());
    match result {
        Ok((response, outcome)) => {
            record(state, webhook, &outcome);
            if outcome.decision.tells_the_user() {
                admission_line!(info, webhook, outcome, elapsed);
            } else {
                admission_line!(debug, webhook, outcome, elapsed);
            }
            match review::review_json(response) {
                Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
                Err(e) => json_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
            }
        }
        Err(e) => {
            tracing::warn!(webhook = webhook.as_str(), error = %e, latency_us = elapsed.as_micros() as u64, "bad request");
            json_error(StatusCode::BAD_REQUEST, &e.0)
        }
    }
}

/// The log line's `object`: `namespace/name`, written straight into the line.
struct ObjectField<'a>(&'a review::Outcome<'a>);

impl std::fmt::Display for ObjectField<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.0.namespace, self.0.name)
    }
}

/// The log line's `rules`: `rule=action` per finding (`rule=allowed:exception` when an exception
/// of the configuration allowed it), then the mutations applied, comma-separated.
struct RulesField<'a>(&'a review::Outcome<'a>);

impl std::fmt::Display for RulesField<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let exception_of = |rule: &crate::core::catalogue::Rule| {
            self.0.exceptions.iter().find(|(_, r)| std::ptr::eq(*r, rule)).map(|(e, _)| e.as_str())
        };
        let findings =
            self.0.findings.iter().map(|(r, a)| (*r as &dyn std::fmt::Display, Some(a.as_str()), exception_of(r)));
        let mutations = self.0.mutations.iter().map(|m| (m as &dyn std::fmt::Display, None, None));
        for (i, (what, action, exception)) in findings.chain(mutations).enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match (action, exception) {
                (Some(action), Some(exception)) => write!(f, "{what}={action}:{exception}")?,
                (Some(action), None) => write!(f, "{what}={action}")?,
                (None, _) => write!(f, "{what}")?,
            }
        }
        Ok(())
    }
}

/// The log line's `groups`: the writer's groups, comma-separated, at most [`GROUPS_LOGGED`] of
/// them (a user in hundreds of groups must not make every line that long), then `+N` for the N
/// more.
struct GroupsField<'a>(&'a [String]);

/// How many of a writer's groups the admission line names.
const GROUPS_LOGGED: usize = 8;

impl std::fmt::Display for GroupsField<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, g) in self.0.iter().take(GROUPS_LOGGED).enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(g)?;
        }
        if self.0.len() > GROUPS_LOGGED {
            write!(f, ",+{}", self.0.len() - GROUPS_LOGGED)?;
        }
        Ok(())
    }
}

/// Whether `serve`'s text log is styled with ANSI colours: on a terminal only, unless NO_COLOR is
/// set. In a pod stderr is a pipe to the container log, where escape codes are noise to every
/// reader, and styling each field of the per-request line was most of that line's cost.
pub fn log_styled() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

fn record(state: &AppState, webhook: Webhook, o: &review::Outcome<'_>) {
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            webhook: webhook.as_str(),
            kind: metrics::kind_label(&o.kind),
            operation: o.operation,
            decision: o.decision.as_str(),
            dry_run: if o.dry_run { "true" } else { "false" },
        })
        .inc();
    for (rule, action) in &o.findings {
        state.metrics.findings.get_or_create(&FindingLabels { rule: rule.id, action: action.as_str() }).inc();
    }
    for (exception, rule) in &o.exceptions {
        state
            .metrics
            .exception_matches
            .get_or_create(&ExceptionRuleLabels { exception: exception.clone(), rule: rule.id })
            .inc();
    }
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.shutting_down.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    if !state.ready.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "TLS material or configuration not loaded\n").into_response();
    }
    if !state.view.synced() {
        return (StatusCode::SERVICE_UNAVAILABLE, "cluster caches not synced\n").into_response();
    }
    if let Some(why) = stalled(&state) {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response();
    }
    (StatusCode::OK, "ok\n").into_response()
}

/// Why this replica's request path is stalled, if it is: a review still being judged at twice
/// the deadline (it should have stopped at its next stage once the deadline passed), or a view
/// whose watchers cannot apply their events. Both are this process's own state: a cause the
/// whole cluster shares (the apiserver out of reach) is not one, so readiness never takes every
/// replica out of the Service at once for it.
fn stalled(state: &AppState) -> Option<String> {
    let limit = state.admission.deadline.saturating_mul(2);
    if let Some(oldest) = state.judging.oldest().filter(|d| *d > limit) {
        return Some(format!(
            "a review has been judged for {:.1?}, past twice the deadline of {}: the request path is stalled",
            oldest,
            humantime::format_duration(state.admission.deadline)
        ));
    }
    state.view.stalled()
}

async fn metrics_text(State(state): State<Arc<AppState>>) -> Response {
    for (kind, objects, synced) in state.view.stats() {
        let labels = metrics::KindLabels { kind: kind.as_str() };
        state.metrics.cache_objects.get_or_create(&labels).set(objects as i64);
        state.metrics.cache_synced.get_or_create(&labels).set(i64::from(synced));
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.encode())
        .into_response()
}

/// Options of `ha-guard serve`.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub probe_listen: SocketAddr,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub config: Option<PathBuf>,
    /// Poll interval for the TLS files and the config file.
    pub reload_interval: Duration,
    pub request_timeout: Duration,
    /// After SIGTERM, how long readiness is down before the listener stops.
    pub shutdown_delay: Duration,
    /// How long in-flight requests get to finish.
    pub shutdown_timeout: Duration,
    /// Generate development certificates when neither file exists.
    pub generate_dev_certs: bool,
    /// Only callers presenting a certificate signed by a CA in this PEM file are answered (the
    /// handshake fails otherwise); re-read with the serving certificate. `None`: no client
    /// certificate is asked for.
    pub client_ca: Option<PathBuf>,
    /// Requests answered at once; more get 503 at once.
    pub max_concurrent_requests: usize,
    /// Bytes of request bodies (by Content-Length) read at once; more get 503 at once.
    pub max_body_memory: usize,
    /// Open connections (handshakes included); more are closed at once.
    pub max_connections: usize,
    /// Bound on a TLS handshake (a client that connects and sends nothing is closed after it).
    pub tls_handshake_timeout: Duration,
    /// `--tls-mode managed`: the certificate comes from a Secret kept by ha-guard
    /// ([`managed_tls`]; `tls_cert`, `tls_key` and `generate_dev_certs` are not used). `None`: the
    /// files.
    pub managed_tls: Option<managed_tls::Managed>,
}

/// The defaults of `ha-guard serve`.
impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([0, 0, 0, 0], 8443)),
            probe_listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            tls_cert: PathBuf::from("certs/tls.crt"),
            tls_key: PathBuf::from("certs/tls.key"),
            config: None,
            reload_interval: tls::DEFAULT_POLL,
            request_timeout: Duration::from_secs(8),
            shutdown_delay: Duration::from_secs(3),
            shutdown_timeout: Duration::from_secs(20),
            generate_dev_certs: true,
            client_ca: None,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            max_body_memory: DEFAULT_MAX_BODY_MEMORY,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tls_handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT,
            managed_tls: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Certs(#[from] certs::CertError),
    #[error(transparent)]
    Config(#[from] crate::core::config::ConfigError),
    #[error("{addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Setup(String),
}

/// The names the development certificate holds (the banner lists them all).
const DEV_DNS: [&str; 3] = ["localhost", "ha-guard", "ha-guard.ha-guard.svc"];
const DEV_IPS: [std::net::IpAddr; 2] =
    [std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)];

/// Generates development certificates into the directory of `cert` when neither file exists
/// (`Ok(true)`), whether or not a cluster is in use; `Ok(false)` when both exist. Only one of
/// the two, or neither inside a pod (where a missing mounted Secret must not be papered over with
/// a certificate the apiserver does not trust), is an error naming the fix.
pub fn ensure_dev_certs(cert: &Path, key: &Path) -> Result<bool, ServeError> {
    let (c, k) = (cert.display(), key.display());
    match (cert.exists(), key.exists()) {
        (true, true) => return Ok(false),
        (true, false) | (false, true) => {
            let (there, missing) = if cert.exists() { (&c, &k) } else { (&k, &c) };
            return Err(ServeError::Setup(format!(
                "{there} exists but {missing} does not: a serving certificate needs both. Put the missing file back, \
                 point --tls-cert and --tls-key at a matching pair, or remove {there} to have a development CA and \
                 certificate generated"
            )));
        }
        (false, false) if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            return Err(ServeError::Setup(format!(
                "neither {c} nor {k} exists, and inside a pod no development certificate is made (the apiserver \
                 would not trust it): mount the TLS Secret there, or run with --tls-mode managed"
            )));
        }
        (false, false) => {}
    }
    let dir = cert.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dns: Vec<String> = DEV_DNS.iter().map(|d| d.to_string()).collect();
    let bundle = certs::generate(&dns, &DEV_IPS)?;
    certs::write(dir, &bundle)?;
    if dir.join(certs::CERT_FILE) != cert || dir.join(certs::KEY_FILE) != key {
        std::fs::rename(dir.join(certs::CERT_FILE), cert)?;
        std::fs::rename(dir.join(certs::KEY_FILE), key)?;
    }
    Ok(true)
}

/// The two sockets, bound before serving: `serve` binds the configured addresses, tests bind
/// port 0 and read the addresses back.
pub struct Listeners {
    /// The webhook (TLS).
    pub webhook: std::net::TcpListener,
    /// `/healthz`, `/readyz`, `/metrics` (plain HTTP).
    pub probe: std::net::TcpListener,
}

impl Listeners {
    pub fn bind(webhook: SocketAddr, probe: SocketAddr) -> Result<Self, ServeError> {
        let bind =
            |addr: SocketAddr| std::net::TcpListener::bind(addr).map_err(|source| ServeError::Bind { addr, source });
        Ok(Listeners { webhook: bind(webhook)?, probe: bind(probe)? })
    }

    pub fn webhook_addr(&self) -> std::io::Result<SocketAddr> {
        self.webhook.local_addr()
    }

    pub fn probe_addr(&self) -> std::io::Result<SocketAddr> {
        self.probe.local_addr()
    }
}

/// Runs the webhook until SIGTERM or ctrl-c (or `shutdown` resolves), then shuts down gracefully.
/// Binds `options.listen` and `options.probe_listen`; see [`serve_with_listeners`].
pub async fn serve(
    options: ServeOptions,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let listeners = Listeners::bind(options.listen, options.probe_listen)?;
    serve_with_listeners(options, listeners, state, shutdown).await
}

/// [`serve`] on sockets already bound (`options.listen` and `options.probe_listen` are not used).
/// When `shutdown` resolves: readiness drops, `shutdown_delay` later the listener stops accepting,
/// and in-flight requests get `shutdown_timeout` to finish; then this returns.
pub async fn serve_with_listeners(
    options: ServeOptions,
    listeners: Listeners,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let listen = listeners.webhook_addr()?;
    let probe_listen = listeners.probe_addr()?;
    // A template counted for the first time on a large cluster waits behind the admissions. Only
    // where admissions are answered: `reports` judges a whole cluster, and there a thread of its
    // own for each new template, at the lowest priority, made a full read ten times slower.
    crate::core::view::nodes::count_apart_with(crate::core::view::nodes::Apart {
        run: lanes::count_apart,
        pause: lanes::pause,
        // A quarter of the deadline: a count at the request's priority takes milliseconds, and the
        // rest of the review has the other three.
        hand_over_after: state.admission.deadline / 4,
    });
    // Reload loops (TLS files or certificate controller, config file) and the probe server.
    // Stopped when serving ends, so that a server run in-process (tests) leaves nothing behind.
    let mut background = tokio::task::JoinSet::new();
    let tls_config = match options.managed_tls.clone() {
        None => files_tls(&options, listen, &state, &mut background)?,
        Some(managed) => {
            // Not ready until the controller has a certificate whose CA the webhooks trust.
            let client_ca = options.client_ca.as_deref().map(tls::read_client_ca).transpose()?;
            let served = managed_tls::ServedCert::new();
            let tls_config = axum_server::tls_rustls::RustlsConfig::from_config(managed_tls::server_config(
                served.clone(),
                client_ca.as_ref(),
            )?);
            if let (Some(path), Some(ca)) = (options.client_ca.clone(), &client_ca) {
                tracing::info!(client_ca = %path.display(), cas = ca.roots.len(), "client certificates required");
                background.spawn(managed_tls::reload_client_ca(
                    path,
                    options.reload_interval,
                    served.clone(),
                    tls_config.clone(),
                    ca.digest,
                    state.metrics.tls_reloads.clone(),
                ));
            }
            background.spawn(managed_tls::run(managed, served, state.clone(), options.reload_interval));
            tls_config
        }
    };
    if let Some(path) = options.config.clone() {
        background.spawn(reload_config(path, options.reload_interval, state.clone()));
    }

    listeners.probe.set_nonblocking(true)?;
    let probe = tokio::net::TcpListener::from_std(listeners.probe)?;
    let probe_state = state.clone();
    background.spawn(async move {
        if let Err(e) = axum::serve(probe, probe_router(probe_state)).await {
            tracing::error!(error = %e, "probe server stopped");
        }
    });

    let handle = axum_server::Handle::new();
    let listener = listeners.webhook;
    listener.set_nonblocking(true)?;
    tracing::info!(listen = %listen, probe = %probe_listen, "serving");
    let shutdown_state = state.clone();
    let shutdown_handle = handle.clone();
    let (delay, grace) = (options.shutdown_delay, options.shutdown_timeout);
    background.spawn(async move {
        shutdown.await;
        // Readiness first, so endpoints stop routing here before the listener closes.
        shutdown_state.shutting_down.store(true, Ordering::SeqCst);
        tracing::info!(delay_ms = delay.as_millis() as u64, "shutting down: readiness is down");
        tokio::time::sleep(delay).await;
        tracing::info!(
            grace_ms = grace.as_millis() as u64,
            "shutting down: no new connections; in-flight requests finish"
        );
        shutdown_handle.graceful_shutdown(Some(grace));
    });
    let limits = RequestLimits { requests: options.max_concurrent_requests, body_bytes: options.max_body_memory };
    let app = webhook_router(state.clone(), options.request_timeout, limits);
    // A connection holds one of `max_connections` slots from accept to close; over the limit it
    // is closed at once, before any TLS work. The handshake is bounded by its own timeout.
    let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls_config)
        .handshake_timeout(options.tls_handshake_timeout)
        .acceptor(ConnectionLimit {
            permits: Arc::new(tokio::sync::Semaphore::new(
                options.max_connections.clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
        });
    let error_state = state.clone();
    let max_connections = options.max_connections;
    // The request timeout starts once a request is dispatched; until then (a connection that
    // completes the handshake and then sends nothing, or its headers byte by byte) the first
    // request gets the same bound. Later requests on a kept-alive connection are not bounded
    // while idle: hyper's header timeout would also close idle keep-alive connections, racing
    // the apiserver's reuse of them.
    let mut server = axum_server::from_tcp(listener)?
        .acceptor(acceptor)
        .handle(handle)
        .first_request_timeout(options.request_timeout);
    // The apiserver sends its calls to a webhook over one HTTP/2 connection. With hyper's default
    // stream window (1 MiB) a client puts a whole large body on the wire at once, and every
    // ordinary call sent after it waits behind that megabyte being read and decrypted (the
    // hostile benchmark: the ordinary p99 tripled beside 1 MiB bodies). With HTTP/2's own default
    // window a stream sends 64 KiB before the server asks for more, so the other streams' frames
    // pass between a large body's pieces; the connection window keeps 16 such streams moving.
    server.http_builder().http2().initial_stream_window_size(H2_STREAM_WINDOW);
    let served = server
        .accept_error_handler(move |peer: Option<&SocketAddr>, e: &std::io::Error| {
            let peer = peer.map(ToString::to_string).unwrap_or_default();
            if e.get_ref().is_some_and(|e| e.is::<OverConnectionLimit>()) {
                error_state.metrics.rejected.get_or_create(&ReasonLabels { reason: "max-connections" }).inc();
                tracing::debug!(peer, max_connections, "too many connections: closed");
            } else {
                error_state.metrics.tls_handshake_failures.inc();
                // A TCP check that connects and closes says nothing worth a warning.
                if matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset) {
                    tracing::debug!(peer, error = %e, "connection closed before the TLS handshake finished");
                } else {
                    tracing::warn!(peer, error = %e, "TLS handshake failed");
                }
            }
        })
        .serve(app.into_make_service())
        .await;
    background.abort_all();
    served?;
    tracing::info!("stopped");
    Ok(())
}

/// `--tls-mode files`: the certificate from `tls_cert` and `tls_key` (development ones generated
/// first if need be), re-read by a loop in `background` when they change. Ready at once.
fn files_tls(
    options: &ServeOptions,
    listen: SocketAddr,
    state: &Arc<AppState>,
    background: &mut tokio::task::JoinSet<()>,
) -> Result<axum_server::tls_rustls::RustlsConfig, ServeError> {
    if options.generate_dev_certs && ensure_dev_certs(&options.tls_cert, &options.tls_key)? {
        let dir = options.tls_cert.parent().map(|p| p.display().to_string()).unwrap_or_else(|| ".".into());
        tracing::info!(cert = %options.tls_cert.display(), key = %options.tls_key.display(), "generated a development CA and serving certificate");
        eprintln!(
            "ha-guard: neither {cert} nor {key} existed, so a development CA and serving certificate (for {hosts}; \
             for development only) were generated:\n  {dir}/ca.crt\n  {dir}/ca.key\n  {cert}\n  \
             {key}\ncall it with:\n  curl --cacert {dir}/ca.crt -H 'Content-Type: application/json' \
             --data @tests/fixtures/deployment-spread-no-selector.json https://localhost:{port}/validate\n\
             (a cluster's apiserver trusts it only with {dir}/ca.crt as the webhooks' caBundle; in a cluster use \
             --tls-mode managed, cert-manager or `ha-guard certs`)",
            cert = options.tls_cert.display(),
            key = options.tls_key.display(),
            port = listen.port(),
            hosts = DEV_DNS
                .iter()
                .map(|d| d.to_string())
                .chain(DEV_IPS.iter().map(|i| i.to_string()))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    let material = tls::read(&options.tls_cert, &options.tls_key)?;
    let client_ca = options.client_ca.as_deref().map(tls::read_client_ca).transpose()?;
    let rustls_config = tls::server_config_with(&material, client_ca.as_ref(), &options.tls_cert, &options.tls_key)?;
    if let Some(t) = material.not_after {
        state.metrics.tls_not_after.set(t);
    }
    if let Some(ca) = &client_ca {
        tracing::info!(client_ca = %ca.path.display(), cas = ca.roots.len(), "client certificates required");
    }
    let tls_config = axum_server::tls_rustls::RustlsConfig::from_config(rustls_config);
    let digest = tls_digest(&material, client_ca.as_ref());
    background.spawn(reload_tls(options.clone(), tls_config.clone(), digest, state.clone()));
    state.ready.store(true, Ordering::SeqCst);
    Ok(tls_config)
}

/// Over `--max-connections`: the accepted connection is closed at once.
#[derive(Debug, thiserror::Error)]
#[error("over the limit of open connections (--max-connections)")]
struct OverConnectionLimit;

/// An acceptor (under the TLS one) that gives each connection a slot, or refuses it, and turns
/// Nagle's algorithm off on it.
///
/// `TCP_NODELAY`: axum-server leaves Nagle on (its default acceptor sets no socket option), and
/// on HTTP/2, which the apiserver speaks to webhooks, an answer's frames are small writes made
/// while the peer has not yet acknowledged earlier ones: Nagle holds them back for that
/// acknowledgement. Go's servers (Kyverno's, Gatekeeper's) have it off by default.
#[derive(Clone)]
struct ConnectionLimit {
    permits: Arc<tokio::sync::Semaphore>,
}

impl<S> axum_server::accept::Accept<tokio::net::TcpStream, S> for ConnectionLimit {
    type Stream = Limited<tokio::net::TcpStream>;
    type Service = S;
    type Future = std::future::Ready<std::io::Result<(Limited<tokio::net::TcpStream>, S)>>;

    fn accept(&self, stream: tokio::net::TcpStream, service: S) -> Self::Future {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return std::future::ready(Err(std::io::Error::other(OverConnectionLimit)));
        };
        // A socket that refuses the option is still served, only with Nagle's delays.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set on an accepted connection");
        }
        std::future::ready(Ok((Limited { inner: stream, _permit: permit }, service)))
    }
}

/// A connection and its slot, given back when the connection is dropped.
struct Limited<I> {
    inner: I,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Limited<I> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Limited<I> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// What the TLS reload compares: the serving pair and, when required, the client CA file.
fn tls_digest(material: &tls::Material, client_ca: Option<&tls::ClientCa>) -> [u8; 32] {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    hasher.update(material.digest);
    if let Some(ca) = client_ca {
        hasher.update(ca.digest);
    }
    hasher.finalize().into()
}

/// The bytes of the TLS files as they are now (an unreadable file by its error), hashed: what
/// tells [`reload_tls`] that something changed, before anything is parsed.
fn tls_files_seen(options: &ServeOptions) -> [u8; 32] {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    for path in [Some(&options.tls_cert), Some(&options.tls_key), options.client_ca.as_ref()].into_iter().flatten() {
        match std::fs::read(path) {
            Ok(bytes) => hasher.update(&bytes),
            Err(e) => hasher.update(format!("\0{:?}", e.kind())),
        }
    }
    hasher.finalize().into()
}

/// Polls the TLS files and loads them when they change. A change is acted on once, however long
/// the files then stay as they are: loaded (`ha_guard_tls_reloads_total{result="success"}`), or
/// refused with the current certificate kept (`{result="failure"}`) and one warning.
async fn reload_tls(
    options: ServeOptions,
    config: axum_server::tls_rustls::RustlsConfig,
    mut digest: [u8; 32],
    state: Arc<AppState>,
) {
    let counted = |result: &'static str| state.metrics.tls_reloads.get_or_create(&ResultLabels { result }).inc();
    let mut tick = tokio::time::interval(options.reload_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // None: the first look compares the files with what serving started with.
    let mut seen = None;
    loop {
        tick.tick().await;
        let now = tls_files_seen(&options);
        if seen == Some(now) {
            continue;
        }
        seen = Some(now);
        let material = match tls::read(&options.tls_cert, &options.tls_key) {
            Ok(m) => m,
            Err(e) => {
                // A Secret update can be seen half-written; keep the current material.
                counted("failure");
                tracing::warn!(error = %e, "TLS files unreadable; keeping the current certificate");
                continue;
            }
        };
        let client_ca = match options.client_ca.as_deref().map(tls::read_client_ca).transpose() {
            Ok(ca) => ca,
            Err(e) => {
                // Never fall back to accepting every caller: keep the CA (and certificate) in force.
                counted("failure");
                tracing::warn!(error = %e, "client CA unreadable; keeping the current TLS configuration");
                continue;
            }
        };
        let new_digest = tls_digest(&material, client_ca.as_ref());
        if new_digest == digest {
            continue;
        }
        match tls::server_config_with(&material, client_ca.as_ref(), &options.tls_cert, &options.tls_key) {
            Ok(c) => {
                config.reload_from_config(c);
                digest = new_digest;
                counted("success");
                if let Some(t) = material.not_after {
                    state.metrics.tls_not_after.set(t);
                }
                match &client_ca {
                    Some(ca) => {
                        tracing::info!(cert = %options.tls_cert.display(), client_ca = %ca.path.display(), "reloaded the TLS certificate and client CA")
                    }
                    None => tracing::info!(cert = %options.tls_cert.display(), "reloaded the TLS certificate"),
                }
            }
            Err(e) => {
                counted("failure");
                tracing::warn!(error = %e, "new TLS files rejected; keeping the current certificate")
            }
        }
    }
}

pub async fn reload_config(path: PathBuf, interval: Duration, state: Arc<AppState>) {
    let mut last = std::fs::read(&path).ok();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let current = std::fs::read(&path).ok();
        if current == last {
            continue;
        }
        last = current;
        match crate::config_file::load(&path) {
            Ok(c) => {
                state.set_config(c);
                state.metrics.config_reloads.get_or_create(&ResultLabels { result: "success" }).inc();
                tracing::info!(config = %path.display(), "reloaded the configuration");
            }
            Err(e) => {
                state.metrics.config_reloads.get_or_create(&ResultLabels { result: "failure" }).inc();
                tracing::error!(error = %e, "configuration rejected; keeping the previous one");
            }
        }
    }
}

/// Resolves on SIGTERM or ctrl-c.
pub async fn termination_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Config;
    use crate::core::view::StaticSource;
    use crate::server::log_format::LogBuffer;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off_and_take_a_slot() {
        use axum_server::accept::Accept;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limit = ConnectionLimit { permits: Arc::new(tokio::sync::Semaphore::new(1)) };
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        assert!(!stream.nodelay().unwrap(), "an accepted socket starts with Nagle on");
        let (limited, ()) = limit.accept(stream, ()).await.unwrap();
        assert!(limited.inner.nodelay().unwrap(), "TCP_NODELAY is set on the accepted connection");
        // Its slot is held: a second connection over the limit is refused.
        let _second = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let refused = limit.accept(stream, ()).await.err().expect("over the limit");
        assert!(refused.get_ref().is_some_and(|e| e.is::<OverConnectionLimit>()), "{refused}");
        drop(limited);
        let _third = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        assert!(limit.accept(stream, ()).await.is_ok(), "the slot is given back when the connection is dropped");
    }

    /// The admission lines `answer` logs for a fixture of `tests/fixtures/` (in the view of
    /// `view.yaml`), at debug and above, each as `LEVEL decision`.
    fn logged(webhook: Webhook, fixture: &str) -> Vec<String> {
        lines(webhook, fixture, None, Config::default())
            .iter()
            .map(|l| {
                let level = l.split_whitespace().next().unwrap_or_default();
                let decision =
                    l.split("decision=").nth(1).and_then(|d| d.split_whitespace().next()).unwrap_or_default();
                format!("{level} {}", decision.trim_matches('"'))
            })
            .collect()
    }

    /// The admission lines of answering `fixture` (its body changed by `edit`) under `config`.
    fn lines(
        webhook: Webhook,
        fixture: &str,
        edit: Option<&dyn Fn(&mut serde_json::Value)>,
        config: Config,
    ) -> Vec<String> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
        let mut body = std::fs::read(format!("{dir}{fixture}")).unwrap();
        if let Some(edit) = edit {
            let mut v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            edit(&mut v);
            body = serde_json::to_vec(&v).unwrap();
        }
        let view = crate::core::testing::view(&std::fs::read_to_string(format!("{dir}view.yaml")).unwrap(), false);
        let state = AppState::new(Arc::new(StaticSource(view)), config);
        let buffer = LogBuffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .without_time()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            answer(&state, webhook, &body, review::value_bound(&body), &Progress::new(), &Default::default());
        });
        buffer.text().lines().filter(|l| l.contains(" admission ")).map(str::to_string).collect()
    }

    /// The line names who wrote (their groups bounded), the object, the operation, dry-run, the
    /// verdict and each rule with its action and the exception that allowed it, never the object.
    #[test]
    fn an_admission_line_says_who_wrote_what_and_why_it_was_allowed() {
        let config = crate::core::registry::parse_config(
            "exceptions:\n  - name: legacy-spread\n    rules: [spread-selector-missing]\n    match: {namespaces: [shop], names: [web]}\n    reason: migrating\n",
            "test.yaml",
        )
        .unwrap();
        let many: Vec<String> = (0..12).map(|i| format!("team-{i}")).collect();
        let edit = move |v: &mut serde_json::Value| {
            v["request"]["userInfo"] = serde_json::json!({"username": "jane@example.com", "groups": many.clone()});
            v["request"]["dryRun"] = serde_json::json!(true);
        };
        let lines = lines(Webhook::Validate, "deployment-spread-no-selector.json", Some(&edit), config.clone());
        let [line] = &lines[..] else { panic!("{lines:?}") };
        for part in [
            "object=shop/web",
            "operation=CREATE",
            "user=jane@example.com",
            "groups=team-0,team-1,team-2,team-3,team-4,team-5,team-6,team-7,+4 ",
            "dry_run=true",
            "decision=\"warned\"",
            "rules=spread-selector-missing=allowed:legacy-spread,replicas-colocated=warn ",
        ] {
            assert!(line.contains(part), "{part} in {line}");
        }
        assert!(!line.contains("containers") && !line.contains("app.kubernetes.io/name"), "no content: {line}");
        // Counted by exception.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
        let body = std::fs::read(format!("{dir}deployment-spread-no-selector.json")).unwrap();
        let state = AppState::new(Arc::new(StaticSource(crate::core::view::Index::new())), config);
        answer(&state, Webhook::Validate, &body, review::value_bound(&body), &Progress::new(), &Default::default());
        let text = state.metrics.encode();
        assert!(
            text.contains(
                "ha_guard_exception_matches_total{exception=\"legacy-spread\",rule=\"spread-selector-missing\"} 1"
            ),
            "{text}"
        );
    }

    /// A denial, a warning or a patch is logged at info; a plain allow and a skip at debug: one
    /// line per admission either way.
    #[test]
    fn admissions_that_tell_the_user_something_are_logged_at_info_the_rest_at_debug() {
        assert_eq!(logged(Webhook::Validate, "deployment-spread-no-selector.json"), ["INFO denied"]);
        assert_eq!(logged(Webhook::Validate, "deployment-spread-schedule-anyway-no-selector.json"), ["INFO warned"]);
        assert_eq!(logged(Webhook::Mutate, "deployment-spread-no-selector.json"), ["INFO patched"]);
        assert_eq!(logged(Webhook::Validate, "pdb-ok.json"), ["DEBUG allowed"]);
        assert_eq!(logged(Webhook::Mutate, "hpa-ok.json"), ["DEBUG allowed"]);
        assert_eq!(logged(Webhook::Validate, "configmap-create.json"), ["DEBUG skipped"]);
    }
}

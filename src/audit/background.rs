//! `serve --audit-interval`: the audit of `ha-guard audit`, run by the webhook in the background
//! (as Kyverno's background scan and Gatekeeper's audit run), its findings written where the
//! policy-report tooling reads them: one `wgpolicyk8s.io/v1alpha2` PolicyReport named `ha-guard`
//! per namespace, and one ClusterPolicyReport `ha-guard` for the cluster-scoped objects (webhook
//! configurations).
//!
//! - **What is read**: the audit's own paged lists ([`super::read`]), once per run, not the live
//!   view. The live view keeps projections (not the objects the rules judge) and no pods, while the
//!   posture rules need pods and PDB status; one paged read per interval is what `ha-guard audit`
//!   does, so the background reports and the command always agree. The live view says *when*: a
//!   change it sees starts a run early (at most one per [`DEBOUNCE`], and at most a fifth of the time).
//! - **One replica at a time**: a `coordination.k8s.io/v1` Lease `ha-guard-audit` in ha-guard's
//!   namespace, held with kube-lease-manager (acquire when free or expired, renew before expiry,
//!   conflicts resolved by the apiserver). Only the holder reads, writes and sets the gauge; a
//!   replica that loses the Lease clears its gauge.
//! - **Results**: deny → `fail`, warn → `warn`, an exempted (`allowed`) finding → `skip` with the
//!   exemption and its reason in the message. No `pass` results: one per object and rule would
//!   dwarf the findings; the summary counts pass as 0. A namespace with judged objects and no
//!   finding gets a report with no results (clean is said, not guessed); the reports of other
//!   namespaces are deleted. A report is written only when its results changed or the cluster's copy
//!   differs from what was written (each full read lists the reports; a watch of its own reports
//!   sees one deleted or edited by hand at once), so a fixed object's result is gone at the next
//!   run, a tampered report is restored, and an unchanged cluster costs no writes.
//! - **Stalls show**: a kind the holder's view cannot follow (a 403 after an RBAC change) or that a
//!   namespace's list is refused is an `error` result in the reports and a failed run; the holder
//!   is leading, for the metrics, only once its view has synced.
//! - **Metrics**: `ha_guard_audit_findings{namespace,rule,action}` from the last run.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::read::LISTINGS;
use crate::check::Report;
use crate::core::finding::{Decision, Finding};
use crate::core::model::ObjectRef;
use crate::core::view::ViewSource;
use crate::live::LiveSource;
use crate::live::changes::{ChangeLog, Dirty};
use crate::server::metrics::{AuditLabels, CauseLabels, ChangeLabels, ResultLabels, ScopeLabels};
use crate::server::state::AppState;

/// The Lease that elects the replica that audits.
pub const LEASE: &str = "ha-guard-audit";
/// The name of every report written, and the `policy` and `source` of every result.
pub const REPORT: &str = "ha-guard";
/// The label that marks the reports ha-guard owns (and may delete).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "ha-guard");
/// Server-side apply field manager of the reports.
const FIELD_MANAGER: &str = "ha-guard";
/// How long changes are gathered, by default, before the namespaces they touch are re-judged (a
/// rollout or an apply is many events).
pub const DEBOUNCE: Duration = Duration::from_secs(2);
/// As client-go's leader election: a lease of 15 s, renewed 5 s before it runs out.
const LEASE_SECONDS: u64 = 15;
const RENEW_BEFORE_SECONDS: u64 = 5;
/// How long a stopping replica waits for the Lease's release (the pod's grace period is longer).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);
/// kube-lease-manager's election task, which releases the Lease when its receiver is dropped.
type LeaseTask =
    tokio::task::JoinHandle<Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>>;
/// How long the holder waits for its view to sync before it audits anyway (and says what it
/// cannot read).
const SYNC_WAIT: Duration = Duration::from_secs(30);

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Items per list request, as `ha-guard audit`'s default.
const PAGE: u32 = 500;
/// Page size of the listing of ha-guard's own reports (each may be up to [`REPORT_BYTES_MAX`]).
const REPORT_PAGE: u32 = 20;

/// How the background audit runs.
pub struct Background {
    pub client: Client,
    /// Time between runs (not 0: 0 turns the audit off before this is made).
    pub interval: Duration,
    /// ha-guard's namespace, where the Lease is.
    pub namespace: String,
    /// This replica's name in the Lease.
    pub identity: String,
    /// How long changes are gathered before the namespaces they touch are judged again.
    pub debounce: Duration,
    /// A report's size limit ([`REPORT_BYTES_MAX`]; tests lower it).
    pub report_bytes_max: usize,
    /// Which report format is written.
    pub report_api: ReportApi,
    /// Becomes true when the process is told to stop: the Lease is released, so that another
    /// replica takes over at once rather than when the Lease runs out.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

/// The report formats the background audit writes. Both carry the same results (the OpenReports
/// API is the policy working group's format moved to its own group), so only where they go differs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportApi {
    /// PolicyReport / ClusterPolicyReport, read by Policy Reporter and Kyverno's tooling.
    #[default]
    #[value(name = "wgpolicyk8s.io/v1alpha2")]
    WgPolicy,
    /// Report / ClusterReport, the successor format (Kyverno 1.15, Policy Reporter 3).
    #[value(name = "openreports.io/v1alpha1")]
    OpenReports,
}

impl ReportApi {
    /// The report resource: namespaced, or the cluster-scoped one.
    pub fn resource(self, cluster: bool) -> ApiResource {
        let (group, version, kind, plural) = match (self, cluster) {
            (ReportApi::WgPolicy, false) => ("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports"),
            (ReportApi::WgPolicy, true) => {
                ("wgpolicyk8s.io", "v1alpha2", "ClusterPolicyReport", "clusterpolicyreports")
            }
            (ReportApi::OpenReports, false) => ("openreports.io", "v1alpha1", "Report", "reports"),
            (ReportApi::OpenReports, true) => ("openreports.io", "v1alpha1", "ClusterReport", "clusterreports"),
        };
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: format!("{group}/{version}"),
            kind: kind.into(),
            plural: plural.into(),
        }
    }
}

/// This replica's identity: the pod's name (its hostname) and the process id, unique also for
/// two replicas on one host (tests).
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "ha-guard".into());
    format!("{host}_{}", std::process::id())
}

/// `fail`, `warn` or `skip`.
pub fn result_of(action: Decision) -> &'static str {
    match action {
        Decision::Deny => "fail",
        Decision::Warn => "warn",
        Decision::Allowed => "skip",
    }
}

/// The object reference of a result's resource.
fn resource_ref(id: &ObjectRef) -> Value {
    let api_version = LISTINGS.iter().find(|l| l.kind == id.kind).map(|l| l.api_version).unwrap_or("");
    let mut r = json!({"apiVersion": api_version, "kind": id.kind.as_str(), "name": id.name});
    if !id.namespace.is_empty() {
        r["namespace"] = json!(id.namespace);
    }
    r
}

/// The results of a report's findings, in their order: each secondary finding of a cause (see
/// [`causes`](crate::core::causes)) carries the property `causedBy`, naming its primary as
/// `[rule] Kind namespace/name` (a report's properties are strings).
fn results_of(report: &Report) -> impl Iterator<Item = (&Finding, Value)> {
    let refs: Vec<&Finding> = report.findings.iter().map(|l| &l.finding).collect();
    let primaries = crate::core::causes::primaries(&refs);
    report.findings.iter().zip(primaries).map(move |(l, p)| (&l.finding, result(&l.finding, p.map(|p| refs[p]))))
}

/// One result (without its timestamp, added when written).
fn result(f: &Finding, cause: Option<&Finding>) -> Value {
    let mut message = f.message();
    if f.action == Decision::Allowed {
        let why: Vec<String> = f.notes.iter().map(ToString::to_string).collect();
        message = format!("{}. {message}", why.join("; "));
    }
    let mut properties = json!({"action": f.action.as_str(), "path": f.path});
    if let Some((name, reason)) = f.notes.iter().find_map(|n| n.exception()) {
        properties["exception"] = json!(name);
        properties["exceptionReason"] = json!(reason);
    }
    if let Some(cause) = cause {
        properties["causedBy"] = json!(crate::core::causes::cause_label(cause));
    }
    json!({
        "policy": REPORT,
        "rule": f.rule.id,
        "result": result_of(f.action),
        "resources": [resource_ref(&f.object)],
        "message": message,
        "source": REPORT,
        "scored": true,
        "properties": properties,
    })
}

/// The results of `report` by namespace (`""`: cluster-scoped), with an entry for every namespace
/// that has a judged object, and always one for the cluster.
pub fn results_by_namespace(report: &Report) -> BTreeMap<String, Vec<Value>> {
    let mut by: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    by.insert(String::new(), Vec::new());
    for (_, id) in &report.checked {
        by.entry(id.namespace.clone()).or_default();
    }
    for (f, r) in results_of(report) {
        by.entry(f.object.namespace.clone()).or_default().push(r);
    }
    by
}

/// The `summary` of a report's results.
pub fn summary(results: &[Value]) -> Value {
    let count = |r: &str| results.iter().filter(|v| v["result"] == r).count();
    json!({"pass": 0, "fail": count("fail"), "warn": count("warn"), "error": count("error"), "skip": count("skip")})
}

/// The whole report object for namespace `namespace` (`""`: the cluster-scoped report), its results
/// stamped with `now` (seconds since the epoch).
pub fn report_object(api: ReportApi, namespace: &str, results: &[Value], now: i64) -> Value {
    let cluster = namespace.is_empty();
    let ar = api.resource(cluster);
    let mut metadata = json!({"name": REPORT, "labels": {MANAGED_BY.0: MANAGED_BY.1}});
    if !cluster {
        metadata["namespace"] = json!(namespace);
    }
    let stamped: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r["timestamp"] = json!({"seconds": now, "nanos": 0});
            r
        })
        .collect();
    json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": metadata,
        "summary": summary(results),
        "results": stamped,
    })
}

/// The gauge's values: findings by (namespace, rule, action).
pub fn counts(report: &Report) -> BTreeMap<AuditLabels, i64> {
    let mut counts = BTreeMap::new();
    for l in &report.findings {
        let f = &l.finding;
        let key = AuditLabels { namespace: f.object.namespace.clone(), rule: f.rule.id, action: f.action.as_str() };
        *counts.entry(key).or_insert(0) += 1;
    }
    counts
}

/// The size a report is kept under: etcd refuses objects over 1.5 MiB (its default
/// `--max-request-bytes`), and a report near that is slow to write and to read. Past it the
/// results are cut, the most severe kept, and the cut said.
pub const REPORT_BYTES_MAX: usize = 1_000_000;
/// The annotation that says a report was cut.
pub const TRUNCATED: &str = "ha-guard.io/truncated";

/// Results to keep within `budget` bytes (their JSON): fail, then error, warn and skip, in their
/// order otherwise. `None` when all fit.
pub fn fit(results: &[Value], budget: usize) -> Option<Vec<Value>> {
    let size = |r: &Value| r.to_string().len() + 1;
    if results.iter().map(size).sum::<usize>() <= budget {
        return None;
    }
    let rank = |r: &Value| match r["result"].as_str() {
        Some("fail") => 0,
        Some("error") => 1,
        Some("warn") => 2,
        _ => 3,
    };
    let mut order: Vec<&Value> = results.iter().collect();
    order.sort_by_key(|r| rank(r));
    let mut kept = Vec::new();
    let mut used = 0;
    for r in order {
        let n = size(r);
        if used + n > budget {
            break;
        }
        used += n;
        kept.push(r.clone());
    }
    Some(kept)
}

/// A result for an object that could not be read (`error`: the report says what it could not
/// judge rather than leaving it out).
fn unreadable_result(resource: Value, why: &str) -> Value {
    json!({
        "policy": REPORT,
        "rule": "unreadable",
        "result": "error",
        "resources": [resource],
        "message": format!("ha-guard cannot read this object, so it was not judged: {why}"),
        "source": REPORT,
        "scored": true,
    })
}

/// A result for a kind the audit cannot read (`error`, rule `unreadable-kind`): the report's
/// results that need it are missing or stale until it can.
fn unreadable_kind_result(kind: &str, why: &str) -> Value {
    let api_version = LISTINGS.iter().find(|l| l.kind.as_str() == kind).map_or("v1", |l| l.api_version);
    json!({
        "policy": REPORT,
        "rule": "unreadable-kind",
        "result": "error",
        "resources": [{"apiVersion": api_version, "kind": kind}],
        "message": format!(
            "ha-guard cannot read the cluster's {kind} objects, so the results that need them are missing or stale: {why}. \
             Give the audit's ServiceAccount get, list and watch on them (the chart's ClusterRole does)"
        ),
        "source": REPORT,
        "scored": true,
    })
}

/// The resource of an unreadable object from its API path (`apis/apps/v1/namespaces/ns/deployments/x`).
/// The result of a namespace its exemption or mode `off` keeps from being judged: one `skip`
/// (rule `namespace-skipped`) naming the namespace, how many objects it holds and the key that
/// skips it, so the report says the namespace was left alone rather than looking clean, and no
/// row reads as an exempted finding.
fn skipped_result(namespace: &str, objects: usize, why: &str) -> Value {
    json!({
        "policy": REPORT,
        "rule": "namespace-skipped",
        "result": "skip",
        "resources": [{"apiVersion": "v1", "kind": "Namespace", "name": namespace}],
        "message": format!(
            "not judged: {why}; its {objects} object{} {} not judged (`ha-guard audit` says the same)",
            if objects == 1 { "" } else { "s" },
            if objects == 1 { "is" } else { "are" }
        ),
        "source": REPORT,
        "scored": false,
        "properties": {"action": "skipped", "objects": objects.to_string()},
    })
}

fn resource_of_path(path: &str) -> Value {
    let parts: Vec<&str> = path.split('/').collect();
    let name = parts.last().copied().unwrap_or_default();
    let plural = parts.len().checked_sub(2).and_then(|i| parts.get(i)).copied().unwrap_or_default();
    match LISTINGS.iter().find(|l| l.plural == plural) {
        Some(l) => {
            let namespace = parts.iter().position(|p| *p == "namespaces").and_then(|i| parts.get(i + 1));
            let mut r = json!({"apiVersion": l.api_version, "kind": l.kind.as_str(), "name": name});
            if let Some(ns) = namespace {
                r["namespace"] = json!(ns);
            }
            r
        }
        None => json!({"name": name}),
    }
}

/// A report this holder wrote: a hash of the results it computed (unchanged ones are not written
/// again) and the fingerprint of what the apiserver stored ([`stored_fingerprint`]), to tell the
/// cluster's copy from a copy someone else changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WrittenReport {
    results: u64,
    stored: u64,
}

/// What the holder remembers between runs.
#[derive(Default)]
struct Written {
    /// The reports last written, by namespace (`""`: the cluster's report).
    reports: HashMap<String, WrittenReport>,
    /// Label sets of the gauge now set, by namespace.
    gauge: HashMap<String, Vec<AuditLabels>>,
    /// The report CRDs were found missing (said once, not at every run).
    missing_crd: bool,
    /// Change counts already added to the metric, by slot.
    changes_counted: HashMap<usize, (u64, u64)>,
    /// Unreadable pod events already counted.
    unreadable_pods_counted: u64,
}

/// The reports named `ha-guard` the cluster holds, by namespace (`""`: the cluster's report): the
/// fingerprint of each ([`stored_fingerprint`]).
type StoredReports = HashMap<String, u64>;

/// A watched report: its namespace (`""`: the cluster's) and the fingerprint of what the cluster
/// now holds (`None`: deleted).
type ReportEvent = (String, Option<u64>);

/// What a report holds that the audit decides: its results without their timestamps, and its
/// summary; the same for the copy the apiserver answered a write with, one listed or one watched.
/// Keys are hashed in order, whatever order the JSON has them in.
pub fn stored_fingerprint(report: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    fn feed(v: &Value, h: &mut impl Hasher, skip_timestamp: bool) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().filter(|k| !(skip_timestamp && *k == "timestamp")).collect();
                keys.sort();
                h.write_u8(b'{');
                for k in keys {
                    k.hash(h);
                    feed(&m[k], h, false);
                }
                h.write_u8(b'}');
            }
            Value::Array(items) => {
                h.write_u8(b'[');
                for i in items {
                    feed(i, h, skip_timestamp);
                }
                h.write_u8(b']');
            }
            other => other.to_string().hash(h),
        }
    }
    let mut h = std::hash::DefaultHasher::new();
    // Each result's own timestamp is the time of the write, not what it says.
    feed(&report["results"], &mut h, true);
    feed(&report["summary"], &mut h, false);
    h.finish()
}

/// What a run knows before it judges its scopes.
#[derive(Clone, Copy)]
struct RunFacts<'a> {
    /// The kinds the view cannot follow now, and why ([`LiveSource::unfollowed`]).
    unfollowed: &'a [(&'static str, String)],
    /// The reports the cluster holds (a full read), or `None` (a run of changes).
    stored: Option<&'a StoredReports>,
}

/// What one run did.
#[derive(Default)]
struct Tally {
    failed: bool,
    scopes: usize,
    writes: usize,
    deletes: usize,
    findings: usize,
    /// Where a run's time goes: reading the scopes from the apiserver, judging them, writing
    /// the reports (said in the run's log line: a slow full read names its part).
    reading: std::time::Duration,
    judging: std::time::Duration,
    writing: std::time::Duration,
}

/// How a report write ended.
enum Wrote {
    Written,
    Unchanged,
    /// The namespace was deleted (or is being deleted) since it was read.
    NamespaceGone,
    CrdMissing,
    Failed,
}

/// Aborts the view's watch tasks when the holder stops holding.
struct Watches(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Watches {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

fn cause(state: &AppState, cause: &'static str, n: u64) {
    if n > 0 {
        state.metrics.audit_errors.get_or_create(&CauseLabels { cause }).inc_by(n);
    }
}

/// A 404 of a write into a namespace that is gone, not of a report resource the cluster lacks; or
/// the 403 of a namespace being deleted.
fn namespace_gone(s: &kube::core::Status) -> bool {
    let about_namespace =
        s.details.as_ref().is_some_and(|d| d.kind == "namespaces") || s.message.starts_with("namespaces \"");
    (s.code == 404 && about_namespace) || (s.code == 403 && s.message.contains("being terminated"))
}

impl Background {
    /// Runs until told to stop: waits for the Lease, then audits while it holds it; on stop,
    /// releases the Lease.
    pub async fn run(self, state: Arc<AppState>) {
        let mut stop = self.stop.clone();
        let mut lease_task = None;
        tokio::select! {
            _ = self.elect_and_audit(&state, &mut lease_task) => {}
            _ = stop.wait_for(|stopping| *stopping) => {}
        }
        // Dropping the election's receiver (inside `elect_and_audit`) made kube-lease-manager's
        // task release the Lease; `lease_task` is that task.
        if let Some(task) = lease_task {
            match tokio::time::timeout(RELEASE_TIMEOUT, task).await {
                Ok(Ok(Ok(_))) => {
                    tracing::info!(identity = %self.identity, lease = LEASE, "background audit: stopped, the Lease released")
                }
                Ok(Ok(Err(e))) => {
                    tracing::warn!(error = %e, lease = LEASE, "background audit: stopped; cannot release the Lease, it runs out on its own")
                }
                Ok(Err(_)) | Err(_) => tracing::warn!(
                    lease = LEASE,
                    "background audit: stopped; the Lease was not released in time, it runs out on its own"
                ),
            }
        }
        state.metrics.audit_leader.set(0);
    }

    async fn elect_and_audit(&self, state: &Arc<AppState>, lease_task: &mut Option<LeaseTask>) {
        let state = state.clone();
        let manager = loop {
            let built = kube_lease_manager::LeaseManagerBuilder::new(self.client.clone(), LEASE)
                .with_namespace(self.namespace.clone())
                .with_identity(self.identity.clone())
                .with_duration(LEASE_SECONDS)
                .with_grace(RENEW_BEFORE_SECONDS)
                .with_field_manager(format!("ha-guard-audit-{}", self.identity))
                .build()
                .await;
            match built {
                Ok(m) => break m,
                Err(e) => {
                    tracing::warn!(error = %e, lease = LEASE, namespace = %self.namespace,
                        "background audit: cannot use its Lease (the chart's Role grants get/create/patch on it); trying again");
                    tokio::time::sleep(self.interval.min(Duration::from_secs(30))).await;
                }
            }
        };
        let (mut leader, task) = manager.watch().await;
        *lease_task = Some(task);
        let mut written = Written::default();
        loop {
            while !*leader.borrow_and_update() {
                self.step_down(&state, &mut written);
                if leader.changed().await.is_err() {
                    tracing::error!("background audit: the Lease election stopped; no more audits");
                    return;
                }
            }
            // Leading, for the metrics, once the view has synced (`follow`); stalled from now on
            // unless a full read succeeds.
            if state.metrics.audit_last_full_read.get() == 0 {
                state.metrics.audit_last_full_read.set(unix_now());
            }
            tracing::info!(identity = %self.identity, lease = LEASE, "background audit: this replica holds the Lease");
            tokio::select! {
                _ = self.follow(&state, &mut written) => {}
                r = leader.changed() => if r.is_err() {
                    tracing::error!("background audit: the Lease election stopped; no more audits");
                    self.step_down(&state, &mut written);
                    return;
                },
            }
        }
    }

    /// While holding the Lease: follow the cluster (a view of its own, pods included, dropped
    /// with the Lease), read it all once per interval, and in between re-judge the namespaces
    /// where something the rules read changed.
    async fn follow(&self, state: &Arc<AppState>, written: &mut Written) {
        let log = Arc::new(ChangeLog::new());
        let live = Arc::new(LiveSource::for_audit(log.clone()).recheck_unserved_every(self.interval));
        let mut tasks = live.start(self.client.clone());
        tasks.push(live.start_pods(self.client.clone()));
        let (report_events, mut reports_changed) = tokio::sync::mpsc::unbounded_channel();
        tasks.extend(self.watch_reports(report_events));
        let _watches = Watches(tasks);
        let waiting = Instant::now();
        while !live.synced() && waiting.elapsed() < SYNC_WAIT {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if live.synced() {
            tracing::info!(elapsed_ms = waiting.elapsed().as_millis() as u64, "background audit: view synced");
        } else {
            // Auditing anyway: the reports name the kinds it cannot read, the runs fail, and the
            // alerts fire; waiting in silence would look healthy.
            let kinds: Vec<&str> = live.unfollowed().into_iter().map(|(k, _)| k).collect();
            tracing::warn!(kinds = ?kinds, "background audit: its view has not synced (see the watch errors above); auditing without those kinds");
        }
        loop {
            let started = Instant::now();
            // The full read covers what changed up to now.
            log.take();
            self.run_once(state, &live, None, written).await;
            state.metrics.audit_leader.set(i64::from(live.synced()));
            // The change counts reach the metrics every second, whether or not they start work.
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(started + self.interval) => break,
                    _ = log.changed() => {
                        // A rollout or an apply is many events: gather them.
                        tokio::time::sleep(self.debounce).await;
                        let mut dirty = log.take();
                        self.take_changed_reports(&mut reports_changed, &mut dirty, written);
                        if !dirty.is_empty() {
                            self.run_once(state, &live, Some(dirty), written).await;
                        }
                    }
                    Some(change) = reports_changed.recv() => {
                        let mut dirty = Dirty::default();
                        Self::report_changed(change, &mut dirty, written);
                        if !dirty.is_empty() {
                            tokio::time::sleep(self.debounce).await;
                            let mut more = log.take();
                            more.namespaces.extend(dirty.namespaces);
                            more.cluster |= dirty.cluster;
                            self.take_changed_reports(&mut reports_changed, &mut more, written);
                            self.run_once(state, &live, Some(more), written).await;
                        }
                    }
                    _ = tick.tick() => {}
                }
                count_changes(state, &log, &live, written);
            }
        }
    }

    /// One run: everything (`None`), or the dirty scopes.
    async fn run_once(&self, state: &AppState, live: &Arc<LiveSource>, dirty: Option<Dirty>, written: &mut Written) {
        let started = std::time::Instant::now();
        let full = dirty.is_none();
        let (namespaces, cluster) = match dirty {
            None => (live.namespaces(), true),
            Some(d) => (d.namespaces.into_iter().collect(), d.cluster),
        };
        let mut tally = Tally::default();
        // A full read compares with what the cluster holds, not only with what this replica last
        // wrote: a report deleted, edited or emptied by hand is written again.
        let stored = if full { self.list_stored(written).await } else { None };
        // Kinds the view cannot follow (a watch refused or failing for a while): every report of
        // the run says so, and the run fails (`HaGuardAuditStalled` once no full read succeeds).
        let unfollowed = live.unfollowed();
        if !unfollowed.is_empty() {
            cause(state, "kind-unreadable", unfollowed.len() as u64);
            tally.failed = true;
            for (kind, why) in &unfollowed {
                tracing::warn!(kind, error = %why, "background audit: its view cannot follow a kind; the reports say so");
            }
        }
        let run = RunFacts { unfollowed: &unfollowed, stored: stored.as_ref() };
        for ns in &namespaces {
            self.judge_scope(state, live, ns, &run, written, &mut tally).await;
        }
        if cluster {
            self.judge_scope(state, live, "", &run, written, &mut tally).await;
        }
        if full {
            if let Some(stored) = &stored {
                self.delete_stale(stored, written, &mut tally).await;
            }
            state.metrics.audit_reads.get_or_create(&ScopeLabels { scope: "cluster" }).inc();
        } else {
            state
                .metrics
                .audit_reads
                .get_or_create(&ScopeLabels { scope: "namespace" })
                .inc_by(namespaces.len() as u64);
        }
        let result = if tally.failed { "failure" } else { "success" };
        state.metrics.audit_runs.get_or_create(&ResultLabels { result }).inc();
        if !tally.failed {
            state.metrics.audit_last_success.set(unix_now());
            if full {
                state.metrics.audit_last_full_read.set(unix_now());
            }
        }
        tracing::info!(
            run = if full { "full" } else { "changes" },
            result,
            scopes = tally.scopes,
            findings = tally.findings,
            reports_written = tally.writes,
            reports_deleted = tally.deletes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            reading_ms = tally.reading.as_millis() as u64,
            judging_ms = tally.judging.as_millis() as u64,
            writing_ms = tally.writing.as_millis() as u64,
            "background audit done"
        );
    }

    /// Reads the objects of `namespace` (`""`: the cluster-scoped ones), judges them against the
    /// view, and writes their report if it changed.
    async fn judge_scope(
        &self,
        state: &AppState,
        live: &Arc<LiveSource>,
        namespace: &str,
        run: &RunFacts<'_>,
        written: &mut Written,
        tally: &mut Tally,
    ) {
        let RunFacts { unfollowed, stored } = *run;
        tally.scopes += 1;
        let scope = (!namespace.is_empty()).then_some(namespace);
        let reading = std::time::Instant::now();
        let read = super::read::read_scope(&self.client, scope, PAGE, &live.unserved()).await;
        tally.reading += reading.elapsed();
        let super::read::ScopeRead { subjects, unreadable, refused } = match read {
            Ok(read) => read,
            Err(e) => {
                cause(state, "read", 1);
                tally.failed = true;
                let at = if namespace.is_empty() {
                    "the cluster-scoped objects".to_string()
                } else {
                    format!("namespace {namespace}")
                };
                tracing::warn!(error = %e, "background audit: cannot read {at}; its report keeps the last results");
                return;
            }
        };
        cause(state, "decode", unreadable.len() as u64);
        if !refused.is_empty() {
            cause(state, "kind-unreadable", refused.len() as u64);
            tally.failed = true;
            for (kind, why) in &refused {
                tracing::warn!(namespace, kind = kind.as_str(), error = %why, "background audit: cannot list a kind; judged without it, its report says so");
            }
        }
        // A kind this scope may not list may hold objects: the report says it could not look.
        let has_subjects = !subjects.is_empty() || !refused.is_empty();
        let config = state.config();
        let view = live.clone();
        let unreadable_paths = unreadable.clone();
        let judging = std::time::Instant::now();
        let judged = tokio::task::spawn_blocking(move || {
            let refs: Vec<&super::read::Listed> = subjects.iter().collect();
            let mut report = None;
            view.with_view(&mut |v| report = Some(super::audit_subjects(&refs, &unreadable_paths, v, &config)));
            report.unwrap_or_default()
        })
        .await;
        tally.judging += judging.elapsed();
        let Ok(report) = judged else {
            tracing::error!(namespace, "background audit: judging stopped unexpectedly");
            tally.failed = true;
            return;
        };
        let mut results: Vec<Value> =
            results_of(&report).filter(|(f, _)| f.object.namespace == namespace).map(|(_, r)| r).collect();
        tally.findings += results.len();
        for (path, why) in &unreadable {
            results.push(unreadable_result(resource_of_path(path), why));
        }
        // A namespace the configuration leaves alone: one result naming why, not a row per object
        // that reads as an exempted finding.
        let skipped: Vec<&(ObjectRef, String)> =
            report.skipped.iter().filter(|(id, _)| id.namespace == namespace).collect();
        if let Some((_, why)) = skipped.first() {
            results.push(skipped_result(namespace, skipped.len(), why));
        }
        let unfollowed = unfollowed.iter().filter(|_| has_subjects || !unreadable.is_empty());
        for (kind, why) in refused.iter().map(|(k, why)| (k.as_str(), why)).chain(unfollowed.map(|(k, why)| (*k, why)))
        {
            results.push(unreadable_kind_result(kind, why));
        }
        if !namespace.is_empty() {
            for (pod, why) in live.unreadable_pods_in(namespace) {
                let resource = json!({"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": namespace});
                results.push(unreadable_result(resource, &why));
            }
        }
        // The gauge of this scope: set what is, remove what is gone.
        let counts = counts(&report);
        let counts: BTreeMap<AuditLabels, i64> = counts.into_iter().filter(|(k, _)| k.namespace == namespace).collect();
        for gone in written.gauge.remove(namespace).unwrap_or_default() {
            if !counts.contains_key(&gone) {
                state.metrics.audit_findings.remove(&gone);
            }
        }
        for (key, n) in &counts {
            state.metrics.audit_findings.get_or_create(key).set(*n);
        }
        written.gauge.insert(namespace.to_string(), counts.into_keys().collect());
        let writing = std::time::Instant::now();
        self.settle_report(state, namespace, has_subjects, &unreadable, results, stored, written, tally).await;
        tally.writing += writing.elapsed();
    }

    /// Writes, or deletes, the report of `namespace` as its results say.
    #[allow(clippy::too_many_arguments)]
    async fn settle_report(
        &self,
        state: &AppState,
        namespace: &str,
        has_subjects: bool,
        unreadable: &[(String, String)],
        results: Vec<Value>,
        stored: Option<&StoredReports>,
        written: &mut Written,
        tally: &mut Tally,
    ) {
        // A namespace with nothing to judge has no report (the cluster always has one).
        if !has_subjects && unreadable.is_empty() && !namespace.is_empty() && results.is_empty() {
            if written.reports.remove(namespace).is_some() {
                if self.delete_report(namespace).await {
                    tally.deletes += 1;
                } else {
                    tally.failed = true;
                }
            }
            return;
        }
        match self.write_report(state, namespace, results, stored, written).await {
            Wrote::Written => tally.writes += 1,
            Wrote::Unchanged | Wrote::CrdMissing => {}
            Wrote::NamespaceGone => {
                written.reports.remove(namespace);
                for gone in written.gauge.remove(namespace).unwrap_or_default() {
                    state.metrics.audit_findings.remove(&gone);
                }
            }
            Wrote::Failed => tally.failed = true,
        }
    }

    /// Writes the report of `namespace` unless its results are the ones last written and the
    /// cluster still holds what was written: `stored` (a full read's listing of the reports, by
    /// namespace) says what it holds; without it (a run of changes), the reports' watch has said
    /// so ([`Background::report_changed`]).
    async fn write_report(
        &self,
        state: &AppState,
        namespace: &str,
        results: Vec<Value>,
        stored: Option<&StoredReports>,
        written: &mut Written,
    ) -> Wrote {
        let hash = crate::live::changes::fingerprint(&Value::Array(results.clone()).to_string());
        if let Some(last) = written.reports.get(namespace)
            && last.results == hash
            && stored.is_none_or(|s| s.get(namespace) == Some(&last.stored))
        {
            return Wrote::Unchanged;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let mut object = report_object(self.report_api, namespace, &results, now);
        let limit = self.report_bytes_max;
        if let Some(kept) = fit(&results, limit) {
            let at = if namespace.is_empty() { "the cluster".to_string() } else { format!("namespace {namespace}") };
            tracing::warn!(
                kept = kept.len(),
                results = results.len(),
                "background audit: the report of {at} is over {REPORT_BYTES_MAX} bytes; the most severe results are kept, the summary counts them all"
            );
            cause(state, "report-truncated", 1);
            let stamped = report_object(self.report_api, namespace, &kept, now);
            object["results"] = stamped["results"].clone();
            let all = if namespace.is_empty() {
                "ha-guard audit".to_string()
            } else {
                format!("ha-guard audit -n {namespace}")
            };
            object["metadata"]["annotations"] = json!({TRUNCATED: format!(
                "{} of {} results kept (a report over {limit} bytes is cut; the summary counts all): {all} lists every one",
                kept.len(), results.len())});
        }
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(self.client.clone(), &self.report_api.resource(true))
        } else {
            Api::namespaced_with(self.client.clone(), namespace, &self.report_api.resource(false))
        };
        match api.patch(REPORT, &apply, &Patch::Apply(&object)).await {
            Ok(stored) => {
                state.metrics.audit_report_writes.inc();
                let stored = stored_fingerprint(&serde_json::to_value(&stored).unwrap_or_default());
                written.reports.insert(namespace.to_string(), WrittenReport { results: hash, stored });
                written.missing_crd = false;
                Wrote::Written
            }
            Err(kube::Error::Api(s)) if namespace_gone(&s) => {
                cause(state, "namespace-gone", 1);
                tracing::info!(namespace, "background audit: the namespace was deleted since it was read; no report");
                Wrote::NamespaceGone
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                // Not a failure: a cluster may go without the report CRDs (the chart's crds/ not
                // applied); the gauge still has the findings.
                cause(state, "crd-missing", 1);
                if !written.missing_crd {
                    let ar = self.report_api.resource(false);
                    tracing::info!(
                        "background audit: the {} CRDs ({}) are not installed, so no report is written (the chart \
                         installs them); the metric ha_guard_audit_findings still shows the findings",
                        ar.kind,
                        ar.api_version
                    );
                }
                written.missing_crd = true;
                Wrote::CrdMissing
            }
            Err(e) => {
                cause(state, "write", 1);
                let at = if namespace.is_empty() { "cluster".to_string() } else { format!("namespace {namespace}") };
                tracing::warn!(error = %e, "background audit: cannot write the report of {at}");
                Wrote::Failed
            }
        }
    }

    /// Deletes ha-guard's report in `namespace`; false when that failed.
    async fn delete_report(&self, namespace: &str) -> bool {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &self.report_api.resource(false));
        match api.delete(REPORT, &DeleteParams::default()).await {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 404 => true,
            Err(e) => {
                tracing::warn!(error = %e, namespace, "background audit: cannot delete a stale report");
                false
            }
        }
    }

    /// Watches the reports named `ha-guard` that carry ha-guard's label, both scopes: each event
    /// is sent as (namespace, `""` for the cluster's report; the fingerprint of what is stored,
    /// `None` when it was deleted). The tasks retry as the live view's watches do.
    fn watch_reports(
        &self,
        events: tokio::sync::mpsc::UnboundedSender<ReportEvent>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        use kube::runtime::watcher::{self, Event};
        let owned = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
        [false, true]
            .into_iter()
            .map(|cluster| {
                let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &self.report_api.resource(cluster));
                let config = watcher::Config::default().labels(&owned);
                let events = events.clone();
                let kind = self.report_api.resource(cluster).kind;
                tokio::spawn(async move {
                    let watch = || watcher::watcher(api.clone(), config.clone());
                    let send = |event: Event<DynamicObject>| {
                        let (r, gone) = match event {
                            Event::Apply(r) | Event::InitApply(r) => (r, false),
                            Event::Delete(r) => (r, true),
                            Event::Init | Event::InitDone => return,
                        };
                        if r.metadata.name.as_deref() != Some(REPORT) {
                            return;
                        }
                        let ns = if cluster { String::new() } else { r.metadata.namespace.clone().unwrap_or_default() };
                        let fingerprint =
                            (!gone).then(|| stored_fingerprint(&serde_json::to_value(&r).unwrap_or_default()));
                        let _ = events.send((ns, fingerprint));
                    };
                    // The report CRDs may be missing: the writes say so; the watch looks again.
                    let retry = crate::live::retry::RetryPolicy::default();
                    let missing = |e: &watcher::Error| crate::live::is_not_found(e);
                    crate::live::retry::follow(watch, kind.as_str(), retry, retry.max, send, missing, |_| {}).await;
                })
            })
            .collect()
    }

    /// A watched report that differs from what this holder last wrote there (deleted, edited,
    /// emptied) is forgotten and its scope made dirty, so that the next run writes it again. Its
    /// own writes come back equal.
    fn report_changed((namespace, stored): ReportEvent, dirty: &mut Dirty, written: &mut Written) {
        let Some(last) = written.reports.get(&namespace) else { return };
        if stored == Some(last.stored) {
            return;
        }
        tracing::info!(
            namespace,
            change = if stored.is_none() { "deleted" } else { "changed" },
            "background audit: its report was changed by someone else; writing it again"
        );
        written.reports.remove(&namespace);
        if namespace.is_empty() {
            dirty.cluster = true;
        } else {
            dirty.namespaces.insert(namespace);
        }
    }

    /// Adds the reports changed since the last look to `dirty`.
    fn take_changed_reports(
        &self,
        changes: &mut tokio::sync::mpsc::UnboundedReceiver<ReportEvent>,
        dirty: &mut Dirty,
        written: &mut Written,
    ) {
        while let Ok(change) = changes.try_recv() {
            Self::report_changed(change, dirty, written);
        }
    }

    /// Lists the reports named `ha-guard` that carry ha-guard's label, both scopes, in pages; `None`
    /// when that fails (the run then compares with what it last wrote, and deletes nothing).
    async fn list_stored(&self, written: &Written) -> Option<StoredReports> {
        if written.missing_crd {
            return None;
        }
        let owned = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
        let mut stored = StoredReports::new();
        for cluster in [false, true] {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &self.report_api.resource(cluster));
            let mut lp = ListParams::default().labels(&owned).limit(REPORT_PAGE);
            loop {
                let page = match api.list(&lp).await {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(error = %e, "background audit: cannot list its reports; each is compared with what was last written");
                        return None;
                    }
                };
                for r in page.items {
                    if r.metadata.name.as_deref() != Some(REPORT) {
                        continue;
                    }
                    let ns = if cluster { String::new() } else { r.metadata.namespace.clone().unwrap_or_default() };
                    stored.insert(ns, stored_fingerprint(&serde_json::to_value(&r).unwrap_or_default()));
                }
                match page.metadata.continue_ {
                    Some(token) if !token.is_empty() => lp = lp.continue_token(&token),
                    _ => break,
                }
            }
        }
        Some(stored)
    }

    /// After a full read: deletes ha-guard's reports of namespaces with nothing to judge now.
    async fn delete_stale(&self, stored: &StoredReports, written: &mut Written, tally: &mut Tally) {
        if written.missing_crd {
            return;
        }
        for ns in stored.keys().filter(|ns| !ns.is_empty() && !written.reports.contains_key(*ns)) {
            if self.delete_report(ns).await {
                tally.deletes += 1;
            } else {
                tally.failed = true;
            }
        }
    }

    /// Not (or no longer) the holder: the gauge is the holder's to show.
    fn step_down(&self, state: &AppState, written: &mut Written) {
        if state.metrics.audit_leader.get() == 1 {
            tracing::info!(identity = %self.identity, "background audit: another replica holds the Lease");
        }
        state.metrics.audit_leader.set(0);
        for (_, keys) in std::mem::take(&mut written.gauge) {
            for key in keys {
                state.metrics.audit_findings.remove(&key);
            }
        }
        written.reports.clear();
        written.changes_counted.clear();
        written.unreadable_pods_counted = 0;
    }
}

/// Adds the change log's new counts to the metrics.
fn count_changes(state: &AppState, log: &ChangeLog, live: &LiveSource, written: &mut Written) {
    for (slot, changed, ignored) in log.counts() {
        let before = written.changes_counted.insert(slot, (changed, ignored)).unwrap_or_default();
        let kind = crate::live::slot_name(slot);
        let m = &state.metrics.audit_changes;
        if changed > before.0 {
            m.get_or_create(&ChangeLabels { kind, effect: "rejudge" }).inc_by(changed - before.0);
        }
        if ignored > before.1 {
            m.get_or_create(&ChangeLabels { kind, effect: "ignored" }).inc_by(ignored - before.1);
        }
    }
    let unreadable = live.unreadable_pod_events();
    cause(state, "decode", unreadable.saturating_sub(written.unreadable_pods_counted));
    written.unreadable_pods_counted = unreadable;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_report_is_fingerprinted_by_its_results_and_summary_not_their_timestamps() {
        let result = json!({"policy": "ha-guard", "rule": "pdb-missing", "result": "warn", "message": "m"});
        let written = report_object(ReportApi::WgPolicy, "shop", std::slice::from_ref(&result), 100);
        let later = report_object(ReportApi::WgPolicy, "shop", std::slice::from_ref(&result), 200);
        assert_eq!(stored_fingerprint(&written), stored_fingerprint(&later), "a later write of the same results");
        // The apiserver answers with its own key order and metadata.
        let mut reordered =
            json!({"results": later["results"], "summary": later["summary"], "metadata": {"resourceVersion": "9"}});
        reordered["results"][0] = json!({"message": "m", "result": "warn", "rule": "pdb-missing", "policy": "ha-guard",
            "timestamp": {"nanos": 0, "seconds": 7}});
        assert_eq!(stored_fingerprint(&written), stored_fingerprint(&reordered));
        let mut edited = written.clone();
        edited["results"][0]["result"] = json!("skip");
        assert_ne!(stored_fingerprint(&written), stored_fingerprint(&edited), "an edited result");
        let mut emptied = written.clone();
        emptied["results"] = json!([]);
        assert_ne!(stored_fingerprint(&written), stored_fingerprint(&emptied), "emptied results");
        let mut summary = written.clone();
        summary["summary"]["warn"] = json!(0);
        assert_ne!(stored_fingerprint(&written), stored_fingerprint(&summary), "an edited summary");
    }

    #[test]
    fn a_report_changed_by_someone_else_is_forgotten_and_its_scope_made_dirty() {
        let mut written = Written::default();
        written.reports.insert("shop".into(), WrittenReport { results: 1, stored: 10 });
        written.reports.insert(String::new(), WrittenReport { results: 2, stored: 20 });
        let mut dirty = Dirty::default();
        // Its own write coming back, and a report it never wrote: nothing.
        Background::report_changed(("shop".into(), Some(10)), &mut dirty, &mut written);
        Background::report_changed(("calm".into(), None), &mut dirty, &mut written);
        assert!(dirty.is_empty());
        assert_eq!(written.reports.len(), 2);
        // Edited, then the cluster's report deleted.
        Background::report_changed(("shop".into(), Some(11)), &mut dirty, &mut written);
        Background::report_changed((String::new(), None), &mut dirty, &mut written);
        assert_eq!(dirty.namespaces.iter().collect::<Vec<_>>(), ["shop"]);
        assert!(dirty.cluster);
        assert!(written.reports.is_empty(), "both are written again, whatever their results");
    }

    #[test]
    fn a_skipped_namespace_is_one_result_naming_its_key_not_a_row_per_object() {
        let why = "namespace kube-system is exempt in the configuration: exemptNamespaces";
        let r = skipped_result("kube-system", 11, why);
        assert_eq!((r["rule"].as_str(), r["result"].as_str()), (Some("namespace-skipped"), Some("skip")));
        assert_eq!(r["resources"], json!([{"apiVersion": "v1", "kind": "Namespace", "name": "kube-system"}]));
        assert_eq!(
            r["message"],
            "not judged: namespace kube-system is exempt in the configuration: exemptNamespaces; its 11 objects are \
             not judged (`ha-guard audit` says the same)"
        );
        assert_eq!(r["scored"], false);
        assert!(skipped_result("a", 1, "w")["message"].as_str().unwrap().contains("its 1 object is not judged"));
    }

    #[test]
    fn a_kind_that_cannot_be_read_is_an_error_result_naming_it_and_its_api() {
        let r = unreadable_kind_result("Pod", "pods is forbidden: User \"x\" cannot list resource \"pods\"");
        assert_eq!(r["result"], "error");
        assert_eq!(r["rule"], "unreadable-kind");
        assert_eq!(r["resources"], json!([{"apiVersion": "v1", "kind": "Pod"}]));
        let message = r["message"].as_str().unwrap();
        assert!(message.contains("cannot read the cluster's Pod objects"), "{message}");
        assert!(message.contains("cannot list resource \"pods\""), "the apiserver's answer: {message}");
        assert!(message.contains("get, list and watch"), "the fix: {message}");
        let d = unreadable_kind_result("Deployment", "forbidden");
        assert_eq!(d["resources"][0]["apiVersion"], "apps/v1");
    }

    #[test]
    fn results_map_deny_warn_allowed_to_fail_warn_skip() {
        assert_eq!(result_of(Decision::Deny), "fail");
        assert_eq!(result_of(Decision::Warn), "warn");
        assert_eq!(result_of(Decision::Allowed), "skip");
    }

    #[test]
    fn a_report_counts_its_results_and_stamps_them() {
        let results = vec![
            json!({"rule": "a", "result": "fail"}),
            json!({"rule": "b", "result": "warn"}),
            json!({"rule": "c", "result": "warn"}),
            json!({"rule": "d", "result": "skip"}),
        ];
        let r = report_object(ReportApi::WgPolicy, "shop", &results, 1_700_000_000);
        assert_eq!(r["kind"], "PolicyReport");
        assert_eq!(r["metadata"]["namespace"], "shop");
        assert_eq!(r["metadata"]["labels"]["app.kubernetes.io/managed-by"], "ha-guard");
        assert_eq!(r["summary"], json!({"pass": 0, "fail": 1, "warn": 2, "error": 0, "skip": 1}));
        assert_eq!(r["results"][0]["timestamp"]["seconds"], 1_700_000_000);
        let c = report_object(ReportApi::WgPolicy, "", &[], 1);
        assert_eq!(c["kind"], "ClusterPolicyReport");
        assert!(c["metadata"].get("namespace").is_none());
        assert_eq!(c["summary"]["fail"], 0);
    }

    #[test]
    fn an_openreports_report_has_the_same_results_under_its_own_kind() {
        let results = vec![json!({"rule": "a", "result": "fail"})];
        let wg = report_object(ReportApi::WgPolicy, "shop", &results, 7);
        let open = report_object(ReportApi::OpenReports, "shop", &results, 7);
        assert_eq!(
            (open["apiVersion"].as_str(), open["kind"].as_str()),
            (Some("openreports.io/v1alpha1"), Some("Report"))
        );
        assert_eq!((open["results"].clone(), open["summary"].clone()), (wg["results"].clone(), wg["summary"].clone()));
        let cluster = report_object(ReportApi::OpenReports, "", &[], 7);
        assert_eq!(cluster["kind"], "ClusterReport");
    }

    /// Each report resource written is one the chart's crds/ defines (group, version, kind, plural,
    /// scope), so a switch of `--audit-report-api` never writes into a CRD the chart lacks.
    #[test]
    fn every_report_resource_is_defined_by_the_charts_crds() {
        let crds = [
            include_str!("../../charts/ha-guard/crds/policyreports.yaml"),
            include_str!("../../charts/ha-guard/crds/clusterpolicyreports.yaml"),
            include_str!("../../charts/ha-guard/crds/openreports-reports.yaml"),
            include_str!("../../charts/ha-guard/crds/openreports-clusterreports.yaml"),
        ];
        for api in [ReportApi::WgPolicy, ReportApi::OpenReports] {
            for cluster in [false, true] {
                let r = api.resource(cluster);
                let scope = if cluster { "Cluster" } else { "Namespaced" };
                let defined = crds.iter().any(|crd| {
                    crd.contains(&format!("  name: {}.{}\n", r.plural, r.group))
                        && crd.contains(&format!("    kind: {}\n", r.kind))
                        && crd.contains(&format!("  scope: {scope}\n"))
                        && crd.contains(&format!("    - name: {}\n", r.version))
                });
                assert!(defined, "no CRD in charts/ha-guard/crds defines {} {} ({scope})", r.api_version, r.kind);
            }
        }
    }

    /// A report as `check --complete` makes one (the audit's is the same type, from the cluster).
    fn report(yaml: &str) -> Report {
        let mut loaded = crate::manifest::Loaded::default();
        crate::manifest::add_text(&mut loaded, "t.yaml".into(), None, yaml.into(), false);
        let options = crate::check::Options { complete: true, namespace: "default".into(), ..Default::default() };
        crate::check::check(&loaded, &options)
    }

    const SHOP: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: lone, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: lone}}
  template:
    metadata: {labels: {app: lone}}
    spec: {containers: [{name: c, image: i}]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: lone, namespace: shop}
spec: {minAvailable: 1, selector: {matchLabels: {app: lone}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: legacy
  namespace: shop
  annotations: {ha-guard.io/allow-pdb-blocks-eviction: singleton by design}
spec: {minAvailable: 1, selector: {matchLabels: {app: legacy}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: legacy, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: legacy}}
  template:
    metadata: {labels: {app: legacy}}
    spec: {containers: [{name: c, image: i}]}
---
apiVersion: v1
kind: Service
metadata: {name: calm, namespace: calm}
spec: {selector: {app: none}}
";

    #[test]
    fn a_finding_caused_by_another_names_it_in_its_results_properties() {
        use crate::core::model::Kind;
        use crate::core::rules::pdb::PDB_BLOCKS_EVICTION;
        use crate::core::rules::posture::PDB_DISRUPTIONS_BLOCKED;
        let pdb = ObjectRef::new(Kind::PodDisruptionBudget, "shop", "lone");
        let lone = ObjectRef::new(Kind::Deployment, "shop", "lone");
        let finding = |rule, action| crate::check::Located {
            finding: Finding {
                rule,
                action,
                object: pdb.clone(),
                anchor: pdb.clone(),
                path: "spec.minAvailable".into(),
                what: "w.".into(),
                fix: "f.".into(),
                related: vec![lone.clone()],
                notes: Vec::new(),
                from_view: false,
            },
            origin: crate::audit::origin("apis/policy/v1/namespaces/shop/poddisruptionbudgets/lone"),
            missing: None,
            snippet: None,
        };
        let report = Report {
            findings: vec![
                finding(&PDB_DISRUPTIONS_BLOCKED, Decision::Warn),
                finding(&PDB_BLOCKS_EVICTION, Decision::Deny),
            ],
            ..Default::default()
        };
        let shop = &results_by_namespace(&report)["shop"];
        assert_eq!(shop.len(), 2, "grouping drops no result: {shop:#?}");
        assert_eq!(shop[0]["rule"], "pdb-disruptions-blocked");
        assert_eq!(shop[0]["properties"]["causedBy"], "[pdb-blocks-eviction] PodDisruptionBudget shop/lone");
        assert_eq!(shop[1]["result"], "fail", "the primary keeps its own result");
        assert!(shop[1]["properties"].get("causedBy").is_none(), "{:#}", shop[1]);
    }

    #[test]
    fn every_finding_is_a_result_in_its_namespaces_report() {
        let report = report(SHOP);
        let by = results_by_namespace(&report);
        assert_eq!(by.keys().map(String::as_str).collect::<Vec<_>>(), ["", "calm", "shop"], "{by:?}");
        assert_eq!(by[""], Vec::<Value>::new(), "the cluster's report, with no result");
        let shop = &by["shop"];
        assert_eq!(shop.len(), report.findings.iter().filter(|l| l.finding.object.namespace == "shop").count());
        let lone = shop
            .iter()
            .find(|r| r["rule"] == "pdb-blocks-eviction" && r["resources"][0]["name"] == "lone")
            .expect("lone's finding");
        assert_eq!(lone["result"], "fail");
        assert_eq!(lone["policy"], "ha-guard");
        assert_eq!(lone["source"], "ha-guard");
        assert_eq!(lone["properties"]["path"], "spec.minAvailable");
        assert_eq!(
            lone["resources"][0],
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "name": "lone", "namespace": "shop"})
        );
        let legacy = shop.iter().find(|r| r["resources"][0]["name"] == "legacy").expect("legacy's finding");
        assert_eq!(legacy["result"], "skip");
        let message = legacy["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("exempted by ") && message.contains("singleton by design"), "{message}");
        // The gauge: the same findings, by namespace, rule and action.
        let counts = counts(&report);
        let key = |rule: &'static str, action: &'static str| AuditLabels { namespace: "shop".into(), rule, action };
        assert_eq!(counts.get(&key("pdb-blocks-eviction", "deny")), Some(&1));
        assert_eq!(counts.get(&key("pdb-blocks-eviction", "allowed")), Some(&1));
        assert_eq!(counts.values().sum::<i64>(), report.findings.len() as i64);
    }

    #[test]
    fn a_resource_is_named_with_its_api_version() {
        use crate::core::model::Kind;
        let d = resource_ref(&ObjectRef::new(Kind::Deployment, "shop", "web"));
        assert_eq!(d, json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "shop"}));
        let w = resource_ref(&ObjectRef::new(Kind::ValidatingWebhookConfiguration, "", "v"));
        assert_eq!(w["apiVersion"], "admissionregistration.k8s.io/v1");
        assert!(w.get("namespace").is_none());
    }

    #[test]
    fn a_report_over_its_size_keeps_the_most_severe_results() {
        let r = |result: &str, i: usize| json!({"rule": format!("r{i}"), "result": result, "message": "x".repeat(100)});
        let results: Vec<Value> = (0..10).map(|i| r(if i % 3 == 0 { "fail" } else { "warn" }, i)).collect();
        assert_eq!(fit(&results, 100_000), None, "all fit");
        let one = results[0].to_string().len() + 1;
        let kept = fit(&results, one * 5).expect("cut");
        assert_eq!(kept.len(), 5);
        let fails = kept.iter().filter(|r| r["result"] == "fail").count();
        assert_eq!(fails, 4, "every fail first: {kept:?}");
        assert_eq!(kept[4]["rule"], "r1", "then the warnings in their order");
    }

    #[test]
    fn a_vanished_namespace_is_not_a_missing_crd() {
        let status = |code: u16, message: &str, kind: Option<&str>| {
            let mut s = kube::core::Status::failure(message, "NotFound").with_code(code);
            s.details = kind.map(|k| {
                serde_json::from_value::<kube::core::response::StatusDetails>(json!({"kind": k})).expect("details")
            });
            s
        };
        assert!(namespace_gone(&status(404, "namespaces \"shop\" not found", Some("namespaces"))));
        assert!(namespace_gone(&status(404, "namespaces \"shop\" not found", None)));
        assert!(namespace_gone(&status(
            403,
            "policyreports.wgpolicyk8s.io \"ha-guard\" is forbidden: unable to create new content in namespace shop because it is being terminated",
            None
        )));
        assert!(!namespace_gone(&status(404, "the server could not find the requested resource", None)), "no CRD");
        assert!(!namespace_gone(&status(403, "forbidden: User cannot patch", None)), "RBAC");
    }

    #[test]
    fn an_unreadable_object_is_an_error_result_naming_it() {
        let r = unreadable_result(
            resource_of_path("apis/apps/v1/namespaces/shop/deployments/x"),
            "spec.replicas: invalid type",
        );
        assert_eq!(r["result"], "error");
        assert_eq!(r["rule"], "unreadable");
        assert_eq!(
            r["resources"][0],
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "namespace": "shop"})
        );
        assert!(r["message"].as_str().unwrap().contains("spec.replicas: invalid type"));
        let hook = resource_of_path("apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/v");
        assert_eq!(hook["kind"], "ValidatingWebhookConfiguration");
        assert!(hook.get("namespace").is_none());
    }
}

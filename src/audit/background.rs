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
//!   namespaces are deleted. A report is written only when its results changed, so a fixed object's
//!   result is gone at the next run, and an unchanged cluster costs no writes.
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
/// Items per list request, as `ha-guard audit`'s default.
const PAGE: u32 = 500;

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

/// One result (without its timestamp, added when written).
fn result(f: &Finding) -> Value {
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
    for l in &report.findings {
        by.entry(l.finding.object.namespace.clone()).or_default().push(result(&l.finding));
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

/// The resource of an unreadable object from its API path (`apis/apps/v1/namespaces/ns/deployments/x`).
/// The result of an object its namespace's exemption or mode `off` keeps from being judged: a
/// `skip` (rule `namespace-skipped`), so the report says the namespace was left alone rather than
/// looking clean.
fn skipped_result(id: &ObjectRef, why: &str) -> Value {
    json!({
        "policy": REPORT,
        "rule": "namespace-skipped",
        "result": "skip",
        "resources": [resource_ref(id)],
        "message": format!("not judged: {why}"),
        "source": REPORT,
        "scored": false,
        "properties": {"action": "skipped"},
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

/// What the holder remembers between runs.
#[derive(Default)]
struct Written {
    /// A hash of the results last written, by namespace (`""`: the cluster's report): unchanged
    /// ones are not written again.
    reports: HashMap<String, u64>,
    /// Label sets of the gauge now set, by namespace.
    gauge: HashMap<String, Vec<AuditLabels>>,
    /// The report CRDs were found missing (said once, not at every run).
    missing_crd: bool,
    /// Change counts already added to the metric, by slot.
    changes_counted: HashMap<usize, (u64, u64)>,
    /// Unreadable pod events already counted.
    unreadable_pods_counted: u64,
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
            state.metrics.audit_leader.set(1);
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
        let _watches = Watches(tasks);
        let waiting = Instant::now();
        let mut said = false;
        while !live.synced() {
            if !said && waiting.elapsed() > Duration::from_secs(30) {
                tracing::warn!(
                    "background audit: waiting for its view of the cluster to sync (see the watch errors above)"
                );
                said = true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tracing::info!(elapsed_ms = waiting.elapsed().as_millis() as u64, "background audit: view synced");
        loop {
            let started = Instant::now();
            // The full read covers what changed up to now.
            log.take();
            self.run_once(state, &live, None, written).await;
            // The change counts reach the metrics every second, whether or not they start work.
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(started + self.interval) => break,
                    _ = log.changed() => {
                        // A rollout or an apply is many events: gather them.
                        tokio::time::sleep(self.debounce).await;
                        let dirty = log.take();
                        if !dirty.is_empty() {
                            self.run_once(state, &live, Some(dirty), written).await;
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
        for ns in &namespaces {
            self.judge_scope(state, live, ns, written, &mut tally).await;
        }
        if cluster {
            self.judge_scope(state, live, "", written, &mut tally).await;
        }
        if full {
            self.delete_stale(written, &mut tally).await;
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
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            state.metrics.audit_last_success.set(now as i64);
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
        written: &mut Written,
        tally: &mut Tally,
    ) {
        tally.scopes += 1;
        let scope = (!namespace.is_empty()).then_some(namespace);
        let reading = std::time::Instant::now();
        let read = super::read::read_scope(&self.client, scope, PAGE, &live.unserved()).await;
        tally.reading += reading.elapsed();
        let (subjects, unreadable) = match read {
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
        let has_subjects = !subjects.is_empty();
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
        let mut results: Vec<Value> = report
            .findings
            .iter()
            .filter(|l| l.finding.object.namespace == namespace)
            .map(|l| result(&l.finding))
            .collect();
        tally.findings += results.len();
        for (path, why) in &unreadable {
            results.push(unreadable_result(resource_of_path(path), why));
        }
        for (id, why) in report.skipped.iter().filter(|(id, _)| id.namespace == namespace) {
            results.push(skipped_result(id, why));
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
        self.settle_report(state, namespace, has_subjects, &unreadable, results, written, tally).await;
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
        match self.write_report(state, namespace, results, written).await {
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

    /// Writes the report of `namespace` unless its results are the ones last written.
    async fn write_report(
        &self,
        state: &AppState,
        namespace: &str,
        results: Vec<Value>,
        written: &mut Written,
    ) -> Wrote {
        let hash = crate::live::changes::fingerprint(&Value::Array(results.clone()).to_string());
        if written.reports.get(namespace) == Some(&hash) {
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
            Ok(_) => {
                state.metrics.audit_report_writes.inc();
                written.reports.insert(namespace.to_string(), hash);
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

    /// After a full read: deletes ha-guard's reports of namespaces with nothing to judge now.
    async fn delete_stale(&self, written: &mut Written, tally: &mut Tally) {
        if written.missing_crd {
            return;
        }
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &self.report_api.resource(false));
        let owned = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
        match api.list_metadata(&owned).await {
            Ok(list) => {
                for r in list.items {
                    let ns = r.metadata.namespace.clone().unwrap_or_default();
                    if r.metadata.name.as_deref() != Some(REPORT) || written.reports.contains_key(&ns) {
                        continue;
                    }
                    if self.delete_report(&ns).await {
                        tally.deletes += 1;
                    } else {
                        tally.failed = true;
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "background audit: cannot list its reports to delete stale ones"),
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

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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::progress::Progress;
use super::read::{LISTINGS, ReadOptions};
use crate::check::Report;
use crate::core::finding::{Decision, Finding};
use crate::core::model::ObjectRef;
use crate::server::metrics::AuditLabels;
use crate::server::state::AppState;

/// The Lease that elects the replica that audits.
pub const LEASE: &str = "ha-guard-audit";
/// The name of every report written, and the `policy` and `source` of every result.
pub const REPORT: &str = "ha-guard";
/// The label that marks the reports ha-guard owns (and may delete).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "ha-guard");
/// Server-side apply field manager of the reports.
const FIELD_MANAGER: &str = "ha-guard";
/// At most one run this often after changes (a rollout is many changes).
pub const DEBOUNCE: Duration = Duration::from_secs(10);
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
    /// Signalled on a change in the live view: a run comes early.
    pub changes: Option<Arc<Notify>>,
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
    json!({
        "policy": REPORT,
        "rule": f.rule.id,
        "result": result_of(f.action),
        "resources": [resource_ref(&f.object)],
        "message": message,
        "source": REPORT,
        "scored": true,
        "properties": {"action": f.action.as_str(), "path": f.path},
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
    json!({"pass": 0, "fail": count("fail"), "warn": count("warn"), "error": 0, "skip": count("skip")})
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

/// What the holder remembers between runs.
#[derive(Default)]
struct Written {
    /// Results (unstamped) last written, by namespace: unchanged ones are not written again.
    reports: BTreeMap<String, Vec<Value>>,
    /// Label sets of the gauge now set.
    gauge: BTreeSet<AuditLabels>,
    /// The report CRDs were found missing (said once, not at every run).
    missing_crd: bool,
}

impl Background {
    /// Runs until told to stop: waits for the Lease, then audits every interval (and after changes)
    /// while it holds it; on stop, releases the Lease.
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
        let debounce = DEBOUNCE.min(self.interval);
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
            // While holding the Lease: run, then wait for the interval, or a change (debounced).
            let holding = async {
                loop {
                    let ran = Instant::now();
                    self.audit_once(&state, &mut written).await;
                    // A busy cluster changes all the time: early runs leave the apiserver at least
                    // four times the time a run takes.
                    let debounce = debounce.max(ran.elapsed() * 5).min(self.interval);
                    let changed = async {
                        match &self.changes {
                            Some(n) => n.notified().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = tokio::time::sleep_until(ran + self.interval) => {}
                        _ = changed => tokio::time::sleep_until(ran + debounce).await,
                    }
                }
            };
            tokio::select! {
                _ = holding => {}
                r = leader.changed() => if r.is_err() {
                    tracing::error!("background audit: the Lease election stopped; no more audits");
                    self.step_down(&state, &mut written);
                    return;
                },
            }
        }
    }

    /// Not (or no longer) the holder: the gauge is the holder's to show.
    fn step_down(&self, state: &AppState, written: &mut Written) {
        if state.metrics.audit_leader.get() == 1 {
            tracing::info!(identity = %self.identity, "background audit: another replica holds the Lease");
        }
        state.metrics.audit_leader.set(0);
        for key in std::mem::take(&mut written.gauge) {
            state.metrics.audit_findings.remove(&key);
        }
        written.reports.clear();
    }

    async fn audit_once(&self, state: &AppState, written: &mut Written) {
        let started = std::time::Instant::now();
        let options = ReadOptions { namespace: None, selector: None, page: PAGE, templates: false };
        let cluster = match super::read(&self.client, &options, &Progress::new(false)).await {
            Ok(c) => c,
            Err(e) => {
                state
                    .metrics
                    .audit_runs
                    .get_or_create(&crate::server::metrics::ResultLabels { result: "failure" })
                    .inc();
                tracing::warn!(error = %e, "background audit: cannot read the cluster; the reports keep the last run's results");
                return;
            }
        };
        let config = state.config();
        let report = tokio::task::spawn_blocking(move || super::audit(&cluster, &config)).await;
        let Ok(report) = report else {
            tracing::error!("background audit: the audit stopped unexpectedly");
            return;
        };
        // The gauge: set what is, remove what is gone.
        let counts = counts(&report);
        for gone in written.gauge.iter().filter(|k| !counts.contains_key(*k)) {
            state.metrics.audit_findings.remove(gone);
        }
        for (key, n) in &counts {
            state.metrics.audit_findings.get_or_create(key).set(*n);
        }
        written.gauge = counts.into_keys().collect();
        let wanted = results_by_namespace(&report);
        let (writes, deletes) = self.write_reports(state, &wanted, written).await;
        state.metrics.audit_runs.get_or_create(&crate::server::metrics::ResultLabels { result: "success" }).inc();
        tracing::info!(
            findings = report.findings.len(),
            objects = report.objects,
            namespaces = wanted.len() - 1,
            reports_written = writes,
            reports_deleted = deletes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "background audit done"
        );
    }

    /// Writes the reports whose results changed and deletes ha-guard's reports of namespaces that
    /// have none now; returns (written, deleted).
    async fn write_reports(
        &self,
        state: &AppState,
        wanted: &BTreeMap<String, Vec<Value>>,
        written: &mut Written,
    ) -> (usize, usize) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let (mut writes, mut deletes) = (0, 0);
        for (ns, results) in wanted {
            if written.reports.get(ns) == Some(results) {
                continue;
            }
            let object = report_object(self.report_api, ns, results, now);
            let api: Api<DynamicObject> = if ns.is_empty() {
                Api::all_with(self.client.clone(), &self.report_api.resource(true))
            } else {
                Api::namespaced_with(self.client.clone(), ns, &self.report_api.resource(false))
            };
            match api.patch(REPORT, &apply, &Patch::Apply(&object)).await {
                Ok(_) => {
                    writes += 1;
                    state.metrics.audit_report_writes.inc();
                    written.reports.insert(ns.clone(), results.clone());
                    written.missing_crd = false;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    // Not an error: a cluster may go without the report CRDs (the chart's crds/ not
                    // applied); the gauge still has the findings.
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
                    return (writes, deletes);
                }
                Err(e) => {
                    let at = if ns.is_empty() { "cluster".to_string() } else { format!("namespace {ns}") };
                    tracing::warn!(error = %e, "background audit: cannot write the report of {at}");
                }
            }
        }
        // Reports of namespaces with nothing judged any more (the last object deleted).
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &self.report_api.resource(false));
        let owned = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
        match api.list_metadata(&owned).await {
            Ok(list) => {
                for r in list.items {
                    let ns = r.metadata.namespace.clone().unwrap_or_default();
                    if r.metadata.name.as_deref() != Some(REPORT) || wanted.contains_key(&ns) {
                        continue;
                    }
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(self.client.clone(), &ns, &self.report_api.resource(false));
                    match api.delete(REPORT, &DeleteParams::default()).await {
                        Ok(_) => deletes += 1,
                        Err(kube::Error::Api(s)) if s.code == 404 => {}
                        Err(e) => {
                            tracing::warn!(error = %e, namespace = %ns, "background audit: cannot delete a stale report")
                        }
                    }
                    written.reports.remove(&ns);
                }
            }
            Err(e) => tracing::warn!(error = %e, "background audit: cannot list its reports to delete stale ones"),
        }
        (writes, deletes)
    }
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
}

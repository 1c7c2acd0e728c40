//! The metrics of DESIGN.md §5, in Prometheus text format on the probe port, and more: overload
//! refusals, TLS reloads, build info and the standard `process_*` metrics ([`process`]).
//!
//! Every label value comes from a fixed set (a request's kind outside it counts as `other`), so
//! no caller can mint series; and the counters whose label sets are known up front start at 0,
//! so that `increase()` sees their first event.

pub mod process;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::core::finding::Decision;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub webhook: &'static str,
    /// [`kind_label`] of the request's kind.
    pub kind: &'static str,
    pub operation: &'static str,
    pub decision: &'static str,
    pub dry_run: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: &'static str,
}

/// `ha_guard_exception_matches_total`: findings an exception of the configuration allowed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExceptionRuleLabels {
    pub exception: String,
    pub rule: &'static str,
}

/// `ha_guard_exception_expiry_timestamp_seconds`: one series per exception with an expiry.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExceptionLabels {
    pub exception: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FindingLabels {
    pub rule: &'static str,
    pub action: &'static str,
}

/// The stages outside the rules that `ha_guard_rule_deadline_exceeded_total` names.
pub const DEADLINE_STAGES: [&str; 3] = ["decoding", "mutations", "decision"];

/// `ha_guard_rule_deadline_exceeded_total`: reviews whose deadline passed while this rule was
/// being judged (or, outside the rules, in this stage: `decoding`, `mutations`, `decision`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    pub rule: &'static str,
}

/// `ha_guard_audit_findings`: the background audit's findings, by namespace (`""` for
/// cluster-scoped objects), rule and action.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct AuditLabels {
    pub namespace: String,
    pub rule: &'static str,
    pub action: &'static str,
}

/// `ha_guard_audit_reads_total{scope}`: `cluster` (every namespace, once per interval) or
/// `namespace` (one namespace re-read after a change in it).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScopeLabels {
    pub scope: &'static str,
}

/// `ha_guard_audit_errors_total{cause}`, one of [`AUDIT_ERROR_CAUSES`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    pub cause: &'static str,
}

/// Why the background audit could not do all it should: `read` (a list failed), `write` (a report
/// write failed), `decode` (an object it could not read, reported as unreadable), `report-truncated`
/// (a report over the safe size, cut to it), `namespace-gone` (deleted between read and write),
/// `crd-missing` (the report CRDs are not installed), `kind-unreadable` (a kind the audit may not
/// list or watch, or whose watch keeps failing: once per run and kind, and said in the reports).
pub const AUDIT_ERROR_CAUSES: [&str; 7] =
    ["read", "write", "decode", "report-truncated", "namespace-gone", "crd-missing", "kind-unreadable"];

/// `ha_guard_audit_changes_total{kind, effect}`: watch events the background audit saw, by whether
/// they changed what the rules read (`rejudge`) or not (`ignored`: status-only noise).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeLabels {
    pub kind: &'static str,
    pub effect: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
}

/// The `kind` label values of `ha_guard_admission_requests_total`: the kinds the shipped webhook
/// configurations send (a scale as `<resource>/scale`, as [`super::review`] names it). A test
/// holds this list to the chart's webhook rules.
pub const ADMISSION_KINDS: [&str; 9] = [
    "Deployment",
    "StatefulSet",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "ScaledObject",
    "Service",
    "deployments/scale",
    "statefulsets/scale",
    "APIService",
];

/// The `kind` label of a request: one of [`ADMISSION_KINDS`], else `other` (whatever a caller
/// puts in a request, the series stay bounded).
pub fn kind_label(kind: &str) -> &'static str {
    ADMISSION_KINDS.iter().find(|k| **k == kind).copied().unwrap_or("other")
}

/// The `reason` values of `ha_guard_rejected_total`.
pub const REJECT_REASONS: [&str; 3] = ["max-concurrent-requests", "max-body-memory", "max-connections"];

/// The `result` values of `ha_guard_namespace_reads_total` ([`super::namespaces::Reads`]): a GET's
/// answer (`found`, `not-found`, `error`), or no GET: `shared` (a read of the same namespace under
/// way, or answered less than [`super::namespaces::REMEMBER`] ago) and `limited` (over
/// [`super::namespaces::READS_PER_SECOND`]: judged at the strictest override).
pub const NAMESPACE_READ_RESULTS: [&str; 5] = ["found", "not-found", "error", "shared", "limited"];

/// The `result` values of the reload counters.
pub const RELOAD_RESULTS: [&str; 2] = ["success", "failure"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// No labels, for a metric that has no sample until it is known (a plain gauge would say 0).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct NoLabels;

impl EncodeLabelSet for NoLabels {
    fn encode(&self, _: &mut prometheus_client::encoding::LabelSetEncoder) -> Result<(), std::fmt::Error> {
        Ok(())
    }
}

fn duration_histogram() -> Histogram {
    // 50 µs .. ~6.5 s: admission answers in microseconds, the apiserver gives up at 10 s.
    Histogram::new(exponential_buckets(0.00005, 2.0, 18))
}

pub struct Metrics {
    pub registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    pub findings: Family<FindingLabels, Counter>,
    pub cache_objects: Family<KindLabels, Gauge>,
    pub cache_synced: Family<KindLabels, Gauge>,
    pub config_reloads: Family<ResultLabels, Counter>,
    /// Reloads of the TLS files (serving pair, client CA) after they changed: `success`, or
    /// `failure` when the new files were refused and the previous ones kept.
    pub tls_reloads: Family<ResultLabels, Counter>,
    pub tls_not_after: Gauge,
    /// notAfter of the CA that signed the serving certificate (`--tls-mode managed`; no sample
    /// in files mode, where the CA is not known).
    pub tls_ca_not_after: Family<NoLabels, Gauge>,
    /// Requests being answered (each holds one of `--max-concurrent-requests`).
    pub in_flight: Gauge,
    /// Requests and connections refused for overload: `max-concurrent-requests` (503),
    /// `max-connections` (closed).
    pub rejected: Family<ReasonLabels, Counter>,
    /// TLS handshakes that failed or timed out (a caller without an accepted client certificate
    /// included).
    pub tls_handshake_failures: Counter,
    /// `ha_guard_build_info{version,commit} 1`.
    pub build_info: Family<BuildLabels, Gauge>,
    /// The background audit's last findings (the Lease holder's; none on the other replicas).
    pub audit_findings: Family<AuditLabels, Gauge>,
    /// 1 while this replica holds the background audit's Lease.
    pub audit_leader: Gauge,
    /// Background audit runs, by result (`failure`: the cluster could not be read).
    pub audit_runs: Family<ResultLabels, Counter>,
    /// PolicyReports and ClusterPolicyReports written by this replica.
    pub audit_report_writes: Counter,
    /// Reads by scope: whole (once per interval) or one namespace after a change in it.
    pub audit_reads: Family<ScopeLabels, Counter>,
    /// What went wrong, by cause ([`AUDIT_ERROR_CAUSES`]).
    pub audit_errors: Family<CauseLabels, Counter>,
    /// Watch events seen by the background audit, by kind and whether they start work.
    pub audit_changes: Family<ChangeLabels, Counter>,
    /// When a run last succeeded (every read and write done), as a Unix time.
    pub audit_last_success: Gauge,
    /// When a full read (every namespace) last succeeded, as a Unix time; from the moment this
    /// replica took the Lease until its first one (`HaGuardAuditStalled`).
    pub audit_last_full_read: Gauge,
    /// Findings each exception of the configuration allowed, by rule.
    pub exception_matches: Family<ExceptionRuleLabels, Counter>,
    /// When each exception with an expiry stops applying (the start of its `expires` day, UTC).
    pub exception_expiry: Family<ExceptionLabels, Gauge>,
    /// Reviews answered at their deadline, by the rule (or stage) they were in.
    pub rule_deadline_exceeded: Family<RuleLabels, Counter>,
    /// Namespaces the view did not know, read at admission, by result ([`NAMESPACE_READ_RESULTS`]).
    pub namespace_reads: Family<ResultLabels, Counter>,
    /// `serve --admission-policies`: 1 while the policies generated for the configuration in force
    /// are applied, 0 while they are not (not yet, a failed apply, another build's, a newer
    /// configuration not applied yet); no sample with `--admission-policies off`.
    pub admission_policies_applied: Family<NoLabels, Gauge>,
    /// The rules whose policies are applied but not handed over (not type-checked yet, or with a
    /// type-checking warning): the webhook keeps judging them. No sample with the policies off.
    pub admission_policies_held_back: Family<NoLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let duration = Family::<WebhookLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram as fn() -> Histogram,
        );
        let findings = Family::<FindingLabels, Counter>::default();
        let cache_objects = Family::<KindLabels, Gauge>::default();
        let cache_synced = Family::<KindLabels, Gauge>::default();
        let config_reloads = Family::<ResultLabels, Counter>::default();
        let tls_not_after = Gauge::default();
        registry.register("ha_guard_admission_requests", "Admission requests answered", requests.clone());
        registry.register_with_unit(
            "ha_guard_admission_duration",
            "Time to answer an admission request",
            Unit::Seconds,
            duration.clone(),
        );
        registry.register("ha_guard_findings", "Findings reported, by rule and decided action", findings.clone());
        registry.register("ha_guard_cache_objects", "Objects in the cluster view, by kind", cache_objects.clone());
        registry.register("ha_guard_cache_synced", "1 when the view of a kind is synced", cache_synced.clone());
        registry.register("ha_guard_config_reloads", "Configuration reloads, by result", config_reloads.clone());
        registry.register_with_unit(
            "ha_guard_tls_cert_not_after",
            "notAfter of the serving certificate, as a Unix time",
            Unit::Seconds,
            tls_not_after.clone(),
        );
        let tls_ca_not_after = Family::<NoLabels, Gauge>::default();
        registry.register_with_unit(
            "ha_guard_tls_ca_not_after",
            "notAfter of the CA that signed the serving certificate, as a Unix time (--tls-mode managed)",
            Unit::Seconds,
            tls_ca_not_after.clone(),
        );
        let in_flight = Gauge::default();
        let rejected = Family::<ReasonLabels, Counter>::default();
        let tls_handshake_failures = Counter::default();
        registry.register("ha_guard_requests_in_flight", "Requests being answered", in_flight.clone());
        registry.register(
            "ha_guard_rejected",
            "Requests (503) and connections (closed) refused for overload, by limit",
            rejected.clone(),
        );
        registry.register(
            "ha_guard_tls_handshake_failures",
            "TLS handshakes that failed or timed out (a refused client certificate included)",
            tls_handshake_failures.clone(),
        );
        let tls_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "ha_guard_tls_reloads",
            "Reloads of changed TLS files (serving certificate and key, client CA), by result",
            tls_reloads.clone(),
        );
        let build_info = Family::<BuildLabels, Gauge>::default();
        registry.register("ha_guard_build_info", "The version and commit ha-guard was built from", build_info.clone());
        build_info
            .get_or_create(&BuildLabels { version: crate::build_info::VERSION, commit: crate::build_info::COMMIT })
            .set(1);
        registry.register(
            "ha_guard_counts_handed_over",
            "Counts of a new pod template that waited apart, at the lowest CPU priority, for a quarter of the deadline, then were counted by the request's thread",
            super::lanes::COUNTS_HANDED_OVER.clone(),
        );
        registry.register_collector(Box::new(process::ProcessCollector));
        let audit_findings = Family::<AuditLabels, Gauge>::default();
        registry.register(
            "ha_guard_audit_findings",
            "Findings of the last background audit, by namespace, rule and action",
            audit_findings.clone(),
        );
        let audit_leader = Gauge::default();
        registry.register(
            "ha_guard_audit_leader",
            "1 while this replica holds the background audit's Lease",
            audit_leader.clone(),
        );
        let audit_runs = Family::<ResultLabels, Counter>::default();
        registry.register("ha_guard_audit_runs", "Background audit runs, by result", audit_runs.clone());
        let audit_report_writes = Counter::default();
        registry.register(
            "ha_guard_audit_report_writes",
            "PolicyReports and ClusterPolicyReports written by this replica",
            audit_report_writes.clone(),
        );
        let audit_reads = Family::<ScopeLabels, Counter>::default();
        registry.register(
            "ha_guard_audit_reads",
            "Background audit reads: cluster (every namespace, once per interval) or namespace (after a change in it)",
            audit_reads.clone(),
        );
        let audit_errors = Family::<CauseLabels, Counter>::default();
        registry.register("ha_guard_audit_errors", "Background audit errors, by cause", audit_errors.clone());
        let audit_changes = Family::<ChangeLabels, Counter>::default();
        registry.register(
            "ha_guard_audit_changes",
            "Watch events seen by the background audit, by kind and effect (rejudge, or ignored: nothing the rules read changed)",
            audit_changes.clone(),
        );
        let audit_last_success = Gauge::default();
        registry.register_with_unit(
            "ha_guard_audit_last_success_timestamp",
            "When a background audit run last succeeded, as a Unix time",
            Unit::Seconds,
            audit_last_success.clone(),
        );
        let audit_last_full_read = Gauge::default();
        registry.register_with_unit(
            "ha_guard_audit_last_full_read_timestamp",
            "When the background audit last read and reported every namespace without failure, as a Unix time (from taking the Lease until the first)",
            Unit::Seconds,
            audit_last_full_read.clone(),
        );

        let exception_matches = Family::<ExceptionRuleLabels, Counter>::default();
        registry.register(
            "ha_guard_exception_matches",
            "Findings an exception of the configuration allowed, by exception and rule",
            exception_matches.clone(),
        );
        let exception_expiry = Family::<ExceptionLabels, Gauge>::default();
        registry.register_with_unit(
            "ha_guard_exception_expiry_timestamp",
            "When an exception of the configuration stops applying (the start of its expires day, UTC), as a Unix time",
            Unit::Seconds,
            exception_expiry.clone(),
        );

        let rule_deadline_exceeded = Family::<RuleLabels, Counter>::default();
        registry.register(
            "ha_guard_rule_deadline_exceeded",
            "Admissions answered at the deadline (as the failure policy says), by the rule being judged, or the stage outside the rules",
            rule_deadline_exceeded.clone(),
        );

        // Start at 0 what has a known, small label set. Not `ha_guard_admission_requests_total`:
        // its five labels make hundreds of combinations, most of which never occur.
        for webhook in ["validate", "mutate"] {
            let _ = duration.get_or_create(&WebhookLabels { webhook });
        }
        for rule in crate::core::registry::rules() {
            for action in [Decision::Deny, Decision::Warn, Decision::Allowed] {
                let _ = findings.get_or_create(&FindingLabels { rule: rule.id, action: action.as_str() });
            }
        }
        // What an admission judges: every family but the audit's (posture, drain), and the stages.
        let admission_rules = crate::core::rules::FAMILIES
            .iter()
            .filter(|f| !std::ptr::eq(**f, crate::core::rules::posture::RULES))
            .filter(|f| !std::ptr::eq(**f, crate::core::rules::drain::RULES))
            .flat_map(|f| f.iter().map(|r| r.id));
        for rule in admission_rules.chain(DEADLINE_STAGES) {
            let _ = rule_deadline_exceeded.get_or_create(&RuleLabels { rule });
        }
        for result in RELOAD_RESULTS {
            let _ = config_reloads.get_or_create(&ResultLabels { result });
            let _ = tls_reloads.get_or_create(&ResultLabels { result });
        }
        for reason in REJECT_REASONS {
            let _ = rejected.get_or_create(&ReasonLabels { reason });
        }
        for result in RELOAD_RESULTS {
            let _ = audit_runs.get_or_create(&ResultLabels { result });
        }
        for scope in ["cluster", "namespace"] {
            let _ = audit_reads.get_or_create(&ScopeLabels { scope });
        }
        for cause in AUDIT_ERROR_CAUSES {
            let _ = audit_errors.get_or_create(&CauseLabels { cause });
        }
        let namespace_reads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "ha_guard_namespace_reads",
            "Namespaces the view did not know yet, read at admission, by result (shared and limited: no GET)",
            namespace_reads.clone(),
        );
        for result in NAMESPACE_READ_RESULTS {
            let _ = namespace_reads.get_or_create(&ResultLabels { result });
        }
        let admission_policies_applied = Family::<NoLabels, Gauge>::default();
        registry.register(
            "ha_guard_admission_policies_applied",
            "1 while the admission policies generated for the configuration in force are applied, 0 while not (serve --admission-policies; no sample when off)",
            admission_policies_applied.clone(),
        );
        let admission_policies_held_back = Family::<NoLabels, Gauge>::default();
        registry.register(
            "ha_guard_admission_policies_held_back",
            "Rules whose admission policies are applied but not handed over (not type-checked by the apiserver yet, or with a warning): the webhook keeps judging them",
            admission_policies_held_back.clone(),
        );
        Metrics {
            registry,
            requests,
            duration,
            findings,
            cache_objects,
            cache_synced,
            config_reloads,
            tls_reloads,
            tls_not_after,
            tls_ca_not_after,
            in_flight,
            rejected,
            tls_handshake_failures,
            build_info,
            audit_findings,
            audit_leader,
            audit_runs,
            audit_report_writes,
            audit_reads,
            audit_errors,
            audit_changes,
            audit_last_success,
            audit_last_full_read,
            exception_matches,
            exception_expiry,
            rule_deadline_exceeded,
            namespace_reads,
            admission_policies_applied,
            admission_policies_held_back,
        }
    }

    /// The admission policies' gauges: `Some((applied, held back))`, or `None` to drop both
    /// samples (the policies off).
    pub fn set_admission_policies(&self, state: Option<(bool, usize)>) {
        match state {
            Some((applied, held_back)) => {
                self.admission_policies_applied.get_or_create(&NoLabels).set(i64::from(applied));
                self.admission_policies_held_back.get_or_create(&NoLabels).set(held_back as i64);
            }
            None => {
                self.admission_policies_applied.clear();
                self.admission_policies_held_back.clear();
            }
        }
    }

    /// The expiry series of `config`'s exceptions: one per exception with an expiry, those of
    /// exceptions gone or without one since the last configuration removed.
    pub fn set_exceptions(&self, config: &crate::core::config::Config) {
        self.exception_expiry.clear();
        for e in &config.exceptions {
            if let Some(at) = e.expiry_timestamp() {
                self.exception_expiry.get_or_create(&ExceptionLabels { exception: e.name.clone() }).set(at);
            }
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, line_start: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(line_start)).map(|v| v.trim().parse().unwrap())
    }

    #[test]
    fn the_admission_policy_gauges_have_no_sample_until_a_sync_and_after_off() {
        let m = Metrics::new();
        let text = m.encode();
        assert_eq!(sample(&text, "ha_guard_admission_policies_applied{} "), None, "{text}");
        m.set_admission_policies(Some((true, 2)));
        let text = m.encode();
        assert!(text.contains("# TYPE ha_guard_admission_policies_applied gauge"), "{text}");
        assert_eq!(sample(&text, "ha_guard_admission_policies_applied{} "), Some(1.0), "{text}");
        assert_eq!(sample(&text, "ha_guard_admission_policies_held_back{} "), Some(2.0), "{text}");
        m.set_admission_policies(Some((false, 0)));
        assert_eq!(sample(&m.encode(), "ha_guard_admission_policies_applied{} "), Some(0.0));
        m.set_admission_policies(None);
        let text = m.encode();
        assert_eq!(sample(&text, "ha_guard_admission_policies_applied{} "), None, "{text}");
        assert_eq!(sample(&text, "ha_guard_admission_policies_held_back{} "), None, "{text}");
    }

    #[test]
    fn a_requests_kind_outside_the_known_ones_is_other() {
        for kind in ADMISSION_KINDS {
            assert_eq!(kind_label(kind), kind);
        }
        for made_up in ["", "Pod", "deployment", "Deployment ", "x/scale", "{\"a\":1}"] {
            assert_eq!(kind_label(made_up), "other", "{made_up:?}");
        }
    }

    /// Every resource the shipped webhook configurations send has a kind label of its own: a
    /// resource added to the chart's rules without a label here would be counted as `other`.
    #[test]
    fn the_known_kinds_are_those_the_shipped_webhooks_send() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/ha-guard.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        let mut sent = std::collections::BTreeSet::new();
        for doc in docs.iter().filter(|d| d["kind"].as_str().is_some_and(|k| k.ends_with("WebhookConfiguration"))) {
            for hook in doc["webhooks"].as_array().unwrap() {
                for rule in hook["rules"].as_array().unwrap() {
                    for resource in rule["resources"].as_array().unwrap() {
                        let resource = resource.as_str().unwrap();
                        let label = match resource {
                            "deployments" => "Deployment",
                            "statefulsets" => "StatefulSet",
                            "poddisruptionbudgets" => "PodDisruptionBudget",
                            "horizontalpodautoscalers" => "HorizontalPodAutoscaler",
                            "scaledobjects" => "ScaledObject",
                            "services" => "Service",
                            "apiservices" => "APIService",
                            scale if scale.ends_with("/scale") => scale,
                            other => panic!("{}: the webhooks send {other}: give it a kind label", path.display()),
                        };
                        sent.insert(label.to_string());
                    }
                }
            }
        }
        let known: std::collections::BTreeSet<String> = ADMISSION_KINDS.iter().map(|k| k.to_string()).collect();
        assert_eq!(sent, known);
    }

    #[test]
    fn counters_with_known_labels_start_at_zero() {
        let text = Metrics::new().encode();
        for reason in REJECT_REASONS {
            assert_eq!(sample(&text, &format!("ha_guard_rejected_total{{reason=\"{reason}\"}} ")), Some(0.0), "{text}");
        }
        for result in RELOAD_RESULTS {
            for name in ["ha_guard_config_reloads_total", "ha_guard_tls_reloads_total"] {
                assert_eq!(sample(&text, &format!("{name}{{result=\"{result}\"}} ")), Some(0.0), "{name} {result}");
            }
        }
        let rules: Vec<_> = crate::core::registry::rules().collect();
        assert!(rules.len() > 10);
        for rule in rules {
            for action in ["deny", "warn", "allowed"] {
                let line = format!("ha_guard_findings_total{{rule=\"{}\",action=\"{action}\"}} ", rule.id);
                assert_eq!(sample(&text, &line), Some(0.0), "{line}");
            }
        }
        for webhook in ["validate", "mutate"] {
            assert_eq!(
                sample(&text, &format!("ha_guard_admission_duration_seconds_count{{webhook=\"{webhook}\"}} ")),
                Some(0.0)
            );
        }
        assert_eq!(sample(&text, "ha_guard_tls_handshake_failures_total "), Some(0.0));
    }

    #[test]
    fn build_info_names_the_version_and_commit() {
        let text = Metrics::new().encode();
        let line = format!(
            "ha_guard_build_info{{version=\"{}\",commit=\"{}\"}} ",
            crate::build_info::VERSION,
            crate::build_info::COMMIT
        );
        assert_eq!(sample(&text, &line), Some(1.0), "{text}");
        assert!(text.contains("# TYPE ha_guard_build_info gauge"), "{text}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn process_metrics_describe_this_process() {
        // Some CPU time first (the counter moves in clock ticks of 10 ms).
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let text = Metrics::new().encode();
        let rss = sample(&text, "process_resident_memory_bytes ").expect("rss");
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_rss_kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        // Read a moment apart, by two ways: within 20%.
        assert!((rss / 1024.0 - vm_rss_kib).abs() < vm_rss_kib * 0.2, "rss {rss} B vs VmRSS {vm_rss_kib} KiB");
        let fds = std::fs::read_dir("/proc/self/fd").unwrap().count() as f64;
        let open = sample(&text, "process_open_fds ").expect("open fds");
        assert!(open >= 3.0 && (open - fds).abs() <= 8.0, "{open} vs {fds}");
        let start = sample(&text, "process_start_time_seconds ").expect("start time");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(start <= now + 1.0 && now - start < 3600.0, "started {start}, now {now}");
        let cpu = sample(&text, "process_cpu_seconds_total ").expect("cpu");
        assert!(cpu > 0.0 && cpu < (now - start + 1.0) * 64.0, "{cpu} s of CPU");
        assert!(text.contains("# TYPE process_cpu_seconds counter"), "{text}");
        assert!(sample(&text, "process_threads ").unwrap() >= 1.0);
        assert!(sample(&text, "process_virtual_memory_bytes ").unwrap() >= rss);
    }
}

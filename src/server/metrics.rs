//! The metrics of DESIGN.md §5, in Prometheus text format on the probe port.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub webhook: &'static str,
    pub kind: String,
    pub operation: String,
    pub decision: &'static str,
    pub dry_run: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FindingLabels {
    pub rule: &'static str,
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

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
        Metrics {
            registry,
            requests,
            duration,
            findings,
            cache_objects,
            cache_synced,
            config_reloads,
            tls_not_after,
            tls_ca_not_after,
            in_flight,
            rejected,
            tls_handshake_failures,
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

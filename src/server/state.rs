//! What the handlers share: the view, the configuration, the metrics, readiness, and the
//! decoding budget.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::metrics::Metrics;
use super::review;
use crate::core::config::Config;
use crate::core::view::absence::DEFAULT_GRACE;
use crate::core::view::{AdmissionClock, ViewSource};

/// Shared by the handlers.
pub struct AppState {
    pub view: Arc<dyn ViewSource>,
    pub config: RwLock<Arc<Config>>,
    pub metrics: Metrics,
    /// TLS material loaded and config valid; false again once shutdown starts.
    pub ready: AtomicBool,
    pub shutting_down: AtomicBool,
    /// Decoding budget, in JSON values: a request takes as many as its body holds while it is
    /// decoded and answered, waiting for them if need be (see [`DECODE_BUDGET`]).
    pub decoding: Arc<tokio::sync::Semaphore>,
    /// How long an absence must have lasted before an admission says it (`--absence-grace`).
    pub absence_grace: Duration,
    /// How a request is answered: its deadline and what answers past it.
    pub admission: AdmissionSettings,
    /// The reviews being judged now, by when they started (readiness reads the oldest).
    pub judging: Judging,
    /// Where large requests are judged ([`super::lanes`]).
    pub large: super::lanes::LargeLane,
    /// Reads a namespace the view does not know yet (a live cluster's client; none for a static
    /// view), set once at start ([`super::namespaces`]).
    pub namespaces: std::sync::OnceLock<Arc<dyn super::namespaces::ReadNamespace>>,
    /// What bounds those reads: one GET per namespace at a time, answers kept a few seconds, a
    /// budget of GETs a second ([`super::namespaces::Reads`]).
    pub namespace_reads: super::namespaces::Reads,
    /// Bumped with every configuration set: what the admission policies were generated from
    /// (server::admission_policies) is compared with it.
    config_generation: tokio::sync::watch::Sender<u64>,
    /// The admission policies in force, as the last sync applied them; `None`: none (off, not
    /// applied yet, failed), and the webhook judges every rule.
    policies: RwLock<Option<Arc<InForce>>>,
}

/// What a successful apply put in force: the configuration generation it was generated from and
/// the rules and mutations whose policies are bound (the webhook leaves their findings to them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InForce {
    pub generation: u64,
    /// The rules handed over: bound, and every validating policy type-checked without a warning.
    pub rules: BTreeSet<String>,
    pub mutations: BTreeSet<String>,
    /// The rules whose policies are applied but not handed over, with why (a type-checking
    /// warning, or no type checking yet): the webhook keeps judging them.
    pub held_back: BTreeMap<String, String>,
}

/// How long an admission may take, and what answers when it takes longer (`--deadline`,
/// `--failure-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionSettings {
    /// Past it, the review is abandoned and answered as `failure_policy` says. Below the webhook
    /// configurations' `timeoutSeconds`, so that the answer reaches the apiserver before it gives
    /// up on the call.
    pub deadline: Duration,
    /// What the webhook configurations say happens when the webhook does not answer.
    pub failure_policy: FailurePolicy,
}

/// Default of `--deadline`: far above what any review takes (milliseconds), well below the
/// chart's `timeoutSeconds` (5) and the apiserver's default (10).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);

impl Default for AdmissionSettings {
    fn default() -> Self {
        AdmissionSettings { deadline: DEFAULT_DEADLINE, failure_policy: FailurePolicy::Ignore }
    }
}

/// A webhook configuration's `failurePolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The write is admitted unchecked.
    Ignore,
    /// The write is refused.
    Fail,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Ignore => "Ignore",
            FailurePolicy::Fail => "Fail",
        }
    }
}

/// The reviews being judged, by when each started.
#[derive(Default)]
pub struct Judging {
    next: AtomicU64,
    started: Mutex<BTreeMap<u64, Instant>>,
}

/// One review being judged: forgotten when dropped (when the judging ends, whoever waits for it).
pub struct JudgingGuard<'a> {
    judging: &'a Judging,
    id: u64,
}

impl Judging {
    pub fn start(&self) -> JudgingGuard<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.started.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Instant::now());
        JudgingGuard { judging: self, id }
    }

    /// How long the oldest review still being judged has run, if one is.
    pub fn oldest(&self) -> Option<Duration> {
        let started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        started.values().min().map(Instant::elapsed)
    }
}

impl Drop for JudgingGuard<'_> {
    fn drop(&mut self) {
        self.judging.started.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

/// JSON values decoded at once, across requests: one body at [`review::MAX_JSON_VALUES`], or
/// hundreds of ordinary ones (a few hundred to a few thousand values each). Decoding is CPU
/// work of milliseconds, so a request waits for its share rather than being refused; what the
/// budget bounds is the memory of decoded trees (about 250 bytes a value) whatever the number of
/// cores.
pub const DECODE_BUDGET: usize = review::MAX_JSON_VALUES;

impl AppState {
    pub fn new(view: Arc<dyn ViewSource>, config: Config) -> Arc<Self> {
        Self::with_absence_grace(view, config, DEFAULT_GRACE)
    }

    /// [`AppState::new`] with the grace an absence must outlast at admission.
    pub fn with_absence_grace(view: Arc<dyn ViewSource>, config: Config, absence_grace: Duration) -> Arc<Self> {
        Self::with_settings(view, config, absence_grace, AdmissionSettings::default())
    }

    /// [`AppState::with_absence_grace`] with the deadline and failure policy of admissions.
    pub fn with_settings(
        view: Arc<dyn ViewSource>,
        config: Config,
        absence_grace: Duration,
        admission: AdmissionSettings,
    ) -> Arc<Self> {
        let metrics = Metrics::new();
        metrics.set_exceptions(&config);
        let namespace_reads = super::namespaces::Reads::new(metrics.namespace_reads.clone());
        Arc::new(AppState {
            view,
            config: RwLock::new(Arc::new(config)),
            metrics,
            ready: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            decoding: Arc::new(tokio::sync::Semaphore::new(DECODE_BUDGET)),
            absence_grace,
            admission,
            judging: Judging::default(),
            large: super::lanes::LargeLane::start(),
            namespaces: std::sync::OnceLock::new(),
            namespace_reads,
            config_generation: tokio::sync::watch::Sender::new(0),
            policies: RwLock::new(None),
        })
    }

    /// The clock of one admission: now, and how current the view is.
    pub fn admission_clock(&self) -> AdmissionClock {
        let now = k8s_openapi::jiff::Timestamp::now();
        AdmissionClock { now, grace: self.absence_grace, view_current_as_of: self.view.current_as_of(now) }
    }

    pub fn config(&self) -> Arc<Config> {
        self.config.read().map(|c| c.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    pub fn set_config(&self, config: Config) {
        self.metrics.set_exceptions(&config);
        let mut c = self.config.write().unwrap_or_else(|p| p.into_inner());
        *c = Arc::new(config);
        self.config_generation.send_modify(|g| *g += 1);
    }

    /// The configuration and its generation (bumped by every [`AppState::set_config`]), read together.
    pub fn config_and_generation(&self) -> (Arc<Config>, u64) {
        let c = self.config.read().unwrap_or_else(|p| p.into_inner());
        (c.clone(), *self.config_generation.borrow())
    }

    /// Changes whenever the configuration is set.
    pub fn config_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.config_generation.subscribe()
    }

    /// Publishes the admission policies in force (`None`: none).
    pub fn set_policies(&self, in_force: Option<InForce>) {
        *self.policies.write().unwrap_or_else(|p| p.into_inner()) = in_force.map(Arc::new);
    }

    /// The admission policies in force for the configuration in force now: `None` when none are,
    /// or when they were generated from an earlier configuration (until the next sync).
    pub fn policies_in_force(&self) -> Option<Arc<InForce>> {
        self.policies_for(*self.config_generation.borrow())
    }

    /// The admission policies in force if generated from configuration `generation`.
    pub fn policies_for(&self, generation: u64) -> Option<Arc<InForce>> {
        let p = self.policies.read().unwrap_or_else(|p| p.into_inner());
        p.clone().filter(|p| p.generation == generation)
    }
}

//! What the handlers share: the view, the configuration, the metrics, readiness, and the
//! decoding budget.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::Duration;

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
    pub decoding: tokio::sync::Semaphore,
    /// How long an absence must have lasted before an admission says it (`--absence-grace`).
    pub absence_grace: Duration,
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
        let metrics = Metrics::new();
        metrics.set_exceptions(&config);
        Arc::new(AppState {
            view,
            config: RwLock::new(Arc::new(config)),
            metrics,
            ready: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            decoding: tokio::sync::Semaphore::new(DECODE_BUDGET),
            absence_grace,
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
        match self.config.write() {
            Ok(mut c) => *c = Arc::new(config),
            Err(p) => *p.into_inner() = Arc::new(config),
        }
    }
}

//! What the handlers share: the view, the configuration, the metrics, readiness, and the
//! decoding budget.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};

use super::metrics::Metrics;
use super::review;
use crate::core::config::Config;
use crate::core::view::ViewSource;

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
}

/// JSON values decoded at once, across requests: one body at [`review::MAX_JSON_VALUES`], or
/// hundreds of ordinary ones (a few hundred to a few thousand values each). Decoding is CPU
/// work of milliseconds, so a request waits for its share rather than being refused; what the
/// budget bounds is the memory of decoded trees (about 250 bytes a value) whatever the number of
/// cores.
pub const DECODE_BUDGET: usize = review::MAX_JSON_VALUES;

impl AppState {
    pub fn new(view: Arc<dyn ViewSource>, config: Config) -> Arc<Self> {
        Arc::new(AppState {
            view,
            config: RwLock::new(Arc::new(config)),
            metrics: Metrics::new(),
            ready: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            decoding: tokio::sync::Semaphore::new(DECODE_BUDGET),
        })
    }

    pub fn config(&self) -> Arc<Config> {
        self.config.read().map(|c| c.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    pub fn set_config(&self, config: Config) {
        match self.config.write() {
            Ok(mut c) => *c = Arc::new(config),
            Err(p) => *p.into_inner() = Arc::new(config),
        }
    }
}

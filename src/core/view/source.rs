//! Where a shell's view comes from: a static index, or the live caches (`crate::live`).

use k8s_openapi::jiff::Timestamp;

use super::index::Index;
use super::lookup::View;
use crate::core::model::Kind;

/// Where the engine's view comes from.
pub trait ViewSource: Send + Sync {
    /// Runs `f` on the current view.
    fn with_view(&self, f: &mut dyn FnMut(&dyn View));
    /// Every cache has synced (static views always have).
    fn synced(&self) -> bool;
    /// Up to when the view is known to hold every write of the cluster, asked at `now`: `now`
    /// while every cache follows its watch, the moment a watch started failing while one is, `None`
    /// before every cache has synced ([`AdmissionClock`](super::AdmissionClock)). A static view
    /// does not follow a cluster: it is as current as it will ever be.
    fn current_as_of(&self, now: Timestamp) -> Option<Timestamp> {
        self.synced().then_some(now)
    }
    /// Per kind: objects held and whether its cache has synced (for the cache metrics).
    fn stats(&self) -> Vec<(Kind, usize, bool)> {
        Vec::new()
    }
}

/// A view that does not change: `--cluster FILE` and `--cluster none`.
pub struct StaticSource(pub Index);

impl ViewSource for StaticSource {
    fn with_view(&self, f: &mut dyn FnMut(&dyn View)) {
        f(&self.0);
    }
    fn synced(&self) -> bool {
        true
    }
    fn stats(&self) -> Vec<(Kind, usize, bool)> {
        self.0.counts().into_iter().map(|(k, n)| (k, n, true)).collect()
    }
}

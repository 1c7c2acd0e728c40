//! Where a shell's view comes from: a static index, or the live caches (`crate::live`).

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use super::index::Index;
use super::lookup::View;
use crate::core::model::Kind;

/// A view as it was at one moment, kept for as long as a review needs it: the watchers go on
/// changing theirs meanwhile.
pub type Snapshot = Arc<dyn View + Send + Sync>;

/// Where the engine's view comes from.
pub trait ViewSource: Send + Sync {
    /// The view as it is now. Taking one never waits for the watchers, nor they for its reader.
    fn snapshot(&self) -> Snapshot;
    /// Runs `f` on the current view ([`ViewSource::snapshot`]).
    fn with_view(&self, f: &mut dyn FnMut(&dyn View)) {
        f(&*self.snapshot());
    }
    /// Every cache has synced (static views always have).
    fn synced(&self) -> bool;
    /// Up to when the view is known to hold every write of the cluster, asked at `now`: `now`
    /// while every cache follows its watch, the moment a watch started failing while one is, `None`
    /// before every cache has synced ([`AdmissionClock`](super::AdmissionClock)). A static view
    /// does not follow a cluster: it is as current as it will ever be.
    fn current_as_of(&self, now: Timestamp) -> Option<Timestamp> {
        self.synced().then_some(now)
    }
    /// Why the view has stopped following the cluster on its own (its watchers cannot apply
    /// their events), if it has: a local stall, which readiness reports. A cluster that cannot be
    /// reached is not one (every replica sees it; [`ViewSource::current_as_of`] says it).
    fn stalled(&self) -> Option<String> {
        None
    }
    /// Per kind: objects held and whether its cache has synced (for the cache metrics).
    fn stats(&self) -> Vec<(Kind, usize, bool)> {
        Vec::new()
    }
}

/// A view that does not change: `--cluster FILE` and `--cluster none`.
pub struct StaticSource(pub Index);

impl ViewSource for StaticSource {
    /// A copy of the index: a few reference counts ([`Index`] shares its parts).
    fn snapshot(&self) -> Snapshot {
        Arc::new(self.0.clone())
    }
    fn synced(&self) -> bool {
        true
    }
    fn stats(&self) -> Vec<(Kind, usize, bool)> {
        self.0.counts().into_iter().map(|(k, n)| (k, n, true)).collect()
    }
}

//! Where a shell's view comes from: a static index, or the live caches (`crate::live`).

use super::index::Index;
use super::lookup::View;
use crate::core::model::Kind;

/// Where the engine's view comes from.
pub trait ViewSource: Send + Sync {
    /// Runs `f` on the current view.
    fn with_view(&self, f: &mut dyn FnMut(&dyn View));
    /// Every cache has synced (static views always have).
    fn synced(&self) -> bool;
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

//! Independent work on every core.

/// Documents per thread below which work stays on the calling thread (a thread costs more than
/// a few small documents).
pub const DOCUMENTS_PER_THREAD: usize = 64;

/// `f` of each item, in order, on every core when there are enough items: documents are
/// independent, and parsing and decoding them is most of what `check` costs on a large bundle.
pub fn map_on_cores<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(items.len() / DOCUMENTS_PER_THREAD).max(1);
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let f = &f;
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> =
            items.chunks(chunk).map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<_>>())).collect();
        // A panic in a worker is a bug; propagate it as the sequential path would.
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    })
}

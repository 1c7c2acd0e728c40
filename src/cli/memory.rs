//! The process's memory settings, chosen per command before it starts (src/main.rs), and by the
//! benchmarks that host a command's work in process, so that they measure what the command does.

/// mimalloc 3 keeps freed memory committed for a second (`purge_delay` 1000 ms) and commits its
/// arena eagerly on Linux: right for a long-lived server, but for `check` and `audit`, which read a
/// whole bundle or cluster in a burst, it made the peak RSS about three times the live heap
/// (benches/README.md, "Peak memory"). Those commands purge at once and commit on demand, as
/// `MIMALLOC_PURGE_DELAY=0 MIMALLOC_ARENA_EAGER_COMMIT=0` would (the environment still wins:
/// mimalloc reads it first, and these are set only when it did not).
pub fn return_memory_promptly() {
    // Indices in mimalloc 3's `mi_option_e` (libmimalloc-sys 0.1.49, c_src/mimalloc/v3/include/
    // mimalloc.h); the crate names only some of them.
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    for (option, env) in [(ARENA_EAGER_COMMIT, "MIMALLOC_ARENA_EAGER_COMMIT"), (PURGE_DELAY, "MIMALLOC_PURGE_DELAY")] {
        if std::env::var_os(env).is_none() {
            // SAFETY: mi_option_set stores an integer option; it is safe to call at any time.
            unsafe { libmimalloc_sys::mi_option_set(option, 0) };
        }
    }
}

/// mimalloc asks for transparent huge pages on its 1 GiB arena (`madvise(MADV_HUGEPAGE)`, so even
/// where THP is `madvise`-only). Every command that holds a cluster runs without them:
/// - `serve`: the first touch of fresh memory in a huge page zeroes all 2 MiB of it in one page
///   fault, on whichever thread touched it. Reading a large request body did that on the async
///   worker every other request waits for: `perf sched` on the hostile bench's server CPU showed
///   its worker in such faults for up to 7.6 ms at a time beside large bodies, and never beside
///   ordinary ones (docs/benchmarks.md, "Hostile admissions").
/// - `audit`, `reports`: khugepaged fills whole 2 MiB pages around live objects; `ha-guard reports`
///   over 30,000 pods grew from 105 to 133 MiB resident while idle, with 110 MiB of it in huge
///   pages, against 92 MiB steady without (benches/README.md, "What the background audit costs").
///
/// They trade the TLB gain for that latency and memory. mimalloc disables THP itself only when
/// `MIMALLOC_ALLOW_THP=0` is in the environment at its start (before `main`); this does the same
/// afterwards: the process flag overrides the arena's madvise. `MIMALLOC_ALLOW_THP` in the
/// environment still decides.
pub fn no_transparent_huge_pages() {
    // Index of `mi_option_allow_thp` in mimalloc 3's `mi_option_e` (see above).
    const ALLOW_THP: libmimalloc_sys::mi_option_t = 43;
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: mi_option_set stores an integer option; prctl(PR_SET_THP_DISABLE) only sets a flag
    // of this process (its result is not needed: where it fails, THP stays as it was).
    unsafe {
        libmimalloc_sys::mi_option_set(ALLOW_THP, 0);
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

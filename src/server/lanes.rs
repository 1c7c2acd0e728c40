//! Where a review runs, off the async workers: an ordinary request on tokio's blocking pool; a
//! large one (a body over [`LARGE_BODY`] or over [`LARGE_VALUES`] JSON values: decoding and
//! judging it cost in proportion, milliseconds a MiB) on the large lane, one at a time on a thread
//! of its own at the lowest CPU priority (`SCHED_IDLE`). However many large
//! requests arrive, they take at most one core, and the ordinary reviews come first on it: a
//! tenant posting megabyte objects in a loop slows only its own answers (which the deadline
//! bounds), never everyone else's.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::core::view::nodes::Work;

/// Bodies larger than this are judged on the large lane. Real Deployments, StatefulSets, PDBs and
/// HPAs are a few KiB (an UPDATE carries two, each with its managedFields); 64 KiB is far above
/// them.
pub const LARGE_BODY: usize = 64 * 1024;

/// Bodies holding more JSON values than this are judged on the large lane too: decoding and the
/// rules that read lists (tolerations, affinity values, labels) cost per value, and a body can pack
/// many in few bytes. The Deployments of `../shared/corpus` hold 300-600 values; an UPDATE carries
/// two objects with their managedFields.
pub const LARGE_VALUES: usize = 4096;

/// Large reviews waiting for the lane at most; one more waits for a place (its deadline runs).
const QUEUE: usize = 16;

/// How much lower the large lane's thread runs than the process (`nice` steps, up to 19), where
/// `SCHED_IDLE` cannot be set ([`lower_priority`]): the scheduler then gives it about 1/70 of the
/// CPU of a thread at the process's own when both want it, and all of it when nothing else does.
/// A replica that is not saturated answers a large review as fast as before; one that is answers
/// the ordinary ones first, and the deadline bounds how long the large one waits (then its answer
/// is the failure policy's, said).
const NICE: i32 = 19;

type Job = Box<dyn FnOnce() + Send>;

/// The large lane: one thread, fed through a bounded queue; it ends when the lane is dropped.
pub struct LargeLane {
    jobs: tokio::sync::mpsc::Sender<Job>,
}

/// A review that panicked, or a lane that is gone: answered as a panic is.
#[derive(Debug)]
pub struct Failed;

impl Default for LargeLane {
    fn default() -> Self {
        Self::start()
    }
}

impl LargeLane {
    pub fn start() -> LargeLane {
        let (jobs, mut queue) = tokio::sync::mpsc::channel::<Job>(QUEUE);
        let started = std::thread::Builder::new().name("ha-guard-large".into()).spawn(move || {
            lower_priority();
            let ticks = YieldTicks::new();
            while let Some(job) = queue.blocking_recv() {
                // A job cannot unwind: [`LargeLane::run`] catches its panic.
                let _pausing = Pausing::start(None);
                ticks.iter().for_each(YieldTicks::start);
                job();
                ticks.iter().for_each(YieldTicks::stop);
            }
        });
        if let Err(e) = started {
            tracing::warn!(error = %e, "cannot start the large requests' thread: they are judged with the others");
        }
        LargeLane { jobs }
    }

    /// Runs `f` on the lane and waits for its result.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T, Failed> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|_| Failed));
        });
        self.jobs.send(job).await.map_err(|_| Failed)?;
        result.await.map_err(|_| Failed)?
    }
}

/// Runs `f` off the async workers, where a request of `body_len` bytes and `values` JSON values
/// belongs (see the module's
/// doc), and waits for its result.
pub async fn judge_apart<T: Send + 'static>(
    large: &LargeLane,
    body_len: usize,
    values: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Failed> {
    if body_len > LARGE_BODY || values > LARGE_VALUES {
        large.run(f).await
    } else {
        tokio::task::spawn_blocking(f).await.map_err(|_| Failed)
    }
}

/// Count threads started and not yet ended at most ([`count_apart`]): past them, a count runs on
/// the caller's thread. Threads left behind ([`count_apart`]'s hand-over) end at their next pause
/// once they run, but while the CPU is taken they would pile up, each with its stack and a count's
/// copy of a pod.
const COUNTING_AT_MOST: usize = 32;

/// Count threads running now.
static COUNTING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `ha_guard_counts_handed_over_total`: counts that waited apart longer than their hand-over time
/// and were counted by their callers ([`count_apart`]). One per process, as the counts' runner is.
pub static COUNTS_HANDED_OVER: std::sync::LazyLock<prometheus_client::metrics::counter::Counter> =
    std::sync::LazyLock::new(Default::default);

/// How many counts the callers took over so far ([`count_apart`]).
pub fn counts_handed_over() -> u64 {
    COUNTS_HANDED_OVER.get()
}

/// The unwinding payload that ends a count left behind (see [`pause`]): not a panic, so no hook
/// prints it.
struct LeftBehind;

/// Runs `work` on a thread of its own at the large lane's priority and returns its answer: how
/// `serve` counts a template its node table does not remember
/// ([`crate::core::view::nodes::count_apart_with`]). Starting a thread costs less than a tenth of
/// such a count. A panic in `work` is resumed here; a thread that cannot start, or one too many
/// ([`COUNTING_AT_MOST`]), leaves the work to the caller.
///
/// The hand-over: a thread of the lowest priority runs only when no other thread of its cgroup
/// wants the CPU. In a pod those are serve's own (the ordinary admissions come first, as they
/// should); where serve shares its cgroup with busy processes (a control plane on the same host,
/// the scale bench) they can hold it for seconds, past the deadline. So the caller waits
/// `hand_over_after` at most, then counts at its own priority; the thread left behind ends at its
/// next pause ([`pause`]). An unprivileged thread cannot raise its priority back (`RLIMIT_NICE`
/// is 0 in containers), so the count is done again rather than moved.
pub fn count_apart(work: Work, hand_over_after: std::time::Duration) -> Box<dyn std::any::Any + Send> {
    use std::sync::atomic::{AtomicBool, Ordering};
    if COUNTING.fetch_add(1, Ordering::Relaxed) >= COUNTING_AT_MOST {
        COUNTING.fetch_sub(1, Ordering::Relaxed);
        return work();
    }
    let (sent, answer) = std::sync::mpsc::sync_channel(1);
    let left_behind = Arc::new(AtomicBool::new(false));
    let started = {
        let (work, left_behind) = (work.clone(), left_behind.clone());
        std::thread::Builder::new().name("ha-guard-count".into()).spawn(move || {
            struct Ended;
            impl Drop for Ended {
                fn drop(&mut self) {
                    COUNTING.fetch_sub(1, Ordering::Relaxed);
                }
            }
            let _ended = Ended;
            lower_priority();
            let _pausing = Pausing::start(Some(left_behind));
            match std::panic::catch_unwind(AssertUnwindSafe(|| work())) {
                Err(payload) if payload.is::<LeftBehind>() => {}
                // The caller may have stopped waiting: then nobody reads it.
                outcome => drop(sent.send(outcome)),
            }
        })
    };
    if let Err(e) = started {
        COUNTING.fetch_sub(1, Ordering::Relaxed);
        tracing::debug!(error = %e, "cannot start a counting thread: counted on the request's");
        return work();
    }
    match answer.recv_timeout(hand_over_after) {
        Ok(Ok(answer)) => answer,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => {
            left_behind.store(true, Ordering::Relaxed);
            COUNTS_HANDED_OVER.inc();
            tracing::debug!(
                waited = ?hand_over_after,
                "a count waited behind other threads of its cgroup: counted at the request's priority"
            );
            work()
        }
    }
}

/// Lowers the calling thread's CPU priority: the `SCHED_IDLE` policy, and [`NICE`] steps of nice
/// value where the policy cannot be set. On Linux each thread has its own; lowering needs no
/// privilege, and it is never raised back. `SCHED_IDLE` because the fair scheduler (EEVDF, Linux
/// 6.6 on) lets a running thread finish its slice (about a millisecond) before a thread that wakes
/// up takes the CPU, whatever their nice values; a `SCHED_IDLE` thread is preempted at once by
/// any other. At nice 19 alone, counts of new pod templates beside the ordinary requests still
/// doubled their p99 (docs/benchmarks.md, "Hostile admissions").
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_setscheduler, getpriority, setpriority and gettid read nothing of ours and
        // change only this thread's scheduling (pid 0: the calling thread).
        let idle = unsafe {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param)
        } == 0;
        if !idle {
            tracing::debug!(error = %std::io::Error::last_os_error(), "cannot set SCHED_IDLE: a higher nice value only");
        }
        let failed = unsafe {
            let me = libc::gettid() as libc::id_t;
            let now = libc::getpriority(libc::PRIO_PROCESS, me);
            libc::setpriority(libc::PRIO_PROCESS, me, (now + NICE).min(19))
        } != 0;
        if failed && !idle {
            tracing::warn!(error = %std::io::Error::last_os_error(), "cannot lower the large requests' thread's priority");
        }
    }
}

// Why the lanes' threads yield: a `SCHED_IDLE` thread is preempted at once when a normal thread
// *wakes*, but under EEVDF a normal thread that is already runnable and has run past its share
// ("not eligible") can wait while the scheduler picks the idle-policy thread, which then keeps the
// CPU until it blocks or the kernel's next tick (4 ms at `HZ=250`). Decoding a megabyte or counting
// thousands of nodes does neither for milliseconds. A yield makes the scheduler pick again, and
// having run, the idle-policy thread is no longer eligible (its weight is 3 to a normal thread's
// 1,024). Where the work is ours (the counts over the nodes) it pauses between pieces
// ([`pause`]); where it is not (serde_json decoding a large body) a timer interrupts it
// ([`YieldTicks`]).

/// How long a thread of the lanes counts between two yields ([`pause`]).
pub const PAUSE_EVERY: std::time::Duration = std::time::Duration::from_micros(50);

thread_local! {
    /// On a lane's thread while it works: when it last gave the CPU back.
    static LAST_YIELD: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
    /// Yields this thread took (pauses and ticks): for the tests. Const-initialised and without a
    /// destructor, so reading it is a plain thread-local access, safe in a signal handler.
    static YIELDS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// On a count's thread: set when its caller stopped waiting ([`count_apart`]).
    static LEFT_BEHIND: std::cell::RefCell<Option<Arc<AtomicBool>>> = const { std::cell::RefCell::new(None) };
}

/// The counts' pause point ([`crate::core::view::nodes::Apart::pause`]): on a lane's thread, gives
/// the CPU back when [`PAUSE_EVERY`] has passed since it last did, and ends a count its caller
/// stopped waiting for ([`count_apart`]) by unwinding it; on any other, nothing. A yield is a
/// syscall, less than a microsecond when nothing else waits; reading the clock (vDSO) tens of
/// nanoseconds, every 64 nodes.
pub fn pause() {
    let yielded = LAST_YIELD.with(|last| {
        let Some(since) = last.get() else { return false };
        if since.elapsed() < PAUSE_EVERY {
            return false;
        }
        yield_now();
        last.set(Some(std::time::Instant::now()));
        true
    });
    // Looked at once the thread has run again, at most a pause's worth of work after the caller
    // left: the count's answer would go to nobody.
    if yielded
        && LEFT_BEHIND.with_borrow(|left| left.as_ref().is_some_and(|l| l.load(std::sync::atomic::Ordering::Relaxed)))
    {
        std::panic::resume_unwind(Box::new(LeftBehind));
    }
}

fn yield_now() {
    YIELDS.with(|n| n.set(n.get() + 1));
    #[cfg(target_os = "linux")]
    // SAFETY: sched_yield takes nothing and cannot fail on Linux.
    unsafe {
        libc::sched_yield();
    }
    #[cfg(not(target_os = "linux"))]
    std::thread::yield_now();
}

/// [`pause`] yields on this thread until the guard is dropped, and on a count's thread, ends the
/// count once `left_behind` is set.
struct Pausing;

impl Pausing {
    fn start(left_behind: Option<Arc<AtomicBool>>) -> Pausing {
        LAST_YIELD.with(|last| last.set(Some(std::time::Instant::now())));
        LEFT_BEHIND.set(left_behind);
        Pausing
    }
}

impl Drop for Pausing {
    fn drop(&mut self) {
        LAST_YIELD.with(|last| last.set(None));
        LEFT_BEHIND.set(None);
    }
}

/// How often the large lane's thread is made to give the CPU back while it works ([`YieldTicks`]):
/// the longest an ordinary review waits behind it once the scheduler has picked it. Not shorter,
/// because each tick costs the CPU it interrupts (whichever thread runs there) an interrupt and a
/// signal, 26 µs measured on a nested virtual machine (docs/benchmarks.md).
pub const YIELD_EVERY: std::time::Duration = std::time::Duration::from_micros(500);

/// A timer that makes the thread that created it call `sched_yield` every [`YIELD_EVERY`] while
/// it is started: the large lane's own preemption tick, for the work that has no place to pause
/// (serde_json decoding a large body). A POSIX timer with `SIGEV_THREAD_ID`; no crate offers a
/// per-thread interval signal (nix's `Timer` would, at the cost of a dependency for two calls).
/// Linux only; elsewhere nothing.
#[cfg(target_os = "linux")]
pub struct YieldTicks {
    timer: libc::timer_t,
}

/// The signal the ticks send; its handler only yields. A real-time signal that nothing else in
/// the process uses (tokio and the rest use the classic ones); real-time signals are not merged
/// with others, and a timer queues at most one at a time.
#[cfg(target_os = "linux")]
fn yield_signal() -> libc::c_int {
    libc::SIGRTMIN() + 3
}

#[cfg(target_os = "linux")]
extern "C" fn on_yield_tick(_: libc::c_int) {
    // Async-signal-safe: a thread-local add and a syscall that sets no errno.
    yield_now();
}

/// Installs [`on_yield_tick`] once per process; false when it could not be (then no timer is
/// made: the signal's default action would end the process).
#[cfg(target_os = "linux")]
fn handler_installed() -> bool {
    static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler is an `extern "C" fn(c_int)` that does
        // only async-signal-safe work. SA_RESTART: a syscall the tick interrupts is restarted.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_yield_tick as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(yield_signal(), &action, std::ptr::null_mut()) == 0
        }
    })
}

#[cfg(target_os = "linux")]
impl YieldTicks {
    /// A stopped timer aimed at the calling thread; None where one cannot be made (the work then
    /// runs without yielding, as before).
    pub fn new() -> Option<YieldTicks> {
        if !handler_installed() {
            tracing::debug!("cannot install the yield tick's handler: the lanes run without it");
            return None;
        }
        // SAFETY: a zeroed sigevent is valid; timer_create writes the new timer's id into
        // `timer`, which is used only after it returned 0.
        unsafe {
            let mut event: libc::sigevent = std::mem::zeroed();
            event.sigev_notify = libc::SIGEV_THREAD_ID;
            event.sigev_signo = yield_signal();
            event.sigev_notify_thread_id = libc::gettid();
            let mut timer: libc::timer_t = std::ptr::null_mut();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut timer) != 0 {
                tracing::debug!(error = %std::io::Error::last_os_error(), "cannot create the yield tick: the lanes run without it");
                return None;
            }
            Some(YieldTicks { timer })
        }
    }

    /// Ticks from now until [`YieldTicks::stop`].
    pub fn start(&self) {
        self.set(YIELD_EVERY);
    }

    pub fn stop(&self) {
        self.set(std::time::Duration::ZERO);
    }

    fn set(&self, every: std::time::Duration) {
        let every = libc::timespec { tv_sec: 0, tv_nsec: every.as_nanos() as libc::c_long };
        let spec = libc::itimerspec { it_interval: every, it_value: every };
        // SAFETY: the timer is ours and alive; a zero it_value disarms it.
        unsafe { libc::timer_settime(self.timer, 0, &spec, std::ptr::null_mut()) };
    }
}

#[cfg(target_os = "linux")]
impl Drop for YieldTicks {
    fn drop(&mut self) {
        // SAFETY: deleted once, by its owner, on the thread it signals.
        unsafe { libc::timer_delete(self.timer) };
    }
}

#[cfg(not(target_os = "linux"))]
pub struct YieldTicks;

#[cfg(not(target_os = "linux"))]
impl YieldTicks {
    pub fn new() -> Option<YieldTicks> {
        None
    }
    pub fn start(&self) {}
    pub fn stop(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_large_body_is_judged_on_the_lane_at_a_lower_priority_and_a_panic_is_a_failure() {
        let lane = LargeLane::start();
        let name = judge_apart(&lane, LARGE_BODY + 1, 0, || std::thread::current().name().map(str::to_string)).await;
        assert_eq!(name.unwrap().as_deref(), Some("ha-guard-large"));
        let small =
            judge_apart(&lane, LARGE_BODY, LARGE_VALUES, || std::thread::current().name().map(str::to_string)).await;
        assert_ne!(small.unwrap().as_deref(), Some("ha-guard-large"), "at the limits: the blocking pool");
        // A small body packed with values goes to the lane too.
        let packed =
            judge_apart(&lane, 1024, LARGE_VALUES + 1, || std::thread::current().name().map(str::to_string)).await;
        assert_eq!(packed.unwrap().as_deref(), Some("ha-guard-large"));
        #[cfg(target_os = "linux")]
        {
            // SAFETY: reads the calling thread's nice value.
            let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
            let here = nice();
            let there = judge_apart(&lane, LARGE_BODY + 1, 0, nice).await.unwrap();
            assert_eq!(there, (here + NICE).min(19), "{NICE} steps below this thread's {here}");
        }
        let panicked = judge_apart(&lane, LARGE_BODY + 1, 0, || panic!("injected")).await;
        assert!(matches!(panicked, Err(Failed)));
        assert_eq!(judge_apart(&lane, LARGE_BODY + 1, 0, || 7).await.unwrap(), 7, "the lane survives a panic");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn started_ticks_yield_and_stopped_ones_do_not() {
        let busy = |for_: std::time::Duration| {
            let until = std::time::Instant::now() + for_;
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
        };
        std::thread::spawn(move || {
            let ticks = YieldTicks::new().expect("a timer on Linux");
            let ticks_here = || YIELDS.with(std::cell::Cell::get);
            let before = ticks_here();
            ticks.start();
            busy(std::time::Duration::from_millis(30));
            // A sleep the tick interrupts is restarted (SA_RESTART, and std's loop on EINTR).
            let slept = std::time::Instant::now();
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert!(slept.elapsed() >= std::time::Duration::from_millis(5));
            ticks.stop();
            let ticked = ticks_here() - before;
            // 60 at most in 30 ms; a loaded machine delivers fewer, never none.
            assert!(ticked >= 3, "{ticked} yields in 30 ms of work every {YIELD_EVERY:?}");
            // Stopped: none, but the one that may have been queued as it stopped.
            let stopped = ticks_here();
            busy(std::time::Duration::from_millis(30));
            let after = ticks_here() - stopped;
            assert!(after <= 1, "{after} ticks in 30 ms after the stop");
        })
        .join()
        .unwrap();
    }

    /// `f`'s answer, counted apart as `serve` counts.
    fn apart<T: Send + 'static>(f: impl Fn() -> T + Send + Sync + 'static) -> T {
        let work: Work = Arc::new(move || Box::new(f()) as Box<dyn std::any::Any + Send>);
        *count_apart(work, std::time::Duration::from_secs(60)).downcast::<T>().expect("f's answer")
    }

    fn thread_name() -> Option<String> {
        std::thread::current().name().map(str::to_string)
    }

    #[test]
    fn a_count_apart_runs_on_a_thread_of_lower_priority_and_its_panic_reaches_the_caller() {
        assert_eq!(apart(thread_name).as_deref(), Some("ha-guard-count"));
        #[cfg(target_os = "linux")]
        {
            // SAFETY: reads the calling thread's nice value.
            let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
            let here = nice();
            assert_eq!(apart(nice), (here + NICE).min(19));
            assert_eq!(nice(), here, "the caller's own priority is unchanged");
            // SAFETY: reads the calling thread's scheduling policy.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            assert_eq!(apart(policy), libc::SCHED_IDLE);
            assert_ne!(policy(), libc::SCHED_IDLE, "the caller's own policy is unchanged");
        }
        // A count pauses on its thread every PAUSE_EVERY, never on the caller's.
        let yields = || YIELDS.with(std::cell::Cell::get);
        let count = move || {
            let (before, until) = (yields(), std::time::Instant::now() + 40 * PAUSE_EVERY);
            while std::time::Instant::now() < until {
                pause();
            }
            yields() - before
        };
        let paused = apart(count);
        assert!((1..=40).contains(&paused), "{paused} yields in 40 pauses' time");
        assert_eq!(count(), 0, "the caller's thread does not pause");
        let panicked = std::panic::catch_unwind(|| apart(|| panic!("injected")));
        assert!(panicked.is_err());
    }

    #[test]
    fn a_count_that_waits_apart_past_its_hand_over_is_counted_by_the_caller_and_the_one_left_ends() {
        use std::sync::atomic::Ordering;
        // On the count's thread, a count that does not end (as one that never gets the CPU): it
        // only pauses. On the caller's, it answers at once.
        let ended = Arc::new(AtomicBool::new(false));
        struct SetOnDrop(Arc<AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let work: Work = {
            let ended = ended.clone();
            Arc::new(move || {
                if thread_name().as_deref() == Some("ha-guard-count") {
                    let _ends = SetOnDrop(ended.clone());
                    loop {
                        pause();
                    }
                }
                Box::new(thread_name()) as Box<dyn std::any::Any + Send>
            })
        };
        let before = counts_handed_over();
        let hand_over_after = std::time::Duration::from_millis(50);
        let started = std::time::Instant::now();
        let answer = count_apart(work, hand_over_after);
        assert!(started.elapsed() >= hand_over_after, "waited for the count apart first");
        assert_eq!(*answer.downcast::<Option<String>>().unwrap(), thread_name(), "counted by the caller");
        assert!(counts_handed_over() > before);
        // The thread left behind ends at its next pause (on a loaded machine, once it runs).
        let patience = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !ended.load(Ordering::Relaxed) && std::time::Instant::now() < patience {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(ended.load(Ordering::Relaxed), "the count left behind still runs");
        // A count that ends in time is the thread's, as before.
        assert_eq!(apart(thread_name).as_deref(), Some("ha-guard-count"));
    }
}

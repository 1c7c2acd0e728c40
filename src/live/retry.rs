//! How a failing watch is retried, and what is said about it.
//!
//! kube-runtime's `default_backoff` resets its delay on every `Ok` item, and a watcher that fails
//! to list yields `Ok(Event::Init)` before each new attempt: against an apiserver that answers
//! errors the delay never grows past its first step (~0.8 s), and one WARN per attempt and kind
//! came out (252 lines in 40 s). Here the delay grows until the watch makes progress (objects
//! listed, an event), and it starts over only once the watch has stayed healthy for a while, so a
//! watch that lists and then fails again at once keeps backing off. After a failure the watcher is
//! made anew (a new list): its arrival is the recovery, seen in every kind. The log says each change of
//! state once: failing (with the error, the attempt and the next delay), recovered (with the
//! attempts it took); the attempts in between are at debug level.

use std::fmt::Display;
use std::time::Duration;

use backon::BackoffBuilder;
use futures::{Stream, StreamExt};
use kube::runtime::watcher::Event;
use tokio::time::Instant;

/// The retry schedule of a watch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// The first delay; each failure in a row doubles it.
    pub first: Duration,
    /// The delay stops growing here (with jitter, a delay is up to twice this).
    pub max: Duration,
    /// Random jitter of up to the delay itself, so that replicas and kinds do not retry in step.
    pub jitter: bool,
    /// How long a watch must stay healthy before its delay starts again from `first`.
    pub reset_after: Duration,
}

impl Default for RetryPolicy {
    /// client-go's reflector: 0.8 s doubling to 30 s, jittered (so 60 s at most), starting over
    /// after 2 minutes of health.
    fn default() -> Self {
        RetryPolicy {
            first: Duration::from_millis(800),
            max: Duration::from_secs(30),
            jitter: true,
            reset_after: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    fn backoff(&self) -> backon::ExponentialBackoff {
        let builder = backon::ExponentialBuilder::default()
            .with_min_delay(self.first)
            .with_max_delay(self.max)
            .with_factor(2.0)
            .without_max_times();
        if self.jitter { builder.with_jitter().build() } else { builder.build() }
    }
}

/// A change of state worth one log line.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The first failure after health.
    Failing { attempt: u32, retry_in: Duration },
    /// Progress after failures.
    Recovered { attempts: u32, failing_for: Duration },
}

/// The health of one watch: the schedule of its retries and whether it is failing.
pub struct WatchHealth {
    policy: RetryPolicy,
    backoff: backon::ExponentialBackoff,
    /// Failed attempts since the watch last made progress (0: healthy).
    attempts: u32,
    failing_since: Option<Instant>,
    /// When the watch last went from failing to healthy (or started).
    healthy_since: Instant,
    /// Whether `backoff` has been used since it was last reset.
    backed_off: bool,
}

impl WatchHealth {
    pub fn new(policy: RetryPolicy) -> WatchHealth {
        WatchHealth {
            policy,
            backoff: policy.backoff(),
            attempts: 0,
            failing_since: None,
            healthy_since: Instant::now(),
            backed_off: false,
        }
    }

    /// A failed attempt: the delay before the next one, and the change to log if the watch was
    /// healthy until now.
    pub fn failed(&mut self) -> (Duration, Option<Change>) {
        let now = Instant::now();
        // Healthy for long enough since the last failures: start the schedule over.
        if self.failing_since.is_none() && self.backed_off && now - self.healthy_since >= self.policy.reset_after {
            self.backoff = self.policy.backoff();
            self.backed_off = false;
        }
        self.backed_off = true;
        let retry_in = self.backoff.next().unwrap_or(self.policy.max);
        self.attempts += 1;
        if self.failing_since.is_some() {
            return (retry_in, None);
        }
        self.failing_since = Some(now);
        (retry_in, Some(Change::Failing { attempt: self.attempts, retry_in }))
    }

    /// Progress (objects listed, an event): the change to log if the watch was failing.
    pub fn progressed(&mut self) -> Option<Change> {
        let since = self.failing_since.take()?;
        let now = Instant::now();
        let attempts = std::mem::take(&mut self.attempts);
        self.healthy_since = now;
        Some(Change::Recovered { attempts, failing_for: now - since })
    }

    /// Failed attempts since the last progress.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// Follows the watcher that `watch` makes for `kind`, handing each event to `apply`, forever.
/// After an error it waits as `policy` says, then starts a new watcher, which lists anew: so a
/// recovery is seen (the list comes in) and logged, even for a kind in which nothing happens. A
/// watcher that only re-opened its watch would say nothing when it worked again. An error for
/// which `not_served` returns true (a custom resource whose CRD is not installed) is not a
/// failure: the caller has said so, and the kind is looked for again every `recheck`. Every
/// other error is told to `failed` (the view is no longer current from then on) before the wait.
pub async fn follow<K, E: Display, S: Stream<Item = Result<Event<K>, E>>>(
    mut watch: impl FnMut() -> S,
    kind: impl Display + Copy,
    policy: RetryPolicy,
    recheck: Duration,
    mut apply: impl FnMut(Event<K>),
    mut not_served: impl FnMut(&E) -> bool,
    mut failed: impl FnMut(&E),
) {
    let mut health = WatchHealth::new(policy);
    loop {
        let mut stream = std::pin::pin!(watch());
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    // `Init` only says a (re)list begins: no progress yet.
                    if !matches!(event, Event::Init)
                        && let Some(Change::Recovered { attempts, failing_for }) = health.progressed()
                    {
                        log_recovered(kind, attempts, failing_for);
                    }
                    apply(event);
                }
                Err(e) if not_served(&e) => {
                    // The apiserver answered: the watch is healthy, there is just nothing to watch.
                    if let Some(Change::Recovered { attempts, failing_for }) = health.progressed() {
                        log_recovered(kind, attempts, failing_for);
                    }
                    tokio::time::sleep(recheck).await;
                    break;
                }
                Err(e) => {
                    failed(&e);
                    let (retry_in, change) = health.failed();
                    let retry_in_ms = retry_in.as_millis() as u64;
                    match change {
                        Some(Change::Failing { attempt, .. }) => tracing::warn!(
                            kind = %kind,
                            error = %e,
                            attempt,
                            retry_in_ms,
                            "watch failing; serving the last known state and retrying with backoff"
                        ),
                        _ => {
                            tracing::debug!(kind = %kind, error = %e, attempt = health.attempts(), retry_in_ms, "watch still failing")
                        }
                    }
                    tokio::time::sleep(retry_in).await;
                    break;
                }
            }
        }
    }
}

fn log_recovered(kind: impl Display, attempts: u32, failing_for: Duration) {
    tracing::info!(
        kind = %kind,
        attempts,
        failing_for_s = failing_for.as_secs(),
        "watch recovered; the view of this kind is current again"
    );
}

#[cfg(test)]
#[path = "tests/retry.rs"]
mod tests;

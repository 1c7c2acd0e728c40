//! The progress line on a terminal: how much of the cluster has been read. Nothing when stderr
//! is not a terminal (a pipe, a CI log): the report alone goes out.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Counts what the lists read and redraws one line on stderr, at most every 100 ms.
pub struct Progress {
    shown: bool,
    state: Mutex<State>,
}

struct State {
    /// What → (read so far, the apiserver's estimate of what remains).
    counts: BTreeMap<&'static str, (usize, Option<i64>)>,
    drawn: Option<Instant>,
}

const EVERY: Duration = Duration::from_millis(100);

impl Progress {
    /// `shown`: draw the line (stderr is a terminal).
    pub fn new(shown: bool) -> Progress {
        Progress { shown, state: Mutex::new(State { counts: BTreeMap::new(), drawn: None }) }
    }

    /// On a terminal only.
    pub fn on_terminal() -> Progress {
        use std::io::IsTerminal;
        Progress::new(std::io::stderr().is_terminal())
    }

    /// Whether the line is drawn.
    pub fn shown(&self) -> bool {
        self.shown
    }

    /// Counts `n` more of `what`; `remaining` is the apiserver's estimate of what is left.
    pub fn add(&self, what: &'static str, n: usize, remaining: Option<i64>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let entry = state.counts.entry(what).or_default();
        entry.0 += n;
        entry.1 = remaining;
        if !self.shown || state.drawn.is_some_and(|t| t.elapsed() < EVERY) {
            return;
        }
        state.drawn = Some(Instant::now());
        let line = state.line();
        let _ = write!(std::io::stderr(), "\r\x1b[Kreading the cluster: {line}");
    }

    /// Says what is being done now (after reading).
    pub fn stage(&self, what: &str) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K{what}");
        }
    }

    /// Clears the line.
    pub fn done(&self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

impl State {
    fn line(&self) -> String {
        self.counts
            .iter()
            .map(|(what, (n, remaining))| match remaining {
                Some(r) if *r > 0 => format!("{what} {n} of ~{}", *n as i64 + r),
                _ => format!("{what} {n}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_counts_and_estimates() {
        let p = Progress::new(false);
        p.add("pods", 500, Some(1500));
        p.add("objects", 20, None);
        p.add("pods", 500, Some(1000));
        assert_eq!(p.state.lock().unwrap().line(), "objects 20, pods 1000 of ~2000");
        p.add("pods", 1000, None);
        assert_eq!(p.state.lock().unwrap().line(), "objects 20, pods 2000");
    }
}

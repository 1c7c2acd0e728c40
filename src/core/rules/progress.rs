//! How far one review has got, shared with the shell that runs it under a deadline: the review
//! says which stage it is in (decoding, each rule family, the mutations, the decision); the
//! shell, whose clock it is (the core reads none), asks it to stop once the deadline has passed,
//! and names what was not judged. The review stops at the next stage, so abandoned work ends soon
//! after its answer has gone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Where a review is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Reading the request (the shell's part, before any rule).
    Decoding,
    /// Running the rule family `FAMILIES[i]` ([`super::rules_of`] names its rules).
    Family(usize),
    /// Planning the mutations.
    Mutations,
    /// Deciding the findings and writing the answer.
    Deciding,
}

impl Stage {
    fn encode(self) -> usize {
        match self {
            Stage::Decoding => 0,
            Stage::Mutations => 1,
            Stage::Deciding => 2,
            Stage::Family(i) => 3 + i,
        }
    }

    fn decode(n: usize) -> Stage {
        match n {
            0 => Stage::Decoding,
            1 => Stage::Mutations,
            2 => Stage::Deciding,
            n => Stage::Family(n - 3),
        }
    }

    /// The stage's name where it judges no rule: what a metric and a log line say instead of a
    /// rule ID.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Decoding => "decoding",
            Stage::Family(_) => "rules",
            Stage::Mutations => "mutations",
            Stage::Deciding => "decision",
        }
    }
}

/// One review's progress (see the module's doc).
#[derive(Debug, Default)]
pub struct Progress {
    stop: AtomicBool,
    stage: AtomicUsize,
}

impl Progress {
    pub fn new() -> Self {
        Self::default()
    }

    /// The review enters `stage`; false when it has been asked to stop (it must not go on).
    pub fn enter(&self, stage: Stage) -> bool {
        if self.stopped() {
            return false;
        }
        self.stage.store(stage.encode(), Ordering::SeqCst);
        true
    }

    /// Where the review is (or stopped).
    pub fn stage(&self) -> Stage {
        Stage::decode(self.stage.load(Ordering::SeqCst))
    }

    /// Asks the review to stop at its next stage.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// Whether a review with `progress` (if any) may enter `stage`.
pub fn may_enter(progress: Option<&Progress>, stage: Stage) -> bool {
    progress.is_none_or(|p| p.enter(stage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_reads_back_as_itself() {
        let mut stages = vec![Stage::Decoding, Stage::Mutations, Stage::Deciding];
        stages.extend((0..20).map(Stage::Family));
        for s in stages {
            assert_eq!(Stage::decode(s.encode()), s);
        }
    }

    #[test]
    fn once_stopped_no_stage_is_entered_and_the_last_one_is_kept() {
        let p = Progress::new();
        assert_eq!(p.stage(), Stage::Decoding);
        assert!(p.enter(Stage::Family(3)));
        p.stop();
        assert!(!p.enter(Stage::Family(4)));
        assert_eq!(p.stage(), Stage::Family(3), "where it was when asked to stop");
        assert!(may_enter(None, Stage::Mutations), "no progress to report: always");
    }
}

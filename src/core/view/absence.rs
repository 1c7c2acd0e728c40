//! When the view's absences are facts: whether a rule that asserts an absence ("no PDB covers
//! this workload", "no workload is this HPA's target", "this PDB covers no workload") may speak
//! (DESIGN.md §2, "Where rules are judged").
//!
//! Such a rule is true only of a whole set: the files of `check --complete`, the cluster as the
//! audit reads it. An admission request is one object of what is often a multi-object apply:
//! `kubectl apply -f`, Helm, Argo CD and Flux write the objects of one application one after
//! another, in an order that is theirs, so the object that fills the absence may be a few
//! milliseconds behind the one under review. At admission an absence is therefore said only when
//! it has lasted: on an UPDATE of an object created more than the grace ago, judged on a view
//! known to hold the cluster's writes up to at least the end of that grace. A CREATE never says it.

use std::time::Duration;

// Re-exported: the clock a shell hands in is this type (the fuzz targets name it through here).
pub use k8s_openapi::jiff::Timestamp;

/// The grace an absence must outlast before an admission says it: an apply of many objects
/// (kubectl, Helm, a GitOps sync wave) writes them within seconds; a minute is ample, and short
/// enough that a write a minute later hears about a PDB that never came.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// Whether absences may be asserted in this review.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Absences {
    /// As the view says ([`View::is_complete`](super::View::is_complete)): `check`, the audit, and
    /// an admission whose absence has lasted.
    #[default]
    Judged,
    /// Not asserted: what was written with this object may still be on its way (an admission of a
    /// CREATE, or of an UPDATE within the grace).
    Withheld,
}

/// What an admission knows of time: the shell reads the clock, the core only compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionClock {
    pub now: Timestamp,
    /// How long an absence must have lasted ([`DEFAULT_GRACE`] unless configured).
    pub grace: Duration,
    /// Up to when the view is known to hold every write of the cluster: `now` while every watch
    /// is healthy, the start of a failure while one is failing, `None` before the first sync.
    pub view_current_as_of: Option<Timestamp>,
}

impl AdmissionClock {
    /// At `now`, with a view that holds every write up to `now` (every watch healthy, or a static
    /// view).
    pub fn current(now: Timestamp, grace: Duration) -> AdmissionClock {
        AdmissionClock { now, grace, view_current_as_of: Some(now) }
    }
}

impl Absences {
    /// An admission of a write (`update`: an UPDATE, else a CREATE) of an object created at
    /// `created` (its `metadata.creationTimestamp`, whole seconds). Judged only when the object is
    /// older than the grace and the view has held the cluster's writes since the grace ended.
    pub fn at_admission(update: bool, created: Option<Timestamp>, clock: &AdmissionClock) -> Absences {
        let (true, Some(created), Some(current)) = (update, created, clock.view_current_as_of) else {
            return Absences::Withheld;
        };
        let grace_ms = i64::try_from(clock.grace.as_millis()).unwrap_or(i64::MAX);
        let grace_ends = created.as_millisecond().saturating_add(grace_ms);
        if clock.now.as_millisecond() > grace_ends && current.as_millisecond() > grace_ends {
            Absences::Judged
        } else {
            Absences::Withheld
        }
    }

    pub fn withheld(self) -> bool {
        self == Absences::Withheld
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn clock(now: i64, current: Option<i64>) -> AdmissionClock {
        AdmissionClock { now: at(now), grace: Duration::from_secs(60), view_current_as_of: current.map(at) }
    }

    #[test]
    fn a_create_never_asserts_an_absence_however_old() {
        // A CREATE's object is new by definition; even a clock or a timestamp that says otherwise
        // (a restored backup, a skewed clock) does not make the rest of the apply arrive sooner.
        assert_eq!(Absences::at_admission(false, Some(at(0)), &clock(3600, Some(3600))), Absences::Withheld);
        assert_eq!(Absences::at_admission(false, None, &clock(3600, Some(3600))), Absences::Withheld);
    }

    #[test]
    fn an_update_asserts_it_once_the_object_is_older_than_the_grace() {
        // Created at 0, grace 60 s: at 60 s exactly it is not older than the grace; at 61 it is.
        assert_eq!(Absences::at_admission(true, Some(at(0)), &clock(30, Some(30))), Absences::Withheld);
        assert_eq!(Absences::at_admission(true, Some(at(0)), &clock(60, Some(60))), Absences::Withheld);
        assert_eq!(Absences::at_admission(true, Some(at(0)), &clock(61, Some(61))), Absences::Judged);
        assert_eq!(Absences::at_admission(true, Some(at(0)), &clock(86_400, Some(86_400))), Absences::Judged);
    }

    #[test]
    fn the_view_must_have_held_the_writes_past_the_grace() {
        // A watch failing since 50 s: the PDB written at 55 s may be missing from the view.
        assert_eq!(Absences::at_admission(true, Some(at(0)), &clock(300, Some(50))), Absences::Withheld);
        assert_eq!(Absences::at_admission(true, Some(at(0)), &clock(300, Some(60))), Absences::Withheld);
        assert_eq!(Absences::at_admission(true, Some(at(0)), &clock(300, Some(61))), Absences::Judged);
        // Never synced: nothing is known to be absent.
        assert_eq!(Absences::at_admission(true, Some(at(0)), &clock(300, None)), Absences::Withheld);
    }

    #[test]
    fn an_update_without_a_creation_time_withholds() {
        assert_eq!(Absences::at_admission(true, None, &clock(300, Some(300))), Absences::Withheld);
    }

    #[test]
    fn the_grace_is_configurable_down_to_zero() {
        let c = AdmissionClock { grace: Duration::ZERO, ..clock(1, Some(1)) };
        assert_eq!(Absences::at_admission(true, Some(at(0)), &c), Absences::Judged);
        assert_eq!(Absences::at_admission(true, Some(at(1)), &c), Absences::Withheld);
    }
}

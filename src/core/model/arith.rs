//! The disruption arithmetic (DESIGN.md §3): what a PDB's budget leaves to evict over a number of
//! pods, and the int-or-percent values Kubernetes rounds. (A workload's floor and ceiling depend
//! on the autoscalers in the view: `view::bounds`.)

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// An int-or-percent value: `Ok(Int)` or `Ok(Percent)`; `Err` for a string that is not `N%`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    Int(i32),
    Percent(i32),
}

pub fn amount(v: &IntOrString) -> Result<Amount, String> {
    match v {
        IntOrString::Int(i) => Ok(Amount::Int(*i)),
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i32>().ok())
            .map(Amount::Percent)
            .ok_or_else(|| format!("{s:?} is neither an integer nor a percentage")),
    }
}

/// `ceil(percent × total / 100)` without floating point.
pub fn percent_up(percent: i32, total: i32) -> i32 {
    let product = i64::from(percent) * i64::from(total);
    let scaled = (product + 99).div_euclid(100);
    scaled.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// `floor(percent × total / 100)`: how the Deployment controller rounds maxUnavailable.
pub fn percent_down(percent: i32, total: i32) -> i32 {
    let product = i64::from(percent) * i64::from(total);
    product.div_euclid(100).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// Which field of the PDB sets the budget.
#[derive(Clone, Debug, PartialEq)]
pub enum Budget {
    MinAvailable(IntOrString),
    MaxUnavailable(IntOrString),
    /// Neither is set: the disruption controller then expects no pod and allows no disruption, so
    /// every eviction of a Ready pod it selects is refused.
    Unset,
}

impl Budget {
    /// The budget a PDB with these fields sets (`maxUnavailable` wins, as in the API).
    pub fn new(min_available: Option<&IntOrString>, max_unavailable: Option<&IntOrString>) -> Budget {
        match (max_unavailable, min_available) {
            (Some(m), _) => Budget::MaxUnavailable(m.clone()),
            (None, Some(m)) => Budget::MinAvailable(m.clone()),
            (None, None) => Budget::Unset,
        }
    }

    /// The PDB field that sets the budget, for finding paths.
    pub fn path(&self) -> &'static str {
        match self {
            Budget::MaxUnavailable(_) => "spec.maxUnavailable",
            Budget::MinAvailable(_) | Budget::Unset => "spec.minAvailable",
        }
    }

    pub fn describe(&self) -> String {
        let show = |v: &IntOrString| match v {
            IntOrString::Int(i) => i.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        match self {
            Budget::MinAvailable(v) => format!("minAvailable {}", show(v)),
            Budget::MaxUnavailable(v) => format!("maxUnavailable {}", show(v)),
            Budget::Unset => "no minAvailable or maxUnavailable".into(),
        }
    }

    /// The controller counts its expected pods from the pods' controllers' scale (a
    /// `maxUnavailable`, a percentage `minAvailable`), where pods without a controller count for
    /// nothing; only an integer `minAvailable` counts the pods themselves.
    pub fn expects_controllers_scale(&self) -> bool {
        match self {
            Budget::MinAvailable(v) => !matches!(amount(v), Ok(Amount::Int(_))),
            Budget::MaxUnavailable(_) => true,
            Budget::Unset => false,
        }
    }
}

/// What the disruption controller counts over the pods a PDB selects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// The pods the selector matches (as the controller lists them).
    pub pods: i32,
    /// The summed scale (`spec.replicas`) of those pods' controllers, each controller once; pods
    /// without a controller add nothing.
    pub scale: i32,
    /// The selected pods that are Ready and not being deleted (pods without a controller too).
    pub healthy: i32,
}

impl Counts {
    /// `n` pods of controllers whose scale is `n`, all healthy: a workload at rest.
    pub fn at_rest(n: i32) -> Counts {
        Counts { pods: n, scale: n, healthy: n }
    }
}

/// What the disruption controller writes in a PDB's `status` (`pkg/controller/disruption`:
/// `getExpectedPodCount`, `countHealthyPods`, `updatePdbStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    pub expected: i32,
    pub desired_healthy: i32,
    pub current_healthy: i32,
    /// `current − desired`, and 0 when that is negative or when nothing is expected.
    pub allowed: i32,
}

/// The controller's arithmetic (DESIGN.md §3): expected and desired healthy from the budget
/// (`maxUnavailable`: expected = the controllers' scale, desired = max(0, expected − n or expected
/// − ceil(p × expected)); integer `minAvailable` n: expected = the selected pods, desired = n;
/// percentage `minAvailable`: expected = the scale, desired = ceil(p × expected); neither: expected
/// and desired 0), then allowed = current − desired, 0 when negative or when expected ≤ 0.
pub fn status(budget: &Budget, counts: Counts) -> Result<Status, String> {
    let (expected, desired_healthy) = match budget {
        Budget::MaxUnavailable(v) => {
            let expected = counts.scale;
            let unavailable = match amount(v)? {
                Amount::Int(n) => n,
                Amount::Percent(p) => percent_up(p, expected),
            };
            (expected, expected.saturating_sub(unavailable).max(0))
        }
        Budget::MinAvailable(v) => match amount(v)? {
            Amount::Int(n) => (counts.pods, n),
            Amount::Percent(p) => (counts.scale, percent_up(p, counts.scale)),
        },
        Budget::Unset => (0, 0),
    };
    let allowed = if expected <= 0 { 0 } else { counts.healthy.saturating_sub(desired_healthy).max(0) };
    Ok(Status { expected, desired_healthy, current_healthy: counts.healthy, allowed })
}

/// A budget over workloads at their floor (admission's question: `pdb-blocks-eviction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disruption {
    /// The pods covered: the workloads' floors summed, every one Ready.
    pub pods: i32,
    pub expected: i32,
    pub desired_healthy: i32,
    pub allowed: i32,
}

impl Disruption {
    /// `pdb-blocks-eviction`: something is covered and nothing may be evicted.
    pub fn blocks(&self) -> bool {
        self.pods >= 1 && self.allowed <= 0
    }
}

/// [`status`] over `pods` pods of workloads at rest at their floor (every pod Ready, each
/// workload's scale its floor).
pub fn disruption(budget: &Budget, pods: i32) -> Result<Disruption, String> {
    let s = status(budget, Counts::at_rest(pods))?;
    Ok(Disruption { pods, expected: s.expected, desired_healthy: s.desired_healthy, allowed: s.allowed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i32) -> IntOrString {
        IntOrString::Int(i)
    }
    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    #[test]
    fn min_available_integer() {
        let d = disruption(&Budget::MinAvailable(int(1)), 1).unwrap();
        assert_eq!((d.desired_healthy, d.allowed, d.blocks()), (1, 0, true));
        let d = disruption(&Budget::MinAvailable(int(1)), 2).unwrap();
        assert_eq!((d.allowed, d.blocks()), (1, false));
        // The controller never writes a negative count: 2 healthy, 3 needed allows 0.
        let d = disruption(&Budget::MinAvailable(int(3)), 2).unwrap();
        assert_eq!((d.allowed, d.blocks()), (0, true));
    }

    #[test]
    fn min_available_percent_rounds_up() {
        let d = disruption(&Budget::MinAvailable(pct("50%")), 1).unwrap();
        assert_eq!((d.desired_healthy, d.allowed, d.blocks()), (1, 0, true), "ceil(0.5 × 1) = 1");
        let d = disruption(&Budget::MinAvailable(pct("80%")), 1).unwrap();
        assert!(d.blocks(), "ceil(0.8 × 1) = 1 leaves 0");
        let d = disruption(&Budget::MinAvailable(pct("80%")), 5).unwrap();
        assert_eq!((d.desired_healthy, d.allowed), (4, 1));
        let d = disruption(&Budget::MinAvailable(pct("100%")), 7).unwrap();
        assert!(d.blocks());
    }

    #[test]
    fn max_unavailable_percent_rounds_up() {
        let d = disruption(&Budget::MaxUnavailable(pct("10%")), 3).unwrap();
        assert_eq!((d.desired_healthy, d.allowed, d.blocks()), (2, 1, false), "ceil(0.1 × 3) = 1");
        let d = disruption(&Budget::MaxUnavailable(pct("0%")), 3).unwrap();
        assert!(d.blocks());
        let d = disruption(&Budget::MaxUnavailable(int(0)), 3).unwrap();
        assert!(d.blocks());
        let d = disruption(&Budget::MaxUnavailable(int(1)), 1).unwrap();
        assert_eq!((d.allowed, d.blocks()), (1, false));
    }

    #[test]
    fn nothing_covered_never_blocks() {
        let d = disruption(&Budget::MinAvailable(int(1)), 0).unwrap();
        assert!(!d.blocks());
    }

    /// Neither field: `getExpectedPodCount` leaves expected at 0 and `updatePdbStatus` then allows
    /// nothing, however many pods are healthy.
    #[test]
    fn unset_budget_allows_nothing() {
        let d = disruption(&Budget::Unset, 3).unwrap();
        assert_eq!((d.expected, d.desired_healthy, d.allowed, d.blocks()), (0, 0, 0, true));
        assert!(!disruption(&Budget::Unset, 0).unwrap().blocks(), "covering nothing blocks nothing");
    }

    /// maxUnavailable above the replicas: desired healthy is clamped at 0, not negative, and
    /// every healthy pod may go.
    #[test]
    fn max_unavailable_above_the_replicas_clamps_desired_at_zero() {
        let d = disruption(&Budget::MaxUnavailable(int(5)), 2).unwrap();
        assert_eq!((d.desired_healthy, d.allowed), (0, 2));
        let s = status(&Budget::MaxUnavailable(pct("100%")), Counts { pods: 3, scale: 3, healthy: 1 }).unwrap();
        assert_eq!((s.desired_healthy, s.allowed), (0, 1));
    }

    /// Pods without a controller count as healthy but add nothing to the expected scale: under a
    /// maxUnavailable or a percentage they are never expected, so nothing is allowed; an integer
    /// minAvailable counts them as pods.
    #[test]
    fn pods_without_a_controller_are_not_expected_but_healthy() {
        let bare = Counts { pods: 3, scale: 0, healthy: 3 };
        let s = status(&Budget::MaxUnavailable(int(1)), bare).unwrap();
        assert_eq!((s.expected, s.desired_healthy, s.current_healthy, s.allowed), (0, 0, 3, 0));
        let s = status(&Budget::MinAvailable(pct("50%")), bare).unwrap();
        assert_eq!((s.expected, s.allowed), (0, 0));
        let s = status(&Budget::MinAvailable(int(1)), bare).unwrap();
        assert_eq!((s.expected, s.desired_healthy, s.allowed), (3, 1, 2));
        // Two of a Deployment of 2 and one bare pod: maxUnavailable 1 expects 2, desires 1, and all
        // three healthy pods count: 2 allowed.
        let mixed = Counts { pods: 3, scale: 2, healthy: 3 };
        let s = status(&Budget::MaxUnavailable(int(1)), mixed).unwrap();
        assert_eq!((s.expected, s.desired_healthy, s.allowed), (2, 1, 2));
    }

    #[test]
    fn unhealthy_pods_lower_what_is_allowed_down_to_zero() {
        let s = status(&Budget::MaxUnavailable(int(1)), Counts { pods: 3, scale: 3, healthy: 2 }).unwrap();
        assert_eq!((s.desired_healthy, s.allowed), (2, 0));
        let s = status(&Budget::MaxUnavailable(int(1)), Counts { pods: 3, scale: 3, healthy: 0 }).unwrap();
        assert_eq!(s.allowed, 0);
    }

    #[test]
    fn bad_percent_is_an_error() {
        assert!(disruption(&Budget::MinAvailable(pct("half")), 3).is_err());
        assert!(disruption(&Budget::MinAvailable(pct("5")), 3).is_err());
    }

    #[test]
    fn percent_rounding() {
        assert_eq!(percent_up(25, 1), 1);
        assert_eq!(percent_up(25, 4), 1);
        assert_eq!(percent_up(25, 5), 2);
        assert_eq!(percent_up(0, 5), 0);
        assert_eq!(percent_down(25, 1), 0);
        assert_eq!(percent_down(25, 5), 1);
    }
}

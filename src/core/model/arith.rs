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
    /// Neither is set: the disruption controller then requires nothing healthy.
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
}

/// The outcome of a budget over `expected` pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disruption {
    pub expected: i32,
    pub desired_healthy: i32,
    pub allowed: i32,
}

impl Disruption {
    /// `pdb-blocks-eviction`: something is covered and nothing may be evicted.
    pub fn blocks(&self) -> bool {
        self.expected >= 1 && self.allowed <= 0
    }
}

/// Follows the disruption controller: desired healthy from the budget, allowed = expected − desired.
pub fn disruption(budget: &Budget, expected: i32) -> Result<Disruption, String> {
    let desired_healthy = match budget {
        Budget::MinAvailable(v) => match amount(v)? {
            Amount::Int(n) => n,
            Amount::Percent(p) => percent_up(p, expected),
        },
        Budget::MaxUnavailable(v) => match amount(v)? {
            Amount::Int(n) => expected - n,
            Amount::Percent(p) => expected - percent_up(p, expected),
        },
        Budget::Unset => 0,
    };
    Ok(Disruption { expected, desired_healthy, allowed: expected - desired_healthy })
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
        let d = disruption(&Budget::MinAvailable(int(3)), 2).unwrap();
        assert_eq!((d.allowed, d.blocks()), (-1, true));
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

    #[test]
    fn unset_budget_allows_everything() {
        let d = disruption(&Budget::Unset, 3).unwrap();
        assert_eq!(d.allowed, 3);
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

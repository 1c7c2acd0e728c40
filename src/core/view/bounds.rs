//! A workload's replica range: its floor and ceiling given the autoscalers in the view
//! (DESIGN.md §2, Terms).

use std::sync::Arc;

use super::lookup::View;
use super::projection::{HpaInfo, WorkloadInfo};

/// The replica range a workload runs in: `floor` is `spec.replicas` or the HPA's `minReplicas`,
/// `ceiling` the larger of `spec.replicas` and the HPA's `maxReplicas`.
#[derive(Clone, Debug, PartialEq)]
pub struct Bounds {
    pub floor: i32,
    pub ceiling: i32,
    /// The HPAs in the view that target the workload.
    pub hpas: Vec<Arc<HpaInfo>>,
}

impl Bounds {
    /// "replicas 3" or "replicas 1, HPA web 2..5": how messages describe a workload's scale.
    pub fn describe(&self, w: &WorkloadInfo) -> String {
        let mut s = format!("{} {} (replicas {}", w.id.kind, w.id.name, w.replicas);
        for h in &self.hpas {
            s.push_str(&format!(", HPA {} min {} max {}", h.id.name, h.min_replicas, h.max_replicas));
        }
        s.push(')');
        s
    }
}

/// Floor and ceiling of `w`. A workload scaled to 0 runs nothing (an HPA does not scale it up
/// from 0 either), so both are 0. With several HPAs (a conflict the HPA controller reports), the
/// lowest floor and the highest ceiling count.
pub fn bounds(w: &WorkloadInfo, view: &dyn View) -> Bounds {
    let hpas = view.hpas_targeting(&w.id);
    if w.replicas == 0 {
        return Bounds { floor: 0, ceiling: 0, hpas };
    }
    let floor = hpas.iter().map(|h| h.min_replicas).min().unwrap_or(w.replicas);
    let ceiling = hpas.iter().map(|h| h.max_replicas).max().map_or(w.replicas, |m| m.max(w.replicas));
    Bounds { floor, ceiling, hpas }
}

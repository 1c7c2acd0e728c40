//! A workload's replica range: its floor and ceiling given the autoscalers in the view
//! (DESIGN.md §2, Terms).

use std::sync::Arc;

use super::lookup::View;
use super::projection::{HpaInfo, WorkloadInfo};
use crate::core::model::Kind;
use crate::core::model::words::{NAMED, list};

/// The replica range a workload runs in: `floor` is `spec.replicas` or the autoscaler's minimum
/// (an HPA's `minReplicas`, a KEDA ScaledObject's `minReplicaCount`), `ceiling` the larger of
/// `spec.replicas` and its maximum.
#[derive(Clone, Debug, PartialEq)]
pub struct Bounds {
    pub floor: i32,
    pub ceiling: i32,
    /// The autoscalers in the view that target the workload: HPAs and KEDA ScaledObjects
    /// (`id.kind` says which), sorted by id.
    pub hpas: Vec<Arc<HpaInfo>>,
}

impl Bounds {
    /// "Deployment web (replicas 3)" or "Deployment web (replicas 1, HPA web min 2 max 5)": how
    /// messages describe a workload's scale.
    pub fn describe(&self, w: &WorkloadInfo) -> String {
        let mut s = format!("{} {} (replicas {}", w.id.kind, w.id.name, w.replicas);
        if !self.hpas.is_empty() {
            s.push_str(", ");
            s.push_str(&list(
                self.hpas.iter().map(|h| format!("{} min {} max {}", h.short_name(), h.min_replicas, h.max_replicas)),
                NAMED,
                ", ",
            ));
        }
        s.push(')');
        s
    }
}

/// Floor and ceiling of `w`. A workload scaled to 0 runs nothing (an HPA does not scale it up
/// from 0 either), so both are 0, unless a KEDA ScaledObject targets it: KEDA does scale from 0
/// (and a manifest for it often says `replicas: 0`). With several autoscalers (a conflict the HPA controller reports;
/// or a ScaledObject and the HPA KEDA made for it), the lowest floor and the highest ceiling count.
pub fn bounds(w: &WorkloadInfo, view: &dyn View) -> Bounds {
    let hpas = view.hpas_targeting(&w.id);
    if w.replicas == 0 && !hpas.iter().any(|h| h.id.kind == Kind::ScaledObject) {
        return Bounds { floor: 0, ceiling: 0, hpas };
    }
    let floor = hpas.iter().map(|h| h.min_replicas).min().unwrap_or(w.replicas);
    let ceiling = hpas.iter().map(|h| h.max_replicas).max().map_or(w.replicas, |m| m.max(w.replicas));
    Bounds { floor, ceiling, hpas }
}

//! A PodDisruptionBudget as the eviction API will read it, from the pods of the view (the audit's):
//! its `status` when the disruption controller computed it for the current spec, else what the
//! controller computes (`pkg/controller/disruption`, DESIGN.md §3). `pdb-disruptions-blocked` and
//! the drain replay start from it.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::lookup::View;
use super::projection::{PdbInfo, PodInfo, PodOwner, PodPhase};
use crate::core::model::arith::{self, Budget, Counts, Status};
use crate::core::model::{Kind, selector};

/// Where the numbers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The PDB's `status`, computed for its current spec: what the eviction API reads.
    Status,
    /// Computed as the controller would: it has written no status yet.
    Computed,
    /// Computed as the controller would; the status there is older than the spec, and until the
    /// controller catches up the eviction API refuses every eviction (429).
    Stale { observed: i64, generation: i64 },
}

/// A PDB's numbers now, and why it expects no pod when it selects some.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetNow {
    pub status: Status,
    pub source: Source,
    /// The pods it selects, by name.
    pub pods: Vec<Arc<PodInfo>>,
    /// Why the controller expects no pod (and so allows nothing) although it selects some.
    pub expects_none: Option<&'static str>,
}

/// The pods of `pdb`'s namespace its selector matches, every phase, as the controller lists them
/// (a null selector matches none).
pub fn selected_pods(view: &dyn View, pdb: &PdbInfo) -> Vec<Arc<PodInfo>> {
    let Some(sel) = &pdb.selector else { return Vec::new() };
    view.pods_in(&pdb.id.namespace).into_iter().filter(|p| selector::matches(sel, &p.labels)).collect()
}

/// What the controller counts over `pods`: the pods, the summed scale of their controllers (each
/// once), the healthy ones; and whether some pod's controller has no scale the controller can
/// find (a DaemonSet's, a static pod's), which fails its sync for a budget counted by scale.
fn counts(view: &dyn View, namespace: &str, pods: &[Arc<PodInfo>]) -> (Counts, bool) {
    let mut owners: BTreeSet<(Kind, &str)> = BTreeSet::new();
    let mut scale = 0i32;
    let mut unscalable = false;
    for p in pods {
        match &p.owner {
            PodOwner::Workload(kind, name) => {
                if owners.insert((*kind, name)) {
                    scale = scale.saturating_add(view.workload(*kind, namespace, name).map_or(0, |w| w.replicas));
                }
            }
            // A ReplicaSet of no Deployment, a Job, an operator's kind: the view knows neither
            // which nor its scale; counted as the pods it runs.
            PodOwner::Other => scale = scale.saturating_add(1),
            PodOwner::DaemonSet | PodOwner::Mirror => unscalable = true,
            // No controller: left out of the expected count (still healthy if Ready).
            PodOwner::Unmanaged => {}
        }
    }
    let healthy = pods.iter().filter(|p| p.ready && !p.terminating).count() as i32;
    (Counts { pods: pods.len() as i32, scale, healthy }, unscalable)
}

/// `pdb` now: its status when current, else computed from the view's pods. `None` when the
/// budget is no amount (the apiserver refuses such a PDB).
pub fn budget_now(view: &dyn View, pdb: &PdbInfo) -> Option<BudgetNow> {
    let pods = selected_pods(view, pdb);
    let budget = pdb.budget();
    let (counts, unscalable) = counts(view, &pdb.id.namespace, &pods);
    let computed = arith::status(&budget, counts).ok()?;
    let by_scale = budget.expects_controllers_scale();
    let (status, source) = match (pdb.current_status(), pdb.written_status()) {
        (Some(s), _) => (
            Status {
                expected: s.expected_pods,
                desired_healthy: s.desired_healthy,
                current_healthy: s.current_healthy,
                allowed: s.disruptions_allowed,
            },
            Source::Status,
        ),
        (None, Some(stale)) => {
            (computed, Source::Stale { observed: stale.observed_generation, generation: pdb.generation })
        }
        (None, None) if unscalable && by_scale => (Status { allowed: 0, ..computed }, Source::Computed),
        (None, None) => (computed, Source::Computed),
    };
    let expects_none = (status.expected <= 0 && !pods.is_empty()).then_some(match budget {
        Budget::Unset => {
            "it sets neither minAvailable nor maxUnavailable, for which the disruption controller expects no pods"
        }
        _ if by_scale && counts.scale == 0 => {
            "its pods have no controller, and a maxUnavailable or a percentage counts the pods' controllers' scale \
             (pods without one count for nothing); an integer minAvailable counts the pods themselves"
        }
        _ => "the disruption controller expects no pods",
    });
    let expects_none = expects_none.or_else(|| {
        (unscalable && by_scale && status.allowed == 0).then_some(
            "some of its pods belong to a DaemonSet or are static pods, whose scale the disruption controller cannot \
             find: its sync fails and it allows no disruption",
        )
    });
    Some(BudgetNow { status, source, pods, expects_none })
}

/// Whether the eviction API refuses (429) an eviction of `pod`, one the PDB with `status` selects
/// (`eviction.go`): a Pending, finished or terminating pod is deleted without asking; one that is
/// not Ready goes when the PDB says `unhealthyPodEvictionPolicy: AlwaysAllow` or when its budget
/// is met (current healthy ≥ desired healthy > 0); any other goes only while a disruption is
/// allowed.
pub fn refuses(status: &Status, always_allow_unhealthy: bool, pod: &PodInfo) -> bool {
    if pod.phase.terminal() || pod.phase == PodPhase::Pending || pod.terminating {
        return false;
    }
    if !pod.ready
        && (always_allow_unhealthy || (status.current_healthy >= status.desired_healthy && status.desired_healthy > 0))
    {
        return false;
    }
    status.allowed <= 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testing::{live_view, pod};
    use crate::core::view::{Index, PdbStatus};

    fn pdb_yaml(budget: &str) -> String {
        format!(
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\n  namespace: default\nspec:\n  \
             {budget}\n  selector:\n    matchLabels:\n      app: web\n"
        )
    }

    const WEB3: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\nspec:\n  \
                        replicas: 3\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      \
                        labels:\n        app: web\n    spec:\n      containers:\n      - name: app\n        image: nginx\n";

    fn view_of(budget: &str, pods: Vec<PodInfo>) -> (Index, Arc<PdbInfo>) {
        let mut index = live_view(&format!("{WEB3}---\n{}", pdb_yaml(budget)));
        for p in pods {
            index.upsert_pod("default", p);
        }
        let pdb = index.pdb("default", "web").expect("the PDB");
        (index, pdb)
    }

    fn web_pods(ready: usize, not_ready: usize) -> Vec<PodInfo> {
        (0..ready + not_ready)
            .map(|i| {
                let mut p = pod(&format!("web-{i}"), "web", "node-a");
                p.ready = i < ready;
                p
            })
            .collect()
    }

    #[test]
    fn computed_as_the_controller_does_when_there_is_no_status() {
        let (v, pdb) = view_of("maxUnavailable: 1", web_pods(3, 0));
        let now = budget_now(&v, &pdb).unwrap();
        assert_eq!(now.source, Source::Computed);
        assert_eq!((now.status.expected, now.status.desired_healthy, now.status.allowed), (3, 2, 1));
        let (v, pdb) = view_of("maxUnavailable: 1", web_pods(2, 1));
        assert_eq!(budget_now(&v, &pdb).unwrap().status.allowed, 0);
    }

    #[test]
    fn an_unset_budget_expects_nothing_and_says_why() {
        let (v, pdb) = view_of("unhealthyPodEvictionPolicy: AlwaysAllow", web_pods(3, 0));
        let now = budget_now(&v, &pdb).unwrap();
        assert_eq!((now.status.expected, now.status.current_healthy, now.status.allowed), (0, 3, 0));
        assert!(now.expects_none.unwrap().contains("neither minAvailable nor maxUnavailable"));
    }

    #[test]
    fn bare_pods_are_healthy_but_not_expected_under_a_scale_budget() {
        let bare = |name: &str| {
            let mut p = pod(name, "web", "node-a");
            p.owner = PodOwner::Unmanaged;
            p
        };
        let (v, pdb) = view_of("maxUnavailable: 1", vec![bare("a"), bare("b")]);
        let now = budget_now(&v, &pdb).unwrap();
        assert_eq!((now.status.expected, now.status.current_healthy, now.status.allowed), (0, 2, 0));
        assert!(now.expects_none.unwrap().contains("no controller"), "{:?}", now.expects_none);
        // An integer minAvailable counts them.
        let (v, pdb) = view_of("minAvailable: 1", vec![bare("a"), bare("b")]);
        let now = budget_now(&v, &pdb).unwrap();
        assert_eq!((now.status.expected, now.status.allowed, now.expects_none), (2, 1, None));
    }

    #[test]
    fn a_current_status_is_what_the_eviction_api_reads_and_a_stale_one_is_said() {
        let (v, _) = view_of("maxUnavailable: 1", web_pods(3, 0));
        let mut pdb = (*v.pdb("default", "web").unwrap()).clone();
        pdb.generation = 2;
        pdb.status = Some(PdbStatus {
            disruptions_allowed: 0,
            expected_pods: 3,
            current_healthy: 2,
            desired_healthy: 2,
            observed_generation: 2,
        });
        let now = budget_now(&v, &pdb).unwrap();
        assert_eq!((now.source, now.status.allowed, now.status.current_healthy), (Source::Status, 0, 2));
        pdb.generation = 3;
        let now = budget_now(&v, &pdb).unwrap();
        assert_eq!(now.source, Source::Stale { observed: 2, generation: 3 });
        assert_eq!(now.status.allowed, 1, "computed from the pods while the status is stale");
    }
}

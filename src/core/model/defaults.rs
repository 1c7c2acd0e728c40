//! The apiserver's defaults for the fields the rules read, so that `check` on a file and the webhook
//! on the same object sent through the apiserver see the same thing (DESIGN.md §2).

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::managed;
use super::object::{Kind, ReplicasSource, Strategy, Workload};

/// `spec.replicas` when unset.
pub use super::object::DEFAULT_REPLICAS as REPLICAS;
/// `minReplicas` of an HPA when unset.
pub const HPA_MIN_REPLICAS: i32 = 1;
/// A KEDA ScaledObject's `minReplicaCount` when unset (scale to zero).
pub const KEDA_MIN_REPLICAS: i32 = 0;
/// A KEDA ScaledObject's `maxReplicaCount` when unset.
pub const KEDA_MAX_REPLICAS: i32 = 100;
/// `terminationGracePeriodSeconds` when unset.
pub const TERMINATION_GRACE_SECONDS: i64 = 30;

fn quarter() -> IntOrString {
    IntOrString::String("25%".into())
}

/// A Deployment as the rules read it. Of its `managedFields`, only who owns `spec.replicas` by
/// server-side apply is kept ([`managed`]).
pub fn deployment(mut d: Deployment) -> Workload {
    managed::keep_replicas_appliers(&mut d.metadata);
    let spec = d.spec.unwrap_or_default();
    let strategy = spec.strategy.unwrap_or_default();
    let strategy = match strategy.type_.as_deref() {
        Some("Recreate") => Strategy::Recreate,
        None | Some("RollingUpdate") => {
            let ru = strategy.rolling_update.unwrap_or_default();
            Strategy::RollingUpdate {
                max_surge: ru.max_surge.unwrap_or_else(quarter),
                max_unavailable: ru.max_unavailable.unwrap_or_else(quarter),
            }
        }
        Some(other) => Strategy::Other(other.to_string()),
    };
    Workload {
        kind: Kind::Deployment,
        replicas_source: ReplicasSource::of(&d.metadata, spec.replicas),
        meta: d.metadata,
        selector: Some(spec.selector),
        replicas: spec.replicas.unwrap_or(REPLICAS),
        strategy,
        template: spec.template,
        missing: Vec::new(),
    }
}

/// A StatefulSet as the rules read it (its `managedFields` cut as a Deployment's are).
pub fn stateful_set(mut s: StatefulSet) -> Workload {
    managed::keep_replicas_appliers(&mut s.metadata);
    let spec = s.spec.unwrap_or_default();
    let strategy = match spec.update_strategy.and_then(|u| u.type_) {
        Some(t) => Strategy::Other(t),
        None => Strategy::Other("RollingUpdate".into()),
    };
    Workload {
        kind: Kind::StatefulSet,
        replicas_source: ReplicasSource::of(&s.metadata, spec.replicas),
        meta: s.metadata,
        selector: Some(spec.selector),
        replicas: spec.replicas.unwrap_or(REPLICAS),
        strategy,
        template: spec.template,
        missing: Vec::new(),
    }
}

pub fn hpa(h: &mut HorizontalPodAutoscaler) {
    if let Some(spec) = h.spec.as_mut() {
        spec.min_replicas.get_or_insert(HPA_MIN_REPLICAS);
    }
}

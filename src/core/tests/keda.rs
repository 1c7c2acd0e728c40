//! A KEDA ScaledObject counts as an autoscaler wherever an HPA does (DESIGN.md §2, second round):
//! its `minReplicaCount` (unset 0) and `maxReplicaCount` (unset 100) are its target's floor and
//! ceiling, in every family that reads them, from the workload's side and from its own.

use crate::core::finding::Decision;
use crate::core::model::{Kind, ObjectRef, Subject};
use crate::core::testing::*;
use crate::core::view::{View, bounds};

/// A ScaledObject `web` over `target`; `None` leaves a count unset. `target_kind` empty leaves
/// `kind` (and `apiVersion`) out of `scaleTargetRef`: KEDA's default is an apps/v1 Deployment.
fn scaled_object(target_kind: &str, target: &str, min: Option<i32>, max: Option<i32>) -> String {
    let kind = if target_kind.is_empty() {
        String::new()
    } else {
        format!("    apiVersion: apps/v1\n    kind: {target_kind}\n")
    };
    let min = min.map(|m| format!("  minReplicaCount: {m}\n")).unwrap_or_default();
    let max = max.map(|m| format!("  maxReplicaCount: {m}\n")).unwrap_or_default();
    format!(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: web\n  namespace: default\nspec:\n  \
         scaleTargetRef:\n{kind}    name: {target}\n{min}{max}  triggers:\n  - type: prometheus\n    metadata:\n      \
         query: sum(rate(http_requests_total[1m]))\n      threshold: \"100\"\n"
    )
}

fn web() -> ObjectRef {
    ObjectRef::new(Kind::Deployment, "default", "web")
}

fn so() -> ObjectRef {
    ObjectRef::new(Kind::ScaledObject, "default", "web")
}

fn bounds_of(workload: &str, others: &str) -> (i32, i32, String) {
    let v = view(&docs(&[workload, others]), false);
    let w = v.workload(Kind::Deployment, "default", "web").expect("web in the view");
    let b = bounds(&w, &v);
    (b.floor, b.ceiling, b.describe(&w))
}

#[test]
fn unset_counts_are_zero_and_a_hundred() {
    let (floor, ceiling, text) =
        bounds_of(&deployment("web", "replicas: 3", ""), &scaled_object("", "web", None, None));
    assert_eq!((floor, ceiling), (0, 100));
    assert_eq!(text, "Deployment web (replicas 3, ScaledObject web min 0 max 100)");
    let (floor, ceiling, _) =
        bounds_of(&deployment("web", "replicas: 3", ""), &scaled_object("Deployment", "web", Some(2), Some(7)));
    assert_eq!((floor, ceiling), (2, 7));
}

#[test]
fn replicas_zero_does_not_stop_keda() {
    // KEDA scales from 0 (an HPA does not): the manifest's 0 is not the floor.
    let (floor, ceiling, _) =
        bounds_of(&deployment("web", "replicas: 0", ""), &scaled_object("", "web", Some(2), Some(5)));
    assert_eq!((floor, ceiling), (2, 5));
    let (floor, ceiling, _) = bounds_of(&deployment("web", "replicas: 0", ""), &hpa("web", "web", Some(2), 5));
    assert_eq!((floor, ceiling), (0, 0), "an HPA does not scale up from 0");
}

#[test]
fn with_an_hpa_too_the_lowest_floor_and_highest_ceiling_count() {
    // As on a live cluster: the ScaledObject and the HPA KEDA made for it.
    let keda_hpa = hpa("keda-hpa-web", "web", Some(1), 10);
    let (floor, ceiling, text) = bounds_of(
        &deployment("web", "replicas: 1", ""),
        &docs(&[&scaled_object("", "web", Some(0), Some(20)), &keda_hpa]),
    );
    assert_eq!((floor, ceiling), (0, 20));
    assert_eq!(text, "Deployment web (replicas 1, HPA keda-hpa-web min 1 max 10, ScaledObject web min 0 max 20)");
}

#[test]
fn a_target_that_is_no_workload_sets_nothing() {
    let (floor, ceiling, _) =
        bounds_of(&deployment("web", "replicas: 3", ""), &scaled_object("Rollout", "web", Some(1), Some(9)));
    assert_eq!((floor, ceiling), (3, 3));
    let (floor, ceiling, _) =
        bounds_of(&deployment("web", "replicas: 3", ""), &scaled_object("StatefulSet", "web", Some(1), Some(9)));
    assert_eq!((floor, ceiling), (3, 3), "a StatefulSet web is another object");
}

#[test]
fn its_floor_makes_replicas_colocated_fire_from_either_side() {
    let d = deployment("web", "replicas: 1", "");
    // The workload's side.
    let f = findings(&d, &scaled_object("", "web", Some(2), Some(4)), false);
    let c = of_rule(&f, "replicas-colocated");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert_eq!(c[0].related, vec![so()]);
    assert!(
        c[0].what.contains("Deployment web (replicas 1, ScaledObject web min 2 max 4) runs at least 2"),
        "{}",
        c[0].what
    );
    // The ScaledObject's side: about the workload, at the field that sets the floor.
    let f = findings(&scaled_object("", "web", Some(2), Some(4)), &d, false);
    let c = of_rule(&f, "replicas-colocated");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert_eq!((c[0].object.clone(), c[0].anchor.clone()), (so(), web()));
    assert_eq!(c[0].path, "spec.minReplicaCount");
    // Its floor of 0 (unset) keeps a 3-replica Deployment quiet: KEDA owns the count.
    let f = findings(&deployment("web", "replicas: 3", ""), &scaled_object("", "web", None, Some(4)), false);
    assert!(of_rule(&f, "replicas-colocated").is_empty(), "{f:#?}");
}

#[test]
fn its_ceiling_counts_for_a_readwriteonce_claim() {
    let claim = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: default\nspec:\n  \
                 accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n";
    let d = deployment(
        "web",
        "replicas: 1\nstrategy:\n  type: Recreate",
        "volumes:\n- name: data\n  persistentVolumeClaim:\n    claimName: data\n",
    );
    let f = findings(&scaled_object("", "web", Some(1), Some(3)), &docs(&[claim, &d]), false);
    let r = of_rule(&f, "rwo-volume-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    assert_eq!((r[0].path.as_str(), r[0].action), ("spec.maxReplicaCount", Decision::Deny));
    // Unset, the ceiling is 100.
    let f = findings(&d, &docs(&[claim, &scaled_object("", "web", Some(1), None)]), false);
    assert_eq!(of_rule(&f, "rwo-volume-multi-replica").len(), 1, "{f:#?}");
}

#[test]
fn its_floor_is_what_a_pdb_is_judged_at() {
    let budget = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\n  namespace: default\nspec:\n  \
                  minAvailable: 1\n  selector:\n    matchLabels:\n      app: web\n";
    let d = deployment("web", "replicas: 3", "");
    // Floor 1: minAvailable 1 leaves no eviction.
    let f = findings(budget, &docs(&[&d, &scaled_object("", "web", Some(1), Some(5))]), false);
    assert_eq!(of_rule(&f, "pdb-blocks-eviction").len(), 1, "{f:#?}");
    assert!(of_rule(&f, "pdb-blocks-eviction")[0].related.contains(&so()));
    // Floor 2: one eviction allowed.
    let f = findings(budget, &docs(&[&d, &scaled_object("", "web", Some(2), Some(5))]), false);
    assert!(of_rule(&f, "pdb-blocks-eviction").is_empty(), "{f:#?}");
    // Judged on the ScaledObject's write too.
    let f = findings(&scaled_object("", "web", Some(1), Some(5)), &docs(&[&d, budget]), false);
    let p = of_rule(&f, "pdb-blocks-eviction");
    assert_eq!(p.len(), 1, "{f:#?}");
    assert_eq!(p[0].path, "spec.minReplicaCount");
}

#[test]
fn it_decodes_with_its_defaults_and_ignores_what_it_does_not_read() {
    let Subject::ScaledObject(s) = subject(&scaled_object("", "web", None, None)) else { panic!("a ScaledObject") };
    let spec = s.spec.as_ref().expect("spec");
    assert_eq!((spec.min_replica_count, spec.max_replica_count), (None, None));
    let target = spec.scale_target_ref.as_ref().expect("scaleTargetRef");
    assert_eq!((target.kind.as_deref(), target.name.as_str()), (None, "web"));
    assert_eq!(subject(&scaled_object("", "web", None, None)).id(), so());
    // A count that is not a number is an error naming the kind.
    let bad = edit(&scaled_object("", "web", Some(1), None), "minReplicaCount: 1", "minReplicaCount: one");
    let value: serde_json::Value = serde_saphyr::from_str(&bad).unwrap();
    let e = crate::core::model::decode(&value, "default").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ScaledObject does not decode: spec.minReplicaCount: expected an integer, got the string \"one\""
    );
}

//! rwo-volume-multi-replica, rwo-volume-rolling-surge.

use crate::core::finding::Decision;
use crate::core::model::{Kind, ObjectRef};
use crate::core::testing::*;
use rstest::rstest;

fn dep(name: &str) -> ObjectRef {
    ObjectRef::new(Kind::Deployment, "default", name)
}

fn claim(name: &str) -> ObjectRef {
    ObjectRef::new(Kind::PersistentVolumeClaim, "default", name)
}

fn pvc(name: &str, modes: &str) -> String {
    pvc_in(name, "default", modes)
}

fn pvc_in(name: &str, ns: &str, modes: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  \
         accessModes: [{modes}]\n  resources:\n    requests:\n      storage: 1Gi\n"
    )
}

/// Pod volumes: an emptyDir first, then one PVC volume per claim name.
fn volumes(claims: &[&str]) -> String {
    let mut s = "volumes:\n- name: scratch\n  emptyDir: {}\n".to_string();
    for c in claims {
        s.push_str(&format!("- name: vol-{c}\n  persistentVolumeClaim:\n    claimName: {c}\n"));
    }
    s
}

/// Deployment `app` with `spec` (replicas, strategy) mounting the PVC `data`.
fn app(spec: &str) -> String {
    deployment("app", spec, &volumes(&["data"]))
}

const DATA_PATH: &str = "spec.template.spec.volumes[1].persistentVolumeClaim.claimName";

// ---- rwo-volume-multi-replica ----

#[rstest]
#[case::read_write_once("ReadWriteOnce")]
#[case::read_write_once_pod("ReadWriteOncePod")]
#[case::both_single_attach_modes("ReadWriteOnce, ReadWriteOncePod")]
fn two_replicas_on_a_single_attach_claim_deny(#[case] modes: &str) {
    let f = findings(&app("replicas: 2"), &pvc("data", modes), false);
    let r = of_rule(&f, "rwo-volume-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    let r = r[0];
    assert_eq!(r.action, Decision::Deny);
    assert_eq!(r.path, DATA_PATH);
    assert_eq!(r.anchor, dep("app"));
    assert_eq!(r.related, vec![claim("data")]);
    assert!(r.what.contains("Deployment app (replicas 2) can run 2 pods"), "{}", r.what);
    assert!(r.what.contains("PersistentVolumeClaim data"), "names the claim: {}", r.what);
    assert!(r.what.contains(&format!("(access modes {modes})")), "names the modes: {}", r.what);
    assert!(r.what.contains("Multi-Attach"), "{}", r.what);
    assert!(r.fix.contains("run one replica") && r.fix.contains("volumeClaimTemplates"), "{}", r.fix);
    assert!(r.fix.contains("ReadWriteMany"), "{}", r.fix);
    assert!(of_rule(&f, "rwo-volume-rolling-surge").is_empty(), "the surge rule is for single replicas");
}

#[rstest]
#[case::read_write_many("ReadWriteMany")]
#[case::read_only_many("ReadOnlyMany")]
#[case::mixed_with_many("ReadWriteOnce, ReadWriteMany")]
#[case::no_modes("")]
fn claims_several_nodes_can_mount_do_not_fire(#[case] modes: &str) {
    let f = findings(&app("replicas: 2"), &pvc("data", modes), false);
    assert!(of_rule(&f, "rwo-volume-multi-replica").is_empty(), "{f:#?}");
}

#[test]
fn a_claim_not_in_the_view_is_not_judged() {
    for view in [String::new(), pvc("other", "ReadWriteOnce"), pvc_in("data", "elsewhere", "ReadWriteOnce")] {
        let f = findings(&app("replicas: 2"), &view, false);
        assert!(of_rule(&f, "rwo-volume-multi-replica").is_empty(), "{f:#?}");
        assert!(of_rule(&f, "rwo-volume-rolling-surge").is_empty(), "{f:#?}");
    }
}

#[rstest]
#[case::one_replica("replicas: 1", false)]
#[case::scaled_to_zero("replicas: 0", false)]
#[case::two_replicas("replicas: 2", true)]
fn replica_boundary(#[case] spec: &str, #[case] fires: bool) {
    let f = findings(&app(spec), &pvc("data", "ReadWriteOnce"), false);
    assert_eq!(of_rule(&f, "rwo-volume-multi-replica").len(), usize::from(fires), "{f:#?}");
}

#[test]
fn each_single_attach_claim_is_named_at_its_own_volume() {
    let dep_yaml = deployment("app", "replicas: 3", &volumes(&["data", "shared", "logs"]));
    let view =
        docs(&[&pvc("data", "ReadWriteOnce"), &pvc("shared", "ReadWriteMany"), &pvc("logs", "ReadWriteOncePod")]);
    let f = findings(&dep_yaml, &view, false);
    let r = of_rule(&f, "rwo-volume-multi-replica");
    let got: Vec<_> = r.iter().map(|f| (f.path.as_str(), f.related.clone())).collect();
    assert_eq!(
        got,
        vec![
            (DATA_PATH, vec![claim("data")]),
            ("spec.template.spec.volumes[3].persistentVolumeClaim.claimName", vec![claim("logs")]),
        ],
        "{f:#?}"
    );
    assert!(r[1].what.contains("PersistentVolumeClaim logs (access modes ReadWriteOncePod)"), "{}", r[1].what);
}

#[test]
fn hpa_over_a_single_replica_deployment_denies_on_the_hpa() {
    let view = docs(&[&app("replicas: 1"), &pvc("data", "ReadWriteOnce")]);
    let f = findings(&hpa("app-hpa", "app", None, 3), &view, false);
    let r = of_rule(&f, "rwo-volume-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    let r = r[0];
    assert_eq!(r.action, Decision::Deny);
    assert_eq!(r.object, ObjectRef::new(Kind::HorizontalPodAutoscaler, "default", "app-hpa"));
    assert_eq!(r.path, "spec.maxReplicas");
    assert_eq!(r.anchor, dep("app"), "the finding is about the Deployment");
    assert_eq!(r.related, vec![dep("app"), claim("data")]);
    assert!(r.what.contains("Deployment app (replicas 1, HPA app-hpa min 1 max 3) can run 3 pods"), "{}", r.what);
    assert!(r.what.contains("PersistentVolumeClaim data"), "{}", r.what);
}

#[test]
fn hpa_over_a_single_replica_deployment_denies_on_the_deployment() {
    let view = docs(&[&hpa("app-hpa", "app", None, 3), &pvc("data", "ReadWriteOnce")]);
    let f = findings(&app("replicas: 1"), &view, false);
    let r = of_rule(&f, "rwo-volume-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    assert_eq!(r[0].path, DATA_PATH);
    assert_eq!(r[0].anchor, dep("app"));
    assert_eq!(r[0].related, vec![ObjectRef::new(Kind::HorizontalPodAutoscaler, "default", "app-hpa"), claim("data")]);
    assert!(r[0].what.contains("can run 3 pods"), "{}", r[0].what);
    assert!(of_rule(&f, "rwo-volume-rolling-surge").is_empty(), "the deny already covers it");
}

#[test]
fn hpa_with_max_one_does_not_fire() {
    let view = docs(&[&app("replicas: 1"), &pvc("data", "ReadWriteOnce")]);
    let f = findings(&hpa("app-hpa", "app", None, 1), &view, false);
    assert!(of_rule(&f, "rwo-volume-multi-replica").is_empty(), "{f:#?}");
}

fn statefulset(pod: &str, extra_spec: &str) -> String {
    workload("StatefulSet", "db", &format!("replicas: 3\nserviceName: db\n{extra_spec}"), pod)
}

#[test]
fn statefulset_volume_claim_templates_are_per_replica() {
    let templates = "volumeClaimTemplates:\n- metadata:\n    name: data\n  spec:\n    accessModes: [ReadWriteOnce]\n    \
                     resources:\n      requests:\n        storage: 1Gi\n";
    let pod = "containers:\n- name: db\n  image: postgres:17\n  volumeMounts:\n  - {name: data, mountPath: /data}\n";
    // Even with a claim called `data` in the view: a template is not a shared claim.
    let f = findings(&statefulset(pod, templates), &pvc("data", "ReadWriteOnce"), false);
    assert!(of_rule(&f, "rwo-volume-multi-replica").is_empty(), "{f:#?}");
}

#[test]
fn statefulset_volumes_are_shared_and_do_fire() {
    let f = findings(&statefulset(&volumes(&["data"]), ""), &pvc("data", "ReadWriteOnce"), false);
    let r = of_rule(&f, "rwo-volume-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    assert_eq!(r[0].path, DATA_PATH);
    assert!(r[0].what.contains("StatefulSet db (replicas 3) can run 3 pods"), "{}", r[0].what);
    assert!(of_rule(&f, "rwo-volume-rolling-surge").is_empty());
}

// ---- rwo-volume-rolling-surge ----

#[test]
fn single_replica_with_the_default_surge_warns() {
    let f = findings(&app("replicas: 1"), &pvc("data", "ReadWriteOnce"), false);
    let s = of_rule(&f, "rwo-volume-rolling-surge");
    assert_eq!(s.len(), 1, "{f:#?}");
    let s = s[0];
    assert_eq!(s.action, Decision::Warn);
    assert_eq!(s.path, "spec.strategy.rollingUpdate.maxSurge");
    assert_eq!(s.anchor, dep("app"));
    assert_eq!(s.related, vec![claim("data")]);
    assert!(s.what.contains("Deployment app (replicas 1)"), "{}", s.what);
    assert!(s.what.contains("PersistentVolumeClaim data"), "{}", s.what);
    assert!(s.what.contains("maxSurge 25% (resolves to 1)"), "25% of 1 rounds up: {}", s.what);
    assert!(s.what.contains("Multi-Attach") && s.what.contains("stalls"), "{}", s.what);
    assert!(s.fix.contains("maxSurge: 0 and maxUnavailable: 1") && s.fix.contains("Recreate"), "{}", s.fix);
    assert!(of_rule(&f, "rwo-volume-multi-replica").is_empty());
}

#[rstest]
#[case::integer_surge(
    "replicas: 1\nstrategy:\n  rollingUpdate:\n    maxSurge: 1\n    maxUnavailable: 0",
    Some("maxSurge 1 (resolves to 1)")
)]
#[case::small_percent_rounds_up(
    "replicas: 1\nstrategy:\n  rollingUpdate:\n    maxSurge: 1%",
    Some("maxSurge 1% (resolves to 1)")
)]
#[case::replicas_unset("", Some("maxSurge 25% (resolves to 1)"))]
#[case::no_surge("replicas: 1\nstrategy:\n  rollingUpdate:\n    maxSurge: 0\n    maxUnavailable: 1", None)]
#[case::no_surge_percent("replicas: 1\nstrategy:\n  rollingUpdate:\n    maxSurge: 0%\n    maxUnavailable: 1", None)]
#[case::recreate("replicas: 1\nstrategy:\n  type: Recreate", None)]
#[case::scaled_to_zero("replicas: 0\nstrategy:\n  rollingUpdate:\n    maxSurge: 1", None)]
fn surge_cases(#[case] spec: &str, #[case] expected: Option<&str>) {
    let f = findings(&app(spec), &pvc("data", "ReadWriteOncePod"), false);
    let s = of_rule(&f, "rwo-volume-rolling-surge");
    match expected {
        Some(text) => {
            assert_eq!(s.len(), 1, "{f:#?}");
            assert!(s[0].what.contains(text), "{}", s[0].what);
        }
        None => assert!(s.is_empty(), "{f:#?}"),
    }
}

#[test]
fn surge_needs_a_single_attach_claim_in_the_view() {
    for view in [String::new(), pvc("data", "ReadWriteMany")] {
        let f = findings(&app("replicas: 1"), &view, false);
        assert!(of_rule(&f, "rwo-volume-rolling-surge").is_empty(), "{f:#?}");
    }
}

#[test]
fn two_replicas_get_only_the_multi_replica_deny() {
    let f = findings(&app("replicas: 2"), &pvc("data", "ReadWriteOnce"), false);
    assert_eq!(of_rule(&f, "rwo-volume-multi-replica").len(), 1, "{f:#?}");
    assert!(of_rule(&f, "rwo-volume-rolling-surge").is_empty(), "{f:#?}");
}

#[test]
fn a_single_replica_statefulset_does_not_surge() {
    let sts = workload("StatefulSet", "db", "replicas: 1\nserviceName: db", &volumes(&["data"]));
    let f = findings(&sts, &pvc("data", "ReadWriteOnce"), false);
    assert!(of_rule(&f, "rwo-volume-rolling-surge").is_empty(), "{f:#?}");
    assert!(of_rule(&f, "rwo-volume-multi-replica").is_empty(), "{f:#?}");
}

#[test]
fn a_claim_mounted_through_two_volumes_is_reported_once() {
    let pod = "volumes:\n- name: data-a\n  persistentVolumeClaim:\n    claimName: data\n\
               - name: data-b\n  persistentVolumeClaim:\n    claimName: data\n    readOnly: true\n";
    let f = findings(&deployment("app", "replicas: 2", pod), &pvc("data", "ReadWriteOnce"), false);
    let r = of_rule(&f, "rwo-volume-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    assert_eq!(r[0].path, "spec.template.spec.volumes[0].persistentVolumeClaim.claimName");
    assert_eq!(r[0].related, vec![claim("data")]);
    let f = findings(&deployment("app", "replicas: 1", pod), &pvc("data", "ReadWriteOnce"), false);
    let s = of_rule(&f, "rwo-volume-rolling-surge");
    assert_eq!(s.len(), 1, "{f:#?}");
    assert_eq!(s[0].related, vec![claim("data")]);
}

#[test]
fn the_hpa_under_review_replaces_its_old_version_in_the_view() {
    // Raising maxReplicas from 1 to 3: the new bound counts.
    let view = docs(&[&app("replicas: 1"), &pvc("data", "ReadWriteOnce"), &hpa("app-hpa", "app", None, 1)]);
    let f = findings(&hpa("app-hpa", "app", None, 3), &view, true);
    let r = of_rule(&f, "rwo-volume-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    assert!(r[0].what.contains("HPA app-hpa min 1 max 3") && !r[0].what.contains("max 1)"), "{}", r[0].what);
    // Lowering it from 3 to 1 fixes it.
    let view = docs(&[&app("replicas: 1"), &pvc("data", "ReadWriteOnce"), &hpa("app-hpa", "app", None, 3)]);
    let f = findings(&hpa("app-hpa", "app", None, 1), &view, true);
    assert!(of_rule(&f, "rwo-volume-multi-replica").is_empty(), "{f:#?}");
}

//! csi-controller-recreate, recreate-multi-replica.

use crate::core::config::Config;
use crate::core::finding::Decision;
use crate::core::model::{Kind, ObjectRef, Subject};
use crate::core::rules;
use crate::core::testing::*;
use rstest::rstest;

fn dep(name: &str) -> ObjectRef {
    ObjectRef::new(Kind::Deployment, "default", name)
}

fn hpa_ref(name: &str) -> ObjectRef {
    ObjectRef::new(Kind::HorizontalPodAutoscaler, "default", name)
}

const RECREATE: &str = "strategy:\n  type: Recreate\n";

/// One container named `name` running `image`.
fn container(name: &str, image: &str) -> String {
    format!(
        "containers:\n- name: {name}\n  image: {image}\n- name: driver\n  image: example.com/acme-csi-driver:v1.2\n"
    )
}

/// Deployment `csi` with `strategy` and `replicas`, its first container `name` running `image`.
fn csi(replicas: i32, strategy: &str, name: &str, image: &str) -> String {
    deployment("csi", &format!("replicas: {replicas}\n{strategy}"), &container(name, image))
}

const PROVISIONER: &str = "registry.k8s.io/sig-storage/csi-provisioner:v5.0.1";

// ---- csi-controller-recreate ----

#[test]
fn csi_provisioner_image_with_recreate_and_two_replicas_denies() {
    let f = findings(&csi(2, RECREATE, "provisioner", PROVISIONER), "", false);
    let c = of_rule(&f, "csi-controller-recreate");
    assert_eq!(c.len(), 1, "{f:#?}");
    let c = c[0];
    assert_eq!(c.action, Decision::Deny);
    assert_eq!(c.path, "spec.strategy.type");
    assert_eq!(c.anchor, dep("csi"));
    assert!(c.related.is_empty());
    assert!(c.what.contains("Deployment csi (replicas 2)"), "{}", c.what);
    assert!(c.what.contains("CSI controller (csi-provisioner)"), "names the sidecar: {}", c.what);
    assert!(c.what.contains("strategy Recreate") && c.what.contains("up to 2 replicas"), "{}", c.what);
    assert!(c.what.contains("leader election"), "{}", c.what);
    assert!(c.fix.contains("RollingUpdate") && c.fix.contains("maxSurge 0, maxUnavailable 1"), "{}", c.fix);
    assert!(of_rule(&f, "recreate-multi-replica").is_empty(), "a CSI controller is reported by its own rule only");
}

#[rstest]
#[case::provisioner_image("provisioner", "registry.k8s.io/sig-storage/csi-provisioner:v5.0.1", "csi-provisioner")]
#[case::attacher_image_with_digest(
    "a",
    "registry.k8s.io/sig-storage/csi-attacher:v4.6.1@sha256:abc123",
    "csi-attacher"
)]
#[case::resizer_image_untagged("r", "csi-resizer", "csi-resizer")]
#[case::snapshotter_on_a_registry_port("s", "localhost:5000/csi-snapshotter:v8", "csi-snapshotter")]
#[case::by_container_name("csi-attacher", "example.com/acme/attacher-fork:v2", "csi-attacher")]
fn detected_by_image_or_container_name(#[case] name: &str, #[case] image: &str, #[case] sidecar: &str) {
    let f = findings(&csi(3, RECREATE, name, image), "", false);
    let c = of_rule(&f, "csi-controller-recreate");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert!(c[0].what.contains(&format!("({sidecar})")), "{}", c[0].what);
    assert!(c[0].what.contains("up to 3 replicas"), "{}", c[0].what);
}

#[test]
fn a_csi_sidecar_in_init_containers_counts() {
    let pod = format!(
        "initContainers:\n- name: provisioner\n  image: {PROVISIONER}\n  restartPolicy: Always\n{}",
        container("driver2", "example.com/acme-csi-driver:v1.2")
    );
    let f = findings(&deployment("csi", &format!("replicas: 2\n{RECREATE}"), &pod), "", false);
    assert_eq!(of_rule(&f, "csi-controller-recreate").len(), 1, "{f:#?}");
}

#[rstest]
#[case::one_replica(1, RECREATE, PROVISIONER)]
#[case::scaled_to_zero(0, RECREATE, PROVISIONER)]
#[case::rolling_update(2, "strategy:\n  type: RollingUpdate\n", PROVISIONER)]
#[case::default_strategy(2, "", PROVISIONER)]
#[case::name_merely_similar(2, RECREATE, "example.com/csi-provisioner-ext:v1")]
fn csi_controller_does_not_fire(#[case] replicas: i32, #[case] strategy: &str, #[case] image: &str) {
    let f = findings(&csi(replicas, strategy, "provisioner", image), "", false);
    assert!(of_rule(&f, "csi-controller-recreate").is_empty(), "{f:#?}");
    if replicas >= 1 && strategy == RECREATE {
        // The look-alike image is an ordinary Recreate Deployment.
        assert_eq!(of_rule(&f, "recreate-multi-replica").len(), usize::from(replicas > 1), "{f:#?}");
    }
}

#[test]
fn hpa_max_replicas_over_one_replica_denies_on_the_hpa_side() {
    let dep_yaml = csi(1, RECREATE, "provisioner", PROVISIONER);
    let f = findings(&hpa("csi-hpa", "csi", None, 3), &dep_yaml, false);
    let c = of_rule(&f, "csi-controller-recreate");
    assert_eq!(c.len(), 1, "{f:#?}");
    let c = c[0];
    assert_eq!(c.action, Decision::Deny);
    assert_eq!(c.object, hpa_ref("csi-hpa"));
    assert_eq!(c.path, "spec.maxReplicas");
    assert_eq!(c.anchor, dep("csi"));
    assert_eq!(c.related, vec![dep("csi")]);
    assert!(c.what.contains("Deployment csi (replicas 1, HPA csi-hpa min 1 max 3)"), "{}", c.what);
    assert!(c.what.contains("up to 3 replicas"), "{}", c.what);
}

#[test]
fn hpa_max_replicas_over_one_replica_denies_on_the_deployment_side() {
    let f = findings(&csi(1, RECREATE, "provisioner", PROVISIONER), &hpa("csi-hpa", "csi", None, 3), false);
    let c = of_rule(&f, "csi-controller-recreate");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert_eq!(c[0].object, dep("csi"));
    assert_eq!(c[0].path, "spec.strategy.type");
    assert_eq!(c[0].anchor, dep("csi"));
    assert_eq!(c[0].related, vec![hpa_ref("csi-hpa")]);
    assert!(c[0].what.contains("up to 3 replicas"), "{}", c[0].what);
}

#[test]
fn hpa_with_max_one_or_another_target_does_not_fire() {
    let dep_yaml = csi(1, RECREATE, "provisioner", PROVISIONER);
    let f = findings(&hpa("csi-hpa", "csi", None, 1), &dep_yaml, false);
    assert!(of_rule(&f, "csi-controller-recreate").is_empty(), "{f:#?}");
    let f = findings(&hpa("csi-hpa", "other", None, 3), &dep_yaml, false);
    assert!(of_rule(&f, "csi-controller-recreate").is_empty(), "{f:#?}");
}

#[test]
fn a_scale_write_is_evaluated_with_the_new_count() {
    let index = view(&csi(1, RECREATE, "provisioner", PROVISIONER), false);
    let scale = |replicas| Subject::Scale { target: dep("csi"), replicas };
    let f = rules::evaluate(&scale(2), &index, &Config::default()).findings;
    let c = of_rule(&f, "csi-controller-recreate");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert!(c[0].what.contains("replicas 2") && c[0].what.contains("up to 2 replicas"), "{}", c[0].what);
    let f = rules::evaluate(&scale(1), &index, &Config::default()).findings;
    assert!(of_rule(&f, "csi-controller-recreate").is_empty(), "{f:#?}");
}

#[test]
fn custom_csi_controller_images_from_config() {
    let config =
        crate::core::registry::parse_config("csiControllerImages: [acme-csi-controller]\n", "ha-guard.yaml").unwrap();
    let custom = csi(2, RECREATE, "controller", "example.com/acme/acme-csi-controller:v3");
    let f = findings_with(&custom, "", false, &config);
    let c = of_rule(&f, "csi-controller-recreate");
    assert_eq!(c.len(), 1, "{f:#?}");
    assert!(c[0].what.contains("(acme-csi-controller)"), "{}", c[0].what);
    // Without the config it is an ordinary Recreate Deployment.
    let f = findings(&custom, "", false);
    assert!(of_rule(&f, "csi-controller-recreate").is_empty(), "{f:#?}");
    assert_eq!(of_rule(&f, "recreate-multi-replica").len(), 1, "{f:#?}");
    // The list replaces the defaults: csi-provisioner is no longer a CSI controller.
    let f = findings_with(&csi(2, RECREATE, "provisioner", PROVISIONER), "", false, &config);
    assert!(of_rule(&f, "csi-controller-recreate").is_empty(), "{f:#?}");
    assert_eq!(of_rule(&f, "recreate-multi-replica").len(), 1, "{f:#?}");
}

// ---- recreate-multi-replica ----

#[test]
fn recreate_with_two_replicas_warns() {
    let f = findings(&deployment("web", &format!("replicas: 2\n{RECREATE}"), ""), "", false);
    let r = of_rule(&f, "recreate-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    let r = r[0];
    assert_eq!(r.action, Decision::Warn);
    assert_eq!(r.path, "spec.strategy.type");
    assert_eq!(r.anchor, dep("web"));
    assert!(r.related.is_empty());
    assert!(r.what.contains("Deployment web (replicas 2)"), "{}", r.what);
    assert!(r.what.contains("strategy Recreate with up to 2 replicas"), "{}", r.what);
    assert!(r.what.contains("failover"), "{}", r.what);
    assert!(r.fix.contains("RollingUpdate") && r.fix.contains("maxUnavailable 1"), "{}", r.fix);
    assert!(of_rule(&f, "csi-controller-recreate").is_empty());
}

#[rstest]
#[case::one_replica("replicas: 1\nstrategy:\n  type: Recreate")]
#[case::replicas_unset("strategy:\n  type: Recreate")]
#[case::rolling_update("replicas: 2\nstrategy:\n  type: RollingUpdate")]
#[case::rolling_update_by_default("replicas: 2")]
fn recreate_multi_replica_does_not_fire(#[case] spec: &str) {
    let f = findings(&deployment("web", spec, ""), "", false);
    assert!(of_rule(&f, "recreate-multi-replica").is_empty(), "{f:#?}");
}

#[test]
fn recreate_ceiling_from_an_hpa_both_sides() {
    let dep_yaml = deployment("web", &format!("replicas: 1\n{RECREATE}"), "");
    let f = findings(&dep_yaml, &hpa("web", "web", None, 4), false);
    let r = of_rule(&f, "recreate-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    assert_eq!(r[0].path, "spec.strategy.type");
    assert!(r[0].what.contains("up to 4 replicas"), "{}", r[0].what);
    let f = findings(&hpa("web", "web", None, 4), &dep_yaml, false);
    let r = of_rule(&f, "recreate-multi-replica");
    assert_eq!(r.len(), 1, "{f:#?}");
    assert_eq!(r[0].path, "spec.maxReplicas");
    assert_eq!(r[0].anchor, dep("web"));
    assert_eq!(r[0].related, vec![dep("web")]);
}

#[rstest]
#[case::on_delete("updateStrategy:\n  type: OnDelete")]
#[case::rolling("updateStrategy:\n  type: RollingUpdate")]
#[case::a_stray_deployment_strategy_field("strategy:\n  type: Recreate")]
fn a_statefulset_never_fires(#[case] update: &str) {
    for pod in ["", &container("provisioner", PROVISIONER)] {
        let sts = workload("StatefulSet", "db", &format!("replicas: 3\nserviceName: db\n{update}"), pod);
        let f = findings(&sts, "", false);
        assert!(of_rule(&f, "recreate-multi-replica").is_empty(), "{f:#?}");
        assert!(of_rule(&f, "csi-controller-recreate").is_empty(), "{f:#?}");
    }
}

//! `lean-decode MODE ROUNDS FILE...`: decodes every Deployment of the YAML files, ROUNDS times,
//! one of three ways (MODE): `typed`, into k8s-openapi's `Deployment` (what ha-guard's typed
//! decoding does); `tree`, into a `serde_json::Value` (what kube-rs's `DynamicObject` holds); `lean`,
//! into structs with only the fields ha-guard's rules read of a Deployment (the rest skipped).
//! Meant for callgrind (`run.sh`): instructions and cache misses per decode of each way.
//!
//! The lean structs are the sketch that was measured before the webhook decoded this way (the
//! selector, the strategy, the pod template's labels and annotations, its spread constraints,
//! affinity, tolerations, volumes' claims, node selector, host network, grace period, and of each
//! container its name, image, lifecycle and ports), not kept in step with `src/`. What the webhook
//! decodes is `src/core/model/read.rs`, which the rules' tests hold to what they read.

// The lean structs' fields are decoded to be measured, never read.
#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Affinity, ContainerPort, Lifecycle, PersistentVolumeClaimVolumeSource, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanDeployment {
    api_version: Option<String>,
    kind: Option<String>,
    metadata: Option<LeanMeta>,
    spec: Option<LeanSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    name: Option<String>,
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanSpec {
    replicas: Option<i32>,
    selector: Option<LabelSelector>,
    strategy: Option<DeploymentStrategy>,
    template: Option<LeanTemplate>,
    min_ready_seconds: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanTemplate {
    metadata: Option<LeanMeta>,
    spec: Option<LeanPodSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanPodSpec {
    containers: Option<Vec<LeanContainer>>,
    init_containers: Option<Vec<LeanContainer>>,
    topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    affinity: Option<Affinity>,
    tolerations: Option<Vec<Toleration>>,
    volumes: Option<Vec<LeanVolume>>,
    node_selector: Option<BTreeMap<String, String>>,
    host_network: Option<bool>,
    termination_grace_period_seconds: Option<i64>,
    priority_class_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanContainer {
    name: Option<String>,
    image: Option<String>,
    lifecycle: Option<Lifecycle>,
    ports: Option<Vec<ContainerPort>>,
    restart_policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanVolume {
    name: Option<String>,
    persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
}

#[inline(never)]
fn typed(text: &str) -> Result<(), serde_json::Error> {
    std::hint::black_box(serde_json::from_str::<Deployment>(text)?);
    Ok(())
}

#[inline(never)]
fn tree(text: &str) -> Result<(), serde_json::Error> {
    std::hint::black_box(serde_json::from_str::<serde_json::Value>(text)?);
    Ok(())
}

#[inline(never)]
fn lean(text: &str) -> Result<(), serde_json::Error> {
    std::hint::black_box(serde_json::from_str::<LeanDeployment>(text)?);
    Ok(())
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, rounds, files @ ..] = args.as_slice() else {
        return Err("usage: lean-decode typed|tree|lean ROUNDS FILE...".into());
    };
    let decode: fn(&str) -> Result<(), serde_json::Error> = match mode.as_str() {
        "typed" => typed,
        "tree" => tree,
        "lean" => lean,
        other => return Err(format!("mode {other}: not typed, tree or lean")),
    };
    let rounds: usize = rounds.parse().map_err(|e| format!("ROUNDS {rounds}: {e}"))?;
    let mut deployments = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).map_err(|e| format!("{file}: {e}"))?;
        deployments.extend(docs.into_iter().filter(|d| d["kind"] == "Deployment").map(|d| d.to_string()));
    }
    if deployments.is_empty() {
        return Err("no Deployment in the files given".into());
    }
    for _ in 0..rounds {
        for text in &deployments {
            decode(text).map_err(|e| format!("{mode}: {e}"))?;
        }
    }
    let bytes: usize = deployments.iter().map(String::len).sum();
    println!(
        "{mode}: {} decodes of {} Deployments ({bytes} bytes of JSON)",
        rounds * deployments.len(),
        deployments.len()
    );
    Ok(())
}

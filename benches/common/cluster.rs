//! A generated cluster on the e2e control plane, shared by `benches/audit.rs` and
//! `benches/audit_cost.rs` (included with `#[path]`, not through `common/mod.rs`, so that the benches
//! without a control plane do not compile it).
//!
//! `namespaces` namespaces (`ns-000`...), `nodes` Nodes (`node-0000`..., three zones, the not-ready
//! taint removed) and `workloads` workloads (`app-00000`...) spread over the namespaces: 3 in 4
//! Deployments (each with a ReplicaSet owned by it, as the deployment controller would write), 1 in 4
//! StatefulSets; every second one with a PDB (status written as the disruption controller would),
//! every fifth multi-replica Deployment with an HPA; some break rules on purpose (one replica, no
//! spread, a PDB with `maxUnavailable: 0`). Then `pods` Pods spread over the workloads (spec.nodeName
//! set at create, owned by the ReplicaSet or the StatefulSet, status Running/Ready for most, Pending
//! for 1 in 50; every 13th workload has all its pods on one node). With kwok running
//! (`benches/scale.rs`), [`create_kwok_nodes`] and [`create_kwok_pods`] leave the Nodes' and the
//! Pods' status to kwok.
#![allow(dead_code)]

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The size of the generated cluster.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub workloads: usize,
    pub pods: usize,
    pub namespaces: usize,
    pub nodes: usize,
}

/// Workload `i`: where, what, and how many pods it gets (the pods spread evenly).
pub struct Gen {
    pub ns: String,
    pub name: String,
    pub sts: bool,
    pub pods: usize,
}

/// The kind, name and UID of a workload's pods' controller (the ReplicaSet or the StatefulSet).
pub type Owner = (String, String, String);

pub fn workload(s: &Shape, i: usize) -> Gen {
    let base = s.pods / s.workloads;
    let pods = base + usize::from(i < s.pods % s.workloads);
    Gen { ns: format!("ns-{:03}", i % s.namespaces), name: format!("app-{i:05}"), sts: i % 4 == 3, pods }
}

pub fn labels(name: &str) -> Value {
    json!({"app": name})
}

pub fn pod_template(i: usize, name: &str) -> Value {
    let mut spec = json!({
        "containers": [{"name": "app", "image": "registry.example/app:1.0",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}],
        "terminationGracePeriodSeconds": 30,
    });
    // Every 7th has no spread at all (a rule finding); the rest spread over hostnames.
    if !i.is_multiple_of(7) {
        spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": labels(name)}}]);
    }
    json!({"metadata": {"labels": labels(name)}, "spec": spec})
}

pub fn replicas(i: usize, g: &Gen) -> usize {
    // Every 10th runs one replica (a finding); the others as many as they have pods (at least 2).
    if i.is_multiple_of(10) { 1 } else { g.pods.max(2) }
}

/// Whether workload `i` is a Deployment with an HPA.
pub fn has_hpa(s: &Shape, i: usize) -> bool {
    let g = workload(s, i);
    !g.sts && i.is_multiple_of(5) && replicas(i, &g) > 1
}

/// Creates workload `i` with its ReplicaSet, PDB and HPA; returns its pods' controller.
pub async fn create_workload(client: &kube::Client, s: &Shape, i: usize) -> Result<Owner, String> {
    let g = workload(s, i);
    let pp = PostParams::default();
    let e = |what: &str, e: kube::Error| format!("{what} {}/{}: {e}", g.ns, g.name);
    let n = replicas(i, &g);
    let spec =
        json!({"replicas": n, "selector": {"matchLabels": labels(&g.name)}, "template": pod_template(i, &g.name)});
    let owner = if g.sts {
        let mut st = spec.clone();
        st["serviceName"] = json!(g.name);
        let sts: StatefulSet = serde_json::from_value(json!({"metadata": {"name": g.name}, "spec": st})).unwrap();
        let made = Api::<StatefulSet>::namespaced(client.clone(), &g.ns)
            .create(&pp, &sts)
            .await
            .map_err(|x| e("statefulset", x))?;
        ("StatefulSet".to_string(), g.name.clone(), made.metadata.uid.unwrap_or_default())
    } else {
        let d: Deployment = serde_json::from_value(json!({"metadata": {"name": g.name}, "spec": spec})).unwrap();
        let made = Api::<Deployment>::namespaced(client.clone(), &g.ns)
            .create(&pp, &d)
            .await
            .map_err(|x| e("deployment", x))?;
        let rs_name = format!("{}-5d9c7f", g.name);
        let mut rs_labels = labels(&g.name);
        rs_labels["pod-template-hash"] = json!("5d9c7f");
        let mut template = pod_template(i, &g.name);
        template["metadata"]["labels"] = rs_labels.clone();
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": rs_name, "labels": rs_labels, "ownerReferences": [{"apiVersion": "apps/v1",
                "kind": "Deployment", "name": g.name, "uid": made.metadata.uid, "controller": true}]},
            "spec": {"replicas": n, "selector": {"matchLabels": rs_labels}, "template": template}}))
        .unwrap();
        let rs = Api::<ReplicaSet>::namespaced(client.clone(), &g.ns)
            .create(&pp, &rs)
            .await
            .map_err(|x| e("replicaset", x))?;
        if has_hpa(s, i) {
            let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({"metadata": {"name": g.name}, "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": g.name},
                "minReplicas": 2, "maxReplicas": 6,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]}}))
            .unwrap();
            Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &g.ns)
                .create(&pp, &hpa)
                .await
                .map_err(|x| e("hpa", x))?;
        }
        ("ReplicaSet".to_string(), rs_name, rs.metadata.uid.unwrap_or_default())
    };
    if i.is_multiple_of(2) {
        // Every 20th budget allows no eviction at all (a finding).
        let budget = if i.is_multiple_of(20) { json!({"maxUnavailable": 0}) } else { json!({"maxUnavailable": 1}) };
        let mut spec = budget;
        spec["selector"] = json!({"matchLabels": labels(&g.name)});
        let pdb: PodDisruptionBudget =
            serde_json::from_value(json!({"metadata": {"name": g.name}, "spec": spec})).unwrap();
        let api = Api::<PodDisruptionBudget>::namespaced(client.clone(), &g.ns);
        api.create(&pp, &pdb).await.map_err(|x| e("pdb", x))?;
        // As the disruption controller would write it once the pods run.
        let allowed = if i.is_multiple_of(20) || g.pods < 2 { 0 } else { 1 };
        let status = json!({"status": {"observedGeneration": 1, "disruptionsAllowed": allowed,
            "currentHealthy": g.pods, "desiredHealthy": g.pods.saturating_sub(1), "expectedPods": g.pods}});
        api.patch_status(&g.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|x| e("pdb status", x))?;
    }
    Ok(owner)
}

/// Pod `j` of workload `i`, bound to a node, owned by `owner` (without a status).
pub fn pod(s: &Shape, i: usize, j: usize, owner: &Owner) -> Pod {
    let g = workload(s, i);
    let (kind, oname, uid) = owner;
    let mut pod_labels = labels(&g.name);
    if !g.sts {
        pod_labels["pod-template-hash"] = json!("5d9c7f");
    }
    let name = if g.sts { format!("{}-{j}", g.name) } else { format!("{oname}-{j:05x}") };
    // Every 13th workload has all its pods on one node (`replicas-share-node`).
    let node = if i.is_multiple_of(13) { i % s.nodes } else { (i * 3 + j) % s.nodes };
    let mut template = pod_template(i, &g.name);
    template["metadata"] = json!({"name": name, "labels": pod_labels, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": kind, "name": oname, "uid": uid, "controller": true}]});
    template["spec"]["nodeName"] = json!(node_name(node));
    serde_json::from_value(template).unwrap()
}

/// Creates workload `i`'s pods, bound to nodes, with their status.
pub async fn create_pods(client: &kube::Client, s: &Shape, i: usize, owner: &Owner) -> Result<(), String> {
    let g = workload(s, i);
    let api = Api::<Pod>::namespaced(client.clone(), &g.ns);
    for j in 0..g.pods {
        let pod = pod(s, i, j, owner);
        let name = pod.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &pod).await.map_err(|e| format!("pod {}/{name}: {e}", g.ns))?;
        // One pod in 50 stays Pending and not ready; the others run, ready.
        let running = (i + j) % 50 != 1;
        let status = if running {
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"}]}})
        } else {
            json!({"status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": "True"}]}})
        };
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| format!("pod status {}/{name}: {e}", g.ns))?;
    }
    Ok(())
}

/// Creates workload `i`'s pods, bound to kwok's nodes, without a status: kwok, playing their
/// kubelets, makes each Running and Ready (so none stays Pending).
pub async fn create_kwok_pods(client: &kube::Client, s: &Shape, i: usize, owner: &Owner) -> Result<(), String> {
    let g = workload(s, i);
    let api = Api::<Pod>::namespaced(client.clone(), &g.ns);
    for j in 0..g.pods {
        let pod = pod(s, i, j, owner);
        api.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| format!("pod {}/{}: {e}", g.ns, pod.metadata.name.unwrap_or_default()))?;
    }
    Ok(())
}

/// Node `n`'s name (what the pods' spec.nodeName says).
pub fn node_name(n: usize) -> String {
    format!("node-{n:04}")
}

/// Node `n`: its hostname, and one of three zones.
pub fn node(n: usize) -> Value {
    let name = node_name(n);
    json!({"metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": format!("zone-{}", n % 3)}}})
}

/// Creates the namespaces, one at a time.
pub async fn create_namespaces(client: &kube::Client, s: &Shape) {
    let nss = Api::<Namespace>::all(client.clone());
    for n in 0..s.namespaces {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": format!("ns-{n:03}")}})).unwrap();
        nss.create(&PostParams::default(), &ns).await.expect("namespace");
    }
}

/// Creates Node `n` from `object` and clears the not-ready taint TaintNodesByCondition adds (no
/// kubelet here clears it; kwok makes a Node Ready but leaves its taints to the node lifecycle
/// controller).
async fn create_node(nodes: &Api<Node>, n: usize, object: Value) -> Result<(), String> {
    let name = node_name(n);
    let node: Node = serde_json::from_value(object).unwrap();
    nodes.create(&PostParams::default(), &node).await.map_err(|e| format!("node {name}: {e}"))?;
    nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": null}})))
        .await
        .map_err(|e| format!("node {name} taints: {e}"))?;
    Ok(())
}

/// Creates the namespaces and the Nodes, `conc` writes at a time.
pub async fn create_namespaces_and_nodes(client: &kube::Client, s: &Shape, conc: usize) {
    create_namespaces(client, s).await;
    let nodes = Api::<Node>::all(client.clone());
    futures::stream::iter(0..s.nodes)
        .map(|n| {
            let nodes = nodes.clone();
            async move { create_node(&nodes, n, node(n)).await.unwrap_or_else(|e| panic!("{e}")) }
        })
        .buffer_unordered(conc)
        .collect::<Vec<_>>()
        .await;
}

/// Creates the Nodes as kwok's (annotated `kwok.x-k8s.io/node: fake`: kwok makes them Ready, with
/// the allocatable of its node stage, and renews their Leases), `conc` at a time; the errors, if
/// any.
pub async fn create_kwok_nodes(client: &kube::Client, s: &Shape, conc: usize) -> Vec<String> {
    let nodes = Api::<Node>::all(client.clone());
    futures::stream::iter(0..s.nodes)
        .map(|n| {
            let nodes = nodes.clone();
            let mut object = node(n);
            object["metadata"]["annotations"] = json!({"kwok.x-k8s.io/node": "fake"});
            async move { create_node(&nodes, n, object).await }
        })
        .buffer_unordered(conc)
        .filter_map(|r| async move { r.err() })
        .collect()
        .await
}

/// Creates every workload (with its ReplicaSet, PDB, HPA), `conc` at a time; returns their pods'
/// controllers by workload index. Panics on a failed write.
pub async fn create_workloads(client: &kube::Client, s: &Shape, conc: usize) -> Vec<Owner> {
    let results: Vec<(usize, Result<Owner, String>)> = futures::stream::iter(0..s.workloads)
        .map(|i| {
            let client = client.clone();
            async move { (i, create_workload(&client, s, i).await) }
        })
        .buffer_unordered(conc)
        .collect()
        .await;
    let mut owners = vec![Default::default(); s.workloads];
    for (i, r) in results {
        owners[i] = r.unwrap_or_else(|e| panic!("{e}"));
    }
    owners
}

/// Creates every workload's pods, `conc` workloads at a time. Panics on a failed write.
pub async fn create_all_pods(client: &kube::Client, s: &Shape, owners: &[Owner], conc: usize) {
    let results: Vec<Result<(), String>> = futures::stream::iter(0..s.workloads)
        .map(|i| {
            let (client, owner) = (client.clone(), &owners[i]);
            async move { create_pods(&client, s, i, owner).await }
        })
        .buffer_unordered(conc)
        .collect()
        .await;
    for r in results {
        r.unwrap_or_else(|e| panic!("{e}"));
    }
}

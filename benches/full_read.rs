//! What judging a whole cluster costs, in process, at the sizes of `benches/scale.rs`: the part of
//! a `reports` full read (and of `ha-guard audit`) that is ha-guard's own CPU, without the
//! apiserver's lists. The scale bench measures the whole read on a real control plane in hours;
//! this one shows in a minute how the judging grows with the nodes and the pods.
//!
//!     cargo bench --bench full_read -- --sizes 500,2000,5000
//!
//! The cluster is `benches/common/cluster.rs`'s, built straight into a view (`Index`, complete,
//! nodes known, as `audit::read` builds it): per size N, N nodes over three zones (32 CPU, 256 GiB,
//! 110 pods allocatable, Ready), `--pods-per-node` (30) × N pods, a third as many workloads (3 in 4
//! Deployments, 1 in 4 StatefulSets), N/50 namespaces, their PDBs and HPAs. Then every subject is
//! judged (`audit::audit`, all cores) `--rounds` times (3): median and worst wall time, findings,
//! and the time per workload, so that a cost per workload that grows with the nodes shows.
//!
//! Flags (after `--`): `--sizes N,N,...` (500,2000,5000), `--pods-per-node N` (30), `--rounds N` (3).

#[path = "common/cluster.rs"]
mod cluster;

#[path = "common/flags.rs"]
mod flags;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ha_guard::audit::{self, Cluster, read::Listed};
use ha_guard::core::config::Config;
use ha_guard::core::model::live_pod::{LivePod, OwnerReference};
use ha_guard::core::model::{Object, decode};
use ha_guard::core::view::Index;
use ha_guard::core::view::projection::{PodInfo, PodOwner};
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "--sizes N,N,... --pods-per-node N --rounds N";

fn main() {
    let mut sizes = vec![500, 2000, 5000];
    let (mut per_node, mut rounds) = (30usize, 3usize);
    for (flag, value) in flags::pairs(USAGE) {
        let bad = || flags::bad(&flag, &value, USAGE);
        match flag.as_str() {
            "--sizes" => sizes = value.split(',').map(|n| n.trim().parse().unwrap_or_else(|_| bad())).collect(),
            "--pods-per-node" => per_node = value.parse().unwrap_or_else(|_| bad()),
            "--rounds" => rounds = value.parse().unwrap_or_else(|_| bad()),
            _ => flags::bad(&flag, &value, USAGE),
        }
    }
    println!(
        "| nodes | pods | workloads | namespaces | built in | judged in, median / worst | per workload | findings |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for nodes in sizes {
        let pods = nodes * per_node;
        let shape = cluster::Shape { workloads: (pods / 3).max(1), pods, namespaces: (nodes / 50).max(1), nodes };
        let started = Instant::now();
        let cluster = build(&shape);
        let built = started.elapsed();
        let config = Config::default();
        let mut times = Vec::new();
        let mut findings = 0;
        for _ in 0..rounds {
            let started = Instant::now();
            let report = audit::audit(&cluster, &config);
            times.push(started.elapsed());
            findings = report.findings.len();
        }
        times.sort();
        let median = times[times.len() / 2];
        println!(
            "| {nodes} | {pods} | {} | {} | {:.1} s | {:.2} s / {:.2} s | {:.0} µs | {findings} |",
            shape.workloads,
            shape.namespaces,
            built.as_secs_f64(),
            median.as_secs_f64(),
            times.last().unwrap_or(&Duration::ZERO).as_secs_f64(),
            median.as_secs_f64() * 1e6 / shape.workloads as f64,
        );
    }
}

fn object(value: Value, namespace: &str) -> Object {
    decode(&value, namespace).expect("decodes").expect("a kind the view keeps")
}

/// The cluster of `shape` as `audit::read` would read it.
fn build(s: &cluster::Shape) -> Cluster {
    let mut index = Index::new();
    index.set_complete(true);
    index.set_knows_nodes(true);
    let mut subjects = Vec::new();
    let mut add = |index: &mut Index, value: Value, namespace: &str| {
        let o = object(value, namespace);
        index.insert_object(&o);
        if let Object::Subject(subject) = o {
            let id = subject.id();
            let path = format!("{}/{}/{}", id.namespace, id.kind, id.name);
            subjects.push(Listed { subject, path });
        }
    };
    let namespaces: BTreeSet<String> = (0..s.workloads).map(|i| cluster::workload(s, i).ns).collect();
    for ns in &namespaces {
        add(&mut index, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}), "");
    }
    for n in 0..s.nodes {
        let mut node = cluster::node(n);
        node["apiVersion"] = json!("v1");
        node["kind"] = json!("Node");
        node["status"] = json!({"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]});
        add(&mut index, node, "");
    }
    for i in 0..s.workloads {
        let g = cluster::workload(s, i);
        let n = cluster::replicas(i, &g);
        let mut spec = json!({"replicas": n, "selector": {"matchLabels": cluster::labels(&g.name)},
            "template": cluster::pod_template(i, &g.name)});
        let meta = json!({"name": g.name, "namespace": g.ns, "uid": format!("uid-{i}")});
        let owner = if g.sts {
            spec["serviceName"] = json!(g.name);
            add(
                &mut index,
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta, "spec": spec}),
                &g.ns,
            );
            ("StatefulSet".to_string(), g.name.clone(), format!("uid-{i}"))
        } else {
            add(
                &mut index,
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}),
                &g.ns,
            );
            if cluster::has_hpa(s, i) {
                add(
                    &mut index,
                    json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                        "metadata": {"name": g.name, "namespace": g.ns}, "spec": {
                        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": g.name},
                        "minReplicas": 2, "maxReplicas": 6,
                        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}]}}),
                    &g.ns,
                );
            }
            ("ReplicaSet".to_string(), format!("{}-5d9c7f", g.name), format!("uid-rs-{i}"))
        };
        if i.is_multiple_of(2) {
            let mut spec =
                if i.is_multiple_of(20) { json!({"maxUnavailable": 0}) } else { json!({"maxUnavailable": 1}) };
            spec["selector"] = json!({"matchLabels": cluster::labels(&g.name)});
            let allowed = if i.is_multiple_of(20) || g.pods < 2 { 0 } else { 1 };
            add(
                &mut index,
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": g.name, "namespace": g.ns}, "spec": spec,
                    "status": {"observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": g.pods,
                        "desiredHealthy": g.pods.saturating_sub(1), "expectedPods": g.pods}}),
                &g.ns,
            );
        }
        for j in 0..g.pods {
            let mut pod = serde_json::to_value(cluster::pod(s, i, j, &owner)).expect("a pod");
            pod["metadata"]["namespace"] = json!(g.ns);
            pod["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"}]});
            let live: LivePod = serde_json::from_value(pod).expect("a live pod");
            let (kind, name) = if g.sts { ("StatefulSet", g.name.clone()) } else { ("ReplicaSet", owner.1.clone()) };
            let controller =
                OwnerReference { api_version: "apps/v1".into(), kind: kind.into(), name, controller: Some(true) };
            let deployment = g.name.clone();
            let resolved = PodOwner::resolve(Some(&controller), false, |_| Some(deployment.as_str().into()));
            index.upsert_pod(&g.ns, PodInfo::of(&live, resolved));
        }
    }
    Cluster {
        index,
        subjects,
        unreadable: Vec::new(),
        selected: None,
        namespaces: namespaces.len(),
        pods: s.pods,
        storage_unread: None,
    }
}

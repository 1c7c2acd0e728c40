//! `audit --drain-each` on a generated cluster, in process (issue 37, acceptance 3): the replay of a
//! rolling upgrade of every node, its wall time and the heap it takes beside the view.
//!
//!     cargo bench --bench drain -- --nodes 1000 --pods 30000
//!
//! The view is built as the audit builds it (an `Index` keeping pod templates): `--nodes` Nodes
//! (allocatable 16 CPUs, 64 GiB, 110 pods) in three zones, `--pods / 3` Deployments of three
//! replicas in 100 namespaces, each with a PDB (maxUnavailable 1), half of them with a
//! DoNotSchedule hostname spread, a tenth with a required anti-affinity, all requesting 100m CPU;
//! a third of them StatefulSets, a third of those with a claim per pod bound to a zonal CSI
//! PersistentVolume in its node's zone (every node's CSINode attaching 64 of them at most); pods
//! placed round-robin, Running and Ready. Then `replay_each` over every node, timed, with
//! the drains' outcomes counted (so the run is checked to do work: most drains complete).
//! Flags: `--nodes N` (1000), `--pods N` (30000), `--rounds N` (1).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::Instant;

use ha_guard::core::model::{self, Kind, Object};
use ha_guard::core::view::replay::{Outcome, replay_each};
use ha_guard::core::view::{Index, PodInfo, PodOwner, PodPhase};
use serde_json::json;

/// Counts the heap in use and its peak, to say what the replay takes beside the view.
struct Counting;
static IN_USE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
            PEAK.fetch_max(now.max(0) as usize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn decode(v: serde_json::Value) -> Object {
    model::decode(&v, "default").expect("decodes").expect("a known kind")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (nodes, pods, rounds) =
        (flag(&args, "--nodes", 1000), flag(&args, "--pods", 30000), flag(&args, "--rounds", 1));
    let workloads = pods / 3;
    let started = Instant::now();
    let mut index = Index::new();
    index.set_complete(true);
    index.set_knows_nodes(true);
    index.set_keeps_templates(true);
    let node_names: Vec<String> = (0..nodes).map(|i| format!("node-{i:04}")).collect();
    for (i, name) in node_names.iter().enumerate() {
        index.insert_object(&decode(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": format!("zone-{}", i % 3)}},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}})));
    }
    let mut storage = ha_guard::core::view::storage::Storage::default();
    for name in &node_names {
        storage.insert_csi_node(
            &serde_json::from_value(json!({"metadata": {"name": name},
                "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": name, "allocatable": {"count": 64}}]}}))
            .expect("a CSINode"),
        );
    }
    let mut next_node = 0usize;
    for w in 0..workloads {
        let stateful = w % 3 == 0;
        let volumes = stateful && (w / 3) % 3 == 0;
        let kind = if stateful { Kind::StatefulSet } else { Kind::Deployment };
        let ns = format!("ns-{}", w % 100);
        let name = format!("app-{w}");
        let mut spec =
            json!({"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]});
        if w % 2 == 0 {
            spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": name}}}]);
        } else if w % 10 == 1 {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": name}}}]}});
        }
        index.insert_object(&decode(json!({"apiVersion": "apps/v1", "kind": kind.as_str(),
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}}, "serviceName": name,
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})));
        index.insert_object(&decode(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}}})));
        let labels = Arc::new([("app".to_string(), name.clone())].into_iter().collect());
        for r in 0..3 {
            let at = next_node % nodes;
            let node = &node_names[at];
            next_node += 1;
            let pod = format!("{name}-{r}");
            let claims: Arc<[Arc<str>]> = if volumes {
                let (claim, pv) = (format!("data-{pod}"), format!("pv-{ns}-{pod}"));
                index.insert_object(&decode(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim, "namespace": ns},
                    "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv, "storageClassName": "gp3"}})));
                storage.insert_volume(
                    &serde_json::from_value(json!({"metadata": {"name": pv,
                        "labels": {"topology.kubernetes.io/zone": format!("zone-{}", at % 3)}},
                        "spec": {"storageClassName": "gp3", "claimRef": {"namespace": ns, "name": claim},
                            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": format!("vol-{ns}-{pod}")}}}))
                    .expect("a PersistentVolume"),
                );
                Arc::from([Arc::from(claim.as_str())])
            } else {
                Arc::default()
            };
            index.upsert_pod(
                &ns,
                PodInfo {
                    name: pod.as_str().into(),
                    owner: PodOwner::Workload(kind, name.as_str().into()),
                    node: Some(node.as_str().into()),
                    labels: Arc::clone(&labels),
                    unschedulable: None,
                    phase: PodPhase::Running,
                    ready: true,
                    terminating: false,
                    tolerates_cordon: false,
                    requests: ha_guard::core::model::resources::Resources { cpu_milli: 100, ..Default::default() },
                    ports: Vec::new(),
                    anti_affinity: Default::default(),
                    claims,
                    ephemeral_claims: Default::default(),
                    priority: 0,
                    preempts: true,
                },
            );
        }
    }
    index.set_storage(storage);
    let view_heap = IN_USE.load(Ordering::Relaxed);
    println!(
        "view: {nodes} nodes, {} pods of {workloads} Deployments and StatefulSets (with PDBs; PVs on a ninth) in 100 namespaces, built in {:.1?}, heap {:.1} MiB",
        workloads * 3,
        started.elapsed(),
        view_heap as f64 / (1 << 20) as f64
    );
    for round in 0..rounds {
        PEAK.store(IN_USE.load(Ordering::Relaxed).max(0) as usize, Ordering::Relaxed);
        let started = Instant::now();
        let runs = replay_each(&index, &node_names);
        let took = started.elapsed();
        let mut outcomes = std::collections::BTreeMap::new();
        for r in &runs {
            *outcomes.entry(r.outcome.as_str()).or_insert(0usize) += 1;
        }
        let extra = PEAK.load(Ordering::Relaxed) as isize - view_heap;
        // Everything the runs say, hashed: two builds that decide alike print the same digest.
        let mut digest = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&format!("{runs:?}"), &mut digest);
        println!(
            "round {round}: --drain-each over {} nodes in {took:.2?} ({:.2} ms a node), heap peak {:.1} MiB above the view; outcomes {outcomes:?}; runs digest {:016x}",
            runs.len(),
            took.as_secs_f64() * 1000.0 / runs.len().max(1) as f64,
            extra as f64 / (1 << 20) as f64,
            std::hash::Hasher::finish(&digest)
        );
        assert!(runs.iter().filter(|r| r.outcome == Outcome::Completes).count() * 2 > runs.len(), "{outcomes:?}");
    }
}

//! End-to-end: `host-network-colocation` agrees with the scheduler (issue 41, item 5). On a control
//! plane whose kube-scheduler places pods on three kwok nodes, ha-guard's validating webhook
//! judges each write (with its live view of the nodes) and the scheduler then places the pods:
//!
//! 1. the csi-driver-nfs 2022 controller from the corpus (2 hostNetwork replicas, no affinity, its nfs
//!    container declaring containerPort 29652): no deny and no co-location warning,
//!    and the scheduler puts the replicas on distinct nodes; at 4 replicas ha-guard warns
//!    `spread-unsatisfiable` (at most 3, the rest Pending, because of port 29652) and the scheduler
//!    leaves exactly one Pending for want of a free port;
//! 2. a hostNetwork Deployment of 4 replicas declaring no port: denied by host-network-colocation;
//!    admitted with an exemption, the scheduler places all 4 on the 3 nodes, two on one node;
//! 3. the same declaring containerPort 8080: admitted without deny, `spread-unsatisfiable` says at
//!    most 3, and the scheduler places 3 on distinct nodes and leaves one Pending.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::*;

const NODES: [&str; 3] = ["port-a", "port-b", "port-c"];

#[test]
fn the_scheduler_agrees_with_host_network_colocation() {
    let mut h = Harness::start(Setup { controllers: true, nodes: &[], ..Default::default() });
    // The csi-driver-nfs controller selects kubernetes.io/os: linux.
    let nodes: Vec<(&str, &[(&str, &str)])> =
        NODES.iter().map(|n| (*n, &[("kubernetes.io/os", "linux")][..])).collect();
    h.cp.kwok_nodes(&nodes);
    h.hg.wait_cache("Node", ">= 3", |n| n >= 3);
    let mut steps = h.steps();
    let guard = h.guard();
    let cp = &h.cp;
    steps.run("1 csi-driver-nfs 2022 controller: declared port 29652", || csi_nfs(cp));
    steps.run("2 hostNetwork without a declared port: denied, and co-located", || undeclared(cp));
    steps.run("3 hostNetwork with a declared port: allowed, one per node", || declared(cp));
    steps.run("no webhook call failed", || guard.finish(cp));
    steps.finish();
}

/// Where the scheduler put the pods `app=<app>` of `ns`: pods per node, and the messages of the
/// pods it could not place. Waits until `want` pods exist and each is placed or refused.
fn placements(cp: &ControlPlane, ns: &str, app: &str, want: usize) -> (BTreeMap<String, usize>, Vec<String>) {
    poll(&format!("{want} pods of {ns}/{app} placed or refused"), WAIT, Duration::from_millis(200), || {
        let pods = cp.kubectl(&["get", "pods", "-n", ns, "-l", &format!("app={app}"), "-o", "json"]).success().json();
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        let mut on = BTreeMap::new();
        let mut pending = Vec::new();
        for p in &items {
            if let Some(node) = p["spec"]["nodeName"].as_str() {
                *on.entry(node.to_string()).or_insert(0) += 1;
                continue;
            }
            let conditions = p["status"]["conditions"].as_array().cloned().unwrap_or_default();
            let refused = conditions.iter().find(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable");
            match refused {
                Some(c) => pending.push(c["message"].as_str().unwrap_or_default().to_string()),
                None => return Err(format!("{} not yet scheduled or refused", p["metadata"]["name"])),
            }
        }
        if items.len() == want { Ok((on, pending)) } else { Err(format!("{} pods", items.len())) }
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn ours(k: &Kubectl) -> Vec<String> {
    k.warnings().into_iter().filter(|w| w.starts_with('[')).collect()
}

fn csi_nfs(cp: &ControlPlane) {
    let ns = "nfs";
    let file = repo().join("../shared/corpus/csi-driver-nfs/csi-nfs-controller-2022-01.yaml");
    let file = std::env::var_os("HA_GUARD_CORPUS")
        .map(|d| std::path::PathBuf::from(d).join("csi-driver-nfs/csi-nfs-controller-2022-01.yaml"))
        .unwrap_or(file);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // Unchanged but for its namespace: kube-system is not judged by the shipped webhooks.
    let text = text.replace("namespace: kube-system", &format!("namespace: {ns}"));
    cp.namespace(ns, &[]);
    cp.kubectl(&["create", "serviceaccount", "csi-nfs-controller-sa", "-n", ns]).success();
    let applied = cp.kubectl_in(&["apply", "-f", "-"], &text).success();
    let warned = ours(&applied);
    for rule in ["host-network-colocation", "replicas-colocated"] {
        assert!(!warned.iter().any(|w| w.starts_with(&format!("[{rule}]"))), "{rule}: {warned:?}");
    }
    let (on, pending) = placements(cp, ns, "csi-nfs-controller", 2);
    assert_eq!((on.len(), pending.len()), (2, 0), "two replicas on two nodes: {on:?} {pending:?}");

    // Four replicas on three nodes: ha-guard says at most 3, the scheduler places 3.
    let scaled = cp
        .kubectl(&["patch", "deployment", "csi-nfs-controller", "-n", ns, "-p", r#"{"spec":{"replicas":4}}"#])
        .success();
    let warned = ours(&scaled);
    let unsatisfiable = warned.iter().find(|w| w.starts_with("[spread-unsatisfiable]")).unwrap_or_else(|| {
        panic!("spread-unsatisfiable: {warned:?}");
    });
    for part in [
        "spec.template.spec.containers[2].ports[0].containerPort",
        "can run 4 replicas but the cluster has 3 schedulable nodes",
        "declared host port 29652 places at most one replica per node",
        "at most 3 can be placed, the rest stay Pending",
    ] {
        assert!(unsatisfiable.contains(part), "{part:?} not in {unsatisfiable}");
    }
    let (on, pending) = placements(cp, ns, "csi-nfs-controller", 4);
    assert_eq!(on.values().copied().collect::<Vec<_>>(), [1, 1, 1], "one per node: {on:?}");
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(pending[0].contains("free ports"), "{pending:?}");
}

fn undeclared(cp: &ControlPlane) {
    let ns = "bare";
    cp.namespace(ns, &[]);
    let d = pod(deployment(ns, "agent", 4), json!({"hostNetwork": true}));
    cp.apply(&d).denied(&["host-network-colocation"]).shows(&[
        "[host-network-colocation] spec.template.spec.hostNetwork: ",
        "can run 4 replicas, but nothing keeps two of them off one node: no container declares a port (containerPort)",
        "crash-loops",
        "Fix: declare the ports the containers listen on",
    ]);
    // Admitted with an exemption, the scheduler does what the deny says it may.
    let exempt = merge(
        d,
        json!({"metadata": {"annotations": {"ha-guard.io/allow-host-network-colocation": "e2e: see where it lands"}}}),
    );
    cp.apply(&exempt).success();
    let (on, pending) = placements(cp, ns, "agent", 4);
    assert!(pending.is_empty(), "nothing keeps them apart, nothing waits: {pending:?}");
    assert!(on.values().any(|&n| n >= 2), "two replicas share a node: {on:?}");
}

fn declared(cp: &ControlPlane) {
    let ns = "ports";
    cp.namespace(ns, &[]);
    let d = pod(
        deployment(ns, "agent", 4),
        json!({"hostNetwork": true,
               "containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 8080}]}]}),
    );
    let applied = cp.apply(&d).success();
    let warned = ours(&applied);
    for rule in ["host-network-colocation", "replicas-colocated"] {
        assert!(!warned.iter().any(|w| w.starts_with(&format!("[{rule}]"))), "{rule}: {warned:?}");
    }
    let unsatisfiable = warned.iter().find(|w| w.starts_with("[spread-unsatisfiable]")).unwrap_or_else(|| {
        panic!("spread-unsatisfiable: {warned:?}");
    });
    for part in ["declared host port 8080", "at most 3 can be placed, the rest stay Pending"] {
        assert!(unsatisfiable.contains(part), "{part:?} not in {unsatisfiable}");
    }
    let (on, pending) = placements(cp, ns, "agent", 4);
    assert_eq!(on.values().copied().collect::<Vec<_>>(), [1, 1, 1], "one per node: {on:?}");
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(pending[0].contains("free ports"), "{pending:?}");
}

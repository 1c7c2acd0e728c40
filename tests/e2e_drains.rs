//! End-to-end: will this drain finish? (issue 37). On a control plane whose scheduler,
//! controllers and kwok place, count and replace the pods, each generated scenario is predicted
//! with `ha-guard audit --drain NODE --format json` and then really drained with `kubectl drain
//! NODE --ignore-daemonsets --delete-emptydir-data`; the predicted outcome, the pods evicted and
//! the replacements left Pending must be what happened, scenario by scenario (the table is
//! printed).
//!
//! Each scenario has its own namespace and its own three nodes (labelled `scenario: NAME`, which
//! its pods select), so scenarios drain side by side without touching each other. A drain that
//! hangs is told by kubectl giving up on a budget's refusal after a short timeout, while the
//! budget's status no longer changes: kwok makes replacements Ready at once, so a refusal that
//! outlives a few retries is final.
//!
//! Then spreads against the scheduler: for node sets with taints, cordons, zones and missing keys,
//! and hostname or zone spreads (both taint policies, minDomains) or a required anti-affinity, the
//! number of replicas ha-guard's placement module places equals the number kube-scheduler places.
//!
//! No ha-guard webhook is registered: many scenarios are budgets ha-guard would refuse.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");

/// What keeps replicas apart or limits where they go.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Constraint {
    None,
    /// A DoNotSchedule hostname spread, maxSkew 1.
    Spread,
    /// The same with nodeTaintsPolicy: Honor.
    SpreadHonor,
    /// A required pod anti-affinity on the hostname.
    AntiAffinity,
    /// A request of 600 CPUs: kwok's nodes have 1000, so one such pod a node.
    Cpu,
    /// A host port: one such pod a node.
    HostPort,
    /// 600 CPUs as a limit alone: the apiserver stores the limit as the request.
    LimitsOnly,
    /// No resources in the template; the namespace's LimitRange gives each container a default
    /// request of 600 CPUs, which the stored pods carry.
    LimitRangeDefault,
}

#[derive(Clone, Debug)]
struct Scenario {
    name: String,
    replicas: i64,
    budget: Option<Value>,
    constraint: Constraint,
    /// Extra: a pod without a controller on the drained node; a second PDB; pods never Ready.
    bare: bool,
    second_pdb: bool,
    not_ready: bool,
    /// A `guard` pod created once the replicas run, on a node of its own, whose required
    /// anti-affinity on the hostname keeps the replicas off its node (InterPodAffinity's
    /// `satisfyExistingPodsAntiAffinity`): a replacement cannot go there either.
    guard: bool,
    /// Another namespace's pod (`NAME-crowd`), created first, taking the one node the replicas
    /// leave: `audit --namespace NAME --drain` must count it (a drain is simulated on the whole
    /// cluster), or it says the replacement fits there.
    crowd: bool,
    /// The replicas mount one claim, `data`, bound to a PersistentVolume that limits where they go.
    volume: Volume,
    /// The replicas have a PriorityClass of value 1000 (`NAME-high`) with this preemptionPolicy,
    /// and once they run, another namespace's pods of priority 0 (`NAME-crowd`, two of 600 CPUs)
    /// fill the other nodes: a replacement preempts one of them, which is what stays Pending
    /// (DefaultPreemption), unless the policy is Never.
    preempt: Option<&'static str>,
    /// The replicas' required pod affinity has two terms on the zone (`tier: cache`, `role:
    /// primary`), and other pods (`full`, `cache`, `primary`) match one or both of them.
    affinity: Option<MultiTerm>,
}

/// What a scenario's two-term pod affinity finds (InterPodAffinity's `updateWithAffinityTerms`: an
/// existing pod counts only if it matches all the terms; the first-pod escape only while none
/// does, `len(state.clusterWideAffinityCounts) == 0`). Nodes n1, n2 of zone a, n3 of zone b.
#[derive(Clone, Copy, Debug, PartialEq)]
enum MultiTerm {
    /// `full` (both labels) on n1, `cache` and `primary` (one each) on n3; the replicas stay off n1
    /// (node affinity), so the replica runs on n2. Its replacement: zone b holds a pod for each
    /// term but none for both, and the escape is closed (`full` exists): Pending.
    AllTerms,
    /// The replicas carry both labels themselves; only `cache` (one label) on n3. No pod matches
    /// both once the replica is evicted: the escape lets the replacement go anywhere.
    Escape,
}

/// What the `data` volume of a scenario is (kube-scheduler's volume filters).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Volume {
    None,
    /// A local PV of node n1 (VolumeBinding: its node affinity).
    Local,
    /// A disk labelled with zone `NAME-a`, which this many of the three nodes are in (VolumeZone).
    Zone(usize),
    /// The same with two nodes in the zone, and the whole zone drained (`--drain-zone NAME-a`,
    /// `kubectl drain` of both nodes): the disk cannot follow the replica to the other zone.
    ZoneDrained,
    /// A CSI volume, on nodes whose CSINodes attach at most this many of the driver's volumes, the
    /// two nodes the replica is not on holding one each already (NodeVolumeLimits).
    CsiLimit(i32),
    /// A generic ephemeral volume of a `WaitForFirstConsumer` class without provisioner, and free
    /// local PVs of it on this many nodes (n1, n2...): each pod's claim is made with it and bound
    /// where a free PV is, so the replacement goes where one is left (VolumeBinding).
    Ephemeral(usize),
    /// A generic ephemeral volume of a `WaitForFirstConsumer` class with a provisioner (`csi.NAME`)
    /// whose `allowedTopologies` admit zone `NAME-a`, which this many of the three nodes are in:
    /// VolumeBinding's `checkVolumeProvisions` admits those nodes alone. The test provisions what
    /// the scheduler selects (kwok has no CSI provisioner; see [`provisioner`]).
    Provisioned(usize),
    /// The same with two nodes in the zone, and the whole zone drained (`--drain-zone NAME-a`).
    ProvisionedZoneDrained,
}

/// A scenario of `replicas` under `budget` and `constraint`, nothing else added (named when pushed).
fn plain(replicas: i64, budget: Option<Value>, constraint: Constraint) -> Scenario {
    Scenario {
        name: String::new(),
        replicas,
        budget,
        constraint,
        bare: false,
        second_pdb: false,
        not_ready: false,
        guard: false,
        crowd: false,
        volume: Volume::None,
        preempt: None,
        affinity: None,
    }
}

fn scenarios() -> Vec<Scenario> {
    let budgets = [
        Some(json!({"maxUnavailable": 1})),
        Some(json!({"minAvailable": 1})),
        Some(json!({"minAvailable": 2})),
        Some(json!({})),
        None,
    ];
    let constraints = [
        Constraint::None,
        Constraint::Spread,
        Constraint::SpreadHonor,
        Constraint::AntiAffinity,
        Constraint::Cpu,
        Constraint::HostPort,
    ];
    let mut out: Vec<Scenario> = Vec::new();
    let mut push = |s: Scenario| {
        let name = format!("d{}", out.len());
        out.push(Scenario { name, ..s });
    };
    for (c, constraint) in constraints.iter().enumerate() {
        for (b, budget) in budgets.iter().enumerate() {
            for replicas in [2, 3] {
                // Not every combination: every constraint with every budget, replicas alternating.
                if (b + c + replicas as usize) % 2 == 1 && *constraint != Constraint::Spread {
                    continue;
                }
                push(plain(replicas, budget.clone(), *constraint));
            }
        }
    }
    let one = || Some(json!({"maxUnavailable": 1}));
    let unhealthy = |policy: &str| Some(json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": policy}));
    push(Scenario { bare: true, ..plain(3, one(), Constraint::Spread) });
    push(Scenario { second_pdb: true, ..plain(3, one(), Constraint::None) });
    push(Scenario { not_ready: true, ..plain(2, unhealthy("IfHealthyBudget"), Constraint::None) });
    push(Scenario { not_ready: true, ..plain(2, unhealthy("AlwaysAllow"), Constraint::None) });
    push(Scenario { second_pdb: true, ..plain(3, one(), Constraint::AntiAffinity) });
    push(Scenario { bare: true, ..plain(3, Some(json!({"minAvailable": 2})), Constraint::Cpu) });
    // An existing pod's anti-affinity: the replacement has nowhere else to go (its own
    // anti-affinity or spread keeps it off the other replica's node), and the guard's node refuses it.
    for constraint in [Constraint::AntiAffinity, Constraint::Spread, Constraint::None] {
        push(Scenario { guard: true, ..plain(2, one(), constraint) });
    }
    // Another namespace's pod fills the node the replacement would take.
    for constraint in [Constraint::Cpu, Constraint::None] {
        push(Scenario { crowd: true, ..plain(2, one(), constraint) });
    }
    // Volumes: where the one replica's volume can be used decides where its replacement goes.
    let volumes = [
        Volume::Local,
        Volume::Zone(1),
        Volume::Zone(2),
        Volume::CsiLimit(1),
        Volume::CsiLimit(2),
        Volume::Ephemeral(1),
        Volume::Ephemeral(2),
        Volume::ZoneDrained,
    ];
    for volume in volumes {
        push(Scenario { volume, ..plain(1, one(), Constraint::None) });
    }
    // What the apiserver stores: 600 CPUs from a limit alone, or from the namespace's LimitRange,
    // three replicas on three nodes: the replacement fits nowhere.
    for constraint in [Constraint::LimitsOnly, Constraint::LimitRangeDefault] {
        push(plain(3, one(), constraint));
    }
    // Priority: the replacement of a 600-CPU replica preempts another namespace's pod of lower
    // priority; with preemptionPolicy Never it stays Pending itself.
    for policy in ["PreemptLowerPriority", "Never"] {
        push(Scenario { preempt: Some(policy), ..plain(1, one(), Constraint::Cpu) });
    }
    // A class that provisions where its allowedTopologies say: one node of the zone (the drained
    // one), two, and the zone drained.
    for volume in [Volume::Provisioned(1), Volume::Provisioned(2), Volume::ProvisionedZoneDrained] {
        push(Scenario { volume, ..plain(1, one(), Constraint::None) });
    }
    // Two affinity terms: a pod for each is not a pod for both; the escape needs none for both.
    for affinity in [MultiTerm::AllTerms, MultiTerm::Escape] {
        push(Scenario { affinity: Some(affinity), ..plain(1, one(), Constraint::None) });
    }
    out
}

/// The labels of node `i` (1 to 3) of a scenario: its name, and with a zonal volume its zone.
fn node_labels(s: &Scenario, i: usize) -> Vec<(String, String)> {
    let mut labels = vec![("scenario".to_string(), s.name.clone())];
    let in_zone = match (s.volume, s.affinity) {
        (Volume::Zone(n) | Volume::Provisioned(n), _) => Some(n),
        (Volume::ZoneDrained | Volume::ProvisionedZoneDrained, _) => Some(2),
        (_, Some(MultiTerm::AllTerms)) => Some(2),
        (_, Some(MultiTerm::Escape)) => Some(1),
        _ => None,
    };
    if let Some(in_zone) = in_zone {
        let zone = if i <= in_zone { "a" } else { "b" };
        labels.push(("topology.kubernetes.io/zone".to_string(), format!("{}-{zone}", s.name)));
    }
    labels
}

/// A claim `claim` of namespace `ns` bound to a PV of its own (`NS-CLAIM`), `source` its volume
/// source, with `extra` merged into the PV (labels, node affinity).
fn bound_claim(ns: &str, claim: &str, source: Value, extra: Value) -> Vec<Value> {
    let pv_name = format!("{ns}-{claim}");
    let mut pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain", "claimRef": {"namespace": ns, "name": claim}}});
    for (k, v) in source.as_object().expect("a source") {
        pv["spec"][k] = v.clone();
    }
    for (path, v) in extra.as_object().expect("extra") {
        let (part, key) = path.split_once('.').expect("metadata.X or spec.X");
        pv[part][key] = v.clone();
    }
    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Gi"}}}});
    vec![pv, pvc]
}

/// The CSI driver of a scenario's volumes.
fn driver(ns: &str) -> String {
    format!("csi.{ns}")
}

/// The PV and claim of a scenario's `data` volume, and the CSINodes of its nodes.
fn volume_objects(s: &Scenario) -> Vec<Value> {
    let ns = &s.name;
    let host_path = json!({"hostPath": {"path": format!("/tmp/{ns}")}});
    match s.volume {
        Volume::None => Vec::new(),
        Volume::Local => bound_claim(
            ns,
            "data",
            host_path,
            json!({"spec.nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [format!("{ns}-n1")]}]}]}}}),
        ),
        Volume::Zone(_) | Volume::ZoneDrained => bound_claim(
            ns,
            "data",
            host_path,
            json!({"metadata.labels": {"topology.kubernetes.io/zone": format!("{ns}-a")}}),
        ),
        Volume::Ephemeral(free) => {
            let class = format!("{ns}-local");
            let mut out = vec![json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": class}, "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer"})];
            out.extend((1..=free).map(|i| {
                json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": format!("{ns}-local-n{i}")},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                        "persistentVolumeReclaimPolicy": "Retain", "local": {"path": format!("/tmp/{ns}")},
                        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [format!("{ns}-n{i}")]}]}]}}}})
            }));
            out
        }
        Volume::Provisioned(_) | Volume::ProvisionedZoneDrained => {
            vec![
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": format!("{ns}-zonal")},
                "provisioner": driver(ns), "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": [format!("{ns}-a")]}]}]}),
            ]
        }
        Volume::CsiLimit(count) => {
            let mut out = bound_claim(ns, "data", csi_source(ns, "data"), json!({}));
            out.extend((1..=3).map(|i| {
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": format!("{ns}-n{i}")},
                    "spec": {"drivers": [{"name": driver(ns), "nodeID": format!("{ns}-n{i}"), "allocatable": {"count": count}}]}})
            }));
            out
        }
    }
}

fn csi_source(ns: &str, claim: &str) -> Value {
    json!({"csi": {"driver": driver(ns), "volumeHandle": format!("{ns}-{claim}")}})
}

/// A pod without controller on `node` mounting a CSI volume of its own: it fills one of the
/// node's attachments of the scenario's driver.
fn filler(ns: &str, node: &str, i: usize) -> Vec<Value> {
    let claim = format!("fill-{i}");
    let mut out = bound_claim(ns, &claim, csi_source(ns, &claim), json!({}));
    out.push(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": claim, "namespace": ns},
        "spec": {"nodeName": node, "containers": [{"name": "fill", "image": "nginx:1.27"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}));
    out
}

/// The crowd of a scenario: a Deployment in namespace `NS-crowd` whose one pod asks 600 CPUs on
/// the scenario's nodes (kwok's have 1,000): no replica asking as much fits beside it.
fn crowd(ns: &str, replicas: i64) -> Vec<Value> {
    let labels = json!({"app": "crowd"});
    let other = format!("{ns}-crowd");
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "crowd", "namespace": other},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
                "spec": {"nodeSelector": {"scenario": ns}, "containers": [{"name": "crowd", "image": "nginx:1.27",
                    "resources": {"requests": {"cpu": "600"}}}]}}}}),
    ]
}

/// A Deployment `name` of one pod labelled `labels` (and `helper: NAME`), on node `nNODE` of the
/// scenario.
fn helper(ns: &str, name: &str, labels: &Value, node: usize) -> Value {
    let mut labels = labels.clone();
    labels["helper"] = json!(name);
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"helper": name}}, "template": {"metadata": {"labels": labels},
            "spec": {"nodeSelector": {"scenario": ns, "kubernetes.io/hostname": format!("{ns}-n{node}")},
                "containers": [{"name": name, "image": "nginx:1.27"}]}}}})
}

/// The label and finalizer of pods that take a while to stop (see [`stand_ins`]).
const GRACE: &str = "e2e.ha-guard.io/grace";

/// What kwok does not do, done beside the scenarios until `stop` is set: [`provisioner`], and the
/// termination of a pod labelled and held by [`GRACE`], which kwok deletes at once where a
/// kubelet takes up to the pod's grace period: its finalizer is removed 3 s after its deletion
/// began, so that a replacement is tried while the pod is still terminating, as on real nodes.
fn stand_ins(cp: &ControlPlane, stop: &std::sync::atomic::AtomicBool) {
    let mut seen: std::collections::BTreeMap<String, Instant> = std::collections::BTreeMap::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        provisioner(cp);
        let out = cp.kubectl(&["get", "pods", "--all-namespaces", "-l", GRACE, "-o", "json"]);
        if !out.ok() {
            continue;
        }
        for p in out.json()["items"].as_array().into_iter().flatten() {
            if !p["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            let (ns, name) = (p["metadata"]["namespace"].as_str().unwrap_or_default(), p["metadata"]["name"].as_str());
            let key = format!("{ns}/{}", name.unwrap_or_default());
            if seen.entry(key).or_insert_with(Instant::now).elapsed() >= Duration::from_secs(3) {
                let patch = r#"[{"op": "remove", "path": "/metadata/finalizers"}]"#;
                let name = name.unwrap_or_default();
                let _ = cp.kubectl(&["-n", ns, "patch", "pod", name, "--type=json", "-p", patch]);
            }
        }
    }
}

/// The test's CSI provisioner (kwok runs none): what external-provisioner does for a claim of a
/// `WaitForFirstConsumer` class once kube-scheduler has chosen its pod's node (the claim's
/// `volume.kubernetes.io/selected-node`), a PersistentVolume of the class bound to the claim and
/// usable from that node. Only the claims of the scenarios' `NAME-zonal` classes, one round of
/// them ([`stand_ins`] repeats it). The scheduler alone decides whether a node is selected at all (the class's
/// `allowedTopologies`): a claim it selects none for is never provisioned, as with a real one. A
/// claim once provisioned has its `volumeName` set, and a PV named after its uid already there
/// makes `create` fail harmlessly until it is.
fn provisioner(cp: &ControlPlane) {
    std::thread::sleep(Duration::from_millis(300));
    let out = cp.kubectl(&["get", "pvc", "--all-namespaces", "-o", "json"]);
    if !out.ok() {
        return;
    }
    let claims = out.json();
    let mut volumes = Vec::new();
    for c in claims["items"].as_array().into_iter().flatten() {
        let class = c["spec"]["storageClassName"].as_str().unwrap_or_default();
        let node = c["metadata"]["annotations"]["volume.kubernetes.io/selected-node"].as_str();
        let uid = c["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let (Some(node), Some(ns)) = (node, class.strip_suffix("-zonal")) else { continue };
        if c["spec"]["volumeName"].as_str().is_some_and(|v| !v.is_empty()) {
            continue;
        }
        volumes.push(json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": format!("pvc-{uid}")},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                "persistentVolumeReclaimPolicy": "Retain", "csi": {"driver": driver(ns), "volumeHandle": format!("pvc-{uid}")},
                "claimRef": {"namespace": c["metadata"]["namespace"], "name": c["metadata"]["name"], "uid": uid},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}));
    }
    for v in &volumes {
        // One at a time: a PV made by an earlier round (its claim not bound yet) fails alone.
        let _ = cp.kubectl_in(&["create", "-f", "-"], &yaml_file(std::slice::from_ref(v)));
    }
}

/// The guard of a scenario: one pod on the scenario's nodes, keeping `app` pods off its node.
fn guard(ns: &str) -> Value {
    let labels = json!({"app": "guard"});
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "guard", "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
            "spec": {"nodeSelector": {"scenario": ns}, "containers": [{"name": "guard", "image": "nginx:1.27"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "app"}}}]}}}}}})
}

fn objects(s: &Scenario) -> Vec<Value> {
    let ns = &s.name;
    let app = "app";
    let mut spec = json!({"nodeSelector": {"scenario": ns}, "containers": [{"name": "app", "image": "nginx:1.27"}]});
    let own = json!({"matchLabels": {"app": app}});
    match s.constraint {
        Constraint::None => {}
        Constraint::Spread | Constraint::SpreadHonor => {
            let mut c = json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": own});
            if s.constraint == Constraint::SpreadHonor {
                c["nodeTaintsPolicy"] = json!("Honor");
            }
            spec["topologySpreadConstraints"] = json!([c]);
        }
        Constraint::AntiAffinity => {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": own}]}});
        }
        Constraint::Cpu => spec["containers"][0]["resources"] = json!({"requests": {"cpu": "600"}}),
        Constraint::HostPort => spec["containers"][0]["ports"] = json!([{"containerPort": 8080, "hostPort": 18080}]),
        Constraint::LimitsOnly => spec["containers"][0]["resources"] = json!({"limits": {"cpu": "600"}}),
        Constraint::LimitRangeDefault => {}
    }
    match s.volume {
        Volume::None => {}
        Volume::Ephemeral(_) | Volume::Provisioned(_) | Volume::ProvisionedZoneDrained => {
            let class = match s.volume {
                Volume::Ephemeral(_) => format!("{ns}-local"),
                _ => format!("{ns}-zonal"),
            };
            spec["volumes"] = json!([{"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {
                "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                "resources": {"requests": {"storage": "1Gi"}}}}}}]);
        }
        _ => spec["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
    }
    let mut classes = Vec::new();
    if let Some(policy) = s.preempt {
        let class = format!("{ns}-high");
        classes.push(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": class}, "value": 1000, "preemptionPolicy": policy}));
        spec["priorityClassName"] = json!(class);
    }
    let mut labels = json!({"app": app});
    if s.not_ready {
        labels[NOT_READY] = json!("true");
    }
    let mut out = classes;
    if let Some(affinity) = s.affinity {
        let term = |key: &str, value: &str| json!({"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {key: value}}});
        spec["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            term("tier", "cache"), term("role", "primary")]}});
        let helpers: &[(&str, Value, usize)] = match affinity {
            MultiTerm::AllTerms => {
                spec["affinity"]["nodeAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [format!("{ns}-n1")]}]}]}});
                &[
                    ("full", json!({"tier": "cache", "role": "primary"}), 1),
                    ("cache", json!({"tier": "cache"}), 3),
                    ("primary", json!({"role": "primary"}), 3),
                ]
            }
            MultiTerm::Escape => {
                labels["tier"] = json!("cache");
                labels["role"] = json!("primary");
                // A kubelet takes a while to stop a pod: the replacement is tried meanwhile.
                labels[GRACE] = json!("hold");
                &[("cache", json!({"tier": "cache"}), 3)]
            }
        };
        out.extend(helpers.iter().map(|(name, labels, node)| helper(ns, name, labels, *node)));
    }
    if s.constraint == Constraint::LimitRangeDefault {
        out.push(json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults", "namespace": ns},
            "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "600"}, "default": {"cpu": "600"}}]}}));
    }
    out.extend(volume_objects(s));
    // The ReplicaSet controller copies the template's finalizers to its pods (`getPodsFinalizers`).
    let finalizers = if labels.get(GRACE).is_some() { json!([GRACE]) } else { json!([]) };
    out.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app, "namespace": ns},
        "spec": {"replicas": s.replicas, "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": labels, "finalizers": finalizers}, "spec": spec}}}));
    if let Some(budget) = &s.budget {
        let mut pdb_spec = json!({"selector": {"matchLabels": {"app": app}}});
        for (k, v) in budget.as_object().expect("budget") {
            pdb_spec[k] = v.clone();
        }
        out.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": app, "namespace": ns}, "spec": pdb_spec}));
    }
    if s.second_pdb {
        out.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "also", "namespace": ns}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}}}));
    }
    out
}

fn pods(cp: &ControlPlane, ns: &str) -> Vec<(String, String, String)> {
    let list = cp.kubectl(&["-n", ns, "get", "pods", "-o", "json"]).success().json();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (s(&p["metadata"]["name"]), s(&p["spec"]["nodeName"]), s(&p["status"]["phase"]))
        })
        .collect()
}

/// The pods of a scenario: its namespace's, and those of its crowd of lower priority.
fn scenario_pods(cp: &ControlPlane, s: &Scenario) -> Vec<(String, String, String)> {
    let mut all = pods(cp, &s.name);
    if s.preempt.is_some() {
        all.extend(pods(cp, &format!("{}-crowd", s.name)));
    }
    all
}

/// What a drain did or is predicted to do: its outcome, the pods evicted, the replacements left Pending.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Result {
    outcome: String,
    evicted: BTreeSet<String>,
    pending: usize,
    /// The workloads whose pods stay Pending (a pod's name up to its first dash: `app`, `crowd`).
    pending_of: BTreeSet<String>,
}

/// The workload a pod's name says it belongs to (`app-7c9f-x2` → `app`).
fn workload_of(pod: &str) -> String {
    pod.split('-').next().unwrap_or_default().to_string()
}

fn predict(cp: &ControlPlane, ns: &str, drained: &Drained) -> (Result, Value) {
    let mut args = vec!["audit", "--namespace", ns, "--format", "json"];
    match &drained.zone {
        Some(zone) => args.extend(["--drain-zone", zone.as_str()]),
        None => args.extend(["--drain", drained.nodes[0].as_str()]),
    }
    let out = std::process::Command::new(BIN)
        .args(&args)
        .env("KUBECONFIG", cp.kubeconfig())
        .output()
        .expect("run ha-guard audit");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("audit json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let run = report["drains"][0].clone();
    // The exit follows the outcome (`--fail-on-outcome`, default hangs,refused): the drain
    // findings are warnings, so nothing else fails it.
    let fails = matches!(run["outcome"].as_str(), Some("hangs" | "refused"));
    assert_eq!(
        out.status.code(),
        Some(i32::from(fails)),
        "exit of a drain that ends {}: {}",
        run["outcome"],
        String::from_utf8_lossy(&out.stderr)
    );
    let evicted = run["evictions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["result"] == "evicted")
        .map(|e| e["pod"].as_str().unwrap_or_default().to_string())
        .collect();
    // Pending: the namespace's replacements, and the other namespaces' pods that replacements
    // preempted and that fit nowhere (`--namespace` narrows `pending` to the namespace's).
    let preempted_pending = run["preempts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["namespace"] != ns && p["replacement"].is_null())
        .count();
    let pending = run["pending"].as_array().map_or(0, Vec::len) + preempted_pending;
    let mut pending_of: BTreeSet<String> = run["pending"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some(p["workload"].as_str()?.rsplit('/').next()?.to_string()))
        .collect();
    let preempted = run["preempts"].as_array().into_iter().flatten();
    pending_of.extend(
        preempted.filter(|p| p["replacement"].is_null()).map(|p| workload_of(p["pod"].as_str().unwrap_or_default())),
    );
    (Result { outcome: run["outcome"].as_str().unwrap_or_default().to_string(), evicted, pending, pending_of }, run)
}

/// The real drain of `node`: kubectl drain with a short timeout, then the pods as they settle.
/// What a scenario drains: its replica's node, or (`--drain-zone`) the nodes of a zone.
struct Drained {
    nodes: Vec<String>,
    zone: Option<String>,
}

fn drain(cp: &ControlPlane, s: &Scenario, drained: &Drained, before: &[(String, String, String)]) -> (Result, String) {
    let mut args: Vec<&str> = vec!["drain"];
    args.extend(drained.nodes.iter().map(String::as_str));
    args.extend(["--ignore-daemonsets", "--delete-emptydir-data", "--timeout=12s"]);
    let out = cp.kubectl(&args);
    let node = drained.nodes.join(", ");
    let text = out.output();
    let outcome = if out.ok() {
        None
    } else if text.contains("declare no controller") || text.contains("more than one PodDisruptionBudget") {
        Some("refused")
    } else if text.contains("Cannot evict pod as it would violate the pod's disruption budget") {
        Some("hangs")
    } else {
        panic!("kubectl drain {node} failed otherwise: {text}");
    };
    // Settled: every replacement Running or Pending for good (kwok runs a placed pod at once; a
    // preemption waits for its victim to go first).
    std::thread::sleep(Duration::from_secs(2));
    // Slower to settle: a preemption waits for its victim to go; a provisioned claim for the
    // provisioner and the scheduler's PreBind; an affinity's replacement may be tried before the
    // evicted pod is gone, and again after a back-off.
    let slow = s.preempt == Some("PreemptLowerPriority")
        || matches!(s.volume, Volume::Provisioned(_) | Volume::ProvisionedZoneDrained)
        || s.affinity.is_some();
    if slow {
        let _ = poll("the replicas Running", Duration::from_secs(30), Duration::from_millis(300), || {
            let running =
                scenario_pods(cp, s).iter().filter(|(n, _, phase)| n.starts_with("app-") && phase == "Running").count();
            if running == s.replicas as usize { Ok(()) } else { Err(format!("{:?}", scenario_pods(cp, s))) }
        });
        std::thread::sleep(Duration::from_secs(1));
    }
    let after = scenario_pods(cp, s);
    let names: BTreeSet<&str> = after.iter().map(|(n, _, _)| n.as_str()).collect();
    let evicted: BTreeSet<String> = before
        .iter()
        .filter(|(n, on, _)| drained.nodes.contains(on) && !names.contains(n.as_str()))
        .map(|(n, _, _)| n.clone())
        .collect();
    let pending_before = before.iter().filter(|(_, _, phase)| phase == "Pending").count();
    let pending = after.iter().filter(|(_, _, phase)| phase == "Pending").count().saturating_sub(pending_before);
    let outcome = outcome.unwrap_or(if pending > 0 { "leaves-pending" } else { "completes" }).to_string();
    let was_pending: BTreeSet<&str> =
        before.iter().filter(|(_, _, phase)| phase == "Pending").map(|(n, _, _)| n.as_str()).collect();
    let pending_of = after
        .iter()
        .filter(|(n, _, phase)| phase == "Pending" && !was_pending.contains(n.as_str()))
        .map(|(n, _, _)| workload_of(n))
        .collect();
    (Result { outcome, evicted, pending, pending_of }, text)
}

fn describe(s: &Scenario) -> String {
    let mut d = format!(
        "{} replicas {} {:?} {}",
        s.name,
        s.replicas,
        s.constraint,
        s.budget.as_ref().map_or("no PDB".to_string(), Value::to_string)
    );
    if s.bare {
        d.push_str(" +bare pod");
    }
    if s.second_pdb {
        d.push_str(" +second PDB");
    }
    if s.not_ready {
        d.push_str(" not Ready");
    }
    if s.guard {
        d.push_str(" +guard's anti-affinity");
    }
    if s.crowd {
        d.push_str(" +another namespace's 600-CPU pod");
    }
    match s.volume {
        Volume::None => {}
        Volume::Local => d.push_str(" +local PV of n1"),
        Volume::Zone(n) => d.push_str(&format!(" +zonal PV, {n} node(s) in its zone")),
        Volume::ZoneDrained => d.push_str(" +zonal PV, its zone (2 nodes) drained"),
        Volume::CsiLimit(n) => d.push_str(&format!(" +CSI volume, limit {n}, other nodes holding 1")),
        Volume::Ephemeral(n) => d.push_str(&format!(" +ephemeral claim, WaitForFirstConsumer, {n} free local PV(s)")),
        Volume::Provisioned(n) => {
            d.push_str(&format!(" +ephemeral claim, provisioner, allowedTopologies: zone of {n} node(s)"))
        }
        Volume::ProvisionedZoneDrained => {
            d.push_str(" +ephemeral claim, provisioner, allowedTopologies: its zone (2 nodes) drained")
        }
    }
    match s.affinity {
        Some(MultiTerm::AllTerms) => d.push_str(" +2-term pod affinity, a pod for each term in zone b, both only in a"),
        Some(MultiTerm::Escape) => d.push_str(" +2-term pod affinity matching itself, a pod for one term only"),
        None => {}
    }
    if let Some(policy) = s.preempt {
        d.push_str(&format!(" priority 1000 ({policy}), other nodes full of priority 0"));
    }
    d
}

/// One scenario: set up, wait, predict, drain, compare. The table row, and the mismatch if any.
fn run(cp: &ControlPlane, s: &Scenario) -> (String, Option<String>) {
    let ns = &s.name;
    if s.crowd {
        cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&crowd(ns, 1))).success();
        let other = format!("{ns}-crowd");
        poll("the crowd Running", WAIT, Duration::from_millis(200), || {
            let running = pods(cp, &other).iter().any(|(_, _, phase)| phase == "Running");
            if running { Ok(()) } else { Err(format!("{:?}", pods(cp, &other))) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let file = cp.root().join(format!("{ns}.yaml"));
    std::fs::write(&file, yaml_file(&objects(s))).expect("scenario file");
    cp.kubectl(&["create", "-f", file.to_str().expect("path")]).success();
    // The replicas and the pods of the affinity's terms.
    let helpers = match s.affinity {
        Some(MultiTerm::AllTerms) => 3,
        Some(MultiTerm::Escape) => 1,
        None => 0,
    };
    let want = s.replicas as usize + helpers;
    poll(&format!("{ns} placed"), WAIT, Duration::from_millis(300), || {
        let p = pods(cp, ns);
        let running = p.iter().filter(|(_, _, phase)| phase == "Running").count();
        if running == want { Ok(()) } else { Err(format!("{p:?}")) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    if s.guard {
        cp.apply(guard(ns)).success();
        poll("the guard Running", WAIT, Duration::from_millis(200), || {
            let running = pods(cp, ns).iter().any(|(n, _, phase)| n.starts_with("guard-") && phase == "Running");
            if running { Ok(()) } else { Err(format!("{:?}", pods(cp, ns))) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    // The pod to drain: the node of the first replica (a bare pod joins it there).
    let placed = pods(cp, ns);
    let replicas = placed.iter().filter(|(n, _, _)| n.starts_with("app-"));
    let node = replicas.map(|(_, on, _)| on.clone()).min().expect("a placed pod");
    if s.preempt.is_some() {
        cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&crowd(ns, 2))).success();
        let other = format!("{ns}-crowd");
        poll("the crowd Running", WAIT, Duration::from_millis(200), || {
            let running = pods(cp, &other).iter().filter(|(_, _, phase)| phase == "Running").count();
            if running == 2 { Ok(()) } else { Err(format!("{:?}", pods(cp, &other))) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    if let Volume::CsiLimit(_) = s.volume {
        let others = (1..=3).map(|i| format!("{ns}-n{i}")).filter(|n| *n != node);
        let fillers: Vec<Value> = others.enumerate().flat_map(|(i, n)| filler(ns, &n, i)).collect();
        cp.kubectl_in(&["create", "-f", "-"], &yaml_file(&fillers)).success();
        poll("the fillers Running", WAIT, Duration::from_millis(200), || {
            let running =
                pods(cp, ns).iter().filter(|(n, _, phase)| n.starts_with("fill-") && phase == "Running").count();
            if running == 2 { Ok(()) } else { Err(format!("{:?}", pods(cp, ns))) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    if s.bare {
        cp.apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": ns},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx:1.27"}]}}))
            .success();
        poll("the bare pod Running", WAIT, Duration::from_millis(200), || {
            let running = pods(cp, ns).iter().any(|(n, _, phase)| n == "bare" && phase == "Running");
            if running { Ok(()) } else { Err(String::new()) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
    // The PDBs' statuses current.
    poll(&format!("{ns}'s budgets observed"), WAIT, Duration::from_millis(200), || {
        let pdbs = cp.kubectl(&["-n", ns, "get", "pdb", "-o", "json"]).success().json();
        let current = pdbs["items"].as_array().into_iter().flatten().all(|p| {
            p["status"]["observedGeneration"] == p["metadata"]["generation"]
                && p["status"]["currentHealthy"].as_i64().is_some()
        });
        if current { Ok(()) } else { Err("not yet".into()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(1500));
    let before = scenario_pods(cp, s);
    let drained = match s.volume {
        Volume::ZoneDrained | Volume::ProvisionedZoneDrained => {
            Drained { nodes: vec![format!("{ns}-n1"), format!("{ns}-n2")], zone: Some(format!("{ns}-a")) }
        }
        _ => Drained { nodes: vec![node.clone()], zone: None },
    };
    let (predicted, replay) = predict(cp, ns, &drained);
    let (real, text) = drain(cp, s, &drained, &before);
    let row = format!(
        "{:<60} {:<8} | predicted {:<15} evicted {} pending {} | real {:<15} evicted {} pending {}{}",
        describe(s),
        node.trim_start_matches(&format!("{ns}-")),
        predicted.outcome,
        predicted.evicted.len(),
        predicted.pending,
        real.outcome,
        real.evicted.len(),
        real.pending,
        if predicted == real { "" } else { "   <-- differs" }
    );
    let mismatch = (predicted != real).then(|| {
        format!("{}: predicted {predicted:?}, real {real:?}\nreplay: {replay}\nkubectl drain: {text}", describe(s))
    });
    (row, mismatch)
}

#[test]
fn drains_end_as_predicted() {
    let scenarios = scenarios();
    assert!(scenarios.len() >= 40, "{} scenarios", scenarios.len());
    let h = Harness::start(Setup { controllers: true, webhooks: &[], ..Default::default() });
    let cp = &h.cp;
    let nodes: Vec<(String, Vec<(String, String)>)> =
        scenarios.iter().flat_map(|s| (1..=3).map(move |i| (format!("{}-n{i}", s.name), node_labels(s, i)))).collect();
    let refs: Vec<(&str, Vec<(&str, &str)>)> =
        nodes.iter().map(|(n, l)| (n.as_str(), l.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())).collect();
    let refs: Vec<(&str, &[(&str, &str)])> = refs.iter().map(|(n, l)| (*n, l.as_slice())).collect();
    let started = Instant::now();
    cp.kwok_nodes(&refs);
    let namespaces: Vec<Value> = scenarios
        .iter()
        .map(|s| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.name}}))
        .collect();
    cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&namespaces)).success();
    eprintln!("[e2e] {} nodes and {} namespaces in {:.1?}", refs.len(), scenarios.len(), started.elapsed());
    let started = Instant::now();
    // Eight at a time: each scenario has its own nodes and namespace. The stand-ins beside them.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let results: Vec<(String, Option<String>)> = std::thread::scope(|scope| {
        let provisioning = scope.spawn(|| stand_ins(cp, &stop));
        let joined: Vec<_> = scenarios
            .chunks(scenarios.len().div_ceil(8))
            .map(|chunk| scope.spawn(move || chunk.iter().map(|s| run(cp, s)).collect::<Vec<_>>()))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join())
            .collect();
        // Stopped before a failed scenario's panic is passed on: the scope waits for it.
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        provisioning.join().expect("the stand-ins");
        joined.into_iter().flat_map(|r| r.expect("a scenario thread")).collect()
    });
    let mut table = String::new();
    for (row, _) in &results {
        let _ = writeln!(table, "{row}");
    }
    eprintln!("[e2e] {} drains predicted and run in {:.1?}:\n{table}", results.len(), started.elapsed());
    let outcomes: BTreeSet<&str> =
        results.iter().filter_map(|(row, _)| row.split("| real ").nth(1)?.split_whitespace().next()).collect();
    eprintln!("[e2e] outcomes seen: {outcomes:?}");
    let wrong: Vec<&String> = results.iter().filter_map(|(_, m)| m.as_ref()).collect();
    assert!(
        wrong.is_empty(),
        "{} of {} drains not as predicted:\n{}",
        wrong.len(),
        results.len(),
        wrong.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n\n")
    );
    for want in ["completes", "leaves-pending", "hangs", "refused"] {
        assert!(outcomes.contains(want), "no scenario {want}: {outcomes:?}");
    }
    // The placement module against the scheduler, on node sets of their own.
    spreads(cp);
}

// --- spreads against the scheduler ---------------------------------------------------------------

/// A node of a spread case: (suffix, labels, tainted, cordoned).
type SpreadNode = (&'static str, Vec<(&'static str, &'static str)>, bool, bool);

/// A node set and a placement rule: how many of `replicas` the scheduler places.
struct SpreadCase {
    name: String,
    /// Nodes: (suffix, labels, tainted, cordoned).
    nodes: Vec<SpreadNode>,
    rule: Value,
    replicas: i64,
    /// Objects made first (other namespaces' pods, claims and their PVs); the Deployments among
    /// them run before the case's replicas are placed.
    extra: Vec<Value>,
    /// The replicas are a StatefulSet's (`app`, Parallel), pod `app-I` mounting claim `data-app-I`
    /// (made first, in `extra`).
    stateful: bool,
}

fn spread_cases() -> Vec<SpreadCase> {
    let hostname = |extra: Value| {
        let mut c = json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "app"}}});
        for (k, v) in extra.as_object().expect("extra") {
            c[k] = v.clone();
        }
        json!({"topologySpreadConstraints": [c]})
    };
    let zone = |extra: Value| {
        let mut c = json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "app"}}});
        for (k, v) in extra.as_object().expect("extra") {
            c[k] = v.clone();
        }
        json!({"topologySpreadConstraints": [c]})
    };
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "app"}}}]}}});
    let plain = |n: usize| (0..n).map(|i| (["a", "b", "c", "d"][i], vec![], false, false)).collect::<Vec<_>>();
    let tainted = vec![("a", vec![], true, false), ("b", vec![], false, false), ("c", vec![], false, false)];
    let cordoned = vec![("a", vec![], false, true), ("b", vec![], false, false), ("c", vec![], false, false)];
    let zoned = vec![
        ("a", vec![("topology.kubernetes.io/zone", "za")], false, false),
        ("b", vec![("topology.kubernetes.io/zone", "za")], false, false),
        ("c", vec![("topology.kubernetes.io/zone", "zb")], false, false),
        ("d", vec![("topology.kubernetes.io/zone", "zb")], false, false),
    ];
    let missing_key = vec![
        ("a", vec![("topology.kubernetes.io/zone", "za")], false, false),
        ("b", vec![("topology.kubernetes.io/zone", "zb")], false, false),
        ("c", vec![], false, false),
    ];
    let cases = [
        (plain(3), hostname(json!({})), 5),
        (tainted.clone(), hostname(json!({})), 5),
        (tainted, hostname(json!({"nodeTaintsPolicy": "Honor"})), 5),
        (cordoned.clone(), hostname(json!({})), 4),
        (cordoned, anti.clone(), 4),
        (plain(3), anti, 5),
        (zoned.clone(), zone(json!({})), 6),
        (zoned.clone(), zone(json!({"minDomains": 3})), 5),
        (zoned.clone(), hostname(json!({"minDomains": 5})), 9),
        (missing_key.clone(), zone(json!({})), 5),
        (missing_key, hostname(json!({})), 5),
        (plain(4), hostname(json!({"maxSkew": 2, "minDomains": 6})), 12),
    ];
    let mut out: Vec<SpreadCase> = cases
        .into_iter()
        .enumerate()
        .map(|(i, (nodes, rule, replicas))| SpreadCase {
            name: format!("sp{i}"),
            nodes,
            rule,
            replicas,
            extra: Vec::new(),
            stateful: false,
        })
        .collect();
    // Volumes and other pods: the placement module reads the whole cluster as a drain does.
    let name = |out: &Vec<SpreadCase>| format!("sp{}", out.len());
    // A StatefulSet whose claims are bound to local PVs: data-app-0..2 of node a, data-app-3 of b.
    // A hostname spread: a takes one, b one; c none (no claim can go there): 2, whatever the order.
    let ns = name(&out);
    let local = |i: usize, node: &str| {
        let affinity = json!({"spec.nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [format!("{ns}-{node}")]}]}]}}});
        bound_claim(&ns, &format!("data-app-{i}"), json!({"hostPath": {"path": format!("/tmp/{ns}-{i}")}}), affinity)
    };
    let extra = [local(0, "a"), local(1, "a"), local(2, "a"), local(3, "b")].concat();
    out.push(SpreadCase {
        name: ns.clone(),
        nodes: plain(3),
        rule: hostname(json!({})),
        replicas: 4,
        extra,
        stateful: true,
    });
    // Zonal PVs: three claims' disks in za, one in zb; a zone spread: za may hold one more than zb,
    // which holds only data-app-3's pod: 3, once the scheduler retries the Pending pods.
    let ns = name(&out);
    let zonal = |i: usize, zone: &str| {
        let labels = json!({"metadata.labels": {"topology.kubernetes.io/zone": zone}});
        bound_claim(&ns, &format!("data-app-{i}"), json!({"hostPath": {"path": format!("/tmp/{ns}-{i}")}}), labels)
    };
    let extra = [zonal(0, "za"), zonal(1, "za"), zonal(2, "za"), zonal(3, "zb")].concat();
    out.push(SpreadCase { name: ns, nodes: zoned.clone(), rule: zone(json!({})), replicas: 4, extra, stateful: true });
    // Another namespace's pod on a, whose required anti-affinity keeps app pods of this namespace
    // off its node (`satisfyExistingPodsAntiAffinity`): a is still a domain of the spread, with 0.
    let ns = name(&out);
    let guard = other_pod(
        &ns,
        "guard",
        "a",
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "namespaces": [ns.clone()], "labelSelector": {"matchLabels": {"app": "app"}}}]}}),
    );
    out.push(SpreadCase {
        name: ns,
        nodes: plain(3),
        rule: hostname(json!({})),
        replicas: 5,
        extra: guard,
        stateful: false,
    });
    // A zone spread and a required pod affinity to another namespace's pod in za: every replica
    // must go to za, and zb, a domain with 0, keeps za at one.
    let ns = name(&out);
    let cache = other_pod(&ns, "cache", "a", json!({}));
    let mut rule = zone(json!({}));
    rule["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "topology.kubernetes.io/zone", "namespaces": [format!("{ns}-cache")],
            "labelSelector": {"matchLabels": {"app": "cache"}}}]}});
    out.push(SpreadCase { name: ns, nodes: zoned, rule, replicas: 4, extra: cache, stateful: false });
    out
}

/// A namespace `CASE-NAME` and its Deployment `NAME` of one pod labelled `app: NAME`, on node
/// `CASE-NODE`, with `affinity`.
fn other_pod(case: &str, name: &str, node: &str, affinity: Value) -> Vec<Value> {
    let ns = format!("{case}-{name}");
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": format!("{case}-{node}")}, "affinity": affinity,
                    "containers": [{"name": name, "image": "nginx:1.27"}]}}}}),
    ]
}

fn spread_deployment(c: &SpreadCase) -> Value {
    let mut spec =
        json!({"nodeSelector": {"scenario": c.name}, "containers": [{"name": "app", "image": "nginx:1.27"}]});
    for (k, v) in c.rule.as_object().expect("rule") {
        spec[k] = v.clone();
    }
    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app", "namespace": c.name},
        "spec": {"replicas": c.replicas, "selector": {"matchLabels": {"app": "app"}},
            "template": {"metadata": {"labels": {"app": "app"}}, "spec": spec}}});
    if c.stateful {
        d["kind"] = json!("StatefulSet");
        d["spec"]["serviceName"] = json!("app");
        d["spec"]["podManagementPolicy"] = json!("Parallel");
        d["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}}}]);
    }
    d
}

/// How many replicas ha-guard's placement module places on the cluster as the audit reads it.
fn predicted_placed(cp: &ControlPlane, rt: &tokio::runtime::Runtime, c: &SpreadCase) -> usize {
    use ha_guard::core::view::placement::Incoming;
    use std::sync::Arc;
    let client = cp.kube_client(rt);
    // The whole cluster and its storage, as a drain reads it.
    let options = ha_guard::audit::read::ReadOptions { storage: true, ..Default::default() };
    let progress = ha_guard::audit::progress::Progress::new(false);
    let cluster = rt.block_on(ha_guard::audit::read::read(&client, &options, &progress)).expect("read the cluster");
    assert_eq!(cluster.storage_unread, None, "the storage read");
    let d = spread_deployment(c);
    let spec: k8s_openapi::api::core::v1::PodSpec =
        serde_json::from_value(d["spec"]["template"]["spec"].clone()).expect("a pod spec");
    let labels: std::collections::BTreeMap<String, String> =
        serde_json::from_value(d["spec"]["template"]["metadata"]["labels"].clone()).expect("labels");
    let claims: Vec<Arc<[Arc<str>]>> = (0..c.replicas)
        .map(|i| match c.stateful {
            true => Arc::from([Arc::from(format!("data-app-{i}").as_str())]),
            false => Arc::default(),
        })
        .collect();
    let incoming = Incoming { namespace: &c.name, labels: &labels, spec: &spec };
    ha_guard::core::view::replay::place_new(&cluster.index, incoming, &claims)
}

fn spreads(cp: &ControlPlane) {
    let cases = spread_cases();
    let mut nodes: Vec<(String, Vec<(&str, String)>)> = Vec::new();
    for c in &cases {
        for (suffix, labels, _, _) in &c.nodes {
            let mut l: Vec<(&str, String)> = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
            l.push(("scenario", c.name.clone()));
            nodes.push((format!("{}-{suffix}", c.name), l));
        }
    }
    let refs: Vec<(&str, Vec<(&str, &str)>)> =
        nodes.iter().map(|(n, l)| (n.as_str(), l.iter().map(|(k, v)| (*k, v.as_str())).collect())).collect();
    let refs: Vec<(&str, &[(&str, &str)])> = refs.iter().map(|(n, l)| (*n, l.as_slice())).collect();
    cp.kwok_nodes(&refs);
    for c in &cases {
        for (suffix, _, tainted, cordoned) in &c.nodes {
            let node = format!("{}-{suffix}", c.name);
            if *tainted {
                cp.kubectl(&["taint", "node", &node, "dedicated=db:NoSchedule"]).success();
            }
            if *cordoned {
                cp.kubectl(&["cordon", &node]).success();
            }
        }
        cp.namespace(&c.name, &[]);
        if !c.extra.is_empty() {
            cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&c.extra)).success();
        }
    }
    // The other namespaces' pods running before anything is predicted or placed.
    for c in &cases {
        for d in c.extra.iter().filter(|o| o["kind"] == "Deployment") {
            let ns = d["metadata"]["namespace"].as_str().expect("a namespace");
            poll(&format!("{ns}'s pod Running"), WAIT, Duration::from_millis(300), || {
                let running = pods(cp, ns).iter().any(|(_, _, phase)| phase == "Running");
                if running { Ok(()) } else { Err(format!("{:?}", pods(cp, ns))) }
            })
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // The node lifecycle controller adds the cordon taint: wait for it (nodeTaintsPolicy reads it).
    std::thread::sleep(Duration::from_secs(2));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let mut table = String::new();
    let mut wrong = Vec::new();
    for c in &cases {
        let predicted = predicted_placed(cp, &rt, c);
        cp.apply(spread_deployment(c)).success();
        let mut last = (usize::MAX, 0);
        let mut stable = 0;
        let real = poll(&format!("{} settled", c.name), WAIT, Duration::from_millis(500), || {
            let p = pods(cp, &c.name);
            let running = p.iter().filter(|(_, _, phase)| phase == "Running").count();
            let pending = p.iter().filter(|(_, _, phase)| phase == "Pending").count();
            if running + pending == c.replicas as usize && (running, pending) == last {
                stable += 1;
            } else {
                stable = 0;
                last = (running, pending);
            }
            if stable >= 4 { Ok(running) } else { Err(format!("{running} running, {pending} pending")) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let nodes: Vec<String> = c
            .nodes
            .iter()
            .map(|(s, l, t, k)| {
                format!(
                    "{s}{}{}{}",
                    if l.is_empty() { "" } else { "(zone)" },
                    if *t { "(tainted)" } else { "" },
                    if *k { "(cordoned)" } else { "" }
                )
            })
            .collect();
        let mut rule = c.rule.to_string();
        if c.stateful {
            rule.push_str(" +StatefulSet claims bound to PVs");
        }
        if let Some(other) = c.extra.iter().find(|o| o["kind"] == "Deployment") {
            rule.push_str(&format!(" +pod {}/{}", other["metadata"]["namespace"], other["metadata"]["name"]));
        }
        let _ = writeln!(
            table,
            "{:<5} nodes {:<40} {:<110} replicas {:>2} | ha-guard places {:>2} | scheduler {:>2}{}",
            c.name,
            nodes.join(" "),
            rule,
            c.replicas,
            predicted,
            real,
            if predicted == real { "" } else { "   <-- differs" }
        );
        if predicted != real {
            wrong.push(format!("{}: ha-guard places {predicted}, the scheduler {real}", c.name));
        }
    }
    eprintln!("[e2e] replicas placed, ha-guard and kube-scheduler:\n{table}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

//! End-to-end: ha-guard's live view (`src/live.rs`, `--cluster live|auto`) against a real
//! kube-apiserver. Objects are created, updated and deleted through the API with kube-rs (the
//! same client library ha-guard watches with, but a separate client) and observed twice: in
//! ha-guard's cache gauges (`ha_guard_cache_objects{kind}`) and in its decisions on writes that
//! depend on them (kubectl `--dry-run=server`, through the registered webhooks).
//!
//! ha-guard reaches the apiserver through a TCP relay the test opens and closes, so it can be
//! started before "the apiserver is up" and can lose it for a while.
//!
//! Consistency is eventual (see `src/live.rs`): an object counted in the gauges is in the view
//! (both read the same index), so a decision checked after the gauge moved needs no retry; an
//! update does not move a gauge, so its effect is polled for, bounded.

#[path = "support/mod.rs"]
mod support;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

/// A kube-rs client of the control plane (admin), blocking on a runtime of its own.
struct Kube {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Kube {
    fn new(cp: &ControlPlane) -> Kube {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let client = cp.kube_client(&rt);
        Kube { rt, client }
    }

    fn api(&self, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
        let ar = match kind {
            "Deployment" => ApiResource::erase::<Deployment>(&()),
            "StatefulSet" => ApiResource::erase::<StatefulSet>(&()),
            "PodDisruptionBudget" => ApiResource::erase::<PodDisruptionBudget>(&()),
            "HorizontalPodAutoscaler" => ApiResource::erase::<HorizontalPodAutoscaler>(&()),
            "PersistentVolumeClaim" => ApiResource::erase::<PersistentVolumeClaim>(&()),
            "Node" => ApiResource::erase::<Node>(&()),
            "Namespace" => ApiResource::erase::<Namespace>(&()),
            "Service" => ApiResource::erase::<Service>(&()),
            "ValidatingWebhookConfiguration" => ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
            "CustomResourceDefinition" => ApiResource::erase::<CustomResourceDefinition>(&()),
            "APIService" => ApiResource {
                group: "apiregistration.k8s.io".into(),
                version: "v1".into(),
                api_version: "apiregistration.k8s.io/v1".into(),
                kind: "APIService".into(),
                plural: "apiservices".into(),
            },
            "ScaledObject" => ApiResource {
                group: "keda.sh".into(),
                version: "v1alpha1".into(),
                api_version: "keda.sh/v1alpha1".into(),
                kind: "ScaledObject".into(),
                plural: "scaledobjects".into(),
            },
            other => panic!("no API for {other}"),
        };
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    fn kind_ns_name(obj: &Value) -> (String, Option<String>, String) {
        (
            obj["kind"].as_str().expect("kind").to_string(),
            obj["metadata"]["namespace"].as_str().map(str::to_string),
            obj["metadata"]["name"].as_str().expect("name").to_string(),
        )
    }

    /// POST; the API's answer (a refusal is `Err` with the apiserver's Status).
    fn try_create(&self, obj: &Value) -> Result<DynamicObject, kube::Error> {
        let (kind, ns, _) = Self::kind_ns_name(obj);
        let o: DynamicObject = serde_json::from_value(obj.clone()).expect("an object");
        self.rt.block_on(self.api(&kind, ns.as_deref()).create(&PostParams::default(), &o))
    }

    #[track_caller]
    fn create(&self, obj: &Value) {
        if let Err(e) = self.try_create(obj) {
            panic!("creating {}: {e}", obj["metadata"]["name"]);
        }
    }

    /// JSON merge patch.
    #[track_caller]
    fn patch(&self, kind: &str, ns: Option<&str>, name: &str, patch: Value) {
        let result = self.rt.block_on(self.api(kind, ns).patch(name, &PatchParams::default(), &Patch::Merge(&patch)));
        if let Err(e) = result {
            panic!("patching {kind} {name}: {e}");
        }
    }

    #[track_caller]
    fn delete(&self, kind: &str, ns: Option<&str>, name: &str) {
        let result = self.rt.block_on(self.api(kind, ns).delete(name, &DeleteParams::default()));
        if let Err(e) = result {
            panic!("deleting {kind} {name}: {e}");
        }
    }
}

/// Creates `obj` through the API and waits until ha-guard's view counts it.
fn create(k: &Kube, hg: &HaGuard, obj: &Value) {
    hg.created(obj["kind"].as_str().unwrap(), 1, || k.create(obj));
}

/// Deletes an object through the API and waits until ha-guard's view no longer counts it.
fn delete(k: &Kube, hg: &HaGuard, kind: &str, ns: Option<&str>, name: &str) {
    let before = hg.cache_objects(kind);
    k.delete(kind, ns, name);
    hg.wait_cache(kind, &format!("<= {}", before - 1), |n| n < before);
}

/// kubectl's answer to a server-side dry-run of `obj` (through both webhooks; nothing stored).
fn dry_run(cp: &ControlPlane, obj: &Value) -> Kubectl {
    cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &obj.to_string())
}

/// Whether a dry-run of `obj` is refused naming `rule` (true) or admitted (false; anything else
/// fails).
fn refused(cp: &ControlPlane, obj: &Value, rule: &str) -> bool {
    let out = dry_run(cp, obj);
    let refused = !out.ok() && out.stderr.contains(&format!("[{rule}] "));
    assert!(refused || out.ok(), "neither refused for [{rule}] nor admitted: {}{}", out.stdout, out.stderr);
    refused
}

/// Polls until a dry-run of `obj` is refused naming `rule` (`want` true) or admitted (`false`).
#[track_caller]
fn eventually_refused(cp: &ControlPlane, obj: &Value, rule: &str, want: bool) {
    poll(
        &format!("a dry-run of {} {} for [{rule}]", obj["metadata"]["name"], if want { "refused" } else { "admitted" }),
        WAIT,
        Duration::from_millis(100),
        || if refused(cp, obj, rule) == want { Ok(()) } else { Err(String::new()) },
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn live_view_follows_the_apiserver() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    cp.nodes(&["node-a", "node-b", "node-c"]);
    let target: std::net::SocketAddr =
        cp.server().trim_start_matches("https://").parse().expect("the apiserver's address");
    let mut relay = Relay::new(target);
    let relayed = relay.kubeconfig(&cp.kubeconfig(), &cp.root().join("relayed.kubeconfig"));
    let k = Kube::new(&cp);
    let fail_open = FailOpen::start(&cp);

    // ha-guard starts while its apiserver is not reachable.
    let mut hg = HaGuard::spawn_with(&cp, "ha-guard", &relayed).unwrap_or_else(|e| panic!("ha-guard: {e}"));
    let log = hg.log_path();
    let mut steps = Steps::new(move || format!("ha-guard log (last lines):\n{}", tail(&log, 12)));

    steps.run("readiness waits for every watcher", || readiness(&mut hg, &mut relay));
    register(&cp, &hg, &[Webhooks::Mutating, Webhooks::Validating])
        .unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(20)));
    create(&k, &hg, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "live"}}));

    steps.run("pdbs come and go", || pdbs(&cp, &k, &hg));
    steps.run("deployments come, change and go", || deployments(&cp, &k, &hg));
    steps.run("statefulsets come and go", || statefulsets(&cp, &k, &hg));
    steps.run("hpas come, change and go", || hpas(&cp, &k, &hg));
    steps.run("pvcs come and go", || pvcs(&cp, &k, &hg));
    steps.run("nodes come, change and go", || nodes(&cp, &k, &hg));
    steps.run("zone labels on nodes decide spread-zone-missing", || zones(&cp, &k));
    steps.run("services and webhook configurations come, change and go", || webhooks(&cp, &k, &hg));
    steps.run("aggregated APIs: the APIService, its Service and its workload at admission", || {
        aggregated_apis(&cp, &k, &hg)
    });
    steps.run("keda: no CRD is none; a CRD installed later is watched", || keda(&cp, &k, &hg));
    steps.run("namespaces come, change and go", || namespaces(&cp, &k, &hg));
    steps.run("an apiserver outage keeps the last state, then catches up", || outage(&cp, &k, &hg, &mut relay));
    steps.run("--cluster auto finds the kubeconfig; live without one fails", || cluster_modes(&cp));
    steps.run("the shipped RBAC: ready only once every kind can be watched", || shipped_rbac(&cp));
    steps.run("no webhook call failed or failed open", || fail_open.finish(&cp));
    steps.finish();
}

/// `/readyz` is 503 until every watcher has listed its kind, then 200, and
/// `ha_guard_cache_synced{kind}` is 1 for each watched kind (ScaledObjects too: this apiserver does
/// not serve them, which counts as synced and empty).
fn readiness(hg: &mut HaGuard, relay: &mut Relay) {
    // Observe the first answers for a while: the apiserver is not reachable, so none is 200.
    let started = std::time::Instant::now();
    let mut answers = Vec::new();
    while started.elapsed() < Duration::from_secs(3) {
        if let Ok((code, body)) = hg.get("/readyz") {
            answers.push((code, body.trim().to_string()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!answers.is_empty(), "ha-guard never answered /readyz:\n{}", hg.log_tail(20));
    assert!(answers.iter().all(|(code, _)| *code == 503), "not ready without its apiserver: {answers:?}");
    assert_eq!(answers.last().map(|(_, b)| b.as_str()), Some("cluster caches not synced"));
    assert!(hg.running(), "ha-guard keeps running without its apiserver:\n{}", hg.log_tail(20));
    assert_eq!(hg.get("/healthz").expect("/healthz").0, 200, "alive while not ready");
    let m = hg.metrics();
    for kind in WATCHED_KINDS {
        assert_eq!(m.get("ha_guard_cache_synced", &[("kind", kind)]), Some(0.0), "{kind} not synced yet");
    }

    relay.open().unwrap_or_else(|e| panic!("relay: {e}"));
    hg.wait_ready(WAIT).unwrap_or_else(|e| panic!("{e}"));
    let m = hg.metrics();
    let synced = m.all("ha_guard_cache_synced", &[]);
    let mut kinds: Vec<&str> = synced.iter().map(|(l, _)| l["kind"].as_str()).collect();
    kinds.sort();
    let mut want = WATCHED_KINDS.to_vec();
    want.sort();
    assert_eq!(kinds, want, "one ha_guard_cache_synced per watched kind");
    assert!(synced.iter().all(|(_, v)| *v == 1.0), "all synced once ready: {synced:?}");
    assert_eq!(m.get("ha_guard_cache_objects", &[("kind", "Node")]), Some(3.0), "the three nodes were listed");
    assert!(
        m.get("ha_guard_cache_objects", &[("kind", "Namespace")]).unwrap_or(0.0) >= 4.0,
        "default, kube-system, ..."
    );
}

/// A PDB that exists makes a Deployment write be refused; changed, it allows it; deleted, too.
fn pdbs(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    let solo = deployment("live", "solo", 1);
    assert!(!refused(cp, &solo, "pdb-blocks-eviction"));
    create(k, hg, &pdb("live", "solo", "solo", json!({"minAvailable": 1})));
    assert!(refused(cp, &solo, "pdb-blocks-eviction"), "the PDB in the view blocks the Deployment");
    // The same refusal through kube-rs: a 403 with the rule in the message.
    match k.try_create(&solo) {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(status.message.contains("[pdb-blocks-eviction]"), "{status:?}");
        }
        other => panic!("expected a 403 from the webhook, got {other:?}"),
    }
    k.patch("PodDisruptionBudget", Some("live"), "solo", json!({"spec": {"minAvailable": null, "maxUnavailable": 1}}));
    eventually_refused(cp, &solo, "pdb-blocks-eviction", false);
    k.patch("PodDisruptionBudget", Some("live"), "solo", json!({"spec": {"maxUnavailable": null, "minAvailable": 1}}));
    eventually_refused(cp, &solo, "pdb-blocks-eviction", true);
    delete(k, hg, "PodDisruptionBudget", Some("live"), "solo");
    assert!(!refused(cp, &solo, "pdb-blocks-eviction"), "the deleted PDB left the view");
}

/// A Deployment in the view decides a PDB write; scaled down it blocks it; deleted, the PDB
/// covers nothing.
fn deployments(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    let budget = pdb("live", "web", "web", json!({"minAvailable": 1}));
    create(k, hg, &spread_out(deployment("live", "web", 2)));
    assert!(!refused(cp, &budget, "pdb-blocks-eviction"), "two replicas leave one disruption");
    k.patch("Deployment", Some("live"), "web", json!({"spec": {"replicas": 1}}));
    eventually_refused(cp, &budget, "pdb-blocks-eviction", true);
    delete(k, hg, "Deployment", Some("live"), "web");
    // Deleted, it no longer makes the PDB block anything (the PDB covers nothing: an absence,
    // which a CREATE does not assert).
    assert!(!refused(cp, &budget, "pdb-blocks-eviction"), "the deleted Deployment left the view");
}

/// StatefulSets are workloads too.
fn statefulsets(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    let mut sts = deployment("live", "db", 1);
    sts["kind"] = json!("StatefulSet");
    sts["spec"]["serviceName"] = json!("db");
    let budget = pdb("live", "db", "db", json!({"minAvailable": 1}));
    create(k, hg, &sts);
    dry_run(cp, &budget).denied(&["pdb-blocks-eviction"]).shows(&["StatefulSet db (replicas 1)"]);
    delete(k, hg, "StatefulSet", Some("live"), "db");
    assert!(!refused(cp, &budget, "pdb-blocks-eviction"));
}

/// An HPA's minReplicas is the workload's floor.
fn hpas(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    create(k, hg, &spread_out(deployment("live", "api", 1)));
    let budget = pdb("live", "api", "api", json!({"minAvailable": 1}));
    assert!(refused(cp, &budget, "pdb-blocks-eviction"));
    create(k, hg, &hpa("live", "api", "api", 2, 4));
    assert!(!refused(cp, &budget, "pdb-blocks-eviction"), "the HPA's floor of 2 leaves one disruption");
    k.patch("HorizontalPodAutoscaler", Some("live"), "api", json!({"spec": {"minReplicas": 1}}));
    eventually_refused(cp, &budget, "pdb-blocks-eviction", true);
    k.patch("HorizontalPodAutoscaler", Some("live"), "api", json!({"spec": {"minReplicas": 3}}));
    eventually_refused(cp, &budget, "pdb-blocks-eviction", false);
    delete(k, hg, "HorizontalPodAutoscaler", Some("live"), "api");
    assert!(refused(cp, &budget, "pdb-blocks-eviction"), "without the HPA the floor is the Deployment's 1 replica");
}

/// A ReadWriteOnce claim in the view refuses a second replica mounting it.
fn pvcs(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    let two = mounting(spread_out(deployment("live", "store", 2)), "store-data");
    assert!(!refused(cp, &two, "rwo-volume-multi-replica"), "an unknown claim is not judged");
    create(k, hg, &pvc("live", "store-data", "ReadWriteOnce"));
    dry_run(cp, &two).denied(&["rwo-volume-multi-replica"]).shows(&["store-data"]);
    // The apiserver gives every claim the kubernetes.io/pvc-protection finalizer, which the PVC
    // protection controller removes once no pod uses the claim. That controller does not run
    // here: a deleted claim stays (terminating, and still in the view) until the test does its job.
    let before = hg.cache_objects("PersistentVolumeClaim");
    k.delete("PersistentVolumeClaim", Some("live"), "store-data");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(hg.cache_objects("PersistentVolumeClaim"), before, "a terminating claim is still there");
    k.patch("PersistentVolumeClaim", Some("live"), "store-data", json!({"metadata": {"finalizers": null}}));
    hg.wait_cache("PersistentVolumeClaim", &format!("< {before}"), |n| n < before);
    assert!(!refused(cp, &two, "rwo-volume-multi-replica"));
    create(k, hg, &pvc("live", "store-data", "ReadWriteMany"));
    assert!(!refused(cp, &two, "rwo-volume-multi-replica"), "a ReadWriteMany claim takes many pods");
}

/// The schedulable nodes decide spread-unsatisfiable: deleted, cordoned and added nodes count.
fn nodes(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "per-node"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    let three = pod(deployment("live", "per-node", 3), anti);
    let warned = |cp: &ControlPlane| {
        dry_run(cp, &three).success().warnings().iter().find(|w| w.starts_with("[spread-unsatisfiable] ")).cloned()
    };
    assert_eq!(warned(cp), None, "three nodes take three replicas");

    delete(k, hg, "Node", None, "node-c");
    let w = warned(cp).expect("two nodes cannot take three replicas, one per node");
    assert!(w.contains("2 schedulable nodes"), "{w}");
    create(
        k,
        hg,
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-c", "labels": {"kubernetes.io/hostname": "node-c"}}}),
    );
    // A new node carries the not-ready taint until its kubelet reports Ready: not schedulable.
    assert!(warned(cp).is_some(), "a not-ready node takes no pods");
    k.patch("Node", None, "node-c", json!({"spec": {"taints": null}}));
    poll("the untainted node counts", WAIT, Duration::from_millis(100), || warned(cp).map_or(Ok(()), Err))
        .unwrap_or_else(|e| panic!("{e}"));
    k.patch("Node", None, "node-b", json!({"spec": {"unschedulable": true}}));
    poll("the cordoned node does not count", WAIT, Duration::from_millis(100), || warned(cp).ok_or_else(String::new))
        .unwrap_or_else(|e| panic!("{e}"));
    k.patch("Node", None, "node-b", json!({"spec": {"unschedulable": null}}));
    poll("the uncordoned node counts", WAIT, Duration::from_millis(100), || warned(cp).map_or(Ok(()), Err))
        .unwrap_or_else(|e| panic!("{e}"));

    // No schedulable node at all: nothing to count against, so nothing is claimed (an empty or
    // scaled-to-zero cluster is no bound). One node first, so that the silence is the view's.
    let cordon = |names: &[&str], on: bool| {
        for n in names {
            k.patch("Node", None, n, json!({"spec": {"unschedulable": if on { json!(true) } else { Value::Null }}}));
        }
    };
    let says = |what: &'static str| {
        move || warned(cp).filter(|w| w.contains(what)).map(|_| ()).ok_or_else(|| format!("no warning with {what:?}"))
    };
    cordon(&["node-a", "node-b"], true);
    poll("one schedulable node", WAIT, Duration::from_millis(100), says("1 schedulable nodes"))
        .unwrap_or_else(|e| panic!("{e}"));
    cordon(&["node-c"], true);
    poll("no schedulable node: no finding", WAIT, Duration::from_millis(100), || warned(cp).map_or(Ok(()), Err))
        .unwrap_or_else(|e| panic!("{e}"));
    cordon(&["node-a", "node-b"], false);
    poll("two schedulable nodes", WAIT, Duration::from_millis(100), says("2 schedulable nodes"))
        .unwrap_or_else(|e| panic!("{e}"));
    cordon(&["node-c"], false);
    poll("three again", WAIT, Duration::from_millis(100), || warned(cp).map_or(Ok(()), Err))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Nodes in two zones make a multi-replica Deployment without a zone spread warned; a zone
/// spread, or nodes left in one zone, do not.
fn zones(cp: &ControlPlane, k: &Kube) {
    let web = spread_out(deployment("live", "zonal", 3));
    let warned = |cp: &ControlPlane, d: &Value| {
        dry_run(cp, d).success().warnings().iter().find(|w| w.starts_with("[spread-zone-missing] ")).cloned()
    };
    assert_eq!(warned(cp, &web), None, "nodes without a zone label: no zones known");
    let zone = |node: &str, zone: Value| {
        k.patch("Node", None, node, json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}}))
    };
    zone("node-a", json!("zone-1"));
    zone("node-b", json!("zone-2"));
    let w = poll("two zones are seen", WAIT, Duration::from_millis(100), || warned(cp, &web).ok_or_else(String::new))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        w.starts_with(
            "[spread-zone-missing] spec.template.spec.topologySpreadConstraints: Deployment zonal (replicas 3) runs \
             at least 3 replicas and its pods can be scheduled in 2 zones (zone-1, zone-2)"
        ),
        "{w}"
    );
    assert!(
        w.contains("Fix: add a topologySpreadConstraint {maxSkew: 1, topologyKey: topology.kubernetes.io/zone"),
        "{w}"
    );
    let mut spread = web.clone();
    spread["spec"]["template"]["spec"]["topologySpreadConstraints"].as_array_mut().expect("spreads").push(json!({
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": "zonal"}}}));
    assert_eq!(warned(cp, &spread), None, "a zone spread");
    assert_eq!(warned(cp, &deployment("live", "zonal", 1)).as_deref(), None, "one replica");
    // A cordoned node's zone does not count.
    k.patch("Node", None, "node-b", json!({"spec": {"unschedulable": true}}));
    poll("the cordoned zone does not count", WAIT, Duration::from_millis(100), || warned(cp, &web).map_or(Ok(()), Err))
        .unwrap_or_else(|e| panic!("{e}"));
    k.patch("Node", None, "node-b", json!({"spec": {"unschedulable": null}}));
    poll("the uncordoned zone counts", WAIT, Duration::from_millis(100), || warned(cp, &web).ok_or_else(String::new))
        .unwrap_or_else(|e| panic!("{e}"));
    zone("node-a", Value::Null);
    zone("node-b", Value::Null);
    poll("zones gone", WAIT, Duration::from_millis(100), || warned(cp, &web).map_or(Ok(()), Err))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A fail-closed webhook configuration and its Service in the view make the write of the workload
/// behind them warned; made fail-open, or deleted, they do not.
fn webhooks(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    const RULE: &str = "[webhook-fail-closed-unavailable] ";
    let backend = deployment("live", "hook", 1);
    let warned = |cp: &ControlPlane| dry_run(cp, &backend).success().warnings().iter().any(|w| w.starts_with(RULE));
    // A namespace the configurations select, made before them: a fail-closed webhook that matches
    // no namespace intercepts nothing today and is not flagged.
    create(
        k,
        hg,
        &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "webhook-target", "labels": {E2E_TARGET_LABEL: "true"}}}),
    );
    create(k, hg, &backend);
    create(k, hg, &service("live", "hook-webhook", "hook"));
    assert!(!warned(cp), "no webhook calls the Service yet");
    create(k, hg, &fail_closed_webhooks("e2e-live", "live", "hook-webhook"));
    assert!(warned(cp), "the configuration in the view");
    k.patch(
        "ValidatingWebhookConfiguration",
        None,
        "e2e-live",
        json!({"webhooks": [{
        "name": "e2e-live.e2e.ha-guard.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Ignore",
        "clientConfig": {"service": {"namespace": "live", "name": "hook-webhook", "path": "/validate"}},
        "namespaceSelector": {"matchLabels": {E2E_TARGET_LABEL: "true"}}}]}),
    );
    poll("the fail-open version is seen", WAIT, Duration::from_millis(100), || {
        if warned(cp) { Err(String::new()) } else { Ok(()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    delete(k, hg, "ValidatingWebhookConfiguration", None, "e2e-live");
    create(k, hg, &fail_closed_webhooks("e2e-live", "live", "hook-webhook"));
    assert!(warned(cp));
    // The Service's selector changed to pods nobody runs: nothing behind it to judge.
    k.patch("Service", Some("live"), "hook-webhook", json!({"spec": {"selector": {"app": "nobody"}}}));
    poll("the new selector is seen", WAIT, Duration::from_millis(100), || {
        if warned(cp) { Err(String::new()) } else { Ok(()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    delete(k, hg, "Service", Some("live"), "hook-webhook");
    delete(k, hg, "ValidatingWebhookConfiguration", None, "e2e-live");
}

/// `apiservice-unavailable` at admission (issue 51, Build 6), whichever of the three objects is
/// written second: the APIService's own write is warned (the Service and its one replica in the
/// view); once it is stored (watched: the cache counts it), the writes of the workload behind it
/// and of its Service are warned too, and stop being once the floor is 2, the selector picks
/// nothing, or the APIService is gone. Deleted at the end: an aggregated API that no pod serves
/// fails discovery of its group and keeps namespaces from being deleted.
fn aggregated_apis(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    const RULE: &str = "[apiservice-unavailable] ";
    const NAME: &str = "v1beta1.visibility.e2e.ha-guard.io";
    let said = format!("APIService/{NAME} serves visibility.e2e.ha-guard.io/v1beta1 through Service live/visibility");
    let warning =
        |out: Kubectl| -> Option<String> { out.success().warnings().into_iter().find(|w| w.starts_with(RULE)) };
    let backend = deployment("live", "visibility", 1);
    let svc = service("live", "visibility", "visibility");
    let api = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": NAME},
        "spec": {"group": "visibility.e2e.ha-guard.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                 "versionPriority": 100, "insecureSkipTLSVerify": true,
                 "service": {"namespace": "live", "name": "visibility"}}});
    create(k, hg, &backend);
    create(k, hg, &svc);
    assert_eq!(warning(dry_run(cp, &backend)), None, "no APIService is served by it yet");
    // The APIService's write: the Service and its one replica are in the view.
    let on_api = warning(dry_run(cp, &api)).unwrap_or_else(|| panic!("the APIService's write is warned"));
    for part in [
        format!("{RULE}spec.service: {said}"),
        "selects only Deployment visibility (replicas 1): 1 replica at its floor".to_string(),
        "every namespace being deleted stays Terminating".to_string(),
    ] {
        assert!(on_api.contains(&part), "{part:?} in: {on_api}");
    }
    create(k, hg, &api);
    // The workload's write, then the Service's: the stored APIService is judged through them.
    let on_workload = warning(dry_run(cp, &backend)).unwrap_or_else(|| panic!("the workload's write is warned"));
    assert!(on_workload.starts_with(&format!("{RULE}spec.replicas: {said}")), "{on_workload}");
    assert_eq!(warning(dry_run(cp, &merge(backend.clone(), json!({"spec": {"replicas": 2}})))), None, "a floor of 2");
    let on_service = warning(dry_run(cp, &svc)).unwrap_or_else(|| panic!("the Service's write is warned"));
    assert!(on_service.starts_with(&format!("{RULE}spec.selector: {said}")), "{on_service}");
    let elsewhere = merge(svc.clone(), json!({"spec": {"selector": {"app": "nobody"}}}));
    assert_eq!(warning(dry_run(cp, &elsewhere)), None, "a selector of nothing the view holds: not known at admission");
    // A scale write through the scale subresource is judged as the workload's.
    let scaled = cp.kubectl(&["-n", "live", "scale", "deployment", "visibility", "--replicas=0", "--dry-run=server"]);
    assert!(warning(scaled).is_some_and(|w| w.contains("(replicas 0): no replica at its floor")), "a scale to 0");
    delete(k, hg, "APIService", None, NAME);
    assert_eq!(warning(dry_run(cp, &backend)), None, "the APIService is gone from the view");
    delete(k, hg, "Service", Some("live"), "visibility");
    delete(k, hg, "Deployment", Some("live"), "visibility");
}

/// Without the KEDA CRD the ScaledObject watch is synced and empty (readiness did not wait for it);
/// once the CRD is installed the watch lists it (within its backoff), a ScaledObject's minimum
/// is its target's floor, and ScaledObject writes reach the webhook.
fn keda(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    let m = hg.metrics();
    assert_eq!(m.get("ha_guard_cache_synced", &[("kind", "ScaledObject")]), Some(1.0), "{m:?}");
    assert_eq!(m.get("ha_guard_cache_objects", &[("kind", "ScaledObject")]), Some(0.0), "{m:?}");
    let log = std::fs::read_to_string(hg.log_path()).unwrap_or_default();
    assert_eq!(log.matches("not served by the cluster").count(), 1, "said once: {}", hg.log_tail(20));

    k.create(&scaled_object_crd());
    let crd_installed = std::time::Instant::now();
    poll("the CRD is established", WAIT, Duration::from_millis(200), || {
        let out = cp.kubectl(&["get", "scaledobjects", "-A"]);
        if out.ok() { Ok(()) } else { Err(out.output()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    create(k, hg, &spread_out(deployment("live", "scaled", 1)));
    let budget = pdb("live", "scaled", "scaled", json!({"minAvailable": 1}));
    assert!(refused(cp, &budget, "pdb-blocks-eviction"), "floor 1");
    // Created directly: the watch has to list the new resource first (its backoff after 404s is
    // at most 30 s), then the object reaches the view.
    let so = scaled_object("live", "scaled", "scaled", 2, 6);
    k.create(&so);
    hg.wait_cache("ScaledObject", "1 after the CRD came", |n| n >= 1);
    eprintln!(
        "[e2e] a ScaledObject created after the CRD reached the view {:.1?} after the CRD",
        crd_installed.elapsed()
    );
    assert!(!refused(cp, &budget, "pdb-blocks-eviction"), "the ScaledObject's minimum of 2 leaves one disruption");
    // A ScaledObject write is judged as an HPA write is: its minimum of 1 makes the PDB block.
    create(k, hg, &budget);
    let lower = scaled_object("live", "scaled", "scaled", 1, 6);
    let out = dry_run(cp, &lower);
    out.denied(&["pdb-blocks-eviction"]).shows(&["spec.minReplicaCount", "ScaledObject scaled min 1 max 6"]);
}

/// Namespace labels decide the mode; a deleted namespace leaves the view.
fn namespaces(cp: &ControlPlane, k: &Kube, hg: &HaGuard) {
    create(k, hg, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "moody"}}));
    let bad = slow_prestop(deployment("moody", "drainer", 1));
    dry_run(cp, &bad).denied(&["prestop-exceeds-grace"]);
    k.patch("Namespace", None, "moody", json!({"metadata": {"labels": {"ha-guard.io/mode": "warn"}}}));
    poll("mode warn is seen", WAIT, Duration::from_millis(100), || {
        let out = dry_run(cp, &bad);
        if out.ok() { Ok(out) } else { Err(out.stderr) }
    })
    .unwrap_or_else(|e| panic!("{e}"))
    .warns(&["prestop-exceeds-grace"]);
    k.patch("Namespace", None, "moody", json!({"metadata": {"labels": {"ha-guard.io/mode": "off"}}}));
    poll("mode off is seen", WAIT, Duration::from_millis(100), || {
        let out = dry_run(cp, &bad);
        if out.ok() && out.warnings().iter().all(|w| !w.starts_with('[')) { Ok(()) } else { Err(out.output()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    k.patch("Namespace", None, "moody", json!({"metadata": {"labels": {"ha-guard.io/mode": null}}}));
    poll("enforcing again", WAIT, Duration::from_millis(100), || {
        let out = dry_run(cp, &bad);
        if !out.ok() { Ok(()) } else { Err(out.output()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));

    // No namespace controller runs here to empty a deleted namespace and drop its finalizer:
    // do what it would (the namespace is empty), through the finalize subresource.
    let before = hg.cache_objects("Namespace");
    k.create(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleeting"}}));
    hg.wait_cache("Namespace", &format!("> {before}"), |n| n > before);
    k.delete("Namespace", None, "fleeting");
    let mut ns = cp.kubectl(&["get", "namespace", "fleeting", "-o", "json"]).success().json();
    ns["spec"]["finalizers"] = json!([]);
    cp.kubectl_in(&["replace", "--raw", "/api/v1/namespaces/fleeting/finalize", "-f", "-"], &ns.to_string()).success();
    hg.wait_cache("Namespace", &format!("back to {before}"), |n| n == before);
}

/// While ha-guard cannot reach the apiserver it stays ready and decides on the last state it saw;
/// when the apiserver is back, what changed meanwhile reaches the view.
fn outage(cp: &ControlPlane, k: &Kube, hg: &HaGuard, relay: &mut Relay) {
    create(k, hg, &deployment("live", "steady", 1));
    create(k, hg, &pdb("live", "steady", "steady", json!({"maxUnavailable": 1})));
    let pdbs = hg.cache_objects("PodDisruptionBudget");
    let deployments = hg.cache_objects("Deployment");
    // A second PDB over "steady" would overlap the first (and block every eviction).
    let second = pdb("live", "steady-again", "steady", json!({"minAvailable": 1}));
    // A PDB over "lonely", which only exists from the outage on.
    let blocking = pdb("live", "lonely", "lonely", json!({"minAvailable": 1}));
    assert!(refused(cp, &second, "pdb-overlap"));
    assert!(!refused(cp, &blocking, "pdb-blocks-eviction"));

    relay.close();
    // Meanwhile, through the API directly: "steady" and its PDB go, "lonely" comes.
    k.delete("PodDisruptionBudget", Some("live"), "steady");
    k.delete("Deployment", Some("live"), "steady");
    k.create(&deployment("live", "lonely", 1));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(hg.get("/readyz").expect("/readyz").0, 200, "still ready: serving the last known state");
    let m = hg.metrics();
    assert!(m.all("ha_guard_cache_synced", &[]).iter().all(|(_, v)| *v == 1.0), "{m:?}");
    assert_eq!(
        m.get("ha_guard_cache_objects", &[("kind", "PodDisruptionBudget")]),
        Some(pdbs as f64),
        "the last state"
    );
    assert_eq!(m.get("ha_guard_cache_objects", &[("kind", "Deployment")]), Some(deployments as f64), "the last state");
    assert!(refused(cp, &second, "pdb-overlap"), "decided on the last state: the deleted PDB still counts");
    assert!(!refused(cp, &blocking, "pdb-blocks-eviction"), "decided on the last state: lonely is not known yet");

    relay.open().unwrap_or_else(|e| panic!("relay: {e}"));
    hg.wait_cache("PodDisruptionBudget", &format!("== {} after the outage", pdbs - 1), |n| n == pdbs - 1);
    eventually_refused(cp, &blocking, "pdb-blocks-eviction", true);
    eventually_refused(cp, &second, "pdb-overlap", false);
    // "steady" (one replica) is gone from the view: minAvailable 1 over it no longer blocks.
    assert!(!refused(cp, &second, "pdb-blocks-eviction"), "the Deployment deleted during the outage left the view");
    assert_eq!(hg.cache_objects("Deployment"), deployments, "one gone, one come");
}

/// `--cluster auto` with a kubeconfig watches the cluster like `live`; `--cluster live` with no
/// cluster to find exits with an error naming the problem.
fn cluster_modes(cp: &ControlPlane) {
    let mut auto =
        HaGuard::spawn_cluster(cp, "ha-guard-auto", Some(&cp.kubeconfig()), "auto").unwrap_or_else(|e| panic!("{e}"));
    auto.wait_ready(WAIT).unwrap_or_else(|e| panic!("{e}"));
    let m = auto.metrics();
    assert_eq!(
        m.all("ha_guard_cache_synced", &[]).len(),
        WATCHED_KINDS.len(),
        "auto found the kubeconfig and watches: {m:?}"
    );
    assert_eq!(m.get("ha_guard_cache_objects", &[("kind", "Node")]), Some(3.0));
    auto.stop();

    let mut none = HaGuard::spawn_cluster(cp, "ha-guard-nowhere", None, "live").unwrap_or_else(|e| panic!("{e}"));
    let status = poll("--cluster live without a cluster exits", WAIT, Duration::from_millis(100), || {
        none.exited().ok_or_else(String::new)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status.code(), Some(2), "{}", none.log_tail(5));
    assert!(none.log_tail(5).contains("--cluster live: no cluster to connect to"), "{}", none.log_tail(5));
}

/// Runs ha-guard as its own ServiceAccount with the shipped RBAC (the Namespace, ServiceAccount
/// and read-only ClusterRole and binding of `manifests/ha-guard.yaml`). First with the HPA rule
/// taken out of the ClusterRole: the other kinds sync, HPAs cannot, and `/readyz` stays 503 (it
/// needs every watcher). Then with the shipped ClusterRole: ready, all synced, which also shows the
/// shipped RBAC is enough for the live view.
fn shipped_rbac(cp: &ControlPlane) {
    let shipped = shipped_manifests();
    let pick = |kind: &str, name: &str| -> Value {
        shipped
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{SHIPPED} has no {kind} {name}"))
            .clone()
    };
    cp.apply(yaml_file(&[pick("Namespace", "ha-guard")])).success();
    let mut docs = vec![
        pick("ServiceAccount", "ha-guard"),
        pick("ClusterRole", "ha-guard"),
        pick("ClusterRoleBinding", "ha-guard"),
    ];
    let rbac = yaml_file(&docs);
    let role = docs.iter_mut().find(|d| d["kind"] == "ClusterRole").expect("the shipped ClusterRole");
    let rules = role["rules"].as_array_mut().expect("rules");
    let before = rules.len();
    rules.retain(|r| !r["resources"].as_array().is_some_and(|rs| rs.iter().any(|x| x == "horizontalpodautoscalers")));
    assert_eq!(rules.len(), before - 1, "the shipped ClusterRole has one rule for HPAs");
    cp.apply(yaml_file(&docs)).success();

    // A kubeconfig with a token of the ServiceAccount (TokenRequest API), as in a pod.
    let token = cp.kubectl(&["create", "token", "ha-guard", "-n", "ha-guard", "--duration=1h"]).success().stdout;
    let admin = std::fs::read_to_string(cp.kubeconfig()).expect("kubeconfig");
    let ca = admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
        .expect("certificate-authority-data");
    let sa_kubeconfig = cp.root().join("sa.kubeconfig");
    std::fs::write(
        &sa_kubeconfig,
        json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": cp.server(), "certificate-authority-data": ca}}],
            "users": [{"name": "ha-guard", "user": {"token": token.trim()}}],
            "contexts": [{"name": "ha-guard", "context": {"cluster": "e2e", "user": "ha-guard"}}],
            "current-context": "ha-guard"
        })
        .to_string(),
    )
    .expect("write sa.kubeconfig");

    let mut hg = HaGuard::spawn_with(cp, "ha-guard-rbac", &sa_kubeconfig).unwrap_or_else(|e| panic!("{e}"));
    let others: Vec<&str> = WATCHED_KINDS.iter().copied().filter(|k| *k != "HorizontalPodAutoscaler").collect();
    poll("the other permitted kinds sync", WAIT, Duration::from_millis(100), || {
        let m = hg.metrics_opt()?;
        if others.iter().all(|k| m.get("ha_guard_cache_synced", &[("kind", k)]) == Some(1.0)) {
            Ok(())
        } else {
            Err(format!("{m:?}"))
        }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(10)));
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let (code, body) = hg.get("/readyz").expect("/readyz");
        assert_eq!((code, body.trim()), (503, "cluster caches not synced"), "HPAs are not synced");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(hg.metrics().get("ha_guard_cache_synced", &[("kind", "HorizontalPodAutoscaler")]), Some(0.0));
    assert!(hg.log_tail(50).contains("forbidden"), "the watch failure is logged:\n{}", hg.log_tail(10));

    cp.apply(rbac).success();
    hg.wait_ready(WAIT).unwrap_or_else(|e| panic!("{e}"));
    let m = hg.metrics();
    assert!(WATCHED_KINDS.iter().all(|k| m.get("ha_guard_cache_synced", &[("kind", k)]) == Some(1.0)), "{m:?}");
    assert_eq!(m.get("ha_guard_cache_objects", &[("kind", "Node")]), Some(3.0), "{m:?}");
    hg.stop();
}

//! End-to-end: bounded admission (issue 47) on a real kube-apiserver, through the shipped webhook
//! configurations. The cluster holds `HA_GUARD_E2E_NODES` Node objects (500 by default, the CI
//! smoke; `HA_GUARD_E2E_NODES=5000` is Kubernetes' documented limit, run by hand). Hostile writes
//! (`replicas` and `maxReplicas` of 10⁶ and 2³¹−1 under a hostname DoNotSchedule spread or a
//! one-per-node anti-affinity, a 1 MiB object, 200 containers, 1,000 tolerations) go through the
//! apiserver (`kubectl create --dry-run=server`: apply would copy a 1 MiB object into an annotation) from four threads while ordinary writes go on
//! from the test's own: every answer is ha-guard's (no webhook call fails, times out or fails
//! open: [`FailOpen`]), the hostile ones carry their findings or say what was not judged, no
//! rule ran into the deadline, and `/readyz` stays 200 throughout. Times are the benchmark's
//! (`benches/hostile.rs`, docs/benchmarks.md), never asserted here.

#[path = "support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::*;

fn nodes_wanted() -> usize {
    std::env::var("HA_GUARD_E2E_NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(500)
}

/// `n` nodes over three zones, created through the API 32 at a time.
fn create_nodes(cp: &ControlPlane, n: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = cp.kube_client(&rt);
    rt.block_on(async move {
        let api: Api<Node> = Api::all(client);
        let created = futures::stream::iter(0..n)
            .map(|i| {
                let api = api.clone();
                async move {
                    let name = format!("bounded-{i:05}");
                    let node: Node = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": {
                            "kubernetes.io/hostname": name,
                            "topology.kubernetes.io/zone": format!("zone-{}", ["a", "b", "c"][i % 3])}}
                    }))
                    .unwrap();
                    api.create(&PostParams::default(), &node).await.map_err(|e| format!("{name}: {e}"))?;
                    // No kubelet runs to clear the not-ready taint the apiserver adds to a new
                    // node (TaintNodesByCondition): the nodes are meant to be usable.
                    let untaint = Patch::Json::<()>(
                        serde_json::from_value(json!([
                            {"op": "test", "path": "/spec/taints/0/key", "value": "node.kubernetes.io/not-ready"},
                            {"op": "remove", "path": "/spec/taints"}
                        ]))
                        .unwrap(),
                    );
                    match api.patch(&name, &PatchParams::default(), &untaint).await {
                        Ok(_) => Ok(()),
                        // No such taint (the test op failed): nothing to clear.
                        Err(kube::Error::Api(s)) if s.code == 422 => Ok(()),
                        Err(e) => Err(format!("{name}: {e}")),
                    }
                }
            })
            .buffer_unordered(32)
            .collect::<Vec<_>>()
            .await;
        let failed: Vec<String> = created.into_iter().filter_map(Result::err).collect();
        assert!(failed.is_empty(), "{} nodes not created, e.g. {:?}", failed.len(), &failed[..failed.len().min(3)]);
    });
}

fn workload(kind: &str, name: &str, replicas: i64, pod: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "app", "image": "nginx",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]});
    for (k, v) in pod.as_object().unwrap() {
        spec[k] = v.clone();
    }
    let mut w = json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": name, "namespace": "tenant"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    });
    if kind == "StatefulSet" {
        w["spec"]["serviceName"] = json!(name);
    }
    w
}

fn hostname_spread(app: &str) -> Value {
    json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}]})
}

fn one_per_node(app: &str) -> Value {
    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}]}}})
}

/// Each hostile write, and what its answer must say.
fn hostile(nodes: usize) -> Vec<(String, Value, Vec<String>)> {
    let mut out = Vec::new();
    for kind in ["Deployment", "StatefulSet"] {
        for (label, replicas) in [("1e6", 1_000_000i64), ("max", 2_147_483_647)] {
            let name = format!("{}-spread-{label}", kind.to_lowercase());
            // A hostname spread over untainted nodes that report no allocatable: no bound, so
            // nothing to say but the missing PDB and zone spread.
            out.push((name.clone(), workload(kind, &name, replicas, hostname_spread(&name)), vec![]));
            let name = format!("{}-apart-{label}", kind.to_lowercase());
            out.push((
                name.clone(),
                workload(kind, &name, replicas, one_per_node(&name)),
                vec![format!("[spread-unsatisfiable]"), format!("at most {nodes} can be placed")],
            ));
        }
    }
    // An HPA over a Deployment of the view, allowed 2^31-1 replicas.
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "tenant"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2, "maxReplicas": 2_147_483_647}});
    out.push(("hpa-max".into(), hpa, vec![]));
    // A 1 MiB object (annotations may hold 256 KiB in all).
    let env: Vec<Value> = (0..3200).map(|i| json!({"name": format!("VAR_{i:05}"), "value": "x".repeat(240)})).collect();
    let mut big = workload("Deployment", "big", 1_000_000, one_per_node("big"));
    big["spec"]["template"]["spec"]["containers"][0]["env"] = json!(env);
    big["metadata"]["annotations"] = json!({"note": "y".repeat(200_000)});
    out.push(("1MiB".into(), big, vec![format!("at most {nodes} can be placed")]));
    let containers: Vec<Value> = (0..200)
        .map(|i| json!({"name": format!("c{i}"), "image": "nginx", "resources": {"requests": {"cpu": "1m"}}}))
        .collect();
    let many = workload("Deployment", "many", 1_000_000, json!({"containers": containers}));
    out.push(("200-containers".into(), many, vec!["[replicas-colocated]".into()]));
    let tolerations: Vec<Value> =
        (0..1000).map(|i| json!({"key": format!("taint-{i}"), "operator": "Exists", "effect": "NoSchedule"})).collect();
    let mut tolerant = workload("Deployment", "tolerant", 1_000_000, one_per_node("tolerant"));
    tolerant["spec"]["template"]["spec"]["tolerations"] = json!(tolerations);
    out.push((
        "1000-tolerations".into(),
        tolerant,
        vec![
            "[spread-unsatisfiable] not judged: spec.template.spec.tolerations holds 1000 tolerations, over the 256"
                .into(),
        ],
    ));
    out
}

#[test]
fn hostile_writes_are_answered_and_delay_no_one() {
    let n = nodes_wanted();
    let mut h = Harness::start(Setup::default());
    let started = std::time::Instant::now();
    create_nodes(&h.cp, n);
    eprintln!("[e2e] {n} nodes created in {:.1?}", started.elapsed());
    h.hg.wait_cache("Node", &format!(">= {n}"), |c| c as usize >= n);
    let mut steps = h.steps();
    let guard = h.guard();
    let (cp, hg) = (&h.cp, &h.hg);
    cp.namespace("tenant", &[]);
    cp.apply(workload("Deployment", "web", 3, hostname_spread("web"))).success();

    steps.run("each hostile write alone: answered, with what it must say", || {
        for (name, object, says) in hostile(n) {
            let out = cp.kubectl_in(&["create", "--dry-run=server", "-o", "name", "-f", "-"], &object.to_string());
            assert!(out.ok(), "{name}: {}", out.output());
            for s in &says {
                assert!(out.stderr.contains(s.as_str()), "{name}: {s:?} not in:\n{}", out.stderr);
            }
        }
    });

    steps.run("hostile writes from four threads while ordinary writes go on: every one answered", || {
        let stop = Arc::new(AtomicBool::new(false));
        let hostile = Arc::new(hostile(n));
        let kubeconfig = cp.kubeconfig();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (stop, hostile, kubeconfig) = (stop.clone(), hostile.clone(), kubeconfig.clone());
                std::thread::spawn(move || {
                    let mut sent = 0;
                    let mut failed = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let (name, object, _) = &hostile[(t + sent * 4) % hostile.len()];
                        let out =
                            kubectl(&kubeconfig, &["create", "--dry-run=server", "-f", "-"], Some(&object.to_string()));
                        if !out.ok() {
                            failed.push(format!("{name}: {}", out.output()));
                        }
                        sent += 1;
                    }
                    (sent, failed)
                })
            })
            .collect();
        let mut ordinary = 0;
        for i in 0..40 {
            let name = format!("ordinary-{}", i % 5);
            let out = cp.kubectl_in(
                &["apply", "--dry-run=server", "-f", "-"],
                &workload("Deployment", &name, 3, hostname_spread(&name)).to_string(),
            );
            assert!(out.ok(), "{name}: {}", out.output());
            ordinary += 1;
            let (status, body) = hg.get("/readyz").expect("readyz");
            assert_eq!(status, 200, "readiness while hostile writes go on: {body}");
        }
        stop.store(true, Ordering::Relaxed);
        let mut hostile_sent = 0;
        for t in threads {
            let (sent, failed) = t.join().unwrap();
            assert!(failed.is_empty(), "{failed:?}");
            hostile_sent += sent;
        }
        eprintln!("[e2e] {ordinary} ordinary writes answered beside {hostile_sent} hostile ones");
        assert!(hostile_sent >= 4, "the hostile writers ran");
    });

    steps.run("no rule ran into the deadline", || {
        let metrics = hg.metrics();
        let exceeded = metrics.sum("ha_guard_rule_deadline_exceeded_total", &[]);
        assert_eq!(exceeded, 0.0, "{:?}", metrics.all("ha_guard_rule_deadline_exceeded_total", &[]));
        assert!(metrics.sum("ha_guard_admission_requests_total", &[]) > 50.0);
    });
    steps.run("no webhook call failed, timed out or failed open", || guard.finish(cp));
    steps.finish();
}

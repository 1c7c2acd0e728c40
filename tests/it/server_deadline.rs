//! The deadline (issue 47): a review still running at `--deadline` is answered as the failure
//! policy says, with a warning naming the rules not judged, the counter and the annotation; it
//! delays no other request, and readiness fails while it runs on past twice the deadline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ha_guard::core::config::Config;
use ha_guard::core::model::apiservice::ApiService;
use ha_guard::core::model::{Exemptions, Kind, ObjectRef};
use ha_guard::core::view::{
    HpaInfo, Index, NodeInfo, PdbInfo, PodInfo, PvcInfo, ServiceInfo, Snapshot, View, ViewSource, WebhookConfigInfo,
    WorkloadInfo,
};
use ha_guard::server::{AdmissionSettings, FailurePolicy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::server_support::{Server, VIEW, index, pki};

/// A view whose nodes take `delay` to list: the node-counting rules (the colocation family) run
/// past any deadline, as a bug or an input the limits missed would.
struct SlowNodes {
    inner: Index,
    delay: Duration,
}

impl View for SlowNodes {
    fn is_complete(&self) -> bool {
        self.inner.is_complete()
    }
    fn knows_nodes(&self) -> bool {
        true
    }
    fn workload(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<WorkloadInfo>> {
        self.inner.workload(kind, namespace, name)
    }
    fn workloads_selected_by(&self, namespace: &str, selector: &LabelSelector) -> Vec<Arc<WorkloadInfo>> {
        self.inner.workloads_selected_by(namespace, selector)
    }
    fn workloads_in(&self, namespace: &str) -> Vec<Arc<WorkloadInfo>> {
        self.inner.workloads_in(namespace)
    }
    fn pdbs_in(&self, namespace: &str) -> Vec<Arc<PdbInfo>> {
        self.inner.pdbs_in(namespace)
    }
    fn pdb(&self, namespace: &str, name: &str) -> Option<Arc<PdbInfo>> {
        self.inner.pdb(namespace, name)
    }
    fn hpas_targeting(&self, target: &ObjectRef) -> Vec<Arc<HpaInfo>> {
        self.inner.hpas_targeting(target)
    }
    fn autoscaler(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<HpaInfo>> {
        self.inner.autoscaler(kind, namespace, name)
    }
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<ServiceInfo>> {
        self.inner.service(namespace, name)
    }
    fn webhook_config(&self, kind: Kind, name: &str) -> Option<Arc<WebhookConfigInfo>> {
        self.inner.webhook_config(kind, name)
    }
    fn webhooks_calling(&self, namespace: &str, service: &str) -> Vec<Arc<WebhookConfigInfo>> {
        self.inner.webhooks_calling(namespace, service)
    }
    fn webhook_services_in(&self, namespace: &str) -> Vec<String> {
        self.inner.webhook_services_in(namespace)
    }
    fn apiservices_calling(&self, namespace: &str, service: &str) -> Vec<Arc<ApiService>> {
        self.inner.apiservices_calling(namespace, service)
    }
    fn apiservice_services_in(&self, namespace: &str) -> Vec<String> {
        self.inner.apiservice_services_in(namespace)
    }
    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PvcInfo>> {
        self.inner.pvc(namespace, name)
    }
    fn nodes(&self) -> Vec<Arc<NodeInfo>> {
        std::thread::sleep(self.delay);
        self.inner.nodes()
    }
    fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.inner.namespace_labels(namespace)
    }
    fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.inner.node(name)
    }
    fn pods_of(&self, workload: &ObjectRef) -> Vec<Arc<PodInfo>> {
        self.inner.pods_of(workload)
    }
    fn pods_in(&self, namespace: &str) -> Vec<Arc<PodInfo>> {
        self.inner.pods_in(namespace)
    }
    fn pods_on_nodes(&self, nodes: &[String]) -> Vec<(String, Arc<PodInfo>)> {
        self.inner.pods_on_nodes(nodes)
    }
    fn exemptions(&self, r: &ObjectRef) -> Exemptions {
        self.inner.exemptions(r)
    }
}

struct SlowSource(Duration);

impl ViewSource for SlowSource {
    fn snapshot(&self) -> Snapshot {
        Arc::new(SlowNodes { inner: index(VIEW, false), delay: self.0 })
    }
    fn synced(&self) -> bool {
        true
    }
}

const DEADLINE: Duration = Duration::from_millis(300);
const STALL: Duration = Duration::from_secs(3);

async fn server(policy: FailurePolicy) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let admission = AdmissionSettings { deadline: DEADLINE, failure_policy: policy };
    Server::start_admitting(dir, pki, Arc::new(SlowSource(STALL)), Config::default(), admission, |_| {}).await
}

fn deadline_counter(text: &str, rule: &str) -> f64 {
    let prefix = format!("ha_guard_rule_deadline_exceeded_total{{rule=\"{rule}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).map_or(-1.0, |v| v.parse().unwrap())
}

/// failurePolicy Ignore: admitted, with one warning per rule of the family that was running; the
/// other requests go on meanwhile, and readiness says the request path is stalled until the slow
/// review ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_deadline_ignore_admits_and_names_the_rules_not_judged() {
    let server = server(FailurePolicy::Ignore).await;
    let response = server.respond("/validate", "deployment-spread-ok.json").await;
    assert_eq!(response["allowed"], true, "{response}");
    let warnings: Vec<String> =
        response["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_string()).collect();
    assert_eq!(
        warnings,
        ["spread-unsatisfiable", "replicas-colocated", "host-network-colocation"].map(|rule| format!(
            "[{rule}] not judged: ha-guard's deadline of 300ms passed while judging it; the write is admitted \
             unchecked (failurePolicy Ignore)."
        ))
    );
    assert_eq!(
        response["auditAnnotations"]["deadline-exceeded"],
        "spread-unsatisfiable,replicas-colocated,host-network-colocation"
    );
    let metrics = server.get_probe("/metrics").await.1;
    assert_eq!(deadline_counter(&metrics, "spread-unsatisfiable"), 1.0, "{metrics}");
    assert_eq!(deadline_counter(&metrics, "pdb-blocks-eviction"), 0.0, "the others start at 0: {metrics}");
    assert!(
        metrics.lines().any(|l| l.starts_with("ha_guard_counts_handed_over_total ")),
        "the counts' hand-overs are counted from the start: {metrics}"
    );
    // The slow review is still running on its blocking thread (its family ends after STALL); a
    // PDB's review, which reads no node, is answered meanwhile: the deadline's answer came at 300
    // ms, and at twice the deadline readiness says the request path is stalled.
    tokio::time::sleep(DEADLINE * 2).await;
    let pdb = server.respond("/validate", "pdb-ok.json").await;
    assert_eq!(pdb["allowed"], true, "{pdb}");
    assert!(pdb["warnings"].is_null(), "judged whole: {pdb}");
    let (status, body) = server.get_probe("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("past twice the deadline of 300ms: the request path is stalled"), "{body}");
    // Once the slow review has stopped (at its next family), ready again.
    let mut ready = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if server.get_probe("/readyz").await.0 == 200 {
            ready = true;
            break;
        }
    }
    assert!(ready, "ready again once the slow review ended");
    server.stop().await;
}

/// failurePolicy Fail: refused (503), the message naming the rules not judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_deadline_fail_refuses() {
    let server = server(FailurePolicy::Fail).await;
    let response = server.respond("/validate", "deployment-spread-ok.json").await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 503, "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "[spread-unsatisfiable] not judged: ha-guard's deadline of 300ms passed while judging it; the write is \
             refused (failurePolicy Fail): try again."
        ),
        "{message}"
    );
    // The mutating webhook plans no node-counting rule: its answer is whole and in time.
    let patched = server.respond("/mutate", "deployment-spread-no-selector.json").await;
    assert_eq!(patched["allowed"], true, "{patched}");
    assert!(!patched["patch"].is_null(), "{patched}");
    server.stop().await;
}

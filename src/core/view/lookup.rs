//! The [`View`] trait: what the engine may ask of the cluster.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::nodes::NodeTable;
use super::projection::{
    HpaInfo, NodeInfo, PdbInfo, PodInfo, PvcInfo, ServiceInfo, Template, WebhookConfigInfo, WorkloadInfo, spreads_over,
};
use crate::core::model::apiservice::ApiService;
use crate::core::model::{Exemptions, Kind, ObjectRef};

/// What the engine may ask of the cluster. Every method is a lookup, never a scan of the cluster.
pub trait View: Send + Sync {
    /// The view holds every object of the namespaces it covers: rules asserting absence may run.
    fn is_complete(&self) -> bool;
    /// The view knows the cluster's nodes (the live view): `spread-unsatisfiable` may run.
    fn knows_nodes(&self) -> bool;
    fn workload(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<WorkloadInfo>>;
    /// Workloads in `namespace` whose pod template labels `selector` matches.
    fn workloads_selected_by(&self, namespace: &str, selector: &LabelSelector) -> Vec<Arc<WorkloadInfo>>;
    /// Every workload in `namespace`.
    fn workloads_in(&self, namespace: &str) -> Vec<Arc<WorkloadInfo>>;
    /// Workloads in `namespace` with a topology spread `labelSelector` (`spread_selectors`) that
    /// matches `labels`, sorted by id: the workloads whose spreads count pods with these labels.
    fn workloads_spreading_over(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<WorkloadInfo>> {
        self.workloads_in(namespace).into_iter().filter(|w| spreads_over(w, labels)).collect()
    }
    fn pdbs_in(&self, namespace: &str) -> Vec<Arc<PdbInfo>>;
    fn pdb(&self, namespace: &str, name: &str) -> Option<Arc<PdbInfo>>;
    /// The PDBs in `namespace` whose selector covers pods with `labels`, sorted by id (by name).
    fn pdbs_covering(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<PdbInfo>> {
        self.pdbs_in(namespace).into_iter().filter(|p| p.covers(labels)).collect()
    }
    /// The autoscalers (HPAs and KEDA ScaledObjects) targeting `target`, sorted by id.
    fn hpas_targeting(&self, target: &ObjectRef) -> Vec<Arc<HpaInfo>>;
    /// An autoscaler of `kind` (HorizontalPodAutoscaler or ScaledObject).
    fn autoscaler(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<HpaInfo>>;
    fn hpa(&self, namespace: &str, name: &str) -> Option<Arc<HpaInfo>> {
        self.autoscaler(Kind::HorizontalPodAutoscaler, namespace, name)
    }
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<ServiceInfo>>;
    /// A Validating- or MutatingWebhookConfiguration.
    fn webhook_config(&self, kind: Kind, name: &str) -> Option<Arc<WebhookConfigInfo>>;
    /// The webhook configurations with a fail-closed webhook calling Service `namespace/service`,
    /// sorted by id.
    fn webhooks_calling(&self, namespace: &str, service: &str) -> Vec<Arc<WebhookConfigInfo>>;
    /// Names of the Services in `namespace` that fail-closed webhooks call, sorted.
    fn webhook_services_in(&self, namespace: &str) -> Vec<String>;
    /// The aggregated APIServices served by Service `namespace/service`, sorted by name.
    fn apiservices_calling(&self, namespace: &str, service: &str) -> Vec<Arc<ApiService>>;
    /// Names of the Services in `namespace` that aggregated APIServices are served by, sorted.
    fn apiservice_services_in(&self, namespace: &str) -> Vec<String>;
    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PvcInfo>>;
    fn nodes(&self) -> Vec<Arc<NodeInfo>>;
    /// The nodes as a table whose topology columns are numbered once for every reader of the
    /// same nodes (the [`Index`](super::Index) keeps one per snapshot); made afresh by default.
    fn node_table(&self) -> Arc<NodeTable> {
        Arc::new(NodeTable::new(self.nodes()))
    }
    /// Labels of a namespace the view knows, `None` if it does not know it.
    fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>>;
    /// Whether some namespace of the cluster has labels `selector` matches; `None` when the view
    /// does not know every namespace (files given to `check`: the cluster may have others).
    fn any_namespace_matching(&self, _selector: &LabelSelector) -> Option<bool> {
        None
    }
    /// One label of a namespace the view knows (what every decision asks: the mode label).
    fn namespace_label(&self, namespace: &str, key: &str) -> Option<String> {
        self.namespace_labels(namespace)?.remove(key)
    }
    fn node(&self, name: &str) -> Option<Arc<NodeInfo>>;
    /// The pods a workload runs, sorted by name. Only the audit's view holds pods: elsewhere none.
    fn pods_of(&self, workload: &ObjectRef) -> Vec<Arc<PodInfo>>;
    /// Every pod of `namespace`, sorted by name.
    fn pods_in(&self, namespace: &str) -> Vec<Arc<PodInfo>>;
    /// The pods on `nodes` with their namespace, by node in the order given, then namespace and
    /// name. The one scan of the cluster: a drain simulation asks once a run, no rule does.
    fn pods_on_nodes(&self, nodes: &[String]) -> Vec<(String, Arc<PodInfo>)>;

    /// The pod template of a workload, when the view keeps templates (the audit's, for a drain).
    fn template(&self, _workload: &ObjectRef) -> Option<Arc<Template>> {
        None
    }

    /// The cluster's PersistentVolumes, StorageClasses and CSINodes, when the view holds them (the
    /// audit's, for a drain's volume filters).
    fn storage(&self) -> Option<Arc<super::storage::Storage>> {
        None
    }

    /// Exemption annotations of an object the view knows.
    fn exemptions(&self, r: &ObjectRef) -> Exemptions {
        match r.kind {
            Kind::Deployment | Kind::StatefulSet => {
                self.workload(r.kind, &r.namespace, &r.name).map(|w| w.exemptions.clone())
            }
            Kind::PodDisruptionBudget => self.pdb(&r.namespace, &r.name).map(|p| p.exemptions.clone()),
            Kind::HorizontalPodAutoscaler | Kind::ScaledObject => {
                self.autoscaler(r.kind, &r.namespace, &r.name).map(|h| h.exemptions.clone())
            }
            Kind::Service => self.service(&r.namespace, &r.name).map(|s| s.exemptions.clone()),
            Kind::ValidatingWebhookConfiguration | Kind::MutatingWebhookConfiguration => {
                self.webhook_config(r.kind, &r.name).map(|c| c.exemptions.clone())
            }
            Kind::PersistentVolumeClaim => self.pvc(&r.namespace, &r.name).map(|p| p.exemptions.clone()),
            Kind::Node | Kind::Namespace | Kind::Pod | Kind::ApiService => None,
        }
        .unwrap_or_default()
    }
}

//! A view with one namespace's labels added: those the webhook read from the apiserver for a
//! namespace its view does not know yet (created in the same apply as the object under review).

use crate::core::model::apiservice::ApiService;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::lookup::View;
use super::nodes::NodeTable;
use super::projection::{
    HpaInfo, NodeInfo, PdbInfo, PodInfo, PvcInfo, ServiceInfo, Template, WebhookConfigInfo, WorkloadInfo,
};
use crate::core::model::{Kind, ObjectRef};

type Labels = BTreeMap<String, String>;

/// `base`, with `namespace` labelled `labels` (where `base` knows it, its own labels win: they are
/// the watch's, at least as recent).
pub struct WithNamespace<'a> {
    pub base: &'a dyn View,
    pub namespace: String,
    pub labels: Labels,
}

impl View for WithNamespace<'_> {
    fn is_complete(&self) -> bool {
        self.base.is_complete()
    }
    fn knows_nodes(&self) -> bool {
        self.base.knows_nodes()
    }
    fn workload(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<WorkloadInfo>> {
        self.base.workload(kind, namespace, name)
    }
    fn workloads_selected_by(&self, namespace: &str, selector: &LabelSelector) -> Vec<Arc<WorkloadInfo>> {
        self.base.workloads_selected_by(namespace, selector)
    }
    fn workloads_in(&self, namespace: &str) -> Vec<Arc<WorkloadInfo>> {
        self.base.workloads_in(namespace)
    }
    fn workloads_spreading_over(&self, namespace: &str, labels: &Labels) -> Vec<Arc<WorkloadInfo>> {
        self.base.workloads_spreading_over(namespace, labels)
    }
    fn pdbs_in(&self, namespace: &str) -> Vec<Arc<PdbInfo>> {
        self.base.pdbs_in(namespace)
    }
    fn pdb(&self, namespace: &str, name: &str) -> Option<Arc<PdbInfo>> {
        self.base.pdb(namespace, name)
    }
    fn pdbs_covering(&self, namespace: &str, labels: &Labels) -> Vec<Arc<PdbInfo>> {
        self.base.pdbs_covering(namespace, labels)
    }
    fn hpas_targeting(&self, target: &ObjectRef) -> Vec<Arc<HpaInfo>> {
        self.base.hpas_targeting(target)
    }
    fn autoscaler(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<HpaInfo>> {
        self.base.autoscaler(kind, namespace, name)
    }
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<ServiceInfo>> {
        self.base.service(namespace, name)
    }
    fn webhook_config(&self, kind: Kind, name: &str) -> Option<Arc<WebhookConfigInfo>> {
        self.base.webhook_config(kind, name)
    }
    fn webhooks_calling(&self, namespace: &str, service: &str) -> Vec<Arc<WebhookConfigInfo>> {
        self.base.webhooks_calling(namespace, service)
    }
    fn webhook_services_in(&self, namespace: &str) -> Vec<String> {
        self.base.webhook_services_in(namespace)
    }
    fn apiservices_calling(&self, namespace: &str, service: &str) -> Vec<Arc<ApiService>> {
        self.base.apiservices_calling(namespace, service)
    }
    fn apiservice_services_in(&self, namespace: &str) -> Vec<String> {
        self.base.apiservice_services_in(namespace)
    }
    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PvcInfo>> {
        self.base.pvc(namespace, name)
    }
    fn nodes(&self) -> Vec<Arc<NodeInfo>> {
        self.base.nodes()
    }
    fn node_table(&self) -> Arc<NodeTable> {
        self.base.node_table()
    }
    fn namespace_labels(&self, namespace: &str) -> Option<Labels> {
        self.base.namespace_labels(namespace).or_else(|| (namespace == self.namespace).then(|| self.labels.clone()))
    }
    fn namespace_label(&self, namespace: &str, key: &str) -> Option<String> {
        match self.base.namespace_labels(namespace) {
            Some(mut labels) => labels.remove(key),
            None if namespace == self.namespace => self.labels.get(key).cloned(),
            None => None,
        }
    }
    fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.base.node(name)
    }
    fn pods_of(&self, workload: &ObjectRef) -> Vec<Arc<PodInfo>> {
        self.base.pods_of(workload)
    }
    fn pods_in(&self, namespace: &str) -> Vec<Arc<PodInfo>> {
        self.base.pods_in(namespace)
    }
    fn pods_on_nodes(&self, nodes: &[String]) -> Vec<(String, Arc<PodInfo>)> {
        self.base.pods_on_nodes(nodes)
    }
    fn template(&self, workload: &ObjectRef) -> Option<Arc<Template>> {
        self.base.template(workload)
    }
    fn storage(&self) -> Option<Arc<super::storage::Storage>> {
        self.base.storage()
    }
    fn exemptions(&self, r: &ObjectRef) -> crate::core::model::Exemptions {
        self.base.exemptions(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::view::Index;

    #[test]
    fn the_namespace_read_is_known_and_the_views_own_come_first() {
        let mut index = Index::new();
        index.upsert_namespace_labels("known".into(), [("tier".to_string(), "dev".to_string())].into());
        let prod: Labels = [("tier".to_string(), "prod".to_string())].into();
        let view = WithNamespace { base: &index, namespace: "fresh".into(), labels: prod.clone() };
        assert_eq!(view.namespace_labels("fresh"), Some(prod));
        assert_eq!(view.namespace_label("fresh", "tier").as_deref(), Some("prod"));
        assert_eq!(view.namespace_labels("other"), None);
        let stale = WithNamespace { base: &index, namespace: "known".into(), labels: Labels::new() };
        assert_eq!(stale.namespace_label("known", "tier").as_deref(), Some("dev"), "the view's own");
    }
}

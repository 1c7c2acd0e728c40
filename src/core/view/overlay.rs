//! The view while one object is under review.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::lookup::View;
use super::nodes::NodeTable;
use super::projection::{
    HpaInfo, NodeInfo, PdbInfo, PodInfo, PvcInfo, ServiceInfo, Template, WebhookConfigInfo, WorkloadInfo, spreads_over,
};
use crate::core::model::apiservice::ApiService;
use crate::core::model::{Kind, ObjectRef, Subject, selector};

/// The view as seen while reviewing `subject`: the subject's own projection replaces whatever the
/// view holds for it (the cache has the old version, or none on CREATE), so cross-object rules see
/// the object as it will be.
pub struct Overlay<'a> {
    base: &'a dyn View,
    id: ObjectRef,
    workload: Option<Arc<WorkloadInfo>>,
    pdb: Option<Arc<PdbInfo>>,
    /// An HPA or a KEDA ScaledObject.
    hpa: Option<Arc<HpaInfo>>,
    service: Option<Arc<ServiceInfo>>,
    webhooks: Option<Arc<WebhookConfigInfo>>,
}

impl<'a> Overlay<'a> {
    pub fn new(base: &'a dyn View, subject: &Subject) -> Self {
        let mut overlay =
            Overlay { base, id: subject.id(), workload: None, pdb: None, hpa: None, service: None, webhooks: None };
        match subject {
            Subject::Workload(w) => overlay.workload = Some(Arc::new(WorkloadInfo::of(w))),
            Subject::Pdb(p) => overlay.pdb = Some(Arc::new(PdbInfo::of(p))),
            Subject::Hpa(h) => overlay.hpa = Some(Arc::new(HpaInfo::of(h))),
            Subject::ScaledObject(so) => overlay.hpa = Some(Arc::new(HpaInfo::of_scaled_object(so))),
            Subject::Service(svc) => overlay.service = Some(Arc::new(ServiceInfo::of(svc))),
            Subject::Webhooks(c) => overlay.webhooks = Some(Arc::new(WebhookConfigInfo::of(c))),
            Subject::ApiService(_) => {}
            Subject::Scale { target, replicas } => {
                overlay.workload = base
                    .workload(target.kind, &target.namespace, &target.name)
                    .map(|w| Arc::new(WorkloadInfo { replicas: *replicas, ..(*w).clone() }));
            }
        }
        overlay
    }

    /// The subject's own projection as a workload (for a scale write, the target with its new count).
    pub fn subject_workload(&self) -> Option<&Arc<WorkloadInfo>> {
        self.workload.as_ref()
    }

    /// The subject's id.
    pub fn subject_id(&self) -> &ObjectRef {
        &self.id
    }

    fn is_subject(&self, r: &ObjectRef) -> bool {
        *r == self.id
    }
}

impl View for Overlay<'_> {
    fn is_complete(&self) -> bool {
        self.base.is_complete()
    }

    fn knows_nodes(&self) -> bool {
        self.base.knows_nodes()
    }

    fn template(&self, workload: &ObjectRef) -> Option<Arc<Template>> {
        self.base.template(workload)
    }

    fn storage(&self) -> Option<Arc<super::storage::Storage>> {
        self.base.storage()
    }

    fn workload(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<WorkloadInfo>> {
        match &self.workload {
            Some(w) if w.id.kind == kind && w.id.namespace == namespace && w.id.name == name => Some(w.clone()),
            _ => self.base.workload(kind, namespace, name),
        }
    }

    fn workloads_selected_by(&self, namespace: &str, sel: &LabelSelector) -> Vec<Arc<WorkloadInfo>> {
        let mut found: Vec<_> =
            self.base.workloads_selected_by(namespace, sel).into_iter().filter(|w| !self.is_subject(&w.id)).collect();
        if let Some(w) = &self.workload
            && w.id.namespace == namespace
            && selector::matches(sel, &w.template_labels)
        {
            found.push(w.clone());
            found.sort_by(|a, b| a.id.cmp(&b.id));
        }
        found
    }

    fn workloads_in(&self, namespace: &str) -> Vec<Arc<WorkloadInfo>> {
        let mut found: Vec<_> =
            self.base.workloads_in(namespace).into_iter().filter(|w| !self.is_subject(&w.id)).collect();
        if let Some(w) = &self.workload
            && w.id.namespace == namespace
        {
            found.push(w.clone());
            found.sort_by(|a, b| a.id.cmp(&b.id));
        }
        found
    }

    fn workloads_spreading_over(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<WorkloadInfo>> {
        let mut found: Vec<_> = self
            .base
            .workloads_spreading_over(namespace, labels)
            .into_iter()
            .filter(|w| !self.is_subject(&w.id))
            .collect();
        if let Some(w) = &self.workload
            && w.id.namespace == namespace
            && spreads_over(w, labels)
        {
            found.push(w.clone());
            found.sort_by(|a, b| a.id.cmp(&b.id));
        }
        found
    }

    fn pdbs_in(&self, namespace: &str) -> Vec<Arc<PdbInfo>> {
        let mut found: Vec<_> = self.base.pdbs_in(namespace).into_iter().filter(|p| !self.is_subject(&p.id)).collect();
        if let Some(p) = &self.pdb
            && p.id.namespace == namespace
        {
            found.push(p.clone());
            found.sort_by(|a, b| a.id.cmp(&b.id));
        }
        found
    }

    fn pdbs_covering(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<PdbInfo>> {
        let mut found: Vec<_> =
            self.base.pdbs_covering(namespace, labels).into_iter().filter(|p| !self.is_subject(&p.id)).collect();
        if let Some(p) = &self.pdb
            && p.id.namespace == namespace
            && p.covers(labels)
        {
            found.push(p.clone());
            found.sort_by(|a, b| a.id.cmp(&b.id));
        }
        found
    }

    fn pdb(&self, namespace: &str, name: &str) -> Option<Arc<PdbInfo>> {
        match &self.pdb {
            Some(p) if p.id.namespace == namespace && p.id.name == name => Some(p.clone()),
            _ => self.base.pdb(namespace, name),
        }
    }

    fn hpas_targeting(&self, target: &ObjectRef) -> Vec<Arc<HpaInfo>> {
        let mut found: Vec<_> =
            self.base.hpas_targeting(target).into_iter().filter(|h| !self.is_subject(&h.id)).collect();
        if let Some(h) = &self.hpa
            && h.target.as_ref() == Some(target)
        {
            found.push(h.clone());
            found.sort_by(|a, b| a.id.cmp(&b.id));
        }
        found
    }

    fn autoscaler(&self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<HpaInfo>> {
        match &self.hpa {
            Some(h) if h.id.kind == kind && h.id.namespace == namespace && h.id.name == name => Some(h.clone()),
            _ => self.base.autoscaler(kind, namespace, name),
        }
    }

    fn service(&self, namespace: &str, name: &str) -> Option<Arc<ServiceInfo>> {
        match &self.service {
            Some(s) if s.id.namespace == namespace && s.id.name == name => Some(s.clone()),
            _ => self.base.service(namespace, name),
        }
    }

    fn webhook_config(&self, kind: Kind, name: &str) -> Option<Arc<WebhookConfigInfo>> {
        match &self.webhooks {
            Some(c) if c.id.kind == kind && c.id.name == name => Some(c.clone()),
            _ => self.base.webhook_config(kind, name),
        }
    }

    fn webhooks_calling(&self, namespace: &str, service: &str) -> Vec<Arc<WebhookConfigInfo>> {
        let mut found: Vec<_> =
            self.base.webhooks_calling(namespace, service).into_iter().filter(|c| !self.is_subject(&c.id)).collect();
        if let Some(c) = &self.webhooks
            && c.calls(namespace, service)
        {
            found.push(c.clone());
            found.sort_by(|a, b| a.id.cmp(&b.id));
        }
        found
    }

    fn webhook_services_in(&self, namespace: &str) -> Vec<String> {
        let Some(own) = &self.webhooks else { return self.base.webhook_services_in(namespace) };
        // The base may know Services only the subject's old version called.
        let mut found: Vec<String> = self
            .base
            .webhook_services_in(namespace)
            .into_iter()
            .filter(|s| self.base.webhooks_calling(namespace, s).iter().any(|c| c.id != own.id))
            .collect();
        found.extend(own.services().into_iter().filter(|(ns, _)| *ns == namespace).map(|(_, s)| s.to_string()));
        found.sort();
        found.dedup();
        found
    }

    // An APIService under review is judged from the subject itself (`apiservice-unavailable`):
    // these answer for the other APIServices, as stored.
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

    fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.base.namespace_labels(namespace)
    }

    fn any_namespace_matching(&self, selector: &LabelSelector) -> Option<bool> {
        self.base.any_namespace_matching(selector)
    }

    fn namespace_label(&self, namespace: &str, key: &str) -> Option<String> {
        self.base.namespace_label(namespace, key)
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
}

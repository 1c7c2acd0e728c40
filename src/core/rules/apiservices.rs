//! Aggregated APIs that can break the cluster: `apiservice-unavailable`.
//!
//! An APIService with `spec.service` registers an API the kube-aggregator proxies to that
//! Service. While no pod behind it answers, the API is unavailable, and that is not the API's
//! problem alone: discovery (`/apis`) reports the group as failed, so `kubectl` warns on every
//! command and clients that need a complete discovery (`kubectl api-resources`, Helm, controllers
//! with dynamic informers, garbage collection) fail or stall; and the namespace controller, which
//! must list every resource of a namespace before it deletes it, leaves every namespace being
//! deleted in `Terminating` (`NamespaceDeletionDiscoveryFailure`). One replica behind it is one
//! node's drain away from that.
//!
//! Judged on the writes of the three objects of the relation, as `webhook-fail-closed-unavailable`
//! is: the APIService (its Service, and the aggregator's `Available` condition where it is
//! stored), the Service (its selector) and the workload behind it (its replicas, or its
//! autoscaler's floor, or a scale write); whichever is written second is judged. In `check` (the
//! Service and workloads from the files) and in the audit (the live view, the condition and the
//! pods) as well. The finding belongs to the APIService (its anchor): where the APIService is
//! judged in the same run, the Service's and the workload's copies are not reported again.
//!
//! What admission cannot know: whether the endpoints answer now (EndpointSlices are not in the
//! view), and so whether a Service that selects no workload has pods of another kind behind it.
//! At admission, a Service selecting a workload whose floor is one replica or none is judged; the
//! aggregator's `Available: False` is judged on the APIService's own writes and in the audit.

use super::context::{Ctx, Emitter, scaled_workload};
use crate::core::catalogue::Rule;
use crate::core::model::apiservice::ApiService;
use crate::core::model::selector::{self, render};
use crate::core::model::words::{NAMED, list, names};
use crate::core::model::{Kind, ObjectRef, Subject};
use crate::core::view::{ServiceInfo, View, bounds};
use crate::declare_rule;

declare_rule!(pub APISERVICE_UNAVAILABLE, "apiservice-unavailable", Warn, "an aggregated APIService is not Available, or one replica (or none) serves it");

pub static RULES: &[&Rule] = &[&APISERVICE_UNAVAILABLE];

/// What breaks while the API does not answer: said by every message.
const CONSEQUENCE: &str = "While no pod behind it answers, the aggregated API is unavailable cluster-wide: discovery \
                           reports its group as failed (kubectl warns on every command; Helm, kubectl api-resources \
                           and controllers that need complete discovery fail), and the namespace controller cannot \
                           list the namespace's resources, so every namespace being deleted stays Terminating.";

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    match ctx.subject {
        Subject::ApiService(a) => judge(ctx, a, out),
        Subject::Service(_) => service_side(ctx, out),
        Subject::Pdb(_) | Subject::Webhooks(_) => {}
        _ => workload_side(ctx, out),
    }
}

/// The APIService's id.
fn id_of(a: &ApiService) -> ObjectRef {
    ObjectRef::new(Kind::ApiService, "", a.metadata.name.as_deref().unwrap_or_default())
}

/// The finding's text: what `a` serves through which Service, and why it can be down.
fn message(a: &ApiService, reasons: &[String]) -> String {
    let svc = a.spec.service.as_ref().map(|s| format!("{}/{}", s.namespace, s.name)).unwrap_or_default();
    format!("{} serves {} through Service {svc}, and {}. {CONSEQUENCE}", id_of(a), a.api(), reasons.join("; and "))
}

/// Why the pods behind `service` can all be gone at once: the workloads it selects run one
/// replica or none at their floor, or (where the pods are known) it selects no pod at all.
struct Backing {
    reason: String,
    fix: String,
    workloads: Vec<ObjectRef>,
}

fn backing(ctx: &Ctx, api: &ObjectRef, service: &ServiceInfo) -> Option<Backing> {
    let sel = service.selector.as_ref()?;
    let (namespace, name) = (&service.id.namespace, &service.id.name);
    let workloads = ctx.view.workloads_selected_by(namespace, sel);
    let judged: Vec<_> = workloads.iter().map(|w| (w, bounds(w, ctx.view))).collect();
    if judged.is_empty() {
        // No workload of the view: the pods of a DaemonSet or of bare pods may answer; only
        // where the pods are known (the audit) is "no pod" a fact.
        let pods_known = ctx.absence_is_fact() && ctx.view.knows_nodes();
        let any_pod =
            || ctx.view.pods_in(namespace).iter().any(|p| !p.phase.terminal() && selector::matches(sel, &p.labels));
        if !pods_known || any_pod() {
            return None;
        }
        return Some(Backing {
            reason: format!("the Service (selector {}) selects no pod at all", render(sel)),
            fix: format!(
                "deploy the API server the Service {namespace}/{name} selects (at least 2 replicas on different \
                 nodes), or delete the APIService (kubectl delete apiservice {}) if nothing uses the API",
                api.name
            ),
            workloads: Vec::new(),
        });
    }
    let floor: i32 = judged.iter().map(|(_, b)| b.floor.max(0)).sum();
    if floor > 1 {
        return None;
    }
    let described = list(judged.iter().map(|(w, b)| b.describe(w)), NAMED, "; ");
    Some(Backing {
        reason: format!(
            "the Service (selector {}) selects only {described}: {} at its floor, so the node it runs on takes the API \
             with it (a failure, a drain, an upgrade)",
            render(sel),
            if floor <= 0 { "no replica" } else { "1 replica" },
        ),
        fix: format!(
            "run at least 2 replicas of {} (spec.replicas, or its autoscaler's minimum) on different nodes (a \
             topologySpreadConstraint on kubernetes.io/hostname) with a PodDisruptionBudget of maxUnavailable: 1",
            names(judged.iter().map(|(w, _)| &w.id))
        ),
        workloads: judged
            .iter()
            .flat_map(|(w, b)| std::iter::once(w.id.clone()).chain(b.hpas.iter().map(|h| h.id.clone())))
            .collect(),
    })
}

/// The APIService's write (and `check`, the audit): its Available condition, and its Service.
fn judge(ctx: &Ctx, a: &ApiService, out: &mut Emitter) {
    let Some(svc) = &a.spec.service else { return };
    let id = ctx.id();
    let service_id = ObjectRef::new(Kind::Service, &svc.namespace, &svc.name);
    let mut reasons: Vec<String> = Vec::new();
    let mut fixes: Vec<String> = Vec::new();
    let mut related = vec![service_id.clone()];
    let mut path = "spec.service".to_string();
    if let Some((i, c)) = a.unavailable() {
        path = format!("status.conditions[{i}]");
        let said = [c.reason.as_deref(), c.message.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(": ");
        reasons.push(format!(
            "the kube-aggregator reports it not Available now (Available False{})",
            if said.is_empty() { String::new() } else { format!(", {said}") }
        ));
        fixes.push(format!(
            "make the pods behind Service {}/{} Ready (kubectl get endpointslices -n {} -l \
             kubernetes.io/service-name={}; kubectl describe pod), or delete the APIService (kubectl delete apiservice \
             {}) if nothing uses the API",
            svc.namespace, svc.name, svc.namespace, svc.name, id.name
        ));
    }
    match ctx.view.service(&svc.namespace, &svc.name) {
        None if ctx.absence_is_fact() => {
            reasons.push("the Service does not exist".to_string());
            fixes.push(format!("create Service {}/{} selecting the API server's pods", svc.namespace, svc.name));
        }
        None => {}
        Some(service) => {
            if let Some(b) = backing(ctx, id, &service) {
                reasons.push(b.reason);
                fixes.push(b.fix);
                related.extend(b.workloads);
            }
        }
    }
    if reasons.is_empty() {
        return;
    }
    out.emit(&APISERVICE_UNAVAILABLE, path, message(a, &reasons), format!("{}.", fixes.join("; "))).related(related);
}

/// The Service's write: the APIServices it serves, when what it selects runs one replica or none.
fn service_side(ctx: &Ctx, out: &mut Emitter) {
    let id = ctx.id();
    let apis = ctx.view.apiservices_calling(&id.namespace, &id.name);
    if apis.is_empty() {
        return;
    }
    let Some(service) = ctx.view.service(&id.namespace, &id.name) else { return };
    for a in apis {
        let api = id_of(&a);
        let Some(b) = backing(ctx, &api, &service) else { continue };
        let related = std::iter::once(api.clone()).chain(b.workloads).collect();
        out.emit(&APISERVICE_UNAVAILABLE, "spec.selector", message(&a, &[b.reason]), format!("{}.", b.fix))
            .related(related)
            .anchored_at(Some(api));
    }
}

/// A workload's write (or its autoscaler's, or a scale write): the APIServices whose Services
/// select its pods, when the floor behind them is one replica or none.
fn workload_side(ctx: &Ctx, out: &mut Emitter) {
    // Nearly every namespace serves no aggregated API: found out first, before the bounds.
    let namespace = match ctx.subject {
        Subject::Scale { target, .. } => target.namespace.as_str(),
        _ => ctx.subject.meta().and_then(|m| m.namespace.as_deref()).unwrap_or_default(),
    };
    let services = ctx.view.apiservice_services_in(namespace);
    if services.is_empty() {
        return;
    }
    let Some(scaled) = scaled_workload(ctx) else { return };
    let (w, subject) = (&scaled.workload, ctx.id());
    for name in services {
        let Some(service) = ctx.view.service(&w.id.namespace, &name) else { continue };
        if !service.selector.as_ref().is_some_and(|s| selector::matches(s, &w.template_labels)) {
            continue;
        }
        for a in ctx.view.apiservices_calling(&w.id.namespace, &name) {
            let api = id_of(&a);
            let Some(b) = backing(ctx, &api, &service) else { continue };
            let related =
                [api.clone(), service.id.clone()].into_iter().chain(b.workloads).filter(|r| r != subject).collect();
            out.emit(&APISERVICE_UNAVAILABLE, scaled.floor_path, message(&a, &[b.reason]), format!("{}.", b.fix))
                .related(related)
                .anchored_at(Some(api));
        }
    }
}

#[cfg(test)]
#[path = "tests/apiservices.rs"]
mod tests;

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
//! Judged on the APIService itself: in `check` (its Service and workloads from the files) and in
//! the audit (the live view, with the aggregator's `Available` condition and the pods). The
//! webhook does not intercept APIServices, and the live view does not watch them, so a write of
//! the Service or the workload behind one is not judged at admission.

use super::context::{Ctx, Emitter};
use crate::core::catalogue::Rule;
use crate::core::model::apiservice::ApiService;
use crate::core::model::selector::{self, render};
use crate::core::model::words::{NAMED, list, names};
use crate::core::model::{ObjectRef, Subject};
use crate::core::view::{View, bounds};
use crate::declare_rule;

declare_rule!(pub APISERVICE_UNAVAILABLE, "apiservice-unavailable", Warn, judged: CheckAndAudit, "an aggregated APIService is not Available, or one replica (or none) serves it");

pub static RULES: &[&Rule] = &[&APISERVICE_UNAVAILABLE];

/// What breaks while the API does not answer: said by every message.
const CONSEQUENCE: &str = "While no pod behind it answers, the aggregated API is unavailable cluster-wide: discovery \
                           reports its group as failed (kubectl warns on every command; Helm, kubectl api-resources \
                           and controllers that need complete discovery fail), and the namespace controller cannot \
                           list the namespace's resources, so every namespace being deleted stays Terminating.";

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    if let Subject::ApiService(a) = ctx.subject {
        judge(ctx, a, out);
    }
}

fn judge(ctx: &Ctx, a: &ApiService, out: &mut Emitter) {
    let Some(svc) = &a.spec.service else { return };
    let id = ctx.id();
    let service_id = ObjectRef::new(crate::core::model::Kind::Service, &svc.namespace, &svc.name);
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
            if let Some(sel) = &service.selector {
                let workloads = ctx.view.workloads_selected_by(&svc.namespace, sel);
                let judged: Vec<_> = workloads.iter().map(|w| (w, bounds(w, ctx.view))).collect();
                let floor: i32 = judged.iter().map(|(_, b)| b.floor.max(0)).sum();
                related.extend(judged.iter().map(|(w, _)| w.id.clone()));
                if judged.is_empty() {
                    // No workload of the view: the pods of a DaemonSet or of bare pods may answer;
                    // only where the pods are known (the audit) is "no pod" a fact.
                    let pods_known = ctx.absence_is_fact() && ctx.view.knows_nodes();
                    let any_pod = || {
                        ctx.view
                            .pods_in(&svc.namespace)
                            .iter()
                            .any(|p| !p.phase.terminal() && selector::matches(sel, &p.labels))
                    };
                    if pods_known && !any_pod() {
                        reasons.push(format!("the Service (selector {}) selects no pod at all", render(sel)));
                        fixes.push(format!(
                            "deploy the API server the Service {}/{} selects (at least 2 replicas on different \
                             nodes), or delete the APIService (kubectl delete apiservice {}) if nothing uses the API",
                            svc.namespace, svc.name, id.name
                        ));
                    }
                } else if floor <= 1 {
                    let described = list(judged.iter().map(|(w, b)| b.describe(w)), NAMED, "; ");
                    reasons.push(format!(
                        "the Service (selector {}) selects only {described}: {} at its floor, so the node it runs on \
                         takes the API with it (a failure, a drain, an upgrade)",
                        render(sel),
                        if floor <= 0 { "no replica" } else { "1 replica" },
                    ));
                    fixes.push(format!(
                        "run at least 2 replicas of {} (spec.replicas, or its autoscaler's minimum) on different \
                         nodes (a topologySpreadConstraint on kubernetes.io/hostname) with a PodDisruptionBudget of \
                         maxUnavailable: 1",
                        names(judged.iter().map(|(w, _)| &w.id))
                    ));
                }
            }
        }
    }
    if reasons.is_empty() {
        return;
    }
    out.emit(
        &APISERVICE_UNAVAILABLE,
        path,
        format!(
            "{id} serves {} through Service {}/{}, and {}. {CONSEQUENCE}",
            a.api(),
            svc.namespace,
            svc.name,
            reasons.join("; and ")
        ),
        format!("{}.", fixes.join("; ")),
    )
    .related(related);
}

#[cfg(test)]
#[path = "tests/apiservices.rs"]
mod tests;

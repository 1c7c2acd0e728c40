//! Admission webhooks that can stop the cluster: `webhook-fail-closed-unavailable`.
//!
//! A webhook with `failurePolicy: Fail` (unset is `Fail` in v1) makes the apiserver refuse every
//! request it intercepts while it cannot be called. Its backend can vanish with one node when the
//! Service it calls selects only workloads that run one replica, or whose replicas nothing keeps on
//! different nodes, or that no PodDisruptionBudget keeps one pod of while letting another go; a
//! `clientConfig.url` is one endpoint. Found on the writes of the three objects of the relation:
//! the webhook configuration, the Service (its selector) and the workload (or its autoscaler, or a
//! scale write). The finding belongs to the webhook configuration (its anchor).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::context::{Ctx, Emitter, Scaled, pod_path, scaled_workload};
use crate::core::catalogue::Rule;
use crate::core::model::arith;
use crate::core::model::pod::HOSTNAME;
use crate::core::model::selector::{self, render};
use crate::core::model::words::{NAMED, list, names};
use crate::core::model::{ObjectRef, Subject};
use crate::core::view::{
    Absences, Backend, Bounds, FailClosedWebhook, ServiceInfo, View, WebhookConfigInfo, WorkloadInfo, bounds,
};
use crate::declare_rule;

declare_rule!(pub WEBHOOK_FAIL_CLOSED_UNAVAILABLE, "webhook-fail-closed-unavailable", Warn, "a failurePolicy Fail webhook whose backend can vanish with one node, or is one URL");

pub static RULES: &[&Rule] = &[&WEBHOOK_FAIL_CLOSED_UNAVAILABLE];

/// Details of this many webhooks of a group are given; the others are only named.
const DETAILED: usize = 3;

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    match ctx.subject {
        Subject::Webhooks(_) => config_side(ctx, out),
        Subject::Service(_) => service_side(ctx, out),
        _ => workload_side(ctx, out),
    }
}

/// The webhook configuration's write: every group of its fail-closed webhooks that share a backend.
fn config_side(ctx: &Ctx, out: &mut Emitter) {
    let id = ctx.id();
    let Some(config) = ctx.view.webhook_config(id.kind, &id.name) else { return };
    for (backend, hooks) in groups(ctx.view, &config) {
        match backend {
            Backend::Url(url) => {
                let path = format!("webhooks[{}].clientConfig.url", hooks[0].index);
                let (what, fix) = url_message(&config, url, &hooks);
                out.emit(&WEBHOOK_FAIL_CLOSED_UNAVAILABLE, path, what, fix);
            }
            Backend::Service { namespace, name } => {
                let Some(service) = ctx.view.service(namespace, name) else { continue };
                let Some(risk) = backend_risk(ctx, &service) else { continue };
                let path = format!("webhooks[{}].failurePolicy", hooks[0].index);
                let (what, fix) = service_message(&config, &service, &hooks, &risk);
                out.emit(&WEBHOOK_FAIL_CLOSED_UNAVAILABLE, path, what, fix).related(related(&risk, &service, id));
            }
        }
    }
}

/// The Service's write: the configurations whose fail-closed webhooks call it.
fn service_side(ctx: &Ctx, out: &mut Emitter) {
    let id = ctx.id();
    let Some(service) = ctx.view.service(&id.namespace, &id.name) else { return };
    let configs = ctx.view.webhooks_calling(&id.namespace, &id.name);
    if configs.is_empty() {
        return;
    }
    let Some(risk) = backend_risk(ctx, &service) else { return };
    for config in configs {
        let hooks = calling(ctx.view, &config, &service.id);
        if hooks.is_empty() {
            continue;
        }
        let (what, fix) = service_message(&config, &service, &hooks, &risk);
        out.emit(&WEBHOOK_FAIL_CLOSED_UNAVAILABLE, "spec.selector", what, fix)
            .related(std::iter::once(config.id.clone()).chain(related(&risk, &service, id)).collect())
            .anchored_at(Some(config.id.clone()));
    }
}

/// A workload's write (or its autoscaler's, or a scale write): the webhooks whose Services select
/// its pods.
fn workload_side(ctx: &Ctx, out: &mut Emitter) {
    // Nearly every namespace has no webhook backend: found out first, before the workload's bounds.
    let namespace = match ctx.subject {
        Subject::Scale { target, .. } => target.namespace.as_str(),
        _ => ctx.subject.meta().and_then(|m| m.namespace.as_deref()).unwrap_or_default(),
    };
    let backends = ctx.view.webhook_services_in(namespace);
    if backends.is_empty() {
        return;
    }
    let subject = ctx.id();
    let Some(scaled) = scaled_workload(ctx) else { return };
    let w = &scaled.workload;
    let namespace = &w.id.namespace;
    for name in backends {
        let Some(service) = ctx.view.service(namespace, &name) else { continue };
        if !service.selector.as_ref().is_some_and(|s| selector::matches(s, &w.template_labels)) {
            continue;
        }
        let Some(risk) = backend_risk(ctx, &service) else { continue };
        let path = workload_path(scaled, &risk);
        for config in ctx.view.webhooks_calling(namespace, &name) {
            let hooks = calling(ctx.view, &config, &service.id);
            if hooks.is_empty() {
                continue;
            }
            let (what, fix) = service_message(&config, &service, &hooks, &risk);
            out.emit(&WEBHOOK_FAIL_CLOSED_UNAVAILABLE, path.clone(), what, fix)
                .related(std::iter::once(config.id.clone()).chain(related(&risk, &service, subject)).collect())
                .anchored_at(Some(config.id.clone()));
        }
    }
}

/// Whether the webhook can intercept a write now: one whose namespaceSelector matches no
/// namespace of the cluster (an injector waiting for a label no namespace carries yet) refuses
/// nothing while its backend is down, and is not held against it. Only a view that follows the
/// cluster knows every namespace; elsewhere every webhook counts.
fn intercepts_somewhere(view: &dyn View, hook: &FailClosedWebhook) -> bool {
    hook.namespace_selector.as_ref().is_none_or(|s| view.any_namespace_matching(s) != Some(false))
}

/// The fail-closed webhooks of `config`, by backend, in the order they first appear.
fn groups<'c>(view: &dyn View, config: &'c WebhookConfigInfo) -> Vec<(&'c Backend, Vec<&'c FailClosedWebhook>)> {
    let mut by_backend: BTreeMap<&Backend, Vec<&FailClosedWebhook>> = BTreeMap::new();
    for hook in config.fail_closed.iter().filter(|h| intercepts_somewhere(view, h)) {
        by_backend.entry(&hook.backend).or_default().push(hook);
    }
    let mut groups: Vec<_> = by_backend.into_iter().collect();
    groups.sort_by_key(|(_, hooks)| hooks[0].index);
    groups
}

/// The webhooks of `config` calling `service` that can intercept a write now.
fn calling<'a>(view: &dyn View, config: &'a WebhookConfigInfo, service: &ObjectRef) -> Vec<&'a FailClosedWebhook> {
    config
        .fail_closed
        .iter()
        .filter(|h| intercepts_somewhere(view, h))
        .filter(|h| {
            matches!(&h.backend, Backend::Service { namespace, name }
                if *namespace == service.namespace && *name == service.name)
        })
        .collect()
}

/// Why one workload behind a Service is not enough on its own.
#[derive(Clone, Debug, PartialEq)]
enum Weakness {
    /// Its floor is 1 (or 0).
    Floor,
    /// Several replicas, nothing keeps them on different nodes.
    NotApart,
    /// No PDB keeps one of its pods while letting another go; the text says which case.
    Unbudgeted(String),
}

/// The workloads behind a Service, each with its bounds and what makes it fragile.
struct Risk {
    workloads: Vec<(Arc<WorkloadInfo>, Bounds, Vec<Weakness>)>,
}

/// What makes the Service's backend vanish with one node, or `None` when it does not (some
/// workload behind it is sound on its own) or cannot be told (no selector, or no workload of the
/// view behind it: the pods of a DaemonSet, of bare pods, or of a workload the view does not hold).
fn backend_risk(ctx: &Ctx, service: &ServiceInfo) -> Option<Risk> {
    let view: &dyn View = ctx.view;
    let sel = service.selector.as_ref()?;
    let workloads = view.workloads_selected_by(&service.id.namespace, sel);
    if workloads.is_empty() {
        return None;
    }
    let mut judged = Vec::new();
    for w in workloads {
        let b = bounds(&w, view);
        let weaknesses = weaknesses(view, &w, &b, ctx.absences);
        if weaknesses.is_empty() {
            return None;
        }
        judged.push((w, b, weaknesses));
    }
    Some(Risk { workloads: judged })
}

fn weaknesses(view: &dyn View, w: &WorkloadInfo, b: &Bounds, absences: Absences) -> Vec<Weakness> {
    if b.floor <= 1 {
        return vec![Weakness::Floor];
    }
    let mut found = Vec::new();
    if !w.kept_apart {
        found.push(Weakness::NotApart);
    }
    if let Some(why) = unbudgeted(view, w, absences) {
        found.push(Weakness::Unbudgeted(why));
    }
    found
}

/// `None` when a PDB covering `w` keeps at least one of the pods it covers while allowing at least
/// one eviction (at the floors, DESIGN.md §3); else why not. No PDB at all is an absence: at an
/// admission that withholds absences the PDB may be the next object of the same apply, so it is
/// not held against the backend there.
fn unbudgeted(view: &dyn View, w: &WorkloadInfo, absences: Absences) -> Option<String> {
    let covering = view.pdbs_covering(&w.id.namespace, &w.template_labels);
    if covering.is_empty() {
        if absences.withheld() {
            return None;
        }
        return Some(
            "no PodDisruptionBudget covers it, so a drain of several nodes at once (a node-pool upgrade, \
             autoscaler consolidation) may evict every replica together"
                .to_string(),
        );
    }
    let mut why = Vec::new();
    for pdb in &covering {
        let Some(sel) = &pdb.selector else { continue };
        let expected: i32 =
            view.workloads_selected_by(&pdb.id.namespace, sel).iter().map(|o| bounds(o, view).floor).sum();
        let Ok(d) = arith::disruption(&pdb.budget(), expected) else { continue };
        if d.desired_healthy >= 1 && d.allowed >= 1 {
            return None;
        }
        why.push(if d.allowed >= 1 {
            format!("PodDisruptionBudget {} ({}) keeps none of its pods up", pdb.id.name, pdb.budget().describe())
        } else {
            format!(
                "PodDisruptionBudget {} ({}) allows no eviction at its floor, so drains stall until someone \
                 forces them",
                pdb.id.name,
                pdb.budget().describe()
            )
        });
    }
    Some(list(&why, NAMED, "; "))
}

/// Where the finding points on a workload-side write: the field that makes the backend fragile.
fn workload_path(scaled: &Scaled, risk: &Risk) -> String {
    if scaled.anchored_elsewhere {
        return scaled.floor_path.to_string();
    }
    let own = risk.workloads.iter().find(|(w, _, _)| w.id == scaled.workload.id).map(|(_, _, weak)| weak);
    match own.and_then(|weak| weak.first()) {
        Some(Weakness::NotApart) => pod_path("topologySpreadConstraints"),
        Some(Weakness::Unbudgeted(_)) => "spec.template.metadata.labels".to_string(),
        Some(Weakness::Floor) | None => scaled.floor_path.to_string(),
    }
}

/// The webhook configuration, the Service and the workloads behind it with their autoscalers,
/// without the subject.
fn related(risk: &Risk, service: &ServiceInfo, subject: &ObjectRef) -> Vec<ObjectRef> {
    std::iter::once(service.id.clone())
        .chain(
            risk.workloads
                .iter()
                .flat_map(|(w, b, _)| std::iter::once(w.id.clone()).chain(b.hpas.iter().map(|h| h.id.clone()))),
        )
        .filter(|r| r != subject)
        .collect()
}

/// Who calls, and what they intercept: ("webhook w (failurePolicy Fail)", "it intercepts: pods
/// CREATE in every namespace"), or for several ("18 webhooks with failurePolicy Fail", "they
/// intercept: a: ...; b: ...; c: ...; and 15 more: ..."): the first few in full, by reach (the
/// widest harm first: those that intercept pods, workloads, namespaces and the like before custom
/// resources; then every namespace, every namespace but some, only labelled ones), the others by
/// name in the same order. The calling part comes
/// first in a message, what they intercept last: a warning the apiserver cuts to 256 characters
/// still says what is wrong.
fn describe_hooks(hooks: &[&FailClosedWebhook]) -> (String, String) {
    if let [one] = hooks {
        return (format!("webhook {} (failurePolicy Fail)", one.name), format!("it intercepts: {}", one.intercepts));
    }
    let mut ordered: Vec<&&FailClosedWebhook> = hooks.iter().collect();
    ordered.sort_by_key(|h| h.reach.rank());
    let detailed: Vec<String> =
        ordered.iter().take(DETAILED).map(|h| format!("{}: {}", h.name, h.intercepts)).collect();
    let mut details = format!("they intercept: {}", detailed.join("; "));
    if hooks.len() > DETAILED {
        let rest = &ordered[DETAILED..];
        details.push_str(&format!("; and {} more: {}", rest.len(), names(rest.iter().map(|h| &h.name))));
    }
    (format!("{} webhooks with failurePolicy Fail", hooks.len()), details)
}

fn service_message(
    config: &WebhookConfigInfo,
    service: &ServiceInfo,
    hooks: &[&FailClosedWebhook],
    risk: &Risk,
) -> (String, String) {
    let calls = if hooks.len() == 1 { "calls" } else { "call" };
    let backends: Vec<String> = risk
        .workloads
        .iter()
        .map(|(w, b, weak)| {
            let reasons: Vec<String> = weak
                .iter()
                .map(|k| match k {
                    Weakness::Floor if b.floor <= 0 => {
                        "it can run 0 replicas, and then no pod answers at all".to_string()
                    }
                    Weakness::Floor => {
                        "it runs 1 replica at its floor, so the node it runs on takes the webhook with it \
                         (a failure, a drain, an upgrade)"
                            .to_string()
                    }
                    Weakness::NotApart => format!(
                        "it runs at least {} replicas but nothing keeps them on different nodes (no \
                         topologySpreadConstraint on {HOSTNAME}, no pod anti-affinity against its own pods)",
                        b.floor
                    ),
                    Weakness::Unbudgeted(why) => why.clone(),
                })
                .collect();
            format!("{}: {}", b.describe(w), reasons.join("; "))
        })
        .collect();
    let only = if risk.workloads.len() == 1 { "the only workload behind it is" } else { "the workloads behind it are" };
    let (who, details) = describe_hooks(hooks);
    let what = format!(
        "{}: {who} {calls} Service {}/{} (selector {}), and {only} {}. While no backend pod answers, the \
         apiserver refuses every request {details}.",
        config.id,
        service.id.namespace,
        service.id.name,
        service.selector.as_ref().map(render).unwrap_or_default(),
        list(&backends, NAMED, "; ")
    );
    let mut fixes = Vec::new();
    for (w, _, weak) in &risk.workloads {
        let sel = w.selector.as_deref().map(render).unwrap_or_else(|| selector::render_labels(&w.template_labels));
        for k in weak {
            fixes.push(match k {
                Weakness::Floor => format!(
                    "run at least 2 replicas of {} (spec.replicas, or its autoscaler's minimum) kept on different \
                     nodes with a PodDisruptionBudget of maxUnavailable: 1",
                    w.id
                ),
                Weakness::NotApart => format!(
                    "keep the replicas of {} on different nodes (a topologySpreadConstraint {{maxSkew: 1, \
                     topologyKey: {HOSTNAME}, whenUnsatisfiable: ScheduleAnyway, labelSelector: {sel}}})",
                    w.id
                ),
                Weakness::Unbudgeted(_) => {
                    format!("cover {} with one PodDisruptionBudget of maxUnavailable: 1 (selector {sel})", w.id)
                }
            });
        }
    }
    fixes.dedup();
    let fix = format!(
        "{}; or, where letting these requests through unchecked is safer than refusing them, set failurePolicy: \
         Ignore.",
        list(&fixes, NAMED, "; ")
    );
    (what, fix)
}

fn url_message(config: &WebhookConfigInfo, url: &str, hooks: &[&FailClosedWebhook]) -> (String, String) {
    let calls = if hooks.len() == 1 { "calls" } else { "call" };
    let (who, details) = describe_hooks(hooks);
    let what = format!(
        "{}: {who} {calls} the URL {url}, one endpoint: while it does not answer (its host, the node it runs on, \
         the network to it), the apiserver refuses every request {details}.",
        config.id
    );
    let fix = "call a Service instead (clientConfig.service) whose workload runs at least 2 replicas on different \
               nodes with a PodDisruptionBudget, or set failurePolicy: Ignore; if the URL is itself a load-balanced, \
               highly available endpoint, exempt the configuration with the annotation \
               ha-guard.io/allow-webhook-fail-closed-unavailable: \"<why>\"."
        .to_string();
    (what, fix)
}

#[cfg(test)]
#[path = "tests/webhooks.rs"]
mod tests;

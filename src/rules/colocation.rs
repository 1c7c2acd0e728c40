//! Replicas that can land on one node: `spread-unsatisfiable`, `replicas-colocated`,
//! `host-network-colocation`.

use k8s_openapi::api::core::v1::{PodAffinityTerm, PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{pod_path, scaled_workload};
use crate::catalogue::{Action, Rule};
use crate::engine::{Ctx, Emitter};
use crate::model::{Subject, Workload};
use crate::selector;
use crate::view::{NodeInfo, View};

pub static RULES: &[Rule] = &[
    Rule {
        id: "spread-unsatisfiable",
        default: Action::Warn,
        default_text: "warn",
        summary: "the ceiling exceeds what the schedulable nodes can place under the hard constraints",
        doc: include_str!("../../docs/rules/spread-unsatisfiable.md"),
    },
    Rule {
        id: "replicas-colocated",
        default: Action::Warn,
        default_text: "warn",
        summary: "several replicas and nothing keeps them on different nodes",
        doc: include_str!("../../docs/rules/replicas-colocated.md"),
    },
    Rule {
        id: "host-network-colocation",
        default: Action::Deny,
        default_text: "deny",
        summary: "hostNetwork with several replicas and no hard one-per-node rule",
        doc: include_str!("../../docs/rules/host-network-colocation.md"),
    },
];

pub const HOSTNAME: &str = "kubernetes.io/hostname";

/// Whether `sel` selects the workload's own pods. A manifest without `spec.selector` (a kustomize
/// base or patch) does not carry its final labels yet: kustomize adds the same labels to the
/// selector and the pod template when it renders. Its own pods cannot be told apart then, so a
/// selector is taken to be against them rather than firing on labels the fragment never had.
fn selects_own(sel: &LabelSelector, w: &Workload) -> bool {
    w.selector.is_none() || selector::matches(sel, w.template_labels())
}

fn against_own(term: &PodAffinityTerm, w: &Workload) -> bool {
    term.label_selector.as_ref().is_some_and(|s| selects_own(s, w))
}

fn required_anti_affinity(spec: &PodSpec) -> &[PodAffinityTerm] {
    spec.affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|p| p.required_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default()
}

fn preferred_anti_affinity(spec: &PodSpec) -> impl Iterator<Item = &PodAffinityTerm> {
    spec.affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|w| &w.pod_affinity_term)
}

/// A required pod anti-affinity on `kubernetes.io/hostname` against its own pods: one per node.
pub(crate) fn one_per_node_affinity(w: &Workload) -> bool {
    w.pod_spec()
        .is_some_and(|s| required_anti_affinity(s).iter().any(|t| t.topology_key == HOSTNAME && against_own(t, w)))
}

/// A hostname spread against its own pods (`hard`: only `DoNotSchedule` ones).
fn hostname_spread(w: &Workload, hard: bool) -> bool {
    super::spread::constraints(w).iter().any(|c| {
        c.topology_key == HOSTNAME
            && (!hard || c.when_unsatisfiable == "DoNotSchedule")
            && c.label_selector.as_ref().is_some_and(|s| selects_own(s, w))
    })
}

/// Something keeps replicas apart: a hostname spread or any pod anti-affinity (required or
/// preferred, any topology: distinct zones are distinct nodes too) against its own pods.
pub fn kept_apart(w: &Workload) -> bool {
    hostname_spread(w, false)
        || w.pod_spec().is_some_and(|s| {
            required_anti_affinity(s).iter().chain(preferred_anti_affinity(s)).any(|t| against_own(t, w))
        })
}

pub fn host_network_unprotected(w: &Workload) -> bool {
    w.pod_spec().is_some_and(|s| s.host_network == Some(true)) && !one_per_node_affinity(w) && !hostname_spread(w, true)
}

fn tolerates(tolerations: &[Toleration], node: &NodeInfo) -> bool {
    node.taints.iter().all(|taint| {
        tolerations.iter().any(|t| {
            let key_ok = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(k) => k == taint.key,
            };
            let value_ok = t.operator.as_deref() == Some("Exists")
                || t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("");
            let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == taint.effect);
            key_ok && value_ok && effect_ok
        })
    })
}

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    let Some(scaled) = scaled_workload(ctx) else { return };
    let w = &scaled.workload;
    let (floor, ceiling) = (scaled.bounds.floor, scaled.bounds.ceiling);
    let subject = ctx.subject.id();
    let scale = scaled.bounds.describe(w);

    if floor > 1 && !w.kept_apart {
        out.emit(
            "replicas-colocated",
            Action::Warn,
            if scaled.anchored_elsewhere { scaled.floor_path.to_string() } else { pod_path("topologySpreadConstraints") },
            format!(
                "{scale} runs at least {floor} replicas but nothing keeps them on different nodes (no \
                 topologySpreadConstraint on {HOSTNAME} and no pod anti-affinity against its own pods): two \
                 replicas on one node are one replica, and a node failure or drain takes both."
            ),
            format!(
                "add a topologySpreadConstraint {{maxSkew: 1, topologyKey: {HOSTNAME}, whenUnsatisfiable: \
                 ScheduleAnyway, labelSelector: {}}} to the pod template (the inject-default-spread mutation can add it).",
                w.selector.as_deref().map(selector::render).unwrap_or_else(|| selector::render_labels(&w.template_labels))
            ),
            scaled.related(&subject),
            scaled.anchor(),
        );
    }

    if ceiling > 1 && w.host_network_unprotected {
        out.emit(
            "host-network-colocation",
            Action::Deny,
            if scaled.anchored_elsewhere { scaled.ceiling_path.to_string() } else { pod_path("hostNetwork") },
            format!(
                "{scale} uses hostNetwork: true and can run {ceiling} replicas, but nothing forces one replica \
                 per node: a second replica scheduled onto the same node fails to bind its host ports and \
                 crash-loops."
            ),
            format!(
                "add a required pod anti-affinity on {HOSTNAME} against the workload's own pods, or a \
                 topologySpreadConstraint on {HOSTNAME} with whenUnsatisfiable: DoNotSchedule; or run one replica."
            ),
            scaled.related(&subject),
            scaled.anchor(),
        );
    }

    // spread-unsatisfiable needs the pod spec and the nodes: the workload's own write, live view.
    let Subject::Workload(full) = ctx.subject else { return };
    if !ctx.view.knows_nodes() || ceiling < 1 {
        return;
    }
    let Some(spec) = full.pod_spec() else { return };
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let node_selector = spec.node_selector.clone().unwrap_or_default();
    let nodes = ctx
        .view
        .nodes()
        .into_iter()
        .filter(|n| !n.unschedulable && tolerates(tolerations, n))
        .filter(|n| node_selector.iter().all(|(k, v)| n.labels.get(k) == Some(v)))
        .count() as i32;
    let mut capacity: Option<(i32, String, String)> = None;
    if one_per_node_affinity(full) {
        capacity = Some((
            nodes,
            pod_path("affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
            format!("a required pod anti-affinity on {HOSTNAME} places at most one replica per node"),
        ));
    }
    for (i, c) in super::spread::constraints(full).iter().enumerate() {
        let min_domains = c.min_domains.unwrap_or(1);
        if c.topology_key == HOSTNAME && c.when_unsatisfiable == "DoNotSchedule" && min_domains > nodes {
            let cap = c.max_skew.saturating_mul(nodes);
            if capacity.as_ref().is_none_or(|(c0, _, _)| cap < *c0) {
                capacity = Some((
                    cap,
                    pod_path(&format!("topologySpreadConstraints[{i}].minDomains")),
                    format!(
                        "topologySpreadConstraints[{i}] asks for minDomains {min_domains} above the {nodes} \
                         schedulable nodes, so each node may hold at most maxSkew {} replicas",
                        c.max_skew
                    ),
                ));
            }
        }
    }
    if let Some((cap, path, why)) = capacity
        && ceiling > cap
    {
        out.emit(
            "spread-unsatisfiable",
            Action::Warn,
            path,
            format!(
                "{scale} can run {ceiling} replicas but the cluster has {nodes} schedulable nodes and {why}: \
                     at most {cap} can be placed, the rest stay Pending."
            ),
            "lower replicas (or the HPA's maxReplicas) to what the nodes can hold, relax the constraint to \
                 ScheduleAnyway or a preferred anti-affinity, or add nodes."
                .to_string(),
            vec![],
            None,
        );
    }
}

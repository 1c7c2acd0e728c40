//! Replicas that can land on one node: `spread-unsatisfiable`, `replicas-colocated`,
//! `host-network-colocation`.

use super::context::{Ctx, Emitter, pod_path, scaled_workload};
use crate::core::catalogue::{CelRule, Rule, WORKLOADS};
use crate::core::model::Subject;
use crate::core::model::limits;
use crate::core::model::object::Workload;
use crate::core::model::pod::{HOSTNAME, NotApart, declared_host_ports, not_apart, spread_constraints};
use crate::core::model::selector;
use crate::core::model::words::{NAMED, and_more, list, names};
use crate::core::view::View;
use crate::core::view::capacity::{Binding, Capacity, SpreadLimit};
use crate::core::view::nodes::NodeTable;
use k8s_openapi::api::core::v1::PodSpec;

const UNSATISFIABLE_FIX: &str = "lower replicas (or the HPA's maxReplicas) to what the nodes can hold, relax the \
                                 constraint to ScheduleAnyway or a preferred anti-affinity, or add nodes.";
use crate::declare_rule;

declare_rule!(pub SPREAD_UNSATISFIABLE, "spread-unsatisfiable", Warn, judged: WithNodes, "the ceiling exceeds what the schedulable nodes can place under the hard constraints");
declare_rule!(pub REPLICAS_COLOCATED, "replicas-colocated", Warn, "several replicas and nothing keeps them on different nodes");
declare_rule!(pub HOST_NETWORK_COLOCATION, "host-network-colocation", Deny, "hostNetwork with several replicas and no hard one-per-node rule");

pub static RULES: &[&Rule] = &[&SPREAD_UNSATISFIABLE, &REPLICAS_COLOCATED, &HOST_NETWORK_COLOCATION];

/// `host-network-colocation` in CEL: [`host_network_unprotected`](crate::core::model::pod::host_network_unprotected)
/// with the ceiling from `spec.replicas` only.
pub static HOST_NETWORK_COLOCATION_CEL: CelRule = CelRule {
    rule: &HOST_NETWORK_COLOCATION,
    resources: WORKLOADS,
    findings: concat!(
        "o.spec.?replicas.orValue(1) > 1 && o.spec.template.spec.?hostNetwork.orValue(false) && \
         !o.spec.template.spec.?affinity.?podAntiAffinity.?requiredDuringSchedulingIgnoredDuringExecution.orValue([])\
         .exists(t, t.topologyKey == 'kubernetes.io/hostname' && has(t.labelSelector) && ",
        crate::cel_selector_matches!("t.labelSelector", "o.spec.template.?metadata.?labels.orValue({})"),
        ") && !o.spec.template.spec.?topologySpreadConstraints.orValue([]).exists(t, t.topologyKey == \
         'kubernetes.io/hostname' && t.whenUnsatisfiable == 'DoNotSchedule' && has(t.labelSelector) && ",
        crate::cel_selector_matches!("t.labelSelector", "o.spec.template.?metadata.?labels.orValue({})"),
        ") && !(o.spec.template.spec.containers + o.spec.template.spec.?initContainers.orValue([]).filter(c, \
         c.?restartPolicy.orValue('') == 'Always')).exists(c, size(c.?ports.orValue([])) > 0) ? [{'path': \
         'spec.template.spec.hostNetwork', 'action': 'deny', 'what': request.kind.kind + ' ' + \
         o.metadata.?name.orValue('') + ' (replicas ' + string(o.spec.?replicas.orValue(1)) + ') uses hostNetwork: \
         true and can run ' + string(o.spec.?replicas.orValue(1)) + ' replicas, but nothing keeps two of them off one \
         node: no container declares a port (containerPort), and there is no required pod anti-affinity or \
         DoNotSchedule spread on kubernetes.io/hostname, so the scheduler may place two on one node, where the second \
         fails to bind the host ports its process opens and crash-loops.', 'fix': \"declare the ports the containers \
         listen on (ports[].containerPort: under hostNetwork each is a host port, and the scheduler places at most one \
         replica per node), or add a required pod anti-affinity on kubernetes.io/hostname against the workload's own \
         pods, or a topologySpreadConstraint on kubernetes.io/hostname with whenUnsatisfiable: DoNotSchedule; or run \
         one replica.\"}] : []"
    ),
    partial: Some(
        "the workload's own spec.replicas; where an HPA or ScaledObject raises the ceiling, and on the autoscaler's \
         and scale writes, the webhook's",
    ),
};

pub fn evaluate(ctx: &Ctx, out: &mut Emitter) {
    let Some(scaled) = scaled_workload(ctx) else { return };
    let w = &scaled.workload;
    let (floor, ceiling) = (scaled.bounds.floor, scaled.bounds.ceiling);
    let subject = ctx.id();
    // Only a finding reads it: most writes emit none.
    let scale = || scaled.bounds.describe(w);

    if floor > 1 && !w.kept_apart {
        let scale = scale();
        // On the workload's own write, name what it has that does not keep replicas apart (and
        // point at it); from an HPA or a scale write only the projection is known.
        let gap = match ctx.subject {
            Subject::Workload(full) => not_apart(full),
            _ => NotApart::Nothing,
        };
        let selector =
            w.selector.as_deref().map(selector::render).unwrap_or_else(|| selector::render_labels(&w.template_labels));
        let why = match &gap {
            NotApart::Nothing => {
                format!("no topologySpreadConstraint on {HOSTNAME} and no pod anti-affinity against its own pods")
            }
            NotApart::SpreadWithoutSelector(i) => format!(
                "topologySpreadConstraints[{i}] on {HOSTNAME} has no labelSelector, so it counts no pods and keeps \
                 none apart"
            ),
            NotApart::SpreadOtherPods(i) => format!(
                "topologySpreadConstraints[{i}] on {HOSTNAME} selects other pods than its own ({selector}), so it \
                 does not count its replicas"
            ),
            NotApart::AntiAffinityOtherPods { required, index } => format!(
                "its {} pod anti-affinity [{index}] selects other pods than its own ({selector}), so it does not keep \
                 its replicas apart",
                if *required { "required" } else { "preferred" }
            ),
        };
        let fix = match &gap {
            NotApart::SpreadWithoutSelector(i) | NotApart::SpreadOtherPods(i) => format!(
                "set topologySpreadConstraints[{i}].labelSelector to the workload's own selector ({selector}) (the \
                 inject-spread-selector mutation fills a missing one)."
            ),
            NotApart::AntiAffinityOtherPods { .. } => {
                format!("make the anti-affinity's labelSelector select the workload's own pods ({selector}).")
            }
            NotApart::Nothing => format!(
                "add a topologySpreadConstraint {{maxSkew: 1, topologyKey: {HOSTNAME}, whenUnsatisfiable: \
                 ScheduleAnyway, labelSelector: {selector}}} to the pod template (the inject-default-spread mutation can \
                 add it)."
            ),
        };
        out.emit(
            &REPLICAS_COLOCATED,
            if scaled.anchored_elsewhere { scaled.floor_path.to_string() } else { pod_path(&gap.field()) },
            format!(
                "{scale} runs at least {floor} replicas but nothing keeps them on different nodes ({why}): two \
                 replicas on one node are one replica, and a node failure or drain takes both."
            ),
            fix,
        )
        .related(scaled.related(subject))
        .anchored_at(scaled.anchor());
    }

    // Declared ports (with hostNetwork every containerPort is a host port) are known to the
    // scheduler, which keeps replicas on distinct nodes: no co-location, and what the ports cost
    // (replicas beyond the nodes, drain replacements Pending) is spread-unsatisfiable's and the
    // drain replay's. Undeclared ones it knows nothing of: the second process fails to bind.
    if ceiling > 1 && w.host_network_unprotected {
        let scale = scale();
        out.emit(
            &HOST_NETWORK_COLOCATION,
            if scaled.anchored_elsewhere { scaled.ceiling_path.to_string() } else { pod_path("hostNetwork") },
            format!(
                "{scale} uses hostNetwork: true and can run {ceiling} replicas, but nothing keeps two of them off \
                 one node: no container declares a port (containerPort), and there is no required pod \
                 anti-affinity or DoNotSchedule spread on {HOSTNAME}, so the scheduler may place two on one \
                 node, where the second fails to bind the host ports its process opens and crash-loops."
            ),
            format!(
                "declare the ports the containers listen on (ports[].containerPort: under hostNetwork each is a \
                 host port, and the scheduler places at most one replica per node), or add a required pod \
                 anti-affinity on {HOSTNAME} against the workload's own pods, or a topologySpreadConstraint on \
                 {HOSTNAME} with whenUnsatisfiable: DoNotSchedule; or run one replica."
            ),
        )
        .related(scaled.related(subject))
        .anchored_at(scaled.anchor())
        .needing_view(scaled.from_view());
    }

    // spread-unsatisfiable needs the pod spec and the nodes: the workload's own write, live view.
    let Subject::Workload(full) = ctx.subject else { return };
    if !ctx.view.knows_nodes() || ceiling < 1 {
        return;
    }
    let Some(spec) = full.pod_spec() else { return };
    if let Some(over) = limits::over_node_limits(spec) {
        out.not_judged(&SPREAD_UNSATISFIABLE, over);
        return;
    }
    // How many replicas the nodes hold, in closed form over the nodes as they are empty (the view
    // holds no pods at admission): one pass over the nodes per constraint, whatever the ceiling.
    let table = ctx.node_table();
    let Some(capacity) = ctx.capacity() else { return };
    // No node these pods may use is known (an empty cluster, a pool that scales from zero): there
    // is nothing to count against, and "at most 0" would be noise, not a bound.
    let nodes = capacity.schedulable;
    if nodes == 0 {
        return;
    }
    let Some(cap) = capacity.at_most.filter(|cap| *cap < ceiling as u64) else { return };
    let (path, why, fix) = unsatisfiable_because(full, spec, capacity);
    let scale = scale();
    match node_autoscaler(ctx.view, table) {
        None => out.emit(
            &SPREAD_UNSATISFIABLE,
            path,
            format!(
                "{scale} can run {ceiling} replicas but the cluster has {nodes} schedulable nodes and {why}: \
                 at most {cap} can be placed, the rest stay Pending."
            ),
            fix,
        ),
        Some(autoscaler) => out.emit(
            &SPREAD_UNSATISFIABLE,
            path,
            format!(
                "{scale} can run {ceiling} replicas but the cluster has {nodes} schedulable nodes today and {why}: \
                 at most {cap} can be placed on today's nodes. A node autoscaler is present ({autoscaler}), so the \
                 bound is today's nodes: the rest stay Pending until it adds nodes these pods may use, if its \
                 limits and the pods' nodeSelector and tolerations let it."
            ),
            "make sure the autoscaler may add nodes these pods can use (its limits, the node pools the \
             nodeSelector allows), or lower replicas (or the HPA's maxReplicas), or relax the constraint to \
             ScheduleAnyway or a preferred anti-affinity."
                .to_string(),
        ),
    };
}

/// Where the first host port of `spec` is declared (under the pod spec), as the NodePorts filter
/// counts them ([`crate::core::model::resources::host_ports`]): `containers[i].ports[j].hostPort`,
/// or under hostNetwork `….containerPort`.
/// What keeps the replicas to `capacity`'s bound, said: the field, why, how to fix it.
fn unsatisfiable_because(full: &Workload, spec: &PodSpec, capacity: &Capacity) -> (String, String, String) {
    let fix = || UNSATISFIABLE_FIX.to_string();
    match &capacity.binding {
        Binding::AntiAffinity { term, key, per_node } => (
            pod_path(&format!("affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{term}]")),
            if *per_node {
                format!("a required pod anti-affinity on {key} places at most one replica per node")
            } else {
                format!("a required pod anti-affinity on {key} places at most one replica per {key} domain")
            },
            fix(),
        ),
        Binding::Nodes => match first_host_port(spec).filter(|_| {
            capacity.refusals.iter().any(|r| matches!(r.unfit, crate::core::view::placement::Unfit::NodePorts(_)))
        }) {
            Some(field) => {
                let ports = declared_host_ports(full);
                (
                    pod_path(&field),
                    format!(
                        "its declared host port{} {} place{} at most one replica per node (the scheduler's NodePorts \
                         filter), and a drained node's replica stays Pending until a node with the port free takes it",
                        if ports.len() == 1 { "" } else { "s" },
                        names(&ports),
                        if ports.len() == 1 { "s" } else { "" },
                    ),
                    fix(),
                )
            }
            None => (
                pod_path("containers"),
                format!("the scheduler's filters then refuse every node ({})", list(&capacity.refusals, NAMED, "; ")),
                fix(),
            ),
        },
        Binding::Spread { index: i, limit } => {
            let c = &spread_constraints(full)[*i];
            let at = |field: &str| pod_path(&format!("topologySpreadConstraints[{i}].{field}"));
            match limit {
                SpreadLimit::MinDomains { domains, min_domains } => (
                    at("minDomains"),
                    format!(
                        "topologySpreadConstraints[{i}] asks for minDomains {min_domains} above the {domains} {} it \
                         counts, so each may hold at most maxSkew {} replicas",
                        if c.topology_key == HOSTNAME {
                            "schedulable nodes".to_string()
                        } else {
                            format!("{} domains", c.topology_key)
                        },
                        c.max_skew
                    ),
                    fix(),
                ),
                SpreadLimit::IdleDomains { described, domains, usable } => {
                    let more = and_more(domains.saturating_sub(described.len()));
                    (
                        at("nodeTaintsPolicy"),
                        format!(
                            "topologySpreadConstraints[{i}] ({}) counts {}{more} where no replica may go: \
                             nodeTaintsPolicy {} counts tainted and cordoned nodes as domains, so the global minimum \
                             stays 0 and each of the {usable} places the pods may use holds at most maxSkew {} \
                             replicas",
                            c.topology_key,
                            described.join(", "),
                            c.node_taints_policy.as_deref().unwrap_or("Ignore (the default)"),
                            c.max_skew
                        ),
                        format!(
                            "set nodeTaintsPolicy: Honor on topologySpreadConstraints[{i}] (nodes whose taints the \
                             pods do not tolerate, the cordoned ones included, are then not domains), or tolerate \
                             those taints, or relax the constraint to ScheduleAnyway."
                        ),
                    )
                }
                SpreadLimit::SmallestDomain { domain, holds } => (
                    at("maxSkew"),
                    format!(
                        "topologySpreadConstraints[{i}] keeps every {} domain within maxSkew {} of the one with \
                         the fewest, and {domain} holds at most {holds} of these pods, so no domain takes more than {}",
                        c.topology_key,
                        c.max_skew,
                        holds.saturating_add(c.max_skew.max(0) as u64)
                    ),
                    format!(
                        "add nodes these pods may use to {domain} (or room on its nodes), raise maxSkew on \
                         topologySpreadConstraints[{i}], relax it to ScheduleAnyway, or lower replicas (or the \
                         HPA's maxReplicas)."
                    ),
                ),
                SpreadLimit::NoSkew => (
                    at("maxSkew"),
                    format!(
                        "topologySpreadConstraints[{i}] has maxSkew {}, which lets no domain hold a replica",
                        c.max_skew
                    ),
                    format!("set maxSkew on topologySpreadConstraints[{i}] to 1 or more."),
                ),
            }
        }
    }
}

fn first_host_port(spec: &PodSpec) -> Option<String> {
    let host_network = spec.host_network == Some(true);
    let sidecars = spec.init_containers.iter().flatten().enumerate();
    let sidecars = sidecars.filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"));
    let all = spec.containers.iter().enumerate().map(|(i, c)| ("containers", i, c));
    let all = all.chain(sidecars.map(|(i, c)| ("initContainers", i, c)));
    for (list, i, c) in all {
        for (j, p) in c.ports.iter().flatten().enumerate() {
            if p.host_port.is_some_and(|h| h > 0) {
                return Some(format!("{list}[{i}].ports[{j}].hostPort"));
            }
            if host_network {
                return Some(format!("{list}[{i}].ports[{j}].containerPort"));
            }
        }
    }
    None
}

/// Namespaces where a node autoscaler's Deployment is looked for: the view is asked by namespace,
/// never scanned.
const AUTOSCALER_NAMESPACES: [&str; 3] = ["kube-system", "karpenter", "cluster-autoscaler"];

/// The node autoscaler the view shows, described, if any: nodes Karpenter labelled with their
/// NodePool (also EKS Auto Mode), or a Karpenter or cluster-autoscaler Deployment (by its name or
/// its pods' `app.kubernetes.io/name` / `app` label) in one of [`AUTOSCALER_NAMESPACES`].
fn node_autoscaler(view: &dyn View, table: &NodeTable) -> Option<String> {
    if let Some((node, label)) = table.autoscaled_node() {
        return Some(format!("Karpenter: node {node} is labelled {label}"));
    }
    let which = |s: &str| {
        if s.contains("karpenter") {
            Some("Karpenter")
        } else if s.contains("cluster-autoscaler") {
            Some("cluster-autoscaler")
        } else {
            None
        }
    };
    AUTOSCALER_NAMESPACES.iter().flat_map(|ns| view.workloads_in(ns)).find_map(|w| {
        let labels = ["app.kubernetes.io/name", "app"].into_iter().filter_map(|k| w.template_labels.get(k));
        std::iter::once(&w.id.name).chain(labels).find_map(|s| which(s)).map(|name| format!("{name}: {}", w.id))
    })
}

#[cfg(test)]
#[path = "tests/colocation.rs"]
mod tests;

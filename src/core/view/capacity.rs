//! How many replicas of one pod template the nodes can hold, in closed form: the count the
//! placement module reaches by placing them one after the other on the nodes as they are empty
//! ([`placement::place_replicas`](super::placement::place_replicas)), computed in one pass over the
//! nodes per constraint, whatever the replica count asked. Admission reads this; only the drain
//! replay (audit) places pods one by one.
//!
//! Each node first holds what its own limits allow (requests against allocatable, the pod count,
//! one replica where the pod wants a host port); then each hard constraint that counts the pods'
//! own replicas bounds the whole:
//!
//! - a required pod anti-affinity term against its own pods: one replica per domain of its key
//!   (nodes without the key are not bounded by it);
//! - a `DoNotSchedule` spread whose selector matches its own pods: with `cap(d)` what domain `d`'s
//!   nodes hold and `m` the smallest `cap` among the domains the spread counts (0 while fewer
//!   domains than `minDomains`), at most `Σ min(cap(d), m + maxSkew)`. The scheduler reaches it
//!   whatever order it fills the domains in: the smallest domain can never hold more than `m`, so
//!   the global minimum never exceeds `m` and no domain passes `m + maxSkew`; and while the
//!   minimum domain has room, a pod can always go there.
//!
//! Constraints whose domains are single nodes (hostname) narrow each node's share before the
//! others are counted. With at most one constraint that counts replicas across several nodes and
//! no required pod affinity, the bound is the scheduler's count ([`Capacity::exact`]); otherwise it
//! is an upper bound on it ("at most"). Required pod affinity bounds nothing here: where the
//! replicas may go then depends on the pods already running, which an admission does not see.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;

use super::nodes::{self, Column, NO_DOMAIN, NodeTable};
use super::placement::{Incoming, NodeFilter, Unfit, term_matches};
use super::projection::NodeInfo;
use crate::core::model::pod::ZONE;
use crate::core::model::resources::{Resources, host_ports, pod_requests};
use crate::core::model::selector;
use crate::core::model::words::and_more;

/// Names a message lists before "and N more".
pub const NAMED: usize = 3;

/// What the nodes hold of one pod template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// At most this many replicas can be placed; `None`: no bound (some node takes any number).
    pub at_most: Option<u64>,
    /// The bound is the placement module's count, not only an upper bound on it.
    pub exact: bool,
    /// Nodes cordon, taints and node affinity let the pods go to.
    pub schedulable: usize,
    /// Of those, the nodes that carry every hard spread's key: where the pods may go at all.
    pub usable: usize,
    /// The zones (`topology.kubernetes.io/zone`) of the schedulable nodes, in name order.
    pub zones: Vec<String>,
    /// What gives the bound (the smallest of the bounds).
    pub binding: Binding,
    /// Why the nodes take no more once full, grouped by filter: what refuses, how many nodes, the
    /// first [`NAMED`] of them by name.
    pub refusals: Vec<Refusal>,
}

/// The nodes one filter refuses: how many, and the first [`NAMED`] by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub unfit: Unfit,
    pub nodes: usize,
    pub named: Vec<String>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on {}{}",
            self.unfit,
            self.named.join(", "),
            and_more(self.nodes.saturating_sub(self.named.len()))
        )
    }
}

/// What bounds the replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Binding {
    /// The nodes' own limits: requests against allocatable, the pod count, host ports.
    Nodes,
    /// Required pod anti-affinity term `term` against the pods' own: one replica per domain of
    /// `key` (`per_node`: its domains are single nodes).
    AntiAffinity { term: usize, key: String, per_node: bool },
    /// `topologySpreadConstraints[index]` (DoNotSchedule).
    Spread { index: usize, limit: SpreadLimit },
}

/// Why a spread bounds the replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpreadLimit {
    /// Fewer counted domains than `minDomains`: the global minimum is 0, each domain holds at most
    /// `maxSkew`.
    MinDomains { domains: usize, min_domains: i32 },
    /// Counted domains where no replica may go: the minimum stays 0, each other domain holds at
    /// most `maxSkew`. The first [`NAMED`] described (node and why), and how many in all.
    IdleDomains { described: Vec<String>, domains: usize, usable: usize },
    /// Every counted domain takes replicas, and the smallest fills first: `domain` holds at most
    /// `holds`, so none holds more than `holds + maxSkew`.
    SmallestDomain { domain: String, holds: u64 },
    /// `maxSkew` below 1 (the API refuses it; a file may hold it): no replica fits.
    NoSkew,
}

/// No bound: as many as asked.
const UNBOUNDED: u64 = u64::MAX;

/// What the filters said of one node.
struct NodeFacts {
    /// It carries every hard spread's key (else no spread counts it, and no pod goes there).
    carries_hard: bool,
    /// The first filter that refuses the node outright (cordon, taints, node affinity, a hard
    /// spread's key missing), or `None`.
    refused: Option<Unfit>,
    /// Whether the pod's node affinity and taints let it go there (for the spreads' policies).
    affinity_ok: bool,
    taints_ok: bool,
    /// Replicas the node holds by its own limits, and the limit that stops it.
    cap: u64,
    full: Option<Unfit>,
}

/// [`replicas_capacity`], counted once per node table for each distinct pod
/// ([`NodeTable::remembered`]: `pod` is the whole of what it reads).
pub fn remembered_capacity(pod: Incoming, table: &Arc<NodeTable>) -> Arc<Capacity> {
    table.remembered(pod.namespace, pod.labels, pod.spec, || {
        let (namespace, labels, spec) = (pod.namespace.to_string(), pod.labels.clone(), pod.spec.clone());
        move |table: &NodeTable| {
            replicas_capacity(Incoming { namespace: &namespace, labels: &labels, spec: &spec }, table)
        }
    })
}

/// How many replicas of `pod` the nodes of `table` hold (see the module's doc).
pub fn replicas_capacity(pod: Incoming, table: &NodeTable) -> Capacity {
    let nodes = table.nodes();
    let spec = pod.spec;
    // Each hard spread with its key's domains over the nodes (numbered once per snapshot).
    let hard: Vec<(usize, &TopologySpreadConstraint, Arc<Column>)> = spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.when_unsatisfiable == "DoNotSchedule")
        .map(|(i, c)| (i, c, table.column(&c.topology_key)))
        .collect();
    let want = pod_requests(spec);
    let wants_port = host_ports(spec).first().map(|p| p.port);
    let mut filter = NodeFilter::new(spec);
    let facts: Vec<NodeFacts> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if i % nodes::PAUSE_NODES == nodes::PAUSE_NODES - 1 {
                nodes::pause_point();
            }
            let affinity_ok = filter.node_affinity(n);
            let untolerated = filter.untolerated(n).map(|t| format!("{}:{}", t.key, t.effect));
            let missing_key = hard.iter().find(|(_, _, column)| column.domain[i] == NO_DOMAIN).map(|(k, _, _)| *k);
            let refused = if !filter.node_unschedulable(n) {
                Some(Unfit::NodeUnschedulable)
            } else if let Some(t) = &untolerated {
                Some(Unfit::TaintToleration(t.clone()))
            } else if !affinity_ok {
                Some(Unfit::NodeAffinity)
            } else {
                missing_key.map(Unfit::PodTopologySpread)
            };
            let (cap, full) = match refused {
                Some(_) => (0, None),
                None => node_limit(n, &want, wants_port),
            };
            NodeFacts {
                carries_hard: missing_key.is_none(),
                refused,
                affinity_ok,
                taints_ok: untolerated.is_none(),
                cap,
                full,
            }
        })
        .collect();
    let usable = facts.iter().filter(|f| f.refused.is_none()).count();
    let is_schedulable = |f: &NodeFacts| matches!(f.refused, None | Some(Unfit::PodTopologySpread(_)));
    let schedulable = facts.iter().filter(|f| is_schedulable(f)).count();
    let zone = table.column(ZONE);
    let zones: BTreeSet<&str> = facts
        .iter()
        .zip(&zone.domain)
        .filter(|(f, d)| is_schedulable(f) && **d != NO_DOMAIN)
        .map(|(_, d)| zone.value(*d))
        .collect();
    let mut caps: Vec<u64> = facts.iter().map(|f| f.cap).collect();
    let raw_total = sum(&caps);

    let affinity = spec.affinity.as_ref();
    let anti_terms = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref())
        .unwrap_or_default();
    let has_affinity = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_deref())
        .is_some_and(|t| !t.is_empty());

    // The constraints that count the pods' own replicas, each with its domains: per node, the
    // domain's number in its key's column ([`NO_DOMAIN`]: the node is not one of its domains).
    enum Kind<'c> {
        Anti { term: usize, key: &'c str },
        Spread { index: usize, c: &'c TopologySpreadConstraint },
    }
    let mut constraints: Vec<(Kind, Domains)> = Vec::new();
    for (term, t) in anti_terms.iter().enumerate() {
        if term_matches(t, pod.namespace, pod.labels, pod.namespace, None, pod.labels) {
            let column = table.column(&t.topology_key);
            let domains = Domains { of: column.domain.clone(), column };
            constraints.push((Kind::Anti { term, key: &t.topology_key }, domains));
        }
    }
    for (index, c, column) in &hard {
        let counts_own = c.label_selector.as_ref().is_some_and(|s| selector::matches(s, pod.labels));
        if !counts_own {
            continue;
        }
        let of = column
            .domain
            .iter()
            .zip(&facts)
            .map(|(d, f)| {
                let counted = f.carries_hard
                    && (c.node_affinity_policy.as_deref() == Some("Ignore") || f.affinity_ok)
                    && (c.node_taints_policy.as_deref() != Some("Honor") || f.taints_ok);
                if counted { *d } else { NO_DOMAIN }
            })
            .collect();
        constraints.push((Kind::Spread { index: *index, c }, Domains { of, column: column.clone() }));
    }
    // Single-node domains first: they narrow each node's share before the others count domains.
    let per_node: Vec<bool> = constraints.iter().map(|(_, d)| d.single_nodes()).collect();
    let mut order: Vec<usize> = (0..constraints.len()).collect();
    order.sort_by_key(|&k| !per_node[k]);

    let mut best: (u64, Binding) = (raw_total, Binding::Nodes);
    for &k in &order {
        let (kind, domains) = &constraints[k];
        let (bound, binding, share) = match kind {
            Kind::Anti { term, key } => {
                let (bound, share) = anti_affinity_bound(domains, &caps);
                (bound, Binding::AntiAffinity { term: *term, key: key.to_string(), per_node: per_node[k] }, share)
            }
            Kind::Spread { index, c } => {
                let (bound, limit, share) = spread_bound(c, domains, &caps, nodes, &facts);
                (bound, Binding::Spread { index: *index, limit }, share)
            }
        };
        if per_node[k] {
            for (cap, s) in caps.iter_mut().zip(share) {
                *cap = (*cap).min(s);
            }
        }
        // The first constraint that gives the smallest bound is named; any constraint before the
        // nodes' own limits, which it explains.
        if bound < best.0 || (bound == best.0 && best.1 == Binding::Nodes) {
            best = (bound, binding);
        }
    }
    // The count is exact while at most one constraint keeps score across nodes: a spread over
    // several nodes a domain, an anti-affinity over several nodes a domain, or the spreads over
    // single nodes (which share their domains). An anti-affinity over single nodes is a plain
    // cap of one a node. Pod affinity depends on pods the view does not hold.
    let across = per_node.iter().filter(|p| !**p).count();
    let node_spreads =
        constraints.iter().zip(&per_node).any(|((kind, _), per_node)| *per_node && matches!(kind, Kind::Spread { .. }));
    let exact = !has_affinity && across + usize::from(node_spreads) <= 1;
    Capacity {
        at_most: (best.0 != UNBOUNDED).then_some(best.0),
        exact,
        schedulable,
        usable,
        zones: zones.into_iter().map(str::to_string).collect(),
        binding: best.1,
        refusals: refusals(nodes, &facts),
    }
}

/// The domains one constraint counts: per node, its domain's number in the key's column, or
/// [`NO_DOMAIN`] where the constraint does not count the node.
struct Domains {
    of: Vec<u32>,
    column: Arc<Column>,
}

impl Domains {
    /// Whether every domain counted holds one node.
    fn single_nodes(&self) -> bool {
        // Domains of one node each stay so whichever of them are counted.
        if self.column.single_nodes {
            return true;
        }
        let mut seen = vec![false; self.column.values.len()];
        self.of.iter().filter(|d| **d != NO_DOMAIN).all(|d| !std::mem::replace(&mut seen[*d as usize], true))
    }

    /// Each domain's share of the caps, in order of first appearance among the nodes counted:
    /// (domain, summed caps); and per domain number, its place in that list.
    fn caps(&self, caps: &[u64]) -> (Vec<(u32, u64)>, Vec<u32>) {
        let mut at = vec![NO_DOMAIN; self.column.values.len()];
        let mut list: Vec<(u32, u64)> = Vec::new();
        for (d, cap) in self.of.iter().zip(caps) {
            if *d == NO_DOMAIN {
                continue;
            }
            let slot = &mut at[*d as usize];
            if *slot == NO_DOMAIN {
                *slot = list.len() as u32;
                list.push((*d, 0));
            }
            let sum = &mut list[*slot as usize].1;
            *sum = sum.saturating_add(*cap);
        }
        (list, at)
    }
}

/// Replicas one node holds by its own limits (`NodeResourcesFit` with the pod count, `NodePorts`),
/// and the first of them (in the scheduler's order) that stops it.
fn node_limit<'w>(node: &NodeInfo, want: &'w Resources, wants_port: Option<i32>) -> (u64, Option<Unfit>) {
    // What stops the node, named only once known (most nodes of a large cluster are asked).
    enum Why<'w> {
        Resource(&'w str),
        Port(i32),
    }
    let mut limit: (u64, Option<Why<'w>>) = (UNBOUNDED, None);
    let mut narrow = |cap: u64, why: Why<'w>| {
        if cap < limit.0 {
            limit = (cap, Some(why));
        }
    };
    if let Some(max) = node.max_pods {
        narrow(u64::try_from(max).unwrap_or(0), Why::Resource("pods"));
    }
    // As `fits`: requests that are all zero are not compared with allocatable at all. A node that
    // reports no allocatable is not bounded by CPU, memory or storage and has no extended
    // resource ([`super::placement::allocatable`]).
    if !want.is_zero() {
        let a = node.allocatable.as_ref();
        let of = |field: fn(&Resources) -> i64| a.map_or(i64::MAX / 4, field);
        let per =
            |alloc: i64, one: i64| if one <= 0 { UNBOUNDED } else { u64::try_from(alloc.max(0) / one).unwrap_or(0) };
        narrow(per(of(|r| r.cpu_milli), want.cpu_milli), Why::Resource("cpu"));
        narrow(per(of(|r| r.memory), want.memory), Why::Resource("memory"));
        narrow(per(of(|r| r.ephemeral_storage), want.ephemeral_storage), Why::Resource("ephemeral-storage"));
        for (name, v) in &want.scalar {
            let alloc = a.and_then(|a| a.scalar.get(name)).copied().unwrap_or(0);
            narrow(per(alloc, *v), Why::Resource(name));
        }
    }
    if let Some(port) = wants_port {
        narrow(1, Why::Port(port));
    }
    let why = limit.1.map(|why| match why {
        Why::Resource(r) => Unfit::NodeResourcesFit(r.to_string()),
        Why::Port(p) => Unfit::NodePorts(p),
    });
    (limit.0, why)
}

fn sum(caps: &[u64]) -> u64 {
    caps.iter().fold(0u64, |a, c| a.saturating_add(*c))
}

/// One replica per domain; nodes without the key are not bounded. Also each node's share (for
/// single-node domains).
fn anti_affinity_bound(domains: &Domains, caps: &[u64]) -> (u64, Vec<u64>) {
    let (list, _) = domains.caps(caps);
    let outside: u64 =
        domains.of.iter().zip(caps).filter(|(d, _)| **d == NO_DOMAIN).fold(0, |a, (_, c)| a.saturating_add(*c));
    let bound = list.iter().fold(outside, |a, (_, cap)| a.saturating_add((*cap).min(1)));
    let share = domains.of.iter().zip(caps).map(|(d, c)| if *d != NO_DOMAIN { (*c).min(1) } else { *c }).collect();
    (bound, share)
}

/// A DoNotSchedule spread counting the pods' own replicas: `Σ min(cap(d), m + maxSkew)` over the
/// domains it counts (see the module's doc), why, and each node's share (for single-node domains).
fn spread_bound(
    c: &TopologySpreadConstraint,
    domains: &Domains,
    caps: &[u64],
    nodes: &[Arc<NodeInfo>],
    facts: &[NodeFacts],
) -> (u64, SpreadLimit, Vec<u64>) {
    let (list, at) = domains.caps(caps);
    if c.max_skew < 1 {
        return (0, SpreadLimit::NoSkew, vec![0; caps.len()]);
    }
    let skew = c.max_skew as u64;
    let short_of_min_domains = c.min_domains.is_some_and(|m| (list.len() as i64) < i64::from(m));
    let smallest = list.iter().min_by_key(|(_, cap)| *cap);
    let m = if short_of_min_domains { 0 } else { smallest.map_or(0, |(_, cap)| *cap) };
    let per_domain = |cap: u64| cap.min(m.saturating_add(skew));
    let bound = list.iter().fold(0u64, |a, (_, cap)| a.saturating_add(per_domain(*cap)));
    let share = domains
        .of
        .iter()
        .zip(caps)
        .map(|(d, cap)| if *d == NO_DOMAIN { *cap } else { (*cap).min(per_domain(list[at[*d as usize] as usize].1)) })
        .collect();
    let limit = if short_of_min_domains {
        SpreadLimit::MinDomains { domains: list.len(), min_domains: c.min_domains.unwrap_or(1) }
    } else if m == 0 {
        let idle: Vec<u32> = list.iter().filter(|(_, cap)| *cap == 0).map(|(d, _)| *d).collect();
        // A node of each idle domain, described: why no replica goes there.
        let mut described = Vec::new();
        for d in idle.iter().take(NAMED) {
            if let Some(i) = domains.of.iter().position(|x| x == d) {
                described.push(describe(&nodes[i], &facts[i]));
            }
        }
        let usable = list.len() - idle.len();
        SpreadLimit::IdleDomains { described, domains: idle.len(), usable }
    } else {
        let (domain, holds) = smallest.map(|(d, cap)| (domains.column.value(*d).to_string(), *cap)).unwrap_or_default();
        SpreadLimit::SmallestDomain { domain, holds }
    };
    (bound, limit, share)
}

/// A node where no replica goes, and why.
fn describe(node: &NodeInfo, facts: &NodeFacts) -> String {
    match &facts.refused {
        Some(Unfit::NodeUnschedulable) => format!("{} (cordoned)", node.name),
        Some(Unfit::TaintToleration(t)) => format!("{} (taint {t} not tolerated)", node.name),
        Some(_) => format!("{} (the pods may not go there)", node.name),
        None => match &facts.full {
            Some(why) => format!("{} ({why})", node.name),
            None => format!("{} (no room)", node.name),
        },
    }
}

/// The nodes grouped by what refuses one more replica once they are full (or at once).
fn refusals(nodes: &[Arc<NodeInfo>], facts: &[NodeFacts]) -> Vec<Refusal> {
    let mut groups: Vec<Refusal> = Vec::new();
    for (n, f) in nodes.iter().zip(facts) {
        let Some(unfit) = f.refused.clone().or_else(|| f.full.clone()) else { continue };
        match groups.iter_mut().find(|g| g.unfit == unfit) {
            Some(g) => {
                g.nodes += 1;
                if g.named.len() < NAMED {
                    g.named.push(n.name.clone());
                }
            }
            None => groups.push(Refusal { unfit, nodes: 1, named: vec![n.name.clone()] }),
        }
    }
    groups
}

#[cfg(test)]
#[path = "tests/capacity.rs"]
mod tests;

//! Where kube-scheduler may place a pod, and how many replicas a spread lets it place: the filters
//! that decide *whether* a pod can go on a node, each named after the scheduler plugin it follows
//! (`pkg/scheduler/framework/plugins/...` of Kubernetes 1.37), pure functions of the pod spec and
//! the view's nodes. One toleration test, one node-affinity test, for every rule that needs them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, PodSpec, Taint, Toleration, TopologySpreadConstraint};

use super::projection::NodeInfo;

/// `NodeUnschedulable`: a cordoned node (`spec.unschedulable`) takes only pods that tolerate
/// `node.kubernetes.io/unschedulable:NoSchedule`.
pub fn node_unschedulable(node: &NodeInfo, spec: &PodSpec) -> bool {
    !node.unschedulable || tolerations(spec).iter().any(|t| tolerates(t, crate::core::model::pod::CORDON_TAINT, None, "NoSchedule"))
}

/// `TaintToleration`: every NoSchedule and NoExecute taint of the node is tolerated
/// (PreferNoSchedule only scores; [`NodeInfo`] keeps the other two).
pub fn taint_toleration(node: &NodeInfo, spec: &PodSpec) -> bool {
    untolerated(node, spec).is_none()
}

/// The first taint of `node` that the pod does not tolerate.
pub fn untolerated<'n>(node: &'n NodeInfo, spec: &PodSpec) -> Option<&'n Taint> {
    let tolerations = tolerations(spec);
    node.taints
        .iter()
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, &taint.key, taint.value.as_deref(), &taint.effect)))
}

/// `NodeAffinity`: the pod's `nodeSelector` and its required node affinity both match.
pub fn node_affinity(node: &NodeInfo, spec: &PodSpec) -> bool {
    spec.node_selector.iter().flatten().all(|(k, v)| node.labels.get(k) == Some(v)) && required_node_affinity(node, spec)
}

/// The filters of this module that need no other pod: the nodes a replacement may go to before
/// resources, ports and the pod (anti-)affinities and spreads are counted.
pub fn takes(node: &NodeInfo, spec: &PodSpec) -> bool {
    node_unschedulable(node, spec) && taint_toleration(node, spec) && node_affinity(node, spec)
}

fn tolerations(spec: &PodSpec) -> &[Toleration] {
    spec.tolerations.as_deref().unwrap_or_default()
}

/// One toleration against one taint (`k8s.io/component-helpers` `ToleratesTaint`): an empty
/// effect matches every effect, an empty key with `Exists` every key, `Exists` any value, `Equal`
/// (or no operator) the same value.
pub fn tolerates(t: &Toleration, key: &str, value: Option<&str>, effect: &str) -> bool {
    let exists = t.operator.as_deref() == Some("Exists");
    let key_ok = match t.key.as_deref() {
        None | Some("") => exists,
        Some(k) => k == key,
    };
    let value_ok = exists || t.value.as_deref().unwrap_or("") == value.unwrap_or("");
    let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == effect);
    key_ok && value_ok && effect_ok
}

/// `requiredDuringSchedulingIgnoredDuringExecution` of the node affinity: its terms are ORed, a
/// term's requirements ANDed; a term with no requirement matches no node (as the scheduler has it).
fn required_node_affinity(node: &NodeInfo, spec: &PodSpec) -> bool {
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
    else {
        return true;
    };
    required.node_selector_terms.iter().any(|term| {
        let labels = term.match_expressions.iter().flatten();
        let fields = term.match_fields.iter().flatten();
        let mut any = false;
        let labels_ok = labels.into_iter().all(|r| {
            any = true;
            requirement(r, node.labels.get(&r.key).map(String::as_str))
        });
        let fields_ok = fields.into_iter().all(|r| {
            any = true;
            r.key == "metadata.name" && requirement(r, Some(&node.name))
        });
        any && labels_ok && fields_ok
    })
}

fn requirement(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v > x),
        "Lt" => matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v < x),
        _ => false,
    }
}

// --- PodTopologySpread ---------------------------------------------------------------------------

/// Whether the spread counts `node` as one of its domains (`podtopologyspread/common.go`): it
/// carries the topology key, and passes the node affinity (`nodeAffinityPolicy: Honor`, the
/// default) and the taints (`nodeTaintsPolicy: Honor`; the default, Ignore, counts a tainted or
/// cordoned node too).
pub fn spread_counts(c: &TopologySpreadConstraint, node: &NodeInfo, spec: &PodSpec) -> bool {
    node.labels.contains_key(&c.topology_key)
        && (c.node_affinity_policy.as_deref() == Some("Ignore") || node_affinity(node, spec))
        && (c.node_taints_policy.as_deref() != Some("Honor") || taint_toleration(node, spec))
}

/// How many replicas of a new workload (none placed yet) a `DoNotSchedule` spread lets the
/// scheduler place on `nodes`, when it bounds them, and why.
///
/// The skew of a domain is its matching pods + 1 − the global minimum over the counted domains,
/// and must not exceed `maxSkew`. The minimum stays 0 while a counted domain can take no replica
/// (a node the pods may not use but the spread counts: tainted or cordoned under the default
/// `nodeTaintsPolicy: Ignore`) or while there are fewer domains than `minDomains`: then every domain
/// the pods may use holds at most `maxSkew` of them. Otherwise domains fill evenly and the spread
/// bounds nothing.
pub fn spread_capacity(c: &TopologySpreadConstraint, nodes: &[&NodeInfo], spec: &PodSpec) -> Option<SpreadBound> {
    if c.when_unsatisfiable != "DoNotSchedule" {
        return None;
    }
    let counted: BTreeSet<&str> =
        nodes.iter().filter(|n| spread_counts(c, n, spec)).filter_map(|n| n.labels.get(&c.topology_key)).map(String::as_str).collect();
    let usable: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| takes(n, spec) && spread_counts(c, n, spec))
        .filter_map(|n| n.labels.get(&c.topology_key))
        .map(String::as_str)
        .collect();
    // No node carries the key: the spread cannot be judged here (nodes still to come).
    if counted.is_empty() {
        return None;
    }
    let cap = c.max_skew.saturating_mul(usable.len() as i32);
    if let Some(min_domains) = c.min_domains.filter(|m| (counted.len() as i32) < *m) {
        return Some(SpreadBound { cap, why: SpreadLimit::MinDomains { domains: counted.len(), min_domains } });
    }
    let idle: Vec<String> = nodes
        .iter()
        .filter(|n| spread_counts(c, n, spec) && !takes(n, spec))
        .filter(|n| n.labels.get(&c.topology_key).is_some_and(|d| !usable.contains(d.as_str())))
        .map(|n| describe_idle(n, spec))
        .collect();
    if !idle.is_empty() {
        return Some(SpreadBound { cap, why: SpreadLimit::IdleDomains(idle) });
    }
    None
}

/// A bound a spread puts on the replicas: at most `cap`, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpreadBound {
    pub cap: i32,
    pub why: SpreadLimit,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpreadLimit {
    /// Fewer counted domains than `minDomains`.
    MinDomains { domains: usize, min_domains: i32 },
    /// Domains the spread counts where no replica may go, each described (the node and why).
    IdleDomains(Vec<String>),
}

fn describe_idle(node: &NodeInfo, spec: &PodSpec) -> String {
    if !node_unschedulable(node, spec) {
        format!("{} (cordoned)", node.name)
    } else if let Some(t) = untolerated(node, spec) {
        let value = t.value.as_deref().map(|v| format!("={v}")).unwrap_or_default();
        format!("{} (taint {}{value}:{} not tolerated)", node.name, t.key, t.effect)
    } else {
        format!("{} (the pods may not go there)", node.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str)], cordoned: bool) -> NodeInfo {
        let mut l: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        l.insert("kubernetes.io/hostname".into(), name.into());
        NodeInfo {
            name: name.into(),
            labels: l,
            unschedulable: cordoned,
            taints: taints
                .iter()
                .map(|(k, e)| Taint { key: k.to_string(), effect: e.to_string(), ..Default::default() })
                .collect(),
        }
    }

    fn spec(yaml: &str) -> PodSpec {
        serde_saphyr::from_str(yaml).expect("a pod spec")
    }

    fn spread(extra: &str) -> TopologySpreadConstraint {
        serde_saphyr::from_str(&format!(
            "maxSkew: 1\ntopologyKey: kubernetes.io/hostname\nwhenUnsatisfiable: DoNotSchedule\n{extra}"
        ))
        .expect("a constraint")
    }

    const PLAIN: &str = "containers: [{name: app, image: nginx}]\n";

    #[test]
    fn tolerations_follow_the_scheduler() {
        let t: Toleration = serde_saphyr::from_str("operator: Exists").unwrap();
        assert!(tolerates(&t, "anything", Some("x"), "NoExecute"), "no key, Exists: every taint");
        let t: Toleration = serde_saphyr::from_str("key: k\neffect: NoSchedule").unwrap();
        assert!(tolerates(&t, "k", None, "NoSchedule"));
        assert!(!tolerates(&t, "k", Some("v"), "NoSchedule"), "Equal with no value matches no value only");
        assert!(!tolerates(&t, "k", None, "NoExecute"), "another effect");
        let t: Toleration = serde_saphyr::from_str("key: k\noperator: Exists").unwrap();
        assert!(tolerates(&t, "k", Some("v"), "NoExecute"), "no effect: every effect");
    }

    #[test]
    fn cordon_taints_node_selector_and_required_affinity_decide_where_a_pod_goes() {
        let plain = spec(PLAIN);
        assert!(takes(&node("a", &[], &[], false), &plain));
        assert!(!takes(&node("a", &[], &[], true), &plain), "cordoned");
        let tolerant = spec(&format!("{PLAIN}tolerations: [{{key: node.kubernetes.io/unschedulable, operator: Exists}}]"));
        assert!(takes(&node("a", &[], &[], true), &tolerant), "the cordon tolerated");
        assert!(!takes(&node("a", &[], &[("dedicated", "NoSchedule")], false), &plain));
        let zoned = spec(&format!("{PLAIN}nodeSelector: {{zone: a}}"));
        assert!(takes(&node("a", &[("zone", "a")], &[], false), &zoned));
        assert!(!takes(&node("b", &[("zone", "b")], &[], false), &zoned));
        let affine = spec(&format!(
            "{PLAIN}affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: \
             [{{matchExpressions: [{{key: pool, operator: NotIn, values: [gpu]}}]}}]}}}}}}"
        ));
        assert!(takes(&node("a", &[], &[], false), &affine), "NotIn matches a node without the label");
        assert!(!takes(&node("g", &[("pool", "gpu")], &[], false), &affine));
    }

    /// The default nodeTaintsPolicy (Ignore) counts a tainted node as a domain where no replica
    /// may go: the minimum stays 0 and each other node holds at most maxSkew. Honor leaves it out.
    #[test]
    fn a_tainted_node_counted_by_the_spread_bounds_the_replicas() {
        let nodes = [
            node("cp", &[], &[("node-role.kubernetes.io/control-plane", "NoSchedule")], false),
            node("w1", &[], &[], false),
            node("w2", &[], &[], false),
        ];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let bound = spread_capacity(&spread(""), &refs, &spec(PLAIN)).expect("bounded");
        assert_eq!(bound.cap, 2);
        assert_eq!(
            bound.why,
            SpreadLimit::IdleDomains(vec!["cp (taint node-role.kubernetes.io/control-plane:NoSchedule not tolerated)".into()])
        );
        assert_eq!(spread_capacity(&spread("nodeTaintsPolicy: Honor"), &refs, &spec(PLAIN)), None);
        // Boundary: all nodes usable, nothing bounds.
        let refs: Vec<&NodeInfo> = nodes[1..].iter().collect();
        assert_eq!(spread_capacity(&spread(""), &refs, &spec(PLAIN)), None);
        // A cordoned node counts the same way (its cordon taint, once the node controller adds it,
        // is what Honor would leave out).
        let cordoned = [node("w1", &[], &[], true), node("w2", &[], &[], false), node("w3", &[], &[], false)];
        let refs: Vec<&NodeInfo> = cordoned.iter().collect();
        let bound = spread_capacity(&spread(""), &refs, &spec(PLAIN)).expect("bounded");
        assert_eq!((bound.cap, bound.why), (2, SpreadLimit::IdleDomains(vec!["w1 (cordoned)".into()])));
    }

    /// nodeAffinityPolicy Honor (the default) counts only the nodes the pod's selector allows;
    /// Ignore counts the others too, which then pin the minimum at 0.
    #[test]
    fn the_node_affinity_policy_decides_which_nodes_are_domains() {
        let nodes = [node("a", &[("pool", "web")], &[], false), node("b", &[("pool", "web")], &[], false), node("c", &[("pool", "db")], &[], false)];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let web = spec(&format!("{PLAIN}nodeSelector: {{pool: web}}"));
        assert_eq!(spread_capacity(&spread(""), &refs, &web), None);
        let bound = spread_capacity(&spread("nodeAffinityPolicy: Ignore"), &refs, &web).expect("bounded");
        assert_eq!(bound.cap, 2);
    }

    #[test]
    fn fewer_domains_than_min_domains_hold_max_skew_each() {
        let nodes = [node("a", &[], &[], false), node("b", &[], &[], false)];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let two = TopologySpreadConstraint { max_skew: 2, ..spread("minDomains: 3") };
        let bound = spread_capacity(&two, &refs, &spec(PLAIN));
        assert_eq!(bound.map(|b| b.cap), Some(4));
        assert_eq!(spread_capacity(&spread("minDomains: 2"), &refs, &spec(PLAIN)), None, "as many domains as asked");
        // ScheduleAnyway never bounds.
        let soft: TopologySpreadConstraint = TopologySpreadConstraint { when_unsatisfiable: "ScheduleAnyway".into(), ..spread("minDomains: 3") };
        assert_eq!(spread_capacity(&soft, &refs, &spec(PLAIN)), None);
    }

}

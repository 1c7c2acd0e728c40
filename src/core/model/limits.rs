//! Input limits: how much of one pod template the rules that read every node judge
//! (`spread-unsatisfiable`, `spread-zone-missing`). Their cost is the nodes times what the pod
//! asks of each node (its nodeSelector, node affinity requirements, tolerations, spreads and
//! anti-affinity terms), and an admission's cost must not grow with what an object declares: a
//! template over one of these limits is not judged by those rules, and the answer says so
//! (docs/operations.md, "Input limits"). Every other rule reads an object once, in time linear in
//! its size, which the request limits bound (8 MiB, 65,536 JSON values).
//!
//! The limits are far above what real manifests hold (a handful of each), and far below what a
//! hostile one can hold within the request limits.

use k8s_openapi::api::core::v1::PodSpec;

/// One limit: the field under the pod spec, how many of what it holds are judged.
pub struct Limit {
    pub field: &'static str,
    /// What is counted, plural (`"tolerations"`).
    pub counts: &'static str,
    pub max: usize,
    count: fn(&PodSpec) -> usize,
}

impl Limit {
    /// How many the pod spec holds.
    pub fn count(&self, spec: &PodSpec) -> usize {
        (self.count)(spec)
    }
}

/// What the rules that read every node judge of a pod template, at most.
pub static NODE_RULE_LIMITS: &[Limit] = &[
    Limit {
        field: "nodeSelector",
        counts: "entries",
        max: 64,
        count: |s| s.node_selector.as_ref().map_or(0, |m| m.len()),
    },
    Limit {
        field: "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        counts: "requirements (matchExpressions and matchFields, over every term)",
        max: 128,
        count: |s| {
            node_terms(s)
                .iter()
                .map(|t| t.match_expressions.as_ref().map_or(0, Vec::len) + t.match_fields.as_ref().map_or(0, Vec::len))
                .sum::<usize>()
                // A term with no requirement costs a look too.
                .max(node_terms(s).len())
        },
    },
    Limit {
        field: "tolerations",
        counts: "tolerations",
        max: 256,
        count: |s| s.tolerations.as_ref().map_or(0, Vec::len),
    },
    Limit {
        field: "topologySpreadConstraints",
        counts: "constraints",
        max: 32,
        count: |s| s.topology_spread_constraints.as_ref().map_or(0, Vec::len),
    },
    Limit {
        field: "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        counts: "terms",
        max: 32,
        count: |s| {
            s.affinity
                .as_ref()
                .and_then(|a| a.pod_anti_affinity.as_ref())
                .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
                .map_or(0, Vec::len)
        },
    },
];

fn node_terms(s: &PodSpec) -> &[k8s_openapi::api::core::v1::NodeSelectorTerm] {
    s.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map_or(&[], |r| r.node_selector_terms.as_slice())
}

/// The first limit of [`NODE_RULE_LIMITS`] the pod template of a workload passes, said as a
/// "not judged" reason: the field (under `spec.template.spec`), how many it holds, the limit.
pub fn over_node_limits(spec: &PodSpec) -> Option<String> {
    NODE_RULE_LIMITS.iter().find_map(|l| {
        let n = l.count(spec);
        (n > l.max).then(|| {
            format!(
                "spec.template.spec.{} holds {n} {}, over the {} judged against every node (docs/operations.md, \
                 \"Input limits\")",
                l.field, l.counts, l.max
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        serde_saphyr::from_str(yaml).expect("a pod spec")
    }

    fn tolerations(n: usize) -> String {
        let list: Vec<String> = (0..n).map(|i| format!("{{key: k{i}, operator: Exists}}")).collect();
        format!("containers: [{{name: app, image: x}}]\ntolerations: [{}]", list.join(", "))
    }

    #[test]
    fn at_the_limit_a_template_is_judged_and_one_over_it_is_not() {
        assert_eq!(over_node_limits(&spec(&tolerations(256))), None);
        let why = over_node_limits(&spec(&tolerations(257))).expect("over");
        assert_eq!(
            why,
            "spec.template.spec.tolerations holds 257 tolerations, over the 256 judged against every node \
             (docs/operations.md, \"Input limits\")"
        );
    }

    #[test]
    fn node_affinity_requirements_count_over_every_term() {
        let term = |n: usize| {
            let reqs: Vec<String> = (0..n).map(|i| format!("{{key: k{i}, operator: Exists}}")).collect();
            format!("{{matchExpressions: [{}]}}", reqs.join(", "))
        };
        let affinity = |terms: Vec<String>| {
            spec(&format!(
                "containers: [{{name: app, image: x}}]\naffinity: {{nodeAffinity: \
                 {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: [{}]}}}}}}",
                terms.join(", ")
            ))
        };
        assert_eq!(over_node_limits(&affinity(vec![term(64), term(64)])), None);
        let why = over_node_limits(&affinity(vec![term(64), term(65)])).expect("over");
        assert!(why.starts_with("spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution holds 129 requirements"), "{why}");
        // Empty terms count one each.
        assert!(over_node_limits(&affinity(vec!["{}".to_string(); 129])).is_some());
    }

    #[test]
    fn every_limit_names_its_field_and_a_plain_template_is_within_them() {
        let plain = spec("containers: [{name: app, image: x}]");
        for l in NODE_RULE_LIMITS {
            assert_eq!(l.count(&plain), 0, "{}", l.field);
            assert!(l.max >= 32, "{}: far above real manifests", l.field);
        }
    }
}

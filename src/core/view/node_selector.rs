//! Node selector terms against a node (`k8s.io/component-helpers/scheduling/corev1`'s
//! `MatchNodeSelectorTerms`): a pod's required node affinity (placement) and a PersistentVolume's
//! (the volume filters) read them alike.

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement};

use super::projection::NodeInfo;

/// Whether `node` matches one of `required`'s terms (`MatchNodeSelectorTerms`): a pod's required
/// node affinity, or a PersistentVolume's (VolumeBinding's `CheckNodeAffinity`).
pub fn node_selector_admits(required: &NodeSelector, node: &NodeInfo) -> bool {
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
    holds(&r.operator, value, |v| values.iter().any(|x| x == v), values.first().map(String::as_str))
}

/// One node selector operator on a node's `value` of the key: `has` says whether a value is among
/// the requirement's, `first` is its first value (what `Gt` and `Lt` compare with).
pub fn holds(operator: &str, value: Option<&str>, has: impl Fn(&str) -> bool, first: Option<&str>) -> bool {
    let number = |s: &str| s.parse::<i64>().ok();
    match operator {
        "In" => value.is_some_and(has),
        "NotIn" => value.is_none_or(|v| !has(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(number), first.and_then(number)), (Some(v), Some(x)) if v > x),
        "Lt" => matches!((value.and_then(number), first.and_then(number)), (Some(v), Some(x)) if v < x),
        _ => false,
    }
}

//! Label selector semantics: `matchLabels` + `matchExpressions` (In, NotIn, Exists, DoesNotExist).
//!
//! A null selector and an empty one differ, and the difference is what several rules are about:
//! in policy/v1 a PDB with no selector matches no pod and one with `{}` matches every pod in the
//! namespace. Callers decide what `None` means; [`matches`] takes a present selector.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` selects a pod with `labels`. An empty selector selects everything.
/// An unknown operator selects nothing (the apiserver would have refused it).
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            match e.operator.as_str() {
                "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
                "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
                "Exists" => labels.contains_key(&e.key),
                "DoesNotExist" => !labels.contains_key(&e.key),
                _ => false,
            }
        })
}

/// A selector with neither labels nor expressions: it selects every pod.
pub fn is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// A short rendering for messages: `app=web,tier in (a,b)`; `{}` for empty.
pub fn render(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            op => format!("{} {} ({values})", e.key, op.to_lowercase()),
        });
    }
    if parts.is_empty() { "{}".to_string() } else { parts.join(",") }
}

pub fn render_labels(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "{}".into();
    }
    labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: if values.is_empty() { None } else { Some(values.iter().map(|s| s.to_string()).collect()) },
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(matches(&LabelSelector::default(), &labels(&[])));
        assert!(matches(&LabelSelector::default(), &labels(&[("a", "b")])));
        assert!(is_empty(&LabelSelector::default()));
    }

    #[test]
    fn match_labels_must_all_hold() {
        let s = LabelSelector { match_labels: Some(labels(&[("app", "web"), ("tier", "fe")])), ..Default::default() };
        assert!(matches(&s, &labels(&[("app", "web"), ("tier", "fe"), ("x", "y")])));
        assert!(!matches(&s, &labels(&[("app", "web")])));
        assert!(!matches(&s, &labels(&[("app", "web"), ("tier", "be")])));
    }

    #[test]
    fn expressions() {
        let l = labels(&[("app", "web"), ("tier", "fe")]);
        let sel = |e| LabelSelector { match_expressions: Some(vec![e]), ..Default::default() };
        assert!(matches(&sel(expr("tier", "In", &["fe", "be"])), &l));
        assert!(!matches(&sel(expr("tier", "In", &["be"])), &l));
        assert!(!matches(&sel(expr("zone", "In", &["a"])), &l));
        assert!(matches(&sel(expr("tier", "NotIn", &["be"])), &l));
        assert!(!matches(&sel(expr("tier", "NotIn", &["fe"])), &l));
        assert!(matches(&sel(expr("zone", "NotIn", &["a"])), &l), "NotIn holds when the key is absent");
        assert!(matches(&sel(expr("app", "Exists", &[])), &l));
        assert!(!matches(&sel(expr("zone", "Exists", &[])), &l));
        assert!(matches(&sel(expr("zone", "DoesNotExist", &[])), &l));
        assert!(!matches(&sel(expr("app", "DoesNotExist", &[])), &l));
        assert!(!matches(&sel(expr("app", "Bogus", &[])), &l));
    }

    #[test]
    fn render_is_readable() {
        let s = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![expr("tier", "In", &["a", "b"])]),
        };
        assert_eq!(render(&s), "app=web,tier in (a,b)");
        assert_eq!(render(&LabelSelector::default()), "{}");
    }
}

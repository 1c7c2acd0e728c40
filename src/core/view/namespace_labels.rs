//! Whether any namespace of the cluster matches a label selector, without a pass over every
//! namespace per selector.
//!
//! `webhook-fail-closed-unavailable` asks this for each fail-closed webhook of a configuration (a
//! webhook whose namespaceSelector matches no namespace intercepts nothing). Matching each
//! namespace in turn costs the namespaces times the selector's requirements and values, and both
//! a configuration's webhooks and a selector's values are numbers an object declares: 400
//! webhooks over 10,000 namespaces, or one `In` of 4,000 values, took tens of milliseconds. The
//! namespaces' labels are indexed by key once per snapshot of them; a selector is then answered
//! in time linear in its own size plus the namespaces that carry the keys it names.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The namespaces' labels by key: per key, every namespace carrying it (by number) with its value.
#[derive(Debug, Default)]
pub struct NamespaceLabels {
    namespaces: usize,
    by_key: HashMap<String, Vec<(u32, String)>>,
}

/// What a selector asks of one key, all its requirements on that key together.
#[derive(Default)]
struct KeyAsk<'s> {
    must_exist: bool,
    must_not_exist: bool,
    /// The values allowed (the intersection of its `In` sets and matchLabels value); `None`: any.
    allowed: Option<HashSet<&'s str>>,
    /// The values refused (the union of its `NotIn` sets).
    refused: HashSet<&'s str>,
}

impl KeyAsk<'_> {
    fn accepts(&self, value: &str) -> bool {
        self.allowed.as_ref().is_none_or(|a| a.contains(value)) && !self.refused.contains(value)
    }
}

impl NamespaceLabels {
    /// Indexes the labels of every namespace (one map each).
    pub fn new<'a>(labels: impl IntoIterator<Item = &'a BTreeMap<String, String>>) -> Self {
        let mut by_key: HashMap<String, Vec<(u32, String)>> = HashMap::default();
        let mut namespaces = 0;
        for (number, namespace_labels) in labels.into_iter().enumerate() {
            namespaces += 1;
            for (key, value) in namespace_labels {
                by_key.entry(key.clone()).or_default().push((number as u32, value.clone()));
            }
        }
        NamespaceLabels { namespaces, by_key }
    }

    /// Whether some namespace matches `selector`, as [`crate::core::model::selector::matches`]
    /// decides for one (an empty selector matches every namespace; an unknown operator none).
    pub fn any_matching(&self, selector: &LabelSelector) -> bool {
        if self.namespaces == 0 {
            return false;
        }
        let Some(asks) = compile(selector) else { return false };
        // A namespace matches when it meets the ask of every key. Keys that must exist give the
        // candidates (the namespaces carrying them with an accepted value); keys that need not
        // exist only strike namespaces out (those carrying them with a refused value).
        let mut met: HashMap<u32, usize> = HashMap::default();
        let mut positive = 0usize;
        let mut struck: HashSet<u32> = HashSet::default();
        let empty = Vec::new();
        // The most selective keys first: a key no namespace meets ends it at once.
        let mut keys: Vec<(&str, &KeyAsk)> = asks.iter().map(|(k, a)| (*k, a)).collect();
        keys.sort_by_key(|(k, _)| self.by_key.get(*k).map_or(0, Vec::len));
        for (key, ask) in keys {
            let carrying = self.by_key.get(key).unwrap_or(&empty);
            if ask.must_exist {
                if ask.must_not_exist {
                    return false;
                }
                let meeting = carrying.iter().filter(|(_, v)| ask.accepts(v));
                if positive == 0 {
                    met.extend(meeting.map(|(n, _)| (*n, 1)));
                } else {
                    for (n, _) in meeting {
                        if let Some(count) = met.get_mut(n) {
                            *count += 1;
                        }
                    }
                    met.retain(|_, count| *count == positive + 1);
                }
                positive += 1;
                if met.is_empty() {
                    return false;
                }
            } else {
                let refused = carrying.iter().filter(|(_, v)| ask.must_not_exist || !ask.accepts(v));
                struck.extend(refused.map(|(n, _)| *n));
            }
        }
        if positive == 0 { struck.len() < self.namespaces } else { met.keys().any(|n| !struck.contains(n)) }
    }
}

/// The selector's requirements by key; `None` when it can match nothing whatever the labels (an
/// unknown operator, which the apiserver would have refused).
fn compile(selector: &LabelSelector) -> Option<BTreeMap<&str, KeyAsk<'_>>> {
    let mut asks: BTreeMap<&str, KeyAsk> = BTreeMap::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        let ask = asks.entry(key.as_str()).or_default();
        ask.must_exist = true;
        narrow_to(ask, std::iter::once(value.as_str()).collect());
    }
    for e in selector.match_expressions.iter().flatten() {
        let ask = asks.entry(e.key.as_str()).or_default();
        let values = e.values.iter().flatten().map(String::as_str);
        match e.operator.as_str() {
            "In" => {
                ask.must_exist = true;
                narrow_to(ask, values.collect());
            }
            "NotIn" => ask.refused.extend(values),
            "Exists" => ask.must_exist = true,
            "DoesNotExist" => ask.must_not_exist = true,
            _ => return None,
        }
    }
    Some(asks)
}

/// Allows only `values` of what `ask` allowed so far.
fn narrow_to<'s>(ask: &mut KeyAsk<'s>, values: HashSet<&'s str>) {
    ask.allowed = Some(match ask.allowed.take() {
        None => values,
        Some(allowed) => allowed.intersection(&values).copied().collect(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::selector::matches;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn namespaces(sets: &[&[(&str, &str)]]) -> HashMap<String, BTreeMap<String, String>> {
        sets.iter()
            .enumerate()
            .map(|(i, pairs)| (format!("ns-{i}"), pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn naive(labels: &HashMap<String, BTreeMap<String, String>>, selector: &LabelSelector) -> bool {
        labels.values().any(|l| matches(selector, l))
    }

    #[test]
    fn answers_as_matching_each_namespace_does() {
        let labels = namespaces(&[&[("team", "a"), ("env", "prod")], &[("team", "b")], &[]]);
        let index = NamespaceLabels::new(labels.values());
        let cases: Vec<(LabelSelector, bool)> = vec![
            (LabelSelector::default(), true),
            (LabelSelector { match_labels: Some([("team".into(), "b".into())].into()), ..Default::default() }, true),
            (LabelSelector { match_labels: Some([("team".into(), "c".into())].into()), ..Default::default() }, false),
            // Both must hold on the same namespace: team b has no env.
            (
                LabelSelector {
                    match_labels: Some([("team".into(), "b".into())].into()),
                    match_expressions: Some(vec![expression("env", "Exists", &[])]),
                },
                false,
            ),
            // The namespace without labels meets a selector of absences only.
            (
                LabelSelector {
                    match_expressions: Some(vec![
                        expression("team", "DoesNotExist", &[]),
                        expression("env", "NotIn", &["prod"]),
                    ]),
                    ..Default::default()
                },
                true,
            ),
            (
                LabelSelector { match_expressions: Some(vec![expression("team", "In", &[])]), ..Default::default() },
                false,
            ),
            (
                LabelSelector { match_expressions: Some(vec![expression("team", "Gt", &["1"])]), ..Default::default() },
                false,
            ),
            (
                LabelSelector {
                    match_expressions: Some(vec![
                        expression("team", "Exists", &[]),
                        expression("team", "DoesNotExist", &[]),
                    ]),
                    ..Default::default()
                },
                false,
            ),
        ];
        for (selector, expected) in cases {
            assert_eq!(naive(&labels, &selector), expected, "the case itself: {selector:?}");
            assert_eq!(index.any_matching(&selector), expected, "{selector:?}");
        }
        assert!(!NamespaceLabels::new([]).any_matching(&LabelSelector::default()), "no namespace at all");
    }

    #[test]
    fn a_selector_of_many_values_over_many_namespaces_is_answered_without_a_pass_per_value() {
        // 10,000 namespaces and an `In` of 4,000 values none carries: matching each namespace
        // would compare 40 million values; the index looks each namespace's value up once.
        let labels: HashMap<String, BTreeMap<String, String>> =
            (0..10_000).map(|i| (format!("ns-{i}"), [("team".to_string(), format!("team-{i}"))].into())).collect();
        let values: Vec<String> = (0..4_000).map(|i| format!("other-{i}")).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        let selector =
            LabelSelector { match_expressions: Some(vec![expression("team", "In", &refs)]), ..Default::default() };
        assert!(!NamespaceLabels::new(labels.values()).any_matching(&selector));
    }

    fn arbitrary_selector() -> impl Strategy<Value = LabelSelector> {
        let key = prop::sample::select(vec!["a", "b", "c"]);
        let value = prop::sample::select(vec!["1", "2", "3"]);
        let operator = prop::sample::select(vec!["In", "NotIn", "Exists", "DoesNotExist"]);
        let requirement = (key.clone(), operator, prop::collection::vec(value.clone(), 0..3))
            .prop_map(|(k, op, values)| expression(k, op, &values));
        (prop::collection::btree_map(key, value, 0..3), prop::collection::vec(requirement, 0..4)).prop_map(
            |(labels, expressions)| LabelSelector {
                match_labels: (!labels.is_empty())
                    .then(|| labels.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                match_expressions: (!expressions.is_empty()).then_some(expressions),
            },
        )
    }

    fn arbitrary_namespaces() -> impl Strategy<Value = HashMap<String, BTreeMap<String, String>>> {
        let labels = prop::collection::btree_map(
            prop::sample::select(vec!["a", "b", "c"]).prop_map(String::from),
            prop::sample::select(vec!["1", "2", "3"]).prop_map(String::from),
            0..3,
        );
        prop::collection::vec(labels, 0..6)
            .prop_map(|sets| sets.into_iter().enumerate().map(|(i, l)| (format!("ns-{i}"), l)).collect())
    }

    proptest! {
        #[test]
        fn equals_a_pass_over_every_namespace(labels in arbitrary_namespaces(), selector in arbitrary_selector()) {
            prop_assert_eq!(NamespaceLabels::new(labels.values()).any_matching(&selector), naive(&labels, &selector));
        }
    }
}

//! The generated admission policies (src/core/policies.rs) for each kind of configuration: what
//! is generated, named, labelled and bound, and how the configuration is written into them
//! (tests/e2e_policies.rs holds their verdicts to the webhook's on a real apiserver).

use serde_json::Value;

use crate::core::config::Config;
use crate::core::config::policy::Date;
use crate::core::policies::*;
use crate::core::registry::parse_config;

fn config(text: &str) -> Config {
    parse_config(text, "c.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn names(docs: &[Value], kind: &str) -> Vec<String> {
    docs.iter().filter(|d| d["kind"] == kind).map(|d| d["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

fn conditions(policy: &Value) -> Vec<(String, String)> {
    policy["spec"]["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["expression"].as_str().unwrap().to_string()))
        .collect()
}

fn variable<'a>(policy: &'a Value, name: &str) -> &'a str {
    policy["spec"]["variables"].as_array().unwrap().iter().find(|v| v["name"] == name).unwrap()["expression"]
        .as_str()
        .unwrap()
}

#[test]
fn the_defaults_give_a_deny_and_a_warn_policy_per_rule_that_can_deny_and_both_mutations() {
    let docs = generate(&Config::default(), None);
    let vaps = names(&docs, "ValidatingAdmissionPolicy");
    for name in [
        "ha-guard-spread-selector-missing",
        "ha-guard-spread-selector-missing-warn",
        "ha-guard-spread-selector-mismatch",
        "ha-guard-prestop-exceeds-grace",
        "ha-guard-prestop-exceeds-grace-warn",
        "ha-guard-termination-grace-zero-warn",
        "ha-guard-pdb-unhealthy-eviction-policy-warn",
    ] {
        assert!(vaps.contains(&name.to_string()), "{name} in {vaps:?}");
    }
    // A warn-only rule has no deny policy.
    assert!(!vaps.contains(&"ha-guard-termination-grace-zero".to_string()), "{vaps:?}");
    assert_eq!(
        names(&docs, "MutatingAdmissionPolicy"),
        ["ha-guard-inject-spread-selector", "ha-guard-inject-unhealthy-pod-eviction-policy"]
    );
    for d in &docs {
        let name = d["metadata"]["name"].as_str().unwrap();
        assert_eq!(d["apiVersion"], API_VERSION, "{name}");
        assert_eq!(d["metadata"]["labels"][MANAGED_BY], "ha-guard", "{name}");
        let rule = d["metadata"]["labels"][RULE_LABEL].as_str().unwrap();
        assert!(name == format!("ha-guard-{rule}") || name == format!("ha-guard-{rule}-warn"), "{name}");
        // Never a parameter resource: nothing the apiserver could fail to resolve.
        assert!(d["spec"]["paramKind"].is_null() && d["spec"]["paramRef"].is_null(), "{name}");
        if !d["kind"].as_str().unwrap().ends_with("Binding") {
            assert_eq!(d["spec"]["failurePolicy"], "Ignore", "{name}");
            // The scale subresource is not matched.
            let resources = &d["spec"]["matchConstraints"]["resourceRules"][0]["resources"];
            assert!(resources.as_array().unwrap().iter().all(|r| !r.as_str().unwrap().contains('/')), "{name}");
        }
    }
    let binding = named(&docs, "ValidatingAdmissionPolicyBinding", "ha-guard-prestop-exceeds-grace").unwrap();
    assert_eq!(binding["spec"]["validationActions"], serde_json::json!(["Deny"]));
    assert_eq!(binding["spec"]["policyName"], "ha-guard-prestop-exceeds-grace");
    let warn = named(&docs, "ValidatingAdmissionPolicyBinding", "ha-guard-prestop-exceeds-grace-warn").unwrap();
    assert_eq!(warn["spec"]["validationActions"], serde_json::json!(["Warn"]));
    // Namespaces in mode off are left out by every binding.
    let selector = &warn["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0];
    assert_eq!(selector, &serde_json::json!({"key": "ha-guard.io/mode", "operator": "NotIn", "values": ["off"]}));
    // The ratchet reads oldObject.
    let policy = named(&docs, "ValidatingAdmissionPolicy", "ha-guard-prestop-exceeds-grace").unwrap();
    assert!(variable(policy, "oldPaths").contains("[oldObject]"), "{policy:#}");
    assert!(variable(policy, "decided").contains("(pre-existing) "), "{policy:#}");
}

#[test]
fn observe_mode_warns_and_audits_and_mutates_nothing() {
    let docs = generate(&config("mode: observe\n"), None);
    assert!(names(&docs, "MutatingAdmissionPolicy").is_empty());
    assert!(!names(&docs, "ValidatingAdmissionPolicy").contains(&"ha-guard-prestop-exceeds-grace".to_string()));
    let binding = named(&docs, "ValidatingAdmissionPolicyBinding", "ha-guard-prestop-exceeds-grace-warn").unwrap();
    assert_eq!(binding["spec"]["validationActions"], serde_json::json!(["Warn", "Audit"]));
    let policy = named(&docs, "ValidatingAdmissionPolicy", "ha-guard-prestop-exceeds-grace-warn").unwrap();
    assert!(variable(policy, "decided").contains("(observe-only: enforce would deny) "), "{policy:#}");
    assert!(variable(policy, "decided").contains("(pre-existing, observe-only: enforce would deny) "), "{policy:#}");
}

#[test]
fn a_rule_or_mutation_turned_off_has_no_policy_and_an_override_can_turn_it_on_again() {
    let off =
        generate(&config("rules: {prestop-exceeds-grace: off}\nmutations: {inject-spread-selector: false}\n"), None);
    assert!(off.iter().all(|d| d["metadata"]["labels"][RULE_LABEL] != "prestop-exceeds-grace"));
    assert_eq!(names(&off, "MutatingAdmissionPolicy"), ["ha-guard-inject-unhealthy-pod-eviction-policy"]);
    let again = generate(
        &config(
            "rules: {prestop-exceeds-grace: off, termination-grace-zero: deny}\noverrides:\n- namespaceSelector: \
             {matchLabels: {tier: prod}}\n  rules: {prestop-exceeds-grace: deny}\n",
        ),
        None,
    );
    let policy = named(&again, "ValidatingAdmissionPolicy", "ha-guard-prestop-exceeds-grace").unwrap();
    let decided = variable(policy, "decided");
    assert!(
        decided.contains(
            "('tier' in variables.namespaceLabels && variables.namespaceLabels['tier'] == 'prod') ? 'deny' : 'off'"
        ),
        "{decided}"
    );
    // A warn rule turned up to deny gets a deny policy.
    assert!(named(&again, "ValidatingAdmissionPolicy", "ha-guard-termination-grace-zero").is_some());
}

#[test]
fn exempt_namespaces_are_left_out_by_name_in_the_binding_and_by_glob_in_a_condition() {
    let docs = generate(&config("exemptNamespaces: [kube-system, \"team-*-sandbox\"]\n"), None);
    let binding = named(&docs, "ValidatingAdmissionPolicyBinding", "ha-guard-prestop-exceeds-grace").unwrap();
    let expressions = &binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"];
    assert_eq!(
        expressions[1],
        serde_json::json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]})
    );
    let policy = named(&docs, "MutatingAdmissionPolicy", "ha-guard-inject-spread-selector").unwrap();
    let (name, expression) = &conditions(policy)[0];
    assert_eq!(name, "not-in-an-exempt-namespace");
    assert_eq!(expression, "!(request.namespace.matches('^team-.*-sandbox$'))");
    assert_eq!(glob_regex("team-*-sandbox"), "^team-.*-sandbox$");
}

#[test]
fn exceptions_leave_the_objects_they_cover_to_the_webhook_and_say_so() {
    let text = "exceptions:\n- name: vendor\n  rules: [prestop-exceeds-grace]\n  match: {kinds: [Deployment], namespaces: \
                [\"tigera-*\"], names: [operator], selector: {matchLabels: {app: op}}, namespaceSelector: {matchLabels: \
                {vendor: tigera}}}\n  reason: by design\n- name: later\n  rules: [prestop-exceeds-grace]\n  match: \
                {namespaces: [shop]}\n  reason: migrating\n  expires: 2027-03-01\n";
    let c = config(text);
    let docs = generate(&c, None);
    let policy = named(&docs, "ValidatingAdmissionPolicy", "ha-guard-prestop-exceeds-grace").unwrap();
    let conds = conditions(policy);
    let vendor = conds.iter().find(|(n, _)| n == "not-excepted-vendor").unwrap();
    for part in [
        "request.kind.kind in ['Deployment']",
        "request.namespace.matches('^tigera-.*$')",
        "object.metadata.?name.orValue('').matches('^operator$')",
        "object.metadata.?labels.orValue({})['app'] == 'op'",
        "namespaceObject.metadata.?labels.orValue({})['vendor'] == 'tigera'",
    ] {
        assert!(vendor.1.contains(part), "{part} in {}", vendor.1);
    }
    assert!(conds.iter().any(|(n, _)| n == "not-excepted-later"), "{conds:?}");
    let note = policy["metadata"]["annotations"][WEBHOOK_ONLY].as_str().unwrap();
    assert!(note.contains("exception later covers (it expires on 2027-03-01"), "{note}");
    let yaml = to_yaml(&docs).unwrap();
    assert!(yaml.contains("# judged by the webhook alone: the objects exception later covers"), "{yaml}");
    // Other rules are not touched by them; an exception expired by the day given is dropped.
    let other = named(&docs, "ValidatingAdmissionPolicy", "ha-guard-termination-grace-zero-warn").unwrap();
    assert!(conditions(other).iter().all(|(n, _)| !n.starts_with("not-excepted")));
    let after: Date = "2027-03-02".parse().unwrap();
    let later = generate(&c, Some(after));
    let policy = named(&later, "ValidatingAdmissionPolicy", "ha-guard-prestop-exceeds-grace").unwrap();
    assert!(!conditions(policy).iter().any(|(n, _)| n == "not-excepted-later"));
}

#[test]
fn the_exemption_annotation_is_a_match_condition() {
    let docs = generate(&Config::default(), None);
    let policy = named(&docs, "ValidatingAdmissionPolicy", "ha-guard-termination-grace-zero-warn").unwrap();
    let conds = conditions(policy);
    let (_, expression) = conds.iter().find(|(n, _)| n == "not-exempted-by-annotation").unwrap();
    assert!(expression.contains("'ha-guard.io/allow-termination-grace-zero'") && expression.contains(".trim() != ''"));
}

#[test]
fn several_lines_are_joined_on_one_line_and_a_message_past_the_limit_is_the_static_one() {
    let lines = vec!["[r] a: x Fix: y".to_string(), "[r] b: x Fix: y".to_string()];
    assert_eq!(joined("r", &lines), "[r] a: x Fix: y | [r] b: x Fix: y");
    let long = vec!["x".repeat(MESSAGE_LIMIT + 1)];
    assert!(joined("r", &long).starts_with("[r] the findings' description is over 5 KiB"));
    assert!(!joined("r", &lines).contains('\n'));
}

#[test]
fn cel_strings_and_globs_are_escaped() {
    assert_eq!(cel_string("it's a \\ b"), "'it\\'s a \\\\ b'");
    assert_eq!(glob_regex("a.b*"), "^a\\.b.*$");
}

#[test]
fn the_rule_ids_are_given_to_the_policies_that_read_them_and_resources_go_by_group() {
    let docs = generate(&Config::default(), None);
    let policy = named(&docs, "ValidatingAdmissionPolicy", "ha-guard-exemption-unknown-rule-warn").unwrap();
    let ids = variable(policy, "ruleIds");
    for id in crate::core::rules::all().map(|r| r.id) {
        assert!(ids.contains(&format!("'{id}'")), "{id} in {ids}");
    }
    // Defined before the findings that read it.
    let names: Vec<&str> =
        policy["spec"]["variables"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert!(names.iter().position(|n| *n == "ruleIds") < names.iter().position(|n| *n == "findings"), "{names:?}");
    // One resource rule per group and version: no apps/v2 or autoscaling/v1 matched by accident.
    let rules = &policy["spec"]["matchConstraints"]["resourceRules"];
    let by_group: Vec<(String, String, String)> = rules
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["apiGroups"].to_string(), r["apiVersions"].to_string(), r["resources"].to_string()))
        .collect();
    assert_eq!(
        by_group,
        [
            ("[\"apps\"]".into(), "[\"v1\"]".into(), "[\"deployments\",\"statefulsets\"]".into()),
            ("[\"policy\"]".into(), "[\"v1\"]".into(), "[\"poddisruptionbudgets\"]".into()),
            ("[\"autoscaling\"]".into(), "[\"v2\"]".into(), "[\"horizontalpodautoscalers\"]".into()),
        ]
    );
    // A policy that does not read them has no such variable.
    let other = named(&docs, "ValidatingAdmissionPolicy", "ha-guard-termination-grace-zero-warn").unwrap();
    assert!(other["spec"]["variables"].as_array().unwrap().iter().all(|v| v["name"] != "ruleIds"));
}

//! ha-guard's own install manifests (`manifests/`, the chart rendered by
//! `scripts/render-manifests.sh`): they pass its own check, grant only what it reads plus writes
//! of its own Secret and webhook configurations by name, and register webhooks that can never lock
//! ha-guard out of its own namespace.

use std::path::Path;

use ha_guard::check::{self, Options};
use ha_guard::manifest as load;
use serde_json::Value;

/// The two renderings: self-managed certificates (the default) and cert-manager.
const FILES: [&str; 2] = ["manifests/ha-guard.yaml", "manifests/cert-manager/ha-guard.yaml"];

fn load(file: &str) -> load::Loaded {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let loaded = load::load(&[path.display().to_string()]);
    assert!(loaded.errors.is_empty(), "{file}: {:?}", loaded.errors);
    loaded
}

fn manifests(file: &str) -> Vec<load::Document> {
    load(file).documents
}

fn of_kind<'a>(docs: &'a [load::Document], kind: &str) -> Vec<&'a Value> {
    docs.iter().map(|d| &d.value).filter(|v| v["kind"] == kind).collect()
}

#[test]
fn own_manifests_have_no_finding_at_all() {
    for file in FILES {
        let loaded = load(file);
        // Complete: the manifests are ha-guard's whole namespace, so pdb-missing and friends run too.
        let options = Options { complete: true, namespace: "default".into(), config: Default::default() };
        let report = check::check(&loaded, &options);
        assert!(report.errors.is_empty(), "{file}: {:?}", report.errors);
        let findings: Vec<_> = report.findings.iter().map(|l| (l.finding.rule, l.finding.object.to_string())).collect();
        assert!(findings.is_empty(), "{file}: ha-guard's own manifests must pass its own check: {findings:?}");
        assert!(report.fixes.is_empty(), "{file}: nothing left for the mutations to add: {:?}", report.fixes);
        assert!(report.unchecked.is_empty(), "{file}: {:?}", report.unchecked);
        assert!(report.notices.is_empty(), "{file}: {:?}", report.notices);
        assert_eq!(
            report.objects, 9,
            "{file}: the webhook's and the audit's Deployment, PDB and Service, the Namespace and both webhook \
             configurations are checked"
        );
    }
}

/// ha-guard's webhooks are fail-open as shipped; made fail-closed, its backend (two replicas kept
/// apart, a PDB letting one go) still passes `webhook-fail-closed-unavailable`, and at one replica
/// it does not.
#[test]
fn its_own_webhooks_would_pass_even_fail_closed() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FILES[0]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches("failurePolicy: Ignore").count(), 2, "both webhooks are fail-open as shipped");
    let check = |text: &str| {
        let mut loaded = load::Loaded::default();
        load::add_text(&mut loaded, "ha-guard.yaml".into(), None, text.to_string(), false);
        let options = Options { complete: true, namespace: "default".into(), config: Default::default() };
        let report = check::check(&loaded, &options);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        report.findings.iter().map(|l| (l.finding.rule.id, l.finding.object.to_string())).collect::<Vec<_>>()
    };
    let closed = text.replace("failurePolicy: Ignore", "failurePolicy: Fail");
    assert_eq!(check(&closed), vec![]);
    let replicas = text.matches("\n  replicas: 2\n").count();
    assert_eq!(replicas, 2, "two Deployments with replicas: 2, the webhook's and the audit's");
    // The webhook's (the backend of the webhooks) down to one replica; the audit's stays at two.
    let webhook = closed.find("kind: Deployment\nmetadata:\n  name: ha-guard\n").expect("the webhook's Deployment");
    let at = webhook + closed[webhook..].find("\n  replicas: 2\n").unwrap();
    assert!(!closed[webhook..at].contains("name: ha-guard-audit"), "replicas of the webhook's Deployment");
    let single = format!("{}\n  replicas: 1\n{}", &closed[..at], &closed[at + "\n  replicas: 2\n".len()..]);
    let found = check(&single);
    let on_webhooks: Vec<_> = found.iter().filter(|(rule, _)| *rule == "webhook-fail-closed-unavailable").collect();
    assert_eq!(
        on_webhooks,
        [
            &("webhook-fail-closed-unavailable", "MutatingWebhookConfiguration/ha-guard".to_string()),
            &("webhook-fail-closed-unavailable", "ValidatingWebhookConfiguration/ha-guard".to_string())
        ],
        "{found:?}"
    );
}

#[test]
fn the_cluster_role_only_reads_the_kinds_the_rules_read() {
    for file in FILES {
        let docs = manifests(file);
        let roles: Vec<&Value> =
            of_kind(&docs, "ClusterRole").into_iter().filter(|r| r["metadata"]["name"] == "ha-guard").collect();
        assert_eq!(roles.len(), 1, "{file}");
        let mut granted: Vec<(String, String, Vec<String>)> = Vec::new();
        for rule in roles[0]["rules"].as_array().unwrap() {
            let verbs: Vec<String> =
                rule["verbs"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    granted.push((group.as_str().unwrap().into(), resource.as_str().unwrap().into(), verbs.clone()));
                }
            }
            assert!(rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none());
        }
        granted.sort();
        let read = vec!["get".to_string(), "list".into(), "watch".into()];
        let expected: Vec<(String, String, Vec<String>)> = [
            ("", "namespaces"),
            ("", "nodes"),
            ("", "persistentvolumeclaims"),
            ("", "services"),
            ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
            ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
            ("apiregistration.k8s.io", "apiservices"),
            ("apps", "deployments"),
            ("apps", "statefulsets"),
            ("autoscaling", "horizontalpodautoscalers"),
            ("keda.sh", "scaledobjects"),
            ("policy", "poddisruptionbudgets"),
        ]
        .iter()
        .map(|(g, r)| (g.to_string(), r.to_string(), read.clone()))
        .collect();
        assert_eq!(granted, expected, "{file}: get/list/watch on exactly the watched kinds; no Secrets, no writes");
    }
}

/// A rule of a Role or ClusterRole: (kind, namespace, resources, resourceNames, verbs).
type Grant = (String, String, Vec<String>, Vec<String>, Vec<String>);

#[test]
fn writes_are_only_to_its_own_secret_and_webhook_configurations() {
    // Every rule of every Role and ClusterRole that does more than read without names.
    let writes = |file: &str| -> Vec<Grant> {
        let docs = manifests(file);
        let list = |v: &Value| -> Vec<String> {
            v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect()).unwrap_or_default()
        };
        let mut out = Vec::new();
        for role in docs.iter().map(|d| &d.value).filter(|v| v["kind"] == "Role" || v["kind"] == "ClusterRole") {
            for rule in role["rules"].as_array().unwrap() {
                let verbs = list(&rule["verbs"]);
                if rule.get("resourceNames").is_none()
                    && verbs.iter().all(|v| ["get", "list", "watch"].contains(&v.as_str()))
                {
                    continue;
                }
                out.push((
                    role["kind"].as_str().unwrap().to_string(),
                    role["metadata"]["namespace"].as_str().unwrap_or("").to_string(),
                    list(&rule["resources"]),
                    list(&rule["resourceNames"]),
                    verbs,
                ));
            }
        }
        out
    };
    let strings = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let verbs = strings(&["get", "list", "watch", "update", "patch"]);
    // The background audit's (both files): its reports and its Lease by name, and the Lease's
    // create, which cannot be limited by name (a POST names its object in the body).
    let audit: Vec<Grant> = vec![
        (
            "ClusterRole".to_string(),
            String::new(),
            strings(&["policyreports", "clusterpolicyreports"]),
            strings(&["ha-guard"]),
            strings(&["get", "create", "patch", "delete"]),
        ),
        (
            "Role".to_string(),
            "ha-guard".to_string(),
            strings(&["leases"]),
            strings(&["ha-guard-audit"]),
            strings(&["get", "patch"]),
        ),
        ("Role".to_string(), "ha-guard".to_string(), strings(&["leases"]), vec![], strings(&["create"])),
        // The generated admission policies (both files), by the names ha-guard can generate.
        (
            "ClusterRole".to_string(),
            String::new(),
            strings(&[
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
                "mutatingadmissionpolicies",
                "mutatingadmissionpolicybindings",
            ]),
            ha_guard::core::rules::CEL_RULES
                .iter()
                .flat_map(|r| [format!("ha-guard-{}", r.rule.id), format!("ha-guard-{}-warn", r.rule.id)])
                .chain(ha_guard::core::mutations::CEL_MUTATIONS.iter().map(|m| format!("ha-guard-{}", m.mutation.id)))
                .collect(),
            strings(&["get", "create", "patch", "delete"]),
        ),
    ];
    let mut managed = vec![
        (
            "ClusterRole".to_string(),
            String::new(),
            vec!["validatingwebhookconfigurations".to_string(), "mutatingwebhookconfigurations".into()],
            vec!["ha-guard".to_string()],
            verbs.clone(),
        ),
        (
            "Role".to_string(),
            "ha-guard".to_string(),
            vec!["secrets".to_string()],
            vec!["ha-guard-tls".to_string()],
            verbs,
        ),
    ];
    managed.extend(audit.clone());
    let sorted = |mut v: Vec<Grant>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(writes(FILES[0])),
        sorted(managed),
        "self-managed certificates: its Secret and its two webhook configurations, each by name; the background \
         audit's reports and Lease; the admission policies by name"
    );
    assert_eq!(
        sorted(writes(FILES[1])),
        sorted(audit),
        "cert-manager: ha-guard writes only the background audit's and the admission policies"
    );
}

#[test]
fn webhooks_leave_out_kube_system_and_their_own_namespace() {
    let docs = manifests(FILES[0]);
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        let configs = of_kind(&docs, kind);
        assert_eq!(configs.len(), 1, "{kind}");
        for hook in configs[0]["webhooks"].as_array().unwrap() {
            assert_eq!(hook["admissionReviewVersions"], serde_json::json!(["v1"]), "{kind}");
            assert_eq!(hook["sideEffects"], "None", "{kind}");
            assert_eq!(hook["failurePolicy"], "Ignore", "{kind}: the documented choice");
            assert_eq!(hook["timeoutSeconds"], 5, "{kind}");
            let exprs = hook["namespaceSelector"]["matchExpressions"].as_array().unwrap();
            assert!(
                exprs.iter().any(|e| e["key"] == "kubernetes.io/metadata.name"
                    && e["operator"] == "NotIn"
                    && e["values"].as_array().unwrap().contains(&"kube-system".into())
                    && e["values"].as_array().unwrap().contains(&"ha-guard".into())),
                "{kind}: {exprs:?}"
            );
            assert!(
                exprs.iter().any(|e| e["key"] == "ha-guard.io/mode"
                    && e["operator"] == "NotIn"
                    && e["values"] == serde_json::json!(["off"])),
                "{kind}: namespaces labelled ha-guard.io/mode=off are not sent: {exprs:?}"
            );
            for rule in hook["rules"].as_array().unwrap() {
                assert_eq!(rule["operations"], serde_json::json!(["CREATE", "UPDATE"]), "{kind}");
            }
        }
    }
    let validating = &of_kind(&docs, "ValidatingWebhookConfiguration")[0]["webhooks"][0];
    let resources: Vec<&str> = validating["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()))
        .collect();
    for r in [
        "deployments",
        "statefulsets",
        "deployments/scale",
        "statefulsets/scale",
        "poddisruptionbudgets",
        "horizontalpodautoscalers",
        "scaledobjects",
        "services",
    ] {
        assert!(resources.contains(&r), "validating webhook must cover {r}: {resources:?}");
    }
}

#[test]
fn the_deployment_practises_what_it_enforces() {
    let docs = manifests(FILES[0]);
    let deployments = of_kind(&docs, "Deployment");
    let names: Vec<&str> = deployments.iter().map(|d| d["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ha-guard", "ha-guard-audit"], "the webhook's first, then the background audit's");
    for d in deployments {
        assert!(d["spec"]["replicas"].as_i64().unwrap() >= 2, "{}", d["metadata"]["name"]);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["topologySpreadConstraints"][0]["labelSelector"], d["spec"]["selector"]);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"], true);
        assert!(of_kind(&docs, "PodDisruptionBudget").iter().any(|p| p["spec"]["selector"] == d["spec"]["selector"]));
    }
    let d = of_kind(&docs, "Deployment")[0];
    assert!(d["spec"]["replicas"].as_i64().unwrap() >= 2);
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["topologySpreadConstraints"][0]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(pod["topologySpreadConstraints"][0]["labelSelector"], d["spec"]["selector"]);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(c["resources"]["requests"].is_object() && c["resources"]["limits"].is_object());
    let pdb = of_kind(&docs, "PodDisruptionBudget")[0];
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
}

//! The Helm chart `charts/ha-guard`, through the real helm (built from its Go module by
//! `tests/e2e/helm/build.sh` on first use, cached outside the repository): it lints, renders in
//! every certificate mode and with every optional part, each rendering passes ha-guard's own
//! `check --complete` with no finding, a misspelt value is refused by the schema, the webhooks
//! and RBAC are what the contract says (docs: `/work/notes/tls-contract.md` as carried into
//! docs/operations.md), and `manifests/` is exactly the chart rendered by `scripts/render-manifests.sh`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

pub(crate) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The pinned helm, built once per machine (a cached build returns at once). A helm that cannot
/// be built fails the test with the script's output: never a skip.
fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        let script = repo().join("tests/e2e/helm/build.sh");
        let out = Command::new(&script)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{} failed ({}):\n{stderr}", script.display(), out.status);
        let path = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
        assert!(path.is_file(), "{} printed no helm path: {stdout:?}\n{stderr}", script.display());
        path
    })
}

fn run_helm(args: &[&str]) -> Output {
    Command::new(helm())
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run helm: {e}"))
}

/// `helm template ha-guard charts/ha-guard --namespace ha-guard ARGS` (hooks included, as
/// `helm install` would create them).
fn template(args: &[&str]) -> Output {
    let mut all = vec!["template", "ha-guard", "charts/ha-guard", "--namespace", "ha-guard"];
    all.extend_from_slice(args);
    run_helm(&all)
}

fn render(args: &[&str]) -> String {
    let out = template(args);
    assert!(out.status.success(), "helm template {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("helm prints UTF-8")
}

/// The error of a rendering that must fail.
pub(crate) fn refused(args: &[&str]) -> String {
    let out = template(args);
    assert!(
        !out.status.success(),
        "helm template {args:?} should have failed, rendered:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn docs(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap_or_else(|e| panic!("helm rendered bad YAML ({e}):\n{text}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn is_hook(doc: &Value) -> bool {
    doc["metadata"]["annotations"].get("helm.sh/hook").is_some()
}

/// The release's objects (hooks left out), as `helm install` applies them.
pub(crate) fn objects(args: &[&str]) -> Vec<Value> {
    docs(&render(args)).into_iter().filter(|d| !is_hook(d)).collect()
}

/// The objects of a release `release` in `namespace` (hooks left out).
pub(crate) fn render_release(release: &str, namespace: &str, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["template", release, "charts/ha-guard", "--namespace", namespace];
    all.extend_from_slice(args);
    let out = run_helm(&all);
    assert!(out.status.success(), "helm template {all:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    docs(&String::from_utf8(out.stdout).expect("helm prints UTF-8")).into_iter().filter(|d| !is_hook(d)).collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

pub(crate) fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(docs, kind);
    assert_eq!(found.len(), 1, "expected one {kind}, found {}", found.len());
    found[0]
}

/// Whether an object is the background audit's (`<fullname>-audit`).
fn is_audit(doc: &Value) -> bool {
    doc["metadata"]["name"].as_str().is_some_and(|n| n.ends_with("-audit"))
}

/// The webhook's one object of `kind` (the audit's, named `<fullname>-audit`, left out).
fn webhook<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = of_kind(docs, kind).into_iter().filter(|d| !is_audit(d)).collect();
    assert_eq!(found.len(), 1, "expected one {kind} of the webhook, found {}", found.len());
    found[0]
}

/// The background audit's one object of `kind`.
fn audit<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = of_kind(docs, kind).into_iter().filter(|d| is_audit(d)).collect();
    assert_eq!(found.len(), 1, "expected one {kind} of the audit, found {}", found.len());
    found[0]
}

/// The webhook's container.
fn container(docs: &[Value]) -> &Value {
    &webhook(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

/// The audit's container.
fn audit_container(docs: &[Value]) -> &Value {
    &audit(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

/// Whether `selector` (a `matchLabels` map, as in a Service, or a `{matchLabels: ...}`) selects a
/// pod labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let map = selector.get("matchLabels").unwrap_or(selector).as_object().expect("a label map");
    assert!(!map.is_empty(), "an empty selector selects everything: {selector}");
    assert!(selector.get("matchExpressions").is_none(), "matchLabels only: {selector}");
    map.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().map(|s| s.as_str().expect("a string").to_string()).collect()).unwrap_or_default()
}

/// `ha-guard check --complete --format json` (the binary cargo built) on a rendering.
fn check_complete(yaml: &str) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, yaml).expect("write rendering");
    let out = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["check", "--complete", "--format", "json", "-f"])
        .arg(&file)
        .output()
        .expect("run ha-guard check");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.code().is_some(), "check was killed: {out:?}");
    report
}

/// Value combinations a platform engineer would install, each rendered with its hooks.
const COMBINATIONS: &[(&str, &[&str])] = &[
    ("defaults", &[]),
    ("cert-manager", &["--set", "certificates.mode=certManager"]),
    (
        "cert-manager with an existing issuer",
        &[
            "--set",
            "certificates.mode=certManager",
            "--set",
            "certificates.certManager.issuerRef.name=corp-ca",
            "--set",
            "certificates.certManager.issuerRef.kind=ClusterIssuer",
        ],
    ),
    (
        "a Secret of the user's",
        &[
            "--set",
            "certificates.mode=secret",
            "--set",
            "certificates.secret.name=my-tls",
            "--set",
            "certificates.secret.caBundle=-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        ],
    ),
    ("HA, 3 replicas", &["--set", "replicaCount=3"]),
    (
        "monitoring on",
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.dashboard.enabled=true",
        ],
    ),
    ("network policy on", &["--set", "networkPolicy.enabled=true"]),
    ("namespace rendered", &["--set", "namespace.create=true"]),
    (
        "hard spread, rules configured",
        &[
            "--set",
            "topologySpread.hostname.whenUnsatisfiable=DoNotSchedule",
            "--set",
            "config.rules.pdb-missing=deny",
            "--set",
            "config.mutations.inject-default-spread=true",
        ],
    ),
    ("Kubernetes 1.27", &["--kube-version", "1.27.0"]),
    ("background audit off", &["--set", "audit.enabled=false"]),
    (
        "a platform team's policy: exceptions, overrides, namespace globs",
        &[
            "--set",
            "config.exemptNamespaces={kube-system,team-sandbox-*,legacy}",
            "--set",
            "config.exceptions[0].name=tigera-operator-tolerations",
            "--set",
            "config.exceptions[0].rules={toleration-wildcard}",
            "--set",
            "config.exceptions[0].match.kinds={Deployment}",
            "--set",
            "config.exceptions[0].match.namespaces={tigera-*}",
            "--set",
            "config.exceptions[0].reason=vendor operator",
            "--set-string",
            "config.exceptions[0].expires=2027-03-01",
            "--set",
            "config.overrides[0].namespaceSelector.matchLabels.tier=prod",
            "--set",
            "config.overrides[0].rules.pdb-missing=deny",
        ],
    ),
];

#[test]
fn helm_lint_passes_in_every_certificate_mode() {
    // The user's CA from a file, as the values documentation says (--set-file).
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").unwrap();
    let ca = format!("certificates.secret.caBundle={}", ca.display());
    let secret = ["--set", "certificates.mode=secret", "--set", "certificates.secret.name=x", "--set-file", &ca];
    let policy = COMBINATIONS.last().unwrap().1;
    for args in [&[][..], &["--set", "certificates.mode=certManager"], &secret, COMBINATIONS[5].1, policy] {
        let mut all = vec!["lint", "--strict", "charts/ha-guard"];
        all.extend_from_slice(args);
        let out = run_helm(&all);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "helm lint {args:?}:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("1 chart(s) linted, 0 chart(s) failed"), "{stdout}");
        assert!(!stdout.contains("[WARNING]") && !stdout.contains("[ERROR]"), "{stdout}");
    }
}

#[test]
fn every_combination_passes_check_complete_with_no_finding() {
    for (name, args) in COMBINATIONS {
        let yaml = render(args);
        let report = check_complete(&yaml);
        for key in ["findings", "mutations", "unchecked", "errors"] {
            assert_eq!(
                report[key],
                json!([]),
                "{name}: ha-guard's own chart must pass its own check ({key}):\n{report:#}"
            );
        }
        assert_eq!(report["summary"], json!({"deny": 0, "warn": 0, "allowed": 0}), "{name}");
        let d = docs(&yaml);
        // The webhook's and (unless turned off) the background audit's.
        let n = if args.contains(&"audit.enabled=false") { 1 } else { 2 };
        assert_eq!(of_kind(&d, "Deployment").len(), n, "{name}");
        assert_eq!(of_kind(&d, "PodDisruptionBudget").len(), n, "{name}");
    }
}

#[test]
fn the_check_above_fails_when_the_chart_breaks_ha_guards_rules() {
    // The same check on a rendering without ha-guard's spread and PDB: it must find both, or the
    // test above proves nothing.
    let yaml =
        render(&["--set", "topologySpread.hostname.enabled=false", "--set", "podDisruptionBudget.enabled=false"]);
    let report = check_complete(&yaml);
    let rules: BTreeSet<&str> =
        report["findings"].as_array().unwrap().iter().map(|f| f["rule"].as_str().unwrap()).collect();
    assert_eq!(rules, BTreeSet::from(["pdb-missing", "replicas-colocated"]), "{report:#}");
}

#[test]
fn a_misspelt_value_fails_with_the_schema_error() {
    let top = refused(&["--set", "replicaCount=2", "--set", "replicasCount=3"]);
    assert!(top.contains("additional properties 'replicasCount' not allowed"), "{top}");
    let nested = refused(&["--set", "webhook.failurPolicy=Fail"]);
    assert!(nested.contains("at '/webhook': additional properties 'failurPolicy' not allowed"), "{nested}");
    let deep = refused(&["--set", "topologySpread.hostname.whenUnsatisfiabel=DoNotSchedule"]);
    assert!(deep.contains("at '/topologySpread/hostname'") && deep.contains("whenUnsatisfiabel"), "{deep}");
    // ha-guard's configuration too: an unknown rule ID, a bad action, an unknown mutation.
    let rule = refused(&["--set", "config.rules.pdb-mising=warn"]);
    assert!(rule.contains("at '/config/rules': additional properties 'pdb-mising' not allowed"), "{rule}");
    let action = refused(&["--set", "config.rules.pdb-missing=block"]);
    assert!(action.contains("/config/rules/pdb-missing") && action.contains("deny"), "{action}");
    let mutation = refused(&["--set", "config.mutations.inject-spread=true"]);
    assert!(mutation.contains("additional properties 'inject-spread' not allowed"), "{mutation}");
    // Wrong types and values.
    let mode = refused(&["--set", "certificates.mode=certmanager"]);
    assert!(mode.contains("/certificates/mode") && mode.contains("certManager"), "{mode}");
    let count = refused(&["--set", "replicaCount=two"]);
    assert!(count.contains("/replicaCount") && count.contains("integer"), "{count}");
    let policy = refused(&["--set", "webhook.failurePolicy=ignore"]);
    assert!(policy.contains("/webhook/failurePolicy"), "{policy}");
    let timeout = refused(&["--set", "webhook.timeoutSeconds=31"]);
    assert!(timeout.contains("/webhook/timeoutSeconds"), "{timeout}");
    // A base64 caBundle where the PEM is expected.
    let b64 = refused(&[
        "--set",
        "certificates.mode=secret",
        "--set",
        "certificates.secret.name=x",
        "--set",
        "certificates.secret.caBundle=LS0tLS1CRUdJTg==",
    ]);
    assert!(b64.contains("/certificates/secret/caBundle"), "{b64}");
}

#[test]
fn values_that_contradict_each_other_fail_with_a_message_naming_the_fix() {
    let grace = refused(&["--set", "terminationGracePeriodSeconds=20"]);
    assert!(
        grace.contains(
            "terminationGracePeriodSeconds (20) must be at least shutdown.delaySeconds + shutdown.timeoutSeconds (25)"
        ),
        "{grace}"
    );
    let name = refused(&["--set", "certificates.mode=secret"]);
    assert!(name.contains("certificates.mode=secret needs certificates.secret.name"), "{name}");
    let ca = refused(&["--set", "certificates.mode=secret", "--set", "certificates.secret.name=x"]);
    assert!(ca.contains("needs certificates.secret.caBundle") && ca.contains("--set-file"), "{ca}");
    let old = refused(&["--kube-version", "1.26.0"]);
    assert!(old.contains("chart requires kubeVersion: >=1.27.0-0"), "{old}");
}

fn mutating(docs: &[Value]) -> &Value {
    &one(docs, "MutatingWebhookConfiguration")["webhooks"][0]
}

fn validating(docs: &[Value]) -> &Value {
    &one(docs, "ValidatingWebhookConfiguration")["webhooks"][0]
}

#[test]
fn match_conditions_only_where_the_cluster_has_them() {
    let extra = [
        "--set",
        "webhook.matchConditions[0].name=not-argo",
        "--set-string",
        "webhook.matchConditions[0].expression=true",
    ];
    for version in ["1.30.0", "1.34.2"] {
        let d = objects(&["--kube-version", version]);
        let names = |hook: &Value| -> Vec<String> {
            hook["matchConditions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(mutating(&d)), ["needs-a-mutation", "changes-what-ha-guard-reads"], "{version}");
        assert_eq!(names(validating(&d)), ["changes-what-ha-guard-reads"], "{version}");
        // Both webhooks skip the same writes (tests/e2e_match_conditions.rs runs the condition).
        assert_eq!(mutating(&d)["matchConditions"][1], validating(&d)["matchConditions"][0]);
        // The user's conditions go to both webhooks, after ha-guard's own.
        let mut args = vec!["--kube-version", version];
        args.extend_from_slice(&extra);
        let d = objects(&args);
        assert_eq!(mutating(&d)["matchConditions"][2], json!({"name": "not-argo", "expression": "true"}));
        assert_eq!(validating(&d)["matchConditions"][1], json!({"name": "not-argo", "expression": "true"}));
    }
    for version in ["1.29.9", "1.27.0"] {
        let d = objects(&["--kube-version", version]);
        assert!(mutating(&d).get("matchConditions").is_none(), "{version}: {:#}", mutating(&d));
        assert!(validating(&d).get("matchConditions").is_none(), "{version}");
        let mut args = vec!["--kube-version", version];
        args.extend_from_slice(&extra);
        let err = refused(&args);
        assert!(err.contains("webhook.matchConditions need Kubernetes 1.30 or later"), "{err}");
    }
    // helm template without --kube-version assumes the version of the client-go helm was built
    // with (v1.37 for v3.22): the conditions are there, as with a released helm.
    let d = objects(&[]);
    assert!(mutating(&d).get("matchConditions").is_some());
}

/// The mutating webhook is sent only what a mutation that is on could add to: the chart's table of
/// defaults is the registry's, and each switch changes the condition.
#[test]
fn the_mutating_webhook_is_sent_what_an_enabled_mutation_could_change() {
    let condition = |args: &[&str]| -> String {
        let mut all = vec!["--kube-version", "1.34.2"];
        all.extend_from_slice(args);
        let d = objects(&all);
        let first = &mutating(&d)["matchConditions"][0];
        assert_eq!(first["name"], "needs-a-mutation");
        first["expression"].as_str().unwrap().to_string()
    };
    let spreads = "object.spec.template.spec.topologySpreadConstraints.exists(c, !has(c.labelSelector))";
    let policy = "!has(object.spec.unhealthyPodEvictionPolicy)";
    let defaults = condition(&[]);
    assert!(defaults.contains(spreads) && defaults.contains(policy), "{defaults}");
    // The chart assumes the registry's defaults: on for these two, off for the two others.
    let on: BTreeSet<&str> =
        ha_guard::core::registry::mutations().iter().filter(|m| m.default_on).map(|m| m.id).collect();
    assert_eq!(on, BTreeSet::from(["inject-spread-selector", "inject-unhealthy-pod-eviction-policy"]));
    assert_eq!(condition(&["--set", "config.mutations.inject-spread-selector=true"]), defaults);
    for off_by_default in ["inject-default-spread", "inject-match-label-keys"] {
        let e = condition(&["--set", &format!("config.mutations.{off_by_default}=true")]);
        assert!(e.ends_with(": (true)") && e.contains(policy), "{off_by_default}: {e}");
    }
    let e = condition(&["--set", "config.mutations.inject-spread-selector=false"]);
    assert!(e.ends_with(": (false)") && e.contains(policy), "{e}");
    let e = condition(&["--set", "config.mutations.inject-unhealthy-pod-eviction-policy=false"]);
    assert!(e.contains("? (false) :") && e.contains(spreads), "{e}");
}

#[test]
fn webhooks_keep_ha_guard_out_of_the_namespaces_that_must_stay_repairable() {
    let d = objects(&[
        "--set",
        "webhook.excludeNamespaces={flux-system}",
        "--set",
        "webhook.namespaceSelector.matchLabels.team=a",
        "--set",
        "webhook.objectSelector.matchLabels.checked=yes",
    ]);
    for hook in [mutating(&d), validating(&d)] {
        let selector = &hook["namespaceSelector"];
        assert_eq!(
            selector["matchExpressions"][0],
            json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "ha-guard", "flux-system"]})
        );
        assert_eq!(
            selector["matchExpressions"][1],
            json!({"key": "ha-guard.io/mode", "operator": "NotIn", "values": ["off"]})
        );
        assert_eq!(selector["matchLabels"], json!({"team": "a"}));
        assert_eq!(hook["objectSelector"], json!({"matchLabels": {"checked": "yes"}}));
    }
    // Another release namespace is left out in its place.
    let other = docs(
        &String::from_utf8(run_helm(&["template", "hg", "charts/ha-guard", "-n", "policy", "--no-hooks"]).stdout)
            .unwrap(),
    );
    assert_eq!(
        mutating(&other)["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["kube-system", "policy"])
    );
    assert_eq!(
        mutating(&other)["clientConfig"]["service"],
        json!({"name": "hg-ha-guard", "namespace": "policy", "path": "/mutate", "port": 443})
    );
}

/// The `kubernetes.io/metadata.name NotIn` values of both webhooks' namespaceSelector (the same in
/// both), and the configuration's exemptNamespaces.
fn namespace_lists(args: &[&str]) -> (Vec<String>, Vec<String>) {
    let d = objects(args);
    let not_in = |hook: &Value| {
        let e = &hook["namespaceSelector"]["matchExpressions"][0];
        assert_eq!((&e["key"], &e["operator"]), (&json!("kubernetes.io/metadata.name"), &json!("NotIn")), "{hook}");
        strings(&e["values"])
    };
    let selector = not_in(mutating(&d));
    assert_eq!(selector, not_in(validating(&d)), "both webhooks leave out the same namespaces");
    let text = one(&d, "ConfigMap")["data"]["config.yaml"].as_str().expect("config.yaml").to_string();
    let config: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (selector, strings(&config["exemptNamespaces"]))
}

/// One namespace list (issue 39): config.exemptNamespaces feeds the configuration whole and the
/// webhooks' namespaceSelector with its exact names; a glob never reaches a selector (it would
/// match only a namespace literally named so). webhook.excludeNamespaces, deprecated, is merged
/// into both.
#[test]
fn config_exempt_namespaces_is_the_one_list_and_only_names_reach_the_selector() {
    // Defaults: kube-system, and the release namespace added to both.
    let (selector, exempt) = namespace_lists(&[]);
    assert_eq!(selector, ["kube-system", "ha-guard"]);
    assert_eq!(exempt, ["kube-system", "ha-guard"]);

    // Names and globs from both values.
    let (selector, exempt) = namespace_lists(&[
        "--set",
        "config.exemptNamespaces={kube-system,team-sandbox-*,legacy}",
        "--set",
        "webhook.excludeNamespaces={flux-system,*-preview,legacy}",
    ]);
    assert_eq!(selector, ["kube-system", "ha-guard", "legacy", "flux-system"]);
    assert!(!selector.iter().any(|n| n.contains('*')), "a glob in a namespaceSelector: {selector:?}");
    assert_eq!(exempt, ["kube-system", "team-sandbox-*", "legacy", "flux-system", "*-preview", "ha-guard"]);

    // Only globs: the selector keeps its two fixed names, the configuration gets the globs.
    let (selector, exempt) = namespace_lists(&["--set", "config.exemptNamespaces={team-*}"]);
    assert_eq!(selector, ["kube-system", "ha-guard"]);
    assert_eq!(exempt, ["team-*", "ha-guard"]);
    // Nothing given: the fixed two still.
    let (selector, exempt) = namespace_lists(&["--set", "config.exemptNamespaces=null"]);
    assert_eq!(selector, ["kube-system", "ha-guard"]);
    assert_eq!(exempt, ["ha-guard"]);

    // Another release: its namespace in both lists.
    let d = render_release("hg", "policy", &["--set", "config.exemptNamespaces={kube-system,ci-*}"]);
    assert_eq!(strings(&mutating(&d)["namespaceSelector"]["matchExpressions"][0]["values"]), ["kube-system", "policy"]);
    let config: Value = serde_saphyr::from_str(one(&d, "ConfigMap")["data"]["config.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(strings(&config["exemptNamespaces"]), ["kube-system", "ci-*", "policy"]);

    // Entries are namespace names or * globs, in either value.
    for (value, bad) in [
        ("config.exemptNamespaces", "Team_A"),
        ("config.exemptNamespaces", "team?"),
        ("webhook.excludeNamespaces", "ns/with/slash"),
        ("config.exemptNamespaces", ""),
    ] {
        let e = refused(&["--set-json", &format!("{value}=[{bad:?}]")]);
        let at = format!("at '/{}/0'", value.replace('.', "/"));
        assert!(e.contains(&at), "{value}={bad:?}: {e}");
    }
}

/// Every rule of every Role and ClusterRole of a rendering, with the namespace of a Role.
fn rbac_rules(docs: &[Value]) -> Vec<(String, Option<String>, Value)> {
    let mut out = Vec::new();
    for d in docs.iter().filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole") {
        let ns = d["metadata"]["namespace"].as_str().map(String::from);
        for rule in d["rules"].as_array().expect("rules") {
            out.push((d["metadata"]["name"].as_str().unwrap().to_string(), ns.clone(), rule.clone()));
        }
    }
    out
}

const READ: [&str; 3] = ["get", "list", "watch"];

#[test]
fn rbac_writes_only_its_own_secret_and_webhook_configurations_by_name() {
    let d = objects(&[]);
    let mut writes = Vec::new();
    for (role, ns, rule) in rbac_rules(&d) {
        let verbs = strings(&rule["verbs"]);
        assert!(rule.get("nonResourceURLs").is_none(), "{role}: {rule}");
        for v in &verbs {
            assert!(v != "*" && v != "deletecollection", "{role}: {rule}");
            assert!(!["escalate", "bind", "impersonate"].contains(&v.as_str()), "{role}: {rule}");
        }
        if verbs.iter().all(|v| READ.contains(&v.as_str())) && rule.get("resourceNames").is_none() {
            continue;
        }
        // The one write without a name: the Lease's create (a POST names its object in the body,
        // which resourceNames cannot match), in the release namespace only.
        if verbs == ["create"] && strings(&rule["resources"]) == ["leases"] {
            assert_eq!((role.as_str(), ns.as_deref()), ("ha-guard-audit", Some("ha-guard")), "{rule}");
            continue;
        }
        let names = strings(&rule["resourceNames"]);
        assert!(!names.is_empty(), "{role}: every write verb needs resourceNames: {rule}");
        writes.push((role, ns, strings(&rule["resources"]), names, verbs));
    }
    writes.sort();
    let rw = vec!["get".to_string(), "list".into(), "watch".into(), "update".into(), "patch".into()];
    let verbs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        writes,
        vec![
            (
                "ha-guard-admission-policies".to_string(),
                None,
                vec![
                    "validatingadmissionpolicies".to_string(),
                    "validatingadmissionpolicybindings".into(),
                    "mutatingadmissionpolicies".into(),
                    "mutatingadmissionpolicybindings".into()
                ],
                admission_policy_names(),
                verbs(&["get", "create", "patch", "delete"])
            ),
            (
                "ha-guard-audit".to_string(),
                None,
                vec!["policyreports".to_string(), "clusterpolicyreports".into()],
                vec!["ha-guard".to_string()],
                verbs(&["get", "create", "patch", "delete"])
            ),
            (
                "ha-guard-audit".to_string(),
                Some("ha-guard".into()),
                vec!["leases".to_string()],
                vec!["ha-guard-audit".to_string()],
                verbs(&["get", "patch"])
            ),
            (
                "ha-guard-tls".to_string(),
                Some("ha-guard".into()),
                vec!["secrets".to_string()],
                vec!["ha-guard-tls".to_string()],
                rw.clone()
            ),
            (
                "ha-guard-webhooks".to_string(),
                None,
                vec!["validatingwebhookconfigurations".to_string(), "mutatingwebhookconfigurations".into()],
                vec!["ha-guard".to_string()],
                rw
            ),
        ],
        "managed mode writes exactly its Secret and its two webhook configurations, and the admission policies \
         ha-guard can generate; the background audit its reports and its Lease, by name"
    );
    // Without the background audit: no Lease, no report, no pod read (but in `audit --drain`'s
    // role, which no ServiceAccount of the chart is bound to: see the test of that role).
    let off = objects(&["--set", "audit.enabled=false"]);
    for (role, _, rule) in rbac_rules(&off) {
        if role == "ha-guard-drain" {
            continue;
        }
        assert!(!role.ends_with("-audit"), "{role}: {rule}");
        let resources = strings(&rule["resources"]);
        assert!(!resources.iter().any(|r| ["pods", "leases", "policyreports"].contains(&r.as_str())), "{rule}");
    }
    assert!(strings(&container(&off)["args"]).contains(&"--audit-interval=0".to_string()));
    // OpenReports instead: the reports' rules move to openreports.io, and the flag is passed.
    let open = objects(&["--set", "audit.reportApi=openreports.io/v1alpha1"]);
    let report_rules: Vec<Value> = rbac_rules(&open)
        .into_iter()
        .filter(|(_, _, rule)| strings(&rule["resources"]).iter().any(|r| r.ends_with("reports")))
        .map(|(_, _, rule)| rule)
        .collect();
    assert_eq!(
        report_rules,
        vec![
            json!({"apiGroups": ["openreports.io"], "resources": ["reports", "clusterreports"], "verbs": ["list", "watch"]}),
            json!({"apiGroups": ["openreports.io"], "resources": ["reports", "clusterreports"],
                "resourceNames": ["ha-guard"], "verbs": ["get", "create", "patch", "delete"]}),
        ]
    );
    assert!(strings(&audit_container(&open)["args"]).contains(&"--report-api=openreports.io/v1alpha1".to_string()));
    assert!(strings(&audit_container(&d)["args"]).contains(&"--report-api=wgpolicyk8s.io/v1alpha2".to_string()));
    for d in [&d, &open] {
        assert!(!strings(&container(d)["args"]).iter().any(|a| a.starts_with("--audit-report-api")));
    }
    assert!(refused(&["--set", "audit.reportApi=openreports.io/v1"]).contains("reportApi"));
    // The names are the objects the chart makes and the Deployment passes to ha-guard.
    assert_eq!(one(&d, "Secret")["metadata"]["name"], "ha-guard-tls");
    assert_eq!(of_kind(&d, "ValidatingWebhookConfiguration")[0]["metadata"]["name"], "ha-guard");
    // Every binding gives its role to one ServiceAccount of the chart's: the audit's roles to the
    // audit's, all others to the webhook's.
    for b in d.iter().filter(|d| d["kind"] == "RoleBinding" || d["kind"] == "ClusterRoleBinding") {
        let sa = if is_audit(b) { "ha-guard-audit" } else { "ha-guard" };
        assert_eq!(b["subjects"], json!([{"kind": "ServiceAccount", "name": sa, "namespace": "ha-guard"}]), "{b}");
        assert_eq!(b["roleRef"]["name"], b["metadata"]["name"], "{b}");
    }

    // With files (cert-manager, a user's Secret) ha-guard writes nothing but the background audit's
    // and the admission policies.
    for args in [COMBINATIONS[1].1, COMBINATIONS[3].1] {
        let d = objects(args);
        for (role, _, rule) in rbac_rules(&d) {
            if role == "ha-guard-audit" || role == "ha-guard-admission-policies" {
                continue; // as above
            }
            assert!(strings(&rule["verbs"]).iter().all(|v| READ.contains(&v.as_str())), "{args:?} {role}: {rule}");
        }
        let roles: Vec<&Value> = of_kind(&d, "Role");
        assert!(roles.iter().all(|r| r["metadata"]["name"] == "ha-guard-audit"), "{args:?}: {roles:?}");
        assert!(of_kind(&d, "Secret").is_empty(), "{args:?}");
    }
}

#[test]
fn the_cluster_role_reads_exactly_the_kinds_the_live_view_watches() {
    let d = objects(&[]);
    let role = of_kind(&d, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "ha-guard")
        .expect("ClusterRole ha-guard");
    let mut granted = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        assert_eq!(strings(&rule["verbs"]), READ, "{rule}");
        assert!(rule.get("resourceNames").is_none());
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                granted.push((g.clone(), r));
            }
        }
    }
    granted.sort();
    let expected: Vec<(String, String)> = [
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
    .map(|(g, r)| (g.to_string(), r.to_string()))
    .collect();
    assert_eq!(granted, expected);
}

/// `audit --drain`'s ClusterRole: read-only (get, list), what a whole audit reads plus ReplicaSets
/// and the storage of the volume filters; bound to none of the chart's ServiceAccounts; gone with
/// `audit.drainRole=false`.
#[test]
fn the_drain_role_reads_the_cluster_and_its_storage_and_is_bound_to_no_one() {
    let d = objects(&[]);
    let role = of_kind(&d, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "ha-guard-drain")
        .expect("ClusterRole ha-guard-drain");
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        assert_eq!(strings(&rule["verbs"]), ["get", "list"], "{rule}");
        assert!(rule.get("resourceNames").is_none());
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                granted.insert((g.clone(), r));
            }
        }
    }
    for (g, r) in [
        ("", "pods"),
        ("", "persistentvolumes"),
        ("", "persistentvolumeclaims"),
        ("storage.k8s.io", "storageclasses"),
        ("storage.k8s.io", "csinodes"),
        ("apps", "replicasets"),
        ("policy", "poddisruptionbudgets"),
    ] {
        assert!(granted.contains(&(g.to_string(), r.to_string())), "{g}/{r} not granted: {granted:?}");
    }
    let bound =
        d.iter().filter(|b| b["kind"] == "ClusterRoleBinding").any(|b| b["roleRef"]["name"] == "ha-guard-drain");
    assert!(!bound, "no binding of the chart gives it");
    let off = objects(&["--set", "audit.drainRole=false"]);
    assert!(!of_kind(&off, "ClusterRole").iter().any(|r| r["metadata"]["name"] == "ha-guard-drain"));
}

/// The rules a ServiceAccount gets through the rendering's bindings: (role kind, role name, rule).
fn rules_of(docs: &[Value], sa: &str) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for b in docs.iter().filter(|d| d["kind"] == "RoleBinding" || d["kind"] == "ClusterRoleBinding") {
        let bound = b["subjects"].as_array().unwrap().iter().any(|s| s["kind"] == "ServiceAccount" && s["name"] == sa);
        if !bound {
            continue;
        }
        let (kind, name) = (b["roleRef"]["kind"].as_str().unwrap(), b["roleRef"]["name"].as_str().unwrap());
        let role = docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{b}: no {kind} {name} in the rendering"));
        for rule in role["rules"].as_array().unwrap() {
            out.push((kind.to_string(), name.to_string(), rule.clone()));
        }
    }
    out
}

/// (apiGroup, resource, verb) triples of rules, with the resourceNames of a rule that has them.
fn grants(rules: &[(String, String, Value)]) -> BTreeSet<(String, String, String, Vec<String>)> {
    let mut out = BTreeSet::new();
    for (_, _, rule) in rules {
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                for v in strings(&rule["verbs"]) {
                    out.insert((g.clone(), r.clone(), v, strings(&rule["resourceNames"])));
                }
            }
        }
    }
    out
}

/// The kinds the live view watches (and the audit too), as (apiGroup, resource).
const WATCHED: [(&str, &str); 12] = [
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
];

#[test]
fn the_webhook_and_the_audit_have_service_accounts_and_roles_of_their_own() {
    for (name, args) in [("defaults", &[][..]), ("cert-manager", COMBINATIONS[1].1)] {
        let d = objects(args);
        // Each pod template runs as its own ServiceAccount.
        let sa_of = |kind_doc: &Value| kind_doc["spec"]["template"]["spec"]["serviceAccountName"].clone();
        assert_eq!(sa_of(webhook(&d, "Deployment")), "ha-guard", "{name}");
        assert_eq!(sa_of(audit(&d, "Deployment")), "ha-guard-audit", "{name}");
        assert_eq!(audit(&d, "ServiceAccount")["automountServiceAccountToken"], false, "{name}");

        // The webhook: the live view, and in managed mode its Secret and webhook configurations. No
        // pods, no ReplicaSets (not even list), no reports, no Lease.
        // (The admission policies' role, read and written by name: its own test.)
        let hook: Vec<_> = grants(&rules_of(&d, "ha-guard"))
            .into_iter()
            .filter(|(_, r, _, _)| !r.contains("admissionpolic"))
            .collect();
        let mut read: Vec<_> =
            hook.iter().filter(|(_, _, v, names)| READ.contains(&v.as_str()) && names.is_empty()).collect();
        read.sort();
        let expected: BTreeSet<_> = WATCHED
            .iter()
            .flat_map(|(g, r)| READ.iter().map(move |v| (g.to_string(), r.to_string(), v.to_string(), vec![])))
            .collect();
        assert_eq!(read.into_iter().cloned().collect::<BTreeSet<_>>(), expected, "{name}");
        for (g, r, v, names) in &hook {
            assert!(!["pods", "replicasets", "leases"].contains(&r.as_str()), "{name}: the webhook may {v} {g}/{r}");
            assert!(!r.ends_with("reports"), "{name}: the webhook may {v} {g}/{r}");
            if !READ.contains(&v.as_str()) || !names.is_empty() {
                assert!(
                    ["secrets", "validatingwebhookconfigurations", "mutatingwebhookconfigurations"]
                        .contains(&r.as_str())
                        && !names.is_empty()
                        && name == "defaults",
                    "{name}: the webhook may {v} {g}/{r} {names:?}"
                );
            }
        }

        // The audit: get/list/watch of the watched kinds (APIServices among them) and of pods (no
        // ReplicaSets), its reports by name (and their list), and its Lease.
        let audit_rules = rules_of(&d, "ha-guard-audit");
        let roles: BTreeSet<(String, String)> = audit_rules.iter().map(|(k, n, _)| (k.clone(), n.clone())).collect();
        assert_eq!(
            roles,
            BTreeSet::from([("ClusterRole".into(), "ha-guard-audit".into()), ("Role".into(), "ha-guard-audit".into())]),
            "{name}"
        );
        let got = grants(&audit_rules);
        let mut want: BTreeSet<(String, String, String, Vec<String>)> = WATCHED
            .iter()
            .chain(&[("", "pods")])
            .flat_map(|(g, r)| READ.iter().map(move |v| (g.to_string(), r.to_string(), v.to_string(), vec![])))
            .collect();
        let named = vec!["ha-guard".to_string()];
        for r in ["policyreports", "clusterpolicyreports"] {
            // Its own reports, listed and watched: restored when deleted or edited by hand.
            for v in ["list", "watch"] {
                want.insert(("wgpolicyk8s.io".into(), r.into(), v.into(), vec![]));
            }
            for v in ["get", "create", "patch", "delete"] {
                want.insert(("wgpolicyk8s.io".into(), r.into(), v.into(), named.clone()));
            }
        }
        for v in ["get", "patch"] {
            want.insert(("coordination.k8s.io".into(), "leases".into(), v.into(), vec!["ha-guard-audit".into()]));
        }
        want.insert(("coordination.k8s.io".into(), "leases".into(), "create".into(), vec![]));
        assert_eq!(got, want, "{name}");
        assert!(got.iter().any(|(_, r, v, _)| r == "pods" && v == "list"), "{name}: the audit lists pods");
        assert!(!got.iter().any(|(_, r, _, _)| r == "replicasets"), "{name}: the audit reads no ReplicaSets");
        // The Lease's Role is in the release namespace.
        assert_eq!(audit(&d, "Role")["metadata"]["namespace"], "ha-guard", "{name}");
    }
}

#[test]
fn the_audit_deployment_runs_reports() {
    let d = objects(&[]);
    let deployment = audit(&d, "Deployment");
    assert_eq!(deployment["metadata"]["name"], "ha-guard-audit");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let c = audit_container(&d);
    assert_eq!(
        strings(&c["args"]),
        [
            "reports",
            "--config=/etc/ha-guard/config.yaml",
            "--log-format=json",
            "--interval=5m",
            "--report-api=wgpolicyk8s.io/v1alpha2"
        ]
    );
    assert_eq!(c["image"], container(&d)["image"], "the same image");
    assert_eq!(
        c["env"],
        json!([
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
        ])
    );
    assert_eq!(c["ports"], json!([{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]));
    assert_eq!(c["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "metrics"}));
    assert_eq!(c["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": "metrics"}));
    assert_eq!(c["resources"], json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "160Mi"}}));
    assert_eq!(c["securityContext"], container(&d)["securityContext"]);
    // The configuration mounted where --config points, as for the webhook (and no certificate).
    assert_eq!(c["volumeMounts"], container(&d)["volumeMounts"]);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"],
        json!([{"name": "config", "projected": {"sources": [{"configMap": {"name": "ha-guard-config",
            "items": [{"key": "config.yaml", "path": "config.yaml"}]}}]}}])
    );
    assert_eq!(pod["securityContext"], webhook(&d, "Deployment")["spec"]["template"]["spec"]["securityContext"]);
    for key in ["nodeSelector", "tolerations", "affinity", "priorityClassName"] {
        assert!(pod.get(key).is_none(), "{key}: nothing by default");
    }
    // Its labels: the component, and another name than the webhook's pods.
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/component"], "audit");
    assert_eq!(labels["app.kubernetes.io/name"], "ha-guard-audit");
    assert_eq!(labels["app.kubernetes.io/instance"], "ha-guard");
    assert_eq!(
        webhook(&d, "Deployment")["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
        "webhook"
    );
    // Spread and PDB over its own pods.
    for t in pod["topologySpreadConstraints"].as_array().unwrap() {
        assert_eq!(t["labelSelector"], deployment["spec"]["selector"]);
    }
    let pdb = audit(&d, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(pdb["spec"]["selector"], deployment["spec"]["selector"]);

    // Every audit value reaches the Deployment.
    let d = objects(&[
        "--set",
        "audit.replicas=3",
        "--set",
        "audit.interval=90s",
        "--set",
        "audit.reportApi=openreports.io/v1alpha1",
        "--set",
        "audit.extraArgs={--debounce=5s}",
        "--set",
        "audit.resources.limits.memory=1Gi",
        "--set",
        "audit.priorityClassName=low",
        "--set",
        "audit.nodeSelector.pool=batch",
        "--set",
        "audit.tolerations[0].key=batch",
        "--set",
        "audit.tolerations[0].operator=Exists",
        "--set",
        "audit.affinity.nodeAffinity.x=y",
        "--set",
        "logFormat=text",
        "--set",
        "priorityClassName=system-cluster-critical",
        "--set",
        "nodeSelector.pool=infra",
        "--set",
        "podDisruptionBudget.enabled=false",
    ]);
    let deployment = audit(&d, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        strings(&audit_container(&d)["args"]),
        [
            "reports",
            "--config=/etc/ha-guard/config.yaml",
            "--log-format=text",
            "--interval=90s",
            "--report-api=openreports.io/v1alpha1",
            "--debounce=5s"
        ]
    );
    assert_eq!(audit_container(&d)["resources"]["limits"]["memory"], "1Gi");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "low", "the audit's own, not the webhook's");
    assert_eq!(pod["nodeSelector"], json!({"pool": "batch"}));
    assert_eq!(pod["tolerations"], json!([{"key": "batch", "operator": "Exists"}]));
    assert_eq!(pod["affinity"], json!({"nodeAffinity": {"x": "y"}}));
    assert!(!strings(&container(&d)["args"]).contains(&"--debounce=5s".to_string()), "serve's flags are extraArgs");
    assert!(of_kind(&d, "PodDisruptionBudget").is_empty());
    assert!(refused(&["--set", "audit.interval=20s"]).contains("audit.interval (20s) must be at least 30s"));
    assert!(refused(&["--set", "audit.replicas=0"]).contains("/audit/replicas"));
    assert!(refused(&["--set", "audit.extraArgs={debounce}"]).contains("/audit/extraArgs"));
    assert!(refused(&["--set", "audit.resources.limit.memory=1Gi"]).contains("/audit/resources"));
}

#[test]
fn no_webhook_selector_selects_an_audit_pod() {
    for args in [&[][..], COMBINATIONS[6].1] {
        let d = objects(args);
        let hook_pods = &webhook(&d, "Deployment")["spec"]["template"]["metadata"]["labels"];
        let audit_pods = &audit(&d, "Deployment")["spec"]["template"]["metadata"]["labels"];
        // The webhook's selectors: its Deployment's, its Service's (admission requests go where it
        // points), its PDB's, its spread's, its NetworkPolicy's. Each selects the webhook's pods
        // and not the audit's; the audit's selectors the other way round (no pod under two PDBs).
        let mut hook_selectors: Vec<(&str, &Value)> = vec![
            ("Deployment", &webhook(&d, "Deployment")["spec"]["selector"]),
            ("Service", &webhook(&d, "Service")["spec"]["selector"]),
            ("PodDisruptionBudget", &webhook(&d, "PodDisruptionBudget")["spec"]["selector"]),
        ];
        let mut audit_selectors: Vec<(&str, &Value)> = vec![
            ("Deployment", &audit(&d, "Deployment")["spec"]["selector"]),
            ("Service", &audit(&d, "Service")["spec"]["selector"]),
            ("PodDisruptionBudget", &audit(&d, "PodDisruptionBudget")["spec"]["selector"]),
        ];
        for t in webhook(&d, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"].as_array().unwrap()
        {
            hook_selectors.push(("topologySpreadConstraint", &t["labelSelector"]));
        }
        for t in audit(&d, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"].as_array().unwrap() {
            audit_selectors.push(("topologySpreadConstraint", &t["labelSelector"]));
        }
        if !of_kind(&d, "NetworkPolicy").is_empty() {
            hook_selectors.push(("NetworkPolicy", &webhook(&d, "NetworkPolicy")["spec"]["podSelector"]));
            audit_selectors.push(("NetworkPolicy", &audit(&d, "NetworkPolicy")["spec"]["podSelector"]));
        }
        for (kind, s) in &hook_selectors {
            assert!(selects(s, hook_pods), "{args:?}: the webhook's {kind} selects its pods: {s}");
            assert!(!selects(s, audit_pods), "{args:?}: the webhook's {kind} must not select the audit's pods: {s}");
        }
        for (kind, s) in &audit_selectors {
            assert!(selects(s, audit_pods), "{args:?}: the audit's {kind} selects its pods: {s}");
            assert!(!selects(s, hook_pods), "{args:?}: the audit's {kind} must not select the webhook's pods: {s}");
        }
        assert_eq!(hook_selectors.len() + audit_selectors.len(), if args.is_empty() { 10 } else { 12 });
        // The Service never sends an admission request to an audit pod: the audit's Service has
        // no webhook port and its pods none either.
        assert!(audit(&d, "Service")["spec"]["ports"].as_array().unwrap().iter().all(|p| p["port"] == 8080));
        assert!(!audit_container(&d)["ports"].to_string().contains("8443"));
    }
    // The check is not empty: the webhook's Service would select pods labelled as the webhook's.
    let d = objects(&[]);
    let mut relabelled = audit(&d, "Deployment")["spec"]["template"]["metadata"]["labels"].clone();
    relabelled["app.kubernetes.io/name"] = json!("ha-guard");
    assert!(selects(&webhook(&d, "Service")["spec"]["selector"], &relabelled));
}

#[test]
fn audit_off_renders_nothing_of_the_audit() {
    let all = [
        "--set",
        "audit.enabled=false",
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.prometheusRule.enabled=true",
    ];
    let d = objects(&all);
    let audit_objects: Vec<String> = d
        .iter()
        .filter(|o| o.to_string().contains("audit"))
        .map(|o| format!("{} {}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap()))
        .collect();
    // Only the webhook's Deployment names the audit: serve's --audit-interval=0 (and a comment-free
    // rendering otherwise).
    assert_eq!(audit_objects, ["Deployment ha-guard"], "{audit_objects:?}");
    assert!(strings(&container(&d)["args"]).contains(&"--audit-interval=0".to_string()));
    assert_eq!(of_kind(&d, "Deployment").len(), 1);
    assert_eq!(of_kind(&d, "ServiceAccount").len(), 1);
    assert_eq!(of_kind(&d, "Service").len(), 1);
    assert_eq!(of_kind(&d, "ServiceMonitor").len(), 1);
    assert_eq!(of_kind(&d, "NetworkPolicy").len(), 1);
    assert_eq!(of_kind(&d, "PodDisruptionBudget").len(), 1);
    let groups = &one(&d, "PrometheusRule")["spec"]["groups"];
    assert_eq!(groups.as_array().unwrap().len(), 1, "{groups}");
    assert!(!groups.to_string().contains("HaGuardAudit"));
    assert!(!d.iter().any(|o| (o["kind"] == "ClusterRole" || o["kind"] == "Role") && is_audit(o)));
    // And on: serve never audits in the webhook's pods.
    assert!(strings(&container(&objects(&[]))["args"]).contains(&"--audit-interval=0".to_string()));
}

#[test]
fn the_deployment_runs_serve_as_the_contract_says() {
    let d = objects(&[]);
    let c = container(&d);
    assert_eq!(
        strings(&c["args"]),
        [
            "serve",
            "--cluster=live",
            "--tls-mode=managed",
            "--tls-secret=ha-guard-tls",
            "--tls-service=ha-guard",
            "--tls-webhook=ha-guard",
            "--config=/etc/ha-guard/config.yaml",
            "--log-format=json",
            "--deadline=2000ms",
            "--failure-policy=Ignore",
            "--shutdown-delay=5",
            "--shutdown-timeout=20",
            "--audit-interval=0",
            "--admission-policies=auto",
            "--admission-policies-owner=ha-guard",
        ]
    );
    assert_eq!(
        c["env"],
        json!([{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}])
    );
    assert_eq!(c["image"], format!("ghcr.io/ha-guard/ha-guard:{}", env!("CARGO_PKG_VERSION")));
    assert_eq!(
        c["ports"],
        json!([
            {"name": "https", "containerPort": 8443, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 8080, "protocol": "TCP"}
        ])
    );
    assert_eq!(c["volumeMounts"], json!([{"name": "config", "mountPath": "/etc/ha-guard", "readOnly": true}]));
    let pod = &webhook(&d, "Deployment")["spec"]["template"]["spec"];
    // Managed mode reads its certificate through the API: only the configuration is mounted.
    assert_eq!(
        pod["volumes"][0]["projected"]["sources"],
        json!([{"configMap": {"name": "ha-guard-config", "items": [{"key": "config.yaml", "path": "config.yaml"}]}}])
    );
    assert_eq!(pod["serviceAccountName"], "ha-guard");

    // Validities, when set, and names that follow the release.
    let other = docs(
        &String::from_utf8(
            run_helm(&[
                "template",
                "guard",
                "charts/ha-guard",
                "-n",
                "x",
                "--set",
                "certificates.managed.caValidity=2y",
                "--set",
                "certificates.managed.certValidity=30d",
            ])
            .stdout,
        )
        .unwrap(),
    );
    let args = strings(&container(&other)["args"]);
    for a in [
        "--tls-secret=guard-ha-guard-tls",
        "--tls-service=guard-ha-guard",
        "--tls-webhook=guard-ha-guard",
        "--tls-ca-validity=2y",
        "--tls-cert-validity=30d",
    ] {
        assert!(args.contains(&a.to_string()), "{a} in {args:?}");
    }
    assert_eq!(webhook(&other, "Service")["metadata"]["name"], "guard-ha-guard");
    assert_eq!(audit(&other, "Deployment")["metadata"]["name"], "guard-ha-guard-audit");
    assert_eq!(one(&other, "Secret")["metadata"]["name"], "guard-ha-guard-tls");

    // Files mode: the Secret mounted where --tls-cert/--tls-key point, no managed flags.
    for (args, secret) in [(COMBINATIONS[1].1, "ha-guard-tls"), (COMBINATIONS[3].1, "my-tls")] {
        let d = objects(args);
        let c = container(&d);
        let a = strings(&c["args"]);
        assert!(
            a.contains(&"--tls-cert=/etc/ha-guard/tls/tls.crt".into())
                && a.contains(&"--tls-key=/etc/ha-guard/tls/tls.key".into()),
            "{a:?}"
        );
        assert!(!a.iter().any(|x| x.starts_with("--tls-mode") || x.starts_with("--tls-secret")), "{a:?}");
        let sources = &webhook(&d, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"];
        assert_eq!(
            sources[1],
            json!({"secret": {"name": secret, "items": [{"key": "tls.crt", "path": "tls/tls.crt"}, {"key": "tls.key", "path": "tls/tls.key"}]}})
        );
    }
}

#[test]
fn the_deployment_stays_available_through_drains_and_upgrades() {
    let d = objects(&["--set", "replicaCount=3"]);
    let deployment = webhook(&d, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        deployment["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    let pod = &deployment["spec"]["template"]["spec"];
    let selector = &deployment["spec"]["selector"];
    let keys: Vec<&str> = pod["topologySpreadConstraints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["topologyKey"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]);
    for t in pod["topologySpreadConstraints"].as_array().unwrap() {
        assert_eq!(t["labelSelector"], *selector, "counted over ha-guard's own pods");
    }
    assert!(pod["terminationGracePeriodSeconds"].as_i64().unwrap() >= 5 + 20);
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let c = container(&d);
    assert_eq!(
        c["securityContext"],
        json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}})
    );
    assert_eq!(c["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "metrics"}));
    assert_eq!(c["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": "metrics"}));
    let pdb = webhook(&d, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(pdb["spec"]["selector"], *selector);
    let service = webhook(&d, "Service");
    assert_eq!(
        service["spec"]["ports"],
        json!([
            {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"},
            {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
        ])
    );

    // Scheduling passthrough.
    let d = objects(&[
        "--set",
        "priorityClassName=system-cluster-critical",
        "--set",
        "nodeSelector.pool=infra",
        "--set",
        "tolerations[0].key=infra",
        "--set",
        "tolerations[0].operator=Exists",
        "--set",
        "imagePullSecrets[0].name=regcred",
        "--set",
        "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ]);
    let pod = &webhook(&d, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["nodeSelector"], json!({"pool": "infra"}));
    assert_eq!(pod["tolerations"], json!([{"key": "infra", "operator": "Exists"}]));
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(
        pod["containers"][0]["image"],
        "ghcr.io/ha-guard/ha-guard@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
}

#[test]
fn certificate_modes_wire_the_ca_into_both_webhooks() {
    // cert-manager: its cainjector fills caBundle from the Certificate whose Secret ha-guard reads.
    let d = objects(&["--set", "certificates.mode=certManager"]);
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        let c = one(&d, kind);
        assert_eq!(c["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "ha-guard/ha-guard", "{kind}");
        assert!(c["webhooks"][0]["clientConfig"].get("caBundle").is_none());
    }
    let serving: Vec<&Value> =
        of_kind(&d, "Certificate").into_iter().filter(|c| c["metadata"]["name"] == "ha-guard").collect();
    assert_eq!(serving[0]["spec"]["secretName"], "ha-guard-tls");
    assert_eq!(serving[0]["spec"]["dnsNames"], json!(["ha-guard.ha-guard.svc", "ha-guard.ha-guard.svc.cluster.local"]));
    assert_eq!(serving[0]["spec"]["issuerRef"], json!({"kind": "Issuer", "name": "ha-guard-ca"}));
    assert_eq!(of_kind(&d, "Issuer").len(), 2, "a self-signed issuer and ha-guard's own CA issuer");
    let d = objects(COMBINATIONS[2].1);
    assert_eq!(one(&d, "Certificate")["spec"]["issuerRef"], json!({"kind": "ClusterIssuer", "name": "corp-ca"}));
    assert!(of_kind(&d, "Issuer").is_empty());

    // A user's Secret: the CA given as PEM goes into caBundle (base64, as the API wants it).
    let d = objects(COMBINATIONS[3].1);
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        let hook = &one(&d, kind)["webhooks"][0];
        let bundle = hook["clientConfig"]["caBundle"].as_str().expect("caBundle");
        assert_eq!(
            bundle, "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=",
            "{kind}"
        );
        assert!(one(&d, kind)["metadata"].get("annotations").is_none(), "{kind}");
    }

    // Managed: no caBundle in the chart (ha-guard sets it; an upgrade leaves it, since neither
    // the old nor the new manifest has the field) and the empty Secret ha-guard fills.
    let d = objects(&[]);
    assert!(mutating(&d)["clientConfig"].get("caBundle").is_none());
    let secret = one(&d, "Secret");
    assert_eq!(secret["type"], "Opaque");
    assert!(secret.get("data").is_none() && secret.get("stringData").is_none(), "{secret}");
}

/// `helm test`: a Pod running `ha-guard probe-webhook` in the dry run's namespace, with a
/// ServiceAccount that may create Deployments there and nothing else; off with tests.enabled=false.
/// (tests/e2e_observe.rs runs the command against a real apiserver, with ha-guard up and down.)
#[test]
fn helm_test_probes_the_webhook_with_the_least_it_needs() {
    let tests_of = |args: &[&str]| -> Vec<Value> {
        docs(&render(args))
            .into_iter()
            .filter(|d| is_hook(d) && d["metadata"]["annotations"]["helm.sh/hook"] == "test")
            .collect()
    };
    let t = tests_of(&[]);
    let kinds: Vec<&str> = t.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ServiceAccount", "Role", "RoleBinding", "Pod"]);
    let pod = one(&t, "Pod");
    assert_eq!(pod["metadata"]["namespace"], "ha-guard");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    assert_eq!(pod["spec"]["serviceAccountName"], "ha-guard-test");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["args"], json!(["probe-webhook", "--namespace", "default"]));
    let release = objects(&[]);
    let deployment = release.iter().find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "ha-guard").unwrap();
    assert_eq!(container["image"], deployment["spec"]["template"]["spec"]["containers"][0]["image"]);
    assert_eq!(
        container["securityContext"],
        deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    );
    let role = one(&t, "Role");
    assert_eq!(role["metadata"]["namespace"], "default");
    assert_eq!(role["rules"], json!([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]}]));
    let binding = one(&t, "RoleBinding");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "ha-guard-test", "namespace": "ha-guard"}])
    );
    // The RBAC exists before the Pod runs, and each is deleted once it passed (kept when it
    // failed, to read) or before the next `helm test`.
    for d in &t {
        let a = &d["metadata"]["annotations"];
        assert_eq!(a["helm.sh/hook-delete-policy"], "before-hook-creation,hook-succeeded", "{d}");
        let weight = if d["kind"] == "Pod" { Value::Null } else { json!("-1") };
        assert_eq!(a["helm.sh/hook-weight"], weight, "{d}");
    }
    let elsewhere = tests_of(&["--set", "tests.namespace=shop"]);
    assert_eq!(one(&elsewhere, "Role")["metadata"]["namespace"], "shop");
    assert_eq!(
        one(&elsewhere, "Pod")["spec"]["containers"][0]["args"],
        json!(["probe-webhook", "--namespace", "shop"])
    );
    assert!(tests_of(&["--set", "tests.enabled=false"]).is_empty());
    assert!(refused(&["--set", "tests.namespace=Not_A_Namespace"]).contains("/tests/namespace"));
    // Why the probe failed (its stderr) reaches the Pod's status: the kubelet keeps its last lines.
    assert_eq!(container["terminationMessagePolicy"], "FallbackToLogsOnError");
    // The test's Pod is placed by tests.nodeSelector/tests.tolerations, not by the webhook's.
    assert!(pod["spec"].get("nodeSelector").is_none() && pod["spec"].get("tolerations").is_none(), "{pod}");
    let webhook_placed = tests_of(&["--set", "nodeSelector.zone=a", "--set", "tolerations[0].operator=Exists"]);
    let spec = &one(&webhook_placed, "Pod")["spec"];
    assert!(spec.get("nodeSelector").is_none() && spec.get("tolerations").is_none(), "{spec}");
    let placed = tests_of(&[
        "--set",
        "tests.nodeSelector.probe=runner",
        "--set",
        "tests.tolerations[0].key=probe",
        "--set",
        "tests.tolerations[0].operator=Exists",
        "--set",
        "tests.tolerations[0].effect=NoSchedule",
    ]);
    let spec = &one(&placed, "Pod")["spec"];
    assert_eq!(spec["nodeSelector"], json!({"probe": "runner"}));
    assert_eq!(spec["tolerations"], json!([{"key": "probe", "operator": "Exists", "effect": "NoSchedule"}]));
    assert!(refused(&["--set", "tests.tolerations[0].nope=x"]).contains("/tests/tolerations"));
}

#[test]
fn uninstall_removes_the_webhooks_before_anything_else() {
    // Helm deletes a release's objects in releaseutil.UninstallOrder (Service and Deployment
    // first) and kinds missing from that list, webhook configurations among them, last
    // (pkg/releaseutil/kind_sorter.go, lessByKind). So the chart adds pre-delete hooks: identical
    // copies of both configurations whose "before-hook-creation" policy deletes the live ones
    // before any release object, and whose "hook-succeeded" policy deletes the copies.
    let all = docs(&render(&[]));
    let hooks: Vec<&Value> =
        all.iter().filter(|d| is_hook(d) && d["metadata"]["annotations"]["helm.sh/hook"] != "test").collect();
    let kinds: Vec<&str> = hooks.iter().map(|h| h["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"],
        "the only hooks but the test's"
    );
    for hook in hooks {
        let annotations = &hook["metadata"]["annotations"];
        assert_eq!(annotations["helm.sh/hook"], "pre-delete");
        assert_eq!(annotations["helm.sh/hook-delete-policy"], "before-hook-creation,hook-succeeded,hook-failed");
        // Identical to the release's object apart from the hook annotations, so a `helm
        // template` with hooks piped to kubectl changes nothing.
        let object = all.iter().find(|d| !is_hook(d) && d["kind"] == hook["kind"]).expect("the release's object");
        let mut copy = hook.clone();
        let a = copy["metadata"]["annotations"].as_object_mut().unwrap();
        a.remove("helm.sh/hook");
        a.remove("helm.sh/hook-delete-policy");
        if a.is_empty() {
            copy["metadata"].as_object_mut().unwrap().remove("annotations");
        }
        assert_eq!(&copy, object);
    }
    // --no-hooks (how manifests/ is rendered) leaves them out.
    assert!(!docs(&render(&["--no-hooks"])).iter().any(is_hook));
}

#[test]
fn the_configuration_is_values_ha_guard_accepts() {
    let d = objects(&[
        "--set",
        "config.rules.pdb-missing=deny",
        "--set",
        "config.rules.recreate-multi-replica=off",
        "--set",
        "config.mutations.inject-default-spread=true",
        "--set",
        "config.ratchet=false",
    ]);
    let cm = one(&d, "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "ha-guard-config");
    let text = cm["data"]["config.yaml"].as_str().expect("config.yaml");
    let config = ha_guard::core::registry::parse_config(text, "config.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(config.rules["pdb-missing"], ha_guard::core::catalogue::Action::Deny);
    assert_eq!(config.rules["recreate-multi-replica"], ha_guard::core::catalogue::Action::Off);
    assert!(config.mutation_on(&ha_guard::core::mutations::INJECT_DEFAULT_SPREAD));
    assert!(!config.ratchet);
    assert_eq!(config.exempt_namespaces, ["kube-system", "ha-guard"], "the release namespace is always exempt");
    assert_eq!(config.csi_controller_images, ha_guard::core::config::Config::default().csi_controller_images);
}

/// The example of issue 39, as a platform team writes it in a values file (`expires` unquoted, as
/// YAML would read a date).
const POLICY_VALUES: &str = r#"config:
  exemptNamespaces: [kube-system, "team-sandbox-*"]
  exceptions:
    - name: tigera-operator-tolerations
      rules: [toleration-wildcard]
      match:
        kinds: [Deployment]
        namespaces: ["tigera-*"]
        names: [tigera-operator]
        selector: {matchLabels: {k8s-app: tigera-operator}}
        namespaceSelector: {matchLabels: {vendor: tigera}}
      reason: "vendor operator; tolerates everything by design"
      owner: platform@example.com
      expires: 2027-03-01
    - name: cert-manager-webhook
      rules: [webhook-fail-closed-unavailable, pdb-missing]
      match:
        namespaces: [cert-manager]
        selector:
          matchExpressions: [{key: app.kubernetes.io/name, operator: In, values: [webhook]}]
      reason: fail-closed by design
  overrides:
    - namespaceSelector: {matchLabels: {tier: prod}}
      rules: {pdb-missing: deny}
    - namespaceSelector:
        matchExpressions: [{key: tier, operator: In, values: [dev, sandbox]}]
      rules: {pdb-missing: "off", replicas-colocated: warn}
"#;

/// `helm template` with a values file holding `yaml` (written to a temporary folder).
fn with_values<T>(yaml: &str, f: impl FnOnce(&str) -> T) -> T {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, yaml).unwrap();
    f(file.to_str().unwrap())
}

/// The configuration rendered into the ConfigMap, as YAML.
fn rendered_config(args: &[&str]) -> Value {
    let d = objects(args);
    let text = one(&d, "ConfigMap")["data"]["config.yaml"].as_str().expect("config.yaml").to_string();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// config.exceptions and config.overrides reach ha-guard's configuration as given (the date as
/// the string YYYY-MM-DD, whether the values quote it or not), beside the merged exemptNamespaces.
#[test]
fn the_configuration_carries_exceptions_and_overrides_as_given() {
    let given: Value = serde_saphyr::from_str(POLICY_VALUES).unwrap();
    let config = with_values(POLICY_VALUES, |f| rendered_config(&["-f", f]));
    let mut want_exceptions = given["config"]["exceptions"].clone();
    want_exceptions[0]["expires"] = json!("2027-03-01");
    assert_eq!(config["exceptions"], want_exceptions);
    assert_eq!(config["exceptions"][0]["expires"], "2027-03-01", "a string, never a timestamp");
    assert_eq!(config["overrides"], given["config"]["overrides"]);
    assert_eq!(config["overrides"][1]["rules"]["pdb-missing"], "off", "off is the string, not false");
    assert_eq!(strings(&config["exemptNamespaces"]), ["kube-system", "team-sandbox-*", "ha-guard"]);
    // ha-guard reads it: the exceptions with their expiry, the overrides, the globs.
    let d = with_values(POLICY_VALUES, |f| objects(&["-f", f]));
    let text = one(&d, "ConfigMap")["data"]["config.yaml"].as_str().unwrap();
    let parsed = ha_guard::core::registry::parse_config(text, "config.yaml").unwrap_or_else(|e| panic!("{e}\n{text}"));
    let names: Vec<&str> = parsed.exceptions.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["tigera-operator-tolerations", "cert-manager-webhook"]);
    assert_eq!(parsed.exceptions[0].expiry_timestamp(), Some(1_803_859_200), "2027-03-01T00:00:00Z");
    assert_eq!(parsed.exceptions[1].expiry_timestamp(), None);
    assert_eq!(parsed.overrides.len(), 2);
    assert!(parsed.namespace_exempt("team-sandbox-42") && parsed.namespace_exempt("ha-guard"));
    assert!(!parsed.namespace_exempt("team-prod"));
    // The webhooks' selector takes the names only.
    assert_eq!(
        strings(&validating(&d)["namespaceSelector"]["matchExpressions"][0]["values"]),
        ["kube-system", "ha-guard"]
    );

    // None given: neither key is written (the configuration reads the same without them).
    let config = rendered_config(&[]);
    assert!(config.get("exceptions").is_none() && config.get("overrides").is_none(), "{config}");
}

/// The schema holds an exception and an override to their shape, naming the field that is wrong.
#[test]
fn the_schema_refuses_a_bad_exception_or_override_naming_the_field() {
    let refused_with = |yaml: &str| with_values(yaml, |f| refused(&["-f", f]));
    let exception =
        |fields: &str| format!("config:\n  exceptions:\n    - name: vendor\n      rules: [pdb-missing]\n{fields}");
    let matched = "      match: {kinds: [Deployment]}\n";
    let reason = "      reason: vendor chart\n";
    // The valid base renders.
    with_values(&exception(&format!("{matched}{reason}")), |f| render(&["-f", f]));
    with_values(
        &exception(&format!("{matched}{reason}      owner: a@example.com\n      expires: \"2027-03-01\"\n")),
        |f| render(&["-f", f]),
    );

    // No reason, a blank one.
    let e = refused_with(&exception(matched));
    assert!(e.contains("at '/config/exceptions/0'") && e.contains("missing property 'reason'"), "{e}");
    let e = refused_with(&exception(&format!("{matched}      reason: \"  \"\n")));
    assert!(e.contains("at '/config/exceptions/0/reason'"), "{e}");
    // A date that is not YYYY-MM-DD.
    for bad in ["2027-3-1", "\"01.03.2027\"", "2027-13-01", "\"2027-03-01T00:00:00Z\"", "next year", "20270301"] {
        let e = refused_with(&exception(&format!("{matched}{reason}      expires: {bad}\n")));
        assert!(e.contains("at '/config/exceptions/0/expires'"), "expires: {bad}: {e}");
    }
    // No match, an empty one, an unknown key in it, a glob that is no name, a bad selector.
    let e = refused_with(&exception(reason));
    assert!(e.contains("missing property 'match'"), "{e}");
    let e = refused_with(&exception(&format!("      match: {{}}\n{reason}")));
    assert!(e.contains("at '/config/exceptions/0/match'"), "{e}");
    let e = refused_with(&exception(&format!("      match: {{kind: [Deployment]}}\n{reason}")));
    assert!(e.contains("at '/config/exceptions/0/match'") && e.contains("'kind' not allowed"), "{e}");
    let e = refused_with(&exception(&format!("      match: {{namespaces: [Tigera_*]}}\n{reason}")));
    assert!(e.contains("at '/config/exceptions/0/match/namespaces/0'"), "{e}");
    for kind in ["deployment", "Pod", "Node"] {
        let e = refused_with(&exception(&format!("      match: {{kinds: [{kind}]}}\n{reason}")));
        assert!(e.contains("at '/config/exceptions/0/match/kinds/0'"), "{kind}: {e}");
    }
    let e = refused_with(&exception(&format!(
        "      match: {{selector: {{matchExpressions: [{{key: a, operator: Equals}}]}}}}\n{reason}"
    )));
    assert!(e.contains("at '/config/exceptions/0/match/selector/matchExpressions/0/operator'"), "{e}");
    for (expression, wrong) in [
        ("{key: a, operator: In}", "missing property 'values'"),
        ("{key: a, operator: NotIn, values: []}", "/values"),
        ("{key: a, operator: Exists, values: [x]}", "/values"),
    ] {
        let e = refused_with(&exception(&format!(
            "      match: {{selector: {{matchExpressions: [{expression}]}}}}\n{reason}"
        )));
        assert!(e.contains("at '/config/exceptions/0/match/selector/matchExpressions/0") && e.contains(wrong), "{e}");
    }
    let e =
        refused_with(&exception(&format!("      match: {{namespaceSelector: {{matchLabel: {{a: b}}}}}}\n{reason}")));
    assert!(e.contains("at '/config/exceptions/0/match/namespaceSelector'") && e.contains("'matchLabel'"), "{e}");
    // Rules: an unknown ID, none, a string instead of a list.
    let e = refused_with(
        "config:\n  exceptions:\n    - {name: x, rules: [pdb-mising], match: {kinds: [Deployment]}, reason: r}\n",
    );
    assert!(e.contains("at '/config/exceptions/0/rules/0'"), "{e}");
    let e =
        refused_with("config:\n  exceptions:\n    - {name: x, rules: [], match: {kinds: [Deployment]}, reason: r}\n");
    assert!(e.contains("at '/config/exceptions/0/rules'"), "{e}");
    let e = refused_with(
        "config:\n  exceptions:\n    - {name: x, rules: pdb-missing, match: {kinds: [Deployment]}, reason: r}\n",
    );
    assert!(e.contains("at '/config/exceptions/0/rules'"), "{e}");
    // Names: not a name, or used twice (a finding names its exception).
    let e = refused_with(
        "config:\n  exceptions:\n    - {name: Vendor Op, rules: [pdb-missing], match: {kinds: [Deployment]}, reason: r}\n",
    );
    assert!(e.contains("at '/config/exceptions/0/name'"), "{e}");
    let twice = "config:\n  exceptions:\n    - {name: x, rules: [pdb-missing], match: {kinds: [Deployment]}, reason: r}\n    - {name: x, rules: [pdb-overlap], match: {kinds: [StatefulSet]}, reason: s}\n";
    let e = refused_with(twice);
    assert!(e.contains(r#"config.exceptions: two exceptions are named "x""#), "{e}");
    // An unknown key of the exception.
    let e = refused_with(&exception(&format!("{matched}{reason}      expiry: \"2027-03-01\"\n")));
    assert!(e.contains("at '/config/exceptions/0'") && e.contains("'expiry' not allowed"), "{e}");

    // Overrides: a bad action, an unknown rule, no rules, no namespaceSelector, an empty one.
    let e = refused_with(
        "config:\n  overrides:\n    - {namespaceSelector: {matchLabels: {tier: prod}}, rules: {pdb-missing: block}}\n",
    );
    assert!(e.contains("at '/config/overrides/0/rules/pdb-missing'") && e.contains("'deny', 'warn', 'off'"), "{e}");
    let e = refused_with(
        "config:\n  overrides:\n    - {namespaceSelector: {matchLabels: {tier: prod}}, rules: {pdb-mising: deny}}\n",
    );
    assert!(e.contains("at '/config/overrides/0/rules'") && e.contains("'pdb-mising' not allowed"), "{e}");
    let e = refused_with("config:\n  overrides:\n    - {namespaceSelector: {matchLabels: {tier: prod}}, rules: {}}\n");
    assert!(e.contains("at '/config/overrides/0/rules'"), "{e}");
    let e = refused_with("config:\n  overrides:\n    - {rules: {pdb-missing: deny}}\n");
    assert!(e.contains("at '/config/overrides/0'") && e.contains("missing property 'namespaceSelector'"), "{e}");
    let e = refused_with("config:\n  overrides:\n    - {namespaceSelector: {}, rules: {pdb-missing: deny}}\n");
    assert!(e.contains("at '/config/overrides/0/namespaceSelector'"), "{e}");
}

/// The kinds an exception may match are the ones ha-guard's configuration accepts: every kind the
/// schema lists parses, every other kind ha-guard models is refused by both.
#[test]
fn the_schema_knows_the_kinds_an_exception_may_match() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("charts/ha-guard/values.schema.json")).unwrap())
            .unwrap();
    let exception = &schema["properties"]["config"]["properties"]["exceptions"]["items"];
    let listed: BTreeSet<&str> = exception["properties"]["match"]["properties"]["kinds"]["items"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let modelled = ha_guard::core::model::Kind::ALL;
    let accepted: BTreeSet<&str> = modelled
        .iter()
        .map(|k| k.as_str())
        .filter(|k| {
            let text =
                format!("exceptions:\n- {{name: x, rules: [pdb-missing], match: {{kinds: [{k}]}}, reason: r, clusterWide: true}}\n");
            ha_guard::core::registry::parse_config(&text, "config.yaml").is_ok()
        })
        .collect();
    assert_eq!(listed, accepted, "the schema's kinds of config.exceptions[].match must be the ones ha-guard accepts");
}

/// The observe-only install (issue 41): one value, `mode`, rendered into the configuration;
/// `config.mode` wins when set; anything else is refused by the schema.
#[test]
fn the_mode_value_is_the_configurations_mode() {
    let mode_of = |args: &[&str]| {
        let d = objects(args);
        let text = one(&d, "ConfigMap")["data"]["config.yaml"].as_str().expect("config.yaml").to_string();
        ha_guard::core::registry::parse_config(&text, "config.yaml").unwrap_or_else(|e| panic!("{e}\n{text}")).mode
    };
    use ha_guard::core::config::Mode;
    assert_eq!(mode_of(&[]), Mode::Enforce, "enforce by default");
    assert_eq!(mode_of(&["--set", "mode=observe"]), Mode::Observe);
    assert_eq!(mode_of(&["--set", "mode=observe", "--set", "config.mode=enforce"]), Mode::Enforce);
    for bad in [["--set", "mode=warn"], ["--set", "config.mode=dry-run"]] {
        let e = refused(&bad);
        assert!(e.contains("mode") && e.contains("'enforce', 'observe'"), "{e}");
    }
}

#[test]
fn the_schema_refuses_unknown_keys_at_every_level_and_knows_every_rule() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("charts/ha-guard/values.schema.json")).unwrap())
            .unwrap();
    fn walk(node: &Value, path: &str, objects: &mut usize) {
        if let Some(props) = node.get("properties").and_then(Value::as_object) {
            *objects += 1;
            assert_eq!(node["additionalProperties"], false, "{path}: an object with fixed keys must refuse others");
            for (k, v) in props {
                walk(v, &format!("{path}/{k}"), objects);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(v) = node.get(key).filter(|v| v.is_object()) {
                walk(v, &format!("{path}[{key}]"), objects);
            }
        }
    }
    let mut objects = 0;
    walk(&schema, "", &mut objects);
    assert!(objects > 30, "{objects}");
    let rules: BTreeSet<&str> = schema["properties"]["config"]["properties"]["rules"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let catalogue: BTreeSet<&str> = ha_guard::core::registry::rules().map(|r| r.id).collect();
    assert_eq!(rules, catalogue, "config.rules in values.schema.json must list exactly ha-guard's rules");
    // The rule IDs an exception may name (config.exceptions[].rules; config.overrides[].rules is
    // config.rules by reference).
    let ids: BTreeSet<&str> =
        schema["definitions"]["ruleId"]["enum"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(ids, catalogue, "definitions.ruleId in values.schema.json must list exactly ha-guard's rules");
    let overrides = &schema["properties"]["config"]["properties"]["overrides"]["items"]["properties"]["rules"];
    assert_eq!(overrides["allOf"][0], json!({"$ref": "#/properties/config/properties/rules"}));
    let mutations: BTreeSet<&str> = schema["properties"]["config"]["properties"]["mutations"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let catalogue: BTreeSet<&str> = ha_guard::core::registry::mutations().iter().map(|m| m.id).collect();
    assert_eq!(mutations, catalogue, "config.mutations in values.schema.json must list exactly ha-guard's mutations");
}

#[test]
fn every_value_is_commented() {
    // A key is documented when a comment sits right above it or above one of its parents.
    let text = std::fs::read_to_string(repo().join("charts/ha-guard/values.yaml")).unwrap();
    let mut stack: Vec<(usize, bool)> = Vec::new();
    let mut previous_comment = false;
    let mut undocumented = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') {
            previous_comment = true;
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('-') || !trimmed.contains(':') {
            previous_comment = false;
            continue;
        }
        let indent = line.len() - trimmed.len();
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let documented = previous_comment || stack.iter().any(|(_, c)| *c);
        if !documented {
            undocumented.push(format!("line {}: {}", n + 1, trimmed));
        }
        stack.push((indent, previous_comment));
        previous_comment = false;
    }
    assert!(undocumented.is_empty(), "values.yaml keys without a comment:\n{}", undocumented.join("\n"));
}

#[test]
fn chart_versions_follow_the_crate() {
    let chart: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo().join("charts/ha-guard/Chart.yaml")).unwrap()).unwrap();
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["name"], "ha-guard");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"), "Chart.yaml appVersion must equal Cargo.toml's version");
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo().join("charts/ha-guard/values.yaml")).unwrap()).unwrap();
    assert_eq!(values["image"]["repository"], "ghcr.io/ha-guard/ha-guard");
    assert_eq!(values["image"]["tag"], "", "the tag defaults to appVersion");
    assert!(values["replicaCount"].as_i64().unwrap() >= 2);
    assert_eq!(values["webhook"]["failurePolicy"], "Ignore");
    assert_eq!(values["certificates"]["mode"], "managed");
}

/// Metric names in `text` (histogram series reduced to the histogram's name).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("ha_guard_") {
        let name: String = text[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let name =
            ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).map(String::from).unwrap_or(n));
        out.insert(name);
    }
    out
}

/// The Markdown files of the repository's documentation: README.md and everything under docs/.
fn documentation_pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out)
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut out);
    out.sort();
    out
}

/// The metrics the documentation's metrics table lists (its rows start with "| `ha_guard_"), in
/// whichever page holds it (docs/webhook.md at the time of writing; README.md before), with the
/// pages that hold its rows.
fn documented_metrics() -> (BTreeSet<String>, Vec<String>) {
    let mut documented = BTreeSet::new();
    let mut pages = Vec::new();
    for page in documentation_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| `ha_guard_")).collect();
        if !rows.is_empty() {
            pages.push(page.strip_prefix(repo()).unwrap().display().to_string());
        }
        documented.extend(rows.iter().flat_map(|l| metric_names(l.split('|').nth(1).unwrap())));
    }
    (documented, pages)
}

#[test]
fn monitoring_uses_only_metrics_ha_guard_exports() {
    // The documentation's metrics table, plus the CA expiry gauge the self-managed certificates add.
    let (mut documented, pages) = documented_metrics();
    documented.insert("ha_guard_tls_ca_not_after_seconds".into());
    assert!(documented.len() >= 10, "{pages:?}: {documented:?}");

    let d = objects(COMBINATIONS[5].1);
    let rule = one(&d, "PrometheusRule");
    let groups = rule["spec"]["groups"].as_array().unwrap();
    let names: Vec<&str> = groups.iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ha-guard", "ha-guard-audit"]);
    let alerts = |g: &Value| -> Vec<String> {
        g["rules"].as_array().unwrap().iter().map(|r| r["alert"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(
        alerts(&groups[0]),
        [
            "HaGuardDown",
            "HaGuardNoReadyReplica",
            "HaGuardCertificateExpiring",
            "HaGuardCAExpiring",
            "HaGuardConfigReloadFailing",
            "HaGuardDeadlineExceeded",
            "HaGuardWebhookUnreachable",
            "HaGuardCacheNotSynced",
            "HaGuardAdmissionPoliciesNotApplied",
            "HaGuardExceptionExpiring",
            "HaGuardExceptionExpired"
        ]
    );
    assert_eq!(
        alerts(&groups[1]),
        [
            "HaGuardAuditRunsFailing",
            "HaGuardAuditReportWritesFailing",
            "HaGuardAuditNoLeader",
            "HaGuardAuditStalled",
            "HaGuardAuditKindUnreadable",
            "HaGuardAuditReportTruncated",
            "HaGuardAuditUnreadableObjects"
        ]
    );
    let exprs_of = |g: &Value| -> String {
        g["rules"].as_array().unwrap().iter().map(|r| r["expr"].as_str().unwrap()).collect::<Vec<_>>().join("\n")
    };
    let exprs = exprs_of(&groups[0]);
    assert!(exprs.contains(r#"up{job="ha-guard", namespace="ha-guard"}"#), "{exprs}");
    assert!(
        exprs.contains(r#"ha_guard_config_reloads_total{job="ha-guard", namespace="ha-guard", result="failure"}"#),
        "{exprs}"
    );
    let used = metric_names(&exprs);
    assert_eq!(
        used,
        BTreeSet::from([
            "ha_guard_admission_policies_applied".to_string(),
            "ha_guard_cache_synced".into(),
            "ha_guard_config_reloads_total".into(),
            "ha_guard_exception_expiry_timestamp_seconds".into(),
            "ha_guard_rule_deadline_exceeded_total".into(),
            "ha_guard_tls_ca_not_after_seconds".into(),
            "ha_guard_tls_cert_not_after_seconds".into()
        ])
    );
    let undocumented: Vec<_> = used.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "alerts on metrics the metrics table of {pages:?} does not list: {undocumented:?}"
    );
    // The exception alerts read the webhook's series (its pods always run; the audit's may not).
    assert_eq!(
        exprs.matches(r#"ha_guard_exception_expiry_timestamp_seconds{job="ha-guard", namespace="ha-guard"}"#).count(),
        2,
        "{exprs}"
    );
    // The audit's alerts select the audit's job (its Service's name, as its ServiceMonitor
    // scrapes it), never the webhook's.
    let audit_exprs = exprs_of(&groups[1]);
    let audit_used = metric_names(&audit_exprs);
    assert_eq!(
        audit_used,
        BTreeSet::from([
            "ha_guard_audit_errors_total".to_string(),
            "ha_guard_audit_last_full_read_timestamp_seconds".into(),
            "ha_guard_audit_leader".into(),
            "ha_guard_audit_runs_total".into()
        ])
    );
    assert!(audit_used.is_subset(&documented), "{audit_used:?} vs {documented:?}");
    assert_eq!(audit_exprs.matches(r#"{job="ha-guard-audit", namespace="ha-guard""#).count(), 8, "{audit_exprs}");
    assert!(!audit_exprs.contains(r#"job="ha-guard","#), "{audit_exprs}");

    // Two ServiceMonitors: the webhook's Service (job "ha-guard") and the audit's headless one (job
    // "ha-guard-audit"), each selecting its own Service only.
    let sm = webhook(&d, "ServiceMonitor");
    let service = webhook(&d, "Service");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["selector"]["matchLabels"], service["spec"]["selector"]);
    let asm = audit(&d, "ServiceMonitor");
    let aservice = audit(&d, "Service");
    assert_eq!(asm["spec"]["endpoints"], sm["spec"]["endpoints"]);
    assert_eq!(aservice["metadata"]["name"], "ha-guard-audit", "the job of the audit's series");
    assert_eq!(aservice["spec"]["clusterIP"], "None");
    assert_eq!(
        aservice["spec"]["ports"],
        json!([{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}])
    );
    assert!(selects(&aservice["spec"]["selector"], &audit(&d, "Deployment")["spec"]["template"]["metadata"]["labels"]));
    assert!(selects(&asm["spec"]["selector"], &aservice["metadata"]["labels"]));
    assert!(!selects(&asm["spec"]["selector"], &service["metadata"]["labels"]));
    assert!(selects(&sm["spec"]["selector"], &service["metadata"]["labels"]));
    assert!(!selects(&sm["spec"]["selector"], &aservice["metadata"]["labels"]));

    let cm = of_kind(&d, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "ha-guard-dashboard")
        .expect("dashboard");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let dashboard: Value = serde_json::from_str(cm["data"]["ha-guard.json"].as_str().unwrap()).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().unwrap();
    let queried = metric_names(&dashboard["panels"].to_string());
    assert!(panels.len() >= 10, "{}", panels.len());
    assert!(
        queried.is_subset(&documented),
        "panels on metrics the metrics table of {pages:?} does not list: {:?}",
        queried.difference(&documented).collect::<Vec<_>>()
    );
    // Every metric of the documentation's table has a panel, the exceptions' among them.
    for metric in ["ha_guard_exception_expiry_timestamp_seconds", "ha_guard_exception_matches_total"] {
        assert!(queried.contains(metric), "no panel on {metric}");
    }
    let missing: Vec<_> = documented.difference(&queried).collect();
    assert!(missing.is_empty(), "metrics without a panel: {missing:?}");

    // Off by default: a bare apiserver without prometheus-operator's CRDs takes the defaults.
    let d = objects(&[]);
    assert!(of_kind(&d, "ServiceMonitor").is_empty() && of_kind(&d, "PrometheusRule").is_empty());
    assert!(!d.iter().any(|o| o["apiVersion"].as_str().unwrap().contains("cert-manager.io")));
}

#[test]
fn the_network_policy_admits_the_apiserver_and_the_scrapers_only() {
    let d = objects(&["--set", "networkPolicy.enabled=true"]);
    let np = webhook(&d, "NetworkPolicy");
    assert_eq!(np["spec"]["podSelector"], webhook(&d, "Deployment")["spec"]["selector"]);
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        np["spec"]["ingress"][0],
        json!({"ports": [{"port": 8443, "protocol": "TCP"}]}),
        "webhook from anywhere"
    );
    assert_eq!(
        np["spec"]["ingress"][1],
        json!({"ports": [{"port": 8080, "protocol": "TCP"}], "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]})
    );
    // The audit's pods: a policy of their own admitting the same scrapers to their metrics port and
    // nothing else; ingress only, so their egress to the apiserver is left alone. The webhook's
    // policy does not apply to them (it would open 8443 there).
    let anp = audit(&d, "NetworkPolicy");
    let audit_pods = &audit(&d, "Deployment")["spec"]["template"]["metadata"]["labels"];
    assert_eq!(anp["spec"]["podSelector"], audit(&d, "Deployment")["spec"]["selector"]);
    assert!(selects(&anp["spec"]["podSelector"], audit_pods));
    assert!(!selects(&np["spec"]["podSelector"], audit_pods), "the webhook's policy must not select the audit's pods");
    assert!(!selects(
        &anp["spec"]["podSelector"],
        &webhook(&d, "Deployment")["spec"]["template"]["metadata"]["labels"]
    ));
    assert_eq!(anp["spec"]["policyTypes"], json!(["Ingress"]), "egress (to the apiserver) not restricted");
    assert_eq!(anp["spec"]["ingress"], json!([np["spec"]["ingress"][1]]), "the metrics port, from the same scrapers");
    assert_eq!(audit_container(&d)["ports"], json!([{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]));
    let off = objects(&["--set", "networkPolicy.enabled=true", "--set", "audit.enabled=false"]);
    assert_eq!(one(&off, "NetworkPolicy")["metadata"]["name"], "ha-guard");
    let d = objects(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.webhook.from[0].ipBlock.cidr=10.0.0.0/24",
    ]);
    assert_eq!(
        webhook(&d, "NetworkPolicy")["spec"]["ingress"][0]["from"],
        json!([{"ipBlock": {"cidr": "10.0.0.0/24"}}])
    );
}

#[test]
fn manifests_are_the_chart_rendered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = repo().join("scripts/render-manifests.sh");
    let out = Command::new(&script)
        .arg(dir.path())
        .env("HELM", helm())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(out.status.success(), "{}: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    let files = |root: &Path| -> BTreeSet<PathBuf> {
        fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(root, &p, out)
                } else {
                    out.insert(p.strip_prefix(root).unwrap().to_path_buf());
                }
            }
        }
        let mut out = BTreeSet::new();
        walk(root, root, &mut out);
        out
    };
    let shipped = repo().join("manifests");
    let rendered = files(dir.path());
    assert_eq!(rendered, BTreeSet::from([PathBuf::from("ha-guard.yaml"), PathBuf::from("cert-manager/ha-guard.yaml")]));
    assert_eq!(files(&shipped), rendered, "manifests/ holds only rendered files: run scripts/render-manifests.sh");
    for f in &rendered {
        let want = std::fs::read(dir.path().join(f)).unwrap();
        let have = std::fs::read(shipped.join(f)).unwrap();
        assert!(
            want == have,
            "manifests/{} differs from charts/ha-guard rendered: run scripts/render-manifests.sh (and commit manifests/)",
            f.display()
        );
    }
}

#[test]
fn the_chart_readme_lists_every_value() {
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo().join("charts/ha-guard/values.yaml")).unwrap()).unwrap();
    let readme = std::fs::read_to_string(repo().join("charts/ha-guard/README.md")).unwrap();
    // Row key -> its Default cell (empty for a map whose keys have rows of their own).
    let listed: std::collections::BTreeMap<&str, &str> = readme
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let key = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((key, *cells.get(2)?))
        })
        .collect();
    fn leaves(v: &Value, path: String, out: &mut Vec<String>) {
        match v.as_object() {
            Some(map) if !map.is_empty() => {
                for (k, child) in map {
                    leaves(child, if path.is_empty() { k.clone() } else { format!("{path}.{k}") }, out);
                }
            }
            _ => out.push(path),
        }
    }
    let mut all = Vec::new();
    leaves(&values, String::new(), &mut all);
    // A value is listed when it has a row, or the nearest map above it that has one shows its
    // default whole (a securityContext, a label map).
    let missing: Vec<&String> = all
        .iter()
        .filter(|p| {
            let parts: Vec<&str> = p.split('.').collect();
            let nearest = (1..=parts.len()).rev().find_map(|n| {
                let key = parts[..n].join(".");
                listed.get(key.as_str()).map(|default| (n, *default))
            });
            !matches!(nearest, Some((n, default)) if n == parts.len() || !default.is_empty())
        })
        .collect();
    assert!(missing.is_empty(), "values missing from charts/ha-guard/README.md's table: {missing:?}");
}

/// The chart's NOTES as `helm install` prints them, for `ARGS`: rendered by `helm template` from a
/// copy of the chart whose NOTES.txt is an ordinary template (helm renders NOTES only on install).
fn notes(args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("ha-guard");
    let cp = Command::new("cp").arg("-r").arg(repo().join("charts/ha-guard")).arg(&copy).status().expect("cp");
    assert!(cp.success());
    let text = std::fs::read_to_string(copy.join("templates/NOTES.txt")).expect("NOTES.txt");
    std::fs::remove_file(copy.join("templates/NOTES.txt")).expect("rm");
    let define = format!("{{{{- define \"test.notes\" -}}}}\n{text}\n{{{{- end -}}}}\n");
    std::fs::write(copy.join("templates/_test_notes.tpl"), define).expect("write");
    std::fs::write(copy.join("templates/notes.yaml"), "notes: {{ include \"test.notes\" . | toJson }}\n")
        .expect("write");
    let mut all = vec!["template", "ha-guard", copy.to_str().expect("path"), "--namespace", "ha-guard"];
    all.extend_from_slice(&["--show-only", "templates/notes.yaml"]);
    all.extend_from_slice(args);
    let out = run_helm(&all);
    assert!(out.status.success(), "helm template {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let doc = docs(&String::from_utf8(out.stdout).expect("UTF-8")).remove(0);
    doc["notes"].as_str().expect("the notes").to_string()
}

#[test]
fn the_notes_follow_the_mode_and_say_how_to_see_that_it_answers() {
    let probe =
        "kubectl create deployment ha-guard-probe --image=registry.k8s.io/pause:3.10 --replicas=2 --dry-run=server";
    let observe = notes(&["--set", "mode=observe"]);
    assert!(observe.contains(probe), "{observe}");
    assert!(
        observe.contains("no warning means no replica answered and the apiserver let the write through unchecked"),
        "{observe}"
    );
    assert!(observe.contains("Mode observe: ha-guard refuses nothing and patches nothing"), "{observe}");
    assert!(
        observe.contains("helm upgrade ha-guard CHART --namespace ha-guard --reuse-values --set mode=enforce"),
        "{observe}"
    );
    assert!(!observe.contains("ha-guard.io/mode=warn"), "observe needs no warn labels: {observe}");
    let enforce = notes(&[]);
    assert!(enforce.contains(probe), "{enforce}");
    assert!(enforce.contains("kubectl label namespace NAMESPACE ha-guard.io/mode=warn"), "{enforce}");
    assert!(!enforce.contains("Mode observe"), "{enforce}");
    let config_mode = notes(&["--set", "config.mode=observe"]);
    assert!(config_mode.contains("Mode observe"), "config.mode wins: {config_mode}");
    let fail = notes(&["--set", "webhook.failurePolicy=Fail"]);
    assert!(fail.contains("no warning means no replica answered:"), "{fail}");
}

/// Every name of an admission policy or binding ha-guard can generate: `ha-guard-<id>` and
/// `ha-guard-<id>-warn` per rule with a CEL form, `ha-guard-<id>` per mutation with one.
fn admission_policy_names() -> Vec<String> {
    let mut names = Vec::new();
    for r in ha_guard::core::rules::CEL_RULES {
        names.push(format!("ha-guard-{}", r.rule.id));
        names.push(format!("ha-guard-{}-warn", r.rule.id));
    }
    for m in ha_guard::core::mutations::CEL_MUTATIONS {
        names.push(format!("ha-guard-{}", m.mutation.id));
    }
    names
}

/// The names the ServiceAccount may write are exactly those the generator can make (the chart's
/// list follows the registry), and whatever a configuration makes is among them: every rule at
/// deny (both policies), the default configuration and observe mode.
#[test]
fn the_admission_policy_role_names_what_the_generator_makes() {
    let names = admission_policy_names();
    let all_deny =
        ha_guard::core::rules::CEL_RULES.iter().map(|r| format!("  {}: deny\n", r.rule.id)).collect::<String>();
    for config in [String::new(), "mode: observe\n".to_string(), format!("rules:\n{all_deny}")] {
        let config = ha_guard::core::registry::parse_config(&config, "c.yaml").unwrap_or_else(|e| panic!("{e}"));
        for d in ha_guard::core::policies::generate(&config, None) {
            let name = d["metadata"]["name"].as_str().unwrap().to_string();
            assert!(names.contains(&name), "{name} generated but not in the chart's admission policy role: {names:?}");
        }
    }
    let d = objects(&[]);
    let role = of_kind(&d, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "ha-guard-admission-policies")
        .expect("ClusterRole ha-guard-admission-policies");
    assert_eq!(strings(&role["rules"][1]["resourceNames"]), names);
    assert_eq!(strings(&role["rules"][0]["verbs"]), READ);
    assert!(role["rules"][0].get("resourceNames").is_none());
    let binding = of_kind(&d, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b["metadata"]["name"] == "ha-guard-admission-policies")
        .expect("its binding");
    assert_eq!(binding["subjects"][0]["name"], "ha-guard");
}

/// admissionPolicies.enabled reaches serve as --admission-policies, owned by the chart's
/// ValidatingWebhookConfiguration: auto where the cluster serves them (1.30+), off before; true is
/// on, false off (the pods then delete what they applied); anything else is refused.
#[test]
fn admission_policies_value_reaches_serve() {
    let args_of = |args: &[&str]| strings(&container(&objects(args))["args"]);
    for (args, want) in [
        (vec![], "auto"),
        (vec!["--set", "admissionPolicies.enabled=true"], "on"),
        (vec!["--set", "admissionPolicies.enabled=false"], "off"),
        (vec!["--kube-version", "1.29.0"], "off"),
        (
            vec![
                "--kube-version",
                "1.29.0",
                "--api-versions",
                "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
            ],
            "auto",
        ),
        (vec!["--kube-version", "1.29.0", "--set", "admissionPolicies.enabled=true"], "on"),
    ] {
        let got = args_of(&args);
        assert!(got.contains(&format!("--admission-policies={want}")), "{args:?}: {got:?}");
        let owner = of_kind(&objects(&args), "ValidatingWebhookConfiguration")[0]["metadata"]["name"].clone();
        assert!(got.contains(&format!("--admission-policies-owner={}", owner.as_str().unwrap())), "{args:?}: {got:?}");
    }
    assert!(refused(&["--set", "admissionPolicies.enabled=yes"]).contains("admissionPolicies"));
}

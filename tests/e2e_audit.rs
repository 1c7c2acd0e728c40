//! End-to-end: `ha-guard audit` against a real kube-apiserver (issue 15, acceptance 1 and 2),
//! also as the kubectl plugin `kubectl ha-guard audit`.
//!
//! No ha-guard webhook is registered here: the objects are stored as a cluster that predates
//! ha-guard stores them, and only the audit reads them. This control plane has no controllers: what
//! the audit says of pods and budgets the controllers decide (the live posture rules, `--drain`) is
//! judged on a control plane whose controllers run, in `tests/e2e_judge.rs`.
//!
//! Steps (in this order, one control plane):
//! 1. `stored`: violating objects stored first; `audit --format json` lists exactly what `check
//!    --complete` lists for the same manifests (every field but where: the API path instead of the
//!    file), exit codes as `check`'s (1 with a deny finding, 0 with warnings only, 1 with
//!    `--fail-on warn`, 2 for an unusable kubeconfig or context); `-l` judges only what it selects.
//! 2. `permissions`: what the audit needs to read.
//! 3. `kubectl-plugin`: a `kubectl-ha_guard` on PATH answers `kubectl ha-guard audit` as the binary
//!    does.
//! 4. `readme`: each `ha-guard audit` / `kubectl ha-guard audit` command README's "Day 2" section
//!    shows, run as written against this cluster.
//! 5. `aggregated-api` (after `permissions`): an APIService served by one replica, judged with the
//!    aggregator's own Available condition (`apiservice-unavailable`).

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");

/// What a run of the binary returned.
struct Run {
    command: String,
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn show(&self) -> String {
        format!("`{}` exited {}\n--- stdout\n{}\n--- stderr\n{}", self.command, self.code, self.stdout, self.stderr)
    }

    #[track_caller]
    fn exits(self, code: i32) -> Self {
        assert_eq!(self.code, code, "{}", self.show());
        self
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.show()))
    }
}

/// Runs `program args` with the control plane's kubeconfig in `KUBECONFIG` (as a user's shell has
/// it), stdin closed (so not a terminal: no progress line) and `PATH` starting with `path_first`.
fn run(cp: &ControlPlane, program: &Path, args: &[&str], path_first: Option<&Path>) -> Run {
    let mut cmd = Command::new(program);
    cmd.args(args).env("KUBECONFIG", cp.kubeconfig()).stdin(Stdio::null());
    if let Some(dir) = path_first {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut paths = vec![dir.to_path_buf()];
        paths.extend(std::env::split_paths(&path));
        cmd.env("PATH", std::env::join_paths(paths).expect("PATH"));
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    Run {
        command: format!("{} {}", program.display(), args.join(" ")),
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `ha-guard audit ARGS`.
fn audit(cp: &ControlPlane, args: &[&str]) -> Run {
    let mut all = vec!["audit"];
    all.extend_from_slice(args);
    run(cp, Path::new(BIN), &all, None)
}

/// A finding as both commands print it, without where it is (a file and document for `check`,
/// the object's API path for `audit`).
fn what(f: &Value) -> Value {
    let mut f = f.clone();
    let map = f.as_object_mut().expect("a finding is an object");
    map.remove("file");
    map.remove("document");
    map.remove("line");
    map.remove("column");
    f
}

fn findings(report: &Value) -> Vec<Value> {
    report["findings"].as_array().expect("findings").clone()
}

// --- acceptance 1: what is stored, as check sees the same files ------------------------------

/// Objects that break rules, as a cluster without ha-guard would have stored them.
fn stored_objects(ns: &str) -> Vec<Value> {
    let mut exempted = pdb(ns, "legacy", "legacy", json!({"minAvailable": 1}));
    exempted["metadata"]["annotations"] =
        json!({"ha-guard.io/allow-pdb-blocks-eviction": "singleton by design, drained by hand"});
    vec![
        // pdb-blocks-eviction (deny): minAvailable 1 over one replica.
        deployment(ns, "lone", 1),
        pdb(ns, "lone", "lone", json!({"minAvailable": 1})),
        // host-network-colocation (deny), replicas-colocated and pdb-missing (warn).
        pod(deployment(ns, "hostnet", 2), json!({"hostNetwork": true})),
        // Clean: spread by node, a budget that allows one disruption.
        spread_out(deployment(ns, "web", 3)),
        pdb(ns, "web", "web", json!({"maxUnavailable": 1})),
        // hpa-target-missing (warn, complete view only).
        hpa(ns, "ghost", "nowhere", 2, 4),
        // The same as `lone`, exempted: reported as allowed with its reason.
        deployment(ns, "legacy", 1),
        exempted,
    ]
}

/// Warnings only.
fn warn_objects(ns: &str) -> Vec<Value> {
    vec![deployment(ns, "pair", 2), hpa(ns, "ghost", "nowhere", 2, 4)]
}

fn stored(cp: &ControlPlane) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (ns, objects) in [("shop", stored_objects("shop")), ("quiet", warn_objects("quiet"))] {
        cp.namespace(ns, &[]);
        let file = dir.path().join(format!("{ns}.yaml"));
        std::fs::write(&file, yaml_file(&objects)).expect("write manifests");
        cp.kubectl(&["apply", "-f", file.to_str().expect("path")]).success();
    }
    let check = |ns: &str, extra: &[&str]| {
        let file = dir.path().join(format!("{ns}.yaml"));
        let mut args =
            vec!["check", "--complete", "--namespace", ns, "--format", "json", "-f", file.to_str().expect("path")];
        args.extend_from_slice(extra);
        run(cp, Path::new(BIN), &args, None)
    };

    // The same findings, field for field, and the same summary and exit code.
    let audited = audit(cp, &["--namespace", "shop", "--format", "json"]).exits(1);
    let checked = check("shop", &[]).exits(1);
    let (a, c) = (audited.json(), checked.json());
    let mut from_audit: Vec<Value> = findings(&a).iter().map(what).collect();
    let mut from_check: Vec<Value> = findings(&c).iter().map(what).collect();
    let key = |v: &Value| v.to_string();
    from_audit.sort_by_key(key);
    from_check.sort_by_key(key);
    assert_eq!(from_audit, from_check, "audit and check --complete on the same objects\n{}", audited.show());
    assert_eq!(a["summary"], c["summary"]);
    // And they are the findings the objects were made for: the comparison is not of two empty lists.
    let rules: BTreeSet<(String, String, String)> = findings(&a)
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("rule"), s("action"), s("name"))
        })
        .collect();
    for (rule, action, name) in [
        ("pdb-blocks-eviction", "deny", "lone"),
        ("host-network-colocation", "deny", "hostnet"),
        ("replicas-colocated", "warn", "hostnet"),
        ("pdb-missing", "warn", "hostnet"),
        ("hpa-target-missing", "warn", "ghost"),
        ("pdb-blocks-eviction", "allowed", "legacy"),
    ] {
        assert!(rules.contains(&(rule.into(), action.into(), name.into())), "{rule} {action} on {name}: {rules:?}");
    }
    assert!(!rules.iter().any(|(_, _, name)| name == "web"), "the clean workload has no finding: {rules:?}");
    // Where: the object's API path.
    let lone = findings(&a).into_iter().find(|f| f["rule"] == "pdb-blocks-eviction" && f["name"] == "lone").unwrap();
    assert_eq!(lone["file"], "apis/policy/v1/namespaces/shop/poddisruptionbudgets/lone", "{lone}");
    assert!(
        lone["message"].as_str().unwrap_or_default().contains("minAvailable"),
        "the message names the field: {lone}"
    );

    // The text and SARIF formats: the same findings.
    let text = audit(cp, &["--namespace", "shop"]).exits(1);
    assert!(text.stdout.contains("apis/apps/v1/namespaces/shop/deployments/hostnet"), "{}", text.show());
    eprintln!("[e2e] ha-guard audit --namespace shop:\n{}", text.stdout);
    assert!(text.stdout.contains("[host-network-colocation]") || text.stdout.contains("host-network-colocation"));
    // The summary line: JSON's counts, each with its rules (the most frequent first).
    let summary = format!(
        "{} deny (host-network-colocation 1, pdb-blocks-eviction 1), {} warn (hpa-target-missing 1, pdb-missing 1, \
         replicas-colocated 1), {} allowed (pdb-blocks-eviction 1) in ",
        a["summary"]["deny"], a["summary"]["warn"], a["summary"]["allowed"]
    );
    assert!(text.stdout.contains(&summary), "{summary:?} in {}", text.show());
    assert!(
        !text.stderr.contains("reading the cluster"),
        "no progress line when stderr is not a terminal: {}",
        text.show()
    );
    let sarif = audit(cp, &["--namespace", "shop", "--format", "sarif"]).exits(1).json();
    let results = sarif["runs"][0]["results"].as_array().expect("results").len();
    assert_eq!(results, findings(&a).len(), "one SARIF result per finding");

    // A namespace in warn mode: its deny findings are warnings, as at admission; off: skipped.
    cp.kubectl(&["label", "ns", "shop", "ha-guard.io/mode=warn"]).success();
    let warned = audit(cp, &["--namespace", "shop", "--format", "json"]).exits(0).json();
    assert_eq!(warned["summary"]["deny"], 0, "{warned}");
    for rule in ["pdb-blocks-eviction", "host-network-colocation"] {
        assert!(
            findings(&warned).iter().any(|f| f["rule"] == rule && f["action"] == "warn"),
            "{rule} as a warning in warn mode: {warned}"
        );
    }
    cp.kubectl(&["label", "ns", "shop", "ha-guard.io/mode=off", "--overwrite"]).success();
    let off = audit(cp, &["--namespace", "shop", "--format", "json"]).exits(0).json();
    assert_eq!((off["summary"]["deny"].as_u64(), off["summary"]["warn"].as_u64()), (Some(0), Some(0)), "{off}");
    cp.kubectl(&["label", "ns", "shop", "ha-guard.io/mode-"]).success();
    audit(cp, &["--namespace", "shop"]).exits(1);

    // On a terminal (a pseudo-terminal from script(1)): a progress line, and a closing count.
    let report = dir.path().join("report.json");
    let on_terminal = format!("{BIN} audit --namespace shop --format json --output {}", report.display());
    let tty = run(cp, Path::new("script"), &["-qec", &on_terminal, "/dev/null"], None);
    assert!(tty.stdout.contains("reading the cluster: "), "a progress line on a terminal: {}", tty.show());
    assert!(tty.stdout.contains("audited 8 objects and 0 pods in "), "{}", tty.show());
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("--output")).expect("JSON");
    assert_eq!(written, a, "--output writes the report, and the progress line does not go into it");

    // Warnings only: exit 0 for both, 1 for both with --fail-on warn.
    let quiet = audit(cp, &["--namespace", "quiet", "--format", "json"]).exits(0).json();
    check("quiet", &[]).exits(0);
    assert!(quiet["summary"]["warn"].as_u64().unwrap_or(0) >= 2, "{quiet}");
    assert_eq!(quiet["summary"]["deny"], 0);
    audit(cp, &["--namespace", "quiet", "--fail-on", "warn"]).exits(1);
    check("quiet", &["--fail-on", "warn"]).exits(1);

    // -l: only what the selector selects is judged (the view still holds the rest). The selector
    // is on the objects' own labels, which these Deployments have none of yet: nothing is judged.
    let none = audit(cp, &["--namespace", "shop", "-l", "app=hostnet", "--format", "json"]).exits(0).json();
    assert_eq!(findings(&none), Vec::<Value>::new(), "{none}");
    cp.kubectl(&["-n", "shop", "label", "deployment", "hostnet", "app=hostnet"]).success();
    let selected = audit(cp, &["--namespace", "shop", "-l", "app=hostnet", "--format", "json"]).exits(1).json();
    let names: BTreeSet<String> =
        findings(&selected).iter().map(|f| f["name"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(names, BTreeSet::from(["hostnet".to_string()]), "{selected}");

    // A cluster-scoped subject: a fail-closed webhook with one endpoint (a URL). Its rules match a
    // resource no one serves, so the apiserver never calls it. Judged by a whole audit; -n judges
    // only that namespace's objects, as kubectl's -n lists only them.
    let webhook = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "legacy-policy"},
        "webhooks": [{"name": "legacy.example.com", "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["widgets"]}]}]});
    cp.apply(&webhook).success();
    let whole = audit(cp, &["--format", "json"]).exits(1).json();
    let on_webhook: Vec<Value> =
        findings(&whole).into_iter().filter(|f| f["kind"] == "ValidatingWebhookConfiguration").collect();
    assert_eq!(on_webhook.len(), 1, "{whole}");
    assert_eq!(on_webhook[0]["rule"], "webhook-fail-closed-unavailable");
    assert_eq!(
        on_webhook[0]["file"],
        "apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/legacy-policy"
    );
    let shop_only = audit(cp, &["--namespace", "shop", "--format", "json"]).exits(1).json();
    assert_eq!(shop_only, a, "-n shop: the cluster-scoped webhook configuration is not judged");
    assert!(findings(&whole).iter().any(|f| f["namespace"] == "quiet"), "a whole audit judges every namespace");

    // Exit 2: a context the kubeconfig does not have, a kubeconfig that does not exist.
    let bad = audit(cp, &["--context", "nope"]).exits(2);
    assert!(bad.stderr.contains("nope"), "the error names the context: {}", bad.show());
    let missing = audit(cp, &["--kubeconfig", "/nonexistent/kubeconfig"]).exits(2);
    assert!(missing.stderr.contains("/nonexistent/kubeconfig"), "{}", missing.show());
}

// --- the permissions README's Day 2 section names ---------------------------------------------

/// With a ServiceAccount's token as the only credential: no permission is exit 2 naming the
/// collection refused; `list` on what README lists is enough for a whole audit.
fn permissions(cp: &ControlPlane) {
    cp.kubectl(&["-n", "quiet", "create", "serviceaccount", "auditor"]).success();
    let token = cp.kubectl(&["-n", "quiet", "create", "token", "auditor", "--duration=10m"]).success().stdout;
    let kubeconfig = cp.token_kubeconfig(token.trim(), &cp.root().join("auditor.kubeconfig"));
    let kubeconfig = kubeconfig.to_str().expect("path");
    let refused = audit(cp, &["--kubeconfig", kubeconfig]).exits(2);
    for needle in ["cannot list /", "403", "README's Day 2 section"] {
        assert!(refused.stderr.contains(needle), "{needle:?}: {}", refused.show());
    }
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "ha-guard-audit"},
        "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "replicasets"], "verbs": ["list"]},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]},
            {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["persistentvolumeclaims", "nodes", "namespaces", "services", "pods"],
                "verbs": ["list"]},
            {"apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"], "verbs": ["list"]},
            {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["list"]},
            {"apiGroups": ["apiregistration.k8s.io"], "resources": ["apiservices"], "verbs": ["list"]}]});
    cp.apply(&role).success();
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "ha-guard-audit",
        "--clusterrole=ha-guard-audit",
        "--serviceaccount=quiet:auditor",
    ])
    .success();
    let as_admin = audit(cp, &["--format", "json"]).exits(1).json();
    // RBAC takes effect within moments: the authorizer's cache.
    let as_auditor = poll("the audit with the auditor's token", WAIT, std::time::Duration::from_millis(200), || {
        let r = audit(cp, &["--kubeconfig", kubeconfig, "--format", "json"]);
        if r.code == 1 { Ok(r.json()) } else { Err(r.show()) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(as_auditor, as_admin, "list on what README names is all the audit needs");
}

// --- aggregated APIs (issue 51) ---------------------------------------------------------------

/// An APIService served by one replica: `apiservice-unavailable` on it, with the aggregator's own
/// verdict once the kube-apiserver's availability controller has written it (no controller
/// manager here makes endpoints, so it reports none). Removed at the end: an unavailable
/// aggregated API makes every kubectl discovery warn.
fn aggregated_api(cp: &ControlPlane) {
    const NAME: &str = "v1beta1.visibility.e2e.ha-guard.io";
    cp.namespace("aggregated", &[]);
    cp.apply(yaml_file(&[
        deployment("aggregated", "visibility", 1),
        service("aggregated", "visibility", "visibility"),
    ]))
    .success();
    let apiservice = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": NAME},
        "spec": {"group": "visibility.e2e.ha-guard.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                 "versionPriority": 100, "insecureSkipTLSVerify": true,
                 "service": {"namespace": "aggregated", "name": "visibility"}}});
    cp.apply(&apiservice).success();
    // The aggregator's verdict, as the apiserver stores it.
    let condition = poll("the APIService's Available condition", WAIT, std::time::Duration::from_millis(250), || {
        let got = cp.kubectl(&["get", "apiservice", NAME, "-o", "json"]).success().json();
        let available = got["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Available" && c["status"] == "False").cloned());
        available.ok_or_else(|| got["status"].to_string())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let reason = condition["reason"].as_str().expect("reason").to_string();
    let report = audit(cp, &["--format", "json"]).json();
    let ours: Vec<Value> = findings(&report).into_iter().filter(|f| f["rule"] == "apiservice-unavailable").collect();
    assert_eq!(ours.len(), 1, "one finding, on the one aggregated API: {ours:#?}");
    let f = &ours[0];
    assert_eq!((f["kind"].as_str(), f["name"].as_str()), (Some("APIService"), Some(NAME)), "{f:#}");
    assert_eq!(f["file"], format!("apis/apiregistration.k8s.io/v1/apiservices/{NAME}"), "{f:#}");
    let message = f["message"].as_str().expect("message");
    for part in [
        format!("not Available now (Available False, {reason}: "),
        "through Service aggregated/visibility, and ".to_string(),
        "the Service (selector app=visibility) selects only Deployment visibility (replicas 1)".to_string(),
        "every namespace being deleted stays Terminating".to_string(),
    ] {
        assert!(message.contains(&part), "{part:?} not in: {message}");
    }
    assert!(f["path"].as_str().is_some_and(|p| p.starts_with("status.conditions[")), "{f:#}");
    // The local APIServices the apiserver registers itself (v1., v1.apps, ...) are not judged.
    assert!(ours.iter().all(|f| f["name"] == NAME));
    cp.kubectl(&["delete", "apiservice", NAME]).success();
}

// --- nodes ----------------------------------------------------------------------------------

/// Node `name` in `zone`, Ready and schedulable (as [`ControlPlane::nodes`] makes them).
fn node(cp: &ControlPlane, name: &str, zone: &str) {
    cp.nodes(&[name]);
    cp.kubectl(&["label", "node", name, &format!("topology.kubernetes.io/zone={zone}"), "--overwrite"]).success();
}

// --- the kubectl plugin -----------------------------------------------------------------------

/// A folder holding `kubectl-ha_guard`, a symlink to the binary (what krew's install does).
fn plugin_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = dir.path().join("kubectl-ha_guard");
    std::os::unix::fs::symlink(BIN, &plugin).expect("symlink");
    let path = dir.path().to_path_buf();
    (dir, path)
}

fn kubectl_plugin(cp: &ControlPlane) {
    let (_dir, path) = plugin_dir();
    let kubectl = Path::new("kubectl");
    let list = run(cp, kubectl, &["plugin", "list"], Some(&path));
    assert!(list.stdout.contains("kubectl-ha_guard"), "kubectl finds the plugin: {}", list.show());
    let via_kubectl =
        run(cp, kubectl, &["ha-guard", "audit", "--namespace", "shop", "--format", "json"], Some(&path)).exits(1);
    let direct = audit(cp, &["--namespace", "shop", "--format", "json"]).exits(1);
    assert_eq!(via_kubectl.json(), direct.json(), "kubectl ha-guard audit is ha-guard audit");
    run(cp, kubectl, &["ha-guard", "audit", "--drain", "node-1"], Some(&path)).exits(0);
    // Usage under the name the user typed.
    let help = run(cp, kubectl, &["ha-guard", "audit", "--help"], Some(&path)).exits(0);
    assert!(help.stdout.contains("Usage: kubectl ha-guard audit"), "{}", help.show());
    let wrong = run(cp, kubectl, &["ha-guard", "audit", "--no-such-flag"], Some(&path)).exits(2);
    assert!(wrong.stderr.contains("kubectl ha-guard audit"), "{}", wrong.show());
}

// --- README's Day 2 commands ------------------------------------------------------------------

/// The `ha-guard audit` and `kubectl ha-guard audit` commands of README's "Day 2" section.
fn readme_day_2_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let start = readme.find("\n## Day 2").expect("README has a \"## Day 2\" section");
    let section = &readme[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    section[..end]
        .lines()
        .filter(|l| l.starts_with("    "))
        .map(str::trim)
        .filter(|l| l.starts_with("ha-guard audit") || l.starts_with("kubectl ha-guard audit"))
        .map(str::to_string)
        .collect()
}

/// Runs each Day 2 command as written: it must be usable (exit 0 or 1) and say something.
fn readme_day_2(cp: &ControlPlane) {
    let commands = readme_day_2_commands();
    assert!(commands.len() >= 5, "{commands:?}");
    assert!(commands.iter().any(|c| c.starts_with("kubectl ")), "{commands:?}");
    let (_dir, path) = plugin_dir();
    for command in &commands {
        let words: Vec<&str> = command.split_whitespace().collect();
        let program = if words[0] == "ha-guard" { Path::new(BIN) } else { Path::new("kubectl") };
        let out = run(cp, program, &words[1..], Some(&path));
        assert!(out.code == 0 || out.code == 1, "README's `{command}`: {}", out.show());
        assert!(!out.stdout.trim().is_empty(), "README's `{command}` printed nothing: {}", out.show());
    }
}

#[test]
fn audit_reads_the_cluster_as_it_is() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    let mut steps = Steps::new(String::new);
    // Before any node exists: check has no nodes either, so the live-only rules are silent in both.
    steps.run("stored", || stored(&cp));
    steps.run("permissions", || permissions(&cp));
    steps.run("aggregated-api", || aggregated_api(&cp));
    // The live posture rules and the drain simulation are judged on a control plane whose
    // controllers place the pods and compute the budgets: tests/e2e_judge.rs. Here, the node the
    // README's drain commands name.
    node(&cp, "node-1", "eu-west-1a");
    steps.run("kubectl-plugin", || kubectl_plugin(&cp));
    steps.run("readme", || readme_day_2(&cp));
    steps.finish();
}

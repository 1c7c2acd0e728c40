//! Policy as a platform team runs it (issue 39), through the CLI over the shared corpus: the
//! configuration's exceptions in `check`'s outputs (allowed, naming the exception and its reason),
//! an expired exception judged again and warned about, an exception that allows nothing warned
//! about, and the preview of a configuration change (`--config NEW --baseline CURRENT`) checked
//! against `check --complete` of the same objects under each file; an override by namespace labels
//! where the files hold no Namespace (issue 50): named, and never weaker under `--complete`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::corpus::corpus;

use crate::cli::{Run, ha_guard};

fn run(args: &[&str]) -> Run {
    ha_guard(args).env("NO_COLOR", "1").run()
}

/// The tigera-operator Deployment (tolerates everything) and cert-manager's fail-closed webhooks.
fn inputs() -> Vec<String> {
    let c = corpus();
    ["calico/tigera-operator.yaml", "cert-manager/cert-manager-v1.11.1.yaml"]
        .iter()
        .map(|f| c.join(f).display().to_string())
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const DENY: &str = "rules:\n  toleration-wildcard: deny\n  webhook-fail-closed-unavailable: deny\n";

fn exceptions(expires: &str) -> String {
    format!(
        "{DENY}exceptions:
  - name: tigera-operator-tolerations
    rules: [toleration-wildcard]
    match:
      kinds: [Deployment]
      namespaces: [\"tigera-*\"]
      names: [tigera-operator]
      selector: {{matchLabels: {{k8s-app: tigera-operator}}}}
    reason: \"vendor operator; tolerates everything by design\"
    owner: platform@example.com
{expires}  - name: cert-manager-webhook
    rules: [webhook-fail-closed-unavailable]
    match:
      names: [\"cert-manager-*\"]
    reason: \"fail-closed by design; cert-manager runs 2 replicas in production\"
    clusterWide: true
"
    )
}

fn check(config: &Path) -> Run {
    let mut args = vec!["check".to_string(), "--complete".into(), "--format".into(), "json".into()];
    args.extend(["--config".into(), config.display().to_string()]);
    args.extend(inputs());
    run(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// (rule, kind/namespace/name) -> (action, exception) of a check's JSON.
fn verdicts(json: &Value) -> BTreeMap<(String, String), (String, Option<String>)> {
    let mut out = BTreeMap::new();
    for f in json["findings"].as_array().unwrap() {
        let object = format!(
            "{}/{}/{}",
            f["kind"].as_str().unwrap(),
            f["namespace"].as_str().unwrap(),
            f["name"].as_str().unwrap()
        );
        let rule = f["rule"].as_str().unwrap().to_string();
        let action = f["action"].as_str().unwrap().to_string();
        let rank = |a: &str| ["allowed", "warn", "deny"].iter().position(|x| *x == a);
        let exception = f["exception"].as_str().map(str::to_string);
        let entry = out.entry((rule, object)).or_insert((action.clone(), exception.clone()));
        if rank(&action) > rank(&entry.0) {
            *entry = (action, exception);
        }
    }
    out
}

#[test]
fn exceptions_allow_what_they_match_name_themselves_and_stop_at_their_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let deny = write(dir.path(), "deny.yaml", DENY);
    let refused = check(&deny);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    let v = verdicts(&refused.json());
    assert_eq!(v[&("toleration-wildcard".into(), "Deployment/tigera-operator/tigera-operator".into())].0, "deny");
    assert_eq!(
        v[&("webhook-fail-closed-unavailable".into(), "MutatingWebhookConfiguration//cert-manager-webhook".into())].0,
        "deny"
    );

    // With the exceptions: allowed, each naming its exception and reason, in JSON and text.
    let allowing = write(dir.path(), "allow.yaml", &exceptions("    expires: 2999-01-01\n"));
    let allowed = check(&allowing);
    assert_eq!(allowed.code, 0, "{}\n{}", allowed.stdout, allowed.stderr);
    let json = allowed.json();
    let tigera = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "toleration-wildcard" && f["name"] == "tigera-operator")
        .unwrap();
    assert_eq!(tigera["action"], "allowed");
    assert_eq!(tigera["exception"], "tigera-operator-tolerations");
    assert_eq!(tigera["exceptionReason"], "vendor operator; tolerates everything by design");
    let webhooks: Vec<&Value> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "webhook-fail-closed-unavailable")
        .collect();
    assert!(!webhooks.is_empty() && webhooks.iter().all(|f| f["exception"] == "cert-manager-webhook"), "{webhooks:?}");
    let mut args = vec!["check".to_string(), "--complete".into(), "--config".into(), allowing.display().to_string()];
    args.extend(inputs());
    let text = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        text.stdout.contains(
            "allowed by exception tigera-operator-tolerations: vendor operator; tolerates everything by design (owner platform@example.com, until 2999-01-01)"
        ),
        "{}",
        text.stdout
    );

    // SARIF: an external suppression, justified by the exception.
    let mut args = vec!["check".to_string(), "--complete".into(), "--format".into(), "sarif".into()];
    args.extend(["--config".into(), allowing.display().to_string()]);
    args.extend(inputs());
    let sarif: Value = serde_json::from_str(&run(&args.iter().map(String::as_str).collect::<Vec<_>>()).stdout).unwrap();
    let suppressed = sarif["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ruleId"] == "toleration-wildcard")
        .map(|r| r["suppressions"][0].clone())
        .unwrap();
    assert_eq!(suppressed["kind"], "external");
    assert!(
        suppressed["justification"].as_str().unwrap().starts_with("allowed by exception tigera-operator-tolerations")
    );

    // Expired (from its expiry day on): judged again, and the expiry said.
    let expired = write(dir.path(), "expired.yaml", &exceptions("    expires: 2020-01-01\n"));
    let again = check(&expired);
    assert_eq!(again.code, 1, "the Deployment is refused again");
    let v = verdicts(&again.json());
    assert_eq!(
        v[&("toleration-wildcard".into(), "Deployment/tigera-operator/tigera-operator".into())],
        ("deny".into(), None)
    );
    let diagnostics = again.json()["diagnostics"].to_string();
    assert!(
        diagnostics.contains(
            "exception tigera-operator-tolerations expired on 2020-01-01: it no longer applies, so what it allowed (toleration-wildcard) is judged again"
        ),
        "{diagnostics}"
    );
}

#[test]
fn an_exception_that_allows_nothing_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "c.yaml",
        "exceptions:\n  - name: old-vendor\n    rules: [pdb-overlap]\n    match: {namespaces: [\"legacy-*\"]}\n    reason: gone since spring\n",
    );
    let r = check(&config);
    assert!(
        r.json()["diagnostics"].to_string().contains(
            "exception old-vendor allowed no finding here: its match (rules pdb-overlap) covers nothing these objects break"
        ),
        "{}",
        r.stdout
    );
}

/// The preview lists exactly the (object, rule) pairs whose verdict differs between `check
/// --complete` under each file, with before and after, and exits 1 when one becomes denied.
#[test]
fn a_preview_lists_exactly_the_verdicts_a_configuration_change_changes() {
    let dir = tempfile::tempdir().unwrap();
    // In force: toleration-wildcard denied, the webhook rule at its default (warn).
    let current = write(dir.path(), "current.yaml", "rules:\n  toleration-wildcard: deny\n");
    // The new file: both denied, tigera-operator excepted, and of cert-manager's two webhook
    // configurations only the mutating one: the validating one becomes denied.
    let new = write(
        dir.path(),
        "new.yaml",
        &exceptions("").replace(
            "      names: [\"cert-manager-*\"]\n",
            "      kinds: [MutatingWebhookConfiguration]\n      names: [\"cert-manager-*\"]\n",
        ),
    );
    let (before, after) = (verdicts(&check(&current).json()), verdicts(&check(&new).json()));
    let mut expected: Vec<(String, String, Option<String>, Option<String>)> = Vec::new();
    for key in before.keys().chain(after.keys()).collect::<std::collections::BTreeSet<_>>() {
        let (b, a) = (before.get(key).map(|v| v.0.clone()), after.get(key).map(|v| v.0.clone()));
        if b != a {
            expected.push((key.1.clone(), key.0.clone(), b, a));
        }
    }
    assert!(expected.len() >= 3, "the change changes something: {expected:?}");

    let mut args = vec!["check".to_string(), "--complete".into(), "--format".into(), "json".into()];
    args.extend(["--config".into(), new.display().to_string(), "--baseline".into(), current.display().to_string()]);
    args.extend(inputs());
    let preview = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let json = preview.json();
    let mut listed: Vec<(String, String, Option<String>, Option<String>)> = json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                format!(
                    "{}/{}/{}",
                    c["kind"].as_str().unwrap(),
                    c["namespace"].as_str().unwrap(),
                    c["name"].as_str().unwrap()
                ),
                c["rule"].as_str().unwrap().to_string(),
                c["before"].as_str().map(str::to_string),
                c["after"].as_str().map(str::to_string),
            )
        })
        .collect();
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
    let newly_denied = listed.iter().filter(|c| c.3.as_deref() == Some("deny")).count();
    assert_eq!(newly_denied, 1, "the validating webhook configuration becomes denied: {listed:?}");
    assert_eq!(json["summary"]["newly-denied"], newly_denied);
    assert_eq!(preview.code, 1, "something becomes denied");
    let tigera = json["changes"].as_array().unwrap().iter().find(|c| c["rule"] == "toleration-wildcard").unwrap();
    assert_eq!(
        (tigera["change"].as_str(), tigera["exception"].as_str()),
        (Some("newly-allowed"), Some("tigera-operator-tolerations"))
    );

    // The other way round (back to the file in force): the text names each object, its rules
    // before -> after, and the counts; tigera-operator becomes denied again, so exit 1.
    let text = |config: &Path, baseline: &Path| {
        let mut a = vec!["check".to_string(), "--complete".into()];
        a.extend([
            "--config".into(),
            config.display().to_string(),
            "--baseline".into(),
            baseline.display().to_string(),
        ]);
        a.extend(inputs());
        run(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let reverse = text(&current, &new);
    assert_eq!(reverse.code, 1, "{}", reverse.stdout);
    for line in [
        "Deployment tigera-operator/tigera-operator\n  newly-denied        toleration-wildcard (allowed -> deny)\n",
        "ValidatingWebhookConfiguration/cert-manager-webhook\n  no-longer-denied    webhook-fail-closed-unavailable (deny -> warn)\n",
        "1 newly denied, 1 no longer denied, 1 newly warned, 0 newly allowed, 0 no longer reported\n",
    ] {
        assert!(reverse.stdout.contains(line), "{line}in\n{}", reverse.stdout);
    }
    // No change: nothing listed, exit 0.
    let same = text(&new, &new);
    assert_eq!(same.code, 0);
    assert!(same.stdout.contains(": 0 objects change\n"), "{}", same.stdout);

    // A comparison has no SARIF.
    let at = args.iter().position(|a| a == "json").unwrap();
    args[at] = "sarif".into();
    let sarif = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(sarif.code, 2);
    assert!(sarif.stderr.contains("--baseline prints a comparison: use --format text or json"), "{}", sarif.stderr);
}

/// A preview keeps the new file's configuration diagnostics that plain `check --config` gives (issue
/// 51, item 7): an expired exception and one that allows nothing, in text and JSON.
#[test]
fn a_preview_keeps_the_new_files_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let current = write(dir.path(), "current.yaml", DENY);
    let unused = "  - name: old-vendor\n    rules: [pdb-overlap]\n    match: {namespaces: [\"legacy-*\"]}\n    reason: \
                  gone since spring\n";
    let new = write(dir.path(), "new.yaml", &(exceptions("    expires: 2020-01-01\n") + unused));
    let expired = "exception tigera-operator-tolerations expired on 2020-01-01: it no longer applies, so what it \
                   allowed (toleration-wildcard) is judged again";
    let allows_nothing = "exception old-vendor allowed no finding here: its match (rules pdb-overlap) covers nothing \
                          these objects break";
    // Plain check says both.
    let plain = check(&new).json()["diagnostics"].to_string();
    assert!(plain.contains(expired) && plain.contains(allows_nothing), "{plain}");
    let preview = |format: &str| {
        let mut a = vec!["check".to_string(), "--complete".into(), "--format".into(), format.into()];
        a.extend(["--config".into(), new.display().to_string(), "--baseline".into(), current.display().to_string()]);
        a.extend(inputs());
        run(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let text = preview("text");
    let file = new.display().to_string();
    for warning in [expired, allows_nothing] {
        assert!(text.stdout.contains(&format!("\nwarning: {warning}")), "{warning} not in\n{}", text.stdout);
    }
    assert!(text.stdout.contains(&format!("\n  --> {file}\n")), "{}", text.stdout);
    assert!(text.stdout.ends_with("0 no longer reported\n"), "the counts stay last: {}", text.stdout);
    let json = preview("json").json();
    let diagnostics = json["diagnostics"].as_array().expect("diagnostics is a list");
    assert_eq!(diagnostics.len(), 2, "{diagnostics:?}");
    for (d, warning) in diagnostics.iter().zip([expired, allows_nothing]) {
        assert_eq!((d["level"].as_str(), d["file"].as_str()), (Some("warning"), Some(file.as_str())), "{d}");
        assert!(d["message"].as_str().unwrap().starts_with(warning), "{d}");
    }
}

/// The override of issue 50: production namespaces deny a Recreate strategy and a missing PDB.
const PROD_OVERRIDE: &str = "overrides:\n  - namespaceSelector: {matchLabels: {tier: prod}}\n    rules: {recreate-multi-replica: deny, pdb-missing: deny}\n";

/// Deployment `web` in `shop`: 3 replicas, strategy Recreate, no PDB.
const SHOP_WEB: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  strategy: {type: Recreate}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx:1.27}]
";

/// The actions of `rule`'s findings in a check's JSON.
fn actions_of(json: &Value, rule: &str) -> Vec<String> {
    json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == rule)
        .map(|f| f["action"].as_str().unwrap().to_string())
        .collect()
}

/// The messages of the warnings among a check's JSON diagnostics.
fn warnings_of(json: &Value) -> Vec<String> {
    json["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == "warning" || d["level"] == "warning")
        .map(|d| d["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn an_override_where_check_does_not_know_the_namespace_is_named_and_never_weaker_under_complete() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "policy.yaml", PROD_OVERRIDE).display().to_string();
    let deploy = write(dir.path(), "web.yaml", SHOP_WEB).display().to_string();
    let namespace = |labels: &str| {
        write(
            dir.path(),
            "ns.yaml",
            &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {{{labels}}}\n"),
        )
        .display()
        .to_string()
    };
    let check = |extra: &[&str], files: &[&str]| {
        let mut args = vec!["check", "--format", "json", "--config", &config];
        args.extend(extra);
        args.extend(files);
        let r = run(&args);
        let json = r.json();
        (r.code, json)
    };
    let unknown = "namespace shop: its labels are not known (no Namespace shop among the files), and the overrides select namespaces by label";

    // Some files, no Namespace: the cluster-wide action (warn), and the namespace named.
    let (code, json) = check(&[], &[&deploy]);
    assert_eq!(actions_of(&json, "recreate-multi-replica"), ["warn"], "{json}");
    assert_eq!(code, 0, "{json}");
    let warnings = warnings_of(&json);
    assert!(
        warnings.iter().any(|w| w.contains(unknown) && w.contains("judged by the cluster-wide actions")),
        "{warnings:?}\n{json}"
    );

    // --complete, no Namespace: the files are the whole cluster, so the strictest override (deny),
    // said on the namespace and on each finding it raised.
    let (code, json) = check(&["--complete"], &[&deploy]);
    assert_eq!(actions_of(&json, "recreate-multi-replica"), ["deny"], "{json}");
    assert_eq!(actions_of(&json, "pdb-missing"), ["deny"], "{json}");
    assert_eq!(code, 1, "{json}");
    let warnings = warnings_of(&json);
    assert!(warnings.iter().any(|w| w.contains(unknown) && w.contains("--complete")), "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w.starts_with("[pdb-missing] the labels of namespace shop are not known")
            && w.contains("judged at the strictest action one gives, deny, not the cluster-wide warn")),
        "{warnings:?}"
    );

    // The Namespace among the files: judged by its labels, nothing said about it.
    for (labels, complete, action) in [
        ("tier: prod", false, "deny"),
        ("tier: prod", true, "deny"),
        ("tier: dev", true, "warn"),
        ("tier: dev", false, "warn"),
    ] {
        let ns = namespace(labels);
        let extra: &[&str] = if complete { &["--complete"] } else { &[] };
        let (_, json) = check(extra, &[&deploy, &ns]);
        assert_eq!(actions_of(&json, "recreate-multi-replica"), [action], "{labels} complete {complete}: {json}");
        assert!(!warnings_of(&json).iter().any(|w| w.contains("namespace shop")), "{labels}: {json}");
    }

    // The text output names it too.
    let text = run(&["check", "--config", &config, &deploy]);
    assert!(text.stdout.contains(unknown) || text.stderr.contains(unknown), "{}\n{}", text.stdout, text.stderr);
}

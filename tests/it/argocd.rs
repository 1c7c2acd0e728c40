//! docs/gitops.md's Argo CD block (`ha-guard rules --argocd-ignore-differences`, generated from the
//! mutation registry) does what it says, run through jq as Argo CD runs it (each jq path
//! expression as `del(EXPR)`, in order, on both the live object and the desired one, for the
//! entries of the object's group and kind; Argo CD's gojq and jq agree on these expressions):
//!
//! - manifests as ha-guard's mutations leave them (`check --fix` with every mutation on: the
//!   patch the webhook returns) compare equal to the manifests once both are normalized;
//! - a manifest's own values for those fields (a spread selector of its own, its own
//!   `matchLabelKeys`, `IfHealthyBudget`, a hostname spread of its own) are not touched by the
//!   normalization: a change to them in git still shows.
//!
//! Whether a mutation has entries at all, for every kind it writes, is
//! `core::tests::registry::every_mutation_names_what_it_writes_for_argo_cd`.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");

/// A workload; `spreads` null: none (the key left out).
fn workload(kind: &str, name: &str, replicas: i64, labels: Value, spreads: Value) -> Value {
    let mut w = json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels},
                         "spec": {"topologySpreadConstraints": spreads,
                                  "containers": [{"name": "app", "image": "nginx:1.27"}]}}
        }
    });
    if w["spec"]["template"]["spec"]["topologySpreadConstraints"].is_null() {
        w["spec"]["template"]["spec"].as_object_mut().expect("pod spec").remove("topologySpreadConstraints");
    }
    w
}

fn pdb(name: &str, policy: Option<&str>) -> Value {
    let mut p = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}}});
    if let Some(policy) = policy {
        p["spec"]["unhealthyPodEvictionPolicy"] = json!(policy);
    }
    p
}

/// Manifests every mutation changes (`true`), and manifests that set the fields themselves.
fn manifests() -> Vec<(Value, bool)> {
    let zone = |selector: Option<Value>, keys: Option<Value>| {
        let mut s =
            json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"});
        if let Some(sel) = selector {
            s["labelSelector"] = sel;
        }
        if let Some(k) = keys {
            s["matchLabelKeys"] = k;
        }
        s
    };
    let own_labels = json!({"app": "own", "tier": "web"});
    let own_selector = json!({"matchLabels": {"app": "own", "tier": "web"}});
    vec![
        // A spread without a selector; no hostname spread: selector, default spread, matchLabelKeys.
        (workload("Deployment", "web", 3, json!({"app": "web"}), json!([zone(None, None)])), true),
        (workload("StatefulSet", "db", 3, json!({"app": "db"}), json!([zone(None, None)])), true),
        // No spreads at all: the default spread is the whole list.
        (workload("Deployment", "bare", 3, json!({"app": "bare"}), json!(null)), true),
        (pdb("web", None), true),
        // Their own selector, their own matchLabelKeys, their own hostname spread.
        (
            workload(
                "Deployment",
                "own",
                3,
                own_labels,
                json!([
                    zone(Some(own_selector.clone()), Some(json!(["version"]))),
                    {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                     "labelSelector": own_selector, "matchLabelKeys": ["version"]}
                ]),
            ),
            false,
        ),
        (pdb("own", Some("IfHealthyBudget")), false),
    ]
}

/// The block's entries: (group, kind, jq expressions).
fn entries(block: &str) -> Vec<(String, String, Vec<String>)> {
    let doc: Value = serde_saphyr::from_str(block).unwrap_or_else(|e| panic!("the block is YAML ({e}):\n{block}"));
    let list = doc["spec"]["ignoreDifferences"].as_array().expect("spec.ignoreDifferences");
    list.iter()
        .map(|e| {
            let jq = e["jqPathExpressions"].as_array().expect("jqPathExpressions");
            (
                e["group"].as_str().expect("group").to_string(),
                e["kind"].as_str().expect("kind").to_string(),
                jq.iter().map(|x| x.as_str().expect("a string").to_string()).collect(),
            )
        })
        .collect()
}

/// `object` with every expression of its group and kind deleted, in order, by jq.
fn normalized(object: &Value, entries: &[(String, String, Vec<String>)]) -> Value {
    let api = object["apiVersion"].as_str().expect("apiVersion");
    let group = api.split_once('/').map_or("", |(g, _)| g);
    let kind = object["kind"].as_str().expect("kind");
    let program: Vec<String> = entries
        .iter()
        .filter(|(g, k, _)| g == group && k == kind)
        .flat_map(|(_, _, jq)| jq.iter().map(|e| format!("del({e})")))
        .collect();
    assert!(!program.is_empty(), "no entry for {group}/{kind}");
    let mut child = Command::new("jq")
        .args(["-c", &program.join(" | ")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("jq on PATH (docs/contributing.md: what `cargo test` needs)");
    {
        use std::io::Write as _;
        child.stdin.take().expect("stdin").write_all(object.to_string().as_bytes()).expect("write");
    }
    let out = child.wait_with_output().expect("jq");
    assert!(out.status.success(), "jq {program:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("jq prints JSON")
}

fn run(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(BIN).args(args).current_dir(dir).output().expect("ha-guard runs")
}

#[test]
fn the_argocd_block_leaves_out_exactly_what_the_mutations_add() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["rules", "--argocd-ignore-differences"], dir.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let block = String::from_utf8(out.stdout).expect("UTF-8");
    let entries = entries(&block);

    let cases = manifests();
    let text: Vec<String> = cases.iter().map(|(m, _)| m.to_string()).collect();
    std::fs::write(dir.path().join("app.yaml"), text.join("\n---\n")).unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        "mutations: {inject-default-spread: true, inject-match-label-keys: true}\n",
    )
    .unwrap();
    let out = run(&["check", "app.yaml", "--fix", "--config", "config.yaml", "--quiet"], dir.path());
    assert!(matches!(out.status.code(), Some(0 | 1)), "check --fix: {}", String::from_utf8_lossy(&out.stderr));
    let fixed_text = std::fs::read_to_string(dir.path().join("app.yaml")).unwrap();
    let fixed: Vec<Value> = serde_saphyr::from_multiple::<Value>(&fixed_text)
        .unwrap_or_else(|e| panic!("check --fix wrote YAML ({e}):\n{fixed_text}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect();
    assert_eq!(fixed.len(), cases.len(), "{fixed_text}");

    for ((manifest, mutated), live) in cases.iter().zip(&fixed) {
        let name = format!("{} {}", manifest["kind"], manifest["metadata"]["name"]);
        assert_eq!(live != manifest, *mutated, "{name}: mutated as the case says:\n{live:#}");
        assert_eq!(
            normalized(live, &entries),
            normalized(manifest, &entries),
            "{name}: what the mutations added is not all left out:\n{live:#}"
        );
        if !mutated {
            assert_eq!(&normalized(manifest, &entries), manifest, "{name}: the manifest's own values are left out");
        }
    }
}

/// The `# <mutation> (...)` comment lines of a block, in order.
fn mutations_named(block: &str) -> Vec<&str> {
    block
        .lines()
        .filter_map(|l| l.strip_prefix("    # "))
        .filter_map(|l| l.split_once(" (").map(|(id, _)| id))
        .collect()
}

/// With `--config`, the block holds the entries of exactly the mutations that configuration turns
/// on, the same entries as the full block; in `mode: observe` (no patch at all) and with every
/// mutation off it is an empty list Argo CD accepts.
#[test]
fn the_argocd_block_for_a_configuration_holds_only_its_mutations() {
    let dir = tempfile::tempdir().unwrap();
    let text = |out: std::process::Output| {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let full = text(run(&["rules", "--argocd-ignore-differences"], dir.path()));
    std::fs::write(
        dir.path().join("team.yaml"),
        "mutations: {inject-spread-selector: false, inject-default-spread: true}\n",
    )
    .unwrap();
    let team = text(run(&["rules", "--argocd-ignore-differences", "--config", "team.yaml"], dir.path()));
    assert_eq!(mutations_named(&team), ["inject-unhealthy-pod-eviction-policy", "inject-default-spread"], "{team}");
    assert!(team.contains("# (ha-guard rules --argocd-ignore-differences --config team.yaml)"), "{team}");
    let all = entries(&full);
    let team_entries = entries(&team);
    assert_eq!(team_entries.len(), 3, "one PDB entry and the default spread's two kinds: {team}");
    assert!(team_entries.iter().all(|e| all.contains(e)), "the same entries as the full block:\n{team}");
    assert!(!team.contains("topologySpreadConstraints[]?.labelSelector | select"), "spread selector is off: {team}");

    std::fs::write(dir.path().join("observe.yaml"), "mode: observe\n").unwrap();
    let observe = text(run(&["rules", "--argocd-ignore-differences", "--config", "observe.yaml"], dir.path()));
    assert!(entries(&observe).is_empty() && observe.contains("mode: observe"), "{observe}");
    std::fs::write(
        dir.path().join("none.yaml"),
        "mutations: {inject-spread-selector: false, inject-unhealthy-pod-eviction-policy: false}\n",
    )
    .unwrap();
    let none = text(run(&["rules", "--argocd-ignore-differences", "--config", "none.yaml"], dir.path()));
    assert!(entries(&none).is_empty() && mutations_named(&none).is_empty(), "{none}");

    // The list says what the configuration makes of each rule and mutation.
    std::fs::write(
        dir.path().join("rules.yaml"),
        "rules: {recreate-multi-replica: deny}\nmutations: {inject-default-spread: true}\noverrides:\n  \
         - namespaceSelector: {matchLabels: {env: dev}}\n    rules: {pdb-blocks-eviction: warn}\n",
    )
    .unwrap();
    let list = text(run(&["rules", "--config", "rules.yaml"], dir.path()));
    let row = |id: &str| -> Vec<String> {
        let line = list.lines().find(|l| l.starts_with(&format!("{id} "))).unwrap_or_else(|| panic!("{id}: {list}"));
        line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_string).collect()
    };
    assert_eq!(row("recreate-multi-replica")[2], "deny", "{list}");
    assert_eq!(row("pdb-blocks-eviction")[2], "default +overrides", "{list}");
    assert_eq!(row("replicas-colocated")[2], "default", "{list}");
    assert_eq!(row("inject-default-spread")[1..3], ["off", "on"], "{list}");
    assert_eq!(row("inject-match-label-keys")[1..3], ["off", "off"], "{list}");
    let bad = run(&["rules", "--config", "missing.yaml"], dir.path());
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing.yaml"), "the error names the file");
}

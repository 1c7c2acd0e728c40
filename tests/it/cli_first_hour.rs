//! What a user meets in the first hour with `check`, `explain` and SARIF (issue 41), each with its
//! exact output: a chart folder with and without helm on PATH, a Helm render with hooks, paths that
//! find nothing, an ID with a typo, a configuration error, SARIF's size and rule links, and `--fix`
//! of stdin to stdout.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::cli::{Run, ha_guard};

/// The binary run in `dir` with `args`, `stdin` and PATH (the process's own unless given).
fn run(dir: &Path, args: &[&str], stdin: Option<&str>, path: Option<&str>) -> Run {
    let invocation = ha_guard(args).dir(dir).stdin(stdin).env("NO_COLOR", "1");
    match path {
        Some(path) => invocation.env("PATH", path).run(),
        None => invocation.run(),
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The folder of the pinned helm (`tests/e2e/helm/build.sh`, cached once built).
fn helm_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = Command::new(repo().join("tests/e2e/helm/build.sh")).stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let helm = PathBuf::from(String::from_utf8(out.stdout).unwrap().lines().last().unwrap().trim());
        helm.parent().unwrap().to_path_buf()
    })
}

/// A Deployment and its PDB that no rule reports on (examples/good-ha-web.yaml, trimmed).
const WEB: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
      containers: [{name: web, image: nginx}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop}
spec:
  maxUnavailable: 1
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector: {matchLabels: {app: web}}
";

/// A chart folder whose template is not YAML until rendered.
fn chart(dir: &Path) {
    write(dir, "chart/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n");
    write(dir, "chart/values.yaml", "maxUnavailable: 1\n");
    let template = WEB.replace("maxUnavailable: 1", "maxUnavailable: {{ .Values.maxUnavailable }}");
    write(dir, "chart/templates/web.yaml", &template);
}

#[test]
fn a_chart_folder_without_helm_is_skipped_with_one_note() {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path());
    write(dir.path(), "plain/web.yaml", WEB);
    let r = run(dir.path(), &["check", "."], None, Some("/nonexistent"));
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            0,
            "note: ./chart is a Helm chart and `helm` is not on PATH, so it was not checked: run \
             `helm template NAME ./chart | ha-guard check -f -` (or `ha-guard check --helm ./chart` with helm \
             installed)\n  --> ./chart\n\n0 deny, 0 warn, 0 allowed in 2 objects from 1 file; 1 not checked\n",
            ""
        )
    );
}

#[test]
fn a_chart_folder_is_rendered_with_the_helm_on_path() {
    let dir = tempfile::tempdir().unwrap();
    chart(dir.path());
    let path = format!("{}:{}", helm_dir().display(), std::env::var("PATH").unwrap_or_default());
    let r = run(dir.path(), &["check", "chart"], None, Some(&path));
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (0, "0 deny, 0 warn, 0 allowed in 2 objects from 1 file\n", "")
    );
    // What the render holds is judged: values whose budget allows no eviction are reported on
    // the template, in the chart's folder.
    write(dir.path(), "chart/values.yaml", "maxUnavailable: 0\n");
    let r = run(dir.path(), &["check", "chart", "--format", "json"], None, Some(&path));
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let found: Vec<(&str, &str)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["rule"].as_str().unwrap(), f["file"].as_str().unwrap()))
        .collect();
    assert_eq!(found, [("pdb-blocks-eviction", "chart/templates/web.yaml")], "{v}");
    assert_eq!(r.code, 1);
}

/// A Helm hook that copies one of the release's objects (as ha-guard's own chart does for its
/// pre-delete cleanup) is judged apart: no "also defined".
#[test]
fn a_hook_copy_of_an_object_is_no_duplicate() {
    let deployment = WEB.split("---\n").next().unwrap();
    let hook = deployment.replace(
        "metadata: {name: web, namespace: shop}",
        "metadata: {name: web, namespace: shop, annotations: {helm.sh/hook: pre-delete}}",
    );
    let stream =
        format!("---\n# Source: web/templates/web.yaml\n{WEB}---\n# Source: web/templates/cleanup.yaml\n{hook}");
    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path(), &["check", "-f", "-"], Some(&stream), None);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (0, "0 deny, 0 warn, 0 allowed in 3 objects from 1 file\n", "")
    );
    // Without the hook annotation the copy is a duplicate, and says so (documents from 1).
    let copy =
        format!("---\n# Source: web/templates/web.yaml\n{WEB}---\n# Source: web/templates/copy.yaml\n{deployment}");
    let r = run(dir.path(), &["check", "-f", "-"], Some(&copy), None);
    assert_eq!(
        r.stdout,
        "warning: Deployment shop/web is also defined in web/templates/web.yaml (document 1): the view keeps this \
         later one, and both are checked against it; to check two variants of an object (a base and its patch, two \
         overlays), check each separately (document 3 of -)\n  --> web/templates/copy.yaml:1\n\n\
         0 deny, 0 warn, 0 allowed in 3 objects from 1 file\n"
    );
    // ha-guard's own chart, rendered as its README says: its pre-delete hooks are no duplicates.
    let path = format!("{}:{}", helm_dir().display(), std::env::var("PATH").unwrap_or_default());
    let r = run(repo(), &["check", "charts/ha-guard"], None, Some(&path));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        !r.stdout.contains("also defined") && r.stdout.starts_with("0 deny, 0 warn, 0 allowed in "),
        "{}",
        r.stdout
    );
}

#[test]
fn paths_that_find_nothing_fail_and_say_which() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    write(dir.path(), "values.yaml", "replicas: 3\n");
    let r = run(dir.path(), &["check", "empty", "values.yaml"], None, None);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            2,
            "",
            "error: no Kubernetes object to check:\n  empty: a folder with no .yaml, .yml or .json file\n  \
             values.yaml: a file with no object\nfix the paths, or pass --allow-empty to accept finding nothing\n"
        )
    );
    let r = run(dir.path(), &["check", "empty", "--allow-empty"], None, None);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "0 deny, 0 warn, 0 allowed in 0 objects\n", ""));
    let r = run(dir.path(), &["check", "-f", "-"], Some("# nothing\n"), None);
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (
            2,
            "error: no Kubernetes object to check:\n  - (stdin): no object\nfix the paths, or pass --allow-empty to accept finding nothing\n"
        )
    );
}

/// Valid objects of kinds ha-guard does not judge are no input error (issue 51, item 5): the file
/// is named with its kinds and count, and the run passes; a file with no object still fails.
#[test]
fn a_file_of_kinds_ha_guard_does_not_judge_says_so_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "agent.yaml",
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, namespace: ops}\nspec:\n  selector: \
         {matchLabels: {app: agent}}\n  template:\n    metadata: {labels: {app: agent}}\n    spec:\n      \
         containers: [{name: agent, image: agent:1}]\n",
    );
    write(
        dir.path(),
        "settings.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n---\napiVersion: v1\nkind: \
         ConfigMap\nmetadata: {name: b}\n",
    );
    let judges = "Its rules read Deployments, StatefulSets, PodDisruptionBudgets, HorizontalPodAutoscalers, KEDA \
                  ScaledObjects, PersistentVolumeClaims, Services, Namespaces, Nodes and webhook configurations";
    let r = run(dir.path(), &["check", "agent.yaml"], None, None);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            0,
            format!(
                "note: 1 object of a kind ha-guard does not judge (DaemonSet): nothing here to check. {judges}\n  \
                 --> agent.yaml\n\n0 deny, 0 warn, 0 allowed in 0 objects from 1 file; 1 not checked\n"
            )
            .as_str(),
            ""
        )
    );
    let r = run(dir.path(), &["check", "settings.yaml"], None, None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{}", r.stdout);
    assert!(
        r.stdout.starts_with("note: 2 objects of a kind ha-guard does not judge (ConfigMap): nothing here to check."),
        "{}",
        r.stdout
    );
    // Both files, from stdin too: per file, every kind with its count.
    let r = run(dir.path(), &["check", "agent.yaml", "settings.yaml", "--format", "json"], None, None);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let json = r.json();
    let unchecked: Vec<(&str, &str)> = json["unchecked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["file"].as_str().unwrap(), u["message"].as_str().unwrap()))
        .collect();
    assert_eq!(unchecked.len(), 2, "{unchecked:?}");
    assert_eq!(unchecked[0].0, "agent.yaml");
    assert!(unchecked[1].1.starts_with("2 objects of a kind ha-guard does not judge (ConfigMap)"), "{unchecked:?}");
    let both = std::fs::read_to_string(dir.path().join("agent.yaml")).unwrap()
        + "---\n"
        + &std::fs::read_to_string(dir.path().join("settings.yaml")).unwrap();
    let r = run(dir.path(), &["check", "-f", "-"], Some(&both), None);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.starts_with("note: 3 objects of kinds ha-guard does not judge (ConfigMap 2, DaemonSet 1)"),
        "{}",
        r.stdout
    );
    // A YAML file with no Kubernetes object keeps its error.
    write(dir.path(), "values.yaml", "replicas: 3\nkind: of a value\n");
    let r = run(dir.path(), &["check", "values.yaml"], None, None);
    assert_eq!(r.code, 2, "{}", r.stdout);
    assert!(r.stderr.contains("values.yaml: a file with no object"), "{}", r.stderr);
}

#[test]
fn a_mistyped_path_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.yaml", WEB);
    let r = run(dir.path(), &["check", "web.yaml", "wbe.yaml"], None, None);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            2,
            "0 deny, 0 warn, 0 allowed in 2 objects from 1 file; 1 error (on stderr)\n",
            "error: wbe.yaml: no such file or folder\n"
        )
    );
}

#[test]
fn explain_with_a_typo_suggests_the_id() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path(), &["explain", "pdb-block-eviction"], None, None);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            2,
            "",
            "error: \"pdb-block-eviction\" is no rule or mutation ID: did you mean pdb-blocks-eviction? (`ha-guard rules` lists them)\n"
        )
    );
}

/// The start of an ID suggests the ID it starts, not the nearest by edit distance (issue 51).
#[test]
fn explain_with_the_start_of_an_id_suggests_the_id() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path(), &["explain", "pdb-blocks"], None, None);
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (
            2,
            "error: \"pdb-blocks\" is no rule or mutation ID: did you mean pdb-blocks-eviction? (`ha-guard rules` lists them)\n"
        )
    );
}

#[test]
fn a_configuration_error_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.yaml", WEB);
    write(dir.path(), "ha-guard.yaml", "rules: [\n");
    let r = run(dir.path(), &["check", "web.yaml", "--config", "ha-guard.yaml"], None, None);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            2,
            "",
            "error: ha-guard.yaml: line 1 column 8: expected mapping start\n --> ha-guard.yaml:1:8\n  |\n1 | rules: [\n  |        ^ expected mapping start\n"
        )
    );
}

/// A mistyped ID in the configuration gets the nearest one, as on the command line.
#[test]
fn a_configuration_with_a_mistyped_id_suggests_the_nearest() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.yaml", WEB);
    write(dir.path(), "ha-guard.yaml", "rules:\n  replica-colocated: warn\n");
    let r = run(dir.path(), &["check", "web.yaml", "--config", "ha-guard.yaml"], None, None);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            2,
            "",
            "error: ha-guard.yaml: rules.replica-colocated: unknown rule ID: did you mean replicas-colocated? \
             (`ha-guard rules` lists them)\n"
        )
    );
}

/// One input file's SARIF stays small: each rule links its page (helpUri) and says in one line
/// what it is, rather than embedding the page.
#[test]
fn sarif_links_each_rule_page_and_stays_small() {
    let r = run(repo(), &["check", "examples/good-ha-web.yaml", "--format", "sarif"], None, None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.len() < 30_000, "{} bytes", r.stdout.len());
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let driver = &v["runs"][0]["tool"]["driver"];
    assert_eq!(driver["informationUri"], "https://github.com/ha-guard/ha-guard");
    let rules = driver["rules"].as_array().unwrap();
    assert!(rules.len() >= 20, "{}", rules.len());
    for rule in rules {
        let id = rule["id"].as_str().unwrap();
        let uri = format!("https://github.com/ha-guard/ha-guard/blob/main/docs/rules/{id}.md");
        assert_eq!(rule["helpUri"], uri.as_str());
        assert!(repo().join(format!("docs/rules/{id}.md")).is_file(), "{id}: the page helpUri names exists");
        let summary = rule["shortDescription"]["text"].as_str().unwrap();
        assert_eq!(rule["help"], serde_json::json!({"text": format!("{summary}: `ha-guard explain {id}`")}));
    }
}

/// `--fix --output -` on stdin: the fixed manifests on stdout, the report (on them) on stderr.
#[test]
fn fix_writes_stdin_fixed_to_stdout() {
    let input = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
      containers: [{name: api, image: nginx}]
";
    let dir = tempfile::tempdir().unwrap();
    let r =
        run(dir.path(), &["check", "-f", "-", "--fix", "--output", "-", "--disable", "pdb-missing"], Some(input), None);
    assert_eq!(
        r.stdout,
        input.replace(
            "        - maxSkew: 1\n",
            "        - labelSelector:\n            matchLabels:\n              app: api\n          maxSkew: 1\n"
        )
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, "0 deny, 0 warn, 0 allowed in 1 object from 1 file\n"));
    // Without `--output -`, stdin is refused, and the error says how.
    let r = run(dir.path(), &["check", "-f", "-", "--fix"], Some(input), None);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (2, "", "error: -: stdin cannot be fixed in place: add `--output -` to write the fixed manifests to stdout\n")
    );
}

/// Every text header names the document the same way, counted from 1 and at the end of the header
/// line (findings, fixes); the `-->` line is a bare `file:line:col`; load errors name the file and
/// the document together, as the only place they have.
#[test]
fn document_numbers_sit_in_one_place_and_count_from_one() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n---\n\
        apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: shop}\n\
        spec: {maxUnavailable: 1, selector: {matchLabels: {app: web}}}\n---\nkind: [broken\n";
    write(dir.path(), "two.yaml", manifest);
    let r = run(dir.path(), &["check", "two.yaml"], None, None);
    assert_eq!(r.code, 2, "the broken third document is an error: {}\n{}", r.stdout, r.stderr);
    let fix = "fix[inject-unhealthy-pod-eviction-policy]: PodDisruptionBudget shop/web (document 2) would get \
               spec.unhealthyPodEvictionPolicy = \"AlwaysAllow\"\n  --> two.yaml:8:1\n";
    assert!(r.stdout.contains(fix), "{}", r.stdout);
    assert!(!r.stdout.contains("--> two.yaml:8:1 ("), "the location line is bare: {}", r.stdout);
    assert!(r.stderr.starts_with("error: two.yaml (document 3): not valid YAML"), "{}", r.stderr);
    // The first document of a file needs no number.
    write(dir.path(), "one.yaml", manifest.split("---\n").nth(1).unwrap());
    let r = run(dir.path(), &["check", "one.yaml"], None, None);
    assert!(r.stdout.contains("PodDisruptionBudget shop/web would get"), "{}", r.stdout);
    assert!(!r.stdout.contains("(document"), "{}", r.stdout);
}

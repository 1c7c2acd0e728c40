//! `ha-guard check` where CI runs it: the exit policy (`--fail-on`), rule selection (`--disable`,
//! `--enable`), `--quiet`, `--output`, positional paths, `helm template` streams (`# Source:`)
//! in every format, `--helm` / `--kustomize`, diagnostics in JSON and SARIF, JUnit, errors printed
//! once with the file and the field, colour only when asked or on a terminal, `.gitignore`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::cli::{Run, ha_guard};

fn run_with(dir: &Path, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
    ha_guard(args).dir(dir).stdin(stdin).envs(env).run()
}

fn run(dir: &Path, args: &[&str]) -> Run {
    run_with(dir, args, None, &[])
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

fn json(r: &Run) -> Value {
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", r.stdout, r.stderr))
}

fn rules(v: &Value) -> Vec<String> {
    v["findings"].as_array().unwrap().iter().map(|f| f["rule"].as_str().unwrap().to_string()).collect()
}

/// Only warnings: `recreate-multi-replica` (Recreate with 3 replicas) and `replicas-colocated`.
const WARN_ONLY: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: batch}
spec:
  replicas: 3
  strategy: {type: Recreate}
  selector: {matchLabels: {app: batch}}
  template:
    metadata: {labels: {app: batch}}
    spec:
      containers: [{name: c, image: i}]
";

/// A deny (`prestop-exceeds-grace`).
const DENY: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: slow}
spec:
  selector: {matchLabels: {app: slow}}
  template:
    metadata: {labels: {app: slow}}
    spec:
      containers:
      - name: c
        image: i
        lifecycle: {preStop: {sleep: {seconds: 40}}}
";

/// What `helm template` writes: a `# Source:` comment before each document.
const HELM_STREAM: &str = "\
---
# Source: shop/templates/pdb.yaml
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: db
spec:
  minAvailable: 1
  selector:
    matchLabels: {app: db}
---
# Source: shop/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: db
spec:
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: i}]
---
# Source: shop/templates/old-pdb.yaml
apiVersion: policy/v1beta1
kind: PodDisruptionBudget
metadata: {name: old}
spec: {minAvailable: 1}
";

#[test]
fn fail_on_decides_which_findings_fail_the_run() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "warn.yaml", WARN_ONLY);
    write(dir.path(), "deny.yaml", DENY);
    assert_eq!(run(dir.path(), &["check", "warn.yaml"]).code, 0, "warnings pass by default (--fail-on deny)");
    assert_eq!(run(dir.path(), &["check", "warn.yaml", "--fail-on", "warn"]).code, 1);
    assert_eq!(run(dir.path(), &["check", "deny.yaml", "--fail-on", "warn"]).code, 1);
    assert_eq!(run(dir.path(), &["check", "deny.yaml"]).code, 1);
    assert_eq!(run(dir.path(), &["check", "deny.yaml", "--fail-on", "never"]).code, 0);
    let bad = write(dir.path(), "bad.yaml", "a: [1\n");
    assert_eq!(
        run(dir.path(), &["check", bad.to_str().unwrap(), "--fail-on", "never"]).code,
        2,
        "unusable input is 2 whatever the policy"
    );
    let r = run(dir.path(), &["check", "warn.yaml", "--fail-on", "sometimes"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--fail-on") && r.stderr.contains("deny, warn, never"), "{}", r.stderr);
}

#[test]
fn disable_and_enable_mean_what_the_configuration_means() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "warn.yaml", WARN_ONLY);
    let all = rules(&json(&run(dir.path(), &["check", "warn.yaml", "--format", "json"])));
    assert!(
        all.contains(&"recreate-multi-replica".to_string()) && all.contains(&"replicas-colocated".to_string()),
        "{all:?}"
    );
    let r = run(
        dir.path(),
        &["check", "warn.yaml", "--format", "json", "--disable", "recreate-multi-replica,replicas-colocated"],
    );
    let left = rules(&json(&r));
    assert!(
        !left.contains(&"recreate-multi-replica".to_string()) && !left.contains(&"replicas-colocated".to_string()),
        "{left:?}"
    );
    // --enable turns back on what the configuration turned off.
    let config = write(dir.path(), "config.yaml", "rules:\n  recreate-multi-replica: off\n");
    let off = rules(&json(&run(
        dir.path(),
        &["check", "warn.yaml", "--format", "json", "--config", config.to_str().unwrap()],
    )));
    assert!(!off.contains(&"recreate-multi-replica".to_string()), "{off:?}");
    let on = run(
        dir.path(),
        &[
            "check",
            "warn.yaml",
            "--format",
            "json",
            "--config",
            config.to_str().unwrap(),
            "--enable",
            "recreate-multi-replica",
        ],
    );
    assert!(rules(&json(&on)).contains(&"recreate-multi-replica".to_string()));
    // A mutation can be switched too: inject-default-spread plans a spread.
    let r = run(dir.path(), &["check", "warn.yaml", "--format", "json", "--enable", "inject-default-spread"]);
    assert!(json(&r)["mutations"].as_array().unwrap().iter().any(|m| m["mutation"] == "inject-default-spread"));
    // A typo is an error that suggests the ID.
    let r = run(dir.path(), &["check", "warn.yaml", "--disable", "replica-colocated"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("\"replica-colocated\" is no rule or mutation ID: did you mean replicas-colocated?"),
        "{}",
        r.stderr
    );
    let r = run(dir.path(), &["check", "warn.yaml", "--disable", "pdb-missing", "--enable", "pdb-missing"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("pdb-missing is both"), "{}", r.stderr);
}

#[test]
fn quiet_prints_the_findings_alone_and_output_writes_a_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "deny.yaml", DENY);
    let full = run(dir.path(), &["check", "deny.yaml"]);
    assert!(
        full.stdout.contains("deny[prestop-exceeds-grace]")
            && full.stdout.contains(" deny (prestop-exceeds-grace 1), "),
        "{}",
        full.stdout
    );
    let quiet = run(dir.path(), &["check", "deny.yaml", "--quiet"]);
    assert_eq!(quiet.code, 1);
    assert!(quiet.stdout.contains("deny[prestop-exceeds-grace]"), "{}", quiet.stdout);
    assert!(
        !quiet.stdout.contains(" deny (") && !quiet.stdout.contains("fix["),
        "no summary, no fixes: {}",
        quiet.stdout
    );
    let r = run(dir.path(), &["check", "deny.yaml", "--format", "json", "--output", "report.json"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(written["summary"]["deny"], 1);
    let r = run(dir.path(), &["check", "deny.yaml", "--output", "no/such/dir/report.txt"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--output no/such/dir/report.txt"), "{}", r.stderr);
}

#[test]
fn paths_are_positional_or_given_with_f() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a/deny.yaml", DENY);
    write(dir.path(), "b/warn.yaml", WARN_ONLY);
    let v = json(&run(dir.path(), &["check", "a", "-f", "b", "--format", "json"]));
    let files: Vec<&str> = v["findings"].as_array().unwrap().iter().map(|f| f["file"].as_str().unwrap()).collect();
    assert!(files.contains(&"a/deny.yaml") && files.contains(&"b/warn.yaml"), "{files:?}");
    let r = run(dir.path(), &["check"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("nothing to check"), "{}", r.stderr);
}

#[test]
fn helm_template_streams_name_their_templates_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_with(dir.path(), &["check", "-f", "-", "--format", "json"], Some(HELM_STREAM), &[]);
    assert_eq!(r.code, 1);
    let v = json(&r);
    let f = &v["findings"][0];
    assert_eq!(
        (f["rule"].as_str(), f["file"].as_str()),
        (Some("pdb-blocks-eviction"), Some("shop/templates/pdb.yaml"))
    );
    assert_eq!(f["line"], 6, "the line within the rendered template");
    assert_eq!(f["stream"], "-");
    // The skipped v1beta1 PDB is a diagnostic with its template.
    let diags = v["diagnostics"].as_array().unwrap();
    let skipped =
        diags.iter().find(|d| d["message"].as_str().unwrap().contains("policy/v1beta1")).expect("the skipped PDB");
    assert_eq!(
        (skipped["level"].as_str(), skipped["file"].as_str()),
        (Some("note"), Some("shop/templates/old-pdb.yaml"))
    );
    // Text.
    let r = run_with(dir.path(), &["check", "-f", "-"], Some(HELM_STREAM), &[]);
    assert!(r.stdout.contains("--> shop/templates/pdb.yaml:6:3"), "{}", r.stdout);
    // SARIF: the template as the artifact, valid against the schema, the note as a notification.
    let r = run_with(dir.path(), &["check", "-f", "-", "--format", "sarif"], Some(HELM_STREAM), &[]);
    let log: Value = serde_json::from_str(&r.stdout).unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sarif-2.1.0.schema.json"))
            .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::draft4::options().build(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&log).map(|e| format!("{e} at {}", e.instance_path)).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let location = &log["runs"][0]["results"][0]["locations"][0]["physicalLocation"];
    assert_eq!(location["artifactLocation"]["uri"], "shop/templates/pdb.yaml");
    assert_eq!(location["region"]["startLine"], 6);
    let notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"].as_array().unwrap();
    assert!(notes.iter().any(|n| n["level"] == "note"
        && n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "shop/templates/old-pdb.yaml"));
    assert_eq!(log["runs"][0]["invocations"][0]["executionSuccessful"], true, "notes are no failure");
}

#[test]
fn every_diagnostic_reaches_json_and_sarif() {
    let dir = tempfile::tempdir().unwrap();
    let twice = format!("{DENY}---\n{DENY}");
    write(dir.path(), "twice.yaml", &twice);
    let empty_reason = WARN_ONLY.replace(
        "metadata: {name: batch}",
        "metadata:\n  name: batch\n  annotations: {ha-guard.io/allow-recreate-multi-replica: \"\"}",
    );
    write(dir.path(), "reason.yaml", &empty_reason);
    write(dir.path(), "broken.yaml", "a: [1\n");
    let v = json(&run(dir.path(), &["check", ".", "--format", "json"]));
    let diags = v["diagnostics"].as_array().unwrap();
    let has = |level: &str, text: &str| {
        diags.iter().any(|d| d["level"] == level && d["message"].as_str().unwrap().contains(text))
    };
    assert!(has("warning", "is also defined in"), "the duplicate: {diags:?}");
    assert!(has("warning", "has an empty reason"), "the empty exemption reason: {diags:?}");
    assert!(has("error", "not valid YAML"), "the broken file: {diags:?}");
    let log: Value = serde_json::from_str(&run(dir.path(), &["check", ".", "--format", "sarif"]).stdout).unwrap();
    let notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"].as_array().unwrap();
    for (level, text) in
        [("warning", "is also defined in"), ("warning", "has an empty reason"), ("error", "not valid YAML")]
    {
        assert!(
            notes.iter().any(|n| n["level"] == level && n["message"]["text"].as_str().unwrap().contains(text)),
            "{level} {text}: {notes:?}"
        );
    }
    assert_eq!(log["runs"][0]["invocations"][0]["executionSuccessful"], false, "an error is a failed execution");
}

#[test]
fn junit_reports_a_case_per_object_and_finding_and_follows_fail_on() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "deny.yaml", DENY);
    write(dir.path(), "warn.yaml", WARN_ONLY);
    let good =
        DENY.replace("seconds: 40", "seconds: 5").replace("name: slow", "name: fine").replace("app: slow", "app: fine");
    write(dir.path(), "good.yaml", &good);
    let parse = |xml: &str| -> Vec<(String, String, String)> {
        let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("not XML ({e}): {xml}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "testsuites");
        let cases: Vec<_> = root.descendants().filter(|n| n.has_tag_name("testcase")).collect();
        assert_eq!(root.attribute("tests"), Some(cases.len().to_string().as_str()), "the count is the cases");
        cases
            .iter()
            .map(|c| {
                let outcome = c
                    .children()
                    .find(|n| n.is_element())
                    .map_or("pass".to_string(), |n| n.tag_name().name().to_string());
                (c.attribute("classname").unwrap().to_string(), c.attribute("name").unwrap().to_string(), outcome)
            })
            .collect()
    };
    let r = run(dir.path(), &["check", ".", "--format", "junit"]);
    assert_eq!(r.code, 1);
    let cases = parse(&r.stdout);
    assert!(
        cases.contains(&(
            "./deny.yaml".into(),
            "Deployment default/slow [prestop-exceeds-grace]".into(),
            "failure".into()
        )),
        "{cases:?}"
    );
    assert!(
        cases.contains(&(
            "./warn.yaml".into(),
            "Deployment default/batch [recreate-multi-replica]".into(),
            "system-out".into()
        )),
        "warnings pass by default: {cases:?}"
    );
    assert!(cases.contains(&("./good.yaml".into(), "Deployment default/fine".into(), "pass".into())), "{cases:?}");
    let r = run(dir.path(), &["check", ".", "--format", "junit", "--fail-on", "warn"]);
    let cases = parse(&r.stdout);
    assert!(
        cases.contains(&(
            "./warn.yaml".into(),
            "Deployment default/batch [recreate-multi-replica]".into(),
            "failure".into()
        )),
        "{cases:?}"
    );
}

#[test]
fn errors_are_printed_once_and_say_where_and_what() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "template.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Values.name }}\n",
    );
    write(
        dir.path(),
        "typed.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: \"3\", selector: {}, template: {spec: {containers: []}}}\n",
    );
    let r = run(dir.path(), &["check", "template.yaml", "typed.yaml"]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stderr.matches("error: template.yaml").count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains(" --> template.yaml:4:"), "names the file, not <input>: {}", r.stderr);
    assert!(!r.stderr.contains("<input>"), "{}", r.stderr);
    assert!(r.stderr.contains("render it first: helm template"), "{}", r.stderr);
    // The parser's snippet keeps its lines.
    assert!(r.stderr.lines().any(|l| l.trim_start().starts_with("4 |")), "{}", r.stderr);
    assert!(r.stderr.contains("typed.yaml (document 1): Deployment does not decode: spec.replicas: expected an integer, got the string \"3\""), "{}", r.stderr);
    assert!(!r.stdout.contains("error:"), "the report does not repeat them: {}", r.stdout);
}

#[test]
fn colour_only_on_request_or_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "deny.yaml", DENY);
    let piped = run(dir.path(), &["check", "deny.yaml"]);
    assert!(!piped.stdout.contains('\u{1b}'), "no ANSI in a pipe");
    let forced = run(dir.path(), &["check", "deny.yaml", "--color", "always"]);
    assert!(forced.stdout.contains("\u{1b}["), "ANSI when asked");
    assert!(forced.stdout.contains("prestop-exceeds-grace"));
}

#[test]
fn gitignored_files_are_left_out_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        assert!(Command::new("git").args(args).current_dir(dir.path()).output().unwrap().status.success())
    };
    git(&["init", "-q"]);
    write(dir.path(), ".gitignore", "rendered/\n");
    write(dir.path(), "rendered/deny.yaml", DENY);
    write(dir.path(), "src/warn.yaml", WARN_ONLY);
    let v = json(&run(dir.path(), &["check", ".", "--format", "json"]));
    assert!(!rules(&v).contains(&"prestop-exceeds-grace".to_string()), "the ignored folder is not read");
    let v = json(&run(dir.path(), &["check", ".", "--format", "json", "--no-ignore"]));
    assert!(rules(&v).contains(&"prestop-exceeds-grace".to_string()), "--no-ignore reads it");
    // Named on the command line, an ignored file is read.
    let v = json(&run(dir.path(), &["check", "rendered/deny.yaml", "--format", "json"]));
    assert!(rules(&v).contains(&"prestop-exceeds-grace".to_string()));
}

#[cfg(unix)]
#[test]
fn a_symlink_loop_and_a_file_reached_twice_are_read_once() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "m/deny.yaml", DENY);
    std::os::unix::fs::symlink(dir.path().join("m"), dir.path().join("m/loop")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("m/deny.yaml"), dir.path().join("m/again.yaml")).unwrap();
    let v = json(&run(dir.path(), &["check", "m", "--format", "json"]));
    assert_eq!(
        v["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == "prestop-exceeds-grace").count(),
        1,
        "{v}"
    );
    assert!(
        v["diagnostics"].as_array().unwrap().iter().all(|d| !d["message"].as_str().unwrap().contains("also defined")),
        "{v}"
    );
}

/// `--helm` and `--kustomize` call the user's renderer: without one on PATH, a clear error.
#[test]
fn helm_and_kustomize_need_their_renderer() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_with(dir.path(), &["check", "--helm", "chart"], None, &[("PATH", "/nonexistent")]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("`helm` is not on PATH")
            && r.stderr.contains("helm template RELEASE CHART | ha-guard check -f -"),
        "{}",
        r.stderr
    );
    let r = run_with(dir.path(), &["check", "--kustomize", "k"], None, &[("PATH", "/nonexistent")]);
    assert!(r.stderr.contains("`kubectl` is not on PATH"), "{}", r.stderr);
}

/// With the pinned helm built for the tests: `--helm` renders ha-guard's own chart and names its
/// templates by their paths in the repository.
#[test]
fn helm_renders_a_local_chart_and_names_its_templates() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let build = Command::new(repo.join("tests/e2e/helm/build.sh")).output().expect("helm build script");
    assert!(build.status.success(), "{}", String::from_utf8_lossy(&build.stderr));
    let helm = PathBuf::from(String::from_utf8(build.stdout).unwrap().lines().last().unwrap().trim());
    let path = format!("{}:{}", helm.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let dir = tempfile::tempdir().unwrap();
    let values = write(dir.path(), "values.yaml", "podDisruptionBudget:\n  enabled: false\n");
    let r = run_with(
        repo,
        &["check", "--helm", "charts/ha-guard", "--values", values.to_str().unwrap(), "--complete", "--format", "json"],
        None,
        &[("PATH", &path)],
    );
    let v = json(&r);
    let missing =
        v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "pdb-missing").unwrap_or_else(|| panic!("{v}"));
    assert_eq!(missing["file"], "charts/ha-guard/templates/deployment.yaml", "{missing}");
    assert_eq!(r.code, 0, "pdb-missing is a warning: {}", r.stderr);
}

/// `check --help` stands on its own: it points at nothing outside the repository.
#[test]
fn check_help_points_at_nothing_outside_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path(), &["check", "--help"]);
    assert_eq!(r.code, 0);
    for outside in ["DESIGN.md", "../shared", "shared/"] {
        assert!(!r.stdout.contains(outside), "{outside} in:\n{}", r.stdout);
    }
    for flag in
        ["--fail-on", "--disable", "--enable", "--quiet", "--output", "--helm", "--kustomize", "--no-ignore", "junit"]
    {
        assert!(r.stdout.contains(flag), "{flag} is documented:\n{}", r.stdout);
    }
}

//! `ha-guard check`, `rules` and `explain`, driven through the real binary on temporary files:
//! exit codes, inputs (files, directories, stdin, multi-document YAML, JSON, Lists), flags, `--fix`,
//! the JSON contract of DESIGN.md §5 and SARIF 2.1.0 validated against the OASIS schema.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::cli::{Run, ha_guard};

fn run_in(dir: Option<&Path>, args: &[&str], stdin: Option<&str>) -> Run {
    let invocation = ha_guard(args).stdin(stdin);
    match dir {
        Some(dir) => invocation.dir(dir).run(),
        None => invocation.run(),
    }
}

fn run(args: &[&str]) -> Run {
    run_in(None, args, None)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn findings(v: &Value) -> &Vec<Value> {
    v["findings"].as_array().expect("findings is a list")
}

fn rules_of(v: &Value) -> Vec<String> {
    findings(v).iter().map(|f| f["rule"].as_str().unwrap().to_string()).collect()
}

fn of_rule<'a>(v: &'a Value, rule: &str) -> Vec<&'a Value> {
    findings(v).iter().filter(|f| f["rule"] == rule).collect()
}

// ---- manifests -------------------------------------------------------------------------------

/// Two replicas kept apart by a hostname spread; nothing to report without `--complete`.
const CLEAN: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
          labelSelector:
            matchLabels: {app: web}
      containers:
        - {name: web, image: nginx}
";

/// Warnings only: Recreate on a multi-replica Deployment (recreate-multi-replica, warn).
const WARN_ONLY: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: batch
spec:
  replicas: 2
  strategy:
    type: Recreate
  selector:
    matchLabels: {app: batch}
  template:
    metadata:
      labels: {app: batch}
    spec:
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 1
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels: {app: batch}
      containers:
        - {name: batch, image: batch}
";

/// One replica under `minAvailable: 1` (pdb-blocks-eviction, deny), `minAvailable` on line 22.
const BLOCKING: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: billing
spec:
  replicas: 1
  selector:
    matchLabels: {app: billing}
  template:
    metadata:
      labels: {app: billing}
    spec:
      containers:
        - {name: billing, image: billing}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: billing
spec:
  unhealthyPodEvictionPolicy: AlwaysAllow
  minAvailable: 1
  selector:
    matchLabels: {app: billing}
";

// ---- exit codes ------------------------------------------------------------------------------

#[test]
fn exit_0_when_clean() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "clean.yaml", CLEAN);
    let r = run(&["check", "-f", s(&f)]);
    assert_eq!(r.code, 0, "{}", r.all());
    assert_eq!(r.stdout, "0 deny, 0 warn, 0 allowed in 1 object from 1 file\n");
    assert_eq!(r.stderr, "");
}

#[test]
fn exit_0_with_warnings_only() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "warn.yaml", WARN_ONLY);
    let r = run(&["check", "-f", s(&f)]);
    assert_eq!(r.code, 0, "{}", r.all());
    assert!(
        r.stdout.contains("warn[recreate-multi-replica]: Deployment default/batch at spec.strategy.type"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with("0 deny, 1 warn (recreate-multi-replica 1), 0 allowed in 1 object from 1 file\n"),
        "{}",
        r.stdout
    );
}

#[test]
fn exit_1_with_a_deny_finding() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "pdb.yaml", BLOCKING);
    let r = run(&["check", "-f", s(&f)]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(
        r.stdout.contains("deny[pdb-blocks-eviction]: PodDisruptionBudget default/billing at spec.minAvailable"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with("1 deny (pdb-blocks-eviction 1), 0 warn, 0 allowed in 2 objects from 1 file\n"),
        "{}",
        r.stdout
    );
}

#[test]
fn exit_2_on_bad_yaml_naming_file_and_document() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "broken.yaml", &format!("{CLEAN}---\nkind: Deployment\nspec: [1, 2\n"));
    let r = run(&["check", "-f", s(&f)]);
    assert_eq!(r.code, 2, "{}", r.all());
    let line = r.all().lines().find(|l| l.starts_with("error:")).map(str::to_string).expect("an error line");
    assert!(line.contains(&format!("{} (document 2): not valid YAML", s(&f))), "{line}");
    // The JSON format reports it too, on stderr and in `errors`.
    let r = run(&["check", "-f", s(&f), "--format", "json"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("(document 2): not valid YAML"), "{}", r.stderr);
    let errors = r.json()["errors"].clone();
    assert_eq!(errors[0]["file"], s(&f));
    assert_eq!(errors[0]["document"], 1, "the JSON's index counts from 0; messages from 1");
}

#[test]
fn exit_2_when_a_known_kind_does_not_decode() {
    let dir = tempfile::tempdir().unwrap();
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: three}\nspec: {replicas: \"three\"}\n";
    let f = write(dir.path(), "undecodable.yaml", text);
    let r = run(&["check", "-f", s(&f)]);
    assert_eq!(r.code, 2, "{}", r.all());
    let line = r.stderr.lines().find(|l| l.starts_with("error:")).expect("an error line on stderr");
    assert_eq!(
        line,
        format!(
            "error: {} (document 2): Deployment does not decode: spec.replicas: expected an integer, got the string \"three\"",
            s(&f)
        ),
        "names the file, the document, the field and what is wrong"
    );
    assert_eq!(r.stderr.matches("error:").count(), 1, "printed once: {}", r.stderr);
    assert!(!r.stdout.contains("error:"), "not in the report too: {}", r.stdout);
}

#[test]
fn exit_2_on_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.yaml");
    let r = run(&["check", "-f", s(&missing)]);
    assert_eq!(r.code, 2, "{}", r.all());
    assert!(r.all().contains(&format!("error: {}:", s(&missing))), "{}", r.all());
}

#[test]
fn exit_2_on_a_bad_config_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "clean.yaml", CLEAN);
    for (config, key) in [
        ("rules:\n  no-such-rule: deny\n", "no-such-rule"),
        ("rules:\n  pdb-overlap: sometimes\n", "pdb-overlap"),
        ("mutations:\n  inject-nothing: true\n", "inject-nothing"),
        ("colour: blue\n", "colour"),
    ] {
        let c = write(dir.path(), "config.yaml", config);
        let r = run(&["check", "-f", s(&f), "--config", s(&c)]);
        assert_eq!(r.code, 2, "{config}: {}", r.all());
        assert!(r.stderr.contains(key), "{config}: the error names {key}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "nothing is checked with a bad config: {}", r.stdout);
    }
}

#[test]
fn exit_2_on_an_unknown_flag() {
    let r = run(&["check", "-f", "x.yaml", "--no-such-flag"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--no-such-flag"), "{}", r.stderr);
    let r = run(&["check", "-f", "x.yaml", "--format", "xml"]);
    assert_eq!(r.code, 2, "an unknown format is a usage error");
    let r = run(&["check"]);
    assert_eq!(r.code, 2, "-f is required");
}

// ---- inputs ----------------------------------------------------------------------------------

#[test]
fn directories_are_walked_recursively_for_yaml_yml_and_json() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a/pdb.yaml", BLOCKING);
    write(dir.path(), "a/b/warn.yml", WARN_ONLY);
    write(
        dir.path(),
        "a/b/c/hpa.json",
        r#"{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "batch"},
                     "minReplicas": 0, "maxReplicas": 3}}"#,
    );
    // Not manifests: never read (they would be errors if they were).
    write(dir.path(), "a/notes.txt", "kind: Deployment\nspec: [unclosed\n");
    write(dir.path(), "a/b/README.md", "# not: [yaml\n");
    write(dir.path(), "a/b/values.yaml.bak", "{{ .Values }}: [\n");
    let r = run(&["check", "-f", s(&dir.path().join("a")), "--format", "json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    let v = r.json();
    assert_eq!(v["errors"], serde_json::json!([]));
    let mut files: Vec<String> = findings(&v).iter().map(|f| f["file"].as_str().unwrap().to_string()).collect();
    files.dedup();
    let root = s(&dir.path().join("a")).to_string();
    assert_eq!(
        files,
        [format!("{root}/b/c/hpa.json"), format!("{root}/b/warn.yml"), format!("{root}/pdb.yaml")],
        "every manifest, in path order"
    );
    let mut rules = rules_of(&v);
    rules.sort();
    // The HPA targets batch, whose manifest sets replicas: reported once, on batch.
    assert_eq!(rules, ["hpa-replica-bounds", "hpa-replicas-conflict", "pdb-blocks-eviction", "recreate-multi-replica"]);
    let text = run(&["check", "-f", s(&dir.path().join("a"))]).stdout;
    assert!(text.ends_with("in 4 objects from 3 files\n"), "{text}");
}

#[test]
fn stdin_is_read_for_dash() {
    let r = run_in(None, &["check", "-f", "-", "--format", "json"], Some(BLOCKING));
    assert_eq!(r.code, 1, "{}", r.all());
    let v = r.json();
    let f = &of_rule(&v, "pdb-blocks-eviction")[0];
    assert_eq!(f["file"], "-");
    assert_eq!(f["document"], 1);
    assert_eq!(f["line"], 22);
    // JSON on stdin.
    let json = r#"{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"},
                   "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}},
                            "unhealthyPodEvictionPolicy": "IfHealthyBudget"}}"#;
    let r = run_in(None, &["check", "-f", "-", "--format", "json"], Some(json));
    assert_eq!(r.code, 0, "{}", r.all());
    assert_eq!(rules_of(&r.json()), ["pdb-unhealthy-eviction-policy"]);
    // Stdin together with a file.
    let dir = tempfile::tempdir().unwrap();
    let w = write(dir.path(), "warn.yaml", WARN_ONLY);
    let r = run_in(None, &["check", "-f", "-", s(&w)], Some(BLOCKING));
    assert_eq!(r.code, 1);
    assert!(
        r.stdout.ends_with(
            "1 deny (pdb-blocks-eviction 1), 1 warn (recreate-multi-replica 1), 0 allowed in 3 objects from 2 files\n"
        ),
        "{}",
        r.stdout
    );
}

#[test]
fn multi_document_yaml_keeps_document_indexes_and_lines() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("# leading comment\n---\n{WARN_ONLY}---\n---\n# an empty document above\n{BLOCKING}");
    let f = write(dir.path(), "multi.yaml", &text);
    let r = run(&["check", "-f", s(&f), "--format", "json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    let v = r.json();
    let recreate = &of_rule(&v, "recreate-multi-replica")[0];
    assert_eq!(recreate["document"], 1, "the comment before the first marker is document 0");
    assert_eq!(recreate["line"], 10, "the line of spec.strategy.type");
    let blocking = &of_rule(&v, "pdb-blocks-eviction")[0];
    assert_eq!(blocking["document"], 4);
    let expected_line = text.lines().position(|l| l == "  minAvailable: 1").unwrap() + 1;
    assert_eq!(blocking["line"], expected_line);
}

#[test]
fn json_files_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "hpa.json",
        "{\n  \"apiVersion\": \"autoscaling/v2\",\n  \"kind\": \"HorizontalPodAutoscaler\",\n  \"metadata\": {\"name\": \"api\", \"namespace\": \"prod\"},\n  \"spec\": {\n    \"scaleTargetRef\": {\"apiVersion\": \"apps/v1\", \"kind\": \"Deployment\", \"name\": \"api\"},\n    \"minReplicas\": 4,\n    \"maxReplicas\": 2\n  }\n}\n",
    );
    let r = run(&["check", "-f", s(&f), "--format", "json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    let v = r.json();
    let f0 = &findings(&v)[0];
    assert_eq!(
        (f0["rule"].as_str(), f0["namespace"].as_str(), f0["path"].as_str()),
        (Some("hpa-replica-bounds"), Some("prod"), Some("spec.minReplicas"))
    );
    assert_eq!(f0["line"], 7);
    // Bad JSON in a .json file is a JSON error, not a YAML one.
    let bad = write(dir.path(), "bad.json", "{\"kind\": \"Deployment\",\n");
    let r = run(&["check", "-f", s(&bad)]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains(&format!("{} (document 1): not valid JSON", s(&bad))), "{}", r.stderr);
}

#[test]
fn lists_are_unwrapped() {
    let items: Vec<String> = BLOCKING
        .split("---\n")
        .map(|doc| {
            let mut lines = doc.lines();
            let first = format!("  - {}", lines.next().unwrap());
            std::iter::once(first).chain(lines.map(|l| format!("    {l}"))).collect::<Vec<_>>().join("\n")
        })
        .collect();
    let text = format!("apiVersion: v1\nkind: List\nitems:\n{}\n", items.join("\n"));
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "list.yaml", &text);
    let r = run(&["check", "-f", s(&f), "--format", "json"]);
    assert_eq!(r.code, 1, "{}\n{text}", r.all());
    let v = r.json();
    let f0 = &of_rule(&v, "pdb-blocks-eviction")[0];
    assert_eq!(f0["document"], 0);
    assert_eq!(f0["item"], 1);
    let expected_line = text.lines().position(|l| l.trim() == "minAvailable: 1").unwrap() + 1;
    assert_eq!(f0["line"], expected_line, "the line inside the List item");
    // A typed list (`kubectl get deploy -o yaml` prints DeploymentList) is unwrapped too.
    let typed = text.replace("kind: List", "kind: DeploymentList");
    let f = write(dir.path(), "typed.yaml", &typed);
    assert_eq!(rules_of(&run(&["check", "-f", s(&f), "--format", "json"]).json()), ["pdb-blocks-eviction"]);
}

#[test]
fn other_kinds_are_ignored_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let text = "\
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
data: {replicas: \"not a number\"}
---
apiVersion: v1
kind: Service
metadata: {name: s}
spec: {selector: {app: x}, ports: [{port: 80}]}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
spec: {replicas: many, minAvailable: all}
---
apiVersion: batch/v1
kind: Job
metadata: {name: j}
spec: {template: {spec: {containers: [{name: j, image: j}], restartPolicy: Never}}}
";
    let f = write(dir.path(), "others.yaml", text);
    let r = run(&["check", "-f", s(&f)]);
    assert_eq!(r.code, 0, "{}", r.all());
    // The Service is read (a webhook's backend may be behind it), and has nothing to report.
    assert_eq!(r.stdout, "0 deny, 0 warn, 0 allowed in 1 object from 1 file\n");
    assert_eq!(r.stderr, "");
}

#[test]
fn a_deployment_without_selector_says_what_was_not_checked() {
    let dir = tempfile::tempdir().unwrap();
    let text = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: fragment
spec:
  replicas: 3
  template:
    metadata:
      labels: {app: fragment}
    spec:
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}
      containers:
        - {name: c, image: c}
";
    let f = write(dir.path(), "fragment.yaml", text);
    let r = run(&["check", "-f", s(&f)]);
    assert!(r.code == 0 || r.code == 1, "no crash, no input error: {}", r.all());
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(r.stdout.contains("spec.selector is missing"), "{}", r.stdout);
    let v = run(&["check", "-f", s(&f), "--format", "json"]).json();
    let unchecked = v["unchecked"].as_array().unwrap();
    assert_eq!(unchecked.len(), 1, "{unchecked:?}");
    assert_eq!(unchecked[0]["file"], s(&f));
    assert_eq!(unchecked[0]["document"], 0);
    assert_eq!(unchecked[0]["line"], 1);
    assert!(unchecked[0]["message"].as_str().unwrap().contains("Deployment default/fragment"));
}

// ---- flags -----------------------------------------------------------------------------------

#[test]
fn namespace_applies_to_objects_without_one() {
    let dir = tempfile::tempdir().unwrap();
    // The PDB has no namespace, the Deployment is in `team-a`: they meet only with --namespace team-a.
    let text = BLOCKING.replacen(
        "  name: billing\nspec:\n  replicas",
        "  name: billing\n  namespace: team-a\nspec:\n  replicas",
        1,
    );
    let f = write(dir.path(), "ns.yaml", &text);
    let v = run(&["check", "-f", s(&f), "--format", "json"]).json();
    assert!(of_rule(&v, "pdb-blocks-eviction").is_empty(), "the PDB is in `default`: {v}");
    let r = run(&["check", "-f", s(&f), "--format", "json", "--namespace", "team-a"]);
    assert_eq!(r.code, 1);
    let v = r.json();
    let f0 = &of_rule(&v, "pdb-blocks-eviction")[0];
    assert_eq!(f0["namespace"], "team-a");
    assert_eq!(f0["related"][0], serde_json::json!({"kind": "Deployment", "namespace": "team-a", "name": "billing"}));
    // An object with its own namespace keeps it.
    let r = run(&["check", "-f", s(&f), "--format", "json", "--namespace", "elsewhere"]);
    let v = r.json();
    assert!(of_rule(&v, "pdb-blocks-eviction").is_empty());
    let text = run(&["check", "-f", s(&f), "--namespace", "team-a"]).stdout;
    assert!(text.contains("PodDisruptionBudget team-a/billing"), "{text}");
}

#[test]
fn complete_turns_on_the_rules_that_assert_absence() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "clean.yaml", CLEAN);
    let r = run(&["check", "-f", s(&f), "--format", "json"]);
    assert_eq!(rules_of(&r.json()), Vec::<String>::new());
    let r = run(&["check", "-f", s(&f), "--format", "json", "--complete"]);
    assert_eq!(r.code, 0, "pdb-missing only warns");
    let v = r.json();
    assert_eq!(rules_of(&v), ["pdb-missing"]);
    assert_eq!(findings(&v)[0]["action"], "warn");
    assert_eq!(findings(&v)[0]["name"], "web");
}

#[test]
fn config_turns_a_rule_off_or_to_warn() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "pdb.yaml", BLOCKING);
    let warn = write(dir.path(), "warn.yaml", "rules:\n  pdb-blocks-eviction: warn\n");
    let r = run(&["check", "-f", s(&f), "--format", "json", "--config", s(&warn)]);
    assert_eq!(r.code, 0, "a warning does not fail: {}", r.all());
    let v = r.json();
    assert_eq!(findings(&v).len(), 1);
    assert_eq!(findings(&v)[0]["action"], "warn");
    assert_eq!(v["summary"], serde_json::json!({"deny": 0, "warn": 1, "allowed": 0}));
    let off = write(dir.path(), "off.yaml", "rules:\n  pdb-blocks-eviction: off\n");
    let r = run(&["check", "-f", s(&f), "--format", "json", "--config", s(&off)]);
    assert_eq!(r.code, 0);
    assert_eq!(findings(&r.json()).len(), 0);
    // And the other way round: a warn rule made deny fails the check.
    let w = write(dir.path(), "recreate.yaml", WARN_ONLY);
    let deny = write(dir.path(), "deny.yaml", "rules:\n  recreate-multi-replica: deny\n");
    let r = run(&["check", "-f", s(&w), "--config", s(&deny)]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("deny[recreate-multi-replica]"), "{}", r.stdout);
}

// ---- --fix -----------------------------------------------------------------------------------

const FIXABLE: &str = "\
# settings first, formatted by hand
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}   # keep me
data:
  key: \"value\"
---
# the workload: its spread has no labelSelector (deny)
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
      containers:
      - {name: api, image: \"api:1\"}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: api
spec:
  maxUnavailable: 1
  selector:
    matchLabels: {app: api}
---
# a trailing document, untouched
apiVersion: v1
kind: Service
metadata: {name: api}
spec: {selector: {app: api}, ports: [{port: 80}]}
";

fn documents(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in text.match_indices("---\n") {
        if i == 0 || text.as_bytes()[i - 1] == b'\n' {
            out.push(&text[start..i]);
            start = i;
        }
    }
    out.push(&text[start..]);
    out
}

fn yaml(doc: &str) -> Value {
    serde_saphyr::from_str(doc).expect("the fixed document is YAML")
}

#[test]
fn fix_writes_the_mutations_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "app.yaml", FIXABLE);
    let before = run(&["check", "-f", s(&f)]);
    assert_eq!(before.code, 1, "{}", before.all());
    assert!(before.stdout.contains("fix[inject-spread-selector]"), "{}", before.stdout);
    assert!(before.stdout.contains("fix[inject-unhealthy-pod-eviction-policy]"), "{}", before.stdout);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), FIXABLE, "without --fix nothing is written");

    let r = run(&["check", "-f", s(&f), "--fix"]);
    assert_eq!(r.code, 0, "the exit code speaks for the fixed file: {}", r.all());
    assert!(r.stderr.contains(&format!("fixed: {}", s(&f))), "{}", r.stderr);
    assert!(r.stdout.starts_with("0 deny, 0 warn, 0 allowed"), "{}", r.stdout);
    let fixed = std::fs::read_to_string(&f).unwrap();
    let (old, new) = (documents(FIXABLE), documents(&fixed));
    assert_eq!(new.len(), 4, "{fixed}");
    assert_eq!(new[0], old[0], "an unchanged document is kept byte for byte");
    assert_eq!(new[3], old[3], "an unchanged document is kept byte for byte");
    let deployment = yaml(new[1]);
    let spread = &deployment["spec"]["template"]["spec"]["topologySpreadConstraints"][0];
    assert_eq!(spread["labelSelector"], serde_json::json!({"matchLabels": {"app": "api"}}));
    assert_eq!(spread["whenUnsatisfiable"], "DoNotSchedule", "the rest of the constraint is kept");
    let pdb = yaml(new[2]);
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    // The fields are inserted into the text: comments, flow style and quoting are kept.
    assert_eq!(
        new[1],
        old[1].replace(
            "      - maxSkew: 1\n",
            "      - labelSelector:\n          matchLabels:\n            app: api\n        maxSkew: 1\n"
        )
    );
    assert_eq!(
        new[2],
        old[2].replace("spec:\n  maxUnavailable", "spec:\n  unhealthyPodEvictionPolicy: AlwaysAllow\n  maxUnavailable")
    );
    // Nothing but the added fields changed.
    let mut expected = yaml(old[1]);
    expected["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"] =
        serde_json::json!({"matchLabels": {"app": "api"}});
    assert_eq!(deployment, expected);
    let mut expected = yaml(old[2]);
    expected["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow".into();
    assert_eq!(pdb, expected);

    // A second --fix has nothing to do and writes nothing.
    let r = run(&["check", "-f", s(&f), "--fix"]);
    assert_eq!(r.code, 0);
    assert!(!r.stderr.contains("fixed:"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), fixed);
}

#[test]
fn fix_exit_code_reflects_what_is_left() {
    // The PDB gets its eviction policy, but still blocks eviction: exit 1 after the fix.
    let dir = tempfile::tempdir().unwrap();
    let text = BLOCKING.replace("  unhealthyPodEvictionPolicy: AlwaysAllow\n", "");
    let f = write(dir.path(), "pdb.yaml", &text);
    let r = run(&["check", "-f", s(&f), "--fix", "--format", "json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert_eq!(rules_of(&r.json()), ["pdb-blocks-eviction"]);
    assert_eq!(r.json()["mutations"], serde_json::json!([]), "nothing left to fix");
    let fixed = std::fs::read_to_string(&f).unwrap();
    assert_eq!(yaml(documents(&fixed)[1])["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(documents(&fixed)[0], documents(&text)[0]);
}

#[test]
fn fix_rewrites_json_files_and_list_items() {
    let dir = tempfile::tempdir().unwrap();
    let json = r#"{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"},
 "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}}}
"#;
    let f = write(dir.path(), "pdb.json", json);
    let r = run(&["check", "-f", s(&f), "--fix"]);
    assert_eq!(r.code, 0, "{}", r.all());
    let fixed = std::fs::read_to_string(&f).unwrap();
    let v: Value = serde_json::from_str(&fixed).expect("still JSON");
    assert_eq!(v["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(v["spec"]["maxUnavailable"], 1);
    assert_eq!(
        fixed,
        json.replace(
            r#""spec": {"maxUnavailable""#,
            r#""spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow", "maxUnavailable""#
        ),
        "the layout is kept"
    );

    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: c}\n- apiVersion: policy/v1\n  kind: PodDisruptionBudget\n  metadata: {name: p}\n  spec:\n    maxUnavailable: 1\n    selector: {matchLabels: {app: x}}\n";
    let f = write(dir.path(), "list.yaml", list);
    let r = run(&["check", "-f", s(&f), "--fix"]);
    assert_eq!(r.code, 0, "{}", r.all());
    let fixed = std::fs::read_to_string(&f).unwrap();
    assert_eq!(
        fixed,
        list.replace(
            "  spec:\n    maxUnavailable",
            "  spec:\n    unhealthyPodEvictionPolicy: AlwaysAllow\n    maxUnavailable"
        )
    );
    let v = yaml(&fixed);
    assert_eq!(v["items"][1]["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(v["items"][0], serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
}

#[test]
fn fix_refuses_stdin() {
    let r = run_in(None, &["check", "-f", "-", "--fix"], Some(FIXABLE));
    assert_eq!(r.code, 2, "{}", r.all());
    assert!(r.stderr.contains("stdin cannot be fixed in place"), "{}", r.stderr);
}

// ---- rules and explain -----------------------------------------------------------------------

#[test]
fn rules_lists_every_rule_and_mutation_with_its_default() {
    let r = run(&["rules"]);
    assert_eq!(r.code, 0);
    let expected_rules = [
        ("spread-selector-missing", "deny"),
        ("spread-selector-mismatch", "deny"),
        ("spread-selector-overlap", "warn"),
        ("spread-unsatisfiable", "warn"),
        ("replicas-colocated", "warn"),
        ("host-network-colocation", "deny"),
        ("csi-controller-recreate", "deny"),
        ("recreate-multi-replica", "warn"),
        ("rwo-volume-multi-replica", "deny"),
        ("rwo-volume-rolling-surge", "warn"),
        ("pdb-blocks-eviction", "deny"),
        ("pdb-overlap", "deny"),
        ("pdb-selector-empty", "warn"),
        ("pdb-selects-nothing", "warn"),
        ("pdb-missing", "warn"),
        ("pdb-unhealthy-eviction-policy", "warn"),
        ("hpa-replica-bounds", "deny"),
        ("hpa-target-missing", "warn"),
        ("hpa-replicas-conflict", "warn"),
        ("termination-grace-zero", "warn"),
        ("prestop-exceeds-grace", "deny"),
        ("webhook-fail-closed-unavailable", "warn"),
        ("apiservice-unavailable", "warn"),
        ("toleration-wildcard", "warn"),
        ("spread-zone-missing", "warn"),
        ("exemption-unknown-rule", "warn"),
        ("replicas-share-node", "warn"),
        ("pdb-disruptions-blocked", "warn"),
        ("spread-pending", "warn"),
        ("pod-on-cordoned-node", "warn"),
        ("pods-pending", "warn"),
        ("drain-blocked", "warn"),
        ("drain-takes-all-replicas", "warn"),
        ("drain-leaves-pending", "warn"),
        ("drain-refused", "warn"),
    ];
    let expected_mutations = [
        ("inject-spread-selector", "on"),
        ("inject-unhealthy-pod-eviction-policy", "on"),
        ("inject-default-spread", "off"),
        ("inject-match-label-keys", "off"),
    ];
    let listed: Vec<(String, String)> = r
        .stdout
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let (id, default) = (words.next()?, words.next()?);
            (id.contains('-') && words.next().is_some()).then(|| (id.to_string(), default.to_string()))
        })
        .collect();
    let expected: Vec<(String, String)> =
        expected_rules.iter().chain(expected_mutations.iter()).map(|(id, d)| (id.to_string(), d.to_string())).collect();
    assert_eq!(listed, expected, "{}", r.stdout);
}

#[test]
fn explain_prints_a_rule_page() {
    let r = run(&["explain", "pdb-blocks-eviction"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("# pdb-blocks-eviction\n"), "{}", r.stdout);
    for section in ["## What it catches", "## Why it matters", "## Example", "## How to fix", "## How to exempt"] {
        assert!(r.stdout.contains(section), "lacks {section}");
    }
    assert!(r.stdout.contains("ha-guard.io/allow-pdb-blocks-eviction"), "the page says how to exempt");
    let r = run(&["explain", "inject-spread-selector"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("# inject-spread-selector\n"));
}

#[test]
fn explain_an_unknown_rule_exits_2() {
    let r = run(&["explain", "nope"]);
    assert_eq!(r.code, 2);
    assert!(r.stdout.is_empty());
    assert!(r.stderr.contains("nope") && r.stderr.contains("ha-guard rules"), "{}", r.stderr);
}

// ---- the JSON contract (DESIGN.md §5) --------------------------------------------------------

/// A deny, a warn and an allowed finding in two files, one of them cross-object.
fn contract_input(dir: &Path) -> (PathBuf, PathBuf) {
    let a = write(dir, "blocking.yaml", BLOCKING);
    let b = write(
        dir,
        "exempt.yaml",
        "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: batch
  namespace: jobs
  annotations:
    ha-guard.io/allow-recreate-multi-replica: \"jobs are idempotent; a pause during rollout is fine\"
spec:
  replicas: 2
  strategy: {type: Recreate}
  selector:
    matchLabels: {app: batch}
  template:
    metadata:
      labels: {app: batch}
    spec:
      terminationGracePeriodSeconds: 0
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 1
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector: {matchLabels: {app: batch}}
      containers:
        - {name: batch, image: batch}
",
    );
    (a, b)
}

#[test]
fn json_output_is_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = contract_input(dir.path());
    let r = run(&["check", "-f", s(&a), s(&b), "--format", "json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert_eq!(r.stderr, "");
    let v = r.json();
    let top = v.as_object().expect("one JSON object");
    assert!(top.contains_key("findings") && top.contains_key("summary"));
    // summary: exactly deny, warn, allowed, as integers.
    let summary = v["summary"].as_object().unwrap();
    assert_eq!(summary.len(), 3, "{summary:?}");
    assert_eq!(v["summary"], serde_json::json!({"deny": 1, "warn": 1, "allowed": 1}));
    assert!(summary.values().all(Value::is_u64));

    let contract = |f: &Value| -> Value {
        let keys = ["rule", "action", "kind", "namespace", "name", "path", "related", "file", "document"];
        Value::Object(keys.iter().map(|k| (k.to_string(), f[*k].clone())).collect())
    };
    let got: Vec<Value> = findings(&v).iter().map(contract).collect();
    assert_eq!(
        got,
        [
            serde_json::json!({
                "rule": "pdb-blocks-eviction", "action": "deny", "kind": "PodDisruptionBudget",
                "namespace": "default", "name": "billing", "path": "spec.minAvailable",
                "related": [{"kind": "Deployment", "namespace": "default", "name": "billing"}],
                "file": s(&a), "document": 1,
            }),
            serde_json::json!({
                "rule": "recreate-multi-replica", "action": "allowed", "kind": "Deployment",
                "namespace": "jobs", "name": "batch", "path": "spec.strategy.type",
                "related": [], "file": s(&b), "document": 0,
            }),
            serde_json::json!({
                "rule": "termination-grace-zero", "action": "warn", "kind": "Deployment",
                "namespace": "jobs", "name": "batch", "path": "spec.template.spec.terminationGracePeriodSeconds",
                "related": [], "file": s(&b), "document": 0,
            }),
        ]
    );
    for f in findings(&v) {
        // Exactly typed.
        for k in ["rule", "action", "kind", "namespace", "name", "path", "message", "file"] {
            assert!(f[k].is_string(), "{k} is a string in {f}");
        }
        assert!(f["document"].is_u64(), "document is an index: {f}");
        assert!(["deny", "warn", "allowed"].contains(&f["action"].as_str().unwrap()));
        for r in f["related"].as_array().expect("related is a list") {
            let r = r.as_object().unwrap();
            let mut keys: Vec<_> = r.keys().map(String::as_str).collect();
            keys.sort();
            assert_eq!(keys, ["kind", "name", "namespace"]);
            assert!(r.values().all(Value::is_string));
        }
        // The message says what, why and how to fix; `fix` is the fix alone, the message's end
        // (issue 51, item 7).
        let m = f["message"].as_str().unwrap();
        assert!(m.contains(" Fix: "), "{m}");
        let fix = f["fix"].as_str().expect("fix is a string");
        assert!(!fix.is_empty() && m.ends_with(&format!(" Fix: {fix}")), "{fix:?} is not the end of {m:?}");
        // Extras we add: the line of the field.
        assert!(f["line"].is_u64(), "{f}");
    }
    let m = findings(&v)[0]["message"].as_str().unwrap();
    assert!(
        m.contains("minAvailable 1") && m.contains("allows 0 disruptions") && m.contains("Deployment billing"),
        "{m}"
    );
    assert_eq!(findings(&v)[0]["line"], 22);
    assert_eq!(findings(&v)[1]["line"], 10, "strategy: {{type: Recreate}} is on line 10");
    assert_eq!(findings(&v)[2]["line"], 17);
    // The exemption's reason is in the notes.
    assert!(findings(&v)[1]["notes"][0].as_str().unwrap().contains("jobs are idempotent"), "{}", findings(&v)[1]);
    assert_eq!(v["errors"], serde_json::json!([]));
}

#[test]
fn json_output_with_no_findings() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "clean.yaml", CLEAN);
    let v = run(&["check", "-f", s(&f), "--format", "json"]).json();
    assert_eq!(v["findings"], serde_json::json!([]));
    assert_eq!(v["summary"], serde_json::json!({"deny": 0, "warn": 0, "allowed": 0}));
}

// ---- text output -----------------------------------------------------------------------------

#[test]
fn text_output_reads_like_a_compiler_diagnostic() {
    let dir = tempfile::tempdir().unwrap();
    let text = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: shop
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule
      containers:
        - {name: api, image: api}
";
    let f = write(dir.path(), "api.yaml", text);
    // Relative to the file's directory, so that the path in the output is known.
    let r = run_in(Some(dir.path()), &["check", "-f", "api.yaml"], None);
    assert_eq!(r.code, 1);
    let block: Vec<&str> = r.stdout.split("\n\n").next().unwrap().lines().collect();
    assert_eq!(
        block[..6],
        [
            "deny[spread-selector-missing]: Deployment shop/api at spec.template.spec.topologySpreadConstraints[0].labelSelector",
            "  --> api.yaml:15:11",
            "   |",
            "15 |         - maxSkew: 1",
            "   |           ^ `labelSelector` is not set here",
            "   |",
        ],
        "{}",
        r.stdout
    );
    assert!(
        block[6].starts_with("   = topologySpreadConstraints[0]") && block[6].contains("has no labelSelector"),
        "{}",
        block[6]
    );
    assert!(block[7].starts_with("   = fix: "), "{}", block[7]);
    // The fix points at where it goes, as a field path; the `-->` line is a bare location (the
    // first document of a file needs no document number).
    assert!(
        r.stdout.contains(
            "fix[inject-spread-selector]: Deployment shop/api would get spec.template.spec.topologySpreadConstraints[0].labelSelector = {\"matchLabels\":{\"app\":\"api\"}}\n  --> api.yaml:15:11\n"
        ),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with(
            "1 deny (spread-selector-missing 1), 1 warn (replicas-colocated 1), 0 allowed in 1 object from 1 file; 1 \
             fix available (run with --fix to write them)\n"
        ),
        "{}",
        r.stdout
    );
    drop(f);
}

#[test]
fn text_output_of_the_examples() {
    let r = run_in(Some(Path::new(env!("CARGO_MANIFEST_DIR"))), &["check", "-f", "examples/"], None);
    assert_eq!(r.code, 1, "{}", r.all());
    for expected in [
        "deny[pdb-blocks-eviction]: PodDisruptionBudget shop/billing at spec.minAvailable",
        "deny[spread-selector-missing]: Deployment shop/api at spec.template.spec.topologySpreadConstraints[0].labelSelector",
        "deny[host-network-colocation]: Deployment infra/agent at spec.template.spec.hostNetwork",
        "deny[rwo-volume-multi-replica]: Deployment infra/db at spec.template.spec.volumes[0].persistentVolumeClaim.claimName",
        "deny[hpa-replica-bounds]: HorizontalPodAutoscaler jobs/worker at spec.minReplicas",
        "allowed[pdb-blocks-eviction]: PodDisruptionBudget tools/license-server at spec.minAvailable (document 1, items[1])\n  --> examples/exempted-list.yaml:31:7",
        "  --> examples/hpa-bounds.json:13:5",
    ] {
        assert!(r.stdout.contains(expected), "missing {expected:?} in\n{}", r.stdout);
    }
    assert!(!r.stdout.contains("good-ha-web.yaml"), "the good example is clean:\n{}", r.stdout);
    assert!(r.stdout.contains("from 6 files"), "{}", r.stdout);
}

// ---- SARIF -----------------------------------------------------------------------------------

fn sarif_validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sarif-2.1.0.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::draft4::options().should_validate_formats(true).build(&schema).expect("the SARIF schema compiles")
}

fn assert_valid_sarif(validator: &jsonschema::Validator, log: &Value) {
    let errors: Vec<String> = validator.iter_errors(log).map(|e| format!("{} at {}", e, e.instance_path)).collect();
    assert!(errors.is_empty(), "not valid SARIF 2.1.0:\n{}", errors.join("\n"));
}

#[test]
fn the_schema_rejects_what_is_not_sarif() {
    let validator = sarif_validator();
    let r =
        run_in(Some(Path::new(env!("CARGO_MANIFEST_DIR"))), &["check", "-f", "examples/", "--format", "sarif"], None);
    let mut log = r.json();
    assert!(validator.is_valid(&log));
    log["runs"][0]["results"][0]["level"] = "fatal".into();
    assert!(!validator.is_valid(&log), "an unknown level is refused");
    let mut log = r.json();
    log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0.into();
    assert!(!validator.is_valid(&log), "lines start at 1");
    let mut log = r.json();
    log["version"] = "2.0.0".into();
    assert!(!validator.is_valid(&log));
}

#[test]
fn sarif_of_the_examples_is_valid_and_complete() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sarif = run_in(Some(root), &["check", "-f", "examples/", "--format", "sarif"], None);
    assert_eq!(sarif.code, 1, "{}", sarif.all());
    let log = sarif.json();
    assert_valid_sarif(&sarif_validator(), &log);
    assert_eq!(log["version"], "2.1.0");
    let json = run_in(Some(root), &["check", "-f", "examples/", "--format", "json"], None).json();
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), findings(&json).len(), "one result per finding");
    assert!(!results.is_empty());
    let driver_rules: Vec<&str> = log["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(driver_rules.len(), ha_guard::core::registry::rules().count());
    for (result, finding) in results.iter().zip(findings(&json)) {
        assert_eq!(result["ruleId"], finding["rule"]);
        let index = result["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(driver_rules[index], finding["rule"].as_str().unwrap());
        let level = match finding["action"].as_str().unwrap() {
            "deny" => "error",
            "warn" => "warning",
            _ => "note",
        };
        assert_eq!(result["level"], level, "{result}");
        let physical = &result["locations"][0]["physicalLocation"];
        assert_eq!(physical["artifactLocation"]["uri"], finding["file"], "{result}");
        assert_eq!(physical["region"]["startLine"], finding["line"], "{result}");
        assert_eq!(physical["region"]["startColumn"], finding["column"], "{result}");
        if finding["action"] == "allowed" {
            let suppression = &result["suppressions"][0];
            assert_eq!(suppression["kind"], "inSource");
            assert!(
                suppression["justification"].as_str().unwrap().contains("licence binds to one pod"),
                "{suppression}"
            );
        } else {
            assert!(result.get("suppressions").is_none(), "{result}");
        }
    }
    assert_eq!(results.iter().filter(|r| r.get("suppressions").is_some()).count(), 1);
    assert_eq!(log["runs"][0]["invocations"][0]["executionSuccessful"], true);
}

#[test]
fn sarif_reports_unusable_input_and_stays_valid() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "my manifests/pdb.yaml", BLOCKING);
    let bad = write(dir.path(), "broken.yaml", "kind: Deployment\nspec: [1,\n");
    let r = run(&["check", "-f", s(&good), s(&bad), "--format", "sarif"]);
    assert_eq!(r.code, 2, "{}", r.all());
    let log = r.json();
    assert_valid_sarif(&sarif_validator(), &log);
    let run0 = &log["runs"][0];
    assert_eq!(run0["invocations"][0]["executionSuccessful"], false);
    let note = &run0["invocations"][0]["toolExecutionNotifications"][0];
    assert_eq!(note["level"], "error");
    assert!(note["message"]["text"].as_str().unwrap().contains("(document 1): not valid YAML"), "{note}");
    // The findings of the good file are still there, with an absolute path as a file: URI.
    let results = run0["results"].as_array().unwrap();
    assert_eq!(results.len(), 1);
    let uri = results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].as_str().unwrap();
    assert!(uri.starts_with("file:///") && uri.ends_with("/my%20manifests/pdb.yaml"), "{uri}");
    assert_eq!(results[0]["locations"][0]["physicalLocation"]["region"]["startLine"], 22);
}

#[test]
fn sarif_of_a_clean_run_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "clean.yaml", CLEAN);
    let r = run(&["check", "-f", s(&f), "--format", "sarif"]);
    assert_eq!(r.code, 0);
    let log = r.json();
    assert_valid_sarif(&sarif_validator(), &log);
    assert_eq!(log["runs"][0]["results"], serde_json::json!([]));
}

//! `ha-guard policies`: the generated admission policies as YAML, one document each, for the
//! configuration `--config` names; `ha-guard rules` marks the rules that have one.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");

fn run(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN).args(args).current_dir(dir).output().expect("ha-guard runs")
}

fn docs(out: &Output) -> Vec<Value> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout.clone()).expect("UTF-8");
    serde_saphyr::from_multiple::<Value>(&text).expect("YAML").into_iter().filter(|d| !d.is_null()).collect()
}

#[test]
fn policies_prints_one_document_per_object_for_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let defaults = docs(&run(&["policies"], dir.path()));
    let kinds = |docs: &[Value], kind: &str| docs.iter().filter(|d| d["kind"] == kind).count();
    assert!(kinds(&defaults, "ValidatingAdmissionPolicy") >= 8, "{defaults:?}");
    assert_eq!(kinds(&defaults, "ValidatingAdmissionPolicy"), kinds(&defaults, "ValidatingAdmissionPolicyBinding"));
    assert_eq!(kinds(&defaults, "MutatingAdmissionPolicy"), 2);
    assert!(defaults.iter().all(|d| d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ha-guard"));

    std::fs::write(dir.path().join("c.yaml"), "mode: observe\nrules: {prestop-exceeds-grace: off}\n").unwrap();
    let observe = docs(&run(&["policies", "--config", "c.yaml"], dir.path()));
    assert_eq!(kinds(&observe, "MutatingAdmissionPolicy"), 0);
    assert!(observe.iter().all(|d| d["metadata"]["labels"]["ha-guard.io/rule"] != "prestop-exceeds-grace"));
    assert!(
        observe
            .iter()
            .filter(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
            .all(|b| b["spec"]["validationActions"] == serde_json::json!(["Warn", "Audit"]))
    );

    std::fs::write(dir.path().join("bad.yaml"), "rules: {no-such-rule: deny}\n").unwrap();
    let bad = run(&["policies", "--config", "bad.yaml"], dir.path());
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-rule"), "{bad:?}");
}

#[test]
fn rules_marks_the_rules_and_mutations_with_a_policy() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["rules"], dir.path());
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // The POLICY column, between DEFAULT and WHAT.
    let column = |id: &str, want: &str| {
        let line = text.lines().find(|l| l.starts_with(&format!("{id} "))).unwrap_or_else(|| panic!("{id}: {text}"));
        line.contains(&format!("  {want}  "))
    };
    for (id, want) in [
        ("prestop-exceeds-grace", "yes"),
        ("inject-spread-selector", "yes"),
        ("pdb-selects-nothing", "part"),
        ("pdb-overlap", "-"),
        ("inject-default-spread", "-"),
    ] {
        assert!(column(id, want), "{id} {want}: {text}");
    }
    assert!(text.contains("POLICY: yes = also enforced by the apiserver"), "{text}");
}

//! The pre-commit hooks (`.pre-commit-hooks.yaml`) with pre-commit itself, from PyPI: in a scratch
//! git repository a commit of a bad manifest is refused and the fixed one passes.
//!
//! pre-commit is installed once into a virtualenv in the cache (`~/.cache/ha-guard/pre-commit-*`,
//! pinned version); the `ha-guard-system` hook runs the binary cargo built (on PATH). The `ha-guard`
//! hook (language: rust) builds the whole crate with cargo: it is the same entry and is not built
//! here a second time.

use std::path::{Path, PathBuf};
use std::process::Command;

const PRE_COMMIT: &str = "4.7.0";

fn pre_commit() -> PathBuf {
    let cache = std::env::var_os("HA_GUARD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/ha-guard"));
    let venv = cache.join(format!("pre-commit-{PRE_COMMIT}"));
    let bin = venv.join("bin/pre-commit");
    if !bin.exists() {
        let tmp = cache.join(format!("pre-commit-{PRE_COMMIT}.tmp-{}", std::process::id()));
        let ok = |c: &mut Command| {
            let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
            assert!(out.status.success(), "{c:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        ok(Command::new("python3").args(["-m", "venv"]).arg(&tmp));
        ok(Command::new(tmp.join("bin/pip")).args(["install", "-q", &format!("pre-commit=={PRE_COMMIT}")]));
        // Another test process may have installed it meanwhile: either copy works.
        let _ = std::fs::rename(&tmp, &venv);
        let _ = std::fs::remove_dir_all(&tmp);
    }
    // A venv's scripts name their interpreter by path: it stays where it was made (renamed dirs
    // keep working because `pre-commit` is run through that venv's python below).
    venv
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git").args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

const BAD: &str = "\
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

#[test]
fn a_pre_commit_run_refuses_a_bad_manifest_and_passes_the_fixed_one() {
    let venv = pre_commit();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    git(scratch.path(), &["init", "-q"]);
    git(scratch.path(), &["config", "user.email", "t@example.invalid"]);
    git(scratch.path(), &["config", "user.name", "t"]);
    std::fs::write(scratch.path().join("deploy.yaml"), BAD).unwrap();
    // A chart beside it: its templates are not YAML until rendered, and its Chart.yaml holds no
    // object; neither fails the commit.
    std::fs::create_dir_all(scratch.path().join("chart/templates")).unwrap();
    std::fs::write(scratch.path().join("chart/Chart.yaml"), "apiVersion: v2\nname: c\nversion: 0.1.0\n").unwrap();
    std::fs::write(scratch.path().join("chart/templates/d.yaml"), "{{- include \"c.deployment\" . }}\n").unwrap();
    git(scratch.path(), &["add", "deploy.yaml", "chart"]);
    let binary_dir = Path::new(env!("CARGO_BIN_EXE_ha-guard")).parent().unwrap().to_path_buf();
    let path = format!("{}:{}", binary_dir.display(), std::env::var("PATH").unwrap_or_default());
    let run = || {
        // `try-repo` runs a hook of a repository as it is, uncommitted changes included.
        Command::new(venv.join("bin/python"))
            .args(["-m", "pre_commit", "try-repo"])
            .arg(repo)
            .args(["ha-guard-system", "--all-files", "--color", "never"])
            .current_dir(scratch.path())
            .env("PATH", &path)
            .env("PRE_COMMIT_HOME", home.path())
            .output()
            .expect("pre-commit runs")
    };
    let refused = run();
    let out = String::from_utf8_lossy(&refused.stdout).to_string() + &String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "the bad manifest fails the hook:\n{out}");
    assert!(out.contains("ha-guard check (installed)") && out.contains("Failed"), "{out}");
    assert!(out.contains("deny[prestop-exceeds-grace]"), "the hook shows the finding:\n{out}");
    std::fs::write(scratch.path().join("deploy.yaml"), BAD.replace("seconds: 40", "seconds: 5")).unwrap();
    git(scratch.path(), &["add", "deploy.yaml"]);
    let passed = run();
    let out = String::from_utf8_lossy(&passed.stdout).to_string() + &String::from_utf8_lossy(&passed.stderr);
    assert_eq!(passed.status.code(), Some(0), "the fixed manifest passes:\n{out}");
    assert!(out.contains("Passed"), "{out}");
}

/// The hooks file declares both hooks with the entry and the file pattern the README shows.
#[test]
fn the_hooks_file_declares_both_hooks() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".pre-commit-hooks.yaml")).unwrap();
    let hooks: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let ids: Vec<&str> = hooks.as_array().unwrap().iter().map(|h| h["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["ha-guard", "ha-guard-system"]);
    for h in hooks.as_array().unwrap() {
        // Staged YAML without objects (values.yaml, CI files) passes; charts' templates are left out.
        assert_eq!(h["entry"], "ha-guard check --allow-empty");
        assert_eq!(h["exclude"], "(^|/)templates/");
        assert_eq!(h["require_serial"], true, "one run sees every staged manifest");
    }
}

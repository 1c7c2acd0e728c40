//! End-to-end (issue 50, acceptance 1): a paged list whose continue token expires mid-read, on a
//! real kube-apiserver, and `ha-guard audit` still reads the whole cluster.
//!
//! How the 410 is made real: the apiserver runs with `--etcd-compaction-interval=2s` (its own
//! compactor, as every cluster runs it, at 5 min by default). A continue token carries the
//! resourceVersion of the list's first page; once etcd is compacted past it and the watch cache
//! has dropped its snapshots older than the compaction (k8s.io/apiserver v0.37
//! `storage/cacher/compactor.go` polls every 15 s; `ListFromCacheSnapshot` is on by default), the
//! next page is answered `410 Expired`, "The provided continue parameter is too old to display a
//! consistent list result" (`storage/etcd3/errors.go`). A read of 60 Deployments in pages of 20
//! takes milliseconds, so the audit is held after its first page by the test-only hook
//! `HA_GUARD_TEST_PAUSE_LISTS` (src/audit/read.rs, `test_pause`), which also hands the test the
//! audit's own continue token: the test asks the apiserver for that very page until it answers
//! 410 (so the audit's next request is answered 410 too), then lets the audit go on.
//!
//! Checked: the audit exits as without the fault, its findings are exactly those of an audit that
//! was not held (each Deployment once, none lost or doubled by the list started over), and with
//! `RUST_LOG=info` it says on stderr that it listed the collection again whole.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");
const NS: &str = "many";
/// Deployments stored: three pages of 20.
const DEPLOYMENTS: usize = 60;
/// What `list` logs when it starts a list over (src/audit/read.rs).
const STARTED_OVER: &str = "a paged list's continue token expired: listing it again whole";

/// The findings of an audit report, as comparable text (rule, action, where, message).
fn findings(report: &Value) -> BTreeSet<String> {
    report["findings"].as_array().expect("findings").iter().map(|f| f.to_string()).collect()
}

/// The Deployments the findings name (by the API path they give).
fn deployments_named(report: &Value) -> BTreeSet<String> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["file"].as_str())
        .filter_map(|path| path.strip_prefix(&format!("apis/apps/v1/namespaces/{NS}/deployments/")))
        .map(str::to_string)
        .collect()
}

fn audit_command(cp: &ControlPlane) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["audit", "--format", "json", "--chunk-size", "20"])
        .env("KUBECONFIG", cp.kubeconfig())
        .env_remove("RUST_LOG")
        .env_remove("HA_GUARD_TEST_PAUSE_LISTS")
        .stdin(Stdio::null());
    cmd
}

#[test]
fn an_expired_continue_token_is_listed_again_whole() {
    let cp = ControlPlane::start_with(|_| Ok(vec!["--etcd-compaction-interval=2s".to_string()]))
        .unwrap_or_else(|e| panic!("{e}"));
    cp.namespace(NS, &[]);
    let docs: Vec<Value> = (0..DEPLOYMENTS).map(|i| deployment(NS, &format!("app-{i:02}"), 2)).collect();
    cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&docs)).success();

    // Not held: what the audit says of this cluster.
    let out = audit_command(&cp).output().expect("run ha-guard audit");
    let baseline: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let names = deployments_named(&baseline);
    assert_eq!(names.len(), DEPLOYMENTS, "every Deployment has a finding (2 replicas, no PDB): {names:?}");

    // Held after its first page until its continue token has expired.
    let dir = tempfile::tempdir().expect("tempdir");
    let pause = dir.path().join("pause");
    let reached = dir.path().join("pause.reached");
    std::fs::write(&pause, "").expect("write the pause file");
    let mut child = audit_command(&cp)
        .env("HA_GUARD_TEST_PAUSE_LISTS", &pause)
        .env("RUST_LOG", "ha_guard=info")
        // Files, not pipes: nobody reads a pipe while the audit is held (its report is larger than
        // a pipe's buffer).
        .stdout(std::fs::File::create(dir.path().join("stdout")).expect("stdout file"))
        .stderr(std::fs::File::create(dir.path().join("stderr")).expect("stderr file"))
        .spawn()
        .expect("start ha-guard audit");
    // Every paged list is held (the APIServices' too, more than a page of them): the Deployments'
    // is the one this test expires.
    const DEPLOYMENTS_PATH: &str = "/apis/apps/v1/deployments";
    let line = poll("the audit's Deployments held after a first page", WAIT, Duration::from_millis(100), || {
        let text = std::fs::read_to_string(&reached).map_err(|e| e.to_string())?;
        text.lines()
            .filter(|_| text.ends_with('\n'))
            .find(|l| l.starts_with(&format!("{DEPLOYMENTS_PATH} ")))
            .map(str::to_string)
            .ok_or_else(|| format!("{text:?}"))
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let (path, token) = line.split_once(' ').expect("PATH TOKEN");
    assert_eq!(path, DEPLOYMENTS_PATH);

    // The apiserver compacts by itself; writes meanwhile move the revision past the token's.
    let started = Instant::now();
    let page = format!("{path}?limit=20&continue={token}");
    let mut writes = 0;
    let expired = poll("the audit's continue token answered 410", Duration::from_secs(120), Duration::from_millis(500), || {
        writes += 1;
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tick", "namespace": "default"},
            "data": {"n": writes.to_string()}});
        cp.apply(cm).success();
        let got = cp.kubectl(&["get", "--raw", &page]);
        match got.ok() {
            false if got.output().contains("continue parameter is too old") => Ok(got.output()),
            _ => Err(got.output().chars().take(300).collect::<String>()),
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("[e2e] the token expired {:.1?} after the first page: {}", started.elapsed(), expired.trim());

    std::fs::remove_file(&pause).expect("let the audit go on");
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the audit") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
            panic!("the audit did not finish within {WAIT:?} of being let go\n--- stderr\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(dir.path().join("stdout")).expect("stdout");
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).expect("stderr");
    assert_eq!(status.code(), out.status.code(), "exit as without the fault\n--- stderr\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stderr}"));
    assert!(
        stderr.lines().any(|l| l.contains(STARTED_OVER) && l.contains("/apis/apps/v1/deployments")),
        "the log says the Deployments were listed again whole:\n{stderr}"
    );
    assert_eq!(deployments_named(&report), names, "every Deployment read");
    assert_eq!(report["findings"].as_array().map(Vec::len), baseline["findings"].as_array().map(Vec::len));
    assert_eq!(findings(&report), findings(&baseline), "the same findings as an audit that was not held");
    assert!(Path::new(&reached).exists());
}

//! End-to-end: the observe-only install (issue 41, item 2). ha-guard serves with the configuration
//! the chart renders with `--set mode=observe` (its ConfigMap's `config.yaml`, byte for byte), the
//! shipped webhook configurations registered on a real kube-apiserver:
//!
//! 1. `observe`: a write enforce refuses is admitted, each deny line a warning saying enforce
//!    would deny it; a write enforce patches is stored as written;
//! 2. `reports`: `ha-guard reports` with the same configuration lists the would-be denials as
//!    `fail` (the audit judges as enforce would: its reports are what enforcing would refuse);
//! 3. `enforce`: the configuration the chart renders with `--set mode=enforce` written over it
//!    (as the kubelet updates a mounted ConfigMap), reloaded without a restart: the same writes are
//!    refused and patched.

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const NS: &str = "shop";
/// The chart's release namespace (the reports' Lease).
const RELEASE_NS: &str = "ha-guard";

/// The chart's `config.yaml` for `helm template ha-guard charts/ha-guard --namespace ha-guard ARGS`.
fn chart_config(args: &[&str]) -> String {
    let helm = helm().unwrap_or_else(|e| panic!("helm: {e}"));
    let out = Command::new(helm)
        .args(["template", "ha-guard", "charts/ha-guard", "--namespace", RELEASE_NS])
        .args(args)
        .current_dir(repo())
        .output()
        .expect("helm template");
    assert!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
    let docs = yaml_docs(&String::from_utf8_lossy(&out.stdout));
    let cm = docs.iter().find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "ha-guard-config");
    cm.and_then(|c| c["data"]["config.yaml"].as_str()).expect("the chart's config.yaml").to_string()
}

/// Replaces `path` at once, as the kubelet swaps a ConfigMap volume's files.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// `out` succeeded, with a warning of `rule` at `path` (or under it) saying enforce would deny.
#[track_caller]
fn admitted_with_warning(out: Kubectl, rule: &str, path: &str) -> Kubectl {
    let out = out.success();
    let line = format!("[{rule}] (observe-only: enforce would deny) {path}");
    assert!(out.warnings().iter().any(|w| w.starts_with(&line)), "expected `Warning: {line}...`: {}", out.output());
    out
}

fn hostnet(name: &str) -> Value {
    pod(deployment(NS, name, 2), json!({"hostNetwork": true}))
}

#[test]
fn observe_only_refuses_nothing_and_patches_nothing_until_enforced() {
    let config_dir = tempfile::tempdir().expect("tempdir");
    let config = config_dir.path().join("config.yaml");
    let observe = chart_config(&["--set", "mode=observe"]);
    assert!(observe.contains("mode: observe"), "{observe}");
    std::fs::write(&config, &observe).expect("write");
    let config_arg = config.to_string_lossy().into_owned();
    let mut h = Harness::start(Setup {
        webhooks: &[],
        spec: Some(Box::new(move |s: &mut Spec| {
            s.args.extend(["--config".to_string(), config_arg, "--reload-interval".into(), "0.5".into()]);
        })),
        ..Default::default()
    });
    for ns in [NS, RELEASE_NS] {
        h.cp.namespace(ns, &[]);
    }
    register_observing(&h.cp, &h.hg);
    let mut steps = h.steps();
    let guard = h.guard();
    let (cp, hg) = (&h.cp, &h.hg);
    steps.run("1 observe: nothing refused, nothing patched", || {
        admitted_with_warning(
            cp.apply(hostnet("hostnet")),
            "host-network-colocation",
            "spec.template.spec.hostNetwork",
        );
        admitted_with_warning(cp.kubectl_in(&["apply", "-f", "-"], &canary_deny(NS)), "prestop-exceeds-grace", "spec.");
        cp.kubectl_in(&["apply", "-f", "-"], &canary_mutate(NS)).success();
        let stored = cp.kubectl(&["get", "pdb", "canary", "-n", NS, "-o", "json"]).success().json();
        assert!(stored["spec"].get("unhealthyPodEvictionPolicy").is_none(), "patched: {}", stored["spec"]);
        // The chart's NOTES: the probe that shows ha-guard answers (tests/it/chart.rs holds the text).
        let probe = cp.kubectl(&[
            "-n",
            NS,
            "create",
            "deployment",
            "ha-guard-probe",
            "--image=registry.k8s.io/pause:3.10",
            "--replicas=2",
            "--dry-run=server",
        ]);
        let probe = probe.success();
        let line =
            "[replicas-colocated] spec.template.spec.topologySpreadConstraints: Deployment ha-guard-probe (replicas 2)";
        assert!(
            probe.warnings().iter().any(|w| w.starts_with(line)),
            "expected `Warning: {line}...`: {}",
            probe.output()
        );
        assert!(!cp.kubectl(&["-n", NS, "get", "deployment", "ha-guard-probe"]).ok(), "a dry run stores nothing");
    });
    steps.run("2 the audit's reports list the would-be denials", || reports_list_would_be_denials(cp, &config));
    steps.run("3 enforce: the same writes refused and patched", || {
        let enforce = chart_config(&["--set", "mode=enforce"]);
        assert!(enforce.contains("mode: enforce"), "{enforce}");
        let reloads = || hg.metrics().sum("ha_guard_config_reloads_total", &[("result", "success")]);
        let before = reloads();
        write_atomically(&config, &enforce);
        poll("the enforce configuration reloaded", WAIT, Duration::from_millis(100), || {
            if reloads() > before { Ok(()) } else { Err(format!("{} reloads", reloads())) }
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(10)));
        cp.apply(hostnet("hostnet-2")).denied(&["host-network-colocation"]).hides(&["observe-only"]);
        let canary = canary_deny(NS).replace("\"canary\"", "\"canary-2\"");
        cp.kubectl_in(&["apply", "-f", "-"], &canary).denied(&["prestop-exceeds-grace"]);
        // Over pods of its own: a second PDB over canary's would be refused (pdb-overlap).
        let pdb = canary_mutate(NS).replace("name: canary,", "name: canary-2,").replace("app: canary}", "app: other}");
        let stored = cp.kubectl_in(&["apply", "-o", "json", "-f", "-"], &pdb).success().json();
        assert_eq!(stored["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow", "{}", stored["spec"]);
    });
    steps.run("no webhook call failed", || guard.finish(cp));
    // What the chart's `helm test` Pod runs, from outside the cluster here: ha-guard's answer
    // while a replica serves; once none does, the apiserver admits the dry run unchecked
    // (failurePolicy Ignore) and the probe fails saying so.
    steps.run("4 probe-webhook: ha-guard's answer, then none once it stops", || {
        let (code, stdout, stderr) = probe_webhook(cp);
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert!(stdout.starts_with("ha-guard answered the dry run of Deployment default/ha-guard-probe:"), "{stdout}");
        assert!(stdout.contains("\n  [replicas-colocated] spec.template.spec"), "{stdout}");
        assert!(
            stdout.contains("\n  [termination-grace-zero] spec.template.spec.terminationGracePeriodSeconds"),
            "{stdout}"
        );
    });
    h.hg.stop();
    let cp = &h.cp;
    steps.run("5 probe-webhook with no replica answering: exit 1, and why", || {
        let (code, stdout, stderr) = probe_webhook(cp);
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert!(stderr.contains("ha-guard did not answer: the apiserver admitted the dry run of Deployment default/ha-guard-probe without a word from ha-guard"), "{stderr}");
        assert!(stderr.contains("failurePolicy Ignore"), "{stderr}");
        assert!(!cp.kubectl(&["-n", "default", "get", "deployment", "ha-guard-probe"]).ok(), "a dry run stores nothing");
    });
    steps.finish();
}

/// The README's `ha-guard probe-webhook --namespace default` against the control plane: exit code,
/// stdout, stderr.
fn probe_webhook(cp: &ControlPlane) -> (i32, String, String) {
    let kubeconfig = cp.kubeconfig();
    let out = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["probe-webhook", "--namespace", "default", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .expect("run ha-guard probe-webhook");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Registers the shipped webhook configurations and waits until both are called: the validating
/// one answers the canary deny with an observe-only warning, the mutating one counts a request.
fn register_observing(cp: &ControlPlane, hg: &HaGuard) {
    for doc in webhook_configurations(hg) {
        cp.kubectl_in(&["apply", "-f", "-"], &doc.to_string()).success();
    }
    let mutate_requests = || hg.metrics().sum("ha_guard_admission_requests_total", &[("webhook", "mutate")]);
    poll("the webhook configurations in effect", WAIT, Duration::from_millis(200), || {
        let before = mutate_requests();
        let out = cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &canary_deny(NS));
        if !out.ok() || !out.warnings().iter().any(|w| w.starts_with("[prestop-exceeds-grace] (observe-only")) {
            return Err(out.output());
        }
        cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &canary_mutate(NS));
        if mutate_requests() > before { Ok(()) } else { Err("the mutating webhook is not called yet".into()) }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(20)));
}

/// `ha-guard reports --config CONFIG` (the observe-only one) on the cluster: the report of `shop`
/// lists the two writes enforce would have refused as `fail`.
fn reports_list_would_be_denials(cp: &ControlPlane, config: &Path) {
    reports::install_report_crds(cp);
    let reports = reports::ReportsProcess::start(cp, "observe", config, RELEASE_NS);
    let rows = poll("the report of shop lists the would-be denials", WAIT, Duration::from_millis(300), || {
        let k = cp.kubectl(&["-n", NS, "get", "policyreports.wgpolicyk8s.io", "ha-guard", "-o", "json"]);
        if !k.ok() {
            return Err(k.output());
        }
        let rows: Vec<(String, String, String)> = k.json()["results"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (s(&r["rule"]), s(&r["result"]), s(&r["resources"][0]["name"]))
            })
            .collect();
        let want = [("host-network-colocation", "hostnet"), ("prestop-exceeds-grace", "canary")];
        if want.iter().all(|(rule, name)| rows.iter().any(|r| r.0 == *rule && r.1 == "fail" && r.2 == *name)) {
            Ok(rows)
        } else {
            Err(format!("{rows:?}"))
        }
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", tail(&reports.log, 20)));
    eprintln!("[e2e] the report of {NS}: {rows:?}");
}

//! What the background audit's tests share: `ha-guard audit --format json` (what a report must
//! say), the rows of a PolicyReport and of that JSON, and the report CRDs as the chart installs them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::{ControlPlane, free_port, repo};

/// `ha-guard audit --format json` over the whole cluster.
pub fn audit_json(cp: &ControlPlane) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["audit", "--format", "json"])
        .env("KUBECONFIG", cp.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("run ha-guard audit");
    serde_json::from_str(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|e| panic!("audit json ({e}): {}", String::from_utf8_lossy(&out.stderr)))
}

/// (namespace, rule, result, kind, name) of a result.
pub type Row = (String, String, String, String, String);

/// The rows of a report's results.
pub fn rows_of_report(report: &Value) -> BTreeSet<Row> {
    report["results"]
        .as_array()
        .map(|results| {
            results
                .iter()
                .map(|r| {
                    let res = &r["resources"][0];
                    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                    (s(&res["namespace"]), s(&r["rule"]), s(&r["result"]), s(&res["kind"]), s(&res["name"]))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The rows `namespace`'s report must have: the audit's findings there (deny → fail, warn → warn,
/// allowed → skip).
pub fn rows_of_audit(audit: &Value, namespace: &str) -> BTreeSet<Row> {
    audit["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["namespace"].as_str().unwrap_or_default() == namespace)
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            let result = match f["action"].as_str() {
                Some("deny") => "fail",
                Some("warn") => "warn",
                _ => "skip",
            };
            (s("namespace"), s("rule"), result.to_string(), s("kind"), s("name"))
        })
        .collect()
}

/// The chart's report CRDs (`crds/`, both formats), applied and established.
pub fn install_report_crds(cp: &ControlPlane) {
    let crds = repo().join("charts/ha-guard/crds");
    cp.kubectl(&["apply", "-f", crds.to_str().expect("path")]).success();
    for crd in [
        "policyreports.wgpolicyk8s.io",
        "clusterpolicyreports.wgpolicyk8s.io",
        "reports.openreports.io",
        "clusterreports.openreports.io",
    ] {
        cp.kubectl(&["wait", "--for", "condition=established", "--timeout=30s", &format!("crd/{crd}")]).success();
    }
}

/// One `ha-guard reports --config CONFIG` process on `cp` (killed on drop), holding its Lease in
/// `lease_namespace`, its log `reports-NAME.log` in the control plane's folder.
pub struct ReportsProcess {
    child: Child,
    pub log: PathBuf,
}

impl ReportsProcess {
    pub fn start(cp: &ControlPlane, name: &str, config: &Path, lease_namespace: &str) -> ReportsProcess {
        let port = free_port();
        let log = cp.dir().join(format!("reports-{name}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
            .arg("reports")
            .arg("--config")
            .arg(config)
            .args(["--interval=5m", "--debounce=1s", &format!("--probe-listen=127.0.0.1:{port}")])
            .arg(format!("--lease-namespace={lease_namespace}"))
            .env("KUBECONFIG", cp.kubeconfig())
            .env("POD_NAME", format!("reports-{name}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("start ha-guard reports");
        ReportsProcess { child, log }
    }
}

impl Drop for ReportsProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

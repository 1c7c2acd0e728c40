//! What the background audit's tests share: `ha-guard audit --format json` (what a report must
//! say), the rows of a PolicyReport and of that JSON, and the report CRDs as the chart installs them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;

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

/// ha-guard's namespace in the reports tests: the Lease, and the chart's ServiceAccounts.
pub const REPORTS_NS: &str = "ha-guard";

/// One `ha-guard reports` process and its probe port.
pub struct Reports {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Reports {
    pub fn start(cp: &ControlPlane, name: &str, kubeconfig: &std::path::Path, extra: &[&str]) -> Reports {
        let port = free_port();
        let log = cp.dir().join(format!("reports-{name}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let interval = extra.iter().find(|a| a.starts_with("--interval=")).copied().unwrap_or("--interval=5m");
        let mut args = vec![
            "reports".to_string(),
            interval.to_string(),
            "--debounce=1s".into(),
            format!("--probe-listen=127.0.0.1:{port}"),
            format!("--lease-namespace={REPORTS_NS}"),
        ];
        args.extend(extra.iter().filter(|a| !a.starts_with("--interval=")).map(|a| a.to_string()));
        let child = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", name)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("start ha-guard reports");
        let r = Reports { child, port, log };
        poll(&format!("reports {name} answers /healthz"), WAIT, Duration::from_millis(100), || {
            http_get(r.port, "/healthz").map(|_| ())
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", r.log_tail()));
        r
    }

    pub fn metrics(&self) -> Metrics {
        let (_, text) = http_get(self.port, "/metrics").unwrap_or_else(|e| panic!("metrics: {e}\n{}", self.log_tail()));
        Metrics::parse(&text)
    }

    pub fn log_tail(&self) -> String {
        tail(&self.log, 40)
    }

    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.metrics().sum(name, labels)
    }

    /// SIGTERM, and wait for the exit (the Lease is released on the way out).
    pub fn stop(mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Reports {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The chart's ServiceAccounts and RBAC (rendered by the pinned helm), applied as the chart would.
pub fn install_chart_rbac(cp: &ControlPlane) {
    let helm = helm().unwrap_or_else(|e| panic!("helm: {e}"));
    let chart = repo().join("charts/ha-guard");
    let out = Command::new(helm)
        .args(["template", "ha-guard", chart.to_str().expect("path"), "--namespace", REPORTS_NS])
        .output()
        .expect("helm template");
    assert!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
    let rbac: Vec<Value> = yaml_docs(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding")
            )
        })
        .collect();
    assert!(rbac.len() >= 6, "the chart's RBAC: {rbac:?}");
    cp.kubectl_in(&["apply", "-f", "-"], &yaml_file(&rbac)).success();
}

pub fn token_kubeconfig(cp: &ControlPlane, service_account: &str) -> PathBuf {
    let token = cp.kubectl(&["-n", REPORTS_NS, "create", "token", service_account, "--duration=1h"]).success().stdout;
    cp.token_kubeconfig(token.trim(), &cp.dir().join(format!("{service_account}.kubeconfig")))
}

/// ha-guard's report of `namespace` (`""`: the ClusterPolicyReport), if there is one.
pub fn report(cp: &ControlPlane, namespace: &str) -> Option<Value> {
    let k = if namespace.is_empty() {
        cp.kubectl(&["get", "clusterpolicyreports.wgpolicyk8s.io", "ha-guard", "-o", "json"])
    } else {
        cp.kubectl(&["-n", namespace, "get", "policyreports.wgpolicyk8s.io", "ha-guard", "-o", "json"])
    };
    k.ok().then(|| k.json())
}

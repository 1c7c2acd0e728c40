//! End-to-end: warnings that are still true when the apply finishes (issue 43). Both webhooks
//! registered with a real kube-apiserver, an application of three objects (a Deployment scaled by
//! an HPA, covered by a PDB) applied as users and their tools apply it:
//!
//! 1. `kubectl apply -f` of one multi-document file, in every order of the three objects,
//!    client-side and server-side: no warning (the PDB or the workload may be the next object).
//! 2. As Helm installs it (`helm install`, which orders by kind) and as `helm template` renders it:
//!    no warning; a chart whose Deployment has a real problem is warned through the same channel.
//! 3. The same files without the PDB: still no warning at admission; `pdb-missing` (the same
//!    message) in `ha-guard audit`, in the background audit's PolicyReport within one interval,
//!    and in `ha-guard check --complete` of the file.
//! 4. An UPDATE of that Deployment: not warned within the grace (`--absence-grace`, 8 s here),
//!    warned once the Deployment is older than it.

#[path = "support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");
/// ha-guard's namespace: where the background audit's Lease is.
const NS: &str = "ha-guard";
const INTERVAL: Duration = Duration::from_secs(5);
const GRACE: Duration = Duration::from_secs(8);

/// The application: `web` with no `spec.replicas` (the HPA owns the count), its HPA (floor 3) and
/// a PDB that always lets one pod go. Compliant in every respect.
fn deployment_of(ns: &str) -> Value {
    let mut d = spread_out(deployment(ns, "web", 1));
    d["spec"].as_object_mut().expect("spec").remove("replicas");
    d
}

fn app(ns: &str) -> [(char, Value); 3] {
    [
        ('d', deployment_of(ns)),
        ('p', pdb(ns, "web", "web", json!({"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow"}))),
        ('h', hpa(ns, "web", "web", 3, 6)),
    ]
}

/// Every order of `items`.
fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first.clone());
            out.push(tail);
        }
    }
    out
}

fn write_file(cp: &ControlPlane, name: &str, docs: &[Value]) -> std::path::PathBuf {
    let path = cp.root().join(format!("{name}.yaml"));
    std::fs::write(&path, yaml_file(docs)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

/// The rule IDs of ha-guard's warnings (`[rule-id] ...`) in `text`, wherever a tool prints them
/// (kubectl: `Warning: [...`, helm: client-go's `warnings.go:NN] [...`).
fn warned_rules(text: &str) -> Vec<String> {
    text.match_indices('[')
        .filter_map(|(at, _)| {
            let rest = &text[at + 1..];
            let id = &rest[..rest.find("] ")?];
            (!id.is_empty() && id.chars().all(|c| c.is_ascii_lowercase() || c == '-')).then(|| id.to_string())
        })
        .collect()
}

fn install_crds(cp: &ControlPlane) {
    let crds = repo().join("charts/ha-guard/crds");
    cp.kubectl(&["apply", "-f", crds.to_str().expect("path")]).success();
    for crd in ["policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"] {
        cp.kubectl(&["wait", "--for", "condition=established", "--timeout=30s", &format!("crd/{crd}")]).success();
    }
}

#[test]
fn warnings_are_still_true_when_the_apply_finishes() {
    let mut h = Harness::start(Setup {
        nodes: &["node-a", "node-b", "node-c"],
        before: Some(Box::new(|cp| {
            install_crds(cp);
            cp.namespace(NS, &[]);
        })),
        spec: Some(Box::new(|spec| {
            spec.args = vec![
                "--absence-grace".into(),
                format!("{}s", GRACE.as_secs()),
                "--audit-interval".into(),
                format!("{}s", INTERVAL.as_secs()),
            ];
            spec.env = vec![("POD_NAMESPACE".into(), NS.into())];
        })),
        ..Default::default()
    });
    let mut steps = h.steps();
    let guard = h.guard();
    let (cp, hg) = (&h.cp, &h.hg);
    steps.run("1 every order, client-side and server-side: no warning", || every_order(cp, hg));
    steps.run("2 as Helm installs and renders it: no warning", || helm_orders(cp));
    steps.run("3 without the PDB: pdb-missing in the audit, the report and check --complete", || without_the_pdb(cp));
    steps.run("4 an UPDATE warns once the absence has lasted the grace", || update_after_the_grace(cp));
    steps.run("no webhook call failed", || guard.finish(cp));
    steps.finish();
}

/// (1) Six orders × client-side and server-side apply of one file.
fn every_order(cp: &ControlPlane, hg: &HaGuard) {
    let before = hg.metrics().sum("ha_guard_admission_requests_total", &[("webhook", "validate")]);
    let mut applied = 0;
    for order in permutations(&['d', 'p', 'h']) {
        for (mode, flags) in [("csa", &[][..]), ("ssa", &["--server-side"][..])] {
            let letters: String = order.iter().collect();
            let ns = format!("order-{letters}-{mode}");
            cp.namespace(&ns, &[]);
            let objects = app(&ns);
            let docs: Vec<Value> =
                order.iter().map(|c| objects.iter().find(|(k, _)| k == c).expect("object").1.clone()).collect();
            let file = write_file(cp, &ns, &docs);
            let mut args = vec!["apply", "-f", file.to_str().expect("path")];
            args.extend_from_slice(flags);
            let out = cp.kubectl(&args).success().no_warnings();
            eprintln!("[e2e] {ns}: kubectl {} -> {}", args.join(" "), out.stdout.trim().replace('\n', "; "));
            for kind in ["deployment", "pdb", "hpa"] {
                cp.kubectl(&["get", kind, "web", "-n", &ns]).success();
            }
            applied += 3;
        }
    }
    // Not vacuous: every write went through the validating webhook.
    let after = hg.metrics().sum("ha_guard_admission_requests_total", &[("webhook", "validate")]);
    assert!(after - before >= applied as f64, "{applied} writes, {} validations", after - before);
}

/// (2) A chart of the three objects (written in the least helpful order), installed with Helm
/// and rendered with `helm template` into `kubectl apply`.
fn helm_orders(cp: &ControlPlane) {
    let helm = helm().unwrap_or_else(|e| panic!("helm: {e}"));
    let chart = |name: &str, docs: &[Value]| {
        let dir = cp.root().join(format!("chart-{name}"));
        std::fs::create_dir_all(dir.join("templates")).expect("chart dir");
        std::fs::write(dir.join("Chart.yaml"), format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"))
            .expect("Chart.yaml");
        std::fs::write(dir.join("templates/app.yaml"), yaml_file(docs)).expect("templates/app.yaml");
        dir
    };
    let helm_run = |args: &[&str]| {
        let out = Command::new(&helm)
            .args(args)
            .env("KUBECONFIG", cp.kubeconfig())
            .env("HELM_CACHE_HOME", cp.root().join("helm-cache"))
            .env("HELM_CONFIG_HOME", cp.root().join("helm-config"))
            .env("HELM_DATA_HOME", cp.root().join("helm-data"))
            .stdin(Stdio::null())
            .output()
            .expect("run helm");
        let (stdout, stderr) =
            (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string());
        assert!(out.status.success(), "helm {args:?}: {stdout}\n{stderr}");
        (stdout, stderr)
    };
    // The objects carry no namespace: the release's namespace is theirs.
    let reversed: Vec<Value> = app("x")
        .into_iter()
        .rev()
        .map(|(_, mut v)| {
            v["metadata"].as_object_mut().expect("metadata").remove("namespace");
            v
        })
        .collect();
    let dir = chart("web", &reversed);
    let dir_str = dir.to_str().expect("path");

    // helm install: Helm sorts by kind (PDB, Deployment, HPA) and creates them one by one.
    let (_, stderr) =
        helm_run(&["install", "web", dir_str, "-n", "helm-install", "--create-namespace", "--wait=false"]);
    eprintln!("[e2e] helm install stderr: {stderr:?}");
    assert_eq!(warned_rules(&stderr), Vec::<String>::new(), "helm install printed ha-guard warnings: {stderr}");
    for kind in ["deployment", "pdb", "hpa"] {
        cp.kubectl(&["get", kind, "web", "-n", "helm-install"]).success();
    }
    // The channel is open: a chart with a real problem is warned through it.
    let mut loud = reversed.clone();
    loud[2] = pod(loud[2].clone(), json!({"terminationGracePeriodSeconds": 0}));
    let loud_dir = chart("loud", &loud);
    let (_, stderr) = helm_run(&[
        "install",
        "loud",
        loud_dir.to_str().expect("path"),
        "-n",
        "helm-loud",
        "--create-namespace",
        "--wait=false",
    ]);
    assert_eq!(warned_rules(&stderr), ["termination-grace-zero"], "helm shows ha-guard's warnings: {stderr}");

    // helm template | kubectl apply -f -: the rendered order.
    let (rendered, _) = helm_run(&["template", "web", dir_str, "-n", "helm-template"]);
    let kinds: Vec<String> =
        yaml_docs(&rendered).iter().map(|d| d["kind"].as_str().unwrap_or_default().to_string()).collect();
    eprintln!("[e2e] helm template renders {kinds:?}");
    cp.namespace("helm-template", &[]);
    cp.kubectl_in(&["apply", "-n", "helm-template", "-f", "-"], &rendered).success().no_warnings();
}

/// (3) The files without the PDB, in both orders of the other two.
fn without_the_pdb(cp: &ControlPlane) {
    let mut files = Vec::new();
    for (ns, order) in [("nopdb-dh", ['d', 'h']), ("nopdb-hd", ['h', 'd'])] {
        cp.namespace(ns, &[]);
        let objects = app(ns);
        let docs: Vec<Value> =
            order.iter().map(|c| objects.iter().find(|(k, _)| k == c).expect("object").1.clone()).collect();
        let file = write_file(cp, ns, &docs);
        cp.kubectl(&["apply", "-f", file.to_str().expect("path")]).success().no_warnings();
        files.push((ns, file));
    }
    let applied = Instant::now();

    // ha-guard audit: the cluster as stored.
    let out = Command::new(BIN)
        .args(["audit", "--format", "json"])
        .env("KUBECONFIG", cp.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("run ha-guard audit");
    let audit: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("audit json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let missing_in = |findings: &Value, ns: &str| -> Option<String> {
        findings["findings"].as_array().expect("findings").iter().find_map(|f| {
            (f["rule"] == "pdb-missing" && f["namespace"] == ns && f["name"] == "web")
                .then(|| f["message"].as_str().unwrap_or_default().to_string())
        })
    };
    for (ns, _) in &files {
        let message =
            missing_in(&audit, ns).unwrap_or_else(|| panic!("pdb-missing in {ns} in ha-guard audit: {audit}"));
        assert!(message.contains("no PodDisruptionBudget covers it"), "{message}");
    }
    // Nothing is missing where the PDB came with the rest, whatever the order.
    let elsewhere: Vec<&Value> = audit["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| {
            f["namespace"]
                .as_str()
                .is_some_and(|n| n.starts_with("order-") || n == "helm-install" || n == "helm-template")
        })
        .filter(|f| f["name"] == "web")
        .collect();
    assert!(elsewhere.is_empty(), "the complete applications are clean in the audit: {elsewhere:#?}");

    // check --complete of the same file: the same finding, the same message.
    let (ns, file) = &files[0];
    let out = Command::new(BIN)
        .args(["check", "--complete", "--format", "json", "--namespace", ns, "-f"])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .expect("run ha-guard check");
    let checked: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check json ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "pdb-missing only warns: {checked}");
    assert_eq!(missing_in(&checked, ns), missing_in(&audit, ns), "check --complete and the audit say the same");
    // Without --complete, check cannot know the PDB is not in another file.
    let out = Command::new(BIN)
        .args(["check", "--format", "json", "--namespace", ns, "-f"])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .expect("run ha-guard check");
    let partial: Value = serde_json::from_slice(&out.stdout).expect("check json");
    assert_eq!(missing_in(&partial, ns), None, "{partial}");

    // The background audit's report, within one interval (plus the run).
    for (ns, _) in &files {
        let report =
            poll(&format!("pdb-missing in the PolicyReport of {ns}"), WAIT, Duration::from_millis(250), || {
                let k = cp.kubectl(&["-n", ns, "get", "policyreports.wgpolicyk8s.io", "ha-guard", "-o", "json"]);
                if !k.ok() {
                    return Err(k.output());
                }
                let report = k.json();
                let found =
                    report["results"].as_array().into_iter().flatten().any(|r| {
                        r["rule"] == "pdb-missing" && r["result"] == "warn" && r["resources"][0]["name"] == "web"
                    });
                if found { Ok(report) } else { Err(report.to_string()) }
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let took = applied.elapsed();
        eprintln!("[e2e] pdb-missing in the report of {ns} {took:.1?} after the apply (interval {INTERVAL:?})");
        assert!(took <= INTERVAL * 3, "the report said it {took:?} after the apply; the interval is {INTERVAL:?}");
        let result = report["results"]
            .as_array()
            .expect("results")
            .iter()
            .find(|r| r["rule"] == "pdb-missing")
            .expect("the result")
            .clone();
        assert_eq!(result["message"].as_str(), missing_in(&audit, ns).as_deref(), "the report's message: {result}");
    }
}

/// (4) `kubectl set image` of a Deployment with no PDB: within the grace, no warning; once the
/// Deployment is older than the grace, `pdb-missing`.
fn update_after_the_grace(cp: &ControlPlane) {
    let ns = "late";
    cp.namespace(ns, &[]);
    let file = write_file(cp, ns, &[deployment_of(ns), hpa(ns, "web", "web", 3, 6)]);
    cp.kubectl(&["apply", "-f", file.to_str().expect("path")]).success().no_warnings();
    let created = Instant::now();
    set_image(cp, ns, "nginx:1.28").no_warnings();
    assert!(created.elapsed() < GRACE / 2, "the first update came {:?} after the create", created.elapsed());
    // Whole seconds of creationTimestamp, and a second more for the clocks.
    std::thread::sleep((GRACE + Duration::from_secs(2)).saturating_sub(created.elapsed()));
    set_image(cp, ns, "nginx:1.29").warns(&["pdb-missing"]).shows(&[
        "[pdb-missing] spec.replicas: ",
        "no PodDisruptionBudget covers it",
        "Fix: add a PodDisruptionBudget",
    ]);
    // The same write where a PDB came later in the grace: nothing is missing.
    cp.apply(pdb(ns, "web", "web", json!({"maxUnavailable": 1}))).success().no_warnings();
    poll("the PDB reaches the view", WAIT, Duration::from_millis(200), || {
        let out = set_image(cp, ns, &format!("nginx:1.{}", 30 + created.elapsed().as_millis() % 1000));
        if warned_rules(&out.stderr).is_empty() { Ok(()) } else { Err(out.stderr) }
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

fn set_image(cp: &ControlPlane, ns: &str, image: &str) -> Kubectl {
    cp.kubectl(&["set", "image", "-n", ns, "deployment/web", &format!("app={image}")]).success()
}

//! End-to-end: server-side apply as Argo CD and Flux make it (issue 42), against a real
//! kube-apiserver with both webhooks registered as shipped.
//!
//! No GitOps controller runs here. Building Flux's kustomize-controller and a source for it (or
//! Argo CD's application controller, repo server and Redis) from the Go module proxy, installing
//! their CRDs and waiting for their reconcile loops would multiply this test's build and run time
//! for what they send the apiserver, which is reproduced here request for request: a server-side
//! apply under the controller's field manager with ownership forced (`kubectl apply --server-side
//! --force-conflicts --field-manager=kustomize-controller`, Flux's; `argocd-controller`, Argo CD's
//! with its `ServerSideApply=true` sync option), their server-side dry-run (Flux's drift detection,
//! Argo CD's server-side diff) as `--dry-run=server` and `kubectl diff --server-side` under the
//! same manager, and Argo CD's default sync, a client-side `kubectl apply`. The HPA controller's
//! scale writes are reproduced as writes through the `scale` subresource (`kubectl scale`, and a
//! PATCH of `/scale` under the controller's field manager, `kube-controller-manager`); no
//! kube-controller-manager runs, so a resourceVersion moves only for this test's writes.
//!
//! 1. `hpa-replicas-conflict` under server-side apply, for each manager: a Deployment with
//!    `replicas: 3` and its HPA warn at admission (the Deployment's CREATE names the manager, the
//!    HPA's write names the Deployment), the scale writes never warn and take the field from the
//!    manager, the next sync that resets the count warns and names the manager, and `ha-guard
//!    audit` reports it; the same manifest without `replicas` warns nowhere.
//! 2. Dry-runs are the real thing: `--dry-run=server` under each manager gets the denial, the
//!    warnings and the mutated object the real apply gets.
//! 3. No drift, for each manager and for client-side apply: the first apply, then ten re-applies of
//!    the same manifests change no resourceVersion, report no conflict and no warning, and `kubectl
//!    diff` is empty; the same with the manifests' own values for the injected fields (they win,
//!    and are then the manager's), and back (the manager's apply drops them, the webhook adds its
//!    own again).

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");

/// How a tool writes: its field manager, and the flags of its apply and diff.
#[derive(Clone, Copy)]
struct Tool {
    /// Short, for namespaces.
    short: &'static str,
    /// The field manager, or `None` for client-side apply.
    manager: Option<&'static str>,
}

const FLUX: Tool = Tool { short: "flux", manager: Some("kustomize-controller") };
const ARGO_CD: Tool = Tool { short: "argo", manager: Some("argocd-controller") };
/// Argo CD's default sync: client-side `kubectl apply` (a last-applied annotation, no Apply entry).
const CLIENT_SIDE: Tool = Tool { short: "csa", manager: None };

impl Tool {
    fn flags(self) -> Vec<String> {
        match self.manager {
            Some(m) => vec!["--server-side".into(), "--force-conflicts".into(), format!("--field-manager={m}")],
            None => Vec::new(),
        }
    }

    /// `kubectl apply` of `file` as the tool does it, with `extra` flags.
    fn apply(self, cp: &ControlPlane, file: &Path, extra: &[&str]) -> Kubectl {
        let mut args: Vec<String> = vec!["apply".into()];
        args.extend(self.flags());
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(["-f".into(), file.display().to_string()]);
        cp.kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// `kubectl diff` of `file` as the tool's dry-run sees it.
    fn diff(self, cp: &ControlPlane, file: &Path) -> Kubectl {
        let mut args: Vec<String> = vec!["diff".into()];
        args.extend(self.flags());
        args.extend(["-f".into(), file.display().to_string()]);
        cp.kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn name(self) -> &'static str {
        self.manager.unwrap_or("client-side kubectl apply")
    }
}

fn write_file(cp: &ControlPlane, name: &str, docs: &[Value]) -> PathBuf {
    let path = cp.root().join(format!("{name}.yaml"));
    std::fs::write(&path, yaml_file(docs)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}

fn get(cp: &ControlPlane, ns: &str, what: &str) -> Value {
    cp.kubectl(&["get", what, "-n", ns, "-o", "json", "--show-managed-fields"]).success().json()
}

/// What kubectl says of a server-side apply's field conflict (`Apply failed with 1 conflict:
/// conflict with "kube-controller-manager" ...`), forced or not.
const CONFLICT: &[&str] = &["Apply failed", "conflict with \""];

/// ha-guard's warnings in a kubectl run.
fn warned(out: &Kubectl) -> Vec<String> {
    out.warnings().into_iter().filter(|w| w.starts_with('[')).collect()
}

/// ha-guard's warnings of `hpa-replicas-conflict` in a kubectl run (others, such as
/// `pdb-missing` once the grace has passed, are not what step 1 is about).
fn conflicts_warned(out: &Kubectl) -> Vec<String> {
    warned(out).into_iter().filter(|w| w.starts_with(&format!("[{RULE}]"))).collect()
}

/// The line of kubectl's stderr that carries ha-guard's denial.
fn denial(out: &Kubectl) -> String {
    out.stderr.lines().find(|l| l.contains("denied the request")).unwrap_or_default().to_string()
}

/// `ha-guard audit --namespace NS --format json` against the control plane.
fn audit(cp: &ControlPlane, ns: &str) -> Value {
    let out = Command::new(BIN)
        .args(["audit", "--namespace", ns, "--format", "json"])
        .env("KUBECONFIG", cp.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("ha-guard audit runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "ha-guard audit: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("audit JSON ({e}): {stdout}"))
}

fn conflicts_in(report: &Value) -> Vec<Value> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["rule"] == "hpa-replicas-conflict")
        .cloned()
        .collect()
}

/// The managers that own `spec.replicas` of a Deployment (JSON with managedFields), with their
/// operation and subresource.
fn replicas_owners(d: &Value) -> Vec<String> {
    d["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e.pointer("/fieldsV1/f:spec/f:replicas").is_some())
        .map(|e| {
            format!(
                "{} {}{}",
                e["manager"].as_str().unwrap_or(""),
                e["operation"].as_str().unwrap_or(""),
                e["subresource"].as_str().map(|s| format!(" /{s}")).unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn gitops_tools_server_side_apply() {
    let mut h = Harness::start(Setup { nodes: &["node-a", "node-b", "node-c"], ..Default::default() });
    let mut steps = h.steps();
    let guard = h.guard();
    let (cp, hg) = (&h.cp, &h.hg);
    for tool in [FLUX, ARGO_CD] {
        steps.run(&format!("1 hpa-replicas-conflict under {}", tool.name()), || replicas_conflict(cp, hg, tool));
        steps.run(&format!("1 without replicas under {}: silent", tool.name()), || without_replicas(cp, hg, tool));
        steps.run(&format!("2 a dry-run under {} is the real apply", tool.name()), || dry_run(cp, hg, tool));
    }
    for tool in [FLUX, ARGO_CD, CLIENT_SIDE] {
        steps.run(&format!("3 ten re-applies under {} change nothing", tool.name()), || no_drift(cp, hg, tool));
    }
    steps.run("no webhook call failed", || guard.finish(cp));
    steps.finish();
}

// --- 1 --------------------------------------------------------------------------------------

const RULE: &str = "hpa-replicas-conflict";

fn web(ns: &str, replicas: Option<i64>) -> Value {
    let mut d = spread_out(deployment(ns, "web", replicas.unwrap_or(1)));
    if replicas.is_none() {
        d["spec"].as_object_mut().expect("spec").remove("replicas");
    }
    d
}

/// (1) The HPA first (so the Deployment's CREATE is judged against it), then the Deployment with
/// `replicas: 3`, the HPA's next write, the scale writes, the next sync, and the audit.
fn replicas_conflict(cp: &ControlPlane, hg: &HaGuard, tool: Tool) {
    let manager = tool.manager.expect("a server-side tool");
    let ns = format!("conflict-{}", tool.short);
    hg.created("Namespace", 1, || cp.namespace(&ns, &[]));
    let hpa_file = write_file(cp, &format!("{ns}-hpa"), &[hpa(&ns, "web", "web", 2, 8)]);
    hg.created("HorizontalPodAutoscaler", 1, || tool.apply(cp, &hpa_file, &[]).success().hides(&[RULE]));

    // The first sync's CREATE: the Apply entry says the manifest sets the count.
    let app = write_file(cp, &format!("{ns}-app"), &[web(&ns, Some(3)), hpa(&ns, "web", "web", 2, 8)]);
    let created = hg.created("Deployment", 1, || tool.apply(cp, &app, &[]).success());
    let w = conflicts_warned(&created);
    assert_eq!(w.len(), 1, "one warning, on the Deployment: {}", created.output());
    for part in [
        &format!(
            "[{RULE}] spec.replicas: Deployment {ns}/web sets spec.replicas: 3 by server-side apply (field manager \
             {manager}) while HPA web (min 2, max 8) scales it"
        ),
        "every apply of this manifest (kubectl apply, a Helm upgrade, an Argo CD or Flux sync) resets the count",
        &format!("Field manager {manager} owns spec.replicas by server-side apply"),
    ] {
        assert!(w[0].contains(part), "{part:?} not in {}", w[0]);
    }
    let d = get(cp, &ns, "deployment/web");
    assert_eq!(replicas_owners(&d), [format!("{manager} Apply")], "{d:#}");

    // The HPA's next write (its bounds changed in git) is judged against the live Deployment.
    let app = write_file(cp, &format!("{ns}-app"), &[web(&ns, Some(3)), hpa(&ns, "web", "web", 2, 9)]);
    let hpa_write = tool.apply(cp, &app, &[]).success();
    let w = conflicts_warned(&hpa_write);
    assert_eq!(w.len(), 1, "{}", hpa_write.output());
    let part = format!(
        "[{RULE}] spec.scaleTargetRef: HorizontalPodAutoscaler {ns}/web (min 2, max 9) scales Deployment {ns}/web, \
         whose manifest sets spec.replicas: 3 by server-side apply (field manager {manager})"
    );
    assert!(w[0].contains(&part), "{part:?} not in {}", w[0]);
    assert_eq!(conflicts_in(&audit(cp, &ns)).len(), 1, "the audit reports it while {manager} owns the count");

    // The HPA controller's scale writes: never judged by the rule, and they take the field.
    cp.kubectl(&["scale", "deployment", "web", "-n", &ns, "--replicas=5"]).success().hides(&[RULE]);
    let patch = r#"{"spec":{"replicas":6}}"#;
    cp.kubectl(&[
        "patch",
        "deployment",
        "web",
        "-n",
        &ns,
        "--subresource=scale",
        "--type=merge",
        "-p",
        patch,
        "--field-manager=kube-controller-manager",
    ])
    .success()
    .hides(&[RULE]);
    let d = get(cp, &ns, "deployment/web");
    assert_eq!(d["spec"]["replicas"], 6);
    assert_eq!(replicas_owners(&d), ["kube-controller-manager Update /scale"], "the scale write took the field: {d:#}");
    assert!(
        conflicts_in(&audit(cp, &ns)).is_empty(),
        "between the HPA's scaling and the next sync no manager applies the count (README, GitOps)"
    );

    // The next sync writes 3 back, forcing the field from the HPA controller: warned, named.
    let sync = tool.apply(cp, &app, &[]).success().hides(CONFLICT);
    let w = conflicts_warned(&sync);
    assert_eq!(w.len(), 1, "{}", sync.output());
    let part = format!(
        "[{RULE}] spec.replicas: this write, a server-side apply by field manager {manager}, sets spec.replicas of \
         Deployment {ns}/web to 3 (it was 6)"
    );
    assert!(w[0].contains(&part), "{part:?} not in {}", w[0]);
    let d = get(cp, &ns, "deployment/web");
    assert_eq!((d["spec"]["replicas"].clone(), replicas_owners(&d)), (json!(3), vec![format!("{manager} Apply")]));

    // The audit: the stored Deployment, its managedFields cut to this one fact.
    let found = conflicts_in(&audit(cp, &ns));
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!(
        (f["kind"].as_str(), f["name"].as_str(), f["action"].as_str()),
        (Some("Deployment"), Some("web"), Some("warn"))
    );
    let message = f.to_string();
    assert!(message.contains(&format!("by server-side apply (field manager {manager})")), "{f:#}");
}

/// (1) The same application without `replicas`: nothing warns, at admission or in the audit.
fn without_replicas(cp: &ControlPlane, hg: &HaGuard, tool: Tool) {
    let ns = format!("lean-{}", tool.short);
    hg.created("Namespace", 1, || cp.namespace(&ns, &[]));
    let hpa_file = write_file(cp, &format!("{ns}-hpa"), &[hpa(&ns, "web", "web", 2, 8)]);
    hg.created("HorizontalPodAutoscaler", 1, || tool.apply(cp, &hpa_file, &[]).success().hides(&[RULE]));
    let app = write_file(cp, &format!("{ns}-app"), &[web(&ns, None), hpa(&ns, "web", "web", 2, 8)]);
    hg.created("Deployment", 1, || tool.apply(cp, &app, &[]).success().hides(&[RULE]));
    let d = get(cp, &ns, "deployment/web");
    assert_eq!(d["spec"]["replicas"], 1, "the apiserver's default");
    assert!(replicas_owners(&d).is_empty(), "no manager owns a defaulted field: {d:#}");
    let app = write_file(cp, &format!("{ns}-app"), &[web(&ns, None), hpa(&ns, "web", "web", 2, 9)]);
    tool.apply(cp, &app, &[]).success().hides(&[RULE]);
    cp.kubectl(&["scale", "deployment", "web", "-n", &ns, "--replicas=4"]).success().hides(&[RULE]);
    tool.apply(cp, &app, &[]).success().hides(&[RULE]);
    assert_eq!(get(cp, &ns, "deployment/web")["spec"]["replicas"], 4, "the sync leaves the HPA's count");
    assert!(conflicts_in(&audit(cp, &ns)).is_empty());
}

// --- 2 --------------------------------------------------------------------------------------

/// What the dry-run and the stored object must agree on: the object without what the apiserver
/// sets on a real write only (uid, resourceVersion, timestamps, generation, managedFields' times).
fn comparable(object: &Value) -> Value {
    let mut o = object.clone();
    if let Some(meta) = o["metadata"].as_object_mut() {
        for volatile in ["uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"] {
            meta.remove(volatile);
        }
    }
    o.as_object_mut().map(|m| m.remove("status"));
    o
}

fn items(v: &Value) -> Vec<Value> {
    match v["items"].as_array() {
        Some(items) => items.clone(),
        None => vec![v.clone()],
    }
}

/// (2) `--dry-run=server` under the tool's manager: the same denial, the same warnings and the
/// same mutated objects as the apply it stands for.
fn dry_run(cp: &ControlPlane, hg: &HaGuard, tool: Tool) {
    let ns = format!("dry-{}", tool.short);
    hg.created("Namespace", 1, || cp.namespace(&ns, &[]));
    let dry = ["--dry-run=server", "-o", "json"];

    let bad = write_file(cp, &format!("{ns}-bad"), &[slow_prestop(deployment(&ns, "drainer", 2))]);
    let dry_denied = tool.apply(cp, &bad, &dry).denied(&["prestop-exceeds-grace"]);
    let real_denied = tool.apply(cp, &bad, &[]).denied(&["prestop-exceeds-grace"]);
    assert_eq!(denial(&dry_denied), denial(&real_denied));

    // Mutated (a spread without a selector, a PDB without a policy) and warned (no grace).
    let app = write_file(
        cp,
        &format!("{ns}-app"),
        &[
            pod(
                deployment(&ns, "web", 3),
                json!({"terminationGracePeriodSeconds": 0, "topologySpreadConstraints": [{"maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}),
            ),
            pdb(&ns, "web", "web", json!({"maxUnavailable": 1})),
        ],
    );
    let predicted = tool.apply(cp, &app, &dry).success();
    assert!(cp.kubectl(&["get", "deployment,pdb", "-n", &ns, "-o", "name"]).success().stdout.trim().is_empty());
    let real = hg.created("Deployment", 1, || tool.apply(cp, &app, &[]).success());
    assert_eq!(warned(&predicted), warned(&real), "the same warnings");
    assert!(warned(&real).iter().any(|w| w.starts_with("[termination-grace-zero]")), "{}", real.output());
    let predicted: Vec<Value> = items(&predicted.json()).iter().map(comparable).collect();
    let stored: Vec<Value> = ["deployment/web", "pdb/web"].iter().map(|o| comparable(&get(cp, &ns, o))).collect();
    assert_eq!(predicted, stored, "the dry-run's objects are the stored ones");
    assert_eq!(
        stored[0]["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"],
        json!({"matchLabels": {"app": "web"}})
    );
    assert_eq!(stored[1]["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");

    // An UPDATE: the dry-run of the next sync predicts it too.
    let next = write_file(
        cp,
        &format!("{ns}-next"),
        &[pod(
            deployment(&ns, "web", 2),
            json!({"terminationGracePeriodSeconds": 0, "topologySpreadConstraints": [{"maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}),
        )],
    );
    let predicted = tool.apply(cp, &next, &dry).success();
    let real = tool.apply(cp, &next, &[]).success();
    assert_eq!(warned(&predicted), warned(&real));
    assert_eq!(comparable(&predicted.json()), comparable(&get(cp, &ns, "deployment/web")));
}

// --- 3 --------------------------------------------------------------------------------------

/// The application as a team keeps it in git (the HPA owns the count): the fields ha-guard
/// injects left out (`own`: false), or set to values of their own.
fn app(ns: &str, own: bool) -> Vec<Value> {
    let mut spread =
        json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"});
    let mut d = deployment(ns, "web", 1);
    d["spec"].as_object_mut().expect("spec").remove("replicas");
    let mut budget = json!({"maxUnavailable": 1});
    if own {
        // A selector of its own (its pods' tier too), not the workload's selector ha-guard fills in.
        spread["labelSelector"] =
            json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]});
        d["spec"]["template"]["metadata"]["labels"]["tier"] = json!("frontend");
        budget["unhealthyPodEvictionPolicy"] = json!("IfHealthyBudget");
    }
    vec![
        pod(d, json!({"topologySpreadConstraints": [spread]})),
        pdb(ns, "web", "web", budget),
        hpa(ns, "web", "web", 3, 6),
    ]
}

/// resourceVersion of each object of the application.
fn versions(cp: &ControlPlane, ns: &str) -> BTreeMap<String, String> {
    let list = cp.kubectl(&["get", "deployment,pdb,hpa", "-n", ns, "-o", "json"]).success().json();
    items(&list)
        .iter()
        .map(|i| {
            let key = format!("{}/{}", i["kind"].as_str().unwrap_or(""), i["metadata"]["name"].as_str().unwrap_or(""));
            (key, i["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string())
        })
        .collect()
}

/// The values of the fields ha-guard injects, as stored.
fn injected(cp: &ControlPlane, ns: &str) -> (Value, Value) {
    let d = get(cp, ns, "deployment/web");
    let p = get(cp, ns, "pdb/web");
    (
        d["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"].clone(),
        p["spec"]["unhealthyPodEvictionPolicy"].clone(),
    )
}

/// Ten more applies of `file`: no resourceVersion moves, no conflict, no warning, no difference.
fn ten_reapplies(cp: &ControlPlane, tool: Tool, ns: &str, file: &Path) {
    let first = versions(cp, ns);
    assert_eq!(first.len(), 3, "{first:?}");
    for round in 1..=10 {
        let out = tool.apply(cp, file, &[]).success().no_warnings().hides(CONFLICT);
        assert_eq!(
            versions(cp, ns),
            first,
            "re-apply {round} under {} changed an object: {}",
            tool.name(),
            out.output()
        );
    }
    let diff = tool.diff(cp, file);
    assert!(
        diff.code == 0 && diff.stdout.trim().is_empty(),
        "kubectl diff under {} after the first apply: {}",
        tool.name(),
        diff.output()
    );
}

/// (3) Apply, ten re-applies; the manifests' own values, ten re-applies; back, ten re-applies.
fn no_drift(cp: &ControlPlane, hg: &HaGuard, tool: Tool) {
    let ns = format!("drift-{}", tool.short);
    hg.created("Namespace", 1, || cp.namespace(&ns, &[]));
    let ours = (json!({"matchLabels": {"app": "web"}}), json!("AlwaysAllow"));

    let plain = write_file(cp, &format!("{ns}-plain"), &app(&ns, false));
    hg.created("Deployment", 1, || tool.apply(cp, &plain, &[]).success());
    assert_eq!(injected(cp, &ns), ours, "ha-guard's values, added by the mutating webhook");
    if let Some(manager) = tool.manager {
        // Added after the apiserver recorded the apply's fields: the manager does not own them.
        let d = get(cp, &ns, "deployment/web")["metadata"]["managedFields"].to_string();
        assert!(d.contains(manager), "{d}");
        assert!(!d.contains("f:labelSelector"), "nobody owns the injected selector: {d}");
        let p = get(cp, &ns, "pdb/web")["metadata"]["managedFields"].to_string();
        assert!(!p.contains("f:unhealthyPodEvictionPolicy"), "nobody owns the injected policy: {p}");
    }
    ten_reapplies(cp, tool, &ns, &plain);

    // The manifests set the fields themselves: their values win, as DESIGN.md's contract says.
    let own = write_file(cp, &format!("{ns}-own"), &app(&ns, true));
    let out = tool.apply(cp, &own, &[]).success().hides(CONFLICT);
    let own_values = (
        json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
        json!("IfHealthyBudget"),
    );
    assert_eq!(injected(cp, &ns), own_values, "the manifests' values: {}", out.output());
    assert_eq!(warned(&out).len(), 1, "IfHealthyBudget is warned about, not rewritten: {}", out.output());
    assert!(warned(&out)[0].starts_with("[pdb-unhealthy-eviction-policy]"), "{}", out.output());
    ten_reapplies(cp, tool, &ns, &own);

    // Back to the manifests without them: the manager's apply drops the values it owned (a
    // client-side apply: its last-applied manifest had them), and the webhook adds its own again.
    tool.apply(cp, &plain, &[]).success().hides(CONFLICT);
    assert_eq!(injected(cp, &ns), ours, "ha-guard's values again");
    ten_reapplies(cp, tool, &ns, &plain);
}

//! End-to-end: ha-guard registered with a real kube-apiserver through the shipped webhook
//! configurations (`manifests/ha-guard.yaml`) and driven with the real `kubectl`, as a user
//! would. What is asserted is what kubectl prints and what the apiserver stores.
//!
//! One control plane and one ha-guard serve every step (`tests/support`); each step works in its
//! own namespace. A step that writes the second object of a cross-object pair first waits until
//! ha-guard's live view has seen the first (its `ha_guard_cache_objects` gauge): the view follows
//! watch streams and is eventually consistent, as `src/live.rs` documents.

#[path = "support/mod.rs"]
mod support;

use serde_json::{Value, json};
use support::*;

/// The denial text after kubectl's own prefix, e.g. `[rule] path: message`.
fn denial(out: &Kubectl) -> String {
    let marker = "denied the request: ";
    let at = out.stderr.find(marker).unwrap_or_else(|| panic!("no denial in: {}", out.stderr));
    out.stderr[at + marker.len()..].trim_end().to_string()
}

/// `kubectl get KIND NAME -n NS -o json`, which must succeed.
fn get(cp: &ControlPlane, ns: &str, kind: &str, name: &str) -> Value {
    cp.kubectl(&["get", kind, name, "-n", ns, "-o", "json"]).success().json()
}

/// Asserts the object does not exist.
#[track_caller]
fn absent(cp: &ControlPlane, ns: &str, kind: &str, name: &str) {
    cp.kubectl(&["get", kind, name, "-n", ns]).failure().shows(&["NotFound"]);
}

/// Creates namespace `ns` (with labels) and waits until ha-guard's view has it.
fn namespace(cp: &ControlPlane, hg: &HaGuard, ns: &str, labels: &[(&str, &str)]) {
    hg.created("Namespace", 1, || cp.namespace(ns, labels));
}

/// Applies `obj` (which must be admitted) and waits until ha-guard's view holds one more `kind`.
fn create(cp: &ControlPlane, hg: &HaGuard, obj: &Value) -> Kubectl {
    let kind = obj["kind"].as_str().expect("kind").to_string();
    hg.created(&kind, 1, || cp.apply(obj).success())
}

const SPREADS: &str = "spec.template.spec.topologySpreadConstraints";

#[test]
fn kubectl_against_a_real_apiserver() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    cp.nodes(&["node-a", "node-b", "node-c"]);

    // Ratcheting needs objects that were out of policy before the guardrail was installed.
    cp.namespace("ratchet", &[]);
    cp.apply(slow_prestop(deployment("ratchet", "legacy", 1))).success();

    let mut fail_open = FailOpen::start(&cp);
    let mut hg = HaGuard::start(&cp).unwrap_or_else(|e| panic!("ha-guard: {e}"));
    register(&cp, &hg, &[Webhooks::Mutating, Webhooks::Validating])
        .unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(20)));

    let log = hg.log_path();
    let mut steps = Steps::new(move || format!("ha-guard log (last lines):\n{}", tail(&log, 12)));
    steps.run("1 deny cases", || deny_cases(&cp, &hg));
    steps.run("1 hpa-replica-bounds (the apiserver answers first)", || hpa_bounds(&cp, &hg));
    steps.run("1 spread-selector-missing (with and without the mutating webhook)", || selector_missing(&cp, &hg));
    steps.run("1 warn cases", || warn_cases(&cp, &hg));
    steps.run("2 mutation and server-side apply", || mutation(&cp, &hg));
    steps.run("3 server-side dry-run", || dry_run(&cp, &hg));
    steps.run("4 cross-object from both sides", || cross_object(&cp, &hg));
    steps.run("4 hpa-replicas-conflict from both sides, never on scale writes", || replicas_conflict(&cp, &hg));
    steps.run("5 ratcheting", || ratcheting(&cp));
    steps.run("6 exemptions and namespace modes", || exemptions(&cp, &hg));
    steps.run("8 fail-closed webhooks from every side", || fail_closed_webhooks_step(&cp, &hg));
    steps.run("7 failure policy", || failure_policy(&cp, &mut hg, &mut fail_open));
    steps.run("no webhook call failed or failed open but while ha-guard was down on purpose (7)", || {
        fail_open.finish(&cp)
    });
    steps.finish();
}

/// (1) Every deny rule of the catalogue: kubectl fails with the rule ID and the message, and
/// nothing is stored.
fn deny_cases(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "deny";
    namespace(cp, hg, ns, &[]);

    let mismatch = pod(
        deployment(ns, "mismatch", 2),
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "other"}}}]}),
    );
    cp.apply(mismatch).denied(&["spread-selector-mismatch"]).shows(&[
        &format!("[spread-selector-mismatch] {SPREADS}[0].labelSelector: "),
        "has labelSelector app=other which does not match this Deployment's pod template labels (app=mismatch)",
        "Fix: set labelSelector to the workload's own selector (app=mismatch)",
    ]);
    absent(cp, ns, "deployment", "mismatch");

    // A soft hostname spread keeps replicas-colocated quiet but is no hard one-per-node rule.
    let hostnet = pod(
        deployment(ns, "hostnet", 2),
        json!({"hostNetwork": true, "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "hostnet"}}}]}),
    );
    cp.apply(hostnet).denied(&["host-network-colocation"]).shows(&[
        "[host-network-colocation] spec.template.spec.hostNetwork: ",
        "Deployment hostnet (replicas 2) uses hostNetwork: true and can run 2 replicas, but nothing keeps two of them off one node",
        "Fix: ",
    ]);
    absent(cp, ns, "deployment", "hostnet");

    let csi = merge(
        pod(
            spread_out(deployment(ns, "csi-controller", 2)),
            json!({"containers": [
                {"name": "csi-provisioner", "image": "registry.k8s.io/sig-storage/csi-provisioner:v5.1.0"},
                {"name": "driver", "image": "example.com/csi-driver:1.0"}]}),
        ),
        json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}}}),
    );
    cp.apply(csi).denied(&["csi-controller-recreate"]).shows(&[
        "[csi-controller-recreate] spec.strategy.type: ",
        "Deployment csi-controller (replicas 2) is a CSI controller (csi-provisioner) with strategy Recreate and up to 2 replicas",
        "Fix: use strategy RollingUpdate",
    ]);
    absent(cp, ns, "deployment", "csi-controller");

    // rwo-volume-multi-replica needs the claim in ha-guard's view first.
    create(cp, hg, &pvc(ns, "data", "ReadWriteOnce"));
    let db = mounting(spread_out(deployment(ns, "db", 2)), "data");
    cp.apply(db).denied(&["rwo-volume-multi-replica"]).shows(&[
        "[rwo-volume-multi-replica] spec.template.spec.volumes[0].persistentVolumeClaim.claimName: ",
        "Deployment db (replicas 2) can run 2 pods that all mount PersistentVolumeClaim data (access modes ReadWriteOnce)",
        "Fix: ",
    ]);
    absent(cp, ns, "deployment", "db");

    // pdb-blocks-eviction: the Deployment first, then the PDB that would block every eviction.
    create(cp, hg, &deployment(ns, "single", 1));
    let out = cp.apply(pdb(ns, "single", "single", json!({"minAvailable": 1}))).denied(&["pdb-blocks-eviction"]);
    out.shows(&[
        "[pdb-blocks-eviction] spec.minAvailable: ",
        "Deployment single (replicas 1)",
        "allows 0 disruptions",
        "Fix: ",
    ]);
    absent(cp, ns, "pdb", "single");

    // pdb-overlap: a second PDB over pods a first one already covers.
    create(cp, hg, &spread_out(deployment(ns, "shared", 3)));
    create(cp, hg, &pdb(ns, "shared-a", "shared", json!({"maxUnavailable": 1})));
    cp.apply(pdb(ns, "shared-b", "shared", json!({"maxUnavailable": 1}))).denied(&["pdb-overlap"]).shows(&[
        "[pdb-overlap] spec.selector: ",
        "covers the pods of Deployment deny/shared, which PodDisruptionBudget shared-a also covers",
    ]);
    absent(cp, ns, "pdb", "shared-b");

    cp.apply(slow_prestop(deployment(ns, "drainer", 1))).denied(&["prestop-exceeds-grace"]).shows(&[
        "[prestop-exceeds-grace] spec.template.spec.containers[0].lifecycle.preStop: ",
        "container app of Deployment deny/drainer sleeps 20 s in its preStop hook, at least the pod's termination grace period of 10 s",
        "Fix: set terminationGracePeriodSeconds above 20",
    ]);
    absent(cp, ns, "deployment", "drainer");
    // The `sleep` action form never reaches ha-guard: the apiserver refuses it itself.
    let sleep_action = pod(
        deployment(ns, "sleeper", 1),
        json!({"terminationGracePeriodSeconds": 10,
            "containers": [{"name": "app", "image": "nginx:1.27", "lifecycle": {"preStop": {"sleep": {"seconds": 20}}}}]}),
    );
    cp.apply(sleep_action)
        .failure()
        .shows(&["Invalid value: 20: must be non-negative and less than terminationGracePeriodSeconds (10)"])
        .hides(&["[prestop-exceeds-grace]"]);

    // The denial is one line per deny finding, each prefixed [rule-id]: two at once.
    let both = slow_prestop(pod(deployment(ns, "both", 2), json!({"hostNetwork": true})));
    let out = cp.apply(both).denied(&["host-network-colocation", "prestop-exceeds-grace"]);
    let text = denial(&out);
    assert!(text.lines().filter(|l| l.starts_with('[')).count() >= 2, "one line per denial: {text}");
}

/// (1) hpa-replica-bounds: the apiserver's own validation runs before validating webhooks, so
/// for the bounds it refuses the user sees the apiserver's message and ha-guard is never asked
/// (the rule serves `check`). From Kubernetes 1.37 (HPAScaleToZero beta, on by default) the
/// apiserver takes a floor of 0 when an object or external metric drives the HPA: that one
/// reaches ha-guard, which refuses it.
fn hpa_bounds(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "hpa-bounds";
    namespace(cp, hg, ns, &[]);
    create(cp, hg, &spread_out(deployment(ns, "web", 2)));
    let asked = || hg.metrics().sum("ha_guard_admission_requests_total", &[("kind", "HorizontalPodAutoscaler")]);
    let before = asked();
    cp.apply(hpa(ns, "inverted", "web", 3, 2))
        .failure()
        .shows(&["spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"])
        .hides(&["[hpa-replica-bounds]", "ha-guard.io"]);
    cp.apply(hpa(ns, "zero", "web", 0, 2))
        .failure()
        .shows(&["spec.metrics: Forbidden: must specify at least one Object or External metric to support scaling to zero replicas"])
        .hides(&["[hpa-replica-bounds]"]);
    assert_eq!(asked(), before, "the apiserver rejected the HPAs before calling ha-guard");
    absent(cp, ns, "hpa", "inverted");
    let mut to_zero = hpa(ns, "to-zero", "web", 0, 2);
    to_zero["spec"]["metrics"] = json!([{"type": "External", "external": {
        "metric": {"name": "queue_messages_ready"},
        "target": {"type": "AverageValue", "averageValue": "30"}}}]);
    cp.apply(to_zero.clone()).failure().shows(&[
        "admission webhook \"validate.ha-guard.io\" denied the request",
        "[hpa-replica-bounds]",
        "minReplicas 0, below 1",
        "set minReplicas to at least 1",
    ]);
    assert!(asked() > before, "the apiserver took the floor of 0 and asked ha-guard");
    absent(cp, ns, "hpa", "to-zero");
    // A worker meant to scale to zero says so, and is admitted.
    to_zero["metadata"]["annotations"] = json!({"ha-guard.io/allow-hpa-replica-bounds": "queue worker, idle at night"});
    cp.apply(to_zero).success();
    cp.kubectl(&["delete", "hpa", "to-zero", "-n", ns]).success();
    // A good HPA goes through ha-guard (and is counted).
    let before = asked();
    cp.apply(hpa(ns, "good", "web", 2, 4)).success();
    assert!(asked() > before, "a valid HPA is reviewed by ha-guard");
}

/// (1) spread-selector-missing: with the mutating webhook installed (as shipped) the missing
/// selector is filled in, so the user sees the write succeed and the selector appear; with the
/// validating webhook alone, the write is refused with the rule's message.
fn selector_missing(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "selector-missing";
    namespace(cp, hg, ns, &[]);
    let bare = |name: &str, when: &str| {
        pod(
            deployment(ns, name, 2),
            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": when}]}),
        )
    };
    // The apiserver's own "null labelSelector" warning does not show either: the selector is
    // filled before the apiserver validates the object.
    cp.apply(bare("filled", "DoNotSchedule")).success().hides(&["[spread-selector-missing]", "null labelSelector"]);
    let got = get(cp, ns, "deployment", "filled");
    assert_eq!(
        got["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"],
        json!({"matchLabels": {"app": "filled"}}),
        "{got:#}"
    );

    /// Puts the mutating webhook back even if an assertion below fails.
    struct Back<'a>(&'a ControlPlane, &'a HaGuard);
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            if let Err(e) = register(self.0, self.1, &[Webhooks::Mutating]) {
                eprintln!("[e2e] could not re-register the mutating webhook: {e}");
            }
        }
    }
    unregister(cp, Webhooks::Mutating).unwrap_or_else(|e| panic!("{e}"));
    let _back = Back(cp, hg);
    cp.apply(bare("unfilled", "DoNotSchedule")).denied(&["spread-selector-missing"]).shows(&[
        &format!("[spread-selector-missing] {SPREADS}[0]"),
        "labelSelector",
        "Fix: ",
    ]);
    absent(cp, ns, "deployment", "unfilled");
    cp.apply(bare("soft", "ScheduleAnyway")).success().warns(&["spread-selector-missing"]);
    let got = get(cp, ns, "deployment", "soft");
    assert!(
        got["spec"]["template"]["spec"]["topologySpreadConstraints"][0].get("labelSelector").is_none(),
        "not mutated: {got:#}"
    );
}

/// (1) Every warn rule: the write succeeds and kubectl prints `Warning: [rule-id] ...`.
fn warn_cases(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "warn";
    namespace(cp, hg, ns, &[]);
    let warned = |obj: Value, rule: &str| {
        let kind = obj["kind"].as_str().unwrap().to_lowercase();
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let out = hg.created(obj["kind"].as_str().unwrap(), 1, || cp.apply(&obj).success().warns(&[rule]));
        assert!(
            out.warnings().iter().all(|w| w.starts_with('[')),
            "every warning is prefixed [rule-id]: {:?}",
            out.warnings()
        );
        get(cp, ns, &kind, &name);
        out
    };
    let spread = |selector: Value| {
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}]})
    };

    warned(
        pod(deployment(ns, "soft-mismatch", 2), spread(json!({"matchLabels": {"app": "other"}}))),
        "spread-selector-mismatch",
    )
    .shows(&["[spread-selector-mismatch] spec.template.spec.topologySpreadConstraints[0].labelSelector: "]);
    warned(pod(deployment(ns, "soft-everything", 2), spread(json!({}))), "spread-selector-overlap");
    // The other form: a selector that also matches another workload's pods (in the view first).
    let tiered = |name: &str, replicas: i64| {
        merge(deployment(ns, name, replicas), json!({"spec": {"template": {"metadata": {"labels": {"tier": "web"}}}}}))
    };
    create(cp, hg, &tiered("front", 1));
    warned(pod(tiered("back", 2), spread(json!({"matchLabels": {"tier": "web"}}))), "spread-selector-overlap")
        .shows(&["front"]);
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "too-many"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    warned(pod(deployment(ns, "too-many", 4), anti), "spread-unsatisfiable").shows(&["3 schedulable nodes"]);
    warned(deployment(ns, "colocated", 2), "replicas-colocated").shows(&["[replicas-colocated] "]);
    warned(
        merge(spread_out(deployment(ns, "recreate", 2)), json!({"spec": {"strategy": {"type": "Recreate"}}})),
        "recreate-multi-replica",
    );
    create(cp, hg, &pvc(ns, "single-data", "ReadWriteOnce"));
    warned(mounting(deployment(ns, "surge", 1), "single-data"), "rwo-volume-rolling-surge");
    // An absence is not said on a CREATE: the PDB (or the workload) may be the next object of the
    // same apply (tests/e2e_apply_order.rs shows where it is said instead).
    let quiet = |obj: Value| hg.created(obj["kind"].as_str().unwrap(), 1, || cp.apply(&obj).success().no_warnings());
    quiet(spread_out(deployment(ns, "unbudgeted", 2)));
    let mut no_selector = pdb(ns, "no-selector", "x", json!({"maxUnavailable": 1}));
    no_selector["spec"].as_object_mut().unwrap().remove("selector");
    warned(no_selector, "pdb-selects-nothing");
    quiet(pdb(ns, "covers-nothing", "nobody", json!({"maxUnavailable": 1})));
    warned(
        pdb(
            ns,
            "if-healthy",
            "nobody-either",
            json!({"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
        ),
        "pdb-unhealthy-eviction-policy",
    );
    quiet(hpa(ns, "ghost", "ghost", 1, 3));
    warned(pod(deployment(ns, "sigkill", 1), json!({"terminationGracePeriodSeconds": 0})), "termination-grace-zero");
    warned(pod(deployment(ns, "tolerant", 1), json!({"tolerations": [{"operator": "Exists"}]})), "toleration-wildcard")
        .shows(&[
            "[toleration-wildcard] spec.template.spec.tolerations[0].operator: ",
            "(operator: Exists, no key, no effect) tolerates every taint",
            "Fix: tolerate only the specific taints",
        ]);
    // A misspelt exemption exempts nothing: the warning it meant to silence is still there.
    let typo = merge(
        pod(deployment(ns, "typo", 1), json!({"terminationGracePeriodSeconds": 0})),
        json!({"metadata": {"annotations": {"ha-guard.io/allow-termination-grace-zreo": "a batch worker; work is re-queued"}}}),
    );
    warned(typo, "exemption-unknown-rule").warns(&["termination-grace-zero"]).shows(&[
        "[exemption-unknown-rule] metadata.annotations[ha-guard.io/allow-termination-grace-zreo]: ",
        "did you mean ha-guard.io/allow-termination-grace-zero?",
    ]);

    // An empty PDB selector covers the whole namespace: in a namespace of its own.
    let ns = "warn-empty";
    namespace(cp, hg, ns, &[]);
    create(cp, hg, &spread_out(deployment(ns, "web", 3)));
    let mut everything = pdb(ns, "everything", "x", json!({"maxUnavailable": 1}));
    everything["spec"]["selector"] = json!({});
    let out = hg.created("PodDisruptionBudget", 1, || cp.apply(everything).success());
    let _ = out.warns(&["pdb-selector-empty"]);
}

/// (2) The mutating webhook fills the spread's selector and the PDB's eviction policy; applying
/// the same file again with server-side apply conflicts with nothing and changes nothing.
fn mutation(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "mutate";
    namespace(cp, hg, ns, &[]);
    let file = yaml_file(&[
        pod(
            deployment(ns, "web", 3),
            json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}),
        ),
        pdb(ns, "web", "web", json!({"maxUnavailable": 1})),
    ]);
    cp.kubectl_in(&["apply", "--server-side", "-f", "-"], &file).success().shows(&["serverside-applied"]);

    let check = |cp: &ControlPlane| {
        let yaml = cp.kubectl(&["get", "deployment,pdb", "-n", ns, "-o", "yaml"]).success().stdout;
        let list = &yaml_docs(&yaml)[0];
        let items = list["items"].as_array().expect("items");
        let d = items.iter().find(|i| i["kind"] == "Deployment").expect("the Deployment");
        let p = items.iter().find(|i| i["kind"] == "PodDisruptionBudget").expect("the PDB");
        assert_eq!(
            d["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"],
            json!({"matchLabels": {"app": "web"}}),
            "selector injected:\n{yaml}"
        );
        assert_eq!(p["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow", "policy injected:\n{yaml}");
        (d["metadata"]["resourceVersion"].clone(), p["metadata"]["resourceVersion"].clone())
    };
    let first = check(cp);

    let again = cp.kubectl_in(&["apply", "--server-side", "-f", "-"], &file).success().hides(&["onflict"]);
    assert_eq!(check(cp), first, "a second server-side apply changed the objects: {}", again.output());

    // What a CI job runs before applying: no difference between the file and the cluster.
    let diff = cp.kubectl_in(&["diff", "--server-side", "-f", "-"], &file);
    assert_eq!(diff.code, 0, "kubectl diff --server-side sees a difference: {}", diff.output());
    // Client-side apply of the same file keeps the injected fields too.
    cp.kubectl_in(&["apply", "-f", "-"], &file).success();
    check(cp);

    // The mutating webhook's matchCondition: a PDB that has the policy is not sent to /mutate
    // (nothing to add), while /validate still sees the update.
    let calls = |webhook: &str| {
        hg.metrics().sum("ha_guard_admission_requests_total", &[("webhook", webhook), ("kind", "PodDisruptionBudget")])
    };
    let (mutate_before, validate_before) = (calls("mutate"), calls("validate"));
    cp.kubectl(&["patch", "pdb", "web", "-n", ns, "--type=merge", "-p", r#"{"spec":{"maxUnavailable":2}}"#]).success();
    assert_eq!(calls("validate"), validate_before + 1.0, "the PDB update reached /validate once");
    assert_eq!(calls("mutate"), mutate_before, "a PDB with unhealthyPodEvictionPolicy was sent to /mutate");
    // Both webhooks' other matchCondition: an update that changes nothing ha-guard reads (here an
    // annotation that is not ha-guard's) is sent to neither (tests/e2e_match_conditions.rs).
    cp.kubectl(&["annotate", "pdb", "web", "-n", ns, "e2e.ha-guard.io/touched=yes"]).success();
    assert_eq!(calls("validate"), validate_before + 1.0, "a metadata-only PDB update was sent to /validate");
    // One without it still is.
    // (It covers no workload, which a CREATE does not say: no warning.)
    cp.apply(pdb(ns, "bare", "no-such-app", json!({"maxUnavailable": 1}))).success();
    assert_eq!(calls("mutate"), mutate_before + 1.0, "a PDB without the policy was not sent to /mutate");
    let stored = cp.kubectl(&["get", "pdb", "bare", "-n", ns, "-o", "json"]).success().json();
    assert_eq!(stored["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
}

/// (3) `kubectl apply --server-side --dry-run=server` answers like the real write (same denial,
/// same warnings, the mutated object) and stores nothing.
fn dry_run(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "dry-run";
    namespace(cp, hg, ns, &[]);
    let dry = ["apply", "--server-side", "--dry-run=server", "-o", "yaml", "-f", "-"];
    let requests = |dry: &str| hg.metrics().sum("ha_guard_admission_requests_total", &[("dry_run", dry)]);
    let dry_before = requests("true");

    // Denied: the same message as the real write.
    let bad = slow_prestop(deployment(ns, "drainer", 1)).to_string();
    let dry_denied = cp.kubectl_in(&dry, &bad).denied(&["prestop-exceeds-grace"]);
    absent(cp, ns, "deployment", "drainer");
    let real_denied = cp.kubectl_in(&["apply", "--server-side", "-f", "-"], &bad).denied(&["prestop-exceeds-grace"]);
    assert_eq!(denial(&dry_denied), denial(&real_denied));

    // Warned and mutated: the same warnings as the real write, the object as it would be stored.
    let doc = pod(
        deployment(ns, "web", 2),
        json!({"terminationGracePeriodSeconds": 0,
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}),
    )
    .to_string();
    let out = cp.kubectl_in(&dry, &doc).success().warns(&["termination-grace-zero"]);
    let shown = &yaml_docs(&out.stdout)[0];
    assert_eq!(
        shown["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"],
        json!({"matchLabels": {"app": "web"}}),
        "the dry-run shows the mutated object:\n{}",
        out.stdout
    );
    absent(cp, ns, "deployment", "web");
    let pdb_doc = pdb(ns, "web", "web", json!({"maxUnavailable": 1})).to_string();
    let shown_pdb = cp.kubectl_in(&dry, &pdb_doc).success();
    assert_eq!(
        yaml_docs(&shown_pdb.stdout)[0]["spec"]["unhealthyPodEvictionPolicy"],
        "AlwaysAllow",
        "{}",
        shown_pdb.stdout
    );
    absent(cp, ns, "pdb", "web");

    let real = hg.created("Deployment", 1, || cp.kubectl_in(&["apply", "--server-side", "-f", "-"], &doc).success());
    let mut a = out.warnings();
    let mut b = real.warnings();
    a.sort();
    b.sort();
    assert_eq!(a, b, "the dry-run warned as the real write did");

    // Each dry-run was reviewed by both webhooks as a dry run (metrics label dry_run="true").
    assert!(requests("true") >= dry_before + 5.0, "dry-run requests counted: {} -> {}", dry_before, requests("true"));
}

/// (4) Cross-object rules refuse whichever write of a pair comes second.
fn cross_object(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "cross";
    namespace(cp, hg, ns, &[]);

    // PDB first, then the Deployment it would block.
    create(cp, hg, &pdb(ns, "a", "a", json!({"minAvailable": 1})));
    cp.apply(deployment(ns, "a", 1))
        .denied(&["pdb-blocks-eviction"])
        .shows(&["PodDisruptionBudget cross/a (minAvailable 1)"]);
    absent(cp, ns, "deployment", "a");

    // Deployment first, then the PDB.
    create(cp, hg, &deployment(ns, "b", 1));
    cp.apply(pdb(ns, "b", "b", json!({"minAvailable": 1}))).denied(&["pdb-blocks-eviction"]);
    absent(cp, ns, "pdb", "b");

    // An HPA that would scale a Deployment on a ReadWriteOnce claim past one replica.
    create(cp, hg, &pvc(ns, "c-data", "ReadWriteOnce"));
    let c = merge(mounting(deployment(ns, "c", 1), "c-data"), json!({"spec": {"strategy": {"type": "Recreate"}}}));
    create(cp, hg, &c).no_warnings();
    cp.apply(hpa(ns, "c", "c", 1, 3)).denied(&["rwo-volume-multi-replica"]).shows(&["c-data", "3"]);
    absent(cp, ns, "hpa", "c");

    // kubectl scale is warned, never denied, even down to a floor the PDB blocks at.
    create(cp, hg, &spread_out(deployment(ns, "d", 3)));
    create(cp, hg, &pdb(ns, "d", "d", json!({"minAvailable": 1}))).no_warnings();
    cp.kubectl(&["scale", "deployment", "d", "-n", ns, "--replicas=1"])
        .success()
        .warns(&["pdb-blocks-eviction"])
        .shows(&["scaled"]);
    assert_eq!(get(cp, ns, "deployment", "d")["spec"]["replicas"], 1);
}

/// (4) A manifest that sets `replicas` under an HPA: warned on the HPA's write (kubectl apply's
/// last-applied manifest says the Deployment sets it) and on the apply that resets the count, not
/// on `kubectl scale` (the scale subresource, as the HPA controller writes), and not on a manifest
/// that leaves the count to the HPA (whose replicas the apiserver defaults to 1 on CREATE).
fn replicas_conflict(cp: &ControlPlane, hg: &HaGuard) {
    const RULE: &str = "[hpa-replicas-conflict]";
    let ns = "replicas";
    namespace(cp, hg, ns, &[]);
    let web = spread_out(deployment(ns, "web", 2));
    create(cp, hg, &web).hides(&[RULE]);
    hg.created("HorizontalPodAutoscaler", 1, || cp.apply(hpa(ns, "web", "web", 2, 5)).success())
        .warns(&["hpa-replicas-conflict"])
        .shows(&[
            "[hpa-replicas-conflict] spec.scaleTargetRef: HorizontalPodAutoscaler replicas/web (min 2, max 5) scales \
             Deployment replicas/web, whose manifest sets spec.replicas: 2",
            "Fix: remove spec.replicas",
        ]);
    cp.kubectl(&["scale", "deployment", "web", "-n", ns, "--replicas=4"]).success().hides(&[RULE]);
    cp.apply(&web).success().warns(&["hpa-replicas-conflict"]).shows(&[
        "[hpa-replicas-conflict] spec.replicas: this write sets spec.replicas of Deployment replicas/web to 2 (it was 4)",
        "HPA web (min 2, max 5) scales it",
    ]);
    assert_eq!(get(cp, ns, "deployment", "web")["spec"]["replicas"], 2, "warned, not refused");

    create(cp, hg, &hpa(ns, "lean", "lean", 2, 5));
    let mut lean = spread_out(deployment(ns, "lean", 1));
    lean["spec"].as_object_mut().expect("spec").remove("replicas");
    create(cp, hg, &lean).hides(&[RULE]);
    assert_eq!(get(cp, ns, "deployment", "lean")["spec"]["replicas"], 1, "the apiserver defaulted it");
    let annotated = merge(lean, json!({"metadata": {"annotations": {"e2e.ha-guard.io/touched": "yes"}}}));
    cp.apply(&annotated).success().hides(&[RULE]);
}

/// (5) An object that was out of policy before ha-guard was installed can still get its urgent
/// image update (warned as pre-existing), but not a new violation.
fn ratcheting(cp: &ControlPlane) {
    let ns = "ratchet";
    cp.kubectl(&["set", "image", "deployment/legacy", "app=nginx:1.28", "-n", ns])
        .success()
        .warns(&["prestop-exceeds-grace"])
        .shows(&["[prestop-exceeds-grace] (pre-existing) "]);
    assert_eq!(get(cp, ns, "deployment", "legacy")["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.28");

    let patch = json!({"spec": {"template": {"spec": {"topologySpreadConstraints": [{"maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "someone-else"}}}]}}}});
    let out = cp
        .kubectl(&["patch", "deployment", "legacy", "-n", ns, "--type=merge", "-p", &patch.to_string()])
        .denied(&["spread-selector-mismatch"]);
    assert!(
        !denial(&out).contains("[prestop-exceeds-grace]"),
        "the pre-existing violation does not deny: {}",
        out.stderr
    );
    let stored = get(cp, ns, "deployment", "legacy");
    assert!(stored["spec"]["template"]["spec"].get("topologySpreadConstraints").is_none(), "{stored:#}");
}

/// (6) Exemption annotations (with a reason; on a related object) and the namespace modes.
fn exemptions(cp: &ControlPlane, hg: &HaGuard) {
    let ns = "exempt";
    namespace(cp, hg, ns, &[]);
    let annotated = |d: Value, reason: &str| {
        merge(d, json!({"metadata": {"annotations": {"ha-guard.io/allow-prestop-exceeds-grace": reason}}}))
    };
    cp.apply(annotated(
        slow_prestop(deployment(ns, "drainer", 1)),
        "drains a 20 s job queue; the grace is raised by the operator",
    ))
    .success()
    .hides(&["[prestop-exceeds-grace]"]);
    cp.apply(annotated(slow_prestop(deployment(ns, "no-reason", 1)), " "))
        .denied(&["prestop-exceeds-grace"])
        .shows(&["has an empty reason and is ignored"]);
    absent(cp, ns, "deployment", "no-reason");

    // A PDB forced over one replica as an informed choice: the exemption on the PDB also covers
    // the Deployment's later writes (a cross-object finding counts an exemption on any object it
    // names).
    create(cp, hg, &deployment(ns, "solo", 1));
    let forced = merge(
        pdb(ns, "solo", "solo", json!({"minAvailable": 1})),
        json!({"metadata": {"annotations": {"ha-guard.io/allow-pdb-blocks-eviction": "singleton by design; drained by hand"}}}),
    );
    create(cp, hg, &forced).hides(&["[pdb-blocks-eviction]"]);
    cp.kubectl(&["set", "image", "deployment/solo", "app=nginx:1.28", "-n", ns])
        .success()
        .hides(&["[pdb-blocks-eviction]"]);

    // ha-guard.io/mode: warn turns denials into warnings.
    namespace(cp, hg, "relaxed", &[("ha-guard.io/mode", "warn")]);
    cp.apply(slow_prestop(deployment("relaxed", "drainer", 1))).success().warns(&["prestop-exceeds-grace"]);
    get(cp, "relaxed", "deployment", "drainer");

    // ha-guard.io/mode: off skips the namespace: no finding and no mutation.
    namespace(cp, hg, "ignored", &[("ha-guard.io/mode", "off")]);
    let bare = pod(
        slow_prestop(deployment("ignored", "drainer", 2)),
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}),
    );
    cp.apply(bare).success().no_warnings().shows(&["a null labelSelector results in matching no pod"]);
    let got = get(cp, "ignored", "deployment", "drainer");
    assert!(
        got["spec"]["template"]["spec"]["topologySpreadConstraints"][0].get("labelSelector").is_none(),
        "not mutated: {got:#}"
    );
}

/// (7) With ha-guard down, writes go through unchecked (failurePolicy Ignore, as shipped); once it
/// is back they are checked again.
fn failure_policy(cp: &ControlPlane, hg: &mut HaGuard, fail_open: &mut FailOpen) {
    fail_open.on_purpose(cp, "step 7, ha-guard stopped until it answers again", || down_and_up(cp, hg));
    let ns = "failure";
    cp.apply(slow_prestop(deployment(ns, "after", 1))).denied(&["prestop-exceeds-grace"]);
    absent(cp, ns, "deployment", "after");
    // What slipped in while it was down is now pre-existing: its image can still be updated.
    cp.kubectl(&["set", "image", "deployment/while-down", "app=nginx:1.28", "-n", ns])
        .success()
        .shows(&["[prestop-exceeds-grace] (pre-existing) "]);
}

/// ha-guard stopped, a write that passes unchecked, ha-guard started again and called.
fn down_and_up(cp: &ControlPlane, hg: &mut HaGuard) {
    let ns = "failure";
    namespace(cp, hg, ns, &[]);
    let shipped = webhook_configuration(hg, Webhooks::Validating);
    assert_eq!(shipped["webhooks"][0]["failurePolicy"], "Ignore", "this step assumes the shipped failurePolicy");

    hg.stop();
    let bare = pod(
        slow_prestop(deployment(ns, "while-down", 1)),
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]}),
    );
    cp.apply(bare).success().no_warnings().shows(&["a null labelSelector results in matching no pod"]);
    let got = get(cp, ns, "deployment", "while-down");
    assert!(
        got["spec"]["template"]["spec"]["topologySpreadConstraints"][0].get("labelSelector").is_none(),
        "not mutated: {got:#}"
    );

    hg.restart().unwrap_or_else(|e| panic!("restart: {e}"));
    poll("the validating webhook denies again", WAIT, std::time::Duration::from_millis(200), || {
        validating_live(cp, CANARY_NS)
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Deletes the webhook configurations it names when dropped, even after a failed assertion (they
/// intercept nothing, but the next steps should not see them).
struct Configurations<'a>(&'a ControlPlane, Vec<String>);

impl Drop for Configurations<'_> {
    fn drop(&mut self) {
        for name in &self.1 {
            let _ = self.0.kubectl(&["delete", "validatingwebhookconfiguration", name, "--ignore-not-found"]);
        }
    }
}

/// `ha-guard check -f -` of `yaml`: its stdout.
fn check_stdin(yaml: &str) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["check", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("ha-guard check");
    child.stdin.take().expect("stdin").write_all(yaml.as_bytes()).expect("write stdin");
    let out = child.wait_with_output().expect("ha-guard check");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (8) webhook-fail-closed-unavailable from each object of the relation: the webhook
/// configuration, its Service, the workload behind it. The test configurations are fail-closed
/// but intercept only ConfigMap creates in namespaces labelled for them (`fail_closed_webhooks`;
/// one, `webhook-target`, where nothing writes ConfigMaps), so their missing or single backends
/// break no other write.
fn fail_closed_webhooks_step(cp: &ControlPlane, hg: &HaGuard) {
    const RULE: &str = "webhook-fail-closed-unavailable";
    let ns = "webhooks";
    namespace(cp, hg, ns, &[]);
    // A namespace the configurations' namespaceSelector matches, where nothing writes ConfigMaps
    // (no controller runs here): a fail-closed webhook that matches no namespace at all is not
    // flagged (it intercepts nothing today), so the relation needs one.
    namespace(cp, hg, "webhook-target", &[("e2e.ha-guard.io/webhook-target", "true")]);
    let mut cleanup = Configurations(cp, vec!["e2e-probe".to_string()]);
    let mut configure = |name: &str, service: &str| {
        cleanup.1.push(name.to_string());
        hg.created("ValidatingWebhookConfiguration", 1, || cp.apply(fail_closed_webhooks(name, ns, service)).success())
    };
    // ConfigMaps and webhook configurations are not kinds the shipped webhooks send: ha-guard
    // counts them under the kind label `other` (a bounded label), which only the probe's writes reach.
    let asked_other = || hg.metrics().sum("ha_guard_admission_requests_total", &[("kind", "other")]);

    // (a) The workload and its Service first, then the configuration. The apiserver calls no
    // admission webhook for a webhook configuration (so a broken one can always be removed): a
    // probe configuration that asks for those writes, and for ConfigMap writes in this namespace,
    // gets the ConfigMaps to ha-guard and never the configuration.
    create(cp, hg, &deployment(ns, "solo", 1));
    create(cp, hg, &service(ns, "solo-webhook", "solo")).hides(&[&format!("[{RULE}]")]);
    let probe = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "e2e-probe"},
        "webhooks": [{
            "name": "probe.e2e.ha-guard.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Ignore",
            "clientConfig": {"url": hg.url("/validate"), "caBundle": hg.ca_bundle()},
            "rules": [
                {"apiGroups": ["admissionregistration.k8s.io"], "apiVersions": ["v1"],
                 "resources": ["validatingwebhookconfigurations"], "operations": ["CREATE", "UPDATE"]},
                {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE", "UPDATE"],
                 "scope": "Namespaced"}
            ],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
        }]
    });
    cp.apply(&probe).success();
    let mut round = 0;
    poll(
        "the probe configuration sends ConfigMap writes to ha-guard",
        WAIT,
        std::time::Duration::from_millis(200),
        || {
            let before = asked_other();
            round += 1;
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": ns},
            "data": {"round": round.to_string()}});
            cp.apply(&cm).success();
            if asked_other() > before { Ok(()) } else { Err(format!("round {round}")) }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let before = asked_other();
    let out = configure("e2e-solo", "solo-webhook");
    out.hides(&[&format!("[{RULE}]")]);
    assert_eq!(asked_other(), before, "the apiserver sent a webhook configuration's write");
    // The live view holds it now: the Service's next write (a label added) is warned, naming all
    // three ...
    let relabelled = merge(service(ns, "solo-webhook", "solo"), json!({"metadata": {"labels": {"tier": "webhook"}}}));
    let again = cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &relabelled.to_string());
    again.success().warns(&[RULE]).shows(&[
        "[webhook-fail-closed-unavailable] spec.selector: ValidatingWebhookConfiguration/e2e-solo: webhook \
         e2e-solo.e2e.ha-guard.io (failurePolicy Fail) calls Service webhooks/solo-webhook (selector app=solo)",
        "the only workload behind it is Deployment solo (replicas 1): it runs 1 replica at its floor",
        "it intercepts: configmaps CREATE in namespaces matching e2e.ha-guard.io/webhook-target=true",
        "Fix: run at least 2 replicas of Deployment webhooks/solo",
    ]);
    // ... and `ha-guard check` of what the cluster holds judges the configuration itself.
    let held = format!(
        "{}---\n{}",
        cp.kubectl(&["get", "deployment,service", "-n", ns, "-o", "yaml"]).success().stdout,
        cp.kubectl(&["get", "validatingwebhookconfiguration", "e2e-solo", "-o", "yaml"]).success().stdout
    );
    let report = check_stdin(&held);
    assert!(
        report.contains("warn[webhook-fail-closed-unavailable]: ValidatingWebhookConfiguration/e2e-solo at webhooks[0].failurePolicy"),
        "{report}"
    );

    // (b) The configuration and the Service first, then the workload: created with one replica ...
    create(cp, hg, &service(ns, "fresh-webhook", "fresh"));
    configure("e2e-fresh", "fresh-webhook");
    let out = hg.created("Deployment", 1, || cp.apply(deployment(ns, "fresh", 1)).success());
    out.warns(&[RULE]).shows(&[
        "[webhook-fail-closed-unavailable] spec.replicas: ValidatingWebhookConfiguration/e2e-fresh: webhook",
        "Deployment fresh (replicas 1)",
    ]);
    // ... or scaled down to one: two replicas kept apart with a PDB letting one go are quiet.
    create(cp, hg, &spread_out(deployment(ns, "pair", 2)));
    create(cp, hg, &pdb(ns, "pair", "pair", json!({"maxUnavailable": 1})));
    create(cp, hg, &service(ns, "pair-webhook", "pair"));
    configure("e2e-pair", "pair-webhook");
    cp.kubectl(&["annotate", "deployment", "pair", "-n", ns, "e2e.ha-guard.io/touched=yes"])
        .success()
        .hides(&[&format!("[{RULE}]")]);
    cp.kubectl(&["scale", "deployment", "pair", "-n", ns, "--replicas=1"]).success().warns(&[RULE]).shows(&[
        "[webhook-fail-closed-unavailable] spec.replicas: ValidatingWebhookConfiguration/e2e-pair",
        "Deployment pair (replicas 1): it runs 1 replica at its floor",
    ]);

    // (c) The configuration and the workload first, then the Service.
    create(cp, hg, &deployment(ns, "late", 1));
    configure("e2e-late", "late-webhook");
    let out = hg.created("Service", 1, || cp.apply(service(ns, "late-webhook", "late")).success());
    out.warns(&[RULE]).shows(&[
        "[webhook-fail-closed-unavailable] spec.selector: ValidatingWebhookConfiguration/e2e-late",
        "Deployment late (replicas 1)",
    ]);
    drop(cleanup);
    for name in ["e2e-probe", "e2e-solo", "e2e-fresh", "e2e-pair", "e2e-late"] {
        cp.kubectl(&["get", "validatingwebhookconfiguration", name]).failure().shows(&["NotFound"]);
    }
}

//! End-to-end: the webhooks' matchConditions `changes-what-ha-guard-reads` and (mutating)
//! `needs-a-mutation` (charts/ha-guard, `_webhooks.tpl`) change which writes reach ha-guard, never
//! what the user gets.
//!
//! The same script of writes (creates that are denied, warned and mutated; spec, label, exemption
//! and last-applied changes; metadata-only updates of objects with and without labels and
//! annotations, of objects that predate ha-guard and still violate a rule or miss a mutation; scale
//! writes that keep or change the count; server-side and client-side apply; a dry run) runs twice
//! against one kube-apiserver and one ha-guard, in two namespaces: once with the shipped webhook
//! configurations, once with those two conditions taken out. Every write must end the same way:
//! the same exit, the same denial, the same warnings, the same stored spec. And the condition must
//! be doing something: the writes marked metadata-only reached ha-guard only without it.

#[path = "support/mod.rs"]
mod support;

use serde_json::{Value, json};
use support::*;

const CONDITION: &str = "changes-what-ha-guard-reads";
/// The mutating webhook's other condition: only what an enabled mutation could change.
const NEEDS_A_MUTATION: &str = "needs-a-mutation";

/// The shipped webhook configurations, or those without [`CONDITION`] and [`NEEDS_A_MUTATION`], registered for `hg`, and
/// in effect (the probe's metadata-only write reaches both webhooks without it, neither with it).
fn configure(cp: &ControlPlane, hg: &HaGuard, with_condition: bool) {
    let shipped = webhook_configurations(hg);
    let carrying = shipped
        .iter()
        .flat_map(|d| d["webhooks"].as_array().into_iter().flatten())
        .filter(|h| h["matchConditions"].as_array().into_iter().flatten().any(|c| c["name"] == CONDITION))
        .count();
    assert_eq!(carrying, 2, "both shipped webhooks carry {CONDITION}");
    let (without, probe_calls) = if with_condition { (vec![], 0.0) } else { (vec![CONDITION, NEEDS_A_MUTATION], 2.0) };
    register_variant(cp, hg, &without, probe_calls).unwrap_or_else(|e| panic!("{e}"));
}

/// Every admission request ha-guard answered.
fn requests(hg: &HaGuard) -> f64 {
    hg.metrics().sum("ha_guard_admission_requests_total", &[])
}

/// Runs one write in a namespace.
type Run = Box<dyn Fn(&ControlPlane, &HaGuard, &str) -> Kubectl>;

/// One write of the script, in namespace `ns`.
struct Write {
    what: &'static str,
    /// Changes nothing ha-guard reads: not sent with the condition.
    metadata_only: bool,
    run: Run,
    /// The object whose stored spec is compared after the write, as (kind, name).
    stored: Option<(&'static str, &'static str)>,
}

fn write(
    what: &'static str,
    metadata_only: bool,
    stored: Option<(&'static str, &'static str)>,
    run: impl Fn(&ControlPlane, &HaGuard, &str) -> Kubectl + 'static,
) -> Write {
    Write { what, metadata_only, run: Box::new(run), stored }
}

/// `kubectl ARGS -n NS`.
fn k(cp: &ControlPlane, ns: &str, args: &[&str]) -> Kubectl {
    let mut all = args.to_vec();
    all.extend(["-n", ns]);
    cp.kubectl(&all)
}

/// Applies `obj` (a creation) and waits until ha-guard's view holds it, if it was admitted.
fn create(cp: &ControlPlane, hg: &HaGuard, obj: Value) -> Kubectl {
    let kind = obj["kind"].as_str().expect("kind").to_string();
    let before = hg.cache_objects(&kind);
    let out = cp.apply(&obj);
    if out.ok() {
        hg.wait_cache(&kind, &format!(">= {}", before + 1), |c| c > before);
    }
    out
}

/// Objects made before ha-guard is registered: a Deployment that violates a deny rule, one whose
/// spread misses the selector the mutating webhook would fill in, and a PDB without labels,
/// annotations or unhealthyPodEvictionPolicy.
fn legacy(cp: &ControlPlane, ns: &str) {
    cp.namespace(ns, &[]);
    cp.apply(slow_prestop(deployment(ns, "legacy", 1))).success();
    let unfilled = pod(
        spread_out(deployment(ns, "unfilled", 2)),
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway"}]}),
    );
    cp.kubectl_in(&["create", "-f", "-"], &unfilled.to_string()).success();
    cp.kubectl_in(&["create", "-f", "-"], &pdb(ns, "bare", "unfilled", json!({"maxUnavailable": 1})).to_string())
        .success();
}

/// A PDB as server-side apply writes it (with the policy, so the mutating webhook has nothing to add).
fn ssa_pdb(ns: &str) -> Value {
    merge(
        pdb(ns, "ssa", "nobody", json!({"maxUnavailable": 1})),
        json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}),
    )
}

fn script() -> Vec<Write> {
    let web = |ns: &str| spread_out(deployment(ns, "web", 3));
    vec![
        // Creates: always sent.
        write("create a Deployment", false, Some(("deployment", "web")), move |cp, hg, ns| create(cp, hg, web(ns))),
        write("create a PDB (mutated)", false, Some(("pdb", "web")), |cp, hg, ns| {
            create(cp, hg, pdb(ns, "web", "web", json!({"maxUnavailable": 1})))
        }),
        write(
            "create an HPA over a manifest that sets replicas (warned)",
            false,
            Some(("hpa", "web")),
            |cp, hg, ns| create(cp, hg, hpa(ns, "web", "web", 2, 5)),
        ),
        write("create a denied Deployment", false, None, |cp, hg, ns| {
            create(cp, hg, slow_prestop(deployment(ns, "drainer", 1)))
        }),
        // Metadata-only writes of objects with findings: not sent with the condition, and a plain
        // allow without it.
        write("the deployment controller's revision annotation", true, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["annotate", "deployment", "web", "deployment.kubernetes.io/revision=2"])
        }),
        write("a finalizer (merge patch)", true, Some(("deployment", "web")), |cp, _, ns| {
            k(
                cp,
                ns,
                &[
                    "patch",
                    "deployment",
                    "web",
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":["e2e.ha-guard.io/keep"]}}"#,
                ],
            )
        }),
        write("the finalizer removed", true, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["patch", "deployment", "web", "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#])
        }),
        write("an unrelated annotation on the PDB", true, Some(("pdb", "web")), |cp, _, ns| {
            k(cp, ns, &["annotate", "pdb", "web", "team=payments"])
        }),
        write("an unrelated annotation on the HPA", true, Some(("hpa", "web")), |cp, _, ns| {
            k(cp, ns, &["annotate", "hpa", "web", "team=payments"])
        }),
        write("a server-side dry run of an annotation", true, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["annotate", "--dry-run=server", "deployment", "web", "team=payments"])
        }),
        write("scale to the same count", true, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["scale", "deployment", "web", "--replicas=3"])
        }),
        // What ha-guard reads changes: sent either way.
        write("a label", false, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["label", "deployment", "web", "team=payments"])
        }),
        write("an exemption with a reason", false, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["annotate", "deployment", "web", "ha-guard.io/allow-pdb-missing=the PDB comes later"])
        }),
        write("a misspelt exemption", false, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["annotate", "deployment", "web", "ha-guard.io/allow-pdb-mising=typo"])
        }),
        write("the misspelt exemption removed", false, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["annotate", "deployment", "web", "ha-guard.io/allow-pdb-mising-"])
        }),
        write("an image update", false, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["set", "image", "deployment/web", "app=nginx:1.28"])
        }),
        write("scale to another count (warned)", false, Some(("deployment", "web")), |cp, _, ns| {
            k(cp, ns, &["scale", "deployment", "web", "--replicas=4"])
        }),
        write(
            "client-side apply of the manifest again (resets replicas, warned)",
            false,
            Some(("deployment", "web")),
            move |cp, _, ns| {
                cp.apply(merge(
                    web(ns),
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}}),
                ))
            },
        ),
        write(
            "client-side apply with one more annotation (last-applied changes)",
            false,
            Some(("deployment", "web")),
            move |cp, _, ns| {
                cp.apply(merge(
                    web(ns),
                    json!({"metadata": {"annotations": {"team": "payments"}},
                       "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}}),
                ))
            },
        ),
        write("a spec change that denies", false, Some(("deployment", "web")), |cp, _, ns| {
            k(
                cp,
                ns,
                &[
                    "patch",
                    "deployment",
                    "web",
                    "--type=merge",
                    "-p",
                    r#"{"spec":{"template":{"spec":{"hostNetwork":true,"topologySpreadConstraints":null}}}}"#,
                ],
            )
        }),
        // Objects from before ha-guard: out of policy, or missing a mutation.
        write(
            "metadata-only write of a Deployment that violates a deny rule",
            true,
            Some(("deployment", "legacy")),
            |cp, _, ns| k(cp, ns, &["annotate", "deployment", "legacy", "team=payments"]),
        ),
        write("its image updated (pre-existing, warned)", false, Some(("deployment", "legacy")), |cp, _, ns| {
            k(cp, ns, &["set", "image", "deployment/legacy", "app=nginx:1.28"])
        }),
        write(
            "metadata-only write of a Deployment missing a mutation",
            true,
            Some(("deployment", "unfilled")),
            |cp, _, ns| k(cp, ns, &["annotate", "deployment", "unfilled", "team=payments"]),
        ),
        write("its spec changed (mutated now)", false, Some(("deployment", "unfilled")), |cp, _, ns| {
            k(cp, ns, &["set", "image", "deployment/unfilled", "app=nginx:1.28"])
        }),
        write("first annotation of a PDB with none, missing its mutation", true, Some(("pdb", "bare")), |cp, _, ns| {
            k(cp, ns, &["annotate", "pdb", "bare", "team=payments"])
        }),
        write("first label of that PDB", false, Some(("pdb", "bare")), |cp, _, ns| {
            k(cp, ns, &["label", "pdb", "bare", "team=payments"])
        }),
        // Server-side apply: the first creates (sent); the same document applied by another field
        // manager only adds to managedFields. (On an object kubectl apply made, server-side apply
        // also rewrites last-applied-configuration, which ha-guard reads: hence a PDB of its own.)
        write("server-side apply of a new PDB", false, Some(("pdb", "ssa")), |cp, hg, ns| {
            let before = hg.cache_objects("PodDisruptionBudget");
            let out = cp.kubectl_in(&["apply", "--server-side", "-f", "-"], &ssa_pdb(ns).to_string());
            if out.ok() {
                hg.wait_cache("PodDisruptionBudget", "one more", |c| c > before);
            }
            out
        }),
        write("the same PDB applied by another field manager", true, Some(("pdb", "ssa")), |cp, _, ns| {
            cp.kubectl_in(&["apply", "--server-side", "--field-manager=e2e", "-f", "-"], &ssa_pdb(ns).to_string())
        }),
    ]
}

/// What the user sees of a write and what is stored, with the namespace's name replaced.
#[derive(Debug, PartialEq)]
struct Seen {
    code: i32,
    denial: Option<String>,
    warnings: Vec<String>,
    stored: Option<Value>,
}

fn seen(cp: &ControlPlane, ns: &str, w: &Write, out: &Kubectl) -> Seen {
    let norm = |s: &str| s.replace(ns, "NS");
    let marker = "denied the request: ";
    let denial = out.stderr.find(marker).map(|at| norm(out.stderr[at + marker.len()..].trim_end()));
    let mut warnings: Vec<String> = out.warnings().iter().map(|w| norm(w)).collect();
    warnings.sort();
    let stored = w.stored.map(|(kind, name)| {
        let got = k(cp, ns, &["get", kind, name, "-o", "json"]).success().json();
        let annotations: serde_json::Map<String, Value> = got["metadata"]["annotations"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("ha-guard.io/") || k.as_str() == "team")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        serde_json::from_str(&norm(
            &json!({"spec": got["spec"], "labels": got["metadata"]["labels"], "annotations": annotations}).to_string(),
        ))
        .expect("JSON")
    });
    Seen { code: out.code, denial, warnings, stored }
}

#[test]
fn the_match_conditions_change_what_is_sent_not_what_is_answered() {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane: {e}"));
    cp.nodes(&["node-a", "node-b", "node-c"]);
    let namespaces = [("conditions-off", false), ("conditions-on", true)];
    for (ns, _) in namespaces {
        legacy(&cp, ns);
    }
    let hg = HaGuard::start(&cp).unwrap_or_else(|e| panic!("ha-guard: {e}"));
    register(&cp, &hg, &[Webhooks::Mutating, Webhooks::Validating])
        .unwrap_or_else(|e| panic!("{e}\n{}", hg.log_tail(20)));
    hg.wait_cache("Deployment", ">= 4 (the legacy objects)", |n| n >= 4);

    let script = script();
    let mut results: Vec<Vec<(Seen, f64)>> = Vec::new();
    for (ns, with_condition) in namespaces {
        configure(&cp, &hg, with_condition);
        let mut run = Vec::new();
        for w in &script {
            let before = requests(&hg);
            let out = (w.run)(&cp, &hg, ns);
            // Requests are counted when answered: the apiserver has them before kubectl returns.
            let sent = requests(&hg) - before;
            run.push((seen(&cp, ns, w, &out), sent));
        }
        results.push(run);
    }

    let mut differences = Vec::new();
    for (i, w) in script.iter().enumerate() {
        let ((off, sent_off), (on, sent_on)) = (&results[0][i], &results[1][i]);
        if off != on {
            differences.push(format!("{}: without the condition {off:#?}\nwith it {on:#?}", w.what));
        }
        if w.metadata_only {
            if *sent_on != 0.0 || *sent_off == 0.0 {
                differences.push(format!(
                    "{}: metadata-only, so sent only without the condition, but ha-guard answered {sent_off} \
                     request(s) without it and {sent_on} with it",
                    w.what
                ));
            }
        } else if *sent_on == 0.0 && off.code == 0 {
            differences.push(format!("{}: changes what ha-guard reads but was not sent with the condition", w.what));
        }
    }
    assert!(differences.is_empty(), "{}\n{}", differences.join("\n\n"), hg.log_tail(20));

    // The script exercises what it claims: denials, warnings (pre-existing ones included) and
    // mutations, on writes the condition sends.
    let all: Vec<&Seen> = results[1].iter().map(|(s, _)| s).collect();
    assert!(all.iter().filter(|s| s.denial.is_some()).count() >= 2, "{all:#?}");
    assert!(all.iter().any(|s| s.warnings.iter().any(|w| w.contains("(pre-existing)"))), "{all:#?}");
    assert!(all.iter().any(|s| s.warnings.iter().any(|w| w.starts_with("[exemption-unknown-rule]"))), "{all:#?}");
    assert!(all.iter().any(|s| s.warnings.iter().any(|w| w.starts_with("[hpa-replicas-conflict]"))), "{all:#?}");
    let unfilled = all[script.iter().position(|w| w.what.starts_with("its spec changed")).unwrap()];
    assert!(
        unfilled.stored.as_ref().unwrap()["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"]
            .is_object(),
        "the spec write of the legacy Deployment is mutated: {unfilled:#?}"
    );
}

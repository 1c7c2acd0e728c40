//! End-to-end: the chart installs the generated admission policies (issue 49, Build 2 and 3,
//! Show 2 and 3; DESIGN.md §4 "In the apiserver as well"), on a real kube-apiserver with its
//! controllers (the garbage collector, and the policy status controller that type-checks the CEL).
//!
//! The chart is installed with the real helm (`certificates.mode=secret` with a certificate from
//! `ha-guard certs`; the Service's route stood in for by a loopback balancer and a kustomize
//! post-renderer, as tests/e2e_install.rs does). The replica is the `ha-guard serve` binary run
//! with the ServiceAccount's token (the chart's RBAC, nothing more), the chart's ConfigMap as its
//! `--config` file and the chart's `--admission-policies*` flags (checked in the Deployment).
//!
//! 1. **Applied**: serve puts exactly what `ha-guard policies` generates for that configuration into
//!    the apiserver, each object labelled, owned by the chart's ValidatingWebhookConfiguration,
//!    bound where the webhooks are called (kube-system and the release namespace out), and every
//!    validating policy passes the apiserver's type checking.
//! 2. **Down means still enforced**: the replica stopped (the webhooks fail open, the apiserver's
//!    metrics say so): a DoNotSchedule spread selecting other pods and a preStop outlasting the
//!    grace period are refused by the apiserver with the rule's ID; a zero grace period is
//!    admitted with the rule's warning; a selector-less spread is stored with the workload's
//!    selector and a PDB without unhealthyPodEvictionPolicy with AlwaysAllow; a compliant
//!    Deployment draws no warning; a rule that needs the view (another workload's pods counted)
//!    passes unsaid (failurePolicy Ignore); a PDB with maxUnavailable 0 is refused
//!    (`pdb-blocks-eviction`), one too tight only for its workload's replicas passes; a misspelt
//!    exemption annotation draws `exemption-unknown-rule`'s warning with its suggestion.
//! 3. **Back, one message**: the replica restarted: a write with a covered violation and a
//!    view-only one gets each warning once (the policy's and the webhook's); a self-blocking PDB is
//!    refused once, a PDB too tight for its workload's one replica by the webhook, naming it.
//! 4. **Round trips**: a rule turned off in the chart's values, reloaded from the ConfigMap: its
//!    policies deleted, the others kept; `admissionPolicies.enabled=false`: every policy deleted
//!    and the webhook judges everything again; `helm uninstall` (the replica still running) leaves
//!    no policy or binding behind.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::balancer::Balancer;
use support::helm::{Helm, post_renderer};
use support::*;

const RELEASE: &str = "ha-guard";
const RELEASE_NS: &str = "ha-guard";
const NS: &str = "shop";
/// kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings
const KINDS: [&str; 4] = [
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
];
const MANAGED: &str = "app.kubernetes.io/managed-by=ha-guard";

/// The chart's `config.yaml` as installed (the ConfigMap the kubelet would mount).
fn installed_config(cp: &ControlPlane) -> String {
    cp.kubectl(&["-n", RELEASE_NS, "get", "configmap", "ha-guard-config", "-o", "json"]).success().json()["data"]
        ["config.yaml"]
        .as_str()
        .expect("config.yaml")
        .to_string()
}

/// The installed Deployment's serve args.
fn installed_args(cp: &ControlPlane) -> Vec<String> {
    let d = cp.kubectl(&["-n", RELEASE_NS, "get", "deployment", RELEASE, "-o", "json"]).success().json();
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap_or_default().to_string())
        .collect()
}

/// Replaces `path` at once, as the kubelet swaps a ConfigMap volume's files.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// Every generated object ha-guard keeps in the apiserver: `kind/name` → the object.
/// (docs/operations.md's command, "The admission policies".)
fn held(cp: &ControlPlane) -> Vec<Value> {
    let list = cp.kubectl(&["get", &KINDS.join(","), "-l", MANAGED, "-o", "json"]).success().json();
    list["items"].as_array().cloned().unwrap_or_default()
}

fn names(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .map(|d| {
            format!("{}/{}", d["kind"].as_str().unwrap_or_default(), d["metadata"]["name"].as_str().unwrap_or_default())
        })
        .collect()
}

/// What `ha-guard policies` generates for the configuration file `config`.
fn generated(config: &Path) -> BTreeSet<String> {
    let config = ha_guard::config_file::load(config).unwrap_or_else(|e| panic!("{e}"));
    names(&ha_guard::core::policies::generate(&config, Some(ha_guard::config_file::today())))
}

/// Waits until the apiserver holds exactly `want`.
#[track_caller]
fn holds(cp: &ControlPlane, want: &BTreeSet<String>, what: &str) -> Vec<Value> {
    let mut last = BTreeSet::new();
    poll(what, WAIT, Duration::from_millis(300), || {
        let docs = held(cp);
        last = names(&docs);
        if &last == want { Ok(docs) } else { Err("not yet".into()) }
    })
    .unwrap_or_else(|e| {
        let missing: Vec<_> = want.difference(&last).collect();
        let extra: Vec<_> = last.difference(want).collect();
        panic!("{e}: missing {missing:?}, not wanted {extra:?}")
    })
}

/// The lines of `out`'s warnings and error that name `rule`.
fn mentions(out: &Kubectl, rule: &str) -> usize {
    let needle = format!("[{rule}] ");
    out.stderr.matches(&needle).count()
}

/// `out` was refused by the ValidatingAdmissionPolicy of `rule`, its message naming the rule once.
#[track_caller]
fn refused_by_policy(out: Kubectl, rule: &str) -> Kubectl {
    let out = out.failure();
    assert!(
        out.stderr.contains(&format!("ValidatingAdmissionPolicy 'ha-guard-{rule}'")) && mentions(&out, rule) == 1,
        "expected a denial by the policy ha-guard-{rule} naming [{rule}] once: {}",
        out.output()
    );
    out
}

fn spread(selector: Value, when: &str) -> Value {
    let mut c = json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": when});
    if !selector.is_null() {
        c["labelSelector"] = selector;
    }
    json!({"topologySpreadConstraints": [c]})
}

/// A Deployment with pods labelled `labels` (its selector too).
fn labelled(name: &str, labels: Value, spec: Value) -> Value {
    let mut d = pod(deployment(NS, name, 1), spec);
    d["spec"]["selector"]["matchLabels"] = labels.clone();
    d["spec"]["template"]["metadata"]["labels"] = labels;
    d
}

/// A spread that counts the pods of `team: t`, this workload's and `peer`'s: a finding of the view.
fn overlapping(name: &str) -> Value {
    labelled(name, json!({"app": name, "team": "t"}), spread(json!({"matchLabels": {"team": "t"}}), "ScheduleAnyway"))
}

/// The validate webhook's calls that failed open, from the apiserver's metrics.
fn failed_open(cp: &ControlPlane) -> f64 {
    cp.metrics().sum("apiserver_admission_webhook_fail_open_count", &[("name", "validate.ha-guard.io")])
}

struct Replica {
    cp_root: PathBuf,
    kubeconfig: PathBuf,
    config: PathBuf,
}

impl Replica {
    /// The replica as the chart's Deployment runs it, with `args` (the chart's admission policy
    /// flags), its certificate from the first one's directory.
    fn start(&self, cp: &ControlPlane, name: &str, args: &[String], balancer: &Balancer) -> HaGuard {
        let dir = HaGuard::dir_of(&self.cp_root, name);
        let first = HaGuard::dir_of(&self.cp_root, "ha-guard");
        if dir != first {
            std::fs::create_dir_all(&dir).expect("replica dir");
            for f in ["ca.crt", "tls.crt", "tls.key"] {
                std::fs::copy(first.join(f), dir.join(f)).expect("copy the certificate");
            }
        }
        let mut all = vec!["--config".to_string(), self.config.display().to_string()];
        // As the chart runs serve: no background audit in the webhook's pods.
        all.extend(["--reload-interval", "0.5", "--audit-interval=0"].map(String::from));
        all.extend(args.iter().cloned());
        let spec = Spec {
            kubeconfig: Some(self.kubeconfig.clone()),
            generate_certs: false,
            args: all,
            env: vec![("POD_NAMESPACE".into(), RELEASE_NS.into())],
            ..Spec::new(cp, name)
        };
        let hg = HaGuard::start_spec(cp, &spec).unwrap_or_else(|e| panic!("{e}"));
        balancer.set_backends(vec![hg.webhook_port]);
        hg
    }
}

/// The chart's `--admission-policies*` flags, as the installed Deployment passes them.
fn policy_flags(cp: &ControlPlane) -> Vec<String> {
    installed_args(cp).into_iter().filter(|a| a.starts_with("--admission-policies")).collect()
}

/// Waits until `hg`'s log says the policies were applied `n` times in all.
fn applied(hg: &HaGuard, n: usize) {
    poll("the replica applies the admission policies", WAIT, Duration::from_millis(200), || {
        let log = std::fs::read_to_string(hg.log_path()).unwrap_or_default();
        let count = log.matches("admission policies applied").count();
        if count >= n { Ok(()) } else { Err(format!("{count} applies so far")) }
    })
    .unwrap_or_else(|e| panic!("{e}:\n{}", hg.log_tail(30)));
}

#[test]
fn the_chart_keeps_the_admission_policies_enforced_while_ha_guard_is_down() {
    let cp = ControlPlane::start_with_controllers().unwrap_or_else(|e| panic!("{e}"));
    cp.namespace(RELEASE_NS, &[]);
    cp.namespace(NS, &[]);
    let helm = Helm::new(&cp);
    let dir = HaGuard::dir_of(cp.root(), "ha-guard");
    std::fs::create_dir_all(&dir).expect("dir");
    let out = Command::new(env!("CARGO_BIN_EXE_ha-guard"))
        .args(["certs", "--out"])
        .arg(&dir)
        .args(["--dns", "ha-guard.ha-guard.svc", "--dns", "localhost", "--ip", "127.0.0.1"])
        .output()
        .expect("ha-guard certs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let balancer = Balancer::start(vec![]);
    let renderer = post_renderer(&cp.root().join("post-render"), RELEASE, balancer.port);
    let ca = dir.join("ca.crt").display().to_string();
    let renderer_arg = renderer.display().to_string();
    let chart_args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "--namespace",
            RELEASE_NS,
            "--set",
            "certificates.mode=secret",
            "--set",
            "certificates.secret.name=ha-guard-user-tls",
            "--set-file",
            &format!("certificates.secret.caBundle={ca}"),
            "--set",
            "audit.enabled=false",
            "--post-renderer",
            &renderer_arg,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let install: Vec<String> =
        ["install", RELEASE, "charts/ha-guard"].iter().map(|s| s.to_string()).chain(chart_args(&[])).collect();
    helm.run(&install.iter().map(String::as_str).collect::<Vec<_>>()).success();

    let token = cp
        .kubectl(&["-n", RELEASE_NS, "create", "token", RELEASE, "--duration", "2h"])
        .success()
        .stdout
        .trim()
        .to_string();
    let kubeconfig = cp.token_kubeconfig(&token, &cp.root().join("sa.kubeconfig"));
    let config = cp.root().join("config.yaml");
    std::fs::write(&config, installed_config(&cp)).expect("config.yaml");
    let replica = Replica { cp_root: cp.root().to_path_buf(), kubeconfig, config: config.clone() };
    let flags = policy_flags(&cp);
    assert_eq!(flags, ["--admission-policies=auto", "--admission-policies-owner=ha-guard"], "the chart's flags");
    let mut hg = replica.start(&cp, "ha-guard", &flags, &balancer);
    let log_path = hg.log_path();
    let mut steps = Steps::new(move || tail(&log_path, 30));

    steps.run("applied: what ha-guard policies generates, owned, bound where the webhooks are, type-checked", || {
        applied(&hg, 1);
        let want = generated(&config);
        assert!(want.iter().any(|n| n.starts_with("MutatingAdmissionPolicy/")), "MAPs served on 1.37: {want:?}");
        let docs = holds(&cp, &want, "the generated set in the apiserver");
        let owner = cp.kubectl(&["get", "validatingwebhookconfiguration", RELEASE, "-o", "json"]).success().json();
        for d in &docs {
            let refs = &d["metadata"]["ownerReferences"];
            assert_eq!(refs[0]["uid"], owner["metadata"]["uid"], "{}: {refs}", d["metadata"]["name"]);
            assert_eq!(refs[0]["kind"], "ValidatingWebhookConfiguration");
            if d["kind"].as_str().unwrap_or_default().ends_with("Binding") {
                let selector = d["spec"]["matchResources"]["namespaceSelector"].to_string();
                assert!(selector.contains("kube-system") && selector.contains(RELEASE_NS), "{selector}");
            }
        }
        let vaps: Vec<String> = docs
            .iter()
            .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
            .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        // Every rule with a CEL form has its policy here, type-checked below with the others.
        for r in ha_guard::core::rules::CEL_RULES {
            let id = r.rule.id;
            assert!(vaps.iter().any(|n| n.starts_with(&format!("ha-guard-{id}"))), "no policy of {id}: {vaps:?}");
        }
        let checked = poll("type checking of every policy", WAIT, Duration::from_millis(500), || {
            let list =
                cp.kubectl(&["get", "validatingadmissionpolicies", "-l", MANAGED, "-o", "json"]).success().json();
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let done = vaps.iter().all(|n| {
                items.iter().any(|p| {
                    p["metadata"]["name"] == n.as_str()
                        && p["status"]["observedGeneration"] == p["metadata"]["generation"]
                        && !p["status"]["typeChecking"].is_null()
                })
            });
            if done { Ok(items) } else { Err("not yet".into()) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let warnings: Vec<String> = checked
            .iter()
            .flat_map(|p| {
                p["status"]["typeChecking"]["expressionWarnings"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |w| format!("{}: {w}", p["metadata"]["name"]))
            })
            .collect();
        assert!(warnings.is_empty(), "type checking warns:\n{}", warnings.join("\n"));
        // The replica says so: applied, every rule handed over (its policies type-checked clean).
        poll("ha_guard_admission_policies_applied 1", WAIT, Duration::from_millis(200), || {
            let m = hg.metrics();
            let state = (
                m.get("ha_guard_admission_policies_applied", &[]),
                m.get("ha_guard_admission_policies_held_back", &[]),
            );
            if state == (Some(1.0), Some(0.0)) { Ok(()) } else { Err(format!("{state:?}")) }
        })
        .unwrap_or_else(|e| panic!("{e}:\n{}", hg.log_tail(30)));
    });

    // Another workload whose pods carry `team: t` (counted by the overlapping spreads below).
    cp.apply(labelled("peer", json!({"app": "peer", "team": "t"}), json!({}))).success();

    steps.run("down: the apiserver enforces the covered rules and mutations; the view's rules pass", || {
        hg.stop();
        balancer.set_backends(vec![]);
        let open_before = failed_open(&cp);
        let mismatch = labelled(
            "mismatch",
            json!({"app": "mismatch"}),
            spread(json!({"matchLabels": {"app": "other"}}), "DoNotSchedule"),
        );
        refused_by_policy(cp.apply(&mismatch), "spread-selector-mismatch");
        cp.kubectl(&["-n", NS, "get", "deployment", "mismatch"]).failure();
        let prestop = pod(
            deployment(NS, "prestop", 1),
            json!({"terminationGracePeriodSeconds": 30, "containers": [{"name": "app", "image": "nginx:1.27",
                "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 40"]}}}}]}),
        );
        refused_by_policy(cp.apply(&prestop), "prestop-exceeds-grace");
        let zero = cp.apply(pod(deployment(NS, "zero", 1), json!({"terminationGracePeriodSeconds": 0}))).success();
        assert_eq!(mentions(&zero, "termination-grace-zero"), 1, "{}", zero.output());
        assert!(
            zero.stderr.contains("ValidatingAdmissionPolicy 'ha-guard-termination-grace-zero-warn'"),
            "{}",
            zero.output()
        );
        cp.apply(pod(deployment(NS, "bare", 2), spread(Value::Null, "ScheduleAnyway"))).success();
        let stored = cp.kubectl(&["-n", NS, "get", "deployment", "bare", "-o", "json"]).success().json();
        assert_eq!(
            stored["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["labelSelector"],
            json!({"matchLabels": {"app": "bare"}}),
            "the MutatingAdmissionPolicy put the workload's selector in: {stored}"
        );
        cp.apply(pdb(NS, "budget", "zero", json!({"maxUnavailable": 1}))).success();
        let budget = cp.kubectl(&["-n", NS, "get", "pdb", "budget", "-o", "json"]).success().json();
        assert_eq!(budget["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow", "{budget}");
        cp.apply(deployment(NS, "fine", 1)).success().no_warnings();
        cp.apply(overlapping("view")).success().no_warnings();
        // A PDB that allows no disruption by itself is refused; one too tight only for the one
        // replica it covers (the view's) passes; a misspelt exemption warns with its suggestion.
        refused_by_policy(cp.apply(pdb(NS, "frozen", "fine", json!({"maxUnavailable": 0}))), "pdb-blocks-eviction");
        cp.apply(pdb(NS, "tight", "fine", json!({"minAvailable": 1}))).success();
        cp.kubectl(&["-n", NS, "delete", "pdb", "tight"]).success();
        let mut typo = deployment(NS, "typo", 1);
        typo["metadata"]["annotations"] = json!({"ha-guard.io/allow-termination-grace-zreo": "batch"});
        let out = cp.apply(&typo).success();
        assert_eq!(mentions(&out, "exemption-unknown-rule"), 1, "{}", out.output());
        assert!(out.stderr.contains("did you mean ha-guard.io/allow-termination-grace-zero?"), "{}", out.output());
        assert!(failed_open(&cp) > open_before, "the webhooks were called and failed open: ha-guard was down");
    });

    steps.run("back: each violation said once, the policy's and the webhook's", || {
        hg = replica.start(&cp, "ha-guard", &flags, &balancer);
        applied(&hg, 2);
        let open_before = failed_open(&cp);
        let mut both = overlapping("both");
        both["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(0);
        let out = cp.apply(&both).success();
        assert_eq!(mentions(&out, "termination-grace-zero"), 1, "the policy's warning only: {}", out.output());
        assert_eq!(mentions(&out, "spread-selector-overlap"), 1, "the webhook's (the view's): {}", out.output());
        let mismatch = labelled(
            "mismatch",
            json!({"app": "mismatch"}),
            spread(json!({"matchLabels": {"app": "other"}}), "DoNotSchedule"),
        );
        refused_by_policy(cp.apply(&mismatch), "spread-selector-mismatch");
        // The PDB's own block, once (the policy's); the budget too tight for its one replica, the
        // webhook's, naming the workload.
        refused_by_policy(cp.apply(pdb(NS, "frozen", "fine", json!({"maxUnavailable": 0}))), "pdb-blocks-eviction");
        let tight = cp.apply(pdb(NS, "tight-2", "fine", json!({"minAvailable": 1}))).failure();
        assert_eq!(mentions(&tight, "pdb-blocks-eviction"), 1, "{}", tight.output());
        assert!(
            !tight.stderr.contains("ValidatingAdmissionPolicy")
                && tight.stderr.contains("Deployment fine (replicas 1)"),
            "{}",
            tight.output()
        );
        let mut typo = deployment(NS, "typo-2", 1);
        typo["metadata"]["annotations"] = json!({"ha-guard.io/allow-termination-grace-zreo": "batch"});
        let out = cp.apply(&typo).success();
        assert_eq!(mentions(&out, "exemption-unknown-rule"), 1, "the policy's warning only: {}", out.output());
        assert_eq!(failed_open(&cp), open_before, "ha-guard answered every call");
    });

    steps.run("a rule turned off in the values: its policies deleted on reload, the others kept", || {
        let upgrade: Vec<String> = ["upgrade", RELEASE, "charts/ha-guard"]
            .iter()
            .map(|s| s.to_string())
            .chain(chart_args(&["--set", "config.rules.termination-grace-zero=off"]))
            .collect();
        helm.run(&upgrade.iter().map(String::as_str).collect::<Vec<_>>()).success();
        write_atomically(&config, &installed_config(&cp));
        let want = generated(&config);
        assert!(!want.iter().any(|n| n.contains("termination-grace-zero")), "{want:?}");
        holds(&cp, &want, "the set without termination-grace-zero");
        applied(&hg, 3);
        // The apiserver drops a deleted policy from admission a moment later (its informer).
        let zero = pod(deployment(NS, "zero-off", 1), json!({"terminationGracePeriodSeconds": 0}));
        poll("the deleted policy out of admission", WAIT, Duration::from_millis(300), || {
            let out = cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &zero.to_string()).success();
            if mentions(&out, "termination-grace-zero") == 0 { Ok(()) } else { Err(out.output()) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let out = cp.apply(&zero).success();
        assert_eq!(mentions(&out, "termination-grace-zero"), 0, "{}", out.output());
    });

    steps.run("admissionPolicies.enabled=false: every policy deleted, the webhook judges everything", || {
        let upgrade: Vec<String> = ["upgrade", RELEASE, "charts/ha-guard"]
            .iter()
            .map(|s| s.to_string())
            .chain(chart_args(&["--set", "admissionPolicies.enabled=false"]))
            .collect();
        helm.run(&upgrade.iter().map(String::as_str).collect::<Vec<_>>()).success();
        write_atomically(&config, &installed_config(&cp));
        let off = policy_flags(&cp);
        assert_eq!(off, ["--admission-policies=off", "--admission-policies-owner=ha-guard"]);
        hg.stop();
        hg = replica.start(&cp, "ha-guard-off", &off, &balancer);
        holds(&cp, &BTreeSet::new(), "no policy left");
        assert_eq!(hg.metrics().get("ha_guard_admission_policies_applied", &[]), None, "no sample when off");
        // The webhook alone now (once the apiserver has dropped the policies): its warning, once.
        let zero = pod(deployment(NS, "zero-webhook", 1), json!({"terminationGracePeriodSeconds": 0}));
        poll("the deleted policies out of admission", WAIT, Duration::from_millis(300), || {
            let out = cp.kubectl_in(&["apply", "--dry-run=server", "-f", "-"], &zero.to_string()).success();
            if out.stderr.contains("ValidatingAdmissionPolicy") { Err(out.output()) } else { Ok(()) }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let out = cp.apply(&zero).success();
        assert_eq!(mentions(&out, "termination-grace-zero"), 1, "{}", out.output());
        assert!(!out.stderr.contains("ValidatingAdmissionPolicy"), "{}", out.output());
    });

    steps.run("helm uninstall: no policy or binding left (the garbage collector), none re-created", || {
        let upgrade: Vec<String> =
            ["upgrade", RELEASE, "charts/ha-guard"].iter().map(|s| s.to_string()).chain(chart_args(&[])).collect();
        helm.run(&upgrade.iter().map(String::as_str).collect::<Vec<_>>()).success();
        write_atomically(&config, &installed_config(&cp));
        hg.stop();
        let flags = policy_flags(&cp);
        hg = replica.start(&cp, "ha-guard-on", &flags, &balancer);
        let want = generated(&config);
        holds(&cp, &want, "the policies back");
        helm.run(&["uninstall", RELEASE, "--namespace", RELEASE_NS]).success();
        holds(&cp, &BTreeSet::new(), "nothing left after helm uninstall");
        // The replica, still running, finds no owner: it creates nothing.
        std::thread::sleep(Duration::from_secs(3));
        assert!(held(&cp).is_empty(), "re-created after the uninstall: {:?}", names(&held(&cp)));
    });

    hg.stop();
    steps.finish();
}

//! The drain simulation: drain-blocked and drain-takes-all-replicas.

use super::{nodes_in_zone, simulate};
use crate::core::config::Config;
use crate::core::finding::{Decision, Finding};
use crate::core::judge;
use crate::core::testing::*;
use crate::core::view::{Index, PodInfo, PodOwner, PodPhase, View};

const BLOCKED: &str = "drain-blocked";
const TAKES_ALL: &str = "drain-takes-all-replicas";
const REFUSED: &str = "drain-refused";
const PENDING: &str = "drain-leaves-pending";

fn web(replicas: i32) -> String {
    deployment("web", &format!("replicas: {replicas}"), "")
}

fn pdb(budget: &str, extra: &str) -> String {
    format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\n  namespace: default\n{extra}spec:\n  \
         {budget}\n  selector:\n    matchLabels:\n      app: web\n"
    )
}

fn placed(nodes: &[&str]) -> Vec<PodInfo> {
    nodes.iter().enumerate().map(|(i, n)| pod(&format!("web-{}", i + 1), "web", n)).collect()
}

fn cluster(objects: &[&str], pods: Vec<PodInfo>) -> Index {
    let n = nodes(&[("n1", "za", false), ("n2", "za", false), ("n3", "zb", false)]);
    let mut all = vec![n.as_str()];
    all.extend_from_slice(objects);
    view_with_pods(&docs(&all), pods)
}

fn drain(view: &Index, nodes: &[&str]) -> Vec<Finding> {
    let nodes: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    simulate(view, &nodes, &format!("node {}", nodes.join(", ")))
}

#[test]
fn both_replicas_on_the_drained_node_with_one_disruption_allowed() {
    let view = cluster(&[&web(2), &pdb("minAvailable: 1", "")], placed(&["n1", "n1"]));
    let f = drain(&view, &["n1"]);
    let blocked = of_rule(&f, BLOCKED);
    assert_eq!(blocked.len(), 1, "{f:#?}");
    let b = blocked[0];
    assert_eq!(
        (b.object.to_string().as_str(), b.path.as_str()),
        ("PodDisruptionBudget default/web", "spec.minAvailable")
    );
    assert_eq!(b.related.iter().map(ToString::to_string).collect::<Vec<_>>(), ["Deployment default/web"]);
    for part in [
        "a drain of node n1 (cordoned first, then each pod evicted, as kubectl drain does)",
        "PodDisruptionBudget default/web (minAvailable 1; 2 of its pods healthy now, 1 needed)",
        "it evicts web-1, then refuses the eviction of web-2 (1 healthy, 1 needed: 0 disruptions allowed)",
        "until a replacement is Ready on another node",
    ] {
        assert!(b.what.contains(part), "{part:?} not in: {}", b.what);
    }
    let all = of_rule(&f, TAKES_ALL);
    assert_eq!(all.len(), 1, "{f:#?}");
    assert_eq!(all[0].object.to_string(), "Deployment default/web");
    assert!(
        all[0].what.contains("Deployment default/web (replicas 2): every ready replica (web-1, web-2) runs on node n1"),
        "{}",
        all[0].what
    );
    assert!(all[0].what.contains("Its PDB (web) makes the drain wait for replacements"), "{}", all[0].what);
    assert_eq!(all[0].related.iter().map(ToString::to_string).collect::<Vec<_>>(), ["PodDisruptionBudget default/web"]);
}

#[test]
fn one_of_three_replicas_drains_quietly() {
    let view = cluster(&[&web(3), &pdb("maxUnavailable: 1", "")], placed(&["n1", "n2", "n3"]));
    assert!(drain(&view, &["n1"]).is_empty());
}

#[test]
fn no_pdb_means_everything_goes_at_once() {
    let view = cluster(&[&web(2)], placed(&["n1", "n1"]));
    let f = drain(&view, &["n1"]);
    assert!(of_rule(&f, BLOCKED).is_empty(), "{f:#?}");
    let all = of_rule(&f, TAKES_ALL);
    assert_eq!(all.len(), 1, "{f:#?}");
    assert!(all[0].what.contains("No PDB covers it, so the drain evicts them all at once"), "{}", all[0].what);
}

#[test]
fn a_zone_drain_takes_the_nodes_of_the_zone() {
    let view = cluster(&[&web(3), &pdb("maxUnavailable: 1", "")], placed(&["n1", "n2", "n3"]));
    let za = nodes_in_zone(&view, "za");
    assert_eq!(za, ["n1", "n2"]);
    let f = simulate(&view, &za, "zone za");
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert!(
        b[0].what.contains("a drain of zone za")
            && b[0].what.contains("it evicts web-1, then refuses the eviction of web-2"),
        "{}",
        b[0].what
    );
    assert!(of_rule(&f, TAKES_ALL).is_empty(), "web-3 stays in zb: {f:#?}");
    assert!(nodes_in_zone(&view, "zc").is_empty());
}

#[test]
fn daemonset_mirror_finished_and_pending_pods_are_not_asked_of_a_budget() {
    let mut pods = placed(&["n1", "n2"]);
    // Other pods on n1, under a PDB of their own that allows nothing either.
    let mut agent = pod("agent-x", "other", "n1");
    agent.owner = PodOwner::DaemonSet;
    let mut mirror = pod("etcd-n1", "other", "n1");
    mirror.owner = PodOwner::Mirror;
    let mut done = pod("job-1", "other", "n1");
    done.phase = PodPhase::Succeeded;
    let mut waiting = pod("web-9", "web", "n1");
    (waiting.phase, waiting.ready) = (PodPhase::Pending, false);
    pods.extend([agent, mirror, done, waiting]);
    // minAvailable 2 over two healthy pods: no disruption allowed, so any pod asked of it is refused.
    let others =
        pdb("minAvailable: 100%", "").replace("name: web\n", "name: other\n").replace("app: web", "app: other");
    let view = cluster(&[&web(2), &pdb("minAvailable: 2", ""), &others], pods);
    let f = drain(&view, &["n1"]);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert!(
        b[0].what.contains("it evicts none of them, then refuses the eviction of web-1 ("),
        "only web-1 was asked: {}",
        b[0].what
    );
}

/// OpenKruise's workloads are not the built-in ones of the same kind name: a pod of a Kruise
/// Advanced DaemonSet is evicted (kubectl drain skips apps/v1 DaemonSets' pods only), and a
/// Kruise StatefulSet's pod is no pod of the built-in StatefulSet of its name.
#[test]
fn kruise_owners_are_other_controllers_to_the_drain() {
    use crate::core::model::live_pod::OwnerReference;
    let kruise = |kind: &str, name: &str| OwnerReference {
        api_version: "apps.kruise.io/v1beta1".into(),
        kind: kind.into(),
        name: name.into(),
        controller: Some(true),
    };
    let mut agent = pod("agent-x", "agent", "n1");
    agent.owner = PodOwner::resolve(Some(&kruise("DaemonSet", "agent")), false, |_| None);
    let mut db = pod("db-0", "db", "n1");
    db.owner = PodOwner::resolve(Some(&kruise("StatefulSet", "db")), false, |_| None);
    assert_eq!((&agent.owner, &db.owner), (&PodOwner::Other, &PodOwner::Other));
    // A built-in StatefulSet db of one replica (none running), and a budget over the agent that
    // allows nothing.
    let sts = workload("StatefulSet", "db", "replicas: 1\nserviceName: db", "");
    let agents = pdb("minAvailable: 1", "").replace("name: web\n", "name: agent\n").replace("app: web", "app: agent");
    let view = cluster(&[&sts, &agents], vec![agent, db]);
    let f = drain(&view, &["n1"]);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "the Kruise DaemonSet's pod is evicted, so its budget is asked: {f:#?}");
    assert!(b[0].what.contains("refuses the eviction of agent-x"), "{}", b[0].what);
    assert!(of_rule(&f, TAKES_ALL).is_empty(), "db-0 is no pod of StatefulSet db: {f:#?}");
}

#[test]
fn a_pod_under_two_pdbs_is_refused() {
    let other = pdb("minAvailable: 0", "").replace("name: web\n", "name: web-extra\n");
    let view = cluster(&[&web(3), &pdb("maxUnavailable: 1", ""), &other], placed(&["n1", "n2", "n3"]));
    let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::Refused);
    let r = of_rule(&f, REFUSED);
    assert_eq!(r.len(), 1, "{f:#?}");
    assert!(
        r[0].what.contains("cannot evict pod default/web-1: 2 PodDisruptionBudgets (web, web-extra) select it"),
        "{}",
        r[0].what
    );
    assert!(r[0].what.contains("the eviction API answers 500"), "{}", r[0].what);
    assert_eq!(
        r[0].related.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["PodDisruptionBudget default/web-extra", "Deployment default/web"]
    );
}

#[test]
fn a_budget_short_of_a_pod_the_scheduler_cannot_place_says_the_schedulers_reason() {
    let mut pods = placed(&["n1", "n2"]);
    let mut pending = pod("web-3", "web", "");
    pending.phase = PodPhase::Pending;
    pending.ready = false;
    pending.unschedulable =
        Some("0/3 nodes are available: 3 node(s) didn't match PersistentVolume's node affinity.".into());
    pods.push(pending);
    // minAvailable 2 over 3, one Pending: 2 healthy, 2 needed, nothing may go.
    let view = cluster(&[&web(3), &pdb("minAvailable: 2", "")], pods);
    let f = drain(&view, &["n1"]);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert!(
        b[0].what.ends_with(
            "Before the drain, web-3 is Pending, which the budget counts short: the scheduler says: 0/3 nodes are \
             available: 3 node(s) didn't match PersistentVolume's node affinity (see pods-pending)."
        ),
        "{}",
        b[0].what
    );
    // Without a Pending pod nothing is said of one.
    let view = cluster(&[&web(2), &pdb("minAvailable: 2", "")], placed(&["n1", "n2"]));
    let f = drain(&view, &["n1"]);
    assert!(!of_rule(&f, BLOCKED)[0].what.contains("Before the drain"), "{f:#?}");
}

#[test]
fn an_unready_pod_goes_with_always_allow_and_waits_with_if_healthy_budget() {
    let pods = || {
        let mut p = placed(&["n1", "n2", "n3"]);
        p[0].ready = false;
        p
    };
    // Two healthy of three, minAvailable 3: the budget is not met.
    let strict = pdb("minAvailable: 3", "");
    let view = cluster(&[&web(3), &strict], pods());
    let f = drain(&view, &["n1"]);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert!(
        b[0].what.contains("web-1 (it is not Ready and the budget is not met (2 healthy, 3 needed)"),
        "{}",
        b[0].what
    );
    let lenient = strict.replace("spec:\n", "spec:\n  unhealthyPodEvictionPolicy: AlwaysAllow\n");
    let view = cluster(&[&web(3), &lenient], pods());
    assert!(drain(&view, &["n1"]).is_empty());
}

#[test]
fn percentages_count_the_workloads_scale() {
    // minAvailable 50% of 4 replicas: 2 needed, so two of the four on n1 go and two wait.
    let view = cluster(&[&web(4), &pdb("minAvailable: 50%", "")], placed(&["n1", "n1", "n1", "n1"]));
    let f = drain(&view, &["n1"]);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert!(b[0].what.contains("it evicts web-1, web-2, then refuses the eviction of web-3, web-4"), "{}", b[0].what);
}

/// A drain is a fact: an exemption or a namespace mode does not hide what it would do, and the
/// finding says what would have hidden a policy finding; the configuration's actions still apply.
#[test]
fn exemptions_and_namespace_modes_do_not_hide_a_drain() {
    let exempt = pdb("minAvailable: 1", "  annotations:\n    ha-guard.io/allow-drain-blocked: \"drained by hand\"\n");
    let view = cluster(&[&web(2), &exempt], placed(&["n1", "n1"]));
    let d = judge::drain(&view, &Config::default(), &["n1".to_string()], "node n1").1;
    let actions: Vec<_> = d.findings.iter().map(|f| (f.rule.id, f.action)).collect();
    assert_eq!(actions, [(BLOCKED, Decision::Warn), (TAKES_ALL, Decision::Warn)]);
    let notes: Vec<String> = d.findings[0].notes.iter().map(ToString::to_string).collect();
    assert_eq!(
        notes,
        ["reported although PodDisruptionBudget default/web is exempt from drain-blocked (drained by hand): a drain \
          is a fact, not a policy"]
    );
    assert!(d.findings[1].notes.is_empty(), "the Deployment is not exempt: {:?}", d.findings[1].notes);
    for (label, said) in [("off", "labelled ha-guard.io/mode=off"), ("warn", "labelled ha-guard.io/mode=warn")] {
        let ns = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: default\n  labels:\n    ha-guard.io/mode: \"{label}\"\n"
        );
        let view = cluster(&[&web(2), &pdb("minAvailable: 1", ""), &ns], placed(&["n1", "n1"]));
        let d = judge::drain(&view, &Config::default(), &["n1".to_string()], "node n1").1;
        assert_eq!(d.findings.len(), 2, "{label}: {d:#?}");
        assert!(d.findings.iter().all(|f| f.notes.iter().any(|n| n.to_string().contains(said))), "{d:#?}");
    }
    let exempt_ns = crate::core::registry::parse_config("exemptNamespaces: [default]\n", "c.yaml").unwrap();
    let view = cluster(&[&web(2), &pdb("minAvailable: 1", "")], placed(&["n1", "n1"]));
    assert_eq!(judge::drain(&view, &exempt_ns, &["n1".to_string()], "node n1").1.findings.len(), 2);
    // The configuration's actions: off turns a rule off, deny makes the audit fail.
    let config = crate::core::registry::parse_config(
        "rules:\n  drain-takes-all-replicas: off\n  drain-blocked: deny\n",
        "c.yaml",
    )
    .unwrap();
    let d = judge::drain(&view, &config, &["n1".to_string()], "node n1").1;
    let actions: Vec<_> = d.findings.iter().map(|f| (f.rule.id, f.action)).collect();
    assert_eq!(actions, [(BLOCKED, Decision::Deny)]);
}

/// A PDB with neither field allows nothing (the disruption controller expects no pods): the drain
/// hangs on its first Ready pod, and the finding says why.
#[test]
fn a_budget_with_neither_field_hangs_the_drain() {
    let view = cluster(&[&web(3), &pdb("unhealthyPodEvictionPolicy: AlwaysAllow", "")], placed(&["n1", "n2", "n3"]));
    let f = drain(&view, &["n1"]);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    for part in [
        "(no minAvailable or maxUnavailable; 3 of its pods healthy now, 0 needed)",
        "it evicts none of them, then refuses the eviction of web-1",
        "it expects no pods: it sets neither minAvailable nor maxUnavailable",
    ] {
        assert!(b[0].what.contains(part), "{part:?} not in: {}", b[0].what);
    }
}

/// Pods without a controller: kubectl drain refuses the whole drain before it evicts anything
/// (without --force), whatever the budget.
#[test]
fn a_pod_without_a_controller_refuses_the_drain() {
    let bare = |name: &str, node: &str| PodInfo { owner: PodOwner::Unmanaged, ..pod(name, "web", node) };
    for budget in ["maxUnavailable: 1", "minAvailable: 1"] {
        let view = cluster(&[&web(2), &pdb(budget, "")], vec![bare("solo", "n1"), pod("web-1", "web", "n1")]);
        let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
        assert_eq!(run.outcome, super::Outcome::Refused, "{budget}");
        let r = of_rule(&f, REFUSED);
        assert_eq!(r.len(), 1, "{f:#?}");
        // Named as the pod, where it is (issue 51): not its namespace.
        assert_eq!(
            (r[0].object.to_string().as_str(), r[0].path.as_str()),
            ("Pod default/solo", "metadata.ownerReferences")
        );
        assert!(
            r[0].what.contains("refused before it evicts anything: pod default/solo has no controller"),
            "{}",
            r[0].what
        );
        assert!(r[0].what.contains("unless --force, which deletes it for good"), "{}", r[0].what);
        assert!(r[0].fix.contains("run the pod under a controller"), "{}", r[0].fix);
        assert!(
            run.evictions.iter().all(|e| e.result != crate::core::view::replay::EvictionResult::Evicted),
            "{run:#?}"
        );
    }
}

/// The PDB's status is what the eviction API reads when it is current, even where the pods would
/// say otherwise; a stale one is said, and the budget computed from the spec.
#[test]
fn a_current_status_decides_and_a_stale_one_is_said() {
    let status = |observed: i32, allowed: i32| {
        format!(
            "status:\n  observedGeneration: {observed}\n  disruptionsAllowed: {allowed}\n  expectedPods: 3\n  \
             currentHealthy: 3\n  desiredHealthy: 2\n"
        )
    };
    let with = |observed: i32, allowed: i32| {
        format!("{}{}", pdb("maxUnavailable: 1", "  generation: 2\n"), status(observed, allowed))
    };
    // Computed, one disruption would be allowed; the current status says none.
    let view = cluster(&[&web(3), &with(2, 0)], placed(&["n1", "n2", "n3"]));
    let b = of_rule(&drain(&view, &["n1"]), BLOCKED).iter().map(|f| f.what.clone()).collect::<Vec<_>>();
    assert_eq!(b.len(), 1, "the current status allows none");
    assert!(!b[0].contains("stale"), "{}", b[0]);
    // Stale (observed 1 < generation 2): computed from the pods, and said.
    let view = cluster(&[&web(3), &with(1, 0)], placed(&["n1", "n1", "n3"]));
    let b = of_rule(&drain(&view, &["n1"]), BLOCKED).iter().map(|f| f.what.clone()).collect::<Vec<_>>();
    assert_eq!(b.len(), 1);
    assert!(b[0].contains("its status is stale, observedGeneration 1 < generation 2"), "{}", b[0]);
}

/// One eviction, as the eviction API answers it: 201 without a PDB (or for a Pending pod), 201 or
/// 429 by its one PDB, 500 under two.
#[test]
fn one_eviction_is_answered_as_the_eviction_api_does() {
    use super::{EvictionAnswer, eviction_answer};
    let view = cluster(&[&web(2), &pdb("minAvailable: 1", "")], placed(&["n1", "n2"]));
    let pods = view.pods_in("default");
    assert_eq!(eviction_answer(&view, "default", &pods[0]), EvictionAnswer::Evicted);
    let view = cluster(&[&web(2), &pdb("minAvailable: 2", "")], placed(&["n1", "n2"]));
    let answer = eviction_answer(&view, "default", &view.pods_in("default")[0]);
    assert_eq!(answer.code(), 429);
    assert_eq!(answer, EvictionAnswer::Refused("2 healthy, 2 needed: 0 disruptions allowed".into()));
    let mut pending = placed(&["n1", "n2"]);
    pending[0].phase = PodPhase::Pending;
    let view = cluster(&[&web(2), &pdb("minAvailable: 2", "")], pending);
    assert_eq!(eviction_answer(&view, "default", &view.pods_in("default")[0]), EvictionAnswer::Deleted);
    let second = pdb("maxUnavailable: 1", "").replace("name: web\n", "name: web-too\n");
    let view = cluster(&[&web(2), &pdb("maxUnavailable: 1", ""), &second], placed(&["n1", "n2"]));
    assert_eq!(eviction_answer(&view, "default", &view.pods_in("default")[0]).code(), 500);
    let view = cluster(&[&web(2)], placed(&["n1", "n2"]));
    assert_eq!(eviction_answer(&view, "default", &view.pods_in("default")[0]), EvictionAnswer::Deleted);
}

// ---- replacements placed as the scheduler would (issue 37) ----

fn cluster_with_templates(objects: &[&str], pods: Vec<PodInfo>) -> Index {
    let n = nodes(&[("n1", "za", false), ("n2", "za", false), ("n3", "zb", false)]);
    let mut all = vec![n.as_str()];
    all.extend_from_slice(objects);
    view_with_templates(&docs(&all), pods)
}

/// Both replicas on the drained node, a budget that allows one: the first goes, its replacement is
/// placed on another node and Ready, the budget allows one again, the second goes: it completes.
#[test]
fn replacements_that_find_room_let_the_drain_complete() {
    let view = cluster_with_templates(&[&web(2), &pdb("minAvailable: 1", "")], placed(&["n1", "n1"]));
    let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::Completes, "{run:#?}");
    assert!(of_rule(&f, BLOCKED).is_empty() && of_rule(&f, PENDING).is_empty(), "{f:#?}");
    let placed_on: Vec<Option<&str>> = run.evictions.iter().map(|e| e.replacement.as_deref()).collect();
    assert_eq!(placed_on, [Some("n2"), Some("n3")], "spread over the nodes left: {run:#?}");
    // Every ready replica was on the node: said all the same.
    assert_eq!(of_rule(&f, TAKES_ALL).len(), 1);
}

/// A DoNotSchedule hostname spread, one replica a node: the cordoned node stays a domain with 0
/// (nodeTaintsPolicy Ignore), so the replacement fits nowhere; the drain completes and leaves it
/// Pending. With nodeTaintsPolicy Honor it goes.
#[test]
fn a_spread_counting_the_cordoned_node_leaves_the_replacement_pending() {
    let spread = |policy: &str| {
        deployment(
            "web",
            "replicas: 3",
            &format!(
                "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  whenUnsatisfiable: \
                 DoNotSchedule\n  labelSelector: {{matchLabels: {{app: web}}}}\n{policy}"
            ),
        )
    };
    let view = cluster_with_templates(&[&spread(""), &pdb("maxUnavailable: 1", "")], placed(&["n1", "n2", "n3"]));
    let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
    let p = of_rule(&f, PENDING);
    assert_eq!(p.len(), 1, "{f:#?}");
    assert_eq!(p[0].object.to_string(), "Deployment default/web");
    for part in [
        "a drain of node n1 completes, but the replacement of web-1 cannot be placed on the nodes that remain",
        "cordoned on n1",
        "topologySpreadConstraints[0] would be skewed beyond maxSkew on n2, n3",
        "runs 1 short until the nodes are uncordoned",
    ] {
        assert!(p[0].what.contains(part), "{part:?} not in: {}", p[0].what);
    }
    let honor = spread("  nodeTaintsPolicy: Honor\n");
    let view = cluster_with_templates(&[&honor, &pdb("maxUnavailable: 1", "")], placed(&["n1", "n2", "n3"]));
    assert_eq!(super::run(&view, &["n1".to_string()], "node n1").0.outcome, super::Outcome::Completes);
}

/// Both replicas pinned to the drained node: the first replacement has nowhere to go, the budget
/// never allows the second eviction: the drain hangs, and says why.
#[test]
fn a_replacement_with_nowhere_to_go_hangs_the_drain() {
    let pinned = deployment("web", "replicas: 2", "nodeSelector: {kubernetes.io/hostname: n1}\n");
    let view = cluster_with_templates(&[&pinned, &pdb("maxUnavailable: 1", "")], placed(&["n1", "n1"]));
    let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::Hangs, "{run:#?}");
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    for part in [
        "it evicts web-1, then refuses the eviction of web-2",
        "no replacement makes room, so the drain hangs",
        "The replacement of web-1 stays Pending (cordoned on n1; nodeSelector or required node affinity not met on n2, n3)",
    ] {
        assert!(b[0].what.contains(part), "{part:?} not in: {}", b[0].what);
    }
    let results: Vec<(&str, &str)> = run.evictions.iter().map(|e| (e.pod.as_str(), e.result.as_str())).collect();
    assert_eq!(results, [("web-1", "evicted"), ("web-2", "refused")]);
}

/// On a cluster of thousands of nodes the message stays short: each refusing filter names a few
/// nodes and counts the rest, exactly (a PolicyReport holds at most 1.5 MiB).
#[test]
fn a_pending_replacement_on_thousands_of_nodes_names_a_few_and_counts_the_rest() {
    let pinned = deployment("web", "replicas: 2", "nodeSelector: {kubernetes.io/hostname: n1}\n");
    let names: Vec<String> = (1..=3000).map(|i| format!("n{i}")).collect();
    let list: Vec<(&str, &str, bool)> = names.iter().map(|n| (n.as_str(), "za", false)).collect();
    let n = nodes(&list);
    let budget = pdb("maxUnavailable: 1", "");
    let view = view_with_templates(&docs(&[&n, &pinned, &budget]), placed(&["n1", "n1"]));
    let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::Hangs, "{run:#?}");
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    // 2999 nodes refuse by node affinity: five named, 2994 counted.
    assert!(
        b[0].what
            .contains("nodeSelector or required node affinity not met on n10, n100, n1000, n1001, n1002 and 2994 more"),
        "{}",
        b[0].what
    );
    assert!(b[0].what.len() < 1500, "{} bytes: {}", b[0].what.len(), b[0].what);
}

/// Two of three replicas (one a node of four) drained at once: the first replacement takes the
/// free node, the budget lets the second go, its replacement fits nowhere under the hostname spread.
#[test]
fn two_nodes_of_a_spread_workload_leave_one_replica_pending() {
    let n =
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: NAME\n  labels:\n    kubernetes.io/hostname: NAME\nspec: {}\n";
    let mut four: Vec<String> = ["n1", "n2", "n3", "n4"].iter().map(|name| n.replace("NAME", name)).collect();
    let spread = deployment(
        "web",
        "replicas: 3",
        "topologySpreadConstraints:\n- maxSkew: 1\n  topologyKey: kubernetes.io/hostname\n  whenUnsatisfiable: \
         DoNotSchedule\n  labelSelector: {matchLabels: {app: web}}\n",
    );
    let mut all: Vec<&str> = four.iter().map(String::as_str).collect();
    let budget = pdb("minAvailable: 2", "");
    all.extend([spread.as_str(), budget.as_str()]);
    let view = view_with_templates(&docs(&all), placed(&["n1", "n2", "n3"]));
    let (run, f) = super::run(&view, &["n1".to_string(), "n2".to_string()], "nodes n1, n2");
    assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
    let pending = of_rule(&f, PENDING);
    assert_eq!(pending.len(), 1, "{f:#?}");
    assert!(pending[0].what.ends_with("runs 1 short until the nodes are uncordoned."), "{}", pending[0].what);
    // A node a node autoscaler labels: the simulation says what it cannot know.
    four[3] = four[3].replace("labels:\n", "labels:\n    karpenter.sh/nodepool: default\n");
    let mut all: Vec<&str> = four.iter().map(String::as_str).collect();
    all.extend([spread.as_str(), budget.as_str()]);
    let view = view_with_templates(&docs(&all), placed(&["n1", "n2", "n3"]));
    let (_, f) = super::run(&view, &["n1".to_string(), "n2".to_string()], "nodes n1, n2");
    let what = &of_rule(&f, PENDING)[0].what;
    assert!(
        what.contains("until the nodes are uncordoned or a node is added (node n4 carries karpenter.sh/nodepool"),
        "{what}"
    );
}

/// --drain-each drains the nodes in turn: each drain starts where the one before left the pods
/// (the replacement of n1's replica is on n3 when n3 is drained).
#[test]
fn each_drain_starts_from_what_the_one_before_left() {
    let anti = deployment(
        "web",
        "replicas: 2",
        "affinity:\n  podAntiAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n    - topologyKey: \
         kubernetes.io/hostname\n      labelSelector: {matchLabels: {app: web}}\n",
    );
    let view = cluster_with_templates(&[&anti, &pdb("maxUnavailable: 1", "")], placed(&["n1", "n2"]));
    let nodes: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| n.to_string()).collect();
    let runs = crate::core::view::replay::replay_each(&view, &nodes);
    let moves: Vec<Vec<(&str, Option<&str>)>> =
        runs.iter().map(|r| r.evictions.iter().map(|e| (e.pod.as_str(), e.replacement.as_deref())).collect()).collect();
    assert_eq!(
        moves,
        [vec![("web-1", Some("n3"))], vec![("web-2", Some("n1"))], vec![("web-1-replacement-0", Some("n2"))]],
        "{runs:#?}"
    );
    assert!(runs.iter().all(|r| r.outcome == super::Outcome::Completes));
}

/// `drains[].namespaces`: the namespaces whose pods a drain evicts or tries to; `--namespace`
/// keeps that namespace's evictions and Pending replacements, any refused eviction (it decides how
/// the drain ends), the outcome and the namespaces.
#[test]
fn a_drain_names_the_namespaces_it_disrupts_and_narrows_to_one() {
    use crate::core::view::replay::{Eviction, EvictionResult, Pending};
    let view = cluster_with_templates(&[&web(2), &pdb("minAvailable: 1", "")], placed(&["n1", "n1"]));
    let (mut run, _) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.namespaces, ["default"]);
    let in_shop = |pod: &str, result| Eviction {
        namespace: "shop".into(),
        pod: pod.into(),
        result,
        replacement: None,
        reason: "why".into(),
    };
    run.evictions.extend([in_shop("db-0", EvictionResult::Refused), in_shop("api-1", EvictionResult::Evicted)]);
    run.pending.push(Pending {
        namespace: "shop".into(),
        pod: "api-1".into(),
        workload: crate::core::model::ObjectRef::new(crate::core::model::Kind::Deployment, "shop", "api"),
        reason: "why".into(),
    });
    run.namespaces = vec!["default".into(), "shop".into()];
    let narrowed = run.clone().narrowed_to("default");
    let pods: Vec<&str> = narrowed.evictions.iter().map(|e| e.pod.as_str()).collect();
    assert_eq!(pods, ["web-1", "web-2", "db-0"], "default's evictions and shop's refusal");
    assert!(narrowed.pending.is_empty());
    assert_eq!((narrowed.outcome, narrowed.namespaces), (run.outcome, run.namespaces.clone()));
    assert_eq!(run.clone().narrowed_to("shop").pending.len(), 1);
}

/// A pod of another controller (a Job, an operator's kind) is evicted, and the simulation says it
/// does not know whether or where that controller makes another.
#[test]
fn a_pod_of_another_controller_is_evicted_and_its_replacement_not_guessed() {
    let job = PodInfo { owner: PodOwner::Other, ..pod("batch-1", "batch", "n1") };
    let view = cluster_with_templates(&[&web(2)], vec![job, pod("web-1", "web", "n2")]);
    let (run, _) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::Completes, "{run:#?}");
    let e = &run.evictions[0];
    assert_eq!((e.pod.as_str(), e.replacement.as_deref()), ("batch-1", None));
    assert!(
        e.reason.contains("neither a Deployment nor a StatefulSet: replaced only if that controller recreates it"),
        "{}",
        e.reason
    );
}

/// A replica whose claim is bound to a local PersistentVolume of the drained node: its replacement
/// mounts the same claim, which only that node can use (VolumeBinding), so it stays Pending; a PV
/// two nodes can use lets it go; without the storage read, the drain would say it completes.
#[test]
fn a_replacement_whose_volume_is_pinned_to_the_drained_node_stays_pending() {
    use crate::core::view::storage::Storage;
    let claim = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: default\nspec:\n  \
                 accessModes: [ReadWriteOnce]\n  storageClassName: local\n  volumeName: local-pv\n";
    let web = deployment("web", "replicas: 1", "volumes:\n- name: data\n  persistentVolumeClaim: {claimName: data}\n");
    let pod = PodInfo { claims: std::sync::Arc::from([std::sync::Arc::from("data")]), ..pod("web-1", "web", "n1") };
    let pv = |nodes: &[&str]| {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "local-pv"}, "spec": {
            "storageClassName": "local", "claimRef": {"namespace": "default", "name": "data"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}}}))
        .expect("a PersistentVolume")
    };
    let with_pv = |nodes: &[&str]| {
        let mut view = cluster_with_templates(&[&web, claim, &pdb("maxUnavailable: 1", "")], vec![pod.clone()]);
        let mut storage = Storage::default();
        storage.insert_volume(&pv(nodes));
        view.set_storage(storage);
        view
    };
    let view = with_pv(&["n1"]);
    let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
    let p = of_rule(&f, PENDING);
    assert_eq!(p.len(), 1, "{f:#?}");
    for part in [
        "the replacement of web-1 cannot be placed on the nodes that remain",
        "didn't match PersistentVolume's node affinity (PersistentVolume local-pv) on n2, n3",
    ] {
        assert!(p[0].what.contains(part), "{part:?} not in: {}", p[0].what);
    }
    let (run, _) = super::run(&with_pv(&["n1", "n3"]), &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::Completes, "{run:#?}");
    assert_eq!(run.evictions[0].replacement.as_deref(), Some("n3"));
    let unread = cluster_with_templates(&[&web, claim, &pdb("maxUnavailable: 1", "")], vec![pod.clone()]);
    assert_eq!(super::run(&unread, &["n1".to_string()], "node n1").0.outcome, super::Outcome::Completes);
}

/// NodeVolumeLimits counts an existing pod's generic ephemeral volumes as it counts its claims
/// (`filterAttachableVolumes`: `case vol.Ephemeral != nil: pvcName = ephemeral.VolumeClaimName(pod,
/// &vol)`): a bound one by its PV's CSI volume, one not bound yet by its class's provisioner
/// (`getCSIDriverInfoFromSC`). Two nodes of a CSI limit of 1, each holding such a pod: the
/// replacement of a pod with a CSI volume of the same driver fits on neither.
#[test]
fn existing_pods_ephemeral_volumes_count_toward_the_csi_volume_limit() {
    use crate::core::view::storage::Storage;
    use std::sync::Arc;
    let claim = |name: &str, volume: &str, class: &str| {
        format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
             accessModes: [ReadWriteOnce]\n  storageClassName: {class}\n  volumeName: '{volume}'\n"
        )
    };
    let (data, scratch, tmp) = (
        claim("data", "disk-web", "ebs"),
        claim("cache-1-scratch", "disk-cache", "ebs"),
        claim("tmp-1-tmp", "", "ebs"),
    );
    let web = deployment("web", "replicas: 1", "volumes:\n- name: data\n  persistentVolumeClaim: {claimName: data}\n");
    let names = |n: &[&str]| -> Arc<[Arc<str>]> { n.iter().map(|c| Arc::from(*c)).collect() };
    let world = |ephemeral: bool| {
        let own = |claims: &[&str]| if ephemeral { names(claims) } else { Arc::default() };
        let pods = vec![
            PodInfo { claims: names(&["data"]), ..pod("web-1", "web", "n1") },
            PodInfo { ephemeral_claims: own(&["cache-1-scratch"]), ..pod("cache-1", "cache", "n2") },
            PodInfo { ephemeral_claims: own(&["tmp-1-tmp"]), ..pod("tmp-1", "tmp", "n3") },
        ];
        let mut view = cluster_with_templates(&[&web, &data, &scratch, &tmp, &pdb("maxUnavailable: 1", "")], pods);
        let mut storage = Storage::default();
        let driver = "ebs.csi.aws.com";
        for (pv, claim) in [("disk-web", "data"), ("disk-cache", "cache-1-scratch")] {
            storage.insert_volume(
                &serde_json::from_value(serde_json::json!({"metadata": {"name": pv}, "spec": {"storageClassName": "ebs",
                    "claimRef": {"namespace": "default", "name": claim}, "csi": {"driver": driver, "volumeHandle": pv}}}))
                .expect("a PersistentVolume"),
            );
        }
        storage.insert_class(
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "ebs"}, "provisioner": driver,
                "volumeBindingMode": "WaitForFirstConsumer"}))
            .expect("a StorageClass"),
        );
        for node in ["n2", "n3"] {
            storage.insert_csi_node(
                &serde_json::from_value(serde_json::json!({"metadata": {"name": node}, "spec": {"drivers": [
                    {"name": driver, "nodeID": node, "allocatable": {"count": 1}}]}}))
                .expect("a CSINode"),
            );
        }
        view.set_storage(storage);
        view
    };
    let (run, f) = super::run(&world(true), &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
    let p = of_rule(&f, PENDING);
    assert_eq!(p.len(), 1, "{f:#?}");
    let part = "1 volumes of CSI driver ebs.csi.aws.com already attached (its CSINode's allocatable.count) on n2, n3";
    assert!(p[0].what.contains(part), "{part:?} not in: {}", p[0].what);
    // The same pods without their ephemeral volumes: the replacement goes.
    let (run, _) = super::run(&world(false), &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::Completes, "{run:#?}");
}

/// The replacement is first tried while its evicted pod is still on its node, terminating, which
/// kube-scheduler counts: a required pod affinity to its own app finds that pod, and the
/// replacement goes to its zone (n2, not n3). Where that zone has no other node, the first try
/// fails, and the pod's deletion does not try it again (`isSchedulableAfterAssignedPodChange`
/// skips a deleted pod the affinity matched): Pending, though the first-pod escape would now let
/// it go anywhere. With a pod of the app elsewhere, no escape is needed and it goes there.
#[test]
fn a_self_affine_replacement_first_meets_its_terminating_pod() {
    let zone_affine = "affinity:\n  podAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n    - \
                       topologyKey: topology.kubernetes.io/zone\n      labelSelector: {matchLabels: {app: web}}\n";
    let web = deployment("web", "replicas: 1", zone_affine);
    let budget = pdb("maxUnavailable: 1", "");
    let view = cluster_with_templates(&[&web, &budget], placed(&["n1"]));
    let (run, _) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::Completes, "{run:#?}");
    assert_eq!(run.evictions[0].replacement.as_deref(), Some("n2"), "the evicted pod's zone");
    let view = cluster_with_templates(&[&web, &budget], placed(&["n3"]));
    let (run, f) = super::run(&view, &["n3".to_string()], "node n3");
    assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
    let p = of_rule(&f, PENDING);
    assert_eq!(p.len(), 1, "{f:#?}");
    for part in [
        "its first try found web-1 still on its node (kube-scheduler counts a terminating pod)",
        "stays Pending until the scheduler retries unschedulable pods (after 5 minutes",
    ] {
        assert!(p[0].what.contains(part), "{part:?} not in: {}", p[0].what);
    }
    // Two replicas, one on n1: the other's replacement goes to n1's zone.
    let two = deployment("web", "replicas: 2", zone_affine);
    let view = cluster_with_templates(&[&two, &budget], placed(&["n1", "n3"]));
    let (run, _) = super::run(&view, &["n3".to_string()], "node n3");
    assert_eq!(run.outcome, super::Outcome::Completes, "{run:#?}");
    assert_eq!(run.evictions[0].replacement.as_deref(), Some("n2"), "{run:#?}");
}

/// The replacement asks what the pod it replaces asked as the apiserver stored it (a LimitRange's
/// default request, a RuntimeClass's overhead), not only what its template declares.
#[test]
fn a_replacement_asks_the_requests_its_pod_was_stored_with() {
    let node = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n\
             spec: {{}}\nstatus:\n  allocatable: {{cpu: '1', memory: 4Gi, pods: '110'}}\n"
        )
    };
    let web = deployment("web", "replicas: 3", "");
    let budget = pdb("maxUnavailable: 1", "");
    let stored = |cpu_milli: i64| -> Vec<PodInfo> {
        placed(&["n1", "n2", "n3"])
            .into_iter()
            .map(|p| {
                let requests = crate::core::model::resources::Resources { cpu_milli, ..Default::default() };
                PodInfo { requests, ..p }
            })
            .collect()
    };
    let nodes: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| node(n)).collect();
    let mut all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    all.extend([web.as_str(), budget.as_str()]);
    let view = view_with_templates(&docs(&all), stored(600));
    let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
    assert!(of_rule(&f, PENDING)[0].what.contains("not enough cpu on n2, n3"), "{f:#?}");
    // At 500m a core, the replacement fits beside another.
    let view = view_with_templates(&docs(&all), stored(500));
    assert_eq!(super::run(&view, &["n1".to_string()], "node n1").0.outcome, super::Outcome::Completes);
}

/// Three nodes of one CPU; `web` (1 replica, 600m) on n1; a 600m pod of `batch-a` on n2 and of
/// `batch-b` on n3, priority 0.
fn crowded(web_priority: i32, web_preempts: bool, batch_a_budget: &str) -> Index {
    let node = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n\
             spec: {{}}\nstatus:\n  allocatable: {{cpu: '1', memory: 4Gi, pods: '110'}}\n"
        )
    };
    let cpu = |p: PodInfo, priority: i32| PodInfo {
        requests: crate::core::model::resources::Resources { cpu_milli: 600, ..Default::default() },
        priority,
        ..p
    };
    let pods = vec![
        PodInfo { preempts: web_preempts, ..cpu(pod("web-1", "web", "n1"), web_priority) },
        cpu(pod("batch-a-1", "batch-a", "n2"), 0),
        cpu(pod("batch-b-1", "batch-b", "n3"), 0),
    ];
    let nodes: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| node(n)).collect();
    let (web, a, b) = (
        deployment("web", "replicas: 1", ""),
        deployment("batch-a", "replicas: 1", ""),
        deployment("batch-b", "replicas: 1", ""),
    );
    let budget = pdb("maxUnavailable: 1", "");
    let a_budget = format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: batch-a\n  namespace: default\nspec:\n  \
         {batch_a_budget}\n  selector:\n    matchLabels:\n      app: batch-a\n"
    );
    let mut all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    all.extend([web.as_str(), a.as_str(), b.as_str(), budget.as_str(), a_budget.as_str()]);
    view_with_templates(&docs(&all), pods)
}

/// DefaultPreemption: the replacement of a pod of higher priority that fits nowhere takes a node
/// from a pod of lower priority, which is what goes Pending; the node chosen is the one whose
/// victims no budget protects.
#[test]
fn a_replacement_of_higher_priority_preempts_and_its_victim_stays_pending() {
    let view = crowded(1000, true, "maxUnavailable: 1");
    let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
    assert_eq!(run.evictions[0].replacement.as_deref(), Some("n2"), "a tie: the first node by name");
    assert!(
        run.evictions[0]
            .reason
            .contains("replaced on n2, preempting default/batch-a-1 (priority 0) (priority 1000 is higher)"),
        "{}",
        run.evictions[0].reason
    );
    let preempted: Vec<(&str, &str, Option<&str>)> =
        run.preempts.iter().map(|p| (p.pod.as_str(), p.node.as_str(), p.replacement.as_deref())).collect();
    assert_eq!(preempted, [("batch-a-1", "n2", None)]);
    let p = of_rule(&f, PENDING);
    assert_eq!(p.len(), 1, "{f:#?}");
    assert_eq!(p[0].object.to_string(), "Deployment default/batch-a");
    for part in [
        "preempted on n2 by the replacement of default/web-1 (priority 1000, higher than its 0)",
        "its own replacement fits nowhere: cordoned on n1; not enough cpu on n2, n3",
    ] {
        assert!(p[0].what.contains(part), "{part:?} not in: {}", p[0].what);
    }
    // batch-a's budget allows no disruption: n3, whose victim no budget protects.
    let (run, _) = super::run(&crowded(1000, true, "minAvailable: 1"), &["n1".to_string()], "node n1");
    assert_eq!(run.evictions[0].replacement.as_deref(), Some("n3"), "{run:#?}");
    assert_eq!(run.preempts[0].pod, "batch-b-1");
}

/// No preemption at the same priority, nor with `preemptionPolicy: Never`: the replacement itself
/// stays Pending.
#[test]
fn a_replacement_of_equal_priority_or_that_never_preempts_stays_pending() {
    for (priority, preempts) in [(0, true), (1000, false)] {
        let (run, _) = super::run(&crowded(priority, preempts, "maxUnavailable: 1"), &["n1".to_string()], "node n1");
        assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
        assert!(run.preempts.is_empty(), "{run:#?}");
        assert_eq!(run.pending[0].pod, "web-1");
    }
}

/// A victim's replacement is a new pod: where it fits nowhere, the scheduler runs DefaultPreemption
/// for it too (`PodEligibleToPreemptOthers` asks only its `preemptionPolicy`). `web` (1000, not on
/// n3) preempts `batch-a` (500) on n2; batch-a's replacement preempts `batch-b` (0) on n3, which is
/// what stays Pending. With `preemptionPolicy: Never` on batch-a, batch-a stays Pending and
/// batch-b runs on.
#[test]
fn a_victims_replacement_preempts_in_turn_where_its_policy_lets_it() {
    let chain = |a_preempts: bool| {
        let node = |name: &str| {
            format!(
                "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n\
                 spec: {{}}\nstatus:\n  allocatable: {{cpu: '1', memory: 4Gi, pods: '110'}}\n"
            )
        };
        let cpu = |p: PodInfo, priority: i32| PodInfo {
            requests: crate::core::model::resources::Resources { cpu_milli: 600, ..Default::default() },
            priority,
            ..p
        };
        let pods = vec![
            cpu(pod("web-1", "web", "n1"), 1000),
            PodInfo { preempts: a_preempts, ..cpu(pod("batch-a-1", "batch-a", "n2"), 500) },
            cpu(pod("batch-b-1", "batch-b", "n3"), 0),
        ];
        let nodes: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| node(n)).collect();
        let not_n3 = "affinity:\n  nodeAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n      \
                      nodeSelectorTerms:\n      - matchExpressions:\n        - {key: kubernetes.io/hostname, operator: \
                      NotIn, values: [n3]}\n";
        let (web, a, b) = (
            deployment("web", "replicas: 1", not_n3),
            deployment("batch-a", "replicas: 1", ""),
            deployment("batch-b", "replicas: 1", ""),
        );
        let mut all: Vec<&str> = nodes.iter().map(String::as_str).collect();
        all.extend([web.as_str(), a.as_str(), b.as_str()]);
        view_with_templates(&docs(&all), pods)
    };
    let (run, f) = super::run(&chain(true), &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
    let preempted: Vec<(&str, &str, &str, Option<&str>)> = run
        .preempts
        .iter()
        .map(|p| (p.pod.as_str(), p.node.as_str(), p.by.as_str(), p.replacement.as_deref()))
        .collect();
    assert_eq!(
        preempted,
        [("batch-b-1", "n3", "default/batch-a-1", None), ("batch-a-1", "n2", "default/web-1", Some("n3"))],
        "{run:#?}"
    );
    let p = of_rule(&f, PENDING);
    assert_eq!(p.len(), 1, "{f:#?}");
    assert_eq!(p[0].object.to_string(), "Deployment default/batch-b");
    assert!(
        p[0].what.contains("preempted on n3 by the replacement of default/batch-a-1 (priority 500, higher than its 0)"),
        "{}",
        p[0].what
    );
    // batch-a may not preempt: it is what stays Pending, batch-b is left alone.
    let (run, f) = super::run(&chain(false), &["n1".to_string()], "node n1");
    let preempted: Vec<(&str, Option<&str>)> =
        run.preempts.iter().map(|p| (p.pod.as_str(), p.replacement.as_deref())).collect();
    assert_eq!(preempted, [("batch-a-1", None)], "{run:#?}");
    assert_eq!(of_rule(&f, PENDING)[0].object.to_string(), "Deployment default/batch-a");
}

/// A node YAML of `cpu` CPUs (4Gi, 110 pods), labelled with its hostname.
fn cpu_node(name: &str, cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n\
         spec: {{}}\nstatus:\n  allocatable: {{cpu: '{cpu}', memory: 4Gi, pods: '110'}}\n"
    )
}

/// `p` requesting `cpu_milli` of CPU at `priority`.
fn with_cpu(p: PodInfo, cpu_milli: i64, priority: i32) -> PodInfo {
    PodInfo { requests: crate::core::model::resources::Resources { cpu_milli, ..Default::default() }, priority, ..p }
}

/// A replacement made earlier in the same drain can be a victim too, and its controller replaces
/// it again (a ReplicaSet's `manageReplicas` counts it gone). `batch-a-1` (priority 0, 300m) is
/// evicted first and replaced on n2; `web-1` (priority 1000, 800m) fits only by preempting that
/// replacement; batch-a's next pod fits nowhere (n1 cordoned, n2 full) and stays Pending. The
/// replay used to look for the victim among n2's pods as the drain began, not find it, and say
/// the drain completes.
#[test]
fn a_replacement_preempted_in_the_same_drain_is_replaced_again() {
    let pods =
        vec![with_cpu(pod("batch-a-1", "batch-a", "n1"), 300, 0), with_cpu(pod("web-1", "web", "n1"), 800, 1000)];
    let (n1, n2) = (cpu_node("n1", "2"), cpu_node("n2", "1"));
    let (web, a) = (deployment("web", "replicas: 1", ""), deployment("batch-a", "replicas: 1", ""));
    let view = view_with_templates(&docs(&[n1.as_str(), n2.as_str(), web.as_str(), a.as_str()]), pods);
    let (run, f) = super::run(&view, &["n1".to_string()], "node n1");
    assert_eq!(run.outcome, super::Outcome::LeavesPending, "{run:#?}");
    let preempted: Vec<(&str, &str, &str, Option<&str>)> = run
        .preempts
        .iter()
        .map(|p| (p.pod.as_str(), p.node.as_str(), p.by.as_str(), p.replacement.as_deref()))
        .collect();
    assert_eq!(preempted, [("batch-a-1", "n2", "default/web-1", None)], "{run:#?}");
    let p = of_rule(&f, PENDING);
    assert_eq!(p.len(), 1, "{f:#?}");
    assert_eq!(p[0].object.to_string(), "Deployment default/batch-a");
    assert!(
        p[0].what.contains("preempted on n2 by the replacement of default/web-1 (priority 1000, higher than its 0)"),
        "{}",
        p[0].what
    );
}

#[test]
fn drain_each_follows_a_pod_preempted_on_another_node_to_its_replacement() {
    // Draining n1 moves web (priority 1000) to n2, where it preempts batch-b-1; batch-b's
    // replacement goes to n3. The next drains find batch-b's pod on n3, not on n2.
    let pods =
        vec![with_cpu(pod("web-1", "web", "n1"), 800, 1000), with_cpu(pod("batch-b-1", "batch-b", "n2"), 300, 0)];
    let (n1, n2, n3) = (cpu_node("n1", "2"), cpu_node("n2", "1"), cpu_node("n3", "0.5"));
    let (web, b) = (deployment("web", "replicas: 1", ""), deployment("batch-b", "replicas: 1", ""));
    let view = view_with_templates(&docs(&[n1.as_str(), n2.as_str(), n3.as_str(), web.as_str(), b.as_str()]), pods);
    let nodes: Vec<String> = ["n1", "n2", "n3"].iter().map(|n| n.to_string()).collect();
    let runs = crate::core::view::replay::replay_each(&view, &nodes);
    let preempted: Vec<(&str, &str, Option<&str>)> =
        runs[0].preempts.iter().map(|p| (p.pod.as_str(), p.node.as_str(), p.replacement.as_deref())).collect();
    assert_eq!(preempted, [("batch-b-1", "n2", Some("n3"))], "{:#?}", runs[0]);
    let evicted = |run: &super::DrainRun| -> Vec<String> { run.evictions.iter().map(|e| e.pod.clone()).collect() };
    assert_eq!(evicted(&runs[1]), ["web-1-replacement-0"], "n2 holds web's replacement only: {:#?}", runs[1]);
    assert_eq!(evicted(&runs[2]), ["batch-b-1-replacement-0"], "batch-b's replacement is on n3: {:#?}", runs[2]);
}

#[test]
fn a_single_replica_workload_is_counted_in_the_drain_not_warned_about() {
    use crate::core::model::{Kind, ObjectRef};
    let nodes = |n: &[&str]| n.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    // replicas 1, its pod on the drained node: no warning, one entry in the run.
    let one = cluster(&[&web(1)], placed(&["n1"]));
    let f = drain(&one, &["n1"]);
    assert!(of_rule(&f, TAKES_ALL).is_empty(), "{f:#?}");
    let (run, _) = judge::drain(&one, &Config::default(), &nodes(&["n1"]), "node n1");
    assert_eq!(run.single_replica, [ObjectRef::new(Kind::Deployment, "default", "web")]);
    // Its pod elsewhere: nothing to count.
    let (run, _) = judge::drain(&one, &Config::default(), &nodes(&["n2"]), "node n2");
    assert!(run.single_replica.is_empty());
    // replicas 2, both on the drained node: the warning, and nothing counted.
    let two = cluster(&[&web(2)], placed(&["n1", "n1"]));
    assert_eq!(of_rule(&drain(&two, &["n1"]), TAKES_ALL).len(), 1);
    let (run, _) = judge::drain(&two, &Config::default(), &nodes(&["n1"]), "node n1");
    assert!(run.single_replica.is_empty());
    // replicas 2 with one Ready pod (the other not Ready) on the drained node: still warned, it is
    // not what `replicas: 1` says.
    let mut pods = placed(&["n1", "n2"]);
    pods[1].ready = false;
    let half = cluster(&[&web(2)], pods);
    assert_eq!(of_rule(&drain(&half, &["n1"]), TAKES_ALL).len(), 1, "the only Ready replica of two");
}

// ---- the fix follows why the budget refuses (issue 51, item 5) ----

/// A budget that needs every pod it expects never allows a disruption: no replacement makes room,
/// so the fix is the budget's, with its numbers, not room for replacements.
#[test]
fn a_budget_that_never_allows_a_disruption_is_told_to_change_the_budget() {
    for (budget, path, fix) in [
        (
            "minAvailable: 2",
            "spec.minAvailable",
            "lower minAvailable from 2 to 1 (or set maxUnavailable: 1 instead) so that one of the 2 pods it expects may go \
             at a time, or run 3 replicas or more so that minAvailable 2 leaves one disruption",
        ),
        (
            "maxUnavailable: 0",
            "spec.maxUnavailable",
            "raise maxUnavailable from 0 to 1 so that one of the 2 pods it expects may go at a time",
        ),
        (
            "minAvailable: 100%",
            "spec.minAvailable",
            "lower minAvailable from 100% to 1 (or set maxUnavailable: 1 instead)",
        ),
    ] {
        for view in [
            cluster(&[&web(2), &pdb(budget, "")], placed(&["n1", "n2"])),
            cluster_with_templates(&[&web(2), &pdb(budget, "")], placed(&["n1", "n2"])),
        ] {
            let f = drain(&view, &["n1"]);
            let b = of_rule(&f, BLOCKED);
            assert_eq!(b.len(), 1, "{budget}: {f:#?}");
            assert_eq!(b[0].path, path);
            for part in [
                "it evicts none of them, then refuses the eviction of web-1 (2 healthy, 2 needed: 0 disruptions allowed)",
                "Even with all 2 pods it expects healthy it allows no disruption",
                "no replacement can make room, so the drain hangs",
            ] {
                assert!(b[0].what.contains(part), "{budget}: {part:?} not in: {}", b[0].what);
            }
            assert!(b[0].fix.contains(fix), "{budget}: {fix:?} not in: {}", b[0].fix);
            assert!(!b[0].fix.contains("make room for the replacements"), "{budget}: {}", b[0].fix);
        }
    }
    // One replica under minAvailable 1: more replicas, or let it go.
    let view = cluster(&[&web(1), &pdb("minAvailable: 1", "")], placed(&["n1"]));
    let f = drain(&view, &["n1"]);
    let fix = &of_rule(&f, BLOCKED)[0].fix;
    assert!(
        fix.starts_with(
            "run 2 replicas or more so that minAvailable 1 leaves one disruption, or replace minAvailable 1 with \
             maxUnavailable: 1 if the one replica may be down during a drain"
        ),
        "{fix}"
    );
}

/// A budget that would allow one with every pod healthy, blocked by a pod not Ready or by a
/// replacement that cannot start: the advice stays room for the replacements.
#[test]
fn a_budget_blocked_by_unhealthy_or_pending_pods_keeps_the_advice_on_replacements() {
    // web-2 not Ready: minAvailable 1 of 2 has exactly what it needs, and refuses web-1.
    let mut pods = placed(&["n1", "n2"]);
    pods[1].ready = false;
    let view = cluster(&[&web(2), &pdb("minAvailable: 1", "")], pods);
    let f = drain(&view, &["n1"]);
    let b = of_rule(&f, BLOCKED);
    assert_eq!(b.len(), 1, "{f:#?}");
    assert!(!b[0].what.contains("Even with all"), "{}", b[0].what);
    assert!(b[0].fix.starts_with("before the drain, make room for the replacements"), "{}", b[0].fix);
    // Both replicas pinned to the drained node: the first replacement stays Pending.
    let pinned = deployment("web", "replicas: 2", "nodeSelector: {kubernetes.io/hostname: n1}\n");
    let view = cluster_with_templates(&[&pinned, &pdb("maxUnavailable: 1", "")], placed(&["n1", "n1"]));
    let b = drain(&view, &["n1"]);
    let b = of_rule(&b, BLOCKED);
    assert!(b[0].fix.starts_with("before the drain, make room for the replacements"), "{}", b[0].fix);
}

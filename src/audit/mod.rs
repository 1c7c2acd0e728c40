//! `ha-guard audit`: the same engine over the objects a cluster already stores. The cluster is
//! read ([`read`]) into one complete view (each namespace whole, nodes and pods known), every
//! object of a kind the rules judge goes through [`judge::audit`] (the webhook's and `check`'s
//! pipeline, plus the live posture rules), and the verdicts become a `check` [`Report`], printed
//! in `check`'s formats with `check`'s exit codes.
//!
//! Where a finding is: an object read from the cluster has no file and no line. Its `file` is its
//! API path without the leading slash (`apis/apps/v1/namespaces/shop/deployments/web`: unique,
//! what `kubectl get --raw /apis/...` reads, and a relative URI as SARIF wants one), its
//! `document` 0 and its `line` 0 (no line: the text output then shows the path alone). The same
//! in text, JSON, SARIF and JUnit.
//!
//! `--drain NODE...` / `--drain-zone ZONE` answer another question ("what would this drain do?"):
//! the report then holds only the drain's findings ([`judge::drain`]).

pub mod background;
pub mod progress;
pub mod read;

use std::collections::HashSet;

use crate::check::{Located, Report};
use crate::core::config::Config;
use crate::core::decide::UnknownNamespace;
use crate::core::finding::Finding;
use crate::core::judge::{self, Asks, Review};
use crate::core::model::{ObjectRef, words};
use crate::core::rules::drain::nodes_in_zone;
use crate::core::view::{Absences, View};
use crate::manifest::Origin;
use crate::manifest::cores::map_on_cores;
pub use read::{Cluster, ReadOptions, read};

/// Where findings on the object at `path` are reported.
pub(crate) fn origin(path: &str) -> Origin {
    Origin { file: path.to_string(), document: 0, item: None, line: 0, column: None, template: None }
}

/// Judges every subject of `cluster` (those the label selector selects, if one was given).
pub fn audit(cluster: &Cluster, config: &Config) -> Report {
    let judged: Vec<&read::Listed> = cluster
        .subjects
        .iter()
        .filter(|l| cluster.selected.as_ref().is_none_or(|s| s.contains(&l.subject.id())))
        .collect();
    audit_subjects(&judged, &cluster.unreadable, &cluster.index, config)
}

/// Judges `judged` against `view` (complete: absences are facts), `unreadable` reported as not
/// checked: the audit of a whole cluster, or of one namespace by the background audit.
pub fn audit_subjects(
    judged: &[&read::Listed],
    unreadable: &[(String, String)],
    view: &dyn View,
    config: &Config,
) -> Report {
    let today = Some(crate::config_file::today());
    let verdicts = map_on_cores(judged, |l| {
        judge::audit(&Review {
            subject: &l.subject,
            old: None,
            view,
            config,
            asks: Asks::Findings,
            absences: Absences::Judged,
            today,
            progress: None,
            // The audit reads every namespace it judges: one it does not know is never weaker.
            unknown_namespace: UnknownNamespace::Strictest,
        })
    });
    let checked: HashSet<ObjectRef> = judged.iter().map(|l| l.subject.id()).collect();
    let mut report = Report { objects: judged.len(), files: 0, ..Default::default() };
    for (path, why) in unreadable {
        report.unchecked.push((origin(path), why.clone()));
    }
    for (listed, verdict) in judged.iter().zip(verdicts) {
        let id = listed.subject.id();
        if let Some(why) = &verdict.skipped {
            report.skipped.push((id.clone(), why.clone()));
        }
        report.checked.push((listed.path.clone(), id.clone()));
        for u in verdict.unchecked {
            report.unchecked.push((origin(&listed.path), u));
        }
        for w in verdict.decided.warnings {
            report.notices.push((origin(&listed.path), w));
        }
        for f in verdict.decided.findings {
            // A cross-object finding is reported once, on the object it is about, when that is judged too.
            if f.anchor != f.object && checked.contains(&f.anchor) {
                continue;
            }
            report.findings.push(located(f, &listed.path));
        }
    }
    report
}

fn located(finding: Finding, path: &str) -> Located {
    Located { finding, origin: origin(path), missing: None, snippet: None }
}

/// What to drain.
#[derive(Clone, Debug)]
pub enum Drain {
    Nodes(Vec<String>),
    Zone(String),
    /// Every schedulable node alone, in turn (a rolling node upgrade).
    Each,
}

/// The findings of a drain of `drain` replayed on `cluster`; an error names a node the cluster
/// does not have, or a zone with no node.
pub fn drain(cluster: &Cluster, config: &Config, drain: &Drain, namespace: Option<&str>) -> Result<Report, String> {
    let report = drain_whole(cluster, config, drain)?;
    Ok(match namespace {
        Some(ns) => narrowed(report, ns),
        None => report,
    })
}

/// A drain's report as `--namespace NAMESPACE` shows it: the drain is simulated on the whole
/// cluster (other namespaces' pods fill the nodes that remain, and their budgets and bare pods
/// can hang or refuse the same drain); what is reported is that namespace's findings, and each
/// drain's evictions and Pending replacements there (with any refused eviction, which decides how
/// it ends), its outcome and the namespaces it disrupts.
fn narrowed(mut report: Report, namespace: &str) -> Report {
    report.findings.retain(|f| f.finding.object.namespace == namespace);
    report.drains = report.drains.into_iter().map(|d| d.narrowed_to(namespace)).collect();
    report
}

fn drain_whole(cluster: &Cluster, config: &Config, drain: &Drain) -> Result<Report, String> {
    let view: &dyn View = &cluster.index;
    if let Drain::Each = drain {
        return Ok(drain_each(cluster, config));
    }
    let (nodes, drained) = match drain {
        Drain::Each => unreachable!("answered above"),
        Drain::Nodes(nodes) => {
            let unknown: Vec<&str> = nodes.iter().filter(|n| view.node(n).is_none()).map(String::as_str).collect();
            if !unknown.is_empty() {
                return Err(format!(
                    "--drain: no node named {} in the cluster (kubectl get nodes lists them)",
                    unknown.join(", ")
                ));
            }
            let plural = if nodes.len() == 1 { "node" } else { "nodes" };
            // Named in every finding's message: the first few, and how many more.
            (nodes.clone(), format!("{plural} {}", words::names(nodes)))
        }
        Drain::Zone(zone) => {
            let nodes = nodes_in_zone(view, zone);
            if nodes.is_empty() {
                return Err(format!(
                    "--drain-zone: no node is labelled topology.kubernetes.io/zone={zone} (kubectl get nodes -L \
                     topology.kubernetes.io/zone lists the zones)"
                ));
            }
            let named = words::names(&nodes);
            (nodes, format!("zone {zone} (nodes {named})"))
        }
    };
    let (run, decided) = judge::drain(view, config, &nodes, &drained);
    let on_nodes = view.pods_on_nodes(&nodes);
    let mut report = Report { objects: on_nodes.len(), files: 0, drains: vec![run], ..Default::default() };
    for f in decided.findings {
        let path = read::subject_path(&f.object);
        report.findings.push(located(f, &path));
    }
    for w in decided.warnings {
        report.notices.push((origin("cluster"), w));
    }
    Ok(report)
}

/// `--drain-each`: every schedulable node drained alone, in name order, each from what the one
/// before left (its replacements where they went, the node uncordoned), as a rolling node
/// upgrade does.
fn drain_each(cluster: &Cluster, config: &Config) -> Report {
    let view: &dyn View = &cluster.index;
    let nodes: Vec<String> = view.nodes().iter().filter(|n| !n.unschedulable).map(|n| n.name.clone()).collect();
    let mut report = Report { objects: view.pods_on_nodes(&nodes).len(), files: 0, ..Default::default() };
    for (node, mut run) in nodes.iter().zip(crate::core::view::replay::replay_each(view, &nodes)) {
        run.single_replica = crate::core::rules::drain::single_replica_lost(view, &run);
        let decided = judge::drain_decided(view, config, &run, &format!("node {node}"));
        for f in decided.findings {
            let path = read::subject_path(&f.object);
            report.findings.push(located(f, &path));
        }
        for w in decided.warnings {
            if !report.notices.iter().any(|(_, n)| *n == w) {
                report.notices.push((origin("cluster"), w));
            }
        }
        report.drains.push(run);
    }
    report
}

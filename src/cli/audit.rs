//! `ha-guard audit` (and `kubectl ha-guard audit`): the rules over the cluster as it is, printed as
//! `check` prints, with `check`'s exit codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;

use super::check::ReportArgs;
use super::error::Error;
use crate::audit::progress::Progress;
use crate::audit::{self, Drain, ReadOptions};
use crate::core::view::replay::{DrainRun, Outcome};

#[derive(Args)]
pub struct AuditArgs {
    /// Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster service
    /// account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Audit one namespace (default: every namespace), read whole. Cluster-scoped objects
    /// (webhook configurations) are then read for the view but not judged.
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Judge only the objects these labels select (kubectl's syntax, e.g. `app=web,tier!=db`); the
    /// view still holds every object, so rules about absence stay right.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Simulate a `kubectl drain` of these nodes against the live pods, budgets and nodes, and
    /// report only what it would do (`drain-blocked`, `drain-leaves-pending`, `drain-refused`,
    /// `drain-takes-all-replicas`) and how it ends.
    #[arg(long, num_args = 1.., value_name = "NODE", conflicts_with_all = ["drain_zone", "drain_each"])]
    pub drain: Vec<String>,
    /// Simulate a drain (or the loss) of every node labelled topology.kubernetes.io/zone=ZONE.
    #[arg(long, value_name = "ZONE", conflicts_with = "drain_each")]
    pub drain_zone: Option<String>,
    /// Simulate a rolling node upgrade: each schedulable node drained alone in turn (uncordoned
    /// before the next), and say which nodes cannot be drained today and why.
    #[arg(long)]
    pub drain_each: bool,
    /// With a drain: exit 1 when a drain ends in one of these outcomes (completes, leaves-pending,
    /// hangs, refused; `none`: never), whatever the findings' actions [default: hangs,refused].
    #[arg(long, value_delimiter = ',', value_name = "OUTCOME,...")]
    pub fail_on_outcome: Option<Vec<OutcomeArg>>,
    #[command(flatten)]
    pub report: ReportArgs,
    /// Objects per list request: large collections are read in pages of this many.
    #[arg(long, default_value = "500", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub chunk_size: u32,
}

/// A drain's outcome as `--fail-on-outcome` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutcomeArg {
    Completes,
    LeavesPending,
    Hangs,
    Refused,
    /// No outcome fails the exit.
    None,
}

/// The outcomes `--fail-on-outcome` fails on when not given: a drain that would not finish.
const FAIL_ON_OUTCOME: [Outcome; 2] = [Outcome::Hangs, Outcome::Refused];

/// The outcomes that make the exit 1, from `--fail-on-outcome` (its default when absent).
fn failing_outcomes(given: Option<&[OutcomeArg]>, drain: bool) -> Result<Vec<Outcome>, Error> {
    let Some(given) = given else { return Ok(FAIL_ON_OUTCOME.to_vec()) };
    if !drain {
        return Err(Error(
            "--fail-on-outcome needs a drain: --drain NODE..., --drain-zone ZONE or --drain-each".into(),
        ));
    }
    if given.contains(&OutcomeArg::None) {
        return match given {
            [OutcomeArg::None] => Ok(Vec::new()),
            _ => Err(Error("--fail-on-outcome: `none` cannot be combined with outcomes".into())),
        };
    }
    Ok(given
        .iter()
        .filter_map(|o| match o {
            OutcomeArg::Completes => Some(Outcome::Completes),
            OutcomeArg::LeavesPending => Some(Outcome::LeavesPending),
            OutcomeArg::Hangs => Some(Outcome::Hangs),
            OutcomeArg::Refused => Some(Outcome::Refused),
            OutcomeArg::None => None,
        })
        .collect())
}

/// The drains that end in one of `failing`, said as `--fail-on-outcome` is: `None` when none does.
fn outcome_failure(drains: &[DrainRun], failing: &[Outcome]) -> Option<String> {
    let failed: Vec<&DrainRun> = drains.iter().filter(|d| failing.contains(&d.outcome)).collect();
    let first = failed.first()?;
    let named: Vec<String> = failing.iter().map(|o| o.as_str().to_string()).collect();
    let which = if drains.len() == 1 {
        format!("the drain of {} ends {}", first.nodes.join(", "), first.outcome.as_str())
    } else {
        let nodes: Vec<String> =
            failed.iter().map(|d| format!("{} ({})", d.nodes.join(", "), d.outcome.as_str())).collect();
        format!("{} of {} drains end so: {}", failed.len(), drains.len(), crate::core::model::words::names(&nodes))
    };
    Some(format!("exit 1: {which} (--fail-on-outcome {})", named.join(",")))
}

pub fn run(args: AuditArgs) -> Result<ExitCode, Error> {
    // The report is the output; what the read did along the way (a list started over after its
    // continue token expired) is logged to stderr only when RUST_LOG asks for it.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        use tracing_subscriber::util::SubscriberInitExt;
        crate::server::log_format::text_subscriber(filter, std::io::stderr, false).init();
    }
    let config = args.report.config()?;
    let drain = match (&args.drain_zone, args.drain.is_empty()) {
        _ if args.drain_each => Some(Drain::Each),
        (Some(zone), _) => Some(Drain::Zone(zone.clone())),
        (None, false) => Some(Drain::Nodes(args.drain.clone())),
        (None, true) => None,
    };
    let failing = failing_outcomes(args.fail_on_outcome.as_deref(), drain.is_some())?;
    // A drain is simulated on the whole cluster: `--namespace` narrows what is reported, never what
    // is read (DESIGN.md §3, "Drains").
    let options = ReadOptions {
        namespace: if drain.is_some() { None } else { args.namespace.clone() },
        selector: args.selector.clone(),
        page: args.chunk_size,
        templates: drain.is_some(),
        storage: drain.is_some(),
    };
    let mut narrowed_read = None;
    let progress = Progress::on_terminal();
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error(format!("cannot start the runtime: {e}")))?;
    let cluster = runtime.block_on(async {
        let client = client(&args).await?;
        match audit::read(&client, &options, &progress).await {
            // Rights to one namespace only: its drain is simulated on what can be read, and said so.
            Err(e) if drain.is_some() && args.namespace.is_some() && audit::read::is_forbidden(&e) => {
                narrowed_read = Some(e);
                let options = ReadOptions { namespace: args.namespace.clone(), ..options.clone() };
                audit::read(&client, &options, &progress).await.map_err(Error)
            }
            read => read.map_err(Error),
        }
    });
    let cluster = match cluster {
        Ok(c) => c,
        Err(e) => {
            progress.done();
            return Err(e);
        }
    };
    progress.stage(&format!(
        "judging {} objects in {} namespaces ({} pods) ...",
        cluster.subjects.len(),
        cluster.namespaces,
        cluster.pods
    ));
    let judge = |config: &crate::core::config::Config| match &drain {
        Some(d) => audit::drain(&cluster, config, d, args.namespace.as_deref()).map_err(Error),
        None => Ok(audit::audit(&cluster, config)),
    };
    let report = judge(&config);
    // The preview: the same cluster judged under the configuration in force too.
    let before = match args.report.baseline_config() {
        Ok(Some(baseline)) => Some(judge(&baseline)),
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    };
    progress.done();
    let mut report = report?;
    if let (Some(why), Some(ns)) = (&narrowed_read, &args.namespace) {
        report.notices.push((
            audit::origin("cluster"),
            format!(
                "the drain is simulated on namespace {ns}'s pods and budgets alone: the whole cluster could not be \
                 read ({why}). Other namespaces' pods, which fill the nodes that remain, and their budgets and bare \
                 pods, which can hang or refuse the same drain, are not counted: the real drain may end worse than \
                 this."
            ),
        ));
    }
    if let (Some(why), Some(_)) = (&cluster.storage_unread, &drain) {
        report.notices.push((
            audit::origin("cluster"),
            format!(
                "the drain is simulated without its volumes: {why}. A replacement whose volume is pinned to a node \
                 or a zone, or a node at its CSI volume limit, is not seen: the real drain may end worse than this."
            ),
        ));
    }
    args.report.add_exception_notices(&config, &mut report);
    skipped_notices(&mut report);
    let mut code = match before {
        Some(before) => args.report.finish_preview(&config, &before?, &report)?,
        None => args.report.finish(&report)?,
    };
    if drain.is_some()
        && code == ExitCode::SUCCESS
        && let Some(why) = outcome_failure(&report.drains, &failing)
    {
        eprintln!("{why}");
        code = ExitCode::from(1);
    }
    if Progress::on_terminal().shown() {
        eprintln!(
            "audited {} objects and {} pods in {} namespaces in {:.1?}",
            report.objects,
            cluster.pods,
            cluster.namespaces,
            started.elapsed()
        );
    }
    // The process ends here: the view and the subjects go with it.
    std::mem::forget(cluster);
    Ok(code)
}

/// A client as kubectl would make one: `--kubeconfig` (else $KUBECONFIG, else ~/.kube/config, else
/// in-cluster) and `--context`.
async fn client(args: &AuditArgs) -> Result<kube::Client, Error> {
    client_for(args.kubeconfig.as_deref(), args.context.as_deref()).await
}

/// [`client`] from the two flags (`audit` and `probe-webhook` share them).
pub async fn client_for(kubeconfig: Option<&std::path::Path>, context: Option<&str>) -> Result<kube::Client, Error> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| Error(format!("--kubeconfig {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await.map_err(|e| Error(format!("--kubeconfig: {e}")))?
        }
        (None, Some(context)) => {
            kube::Config::from_kubeconfig(&options).await.map_err(|e| Error(format!("--context {context}: {e}")))?
        }
        (None, None) => kube::Config::infer()
            .await
            .map_err(|e| Error(format!("no cluster: no kubeconfig and not in a cluster ({e})")))?,
    };
    kube::Client::try_from(config).map_err(|e| Error(format!("cannot make a client for the cluster: {e}")))
}

/// One notice per namespace whose objects were not judged (exempt, or in mode `off`): the audit
/// says it left them alone rather than showing them clean.
fn skipped_notices(report: &mut crate::check::Report) {
    let mut by_namespace: std::collections::BTreeMap<&str, (usize, &str)> = Default::default();
    for (id, why) in &report.skipped {
        by_namespace.entry(id.namespace.as_str()).or_insert((0, why.as_str())).0 += 1;
    }
    let notices: Vec<String> = by_namespace
        .into_iter()
        .map(|(_, (n, why))| format!("{n} object{} not judged: {why}", if n == 1 { "" } else { "s" }))
        .collect();
    for n in notices {
        let origin = crate::manifest::Origin {
            file: "cluster".into(),
            document: 0,
            item: None,
            line: 0,
            column: None,
            template: None,
        };
        report.notices.push((origin, n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        audit: AuditArgs,
    }

    fn failing(args: &[&str]) -> Result<Vec<Outcome>, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("audit").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        let drain = !cli.audit.drain.is_empty() || cli.audit.drain_zone.is_some() || cli.audit.drain_each;
        failing_outcomes(cli.audit.fail_on_outcome.as_deref(), drain).map_err(|e| e.0)
    }

    fn run(nodes: &[&str], outcome: Outcome) -> DrainRun {
        DrainRun::of(nodes.iter().map(|n| n.to_string()).collect(), outcome)
    }

    #[test]
    fn a_drain_fails_the_exit_on_hangs_and_refused_unless_told_otherwise() {
        assert_eq!(failing(&["--drain", "n1"]), Ok(vec![Outcome::Hangs, Outcome::Refused]));
        assert_eq!(
            failing(&["--drain-each", "--fail-on-outcome", "hangs,refused,leaves-pending"]),
            Ok(vec![Outcome::Hangs, Outcome::Refused, Outcome::LeavesPending])
        );
        assert_eq!(failing(&["--drain-zone", "a", "--fail-on-outcome", "none"]), Ok(vec![]));
        let mixed = failing(&["--drain", "n1", "--fail-on-outcome", "none,hangs"]).unwrap_err();
        assert!(mixed.contains("`none` cannot be combined"), "{mixed}");
        let alone = failing(&["--fail-on-outcome", "hangs"]).unwrap_err();
        assert!(alone.contains("needs a drain"), "{alone}");
        let unknown = failing(&["--drain", "n1", "--fail-on-outcome", "hang"]).unwrap_err();
        assert!(unknown.contains("hang") && unknown.contains("hangs"), "names the values: {unknown}");
    }

    #[test]
    fn the_exit_says_which_drain_ended_how() {
        let failing = FAIL_ON_OUTCOME.to_vec();
        assert_eq!(outcome_failure(&[run(&["n1"], Outcome::Completes)], &failing), None);
        assert_eq!(outcome_failure(&[run(&["n1"], Outcome::LeavesPending)], &failing), None);
        assert_eq!(
            outcome_failure(&[run(&["n1"], Outcome::Hangs)], &failing).as_deref(),
            Some("exit 1: the drain of n1 ends hangs (--fail-on-outcome hangs,refused)")
        );
        let each: Vec<DrainRun> = (0..9)
            .map(|i| run(&[&format!("n{i}")], if i % 2 == 0 { Outcome::Refused } else { Outcome::Completes }))
            .collect();
        assert_eq!(
            outcome_failure(&each, &failing).as_deref(),
            Some(
                "exit 1: 5 of 9 drains end so: n0 (refused), n2 (refused), n4 (refused), n6 (refused), n8 (refused) \
                 (--fail-on-outcome hangs,refused)"
            )
        );
        assert_eq!(outcome_failure(&each, &[]), None, "--fail-on-outcome none");
    }
}

//! `ha-guard serve`: the webhook. Its flags come in groups, each declared once and flattened in
//! (as kubert's `ServerArgs` is): where it listens and how long it waits, its TLS material, what it
//! admits at once, and where its view comes from.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::error::Error;
use crate::core::view::{Index, StaticSource, ViewSource};
use crate::server::admission_policies::Mode as PolicyMode;
use crate::server::{self, ServeOptions};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub listen: ListenArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub managed_tls: crate::server::managed_tls::ManagedTlsArgs,
    #[command(flatten)]
    pub view: ClusterArgs,
    #[command(flatten)]
    pub audit: BackgroundAuditArgs,
    #[command(flatten)]
    pub admission_policies: crate::server::admission_policies::AdmissionPolicyArgs,
    /// Configuration file; re-read when its content changes.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// `--failure-policy`, spelt as in a webhook configuration.
#[derive(Clone, Copy, ValueEnum)]
pub enum FailurePolicyArg {
    #[value(name = "Ignore")]
    Ignore,
    #[value(name = "Fail")]
    Fail,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Where `serve` listens, and how long it waits.
#[derive(Args)]
pub struct ListenArgs {
    /// Address of the webhook (TLS).
    #[arg(long, default_value = "0.0.0.0:8443", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Address of /healthz, /readyz and /metrics (plain HTTP).
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub probe_listen: SocketAddr,
    /// Per-request timeout, in seconds (the apiserver's own default is 10).
    #[arg(long, default_value = "8", value_name = "SECONDS", value_parser = seconds)]
    pub request_timeout: Duration,
    /// How long one admission may be judged (e.g. 2s, 500ms). Past it, the request is answered as
    /// --failure-policy says, with a warning naming the rule not judged, a log line and
    /// ha_guard_rule_deadline_exceeded_total. Keep it below the webhook configurations'
    /// timeoutSeconds (the chart does), so that the answer arrives before the apiserver gives up.
    #[arg(long, default_value = "2s", value_name = "DURATION", value_parser = deadline)]
    pub deadline: Duration,
    /// The webhook configurations' failurePolicy, which the answer past --deadline follows:
    /// Ignore admits the write unchecked, Fail refuses it.
    #[arg(long, value_enum, default_value = "Ignore", value_name = "POLICY")]
    pub failure_policy: FailurePolicyArg,
    /// After SIGTERM, seconds with readiness down before the listener stops.
    #[arg(long, default_value = "3", value_name = "SECONDS", value_parser = seconds)]
    pub shutdown_delay: Duration,
    /// Seconds in-flight requests get to finish after the listener stops.
    #[arg(long, default_value = "20", value_name = "SECONDS", value_parser = seconds)]
    pub shutdown_timeout: Duration,
}

/// The serving certificate, and who may call.
#[derive(Args)]
pub struct TlsArgs {
    /// Serving certificate (PEM; --tls-mode files); re-read when its content changes.
    #[arg(long, default_value = "certs/tls.crt", value_name = "FILE")]
    pub tls_cert: PathBuf,
    /// Serving key (PEM; --tls-mode files); re-read when its content changes.
    #[arg(long, default_value = "certs/tls.key", value_name = "FILE")]
    pub tls_key: PathBuf,
    /// Require callers to present a certificate signed by a CA in this PEM file (the TLS
    /// handshake fails otherwise); re-read with the serving certificate. Without it, no client
    /// certificate is asked for.
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// How often the TLS and config files (and, with --tls-mode managed, the webhook
    /// configurations' caBundle) are polled for changes, in seconds.
    #[arg(long, default_value = "5", value_name = "SECONDS", value_parser = seconds)]
    pub reload_interval: Duration,
    /// Seconds a TLS handshake may take (a client that connects and sends nothing is closed).
    #[arg(long, default_value = "10", value_name = "SECONDS", value_parser = seconds)]
    pub tls_handshake_timeout: Duration,
}

/// What `serve` admits at once.
#[derive(Args)]
pub struct LimitArgs {
    /// Requests answered at once; one more gets HTTP 503 at once, its body unread.
    #[arg(long, default_value_t = server::DEFAULT_MAX_CONCURRENT_REQUESTS as u64, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_concurrent_requests: u64,
    /// MiB of request bodies read at once, counted by their Content-Length (a body of unknown
    /// length counts as the 8 MiB limit); a request past it gets HTTP 503 at once.
    #[arg(long, default_value_t = (server::DEFAULT_MAX_BODY_MEMORY >> 20) as u64, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(8..=1 << 20))]
    pub max_body_memory: u64,
    /// Open connections, TLS handshakes included; one more is closed at once.
    #[arg(long, default_value_t = server::DEFAULT_MAX_CONNECTIONS as u64, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
}

/// Where the view comes from.
#[derive(Args)]
pub struct ClusterArgs {
    /// Where the view comes from: auto, none, live, or manifest files/directories.
    #[arg(long, default_value = "auto", num_args = 1.., value_name = "auto|none|live|FILE")]
    pub cluster: Vec<String>,
    /// How long an absence must last before an admission reports it (pdb-missing,
    /// hpa-target-missing, pdb-selects-nothing's "covers no workload"): never on a CREATE, on an
    /// UPDATE of an object created longer ago than this (the other objects of an apply arrive
    /// within it). check --complete and the audit report absences always.
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = grace)]
    pub absence_grace: Duration,
}

/// The background audit (needs the live view's cluster).
#[derive(Args)]
pub struct BackgroundAuditArgs {
    /// Audit the whole cluster this often (e.g. 30s, 5m, 1h), and in between the namespaces where
    /// something the rules read changed, on one replica at a time (the Lease `ha-guard-audit` in
    /// ha-guard's namespace), writing a PolicyReport per namespace and the metric
    /// ha_guard_audit_findings. 0 turns it off. The chart runs it apart (`ha-guard reports`).
    #[arg(long, default_value = "5m", value_name = "DURATION", value_parser = interval)]
    pub audit_interval: Duration,
    /// The report format the background audit writes: PolicyReport/ClusterPolicyReport
    /// (wgpolicyk8s.io/v1alpha2) or their successor Report/ClusterReport (openreports.io/v1alpha1).
    #[arg(long, value_enum, default_value = "wgpolicyk8s.io/v1alpha2", value_name = "API")]
    pub audit_report_api: crate::audit::background::ReportApi,
}

fn interval(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| format!("{s} is not a duration such as 30s, 5m or 1h (0: off): {e}"))
}

fn grace(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| format!("{s} is not a duration such as 10s or 2m: {e}"))
}

fn deadline(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s} is not a duration such as 2s or 500ms: {e}"))?;
    if d < Duration::from_millis(10) {
        return Err(format!("{s} is too short to judge anything: at least 10ms"));
    }
    Ok(d)
}

fn seconds(s: &str) -> Result<Duration, String> {
    let value: f64 = s.parse().map_err(|_| format!("{s} is not a number of seconds"))?;
    Duration::try_from_secs_f64(value).map_err(|_| format!("{s} is not a duration in seconds"))
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl ServeArgs {
    fn options(&self) -> ServeOptions {
        ServeOptions {
            listen: self.listen.listen,
            probe_listen: self.listen.probe_listen,
            tls_cert: self.tls.tls_cert.clone(),
            tls_key: self.tls.tls_key.clone(),
            config: self.config.clone(),
            reload_interval: self.tls.reload_interval,
            request_timeout: self.listen.request_timeout,
            shutdown_delay: self.listen.shutdown_delay,
            shutdown_timeout: self.listen.shutdown_timeout,
            generate_dev_certs: true,
            client_ca: self.tls.client_ca.clone(),
            max_concurrent_requests: usize_of(self.limits.max_concurrent_requests),
            max_body_memory: usize_of(self.limits.max_body_memory << 20),
            max_connections: usize_of(self.limits.max_connections),
            tls_handshake_timeout: self.tls.tls_handshake_timeout,
            managed_tls: None,
        }
    }
}

pub fn run(args: ServeArgs) -> Result<ExitCode, Error> {
    init_tracing(args.log_format);
    if args.listen.deadline >= args.listen.request_timeout {
        return Err(Error(format!(
            "--deadline {} must be below --request-timeout {}: the answer past the deadline is written before the \
             request times out",
            humantime::format_duration(args.listen.deadline),
            humantime::format_duration(args.listen.request_timeout)
        )));
    }
    let policies = &args.admission_policies;
    if policies.admission_policies != PolicyMode::Off && policies.admission_policies_owner.is_none() {
        return Err(Error(
            "--admission-policies on/auto needs --admission-policies-owner NAME (the ValidatingWebhookConfiguration \
             whose deletion deletes them): without an owner an uninstall would leave them behind"
                .into(),
        ));
    }
    let config = args.config.as_deref().map(crate::config_file::load).transpose()?.unwrap_or_default();
    let mut options = args.options();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| Error(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let mut live_client = None;
        let source: Arc<dyn ViewSource> = match resolve_cluster(&args.view.cluster).await? {
            Cluster::None => Arc::new(StaticSource(Index::new())),
            Cluster::Files(index) => Arc::new(StaticSource(*index)),
            Cluster::Live(client) => {
                live_client = Some(client.clone());
                let live = Arc::new(crate::live::LiveSource::new());
                live.start(client);
                live
            }
        };
        options.managed_tls = crate::server::managed_tls::setup(&args.managed_tls, live_client.clone()).await?;
        let admission = server::AdmissionSettings {
            deadline: args.listen.deadline,
            failure_policy: match args.listen.failure_policy {
                FailurePolicyArg::Ignore => server::FailurePolicy::Ignore,
                FailurePolicyArg::Fail => server::FailurePolicy::Fail,
            },
        };
        let state = server::AppState::with_settings(source, config, args.view.absence_grace, admission);
        if let Some(client) = &live_client {
            let _ = state.namespaces.set(Arc::new(server::namespaces::ApiNamespaces::new(client.clone())));
        }
        let policies = start_admission_policies(&args.admission_policies, live_client.clone(), &state)?;
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let audit = start_background_audit(&args.audit, live_client, stopping, &state);
        // On SIGTERM the background audit releases its Lease at once (another replica takes over
        // without waiting for it to run out) while the webhook drains.
        let shutdown = async move {
            server::termination_signal().await;
            let _ = stop.send(true);
        };
        server::serve(options, state, shutdown).await?;
        if let Some(policies) = policies {
            // The policies stay in the apiserver: they are what enforces while no replica answers.
            policies.abort();
        }
        if let Some(audit) = audit {
            let _ = tokio::time::timeout(Duration::from_secs(6), audit).await;
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// Starts keeping the admission policies in the apiserver (or deleting the owner's, off) when
/// asked for and possible (a live cluster).
fn start_admission_policies(
    args: &crate::server::admission_policies::AdmissionPolicyArgs,
    client: Option<kube::Client>,
    state: &Arc<server::AppState>,
) -> Result<Option<tokio::task::JoinHandle<()>>, Error> {
    use crate::server::admission_policies::{Applier, SETTLE, TYPE_CHECK_WAIT, build, run};
    let Some(owner) = args.admission_policies_owner.clone() else {
        return Ok(None);
    };
    let Some(client) = client else {
        return match args.admission_policies {
            PolicyMode::On => Err(Error(
                "--admission-policies on needs a live cluster (--cluster auto or live with a kubeconfig or a service \
                 account)"
                    .into(),
            )),
            _ => {
                tracing::info!("admission policies: no live cluster (--cluster), so none are applied or deleted");
                Ok(None)
            }
        };
    };
    let mode = args.admission_policies;
    tracing::info!(?mode, %owner, "admission policies");
    let applier = Applier { client, mode, owner, build: build(), settle: SETTLE, type_check_wait: TYPE_CHECK_WAIT };
    Ok(Some(tokio::spawn(run(applier, state.clone()))))
}

/// Starts the background audit when asked for and possible (a live cluster, a known namespace).
fn start_background_audit(
    args: &BackgroundAuditArgs,
    client: Option<kube::Client>,
    stop: tokio::sync::watch::Receiver<bool>,
    state: &Arc<server::AppState>,
) -> Option<tokio::task::JoinHandle<()>> {
    let interval = args.audit_interval;
    if interval.is_zero() {
        return None;
    }
    let Some(client) = client else {
        tracing::info!("background audit off: no live cluster (--cluster)");
        return None;
    };
    // Outside a cluster (serve on a laptop with a kubeconfig) that is expected: said, not warned.
    let Ok(namespace) = crate::server::managed_tls::own_namespace() else {
        tracing::info!(
            "background audit off: ha-guard's namespace, where its Lease is kept, is unknown: set POD_NAMESPACE (the \
             chart does) or run with a service account"
        );
        return None;
    };
    let identity = crate::audit::background::identity();
    let report_api = args.audit_report_api;
    tracing::info!(interval = %humantime::format_duration(interval), %namespace, %identity,
        reports = %report_api.resource(false).api_version, "background audit on");
    let background = crate::audit::background::Background {
        client,
        interval,
        debounce: crate::audit::background::DEBOUNCE,
        report_bytes_max: crate::audit::background::REPORT_BYTES_MAX,
        namespace,
        identity,
        report_api,
        stop,
    };
    Some(tokio::spawn(background.run(state.clone())))
}

pub fn init_tracing(format: LogFormat) {
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    match format {
        LogFormat::Json => server::log_format::json_subscriber(filter, std::io::stderr).init(),
        LogFormat::Text => server::log_format::text_subscriber(filter, std::io::stderr, server::log_styled()).init(),
    }
}

/// Where the view comes from, as `--cluster` asks.
enum Cluster {
    None,
    Live(kube::Client),
    Files(Box<Index>),
}

/// Resolves `--cluster`. `auto`: in-cluster service account, else KUBECONFIG / ~/.kube/config,
/// else none. `live` is `auto` that must find a cluster.
async fn resolve_cluster(cluster: &[String]) -> Result<Cluster, Error> {
    match cluster {
        [one] if one == "none" => Ok(Cluster::None),
        [one] if one == "auto" || one == "live" => match kube::Config::infer().await {
            Ok(config) => {
                let client = kube::Client::try_from(config).map_err(|e| Error(format!("--cluster {one}: {e}")))?;
                tracing::info!(
                    "live cluster view: watching Deployments, StatefulSets, PDBs, HPAs, PVCs, Nodes, Namespaces"
                );
                Ok(Cluster::Live(client))
            }
            Err(e) if one == "auto" => {
                tracing::info!(reason = %e, "--cluster auto: no in-cluster service account and no kubeconfig, so the view is empty (none)");
                Ok(Cluster::None)
            }
            Err(e) => Err(Error(format!("--cluster live: no cluster to connect to: {e}"))),
        },
        files => {
            let loaded = crate::manifest::load(files);
            let index = crate::manifest::objects::static_view(&loaded, "default")
                .map_err(|e| Error(format!("--cluster: {e}")))?;
            tracing::info!(files = loaded.sources.len(), "static cluster view loaded");
            Ok(Cluster::Files(Box::new(index)))
        }
    }
}

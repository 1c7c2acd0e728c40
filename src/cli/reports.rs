//! `ha-guard reports`: the background audit as a process of its own (the chart's `-audit`
//! Deployment), so that the pods answering admission neither hold its view of every pod nor can
//! read pods at all. One replica at a time holds the Lease and follows the cluster; the others wait
//! with nothing loaded. It writes the PolicyReports `serve --audit-interval` writes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;

use super::error::Error;
use super::serve::LogFormat;
use crate::audit::background::{Background, ReportApi, identity};
use crate::core::view::{Index, StaticSource};
use crate::server;

/// The shortest `--interval`: a full read of a large cluster is a few seconds of the apiserver's
/// time, and changes are judged as they come in any case.
pub const MIN_INTERVAL: Duration = Duration::from_secs(30);

#[derive(Args)]
pub struct ReportsArgs {
    /// Read and judge the whole cluster this often (e.g. 5m, 1h; at least 30s). In between, only
    /// the namespaces where something the rules read changed are read again, a few seconds after
    /// the change; status-only updates start nothing.
    #[arg(long, default_value = "5m", value_name = "DURATION", value_parser = interval)]
    pub interval: Duration,
    /// How long changes are gathered before the namespaces they touch are judged again.
    #[arg(long, default_value = "2s", value_name = "DURATION", value_parser = humantime_duration)]
    pub debounce: Duration,
    /// The report format written: PolicyReport/ClusterPolicyReport (wgpolicyk8s.io/v1alpha2) or
    /// Report/ClusterReport (openreports.io/v1alpha1).
    #[arg(long, value_enum, default_value = "wgpolicyk8s.io/v1alpha2", value_name = "API")]
    pub report_api: ReportApi,
    /// Address of /healthz, /readyz and /metrics (plain HTTP).
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub probe_listen: SocketAddr,
    /// Namespace of the Lease `ha-guard-audit` (default: $POD_NAMESPACE, else the service
    /// account's).
    #[arg(long, value_name = "NS")]
    pub lease_namespace: Option<String>,
    /// Configuration file; re-read when its content changes.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// A report's size limit in bytes, past which its results are cut (tests lower it).
    #[arg(long, hide = true, default_value_t = crate::audit::background::REPORT_BYTES_MAX)]
    pub report_bytes_max: usize,
}

fn humantime_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s} is not a duration such as 2s or 1m: {e}"))
}

fn interval(s: &str) -> Result<Duration, String> {
    let d = humantime_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "{s} is shorter than the minimum of {} (changes are judged as they come; the interval is the full re-read)",
            humantime::format_duration(MIN_INTERVAL)
        ));
    }
    Ok(d)
}

pub fn run(args: ReportsArgs) -> Result<ExitCode, Error> {
    super::serve::init_tracing(args.log_format);
    let config = args.config.as_deref().map(crate::config_file::load).transpose()?.unwrap_or_default();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| Error(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let kube_config = kube::Config::infer().await.map_err(|e| {
            Error(format!("ha-guard reports needs a cluster (an in-cluster service account or a kubeconfig): {e}"))
        })?;
        let client = kube::Client::try_from(kube_config).map_err(|e| Error(format!("cannot connect: {e}")))?;
        let namespace = match args.lease_namespace {
            Some(ns) => ns,
            None => crate::server::managed_tls::own_namespace().map_err(|_| {
                Error(
                    "the namespace of the Lease ha-guard-audit is unknown: pass --lease-namespace, set POD_NAMESPACE \
                     (the chart does), or run with a service account"
                        .into(),
                )
            })?,
        };
        // The probe port's state: no view of its own to sync (the holder's view is the audit's,
        // loaded only while it holds the Lease), the configuration, the metrics.
        let state = server::AppState::new(Arc::new(StaticSource(Index::new())), config);
        state.ready.store(true, Ordering::SeqCst);
        let listener = tokio::net::TcpListener::bind(args.probe_listen)
            .await
            .map_err(|e| Error(format!("--probe-listen {}: {e}", args.probe_listen)))?;
        tracing::info!(probe = %args.probe_listen, "probe port: /healthz /readyz /metrics");
        let probes = server::probe_router(state.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, probes).await {
                tracing::error!(error = %e, "probe port stopped");
            }
        });
        if let Some(path) = args.config.clone() {
            tokio::spawn(server::reload_config(path, Duration::from_secs(2), state.clone()));
        }
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let identity = identity();
        tracing::info!(interval = %humantime::format_duration(args.interval), %namespace, %identity,
            reports = %args.report_api.resource(false).api_version, "background audit on");
        let background = Background {
            client,
            interval: args.interval,
            debounce: args.debounce,
            report_bytes_max: args.report_bytes_max,
            namespace,
            identity,
            report_api: args.report_api,
            stop: stopping,
        };
        let audit = tokio::spawn(background.run(state.clone()));
        server::termination_signal().await;
        state.shutting_down.store(true, Ordering::SeqCst);
        let _ = stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(6), audit).await;
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_has_a_floor_and_says_why() {
        assert_eq!(interval("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(interval("30s"), Ok(MIN_INTERVAL));
        let e = interval("29s").unwrap_err();
        assert!(e.contains("minimum of 30s") && e.contains("changes are judged as they come"), "{e}");
        assert!(interval("soon").unwrap_err().contains("not a duration"));
    }

    /// The flag's default is the constant `serve --audit-interval` uses.
    #[test]
    fn the_debounce_default_is_the_background_audits() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: ReportsArgs,
        }
        let cli = Cli::parse_from(["ha-guard"]);
        assert_eq!(cli.args.debounce, crate::audit::background::DEBOUNCE);
        assert_eq!(cli.args.interval, Duration::from_secs(300));
    }
}

//! The `ha-guard` command: `serve`, `check`, `certs`, `rules`, `explain`.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use ha_guard::catalogue;
use ha_guard::check::{self, Options, load, output};
use ha_guard::config::Config;

/// mimalloc instead of the system allocator: `check` builds and frees millions of small values
/// (JSON trees, typed objects) on every core, where glibc's malloc spent a third of the time
/// (benches/README.md, "check").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "ha-guard",
    version,
    about = "Admission webhook and linter that keeps Kubernetes workloads highly available"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
    Sarif,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

// Parsed once; `serve`'s many flags make its variant the large one.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run the admission webhook (TLS) and its probe port (plain HTTP).
    Serve {
        /// Address of the webhook (TLS).
        #[arg(long, default_value = "0.0.0.0:8443", value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// Address of /healthz, /readyz and /metrics (plain HTTP).
        #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
        probe_listen: std::net::SocketAddr,
        /// Serving certificate (PEM); re-read when its content changes.
        #[arg(long, default_value = "certs/tls.crt", value_name = "FILE")]
        tls_cert: std::path::PathBuf,
        /// Serving key (PEM); re-read when its content changes.
        #[arg(long, default_value = "certs/tls.key", value_name = "FILE")]
        tls_key: std::path::PathBuf,
        /// Configuration file; re-read when its content changes.
        #[arg(long, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
        /// Where the view comes from: auto, none, live, or manifest files/directories.
        #[arg(long, default_value = "auto", num_args = 1.., value_name = "auto|none|live|FILE")]
        cluster: Vec<String>,
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
        /// How often the TLS and config files (and, with --tls-mode managed, the webhook
        /// configurations' caBundle) are polled for changes, in seconds.
        #[arg(long, default_value = "5", value_name = "SECONDS")]
        reload_interval: f64,
        /// Per-request timeout, in seconds (the apiserver's own default is 10).
        #[arg(long, default_value = "8", value_name = "SECONDS")]
        request_timeout: f64,
        /// After SIGTERM, seconds with readiness down before the listener stops.
        #[arg(long, default_value = "3", value_name = "SECONDS")]
        shutdown_delay: f64,
        /// Seconds in-flight requests get to finish after the listener stops.
        #[arg(long, default_value = "20", value_name = "SECONDS")]
        shutdown_timeout: f64,
        /// Require callers to present a certificate signed by a CA in this PEM file (the TLS
        /// handshake fails otherwise); re-read with the serving certificate. Without it, no client
        /// certificate is asked for.
        #[arg(long, value_name = "FILE")]
        client_ca: Option<std::path::PathBuf>,
        /// Requests answered at once; one more gets HTTP 503 at once, its body unread.
        #[arg(long, default_value_t = ha_guard::server::DEFAULT_MAX_CONCURRENT_REQUESTS as u64, value_name = "N",
              value_parser = clap::value_parser!(u64).range(1..))]
        max_concurrent_requests: u64,
        /// MiB of request bodies read at once, counted by their Content-Length (a body of unknown
        /// length counts as the 8 MiB limit); a request past it gets HTTP 503 at once.
        #[arg(long, default_value_t = (ha_guard::server::DEFAULT_MAX_BODY_MEMORY >> 20) as u64, value_name = "MIB",
              value_parser = clap::value_parser!(u64).range(8..=1 << 20))]
        max_body_memory: u64,
        /// Open connections, TLS handshakes included; one more is closed at once.
        #[arg(long, default_value_t = ha_guard::server::DEFAULT_MAX_CONNECTIONS as u64, value_name = "N",
              value_parser = clap::value_parser!(u64).range(1..))]
        max_connections: u64,
        /// Seconds a TLS handshake may take (a client that connects and sends nothing is closed).
        #[arg(long, default_value = "10", value_name = "SECONDS")]
        tls_handshake_timeout: f64,
        #[command(flatten)]
        managed_tls: ha_guard::server::managed_tls::ManagedTlsArgs,
    },
    /// Write a serving certificate signed by a CA: DIR/tls.crt, DIR/tls.key (and DIR/client.crt,
    /// DIR/client.key with --client). The CA is the one in DIR/ca.crt and DIR/ca.key when both
    /// exist (so the caBundle that holds DIR/ca.crt keeps trusting the new certificate), else a new
    /// one written there.
    Certs {
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
        /// DNS names of the serving certificate.
        #[arg(long, num_args = 1.., required = true, value_name = "NAME")]
        dns: Vec<String>,
        /// IP addresses of the serving certificate.
        #[arg(long, num_args = 1.., value_name = "ADDR")]
        ip: Vec<String>,
        /// Also write a client certificate with this common name, signed by the same CA, as
        /// DIR/client.crt and DIR/client.key: for the kube-apiserver to present to a webhook
        /// run with `serve --client-ca DIR/ca.crt`.
        #[arg(long, value_name = "NAME")]
        client: Option<String>,
        /// Make a new CA even if DIR/ca.crt and DIR/ca.key exist (the webhook configurations'
        /// caBundle must then be given the new DIR/ca.crt).
        #[arg(long)]
        new_ca: bool,
    },
    /// Lint manifests: files, directories (recursively), `-` for stdin.
    Check {
        /// Files, directories or `-` (stdin) to check.
        #[arg(short = 'f', long = "filename", required = true, num_args = 1.., value_name = "PATH")]
        paths: Vec<String>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Configuration file (DESIGN.md §5).
        #[arg(long, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
        /// The files are the whole namespace: run the rules that assert absence.
        #[arg(long)]
        complete: bool,
        /// Write the mutations back to the files.
        #[arg(long)]
        fix: bool,
        /// Namespace for objects that have none.
        #[arg(long, default_value = "default", value_name = "NS")]
        namespace: String,
    },
    /// List the rules and mutations.
    Rules,
    /// Print one rule's documentation.
    Explain {
        /// A rule or mutation ID.
        rule: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            listen,
            probe_listen,
            tls_cert,
            tls_key,
            config,
            cluster,
            log_format,
            reload_interval,
            request_timeout,
            shutdown_delay,
            shutdown_timeout,
            client_ca,
            max_concurrent_requests,
            max_body_memory,
            max_connections,
            tls_handshake_timeout,
            managed_tls,
        } => {
            init_tracing(log_format);
            let seconds = |s: f64, name: &str| {
                std::time::Duration::try_from_secs_f64(s)
                    .map_err(|_| format!("--{name}: {s} is not a duration in seconds"))
            };
            let durations = (|| {
                Ok::<_, String>((
                    seconds(reload_interval, "reload-interval")?,
                    seconds(request_timeout, "request-timeout")?,
                    seconds(shutdown_delay, "shutdown-delay")?,
                    seconds(shutdown_timeout, "shutdown-timeout")?,
                    seconds(tls_handshake_timeout, "tls-handshake-timeout")?,
                ))
            })();
            let (reload_interval, request_timeout, shutdown_delay, shutdown_timeout, tls_handshake_timeout) =
                match durations {
                    Ok(d) => d,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                };
            let options = ha_guard::server::ServeOptions {
                listen,
                probe_listen,
                tls_cert,
                tls_key,
                config,
                reload_interval,
                request_timeout,
                shutdown_delay,
                shutdown_timeout,
                generate_dev_certs: true,
                client_ca,
                max_concurrent_requests: usize::try_from(max_concurrent_requests).unwrap_or(usize::MAX),
                max_body_memory: usize::try_from(max_body_memory << 20).unwrap_or(usize::MAX),
                max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
                tls_handshake_timeout,
                managed_tls: None,
            };
            serve(options, cluster, managed_tls)
        }
        Command::Certs { out, dns, ip, client, new_ca } => {
            let result = ha_guard::server::certs::parse_ips(&ip)
                .and_then(|ips| ha_guard::server::certs::issue_into(&out, &dns, &ips, client.as_deref(), new_ca));
            match result {
                Ok(issued) => {
                    for f in &issued.files {
                        println!("{}", f.display());
                    }
                    let ca = out.join(ha_guard::server::certs::CA_FILE);
                    if issued.kept_ca {
                        eprintln!(
                            "issued from the CA in {} (kept): a caBundle holding it trusts the new certificate",
                            ca.display()
                        );
                    } else {
                        eprintln!("new CA: the webhook configurations' caBundle must hold {}", ca.display());
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Check { paths, format, config, complete, fix, namespace } => {
            run_check(paths, format, config, complete, fix, namespace)
        }
        Command::Rules => {
            print!("{}", rules_table());
            ExitCode::SUCCESS
        }
        Command::Explain { rule } => match catalogue::doc(&rule) {
            Some(doc) => {
                print!("{doc}");
                ExitCode::SUCCESS
            }
            None => {
                eprintln!("error: no rule or mutation {rule:?}; `ha-guard rules` lists them");
                ExitCode::from(2)
            }
        },
    }
}

fn rules_table() -> String {
    let mut out = String::new();
    for r in catalogue::rules() {
        out.push_str(&format!("{:<31} {:<44} {}\n", r.id, r.default_text, r.summary));
    }
    out.insert_str(0, &format!("{:<31} {:<44} {}\n", "RULE", "DEFAULT", "WHAT"));
    out.push_str("\nMUTATION                              DEFAULT  WHAT\n");
    for m in catalogue::mutations() {
        out.push_str(&format!("{:<37} {:<8} {}\n", m.id, if m.default_on { "on" } else { "off" }, m.summary));
    }
    out
}

fn run_check(
    paths: Vec<String>,
    format: Format,
    config: Option<std::path::PathBuf>,
    complete: bool,
    fix: bool,
    namespace: String,
) -> ExitCode {
    let config = match config.map(|p| Config::load(&p)).transpose() {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let options = Options { complete, namespace, config };
    let mut loaded = load::load(&paths);
    let mut report = check::check(&loaded, &options);
    if fix && !report.fixes.is_empty() {
        match check::fix::apply(&loaded, &report.fixes) {
            Ok(files) => {
                for f in &files {
                    eprintln!("fixed: {f}");
                }
                // Check what was written, so the exit code speaks for the files as they are now.
                loaded = load::load(&paths);
                report = check::check(&loaded, &options);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    match format {
        Format::Text => print!("{}", output::text(&report)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&output::json(&report)).unwrap_or_default()),
        Format::Sarif => println!("{}", serde_json::to_string_pretty(&output::sarif(&report)).unwrap_or_default()),
    }
    // Errors also go to stderr, so they are seen when the report is redirected to a file.
    if !matches!(format, Format::Text) || !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        for e in &report.errors {
            eprintln!("error: {e}");
        }
    }
    let code = ExitCode::from(report.exit_code() as u8);
    // The process ends here: freeing every document's JSON tree and skeleton one by one would
    // take a tenth of a large run (perf, 10,000 objects), for memory the exit returns anyway.
    std::mem::forget(loaded);
    std::mem::forget(report);
    code
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Where the view comes from, as `--cluster` asks.
enum Cluster {
    None,
    Live(kube::Client),
    Files(ha_guard::view::Index),
}

/// Resolves `--cluster`. `auto`: in-cluster service account, else KUBECONFIG / ~/.kube/config,
/// else none. `live` is `auto` that must find a cluster.
async fn resolve_cluster(cluster: &[String]) -> Result<Cluster, String> {
    match cluster {
        [one] if one == "none" => Ok(Cluster::None),
        [one] if one == "auto" || one == "live" => match kube::Config::infer().await {
            Ok(config) => {
                let client = kube::Client::try_from(config).map_err(|e| format!("--cluster {one}: {e}"))?;
                tracing::info!(
                    "live cluster view: watching Deployments, StatefulSets, PDBs, HPAs, PVCs, Nodes, Namespaces"
                );
                Ok(Cluster::Live(client))
            }
            Err(e) if one == "auto" => {
                tracing::info!(reason = %e, "--cluster auto: no in-cluster service account and no kubeconfig, so the view is empty (none)");
                Ok(Cluster::None)
            }
            Err(e) => Err(format!("--cluster live: no cluster to connect to: {e}")),
        },
        files => {
            let loaded = load::load(files);
            let mut errors = loaded.errors.clone();
            let decoded = check::decode(&loaded.documents, "default", &mut errors);
            if let Some(e) = errors.first() {
                return Err(format!("--cluster: {e}"));
            }
            let mut index = ha_guard::view::Index::new();
            for d in &decoded {
                index.insert_object(&d.object);
            }
            tracing::info!(objects = decoded.len(), files = loaded.sources.len(), "static cluster view loaded");
            Ok(Cluster::Files(index))
        }
    }
}

fn serve(
    mut options: ha_guard::server::ServeOptions,
    cluster: Vec<String>,
    managed_tls: ha_guard::server::managed_tls::ManagedTlsArgs,
) -> ExitCode {
    let config = match options.config.as_deref().map(Config::load).transpose() {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async move {
        let mut live_client = None;
        let source: std::sync::Arc<dyn ha_guard::server::ViewSource> = match resolve_cluster(&cluster).await? {
            Cluster::None => std::sync::Arc::new(ha_guard::server::StaticSource(ha_guard::view::Index::new())),
            Cluster::Files(index) => std::sync::Arc::new(ha_guard::server::StaticSource(index)),
            Cluster::Live(client) => {
                live_client = Some(client.clone());
                let live = std::sync::Arc::new(ha_guard::live::LiveSource::new());
                live.start(client);
                live
            }
        };
        options.managed_tls = ha_guard::server::managed_tls::setup(&managed_tls, live_client).await?;
        let state = ha_guard::server::AppState::new(source, config);
        ha_guard::server::serve(options, state, ha_guard::server::termination_signal()).await.map_err(|e| e.to_string())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

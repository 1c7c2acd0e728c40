//! The command line: one clap `Args` per command (flags declared once, with their default and
//! help), each command's `run` returning its exit code or an [`Error`]; `main` prints the error and
//! exits 2 — the one error and exit path.

pub mod audit;
pub mod certs;
pub mod check;
pub mod error;
pub mod memory;
pub mod policies;
pub mod probe;
pub mod reports;
pub mod rules;
pub mod serve;
pub mod version;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

pub use error::Error;

#[derive(Parser)]
#[command(
    name = "ha-guard",
    version = crate::build_info::long_version(),
    about = "Admission webhook and linter that keeps Kubernetes workloads highly available"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once; `serve`'s many flags make its variant the large one.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Run the admission webhook (TLS) and its probe port (plain HTTP).
    Serve(serve::ServeArgs),
    /// Write a serving certificate signed by a CA: DIR/tls.crt, DIR/tls.key (and DIR/client.crt,
    /// DIR/client.key with --client). The CA is the one in DIR/ca.crt and DIR/ca.key when both
    /// exist (so the caBundle that holds DIR/ca.crt keeps trusting the new certificate), else a new
    /// one written there.
    Certs(certs::CertsArgs),
    /// Lint manifests: files, directories (recursively), `-` for stdin.
    Check(check::CheckArgs),
    /// Audit the cluster as it is: every rule over the objects it stores (each namespace a
    /// complete view), plus the live posture of its pods, nodes and budgets; or, with --drain,
    /// what a drain would do.
    Audit(audit::AuditArgs),
    /// Keep the cluster's PolicyReports current: the background audit as a process of its own
    /// (one replica at a time, by a Lease), re-judging a namespace when what the rules read there
    /// changes and the whole cluster once per --interval.
    Reports(reports::ReportsArgs),
    /// Does ha-guard answer the apiserver? A server-side dry run of a Deployment two rules flag:
    /// exit 0 with ha-guard's answer, 1 when the apiserver admitted it without a word from ha-guard
    /// or could not call it (what `helm test` runs).
    ProbeWebhook(probe::ProbeArgs),
    /// List the rules and mutations.
    Rules(rules::RulesArgs),
    /// Print the ValidatingAdmissionPolicies, their bindings and the MutatingAdmissionPolicies
    /// generated from the rules and mutations that need no other object (YAML, one document
    /// each), for the configuration --config names (the defaults without it).
    Policies(policies::PoliciesArgs),
    /// Print one rule's documentation.
    Explain(rules::ExplainArgs),
    /// Print the version, the commit, the target and how the binary was built (--json: as one
    /// object).
    Version(version::VersionArgs),
}

/// The name kubectl's plugin lookup finds (krew's convention: `kubectl ha-guard` runs the
/// executable `kubectl-ha_guard` on PATH, a dash in the command being an underscore in the file).
pub const KUBECTL_PLUGIN: &str = "kubectl-ha_guard";

/// The name the usage and help show when the binary was started as `argv0`: `kubectl ha-guard`
/// under the plugin's name (as the user typed it), else `ha-guard`.
pub fn shown_name(argv0: &std::ffi::OsStr) -> &'static str {
    match std::path::Path::new(argv0).file_name().and_then(|n| n.to_str()) {
        Some(KUBECTL_PLUGIN) => "kubectl ha-guard",
        _ => "ha-guard",
    }
}

/// Parses the process's arguments. Under any name (a copy or symlink named [`KUBECTL_PLUGIN`])
/// the commands are the same; only the name shown in usage and errors follows what was typed.
pub fn parse() -> Cli {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let matches = Cli::command().bin_name(shown_name(&argv0)).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Runs the command; `Ok` carries its exit code.
pub fn run(cli: Cli) -> Result<ExitCode, Error> {
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Certs(args) => certs::run(args),
        Command::Check(args) => check::run(args),
        Command::Audit(args) => audit::run(args),
        Command::Reports(args) => reports::run(args),
        Command::ProbeWebhook(args) => probe::run(args),
        Command::Rules(args) => rules::list(args),
        Command::Policies(args) => policies::run(args),
        Command::Explain(args) => rules::explain(args),
        Command::Version(args) => version::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_name_shows_as_kubectl_would_run_it() {
        assert_eq!(shown_name("/home/u/.krew/bin/kubectl-ha_guard".as_ref()), "kubectl ha-guard");
        assert_eq!(shown_name("kubectl-ha_guard".as_ref()), "kubectl ha-guard");
        assert_eq!(shown_name("/usr/local/bin/ha-guard".as_ref()), "ha-guard");
        // Another plugin's name, or the binary renamed otherwise: the command's own name.
        assert_eq!(shown_name("kubectl-other".as_ref()), "ha-guard");
        assert_eq!(shown_name("".as_ref()), "ha-guard");
    }
}

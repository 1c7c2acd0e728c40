//! The `ha-guard` command: `serve`, `check`, `certs`, `rules`, `explain`.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use ha_guard::catalogue;
use ha_guard::check::{self, load, output, Options};
use ha_guard::config::Config;

#[derive(Parser)]
#[command(name = "ha-guard", version, about = "Admission webhook and linter that keeps Kubernetes workloads highly available")]
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

#[derive(Subcommand)]
enum Command {
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
    let mut out = String::from("RULE                            DEFAULT  WHAT\n");
    for r in catalogue::rules() {
        out.push_str(&format!("{:<31} {:<8} {}\n", r.id, r.default.as_str(), r.summary));
    }
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
    if !matches!(format, Format::Text) {
        for e in &report.errors {
            eprintln!("error: {e}");
        }
    }
    ExitCode::from(report.exit_code() as u8)
}

//! `ha-guard check`: lint manifests offline.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::error::Error;
use crate::check::{self, Options, output};

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Json,
    Sarif,
}

#[derive(Args)]
pub struct CheckArgs {
    /// Files, directories or `-` (stdin) to check.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1.., value_name = "PATH")]
    pub paths: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Configuration file (DESIGN.md §5).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The files are the whole namespace: run the rules that assert absence.
    #[arg(long)]
    pub complete: bool,
    /// Write the mutations back to the files.
    #[arg(long)]
    pub fix: bool,
    /// Namespace for objects that have none.
    #[arg(long, default_value = "default", value_name = "NS")]
    pub namespace: String,
}

pub fn run(args: CheckArgs) -> Result<ExitCode, Error> {
    let config = args.config.as_deref().map(crate::config_file::load).transpose()?.unwrap_or_default();
    let options = Options { complete: args.complete, namespace: args.namespace, config };
    let run = check::run(&args.paths, &options, args.fix)?;
    for f in &run.fixed {
        eprintln!("fixed: {f}");
    }
    let report = &run.report;
    match args.format {
        Format::Text => print!("{}", output::text(report)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&output::json(report)).unwrap_or_default()),
        Format::Sarif => println!("{}", serde_json::to_string_pretty(&output::sarif(report)).unwrap_or_default()),
    }
    // Errors also go to stderr, so they are seen when the report is redirected to a file.
    if !matches!(args.format, Format::Text) || !std::io::stdout().is_terminal() {
        for e in &report.errors {
            eprintln!("error: {e}");
        }
    }
    let code = ExitCode::from(report.exit_code() as u8);
    // The process ends here: freeing every document's JSON tree and skeleton one by one would
    // take a tenth of a large run (perf, 10,000 objects), for memory the exit returns anyway.
    std::mem::forget(run);
    Ok(code)
}

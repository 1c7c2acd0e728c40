//! `ha-guard version [--json]`: what `--version` says, and with `--json` every build detail as one
//! object for scripts and release checks (version, commit, tree, target, profile, build settings).

use std::process::ExitCode;

use clap::Args;

use super::error::Error;
use crate::build_info;

#[derive(Args)]
pub struct VersionArgs {
    /// Print one JSON object: name, version, commit, tree (clean, modified, unknown), target,
    /// profile and build (opt_level, debug, lto, codegen_units, crt_static, rustflags, rustc).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: VersionArgs) -> Result<ExitCode, Error> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(&build_info::json()).unwrap_or_default());
    } else {
        println!("ha-guard {}", build_info::long_version());
        for (key, value) in build_info::SETTINGS {
            println!("  {key}: {value}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

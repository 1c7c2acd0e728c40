//! `ha-guard policies`: the admission policies generated from the registry for a configuration
//! (src/core/policies.rs), as YAML.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::error::Error;
use crate::core::config::Config;
use crate::core::policies;

#[derive(Args)]
pub struct PoliciesArgs {
    /// A configuration file (the one `serve --config` reads): its actions, exempt namespaces,
    /// overrides, exceptions, ratchet and mode shape the policies and their bindings.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn run(args: PoliciesArgs) -> Result<ExitCode, Error> {
    let config = match args.config.as_deref() {
        Some(path) => crate::config_file::load(path)?,
        None => Config::default(),
    };
    let docs = policies::generate(&config, Some(crate::config_file::today()));
    let text = policies::to_yaml(&docs).map_err(|e| Error(format!("could not write YAML: {e}")))?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

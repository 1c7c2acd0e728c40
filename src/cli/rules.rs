//! `ha-guard rules` (and its Argo CD block) and `ha-guard explain RULE`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::error::Error;
use crate::core::registry;

#[derive(Args)]
pub struct ExplainArgs {
    /// A rule or mutation ID.
    pub rule: String,
}

#[derive(Args)]
pub struct RulesArgs {
    /// Print, instead of the list, an Argo CD Application's `spec.ignoreDifferences` for what
    /// every mutation adds (README.md, "GitOps").
    #[arg(long)]
    pub argocd_ignore_differences: bool,
    /// A configuration file (the one `serve --config` reads): the list says what each rule and
    /// mutation is there, and the Argo CD block holds only the mutations it turns on.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn list(args: RulesArgs) -> Result<ExitCode, Error> {
    let config = args.config.as_deref().map(|p| crate::config_file::load(p).map(|c| (c, p.display()))).transpose()?;
    let text = match (args.argocd_ignore_differences, &config) {
        (true, None) => registry::argocd_ignore_differences(),
        (true, Some((config, file))) => registry::argocd_ignore_differences_for(config, &file.to_string()),
        (false, None) => registry::listing(),
        (false, Some((config, _))) => registry::listing_for(config),
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

pub fn explain(args: ExplainArgs) -> Result<ExitCode, Error> {
    let doc = registry::doc(&args.rule).ok_or_else(|| super::check::unknown_id(&args.rule))?;
    print!("{doc}");
    Ok(ExitCode::SUCCESS)
}

//! `ha-guard rules` (and its Argo CD block) and `ha-guard explain RULE`.

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
}

pub fn list(args: RulesArgs) -> Result<ExitCode, Error> {
    if args.argocd_ignore_differences {
        print!("{}", registry::argocd_ignore_differences());
    } else {
        print!("{}", registry::listing());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn explain(args: ExplainArgs) -> Result<ExitCode, Error> {
    let doc = registry::doc(&args.rule).ok_or_else(|| super::check::unknown_id(&args.rule))?;
    print!("{doc}");
    Ok(ExitCode::SUCCESS)
}

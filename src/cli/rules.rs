//! `ha-guard rules` and `ha-guard explain RULE`.

use std::process::ExitCode;

use clap::Args;

use super::error::Error;
use crate::core::registry;

#[derive(Args)]
pub struct ExplainArgs {
    /// A rule or mutation ID.
    pub rule: String,
}

pub fn list() -> Result<ExitCode, Error> {
    print!("{}", registry::listing());
    Ok(ExitCode::SUCCESS)
}

pub fn explain(args: ExplainArgs) -> Result<ExitCode, Error> {
    let doc = registry::doc(&args.rule)
        .ok_or_else(|| Error(format!("no rule or mutation {:?}; `ha-guard rules` lists them", args.rule)))?;
    print!("{doc}");
    Ok(ExitCode::SUCCESS)
}

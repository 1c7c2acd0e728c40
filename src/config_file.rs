//! Reading the configuration file (the core parses text; reading files is a shell's business).

use std::path::Path;

use crate::core::config::policy::Date;
use crate::core::config::{Config, ConfigError};
use crate::core::registry;

/// Reads and parses the configuration file at `path`, against every rule and mutation.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| ConfigError::Read { file: file.clone(), message: e.to_string() })?;
    registry::parse_config(&text, &file).map_err(|e| match e {
        // The YAML reader names its input `<input>` and starts with its own `error: `: the file
        // is named instead, once, and `main` says `error:`.
        ConfigError::Invalid { file, message } => {
            let message = message.strip_prefix("error: ").unwrap_or(&message).replace("<input>", &file);
            ConfigError::Invalid { file, message: suggest(message) }
        }
        other => other,
    })
}

/// Today (UTC): the exceptions' expiry is judged by the day, and the core reads no clock.
pub fn today() -> Date {
    k8s_openapi::jiff::Timestamp::now().to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC).date()
}

/// An unknown ID's message with the nearest known one, as `--disable` and `explain` say it.
fn suggest(message: String) -> String {
    for (section, what, rules, mutations) in [("rules.", "rule", true, false), ("mutations.", "mutation", false, true)]
    {
        let unknown = format!(": unknown {what} ID (see `ha-guard rules`)");
        if let Some(id) = message.strip_prefix(section).and_then(|m| m.strip_suffix(unknown.as_str())) {
            let nearest = registry::nearest(id, rules, mutations);
            return format!("{section}{id}: unknown {what} ID: did you mean {nearest}? (`ha-guard rules` lists them)");
        }
    }
    message
}

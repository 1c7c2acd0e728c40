//! What this binary was built from: the package version and the git commit (set by build.rs).

/// The package version (Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The full git commit id the binary was built from, or `"unknown"` when built outside git without
/// `HA_GUARD_GIT_COMMIT` (build.rs).
pub const COMMIT: &str = env!("HA_GUARD_BUILD_COMMIT");

/// The version with its provenance, as `--version` prints it after the program name:
/// `0.1.0 (commit 1a2b3c4d5e6f, built from a clean tree)`, `... built with uncommitted changes)`,
/// `0.1.0 (commit 1a2b3c4d5e6f)` when the commit came from `HA_GUARD_GIT_COMMIT`, or
/// `0.1.0 (commit unknown)`.
pub fn long_version() -> &'static str {
    env!("HA_GUARD_BUILD_LONG_VERSION")
}

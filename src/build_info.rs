//! What this binary was built from and how: the package version, the git commit, the target and
//! the build's settings (all set by build.rs).

/// The package version (Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The full git commit id the binary was built from, or `"unknown"` when built outside git without
/// `HA_GUARD_GIT_COMMIT` (build.rs).
pub const COMMIT: &str = env!("HA_GUARD_BUILD_COMMIT");

/// Whether the compiled sources were the commit's: `clean`, `modified` or `unknown` (the commit was
/// handed in, or there is no git).
pub const TREE: &str = env!("HA_GUARD_BUILD_TREE");

/// The target triple the binary was compiled for (`x86_64-unknown-linux-gnu`, ...).
pub const TARGET: &str = env!("HA_GUARD_BUILD_TARGET");

/// The Cargo profile's directory: `debug` (dev, test), `release` (release, bench) or a custom
/// profile's name (`artifact`: the image and release binaries).
pub const PROFILE: &str = env!("HA_GUARD_BUILD_PROFILE");

/// How the binary was built, as `ha-guard version --json` prints it under `build`.
pub const SETTINGS: [(&str, &str); 7] = [
    ("opt_level", env!("HA_GUARD_BUILD_OPT_LEVEL")),
    ("debug", env!("HA_GUARD_BUILD_DEBUG")),
    ("lto", env!("HA_GUARD_BUILD_LTO")),
    ("codegen_units", env!("HA_GUARD_BUILD_CODEGEN_UNITS")),
    ("crt_static", env!("HA_GUARD_BUILD_CRT_STATIC")),
    ("rustflags", env!("HA_GUARD_BUILD_RUSTFLAGS")),
    ("rustc", env!("HA_GUARD_BUILD_RUSTC")),
];

/// The version with its provenance, as `--version` prints it after the program name:
/// `0.1.0 (commit 1a2b3c4d5e6f, built from a clean tree; x86_64-unknown-linux-gnu, profile release)`,
/// `... built with uncommitted changes; ...)`, `0.1.0 (commit 1a2b3c4d5e6f; ...)` when the commit
/// came from `HA_GUARD_GIT_COMMIT`, or `0.1.0 (commit unknown; ...)`.
pub fn long_version() -> &'static str {
    env!("HA_GUARD_BUILD_LONG_VERSION")
}

/// Everything above as one JSON object (`ha-guard version --json`).
pub fn json() -> serde_json::Value {
    let build: serde_json::Map<String, serde_json::Value> = SETTINGS
        .iter()
        .map(|(key, value)| {
            let value = match *value {
                "true" => serde_json::Value::Bool(true),
                "false" => serde_json::Value::Bool(false),
                other => serde_json::Value::String(other.to_owned()),
            };
            ((*key).to_owned(), value)
        })
        .collect();
    serde_json::json!({
        "name": "ha-guard",
        "version": VERSION,
        "commit": COMMIT,
        "tree": TREE,
        "target": TARGET,
        "profile": PROFILE,
        "build": build,
    })
}

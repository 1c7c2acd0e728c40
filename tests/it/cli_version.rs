//! `ha-guard --version` and `ha-guard version --json`: the package version, the git commit the
//! binary was built from, the target and the build's settings (build.rs, src/build_info.rs),
//! checked against what git says about this checkout now and what cargo says about this build.

use std::path::Path;
use std::process::Command;

use ha_guard::build_info;

const BIN: &str = env!("CARGO_BIN_EXE_ha-guard");
const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// The sources build.rs considers compiled into the binary.
const SOURCES: [&str; 5] = ["src", "docs/rules", "build.rs", "Cargo.toml", "Cargo.lock"];

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(MANIFEST_DIR).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8(out.stdout).expect("git prints UTF-8").trim().to_owned())
}

/// The full commit id and, when known, whether the compiled sources are unmodified, as this
/// checkout says right now; `None` when the package is not the top of a git work tree.
fn checkout() -> Option<(String, bool)> {
    let top = git(&["rev-parse", "--show-toplevel"])?;
    let same = Path::new(&top).canonicalize().ok()? == Path::new(MANIFEST_DIR).canonicalize().ok()?;
    if !same {
        return None;
    }
    let head = git(&["rev-parse", "HEAD"])?;
    let mut status = vec!["status", "--porcelain", "--"];
    status.extend(SOURCES);
    let clean = git(&status).expect("git status runs where rev-parse did").is_empty();
    Some((head, clean))
}

fn version_output(flag: &str) -> String {
    let out = Command::new(BIN).arg(flag).output().expect("the binary starts");
    assert!(
        out.status.success(),
        "{flag} exits 0, got {:?}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty(), "{flag} writes nothing to stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("--version prints UTF-8")
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[test]
fn version_names_the_package_version_and_the_commit_built_from() {
    let out = version_output("--version");
    let line = out.strip_suffix('\n').unwrap_or_else(|| panic!("one line ending in a newline: {out:?}"));
    assert!(!line.contains('\n'), "one line: {out:?}");
    let expected_start = format!("ha-guard {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&expected_start), "{line:?} starts with {expected_start:?}");
    assert_eq!(line, format!("ha-guard {}", build_info::long_version()), "clap prints build_info::long_version()");
    assert_eq!(build_info::VERSION, env!("CARGO_PKG_VERSION"));

    // What follows the commit: "; TARGET, profile PROFILE)". This test binary and the ha-guard
    // binary are built by the same cargo run, for the same target and profile.
    let build = format!("; {}, profile {})", build_info::TARGET, build_info::PROFILE);
    assert_eq!(build_info::TARGET, target_triple(), "the target is the one cargo built for");
    let line = line.strip_suffix(&build).unwrap_or_else(|| panic!("{line:?} ends with {build:?}"));
    let line = format!("{line})");

    let given = option_env!("HA_GUARD_GIT_COMMIT").map(str::trim).filter(|given| !given.is_empty());
    match (given, checkout()) {
        // The commit was handed in (Dockerfile, source tarball): printed as given, tree state unknown.
        (Some(given), _) => {
            let given = given.to_ascii_lowercase();
            assert_eq!(build_info::COMMIT, given);
            assert_eq!(line, format!("{expected_start}{})", &given[..given.len().min(12)]));
        }
        (None, Some((head, clean))) => {
            assert!(is_hex(&head, 40), "git rev-parse HEAD gave {head:?}");
            assert_eq!(build_info::COMMIT, head, "build_info::COMMIT is HEAD's full id");
            let tree = if clean { "built from a clean tree" } else { "built with uncommitted changes" };
            assert_eq!(line, format!("{expected_start}{}, {tree})", &head[..12]));
        }
        (None, None) => {
            assert_eq!(build_info::COMMIT, "unknown");
            assert_eq!(line, format!("{expected_start}unknown)"));
        }
    }
}

/// The triple this test was compiled for, from the cfg values rustc gives it (the targets ha-guard
/// ships and tests on).
fn target_triple() -> String {
    let arch = std::env::consts::ARCH;
    let env = if cfg!(target_env = "gnu") { "gnu" } else { "musl" };
    format!("{arch}-unknown-linux-{env}")
}

#[test]
fn version_json_names_version_commit_target_and_build_settings() {
    let out = Command::new(BIN).args(["version", "--json"]).output().expect("the binary starts");
    assert!(out.status.success(), "version --json exits 0: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("version --json prints JSON");
    assert_eq!(json["name"], "ha-guard");
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(json["commit"], build_info::COMMIT);
    assert_eq!(json["target"], target_triple());
    // Tests build with the dev profile, whose directory is "debug"; its opt-level is Cargo.toml's.
    assert_eq!(json["profile"], "debug", "{json}");
    assert_eq!(json["build"]["opt_level"], "0");
    assert_eq!(json["build"]["crt_static"], false, "a test build links glibc dynamically");
    assert!(json["build"]["rustc"].as_str().is_some_and(|rustc| rustc.starts_with("rustc 1.")), "{json}");
    for key in ["lto", "codegen_units", "rustflags", "debug"] {
        assert!(!json["build"][key].is_null(), "build.{key} is present: {json}");
    }
    let tree = json["tree"].as_str().expect("tree is a string");
    assert!(["clean", "modified", "unknown"].contains(&tree), "{json}");

    let plain = Command::new(BIN).arg("version").output().expect("the binary starts");
    let plain = String::from_utf8(plain.stdout).expect("UTF-8");
    assert_eq!(
        plain.lines().next(),
        Some(version_output("--version").trim_end()),
        "version starts with --version's line"
    );
}

#[test]
fn short_flag_prints_the_same() {
    assert_eq!(version_output("-V"), version_output("--version"));
}

//! `ha-guard --version`: the package version and the git commit the binary was built from
//! (build.rs, src/build_info.rs), checked against what git says about this checkout now.

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

#[test]
fn short_flag_prints_the_same() {
    assert_eq!(version_output("-V"), version_output("--version"));
}

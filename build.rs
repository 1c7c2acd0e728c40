//! Records which commit the binary is built from, for `ha-guard --version` (src/build_info.rs).
//!
//! The commit comes from `HA_GUARD_GIT_COMMIT` when set (builds from a source tarball or the
//! Dockerfile, where `.git` is not in the build context), else from `git rev-parse HEAD` when this
//! package is the top of a git work tree, else it is "unknown". A missing git or repository is not
//! an error: the version then says "commit unknown".

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// What the build knows about the sources' state relative to the commit.
enum Tree {
    /// The compiled sources are exactly the commit's.
    Clean,
    /// Some compiled source differs from the commit (or is not committed yet).
    Modified,
    /// The commit was given from outside; the tree cannot be inspected.
    Unknown,
}

/// What goes into the binary: `src/`, the rule documentation it embeds (`include_str!`), the
/// manifests and this script. Edits elsewhere (tests, other docs) do not change the binary, so they
/// do not make it "modified".
const SOURCES: [&str; 5] = ["src", "docs/rules", "build.rs", "Cargo.toml", "Cargo.lock"];

fn main() -> ExitCode {
    println!("cargo:rerun-if-env-changed=HA_GUARD_GIT_COMMIT");
    // Cargo keys this script's output by package, not by checkout: two checkouts sharing a target
    // dir (scripts/image.sh keeps one in ~/.cache for every clone) would reuse each other's commit
    // if neither's watched files changed. image.sh names its checkout here so a switch reruns this.
    println!("cargo:rerun-if-env-changed=HA_GUARD_CHECKOUT");
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    // Paths inside the package are given relative to it, so cargo checks the current checkout's
    // files (a fresh clone's are newer than any earlier run) rather than an earlier checkout's.
    for source in SOURCES.iter().filter(|source| manifest_dir.join(source).exists()) {
        println!("cargo:rerun-if-changed={source}");
    }
    let (commit, tree) = match env::var("HA_GUARD_GIT_COMMIT") {
        Ok(given) if !given.trim().is_empty() => match parse_commit(given.trim()) {
            Some(commit) => (Some(commit), Tree::Unknown),
            None => {
                eprintln!(
                    "error: HA_GUARD_GIT_COMMIT={given:?} is not a git commit id (7 to 40 hexadecimal digits); \
                     set it to the output of `git rev-parse HEAD`, or unset it to read the commit from .git"
                );
                return ExitCode::FAILURE;
            }
        },
        _ => from_git(&manifest_dir),
    };

    let version = env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let long_version = match (&commit, &tree) {
        (None, _) => format!("{version} (commit unknown)"),
        (Some(id), Tree::Clean) => format!("{version} (commit {}, built from a clean tree)", short(id)),
        (Some(id), Tree::Modified) => format!("{version} (commit {}, built with uncommitted changes)", short(id)),
        (Some(id), Tree::Unknown) => format!("{version} (commit {})", short(id)),
    };
    let build = Build::read(&manifest_dir);
    // "0.1.0 (commit 1a2b3c4d5e6f, built from a clean tree; aarch64-unknown-linux-gnu, profile artifact)"
    let long_version = format!(
        "{}; {}, profile {})",
        long_version.strip_suffix(')').unwrap_or(&long_version),
        build.target,
        build.profile
    );
    println!("cargo:rustc-env=HA_GUARD_BUILD_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    println!("cargo:rustc-env=HA_GUARD_BUILD_TREE={}", tree.word());
    println!("cargo:rustc-env=HA_GUARD_BUILD_LONG_VERSION={long_version}");
    println!("cargo:rustc-env=HA_GUARD_BUILD_TARGET={}", build.target);
    println!("cargo:rustc-env=HA_GUARD_BUILD_PROFILE={}", build.profile);
    println!("cargo:rustc-env=HA_GUARD_BUILD_OPT_LEVEL={}", build.opt_level);
    println!("cargo:rustc-env=HA_GUARD_BUILD_DEBUG={}", build.debug);
    println!("cargo:rustc-env=HA_GUARD_BUILD_LTO={}", build.lto);
    println!("cargo:rustc-env=HA_GUARD_BUILD_CODEGEN_UNITS={}", build.codegen_units);
    println!("cargo:rustc-env=HA_GUARD_BUILD_CRT_STATIC={}", build.crt_static);
    println!("cargo:rustc-env=HA_GUARD_BUILD_RUSTFLAGS={}", build.rustflags);
    println!("cargo:rustc-env=HA_GUARD_BUILD_RUSTC={}", build.rustc);
    ExitCode::SUCCESS
}

impl Tree {
    /// The word `version --json` gives the tree: clean, modified or unknown.
    fn word(&self) -> &'static str {
        match self {
            Tree::Clean => "clean",
            Tree::Modified => "modified",
            Tree::Unknown => "unknown",
        }
    }
}

/// How cargo is building this package, as far as a build script can see it.
struct Build {
    target: String,
    /// The profile's directory name in the target dir: `debug` for dev and test builds, `release`
    /// for release and bench builds, else the custom profile's name (`artifact`).
    profile: String,
    opt_level: String,
    debug: String,
    /// `lto` and `codegen-units` as Cargo.toml's profile table (or the one it inherits) declares
    /// them; `default` when it declares none. Overrides given with `--config` are not seen.
    lto: String,
    codegen_units: String,
    crt_static: bool,
    rustflags: String,
    rustc: String,
}

impl Build {
    fn read(manifest_dir: &Path) -> Build {
        let var = |name: &str| env::var(name).unwrap_or_default();
        // OUT_DIR is TARGET_DIR[/TRIPLE]/PROFILE_DIR/build/ha-guard-HASH/out.
        let out_dir = PathBuf::from(var("OUT_DIR"));
        let profile = out_dir
            .ancestors()
            .nth(3)
            .and_then(|dir| dir.file_name())
            .map_or_else(|| "unknown".to_owned(), |name| name.to_string_lossy().into_owned());
        let manifest = std::fs::read_to_string(manifest_dir.join("Cargo.toml")).unwrap_or_default();
        let cargo_name = if profile == "debug" { "dev" } else { &profile };
        let setting = |key: &str| profile_setting(&manifest, cargo_name, key).unwrap_or_else(|| "default".to_owned());
        let rustc = Command::new(env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
            .arg("--version")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .map_or_else(|| "unknown".to_owned(), |text| text.trim().to_owned());
        Build {
            target: var("TARGET"),
            lto: setting("lto"),
            codegen_units: setting("codegen-units"),
            profile,
            opt_level: var("OPT_LEVEL"),
            debug: var("DEBUG"),
            crt_static: var("CARGO_CFG_TARGET_FEATURE").split(',').any(|feature| feature == "crt-static"),
            rustflags: var("CARGO_ENCODED_RUSTFLAGS")
                .split('\x1f')
                .filter(|flag| !flag.is_empty())
                .collect::<Vec<_>>()
                .join(" "),
            rustc,
        }
    }
}

/// `key`'s value in Cargo.toml's `[profile.NAME]`, following `inherits`; quotes removed. A plain
/// line scan: the profile tables are flat `key = value` lines.
fn profile_setting(manifest: &str, name: &str, key: &str) -> Option<String> {
    let mut name = name.to_owned();
    for _ in 0..4 {
        let header = format!("[profile.{name}]");
        let table: Vec<(&str, &str)> = manifest
            .lines()
            .skip_while(|line| line.trim() != header)
            .skip(1)
            .take_while(|line| !line.trim_start().starts_with('['))
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.trim(), v.split('#').next().unwrap_or("").trim().trim_matches('"')))
            .collect();
        if let Some((_, value)) = table.iter().find(|(k, _)| *k == key) {
            return Some((*value).to_owned());
        }
        match table.iter().find(|(k, _)| *k == "inherits") {
            Some((_, parent)) => name = (*parent).to_owned(),
            None if name == "bench" => name = "release".to_owned(),
            None => return None,
        }
    }
    None
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

fn parse_commit(text: &str) -> Option<String> {
    let ok = (7..=40).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| text.to_ascii_lowercase())
}

/// The commit of HEAD and whether the compiled sources match it, or `(None, Unknown)` when this
/// package is not the top of a git work tree (a tarball unpacked inside some other repository
/// must not report that repository's commit) or git is not installed.
fn from_git(manifest_dir: &Path) -> (Option<String>, Tree) {
    let Some(out) = git(manifest_dir, &["rev-parse", "--show-toplevel", "--git-dir", "--git-common-dir", "HEAD"])
    else {
        return (None, Tree::Unknown);
    };
    let lines: Vec<&str> = out.lines().collect();
    let [top, git_dir, common_dir, head] = lines[..] else {
        return (None, Tree::Unknown);
    };
    let same_dir = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if !same_dir(Path::new(top), manifest_dir) {
        return (None, Tree::Unknown);
    }
    let Some(commit) = parse_commit(head) else {
        return (None, Tree::Unknown);
    };

    // Run again when HEAD moves (commit, checkout, reset: HEAD, its reflog, or the branch ref
    // changes); the compiled sources, watched in main(), may make the tree modified or clean.
    // git prints these relative to the package (`.git`) or, for a worktree, absolute. Only
    // existing paths: cargo treats a missing one as always changed and would rerun every build.
    let (git_dir, common_dir) = (Path::new(git_dir), Path::new(common_dir));
    let mut watched = vec![git_dir.join("HEAD"), git_dir.join("logs").join("HEAD"), common_dir.join("packed-refs")];
    if let Some(branch) = git(manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common_dir.join(branch.trim()));
    }
    for path in watched.iter().filter(|path| manifest_dir.join(path).exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }

    let mut status = vec!["status", "--porcelain", "--"];
    status.extend(SOURCES);
    let tree = match git(manifest_dir, &status) {
        Some(changes) if changes.trim().is_empty() => Tree::Clean,
        Some(_) => Tree::Modified,
        None => Tree::Unknown,
    };
    (Some(commit), tree)
}

/// Output of a successful git command, or `None` (git missing, not a repository, refused).
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}

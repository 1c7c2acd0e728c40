#!/usr/bin/env bash
# Builds the release binaries the container image and the release archives hold: statically linked
# (glibc static-pie, so the image needs no libc and no loader), stripped (no debug info, no symbol
# table: ~19 MB instead of ~106 MB with line tables), with the artifact profile (Cargo.toml: fat LTO,
# one codegen unit) and with their dependency list embedded by cargo-auditable (a `.dep-v0`
# section that `cargo audit bin`, trivy, grype and syft read from the binary alone). The one
# definition of that build, used by the Dockerfile, scripts/image.sh and scripts/release.sh, so all
# of them ship the same binaries.
#
#   scripts/build-static.sh OUT            this machine's architecture, the binary written to OUT
#   scripts/build-static.sh --all OUTDIR   linux/amd64 and linux/arm64: OUTDIR/amd64/ha-guard and
#                                          OUTDIR/arm64/ha-guard
#
# --all builds both targets in one cargo run, so their two fat-LTO links (each single-threaded: one
# codegen unit) run side by side on two cores: about the time of one build, not two. arm64 is
# cross-compiled (Rust's aarch64-unknown-linux-gnu standard library from rustup, Debian's
# gcc-aarch64-linux-gnu and libc6-dev-arm64-cross for the C parts and the static glibc), both
# installed here when missing and said on stderr, as is cargo-auditable (cargo install, into
# $HA_GUARD_CACHE/cargo-tools).
#
# --target makes RUSTFLAGS apply to the binary only, not to build scripts and proc macros, which run
# on the host and are dynamic by nature.
#
# Environment: CARGO_TARGET_DIR     where cargo builds (default: cargo's own; scripts/image.sh keeps
#                                   it in ~/.cache/ha-guard so a fresh clone reuses the dependencies)
#              HA_GUARD_GIT_COMMIT  the commit `--version` names when .git is absent (build.rs)
#              HA_GUARD_PROFILE     the Cargo profile (default artifact); `release` builds in about
#                                   a quarter of the time, for trying the packaging, never to ship
#              HA_GUARD_CACHE       cache root for the tools (default ~/.cache/ha-guard)
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "build-static.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage="usage: scripts/build-static.sh OUT | scripts/build-static.sh --all OUTDIR"
declare -A arch_of=([x86_64-unknown-linux-gnu]=amd64 [aarch64-unknown-linux-gnu]=arm64)
if [[ ${1:-} == --all ]]; then
    outdir=${2:?$usage}
    targets=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)
else
    out=${1:?$usage}
    case $(uname -m) in
        x86_64) targets=(x86_64-unknown-linux-gnu) ;;
        aarch64) targets=(aarch64-unknown-linux-gnu) ;;
        *) die "builds linux/amd64 and linux/arm64 only (this machine is $(uname -m))" ;;
    esac
fi
profile=${HA_GUARD_PROFILE:-artifact}
cache=${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}

# --- tools ----------------------------------------------------------------------------------------
apt_install() {
    log "installing from Debian with apt-get (missing here): $*"
    if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y -q --no-install-recommends "$@" >&2 || {
        $SUDO apt-get update >&2 && $SUDO apt-get install -y -q --no-install-recommends "$@" >&2; }
}
command -v readelf >/dev/null 2>&1 || apt_install binutils
host=$(rustc -vV | sed -n 's/^host: //p')
for target in "${targets[@]}"; do
    [[ $target == "$host" ]] && continue
    if ! grep -qx "$target" <<<"$(rustup target list --installed 2>/dev/null)"; then
        log "adding the Rust standard library for $target (rustup target add)"
        rustup target add "$target" >&2
    fi
    if [[ $target == aarch64-unknown-linux-gnu ]]; then
        if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || [[ ! -f /usr/aarch64-linux-gnu/lib/libc.a ]]; then
            apt_install gcc-aarch64-linux-gnu libc6-dev-arm64-cross
        fi
        # The linker and the C compiler for ring's and mimalloc's C (the cc crate reads CC_<target>).
        export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
        export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
    fi
done
# cargo-auditable, pinned; its own build takes about a minute.
auditable_version=0.7.7
auditable=$cache/cargo-tools/bin/cargo-auditable
if [[ ! -x $auditable ]] || ! grep -qx "cargo-auditable v$auditable_version:" <<<"$(cargo install --list --root "$cache/cargo-tools")"; then
    log "installing cargo-auditable $auditable_version (cargo install --locked, into $cache/cargo-tools)"
    cargo install --quiet --locked --root "$cache/cargo-tools" "cargo-auditable@$auditable_version" >&2
fi
export PATH="$cache/cargo-tools/bin:$PATH"

# --- the build ------------------------------------------------------------------------------------
# cc 1.11 (ring's, psm's and libmimalloc-sys's C) reruns their build scripts when SOURCE_DATE_EPOCH
# changes; scripts/image.sh sets it to the commit time, so each new commit rebuilt most of the tree.
# Nothing in the binary reads it: leave it out of the build.
unset SOURCE_DATE_EPOCH
export RUSTFLAGS="-C target-feature=+crt-static"
target_args=()
for target in "${targets[@]}"; do target_args+=(--target "$target"); done
# --config wins over the profile's table for this build only: no debug info to generate,
# everything stripped (the .dep-v0 section is data, not debug info: strip keeps it).
cargo auditable build --profile "$profile" --locked "${target_args[@]}" --bin ha-guard \
    --config "profile.$profile.debug=false" --config "profile.$profile.strip=true"

for target in "${targets[@]}"; do
    bin="${CARGO_TARGET_DIR:-target}/$target/$profile/ha-guard"
    # A dynamic binary would build fine and then fail in a FROM scratch image with a confusing
    # "no such file or directory" (the missing loader): refuse it here.
    # Each tool's output is read whole before grep sees it: with pipefail, `readelf | grep -q` fails
    # when grep stops at its match and readelf then dies of SIGPIPE (it did, in CI, on a binary that
    # had the section).
    if grep -q INTERP <<<"$(readelf --program-headers "$bin")" || grep -q NEEDED <<<"$(readelf --dynamic "$bin")"; then
        log "$bin is dynamically linked (it names a loader or shared libraries):"
        readelf --program-headers --dynamic "$bin" | grep -E 'INTERP|NEEDED' >&2
        exit 1
    fi
    grep -q '\.dep-v0' <<<"$(readelf --sections "$bin")" || die "$bin has no .dep-v0 section: cargo-auditable did not embed the dependency list"
    if [[ -n ${outdir:-} ]]; then
        dest="$outdir/${arch_of[$target]}/ha-guard"
    else
        dest=$out
    fi
    mkdir -p "$(dirname "$dest")"
    cp "$bin" "$dest"
done

#!/usr/bin/env bash
# Builds the release binary the container image holds: statically linked (glibc static-pie, so the
# image needs no libc and no loader) and stripped (no debug info, no symbol table: ~19 MB instead of
# ~106 MB with the release profile's line tables). The one definition of that build, used by the
# Dockerfile and by scripts/image.sh, so both images hold the same binary.
#
#   scripts/build-static.sh OUT    build, check the result is static, copy it to OUT
#
# Only the image build strips: the release profile in Cargo.toml keeps its line tables for
# benchmarks and profiling. --target makes RUSTFLAGS apply to the binary only, not to build scripts
# and proc macros, which run on the host and are dynamic by nature.
#
# Environment: CARGO_TARGET_DIR  where cargo builds (default: cargo's own; scripts/image.sh keeps
#                                it in ~/.cache/ha-guard so a fresh clone reuses the dependencies)
#              HA_GUARD_GIT_COMMIT  the commit `--version` names when .git is absent (build.rs)
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:?usage: scripts/build-static.sh OUT (path of the static binary to write)}
target=x86_64-unknown-linux-gnu
if [ "$(uname -m)" != x86_64 ]; then
    echo "build-static.sh: builds $target only (this machine is $(uname -m))" >&2
    exit 1
fi

export RUSTFLAGS="-C target-feature=+crt-static"
# --config wins over the [profile.release] table for this build only: no debug info to generate,
# everything stripped.
cargo build --release --locked --target "$target" --bin ha-guard \
    --config profile.release.debug=false --config profile.release.strip=true

bin="${CARGO_TARGET_DIR:-target}/$target/release/ha-guard"
# A dynamic binary would build fine and then fail in a FROM scratch image with a confusing
# "no such file or directory" (the missing loader): refuse it here.
if readelf --program-headers "$bin" | grep -q INTERP || readelf --dynamic "$bin" | grep -q NEEDED; then
    echo "build-static.sh: $bin is dynamically linked (it names a loader or shared libraries):" >&2
    readelf --program-headers --dynamic "$bin" | grep -E 'INTERP|NEEDED' >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
cp "$bin" "$out"

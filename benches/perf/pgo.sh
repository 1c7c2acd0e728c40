#!/usr/bin/env bash
# A profile-guided build of the load bench, trained on requests it does not measure, beside the
# plain one: the evidence for shipping such a build (benches/README.md, "Profile-guided, trained
# on requests it does not measure"). Not part of cargo test or CI.
#
#   benches/perf/pgo.sh [WORK]       # WORK defaults to /tmp/ha-guard-pgo; ~30 min on 2 cores
#
# 1. the load bench instrumented (-Cprofile-generate), in WORK/gen-target;
# 2. trained by benches/perf/pgo_train.py: every AdmissionReview of tests/fixtures, to every
#    listener of the bench's server role, HTTP/1.1 and HTTP/2 (not the bench's own bodies);
# 3. the profile merged with the toolchain's llvm-profdata (rustup component llvm-tools);
# 4. the load bench built with it (-Cprofile-use), in WORK/use-target.
# It prints the two binaries; compare them with the per-type phase, interleaved, e.g.
#   for exe in $PLAIN $PGO $PLAIN $PGO; do taskset -c 0 $exe bench --server-cpus 1 --protos h1 \
#     --conc "" --rounds 1 --by-type-only pdb,hpa --by-type-rounds 5 --by-type-duration 2 --out ...; done
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-/tmp/ha-guard-pgo}
mkdir -p "$work"
work=$(cd "$work" && pwd)

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  echo "pgo.sh: no llvm-profdata in the toolchain; adding it (rustup component add llvm-tools)" >&2
  rustup component add llvm-tools >&2 || true
  [ -x "$profdata" ] || { echo "pgo.sh: llvm-profdata still missing ($profdata)" >&2; exit 2; }
fi

bench_exe() { # TARGET_DIR [RUSTFLAGS]: build the load bench, print its binary (cargo's output in WORK)
  # RUSTFLAGS unset for the plain build: cargo's own target/, as `cargo bench` builds it.
  env CARGO_TARGET_DIR="$1" ${2:+RUSTFLAGS="$2"} cargo bench --bench load --no-run --message-format json \
    2>"$work/build-$(basename "$1").log" |
    jq -r 'select(.reason == "compiler-artifact" and .target.name == "load" and .executable != null) | .executable' |
    tail -1
}

rm -rf "$work/raw" && mkdir -p "$work/raw"
echo "pgo.sh: instrumented build (WORK/gen-target)" >&2
gen=$(bench_exe "$work/gen-target" "-Cprofile-generate=$work/raw")
[ -x "$gen" ] || { echo "pgo.sh: the instrumented build failed" >&2; exit 1; }
# TLS material for the server role, as the bench's own runs write it (CA, localhost, 127.0.0.1).
if [ ! -f target/load-certs/ca.crt ]; then
  cargo run -q --release --bin ha-guard -- certs --out target/load-certs --dns localhost --ip 127.0.0.1 >/dev/null
fi
# Build scripts and proc macros ran instrumented too: only the training's profile is kept.
rm -rf "$work/raw" && mkdir -p "$work/raw"
echo "pgo.sh: training" >&2
benches/perf/pgo_train.py "$gen"
"$profdata" merge -o "$work/fixtures.profdata" "$work"/raw/*.profraw
echo "pgo.sh: optimized build (WORK/use-target)" >&2
pgo=$(bench_exe "$work/use-target" "-Cprofile-use=$work/fixtures.profdata")
plain=$(bench_exe target)
echo "PLAIN=$plain"
echo "PGO=$pgo"

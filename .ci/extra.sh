#!/usr/bin/env bash
# CI checks beyond the test suite, called from .ci/run:
#   1. cargo deny check licenses bans sources  (deny.toml; needs no network)
#   2. scripts/fuzz.sh 60                      (each fuzz target for one minute; any crash fails)
# Idempotent. Everything that is slow to make is kept outside the clone (CI runs in a fresh one):
# the tools in ~/.cargo/bin (cargo install), the fuzz build's target dir and the corpus libFuzzer
# grows in ~/.cache/ha-guard-fuzz, so a second run on the same machine rebuilds only ha-guard and
# the targets, and fuzzing starts from what the previous runs found.
#
# Environment: FUZZ_SECONDS (default 60) seconds per fuzz target; 0 skips fuzzing.
#              FUZZ_TARGET_DIR, FUZZ_CORPUS_DIR: override the cache folders above.
#              CARGO_DENY_VERSION, CARGO_FUZZ_VERSION: the versions installed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
step() { echo "== extra: $* ($(( $(date +%s) - started )) s)"; }

deny_version=${CARGO_DENY_VERSION:-0.20.2}
if ! cargo deny --version >/dev/null 2>&1; then
    step "installing cargo-deny $deny_version (once, into ~/.cargo/bin)"
    cargo install cargo-deny --version "$deny_version" --locked
fi
step "cargo deny check licenses bans sources"
cargo deny check licenses bans sources

seconds=${FUZZ_SECONDS:-60}
if [ "$seconds" -gt 0 ]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/ha-guard-fuzz
    export FUZZ_TARGET_DIR=${FUZZ_TARGET_DIR:-$cache/target}
    export FUZZ_CORPUS_DIR=${FUZZ_CORPUS_DIR:-$cache/corpus}
    step "scripts/fuzz.sh $seconds (build in $FUZZ_TARGET_DIR, corpus in $FUZZ_CORPUS_DIR)"
    scripts/fuzz.sh "$seconds"
fi
step "done"

#!/usr/bin/env bash
# Coverage-guided fuzzing of ha-guard (cargo-fuzz / libFuzzer).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Runs each target (default: admission check yaml) for SECONDS_PER_TARGET (default 60) seconds, one
# fuzzing process at a time (one core), and prints the executions per target from libFuzzer's
# final stats line ("Done N runs in S second(s)"). Exits non-zero on any crash, panic, timeout or
# out-of-memory, naming the reproducer (fuzz/artifacts/TARGET/...) and how to replay it.
#
# The seed corpus is built at run time from tests/fixtures/*.json (AdmissionReviews), examples/
# and the shared corpus ($HA_GUARD_CORPUS, default ../shared/corpus) into fuzz/seeds/ (nothing
# from ../shared is committed). What libFuzzer finds is kept in fuzz/corpus/TARGET/ (git-ignored;
# FUZZ_CORPUS_DIR) and reused by the next run on the same machine.
#
# Environment:
#   FUZZ_SANITIZER   address | none (default none: ha-guard has no unsafe code, and without ASan
#                    the targets run about twice as fast; use address for the dependencies' unsafe)
#   FUZZ_TOOLCHAIN   the toolchain that builds the targets (default nightly when installed, else
#                    stable: without a sanitizer cargo-fuzz passes no -Z flag; address needs nightly)
#   FUZZ_TARGET_DIR  cargo's target dir for the fuzz build (default fuzz/target)
#   FUZZ_CORPUS_DIR  where libFuzzer keeps the corpus it grows, one folder per target (default
#                    fuzz/corpus); CI points both outside the clone so that they survive it
#   FUZZ_TIMEOUT     seconds one input may take before it counts as a hang (default 25)
#   FUZZ_RSS_MB      memory limit of the fuzzing process (default 2048)
#   FUZZ_PARALLEL    1: the targets side by side (default with two cores or more)
#   FUZZ_FLAGS       more libFuzzer flags, e.g. "-seed=1"
#   CARGO_FUZZ_VERSION  the cargo-fuzz installed when it is missing (default below)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(admission check yaml)
case $seconds in '' | *[!0-9]*) echo "fuzz.sh: SECONDS_PER_TARGET must be a whole number, got '$seconds'" >&2; exit 2 ;; esac

sanitizer=${FUZZ_SANITIZER:-none}
timeout=${FUZZ_TIMEOUT:-25}
rss=${FUZZ_RSS_MB:-2048}
cargo_fuzz_version=${CARGO_FUZZ_VERSION:-0.13.2}
corpus_src=${HA_GUARD_CORPUS:-$(cd .. && pwd)/shared/corpus}

# --- tools ---------------------------------------------------------------------------------------
if [ -z "${FUZZ_TOOLCHAIN:-}" ]; then
    if rustup run nightly rustc --version >/dev/null 2>&1; then FUZZ_TOOLCHAIN=nightly; else FUZZ_TOOLCHAIN=stable; fi
fi
toolchain=$FUZZ_TOOLCHAIN
if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1; then
    echo "fuzz.sh: toolchain '$toolchain' is not installed" >&2
    exit 2
fi
if [ "$sanitizer" != none ] && ! grep -q nightly <<<"$(rustup run "$toolchain" rustc --version)"; then
    echo "fuzz.sh: FUZZ_SANITIZER=$sanitizer needs a nightly toolchain (-Zsanitizer); '$toolchain' is not one" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz $cargo_fuzz_version (once, into ~/.cargo/bin)"
    cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked
fi
target_dir=${FUZZ_TARGET_DIR:-fuzz/target}
corpus_dir=${FUZZ_CORPUS_DIR:-fuzz/corpus}
mkdir -p "$target_dir" "$corpus_dir"
target_dir=$(cd "$target_dir" && pwd)

# --- seed corpus -----------------------------------------------------------------------------------
# admission: every AdmissionReview fixture. check: the examples, the shared corpus split into
# pieces of at most 16 KiB at document boundaries (libFuzzer truncates longer inputs to -max_len),
# and the objects inside the fixtures as JSON documents.
seeds=fuzz/seeds
rm -rf "$seeds"
mkdir -p "$seeds/admission" "$seeds/check"
for f in tests/fixtures/*.json; do
    grep -q '"AdmissionReview"' "$f" && cp "$f" "$seeds/admission/"
done
cp examples/*.yaml examples/*.json "$seeds/check/" 2>/dev/null || true
if [ ! -d "$corpus_src" ]; then
    echo "fuzz.sh: no shared corpus at $corpus_src: seeding from the fixtures and examples only" >&2
    corpus_src=
fi
if command -v python3 >/dev/null 2>&1; then
    python3 - "$seeds/check" "$corpus_src" tests/fixtures/*.json <<'PY'
import json, os, pathlib, sys
out, corpus, fixtures = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
LIMIT = 16 * 1024
def pieces(text):
    """Consecutive YAML documents, split at `---` lines, grouped up to LIMIT bytes."""
    docs, cur = [], []
    for line in text.splitlines(keepends=True):
        if line.rstrip("\r\n") == "---" or line.startswith("--- "):
            if cur: docs.append("".join(cur))
            cur = []
        cur.append(line)
    if cur: docs.append("".join(cur))
    group = ""
    for d in docs:
        if len(d.encode()) > LIMIT:
            continue  # one document too large to fuzz whole (e.g. a CRD schema)
        if len((group + d).encode()) > LIMIT:
            yield group
            group = ""
        group += d
    if group.strip(): yield group
if corpus:
    for p in sorted(pathlib.Path(corpus).rglob("*")):
        if p.suffix not in (".yaml", ".yml", ".json") or not p.is_file():
            continue
        name = str(p.relative_to(corpus)).replace(os.sep, "__")
        for i, piece in enumerate(pieces(p.read_text(errors="replace"))):
            (out / f"shared__{name}.{i}.yaml").write_text(piece)
for f in fixtures:
    try:
        review = json.load(open(f))
    except Exception:
        continue
    req = review.get("request") if isinstance(review, dict) else None
    if not isinstance(req, dict):
        continue
    for field in ("object", "oldObject"):
        if isinstance(req.get(field), dict):
            (out / f"fixture__{pathlib.Path(f).stem}.{field}.json").write_text(json.dumps(req[field], indent=2) + "\n")
PY
elif [ -n "$corpus_src" ]; then
    # Without python3: the shared corpus files small enough to fuzz whole.
    find "$corpus_src" -name '*.yaml' -size -16k | while read -r f; do
        cp "$f" "$seeds/check/shared__$(echo "${f#"$corpus_src"/}" | tr / _)"
    done
fi
# yaml: the same manifests as check.
cp -r "$seeds/check" "$seeds/yaml"
echo "fuzz.sh: seeds: admission $(ls "$seeds/admission" | wc -l), check $(ls "$seeds/check" | wc -l), yaml $(ls "$seeds/yaml" | wc -l)"

# --- build every target once (not counted in the fuzzing time) ------------------------------------
fuzz=(cargo "+$toolchain" fuzz)
build_start=$(date +%s)
if ! "${fuzz[@]}" build --sanitizer "$sanitizer" --target-dir "$target_dir"; then
    echo "fuzz.sh: the fuzz targets do not build" >&2
    exit 1
fi
echo "fuzz.sh: built in $(( $(date +%s) - build_start )) s (toolchain $toolchain, sanitizer $sanitizer)"
triple=$(rustup run "$toolchain" rustc -vV | sed -n 's/^host: //p')
bin_dir=$target_dir/$triple/release
# What cargo-fuzz sets for an ASan build (Rust's global allocator trips ODR checking).
if [ "$sanitizer" = address ]; then export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_odr_violation=0}"; fi

# --- run -------------------------------------------------------------------------------------------
mkdir -p fuzz/logs
declare -A max_len=([admission]=16384 [check]=16384 [yaml]=16384)
failed=()
summary=()
# The targets run side by side when the machine has two cores or more (three targets on two cores
# share them; FUZZ_PARALLEL=0 runs them one after the other, each on a core of its own).
parallel=${FUZZ_PARALLEL:-$([ "$(nproc)" -ge 2 ] && echo 1 || echo 0)}
run_target() {
    local t=$1 status=0
    # The binary just built, run directly: `cargo fuzz run` would rebuild first, and in a work
    # tree that changes meanwhile the rebuild would eat the fuzzing time. One in-process fuzzer
    # (no -jobs/-fork workers), on one core.
    # shellcheck disable=SC2086
    "$bin_dir/$t" "$corpus_dir/$t" "$seeds/$t" \
        -max_total_time="$seconds" -max_len="${max_len[$t]:-16384}" -timeout="$timeout" \
        -rss_limit_mb="$rss" -dict=fuzz/k8s.dict -print_final_stats=1 \
        -artifact_prefix="fuzz/artifacts/$t/" ${FUZZ_FLAGS:-} >"fuzz/logs/$t.log" 2>&1 || status=$?
    echo "$status" >"fuzz/logs/$t.status"
}
for t in "${targets[@]}"; do
    mkdir -p "$corpus_dir/$t" "fuzz/artifacts/$t"
    touch "fuzz/logs/.$t.started"
    rm -f "fuzz/logs/$t.status"
    echo "fuzz.sh: $t for ${seconds}s (log: fuzz/logs/$t.log)"
    if [ "$parallel" = 1 ]; then run_target "$t" & else run_target "$t"; fi
done
wait
for t in "${targets[@]}"; do
    log="fuzz/logs/$t.log"
    status=$(cat "fuzz/logs/$t.status" 2>/dev/null || echo 99)
    started_marker=fuzz/logs/.$t.started
    done_line=$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n 1 || true)
    runs=$(echo "$done_line" | awk '{print $2}')
    secs=$(echo "$done_line" | awk '{print $5}')
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -n 1 || true)
    if [ "$status" -ne 0 ] || [ -z "$done_line" ]; then
        failed+=("$t")
        echo "fuzz.sh: $t FAILED (exit $status). The end of its log:" >&2
        grep -v '^#[0-9]' "$log" | tail -n 60 >&2
        find "fuzz/artifacts/$t" -type f -newer "$started_marker" | while read -r a; do
            echo "fuzz.sh: reproducer: $a" >&2
            echo "         replay: $bin_dir/$t $a" >&2
        done
        summary+=("$t: FAILED after ${runs:-?} runs")
    else
        summary+=("$t: $runs runs in $secs s ($(( runs / (secs > 0 ? secs : 1) )) exec/s; $cov)")
    fi
done

echo "fuzz.sh: summary"
for s in "${summary[@]}"; do echo "  $s"; done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: crashes in: ${failed[*]}" >&2
    exit 1
fi

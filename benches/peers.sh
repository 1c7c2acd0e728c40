#!/usr/bin/env bash
# Times `ha-guard check` beside its offline peers (kube-linter, Polaris, kube-score, the Kyverno CLI
# with the kyverno/policies library's availability policies) on the same generated bundles,
# interleaved, and records which HA problems of the bundle each one reports. Not part of cargo test
# or CI: it builds Go tools and takes minutes. See benches/README.md ("Offline peers").
#
#   OUT=peers.md benches/peers.sh
#
# Knobs: ROUNDS ("5 1": one number per size, or one for all; Polaris and Kyverno take minutes a run at
# 10,000 objects), SIZES ("1000 10000"), TOOLS (all five), TIMEOUT per run in seconds (1800),
# HA_GUARD (the binary; default: built with `cargo build --release` into $CARGO_TARGET_DIR),
# PEERS_DIR (~/.cache/ha-guard/peers: built tools, bundles, and the run's work files under run/).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
# shellcheck source=peers/build.sh
source "$here/peers/build.sh"

OUT=${OUT:?set OUT=FILE: where the markdown section goes}
ROUNDS=${ROUNDS:-5 1}
SIZES=${SIZES:-1000 10000}
TOOLS=${TOOLS:-ha-guard kube-linter polaris kube-score kyverno}
TIMEOUT=${TIMEOUT:-1800}
WORK=$PEERS_DIR/run
target=${CARGO_TARGET_DIR:-$repo/target}

log() { echo "peers: $*" >&2; }

if [ -z "${HA_GUARD:-}" ]; then
    # This commit's binary, whatever an earlier build left in the target directory.
    log "building ha-guard (release)"
    (cd "$repo" && cargo build --release --bin ha-guard)
    HA_GUARD=$target/release/ha-guard
fi
log "building the peers (once; logs in $PEERS_DIR/logs)"
build_peers
policies=$(fetch_kyverno_policies)

# The bundles of benches/check.rs, written once (the filter matches no benchmark: generation only).
mkdir -p "$PEERS_DIR/bundles"
for size in $SIZES; do
    if [ ! -f "$PEERS_DIR/bundles/bundle-$size.yaml" ]; then
        log "writing the bundles with cargo bench --bench check"
        (cd "$repo" && HA_GUARD_BENCH_WRITE="$PEERS_DIR/bundles" cargo bench --bench check -- write-bundles-only)
    fi
    [ -f "$PEERS_DIR/bundles/bundle-$size.yaml" ] || { log "no bundle-$size.yaml: SIZES are 1000, 10000, 50000"; exit 2; }
done

# Every tool gets the same input: the bundle split per namespace into a directory (kube-linter
# skips files over 10 MiB without a word, and the 10,000-object bundle is 23.8 MB).
rm -rf "$WORK" && mkdir -p "$WORK"
files=0
for size in $SIZES; do
    files=$(python3 "$here/peers/report.py" split "$PEERS_DIR/bundles/bundle-$size.yaml" "$WORK/input-$size")
done

# The command line of TOOL on directory IN (its JSON report goes to stdout).
command_of() {
    local tool=$1 in=$2
    case $tool in
    ha-guard) echo "$HA_GUARD check --complete --format json -f $in" ;;
    kube-linter) echo "$PEERS_DIR/kube-linter-$KUBE_LINTER_VERSION/kube-linter lint --config $here/peers/kube-linter.yaml --format json $in" ;;
    polaris) echo "$PEERS_DIR/polaris-$POLARIS_VERSION/polaris audit --config $here/peers/polaris.yaml --format json --audit-path $in" ;;
    kube-score) echo "$PEERS_DIR/kube-score-$KUBE_SCORE_VERSION/kube-score score --output-format json $in/*.yaml" ;;
    kyverno) echo "$PEERS_DIR/kyverno-cli-$KYVERNO_VERSION/kyverno apply $policies --resource $in --policy-report --output-format json --remove-color" ;;
    esac
}
label_of() {
    case $1 in
    ha-guard) echo "ha-guard $(git -C "$repo" rev-parse --short HEAD)" ;;
    kube-linter) echo "kube-linter $KUBE_LINTER_VERSION" ;;
    polaris) echo "Polaris $POLARIS_VERSION" ;;
    kube-score) echo "kube-score $KUBE_SCORE_VERSION" ;;
    kyverno) echo "Kyverno CLI $KYVERNO_VERSION" ;;
    esac
}

python3 - "$WORK/meta.json" "$files" "$SIZES" <<EOF
import json, sys
tools = [{"name": t, "label": l} for t, l in [$(for t in $TOOLS; do printf '("%s", "%s"),' "$t" "$(label_of "$t")"; done)]]
json.dump({"tools": tools, "files": int(sys.argv[2]),
           "sizes": [int(s) for s in sys.argv[3].split()]}, open(sys.argv[1], "w"))
EOF

# Rounds: every size, every tool, the tools' order rotated each round.
read -ra tools <<< "$TOOLS"
read -ra sizes <<< "$SIZES"
read -ra rounds_of <<< "$ROUNDS"
max_rounds=0
for ((i = 0; i < ${#sizes[@]}; i++)); do
    r=${rounds_of[$i]:-${rounds_of[-1]}}
    rounds_of[$i]=$r
    ((r > max_rounds)) && max_rounds=$r
done
for ((round = 1; round <= max_rounds; round++)); do
    for ((i = 0; i < ${#sizes[@]}; i++)); do
        size=${sizes[$i]}
        ((round > rounds_of[i])) && continue
        for ((t = 0; t < ${#tools[@]}; t++)); do
            tool=${tools[$(((t + round) % ${#tools[@]}))]}
            cmd=$(command_of "$tool" "$WORK/input-$size")
            out="$WORK/out-$tool-$size.json"
            rc=0
            # GNU time writes "Command exited with non-zero status N" before the numbers then.
            timeout "$TIMEOUT" /usr/bin/time -f '%e %U %S %M' -o "$WORK/time" \
                bash -c "exec $cmd" > "$out" 2> "$WORK/err-$tool-$size.txt" || rc=$?
            if [ "$rc" = 124 ]; then
                echo "$TIMEOUT 0 0 0" > "$WORK/time"
            fi
            read -r wall user sys rss < <(tail -1 "$WORK/time")
            echo "$tool $size $round $wall $user $sys $rss $rc" >> "$WORK/times.tsv"
            log "round $round/${rounds_of[$i]} $size $tool: ${wall}s wall, $((rss / 1024)) MB, exit $rc"
        done
    done
done

{
    echo "### Offline peers: \`ha-guard check\` beside kube-linter, Polaris, kube-score and the Kyverno CLI"
    echo
    echo "Produced by \`OUT=... ROUNDS=\"$ROUNDS\" SIZES=\"$SIZES\" benches/peers.sh\` on $(date -u +%Y-%m-%d) ($(nproc) cores, $(uname -m))."
    echo "Commands (IN = the per-namespace directory of one bundle):"
    echo
    for t in "${tools[@]}"; do
        echo "- $(label_of "$t"): \`$(command_of "$t" IN | sed "s|$PEERS_DIR|~/.cache/ha-guard/peers|g; s|$here|benches|g; s|$target|target|g")\`"
    done
    echo
    python3 "$here/peers/report.py" markdown "$WORK"
} > "$OUT"
log "wrote $OUT"

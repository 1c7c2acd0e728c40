#!/usr/bin/env bash
# The webhook's load benchmark, side by side with its baselines, and ha-guard beside its peers, in one run; writes
# benches/RESULTS.md (and prints it). Not part of CI. About 40-45 minutes on 2 cores (load and profile 13, the
# matchConditions through kube-apiserver 12, the peers through it 11, the offline peers 10), once the peers are built.
#
#   benches/run.sh                 # everything
#   QUICK=1 benches/run.sh         # a shorter pass (1 round, shorter runs): a smoke test
#   PROFILE=0 benches/run.sh       # without the callgrind profile
#   APISERVER=0 benches/run.sh     # without the run through kube-apiserver
#   PEERS=0 benches/run.sh         # without the offline peers (benches/peers.sh, ~10 min)
#   APISERVER_MODES=none,before,shipped benches/run.sh   # without ha-guard's peers (CEL, Kyverno)
#   MC_ROUNDS=10 MC_OBJECTS=300 benches/run.sh   # the matchConditions pass in fewer, larger rounds
#   OUT=/tmp/r.md benches/run.sh   # write elsewhere
#
# What runs (benches/load/main.rs has the details):
#   1. load: the server process (transport baseline, decode baseline, ha-guard with a 10,000-
#      Deployment view) pinned to CPU 1, the load generator on CPU 0; HTTP/1.1 and HTTP/2 at
#      concurrency 1, 4, 16, 64: saturation req/s (median of interleaved rounds), server CPU per
#      request, then p50/p99/p99.9 at half the saturation rate (open loop), errors; then each
#      request type alone (HTTP/1.1, concurrency 16, five rounds), with each target's CPU per
#      request over `parse`'s in the same round.
#   2. viewsize: evaluate + decide against 1,000 vs 100,000 objects in other namespaces.
#   3. profile: the server under callgrind (its caches simulated, the last level as this machine's L2),
#      instructions and L2 misses per request by component (deployment),
#      and per target for each request type.
#   4. apiserver: a mix of creates, updates and controllers' metadata-only updates through a real
#      kube-apiserver (benches/apiserver.rs; builds kube-apiserver on first use, ~6.5 min once, and
#      Kyverno, ~30 min once), in two passes: what the matchConditions save (no webhook, ha-guard's
#      webhooks as before the matchConditions and as shipped; MC_ROUNDS rounds of MC_OBJECTS apps,
#      40 of 60 by default: the added CPU is a small difference of large noisy figures, and many
#      short interleaved rounds gave the tightest intervals in benches/README.md's runs),
#      then ha-guard beside its peers through the same apiserver: ValidatingAdmissionPolicies (CEL)
#      and Kyverno's admission controller (whose batches take minutes, hence fewer rounds).
#   5. offline peers: `ha-guard check` beside kube-linter, Polaris, kube-score and the Kyverno CLI
#      on the same bundles (benches/peers.sh; builds them on first use).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-benches/RESULTS.md}
QUICK=${QUICK:-0}
PROFILE=${PROFILE:-1}
APISERVER=${APISERVER:-1}
APISERVER_MODES=${APISERVER_MODES:-none,before,shipped,cel,kyverno}
PEERS=${PEERS:-1}
mc_given=${MC_ROUNDS:-}${MC_OBJECTS:-}
WORK=target/load-results
mkdir -p "$WORK"

if [[ "$QUICK" == 1 ]]; then
  LOAD_ARGS=(--rounds 1 --warmup 0.3 --duration 1 --lat-duration 1.5)
  VIEW_ARGS=(--rounds 5 --batch 100)
  PROFILE_ARGS=(--requests 100 --by-type pdb,hpa,scale --cache-sim)
  APISERVER_ARGS=(--rounds 1 --objects 100)
  MC_ROUNDS=${MC_ROUNDS:-1}
  MC_OBJECTS=${MC_OBJECTS:-60}
  PEERS_ENV=(ROUNDS=1 SIZES=1000)
else
  LOAD_ARGS=(--rounds 5 --warmup 0.5 --duration 1.5 --lat-duration 3 --by-type-rounds 5 --by-type-duration 1.5)
  VIEW_ARGS=(--rounds 15 --batch 300)
  PROFILE_ARGS=(--requests 200 --by-type pdb,hpa,scale --cache-sim)
  APISERVER_ARGS=(--rounds 5 --objects 300)
  MC_ROUNDS=${MC_ROUNDS:-40}
  MC_OBJECTS=${MC_OBJECTS:-60}
  PEERS_ENV=()
fi
APISERVER_ARGS+=(--modes "$APISERVER_MODES")
LOAD_ARGS+=(${CONC:+--conc "$CONC"} ${PROTOS:+--protos "$PROTOS"})

started=$(date +%s)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== building (cargo bench --bench load --no-run)" >&2
# The load bench's own artifact (cargo also builds the ha-guard binary for benches, and lists it).
exe=$(cargo bench --bench load --no-run --message-format=json 2>/dev/null \
  | grep '"reason":"compiler-artifact"' | grep '"name":"load"' \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[[ -x "$exe" ]] || { echo "could not build the load benchmark" >&2; exit 1; }

# Client on CPU 0, server on CPU 1: each gets a core of its own (as far as the rest of the
# machine lets it). On a single CPU both share it.
if [[ $(nproc) -ge 2 ]]; then
  CLIENT=(taskset -c 0); SERVER_CPUS=1
else
  CLIENT=(); SERVER_CPUS=any
fi

echo "== load (load average before: $load_before)" >&2
"${CLIENT[@]}" "$exe" bench --server-cpus "$SERVER_CPUS" "${LOAD_ARGS[@]}" --out "$WORK/load.md" >/dev/null
load_after_load=$(cut -d' ' -f1-3 /proc/loadavg)

echo "== view size" >&2
"$exe" viewsize "${VIEW_ARGS[@]}" --out "$WORK/viewsize.md" >/dev/null

profile_md="(skipped: PROFILE=0 or valgrind not installed)"
if [[ "$PROFILE" == 1 ]] && command -v valgrind >/dev/null && command -v callgrind_control >/dev/null; then
  echo "== profile (callgrind)" >&2
  "$exe" profile "${PROFILE_ARGS[@]}" --out "$WORK/profile.md" >/dev/null
  profile_md=$(cat "$WORK/profile.md")
fi
apiserver_md="(skipped: APISERVER=0)"
conditions_md="(skipped: APISERVER=0)"
if [[ "$APISERVER" == 1 ]]; then
  echo "== through kube-apiserver: what the matchConditions save" >&2
  cargo bench --bench apiserver -- --rounds "$MC_ROUNDS" --objects "$MC_OBJECTS" \
    --modes none,before,shipped --out "$WORK/apiserver-conditions.md" >/dev/null
  conditions_md=$(cat "$WORK/apiserver-conditions.md")
  echo "== through kube-apiserver: beside the peers" >&2
  cargo bench --bench apiserver -- "${APISERVER_ARGS[@]}" --out "$WORK/apiserver.md" >/dev/null
  apiserver_md=$(cat "$WORK/apiserver.md")
fi
peers_md="(skipped: PEERS=0)"
if [[ "$PEERS" == 1 ]]; then
  echo "== offline peers (benches/peers.sh)" >&2
  env "${PEERS_ENV[@]}" OUT="$WORK/peers.md" benches/peers.sh >&2
  peers_md=$(cat "$WORK/peers.md")
fi
elapsed=$(( $(date +%s) - started ))
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
mem=$(free -h | awk '/^Mem:/ {print $2}')
command_line="benches/run.sh"
[[ "$QUICK" == 1 ]] && command_line="QUICK=1 benches/run.sh"
[[ "$PROFILE" == 1 ]] || command_line="PROFILE=$PROFILE $command_line"
[[ "$APISERVER" == 1 ]] || command_line="APISERVER=$APISERVER $command_line"
[[ "$APISERVER_MODES" == none,before,shipped,cel,kyverno ]] || command_line="APISERVER_MODES=$APISERVER_MODES $command_line"
[[ "$PEERS" == 1 ]] || command_line="PEERS=$PEERS $command_line"
[[ -z "$mc_given" ]] || command_line="MC_ROUNDS=$MC_ROUNDS MC_OBJECTS=$MC_OBJECTS $command_line"

{
  echo "# Load benchmark results"
  echo
  echo "Written by \`$command_line\` on $(date -u '+%Y-%m-%d %H:%M UTC') at commit \`$(git rev-parse --short HEAD)\`$(git diff --quiet HEAD -- src Cargo.toml benches/load || echo ' (with uncommitted changes)'), in ${elapsed}s."
  echo "How the numbers are made and how to read them: see the end of this file and benches/load/main.rs."
  echo
  echo "## Machine"
  echo
  echo "- \`nproc\`: $(nproc); CPU: $model; memory: $mem; kernel $(uname -r); $(rustc --version)"
  echo "- load average (1, 5, 15 min) before: $load_before; after the load runs: $load_after_load; at the end: $load_end"
  echo "  (a shared machine: other builds ran beside this; ratios are side by side in one run, absolute numbers are not portable)"
  echo "- server process pinned to CPU $SERVER_CPUS, load generator to CPU 0"
  echo
  echo "## Load"
  echo
  cat "$WORK/load.md"
  echo
  echo "## Evaluation cost against the size of the view"
  echo
  cat "$WORK/viewsize.md"
  echo
  echo "## Where the time goes (callgrind)"
  echo
  echo "$profile_md"
  echo
  echo "## Through kube-apiserver: what the matchConditions save"
  echo
  echo "$conditions_md"
  echo
  echo "## Through kube-apiserver, beside the peers"
  echo
  echo "$apiserver_md"
  echo
  echo "## Offline peers"
  echo
  echo "$peers_md"
  echo
  cat benches/load/NOTES.md
} > "$OUT"
cat "$OUT"
echo "== wrote $OUT in ${elapsed}s" >&2

#!/usr/bin/env bash
# Where the webhook server's CPU goes per request, in time rather than instructions: perf samples
# the load benchmark's server process (benches/load/main.rs, pinned to CPU 1, the load generator
# on CPU 0) through its per-request-type phase (HTTP/1.1, concurrency 16), and
# benches/perf/breakdown.py cuts the profile into the measured windows of each target and splits
# each request's CPU into the handler's parts, the TLS and TCP send and receive, and the rest.
# Not part of CI; about 20 s per request type plus the build. Needs perf (linux-perf).
#
#   benches/perf.sh                          # the PDB and HPA reviews
#   TYPES=deployment,pdb,hpa,scale benches/perf.sh
#   FREQ=400 DURATION=3 OUT=/tmp/perf.md benches/perf.sh
set -euo pipefail
cd "$(dirname "$0")/.."

TYPES=${TYPES:-pdb,hpa}
FREQ=${FREQ:-400}
DURATION=${DURATION:-3}
WORK=target/perf-profile
OUT=${OUT:-$WORK/breakdown.md}
mkdir -p "$WORK"
command -v perf >/dev/null || { echo "perf is not installed (Debian: linux-perf)" >&2; exit 2; }

exe=$(cargo bench --bench load --no-run --message-format=json 2>/dev/null \
  | grep '"reason":"compiler-artifact"' | grep '"name":"load"' \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[[ -x "$exe" ]] || { echo "could not build the load benchmark" >&2; exit 1; }

rm -f "$WORK/perf.data" "$WORK/bench.err"
taskset -c 0 "$exe" bench --server-cpus 1 --protos h1 --conc "" --rounds 1 --by-type-only "$TYPES" \
  --by-type-rounds 1 --by-type-duration "$DURATION" >/dev/null 2>"$WORK/bench.err" &
bench=$!
pid=""
for _ in $(seq 1 300); do
  pid=$(sed -n 's/^server: pid \([0-9]*\).*/\1/p' "$WORK/bench.err" 2>/dev/null | head -1 || true)
  [[ -n "$pid" ]] && break
  sleep 0.1
done
[[ -n "$pid" ]] || { echo "the load benchmark's server did not start:" >&2; cat "$WORK/bench.err" >&2; exit 1; }
# Samples are stamped with the wall clock, which the bench's window lines use too. DWARF stacks of
# 40,000 bytes: the async stacks of hyper and tokio are deep, and a cut stack loses its handler.
perf record -q -k CLOCK_REALTIME -F "$FREQ" --call-graph dwarf,40000 -p "$pid" -o "$WORK/perf.data" &
perf_pid=$!
wait "$bench"
kill -INT "$perf_pid" 2>/dev/null || true
wait "$perf_pid" || true
perf script -i "$WORK/perf.data" -F tid,time,ip,sym --no-inline 2>/dev/null >"$WORK/perf.txt"
python3 benches/perf/breakdown.py "$WORK/bench.err" "$WORK/perf.txt" \
  "benches/perf.sh (TYPES=$TYPES FREQ=$FREQ DURATION=$DURATION) at commit $(git rev-parse --short HEAD)" >"$OUT"
cat "$OUT"
echo "== wrote $OUT" >&2

#!/usr/bin/env bash
# Instructions and L1 misses per decode of a Deployment, three ways (src/main.rs), under callgrind:
# k8s-openapi's types (ha-guard's typed decoding now), a JSON tree (kube-rs's DynamicObject) and
# only the fields the rules read. Needs valgrind. The Deployments are those of four files of the
# shared corpus (10 Deployments, 1.3-13.8 KB of JSON each).
#
#   benches/perf/lean-decode/run.sh [ROUNDS]      # default 100
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
corpus=${CORPUS:-$here/../../../../shared/corpus}
rounds=${1:-100}
files=("$corpus/linkerd2/install_ha_output.yaml" "$corpus/gatekeeper/gatekeeper.yaml"
       "$corpus/istio/install.yaml" "$corpus/cert-manager/cert-manager-v1.11.1.yaml")
cargo build --release --quiet --manifest-path "$here/Cargo.toml"
exe=$here/target/release/lean-decode
out=$(mktemp -d)
printf '| decoded into | Ir / decode | L1i misses / decode | L1d misses / decode |\n|---|---:|---:|---:|\n'
for mode in typed tree lean; do
  line=$("$exe" "$mode" 1 "${files[@]}")
  n=$(( rounds * $(sed -n 's/.*decodes of \([0-9]*\) Deployments.*/\1/p' <<<"$line") ))
  valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file="$out/$mode" "$exe" "$mode" "$rounds" "${files[@]}" \
    >/dev/null 2>"$out/$mode.log"
  # The decode function's inclusive cost (loading the YAML, the same for every mode, left out).
  read -r ir i1 d1r d1w < <(callgrind_annotate --inclusive=yes --show=Ir,I1mr,D1mr,D1mw "$out/$mode" 2>/dev/null \
    | grep -m1 "lean_decode::$mode " | sed 's/([^)]*)//g; s/,//g' | awk '{print $1, $2, $3, $4}')
  printf '| %s | %d | %d | %d |\n' "$mode" $(( ir / n )) $(( i1 / n )) $(( (d1r + d1w) / n ))
done
rm -rf "$out"

#!/usr/bin/env bash
# Holds two ha-guard binaries to the same observable behaviour: the JSON and SARIF output of
# `check` and every HTTP answer of the webhook, byte for byte.
#
#   scripts/compare-outputs.sh OLD_BINARY NEW_BINARY [BUNDLE_DIR]
#
# Inputs: every file of ../shared/corpus (alone, partial and --complete, and the whole corpus at
# once), examples/, the repository's own fixtures (tests/fixtures/*.json sent to /validate and
# /mutate of `serve --cluster none` and of `serve --cluster examples/`), and, when BUNDLE_DIR is
# given, the generated bench bundles in it (`HA_GUARD_BENCH_WRITE=DIR cargo bench --bench check
# -- --list` writes them). Prints one line per compared output and a summary; exits 1 on the first
# difference class found (all differences are still listed).
set -euo pipefail

old="$(realpath "$1")"
new="$(realpath "$2")"
bundles="${3:-}"
cd "$(dirname "$0")/.."
corpus="$(cd .. && pwd)/shared/corpus"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

same=0
differ=0
compare() { # name, then the command after the binary
  local name="$1"
  shift
  local a="$work/a" b="$work/b" ra rb
  set +e
  "$old" "$@" >"$a" 2>/dev/null
  ra=$?
  "$new" "$@" >"$b" 2>/dev/null
  rb=$?
  set -e
  if [[ $ra -eq $rb ]] && cmp -s "$a" "$b"; then
    same=$((same + 1))
  else
    differ=$((differ + 1))
    echo "DIFFERS: $name (exit $ra vs $rb)"
    diff <(head -c 200000 "$a") <(head -c 200000 "$b") | head -20 || true
  fi
}

# --- check -----------------------------------------------------------------------------------
inputs=()
while IFS= read -r f; do inputs+=("$f"); done < <(find "$corpus" examples -type f \( -name '*.yaml' -o -name '*.yml' -o -name '*.json' \) | sort)
for f in "${inputs[@]}"; do
  for format in json sarif; do
    compare "check $f $format" check -f "$f" --format "$format"
    compare "check $f $format --complete" check -f "$f" --format "$format" --complete
  done
done
compare "check corpus json" check -f "$corpus" --format json
compare "check corpus json --complete" check -f "$corpus" --format json --complete
compare "check examples sarif" check -f examples --format sarif
if [[ -n "$bundles" ]]; then
  for f in "$bundles"/bundle-*.yaml; do
    compare "check $f json" check -f "$f" --format json
  done
fi

# --- HTTP ------------------------------------------------------------------------------------
"$old" certs --out "$work/certs" --dns localhost --ip 127.0.0.1 >/dev/null
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() { # binary, cluster → prints "webhook_port"
  local bin="$1" cluster="$2" wp pp
  wp="$(port)"
  pp="$(port)"
  "$bin" serve --listen "127.0.0.1:$wp" --probe-listen "127.0.0.1:$pp" --tls-cert "$work/certs/tls.crt" \
    --tls-key "$work/certs/tls.key" --cluster "$cluster" >"$work/serve-$wp.log" 2>&1 &
  for _ in $(seq 100); do
    if curl -sf "http://127.0.0.1:$pp/readyz" >/dev/null; then
      echo "$wp"
      return
    fi
    sleep 0.1
  done
  echo "serve did not become ready: $(tail -5 "$work/serve-$wp.log")" >&2
  exit 2
}
canonical() { python3 -c 'import json,sys; body,_,code=sys.argv[1].rpartition(" "); print(json.dumps(json.loads(body),sort_keys=True) if body.startswith("{") else body, code)' "$1"; }
for cluster in none examples; do
  po="$(start "$old" "$cluster")"
  pn="$(start "$new" "$cluster")"
  for f in tests/fixtures/*.json; do
    [[ "$f" == *schema* ]] && continue
    for path in validate mutate; do
      a="$(curl -s --cacert "$work/certs/ca.crt" -H 'Content-Type: application/json' --data-binary @"$f" -w ' %{http_code}' "https://localhost:$po/$path")"
      b="$(curl -s --cacert "$work/certs/ca.crt" -H 'Content-Type: application/json' --data-binary @"$f" -w ' %{http_code}' "https://localhost:$pn/$path")"
      # kube's AdmissionResponse keeps auditAnnotations in a HashMap: their order is random
      # between runs of one binary, so bodies are compared with their keys sorted.
      a="$(canonical "$a")"
      b="$(canonical "$b")"
      if [[ "$a" == "$b" ]]; then
        same=$((same + 1))
      else
        differ=$((differ + 1))
        echo "DIFFERS: POST /$path $f (--cluster $cluster)"
        diff <(echo "$a") <(echo "$b") | head -10 || true
      fi
    done
  done
done

echo "compare-outputs: $same identical, $differ different"
[[ $differ -eq 0 ]]

#!/usr/bin/env bash
# benches/replicas-table.sh: issue 47's table, measured as the issue measured it. On the e2e
# control plane (etcd + kube-apiserver, tests/e2e/control-plane/start.sh), NODES untainted Nodes
# (no pods); `ha-guard serve --cluster live` (HA_GUARD_BIN, default target/release/ha-guard) once
# its view holds them; then one Deployment CREATE per replica count (a kubernetes.io/hostname
# DoNotSchedule spread, a 10m CPU request) posted to /validate with curl, TIMES times each (the
# median and the worst of curl's time_total), and the same 3-replica Deployment posted while two
# of the largest are in flight. Loopback only; everything is stopped at the end.
#
#   cargo build --release && benches/replicas-table.sh
#   HA_GUARD_BIN=/tmp/ha-guard-before NODES=1000 REPLICAS="3 1000 10000" benches/replicas-table.sh
#
# Not a test: it prints a markdown table and judges nothing. A request curl gives up on after
# MAX_TIME seconds (120) is printed "> MAX_TIME s".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${HA_GUARD_BIN:-$here/target/release/ha-guard}"
nodes="${NODES:-1000}"
replicas="${REPLICAS:-3 1000 10000 100000 1000000 2147483647}"
times="${TIMES:-5}"
max_time="${MAX_TIME:-120}"
[[ -x "$bin" ]] || { echo "replicas-table.sh: no ha-guard binary at $bin (cargo build --release)" >&2; exit 2; }
work="$(mktemp -d /tmp/ha-guard-replicas-XXXXXX)"
cp_dir="$work/cp"
guard_pid=""
cleanup() {
  [[ -n "$guard_pid" ]] && kill "$guard_pid" 2>/dev/null || true
  "$here/tests/e2e/control-plane/stop.sh" "$cp_dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$here/tests/e2e/control-plane/start.sh" "$cp_dir" >/dev/null
export KUBECONFIG="$cp_dir/kubeconfig"
kubectl="$(command -v kubectl)"

# The nodes, in one create of a List, then the not-ready taint the apiserver adds removed (no
# kubelet runs to clear it).
python3 - "$nodes" > "$work/nodes.json" <<'EOF'
import json, sys
n = int(sys.argv[1])
items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i:05}",
          "labels": {"kubernetes.io/hostname": f"node-{i:05}"}}} for i in range(n)]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
EOF
"$kubectl" create -f "$work/nodes.json" >/dev/null
"$kubectl" get nodes -o name | xargs -P 8 -n 50 "$kubectl" taint nodes --overwrite node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true

"$bin" certs --out "$work/certs" --dns localhost --ip 127.0.0.1 >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
probe=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" serve --cluster live --listen "127.0.0.1:$port" --probe-listen "127.0.0.1:$probe" \
  --tls-cert "$work/certs/tls.crt" --tls-key "$work/certs/tls.key" --audit-interval 0 \
  > "$work/serve.log" 2>&1 &
guard_pid=$!
for _ in $(seq 1 300); do
  count=$(curl -s "http://127.0.0.1:$probe/metrics" | sed -n 's/^ha_guard_cache_objects{kind="Node"} //p')
  [[ "${count:-0}" -ge "$nodes" ]] && curl -sf "http://127.0.0.1:$probe/readyz" >/dev/null && break
  sleep 0.5
done

review() { # REPLICAS NAME: an AdmissionReview of a Deployment CREATE
  python3 - "$1" "$2" <<'EOF'
import json, sys
replicas, name = int(sys.argv[1]), sys.argv[2]
labels = {"app": name}
deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {"name": name, "namespace": "default"},
  "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
    "template": {"metadata": {"labels": labels}, "spec": {
      "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": labels}}],
      "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": "10m"}}}]}}}}
request = {"uid": "00000000-0000-4000-8000-000000000047", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
  "resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "name": name, "namespace": "default",
  "operation": "CREATE", "userInfo": {"username": "bench"}, "object": deployment, "dryRun": False}
print(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
EOF
}
post() { # FILE: seconds curl took, or "> MAX_TIME"
  local t
  t=$(curl -sk --max-time "$max_time" -o /dev/null -w '%{time_total}' -H 'content-type: application/json' \
    --data-binary "@$1" "https://127.0.0.1:$port/validate") || { echo "> $max_time"; return; }
  echo "$t"
}
stats() { # VALUES...: median / worst, in seconds
  python3 -c '
import sys
v = sys.argv[1:]
over = [x for x in v if x.startswith(">")]
n = sorted(float(x) for x in v if not x.startswith(">"))
if over: print(f"{over[0]} s (no answer)"); sys.exit()
print(f"{n[len(n)//2]:.3f} s / {n[-1]:.3f} s")' "$@"
}

echo "ha-guard: $("$bin" version 2>/dev/null | head -n 1); $nodes nodes; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| replicas in the Deployment | time to answer (median / worst of $times) |"
echo "|---:|---:|"
largest=""
for r in $replicas; do
  review "$r" "web" > "$work/review-$r.json"
  results=()
  for _ in $(seq 1 "$times"); do results+=("$(post "$work/review-$r.json")"); done
  echo "| $r | $(stats "${results[@]}") |"
  largest="$r"
done

# An ordinary 3-replica Deployment while two of the largest are in flight.
review 3 "ordinary" > "$work/ordinary.json"
results=()
for _ in $(seq 1 "$times"); do
  post "$work/review-$largest.json" >/dev/null & a=$!
  post "$work/review-$largest.json" >/dev/null & b=$!
  sleep 0.05
  results+=("$(post "$work/ordinary.json")")
  wait "$a" "$b"
done
echo
echo "3-replica Deployment with two of replicas $largest in flight: $(stats "${results[@]}")"

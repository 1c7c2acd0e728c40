#!/usr/bin/env bash
# smoke.sh: checks, by hand, that up.sh gives a control plane on which workloads behave: up.sh in
# a temporary directory, 3 kwok Nodes become Ready, a Deployment (3 replicas) is scheduled by
# kube-scheduler and its Pods become Running and Ready through kwok, the disruption controller
# fills in its PDB (minAvailable 2: disruptionsAllowed 1), `kubectl drain` of one Node evicts its
# Pod and the replacement becomes Ready on another Node. Then it shows what a PDB with neither
# minAvailable nor maxUnavailable does (status, eviction, drain). down.sh; prints timings and OK.
# The directory is removed on success and kept (with the logs) on failure, or always with KEEP=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "smoke.sh: $*" >&2; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/ha-guard-cp-smoke.XXXXXX")"
k() { kubectl --kubeconfig "$dir/kubeconfig" "$@"; }
ns=smoke
timings=()
ok=

down=
cleanup() {
  [[ -n "$down" ]] || "$here/down.sh" "$dir" || true
  if [[ -n "$ok" && -z "${KEEP:-}" ]]; then rm -rf "$dir"; else log "kept $dir (logs: $dir/*.log)"; fi
}
trap cleanup EXIT

# wait_for DESC TIMEOUT COMMAND...: polls COMMAND every 0.5 s until it succeeds.
wait_for() {
  local desc="$1" timeout="$2" deadline=$((SECONDS + $2))
  shift 2
  until "$@"; do
    (( SECONDS < deadline )) || { log "FAILED: $desc: not after ${timeout}s"; return 1; }
    sleep 0.5
  done
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# NAME NODE PHASE READY DELETING, one Pod a line.
pods() {
  k -n "$ns" get pods -l "$1" -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} {.status.conditions[?(@.type=="Ready")].status} {.metadata.deletionTimestamp}{"\n"}{end}'
}
# ready_pods SELECTOR N [NOT_ON_NODE]: exactly N Pods, all Running, Ready, not being deleted (and
# none on NOT_ON_NODE).
ready_pods() {
  local out
  out="$(pods "$1")"
  [[ "$(grep -c . <<< "$out")" -eq "$2" ]] &&
    [[ "$(awk -v bad="${3:-}" '$3 == "Running" && $4 == "True" && $5 == "" && $2 != bad' <<< "$out" | grep -c .)" -eq "$2" ]]
}
pdb_field() { k -n "$ns" get pdb "$1" -o jsonpath="{.status.$2}"; }
pdb_observed() { [[ "$(pdb_field "$1" observedGeneration)" == "$(k -n "$ns" get pdb "$1" -o jsonpath='{.metadata.generation}')" ]]; }

# --- up ---------------------------------------------------------------------
t=$(now)
"$here/up.sh" "$dir"
timings+=("up.sh: $(since "$t")s")

# --- Nodes ----------------------------------------------------------------------
# kwok manages the Nodes annotated kwok.x-k8s.io/node=fake (up.sh); it fills in their status.
t=$(now)
for i in 0 1 2; do
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    type: kwok
---
EOF
done | k apply -f - >/dev/null
k wait --for=condition=Ready node -l type=kwok --timeout=60s >/dev/null
timings+=("3 Nodes Ready: $(since "$t")s")
k get nodes -o wide >&2

# --- Deployment + PDB minAvailable 2 ------------------------------------------
t=$(now)
k create namespace "$ns" >/dev/null
k -n "$ns" apply -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: registry.invalid/never-pulled:1   # kwok runs nothing
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
spec:
  minAvailable: 2
  selector:
    matchLabels: {app: web}
EOF
wait_for "3 web Pods Running and Ready" 60 ready_pods app=web 3
timings+=("Deployment of 3 Running+Ready: $(since "$t")s")
k -n "$ns" get pods -o wide >&2
# Bound by kube-scheduler (nobody else sets spec.nodeName here): one Scheduled event a Pod.
scheduled="$(k -n "$ns" get events --field-selector reason=Scheduled -o jsonpath='{range .items[*]}{.reportingComponent}{"\n"}{end}' | grep -c default-scheduler || true)"
[[ "$scheduled" -ge 3 ]] || { log "FAILED: $scheduled Scheduled events from default-scheduler, want 3"; exit 1; }
log "Scheduled events from default-scheduler: $scheduled"

wait_for "PDB web: disruptionsAllowed 1" 30 eval '[[ "$(pdb_field web disruptionsAllowed)" == 1 ]]'
k -n "$ns" get pdb web -o jsonpath='PDB web status: {.status}{"\n"}' >&2
timings+=("PDB web disruptionsAllowed=1: $(since "$t")s after the Deployment")

# --- drain one Node that runs a web Pod --------------------------------------------
node="$(pods app=web | awk 'NR == 1 { print $2 }')"
victim="$(pods app=web | awk 'NR == 1 { print $1 }')"
log "draining $node (runs $victim)"
t=$(now)
k drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout=60s >&2
timings+=("kubectl drain $node: $(since "$t")s")
wait_for "3 web Pods Ready, none on $node" 60 ready_pods app=web 3 "$node"
timings+=("drain + replacement Ready: $(since "$t")s")
# (grep on a here-string: `pods | grep -q` fails under pipefail when grep exits before kubectl.)
! grep -q "^$victim " <<< "$(pods app=web)" || { log "FAILED: $victim still exists"; exit 1; }
k -n "$ns" get pods -o wide >&2
k uncordon "$node" >/dev/null

# --- a PDB with neither minAvailable nor maxUnavailable --------------------------
# What the disruption controller and the eviction API make of it; printed, not asserted, except
# that the Pod survives.
log "--- PDB with only a selector (no minAvailable, no maxUnavailable)"
k -n "$ns" apply -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nobudget
spec:
  replicas: 2
  selector:
    matchLabels: {app: nobudget}
  template:
    metadata:
      labels: {app: nobudget}
    spec:
      containers:
      - name: app
        image: registry.invalid/never-pulled:1
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: nobudget
spec:
  selector:
    matchLabels: {app: nobudget}
EOF
wait_for "2 nobudget Pods Ready" 60 ready_pods app=nobudget 2
wait_for "PDB nobudget observed" 30 pdb_observed nobudget
k -n "$ns" get pdb nobudget -o jsonpath='PDB nobudget spec: {.spec}{"\n"}PDB nobudget status: {.status}{"\n"}' >&2
empty_allowed="$(pdb_field nobudget disruptionsAllowed)"
empty_expected="$(pdb_field nobudget expectedPods)"
victim2="$(pods app=nobudget | awk 'NR == 1 { print $1 }')"
node2="$(pods app=nobudget | awk 'NR == 1 { print $2 }')"

# The eviction API directly, as the admin: HTTP status and message.
server="$(sed -n 's/^ *server: *//p' "$dir/kubeconfig" | head -n 1)"
eviction="$(curl -s --cacert "$dir/certs/ca.crt" --cert "$dir/certs/admin.crt" --key "$dir/certs/admin.key" \
  -H 'Content-Type: application/json' -w '\nHTTP %{http_code}' -X POST \
  -d "{\"apiVersion\":\"policy/v1\",\"kind\":\"Eviction\",\"metadata\":{\"name\":\"$victim2\",\"namespace\":\"$ns\"}}" \
  "$server/api/v1/namespaces/$ns/pods/$victim2/eviction")"
eviction_code="${eviction##*HTTP }"
eviction_msg="$(sed -n 's/.*"message": *"\([^"]*\)".*/\1/p' <<< "$eviction" | head -n 1)"
log "eviction of $victim2: HTTP $eviction_code: $eviction_msg"

# kubectl drain of its Node, only that Pod (--pod-selector), 15 s.
t=$(now)
set +e
drain_out="$(k drain "$node2" --pod-selector app=nobudget --ignore-daemonsets --delete-emptydir-data --timeout=15s 2>&1)"
drain_rc=$?
set -e
k uncordon "$node2" >/dev/null
log "kubectl drain $node2 --pod-selector app=nobudget --timeout=15s: exit $drain_rc after $(since "$t")s; its output:"
awk '!seen[$0]++ { print "    " $0 }' <<< "$drain_out" >&2   # the retries repeat lines
grep -q "^$victim2 [^ ]* Running True $" <<< "$(pods app=nobudget)" || { log "FAILED: $victim2 did not survive"; exit 1; }
log "$victim2 still Running and Ready"

# --- down -------------------------------------------------------------------------
t=$(now)
"$here/down.sh" "$dir"
down=1
timings+=("down.sh: $(since "$t")s")
for f in etcd apiserver controller-manager scheduler kwok; do
  [[ ! -e "$dir/$f.pid" ]] || { log "FAILED: $dir/$f.pid left"; exit 1; }
done

ok=1
echo "timings:"
printf '  %s\n' "${timings[@]}"
echo "PDB without minAvailable/maxUnavailable: disruptionsAllowed=${empty_allowed:-<unset>} expectedPods=${empty_expected:-<unset>};" \
  "eviction: HTTP $eviction_code ($eviction_msg); drain: exit $drain_rc"
echo OK

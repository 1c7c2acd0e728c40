#!/usr/bin/env bash
# up.sh DIR: a whole control plane without kubelets, on loopback, state and logs under DIR:
# etcd + kube-apiserver (start.sh DIR), then kube-controller-manager, kube-scheduler and kwok,
# which stands in for the kubelets of the Nodes it manages (those annotated
# kwok.x-k8s.io/node=fake): they stay Ready, Pods bound to them become Running and Ready, Pods
# being deleted (evicted) go away. Writes DIR/kubeconfig (admin), DIR/<name>.pid, DIR/<name>.log
# and DIR/<name>.args (the command line, NUL-separated) for etcd, apiserver,
# controller-manager, scheduler and kwok, waits until all are ready and leaves them running.
# Stop everything with down.sh DIR (or stop.sh DIR, the same).
#
# Binaries: from build.sh --all, unless KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER and
# KWOK (paths) are all set.
# More flags, one a line: KUBE_APISERVER_EXTRA_FLAGS (as start.sh), KUBE_CONTROLLER_MANAGER_EXTRA_FLAGS,
# KUBE_SCHEDULER_EXTRA_FLAGS, KWOK_EXTRA_FLAGS; they come after ours, so they can override them.
# START_TIMEOUT (60 s) bounds each wait.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$1"
dir="$(cd "$1" && pwd)"
log() { echo "up.sh: $*" >&2; }
running() { [[ -s "$1" && "$(ps -o stat= -p "$(cat "$1")" 2>/dev/null)" =~ ^[^Z] ]]; }
t0=$SECONDS
components=(etcd apiserver controller-manager scheduler kwok)

# --- binaries -------------------------------------------------------------
if [[ -z "${KUBE_APISERVER:-}" || -z "${KUBE_CONTROLLER_MANAGER:-}" || -z "${KUBE_SCHEDULER:-}" || -z "${KWOK:-}" ]]; then
  while IFS='=' read -r name path; do
    case "$name" in
      kube-apiserver) KUBE_APISERVER="${KUBE_APISERVER:-$path}" ;;
      kube-controller-manager) KUBE_CONTROLLER_MANAGER="${KUBE_CONTROLLER_MANAGER:-$path}" ;;
      kube-scheduler) KUBE_SCHEDULER="${KUBE_SCHEDULER:-$path}" ;;
      kwok) KWOK="${KWOK:-$path}" ;;
    esac
  done < <("$here/build.sh" --all)
fi
for v in KUBE_APISERVER KUBE_CONTROLLER_MANAGER KUBE_SCHEDULER KWOK; do
  [[ -x "${!v:-}" ]] || { log "$v: no binary at '${!v:-}' (not in build.sh --all's output?)"; exit 1; }
done
for f in "${components[@]}"; do
  ! running "$dir/$f.pid" || { log "$f already running in $dir; run down.sh first"; exit 1; }
done

# --- etcd + kube-apiserver ------------------------------------------------
# WatchList=false: kwok v0.8.0 (client-go v0.36) has its informers ask for a streamed initial
# list (sendInitialEvents). With WatchList on (the default) and etcd 3.4, which lacks
# RequestWatchProgress, the apiserver refuses that watch ("... the required storage feature
# RequestWatchProgress is disabled"), and kwok's informers retry it forever instead of falling
# back: they never sync (Leases fail with "already exists"). With it off, the apiserver answers
# plain list + watch, which every client falls back to.
KUBE_APISERVER_EXTRA_FLAGS="--feature-gates=WatchList=false
${KUBE_APISERVER_EXTRA_FLAGS:-}" KUBE_APISERVER="$KUBE_APISERVER" "$here/start.sh" "$dir"
t_apiserver=$((SECONDS - t0))

fail() {
  log "${1:-failed}; last lines of the logs:"
  for f in "${components[@]}"; do
    [[ -f "$dir/$f.log" ]] && { echo "--- $dir/$f.log" >&2; tail -n 30 "$dir/$f.log" >&2; }
  done
  "$here/down.sh" "$dir" || true
  exit 1
}
trap fail ERR
trap 'fail interrupted' INT TERM

server="$(sed -n 's/^ *server: *//p' "$dir/kubeconfig" | head -n 1)"   # https://127.0.0.1:PORT
certs="$dir/certs"

# --- client certificates and kubeconfigs ----------------------------------
# The apiserver's bootstrap RBAC policy binds ClusterRoles system:kube-controller-manager and
# system:kube-scheduler (and the Roles to read the authentication ConfigMap, to create
# TokenReviews/SubjectAccessReviews) to the users of those names: a client certificate with that
# CN, signed by the --client-ca-file start.sh made, is all they need.
(
  cd "$certs"
  ossl() { openssl "$@" 2>/dev/null; }
  printf 'extendedKeyUsage=clientAuth\n' > component-client.ext
  for c in controller-manager scheduler; do
    ossl req -newkey rsa:2048 -nodes -subj "/CN=system:kube-$c" -keyout "$c.key" -out "$c.csr"
    ossl x509 -req -in "$c.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -extfile component-client.ext -out "$c.crt"
  done
)
b64() { base64 -w0 < "$1"; }
for c in controller-manager scheduler; do
  cat > "$dir/$c.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ha-guard-e2e
  cluster:
    server: ${server}
    certificate-authority-data: $(b64 "$certs/ca.crt")
users:
- name: system:kube-$c
  user:
    client-certificate-data: $(b64 "$certs/$c.crt")
    client-key-data: $(b64 "$certs/$c.key")
contexts:
- name: ha-guard-e2e
  context: {cluster: ha-guard-e2e, user: system:kube-$c}
current-context: ha-guard-e2e
EOF
done

# Three distinct free loopback ports, chosen now (the kernel picks them).
read -r kcm_port sched_port kwok_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

# run NAME EXTRA_FLAGS_VAR ARGS...: starts ARGS (plus the extra flags, one a line) in the
# background, logging to DIR/NAME.log, pid in DIR/NAME.pid, command line in DIR/NAME.args.
run() {
  local name="$1" extra="$2" flag
  shift 2
  local args=("$@")
  while IFS= read -r flag; do
    if [[ -n "$flag" ]]; then args+=("$flag"); fi
  done <<< "${!extra:-}"
  printf '%s\0' "${args[@]}" > "$dir/$name.args"
  nohup "${args[@]}" </dev/null >"$dir/$name.log" 2>&1 &
  echo $! > "$dir/$name.pid"
}

# Who may use the HTTPS port of kube-controller-manager and kube-scheduler (/healthz, /readyz and
# /livez are open to all anyway): client certificates of our CA (the admin's), and tokens, checked
# with the apiserver (TokenReview, SubjectAccessReview) as their own user
# (--authentication-kubeconfig, --authorization-kubeconfig). --authentication-skip-lookup and
# --client-ca-file: otherwise they look the CAs up in the ConfigMap
# kube-system/extension-apiserver-authentication, which has no requestheader CA (the apiserver has
# no --requestheader-client-ca-file), and log an error about it again and again.

# --- kube-controller-manager ----------------------------------------------
# Controllers left out (names as `kube-controller-manager --help` lists them):
#  - endpoints, endpointslice, endpointslice-mirroring: they would publish the fake Pods'
#    addresses (127.1.x.y, which the apiserver refuses in Endpoints anyway) as Service backends;
#    nothing here routes Service traffic, and nothing should try to reach those addresses.
#  - node-ipam: would hand out Pod CIDRs (--allocate-node-cidrs is off anyway); kwok takes Pod
#    IPs from its own --cidr.
# (The cloud controllers, service-lb, node-route and cloud-node-lifecycle, are no longer in
# kube-controller-manager 1.37, and naming an unknown controller is an error.)
# Everything else runs with its defaults (deployment, replicaset, statefulset, daemonset, job,
# cronjob, disruption, garbage-collector, namespace, horizontal-pod-autoscaler (no metrics API: it
# only sets conditions), node-lifecycle, taint-eviction, pod-garbage-collector, serviceaccount,
# serviceaccount-token, resourcequota, volume controllers, ...).
# --use-service-account-credentials: each controller acts as its own ServiceAccount in
# kube-system (tokens from the TokenRequest API), with the RBAC roles a real cluster gives it, so
# what it sends the apiserver (and admission webhooks) carries the same user as in a kubeadm
# cluster. It costs ~5 s of start-up (~0.1 s without). --service-account-private-key-file and
# --root-ca-file: for the serviceaccount-token controller, as in a real cluster.
# No leader election: there is one of each, and it would only delay the start.
# --kube-api-qps/burst (both components): the defaults (20/30 for the controllers) pace a test
# that creates hundreds of pods at once to minutes; a real cluster's controllers are given more too.
run controller-manager KUBE_CONTROLLER_MANAGER_EXTRA_FLAGS "$KUBE_CONTROLLER_MANAGER" \
  --kubeconfig="$dir/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$dir/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$dir/controller-manager.kubeconfig" \
  --authentication-skip-lookup --client-ca-file="$certs/ca.crt" \
  --bind-address=127.0.0.1 --secure-port="$kcm_port" \
  --leader-elect=false \
  --kube-api-qps=200 --kube-api-burst=400 \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$certs/sa.key" \
  --root-ca-file="$certs/ca.crt" \
  --controllers='*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller,-node-ipam-controller'

# --- kube-scheduler -------------------------------------------------------
run scheduler KUBE_SCHEDULER_EXTRA_FLAGS "$KUBE_SCHEDULER" \
  --kubeconfig="$dir/scheduler.kubeconfig" \
  --authentication-kubeconfig="$dir/scheduler.kubeconfig" \
  --authorization-kubeconfig="$dir/scheduler.kubeconfig" \
  --authentication-skip-lookup --client-ca-file="$certs/ca.crt" \
  --bind-address=127.0.0.1 --secure-port="$sched_port" \
  --kube-api-qps=200 --kube-api-burst=400 \
  --leader-elect=false

# --- kwok -----------------------------------------------------------------
# Manages the Nodes annotated kwok.x-k8s.io/node=fake (kwok's own convention; a Node without it
# stays as created, e.g. to play a dead kubelet) and the Pods bound to them, through the Stages in
# kwok-stages.yaml. Node InternalIP 127.0.0.2 and Pod IPs from 127.1.0.0/16: were anything to try
# to reach a fake Node or Pod, it stays on this host's loopback (kwok's default Pod CIDR,
# 10.0.0.0/24, is also our Service CIDR). Its Lease (40 s, renewed every 10 s) keeps a Node Ready
# for node-lifecycle. Its server (healthz, and kubelet-like endpoints) only on 127.0.0.1.
# KWOK_WORKDIR: kwok would otherwise also read ~/.kwok/kwok.yaml if there is one.
mkdir -p "$dir/kwok"
run kwok KWOK_EXTRA_FLAGS env KWOK_WORKDIR="$dir/kwok" "$KWOK" \
  --kubeconfig="$dir/kubeconfig" \
  --config="$here/kwok-stages.yaml" \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-ip=127.0.0.2 \
  --cidr=127.1.0.0/16 \
  --node-lease-duration-seconds=40 \
  --server-address="127.0.0.1:${kwok_port}"
log "kube-controller-manager pid $(cat "$dir/controller-manager.pid") on https://127.0.0.1:${kcm_port};" \
  "kube-scheduler pid $(cat "$dir/scheduler.pid") on https://127.0.0.1:${sched_port};" \
  "kwok pid $(cat "$dir/kwok.pid") on http://127.0.0.1:${kwok_port}"

# --- wait for readiness ---------------------------------------------------
# healthz of each (always allowed, no credentials needed), then the ServiceAccount "default" in
# namespace default: the serviceaccount controller made it, so the controllers run and their
# ServiceAccount credentials work.
ok() { [[ "$(curl -sk --max-time 2 "$1" 2>/dev/null)" == ok ]]; }
deadline=$((SECONDS + ${START_TIMEOUT:-60}))
until ok "https://127.0.0.1:${kcm_port}/healthz" && ok "https://127.0.0.1:${sched_port}/healthz" \
  && ok "http://127.0.0.1:${kwok_port}/healthz" \
  && kubectl --kubeconfig "$dir/kubeconfig" -n default get serviceaccount default >/dev/null 2>&1; do
  for f in "${components[@]}"; do running "$dir/$f.pid" || fail "$f exited"; done
  (( SECONDS < deadline )) || fail "not ready after ${START_TIMEOUT:-60}s"
  sleep 0.5
done
trap - ERR INT TERM
log "ready in $((SECONDS - t0))s (etcd + apiserver: ${t_apiserver}s): kubectl --kubeconfig $dir/kubeconfig"

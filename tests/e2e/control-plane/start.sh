#!/usr/bin/env bash
# start.sh DIR: starts etcd and kube-apiserver on loopback, with free ports,
# state and logs under DIR, as controller-runtime's envtest does. Writes
# DIR/kubeconfig (admin, group system:masters), DIR/{etcd,apiserver}.pid and
# DIR/{etcd,apiserver}.log, waits for /readyz and leaves both running.
# Stop them with stop.sh DIR.
# KUBE_APISERVER=/path/to/kube-apiserver skips the call to build.sh.
# KUBE_APISERVER_EXTRA_FLAGS: more kube-apiserver flags, one a line (spaces in a value are kept),
# e.g. --admission-control-config-file=/path/admission.yaml; none by default.
# The apiserver's full command line is recorded in DIR/apiserver.args (NUL-separated), so that
# apiserver.sh can stop it and start it again the same way (same port, certificates and etcd).
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$1"
dir="$(cd "$1" && pwd)"
log() { echo "start.sh: $*" >&2; }
running() { [[ -s "$1" && "$(ps -o stat= -p "$(cat "$1")" 2>/dev/null)" =~ ^[^Z] ]]; }

apiserver="${KUBE_APISERVER:-$("$here/build.sh" | tail -n 1)}"
[[ -x "$apiserver" ]] || { log "no kube-apiserver at '$apiserver'"; exit 1; }
command -v etcd >/dev/null || { log "etcd not on PATH (run build.sh)"; exit 1; }
for f in etcd apiserver; do
  ! running "$dir/$f.pid" || { log "$f already running in $dir; run stop.sh first"; exit 1; }
done

# Three distinct free loopback ports, chosen now (the kernel picks them).
read -r etcd_port peer_port api_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

# --- certificates and keys (openssl) ------------------------------------
certs="$dir/certs"
rm -rf "$certs" "$dir/etcd-data"
mkdir -p "$certs"
(
  cd "$certs"
  ossl() { openssl "$@" 2>/dev/null; }
  ossl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=ha-guard-e2e-ca" \
    -keyout ca.key -out ca.crt
  # Serving certificate: kube-apiserver picks apiserver.{crt,key} from --cert-dir.
  ossl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' > server.ext
  ossl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile server.ext -out apiserver.crt
  # Admin client certificate: user ha-guard-admin in group system:masters.
  ossl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=ha-guard-admin" -keyout admin.key -out admin.csr
  printf 'extendedKeyUsage=clientAuth\n' > client.ext
  ossl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile client.ext -out admin.crt
  # Service account token signing key (the private key also serves to verify).
  ossl genrsa -out sa.key 2048
)

b64() { base64 -w0 < "$1"; }
cat > "$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ha-guard-e2e
  cluster:
    server: https://127.0.0.1:${api_port}
    certificate-authority-data: $(b64 "$certs/ca.crt")
users:
- name: ha-guard-admin
  user:
    client-certificate-data: $(b64 "$certs/admin.crt")
    client-key-data: $(b64 "$certs/admin.key")
contexts:
- name: ha-guard-e2e
  context: {cluster: ha-guard-e2e, user: ha-guard-admin}
current-context: ha-guard-e2e
EOF

# --- processes ------------------------------------------------------------
fail() {
  log "${1:-failed}; last lines of the logs:"
  for f in etcd apiserver; do
    [[ -f "$dir/$f.log" ]] && { echo "--- $dir/$f.log" >&2; tail -n 30 "$dir/$f.log" >&2; }
  done
  "$here/stop.sh" "$dir" || true
  exit 1
}
trap fail ERR

etcd_url="http://127.0.0.1:${etcd_port}"
peer_url="http://127.0.0.1:${peer_port}"
nohup etcd --name ha-guard-e2e --data-dir "$dir/etcd-data" --logger zap --log-outputs stderr \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls "$peer_url" --initial-advertise-peer-urls "$peer_url" \
  --initial-cluster "ha-guard-e2e=$peer_url" \
  </dev/null >"$dir/etcd.log" 2>&1 &
echo $! > "$dir/etcd.pid"

apiserver_args=(
  "$apiserver"
  --etcd-servers="$etcd_url"
  --bind-address=127.0.0.1 --secure-port="$api_port" --cert-dir="$certs"
  --client-ca-file="$certs/ca.crt"
  --authorization-mode=RBAC
  --service-cluster-ip-range=10.0.0.0/24
  --service-account-issuer="https://127.0.0.1:${api_port}/"
  --service-account-key-file="$certs/sa.key"
  --service-account-signing-key-file="$certs/sa.key"
  --allow-privileged=true
  --disable-admission-plugins=ServiceAccount
)
while IFS= read -r flag; do
  if [[ -n "$flag" ]]; then apiserver_args+=("$flag"); fi
done <<< "${KUBE_APISERVER_EXTRA_FLAGS:-}"
printf '%s\0' "${apiserver_args[@]}" > "$dir/apiserver.args"
nohup "${apiserver_args[@]}" </dev/null >"$dir/apiserver.log" 2>&1 &
echo $! > "$dir/apiserver.pid"
log "etcd pid $(cat "$dir/etcd.pid") on $etcd_url; kube-apiserver pid $(cat "$dir/apiserver.pid") on https://127.0.0.1:${api_port}"

# --- wait for readiness ---------------------------------------------------
deadline=$((SECONDS + ${START_TIMEOUT:-60}))
until [[ "$(kubectl --kubeconfig "$dir/kubeconfig" get --raw /readyz 2>/dev/null)" == ok ]]; do
  for f in etcd apiserver; do running "$dir/$f.pid" || fail "$f exited"; done
  (( SECONDS < deadline )) || fail "not ready after ${START_TIMEOUT:-60}s"
  sleep 1
done
trap - ERR
log "ready: kubectl --kubeconfig $dir/kubeconfig"

#!/usr/bin/env bash
# apiserver.sh stop|start DIR: stops, or starts again, only the kube-apiserver of start.sh DIR;
# etcd keeps running. `start` runs the command line start.sh recorded in DIR/apiserver.args: the
# same port, certificates, flags and etcd, so clients (the kubeconfig, ha-guard's watches)
# reconnect to the same address and find the same data, as after an apiserver restart in a real
# cluster. It appends to DIR/apiserver.log, writes DIR/apiserver.pid and waits for /readyz (60 s,
# START_TIMEOUT to change). `stop` sends SIGTERM and waits until it is gone; after STOP_TIMEOUT
# seconds (default 20) it sends SIGKILL: a terminating kube-apiserver stops listening at once but
# keeps serving the watches it has open for a while.
set -euo pipefail

[[ $# -eq 2 && ( $1 == stop || $1 == start ) ]] || { echo "usage: $0 stop|start DIR" >&2; exit 2; }
what="$1"
dir="$(cd "$2" && pwd)"
log() { echo "apiserver.sh: $*" >&2; }
# Alive and not a zombie (a zombie only waits for its parent to reap it).
running() { [[ "$(ps -o stat= -p "$1" 2>/dev/null)" =~ ^[^Z] ]]; }
# Guard against a recycled pid: our processes have DIR in their arguments.
ours() { running "$1" && tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$dir"; }
pidfile="$dir/apiserver.pid"

stop() {
  [[ -s "$pidfile" ]] || { log "no $pidfile: not running"; return 0; }
  local pid
  pid="$(cat "$pidfile")"
  if ours "$pid"; then
    log "stopping kube-apiserver (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((${STOP_TIMEOUT:-20} * 5))); do running "$pid" || break; sleep 0.2; done
    if running "$pid"; then
      log "kube-apiserver still running after ${STOP_TIMEOUT:-20}s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 25); do running "$pid" || break; sleep 0.2; done
    fi
    running "$pid" && { log "kube-apiserver (pid $pid) did not exit"; exit 1; }
  fi
  rm -f "$pidfile"
  log "stopped"
}

start() {
  [[ -s "$dir/apiserver.args" ]] || { log "no $dir/apiserver.args: start the control plane with start.sh first"; exit 1; }
  if [[ -s "$pidfile" ]] && ours "$(cat "$pidfile")"; then log "kube-apiserver already running in $dir"; exit 1; fi
  [[ -s "$dir/etcd.pid" ]] && ours "$(cat "$dir/etcd.pid")" || { log "etcd is not running in $dir"; exit 1; }
  local args
  mapfile -d '' args < "$dir/apiserver.args"
  echo "--- apiserver.sh start $(date -u +%FT%TZ)" >> "$dir/apiserver.log"
  nohup "${args[@]}" </dev/null >>"$dir/apiserver.log" 2>&1 &
  local pid=$!
  echo "$pid" > "$pidfile"
  log "kube-apiserver pid $pid (same command line as before)"
  local deadline=$((SECONDS + ${START_TIMEOUT:-60}))
  until [[ "$(kubectl --kubeconfig "$dir/kubeconfig" get --raw /readyz 2>/dev/null)" == ok ]]; do
    if ! running "$pid"; then
      log "kube-apiserver exited; last lines of its log:"; tail -n 30 "$dir/apiserver.log" >&2; exit 1
    fi
    if (( SECONDS >= deadline )); then
      log "not ready after ${START_TIMEOUT:-60}s; last lines of its log:"; tail -n 30 "$dir/apiserver.log" >&2
      stop; exit 1
    fi
    sleep 0.5
  done
  log "ready"
}

"$what"

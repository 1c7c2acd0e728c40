#!/usr/bin/env bash
# stop.sh DIR: stops what start.sh DIR or up.sh DIR started (by their pid files; those not
# started are skipped) and waits until each has exited: kwok, kube-scheduler and
# kube-controller-manager first (clients of the apiserver), then kube-apiserver, then etcd.
# down.sh DIR is the same.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
dir="$(cd "$1" && pwd)"
log() { echo "stop.sh: $*" >&2; }
# Alive and not a zombie (a zombie only waits for its parent to reap it).
running() { [[ "$(ps -o stat= -p "$1" 2>/dev/null)" =~ ^[^Z] ]]; }

# apiserver after its clients (they would only log errors until stopped), before etcd: it needs
# etcd to shut down cleanly.
for f in kwok scheduler controller-manager apiserver etcd; do
  pidfile="$dir/$f.pid"
  [[ -s "$pidfile" ]] || continue
  pid="$(cat "$pidfile")"
  # Guard against a recycled pid: our processes have DIR in their arguments.
  if running "$pid" && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$dir"; then
    log "stopping $f (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do running "$pid" || break; sleep 0.2; done
    if running "$pid"; then
      log "$f still running after 20s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 25); do running "$pid" || break; sleep 0.2; done
    fi
    running "$pid" && { log "$f (pid $pid) did not exit"; exit 1; }
  fi
  rm -f "$pidfile"
done
log "stopped"

#!/usr/bin/env bash
# down.sh DIR: stops everything up.sh DIR started: kwok, kube-scheduler, kube-controller-manager,
# kube-apiserver, etcd, in that order, each by its pid file (SIGTERM, SIGKILL after 20 s), checking
# that the pid is still ours (DIR in its command line), and waits until all are gone. It is
# stop.sh, which does the same for whatever of those is running (start.sh starts only the last two).
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
exec "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/stop.sh" "$1"

#!/usr/bin/env bash
# build.sh [--all]: builds kube-apiserver (version pinned in go.mod) into a cache outside the
# repository and makes sure an etcd binary is on PATH.
# Prints the path of the kube-apiserver binary on its last stdout line.
# --all also builds kube-controller-manager and kube-scheduler (same k8s.io/kubernetes version,
# cmd/<component>/main.go) and kwok (sigs.k8s.io/kwok, `go install`ed at $kwok_version with its own
# go.mod), and prints one `name=path` line per binary (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok) before that last line. Whatever is already
# built is not built again: a call with everything cached takes well under a second.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { echo "build.sh: $*" >&2; }

all=
case "${1:-}" in
  "") ;;
  --all) all=1 ;;
  *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac
# Not in go.mod: kwok depends on other k8s.io versions than the replaces there force; `go install
# pkg@version` builds it with its own go.mod, as its README says.
kwok_version=v0.8.0

# One build at a time per cache: two test binaries (or two engineers) calling this on a fresh
# machine would otherwise both run apt and both write "$out.tmp". The second waits, then finds
# the binary built.
cache="${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}"
mkdir -p "$cache"
exec 9>"$cache/build.lock"
if ! flock -n 9; then
  log "another build.sh holds $cache/build.lock; waiting for it"
  flock 9
fi

# --- etcd ---------------------------------------------------------------
if ! command -v etcd >/dev/null 2>&1; then
  if [[ -n "${HA_GUARD_NO_APT:-}" ]]; then
    log "etcd is not on PATH and HA_GUARD_NO_APT is set: install etcd (Debian: etcd-server) yourself"
    exit 1
  fi
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
  log "etcd is not on PATH: installing Debian's etcd-server: ${SUDO:+sudo }apt-get install -y etcd-server (set HA_GUARD_NO_APT=1 to refuse)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -q etcd-server >&2 || {
    log "retrying after ${SUDO:+sudo }apt-get update"
    $SUDO apt-get update >&2 && $SUDO apt-get install -y -q etcd-server >&2; }
  # The package enables a systemd unit; we only want the binary.
  if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    log "stopping the etcd service the package started: ${SUDO:+sudo }systemctl disable --now etcd"
    $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
fi
log "etcd: $(command -v etcd) ($(etcd --version 2>/dev/null | head -1))"

# --- kube-apiserver, kube-controller-manager, kube-scheduler ------------
version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"   # e.g. v1.37.2
ldflags=

# build_k8s NAME PACKAGE: builds cmd PACKAGE of this module into $cache/NAME-$version/NAME unless
# it is there; prints its path.
build_k8s() {
  local name="$1" pkg="$2"
  local out="$cache/${name}-${version}/${name}"
  if [[ -x "$out" ]]; then
    log "${name} ${version} already built"
  else
    log "building ${name} ${version} into ${out} (takes a long while the first time)"
    [[ -n "$ldflags" ]] || version_ldflags
    mkdir -p "$(dirname "$out")"
    local start=$SECONDS
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg"
    mv "$out.tmp" "$out"
    log "built in $((SECONDS - start))s: $("$out" --version)"
  fi
  echo "$out"
}

# The version stamps a release build has (`kube-apiserver --version`, the apiserver's /version,
# the client-go user agent), from the module's own metadata.
version_ldflags() {
  local major minor info commit build_date pkg
  major="${version#v}"; major="${major%%.*}"
  minor="${version#v*.}"; minor="${minor%%.*}"
  info="$(go mod download -json k8s.io/kubernetes | sed -n 's/.*"Info": "\(.*\)".*/\1/p')"
  commit="$(sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p' "$info")"
  build_date="$(go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${major}"
    ldflags+=" -X ${pkg}.gitMinor=${minor} -X ${pkg}.buildDate=${build_date}"
    [[ -n "$commit" ]] && ldflags+=" -X ${pkg}.gitCommit=${commit} -X ${pkg}.gitTreeState=clean"
  done
}

apiserver="$(build_k8s kube-apiserver .)"

if [[ -n "$all" ]]; then
  controller_manager="$(build_k8s kube-controller-manager ./cmd/kube-controller-manager)"
  scheduler="$(build_k8s kube-scheduler ./cmd/kube-scheduler)"

  # --- kwok ---------------------------------------------------------------
  kwok="$cache/kwok-${kwok_version}/kwok"
  if [[ -x "$kwok" ]]; then
    log "kwok ${kwok_version} already built"
  else
    log "building kwok ${kwok_version} into ${kwok}"
    start=$SECONDS
    rm -rf "$kwok.tmp" && mkdir -p "$kwok.tmp"
    # From outside this module: `go install pkg@version` uses kwok's own go.mod and go.sum.
    (cd "$kwok.tmp" && GOBIN="$kwok.tmp" CGO_ENABLED=0 \
      go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${kwok_version}")
    mv "$kwok.tmp/kwok" "$kwok"
    rmdir "$kwok.tmp"
    log "built in $((SECONDS - start))s: $("$kwok" --version)"
  fi

  echo "etcd=$(command -v etcd)"
  echo "kube-apiserver=$apiserver"
  echo "kube-controller-manager=$controller_manager"
  echo "kube-scheduler=$scheduler"
  echo "kwok=$kwok"
fi

echo "$apiserver"

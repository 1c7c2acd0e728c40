#!/usr/bin/env bash
# Builds kube-apiserver (version pinned in go.mod) into a cache outside the
# repository and makes sure an etcd binary is on PATH.
# Prints the path of the kube-apiserver binary on its last stdout line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { echo "build.sh: $*" >&2; }

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

# --- kube-apiserver -----------------------------------------------------
version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"   # e.g. v1.34.12
out="$cache/kube-apiserver-${version}/kube-apiserver"

if [[ -x "$out" ]]; then
  log "kube-apiserver ${version} already built"
else
  log "building kube-apiserver ${version} into ${out} (takes a long while the first time)"
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
  mkdir -p "$(dirname "$out")"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.tmp" .
  mv "$out.tmp" "$out"
  log "built: $("$out" --version)"
fi

echo "$out"

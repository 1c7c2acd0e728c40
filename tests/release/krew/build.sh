#!/usr/bin/env bash
# Builds krew and validate-krew-manifest (versions pinned in go.mod, from the sigs.k8s.io/krew Go
# module) into a cache outside the repository, once. Prints the directory holding both binaries on
# its last stdout line. tests/release/verify.sh uses them to validate the release's plugin manifest
# and to install the plugin from its archive; .ci/run calls this first, outside the test timing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { echo "krew/build.sh: $*" >&2; }

version="$(go list -m -f '{{.Version}}' sigs.k8s.io/krew)"   # e.g. v0.4.3
cache="${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}"
out="$cache/krew-${version}"

if [[ -x "$out/krew" && -x "$out/validate-krew-manifest" ]]; then
  log "krew ${version} already built"
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/krew-build.lock"
if ! flock -n 9; then
  log "another krew build holds $cache/krew-build.lock; waiting for it"
  flock 9
fi

if [[ -x "$out/krew" && -x "$out/validate-krew-manifest" ]]; then
  log "krew ${version} already built"
else
  log "building krew ${version} into ${out}"
  started=$(date +%s)
  mkdir -p "$out"
  for cmd in krew validate-krew-manifest; do
    CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "-s -w -X sigs.k8s.io/krew/internal/version.gitTag=${version}" \
      -o "$out/$cmd.tmp" "sigs.k8s.io/krew/cmd/$cmd"
    mv "$out/$cmd.tmp" "$out/$cmd"
  done
  log "built in $(( $(date +%s) - started )) s"
fi

echo "$out"

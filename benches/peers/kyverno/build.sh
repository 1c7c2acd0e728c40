#!/usr/bin/env bash
# Builds the Kyverno admission controller (`cmd/kyverno` of the github.com/kyverno/kyverno Go
# module, version below) into a cache outside the repository, once, with its CRDs beside it
# (`crds/`, from the module's config/crds). Prints the path of the binary on its last stdout line.
# Used by `cargo bench --bench apiserver -- --modes ...,kyverno` (benches/apiserver.rs).
#
# The module has `replace` lines in its go.mod, so it cannot be built with `go build module@v`
# from elsewhere: it is downloaded, copied somewhere writable and built inside. 10+ minutes on two
# busy cores the first time.
set -euo pipefail

log() { echo "kyverno/build.sh: $*" >&2; }

# The version other peer benchmarks of this project use too (the Kyverno CLI); keep them equal.
version="${KYVERNO_VERSION:-v1.19.1}"
cache="${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}/peers"
dir="$cache/kyverno-${version}"
out="$dir/kyverno"

# Built when the binary and the CRDs are both there (both are moved into place whole).
if [[ -x "$out" && -d "$dir/crds" ]]; then
  log "kyverno ${version} already built"
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/kyverno-build.lock"
if ! flock -n 9; then
  log "another kyverno build holds $cache/kyverno-build.lock; waiting for it"
  flock 9
fi

if [[ -x "$out" && -d "$dir/crds" ]]; then
  log "kyverno ${version} already built"
else
  log "building kyverno ${version} (cmd/kyverno) into ${out}"
  started=$(date +%s)
  module="$(go mod download -json "github.com/kyverno/kyverno@${version}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [[ -d "$module" ]] || { log "go mod download gave no module directory"; exit 1; }
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  cp -r "$module" "$work/src"
  chmod -R u+w "$work/src"
  mkdir -p "$dir"
  (cd "$work/src" && CGO_ENABLED=0 go build -buildvcs=false -trimpath \
    -ldflags "-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion=${version}" \
    -o "$out.tmp" ./cmd/kyverno)
  mv "$out.tmp" "$out"
  rm -rf "$dir/crds.tmp"
  cp -r "$work/src/config/crds" "$dir/crds.tmp"
  chmod -R u+w "$dir/crds.tmp"
  mv "$dir/crds.tmp" "$dir/crds"
  log "built in $(( $(date +%s) - started )) s"
fi

echo "$out"

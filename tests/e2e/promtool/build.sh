#!/usr/bin/env bash
# Builds promtool (version pinned in go.mod, from the github.com/prometheus/prometheus Go module)
# into a cache outside the repository, once. Prints the path of the promtool binary on its last
# stdout line. A no-op (well under a second) once built.
#
# The module's versions are v0.3MM.P for Prometheus v3.MM.P: the -X flags of Prometheus' release
# build (.promu.yml) stamp v3.MM.P and the commit, so `promtool --version` names the rule engine
# the chart's alerts were tested with.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { echo "promtool/build.sh: $*" >&2; }

module=github.com/prometheus/prometheus
version="$(go list -m -f '{{.Version}}' "$module")"   # e.g. v0.316.0
cache="${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}"
out="$cache/promtool-${version}/promtool"

# Fast path without the lock: the binary is only ever moved into place whole.
if [[ -x "$out" ]]; then
  log "promtool ${version} already built"
  echo "$out"
  exit 0
fi

# One build at a time per cache: the alert tests run in parallel and each calls this script.
# The others wait, then find the binary built.
mkdir -p "$cache"
exec 9>"$cache/promtool-build.lock"
if ! flock -n 9; then
  log "another promtool build holds $cache/promtool-build.lock; waiting for it"
  flock 9
fi

if [[ -x "$out" ]]; then
  log "promtool ${version} already built"
else
  log "building promtool ${version} into ${out} (a few minutes the first time)"
  started=$(date +%s)
  # v0.316.0 -> 3.16.0 (v0.305.1 -> 3.5.1); a pre-release keeps its suffix.
  rest="${version#v0.3}"
  release="3.$((10#${rest%%.*})).${rest#*.}"
  info="$(go mod download -json "$module" | sed -n 's/.*"Info": "\(.*\)".*/\1/p')"
  commit="$(sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p' "$info")"
  ldflags="-w -s -X github.com/prometheus/common/version.Version=${release}"
  [[ -n "$commit" ]] && ldflags+=" -X github.com/prometheus/common/version.Revision=${commit}"
  mkdir -p "$(dirname "$out")"
  CGO_ENABLED=0 go build -buildvcs=false -trimpath -tags netgo -ldflags "$ldflags" -o "$out.tmp" "$module/cmd/promtool"
  mv "$out.tmp" "$out"
  log "built in $(( $(date +%s) - started )) s: $("$out" --version 2>&1 | head -1)"
fi

echo "$out"

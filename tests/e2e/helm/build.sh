#!/usr/bin/env bash
# Builds helm (version pinned in go.mod, from the helm.sh/helm/v3 Go module) into a cache outside
# the repository, once. Prints the path of the helm binary on its last stdout line.
#
# Same -ldflags as helm's release Makefile, so this helm reports its version and, what matters
# for the chart, has the same default `.Capabilities.KubeVersion` as a released helm (client-go's
# minor version, v1.37.0 for v3.22.0); without them `helm template` would assume v1.20.0.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { echo "helm/build.sh: $*" >&2; }

version="$(go list -m -f '{{.Version}}' helm.sh/helm/v3)"   # e.g. v3.22.0
cache="${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}"
out="$cache/helm-${version}/helm"

# Fast path without the lock: the binary is only ever moved into place whole.
if [[ -x "$out" ]]; then
  log "helm ${version} already built"
  echo "$out"
  exit 0
fi

# One build at a time per cache: the chart tests run in parallel and each calls this script.
# The others wait, then find the binary built.
mkdir -p "$cache"
exec 9>"$cache/helm-build.lock"
if ! flock -n 9; then
  log "another helm build holds $cache/helm-build.lock; waiting for it"
  flock 9
fi

if [[ -x "$out" ]]; then
  log "helm ${version} already built"
else
  log "building helm ${version} into ${out}"
  started=$(date +%s)
  info="$(go mod download -json helm.sh/helm/v3 | sed -n 's/.*"Info": "\(.*\)".*/\1/p')"
  commit="$(sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p' "$info")"
  # Helm's Makefile: major = client-go's major + 1, minor = client-go's minor (v0.37.0 -> 1.37).
  client_go="$(go list -m -f '{{.Version}}' k8s.io/client-go)"
  k8s_minor="${client_go#v*.}"; k8s_minor="${k8s_minor%%.*}"
  k8s_major="${client_go#v}"; k8s_major="$(( ${k8s_major%%.*} + 1 ))"
  ldflags="-w -s -X helm.sh/helm/v3/internal/version.version=${version}"
  [[ -n "$commit" ]] && ldflags+=" -X helm.sh/helm/v3/internal/version.gitCommit=${commit}"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X ${pkg}.k8sVersionMajor=${k8s_major} -X ${pkg}.k8sVersionMinor=${k8s_minor}"
  done
  mkdir -p "$(dirname "$out")"
  CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$out.tmp" helm.sh/helm/v3/cmd/helm
  mv "$out.tmp" "$out"
  log "built in $(( $(date +%s) - started )) s: $("$out" version --short)"
fi

echo "$out"

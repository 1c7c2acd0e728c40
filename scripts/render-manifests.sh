#!/usr/bin/env bash
# Renders manifests/ from the Helm chart, the one source of truth for ha-guard's install:
#   manifests/ha-guard.yaml               the chart's defaults (self-managed certificates)
#   manifests/cert-manager/ha-guard.yaml  the same with certificates.mode=certManager
# Both for release "ha-guard" in namespace "ha-guard", with the Namespace object (which `helm
# install` cannot create from the chart), without Helm hooks (they run only under `helm
# uninstall`), for Kubernetes 1.30 and later (webhook matchConditions).
#
# Usage: scripts/render-manifests.sh [OUT_DIR]   (default: manifests/ of this repository)
# HELM=/path/to/helm to use a given helm; by default the pinned one from tests/e2e/helm/build.sh.
# tests/it/chart.rs renders into a temporary folder and fails when the result differs from manifests/.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/manifests}"
helm="${HELM:-$("$root/tests/e2e/helm/build.sh" | tail -n 1)}"

# The arguments every rendering shares (repeated in each file's header).
common=(--namespace ha-guard --no-hooks --kube-version 1.30.0 --set namespace.create=true)

render() {
  local file="$1" title="$2"
  shift 2
  local args=("${common[@]}" "$@")
  mkdir -p "$(dirname "$out/$file")"
  {
    cat <<EOF
# ha-guard: $title.
# Rendered from charts/ha-guard by scripts/render-manifests.sh; do not edit: change the chart and
# run the script again (tests/it/chart.rs fails while this file and the chart differ). It is
#   helm template ha-guard charts/ha-guard ${args[*]}
# Kubernetes 1.30 or later; on 1.27 to 1.29 install the chart with helm instead.
#   Install:   kubectl apply --server-side -f manifests/$file
#   Uninstall: kubectl delete validatingwebhookconfiguration,mutatingwebhookconfiguration ha-guard
#              (the webhooks first), then kubectl delete -f manifests/$file --ignore-not-found
EOF
    (cd "$root" && "$helm" template ha-guard charts/ha-guard "${args[@]}")
  } >"$out/$file.tmp"
  mv "$out/$file.tmp" "$out/$file"
  echo "render-manifests.sh: wrote $out/$file" >&2
}

render ha-guard.yaml "certificates made, injected and renewed by ha-guard itself (the chart's defaults)"
render cert-manager/ha-guard.yaml "certificates issued and injected by cert-manager" \
  --set certificates.mode=certManager

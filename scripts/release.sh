#!/usr/bin/env bash
# Builds everything a release of ha-guard publishes into one folder, without a registry:
#
#   scripts/release.sh VERSION     -> target/dist/ha-guard-VERSION/ (path printed on stdout)
#
#   ha-guard-VERSION.oci.tar                   the multi-platform image (linux/amd64, linux/arm64)
#                                              with an SBOM artifact per platform (scripts/image.sh)
#   ha-guard-VERSION-linux-amd64.tar.gz        the static binary, LICENSE and README.md: for kubectl
#   ha-guard-VERSION-linux-arm64.tar.gz        (krew) and CI machines, the same binaries the image holds
#   ha-guard-VERSION-linux-{amd64,arm64}.cdx.json  each binary's CycloneDX SBOM (the image's own)
#   ha-guard-VERSION.tgz                       the Helm chart (helm package; artifacthub annotations)
#   plugins/ha-guard.yaml                      the krew plugin manifest: a URI and sha256 per platform
#   release-notes.md                           CHANGELOG.md's section for VERSION
#   SHA256SUMS                                 sha256 of every file above (`sha256sum -c SHA256SUMS`)
#
# docs/releases.md says what each is and how to verify it. VERSION (a leading v is allowed) must be
# the version Cargo.toml gives, which is also the chart's version and appVersion and the tag of the
# image in its annotations (scripts/bump-version.sh sets them all), and CHANGELOG.md must have a
# section for it: the release stops otherwise, before building anything.
#
# The binaries are built once, by scripts/image.sh (artifact profile, both platforms in one cargo
# run, cached in ~/.cache/ha-guard/image-target): a release right after tests/image/verify.sh
# rebuilds nothing. Archives are reproducible as the image is (fixed mtimes, owners and order,
# gzip without names or times; SOURCE_DATE_EPOCH, default the commit time of HEAD).
#
# Environment: RELEASE_OUT       the folder to write (default target/dist/ha-guard-VERSION); emptied first
#              RELEASE_URL       where the archives will be downloaded from, for the krew manifest
#                                (default https://github.com/ha-guard/ha-guard/releases/download/vVERSION)
#              SOURCE_DATE_EPOCH, HA_GUARD_CACHE, CARGO_TARGET_DIR, IMAGE_BINARIES: as scripts/image.sh
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "release.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

version=${1:?usage: scripts/release.sh VERSION}
version=${version#v}

# --- one version everywhere -----------------------------------------------------------------------
cargo_version=$(cargo metadata --no-deps --format-version 1 --offline | jq -r '.packages[] | select(.name == "ha-guard") | .version')
[[ $version == "$cargo_version" ]] ||
    die "VERSION is $version but Cargo.toml's version is $cargo_version: run scripts/bump-version.sh $version first"
read -r chart_version app_version image < <(/usr/bin/python3 - charts/ha-guard/Chart.yaml <<'PY'
import sys, yaml
chart = yaml.safe_load(open(sys.argv[1]))
images = yaml.safe_load(chart.get("annotations", {}).get("artifacthub.io/images", "[]")) or [{}]
print(chart.get("version"), chart.get("appVersion"), images[0].get("image", "none"))
PY
)
[[ $chart_version == "$version" && $app_version == "$version" && $image == *":$version" ]] ||
    die "charts/ha-guard/Chart.yaml has version $chart_version, appVersion $app_version, artifacthub image $image; all must be $version (scripts/bump-version.sh)"
notes=$(awk -v v="$version" '
    $0 ~ "^## \\[" v "\\]" { on = 1; next }
    on && /^## \[/ { exit }
    on && /^\[[^]]+\]: / { exit }
    on { print }' CHANGELOG.md)
[[ -n ${notes//[[:space:]]/} ]] || die "CHANGELOG.md has no section \"## [$version] - DATE\" (or it is empty): the release notes come from it"
release_date=$(sed -n "s/^## \[$version\] - \([0-9-]*\).*/\1/p" CHANGELOG.md)

if commit=$(git rev-parse HEAD 2>/dev/null); then
    : "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct HEAD)}"
else
    commit=unknown
    : "${SOURCE_DATE_EPOCH:=0}"
fi
export SOURCE_DATE_EPOCH

out=${RELEASE_OUT:-target/dist/ha-guard-$version}
url=${RELEASE_URL:-https://github.com/ha-guard/ha-guard/releases/download/v$version}
rm -rf "$out"
mkdir -p "$out/plugins"

# --- the image and the binaries -------------------------------------------------------------------
IMAGE_OUT="$out/ha-guard-$version.oci.tar" scripts/image.sh >/dev/null
build=target/image/build
tar_fixed() { tar --format=ustar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner "$@"; }
for arch in amd64 arm64; do
    staging="$build/archive-$arch"
    rm -rf "$staging"
    mkdir -p "$staging"
    install -m 0755 "$build/bin/$arch/ha-guard" "$staging/ha-guard"
    install -m 0644 LICENSE README.md "$staging/"
    tar_fixed -C "$staging" -cf - ha-guard LICENSE README.md | gzip -9 -n >"$out/ha-guard-$version-linux-$arch.tar.gz"
    cp "$build/sbom/ha-guard-linux-$arch.cdx.json" "$out/ha-guard-$version-linux-$arch.cdx.json"
done

# --- the chart ------------------------------------------------------------------------------------
helm=$(tests/e2e/helm/build.sh | tail -n 1)
"$helm" package charts/ha-guard --destination "$out" >&2
[[ -f $out/ha-guard-$version.tgz ]] || die "helm package wrote no $out/ha-guard-$version.tgz"

# --- the krew manifest ----------------------------------------------------------------------------
# krew's index format (krew.sigs.k8s.io/docs/developer-guide/plugin-manifest): `kubectl krew
# install ha-guard` unpacks the platform's archive and links bin as kubectl-ha_guard, the name
# under which the binary shows itself as `kubectl ha-guard`.
{
    cat <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: ha-guard
spec:
  version: v$version
  homepage: https://github.com/ha-guard/ha-guard
  shortDescription: Lint workloads and the cluster for high availability
  description: |
    Checks Deployments, StatefulSets, PodDisruptionBudgets and HorizontalPodAutoscalers for what
    blocks node drains, co-locates replicas or takes every replica down at once: in manifests
    (kubectl ha-guard check -f DIR) or in the cluster as it runs (kubectl ha-guard audit, and
    audit --drain NODE for what a drain would do). The same rules as the ha-guard admission
    webhook, whose chart and image are released with this plugin.
  caveats: |
    audit reads the cluster with your kubeconfig: it needs list on the workloads, pods, nodes and
    PodDisruptionBudgets of the namespaces it audits. The webhook is installed with the Helm chart
    (docs/releases.md), not by this plugin.
  platforms:
YAML
    for arch in amd64 arm64; do
        cat <<YAML
    - selector:
        matchLabels:
          os: linux
          arch: $arch
      uri: $url/ha-guard-$version-linux-$arch.tar.gz
      sha256: $(sha256sum "$out/ha-guard-$version-linux-$arch.tar.gz" | cut -d' ' -f1)
      files:
        - from: ha-guard
          to: .
        - from: LICENSE
          to: .
      bin: ha-guard
YAML
    done
} >"$out/plugins/ha-guard.yaml"

# --- notes and sums -------------------------------------------------------------------------------
{
    echo "# ha-guard $version${release_date:+ ($release_date)}"
    echo
    echo "Built from commit $commit. Image: $image (linux/amd64, linux/arm64); how to verify every"
    echo "artifact (SHA256SUMS, the SBOMs, the binaries' embedded dependency list): docs/releases.md."
    printf '%s\n' "$notes"
} >"$out/release-notes.md"
find "$out" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
(cd "$out" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
log "wrote $out:"
(cd "$out" && find . -type f -printf '%P\t%s bytes\n' | LC_ALL=C sort) | sed 's/^/release.sh:   /' >&2
echo "$out"

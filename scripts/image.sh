#!/usr/bin/env bash
# Builds the ha-guard container image without a container daemon or registry, as one archive that
# `docker load -i`, `podman load -i` and `kind load image-archive` accept:
#
#   scripts/image.sh              -> target/image/ha-guard-<tag>.oci.tar (path printed on stdout)
#
# The image is the one the Dockerfile builds: FROM scratch, the static stripped binary at
# /ha-guard (scripts/build-static.sh) and nothing else, USER 65532:65532, ENTRYPOINT ["/ha-guard"],
# CMD ["serve"], OCI labels. No CA certificates: in a cluster the client trusts the API server
# through the service account's mounted ca.crt, and nothing else is dialled.
#
# The image reference has one home, the chart: charts/ha-guard/values.yaml `image.repository` and
# `image.tag` (empty: Chart.yaml `appVersion`). appVersion must equal Cargo.toml's version, since
# the binary reports that version.
#
# The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...) that also carries
# Docker's manifest.json pointing at the same blobs: the format `docker save` writes since Docker 25.
# Docker before 25 reads only manifest.json; containerd (kind) and podman read index.json and name
# the image from its annotations. It is written here by hand (tar, sha256sum, jq) because none of
# the Debian tools writes it: umoci 0.4 writes gzip layers and no manifest.json, skopeo writes
# either an OCI or a Docker archive, not both in one file. tests/image/verify.sh reads the result
# back with umoci and skopeo. The layer is an uncompressed tar, as `docker save` writes it, which
# every loader reads.
#
# Reproducible where cheap: the same binary and SOURCE_DATE_EPOCH (default: the commit time of
# HEAD) give the same archive, byte for byte (fixed mtimes, owners and order; compact JSON). The
# binary itself is the same for the same sources, toolchain and checkout path (panic messages name
# source paths; remapping them would put the path into RUSTFLAGS and rebuild every dependency for
# each new clone).
#
# Environment: SOURCE_DATE_EPOCH  timestamps in the image (seconds since 1970)
#              IMAGE_OUT          where to write the archive (default target/image/ha-guard-<tag>.oci.tar)
#              HA_GUARD_CACHE     cache root (default ~/.cache/ha-guard); the static build's cargo
#                                 target dir is $HA_GUARD_CACHE/image-target, outside the clone,
#                                 so a fresh clone on the same machine rebuilds only ha-guard itself
#              CARGO_TARGET_DIR   overrides that target dir
# Missing tools (jq, python3-yaml) are installed from Debian with apt-get, said on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "image.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# --- tools ----------------------------------------------------------------------------------------
missing=()
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v readelf >/dev/null 2>&1 || missing+=(binutils)
/usr/bin/python3 -c 'import yaml' >/dev/null 2>&1 || missing+=(python3-yaml)
if ((${#missing[@]})); then
    log "installing from Debian with apt-get (missing here): ${missing[*]}"
    if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 || {
        $SUDO apt-get update >&2 && $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
fi

# --- the image reference, from the chart ----------------------------------------------------------
chart=charts/ha-guard/Chart.yaml
values=charts/ha-guard/values.yaml
for file in "$chart" "$values"; do
    [[ -f $file ]] || die "$file is missing: the image reference is read from $values (image.repository, image.tag) and $chart (appVersion)"
done
# Debian's python3 (PyYAML): the values are YAML, so they are read with a YAML parser.
read -r repository tag app_version < <(/usr/bin/python3 - "$values" "$chart" <<'EOF'
import sys, yaml
values_path, chart_path = sys.argv[1], sys.argv[2]
def fail(message):
    sys.exit(f"image.sh: error: {message}")
with open(values_path) as f:
    values = yaml.safe_load(f) or {}
with open(chart_path) as f:
    chart = yaml.safe_load(f) or {}
image = values.get("image") if isinstance(values, dict) else None
if not isinstance(image, dict) or not isinstance(image.get("repository"), str) or not image["repository"]:
    fail(f"{values_path}: image.repository is missing or not a string")
tag = image.get("tag") or ""
if not isinstance(tag, str):
    fail(f"{values_path}: image.tag must be a string (quote it), got {tag!r}")
app_version = chart.get("appVersion") if isinstance(chart, dict) else None
if not isinstance(app_version, str) or not app_version:
    fail(f"{chart_path}: appVersion is missing or not a string (quote it)")
print(image["repository"], tag or app_version, app_version)
EOF
) || die "could not read the image reference from $values and $chart"
version=$(cargo metadata --no-deps --format-version 1 --offline | jq -r '.packages[] | select(.name == "ha-guard") | .version')
[[ $app_version == "$version" ]] ||
    die "$chart appVersion is $app_version but Cargo.toml's version is $version: the binary reports $version, so the image would be mislabelled; make them equal"
ref="$repository:$tag"

# --- provenance -----------------------------------------------------------------------------------
if commit=$(git rev-parse HEAD 2>/dev/null); then
    : "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct HEAD)}"
else
    commit=${HA_GUARD_GIT_COMMIT:-unknown}
    : "${SOURCE_DATE_EPOCH:=0}"
fi
export SOURCE_DATE_EPOCH
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
# ghcr.io/OWNER/NAME is published from github.com/OWNER/NAME (what GitHub links the package by).
source_url=${IMAGE_SOURCE:-}
if [[ -z $source_url && $repository =~ ^ghcr\.io/([^/]+/[^/]+)$ ]]; then
    source_url="https://github.com/${BASH_REMATCH[1]}"
fi

# --- the binary -----------------------------------------------------------------------------------
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}/image-target}
# Every clone shares that target dir: tell build.rs which checkout this is, so that the commit it
# records is this one's (see build.rs).
export HA_GUARD_CHECKOUT=$PWD
work=target/image/build
rm -rf "$work"
mkdir -p "$work/rootfs" "$work/layout/blobs/sha256"
log "building the static binary (cargo target dir $CARGO_TARGET_DIR)"
started=$(date +%s)
scripts/build-static.sh "$work/rootfs/ha-guard"
log "static build took $(($(date +%s) - started)) s; binary $(stat -c %s "$work/rootfs/ha-guard") bytes"
built=$("$work/rootfs/ha-guard" --version)
if [[ $built == *"uncommitted changes"* ]]; then
    log "warning: $built: the image's revision label names $commit, but the binary holds changes not in it"
fi

# --- the layout -----------------------------------------------------------------------------------
blobs="$work/layout/blobs/sha256"
# Deterministic tar: one order, one mtime, root-owned (the binary is not writable by UID 65532),
# ustar headers (no atime/ctime, no PAX records with the build's times).
tar_fixed() { tar --format=ustar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner "$@"; }
# Store stdin as a blob; print its digest and size.
add_blob() {
    local tmp="$work/blob.tmp" digest
    cat >"$tmp"
    digest=$(sha256sum "$tmp" | cut -d' ' -f1)
    mv "$tmp" "$blobs/$digest"
    echo "sha256:$digest $(stat -c %s "$blobs/$digest")"
}

chmod 0755 "$work/rootfs/ha-guard"
read -r layer_digest layer_size < <(tar_fixed -C "$work/rootfs" -cf - ha-guard | add_blob)

# Image config (OCI image-spec config.md), as the Dockerfile's: ExposedPorts documents the webhook
# (TLS) and the probe and metrics port; the numeric user needs no /etc/passwd; Env is the PATH
# Docker's builder gives every FROM scratch image (unused: the entrypoint is an absolute path).
read -r config_digest config_size < <(jq -cn \
    --arg created "$created" --arg layer "$layer_digest" --arg version "$version" --arg commit "$commit" \
    --arg source "$source_url" '
    {
      created: $created,
      architecture: "amd64",
      os: "linux",
      config: {
        User: "65532:65532",
        ExposedPorts: {"8080/tcp": {}, "8443/tcp": {}},
        Entrypoint: ["/ha-guard"],
        Cmd: ["serve"],
        Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        Labels: ({
          "org.opencontainers.image.title": "ha-guard",
          "org.opencontainers.image.description": "Kubernetes admission webhook and linter that keeps workloads highly available",
          "org.opencontainers.image.version": $version,
          "org.opencontainers.image.revision": $commit,
          "org.opencontainers.image.licenses": "Apache-2.0"
        } + (if $source == "" then {} else {"org.opencontainers.image.source": $source} end))
      },
      rootfs: {type: "layers", diff_ids: [$layer]},
      history: [{created: $created, created_by: "scripts/image.sh: /ha-guard (scripts/build-static.sh)"}]
    }' | add_blob)

read -r manifest_digest manifest_size < <(jq -cn \
    --arg config "$config_digest" --argjson config_size "$config_size" \
    --arg layer "$layer_digest" --argjson layer_size "$layer_size" '
    {
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size},
      layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $layer, size: $layer_size}]
    }' | add_blob)

# io.containerd.image.name names the image for containerd (kind) and Docker 25+;
# org.opencontainers.image.ref.name for podman/skopeo, which take it as the full name.
jq -cn --arg manifest "$manifest_digest" --argjson size "$manifest_size" --arg ref "$ref" '
    {
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{
        mediaType: "application/vnd.oci.image.manifest.v1+json",
        digest: $manifest,
        size: $size,
        platform: {architecture: "amd64", os: "linux"},
        annotations: {"io.containerd.image.name": $ref, "org.opencontainers.image.ref.name": $ref}
      }]
    }' >"$work/layout/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
# Docker's own format, for `docker load` before Docker 25.
jq -cn --arg config "$config_digest" --arg layer "$layer_digest" --arg ref "$ref" '
    [{Config: ("blobs/sha256/" + ($config | ltrimstr("sha256:"))), RepoTags: [$ref],
      Layers: [("blobs/sha256/" + ($layer | ltrimstr("sha256:")))]}]' >"$work/layout/manifest.json"

out=${IMAGE_OUT:-target/image/ha-guard-$tag.oci.tar}
mkdir -p "$(dirname "$out")"
find "$work/layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
chmod -R u=rwX,go=rX "$work/layout"
tar_fixed -C "$work/layout" -cf "$out.tmp" oci-layout index.json manifest.json blobs
mv "$out.tmp" "$out"
log "wrote $out: $ref, manifest $manifest_digest, $(stat -c %s "$out") bytes"
echo "$out"

#!/usr/bin/env bash
# Builds the ha-guard container image for linux/amd64 and linux/arm64 without a container daemon or
# registry, as one archive that `docker load -i`, `podman load -i` and `kind load image-archive`
# accept:
#
#   scripts/image.sh              -> target/image/ha-guard-<tag>.oci.tar (path printed on stdout)
#
# Each platform's image is the one the Dockerfile builds: FROM scratch, the static stripped binary
# at /ha-guard (scripts/build-static.sh, artifact profile, dependency list embedded by
# cargo-auditable) and nothing else, USER 65532:65532, ENTRYPOINT ["/ha-guard"], CMD ["serve"], OCI
# labels. No CA certificates: in a cluster the client trusts the API server through the service
# account's mounted ca.crt, and nothing else is dialled.
#
# The image reference has one home, the chart: charts/ha-guard/values.yaml `image.repository` and
# `image.tag` (empty: Chart.yaml `appVersion`). appVersion must equal Cargo.toml's version, since
# the binary reports that version.
#
# The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...): index.json names
# one image index (the multi-platform image, as a registry would serve it) that lists a manifest per
# platform and, per platform, a CycloneDX SBOM as an OCI 1.1 artifact whose subject is that
# platform's manifest (docs/releases.md). The layout also carries Docker's manifest.json, for the
# linux/amd64 image only (Docker before 25 loads one platform a name; Docker 25+, containerd (kind)
# and podman read index.json, pick their platform and name the image from its annotations). It is
# written here by hand (tar, sha256sum, jq) because none of the Debian tools writes it: umoci 0.4
# writes gzip layers and no manifest.json, skopeo writes either an OCI or a Docker archive, not both
# in one file, and neither writes an index. tests/image/verify.sh reads the result back with umoci
# and skopeo, both platforms. The layers are uncompressed tars, as `docker save` writes them, which
# every loader reads.
#
# Reproducible where cheap: the same binaries and SOURCE_DATE_EPOCH (default: the commit time of
# HEAD) give the same archive, byte for byte (fixed mtimes, owners and order; compact JSON; the
# SBOMs' timestamp from SOURCE_DATE_EPOCH). The binaries themselves are the same for the same
# sources, toolchain and checkout path (panic messages name source paths; remapping them would put
# the path into RUSTFLAGS and rebuild every dependency for each new clone).
#
# Left in target/image/build for scripts/release.sh: bin/{amd64,arm64}/ha-guard and
# sbom/ha-guard-linux-{amd64,arm64}.cdx.json.
#
# Environment: SOURCE_DATE_EPOCH  timestamps in the image (seconds since 1970)
#              IMAGE_OUT          where to write the archive (default target/image/ha-guard-<tag>.oci.tar)
#              IMAGE_BINARIES     a folder with amd64/ha-guard and arm64/ha-guard to package instead
#                                 of building them (what scripts/build-static.sh --all writes)
#              HA_GUARD_CACHE     cache root (default ~/.cache/ha-guard); the static build's cargo
#                                 target dir is $HA_GUARD_CACHE/image-target, outside the clone,
#                                 so a fresh clone on the same machine rebuilds only ha-guard itself
#              CARGO_TARGET_DIR   overrides that target dir
#              HA_GUARD_PROFILE   the Cargo profile (scripts/build-static.sh; default artifact)
# Missing tools (jq, python3-yaml, the arm64 cross toolchain, cargo-auditable, cargo-cyclonedx) are
# installed (apt-get, rustup, cargo install), said on stderr.
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

# --- platforms ------------------------------------------------------------------------------------
archs=(amd64 arm64)
declare -A triple_of=([amd64]=x86_64-unknown-linux-gnu [arm64]=aarch64-unknown-linux-gnu)
# As the OCI image index spec and BuildKit name them (arm64 is ARMv8, variant v8).
declare -A platform_of=(
    [amd64]='{"architecture":"amd64","os":"linux"}'
    [arm64]='{"architecture":"arm64","os":"linux","variant":"v8"}'
)

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

# --- the binaries ---------------------------------------------------------------------------------
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}/image-target}
# Every clone shares that target dir: tell build.rs which checkout this is, so that the commit it
# records is this one's (see build.rs).
export HA_GUARD_CHECKOUT=$PWD
work=target/image/build
rm -rf "$work"
mkdir -p "$work/bin" "$work/sbom" "$work/layout/blobs/sha256"
if [[ -n ${IMAGE_BINARIES:-} ]]; then
    log "taking the binaries from $IMAGE_BINARIES (IMAGE_BINARIES)"
    cp -r "$IMAGE_BINARIES/." "$work/bin/"
else
    log "building the static binaries for ${archs[*]} (cargo target dir $CARGO_TARGET_DIR)"
    started=$(date +%s)
    scripts/build-static.sh --all "$work/bin"
    log "static build took $(($(date +%s) - started)) s"
fi
for arch in "${archs[@]}"; do
    [[ -f $work/bin/$arch/ha-guard ]] || die "no binary for linux/$arch at $work/bin/$arch/ha-guard"
    log "linux/$arch: binary $(stat -c %s "$work/bin/$arch/ha-guard") bytes"
done
if [[ $(uname -m) == x86_64 ]]; then
    built=$("$work/bin/amd64/ha-guard" --version)
    if [[ $built == *"uncommitted changes"* ]]; then
        log "warning: $built: the image's revision label names $commit, but the binary holds changes not in it"
    fi
fi

# --- the SBOMs ------------------------------------------------------------------------------------
# CycloneDX 1.5 JSON, one a platform: the crates Cargo.lock resolves for that target (build-time
# dependencies left out: they run on the build machine and put nothing into the binary), with their
# versions, crates.io checksums, licences (as `cargo deny` checks them) and dependency graph. The same
# list is in the binary itself (cargo-auditable). cargo-cyclonedx writes beside Cargo.toml; the file
# gets a name of this run's own and is moved out at once. The checkout's path is taken out of the
# root component's references, so every clone writes the same SBOM.
sbom_tool_version=0.5.9
cache_root=${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}
if [[ ! -x $cache_root/cargo-tools/bin/cargo-cyclonedx ]] ||
    ! grep -qx "cargo-cyclonedx v$sbom_tool_version:" <<<"$(cargo install --list --root "$cache_root/cargo-tools")"; then
    log "installing cargo-cyclonedx $sbom_tool_version (cargo install --locked, into $cache_root/cargo-tools)"
    cargo install --quiet --locked --root "$cache_root/cargo-tools" "cargo-cyclonedx@$sbom_tool_version" >&2
fi
for arch in "${archs[@]}"; do
    name="sbom-image-$$-$arch"
    PATH="$cache_root/cargo-tools/bin:$PATH" cargo cyclonedx --quiet --format json --spec-version 1.5 \
        --no-build-deps --target "${triple_of[$arch]}" --override-filename "$name" >&2
    jq -S --arg checkout "$PWD" --arg arch "$arch" --arg commit "$commit" '
        walk(if type == "string" then gsub("path\\+file://" + $checkout; "path+file://.") else . end)
        | .metadata.properties += [{name: "ha-guard:platform", value: ("linux/" + $arch)},
                                   {name: "ha-guard:commit", value: $commit}]' \
        "$name.json" >"$work/sbom/ha-guard-linux-$arch.cdx.json" || { rm -f "$name.json"; die "cargo-cyclonedx wrote no SBOM"; }
    rm -f "$name.json"
done

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
# OCI 1.1's empty descriptor: the config of an artifact manifest.
read -r empty_digest empty_size < <(printf '{}' | add_blob)

# One image manifest per platform, and beside each its SBOM as an OCI 1.1 artifact manifest whose
# subject is that image manifest: a registry with the referrers API lists it under the image, and
# `oras discover` / `oras copy -r` find it. Both kinds sit in one image index, the SBOMs with
# platform unknown/unknown (as BuildKit places its attestations), which every runtime's platform
# selection skips; pushing the index (`oras copy`, `skopeo copy --all`, `crane push`) pushes them.
entries=()
for arch in "${archs[@]}"; do
    rootfs="$work/rootfs-$arch"
    mkdir -p "$rootfs"
    cp "$work/bin/$arch/ha-guard" "$rootfs/ha-guard"
    chmod 0755 "$rootfs/ha-guard"
    read -r layer_digest layer_size < <(tar_fixed -C "$rootfs" -cf - ha-guard | add_blob)
    [[ $arch == amd64 ]] && amd64_layer=$layer_digest

    # Image config (OCI image-spec config.md), as the Dockerfile's: ExposedPorts documents the webhook
    # (TLS) and the probe and metrics port; the numeric user needs no /etc/passwd; Env is the PATH
    # Docker's builder gives every FROM scratch image (unused: the entrypoint is an absolute path).
    read -r config_digest config_size < <(jq -cn \
        --arg created "$created" --arg layer "$layer_digest" --arg version "$version" --arg commit "$commit" \
        --arg source "$source_url" --argjson platform "${platform_of[$arch]}" '
        {created: $created} + $platform + {
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
    [[ $arch == amd64 ]] && amd64_config=$config_digest

    read -r manifest_digest manifest_size < <(jq -cn \
        --arg config "$config_digest" --argjson config_size "$config_size" \
        --arg layer "$layer_digest" --argjson layer_size "$layer_size" '
        {
          schemaVersion: 2,
          mediaType: "application/vnd.oci.image.manifest.v1+json",
          config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size},
          layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $layer, size: $layer_size}]
        }' | add_blob)
    image_entry=$(jq -cn --arg digest "$manifest_digest" --argjson size "$manifest_size" \
        --argjson platform "${platform_of[$arch]}" '
        {mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $digest, size: $size, platform: $platform}')

    sbom_file="ha-guard-linux-$arch.cdx.json"
    read -r sbom_digest sbom_size < <(add_blob <"$work/sbom/$sbom_file")
    read -r sbom_manifest_digest sbom_manifest_size < <(jq -cn \
        --arg empty "$empty_digest" --argjson empty_size "$empty_size" --arg sbom "$sbom_digest" \
        --argjson sbom_size "$sbom_size" --arg title "$sbom_file" --argjson subject "$image_entry" \
        --arg created "$created" '
        {
          schemaVersion: 2,
          mediaType: "application/vnd.oci.image.manifest.v1+json",
          artifactType: "application/vnd.cyclonedx+json",
          config: {mediaType: "application/vnd.oci.empty.v1+json", digest: $empty, size: $empty_size, data: "e30="},
          layers: [{mediaType: "application/vnd.cyclonedx+json", digest: $sbom, size: $sbom_size,
                    annotations: {"org.opencontainers.image.title": $title}}],
          subject: ($subject | del(.platform)),
          annotations: {"org.opencontainers.image.created": $created}
        }' | add_blob)
    sbom_entry=$(jq -cn --arg digest "$sbom_manifest_digest" --argjson size "$sbom_manifest_size" '
        {mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $digest, size: $size,
         artifactType: "application/vnd.cyclonedx+json", platform: {architecture: "unknown", os: "unknown"}}')
    entries+=("$image_entry" "$sbom_entry")
    log "linux/$arch: manifest $manifest_digest, SBOM $sbom_manifest_digest ($(jq '.components | length' "$work/sbom/$sbom_file") crates)"
done
# The images first, in platform order, then the SBOMs: a reader taking the first match finds an image.
read -r index_digest index_size < <(printf '%s\n' "${entries[@]}" | jq -cs '
    {
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: ([.[] | select(.artifactType == null)] + [.[] | select(.artifactType != null)])
    }' | add_blob)

# io.containerd.image.name names the image for containerd (kind) and Docker 25+;
# org.opencontainers.image.ref.name for podman/skopeo, which take it as the full name.
jq -cn --arg index "$index_digest" --argjson size "$index_size" --arg ref "$ref" '
    {
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{
        mediaType: "application/vnd.oci.image.index.v1+json",
        digest: $index,
        size: $size,
        annotations: {"io.containerd.image.name": $ref, "org.opencontainers.image.ref.name": $ref}
      }]
    }' >"$work/layout/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
# Docker's own format, for `docker load` before Docker 25: one platform a name, so linux/amd64
# (Docker 25+ reads index.json and picks the daemon's platform).
jq -cn --arg config "$amd64_config" --arg layer "$amd64_layer" --arg ref "$ref" '
    [{Config: ("blobs/sha256/" + ($config | ltrimstr("sha256:"))), RepoTags: [$ref],
      Layers: [("blobs/sha256/" + ($layer | ltrimstr("sha256:")))]}]' >"$work/layout/manifest.json"

out=${IMAGE_OUT:-target/image/ha-guard-$tag.oci.tar}
mkdir -p "$(dirname "$out")"
find "$work/layout" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
chmod -R u=rwX,go=rX "$work/layout"
tar_fixed -C "$work/layout" -cf "$out.tmp" oci-layout index.json manifest.json blobs
mv "$out.tmp" "$out"
log "wrote $out: $ref, index $index_digest (${archs[*]} and their SBOMs), $(stat -c %s "$out") bytes"
echo "$out"

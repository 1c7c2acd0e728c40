#!/usr/bin/env bash
# Proves the release directory (scripts/release.sh) the way its users would check it; run by
# .ci/run right after tests/image/verify.sh, whose artifact build it reuses (no cargo build here).
#
#   tests/release/verify.sh
#
# 1. Builds the release of Cargo.toml's version and checks the listing: the image archive, the two
#    binary archives and their SBOMs, the packaged chart, plugins/ha-guard.yaml, release-notes.md,
#    SHA256SUMS; `sha256sum -c SHA256SUMS` passes and covers every other file.
# 2. The binary archives hold ha-guard, LICENSE and README.md; each binary is byte for byte the one
#    in the image's layer for its platform, and says so (`version --json` under qemu-user for
#    arm64): its target, the artifact profile, Cargo.toml's version, HEAD.
# 3. The SBOMs: each validates against the CycloneDX 1.5 JSON schema (cyclonedx-python-lib's strict
#    validator, from PyPI into a venv in ~/.cache/ha-guard); its crates are exactly the ones
#    `cargo metadata --filter-platform TARGET` resolves for the binary (normal dependencies from
#    ha-guard down, build-time ones left out); it agrees with the list cargo-auditable embedded in
#    the binary (read back with rust-audit-info: every crate it marks linked is in the SBOM, every
#    SBOM crate is in it, its other entries are build scripts' dependencies); it is the same file
#    as the image's SBOM artifact.
# 4. The chart: `helm show chart` on the package gives Cargo.toml's version as version and
#    appVersion, and the artifacthub.io annotations (images with both platforms, license, links).
#    (tests/e2e_release_chart.rs installs it with `helm install ha-guard ./ha-guard-VERSION.tgz`.)
# 5. The krew manifest: krew's own validate-krew-manifest accepts it (built from the pinned
#    sigs.k8s.io/krew module, tests/release/krew); each platform's sha256 and URI name its archive;
#    `krew install --manifest --archive` installs the plugin into a scratch KREW_ROOT and
#    `kubectl-ha_guard --version` runs from there.
# 6. release-notes.md holds CHANGELOG.md's section for the version.
#
# Needs what tests/image/verify.sh needs (it runs the same build); installs the rest itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { echo "release/verify.sh: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

started=$(date +%s)
cache=${HA_GUARD_CACHE:-$HOME/.cache/ha-guard}
missing=()
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v qemu-aarch64-static >/dev/null 2>&1 || missing+=(qemu-user-static)
/usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if ((${#missing[@]})); then
    log "installing from Debian with apt-get (missing here): ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 || {
        apt-get update >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
fi
# The SBOM validator: cyclonedx-python-lib, pinned, with its JSON-schema extra (the CycloneDX
# schemas ship in the package).
venv="$cache/sbom-venv"
validator_version=11.12.0
if ! "$venv/bin/python" -c "import cyclonedx, importlib.metadata as m, sys; sys.exit(m.version('cyclonedx-python-lib') != '$validator_version')" 2>/dev/null; then
    log "installing cyclonedx-python-lib $validator_version into $venv (pip)"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "cyclonedx-python-lib[json-validation]==$validator_version" >&2
fi
# The reader of cargo-auditable's embedded list, pinned.
audit_info_version=0.5.4
audit_info=$cache/cargo-tools/bin/rust-audit-info
if [[ ! -x $audit_info ]] || ! grep -qx "rust-audit-info v$audit_info_version:" <<<"$(cargo install --list --root "$cache/cargo-tools")"; then
    log "installing rust-audit-info $audit_info_version (cargo install --locked, into $cache/cargo-tools)"
    cargo install --quiet --locked --root "$cache/cargo-tools" "rust-audit-info@$audit_info_version" >&2
fi
krew_dir=$(tests/release/krew/build.sh | tail -n 1)
helm=$(tests/e2e/helm/build.sh | tail -n 1)

version=$(cargo metadata --no-deps --format-version 1 --offline | jq -r '.packages[] | select(.name == "ha-guard") | .version')
head_commit=$(git rev-parse HEAD)
tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
archs=(amd64 arm64)
declare -A triple_of=([amd64]=x86_64-unknown-linux-gnu [arm64]=aarch64-unknown-linux-gnu)
declare -A emulator_of=([amd64]='' [arm64]=qemu-aarch64-static)

# --- 1. the release and its sums ------------------------------------------------------------------
release_started=$(date +%s)
dist=$(RELEASE_OUT="$tmp/dist" scripts/release.sh "$version")
release_seconds=$(($(date +%s) - release_started))
want_files="SHA256SUMS
ha-guard-$version-linux-amd64.cdx.json
ha-guard-$version-linux-amd64.tar.gz
ha-guard-$version-linux-arm64.cdx.json
ha-guard-$version-linux-arm64.tar.gz
ha-guard-$version.oci.tar
ha-guard-$version.tgz
plugins/ha-guard.yaml
release-notes.md"
files=$(cd "$dist" && find . -type f -printf '%P\n' | LC_ALL=C sort)
[[ $files == "$want_files" ]] || fail "the release holds:
$files
want:
$want_files"
(cd "$dist" && sha256sum --check --strict --quiet SHA256SUMS) || fail "sha256sum -c SHA256SUMS fails in $dist"
[[ $(cut -d' ' -f3- "$dist/SHA256SUMS" | LC_ALL=C sort) == "$(grep -v '^SHA256SUMS$' <<<"$files")" ]] ||
    fail "SHA256SUMS does not list exactly the release's other files: $(cat "$dist/SHA256SUMS")"
log "ok: $dist holds the $(wc -l <<<"$files") files of a release; sha256sum -c SHA256SUMS passes and covers them all"

# --- 2. the binary archives -----------------------------------------------------------------------
mkdir "$tmp/layout"
tar -xf "$dist/ha-guard-$version.oci.tar" -C "$tmp/layout"
blob() { echo "$tmp/layout/blobs/sha256/${1#sha256:}"; }
image_index=$(blob "$(jq -r '.manifests[0].digest' "$tmp/layout/index.json")")
for arch in "${archs[@]}"; do
    archive="$dist/ha-guard-$version-linux-$arch.tar.gz"
    listing=$(tar -tvzf "$archive" | awk '{print $1, $2, $6}')
    [[ $listing == "-rwxr-xr-x 0/0 ha-guard
-rw-r--r-- 0/0 LICENSE
-rw-r--r-- 0/0 README.md" ]] || fail "$archive should hold ha-guard (0755), LICENSE and README.md, root-owned; it holds:
$listing"
    mkdir "$tmp/$arch"
    tar -xzf "$archive" -C "$tmp/$arch"
    cmp -s "$tmp/$arch/LICENSE" LICENSE && cmp -s "$tmp/$arch/README.md" README.md ||
        fail "$archive: LICENSE or README.md differs from the repository's"
    manifest=$(blob "$(jq -r --arg arch "$arch" '.manifests[] | select(.platform.architecture == $arch) | .digest' "$image_index")")
    tar -xOf "$(blob "$(jq -r '.layers[0].digest' "$manifest")")" ha-guard >"$tmp/$arch/from-image"
    cmp -s "$tmp/$arch/ha-guard" "$tmp/$arch/from-image" || fail "$archive's ha-guard is not the linux/$arch image's"
    # shellcheck disable=SC2086 # the emulator is one word or none
    built=$(${emulator_of[$arch]} "$tmp/$arch/ha-guard" version --json | jq -c '[.version, .commit, .target, .profile]')
    [[ $built == "[\"$version\",\"$head_commit\",\"${triple_of[$arch]}\",\"artifact\"]" ]] ||
        fail "$archive's ha-guard says $built; want version $version, commit $head_commit, ${triple_of[$arch]}, artifact"
done
log "ok: each binary archive holds ha-guard, LICENSE, README.md; the binaries are the image's and name $version, HEAD, their target, artifact"

# --- 3. the SBOMs ---------------------------------------------------------------------------------
# What cargo resolves for a target, as name@version: $2 = normal, the normal dependencies from
# ha-guard down (what the binary is compiled from: linked crates and the proc macros that generate
# its code; dev and build dependencies are not in it); $2 = build, those plus the build scripts'
# dependencies, transitively.
resolved() {
    cargo metadata --format-version 1 --locked --offline --filter-platform "$1" | /usr/bin/python3 -c '
import json, sys
kinds = [None] if sys.argv[1] == "normal" else [None, "build"]
meta = json.load(sys.stdin)
pkgs = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = next(p["id"] for p in meta["packages"] if p["name"] == "ha-guard" and p["source"] is None)
seen, todo = set(), [root]
while todo:
    for dep in nodes[todo.pop()]["deps"]:
        if any(k["kind"] in kinds for k in dep["dep_kinds"]) and dep["pkg"] not in seen:
            seen.add(dep["pkg"])
            todo.append(dep["pkg"])
print("\n".join(sorted(pkgs[i]["name"] + "@" + pkgs[i]["version"] for i in seen)))' "$2"
}
for arch in "${archs[@]}"; do
    sbom="$dist/ha-guard-$version-linux-$arch.cdx.json"
    errors=$("$venv/bin/python" -c '
import sys
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(open(sys.argv[1]).read())
print(error or "", end="")' "$sbom") || fail "the CycloneDX validator did not run on $sbom"
    [[ -z $errors ]] || fail "$sbom does not validate against the CycloneDX 1.5 schema: $errors"
    [[ $(jq -r '[.bomFormat, .specVersion, .metadata.component.name, .metadata.component.version] | join(" ")' "$sbom") == "CycloneDX 1.5 ha-guard $version" ]] ||
        fail "$sbom does not describe ha-guard $version in CycloneDX 1.5"
    [[ $(jq -r '.metadata.properties[] | select(.name == "cdx:rustc:sbom:target:triple") | .value' "$sbom") == "${triple_of[$arch]}" ]] ||
        fail "$sbom is not for ${triple_of[$arch]}"
    in_sbom=$(jq -r '.components[] | "\(.name)@\(.version)"' "$sbom" | LC_ALL=C sort)
    want=$(resolved "${triple_of[$arch]}" normal | LC_ALL=C sort)
    [[ $in_sbom == "$want" ]] || fail "$sbom lists other crates than cargo metadata resolves for ${triple_of[$arch]}:
$(diff <(echo "$want") <(echo "$in_sbom"))"
    # Every crate with its licence and, from crates.io, its checksum.
    unlicensed=$(jq -r '.components[] | select((.licenses // []) | length == 0) | .name' "$sbom")
    [[ -z $unlicensed ]] || fail "$sbom has crates without a licence: $unlicensed"
    # The list cargo-auditable embedded in the binary. It marks "build" what it finds only at
    # build time: build scripts' dependencies and some proc macros. So: every crate it says is
    # in the binary is in the SBOM; every SBOM crate is in its list; and what its list has beyond
    # the SBOM is only what build scripts need (cargo metadata's build edges).
    "$audit_info" "$tmp/$arch/ha-guard" >"$tmp/$arch/embedded.json" || fail "rust-audit-info finds no embedded dependency list in the linux/$arch binary"
    embedded_all=$(jq -r '.packages[] | select((.root // false) == false) | "\(.name)@\(.version)"' "$tmp/$arch/embedded.json" | LC_ALL=C sort -u)
    embedded_runtime=$(jq -r '.packages[] | select((.root // false) == false and (.kind // "runtime") != "build") | "\(.name)@\(.version)"' "$tmp/$arch/embedded.json" | LC_ALL=C sort -u)
    build_only=$(LC_ALL=C comm -13 <(echo "$want") <(resolved "${triple_of[$arch]}" build | LC_ALL=C sort))
    [[ -z $(LC_ALL=C comm -23 <(echo "$embedded_runtime") <(echo "$in_sbom")) ]] ||
        fail "the linux/$arch binary embeds crates the SBOM lacks: $(LC_ALL=C comm -23 <(echo "$embedded_runtime") <(echo "$in_sbom") | tr '\n' ' ')"
    [[ -z $(LC_ALL=C comm -13 <(echo "$embedded_all") <(echo "$in_sbom")) ]] ||
        fail "the SBOM lists crates the linux/$arch binary's embedded list lacks: $(LC_ALL=C comm -13 <(echo "$embedded_all") <(echo "$in_sbom") | tr '\n' ' ')"
    extra=$(LC_ALL=C comm -23 <(echo "$embedded_all") <(echo "$in_sbom"))
    [[ -z $(LC_ALL=C comm -23 <(echo "$extra") <(echo "$build_only")) ]] ||
        fail "the linux/$arch binary's embedded list has crates that are neither in the SBOM nor build-script dependencies: $(LC_ALL=C comm -23 <(echo "$extra") <(echo "$build_only") | tr '\n' ' ')"
    # The image carries the same SBOM, as the artifact whose subject is this platform's manifest.
    manifest_digest=$(jq -r --arg arch "$arch" '.manifests[] | select(.platform.architecture == $arch) | .digest' "$image_index")
    attached=$(jq -r '.manifests[] | select(.artifactType == "application/vnd.cyclonedx+json") | .digest' "$image_index" |
        while read -r d; do jq -r --arg subject "$manifest_digest" 'select(.subject.digest == $subject) | .layers[0].digest' "$(blob "$d")"; done)
    [[ -n $attached ]] && cmp -s "$(blob "$attached")" "$sbom" || fail "the image's SBOM artifact for linux/$arch is not $sbom"
    log "ok: linux/$arch SBOM: valid CycloneDX 1.5; $(wc -l <<<"$in_sbom") crates, exactly cargo metadata's for ${triple_of[$arch]}, and the binary's embedded list agrees ($(wc -l <<<"$embedded_runtime") linked, the rest build-time); attached to its manifest in the image"
done

# --- 4. the chart ---------------------------------------------------------------------------------
chart=$("$helm" show chart "$dist/ha-guard-$version.tgz" | /usr/bin/python3 -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))')
[[ $(jq -r '[.name, .version, .appVersion] | join(" ")' <<<"$chart") == "ha-guard $version $version" ]] ||
    fail "helm show chart: $(jq -c '{name, version, appVersion}' <<<"$chart"); want ha-guard $version $version"
[[ $(jq -r '.annotations["artifacthub.io/license"]' <<<"$chart") == Apache-2.0 ]] || fail "helm show chart: no artifacthub.io/license Apache-2.0"
images=$(jq -r '.annotations["artifacthub.io/images"]' <<<"$chart" | /usr/bin/python3 -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))')
[[ $(jq -c '[.[0].image, .[0].platforms]' <<<"$images") == "[\"ghcr.io/ha-guard/ha-guard:$version\",[\"linux/amd64\",\"linux/arm64\"]]" ]] ||
    fail "helm show chart: artifacthub.io/images is $images"
grep -q 'url: https://' <<<"$(jq -r '.annotations["artifacthub.io/links"]' <<<"$chart")" || fail "helm show chart: no artifacthub.io/links"
log "ok: helm show chart ha-guard-$version.tgz: version and appVersion $version; artifacthub.io images (both platforms), license, links"

# --- 5. the krew manifest -------------------------------------------------------------------------
plugin="$dist/plugins/ha-guard.yaml"
# krew's own checks of an index entry (name, version, platforms, selectors, files, bin); the
# install it would try from each URI is ours below, from the archive (the URI is not online yet).
"$krew_dir/validate-krew-manifest" -manifest "$plugin" -skip-install >&2 || fail "validate-krew-manifest rejects $plugin"
for arch in "${archs[@]}"; do
    entry=$(/usr/bin/python3 -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))' "$plugin" |
        jq -c --arg arch "$arch" '.spec.platforms[] | select(.selector.matchLabels == {os: "linux", arch: $arch})')
    archive="ha-guard-$version-linux-$arch.tar.gz"
    [[ $(jq -r .sha256 <<<"$entry") == "$(sha256sum "$dist/$archive" | cut -d' ' -f1)" ]] ||
        fail "$plugin: the linux/$arch sha256 is not $archive's"
    [[ $(jq -r .uri <<<"$entry") == */"$archive" ]] || fail "$plugin: the linux/$arch URI does not name $archive"
done
KREW_ROOT="$tmp/krew" "$krew_dir/krew" install --manifest="$plugin" --archive="$dist/ha-guard-$version-linux-amd64.tar.gz" </dev/null >&2 ||
    fail "krew install --manifest --archive did not install the plugin"
plugin_version=$("$tmp/krew/bin/kubectl-ha_guard" --version) || fail "the installed kubectl-ha_guard does not run"
[[ $plugin_version == "ha-guard $version (commit ${head_commit:0:12}"* ]] || fail "the installed plugin says $plugin_version"
usage=$(head -n 3 <<<"$("$tmp/krew/bin/kubectl-ha_guard" check --help)")
grep -q 'kubectl ha-guard check' <<<"$usage" || fail "the installed plugin does not call itself kubectl ha-guard: $usage"
log "ok: validate-krew-manifest accepts plugins/ha-guard.yaml; sha256s and URIs name the archives; krew install from the archive gives kubectl-ha_guard ($plugin_version)"

# --- 6. the notes ---------------------------------------------------------------------------------
section=$(awk -v v="$version" '$0 ~ "^## \\[" v "\\]" { on = 1; next } on && /^## \[/ { exit } on && /^\[[^]]+\]: / { exit } on { print }' CHANGELOG.md)
grep -qF -e "$(grep -m1 '^- ' <<<"$section")" "$dist/release-notes.md" && grep -q "^# ha-guard $version" "$dist/release-notes.md" ||
    fail "release-notes.md does not hold CHANGELOG.md's section for $version"
log "ok: release-notes.md is CHANGELOG.md's section for $version"

for file in $files; do log "  $(stat -c %s "$dist/$file") bytes  $file"; done
log "passed in $(($(date +%s) - started)) s (scripts/release.sh $version took $release_seconds s)"

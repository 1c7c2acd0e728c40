#!/usr/bin/env bash
# Proves the multi-platform container image archive (scripts/image.sh) without a container daemon;
# run by .ci/run.
#
#   tests/image/verify.sh
#
# 1. Builds the archive twice and requires the same bytes (the packaging is deterministic; the
#    second cargo build is a no-op, so this does not prove the compiler's output reproducible).
# 2. Reads it back with independent readers: index.json names one image index holding a manifest
#    for linux/amd64, one for linux/arm64 and, for each, a CycloneDX SBOM artifact whose subject is
#    that manifest. skopeo (the library podman loads with) picks each platform from the index and
#    copies it out (reading every blob), umoci unpacks each copy (checking every digest); skopeo
#    also reads the linux/amd64 image through Docker's manifest.json, and both must find the same
#    image config.
# 3. Checks each config: user 65532:65532, entrypoint /ha-guard, cmd serve, the platform, the OCI
#    labels (version = Cargo.toml, revision = HEAD).
# 4. Checks each root filesystem: exactly one file, /ha-guard, root-owned 0755, statically linked,
#    stripped, an ELF for its platform's machine; so no shell, no libc, no loader. The amd64 rootfs
#    from manifest.json's layer list is the same.
# 5. Runs each binary from its root filesystem alone, the way a container runtime would with the
#    chart's securityContext: chroot, UID/GID 65532, an empty environment, the root filesystem
#    mounted read-only, in a network namespace of its own with only loopback; the arm64 binary
#    under qemu-user (Debian's qemu-aarch64-static, put beside it in the unpacked copy):
#    `--version` (names Cargo.toml's version and HEAD), `version --json` (the platform's target and
#    the artifact profile), `check -f -` on a corpus file (same exit code and output as the
#    development build), and `serve` with a certificate mounted where the chart mounts it,
#    answering /readyz and an AdmissionReview over TLS.
# 6. Prints the binary and archive sizes.
#
# The SBOMs' content (schema, crates against cargo metadata, against the binaries' embedded list)
# is proved by tests/release/verify.sh.
#
# Needs root (chroot, mounts, namespaces). Installs umoci, skopeo and qemu-user-static from Debian
# when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { echo "verify.sh: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

started=$(date +%s)
[[ $(id -u) -eq 0 ]] || fail "needs root (chroot, mount and network namespaces for running the image's binary)"
missing=()
command -v umoci >/dev/null 2>&1 || missing+=(umoci)
command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
command -v jq >/dev/null 2>&1 || missing+=(jq)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v qemu-aarch64-static >/dev/null 2>&1 || missing+=(qemu-user-static)
if ((${#missing[@]})); then
    log "installing from Debian with apt-get (missing here): ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 || {
        apt-get update >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
fi

corpus=${HA_GUARD_CORPUS:-$(cd .. && pwd)/shared/corpus}
sample="$corpus/k8s-website/zookeeper.yaml"
[[ -f $sample ]] || fail "$sample is missing (set HA_GUARD_CORPUS to the shared corpus folder)"
version=$(cargo metadata --no-deps --format-version 1 --offline | jq -r '.packages[] | select(.name == "ha-guard") | .version')
head_commit=$(git rev-parse HEAD)

tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT

# --- 1. build, twice ------------------------------------------------------------------------------
build_started=$(date +%s)
archive=$(scripts/image.sh)
build_seconds=$(($(date +%s) - build_started))
first_sum=$(sha256sum "$archive" | cut -d' ' -f1)
IMAGE_OUT="$tmp/again.oci.tar" scripts/image.sh >/dev/null
second_sum=$(sha256sum "$tmp/again.oci.tar" | cut -d' ' -f1)
[[ $first_sum == "$second_sum" ]] || fail "two packagings of the same binary differ ($first_sum, $second_sum): not reproducible"
log "ok: $archive is reproducible (sha256 $first_sum; packaged twice, same bytes)"

# --- 2. read it back ------------------------------------------------------------------------------
archs=(amd64 arm64)
declare -A platform_of=([amd64]='["amd64","linux",null]' [arm64]='["arm64","linux","v8"]')
declare -A machine_of=([amd64]='Advanced Micro Devices X86-64' [arm64]='AArch64')
declare -A triple_of=([amd64]=x86_64-unknown-linux-gnu [arm64]=aarch64-unknown-linux-gnu)
listing=$(tar -tf "$archive" | sort | tr '\n' ' ')
blob_count=$(tar -tf "$archive" | grep -c '^blobs/sha256/[0-9a-f]\{64\}$' || true)
expected_listing="blobs/ blobs/sha256/ $(tar -tf "$archive" | grep '^blobs/sha256/.' | sort | tr '\n' ' ')index.json manifest.json oci-layout "
# Per platform: manifest, config, layer, SBOM, SBOM artifact manifest; plus the image index and
# the artifacts' shared empty config.
[[ $listing == "$expected_listing" && $blob_count -eq 12 ]] ||
    fail "the archive should hold oci-layout, index.json, manifest.json and 12 blobs (an index; per platform a manifest, config, layer, SBOM and SBOM manifest; the empty config); it holds: $listing"

mkdir "$tmp/layout"
tar -xf "$archive" -C "$tmp/layout"
ref=$(jq -er '.manifests | if length == 1 then .[0].annotations["io.containerd.image.name"] else error("index.json lists \(length) entries, want 1") end' "$tmp/layout/index.json")
[[ $(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$tmp/layout/index.json") == "$ref" ]] ||
    fail "index.json: org.opencontainers.image.ref.name differs from io.containerd.image.name ($ref)"
[[ $ref == *":$version" ]] || fail "the image is named $ref; its tag should be the version $version"
[[ $(jq -r '.[0].RepoTags | join(",")' "$tmp/layout/manifest.json") == "$ref" ]] ||
    fail "manifest.json RepoTags differ from index.json's name $ref"
[[ $(jq -r '.manifests[0].mediaType' "$tmp/layout/index.json") == application/vnd.oci.image.index.v1+json ]] ||
    fail "index.json's entry is not an image index (one name for every platform)"
blob() { echo "$tmp/layout/blobs/sha256/${1#sha256:}"; }
image_index=$(blob "$(jq -r '.manifests[0].digest' "$tmp/layout/index.json")")
platforms=$(jq -c '[.manifests[] | select(.artifactType == null) | .platform | [.architecture, .os, .variant]]' "$image_index")
[[ $platforms == '[["amd64","linux",null],["arm64","linux","v8"]]' ]] ||
    fail "the image index lists the platforms $platforms; want linux/amd64 and linux/arm64/v8"
# Each SBOM artifact: CycloneDX, its subject one of the index's platform manifests, one SBOM each.
sbom_subjects=$(jq -r '.manifests[] | select(.artifactType == "application/vnd.cyclonedx+json") | .digest' "$image_index" |
    while read -r digest; do
        jq -er 'select(.artifactType == "application/vnd.cyclonedx+json" and .layers[0].mediaType == "application/vnd.cyclonedx+json"
                       and .config.mediaType == "application/vnd.oci.empty.v1+json") | .subject.digest' "$(blob "$digest")" ||
            echo "not-an-sbom:$digest"
    done | sort | tr '\n' ' ')
image_digests=$(jq -r '.manifests[] | select(.artifactType == null) | .digest' "$image_index" | sort | tr '\n' ' ')
[[ $sbom_subjects == "$image_digests" ]] ||
    fail "the SBOM artifacts' subjects ($sbom_subjects) should be the platform manifests ($image_digests), one each"
log "ok: index.json names $ref: an image index of linux/amd64 and linux/arm64/v8, each with a CycloneDX SBOM artifact (subject: its manifest)"

# skopeo is containers/image, the library `podman load` uses: pick each platform from the index by
# the image's name and copy it out (reading every blob, checking the layer against diff_ids); umoci
# unpacks each copy (verifying every digest; it reads one platform a name, so not the index itself).
# --rootless keeps the layer's owners out of the way (checked from the layer's tar headers below).
declare -A config_of rootfs_of
for arch in "${archs[@]}"; do
    config_of[$arch]=$(skopeo --override-arch "$arch" inspect --config "oci-archive:$archive:$ref") ||
        fail "skopeo finds no linux/$arch image named $ref through index.json"
    skopeo --override-arch "$arch" copy --quiet "oci-archive:$archive:$ref" "oci:$tmp/$arch:$ref" ||
        fail "skopeo could not copy linux/$arch out of $ref"
    umoci unpack --rootless --image "$tmp/$arch:$ref" "$tmp/bundle-$arch" >/dev/null ||
        fail "umoci could not unpack the linux/$arch image skopeo picked from the index"
    rootfs_of[$arch]="$tmp/bundle-$arch/rootfs"
done
oci_config=${config_of[amd64]}
docker_config=$(skopeo inspect --config "docker-archive:$archive:$ref") || fail "skopeo finds no image named $ref through manifest.json"
[[ $(jq -cS . <<<"$oci_config") == "$(jq -cS . <<<"$docker_config")" ]] ||
    fail "the OCI index's linux/amd64 image and Docker's manifest.json lead to different image configs"
skopeo copy --quiet "docker-archive:$archive:$ref" "oci:$tmp/via-docker:$ref" ||
    fail "skopeo could not copy $ref out of the archive through manifest.json"
umoci unpack --rootless --image "$tmp/via-docker:$ref" "$tmp/via-docker-bundle" >/dev/null ||
    fail "umoci could not unpack the image skopeo read through manifest.json"
log "ok: skopeo picks linux/amd64 and linux/arm64 from $ref, umoci unpacks both; manifest.json leads to the same linux/amd64 config"

# --- 3. the configs -------------------------------------------------------------------------------
for arch in "${archs[@]}"; do
    check_config() {
        local what=$1 filter=$2 want=$3 got
        got=$(jq -c "$filter" <<<"${config_of[$arch]}")
        [[ $got == "$want" ]] || fail "linux/$arch image config $what is $got, want $want"
    }
    check_config user '.config.User' '"65532:65532"'
    check_config entrypoint '.config.Entrypoint' '["/ha-guard"]'
    check_config cmd '.config.Cmd' '["serve"]'
    check_config platform '[.architecture, .os, .variant]' "${platform_of[$arch]}"
    check_config env '.config.Env' '["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'
    check_config 'label version' '.config.Labels["org.opencontainers.image.version"]' "\"$version\""
    check_config 'label revision' '.config.Labels["org.opencontainers.image.revision"]' "\"$head_commit\""
    check_config 'label licenses' '.config.Labels["org.opencontainers.image.licenses"]' '"Apache-2.0"'
    check_config 'label source' '.config.Labels["org.opencontainers.image.source"] | type' '"string"'
    # umoci turns the config into a runtime spec, as a container runtime would.
    runtime=$(cat "$tmp/bundle-$arch/config.json")
    [[ $(jq -c '[.process.user.uid, .process.user.gid, .process.args]' <<<"$runtime") == '[65532,65532,["/ha-guard","serve"]]' ]] ||
        fail "the runtime spec umoci derives for linux/$arch runs $(jq -c '[.process.user, .process.args]' <<<"$runtime")"
done
log "ok: both configs: user 65532:65532, entrypoint [/ha-guard], cmd [serve], their platform, labels version $version revision $head_commit"

# --- 4. the root filesystems ----------------------------------------------------------------------
for arch in "${archs[@]}"; do
    rootfs=${rootfs_of[$arch]}
    files=$(cd "$rootfs" && find . -mindepth 1 | sort | tr '\n' ' ')
    [[ $files == "./ha-guard " ]] || fail "the linux/$arch root filesystem should hold /ha-guard only; it holds: $files"
    layer=$(jq -r '.layers | if length == 1 then .[0].digest else error("want 1 layer") end' \
        "$(blob "$(jq -r --arg arch "$arch" '.manifests[] | select(.platform.architecture == $arch) | .digest' "$image_index")")")
    headers=$(tar -tvf "$(blob "$layer")")
    [[ $(awk '{print $1, $2, $6}' <<<"$headers") == "-rwxr-xr-x 0/0 ha-guard" ]] ||
        fail "the linux/$arch layer $layer should hold ha-guard as 0/0 -rwxr-xr-x; it holds: $headers"
    # Output read whole first: `readelf | grep -q` under pipefail fails on SIGPIPE (see build-static.sh).
    if grep -q INTERP <<<"$(readelf --program-headers "$rootfs/ha-guard")" || grep -q NEEDED <<<"$(readelf --dynamic "$rootfs/ha-guard")"; then
        fail "linux/$arch /ha-guard is dynamically linked: it would not start in an image without libc"
    fi
    if grep -qE '\.debug_|\.symtab' <<<"$(readelf --sections "$rootfs/ha-guard")"; then
        fail "linux/$arch /ha-guard carries debug info or a symbol table (not stripped)"
    fi
    machine=$(readelf --file-header "$rootfs/ha-guard" | sed -n 's/^ *Machine: *//p')
    [[ $machine == "${machine_of[$arch]}" ]] || fail "linux/$arch /ha-guard is an ELF for $machine, want ${machine_of[$arch]}"
done
if [[ $(cd "$tmp/via-docker-bundle/rootfs" && find . -mindepth 1 | sort | tr '\n' ' ') != "./ha-guard " ]] ||
    ! cmp -s "${rootfs_of[amd64]}/ha-guard" "$tmp/via-docker-bundle/rootfs/ha-guard"; then
    fail "the image read through manifest.json holds other files than the linux/amd64 one read through index.json"
fi
log "ok: each rootfs holds /ha-guard only (root-owned, 0755, static, stripped, an ELF for its machine); no shell"

# --- 5. run them from the rootfs alone ------------------------------------------------------------
# As a container runtime would: chroot into the unpacked rootfs bind-mounted read-only, UID/GID
# 65532, no environment, a network namespace with only loopback (the test's own, per the
# networking rule). Mountpoints the chart's volumes need are made in the unpacked copies after the
# checks above, as the runtime makes them; the arm64 copy also gets the static qemu-user there
# (what binfmt_misc's F flag would hand the kernel), which runs /ha-guard by its path.
for arch in "${archs[@]}"; do mkdir -p "${rootfs_of[$arch]}/etc/ha-guard/tls"; done
mkdir -p "${rootfs_of[arm64]}/usr/bin"
cp "$(command -v qemu-aarch64-static)" "${rootfs_of[arm64]}/usr/bin/qemu-aarch64-static"
declare -A emulator_of=([amd64]='' [arm64]=/usr/bin/qemu-aarch64-static)
# shellcheck disable=SC2016 # the shell text is expanded by the inner bash, on purpose
in_image() {
    # $1: the platform; $2: shell text run inside fresh mount and network namespaces with that
    # platform's rootfs mounted read-only; `image ARGS` there runs /ha-guard ARGS in the chroot.
    unshare --mount --net --propagation private env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        ROOTFS="${rootfs_of[$1]}" EMULATOR="${emulator_of[$1]}" TLS="$tmp/tls" WORK="$tmp" bash -euo pipefail -c '
        ip link set lo up
        mount --bind "$ROOTFS" "$ROOTFS" && mount -o remount,bind,ro "$ROOTFS"
        [[ -d $TLS ]] && mount --bind -o ro "$TLS" "$ROOTFS/etc/ha-guard/tls"
        image() { env -i "$(command -v chroot)" --userspec=65532:65532 "$ROOTFS" $EMULATOR /ha-guard "$@"; }
        # The same as a process of its own (for `image_exec ... &`, so that $! is ha-guard).
        image_exec() { exec env -i "$(command -v chroot)" --userspec=65532:65532 "$ROOTFS" $EMULATOR /ha-guard "$@"; }
        '"$2"
}

# The development build the test suite runs (built as for `cargo test`, so a no-op right after it).
cargo test --quiet --no-run --test it
host_bin="$(cargo metadata --format-version 1 --no-deps --offline | jq -r .target_directory)/debug/ha-guard"
set +e
host_out=$("$host_bin" check -f - <"$sample" 2>/dev/null)
host_code=$?
set -e

mkdir "$tmp/tls"
"${rootfs_of[amd64]}/ha-guard" certs --out "$tmp/tls" --dns ha-guard.ha-guard.svc >/dev/null
chmod -R a+rX "$tmp/tls"
cp tests/fixtures/deployment-spread-no-selector.json "$tmp/review.json"

for arch in "${archs[@]}"; do
    version_line=$(in_image "$arch" 'image --version')
    [[ $version_line == "ha-guard $version (commit ${head_commit:0:12}, built "*"; ${triple_of[$arch]}, profile artifact)" ]] ||
        fail "--version in the linux/$arch image printed \"$version_line\"; want ha-guard $version (commit ${head_commit:0:12}, built ...; ${triple_of[$arch]}, profile artifact)"
    build=$(in_image "$arch" 'image version --json' | jq -c '[.target, .profile, .build.lto, .build.codegen_units, .build.crt_static]')
    [[ $build == "[\"${triple_of[$arch]}\",\"artifact\",\"fat\",\"1\",true]" ]] ||
        fail "version --json in the linux/$arch image says $build; want its target, the artifact profile (fat LTO, 1 codegen unit), crt-static"
    log "ok: --version as 65532 in the linux/$arch image: $version_line"

    set +e
    image_out=$(in_image "$arch" 'image check -f -' <"$sample" 2>"$tmp/check.err")
    image_code=$?
    set -e
    [[ $image_code -le 1 ]] || fail "check in the linux/$arch image exited $image_code: $(cat "$tmp/check.err")"
    [[ $image_code -eq $host_code && $image_out == "$host_out" ]] ||
        fail "check in the linux/$arch image (exit $image_code) differs from the development build (exit $host_code):
$(diff <(echo "$host_out") <(echo "$image_out"))"
    summary=$(grep -E '^[0-9]+ deny, [0-9]+ warn' <<<"$image_out") || fail "check in the linux/$arch image printed no summary line:
$image_out"
    grep -q 'StatefulSet default/zk' <<<"$image_out" || fail "check in the linux/$arch image does not name StatefulSet default/zk:
$image_out"
    log "ok: check -f - < ${sample#"$corpus/"} in the linux/$arch image: exit $image_code, same output as the development build ($summary)"

    # Under qemu-user the first start takes a few seconds: up to 60 s for /readyz.
    # shellcheck disable=SC2016 # expanded by in_image's bash
    serve_out=$(in_image "$arch" '
        image_exec serve --listen 127.0.0.1:8443 --probe-listen 127.0.0.1:8080 --cluster none \
            --tls-cert /etc/ha-guard/tls/tls.crt --tls-key /etc/ha-guard/tls/tls.key --log-format json \
            >"$WORK/serve.log" 2>&1 &
        pid=$!
        trap "kill $pid 2>/dev/null || true" EXIT
        for _ in $(seq 600); do
            [[ $(curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:8080/readyz) == 200 ]] && break
            sleep 0.1
        done
        echo "readyz $(curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:8080/readyz)"
        curl -sS --cacert "$TLS/ca.crt" --resolve ha-guard.ha-guard.svc:8443:127.0.0.1 \
            -H "Content-Type: application/json" --data "@$WORK/review.json" https://ha-guard.ha-guard.svc:8443/validate
        echo
        kill -TERM "$pid"
        wait "$pid"
    ') || fail "serve in the linux/$arch image: $serve_out
$(cat "$tmp/serve.log")"
    [[ $(head -1 <<<"$serve_out") == "readyz 200" ]] || fail "serve in the linux/$arch image never got ready: $serve_out
$(cat "$tmp/serve.log")"
    allowed=$(sed -n 2p <<<"$serve_out" | jq -r '.response.allowed') ||
        fail "serve in the linux/$arch image answered no AdmissionReview: $serve_out"
    [[ $allowed == false ]] || fail "serve in the linux/$arch image allowed the fixture it must deny: $serve_out"
    log "ok: serve in the linux/$arch image (TLS from the mounted certificate, read-only rootfs): /readyz 200, AdmissionReview denied"
done

# --- 6. sizes -------------------------------------------------------------------------------------
archive_size=$(stat -c %s "$archive")
for arch in "${archs[@]}"; do
    binary_size=$(stat -c %s "${rootfs_of[$arch]}/ha-guard")
    log "image $ref linux/$arch: binary $binary_size bytes ($((binary_size / 1024 / 1024)) MiB)"
done
log "archive $archive_size bytes ($((archive_size / 1024 / 1024)) MiB), sha256 $first_sum"
log "passed in $(($(date +%s) - started)) s (first image build $build_seconds s)"

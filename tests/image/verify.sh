#!/usr/bin/env bash
# Proves the container image archive (scripts/image.sh) without a container daemon; run by .ci/run.
#
#   tests/image/verify.sh
#
# 1. Builds the archive twice and requires the same bytes (the packaging is deterministic; the
#    second cargo build is a no-op, so this does not prove the compiler's output reproducible).
# 2. Reads it back with independent readers: umoci unpacks it through index.json (checking every
#    digest), skopeo (the library podman loads with) inspects it both as an OCI archive and as a
#    Docker archive (manifest.json), and both must find the same image config.
# 3. Checks that config: user 65532:65532, entrypoint /ha-guard, cmd serve, amd64/linux, the OCI
#    labels (version = Cargo.toml, revision = HEAD).
# 4. Checks the root filesystem: exactly one file, /ha-guard, root-owned 0755, statically linked;
#    so no shell, no libc, no loader. The rootfs from manifest.json's layer list is the same.
# 5. Runs the binary from that root filesystem alone, the way a container runtime would with the
#    chart's securityContext: chroot, UID/GID 65532, an empty environment, the root filesystem
#    mounted read-only, in a network namespace of its own with only loopback:
#    `--version` (names Cargo.toml's version and HEAD), `check -f -` on a corpus file (same exit
#    code and output as the development build), and `serve` with a certificate mounted where the
#    chart mounts it, answering /readyz and an AdmissionReview over TLS.
# 6. Prints the binary and archive sizes.
#
# Needs root (chroot, mounts, namespaces). Installs umoci and skopeo from Debian when missing.
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
listing=$(tar -tf "$archive" | sort | tr '\n' ' ')
blob_count=$(tar -tf "$archive" | grep -c '^blobs/sha256/[0-9a-f]\{64\}$' || true)
expected_listing="blobs/ blobs/sha256/ $(tar -tf "$archive" | grep '^blobs/sha256/.' | sort | tr '\n' ' ')index.json manifest.json oci-layout "
[[ $listing == "$expected_listing" && $blob_count -eq 3 ]] ||
    fail "the archive should hold oci-layout, index.json, manifest.json and 3 blobs (manifest, config, layer); it holds: $listing"

ref=$(tar -xOf "$archive" index.json | jq -er '.manifests | if length == 1 then .[0].annotations["io.containerd.image.name"] else error("index.json lists \(length) manifests, want 1") end')
[[ $(tar -xOf "$archive" index.json | jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]') == "$ref" ]] ||
    fail "index.json: org.opencontainers.image.ref.name differs from io.containerd.image.name ($ref)"
[[ $ref == *":$version" ]] || fail "the image is named $ref; its tag should be the version $version"
[[ $(tar -xOf "$archive" manifest.json | jq -r '.[0].RepoTags | join(",")') == "$ref" ]] ||
    fail "manifest.json RepoTags differ from index.json's name $ref"

mkdir "$tmp/layout"
tar -xf "$archive" -C "$tmp/layout"
# umoci verifies each blob against its digest while unpacking; --rootless keeps the layer's owners
# out of the way (the ownership is checked from the layer's tar headers below).
umoci unpack --rootless --image "$tmp/layout:$ref" "$tmp/bundle" >/dev/null ||
    fail "umoci could not unpack $ref from the archive's OCI layout"
rootfs="$tmp/bundle/rootfs"

# skopeo is containers/image, the library `podman load` uses: read the image by its name both
# through index.json and through Docker's manifest.json.
oci_config=$(skopeo inspect --config "oci-archive:$archive:$ref") || fail "skopeo finds no image named $ref through index.json"
docker_config=$(skopeo inspect --config "docker-archive:$archive:$ref") || fail "skopeo finds no image named $ref through manifest.json"
[[ $(jq -cS . <<<"$oci_config") == "$(jq -cS . <<<"$docker_config")" ]] ||
    fail "the OCI index and Docker's manifest.json lead to different image configs"
# Copying reads every blob (and checks the layer against the config's diff_ids).
skopeo copy --quiet "docker-archive:$archive:$ref" "oci:$tmp/via-docker:$ref" ||
    fail "skopeo could not copy $ref out of the archive through manifest.json"
umoci unpack --rootless --image "$tmp/via-docker:$ref" "$tmp/via-docker-bundle" >/dev/null ||
    fail "umoci could not unpack the image skopeo read through manifest.json"
log "ok: umoci unpacks $ref from index.json; skopeo reads the same config by that name from index.json and from manifest.json"

# --- 3. the config --------------------------------------------------------------------------------
check_config() {
    local what=$1 filter=$2 want=$3 got
    got=$(jq -c "$filter" <<<"$oci_config")
    [[ $got == "$want" ]] || fail "image config $what is $got, want $want"
}
check_config user '.config.User' '"65532:65532"'
check_config entrypoint '.config.Entrypoint' '["/ha-guard"]'
check_config cmd '.config.Cmd' '["serve"]'
check_config platform '[.architecture, .os]' '["amd64","linux"]'
check_config env '.config.Env' '["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'
check_config 'label version' '.config.Labels["org.opencontainers.image.version"]' "\"$version\""
check_config 'label revision' '.config.Labels["org.opencontainers.image.revision"]' "\"$head_commit\""
check_config 'label licenses' '.config.Labels["org.opencontainers.image.licenses"]' '"Apache-2.0"'
check_config 'label source' '.config.Labels["org.opencontainers.image.source"] | type' '"string"'
# umoci turns the config into a runtime spec, as a container runtime would.
runtime=$(cat "$tmp/bundle/config.json")
[[ $(jq -c '[.process.user.uid, .process.user.gid, .process.args]' <<<"$runtime") == '[65532,65532,["/ha-guard","serve"]]' ]] ||
    fail "the runtime spec umoci derives runs $(jq -c '[.process.user, .process.args]' <<<"$runtime")"
log "ok: config user 65532:65532, entrypoint [/ha-guard], cmd [serve], linux/amd64, labels version $version revision $head_commit"

# --- 4. the root filesystem -----------------------------------------------------------------------
files=$(cd "$rootfs" && find . -mindepth 1 | sort | tr '\n' ' ')
[[ $files == "./ha-guard " ]] || fail "the root filesystem should hold /ha-guard only; it holds: $files"
layer=$(tar -xOf "$archive" manifest.json | jq -r '.[0].Layers | if length == 1 then .[0] else error("want 1 layer") end')
headers=$(tar -tvf "$tmp/layout/$layer")
[[ $(awk '{print $1, $2, $6}' <<<"$headers") == "-rwxr-xr-x 0/0 ha-guard" ]] ||
    fail "the layer (manifest.json's $layer) should hold ha-guard as 0/0 -rwxr-xr-x; it holds: $headers"
if [[ $(cd "$tmp/via-docker-bundle/rootfs" && find . -mindepth 1 | sort | tr '\n' ' ') != "./ha-guard " ]] ||
    ! cmp -s "$rootfs/ha-guard" "$tmp/via-docker-bundle/rootfs/ha-guard"; then
    fail "the image read through manifest.json holds other files than the one read through index.json"
fi
if readelf --program-headers "$rootfs/ha-guard" | grep -q INTERP || readelf --dynamic "$rootfs/ha-guard" | grep -q NEEDED; then
    fail "/ha-guard is dynamically linked: it would not start in an image without libc"
fi
if readelf --sections "$rootfs/ha-guard" | grep -qE '\.debug_|\.symtab'; then
    fail "/ha-guard carries debug info or a symbol table (not stripped)"
fi
log "ok: rootfs holds /ha-guard only (root-owned, 0755, static, stripped); no shell"

# --- 5. run it from the rootfs alone --------------------------------------------------------------
# As a container runtime would: chroot into the unpacked rootfs bind-mounted read-only, UID/GID
# 65532, no environment, a network namespace with only loopback (the test's own, per the
# networking rule). Mountpoints the chart's volumes need are made in the unpacked copy after the
# checks above, as the runtime makes them.
mkdir -p "$rootfs/etc/ha-guard/tls"
# shellcheck disable=SC2016 # the shell text is expanded by the inner bash, on purpose
in_image() {
    # $1: shell text run inside fresh mount and network namespaces with $root mounted read-only;
    # `image ARGS` there runs /ha-guard ARGS in the chroot.
    unshare --mount --net --propagation private env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        ROOTFS="$rootfs" TLS="$tmp/tls" WORK="$tmp" bash -euo pipefail -c '
        ip link set lo up
        mount --bind "$ROOTFS" "$ROOTFS" && mount -o remount,bind,ro "$ROOTFS"
        [[ -d $TLS ]] && mount --bind -o ro "$TLS" "$ROOTFS/etc/ha-guard/tls"
        image() { env -i "$(command -v chroot)" --userspec=65532:65532 "$ROOTFS" /ha-guard "$@"; }
        # The same as a process of its own (for `image_exec ... &`, so that $! is ha-guard).
        image_exec() { exec env -i "$(command -v chroot)" --userspec=65532:65532 "$ROOTFS" /ha-guard "$@"; }
        '"$1"
}

version_line=$(in_image 'image --version')
[[ $version_line == "ha-guard $version (commit ${head_commit:0:12}, built "* ]] ||
    fail "--version in the image printed \"$version_line\"; want ha-guard $version (commit ${head_commit:0:12}, built ...)"
log "ok: --version as 65532 in the image: $version_line"

# The development build the test suite runs (built as for `cargo test`, so a no-op right after it).
cargo test --quiet --no-run --test it
host_bin="$(cargo metadata --format-version 1 --no-deps --offline | jq -r .target_directory)/debug/ha-guard"
set +e
image_out=$(in_image 'image check -f -' <"$sample" 2>"$tmp/check.err")
image_code=$?
host_out=$("$host_bin" check -f - <"$sample" 2>/dev/null)
host_code=$?
set -e
[[ $image_code -le 1 ]] || fail "check in the image exited $image_code: $(cat "$tmp/check.err")"
[[ $image_code -eq $host_code && $image_out == "$host_out" ]] ||
    fail "check in the image (exit $image_code) differs from the development build (exit $host_code):
$(diff <(echo "$host_out") <(echo "$image_out"))"
summary=$(grep -E '^[0-9]+ deny, [0-9]+ warn' <<<"$image_out") || fail "check in the image printed no summary line:
$image_out"
grep -q 'StatefulSet default/zk' <<<"$image_out" || fail "check in the image does not name StatefulSet default/zk:
$image_out"
log "ok: check -f - < ${sample#"$corpus/"} in the image: exit $image_code, same output as the development build ($summary)"

mkdir "$tmp/tls"
"$rootfs/ha-guard" certs --out "$tmp/tls" --dns ha-guard.ha-guard.svc >/dev/null
chmod -R a+rX "$tmp/tls"
cp tests/fixtures/deployment-spread-no-selector.json "$tmp/review.json"
# shellcheck disable=SC2016 # expanded by in_image's bash
serve_out=$(in_image '
    image_exec serve --listen 127.0.0.1:8443 --probe-listen 127.0.0.1:8080 --cluster none \
        --tls-cert /etc/ha-guard/tls/tls.crt --tls-key /etc/ha-guard/tls/tls.key --log-format json \
        >"$WORK/serve.log" 2>&1 &
    pid=$!
    trap "kill $pid 2>/dev/null || true" EXIT
    for _ in $(seq 100); do
        [[ $(curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:8080/readyz) == 200 ]] && break
        sleep 0.1
    done
    echo "readyz $(curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:8080/readyz)"
    curl -sS --cacert "$TLS/ca.crt" --resolve ha-guard.ha-guard.svc:8443:127.0.0.1 \
        -H "Content-Type: application/json" --data "@$WORK/review.json" https://ha-guard.ha-guard.svc:8443/validate
    echo
    kill -TERM "$pid"
    wait "$pid"
') || fail "serve in the image: $serve_out
$(cat "$tmp/serve.log")"
[[ $(head -1 <<<"$serve_out") == "readyz 200" ]] || fail "serve in the image never got ready: $serve_out
$(cat "$tmp/serve.log")"
allowed=$(sed -n 2p <<<"$serve_out" | jq -r '.response.allowed') ||
    fail "serve in the image answered no AdmissionReview: $serve_out"
[[ $allowed == false ]] || fail "serve in the image allowed the fixture it must deny: $serve_out"
log "ok: serve in the image (TLS from the mounted certificate, read-only rootfs): /readyz 200, AdmissionReview denied"

# --- 6. sizes -------------------------------------------------------------------------------------
binary_size=$(stat -c %s "$rootfs/ha-guard")
archive_size=$(stat -c %s "$archive")
log "image $ref: binary $binary_size bytes ($((binary_size / 1024 / 1024)) MiB), archive $archive_size bytes ($((archive_size / 1024 / 1024)) MiB), sha256 $first_sum"
log "passed in $(($(date +%s) - started)) s (first image build $build_seconds s)"

# The ha-guard image: the static, stripped binary at /ha-guard and nothing else (no shell, no libc,
# no CA certificates: in a cluster the API server is trusted through the service account's mounted
# ca.crt and reached by the IP in KUBERNETES_SERVICE_HOST; kubelet mounts /etc/hosts and
# /etc/resolv.conf, which static glibc reads for any name it resolves, without NSS modules).
# scripts/image.sh builds the same image without a daemon, for linux/amd64 and linux/arm64 in one
# index with an SBOM per platform (docs/releases.md); both build the binary with
# scripts/build-static.sh (artifact profile, dependency list embedded by cargo-auditable, which it
# installs with cargo the first time). Build from the repository root:
#
#   docker build -t ghcr.io/ha-guard/ha-guard:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg GIT_COMMIT="$(git rev-parse HEAD)" \
#     --build-arg SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)" .
#
# (podman build / buildah bud take the same arguments.) VERSION must equal Cargo.toml's version;
# GIT_COMMIT is what `ha-guard --version` and the revision label name (.git is not sent to the
# builder); SOURCE_DATE_EPOCH fixes the image's timestamps (BuildKit 0.11+).

# Rust 1.95 on Debian bookworm (glibc 2.36, whose static libraries the binary links). Pinned by
# version; pin by digest too where your registry policy asks for it.
FROM docker.io/library/rust:1.95.0-bookworm AS build
WORKDIR /src
COPY . .
ARG VERSION=""
ARG GIT_COMMIT=""
RUN cargo_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1) && \
    if [ "$VERSION" != "$cargo_version" ]; then \
        echo "error: --build-arg VERSION=$VERSION must equal Cargo.toml's version ($cargo_version); it labels the image" >&2; \
        exit 1; \
    fi
# Cache mounts (BuildKit, buildah): the crates and the target dir survive between builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    HA_GUARD_GIT_COMMIT="$GIT_COMMIT" scripts/build-static.sh /out/ha-guard && \
    /out/ha-guard --version

FROM scratch
ARG VERSION=""
ARG GIT_COMMIT=""
COPY --from=build /out/ha-guard /ha-guard
USER 65532:65532
# 8443: the webhook (TLS); 8080: /healthz, /readyz, /metrics.
EXPOSE 8080 8443
ENTRYPOINT ["/ha-guard"]
CMD ["serve"]
LABEL org.opencontainers.image.title="ha-guard" \
      org.opencontainers.image.description="Kubernetes admission webhook and linter that keeps workloads highly available" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_COMMIT}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/ha-guard/ha-guard"

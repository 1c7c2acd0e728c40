#!/usr/bin/env bash
# Builds the offline peers of `ha-guard check` at pinned release versions, once each, into
# $PEERS_DIR/<tool>-<version>/ (default ~/.cache/ha-guard/peers). Sourced by benches/peers.sh;
# also runnable alone: `bash benches/peers/build.sh`.
# Needs Go >= 1.26.2 (the modules' go lines) and the Go module proxy; kube-linter and Polaris are
# not served by the proxy under their own names, so they are built from a git snapshot of their
# repositories at the release tag (KUBE_LINTER_GIT / POLARIS_GIT: a bare git dir).
set -euo pipefail

PEERS_DIR=${PEERS_DIR:-$HOME/.cache/ha-guard/peers}
KUBE_SCORE_VERSION=v1.20.0
KUBE_LINTER_VERSION=v0.8.3
POLARIS_VERSION=v10.2.2
KYVERNO_VERSION=v1.19.1
# kyverno/policies has no tags: the head of its release-1.17 branch, pinned by commit.
KYVERNO_POLICIES_COMMIT=c6eca9be
KUBE_LINTER_GIT=${KUBE_LINTER_GIT:-/work/.mirror/stackrox+kube-linter/repo}
POLARIS_GIT=${POLARIS_GIT:-/work/.mirror/FairwindsOps+polaris/repo}
KYVERNO_POLICIES_GIT=${KYVERNO_POLICIES_GIT:-/work/.mirror/kyverno+policies/repo}

export PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0
mkdir -p "$PEERS_DIR/src" "$PEERS_DIR/logs"

# Checks out TAG of the bare git dir GIT into $PEERS_DIR/src/NAME (once).
checkout() {
    local git=$1 tag=$2 name=$3 dir="$PEERS_DIR/src/$3"
    if [ ! -d "$dir" ]; then
        [ -d "$git" ] || { echo "no git snapshot at $git (set ${name%%-v*} env var)" >&2; return 1; }
        mkdir -p "$dir.tmp" && git --git-dir="$git" archive "$tag" | tar -x -C "$dir.tmp" && mv "$dir.tmp" "$dir"
    fi
    echo "$dir"
}

build_kube_score() {
    local bin="$PEERS_DIR/kube-score-$KUBE_SCORE_VERSION/kube-score"
    [ -x "$bin" ] && return
    GOBIN="$(dirname "$bin")" go install -ldflags "-s -w -X main.version=${KUBE_SCORE_VERSION#v}" \
        "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION"
}

build_kube_linter() {
    local bin="$PEERS_DIR/kube-linter-$KUBE_LINTER_VERSION/kube-linter" src
    [ -x "$bin" ] && return
    src=$(checkout "$KUBE_LINTER_GIT" "$KUBE_LINTER_VERSION" "kube-linter-$KUBE_LINTER_VERSION")
    (cd "$src" && go build -o "$bin" \
        -ldflags "-s -w -X golang.stackrox.io/kube-linter/internal/version.version=${KUBE_LINTER_VERSION#v}" ./cmd/kube-linter)
}

build_polaris() {
    local bin="$PEERS_DIR/polaris-$POLARIS_VERSION/polaris" src
    [ -x "$bin" ] && return
    src=$(checkout "$POLARIS_GIT" "$POLARIS_VERSION" "polaris-$POLARIS_VERSION")
    (cd "$src" && go build -o "$bin" -ldflags "-s -w -X main.Version=${POLARIS_VERSION#v}" .)
}

# The Kyverno CLI (cmd/cli/kubectl-kyverno). go.mod has a replace line, so `go install mod@v`
# refuses it: download the module, copy it out of the read-only module cache, build inside it.
build_kyverno() {
    local bin="$PEERS_DIR/kyverno-cli-$KYVERNO_VERSION/kyverno" src="$PEERS_DIR/src/kyverno-$KYVERNO_VERSION" mod
    echo "$KYVERNO_VERSION" > "$PEERS_DIR/KYVERNO_VERSION"
    [ -x "$bin" ] && return
    if [ ! -f "$src/go.mod" ]; then
        mod=$(cd /tmp && go mod download -json "github.com/kyverno/kyverno@$KYVERNO_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
        rm -rf "$src" && cp -r "$mod" "$src" && chmod -R u+w "$src"
    fi
    (cd "$src" && go build -o "$bin" \
        -ldflags "-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion=$KYVERNO_VERSION" ./cmd/cli/kubectl-kyverno)
}

# The HA-related ClusterPolicies of the kyverno/policies library, copied from the snapshot.
KYVERNO_POLICIES=(
    other/require-pdb/require-pdb.yaml
    other/pdb-maxunavailable/pdb-maxunavailable.yaml
    other/pdb-minavailable/pdb-minavailable.yaml
    other/require-deployments-have-multiple-replicas/require-deployments-have-multiple-replicas.yaml
    other/deployment-replicas-higher-than-pdb/deployment-replicas-higher-than-pdb.yaml
    other/require-replicas-allow-disruption/require-replicas-allow-disruption.yaml
    other/topologyspreadconstraints-policy/topologyspreadconstraints-policy.yaml
    best-practices/require-probes/require-probes.yaml
)
fetch_kyverno_policies() {
    local dir="$PEERS_DIR/kyverno-policies-$KYVERNO_POLICIES_COMMIT" p
    [ -f "$dir/LICENSE" ] && { echo "$dir"; return; }
    mkdir -p "$dir"
    git --git-dir="$KYVERNO_POLICIES_GIT" show "$KYVERNO_POLICIES_COMMIT:LICENSE" > "$dir/LICENSE.tmp"
    for p in "${KYVERNO_POLICIES[@]}"; do
        git --git-dir="$KYVERNO_POLICIES_GIT" show "$KYVERNO_POLICIES_COMMIT:$p" > "$dir/$(basename "$p")"
    done
    mv "$dir/LICENSE.tmp" "$dir/LICENSE"
    echo "$dir"
}

build_peers() {
    local t
    for t in kube_score kube_linter polaris kyverno; do
        if ! "build_$t" > "$PEERS_DIR/logs/$t.build.log" 2>&1; then
            echo "building $t failed: see $PEERS_DIR/logs/$t.build.log" >&2; return 1
        fi
    done
    fetch_kyverno_policies > /dev/null
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then build_peers; fi

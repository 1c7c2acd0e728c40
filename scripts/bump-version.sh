#!/usr/bin/env bash
# Sets the release version. Cargo.toml's package version is the one source: the binary reports it
# (--version, version --json) and everything else is written from it here, so a bump is one command:
#
#   scripts/bump-version.sh VERSION
#
# - Cargo.toml [package] version, and Cargo.lock's entry for ha-guard;
# - charts/ha-guard/Chart.yaml version and appVersion (the chart is released with ha-guard, under
#   the same version) and the image tag in its artifacthub.io/images annotation;
# - manifests/ rendered again from the chart (scripts/render-manifests.sh: labels name the version);
# - CHANGELOG.md: the Unreleased section becomes "## [VERSION] - today" under a new empty
#   Unreleased, and the compare links at the bottom follow.
#
# Then review `git diff`, commit, and build the release with scripts/release.sh VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "bump-version.sh: error: $*" >&2; exit 1; }

new=${1:?usage: scripts/bump-version.sh VERSION (SemVer, without a leading v)}
new=${new#v}
[[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "$new is not a SemVer version (MAJOR.MINOR.PATCH[-PRE])"
old=$(cargo metadata --no-deps --format-version 1 --offline | jq -r '.packages[] | select(.name == "ha-guard") | .version')
[[ $old != "$new" ]] || die "the version is already $new"
grep -q '^## \[Unreleased\]' CHANGELOG.md || die "CHANGELOG.md has no '## [Unreleased]' section to release"

# Cargo.toml: the first `version =` line, which is [package]'s.
sed -i "0,/^version = \"$old\"\$/s//version = \"$new\"/" Cargo.toml
cargo update --offline --workspace --quiet
# Chart.yaml: version, appVersion and the image tag (the image name is the chart's values.yaml
# image.repository; only the tag changes).
sed -i -e "s/^version: $old\$/version: $new/" -e "s/^appVersion: \"$old\"\$/appVersion: \"$new\"/" \
    -e "s|^\(      image: [^:]*\):$old\$|\1:$new|" charts/ha-guard/Chart.yaml
scripts/render-manifests.sh >/dev/null
today=$(date -u +%Y-%m-%d)
python3 - "$old" "$new" "$today" <<'PY'
import re, sys
old, new, today = sys.argv[1:]
text = open("CHANGELOG.md").read()
text = text.replace("## [Unreleased]\n", f"## [Unreleased]\n\n## [{new}] - {today}\n", 1)
text = re.sub(r"^\[Unreleased\]: (.*)/compare/v[^.]+\.[^.]+\.[^.]+\.\.\.HEAD$",
              lambda m: f"[Unreleased]: {m.group(1)}/compare/v{new}...HEAD\n[{new}]: {m.group(1)}/compare/v{old}...v{new}",
              text, count=1, flags=re.M)
open("CHANGELOG.md", "w").write(text)
PY
echo "bump-version.sh: $old -> $new in Cargo.toml, Cargo.lock, charts/ha-guard/Chart.yaml, manifests/ and CHANGELOG.md" >&2

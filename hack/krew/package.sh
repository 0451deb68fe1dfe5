#!/usr/bin/env bash
# Build the krew archive of `kubectl kdra` and its manifest:
#   hack/krew/package.sh [OUT_DIR]      (default: dist/)
# → OUT_DIR/kubectl-kdra-v<version>.tar.gz (the launcher hack/krew/kubectl-kdra + kdra's
#   wheel) and OUT_DIR/kdra.yaml (hack/krew/kdra.yaml with the archive's sha256).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-dist}"
python="${PYTHON:-.venv/bin/python}"
version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$stage" . >&2
cp hack/krew/kubectl-kdra "$stage/"
mkdir -p "$out"
archive="$out/kubectl-kdra-v$version.tar.gz"
tar -C "$stage" -czf "$archive" kubectl-kdra "kdra-$version-py3-none-any.whl"
sha=$(sha256sum "$archive" | cut -d' ' -f1)
sed -e "s/^  version: v.*/  version: v$version/" \
    -e "s|download/v[^/]*/kubectl-kdra-v[^ ]*\.tar\.gz|download/v$version/kubectl-kdra-v$version.tar.gz|" \
    -e "s/sha256: .*/sha256: \"$sha\"/" hack/krew/kdra.yaml > "$out/kdra.yaml"
echo "$archive"
echo "$out/kdra.yaml"

#!/usr/bin/env bash
# Build the krew archive of `kubectl kdra` and its manifest:
#   hack/krew/package.sh [OUT_DIR] [URL_BASE]      (default: dist/, file://<OUT_DIR>)
# → OUT_DIR/kubectl-kdra-v<version>-linux-amd64.tar.gz (the single-file plugin that
#   hack/krew/build_plugin.py builds) and OUT_DIR/kdra.yaml (hack/krew/kdra.yaml
#   with the version, the archive's URL under URL_BASE — where you publish it — and its sha256).
# Install from the local files: kubectl krew install --manifest=OUT_DIR/kdra.yaml \
#   --archive=OUT_DIR/kubectl-kdra-v<version>-linux-amd64.tar.gz
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-dist}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
base="${2:-file://$out}"
python="${PYTHON:-.venv/bin/python}"
version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
"$python" hack/krew/build_plugin.py "$stage/kubectl-kdra" >/dev/null
name="kubectl-kdra-v$version-linux-amd64.tar.gz"
archive="$out/$name"
tar -C "$stage" --sort=name --mtime=2020-01-01 --owner=0 --group=0 --numeric-owner \
  -cf - kubectl-kdra | gzip -n > "$archive"
sha=$(sha256sum "$archive" | cut -d' ' -f1)
sed -e "s/^  version: v.*/  version: v$version/" \
    -e "s|^    uri: .*|    uri: $base/$name|" \
    -e "s/^    sha256: .*/    sha256: \"$sha\"/" hack/krew/kdra.yaml > "$out/kdra.yaml"
echo "$archive"
echo "$out/kdra.yaml"

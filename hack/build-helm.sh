#!/usr/bin/env bash
# Build helm (the chart tests' `helm lint` / `helm template`) from Go modules, like the
# control-plane binaries: helm.sh/helm/v3 at a pinned release, fetched through the Go module
# proxy and compiled here with the release's own ldflags (version, and the Kubernetes version
# `helm template` assumes, taken from the client-go it is built with). Nothing is vendored.
# Cached outside the repo:  ${KDRA_CACHE:-~/.cache/kdra}/bin/helm-v<version>/helm
# A second run finds it and returns at once. The last line printed is the binary's path.
set -euo pipefail

HELM_VERSION="${KDRA_HELM_VERSION:-3.22.0}"
CACHE="${KDRA_CACHE:-$HOME/.cache/kdra}"
BIN="$CACHE/bin/helm-v$HELM_VERSION"

if [[ -x "$BIN/helm" ]]; then
  echo "$BIN/helm"
  exit 0
fi
command -v go >/dev/null || { echo "build-helm: 'go' is not on PATH" >&2; exit 1; }

WORK="$CACHE/build/helm-v$HELM_VERSION"
mkdir -p "$WORK"
cd "$WORK"
echo "build-helm: building helm v$HELM_VERSION in $WORK (first time only; a few minutes)" >&2
[[ -f go.mod ]] || go mod init kdra.dev/helm >&2
export GOFLAGS="-mod=mod"
go get "helm.sh/helm/v3@v$HELM_VERSION" >&2

# As helm's Makefile: the default Kubernetes version is client-go's minor, major 1.
client_go=$(go list -f '{{.Version}}' -m k8s.io/client-go)   # v0.<minor>.<patch>
minor=$(echo "$client_go" | cut -d. -f2)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
done

out="$BIN.partial"
rm -rf "$out"; mkdir -p "$out"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/" helm.sh/helm/v3/cmd/helm >&2
rm -rf "$BIN"; mv "$out" "$BIN"
"$BIN/helm" version --short >&2
echo "$BIN/helm"

#!/usr/bin/env bash
# Build the real Kubernetes control-plane binaries that kdra's tests and demo run against.
#
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kubelet come from the pinned
# k8s.io/kubernetes release, etcd from go.etcd.io/etcd/server/v3 at the version that release
# pins. Everything is fetched through the Go module proxy and compiled here; nothing is vendored
# into this repository. Binaries are cached outside the repo, keyed by version:
#     ${KDRA_CACHE:-~/.cache/kdra}/bin/v<version>/
# A second run finds them and returns at once. The last line printed is the binary directory.
set -euo pipefail

KUBE_VERSION="${KDRA_KUBE_VERSION:-1.35.4}"
CACHE="${KDRA_CACHE:-$HOME/.cache/kdra}"
BIN="$CACHE/bin/v$KUBE_VERSION"
TOOLS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet etcd)

have_all() {
  local t
  for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || return 1; done
}

if have_all; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "build-control-plane: 'go' is not on PATH" >&2; exit 1; }

WORK="$CACHE/build/v$KUBE_VERSION"
mkdir -p "$WORK/etcd"
cd "$WORK"
echo "build-control-plane: building Kubernetes v$KUBE_VERSION binaries in $WORK (first time only; 10-25 min on 2 cores)" >&2

# The kubernetes module's go.mod points its staging modules (k8s.io/api, ...) at ./staging, which
# is ignored for a dependency: pin each to its published v0.<minor>.<patch> instead.
modfile=$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
staging_version="v0.${KUBE_VERSION#*.}"
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$modfile")
go_directive=$(awk '$1 == "go" {print $2; exit}' "$modfile")

{
  echo "module kdra.dev/controlplane"
  echo
  echo "go $go_directive"
  echo
  echo "replace ("
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$modfile"
  echo ")"
} > go.mod

cat > etcd/main.go <<'GO'
// Command etcd starts etcd through its own entry point, so the binary matches the pinned release.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO

export GOFLAGS="-mod=mod"
go get "k8s.io/kubernetes@v$KUBE_VERSION" "go.etcd.io/etcd/server/v3@$etcd_version" >&2

minor="${KUBE_VERSION#*.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=v$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

out="$BIN.partial"
rm -rf "$out"; mkdir -p "$out"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl \
  k8s.io/kubernetes/cmd/kubelet \
  ./etcd >&2
rm -rf "$BIN"; mv "$out" "$BIN"
have_all || { echo "build-control-plane: missing binaries in $BIN" >&2; exit 1; }
echo "$BIN"

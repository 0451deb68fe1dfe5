#!/usr/bin/env bash
# Build the real node runtime that kdra's real-node tier runs: containerd 2.x (with its runc shim
# and ctr) and crictl, from Go modules, cached outside the repository like the control plane:
#     ${KDRA_CACHE:-~/.cache/kdra}/bin/containerd-v<version>/
# kubelet comes from hack/build-control-plane.sh (same Kubernetes release). runc and the CNI
# plugins are Debian packages (kdra_devenv.node installs them when missing). A second run
# returns at once.
# The last line printed is the binary directory.
set -euo pipefail

CONTAINERD_VERSION="${KDRA_CONTAINERD_VERSION:-2.2.9}"
CRICTL_VERSION="${KDRA_CRICTL_VERSION:-1.34.0}"
CACHE="${KDRA_CACHE:-$HOME/.cache/kdra}"
BIN="$CACHE/bin/containerd-v$CONTAINERD_VERSION"
TOOLS=(containerd containerd-shim-runc-v2 ctr crictl)

have_all() {
  local t
  for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || return 1; done
}

if have_all; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "build-node: 'go' is not on PATH" >&2; exit 1; }
WORK="$CACHE/build/containerd-v$CONTAINERD_VERSION"
mkdir -p "$WORK"
cd "$WORK"
echo "build-node: building containerd v$CONTAINERD_VERSION and crictl v$CRICTL_VERSION in $WORK (first time only; ~4 min on 2 cores)" >&2

go_directive=$(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//').0
printf 'module kdra.dev/node\n\ngo %s\n' "$go_directive" > go.mod
export GOFLAGS="-mod=mod"
go get "github.com/containerd/containerd/v2@v$CONTAINERD_VERSION" \
       "sigs.k8s.io/cri-tools@v$CRICTL_VERSION" >&2

ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION"
ldflags+=" -X github.com/containerd/containerd/v2/version.Revision=go-modules"
ldflags+=" -X sigs.k8s.io/cri-tools/pkg/version.Version=v$CRICTL_VERSION"
out="$BIN.partial"
rm -rf "$out"; mkdir -p "$out"
CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "$ldflags" -o "$out/" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr \
  sigs.k8s.io/cri-tools/cmd/crictl >&2
rm -rf "$BIN"; mv "$out" "$BIN"
have_all || { echo "build-node: missing binaries in $BIN" >&2; exit 1; }
echo "$BIN"

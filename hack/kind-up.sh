#!/usr/bin/env bash
# kdra on a local kind cluster, with fake GPUs, in one command:
#
#   hack/kind-up.sh            # then: kubectl --context kind-kdra get pods -o wide
#   hack/kind-up.sh --flavour kdra     # kdra's own CRDs and pod annotations, see below
#   kind delete cluster --name kdra
#
# --flavour native (the default) installs manifests/overlays/native: the operator and agents
# on the built-in resource.k8s.io/v1 kinds (kind's node images of Kubernetes >= 1.34 serve
# them), the cluster created with kube-controller-manager's resourceclaim-controller off
# (--controllers=*,-resourceclaim-controller: kdra's claim controller replaces it; on a
# cluster created earlier with it on, kdra sees it and leaves claims to it), the default
# namespace labelled so the webhook gives its pods with claims kdra-scheduler, and the seed's
# example as users write it (manifests/examples/native: the cats, published by the agent on
# kdra-worker3); the agents are the kubelet's DRA plugin for gpu.kdra.dev and the cats'
# driver (components/native-agent, overlays/native). --flavour kdra installs
# manifests/overlays/kind: kdra's CRDs and pod annotations, for clusters without native DRA,
# with the GPU examples and the v1 examples.
#
# Needs docker, kind (>= 0.20) and kubectl (>= 1.28, for `-k` and ValidatingAdmissionPolicy).
# It
#   1. creates the kind cluster `kdra` (one control plane, three workers: kdra-worker,
#      kdra-worker2, kdra-worker3 — manifests/overlays/kind/inventory/ has a fake inventory
#      for each: H100s, H100s + A100s, the seed article's cats) unless it exists, with NRI and
#      CDI on in the nodes' containerd (containerdConfigPatches; the kubelet injects the
#      native flavour's CDI devices through the runtime's CDI support), then, in the kdra
#      flavour, checks that each node's containerd really has NRI on: the agent (an NRI
#      plugin, like on the real node of manifests/overlays/node) gives containers exactly
#      their devices through it. Where it is off (a cluster created earlier without the
#      patch, containerd < 1.7) the script says so and goes on: containers then see their
#      devices only through the webhook's env (not tamper-proof; docs/architecture.md,
#      "Device exposure"),
#   2. builds the image kdra:dev (Dockerfile) and loads it into the cluster's nodes,
#   3. installs the CRDs, then the flavour's overlay (operator, agents, RBAC, policies),
#   4. waits for the operator (its webhook must answer before pods with claims can be
#      created) and the agents' slices,
#   5. native: applies the seed's example (manifests/examples/native) in namespace default;
#      kdra: applies manifests/examples/gpu and the seed's cats (manifests/examples/seed: the
#      agent on kdra-worker3 publishes the cats; both v1alpha3), and the v1 examples
#      (manifests/examples/v1),
#   6. prints what got allocated and the pods.
#
# Re-running it is safe: every step is an apply or a wait. (It cannot run on kdra's CI
# machine, which has no Docker; the manifests it applies are checked there against a real
# API server by tests/e2e/test_manifests_build.py.)
set -euo pipefail

cd "$(dirname "$0")/.."
FLAVOUR=native
PRINT_CONFIG=false
while (( $# )); do
  case "$1" in
    --flavour) FLAVOUR=${2:-}; shift 2 ;;
    --flavour=*) FLAVOUR=${1#--flavour=}; shift ;;
    # Print the kind cluster configuration this flavour creates, and the overlay it installs
    # (a comment), then stop: needs neither docker nor kind (tests/unit/hack/test_kind_up.py).
    --print-config) PRINT_CONFIG=true; shift ;;
    *) echo "kind-up: unknown argument $1" \
            "(usage: hack/kind-up.sh [--flavour native|kdra] [--print-config])" >&2
       exit 2 ;;
  esac
done
case "$FLAVOUR" in
  kdra) OVERLAY=manifests/overlays/kind; SLICES=resourceslices.resource.kdra.dev ;;
  native) OVERLAY=manifests/overlays/native; SLICES=resourceslices.resource.k8s.io ;;
  *) echo "kind-up: --flavour must be native or kdra (got '$FLAVOUR')" >&2; exit 2 ;;
esac
CLUSTER=kdra          # the inventory files are named after this cluster's nodes
IMAGE=kdra:dev        # what manifests/overlays/kind deploys
KUBECTL=(kubectl --context "kind-${CLUSTER}")

# The kind cluster: NRI on (containerd 2.x has it on by default, 1.7 off) on its standard
# socket, which the agent's DaemonSet mounts in the kdra flavour; CDI on with /var/run/cdi,
# where the agent writes its specs. In the native flavour kube-controller-manager runs every
# controller but resourceclaim-controller (kdra's claim controller is its drop-in
# replacement): one patch per kubeadm config version, as kind applies a versioned patch only
# to its version — v1beta3 (kind's node images before Kubernetes 1.36; extraArgs a map) and
# v1beta4 (1.36 on; extraArgs a list of name/value). The kdra flavour keeps kubeadm's default,
# every controller.
kind_config() {
  cat <<KIND
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
KIND
  if [[ "$FLAVOUR" == native ]]; then
    cat <<KIND
kubeadmConfigPatches:
- |-
  apiVersion: kubeadm.k8s.io/v1beta3
  kind: ClusterConfiguration
  controllerManager:
    extraArgs:
      controllers: "*,-resourceclaim-controller"
- |-
  apiVersion: kubeadm.k8s.io/v1beta4
  kind: ClusterConfiguration
  controllerManager:
    extraArgs:
    - name: controllers
      value: "*,-resourceclaim-controller"
KIND
  fi
  cat <<KIND
containerdConfigPatches:
- |-
  [plugins."io.containerd.nri.v1.nri"]
    disable = false
    socket_path = "/var/run/nri/nri.sock"
  [plugins."io.containerd.grpc.v1.cri"]
    enable_cdi = true
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
nodes:
- role: control-plane
- role: worker
- role: worker
- role: worker
KIND
}

if [[ "$PRINT_CONFIG" == true ]]; then
  echo "# hack/kind-up.sh --flavour ${FLAVOUR}: installs ${OVERLAY}"
  kind_config
  exit 0
fi

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "kind-up: $tool is not installed" >&2; exit 1; }
done

step() { printf '\n== %s\n' "$*"; }

step "kind cluster ${CLUSTER}"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "exists"
else
  kind_config | kind create cluster --name "$CLUSTER" --wait 120s --config -
fi

# NRI matters in the kdra flavour only: the native flavour's devices are injected by the
# kubelet and the runtime's CDI support.
if [[ "$FLAVOUR" == kdra ]]; then
  step "NRI in the nodes' containerd"
  nri_off=()
  for node in $(kind get nodes --name "$CLUSTER"); do
    version=$(docker exec "$node" containerd --version | awk '{print $3}')
    # `config dump` prints the merged configuration; the NRI plugin's table says disable = ...
    nri=$(docker exec "$node" containerd config dump 2>/dev/null \
          | awk '/io\.containerd\.nri\.v1\.nri/ {found=1; next} found && /^ *\[/ {exit}
                 found && /^ *disable *=/ {print $3; exit}')
    if [[ "$nri" == "false" ]]; then
      echo "$node: containerd $version, NRI on"
    else
      echo "$node: containerd $version, NRI ${nri:+disable = $nri}${nri:-absent}" >&2
      nri_off+=("$node")
    fi
  done
  if (( ${#nri_off[@]} )); then
    cat >&2 <<MSG
kind-up: NRI is off in ${nri_off[*]}. kdra's agent runs there without its NRI plugin:
containers see their devices only through the env the webhook injects (not tamper-proof).
To turn it on, recreate the cluster (kind delete cluster --name ${CLUSTER}; hack/kind-up.sh),
with a node image whose containerd is 1.7 or newer (kind >= 0.20).
MSG
  fi
fi

step "image ${IMAGE}"
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

step "CRDs"
"${KUBECTL[@]}" apply --server-side -k manifests/base/crds
"${KUBECTL[@]}" wait --for condition=Established --timeout 60s crd \
  -l app.kubernetes.io/part-of=kdra

step "kdra, ${FLAVOUR} flavour (${OVERLAY})"
"${KUBECTL[@]}" apply --server-side -k "$OVERLAY"
# A changed image under the same tag is not picked up by running pods: restart them.
"${KUBECTL[@]}" -n kdra-system rollout restart deployment/kdra-operator daemonset/kdra-agent
"${KUBECTL[@]}" -n kdra-system rollout status deployment/kdra-operator --timeout 300s
"${KUBECTL[@]}" -n kdra-system rollout status daemonset/kdra-agent --timeout 300s

step "waiting for the agents' ResourceSlices"
for _ in $(seq 1 60); do
  pools=$("${KUBECTL[@]}" get "$SLICES" --no-headers 2>/dev/null | wc -l)
  [[ "$pools" -ge 3 ]] && break
  sleep 2
done
"${KUBECTL[@]}" get "$SLICES"

if [[ "$FLAVOUR" == native ]]; then
  step "the seed's example on native DRA (manifests/examples/native, namespace default)"
  "${KUBECTL[@]}" label namespace default --overwrite resource.kdra.dev/scheduler=kdra-scheduler
  "${KUBECTL[@]}" apply -k manifests/examples/native -n default
  "${KUBECTL[@]}" wait --for condition=PodScheduled --timeout 120s pod/pod-with-cats \
    || echo "(pod-with-cats is not scheduled yet: kubectl kdra why pod-with-cats)"
  # The kubelet asks the agent on kdra-worker3 (the cats' DRA plugin) to prepare the claims,
  # then the runtime injects their CDI devices; the image is pulled from the internet.
  "${KUBECTL[@]}" wait --for condition=Ready --timeout 300s pod/pod-with-cats \
    || echo "(pod-with-cats is not ready yet: kubectl describe pod pod-with-cats)"
  "${KUBECTL[@]}" get resourceclaims.resource.k8s.io -o wide
  "${KUBECTL[@]}" get pods -o wide
  echo
  echo "The kdra flavour:  hack/kind-up.sh --flavour kdra (on a new cluster)"
  echo "Tear down:        kind delete cluster --name ${CLUSTER}"
  exit 0
fi

step "examples: GPUs (manifests/examples/gpu) and the seed's cats"
"${KUBECTL[@]}" apply -k manifests/examples/gpu
"${KUBECTL[@]}" apply -k manifests/examples/seed

step "examples in resource.kdra.dev/v1 (manifests/examples/v1: namespaces gpu-test1..5)"
"${KUBECTL[@]}" apply -k manifests/examples/v1

step "waiting for the example pods (images are pulled from the internet)"
"${KUBECTL[@]}" wait --for condition=Ready --timeout 300s pod \
  single-gpu-pod shared-gpu-pod-a shared-gpu-pod-b gpu-pair-pod all-a100-pod pod-with-cats \
  || echo "(not all pods are ready yet: see kdra describe and kubectl describe pod)"

step "the agents' NRI plugin"
"${KUBECTL[@]}" -n kdra-system logs daemonset/kdra-agent --tail=-1 2>/dev/null \
  | grep -m1 "NRI: registered" || echo "(no agent registered as NRI plugin yet: see above)"

step "what got allocated"
"${KUBECTL[@]}" -n kdra-system exec deployment/kdra-operator -- kdra describe
"${KUBECTL[@]}" get pods -o wide
"${KUBECTL[@]}" get kclaim -A
echo
echo "A pod's devices:  ${KUBECTL[*]} logs gpu-pair-pod"
echo "Tear down:        kind delete cluster --name ${CLUSTER}"

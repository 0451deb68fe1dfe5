"""kdra deployed in the native flavour on the real node, once for the tests of this package.

The cluster (:class:`kdra_devenv.realcluster.RealCluster` with ``native=True``): the control
plane runs kube-scheduler and kube-controller-manager's resourceclaim-controller (upstream's:
they make and allocate the pods' ``resource.k8s.io/v1`` claims), the node's kubelet reports
device health (gate ResourceHealthStatus) and its containerd requires no NRI plugin, and
``manifests/overlays/node-native`` runs kdra's agent as the kubelet's DRA plugin for the node's
two drivers (GPUs, the seed's cats). The tests' DeviceClasses and templates are native
objects (:data:`NATIVE_OBJECTS`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kdra_devenv.realcluster import NAMESPACE, RealCluster
from tests.node.conftest import deployed_cluster

GPU = "gpu.kdra.dev"
CATS = "resource-driver.example.com"
NATIVE_CLAIMS = "resourceclaims.resource.k8s.io"
NATIVE_SLICES = "resourceslices.resource.k8s.io"
NATIVE_OBJECTS = f"""
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {GPU}}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == "{GPU}"'}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: cat.example.com}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == "{CATS}"'}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: one-gpu, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: {GPU}}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: white-cat, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: cat
        exactly:
          deviceClassName: cat.example.com
          selectors:
          - cel: {{expression: 'device.attributes["{CATS}"].color == "white"'}}
"""


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            host_before: dict[str, str]) -> Iterator[RealCluster]:
    for real in deployed_cluster(tmp_path_factory.mktemp("native-node"), native=True):
        real.kubectl("apply", "-f", "-", input=NATIVE_OBJECTS)
        yield real


def get_json(cluster: RealCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def agent_pod(cluster: RealCluster) -> dict[str, Any]:
    """The agent's running pod (the newest, after a restart)."""
    pods = [p for p in get_json(cluster, "pods", "-n", NAMESPACE, "-l",
                                "app.kubernetes.io/component=agent")["items"]
            if not p["metadata"].get("deletionTimestamp")]
    (pod,) = pods
    return pod

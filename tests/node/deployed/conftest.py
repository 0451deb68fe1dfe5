"""kdra deployed as a user would on the real node, once for the tests of this package.

The cluster (:class:`kdra_devenv.realcluster.RealCluster`) builds kdra's image from the
Dockerfile (cached by its inputs), starts a control plane and the node, applies the CRDs, the
node overlay and waits for the operator's and agent's pods and the agent's slices. Its set-up
times are printed (cold: nothing cached; cached: image and binaries there). When a test fails,
the cluster's pods, events and kubelet lines are attached to its report (tests/node/conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kdra_devenv.controlplane import repo_root
from kdra_devenv.realcluster import RealCluster
from tests.node.conftest import deployed_cluster


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            host_before: dict[str, str]) -> Iterator[RealCluster]:
    yield from deployed_cluster(tmp_path_factory.mktemp("real-node"))


@pytest.fixture
def gpu_class(cluster: RealCluster) -> None:
    """The DeviceClass gpu.kdra.dev of manifests/examples/gpu (each test may run alone)."""
    cluster.kubectl("apply", "-f", str(repo_root() / "manifests" / "examples" / "gpu" /
                                       "deviceclass.yaml"))


def get_json(cluster: RealCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)

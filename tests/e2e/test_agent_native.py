"""The node agent in the native flavour against a real API server: ``resource.k8s.io/v1``
ResourceSlices (published as in the kdra flavour, re-created when deleted — the kubelet wipes
its node's slices when it starts — and not rewritten while unchanged), and the agent as the
kubelet's DRA plugin: the test plays the kubelet over the agent's real sockets, on native
claims allocated as kube-scheduler would (status written by the test).

The real kubelet, kube-scheduler and containerd run in tests/node/native.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import GPU, AgentFactory, unique
from tests.e2e.conftest import get_json
from tests.e2e.procs import wait_for
from tests.unit.agent.kubelet_side import Claim as KubeletClaim
from tests.unit.agent.kubelet_side import Kubelet

agents = agent_helpers.agents  # the fixture

CATS = "resource-driver.example.com"
NATIVE_SLICES = "resourceslices.resource.k8s.io"
NATIVE_CLAIMS = "resourceclaims.resource.k8s.io"
INVENTORY = f"""
gpus: ['2 x H100-80GB']
devices:
- name: kitten-0
  driver: {CATS}
  attributes: {{color: white, size: small}}
"""


@pytest.fixture
def kubelet_dirs() -> Iterator[Path]:
    """Short paths for the sockets (at most 107 bytes each)."""
    path = Path(tempfile.mkdtemp(prefix="kn-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def native_agent(agents: AgentFactory, node: str, dirs: Path, *extra: str) -> Any:
    return agents(node, INVENTORY, "--flavour", "native",
                  "--kubelet-registry-dir", str(dirs / "reg"),
                  "--kubelet-plugins-dir", str(dirs / "plugins"), *extra)


def native_slices(plane: ControlPlane, node: str) -> list[dict[str, Any]]:
    items = get_json(plane, NATIVE_SLICES, "--field-selector", f"spec.nodeName={node}")["items"]
    return sorted(items, key=lambda s: s["metadata"]["name"])


def test_native_slices_are_published_kept_and_never_rewritten_unchanged(
        control_plane: ControlPlane, agents: AgentFactory, kubelet_dirs: Path) -> None:
    node = unique("nat")
    agent = native_agent(agents, node, kubelet_dirs, "--resync-period", "1")
    slices = wait_for(lambda: len(native_slices(control_plane, node)) == 2 and
                      native_slices(control_plane, node), what="the node's native slices")
    assert {s["spec"]["driver"] for s in slices} == {GPU, CATS}
    assert all(s["apiVersion"] == "resource.k8s.io/v1" and s["spec"]["pool"]["name"] == node
               for s in slices)
    gpus = next(s for s in slices if s["spec"]["driver"] == GPU)
    assert [d["name"] for d in gpus["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert gpus["spec"]["devices"][0]["attributes"]["productName"]["string"].startswith(
        "NVIDIA H100")
    assert gpus["metadata"]["ownerReferences"][0]["kind"] == "Node"
    # Nothing in kdra's own group for this node: the flavour decides where slices go.
    kdra_slices = get_json(control_plane, agent_helpers.SLICES, "--field-selector",
                           f"spec.nodeName={node}")["items"]
    assert kdra_slices == []

    # Unchanged slices are not rewritten by the resyncs (one a second): what the API server
    # answers compares equal to what the agent would write, so no generation churns.
    published = agent.metric("kdra_agent_slice_publishes_total")
    versions = {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in slices}
    time.sleep(3.5)  # three resync periods
    assert agent.metric("kdra_agent_slice_publishes_total") == published
    assert {s["metadata"]["name"]: s["metadata"]["resourceVersion"]
            for s in native_slices(control_plane, node)} == versions

    # The kubelet deletes every slice of its node when it starts: they come back.
    control_plane.kubectl("delete", NATIVE_SLICES, "--field-selector", f"spec.nodeName={node}")
    back = wait_for(lambda: len(native_slices(control_plane, node)) == 2 and
                    native_slices(control_plane, node), what="the slices published again")
    assert {s["spec"]["pool"]["generation"] for s in back} == \
        {max(s["spec"]["pool"]["generation"] for s in slices) + 1}


def create_native_claim(plane: ControlPlane, namespace: str, name: str,
                        results: list[tuple[str, str, str]]) -> KubeletClaim:
    """A native claim allocated and reserved as kube-scheduler would leave it."""
    requests = sorted({"gpu" if driver == GPU else "cat" for driver, _, _ in results})
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [
                {"name": r, "exactly": {"deviceClassName": "example"}} for r in requests]}}}
    plane.kubectl("create", "-f", "-", input=json.dumps(body))
    status = {"allocation": {"devices": {"results": [
        {"request": "gpu" if driver == GPU else "cat", "driver": driver, "pool": pool,
         "device": device} for driver, pool, device in results]}},
        "reservedFor": [{"resource": "pods", "name": "consumer", "uid": str(uuid.uuid4())}]}
    plane.kubectl("patch", NATIVE_CLAIMS, name, "-n", namespace, "--subresource=status",
                  "--type=merge", "-p", json.dumps({"status": status}))
    claim = get_json(plane, NATIVE_CLAIMS, name, "-n", namespace)
    return KubeletClaim(namespace, claim["metadata"]["uid"], name)


async def _kubelet_session(endpoint: Path, registration: Path, mine: KubeletClaim,
                           theirs: KubeletClaim) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with Kubelet(registration) as kubelet:
        seen["info"] = await kubelet.info()
        await kubelet.notify(True)
    async with Kubelet(endpoint) as kubelet:
        seen["first"] = await kubelet.prepare(mine)
        seen["again"] = await kubelet.prepare(mine)
        seen["theirs"] = await kubelet.prepare(theirs)
        seen["unprepare"] = await kubelet.unprepare(mine)
        seen["unprepare again"] = await kubelet.unprepare(mine)
    return seen


def test_the_kubelet_prepares_native_claims_of_its_node_only(
        control_plane: ControlPlane, agents: AgentFactory, kubelet_dirs: Path,
        namespace: str) -> None:
    node = unique("nat")
    agent = native_agent(agents, node, kubelet_dirs)
    mine = create_native_claim(control_plane, namespace, "mine",
                               [(GPU, node, "gpu-1"), (CATS, node, "kitten-0")])
    theirs = create_native_claim(control_plane, namespace, "theirs",
                                 [(GPU, "another-node", "gpu-1")])
    endpoint = kubelet_dirs / "plugins" / GPU / "dra.sock"
    seen = asyncio.run(_kubelet_session(endpoint, kubelet_dirs / "reg" / f"{GPU}-reg.sock",
                                        mine, theirs))

    assert seen["info"].endpoint == str(endpoint)
    first = seen["first"][mine.uid]
    assert first.error == ""
    assert [(d.request_names, d.device, d.cdi_device_ids) for d in first.devices] == [
        (("gpu",), "gpu-1", (f"kdra.dev/gpu={mine.uid}-gpu-1",))]
    assert seen["again"] == seen["first"]
    assert "allocated in pool another-node" in seen["theirs"][theirs.uid].error
    assert seen["unprepare"] == {mine.uid: ""} == seen["unprepare again"]
    # Prepared whole while it was (both drivers' CDI specs), nothing left after unprepare,
    # and the other node's claim never touched the disk.
    log = agent.proc.tail(200)
    assert f"prepared claim {namespace}/mine ({mine.uid}): {GPU}/gpu-1, {CATS}/kitten-0" in log
    assert agent.cdi_files() == [] and agent.checkpoint() == {}
    # The kubelet reads the answer: the native flavour writes no status.devices.
    claim = get_json(control_plane, NATIVE_CLAIMS, "mine", "-n", namespace)
    assert "devices" not in claim["status"]
    assert agent.metric('kdra_agent_kubelet_calls_total{method="NodePrepareResources",'
                        'result="error"}') == 1

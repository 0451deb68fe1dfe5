"""The kubelet plugin's decisions without I/O: which claims a node prepares, what the kubelet
is told, device health, and which callers the socket's permissions allow."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.agent.core.checkpoint import PreparedDevice
from kdra.agent.core.kubelet import (
    HEALTH_HEALTHY,
    HEALTH_UNHEALTHY,
    Claim,
    Device,
    DeviceHealth,
    claim_results,
    dra_socket,
    health_report,
    kubelet_devices,
    peer_may_connect,
    registration_socket,
)

NODE = "node-1"
GPU = "gpu.kdra.dev"
CATS = "resource-driver.example.com"
REF = Claim("ns", "uid-1", "pod-gpu")


def claim(*results: tuple[str, str, str], uid: str = "uid-1",
          allocated: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {"devices": {"results": [
            {"request": "gpu", "driver": d, "pool": p, "device": n} for d, p, n in results]}}
    return {"metadata": {"namespace": "ns", "name": "pod-gpu", "uid": uid}, "status": status}


@pytest.mark.parametrize(("obj", "expected"), [
    (None, "ResourceClaim ns/pod-gpu not found"),
    (claim((GPU, NODE, "gpu-0"), uid="uid-2"), "has UID uid-2, not uid-1"),
    (claim(allocated=False), "ResourceClaim ns/pod-gpu is not allocated"),
    (claim((GPU, "node-2", "gpu-0")), "devices of driver gpu.kdra.dev are allocated in pool "
                                      "node-2, not on node node-1"),
    # One device here and one on another node: still another node's devices, refused whole.
    (claim((GPU, NODE, "gpu-0"), (GPU, "node-2", "gpu-1")), "allocated in pool node-2"),
    (claim((CATS, NODE, "kitten-0")), "has no device of driver gpu.kdra.dev on node node-1"),
    (claim(("other.example.com", NODE, "x")), "has no device of driver gpu.kdra.dev"),
])
def test_claims_this_node_does_not_prepare(obj: dict[str, Any] | None, expected: str) -> None:
    decided = claim_results(obj, REF, node=NODE, driver=GPU, drivers=(GPU, CATS))
    assert isinstance(decided, str)
    assert expected in decided


def test_a_claim_is_prepared_whole_for_every_driver_of_the_node() -> None:
    """The GPU plugin's call prepares the claim's cat too (one checkpoint entry); another
    driver's results in another pool are not this node's business."""
    obj = claim((GPU, NODE, "gpu-0"), (CATS, NODE, "kitten-0"),
                ("other.example.com", "node-2", "x"))
    decided = claim_results(obj, REF, node=NODE, driver=GPU, drivers=(GPU, CATS))
    assert not isinstance(decided, str)
    assert [(r.driver, r.device) for r in decided] == [(GPU, "gpu-0"), (CATS, "kitten-0")]


def test_kubelet_devices_of_one_driver_with_base_request_names() -> None:
    prepared = (
        PreparedDevice("gpu/large", GPU, NODE, "gpu-0", ("kdra.dev/gpu=u-gpu-0",)),
        PreparedDevice("cat", CATS, NODE, "kitten-0", ("kdra.dev/x=u-kitten-0",)),
        PreparedDevice("mem", GPU, NODE, "gpu-1", ("kdra.dev/gpu=u-gpu-1-s1",), share_id="s1"),
    )
    assert kubelet_devices(prepared, GPU) == (
        Device(("gpu",), NODE, "gpu-0", ("kdra.dev/gpu=u-gpu-0",)),
        Device(("mem",), NODE, "gpu-1", ("kdra.dev/gpu=u-gpu-1-s1",), "s1"))
    assert kubelet_devices(prepared, "nobody") == ()


def test_health_report_lists_every_device_by_name() -> None:
    assert health_report([("gpu-1", True), ("gpu-0", False)], pool=NODE, now=100,
                         timeout=30) == [
        DeviceHealth(NODE, "gpu-0", HEALTH_UNHEALTHY, 100, 30),
        DeviceHealth(NODE, "gpu-1", HEALTH_HEALTHY, 100, 30)]


def test_socket_names() -> None:
    assert registration_socket(GPU) == "gpu.kdra.dev-reg.sock"
    assert dra_socket("/var/lib/kubelet/plugins/", GPU) == \
        "/var/lib/kubelet/plugins/gpu.kdra.dev/dra.sock"


ROOT_DIR = (0, 0, 0o700)
ROOT_SOCKET = (0, 0, 0o600)


@pytest.mark.parametrize(("uid", "gid", "directory", "socket", "allowed"), [
    (0, 0, ROOT_DIR, ROOT_SOCKET, True),            # the kubelet
    (1000, 1000, ROOT_DIR, ROOT_SOCKET, False),     # anyone else
    (1000, 0, ROOT_DIR, ROOT_SOCKET, False),        # root's group: no group bits
    (1000, 0, (0, 0, 0o750), (0, 0, 0o660), True),  # group-writable, group-searchable
    (1000, 0, (0, 0, 0o750), (0, 0, 0o640), False),  # the socket not writable by the group
    (1000, 0, (0, 0, 0o740), (0, 0, 0o660), False),  # the directory not searchable
    (1000, 1000, (0, 0, 0o755), (0, 0, 0o666), True),  # world-open
    (1000, 1000, (1000, 0, 0o055), (0, 0, 0o666), False),  # owner bits count, not others'
    (1000, 1000, (1000, 0, 0o700), (1000, 0, 0o200), True),  # the owner, write-only socket
])
def test_who_may_connect(uid: int, gid: int, directory: tuple[int, int, int],
                         socket: tuple[int, int, int], allowed: bool) -> None:
    assert peer_may_connect(uid, gid, directory=directory, socket=socket) is allowed

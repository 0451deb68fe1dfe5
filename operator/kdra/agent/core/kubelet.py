"""The agent as the kubelet's DRA plugin (native flavour), without the I/O: names, which
claims a node prepares, what the kubelet is told, device health, and who may call.

- Registration: the plugin type, the gRPC services kdra serves (:data:`SUPPORTED_VERSIONS`,
  newest first: the kubelet takes the first it knows), the sockets' names
  (:func:`registration_socket`, :func:`dra_socket`).
- :func:`claim_results`: the allocation results of a claim the kubelet asks this node to
  prepare, or why not — the claim is gone or replaced (another UID), not allocated, or its
  devices of the calling driver are in another node's pool. A node's agent prepares only its
  own devices: a kubelet (or anyone who reaches the socket) naming another node's claim gets an
  error, never a prepare.
- :func:`kubelet_devices`: what the kubelet is told of a prepared claim's devices of one
  driver — base request names (``gpu`` for ``gpu/large``: the kubelet matches them with the
  containers' ``resources.claims[].request``), pool, device, CDI device IDs, share ID.
- :func:`health_report`: the full list of a driver's devices with their health, as the
  kubelet's health stream wants it.
- :func:`peer_may_connect`: whether a process (uid, gid) may connect to a socket by the
  permission bits of its directory (search) and of the socket file (write) — Linux's own rule
  for ``connect(2)`` on a unix socket, owner bits first, then group, then others; uid 0 always.

Invariants:
- Pure: no I/O, no clock (``now`` comes in), no API client.
- :func:`claim_results` returns results only in pool ``node`` and only for the agent's
  drivers; results of other drivers in other pools are left alone (not an error: another
  driver's plugin prepares them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdra.agent.core.checkpoint import PreparedDevice
from kdra.agent.core.nodeprep import Result, our_results

PLUGIN_TYPE = "DRAPlugin"
"""The registration's plugin type for DRA drivers (k8s.io/kubelet pluginregistration)."""
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""The DRA node services kdra serves, newest first (the kubelet takes the first it knows)."""
DRA_SOCKET = "dra.sock"
HEALTH_TIMEOUT = 30
"""Seconds the kubelet keeps a device's reported health before taking it as Unknown; the agent
sends the full list at least every third of it."""
MAX_CLAIMS = 256
"""Claims one call may name; the rest are answered with an error (the kubelet sends one call
per pod and driver: a pod has at most 128 claims)."""


def registration_socket(driver: str) -> str:
    """The registration socket's file name in the kubelet's ``plugins_registry``."""
    return f"{driver}-reg.sock"


def dra_socket(plugins_dir: str, driver: str) -> str:
    """The DRA node service's socket: ``<plugins_dir>/<driver>/dra.sock``."""
    return f"{plugins_dir.rstrip('/')}/{driver}/{DRA_SOCKET}"


# --------------------------------------------------------------------------- the messages


@dataclass(frozen=True)
class Claim:
    """A claim the kubelet asks to (un)prepare: its namespace, UID and name."""

    namespace: str
    uid: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Device:
    """A prepared device as the kubelet uses it: which of the claim's requests it serves
    (base request names), where it is, and the CDI device IDs the kubelet passes to the
    runtime for the containers that use those requests."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    share_id: str = ""


@dataclass(frozen=True)
class ClaimResult:
    """The answer for one claim: its devices, or an error (the kubelet then retries)."""

    devices: tuple[Device, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class DeviceHealth:
    """One device's health as the kubelet reads it (``health``: UNKNOWN 0, HEALTHY 1,
    UNHEALTHY 2; ``last_updated``: unix seconds)."""

    pool: str
    device: str
    health: int
    last_updated: int
    timeout_seconds: int = HEALTH_TIMEOUT


HEALTH_UNKNOWN, HEALTH_HEALTHY, HEALTH_UNHEALTHY = 0, 1, 2


# --------------------------------------------------------------------------- decisions


def claim_results(claim: Mapping[str, Any] | None, ref: Claim, *, node: str, driver: str,
                  drivers: Iterable[str]) -> list[Result] | str:
    """The results to prepare for ``ref`` (the claim as the kubelet names it) when ``driver``'s
    plugin is called on ``node``: every result of the agent's ``drivers`` in pool ``node`` —
    a claim is prepared whole, once, whichever of its drivers is called first — or an error
    message saying why this node does not prepare it."""
    if claim is None:
        return f"ResourceClaim {ref.key} not found"
    uid = str((claim.get("metadata") or {}).get("uid", ""))
    if uid != ref.uid:
        return (f"ResourceClaim {ref.key} has UID {uid}, not {ref.uid}: the claim was replaced "
                "by another of the same name")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return f"ResourceClaim {ref.key} is not allocated"
    mine = our_results(claim, node, (driver,))
    raw = (allocation.get("devices") or {}).get("results") or ()
    elsewhere = sorted({str(r.get("pool")) for r in raw
                        if isinstance(r, Mapping) and r.get("driver") == driver
                        and r.get("pool") != node})
    if elsewhere:
        return (f"ResourceClaim {ref.key}: devices of driver {driver} are allocated in pool "
                f"{', '.join(elsewhere)}, not on node {node}; the agent of node {node} "
                "prepares only its own node's devices")
    if not mine:
        return f"ResourceClaim {ref.key} has no device of driver {driver} on node {node}"
    return our_results(claim, node, drivers)


def kubelet_devices(prepared: Sequence[PreparedDevice], driver: str) -> tuple[Device, ...]:
    """``prepared`` devices of ``driver``, as the kubelet is told them."""
    return tuple(Device((device.request.split("/", 1)[0],), device.pool, device.device,
                        tuple(device.cdi_device_ids), device.share_id)
                 for device in prepared if device.driver == driver)


def health_report(devices: Iterable[tuple[str, bool]], *, pool: str, now: int,
                  timeout: int = HEALTH_TIMEOUT) -> list[DeviceHealth]:
    """(device name, healthy) pairs of one driver's pool → the kubelet's list, by name."""
    return [DeviceHealth(pool, name, HEALTH_HEALTHY if healthy else HEALTH_UNHEALTHY, now,
                         timeout)
            for name, healthy in sorted(devices)]


def peer_may_connect(uid: int, gid: int, *, directory: tuple[int, int, int],
                     socket: tuple[int, int, int]) -> bool:
    """May the process ``uid``/``gid`` connect to a unix socket, by the permission bits of
    its ``directory`` (search, x) and of the ``socket`` file itself (write, w)? Each is
    (owner uid, owner gid, mode). uid 0 may (the kubelet runs as root)."""
    if uid == 0:
        return True

    def allows(owner: tuple[int, int, int], want: int) -> bool:
        owner_uid, owner_gid, mode = owner
        if uid == owner_uid:
            bits = mode >> 6
        elif gid == owner_gid:
            bits = mode >> 3
        else:
            bits = mode
        return bits & want == want

    return allows(directory, 0o1) and allows(socket, 0o2)

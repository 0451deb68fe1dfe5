"""The node agent's device-backend seam: what the agent asks a device vendor, and the set of
backends one agent runs.

A **backend** knows one kind of device (``nvml``: real NVIDIA GPUs; ``fake-gpu``: the fake
inventory's GPU profiles; ``generic``: the fake inventory's arbitrary devices such as the
seed's cats; or a vendor's own module, :mod:`kdra.agent.backends.registry`). Everything else
the agent does — slices, Leases, the checkpoint, ``status.devices``, CDI files, the NRI plugin
— is the same for every device. Like the example driver's device profiles
(kubernetes-sigs/dra-example-driver ``internal/profiles``), a backend answers six questions:

=============================  ===========================================================
question                       :class:`DeviceBackend` member
=============================  ===========================================================
which devices (and counters)   :meth:`~DeviceBackend.discover`, :meth:`~DeviceBackend.signature`,
                               ``drivers`` (pools published even when empty)
how healthy                    :meth:`~DeviceBackend.observe_health` (``health_blocks``:
                               asked from a worker thread)
what a prepared device records :meth:`~DeviceBackend.device_data` (``status.devices[].data``;
                               e.g. a partition created on demand gets its UUID here)
what the node needs            :meth:`~DeviceBackend.prepare` / :meth:`~DeviceBackend.unprepare`
                               (node edits, e.g. creating a partition; idempotent)
what a container gets          :meth:`~DeviceBackend.container_edits` (CDI: env, device nodes,
                               mounts per device)
the vendor's env conventions   :meth:`~DeviceBackend.container_env` (per container, over all
                               its devices of the backend: the GPUs' list of UUIDs...)
=============================  ===========================================================

:class:`BackendBase` answers each with "nothing vendor-specific", so a vendor overrides only
what it has. :class:`Backends` is one agent's ordered set: it tags every device with the name
of the backend that found it (``InventoryDevice.backend``, and ``PreparedDevice.backend`` in
the checkpoint), so the agent asks each device's own backend, never an ``isinstance``.

What stays kdra's, for every device (:mod:`kdra.agent.core.cdi`, :mod:`kdra.agent.core.nodeprep`,
:mod:`kdra.agent.core.exposure`): the CDI names, ``KDRA_DEVICE_<NAME>``, ``_CLAIM`` and
``_UUID``, ``KDRA_DEVICES``, the ``uuid``/``shareID``/``consumedCapacity``/``cdiDeviceIDs``
data, and the health marks and taints.

Invariants:
- Pure: this module does no I/O. :meth:`Backends.discover` and the blocking members it names
  call the backends' own I/O; the agent's shell calls them off the event loop (worker
  threads), the pure members (``device_data``, ``container_edits``, ``container_env``) inline.
- Names: a backend's name is a DNS label, unique within an agent; a device's ``(driver,
  name)`` is unique across all of an agent's backends (:class:`DiscoveryError` otherwise).
- A device or record whose backend is unknown (a checkpoint of an older agent, a backend no
  longer configured) is served by :data:`NO_BACKEND`: kdra's common edits only.
- In a container's env, the first backend (in the configured order) that sets a variable wins.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kdra.agent.core.checkpoint import ClaimRef, PreparedDevice
from kdra.agent.core.health import Observation
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice

DeviceKey = tuple[str, str]
"""(driver, device name)."""

BACKEND_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class DiscoveryError(Exception):
    """A backend cannot list devices at all (NVML missing or failing, a file unreadable), or
    two backends claim the same device."""


# --------------------------------------------------------------------------- container edits


@dataclass(frozen=True)
class DeviceNode:
    """A device node in the container (CDI ``deviceNodes[]``): ``path`` inside it; the host
    node is ``host_path`` (default: the same path). ``type``/``major``/``minor``/``file_mode``
    describe a node the runtime creates itself (a fake device: nothing on the host)."""

    path: str
    host_path: str = ""
    type: str = ""
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None

    def to_cdi(self) -> dict[str, Any]:
        node: dict[str, Any] = {"path": self.path}
        if self.host_path:
            node["hostPath"] = self.host_path
        if self.type:
            node["type"] = self.type
        if self.major is not None:
            node["major"] = self.major
        if self.minor is not None:
            node["minor"] = self.minor
        if self.file_mode is not None:
            node["fileMode"] = self.file_mode
        return node


@dataclass(frozen=True)
class Mount:
    """A bind mount into the container (CDI ``mounts[]``)."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ("ro", "nosuid", "nodev", "bind")
    type: str = "bind"

    def to_cdi(self) -> dict[str, Any]:
        return {"hostPath": self.host_path, "containerPath": self.container_path,
                "type": self.type, "options": list(self.options)}


@dataclass(frozen=True)
class ContainerEdits:
    """What one device gives a container (CDI ``containerEdits``): ``env`` as ``KEY=value``."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()

    def __add__(self, other: ContainerEdits) -> ContainerEdits:
        return ContainerEdits(self.env + other.env, self.device_nodes + other.device_nodes,
                              self.mounts + other.mounts)

    def to_cdi(self) -> dict[str, Any]:
        """CDI's ``containerEdits`` (``env`` always; the lists only when not empty)."""
        edits: dict[str, Any] = {"env": list(self.env)}
        if self.device_nodes:
            edits["deviceNodes"] = [node.to_cdi() for node in self.device_nodes]
        if self.mounts:
            edits["mounts"] = [mount.to_cdi() for mount in self.mounts]
        return edits


# --------------------------------------------------------------------------- the protocol


@runtime_checkable
class DeviceBackend(Protocol):
    """What the node agent asks a device vendor (see the module's table)."""

    name: str
    """The backend's name in ``--backends`` and in the checkpoint (a DNS label)."""
    description: str
    """For logs: ``NVML``, ``fake inventory /etc/kdra/inventory.yaml``..."""
    drivers: tuple[str, ...]
    """Drivers whose pool is published even when the backend finds no device (NVML: its GPU
    driver, so a node whose GPUs all fail still has its pool and Lease)."""
    health_blocks: bool
    """:meth:`observe_health` calls hardware and may block: the agent asks from a thread."""

    def discover(self, node: str) -> Inventory:
        """Every device of ``node`` now (blocking). Raises :class:`DiscoveryError`, or
        :class:`~kdra.dra.errors.InvalidObject` for a malformed description (naming it)."""

    def signature(self) -> object | None:
        """Changes when :meth:`discover` may give another answer; None: always ask."""

    def observe_health(self, node: str, devices: Inventory) -> Mapping[DeviceKey, Observation]:
        """What the backend sees wrong now with ``devices`` (its own devices on ``node``);
        devices not listed are fine. May raise: the agent logs and skips the backend."""

    def device_data(self, device: InventoryDevice, node: str) -> Mapping[str, Any]:
        """What preparing ``device`` on ``node`` records (checkpoint, ``status.devices[]
        .data``, CDI env) beyond kdra's ``uuid``, ``shareID`` and ``cdiDeviceIDs``. Pure and
        deterministic: preparing again records the same."""

    def prepare(self, node: str, claim: ClaimRef, devices: Sequence[PreparedDevice]) -> None:
        """Make the node ready for ``devices`` of ``claim`` (blocking; before the CDI spec is
        written and the devices reported Ready). Idempotent; raising fails the prepare, which
        is retried."""

    def unprepare(self, node: str, claim: ClaimRef, devices: Sequence[PreparedDevice]) -> None:
        """Undo :meth:`prepare` (blocking; after the CDI spec is removed). Idempotent: a device
        never prepared, or already unprepared, is fine."""

    def container_edits(self, device: InventoryDevice, record: PreparedDevice | None,
                        prefix: str) -> ContainerEdits:
        """What ``device`` (prepared as ``record``) gives a container beyond kdra's common
        env; ``prefix`` is its ``KDRA_DEVICE_<NAME>`` for per-device variables. Pure."""

    def container_env(self, devices: Sequence[PreparedDevice],
                      present: Set[str]) -> Mapping[str, str]:
        """Env over all of a container's devices of this backend (``devices``: possibly none)
        — the vendor's conventions. ``present``: the names the container already sets (a
        list variable the container set itself must be overridden, containerd cannot remove
        it). Pure and fast: answered at container creation."""

    def close(self) -> None:
        """Release what the backend holds (a library handle); must not raise."""


class BackendBase:
    """A backend with nothing vendor-specific: a vendor's class derives from it and overrides
    what it has (at least ``name`` and :meth:`discover`)."""

    name: str = ""
    description: str = "no backend"
    drivers: tuple[str, ...] = ()
    health_blocks: bool = False

    def discover(self, node: str) -> Inventory:
        return Inventory()

    def signature(self) -> object | None:
        return None

    def observe_health(self, node: str, devices: Inventory) -> Mapping[DeviceKey, Observation]:
        return {}

    def device_data(self, device: InventoryDevice, node: str) -> Mapping[str, Any]:
        return {}

    def prepare(self, node: str, claim: ClaimRef, devices: Sequence[PreparedDevice]) -> None:
        return None

    def unprepare(self, node: str, claim: ClaimRef, devices: Sequence[PreparedDevice]) -> None:
        return None

    def container_edits(self, device: InventoryDevice, record: PreparedDevice | None,
                        prefix: str) -> ContainerEdits:
        """The device's host device nodes (``InventoryDevice.device_nodes``), nothing else."""
        return ContainerEdits(device_nodes=tuple(DeviceNode(path)
                                                 for path in device.device_nodes))

    def container_env(self, devices: Sequence[PreparedDevice],
                      present: Set[str]) -> Mapping[str, str]:
        return {}

    def close(self) -> None:
        return None


NO_BACKEND: DeviceBackend = BackendBase()
"""Serves what no configured backend claims: kdra's common edits only."""


# --------------------------------------------------------------------------- one agent's set


class Backends:
    """The backends of one agent process, in their configured order (immutable)."""

    def __init__(self, backends: Iterable[DeviceBackend] = ()) -> None:
        self._by_name: dict[str, DeviceBackend] = {}
        for backend in backends:
            if not BACKEND_NAME.match(backend.name or ""):
                raise ValueError(f"backend name {backend.name!r} is not a DNS label")
            if backend.name in self._by_name:
                raise ValueError(f"two backends are named {backend.name!r}")
            self._by_name[backend.name] = backend

    def __iter__(self) -> Iterator[DeviceBackend]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def named(self, name: str) -> DeviceBackend:
        """The backend called ``name``; :data:`NO_BACKEND` when there is none."""
        return self._by_name.get(name, NO_BACKEND)

    @property
    def drivers(self) -> tuple[str, ...]:
        """Drivers published even without devices, in backend order."""
        return tuple(dict.fromkeys(d for backend in self for d in backend.drivers))

    @property
    def health_blocks(self) -> bool:
        return any(backend.health_blocks for backend in self)

    def signature(self) -> object | None:
        """The backends' signatures together; None when one of them says "always ask"."""
        signatures = tuple(backend.signature() for backend in self)
        return None if any(s is None for s in signatures) else signatures

    def discover(self, node: str) -> Inventory:
        """Every backend's devices of ``node``, in backend order, each tagged with its
        backend's name (blocking: the backends' I/O). Raises what a backend raises, and
        :class:`DiscoveryError` when two backends give the same (driver, device)."""
        devices: list[InventoryDevice] = []
        owner: dict[DeviceKey, str] = {}
        for backend in self:
            for device in backend.discover(node).devices:
                key = (device.driver, device.name)
                if key in owner:
                    raise DiscoveryError(
                        f"device {device.name!r} of driver {device.driver!r} is given by "
                        f"backends {owner[key]!r} and {backend.name!r}: give one of them "
                        "another driver or device name")
                owner[key] = backend.name
                devices.append(device if device.backend == backend.name
                               else dataclasses.replace(device, backend=backend.name))
        return Inventory(tuple(devices))

    def container_env(self, devices: Sequence[PreparedDevice],
                      present: Set[str]) -> tuple[tuple[str, str], ...]:
        """Every backend's env conventions for a container with ``devices`` (each backend is
        asked with its own devices, possibly none); the first backend to set a name wins."""
        env: dict[str, str] = {}
        for backend in self:
            own = [d for d in devices if d.backend == backend.name]
            for key, value in backend.container_env(own, present).items():
                env.setdefault(key, value)
        return tuple(env.items())


def by_backend(devices: Iterable[PreparedDevice]) -> list[tuple[str, list[PreparedDevice]]]:
    """``devices`` grouped by their backend's name, in order of first appearance."""
    grouped: dict[str, list[PreparedDevice]] = {}
    for device in devices:
        grouped.setdefault(device.backend, []).append(device)
    return list(grouped.items())


NO_BACKENDS = Backends()
"""No backend: every device gets kdra's common edits only (the pure functions' default)."""


__all__ = [
    "BACKEND_NAME",
    "NO_BACKEND",
    "NO_BACKENDS",
    "BackendBase",
    "Backends",
    "ContainerEdits",
    "DeviceBackend",
    "DeviceKey",
    "DeviceNode",
    "DiscoveryError",
    "Mount",
    "by_backend",
]

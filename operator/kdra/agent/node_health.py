"""One node's health loop: ask the sources, debounce, and put the resulting taints on the
devices the agent publishes.

Invariants:
- The first check after start-up applies what the sources see at once (there is no history
  to debounce against: a device the inventory lists as unhealthy is never published without
  its taint); every later check goes through the debounce and settled period.
- Only devices of the current inventory get taints; the debouncer forgets nothing a source
  still reports, and a device that disappeared counts as healthy (and stops being tracked
  once healthy).
- Every applied transition is logged and counted once
  (``kdra_device_health_transitions_total{to}``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kdra.agent import metrics
from kdra.agent.core.backend import Backends, DeviceBackend
from kdra.agent.core.health import Applied, Health, HealthDebouncer, Observation, Transition
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice
from kdra.agent.health import (
    DeviceKey,
    HealthSource,
    InventoryHealth,
    MarksFile,
    observe_all,
)
from kdra.agent.settings import AgentSettings
from kdra.dra.taints import UNHEALTHY_KEY
from kdra.dra.timestamps import now as wall_now

log = logging.getLogger(__name__)


class NodeHealth:
    def __init__(self, node: str, sources: Sequence[HealthSource], *, debounce: float,
                 settle: float, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], dt.datetime] = wall_now) -> None:
        self.node = node
        self.sources = sources
        self.clock = clock
        self.wall = wall
        self.debouncer: HealthDebouncer[DeviceKey] = HealthDebouncer(debounce=debounce,
                                                                     settle=settle)
        self._started = False

    def check(self, inventory: Inventory) -> list[Transition[DeviceKey]]:
        """One poll: observe, debounce; returns the transitions applied now (blocking where a
        backend's health is: run it in a thread, :attr:`Backends.health_blocks`)."""
        seen = observe_all(self.sources, self.node, inventory)
        known = {(d.driver, d.name) for d in inventory.devices}
        seen = {key: value for key, value in seen.items() if key in known}
        debounce = self.debouncer.debounce
        if not self._started:
            self._started = True
            self.debouncer.debounce = 0  # nothing to debounce against yet
        try:
            transitions = self.debouncer.update(seen, now=self.clock(), wall=self.wall())
        finally:
            self.debouncer.debounce = debounce
        for change in transitions:
            driver, name = change.device
            metrics.record_health_transition(change.after.word)
            log.warning("node %s: device %s/%s is now %s (%s)", self.node, driver, name,
                        change.after.word, change.reason or "recovered")
        return transitions

    def applied(self, device: InventoryDevice) -> Applied:
        return self.debouncer.applied((device.driver, device.name))

    def condition(self, driver: str, device: str, parent: str = "") -> tuple[bool, str, str]:
        """The ``Healthy`` condition of a prepared device: (healthy, reason, message); a
        partition (``parent``: its GPU) is as unhealthy as its GPU (see :meth:`tainted`)."""
        applied = self.debouncer.applied((driver, device))
        if parent and applied.health is Health.HEALTHY:
            applied = self.debouncer.applied((driver, parent))
        if applied.health is Health.HEALTHY:
            return True, "Healthy", "no health source reports a problem"
        taint = applied.taint()
        effect = taint.effect if taint else ""
        return False, applied.reason or "Unhealthy", (
            f"device is {applied.health.word} since {applied.since} ({applied.reason}); "
            f"its slice has the taint {UNHEALTHY_KEY}:{effect}")

    def tainted(self, device: InventoryDevice) -> InventoryDevice:
        """``device`` with the taint its applied health calls for (a partition: its own,
        or else its GPU's — a mark or an XID on ``gpu-0`` taints every partition of it)."""
        applied = self.applied(device)
        if device.parent and applied.health is Health.HEALTHY:
            applied = self.debouncer.applied((device.driver, device.parent))
        taint = applied.taint()
        return dataclasses.replace(device, taints=(taint,)) if taint else device

    def counts(self, inventory: Inventory) -> tuple[int, int]:
        """(healthy, unhealthy) devices by applied health."""
        bad = sum(1 for d in inventory.devices
                  if self.applied(d).health is not Health.HEALTHY)
        return len(inventory.devices) - bad, bad


class BackendHealth:
    """A device backend's health as a source: asked about its own devices only."""

    def __init__(self, backend: DeviceBackend) -> None:
        self.backend = backend
        self.description = f"backend {backend.name} ({backend.description})"

    def observe(self, node: str, inventory: Inventory) -> dict[DeviceKey, Observation]:
        own = Inventory(tuple(d for d in inventory.devices if d.backend == self.backend.name))
        return dict(self.backend.observe_health(node, own)) if own.devices else {}


def health_sources(settings: AgentSettings, backends: Backends) -> tuple[HealthSource, ...]:
    """The discovery's verdict, the marks file, and each device backend's health (NVML's
    for real GPUs); a failing one is logged and skipped (:func:`observe_all`)."""
    marks = Path(settings.health_marks or Path(settings.state_dir) / "health-marks.json")
    return (InventoryHealth(), MarksFile(marks), *map(BackendHealth, backends))


__all__ = ["BackendHealth", "NodeHealth", "health_sources"]

"""GPU health through NVML (nvidia-ml-py): XID critical errors, ECC and retired pages, lost
GPUs — the agent's health source for real GPUs.

At each poll, for every GPU of the inventory (found again by its UUID):

- **events** (where the GPU supports them): the device is registered once in an NVML event
  set for XID critical errors, double-bit ECC errors and "GPU unavailable"; every poll drains
  the set without blocking (``nvmlEventSetWait_v2`` with a 0 ms timeout until it times out).
  An XID is held for ``xid_hold`` seconds after it was seen; the debounce's settled period
  comes on top before the taint goes;
- **polling** (always): volatile uncorrected ECC errors (the count survives until the GPU is
  reset), retired pages pending, row remapping pending or failed;
- **lost**: a GPU whose handle cannot be found again, or any query answering
  ``NVML_ERROR_GPU_IS_LOST``, XID 79 (fallen off the bus) and "GPU unavailable" events.

XIDs that report an application's fault rather than the GPU's (13, 31, 43, 45, 68, 109 — the
set NVIDIA's device plugin skips too) are ignored.

Invariants:
- Only nvidia-ml-py's documented functions are called, through the module object handed in
  (a fake in tests); a query a GPU does not support (``NVML_ERROR_NOT_SUPPORTED``) is
  skipped, never taken for a fault.
- NVML not usable at all (library missing, driver not loaded) raises
  :class:`~kdra.agent.core.backend.DiscoveryError` with NVML's message; a failure on
  one GPU only affects that GPU's observation.
- Never blocks: event waits use a zero timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kdra.agent.core.backend import DeviceKey, DiscoveryError
from kdra.agent.core.gpu_profiles import GPU_DRIVER
from kdra.agent.core.health import Health, Observation
from kdra.agent.core.inventory_devices import Inventory
from kdra.agent.health import worst

log = logging.getLogger(__name__)


def load_pynvml() -> Any:
    """The ``pynvml`` module (nvidia-ml-py), imported on first use: an agent that never asks
    NVML never loads it. Raises :class:`DiscoveryError` when it is not installed."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise DiscoveryError("nvidia-ml-py (pynvml) is not installed") from exc
    return pynvml

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs caused by the application (illegal address, MMU fault, ...): not the GPU's health."""
LOST_XIDS = frozenset({79})
"""XIDs after which the GPU is gone (79: fallen off the bus)."""

_EVENTS = ("nvmlEventTypeXidCriticalError", "nvmlEventTypeDoubleBitEccError",
           "nvmlEventTypeGpuUnavailableError")


def classify_xid(xid: int) -> Observation | None:
    """What an XID critical error says about the GPU (None: nothing, an application error)."""
    if xid in APPLICATION_XIDS:
        return None
    if xid in LOST_XIDS:
        return Observation(Health.LOST, f"XID-{xid}")
    return Observation(Health.DEGRADED, f"XID-{xid}")


class NvmlHealth:
    """Health of the inventory's GPUs (driver ``driver``) as NVML reports it."""

    description = "NVML"

    def __init__(self, *, nvml: Any = None, driver: str = GPU_DRIVER, xid_hold: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.driver = driver
        self.xid_hold = xid_hold
        self.clock = clock
        self._nvml = nvml
        self._initialised = False
        self._event_set: Any = None
        self._events_usable = True
        self._registered: set[str] = set()
        self._recent: dict[str, tuple[float, Observation]] = {}  # uuid → (seen at, what)

    # ------------------------------------------------------------------ NVML plumbing

    def _module(self) -> Any:
        if self._nvml is None:
            self._nvml = load_pynvml()
        return self._nvml

    def _error(self) -> type[BaseException]:
        error: type[BaseException] = getattr(self._module(), "NVMLError", Exception)
        return error

    def _code(self, exc: BaseException) -> int | None:
        value = getattr(exc, "value", None)
        return value if isinstance(value, int) else None

    def _is(self, exc: BaseException, name: str) -> bool:
        code = getattr(self._module(), name, None)
        return code is not None and self._code(exc) == code

    def start(self) -> None:
        """Initialise NVML (idempotent). DiscoveryError when NVML is not usable."""
        if self._initialised:
            return
        nvml = self._module()
        try:
            nvml.nvmlInit()
        except (self._error(), OSError) as exc:
            raise DiscoveryError(f"NVML is not usable for health checks: {exc}") from exc
        self._initialised = True
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except self._error() as exc:
            log.warning("NVML events unavailable (%s): health is polled only", exc)
            self._events_usable = False

    def close(self) -> None:
        nvml = self._nvml
        if not self._initialised or nvml is None:
            return
        try:
            if self._event_set is not None:
                nvml.nvmlEventSetFree(self._event_set)
            nvml.nvmlShutdown()
        except Exception as exc:  # shutting down anyway
            log.debug("NVML shutdown failed: %s", exc)
        self._initialised = False
        self._event_set = None
        self._registered.clear()

    # ------------------------------------------------------------------ the source

    def observe(self, node: str, inventory: Inventory) -> dict[DeviceKey, Observation]:
        self.start()
        now = self.clock()
        seen: dict[DeviceKey, Observation] = {}
        uuids: dict[str, DeviceKey] = {}
        for device in inventory.for_driver(self.driver):
            uuid = device.attribute("uuid")
            if not isinstance(uuid, str):
                continue
            key = (device.driver, device.name)
            uuids[uuid] = key
            found = self._poll_gpu(uuid)
            if found is not None:
                seen[key] = found
        for uuid, observation in self._drain_events():
            self._recent[uuid] = (now, observation)
        held: dict[DeviceKey, Observation] = {}
        for uuid, (at, observation) in list(self._recent.items()):
            if now - at > self.xid_hold or uuid not in uuids:
                del self._recent[uuid]
            else:
                held[uuids[uuid]] = observation
        return worst(seen, held)

    def _poll_gpu(self, uuid: str) -> Observation | None:
        nvml = self._module()
        error = self._error()
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
        except error as exc:
            if self._is(exc, "NVML_ERROR_GPU_IS_LOST") or self._is(exc, "NVML_ERROR_NOT_FOUND"):
                return Observation(Health.LOST, "DeviceLost")
            return Observation(Health.DEGRADED, "NVML-handle-error")
        self._register(uuid, handle)
        checks: list[tuple[Callable[[], Any], Callable[[Any], str | None]]] = [
            (lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
             lambda count: "ECC-uncorrectable" if int(count) > 0 else None),
            (lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle),
             lambda pending: "RetiredPagesPending" if int(pending) else None),
            (lambda: nvml.nvmlDeviceGetRemappedRows(handle),
             lambda rows: "RowRemapFailure" if int(rows[3]) else
             ("RowRemapPending" if int(rows[2]) else None)),
        ]
        for query, verdict in checks:
            try:
                reason = verdict(query())
            except error as exc:
                if self._is(exc, "NVML_ERROR_GPU_IS_LOST"):
                    return Observation(Health.LOST, "DeviceLost")
                continue  # not supported on this GPU, or no permission: not a fault
            if reason:
                return Observation(Health.DEGRADED, reason)
        return None

    def _register(self, uuid: str, handle: Any) -> None:
        if not self._events_usable or uuid in self._registered:
            return
        nvml = self._module()
        self._registered.add(uuid)  # tried once; a GPU without event support is polled only
        wanted = 0
        for name in _EVENTS:
            wanted |= int(getattr(nvml, name, 0))
        try:
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
            if wanted & supported:
                nvml.nvmlDeviceRegisterEvents(handle, wanted & supported, self._event_set)
        except self._error() as exc:
            log.info("GPU %s: NVML events not available (%s): polled only", uuid, exc)

    def _drain_events(self) -> list[tuple[str, Observation]]:
        if not self._events_usable or not self._registered or self._event_set is None:
            return []
        nvml = self._module()
        found: list[tuple[str, Observation]] = []
        for _ in range(1024):  # bounded: a storm of events cannot hold the poll
            try:
                event = nvml.nvmlEventSetWait_v2(self._event_set, 0)
            except self._error() as exc:
                if not self._is(exc, "NVML_ERROR_TIMEOUT"):
                    log.warning("NVML event wait failed: %s", exc)
                break
            uuid = self._uuid_of(event.device)
            observation = self._event_observation(int(event.eventType), int(event.eventData))
            if uuid is not None and observation is not None:
                log.warning("GPU %s: NVML event %s", uuid, observation.reason)
                found.append((uuid, observation))
        return found

    def _event_observation(self, kind: int, data: int) -> Observation | None:
        nvml = self._module()
        if kind == getattr(nvml, "nvmlEventTypeXidCriticalError", None):
            return classify_xid(data)
        if kind == getattr(nvml, "nvmlEventTypeDoubleBitEccError", None):
            return Observation(Health.DEGRADED, "ECC-DoubleBit")
        if kind == getattr(nvml, "nvmlEventTypeGpuUnavailableError", None):
            return Observation(Health.LOST, "GPU-unavailable")
        return None

    def _uuid_of(self, handle: Any) -> str | None:
        """The UUID of an event's GPU (asked from NVML: ctypes handles of the same GPU are
        distinct Python objects)."""
        try:
            value = self._module().nvmlDeviceGetUUID(handle)
        except self._error():
            return None
        return value.decode() if isinstance(value, bytes) else str(value)


__all__ = ["APPLICATION_XIDS", "LOST_XIDS", "NvmlHealth", "classify_xid"]

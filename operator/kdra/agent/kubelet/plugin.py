"""The agent's kubelet plugins: one per driver the node serves, registered with the kubelet's
plugin watcher (native flavour).

Each driver gets (:class:`DriverPlugin`):

- grpcio's server (:mod:`kdra.agent.kubelet.server`) on a socket in the agent's private
  directory (mode 0700);
- the DRA service's socket ``<plugins dir>/<driver>/dra.sock`` — the ``endpoint`` the
  registration names; its directory the agent's own, mode 0700 — and the registration socket
  ``<registry dir>/<driver>-reg.sock``, both gated (:mod:`kdra.agent.kubelet.gate`): mode
  0600, callers checked by their credentials.

Start order: server, DRA socket, registration socket last (the kubelet's plugin watcher sees the
registration socket appear, calls ``GetInfo``, connects to the endpoint and calls
``NotifyRegistrationStatus``: everything answers by then). Stop order: the registration
socket first (removing it deregisters the plugin), then the rest. A kubelet restart needs
nothing from the agent: the new kubelet finds the registration sockets and registers them
again.

Health (:class:`HealthFeed`): ``NodeWatchResources`` streams the full list of the driver's
devices with their applied health (the agent's health loop, after its debounce) at once, on
every change (:meth:`KubeletPlugins.health_changed`) and at least every third of the
kubelet's staleness timeout, since the kubelet takes a device it has not heard of for that
long as Unknown.

Invariants:
- The endpoint a registration names is the DRA socket's path on the host: the DaemonSet
  mounts the kubelet's directories at the same paths inside the container.
- Sockets are removed on stop (only while they are still this process's: a newer agent's
  stay), the private directory with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path

from kdra.agent import metrics
from kdra.agent.core.kubelet import (
    HEALTH_TIMEOUT,
    PLUGIN_TYPE,
    SUPPORTED_VERSIONS,
    Claim,
    ClaimResult,
    DeviceHealth,
    dra_socket,
    health_report,
    registration_socket,
)
from kdra.agent.kubelet.gate import GatedSocket
from kdra.agent.kubelet.messages import PluginInfo, RegistrationStatus
from kdra.agent.kubelet.server import PluginServer
from kdra.agent.kubelet.service import KubeletService

log = logging.getLogger(__name__)

DeviceHealthOf = Callable[[str], Iterable[tuple[str, bool]]]
"""driver → (device name, healthy) of every device of that driver on the node."""


class HealthFeed:
    """The node's device health as the kubelet's health streams read it."""

    def __init__(self, pool: str, devices: DeviceHealthOf, *,
                 timeout: int = HEALTH_TIMEOUT) -> None:
        self.pool = pool
        self.devices = devices
        self.timeout = timeout
        self._changed = asyncio.Event()

    def changed(self) -> None:
        """A device's applied health changed: every stream sends its list now."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def watch(self, driver: str) -> AsyncIterator[list[DeviceHealth]]:
        """The driver's full list now, then on every change and every ``timeout / 3`` s."""
        while True:
            changed = self._changed
            yield health_report(self.devices(driver), pool=self.pool, now=int(time.time()),
                                timeout=self.timeout)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), self.timeout / 3)


def owner_only_directory(path: Path) -> None:
    """The DRA socket's own directory (``<plugins dir>/<driver>``): created mode 0700, or
    made 0700 when the agent owns it (a hostPath ``DirectoryOrCreate`` makes it 0755). The
    registration directory is the kubelet's: never changed."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid == os.geteuid() and info.st_mode & 0o077:
        path.chmod(0o700)


class DriverPlugin:
    """One driver's plugin: its server, its two sockets, and what its calls do."""

    def __init__(self, driver: str, service: KubeletService, feed: HealthFeed, *,
                 registry_dir: Path, plugins_dir: Path, backend: Path) -> None:
        self.driver = driver
        self.service = service
        self.feed = feed
        self.endpoint = Path(dra_socket(str(plugins_dir), driver))
        self.registration_path = registry_dir / registration_socket(driver)
        self.server = PluginServer(self, backend)
        self.dra_gate = GatedSocket(self.endpoint, backend)
        self.registration_gate = GatedSocket(self.registration_path, backend)
        self.registered = asyncio.Event()
        """Set once the kubelet confirmed the registration (again after each restart)."""
        self.registrations = 0

    async def start(self) -> None:
        await asyncio.to_thread(owner_only_directory, self.endpoint.parent)
        await self.server.start()
        try:
            await self.dra_gate.start()
            await self.registration_gate.start()
        except BaseException:
            await self.stop()
            raise
        log.info("kubelet plugin %s: registration socket %s, DRA service %s", self.driver,
                 self.registration_path, self.endpoint)

    async def stop(self) -> None:
        await self.registration_gate.stop()
        await self.dra_gate.stop()
        await self.server.stop()

    # ------------------------------------------------------------------ the calls

    def info(self) -> PluginInfo:
        return PluginInfo(PLUGIN_TYPE, self.driver, str(self.endpoint), SUPPORTED_VERSIONS)

    def registration(self, status: RegistrationStatus) -> None:
        if status.registered:
            self.registrations += 1
            self.registered.set()
            metrics.record_kubelet_registration()
            log.info("kubelet plugin %s: registered with the kubelet", self.driver)
        else:
            self.registered.clear()
            log.error("kubelet plugin %s: the kubelet refused the registration: %s",
                      self.driver, status.error)

    async def prepare(self, claims: Sequence[Claim]) -> dict[str, ClaimResult]:
        return await self.service.prepare(self.driver, claims)

    async def unprepare(self, claims: Sequence[Claim]) -> dict[str, str]:
        return await self.service.unprepare(self.driver, claims)

    def health(self) -> AsyncIterator[list[DeviceHealth]]:
        return self.feed.watch(self.driver)


class KubeletPlugins:
    """A node's plugins, one per driver; :meth:`sync` follows the drivers as they change."""

    def __init__(self, service: KubeletService, feed: HealthFeed, *, registry_dir: Path,
                 plugins_dir: Path) -> None:
        self.service = service
        self.feed = feed
        self.registry_dir = registry_dir
        self.plugins_dir = plugins_dir
        self.plugins: dict[str, DriverPlugin] = {}
        self._private: Path | None = None
        self._serial = 0

    async def sync(self, drivers: Iterable[str]) -> None:
        """Serve exactly ``drivers``: start the new ones' plugins, stop the gone ones'."""
        wanted = set(drivers)
        for driver in sorted(set(self.plugins) - wanted):
            await self.plugins.pop(driver).stop()
            log.info("kubelet plugin %s: stopped (no devices of the driver any more)", driver)
        for driver in sorted(wanted - set(self.plugins)):
            if self._private is None:  # short: a unix socket's path is at most 107 bytes
                self._private = Path(tempfile.mkdtemp(prefix="kdra-kubelet-"))
            self._serial += 1
            plugin = DriverPlugin(driver, self.service, self.feed,
                                  registry_dir=self.registry_dir, plugins_dir=self.plugins_dir,
                                  backend=self._private / f"{self._serial}.sock")
            await plugin.start()
            self.plugins[driver] = plugin

    def health_changed(self) -> None:
        self.feed.changed()

    async def stop(self) -> None:
        for plugin in list(self.plugins.values()):
            await plugin.stop()
        self.plugins.clear()
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None

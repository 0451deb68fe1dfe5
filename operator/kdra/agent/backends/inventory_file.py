"""The fake inventory file (``--inventory``), read for the ``fake-gpu`` and ``generic``
backends: one file, parsed once per change and node, its two sections handed to the two
(:class:`InventorySection`: what both backends do with it).

Invariants:
- The file is read again only when its modification time, size or inode changed
  (:meth:`InventoryFile.signature`); a node's parse is kept until then, so the two backends
  reading it for one node parse it once.
- A malformed file raises :class:`~kdra.dra.errors.InvalidObject` naming the line and field;
  an unreadable one :class:`~kdra.agent.core.backend.DiscoveryError`.
- Thread-safe: nodes are discovered from worker threads; at worst a node is parsed twice.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Literal

from kdra.agent.core.backend import DiscoveryError
from kdra.agent.core.gpu_profiles import GPU_DRIVER
from kdra.agent.core.inventory import InventorySections, parse_inventory_sections
from kdra.agent.core.inventory_devices import Inventory


class InventoryFile:
    """An inventory YAML file (for kind, tests, demos and simulated nodes)."""

    def __init__(self, path: Path, default_driver: str = GPU_DRIVER) -> None:
        self.path = path
        self.default_driver = default_driver
        self._lock = threading.Lock()
        self._parsed: dict[str, tuple[object, InventorySections]] = {}

    def signature(self) -> object:
        try:
            stat = self.path.stat()
        except OSError:
            return ("missing",)
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def sections(self, node: str) -> InventorySections:
        """The file's devices for ``node`` (blocking: reads the file when it changed)."""
        signature = self.signature()
        with self._lock:
            cached = self._parsed.get(node)
        if cached is not None and cached[0] == signature:
            return cached[1]
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise DiscoveryError(f"cannot read inventory {self.path}: {exc}") from exc
        sections = parse_inventory_sections(text, node, source=str(self.path),
                                            default_driver=self.default_driver)
        with self._lock:
            self._parsed[node] = (signature, sections)
        return sections


class InventorySection:
    """A backend's devices from one ``section`` of an inventory file (mixed into the
    ``fake-gpu`` and ``generic`` backends)."""

    section: Literal["gpus", "devices"]

    def __init__(self, source: InventoryFile) -> None:
        self.source = source
        self.description = f"{self.section} of inventory {source.path}"

    def discover(self, node: str) -> Inventory:
        sections = self.source.sections(node)
        return sections.gpus if self.section == "gpus" else sections.devices

    def signature(self) -> object | None:
        return self.source.signature()


__all__ = ["InventoryFile", "InventorySection"]

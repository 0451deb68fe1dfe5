"""Which device backends an agent runs (``--backends``): the built-in ones, registered here and
only here, and a vendor's, loaded by ``module:Class``.

=============  ============================================================================
name           devices
=============  ============================================================================
``nvml``       real NVIDIA GPUs (and their MIG devices) through NVML
``fake-gpu``   the ``--inventory`` file's GPU profiles (``gpus:``)
``generic``    the ``--inventory`` file's other devices (``devices:``, the seed's cats)
``mod:Class``  a vendor's backend: ``Class`` (or any callable) of the importable module
               ``mod``, called with the agent's :class:`~kdra.agent.settings.AgentSettings`,
               returning a :class:`~kdra.agent.core.backend.DeviceBackend` (e.g. a subclass
               of :class:`~kdra.agent.core.backend.BackendBase`); tests/fpga_backend.py is one
=============  ============================================================================

Without ``--backends``: ``fake-gpu generic`` with ``--inventory``, else ``nvml``.

Invariants:
- Only whoever runs the agent chooses its code: ``--backends`` (or ``KDRA_BACKENDS``) is the
  agent process's own flag, set in its DaemonSet by the cluster's operators; nothing in the
  inventory, a claim or a pod names a module. A ``module:Class`` must be importable from the
  agent's own Python path.
- Every mistake stops the agent before it connects, with a :class:`BackendSettingsError`
  naming the entry and the fix: an unknown name, a module that does not import, a class that
  does not build a backend, two backends of one name, an inventory backend without
  ``--inventory`` (or an ``--inventory`` no backend reads), NVML for simulated nodes.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kdra.agent.backends.fake_gpu import FakeGpuBackend
from kdra.agent.backends.generic import GenericBackend
from kdra.agent.backends.inventory_file import InventoryFile
from kdra.agent.backends.nvml import NvmlBackend
from kdra.agent.core.backend import BACKEND_NAME, Backends, DeviceBackend
from kdra.agent.settings import AgentSettings

log = logging.getLogger(__name__)

Builtin = Callable[[AgentSettings, InventoryFile | None], DeviceBackend]

BUILTIN: Mapping[str, Builtin] = {
    "nvml": lambda settings, _: NvmlBackend(driver=settings.driver,
                                            xid_hold=settings.nvml_xid_hold),
    "fake-gpu": lambda _, inventory: FakeGpuBackend(_inventory(inventory)),
    "generic": lambda _, inventory: GenericBackend(_inventory(inventory)),
}
"""The built-in backends, by name: the one place a backend is registered."""

INVENTORY_BACKENDS = ("fake-gpu", "generic")
"""The built-in backends that read ``--inventory``."""

_SPEC = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*)$")


class BackendSettingsError(ValueError):
    """``--backends`` (or ``--inventory`` with it) names something the agent cannot run."""


def _inventory(inventory: InventoryFile | None) -> InventoryFile:
    if inventory is None:  # checked by backend_names; kept for a direct caller
        raise BackendSettingsError("the fake-gpu and generic backends need --inventory")
    return inventory


def backend_names(settings: AgentSettings, nodes: Sequence[str]) -> list[str]:
    """The backends ``settings`` ask for, in order (``--backends``, else the default)."""
    names = [word for word in re.split(r"[\s,]+", settings.backends.strip()) if word]
    if not names:
        if not settings.inventory and len(nodes) > 1:
            raise BackendSettingsError(
                "--simulate-nodes needs --inventory (NVML sees one machine's GPUs)")
        names = list(INVENTORY_BACKENDS) if settings.inventory else ["nvml"]
    for name in names:
        if name not in BUILTIN and not _SPEC.match(name):
            raise BackendSettingsError(
                f"{name!r} is neither a built-in backend ({', '.join(BUILTIN)}) nor "
                "'module:Class' (a vendor's backend, importable by the agent)")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise BackendSettingsError(f"{', '.join(duplicates)} named twice")
    reads = [name for name in names if name in INVENTORY_BACKENDS]
    if reads and not settings.inventory:
        raise BackendSettingsError(
            f"{' and '.join(reads)} {'need' if len(reads) > 1 else 'needs'} the fake "
            "inventory file: set --inventory, or leave them out of --backends")
    if settings.inventory and not reads:
        raise BackendSettingsError(
            f"--inventory {settings.inventory} is set but no backend reads it: add fake-gpu "
            "and/or generic to --backends, or drop --inventory")
    if "nvml" in names and len(nodes) > 1:
        raise BackendSettingsError("nvml cannot serve simulated nodes (NVML sees one "
                                   "machine's GPUs): use --inventory for --simulate-nodes")
    return names


def load_backend(spec: str, settings: AgentSettings) -> DeviceBackend:
    """A vendor's backend from ``module:Class`` (see the module's table)."""
    match = _SPEC.match(spec)
    if match is None:
        raise BackendSettingsError(f"{spec!r} is not 'module:Class'")
    module_name, attribute = match.groups()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raises while importing
        raise BackendSettingsError(f"{spec}: module {module_name!r} does not import: "
                                   f"{type(exc).__name__}: {exc}") from exc
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise BackendSettingsError(f"{spec}: module {module_name!r} has no class or "
                                   f"function {attribute!r}")
    try:
        backend = factory(settings)
    except Exception as exc:
        raise BackendSettingsError(f"{spec}: building the backend failed: "
                                   f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(backend, DeviceBackend):
        raise BackendSettingsError(
            f"{spec}: {type(backend).__name__} is not a device backend (derive it from "
            "kdra.agent.core.backend.BackendBase, or give every DeviceBackend member)")
    if not BACKEND_NAME.match(str(backend.name or "")) or backend.name in BUILTIN:
        raise BackendSettingsError(
            f"{spec}: its name {backend.name!r} must be a DNS label other than "
            f"{', '.join(BUILTIN)}")
    return backend


def make_backends(settings: AgentSettings, nodes: Sequence[str]) -> Backends:
    """The backends ``settings`` ask for, built (not yet asked for devices)."""
    inventory = (InventoryFile(Path(settings.inventory), default_driver=settings.driver)
                 if settings.inventory else None)
    built: list[DeviceBackend] = []
    for name in backend_names(settings, nodes):
        if name in BUILTIN:
            built.append(BUILTIN[name](settings, inventory))
        else:
            backend = load_backend(name, settings)
            log.info("device backend %r (%s) loaded from %s", backend.name,
                     backend.description, name)
            built.append(backend)
    try:
        return Backends(built)
    except ValueError as exc:
        raise BackendSettingsError(str(exc)) from exc


__all__ = ["BUILTIN", "INVENTORY_BACKENDS", "BackendSettingsError", "backend_names",
           "load_backend", "make_backends"]

"""The node agent's health sources, and the marks file behind ``kdra agent health mark``.

Every poll the agent asks each source what it sees now, per device (``(driver, name)`` →
:class:`~kdra.agent.core.health.Observation`), takes the worst answer per device and feeds the
result to the node's :class:`~kdra.agent.core.health.HealthDebouncer`:

- **inventory**: the discovery's own verdict (a device the fake inventory lists as
  ``unhealthy``, a GPU whose NVML queries failed) — degraded;
- **marks**: the marks file an administrator (or a test, or a demo) writes with
  ``kdra agent health mark <device> unhealthy|lost|healthy``;
- **each device backend** (:meth:`kdra.agent.core.backend.DeviceBackend.observe_health`,
  e.g. NVML's XID critical errors, ECC and retired pages, lost GPUs), asked through
  :mod:`kdra.agent.node_health`.

Marks file (JSON, written atomically; one file per agent state directory)::

    {"version": 1, "marks": [
      {"node": "node-1", "driver": "gpu.kdra.dev", "device": "gpu-0",
       "health": "lost", "reason": "MarkedLost"}]}

``node`` ``"*"`` marks the device on every node the agent serves (simulation).

Invariants:
- A source never raises into the agent: the marks file is read totally (a malformed file is
  logged once per change and counts as "no marks"; the previous marks are *not* kept, so a
  broken file cannot pin a device unhealthy forever without a message saying why).
- The marks file is re-read only when its modification time, size or inode changed.
- :func:`write_mark` is safe against concurrent ``mark`` commands (an exclusive ``flock`` on
  a lock file beside it) and leaves the old or the new file, never a torn one.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kdra.agent.checkpoint import atomic_write
from kdra.agent.core.backend import DeviceKey
from kdra.agent.core.health import HEALTHY, Health, Observation
from kdra.agent.core.inventory_devices import Inventory
from kdra.dra.taints import label_value

log = logging.getLogger(__name__)
MAX_MARKS = 4096
MAX_MARKS_BYTES = 1 << 20
ANY_NODE = "*"


class HealthSource(Protocol):
    description: str

    def observe(self, node: str, inventory: Inventory) -> dict[DeviceKey, Observation]:
        """What the source sees now on ``node`` (devices not listed: nothing wrong)."""


def worst(*sources: Mapping[DeviceKey, Observation]) -> dict[DeviceKey, Observation]:
    """Per device, the worst observation of all sources (the first one of equal health)."""
    out: dict[DeviceKey, Observation] = {}
    for source in sources:
        for key, seen in source.items():
            if seen.health > out.get(key, HEALTHY).health:
                out[key] = seen
    return out


class InventoryHealth:
    """The discovery's verdict: unhealthy inventory devices are degraded."""

    description = "inventory"

    def observe(self, node: str, inventory: Inventory) -> dict[DeviceKey, Observation]:
        return {(d.driver, d.name): Observation(Health.DEGRADED,
                                                label_value(d.health_reason, "Unhealthy"))
                for d in inventory.devices if not d.healthy}


@dataclass(frozen=True, slots=True)
class Mark:
    node: str
    driver: str
    device: str
    health: Health
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"node": self.node, "driver": self.driver, "device": self.device,
                "health": self.health.word, "reason": self.reason}


class MarksError(ValueError):
    """The marks file is malformed (message names the entry and field)."""


def parse_marks(text: str | bytes) -> list[Mark]:
    """The marks in a marks file; MarksError naming the entry and field when malformed."""
    if len(text) > MAX_MARKS_BYTES:
        raise MarksError(f"larger than {MAX_MARKS_BYTES} bytes")
    try:
        data = json.loads(text) if text.strip() else {"version": 1, "marks": []}
    except ValueError as exc:
        raise MarksError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != 1:
        raise MarksError("expected an object with \"version\": 1")
    entries = data.get("marks", [])
    if not isinstance(entries, list) or len(entries) > MAX_MARKS:
        raise MarksError(f"marks: expected a list of at most {MAX_MARKS} entries")
    marks = []
    for index, entry in enumerate(entries):
        where = f"marks[{index}]"
        if not isinstance(entry, dict):
            raise MarksError(f"{where}: expected an object")
        values: dict[str, str] = {}
        for name in ("node", "driver", "device", "health"):
            value = entry.get(name)
            if not isinstance(value, str) or not value or len(value) > 253:
                raise MarksError(f"{where}.{name}: expected a non-empty string")
            values[name] = value
        reason = entry.get("reason", "")
        if not isinstance(reason, str):
            raise MarksError(f"{where}.reason: expected a string")
        try:
            health = Health.parse(values["health"])
        except ValueError as exc:
            raise MarksError(f"{where}.health: {exc}") from exc
        marks.append(Mark(values["node"], values["driver"], values["device"], health,
                          label_value(reason, default_reason(health))))
    return marks


def default_reason(health: Health) -> str:
    return {Health.HEALTHY: "", Health.DEGRADED: "MarkedUnhealthy",
            Health.LOST: "MarkedLost"}[health]


class MarksFile:
    """The marks an administrator wrote, re-read when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.description = f"marks file {path}"
        self._signature: object = None
        self._marks: list[Mark] = []

    def _signature_now(self) -> object:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def marks(self) -> list[Mark]:
        signature = self._signature_now()
        if signature == self._signature:
            return self._marks
        self._signature = signature
        if signature is None:
            self._marks = []
            return self._marks
        try:
            if self.path.stat().st_size > MAX_MARKS_BYTES:  # not read at all: bounded
                raise MarksError(f"larger than {MAX_MARKS_BYTES} bytes")
            self._marks = parse_marks(self.path.read_bytes())
        except (OSError, MarksError) as exc:
            log.error("health marks file %s ignored (fix or delete it): %s", self.path, exc)
            self._marks = []
        return self._marks

    def observe(self, node: str, inventory: Inventory) -> dict[DeviceKey, Observation]:
        return {(m.driver, m.device): Observation(m.health, m.reason)
                for m in self.marks() if m.node in (node, ANY_NODE)
                and m.health is not Health.HEALTHY}


def write_mark(path: Path, mark: Mark) -> list[Mark]:
    """Record ``mark`` in the marks file (a healthy mark removes the device's entry); returns
    the marks now in the file. Raises MarksError when the existing file is malformed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            current = parse_marks(path.read_bytes()) if path.exists() else []
            kept = [m for m in current if (m.node, m.driver, m.device) !=
                    (mark.node, mark.driver, mark.device)]
            if mark.health is not Health.HEALTHY:
                kept.append(mark)
            data = {"version": 1, "marks": [m.to_json() for m in kept]}
            atomic_write(path, (json.dumps(data, indent=1) + "\n").encode())
            return kept
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def observe_all(sources: Iterable[HealthSource], node: str,
                inventory: Inventory) -> dict[DeviceKey, Observation]:
    """The worst observation per device over ``sources``; a source that fails is logged and
    skipped (its devices count as not reported)."""
    seen: list[dict[DeviceKey, Observation]] = []
    for source in sources:
        try:
            seen.append(source.observe(node, inventory))
        except Exception as exc:  # one broken source must not stop health for the others
            log.warning("node %s: health source %s failed: %s", node, source.description, exc)
    return worst(*seen)




def mark_command(args: argparse.Namespace) -> int:
    """``kdra agent health mark``: write a health mark for a running agent to pick up at its
    next poll (``device``, ``health``, ``node``, ``driver``, ``reason``, ``state_dir``,
    ``marks_file``). Exit code 0, 1 when the file cannot be updated, 2 on a bad health."""
    try:
        health = Health.parse(args.health)
    except ValueError as exc:
        print(f"kdra agent health mark: {exc}", file=sys.stderr)
        return 2
    state_dir = args.state_dir or os.environ.get("KDRA_STATE_DIR") or "/var/lib/kdra"
    path = Path(args.marks_file or os.environ.get("KDRA_HEALTH_MARKS")
                or Path(state_dir) / "health-marks.json")
    node = args.node or os.environ.get("NODE_NAME") or ANY_NODE
    mark = Mark(node, args.driver, args.device, health,
                label_value(args.reason, default_reason(health)) if args.reason
                else default_reason(health))
    try:
        marks = write_mark(path, mark)
    except (MarksError, OSError) as exc:
        print(f"kdra agent health mark: cannot update {path}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"file": str(path), "marks": [m.to_json() for m in marks]}, indent=1))
    return 0


__all__ = [
    "ANY_NODE",
    "DeviceKey",
    "HealthSource",
    "InventoryHealth",
    "Mark",
    "MarksError",
    "MarksFile",
    "mark_command",
    "observe_all",
    "parse_marks",
    "worst",
    "write_mark",
]

"""Partitioned and shared GPUs in ``kdra describe``: per GPU, its partitions in use and its
counters used/total; per shared device, each share and who holds it (pure, no I/O).

- A *partitioned GPU* is a counter set of a pool's ``sharedCounters`` (kdra names it after
  the GPU: ``gpu-0``). Its row lists the pool's devices that consume from it and are
  allocated (with their claims), and every counter as ``used/total``, where *used* sums the
  ``consumesCounters`` of every allocated device of the pool (adminAccess results count
  nothing, as for the allocator). Counters of total 1 (``memory-slice-0`` …) are shown
  together as a map, ``#`` used and ``.`` free: ``memory-slice-[0-7] ####....``.
- A device nobody holds whose counters have no room left for it (a partition whose memory
  slices another partition occupies, a whole GPU with any partition in use) is *blocked*:
  :attr:`GpuViews.blocked` names the counter that is short.
- A *shared device* has ``allowMultipleAllocations``. Its rows list each share (a result
  with a ``shareID``): claim, pods, ``consumedCapacity``; and the device's capacity as
  ``used/total`` per capacity name.

Only the newest generation of each pool counts (as in :mod:`kdra.cli.core.describe`).
Malformed objects never make describing fail: what does not parse counts as absent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdra.cli.core.tables import table
from kdra.dra.quantity import InvalidQuantity, Quantity, parse_quantity

JSON = Mapping[str, Any]


@dataclass(frozen=True)
class Use:
    """One allocation result on a device: who holds it and what it takes."""

    device: str
    claim: str
    pods: tuple[str, ...]
    share_id: str = ""
    consumed: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class PartitionedGpu:
    node: str
    driver: str
    pool: str
    gpu: str
    """The counter set's name."""
    partitions: int
    """Devices of the pool that consume from the set (the whole GPU included)."""
    allocated: tuple[Use, ...]
    counters: tuple[tuple[str, str, str], ...]
    """(counter, used, total) in natural order."""

    def counter_text(self) -> str:
        units = [(name, used) for name, used, total in self.counters if total == "1"]
        others = [f"{name} {used}/{total}" for name, used, total in self.counters
                  if total != "1"]
        if units:
            stem = re.sub(r"\d+$", "", units[0][0])
            label = f"{stem}[0-{len(units) - 1}]" if all(
                re.sub(r"\d+$", "", n) == stem for n, _ in units) else "units"
            others.append(f"{label} " + "".join("." if used == "0" else "#"
                                               for _, used in units))
        return ", ".join(others)


@dataclass(frozen=True)
class SharedDevice:
    node: str
    driver: str
    pool: str
    device: str
    capacity: tuple[tuple[str, str, str], ...]
    """(capacity, used by shares, total)."""
    shares: tuple[Use, ...]


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _quantity(value: Any) -> Quantity | None:
    try:
        return parse_quantity(str(_map(value).get("value", value)))
    except InvalidQuantity:
        return None


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p)


def _uses(claims: Iterable[JSON]) -> dict[tuple[str, str, str], list[Use]]:
    """(driver, pool, device) → the non-admin allocation results on it."""
    uses: dict[tuple[str, str, str], list[Use]] = {}
    for claim in claims:
        meta, status = _map(claim.get("metadata")), _map(claim.get("status"))
        namespace = str(meta.get("namespace") or "")
        pods = tuple(f"{namespace}/{_map(ref).get('name')}" for ref in
                     _list(status.get("reservedFor")) if _map(ref).get("name"))
        results = _list(_map(_map(status.get("allocation")).get("devices")).get("results"))
        for result in map(_map, results):
            if result.get("adminAccess"):
                continue
            key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            consumed = tuple(sorted((str(k), str(v)) for k, v in
                                    _map(result.get("consumedCapacity")).items()))
            uses.setdefault(key, []).append(Use(key[2], f"{namespace}/{meta.get('name')}",
                                                pods, str(result.get("shareID") or ""),
                                                consumed))
    return uses


@dataclass(frozen=True)
class GpuViews:
    gpus: tuple[PartitionedGpu, ...]
    shared: tuple[SharedDevice, ...]
    blocked: Mapping[tuple[str, str, str], str]
    """(driver, pool, device) of each device nobody holds whose counters do not have room
    for it → which counter is short (``gpu-0 memory-slice-4``)."""


def gpu_views(pools: Mapping[tuple[str, str], list[JSON]], claims: Iterable[JSON]) -> GpuViews:
    """The partitioned GPUs and shared devices of ``pools`` ((driver, pool) → the slices of
    its newest generation) with their users among ``claims``."""
    uses = _uses(claims)
    gpus: list[PartitionedGpu] = []
    shared: list[SharedDevice] = []
    blocked: dict[tuple[str, str, str], str] = {}
    for (driver, pool), members in pools.items():
        specs = [_map(s.get("spec")) for s in members]
        node = next((str(s["nodeName"]) for s in specs if s.get("nodeName")), "<selector>")
        totals: dict[str, dict[str, Quantity | None]] = {}
        for spec in specs:
            for counter_set in map(_map, _list(spec.get("sharedCounters"))):
                totals[str(counter_set.get("name"))] = {
                    str(k): _quantity(v) for k, v in _map(counter_set.get("counters")).items()}
        used: dict[str, dict[str, Quantity]] = {name: {} for name in totals}
        members_of: dict[str, int] = dict.fromkeys(totals, 0)
        holders: dict[str, list[Use]] = {name: [] for name in totals}
        for spec in specs:
            for device in map(_map, _list(spec.get("devices"))):
                name = str(device.get("name"))
                held = uses.get((driver, pool, name), [])
                for consumption in map(_map, _list(device.get("consumesCounters"))):
                    set_name = str(consumption.get("counterSet"))
                    if set_name not in totals:
                        continue
                    members_of[set_name] += 1
                    holders[set_name] += held
                    for counter, value in _map(consumption.get("counters")).items():
                        amount = _quantity(value)
                        if amount is not None and held:  # once however many shares
                            bucket = used[set_name]
                            bucket[counter] = bucket.get(counter, Quantity(0)) + amount
                if device.get("allowMultipleAllocations") is True:
                    shared.append(_shared(node, driver, pool, name, device, held))
        for spec in specs:  # once every holder is counted: who has no room left
            for device in map(_map, _list(spec.get("devices"))):
                name = str(device.get("name"))
                if (driver, pool, name) not in uses:
                    short = _short(device, totals, used)
                    if short:
                        blocked[(driver, pool, name)] = short
        for set_name, counters in totals.items():
            rows = tuple((counter, str(used[set_name].get(counter, Quantity(0))),
                          str(total) if total is not None else "?")
                         for counter, total in sorted(counters.items(),
                                                      key=lambda kv: _natural(kv[0])))
            gpus.append(PartitionedGpu(node, driver, pool, set_name, members_of[set_name],
                                       tuple(dict.fromkeys(holders[set_name])), rows))
    gpus.sort(key=lambda g: (_natural(g.node), g.driver, _natural(g.gpu)))
    shared.sort(key=lambda d: (_natural(d.node), d.driver, _natural(d.device)))
    return GpuViews(tuple(gpus), tuple(shared), blocked)


def _short(device: JSON, totals: Mapping[str, Mapping[str, Quantity | None]],
           used: Mapping[str, Mapping[str, Quantity]]) -> str:
    """The first counter ``device`` would take past its total (``gpu-0 memory-slice-4``)."""
    for consumption in map(_map, _list(device.get("consumesCounters"))):
        set_name = str(consumption.get("counterSet"))
        for counter, value in sorted(_map(consumption.get("counters")).items()):
            amount, total = _quantity(value), totals.get(set_name, {}).get(str(counter))
            if amount is not None and total is not None and \
                    used.get(set_name, {}).get(str(counter), Quantity(0)) + amount > total:
                return f"{set_name} {counter}"
    return ""


def _shared(node: str, driver: str, pool: str, name: str, device: JSON,
            held: list[Use]) -> SharedDevice:
    rows = []
    for capacity, value in sorted(_map(device.get("capacity")).items()):
        total = _quantity(value)
        used = Quantity(0)
        for use in held:
            amount = _quantity(dict(use.consumed).get(str(capacity), "0"))
            used = used + amount if amount is not None else used
        rows.append((str(capacity), str(used), str(total) if total is not None else "?"))
    return SharedDevice(node, driver, pool, name, tuple(rows), tuple(held))


def gpus_json(gpus: Iterable[PartitionedGpu], shared: Iterable[SharedDevice]) -> dict[str, Any]:
    """Plain data for ``--output json``."""
    def use(u: Use) -> dict[str, Any]:
        return {"device": u.device, "claim": u.claim, "pods": list(u.pods),
                "shareID": u.share_id, "consumedCapacity": dict(u.consumed)}
    return {
        "partitionedGPUs": [{"node": g.node, "driver": g.driver, "pool": g.pool,
                             "gpu": g.gpu, "partitions": g.partitions,
                             "allocated": [use(u) for u in g.allocated],
                             "counters": {c: {"used": u, "total": t}
                                          for c, u, t in g.counters}} for g in gpus],
        "sharedDevices": [{"node": d.node, "driver": d.driver, "pool": d.pool,
                           "device": d.device,
                           "capacity": {c: {"used": u, "total": t} for c, u, t in d.capacity},
                           "shares": [use(u) for u in d.shares]} for d in shared],
    }


def render_gpus(gpus: Iterable[PartitionedGpu], shared: Iterable[SharedDevice]) -> list[str]:
    """The two tables (none when there is nothing to show)."""
    out = []
    gpus, shared = list(gpus), list(shared)
    if gpus:
        out.append(table(
            ("NODE", "POOL", "GPU", "PARTITIONS", "IN USE", "COUNTERS (USED/TOTAL)"),
            [(g.node, f"{g.driver}/{g.pool}", g.gpu, str(g.partitions),
              ",".join(f"{u.device} ({u.claim})" for u in g.allocated) or "-",
              g.counter_text()) for g in gpus]))
    if shared:
        rows = []
        for d in shared:
            capacity = ", ".join(f"{c} {u}/{t}" for c, u, t in d.capacity) or "-"
            for share in d.shares or (None,):
                rows.append((d.node, f"{d.driver}/{d.pool}", d.device, capacity,
                             share.share_id if share else "-", share.claim if share else "-",
                             ",".join(p.split("/", 1)[1] for p in share.pods) or "-"
                             if share else "-",
                             ",".join(f"{k}={v}" for k, v in share.consumed) or "-"
                             if share else "-"))
        out.append(table(("NODE", "POOL", "SHARED DEVICE", "CAPACITY (USED/TOTAL)", "SHARE",
                          "CLAIM", "PODS", "CONSUMED"), rows))
    return out


__all__ = ["GpuViews", "PartitionedGpu", "SharedDevice", "Use", "gpu_views", "gpus_json",
           "render_gpus"]

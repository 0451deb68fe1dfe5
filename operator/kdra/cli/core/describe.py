"""What is free and what is taken: the view behind ``kdra describe`` (pure, no I/O).

Upstream DRA shows neither free vs allocated devices per node or pool nor, in ``kubectl get
resourceclaims``, which devices a claim holds (kubernetes/enhancements issue 5677). :func:`describe`
builds that view from the raw API objects (ResourceSlices and ResourceClaims as JSON dicts,
read by the CLI); :func:`render` prints it as tables, :meth:`Description.to_json` as data.

Rules:

- Per pool (driver, pool name) only the slices of the highest ``pool.generation`` count, as for
  the allocator. A pool whose newest generation has fewer (or more) slices than
  ``resourceSliceCount`` is shown but marked incomplete: the allocator does not use it yet.
- A device is *allocated* while a claim's ``status.allocation`` holds it; *free* otherwise. A
  result of an admin-access request holds no device (upstream's rule): the device table and
  the counts leave it out, the claims table marks such devices ``(admin access)`` and the JSON
  lists such a claim among the device's ``claims`` with ``adminAccess: true``. Holders list
  the claim, its request, the pods in its ``reservedFor`` and whether the node agent reported
  the device Ready in ``status.devices[]`` (None: not reported yet).
- A claim can hold a device that no current slice publishes (the node or its agent went away):
  it is listed with the claim as not published, and counted in no pool.
- A claim's node is the one its allocation's node selector names (``matchFields metadata.name
  In [node]``, what the allocator writes for node-local devices); empty otherwise.
- A device with a ``NoSchedule`` or ``NoExecute`` taint in its slice (e.g. the agent's
  ``gpu.kdra.dev/unhealthy``) shows it beside its state: ``free (tainted
  gpu.kdra.dev/unhealthy=XID-48:NoSchedule)``; informational taints are not shown. A pool's
  FREE counts devices nobody holds *and* no acting taint keeps from new claims.
- Malformed or partial objects never make describing fail: a missing field reads as empty.
- :func:`render` holds no control sequences from the cluster: every cell (a device's
  ``productName``, a claim's name) is shown through :func:`kdra.kube.core.printable.printable`
  by :func:`~kdra.cli.core.tables.table`; the other lines are kdra's own.

Each claim's row (state, node, devices, pods) is the DRA core's usage view
(:mod:`kdra.dra.usage.claims`), which the operator's utilisation gauges share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdra.cli.core.describe_gpus import (
    PartitionedGpu,
    SharedDevice,
    gpu_views,
    gpus_json,
    render_gpus,
)
from kdra.cli.core.tables import table as _table
from kdra.dra.usage.claims import ClaimDevice, ClaimRow, claims_of, natural

__all__ = [
    "Description",
    "DeviceRow",
    "Holder",
    "PoolRow",
    "describe",
    "render",
]

JSON = Mapping[str, Any]

DETAIL_ATTRIBUTES = ("productName", "model")
"""Attributes that name what a device is (GPU drivers publish one of them); without them the
details column shows the device's first few string attributes as ``name=value``."""
MAX_DETAIL_ATTRIBUTES = 3


@dataclass(frozen=True)
class Holder:
    """One claim holding one device."""

    claim: str
    """``namespace/name``."""
    request: str
    pods: tuple[str, ...]
    """``namespace/name`` of the pods the claim is reserved for."""
    ready: bool | None
    """The node agent's Ready condition for the device; None while it reported nothing."""
    admin_access: bool = False
    """The claim sees the device through admin access: it does not hold it."""


@dataclass(frozen=True)
class DeviceRow:
    name: str
    details: str
    holders: tuple[Holder, ...] = ()
    taints: tuple[str, ...] = ()
    """Acting taints as ``key=value:Effect``."""
    blocked: str = ""
    """Nobody holds it, but a counter it consumes has no room left (``gpu-0 memory-slice-4``:
    another partition occupies the slice)."""

    @property
    def held_by(self) -> tuple[Holder, ...]:
        """The holders that hold it (admin access holds nothing)."""
        return tuple(h for h in self.holders if not h.admin_access)

    @property
    def state(self) -> str:
        state = "allocated" if self.held_by else "free"
        if self.blocked:
            state = f"blocked ({self.blocked} in use)"
        return f"{state} (tainted {', '.join(self.taints)})" if self.taints else state


@dataclass(frozen=True)
class PoolRow:
    node: str
    """The slices' ``nodeName``; ``<selector>`` or ``<all nodes>`` for pools not on one node."""
    driver: str
    pool: str
    generation: int
    complete: bool
    devices: tuple[DeviceRow, ...]

    @property
    def total(self) -> int:
        return len(self.devices)

    @property
    def allocated(self) -> int:
        return sum(1 for device in self.devices if device.held_by)

    @property
    def free(self) -> int:
        """Devices nobody holds and neither an acting taint nor a full counter keeps from new
        claims (as ``kubectl kdra free`` counts them)."""
        return sum(1 for device in self.devices
                   if not device.held_by and not device.taints and not device.blocked)


@dataclass(frozen=True)
class Description:
    pools: tuple[PoolRow, ...]
    claims: tuple[ClaimRow, ...]
    gpus: tuple[PartitionedGpu, ...] = ()
    """Partitioned GPUs of the kept pools (:mod:`kdra.cli.core.describe_gpus`)."""
    shared: tuple[SharedDevice, ...] = ()
    """Devices several claims share, with their shares."""

    def to_json(self) -> dict[str, Any]:
        """Plain data for ``--output json`` (stable keys; counts precomputed)."""
        return {
            "pools": [{
                "node": pool.node, "driver": pool.driver, "pool": pool.pool,
                "generation": pool.generation, "complete": pool.complete,
                "total": pool.total, "allocated": pool.allocated, "free": pool.free,
                "devices": [{
                    "name": device.name, "details": device.details, "state": device.state,
                    "taints": list(device.taints), "blocked": device.blocked,
                    "claims": [{"claim": h.claim, "request": h.request, "pods": list(h.pods),
                                "ready": h.ready, "adminAccess": h.admin_access}
                               for h in device.holders],
                } for device in pool.devices],
            } for pool in self.pools],
            "claims": [{
                "namespace": claim.namespace, "name": claim.name, "state": claim.state,
                "node": claim.node, "pods": list(claim.pods),
                "devices": [{"request": d.request, "driver": d.driver, "pool": d.pool,
                             "device": d.device, "ready": d.ready, "published": d.published,
                             "adminAccess": d.admin_access}
                            for d in claim.devices],
            } for claim in self.claims],
            **gpus_json(self.gpus, self.shared),
        }


# --------------------------------------------------------------------------- building


def describe(slices: Iterable[JSON], claims: Iterable[JSON], *, node: str | None = None,
             driver: str | None = None) -> Description:
    """The pools of ``slices`` with each device's holders among ``claims``, and the claims.

    ``node`` / ``driver`` keep only the pools on that node / of that driver, and only the
    claims holding a device of a kept pool or allocated on that node (pending claims are
    kept unless a filter is given).
    """
    claims = list(claims)
    claim_rows = claims_of(claims)
    holders: dict[tuple[str, str, str], list[Holder]] = {}
    for row in claim_rows:
        for device in row.devices:
            holders.setdefault((device.driver, device.pool, device.device), []).append(
                Holder(claim=row.key, request=device.request, pods=row.pods,
                       ready=device.ready, admin_access=device.admin_access))
    newest = _newest_pools(slices)
    views = gpu_views(newest, claims)
    every_pool = [_pool_row(key, members, holders, views.blocked)
                  for key, members in newest.items()]
    published = {(pool.driver, pool.pool, device.name) for pool in every_pool
                 for device in pool.devices}
    pools = [pool for pool in every_pool
             if (node is None or pool.node == node) and (driver is None or pool.driver == driver)]
    kept_pools = {(pool.driver, pool.pool) for pool in pools}
    final_claims = []
    for row in claim_rows:
        devices = tuple(
            ClaimDevice(d.request, d.driver, d.pool, d.device, d.ready,
                        published=(d.driver, d.pool, d.device) in published,
                        device_class=d.device_class, unhealthy=d.unhealthy,
                        admin_access=d.admin_access)
            for d in row.devices)
        row = ClaimRow(row.namespace, row.name, row.state, row.node, devices, row.pods)
        unfiltered = node is None and driver is None
        on_kept_pool = any((d.driver, d.pool) in kept_pools for d in devices)
        on_node = node is not None and driver is None and row.node == node
        if unfiltered or on_kept_pool or on_node:
            final_claims.append(row)
    pools.sort(key=lambda p: (natural(p.node), p.driver, natural(p.pool)))
    final_claims.sort(key=lambda c: (c.namespace, natural(c.name)))
    return Description(
        pools=tuple(pools), claims=tuple(final_claims),
        gpus=tuple(g for g in views.gpus if (g.driver, g.pool) in kept_pools),
        shared=tuple(d for d in views.shared if (d.driver, d.pool) in kept_pools))


def _newest_pools(slices: Iterable[JSON]) -> dict[tuple[str, str], list[JSON]]:
    """(driver, pool) → the slices of its highest generation."""
    pools: dict[tuple[str, str], list[JSON]] = {}
    for obj in slices:
        spec = _map(obj.get("spec"))
        pool = _map(spec.get("pool"))
        key = (str(spec.get("driver") or ""), str(pool.get("name") or ""))
        current = pools.get(key)
        generation = _int(pool.get("generation"))
        if current is None or generation > _generation(current[0]):
            pools[key] = [obj]
        elif generation == _generation(current[0]):
            current.append(obj)
    return pools


def _pool_row(key: tuple[str, str], members: list[JSON],
              holders: Mapping[tuple[str, str, str], list[Holder]],
              blocked: Mapping[tuple[str, str, str], str]) -> PoolRow:
    driver, name = key
    members = sorted(members, key=lambda s: str(_map(s.get("metadata")).get("name") or ""))
    first = _map(members[0].get("spec"))
    expected = _int(_map(first.get("pool")).get("resourceSliceCount")) or 1
    devices: list[DeviceRow] = []
    seen: set[str] = set()
    for obj in members:
        for device in _list(_map(obj.get("spec")).get("devices")):
            device_name = str(_map(device).get("name") or "")
            if device_name in seen:
                continue
            seen.add(device_name)
            devices.append(DeviceRow(
                name=device_name, details=_details(_map(device), driver),
                holders=tuple(holders.get((driver, name, device_name), ())),
                taints=_taints(_map(device)),
                blocked=blocked.get((driver, name, device_name), "")))
    devices.sort(key=lambda d: natural(d.name))
    return PoolRow(node=_slice_node(first), driver=driver, pool=name,
                   generation=_generation(members[0]), complete=len(members) == expected,
                   devices=tuple(devices))


def _taints(device: JSON) -> tuple[str, ...]:
    found = []
    for raw in _list(device.get("taints"))[:16]:
        taint = _map(raw)
        effect = str(taint.get("effect") or "")
        if effect in ("NoSchedule", "NoExecute"):
            value = str(taint.get("value") or "")
            found.append(f"{taint.get('key')}{'=' + value if value else ''}:{effect}")
    return tuple(found)


def _slice_node(spec: JSON) -> str:
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    if spec.get("allNodes"):
        return "<all nodes>"
    return "<selector>"


def _details(device: JSON, driver: str) -> str:
    attributes = _map(device.get("attributes"))
    values: dict[str, str] = {}
    for raw_name, raw_value in attributes.items():
        name = str(raw_name)
        if name.startswith(f"{driver}/"):
            name = name[len(driver) + 1:]
        value = _map(raw_value)
        for kind in ("string", "version", "int", "bool"):
            if kind in value:
                values[name] = str(value[kind]).lower() if kind == "bool" else str(value[kind])
                break
    for name in DETAIL_ATTRIBUTES:
        if name in values:  # a partition says which: "NVIDIA H100 80GB HBM3 3g.40gb"
            return " ".join(v for v in (values[name], values.get("profile")) if v)
    strings = sorted((name, value) for name, value in values.items() if "/" not in name)
    return ",".join(f"{name}={value}" for name, value in strings[:MAX_DETAIL_ATTRIBUTES])


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _generation(obj: JSON) -> int:
    return _int(_map(_map(obj.get("spec")).get("pool")).get("generation"))


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


# --------------------------------------------------------------------------- rendering


def render(description: Description, *, devices: bool = True) -> str:
    """Tables as kubectl prints them: pools, then (with ``devices``) every device with its
    holders (one line per holder; POOL is ``driver/pool``), then claims. Empty sections say
    so in one line."""
    out: list[str] = []
    if description.pools:
        out.append(_table(
            ("NODE", "DRIVER", "POOL", "GENERATION", "DEVICES", "ALLOCATED", "FREE"),
            [(p.node, p.driver, p.pool, str(p.generation) + ("" if p.complete else " (incomplete)"),
              str(p.total), str(p.allocated), str(p.free)) for p in description.pools]))
        if devices:
            rows = [_device_row(pool, device, holder) for pool in description.pools
                    for device in pool.devices for holder in (device.held_by or (None,))]
            out.append(_table(("NODE", "POOL", "DEVICE", "DETAILS", "STATE", "CLAIM", "REQUEST",
                               "PODS", "READY"), rows))
        out += render_gpus(description.gpus, description.shared)
    else:
        out.append("No ResourceSlices: no node agent publishes devices (yet).")
    if description.claims:
        out.append(_table(
            ("NAMESPACE", "CLAIM", "STATE", "NODE", "DEVICES", "READY", "PODS"),
            [(c.namespace, c.name, c.state, c.node or "-",
              ",".join(str(d) + ("" if d.published else " (not published)")
                       + (" (admin access)" if d.admin_access else "")
                       for d in c.devices) or "-",
              f"{c.ready}/{len(c.devices)}" if c.devices else "-",
              ",".join(pod.split("/", 1)[1] for pod in c.pods) or "-")
             for c in description.claims]))
    else:
        out.append("No ResourceClaims.")
    return "\n\n".join(out) + "\n"


def _device_row(pool: PoolRow, device: DeviceRow, holder: Holder | None) -> tuple[str, ...]:
    if holder is None:
        taken = ("-", "-", "-", "-")
    else:
        taken = (holder.claim, holder.request, ",".join(holder.pods) or "-",
                 _ready(holder.ready))
    return (pool.node, f"{pool.driver}/{pool.pool}", device.name, device.details or "-",
            device.state, *taken)


def _ready(ready: bool | None) -> str:
    return "-" if ready is None else ("True" if ready else "False")



"""Publishing a node's devices: how one driver's devices become the pool's ResourceSlices.

- :func:`plan_publication` turns one driver's devices into the pool's slices (at most 128
  devices each, ``resourceSliceCount`` set, deterministic names) and decides whether the pool's
  ``generation`` must be bumped: whenever the set of published devices or any device changes,
  taints included. Every device is published; an unhealthy one carries the agent's
  ``gpu.kdra.dev/unhealthy`` taint (set by the agent's health loop, kdra.agent.core.health), so
  claims that do not tolerate it never get it.
- :func:`slice_name`: a slice's name, built from its node and driver, always valid and
  deterministic (:func:`kdra.kube.core.names.bounded_name`, as the agent's heartbeat Leases').

Invariants:
- Pure: planning reads no files and no clocks; the same devices give the same slices and
  names (a restarted agent publishes identical content).
- Every slice of a pool carries the same ``generation``; an unchanged pool plans no write
  (``changed`` false), a changed one a higher generation than any published.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdra import API_VERSION
from kdra.agent.core.inventory_devices import InventoryDevice
from kdra.agent.core.pool_layout import layout
from kdra.kube.core.names import bounded_name, dashed


def slice_name(node: str, driver: str, index: int) -> str:
    """``<node>-<driver-with-dots-as-dashes>-<index>``: deterministic, a DNS subdomain."""
    return bounded_name(f"{node}-{dashed(driver)}", f"-{index}")


def build_slices(*, node: str, driver: str, devices: Sequence[InventoryDevice], generation: int,
                 owner: Mapping[str, str] | None = None,
                 labels: Mapping[str, str] | None = None,
                 api_version: str = API_VERSION) -> list[dict[str, Any]]:
    """The pool ``node`` of ``driver``: every device, at most 128 per slice (64 when a device
    of the pool has taints or consumes counters, upstream's limit), the counter sets the
    devices provide in slices of their own (:mod:`kdra.agent.core.pool_layout`), every slice with
    ``nodeName``, the same ``generation`` and ``resourceSliceCount``.

    ``owner`` is the Node (``{"name", "uid"}``): the slices get an owner reference to it, so
    deleting the Node deletes them (the API server's garbage collector). ``api_version``:
    kdra's group, or ``resource.k8s.io/v1`` in the native flavour (the same content)."""
    parts = layout(devices)
    slices = []
    for index, part in enumerate(parts):
        metadata: dict[str, Any] = {"name": slice_name(node, driver, index)}
        if labels:
            metadata["labels"] = dict(labels)
        if owner:
            metadata["ownerReferences"] = [{
                "apiVersion": "v1", "kind": "Node", "name": owner["name"], "uid": owner["uid"],
                "controller": True,
            }]
        slices.append({
            "apiVersion": api_version, "kind": "ResourceSlice",
            "metadata": metadata,
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": generation,
                         "resourceSliceCount": len(parts)},
                **({"sharedCounters": [c.to_api() for c in part.counter_sets]}
                   if part.counter_sets else
                   {"devices": [device.to_api() for device in part.devices]}),
            },
        })
    return slices


def _content(obj: Mapping[str, Any]) -> Any:
    """What a slice says, apart from its generation (and server-set metadata)."""
    spec = dict(obj.get("spec") or {})
    pool = dict(spec.get("pool") or {})
    pool.pop("generation", None)
    spec["pool"] = pool
    spec.setdefault("devices", [])
    meta = obj.get("metadata") or {}
    owners = [(ref.get("kind"), ref.get("name"), ref.get("uid"))
              for ref in meta.get("ownerReferences") or ()]
    return meta.get("name"), spec, owners, dict(meta.get("labels") or {})


@dataclass(frozen=True)
class Publication:
    """What to write for one pool: nothing (``changed`` false), or every slice of a new
    generation plus the names of slices that no longer belong to it."""

    changed: bool
    generation: int
    slices: tuple[dict[str, Any], ...] = ()
    stale: tuple[str, ...] = ()


def plan_publication(*, node: str, driver: str, devices: Sequence[InventoryDevice],
                     published: Iterable[Mapping[str, Any]], owner: Mapping[str, str] | None,
                     min_generation: int = 0,
                     labels: Mapping[str, str] | None = None,
                     api_version: str = API_VERSION) -> Publication:
    """Compare the desired pool with the ``published`` slices of (driver, pool ``node``).

    Unchanged (same slices, same content, one generation) → ``changed=False``. Otherwise the
    new generation is one more than the highest published (and at least ``min_generation``,
    e.g. one more than the slices wiped at start-up), and ``stale`` lists published slices
    whose names the new generation does not use."""
    current = sorted(published, key=lambda s: str(s.get("metadata", {}).get("name")))
    generations = {int(s["spec"]["pool"].get("generation", 0)) for s in current}
    top = max(generations) if generations else None
    base = 0 if top is None else top
    desired = build_slices(node=node, driver=driver, devices=devices, generation=base,
                           owner=owner, labels=labels, api_version=api_version)
    if top is not None and len(generations) == 1 and top >= min_generation and \
            sorted(map(_content, current), key=repr) == sorted(map(_content, desired), key=repr):
        return Publication(changed=False, generation=top)
    generation = max(min_generation, 0 if top is None else top + 1)
    desired = build_slices(node=node, driver=driver, devices=devices, generation=generation,
                           owner=owner, labels=labels, api_version=api_version)
    names = {s["metadata"]["name"] for s in desired}
    stale = tuple(str(s["metadata"]["name"]) for s in current
                  if s["metadata"]["name"] not in names)
    return Publication(changed=True, generation=generation, slices=tuple(desired), stale=stale)

"""How one physical GPU is published: whole, as MIG-like partitions, or as a shared device.

An inventory GPU entry (or the NVML backend) chooses a mode per GPU:

- **whole** (default): one device ``gpu-<i>``, exclusively allocated;
- **partitions** (``partitions: mig``): the whole GPU plus every partition of its model's
  layout (:mod:`kdra.agent.core.gpu_partitions`: ``1g.10gb`` x7, ``2g.20gb`` x3, ``3g.40gb`` x2,
  ``4g.40gb``, ``7g.80gb`` on an H100-80GB), each consuming the memory and compute slices it
  occupies from the GPU's counter set, so the allocator never hands out two devices that
  overlap on the hardware. With NVML and MIG mode on, only the partitions that exist are
  published and the whole GPU is not (:func:`partitioned` with ``placements``);
- **shared by memory** (``sharing: memory``): one device with ``allowMultipleAllocations``
  whose ``memory`` capacity has a request policy (:data:`SHARE_POLICY`: default 1Gi, any
  multiple of 1Gi up to the GPU's memory), so several claims hold it at once, each with its
  share (``capacity.requests.memory``), and the sum never exceeds the GPU's memory.

Invariants:
- Pure: the same GPU device gives the same devices in the same order; a partition
  inherits its GPU's health (``healthy``, ``health_reason``) and names it as ``parent``.
- The GPU's counter set rides on the first device returned (``counter_sets``): the pool's
  publisher moves it into a ``sharedCounters`` slice (:mod:`kdra.agent.core.pool_layout`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from kdra.agent.core.gpu_partitions import PARTITION_LAYOUTS, partition_devices
from kdra.agent.core.inventory_devices import CounterUse, InventoryDevice

PARTITION_MODES = ("mig",)
"""Values of an inventory GPU entry's ``partitions``."""
SHARING_MODES = ("memory",)
"""Values of an inventory GPU entry's ``sharing``."""

SHARE_POLICY: Mapping[str, Any] = MappingProxyType({
    "default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}})
"""Request policy of a shared GPU's ``memory``: a claim that asks for nothing gets 1Gi, and
any request is rounded up to a whole number of GiB (at most the GPU's memory)."""


def _counter_use(data: Mapping[str, Any], key: str) -> CounterUse:
    counters = data.get("counters") or {}
    return CounterUse(str(data[key]), {str(name): str((value or {}).get("value", "0"))
                                       for name, value in counters.items()})


def _device(data: Mapping[str, Any], gpu: InventoryDevice, *, parent: str) -> InventoryDevice:
    """An API device dict from :mod:`kdra.agent.core.gpu_partitions` as an inventory device
    of ``gpu``'s driver and health."""
    capacity = {str(k): str((v or {}).get("value")) for k, v in
                (data.get("capacity") or {}).items()}
    return InventoryDevice(
        driver=gpu.driver, name=str(data["name"]),
        attributes={str(k): dict(v) for k, v in (data.get("attributes") or {}).items()},
        capacity=capacity, healthy=gpu.healthy, health_reason=gpu.health_reason,
        device_nodes=gpu.device_nodes,
        consumes_counters=tuple(_counter_use(use, "counterSet")
                                for use in data.get("consumesCounters") or ()),
        parent=parent)


def partitioned(gpu: InventoryDevice, *, placements: Iterable[tuple[str, int]] | None = None,
                include_whole: bool = True) -> list[InventoryDevice]:
    """``gpu`` as its partitions (and, unless ``include_whole`` is false, itself consuming
    every counter). ``placements`` (``(profile, first memory slice)`` pairs) limits the
    partitions to those that exist. Raises ValueError for a model without a layout."""
    counter_set, devices = partition_devices(gpu.to_api(), placements=placements,
                                             include_whole=include_whole)
    result = [dataclasses.replace(gpu, consumes_counters=_device(data, gpu, parent="")
                                  .consumes_counters)
              if data["name"] == gpu.name else _device(data, gpu, parent=gpu.name)
              for data in devices]
    if result:
        result[0] = dataclasses.replace(result[0],
                                        counter_sets=(_counter_use(counter_set, "name"),))
    return result


def shared(gpu: InventoryDevice) -> InventoryDevice:
    """``gpu`` as one device that several claims share by ``memory``
    (:data:`SHARE_POLICY`, at most the GPU's memory)."""
    policy = {"default": SHARE_POLICY["default"],
              "validRange": {**SHARE_POLICY["validRange"], "max": gpu.capacity["memory"]}}
    return dataclasses.replace(gpu, allow_multiple_allocations=True,
                               capacity_policies={"memory": policy})


Expand = Callable[[InventoryDevice], list[InventoryDevice]]
"""What a mode makes of one GPU: the devices to publish for it."""


def gpu_mode(partitions: Any, sharing: Any, profile: str) -> Expand | tuple[str, str]:
    """The mode an inventory GPU entry asks for (``partitions``, ``sharing``: the entry's
    values, None when absent) for GPUs of ``profile`` — or ``(field, message)`` saying
    what is wrong with the entry."""
    if partitions is not None and partitions not in PARTITION_MODES:
        return "partitions", (f"{partitions!r} is not a partition mode; known: "
                              + ", ".join(PARTITION_MODES))
    if sharing is not None and sharing not in SHARING_MODES:
        return "sharing", (f"{sharing!r} is not a sharing mode; known: "
                           + ", ".join(SHARING_MODES))
    if partitions is not None and sharing is not None:
        return "sharing", ("a GPU is either partitioned or shared: remove 'partitions' or "
                           "'sharing'")
    if partitions is not None:
        if profile not in PARTITION_LAYOUTS:
            return "partitions", (f"{profile} has no partition layout; partitionable: "
                                  + ", ".join(sorted(PARTITION_LAYOUTS)))
        return partitioned
    if sharing is not None:
        return lambda gpu: [shared(gpu)]
    return lambda gpu: [gpu]


__all__ = ["PARTITION_MODES", "SHARE_POLICY", "SHARING_MODES", "Expand", "gpu_mode",
           "partitioned", "shared"]

"""The ResourceSlices of a node whose GPUs are all partitionable, built from the fake
inventory's shorthand: for tests and benchmarks (the agent publishes the same devices and
counter sets; see :func:`node_slices`). Apart from :mod:`kdra.agent.core.gpu_partitions` because
it needs the inventory parser, which imports that module."""

from __future__ import annotations

from typing import Any

from kdra.agent.core.gpu_partitions import partition_devices
from kdra.agent.core.inventory import parse_inventory


def node_slices(node: str, gpus: str, *, driver: str = "gpu.kdra.dev",
                generation: int = 0) -> list[dict[str, Any]]:
    """Every ResourceSlice (v1 API dicts) of a node whose GPUs (``"8 x H100-80GB"``, the fake
    inventory's shorthand) are all partitionable: device slices of at most 4 GPUs (60
    devices ≤ 64) and counter slices of at most 8 sets, one pool named after the node. For
    tests and benchmarks: the same devices and counter sets the agent publishes for
    ``partitions: mig``, grouped into slices by whole GPUs (the agent's
    :mod:`kdra.agent.core.pool_layout` fills slices up to 64 devices, so its slice names and
    grouping differ)."""
    inventory = parse_inventory(f"gpus: ['{gpus}']", node)
    sets: list[dict[str, Any]] = []
    groups: list[list[dict[str, Any]]] = []
    for index, gpu in enumerate(inventory.devices):
        counters, devices = partition_devices(gpu.to_api())
        sets.append(counters)
        if index % 4 == 0:
            groups.append([])
        groups[-1].extend(devices)
    specs = [{"devices": group} for group in groups]
    specs += [{"sharedCounters": sets[i:i + 8]} for i in range(0, len(sets), 8)]
    dashed = driver.replace(".", "-")
    return [{
        "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{dashed}-{i}"},
        "spec": {"driver": driver, "nodeName": node, **spec,
                 "pool": {"name": node, "generation": generation,
                          "resourceSliceCount": len(specs)}},
    } for i, spec in enumerate(specs)]


__all__ = ["node_slices"]

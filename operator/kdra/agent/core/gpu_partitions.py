"""MIG-like GPU partitions as upstream partitionable devices (KEP-4815): one counter set per
physical GPU, and one device per (partition profile, placement) plus the whole GPU, each
consuming the counters it occupies.

The layout mirrors NVIDIA's MIG geometry. An H100-80GB has 8 memory slices and 7 compute
slices; a partition profile takes a fixed number of each and may start only at given memory
slices (its *placements*)::

    profile   memory  compute  placements (first memory slice)
    1g.10gb   1       1        0 1 2 3 4 5 6
    2g.20gb   2       2        0 2 4
    3g.40gb   4       3        0 4
    4g.40gb   4       4        0
    7g.80gb   8       7        0
    whole GPU 8       7        (not partitioned)

Counters of the set named after the GPU (``gpu-3``):

- ``memory-slice-0`` … ``memory-slice-7`` (1 each): which memory slices a partition occupies.
  These make placement real: after ``1g.10gb`` at 0 and at 4, no ``3g.40gb`` fits although 6
  memory slices are free — exactly the fragmentation MIG has;
- ``memory-slices`` (8) and ``compute-slices`` (7): the totals, so an explanation can say
  "gpu-3: memory-slices 7/8 used" and a scorer can see how full a GPU is without knowing
  MIG (with the placements above they never run out before a memory slice does).

Devices (v1 API dicts, ready for ``ResourceSlice.spec.devices``):

- the whole GPU keeps its name (``gpu-3``), attributes and capacity, and consumes every
  counter — so it and any partition exclude each other, as MIG mode does;
- a partition is named ``<gpu>-mig-<profile with dashes>-<placement>``
  (``gpu-3-mig-3g-40gb-4``), has ``type: mig``, ``profile``, ``placement``,
  ``parentUUID``, ``memorySlices``, ``computeSlices``, the parent's model and topology
  attributes (``productName``, ``architecture``, ``pcieRoot``, ``numaNode``…; not ``uuid``,
  which a MIG device only gets once created) and capacity ``memory``. A class selecting
  ``device.attributes["gpu.kdra.dev"].type == "gpu"`` therefore sees whole GPUs only, and one
  selecting ``type == "mig"`` partitions only.

Invariants:
- Pure data and functions: the same GPU dict and layout always give the same counter set and
  devices, in the same order (whole GPU first, then profiles small to large, placements
  ascending).
- Within upstream's limits: one counter set per GPU with 10 counters (≤ 32), each device
  consumes from one set (≤ 2) with ≤ 10 counters (≤ 32), names are DNS labels (≤ 63
  characters for GPU names up to 44 characters — longer names raise ValueError). 15 devices
  per GPU: a slice with counters holds ≤ 64 devices, so the publisher puts ≤ 4 GPUs' devices
  in one slice and ≤ 8 counter sets in one ``sharedCounters`` slice.
- Every combination of devices that keeps all counters within their totals is a valid MIG
  configuration of the layout (and the converse), checked by the unit tests.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kdra.dra.models.base import DNS_LABEL

PARTITION_DEVICE_TYPE = "mig"
"""Value of the ``type`` attribute of a partition (a whole GPU has ``gpu``)."""

MEMORY_SLICES = "memory-slices"
COMPUTE_SLICES = "compute-slices"
MEMORY_SLICE_PREFIX = "memory-slice-"

_NOT_COPIED = frozenset({"uuid", "type", "index", "minor"})
"""Parent attributes a partition does not inherit (it gets ``parentUUID``/``parentIndex``)."""


@dataclass(frozen=True)
class PartitionProfile:
    """One MIG profile: how many memory and compute slices it takes, where it may start."""

    name: str
    """NVIDIA's spelling: ``3g.40gb``."""

    memory_slices: int
    compute_slices: int
    memory: str
    """Its memory as a quantity (``40Gi``): the device's ``memory`` capacity."""

    placements: tuple[int, ...]
    """First memory slice of each possible instance."""

    @property
    def dashed(self) -> str:
        """``3g.40gb`` → ``3g-40gb`` (for device names)."""
        return self.name.replace(".", "-")


@dataclass(frozen=True)
class PartitionLayout:
    """The partition geometry of one GPU model."""

    gpu_profile: str
    """The :data:`kdra.agent.core.gpu_profiles.GPU_PROFILES` key: ``H100-80GB``."""

    memory_slices: int
    compute_slices: int
    profiles: tuple[PartitionProfile, ...]

    def profile(self, name: str) -> PartitionProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


def _layout(gpu_profile: str, slice_gb: int) -> PartitionLayout:
    """The A100/H100 geometry (8 memory, 7 compute slices) with ``slice_gb`` GB per memory
    slice."""

    def gb(n: int) -> int:
        return n * slice_gb

    shapes = ((1, 1, tuple(range(7))), (2, 2, (0, 2, 4)), (4, 3, (0, 4)), (4, 4, (0,)),
              (8, 7, (0,)))
    profiles = tuple(
        PartitionProfile(name=f"{compute}g.{gb(memory)}gb", memory_slices=memory,
                         compute_slices=compute, memory=f"{gb(memory)}Gi", placements=starts)
        for memory, compute, starts in shapes)
    return PartitionLayout(gpu_profile=gpu_profile, memory_slices=8, compute_slices=7,
                           profiles=profiles)


PARTITION_LAYOUTS: Mapping[str, PartitionLayout] = MappingProxyType({
    "H100-80GB": _layout("H100-80GB", 10),
    "A100-40GB": _layout("A100-40GB", 5),
    "A100-80GB": _layout("A100-80GB", 10),
})
"""Partition layouts by GPU profile name. Models not listed here are not partitionable."""

_BY_PRODUCT: Mapping[str, str] = MappingProxyType({
    "NVIDIA H100 80GB HBM3": "H100-80GB",
    "NVIDIA A100-SXM4-40GB": "A100-40GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB",
})


def layout_for(gpu_profile_or_product: str) -> PartitionLayout | None:
    """The layout of a GPU profile (``H100-80GB``) or NVML product name
    (``NVIDIA H100 80GB HBM3``); None when the model is not partitionable."""
    key = _BY_PRODUCT.get(gpu_profile_or_product, gpu_profile_or_product)
    return PARTITION_LAYOUTS.get(key)


def partition_name(gpu_name: str, profile: PartitionProfile, placement: int) -> str:
    """``gpu-3``, 3g.40gb, 4 → ``gpu-3-mig-3g-40gb-4``."""
    return f"{gpu_name}-mig-{profile.dashed}-{placement}"


def counter_set(gpu_name: str, layout: PartitionLayout) -> dict[str, Any]:
    """The GPU's counter set in the API's form (``sharedCounters[]`` item)."""
    counters = {f"{MEMORY_SLICE_PREFIX}{i}": {"value": "1"}
                for i in range(layout.memory_slices)}
    counters[MEMORY_SLICES] = {"value": str(layout.memory_slices)}
    counters[COMPUTE_SLICES] = {"value": str(layout.compute_slices)}
    return {"name": gpu_name, "counters": counters}


def consumption(gpu_name: str, memory_slices: Iterable[int],
                compute_slices: int) -> list[dict[str, Any]]:
    """``consumesCounters`` of a device occupying ``memory_slices`` and ``compute_slices``
    (the totals first, so explanations lead with them)."""
    slices = sorted(set(memory_slices))
    counters = {MEMORY_SLICES: {"value": str(len(slices))},
                COMPUTE_SLICES: {"value": str(compute_slices)}}
    counters.update({f"{MEMORY_SLICE_PREFIX}{i}": {"value": "1"} for i in slices})
    return [{"counterSet": gpu_name, "counters": counters}]


def _string(value: str) -> dict[str, Any]:
    return {"string": value}


def _int(value: int) -> dict[str, Any]:
    return {"int": value}


def partition_device(gpu: Mapping[str, Any], profile: PartitionProfile,
                     placement: int) -> dict[str, Any]:
    """One partition of ``gpu`` (a v1 device dict) at ``placement``, as a v1 device dict."""
    gpu_name = str(gpu["name"])
    parent: Mapping[str, Any] = gpu.get("attributes") or {}
    attributes: dict[str, Any] = {k: copy.deepcopy(v) for k, v in parent.items()
                                  if k.split("/")[-1] not in _NOT_COPIED}
    attributes["type"] = _string(PARTITION_DEVICE_TYPE)
    attributes["profile"] = _string(profile.name)
    attributes["placement"] = _int(placement)
    attributes["memorySlices"] = _int(profile.memory_slices)
    attributes["computeSlices"] = _int(profile.compute_slices)
    if "uuid" in parent:
        attributes["parentUUID"] = copy.deepcopy(parent["uuid"])
    if "index" in parent:
        attributes["parentIndex"] = copy.deepcopy(parent["index"])
    device: dict[str, Any] = {
        "name": partition_name(gpu_name, profile, placement),
        "attributes": dict(sorted(attributes.items())),
        "capacity": {"memory": {"value": profile.memory}},
        "consumesCounters": consumption(
            gpu_name, range(placement, placement + profile.memory_slices),
            profile.compute_slices),
    }
    if gpu.get("taints"):
        device["taints"] = copy.deepcopy(list(gpu["taints"]))
    return device


def partition_devices(
    gpu: Mapping[str, Any],
    layout: PartitionLayout | None = None,
    *,
    placements: Iterable[tuple[str, int]] | None = None,
    include_whole: bool = True,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(counter_set, devices)`` for one physical GPU given as a v1 device dict
    (``InventoryDevice.to_api()``): the whole GPU consuming every counter, then every
    partition of ``layout`` (default: the layout of the GPU's ``productName``).

    ``placements`` limits the partitions to these ``(profile, placement)`` pairs — what NVML
    reports as existing when MIG mode is on; ``include_whole=False`` leaves the whole GPU out
    (a GPU in MIG mode cannot be handed out whole). Raises ValueError for a GPU with no
    layout, a name too long for its partitions' names, or an unknown placement.
    """
    gpu_name = str(gpu.get("name", ""))
    if layout is None:
        attributes: Mapping[str, Any] = gpu.get("attributes") or {}
        product = (attributes.get("productName") or {}).get("string", "")
        layout = layout_for(str(product))
        if layout is None:
            raise ValueError(f"GPU {gpu_name!r} ({product or 'no productName'}) has no "
                             "partition layout; partitionable models: "
                             + ", ".join(sorted(PARTITION_LAYOUTS)))
    longest = max(len(partition_name(gpu_name, p, 9)) for p in layout.profiles)
    if not DNS_LABEL.match(gpu_name) or longest > 63:
        raise ValueError(f"GPU name {gpu_name!r} must be a DNS label short enough for its "
                         f"partition names (≤ 63 characters; the longest would be {longest})")
    wanted = _wanted(layout, placements)
    devices: list[dict[str, Any]] = []
    if include_whole:
        whole = copy.deepcopy(dict(gpu))
        whole["consumesCounters"] = consumption(gpu_name, range(layout.memory_slices),
                                                layout.compute_slices)
        devices.append(whole)
    for profile in layout.profiles:
        for placement in profile.placements:
            if wanted is None or (profile.name, placement) in wanted:
                devices.append(partition_device(gpu, profile, placement))
    return counter_set(gpu_name, layout), devices


def _wanted(layout: PartitionLayout,
            placements: Iterable[tuple[str, int]] | None) -> set[tuple[str, int]] | None:
    if placements is None:
        return None
    wanted = set(placements)
    for name, placement in sorted(wanted):
        profile = layout.profile(name)
        if profile is None or placement not in profile.placements:
            raise ValueError(f"{name} at memory slice {placement} is not a placement of "
                             f"{layout.gpu_profile}")
    return wanted


__all__ = [
    "COMPUTE_SLICES",
    "MEMORY_SLICES",
    "MEMORY_SLICE_PREFIX",
    "PARTITION_DEVICE_TYPE",
    "PARTITION_LAYOUTS",
    "PartitionLayout",
    "PartitionProfile",
    "consumption",
    "counter_set",
    "layout_for",
    "partition_device",
    "partition_devices",
    "partition_name",
]

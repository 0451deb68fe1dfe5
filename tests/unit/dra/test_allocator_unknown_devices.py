"""A device of a type kdra does not understand is never selected, and one with data CEL
cannot represent fails its selectors instead of matching them.

In v1 (flat devices, no ``basic`` any more) "a type kdra does not understand" is a device that
uses a feature kdra does not implement yet — here one with node-allocatable resource mappings
(counters and multiple allocations are implemented since issue 26, per-device node selection
and binding conditions since issue 39): upstream's allocator skips such a device while its
feature is off, and kdra never offers it (``DeviceEntry.unsupported``); an ``All`` request
that would need it fails, with the reason."""

from __future__ import annotations

import pytest

from kdra.dra.allocator import Snapshot, allocate
from kdra.dra.allocator.pools import DeviceEntry, Selector
from kdra.dra.allocator.stats import Stats
from kdra.dra.cel import compile_selector
from kdra.dra.errors import AllocationError
from tests.unit.builders import (
    CLASS,
    DRIVER_SELECTOR,
    claim_with,
    class_with,
    device,
    gpu_class,
    node,
    request,
    slice_with,
)

UNKNOWN = {"name": "gpu-0",  # kdra does not do these yet
           "nodeAllocatableResourceMappings": {"cpu": {"capacityKey": "cores"}}}


def picked(claim_request: dict[str, object], *classes: object) -> list[str] | None:
    snapshot = Snapshot.build(
        [slice_with(UNKNOWN, device("gpu-1", index=1))], list(classes) or [gpu_class()], []
    )
    results = allocate([claim_with(claim_request)], snapshot, node())
    if results is None:
        return None
    return [r.device for r in results[0].devices.results]


@pytest.mark.parametrize(
    ("claim_request", "expected"),
    [
        (request("gpu"), ["gpu-1"]),
        (request("gpu", "true"), ["gpu-1"]),
        (request("gpu", count=2), None),  # only one device it can use
    ],
)
def test_unknown_device_type_is_skipped(
    claim_request: dict[str, object], expected: list[str] | None
) -> None:
    assert picked(claim_request) == expected


def test_unknown_device_type_is_skipped_without_any_selector() -> None:
    assert picked(request("gpu"), class_with(CLASS)) == ["gpu-1"]


def test_all_devices_cannot_skip_a_matching_device_it_cannot_allocate() -> None:
    with pytest.raises(AllocationError, match="uses nodeAllocatableResourceMappings, which "
                                              "kdra does not support yet"):
        picked(request("gpu", all=True))


def test_unknown_device_type_is_never_offered() -> None:
    entry = DeviceEntry(slice_with(UNKNOWN), 0)
    assert entry.unsupported == ("nodeAllocatableResourceMappings",)
    selector = Selector(DRIVER_SELECTOR, compile_selector(DRIVER_SELECTOR), "test")
    pools = Snapshot.build([slice_with(UNKNOWN)], [gpu_class()], []).node_pools(node())
    assert pools.matching((selector,), (DRIVER_SELECTOR,), Stats()) == ()
    assert entry.evaluate(selector, Stats()) is True  # its data is fine; it is not offered


def test_device_with_data_cel_cannot_represent_fails_instead_of_matching() -> None:
    bad = {"name": "gpu-0", "capacity": {"memory": {"value": "80GB"}}}  # not a quantity
    snapshot = Snapshot.build([slice_with(bad)], [gpu_class()], [])
    with pytest.raises(AllocationError, match="cannot be evaluated"):
        allocate([claim_with(request("gpu"))], snapshot, node())

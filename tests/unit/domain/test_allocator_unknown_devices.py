"""A device of a type kdra does not understand is never selected (upstream's allocator skips
a device without ``basic``: "some future, unknown device type. We cannot select it."), and
one with data CEL cannot represent fails its selectors instead of matching them."""

from __future__ import annotations

import pytest

from kdra.domain.allocator import Snapshot, allocate
from kdra.domain.allocator.pools import DeviceEntry, Selector
from kdra.domain.allocator.stats import Stats
from kdra.domain.cel import compile_selector
from kdra.domain.errors import AllocationError
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

UNKNOWN = {"name": "gpu-0"}  # no "basic": a device type from the future


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
        (request("gpu", all=True), ["gpu-1"]),
    ],
)
def test_unknown_device_type_is_skipped(
    claim_request: dict[str, object], expected: list[str] | None
) -> None:
    assert picked(claim_request) == expected


def test_unknown_device_type_is_skipped_without_any_selector() -> None:
    assert picked(request("gpu"), class_with(CLASS)) == ["gpu-1"]


def test_unknown_device_type_matches_no_selector() -> None:
    entry = DeviceEntry(slice_with(UNKNOWN), 0)
    selector = Selector(DRIVER_SELECTOR, compile_selector(DRIVER_SELECTOR), "test")
    assert entry.evaluate(selector, Stats()) is False


def test_device_with_data_cel_cannot_represent_fails_instead_of_matching() -> None:
    bad = {"name": "gpu-0", "basic": {"capacity": {"memory": "80GB"}}}  # not a quantity
    snapshot = Snapshot.build([slice_with(bad)], [gpu_class()], [])
    with pytest.raises(AllocationError, match="cannot be evaluated"):
        allocate([claim_with(request("gpu"))], snapshot, node())

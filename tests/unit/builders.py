"""Builders for allocator tests: short calls that produce parsed, validated API models.

Defaults describe one GPU node: driver ``gpu.kdra.dev``, node ``worker-1``, pool named after
the node, class ``gpu.kdra.dev`` selecting the driver's devices.

    slice_with(device("gpu-0", index=0), device("gpu-1", index=1))
    claim_with(request("gpu", count=2), constraints=[match("gpu.kdra.dev/pcieRoot")])
    claim_with(first_available("gpu", sub("big", 'device.attributes["gpu.kdra.dev"].big'),
                               sub("small", count=2)))
    class_with("gpu.kdra.dev", 'device.attributes["gpu.kdra.dev"].productName == "H100"')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kdra.dra.allocator import NodeInfo
from kdra.dra.models import (
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    parse_claim,
    parse_class,
    parse_slice,
)

DRIVER = "gpu.kdra.dev"
CLASS = "gpu.kdra.dev"
NODE = "worker-1"
DRIVER_SELECTOR = f'device.driver == "{DRIVER}"'


class version(str):
    """Marks an attribute value as a semantic version: ``device("d", v=version("1.2.3"))``."""


AttrValue = str | int | bool | version


def attribute(value: AttrValue) -> dict[str, Any]:
    if isinstance(value, version):
        return {"version": str(value)}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def device(
    name: str,
    attrs: Mapping[str, AttrValue] | None = None,
    *,
    capacity: Mapping[str, str] | None = None,
    **attributes: AttrValue,
) -> dict[str, Any]:
    """A device; ``attrs`` for qualified names (``{"other.dev/x": 1}``), kwargs for bare ones."""
    merged = {**(attrs or {}), **attributes}
    out: dict[str, Any] = {"name": name,
                           "attributes": {k: attribute(v) for k, v in merged.items()}}
    if capacity:
        out["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    return out


def devices(count: int, prefix: str = "gpu", **attributes: AttrValue) -> list[dict[str, Any]]:
    """``count`` devices ``gpu-0``... with ``index`` set and the given attributes."""
    return [device(f"{prefix}-{i}", index=i, **attributes) for i in range(count)]


def slice_with(
    *devices_: dict[str, Any],
    name: str | None = None,
    driver: str = DRIVER,
    pool: str | None = None,
    node: str | None = NODE,
    all_nodes: bool = False,
    node_selector: Mapping[str, Any] | None = None,
    generation: int = 0,
    count: int = 1,
) -> ResourceSlice:
    """A slice. Scope: ``node`` (default), or ``all_nodes=True``, or a ``node_selector`` term
    (``{"matchExpressions": [...]}``) — the latter two clear ``node``."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {
            "name": pool or node or "shared",
            "generation": generation,
            "resourceSliceCount": count,
        },
        "devices": list(devices_),
    }
    if all_nodes:
        spec["allNodes"] = True
    elif node_selector is not None:
        spec["nodeSelector"] = {"nodeSelectorTerms": [dict(node_selector)]}
    else:
        spec["nodeName"] = node
    slice_name = name or f"{spec['pool']['name']}-{driver}-g{generation}"
    return parse_slice({"metadata": {"name": slice_name}, "spec": spec})


def opaque(driver: str = DRIVER, **parameters: Any) -> dict[str, Any]:
    return {"opaque": {"driver": driver, "parameters": parameters}}


def class_with(
    name: str = CLASS, *selectors: str, config: Sequence[dict[str, Any]] = ()
) -> DeviceClass:
    return parse_class(
        {
            "metadata": {"name": name},
            "spec": {
                "selectors": [{"cel": {"expression": s}} for s in selectors],
                "config": list(config),
            },
        }
    )


def gpu_class(*extra: str, config: Sequence[dict[str, Any]] = ()) -> DeviceClass:
    """The default class: the driver's devices (plus ``extra`` selectors)."""
    return class_with(CLASS, DRIVER_SELECTOR, *extra, config=config)


def _asked(selectors: Sequence[str], cls: str, count: int | None,
           all: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "deviceClassName": cls,
        "selectors": [{"cel": {"expression": s}} for s in selectors],
    }
    if all:
        out["allocationMode"] = "All"
    if count is not None:
        out["count"] = count
    return out


def request(
    name: str = "gpu",
    *selectors: str,
    cls: str = CLASS,
    count: int | None = None,
    all: bool = False,
    admin: bool = False,
) -> dict[str, Any]:
    """A request for ``exactly`` one kind of device."""
    exactly = _asked(selectors, cls, count, all)
    if admin:
        exactly["adminAccess"] = True
    return {"name": name, "exactly": exactly}


def sub(name: str, *selectors: str, cls: str = CLASS, count: int | None = None,
        all: bool = False) -> dict[str, Any]:
    """One alternative of a ``first_available`` request."""
    return {"name": name, **_asked(selectors, cls, count, all)}


def first_available(name: str, *alternatives: dict[str, Any]) -> dict[str, Any]:
    """A prioritized-list request: ``first_available("gpu", sub("big", ...), sub(...))``."""
    return {"name": name, "firstAvailable": list(alternatives)}


def match(attribute_name: str, *requests: str) -> dict[str, Any]:
    """A matchAttribute constraint (for ``requests``, default all)."""
    return {"matchAttribute": attribute_name, "requests": list(requests)}


def distinct(attribute_name: str, *requests: str) -> dict[str, Any]:
    """A distinctAttribute constraint (for ``requests``, default all)."""
    return {"distinctAttribute": attribute_name, "requests": list(requests)}


def claim_with(
    *requests: dict[str, Any],
    name: str = "claim",
    namespace: str = "default",
    constraints: Iterable[dict[str, Any]] = (),
    config: Iterable[dict[str, Any]] = (),
) -> ResourceClaim:
    devices_spec: dict[str, Any] = {
        "requests": list(requests) or [request()],
        "constraints": list(constraints),
        "config": [dict(c) for c in config],
    }
    return parse_claim(
        {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
         "spec": {"devices": devices_spec}}
    )


def claim_config(*requests: str, driver: str = DRIVER, **parameters: Any) -> dict[str, Any]:
    return {"requests": list(requests), **opaque(driver, **parameters)}


def allocated(
    claim: ResourceClaim, *picks: tuple[str, str], driver: str = DRIVER, pool: str = NODE
) -> ResourceClaim:
    """``claim`` with an allocation of ``(request, device)`` picks from one pool."""
    results = [
        {"request": req, "driver": driver, "pool": pool, "device": dev} for req, dev in picks
    ]
    return claim.model_copy(
        update={
            "status": claim.status.model_copy(
                update={"allocation": parse_claim(
                    {"metadata": {"name": "x"},
                     "status": {"allocation": {"devices": {"results": results}}}}
                ).status.allocation}
            )
        }
    )


def node(name: str = NODE, **labels: str) -> NodeInfo:
    return NodeInfo(name, dict(labels))


def nodes(count: int, prefix: str = "worker") -> list[NodeInfo]:
    return [NodeInfo(f"{prefix}-{i}", {}) for i in range(1, count + 1)]

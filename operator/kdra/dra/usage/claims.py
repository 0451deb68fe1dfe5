"""Who holds which device: one row per ResourceClaim — its state, node, devices and pods —
built from the claims' JSON (pure, no I/O).

The view ``kdra describe`` and ``kubectl kdra`` show (:mod:`kdra.cli.core.describe`) and the
operator's utilisation gauges count (:mod:`kdra.dra.usage.utilisation`) start from these rows.

Invariants:
- Malformed or partial objects never make a row fail: a missing field reads as empty.
- A device is ``ready`` as the node agent reported it in ``status.devices[]`` (None: not yet),
  ``unhealthy`` when it reported ``Ready=False`` with reason ``DeviceUnhealthy`` or
  ``Healthy=False``.
- ``published`` is False here: only a view that reads the slices knows (``describe``).
- A result of an admin-access request (``adminAccess: true`` in the result, or a request
  with ``exactly.adminAccess: true``) is marked ``admin_access``: it holds no device — the
  device stays free for others, as upstream's allocator counts it — and every view built on
  these rows (utilisation, ``top``, ``describe``, the invariants) leaves it out of what is
  allocated.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["UNHEALTHY_REASON", "ClaimDevice", "ClaimRow", "admin_requests", "claims_of",
           "natural"]

JSON = Mapping[str, Any]


@dataclass(frozen=True)
class ClaimDevice:
    request: str
    driver: str
    pool: str
    device: str
    ready: bool | None
    published: bool
    """Whether a current slice publishes the device."""
    device_class: str = ""
    """The DeviceClass its request asks for (empty when the claim's spec does not say)."""
    unhealthy: bool = False
    """The node agent reported it unhealthy (``Ready=False``, reason ``DeviceUnhealthy``)."""
    admin_access: bool = False
    """Allocated for an admin-access request: the claim sees the device, it does not hold it
    (upstream: such results never make a device busy)."""
    share_id: str = ""
    """The result's ``shareID``: a share of a device that allows multiple allocations
    (empty: the claim holds the device alone)."""
    consumed: tuple[tuple[str, str], ...] = ()
    """A share's ``consumedCapacity``: (capacity, quantity as written), unparsed."""

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class ClaimRow:
    namespace: str
    name: str
    state: str
    """``pending`` (not allocated), ``allocated`` (no consumer), ``reserved`` (in use by pods),
    or ``deleting``."""
    node: str
    devices: tuple[ClaimDevice, ...]
    pods: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ready(self) -> int:
        return sum(1 for device in self.devices if device.ready)

    @property
    def held(self) -> tuple[ClaimDevice, ...]:
        """The devices the claim holds: its results but those of admin-access requests."""
        return tuple(device for device in self.devices if not device.admin_access)


def claims_of(claims: Iterable[JSON]) -> list[ClaimRow]:
    """Each claim's row: state, node, devices (``published`` unknown: False) and pods —
    what :func:`describe` and the usage views (:mod:`kdra.dra.usage.utilisation`) build on."""
    return [_claim_row(claim) for claim in claims]


UNHEALTHY_REASON = "DeviceUnhealthy"
"""The reason of the Ready=False condition the node agent writes for an unhealthy device."""


def _claim_row(claim: JSON) -> ClaimRow:
    meta = _map(claim.get("metadata"))
    status = _map(claim.get("status"))
    allocation = status.get("allocation")
    namespace = str(meta.get("namespace") or "")
    pods = tuple(f"{namespace}/{ref.get('name')}" for ref in map(_map, _list(
        status.get("reservedFor"))) if ref.get("resource", "pods") == "pods" and ref.get("name"))
    ready: dict[tuple[str, str, str], bool] = {}
    unhealthy: set[tuple[str, str, str]] = set()
    for entry in map(_map, _list(status.get("devices"))):
        key = (str(entry.get("driver")), str(entry.get("pool")), str(entry.get("device")))
        condition = next((c for c in map(_map, _list(entry.get("conditions")))
                          if c.get("type") == "Ready"), None)
        if condition is not None:
            ready[key] = condition.get("status") == "True"
            if condition.get("status") == "False" and condition.get("reason") == \
                    UNHEALTHY_REASON:
                unhealthy.add(key)
        health = next((c for c in map(_map, _list(entry.get("conditions")))
                       if c.get("type") == "Healthy"), None)
        if health is not None and health.get("status") == "False":
            unhealthy.add(key)  # the agent's applied health (issue 25)
    spec_devices = _map(_map(claim.get("spec")).get("devices"))
    classes = _request_classes(spec_devices)
    admin = admin_requests(spec_devices)
    devices = []
    for result in map(_map, _list(_map(_map(allocation).get("devices")).get("results"))):
        key = (str(result.get("driver") or ""), str(result.get("pool") or ""),
               str(result.get("device") or ""))
        request = str(result.get("request") or "")
        devices.append(ClaimDevice(request=request, driver=key[0],
                                   pool=key[1], device=key[2], ready=ready.get(key),
                                   published=False,
                                   device_class=classes.get(request, ""),
                                   unhealthy=key in unhealthy,
                                   admin_access=result.get("adminAccess") is True
                                   or request.split("/", 1)[0] in admin,
                                   share_id=str(result.get("shareID") or ""),
                                   consumed=tuple((str(k), str(v)) for k, v in _map(
                                       result.get("consumedCapacity")).items())))
    if meta.get("deletionTimestamp"):
        state = "deleting"
    elif not allocation:
        state = "pending"
    elif pods:
        state = "reserved"
    else:
        state = "allocated"
    return ClaimRow(namespace=namespace, name=str(meta.get("name") or ""), state=state,
                    node=_allocated_node(_map(allocation)), devices=tuple(devices), pods=pods)


def _request_classes(devices: JSON) -> dict[str, str]:
    """Result name → DeviceClass of a v1 claim's requests: ``<request>`` for ``exactly``,
    ``<request>/<subrequest>`` for each ``firstAvailable`` alternative."""
    classes: dict[str, str] = {}
    for request in map(_map, _list(devices.get("requests"))):
        name = str(request.get("name"))
        exactly = _map(request.get("exactly"))
        if exactly:
            classes[name] = str(exactly.get("deviceClassName") or "")
        for sub in map(_map, _list(request.get("firstAvailable"))):
            classes[f"{name}/{sub.get('name')}"] = str(sub.get("deviceClassName") or "")
    return classes


def admin_requests(devices: JSON) -> set[str]:
    """The names of a claim's admin-access requests, from its ``spec.devices`` (v1:
    ``exactly.adminAccess``; v1alpha3: ``adminAccess`` on the request)."""
    names = set()
    for request in map(_map, _list(devices.get("requests"))):
        if _map(request.get("exactly")).get("adminAccess") is True \
                or request.get("adminAccess") is True:
            names.add(str(request.get("name")))
    return names


def _allocated_node(allocation: JSON) -> str:
    for term in map(_map, _list(_map(allocation.get("nodeSelector")).get("nodeSelectorTerms"))):
        for field in map(_map, _list(term.get("matchFields"))):
            values = _list(field.get("values"))
            if (field.get("key") == "metadata.name" and field.get("operator") == "In"
                    and len(values) == 1):
                return str(values[0])
    return ""


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts gpu-2 before gpu-10."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"(\d+)", text) if part)

"""The ``v1alpha3`` schema of a kind, derived from its ``v1`` schema by the rules the
conversion uses (:mod:`kdra.dra.models.v1alpha3`: what each part of a v1 object looks like
in the seed's Kubernetes 1.31 shape), then :data:`LEGACY`: what the 1.31 shape says
otherwise (its own limits, rules and words, kept as they were served).

The rules, part by part (as ``*_down`` renders an object):

- a request's ``exactly`` fields sit on the request, without ``REQUEST_V1_ONLY``;
  ``firstAvailable`` is gone (and the rules about either);
- constraints, allocation results, the allocation, device statuses, a class's spec and a
  slice's spec lose their ``*_V1_ONLY`` fields;
- a slice's device is ``{name, basic: {attributes, capacity}}``: attribute values without the
  list kinds, capacities as bare quantities (v1's ``value``), the device's rules about its
  attributes and capacities on ``basic``.

A CEL rule that mentions a field the derivation removed is removed with it (it could not be
evaluated, or would say nothing); the 1.31 shape's own rule for the same thing, if it had
one, is in :data:`LEGACY`.

Invariants:
- A field added to a v1 model shows in v1alpha3 unless the conversion drops it: the schema
  accepts what the conversion writes.
- Every :data:`LEGACY` entry names a node that exists and changes it; a stale entry is an
  error, not silently ignored.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

from kdra.dra.models import v1alpha3 as alpha
from kdra.dra.models.crd import DNS_LABEL

Node = dict[str, Any]
RULES = "x-kubernetes-validations"
PREPEND = "+" + RULES
"""A LEGACY key: rules that come before the derived ones."""


class LegacyError(Exception):
    """A LEGACY entry that names no node or changes nothing."""


def derive(kind: str, v1: Node) -> Node:
    """The v1alpha3 ``openAPIV3Schema`` of ``kind`` from its v1 one (which is not changed)."""
    schema = copy.deepcopy(v1)
    api_version = schema["properties"]["apiVersion"]
    api_version["description"] = api_version["description"].replace("/v1`", "/v1alpha3`")
    schema["description"] = schema["description"].replace("resource.k8s.io/v1 ",
                                                          "resource.k8s.io/v1alpha3 ")
    spec = schema["properties"]["spec"]
    if kind == "ResourceClaim":
        _claim_spec(spec)
        _claim_status(schema["properties"]["status"])
    elif kind == "ResourceClaimTemplate":
        _claim_spec(spec["properties"]["spec"])
    elif kind == "DeviceClass":
        _drop(spec, alpha.CLASS_V1_ONLY)
    elif kind == "ResourceSlice":
        _slice_spec(spec)
    else:
        raise ValueError(f"no v1alpha3 shape for {kind}")
    for path, changes in legacy(kind).items():
        _apply(schema, path, changes)
    return schema


# --------------------------------------------------------------------------- the rules


def _props(node: Node, *path: str) -> Node:
    for key in path:
        node = (node["items"] if key == "[]" else node["additionalProperties"] if key == "{}"
                else node["properties"][key])
    return node


def _mentions(rule: Node, names: Iterable[str]) -> bool:
    return any(re.search(rf"\.{re.escape(name)}\b", rule["rule"]) for name in names)


def _drop_rules(node: Node, names: Iterable[str]) -> None:
    names = tuple(names)
    kept = [rule for rule in node.get(RULES, ()) if not _mentions(rule, names)]
    if kept:
        node[RULES] = kept
    else:
        node.pop(RULES, None)


def _drop(node: Node, names: Iterable[str]) -> None:
    """Remove the fields ``names`` from an object node, and the rules about them."""
    names = tuple(names)
    for name in names:
        node["properties"].pop(name, None)
    if "required" in node:
        node["required"] = [name for name in node["required"] if name not in names]
        if not node["required"]:
            del node["required"]
    _drop_rules(node, names)


def _claim_spec(spec: Node) -> None:
    request = _props(spec, "devices", "requests", "[]")
    exactly = request["properties"].pop("exactly")
    request["properties"].pop("firstAvailable")
    _drop_rules(request, ("exactly", "firstAvailable"))
    _drop(exactly, alpha.REQUEST_V1_ONLY)
    request["properties"].update(exactly["properties"])
    request["required"] = [*request.get("required", ()), *exactly.get("required", ())]
    if exactly.get(RULES):
        request[RULES] = [*request.get(RULES, ()), *exactly[RULES]]
    _drop(_props(spec, "devices", "constraints", "[]"), alpha.CONSTRAINT_V1_ONLY)


def _claim_status(status: Node) -> None:
    allocation = _props(status, "allocation")
    _drop(allocation, alpha.ALLOCATION_V1_ONLY)
    _drop(_props(allocation, "devices", "results", "[]"), alpha.RESULT_V1_ONLY)
    _drop(_props(status, "devices", "[]"), alpha.DEVICE_STATUS_V1_ONLY)


def _slice_spec(spec: Node) -> None:
    _drop(spec, alpha.SLICE_V1_ONLY)
    devices = _props(spec, "devices")
    device = devices["items"]
    _drop(device, alpha.DEVICE_V1_ONLY)
    _drop_rules(devices, (*alpha.DEVICE_V1_ONLY, *alpha.ATTRIBUTE_V1_ONLY))
    _drop(device["properties"]["attributes"]["additionalProperties"], alpha.ATTRIBUTE_V1_ONLY)
    capacity = device["properties"]["capacity"]
    capacity["additionalProperties"] = _props(capacity, "{}", "value")
    moved = ("attributes", "capacity")
    basic: Node = {"type": "object", "properties": {
        name: device["properties"].pop(name) for name in moved}}
    rules = device.pop(RULES, [])
    if rules:
        basic[RULES] = [rule for rule in rules if _mentions(rule, moved)]
        if len(basic[RULES]) != len(rules):
            raise ValueError("a device rule about neither attributes nor capacity")
    device["properties"]["basic"] = basic
    device["required"] = [*device.get("required", ()), "basic"]


# --------------------------------------------------------------------------- the 1.31 shape

_REQUEST_NAME = {"maxLength": 63, "pattern": DNS_LABEL,
                 "description": "Name of one request of this claim "
                                "(spec.devices.requests[].name)."}
"""Before sub-requests, a request reference was a request's name."""


def _names_known(kind: str) -> Node:
    return {"rule": f"!has(self.{kind}) || self.{kind}.all(c, !has(c.requests) || "
                    "c.requests.all(n, has(self.requests) && self.requests.exists(r, "
                    "r.name == n)))",
            "message": f"every name in {kind}[].requests must be the name of a request in "
                       "requests[]; fix the typo or add the missing request",
            "fieldPath": f".{kind}"}


CLAIM_SPEC: dict[str, dict[str, Any]] = {
    ".devices": {RULES: [_names_known("constraints"), _names_known("config")]},
    ".devices.requests[]": {
        "description": "One request for devices. Each request is satisfied separately: the "
                       "devices it gets must belong to its device class, pass all of its "
                       "selectors and, when there are constraints, agree with the devices of "
                       "the other requests they name."},
    ".devices.requests[].adminAccess": {
        "description": "Ask for administrative access: the devices are handed out even if "
                       "they are already allocated to other claims, for monitoring or "
                       "maintenance tools. A device allocated this way is not taken away from "
                       "others. Defaults to false."},
    ".devices.constraints": {
        "description": "Conditions that must hold across the devices of several requests (for "
                       "example: all on the same PCIe root, all of the same model). At most "
                       "32."},
    ".devices.constraints[]": {
        "description": "A condition that spans several devices of this claim.",
        "required": ["matchAttribute"]},
    ".devices.constraints[].matchAttribute": {
        "description": "Fully qualified name of a device attribute (`<domain>/<name>`, for "
                       "example `gpu.kdra.dev/productName` or "
                       "`resource-driver.example.com/color`) whose value must be the same on "
                       "every device the constraint covers. Use it to get, say, GPUs of one "
                       "model or devices behind one PCIe root. A device that does not have the "
                       "attribute at all cannot be chosen. The domain is a DNS subdomain of at "
                       "most 63 characters and the name a C identifier of at most 32 "
                       "characters. Required (it is the only kind of constraint today)."},
    ".devices.constraints[].requests": {
        "description": "Names of the requests whose devices this constraint applies to. Leave "
                       "it empty to apply it to all devices of the claim. Every name must be "
                       "the name of a request in `requests`."},
    ".devices.constraints[].requests[]": _REQUEST_NAME,
    ".devices.config[].requests": {
        "description": "Names of the requests in this claim that this configuration applies "
                       "to. Leave it empty to apply it to every request. Every name must be "
                       "the name of a request in `requests`."},
    ".devices.config[].requests[]": _REQUEST_NAME,
}
"""The 1.31 shape of a claim's spec (a template's ``spec.spec`` too), by path from it."""

LEGACY: dict[str, dict[str, dict[str, Any]]] = {
    "ResourceClaim": {
        ".status.allocation.devices.results[].request": {
            **_REQUEST_NAME, "description": "Name of the request in `spec.devices.requests` "
                                            "this device was allocated for."},
        ".status.allocation.devices.config[].requests": {
            "description": "Names of the requests the entry applies to; empty means all "
                           "requests of the claim."},
        ".status.allocation.devices.config[].requests[]": _REQUEST_NAME,
        ".status.reservedFor": {
            "maxItems": 32,
            "description": "The objects (normally pods) currently allowed to use the allocated "
                           "devices. kdra's binder adds a pod just before binding it; the "
                           "claim controller removes pods that have finished or are gone, and "
                           "clears the allocation when the list becomes empty. A claim can "
                           "only be reserved while it is allocated. Keyed by `uid`; at most 32 "
                           "entries."},
    },
    "ResourceSlice": {
        ".spec": {
            "description": "What the driver publishes: which pool the slice belongs to, where "
                           "its devices can be used, and the devices. Exactly one of "
                           "`nodeName`, `nodeSelector` and `allNodes: true` must be set.",
            PREPEND: [{
                "rule": "(has(self.nodeName) ? 1 : 0) + (has(self.nodeSelector) ? 1 : 0) + "
                        "(has(self.allNodes) && self.allNodes ? 1 : 0) == 1",
                "message": "exactly one of spec.nodeName, spec.nodeSelector or spec.allNodes: "
                           "true must be set: nodeName for devices local to one node, "
                           "nodeSelector for devices several nodes can reach, allNodes for "
                           "devices every node can reach"}]},
        ".spec.devices": {
            "description": "The devices in this slice. Names must be unique within the pool. "
                           "At most 128; spread bigger pools over several slices."},
        ".spec.devices[]": {
            "description": "One device: something that can be allocated to a claim as a "
                           "whole."},
        ".spec.devices[].basic": {
            "description": "The device's description for the allocator: attributes and "
                           "capacities that CEL selectors and constraints look at. Required "
                           "(it is the only kind of device description today)."},
        ".spec.devices[].basic.attributes{}": {
            "description": "The value of one attribute. Exactly one of `int`, `bool`, "
                           "`string` and `version` must be set.",
            RULES: [{"rule": "(has(self.int) ? 1 : 0) + (has(self.bool) ? 1 : 0) + "
                             "(has(self.string) ? 1 : 0) + (has(self.version) ? 1 : 0) == 1",
                     "message": "exactly one of int, bool, string or version must be set in "
                                "an attribute value"}]},
        ".spec.devices[].basic.capacity": {
            "description": "Amounts the device has, by name (same naming rules as "
                           "`attributes`), as Kubernetes quantities: `80Gi`, `100`, `500m`. "
                           "CEL: `device.capacity[\"<driver>\"].memory.compareTo("
                           "quantity(\"40Gi\")) >= 0`. Attributes and capacities together: "
                           "at most 32 per device."},
        ".spec.devices[].basic.capacity{}": {
            "description": "A quantity: an integer or a string such as `80Gi`, `1.5`, "
                           "`250m`."},
    },
}
"""Kind → path (``.spec.devices.requests[].name``; ``{}`` a map's values) → keys to set
(``None`` removes; ``+x-kubernetes-validations`` adds rules before the derived ones)."""


def legacy(kind: str) -> dict[str, dict[str, Any]]:
    """The LEGACY entries of ``kind``, the claim spec's placed where the kind has it."""
    entries = dict(LEGACY.get(kind, {}))
    prefix = {"ResourceClaim": ".spec", "ResourceClaimTemplate": ".spec.spec"}.get(kind)
    if prefix is not None:
        entries.update({prefix + path: changes for path, changes in CLAIM_SPEC.items()})
    return entries


def _apply(schema: Node, path: str, changes: dict[str, Any]) -> None:
    node = schema
    for part in re.findall(r"\.[^.\[{]+|\[\]|\{\}", path):
        key = {"[]": "items", "{}": "additionalProperties"}.get(part)
        try:
            node = node[key] if key else node["properties"][part[1:]]
        except KeyError:
            raise LegacyError(f"LEGACY names {path!r}, which the derived schema lacks") from None
    before = copy.deepcopy(node)
    for key, value in changes.items():
        if key == PREPEND:
            node[RULES] = [*value, *node.get(RULES, ())]
        elif value is None:
            node.pop(key, None)
        else:
            node[key] = copy.deepcopy(value)
    if node == before:
        raise LegacyError(f"LEGACY entry {path!r} changes nothing: remove it")


__all__ = ["CLAIM_SPEC", "LEGACY", "LegacyError", "derive", "legacy"]

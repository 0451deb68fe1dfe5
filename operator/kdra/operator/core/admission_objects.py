"""Admission decisions about kdra's own objects (ResourceClaims, ResourceClaimTemplates,
DeviceClasses), for the validating webhook (:func:`kdra.operator.core.admission.validate`).

What the CRD schemas cannot check: the object parses with kdra's v1 models (one-of rules,
known request names, upstream's limits), every CEL selector compiles, opaque parameters fit
in 10 KiB, a claim does not ask for more devices than one allocation holds (counting the
smallest ``firstAvailable`` alternative), admin access only in a namespace labelled
``resource.kdra.dev/admin-access: "true"``; and what to warn about (fields kdra accepts but
does not act on yet; in the native flavour, what kdra-scheduler could not serve in a built-in
object: :func:`upstream_object_warnings`); and, for the mutating webhook, which DeviceClasses
a claim may use and whether a class can ever select a GPU (:func:`claim_request_classes`,
:func:`class_may_select`).

Invariants:
- Pure: objects are plain dicts in ``v1`` (the API server converts v1alpha3 first); the
  namespace's labels, when the admin-access rule needs them, are passed in.
- Every error names its field in ``kubectl explain`` notation; :func:`v1alpha3_paths` maps
  v1 paths back for a user who wrote v1alpha3.
- Ratcheting: CEL expressions the old object already had are not re-checked.
- Bounded: opaque parameters are measured without recursion (at most
  :data:`MAX_OPAQUE_PARAMETERS_DEPTH` levels, 10 KiB); the old object is walked without
  recursion.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kdra import GROUP
from kdra.dra.allocator.capacity import parse_requests
from kdra.dra.cel import compile_selector, selector_drivers
from kdra.dra.errors import CelCompileError, InvalidObject
from kdra.dra.models import (
    MAX_DEVICES_PER_CLAIM,
    BaseDeviceRequest,
    DeviceClaim,
    ExactCount,
    parse_claim,
    parse_class,
    parse_template,
)
from kdra.kube.core.extended_entry import class_name_error
from kdra.kube.core.podclaims import GPU_DRIVER
from kdra.kube.core.untrusted import MAX_REPORTED, json_size, too_deep

__all__ = [
    "ADMIN_ACCESS_LABEL",
    "MAX_OPAQUE_PARAMETERS_BYTES",
    "MAX_OPAQUE_PARAMETERS_DEPTH",
    "MAX_SPEC_DEPTH",
    "FieldError",
    "admin_access_errors",
    "admin_access_requested",
    "claim_errors",
    "claim_request_classes",
    "class_errors",
    "class_may_select",
    "device_status_errors",
    "template_errors",
    "v1alpha3_paths",
]

# Upstream's OpaqueParametersMaxLength: the raw JSON of one opaque configuration's parameters.
MAX_OPAQUE_PARAMETERS_BYTES = 10 * 1024
MAX_OPAQUE_PARAMETERS_DEPTH = 32
"""Nesting levels of one configuration's parameters (upstream has no limit but the size;
kdra's JSON encoder stops at 254 levels, and no driver's configuration comes close to 32)."""
MAX_SPEC_DEPTH = 48
"""Nesting levels of a kdra object's ``spec`` (its own fields plus the parameters')."""
_V1ALPHA3_PATH = re.compile(r"requests\[(\d+)\]\.exactly\.")
"""The v1 path of a request's field, for an object a user wrote in v1alpha3 (the API server
converts it to v1 before calling the webhook; the user should see their own field names)."""
ADMIN_ACCESS_LABEL = f"{GROUP}/admin-access"
"""The namespace label that allows admin-access requests (upstream:
``resource.kubernetes.io/admin-access``)."""


@dataclass(frozen=True)
class FieldError:
    """One reason for a denial: the offending field and what is wrong with it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def v1alpha3_paths(errors: Iterable[FieldError]) -> list[FieldError]:
    """``errors`` with v1 request paths (``requests[0].exactly.count``) as a v1alpha3 user
    wrote them (``requests[0].count``)."""
    return [FieldError(_V1ALPHA3_PATH.sub(r"requests[\1].", e.field), e.message)
            for e in errors]


def claim_errors(obj: Mapping[str, Any],
                 old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """Why a ResourceClaim must be rejected (empty: it is fine)."""
    try:
        claim = parse_claim(obj)
    except InvalidObject as exc:
        return [FieldError(exc.field, exc.message)]
    return _device_claim_errors(claim.spec.devices, "spec.devices", _old_expressions(old))


def template_errors(obj: Mapping[str, Any],
                    old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """Why a ResourceClaimTemplate must be rejected (its claim spec is ``spec.spec``)."""
    try:
        template = parse_template(obj)
    except InvalidObject as exc:
        return [FieldError(exc.field, exc.message)]
    return _device_claim_errors(template.spec.spec.devices, "spec.spec.devices",
                                _old_expressions(old))


def upstream_object_warnings(kind: str, obj: Mapping[str, Any],
                             old: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """What kdra-scheduler would fail on in a built-in (``resource.k8s.io``) ResourceClaim,
    ResourceClaimTemplate or DeviceClass, as admission warnings: upstream's API server has
    validated it (and may accept what kdra cannot evaluate — a CEL function kdra lacks, say),
    and kube-scheduler may still serve it, so the object is never refused for it. At most
    :data:`~kdra.kube.core.untrusted.MAX_REPORTED` warnings; empty for other kinds."""
    check = {"ResourceClaim": claim_errors, "ResourceClaimTemplate": template_errors,
             "DeviceClass": class_errors}.get(kind)
    if check is None or too_deep(obj.get("spec"), MAX_SPEC_DEPTH):
        return ()
    return tuple(f"kdra-scheduler cannot serve this {kind} as written: {error}"
                 for error in check(obj, old)[:MAX_REPORTED])


def class_errors(obj: Mapping[str, Any],
                 old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """Why a DeviceClass must be rejected."""
    try:
        device_class = parse_class(obj)
    except InvalidObject as exc:
        return [FieldError(exc.field, exc.message)]
    spec = device_class.spec
    errors = _selector_errors(
        ((f"spec.selectors[{j}].cel.expression", s.cel.expression)
         for j, s in enumerate(spec.selectors)), _old_expressions(old))
    errors += _parameter_errors(
        (f"spec.config[{i}].opaque.parameters", c.opaque.parameters)
        for i, c in enumerate(spec.config))
    if (problem := class_name_error(spec.extended_resource_name)) is not None:
        errors.append(FieldError("spec.extendedResourceName", problem))
    return errors


def _asked(devices: DeviceClaim, where: str) -> Iterator[tuple[str, BaseDeviceRequest]]:
    """``(field path, what is asked)`` for every ``exactly`` and every sub-request."""
    for i, request in enumerate(devices.requests):
        if request.exactly is not None:
            yield f"{where}.requests[{i}].exactly", request.exactly
        for k, sub in enumerate(request.first_available):
            yield f"{where}.requests[{i}].firstAvailable[{k}]", sub


def _device_claim_errors(devices: DeviceClaim, where: str,
                         known_good: frozenset[str]) -> list[FieldError]:
    errors = _selector_errors(
        ((f"{path}.selectors[{j}].cel.expression", s.cel.expression)
         for path, asked in _asked(devices, where)
         for j, s in enumerate(asked.selectors)), known_good)
    errors += _parameter_errors(
        (f"{where}.config[{i}].opaque.parameters", c.opaque.parameters)
        for i, c in enumerate(devices.config))
    errors += _capacity_errors(_asked(devices, where))
    total = sum(min((a.exact_count if a.allocation_mode == ExactCount else 0)
                    for _, a in request.alternatives())
                for request in devices.requests)
    if total > MAX_DEVICES_PER_CLAIM:
        errors.append(FieldError(
            f"{where}.requests",
            f"the requests ask for {total} devices in total (with their smallest "
            f"alternatives); one claim can be allocated at most {MAX_DEVICES_PER_CLAIM} "
            "(upstream's limit on allocation results)"))
    return errors


def _capacity_errors(asked: Iterator[tuple[str, BaseDeviceRequest]]) -> list[FieldError]:
    """Capacity requests must be non-negative quantities (the schema checks the form; the
    sign and what the schema's pattern lets through are checked here)."""
    errors = []
    for path, request in asked:
        for name, text in sorted(((request.capacity and request.capacity.requests) or {})
                                 .items()):
            try:
                parse_requests({name: text})
            except ValueError as exc:
                message = str(exc).split(": ", 1)[-1]
                errors.append(FieldError(f"{path}.capacity.requests[{name}]",
                                         f"{message}; write a non-negative quantity such "
                                         "as 20Gi"))
    return errors


def admin_access_requested(obj: Mapping[str, Any]) -> bool:
    """Whether a v1 claim or template (any shape: it is only looked at) asks for admin
    access in some request."""
    spec = obj.get("spec")
    if obj.get("kind") == "ResourceClaimTemplate" and isinstance(spec, Mapping):
        spec = spec.get("spec")
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    return any(isinstance(r, Mapping) and isinstance(r.get("exactly"), Mapping)
               and r["exactly"].get("adminAccess") is True for r in requests or ())


def admin_access_errors(obj: Mapping[str, Any],
                        namespace_labels: Mapping[str, str] | None) -> list[FieldError]:
    """Upstream's rule (KEP-5018), with kdra's label: admin access only in namespaces
    labelled ``resource.kdra.dev/admin-access: "true"``. ``namespace_labels`` None: the
    namespace could not be read (denied: the rule cannot be checked)."""
    if not admin_access_requested(obj):
        return []
    namespace = (obj.get("metadata") or {}).get("namespace") or "<unknown>"
    where = "spec.spec.devices" if obj.get("kind") == "ResourceClaimTemplate" \
        else "spec.devices"
    field = f"{where}.requests[].exactly.adminAccess"
    if namespace_labels is None:
        return [FieldError(field, f"admin access needs the namespace {namespace} to be "
                                  f"labelled {ADMIN_ACCESS_LABEL}=true, and it could not be "
                                  "read; try again")]
    if namespace_labels.get(ADMIN_ACCESS_LABEL) == "true":
        return []
    return [FieldError(field, f"admin access is only allowed in namespaces labelled "
                              f"{ADMIN_ACCESS_LABEL}=true; namespace {namespace} is not (an "
                              f"administrator can run: kubectl label namespace {namespace} "
                              f"{ADMIN_ACCESS_LABEL}=true)")]


def _selector_errors(selectors: Iterable[tuple[str, str]],
                     known_good: frozenset[str]) -> list[FieldError]:
    errors: list[FieldError] = []
    for field, expression in selectors:
        if expression in known_good:
            continue
        try:
            compile_selector(expression)
        except CelCompileError as exc:
            errors.append(FieldError(field, str(exc)))
    return errors


def _parameter_errors(configs: Iterable[tuple[str, Any]]) -> list[FieldError]:
    errors: list[FieldError] = []
    for field, parameters in configs:
        if too_deep(parameters, MAX_OPAQUE_PARAMETERS_DEPTH):
            errors.append(FieldError(field, f"may nest at most {MAX_OPAQUE_PARAMETERS_DEPTH} "
                                            "levels"))
            continue
        size = json_size(parameters, MAX_OPAQUE_PARAMETERS_BYTES)
        if size > MAX_OPAQUE_PARAMETERS_BYTES:
            errors.append(FieldError(field, f"must be at most {MAX_OPAQUE_PARAMETERS_BYTES} "
                                            f"bytes of JSON (has more)"))
    return errors


def device_status_errors(obj: Mapping[str, Any],
                         old: Mapping[str, Any] | None) -> list[FieldError]:
    """A claim's ``status.devices[].data`` as a driver writes it (the status subresource):
    at most :data:`MAX_OPAQUE_PARAMETERS_DEPTH` levels and 10 KiB each, upstream's limit on
    raw device data — checked for the entries that are new or whose data changed (ratcheting),
    so one old oversized entry does not block the other entries' updates."""
    def entries(claim: Mapping[str, Any] | None) -> list[Any]:
        status = claim.get("status") if isinstance(claim, Mapping) else None
        found = status.get("devices") if isinstance(status, Mapping) else None
        return found if isinstance(found, list) else []

    def key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(entry.get(k) for k in ("driver", "pool", "device", "shareID"))

    def same(data: Any, was: Any) -> bool:
        # Compared only below the depth limit (== recurses): a deep value is the same as a
        # deep old one (ratcheting), whatever it holds.
        if too_deep(data, MAX_OPAQUE_PARAMETERS_DEPTH):
            return too_deep(was, MAX_OPAQUE_PARAMETERS_DEPTH)
        return bool(data == was)

    before = {key(e): e.get("data") for e in entries(old) if isinstance(e, Mapping)}
    changed = [(f"status.devices[{i}].data", entry["data"])
               for i, entry in enumerate(entries(obj))
               if isinstance(entry, Mapping) and "data" in entry
               and (key(entry) not in before or not same(entry["data"], before[key(entry)]))]
    return _parameter_errors(changed)


def _old_expressions(old: Mapping[str, Any] | None) -> frozenset[str]:
    """Every CEL expression text in the old object (ratcheting), whatever its kind."""
    if old is None:
        return frozenset()
    found: set[str] = set()
    stack: list[Any] = [old.get("spec")]
    while stack:  # no recursion: the old object may nest a thousand levels deep
        node = stack.pop()
        if isinstance(node, Mapping):
            cel = node.get("cel")
            if isinstance(cel, Mapping) and isinstance(cel.get("expression"), str):
                found.add(cel["expression"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(found)


# --------------------------------------------------------------------------- GPU or not


def class_may_select(device_class: Mapping[str, Any] | None, driver: str = GPU_DRIVER) -> bool:
    """Whether a DeviceClass (the API object; None: not found) can ever select a device of
    ``driver``: False only when one of its selectors pins other drivers
    (:func:`kdra.dra.cel.selector_drivers`), True whenever that is not certain."""
    if not isinstance(device_class, Mapping):
        return True
    spec = device_class.get("spec")
    selectors = spec.get("selectors") if isinstance(spec, Mapping) else None
    for selector in selectors if isinstance(selectors, list) else ():
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if isinstance(expression, str):
            drivers = selector_drivers(expression)
            if drivers is not None and driver not in drivers:
                return False
    return True


def claim_request_classes(claim_spec: Mapping[str, Any] | None,
                          request: str | None = None) -> list[str] | None:
    """The DeviceClass names a v1 claim spec (``ResourceClaim.spec``, or a template's
    ``spec.spec``) asks for: each ``exactly`` request's class and every class its
    ``firstAvailable`` alternatives name. ``request`` (a pod's claims entry: ``<request>``
    or ``<request>/<subrequest>``) narrows it to that request or alternative. None when the
    spec cannot be read (the caller then assumes anything)."""
    devices = claim_spec.get("devices") if isinstance(claim_spec, Mapping) else None
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    if not isinstance(requests, list):
        return None
    parent, _, sub = (request or "").partition("/")
    names: list[str] = []
    for entry in requests:
        if not isinstance(entry, Mapping):
            return None
        if request is not None and entry.get("name") != parent:
            continue
        exactly = entry.get("exactly")
        alternatives = entry.get("firstAvailable")
        if isinstance(exactly, Mapping):
            asked: list[Any] = [exactly]
        elif isinstance(alternatives, list) and alternatives:
            asked = [a for a in alternatives
                     if not sub or (isinstance(a, Mapping) and a.get("name") == sub)]
        else:
            return None
        for one in asked:
            name = one.get("deviceClassName") if isinstance(one, Mapping) else None
            if not isinstance(name, str) or not name:
                return None
            names.append(name)
    return names

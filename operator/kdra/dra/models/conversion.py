"""Conversion of kdra's objects between ``resource.kdra.dev/v1`` (storage) and ``v1alpha3``,
losslessly, and the ``apiextensions.k8s.io/v1`` ConversionReview the operator's ``/convert``
webhook answers.

What v1alpha3 cannot express (see :mod:`kdra.dra.models.v1alpha3`) rides in the annotation
``resource.kdra.dev/v1-fields`` of the v1alpha3 form: a JSON object whose keys are the v1
paths of the parts that lost something and whose values are those parts as they are in v1 —
``spec.devices.requests`` (``[[index, request], ...]``), ``spec.devices.constraints``,
``status.allocation``, ``status.devices``, ``spec.extendedResourceName``,
``spec.perDeviceNodeSelection``, ``spec.sharedCounters`` and, for slices, ``spec.devices``
(``{device name: device}``); templates use ``spec.spec.devices.*``.

Invariants:
- ``to_v1(to_v1alpha3(obj)) == obj`` for every v1 object without the annotation (property-
  tested), and ``to_v1alpha3(to_v1(obj)) == obj`` for every v1alpha3 object whose devices
  have ``basic`` (required in v1alpha3).
- A part is restored from the annotation only while the v1alpha3 object still shows what
  that part looks like in v1alpha3: a v1alpha3 client that changed the part wins, and a stale
  or forged entry changes nothing it does not match. Restored parts must parse as kdra's v1
  models; entries that do not are ignored. The annotation never appears in v1.
- Only ``apiVersion`` and the one annotation change in metadata (the API server rejects
  conversions that touch anything else of it). Pure and total: unknown kinds or versions and
  malformed reviews raise :class:`~kdra.dra.errors.InvalidObject`; malformed objects of a
  known kind are converted as far as their shape allows.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from kdra import GROUP
from kdra.dra.errors import InvalidObject
from kdra.dra.models import v1alpha3 as alpha
from kdra.dra.models.v1_claim_spec import DeviceConstraint, DeviceRequest
from kdra.dra.models.v1_claim_status import AllocatedDeviceStatus, AllocationResult
from kdra.dra.models.v1_devices import CounterSet, Device

V1 = f"{GROUP}/v1"
V1ALPHA3 = f"{GROUP}/v1alpha3"
VERSIONS = (V1, V1ALPHA3)
KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice")
V1_FIELDS_ANNOTATION = f"{GROUP}/v1-fields"
REVIEW_API_VERSION = "apiextensions.k8s.io/v1"
MAX_ANNOTATION_BYTES = 256 * 1024
"""The API server's limit on all annotations of an object together."""

JSON = Any
Lost = dict[str, Any]


def convert(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """``obj`` (one of kdra's four kinds, in either version) as ``api_version``.

    Raises InvalidObject for an unknown kind or version."""
    if api_version not in VERSIONS:
        raise InvalidObject("desiredAPIVersion", f"cannot convert to {api_version!r}; "
                            f"kdra serves {', '.join(VERSIONS)}")
    current = obj.get("apiVersion")
    if current not in VERSIONS:
        raise InvalidObject("apiVersion", f"cannot convert from {current!r}; "
                            f"kdra serves {', '.join(VERSIONS)}")
    if obj.get("kind") not in KINDS:
        raise InvalidObject("kind", f"kdra converts {', '.join(KINDS)}, not {obj.get('kind')!r}")
    if current == api_version:
        return copy.deepcopy(dict(obj))
    return to_v1alpha3(obj) if api_version == V1ALPHA3 else to_v1(obj)


# --------------------------------------------------------------------------- v1 -> v1alpha3


def to_v1alpha3(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The v1alpha3 form of a v1 object, with what v1alpha3 cannot say in the annotation."""
    out = copy.deepcopy(dict(obj))
    out["apiVersion"] = V1ALPHA3
    lost: Lost = {}
    kind = out.get("kind")
    spec = out.get("spec")
    if kind == "ResourceClaim":
        _claim_spec_down(spec, "spec", lost)
        _claim_status_down(out.get("status"), lost)
    elif kind == "ResourceClaimTemplate" and isinstance(spec, dict):
        _claim_spec_down(spec.get("spec"), "spec.spec", lost)
    elif kind == "DeviceClass" and isinstance(spec, dict):
        for key in alpha.CLASS_V1_ONLY:
            _pop_into(spec, key, f"spec.{key}", lost)
    elif kind == "ResourceSlice" and isinstance(spec, dict):
        _slice_spec_down(spec, lost)
    _set_annotation(out, lost)
    return out


def _claim_spec_down(spec: JSON, where: str, lost: Lost) -> None:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return
    requests = devices.get("requests")
    if isinstance(requests, list):
        changed = [[i, r] for i, r in enumerate(requests)
                   if alpha.lossy(r, alpha.request_down, alpha.request_up)]
        if changed:
            lost[f"{where}.devices.requests"] = copy.deepcopy(changed)
        devices["requests"] = [alpha.request_down(r) for r in requests]
    constraints = devices.get("constraints")
    if constraints is not None:
        if alpha.lossy(constraints, alpha.constraints_down, alpha.constraints_up):
            lost[f"{where}.devices.constraints"] = copy.deepcopy(constraints)
        rendered = alpha.constraints_down(constraints)
        if rendered == [] and constraints != []:
            del devices["constraints"]  # only distinctAttribute ones: none to show
        else:
            devices["constraints"] = rendered


def _claim_status_down(status: JSON, lost: Lost) -> None:
    if not isinstance(status, dict):
        return
    for key, down, up in (("allocation", alpha.allocation_down, alpha.allocation_up),
                          ("devices", alpha.device_statuses_down, alpha.device_statuses_up)):
        if key not in status:
            continue
        if alpha.lossy(status[key], down, up):
            lost[f"status.{key}"] = copy.deepcopy(status[key])
        status[key] = down(status[key])


def _slice_spec_down(spec: dict[str, Any], lost: Lost) -> None:
    for key in alpha.SLICE_V1_ONLY:
        _pop_into(spec, key, f"spec.{key}", lost)
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return
    changed = {d["name"]: copy.deepcopy(d) for d in devices
               if isinstance(d, Mapping) and isinstance(d.get("name"), str)
               and alpha.lossy(d, alpha.device_down, alpha.device_up)}
    if changed:
        lost["spec.devices"] = changed
    spec["devices"] = [alpha.device_down(d) for d in devices]


def _pop_into(container: dict[str, Any], key: str, path: str, lost: Lost) -> None:
    if key in container:
        lost[path] = container.pop(key)


def _set_annotation(obj: dict[str, Any], lost: Lost) -> None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        if lost:
            obj["metadata"] = metadata = {}
        else:
            return
    annotations = metadata.get("annotations")
    if lost:
        if not isinstance(annotations, dict):
            annotations = metadata["annotations"] = {}
        annotations[V1_FIELDS_ANNOTATION] = json.dumps(lost, sort_keys=True,
                                                       separators=(",", ":"))
    elif isinstance(annotations, dict) and V1_FIELDS_ANNOTATION in annotations:
        del annotations[V1_FIELDS_ANNOTATION]
        if not annotations:
            del metadata["annotations"]


# --------------------------------------------------------------------------- v1alpha3 -> v1


def to_v1(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The v1 form of a v1alpha3 object: converted, then what the annotation kept restored
    where the v1alpha3 object still matches it. The annotation is dropped."""
    out = copy.deepcopy(dict(obj))
    out["apiVersion"] = V1
    stored = _take_annotation(out)
    kind = out.get("kind")
    spec = out.get("spec")
    if kind == "ResourceClaim":
        _claim_spec_up(spec, "spec", stored)
        _claim_status_up(out.get("status"), stored)
    elif kind == "ResourceClaimTemplate" and isinstance(spec, dict):
        _claim_spec_up(spec.get("spec"), "spec.spec", stored)
    elif kind == "DeviceClass" and isinstance(spec, dict):
        name = stored.get("spec.extendedResourceName")
        if isinstance(name, str):
            spec["extendedResourceName"] = name
    elif kind == "ResourceSlice" and isinstance(spec, dict):
        _slice_spec_up(spec, stored)
    return out


def _take_annotation(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return {}
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict) or V1_FIELDS_ANNOTATION not in annotations:
        return {}
    raw = annotations.pop(V1_FIELDS_ANNOTATION)
    if not annotations:
        del metadata["annotations"]
    if not isinstance(raw, str) or len(raw) > MAX_ANNOTATION_BYTES:
        return {}
    try:
        stored = json.loads(raw)
    except (ValueError, RecursionError):  # a deep value rode in it (the /convert answer's)
        return {}
    return stored if isinstance(stored, dict) else {}


def _valid(model: type[BaseModel] | TypeAdapter[Any], value: JSON) -> bool:
    try:
        if isinstance(model, TypeAdapter):
            model.validate_python(value)
        else:
            model.model_validate(value)
    except (ValidationError, ValueError, TypeError, RecursionError):
        return False
    return True


_CONSTRAINTS: TypeAdapter[Any] = TypeAdapter(list[DeviceConstraint])
_DEVICE_STATUSES: TypeAdapter[Any] = TypeAdapter(list[AllocatedDeviceStatus])
_COUNTER_SETS: TypeAdapter[Any] = TypeAdapter(list[CounterSet])


def _restore(current: JSON, stored: JSON, down: Callable[[JSON], JSON],
             model: type[BaseModel] | TypeAdapter[Any]) -> bool:
    """Whether ``stored`` (a v1 part) may replace the up-converted ``current`` (v1alpha3)."""
    return bool(down(stored) == current and _valid(model, stored))


def _claim_spec_up(spec: JSON, where: str, stored: dict[str, Any]) -> None:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return
    requests = devices.get("requests")
    if isinstance(requests, list):
        converted = [alpha.request_up(r) for r in requests]
        entries = stored.get(f"{where}.devices.requests")
        for entry in entries if isinstance(entries, list) else ():
            if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int)
                    and 0 <= entry[0] < len(requests)
                    and _restore(requests[entry[0]], entry[1], alpha.request_down,
                                 DeviceRequest)):
                converted[entry[0]] = entry[1]
        devices["requests"] = converted
    constraints = stored.get(f"{where}.devices.constraints")
    if constraints is not None and _restore(devices.get("constraints", []), constraints,
                                            alpha.constraints_down, _CONSTRAINTS):
        devices["constraints"] = constraints


def _claim_status_up(status: JSON, stored: dict[str, Any]) -> None:
    if not isinstance(status, dict):
        return
    allocation = stored.get("status.allocation")
    if ("allocation" in status and allocation is not None
            and _restore(status["allocation"], allocation, alpha.allocation_down,
                         AllocationResult)):
        status["allocation"] = allocation
    devices = stored.get("status.devices")
    if ("devices" in status and devices is not None
            and _restore(status["devices"], devices, alpha.device_statuses_down,
                         _DEVICE_STATUSES)):
        status["devices"] = devices


def _slice_spec_up(spec: dict[str, Any], stored: dict[str, Any]) -> None:
    scoped = any(spec.get(k) for k in ("nodeName", "nodeSelector", "allNodes"))
    if stored.get("spec.perDeviceNodeSelection") is True and not scoped:
        spec["perDeviceNodeSelection"] = True
    counters = stored.get("spec.sharedCounters")
    if counters is not None and not spec.get("devices") and _valid(_COUNTER_SETS, counters):
        spec["sharedCounters"] = counters
    devices = spec.get("devices")
    if not isinstance(devices, list):
        return
    kept = stored.get("spec.devices")
    kept = kept if isinstance(kept, dict) else {}
    converted = []
    for device in devices:
        name = device.get("name") if isinstance(device, Mapping) else None
        original = kept.get(name) if isinstance(name, str) else None
        if original is not None and _restore(device, original, alpha.device_down, Device):
            converted.append(original)
        else:
            converted.append(alpha.device_up(device))
    spec["devices"] = converted


# --------------------------------------------------------------------------- review


def review(body: Any) -> dict[str, Any]:
    """Answer an ``apiextensions.k8s.io/v1`` ConversionReview.

    Raises InvalidObject when ``body`` is not one (the server answers HTTP 400). A request
    whose objects cannot be converted gets a ``Failure`` result naming the object."""
    if not isinstance(body, Mapping) or body.get("kind") != "ConversionReview" \
            or body.get("apiVersion") != REVIEW_API_VERSION:
        raise InvalidObject("<root>", f"expected a {REVIEW_API_VERSION} ConversionReview")
    request = body.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise InvalidObject("request.uid", "the ConversionReview has no request uid")
    desired = request.get("desiredAPIVersion")
    objects = request.get("objects")
    response: dict[str, Any] = {"uid": request["uid"]}
    try:
        if not isinstance(objects, list) or not all(isinstance(o, Mapping) for o in objects):
            raise InvalidObject("request.objects", "must be a list of objects")
        response["convertedObjects"] = [_convert_named(o, str(desired)) for o in objects]
        response["result"] = {"status": "Success"}
    except InvalidObject as exc:
        response["convertedObjects"] = []
        response["result"] = {"status": "Failure", "message": f"kdra conversion: {exc}"}
    return {"apiVersion": REVIEW_API_VERSION, "kind": "ConversionReview",
            "response": response}


def _convert_named(obj: Mapping[str, Any], desired: str) -> dict[str, Any]:
    try:
        return convert(obj, desired)
    except InvalidObject as exc:
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        raise InvalidObject(exc.field, exc.message,
                            obj=f"{obj.get('kind', 'object')} {name or '<unnamed>'}") from exc

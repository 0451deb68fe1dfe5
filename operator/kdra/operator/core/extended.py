"""Extended resources backed by kdra (upstream's DRAExtendedResource, KEP-5004): a pod asks for
``resources.limits: {gpu.kdra.dev/gpu: 2}`` instead of writing a claim.

A DeviceClass names the extended resource it serves in ``spec.extendedResourceName``; every
class also serves the implicit name ``deviceclass.resource.kdra.dev/<class name>``
(:func:`class_mapping`). The mutating webhook (:func:`convert_pod`) turns a pod's extended
resources that a class serves into **one** claims-annotation entry, ``extended-resources``,
whose ``extendedResources`` list holds one request per container and resource — named
``container-<i>-request-<j>`` as upstream (``i``: the container's index in init containers
followed by containers; ``j``: the resource's index among the container's sorted resource
names), ``exactly: {deviceClassName, count}`` — and removes those resources from the
containers' ``limits`` and ``requests``, so neither the API server's scheduler nor the kubelet
looks for them on a node. The claim controller then creates the pod's claim
(:func:`extended_claim`: ``<pod>-extended-resources-xxxxx``, owned by the pod) and records it
in the pod's claim-statuses annotation under ``extended-resources``; each container sees only
its own requests' devices.

Rules (upstream's, where it has them):

* A name no class serves is left alone (a device plugin may serve it).
* Extended resources cannot be overcommitted: a limit is required, and a request, when set,
  must equal it. The count is a whole number; 0 asks for nothing.
* One claim holds at most 32 devices and 32 requests: a pod asking for more is denied (a
  limit of 10^9 GPUs is a clear denial, never a huge claim).
* Several classes serving one name: the newest (``creationTimestamp``, then the name) wins.
* A pod may also name claims of the same classes in its annotation: both are allocated.

Invariants:
- Pure: the caller passes the pod and the classes' mapping.
- :func:`convert_pod` returns either errors (field paths in ``kubectl explain`` notation, each
  naming the fix) or a JSONPatch plus the converted pod; a pod without served extended
  resources yields neither. Applying it to the converted pod yields nothing (reinvocation).
- The user's claims annotation text is kept as written; the new entry is appended to it (or
  the whole list re-written as JSON when the text's layout does not allow appending), and the
  result is checked by parsing it again.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kdra import GROUP
from kdra.dra.errors import InvalidObject
from kdra.dra.quantity import InvalidQuantity, parse_quantity
from kdra.kube.core.extended_entry import (
    IMPLICIT_PREFIX,
    MAX_EXTENDED_DEVICES,
    MAX_REQUESTS,
    ExtendedRequest,
    class_name_error,
    is_extended_resource_name,
)
from kdra.kube.core.podclaims import (
    CLAIMS_ANNOTATION,
    MAX_POD_CLAIMS,
    PodClaim,
    generated_claim,
    parse_pod_claims,
)
from kdra.kube.core.untrusted import shorten
from kdra.operator.core.admission_objects import FieldError

__all__ = ["ENTRY_NAME", "EXTENDED_CLAIM_ANNOTATION", "IMPLICIT_PREFIX", "Conversion",
           "class_mapping", "class_name_error", "convert_pod", "extended_claim",
           "extended_names"]

ENTRY_NAME = "extended-resources"
"""The claims-annotation entry (and claim-statuses key) of the generated claim; the claim's
``generateName`` is ``<pod>-extended-resources-`` as upstream."""
EXTENDED_CLAIM_ANNOTATION = f"{GROUP}/extended-resource-claim"
"""On the generated claim: ``"true"`` (upstream's ``resource.kubernetes.io/extended-resource-
claim``)."""
_KINDS = ("initContainers", "containers")


def class_mapping(classes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Extended resource name → the DeviceClass that serves it."""
    mapping: dict[str, str] = {}
    ranked: list[tuple[str, str, str]] = []  # (creationTimestamp, name, extended name)
    for obj in classes:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(meta, Mapping) or not isinstance(name, str) or not name:
            continue
        mapping[IMPLICIT_PREFIX + name] = name
        wanted = spec.get("extendedResourceName") if isinstance(spec, Mapping) else None
        if isinstance(wanted, str) and class_name_error(wanted) is None:
            ranked.append((str(meta.get("creationTimestamp") or ""), name, wanted))
    # Newest first; equal timestamps: the smaller name. The first one for a name wins.
    ranked.sort(key=lambda r: r[1])
    ranked.sort(key=lambda r: r[0], reverse=True)
    for _, name, wanted in ranked:
        mapping.setdefault(wanted, name)
    return mapping


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """``(kind, index in kind, container)`` of init containers, then containers."""
    spec = pod.get("spec")
    found: list[tuple[str, int, Mapping[str, Any]]] = []
    for kind in _KINDS:
        items = spec.get(kind) if isinstance(spec, Mapping) else None
        for index, container in enumerate(items if isinstance(items, list) else ()):
            if isinstance(container, Mapping):
                found.append((kind, index, container))
    return found


def _resource_map(container: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    resources = container.get("resources")
    values = resources.get(key) if isinstance(resources, Mapping) else None
    return values if isinstance(values, Mapping) else {}


def extended_names(pod: Mapping[str, Any]) -> frozenset[str]:
    """The extended resource names the pod's containers ask for (limits or requests)."""
    return frozenset(name for _, _, c in _containers(pod) for key in ("limits", "requests")
                     for name in _resource_map(c, key) if is_extended_resource_name(name))


@dataclass(frozen=True)
class Conversion:
    """What :func:`convert_pod` decided: errors, or a patch and the pod it produces."""

    errors: tuple[FieldError, ...] = ()
    patch: tuple[dict[str, Any], ...] = ()
    pod: Mapping[str, Any] | None = None
    requests: tuple[ExtendedRequest, ...] = field(default=())


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _count(where: str, name: str, limit: Any, request: Any) -> int | FieldError:
    """The number of devices a container asks for as ``name``, or why it cannot."""
    if limit is None:
        return FieldError(f"{where}.requests[{name}]", "an extended resource needs a limit: "
                          f"set resources.limits[{name}] to the number of devices (the "
                          "request may be left out; it defaults to the limit)")
    try:
        value = parse_quantity(str(limit)).as_int64()
    except InvalidQuantity:
        value = None
    if value is None or value < 0:
        return FieldError(f"{where}.limits[{name}]", "must be a whole number of devices "
                          f"(is {shorten(str(limit), 40)})")
    if request is not None:
        try:
            same = parse_quantity(str(request)).compare(parse_quantity(str(limit))) == 0
        except InvalidQuantity:
            same = False
        if not same:
            return FieldError(f"{where}.requests[{name}]", f"must equal resources.limits"
                              f"[{name}] ({shorten(str(limit), 40)}): extended resources "
                              "cannot be overcommitted; set both to the same number or leave "
                              "the request out")
    if value > MAX_EXTENDED_DEVICES:
        return FieldError(f"{where}.limits[{name}]", f"asks for {value} devices; one pod may "
                          f"get at most {MAX_EXTENDED_DEVICES} through extended resources "
                          "(use a ResourceClaim for more)")
    return value


def convert_pod(pod: Mapping[str, Any], mapping: Mapping[str, str]) -> Conversion:
    """Turn the pod's served extended resources into the ``extended-resources`` entry (see
    the module's doc). An empty Conversion when there are none."""
    if not mapping:
        return Conversion()  # no class serves an extended resource: nothing to convert
    patch: list[dict[str, Any]] = []
    errors: list[FieldError] = []
    requests: list[ExtendedRequest] = []
    converted = copy.deepcopy(dict(pod))
    for position, (kind, index, container) in enumerate(_containers(pod)):
        limits, asked = _resource_map(container, "limits"), _resource_map(container, "requests")
        names = sorted(set(limits) | set(asked), key=str)
        where = f"spec.{kind}[{index}].resources"
        for j, name in enumerate(names):
            device_class = mapping.get(name) if isinstance(name, str) else None
            if device_class is None:
                continue
            for key, values in (("limits", limits), ("requests", asked)):
                if name in values:
                    patch.append({"op": "remove", "path": f"/spec/{kind}/{index}/resources/"
                                                          f"{key}/{_escape(name)}"})
                    del converted["spec"][kind][index]["resources"][key][name]
            count = _count(where, name, limits.get(name), asked.get(name))
            if isinstance(count, FieldError):
                errors.append(count)
            elif count:
                requests.append(ExtendedRequest(f"container-{position}-request-{j}",
                                                str(container.get("name")), name,
                                                device_class, count))
    if errors:
        return Conversion(errors=tuple(errors))
    if not patch:
        return Conversion()
    total = sum(r.count for r in requests)
    if total > MAX_EXTENDED_DEVICES or len(requests) > MAX_REQUESTS:
        return Conversion(errors=(FieldError("spec", (
            f"asks for {total} devices in {len(requests)} extended-resource requests; one pod "
            f"may get at most {MAX_EXTENDED_DEVICES} devices in {MAX_REQUESTS} requests this "
            "way (use a ResourceClaim for more)")),))
    if requests:
        annotation = _annotation(pod, requests)
        if isinstance(annotation, FieldError):
            return Conversion(errors=(annotation,))
        meta = converted.setdefault("metadata", {})
        if not isinstance(meta.get("annotations"), Mapping):
            patch.append({"op": "add", "path": "/metadata/annotations",
                          "value": {CLAIMS_ANNOTATION: annotation}})
            meta["annotations"] = {}
        else:
            patch.append({"op": "add", "path": f"/metadata/annotations/"
                                               f"{_escape(CLAIMS_ANNOTATION)}",
                          "value": annotation})
        meta["annotations"][CLAIMS_ANNOTATION] = annotation
    return Conversion(patch=tuple(patch), pod=converted, requests=tuple(requests))


_FIELD = f"metadata.annotations[{CLAIMS_ANNOTATION}]"


def _annotation(pod: Mapping[str, Any], requests: list[ExtendedRequest]) -> str | FieldError:
    """The claims annotation with the ``extended-resources`` entry added."""
    entry = {"name": ENTRY_NAME, "extendedResources": [r.to_json() for r in requests]}
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    text = annotations.get(CLAIMS_ANNOTATION) if isinstance(annotations, Mapping) else None
    if text is None:
        return json.dumps([entry], separators=(",", ":"))
    try:
        existing = parse_pod_claims(text) if isinstance(text, str) else None
    except InvalidObject as exc:
        return FieldError(exc.field, exc.message)
    if existing is None:
        return FieldError(_FIELD, "must be a string holding a YAML/JSON list")
    if any(e.name == ENTRY_NAME or e.extended is not None for e in existing):
        return FieldError(_FIELD, f"already has an entry named {ENTRY_NAME!r} or with "
                          "extendedResources, and the pod asks for extended resources too: "
                          "rename the entry, or leave the extended resources out")
    if len(existing) >= MAX_POD_CLAIMS:
        return FieldError(_FIELD, f"has {len(existing)} entries; the pod's extended resources "
                          f"need one more, and at most {MAX_POD_CLAIMS} are allowed")
    wanted = (*existing, PodClaim(ENTRY_NAME, containers=tuple(dict.fromkeys(
        r.container for r in requests)), extended=tuple(requests)))
    error = FieldError(_FIELD, "cannot add the extended-resources entry to it")
    for candidate in (_appended(text, entry), _rewritten(existing, entry)):
        try:
            if candidate is not None and parse_pod_claims(candidate) == wanted:
                return candidate
        except InvalidObject as exc:  # too large with the entry, most likely
            error = FieldError(exc.field, f"{exc.message} once the pod's extended-resources "
                               "entry is added")
    return error


def _appended(text: str, entry: dict[str, Any]) -> str | None:
    """``text`` with ``entry`` appended, keeping the user's layout: a flow/JSON list gets it
    before its closing bracket, a block list as a new ``- `` item."""
    body = text.rstrip()
    item = json.dumps(entry, separators=(",", ":"))
    if body.startswith("[") and body.endswith("]"):
        inner = body[1:-1].strip()
        return f"[{item}]" if not inner else f"{body[:-1].rstrip()},{item}]"
    if body.lstrip().startswith("-"):
        return f"{body}\n- {item}\n"
    return None


def _rewritten(existing: tuple[PodClaim, ...], entry: dict[str, Any]) -> str:
    def as_json(claim: PodClaim) -> dict[str, Any]:
        out: dict[str, Any] = {"name": claim.name}
        if claim.resource_claim_name is not None:
            out["resourceClaimName"] = claim.resource_claim_name
        if claim.resource_claim_template_name is not None:
            out["resourceClaimTemplateName"] = claim.resource_claim_template_name
        if claim.containers is not None:
            out["containers"] = list(claim.containers)
        if claim.request is not None:
            out["request"] = claim.request
        return out
    return json.dumps([*(as_json(c) for c in existing), entry], separators=(",", ":"))


def extended_claim(pod: Mapping[str, Any], entry: PodClaim) -> dict[str, Any]:
    """The claim the controller creates for the pod's ``extendedResources`` entry (before
    the server fills in the name): :func:`~kdra.kube.core.podclaims.generated_claim` of a
    template with the extended-resource-claim annotation and one ``exactly`` request
    (ExactCount) per item, sorted by name as upstream."""
    assert entry.extended is not None
    requests = sorted(entry.extended, key=lambda r: r.request)
    template = {"spec": {
        "metadata": {"annotations": {EXTENDED_CLAIM_ANNOTATION: "true"}},
        "spec": {"devices": {"requests": [
            {"name": r.request, "exactly": {"deviceClassName": r.device_class,
                                            "allocationMode": "ExactCount",
                                            "count": r.count}}
            for r in requests]}}}}
    return generated_claim(template, pod, entry)

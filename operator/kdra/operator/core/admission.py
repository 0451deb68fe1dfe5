"""Admission decisions for kdra's webhooks: pure functions from an AdmissionReview request to
an answer (allowed, denied with field-named errors, or a JSONPatch).

Two webhooks use this module (``kdra.operator.webhooks.server`` serves them over TLS); the checks of
kdra's own objects are in :mod:`kdra.operator.core.admission_objects`:

* **validating** (:func:`validate`): ResourceClaims, ResourceClaimTemplates and DeviceClasses
  (always in ``v1``: the API server converts v1alpha3 requests first; error paths are given
  back in the user's version) must parse with kdra's models (types, one-of rules, unique and
  known request names, upstream's limits), every CEL selector must compile (syntax,
  environment, cost, length), opaque parameters must fit in 10 KiB, a claim may not ask for
  more devices than one allocation can hold, and admin access needs the namespace label
  ``resource.kdra.dev/admin-access: "true"``; capacity requests must be non-negative
  quantities. Pods with the
  ``resource.kdra.dev/claims`` annotation must have a well-formed annotation whose
  ``containers`` name containers of the pod; in pods with the annotation or
  ``schedulerName: kdra-scheduler``, no container — regular, init or ephemeral — may set
  ``KDRA_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES`` other than as kdra does (kdra sets them from
  the allocation; a user's value would claim devices the pod was not given;
  :mod:`kdra.operator.core.admission_env`, which also warns about ``envFrom`` sources that could).
  On UPDATE, the annotation may not change once the pod's claims are resolved
  (claim-statuses recorded, or bound). kdra-owned annotations (``claim-statuses``,
  ``devices.resource.kdra.dev/*``, ``gpus.resource.kdra.dev/*``) may be created, changed or
  removed by kdra's own identities only (``trusted``: the operator's username, from the
  request's ``userInfo``).
* **mutating** (:func:`mutate_pod`): warns about claims kdra would not see
  (:mod:`kdra.operator.core.pod_notices`: ``spec.resourceClaims``, a mistyped kdra annotation
  key; also for pods it otherwise leaves alone, through a warn-only webhook); extended
  resources a DeviceClass serves become the
  pod's ``extended-resources`` claim entry (:mod:`kdra.operator.core.extended`); then a pod with
  claims gets ``schedulerName: kdra-scheduler``
  (when unset or ``default-scheduler``) and, in every container that consumes a claim, the env
  var ``KDRA_DEVICES`` — and ``NVIDIA_VISIBLE_DEVICES`` where a GPU can be involved — read
  through the downward API from the per-container annotations the binder writes before it
  binds the pod. A GPU can be involved unless every claim the container consumes is known to
  ask only for devices of DeviceClasses whose selectors pin another driver
  (:func:`class_may_select`; the webhook server looks the claims, templates and classes up, and
  anything it cannot find counts as "may be a GPU").

Invariants:
- Pure: no I/O, no clock. A request is a plain dict (``AdmissionReview.request``); the answer
  is an :class:`AdmissionResponse`, turned into the wire form by :meth:`~AdmissionResponse.
  to_review`. A malformed *review* (not a malformed object) raises InvalidObject: the server
  answers HTTP 400 and the API server applies the webhook's failure policy.
- Every denial names the field in ``kubectl explain`` notation
  (``spec.devices.requests[0].selectors[1].cel.expression: <compile error>``); all CEL
  errors of an object are reported at once, joined by ``; ``.
- The mutation never removes or rewrites what a user set — an env var already present in a
  container wins, and a non-default ``schedulerName`` is kept (with a warning) — except the
  extended resources a DeviceClass serves, which move from the containers' resources into
  the claims annotation (the user's entries kept). Applying the
  patch to its own output yields an empty patch (safe with ``reinvocationPolicy: IfNeeded``).
- Only what cannot be said in the CRD schemas lives here; the schemas keep enforcing the
  static rules even when the webhook is down.
- Updates are ratcheted: an update that leaves ``spec`` unchanged is always allowed, and CEL
  expressions the old object already had are not re-checked, so an object stored before a
  rule tightened never becomes impossible to edit. A pod update is checked only for what it
  changes of kdra's keys.
- Bounded: at most :data:`~kdra.kube.core.untrusted.MAX_REPORTED` errors per object (the rest
  counted), values in messages cut short; opaque parameters are measured without recursion
  (at most :data:`MAX_OPAQUE_PARAMETERS_DEPTH` levels, 10 KiB).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdra import GROUP
from kdra.dra.errors import InvalidObject
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    GPU_UUIDS_ENV,
    SCHEDULER_NAME,
    PodClaim,
    is_nri_tolerance,
    kdra_owned,
    pod_claims,
)
from kdra.kube.core.untrusted import MAX_REPORTED, shorten, too_deep
from kdra.operator.core.admission_env import (
    consuming_containers,
    device_env_errors,
    device_env_warnings,
    injected_env,
)
from kdra.operator.core.admission_objects import (
    ADMIN_ACCESS_LABEL,
    MAX_OPAQUE_PARAMETERS_BYTES,
    MAX_OPAQUE_PARAMETERS_DEPTH,
    MAX_SPEC_DEPTH,
    FieldError,
    admin_access_errors,
    admin_access_requested,
    claim_errors,
    claim_request_classes,
    class_errors,
    class_may_select,
    device_status_errors,
    template_errors,
    upstream_object_warnings,
    v1alpha3_paths,
)
from kdra.operator.core.extended import ENTRY_NAME as EXTENDED_ENTRY
from kdra.operator.core.extended import convert_pod, extended_names
from kdra.operator.core.pod_notices import pod_notices

__all__ = [
    "ADMIN_ACCESS_LABEL",
    "ADMISSION_API_VERSION",
    "DEFAULT_SCHEDULER",
    "MAX_OPAQUE_PARAMETERS_BYTES",
    "AdmissionResponse",
    "FieldError",
    "admin_access_errors",
    "admin_access_requested",
    "claim_errors",
    "claim_request_classes",
    "class_errors",
    "class_may_select",
    "consuming_containers",
    "injected_env",
    "mutate_pod",
    "pod_errors",
    "pod_patch",
    "pod_warnings",
    "review",
    "stolen_claims",
    "template_errors",
    "undecodable",
    "validate",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"
DEFAULT_SCHEDULER = "default-scheduler"
# The status the API server passes on to the client when the webhook denies a request.
DENIED_CODE = 422
DENIED_REASON = "Invalid"

_ANNOTATION_FIELD = f"metadata.annotations[{CLAIMS_ANNOTATION}]"

@dataclass(frozen=True)
class AdmissionResponse:
    """The decision about one request (``AdmissionReview.response`` without the envelope)."""

    uid: str
    errors: tuple[FieldError, ...] = ()
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    # The rejected object, for the status details (kubectl then prints
    # 'The ResourceClaim "x" is invalid: <field>: <message>', like a schema error).
    kind: str = ""
    name: str = ""
    group: str = ""

    @property
    def allowed(self) -> bool:
        return not self.errors

    @property
    def message(self) -> str:
        """All errors, ``field: message`` joined by ``; `` (empty when allowed)."""
        return "; ".join(str(error) for error in self.errors)

    def to_review(self) -> dict[str, Any]:
        """The full ``admission.k8s.io/v1`` AdmissionReview the API server expects back."""
        response: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if self.errors:
            response["status"] = {
                "status": "Failure",
                "code": DENIED_CODE,
                "reason": DENIED_REASON,
                "message": self.message,
                "details": {"causes": [
                    {"type": "FieldValueInvalid", "field": e.field, "message": e.message}
                    for e in self.errors
                ]},
            }
            target = {"group": self.group, "kind": self.kind, "name": self.name}
            response["status"]["details"].update({k: v for k, v in target.items() if v})
        elif self.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(
                json.dumps(list(self.patch), separators=(",", ":")).encode()
            ).decode()
        if self.warnings:
            response["warnings"] = list(self.warnings)
        return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview",
                "response": response}


Decide = Callable[[Mapping[str, Any]], AdmissionResponse]


def review(body: Any, decide: Decide) -> dict[str, Any]:
    """Unwrap an AdmissionReview, let ``decide`` answer its request, wrap the answer.

    Raises InvalidObject when ``body`` is not an ``admission.k8s.io/v1`` AdmissionReview with a
    request and a uid (the caller answers HTTP 400).
    """
    if not isinstance(body, Mapping):
        raise InvalidObject("<root>", "the body must be an AdmissionReview object")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != "AdmissionReview":
        raise InvalidObject("apiVersion", f"only {ADMISSION_API_VERSION} AdmissionReview is "
                            f"supported (got {body.get('apiVersion')!r} {body.get('kind')!r})")
    request = body.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str):
        raise InvalidObject("request.uid", "the AdmissionReview has no request uid")
    return decide(request).to_review()


def undecodable(uid: str, reason: str) -> AdmissionResponse:
    """The denial of a request whose object could not be decoded (``reason``: why)."""
    return AdmissionResponse(uid, (FieldError("<object>", "cannot be decoded: nested too "
                                              "deeply or malformed JSON "
                                              f"({shorten(reason, 100)})"),))


# --------------------------------------------------------------------------- dispatch


def validate(request: Mapping[str, Any],
             trusted: frozenset[str] = frozenset(),
             namespace_labels: Mapping[str, str] | None = None, *,
             flavour: Flavour = KDRA,
             foreign_claims: Mapping[str, tuple[str, str]] | None = None,
             own_namespace: str = "") -> AdmissionResponse:
    """The validating webhook: claims, templates, classes, pods with kdra's keys, and the
    device data drivers write into a claim's status.

    Kinds it does not know, and operations other than CREATE and UPDATE, are allowed.
    ``trusted``: usernames whose requests are kdra's own (they may write kdra-owned keys).
    ``namespace_labels`` are the labels of the object's namespace, read by the caller when
    :func:`admin_access_requested` (None: they could not be read). ``foreign_claims``: as
    for :func:`mutate_pod` — a pod being created that names (in the ``flavour``'s claims) a
    claim generated for another pod is denied (the native flavour checks it here: its pods
    may have no mutating webhook). ``own_namespace``: kdra's, the one namespace whose pods may
    carry the NRI tolerance (:func:`pod_errors`).
    """
    uid = str(request.get("uid", ""))
    kind = request.get("kind") or {}
    group, name = kind.get("group", ""), kind.get("kind", "")
    operation = request.get("operation")
    obj = request.get("object")
    if operation not in ("CREATE", "UPDATE") or not isinstance(obj, Mapping):
        return AdmissionResponse(uid)
    old = request.get("oldObject") if operation == "UPDATE" else None
    old = old if isinstance(old, Mapping) else None
    meta = obj.get("metadata") or {}
    target = {"kind": name, "group": group,
              "name": str(request.get("name") or meta.get("name") or meta.get("generateName")
                          or "")}
    if group == "" and name == "Pod":
        user = (request.get("userInfo") or {}).get("username")
        errors = pod_errors(obj, old, kdra_writer=isinstance(user, str) and user in trusted,
                            namespace=str(request.get("namespace") or meta.get("namespace")
                                          or ""), own_namespace=own_namespace)
        if operation == "CREATE" and foreign_claims:
            errors += stolen_claims(obj, flavour, foreign_claims)
        return AdmissionResponse(uid, _capped(errors),
                                 warnings=tuple(device_env_warnings(obj, old)[:MAX_REPORTED]),
                                 **target)
    if group != GROUP:  # the built-in kinds (native flavour): warnings only
        if group != flavour.group or request.get("subResource") or \
                (old is not None and old.get("spec") == obj.get("spec")):
            return AdmissionResponse(uid)
        return AdmissionResponse(uid, warnings=upstream_object_warnings(name, obj, old))
    if name == "ResourceClaim" and request.get("subResource") == "status":
        return AdmissionResponse(uid, _capped(device_status_errors(obj, old)), **target)
    if old is not None and old.get("spec") == obj.get("spec"):
        return AdmissionResponse(uid)  # metadata-only update: nothing to re-check
    checks: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any] | None],
                               list[FieldError]]] = {
        "ResourceClaim": claim_errors,
        "ResourceClaimTemplate": template_errors,
        "DeviceClass": class_errors,
    }
    check = checks.get(name)
    if check is None:
        return AdmissionResponse(uid, **target)
    if too_deep(obj.get("spec"), MAX_SPEC_DEPTH):
        return AdmissionResponse(uid, (FieldError("spec", f"nested deeper than {MAX_SPEC_DEPTH} "
                                                  "levels (opaque parameters may nest at most "
                                                  f"{MAX_OPAQUE_PARAMETERS_DEPTH})"),), **target)
    errors = check(obj, old)
    if name != "DeviceClass":
        errors += admin_access_errors(obj, namespace_labels)
    if (request.get("requestKind") or {}).get("version") == "v1alpha3":
        errors = v1alpha3_paths(errors)
    return AdmissionResponse(uid, _capped(errors), **target)


def _capped(errors: list[FieldError]) -> tuple[FieldError, ...]:
    """At most MAX_REPORTED errors; one more saying how many were left out."""
    if len(errors) <= MAX_REPORTED:
        return tuple(errors)
    rest = len(errors) - MAX_REPORTED
    return (*errors[:MAX_REPORTED],
            FieldError(errors[MAX_REPORTED].field, f"... and {rest} more error(s)"))


def mutate_pod(request: Mapping[str, Any], *,
               gpu_claims: Collection[str] | None = None,
               extended_classes: Mapping[str, str] | None = None,
               extended_error: str | None = None,
               extended_gpu_classes: Collection[str] | None = None,
               foreign_claims: Mapping[str, tuple[str, str]] | None = None,
               flavour: Flavour = KDRA) -> AdmissionResponse:
    """The mutating webhook for pods: extended resources, schedulerName and the device env
    vars, on CREATE (the native ``flavour``: schedulerName alone, for pods with
    ``spec.resourceClaims``: the kubelet gives containers their devices, and extended
    resources are upstream's there).

    ``gpu_claims``: the names of the pod's claim entries that may get GPUs (None: all of them;
    see :func:`pod_patch`). ``extended_classes``: extended resource name → DeviceClass
    (:func:`kdra.operator.core.extended.class_mapping`); the pod's served extended resources become
    its ``extended-resources`` entry first (:func:`kdra.operator.core.extended.convert_pod`).
    ``extended_error``: why the classes could not be read (the pod asks for extended
    resources, so it is denied, to be retried); ``extended_gpu_classes``: the classes that
    may select a GPU (None: any), for the generated entry's ``NVIDIA_VISIBLE_DEVICES``.
    ``foreign_claims``: entry name → (claim, pod) for entries naming (``resourceClaimName``) a
    claim generated for another pod, which serves only that pod (upstream's IsForPod): the
    pod is denied. A pod whose annotation does not parse is let through unchanged: the
    validating webhook rejects it with the precise reason.
    """
    uid = str(request.get("uid", ""))
    pod = request.get("object")
    if request.get("operation") != "CREATE" or not isinstance(pod, Mapping):
        return AdmissionResponse(uid)
    meta = pod.get("metadata") or {}
    name = str(meta.get("name") or meta.get("generateName") or "")
    if not flavour.device_annotations:
        try:
            claims = flavour.pod_claims(pod)
        except InvalidObject as exc:
            return AdmissionResponse(uid, (FieldError(exc.field, exc.message),), kind="Pod",
                                     name=name)
        stolen = stolen_claims(pod, flavour, foreign_claims or {})
        if stolen:
            return AdmissionResponse(uid, _capped(stolen), kind="Pod", name=name)
        return AdmissionResponse(uid, patch=tuple(_scheduler_patch(pod, claims)))
    notices = tuple(notice.message for notice in pod_notices(pod, flavour))  # as written
    if extended_error is not None and extended_names(pod):
        return AdmissionResponse(uid, (FieldError("spec", extended_error),), kind="Pod",
                                 name=name)
    converted = convert_pod(pod, extended_classes or {})
    if converted.errors:
        return AdmissionResponse(uid, _capped(list(converted.errors)), kind="Pod", name=name)
    if converted.pod is not None:
        pod = converted.pod
        if gpu_claims is not None and any(  # unknown classes: towards the variable
                extended_gpu_classes is None or r.device_class in extended_gpu_classes
                for r in converted.requests):
            gpu_claims = {*gpu_claims, EXTENDED_ENTRY}
    try:
        claims = pod_claims(pod)
    except InvalidObject:
        return AdmissionResponse(uid, patch=converted.patch, warnings=notices)
    stolen = stolen_claims(pod, flavour, foreign_claims or {}, claims)
    if stolen:
        return AdmissionResponse(uid, _capped(stolen), kind="Pod", name=name)
    patch = (*converted.patch, *pod_patch(pod, claims, gpu_claims=gpu_claims))
    return AdmissionResponse(uid, patch=patch,
                             warnings=(*pod_warnings(pod, claims), *notices))


# --------------------------------------------------------------------------- pods


def stolen_claims(pod: Mapping[str, Any], flavour: Flavour,
                  foreign: Mapping[str, tuple[str, str]],
                  claims: Sequence[PodClaim] | None = None) -> list[FieldError]:
    """The entries of a pod being created that name (``resourceClaimName``) a claim generated
    for another pod — ``foreign``: entry name → (claim, its pod) — which serves only that pod
    (upstream's IsForPod). ``claims``: the pod's, already parsed (else parsed here; a pod
    whose claims do not parse has none to steal)."""
    if not foreign:
        return []
    if claims is None:
        try:
            claims = flavour.pod_claims(pod)
        except InvalidObject:
            return []
    return [FieldError(f"{flavour.claims_field}[{i}].resourceClaimName",
                       f"claim {claim_name!r} was generated for pod {owner!r} and serves "
                       "only that pod; name a claim of this pod's own, or a "
                       "resourceClaimTemplateName")
            for i, entry in enumerate(claims)
            for claim_name, owner in [foreign.get(entry.name, ("", ""))]
            if claim_name and entry.resource_claim_name == claim_name]


def _scheduler_patch(pod: Mapping[str, Any], claims: Sequence[PodClaim]) -> list[dict[str, Any]]:
    """``schedulerName: kdra-scheduler`` for a pod with claims that asks for no scheduler of
    its own (unset or ``default-scheduler``)."""
    if not claims:
        return []
    scheduler = (pod.get("spec") or {}).get("schedulerName")
    if not scheduler:
        return [{"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER_NAME}]
    if scheduler == DEFAULT_SCHEDULER:
        return [{"op": "replace", "path": "/spec/schedulerName", "value": SCHEDULER_NAME}]
    return []


def pod_errors(pod: Mapping[str, Any], old: Mapping[str, Any] | None = None, *,
               kdra_writer: bool = False, namespace: str = "",
               own_namespace: str = "") -> list[FieldError]:
    """Why a pod's creation (``old`` None) or update must be rejected (empty: it is fine).

    ``kdra_writer``: the request is kdra's own, which may write kdra-owned keys.
    ``namespace``: the pod's; outside ``own_namespace`` (kdra's; empty: not known, nothing
    is checked) the NRI tolerance may not be written (:func:`_tolerance_errors`)."""
    errors = [] if kdra_writer else _owned_key_errors(pod, old)
    if own_namespace and namespace != own_namespace:
        errors += _tolerance_errors(pod, old)
    errors += _claims_annotation_errors(pod, old)
    errors += device_env_errors(pod, old)
    return errors


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def _owned_key_errors(pod: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    now = kdra_owned(_annotations(pod))
    before = kdra_owned(_annotations(old))
    changed = sorted(k for k in now.keys() | before.keys() if now.get(k) != before.get(k))
    what = ("is written by kdra only: remove it from the pod (or the template it comes from)"
            if old is None else "is written by kdra only: it cannot be added, changed or "
                                "removed")
    return [FieldError(f"metadata.annotations[{shorten(key, 100)}]", what) for key in changed]


def _tolerance_errors(pod: Mapping[str, Any],
                      old: Mapping[str, Any] | None) -> list[FieldError]:
    """The NRI tolerance (``tolerate-missing-plugins.kdra.dev``, and NRI's per-container and
    per-pod forms) added or changed: with containerd's NRI validator requiring kdra, it is
    what lets a container start while kdra's plugin is away — without its devices' isolation
    (an image's ``NVIDIA_VISIBLE_DEVICES=all`` would stand). Only kdra's own pods, in kdra's
    namespace (or ``kube-system``, which the webhook does not see), may carry it. A key an
    old pod already had is left alone, so such a pod can still be changed."""
    now, before = _annotations(pod), _annotations(old)
    keys = sorted(k for k in now if isinstance(k, str) and is_nri_tolerance(k)
                  and (k not in before or before.get(k) != now.get(k)))
    return [FieldError(f"metadata.annotations[{shorten(key, 100)}]",
                       "lets the pod's containers start without kdra's NRI plugin (no device "
                       "isolation while it is away): only kdra's own pods, in its namespace, "
                       "may carry it; remove it")
            for key in keys]


def _resolved(pod: Mapping[str, Any]) -> bool:
    """The pod's claims are resolved: kdra recorded their names, or the pod is bound."""
    spec = pod.get("spec")
    return (CLAIM_STATUSES_ANNOTATION in _annotations(pod)
            or bool(isinstance(spec, Mapping) and spec.get("nodeName")))


def _claims_annotation_errors(pod: Mapping[str, Any],
                              old: Mapping[str, Any] | None) -> list[FieldError]:
    text = _annotations(pod).get(CLAIMS_ANNOTATION)
    if old is not None:
        if text == _annotations(old).get(CLAIMS_ANNOTATION):
            return []
        if _resolved(old):
            return [FieldError(_ANNOTATION_FIELD, "cannot be changed once the pod's claims are "
                               "resolved (claim-statuses recorded or the pod bound); delete "
                               "the pod and create it again")]
    if text is None:
        return []
    try:
        claims = pod_claims(pod)
    except InvalidObject as exc:
        return [FieldError(exc.field, exc.message)]
    containers = _names(pod, "containers")
    init_containers = _names(pod, "initContainers")
    errors: list[FieldError] = []
    for index, claim in enumerate(claims):
        for k, name in enumerate(claim.containers or ()):
            if name not in containers and name not in init_containers:
                listing = f"containers: {_listing(containers)}"
                if init_containers:
                    listing += f"; init containers: {_listing(init_containers)}"
                errors.append(FieldError(
                    f"{_ANNOTATION_FIELD}[{index}].containers[{k}]",
                    f"the pod has no container named {name!r} ({listing})"))
    return errors


def _listing(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(shorten(n, 63) for n in names[:limit]) or "none"
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def pod_patch(pod: Mapping[str, Any],
              claims: Sequence[PodClaim] | None = None, *,
              gpu_claims: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The JSONPatch that prepares a pod for kdra (empty when it needs nothing).

    ``claims`` defaults to the pod's parsed annotation (raising InvalidObject when it is bad).
    A pod whose annotation lists no claims needs nothing. ``NVIDIA_VISIBLE_DEVICES`` goes only
    into containers that consume an entry named in ``gpu_claims`` (None: every entry may get
    GPUs), so a pod of cats gets no GPU variable (not even an empty one).
    """
    claims = pod_claims(pod) if claims is None else claims
    if not claims:
        return []
    spec = pod.get("spec") or {}
    ops = _scheduler_patch(pod, claims)
    consumers = consuming_containers(pod, claims)
    gpu_consumers = consumers if gpu_claims is None else consuming_containers(
        pod, [claim for claim in claims if claim.name in gpu_claims])
    for key in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(key) or ()):
            name = container.get("name")
            if name not in consumers:
                continue
            env = container.get("env")
            present = {e.get("name") for e in env or () if isinstance(e, Mapping)}
            if name not in gpu_consumers:
                present.add(GPU_UUIDS_ENV)
            wanted = [e for e in injected_env(name) if e["name"] not in present]
            if not wanted:
                continue
            if env is None:
                ops.append({"op": "add", "path": f"/spec/{key}/{index}/env", "value": wanted})
            else:
                ops.extend({"op": "add", "path": f"/spec/{key}/{index}/env/-", "value": e}
                           for e in wanted)
    return ops


def pod_warnings(pod: Mapping[str, Any], claims: Sequence[PodClaim]) -> list[str]:
    """What the user should know about a pod that is admitted anyway."""
    scheduler = (pod.get("spec") or {}).get("schedulerName")
    if claims and scheduler and scheduler not in (SCHEDULER_NAME, DEFAULT_SCHEDULER):
        return [f"spec.schedulerName is {scheduler!r}: kdra allocates devices only for pods "
                f"scheduled by {SCHEDULER_NAME!r}, so this pod's claims stay unallocated"]
    return []


def _names(pod: Mapping[str, Any], key: str) -> list[str]:
    return [str(c.get("name")) for c in (pod.get("spec") or {}).get(key) or ()
            if isinstance(c, Mapping)]

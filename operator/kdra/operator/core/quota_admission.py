"""The early DeviceQuota check at admission: a ResourceClaim that alone exceeds a DeviceQuota of
its namespace could never be allocated there, so the validating webhook refuses it when it is
created, with the message the binder would give (:func:`kdra.dra.quota.early_denials`).

Only what is sure from the claim alone is decided here: ExactCount requests' devices (and a
``firstAvailable`` request's smallest alternative when all its alternatives are of one class).
Capacity and counters depend on the devices the allocator picks, and usage changes: the binder
checks those at allocation time.

A claim generated from a template (it carries ``resource.kdra.dev/pod-claim-name``) is not
refused here: the claim controller would report the refusal on the pod and wait for a change of
the template, so a quota raised later would not help the pod. Admitted, it is held back by the
binder with the same numbers and retried when the quota changes. (A user who puts the
annotation on a claim of their own only skips this early check, not the binder's.)

Invariants:
- Total: a claim or quota that cannot be parsed adds no error here (the claim's own checks,
  or the quota's status, say what is wrong with it).
- Runs only after the other checks allowed the object: a denial names the quota problem alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from kdra import GROUP
from kdra.dra.errors import InvalidObject
from kdra.dra.models import parse_claim
from kdra.dra.quota import DeviceQuota, early_denials, parse_quota
from kdra.kube.core.podclaims import POD_CLAIM_NAME_ANNOTATION
from kdra.operator.core.admission import AdmissionResponse, Decide
from kdra.operator.core.admission_objects import FieldError


def quota_namespace(body: Any) -> str | None:
    """The namespace whose DeviceQuotas the AdmissionReview ``body`` needs (a ResourceClaim
    being created), else None."""
    request = body.get("request") if isinstance(body, Mapping) else None
    if not isinstance(request, Mapping) or request.get("operation") != "CREATE":
        return None
    kind = request.get("kind")
    if not isinstance(kind, Mapping) or (kind.get("group"), kind.get("kind")) != (
            GROUP, "ResourceClaim"):
        return None
    if _generated(request.get("object")):
        return None  # the binder decides (module doc): no need to read the quotas
    namespace = request.get("namespace")
    return namespace if isinstance(namespace, str) and namespace else None


def _generated(obj: Any) -> bool:
    """Whether the object is a claim the claim controller generated from a template."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return isinstance(annotations, Mapping) and POD_CLAIM_NAME_ANNOTATION in annotations


def quota_errors(request: Mapping[str, Any], quotas: Iterable[Mapping[str, Any]]
                 ) -> list[FieldError]:
    """The DeviceQuotas (raw objects) the claim being created exceeds on its own."""
    obj = request.get("object")
    if not isinstance(obj, Mapping) or _generated(obj):
        return []  # generated from a template: the binder decides (module doc)
    try:
        claim = parse_claim(obj)
    except InvalidObject:
        return []
    parsed: list[DeviceQuota] = []
    for quota in quotas:
        try:
            parsed.append(parse_quota(quota))
        except InvalidObject:
            continue
    return [FieldError("spec.devices.requests", denial.message)
            for denial in early_denials(claim, parsed)]


def with_quotas(decide: Decide, quotas: Iterable[Mapping[str, Any]]) -> Decide:
    """``decide``, then the quota check for what it allowed."""
    quotas = list(quotas)

    def decide_with_quotas(request: Mapping[str, Any]) -> AdmissionResponse:
        response = decide(request)
        if not response.allowed or not quotas:
            return response
        errors = quota_errors(request, quotas)
        return dataclasses.replace(response, errors=tuple(errors)) if errors else response

    return decide_with_quotas


__all__ = ["quota_errors", "quota_namespace", "with_quotas"]

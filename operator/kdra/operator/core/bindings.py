"""Which pods kdra's operator may bind and evict: the decisions of the webhook
``validate-bindings``.

RBAC lets the operator create ``pods/binding`` and ``pods/eviction`` for any pod (a Role
cannot say "only pods with schedulerName kdra-scheduler" or "only pods that hold kdra's
devices"), and a ValidatingAdmissionPolicy on those subresources sees the Binding or the
Eviction, not the pod. So the validating webhook receives the operator's own bindings and
evictions (its ``matchConditions`` select the kdra-operator service account; nobody else's are
sent), the server reads the pod, and :func:`binding_decision` answers: a stolen operator token
cannot place kube-system's or anyone's pods on a node of its choosing, nor evict any pod but
those kdra itself evicts — the pods that ask for claims (the flavour's: the annotation
``resource.kdra.dev/claims``, or ``spec.resourceClaims``), whose devices taint eviction and
preemption take back.

The limit, written down: such a pod may be evicted whatever its namespace or owner, as
preemption and taint eviction may; a pod's claims annotation is fixed once its claims are
resolved (validate-pods), so a pod cannot be made evictable after it is bound.

Invariants:
- Pure: the caller passes the pod as read from the API server (None: it does not exist).
- Bindings: allowed for a pod with ``schedulerName: kdra-scheduler``, and a pod that does not
  exist (the API server refuses that binding itself); denied for any other pod, naming its
  scheduler.
- Evictions: allowed for a pod with claims (the flavour's), and a pod that does not exist;
  denied for any other pod, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import SCHEDULER_NAME
from kdra.operator.core.admission import AdmissionResponse, FieldError

__all__ = ["binding_decision", "is_binding", "is_eviction"]


def is_binding(request: Mapping[str, Any]) -> bool:
    """Whether an AdmissionReview request is the creation of a pod's Binding."""
    kind = request.get("kind") or {}
    return (isinstance(kind, Mapping) and kind.get("group", "") == ""
            and kind.get("kind") == "Binding" and request.get("subResource") == "binding")


def is_eviction(request: Mapping[str, Any]) -> bool:
    """Whether an AdmissionReview request is the creation of a pod's Eviction."""
    kind = request.get("kind") or {}
    return (isinstance(kind, Mapping) and kind.get("group") == "policy"
            and kind.get("kind") == "Eviction" and request.get("subResource") == "eviction")


def binding_decision(request: Mapping[str, Any], pod: Mapping[str, Any] | None,
                     flavour: Flavour = KDRA) -> AdmissionResponse:
    """The answer to the operator's Binding or Eviction of ``pod`` (which asks for claims as
    the ``flavour`` has them)."""
    uid = str(request.get("uid", ""))
    if pod is None:
        return AdmissionResponse(uid)
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    pod_name = str(meta.get("name", ""))
    if is_eviction(request):
        if flavour.has_claims(pod):
            return AdmissionResponse(uid)
        source = flavour.claims_field.removeprefix("metadata.annotations[").removesuffix("]")
        return AdmissionResponse(uid, (FieldError(
            flavour.claims_field, "kdra's operator evicts only pods that ask for claims "
            f"({source}), not pod {name}"),), kind="Pod", name=pod_name)
    spec = pod.get("spec")
    scheduler = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    if scheduler == SCHEDULER_NAME:
        return AdmissionResponse(uid)
    return AdmissionResponse(uid, (FieldError(
        "spec.schedulerName",
        f"kdra's operator binds only pods with schedulerName {SCHEDULER_NAME}; pod {name} "
        f"has {scheduler or 'default-scheduler'!r}"),), kind="Pod", name=pod_name)

"""Which pods kdra's operator may bind: the decision of the webhook ``validate-bindings``.

RBAC lets the operator create ``pods/binding`` for any pod (a Role cannot say "only pods with
schedulerName kdra-scheduler"), and a ValidatingAdmissionPolicy on ``pods/binding`` sees the
Binding, not the pod. So the validating webhook receives the operator's own bindings (its
``matchConditions`` select the kdra-operator service account; nobody else's bindings are
sent), the server reads the pod, and :func:`binding_decision` answers: a stolen operator token
cannot place kube-system's or anyone's pods on a node of its choosing.

Invariants:
- Pure: the caller passes the pod as read from the API server (None: it does not exist).
- Allowed: a pod with ``schedulerName: kdra-scheduler``, and a pod that does not exist (the
  API server refuses that binding itself). Denied: any other pod, naming its scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdra.domain.admission import AdmissionResponse, FieldError
from kdra.domain.podclaims import SCHEDULER_NAME

__all__ = ["binding_decision", "is_binding"]


def is_binding(request: Mapping[str, Any]) -> bool:
    """Whether an AdmissionReview request is the creation of a pod's Binding."""
    kind = request.get("kind") or {}
    return (isinstance(kind, Mapping) and kind.get("group", "") == ""
            and kind.get("kind") == "Binding" and request.get("subResource") == "binding")


def binding_decision(request: Mapping[str, Any], pod: Mapping[str, Any] | None
                     ) -> AdmissionResponse:
    uid = str(request.get("uid", ""))
    if pod is None:
        return AdmissionResponse(uid)
    spec = pod.get("spec")
    scheduler = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    if scheduler == SCHEDULER_NAME:
        return AdmissionResponse(uid)
    meta = pod.get("metadata") or {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    return AdmissionResponse(uid, (FieldError(
        "spec.schedulerName",
        f"kdra's operator binds only pods with schedulerName {SCHEDULER_NAME}; pod {name} "
        f"has {scheduler or 'default-scheduler'!r}"),), kind="Pod", name=str(meta.get("name", "")))

"""Shared builders for the admission tests (test_admission_claims, test_admission_pods).

``request_for`` wraps any object in the AdmissionRequest the API server would send for it
(uid ``u-1``); ``API`` is the kdra group-version the builders write.
"""

from __future__ import annotations

from typing import Any

API = "resource.kdra.dev/v1"


def request_for(obj: dict[str, Any], operation: str = "CREATE",
                old: dict[str, Any] | None = None) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    return {"uid": "u-1", "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "operation": operation, "name": obj["metadata"].get("name", ""),
            "namespace": obj["metadata"].get("namespace"), "object": obj, "oldObject": old}

"""Reading API objects that may be malformed: a missing or mistyped part reads as empty, so a
check over objects someone else wrote never raises on them (``kdra check``'s rules, the
cluster's and a node agent's).

Invariant: pure and total over any JSON value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JSON = Mapping[str, Any]


def metadata(obj: JSON) -> JSON:
    """``metadata``, or empty."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def object_name(obj: JSON) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object."""
    meta = metadata(obj)
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def allocation_results(claim: JSON) -> list[JSON]:
    """The results of a claim's ``status.allocation``, the malformed ones left out."""
    status = claim.get("status")
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    return [r for r in results or () if isinstance(r, Mapping)]

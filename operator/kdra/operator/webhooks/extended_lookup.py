"""Which DeviceClass serves each extended resource name, for the mutating webhook
(:mod:`kdra.operator.core.extended`): read when a pod being created asks for an extended resource.

Invariants:
- Only pods that ask for an extended resource (limits or requests, any container) cost a
  request: one LIST of DeviceClasses (a handful of objects), within ``TIMEOUT`` seconds.
- Fresh for every such pod (nothing cached across pods): a class created just before its pods
  serves them, on every replica (standbys serve the webhook too).
- Fails closed with a reason: classes that cannot be read give an error text, and the webhook
  denies the pod naming it (a ReplicaSet retries); a pod must not reach the default scheduler
  still asking for a resource kdra serves, where it would wait forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kdra.kube.client import KubeClient
from kdra.kube.errors import ApiError
from kdra.kube.resources import CLASSES
from kdra.operator.core.admission import class_may_select
from kdra.operator.core.extended import class_mapping, extended_names

TIMEOUT = 2.0
"""Seconds for the LIST, well inside the webhook's own 5 s (the GPU lookup runs alongside)."""


@dataclass(frozen=True)
class ExtendedClasses:
    """The mapping (None: the pod asks for no extended resource, nothing was read), or why
    it could not be read."""

    mapping: dict[str, str] | None = None
    error: str | None = None
    gpu_classes: frozenset[str] | None = None
    """The classes whose selectors may select a GPU (None: unknown, any may)."""


async def extended_classes(client: KubeClient, body: Any) -> ExtendedClasses:
    """The extended resource name → class mapping for the AdmissionReview's pod."""
    request = body.get("request") if isinstance(body, Mapping) else None
    if not isinstance(request, Mapping) or request.get("operation") != "CREATE":
        return ExtendedClasses()
    pod = request.get("object")
    names = extended_names(pod) if isinstance(pod, Mapping) else None
    if not names:
        return ExtendedClasses()
    try:
        async with asyncio.timeout(TIMEOUT):
            classes = await client.list(CLASSES)
    except (ApiError, OSError, ValueError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        return ExtendedClasses(error=f"kdra cannot read DeviceClasses to tell which extended "
                               f"resources it serves ({reason[:200]}); create the pod again "
                               "(a ReplicaSet retries by itself)")
    mapping = class_mapping(classes)
    wanted = {mapping[name] for name in names if name in mapping}  # the pod's classes only
    return ExtendedClasses(mapping=mapping, gpu_classes=frozenset(
        name for c in classes if isinstance(c, Mapping) and isinstance(c.get("metadata"), Mapping)
        and (name := str(c["metadata"].get("name"))) in wanted and class_may_select(c)))

"""The device annotations of a bound pod: per container, the devices its claims hold and
the UUIDs of its GPUs — what the env the mutating webhook injected reads (the binder writes
them with the binding; the validating webhook keeps anyone else from writing them).

Invariants: pure; a pod claim applies to the containers it lists (default: every regular
container) and, with ``request`` set, only to that request's devices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kdra.kube.core.podclaims import (
    DEVICES_ANNOTATION_PREFIX,
    GPU_DRIVER,
    GPU_UUIDS_ANNOTATION_PREFIX,
    PodClaim,
)

JSON = Mapping[str, Any]


def container_devices(
    pod: JSON,
    pod_claims: Sequence[PodClaim],
    results: Mapping[str, Sequence[tuple[str, str, str, str]]],
    uuids: Mapping[tuple[str, str, str], str],
) -> dict[str, str]:
    """The per-container allocation annotations the injected env vars read.

    ``results[pod_claim_name]`` lists ``(request, driver, pool, device)`` of that claim's
    allocation; ``uuids`` maps GPU devices to their ``uuid`` attribute. A pod claim applies
    to the containers it lists (default: all regular containers) and, with ``request`` set,
    only that request's devices. Returns annotation key → value.
    """
    spec = pod.get("spec", {})
    regular = [c["name"] for c in spec.get("containers") or []]
    every = regular + [c["name"] for c in spec.get("initContainers") or []]
    devices: dict[str, list[str]] = {}
    gpus: dict[str, list[str]] = {}
    for claim in pod_claims:
        targets = [c for c in (claim.containers or regular) if c in every]
        for request, driver, pool, device in results.get(claim.name, ()):
            for container in (c for c in targets if claim.shows(c, request)):
                devices.setdefault(container, []).append(f"{driver}/{pool}/{device}")
                uuid = uuids.get((driver, pool, device))
                if driver == GPU_DRIVER and uuid:
                    gpus.setdefault(container, []).append(uuid)
    annotations = {DEVICES_ANNOTATION_PREFIX + c: ",".join(v) for c, v in devices.items()}
    annotations.update({GPU_UUIDS_ANNOTATION_PREFIX + c: ",".join(v) for c, v in gpus.items()})
    return annotations

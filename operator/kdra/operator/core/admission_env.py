"""The device variables of a pod's containers: only kdra sets ``KDRA_DEVICES`` and
``NVIDIA_VISIBLE_DEVICES``.

The NVIDIA container runtime gives a container the GPUs its ``NVIDIA_VISIBLE_DEVICES``
names (``all``: every GPU of the node), whatever scheduler placed the pod; kdra's mutating
webhook sets the variable, in the containers that use a pod's claims, to the GPUs allocated to
them (a downward-API read of the annotation the binder writes, :func:`injected_env`). So in
the pods kdra serves — those with the claims annotation, and those whose ``schedulerName`` is
kdra-scheduler (kdra binds them to its GPU nodes, claims or not) — the variables come from
kdra only:

- a container that uses a claim (:func:`consuming_containers`) may hold kdra's entry and no
  other value for them;
- any other container — a regular one the claims do not name (a sidecar), an init container,
  an ephemeral container (``kubectl debug``) — may set them only to a value that grants
  nothing: empty, ``void`` or ``none`` (:data:`NOTHING`).

:func:`device_env_errors` says which entries break that (the validating webhook denies the pod;
the binder refuses to bind one stored anyway). ``envFrom`` cannot be judged at admission: the
ConfigMap or Secret it reads may not exist yet and may change after the pod is admitted (and a
webhook reading every Secret a pod names would need the right to read them all). So an
``envFrom`` without a prefix that keeps it clear of the two names gets a warning
(:func:`device_env_warnings`); ``kdra check`` reads the sources of bound pods and names any that
sets them (``forged-env``, :mod:`kdra.cli.core.forged`); with NRI the node agent removes both
variables from whatever a container gets and sets them to the container's own devices
(:mod:`kdra.agent.core.exposure`). In a container that uses a claim, kdra's ``env`` entry wins over
any ``envFrom`` (Kubernetes: ``env`` takes precedence), so only other containers are at risk.

Invariants:
- Pure and total: any pod dict gives a list (malformed containers and entries are skipped).
- Errors name the field (``spec.initContainers[0].env[2]``); values are never echoed.
- On an update only containers the update adds are checked (ephemeral containers are the only
  ones an update can add; the others' env is immutable): an old pod never becomes impossible
  to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kdra.dra.errors import InvalidObject
from kdra.kube.core.podclaims import (
    CLAIMS_ANNOTATION,
    DEVICE_ENVS,
    DEVICES_ANNOTATION_PREFIX,
    DEVICES_ENV,
    GPU_UUIDS_ANNOTATION_PREFIX,
    GPU_UUIDS_ENV,
    SCHEDULER_NAME,
    PodClaim,
    pod_claims,
)
from kdra.operator.core.admission_objects import FieldError

__all__ = ["CONTAINER_KINDS", "NOTHING", "consuming_containers", "device_env_errors",
           "device_env_warnings", "grants_nothing", "injected_env", "is_kdra_entry",
           "kdra_pod"]

CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")
NOTHING = frozenset({"", "void", "none"})
"""Values of the device variables that grant no device (the NVIDIA runtime: ``void`` or empty
— no GPU; ``none`` — no GPU, the driver's libraries only)."""


def kdra_pod(pod: Mapping[str, Any]) -> bool:
    """A pod kdra serves: it has the claims annotation or asks for kdra-scheduler."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    spec = pod.get("spec")
    return bool((isinstance(annotations, Mapping) and CLAIMS_ANNOTATION in annotations)
                or (isinstance(spec, Mapping) and spec.get("schedulerName") == SCHEDULER_NAME))


def consuming_containers(pod: Mapping[str, Any], claims: Sequence[PodClaim]) -> frozenset[str]:
    """Names of the containers that see a claim's devices: each entry's ``containers``, or
    every (regular) container when an entry has none. Init containers only when listed."""
    everyone = _names(pod, "containers")
    names: set[str] = set()
    for claim in claims:
        names.update(claim.containers if claim.containers is not None else everyone)
    return frozenset(names)


def injected_env(container: str) -> tuple[dict[str, Any], ...]:
    """The env vars a consuming container gets: downward-API reads of the allocation
    summaries the binder writes on the pod (empty strings until it has)."""
    return tuple(
        {"name": env, "valueFrom": {"fieldRef": {
            "apiVersion": "v1", "fieldPath": f"metadata.annotations['{prefix}{container}']"}}}
        for env, prefix in ((DEVICES_ENV, DEVICES_ANNOTATION_PREFIX),
                            (GPU_UUIDS_ENV, GPU_UUIDS_ANNOTATION_PREFIX))
    )


def is_kdra_entry(env: Mapping[str, Any], container: str) -> bool:
    """``env`` is the entry kdra injects into ``container`` (the API server may have filled
    in defaults)."""
    ours = {e["name"]: e for e in injected_env(container)}.get(env.get("name"))
    if ours is None or "value" in env:
        return False
    value_from = env.get("valueFrom")
    ref = value_from.get("fieldRef") if isinstance(value_from, Mapping) else None
    return bool(isinstance(ref, Mapping)
                and ref.get("fieldPath") == ours["valueFrom"]["fieldRef"]["fieldPath"]
                and ref.get("apiVersion", "v1") == "v1")


def grants_nothing(env: Mapping[str, Any]) -> bool:
    """A literal value that grants no device (a ``valueFrom`` may say anything)."""
    value = env.get("value", "")
    return "valueFrom" not in env and isinstance(value, str) and value.strip() in NOTHING


def device_env_errors(pod: Mapping[str, Any],
                      old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """The device-variable entries of a kdra pod's containers that kdra did not set (see the
    module doc); empty for other pods. ``old``: on an update, only containers it lacks."""
    if not kdra_pod(pod):
        return []
    try:
        claims = pod_claims(pod)
    except InvalidObject:
        return []  # the annotation's own error is reported
    consumers = consuming_containers(pod, claims)
    before = {(kind, name) for kind in CONTAINER_KINDS for name in _names(old, kind)} \
        if old is not None else set()
    errors: list[FieldError] = []
    for kind, i, container in _containers(pod):
        name = str(container.get("name"))
        if (kind, name) in before:
            continue
        consumer = kind != "ephemeralContainers" and name in consumers
        for j, env in enumerate(container.get("env") or ()):
            variable = env.get("name") if isinstance(env, Mapping) else None
            if not isinstance(env, Mapping) or variable not in DEVICE_ENVS:
                continue
            if consumer and not is_kdra_entry(env, name):
                errors.append(FieldError(
                    f"spec.{kind}[{i}].env[{j}]",
                    f"{variable} is set by kdra in containers that use the pod's claims (to "
                    "the devices allocated to them); remove it"))
            elif not consumer and not grants_nothing(env):
                errors.append(FieldError(
                    f"spec.{kind}[{i}].env[{j}]",
                    f"{variable} is set by kdra only, in containers that use the pod's claims; "
                    f"this one uses none (list it in the claims annotation's containers to give "
                    f"it devices, or remove the variable; {_nothing()} are allowed)"))
    return errors


def device_env_warnings(pod: Mapping[str, Any],
                        old: Mapping[str, Any] | None = None) -> list[str]:
    """``envFrom`` sources of a kdra pod's containers that could set a device variable (no
    prefix, or one that starts one of the names) in a container kdra's entry does not cover."""
    if not kdra_pod(pod):
        return []
    try:
        consumers = consuming_containers(pod, pod_claims(pod))
    except InvalidObject:
        return []
    before = {(kind, name) for kind in CONTAINER_KINDS for name in _names(old, kind)} \
        if old is not None else set()
    warnings = []
    for kind, i, container in _containers(pod):
        name = str(container.get("name"))
        if (kind, name) in before or (kind != "ephemeralContainers" and name in consumers):
            continue
        for j, source in enumerate(container.get("envFrom") or ()):
            prefix = source.get("prefix", "") if isinstance(source, Mapping) else ""
            if isinstance(prefix, str) and any(v.startswith(prefix) for v in DEVICE_ENVS):
                warnings.append(
                    f"spec.{kind}[{i}].envFrom[{j}]: if its ConfigMap or Secret sets "
                    f"{' or '.join(DEVICE_ENVS)}, the container gets devices kdra did not "
                    "allocate; kdra check reports it (forged-env), and with NRI the node "
                    "agent removes the variables")
    return warnings


def _nothing() -> str:
    return ", ".join(repr(v) for v in sorted(NOTHING))


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return []
    out = []
    for kind in CONTAINER_KINDS:
        items = spec.get(kind)
        for i, container in enumerate(items if isinstance(items, list) else ()):
            if isinstance(container, Mapping):
                out.append((kind, i, container))
    return out


def _names(pod: Mapping[str, Any] | None, key: str) -> list[str]:
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    items = spec.get(key) if isinstance(spec, Mapping) else None
    return [str(c.get("name")) for c in (items if isinstance(items, list) else ())
            if isinstance(c, Mapping)]

"""Pods and their claims in the native flavour: what upstream's API says — the claims in
``spec.resourceClaims`` (and which container sees which in ``containers[].resources.claims``),
their names in ``status.resourceClaimStatuses``, upstream's generated-claim annotation and
finalizer (:mod:`kdra.kube.core.flavours` puts this beside the kdra flavour's
:mod:`kdra.kube.core.podclaims`).

The API server validates a pod's spec (names, the one-of rule, containers naming entries that
exist), but kdra reads pods from watches it does not control the version of, and an object
from another API server version may carry what this one would refuse: the parsing here is
total all the same.

Invariants:
- :func:`pod_claims` gives the same :class:`~kdra.kube.core.podclaims.PodClaim` entries the
  claims annotation gives in the kdra flavour, or raises InvalidObject naming the field —
  never another exception, whatever the pod holds; names are checked as DNS labels /
  subdomains before they are returned, so they are safe as URL path segments.
- An entry's ``containers`` are exactly the containers (init containers included) that name it
  in ``resources.claims`` — possibly none, unlike the annotation's default of every container;
  its ``request`` is the one request they all name, else None (which request a container sees
  is the kubelet's business in this flavour).
- :func:`claim_statuses` ignores malformed entries (kdra never reads a name it cannot trust as
  a path segment); :func:`statuses_patch` writes the whole list (a JSON merge patch replaces a
  list) with the pod's resourceVersion as its precondition.
- Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kdra.dra.errors import InvalidObject
from kdra.kube.core.podclaims import (
    PodClaim,
    check_name,
    check_reference,
    is_dns_label,
    is_object_name,
)

__all__ = ["FINALIZER", "GROUP", "MAX_ENTRIES", "POD_CLAIM_NAME_ANNOTATION", "claim_statuses",
           "has_claims", "pod_claims", "statuses_patch"]

GROUP = "resource.k8s.io"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""Upstream's marker of a claim generated from a template for a pod (the pod's entry name)."""
FINALIZER = "resource.kubernetes.io/delete-protection"
"""Upstream's finalizer on an allocated claim ("reserved for use by Kubernetes")."""
CLAIM_CONTROLLER_ACCOUNT = ("kube-system", "resource-claim-controller")
"""kube-controller-manager's ServiceAccount for its resourceclaim-controller (namespace, name):
it exists where that controller runs with its own credentials (kdra.operator.claim_owner)."""
MAX_ENTRIES = 128
"""Entries of ``spec.resourceClaims`` (and of a container's ``resources.claims``) read at
most: a bound on work per pod, far above what any pod names."""

_FIELD = "spec.resourceClaims"


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def has_claims(pod: Mapping[str, Any]) -> bool:
    """Whether the pod names claims (``spec.resourceClaims`` is not empty)."""
    claims = _spec(pod).get("resourceClaims")
    return isinstance(claims, list) and bool(claims)


def pod_claims(pod: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The pod's claims from ``spec.resourceClaims`` (empty when it has none). Raises
    InvalidObject (only)."""
    spec = _spec(pod)
    entries = spec.get("resourceClaims")
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise InvalidObject(_FIELD, "must be a list")
    if len(entries) > MAX_ENTRIES:
        raise InvalidObject(_FIELD, f"at most {MAX_ENTRIES} entries (has {len(entries)})")
    users = _users(spec)
    claims: list[PodClaim] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"{_FIELD}[{index}]"
        if not isinstance(entry, Mapping):
            raise InvalidObject(where, "each entry must be an object")
        name = check_name(where, entry.get("name"), seen)
        claim_name = entry.get("resourceClaimName")
        template_name = entry.get("resourceClaimTemplateName")
        check_reference(where, claim_name, template_name)
        containers = users.get(name, {})
        requests = set(containers.values())
        request = next(iter(requests)) if len(requests) == 1 else None
        claims.append(PodClaim(name, claim_name, template_name, tuple(containers), request))
    return tuple(claims)


def _users(spec: Mapping[str, Any]) -> dict[str, dict[str, str | None]]:
    """Entry name → {container name: the request it names (None: every request)}, from the
    ``resources.claims`` of init containers and containers; malformed references raise."""
    users: dict[str, dict[str, str | None]] = {}
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise InvalidObject(f"spec.{key}", "must be a list")
        for index, container in enumerate(containers):
            if not isinstance(container, Mapping):
                continue
            resources = container.get("resources")
            refs = resources.get("claims") if isinstance(resources, Mapping) else None
            if refs is None:
                continue
            where = f"spec.{key}[{index}].resources.claims"
            if not isinstance(refs, list) or len(refs) > MAX_ENTRIES:
                raise InvalidObject(where, f"must be a list of at most {MAX_ENTRIES} entries")
            name = container.get("name")
            if not is_dns_label(name):
                raise InvalidObject(f"spec.{key}[{index}].name", "must be a DNS label")
            assert isinstance(name, str)
            for k, ref in enumerate(refs):
                entry = ref.get("name") if isinstance(ref, Mapping) else None
                request = ref.get("request") if isinstance(ref, Mapping) else None
                if not is_dns_label(entry) or (request is not None
                                               and not is_dns_label(request)):
                    raise InvalidObject(f"{where}[{k}]", "must name an entry of "
                                        "spec.resourceClaims (and optionally a request)")
                assert isinstance(entry, str)
                named = users.setdefault(entry, {})
                # Named twice (whole claim and one request): the whole claim wins.
                named[name] = None if name in named and named[name] != request else request
    return users


def claim_statuses(pod: Mapping[str, Any]) -> dict[str, str]:
    """``status.resourceClaimStatuses``: pod-claim name → claim name; malformed entries and
    entries without a claim name are left out."""
    status = pod.get("status") if isinstance(pod, Mapping) else None
    entries = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    found: dict[str, str] = {}
    for entry in entries[:MAX_ENTRIES] if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping):
            continue
        name, claim = entry.get("name"), entry.get("resourceClaimName")
        if is_dns_label(name) and is_object_name(claim):
            found[str(name)] = str(claim)
    return found


def statuses_patch(pod: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The JSON merge patch of the pod's ``status`` subresource that records ``names``
    (pod-claim name → claim name) in ``status.resourceClaimStatuses``, in the order of the
    pod's entries, with the pod's resourceVersion as precondition."""
    meta = pod.get("metadata") or {}
    order = [c.get("name") for c in _spec(pod).get("resourceClaims") or ()
             if isinstance(c, Mapping)]
    ranked = sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n))
    return {"metadata": {"resourceVersion": meta.get("resourceVersion")},
            "status": {"resourceClaimStatuses": [
                {"name": n, "resourceClaimName": names[n]} for n in ranked]}}

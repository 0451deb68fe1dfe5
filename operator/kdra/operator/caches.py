"""The operator's shared caches of watched objects, and how each kind's objects parse.

- :func:`claim_store`: the ResourceClaims, a :class:`~kdra.kube.typed_cache.TypedCache` of
  :class:`~kdra.dra.models.ResourceClaim` (both API flavours parse into it), indexed by the
  pod that owns a claim and the pods that reserve it. The claim controller, the binder and
  taint eviction subscribe to it (kdra.operator.composition); each claim version is parsed
  once for all of them (:func:`parse_claim_kept`).
- :func:`slice_store`: the ResourceSlices, a typed cache of
  :class:`~kdra.dra.models.ResourceSlice`; the binder, the slice GC and taint eviction
  subscribe to it.
- :func:`pod_store`: the pods with claims (raw: a pod's parse would buy its readers nothing;
  they read a few fields each), indexed by UID and template.

Invariants:
- A claim whose only fault is in ``status.devices`` (what drivers write) parses without them:
  its allocation still counts (else its devices would be handed out again); any other fault
  leaves it out, the error cached with its version (kdra.kube.typed_cache).
"""

from __future__ import annotations

import logging

from kdra.dra.errors import InvalidObject
from kdra.dra.models import ResourceClaim, ResourceSlice, parse_claim, parse_slice
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.store import JSON, Store
from kdra.kube.typed_cache import TypedCache

log = logging.getLogger(__name__)

ClaimCache = TypedCache[ResourceClaim]
SliceCache = TypedCache[ResourceSlice]


def parse_claim_kept(claim: JSON) -> ResourceClaim:
    """``parse_claim``, keeping the allocation of a claim whose ``status.devices`` does not
    parse (logged)."""
    try:
        return parse_claim(claim)
    except InvalidObject as exc:
        status = claim.get("status")
        if not isinstance(status, dict) or not status.get("devices"):
            raise
        parsed = parse_claim({**claim, "status": {k: v for k, v in status.items()
                                                  if k != "devices"}})
        meta = claim.get("metadata") or {}
        log.warning("claim %s/%s: its status.devices left out (%s); its allocation counts",
                    meta.get("namespace"), meta.get("name"), exc)
        return parsed


def _owner_uids(claim: JSON) -> list[str]:
    return [ref["uid"] for ref in claim.get("metadata", {}).get("ownerReferences") or ()
            if ref.get("controller") and ref.get("kind") == "Pod" and ref.get("uid")]


def _reserved_uids(claim: JSON) -> list[str]:
    return [ref["uid"] for ref in claim.get("status", {}).get("reservedFor") or ()
            if ref.get("uid")]


def _template_refs(flavour: Flavour, pod: JSON) -> list[str]:
    try:
        entries = flavour.pod_claims(pod)
    except InvalidObject:
        return []
    return [e.resource_claim_template_name for e in entries if e.resource_claim_template_name]


def claim_store() -> ClaimCache:
    """The claims cache with the indexes the controller and binder use."""
    return TypedCache("ResourceClaim", parse_claim_kept,
                      {"owner": _owner_uids, "reserved": _reserved_uids})


def slice_store() -> SliceCache:
    """The ResourceSlices cache (every slice the watch delivers, typed)."""
    return TypedCache("ResourceSlice", parse_slice)


def pod_store(flavour: Flavour = KDRA) -> Store:
    """The cache of pods with claims (the ``flavour``'s), indexed by UID and template."""
    return Store("Pod", {"uid": lambda pod: [pod["metadata"].get("uid", "")],
                         "template": lambda pod: _template_refs(flavour, pod)})

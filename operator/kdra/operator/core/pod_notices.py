"""What a user should hear about a pod kdra would otherwise pass over in silence (issue 41):
the pod's claims written where kdra's flavour does not read them.

Two mistakes make a pod go to the default scheduler and run without its devices, and nothing
said so:

- ``spec.resourceClaims`` in the ``resource.kdra.dev`` flavour (the native flavour reads it:
  no notice there): kdra reads a pod's claims from
  the annotation ``resource.kdra.dev/claims`` (the same entries, the same shape); on a cluster
  without native DRA the API server even drops the field. Reason ``ResourceClaimsNotServed``.
- an annotation key in kdra's domain that kdra does not know (``resource.kdra.dev/claim``), or
  a near miss of the claims key under another kdra-like domain (``resources.kdra.dev/claims``).
  Reason ``UnknownKdraAnnotation``, with the key it most likely meant.

:func:`pod_notices` says both; the mutating webhook returns them as admission warnings
(``kubectl`` prints them) and the operator records them as ``Warning`` events on the pod (the
pods of a Deployment are created by its controller, which drops warnings).
:data:`NOTICE_POD_CONDITION` is the API server's pre-filter for the webhook that only warns.

Invariants:
- Pure and cheap: a look at ``spec.resourceClaims`` and at the annotation keys; a pod with
  neither gets no notice without any string matching beyond ``"kdra" in key``.
- Bounded: at most :data:`MAX_NOTICES` notices; keys quoted with ``repr`` and cut to
  :data:`KEY_CHARS` characters (keys are the user's).
- Never a denial: a key kdra does not know may be a newer kdra's; the pod is admitted.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kdra import GROUP
from kdra.dra.scheduling import POLICY_ANNOTATION
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    DEVICES_ANNOTATION_PREFIX,
    GPU_UUIDS_ANNOTATION_PREFIX,
)
from kdra.operator.core.gangs import GANG_ANNOTATIONS

__all__ = [
    "KNOWN_POD_KEYS",
    "NOTICE_POD_CONDITION",
    "RESOURCE_CLAIMS_REASON",
    "UNKNOWN_KEY_REASON",
    "Notice",
    "pod_notices",
]

KNOWN_POD_KEYS = (CLAIMS_ANNOTATION, CLAIM_STATUSES_ANNOTATION, POLICY_ANNOTATION,
                  *GANG_ANNOTATIONS)
"""The pod annotation keys in kdra's domain that kdra reads or writes (with the prefixes
:data:`~kdra.kube.core.podclaims.DEVICES_ANNOTATION_PREFIX` and
:data:`~kdra.kube.core.podclaims.GPU_UUIDS_ANNOTATION_PREFIX`)."""
RESOURCE_CLAIMS_REASON = "ResourceClaimsNotServed"
UNKNOWN_KEY_REASON = "UnknownKdraAnnotation"
MAX_NOTICES = 4
KEY_CHARS = 100
NEAR_MISS = 0.75
"""How alike the name of a key under another kdra-like domain must be to ``claims`` to be
taken for a typo of the claims key (difflib's ratio: ``claim`` is 0.91)."""
_CLAIMS_NAME = CLAIMS_ANNOTATION.partition("/")[2]
_KNOWN_NAMES = [key.partition("/")[2] for key in KNOWN_POD_KEYS]

_PREFIXES = (DEVICES_ANNOTATION_PREFIX, GPU_UUIDS_ANNOTATION_PREFIX)
_KNOWN_LIST = ", ".join(f"'{k}'" for k in KNOWN_POD_KEYS)
NOTICE_POD_CONDITION = (
    "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0) || "
    "(has(object.metadata.annotations) && object.metadata.annotations.exists(k, "
    f"k.contains('kdra') && !(k in [{_KNOWN_LIST}]) && "
    + " && ".join(f"!k.startsWith('{p}')" for p in _PREFIXES) + "))"
)
"""The API server's pre-filter of the pods :func:`pod_notices` may have something to say
about (it decides precisely): ``spec.resourceClaims``, or a key mentioning kdra that is none of
kdra's own."""


@dataclass(frozen=True)
class Notice:
    reason: str
    message: str


def pod_notices(pod: Mapping[str, Any], flavour: Flavour = KDRA) -> list[Notice]:
    """What to tell the user about ``pod`` (module doc); empty for a pod kdra reads as meant
    (in ``flavour``: where it reads a pod's claims)."""
    notices: list[Notice] = []
    spec = pod.get("spec")
    claims = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    if isinstance(claims, list) and claims and not flavour.spec_claims:
        names = ", ".join(_quoted(c.get("name")) for c in claims[:4] if isinstance(c, Mapping))
        notices.append(Notice(RESOURCE_CLAIMS_REASON, (
            f"spec.resourceClaims ({names}{', ...' if len(claims) > 4 else ''}) is not served "
            f"by kdra's {GROUP} flavour: kdra reads a pod's claims from the annotation "
            f"{CLAIMS_ANNOTATION} (the same entries: name, resourceClaimName or "
            "resourceClaimTemplateName), so these get no devices from kdra; move them into "
            "the annotation (ignore this if a native DRA driver serves them)")))
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if isinstance(annotations, Mapping):
        for key in annotations:
            if len(notices) >= MAX_NOTICES:
                break
            if isinstance(key, str) and "kdra" in key:
                meant = _meant(key, CLAIMS_ANNOTATION in annotations or flavour.spec_claims)
                if meant is not None:
                    notices.append(Notice(UNKNOWN_KEY_REASON, meant))
    return notices


def _meant(key: str, has_claims: bool) -> str | None:
    """The notice for an annotation ``key`` mentioning kdra, or None when it is one of
    kdra's or not in a kdra-like domain (``has_claims``: the pod has the claims key)."""
    if key in KNOWN_POD_KEYS or key.startswith(_PREFIXES):
        return None
    domain, slash, name = key.partition("/")
    if not slash or "kdra" not in domain:
        return None
    name = name[:KEY_CHARS]
    if domain == GROUP:
        close = [f"{GROUP}/{n}" for n in difflib.get_close_matches(name, _KNOWN_NAMES, n=1)]
    elif difflib.get_close_matches(name, [_CLAIMS_NAME], n=1, cutoff=NEAR_MISS):
        close = [CLAIMS_ANNOTATION]  # resources.kdra.dev/claims, kdra.dev/claim ...
    else:
        return None
    hint = (f"did you mean {close[0]!r}?" if close
            else f"kdra's pod annotations are {', '.join(map(repr, KNOWN_POD_KEYS))}")
    text = f"metadata.annotations[{_quoted(key)}] is not an annotation kdra reads: {hint}"
    if not has_claims:
        text += (f" kdra allocates devices only for pods with {CLAIMS_ANNOTATION}; without it "
                 "this pod gets none")
    return text


def _quoted(value: object) -> str:
    text = repr(str(value))
    return text if len(text) <= KEY_CHARS else text[: KEY_CHARS - 3] + "..."

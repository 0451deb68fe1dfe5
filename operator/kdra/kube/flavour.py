"""Choosing the API flavour at start-up: ``--flavour native|kdra`` (``KDRA_FLAVOUR``), or,
unset (or ``auto``), by asking the API server whether it serves ``resource.k8s.io/v1``
(what the flavours are: :mod:`kdra.kube.core.flavours`).

Invariants:
- One discovery request (``GET /apis/resource.k8s.io/v1``) decides ``auto``: native when it
  lists ResourceClaims, kdra when the group version is not served (404).
- ``native`` asked for on a cluster that does not serve ``resource.k8s.io/v1`` is an error at
  start-up (:class:`FlavourError`), never a process that watches kinds that do not exist.
- Any other failure of the discovery request (the API server unreachable, 403) propagates:
  the caller's start-up retries, rather than guessing a flavour.
"""

from __future__ import annotations

import logging

from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import FLAVOURS, KDRA, NATIVE, Flavour
from kdra.kube.errors import NotFound

__all__ = ["AUTO", "FlavourError", "resolve", "serves_native"]

log = logging.getLogger(__name__)

AUTO = ("", "auto")
"""Settings values that mean "native where the API server serves it, else kdra"."""


class FlavourError(ValueError):
    """The flavour asked for is unknown, or not served by the cluster."""


async def serves_native(client: KubeClient) -> bool:
    """Whether the API server serves ``resource.k8s.io/v1`` with ResourceClaims."""
    try:
        answer = await client.request("GET", f"/apis/{NATIVE.api_version}")
    except NotFound:
        return False
    return any(isinstance(r, dict) and r.get("name") == NATIVE.claims.plural
               for r in answer.get("resources") or ())


async def resolve(client: KubeClient, setting: str) -> Flavour:
    """The flavour ``setting`` names (``native``, ``kdra``), or for ``""``/``auto`` the one
    the cluster serves (native where it can). Raises :class:`FlavourError`."""
    choice = setting.strip().lower()
    if choice not in AUTO and choice not in FLAVOURS:
        raise FlavourError(f"flavour {setting!r} (--flavour, KDRA_FLAVOUR) is not one of "
                           f"{', '.join(FLAVOURS)} or auto")
    if choice == KDRA.name:
        return KDRA
    native = await serves_native(client)
    if choice == NATIVE.name and not native:
        raise FlavourError(f"flavour native asked for, but the API server does not serve "
                           f"{NATIVE.api_version} (Kubernetes >= 1.34 serves it; use "
                           "--flavour kdra on older clusters)")
    flavour = NATIVE if native else KDRA
    if choice in AUTO:
        log.info("API flavour %s: the API server %s %s", flavour.name,
                 "serves" if native else "does not serve", NATIVE.api_version)
    return flavour

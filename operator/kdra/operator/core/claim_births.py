"""What the claim controller created, per pod UID: so that creating a pod's claims is
idempotent, and a pod whose claims keep disappearing cannot make it create claims without end.

Upstream's resourceclaim controller finds a pod's generated claim before it creates one (the
orphan lookup: a claim the pod controls whose pod-claim-name annotation names the entry), and
remembers the claims it created because its informer may not show them yet. kdra's controller
does the same lookup in its cache (:meth:`ClaimController._find_generated`); :class:`Births`
is the memory beside it:

- :meth:`Births.name` — the claim created for (pod UID, entry): the controller asks the API
  server for it when the cache does not have it, rather than create a second one;
- :meth:`Births.delay` — how long to wait before creating the claim of an entry *again*: each
  re-creation for the same (pod UID, entry) doubles the wait (:func:`~kdra.kube.core.backoff.
  backoff_ceiling`). A pod whose claim is deleted once gets a new one at once; a claim deleted
  over and over (the garbage collector deleting the claims of a pod that is gone — issue 36's
  storm of ~13 claims/s — or a user deleting it in a loop) costs one creation per backoff,
  not one per event.

Invariants:
- Bounded: at most :data:`MAX_PODS` pod UIDs are remembered (the oldest forgotten first);
  :meth:`Births.forget` drops a pod's record when the pod is gone or done.
- Pure bookkeeping: no I/O; time comes from the caller's clock.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from kdra.kube.core.backoff import backoff_ceiling

__all__ = ["BASE", "CAP", "MAX_PODS", "Births"]

MAX_PODS = 16_384
"""Pod UIDs whose created claims are remembered."""
BASE = 1.0
"""Seconds before the first re-creation of an entry's claim after the second; doubling."""
CAP = 300.0
"""Longest wait between two re-creations."""


@dataclass
class _Birth:
    name: str
    """The claim created last."""
    count: int
    """Claims created for the entry so far."""
    at: float
    """When the last was created (the caller's clock)."""


class Births:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pods: OrderedDict[str, dict[str, _Birth]] = OrderedDict()  # oldest first

    def __len__(self) -> int:
        return len(self._pods)

    def name(self, uid: str, entry: str) -> str | None:
        """The claim last created for the pod's ``entry`` (None: none remembered)."""
        birth = self._pods.get(uid, {}).get(entry)
        return birth.name if birth is not None else None

    def delay(self, uid: str, entry: str) -> float:
        """Seconds to wait before creating the entry's claim (again); 0: now. The first
        claim and the first re-creation are immediate; later ones back off."""
        birth = self._pods.get(uid, {}).get(entry)
        if birth is None or birth.count < 2:
            return 0.0
        wait = backoff_ceiling(birth.count - 1, base=BASE, cap=CAP)
        return max(0.0, birth.at + wait - self._clock())

    def created(self, uid: str, entry: str, name: str) -> None:
        births = self._pods.setdefault(uid, {})
        self._pods.move_to_end(uid)
        before = births.get(entry)
        births[entry] = _Birth(name, (before.count if before else 0) + 1, self._clock())
        while len(self._pods) > MAX_PODS:
            self._pods.popitem(last=False)

    def forget(self, uid: str) -> None:
        self._pods.pop(uid, None)

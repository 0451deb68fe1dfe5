"""What a search treats as taken: exclusive devices held by allocated and assumed claims
(and ``in_flight`` ones a caller adds, less ``freed`` ones a caller asks about — preemption's
"what if these pods were gone"), with the snapshot's shares of devices that allow multiple
allocations riding along.

Invariants:
- :func:`busy_view` returns the snapshot's own mapping (the fast path: ``in`` on a dict)
  when there is nothing to add; :func:`shares_of` then answers "no shares" — which is true,
  since the snapshot has none.
- A freed device's shares stay counted (:class:`Freed`): a what-if may only under-estimate
  what freeing gains.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping

from kdra.dra.allocator.ledger import SharedUse
from kdra.dra.allocator.pools import DeviceId
from kdra.dra.allocator.snapshot import Snapshot

__all__ = ["Freed", "InUse", "busy_view", "shares_of"]


class InUse:
    """Devices in use: the snapshot's plus ``in_flight`` ones (a cheap union view), and the
    snapshot's shares of devices that allow multiple allocations."""

    __slots__ = ("extra", "held", "shares")

    def __init__(self, held: Container[DeviceId], extra: Collection[DeviceId],
                 shares: Mapping[DeviceId, SharedUse] | None = None) -> None:
        self.held = held
        self.extra = extra
        self.shares: Mapping[DeviceId, SharedUse] = shares if shares is not None else {}

    def __contains__(self, device: object) -> bool:
        return device in self.held or device in self.extra


class Freed(InUse):
    """:class:`InUse` less the devices ``freed`` (in use now, free in a what-if)."""

    __slots__ = ("freed",)

    def __init__(self, held: Container[DeviceId], extra: Collection[DeviceId],
                 shares: Mapping[DeviceId, SharedUse] | None,
                 freed: Collection[DeviceId]) -> None:
        super().__init__(held, extra, shares)
        self.freed = freed

    def __contains__(self, device: object) -> bool:
        return (device in self.held or device in self.extra) and device not in self.freed


def busy_view(snapshot: Snapshot, in_flight: Collection[DeviceId],
              freed: Collection[DeviceId] = ()) -> Container[DeviceId]:
    """What a search treats as taken: exclusive devices (a plain mapping when that is all),
    with the snapshot's shares riding along when there are any (:func:`shares_of`), less
    ``freed``."""
    held = snapshot.devices_in_use
    shares = snapshot.shares
    if freed:
        return Freed(held, in_flight, shares, freed)
    return InUse(held, in_flight, shares) if in_flight or shares else held


def shares_of(busy: Container[DeviceId]) -> Mapping[DeviceId, SharedUse]:
    """The shares carried by a :func:`busy_view` (none for a plain container)."""
    return busy.shares if isinstance(busy, InUse) else {}

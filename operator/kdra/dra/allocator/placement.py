"""A placement: one pod's claims on one node, as the binder scores and takes it.

A :class:`Placement` holds the picks of the node's search, or — a *counted* placement (see
:mod:`.cluster`) — what to search them with: the node's pools, what is in use, and the
matching-device list the placement was counted from, so that its search evaluates no
selector however the pools' caches changed meanwhile (:mod:`.pacing`).

Invariants:
- Results (``AllocationResult`` models) are built once, on first access, only for the
  placement the binder takes.
- A counted placement searches at most once, against the snapshot as it is then.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence

from kdra.dra.allocator.pools import DeviceId, MatchItem, NodePools
from kdra.dra.allocator.prepared import PreparedClaim
from kdra.dra.allocator.results import Pick, build_result
from kdra.dra.allocator.search import NodeSearch
from kdra.dra.allocator.stats import Stats
from kdra.dra.models import AllocationResult

__all__ = ["Placement"]


class Placement:
    """The pod's claims fit ``node``. ``results`` are built on first access (only the node the
    binder takes needs them).

    A *counted* placement (see the module doc) is made without picks: its search runs on the
    first access of ``devices`` or ``results``, against the snapshot as it is then, over the
    matching devices it was counted from (so it evaluates no selector). Use it
    before the snapshot changes (the binder takes its choice's results in the same step as
    :func:`place`), or check it with :meth:`Placing.still_fits`; ``free_after`` needs no
    search."""

    __slots__ = ("_devices", "_known", "_picks", "_prepared", "_results", "_search",
                 "fragmentation", "free_after", "node", "pools", "preference")

    def __init__(
        self,
        node: str,
        prepared: Sequence[PreparedClaim],
        picks: list[list[Pick]] | None,
        free_after: Mapping[str, int],
        search: tuple[NodePools, Container[DeviceId], Stats] | None = None,
        pools: NodePools | None = None,
        *,
        preference: int = 0,
        known: Mapping[tuple[str, ...], tuple[MatchItem, ...]] | None = None,
    ) -> None:
        self.node = node
        self._known = known  # a counted placement: the matching list it was counted from
        self.preference = preference
        """How good the ``firstAvailable`` choices are (:func:`~.choices.preference`);
        the binder prefers nodes with a higher one, then applies its placement policy."""
        self._prepared = prepared
        self._picks = picks
        if picks is None and search is None:
            raise ValueError("a placement needs its picks or what to search them with")
        self._search = search
        self.pools = pools
        """The node's pools the placement was made from (None for a placement without
        claims)."""
        self._results: tuple[AllocationResult, ...] | None = None
        self._devices: frozenset[DeviceId] | None = None
        self.fragmentation = 0
        """Counter sets (GPUs) the placement opens — had no usage before
        (:func:`~.fragmentation.placement_cost`); binpack prefers nodes that open none."""
        self.free_after = free_after
        """Per DeviceClass used by the pod: devices on the node matching the class that would
        still be free after this placement (for binpack / spread scoring)."""

    def search(self) -> list[list[Pick]] | None:
        """The picks; a counted placement searches for them now (None: it no longer fits)."""
        if self._picks is None:
            assert self._search is not None
            self._picks = NodeSearch(self._prepared, *self._search, known=self._known).run()
        return self._picks

    @property
    def picks(self) -> list[list[Pick]]:
        picks = self.search()
        if picks is None:  # the counts said it fits: a changed snapshot, or a bug
            raise RuntimeError(f"counted placement on {self.node} no longer fits; use a "
                               "placement before the snapshot changes")
        return picks

    @property
    def devices(self) -> frozenset[DeviceId]:
        """Devices this placement takes (admin-access results excluded)."""
        if self._devices is None:
            self._devices = frozenset(
                pick.entry.id for chosen in self.picks for pick in chosen
                if not pick.request.admin_access
            )
        return self._devices

    @property
    def results(self) -> tuple[AllocationResult, ...]:
        """One AllocationResult per claim, in the order of the claims given."""
        if self._results is None:
            self._results = tuple(
                build_result(claim, chosen, self.node)
                for claim, chosen in zip(self._prepared, self.picks, strict=True)
            )
        return self._results

    def __repr__(self) -> str:
        if self._picks is None:  # never searches: the snapshot may have moved on
            return f"Placement({self.node!r}, counted)"
        return f"Placement({self.node!r}, devices={sorted(map(str, self.devices))})"

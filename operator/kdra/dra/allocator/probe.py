"""Would a pod's claims fit one node if some devices in use were free? — for preemption.

:class:`FitProbe` answers it with the allocator's own search (:class:`~.choices.ChoiceSearch`,
``firstAvailable`` alternatives included) over the snapshot's pools of the node, with the
devices in use taken from the snapshot, plus ``reserved`` devices (held for others, e.g. for
pods nominated by an earlier preemption), minus the devices the caller asks about freeing
(:func:`~.busy.busy_view`; a freed device's shares stay counted: the probe may only
under-estimate what freeing gains).

Invariants:
- Pure and read-only: the snapshot is never changed; an answer is a search's, never an
  estimate.
- Bounded: all probes of one :class:`FitProbe` together spend at most about ``steps``
  search steps (devices tried, and the selectors' run-time cost as steps: :mod:`.pacing`);
  past that :meth:`FitProbe.fits` raises :class:`OutOfSteps` and the caller stops (an
  unfinished search never counts as "fits" nor as "does not fit").
- Node-independent bad input (a missing class, a selector that does not compile) raises
  :class:`~.reasons.Unallocatable` from the constructor; bad input met on one node makes that
  node "does not fit".
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from kdra.dra.allocator.busy import busy_view
from kdra.dra.allocator.choices import ChoiceSearch
from kdra.dra.allocator.nodeselector import NodeInfo
from kdra.dra.allocator.pacing import StepBudget
from kdra.dra.allocator.pools import DeviceId
from kdra.dra.allocator.prepared import prepare
from kdra.dra.allocator.reasons import Unallocatable
from kdra.dra.allocator.snapshot import Snapshot
from kdra.dra.models import ResourceClaim

__all__ = ["FitProbe", "OutOfSteps"]


class OutOfSteps(Exception):
    """The probe's step budget ran out before a search finished."""


class FitProbe:
    """Fit tests of one pod's unallocated ``claims`` against nodes of ``snapshot`` (see the
    module doc). ``steps``: the budget of every probe together (None: no limit)."""

    def __init__(self, snapshot: Snapshot, claims: Sequence[ResourceClaim], *,
                 reserved: Collection[DeviceId] = frozenset(),
                 steps: int | None = None) -> None:
        self.snapshot = snapshot
        self.prepared = prepare(claims, snapshot)  # Unallocatable: node-independent
        self.reserved = reserved
        self.budget = StepBudget(steps)
        self.probes = 0
        """Searches run so far."""

    def fits(self, node: NodeInfo, freed: Collection[DeviceId] = frozenset()) -> bool:
        """Whether the claims fit ``node`` with ``freed`` devices free (in use or not now).
        Raises OutOfSteps when the budget runs out first."""
        if self.budget.out:
            raise OutOfSteps
        busy = busy_view(self.snapshot, self.reserved, freed)
        search = ChoiceSearch(self.prepared, self.snapshot.node_pools(node), busy,
                              self.snapshot.stats)
        self.probes += 1
        try:
            finished = self.budget.advance(search)
        except Unallocatable:
            return False  # bad input met on this node: it does not fit
        if not finished:
            raise OutOfSteps
        return search.result is not None

    @property
    def spent(self) -> int:
        """Search steps spent so far (the selectors' run-time cost included)."""
        return self.budget.spent

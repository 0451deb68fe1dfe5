"""A claim's constraints while the per-node search walks (:mod:`.search`): ``matchAttribute``
(every device the constraint covers has the same value) and ``distinctAttribute`` (no two of
them have the same value).

Invariants:
- A device without the attribute never satisfies either kind (upstream's rule).
- :meth:`ConstraintState.add` changes nothing when it refuses a device, and
  :meth:`ConstraintState.remove` undoes exactly one accepted :meth:`~ConstraintState.add`, so
  the search can backtrack in any order it picked.
"""

from __future__ import annotations

from collections.abc import Sequence

from kdra.dra.allocator.pools import AttributeValue, DeviceEntry
from kdra.dra.allocator.prepared import PreparedConstraint, PreparedRequest
from kdra.dra.allocator.reasons import ReasonCode, Unallocatable


class ConstraintState:
    """A constraint while searching. ``matchAttribute``: the first device fixes ``value``,
    ``count`` devices hold it. ``distinctAttribute``: ``taken`` holds the values of the
    devices picked so far (each once)."""

    __slots__ = ("attribute", "count", "distinct", "taken", "value")

    def __init__(self, constraint: PreparedConstraint) -> None:
        self.attribute = constraint.attribute
        self.distinct = constraint.distinct
        self.value: AttributeValue | None = None
        self.count = 0
        self.taken: set[AttributeValue] = set()

    @property
    def label(self) -> str:
        return f"{'distinctAttribute' if self.distinct else 'matchAttribute'} {self.attribute}"

    def add(self, value: AttributeValue | None) -> bool:
        """Take a device with ``value`` (None: it lacks the attribute); False if the
        constraint forbids it (then nothing changed)."""
        if value is None:
            return False
        if self.distinct:
            if value in self.taken:
                return False
            self.taken.add(value)
        elif self.count and value != self.value:
            return False
        elif not self.count:
            self.value = value
        self.count += 1
        return True

    def remove(self, value: AttributeValue | None) -> None:
        """Undo an accepted :meth:`add` of a device with ``value``."""
        self.count -= 1
        if self.distinct and value is not None:
            self.taken.discard(value)


def constrain(states: Sequence[ConstraintState], entry: DeviceEntry) -> bool:
    """Add ``entry`` to every state, or (when one refuses it) to none of them."""
    for done, state in enumerate(states):
        if not state.add(entry.attribute(state.attribute)):
            for undo in states[:done]:
                undo.remove(entry.attribute(undo.attribute))
            return False
    return True


def release(states: Sequence[ConstraintState], entry: DeviceEntry) -> None:
    """Undo :func:`constrain` of ``entry``."""
    for state in states:
        state.remove(entry.attribute(state.attribute))


def all_unconstrained(request: PreparedRequest, states: Sequence[ConstraintState],
                      entry: DeviceEntry) -> Unallocatable:
    """An ``All`` request must take every matching device; the claim's constraints reject
    one of them."""
    return Unallocatable(
        ReasonCode.CONSTRAINT_UNSATISFIABLE,
        f'request "{request.name}" of claim "{request.claim_name}" asks for all '
        "devices, but they do not satisfy the claim's constraints",
        f"claim {request.claim_key}, request {request.name} asks for all devices, "
        f"but device {entry.id} does not satisfy "
        + ", ".join(state.label for state in states),
    )

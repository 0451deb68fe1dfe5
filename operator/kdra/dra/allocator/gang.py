"""Joint placement of a gang: every pod of a group placed together, or none.

A gang is ``n`` pods that must all run at once (distributed training). Placing them one by
one, as upstream's scheduler does, can hold devices for part of a gang that then never
completes — and two half-placed gangs can deadlock a cluster. :class:`GangSearch` searches
an assignment of every pod to a *choice* (a node and the devices its claims take there)
before anything is written:

- depth-first over the pods, in order, each pod's choices computed against the devices and
  nodes the earlier pods of the partial assignment took (``options``); when a pod has no
  choice left the search backtracks to the previous pod's next choice, so a later pod's
  failure revisits an earlier pod's choice. What the rest of the gang can do depends only on
  what the earlier pods took, so a partial assignment that failed is remembered (per scope,
  up to ``MEMO``) and the same one reached in another order is not searched again — pods
  that are alike (one template) would otherwise be tried in every order;
- once per *scope*: a gang-level constraint is a set of scopes the whole gang must fit in
  one of — a ``matchAttribute`` (every device of every pod shares one value of a device
  attribute, e.g. an NVLink domain) gives a scope per value, with the devices lacking that
  value excluded; a ``topologyKey`` (every pod on nodes sharing one value of a node label)
  gives a scope per label value, with the other nodes excluded; both together give their
  product (:func:`scopes`);
- ``distinct_nodes`` (spread): no two pods of the gang on one node;
- in steps: :meth:`GangSearch.advance` runs until about ``steps`` were spent (the
  ``options`` callable reports what each evaluation cost) and returns None to be called
  again — the binder yields to its event loop between slices; :meth:`GangSearch.give_up`
  ends it with what is known. One pod's evaluation may itself be long (a tenant's claims
  can make one node's search take a pod's whole budget): ``options`` may raise
  :class:`Unfinished` with what it spent so far, ending the slice, and is called again with
  the same arguments at the next ``advance`` to go on (:attr:`GangSearch.allowance` tells
  it how many steps the slice has left).

The search is exhaustive over the choices ``options`` offers: it finds an assignment
whenever one exists among them (tests/unit/dra/test_allocator_gang.py checks this against a
brute force on small clusters). The binder's ``options`` offers one choice per node (the
allocator's pick there, given the devices the gang took already), so with devices of one
kind per node that is every assignment that matters.

Invariants:
- A result is all or nothing: ``GangOutcome.choices`` has one choice per pod, or is None.
- Choices of one assignment never share a device, and respect ``distinct_nodes`` and the
  scope they were found in (``options`` sees the scope and the taken devices and nodes).
- With ``scope_backtracks`` None the search is exhaustive over the choices offered; with it,
  a failure is reported ``exhausted`` whenever a scope was cut short.
- Steps are bounded by the caller's budget: ``advance`` overruns its ``steps`` by at most
  what one ``options`` call spends before it finishes or raises :class:`Unfinished`.
- Pure: no I/O, no clock; the caller owns deadlines.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["Choice", "GangOutcome", "GangSearch", "Options", "Scope", "Unfinished", "scopes"]

P = TypeVar("P")


@dataclass(frozen=True)
class Choice(Generic[P]):
    """One pod's placement candidate: its node, the devices it takes, the caller's payload
    (the binder's :class:`~kdra.dra.allocator.Placement`)."""

    node: str
    devices: frozenset[Hashable]
    payload: P


@dataclass(frozen=True)
class Scope:
    """Where the whole gang must fit: ``nodes`` (None: any node) and ``value`` of the gang's
    ``matchAttribute`` (None: no attribute constraint), ``label`` naming it for people."""

    label: str = ""
    nodes: frozenset[str] | None = None
    value: object = None

    def allows(self, node: str) -> bool:
        return self.nodes is None or node in self.nodes


Options = Callable[[int, Scope, frozenset[Hashable], frozenset[str]],
                   tuple[Sequence[Choice[P]], int]]
"""``(pod index, scope, devices taken by earlier pods, nodes they use) → (the pod's choices,
steps the evaluation cost)``."""


class Unfinished(Exception):
    """Raised by ``options``: the evaluation spent ``cost`` steps and is not finished; call
    again with the same arguments to go on."""

    def __init__(self, cost: int) -> None:
        super().__init__(cost)
        self.cost = cost


@dataclass
class GangOutcome(Generic[P]):
    """The search's answer. ``choices``: one per pod (a placement for the whole gang), or
    None. ``nearest``: the most pods placed together in any scope (the nearest fit) and
    ``nearest_scope`` that scope; ``exhausted``: the budget ended the search first."""

    choices: list[Choice[P]] | None
    scope: Scope | None = None
    nearest: int = 0
    nearest_scope: Scope | None = None
    exhausted: bool = False
    steps: int = 0


@dataclass
class _Frame(Generic[P]):
    choices: Sequence[Choice[P]]
    state: tuple[frozenset[Hashable], frozenset[str]]  # what the earlier pods took
    next: int = 0


MEMO = 100_000
"""Failed partial assignments remembered per scope (beyond it, none more is added)."""


@dataclass
class GangSearch(Generic[P]):
    """Depth-first joint placement of ``pods`` pods over ``scopes`` (see the module doc)."""

    pods: int
    options: Options[P]
    scopes: Sequence[Scope] = (Scope(),)
    distinct_nodes: bool = False
    scope_backtracks: int | None = None
    """At most this many backtracks in one scope before the search moves on to the next (None:
    no limit, the search is exhaustive). A scope cut short proves nothing: a gang placed in no
    scope is then ``exhausted``, not impossible — the next scope may fit where the first is
    a long proof away from failing."""
    steps: int = 0
    _backtracks: int = 0
    _cut: bool = False
    _scope: int = 0
    _stack: list[_Frame[P]] = field(default_factory=list)
    _path: list[Choice[P]] = field(default_factory=list)
    _started: bool = False
    _failed: set[tuple[int, frozenset[Hashable], frozenset[str]]] = field(default_factory=set)
    _nearest: int = 0
    _nearest_scope: Scope | None = None
    _outcome: GangOutcome[P] | None = None
    _pushing: bool = False  # the last _push raised Unfinished: it goes on first
    allowance: int | None = None
    """Steps left in the current slice (None: no limit), for ``options`` to pause at."""

    def advance(self, steps: int | None) -> GangOutcome[P] | None:
        """Search on for about ``steps`` steps (None: to the end); the outcome, or None if
        the slice ended first."""
        if self._outcome is not None:
            return self._outcome
        stop = None if steps is None else self.steps + steps
        while self._scope < len(self.scopes):
            scope = self.scopes[self._scope]
            if self.pods == 0:
                return self._finish([], scope)
            if not self._started or self._pushing:
                self._started = True
                if not self._push(scope, stop):
                    return None
            while self._stack:
                if stop is not None and self.steps >= stop:
                    return None
                frame = self._stack[-1]
                if frame.next >= len(frame.choices):
                    if self.scope_backtracks is not None and self._path:
                        self._backtracks += 1
                        if self._backtracks > self.scope_backtracks:
                            self._cut = True
                            self._stack.clear()
                            self._path.clear()
                            break
                    self._stack.pop()
                    if len(self._failed) < MEMO:  # no way on from here: never again
                        self._failed.add((len(self._path), *frame.state))
                    if self._path:
                        self._path.pop()
                    continue
                choice = frame.choices[frame.next]
                frame.next += 1
                self._path.append(choice)
                if len(self._path) > self._nearest:
                    self._nearest, self._nearest_scope = len(self._path), scope
                if len(self._path) == self.pods:
                    return self._finish(list(self._path), scope)
                if not self._push(scope, stop):
                    return None
            self._scope += 1
            self._started = False
            self._failed.clear()
            self._backtracks = 0
        return self._finish(None, None)

    def give_up(self) -> GangOutcome[P]:
        """End now: no placement unless one was found already."""
        if self._outcome is None:
            self._outcome = GangOutcome(None, None, self._nearest, self._nearest_scope,
                                        exhausted=True, steps=self.steps)
        return self._outcome

    def _push(self, scope: Scope, stop: int | None) -> bool:
        """The next pod's frame onto the stack; False when its evaluation paused
        (:class:`Unfinished`: the slice is over, the next ``advance`` goes on with it)."""
        taken: frozenset[Hashable] = frozenset().union(*(c.devices for c in self._path))
        used = frozenset(c.node for c in self._path)
        index = len(self._path)
        if not self.distinct_nodes:
            used = frozenset()  # the nodes matter only for spread
        if (index, taken, used) in self._failed:
            self.steps += 1  # reached before in another order, and failed
            self._stack.append(_Frame((), (taken, used)))
            return True
        self.allowance = None if stop is None else max(1, stop - self.steps)
        try:
            choices, cost = self.options(index, scope, taken,
                                         frozenset(c.node for c in self._path))
        except Unfinished as pause:
            self.steps += max(1, pause.cost)
            self._pushing = True
            return False
        self._pushing = False
        self.steps += max(1, cost)
        self._stack.append(_Frame([
            c for c in choices
            if scope.allows(c.node) and not (c.devices & taken)
            and not (self.distinct_nodes and c.node in used)], (taken, used)))
        return True

    def _finish(self, choices: list[Choice[P]] | None, scope: Scope | None) -> GangOutcome[P]:
        self._outcome = GangOutcome(choices, scope, self._nearest if choices is None
                                    else self.pods, self._nearest_scope,
                                    exhausted=choices is None and self._cut, steps=self.steps)
        return self._outcome


def scopes(*, node_labels: Mapping[str, Mapping[str, str]] | None = None,
           topology_key: str = "", attribute: str = "",
           attribute_values: Iterable[object] = (),
           show: Callable[[object], str] = str) -> list[Scope]:
    """The scopes of a gang's constraints: one per value of the node label ``topology_key``
    (over ``node_labels``: node → labels) times one per value of the device attribute
    ``attribute`` (``attribute_values``, as the cluster has them; ``show`` writes one for
    people); a single unconstrained scope without either. Ordered by value, so the search is
    deterministic."""
    node_scopes: list[tuple[str, frozenset[str] | None]] = [("", None)]
    if topology_key:
        groups: dict[str, set[str]] = {}
        for node, labels in (node_labels or {}).items():
            label_value = labels.get(topology_key)
            if label_value is not None:
                groups.setdefault(label_value, set()).add(node)
        node_scopes = [(f"{topology_key}={value}", frozenset(nodes))
                       for value, nodes in sorted(groups.items())]
    values: list[object] = [None]
    if attribute:
        values = sorted(set(attribute_values), key=lambda v: (type(v).__name__, str(v)))
    out = []
    for (label, nodes), attribute_value in itertools.product(node_scopes, values):
        parts = [p for p in (label, f"{attribute}={show(attribute_value)}" if attribute
                             else "") if p]
        out.append(Scope(", ".join(parts), nodes, attribute_value))
    return out

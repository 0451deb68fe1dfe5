"""Why a pod's claims do not fit a node — a small fixed vocabulary.

Every failure the allocator can explain is a :class:`Reason`: a :class:`ReasonCode`, a
``message`` that does not depend on the node (so the binder can group nodes by it: "7 no
device of class ... matches ..."), and a node-specific ``detail``. When the input is bad —
where upstream's allocator returns an error rather than "does not fit" — ``error`` holds the
:class:`~kdra.dra.errors.AllocationError` to surface (chained from its cause).

:class:`Unallocatable` is the package-internal exception that carries a reason out of the
search; it never leaves the package: :func:`~kdra.dra.allocator.choices.allocate` turns it
into an AllocationError, the cluster entry point into a Reason.

:func:`nodes_available` words the verdict over many nodes as kube-scheduler words its
``FailedScheduling`` events, so alerts and greps written for upstream find kdra's too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from kdra.dra.errors import AllocationError


class ReasonCode(StrEnum):
    NO_MATCHING_DEVICE = "no-matching-device"
    """No (or too few) devices on the node pass the class and request selectors."""
    DEVICES_BUSY = "devices-busy"
    """Matching devices exist but are allocated (or wanted by another request of the pod)."""
    CONSTRAINT_UNSATISFIABLE = "constraint-unsatisfiable"
    """Enough free matching devices, but no set of them satisfies the claim's constraints
    (matchAttribute, distinctAttribute)."""
    POOL_INCOMPLETE = "pool-incomplete"
    """An ``All`` request meets a pool whose newest generation is not fully published."""
    POOL_INVALID = "pool-invalid"
    """A pool the search reached repeats a device name."""
    TOO_MANY_DEVICES = "too-many-devices"
    """A claim would get more than 32 devices."""
    CEL_ERROR = "cel-error"
    """A selector does not compile, or fails at run time on a device."""
    CLASS_MISSING = "class-missing"
    """A request names a DeviceClass that does not exist."""
    UNSUPPORTED = "unsupported"
    """The claim uses a field kdra does not act on yet, or an ``All`` request meets a device
    that uses a feature kdra does not support yet."""
    COUNTERS_EXHAUSTED = "counters-exhausted"
    """Matching devices are free, but their pool's shared counters (e.g. a GPU's memory
    slices) do not have enough left for any of them."""
    CAPACITY_EXHAUSTED = "capacity-exhausted"
    """Matching devices lack the capacity asked (or, when shared, what is left of it)."""
    INVALID_REQUEST = "invalid-request"
    """A request's capacity amounts are not valid quantities (or negative)."""
    TOO_MANY_CHOICES = "too-many-choices"
    """The pod's ``firstAvailable`` requests combine into more alternatives than one node's
    search may try."""
    SEARCH_EXHAUSTED = "search-exhausted"
    """The search on the node took more steps than its budget allows (upstream: the filter
    timeout); a longer search might have found a placement."""


@dataclass(frozen=True, slots=True)
class Reason:
    code: ReasonCode
    message: str
    """Node-independent text, used to group nodes in summaries."""
    detail: str = ""
    """Node-specific text (pool, device, counts)."""
    error: AllocationError | None = None
    """Set when the input is bad (upstream would fail the attempt with this error)."""


class Unallocatable(Exception):
    """Internal: the search met bad input. Carries what becomes the Reason / AllocationError.

    ``error_text`` is the full AllocationError message; ``summary`` the node-independent one.
    """

    def __init__(self, code: ReasonCode, summary: str, error_text: str) -> None:
        super().__init__(error_text)
        self.code = code
        self.summary = summary
        self.error_text = error_text

    def to_error(self) -> AllocationError:
        """The AllocationError to raise, chained from this exception's cause."""
        error = AllocationError(self.error_text)
        error.__cause__ = self.__cause__
        return error

    def to_reason(self) -> Reason:
        return Reason(self.code, self.summary, self.error_text, self.to_error())


NO_NODES = "no nodes available to schedule pods"
"""kube-scheduler's message when the cluster has no node at all (``ErrNoNodesAvailable``)."""


def nodes_available(messages: Mapping[str, int], total: int, available: int = 0) -> str:
    """``"0/12 nodes are available: 7 <why>, 4 <why>."`` — kube-scheduler's FitError wording
    (``0/%v nodes are available: %v.``), the groups most frequent first (kube-scheduler sorts
    them as text; kdra puts what stops most nodes first). ``available`` nodes fit (``why``
    says ``2/4 nodes are available``); no node at all is kube-scheduler's
    :data:`NO_NODES`."""
    if total == 0 and not messages:
        return NO_NODES
    head = f"{available}/{total} nodes are available"
    if not messages:
        return head
    groups = sorted(messages.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"{head}: {_sentence(', '.join(f'{n} {message}' for message, n in groups))}"


def none_available(message: str, total: int) -> str:
    """``"0/4 nodes are available: <message>."`` for a reason that holds on every node alike
    (kube-scheduler's PreFilter message: no count), however many nodes there are."""
    return f"0/{total} nodes are available: {_sentence(message)}"


def _sentence(text: str) -> str:
    return text if text.endswith(".") else text + "."

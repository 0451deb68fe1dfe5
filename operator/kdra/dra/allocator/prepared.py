"""A pod's claims made ready for the search, once per pod and independent of nodes: each
claim's requests with their DeviceClass found and their CEL selectors compiled,
``firstAvailable`` alternatives in order, constraints.

:func:`prepare` raises :class:`~.reasons.Unallocatable` for node-independent bad input: a
missing DeviceClass, a selector that does not compile, more than 32 devices for one claim even
with the smallest alternatives (upstream checks the same before searching any node), fields
kdra does not act on yet. The error builders at the end are shared by the per-node search
(:mod:`.search`), which raises them only when its walk reaches the bad input, as upstream's
lazy evaluation would.

Invariants:
- Prepared objects are immutable and hold no per-node state: one preparation serves every
  candidate node of a pod.
- A request's selectors are its class's, then its own (``key``: their expressions, the cache
  key of the per-node matching-device lists).
- A :class:`PreparedClaim`'s ``requests`` are always one alternative per request (the
  first, until :meth:`PreparedClaim.choose`); ``alternatives`` keeps them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kdra.dra.allocator.capacity import RequestedCapacity, parse_requests
from kdra.dra.allocator.pools import (
    DeviceEntry,
    DeviceId,
    MatchItem,
    NodePools,
    Pool,
    Selector,
    SelectorFailure,
)
from kdra.dra.allocator.reasons import ReasonCode, Unallocatable
from kdra.dra.allocator.snapshot import Snapshot
from kdra.dra.allocator.stats import Stats
from kdra.dra.allocator.tainting import tolerations_key
from kdra.dra.cel import compile_selector
from kdra.dra.errors import CelCompileError, CelRuntimeError, InvalidObject
from kdra.dra.models import (
    MAX_DEVICES_PER_CLAIM,
    All,
    BaseDeviceRequest,
    DeviceClass,
    DeviceSelector,
    DeviceToleration,
    ResourceClaim,
)


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request (or one ``firstAvailable`` alternative) with its class resolved and its
    selectors compiled."""

    name: str
    """The name results carry: ``<request>``, or ``<request>/<subrequest>``."""
    class_name: str
    device_class: DeviceClass
    selectors: tuple[Selector, ...]
    """Class selectors, then the request's own."""
    key: tuple[str, ...]
    """The selectors' expressions (and the tolerations, when any: tainting.tolerations_key):
    the cache key of the matching-device lists."""
    class_selectors: tuple[Selector, ...]
    class_key: tuple[str, ...]
    all_devices: bool
    count: int
    """Devices needed in ExactCount mode (0 for All)."""
    admin_access: bool
    claim_key: str
    claim_name: str
    parent: str = ""
    """The request's own name (``name`` without ``/<subrequest>``)."""
    rank: int = 0
    """Position among the request's ``firstAvailable`` alternatives (0: the first, or an
    ``exactly`` request)."""
    choices: int = 1
    """How many alternatives the request has (1 for ``exactly``)."""
    tolerations: tuple[DeviceToleration, ...] = ()
    """The request's device tolerations (copied into its results, as upstream)."""
    capacity: RequestedCapacity = ()
    """``capacity.requests``, parsed (:mod:`.capacity`); empty when none."""

    def describe(self) -> str:
        return f"request {self.name} of claim {self.claim_key}"


@dataclass(frozen=True, slots=True)
class PreparedConstraint:
    attribute: str
    requests: frozenset[str]
    """Requests it applies to; empty = all of the claim's. ``<request>`` covers every
    alternative of a ``firstAvailable`` request, ``<request>/<subrequest>`` only that one."""
    distinct: bool = False
    """``distinctAttribute``: values must differ (else ``matchAttribute``: must be equal)."""

    def applies(self, request: PreparedRequest) -> bool:
        return (not self.requests or request.name in self.requests
                or request.parent in self.requests)

    @property
    def label(self) -> str:
        return f"{'distinctAttribute' if self.distinct else 'matchAttribute'} {self.attribute}"


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    claim: ResourceClaim
    requests: tuple[PreparedRequest, ...]
    """The requests to satisfy: for a ``firstAvailable`` request, the alternative chosen by
    :meth:`choose` (the first one until then)."""
    constraints: tuple[PreparedConstraint, ...]
    exact_devices: int
    """Devices the ExactCount requests need together."""
    alternatives: tuple[tuple[PreparedRequest, ...], ...] = ()
    """Per request of the claim, its alternatives in order (one for ``exactly``)."""

    @property
    def key(self) -> str:
        return self.claim.key

    @property
    def prioritized(self) -> bool:
        """Some request has more than one alternative."""
        return any(len(options) > 1 for options in self.alternatives)

    def choose(self, picks: Sequence[PreparedRequest]) -> PreparedClaim:
        """This claim with ``picks`` (one alternative per request) as its requests."""
        return PreparedClaim(self.claim, tuple(picks), self.constraints,
                             sum(r.count for r in picks), self.alternatives)


def prepare(claims: Sequence[ResourceClaim], snapshot: Snapshot) -> tuple[PreparedClaim, ...]:
    """Resolve classes and compile selectors. Raises Unallocatable (node-independent)."""
    return tuple(_prepare_claim(claim, snapshot) for claim in claims)


def _prepare_claim(claim: ResourceClaim, snapshot: Snapshot) -> PreparedClaim:
    unsupported = claim.unsupported()
    if unsupported:
        fields = ", ".join(unsupported)
        raise Unallocatable(
            ReasonCode.UNSUPPORTED,
            f'claim "{claim.metadata.name}" uses {fields}, which kdra does not support yet',
            f"claim {claim.key} uses {fields}, which kdra does not support yet: it will not "
            "be allocated until kdra implements it (remove the field, or use a claim without "
            "it)",
        )
    alternatives = []
    for request in claim.spec.devices.requests:
        options = [
            _prepare_request(claim, snapshot, name, asked, request.name, rank,
                             max(len(request.first_available), 1), request.admin_access)
            for rank, (name, asked) in enumerate(request.alternatives())
        ]
        alternatives.append(tuple(options))
    first = tuple(options[0] for options in alternatives)
    minimum = sum(min(r.count for r in options) for options in alternatives)
    if minimum > MAX_DEVICES_PER_CLAIM:
        raise too_many_devices(claim, minimum)
    constraints = tuple(
        PreparedConstraint(c.attribute, frozenset(c.requests), c.distinct)
        for c in claim.spec.devices.constraints
    )
    return PreparedClaim(claim, first, constraints, sum(r.count for r in first),
                         tuple(alternatives))


def _prepare_request(claim: ResourceClaim, snapshot: Snapshot, name: str,
                     asked: BaseDeviceRequest,
                     parent: str, rank: int, choices: int, admin: bool) -> PreparedRequest:
    class_name: str = asked.device_class_name
    device_class = snapshot.get_class(class_name)
    if device_class is None:
        raise Unallocatable(
            ReasonCode.CLASS_MISSING,
            f'device class "{class_name}" not found '
            f'(request "{name}" of claim "{claim.metadata.name}")',
            f"device class {class_name} not found (request {name} of claim {claim.key})",
        )
    class_selectors = _compile(
        device_class.spec.selectors,
        f"class {device_class.metadata.name} selector",
        f"device class {device_class.metadata.name} (used by request {name} of "
        f"claim {claim.key})",
        claim,
        name,
    )
    own = _compile(asked.selectors, "selector", f"claim {claim.key}, request {name}", claim,
                   name)
    selectors = class_selectors + own
    all_devices = asked.allocation_mode == All
    try:
        capacity = parse_requests(asked.capacity.requests if asked.capacity else None)
    except ValueError as exc:
        raise Unallocatable(
            ReasonCode.INVALID_REQUEST,
            f'request "{name}" of claim "{claim.metadata.name}" has an invalid capacity '
            "request",
            f"claim {claim.key}, request {name}: {exc}; write a non-negative quantity such "
            "as 20Gi",
        ) from exc
    return PreparedRequest(
        name=name,
        class_name=class_name,
        device_class=device_class,
        selectors=selectors,
        key=tuple(s.expression for s in selectors) + tolerations_key(asked.tolerations),
        class_selectors=class_selectors,
        class_key=tuple(s.expression for s in class_selectors),
        all_devices=all_devices,
        count=0 if all_devices else asked.exact_count,
        admin_access=admin,
        claim_key=claim.key,
        claim_name=claim.metadata.name,
        parent=parent,
        rank=rank,
        choices=choices,
        tolerations=asked.tolerations,
        capacity=capacity,
    )


def _compile(
    selectors: Sequence[DeviceSelector],
    origin: str,
    owner: str,
    claim: ResourceClaim,
    request: str,
) -> tuple[Selector, ...]:
    compiled = []
    for index, selector in enumerate(selectors):
        expression = selector.cel.expression
        try:
            program = compile_selector(expression)
        except CelCompileError as exc:
            raise Unallocatable(
                ReasonCode.CEL_ERROR,
                f"{origin} #{index} does not compile "
                f'(request "{request}" of claim "{claim.metadata.name}")',
                f"{owner}: selector #{index}: CEL expression does not compile: {exc}",
            ) from exc
        compiled.append(Selector(expression, program, f"{origin} #{index}"))
    return tuple(compiled)


def too_many_devices(claim: ResourceClaim, count: int) -> Unallocatable:
    return Unallocatable(
        ReasonCode.TOO_MANY_DEVICES,
        f'claim "{claim.metadata.name}" would get more than {MAX_DEVICES_PER_CLAIM} devices',
        f"claim {claim.key} asks for {count} devices, more than the limit of "
        f"{MAX_DEVICES_PER_CLAIM} per claim",
    )


# --------------------------------------------------------------------------- errors in the walk


def pool_unusable(pool: Pool, request: PreparedRequest | None = None) -> Unallocatable:
    """An incomplete or invalid pool: an ``All`` request fails on it (``request``), and an
    invalid pool is the node's error when nothing fits (upstream: "invalid resource pools
    were encountered")."""
    if request is None:
        return Unallocatable(
            ReasonCode.POOL_INVALID,
            f"invalid resource pools were encountered ({pool.invalid})",
            f"invalid resource pools were encountered: {pool.describe()}",
        )
    code, state = ((ReasonCode.POOL_INCOMPLETE, "is being updated") if pool.incomplete
                   else (ReasonCode.POOL_INVALID, "is invalid"))
    return Unallocatable(
        code,
        f'request "{request.name}" of claim "{request.claim_name}" asks for all devices, but a '
        f"resource pool {state}",
        f"claim {request.claim_key}, request {request.name} asks for all devices, but "
        + (f"resource pool {pool.id} is incomplete (being updated: its newest generation "
           f"{pool.generation} does not have all its slices yet)" if pool.incomplete
           else pool.describe()),
    )


def selector_failed(
    entry: DeviceEntry, failure: tuple[Selector, SelectorFailure], request: PreparedRequest
) -> Unallocatable:
    selector, exc = failure
    if isinstance(exc, CelRuntimeError):
        reason = exc.message.removesuffix(f" on device {exc.device}")
        what = "CEL runtime error: " + reason
    else:
        reason = str(exc)
        what = f"cannot be evaluated: {exc}"
    problem = Unallocatable(
        ReasonCode.CEL_ERROR,
        f"selector {_short(selector.expression, 80)} fails at run time: "
        f'{_short(reason, RUNTIME_ERROR_CHARS)} (request "{request.name}" of claim '
        f'"{request.claim_name}")',
        f"claim {request.claim_key}, request {request.name}: {selector.origin} on device "
        f"{entry.id}: {what} (expression: {_short(selector.expression)})",
    )
    problem.__cause__ = exc
    return problem


def check_all_request(items: tuple[MatchItem, ...], request: PreparedRequest,
                      pools: NodePools, stats: Stats) -> None:
    """Raise why an ``All`` request cannot take every matching device of the node: a pool the
    node sees is incomplete or invalid (upstream checks every pool, matching or not), a
    matching device fails a selector at run time, or (matching otherwise) uses a feature kdra
    does not support yet."""
    if pools.unusable:
        raise pool_unusable(pools.unusable[0], request)
    for item in items:
        if item.failure is not None:
            raise selector_failed(item.entry, item.failure, request)
    for entry in pools.unsupported():
        if _matches_quietly(entry, request, stats):
            raise Unallocatable(
                ReasonCode.UNSUPPORTED,
                f'request "{request.name}" of claim "{request.claim_name}" asks for all '
                "devices, but a matching device uses a feature kdra does not support yet",
                f"claim {request.claim_key}, request {request.name} asks for all devices, "
                f"but matching device {entry.id} uses {', '.join(entry.unsupported)}, "
                "which kdra does not support yet",
            )


def with_tainted(items: tuple[MatchItem, ...], request: PreparedRequest, pools: NodePools,
                 stats: Stats) -> tuple[tuple[MatchItem, ...], frozenset[DeviceId]]:
    """An ``All`` request's matching devices including those whose taints it does not
    tolerate (upstream counts them among "all" and then cannot take them), in walk order,
    and the ids of the latter."""
    if not pools.taints.rules and not any(
            entry.taints for pool in pools.pools for entry in pool.entries):
        return items, frozenset()
    every = pools.matching(request.selectors, (*request.key, _ALL_DEVICES), stats,
                           _TOLERATE_ALL)
    if len(every) == len(items):
        return items, frozenset()
    tolerated = {item.entry.id for item in items}
    return every, frozenset(item.entry.id for item in every if item.entry.id not in tolerated)


_ALL_DEVICES = "\x00all-taints"
"""Key element of the matching list that ignores taints (never a CEL expression)."""

_TOLERATE_ALL = (DeviceToleration(operator="Exists"),)
"""Tolerates every taint (an empty key with ``Exists``)."""


def _matches_quietly(entry: DeviceEntry, request: PreparedRequest, stats: Stats) -> bool:
    """Whether every selector of ``request`` accepts ``entry``; a failing one counts as no."""
    try:
        return all(entry.evaluate(selector, stats) for selector in request.selectors)
    except (CelRuntimeError, InvalidObject):
        return False


RUNTIME_ERROR_CHARS = 400
"""Characters of a CEL runtime error kept in a reason: room for a ``no such key`` message's
keys and its "did you mean" (:class:`kdra.dra.cel._rt_core.MissingKey`)."""


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."

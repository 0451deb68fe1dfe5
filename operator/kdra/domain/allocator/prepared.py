"""A pod's claims made ready for the search: classes resolved, selectors compiled.

:func:`prepare` is node-independent: it raises :class:`~.reasons.Unallocatable` for a missing
DeviceClass, a selector that does not compile, or more than 32 devices for one claim by count
(upstream checks the same before searching any node). The error builders below are shared by
the per-node search (:mod:`.search`), which raises them only when its walk reaches the bad
input, as upstream's lazy evaluation would.

Invariants:
- Prepared objects are immutable and hold no per-node state: one preparation serves every
  candidate node of a pod.
- A request's selectors are its class's, then its own (``key``: their expressions, the cache
  key of the per-node matching-device lists).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kdra.domain.allocator.pools import DeviceEntry, MatchItem, Selector, SelectorFailure
from kdra.domain.allocator.reasons import ReasonCode, Unallocatable
from kdra.domain.allocator.snapshot import Snapshot
from kdra.domain.cel import compile_selector
from kdra.domain.errors import CelCompileError, CelRuntimeError
from kdra.domain.models import (
    MAX_DEVICES_PER_CLAIM,
    All,
    DeviceClass,
    DeviceSelector,
    ResourceClaim,
)


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A request with its class resolved and its selectors compiled."""

    name: str
    class_name: str
    device_class: DeviceClass
    selectors: tuple[Selector, ...]
    """Class selectors, then the request's own."""
    key: tuple[str, ...]
    """The selectors' expressions: the cache key of the matching-device lists."""
    class_selectors: tuple[Selector, ...]
    class_key: tuple[str, ...]
    all_devices: bool
    count: int
    """Devices needed in ExactCount mode (0 for All)."""
    admin_access: bool
    claim_key: str
    claim_name: str

    def describe(self) -> str:
        return f"request {self.name} of claim {self.claim_key}"


@dataclass(frozen=True, slots=True)
class PreparedConstraint:
    attribute: str
    requests: frozenset[str]
    """Requests it applies to; empty = all of the claim's."""

    def applies(self, request: str) -> bool:
        return not self.requests or request in self.requests


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    claim: ResourceClaim
    requests: tuple[PreparedRequest, ...]
    constraints: tuple[PreparedConstraint, ...]
    exact_devices: int
    """Devices the ExactCount requests need together."""

    @property
    def key(self) -> str:
        return self.claim.key


def prepare(claims: Sequence[ResourceClaim], snapshot: Snapshot) -> tuple[PreparedClaim, ...]:
    """Resolve classes and compile selectors. Raises Unallocatable (node-independent)."""
    return tuple(_prepare_claim(claim, snapshot) for claim in claims)


def _prepare_claim(claim: ResourceClaim, snapshot: Snapshot) -> PreparedClaim:
    requests = []
    for request in claim.spec.devices.requests:
        device_class = snapshot.get_class(request.device_class_name)
        if device_class is None:
            raise Unallocatable(
                ReasonCode.CLASS_MISSING,
                f'device class "{request.device_class_name}" not found '
                f'(request "{request.name}" of claim "{claim.metadata.name}")',
                f"device class {request.device_class_name} not found "
                f"(request {request.name} of claim {claim.key})",
            )
        class_selectors = _compile(
            device_class.spec.selectors,
            f"class {device_class.metadata.name} selector",
            f"device class {device_class.metadata.name} (used by request {request.name} of "
            f"claim {claim.key})",
            claim,
            request.name,
        )
        own = _compile(
            request.selectors,
            "selector",
            f"claim {claim.key}, request {request.name}",
            claim,
            request.name,
        )
        selectors = class_selectors + own
        all_devices = request.allocation_mode == All
        requests.append(
            PreparedRequest(
                name=request.name,
                class_name=request.device_class_name,
                device_class=device_class,
                selectors=selectors,
                key=tuple(s.expression for s in selectors),
                class_selectors=class_selectors,
                class_key=tuple(s.expression for s in class_selectors),
                all_devices=all_devices,
                count=0 if all_devices else request.exact_count,
                admin_access=request.admin_access,
                claim_key=claim.key,
                claim_name=claim.metadata.name,
            )
        )
    exact = sum(r.count for r in requests)
    if exact > MAX_DEVICES_PER_CLAIM:
        raise too_many_devices(claim, exact)
    constraints = tuple(
        PreparedConstraint(c.match_attribute, frozenset(c.requests))
        for c in claim.spec.devices.constraints
    )
    return PreparedClaim(claim, tuple(requests), constraints, exact)


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


def pool_invalid(item: MatchItem, request: PreparedRequest) -> Unallocatable:
    return Unallocatable(
        ReasonCode.POOL_INVALID,
        f'a resource pool with devices for request "{request.name}" of claim '
        f'"{request.claim_name}" is invalid (duplicate device names)',
        f"resource pool {item.pool.id} is invalid: device name {item.pool.duplicate} appears "
        f"more than once ({request.describe()})",
    )


def selector_failed(
    entry: DeviceEntry, failure: tuple[Selector, SelectorFailure], request: PreparedRequest
) -> Unallocatable:
    selector, exc = failure
    if isinstance(exc, CelRuntimeError):
        what = "CEL runtime error: " + exc.message.removesuffix(f" on device {exc.device}")
    else:
        what = f"cannot be evaluated: {exc}"
    problem = Unallocatable(
        ReasonCode.CEL_ERROR,
        f"selector {_short(selector.expression)} fails at run time "
        f'(request "{request.name}" of claim "{request.claim_name}")',
        f"claim {request.claim_key}, request {request.name}: {selector.origin} on device "
        f"{entry.id}: {what} (expression: {_short(selector.expression)})",
    )
    problem.__cause__ = exc
    return problem


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."

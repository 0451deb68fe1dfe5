"""The search's shortcuts (increasing order within a request, early stops) never change the
answer: compared with a literal depth-first search in upstream's order, on random clusters."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.dra.allocator import DeviceId, Snapshot, allocate
from kdra.dra.models import ResourceClaim
from tests.unit.builders import (
    DRIVER,
    claim_with,
    device,
    gpu_class,
    match,
    node,
    request,
    slice_with,
)

ROOT = f"{DRIVER}/root"
X_ONLY = f'device.attributes["{DRIVER}"].kind == "x"'


@dataclass(frozen=True)
class Dev:
    pool: str
    name: str
    kind: str
    root: str | None


@dataclass(frozen=True)
class Req:
    name: str
    count: int
    x_only: bool
    admin: bool


@dataclass(frozen=True)
class Claim:
    requests: tuple[Req, ...]
    constrained: tuple[str, ...] | None  # None: no constraint; (): all requests


devs_strategy = st.lists(
    st.tuples(st.sampled_from(["p0", "p1"]), st.sampled_from(["x", "y"]),
              st.sampled_from(["a", "b", "c", None])),
    min_size=1, max_size=6,
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Dev], list[Claim], set[int]]:
    raw = draw(devs_strategy)
    devs = [Dev(pool, f"d{i}", kind, root) for i, (pool, kind, root) in enumerate(raw)]
    claims = []
    slots = 0
    for _ in range(draw(st.integers(1, 2))):
        requests = []
        for r in range(draw(st.integers(1, 2))):
            count = draw(st.integers(1, 2))
            slots += count
            requests.append(Req(f"r{r}", count, draw(st.booleans()),
                                draw(st.integers(0, 5)) == 0))
        constrained = draw(st.sampled_from([None, (), ("r0",)]))
        claims.append(Claim(tuple(requests), constrained))
    busy = set(draw(st.lists(st.integers(0, len(devs) - 1), max_size=2)))
    return devs, claims, busy


def reference(devs: list[Dev], claims: list[Claim], busy: set[int]) -> list[list[str]] | None:
    """Upstream's allocateOne, literally: every slot walks every device in order."""
    order = sorted(range(len(devs)), key=lambda i: (devs[i].pool,))  # pools by name
    slots = [(ci, req) for ci, claim in enumerate(claims) for req in claim.requests
             for _ in range(req.count)]
    picked: dict[int, list[int]] = {}
    result: list[list[str]] = [[] for _ in claims]
    state: list[list[object]] = [[None, 0] for _ in claims]

    def applies(claim: Claim, req: Req) -> bool:
        return claim.constrained is not None and (not claim.constrained
                                                  or req.name in claim.constrained)

    def fill(i: int) -> bool:
        if i == len(slots):
            return True
        ci, req = slots[i]
        claim = claims[ci]
        for d in order:
            holders = picked.get(d, [])
            if req.admin:
                if ci in holders:
                    continue
            elif holders or d in busy:
                continue
            if req.x_only and devs[d].kind != "x":
                continue
            constrained = applies(claim, req)
            if constrained:
                value, count = state[ci]
                if devs[d].root is None or (count and devs[d].root != value):
                    continue
                if not count:
                    state[ci][0] = devs[d].root
                state[ci][1] = int(count) + 1  # type: ignore[call-overload]
            picked.setdefault(d, []).append(ci)
            result[ci].append(f"{req.name}:{devs[d].pool}/{devs[d].name}")
            if fill(i + 1):
                return True
            result[ci].pop()
            picked[d].pop()
            if constrained:
                state[ci][1] = int(state[ci][1]) - 1  # type: ignore[call-overload]
        return False

    return result if fill(0) else None


def build(devs: list[Dev], claims: list[Claim], busy: set[int]) -> tuple[
        Snapshot, list[ResourceClaim], set[DeviceId]]:
    slices = []
    for pool in ("p0", "p1"):
        members = [device(d.name, kind=d.kind, **({"root": d.root} if d.root else {}))
                   for d in devs if d.pool == pool]
        if members:
            slices.append(slice_with(*members, pool=pool))
    models = []
    for ci, claim in enumerate(claims):
        requests = [request(r.name, *([X_ONLY] if r.x_only else []), count=r.count,
                            admin=r.admin) for r in claim.requests]
        constraints = [] if claim.constrained is None else [match(ROOT, *claim.constrained)]
        models.append(claim_with(*requests, name=f"c{ci}", constraints=constraints))
    in_flight = {DeviceId(DRIVER, devs[i].pool, devs[i].name) for i in busy}
    return Snapshot.build(slices, [gpu_class()]), models, in_flight


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_same_answer_as_a_literal_search(scenario: tuple[list[Dev], list[Claim], set[int]]
                                         ) -> None:
    devs, claims, busy = scenario
    snapshot, models, in_flight = build(devs, claims, busy)
    results = allocate(models, snapshot, node(), in_flight)
    got = None if results is None else [
        [f"{r.request}:{r.pool}/{r.device}" for r in result.devices.results]
        for result in results
    ]
    assert got == reference(devs, claims, busy)


def test_reference_sanity() -> None:
    devs = [Dev("p0", "d0", "x", "a"), Dev("p0", "d1", "x", "b"), Dev("p0", "d2", "x", "b")]
    claims = [Claim((Req("r0", 2, False, False),), ())]
    assert reference(devs, claims, set()) == [["r0:p0/d1", "r0:p0/d2"]]

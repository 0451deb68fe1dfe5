"""Issue 26: random sequences of allocations and releases keep the accounting exact.

A node with two partitionable H100s and two shareable GPUs (memory in whole GiB steps). Each
step allocates a random partition, whole GPU or memory share (through the allocator, kdra's
order or first-fit), or releases a random allocated claim. After every step the snapshot's
accounting is compared with a literal recount from the allocated claims, and whether the
allocator found a device with a literal check of every candidate."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.dra.allocator import Snapshot, allocate
from kdra.dra.allocator.ledger import Ledger
from kdra.dra.allocator.search import busy_view
from kdra.dra.models import ResourceClaim, parse_slice
from kdra.dra.quantity import parse_quantity
from tests.unit.builders import node, slice_with
from tests.unit.dra.test_allocator_partitions import (
    CLASSES,
    ask,
    h100s,
    share,
    shared_gpu,
    with_allocation,
)

GI = Decimal(2**30)
PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "whole"]

operation = st.one_of(
    st.tuples(st.just("partition"), st.sampled_from(PROFILES)),
    st.tuples(st.just("share"), st.integers(min_value=1, max_value=45)),
    st.tuples(st.just("release"), st.integers(min_value=0, max_value=1000)),
)


def build() -> Snapshot:
    shared = slice_with(shared_gpu("gpu-s0", "40Gi"), shared_gpu("gpu-s1", "40Gi"),
                        name="shared", pool="shared")
    return Snapshot.build([*h100s(2), shared], CLASSES)


def literal(snapshot: Snapshot, claims: dict[str, ResourceClaim]) -> dict[str, Any]:
    """What the allocated claims hold, recounted from their results alone."""
    exclusive: list[tuple[str, str]] = []
    shares: dict[tuple[str, str], list[Decimal]] = {}
    for claim in claims.values():
        assert claim.status.allocation is not None
        for result in claim.status.allocation.devices.results:
            key = (result.pool, result.device)
            if result.share_id is None:
                exclusive.append(key)
            else:
                amount = parse_quantity((result.consumed_capacity or {})["memory"]).value
                shares.setdefault(key, []).append(amount)
    held = set(exclusive) | set(shares)
    counters: dict[tuple[str, str], Decimal] = {}
    totals: dict[tuple[str, str], Decimal] = {}
    consumes: dict[tuple[str, str], Any] = {}
    for pool in snapshot.node_pools(node()).pools:
        for set_name, values in pool.counter_sets.items():
            for counter, total in values.items():
                totals[(set_name, counter)] = total
        for entry in pool.entries:
            consumes[(pool.name, entry.id.device)] = entry.consumes
            if (pool.name, entry.id.device) in held:
                for set_name, counter, amount in entry.consumes:
                    key = (set_name, counter)
                    counters[key] = counters.get(key, Decimal(0)) + amount
    return {"exclusive": exclusive, "shares": shares, "counters": counters,
            "totals": totals, "consumes": consumes}


def check(snapshot: Snapshot, claims: dict[str, ResourceClaim]) -> dict[str, Any]:
    facts = literal(snapshot, claims)
    assert len(facts["exclusive"]) == len(set(facts["exclusive"])), "a device twice"
    for key, value in facts["counters"].items():
        assert value <= facts["totals"][key], key
    for amounts in facts["shares"].values():
        assert sum(amounts) <= 40 * GI
    ledger = Ledger(snapshot.node_pools(node()), busy_view(snapshot, ()), snapshot.shares)
    flat = {(key[2], counter): amount for key, used in ledger.counters.used.items()
            for counter, amount in used.items()}
    assert flat == facts["counters"]
    got = {(d.pool, d.device): (use.count, use.consumed.get("memory", Decimal(0)))
           for d, use in snapshot.shares.items()}
    assert got == {k: (len(v), sum(v)) for k, v in facts["shares"].items()}
    assert {(d.pool, d.device) for d in snapshot.devices_in_use} == set(facts["exclusive"])
    return facts


def fits_literally(facts: dict[str, Any], kind: str, value: Any) -> bool:
    """Whether some device could take the request, checked candidate by candidate."""
    if kind == "share":
        return any(sum(facts["shares"].get(("shared", name), [])) + value * GI <= 40 * GI
                   for name in ("gpu-s0", "gpu-s1"))
    held = set(facts["exclusive"]) | set(facts["shares"])
    for (pool, name), consumes in facts["consumes"].items():
        if pool == "shared" or (pool, name) in held:
            continue
        is_whole = "-mig-" not in name
        if (value == "whole") != is_whole:
            continue
        if not is_whole and f"-mig-{value.replace('.', '-')}-" not in name:
            continue
        if all(facts["counters"].get((s, c), Decimal(0)) + a <= facts["totals"][(s, c)]
               for s, c, a in consumes):
            return True
    return False


@settings(max_examples=60, deadline=None)
@given(st.lists(operation, min_size=1, max_size=30), st.booleans())
def test_random_allocations_and_releases_keep_the_accounting_exact(
        steps: list[tuple[str, Any]], scoring: bool) -> None:
    snapshot = build()
    claims: dict[str, ResourceClaim] = {}
    for number, (kind, value) in enumerate(steps):
        facts = check(snapshot, claims)
        if kind == "release":
            if claims:
                key = sorted(claims)[value % len(claims)]
                del claims[key]
                snapshot.remove_claim(key)
            continue
        claim = (ask(f"c{number}", value) if kind == "partition"
                 else share(f"c{number}", f"{value}Gi"))
        results = allocate([claim], snapshot, node(), scoring=scoring)
        assert (results is not None) == fits_literally(facts, kind, value), (kind, value)
        if results is not None:
            allocated = with_allocation(claim, results[0])
            claims[allocated.key] = allocated
            snapshot.upsert_claim(allocated)
    check(snapshot, claims)
    for key in list(claims):
        del claims[key]
        snapshot.remove_claim(key)
    assert not snapshot.shares and not snapshot.devices_in_use
    assert check(snapshot, claims)["counters"] == {}


def test_the_fixture_parses() -> None:
    assert parse_slice(build().slices().__next__().model_dump(by_alias=True,
                                                              exclude_none=True))

"""kdra.dra.usage.utilisation with a :class:`UsageMemo` kept between calls (the operator's
scrapes): whatever changes between two calls — claims taking, releasing or sharing devices, a
device turning unhealthy, a slice republished (equal or changed), a class added or removed —
the memo's answer equals a fresh computation's."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.dra.allocator import Snapshot
from kdra.dra.models import parse_class, parse_slice
from kdra.dra.usage.claims import ClaimRow, claims_of
from kdra.dra.usage.utilisation import UsageMemo, utilisation
from tests.unit.cli.test_describe import raw_slice
from tests.unit.cli.test_describe_gpus import GPU, slices
from tests.unit.dra.test_utilisation import GPU_CLASS, device_class
from tests.unit.dra.test_utilisation_counters import MIG, PARTITION_CLASS, counted_pool

MIG_DEVICES = [d["name"] for s in slices(MIG) for d in s["spec"].get("devices", [])]
OTHER = "other"  # a second driver's pool with a shared device and counters (counted_pool)
SHARED_POOL = [{**s, "metadata": {"name": f"{OTHER}-{s['metadata']['name']}"},
                "spec": {**s["spec"], "driver": OTHER}} for s in counted_pool()]
PLAIN = [raw_slice("n2", *[{"name": f"gpu-{i}", "attributes": {
    "productName": {"string": "NVIDIA H100"}}} for i in range(3)])]
CLASSES = [GPU_CLASS, PARTITION_CLASS, device_class("others", f'device.driver == "{OTHER}"')]


def holding(name: str, driver: str, pool: str, device: str, share: str | None,
            unhealthy: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "r", "driver": driver, "pool": pool, "device": device}
    if share is not None:
        result |= {"shareID": share, "consumedCapacity": {"memory": "1Gi"}}
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}},
                              "reservedFor": [{"resource": "pods", "name": "p", "uid": "p"}]}
    if unhealthy:
        status["devices"] = [{"driver": driver, "pool": pool, "device": device, "conditions": [
            {"type": "Ready", "status": "False", "reason": "DeviceUnhealthy"}]}]
    return {"metadata": {"name": name, "namespace": "ns", "uid": name}, "status": status}


HOLD = st.one_of(
    st.tuples(st.just(GPU), st.just("n1"), st.sampled_from(MIG_DEVICES), st.none()),
    st.tuples(st.just(GPU), st.just("n2"), st.sampled_from(["gpu-0", "gpu-1", "gpu-9"]),
              st.none()),
    st.tuples(st.just(OTHER), st.just("n1"), st.sampled_from(["p4", "p8"]), st.none()),
    st.tuples(st.just(OTHER), st.just("n1"), st.just("s"), st.sampled_from(["a", "b"])),
)
STEP = st.one_of(
    st.tuples(st.just("hold"), st.integers(0, 5), HOLD, st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 5)),
    st.tuples(st.just("republish"), st.booleans()),  # True: a changed spec
    st.tuples(st.just("class"), st.booleans()),  # True: add the H100 class; False: remove
)


def rows_of(found: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((u.device_class, u.node, u.driver, u.pool, u.free, u.allocated, u.blocked,
                   u.unhealthy) for u in found)


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=12))
def test_a_memo_kept_between_calls_answers_as_a_fresh_computation(steps: list[Any]) -> None:
    snapshot = Snapshot.build(slices=[parse_slice(s) for s in [*slices(MIG), *SHARED_POOL,
                                                                 *PLAIN]],
                              classes=[parse_class(c) for c in CLASSES])
    claims: dict[int, ClaimRow] = {}
    memo = UsageMemo()
    generation = 0
    for step in [("start",), *steps]:
        if step[0] == "hold":
            _, slot, (driver, pool, device, share), unhealthy = step
            (claims[slot],) = claims_of([holding(f"c{slot}", driver, pool, device, share,
                                                 unhealthy)])
        elif step[0] == "release":
            claims.pop(step[1], None)
        elif step[0] == "republish":
            generation += step[1]
            devices = [{"name": f"gpu-{i}", "attributes": {"productName": {
                "string": "NVIDIA H100" if i != generation % 3 else "other"}}}
                for i in range(3)]
            snapshot.upsert_slice(parse_slice(raw_slice("n2", *devices)))
        elif step[0] == "class":
            if step[1]:
                snapshot.upsert_class(parse_class(device_class(
                    "h100", f'device.attributes["{GPU}"].productName.contains("H100")')))
            else:
                snapshot.remove_class("h100")
        rows = list(claims.values())
        assert rows_of(utilisation(snapshot, rows, memo=memo)) == \
            rows_of(utilisation(snapshot, rows)), step


def test_nothing_changed_walks_no_device() -> None:
    """The second call with the same rows, slices and classes evaluates no selector and
    answers the same; a changed claim in one pool makes only that pool be walked again."""
    from kdra.dra.allocator.stats import Stats

    snapshot = Snapshot.build(slices=[parse_slice(s) for s in [*slices(MIG), *PLAIN]],
                              classes=[parse_class(c) for c in CLASSES])
    rows = claims_of([holding("a", GPU, "n1", "gpu-0", None, False)])
    memo = UsageMemo()
    first = utilisation(snapshot, rows, memo=memo)
    walked = Stats()
    assert rows_of(utilisation(snapshot, rows, Stats(), memo=memo)) == rows_of(first)
    # A fresh selector memo per device would show as evaluations; the memo avoids even the
    # memo hits: no device is looked at.
    utilisation(snapshot, rows, walked, memo=memo)
    assert (walked.cel_evaluations, walked.memo_hits) == (0, 0)
    more = [*rows, *claims_of([holding("b", GPU, "n2", "gpu-1", None, False)])]
    utilisation(snapshot, more, walked, memo=memo)
    assert 0 < walked.memo_hits <= 3 * len(CLASSES)  # n2's 3 devices, not n1's 30

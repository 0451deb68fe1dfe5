"""The binder with a tenant's costly selector on a node with 128 devices (issue 36): its
evaluation is paced like a long search (``kdra.dra.allocator.pacing``) — the event loop
turns between every one or two evaluations, pods queued behind it are allocated meanwhile,
and out of budget it is ``AllocationSearchExhausted`` with a message that names its
selectors' cost. Counted in evaluations between two turns of the loop, not timed; the real
API server and the webhooks' answers are tests/e2e/test_hostile_cel.py's."""

from __future__ import annotations

import asyncio
from typing import Any

from kdra.dra.allocator.pacing import UNITS_PER_STEP
from kdra.dra.scheduling import SEARCH_EXHAUSTED, SearchBudget
from kdra.kube.core.podclaims import FINALIZER
from kdra.kube.events import EventRecorder
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings
from tests.unit.builders import DRIVER
from tests.unit.operator.test_binder_search_budget import (
    NS,
    OTHER,
    Recording,
    raw_class,
    raw_node,
    raw_pod,
)

COSTLY = "lists.range(1000).all(i, i >= 0)"
"""4,000 units at run time (0.1 ms): two evaluations exceed a 1,000-step slice."""
UNITS = 4000
DEVICES = 128


def big_slice(node: str, driver: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"s-{node}", "uid": f"uid-{node}", "resourceVersion": "1"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                     "devices": [{"name": f"dev-{i}", "attributes": {"index": {"int": i}}}
                                 for i in range(count)]}}


def raw_claim(name: str, cls: str, *selectors: str) -> dict[str, Any]:
    exactly = {"deviceClassName": cls,
               "selectors": [{"cel": {"expression": s}} for s in selectors]}
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def test_a_costly_selector_is_evaluated_between_turns_of_the_loop() -> None:
    budget = SearchBudget(steps=40 * UNITS // UNITS_PER_STEP, timeout=120.0, slice=1000)

    async def scenario() -> tuple[Recording, list[int]]:
        client = Recording()
        binder = Binder(client, EventRecorder(client),  # type: ignore[arg-type]
                        claims=claim_store(),
                        settings=BinderSettings(prepare_timeout=30, search=budget))
        binder.claims.upsert(raw_claim("costly", DRIVER, COSTLY))
        for i in range(3):
            binder.claims.upsert(raw_claim(f"small-{i}", OTHER))
        pods = [raw_pod("costly", ["costly"], "2026-01-01T00:00:00Z"),
                *(raw_pod(f"small-{i}", [f"small-{i}"], f"2026-01-01T00:00:0{i + 1}Z")
                  for i in range(3))]
        binder.prime(nodes=[raw_node("node-1"), raw_node("node-2")],
                     slices=[big_slice("node-1", DRIVER, DEVICES),
                             big_slice("node-2", OTHER, 4)],
                     classes=[raw_class(DRIVER), raw_class(OTHER)], pods=pods)
        stats = binder.snapshot.stats
        per_turn: list[int] = []  # costly evaluations between two turns of the loop
        binder.start()
        try:
            seen = stats.cel_cost
            for _ in range(20_000):
                await asyncio.sleep(0)
                per_turn.append((stats.cel_cost - seen) // UNITS)
                seen = stats.cel_cost
                if any(kind == "pod-status" and name == "costly"
                       for kind, name, _ in client.log):
                    break
        finally:
            await binder.stop()
        return client, per_turn

    client, per_turn = asyncio.run(scenario())
    print(f"\n[pacing] {sum(per_turn)} costly evaluations over {len(per_turn)} turns of the "
          f"loop, at most {max(per_turn)} in one")
    # Node-1's share of the budget (two candidate nodes: half each) is 20 evaluations.
    # Before pacing, the inline slice evaluated all 128 devices in one turn of the loop.
    assert sum(per_turn) == budget.node_steps(2) * UNITS_PER_STEP // UNITS == 20
    assert max(per_turn) <= 2
    kinds = [(kind, name) for kind, name, _ in client.log]
    small = [i for i, (kind, name) in enumerate(kinds) if kind == "claim"]
    assert [kinds[i][1] for i in small] == ["small-0", "small-1", "small-2"], client.log
    gave_up = kinds.index(("pod-status", "costly"))
    assert max(small) < gave_up  # allocated while the costly pod was still being evaluated
    condition = client.log[gave_up][2]
    assert condition["reason"] == SEARCH_EXHAUSTED
    message = condition["message"]
    assert f"its selectors costing {20 * UNITS} units of CEL at run time" in message, message
    assert "allocation search gave up evaluating CEL selectors (claims \"costly\")" in message

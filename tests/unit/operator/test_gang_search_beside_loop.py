"""A tenant's gang cannot hold the binder's scheduling loop (hostile input, issue 40): a
gang's joint search may take its members' budget together (up to a minute), so it runs in
slices beside the loop, as one pod's long search does (tests/unit/operator/
test_binder_search_budget.py) — the pods queued behind the gang get their claims allocated
while the gang is still searching. The client records writes; nothing here talks to an API
server."""

from __future__ import annotations

import asyncio
from typing import Any

from kdra.dra.scheduling import POD_GROUP_LABEL
from kdra.operator.core.gangs import MIN_MEMBER_ANNOTATION
from tests.unit.operator.test_binder_search_budget import (
    OTHER,
    Recording,
    budget_binder,
    raw_claim,
    raw_pod,
    run_until,
)

MEMBERS = 3


def gang_pod(name: str, claims: list[str], created: str) -> dict[str, Any]:
    pod = raw_pod(name, claims, created)
    pod["metadata"]["labels"] = {POD_GROUP_LABEL: "hostile"}
    pod["metadata"]["annotations"][MIN_MEMBER_ANNOTATION] = str(MEMBERS)
    return pod


def test_pods_behind_a_gang_are_allocated_while_the_gang_searches() -> None:
    async def scenario() -> Recording:
        client = Recording()
        binder = budget_binder(client)
        # Each member of the hostile gang: five one-device claims ahead of a claim for all
        # twelve devices of node-1 — a search that spends its node's whole budget. The small
        # pods (queued after the gang) take one device each of another driver on node-2.
        pods = []
        for m in range(MEMBERS):
            mine = [f"m{m}-one-{i}" for i in range(5)]
            for name in mine:
                binder.claims.upsert(raw_claim(name))
            binder.claims.upsert(raw_claim(f"m{m}-everything", all_devices=True))
            pods.append(gang_pod(f"member-{m}", [*mine, f"m{m}-everything"],
                                 f"2026-01-01T00:00:0{m}Z"))
        for i in range(3):
            binder.claims.upsert(raw_claim(f"small-{i}", cls=OTHER))
            pods.append(raw_pod(f"small-{i}", [f"small-{i}"], f"2026-01-01T00:01:0{i}Z"))
        await run_until(binder, pods, client, lambda entry: entry[0] == "pod-status"
                        and entry[1].startswith("member-"))
        return client

    client = asyncio.run(scenario())
    kinds = [(kind, name) for kind, name, _ in client.log]
    small = [i for i, (kind, name) in enumerate(kinds) if kind == "claim"]
    assert [kinds[i][1] for i in small] == ["small-0", "small-1", "small-2"], client.log
    gang_told = min(i for i, (kind, name) in enumerate(kinds)
                    if kind == "pod-status" and name.startswith("member-"))
    assert max(small) < gang_told, client.log
    message = client.log[gang_told][2]["message"]
    assert message.startswith("gang 'hostile' needs 3 pods (3 pending) placed together: "
                              "at most 0 of them fit at once"), message
    # Nothing of the gang was written.
    assert not any(kind == "claim" and name.startswith("m") for kind, name in kinds)

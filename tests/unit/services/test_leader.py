"""Releasing the leader-election Lease on shutdown, also after a renewal that was cancelled in
flight but reached the server (the Lease held in memory is then stale)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kdra.kube.client import Conflict, Resource
from kdra.services.leader import LeaderElector


class LeaseServer:
    """One Lease with resourceVersion preconditions, as the API server keeps it."""

    def __init__(self, holder: str) -> None:
        self.lease: dict[str, Any] = {
            "metadata": {"name": "kdra-operator", "namespace": "kdra-system",
                         "resourceVersion": "1"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 6}}
        self.replaced = 0

    def bump(self, **spec: Any) -> None:
        self.lease["spec"].update(spec)
        self.lease["metadata"]["resourceVersion"] = str(
            int(self.lease["metadata"]["resourceVersion"]) + 1)

    async def get(self, res: Resource, name: str, namespace: str | None = None
                  ) -> dict[str, Any]:
        return copy.deepcopy(self.lease)

    async def replace(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        self.replaced += 1
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        self.bump(**body["spec"])
        return copy.deepcopy(self.lease)


def elector(server: LeaseServer) -> LeaderElector:
    leader = LeaderElector(server, namespace="kdra-system",  # type: ignore[arg-type]
                           name="kdra-operator", identity="a", lease_duration=6)
    leader._lease = copy.deepcopy(server.lease)
    return leader


def test_release_empties_the_holder() -> None:
    server = LeaseServer("a")
    asyncio.run(elector(server).release())
    assert server.lease["spec"]["holderIdentity"] == ""


def test_release_after_a_renewal_that_went_through_unseen() -> None:
    server = LeaseServer("a")
    leader = elector(server)
    server.bump(renewTime="later")  # the cancelled renewal reached the server
    asyncio.run(leader.release())
    assert server.lease["spec"]["holderIdentity"] == ""
    assert server.replaced == 2  # the stale one (Conflict), then the fresh one


def test_release_leaves_a_lease_someone_else_took() -> None:
    server = LeaseServer("a")
    leader = elector(server)
    server.bump(holderIdentity="b")
    asyncio.run(leader.release())
    assert server.lease["spec"]["holderIdentity"] == "b"
    assert server.replaced == 1


def test_release_without_a_lease_writes_nothing() -> None:
    server = LeaseServer("b")
    leader = elector(server)
    leader._lease = None
    asyncio.run(leader.release())
    assert server.replaced == 0

"""Releasing the leader-election Lease on shutdown, also after a renewal that was cancelled in
flight but reached the server (the Lease held in memory is then stale)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kdra.kube.errors import Conflict
from kdra.kube.leader import LeaderElector
from kdra.kube.resources import Resource


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


def at(seconds_ago: float) -> str:
    import datetime as dt

    from kdra.dra.timestamps import micro_time

    return micro_time(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago))


def standby(server: LeaseServer, duration: float = 15) -> LeaderElector:
    return LeaderElector(server, namespace="kdra-system",  # type: ignore[arg-type]
                         name="kdra-operator", identity="standby", lease_duration=duration)


def test_a_standby_honours_at_most_four_lease_durations_of_another_holder() -> None:
    # A Lease written with an absurd duration (issue 22, attack 5: an agent wrote 2e9 s):
    # the standby waits 4 x 15 s = 60 s after the last renewal, not 63 years.
    server = LeaseServer("attacker")
    server.bump(leaseDurationSeconds=2_000_000_000, renewTime=at(30))
    assert not asyncio.run(standby(server).try_acquire())  # within 60 s: still honoured
    server.bump(renewTime=at(61))
    assert asyncio.run(standby(server).try_acquire())
    assert server.lease["spec"]["holderIdentity"] == "standby"
    assert server.lease["spec"]["leaseDurationSeconds"] == 15


def test_a_renewal_time_in_the_future_is_honoured_only_while_the_lease_changes() -> None:
    from unittest import mock

    server = LeaseServer("attacker")
    server.bump(leaseDurationSeconds=15, renewTime=at(-10 * 365 * 86400))  # ten years ahead
    leader = standby(server)
    clock = [1000.0]
    with mock.patch("kdra.kube.leader.time.monotonic", side_effect=lambda: clock[0]):
        assert not asyncio.run(leader.try_acquire())
        clock[0] += 14  # unchanged for less than its duration
        assert not asyncio.run(leader.try_acquire())
        server.bump(renewTime=at(-10 * 365 * 86400 - 1))  # someone renews it: counted anew
        clock[0] += 14
        assert not asyncio.run(leader.try_acquire())
        clock[0] += 16  # unchanged for longer than its duration: expired
        assert asyncio.run(leader.try_acquire())
    assert server.lease["spec"]["holderIdentity"] == "standby"


def test_a_live_leaders_lease_is_honoured_for_its_own_duration() -> None:
    server = LeaseServer("leader")
    server.bump(leaseDurationSeconds=15, renewTime=at(10))
    assert not asyncio.run(standby(server).try_acquire())
    server.bump(renewTime=at(16))
    assert asyncio.run(standby(server).try_acquire())


def test_garbage_in_the_duration_falls_back_to_the_own_one() -> None:
    server = LeaseServer("attacker")
    server.bump(leaseDurationSeconds="forever", renewTime=at(16))
    assert asyncio.run(standby(server).try_acquire())

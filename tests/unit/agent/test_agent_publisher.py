"""The agent's slice publisher against a fake API: what a resync costs and what it repairs.

A resync of slices that are as published reads nothing but the slices (the Node, their owner,
is read again only before a write); a slice someone deleted is written again, owned by the
Node as it is now; a multi-node agent hands each node its slices from one LIST."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kdra.agent.core.inventory import parse_inventory
from kdra.agent.publisher import SlicePublisher
from kdra.kube.errors import NotFound
from kdra.kube.resources import NODES, SLICES, Resource

NODE = "node-a"


class FakeApi:
    """Nodes and slices; every call is recorded as (verb, plural)."""

    def __init__(self) -> None:
        self.node_uid = "uid-1"
        self.slices: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.version = 0

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.slices[stored["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        self.calls.append(("get", res.plural))
        if res is NODES:
            return {"metadata": {"name": name, "uid": self.node_uid}}
        if name not in self.slices:
            raise NotFound(404, "NotFound", name)
        return copy.deepcopy(self.slices[name])

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None) -> list[Any]:
        self.calls.append(("list", res.plural))
        assert res is SLICES and field_selector == f"spec.nodeName={NODE}"
        return [copy.deepcopy(s) for s in self.slices.values()]

    async def create(self, res: Resource, body: dict[str, Any],
                     namespace: str | None = None) -> Any:
        self.calls.append(("create", res.plural))
        return self._stored(body)

    async def replace(self, res: Resource, body: dict[str, Any]) -> Any:
        self.calls.append(("replace", res.plural))
        return self._stored(body)

    async def delete(self, res: Resource, name: str, namespace: str | None = None,
                     **kw: Any) -> Any:
        self.calls.append(("delete", res.plural))
        self.slices.pop(name, None)
        return {}


def devices() -> dict[str, Any]:
    inventory = parse_inventory("gpus: ['2 x H100-80GB']", NODE)
    return {driver: inventory.for_driver(driver) for driver in inventory.drivers}


def published() -> tuple[FakeApi, SlicePublisher]:
    api = FakeApi()
    publisher = SlicePublisher(api, NODE)  # type: ignore[arg-type]
    assert asyncio.run(publisher.publish(devices())) == 1
    assert api.calls == [("get", "nodes"), ("create", "resourceslices")]
    api.calls.clear()
    return api, publisher


def test_a_resync_of_unchanged_slices_reads_only_the_slices() -> None:
    api, publisher = published()
    assert asyncio.run(publisher.resync(devices())) == 0
    assert api.calls == [("list", "resourceslices")]


def test_a_resync_with_the_slices_already_listed_makes_no_request() -> None:
    api, publisher = published()
    listed = [copy.deepcopy(s) for s in api.slices.values()]
    assert asyncio.run(publisher.resync(devices(), listed)) == 0
    assert api.calls == []


def test_a_deleted_slice_is_written_again_owned_by_the_node_as_it_is_now() -> None:
    api, publisher = published()
    api.slices.clear()  # someone deleted it; and the Node was created again meanwhile
    api.node_uid = "uid-2"
    assert asyncio.run(publisher.resync(devices())) == 1
    assert api.calls == [("list", "resourceslices"), ("get", "nodes"),
                         ("create", "resourceslices")]
    (written,) = api.slices.values()
    assert [ref["uid"] for ref in written["metadata"]["ownerReferences"]] == ["uid-2"]
    # A newer generation than the deleted one: a pool's generation only grows (a consumer
    # that still holds the deleted slice never mistakes the new one for it).
    assert written["spec"]["pool"]["generation"] == 1


def deletions(reason: str) -> float:
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value("kdra_agent_slice_deletions_total", {"reason": reason})
    return value or 0.0


def test_a_foreign_slice_in_the_agents_pool_is_deleted_logged_and_counted(
        caplog: Any) -> None:
    """A slice applied by hand into the agent's pool (the seed's static cats next to an agent
    serving the same node) makes the pool invalid: the next resync deletes it and says so."""
    api, publisher = published()
    (own,) = api.slices.values()
    foreign = copy.deepcopy(own)
    foreign["metadata"] = {"name": "node-a-by-hand"}
    api.slices["node-a-by-hand"] = foreign
    before = {reason: deletions(reason) for reason in ("foreign", "superseded")}
    with caplog.at_level("INFO", logger="kdra.agent.publisher"):
        assert asyncio.run(publisher.resync(devices())) == 1
    assert sorted(api.slices) == [own["metadata"]["name"]]
    assert deletions("foreign") == before["foreign"] + 1
    assert deletions("superseded") == before["superseded"]
    (record,) = [r for r in caplog.records if "node-a-by-hand" in r.getMessage()]
    assert record.levelname == "WARNING"
    assert "the agent did not write it" in record.getMessage()


def test_wiping_at_start_up_names_every_slice_it_deletes(caplog: Any) -> None:
    api, _ = published()
    (name,) = api.slices
    before = deletions("start-up")
    fresh = SlicePublisher(api, NODE)  # type: ignore[arg-type]
    with caplog.at_level("INFO", logger="kdra.agent.publisher"):
        assert asyncio.run(fresh.wipe(["gpu.kdra.dev"])) == 1
    assert not api.slices
    assert deletions("start-up") == before + 1
    assert any(f"deleted ResourceSlice {name} (driver gpu.kdra.dev, pool {NODE}, generation 0) "
               "at start-up" in r.getMessage() for r in caplog.records)

"""Publishing a node's ResourceSlices: one pool per driver, named after the node.

Invariants:
- At start-up :meth:`SlicePublisher.wipe` deletes every slice of this node for the agent's
  drivers (``spec.nodeName=<node>``), as kubelet does when a plugin registers, and remembers
  their highest generation: the next publication is one newer, so no consumer can mistake
  fresh slices for stale ones.
- A publication writes nothing when the pool is unchanged; otherwise every slice of the pool
  is written with the new generation and slices the new generation does not use are deleted
  (the allocator ignores an incomplete newest generation meanwhile). A pool's generation only
  grows, also when all its slices were deleted behind the agent's back (the kubelet deletes
  its node's native slices when it starts).
- Nothing is published while the Node object does not exist: slices carry an owner reference
  to the Node, and a node that was deleted must not get its slices back.
- The agent writes only slices with its own deterministic names and node; other slices of the
  same node (other drivers) are never touched.
- Every slice the agent deletes is logged with its name and why, and counted
  (``kdra_agent_slice_deletions_total{reason}``): ``start-up`` (the node's slices wiped when
  the agent starts), ``superseded`` (the agent's own slice that a new generation no longer
  uses), ``foreign`` (a slice in the agent's pool that it did not write, e.g. a static one
  applied by hand: two publishers of one pool make it invalid, so the agent's pool wins) and
  ``driver-gone`` (the node has no devices of that driver any more).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kdra.agent import metrics
from kdra.agent.core.inventory_devices import InventoryDevice
from kdra.agent.core.publication import Publication, plan_publication, slice_name
from kdra.kube.client import KubeClient
from kdra.kube.errors import Conflict, NotFound
from kdra.kube.resources import NODES, SLICES, Resource
from kdra.kube.store import JSON

log = logging.getLogger(__name__)


class SlicePublisher:
    def __init__(self, client: KubeClient, node: str, resource: Resource = SLICES) -> None:
        """``resource``: kdra's ResourceSlices, or ``resource.k8s.io/v1``'s (native flavour)."""
        self.client = client
        self.node = node
        self.resource = resource
        self._published: dict[str, list[JSON]] = {}
        self._min_generation: dict[str, int] = {}
        self._node_missing_logged = False
        self._node_owner: dict[str, str] | None = None  # the Node as the slices' owner

    @property
    def drivers(self) -> list[str]:
        return sorted(self._published)

    def generation(self, driver: str) -> int | None:
        slices = self._published.get(driver) or []
        return max((int(s["spec"]["pool"]["generation"]) for s in slices), default=None)

    async def _list(self) -> list[JSON]:
        return await self.client.list(self.resource, field_selector=f"spec.nodeName={self.node}")

    async def wipe(self, drivers: Iterable[str]) -> int:
        """Delete this node's slices of ``drivers``; returns how many were deleted."""
        wanted = set(drivers)
        deleted = 0
        for obj in await self._list():
            driver = obj["spec"].get("driver")
            if driver not in wanted or obj["spec"].get("nodeName") != self.node:
                continue
            generation = int(obj["spec"].get("pool", {}).get("generation", 0))
            self._min_generation[driver] = max(self._min_generation.get(driver, 0),
                                               generation + 1)
            meta = obj["metadata"]
            try:
                await self.client.delete(self.resource, meta["name"], uid=meta.get("uid"))
            except (NotFound, Conflict):
                continue
            deleted += 1
            metrics.record_agent_slice_deletion("start-up")
            log.info("node %s: deleted ResourceSlice %s (driver %s, pool %s, generation %d) "
                     "at start-up: an agent starting on a node replaces its slices", self.node,
                     meta["name"], driver, obj["spec"].get("pool", {}).get("name"), generation)
        for driver in wanted:
            self._published[driver] = []
        return deleted

    async def _owner(self) -> dict[str, str] | None:
        try:
            node = await self.client.get(NODES, self.node)
        except NotFound:
            if not self._node_missing_logged:
                log.warning("node %s: the Node object does not exist; not publishing slices "
                            "until it does", self.node)
                self._node_missing_logged = True
            return None
        self._node_missing_logged = False
        self._node_owner = {"name": self.node, "uid": node["metadata"]["uid"]}
        return self._node_owner

    def _plan(self, driver: str, devices: tuple[InventoryDevice, ...],
              owner: dict[str, str]) -> Publication:
        return plan_publication(node=self.node, driver=driver, devices=devices,
                                published=self._published.get(driver, []), owner=owner,
                                min_generation=self._min_generation.get(driver, 0),
                                api_version=self.resource.api_version)

    async def publish(self, devices: dict[str, tuple[InventoryDevice, ...]]) -> int:
        """Make the node's pools match ``devices`` (driver → devices); drivers no longer in
        ``devices`` lose their slices. Returns the number of slices written.

        The Node (the slices' owner) is read again before anything is written, not when
        nothing is: a resync of unchanged slices costs no request but its LIST. (A Node
        deleted and created again under the same name gets a new UID; the garbage collector
        then deletes the slices that name the old one, and the next resync, finding them
        gone, writes them again with the new owner.)"""
        cached = self._node_owner
        if cached is not None and set(self._published) <= set(devices) and not any(
                self._plan(driver, items, cached).changed for driver, items in devices.items()):
            return 0
        owner = await self._owner()
        if owner is None:
            return 0
        written = 0
        for driver in sorted(set(self._published) - set(devices)):
            for obj in self._published.pop(driver):
                await self._delete(obj["metadata"]["name"], "driver-gone",
                                   f"driver {driver} has no devices on the node any more")
        for driver, items in sorted(devices.items()):
            written += await self._publish_pool(driver, items, owner)
        return written

    async def _publish_pool(self, driver: str, devices: tuple[InventoryDevice, ...],
                            owner: dict[str, str]) -> int:
        current = self._published.get(driver, [])
        plan = self._plan(driver, devices, owner)
        if not plan.changed:
            return 0
        by_name = {obj["metadata"]["name"]: obj for obj in current}
        result: list[JSON] = []
        for body in plan.slices:
            result.append(await self._write(body, by_name.get(body["metadata"]["name"])))
        own = {slice_name(self.node, driver, index) for index in range(len(current))}
        for name in plan.stale:
            if name in own:
                await self._delete(name, "superseded",
                                   f"generation {plan.generation} of pool {self.node} ({driver}) "
                                   "no longer uses it")
            else:
                await self._delete(name, "foreign",
                                   f"it publishes devices in pool {self.node} of {driver}, the "
                                   "pool this agent publishes, but the agent did not write it "
                                   "(two publishers make the pool invalid: duplicate device "
                                   "names); publish a node's devices either with the agent or "
                                   "by hand, not both")
        self._published[driver] = result
        self._min_generation[driver] = plan.generation
        metrics.record_slice_publish(len(result))
        tainted = sum(1 for device in devices if device.taints)
        log.info("node %s: published %d slice(s) of %s, generation %d (%d device(s), %d "
                 "tainted)", self.node, len(result), driver, plan.generation,
                 len(devices), tainted)
        return len(result)

    async def _write(self, body: JSON, existing: JSON | None) -> JSON:
        name = body["metadata"]["name"]
        for _ in range(5):
            if existing is None:
                try:
                    return await self.client.create(self.resource, body)
                except Conflict as exc:
                    if not exc.already_exists:
                        raise
                    existing = await self.client.get(self.resource, name)
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            try:
                return await self.client.replace(self.resource, body)
            except NotFound:
                existing = None
                body["metadata"].pop("resourceVersion", None)
            except Conflict:
                existing = await self.client.get(self.resource, name)
        raise RuntimeError(f"slice {name} keeps changing under the agent")

    async def _delete(self, name: str, reason: str, why: str) -> None:
        """Delete one slice, saying which and why (``reason``: the metric's label)."""
        try:
            await self.client.delete(self.resource, name)
        except NotFound:
            return
        metrics.record_agent_slice_deletion(reason)
        log_at = logging.WARNING if reason == "foreign" else logging.INFO
        log.log(log_at, "node %s: deleted ResourceSlice %s: %s", self.node, name, why)

    async def resync(self, devices: dict[str, tuple[InventoryDevice, ...]],
                     listed: list[JSON] | None = None) -> int:
        """Re-read what is published (someone may have deleted or edited a slice) and repair
        it; ``listed``: the node's slices, already read (one LIST for many nodes). Returns
        the number of slices written."""
        actual: dict[str, list[JSON]] = {driver: [] for driver in self._published}
        for obj in await self._list() if listed is None else listed:
            driver = obj["spec"].get("driver")
            if driver in actual and obj["spec"].get("pool", {}).get("name") == self.node:
                actual[driver].append(obj)
        for driver, found in actual.items():
            known = self.generation(driver)
            if not found and known is not None:  # all deleted (a kubelet's wipe): a newer one
                self._min_generation[driver] = max(self._min_generation.get(driver, 0),
                                                   known + 1)
        self._published = actual
        return await self.publish(devices)

"""The binder's view of the cluster: what its filters and its allocator read.

:class:`ClusterView` keeps the nodes (parsed once per version for the node filters), the
ResourceSlices, and the allocator's :class:`~kdra.dra.allocator.Snapshot` of slices,
classes, DeviceTaintRules and claims, the quota book (kdra.operator.scheduler.quota) fed at the same
points as the snapshot, and the cpu / memory / pod count every bound pod uses on its node.
It filters the nodes for one pod and answers device attributes for the binding's
annotations. It writes nothing to the API server and never wakes a pod: the binder does,
after handing it an event.

Invariants:
- The snapshot and the quota book see the same claim versions: :meth:`snapshot_claim` feeds
  both, and the binder hands it the newest version of each claim it has seen (a write
  response may be newer than a watch event that arrives after it).
- A claim is parsed once per resourceVersion (by the shared typed claim cache,
  :meth:`parse`) and put in the snapshot once per resourceVersion (:meth:`snapshotted` tells
  the binder it was); an object that does not parse (slice, class, rule, claim) is logged and
  left out of the snapshot, as if absent — one object never stops the binder. A claim whose
  only fault is in ``status.devices`` (what drivers write) is parsed without them: its
  allocation still counts (kdra.operator.caches).
- Every pod on a node, kdra's or not, counts towards that node's usage exactly once, on the
  node it is bound to, until it is gone or done.
- The node views are sorted by name and rebuilt only after a node event.
- A node-local slice that names a pool other than its node's
  (:func:`kdra.kube.core.pool_ownership.foreign_pool`) is kept out of the slice cache, the
  snapshot and the quota book, as if deleted: its devices would stand for another node's.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict

from kdra.dra.allocator import NodeInfo, Snapshot
from kdra.dra.errors import InvalidObject
from kdra.dra.models import ResourceClaim, parse_class
from kdra.dra.scheduling import (
    NodeView,
    PodFit,
    Resources,
    node_rejection,
    node_view,
    pod_requests,
)
from kdra.dra.taint_rules import parse_rule
from kdra.kube.core.pool_ownership import foreign_pool
from kdra.kube.store import JSON, Key, Store, key_of
from kdra.operator.caches import ClaimCache, SliceCache, slice_store
from kdra.operator.scheduler.quota import QuotaBook

log = logging.getLogger(__name__)
NO_RESOURCES = Resources()


class ClusterView:
    """The binder's caches and snapshot (see the module doc). ``claims``: the typed claim
    cache shared with the claim controller and taint eviction (kdra.operator.caches)."""

    def __init__(self, claims: ClaimCache, slice_models: SliceCache | None = None) -> None:
        self.claims = claims
        self.slice_models = slice_models or slice_store()
        """The typed slice cache (shared in the operator): each slice version parsed once."""
        self.nodes = Store("Node")
        self._views: list[NodeView] | None = None  # the nodes parsed for the filters, by name
        self._snapshotted: dict[Key, str] = {}  # claim → the version in the snapshot
        self.slices = Store("ResourceSlice", {"pool": lambda s: [
            f"{s['spec'].get('driver')}/{s['spec'].get('pool', {}).get('name')}"]})
        self.snapshot = Snapshot()
        self._foreign: set[str] = set()  # slices ignored for naming another node's pool
        self.quotas = QuotaBook(self.slices)  # DeviceQuotas and what claims hold (services.quota)
        self.usage: dict[str, dict[str, Resources]] = defaultdict(dict)  # node → pod uid → req
        self._pod_node: dict[str, str] = {}  # pod uid → the node its usage is counted on
        self.node_used: dict[str, Resources] = {}  # node → sum of its pods' requests

    # ------------------------------------------------------------------ events in

    def on_node(self, event_type: str | None, node: JSON) -> None:
        new = event_type != "DELETED" and self.nodes.get(key_of(node)) is None
        self.nodes.apply(event_type, node)
        self._views = None
        if new:  # a pool named after it may no longer be spoken for by another node
            name = key_of(node)[1]
            for slice_ in [s for s in self.slices if (s.get("spec") or {}).get(
                    "pool", {}).get("name") == name]:
                self.on_slice("MODIFIED", slice_)

    def _is_node(self, name: str) -> bool:
        return self.nodes.get(("", name)) is not None

    def on_slice(self, event_type: str | None, slice_: JSON, old: JSON | None = None) -> None:
        """The slice cache's subscriber (``old`` unused): the binder's own slice view (pool
        index, foreign pools left out) and the snapshot, from the shared parse."""
        name = slice_["metadata"]["name"]
        foreign = None if event_type == "DELETED" else foreign_pool(slice_, self._is_node)
        if foreign is not None:  # as if absent, but a later version may speak for its pool
            if name not in self._foreign:
                log.warning("ignoring ResourceSlice: %s", foreign)
            self._foreign.add(name)
            self.slices.drop(key_of(slice_))
            self.snapshot.remove_slice(name)
            return
        self._foreign.discard(name)
        self.slices.apply(event_type, slice_)
        if event_type == "DELETED":
            self.snapshot.remove_slice(name)
        else:
            try:
                self.snapshot.upsert_slice(self.slice_models.model(slice_))
            except InvalidObject:  # reported once per version by the typed cache
                self.snapshot.remove_slice(name)

    def on_rule(self, event_type: str | None, rule: JSON) -> None:
        """A DeviceTaintRule: its taint applies to matching devices at the next attempt."""
        name = str(rule["metadata"]["name"])
        if event_type == "DELETED":
            self.snapshot.remove_rule(name)
        else:
            try:
                self.snapshot.upsert_rule(parse_rule(rule))
            except InvalidObject as exc:
                log.warning("ignoring invalid DeviceTaintRule: %s", exc)
                self.snapshot.remove_rule(name)

    def on_class(self, event_type: str | None, device_class: JSON) -> None:
        name = device_class["metadata"]["name"]
        if event_type == "DELETED":
            self.snapshot.remove_class(name)
        else:
            try:
                self.snapshot.upsert_class(parse_class(device_class))
            except InvalidObject as exc:
                log.warning("ignoring invalid device class: %s", exc)
                self.snapshot.remove_class(name)

    def count_usage(self, uid: str, node: str | None, gone: bool, pod: JSON) -> None:
        """Resource usage of every pod on a node (kdra's or not) for the fit filter."""
        previous = self._pod_node.pop(uid, None)
        if previous is not None:
            released = self.usage.get(previous, {}).pop(uid, None)
            if released is not None:
                self.node_used[previous] = self.node_used[previous] - released
            if not self.usage.get(previous):
                self.usage.pop(previous, None)
                self.node_used.pop(previous, None)
        if node and not gone:
            requests = pod_requests(pod)
            self.usage[node][uid] = requests
            self.node_used[node] = self.node_used.get(node, Resources()) + requests
            self._pod_node[uid] = node

    # ------------------------------------------------------------------ claims

    def parse(self, claim: JSON) -> ResourceClaim:
        """The claim's model, parsed once per version by the shared claim cache (a version
        that does not parse raises its cached :class:`InvalidObject`)."""
        return self.claims.model(claim)

    def snapshotted(self, claim: JSON) -> bool:
        """This very version of the claim is in the snapshot already (e.g. the watch event of
        the binder's own write, whose response it took at once)."""
        version = claim["metadata"].get("resourceVersion")
        return bool(version) and self._snapshotted.get(key_of(claim)) == version

    def snapshot_claim(self, claim: JSON) -> None:
        self._snapshotted[key_of(claim)] = claim["metadata"].get("resourceVersion", "")
        entry = self.claims.entry(claim)
        if entry.model is None:
            return  # reported once per version by the typed claim cache
        try:
            self.snapshot.upsert_claim(entry.model)
            self.quotas.observe(entry.model)
        except InvalidObject as exc:
            log.warning("claim %s/%s not usable: %s", *key_of(claim), exc)

    def remove_claim(self, key: Key, claim: JSON) -> None:
        self._snapshotted.pop(key, None)
        self.snapshot.remove_claim(f"{key[0]}/{key[1]}")
        self.quotas.remove(*key)
        self.claims.forget(claim)

    # ------------------------------------------------------------------ nodes

    def node_views(self) -> list[NodeView]:
        """The nodes, parsed for the filters and sorted by name; rebuilt after a node event."""
        if self._views is None:
            self._views = sorted((node_view(n) for n in self.nodes), key=lambda v: v.name)
        return self._views

    def candidates(self, fit: PodFit, parsed: list[ResourceClaim],
                   excluded: dict[str, float], reasons: Counter[str]
                   ) -> tuple[list[NodeInfo], int]:
        """The nodes the pod's filters let through (``excluded``: node → until when the pod
        avoids it) and how many nodes there are; why each other node was left out is
        counted in ``reasons``."""
        candidates: list[NodeInfo] = []
        now = time.monotonic()
        nodes = self.node_views()
        for node in nodes:
            if excluded.get(node.name, 0) > now:
                reasons["node(s) failed to prepare this pod's devices recently"] += 1
                continue
            why = node_rejection(fit, node, self.node_used.get(node.name, NO_RESOURCES),
                                 parsed)
            if why is not None:
                reasons[why] += 1
                continue
            candidates.append(node.info)
        return candidates, len(nodes)

    def attribute(self, driver: str, pool: str, device: str, name: str) -> str | None:
        for slice_ in self.slices.index("pool", f"{driver}/{pool}"):
            for dev in slice_["spec"].get("devices") or []:
                if dev.get("name") == device:
                    attrs = dev.get("attributes") or {}
                    value = attrs.get(name) or attrs.get(f"{driver}/{name}") or {}
                    string = value.get("string")
                    return str(string) if string is not None else None
        return None

"""The operator's taint eviction controller: pods using a device with a NoExecute taint they
do not tolerate (or no longer, once their tolerationSeconds ran out) are evicted through the
Eviction API, so PodDisruptionBudgets are respected; and the DeviceTaintRules' status says
which devices each rule matches.

Taints come from the published slices (the agents' health taints, drivers' taints) and from
DeviceTaintRules. The decisions are :mod:`kdra.operator.core.eviction`'s; this module keeps the
inputs, runs one pass whenever they change (and when the next eviction falls due), and
writes.

After an eviction the pod is deleted by the API server (gracefully: its kubelet ends it);
once it is gone the claim controller drops it from ``reservedFor``, deallocates the claim
(deleting a generated one), and the pod's controller's replacement gets a new claim — which
the allocator never gives a device whose taint it does not tolerate.

Invariants:
- Only the leader runs this (it is started with the other controllers); evictions are
  idempotent on the server side (an evicted pod is being deleted), and a pod is evicted at
  most once per :attr:`RETRY` seconds, so a PDB that blocks (429) is retried, not hammered.
- Events on the pod and on the claim name the device, the taint and whether it was tolerated
  for a while; ``kdra_taint_evictions_total`` counts accepted evictions.
- One malformed claim or rule is logged and skipped; the pass goes on with the others.
- Only devices of kdra's own drivers evict (:attr:`TaintEvictionController.owns`: in the
  native flavour, the drivers of kdra's agents; another driver's taints keep its devices from
  being allocated, but evicting for them is upstream's taint controller's job).
- Only a slice that speaks for its pool (:func:`kdra.kube.core.pool_ownership.speaks_for_pool`:
  a node-local slice, for the pool named after its node) taints devices: a node's agent can
  evict pods only through its own devices.
- A rule's status is written only when what it reports changed.
- Cheap when nothing is tainted NoExecute (the common case): claim events then start no pass
  at all (only slice and rule changes and the :data:`IDLE` timer do); a pass reads the models
  (the typed claim cache's, parsed once per version) only of claims whose allocation names a
  device with a NoExecute taint, recounts the taint gauges only after
  a slice or rule changed, and passes are at least :data:`MIN_INTERVAL` apart however many
  claim events arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kdra import GROUP
from kdra.dra.errors import InvalidObject
from kdra.dra.taint_rules import TaintRule, parse_rule, rule_taints
from kdra.dra.taints import NO_EXECUTE, UNHEALTHY_KEY, TaintLike, acts
from kdra.dra.timestamps import now as wall_now
from kdra.dra.timestamps import status_update
from kdra.kube.client import KubeClient
from kdra.kube.core.pool_ownership import speaks_for_pool
from kdra.kube.errors import ApiError, NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.resources import PODS, Resource
from kdra.kube.store import JSON, Store
from kdra.operator import metrics
from kdra.operator.caches import ClaimCache
from kdra.operator.core.eviction import ClaimEviction, DeviceId, claim_eviction, slice_taints

log = logging.getLogger(__name__)

DEVICE_TAINT_RULES = Resource(GROUP, "v1", "devicetaintrules", False, "DeviceTaintRule")
MAX_LISTED_DEVICES = 128
RETRY = 5.0
"""Seconds before an eviction the API refused (a PDB, 429) or that did not remove the pod
is tried again."""
IDLE = 30.0
"""Longest sleep between passes (rules' status and metrics stay current)."""
MIN_INTERVAL = 0.5
"""Shortest time between two passes (claim events arrive by the hundred per second at scale)."""


class TaintEvictionController:
    def __init__(self, client: KubeClient, events: EventRecorder, *, claims: ClaimCache,
                 pods: Store, nodes: Store | None = None,
                 owns: Callable[[str], bool] | None = None) -> None:
        self.client = client
        self.owns = owns
        """Whether a driver's devices are kdra's to evict from (None: every driver's; the
        native flavour: kdra's agents' drivers, :meth:`kdra.operator.slice_gc.SliceGC.owns`)."""
        self.events = events
        self.claims = claims
        self.pods = pods
        self.nodes = nodes  # the binder's node cache: which pools are named after a node
        self._slices: dict[str, JSON] = {}
        self._rules: dict[str, TaintRule] = {}
        self._rule_objects: dict[str, JSON] = {}
        self._taints: dict[DeviceId, list[Any]] = {}
        self._devices: list[DeviceId] = []
        self._dirty = True
        self._counted = False  # the taint gauges match the current slices and rules
        self._no_execute = False  # some slice or rule taints a device NoExecute
        self._wake = asyncio.Event()
        self._tried: dict[str, float] = {}  # pod uid → last eviction attempt (monotonic)
        self._evicted: dict[str, set[str]] = {}  # rule name → pod uids it evicted
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ inputs

    def prime(self, *, slices: Iterable[JSON], rules: Iterable[JSON]) -> None:
        for obj in slices:
            self.on_slice(None, obj)
        for obj in rules:
            self.on_rule(None, obj)

    def on_slice(self, event_type: str | None, obj: JSON, old: JSON | None = None) -> None:
        """The slice cache's subscriber (the slices that speak for their pool, raw: the
        taints are read from them by :func:`kdra.operator.core.eviction.slice_taints`)."""
        name = str((obj.get("metadata") or {}).get("name"))
        if event_type == "DELETED" or not speaks_for_pool(obj, self._is_node):
            self._slices.pop(name, None)  # a slice of node A in pool B taints nothing of B
        else:
            self._slices[name] = obj
        self._changed()

    def _is_node(self, name: str) -> bool:
        return self.nodes is not None and self.nodes.get(("", name)) is not None

    def on_rule(self, event_type: str | None, obj: JSON) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        self._rules.pop(name, None)
        self._rule_objects.pop(name, None)
        if event_type != "DELETED":
            self._rule_objects[name] = obj
            try:
                self._rules[name] = parse_rule(obj)
            except InvalidObject as exc:
                log.warning("DeviceTaintRule %s ignored: %s", name, exc)
        self._changed()

    def on_claim(self, event_type: str | None, obj: JSON, old: JSON | None = None) -> None:
        """The claim cache's subscriber: a pass reads the cache (already updated)."""
        if self._no_execute or self._dirty:
            self._wake.set()

    def _changed(self) -> None:
        self._dirty = True
        self._counted = False
        self._wake.set()

    def taints(self, driver: str, pool: str, device: str) -> list[TaintLike]:
        """Every taint of one device now that evicts: its slice's, then the matching rules'
        (none for a device of a driver that is not kdra's, :attr:`owns`)."""
        self._refresh()
        if self.owns is not None and not self.owns(driver):
            return []
        return [*self._taints.get((driver, pool, device), ()),
                *rule_taints(self._rules.values(), driver, pool, device)]

    def _refresh(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        slices = list(self._slices.values())
        self._taints = slice_taints(slices)
        devices = set()
        for obj in slices:
            spec = obj.get("spec") or {}
            for device in spec.get("devices") or ():
                if isinstance(device, dict):
                    devices.add((str(spec.get("driver")), str((spec.get("pool") or {}).get(
                        "name")), str(device.get("name"))))
        self._devices = sorted(devices)
        self._no_execute = bool(self._no_execute_devices())

    # ------------------------------------------------------------------ loop

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="taint-eviction")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                delay = await self.run_once()
            except Exception:  # a bug must not end evictions for good
                log.exception("taint eviction pass failed")
                delay = RETRY
            await asyncio.sleep(MIN_INTERVAL)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(),
                                       timeout=max(0.0, delay - MIN_INTERVAL))

    async def run_once(self) -> float:
        """One pass: evict what is due, update metrics and rules' status. Returns the seconds
        until the next eviction falls due (at most :data:`IDLE`)."""
        self._refresh()
        now = wall_now()
        delay = IDLE
        pending: dict[str, int] = {}
        executing = self._no_execute_devices()
        for obj in self.claims if executing else ():
            if not _names_any(obj, executing):
                continue
            try:
                claim = self.claims.model(obj)  # parsed once per version, shared
            except InvalidObject as exc:
                log.debug("claim skipped by taint eviction: %s", exc)
                continue
            decision = claim_eviction(claim, self.taints, now)
            if decision is None:
                continue
            for rule in self._rules_for(decision):
                pending[rule] = pending.get(rule, 0) + len(decision.pods)
            wait = (decision.decision.at - now).total_seconds()
            if wait > 0:
                delay = min(delay, wait)
                continue
            for pod_name, pod_uid in decision.pods:
                retry_in = await self._evict(obj, decision, pod_name, pod_uid)
                delay = min(delay, retry_in)
        if not self._counted:
            self._update_metrics()
            self._counted = True
        await self._update_rules(pending)
        return delay

    def _no_execute_devices(self) -> set[DeviceId] | Callable[[DeviceId], bool]:
        """The devices with a NoExecute taint now: a set for slice taints, or a predicate
        when a NoExecute rule exists (it may match devices no slice lists any more)."""
        owns = self.owns or (lambda driver: True)
        devices = {device for device, taints in self._taints.items()
                   if owns(device[0]) and any(t.effect == NO_EXECUTE for t in taints)}
        rules = [r for r in self._rules.values() if r.taint.effect == NO_EXECUTE]
        if not rules:
            return devices
        return lambda device: device in devices or (
            owns(device[0]) and any(r.matches(*device) for r in rules))

    def _rules_for(self, decision: ClaimEviction) -> list[str]:
        taint = decision.decision.taint
        return [name for name, rule in self._rules.items()
                if rule.matches(*decision.device) and
                (rule.taint.key, rule.taint.value, rule.taint.effect) ==
                (taint.key, taint.value, taint.effect)]

    async def _evict(self, claim: JSON, decision: ClaimEviction, pod_name: str,
                     pod_uid: str) -> float:
        """Evict one pod unless tried within :data:`RETRY`; returns when to look again."""
        now = time.monotonic()
        last = self._tried.get(pod_uid)
        if last is not None and now - last < RETRY:
            return RETRY - (now - last)
        self._tried[pod_uid] = now
        if len(self._tried) > 10_000:
            for uid in list(self._tried)[:5_000]:
                del self._tried[uid]
        namespace = decision.namespace
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod_name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": pod_uid}}}
        pod = self.pods.get((namespace, pod_name)) or {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": namespace, "uid": pod_uid}}
        reason = decision.reason()
        try:
            await self.client.request("POST", PODS.path(namespace, pod_name, "eviction"),
                                      body=body)
        except NotFound:
            return RETRY  # gone already
        except ApiError as exc:
            if exc.status == 409:
                return RETRY  # another pod by that name now (uid precondition)
            message = f"cannot evict pod {namespace}/{pod_name} yet: {reason}: {exc.message}"
            log.info("%s", message)
            if exc.status == 429:  # a PodDisruptionBudget does not allow it now
                await self.events.warn(pod, "DeviceTaintEvictionBlocked", message)
            return RETRY
        except OSError as exc:
            log.warning("evicting pod %s/%s failed: %s", namespace, pod_name, exc)
            return RETRY
        metrics.record_taint_eviction()
        for rule in self._rules_for(decision):
            self._evicted.setdefault(rule, set()).add(pod_uid)
        log.warning("evicted pod %s/%s (claim %s): %s", namespace, pod_name, decision.claim,
                    reason)
        message = f"evicted: claim {decision.claim}: {reason}"
        await self.events.warn(pod, "DeviceTaintEviction", message)
        await self.events.warn(claim, "DeviceTaintEviction",
                               f"pod {pod_name} evicted: {reason}")
        return RETRY

    # ------------------------------------------------------------------ reporting

    def _update_metrics(self) -> None:
        counts: dict[tuple[str, str], int] = {}
        for device in self._devices:
            for taint in self._taints.get(device, ()):
                reason = "unhealthy" if taint.key == UNHEALTHY_KEY else "driver"
                key = (taint.effect if taint.effect in metrics.TAINT_EFFECTS else "None", reason)
                counts[key] = counts.get(key, 0) + 1
            for taint in rule_taints(self._rules.values(), *device):
                key = (taint.effect if taint.effect in metrics.TAINT_EFFECTS else "None", "rule")
                counts[key] = counts.get(key, 0) + 1
        metrics.set_device_taints(counts)

    async def _update_rules(self, pending: dict[str, int]) -> None:
        for name, rule in list(self._rules.items()):
            obj = self._rule_objects.get(name)
            if obj is None:
                continue
            matched = [d for d in self._devices if rule.matches(*d)]
            evicted = len(self._evicted.get(name, ()))
            waiting = pending.get(name, 0)
            condition: dict[str, Any] = {
                "type": "EvictionInProgress",
                "status": "True" if waiting else "False",
                "reason": ("PodsPendingEviction" if waiting else
                           "NoEffect" if not acts(rule.taint) or rule.taint.effect != NO_EXECUTE
                           else "NoPodsToEvict"),
                "message": f"{waiting} pod(s) pending eviction, {evicted} evicted",
                "observedGeneration": int((obj.get("metadata") or {}).get("generation") or 0),
            }
            status: dict[str, Any] = {
                "matchedDevices": len(matched),
                "devices": [{"driver": d[0], "pool": d[1], "device": d[2]}
                            for d in matched[:MAX_LISTED_DEVICES]],
            }
            status["conditions"] = [condition]
            if status_update(obj.get("status") or {}, status) is None:
                continue
            try:
                written = await self.client.patch(DEVICE_TAINT_RULES, name, {"status": status},
                                                  subresource="status")
            except (ApiError, OSError) as exc:
                log.warning("DeviceTaintRule %s: status not written: %s", name, exc)
                continue
            self._rule_objects[name] = written


def _names_any(claim: JSON, devices: set[DeviceId] | Callable[[DeviceId], bool]) -> bool:
    """Whether the claim's allocation names one of ``devices`` (raw JSON, no parsing)."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not isinstance(allocation, dict):
        return False
    results = (allocation.get("devices") or {}).get("results")
    for result in results if isinstance(results, list) else ():
        if not isinstance(result, dict):
            continue
        device = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
        if device in devices if isinstance(devices, set) else devices(device):
            return True
    return False


__all__ = ["DEVICE_TAINT_RULES", "TaintEvictionController"]

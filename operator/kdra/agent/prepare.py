"""Preparing and unpreparing claims on one node (kdra's NodePrepareResources).

For a claim allocated to this node's pool (one of its drivers) and reserved for a consumer,
:meth:`Preparer.sync` writes a CDI spec per driver, records the claim in the checkpoint and
reports ``status.devices[]`` with ``Ready=True``; once the claim is deallocated, no longer
reserved, or deleted, it removes the CDI files, the checkpoint entry and its status entries.

Crash consistency — every step is idempotent and the order makes any prefix recoverable:

    prepare:   backends' node edits → CDI file(s) → checkpoint "prepared" → status Ready
    unprepare: CDI file(s) removed → backends' node edits undone → checkpoint entry removed
               → status entries removed

What is vendor-specific (the recorded data, node edits, CDI edits) each device's backend
says (:mod:`kdra.agent.core.backend`); its node edits run with the CDI file writes, off the
event loop, and must be idempotent (a crash between them and the checkpoint is mended when
the claim is synced again).

No "preparing" record is written first: a CDI file no entry names is an orphan, which the
next start deletes. The in-memory checkpoint changes first, before any ``await``: that is
what :func:`busy_devices` checks, so two claims given the same device never both get it.
Another claim's save may thus persist an entry a moment before its files exist (or after they
are gone). After a kill -9 anywhere, the restarted agent loads the checkpoint, deletes CDI files
of its node that no entry names (:meth:`Preparer.load`: files written just before the
crash), and syncs every claim the checkpoint or the API names: a claim still wanted is
prepared again (a prepared entry whose file is missing gets it rewritten), any other entry is
unprepared. Status Ready is reported only after the claim's own files and entry are on disk,
and never for a claim being deleted (it ends with its finalizer; nobody binds it).
(Checkpoints written by older versions may hold ``preparing`` entries: prepared again.)

Invariants:
- Prepare of a prepared claim returns the recorded result (and only re-reports status);
  unprepare of an unknown claim succeeds.
- The status write is a PUT of the whole claim with its resourceVersion; on Conflict the claim
  is read again and the entries recomputed. Entries of other drivers or nodes are kept.
- A device the node does not have (or that is unhealthy) is reported ``Ready=False`` with a
  reason, and nothing is written to disk for that claim.
- A device still prepared for another claim is reported ``Ready=False`` (``DeviceBusy``: the
  binder then allocates the claim again), unless that claim has released it — deallocated,
  unreserved or deleted, by the newest version the agent has seen — and only its unprepare
  is pending. Then the claim waits, unreported, and is retried (:class:`WaitForRelease`),
  for at most ``RELEASE_WAIT`` seconds. This is the usual case when devices change hands
  quickly: the binder hands a released device to the next claim at once, and the agent may
  see the next claim before it has run the previous one's unprepare.
- ``KDRA_AGENT_PAUSE_AFTER=<point>`` (tests only) makes the agent sleep at that point
  (``cdi-written``, ``checkpoint-prepared``, ``cdi-removed``) so a test can kill it there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence

from kdra.agent import metrics
from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.core.backend import Backends, by_backend
from kdra.agent.core.cdi import build_cdi_spec, cdi_file_name
from kdra.agent.core.checkpoint import Checkpoint, ClaimEntry, ClaimRef, PreparedDevice
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice
from kdra.agent.core.node_accounting import clashes
from kdra.agent.core.nodeprep import (
    DeviceOutcome,
    Result,
    admin_requests,
    busy_devices,
    device_statuses,
    merge_device_statuses,
    our_results,
    prepared_devices,
    ready_outcomes,
    still_holds,
    wants_prepared,
)
from kdra.dra.timestamps import api_time
from kdra.kube.client import KubeClient
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.resources import CLAIMS
from kdra.kube.store import JSON
from kdra.kube.workqueue import Retry

log = logging.getLogger(__name__)

PAUSE_ENV = "KDRA_AGENT_PAUSE_AFTER"
PAUSE_POINTS = ("cdi-written", "checkpoint-prepared", "cdi-removed")
RELEASE_WAIT = 5.0
"""Seconds a claim waits, unreported, for a device its previous claim released to be
unprepared, before it is reported ``DeviceBusy`` (an unprepare that takes longer is failing:
the binder had better allocate the claim elsewhere)."""


class WaitForRelease(Retry):
    """The claim's devices are prepared for claims that released them: retry once their
    unprepare (queued) has run. Not a failed prepare."""


class HolderIndex:
    """Which nodes' checkpoints hold a claim (namespace, name), across every node a process
    serves — so a claim event costs a lookup, not a scan of hundreds of checkpoints.
    Always equal to what the Preparers' checkpoints say (they update it on every change)."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[str, str], set[str]] = {}

    def update(self, node: str, old: Checkpoint, new: Checkpoint) -> None:
        before = {(e.claim.namespace, e.claim.name) for e in old.claims.values()}
        after = {(e.claim.namespace, e.claim.name) for e in new.claims.values()}
        for key in before - after:
            nodes = self._nodes.get(key)
            if nodes is not None:
                nodes.discard(node)
                if not nodes:
                    del self._nodes[key]
        for key in after - before:
            self._nodes.setdefault(key, set()).add(node)

    def nodes(self, namespace: str, name: str) -> set[str]:
        return set(self._nodes.get((namespace, name), ()))


class Preparer:
    """Prepares claims for one node. ``inventory`` gives the node's current devices."""

    def __init__(self, client: KubeClient, node: str, *, cdi: CdiDir,
                 checkpoint_file: CheckpointFile, inventory: Callable[[], Inventory],
                 drivers: Callable[[], Sequence[str]], backends: Backends,
                 holders: HolderIndex | None = None,
                 claims: Callable[[str, str], JSON | None] | None = None,
                 written: Callable[[JSON], None] | None = None,
                 report_status: bool = True) -> None:
        """``claims(namespace, name)``: the newest version of a claim the agent has seen (None:
        gone), to tell a device's previous claim that released it from one that still holds
        it. Without it every holder still holds its devices. ``written(claim)``: called with
        the server's answer to each status write of this preparer (the claim as stored).
        ``report_status``: write ``status.devices`` (kdra flavour: the binder waits for it);
        off where the kubelet asks for the prepare and reads its answer (native flavour).
        ``backends``: the agent's device backends (each device's is asked what it records,
        needs on the node and gives a container)."""
        self.client = client
        self.node = node
        self.backends = backends
        self.cdi = cdi
        self.file = checkpoint_file
        self.inventory = inventory
        self.drivers = drivers
        self.holders = holders or HolderIndex()
        self.claims = claims
        self.written = written
        self.report_status = report_status
        self._waiting: dict[tuple[str, str], tuple[str, float]] = {}  # key → (uid, since)
        self._checkpoint = Checkpoint(node)  # empty: nothing for the holder index yet
        self._write_lock = asyncio.Lock()
        self._changes = 0  # checkpoint changes made in memory
        self._saved = 0  # how many of them the file holds
        self.pause_after = os.environ.get(PAUSE_ENV, "")
        self.health: Callable[[str, str], tuple[bool, str, str]] | None = None
        """(driver, device) → the ``Healthy`` condition reported beside Ready (the agent's
        applied health); None: not reported."""

    # ------------------------------------------------------------------ start-up

    def load(self) -> list[tuple[str, str]]:
        """Load the checkpoint and delete orphaned CDI files of this node. Returns the
        (namespace, name) of every checkpointed claim, to be synced."""
        self.checkpoint = self._with_backends(self.file.load())
        self._saved = self._changes
        named = {f for entry in self.checkpoint.claims.values() for f in entry.cdi_files}
        for file, uid in self.cdi.owned(self.node).items():
            if file not in named:
                self.cdi.remove(file)
                log.warning("node %s: removed orphaned CDI spec %s (claim %s is not in the "
                            "checkpoint)", self.node, file, uid or "?")
        states = [entry.state for entry in self.checkpoint.claims.values()]
        if states:
            log.info("node %s: checkpoint has %d claim(s) (%d prepared, %d preparing)",
                     self.node, len(states), states.count("prepared"), states.count("preparing"))
        return [(e.claim.namespace, e.claim.name) for e in self.checkpoint.claims.values()]

    def _with_backends(self, checkpoint: Checkpoint) -> Checkpoint:
        """``checkpoint`` with each record of an older agent (no ``backend``) given the
        backend of its device now, where the node still has it."""
        inventory = self.inventory()
        for entry in checkpoint.claims.values():
            if all(d.backend for d in entry.devices):
                continue
            devices = []
            for record in entry.devices:
                found = inventory.device(record.driver, record.device)
                devices.append(dataclasses.replace(record, backend=found.backend)
                               if not record.backend and found is not None else record)
            checkpoint = checkpoint.with_entry(dataclasses.replace(entry,
                                                                   devices=tuple(devices)))
        return checkpoint

    @property
    def checkpoint(self) -> Checkpoint:
        """The node's state (what the checkpoint file holds, or is about to)."""
        return self._checkpoint

    @checkpoint.setter
    def checkpoint(self, new: Checkpoint) -> None:
        self.holders.update(self.node, self._checkpoint, new)
        self._checkpoint = new
        self._changes += 1

    @property
    def prepared_count(self) -> int:
        return sum(1 for e in self.checkpoint.claims.values() if e.state == "prepared")

    # ------------------------------------------------------------------ sync

    async def sync(self, namespace: str, name: str, claim: JSON | None) -> None:
        """Converge the claim ``namespace/name`` (``claim``: its current object, or None when
        it is gone) on this node."""
        drivers = list(self.drivers())
        wanted = wants_prepared(claim, self.node, drivers)
        uid = (claim or {}).get("metadata", {}).get("uid")
        results = our_results(claim, self.node, drivers) if claim else []
        if not wanted:
            self._waiting.pop((namespace, name), None)
        for entry in self.checkpoint.by_key(namespace, name):
            same = (wanted and entry.claim.uid == uid and
                    {d.key for d in entry.devices} == {r.key for r in results})
            if not same:
                await self.unprepare(entry, claim if entry.claim.uid == uid else None)
        if wanted and claim is not None:
            await self.prepare(claim, results)
        elif claim is not None:
            await self._report(claim, [])

    async def prepare(self, claim: JSON, results: list[Result]) -> list[DeviceOutcome]:
        """Prepare ``results`` of ``claim``; returns how each device went (all ready: the
        claim is prepared and checkpointed)."""
        started: float | None = time.monotonic()
        ok = False
        try:
            outcomes = await self._prepare(claim, results)
            ok = all(outcome.ready for outcome in outcomes)
            return outcomes
        except WaitForRelease:
            started = None  # nothing tried yet: neither a duration nor an error to count
            raise
        finally:
            if started is not None:
                metrics.observe_prepare(time.monotonic() - started, ok)

    async def _prepare(self, claim: JSON, results: list[Result]) -> list[DeviceOutcome]:
        ref = ClaimRef.of(claim)
        entry = self.checkpoint.claims.get(ref.uid)
        inventory = self.inventory()
        if entry is not None and entry.state == "prepared":
            await asyncio.to_thread(self._restore_missing_files, entry, inventory)
            done = ready_outcomes(entry.devices)
            await self._report(claim, done)
            return done
        devices: dict[tuple[str, str], InventoryDevice] = {}
        problems: dict[tuple[str, str, str], tuple[str, str]] = {}
        admin = admin_requests(claim)
        # Checked and recorded with no await in between (the "preparing" entry below), so two
        # claims allocated the same device (e.g. by two active binders) never both get it.
        busy = busy_devices(self.checkpoint, ref.uid)
        clashing = clashes(self.checkpoint, ref.uid, results, inventory, admin)
        released: list[str] = []  # busy devices whose holder has released them
        for result in results:
            device = inventory.device(result.driver, result.device)
            holder = busy.get(result.key)
            clash = clashing.get(result.key)
            if holder is not None and result.request.split("/", 1)[0] not in admin:
                problems[result.key] = ("DeviceBusy", f"device {result.device} is already "
                                        f"prepared for claim {holder.key}")
                if self.claims is not None and not still_holds(
                        self.claims(holder.namespace, holder.name), holder, result.key,
                        self.node, self.drivers()):
                    released.append(f"{result.device} (claim {holder.key})")
            elif device is None:
                problems[result.key] = ("DeviceNotFound", f"node {self.node} has no device "
                                        f"{result.device!r} of driver {result.driver}")
            elif not device.healthy:
                problems[result.key] = ("DeviceUnhealthy", f"device {result.device} is "
                                        f"unhealthy: {device.health_reason}")
            elif clash is not None:  # partitions overlap, or a share would over-commit
                problems[result.key] = (clash.reason, clash.message + "".join(
                    f"; held by claim {h.key}" for h in clash.holders[:4]))
                if clash.holders and self.claims is not None and not any(
                        self._holds(h) for h in clash.holders):
                    released.append(f"{result.device} (claims "
                                    f"{', '.join(h.key for h in clash.holders[:4])})")
            else:
                devices[(result.driver, result.device)] = device
        if problems and len(released) == len(problems):
            self._wait_for_release(ref, released)
        self._waiting.pop((ref.namespace, ref.name), None)
        if problems:
            outcomes = []
            for result in results:
                reason, message = problems.get(result.key) or (
                    "ClaimNotPrepared", "another device of this claim cannot be prepared: "
                    + "; ".join(m for _, m in problems.values()))
                outcomes.append(DeviceOutcome(result.driver, result.pool, result.device,
                                              False, reason, message,
                                              share_id=result.share_id))
            log.warning("node %s: cannot prepare claim %s: %s", self.node, ref.key,
                        "; ".join(m for _, m in problems.values()))
            await self._report(claim, outcomes)
            return outcomes
        prepared = prepared_devices(ref, results, devices, admin, backends=self.backends)
        by_driver: dict[str, list[InventoryDevice]] = {}
        for result in results:
            by_driver.setdefault(result.driver, []).append(devices[(result.driver,
                                                                    result.device)])
        specs = {cdi_file_name(driver, ref.uid): build_cdi_spec(
            node=self.node, claim=ref, driver=driver, devices=found, prepared=prepared,
            backends=self.backends)
            for driver, found in by_driver.items()}
        entry = ClaimEntry(ref, "prepared", prepared, tuple(sorted(specs)))
        await self._commit(ref, self.checkpoint.with_entry(entry),
                           functools.partial(self._write_files, ref, prepared, specs),
                           "cdi-written")
        await self._pause("checkpoint-prepared", ref)
        log.info("node %s: prepared claim %s (%s): %s", self.node, ref.key, ref.uid,
                 ", ".join(f"{d.driver}/{d.device}" for d in prepared))
        done = ready_outcomes(prepared)
        await self._report(claim, done)
        return done

    def _holds(self, holder: ClaimRef) -> bool:
        """Does ``holder`` still hold any of its prepared devices (by the newest version of
        it the agent has seen)? (A clash's holder that released everything is only waiting
        for its unprepare.)"""
        assert self.claims is not None
        claim = self.claims(holder.namespace, holder.name)
        entry = self.checkpoint.claims.get(holder.uid)
        return entry is not None and any(
            still_holds(claim, holder, device.key, self.node, self.drivers())
            for device in entry.devices)

    def _wait_for_release(self, ref: ClaimRef, released: list[str]) -> None:
        """Raise :class:`WaitForRelease` unless ``ref`` has waited ``RELEASE_WAIT`` already
        (then return: the caller reports the devices busy)."""
        now = time.monotonic()
        uid, since = self._waiting.get((ref.namespace, ref.name), ("", now))
        if uid != ref.uid:
            since = now
        self._waiting[(ref.namespace, ref.name)] = (ref.uid, since)
        if now - since < RELEASE_WAIT:
            raise WaitForRelease(f"node {self.node}: claim {ref.key} waits for the unprepare "
                                 f"of {', '.join(released)}")
        log.warning("node %s: claim %s waited %.0f s for the unprepare of %s", self.node,
                    ref.key, now - since, ", ".join(released))

    def _restore_missing_files(self, entry: ClaimEntry, inventory: Inventory) -> None:
        """A prepared claim's CDI file vanished (someone deleted it, or a crash came between
        an unprepare's first steps and its checkpoint): prepare the devices' node edits again
        and write it again. Disk reads and writes: called in a worker thread."""
        missing = [file for file in entry.cdi_files if self.cdi.read(file) is None]
        if missing:
            self._prepare_node(entry.claim, entry.devices)
        for file in missing:
            driver = next((d.driver for d in entry.devices
                           if cdi_file_name(d.driver, entry.claim.uid) == file), None)
            devices = [inventory.device(d.driver, d.device) for d in entry.devices
                       if d.driver == driver]
            if driver is None or any(device is None for device in devices):
                log.error("node %s: CDI spec %s of prepared claim %s is missing and cannot be "
                          "rebuilt", self.node, file, entry.claim.key)
                continue
            self.cdi.write(file, build_cdi_spec(node=self.node, claim=entry.claim,
                                                driver=driver,
                                                devices=[d for d in devices if d is not None],
                                                prepared=entry.devices,
                                                backends=self.backends))
            log.warning("node %s: rewrote missing CDI spec %s", self.node, file)

    async def unprepare(self, entry: ClaimEntry, claim: JSON | None) -> None:
        """Remove what preparing ``entry`` created; ``claim`` (same UID) gets its status
        entries removed too."""
        ref = entry.claim
        try:
            await self._commit(ref, self.checkpoint.without(ref.uid),
                               functools.partial(self._remove_files, ref, entry.devices,
                                                 entry.cdi_files),
                               "cdi-removed")
            log.info("node %s: unprepared claim %s (%s)", self.node, ref.key, ref.uid)
            if claim is not None:
                await self._report(claim, [])
        except Exception:
            metrics.record_unprepare_error()
            raise

    # ------------------------------------------------------------------ disk

    def _prepare_node(self, ref: ClaimRef, devices: Sequence[PreparedDevice]) -> None:
        """Each backend's node edits for its ``devices`` of ``ref``; when one fails, those
        made are undone (best effort) and the error raised."""
        done: list[tuple[str, list[PreparedDevice]]] = []
        try:
            for name, own in by_backend(devices):
                self.backends.named(name).prepare(self.node, ref, own)
                done.append((name, own))
        except BaseException:
            for name, own in reversed(done):
                try:
                    self.backends.named(name).unprepare(self.node, ref, own)
                except Exception as exc:  # the first error is the one to raise
                    log.warning("node %s: backend %s: undoing the node edits of claim %s "
                                "failed: %s", self.node, name or "-", ref.key, exc)
            raise

    def _write_files(self, ref: ClaimRef, devices: Sequence[PreparedDevice],
                     specs: dict[str, JSON]) -> None:
        self._prepare_node(ref, devices)
        for file, spec in specs.items():
            self.cdi.write(file, spec)

    def _remove_files(self, ref: ClaimRef, devices: Sequence[PreparedDevice],
                      files: Sequence[str]) -> None:
        for file in files:
            self.cdi.remove(file)
        for name, own in by_backend(devices):
            self.backends.named(name).unprepare(self.node, ref, own)

    async def _commit(self, ref: ClaimRef, checkpoint: Checkpoint,
                      files: Callable[[], None], pause: str) -> None:
        """Make ``checkpoint`` (``ref``'s entry added or removed) the state at once, before
        the first ``await`` (the busy-device check reads it), then change the CDI files off
        the event loop and save the checkpoint. If a step fails, ``ref``'s entry is put back
        as it was, so the retry does the work again."""
        before = self.checkpoint.claims.get(ref.uid)
        self.checkpoint = checkpoint
        try:
            if self.pause_after:  # tests: a pause point between the files and the save
                await asyncio.to_thread(files)
                await self._pause(pause, ref)
                await self._save()
            else:
                await self._save(files)
        except BaseException:
            self.checkpoint = (self.checkpoint.with_entry(before) if before is not None
                               else self.checkpoint.without(ref.uid))
            raise

    async def _save(self, first: Callable[[], None] | None = None) -> None:
        """Persist the checkpoint as it is now, off the event loop (a write with fsync takes
        milliseconds); return once the file holds every change made before the call.
        ``first``: disk work to finish before the save (a claim's CDI files), done in the
        same visit to a worker thread — one hop off the event loop per prepare or unprepare,
        not two (~70 µs of CPU each, issue 42); if it raises, nothing is saved.

        The lock keeps saves in order and each writes the newest state, so a caller whose
        change a later save has already written returns without writing (group commit:
        claims prepared or unprepared together share one write and its fsyncs) — after its
        ``first``, which is never skipped."""
        change = self._changes
        async with self._write_lock:
            if self._saved >= change:
                if first is not None:
                    await asyncio.to_thread(first)
                return
            writing = self._changes
            await asyncio.to_thread(self._write_then_save, first, self.checkpoint)
            self._saved = writing

    def _write_then_save(self, first: Callable[[], None] | None,
                         checkpoint: Checkpoint) -> None:
        """(Worker thread) ``first``, then ``checkpoint`` saved."""
        if first is not None:
            first()
        self.file.save(checkpoint)

    # ------------------------------------------------------------------ helpers

    async def _pause(self, point: str, ref: ClaimRef) -> None:
        if self.pause_after == point:
            log.warning("node %s: paused after %s for claim %s (%s=%s)", self.node, point,
                        ref.key, PAUSE_ENV, point)
            await asyncio.sleep(24 * 3600)

    async def _report(self, claim: JSON, outcomes: Sequence[DeviceOutcome]) -> None:
        """Make the claim's ``status.devices`` entries of this node say ``outcomes`` (no
        outcomes: remove them). PUT with resourceVersion; re-read on Conflict. Nothing without
        ``report_status``. Nothing for a claim being deleted either: its object ends with its
        finalizer (the claim controller's next write), nobody may allocate or bind it any more,
        and its deletion bumped ``metadata.generation`` — re-reporting each device's
        ``observedGeneration`` would cost a write per claim and make the controller's
        finalizer removal conflict (issue 42)."""
        if not self.report_status or claim["metadata"].get("deletionTimestamp"):
            return
        drivers = list(self.drivers())
        if self.health is not None:
            outcomes = [dataclasses.replace(o, health=self.health(o.driver, o.device))
                        for o in outcomes]
        for _ in range(8):
            status = claim.get("status") or {}
            existing = status.get("devices") or []
            ours = device_statuses(outcomes, now=api_time(), previous=existing,
                                   generation=claim["metadata"].get("generation"))
            merged = merge_device_statuses(existing, ours, node=self.node, drivers=drivers)
            if merged == existing:
                return
            new_status = {**status, "devices": merged}
            if not merged:
                new_status.pop("devices")
            body = {**claim, "status": new_status}  # shallow: nothing nested is mutated
            try:
                answer = await self.client.replace_status(CLAIMS, body)
            except NotFound:
                return
            except Conflict:
                meta = claim["metadata"]
                try:
                    claim = await self.client.get(CLAIMS, meta["name"], meta["namespace"])
                except NotFound:
                    return
                if claim["metadata"].get("uid") != meta.get("uid"):
                    return
                if outcomes and not wants_prepared(claim, self.node, drivers):
                    raise Retry("claim changed while reporting status") from None
            except ApiError as exc:
                raise Retry(f"status write failed: {exc}") from exc
            else:
                if self.written is not None:
                    self.written(answer)
                return
        raise Retry("claim keeps changing while reporting device status")

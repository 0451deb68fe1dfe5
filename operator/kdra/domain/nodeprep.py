"""Preparing claims on a node, without the I/O: which claims, CDI specs, the checkpoint, and
the ``status.devices[]`` entries the node agent reports.

kubelet calls a DRA driver's NodePrepareResources for a claim reserved for a pod on its node;
kdra's agent does the same job from the claim itself (UPSTREAM.md §6). This module decides:

- :func:`our_results`: the allocation results a node agent serves (its drivers, pool = node);
  :func:`wants_prepared`: whether the claim should be prepared there now (allocated to the
  pool and ``reservedFor`` non-empty, not being deleted).
- :func:`build_cdi_spec`: the CDI spec (``cdiVersion 0.6.0``) of one claim and driver: one
  CDI device per claim+device named ``<claim-uid>-<device>`` (``-<shareID>`` added for a
  share of a device several claims hold), with env named after the device
  (``KDRA_DEVICE_GPU_0_UUID``; a partition's or share's from :mod:`kdra.domain.shares`), host
  ``deviceNodes`` for real (NVML) GPUs and a ``/dev/kdra/<device>`` node for fake ones.
- :class:`Checkpoint`: the agent's durable record of the claims it prepared, with a checksum.
- :func:`device_statuses` / :func:`merge_device_statuses`: the ``status.devices[]`` entries
  (condition ``Ready``) and how they replace the agent's own entries while keeping every entry
  another driver or node wrote.

Crash consistency (the order the agent follows; a restart re-runs the same decisions):
prepare = checkpoint ``preparing`` → CDI file → checkpoint ``prepared`` → status;
unprepare = CDI file removed → checkpoint entry removed → status entries removed. A CDI file
therefore always has a checkpoint entry (``preparing`` or ``prepared``), and any file without
one is an orphan the agent may delete.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

import orjson

from kdra.domain.gpu_profiles import GPU_DRIVER
from kdra.domain.inventory import InventoryDevice
from kdra.domain.shares import share_data, share_env
from kdra.dra.timestamps import transition_time

CDI_VERSION = "0.6.0"
CDI_VENDOR = "kdra.dev"
CDI_FILE_PREFIX = f"{CDI_VENDOR}-"
NODE_ANNOTATION = f"{CDI_VENDOR}/node"
CLAIM_ANNOTATION = f"{CDI_VENDOR}/claim"
CLAIM_UID_ANNOTATION = f"{CDI_VENDOR}/claim-uid"
DRIVER_ANNOTATION = f"{CDI_VENDOR}/driver"

READY = "Ready"
HEALTHY = "Healthy"
"""The device's applied health (issue 25), beside Ready in ``status.devices[].conditions``."""
CHECKPOINT_VERSION = 1

JSON = dict[str, Any]


# --------------------------------------------------------------------------- which claims


@dataclass(frozen=True)
class Result:
    """One allocated device of a claim that this node agent serves."""

    request: str
    driver: str
    pool: str
    device: str
    share_id: str = ""
    """The result's ``shareID``: set for a share of a device several claims hold at once."""
    consumed_capacity: tuple[tuple[str, str], ...] = ()
    """The result's ``consumedCapacity`` as sorted (capacity, quantity) pairs."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


def admin_requests(claim: Mapping[str, Any]) -> frozenset[str]:
    """Names of the claim's requests with ``exactly.adminAccess: true``."""
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return frozenset(r.get("name", "") for r in requests
                     if isinstance(r, Mapping) and (r.get("exactly") or {}).get("adminAccess"))


def busy_devices(checkpoint: Checkpoint, uid: str) -> dict[tuple[str, str, str], ClaimRef]:
    """Devices the checkpoint holds for claims other than ``uid`` (admin access and shares
    aside): a device is prepared for at most one claim at a time, whatever the allocations
    say. (Shares of a device are bounded by its capacity instead, partitions by their GPU's
    counters: :mod:`kdra.domain.node_accounting`.)"""
    return {device.key: entry.claim for entry in checkpoint.claims.values()
            if entry.claim.uid != uid for device in entry.devices
            if not device.admin_access and not device.share_id}


def still_holds(claim: Mapping[str, Any] | None, holder: ClaimRef,
                device: tuple[str, str, str], node: str, drivers: Iterable[str]) -> bool:
    """Does ``holder`` — a claim the node's checkpoint holds ``device`` (driver, pool,
    device) for — still hold it, by ``claim``, the newest version of it the agent has seen?
    Not when that claim is gone or replaced (another uid), no longer wants preparing on
    ``node``, or no longer allocates the device: then only its unprepare, already queued by
    the event that said so, stands between the device and its next claim."""
    if claim is None or (claim.get("metadata") or {}).get("uid") != holder.uid:
        return False
    drivers = list(drivers)
    return wants_prepared(claim, node, drivers) and any(
        result.key == device for result in our_results(claim, node, drivers))


def our_results(claim: Mapping[str, Any], node: str, drivers: Iterable[str]) -> list[Result]:
    """Allocation results of ``claim`` for ``drivers`` in pool ``node``, in claim order."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    wanted = set(drivers)
    results = []
    for entry in (allocation.get("devices") or {}).get("results") or ():
        if entry.get("driver") in wanted and entry.get("pool") == node:
            consumed = entry.get("consumedCapacity")
            results.append(Result(
                str(entry.get("request", "")), entry["driver"], node,
                str(entry.get("device", "")), str(entry.get("shareID") or ""),
                tuple(sorted((str(k), str(v)) for k, v in consumed.items()))
                if isinstance(consumed, Mapping) else ()))
    return results


def pools_of(claim: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(driver, pool) of every allocation result of ``claim``."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return {(str(entry.get("driver")), str(entry.get("pool")))
            for entry in (allocation.get("devices") or {}).get("results") or ()}


def wants_prepared(claim: Mapping[str, Any] | None, node: str, drivers: Iterable[str]) -> bool:
    """Should the claim's devices on ``node`` be prepared now? Allocated to the pool and
    reserved for at least one consumer; a claim that is being deleted stays prepared while it
    is still reserved (its pods may still run)."""
    if claim is None:
        return False
    status = claim.get("status") or {}
    return bool(status.get("reservedFor")) and bool(our_results(claim, node, drivers))


# --------------------------------------------------------------------------- CDI


def cdi_class(driver: str) -> str:
    """CDI class of a driver's devices: ``gpu`` for kdra's GPUs, else the driver's name with
    every character CDI does not allow in a class turned into ``-``."""
    return "gpu" if driver == GPU_DRIVER else re.sub(r"[^A-Za-z0-9_-]", "-", driver)


def cdi_kind(driver: str) -> str:
    """``kdra.dev/gpu`` (or ``kdra.dev/<driver-ish>`` for other drivers)."""
    return f"{CDI_VENDOR}/{cdi_class(driver)}"


def cdi_device_name(claim_uid: str, device: str, share_id: str = "") -> str:
    """``<claim-uid>-<device>``, and ``-<shareID>`` for a share (one claim may hold two
    shares of one device)."""
    return f"{claim_uid}-{device}-{share_id}" if share_id else f"{claim_uid}-{device}"


def cdi_device_id(driver: str, claim_uid: str, device: str, share_id: str = "") -> str:
    """The fully qualified CDI device name a runtime is asked for: ``kdra.dev/gpu=<uid>-gpu-0``."""
    return f"{cdi_kind(driver)}={cdi_device_name(claim_uid, device, share_id)}"


def cdi_file_name(driver: str, claim_uid: str) -> str:
    """One spec file per claim and driver (a CDI spec has exactly one kind):
    ``kdra.dev-<claim-uid>.json`` for GPUs, ``kdra.dev-<class>-<claim-uid>.json`` otherwise."""
    if driver == GPU_DRIVER:
        return f"{CDI_FILE_PREFIX}{claim_uid}.json"
    return f"{CDI_FILE_PREFIX}{cdi_class(driver)}-{claim_uid}.json"


@dataclass(frozen=True)
class ClaimRef:
    uid: str
    namespace: str
    name: str

    @classmethod
    def of(cls, claim: Mapping[str, Any]) -> ClaimRef:
        meta = claim.get("metadata") or {}
        return cls(str(meta.get("uid", "")), str(meta.get("namespace", "")),
                   str(meta.get("name", "")))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


FAKE_DEVICE_DIR = "/dev/kdra"
FAKE_DEVICE_NODE = {"type": "c", "major": 1, "minor": 3, "fileMode": 0o666}
"""A fake GPU's device node in the container: ``/dev/kdra/<device>``, a character device
with /dev/null's numbers (1:3). runc creates it inside the container (nothing is created on
the host) and the device-cgroup rule CDI adds allows exactly it."""


def env_name(device: str) -> str:
    """``KDRA_DEVICE_<NAME>``: the device name upper-cased, every other character ``_``."""
    return "KDRA_DEVICE_" + re.sub(r"[^A-Z0-9]", "_", device.upper())


def build_cdi_spec(*, node: str, claim: ClaimRef, driver: str,
                   devices: Sequence[InventoryDevice],
                   prepared: Sequence[PreparedDevice] = ()) -> JSON:
    """The CDI spec of ``claim``'s ``devices`` of ``driver`` on ``node``: the single
    description of what each device gives a container (containerd injects it when the
    agent's NRI plugin names the device at container creation).

    Each device (``NAME`` = :func:`env_name`) gives ``KDRA_DEVICE_NAME=driver/pool/device``,
    ``KDRA_DEVICE_NAME_CLAIM=<namespace>/<name>``, ``KDRA_DEVICE_NAME_UUID`` when it has a
    ``uuid`` attribute, and for other drivers than GPUs each attribute as
    ``KDRA_DEVICE_NAME_<ATTRIBUTE>`` (the seed's cats: ``..._COLOR=white``); a real GPU its
    host device nodes, a fake GPU the node ``/dev/kdra/<device>`` (:data:`FAKE_DEVICE_NODE`).
    Every variable is named after its device, so a container with several claims' devices
    gets them all (CDI env edits replace a variable of the same name). The lists over a
    container's devices, ``KDRA_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES``, are set by the NRI
    plugin (:mod:`kdra.domain.exposure`), never by a spec. Spec-wide: ``KDRA_NODE_NAME``.

    ``prepared`` (the recorded results of ``devices``, in claim order): one CDI device per
    result — a share gets its own (named with its ``shareID``) — with the partition's or
    share's env from its recorded data (:func:`kdra.domain.shares.share_env`)."""
    by_name = {device.name: device for device in devices}
    pairs: list[tuple[InventoryDevice, PreparedDevice | None]] = (
        [(by_name[p.device], p) for p in prepared
         if p.driver == driver and p.device in by_name] if prepared
        else [(device, None) for device in devices])
    cdi_devices: list[JSON] = []
    for device, record in pairs:
        name = env_name(device.name)
        env = [f"{name}={driver}/{node}/{device.name}", f"{name}_CLAIM={claim.key}"]
        data: Mapping[str, Any] = record.data if record is not None else {}
        uuid = data.get("uuid", device.attribute("uuid"))
        if isinstance(uuid, str):
            env.append(f"{name}_UUID={uuid}")
        if driver != GPU_DRIVER:
            for attribute in sorted(device.attributes):
                value = device.attribute(attribute)
                suffix = re.sub(r"[^A-Z0-9]", "_", attribute.rsplit("/", 1)[-1].upper())
                if attribute != "uuid" and value is not None:
                    text = str(value).lower() if isinstance(value, bool) else str(value)
                    env.append(f"{name}_{suffix}={text}")
        env += share_env(name, data)
        edits: JSON = {"env": env}
        if device.device_nodes:
            edits["deviceNodes"] = [{"path": path} for path in device.device_nodes]
        elif driver == GPU_DRIVER:
            edits["deviceNodes"] = [{"path": f"{FAKE_DEVICE_DIR}/{device.name}",
                                     **FAKE_DEVICE_NODE}]
        share = record.share_id if record is not None else ""
        cdi_devices.append({"name": cdi_device_name(claim.uid, device.name, share),
                            "containerEdits": edits})
    return {
        "cdiVersion": CDI_VERSION,
        "kind": cdi_kind(driver),
        "annotations": {NODE_ANNOTATION: node, CLAIM_ANNOTATION: claim.key,
                        CLAIM_UID_ANNOTATION: claim.uid, DRIVER_ANNOTATION: driver},
        "devices": cdi_devices,
        "containerEdits": {"env": [f"KDRA_NODE_NAME={node}"]},
    }


def encode_json(data: Any, *, compact: bool = False) -> bytes:
    """Stable JSON bytes (sorted keys, UTF-8, trailing newline) for files the agent writes;
    indented by two spaces unless ``compact`` (the checkpoint, rewritten on every prepare).
    orjson: the standard library's encoder falls back to pure Python with ``indent``."""
    options = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    return orjson.dumps(data, option=options if compact else options | orjson.OPT_INDENT_2)


# --------------------------------------------------------------------------- checkpoint


class CheckpointCorrupt(ValueError):
    """The checkpoint file does not decode, or its checksum does not match its content."""


@dataclass(frozen=True)
class PreparedDevice:
    request: str
    driver: str
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    """What goes into ``status.devices[].data`` (uuid, productName, cdiDeviceIDs)."""
    admin_access: bool = False
    """Prepared for an adminAccess request: it does not make the device busy for others."""
    share_id: str = ""
    """A share of a device several claims hold (the result's ``shareID``)."""
    consumed_capacity: tuple[tuple[str, str], ...] = ()
    """What the share takes of the device's capacity (the result's ``consumedCapacity``)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)

    def to_json(self) -> JSON:
        out: JSON = {"request": self.request, "driver": self.driver, "pool": self.pool,
                     "device": self.device, "cdiDeviceIDs": list(self.cdi_device_ids),
                     "data": dict(self.data)}
        if self.admin_access:
            out["adminAccess"] = True
        if self.share_id:
            out["shareID"] = self.share_id
        if self.consumed_capacity:
            out["consumedCapacity"] = dict(self.consumed_capacity)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreparedDevice:
        consumed = data.get("consumedCapacity") or {}
        return cls(str(data["request"]), str(data["driver"]), str(data["pool"]),
                   str(data["device"]), tuple(str(i) for i in data.get("cdiDeviceIDs", ())),
                   dict(data.get("data") or {}), bool(data.get("adminAccess", False)),
                   str(data.get("shareID") or ""),
                   tuple(sorted((str(k), str(v)) for k, v in consumed.items())))


ClaimState = Literal["preparing", "prepared"]


@dataclass(frozen=True)
class ClaimEntry:
    """One claim in the checkpoint. ``preparing``: CDI files may or may not exist yet;
    ``prepared``: CDI files are written and ``devices`` is the recorded result."""

    claim: ClaimRef
    state: ClaimState
    devices: tuple[PreparedDevice, ...]
    cdi_files: tuple[str, ...]

    def to_json(self) -> JSON:
        return {"namespace": self.claim.namespace, "name": self.claim.name,
                "state": self.state, "devices": [d.to_json() for d in self.devices],
                "cdiFiles": list(self.cdi_files)}

    @classmethod
    def from_json(cls, uid: str, data: Mapping[str, Any]) -> ClaimEntry:
        state = data["state"]
        if state not in ("preparing", "prepared"):
            raise ValueError(f"unknown state {state!r}")
        return cls(ClaimRef(uid, str(data["namespace"]), str(data["name"])), state,
                   tuple(PreparedDevice.from_json(d) for d in data.get("devices", ())),
                   tuple(str(f) for f in data.get("cdiFiles", ())))


@dataclass(frozen=True)
class Checkpoint:
    """Every claim a node agent has (begun to) prepare on one node, by claim UID."""

    node: str
    claims: Mapping[str, ClaimEntry] = field(default_factory=dict)

    def with_entry(self, entry: ClaimEntry) -> Checkpoint:
        return replace(self, claims={**self.claims, entry.claim.uid: entry})

    def without(self, uid: str) -> Checkpoint:
        return replace(self, claims={k: v for k, v in self.claims.items() if k != uid})

    def by_key(self, namespace: str, name: str) -> list[ClaimEntry]:
        return self._index.get((namespace, name), [])

    @cached_property
    def _index(self) -> dict[tuple[str, str], list[ClaimEntry]]:
        """Entries by claim namespace/name, built once per (immutable) checkpoint: the agent
        asks on every claim event of the cluster (a linear scan was ~8% of its CPU)."""
        index: dict[tuple[str, str], list[ClaimEntry]] = {}
        for entry in self.claims.values():
            index.setdefault((entry.claim.namespace, entry.claim.name), []).append(entry)
        return index

    def _body(self) -> JSON:
        return {"node": self.node,
                "claims": {uid: self.claims[uid].to_json() for uid in sorted(self.claims)}}

    def encode(self) -> bytes:
        body = self._body()
        return encode_json({"version": CHECKPOINT_VERSION, **body, "checksum": _checksum(body)},
                           compact=True)

    @classmethod
    def decode(cls, raw: bytes, node: str) -> Checkpoint:
        """Raises CheckpointCorrupt for bytes that are not a checkpoint of ``node``."""
        try:
            data = json.loads(raw)
            if data.get("version") != CHECKPOINT_VERSION:
                raise CheckpointCorrupt(f"unsupported checkpoint version {data.get('version')!r}")
            body = {"node": data["node"], "claims": data["claims"]}
            if data.get("checksum") != _checksum(body):
                raise CheckpointCorrupt("checksum mismatch: the file was modified or damaged")
            if body["node"] != node:
                raise CheckpointCorrupt(f"checkpoint of node {body['node']!r}, not {node!r}")
            claims = {uid: ClaimEntry.from_json(uid, entry)
                      for uid, entry in body["claims"].items()}
        except CheckpointCorrupt:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointCorrupt(f"not a checkpoint: {exc}") from exc
        return cls(node, claims)


def _checksum(body: Mapping[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def prepared_devices(claim: ClaimRef, results: Sequence[Result],
                     devices: Mapping[tuple[str, str], InventoryDevice],
                     admin_requests: frozenset[str] = frozenset(),
                     ) -> tuple[PreparedDevice, ...]:
    """The recorded result of preparing ``results`` (every device must be in ``devices``,
    keyed by (driver, name)); results of ``admin_requests`` are marked admin access."""
    prepared = []
    for result in results:
        device = devices[(result.driver, result.device)]
        ids = (cdi_device_id(result.driver, claim.uid, result.device, result.share_id),)
        data: dict[str, Any] = {}
        for name in ("uuid", "productName"):
            value = device.attribute(name)
            if value is not None:
                data[name] = value
        data.update(share_data(device, result.pool, result.share_id, result.consumed_capacity))
        data["cdiDeviceIDs"] = list(ids)
        admin = result.request.split("/", 1)[0] in admin_requests
        prepared.append(PreparedDevice(result.request, result.driver, result.pool,
                                       result.device, ids, data, admin, result.share_id,
                                       result.consumed_capacity))
    return tuple(prepared)


# --------------------------------------------------------------------------- claim status


@dataclass(frozen=True)
class DeviceOutcome:
    """How preparing one device went, for ``status.devices[]``."""

    driver: str
    pool: str
    device: str
    ready: bool
    reason: str
    message: str
    data: Mapping[str, Any] | None = None
    health: tuple[bool, str, str] | None = None
    """(healthy, reason, message) for the ``Healthy`` condition; None: not reported."""
    share_id: str = ""
    """The share's ``shareID`` (``status.devices[]`` entries are keyed by it too)."""


def ready_outcomes(devices: Sequence[PreparedDevice]) -> list[DeviceOutcome]:
    return [DeviceOutcome(d.driver, d.pool, d.device, True, "Prepared",
                          "CDI devices: " + ", ".join(d.cdi_device_ids), d.data,
                          share_id=d.share_id)
            for d in devices]


def device_statuses(outcomes: Sequence[DeviceOutcome], *, now: str,
                    previous: Sequence[Mapping[str, Any]] = (),
                    generation: int | None = None) -> list[JSON]:
    """``status.devices[]`` entries for ``outcomes``. A condition whose status did not change
    keeps its ``lastTransitionTime`` from ``previous`` (so re-reporting is a no-op)."""
    before = {(e.get("driver"), e.get("pool"), e.get("device"), e.get("shareID") or ""): e
              for e in previous}
    entries = []
    for outcome in outcomes:
        status = "True" if outcome.ready else "False"
        old = before.get((outcome.driver, outcome.pool, outcome.device,
                          outcome.share_id)) or {}
        since = transition_time(old.get("conditions"), READY, status, now)
        condition: JSON = {"type": READY, "status": status, "reason": outcome.reason,
                           "message": outcome.message[:4096], "lastTransitionTime": since}
        if generation is not None:
            condition["observedGeneration"] = generation
        conditions = [condition]
        if outcome.health is not None:
            healthy, reason, message = outcome.health
            status = "True" if healthy else "False"
            since = transition_time(old.get("conditions"), HEALTHY, status, now)
            health: JSON = {"type": HEALTHY, "status": status, "reason": reason,
                            "message": message[:4096], "lastTransitionTime": since}
            if generation is not None:
                health["observedGeneration"] = generation
            conditions.append(health)
        entry: JSON = {"driver": outcome.driver, "pool": outcome.pool, "device": outcome.device,
                       "conditions": conditions}
        if outcome.share_id:
            entry["shareID"] = outcome.share_id
        if outcome.data:
            entry["data"] = dict(outcome.data)
        entries.append(entry)
    return entries


def merge_device_statuses(existing: Sequence[Mapping[str, Any]], ours: Sequence[JSON], *,
                          node: str, drivers: Iterable[str]) -> list[JSON]:
    """``existing`` with every entry of (our drivers, pool ``node``) replaced by ``ours``;
    entries other drivers or nodes wrote are kept, in their order, before ours."""
    wanted = set(drivers)
    kept = [dict(e) for e in existing
            if not (e.get("driver") in wanted and e.get("pool") == node)]
    return kept + list(ours)

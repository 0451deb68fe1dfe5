"""Device quotas in the operator: the binder's quota book and the DeviceQuota status writer.

:class:`QuotaBook` belongs to the binder (one scheduling loop, no locks): it keeps the
namespaces' DeviceQuotas (from their informer) and a :class:`~kdra.dra.quota.Ledger` of
what each claim holds, fed by the binder at the same points as its allocator snapshot — every claim
version it sees, every allocation it assumes before writing it and forgets afterwards — so the
check at allocation time counts in-flight allocations and counts a shared claim once.
:meth:`QuotaBook.admit` takes the placement the binder's policy chose; if it does not fit a
quota, the next best node's placement (a different node may give smaller devices or another
``firstAvailable`` alternative), up to :data:`TRIES` nodes; else the denial to report.

:class:`QuotaStatusWriter` (leader only, as the binder) writes each DeviceQuota's status — usage
per limited class, the ``usedSummary``/``hardSummary`` kubectl shows, an ``Exceeded``
condition — and the ``kdra_quota_*`` gauges, when a namespace's usage or quotas changed, at most
every :data:`MIN_INTERVAL` seconds (claim events arrive by the hundred per second at scale).

Invariants:
- Nothing here costs anything in a namespace without DeviceQuotas: the book only remembers the
  newest version of each claim and the allocations in flight there (two dictionary writes), and
  computes their charges when the namespace's first valid DeviceQuota arrives (so a quota
  created later counts what is already allocated); no check runs and no placement's results
  are built there. A namespace whose last quota goes drops its charges again.
- A malformed DeviceQuota (the CRD schema rules it out; this is the second line) limits nothing
  and says why in its status (condition ``Exceeded`` Unknown, reason ``InvalidSpec``).
- A status write does not decide who owns a device, so it is a merge patch of the status
  subresource without a resourceVersion precondition; it is written only when what it reports
  changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kdra import GROUP
from kdra.dra.allocator import Placement
from kdra.dra.errors import InvalidObject
from kdra.dra.models import AllocationResult, DeviceRequestAllocationResult, ResourceClaim
from kdra.dra.quota import (
    QUOTA_REASON,
    Charge,
    Denial,
    DeviceFacts,
    DeviceQuota,
    Ledger,
    Usage,
    add_charges,
    allocation_denial,
    check,
    claim_charge,
    entry_facts,
    least_charge,
    parse_quota,
)
from kdra.dra.timestamps import status_update
from kdra.kube.client import KubeClient
from kdra.kube.core.printable import MAX_LINE, printable
from kdra.kube.errors import ApiError
from kdra.kube.resources import Resource
from kdra.kube.store import JSON, Store, key_of
from kdra.operator import metrics
from kdra.operator.core.quota import quota_status
from kdra.operator.core.quota_admission import quota_namespace

log = logging.getLogger(__name__)

DEVICE_QUOTAS = Resource(GROUP, "v1alpha1", "devicequotas", True, "DeviceQuota")
TRIES = 8
"""Nodes whose placements are checked against the quotas per scheduling attempt."""
MIN_INTERVAL = 0.5
"""Shortest time between two status passes."""
RETRY = 5.0
"""Seconds before a status write that failed is tried again."""


class QuotaBook:
    """The binder's quotas and charges (see the module doc)."""

    def __init__(self, slices: Store) -> None:
        self.slices = slices  # the binder's slice cache (raw v1, indexed by pool)
        self.ledger = Ledger()
        """Charges of the claims of namespaces with quotas (the *charged* namespaces)."""
        self._observed: dict[str, tuple[DeviceRequestAllocationResult, ...]] = {}
        """Claim key → the allocation results its observed charge was computed from."""
        self._latest: dict[str, dict[str, ResourceClaim]] = {}
        """Namespace → claim key → the newest version seen, in every namespace."""
        self._in_flight: dict[str, dict[str, tuple[ResourceClaim, AllocationResult]]] = {}
        """Namespace → claim key → its assumed allocation, in every namespace."""
        self.quotas: dict[str, dict[str, DeviceQuota]] = {}  # namespace → name → quota
        self.objects: dict[tuple[str, str], JSON] = {}  # (namespace, name) → object
        self.invalid: dict[tuple[str, str], str] = {}  # (namespace, name) → why
        self.dirty: set[str] = set()  # namespaces whose quotas' status may be out of date
        self.changed = asyncio.Event()  # set when ``dirty`` grows

    # ------------------------------------------------------------------ inputs

    def on_quota(self, event_type: str | None, obj: JSON) -> None:
        namespace, name = key_of(obj)
        charged = namespace in self.quotas
        quotas = self.quotas.setdefault(namespace, {})
        quotas.pop(name, None)
        self.objects.pop((namespace, name), None)
        self.invalid.pop((namespace, name), None)
        if event_type != "DELETED":
            self.objects[(namespace, name)] = obj
            try:
                quotas[name] = parse_quota(obj)
            except InvalidObject as exc:
                log.warning("DeviceQuota %s/%s limits nothing: %s", namespace, name, exc)
                self.invalid[(namespace, name)] = str(exc)
        else:
            metrics.forget_quota(namespace, name)
        if not quotas:
            del self.quotas[namespace]
            if charged:
                self._uncharge(namespace)
        elif not charged:
            self._charge(namespace)
        self._dirty(namespace, force=True)

    def written(self, obj: JSON) -> None:
        """A status write's answer (newer than the object the book had)."""
        key = key_of(obj)
        if key in self.objects:
            self.objects[key] = obj

    def observe(self, claim: ResourceClaim) -> None:
        """A claim version the binder saw (its allocation, if any, counts). Most versions
        change only reservations or device status: a claim whose allocation results are
        those already charged is not charged again (the binder sees every claim event)."""
        namespace = claim.metadata.namespace or ""
        self._latest.setdefault(namespace, {})[claim.key] = claim
        if namespace in self.quotas:
            self._observe(namespace, claim)

    def _observe(self, namespace: str, claim: ResourceClaim) -> None:
        allocation = claim.status.allocation
        results = allocation.devices.results if allocation is not None else ()
        if self._observed.get(claim.key) == results:
            return
        self._observed[claim.key] = results
        self._dirty(namespace,
                    self.ledger.observe(claim.key, claim_charge(claim, None, self.facts)))

    def remove(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        _pop(self._latest, namespace, key)
        _pop(self._in_flight, namespace, key)
        if namespace in self.quotas:
            self._observed.pop(key, None)
            self._dirty(namespace, self.ledger.remove(key))

    def assume(self, claim: ResourceClaim, allocation: AllocationResult) -> None:
        namespace = claim.metadata.namespace or ""
        self._in_flight.setdefault(namespace, {})[claim.key] = (claim, allocation)
        if namespace in self.quotas:
            self._dirty(namespace, self.ledger.assume(
                claim.key, claim_charge(claim, allocation, self.facts)))

    def forget(self, key: str) -> None:
        namespace = key.split("/", 1)[0]
        _pop(self._in_flight, namespace, key)
        if namespace in self.quotas:
            self._dirty(namespace, self.ledger.forget(key))

    def _charge(self, namespace: str) -> None:
        """The namespace's first quota: charge what its claims hold and have in flight."""
        for claim in self._latest.get(namespace, {}).values():
            self._observe(namespace, claim)
        for key, (claim, allocation) in self._in_flight.get(namespace, {}).items():
            self.ledger.assume(key, claim_charge(claim, allocation, self.facts))

    def _uncharge(self, namespace: str) -> None:
        """The namespace's last quota went: its charges are no longer kept."""
        for key in [*self._latest.get(namespace, {}), *self._in_flight.get(namespace, {})]:
            self._observed.pop(key, None)
            self.ledger.remove(key)

    def mark(self, namespace: str) -> None:
        """Have the status of the namespace's quotas written again."""
        self._dirty(namespace, force=True)

    def _dirty(self, namespace: str, changed: bool = True, *, force: bool = False) -> None:
        if changed and (force or namespace in self.quotas):
            self.dirty.add(namespace)
            self.changed.set()

    def facts(self, driver: str, pool: str, device: str) -> DeviceFacts | None:
        """A device's capacity and counters, from the slice that publishes it (None when no
        slice the binder knows publishes it)."""
        for slice_ in self.slices.index("pool", f"{driver}/{pool}"):
            for entry in (slice_.get("spec") or {}).get("devices") or ():
                if isinstance(entry, dict) and entry.get("name") == device:
                    return entry_facts(driver, entry)
        return None

    # ------------------------------------------------------------------ the check

    def admit(self, namespace: str, claims: Sequence[ResourceClaim], choice: Placement,
              placements: dict[str, Placement],
              choose: Callable[[dict[str, Placement]], Placement | None],
              still_fits: Callable[[Placement], bool] | None = None,
              ) -> tuple[Placement | None, Denial | None]:
        """``choice`` if its allocation of ``claims`` fits the namespace's quotas; else the
        best other placement that fits (at most :data:`TRIES` tried); else (None, the denial
        of the policy's first choice). ``still_fits``: after a long search, whether another
        placement can still be taken (the caller checked ``choice``); one that cannot is
        passed over without looking at its results."""
        quotas = self.quotas.get(namespace)
        if not quotas:
            return choice, None
        used = self.ledger.used(namespace)
        first: Denial | None = None
        rest = dict(placements)
        current: Placement | None = choice
        for _ in range(TRIES):
            if current is None:
                break
            if current is not choice and still_fits is not None and not still_fits(current):
                rest.pop(current.node, None)
                current = choose(rest)
                continue
            denial = allocation_denial(quotas.values(), used, claims, current.results,
                                       self.facts)
            if denial is None:
                return current, None
            first = first or denial
            rest.pop(current.node, None)
            current = choose(rest)
        if first is not None:
            metrics.record_quota_denial(namespace, first.quota.split("/", 1)[1],
                                        first.device_class, first.resource)
        return None, first

    def least_denial(self, namespace: str, claims: Sequence[ResourceClaim],
                     freed: Iterable[str] = ()) -> Denial | None:
        """The denial that any allocation of ``claims`` would meet even if the claims
        ``freed`` (keys ``namespace/name``; others' namespaces change nothing) held nothing:
        their least charge (:func:`~kdra.dra.quota.least_charge`) against what the
        namespace holds without them. None: an allocation might be admitted (the check at
        allocation time, :meth:`admit`, has the last word). For preemption: evicting pods
        for a pod its quotas refuse anyway frees nothing it may take."""
        quotas = self.quotas.get(namespace)
        if not quotas:
            return None
        used: Mapping[str, Usage] = self.ledger.used(namespace)
        for key in set(freed):
            if key.startswith(namespace + "/"):
                used = add_charges(used, self.ledger.charge(key), -1)
        asked: Mapping[str, Usage] = {}
        for claim in claims:
            asked = add_charges(asked, least_charge(claim))
        return check(quotas.values(), used, asked)


async def namespace_quotas(client: KubeClient | None, body: Any) -> list[JSON]:
    """The DeviceQuotas the admission review ``body`` needs (those of the namespace of a
    ResourceClaim being created; else none). When they cannot be read the claim is admitted:
    the binder still checks at allocation."""
    namespace = quota_namespace(body)
    if client is None or namespace is None:
        return []
    try:
        return await client.list(DEVICE_QUOTAS, namespace)
    except (ApiError, OSError) as exc:
        log.warning("cannot read the DeviceQuotas of %s for admission (the binder checks at "
                    "allocation): %s", namespace, exc)
        return []


class QuotaStatusWriter:
    """Writes the DeviceQuotas' status and gauges from a :class:`QuotaBook` (module doc)."""

    def __init__(self, client: KubeClient, book: QuotaBook) -> None:
        self.client = client
        self.book = book
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="quota-status")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await self.book.changed.wait()
            self.book.changed.clear()
            dirty, self.book.dirty = self.book.dirty, set()
            for namespace in sorted(dirty):
                try:
                    await self.write(namespace)
                except Exception:  # a bug must not end the writer: logged, tried again later
                    log.exception("DeviceQuotas of %s: status not written", namespace)
                    asyncio.get_running_loop().call_later(RETRY, self.book.mark, namespace)
            await asyncio.sleep(MIN_INTERVAL)

    async def write(self, namespace: str) -> None:
        """Bring the status of every DeviceQuota of ``namespace`` up to date."""
        book = self.book
        used = book.ledger.used(namespace)
        names = sorted(name for ns, name in book.objects if ns == namespace)
        for name in names:
            obj = book.objects[(namespace, name)]
            quota = book.quotas.get(namespace, {}).get(name)
            if quota is None:
                metrics.forget_quota(namespace, name)  # it limits nothing now
                why = printable(book.invalid.get((namespace, name), ""), MAX_LINE)
                status: dict[str, Any] = {"used": [], "usedSummary": "", "hardSummary": "",
                                          "conditions": [{
                                              "type": "Exceeded", "status": "Unknown",
                                              "reason": "InvalidSpec", "message": why,
                                          }]}
            else:
                status = quota_status(quota, used, claims=book.ledger.claims(namespace),
                                      in_flight=book.ledger.in_flight(namespace))
                metrics.set_quota(namespace, name, _figures(quota, used))
            if status_update(obj.get("status") or {}, status) is None:
                continue
            try:
                written = await self.client.patch(DEVICE_QUOTAS, name, {"status": status},
                                                  namespace, subresource="status")
            except (ApiError, OSError) as exc:
                log.warning("DeviceQuota %s/%s: status not written (retrying in %gs): %s",
                            namespace, name, RETRY, exc)
                asyncio.get_running_loop().call_later(RETRY, book.mark, namespace)
                continue
            book.written(written)


def _pop(table: dict[str, dict[str, Any]], namespace: str, key: str) -> None:
    """Remove ``table[namespace][key]``, and the namespace once it is empty."""
    entries = table.get(namespace)
    if entries is not None:
        entries.pop(key, None)
        if not entries:
            del table[namespace]


def _figures(quota: DeviceQuota, used: Charge) -> list[tuple[str, str, float, float]]:
    """``(class, resource, used, hard)`` for each limit of the quota (the gauges)."""
    rows = []
    for limit in quota.limits:
        usage = used.get(limit.device_class, Usage())
        rows += [(limit.device_class, resource, float(usage.amount(resource).value),
                  float(hard.value)) for resource, hard in limit.hard.items()]
    return rows


__all__ = ["DEVICE_QUOTAS", "QUOTA_REASON", "QuotaBook", "QuotaStatusWriter", "namespace_quotas"]

"""What the binder tells users about a pod: the ``PodScheduled=False`` condition and the
``FailedScheduling`` event of a pod that cannot be scheduled (:class:`Reporter`), the message
of a search that ran out of budget, the devices a ``Scheduled`` event names, and the metric
labels of the node filters' rejections.

Invariants:
- A pod reported unschedulable is parked (waits for a change in the cluster) unless the
  caller retries it on a timer; its condition is written only when its reason or message
  changed, and the event is emitted on every report.
- The condition carries a ``lastTransitionTime``, as kube-scheduler's: the time it became
  ``False``, kept while it stays ``False`` (a new reason or message is no transition).
- A condition write the API server refuses as busy or restarting (429, 5xx) raises, so the
  pod is retried after a backoff and the condition written then; any other refusal is
  logged and the event still emitted.
- The condition's message holds no control sequences (it names claims, selectors and devices
  users wrote; ``kubectl describe pod`` prints it): it is the message through
  :func:`kdra.kube.core.printable.printable`, at most :data:`MAX_CONDITION_MESSAGE` characters
  (the Event recorder does the same to its copy).
- The metric labels of node-filter messages are a fixed set (no label per message).
"""

from __future__ import annotations

import logging
from collections import Counter

from kdra.dra.allocator import ClusterOutcome
from kdra.dra.scheduling import SearchBudget, explain
from kdra.dra.timestamps import api_time
from kdra.kube.client import KubeClient
from kdra.kube.core.printable import printable
from kdra.kube.errors import ApiError
from kdra.kube.events import EventRecorder
from kdra.kube.resources import PODS
from kdra.kube.store import JSON, Store, key_of
from kdra.operator import metrics
from kdra.operator.scheduler.pending import Attempt, Context, PendingPods

log = logging.getLogger(__name__)
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MAX_CONDITION_MESSAGE = 4096


class Reporter:
    """Reports pods unschedulable (see the module doc); parks them in ``pods``."""

    def __init__(self, client: KubeClient, events: EventRecorder, pods: PendingPods) -> None:
        self.client = client
        self.events = events
        self.pods = pods

    async def unschedulable(self, pod: JSON, message: str, *, reason: str = "Unschedulable",
                            park: bool = True) -> None:
        """Report the pod unschedulable (condition + event); ``park``: wait for a change in
        the cluster before the next attempt."""
        key = key_of(pod)
        message = printable(message, MAX_CONDITION_MESSAGE)
        if park:
            self.pods.parked.add(key)
        self.pods.records.request(key)  # not bound soon: its claims' record is written now
        log.info("pod %s/%s is unschedulable: %s", *key, message)
        current = next((c for c in pod.get("status", {}).get("conditions") or []
                        if c.get("type") == "PodScheduled"), None)
        # kube-scheduler's UpdatePodCondition: the transition time changes with the status.
        since = current.get("lastTransitionTime") if current is not None \
            and current.get("status") == "False" else None
        condition = {"type": "PodScheduled", "status": "False", "reason": reason,
                     "message": message, "lastProbeTime": None,
                     "lastTransitionTime": since or api_time()}
        if current is None or current.get("message") != message or \
                current.get("reason") != reason:
            try:
                updated = await self.client.patch(
                    PODS, pod["metadata"]["name"], {"status": {"conditions": [condition]}},
                    pod["metadata"]["namespace"], subresource="status",
                    content_type=STRATEGIC_MERGE)
                if key in self.pods.pending:
                    self.pods.pending[key] = updated
            except ApiError as exc:
                if exc.status == 429 or exc.status >= 500:
                    raise  # the server is busy or restarting: the pod is retried (backoff)
                log.debug("condition on %s/%s not written: %s", *key, exc)
        await self.events.warn(pod, "FailedScheduling", message)


def exhausted_message(budget: SearchBudget, attempt: Context, outcome: ClusterOutcome,
                      seconds: float) -> str:
    """Why no placement was found within the search budget (``seconds``: the search's time,
    0 when it ended within the loop's slice)."""
    claims = ", ".join(repr(claim.metadata.name) for claim in attempt.unallocated)
    spent = (f"{outcome.steps} steps in {seconds:.1f}s" if seconds
             else f"{outcome.steps} steps")
    if outcome.cel_units:  # the selectors' run-time cost counts as steps (dra.allocator.pacing)
        spent += f", its selectors costing {outcome.cel_units} units of CEL at run time"
    return (f"allocation search for claims {claims} exhausted its budget "
            f"({budget.steps} steps, "
            f"{budget.node_steps(len(attempt.candidates))} per node, "
            f"{budget.timeout:g}s; spent {spent}) without finding a placement; "
            f"retrying later. {explain(attempt.reasons, attempt.total)}")


def record_filtered(filtered: Counter[str]) -> None:
    """Count the node filters' rejections of a pod that fits nowhere, by fixed label."""
    for message, count in filtered.items():
        metrics.record_unschedulable(_reason_label(message), count)


def _reason_label(message: str) -> str:
    """A fixed metric label for a node-filter message."""
    for label, words in (("taint", "taint"), ("unschedulable", "unschedulable"),
                         ("affinity", "affinity"), ("resources", "Insufficient"),
                         ("resources", "Too many pods"), ("prepare-failed", "prepare"),
                         ("claim-node-selector", "node selector")):
        if words in message:
            return label
    return "other"


def devices(claims: Store, namespace: str, attempt: Attempt) -> list[str]:
    """The devices the attempt's claims hold now, as ``pool/device`` (for the event)."""
    out = []
    for _, name in attempt.claims:
        raw = claims.get((namespace, name)) or {}
        allocation = (raw.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or []:
            out.append(f"{r['pool']}/{r['device']}")
    return out

"""The binder: kdra's scheduler for pods with ``schedulerName: kdra-scheduler``.

One scheduling loop — the only writer of ``status.allocation`` — takes pending pods in
priority order and, for each: resolves its claims, filters nodes (unschedulable, taints,
node selector / required affinity, cpu / memory / pod count), runs the allocator over the
candidates, picks a node by policy (binpack, spread, first-fit) and writes each claim's
allocation and reservation. A separate task per pod then waits for the node agent to report
every allocated device Ready (**prepare before bind**), writes the per-container allocation
annotations the pod's env reads, and binds the pod through ``pods/binding``.

Invariants:
- Every claim write carries the cached object's resourceVersion: a concurrent change fails
  with Conflict, the attempt is rolled back (claims this attempt allocated are deallocated)
  and the pod is retried from fresh state ("allocated elsewhere in the meantime").
- An allocation is *assumed* in the allocator's snapshot before it is written, so the next pod
  never gets the same device while the write is in flight; the assumption is dropped once the
  written claim is in the cache, or when the write fails.
- A pod that fits nowhere gets a ``FailedScheduling`` event and a ``PodScheduled=False``
  condition saying why, node group by node group, and waits until slices, claims, classes or
  nodes change (or a periodic flush) — never a busy retry loop. While claims whose pods are
  gone still hold devices (being released), it first waits for those releases, unreported,
  for at most ``release_wait`` seconds from its first failed attempt.
- The snapshot follows the newest version of each claim the binder has seen (a write
  response, its own or the claim controller's, may be newer than a watch event that arrives
  after it): a stale event never shows a device free that a newer version holds.
- A prepare that fails or times out deallocates what this attempt allocated, emits an event,
  keeps the node out of that pod's candidates for a while, and retries elsewhere.
- A pod whose writes fail (API errors, the API server unreachable; its unschedulable
  condition included) is retried after a per-pod jittered backoff
  (:func:`kdra.kube.core.backoff.backoff_delay`), reset once its claims are written. Rolling
  back is best effort: a reservation it cannot undo is built upon by the pod's next attempt
  (or released by the claim controller once the pod is gone), so a failed roll-back never
  leaves the pod out of the queue.

One job per module (each imports only those listed below it)::

    loop.py       the Binder: the helpers composed, watch events in, the loop, one attempt
    writes.py     a pod's task: claim writes, roll-back, the binding
    reporting.py  unschedulable condition + event, search-exhausted message, metric labels
    prepare.py    the wait for the node agent's Ready
    pending.py    the queue, pending pods and their attempts, backoff, wake-ups, releases
    cluster.py    nodes, slices, classes, rules, claims, quotas → the allocator's snapshot;
                  node usage and filters
    settings.py   BinderSettings
"""

from kdra.operator.scheduler.loop import Binder
from kdra.operator.scheduler.settings import BinderSettings

__all__ = ["Binder", "BinderSettings"]

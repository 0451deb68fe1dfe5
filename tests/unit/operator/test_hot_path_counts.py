"""The per-pod work of the hot path must not grow silently (issue 42): on a fixed small
workload driven through the real claim controller and binder
(tests/unit/operator/hot_path_workload.py) the API requests, allocator placements and search
passes, CEL evaluations, claim parses and quota charge computations per bound pod are counted
— counts, not times, so the guard is deterministic on any machine. A change that adds an API
request or an allocator pass per pod fails here; if the added work is worth it, raise the
budget in the same commit and say why (bench/RESULTS.md, "A baseline that shows drift").

The budgets are today's counts, and what each is:
- writes: the claim created from the template (with kdra's finalizer), the claim's
  allocation + reservation (one status PUT), the binding (which carries the devices
  annotation and the pod's claim-statuses record: no pod PATCH for it, issue 42), the
  ``Scheduled`` event; no reads (the caches speak for the API server);
- one placement and one search pass per pod (every pod fits at its first attempt);
- CEL: the class selector once per device (memoised per device: 100 devices / 50 pods);
- claim parses: once per claim version the binder sees (created, allocated, Ready);
- quota charges: none, as no DeviceQuota exists (what quota costs when unused is zero);
- the release, once every pod is deleted: two writes per pod — the finalizer's removal,
  then (on that version's watch event) the claim's DELETE, which ends it with its
  allocation — no reads (the pod's deletion was watched), and the binder's cache parses the
  finalizer-free version. (Leaving the claim to the garbage collector cost a deallocating
  status PUT, the finalizer's removal and the collector's DELETEs; issue 42.)
"""

from __future__ import annotations

import asyncio

import pytest

from kdra.kube.core.flavours import KDRA, NATIVE, Flavour
from tests.unit.operator.hot_path_workload import run

NODES, PODS = 10, 50
BUDGET = {
    "api writes": 4.0,
    "  POST events": 1.0,
    "  POST pods/binding": 1.0,
    "  POST resourceclaims": 1.0,
    "  PUT resourceclaims/status": 1.0,
    "api reads": 0.0,
    "allocator placements": 1.0,
    "allocator search passes": 1.0,
    "CEL evaluations": NODES * 10 / PODS,
    "claim parses": 3.0,
    "quota charges": 0.0,
    "release writes": 2.0,
    "  release DELETE resourceclaims": 1.0,
    "  release PATCH resourceclaims": 1.0,
    "release reads": 0.0,
    "release claim parses": 1.0,
}


NATIVE_BUDGET = {**BUDGET, "api writes": 5.0, "  PATCH pods": 1.0, "claim parses": 2.0}
"""The native flavour: one request more (the claim's name recorded in the pod's
``status.resourceClaimStatuses`` — ``PATCH pods`` on the status subresource, which a Binding
cannot carry), and one claim version fewer (no agent reports Ready before the binding: the
kubelet prepares after it)."""


@pytest.mark.parametrize(("flavour", "budget"), [(KDRA, BUDGET), (NATIVE, NATIVE_BUDGET)],
                         ids=["kdra", "native"])
def test_per_pod_work_of_the_hot_path_stays_within_its_budget(
        flavour: Flavour, budget: dict[str, float]) -> None:
    counts = asyncio.run(run(nodes=NODES, pods=PODS, flavour=flavour, release=True))
    assert counts.bound == PODS
    per_pod = counts.per_pod()
    print("\n".join(f"{name:28s} {value:6.2f}" for name, value in per_pod.items()))
    over = {name: (value, budget.get(name, 0.0)) for name, value in per_pod.items()
            if value > budget.get(name, 0.0) + 1e-9}
    assert not over, f"per-pod work above its budget (counted, budget): {over}"
    assert per_pod == budget  # work that went away: lower the budget too, so it stays away

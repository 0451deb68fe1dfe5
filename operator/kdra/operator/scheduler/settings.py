"""The binder's settings: placement policy, timings of its waits and retries, and the
preemption and search budgets it hands on.

Invariant: frozen — one value for the binder's life, read by the binder and every helper it
owns (none of them keeps a copy of a setting of its own).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kdra.dra.scheduling import SearchBudget
from kdra.operator.scheduler.preemption import PreemptionSettings


@dataclass(frozen=True)
class BinderSettings:
    policy: str = "binpack"
    """Default placement policy: binpack, spread or first-fit (per pod: annotation
    ``resource.kdra.dev/placement-policy``)."""
    prepare_timeout: float = 120.0
    """Seconds to wait for the node agent to report allocated devices Ready before the
    allocation is undone and the pod retried elsewhere."""
    binding_timeout: float = 600.0
    """Seconds to wait, from the allocation, for devices with binding conditions to report
    them all True (upstream's bindingTimeout, 600 s) before the allocation is undone and the
    pod retried elsewhere."""
    exclude_after_failure: float = 300.0
    """Seconds a node stays out of a pod's candidates after preparing on it failed."""
    flush_interval: float = 30.0
    """Unschedulable pods are retried at least this often, even without a cluster change."""
    wake_delay: float = 0.05
    """Seconds from a change that may help unschedulable pods (devices freed, a node or
    slice changed) to their retry: changes arriving together wake them once. Short, as the
    pods wait for it (in steady state on a full cluster, every new pod does)."""
    retry_delay: float = 1.0
    """Seconds before a pod whose writes failed is retried (jittered, doubling per failure
    of that pod, at most ``max_retry_delay``)."""
    max_retry_delay: float = 30.0
    """The longest wait before retrying a pod whose writes keep failing."""
    release_wait: float = 5.0
    """Seconds a pod that fits nowhere waits, unreported, while devices are being released
    (their claims' pods are gone and the claim controller has not yet deallocated them):
    in a full cluster a new pod often arrives just before its predecessor's devices are
    freed. After this, or once nothing is being released, it is reported unschedulable."""
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    """Priority preemption for pods that fit nowhere (kdra.operator.scheduler.preemption)."""
    search: SearchBudget = field(default_factory=SearchBudget)
    """How much searching one pod's attempt may do (steps, seconds, steps between yields);
    a pod that finds no placement within it is reported ``AllocationSearchExhausted`` and
    retried after a backoff (kdra.operator.scheduler.searches)."""

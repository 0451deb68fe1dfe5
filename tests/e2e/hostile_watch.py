"""What an attack costs the others: the operator's memory, and webhook answers to another tenant.

* :class:`Memory`: the operator's peak resident set (VmHWM) since :meth:`Memory.start`, reset
  through ``/proc/<pid>/clear_refs`` (Linux >= 4.0), against its RSS at the start.
* :func:`~tests.e2e.hostile_helpers.logs_on_failure` (re-exported: an autouse fixture for a
  module that imports it): the operator's and the agent's logs under a failed test.
* :class:`TenantProbe`: another namespace user (``edit`` in the probes namespace) creating
  pods with a claims annotation, server-side dry-run, in a loop: each create passes kdra's
  mutating and validating pod webhooks (their matchConditions select pods with claims) and
  persists nothing. Every create must be answered (admitted); latencies are printed, not
  asserted (performance is measured, not asserted).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

from tests.e2e.hostile_helpers import Hostile, logs_on_failure, pod_body, unique

__all__ = ["MIB", "Memory", "TenantProbe", "logs_on_failure"]

MIB = 1024


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


class Memory:
    """The operator's peak RSS over an attack."""

    def __init__(self, hostile: Hostile) -> None:
        assert hostile.operator is not None and hostile.operator.popen is not None
        self.pid = hostile.operator.popen.pid
        self.before = 0

    def start(self) -> Memory:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        self.before = _status_kib(self.pid, "VmRSS")
        return self

    def growth_kib(self, what: str) -> int:
        peak = _status_kib(self.pid, "VmHWM")
        print(f"\n[memory] {what}: operator RSS before {self.before / MIB:.1f} MiB, peak "
              f"{peak / MIB:.1f} MiB: +{(peak - self.before) / MIB:.1f} MiB")
        return peak - self.before


class TenantProbe:
    """Another tenant's pod creations (server-side dry-run) through kdra's webhooks."""

    def __init__(self, hostile: Hostile, interval: float = 0.5) -> None:
        self.hostile = hostile
        self.interval = interval
        self.results: list[tuple[float, int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tenant-probe", daemon=True)

    def _run(self) -> None:
        namespace = self.hostile.probes
        while not self._stop.is_set():
            body = pod_body(unique("dry"), namespace,
                            [{"name": "gpu", "resourceClaimTemplateName": "gpu"}])
            started = time.monotonic()
            result: subprocess.CompletedProcess[str] = self.hostile.as_user(
                "create", "--dry-run=server", "-o", "json", "-f", "-", namespace=namespace,
                input=json.dumps(body))
            seconds = time.monotonic() - started
            scheduler = ""
            if result.returncode == 0:
                scheduler = json.loads(result.stdout)["spec"].get("schedulerName", "")
            self.results.append((seconds, result.returncode,
                                 scheduler or result.stderr.strip()[-300:]))
            self._stop.wait(self.interval)

    def start(self) -> TenantProbe:
        self._thread.start()
        return self

    def stop(self, what: str) -> None:
        """Stop; assert every create was answered and mutated by kdra's webhook."""
        self._stop.set()
        self._thread.join(timeout=120)
        seconds = [s for s, _, _ in self.results]
        assert self.results, "no pod creation was attempted"
        print(f"\n[webhook latency] {what}: {len(seconds)} pod creations by another tenant, "
              f"median {statistics.median(seconds) * 1000:.0f} ms, "
              f"max {max(seconds) * 1000:.0f} ms (kubectl create --dry-run=server)")
        failed = [(s, detail) for s, rc, detail in self.results if rc != 0]
        assert not failed, f"{len(failed)} creations were not answered: {failed[:3]}"
        # kdra's mutating webhook answered each (it sets the scheduler).
        assert all(detail == "kdra-scheduler" for _, _, detail in self.results)

"""Issue 36, attack 2: a tenant's CEL selector that builds a huge value.

The issue's selector, 1 KiB, ``cel.bind(s, "a" * 1000, cel.bind(t, s.replace("a", s),
t.replace("a", s).size() < 0))``, was admitted (estimated cost 200,226) and built a
10^9-character string at every evaluation: the operator went from 128 to 1,090 MiB, the
webhooks stalled and other tenants' pod creations were refused.

Now, as the attacker (``kubectl --as mallory``, a namespace user):

* the bomb is denied at admission, its estimate naming what it would build;
* stored anyway (the validating webhook away: an outage, or an object from before the rule),
  the pod that uses it is not scheduled, with the compile error as the reason;
* a selector the estimate admits (as upstream's does) but whose evaluation would build
  10^8 characters (``format`` of a list holding one list many times, nested) is stopped at
  run time, "cost limit exceeded", with nothing large built (on main it was admitted too, and
  each evaluation took 15 s of the event loop and +210 MiB);

meanwhile another tenant's pod creations are answered by kdra's webhooks (latency printed), a
fresh pod binds, the operator's peak RSS stays within +100 MiB (printed), and after the
attack the operator restarts and ``kdra check`` is clean (:meth:`Hostile.after_attack`).

And the same run-time bomb on a node with 128 devices (issue 36's remainder): each
evaluation costs the CEL limit, which kdra's Python takes 0.1-0.8 s for, and the allocator
evaluates a selector on every device of a node before its search — on main, 128 of them in
one go on the operator's event loop, where the webhooks are served too. Now the evaluations
are paced like the search's steps (``kdra.dra.allocator.pacing``): one at a time between turns
of the loop, counted against the pod's search budget, which they exhaust
(``AllocationSearchExhausted``, naming the selectors' cost; retried later, going on from the
devices evaluated so far). Meanwhile another tenant's pod creations are all answered
(latency printed: at most about one evaluation more), a fresh pod binds, and the operator's
peak RSS stays within +100 MiB.
"""

from __future__ import annotations

import json
import time
from typing import Any

from kdra.operator.core.webhook_configs import VALIDATE_WEBHOOK
from tests.e2e.hostile_helpers import (
    API,
    CLAIMS,
    GPU_CLASS,
    Hostile,
    hostile,
    pod_body,
    register_node,
    unique,
)
from tests.e2e.hostile_watch import MIB, Memory, TenantProbe, logs_on_failure
from tests.e2e.procs import wait_for

__all__ = ["hostile", "logs_on_failure"]  # the module's fixtures

BOMB = ('cel.bind(s, "' + "a" * 1000 + '", cel.bind(t, s.replace("a", s), '
        't.replace("a", s).size() < 0))')


def _shared(levels: int, leaf: str) -> str:
    """``levels`` nested lists, each holding the previous one ten times, then ``format``
    of the last: a few hundred characters that would print ``leaf`` 10^levels times."""
    text = f"cel.bind(l0, [{', '.join([leaf] * 10)}], "
    for level in range(1, levels):
        text += f"cel.bind(l{level}, [{', '.join([f'l{level - 1}'] * 10)}], "
    return text + f'"%s".format([l{levels - 1}]).size() > 0' + ")" * levels


RUNTIME_BOMB = _shared(6, '"' + "a" * 100 + '"')  # 10^8 characters once formatted


def claim_body(name: str, namespace: str, expression: str,
               device_class: str = GPU_CLASS) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": device_class,
                "selectors": [{"cel": {"expression": expression}}]}}]}}}


def unscheduled_because(hostile: Hostile, pod: str, *words: str) -> str:
    """Wait until the pod is reported unschedulable with ``words`` in the message."""

    def condition() -> str | None:
        obj = hostile.pod(pod)
        for c in obj.get("status", {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and all(
                    w in c.get("message", "") for w in words):
                return str(c["message"])
        return None

    message: str = wait_for(condition, timeout=60, what=f"{pod} unschedulable: {words}")
    assert not hostile.pod(pod)["spec"].get("nodeName")
    return message


def test_attack2_a_selector_that_builds_a_huge_string(hostile: Hostile) -> None:
    ns = hostile.namespace
    memory = Memory(hostile).start()
    probe = TenantProbe(hostile).start()
    try:
        # Denied at admission: the estimate sees what the replaces build.
        stored = unique("bomb")
        hostile.denied(hostile.create_as_user(claim_body(stored, ns, BOMB)),
                       "estimated cost 1004106332 exceeds the limit of 1000000")
        # Stored anyway: the pod that uses it is refused with the reason, nothing is built.
        with hostile.without_webhook(VALIDATE_WEBHOOK):
            created = hostile.create_as_user(claim_body(stored, ns, BOMB))
            assert created.returncode == 0, created.stderr
        first = unique("bomb-pod")
        assert hostile.create_as_user(pod_body(first, ns, [
            {"name": "gpu", "resourceClaimName": stored}])).returncode == 0
        message = unscheduled_because(hostile, first, "does not compile",
                                      "estimated cost 1004106332 exceeds")
        print(f"\n[stored bomb] {message}")

        # Admitted (its estimate is small, as upstream's is), stopped at run time.
        runtime = unique("format-bomb")
        created = hostile.create_as_user(claim_body(runtime, ns, RUNTIME_BOMB))
        assert created.returncode == 0, created.stderr
        second = unique("format-pod")
        assert hostile.create_as_user(pod_body(second, ns, [
            {"name": "gpu", "resourceClaimName": runtime}])).returncode == 0
        message = unscheduled_because(hostile, second, "fails at run time: operation "
                                      "cancelled: actual cost limit exceeded")
        print(f"[run-time bomb] {message}")

        # Others are served meanwhile: a fresh pod binds (its claim allocated, prepared).
        hostile.fresh_pod_binds("the CEL bombs pending")
    finally:
        probe.stop("during the CEL bombs")
    assert memory.growth_kib("the CEL bombs") <= 100 * MIB
    hostile.plane.kubectl("delete", "pod", first, second, "-n", ns, "--grace-period=0",
                          "--force")
    hostile.plane.kubectl("delete", CLAIMS, stored, runtime, "-n", ns)
    hostile.after_attack("the CEL bombs")


BIG_DRIVER = "big.kdra.dev"
"""The 128-device node's driver and class (not the agent's: fresh pods stay on its node)."""
DEVICES = 128


class BigNode:
    """A node with 128 devices, published by the cluster's admin (no agent: its pods are
    never prepared, which this attack never gets to), and a DeviceClass for them."""

    def __init__(self, hostile: Hostile) -> None:
        self.plane = hostile.plane
        self.name = unique("big-node")

    def create(self) -> BigNode:
        register_node(self.plane, self.name)
        self.plane.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": API, "kind": "DeviceClass", "metadata": {"name": BIG_DRIVER},
            "spec": {"selectors": [
                {"cel": {"expression": f'device.driver == "{BIG_DRIVER}"'}}]}}))
        self.plane.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": API, "kind": "ResourceSlice",
            "metadata": {"name": f"{self.name}-{BIG_DRIVER}"},
            "spec": {"driver": BIG_DRIVER, "nodeName": self.name,
                     "pool": {"name": self.name, "generation": 0, "resourceSliceCount": 1},
                     "devices": [{"name": f"dev-{i}", "attributes": {"index": {"int": i}}}
                                 for i in range(DEVICES)]}}))
        return self

    def delete(self) -> None:
        plane = self.plane
        plane.kubectl("delete", "resourceslices.resource.kdra.dev",
                      f"{self.name}-{BIG_DRIVER}", "--ignore-not-found", check=False)
        plane.kubectl("delete", "deviceclasses.resource.kdra.dev", BIG_DRIVER,
                      "--ignore-not-found", check=False)
        plane.kubectl("delete", "node", self.name, "--ignore-not-found", check=False)


def test_attack2_a_costly_selector_on_a_node_with_128_devices(hostile: Hostile) -> None:
    ns = hostile.namespace
    costly, pod = unique("costly"), unique("costly-pod")
    big = BigNode(hostile)
    try:
        big.create()
        _costly_selector_meets_128_devices(hostile, costly, pod)
    finally:  # also on a failure: later tests must not meet the big node or its class
        hostile.plane.kubectl("delete", "pod", pod, "-n", ns, "--grace-period=0", "--force",
                              "--ignore-not-found", check=False)
        hostile.plane.kubectl("delete", CLAIMS, costly, "-n", ns, "--ignore-not-found",
                              check=False)
        big.delete()
    hostile.after_attack(f"a costly selector on {DEVICES} devices")


def _costly_selector_meets_128_devices(hostile: Hostile, costly: str, pod: str) -> None:
    ns = hostile.namespace
    memory = Memory(hostile).start()
    probe = TenantProbe(hostile).start()
    try:
        created = hostile.create_as_user(claim_body(costly, ns, RUNTIME_BOMB, BIG_DRIVER))
        assert created.returncode == 0, created.stderr  # admitted: its estimate is 184
        started = time.monotonic()
        assert hostile.create_as_user(pod_body(pod, ns, [
            {"name": "gpu", "resourceClaimName": costly}])).returncode == 0

        # Another tenant's pod binds while the costly pod's first attempt is under way.
        hostile.fresh_pod_binds("a costly selector being evaluated on 128 devices")
        print(f"\n[fresh pod] bound {time.monotonic() - started:.1f} s after the costly pod "
              "was created")

        message = unscheduled_because(hostile, pod, "exhausted its budget",
                                      "units of CEL at run time",
                                      "gave up evaluating CEL selectors")
        print(f"[costly selector, {DEVICES} devices] {message}")
        # Retried later, from the devices evaluated so far: the probe goes on meanwhile.
        time.sleep(15)
        assert not hostile.pod(pod)["spec"].get("nodeName")
    finally:
        probe.stop(f"a costly selector on {DEVICES} devices")
    assert memory.growth_kib(f"a costly selector on {DEVICES} devices") <= 100 * MIB

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
"""

from __future__ import annotations

from typing import Any

from kdra.operator.core.webhook_configs import VALIDATE_WEBHOOK
from tests.e2e.hostile_helpers import API, CLAIMS, GPU_CLASS, Hostile, hostile, pod_body, unique
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


def claim_body(name: str, namespace: str, expression: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": GPU_CLASS,
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

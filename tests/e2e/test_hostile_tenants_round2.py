"""Issue 36, the tenants' side (points 3, 5, 6 and part of 7): kdra attacked by namespace
users (``kubectl --as``, the built-in ``edit`` role's rights plus kdra's claims) and by a
compromised node agent, against the local control plane with the manifests' RBAC, VAPs and
webhooks, the operator and an agent running as their ServiceAccounts
(tests/e2e/hostile_helpers.py).

After each attack: denied or harmless; the operator and the agent still serve another
tenant's pod (it binds); a restart of the operator succeeds; ``kdra check`` is clean, or
names the mark the attack left (:meth:`Hostile.after_attack`). The figures behind
docs/reliability.md's "Hostile input, round two" rows are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kdra.handlers.operator import PAUSE_ENV
from tests.e2e.hostile_helpers import (
    CLAIMS,
    Hostile,
    hostile,
    pod_body,
    template_body,
    unique,
)
from tests.e2e.procs import wait_for

__all__ = ["hostile"]  # the module fixture


@pytest.fixture(autouse=True)
def _logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    rep = getattr(request.node, "rep_call", None)
    harness = request.node.funcargs.get("hostile") if hasattr(request.node, "funcargs") else None
    if rep is not None and rep.failed and isinstance(harness, Hostile):
        for proc in (harness.operator, harness.agent):
            if proc is not None:
                print(f"===== {proc.args[0]} log =====\n{proc.tail(150)}")


def delete_pods(hostile: Hostile, *names: str, namespace: str | None = None) -> None:
    if names:
        hostile.plane.kubectl("delete", "pod", *names, "-n", namespace or hostile.namespace,
                              "--grace-period=0", "--force", "--ignore-not-found")


def claims_owned_by(hostile: Hostile, uid: str) -> list[dict[str, Any]]:
    items = json.loads(hostile.plane.kubectl("get", CLAIMS, "-n", hostile.namespace,
                                             "-o", "json").stdout)["items"]
    return [c for c in items if any(ref.get("uid") == uid for ref in
                                    c["metadata"].get("ownerReferences") or ())]


def created_total(hostile: Hostile) -> float:
    """kdra_resourceclaim_controller_creates_total, every status, from the operator."""
    assert hostile.operator is not None
    return sum(float(line.rsplit(" ", 1)[1]) for line in hostile.operator.metrics().splitlines()
               if line.startswith("kdra_resourceclaim_controller_creates_total{"))


# --------------------------------------------------------------------------- point 3


def test_hostile_no_claim_storm_for_a_pod_deleted_while_the_operator_was_busy(
        hostile: Hostile) -> None:
    """Issue: a pending pod, the operator restarted and busy (a selector that blocks it, an
    OOM kill), the pod deleted meanwhile — the claim controller then created ~13 claims/s
    for the deleted pod (724 in 80 s) until the next restart. The cause: the caches are
    primed from a LIST at start-up, but the watches' first LIST (seconds later when the
    start-up is slow) was not compared with them, so the deleted pod stayed cached for ever;
    each claim created for it was deleted by the garbage collector (its owner is gone), and
    that deletion made the controller create the next one. Here the busy start-up is the
    operator's test pause between start-up and watches; the pod waits for a template that
    appears during the pause (what makes the controller act on the pod first)."""
    assert hostile.operator is not None
    template = unique("late")
    name = unique("storm")
    created = hostile.create_as_user(pod_body(name, hostile.namespace, [
        {"name": "gpu", "resourceClaimTemplateName": template}]))
    assert created.returncode == 0, created.stderr
    uid = json.loads(created.stdout)["metadata"]["uid"]
    wait_for(lambda: "FailedResourceClaimCreation" in hostile.plane.kubectl(
        "get", "events", "-n", hostile.namespace, "--field-selector",
        f"involvedObject.name={name}").stdout, what="the missing-template event")

    hostile.operator.stop()
    hostile.operator.env = {**hostile.operator.env, PAUSE_ENV: "6"}
    try:
        hostile.operator.start(timeout=120)
        wait_for(lambda: PAUSE_ENV in hostile.operator.log.read_text(errors="replace"),
                 what="the operator pausing before its watches")
        delete_pods(hostile, name)  # while the operator is busy
        made = hostile.create_as_user(template_body(template, hostile.namespace))
        assert made.returncode == 0, made.stderr
        before = created_total(hostile)
        time.sleep(6 + 15)  # the pause, then 15 s of what it does
        claims = claims_owned_by(hostile, uid)  # those the garbage collector has yet to delete
        storm = created_total(hostile) - before
    finally:
        hostile.operator.env = {k: v for k, v in hostile.operator.env.items() if k != PAUSE_ENV}
    print(f"\n[storm] claims created for the deleted pod in 15 s: {storm:.0f} "
          f"({len(claims)} still listed)")
    assert storm == 0 and not claims, f"{storm} claims created for a deleted pod"
    hostile.after_attack("a claim-creation storm")

"""Priority preemption end to end (issue 27): real API server (its Priority admission plugin
fills ``spec.priority`` from PriorityClasses), kdra's operator and a node agent as real
processes, plain pods.

One node with 4 fake GPUs, each held by a pod: two of priority 10, two of priority 500. A
priority-1000 pod with ``preemptionPolicy: Never`` asking for 2 GPUs preempts nobody and
waits; a priority-1000 pod asking for 2 GPUs evicts exactly the two priority-10 pods (Eviction
API), is nominated to the node, gets their GPUs (held for it: the waiting Never pod of equal
priority does not take them) and binds there; events on both sides.

Two nodes: the preemptor takes the node whose victims are least important, and evicts pods of
that node only.

:class:`~tests.e2e.test_health.FakeKubelet` plays the kubelet: it reports bound pods Running
and finishes the graceful deletion of evicted pods.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import AgentFactory, unique
from tests.e2e.conftest import get_json
from tests.e2e.procs import KdraProcess, wait_for
from tests.e2e.test_health import FakeKubelet, apply, devices_of, gpu_class, metric, template

agents = agent_helpers.agents


def priority_class(name: str, value: int, *, never: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                            "metadata": {"name": name}, "value": value}
    if never:
        body["preemptionPolicy"] = "Never"
    return body


def gpu_pod(name: str, namespace: str, template_name: str, priority_class_name: str
            ) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {
                CLAIMS_ANNOTATION: yaml.safe_dump(
                    [{"name": "gpu", "resourceClaimTemplateName": template_name}])}},
            "spec": {"schedulerName": "kdra-scheduler", "terminationGracePeriodSeconds": 30,
                     "priorityClassName": priority_class_name,
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}


def live_pods(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in get_json(plane, "pods", "-n", namespace)["items"]
            if not p["metadata"].get("deletionTimestamp")}


def events(plane: ControlPlane, namespace: str, reason: str) -> list[tuple[str, str]]:
    return [(e["involvedObject"]["name"], e["message"])
            for e in get_json(plane, "events", "-n", namespace)["items"]
            if e["reason"] == reason]


@pytest.fixture
def classes(control_plane: ControlPlane) -> Iterator[dict[str, str]]:
    names = {"low": unique("low"), "mid": unique("mid"), "high": unique("high"),
             "never": unique("never")}
    apply(control_plane, priority_class(names["low"], 10), priority_class(names["mid"], 500),
          priority_class(names["high"], 1000),
          priority_class(names["never"], 1000, never=True))
    yield names
    control_plane.kubectl("delete", "priorityclass", *names.values(), "--ignore-not-found",
                          "--wait=false", check=False)


def test_priority_pod_preempts_exactly_the_lowest_pods_it_needs(
        control_plane: ControlPlane, agents: AgentFactory, operator: KdraProcess,
        namespace: str, classes: dict[str, str]) -> None:
    node = unique("preempt")
    agents(node, "gpus: ['4 x L4-24GB']\n")
    apply(control_plane, gpu_class(), template("one-gpu", namespace),
          template("two-gpus", namespace, count=2))
    # No kubelet yet: evicted pods stay terminating until FakeKubelet finishes their
    # deletion, so the nomination can be seen before the preemptor binds.
    apply(control_plane, *(gpu_pod(name, namespace, "one-gpu", classes[level])
                           for name, level in (("low-1", "low"), ("low-2", "low"),
                                               ("mid-1", "mid"), ("mid-2", "mid"))))
    wait_for(lambda: len([n for n, p in live_pods(control_plane, namespace).items()
                          if p["spec"].get("nodeName") == node]) == 4 and
             len(devices_of(control_plane, namespace)) == 4,
             timeout=120, what="the four lower-priority pods bound, one GPU each")
    priorities = {n: p["spec"].get("priority")
                  for n, p in live_pods(control_plane, namespace).items()}
    assert priorities == {"low-1": 10, "low-2": 10, "mid-1": 500, "mid-2": 500}

    # preemptionPolicy: Never — waits, evicts nobody.
    apply(control_plane, gpu_pod("patient", namespace, "two-gpus", classes["never"]))
    wait_for(lambda: any(obj == "patient" for obj, _ in
                         events(control_plane, namespace, "FailedScheduling")),
             timeout=60, what="the Never pod reported unschedulable")
    time.sleep(3)  # a preemption, if any, would follow its first failed attempt at once
    assert events(control_plane, namespace, "Preempting") == []
    assert events(control_plane, namespace, "Preempted") == []
    assert set(live_pods(control_plane, namespace)) == {
        "low-1", "low-2", "mid-1", "mid-2", "patient"}

    # The urgent pod preempts exactly the two priority-10 pods and is nominated to the node.
    apply(control_plane, gpu_pod("urgent", namespace, "two-gpus", classes["high"]))
    # The nomination and the PodScheduled condition are two writes of the binder: wait for
    # both (under load the test may read the pod between them).
    nominated = wait_for(
        lambda: (p := get_json(control_plane, "pod", "urgent", "-n", namespace)) and
        (p.get("status") or {}).get("nominatedNodeName") and
        any(c.get("type") == "PodScheduled" for c in p["status"].get("conditions") or ())
        and p, timeout=60, what="the urgent pod nominated and told so")
    assert nominated["status"]["nominatedNodeName"] == node
    assert set(live_pods(control_plane, namespace)) == {"mid-1", "mid-2", "patient", "urgent"}
    condition = next(c for c in nominated["status"]["conditions"]
                     if c["type"] == "PodScheduled")
    assert condition["status"] == "False"
    # What the binder said at its first attempt, or at the next ones (which wait).
    assert (f"preempting 2 lower-priority pod(s) on node '{node}'" in condition["message"] or
            f"waiting for 2 preempted pod(s) on node '{node}'" in condition["message"]), \
        condition

    # The evicted pods finish terminating; the urgent pod gets their GPUs and binds there.
    with FakeKubelet(control_plane, namespace):
        urgent = wait_for(lambda: (p := live_pods(control_plane, namespace).get("urgent"))
                          and p["spec"].get("nodeName") and p,
                          timeout=120, what="the urgent pod bound")
        assert urgent["spec"]["nodeName"] == node
        assert urgent["spec"]["priority"] == 1000
        remaining = live_pods(control_plane, namespace)
        assert set(remaining) == {"mid-1", "mid-2", "patient", "urgent"}
        assert not remaining["patient"]["spec"].get("nodeName")  # the held GPUs were not its
        held = devices_of(control_plane, namespace)
        assert held["urgent"][1] == node

        preempting = events(control_plane, namespace, "Preempting")
        assert len(preempting) == 1 and preempting[0][0] == "urgent", preempting
        assert preempting[0][1].startswith(f"Preempting 2 pod(s) on node {node}: ")
        assert f"{namespace}/low-1 (priority 10)" in preempting[0][1]
        assert f"{namespace}/low-2 (priority 10)" in preempting[0][1]
        preempted = sorted(events(control_plane, namespace, "Preempted"))
        assert preempted == [(victim, f"Preempted by {namespace}/urgent on node {node}")
                             for victim in ("low-1", "low-2")]
        assert any(obj == "urgent" and m.startswith("Successfully assigned")
                   for obj, m in events(control_plane, namespace, "Scheduled"))

    assert metric(operator, "kdra_preemption_victims_total") == 2
    assert metric(operator, 'kdra_preemption_attempts_total{result="preempted"}') == 1
    assert metric(operator, 'kdra_preemption_attempts_total{result="never"}') >= 1
    assert operator.alive


def test_preemption_takes_one_node_the_one_with_the_least_important_victims(
        control_plane: ControlPlane, agents: AgentFactory, operator: KdraProcess,
        namespace: str, classes: dict[str, str]) -> None:
    """Two nodes of 2 GPUs: on the first a priority-10 and a priority-500 pod, on the second
    two priority-10 pods. The urgent pod (2 GPUs) could fit on either only by evicting both
    pods of a node: it takes the second (lower highest-priority victim), and the priority-10
    pod of the first node is untouched — victims on one node only."""
    first, second = unique("pa"), unique("pb")
    agents(first, "gpus: ['2 x L4-24GB']\n")
    apply(control_plane, gpu_class(), template("one-gpu", namespace),
          template("two-gpus", namespace, count=2))
    with FakeKubelet(control_plane, namespace):
        # Fill the first node, then bring up the second (the binder packs nodes).
        apply(control_plane, gpu_pod("a-low", namespace, "one-gpu", classes["low"]),
              gpu_pod("a-mid", namespace, "one-gpu", classes["mid"]))
        wait_for(lambda: len(devices_of(control_plane, namespace)) == 2, timeout=120,
                 what="the first node's two pods bound")
        agents(second, "gpus: ['2 x L4-24GB']\n")
        apply(control_plane, gpu_pod("b-low-1", namespace, "one-gpu", classes["low"]),
              gpu_pod("b-low-2", namespace, "one-gpu", classes["low"]))
        wait_for(lambda: len(devices_of(control_plane, namespace)) == 4, timeout=120,
                 what="the second node's two pods bound")
        placed = {n: p["spec"].get("nodeName")
                  for n, p in live_pods(control_plane, namespace).items()}
        assert placed == {"a-low": first, "a-mid": first, "b-low-1": second,
                          "b-low-2": second}

        apply(control_plane, gpu_pod("urgent", namespace, "two-gpus", classes["high"]))
        urgent = wait_for(lambda: (p := live_pods(control_plane, namespace).get("urgent"))
                          and p["spec"].get("nodeName") and p,
                          timeout=120, what="the urgent pod bound")
        assert urgent["spec"]["nodeName"] == second
        assert set(live_pods(control_plane, namespace)) == {"a-low", "a-mid", "urgent"}
        preempted = sorted(events(control_plane, namespace, "Preempted"))
        assert preempted == [(victim, f"Preempted by {namespace}/urgent on node {second}")
                             for victim in ("b-low-1", "b-low-2")]
        preempting = events(control_plane, namespace, "Preempting")
        assert [m.split(":")[0] for _, m in preempting] == [
            f"Preempting 2 pod(s) on node {second}"]
    assert metric(operator, "kdra_preemption_victims_total") == 2

"""Gangs end to end (issue 40): a real API server, kdra's operator and one node agent serving
several simulated nodes of fake GPUs, as real processes; pods labelled
``scheduling.x-k8s.io/pod-group`` with ``resource.kdra.dev/gang-min-member``.

- Two 4-pod gangs of 2 GPUs each on 12 free GPUs: one binds whole, the other stays pending
  whole (no pod bound, no claim allocated) and binds whole once the first is deleted.
- The deadlock scenario: two gangs created interleaved, each able to take half of the
  cluster: one gang runs whole, the other holds nothing.
- A gang with a cross-pod ``matchAttribute`` (the GPUs' productName) lands in one domain,
  where pod-by-pod placement would mix them.
- Gang preemption: a gang that could not fit even with every lower-priority pod gone evicts
  nobody; a high-priority gang evicts exactly the lower-priority pods it needs, across
  nodes, and binds whole on their GPUs.
- A gang sized by a scheduler-plugins ``PodGroup`` object (manifests/optional/podgroups-crd.yaml,
  installed before the operator starts): its pods carry only the label, wait for each other
  as the PodGroup says, and place whole.
"""

from __future__ import annotations

import re
from typing import Any

from kdra.operator.core.gangs import (
    MATCH_ATTRIBUTE_ANNOTATION,
    MIN_MEMBER_ANNOTATION,
    POD_GROUP_LABEL,
)
from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers, test_preemption
from tests.e2e.agent_helpers import CLAIMS, AgentFactory, unique
from tests.e2e.conftest import get_json
from tests.e2e.procs import KdraProcess, wait_for
from tests.e2e.test_health import (
    FakeKubelet,
    apply,
    claims_annotation,
    gpu_class,
    metric,
    pod_spec,
    template,
)
from tests.e2e.test_preemption import events, gpu_pod, live_pods

agents = agent_helpers.agents
classes = test_preemption.classes
def gang_pod(name: str, namespace: str, gang: str, size: int, template_name: str,
             **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {POD_GROUP_LABEL: gang},
                         "annotations": {**claims_annotation(template_name),
                                         MIN_MEMBER_ANNOTATION: str(size), **annotations}},
            "spec": pod_spec()}


def pods(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in get_json(plane, "pods", "-n", namespace)["items"]
            if not p["metadata"].get("deletionTimestamp")}


def bound_by_gang(plane: ControlPlane, namespace: str) -> dict[str, set[str]]:
    """Gang → its bound pods."""
    found: dict[str, set[str]] = {}
    for name, pod in pods(plane, namespace).items():
        gang = (pod["metadata"].get("labels") or {}).get(POD_GROUP_LABEL)
        if gang is not None and pod["spec"].get("nodeName"):
            found.setdefault(gang, set()).add(name)
    return found


def allocated(plane: ControlPlane, namespace: str) -> dict[str, list[tuple[str, str]]]:
    """Claim name → its allocated (pool, device)s."""
    found = {}
    for claim in get_json(plane, CLAIMS, "-n", namespace)["items"]:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices")
                   or {}).get("results") or []
        if results:
            found[claim["metadata"]["name"]] = [(r["pool"], r["device"]) for r in results]
    return found


def start_nodes(agents: AgentFactory, prefix: str, count: int, inventory: str) -> list[str]:
    nodes = [f"{prefix}-{i}" for i in range(count)]
    agents(nodes[0], inventory, "--simulate-nodes", ",".join(nodes))
    return nodes


def two_gangs(plane: ControlPlane, agents: AgentFactory, namespace: str, nodes: int,
              gangs: tuple[str, str]) -> tuple[str, str]:
    """``nodes`` nodes of 4 GPUs; two gangs of 4 pods x 2 GPUs created interleaved. Waits for
    one gang bound whole, checks the other has no pod bound; (the bound gang, the other)."""
    start_nodes(agents, unique("gang"), nodes, "gpus: ['4 x L4-24GB']\n")
    apply(plane, gpu_class(), template("two-gpus", namespace, count=2))
    apply(plane, *(gang_pod(f"{gang}-{i}", namespace, gang, 4, "two-gpus")
                   for i in range(4) for gang in gangs))
    whole = wait_for(lambda: (b := bound_by_gang(plane, namespace)) and
                     any(len(members) == 4 for members in b.values()) and b,
                     timeout=120, what="one gang bound whole")
    assert len(whole) == 1, whole  # the other gang: no pod bound
    (first,) = whole
    return first, gangs[1] if first == gangs[0] else gangs[0]


def test_two_gangs_on_twelve_gpus_one_whole_then_the_other(
        control_plane: ControlPlane, agents: AgentFactory, operator: KdraProcess,
        namespace: str) -> None:
    # Interleaved: pod-by-pod placement would give each gang 3 pods (6 x 2 = 12 GPUs) and
    # neither could start.
    first, second = two_gangs(control_plane, agents, namespace, 3, ("a", "b"))
    held = allocated(control_plane, namespace)
    assert len(held) == 4 and sum(len(d) for d in held.values()) == 8, held
    assert all(name.startswith(f"{first}-") for name in held), held  # the other holds nothing
    waiting = pods(control_plane, namespace)[f"{second}-0"]
    condition = next(c for c in waiting["status"].get("conditions") or ()
                     if c["type"] == "PodScheduled")
    assert f"gang {second!r}" in condition["message"], condition
    assert "at most 2 of them fit at once" in condition["message"], condition

    control_plane.kubectl("delete", "pods", "-n", namespace, "-l",
                          f"{POD_GROUP_LABEL}={first}", "--grace-period=0", "--force")
    wait_for(lambda: bound_by_gang(control_plane, namespace).get(second, set()) ==
             {f"{second}-{i}" for i in range(4)},
             timeout=120, what="the second gang bound whole once the first is gone")
    assert "kdra_gang_placement_attempts_total{result=\"placed\"} 2.0" in \
        operator.metrics()


def test_deadlock_scenario_ends_with_one_gang_running(
        control_plane: ControlPlane, agents: AgentFactory, operator: KdraProcess,
        namespace: str) -> None:
    # 8 GPUs; each gang of 4 x 2 GPUs could take half of them pod by pod.
    running, _ = two_gangs(control_plane, agents, namespace, 2, ("x", "y"))
    held = allocated(control_plane, namespace)
    assert sorted(held) == sorted(
        c["metadata"]["name"] for c in get_json(control_plane, CLAIMS, "-n", namespace)["items"]
        if c["metadata"]["name"].startswith(f"{running}-")), held


def test_match_attribute_keeps_the_gang_in_one_domain(
        control_plane: ControlPlane, agents: AgentFactory, operator: KdraProcess,
        namespace: str) -> None:
    # Each node: 2 L4 and 2 H100. A gang of 2 pods x 2 GPUs in one productName takes the
    # two H100s or the two L4s of each node it uses — never a mix.
    nodes = start_nodes(agents, unique("match"), 2,
                        "gpus: ['2 x L4-24GB', '2 x H100-80GB']\n")
    apply(control_plane, gpu_class(), template("two-gpus", namespace, count=2))
    product = "gpu.kdra.dev/productName"
    apply(control_plane, *(gang_pod(f"m-{i}", namespace, "m", 2, "two-gpus",
                                    **{MATCH_ATTRIBUTE_ANNOTATION: product})
                           for i in range(2)))
    wait_for(lambda: bound_by_gang(control_plane, namespace).get("m") == {"m-0", "m-1"},
             timeout=120, what="the gang bound")
    names = {}
    for slice_ in get_json(control_plane, agent_helpers.SLICES)["items"]:
        if slice_["spec"].get("nodeName") in nodes:
            for device in slice_["spec"]["devices"]:
                names[(slice_["spec"]["pool"]["name"], device["name"])] = \
                    device["attributes"]["productName"]["string"]
    held = [d for devices in allocated(control_plane, namespace).values() for d in devices]
    assert len(held) == 4
    assert len({names[d] for d in held}) == 1, [(d, names[d]) for d in held]

    # Three pods x 2 in one product: 4 of each product in the cluster — does not fit, and
    # says so; nothing of it is held.
    apply(control_plane, *(gang_pod(f"n-{i}", namespace, "n", 3, "two-gpus",
                                    **{MATCH_ATTRIBUTE_ANNOTATION: product})
                           for i in range(3)))
    # (Until the binder has seen all three members pending, the condition says the gang
    # waits for its pods; then it says why the whole gang does not fit.)
    message = wait_for(
        lambda: next((c["message"] for c in (pods(control_plane, namespace)["n-0"]["status"]
                                             .get("conditions") or ())
                      if c["type"] == "PodScheduled" and "gang 'n'" in c["message"]
                      and f"devices in one {product}" in c["message"]), None),
        timeout=90, what="the too-big gang reported as not fitting")
    # the nearest fit names the domain as the slices write it (not a typed tuple)
    assert re.search(rf"at most 2 of them fit at once \(in {re.escape(product)}=NVIDIA [^()']+\)",
                     message), message
    assert not any(name.startswith("n-") for name in allocated(control_plane, namespace))
    assert "n" not in bound_by_gang(control_plane, namespace)


def test_a_high_priority_gang_preempts_exactly_the_victims_it_needs(
        control_plane: ControlPlane, agents: AgentFactory, operator: KdraProcess,
        namespace: str, classes: dict[str, str]) -> None:
    """Three nodes of 2 GPUs: on one, two priority-10 pods of a GPU each; on another, a
    priority-10 pod of 2 GPUs; on the third a priority-500 pod of 2 GPUs. A priority-500 gang
    of 3 pods x 2 GPUs could evict the priority-10 pods only — two nodes, one short: it
    evicts nobody. A priority-1000 gang of 2 pods x 2 GPUs evicts exactly the three
    priority-10 pods (two nodes, across nodes; the priority-500 pod is spared) and binds
    whole on their GPUs."""
    nodes = start_nodes(agents, unique("gpre"), 3, "gpus: ['2 x L4-24GB']\n")
    apply(control_plane, gpu_class(), template("one-gpu", namespace),
          template("two-gpus", namespace, count=2))

    def gang_member(name: str, gang: str, size: int, level: str) -> dict[str, Any]:
        body = gang_pod(name, namespace, gang, size, "two-gpus")
        body["spec"]["priorityClassName"] = classes[level]
        return body

    with FakeKubelet(control_plane, namespace):
        # The 1-GPU pods first: the binder packs them onto one node.
        apply(control_plane, gpu_pod("low-1", namespace, "one-gpu", classes["low"]),
              gpu_pod("low-2", namespace, "one-gpu", classes["low"]))
        wait_for(lambda: sum(1 for p in live_pods(control_plane, namespace).values()
                             if p["spec"].get("nodeName")) == 2,
                 timeout=120, what="the two 1-GPU pods bound")
        apply(control_plane, gpu_pod("low-3", namespace, "two-gpus", classes["low"]),
              gpu_pod("mid-1", namespace, "two-gpus", classes["mid"]))
        placed = wait_for(lambda: (p := {n: q["spec"].get("nodeName") for n, q in
                                         live_pods(control_plane, namespace).items()})
                          and all(p.values()) and len(p) == 4 and p,
                          timeout=120, what="the cluster full")
        assert placed["low-1"] == placed["low-2"], placed
        assert len({placed["low-1"], placed["low-3"], placed["mid-1"]}) == 3, placed
        assert set(placed.values()) == set(nodes)

        # Priority 500, 3 x 2 GPUs: even with every priority-10 pod gone, one node short.
        apply(control_plane, *(gang_member(f"m-{i}", "m", 3, "mid") for i in range(3)))
        wait_for(lambda: any(
            c["type"] == "PodScheduled" and "gang 'm' needs" in c["message"]
            for c in (live_pods(control_plane, namespace)["m-0"]["status"].get("conditions")
                      or ())), timeout=90, what="the priority-500 gang reported not fitting")
        assert events(control_plane, namespace, "Preempting") == []
        assert events(control_plane, namespace, "Preempted") == []
        assert metric(operator, 'kdra_preemption_attempts_total{result="gang-no-candidates"}') \
            >= 1

        # Priority 1000, 2 x 2 GPUs: exactly the three priority-10 pods go.
        apply(control_plane, *(gang_member(f"h-{i}", "h", 2, "high") for i in range(2)))
        wait_for(lambda: bound_by_gang(control_plane, namespace).get("h") == {"h-0", "h-1"},
                 timeout=150, what="the priority-1000 gang bound whole")
        remaining = live_pods(control_plane, namespace)
        assert set(remaining) == {"mid-1", "h-0", "h-1", "m-0", "m-1", "m-2"}, set(remaining)
        assert remaining["mid-1"]["spec"]["nodeName"] == placed["mid-1"]
        assert {remaining[f"h-{i}"]["spec"]["nodeName"] for i in range(2)} == {
            placed["low-1"], placed["low-3"]}
        assert not any(remaining[f"m-{i}"]["spec"].get("nodeName") for i in range(3))
        preempted = sorted(events(control_plane, namespace, "Preempted"))
        assert preempted == [(victim, f"Preempted by gang {namespace}/h on node "
                                      f"{placed[victim]}")
                             for victim in ("low-1", "low-2", "low-3")], preempted
        preempting = events(control_plane, namespace, "Preempting")
        assert len(preempting) == 1 and preempting[0][0] == "h-0", preempting
        assert preempting[0][1].startswith("Preempting 3 pod(s) on nodes ")
        assert f"for gang {namespace}/h" in preempting[0][1]
    assert metric(operator, 'kdra_preemption_attempts_total{result="gang-preempted"}') == 1
    assert metric(operator, "kdra_preemption_victims_total") >= 3
    assert operator.alive


def test_a_gang_declared_by_a_pod_group_places_whole(
        control_plane: ControlPlane, pod_group_crd: None, agents: AgentFactory,
        operator: KdraProcess, namespace: str) -> None:
    start_nodes(agents, unique("pg"), 2, "gpus: ['2 x L4-24GB']\n")
    apply(control_plane, gpu_class(), template("two-gpus", namespace, count=2))
    apply(control_plane, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                          "metadata": {"name": "pg", "namespace": namespace},
                          "spec": {"minMember": 2, "scheduleTimeoutSeconds": 30}})

    def member(name: str) -> dict[str, Any]:
        body = gang_pod(name, namespace, "pg", 2, "two-gpus")
        del body["metadata"]["annotations"][MIN_MEMBER_ANNOTATION]  # the PodGroup sizes it
        return body

    apply(control_plane, member("pg-0"))
    message = wait_for(
        lambda: next((c["message"] for c in (pods(control_plane, namespace)["pg-0"]["status"]
                                             .get("conditions") or ())
                      if c["type"] == "PodScheduled" and "gang 'pg'" in c["message"]), None),
        timeout=90, what="the first member waiting for its gang")
    assert "waits for its pods: 1 of 2 (minMember) pending" in message, message
    assert not allocated(control_plane, namespace)
    apply(control_plane, member("pg-1"))
    wait_for(lambda: bound_by_gang(control_plane, namespace).get("pg") == {"pg-0", "pg-1"},
             timeout=120, what="the PodGroup's gang bound whole")
    held = allocated(control_plane, namespace)
    assert len(held) == 2 and sum(len(d) for d in held.values()) == 4, held
    assert "kdra_gang_placement_attempts_total{result=\"placed\"} 1.0" in operator.metrics()

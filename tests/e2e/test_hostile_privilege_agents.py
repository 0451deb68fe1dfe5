"""Least privilege, tried as an attacker would (issue 22: attacks 3 and 5), for the accounts
other than the operator's: node agents, the simulation agent and namespace users, against a
real API server with the manifests' RBAC, ValidatingAdmissionPolicies and webhooks
(tests/e2e/hostile_privilege_helpers.py). The operator's token and the bounded search:
test_hostile_privilege_operator.py.

After each attack (:meth:`Cluster.after_attack`): another pod still gets a device and is
bound, the operator restarts, and ``kdra check`` finds no violation in this test's namespace
or nodes.
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.hostile_privilege_helpers import (
    AGENT,
    CLAIMS,
    GPU,
    SIMULATION,
    SYSTEM,
    USER,
    Cluster,
    cluster,
    installed,
)
from tests.e2e.procs import wait_for

__all__ = ["cluster", "installed"]  # the module fixtures


# --------------------------------------------------------------------------- attack 3


def test_attack_3_an_agent_cannot_rewrite_another_nodes_claim(cluster: Cluster) -> None:
    victim = cluster.one_gpu_pod("victim")
    node = cluster.wait_bound(victim)["spec"]["nodeName"]
    other = next(n for n in cluster.nodes if n != node)
    claim = cluster.claim_of(victim)
    ns = ("-n", cluster.namespace)
    stranger = cluster.who(AGENT, other)

    def status_write(change: dict[str, Any]) -> str:
        """The claim as it is now (a stale resourceVersion would be a Conflict before any
        admission policy is asked), with ``change`` (None: remove the field)."""
        body = cluster.claim_of(victim)
        body["status"].update(change)
        for key in [k for k, v in change.items() if v is None]:
            body["status"].pop(key)
        return json.dumps(body)

    # Clear the allocation of a claim whose pod is bound (before: a new pod then got the
    # same GPU), drop the reservation, or mark another pool's device.
    cleared = {"allocation": None, "allocatedDevices": None, "reservedFor": None,
               "devices": None}
    stranger.denied("replace", "--subresource=status", "-f", "-", *ns,
                    input=status_write(cleared),
                    says="kdra agents may not change status.allocation")
    stranger.denied("replace", "--subresource=status", "-f", "-", *ns,
                    input=status_write({"reservedFor": None}),
                    says="kdra agents may not change status.reservedFor")
    result = claim["status"]["allocation"]["devices"]["results"][0]
    forged = [{"driver": GPU, "pool": node, "device": result["device"],
               "conditions": [{"type": "Ready", "status": "False", "reason": "Forged",
                               "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
    stranger.denied("replace", "--subresource=status", "-f", "-", *ns,
                    input=status_write({"devices": forged}),
                    says=f"kdra agent on node '{other}' may only change status.devices "
                         f"entries of pool '{other}'")
    # The simulation agent (many nodes) may not touch allocation or reservations either; an
    # agent token bound to no node may write no claim status at all.
    cluster.who(SIMULATION).denied(
        "replace", "--subresource=status", "-f", "-", *ns,
        input=status_write(cleared), says="kdra agents may not change status.allocation")
    cluster.who(AGENT).denied("replace", "--subresource=status", "-f", "-", *ns,
                              input=status_write({}),
                              says="only with a token bound to a pod on a node")
    # The node's own agent may rewrite its own entries (here: unchanged; the status write
    # it does when it prepares).
    cluster.who(AGENT, node).allowed("replace", "--subresource=status", "-f", "-", *ns,
                                     input=status_write({}))
    # The claim is as it was: still allocated to the victim, whose device nobody else gets.
    after = cluster.claim_of(victim)
    assert after["status"]["allocation"] == claim["status"]["allocation"]
    assert [r["uid"] for r in after["status"]["reservedFor"]] == [
        r["uid"] for r in claim["status"]["reservedFor"]]
    cluster.after_attack()
    assert cluster.claim_of(victim)["status"]["allocation"] == claim["status"]["allocation"]
    cluster.delete_pod(victim)


# --------------------------------------------------------------------------- attack 5


def lease(name: str, annotations: dict[str, str], duration: int = 40,
          labels: dict[str, str] | None = None) -> str:
    return json.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": name, "namespace": SYSTEM, "annotations": annotations,
                                    "labels": labels or {}},
                       "spec": {"holderIdentity": "attacker", "leaseDurationSeconds": duration}})


def test_attack_5_an_agent_cannot_vouch_for_other_nodes_or_hold_the_operators_lease(
        cluster: Cluster) -> None:
    node = cluster.nodes[0]
    agent = cluster.who(AGENT, node)
    mine = {"resource.kdra.dev/node": node, "resource.kdra.dev/driver": GPU}
    name = f"kdra-agent-{node}-gpu-kdra-dev-extra"
    # Vouching for a ghost node besides its own (before: ghost-node's slice outlived its
    # Lease).
    agent.denied("create", "-f", "-",
                 input=lease(name, {**mine, "resource.kdra.dev/nodes": f"ghost-node,{node}"}),
                 says="may not write the annotation resource.kdra.dev/nodes")
    # The operator's leader Lease, with an absurd duration (before: a standby operator then
    # waited for ever).
    agent.denied("create", "-f", "-", input=lease("kdra-operator", mine, 2_000_000_000),
                 says=f"may only write Leases named kdra-agent-{node}-<driver>")
    agent.denied("create", "-f", "-", input=lease(name, mine, 2_000_000_000),
                 says="may last at most 3600 seconds")
    # Nor take over the operator's Lease if it exists.
    cluster.plane.kubectl("apply", "-f", "-", input=lease("kdra-operator", {}, 15))
    try:
        agent.denied("patch", "lease", "kdra-operator", "-n", SYSTEM, "--type=merge", "-p",
                     json.dumps({"metadata": {"annotations": mine},
                                 "spec": {"leaseDurationSeconds": 2_000_000_000}}),
                     says="may only write Leases annotated")
        cluster.who(SIMULATION).denied(
            "patch", "lease", "kdra-operator", "-n", SYSTEM, "--type=merge", "-p",
            json.dumps({"spec": {"leaseDurationSeconds": 2_000_000_000}}),
            says="may only write heartbeat Leases")
    finally:
        cluster.plane.kubectl("delete", "lease", "kdra-operator", "-n", SYSTEM,
                              "--ignore-not-found", check=False)
    # Its own heartbeat is fine; a simulation agent's shared Lease (many nodes) is its own
    # account's business.
    agent.allowed("create", "-f", "-", input=lease(name, mine))
    shared = f"kdra-agent-nodes-probe{cluster.nodes[0][-5:]}-gpu-kdra-dev"
    try:
        cluster.who(SIMULATION).allowed(
            "create", "-f", "-",
            input=lease(shared, {"resource.kdra.dev/nodes": ",".join(cluster.nodes),
                                 "resource.kdra.dev/driver": GPU}, 40,
                        {"resource.kdra.dev/agent-lease": "true"}))
    finally:
        for leftover in (name, shared):
            cluster.plane.kubectl("delete", "lease", leftover, "-n", SYSTEM,
                                  "--ignore-not-found", check=False)
    cluster.after_attack()


def test_an_agent_still_writes_only_its_own_nodes_slices(cluster: Cluster) -> None:
    """Held before issue 22, kept: an agent cannot publish devices for another node."""
    node, other = cluster.nodes
    forged = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
              "metadata": {"name": f"forged-{other}"},
              "spec": {"driver": GPU, "nodeName": other,
                       "pool": {"name": other, "generation": 99, "resourceSliceCount": 1},
                       "devices": [{"name": "gpu-99"}]}}
    cluster.who(AGENT, node).denied(
        "create", "-f", "-", input=json.dumps(forged),
        says=f"may only write ResourceSlices of its own node, not one of node '{other}'")
    cluster.after_attack()


# --------------------------------------------------------------------------- namespace users


def test_users_write_claims_but_not_status_slices_or_classes(cluster: Cluster) -> None:
    """Held before issue 22, kept: a namespace user (the default edit role, which now
    aggregates kdra-user) creates claims but writes no status, slice or class; it reads its
    namespace's DeviceQuotas but cannot write one (issue 27)."""
    user = cluster.who(USER)
    ns = ("-n", cluster.namespace)
    claim = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
             "metadata": {"name": "mallorys", "namespace": cluster.namespace},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": GPU}}]}}}
    # kube-controller-manager aggregates kdra-user into edit (asynchronously).
    wait_for(lambda: cluster.plane.kubectl(
        "auth", "can-i", "create", CLAIMS, "-n", cluster.namespace, as_user=USER,
        check=False).stdout.strip() == "yes", timeout=60, interval=1,
        what="kdra-user aggregated into edit")
    user.allowed("create", "-f", "-", input=json.dumps(claim))
    user.allowed("get", CLAIMS, "mallorys", *ns)
    stolen = {**claim, "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": GPU, "pool": cluster.nodes[0], "device": "gpu-0"}]}}}}
    user.denied("replace", "--subresource=status", "-f", "-", *ns, input=json.dumps(stolen),
                says="forbidden")
    user.denied("create", "-f", "-", input=json.dumps(
        {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
         "metadata": {"name": f"mallory-{cluster.namespace}"},
         "spec": {"driver": GPU, "nodeName": cluster.nodes[0],
                  "pool": {"name": cluster.nodes[0], "generation": 9, "resourceSliceCount": 1},
                  "devices": []}}), says="forbidden")
    user.denied("create", "-f", "-", input=json.dumps(
        {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
         "metadata": {"name": f"mallory-{cluster.namespace}"}, "spec": {}}), says="forbidden")
    # DeviceQuotas: read (view aggregates kdra-user-view, edit view), never written by
    # namespace users. Aggregation is asynchronous, as above.
    wait_for(lambda: cluster.plane.kubectl(
        "auth", "can-i", "list", "devicequotas.resource.kdra.dev", "-n", cluster.namespace,
        as_user=USER, check=False).stdout.strip() == "yes", timeout=60, interval=1,
        what="kdra-user-view aggregated into edit")
    user.allowed("get", "devicequotas.resource.kdra.dev", *ns)
    user.denied("create", "-f", "-", input=json.dumps(
        {"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
         "metadata": {"name": "unlimited", "namespace": cluster.namespace},
         "spec": {"limits": [{"deviceClassName": GPU, "devices": 1000}]}}), says="forbidden")
    user.allowed("delete", CLAIMS, "mallorys", *ns)
    cluster.after_attack()

"""The invariant checker over hand-built objects: each rule held, then violated."""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import pytest

from kdra.agent.core.cdi import CLAIM_UID_ANNOTATION, NODE_ANNOTATION, cdi_file_name
from kdra.checks import NodeLocal, Violation, check
from kdra.cli.core.forged import env_sources
from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION, FINALIZER
from tests.unit.partition_slices import node_slices

GPU = "gpu.kdra.dev"
NS = "ns"


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}}


def pod(name: str, node_name: str | None = "n1", claims: dict[str, str] | None = None,
        uid: str | None = None, **extra: Any) -> dict[str, Any]:
    claims = {"gpu": f"{name}-gpu"} if claims is None else claims
    entries = [{"name": k, "resourceClaimTemplateName": "one"} for k in claims]
    spec: dict[str, Any] = {"schedulerName": "kdra-scheduler", "containers": [{"name": "c"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}",
                         "annotations": {CLAIMS_ANNOTATION: json.dumps(entries),
                                         CLAIM_STATUSES_ANNOTATION: json.dumps(claims)}},
            "spec": spec, **extra}


def claim(name: str, devices: list[str] | None = None, *, node_name: str = "n1",
          reserved: list[str] | None = None, ready: bool = True, admin: bool = False,
          uid: str | None = None, selector: bool = True) -> dict[str, Any]:
    request: dict[str, Any] = {"name": "gpu", "exactly": {"deviceClassName": GPU}}
    if admin:
        request["exactly"]["adminAccess"] = True
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": NS,
                                         "uid": uid or f"uid-{name}"},
                            "spec": {"devices": {"requests": [request]}}, "status": {}}
    if name.endswith("-gpu"):  # generated for pod <name>'s template entry: owned by it
        owner = name.removesuffix("-gpu")
        body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod",
                                                "name": owner, "uid": f"uid-{owner}",
                                                "controller": True}]
    if devices is not None:
        allocation: dict[str, Any] = {"devices": {"results": [
            {"request": "gpu", "driver": GPU, "pool": node_name, "device": d} for d in devices]}}
        if selector:
            allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
        body["status"]["allocation"] = allocation
        body["status"]["reservedFor"] = [{"resource": "pods", "name": p, "uid": f"uid-{p}"}
                                         for p in (reserved or [])]
        body["status"]["devices"] = [
            {"driver": GPU, "pool": node_name, "device": d,
             "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
            for d in devices]
    return body


def slice_(name: str, node_name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"driver": GPU, "nodeName": node_name,
                                                 "pool": {"name": node_name, "generation": 0,
                                                          "resourceSliceCount": 1}}}


def rules(found: list[Violation]) -> list[str]:
    return [v.rule for v in found]


def healthy() -> dict[str, Any]:
    """One pod bound to n1 with one prepared GPU: every invariant holds."""
    return {"pods": [pod("p1")], "claims": [claim("p1-gpu", ["gpu-0"], reserved=["p1"])],
            "slices": [slice_("n1-gpu", "n1")], "nodes": [node("n1"), node("n2")]}


def test_a_healthy_cluster_has_no_violations() -> None:
    assert check(**healthy()) == []
    assert check() == []


# --------------------------------------------------------------------------- double allocation


@pytest.mark.parametrize("claims, expected", [
    ([claim("a", ["gpu-0"], reserved=["p"]), claim("b", ["gpu-1"], reserved=["q"])], []),
    ([claim("a", ["gpu-0"], reserved=["p"]), claim("b", ["gpu-0"], reserved=["q"])],
     ["double-allocation"]),
    ([claim("a", ["gpu-0", "gpu-0"], reserved=["p"])], ["double-allocation"]),
    # the same device name on another node is another device
    ([claim("a", ["gpu-0"], reserved=["p"]),
      claim("b", ["gpu-0"], node_name="n2", reserved=["q"])], []),
    # admin access holds no device (upstream): it may see a device with others ...
    ([claim("a", ["gpu-0"], reserved=["p"], admin=True),
      claim("b", ["gpu-0"], reserved=["q"], admin=True)], []),
    # ... also one a normal allocation holds (a monitor beside the workload: issue 41) ...
    ([claim("m", ["gpu-0"], reserved=["q"], admin=True),
      claim("a", ["gpu-0"], reserved=["p"])], []),
    # ... but two normal allocations of it are still one too many
    ([claim("a", ["gpu-0"], reserved=["p"]), claim("c", ["gpu-0"], reserved=["q"]),
      claim("m", ["gpu-0"], reserved=["q"], admin=True)], ["double-allocation"]),
], ids=["distinct", "two-claims", "twice-in-one", "other-node", "admin", "admin-and-normal",
        "admin-and-two-normal"])
def test_double_allocation(claims: list[dict[str, Any]], expected: list[str]) -> None:
    pods = [pod("p", claims={}), pod("q", claims={})]
    found = check(claims=claims, pods=pods, nodes=[node("n1"), node("n2")])
    assert rules(found) == expected
    if expected:
        assert "gpu.kdra.dev/n1/gpu-0" in found[0].message
        assert "ns/a" in found[0].message
        assert "ns/m" not in found[0].message  # the admin-access claim holds nothing


# --------------------------------------------------------------------------- bound pods


def broken(change: str) -> dict[str, Any]:
    state = healthy()
    the_claim = state["claims"][0]
    if change == "claim-missing":
        state["claims"] = []
    elif change == "not-allocated":
        state["claims"] = [claim("p1-gpu")]
    elif change == "not-reserved":
        the_claim["status"]["reservedFor"] = [{"resource": "pods", "name": "p1",
                                               "uid": "other"}]
    elif change == "wrong-node":
        state["pods"] = [pod("p1", node_name="n2")]
    elif change == "not-ready":
        state["claims"] = [claim("p1-gpu", ["gpu-0"], reserved=["p1"], ready=False)]
    elif change == "no-recorded-name":
        state["pods"][0]["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION] = "{}"
    elif change == "malformed-annotation":
        state["pods"][0]["metadata"]["annotations"][CLAIMS_ANNOTATION] = "{oops"
    return state


@pytest.mark.parametrize("change, words", [
    ("claim-missing", "does not exist"),
    ("not-allocated", "is not allocated"),
    ("not-reserved", "is not reserved for the pod"),
    ("wrong-node", "does not admit node n2"),
    ("not-ready", "not reported Ready: gpu.kdra.dev/n1/gpu-0"),
    ("no-recorded-name", "names no claim"),
    ("malformed-annotation", "malformed claims annotation"),
])
def test_bound_pod_claims(change: str, words: str) -> None:
    found = [v for v in check(**broken(change)) if v.rule == "pod-claims"]
    assert len(found) == 1, found
    assert words in found[0].message
    assert "pod ns/p1" in found[0].message


def test_bound_pod_rule_ignores_pending_finished_and_foreign_pods() -> None:
    pending = pod("p1", node_name=None)
    finished = pod("p1", status={"phase": "Succeeded"})
    foreign = pod("p1")
    foreign["spec"]["schedulerName"] = "default-scheduler"
    for the_pod in (pending, finished, foreign):
        assert check(pods=[the_pod], nodes=[node("n1")]) == []


def test_node_selector_by_label() -> None:
    state = healthy()
    state["claims"][0]["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
    assert rules(check(**state)) == ["pod-claims"]
    state["nodes"] = [node("n1", zone="a")]
    assert check(**state) == []


# --------------------------------------------------------------------------- reservations


def test_stale_reservation_for_a_gone_or_replaced_pod() -> None:
    state = healthy()
    state["claims"].append(claim("x", ["gpu-1"], reserved=["gone"]))
    found = check(**state)
    assert rules(found) == ["stale-reservation"]
    assert "ns/gone" in found[0].message and "ns/x" in found[0].message
    state = healthy()
    state["pods"] = [pod("p1", uid="new-uid")]
    found = check(**state)
    assert "stale-reservation" in rules(found)
    assert "replaced by uid new-uid" in str(found)


def test_unreserved_allocation() -> None:
    state = healthy()
    leak = claim("leak", ["gpu-1"], reserved=[])
    leak["metadata"]["finalizers"] = [FINALIZER]  # kdra allocated it
    state["claims"].append(leak)
    found = check(**state)
    assert rules(found) == ["unreserved-allocation"]
    assert "ns/leak" in found[0].message


def test_an_unreserved_allocation_someone_else_wrote_is_not_a_leak() -> None:
    state = healthy()
    state["claims"].append(claim("preallocated", ["gpu-1"], reserved=[]))  # no finalizer
    assert check(**state) == []


# --------------------------------------------------------------------------- slices


def test_orphan_slice() -> None:
    state = healthy()
    state["slices"].append(slice_("ghost-gpu", "ghost"))
    found = check(**state)
    assert rules(found) == ["orphan-slice"]
    assert "ghost-gpu" in found[0].message and "node ghost" in found[0].message


def agent_lease(name: str, pools: dict[str, str], renewed: str) -> dict[str, Any]:
    """A GPU heartbeat Lease (10 s) naming ``pools`` (the node or nodes annotation)."""
    return {"metadata": {"name": name, "annotations": {
        **pools, "resource.kdra.dev/driver": GPU}},
        "spec": {"renewTime": renewed, "leaseDurationSeconds": 10}}


def test_stale_slice_needs_now_and_an_expired_lease() -> None:
    state = healthy()
    renewed = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    state["leases"] = [agent_lease("kdra-agent-n1", {"resource.kdra.dev/node": "n1"},
                                   "2025-01-01T00:00:00.000000Z")]
    assert check(**state) == []  # no clock: not checked
    assert check(**state, now=renewed + dt.timedelta(seconds=30), lease_grace=40) == []
    found = check(**state, now=renewed + dt.timedelta(seconds=60), lease_grace=40)
    assert rules(found) == ["stale-slice"]
    assert "n1-gpu" in found[0].message


def test_stale_slice_under_a_shared_lease_and_the_freshest_lease_counts() -> None:
    state = healthy()
    renewed = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    shared = agent_lease("kdra-agent-nodes-x", {"resource.kdra.dev/nodes": "n0,n1,n2"},
                         "2025-01-01T00:00:00.000000Z")
    state["leases"] = [shared]
    later = renewed + dt.timedelta(seconds=60)
    assert rules(check(**state, now=later, lease_grace=40)) == ["stale-slice"]
    # A fresh per-node Lease for n1 (the agent now runs per node): the slice is vouched for.
    fresh = agent_lease("kdra-agent-n1", {"resource.kdra.dev/node": "n1"},
                        "2025-01-01T00:00:55.000000Z")
    state["leases"] = [fresh, shared]
    assert check(**state, now=later, lease_grace=40) == []


# --------------------------------------------------------------------------- node-local state


def local_state(uid: str = "uid-p1-gpu", state: str = "prepared") -> NodeLocal:
    file = cdi_file_name(GPU, uid)
    return NodeLocal(
        frozenset({"n1"}),
        {file: {"annotations": {NODE_ANNOTATION: "n1", CLAIM_UID_ANNOTATION: uid}}},
        {"n1": {uid: {"namespace": NS, "name": "p1-gpu", "state": state, "cdiFiles": [file],
                      "devices": [{"driver": GPU, "pool": "n1", "device": "gpu-0"}]}}})


def test_node_local_state_that_matches() -> None:
    assert check(**healthy(), local=local_state()) == []
    # a node outside the local state is not judged
    assert check(**healthy(), local=NodeLocal(frozenset({"n2"}))) == []


def test_prepared_claim_without_checkpoint_or_cdi_file() -> None:
    found = check(**healthy(), local=NodeLocal(frozenset({"n1"})))
    assert rules(found) == ["not-prepared", "not-prepared"]
    assert "no checkpoint entry" in found[0].message or "no checkpoint entry" in found[1].message
    assert any("no CDI spec file kdra.dev-uid-p1-gpu.json" in v.message for v in found)


def test_checkpoint_entry_with_other_devices() -> None:
    local = local_state()
    entry = copy.deepcopy(dict(local.checkpoints["n1"]["uid-p1-gpu"]))
    entry["devices"] = [{"driver": GPU, "pool": "n1", "device": "gpu-7"}]
    local = NodeLocal(local.nodes, local.cdi_specs, {"n1": {"uid-p1-gpu": entry}})
    found = check(**healthy(), local=local)
    assert rules(found) == ["not-prepared"]
    assert "gpu-7" in found[0].message


def test_leftovers_of_a_released_claim() -> None:
    state = healthy()
    state["pods"], state["claims"] = [], [claim("p1-gpu")]  # deallocated, still exists
    found = check(**state, local=local_state())
    assert rules(found) == ["orphan-cdi", "stale-checkpoint"]
    assert "not allocated to the node" in str(found)
    state["claims"] = []  # deleted
    found = check(**state, local=local_state())
    assert rules(found) == ["orphan-cdi", "stale-checkpoint"]
    assert "which is gone" in str(found)


def test_unfinished_prepare() -> None:
    found = check(**healthy(), local=local_state(state="preparing"))
    assert "unfinished-prepare" in rules(found)
    assert "not-prepared" in rules(found)


def test_cdi_file_without_checkpoint_entry() -> None:
    local = local_state()
    extra = cdi_file_name(GPU, "uid-nobody")
    specs = {**local.cdi_specs,
             extra: {"annotations": {NODE_ANNOTATION: "n1", CLAIM_UID_ANNOTATION: "uid-nobody"}},
             "kdra.dev-other-node.json": {"annotations": {NODE_ANNOTATION: "n9"}}}
    found = check(**healthy(), local=NodeLocal(local.nodes, specs, local.checkpoints))
    assert rules(found) == ["orphan-cdi"]
    assert extra in found[0].message


# --------------------------------------------------------------------------- robustness


@pytest.mark.parametrize("garbage", [
    {}, {"metadata": None}, {"metadata": {"name": "x"}, "status": None},
    {"metadata": {"name": "x"}, "status": {"allocation": "nope", "reservedFor": [1, None]}},
    {"metadata": {"name": "x"}, "spec": None, "status": {"allocation": {"devices": None}}},
])
def test_malformed_objects_never_raise(garbage: dict[str, Any]) -> None:
    check(pods=[garbage], claims=[garbage], slices=[garbage], nodes=[garbage],
          leases=[garbage], local=NodeLocal(frozenset({"n1"}), {"f": garbage},
                                            {"n1": {"u": garbage}}),
          now=dt.datetime.now(dt.UTC))


def test_violations_are_sorted_and_unique() -> None:
    state = healthy()
    state["slices"] += [slice_("z", "ghost"), slice_("a", "ghost")]
    found = check(**state)
    assert found == sorted(found)
    assert str(found[0]).startswith("orphan-slice: slice a")


# --------------------------------------------------------------------------- forged outputs


def gpu_slice(node_name: str, *uuids: str) -> dict[str, Any]:
    body = slice_(f"{node_name}-gpu", node_name)
    body["spec"]["devices"] = [{"name": f"gpu-{i}", "attributes": {
        "uuid": {"string": uuid}}} for i, uuid in enumerate(uuids)]
    return body


def forged_state() -> dict[str, Any]:
    """p1 holds gpu-0 (GPU-a) on n1; gpu-1 (GPU-b) belongs to nobody's pod p1."""
    state = healthy()
    state["slices"] = [gpu_slice("n1", "GPU-a", "GPU-b")]
    annotations = state["pods"][0]["metadata"]["annotations"]
    annotations["devices.resource.kdra.dev/c"] = "gpu.kdra.dev/n1/gpu-0"
    annotations["gpus.resource.kdra.dev/c"] = "GPU-a"
    state["pods"][0]["spec"]["containers"][0]["env"] = [
        {"name": "KDRA_DEVICES", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['devices.resource.kdra.dev/c']"}}},
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['gpus.resource.kdra.dev/c']"}}}]
    return state


def plain_pod(name: str, env: list[dict[str, Any]], annotations: dict[str, str] | None = None,
              node_name: str = "n1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "annotations": annotations or {}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "env": env}]}}


def test_kdras_own_outputs_are_not_forged() -> None:
    assert check(**forged_state()) == []


@pytest.mark.parametrize(("change", "rule", "words"), [
    ("devices-annotation", "forged-devices", "gpu.kdra.dev/n1/gpu-1"),
    ("gpus-annotation", "forged-devices", "GPU-b"),
    ("literal-env", "forged-env", "is not kdra's entry"),
    ("no-claims-devices", "forged-devices", "gpu.kdra.dev/n1/gpu-1"),
    ("no-claims-env-all", "forged-env", "'all' on node n1"),
    ("no-claims-env-uuid", "forged-env", "GPU-b"),
    ("foreign-status", "foreign-claim", "which another pod owns"),
    ("foreign-reservation", "foreign-claim", "is reserved for another pod"),
])
def test_forged_outputs_are_violations(change: str, rule: str, words: str) -> None:
    """Issue 22 attacks 6 and 7, as ``kdra check`` sees them once a webhook was bypassed."""
    state = forged_state()
    the_pod = state["pods"][0]
    annotations = the_pod["metadata"]["annotations"]
    if change == "devices-annotation":
        annotations["devices.resource.kdra.dev/c"] += ",gpu.kdra.dev/n1/gpu-1"
    elif change == "gpus-annotation":
        annotations["gpus.resource.kdra.dev/c"] = "GPU-b"
    elif change == "literal-env":
        the_pod["spec"]["containers"][0]["env"][1] = {"name": "NVIDIA_VISIBLE_DEVICES",
                                                      "value": "GPU-a"}
    elif change == "no-claims-devices":
        state["pods"].append(plain_pod("x", [], {
            "devices.resource.kdra.dev/c": "gpu.kdra.dev/n1/gpu-1"}))
    elif change == "no-claims-env-all":
        state["pods"].append(plain_pod("x", [{"name": "NVIDIA_VISIBLE_DEVICES",
                                              "value": "all"}]))
    elif change == "no-claims-env-uuid":
        state["pods"].append(plain_pod("x", [{"name": "NVIDIA_VISIBLE_DEVICES",
                                              "value": "GPU-b,GPU-unknown"}]))
    elif change == "foreign-status":
        thief = pod("thief", claims={"gpu": "p1-gpu"})
        state["pods"].append(thief)
    elif change == "foreign-reservation":
        state["claims"][0]["metadata"]["annotations"] = {
            "resource.kdra.dev/pod-claim-name": "gpu"}
        state["claims"][0]["status"]["reservedFor"].append(
            {"resource": "pods", "name": "thief", "uid": "uid-thief"})
        state["pods"].append(plain_pod("thief", []))
    found = [v for v in check(**state) if v.rule == rule]
    assert len(found) == 1, check(**state)
    assert words in found[0].message


def test_issue36_device_variables_from_config_maps_secrets_and_ephemeral_containers() -> None:
    """Issue 36, point 7: ``kdra check`` missed ``envFrom``. Sources are what check.py read."""
    state = forged_state()
    sources = {(NS, "ConfigMap", "gpus"): {"NVIDIA_VISIBLE_DEVICES": "all", "OTHER": "x"},
               (NS, "ConfigMap", "prefixed"): {"VISIBLE_DEVICES": "all"},
               (NS, "Secret", "s"): {"uuids": "GPU-b"}}
    sidecar = plain_pod("envfrom", [])
    sidecar["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "gpus"}}]
    prefixed = plain_pod("prefixed", [])
    prefixed["spec"]["containers"][0]["envFrom"] = [
        {"prefix": "NVIDIA_", "configMapRef": {"name": "prefixed"}}]
    secret = plain_pod("secret", [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "uuids"}}}])
    debug = plain_pod("debug", [])
    debug["spec"]["ephemeralContainers"] = [
        {"name": "dbg", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]
    overridden = plain_pod("overridden", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}])
    overridden["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "gpus"}}]
    state["pods"] += [sidecar, prefixed, secret, debug, overridden]
    found = sorted(v.message for v in check(**state, env_sources=sources))
    assert found == [
        f"pod {NS}/debug container dbg: NVIDIA_VISIBLE_DEVICES is 'all' on node n1, where "
        "kdra publishes GPUs",
        f"pod {NS}/envfrom container c: NVIDIA_VISIBLE_DEVICES from ConfigMap {NS}/gpus "
        "(envFrom) is 'all' on node n1, where kdra publishes GPUs",
        f"pod {NS}/prefixed container c: NVIDIA_VISIBLE_DEVICES from ConfigMap {NS}/prefixed "
        "(envFrom) is 'all' on node n1, where kdra publishes GPUs",
        f"pod {NS}/secret container c: NVIDIA_VISIBLE_DEVICES from Secret {NS}/s (valueFrom) "
        "names GPU-b, which its claims do not hold",
    ]
    assert check(**state) != []  # without the sources: only the literal ones
    assert env_sources(sidecar) == {(NS, "ConfigMap", "gpus")}
    assert env_sources(secret) == {(NS, "Secret", "s")}


def test_issue36_a_pod_naming_another_pods_generated_claim_is_foreign() -> None:
    state = forged_state()
    state["claims"][0]["metadata"]["annotations"] = {"resource.kdra.dev/pod-claim-name": "gpu"}
    state["claims"][0]["metadata"]["ownerReferences"] = [
        {"kind": "Pod", "name": "p1", "uid": "uid-p1", "controller": True}]
    thief = plain_pod("thief", [], {CLAIMS_ANNOTATION: json.dumps(
        [{"name": "gpu", "resourceClaimName": "p1-gpu"}])}, node_name="")
    state["pods"].append(thief)
    (found,) = [v for v in check(**state) if v.rule == "foreign-claim"]
    assert found.message == (f"pod {NS}/thief names claim {NS}/p1-gpu (entry 'gpu'), which "
                             "was generated for pod p1")


def test_harmless_env_is_not_forged() -> None:
    state = forged_state()
    state["pods"] += [
        plain_pod("none", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]),
        plain_pod("elsewhere", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                  node_name="n2"),  # no kdra GPUs there
        plain_pod("unknown", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-not-kdras"}]),
    ]
    assert check(**state) == []


# --------------------------------------------------------------------------- issue 26: shares


def _shared_slices() -> list[dict[str, object]]:
    slices: list[dict[str, object]] = node_slices("node-1", "1 x H100-80GB")
    slices.append({"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
                   "metadata": {"name": "shared"},
                   "spec": {"driver": "gpu.kdra.dev", "allNodes": True,
                            "pool": {"name": "shared", "generation": 0,
                                     "resourceSliceCount": 1},
                            "devices": [{"name": "gpu-s", "allowMultipleAllocations": True,
                                         "capacity": {"memory": {"value": "80Gi"}}}]}})
    return slices


def _holding(name: str, *results: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"namespace": "default", "name": name},
            "status": {"allocation": {"devices": {"results": list(results)}}}}


def _result(device: str, pool: str = "node-1", share: str | None = None,
            memory: str | None = None) -> dict[str, object]:
    out: dict[str, object] = {"request": "gpu", "driver": "gpu.kdra.dev", "pool": pool,
                              "device": device}
    if share:
        out["shareID"] = share
        out["consumedCapacity"] = {"memory": memory}
    return out


@pytest.mark.parametrize(("claims", "rules"), [
    ([_holding("a", _result("gpu-0-mig-3g-40gb-0")),
      _holding("b", _result("gpu-0-mig-3g-40gb-4"))], []),
    ([_holding("a", _result("gpu-0-mig-4g-40gb-0")),
      _holding("b", _result("gpu-0-mig-3g-40gb-0"))], ["counter-exceeded"]),
    ([_holding("a", _result("gpu-0")), _holding("b", _result("gpu-0-mig-1g-10gb-6"))],
     ["counter-exceeded"]),
    ([_holding("a", _result("gpu-s", "shared", "1", "40Gi")),
      _holding("b", _result("gpu-s", "shared", "2", "40Gi"))], []),
    ([_holding("a", _result("gpu-s", "shared", "1", "60Gi")),
      _holding("b", _result("gpu-s", "shared", "2", "40Gi"))], ["capacity-exceeded"]),
    ([_holding("a", _result("gpu-s", "shared", "1", "10Gi")),
      _holding("b", _result("gpu-s", "shared"))], ["share-conflict"]),
    ([_holding("a", _result("gpu-0-mig-1g-10gb-0", share="1", memory="1Gi"))],
     ["share-conflict"]),
], ids=["disjoint partitions", "overlapping partitions", "whole and partition",
        "two shares within capacity", "shares over capacity", "share and exclusive",
        "share of an exclusive device"])
def test_shared_device_rules(claims: list[dict[str, object]], rules: list[str]) -> None:
    found = check(claims=claims, slices=_shared_slices(), nodes=[{"metadata": {"name": "node-1"}}])
    assert sorted({v.rule for v in found}) == rules, found

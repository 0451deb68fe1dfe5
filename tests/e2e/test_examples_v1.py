"""manifests/examples/v1 applied as a user would (``kubectl apply -k``) to kdra with simulated
GPU nodes: every scenario schedules as its comments say, in the v1 shape, and the same claims
read the same through v1alpha3.

One node with the mixed inventory (8 H100s, 3 healthy A100s). The examples take GPUs in the
node's order, H100s first, so gpu-test3's pod gets its first choice; once filler pods have
taken every H100 left, a second gpu-test3 pod falls back to two A100s. Also here: what a v1
user is told about admin access outside a labelled namespace and about fields kdra does not
support yet.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION
from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers, test_binder
from tests.e2e.agent_helpers import AgentFactory, unique
from tests.e2e.conftest import ROOT, get_json
from tests.e2e.procs import wait_for
from tests.e2e.test_binder import CLAIMS, apply, gpu_pod

agents = agent_helpers.agents  # fixtures shared with other modules
kdra = test_binder.kdra
EXAMPLES = ROOT / "manifests" / "examples" / "v1"
NAMESPACES = [f"gpu-test{i}" for i in range(1, 6)]
INVENTORY = (ROOT / "manifests" / "examples" / "inventory" / "mixed-gpus.yaml").read_text()


@pytest.fixture
def examples(control_plane: ControlPlane) -> Any:
    yield
    control_plane.kubectl("delete", "deviceclass.resource.kdra.dev", "gpu.kdra.dev",
                          "--ignore-not-found", "--wait=false", check=False)
    for namespace in NAMESPACES:
        control_plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0",
                              "--force", "--wait=false", check=False)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def bound(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return dict(wait_for(
        lambda: (p := get_json(plane, "pod", name, "-n", namespace))["spec"].get("nodeName")
        and p, timeout=120, what=f"pod {namespace}/{name} bound"))


def results(plane: ControlPlane, namespace: str, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The allocation results of every claim of ``pod``, in v1."""
    statuses = json.loads(pod["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])
    out: list[dict[str, Any]] = []
    for claim_name in statuses.values():
        claim = get_json(plane, CLAIMS, claim_name, "-n", namespace)
        out += claim["status"]["allocation"]["devices"]["results"]
    return out


def model(plane: ControlPlane, node: str, device: str) -> str:
    for slice_ in agent_helpers.slices_of(plane, node):
        for entry in slice_["spec"]["devices"]:
            if entry["name"] == device:
                return str(entry["attributes"]["productName"]["string"])
    raise AssertionError(f"no device {device} on {node}")


def attribute(plane: ControlPlane, node: str, device: str, name: str) -> Any:
    for slice_ in agent_helpers.slices_of(plane, node):
        for entry in slice_["spec"]["devices"]:
            if entry["name"] == device:
                return next(iter(entry["attributes"][name].values()))
    raise AssertionError(f"no device {device} on {node}")


def test_v1_examples_schedule_as_described(control_plane: ControlPlane,
                                           agents: AgentFactory, kdra: Any,
                                           examples: Any) -> None:
    node = unique("v1-examples")
    agents(node, INVENTORY)
    operator = kdra(webhooks=True)
    out = control_plane.kubectl("apply", "-k", str(EXAMPLES)).stdout
    print(out)

    # gpu-test1: two pods, a GPU each, not the same one.
    one = [results(control_plane, "gpu-test1", bound(control_plane, "gpu-test1", p))
           for p in ("pod0", "pod1")]
    assert [len(r) for r in one] == [1, 1] and one[0][0]["device"] != one[1][0]["device"]
    assert {r[0]["request"] for r in one} == {"gpu"}

    # gpu-test2: one claim, both pods reserved on it, one device.
    pods2 = [bound(control_plane, "gpu-test2", p) for p in ("pod0", "pod1")]
    shared = get_json(control_plane, CLAIMS, "shared-gpu", "-n", "gpu-test2")
    assert {r["name"] for r in shared["status"]["reservedFor"]} == {"pod0", "pod1"}
    assert len(shared["status"]["allocation"]["devices"]["results"]) == 1
    assert {p["spec"]["nodeName"] for p in pods2} == {node}

    # gpu-test3: the first choice while an H100 is free.
    (first,) = results(control_plane, "gpu-test3", bound(control_plane, "gpu-test3", "pod0"))
    assert first["request"] == "gpu/h100"
    assert "H100" in model(control_plane, node, first["device"])

    # gpu-test4: a pair behind one PCIe root, and a pair on two NUMA nodes.
    pair = results(control_plane, "gpu-test4", bound(control_plane, "gpu-test4",
                                                     "same-pcie-root"))
    roots = {attribute(control_plane, node, r["device"], "pcieRoot") for r in pair}
    assert len(pair) == 2 and len(roots) == 1, pair
    spread = results(control_plane, "gpu-test4", bound(control_plane, "gpu-test4",
                                                       "distinct-numa"))
    numa = {attribute(control_plane, node, r["device"], "numaNode") for r in spread}
    assert len(spread) == 2 and len(numa) == 2, spread

    # gpu-test5: every H100 of the node with admin access, in use or not.
    monitor = results(control_plane, "gpu-test5", bound(control_plane, "gpu-test5", "monitor"))
    assert len(monitor) == 8 and all(r["adminAccess"] is True for r in monitor), monitor
    admin_access_holds_nothing(control_plane, operator, node)
    claim_columns(control_plane)

    # A second gpu-test3 pod once no H100 is free falls back to two A100s.
    taken = [r["device"] for ns in ("gpu-test1", "gpu-test2", "gpu-test3", "gpu-test4")
             for c in get_json(control_plane, CLAIMS, "-n", ns)["items"]
             for r in c["status"].get("allocation", {}).get("devices", {}).get("results", [])]
    for index in range(8 - sum("H100" in model(control_plane, node, d) for d in set(taken))):
        filler = gpu_pod(f"filler-{index}", "gpu-test1",
                         [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}])
        apply(control_plane, filler)
        bound(control_plane, "gpu-test1", f"filler-{index}")
    apply(control_plane, gpu_pod("pod1", "gpu-test3",
                                 [{"name": "gpu", "resourceClaimTemplateName":
                                   "h100-or-two-a100"}]))
    fallback = results(control_plane, "gpu-test3", bound(control_plane, "gpu-test3", "pod1"))
    assert [r["request"] for r in fallback] == ["gpu/two-a100", "gpu/two-a100"], fallback
    assert all("A100" in model(control_plane, node, r["device"]) for r in fallback)

    # The same claims through v1alpha3 (the plural keeps the version: kubectl drops one given
    # with a short name): results named alike, v1-only fields in the annotation.
    names_v1 = control_plane.kubectl("get", "kclaim.v1.resource.kdra.dev", "-n",
                                     "gpu-test5", "-o", "name").stdout.split()
    names_alpha = control_plane.kubectl("get", "kclaim.v1alpha3.resource.kdra.dev", "-n",
                                        "gpu-test5", "-o", "name").stdout.split()
    assert names_v1 == names_alpha and names_v1
    (old,) = get_json(control_plane, "resourceclaims.v1alpha3.resource.kdra.dev", "-n",
                      "gpu-test5")["items"]
    assert old["apiVersion"] == "resource.kdra.dev/v1alpha3"
    request = old["spec"]["devices"]["requests"][0]
    assert request["adminAccess"] is True and request["allocationMode"] == "All"
    assert all("adminAccess" not in r for r in old["status"]["allocation"]["devices"]["results"])
    kept = json.loads(old["metadata"]["annotations"]["resource.kdra.dev/v1-fields"])
    assert all(r["adminAccess"] for r in kept["status.allocation"]["devices"]["results"])


def held_devices(plane: ControlPlane, node: str) -> set[str]:
    """The devices of ``node`` the examples' claims hold (not those seen by admin access)."""
    held = set()
    for namespace in NAMESPACES:
        for claim in get_json(plane, CLAIMS, "-n", namespace)["items"]:
            admin = {r["name"] for r in claim["spec"]["devices"]["requests"]
                     if (r.get("exactly") or {}).get("adminAccess")}
            for r in ((claim.get("status") or {}).get("allocation") or {}).get(
                    "devices", {}).get("results", []):
                if r["pool"] == node and not r.get("adminAccess") and \
                        r["request"].split("/")[0] not in admin:
                    held.add(r["device"])
    return held


def plugin(plane: ControlPlane, *args: str) -> Any:
    result = subprocess.run([str(Path(sys.executable).parent / "kubectl-kdra"), *args,
                             "-o", "json", "--kubeconfig", str(plane.kubeconfig)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def admin_access_holds_nothing(plane: ControlPlane, operator: Any, node: str) -> None:
    """Issue 41: a monitoring claim with admin access to every H100 counts as holding none —
    kdra check is clean, top / describe / the gauges count each device once."""
    held = held_devices(plane, node)
    assert held, "the examples hold devices on the node"
    check = subprocess.run([sys.executable, "-m", "kdra", "check", "--kubeconfig",
                            str(plane.kubeconfig), "-o", "json"],
                           capture_output=True, text=True, timeout=120)
    ours = [v for v in json.loads(check.stdout or "[]")
            if "gpu-test" in v["message"] or node in v["message"]]
    assert ours == [], ours  # (other tests' leftovers in the shared cluster are not ours)
    tops = {n["namespace"]: n for n in plugin(plane, "top", "-A")["namespaces"]}
    assert (tops["gpu-test5"]["devices"], tops["gpu-test5"]["claims"]) == (0, 1)
    assert sum(tops[ns]["devices"] for ns in NAMESPACES if ns in tops) == len(held)
    (pool,) = plugin(plane, "describe", "-A", "--node", node)["pools"]
    assert pool["allocated"] == len(held)
    allocated = {d["name"] for d in pool["devices"] if d["state"].startswith("allocated")}
    assert allocated == held
    samples = wait_for(lambda: [line for line in operator.metrics().splitlines()
                                if line.startswith("kdra_devices{") and f'node="{node}"' in line
                                and 'state="allocated"' in line], timeout=30,
                       what="the operator's kdra_devices gauge")
    assert max(float(line.split()[-1]) for line in samples) == len(held), samples
    gpu_test5 = [line for line in operator.metrics().splitlines() if line.startswith(
        "kdra_namespace_devices_allocated{") and 'namespace="gpu-test5"' in line]
    assert all(float(line.split()[-1]) == 0 for line in gpu_test5), gpu_test5


def claim_columns(plane: ControlPlane) -> None:
    """Issue 41: ``kubectl get kclaim`` — a claim shared by two pods lists both (-o wide), a
    pending claim's row says what it waits for."""
    plane.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
        "metadata": {"name": "unused", "namespace": "gpu-test2"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.kdra.dev"}}]}}}))
    table = plane.kubectl("get", "kclaim", "-n", "gpu-test2", "-o", "wide").stdout
    print(f"\n[kubectl get kclaim -o wide]\n{table}")
    header, *lines = table.splitlines()
    names = header.split()
    assert names[:6] == ["NAME", "CLASS", "DEVICES", "NODE", "RESERVEDFOR", "CONSUMERS"]
    starts = [header.index(name) for name in names]  # kubectl leaves empty cells blank
    rows = {cells[0]: dict(zip(names, cells, strict=True)) for cells in (
        [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        for line in lines)}
    assert rows["unused"]["CLASS"] == "gpu.kdra.dev"  # a pending claim: what it waits for
    assert rows["unused"]["DEVICES"] == rows["unused"]["RESERVEDFOR"] == ""
    shared = rows["shared-gpu"]
    assert shared["RESERVEDFOR"] in ("pod0", "pod1")  # a column prints one value ...
    assert {ref["name"] for ref in json.loads(shared["CONSUMERS"])} == {"pod0", "pod1"}
    plane.kubectl("delete", "kclaim", "unused", "-n", "gpu-test2", "--wait=false")


def test_admin_access_needs_the_label_and_capacity_requests_are_acted_on(
        control_plane: ControlPlane, agents: AgentFactory, kdra: Any, namespace: str) -> None:
    node = unique("v1-rules")
    agents(node, "gpus: ['2 x H100-80GB']\n")
    kdra(webhooks=True)
    apply(control_plane, {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
                          "metadata": {"name": "gpu.kdra.dev"}, "spec": {"selectors": [
                              {"cel": {"expression": 'device.driver == "gpu.kdra.dev"'}}]}})
    admin = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
             "metadata": {"name": "watch-all", "namespace": namespace},
             "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                 "deviceClassName": "gpu.kdra.dev", "allocationMode": "All",
                 "adminAccess": True}}]}}}
    refused = control_plane.kubectl("create", "-f", "-", input=json.dumps(admin), check=False)
    print(f"\n[admin access, unlabelled namespace] {refused.stderr.strip()}")
    assert refused.returncode != 0
    assert f"namespace {namespace} is not" in refused.stderr
    assert "resource.kdra.dev/admin-access=true" in refused.stderr
    control_plane.kubectl("label", "namespace", namespace,
                          "resource.kdra.dev/admin-access=true")
    control_plane.kubectl("create", "-f", "-", input=json.dumps(admin))

    # Issue 25: tolerations are acted upon, so they are admitted without a warning; issue 26:
    # capacity requests too (they used to be reported as not supported here).
    tolerating = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
                  "metadata": {"name": "tolerating", "namespace": namespace},
                  "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                      "deviceClassName": "gpu.kdra.dev",
                      "tolerations": [{"key": "gpu.kdra.dev/unhealthy",
                                       "operator": "Exists"}]}}]}}}
    created = control_plane.kubectl("create", "-f", "-", input=json.dumps(tolerating))
    assert "kdra does not support" not in created.stderr, created.stderr

    def capacity_claim(name: str, memory: str) -> dict[str, Any]:
        return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.kdra.dev",
                    "capacity": {"requests": {"memory": memory}}}}]}}}

    created = control_plane.kubectl("create", "-f", "-",
                                    input=json.dumps(capacity_claim("too-big", "100Gi")))
    assert "kdra does not support" not in created.stderr, created.stderr
    negative = control_plane.kubectl("create", "-f", "-", check=False,
                                     input=json.dumps(capacity_claim("negative", "-1Gi")))
    print(f"\n[capacity requests: a negative amount] {negative.stderr.strip()}")
    assert negative.returncode != 0
    assert "capacity.requests[memory]: -1Gi is negative" in negative.stderr
    apply(control_plane, gpu_pod("too-big", namespace,
                                 [{"name": "gpu", "resourceClaimName": "too-big"}]))
    message = wait_for(lambda: [e["message"] for e in get_json(
        control_plane, "events", "-n", namespace, "--field-selector",
        "involvedObject.name=too-big")["items"] if e["reason"] == "FailedScheduling"],
        timeout=60, what="FailedScheduling for the pod asking more memory than a GPU has")[-1]
    print(f"\n[capacity requests: the pod is told] {message}")
    assert ('matching devices lack the capacity asked (or what is left of it) (request "gpu" '
            'of claim "too-big")') in message
    pod = get_json(control_plane, "pod", "too-big", "-n", namespace)
    assert not pod["spec"].get("nodeName")
    control_plane.kubectl("create", "-f", "-", input=json.dumps(capacity_claim("fits", "10Gi")))
    apply(control_plane, gpu_pod("fits", namespace,
                                 [{"name": "gpu", "resourceClaimName": "fits"}]))
    wait_for(lambda: get_json(control_plane, "pod", "fits", "-n", namespace)["spec"].get(
        "nodeName"), timeout=60, what="the pod asking 10Gi of an 80Gi GPU bound")
    result = get_json(control_plane, CLAIMS, "fits", "-n", namespace)[
        "status"]["allocation"]["devices"]["results"][0]
    assert "shareID" not in result and "consumedCapacity" not in result  # exclusive GPU
    control_plane.kubectl("delete", "deviceclass.resource.kdra.dev", "gpu.kdra.dev",
                          "--ignore-not-found", "--wait=false", check=False)

"""kdra on native DRA (issue 38), end to end: the operator in the native flavour against a
real API server serving ``resource.k8s.io/v1`` (kube-controller-manager runs without its
``resourceclaim-controller``, as kdra's controller replaces it), with ResourceSlices of the
built-in kind published the way any driver publishes them.

One operator for the module (webhooks on), each test with its own nodes, driver and
DeviceClass:

- the seed's example as users write it (``manifests/examples/native``, only
  ``schedulerName`` added) binds: the generated claim is named by upstream's rule, owned by
  the pod as upstream's controller owns it, recorded in ``status.resourceClaimStatuses``;
  both claims allocated and reserved as upstream's scheduler writes them (its finalizer
  too); deleting the pod releases the shared claim and deletes the generated one;
- a shared claim serves two pods; ``firstAvailable`` falls back; a partition is allocated
  within its GPU's shared counters; a GPU is shared by capacity; a DeviceQuota refuses;
  a higher-priority pod preempts;
- hostile: a pod naming another pod's generated claim is refused by the webhook (as a
  namespace user) and, stored anyway, by the scheduler.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kdra import GROUP
from kdra.kube.core.podclaims import generate_name_prefix
from kdra.operator.core.gangs import MIN_MEMBER_ANNOTATION, POD_GROUP_LABEL
from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import ROOT, get_json
from tests.e2e.conversion import ConversionServer
from tests.e2e.native_helpers import (
    API,
    CLASSES,
    FINALIZER,
    POD_CLAIM_NAME,
    SLICES,
    apply,
    bound,
    claim,
    claim_obj,
    claims_in,
    device_class,
    events,
    force_delete,
    generated,
    get_pod,
    gpus,
    make_node,
    native_operator,
    pod,
    pod_scheduled,
    request,
    results,
    slices,
    statuses,
    template,
    unique,
)
from tests.e2e.procs import KdraProcess, wait_for
from tests.e2e.test_health import FakeKubelet

EXAMPLE = ROOT / "manifests" / "examples" / "native"
STATIC_SLICE = ROOT / "manifests" / "examples" / "native-static-slice" / "resourceslice.yaml"


@pytest.fixture(scope="module")
def operator(control_plane: ControlPlane, conversion_server: ConversionServer,
             tmp_path_factory: pytest.TempPathFactory,
             pod_group_crd: None) -> Iterator[KdraProcess]:
    """The module's native operator (PodGroups served before it starts: it reads them)."""
    log = tmp_path_factory.mktemp("native") / "operator.log"
    with native_operator(control_plane, conversion_server, log) as proc:
        yield proc
        print(f"===== native operator log =====\n{proc.tail(150)}")


class World:
    """One test's node(s), driver and class: nothing shared with other tests."""

    def __init__(self, plane: ControlPlane, name: str) -> None:
        self.plane = plane
        self.node = unique(name)
        self.driver = f"{self.node}.e2e.kdra.dev"
        self.cls = f"{self.node}.e2e.kdra.dev"
        self.nodes = [self.node]
        make_node(plane, self.node)
        apply(plane, device_class(self.cls, self.driver))

    def two_gpu_nodes(self, prefix: str) -> str:
        """This world's node and another, 2 GPUs each; the other's name."""
        other = unique(prefix)
        make_node(self.plane, other)
        self.nodes.append(other)
        self.publish({"devices": gpus(2)})
        self.publish({"devices": gpus(2)}, node=other)
        return other

    def publish(self, *specs: dict[str, object], node: str | None = None) -> None:
        apply(self.plane, *slices(node or self.node, self.driver, *specs))

    def close(self) -> None:
        self.plane.kubectl("delete", SLICES, "--field-selector",
                           f"spec.driver={self.driver}", "--wait=false", check=False)
        self.plane.kubectl("delete", CLASSES, self.cls, "--wait=false", check=False)
        self.plane.kubectl("delete", "node", *self.nodes, "--wait=false", check=False)


@pytest.fixture
def world(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[World]:
    made = World(control_plane, request.node.name.split("[")[0][5:25].replace("_", "-"))
    yield made
    made.close()


# --------------------------------------------------------------------------- the seed


def test_the_seed_example_binds_with_upstream_names_and_owners(
        control_plane: ControlPlane, operator: KdraProcess, ns: str) -> None:
    plane = control_plane
    node = "worker-1"  # the example's slice names it
    if plane.kubectl("get", "node", node, check=False).returncode != 0:
        make_node(plane, node)
    plane.kubectl("apply", "-f", str(STATIC_SLICE))
    plane.kubectl("apply", "-n", ns, "-k", str(EXAMPLE))
    bound_pod = bound(plane, ns, "pod-with-cats")
    assert bound_pod["spec"]["nodeName"] == node
    recorded = statuses(bound_pod)
    # As upstream's controller: only the generated claim is recorded (cat-0 is the spec's).
    assert list(recorded) == ["cat-1"], recorded
    name = recorded["cat-1"]
    assert re.fullmatch(r"pod-with-cats-cat-1-[a-z0-9]{5}", name), name
    uid = bound_pod["metadata"]["uid"]
    made = claim_obj(plane, ns, name)
    meta = made["metadata"]
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod",
                                        "name": "pod-with-cats", "uid": uid,
                                        "controller": True, "blockOwnerDeletion": True}]
    assert meta["annotations"] == {POD_CLAIM_NAME: "cat-1"}
    assert made["apiVersion"] == API
    stored = get_json(plane, "resourceclaimtemplates.resource.k8s.io",
                      "large-black-cat-claim-template", "-n", ns)
    assert made["spec"] == stored["spec"]["spec"]
    shared = claim_obj(plane, ns, "small-white-cat-claim")
    for obj, cat in ((shared, "white small"), (made, "black large")):
        # Written as upstream's scheduler writes it: finalizer, allocation, reservation.
        assert FINALIZER in obj["metadata"]["finalizers"], obj["metadata"]
        status = obj["status"]
        assert status["reservedFor"] == [{"resource": "pods", "name": "pod-with-cats",
                                          "uid": uid}], status
        assert status["allocation"]["nodeSelector"] == {"nodeSelectorTerms": [{
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
        assert "allocatedDevices" not in status  # kdra's CRD's summary: not upstream's API
        (result,) = results(obj)
        assert (result["driver"], result["pool"]) == ("resource-driver.example.com", node)
        slice_ = get_json(plane, SLICES, "worker-1-cats")
        device = next(d for d in slice_["spec"]["devices"] if d["name"] == result["device"])
        assert f"{device['attributes']['color']['string']} " \
               f"{device['attributes']['size']['string']}" == cat
    assert any(reason == "Scheduled" for reason, _ in events(plane, ns, "pod-with-cats"))

    # Upstream's 57-character rule for the generated name.
    long_pod = "p" + "o" * 80
    entry = "a-rather-long-claim-entry-name"
    apply(plane, pod(long_pod, templates={entry: "large-black-cat-claim-template"}),
          namespace=ns)
    long_claim = generated(plane, ns, long_pod, entry)
    prefix = generate_name_prefix(long_pod, entry)
    # 113 characters: each part keeps len * 57 // 113 (40 and 15), no trailing hyphen.
    assert prefix == "p" + "o" * 39 + "-" + entry[:15], prefix
    assert re.fullmatch(re.escape(prefix) + "[a-z0-9]{5}", long_claim["metadata"]["name"])

    # Deletion releases and deallocates: the generated claim goes, the shared one is free.
    force_delete(plane, ns, "pod-with-cats", long_pod)
    wait_for(lambda: name not in claims_in(plane, ns), timeout=60,
             what="the generated claim deleted")
    free = wait_for(lambda: (c := claim_obj(plane, ns, "small-white-cat-claim"))
                    and not (c.get("status") or {}).get("allocation") and c,
                    timeout=60, what="the shared claim deallocated")
    assert not (free.get("status") or {}).get("reservedFor")
    assert FINALIZER not in (free["metadata"].get("finalizers") or [])
    plane.kubectl("delete", "-n", ns, "-f", str(EXAMPLE / "resourceclaim.yaml"),
                  "--wait=false")
    plane.kubectl("delete", "-f", str(STATIC_SLICE), "--wait=false")


# --------------------------------------------------------------------------- policies


def test_a_shared_claim_serves_two_pods(control_plane: ControlPlane, operator: KdraProcess,
                                        ns: str, world: World) -> None:
    plane = control_plane
    world.publish({"devices": gpus(2)})
    apply(plane, claim("shared", request("gpu", world.cls)),
          pod("one", claims={"gpu": "shared"}), pod("two", claims={"gpu": "shared"}),
          namespace=ns)
    first, second = bound(plane, ns, "one"), bound(plane, ns, "two")
    assert first["spec"]["nodeName"] == second["spec"]["nodeName"] == world.node
    obj = claim_obj(plane, ns, "shared")
    assert len(results(obj)) == 1
    assert sorted(r["name"] for r in obj["status"]["reservedFor"]) == ["one", "two"]
    assert statuses(first) == {} == statuses(second)  # nothing generated, nothing recorded


def test_first_available_falls_back_to_the_next_choice(
        control_plane: ControlPlane, operator: KdraProcess, ns: str, world: World) -> None:
    plane = control_plane
    world.publish({"devices": [*gpus(1, "H100"), *gpus(1, "A100", start=1)]})
    model = f'device.attributes["{world.driver}"].model'
    apply(plane, template("big-or-small", {"name": "gpu", "firstAvailable": [
        {"name": "two-h100", "deviceClassName": world.cls, "count": 2,
         "selectors": [{"cel": {"expression": f'{model} == "H100"'}}]},
        {"name": "one-a100", "deviceClassName": world.cls,
         "selectors": [{"cel": {"expression": f'{model} == "A100"'}}]}]}),
        pod("fallback", templates={"gpu": "big-or-small"}), namespace=ns)
    bound(plane, ns, "fallback")
    (result,) = results(generated(plane, ns, "fallback", "gpu"))
    assert (result["request"], result["device"]) == ("gpu/one-a100", "gpu-1")


def test_a_partition_within_its_gpus_counters(control_plane: ControlPlane,
                                              operator: KdraProcess, ns: str,
                                              world: World) -> None:
    plane = control_plane
    counters = {"name": "gpu-0-counters", "counters": {"memory-slices": {"value": "8"}}}

    def device(name: str, profile: str, slices_used: str) -> dict[str, object]:
        return {"name": name, "attributes": {"profile": {"string": profile}},
                "consumesCounters": [{"counterSet": "gpu-0-counters",
                                      "counters": {"memory-slices": {"value": slices_used}}}]}

    world.publish({"sharedCounters": [counters]},
                  {"devices": [device("gpu-0", "whole", "8"), device("gpu-0-4g-a", "4g", "4"),
                               device("gpu-0-4g-b", "4g", "4")]})
    profile = f'device.attributes["{world.driver}"].profile'
    apply(plane, template("half", request("gpu", world.cls, selector=f'{profile} == "4g"')),
          template("whole", request("gpu", world.cls, selector=f'{profile} == "whole"')),
          pod("half-1", templates={"gpu": "half"}), pod("half-2", templates={"gpu": "half"}),
          namespace=ns)
    for name in ("half-1", "half-2"):
        bound(plane, ns, name)
    held = sorted(results(generated(plane, ns, p, "gpu"))[0]["device"]
                  for p in ("half-1", "half-2"))
    assert held == ["gpu-0-4g-a", "gpu-0-4g-b"]
    # The whole GPU would exceed its counters: it waits, and says why.
    apply(plane, pod("whole", templates={"gpu": "whole"}), namespace=ns)
    condition = wait_for(lambda: (c := pod_scheduled(get_pod(plane, ns, "whole")))
                         and c.get("status") == "False" and c, timeout=60,
                         what="the whole-GPU pod reported unschedulable")
    assert "shared counters of the matching devices used up" in condition["message"], condition
    force_delete(plane, ns, "half-1", "half-2")
    assert bound(plane, ns, "whole")["spec"]["nodeName"] == world.node


def test_a_gpu_shared_by_capacity(control_plane: ControlPlane, operator: KdraProcess,
                                  ns: str, world: World) -> None:
    plane = control_plane
    world.publish({"devices": [{"name": "gpu-0", "allowMultipleAllocations": True,
                                "capacity": {"memory": {"value": "80Gi"}}}]})
    share = request("gpu", world.cls, capacity={"requests": {"memory": "40Gi"}})
    apply(plane, template("share", share), *(pod(f"share-{i}", templates={"gpu": "share"})
                                             for i in (1, 2)), namespace=ns)
    shares = [results(generated(plane, ns, bound(plane, ns, f"share-{i}")["metadata"]["name"],
                                "gpu"))[0] for i in (1, 2)]
    assert {r["device"] for r in shares} == {"gpu-0"}
    assert all(r["consumedCapacity"] == {"memory": "40Gi"} for r in shares), shares
    assert shares[0]["shareID"] != shares[1]["shareID"]
    apply(plane, pod("share-3", templates={"gpu": "share"}), namespace=ns)
    wait_for(lambda: (c := pod_scheduled(get_pod(plane, ns, "share-3")))
             and c.get("status") == "False", timeout=60, what="a third share refused")
    assert not get_pod(plane, ns, "share-3")["spec"].get("nodeName")


def test_a_device_quota_refuses(control_plane: ControlPlane, operator: KdraProcess, ns: str,
                                world: World) -> None:
    plane = control_plane
    world.publish({"devices": gpus(4)})
    apply(plane, {"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
                  "metadata": {"name": "two-gpus"},
                  "spec": {"limits": [{"deviceClassName": world.cls, "devices": 2}]}},
          template("one", request("gpu", world.cls)),
          template("two", request("gpu", world.cls, count=2)), namespace=ns)
    apply(plane, pod("first", templates={"gpu": "one"}), namespace=ns)
    bound(plane, ns, "first")
    apply(plane, pod("greedy", templates={"gpu": "two"}), namespace=ns)
    condition = wait_for(lambda: (c := pod_scheduled(get_pod(plane, ns, "greedy")))
                         and c.get("reason") == "DeviceQuotaExceeded" and c, timeout=60,
                         what="the pod over quota held back")
    assert f"DeviceQuota {ns}/two-gpus" in condition["message"]
    assert "1 used + 2 asked > 2 hard" in condition["message"], condition
    assert not results(generated(plane, ns, "greedy", "gpu"))  # claim made, not allocated
    force_delete(plane, ns, "first")
    assert bound(plane, ns, "greedy")["spec"]["nodeName"] == world.node


def test_a_higher_priority_pod_preempts(control_plane: ControlPlane, operator: KdraProcess,
                                        ns: str, world: World) -> None:
    plane = control_plane
    low, high = unique("low"), unique("high")
    apply(plane, *({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": n}, "value": v} for n, v in ((low, 10), (high, 1000))))
    try:
        world.publish({"devices": gpus(1)})
        apply(plane, template("gpu", request("gpu", world.cls)),
              pod("victim", templates={"gpu": "gpu"}, priorityClassName=low,
                  terminationGracePeriodSeconds=30), namespace=ns)
        bound(plane, ns, "victim")
        with FakeKubelet(plane, ns):  # finishes the evicted pod's graceful deletion
            apply(plane, pod("urgent", templates={"gpu": "gpu"}, priorityClassName=high),
                  namespace=ns)
            urgent = bound(plane, ns, "urgent", timeout=120)
        assert urgent["spec"]["nodeName"] == world.node
        assert plane.kubectl("get", "pod", "victim", "-n", ns, check=False).returncode != 0
        assert any(r == "Preempted" for r, _ in events(plane, ns, "victim"))
        assert any(r == "Preempting" for r, _ in events(plane, ns, "urgent"))
        (result,) = results(generated(plane, ns, "urgent", "gpu"))
        assert result["device"] == "gpu-0"
    finally:
        plane.kubectl("delete", "priorityclass", low, high, "--wait=false", check=False)


def test_a_gang_binds_whole_or_holds_nothing(control_plane: ControlPlane,
                                             operator: KdraProcess, ns: str,
                                             world: World) -> None:
    """Gangs in the native flavour (issue 40; tests/e2e/test_gangs.py has the kdra flavour's):
    on 2 nodes x 2 GPUs, a gang of 3 pods x 2 GPUs holds nothing, one of 2 pods x 2 binds
    whole, one GPU per pod's claim on distinct devices."""
    plane = control_plane
    other = world.two_gpu_nodes("gang")

    def member(name: str, gang: str, size: int) -> dict[str, object]:
        body = pod(name, templates={"gpu": "two"})
        body["metadata"]["labels"] = {POD_GROUP_LABEL: gang}
        body["metadata"]["annotations"] = {MIN_MEMBER_ANNOTATION: str(size)}
        return body

    apply(plane, template("two", request("gpu", world.cls, count=2)),
          *(member(f"big-{i}", "big", 3) for i in range(3)),
          *(member(f"fit-{i}", "fit", 2) for i in range(2)), namespace=ns)
    placed = [bound(plane, ns, f"fit-{i}", timeout=120) for i in range(2)]
    assert {p["spec"]["nodeName"] for p in placed} == {world.node, other}
    # Once the fitting gang holds every GPU, the big one is told none of its pods fit.
    wait_for(lambda: (c := pod_scheduled(get_pod(plane, ns, "big-0"))) and
             "gang 'big' needs 3 pods (3 pending) placed together: at most 0 of them fit "
             "at once" in c.get("message", ""), timeout=60, what="the too-big gang reported")
    held = {name: obj for name, obj in claims_in(plane, ns).items() if results(obj)}
    assert sorted(obj["status"]["reservedFor"][0]["name"] for obj in held.values()) == [
        "fit-0", "fit-1"]
    assert not any(get_pod(plane, ns, f"big-{i}")["spec"].get("nodeName") for i in range(3))


def test_a_gang_sized_by_a_pod_group_binds_whole(control_plane: ControlPlane,
                                                 operator: KdraProcess, ns: str,
                                                 world: World) -> None:
    """A scheduler-plugins PodGroup sizes a gang in the native flavour too (its pods carry
    only the label): one member waits for the other, then both bind."""
    plane = control_plane
    other = world.two_gpu_nodes("pg")
    apply(plane, template("two", request("gpu", world.cls, count=2)),
          {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
           "metadata": {"name": "pg"}, "spec": {"minMember": 2}}, namespace=ns)

    def member(name: str) -> dict[str, object]:
        body = pod(name, templates={"gpu": "two"})
        body["metadata"]["labels"] = {POD_GROUP_LABEL: "pg"}
        return body

    apply(plane, member("pg-0"), namespace=ns)
    wait_for(lambda: (c := pod_scheduled(get_pod(plane, ns, "pg-0"))) and
             "gang 'pg' waits for its pods: 1 of 2 (minMember) pending" in c.get("message", ""),
             timeout=60, what="the first member waiting for the PodGroup's size")
    apply(plane, member("pg-1"), namespace=ns)
    placed = [bound(plane, ns, f"pg-{i}", timeout=120) for i in range(2)]
    assert {p["spec"]["nodeName"] for p in placed} == {world.node, other}


# --------------------------------------------------------------------------- hostile


def test_another_pods_generated_claim_is_refused(control_plane: ControlPlane,
                                                 operator: KdraProcess, ns: str,
                                                 world: World) -> None:
    plane = control_plane
    world.publish({"devices": gpus(2)})
    for role in ("system:aggregate-to-edit", "system:aggregate-to-view"):
        plane.kubectl("create", "rolebinding", f"mallory-{role.split(':')[1]}", "-n", ns,
                      f"--clusterrole={role}", "--user=mallory")
    apply(plane, template("gpu", request("gpu", world.cls)),
          pod("victim", templates={"gpu": "gpu"}), namespace=ns)
    bound(plane, ns, "victim")
    theirs = statuses(get_pod(plane, ns, "victim"))["gpu"]

    # The webhook: a namespace user naming the victim's claim is denied at creation.
    attempt = plane.kubectl("create", "-n", ns, "-f", "-", as_user="mallory", check=False,
                            input=json.dumps(pod("thief", claims={"gpu": theirs})))
    assert attempt.returncode != 0, attempt.stdout
    assert f"spec.resourceClaims[0].resourceClaimName: claim {theirs!r} was generated for " \
           "pod 'victim' and serves only that pod" in attempt.stderr, attempt.stderr

    # Stored anyway (the claim made to look generated only after the pod was admitted):
    # the scheduler refuses it, and the victim's devices stay the victim's.
    apply(plane, pod("late-thief", claims={"gpu": "decoy"}), namespace=ns)
    victim_uid = get_pod(plane, ns, "victim")["metadata"]["uid"]
    decoy = claim("decoy", request("gpu", world.cls))
    decoy["metadata"].update({"annotations": {POD_CLAIM_NAME: "gpu"}, "ownerReferences": [{
        "apiVersion": "v1", "kind": "Pod", "name": "victim", "uid": victim_uid,
        "controller": True}]})
    apply(plane, decoy, namespace=ns)
    condition = wait_for(lambda: (c := pod_scheduled(get_pod(plane, ns, "late-thief")))
                         and c.get("reason") == "InvalidPod" and c, timeout=60,
                         what="the scheduler refusing the stolen claim")
    assert "was generated for pod 'victim' and serves only that pod" in condition["message"]
    assert not get_pod(plane, ns, "late-thief")["spec"].get("nodeName")
    assert not results(claim_obj(plane, ns, "decoy"))


# --------------------------------------------------------------------------- the views


def plugin(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl kdra`` (the plugin's module) with the admin kubeconfig, the flavour left to
    the plugin (auto)."""
    return subprocess.run([sys.executable, "-m", "kdra.cli.kubectl", *args, "--kubeconfig",
                           str(plane.kubeconfig)], capture_output=True, text=True)


def test_kubectl_kdra_and_kdra_check_read_the_native_objects(
        control_plane: ControlPlane, operator: KdraProcess, ns: str, world: World) -> None:
    plane = control_plane
    world.publish({"devices": gpus(2)})
    apply(plane, template("gpu", request("gpu", world.cls)),
          template("three", request("gpu", world.cls, count=3)),
          pod("held", templates={"gpu": "gpu"}), pod("waiting", templates={"gpu": "three"}),
          namespace=ns)
    bound(plane, ns, "held")
    held = statuses(get_pod(plane, ns, "held"))["gpu"]
    # The session's API server serves both flavours and kdra's kind has slices (other
    # modules' agents): auto reads kdra's there, so this reads native explicitly, and the
    # choice of auto is the unit tests' (test_flavours.py).
    why = plugin(plane, "why", "held", "-n", ns, "-o", "json", "--flavour", "native")
    assert why.returncode == 0, why.stderr
    assert json.loads(why.stdout)["verdict"] == "bound"
    waiting = plugin(plane, "why", "waiting", "-n", ns, "--flavour", "native")
    assert waiting.returncode == 0, waiting.stderr
    assert "too few devices of class" in waiting.stdout, waiting.stdout  # wants 3 of 2
    assert "(needs 3)" in waiting.stdout, waiting.stdout
    free = json.loads(plugin(plane, "free", "-o", "json", "--flavour", "native",
                             "--class", world.cls).stdout)
    assert [(p["node"], p["total"], p["allocated"], p["free"]) for p in free["pools"]] == [
        (world.node, 2, 1, 1)]
    described = plugin(plane, "describe", "-n", ns, "-o", "json", "--flavour", "native")
    assert described.returncode == 0 and held in described.stdout, described.stderr
    # The operator's gauges count these devices too: the world's slices are no agent's (a
    # driver kdra does not run), read and allocated from, never collected.
    samples = wait_for(lambda: [line for line in operator.metrics().splitlines()
                                if line.startswith("kdra_devices{")
                                and f'node="{world.node}"' in line
                                and 'state="allocated"' in line], timeout=30,
                       what="the operator's kdra_devices gauge")
    assert max(float(line.split()[-1]) for line in samples) == 1, samples
    assert 'kdra_api_flavour{flavour="native"} 1.0' in operator.metrics()
    # Without a flavour the tool reads the native kinds unless kdra's kind holds slices
    # (other modules' kdra-flavour agents, when they ran first in this session): there it
    # finds the pod without kdra's claims annotation.
    kdra_slices = get_json(plane, f"resourceslices.{GROUP}")["items"]
    auto = plugin(plane, "why", "held", "-n", ns, "-o", "json")
    assert auto.returncode == 0, auto.stderr
    assert json.loads(auto.stdout)["verdict"] == ("not-kdra" if kdra_slices else "bound")
    checked = subprocess.run([sys.executable, "-m", "kdra", "check", "--kubeconfig",
                              str(plane.kubeconfig), "--flavour", "native", "-o", "json"],
                             capture_output=True, text=True)
    ours = [v for v in json.loads(checked.stdout) if ns in v["message"]]
    assert ours == [], ours  # this namespace's pods, claims and reservations hold


def test_a_claim_kdra_scheduler_cannot_serve_is_stored_with_a_warning(
        control_plane: ControlPlane, operator: KdraProcess, ns: str, world: World) -> None:
    """The API server validates its own kinds; kdra's webhook only warns (never refuses)
    where kdra-scheduler could not serve an object as written — here 40 devices in one claim,
    more than one allocation holds, which upstream's validation lets through."""
    plane = control_plane
    # A namespace user (kdra's own identity, which the operator here shares with the admin,
    # is not sent to the webhook: its generated claims come from checked templates).
    plane.kubectl("create", "rolebinding", "alice-edit", "-n", ns, "--clusterrole=edit",
                  "--user=alice")
    big = claim("forty", request("a", world.cls, count=20), request("b", world.cls, count=20))
    created = plane.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(big),
                            as_user="alice")
    assert "Warning: kdra-scheduler cannot serve this ResourceClaim as written: " \
           "spec.devices.requests: the requests ask for 40 devices in total" in created.stderr, \
        created.stderr
    assert claim_obj(plane, ns, "forty")["spec"]["devices"]["requests"][1]["name"] == "b"
    fine = plane.kubectl("create", "-n", ns, "-f", "-", as_user="alice",
                         input=json.dumps(claim("one", request("gpu", world.cls))))
    assert "Warning" not in fine.stderr, fine.stderr

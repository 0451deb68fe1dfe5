"""The structured allocator on one node: one table, one case per rule (upstream
``k8s.io/dynamic-resource-allocation/structured``).

Each case lists the cluster (slices, classes, allocated claims, in-flight devices), the pod's
unallocated claims, and what ``allocate`` must do: the devices per claim (``"request:device"``,
or ``"request:pool/device"`` outside the default pool ``worker-1``), ``None`` (does not fit),
or an AllocationError matching a pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from kdra.dra.allocator import DeviceId, NodeInfo, Snapshot, allocate
from kdra.dra.errors import AllocationError, CelCompileError, CelRuntimeError
from kdra.dra.models import AllocationResult, DeviceClass, ResourceClaim, ResourceSlice
from tests.unit.builders import (
    CLASS,
    DRIVER,
    NODE,
    allocated,
    claim_with,
    class_with,
    device,
    devices,
    gpu_class,
    match,
    node,
    request,
    slice_with,
    version,
)

GPU = f'device.attributes["{DRIVER}"]'


@dataclass
class Case:
    id: str
    claims: list[ResourceClaim]
    slices: list[ResourceSlice] = field(default_factory=lambda: [slice_with(*devices(2))])
    classes: list[DeviceClass] = field(default_factory=lambda: [gpu_class()])
    allocated: list[ResourceClaim] = field(default_factory=list)
    in_flight: set[DeviceId] = field(default_factory=set)
    node: NodeInfo = field(default_factory=node)
    expect: list[list[str]] | None = None
    error: str | None = None

    def __str__(self) -> str:
        return self.id


def picks(results: list[AllocationResult]) -> list[list[str]]:
    out = []
    for result in results:
        out.append([
            f"{r.request}:{r.device}" if r.pool == NODE else f"{r.request}:{r.pool}/{r.device}"
            for r in result.devices.results
        ])
    return out


# --------------------------------------------------------------------------- the seed's cats

CAT_DRIVER = "resource-driver.example.com"
CAT_CLASS = "resource.example.com"
CAT = f'device.attributes["{CAT_DRIVER}"]'
cat_class = class_with(CAT_CLASS, f'device.driver == "{CAT_DRIVER}"')
cats = slice_with(
    device("large-black-cat", color="black", size="large"),
    device("small-black-cat", color="black", size="small"),
    device("small-white-cat", color="white", size="small"),
    device("large-white-cat", color="white", size="large"),
    driver=CAT_DRIVER,
)
small_white = claim_with(
    request("req-0", f'{CAT}.color == "white" && {CAT}.size == "small"', cls=CAT_CLASS),
    name="small-white-cat-claim",
)
large_black = claim_with(
    request("req-0", f'{CAT}.color == "black" && {CAT}.size == "large"', cls=CAT_CLASS),
    name="pod-with-cats-cat-1-x7k2p",
)

CASES = [
    Case("seed: pod-with-cats gets both cats",
         [small_white, large_black], [cats], [cat_class],
         expect=[["req-0:small-white-cat"], ["req-0:large-black-cat"]]),
    Case("seed: the small white cat is taken by another pod",
         [small_white], [cats], [cat_class],
         allocated=[allocated(claim_with(request("req-0", cls=CAT_CLASS), name="other"),
                              ("req-0", "small-white-cat"), driver=CAT_DRIVER)]),
    # ---------------------------------------------------------------- counts, in use
    Case("one device", [claim_with()], expect=[["gpu:gpu-0"]]),
    Case("count 2", [claim_with(request(count=2))], expect=[["gpu:gpu-0", "gpu:gpu-1"]]),
    Case("count beyond the node's devices does not fit", [claim_with(request(count=3))]),
    Case("no slices at all does not fit", [claim_with()], slices=[]),
    Case("allocated devices are in use",
         [claim_with()], allocated=[allocated(claim_with(name="old"), ("gpu", "gpu-0"))],
         expect=[["gpu:gpu-1"]]),
    Case("all devices in use does not fit",
         [claim_with()],
         allocated=[allocated(claim_with(request(count=2), name="old"),
                              ("gpu", "gpu-0"), ("gpu", "gpu-1"))]),
    Case("in-flight allocations are in use",
         [claim_with()], in_flight={DeviceId(DRIVER, NODE, "gpu-0")}, expect=[["gpu:gpu-1"]]),
    Case("two claims of one pod never share a device",
         [claim_with(name="a"), claim_with(name="b")], expect=[["gpu:gpu-0"], ["gpu:gpu-1"]]),
    Case("all or nothing across a pod's claims",
         [claim_with(name="a"), claim_with(name="b")], slices=[slice_with(*devices(1))]),
    Case("two requests of one claim get different devices",
         [claim_with(request("a"), request("b"))], expect=[["a:gpu-0", "b:gpu-1"]]),
    Case("class selectors and request selectors both apply",
         [claim_with(request("gpu", f"{GPU}.index != 1"))],
         slices=[slice_with(device("gpu-0", productName="A100", index=0),
                            device("gpu-1", productName="H100", index=1),
                            device("gpu-2", productName="H100", index=2))],
         classes=[gpu_class(f'{GPU}.productName == "H100"')],
         expect=[["gpu:gpu-2"]]),
    Case("class selector excludes another driver's devices",
         [claim_with()], slices=[slice_with(*devices(2), driver="nic.kdra.dev")]),
    Case("missing device class is an error",
         [claim_with(request("gpu", cls="nope.kdra.dev"))],
         error=r"^device class nope.kdra.dev not found \(request gpu of claim default/claim\)$"),
    # ---------------------------------------------------------------- node scope
    Case("another node's slice is invisible", [claim_with()],
         slices=[slice_with(*devices(2), node="worker-2")]),
    Case("allNodes slice is visible everywhere", [claim_with()],
         slices=[slice_with(*devices(1), all_nodes=True, pool="shared")],
         node=node("anywhere"), expect=[["gpu:shared/gpu-0"]]),
    Case("nodeSelector slice visible on a matching node", [claim_with()],
         slices=[slice_with(*devices(1), pool="rack-a", node_selector={"matchExpressions": [
             {"key": "rack", "operator": "In", "values": ["a"]}]})],
         node=node("worker-1", rack="a"), expect=[["gpu:rack-a/gpu-0"]]),
    Case("nodeSelector slice invisible on other nodes", [claim_with()],
         slices=[slice_with(*devices(1), pool="rack-a", node_selector={"matchExpressions": [
             {"key": "rack", "operator": "In", "values": ["a"]}]})],
         node=node("worker-1", rack="b")),
    Case("nodeSelector slice with matchFields on the node name", [claim_with()],
         slices=[slice_with(*devices(1), pool="p", node_selector={"matchFields": [
             {"key": "metadata.name", "operator": "In", "values": ["worker-1"]}]})],
         expect=[["gpu:p/gpu-0"]]),
    # ---------------------------------------------------------------- pools
    Case("only the newest generation counts",
         [claim_with(request(count=2))],
         slices=[slice_with(device("old-0"), device("old-1"), generation=1, name="a"),
                 slice_with(device("new-0"), device("new-1"), generation=2, name="b")],
         expect=[["gpu:new-0", "gpu:new-1"]]),
    Case("older generation ignored whatever the slice order",
         [claim_with(request(count=2))],
         slices=[slice_with(device("new-0"), device("new-1"), generation=5, name="a"),
                 slice_with(device("old-0"), device("old-1"), generation=4, name="b")],
         expect=[["gpu:new-0", "gpu:new-1"]]),
    # Issue 39: as upstream 1.36 (no-allocation-from-incomplete-pools), an incomplete pool
    # offers no device (1.31 allocated from the slices it had).
    Case("incomplete pool offers no device (upstream: no-allocation-from-incomplete-pools)",
         [claim_with()], slices=[slice_with(*devices(1), count=2)]),
    Case("pools are walked by name, slices by name, devices as listed",
         [claim_with(request(count=3))],
         slices=[slice_with(device("b-0"), pool="pool-b"),
                 slice_with(device("a-1"), name="s2", pool="pool-a", count=2),
                 slice_with(device("a-0"), name="s1", pool="pool-a", count=2)],
         expect=[["gpu:pool-a/a-0", "gpu:pool-a/a-1", "gpu:pool-b/b-0"]]),
    # Issue 39: as upstream (duplicate-slice), an invalid pool offers no device and is the
    # node's error when nothing fits.
    Case("invalid pool (duplicate device name) is the error when nothing fits",
         [claim_with()],
         slices=[slice_with(device("gpu-0"), name="s1", count=2),
                 slice_with(device("gpu-0"), name="s2", count=2)],
         error=r"^invalid resource pools were encountered: resource pool gpu.kdra.dev/worker-1 "
               r"is invalid: device name gpu-0 appears more than once$"),
    Case("invalid pool not reached when an earlier pool serves the claim",
         [claim_with()],
         slices=[slice_with(device("gpu-0"), pool="a"),
                 slice_with(device("gpu-0"), name="s1", pool="b", count=2),
                 slice_with(device("gpu-0"), name="s2", pool="b", count=2)],
         expect=[["gpu:a/gpu-0"]]),
    Case("invalid pool without matching devices is ignored",
         [claim_with()],
         slices=[slice_with(device("nic-0"), name="n1", pool="a", driver="nic.kdra.dev"),
                 slice_with(device("nic-0"), name="n2", pool="a", driver="nic.kdra.dev"),
                 slice_with(device("gpu-0"), pool="b")],
         expect=[["gpu:b/gpu-0"]]),
    # ---------------------------------------------------------------- All
    Case("All takes every matching device",
         [claim_with(request(all=True))], slices=[slice_with(*devices(3))],
         expect=[["gpu:gpu-0", "gpu:gpu-1", "gpu:gpu-2"]]),
    Case("All with a request selector takes the matching ones",
         [claim_with(request("gpu", f"{GPU}.index % 2 == 0", all=True))],
         slices=[slice_with(*devices(4))], expect=[["gpu:gpu-0", "gpu:gpu-2"]]),
    Case("All with one matching device in use does not fit",
         [claim_with(request(all=True))],
         allocated=[allocated(claim_with(name="old"), ("gpu", "gpu-1"))]),
    Case("All with zero matching devices does not fit (1.33+)",
         [claim_with(request("gpu", f"{GPU}.index > 10", all=True))]),
    Case("All meeting an incomplete pool is an error",
         [claim_with(request(all=True))], slices=[slice_with(*devices(2), count=2)],
         error=r"^claim default/claim, request gpu asks for all devices, but resource pool "
               r"gpu.kdra.dev/worker-1 is incomplete"),
    # Issue 39: upstream's All fails on any incomplete pool the node sees, matching or not.
    Case("All fails on an incomplete pool even without matching devices",
         [claim_with(request(all=True))],
         slices=[slice_with(*devices(1)),
                 slice_with(device("nic-0"), driver="nic.kdra.dev", count=3)],
         error=r"asks for all devices, but resource pool nic.kdra.dev/worker-1 is incomplete"),
    Case("All meeting an invalid pool is an error",
         [claim_with(request(all=True))],
         slices=[slice_with(device("gpu-0"), name="s1", count=2),
                 slice_with(device("gpu-0"), name="s2", count=2)],
         error=r"resource pool gpu.kdra.dev/worker-1 is invalid: device name gpu-0"),
    Case("All devices violating the claim's constraint is an error",
         [claim_with(request(all=True), constraints=[match(f"{DRIVER}/pcieRoot")])],
         slices=[slice_with(device("gpu-0", pcieRoot="a"), device("gpu-1", pcieRoot="b"))],
         error=r"asks for all devices, but device gpu.kdra.dev/worker-1/gpu-1 does not "
               r"satisfy matchAttribute gpu.kdra.dev/pcieRoot"),
    Case("All beyond 32 devices is an error",
         [claim_with(request(all=True))],
         slices=[slice_with(*devices(20), name="s1", count=2),
                 slice_with(*devices(13, prefix="more"), name="s2", count=2)],
         error=r"^claim default/claim asks for 33 devices, more than the limit of 32 per claim$"),
    # ---------------------------------------------------------------- limits
    Case("more than 32 devices by count is an error",
         [claim_with(request(count=33))],
         error=r"^claim default/claim asks for 33 devices, more than the limit of 32 per claim$"),
    Case("more than 32 devices over several requests is an error",
         [claim_with(request("a", count=20), request("b", count=13))],
         error=r"asks for 33 devices"),
    Case("exactly 32 devices is fine",
         [claim_with(request(count=32))],
         slices=[slice_with(*devices(32))],
         expect=[[f"gpu:gpu-{i}" for i in range(32)]]),
    # ---------------------------------------------------------------- matchAttribute
    Case("matchAttribute on a version needs backtracking (first device has the odd value)",
         [claim_with(request(count=2), constraints=[match(f"{DRIVER}/driverVersion")])],
         slices=[slice_with(device("gpu-0", driverVersion=version("1.0.0")),
                            device("gpu-1", driverVersion=version("2.0.0")),
                            device("gpu-2", driverVersion=version("2.0.0")))],
         expect=[["gpu:gpu-1", "gpu:gpu-2"]]),
    Case("matchAttribute: a device lacking the attribute fails the constraint",
         [claim_with(request(count=2), constraints=[match(f"{DRIVER}/pcieRoot")])],
         slices=[slice_with(device("gpu-0"), device("gpu-1", pcieRoot="a"),
                            device("gpu-2", pcieRoot="a"))],
         expect=[["gpu:gpu-1", "gpu:gpu-2"]]),
    Case("matchAttribute: no two devices agree does not fit",
         [claim_with(request(count=2), constraints=[match(f"{DRIVER}/pcieRoot")])],
         slices=[slice_with(device("gpu-0", pcieRoot="a"), device("gpu-1", pcieRoot="b"),
                            device("gpu-2"))]),
    Case("matchAttribute: equal kind and value (int 1 is not string \"1\")",
         [claim_with(request(count=2), constraints=[match(f"{DRIVER}/numa")])],
         slices=[slice_with(device("gpu-0", numa=1), device("gpu-1", numa="1"),
                            device("gpu-2", numa=1))],
         expect=[["gpu:gpu-0", "gpu:gpu-2"]]),
    Case("matchAttribute across two requests",
         [claim_with(request("a"), request("b"), constraints=[match(f"{DRIVER}/pcieRoot")])],
         slices=[slice_with(device("gpu-0", pcieRoot="x"), device("gpu-1", pcieRoot="y"),
                            device("gpu-2", pcieRoot="x"))],
         expect=[["a:gpu-0", "b:gpu-2"]]),
    Case("matchAttribute limited to the listed requests",
         [claim_with(request("a"), request("b"), request("c"),
                     constraints=[match(f"{DRIVER}/pcieRoot", "a", "c")])],
         slices=[slice_with(device("gpu-0", pcieRoot="x"), device("gpu-1", pcieRoot="y"),
                            device("gpu-2", pcieRoot="x"))],
         expect=[["a:gpu-0", "b:gpu-1", "c:gpu-2"]]),
    Case("matchAttribute backtracks into the previous request",
         [claim_with(request("a"), request("b", f'{GPU}.kind == "big"'),
                     constraints=[match(f"{DRIVER}/pcieRoot")])],
         slices=[slice_with(device("gpu-0", pcieRoot="x", kind="small"),
                            device("gpu-1", pcieRoot="y", kind="small"),
                            device("gpu-2", pcieRoot="y", kind="big"))],
         expect=[["a:gpu-1", "b:gpu-2"]]),
    Case("matchAttribute finds a fully qualified attribute of another domain",
         [claim_with(request(count=2), constraints=[match("topology.kdra.dev/zone")])],
         slices=[slice_with(device("gpu-0", {"topology.kdra.dev/zone": "z1"}),
                            device("gpu-1", {"topology.kdra.dev/zone": "z2"}),
                            device("gpu-2", {"topology.kdra.dev/zone": "z2"}))],
         expect=[["gpu:gpu-1", "gpu:gpu-2"]]),
    Case("matchAttribute: a bare name belongs to the driver's domain only",
         [claim_with(request(count=2), constraints=[match("topology.kdra.dev/zone")])],
         slices=[slice_with(device("gpu-0", zone="z1"), device("gpu-1", zone="z1"))]),
    Case("matchAttribute: qualified name with the driver's domain stored qualified",
         [claim_with(request(count=2), constraints=[match(f"{DRIVER}/pcieRoot")])],
         slices=[slice_with(device("gpu-0", {f"{DRIVER}/pcieRoot": "a"}),
                            device("gpu-1", pcieRoot="a"))],
         expect=[["gpu:gpu-0", "gpu:gpu-1"]]),
    Case("constraints are per claim",
         [claim_with(request(count=2), name="a", constraints=[match(f"{DRIVER}/pcieRoot")]),
          claim_with(name="b")],
         slices=[slice_with(device("gpu-0", pcieRoot="x"), device("gpu-1", pcieRoot="y"),
                            device("gpu-2", pcieRoot="y"))],
         expect=[["gpu:gpu-1", "gpu:gpu-2"], ["gpu:gpu-0"]]),
    # ---------------------------------------------------------------- adminAccess
    Case("adminAccess may take a device in use",
         [claim_with(request(admin=True))],
         allocated=[allocated(claim_with(request(count=2), name="old"),
                              ("gpu", "gpu-0"), ("gpu", "gpu-1"))],
         expect=[["gpu:gpu-0"]]),
    Case("adminAccess results do not count as in use",
         [claim_with()],
         allocated=[allocated(claim_with(request(admin=True), name="monitor"),
                              ("gpu", "gpu-0"))],
         expect=[["gpu:gpu-0"]]),
    Case("adminAccess never takes one device twice for the same claim",
         [claim_with(request(admin=True, count=2))], expect=[["gpu:gpu-0", "gpu:gpu-1"]]),
    Case("adminAccess devices of this pod are taken for the pod's other claims",
         [claim_with(request(admin=True), name="a"), claim_with(name="b")],
         expect=[["gpu:gpu-0"], ["gpu:gpu-1"]]),
    # ---------------------------------------------------------------- CEL
    Case("selector with unqualified attribute names (driver domain)",
         [claim_with(request("gpu", f'{GPU}.productName == "H100"'))],
         slices=[slice_with(device("gpu-0", productName="A100"),
                            device("gpu-1", productName="H100"))],
         expect=[["gpu:gpu-1"]]),
    Case("selector comparing semantic versions",
         [claim_with(request("gpu", f'{GPU}.driverVersion.isGreaterThan(semver("550.0.0"))'))],
         slices=[slice_with(device("gpu-0", driverVersion=version("535.104.5")),
                            device("gpu-1", driverVersion=version("550.54.15")))],
         expect=[["gpu:gpu-1"]]),
    Case("selector with semver equality",
         [claim_with(request("gpu", f'{GPU}.driverVersion == semver("550.54.15")'))],
         slices=[slice_with(device("gpu-0", driverVersion=version("535.104.5")),
                            device("gpu-1", driverVersion=version("550.54.15")))],
         expect=[["gpu:gpu-1"]]),
    Case("selector on another domain's attribute",
         [claim_with(request("gpu", 'device.attributes["topology.kdra.dev"].zone == "z2"'))],
         slices=[slice_with(device("gpu-0", {"topology.kdra.dev/zone": "z1"}),
                            device("gpu-1", {"topology.kdra.dev/zone": "z2"}))],
         expect=[["gpu:gpu-1"]]),
    Case("unknown domain is an empty map, not an error",
         [claim_with(request("gpu", '"zone" in device.attributes["nowhere.dev"]'))]),
    Case("CEL runtime error (missing attribute) is an AllocationError",
         [claim_with(request("gpu", f'{GPU}.productName == "H100"'))],
         slices=[slice_with(device("gpu-0"), device("gpu-1", productName="H100"))],
         error=r"^claim default/claim, request gpu: selector #0 on device "
               r"gpu.kdra.dev/worker-1/gpu-0: CEL runtime error: .*"
               r"\(expression: .*productName.*\)$"),
    Case("CEL runtime error on a device the search never reaches is no error",
         [claim_with(request("gpu", f'{GPU}.productName == "H100"'))],
         slices=[slice_with(device("gpu-0", productName="H100"), device("gpu-1"))],
         expect=[["gpu:gpu-0"]]),
    Case("CEL runtime error on a device in use is no error",
         [claim_with(request("gpu", f'{GPU}.productName == "H100"'))],
         slices=[slice_with(device("gpu-0"), device("gpu-1", productName="H100"))],
         allocated=[allocated(claim_with(name="old"), ("gpu", "gpu-0"))],
         expect=[["gpu:gpu-1"]]),
    Case("selector that does not compile is an AllocationError",
         [claim_with(request("gpu", "device.driver == "))],
         error=r"^claim default/claim, request gpu: selector #0: CEL expression does not "
               r"compile: "),
    Case("class selector that does not compile names the class",
         [claim_with()], classes=[class_with(CLASS, "device.driver ==== 1")],
         error=r"^device class gpu.kdra.dev \(used by request gpu of claim default/claim\): "
               r"selector #0: CEL expression does not compile: "),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_allocate(case: Case) -> None:
    snapshot = Snapshot.build(case.slices, case.classes, case.allocated)
    if case.error is not None:
        with pytest.raises(AllocationError) as raised:
            allocate(case.claims, snapshot, case.node, case.in_flight)
        assert re.search(case.error, str(raised.value)), str(raised.value)
        return
    results = allocate(case.claims, snapshot, case.node, case.in_flight)
    if case.expect is None:
        assert results is None
    else:
        assert results is not None
        assert picks(results) == case.expect


def test_case_ids_are_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))


def test_runtime_error_is_chained_and_names_everything() -> None:
    snapshot = Snapshot.build([slice_with(device("gpu-0"))], [gpu_class()])
    expression = f'{GPU}.productName == "H100"'
    with pytest.raises(AllocationError) as raised:
        allocate([claim_with(request("gpu", expression), name="train")], snapshot, node())
    message = str(raised.value)
    assert isinstance(raised.value.__cause__, CelRuntimeError)
    for part in ("default/train", "request gpu", "productName", "gpu.kdra.dev/worker-1/gpu-0"):
        assert part in message


def test_compile_error_is_chained() -> None:
    snapshot = Snapshot.build([slice_with(device("gpu-0"))], [gpu_class()])
    with pytest.raises(AllocationError) as raised:
        allocate([claim_with(request("gpu", "device.("))], snapshot, node())
    assert isinstance(raised.value.__cause__, CelCompileError)


def test_results_are_models_ready_to_write() -> None:
    snapshot = Snapshot.build([slice_with(*devices(2))], [gpu_class()])
    [result] = allocate([claim_with(request(count=2))], snapshot, node()) or []
    assert [(r.request, r.driver, r.pool, r.device) for r in result.devices.results] == [
        ("gpu", DRIVER, NODE, "gpu-0"), ("gpu", DRIVER, NODE, "gpu-1")]


def test_allocate_does_not_mark_devices_in_use() -> None:
    """The caller persists (or assumes): allocating twice gives the same answer."""
    snapshot = Snapshot.build([slice_with(*devices(2))], [gpu_class()])
    first = allocate([claim_with()], snapshot, node())
    second = allocate([claim_with()], snapshot, node())
    assert first == second
    assert not snapshot.devices_in_use

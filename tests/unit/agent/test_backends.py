"""The device-backend seam (issue 37, point 4): the registry (``--backends``), one agent's set
of backends, and a vendor added in one module (tests/fpga_backend.py) that the agent's own
rooms — preparer, health loop, exposure policy — serve without knowing it."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import pytest

from kdra.agent.backends.nvml import NvmlBackend
from kdra.agent.backends.registry import BackendSettingsError, backend_names, make_backends
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.core.backend import (
    BackendBase,
    Backends,
    DeviceKey,
    DiscoveryError,
)
from kdra.agent.core.checkpoint import Checkpoint, ClaimEntry, ClaimRef, PreparedDevice
from kdra.agent.core.health import Observation
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice
from kdra.agent.core.nodeprep import Result, prepared_devices
from kdra.agent.exposure import ExposurePolicy
from kdra.agent.node_health import NodeHealth, health_sources
from kdra.agent.nri.messages import Container, PodSandbox
from kdra.agent.runner import AgentRunner
from kdra.agent.settings import AgentSettings
from tests import fpga_backend
from tests.fpga_backend import FpgaBackend, fpga_uuid
from tests.unit.agent.prepare_helpers import NODE, UID, Node, claim_obj, ready, sync

FPGA = "tests.fpga_backend:FpgaBackend"
GPU = "gpu.kdra.dev"


class NotABackend:
    def __init__(self, settings: AgentSettings) -> None:
        self.name = "nothing"


class Impostor(BackendBase):
    name = "nvml"

    def __init__(self, settings: AgentSettings) -> None:
        pass


def exploding(settings: AgentSettings) -> BackendBase:
    raise RuntimeError("no FPGA card")


# --------------------------------------------------------------------------- the registry


@pytest.mark.parametrize(("settings", "nodes", "names"), [
    ({}, ["n"], ["nvml"]),
    ({"inventory": "i.yaml"}, ["n"], ["fake-gpu", "generic"]),
    ({"inventory": "i.yaml"}, ["a", "b"], ["fake-gpu", "generic"]),
    ({"inventory": "i.yaml", "backends": f"generic,{FPGA}"}, ["n"], ["generic", FPGA]),
    ({"backends": f" nvml  {FPGA} "}, ["n"], ["nvml", FPGA]),
], ids=["default: NVML", "inventory: its two", "simulated", "a vendor with cats", "spaces"])
def test_which_backends(settings: dict[str, str], nodes: list[str], names: list[str]) -> None:
    assert backend_names(AgentSettings(**settings), nodes) == names


@pytest.mark.parametrize(("settings", "nodes", "words"), [
    ({"backends": "cuda"}, ["n"], "'cuda' is neither a built-in backend (nvml, fake-gpu, "
                                  "generic) nor 'module:Class'"),
    ({"backends": "tests/fpga.py:FpgaBackend"}, ["n"], "is neither a built-in backend"),
    ({"backends": "fake-gpu"}, ["n"], "fake-gpu needs the fake inventory file: set "
                                      "--inventory"),
    ({"inventory": "i.yaml", "backends": "nvml"}, ["n"],
     "--inventory i.yaml is set but no backend reads it"),
    ({}, ["a", "b"], "--simulate-nodes needs --inventory"),
    ({"inventory": "i.yaml", "backends": "generic nvml"}, ["a", "b"],
     "nvml cannot serve simulated nodes"),
    ({"inventory": "i.yaml", "backends": "generic,fake-gpu,generic"}, ["n"],
     "generic named twice"),
], ids=["unknown", "a path", "no inventory", "inventory unread", "simulated NVML",
        "simulated NVML listed", "twice"])
def test_backend_settings_are_checked(settings: dict[str, str], nodes: list[str],
                                      words: str) -> None:
    with pytest.raises(BackendSettingsError) as caught:
        make_backends(AgentSettings(**settings), nodes)
    assert words in str(caught.value)


@pytest.mark.parametrize(("spec", "words"), [
    ("tests.no_such_vendor:X", "module 'tests.no_such_vendor' does not import: "
                               "ModuleNotFoundError"),
    ("tests.fpga_backend:Missing", "has no class or function 'Missing'"),
    ("tests.fpga_backend:DRIVER", "has no class or function 'DRIVER'"),
    ("tests.unit.agent.test_backends:NotABackend", "NotABackend is not a device backend"),
    ("tests.unit.agent.test_backends:Impostor", "its name 'nvml' must be a DNS label other "
                                                "than nvml, fake-gpu, generic"),
    ("tests.unit.agent.test_backends:exploding", "building the backend failed: RuntimeError: "
                                                 "no FPGA card"),
])
def test_a_vendor_module_that_cannot_serve_stops_the_agent(spec: str, words: str) -> None:
    with pytest.raises(BackendSettingsError) as caught:
        make_backends(AgentSettings(backends=spec), ["n"])
    assert words in str(caught.value)


def test_a_vendor_backend_is_loaded_by_module_and_class(tmp_path: Path) -> None:
    backends = make_backends(AgentSettings(backends=f"nvml,{FPGA}",
                                           state_dir=str(tmp_path)), ["n"])
    assert backends.names == ("nvml", "fpga")
    assert isinstance(backends.named("nvml"), NvmlBackend)
    assert isinstance(backends.named("fpga"), FpgaBackend)
    assert backends.drivers == (GPU,)  # NVML's pool is published even without GPUs
    assert backends.health_blocks
    assert backends.signature() is None  # NVML: always ask again


def test_nvmls_empty_pool_is_published_by_the_node(tmp_path: Path) -> None:
    settings = AgentSettings(state_dir=str(tmp_path), cdi_dir=str(tmp_path / "cdi"))
    runner = AgentRunner(None, settings, ["n"],  # type: ignore[arg-type]
                         make_backends(settings, ["n"]))
    assert runner.nodes["n"].inventory == Inventory()
    assert runner.nodes["n"].drivers == (GPU,)



def test_the_nodes_drivers_follow_its_inventory_and_checkpoint(tmp_path: Path) -> None:
    # Computed once per inventory and checkpoint (issue 42): each new value is seen at once.
    settings = AgentSettings(state_dir=str(tmp_path), cdi_dir=str(tmp_path / "cdi"))
    runner = AgentRunner(None, settings, ["n"],  # type: ignore[arg-type]
                         make_backends(settings, ["n"]))
    agent = runner.nodes["n"]
    jam = "jam.example.com"
    agent.inventory = Inventory((InventoryDevice(jam, "jam-0"),))
    assert agent.drivers == (GPU, jam) and agent.claim_drivers == (GPU, jam)
    held = ClaimEntry(ClaimRef(UID, "ns", "c"), "prepared",
                      (PreparedDevice("r", jam, "n", "jam-0"),), ())
    agent.preparer.checkpoint = agent.preparer.checkpoint.with_entry(held)
    agent.inventory = Inventory()  # the driver is gone; its prepared claim is still served
    assert agent.drivers == (GPU,) and agent.claim_drivers == (GPU, jam)
    agent.preparer.checkpoint = agent.preparer.checkpoint.without(UID)
    assert agent.claim_drivers == (GPU,)

# --------------------------------------------------------------------------- one agent's set


def test_discover_tags_every_device_and_refuses_one_given_twice(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("gpus: ['1 x L4-24GB']\n"
                         "devices: [{name: kitten-0, driver: cats.example.com}]\n")
    backends = make_backends(AgentSettings(inventory=str(inventory), state_dir=str(tmp_path),
                                           backends=f"fake-gpu generic {FPGA}"), ["n"])
    found = backends.discover("n")
    assert [(d.backend, d.driver, d.name) for d in found.devices] == [
        ("fake-gpu", GPU, "gpu-0"), ("generic", "cats.example.com", "kitten-0"),
        *[("fpga", fpga_backend.DRIVER, f"fpga-{i}") for i in range(fpga_backend.COUNT)]]
    assert found.device(fpga_backend.DRIVER, "fpga-2").attribute("uuid") == fpga_uuid("n", 2)

    inventory.write_text("devices: [{name: fpga-1, driver: fpga.example.com}]\n")
    with pytest.raises(DiscoveryError) as caught:
        backends.discover("n")
    assert ("device 'fpga-1' of driver 'fpga.example.com' is given by backends 'generic' "
            "and 'fpga'") in str(caught.value)


class Lister(BackendBase):
    """Lists its devices in one variable; ``empty`` where the container set it itself."""

    def __init__(self, name: str, variable: str) -> None:
        self.name = name
        self.variable = variable
        self.asked: list[list[str]] = []

    def container_env(self, devices: Sequence[PreparedDevice],
                      present: Set[str]) -> Mapping[str, str]:
        self.asked.append([d.device for d in devices])
        if devices or self.variable in present:
            return {self.variable: ",".join(d.device for d in devices) or "empty"}
        return {}


def test_container_env_asks_each_backend_with_its_own_devices_and_the_first_wins() -> None:
    a, b, c = Lister("a", "SHARED"), Lister("b", "SHARED"), Lister("c", "C_ONLY")
    backends = Backends([a, b, c])
    devices = [PreparedDevice("r", "x", "n", name, backend=owner)
               for name, owner in (("x-0", "a"), ("y-0", "b"), ("y-1", "b"), ("z", "gone"))]
    assert backends.container_env(devices, set()) == (("SHARED", "x-0"),)
    assert (a.asked, b.asked, c.asked) == ([["x-0"]], [["y-0", "y-1"]], [[]])
    assert backends.container_env([], {"C_ONLY", "SHARED"}) == (
        ("SHARED", "empty"), ("C_ONLY", "empty"))
    with pytest.raises(ValueError, match="two backends are named 'a'"):
        Backends([a, Lister("a", "V")])
    with pytest.raises(ValueError, match="is not a DNS label"):
        Backends([Lister("Not_A_Label", "V")])


# --------------------------------------------------------------------------- a vendor, served


def fpga_node(tmp_path: Path, extra: str = "") -> Node:
    settings = AgentSettings(backends=f"{FPGA}{extra}", state_dir=str(tmp_path / "state"))
    return Node(tmp_path, backends=make_backends(settings, [NODE]))


def test_a_vendor_device_is_prepared_exposed_and_unprepared_by_the_agent(
        tmp_path: Path) -> None:
    node = fpga_node(tmp_path)
    node.client.put(claim_obj(["fpga-1"], driver=fpga_backend.DRIVER))
    preparer = node.preparer()
    sync(preparer, node)
    assert ready(node) == [("fpga-1", "True")]
    spec_file = f"kdra.dev-fpga-example-com-{UID}.json"
    assert node.cdi_files() == [spec_file]
    spec = json.loads((tmp_path / "cdi" / spec_file).read_text())
    bitstream = tmp_path / "state" / "fpga" / NODE / "fpga-1.bitstream"
    assert spec["kind"] == "kdra.dev/fpga-example-com"
    assert spec["devices"] == [{"name": f"{UID}-fpga-1", "containerEdits": {
        "env": [f"KDRA_DEVICE_FPGA_1={fpga_backend.DRIVER}/{NODE}/fpga-1",
                "KDRA_DEVICE_FPGA_1_CLAIM=ns/c", f"KDRA_DEVICE_FPGA_1_UUID={fpga_uuid(NODE, 1)}",
                "KDRA_DEVICE_FPGA_1_FAMILY=agilex7"],
        "deviceNodes": [{"path": "/dev/fpga/fpga-1", "type": "c", "major": 1, "minor": 3,
                         "fileMode": 0o666}],
        "mounts": [{"hostPath": str(bitstream), "containerPath": "/run/fpga/fpga-1.bitstream",
                    "type": "bind", "options": ["ro", "nosuid", "nodev", "bind"]}]}}]
    assert bitstream.read_text() == f"{UID} ns/c\n"  # the vendor's node edit
    data = node.claim()["status"]["devices"][0]["data"]  # type: ignore[index]
    assert data == {"uuid": fpga_uuid(NODE, 1), "family": "agilex7",
                    "bitstream": str(bitstream),
                    "cdiDeviceIDs": [f"kdra.dev/fpga-example-com={UID}-fpga-1"]}
    assert node.checkpoint()[UID]["devices"][0]["backend"] == "fpga"

    bitstream.unlink()
    (tmp_path / "cdi" / spec_file).unlink()  # someone deleted both: restored together
    sync(preparer, node)
    assert bitstream.exists() and node.cdi_files() == [spec_file]

    released = claim_obj([])
    released["status"]["devices"] = node.claim()["status"]["devices"]  # type: ignore[index]
    node.client.put(released)
    sync(preparer, node)
    assert node.cdi_files() == [] and node.checkpoint() == {} and ready(node) == []
    assert not bitstream.exists()


class Jammed(BackendBase):
    """A second vendor whose card refuses to prepare while ``jammed``."""

    name = "jam"
    jammed = True

    def __init__(self, settings: AgentSettings) -> None:
        pass

    def discover(self, node: str) -> Inventory:
        return Inventory((InventoryDevice("jam.example.com", "jam-0"),))

    def prepare(self, node: str, claim: ClaimRef, devices: Sequence[PreparedDevice]) -> None:
        if Jammed.jammed:
            raise OSError("card jammed")


def test_a_failed_prepare_undoes_the_other_backends_edits_and_is_retried(
        tmp_path: Path) -> None:
    node = fpga_node(tmp_path, ",tests.unit.agent.test_backends:Jammed")
    claim = claim_obj(["fpga-0"], driver=fpga_backend.DRIVER)
    claim["status"]["allocation"]["devices"]["results"].append(
        {"request": "gpu", "driver": "jam.example.com", "pool": NODE, "device": "jam-0"})
    node.client.put(claim)
    preparer = node.preparer()
    bitstream = tmp_path / "state" / "fpga" / NODE / "fpga-0.bitstream"
    Jammed.jammed = True
    with pytest.raises(OSError, match="card jammed"):
        sync(preparer, node)
    assert not bitstream.exists()  # the FPGA's edit was undone
    assert node.cdi_files() == [] and preparer.checkpoint.claims == {} and ready(node) == []
    Jammed.jammed = False
    sync(preparer, node)
    assert ready(node) == [("fpga-0", "True"), ("jam-0", "True")] and bitstream.exists()


class Broken(BackendBase):
    name = "broken"
    description = "a backend whose health check fails"

    def __init__(self, settings: AgentSettings) -> None:
        pass

    def discover(self, node: str) -> Inventory:
        return Inventory((InventoryDevice("broken.example.com", "b-0"),))

    def observe_health(self, node: str, devices: Inventory) -> Mapping[DeviceKey, Observation]:
        raise RuntimeError("sensor bus down")


def test_a_vendor_backends_health_taints_its_devices_only(tmp_path: Path,
                                                          caplog: Any) -> None:
    settings = AgentSettings(backends=f"{FPGA},tests.unit.agent.test_backends:Broken",
                             state_dir=str(tmp_path / "state"))
    backends = make_backends(settings, [NODE])
    inventory = backends.discover(NODE)
    health = NodeHealth(NODE, health_sources(settings, backends), debounce=0, settle=0,
                        clock=lambda: 0.0, wall=lambda: dt.datetime(2026, 12, 2, tzinfo=dt.UTC))
    hot = tmp_path / "state" / "fpga" / NODE / "overheated"
    hot.parent.mkdir(parents=True)
    hot.write_text("fpga-2\nfpga-99\n")
    health.check(inventory)
    tainted = {d.name: d.taints[0] for d in map(health.tainted, inventory.devices) if d.taints}
    assert list(tainted) == ["fpga-2"]
    assert (tainted["fpga-2"].value, tainted["fpga-2"].effect) == ("OverTemperature",
                                                                   "NoSchedule")
    assert "backend broken (a backend whose health check fails) failed: sensor bus down" \
        in caplog.text


def test_a_vendor_backends_env_convention_reaches_the_container(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("gpus: ['1 x L4-24GB']\n")
    settings = AgentSettings(inventory=str(inventory), backends=f"fake-gpu,{FPGA}",
                             state_dir=str(tmp_path / "state"))
    backends = make_backends(settings, [NODE])
    found = backends.discover(NODE)
    ref = ClaimRef("u1", "ns", "c")
    results = [Result("gpu", GPU, NODE, "gpu-0"), Result("fpga", fpga_backend.DRIVER, NODE,
                                                         "fpga-3")]
    devices = {(d.driver, d.name): d for d in found.devices}
    entry = ClaimEntry(ref, "prepared", prepared_devices(ref, results, devices,
                                                         backends=backends), ())
    claim = {"metadata": {"namespace": "ns", "name": "c", "uid": "u1"},
             "status": {"allocation": {"devices": {"results": [
                 {"request": r.request, "driver": r.driver, "pool": NODE, "device": r.device}
                 for r in results]}},
                 "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}]}}
    policy = ExposurePolicy(NODE, claims=lambda: [claim],
                            checkpoint=lambda: Checkpoint(NODE).with_entry(entry),
                            drivers=lambda: found.drivers, backends=backends)
    pod = PodSandbox("sb", "p", "pod-1", "ns", {}, {"resource.kdra.dev/claims": json.dumps(
        [{"name": "all", "resourceClaimName": "c"}])})
    decision = policy(pod, Container("id", "sb", "main"))
    assert dict(decision.env) == {  # type: ignore[union-attr]
        "KDRA_DEVICES": f"{GPU}/{NODE}/gpu-0,{fpga_backend.DRIVER}/{NODE}/fpga-3",
        "NVIDIA_VISIBLE_DEVICES": str(found.device(GPU, "gpu-0").attribute("uuid")),  # type: ignore[union-attr]
        "FPGA_VISIBLE_DEVICES": fpga_uuid(NODE, 3)}
    # a container of another pod that set the vendor's variable itself gets "none"
    other = PodSandbox("sb2", "q", "pod-2", "ns", {}, {})
    decision = policy(other, Container("id2", "sb2", "main",
                                       env=("FPGA_VISIBLE_DEVICES=all",)))
    assert decision.env == (("FPGA_VISIBLE_DEVICES", "none"),)  # type: ignore[union-attr]


def test_records_of_an_older_agent_get_their_backend_at_load(tmp_path: Path) -> None:
    node = Node(tmp_path, "gpus: ['2 x L4-24GB']\n"
                          "devices: [{name: kitten-0, driver: cats.example.com}]\n")
    ref = ClaimRef(UID, "ns", "c")
    old = (PreparedDevice("gpu", GPU, NODE, "gpu-1", data={"uuid": "GPU-1"}),
           PreparedDevice("cat", "cats.example.com", NODE, "kitten-0"),
           PreparedDevice("gpu", GPU, NODE, "gpu-9"))  # gone from the node since
    CheckpointFile(tmp_path / "state", NODE).save(
        Checkpoint(NODE).with_entry(ClaimEntry(ref, "prepared", old, ())))
    preparer = node.preparer()
    assert [d.backend for d in preparer.checkpoint.claims[UID].devices] == [
        "fake-gpu", "generic", ""]
    again = Checkpoint.decode(preparer.checkpoint.encode(), NODE)
    assert again == preparer.checkpoint  # the backend is kept in the file
    asyncio.run(preparer.unprepare(again.claims[UID], None))
    assert preparer.checkpoint.claims == {}

"""kdra's kubelet plugin over real gRPC on unix sockets, with the test playing the kubelet:
registration, NodePrepareResources / NodeUnprepareResources (idempotent, on the agent's real
Preparer, CDI files and checkpoint), the health stream, the sockets' lifecycle, and hostile
callers — another node's claim, a malformed request, a caller that is not root.

The claims come from a dict standing for the API server (tests/e2e/test_agent_native.py runs
the agent process against a real one).
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from kdra.agent import metrics
from kdra.agent.backends.registry import make_backends
from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.kubelet.gate import GatedSocket, GateError
from kdra.agent.kubelet.messages import DRA_V1, DRA_V1BETA1, HEALTHY, UNHEALTHY, Claim, Device
from kdra.agent.kubelet.plugin import HealthFeed, KubeletPlugins
from kdra.agent.kubelet.service import KubeletService
from kdra.agent.prepare import Preparer
from kdra.agent.settings import AgentSettings
from tests import fpga_backend
from tests.fpga_backend import fpga_uuid
from tests.unit.agent.kubelet_side import Kubelet
from tests.unit.agent.prepare_helpers import discovered

NODE = "node-1"
GPU = "gpu.kdra.dev"
CATS = "resource-driver.example.com"
INVENTORY = f"""
gpus: ['2 x H100-80GB']
devices:
- name: kitten-0
  driver: {CATS}
  attributes: {{color: white, size: small}}
"""


def native_claim(name: str, uid: str, *results: tuple[str, str, str],
                 reserved: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {"allocation": {"devices": {"results": [
        {"request": "gpu" if driver == GPU else "cat", "driver": driver, "pool": pool,
         "device": device} for driver, pool, device in results]}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": f"pod-{uid}"}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "ns", "name": name, "uid": uid},
            "spec": {"devices": {"requests": []}}, "status": status}


class Harness:
    """One node's plugins on short socket paths, its Preparer on disk, a claim store."""

    def __init__(self, home: Path, vendor: str = "") -> None:
        """``vendor``: a vendor backend (``module:Class``) run beside fake-gpu and generic,
        whose driver the agent serves too."""
        self.home = home
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads = 0
        if vendor:
            (home / "inventory.yaml").write_text(INVENTORY)
            self.backends = make_backends(AgentSettings(
                inventory=str(home / "inventory.yaml"), backends=f"fake-gpu generic {vendor}",
                state_dir=str(home / "state")), [NODE])
            self.inventory = self.backends.discover(NODE)
        else:
            self.backends, self.inventory = discovered(INVENTORY, NODE)
        self.drivers = tuple(dict.fromkeys(d.driver for d in self.inventory.devices))
        self.unhealthy: set[str] = set()
        self.preparer = Preparer(
            None, NODE, cdi=CdiDir(home / "cdi"),  # type: ignore[arg-type]  # never reports
            checkpoint_file=CheckpointFile(home / "state", NODE),
            inventory=lambda: self.inventory, drivers=lambda: self.drivers,
            backends=self.backends, report_status=False)
        self.preparer.load()
        self.feed = HealthFeed(NODE, self.device_health, timeout=30)
        self.plugins = KubeletPlugins(
            KubeletService(NODE, self.preparer, self.read_claim, lambda: self.drivers),
            self.feed, registry_dir=home / "reg", plugins_dir=home / "plugins")

    async def read_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        found = self.claims.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def device_health(self, driver: str) -> list[tuple[str, bool]]:
        return [(d.name, d.name not in self.unhealthy) for d in self.inventory.for_driver(driver)]

    def add(self, claim: dict[str, Any]) -> Claim:
        meta = claim["metadata"]
        self.claims[(meta["namespace"], meta["name"])] = claim
        return Claim(meta["namespace"], meta["uid"], meta["name"])

    def endpoint(self, driver: str = GPU) -> Path:
        return self.home / "plugins" / driver / "dra.sock"

    def registration(self, driver: str = GPU) -> Path:
        return self.home / "reg" / f"{driver}-reg.sock"

    def cdi_files(self) -> list[str]:
        directory = self.home / "cdi"
        return sorted(p.name for p in directory.iterdir()) if directory.exists() else []

    def checkpoint(self) -> dict[str, Any]:
        path = self.home / "state" / f"checkpoint-{NODE}.json"
        return dict(json.loads(path.read_text())["claims"]) if path.exists() else {}


@pytest.fixture
def home() -> Iterator[Path]:
    """A short directory: a unix socket's path is at most 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kk-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run(home: Path, scenario: Callable[[Harness], Awaitable[None]],
        vendor: str = "") -> Harness:
    harness = Harness(home, vendor)

    async def main() -> None:
        await harness.plugins.sync(list(harness.drivers))
        try:
            await scenario(harness)
        finally:
            await harness.plugins.stop()

    asyncio.run(main())
    return harness


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels or None) or 0.0


# --------------------------------------------------------------------------- registration


def test_registration_names_the_driver_its_endpoint_and_versions(home: Path) -> None:
    async def scenario(h: Harness) -> None:
        for driver in (GPU, CATS):
            async with Kubelet(h.registration(driver)) as kubelet:
                info = await kubelet.info()
                assert (info.type, info.name, info.endpoint) == (
                    "DRAPlugin", driver, str(h.endpoint(driver)))
                assert info.supported_versions == ("v1.DRAPlugin", "v1beta1.DRAPlugin")
                before = sample("kdra_agent_kubelet_registrations_total")
                await kubelet.notify(True)
                assert sample("kdra_agent_kubelet_registrations_total") == before + 1
                assert h.plugins.plugins[driver].registered.is_set()
                await kubelet.notify(False, "unsupported")
                assert not h.plugins.plugins[driver].registered.is_set()

    run(home, scenario)


# --------------------------------------------------------------------------- prepare


def test_prepare_and_unprepare_are_idempotent(home: Path) -> None:
    async def scenario(h: Harness) -> None:
        ref = h.add(native_claim("pod-gpu", "uid-1", (GPU, NODE, "gpu-0")))
        want = Device(("gpu",), NODE, "gpu-0", ("kdra.dev/gpu=uid-1-gpu-0",))
        async with Kubelet(h.endpoint()) as kubelet:
            first = await kubelet.prepare(ref)
            assert first["uid-1"].error == "" and first["uid-1"].devices == (want,)
            assert h.cdi_files() == ["kdra.dev-uid-1.json"]
            assert list(h.checkpoint()) == ["uid-1"]
            saved = os.stat(h.home / "state" / f"checkpoint-{NODE}.json")
            spec = (h.home / "cdi" / "kdra.dev-uid-1.json").stat()

            # Again (the kubelet restarted, or retried), in both API versions: the same
            # answer, nothing written again.
            assert await kubelet.prepare(ref) == first
            assert await kubelet.prepare(ref, package=DRA_V1BETA1) == first
            again = os.stat(h.home / "state" / f"checkpoint-{NODE}.json")
            assert (again.st_ino, again.st_mtime_ns) == (saved.st_ino, saved.st_mtime_ns)
            assert (h.home / "cdi" / "kdra.dev-uid-1.json").stat().st_ino == spec.st_ino

            # A CDI spec deleted behind the agent's back (tmpfs after a reboot) is rewritten.
            (h.home / "cdi" / "kdra.dev-uid-1.json").unlink()
            assert await kubelet.prepare(ref) == first
            assert h.cdi_files() == ["kdra.dev-uid-1.json"]

            assert await kubelet.unprepare(ref) == {"uid-1": ""}
            assert h.cdi_files() == [] and h.checkpoint() == {}
            assert await kubelet.unprepare(ref) == {"uid-1": ""}  # unknown: fine
            assert await kubelet.unprepare(Claim("ns", "never", "seen"),
                                           package=DRA_V1BETA1) == {"never": ""}
            assert await kubelet.prepare(ref) == first  # and prepared again

    run(home, scenario)


def test_a_claim_of_two_drivers_is_prepared_once_each_driver_gets_its_devices(
        home: Path) -> None:
    async def scenario(h: Harness) -> None:
        ref = h.add(native_claim("pod-both", "uid-2", (GPU, NODE, "gpu-1"),
                                 (CATS, NODE, "kitten-0")))
        async with Kubelet(h.endpoint(GPU)) as gpus, Kubelet(h.endpoint(CATS)) as cats:
            gpu = (await gpus.prepare(ref))["uid-2"]
            assert [d.device for d in gpu.devices] == ["gpu-1"], gpu
            cat = (await cats.prepare(ref))["uid-2"]
            assert cat.devices == (Device(("cat",), NODE, "kitten-0", (
                "kdra.dev/resource-driver-example-com=uid-2-kitten-0",)),)
            entry = h.checkpoint()["uid-2"]
            assert sorted(d["device"] for d in entry["devices"]) == ["gpu-1", "kitten-0"]
            assert len(h.cdi_files()) == 2  # one spec per driver
            assert await cats.unprepare(ref) == {"uid-2": ""}
            assert h.cdi_files() == [] and h.checkpoint() == {}
            assert await gpus.unprepare(ref) == {"uid-2": ""}

    run(home, scenario)


def test_a_vendor_backends_device_is_prepared_through_the_kubelet(home: Path) -> None:
    """The kubelet's calls reach the device-backend seam like the claim watch does: a vendor
    module's device (tests/fpga_backend.py) gets its node edit (the bitstream file), its CDI
    edits (device node, mount) and its own driver's CDI ID; unprepare undoes the node edit."""
    fpga = fpga_backend.DRIVER
    spec_file = "kdra.dev-fpga-example-com-uid-f.json"
    bitstream = home / "state" / "fpga" / NODE / "fpga-1.bitstream"

    async def scenario(h: Harness) -> None:
        assert h.drivers == (GPU, CATS, fpga)
        ref = h.add(native_claim("pod-fpga", "uid-f", (fpga, NODE, "fpga-1")))
        async with Kubelet(h.endpoint(fpga)) as kubelet:
            first = await kubelet.prepare(ref)
            assert first["uid-f"].error == ""
            assert first["uid-f"].devices == (Device(
                ("cat",), NODE, "fpga-1", ("kdra.dev/fpga-example-com=uid-f-fpga-1",)),)
            assert bitstream.read_text() == "uid-f ns/pod-fpga\n"  # the vendor's node edit
            spec = json.loads((h.home / "cdi" / spec_file).read_text())
            (device,) = spec["devices"]
            assert device["name"] == "uid-f-fpga-1"
            edits = device["containerEdits"]
            assert f"KDRA_DEVICE_FPGA_1_UUID={fpga_uuid(NODE, 1)}" in edits["env"]
            assert "KDRA_DEVICE_FPGA_1_FAMILY=agilex7" in edits["env"]
            assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/fpga/fpga-1"]
            assert [(m["hostPath"], m["containerPath"]) for m in edits["mounts"]] == [
                (str(bitstream), "/run/fpga/fpga-1.bitstream")]
            assert h.checkpoint()["uid-f"]["devices"][0]["backend"] == "fpga"
            assert await kubelet.prepare(ref) == first  # idempotent here too

            assert await kubelet.unprepare(ref) == {"uid-f": ""}
            assert not bitstream.exists() and h.cdi_files() == [] and h.checkpoint() == {}

    run(home, scenario, vendor="tests.fpga_backend:FpgaBackend")


def test_another_nodes_claim_is_refused_and_nothing_is_written(home: Path) -> None:
    """A kubelet (or anyone reaching the socket) naming a claim allocated on another node
    gets an error; so does a claim that was replaced, or is not allocated."""

    async def scenario(h: Harness) -> None:
        elsewhere = h.add(native_claim("theirs", "uid-3", (GPU, "node-2", "gpu-0")))
        replaced = Claim("ns", "old-uid", h.add(native_claim("mine", "uid-4",
                                                             (GPU, NODE, "gpu-0"))).name)
        unallocated = native_claim("pending", "uid-5")
        unallocated["status"] = {}
        pending = h.add(unallocated)
        async with Kubelet(h.endpoint()) as kubelet:
            answers = await kubelet.prepare(elsewhere, replaced, pending,
                                            Claim("ns", "uid-6", "gone"))
        assert "allocated in pool node-2, not on node node-1" in answers["uid-3"].error
        assert "has UID uid-4, not old-uid" in answers["old-uid"].error
        assert "is not allocated" in answers["uid-5"].error
        assert "ResourceClaim ns/gone not found" in answers["uid-6"].error
        assert all(not a.devices for a in answers.values())
        assert h.cdi_files() == [] and h.checkpoint() == {}

    run(home, scenario)


def test_a_busy_device_is_refused_until_its_claim_lets_go(home: Path) -> None:
    """gpu-0 is prepared for claim A: claim B (allocated gpu-0 by a scheduler that saw A
    released) is refused while A still holds it by the API server; once A is deallocated
    and its unprepare was missed, B's prepare unprepares A first."""

    async def scenario(h: Harness) -> None:
        a = h.add(native_claim("a", "uid-a", (GPU, NODE, "gpu-0")))
        b = h.add(native_claim("b", "uid-b", (GPU, NODE, "gpu-0")))
        async with Kubelet(h.endpoint()) as kubelet:
            assert (await kubelet.prepare(a))["uid-a"].error == ""
            refused = (await kubelet.prepare(b))["uid-b"]
            assert "already prepared for claim ns/a" in refused.error, refused
            h.claims[("ns", "a")]["status"] = {}  # released and deallocated
            prepared = (await kubelet.prepare(b))["uid-b"]
            assert prepared.error == "" and prepared.devices[0].device == "gpu-0"
            assert list(h.checkpoint()) == ["uid-b"]
            assert h.cdi_files() == ["kdra.dev-uid-b.json"]

    run(home, scenario)


def test_malformed_requests_are_refused_and_the_plugin_keeps_serving(home: Path) -> None:
    async def scenario(h: Harness) -> None:
        ref = h.add(native_claim("pod-gpu", "uid-1", (GPU, NODE, "gpu-0")))
        async with Kubelet(h.endpoint()) as kubelet:
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await kubelet.call(f"{DRA_V1}.DRAPlugin", "NodePrepareResources", b"\x0a\xff")
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "NodePrepareResourcesRequest" in str(bad.value.details())
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await kubelet.call(f"{DRA_V1}.DRAPlugin", "NodeDeleteEverything", b"")
            assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert (await kubelet.prepare(ref))["uid-1"].error == ""

    run(home, scenario)


# --------------------------------------------------------------------------- health


def test_health_stream_sends_the_full_list_then_every_change(home: Path) -> None:
    async def scenario(h: Harness) -> None:
        async with Kubelet(h.endpoint()) as kubelet:
            stream: AsyncIterator[list[Any]] = kubelet.watch()
            first = await asyncio.wait_for(anext(stream), 10)
            assert [(d.pool, d.device, d.health) for d in first] == [
                (NODE, "gpu-0", HEALTHY), (NODE, "gpu-1", HEALTHY)]
            assert {d.timeout_seconds for d in first} == {30}
            h.unhealthy.add("gpu-1")
            h.plugins.health_changed()
            second = await asyncio.wait_for(anext(stream), 10)
            assert [(d.device, d.health) for d in second] == [("gpu-0", HEALTHY),
                                                              ("gpu-1", UNHEALTHY)]
            await stream.aclose()  # type: ignore[attr-defined]

    run(home, scenario)


# --------------------------------------------------------------------------- sockets


def test_sockets_are_owner_only_replace_stale_ones_and_go_on_stop(home: Path) -> None:
    stale = home / "reg" / f"{GPU}-reg.sock"
    stale.parent.mkdir(parents=True)
    left = socket.socket(socket.AF_UNIX)
    left.bind(str(stale))  # a killed agent's socket: nobody listens
    left.close()

    async def scenario(h: Harness) -> None:
        for path in (h.registration(GPU), h.endpoint(GPU), h.registration(CATS)):
            mode = os.stat(path).st_mode
            assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600, path
        assert stat.S_IMODE(os.stat(h.endpoint(GPU).parent).st_mode) == 0o700
        async with Kubelet(h.registration(GPU)) as kubelet:
            assert (await kubelet.info()).name == GPU  # the stale socket was replaced

    (home / "plugins" / GPU).mkdir(parents=True)
    (home / "plugins" / GPU).chmod(0o755)  # as a hostPath DirectoryOrCreate makes it
    harness = run(home, scenario)
    assert not list((home / "reg").iterdir())
    assert not (harness.endpoint(GPU)).exists()


def test_a_gate_never_deletes_what_is_not_its_socket(home: Path) -> None:
    async def scenario() -> None:
        regular = home / "not-a-socket"
        regular.write_text("keep me")
        with pytest.raises(GateError, match="not a socket"):
            await GatedSocket(regular, home / "backend.sock").start()
        assert regular.read_text() == "keep me"

        path = home / "mine.sock"
        gate = GatedSocket(path, home / "backend.sock")
        await gate.start()
        path.unlink()  # a newer agent took the path over
        newer = socket.socket(socket.AF_UNIX)
        newer.bind(str(path))
        await gate.stop()
        assert path.exists()  # the newer agent's socket stays
        newer.close()

    asyncio.run(scenario())


CONNECT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""
GRPC_CALL = """
import sys, grpc
channel = grpc.insecure_channel("unix:" + sys.argv[1])
info = channel.unary_unary("/pluginregistration.Registration/GetInfo",
                           request_serializer=lambda b: b, response_deserializer=lambda b: b)
try:
    info(b"", timeout=5)
    print("OK")
except grpc.RpcError as exc:
    print(exc.code().name)
"""


def _as_nobody(code: str, path: Path, *caps: str) -> str:
    extra = [f"--inh-caps=+{','.join(caps)}", f"--ambient-caps=+{','.join(caps)}"] if caps else []
    result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                             *extra, sys.executable, "-c", code, str(path)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root (the kubelet's user) and setpriv to play another user")
def test_callers_the_socket_permissions_do_not_allow_are_refused(home: Path) -> None:
    """Only root (the kubelet) gets an answer. Another user is refused by the kernel (mode
    0600); one that gets past the permissions anyway (CAP_DAC_OVERRIDE) is refused by the
    plugin, which checks the caller's credentials against them."""
    home.chmod(0o755)  # the caller must reach the sockets' directories (they are 0700 below)
    for directory in ("reg", "plugins", f"plugins/{GPU}"):
        (home / directory).mkdir(parents=True, exist_ok=True)
        (home / directory).chmod(0o755)

    async def scenario(h: Harness) -> None:
        path = h.registration(GPU)
        refused = sample("kdra_agent_kubelet_refused_connections_total")
        assert await asyncio.to_thread(_as_nobody, CONNECT, path) == "PermissionError"
        # Past the kernel's check with CAP_DAC_OVERRIDE: the connection is made, the call is
        # refused (the gate closes it: the caller's gRPC sees the server unavailable).
        assert await asyncio.to_thread(_as_nobody, CONNECT, path, "dac_override") == "connected"
        answer = await asyncio.to_thread(_as_nobody, GRPC_CALL, path, "dac_override")
        assert answer == "UNAVAILABLE"
        for endpoint in (path, h.endpoint(GPU)):
            assert await asyncio.to_thread(_as_nobody, GRPC_CALL, endpoint,
                                           "dac_override") == "UNAVAILABLE"
        gates = h.plugins.plugins[GPU]
        assert gates.registration_gate.refused >= 2 and gates.dra_gate.refused >= 1
        assert sample("kdra_agent_kubelet_refused_connections_total") >= refused + 4
        async with Kubelet(path) as kubelet:  # root: served
            assert (await kubelet.info()).name == GPU

    run(home, scenario)

"""Every example docs/user-guide.md tells a user to apply works on the demo as written.

The list comes from the guide itself: every ``kubectl apply -k|-f manifests/examples/...``
command in it. Each example written for the kdra flavour (``resource.kdra.dev``) is applied
with the guide's own command, in the guide's order, to one demo started as the guide says
(``make demo DEMO_FLAGS="--flavour kdra"``), and each of its pods must be bound with the
devices it asks for: a partition where it asks for a partition (not a whole GPU), a share of
one GPU where two pods ask for shares, two GPUs behind one PCIe root for ``matchAttribute``,
every A100 of a node for ``allocationMode: All``, and so on. An example of the native flavour
(``resource.k8s.io``) is the one the default (native) demo applies itself: test_demo.py checks
its pod. An example the guide names that this module has no expectations for fails the test,
naming it. Then the guide's ``--as alice`` walkthrough: its commands as written, and
``kubectl kdra free --as alice`` says what the guide shows.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION
from kdra_devenv import demo as demo_module
from tests.e2e.conftest import ROOT
from tests.e2e.demo_helpers import Demo, running_demo
from tests.e2e.procs import wait_for

pytestmark = pytest.mark.slow

GUIDE = ROOT / "docs" / "user-guide.md"
APPLY = re.compile(r"kubectl apply (?:--server-side )?-[kf] (manifests/examples/[\w./-]+)"
                   r"(?: -n (\S+))?")
GPU = "gpu.kdra.dev"
CLAIMS = "resourceclaims.resource.kdra.dev"
SLICES = "resourceslices.resource.kdra.dev"

Result = dict[str, Any]


def guide_examples(text: str) -> list[tuple[str, str]]:
    """``(example path, the command as the guide writes it)`` for every ``kubectl apply`` of
    an example in the guide, in order, each path once."""
    seen: dict[str, str] = {}
    for match in APPLY.finditer(text):
        seen.setdefault(match.group(1).rstrip("/"), match.group(0))
    return list(seen.items())


def flavour(example: str) -> str:
    """native when the example's objects are ``resource.k8s.io``'s, else kdra."""
    path = ROOT / example
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    groups = {str(doc.get("apiVersion", "")).split("/")[0]
              for f in files for doc in yaml.safe_load_all(f.read_text()) if doc}
    return "native" if "resource.k8s.io" in groups else "kdra"


class Devices:
    """The demo's published devices, by (pool, device name)."""

    def __init__(self, demo: Demo) -> None:
        self.by_id: dict[tuple[str, str], dict[str, Any]] = {}
        for piece in demo.get(SLICES)["items"]:
            for device in piece["spec"].get("devices") or ():
                self.by_id[(piece["spec"]["pool"]["name"], device["name"])] = device

    def attribute(self, result: Result, name: str) -> Any:
        attribute = self.by_id[(result["pool"], result["device"])]["attributes"][name]
        return next(iter(attribute.values()))

    def whole(self, result: Result) -> bool:
        """A whole GPU no other claim holds: type gpu, not shared by memory."""
        device = self.by_id[(result["pool"], result["device"])]
        return (result["driver"] == GPU and self.attribute(result, "type") == "gpu"
                and not device.get("allowMultipleAllocations"))

    def on_pool(self, pool: str, keep: Callable[[dict[str, Any]], bool]) -> set[str]:
        return {name for (p, name), device in self.by_id.items() if p == pool and keep(device)}


def attr(device: dict[str, Any], name: str) -> Any:
    value = (device.get("attributes") or {}).get(name)
    return next(iter(value.values())) if value else None


def bound(demo: Demo, namespace: str, name: str) -> dict[str, Any]:
    def node() -> dict[str, Any] | None:
        pod = demo.get("pod", name, "-n", namespace)
        return pod if pod["spec"].get("nodeName") else None
    return dict(wait_for(node, timeout=120, what=f"pod {namespace}/{name} bound"))


def claims_of(demo: Demo, pod: dict[str, Any]) -> list[dict[str, Any]]:
    namespace = pod["metadata"]["namespace"]
    names = json.loads(pod["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION]).values()
    return [demo.get(CLAIMS, name, "-n", namespace) for name in names]


def results(demo: Demo, namespace: str, name: str) -> list[Result]:
    """The allocation results of every claim of the pod, once it is bound."""
    pod = bound(demo, namespace, name)
    out: list[Result] = []
    for claim in claims_of(demo, pod):
        out += claim["status"]["allocation"]["devices"]["results"]
    assert out, f"{namespace}/{name} is bound without devices"
    return out


def shared_claim(demo: Demo, namespace: str, pods: tuple[str, str], claim: str) -> None:
    """Both pods bound to one node, with the one claim reserved for both."""
    first, second = (bound(demo, namespace, pod) for pod in pods)
    assert first["spec"]["nodeName"] == second["spec"]["nodeName"]
    for pod in (first, second):
        assert [c["metadata"]["name"] for c in claims_of(demo, pod)] == [claim]
    reserved = demo.get(CLAIMS, claim, "-n", namespace)["status"]["reservedFor"]
    assert sorted(r["name"] for r in reserved) == sorted(pods)


def one_whole_gpu(demo: Demo, devices: Devices, namespace: str, pod: str) -> Result:
    (result,) = results(demo, namespace, pod)
    assert devices.whole(result), result
    return result


# ----------------------------------------------------------------- what each example asks for


def check_gpu(demo: Demo, devices: Devices) -> None:
    one_whole_gpu(demo, devices, "default", "single-gpu-pod")
    shared_claim(demo, "default", ("shared-gpu-pod-a", "shared-gpu-pod-b"), "shared-gpu")
    pair = results(demo, "default", "gpu-pair-pod")
    assert len(pair) == 2 and all(devices.whole(r) for r in pair), pair
    assert len({devices.attribute(r, "pcieRoot") for r in pair}) == 1, pair
    every = results(demo, "default", "all-a100-pod")
    pool = every[0]["pool"]
    a100s = devices.on_pool(pool, lambda d: str(attr(d, "productName")).startswith(
        "NVIDIA A100"))
    assert a100s and {r["device"] for r in every} == a100s, (every, a100s)


def check_extended(demo: Demo, devices: Devices) -> None:
    def pod() -> dict[str, Any] | None:
        pods = demo.get("pods", "-n", "default", "-l", "app=train-gpus")["items"]
        return pods[0] if pods and pods[0]["spec"].get("nodeName") else None
    name = wait_for(pod, timeout=120, what="the Deployment's pod bound")["metadata"]["name"]
    got = results(demo, "default", name)
    assert len(got) == 2 and all(devices.whole(r) for r in got), got


def check_v1(demo: Demo, devices: Devices) -> None:
    one = [one_whole_gpu(demo, devices, "gpu-test1", pod) for pod in ("pod0", "pod1")]
    assert len({(r["pool"], r["device"]) for r in one}) == 2, one  # a GPU each
    shared_claim(demo, "gpu-test2", ("pod0", "pod1"), "shared-gpu")
    (first,) = results(demo, "gpu-test3", "pod0")
    assert first["request"] == "gpu/h100" and "H100" in devices.attribute(first, "productName")
    same = results(demo, "gpu-test4", "same-pcie-root")
    assert len(same) == 2 and len({devices.attribute(r, "pcieRoot") for r in same}) == 1
    distinct = results(demo, "gpu-test4", "distinct-numa")
    assert len(distinct) == 2 and len({devices.attribute(r, "numaNode") for r in distinct}) == 2
    monitor = results(demo, "gpu-test5", "monitor")
    assert all(r.get("adminAccess") for r in monitor), monitor
    pool = monitor[0]["pool"]
    h100s = devices.on_pool(pool, lambda d: "H100" in str(attr(d, "productName"))
                            and attr(d, "type") == "gpu" and not d.get("allowMultipleAllocations"))
    assert {r["device"] for r in monitor} == h100s, (monitor, h100s)


def check_partitions(demo: Demo, devices: Devices) -> None:
    halves = [results(demo, "gpu-part1", pod) for pod in ("pod0", "pod1")]
    for (result,) in halves:
        assert result["request"] == "gpu/3g", result
        assert devices.attribute(result, "type") == "mig", result
        assert devices.attribute(result, "profile") == "3g.40gb", result
    (a,), (b,) = halves
    assert a["device"] != b["device"]
    assert devices.attribute(a, "parentUUID") == devices.attribute(b, "parentUUID")
    (whole,) = results(demo, "gpu-part1", "pod2")
    assert whole["request"] == "gpu/whole" and devices.whole(whole), whole


def check_sharing(demo: Demo, devices: Devices) -> None:
    shares = [results(demo, "gpu-share1", pod) for pod in ("pod0", "pod1")]
    (a,), (b,) = shares
    assert (a["pool"], a["device"]) == (b["pool"], b["device"]), (a, b)
    assert devices.by_id[(a["pool"], a["device"])].get("allowMultipleAllocations") is True
    assert a.get("shareID") and b.get("shareID") and a["shareID"] != b["shareID"], (a, b)
    assert [r["consumedCapacity"]["memory"] for r in (a, b)] == ["20Gi", "40Gi"]


def check_seed(demo: Demo, devices: Devices) -> None:
    got = results(demo, "default", "pod-with-cats")
    assert sorted(r["device"] for r in got) == ["kitten-0", "kitten-1"], got


CHECKS: dict[str, Callable[[Demo, Devices], None]] = {
    "manifests/examples/gpu": check_gpu,
    "manifests/examples/extended": check_extended,
    "manifests/examples/v1": check_v1,
    "manifests/examples/partitions": check_partitions,
    "manifests/examples/sharing": check_sharing,
    "manifests/examples/seed": check_seed,
}
"""The kdra flavour's examples and what their pods must get."""


# ------------------------------------------------------------------------------ the tests


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    yield from running_demo(tmp_path_factory.mktemp("guide"), "--flavour", "kdra")


def test_the_guide_names_examples_this_module_knows() -> None:
    """Runs without a demo: a new example in the guide without expectations here fails,
    naming it; a native one must be the one the native demo applies (test_demo.py)."""
    examples = guide_examples(GUIDE.read_text())
    assert examples, "no `kubectl apply ... manifests/examples/...` in the guide"
    for example, command in examples:
        if flavour(example) == "native":
            assert ROOT / example == demo_module.SEED["native"], (
                f"the guide's {command!r} is a native-flavour example the demo does not apply")
        else:
            assert example in CHECKS, (
                f"the guide tells users to run {command!r}: add what its pods must get to "
                "CHECKS in tests/e2e/test_guide_examples.py")


def test_every_example_in_the_guide_runs_on_the_demo_as_written(demo: Demo) -> None:
    examples = [(e, c) for e, c in guide_examples(GUIDE.read_text())
                if flavour(e) == "kdra" and e in CHECKS]
    for _, command in examples:
        print(demo.kubectl(*shlex.split(command)[1:], cwd=ROOT).stdout, end="")
    devices = Devices(demo)
    for example, _ in examples:
        CHECKS[example](demo, devices)
    # kubectl kdra shows the partitions and shares in use on gpu-node-3.
    described = demo.kubectl("kdra", "describe", "--node", demo_module.SHARED_NODE).stdout
    print(described)
    assert re.search(r"gpu-0-mig-3g-40gb-0\s.*gpu-part1/", described), described
    assert re.search(r"gpu-1\s.*gpu-share1/", described), described
    free = demo.kubectl("kdra", "free", "--node", demo_module.SHARED_NODE).stdout
    print(free)
    pool = f"{GPU}/{demo_module.SHARED_NODE}"
    free_rows = [line.split() for line in free.splitlines()]
    assert ["mig.gpu.kdra.dev", demo_module.SHARED_NODE, pool, "14", "2"] in [
        r[:5] for r in free_rows], free  # two 3g.40gb partitions of 14
    assert ["shared-gpu.kdra.dev", demo_module.SHARED_NODE, pool, "1", "1"] in [
        r[:5] for r in free_rows], free  # the shared GPU, held (twice)
    top = demo.kubectl("kdra", "top").stdout
    print(top)
    assert re.search(r"^gpu-part1\s+3\s+3\s+0\s+mig\.gpu\.kdra\.dev=2, whole-gpu\.kdra\.dev=1$",
                     top, re.M), top
    # one device, two claims: each share is a claim of the class
    assert re.search(r"^gpu-share1\s+1\s+2\s+0\s+shared-gpu\.kdra\.dev=2$", top, re.M), top


def test_the_guides_as_alice_walkthrough(demo: Demo) -> None:
    """The administrator's commands of the guide's ``kubectl kdra`` section, as written; then
    ``kubectl kdra free --as alice`` warns as the guide shows and still prints the table."""
    text = GUIDE.read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, re.S)
                 if "kdra-devices-viewer" in b)
    for command in block.replace("\\\n", " ").splitlines():
        if command.strip() and not command.lstrip().startswith("#"):
            demo.kubectl(*shlex.split(command)[1:])
    # kube-controller-manager aggregates kdra-user-view into view (asynchronously).
    wait_for(lambda: demo.kubectl("auth", "can-i", "list", CLAIMS, "-n", "default",
                                  "--as", "alice", check=False).stdout.strip() == "yes",
             timeout=60, what="alice may list ResourceClaims in default (the guide's commands "
             "bind her to view, and kube-controller-manager aggregates kdra-user-view into it)")
    sample = text.split("$ kubectl kdra free --as alice\n", 1)[1].split("```", 1)[0]
    (warning,) = [line for line in sample.splitlines() if line.startswith("warning:")]
    free = demo.kubectl("kdra", "free", "--as", "alice")
    assert warning in free.stderr.splitlines(), free.stderr
    assert re.search(rf"^{re.escape(GPU)}\s+\d+", free.stdout, re.M), free.stdout

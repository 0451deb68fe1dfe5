"""kdra beside upstream's components on native DRA (issue 38), end to end:

- drop-in: a pod for kube-scheduler (no ``schedulerName``) gets its claims from kdra's claim
  controller (kube-controller-manager runs without its ``resourceclaim-controller``) and is
  allocated and bound by the real kube-scheduler; deleting it releases and deallocates
  (kdra's controller clearing what kube-scheduler wrote, upstream's finalizer included);
- a namespace labelled ``resource.kdra.dev/scheduler=kdra-scheduler`` makes kdra-scheduler the
  default for its pods with claims (the mutating webhook);
- where kube-controller-manager's ``resourceclaim-controller`` runs (its ServiceAccount
  exists), kdra's claim controller says so once (log, gauge) and leaves generation and
  clean-up to it; ``--claim-controller=on`` runs it anyway.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra.kube.core.native_pods import CLAIM_CONTROLLER_ACCOUNT
from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conversion import ConversionServer
from tests.e2e.native_helpers import (
    FINALIZER,
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
    request,
    results,
    slices,
    statuses,
    template,
    unique,
)
from tests.e2e.procs import KdraProcess, wait_for

SERVICE_ACCOUNT = CLAIM_CONTROLLER_ACCOUNT


@pytest.fixture(scope="module")
def world(control_plane: ControlPlane) -> Iterator[tuple[str, str]]:
    """A node with four GPUs of a driver of the module's own, and its DeviceClass."""
    node = unique("upstream")
    driver = cls = f"{node}.e2e.kdra.dev"
    make_node(control_plane, node)
    apply(control_plane, device_class(cls, driver),
          *slices(node, driver, {"devices": gpus(4)}))
    yield node, cls
    control_plane.kubectl("delete", SLICES, "--field-selector", f"spec.driver={driver}",
                          "--wait=false", check=False)
    control_plane.kubectl("delete", "deviceclasses.resource.k8s.io", cls, "node", node,
                          "--wait=false", check=False)


def deferred_gauge(proc: KdraProcess) -> float:
    line = next(line for line in proc.metrics().splitlines()
                if line.startswith("kdra_resourceclaim_controller_deferred "))
    return float(line.split()[1])


# Runs first, with an operator of its own (two operators would both schedule pods).
def test_kdra_leaves_claims_to_kube_controller_managers_controller(
        control_plane: ControlPlane, world: tuple[str, str], ns: str, tmp_path: Path) -> None:
    plane = control_plane
    namespace, name = SERVICE_ACCOUNT
    plane.kubectl("create", "serviceaccount", name, "-n", namespace)
    try:
        proc = KdraProcess(["operator", "--health-port", "0", "--flavour", "native"],
                           tmp_path / "deferring.log", plane.kubeconfig,
                           ready_line="kdra operator started").start()
        try:
            log = proc.tail(200)
            assert log.count("kdra's claim controller leaves claim generation and clean-up "
                             "to it") == 1, log
            assert f"its ServiceAccount {namespace}/{name} exists" in log
            assert deferred_gauge(proc) == 1.0
            # kdra check says it too (on stderr, beside the flavour it read).
            checked = subprocess.run([sys.executable, "-m", "kdra", "check", "--kubeconfig",
                                      str(plane.kubeconfig), "--flavour", "native"],
                                     capture_output=True, text=True)
            assert "resourceclaim-controller appears to run" in checked.stderr, checked.stderr
            apply(plane, template("gpu", request("gpu", world[1])),
                  pod("left", templates={"gpu": "gpu"}, scheduler=None), namespace=ns)
            time.sleep(3)  # kdra's controller would have created the claim by now
            assert claims_in(plane, ns) == {}
            assert statuses(get_pod(plane, ns, "left")) == {}
        finally:
            proc.stop()
        # --claim-controller=on: kdra's runs, whatever it sees.
        proc = KdraProcess(["operator", "--health-port", "0", "--flavour", "native",
                            "--claim-controller", "on"], tmp_path / "on.log", plane.kubeconfig,
                           ready_line="kdra operator started").start()
        try:
            assert generated(plane, ns, "left", "gpu")["metadata"]["ownerReferences"]
            assert deferred_gauge(proc) == 0.0
            assert "leaves claim generation" not in proc.tail(200)
        finally:
            proc.stop()
    finally:
        plane.kubectl("delete", "serviceaccount", name, "-n", namespace, check=False)


@pytest.fixture(scope="module")
def operator(control_plane: ControlPlane, conversion_server: ConversionServer,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[KdraProcess]:
    log = tmp_path_factory.mktemp("native-upstream") / "operator.log"
    with native_operator(control_plane, conversion_server, log) as proc:
        yield proc
        print(f"===== native operator log =====\n{proc.tail(150)}")


@pytest.fixture
def kube_scheduler(control_plane: ControlPlane) -> Iterator[None]:
    control_plane.start_scheduler()
    yield
    control_plane.stop_component("kube-scheduler")


def test_kube_scheduler_allocates_the_claims_kdra_generates(
        control_plane: ControlPlane, operator: KdraProcess, kube_scheduler: None,
        world: tuple[str, str], ns: str) -> None:
    plane = control_plane
    node, cls = world
    apply(plane, template("gpu", request("gpu", cls)), claim("shared", request("gpu", cls)),
          pod("upstream", claims={"shared": "shared"}, templates={"gpu": "gpu"},
              scheduler=None), namespace=ns)
    obj = bound(plane, ns, "upstream", timeout=120)
    assert obj["spec"]["nodeName"] == node
    assert obj["spec"]["schedulerName"] == "default-scheduler"
    scheduled = [m for r, m in events(plane, ns, "upstream") if r == "Scheduled"]
    assert scheduled and all("with devices" not in m for m in scheduled), scheduled  # not kdra
    made = generated(plane, ns, "upstream", "gpu")
    uid = obj["metadata"]["uid"]
    assert made["metadata"]["ownerReferences"][0]["uid"] == uid
    for each in (made, claim_obj(plane, ns, "shared")):
        # kube-scheduler's writes on the claims kdra's controller made or left alone.
        assert results(each) and FINALIZER in each["metadata"]["finalizers"]
        assert [r["uid"] for r in each["status"]["reservedFor"]] == [uid]

    # Deletion: kdra's controller releases what kube-scheduler allocated.
    force_delete(plane, ns, "upstream")
    wait_for(lambda: made["metadata"]["name"] not in claims_in(plane, ns), timeout=60,
             what="the generated claim deleted")
    free = wait_for(lambda: (c := claim_obj(plane, ns, "shared"))
                    and not (c.get("status") or {}).get("allocation") and c, timeout=60,
                    what="the shared claim deallocated")
    assert FINALIZER not in (free["metadata"].get("finalizers") or [])


def test_a_labelled_namespace_makes_kdra_scheduler_the_default(
        control_plane: ControlPlane, operator: KdraProcess, world: tuple[str, str],
        ns: str) -> None:
    plane = control_plane
    plane.kubectl("label", "namespace", ns, "resource.kdra.dev/scheduler=kdra-scheduler")
    time.sleep(1)  # the API server's namespace informer (the webhook's namespaceSelector)
    apply(plane, template("gpu", request("gpu", world[1])),
          pod("defaulted", templates={"gpu": "gpu"}, scheduler=None),
          pod("plain", scheduler=None), namespace=ns)
    obj = bound(plane, ns, "defaulted")
    assert obj["spec"]["schedulerName"] == "kdra-scheduler"
    assert any("with devices" in m for r, m in events(plane, ns, "defaulted")
               if r == "Scheduled"), events(plane, ns, "defaulted")
    # A pod without claims keeps the default scheduler (none runs here: it stays pending).
    assert get_pod(plane, ns, "plain")["spec"]["schedulerName"] == "default-scheduler"

"""Fixtures for end-to-end tests: a real etcd + kube-apiserver + kube-controller-manager.

The control plane is started once per test session on loopback (``kdra_devenv``), with kdra's
CRDs installed and their conversion webhook served by a ``kdra webhooks`` process for the
whole session (tests/e2e/conversion.py says why). When a test fails, the last lines of every
component's log are attached to its report. Nothing here is mocked: a test that needs an API
server gets the real one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kdra.operator.core.webhook_configs import MUTATING_CONFIG, TLS_SECRET, VALIDATING_CONFIG
from kdra_devenv.controlplane import (
    CONTROLLERS,
    WEBHOOK_CLIENT,
    ControlPlane,
    binaries,
    free_port,
)
from kdra_devenv.process import sweep
from kdra_devenv.realcluster import NAMESPACE as SYSTEM_NAMESPACE
from tests.e2e.conversion import ConversionServer
from tests.e2e.procs import KdraProcess, wait_for

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
POD_GROUP_CRD = ROOT / "manifests" / "optional" / "podgroups-crd.yaml"
WORKLOAD_CONTROLLERS = ("deployment-controller", "replicaset-controller")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.e2e)


@dataclass(frozen=True)
class Cluster:
    plane: ControlPlane
    conversion: ConversionServer


@pytest.fixture(scope="session")
def e2e_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Left-overs of an earlier run that was killed before it could stop its processes (they
    # die with their parent, but a grandchild may not): only processes kdra's tooling started
    # for a run under the same root, whose owner is gone. Concurrent runs are left alone.
    root = Path(os.environ["KDRA_E2E_DIR"]) if os.environ.get("KDRA_E2E_DIR") \
        else tmp_path_factory.getbasetemp().parent
    if swept := sweep(root):
        print(f"killed {len(swept)} left-over processes of earlier runs under {root}")
    workdir = Path(os.environ.get("KDRA_E2E_DIR") or tmp_path_factory.mktemp("control-plane"))
    # Deployments and ReplicaSets: users' pods come from them (test_extended.py).
    with running_cluster(workdir, controllers=(*CONTROLLERS, *WORKLOAD_CONTROLLERS)) as cluster:
        yield cluster


@contextmanager
def operator_with_webhooks(plane: ControlPlane, conversion_server: ConversionServer,
                           log: Path, *extra: str) -> Iterator[tuple[KdraProcess, int]]:
    """``kdra operator`` with its webhooks on (managing their configurations) and ``extra``
    flags, and its webhook port. Afterwards the configurations and the Secret it leaves
    behind (on purpose: failing closed) are removed, and the CRDs' conversion (which it points
    at itself) goes back to the session's webhook server."""
    plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    port = free_port()
    proc = KdraProcess(
        ["operator", "--health-port", "0", *extra, "--webhook-port", str(port),
         "--webhook-host", "127.0.0.1", "--webhook-url", f"https://127.0.0.1:{port}",
         "--webhook-manage-config", "true", "--webhook-client-ca", str(plane.webhook_client_ca),
         "--webhook-client-names", WEBHOOK_CLIENT],
        log, plane.kubeconfig, ready_line="kdra operator started")
    proc.start(timeout=120)
    try:
        yield proc, port
    finally:
        conversion_server.point(plane)
        proc.stop()
        for kind, name in (("mutatingwebhookconfiguration", MUTATING_CONFIG),
                           ("validatingwebhookconfiguration", VALIDATING_CONFIG)):
            plane.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        plane.kubectl("delete", "secret", TLS_SECRET, "-n", SYSTEM_NAMESPACE,
                      "--ignore-not-found", check=False)


@contextmanager
def running_cluster(workdir: Path, **options: Any) -> Iterator[Cluster]:
    """A started control plane (``options`` go to :class:`ControlPlane`) with kdra's CRDs
    installed and their conversion webhook served; both stopped on exit."""
    plane = ControlPlane(workdir, binaries(), **options).start()
    conversion = ConversionServer(workdir, plane.kubeconfig)
    try:
        # v1 is stored; v1alpha3 objects (the seed's, many tests') need the conversion
        # webhook from the first test on, operator or not (tests/e2e/conversion.py).
        conversion.start().install_crds(plane, CRDS)
        plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s",
                      "-f", str(CRDS))
        yield Cluster(plane, conversion)
    finally:
        conversion.stop()
        plane.stop()


@pytest.fixture(scope="session")
def control_plane(e2e_cluster: Cluster) -> ControlPlane:
    return e2e_cluster.plane


@pytest.fixture(scope="session")
def conversion_server(e2e_cluster: Cluster) -> ConversionServer:
    return e2e_cluster.conversion


@pytest.fixture(scope="session")
def kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.kubeconfig


@pytest.fixture
def kubectl(control_plane: ControlPlane) -> Any:
    return control_plane.kubectl


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting). A test name too long
    for the namespace is cut and given a hash of the whole name, so that two cases of one
    parametrized test (whose ids differ past the cut) never share a namespace: the second
    would find the first's still being deleted."""
    raw = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())
    name = ("t-" + raw[:50]).strip("-")
    if len(raw) > 50:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:6]
        name = f"t-{raw[:43].strip('-')}-{digest}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    # There is no kubelet to finish graceful deletion of bound pods: force it, as a kubelet
    # would, so the namespace (and the devices its claims hold) really goes away.
    control_plane.kubectl("delete", "pods", "--all", "-n", name, "--grace-period=0", "--force",
                          "--wait=false", check=False)
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def ns(control_plane: ControlPlane, namespace: str) -> str:
    """The test's namespace, once its default ServiceAccount exists (pods need it)."""
    wait_for(lambda: control_plane.kubectl("get", "serviceaccount", "default", "-n", namespace,
                                           check=False).returncode == 0,
             what="default ServiceAccount")
    return namespace


def get_json(control_plane: ControlPlane, *args: str) -> Any:
    return json.loads(control_plane.kubectl("get", *args, "-o", "json").stdout)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
    if report.failed and "control_plane" in getattr(item, "fixturenames", ()):
        plane = item.funcargs.get("control_plane") if hasattr(item, "funcargs") else None
        if isinstance(plane, ControlPlane):
            report.sections.append(("control plane logs", plane.logs()))


@pytest.fixture(scope="session")
def pod_group_crd(control_plane: ControlPlane) -> Iterator[None]:
    """scheduler-plugins' PodGroup CRD (kdra's optional copy,
    manifests/optional/podgroups-crd.yaml) installed — session-scoped, so before any test's
    operator starts (it looks for the CRD at start-up); tests/e2e/test_gangs.py, test_native."""
    control_plane.kubectl("apply", "--server-side", "-f", str(POD_GROUP_CRD))
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          "crd/podgroups.scheduling.x-k8s.io")
    yield
    control_plane.kubectl("delete", "crd", "podgroups.scheduling.x-k8s.io", "--wait=false",
                          check=False)


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> Any:
    """The official Kubernetes Python client, configured for the test control plane."""
    import kubernetes

    client = kubernetes.config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    return client


@pytest.fixture
def operator(control_plane: ControlPlane, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[Any]:
    """kdra's operator as a real process for one test (stopped and its log attached on failure)."""
    from tests.e2e.procs import KdraProcess

    proc = KdraProcess(["operator", "--health-port", "0"], tmp_path / "operator.log",
                       control_plane.kubeconfig, ready_line="kdra operator started")
    proc.start()
    yield proc
    proc.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"===== operator log =====\n{proc.tail(200)}")

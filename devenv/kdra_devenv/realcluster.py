"""kdra as a user deploys it, on the real node of this machine: a control plane, one kubelet
node, kdra's image built from the Dockerfile, and the manifests applied with kubectl.

:class:`RealCluster` puts together :mod:`kdra_devenv.controlplane` (with kube-scheduler and
the workload controllers), :mod:`kdra_devenv.node` (containerd, CNI, kubelet) and the images
(:mod:`kdra_devenv.imagebuild` for kdra's, :mod:`kdra_devenv.images` for the pause and
busybox images), then deploys as the README says: ``kubectl apply --server-side -k`` the CRDs,
waits for them, applies ``manifests/overlays/node`` (operator Deployment with two replicas and
leader election, agent DaemonSet, RBAC, policies, webhooks) and waits until the operator and
agent pods are Ready and the agent's ResourceSlices are published. The examples
(``manifests/overlays/node/examples``) are applied on request.

``native=True`` runs the native flavour: the control plane and the node as
:func:`kdra_devenv.node.control_plane` and :class:`kdra_devenv.node.Node` make them with
``native`` (kube-scheduler and kube-controller-manager's resourceclaim-controller allocate
``resource.k8s.io/v1`` claims, the kubelet reports device health), and
``manifests/overlays/node-native`` (the agent as the kubelet's DRA plugin), its kubelet paths
pointed at this node's kubelet root directory (:func:`at_kubelet_root`).

Used by ``python -m kdra_devenv node up``, ``python -m kdra_devenv demo --node real``,
``tests/node`` and ``bench/node.py``.

Invariants:
- Set-up steps are timed (:attr:`RealCluster.timings`, seconds), so the cold and cached
  set-up figures come from the same code the tests run.
- :meth:`RealCluster.stop` (also after a failed start) stops the node first (its pods, kubelet,
  containerd, the host changes) and then the control plane.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kdra_devenv.containerd import SANDBOX_IMAGE
from kdra_devenv.containerd import binaries as containerd_binaries
from kdra_devenv.controlplane import ControlPlane, binaries, repo_root
from kdra_devenv.hostledger import LedgerError
from kdra_devenv.imagebuild import kdra_image
from kdra_devenv.images import BUSYBOX, busybox_files, oci_archive, static_pause
from kdra_devenv.node import (
    NODE_NAME,
    Node,
    NodeError,
    control_plane,
    ensure_packages,
    ledger,
)

__all__ = ["BUSYBOX_IMAGE", "NAMESPACE", "RealCluster", "at_kubelet_root", "busybox_applets"]

BUSYBOX_IMAGE = "localhost/busybox:static"
"""The test image of user pods (manifests/overlays/node/examples): Debian's static busybox."""
NAMESPACE = "kdra-system"
#: What buildah creates on the host whatever its --root says (its CNI lock, containers/image's
#: blob cache): removed after the build when the build created them.
BUILDAH_PATHS = (Path("/etc/cni"), Path("/var/lib/containers"))


def busybox_applets() -> list[str]:
    """Every applet the host's static busybox offers (the test image gets them all)."""
    listed = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True,
                            check=False).stdout.split()
    return sorted({a for a in listed if a.isidentifier() or a.replace("-", "").isalnum()}
                  - {"busybox"})


KUBELET_ROOT = "/var/lib/kubelet"


def at_kubelet_root(objects: list[dict[str, Any]], root: Path) -> list[dict[str, Any]]:
    """``objects`` with every DaemonSet's paths below the kubelet's standard root directory
    (hostPath volumes, mount paths, env values) moved below ``root``, a kubelet's
    ``--root-dir``: what an administrator does for a kubelet with another root."""

    def moved(path: str) -> str:
        if path == KUBELET_ROOT or path.startswith(KUBELET_ROOT + "/"):
            return str(root) + path[len(KUBELET_ROOT):]
        return path

    for obj in objects:
        if obj.get("kind") != "DaemonSet":
            continue
        pod = obj["spec"]["template"]["spec"]
        for volume in pod.get("volumes") or ():
            if "hostPath" in volume:
                volume["hostPath"]["path"] = moved(volume["hostPath"]["path"])
        for container in pod.get("containers") or ():
            for mount in container.get("volumeMounts") or ():
                mount["mountPath"] = moved(mount["mountPath"])
            for env in container.get("env") or ():
                if isinstance(env.get("value"), str):
                    env["value"] = moved(env["value"])
    return objects


class RealCluster:
    """See the module docstring. ``progress`` gets one line per step."""

    def __init__(self, workdir: Path, *, progress: Callable[[str], None] | None = None,
                 native: bool = False) -> None:
        self.workdir = workdir
        self.native = native
        self.progress = progress or (lambda _line: None)
        self.plane: ControlPlane | None = None
        self.node: Node | None = None
        self.timings: dict[str, float] = {}
        self.image_cached: bool | None = None
        self.host = ledger()

    # ------------------------------------------------------------------ helpers

    def _step(self, name: str, started: float) -> None:
        self.timings[name] = round(time.monotonic() - started, 2)
        self.progress(f"{name}: {self.timings[name]:.1f} s")

    def kubectl(self, *args: str, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self.plane is not None, "start the cluster first"
        return self.plane.kubectl(*args, input=input, check=check)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    # ------------------------------------------------------------------ life

    def start(self, *, deploy: bool = True, timeout: float = 300.0) -> RealCluster:
        try:
            self._start(deploy, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, deploy: bool, timeout: float) -> None:
        total = time.monotonic()
        started = time.monotonic()
        installed = ensure_packages()
        if installed:
            self.progress(f"installed Debian packages: {', '.join(installed)}")
        bin_dir = binaries()
        containerd_binaries()
        self._step("packages and binaries", started)

        try:  # the host, from here on: the image build changes it too (buildah)
            self.host.acquire(take_over=False)  # a running node is stopped by `down` only
        except LedgerError as exc:
            raise NodeError(str(exc)) from exc
        for path in BUILDAH_PATHS:
            self.host.watch_directory(path, owned_if_created=True)

        started = time.monotonic()
        images = self.workdir / "images"
        images.mkdir(parents=True, exist_ok=True)
        archives = [
            oci_archive(images / "pause.tar", SANDBOX_IMAGE, {"pause": static_pause()},
                        entrypoint=["/pause"]),
            oci_archive(images / "busybox.tar", BUSYBOX_IMAGE,
                        busybox_files(applets=busybox_applets()), entrypoint=["/bin/sh"]),
        ]
        if deploy:  # kdra's own image only when kdra is deployed
            kdra = kdra_image()
            self.image_cached = kdra.cached
            archives.append(kdra.archive)
        self._step("images" + ("" if self.image_cached is None else
                               " (cached)" if self.image_cached else " (built)"), started)

        started = time.monotonic()
        self.plane = control_plane(self.workdir / "control-plane", bin_dir,
                                   native=self.native).start()
        self._step("control plane", started)

        started = time.monotonic()
        self.node = Node(self.plane, self.workdir / "node", images=archives,
                         host=self.host, native=self.native).start()
        self.timings.update({f"node: {k}": v for k, v in self.node.timings.items()})
        self._step("node", started)
        if deploy:
            started = time.monotonic()
            self.deploy(timeout)
            self._step("deploy (CRDs, overlay, pods Ready, slices)", started)
        self.timings["total"] = round(time.monotonic() - total, 2)

    def stop(self) -> list[str]:
        """Stop the node, undo every host change, stop the control plane; returns what could
        not be undone (kept in the ledger for ``python -m kdra_devenv node down``)."""
        errors: list[str] = []
        if self.node is not None:
            errors = self.node.stop()
            self.node = None
        if self.host.held:
            errors += self.host.undo()
            self.host.release()
        if self.plane is not None:
            self.plane.stop()
            self.plane = None
        return errors

    def __enter__(self) -> RealCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ deploy

    def deploy(self, timeout: float = 300.0) -> None:
        """Install kdra as the README says, on this node (see the module docstring)."""
        manifests = repo_root() / "manifests"
        self.kubectl("apply", "--server-side", "-k", str(manifests / "base" / "crds"))
        self.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "crd",
                     "-l", "app.kubernetes.io/part-of=kdra")
        if self.native:
            assert self.node is not None
            rendered = self.kubectl("kustomize", str(manifests / "overlays" / "node-native"))
            objects = at_kubelet_root([o for o in yaml.safe_load_all(rendered.stdout) if o],
                                      self.node.kubelet_dir)
            self.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(
                {"apiVersion": "v1", "kind": "List", "items": objects}))
        else:
            self.kubectl("apply", "--server-side", "-k", str(manifests / "overlays" / "node"))
        for workload in ("deployment/kdra-operator", "daemonset/kdra-agent"):
            result = self.kubectl("-n", NAMESPACE, "rollout", "status", workload,
                                  f"--timeout={int(timeout)}s", check=False)
            if result.returncode != 0:
                raise NodeError(f"{workload} did not roll out: {result.stderr.strip()}\n"
                                f"{self.diagnose()}")
        self.wait_for(self._slices_published, "the agent's ResourceSlices", timeout)

    def _slices_published(self) -> bool:
        kind = "resourceslices.resource.k8s.io" if self.native else \
            "resourceslices.resource.kdra.dev"
        slices = self.get_json(kind)["items"]
        drivers = {s["spec"]["driver"] for s in slices
                   if s["spec"].get("nodeName") == NODE_NAME}
        return {"gpu.kdra.dev", "resource-driver.example.com"} <= drivers

    def apply_examples(self) -> None:
        """The GPU examples and the seed's cats (manifests/overlays/node/examples)."""
        self.kubectl("apply", "-k", str(repo_root() / "manifests" / "overlays" / "node" /
                                        "examples"))

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.5)
        raise NodeError(f"{what}: not there after {timeout:.0f} s\n{self.diagnose()}")

    def diagnose(self) -> str:
        """Pods, events and the last kubelet lines: what a failure message should carry."""
        if self.plane is None:
            return ""
        parts = [self.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout,
                 self.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp",
                              check=False).stdout[-4000:]]
        if self.node is not None:
            parts.append("kubelet:\n" + self.node.logs(30))
        return "\n".join(parts)


"""``kdra demo``: the seed article's example on a local control plane of real binaries.

Starts etcd + kube-apiserver + kube-controller-manager on loopback, installs kdra's CRDs,
applies ``manifests/examples/seed`` (the cats) and prints what the API server now holds.
With ``interactive`` it keeps running until Ctrl-C and prints a KUBECONFIG to explore with;
otherwise it stops after printing (what CI runs).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from kdra.devenv.controlplane import ControlPlane, ControlPlaneError, binaries, repo_root


def run_demo(interactive: bool = True, workdir: str | None = None) -> int:
    root = repo_root()
    crds, examples = root / "crds", root / "manifests" / "examples" / "seed"
    if not crds.is_dir() or not examples.is_dir():
        print(f"kdra demo: run from a source checkout ({crds} / {examples} missing)",
              file=sys.stderr)
        return 2
    owned = workdir is None
    directory = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kdra-demo-"))
    _step("starting etcd, kube-apiserver, kube-controller-manager (real binaries)")
    try:
        plane = ControlPlane(directory, binaries()).start()
    except ControlPlaneError as exc:
        print(f"kdra demo: {exc}", file=sys.stderr)
        return 1
    try:
        _step("installing CRDs")
        plane.kubectl("apply", "--server-side", "-k", str(crds))
        plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s",
                      "-f", str(crds))
        _step("applying the seed's example (manifests/examples/seed)")
        print(plane.kubectl("apply", "-k", str(examples)).stdout, end="")
        _step("kubectl get kdra -A")
        print(plane.kubectl("get", "kdra", "-A").stdout, end="")
        _step("the cats on offer (ResourceSlice devices)")
        print(plane.kubectl(
            "get", "resourceslices.resource.kdra.dev", "-o",
            "custom-columns=SLICE:.metadata.name,NODE:.spec.nodeName,"
            "DEVICES:.spec.devices[*].name",
        ).stdout, end="")
        if interactive:
            print(f"\nexport KUBECONFIG={plane.kubeconfig}\nCtrl-C stops everything.",
                  flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    except ControlPlaneError as exc:
        print(f"kdra demo: {exc}", file=sys.stderr)
        return 1
    finally:
        plane.stop()
        if owned:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


def _step(text: str) -> None:
    print(f"==> {text}", flush=True)

"""``python -m kdra_devenv node up`` and ``python -m kdra_devenv node down``: the real node of this
machine, from a shell.

``up`` starts a control plane and the node (:class:`kdra_devenv.realcluster.RealCluster`),
deploys kdra with its manifests unless ``--no-deploy`` (``--flavour native``: the native
flavour, manifests/overlays/node-native), applies the examples with ``--examples``, prints
``export KUBECONFIG=...`` and the set-up times, and runs until Ctrl-C, SIGTERM or SIGHUP,
which stop everything it started and undo every host change. ``down`` stops a running node
from another shell (it asks it to stop, and waits), or - when the one that ran was killed -
undoes what it left on the host (the ledger in ``~/.cache/kdra/node``). Both need root.

Invariants:
- ``up`` exits non-zero, with the host as it was, when any step fails.
- ``down`` is idempotent: with nothing running and nothing recorded it does nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path

from kdra_devenv.controlplane import ControlPlaneError
from kdra_devenv.hostledger import LedgerError
from kdra_devenv.imagebuild import ImageBuildError
from kdra_devenv.node import NodeError, down
from kdra_devenv.realcluster import RealCluster

__all__ = ["node_down", "node_up"]


class _Stopped(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_on_signal(signum: int, _frame: object) -> None:
    for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(each, signal.SIG_IGN)  # once: the clean-up must not be interrupted
    raise _Stopped(signum)


def _say(line: str) -> None:
    print(f"kdra node: {line}", file=sys.stderr, flush=True)


def node_up(*, workdir: str | None, deploy: bool, examples: bool, wait: bool = True,
            native: bool = False) -> int:
    if os.geteuid() != 0:
        _say("needs root (containerd, runc, kubelet, the pod network)")
        return 2
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on_signal)
    directory = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kdra-node-"))
    cluster = RealCluster(directory, progress=_say, native=native)
    try:
        cluster.start(deploy=deploy)
        if examples:
            cluster.apply_examples()
        assert cluster.plane is not None
        print(f"export KUBECONFIG={cluster.plane.kubeconfig}", flush=True)
        _say("ready: " + ", ".join(f"{k} {v:.1f} s" for k, v in cluster.timings.items()))
        if wait:
            _say("Ctrl-C (or kdra node down) stops it and undoes every host change")
            while True:
                signal.pause()
        return 0
    except _Stopped as stopped:
        return 128 + stopped.signum
    except (NodeError, ControlPlaneError, ImageBuildError, LedgerError) as exc:
        _say(f"failed: {exc}")
        return 1
    finally:
        errors = cluster.stop()
        if errors:
            _say(f"{len(errors)} host changes could not be undone (see above); "
                 "`python -m kdra_devenv node down` retries")


def node_down() -> int:
    if os.geteuid() != 0:
        _say("needs root")
        return 2
    try:
        errors = down()
    except NodeError as exc:
        _say(str(exc))
        return 1
    for error in errors:
        _say(f"not undone: {error}")
    return 1 if errors else 0

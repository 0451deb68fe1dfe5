"""The real-node tier: containers really run (containerd 2.x, runc, CNI, kubelet).

Every test here gets the ``node`` marker. The tier needs root and a machine that can run
containers; where it cannot, each test is skipped with the exact reason - unless
``KDRA_REQUIRE_NODE=1`` (CI sets it), which turns that skip into a failure, so a CI machine
that lost the ability to run containers cannot pass by skipping.

``host_before`` is the host's state (:mod:`tests.node.hoststate`) before the first test of
the tier changed anything; ``test_host.py`` compares it with the state after the deployed
cluster (``tests/node/deployed``) is gone. A node that was killed before this run (an earlier
run cut off mid-tier) left its changes in the host ledger: they are undone first, as the next
``node up`` would undo them, and said so - the snapshot is then the host without them, and
every change this run makes is still compared.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra_devenv.containerd import missing_prerequisites
from kdra_devenv.node import down, ledger
from kdra_devenv.realcluster import RealCluster
from tests.node import hoststate

#: Seconds a test of the tier may take, its fixtures included: the first one builds kdra's image
#: and the node's base image when they are not cached (10-15 minutes on 2 busy cores).
TIMEOUT = 2700


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.node)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(TIMEOUT))


def why_not() -> str:
    """Why containers cannot run on this machine ('' when they can). Missing Debian
    packages are not a reason: the node installs them."""
    problems = missing_prerequisites()
    problems = [p for p in problems if "runc" not in p]  # installed by the node itself
    if shutil.which("apt-get") is None and shutil.which("runc") is None:
        problems.append("no runc and no apt-get to install it")
    if shutil.which("go") is None and not (
            Path(os.environ.get("KDRA_CACHE", Path.home() / ".cache" / "kdra")) / "bin").is_dir():
        problems.append("no Go toolchain to build kubelet and containerd")
    return "; ".join(problems)


def require_node() -> None:
    """Skip (or fail, under KDRA_REQUIRE_NODE=1) when containers cannot run here."""
    reason = why_not()
    if not reason:
        return
    if os.environ.get("KDRA_REQUIRE_NODE") == "1":
        pytest.fail(f"KDRA_REQUIRE_NODE=1 but this machine cannot run containers: {reason}")
    pytest.skip(f"this machine cannot run containers: {reason}")


def undo_a_killed_nodes_changes() -> list[str]:
    """Undo the changes a killed node left in the host ledger (``node down``'s undo, without
    stopping a node that still runs: NodeError); returns the kinds of change undone."""
    left = ledger().entries()
    if not left:
        return []
    errors = down(take_over=False)
    assert not errors, f"a killed node's host changes could not be undone: {errors}"
    return sorted({str(entry.get("kind", "?")) for entry in left})


@pytest.fixture(scope="session")
def host_before() -> dict[str, str]:
    require_node()
    undone = undo_a_killed_nodes_changes()
    if undone:
        print(f"\nhost: a killed node's changes undone before the tier ({', '.join(undone)})")
    return hoststate.snapshot()


def deployed_cluster(workdir: Path, *, native: bool = False) -> Iterator[RealCluster]:
    """A package's cluster: kdra deployed on the real node (``native``: the native flavour),
    its set-up times printed (cold: nothing cached; cached: image and binaries there), stopped
    at the end with every host change undone."""
    require_node()
    lines: list[str] = []
    real = RealCluster(workdir, progress=lines.append, native=native)
    try:
        real.start(deploy=True)
    except BaseException:
        print("\n".join(lines))
        raise
    figures = ", ".join(f"{k} {v:.1f} s" for k, v in real.timings.items())
    print(f"\nnode tier set-up{' (native)' if native else ''} "
          f"({'cached' if real.image_cached else 'image built'}): {figures}")
    try:
        yield real
    finally:
        errors = real.stop()
        assert not errors, f"host changes not undone: {errors}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test of a real cluster (fixture ``cluster``) gets the cluster's pods, events
    and kubelet lines in its report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and hasattr(item, "funcargs"):
        real = item.funcargs.get("cluster")
        if isinstance(real, RealCluster):
            report.sections.append(("real node", real.diagnose()))

"""Child processes of kdra's tooling that end when their parent ends, however it ends.

The control plane, the demo, the test fixtures, the benchmarks and the real-node tier start
long-running servers (etcd, kube-apiserver, operators, agents, kubelet, containerd). Each runs in
a session of its own, so a signal meant for it reaches its whole process group and a Ctrl-C at
the terminal reaches only the parent, which then stops its children in order. That leaves the
case where the parent never gets to stop them: SIGKILL, an OOM kill, a CI time limit.

Invariants:
- Every process started by :func:`spawn` gets ``SIGKILL`` when this process ends (Linux
  ``PR_SET_PDEATHSIG``). The kernel sends it when the *thread* that forked the child ends, so
  :func:`spawn` forks only from the main thread or from one spawner thread that lives as long as
  the process: a child started from a worker thread (``asyncio.to_thread``) outlives that
  worker. If the parent is already gone when the child starts, the child exits at once.
- Every such process carries ``KDRA_DEVENV_OWNER=<pid>:<start time>:<run directory>`` in its
  environment (and passes it on to its own children). :func:`sweep` kills only processes whose
  marker names a run directory under the given root and whose owner no longer exists: a
  concurrent run, whose owner is alive, is never touched (unless the caller owns that run
  directory and says so: ``include_live``, for a node's clean-up of its own processes).
- :func:`terminate` stops a process group with SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["OWNER_ENV", "children", "is_running", "spawn", "sweep", "terminate"]

#: Environment variable marking a process as started by kdra's tooling (see module docstring).
OWNER_ENV = "KDRA_DEVENV_OWNER"

_PR_SET_PDEATHSIG = 1


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def is_running(pid: int) -> bool:
    """Whether ``pid`` exists and has not ended (a zombie has ended: only its entry is left
    until its parent reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def _owner_marker(run_dir: Path) -> str:
    pid = os.getpid()
    return f"{pid}:{_start_time(pid) or 0}:{run_dir.resolve()}"


def _prctl() -> Any:
    """libc's ``prctl``, looked up in the parent (no dlopen between fork and exec), or None."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _die_with_parent(parent: int) -> None:
    """Runs in the child between fork and exec: ask for SIGKILL when the parent dies."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def spawn(cmd: Sequence[str | os.PathLike[str]], *, run_dir: Path,
          stdout: IO[Any] | int | None = None, stderr: IO[Any] | int | None = None,
          stdin: IO[Any] | int | None = subprocess.DEVNULL,
          env: Mapping[str, str] | None = None, cwd: Path | None = None,
          text: bool = False) -> subprocess.Popen[Any]:
    """Start ``cmd`` in a new session, tied to this process's life (see module docstring).

    ``run_dir`` is the work directory of the run the process belongs to (what :func:`sweep`
    matches). ``env`` defaults to this process's environment.
    """
    environment = dict(os.environ if env is None else env)
    environment[OWNER_ENV] = _owner_marker(run_dir)
    parent = os.getpid()

    def fork() -> subprocess.Popen[Any]:
        return subprocess.Popen(
            [os.fspath(c) for c in cmd], stdout=stdout, stderr=stderr, stdin=stdin,
            env=environment, cwd=cwd, text=text, start_new_session=True,
            preexec_fn=lambda: _die_with_parent(parent),
        )

    if threading.current_thread() is threading.main_thread():
        return fork()
    return _spawner().submit(fork).result()


@functools.cache
def _spawner() -> concurrent.futures.ThreadPoolExecutor:
    """One thread that forks for every other thread: it lives until the process exits."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdra-spawn")


def terminate(popen: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """SIGTERM the process group of ``popen``, SIGKILL it after ``grace`` seconds."""
    if popen.poll() is not None:
        return
    try:
        os.killpg(popen.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        popen.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()


def _markers() -> Iterator[tuple[int, str]]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        prefix = OWNER_ENV.encode() + b"="
        for item in environ.split(b"\0"):
            if item.startswith(prefix):
                yield int(entry.name), item[len(prefix):].decode(errors="replace")
                break


def sweep(root: Path, *, include_live: bool = False) -> list[int]:
    """Kill left-overs of earlier runs under ``root``: processes whose marker names a run
    directory under ``root`` and whose owner process is gone (``include_live``: whether or
    not it is; never this process). Returns the PIDs killed."""
    root = root.resolve()
    killed = []
    for pid, marker in _markers():
        owner, _, rest = marker.partition(":")
        started, _, run_dir = rest.partition(":")
        if not owner.isdigit() or not Path(run_dir).is_relative_to(root) or pid == os.getpid():
            continue
        if not include_live and _start_time(int(owner)) == started:
            continue  # its owner is alive: a run in progress
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` now alive (from /proc), depth first."""
    by_parent: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        by_parent.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    stack = list(by_parent.get(pid, []))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(by_parent.get(child, []))
    return found

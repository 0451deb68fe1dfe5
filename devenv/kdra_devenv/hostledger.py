"""What the real-node tier changed on this host, written down before each change, and undone.

The real node (:mod:`kdra_devenv.node`) runs as root on a shared machine and changes host-wide
state: an address on ``lo``, a bridge, an nftables table, sysctls (its own and the ones kubelet
and the CNI bridge plugin set), a cgroup in every hierarchy, mounts under its work directory,
files in ``/var/run/cdi`` and other well-known directories. Every such change goes through a
:class:`HostLedger`, which appends an entry describing it to a JSON file (flushed to disk)
**before** making it. :meth:`HostLedger.undo` reverts every entry, in phases: processes first
(nothing may recreate what is being removed), then containers and cgroups, mounts, the network,
sysctls, and files last. It runs at ``down``, after a failed start, and - because the file
outlives its writer - at the next start after the writer was SIGKILLed.

One node runs on a host at a time: :meth:`HostLedger.lock` takes an exclusive ``flock`` for the
node's lifetime; another process that wants the host (``python -m kdra_devenv node down``, a new
``up``) asks the holder to stop (SIGTERM) and waits, or undoes a dead holder's ledger.

Invariants:
- An entry is on disk before its change is attempted; undoing an entry whose change never
  happened (or already was undone) is a no-op, so :meth:`HostLedger.undo` is idempotent.
- Only what was recorded is undone: a value, address, link, table, cgroup or file that
  existed before it was recorded is restored to its recorded state, never removed.
- Every entry's undo is attempted even when another fails; failures are returned (and the
  ledger keeps the failed entries for the next attempt), never raised half-way.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kdra_devenv.process import sweep

__all__ = ["HostLedger", "LedgerError", "cgroup_hierarchies", "mounts_under", "unmount_under"]

Entry = dict[str, Any]

class LedgerError(RuntimeError):
    """The host is in use by another node, or a recorded change could not be made."""


def _run(*cmd: str, check: bool = True,
         input: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, input=input, check=False)
    if check and result.returncode != 0:
        raise LedgerError(f"{' '.join(cmd)} failed ({result.returncode}): "
                          f"{result.stderr.strip()[-1000:]}")
    return result


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def _decode_mount_point(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\ooo`` octal."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and len(field[i + 1:i + 4]) == 3:
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root`` (this process's mount namespace), deepest first."""
    base = str(root.resolve()) if root.exists() else str(root)
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            if len(fields) < 5:
                continue
            point = _decode_mount_point(fields[4])
            if point == base or point.startswith(base + "/"):
                points.append(point)
    return sorted(set(points), key=lambda p: (p.count("/"), len(p)), reverse=True)


_LIBC = ctypes.CDLL(None, use_errno=True)
_MNT_DETACH = 2


def unmount_under(root: Path) -> list[str]:
    """Detach every mount at or below ``root``, deepest first; returns what still failed."""
    failed = []
    for _ in range(3):  # a detached parent can reveal mounts that were stacked under it
        points = mounts_under(root)
        if not points:
            return []
        failed = [p for p in points if _LIBC.umount2(p.encode(), _MNT_DETACH) != 0]
    return failed


def cgroup_hierarchies() -> list[Path]:
    """The mount points of every cgroup hierarchy (v1 controllers, named ones, or v2)."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            before, _, after = line.partition(" - ")
            if after.split(" ", 1)[0] in ("cgroup", "cgroup2"):
                found.append(Path(_decode_mount_point(before.split()[4])))
    return sorted(set(found))


class HostLedger:
    """The ledger file ``<directory>/ledger.json`` and the host lock ``<directory>/lock``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "ledger.json"
        self._lock_fd: int | None = None

    # ------------------------------------------------------------------ file

    def entries(self) -> list[Entry]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return []
        entries = data.get("entries") if isinstance(data, dict) else None
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    def owner(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        owner = data.get("owner") if isinstance(data, dict) else None
        return owner if isinstance(owner, dict) else {}

    def _write(self, entries: list[Entry], owner: dict[str, Any] | None = None) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        body = {"owner": self.owner() if owner is None else owner, "entries": entries}
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w") as out:
            json.dump(body, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(self.path)

    def record(self, entry: Entry) -> None:
        """Append ``entry`` (on disk when this returns)."""
        self._write([*self.entries(), entry])

    # ------------------------------------------------------------------ lock

    @contextlib.contextmanager
    def lock(self, *, take_over: bool = True, timeout: float = 90.0) -> Iterator[None]:
        """Hold the host for a node: an exclusive lock, and the ledger of a previous holder
        undone first. A live holder is asked to stop (SIGTERM) when ``take_over``; otherwise,
        or when it does not let go within ``timeout`` seconds, LedgerError."""
        self.acquire(take_over=take_over, timeout=timeout)
        try:
            yield
        finally:
            self.release()

    def acquire(self, *, take_over: bool = True, timeout: float = 90.0) -> list[str]:
        """Take the lock (see :meth:`lock`), undo a previous holder's ledger and record this
        process as the owner. Returns the previous ledger's undo failures."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + timeout
        asked = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pid = int(self.owner().get("pid") or 0)
                if not take_over or time.monotonic() > deadline:
                    os.close(fd)
                    raise LedgerError(
                        f"another kdra node runs on this host (pid {pid or '?'}, ledger "
                        f"{self.path}); stop it with `python -m kdra_devenv node down`") from None
                if pid and not asked:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGTERM)
                    asked = True
                time.sleep(0.5)
        self._lock_fd = fd
        failures = self.undo()
        self._write(self.entries(), owner={"pid": os.getpid()})
        return failures

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def held(self) -> bool:
        """Whether this object holds the host (between :meth:`acquire` and :meth:`release`)."""
        return self._lock_fd is not None

    # ------------------------------------------------------------------ changes

    def set_sysctl(self, key: str, value: str) -> None:
        """Record ``key``'s current value, then set it."""
        self.keep_sysctl(key)
        _sysctl_path(key).write_text(value)

    def keep_sysctl(self, key: str) -> None:
        """Record ``key``'s current value, restored at undo (for a value someone else - kubelet,
        a CNI plugin - is about to change)."""
        path = _sysctl_path(key)
        if path.exists():
            self.record({"kind": "sysctl", "key": key, "value": path.read_text().strip()})

    def add_address(self, device: str, cidr: str) -> None:
        """Add ``cidr`` to ``device`` unless it is there (then it is not the ledger's)."""
        if cidr in _run("ip", "-o", "addr", "show", "dev", device).stdout.split():
            return
        self.record({"kind": "address", "device": device, "cidr": cidr})
        _run("ip", "addr", "add", cidr, "dev", device)

    def add_bridge(self, name: str, cidr: str) -> None:
        """Create bridge ``name`` with address ``cidr``, up."""
        if _run("ip", "link", "show", name, check=False).returncode == 0:
            raise LedgerError(f"a link named {name} exists already: another node, or a "
                              f"left-over of one (`ip link del {name}` if it is unused)")
        self.record({"kind": "link", "name": name})
        _run("ip", "link", "add", "name", name, "type", "bridge")
        _run("ip", "addr", "add", cidr, "dev", name)
        _run("ip", "link", "set", name, "up")

    def add_nft_table(self, name: str, body: str) -> None:
        """Load nftables table ``ip <name>`` (``body``: its chains); the table is the ledger's,
        removed whole at undo."""
        self.record({"kind": "nft-table", "name": name})
        _run("nft", "delete", "table", "ip", name, check=False)
        _run("nft", "-f", "-", input=f"table ip {name} {{\n{body}\n}}\n")

    def add_cgroup(self, name: str) -> None:
        """Create cgroup ``/<name>`` in every hierarchy (cpuset: the root's CPUs and memory
        nodes), removed at undo with everything left in it."""
        self.record({"kind": "cgroup", "name": name})
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / name
            path.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / knob).exists() and not (path / knob).read_text().strip():
                    (path / knob).write_text((hierarchy / knob).read_text())

    def watch_directory(self, path: Path, *, owned: bool = False, prefix: str | None = None,
                        links_into: Path | None = None, stale_sockets: bool = False,
                        mentions: str | None = None, owned_if_created: bool = False) -> None:
        """Record ``path``'s entries now. At undo, of the entries added since: all if
        ``owned`` (or ``owned_if_created`` and ``path`` does not exist now); those whose name
        starts with ``prefix``; symbolic links pointing below ``links_into``; unix sockets
        nobody listens on (``stale_sockets``); files whose first 64 KiB contain ``mentions``.
        ``path`` itself is removed if it did not exist and is then empty."""
        existed = path.is_dir()
        names = sorted(os.listdir(path)) if existed else []
        self.record({"kind": "dir", "path": str(path), "existed": existed, "entries": names,
                     "owned": owned or (owned_if_created and not existed), "prefix": prefix,
                     "links_into": str(links_into) if links_into else None,
                     "stale_sockets": stale_sockets, "mentions": mentions})

    def workdir(self, path: Path, *, remove: Path | None = None) -> None:
        """A node's work directory: at undo, processes marked as started for a run under it
        are killed (:func:`kdra_devenv.process.spawn`), everything mounted under it is
        detached, and ``remove`` (a directory in it: runtime state, not logs) is deleted."""
        self.record({"kind": "workdir", "path": str(path),
                     "remove": str(remove) if remove else None})

    def containerd(self, workdir: Path, cgroup_parent: str = "") -> None:
        """A containerd under ``workdir``: at undo, its containers, shims and mounts go
        (:meth:`kdra_devenv.containerd.Containerd.stop`)."""
        self.record({"kind": "containerd", "path": str(workdir), "cgroup": cgroup_parent})

    # ------------------------------------------------------------------ undo

    def undo(self) -> list[str]:
        """Undo every entry, phase by phase (see the module docstring); returns what failed
        (those entries stay in the ledger, as do entries of an unknown kind)."""
        entries = self.entries()
        errors: list[str] = []
        handled: set[int] = set()
        failed: set[int] = set()
        for phase in _PHASES:
            for index in reversed(range(len(entries))):
                entry = entries[index]
                handler = phase.get(str(entry.get("kind")))
                if handler is None:
                    continue
                handled.add(index)
                try:
                    handler(entry)
                except Exception as exc:  # keep going: every entry gets its chance
                    failed.add(index)
                    what = entry.get("path") or entry.get("name") or entry.get("key") or ""
                    errors.append(f"{entry.get('kind')} {what}: {exc}")
        errors += [f"unknown ledger entry kept: {e}" for i, e in enumerate(entries)
                   if i not in handled]
        self._write([e for i, e in enumerate(entries) if i in failed or i not in handled])
        return errors


# ---------------------------------------------------------------------- undo of each kind


def _undo_processes(entry: Entry) -> None:
    sweep(Path(entry["path"]), include_live=True)


def _undo_workdir_mounts(entry: Entry) -> None:
    left = unmount_under(Path(entry["path"]))
    if left:
        raise LedgerError(f"still mounted: {', '.join(left[:5])}")
    if entry.get("remove"):
        shutil.rmtree(entry["remove"], ignore_errors=True)


def _undo_containerd(entry: Entry) -> None:
    from kdra_devenv.containerd import Containerd  # the one place that knows containerd

    runtime = Containerd(Path(entry["path"]))
    if entry.get("cgroup"):
        runtime.cgroup_parent = str(entry["cgroup"])
    runtime.stop()


def _kill_cgroup(directory: Path, deadline: float) -> None:
    """SIGKILL every process in ``directory`` and its children until none is left."""
    while True:
        pids = []
        for procs in directory.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids += [int(p) for p in procs.read_text().split()]
        frozen = [f for f in directory.rglob("freezer.state")
                  if f.read_text().strip() != "THAWED"]
        for state in frozen:
            with contextlib.suppress(OSError):
                state.write_text("THAWED")
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise LedgerError(f"processes left in {directory}: {pids[:10]}")
        time.sleep(0.1)


def _undo_cgroup(entry: Entry) -> None:
    name = str(entry["name"]).strip("/")
    deadline = time.monotonic() + 20
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / name
        if top.is_dir():
            _kill_cgroup(top, deadline)
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / name
        if not top.is_dir():
            continue
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True):
            _rmdir_cgroup(directory, deadline)
        _rmdir_cgroup(top, deadline)


def _rmdir_cgroup(directory: Path, deadline: float) -> None:
    while True:  # a cgroup whose last process just died can be busy for a moment
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _undo_nft_table(entry: Entry) -> None:
    result = _run("nft", "delete", "table", "ip", str(entry["name"]), check=False)
    if result.returncode != 0 and "No such file" not in result.stderr:
        raise LedgerError(result.stderr.strip())


def _undo_link(entry: Entry) -> None:
    if _run("ip", "link", "show", str(entry["name"]), check=False).returncode == 0:
        _run("ip", "link", "del", str(entry["name"]))


def _undo_address(entry: Entry) -> None:
    device, cidr = str(entry["device"]), str(entry["cidr"])
    if cidr in _run("ip", "-o", "addr", "show", "dev", device, check=False).stdout.split():
        _run("ip", "addr", "del", cidr, "dev", device)


def _undo_sysctl(entry: Entry) -> None:
    path = _sysctl_path(str(entry["key"]))
    if path.exists() and path.read_text().strip() != entry["value"]:
        path.write_text(str(entry["value"]))


def _stale_socket(path: Path) -> bool:
    """A unix socket file nobody listens on (its server died without removing it)."""
    if not path.is_socket():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
    return False


def _mentions(path: Path, text: str) -> bool:
    if not path.is_file() or path.is_symlink():
        return False
    try:
        with path.open("rb") as data:
            return text.encode() in data.read(65536)
    except OSError:
        return False


def _undo_dir(entry: Entry) -> None:
    path = Path(entry["path"])
    if not path.is_dir():
        return
    before = set(entry.get("entries") or ())
    prefix, target = entry.get("prefix"), entry.get("links_into")
    for name in sorted(set(os.listdir(path)) - before):
        item = path / name
        remove = bool(entry.get("owned")) or bool(prefix and name.startswith(prefix))
        remove = remove or bool(target and item.is_symlink()
                                and os.readlink(item).startswith(str(target) + "/"))
        remove = remove or bool(entry.get("stale_sockets") and _stale_socket(item))
        remove = remove or bool(entry.get("mentions") and _mentions(item, entry["mentions"]))
        if not remove:
            continue
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item)
        else:
            item.unlink(missing_ok=True)
    if not entry.get("existed"):
        with contextlib.suppress(OSError):  # not empty: someone else's files are in it
            path.rmdir()


#: Undo order: phase by phase (an entry kind may act in several), within a phase the reverse
#: of recording. Processes go first, so that nothing recreates what is being removed.
_PHASES: tuple[dict[str, Callable[[Entry], None]], ...] = (
    {"workdir": _undo_processes},          # kubelet, containerd, shims started for the node
    {"containerd": _undo_containerd},      # containers (runc), shims, containerd's mounts
    {"cgroup": _undo_cgroup},              # whatever is left in the node's cgroups; the cgroups
    {"workdir": _undo_workdir_mounts},     # kubelet's volumes, anything else mounted there
    {"nft-table": _undo_nft_table, "link": _undo_link, "address": _undo_address},
    {"sysctl": _undo_sysctl},
    {"dir": _undo_dir},
)

"""Durable files of the node agent: atomic writes, the checkpoint file.

Invariants:
- :func:`atomic_write` leaves either the old or the new content at ``path``, never a torn
  file: write a temporary file in the same directory, fsync it, rename it over ``path``, fsync
  the directory (so the rename itself survives a power cut).
- :func:`remove_file` fsyncs the directory after unlinking; removing a missing file is fine.
- A checkpoint that does not decode (or whose checksum fails) is moved aside as
  ``<name>.corrupt-<unix-time>`` and the agent starts from an empty one: it then re-prepares
  every claim still allocated to it and deletes CDI files nobody claims, so it converges.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import time
from pathlib import Path

from kdra.agent.core.checkpoint import Checkpoint, CheckpointCorrupt

log = logging.getLogger(__name__)


def fsync_dir(directory: str | Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_serial = itertools.count()
_process = secrets.token_hex(4)  # with the pid: no clash with a crashed run's leftovers


def atomic_write(path: str | Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically and durably. The temporary file's name is
    unique to this process and call (``O_EXCL``); the directory is created when missing.
    (Paths as strings inside: a prepare writes two files, and each ``pathlib`` step builds a
    new object — issue 42.)"""
    target = os.fspath(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}-{_process}.{next(_serial)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
    except FileNotFoundError:
        os.makedirs(directory or ".", exist_ok=True)
        fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(directory or ".")


def remove_file(path: str | Path) -> bool:
    """Delete ``path`` durably. Returns whether it existed."""
    target = os.fspath(path)
    try:
        os.unlink(target)
    except FileNotFoundError:
        return False
    fsync_dir(os.path.dirname(target) or ".")
    return True


class CheckpointFile:
    """The checkpoint of one node: ``<state_dir>/checkpoint-<node>.json``."""

    def __init__(self, state_dir: Path, node: str) -> None:
        self.node = node
        self.path = state_dir / f"checkpoint-{node}.json"

    def load(self) -> Checkpoint:
        """The saved checkpoint; an empty one if there is none (or it was corrupt)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Checkpoint(self.node)
        try:
            return Checkpoint.decode(raw, self.node)
        except CheckpointCorrupt as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            os.replace(self.path, aside)
            fsync_dir(self.path.parent)
            log.error("node %s: checkpoint %s is corrupt (%s); moved to %s and starting "
                      "from an empty one (claims still allocated here are prepared again)",
                      self.node, self.path, exc, aside)
            return Checkpoint(self.node)

    def save(self, checkpoint: Checkpoint) -> None:
        atomic_write(self.path, checkpoint.encode(), mode=0o600)

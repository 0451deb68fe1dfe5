"""The CDI spec directory: one JSON spec file per prepared claim and driver.

Container runtimes (containerd, CRI-O with CDI enabled) read ``*.json`` specs from this
directory and inject a device when a container asks for its fully qualified CDI name
(``kdra.dev/gpu=<claim-uid>-gpu-0``). The agent owns the files named ``kdra.dev-*.json``
whose ``kdra.dev/node`` annotation names one of its nodes; it never touches other files.

Invariants:
- Files are written atomically (temporary file, fsync, rename, fsync of the directory), so a
  runtime never reads half a spec, and a crash leaves the old or the new file.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from kdra.agent.checkpoint import atomic_write, remove_file
from kdra.agent.core.cdi import CDI_FILE_PREFIX, CLAIM_UID_ANNOTATION, NODE_ANNOTATION
from kdra.agent.core.checkpoint import encode_json

log = logging.getLogger(__name__)


class CdiDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._prefix = os.path.join(os.fspath(path), "")  # "<dir>/": a file's path by concat

    def write(self, name: str, spec: dict[str, Any]) -> None:
        atomic_write(self._prefix + name, encode_json(spec))

    def read(self, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.path / name).read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def remove(self, name: str) -> bool:
        return remove_file(self._prefix + name)

    def owned(self, node: str) -> dict[str, str]:
        """Spec files of ``node`` in the directory: file name → claim UID."""
        found: dict[str, str] = {}
        if not self.path.is_dir():
            return found
        for file in sorted(self.path.glob(f"{CDI_FILE_PREFIX}*.json")):
            spec = self.read(file.name)
            annotations = (spec or {}).get("annotations") or {}
            if annotations.get(NODE_ANNOTATION) == node:
                found[file.name] = str(annotations.get(CLAIM_UID_ANNOTATION, ""))
        return found

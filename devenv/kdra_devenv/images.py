"""Tiny container images built on this machine, without a registry or an image builder.

The real-node tiers need images that no registry can provide here: a pause image for pod
sandboxes and small test images. :func:`oci_archive` writes an OCI image layout archive (one
uncompressed layer made of the given files, an image config, a manifest and an index naming
the image) that ``ctr images import`` loads; :func:`static_pause` compiles a static ``pause``
(``gcc -static``) for the sandbox image; :func:`busybox_files` lays out a static busybox
(Debian's ``busybox-static``) as ``/bin/sh`` and friends.

Invariants:
- Archives are reproducible: files sorted, owner 0:0, modification time 0, so the same inputs
  give the same image digest.
- Compiled binaries are cached by the digest of their source under
  ``${KDRA_CACHE:-~/.cache/kdra}/images``; nothing is written outside the cache and the
  destination the caller names.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["BUSYBOX", "PAUSE_SOURCE", "busybox_files", "oci_archive", "static_pause"]

BUSYBOX = Path("/bin/busybox")
"""Debian's ``busybox-static`` (statically linked: it runs in an empty image)."""

PAUSE_SOURCE = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
    signal(SIGINT, stop);
    signal(SIGTERM, stop);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
"""
"""The pod sandbox's process: waits for signals, reaps orphans, exits on SIGINT/SIGTERM."""

_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_LAYER = "application/vnd.oci.image.layer.v1.tar"
_DIRECTORIES = ("bin", "dev", "etc", "proc", "sys", "tmp", "var")

File = Path | bytes | str
"""A file's content: a host file to copy, bytes, or (a ``str``) a symbolic link's target."""


def _cache() -> Path:
    return Path(os.environ.get("KDRA_CACHE", Path.home() / ".cache" / "kdra")) / "images"


def static_pause() -> Path:
    """A statically linked ``pause`` binary, compiled once (needs gcc and libc6-dev)."""
    digest = hashlib.sha256(PAUSE_SOURCE.encode()).hexdigest()[:16]
    binary = _cache() / f"pause-{digest}"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    source = binary.with_suffix(".c")
    source.write_text(PAUSE_SOURCE)
    partial = binary.with_name(binary.name + ".partial")
    subprocess.run(["gcc", "-static", "-Os", "-o", str(partial), str(source)], check=True,
                   capture_output=True)
    partial.replace(binary)
    return binary


def busybox_files(busybox: Path = BUSYBOX,
                  applets: Sequence[str] = ("sh", "cat", "env", "ls", "sleep", "echo")
                  ) -> dict[str, File]:
    """``/bin/busybox`` and links to it for ``applets`` (a shell and the usual tools)."""
    files: dict[str, File] = {"bin/busybox": busybox}
    files.update({f"bin/{name}": "busybox" for name in applets})
    return files


def _architecture() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _layer(files: Mapping[str, File]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        names = set(_DIRECTORIES) | {p for name in files for p in _parents(name)}
        for directory in sorted(names):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name in sorted(files):
            content = files[name]
            info = tarfile.TarInfo(name.lstrip("/"))
            if isinstance(content, str):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, content, 0o777
                tar.addfile(info)
                continue
            data = content.read_bytes() if isinstance(content, Path) else content
            info.size = len(data)
            info.mode = 0o755 if isinstance(content, Path) and os.access(content, os.X_OK) \
                else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _parents(name: str) -> list[str]:
    parts = name.strip("/").split("/")[:-1]
    return ["/".join(parts[:i + 1]) for i in range(len(parts))]


def oci_archive(dest: Path, name: str, files: Mapping[str, File], *,
                entrypoint: Sequence[str], env: Sequence[str] = ("PATH=/bin",)) -> Path:
    """Write an OCI image archive of ``files`` (path in the image → content) named ``name``
    (``registry/repo:tag``) to ``dest``, for ``ctr images import``. Returns ``dest``."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes, media_type: str) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    layer = _layer(files)
    layer_descriptor = blob(layer, _LAYER)
    config = {"architecture": _architecture(), "os": "linux",
              "config": {"Entrypoint": list(entrypoint), "Env": list(env)},
              "rootfs": {"type": "layers", "diff_ids": [layer_descriptor["digest"]]}}
    config_descriptor = blob(_json(config), _CONFIG)
    manifest = {"schemaVersion": 2, "mediaType": _MANIFEST, "config": config_descriptor,
                "layers": [layer_descriptor]}
    manifest_descriptor = blob(_json(manifest), _MANIFEST)
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = {"schemaVersion": 2, "manifests": [{
        **manifest_descriptor,
        "annotations": {"io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": tag}}]}
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w") as tar:
        entries = {"oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
                   "index.json": _json(index)}
        entries.update({f"blobs/sha256/{d.split(':', 1)[1]}": data for d, data in blobs.items()})
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for entry, data in sorted(entries.items()):
            info = tarfile.TarInfo(entry)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return dest


def _json(data: object) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

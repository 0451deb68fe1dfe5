"""kdra's container image, built from the repository's Dockerfile with buildah, and the Python
base image it starts from - for the real node, where no registry is reachable.

- :func:`base_image` builds ``localhost/kdra-python:3.11-bookworm``: ``debootstrap
  --variant=minbase`` of Debian bookworm with python3 and python3-venv (the mirror apt uses),
  plus a ``python`` link (python:3.11-slim has one; the Dockerfile's RUN lines call
  ``python``), committed by buildah. It is what the Dockerfile's ``PYTHON_IMAGE`` argument
  names here; elsewhere the Dockerfile's default (python:3.11-slim-bookworm) applies.
- :func:`kdra_image` runs ``buildah bud --storage-driver vfs`` on the Dockerfile with
  ``PYTHON_IMAGE`` set to the base image and exports the result as an OCI archive
  (``oci-archive``) for ``ctr images import``.

Both are cached in ``${KDRA_CACHE:-~/.cache/kdra}/images/`` as OCI archives named by a hash of
their inputs: the base image by its recipe, kdra's by the Dockerfile, ``.dockerignore`` and
every file the build context holds, plus the base image's hash. A second build with the same
inputs returns at once.

Invariants:
- Nothing is written outside the cache and the caller's temporary files: buildah's storage
  (``--root``, ``--runroot``) and its cache-mount directory (``TMPDIR``) are in the cache;
  debootstrap runs in a private mount namespace, so a killed run leaves no mount behind.
- The Dockerfile is used as it is, so ``docker build`` builds the same image elsewhere. The
  only build-time additions are read-only volumes that let pip trust this host's TLS
  certificate authorities when the host's environment names a CA bundle (``PIP_CERT``,
  ``REQUESTS_CA_BUNDLE``, ``SSL_CERT_FILE``) or a package index (``PIP_INDEX_URL``): they are
  mounted for RUN steps only and are in no layer.
- An archive appears in the cache only complete (written under a temporary name, renamed).
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kdra_devenv.controlplane import repo_root

__all__ = [
    "BASE_IMAGE",
    "KDRA_IMAGE",
    "BuiltImage",
    "ImageBuildError",
    "base_image",
    "context_files",
    "kdra_image",
]

BASE_IMAGE = "localhost/kdra-python:3.11-bookworm"
"""The Python base image's name (the Dockerfile's ``PYTHON_IMAGE`` on the real node)."""
KDRA_IMAGE = "localhost/kdra:node"
"""kdra's image as the real node's overlay (manifests/overlays/node) deploys it."""

_SUITE = "bookworm"
_PACKAGES = ("python3", "python3-venv")
_BASE_RECIPE = f"debootstrap minbase {_SUITE} {','.join(_PACKAGES)} python-link v1"


class ImageBuildError(RuntimeError):
    """An image could not be built; the message names the step and ends with its output."""


@dataclass(frozen=True)
class BuiltImage:
    """An image as an OCI archive in the cache."""

    name: str
    archive: Path
    digest: str
    """The hash of the inputs the archive was built from."""
    seconds: float
    """How long this call took (0 when the cache had it)."""
    cached: bool


def _cache() -> Path:
    return Path(os.environ.get("KDRA_CACHE", Path.home() / ".cache" / "kdra")) / "images"


def _log(message: str) -> None:
    print(f"kdra images: {message}", file=sys.stderr, flush=True)


def _run(cmd: Sequence[str | os.PathLike[str]], what: str, *,
         env: dict[str, str] | None = None, log: Path | None = None) -> None:
    """Run ``cmd``; output goes to ``log`` (or is captured), and its end is in the error."""
    args = [os.fspath(c) for c in cmd]
    if log is not None:
        with log.open("ab") as out:
            code = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  check=False).returncode
        tail = log.read_text(errors="replace")[-3000:]
    else:
        done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
        code, tail = done.returncode, (done.stdout + done.stderr)[-3000:]
    if code != 0:
        raise ImageBuildError(f"{what} failed ({code}):\n{tail}")


class _Buildah:
    """buildah with its storage in the cache (vfs: no overlay mounts to leave behind)."""

    def __init__(self, cache: Path) -> None:
        self.root = cache / "buildah" / "storage"
        self.tmp = cache / "buildah" / "tmp"
        self.env = {**os.environ, "TMPDIR": str(self.tmp)}

    def __call__(self, *args: str | os.PathLike[str], what: str,
                 log: Path | None = None) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.tmp, prefix="run-") as runroot:
            _run(["buildah", "--storage-driver", "vfs", "--root", self.root,
                  "--runroot", runroot, *args], what, env=self.env, log=log)

    def has(self, name: str) -> bool:
        with tempfile.TemporaryDirectory(dir=self.tmp, prefix="run-") as runroot:
            return subprocess.run(
                ["buildah", "--storage-driver", "vfs", "--root", str(self.root),
                 "--runroot", runroot, "inspect", "--type", "image", name],
                capture_output=True, env=self.env, check=False).returncode == 0

    def ensure(self, image: BuiltImage) -> None:
        """``image`` in buildah's storage (loaded from its archive when missing)."""
        if self.has(image.name):
            return
        with tempfile.TemporaryDirectory(dir=self.tmp, prefix="run-") as runroot:
            done = subprocess.run(
                ["buildah", "--storage-driver", "vfs", "--root", str(self.root), "--runroot",
                 runroot, "pull", "--quiet", f"oci-archive:{image.archive}"],
                capture_output=True, text=True, env=self.env, check=False)
        if done.returncode != 0 or not done.stdout.split():
            raise ImageBuildError(f"loading {image.name} from {image.archive} failed:\n"
                                  f"{done.stderr[-2000:]}")
        self("tag", done.stdout.split()[-1], image.name, what=f"naming {image.name}")

    def export(self, name: str, archive: Path) -> None:
        partial = archive.with_name(archive.name + ".partial")
        partial.unlink(missing_ok=True)
        self("push", name, f"oci-archive:{partial}:{name}", what=f"exporting {name}")
        partial.replace(archive)


def _mirror() -> str:
    """The Debian mirror apt uses here (deb822 or one-line sources), else deb.debian.org."""
    sources = [Path("/etc/apt/sources.list"),
               *sorted(Path("/etc/apt/sources.list.d").glob("*.sources")),
               *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and len(words) > 1 and words[1].rstrip("/").endswith(
                    "/debian"):
                return words[1]
            if words[:1] == ["deb"]:
                uri = next((w for w in words[1:] if "://" in w), "")
                if uri.rstrip("/").endswith("/debian"):
                    return uri
    return "http://deb.debian.org/debian"


def base_image(*, progress: bool = True) -> BuiltImage:
    """The Python base image (see the module docstring), built once (~1-3 minutes)."""
    cache = _cache()
    digest = hashlib.sha256(_BASE_RECIPE.encode()).hexdigest()[:16]
    archive = cache / f"kdra-python-{digest}.oci.tar"
    if archive.exists():
        return BuiltImage(BASE_IMAGE, archive, digest, 0.0, cached=True)
    for tool in ("debootstrap", "buildah", "unshare"):
        if shutil.which(tool) is None:
            raise ImageBuildError(f"{tool} is not installed (apt-get install -y debootstrap "
                                  "buildah util-linux)")
    started = time.monotonic()
    cache.mkdir(parents=True, exist_ok=True)
    if progress:
        _log(f"building the Python base image {BASE_IMAGE} (debootstrap {_SUITE}; once)")
    with tempfile.TemporaryDirectory(dir=cache, prefix="base-") as work:
        rootfs, context = Path(work) / "rootfs", Path(work) / "context"
        context.mkdir()
        log = Path(work) / "build.log"
        # A private mount namespace: debootstrap's /proc and /sys mounts die with it.
        _run(["unshare", "--mount", "--propagation", "private", "debootstrap",
              "--variant=minbase", f"--include={','.join(_PACKAGES)}", _SUITE, rootfs,
              _mirror()], "debootstrap", log=log)
        for leftover in ("var/lib/apt/lists", "var/cache/apt/archives"):
            for item in (rootfs / leftover).glob("*"):
                if item.is_file():
                    item.unlink()
        (rootfs / "usr" / "bin" / "python").symlink_to("python3")
        _run(["tar", "-C", rootfs, "--numeric-owner", "-cf", context / "rootfs.tar", "."],
             "packing the root file system")
        shutil.rmtree(rootfs)
        (context / "Containerfile").write_text(
            "FROM scratch\nADD rootfs.tar /\nENV LANG=C.UTF-8\nCMD [\"python3\"]\n")
        buildah = _Buildah(cache)
        buildah("bud", "--isolation", "chroot", "--pull-never", "-t", BASE_IMAGE, context,
                what="building the base image", log=log)
        buildah.export(BASE_IMAGE, archive)
    return BuiltImage(BASE_IMAGE, archive, digest, time.monotonic() - started, cached=False)


def _dockerignore(root: Path) -> list[str]:
    lines = (root / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _matches(path: str, pattern: str) -> bool:
    """.dockerignore matching as far as kdra's file uses it: a shell pattern matches the path
    or one of its parent directories (a directory covers what is inside), ``**/`` stands for
    any number of directories."""
    pattern = pattern.strip("/")
    rest = pattern[3:] if pattern.startswith("**/") else None
    parts = path.split("/")
    for end in range(1, len(parts) + 1):
        if fnmatch.fnmatchcase("/".join(parts[:end]), pattern):
            return True
        if rest is not None and any(fnmatch.fnmatchcase("/".join(parts[start:end]), rest)
                                    for start in range(end)):
            return True
    return False


def context_files(root: Path | None = None) -> list[str]:
    """The files ``docker build`` sends as context (relative paths, sorted). kdra's
    .dockerignore excludes everything (``*``) and lets named paths back in (``!path``)."""
    root = root or repo_root()
    patterns = _dockerignore(root)
    if patterns[:1] != ["*"]:
        raise ImageBuildError(".dockerignore must start with '*' and list what the context "
                              "holds with '!path' lines (context_files reads it that way)")
    included: set[str] = set()
    for pattern in patterns[1:]:
        if pattern.startswith("!"):
            base = root / pattern[1:].strip("/")
            files: Iterable[Path] = [base] if base.is_file() else (
                p for p in base.rglob("*") if p.is_file())
            included.update(str(p.relative_to(root)) for p in files)
    for pattern in patterns[1:]:
        if not pattern.startswith("!"):
            included = {p for p in included if not _matches(p, pattern)}
    return sorted(included)


def _context_digest(root: Path, base: BuiltImage) -> str:
    digest = hashlib.sha256()
    for name in ("Dockerfile", ".dockerignore", *context_files(root)):
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    digest.update(base.digest.encode())
    return digest.hexdigest()[:16]


def _pip_volumes(work: Path) -> list[str]:
    """``-v`` arguments that make pip in RUN steps trust what the host trusts (see the
    module docstring); empty on a host that names no CA bundle or index."""
    ca = next((os.environ[name] for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
               if os.environ.get(name) and Path(os.environ[name]).is_file()), None)
    index = os.environ.get("PIP_INDEX_URL")
    if not ca and not index:
        return []
    settings = ["[global]"]
    volumes = []
    if ca:
        settings.append("cert = /etc/kdra-build/ca.crt")
        volumes += ["-v", f"{ca}:/etc/kdra-build/ca.crt:ro"]
    if index:
        settings.append(f"index-url = {index}")
    conf = work / "pip.conf"
    conf.write_text("\n".join(settings) + "\n")
    return [*volumes, "-v", f"{conf}:/etc/pip.conf:ro"]


def kdra_image(*, root: Path | None = None, progress: bool = True) -> BuiltImage:
    """kdra's image from the Dockerfile (see the module docstring): cached, else built
    (a few minutes on 2 cores)."""
    root = root or repo_root()
    base = base_image(progress=progress)
    cache = _cache()
    digest = _context_digest(root, base)
    archive = cache / f"kdra-{digest}.oci.tar"
    if archive.exists():
        return BuiltImage(KDRA_IMAGE, archive, digest, 0.0, cached=True)
    started = time.monotonic()
    if progress:
        _log(f"building {KDRA_IMAGE} from {root / 'Dockerfile'} (buildah; inputs {digest})")
    buildah = _Buildah(cache)
    buildah("rm", "--all", what="removing buildah's left-over working containers")
    buildah.ensure(base)
    with tempfile.TemporaryDirectory(dir=cache, prefix="kdra-") as work:
        log = Path(work) / "build.log"
        buildah("bud", "--isolation", "chroot", "--network", "host", "--pull-never",
                *_pip_volumes(Path(work)), "--build-arg", f"PYTHON_IMAGE={base.name}",
                "-f", root / "Dockerfile", "-t", KDRA_IMAGE, root,
                what=f"buildah bud (log: {log})", log=log)
        buildah.export(KDRA_IMAGE, archive)
    buildah("rmi", KDRA_IMAGE, what=f"removing {KDRA_IMAGE} from buildah's storage")
    for old in cache.glob("kdra-*.oci.tar"):  # one kdra build is kept
        if old != archive and not old.name.startswith("kdra-python-"):
            old.unlink(missing_ok=True)
    return BuiltImage(KDRA_IMAGE, archive, digest, time.monotonic() - started, cached=False)

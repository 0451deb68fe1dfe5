"""Build ``kubectl-kdra`` as one self-contained file: a Python zip application holding kdra and
the dependencies its command-line path imports, runnable without pip or a virtual environment.

    python hack/krew/build_plugin.py OUT_FILE

Some of those dependencies are compiled (pydantic-core, google-re2, PyYAML's and orjson's
extensions, pendulum), and Python cannot import an extension from inside a zip: so the file
is built for one Python minor version and platform (those of the interpreter building it,
as a wheel is), and on first run it unpacks its ``site/`` into
``$XDG_CACHE_HOME/kubectl-kdra/<build id>/`` (default ``~/.cache``), once per build, and runs
from there. Another Python or platform gets a clear error, not an ImportError.

Invariants:
- The dependencies come from ``requirements.lock`` (exact versions, wheels only) less
  :data:`NOT_ON_THE_CLI_PATH`; ``tests/e2e/test_kubectl_plugin_file.py`` runs the file with
  the system's python3 and an empty environment, so a module missing here fails there.
- The build is deterministic for the same inputs (sorted entries, fixed timestamps); the
  build id is the sha256 of the packed ``site/`` tree, so a new build never reuses an old
  unpacked copy.
- Unpacking goes to a temporary directory renamed into place: an interrupted first run
  leaves no half-filled cache directory that a later run would trust.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_ON_THE_CLI_PATH = frozenset({
    # the operator's and the agent's: kopf, the asyncio HTTP stack, uvloop, NVML, metrics, TLS
    "kopf", "aiohttp", "aiohappyeyeballs", "aiosignal", "frozenlist",
    "multidict", "yarl", "propcache", "uvloop", "nvidia-ml-py",
    "prometheus_client", "cryptography", "cffi", "pycparser", "python-json-logger", "click",
    "iso8601", "jsonpatch", "jsonpointer", "attrs", "grpcio",
})
DATE = (2020, 1, 1, 0, 0, 0)

BOOTSTRAP = '''\
"""kubectl-kdra: kdra's kubectl plugin in one file (built by hack/krew/build_plugin.py)."""
import os
import shutil
import sys
import sysconfig
import tempfile
import zipfile

BUILD = {build!r}
PYTHON = {python!r}
PLATFORM = {platform!r}


def _home():
    if tuple(sys.version_info[:2]) != PYTHON or sysconfig.get_platform() != PLATFORM:
        sys.exit("kubectl-kdra: this file is built for Python %d.%d on %s; this is Python "
                 "%d.%d on %s" % (*PYTHON, PLATFORM, *sys.version_info[:2],
                                  sysconfig.get_platform()))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".cache")
    home = os.path.join(cache, "kubectl-kdra", BUILD)
    if not os.path.isdir(home):
        os.makedirs(os.path.dirname(home), exist_ok=True)
        scratch = tempfile.mkdtemp(dir=os.path.dirname(home))
        try:
            with zipfile.ZipFile(os.path.dirname(os.path.abspath(__file__))) as archive:
                archive.extractall(scratch, [n for n in archive.namelist()
                                             if n.startswith("site/")])
            try:
                os.rename(os.path.join(scratch, "site"), home)
            except OSError:
                if not os.path.isdir(home):  # not a concurrent first run that won
                    raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return home


sys.path[0] = _home()  # the unpacked tree, instead of the zip itself
from kdra.cli.kubectl import main  # noqa: E402

sys.exit(main())
'''


def requirements(lock: Path) -> list[str]:
    kept = []
    for line in lock.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and line.split("==")[0] not in NOT_ON_THE_CLI_PATH:
            kept.append(line)
    return kept


def install(site: Path) -> None:
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
           "--disable-pip-version-check", "--target", str(site)]
    subprocess.run([*pip, "--only-binary", ":all:", *requirements(ROOT / "requirements.lock")],
                   check=True, stdout=sys.stderr)
    subprocess.run([*pip, "--upgrade", str(ROOT)], check=True, stdout=sys.stderr)


def files(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.parent != site / "bin")


def build(out: Path) -> str:
    """Write the zip application to ``out``; returns its build id."""
    with tempfile.TemporaryDirectory() as stage:
        site = Path(stage) / "site"
        install(site)
        digest = hashlib.sha256()
        entries = files(site)
        for path in entries:
            digest.update(path.relative_to(site).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        build_id = digest.hexdigest()[:16]
        bootstrap = BOOTSTRAP.format(build=build_id, python=tuple(sys.version_info[:2]),
                                     platform=sysconfig.get_platform())
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        with partial.open("wb") as raw:
            raw.write(b"#!/usr/bin/env python3\n")
            with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.writestr(zipfile.ZipInfo("__main__.py", DATE), bootstrap)
                for path in entries:
                    info = zipfile.ZipInfo("site/" + path.relative_to(site).as_posix(), DATE)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    archive.writestr(info, path.read_bytes())
        partial.chmod(0o755)
        os.replace(partial, out)
    return build_id


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = Path(argv[0])
    build_id = build(out)
    print(f"{out} (build {build_id}, {out.stat().st_size // 1024} KiB)", file=sys.stderr)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

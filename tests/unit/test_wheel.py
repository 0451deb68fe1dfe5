"""The product wheel holds the product, whole, and nothing else: every program package and
every module of ``operator/kdra``; no development environment (``kdra_devenv``), no test-only
module; the two console scripts point at modules that are in it.

The wheel is built as the image and ``hack/krew/package.sh`` build it (``pip wheel --no-deps``),
from a copy of what the Dockerfile copies (pyproject.toml, README.md, operator/), so the build
leaves nothing in the checkout.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROGRAMS = ("kdra/dra", "kdra/kube", "kdra/operator", "kdra/agent", "kdra/cli")
"""The DRA core, the Kubernetes edge and the three programs: each a package with its core
(the DRA core is pure throughout)."""

TEST_ONLY = ("partition_slices", "nri_runtime", "conftest", "test_")
"""Names of modules that serve tests only: they live in tests/, never in the product."""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel."""
    context = tmp_path_factory.mktemp("context")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, context / name)
    shutil.copytree(ROOT / "operator", context / "operator",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                             "--wheel-dir", str(out), str(context)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (path,) = out.glob("kdra-*.whl")
    return path


@pytest.fixture(scope="module")
def wheel(built: Path) -> list[str]:
    """The names of the files in the wheel."""
    with zipfile.ZipFile(built) as archive:
        return archive.namelist()


def test_every_program_package_and_every_module_is_in_the_wheel(wheel: list[str]) -> None:
    for program in PROGRAMS:
        assert f"{program}/__init__.py" in wheel, program
        if program != "kdra/dra":
            assert f"{program}/core/__init__.py" in wheel, program
    assert {"kdra/main.py", "kdra/checks.py", "kdra/__main__.py", "kdra/py.typed"} <= set(wheel)
    tracked = subprocess.run(["git", "ls-files", "operator/kdra"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    sources = {path.removeprefix("operator/") for path in tracked if path.endswith(".py")}
    assert sources, "git lists no module of operator/kdra"
    assert sources - set(wheel) == set()


def test_no_development_environment_and_no_test_only_module(wheel: list[str]) -> None:
    packages = {name.split("/", 1)[0] for name in wheel}
    assert packages == {"kdra", next(p for p in packages if p.endswith(".dist-info"))}
    assert [name for name in wheel if "devenv" in name] == []
    modules = [name.rsplit("/", 1)[-1] for name in wheel if name.endswith(".py")]
    assert [m for m in modules if m.startswith(TEST_ONLY)] == []


def test_the_console_scripts_point_into_the_wheel(built: Path, wheel: list[str]) -> None:
    (entry_points,) = (name for name in wheel if name.endswith(".dist-info/entry_points.txt"))
    scripts = configparser.ConfigParser()
    with zipfile.ZipFile(built) as archive:
        scripts.read_string(archive.read(entry_points).decode())
    targets = dict(scripts["console_scripts"])
    assert targets == {"kdra": "kdra.main:main", "kubectl-kdra": "kdra.cli.kubectl:main"}
    for target in targets.values():
        module = target.split(":")[0].replace(".", "/") + ".py"
        assert module in wheel, module

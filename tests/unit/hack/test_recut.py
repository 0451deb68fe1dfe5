"""hack/recut.py, the re-cut by program (issue 37): on a small tree of the old layout it moves
the files and rewrites every kind of reference; run again it changes nothing; after a "merge"
of code written against the old layout, ``--fix-references`` repairs it, and a module it has
no mapping for fails the check, named. And this repository is re-cut: ``--check`` is clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "hack" / "recut.py"

OLD_TREE = {
    "operator/kdra/__init__.py": '"""kdra."""\nGROUP = "resource.kdra.dev"\n',
    "operator/kdra/cli.py": (
        '"""The kdra command (kdra.domain.podclaims names the claims)."""\n'
        "from kdra.settings import AgentSettings, OperatorSettings, add_arguments\n\n\n"
        "def main() -> int:\n    return 0\n"),
    "operator/kdra/settings.py": (
        "class OperatorSettings: ...\nclass AgentSettings: ...\n\n\n"
        "def add_arguments(parser: object) -> None: ...\n"),
    "operator/kdra/domain/__init__.py": '"""Pure domain code."""\n',
    "operator/kdra/domain/podclaims.py": "FINALIZER = 'resource.kdra.dev/claim'\n",
    "operator/kdra/domain/scheduling.py": (
        "from kdra.domain.podclaims import FINALIZER\n\n\n"
        "def best() -> str:\n    return FINALIZER\n\n\n"
        "def container_devices() -> dict[str, str]:\n    return {}\n"),
    "operator/kdra/metrics/__init__.py": "def record_release() -> None: ...\n",
    "operator/kdra/services/__init__.py": "",
    "operator/kdra/services/claim_controller.py": (
        "from kdra import GROUP, metrics\n"
        "from kdra.domain import podclaims\n"
        "from kdra.domain.scheduling import best, container_devices\n\n"
        "log_name = 'kdra.services.claim_controller'\n"),
    "operator/kdra/services/agent/__init__.py": '"""The node agent."""\n',
    "operator/kdra/services/agent/nri/__init__.py": "",
    "operator/kdra/services/agent/nri/wire.py": "FRAME = 8\n",
    "operator/kdra/services/agent/nri/session.py": "from .wire import FRAME\n",
    "operator/kdra/services/agent/prepare.py": "from kdra import metrics\n",
    "tests/__init__.py": "",
    "tests/unit/__init__.py": "",
    "tests/unit/services/__init__.py": "",
    "tests/unit/services/test_leader.py": (
        "from unittest import mock\n\n"
        "TARGET = 'kdra.services.leader.time.monotonic'\n"
        "PATH = 'operator/kdra/services/leader.py'\n"),
    "operator/kdra/services/leader.py": "import time\n",
    "pyproject.toml": (
        "[project.scripts]\nkdra = \"kdra.cli:main\"\n\n"
        "[tool.importlinter]\nroot_package = \"kdra\"\n"),
    "Makefile": "demo:\n\t$(VENV)/bin/kdra demo $(DEMO_FLAGS)\n",
    "docs/guide.md": ("Run `kdra demo`; the claim controller is "
                      "`operator/kdra/services/claim_controller.py`.\n"),
}


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=300)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout


def old_tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for name, text in OLD_TREE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "old layout")
    return root


def test_moves_and_rewrites_every_kind_of_reference(tmp_path: Path) -> None:
    root = old_tree(tmp_path)
    result = run(root)
    moved = git(root, "status", "--short")
    assert "operator/kdra/services/claim_controller.py -> operator/kdra/operator/" \
           "claim_controller.py" in moved
    assert not (root / "operator/kdra/domain").exists()
    assert (root / "operator/kdra/operator/__init__.py").is_file()  # new packages get inits
    main = (root / "operator/kdra/main.py").read_text()
    # a split module: one line per new home
    assert "from kdra.agent.settings import AgentSettings\n" in main
    assert "from kdra.operator.settings import OperatorSettings, add_arguments\n" in main
    assert "kdra.kube.core.podclaims names the claims" in main  # dotted names in docstrings
    controller = (root / "operator/kdra/operator/claim_controller.py").read_text()
    assert "from kdra import GROUP\n" in controller
    assert "from kdra.operator import metrics\n" in controller  # metrics: the program's own
    assert "from kdra.kube.core import podclaims\n" in controller
    assert "from kdra.dra.scheduling import best\n" in controller  # split by symbol
    assert "from kdra.operator.core.pod_devices import container_devices\n" in controller
    assert "'kdra.operator.claim_controller'" in controller  # logger names
    assert "from kdra.agent import metrics\n" in (
        root / "operator/kdra/agent/prepare.py").read_text()
    # a relative import between modules that moved together stays relative
    assert (root / "operator/kdra/agent/nri/session.py").read_text() == "from .wire import FRAME\n"
    test = (root / "tests/unit/kube/test_leader.py").read_text()
    assert "'kdra.kube.leader.time.monotonic'" in test  # mock.patch targets
    assert "'operator/kdra/kube/leader.py'" in test  # file paths
    assert 'kdra = "kdra.main:main"' in (root / "pyproject.toml").read_text()  # entry points
    assert "$(PY) -m kdra_devenv demo" in (root / "Makefile").read_text()
    guide = (root / "docs/guide.md").read_text()
    assert "`python -m kdra_devenv demo`" in guide
    assert "`operator/kdra/operator/claim_controller.py`" in guide
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    root = old_tree(tmp_path)
    assert run(root).returncode == 0
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "re-cut")
    again = run(root)
    assert again.returncode == 0, again.stdout
    assert git(root, "status", "--short") == ""
    assert run(root, "--check").returncode == 0


def test_fix_references_repairs_merged_code_and_names_what_it_cannot(tmp_path: Path) -> None:
    root = old_tree(tmp_path)
    assert run(root).returncode == 0
    # merged in afterwards, written against the old layout: an import of a mapped module, a
    # patch target, and a module of an old package no mapping knows
    merged = root / "operator/kdra/operator/new_controller.py"
    merged.write_text("from kdra.domain.podclaims import FINALIZER\n"
                      "TARGET = 'kdra.services.claim_controller.log_name'\n")
    (root / "operator/kdra/services").mkdir()
    (root / "operator/kdra/services/surprise.py").write_text("X = 1\n")
    git(root, "add", "-A")
    fixed = run(root, "--fix-references")
    text = merged.read_text()
    assert "from kdra.kube.core.podclaims import FINALIZER\n" in text
    assert "'kdra.operator.claim_controller.log_name'" in text
    assert fixed.returncode == 1
    assert "kdra.services.surprise has no mapping" in fixed.stdout
    check = run(root, "--check")
    assert check.returncode == 1 and "kdra.services.surprise" in check.stdout


def test_the_ambiguous_old_name_is_old_only_where_it_names_the_old_module(
        tmp_path: Path) -> None:
    root = old_tree(tmp_path)
    assert run(root).returncode == 0
    added = root / "operator/kdra/operator/late.py"
    added.write_text("from kdra.cli import main\nfrom kdra.cli import core\n"
                     "TARGETS = ['kdra.cli:main', 'kdra.cli.core']\n")
    git(root, "add", "-A")
    run(root, "--fix-references")
    assert added.read_text() == ("from kdra.main import main\nfrom kdra.cli import core\n"
                                 "TARGETS = ['kdra.main:main', 'kdra.cli.core']\n")


def test_this_repository_is_re_cut() -> None:
    result = run(ROOT, "--check")
    assert result.returncode == 0, result.stdout

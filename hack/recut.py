#!/usr/bin/env python3
"""The house re-cut by program (issue 37): move every module of ``operator/kdra`` (and the unit
tests) to its program's package, and rewrite every reference to the old paths.

    python hack/recut.py                    move files (git mv) and rewrite references
    python hack/recut.py --fix-references   only rewrite references (after a merge)
    python hack/recut.py --check            exit 1 listing what is not re-cut yet

The tables are ``hack/recut_map.py``'s, the rewriting of one file ``hack/recut_refs.py``'s.
The programs, and what ``MAPPING`` sends where::

    kdra/dra/       the DRA core library (as before), plus the pure pieces two programs share
                    about scheduling decisions (scheduling rules, who holds which device)
    kdra/kube/      the only code that talks to the API server, and the Kubernetes edge every
                    program shares; kube/core/ is its pure part (the kdra flavour's pod<->claim
                    conventions, agent Lease names, untrusted input, backoff)
    kdra/operator/  claim controller, scheduler (the binder), webhooks, slice GC, taint
                    eviction, utilisation, its settings and metrics, the kopf handlers
    kdra/agent/     the node agent: discovery, slices, heartbeat, prepare, exposure (NRI),
                    health, its settings and metrics
    kdra/cli/       ``kubectl kdra``, ``kdra describe``, ``kdra check``
    kdra/main.py    the ``kdra`` command: one subcommand per program, imported lazily
    kdra/checks.py  the whole ``kdra check``: the cluster's rules and a node agent's disk
    devenv/kdra_devenv/  dev-only: control plane, real node, images (not in the wheel)

Each program's ``core/`` package is its pure core (decisions, no I/O); the other modules of
the program are its I/O shell.

What a run does:

1. **Moves** (not with ``--fix-references``): every file of ``MAPPING`` whose old path
   exists and whose new path does not is ``git mv``-ed (history follows); dissolved packages'
   ``__init__.py`` files (``DISSOLVED``) are removed; every new package gets an
   ``__init__.py``; a moved file's ``Path(__file__).parents[N]`` is renumbered so that it
   still names the same directory. Modules split by hand (``SYMBOLS``) move whole to their first
   home; the hand-made commit after this one carves the rest out.
2. **References**, in every file git tracks (text only; the tool's own files excepted):

   - Python ``import`` / ``from`` statements, absolute and relative, rewritten from the AST:
     a name imported from a split module goes to its symbol's new home
     (``from kdra.settings import AgentSettings, OperatorSettings`` becomes two lines), a
     module imported from its package (``from kdra import metrics``) to its new package;
   - dotted names anywhere (strings, comments, docstrings, TOML, YAML, Markdown, shell):
     ``mock.patch`` targets, ``python -m kdra...``, logger names, entry points, import-linter
     contracts, ``:mod:`` references — the longest old module prefix is replaced;
   - file paths ``operator/kdra/...``, ``kdra/...``, ``tests/unit/...``;
   - the dev-only commands: ``kdra demo | controlplane | node up/down`` become
     ``python -m kdra_devenv ...`` (code spans, argv lists, the Makefile).

   Import blocks that changed are re-sorted with ``ruff check --select I --fix`` when ruff is
   installed (``make lint`` checks their order).
3. **Check** (``--check``, and at the end of every run): modules present in the tree that
   ``MAPPING`` does not know, old modules still present, and references to old modules
   or paths that remain. Exit code 1 when anything is listed.

Idempotent: on a re-cut tree nothing moves and no reference changes. One old name is also a
new one: ``kdra.cli`` (the old ``kdra`` command module, now ``kdra.main``; the new CLI
package). Once ``operator/kdra/cli.py`` is gone, a ``kdra.cli`` reference is taken as the
old module only where it names what only the old module had (``AMBIGUOUS``), e.g.
``kdra.cli:main``, ``from kdra.cli import build_parser``, ``python -m kdra.cli``.

Invariants:
- Only stdlib; runs from any checkout of main with ``python hack/recut.py``.
- A module it has no mapping for is never guessed: it is listed and the exit code is 1.
- Text it does not understand is left alone and listed, never half-rewritten.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- the mapping

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recut_map import (  # noqa: E402  (the tables and the rewriter live beside this file)
    AMBIGUOUS,
    DISSOLVED,
    FILE_HOMES,
    KEPT,
    MAPPING,
    NEW,
    PER_PROGRAM,
    SKIP_FILES,
    SOURCE_ROOTS,
    STAYS,
    SYMBOLS,
)
from recut_refs import (  # noqa: E402
    PATH,
    Mapper,
    Rewriter,
    file_module,
    module_path,
    program_of,
)

# --------------------------------------------------------------------------- moves

def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout


def old_files(root: Path) -> dict[str, Path]:
    """Old module -> its file, for the old modules present in the tree."""
    found = {}
    for module in [*MAPPING, *DISSOLVED]:
        if module in AMBIGUOUS and not (root / module_path(module, False)).is_file():
            continue
        for package in (True, False):
            path = module_path(module, package)
            if (root / path).is_file():
                found[module] = path
    return found


def move(root: Path, dry_run: bool) -> list[str]:
    """git mv every old module present to its new path; remove dissolved packages' inits and
    the directories the moves emptied. Returns what was done."""
    done = []
    present = old_files(root)
    targets: dict[Path, str] = {}
    for module, path in present.items():
        if module in DISSOLVED:
            continue
        package = path.name == "__init__.py"
        new = module_path(MAPPING[module], package)
        if new in targets:
            raise SystemExit(f"recut: {module} and {targets[new]} both map to {new}")
        targets[new] = module
        if (root / new).exists():
            raise SystemExit(f"recut: {module} maps to {new}, which exists already")
    for new, module in sorted(targets.items(), key=lambda kv: str(kv[1])):
        old = present[module]
        done.append(f"git mv {old} {new}")
        if not dry_run:
            (root / new).parent.mkdir(parents=True, exist_ok=True)
            git(root, "mv", str(old), str(new))
            fix_depth(root, old, new)
    for module in DISSOLVED:
        found = present.get(module)
        if found is None:
            continue
        path = found
        if module in FILE_HOMES:
            home = module_path(FILE_HOMES[module], True)
            done.append(f"git mv {path} {home}")
            if not dry_run:
                (root / home).parent.mkdir(parents=True, exist_ok=True)
                git(root, "mv", str(path), str(home))
            continue
        if not dry_run:
            leftover = [p for p in (root / path).parent.rglob("*.py")
                        if p != root / path and "__pycache__" not in p.parts]
            if leftover:
                raise SystemExit(f"recut: {path.parent} still holds {leftover[0]}, which no "
                                 "mapping moves")
            git(root, "rm", "-q", str(path))
        done.append(f"git rm {path}")
    if not dry_run:
        prune_empty(root, {(root / path).parent for path in present.values()})
    return done


def prune_empty(root: Path, directories: Iterable[Path]) -> None:
    """Remove the directories the moves emptied (bytecode caches count as empty)."""
    for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
        while directory != root and directory.is_dir():
            left = [p for p in directory.iterdir() if p.name != "__pycache__"]
            if left:
                break
            shutil.rmtree(directory)
            directory = directory.parent


PARENTS = re.compile(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents)\[(\d+)\]")


def fix_depth(root: Path, old: Path, new: Path) -> None:
    """``Path(__file__).parents[N]`` in a moved file: the same directory from the new place
    (a test one level deeper reaches the repository's root with ``parents[3]``)."""
    path = root / new
    if path.suffix != ".py":
        return
    text = path.read_text()

    def replace(match: re.Match[str]) -> str:
        target = old.parents[int(match.group(2))] if int(match.group(2)) < len(old.parents) \
            else None
        if target is None or target not in new.parents:
            return match.group(0)
        return f"{match.group(1)}[{list(new.parents).index(target)}]"

    fixed = PARENTS.sub(replace, text)
    if fixed != text:
        path.write_text(fixed)


def ensure_inits(root: Path) -> list[Path]:
    """Every directory on the way to a moved or new module is a package."""
    created = []
    modules = [*MAPPING.values(), *NEW]
    for module in modules:
        parts = module.split(".")
        for n in range(1, len(parts)):
            package = ".".join(parts[:n])
            if package == "tests":
                continue
            init = root / module_path(package, True)
            directory = init.parent
            if directory.is_dir() and not init.exists():
                init.write_text(f'"""{package}."""\n')
                git(root, "add", str(init.relative_to(root)))
                created.append(init.relative_to(root))
    return created


# --------------------------------------------------------------------------- files

TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".txt", ".cfg", ".ini", ".json",
                 ".tpl", ".lock", ""}


def tracked(root: Path) -> list[Path]:
    out = git(root, "ls-files", "-z")
    files = []
    for name in out.split("\0"):
        if not name or name in SKIP_FILES:
            continue
        path = Path(name)
        if not (root / path).is_file():
            continue
        if path.suffix not in TEXT_SUFFIXES and path.name not in ("Makefile", "Dockerfile"):
            continue
        files.append(path)
    return files


def rewrite_file(rewriter: Rewriter, root: Path, path: Path) -> bool:
    """Rewrite one file's references; True when it changed."""
    try:
        source = (root / path).read_text()
    except UnicodeDecodeError:
        return False
    module = file_module(path)
    program = program_of(module)
    where = path.as_posix()
    text = source
    if path.suffix == ".py":
        text, _ = rewriter.imports(text, module, path.name == "__init__.py", program, where)
    lines = text.splitlines(keepends=True)
    # import statements were rewritten from the AST above (or left alone on purpose):
    # everything else gets its dotted names, paths and commands rewritten
    skip = _import_lines(text) if path.suffix == ".py" else set()
    for i, line in enumerate(lines):
        if i in skip:
            continue
        new = rewriter.dotted(line, program, f"{where}:{i + 1}")
        new = rewriter.path(new)
        new = rewriter.commands(new)
        lines[i] = new
    text = "".join(lines)
    if text != source:
        (root / path).write_text(text)
        return True
    return False


def _import_lines(source: str) -> set[int]:
    """0-based numbers of the lines of import statements that name kdra/tests modules."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    return found


def rewrite(root: Path, mapper: Mapper) -> list[Path]:
    """Rewrite the references of every tracked file; returns the files changed."""
    rewriter = Rewriter(mapper)
    return [path for path in tracked(root) if rewrite_file(rewriter, root, path)]


def sort_imports(root: Path, changed: Iterable[Path]) -> None:
    """Re-sort the import blocks of the changed Python files (``ruff --select I``), once every
    package has its ``__init__.py``: ruff tells first-party modules by their packages."""
    python = [str(p) for p in changed if p.suffix == ".py"]
    ruff = shutil.which("ruff", path=os.pathsep.join(
        [str(root / ".venv" / "bin"), os.environ.get("PATH", "")]))
    if python and ruff:
        subprocess.run([ruff, "check", "--quiet", "--select", "I", "--fix", *python],
                       cwd=root, check=False)


# --------------------------------------------------------------------------- check

def known_modules() -> set[str]:
    known = set(MAPPING.values()) | set(NEW)
    for split in SYMBOLS.values():
        for where in split.values():
            known.update(where.values() if isinstance(where, dict) else [where])
    for per in PER_PROGRAM.values():
        known.update(per.values())
    # the packages on the way
    for module in list(known):
        parts = module.split(".")
        known.update(".".join(parts[:n]) for n in range(1, len(parts)))
    return known


def tree_modules(root: Path) -> Iterator[str]:
    for top, src in SOURCE_ROOTS.items():
        base = root / src / top
        if top == "tests":
            base = root / "tests" / "unit"
        if not base.is_dir():
            continue
        for path in base.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            module = file_module(path.relative_to(root))
            if module:
                yield module


def check(root: Path, mapper: Mapper) -> list[str]:
    """What is not re-cut: old modules present, unknown modules, old references."""
    problems = []
    known = known_modules()
    present = old_files(root)
    for module, path in sorted(present.items()):
        problems.append(f"{path}: old module {module} still here (run hack/recut.py)")
    for module in sorted(set(tree_modules(root))):
        if module in present or module in known or module in STAYS:
            continue
        if any(module == kept or module.startswith(kept + ".") for kept in KEPT):
            continue
        problems.append(f"{module_path(module, False)}: module {module} has no mapping in "
                        "hack/recut.py (MAPPING, or NEW for a module the re-cut made)")
    # references: a dry rewrite of every file must change nothing
    probe = Mapper(root)
    rewriter = Rewriter(probe)
    for path in tracked(root):
        try:
            source = (root / path).read_text()
        except UnicodeDecodeError:
            continue
        this = file_module(path)
        program = program_of(this)
        text = source
        if path.suffix == ".py":
            text, _ = rewriter.imports(text, this, path.name == "__init__.py", program,
                                       path.as_posix())
        if text != source:
            problems.append(f"{path}: imports of old modules")
        for i, line in enumerate(source.splitlines()):
            where = f"{path}:{i + 1}"
            new = rewriter.commands(rewriter.path(rewriter.dotted(line, program, where)))
            if new != line:
                problems.append(f"{where}: old reference: {line.strip()[:120]}")
            for match in PATH.finditer(line):
                token = match.group(1)
                if re.search(r"(^|/)(kdra/(domain|services|metrics)|tests/unit/(domain|services|"
                             r"handlers))(/|$)", token):
                    problems.append(f"{where}: path in a dissolved package: {token}")
    problems.extend(dict.fromkeys(probe.problems))
    return list(dict.fromkeys(problems))


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="change nothing; exit 1 listing what is not re-cut")
    mode.add_argument("--fix-references", action="store_true",
                      help="only rewrite references (no moves), e.g. after a merge")
    parser.add_argument("--dry-run", action="store_true", help="with no mode: list the moves")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    root: Path = args.root
    if args.check:
        problems = check(root, Mapper(root))
        for problem in problems:
            print(problem)
        print(f"recut --check: {len(problems)} problem(s)", file=sys.stderr)
        return 1 if problems else 0
    # what the references meant: the tree as it was before this run's moves
    mapper = Mapper(root)
    if not args.fix_references:
        for line in move(root, args.dry_run):
            print(line)
        if args.dry_run:
            return 0
    changed = rewrite(root, mapper)
    for path in changed:
        print(f"rewrote {path}")
    if not args.fix_references:
        # after the rewrite (their placeholder docstrings name new packages), before sorting
        for created in ensure_inits(root):
            print(f"created {created}")
    sort_imports(root, changed)
    problems = check(root, Mapper(root))
    for problem in problems:
        print(problem)
    print(f"recut: {len(changed)} file(s) rewritten, {len(problems)} problem(s) left",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""The references half of hack/recut.py: old names to new ones (:class:`Mapper`), and the
rewriting of one file's text (:class:`Rewriter`): Python import statements from the AST,
dotted names, file paths and the dev-only commands anywhere.

Invariants:
- A reference is rewritten only to a name :mod:`recut_map` gives; one it cannot resolve is
  left as it is and recorded in :attr:`Mapper.problems`.
- An import statement whose names all keep one module keeps its own layout and comments;
  only a statement split between new homes is written out again.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from recut_map import (
    AMBIGUOUS,
    COMMANDS,
    DISSOLVED,
    MAPPING,
    PER_PROGRAM,
    PROGRAMS,
    SOURCE_ROOTS,
    SYMBOLS,
)


def module_path(module: str, package: bool) -> Path:
    """The file of ``module`` (relative to the repository)."""
    parts = module.split(".")
    base = Path(SOURCE_ROOTS[parts[0]]).joinpath(*parts)
    return base / "__init__.py" if package else base.with_suffix(".py")


def file_module(path: Path) -> str | None:
    """The module a Python file under a source root is (``None`` elsewhere)."""
    rel = path.as_posix()
    for top, src in SOURCE_ROOTS.items():
        prefix = "" if src == "." else src + "/"
        if rel.startswith(prefix + top + "/") or rel == prefix + top + ".py":
            parts = rel[len(prefix):].removesuffix(".py").split("/")
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
    return None


def is_package(root: Path, module: str) -> bool:
    return (root / module_path(module, True)).is_file()


def program_of(module: str | None) -> str:
    """The program a module belongs to (``*``: none): ``kdra.<program>...``; the tests of one,
    ``tests.unit.<program>...``, are ``tests:<program>``; ``kdra.main`` and ``kdra.checks`` are
    ``main``."""
    if not module:
        return "*"
    parts = module.split(".")
    if parts[0] == "kdra" and len(parts) > 1:
        if parts[1] in ("main", "checks", "__main__"):
            return "main"
        return parts[1] if parts[1] in PROGRAMS else "*"
    if parts[:2] == ["tests", "unit"] and len(parts) > 2 and parts[2] in PROGRAMS:
        return "tests:" + parts[2]
    return "*"


@dataclass
class Mapper:
    """Old names -> new names, for one tree (is it re-cut already?)."""

    root: Path
    recut: bool | None = None
    """Whether the tree was re-cut before this run (None: tell from the tree)."""
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.recut is None:
            # the tree is re-cut once the old `kdra` command module is gone
            self.recut = not (self.root / module_path("kdra.cli", False)).is_file()
        self.old = set(MAPPING) | set(DISSOLVED) | set(SYMBOLS) | set(PER_PROGRAM)

    def is_old(self, module: str, names: Iterable[str] = ()) -> bool:
        """Whether ``module`` (referred to with ``names``) means an old module."""
        if module not in self.old:
            return False
        if module in AMBIGUOUS and self.recut:
            return bool(set(names) & AMBIGUOUS[module])
        return True

    def target(self, module: str, name: str | None, program: str) -> str | None:
        """The new module for ``name`` of old ``module`` (or the module itself)."""
        split = SYMBOLS.get(module, {})
        if name is not None and name in split:
            where = split[name]
            if isinstance(where, dict):
                # a program's own code gets its program's half; anything else, tests included,
                # the whole (e.g. kdra.checks, which keeps the old signatures)
                return where.get(program) or where.get("*")
            return where
        if module in PER_PROGRAM:
            # metrics: a program's tests record and read their program's metrics
            return PER_PROGRAM[module].get(program.removeprefix("tests:"))
        return MAPPING.get(module)

    def longest_old(self, parts: list[str], names: Iterable[str] = ()) -> int:
        """How many leading ``parts`` name an old module (0: none). ``names`` are what the
        whole dotted name is used for (``from X import names``, ``X:name``)."""
        for n in range(len(parts), 1, -1):
            used = list(names) if n == len(parts) else parts[n:n + 1]
            if self.is_old(".".join(parts[:n]), used):
                return n
        return 0


# --------------------------------------------------------------------------- rewriting

DOTTED = re.compile(r"(?<![\w.])((?:kdra|kdra_devenv|tests)(?:\.[A-Za-z_]\w*)+)")
PATH = re.compile(r"(?<![\w/.-])((?:operator/|devenv/)?(?:kdra|kdra_devenv|tests)"
                  r"(?:/[\w.-]+)*)")


@dataclass
class Rewriter:
    mapper: Mapper
    paths: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        root = self.mapper.root
        for old, new in MAPPING.items():
            if old in AMBIGUOUS and self.mapper.recut:
                continue
            package = (is_package(root, old) or is_package(root, new)
                       or self._was_package(old))
            for pkg in ((True,) if package else (False,)):
                old_path = module_path(old, pkg).as_posix()
                new_path = module_path(new, pkg).as_posix()
                self._add_path(old_path, new_path)
                if pkg:
                    self._add_path(old_path.removesuffix("/__init__.py"),
                                   new_path.removesuffix("/__init__.py"))

    @staticmethod
    def _was_package(module: str) -> bool:
        # packages among the old modules: the ones some other old module lives in
        return any(other.startswith(module + ".") for other in MAPPING)

    def _add_path(self, old: str, new: str) -> None:
        self.paths[old] = new
        for src in ("operator/", "devenv/"):
            if old.startswith(src) and new.startswith(src):
                self.paths[old.removeprefix(src)] = new.removeprefix(src)
            elif old.startswith(src):
                self.paths[old.removeprefix(src)] = new.removeprefix("devenv/")

    # ---- dotted names

    def dotted(self, text: str, program: str, where: str) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            parts = name.split(".")
            tail = text[match.end():match.end() + 1]
            names: list[str] = []
            if tail == ":" and text[match.end() + 1:].split():
                names.append(text[match.end() + 1:].split()[0].strip("(),'\"`"))
            before = text[:match.start()]
            if before.endswith("-m ") or before.endswith('"-m", "'):
                names.append("main")  # `python -m X` runs X's main
            n = self.mapper.longest_old(parts, names)
            if not n:
                return name
            module = ".".join(parts[:n])
            rest = parts[n:]
            symbol = rest[0] if rest else (names[0] if names else None)
            new = self.mapper.target(module, symbol, program)
            if new is None:
                self.mapper.problems.append(
                    f"{where}: {name}: no mapping for {module}"
                    + (f" in program {program}" if module in PER_PROGRAM else ""))
                return name
            return ".".join([new, *rest])
        return DOTTED.sub(replace, text)

    # ---- paths

    def path(self, text: str) -> str:
        def replace(match: re.Match[str]) -> str:
            token = match.group(1)
            stripped = token.rstrip(".")
            suffix = token[len(stripped):]
            new = self.paths.get(stripped)
            if new is None:
                return token
            return new + suffix
        return PATH.sub(replace, text)

    # ---- commands

    @staticmethod
    def commands(text: str) -> str:
        for pattern, replacement in COMMANDS:
            text = re.sub(pattern, replacement, text)
        return text

    # ---- Python imports

    def imports(self, source: str, module: str | None, is_pkg: bool, program: str,
                where: str) -> tuple[str, list[tuple[int, int]]]:
        """Rewrite the import statements; returns the source and the line ranges done."""
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return source, []
        lines = source.splitlines(keepends=True)
        edits: list[tuple[int, int, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                new = self._import_from(node, lines, module, is_pkg, program, where)
            elif isinstance(node, ast.Import):
                new = self._import(node, lines, program, where)
            else:
                continue
            if new is not None:
                edits.append((node.lineno, node.end_lineno or node.lineno, new))
        for start, end, text in sorted(edits, reverse=True):
            lines[start - 1:end] = [text]
        return "".join(lines), [(s, e) for s, e, _ in edits]

    def _statement(self, node: ast.stmt, lines: list[str]) -> str:
        end = node.end_lineno or node.lineno
        return "".join(lines[node.lineno - 1:end])

    def _import(self, node: ast.Import, lines: list[str], program: str,
                where: str) -> str | None:
        text = self._statement(node, lines)
        changed = False
        for alias in node.names:
            parts = alias.name.split(".")
            n = self.mapper.longest_old(parts)
            if not n:
                continue
            old = ".".join(parts[:n])
            new = self.mapper.target(old, None, program)
            if new is None:
                self.mapper.problems.append(f"{where}: import {alias.name}: no mapping")
                continue
            full = ".".join([new, *parts[n:]])
            text = re.sub(rf"(?<![\w.]){re.escape(alias.name)}(?![\w])", full, text, count=1)
            changed = True
        return text if changed else None

    def _import_from(self, node: ast.ImportFrom, lines: list[str], module: str | None,
                     is_pkg: bool, program: str, where: str) -> str | None:
        text = self._statement(node, lines)
        indent = text[:len(text) - len(text.lstrip())]
        here = ""  # what the relative import means from where the file is now
        if node.level:
            if module is None:
                return None
            # resolved from where the file was before the move: that is what it meant
            before = INVERSE.get(module, module)
            absolute = resolve_relative(before, is_pkg, node.level, node.module)
            here = resolve_relative(module, is_pkg, node.level, node.module)
        else:
            absolute = node.module or ""
        names = [a.name for a in node.names]
        parts = absolute.split(".")
        n = self.mapper.longest_old(parts, names)
        groups: dict[str, list[str]] = {}
        changed = False
        for alias in node.names:
            spelled = alias.name + (f" as {alias.asname}" if alias.asname else "")
            if n and n == len(parts):
                # from OLD import name: name is a module of OLD, or a symbol of it
                sub = f"{absolute}.{alias.name}"
                if sub in self.mapper.old and self.mapper.is_old(sub):
                    new = self.mapper.target(sub, None, program)
                    if new is None:
                        self.mapper.problems.append(f"{where}: from {absolute} import "
                                                    f"{alias.name}: no mapping")
                        return None
                    parent, _, leaf = new.rpartition(".")
                    groups.setdefault(parent, []).append(
                        leaf + (f" as {alias.asname}" if alias.asname
                                else (f" as {alias.name}" if leaf != alias.name else "")))
                    changed = True
                    continue
                new = self.mapper.target(absolute, alias.name, program)
                if new is None:
                    self.mapper.problems.append(f"{where}: from {absolute} import "
                                                f"{alias.name}: no mapping")
                    return None
                groups.setdefault(new, []).append(spelled)
                changed = True
            elif n:
                old = ".".join(parts[:n])
                new = self.mapper.target(old, None, program)
                if new is None:
                    self.mapper.problems.append(f"{where}: from {absolute}: no mapping")
                    return None
                groups.setdefault(".".join([new, *parts[n:]]), []).append(spelled)
                changed = True
            else:
                # from PKG import OLD-module (PKG itself not old, e.g. `from kdra import metrics`)
                sub = f"{absolute}.{alias.name}"
                if self.mapper.is_old(sub):
                    new = self.mapper.target(sub, None, program)
                    if new is None:
                        self.mapper.problems.append(f"{where}: from {absolute} import "
                                                    f"{alias.name}: no mapping"
                                                    + (f" in program {program}"
                                                       if sub in PER_PROGRAM else ""))
                        return None
                    parent, _, leaf = new.rpartition(".")
                    groups.setdefault(parent, []).append(
                        leaf + (f" as {alias.asname}" if alias.asname
                                else (f" as {alias.name}" if leaf != alias.name else "")))
                    changed = True
                else:
                    groups.setdefault(absolute, []).append(spelled)
        if node.level:
            spelled_all = [a.name + (f" as {a.asname}" if a.asname else "") for a in node.names]
            if list(groups.items()) == [(here, spelled_all)]:
                return None  # still means the same modules from where the file is now
            changed = True  # else it is written out absolute
        if not changed:
            return None
        if len(groups) == 1 and not node.level:
            (target, spelled_names), = groups.items()
            if spelled_names == [a.name + (f" as {a.asname}" if a.asname else "")
                                 for a in node.names]:
                # only the module changed: keep the statement's own layout and comments
                return re.sub(rf"from\s+{re.escape(absolute)}\b", f"from {target}", text,
                              count=1)
        out = []
        for target, spelled_names in groups.items():
            out.append(format_from(indent, target, spelled_names))
        return "".join(out)


INVERSE = {new: old for old, new in MAPPING.items()}


def resolve_relative(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    """The absolute module ``from {'.' * level}{name} import ...`` names in ``module``."""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[:len(base) - level + 1]
    return ".".join([*base, *([name] if name else [])])


def format_from(indent: str, module: str, names: list[str]) -> str:
    line = f"{indent}from {module} import {', '.join(names)}\n"
    if len(line) <= 101:
        return line
    inner = "".join(f"{indent}    {name},\n" for name in names)
    return f"{indent}from {module} import (\n{inner}{indent})\n"

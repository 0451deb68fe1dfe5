r"""Alternated A/B of kdra at two (or more) commits: ``bench/scale.py --contenders kdra`` run from
a worktree of each commit in turn, the order reversed every round (A B, B A, A B ...), so a slow
spell of this shared machine hits every commit alike; then pooled ratios against the first.

    .venv/bin/python bench/ab.py --rounds 2 baseline=67eafc5 new=HEAD
    .venv/bin/python bench/ab.py --rounds 2 --workloads template,steady-empty \
        baseline=67eafc5 parent=HEAD~1 new=WORKTREE

Each ``NAME=REV`` is a commit (a worktree of it is made under ``--trees``, with its own venv,
once) or ``WORKTREE`` (this checkout, uncommitted changes included); ``NAME=REV,VAR=VALUE``
also sets an environment variable for that contender's runs (a diagnosis, e.g.
``nopolicies=WORKTREE,KDRA_BENCH_NO_POLICIES=1``: bench/contenders.py). The first is the one the
others are compared with; bench/RESULTS.md names the baseline commit ("A baseline that shows
drift") and keeps the table of every hot-path change's ratios against it.

Each round of each commit is one ``scale.py --quick`` (or ``--nodes N``) run of the workloads;
pods/s pools the rounds (pods summed over seconds summed), CPU ms/pod likewise over the
contender's processes (operator + agent), p50 is the mean. Prints one Markdown table and writes
``ab.json`` in ``--out``. Asserts nothing: these are figures for the record.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worktree(rev: str, trees: Path) -> Path:
    """A checkout of ``rev`` with a venv of its own (made once); ``WORKTREE``: this one."""
    if rev == "WORKTREE":
        return ROOT
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    path = trees / sha
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(path), sha], cwd=ROOT,
                       check=True)
    if not (path / ".venv" / ".installed").exists():
        subprocess.run(["make", ".venv/.installed"], cwd=path, check=True)
    return path


def run_once(tree: Path, workloads: str, size: list[str], out: Path,
             env: dict[str, str] | None = None) -> list[dict[str, object]]:
    """One ``scale.py`` run of kdra from ``tree`` (``env``: variables added to this process's
    environment); its results (one per workload)."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(tree / ".venv" / "bin" / "python"), str(tree / "bench" / "scale.py"),
                    *size, "--workloads", workloads, "--contenders", "kdra", "--out", str(out)],
                   cwd=tree, check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, **(env or {})})
    results: list[dict[str, object]] = json.loads((out / "results.json").read_text())["results"]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commits", nargs="+", metavar="NAME=REV")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default="template,steady-empty")
    parser.add_argument("--nodes", type=int, default=0, help="default: --quick (100 nodes)")
    parser.add_argument("--trees", type=Path, default=Path(tempfile.gettempdir()) / "kdra-ab")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    named = [tuple(c.split("=", 1)) for c in args.commits]
    if any(len(c) != 2 for c in named) or len(named) < 2:
        parser.error("give at least two NAME=REV")
    envs: dict[str, dict[str, str]] = {}
    for index, (name, spec) in enumerate(named):
        rev, *assignments = spec.split(",")
        if any("=" not in a for a in assignments):
            parser.error(f"{name}: environment settings are VAR=VALUE, not {assignments!r}")
        envs[name] = {var: value for var, _, value in (a.partition("=") for a in assignments)}
        named[index] = (name, rev)
    args.trees.mkdir(parents=True, exist_ok=True)
    out = args.out or Path(tempfile.mkdtemp(prefix="kdra-ab-"))
    trees = {name: worktree(rev, args.trees) for name, rev in named}
    size = ["--nodes", str(args.nodes)] if args.nodes else ["--quick"]
    runs: dict[str, list[dict[str, object]]] = {name: [] for name, _ in named}
    order = [name for name, _ in named]
    started = time.monotonic()
    for round_ in range(1, args.rounds + 1):
        for name in order if round_ % 2 else order[::-1]:
            print(f"round {round_}: {name} ...", flush=True)
            for result in run_once(trees[name], args.workloads, size,
                                   out / f"{name}-r{round_}", envs[name]):
                result["round"] = round_
                runs[name].append(result)
                cpu = float(result["cpu"])  # type: ignore[arg-type]
                pods = int(result["pods"])  # type: ignore[call-overload]
                print(f"  {result['workload']}: {float(result['rate']):.1f} pods/s, "  # type: ignore[arg-type]
                      f"CPU {1000 * cpu / max(pods, 1):.2f} ms/pod", flush=True)
    (out / "ab.json").write_text(json.dumps(runs, indent=2, default=str))
    print(f"\n{time.monotonic() - started:.0f}s; {out / 'ab.json'}\n")
    print(table(runs, order[0], args.workloads.split(",")))
    return 0


def pool(results: list[dict[str, object]]) -> tuple[float, float, float]:
    """(pods/s, CPU ms per pod, mean p50 ms) of rounds pooled."""
    pods = sum(int(r["pods"]) for r in results)  # type: ignore[call-overload]
    seconds = sum(float(r["seconds"]) for r in results)  # type: ignore[arg-type]
    cpu = sum(float(r["cpu"]) for r in results)  # type: ignore[arg-type]
    p50 = sum(float(r["p50"]) for r in results) / max(len(results), 1)  # type: ignore[arg-type]
    return pods / seconds if seconds else 0.0, 1000 * cpu / max(pods, 1), 1000 * p50


def table(runs: dict[str, list[dict[str, object]]], base: str, workloads: list[str]) -> str:
    rows = ["| workload | commit | pods/s by round | pods/s pooled | vs " + base +
            " | CPU ms/pod by round | CPU ms/pod pooled | vs " + base + " | p50 ms |",
            "|---|---|---|---:|---:|---|---:|---:|---:|"]
    for workload in workloads:
        base_rate, base_cpu, _ = pool([r for r in runs[base] if r["workload"] == workload])
        for name, results in runs.items():
            mine = [r for r in results if r["workload"] == workload]
            rate, cpu, p50 = pool(mine)
            rates = ", ".join(f"{float(r['rate']):.1f}" for r in mine)  # type: ignore[arg-type]
            cpus = ", ".join(f"{1000 * float(r['cpu']) / max(int(r['pods']), 1):.2f}"  # type: ignore[arg-type, call-overload]
                             for r in mine)
            rows.append(f"| {workload} | {name} | {rates} | {rate:.1f} | "
                        f"{rate / base_rate if base_rate else 0:.2f}x | {cpus} | {cpu:.2f} | "
                        f"{cpu / base_cpu if base_cpu else 0:.2f}x | {p50:.0f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

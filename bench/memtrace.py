"""Run ``python -m kdra ...`` with tracemalloc on, dumping a snapshot on SIGUSR2.

    python bench/memtrace.py DIR operator --webhook-port 0 ...

Each SIGUSR2 writes ``DIR/snapshot-N.trace`` (``tracemalloc.Snapshot.dump``); compare two with
:func:`top_growth`. bench/soak.py ``--trace-memory`` uses it to find what the operator keeps.
Tracing slows the process down (by about a third with one frame per trace), so the figures of a
traced run are not comparable to an untraced one's.
"""

from __future__ import annotations

import runpy
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

FRAMES = 4  # frames kept per allocation: enough to see the caller of a dict/list growth


def top_growth(old: Path, new: Path, limit: int = 15) -> list[str]:
    """The allocation sites that grew most between two snapshots, one line each."""
    before = tracemalloc.Snapshot.load(str(old))
    after = tracemalloc.Snapshot.load(str(new))
    skip = tracemalloc.Filter(False, tracemalloc.__file__)
    stats = after.filter_traces([skip]).compare_to(before.filter_traces([skip]), "traceback")
    lines = []
    for stat in stats[:limit]:
        # Frames come oldest first; show the allocating line first, then its callers.
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}"
                            for f in reversed(stat.traceback))
        lines.append(f"{stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {where}")
    return lines


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    taken = 0

    def dump(signum: int, frame: FrameType | None) -> None:
        nonlocal taken
        taken += 1
        tracemalloc.take_snapshot().dump(str(out / f"snapshot-{taken}.trace"))

    tracemalloc.start(FRAMES)
    signal.signal(signal.SIGUSR2, dump)
    sys.argv = ["kdra", *sys.argv[2:]]
    runpy.run_module("kdra", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""One run's figures (Result) and the report of bench/scale.py: a contender's rounds pooled,
the table of every run with the ratios of two contenders (``--compare A/B``, kdra/upstream by
default), CPU per pod by process, API writes per pod, the cluster-size sweep, the targets, and
the Markdown block the report is written into.

Invariant: pure: nothing here runs processes or talks to a cluster. Pooled figures sum pods,
seconds, CPU and writes over the rounds (so per-pod figures are pooled), p50/p99 are the mean
of the rounds, peak RSS the maximum; the targets are for kdra/upstream only.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Result:
    workload: str
    contender: str
    pods: int = 0
    seconds: float = 0.0
    p50: float = float("nan")
    p99: float = float("nan")
    cpu: float = 0.0
    rss: float = 0.0
    complete: bool = True
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    writes: dict[str, int] = field(default_factory=dict)  # API writes in the measured phase
    watch: dict[str, int] = field(default_factory=dict)  # "events|bytes resource" sent, ditto
    window: tuple[float, float] = (0.0, 0.0)  # the measured phase, wall clock (time.time())
    round: int = 1

    @property
    def rate(self) -> float:
        return self.pods / self.seconds if self.seconds > 0 else 0.0


SUMMED_EXTRAS = ("cpu_", "create_s", "alloc_calls")  # totals; the other extras are averages


def pooled(runs: list[Result]) -> Result:
    """One contender's rounds of one workload as one result: pods, seconds, CPU, writes and
    the totals among the extras summed (so every per-pod figure is pooled); p50/p99 the mean
    of the rounds, peak RSS the maximum. One run is returned as it is."""
    if len(runs) == 1:
        return runs[0]
    done = [r for r in runs if r.pods]
    extra: dict[str, float] = {}
    for key in {k for r in done for k in r.extra}:
        values = [r.extra[key] for r in done if key in r.extra]
        extra[key] = (sum(values) if key.startswith(SUMMED_EXTRAS)
                      else sum(values) / len(values))
    writes: Counter[str] = Counter()
    watch: Counter[str] = Counter()
    for r in done:
        writes.update(r.writes)
        watch.update(r.watch)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    return Result(
        runs[0].workload, runs[0].contender, pods=sum(r.pods for r in runs),
        seconds=sum(r.seconds for r in runs), p50=mean([r.p50 for r in done]),
        p99=mean([r.p99 for r in done]), cpu=sum(r.cpu for r in runs),
        rss=max((r.rss for r in runs), default=0.0),
        complete=all(r.complete for r in runs), note="; ".join(r.note for r in runs if r.note),
        extra=extra, writes=dict(writes), watch=dict(watch), round=0)


def by_workload(results: list[Result]) -> dict[str, dict[str, list[Result]]]:
    """workload -> contender -> its runs, in the order they ran."""
    by: dict[str, dict[str, list[Result]]] = {}
    for r in results:
        by.setdefault(r.workload, {}).setdefault(r.contender, []).append(r)
    return by


def pooled_each(results: list[Result]) -> list[Result]:
    """Each contender's rounds of each workload pooled (:func:`pooled`), workload by workload
    in the order they ran."""
    return [pooled(runs) for pair in by_workload(results).values() for runs in pair.values()]


COMPARE = ("kdra", "upstream")  # the default pair of --compare: the targets are for it


def default_compare(contenders: list[str]) -> tuple[str, str]:
    """--compare unset: kdra/upstream, or kdra-native/upstream where kdra does not run and
    kdra-native does."""
    if "kdra" not in contenders and "kdra-native" in contenders:
        return ("kdra-native", "upstream")
    return COMPARE


def head_to_head(results: list[Result], compare: tuple[str, str] = COMPARE,
                 ) -> Iterator[tuple[str, Result, Result, str]]:
    """(workload, A pooled, B pooled, ratio of each round) for every workload both contenders
    of ``compare`` (A, B) ran."""
    a, b = compare
    for workload, pair in by_workload(results).items():
        if a in pair and b in pair:
            yield (workload, pooled(pair[a]), pooled(pair[b]), round_ratios(pair[a], pair[b]))


def round_ratios(ours: list[Result], others: list[Result]) -> str:
    """pods/s ratio of each round (runs paired by round), e.g. "0.93, 1.08"."""
    theirs = {r.round: r for r in others}
    return ", ".join(f"{k.rate / theirs[k.round].rate:.2f}" for k in ours
                     if k.round in theirs and theirs[k.round].rate)


def fmt(value: float, digits: int = 1) -> str:
    return "-" if value != value else f"{value:.{digits}f}"  # NaN -> "-"


def table(results: list[Result], ceiling: Result | None, own: Result | None = None,
          compare: tuple[str, str] = COMPARE) -> str:
    """The results, the ceilings, and A/B ratios per workload (``compare``: A, B; by default
    kdra/upstream). ``own`` is the ceiling on kdra's objects (custom resources): kdra's share
    of it leaves out the cost of its storage format."""
    left, right = compare
    rows = ["| workload | contender | round | pods bound | s | pods/s | p50 ms | p99 ms | CPU s "
            "| CPU ms/pod | peak RSS MiB | note |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        per_pod = 1000 * r.cpu / r.pods if r.pods else float("nan")
        extra = ", ".join(f"{k}={v:.2f}" for k, v in r.extra.items())
        note = "; ".join(x for x in (r.note, extra) if x)
        rows.append(f"| {r.workload} | {r.contender} | {r.round} | {r.pods} | "
                    f"{fmt(r.seconds)} | {fmt(r.rate)} | {fmt(1000 * r.p50, 0)} | "
                    f"{fmt(1000 * r.p99, 0)} | "
                    f"{fmt(r.cpu)} | {fmt(per_pod)} | {fmt(r.rss, 0)} | {note} |")
    for c, pod_write in ((ceiling, "pod status"), (own, "pod annotation")):
        if c:
            rows.append(f"| {c.workload} | {c.contender} | 1 | {c.pods} | {fmt(c.seconds)} | "
                        f"{fmt(c.rate)} | {fmt(1000 * c.p50, 0)} | {fmt(1000 * c.p99, 0)} | "
                        f"- | - | - | per pod: pod create, claim create, claim status, "
                        f"{pod_write}, binding |")
    rows += ["", f"| workload | {left}/{right} pods/s | by round | {left}/{right} p99 "
             f"| {left}/{right} CPU s | {left}/{right} peak RSS | {left} % of ceiling "
             f"| {right} % of ceiling | {left} % of ceiling on kdra objects "
             f"| API server + etcd CPU ms/pod {left} / {right} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b and a == a and b == b else "-"

    ceil = ceiling.rate if ceiling and ceiling.rate else float("nan")
    own_ceil = own.rate if own and own.rate else float("nan")
    for workload, k, u, rounds in head_to_head(results, compare):
        rows.append(f"| {workload} | {ratio(k.rate, u.rate)} | {rounds} | "
                    f"{ratio(k.p99, u.p99)} | "
                    f"{ratio(k.cpu, u.cpu)} | {ratio(k.rss, u.rss)} | "
                    f"{fmt(100 * k.rate / ceil, 0)}% | {fmt(100 * u.rate / ceil, 0)}% | "
                    f"{fmt(100 * k.rate / own_ceil, 0)}% | "
                    f"{fmt(server_ms(k))} / {fmt(server_ms(u))} |")
    return "\n".join(rows)


def server_ms(r: Result) -> float:
    """kube-apiserver + etcd CPU per bound pod in the measured phase (NaN when unknown)."""
    spent = [r.extra[k] for k in ("cpu_kube-apiserver", "cpu_etcd") if k in r.extra]
    return 1000 * sum(spent) / r.pods if spent and r.pods else float("nan")


def writes_table(results: list[Result]) -> str:
    """API writes per bound pod in the measured phase, by verb and resource (the harness's
    own pod creates and, in steady state, force-deletes included — the same for both); a
    contender's rounds pooled."""
    kinds = sorted({k for r in results for k in r.writes})
    if not kinds:
        return ""
    rows = ["| workload | contender | writes/pod | " + " | ".join(kinds) + " |",
            "|---|---|---:|" + "---:|" * len(kinds)]
    pools = pooled_each(results)
    for r in pools:
        if not r.pods:
            continue
        cells = " | ".join(fmt(r.writes.get(k, 0) / r.pods, 2) for k in kinds)
        rows.append(f"| {r.workload} | {r.contender} | "
                    f"{fmt(sum(r.writes.values()) / r.pods, 2)} | {cells} |")
    return "\n".join(rows)


def watch_table(results: list[Result]) -> str:
    """What the API server's watches sent per bound pod in the measured phase, by resource
    (every event to every watcher: the contender's, kube-controller-manager's and the
    harness's own pod watch alike); a contender's rounds pooled. Resources under 0.01
    events per pod are left out."""
    rows = ["| workload | contender | resource | events/pod | bytes/event | KB/pod |",
            "|---|---|---|---:|---:|---:|"]
    pools = pooled_each(results)
    for r in pools:
        for key in sorted(k for k in r.watch if k.startswith("events ")):
            resource = key.split(" ", 1)[1]
            events, size = r.watch[key], r.watch.get("bytes " + resource, 0)
            if not r.pods or events / r.pods < 0.01:
                continue
            rows.append(f"| {r.workload} | {r.contender} | {resource} | "
                        f"{fmt(events / r.pods, 2)} | {fmt(size / events, 0)} | "
                        f"{fmt(size / r.pods / 1024, 1)} |")
    return "\n".join(rows) if len(rows) > 2 else ""


SERVER = ("kube-apiserver", "etcd")  # the control plane's, every contender's alike


def cpu_table(results: list[Result]) -> str:
    """CPU milliseconds per bound pod by process in the measured phase, a contender's rounds
    pooled: its own processes (``counted``: kdra's operator and agent, kdra-native's operator,
    upstream's kube-scheduler and kube-controller-manager), then the control plane's (the
    kube-controller-manager of a kdra contender, where the garbage collector runs, and the
    API server and etcd)."""
    pools = pooled_each(results)
    names = sorted({k.removeprefix("cpu_") for r in pools for k in r.extra
                    if k.startswith("cpu_")}, key=lambda n: (n in SERVER, n))
    if not names:
        return ""
    rows = ["| workload | contender | counted | " + " | ".join(names) + " |",
            "|---|---|---:|" + "---:|" * len(names)]
    for r in pools:
        if not r.pods:
            continue
        cells = " | ".join(fmt(1000 * r.extra[f"cpu_{n}"] / r.pods, 2)
                           if f"cpu_{n}" in r.extra else "-" for n in names)
        rows.append(f"| {r.workload} | {r.contender} | {fmt(1000 * r.cpu / r.pods, 2)} | "
                    f"{cells} |")
    return "\n".join(rows)


def sweep_table(swept: list[tuple[int, Result]]) -> str:
    """The template workload at several cluster sizes: does the cost per pod grow?"""
    rows = ["| nodes | contender | pods bound | pods/s | p50 ms | p99 ms | CPU ms/pod "
            "| allocator ms/pod |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for nodes, r in swept:
        per_pod = 1000 * r.cpu / r.pods if r.pods else float("nan")
        alloc = r.extra.get("alloc_ms_per_call", float("nan"))
        rows.append(f"| {nodes} | {r.contender} | {r.pods} | {fmt(r.rate)} | "
                    f"{fmt(1000 * r.p50, 0)} | {fmt(1000 * r.p99, 0)} | {fmt(per_pod)} | "
                    f"{fmt(alloc, 2)} |")
    return "\n".join(rows)


BEGIN = "<!-- bench/scale.py report: begin (generated; edits inside are overwritten) -->"


END = "<!-- bench/scale.py report: end -->"


def write_block(path: Path, text: str) -> None:
    """Write the report into ``path`` between the BEGIN/END markers when it has them (the
    rest of the file — prose, history — is kept), else as the whole file."""
    current = path.read_text() if path.exists() else ""
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    else:
        path.write_text(f"{BEGIN}\n{text}\n{END}\n")


def machine() -> str:
    """Cores, CPU model and memory of this machine, for the report."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().splitlines()[0].split()[1])
        memory = f", {kib / 2**20:.0f} GiB memory"
    return f"{os.cpu_count()} cores ({model}){memory}"


def targets(results: list[Result], ceiling: Result | None,
            own: Result | None = None) -> list[str]:
    lines = []
    for workload, k, u, _ in head_to_head(results):
        if not u.rate:
            continue
        lines.append(f"{workload}: pods/s {k.rate / u.rate:.2f}x (target >= 1.0) "
                     f"{'MET' if k.rate >= u.rate else 'MISSED'}; p99 "
                     f"{k.p99 / u.p99 if u.p99 else float('nan'):.2f}x (target <= 2.0) "
                     f"{'MET' if k.p99 <= 2 * u.p99 else 'MISSED'}")
        if ceiling and ceiling.rate and workload == "template":
            share = k.rate / ceiling.rate
            lines.append(f"{workload}: kdra at {100 * share:.0f}% of the ceiling (target >= 60%) "
                         f"{'MET' if share >= 0.6 else 'MISSED'}")
            if own and own.rate:
                lines.append(f"{workload}: kdra at {100 * k.rate / own.rate:.0f}% of the same "
                             f"writes on its own objects ({own.rate:.1f} pods/s; for "
                             f"information, the target is the one above)")
    return lines

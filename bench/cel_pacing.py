"""How long does a tenant's expensive selector hold the binder's event loop? Prints figures;
asserts nothing.

Three measurements, the first two to defend the allocator's conversion of CEL cost into
search steps (``kdra.dra.allocator.pacing.UNITS_PER_STEP``), the third its effect:

1. **a search step**: the adversarial backtracking shape (five one-device claims ahead of
   an ``All`` claim over the same 16 GPUs), searched without budget: seconds per step
   (device tried);
2. **a CEL cost unit**: selectors the estimate admits that cost up to the run-time limit —
   ``format``/``==``/``flatten`` over a list that holds one list many times, ``findAll``,
   comprehensions — evaluated on one device: seconds per unit charged, the slowest first;
3. **the loop**: one node with ``--devices`` GPUs (128), a pod whose selector costs the
   run-time limit on every device (and fails there, "cost limit exceeded": issue 36's
   ``format`` bomb), driven the binder's way: one inline slice of
   :class:`~kdra.dra.scheduling.SearchBudget`'s steps, then slices until the outcome, the
   budget's steps or its deadline (:mod:`kdra.operator.scheduler.searches`, without its
   sleeps). Prints the longest single call (what the loop is held at once), the calls, the
   total, the steps, the devices evaluated and the reason; then attempt after attempt (the
   binder retries an exhausted pod later) until the pod gets its final reason.

With ``PYTHONPATH=<other checkout>/operator`` it measures that checkout's allocator (the
"before" of a change); parts it lacks are skipped.

Run: ``.venv/bin/python bench/cel_pacing.py [--devices 128] [--attempts 12]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the bombs' builders

from tests.unit.dra.test_cel_bombs import close, shared

from kdra.dra.allocator import NodeInfo, Placing, Snapshot, place
from kdra.dra.cel import compile_selector, make_device
from kdra.dra.errors import CelCompileError
from kdra.dra.models import parse_claim, parse_class, parse_slice
from kdra.dra.scheduling import SearchBudget

DRIVER = "gpu.kdra.dev"
NODE = "big-node"
HUNDRED = '"' + "a" * 100 + '"'
THOUSAND = '"' + "a" * 1000 + '"'


BOMB = shared(6, HUNDRED) + '"%s".format([l5]).size() > 0' + close(6)
"""tests/e2e/test_hostile_cel.py's run-time bomb: 10^8 characters once formatted."""

EXPENSIVE = {
    "format of shared lists (stopped)": BOMB,
    "format of shared lists": shared(6, '"a"', 7) + '"%s".format([l5]).size() > 0' + close(6),
    "== of shared lists": shared(6, "1", 9) + "l5 == [" + ", ".join(["l4"] * 9) + "]"
    + close(6),
    "in of shared lists": shared(6, "1", 9) + "l5 in [l5]" + close(6),
    "indexOf of shared lists": shared(5, "1", 9) + "[l4].indexOf(l4) >= 0" + close(5),
    "flatten of shared lists": shared(6, "1", 9) + "l5.flatten(5).size() > 0" + close(6),
    "distinct of shared lists": shared(5, "1", 9) + "l4.distinct().size() > 0" + close(5),
    "findAll over a long string": f'cel.bind(t, {THOUSAND}.replace("a", "ab"), '
    'lists.range(20).all(i, t.findAll("a").size() > 0))',
    "comprehension": "lists.range(400).all(i, lists.range(400).all(j, j >= 0))",
    "distinct of a range": "lists.range(700).distinct().size() > 0",
}


def gpu_slice(count: int) -> Any:
    return parse_slice({
        "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{NODE}-gpus", "uid": "uid-slice", "resourceVersion": "1"},
        "spec": {"driver": DRIVER, "nodeName": NODE,
                 "pool": {"name": NODE, "generation": 0, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}}
                             for i in range(count)]}})


def gpu_class() -> Any:
    return parse_class({"metadata": {"name": DRIVER}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})


def claim(name: str, *selectors: str, all_devices: bool = False) -> Any:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if all_devices:
        exactly["allocationMode"] = "All"
    return parse_claim({
        "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}",
                     "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})


def step_time() -> None:
    snapshot = Snapshot.build(slices=[gpu_slice(16)], classes=[gpu_class()])
    # Five one-device claims ahead of a claim for all 16 GPUs: the claims ahead take GPUs the
    # last one needs, so the walk tries every assignment of them before it says no.
    claims = [*(claim(f"one-{i}") for i in range(5)), claim("everything", all_devices=True)]
    place(snapshot, claims[:1], [NodeInfo(NODE)])  # the class selector's memos: walk only
    steps = snapshot.stats.search_steps
    started = time.perf_counter()
    outcome = Placing(snapshot, claims, [NodeInfo(NODE)]).advance(2_000_000)
    seconds = time.perf_counter() - started
    steps = snapshot.stats.search_steps - steps
    if outcome is None or not steps:
        print("1. search step: the shape did not search (skipped)")
        return
    print(f"1. search step: {steps} steps in {seconds:.2f} s: "
          f"{seconds / steps * 1e6:.2f} µs per step")


def unit_time() -> None:
    device = make_device(DRIVER, {"index": ("int", 3)}, {})
    print("2. CEL cost unit (one evaluation each, best of 3):")
    rows = []
    for name, text in EXPENSIVE.items():
        try:
            selector = compile_selector(text)
        except CelCompileError as exc:
            print(f"   {name:34s} not admitted: {exc.message[:70]}")
            continue
        evaluate = getattr(selector, "evaluate", None)
        best, units, verdict = 1e9, 0, ""
        for _ in range(3):
            started = time.perf_counter()
            try:
                if evaluate is None:
                    verdict = str(selector.matches(device))
                else:
                    result, units = evaluate(device)
                    verdict = str(result)
            except Exception as exc:  # a figure, whatever it raised
                units = getattr(exc, "cost", 0)
                verdict = "fails"
            best = min(best, time.perf_counter() - started)
        rows.append((best / units * 1e6 if units else 0.0, name, best, units, verdict,
                     selector.cost_estimate))
    for per_unit, name, best, units, verdict, estimate in sorted(rows, reverse=True):
        per = f"{per_unit:.3f} µs per unit" if units else "(cost not reported)"
        print(f"   {name:34s} estimated {estimate:>7}, charged {units:>7}, "
              f"{best * 1000:7.1f} ms, {per} -> {verdict}")


def loop_hold(devices: int, attempts: int) -> None:
    budget = SearchBudget()
    snapshot = Snapshot.build(slices=[gpu_slice(devices)], classes=[gpu_class()])
    bomb = [claim("bomb", BOMB)]
    node = [NodeInfo(NODE)]
    print(f"3. the loop: one node, {devices} devices, a selector that costs the limit on "
          f"each (budget: {budget.steps} steps, {budget.slice} a slice, {budget.timeout:g} s)")
    entries = [entry for pool in snapshot.node_pools(node[0]).pools for entry in pool.entries]
    for attempt in range(1, attempts + 1):
        evaluated = sum(entry.memoised(BOMB) is not None for entry in entries)
        placing = Placing(snapshot, bomb, node, node_steps=budget.node_steps(1))
        holds: list[float] = []
        started = time.perf_counter()
        outcome = None
        limit = ""
        while outcome is None:
            if holds and placing.steps >= budget.steps:
                limit = "steps"
            elif holds and time.perf_counter() - started >= budget.timeout:
                limit = "deadline"
            if limit:
                outcome = placing.give_up()
                break
            began = time.perf_counter()
            outcome = placing.advance(budget.slice if not holds
                                      else min(budget.slice, budget.steps - placing.steps))
            holds.append(time.perf_counter() - began)
        total = time.perf_counter() - started
        reason = next(iter(outcome.reasons.values()), None) if outcome.reasons else None
        text = (reason.message if reason is not None
                else outcome.fatal.message if outcome.fatal else "placed")
        print(f"   attempt {attempt}: {len(holds)} calls, longest {max(holds) * 1000:.0f} ms, "
              f"total {total:.2f} s, {outcome.steps} steps"
              f" ({getattr(outcome, 'cel_units', 0)} CEL units),"
              f" {sum(e.memoised(BOMB) is not None for e in entries) - evaluated} devices"
              " evaluated,"
              f" ended by {limit or 'its outcome'}: {text[:110]}")
        if not outcome.exhausted:
            break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=128)
    parser.add_argument("--attempts", type=int, default=12)
    args = parser.parse_args()
    step_time()
    unit_time()
    loop_hold(args.devices, args.attempts)


if __name__ == "__main__":
    main()

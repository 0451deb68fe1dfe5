"""How fast are device selectors? Prints figures; asserts nothing.

Compares, on the same expressions and the same device:

* ``celpy-interp``: cel-python 0.5's ``InterpretedRunner`` (walks the parse tree per call);
* ``celpy-compiled``: cel-python 0.5's ``CompiledRunner`` (transpiles to Python). It finds
  extension functions by their module name inside ``celpy.evaluation``'s globals, so this
  script registers its own module there (only here; kdra itself never does);
* ``kdra``: :func:`kdra.dra.cel.compile_selector`, what the allocator uses.

A second table times kdra alone on selectors that use the libraries of upstream's
environment (strings, regex, lists, two-variable comprehensions, IP/CIDR), which cel-python's
runners do not have, with each selector's estimated cost.

With ``--baseline DIR`` (the ``kdra/dra/cel`` directory of another checkout, e.g. from
``git worktree add /tmp/base <commit>``) it instead compares that version ("before") with
this one ("after") on the same selectors, interleaved in one process and timed in CPU time,
best of ``--rounds``: a before/after that holds on a busy machine.

Run: ``.venv/bin/python bench/cel_bench.py [--baseline DIR] [--rounds N]``
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import time
import timeit
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import celpy
import celpy.celtypes as ct
import celpy.evaluation
from celpy.celparser import CELParser

from kdra.dra.cel import _selector, compile_selector, make_device
from kdra.dra.quantity import Quantity, parse_quantity

DRIVER = "resource-driver.example.com"
EXPRESSIONS = {
    "cats": (
        f'device.attributes["{DRIVER}"].color == "black" && '
        f'device.attributes["{DRIVER}"].size == "large"'
    ),
    "driver": f'device.driver == "{DRIVER}"',
    "quantity": f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0',
    "exists": f'device.attributes["{DRIVER}"].exists(k, k == "size")',
}
_A = f'device.attributes["{DRIVER}"]'
LIBRARY_EXPRESSIONS = {
    "twenty-in": " && ".join(f'"size" in {_A}' for _ in range(20)),
    "lowerAscii": f'{_A}.color.lowerAscii().startsWith("bl")',
    "split": f'{_A}.size.split("r").exists(p, p == "la")',
    "find": f'{_A}.color.find("b[a-z]") == "bl"',
    "two-var": f'{_A}.all(k, v, k != "" && v != "")',
    "bind": f'cel.bind(cat, {_A}, cat.color == "black" && cat.size == "large")',
    "cidr": f'cidr("10.0.0.0/8").containsIP({_A}.address)',
}


# Extension functions for the celpy runners (kdra has its own).
def quantity(text: Any) -> Quantity:
    return parse_quantity(str(text))


def compareTo(a: Quantity, b: Quantity) -> ct.IntType:  # the CEL name
    return ct.IntType(a.compare(b))


CELPY_FUNCTIONS: dict[str, Any] = {"quantity": quantity, "compareTo": compareTo}


def celpy_device() -> ct.MapType:
    inner = ct.MapType(
        {
            ct.StringType("color"): ct.StringType("black"),
            ct.StringType("size"): ct.StringType("large"),
        }
    )
    capacity = ct.MapType({ct.StringType("memory"): parse_quantity("80Gi")})
    return ct.MapType(
        {
            ct.StringType("driver"): ct.StringType(DRIVER),
            ct.StringType("attributes"): ct.MapType({ct.StringType(DRIVER): inner}),
            ct.StringType("capacity"): ct.MapType({ct.StringType(DRIVER): capacity}),
        }
    )


def per_call_us(func: Callable[[], object], budget_s: float = 0.1) -> float:
    """Best-of-5 CPU microseconds per call (CPU time: other processes on a shared machine
    stretch wall-clock figures, not these)."""
    timer = timeit.Timer(func, timer=time.process_time)
    number, _ = timer.autorange()
    number = max(1, int(number * budget_s / 0.2))
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


_ENVIRONMENTS: dict[type[celpy.Runner], celpy.Environment] = {}


def celpy_program(runner: type[celpy.Runner], text: str) -> celpy.Runner:
    env = _ENVIRONMENTS.get(runner)
    if env is None:
        env = _ENVIRONMENTS[runner] = celpy.Environment(runner_class=runner)
    return env.program(env.compile(text), functions=CELPY_FUNCTIONS)


def load_baseline(directory: str) -> ModuleType:
    """Another version of ``kdra.dra.cel`` (its modules import each other relatively and
    only unchanged kdra modules absolutely), loaded as the package ``basecel``."""
    spec = importlib.util.spec_from_file_location(
        "basecel", f"{directory}/__init__.py", submodule_search_locations=[directory]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["basecel"] = module
    spec.loader.exec_module(module)
    return module


def cpu_us(func: Callable[[], object], number: int) -> float:
    return timeit.Timer(func, timer=time.process_time).timeit(number) / number * 1e6


def before_after(baseline: ModuleType, rounds: int) -> None:
    after: Any = sys.modules["kdra.dra.cel"]
    versions = (baseline, after)
    attributes = {"color": ("string", "black"), "size": ("string", "large")}
    devices = {id(v): v.make_device(DRIVER, attributes, {"memory": "80Gi"}) for v in versions}
    expressions = {**EXPRESSIONS, "in-5": " && ".join([f'"size" in {_A}'] * 5)}
    print("evaluation, CPU microseconds per call (best of rounds)")
    print(f"{'expression':<10} {'before':>8} {'after':>8} {'after/before':>13}")
    for name, text in expressions.items():
        best: dict[int, float] = {}
        for _ in range(rounds):
            for v in versions:
                selector, device = v.compile_selector(text), devices[id(v)]
                assert selector.matches(device) is True, (name, v.__name__)
                spent = cpu_us(partial(selector.matches, device), 20000)
                best[id(v)] = min(best.get(id(v), spent), spent)
        ratio = best[id(after)] / best[id(baseline)]
        print(f"{name:<10} {best[id(baseline)]:>8.2f} {best[id(after)]:>8.2f} {ratio:>13.2f}")
    print()
    print("cold compilation, CPU microseconds (best of 3)")
    for name, text in expressions.items():
        cold = [
            min(cpu_us(partial(v._selector._compile.__wrapped__, text), 20) for _ in range(3))
            for v in versions
        ]
        print(f"{name:<10} {cold[0]:>8.0f} {cold[1]:>8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="another version's kdra/dra/cel directory")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if args.baseline:
        before_after(load_baseline(args.baseline), args.rounds)
        return
    logging.getLogger("celpy").setLevel(logging.CRITICAL)  # the transpiler logs every error
    root = __name__.split(".")[0]
    celpy.evaluation.__dict__[root] = sys.modules[__name__]  # see the module docstring
    # celpy's parser is a process-wide singleton that keeps the tree class of its first
    # user; the transpiler needs its own, so it goes first (kdra's parser accepts either).
    CELParser.CEL_PARSER = None
    celpy_program(celpy.CompiledRunner, "true")
    cel_device = celpy_device()
    kdra_device = make_device(
        DRIVER,
        {
            "color": ("string", "black"),
            "size": ("string", "large"),
            "address": ("string", "10.1.2.3"),
        },
        {"memory": "80Gi"},
    )

    print("evaluation, CPU microseconds per call (best of 5)")
    print(f"{'expression':<10} {'celpy-interp':>13} {'celpy-compiled':>15} {'kdra':>8}")
    for name, text in EXPRESSIONS.items():
        row = [f"{name:<10}"]
        for runner in (celpy.InterpretedRunner, celpy.CompiledRunner):
            program = celpy_program(runner, text)
            try:
                program.evaluate({"device": cel_device})
                figure = f"{per_call_us(partial(program.evaluate, {'device': cel_device})):.1f}"
            except Exception as exc:  # report it, do not stop the benchmark
                figure = f"fails ({type(exc).__name__})"
            row.append(f"{figure:>13}" if runner is celpy.InterpretedRunner else f"{figure:>15}")
        selector = compile_selector(text)
        row.append(f"{per_call_us(partial(selector.matches, kdra_device)):>8.2f}")
        print(" ".join(row))

    print()
    print("compilation, CPU microseconds")
    for name, text in EXPRESSIONS.items():
        cold = per_call_us(partial(_selector._compile.__wrapped__, text))
        warm = per_call_us(partial(compile_selector, text))
        celpy_compile = per_call_us(partial(celpy_program, celpy.CompiledRunner, text))
        print(
            f"{name:<10} kdra cold {cold:9.0f}   kdra cached {warm:6.2f}   "
            f"celpy-compiled {celpy_compile:9.0f}"
        )

    print()
    print("kdra only: selectors using upstream's libraries")
    print(f"{'expression':<11} {'eval us':>8} {'cold compile us':>16} {'estimated cost':>15}")
    print("(CPU microseconds)")
    for name, text in LIBRARY_EXPRESSIONS.items():
        selector = compile_selector(text)
        assert selector.matches(kdra_device) is True, name
        evaluate = per_call_us(partial(selector.matches, kdra_device))
        cold = per_call_us(partial(_selector._compile.__wrapped__, text))
        print(f"{name:<11} {evaluate:>8.2f} {cold:>16.0f} {selector.cost_estimate:>15}")

    print()
    build = per_call_us(
        lambda: make_device(
            DRIVER,
            {f"attr{i}": ("string", f"value{i}") for i in range(16)},
            {f"cap{i}": f"{i}Gi" for i in range(16)},
        )
    )
    print(f"make_device with 16 attributes + 16 capacities: {build:.1f} us")


if __name__ == "__main__":
    main()

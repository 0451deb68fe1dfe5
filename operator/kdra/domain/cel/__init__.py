"""CEL device selectors: the environment upstream DRA gives ``DeviceClass`` and
``ResourceClaim`` selectors, for kdra's allocator.

Usage::

    view = make_device("gpu.kdra.dev", {"model": ("string", "a100")}, {"memory": "80Gi"})
    selector = compile_selector('device.capacity["gpu.kdra.dev"].memory'
                                '.compareTo(quantity("40Gi")) >= 0')
    selector.matches(view, "gpu.kdra.dev/pool-a/gpu-0")   # True

The environment (what a selector may use):

* one variable, ``device``, with ``driver`` (string), ``attributes`` (domain -> name ->
  int | bool | string | semver) and ``capacity`` (domain -> name -> quantity);
* standard CEL: operators, ``size``, ``int``/``uint``/``double``/``string``/``bool``/
  ``bytes``/``dyn``, ``contains``/``startsWith``/``endsWith``/``matches`` (RE2), the
  macros ``has``, ``all``, ``exists``, ``exists_one``, ``map``, ``filter``, and
  ``cel.bind(var, init, expr)`` (upstream enables the bindings extension);
* the Kubernetes semver library: ``semver(s)``, ``isSemver(s)``, ``v.major()``,
  ``v.minor()``, ``v.patch()``, ``v.isGreaterThan(w)``, ``v.isLessThan(w)``,
  ``v.compareTo(w)``;
* the Kubernetes quantity library: ``quantity(s)``, ``isQuantity(s)``, ``q.compareTo(r)``,
  ``q.isGreaterThan(r)``, ``q.isLessThan(r)``, ``q.asInteger()``, ``q.isInteger()``,
  ``q.asApproximateFloat()``, ``q.add(r | int)``, ``q.sub(r | int)``, ``q.sign()``.

Not provided (a compile error, "undeclared reference"): the other Kubernetes libraries
(strings extension, lists, regex ``find``, URLs, IPs/CIDRs, ``format``), ``type()``,
timestamps and durations, and quantity ``mul``/``div`` (added upstream after 1.31).

Semantics that mirror upstream, and why they matter to the allocator:

* An unknown *domain* is an empty map (``"x" in device.attributes["other.dev"]`` is
  false), but a missing *name* in a map is a run-time error, and so is a non-bool result:
  both make :meth:`DeviceSelector.matches` raise :class:`CelRuntimeError`, which the
  allocator must treat as "allocation failed", never as "no match".
* ``==`` on two semvers compares precedence (build metadata ignored); a semver compared with
  a non-semver is an error. ``==`` on two quantities compares values (``quantity("1Gi") ==
  quantity("1024Mi")``); with a non-quantity it is false. ``<``/``>`` are not defined on
  either: use the comparison methods.
* Cost: upstream rejects expressions whose estimated cost exceeds 1,000,000 and stops
  evaluations whose actual cost does. kdra estimates the cost when compiling (rejecting
  with :class:`CelCompileError`) and charges every comprehension iteration against the same
  budget at run time (stopping with :class:`CelRuntimeError`). Both are approximations of
  cel-go's cost model, not bit-identical with it.

Deliberate differences (documented, tested):

* ``device.driver`` as a whole expression compiles (upstream's type-checker would reject
  it) and fails at evaluation as "must evaluate to bool".
* ``q.isInteger()``/``q.asInteger()`` decide by value: ``quantity("1000m").isInteger()`` is
  true here; upstream answers false for some whole numbers, depending on how they were
  written.

How it runs, and why:

cel-python supplies the grammar and the parser (values are plain Python, see ``_values``). Its
two runners were measured (``bench/cel_bench.py``) and are not used: the
``InterpretedRunner`` re-walks the parse tree on every call (hundreds of microseconds per
evaluation), and the transpiling ``CompiledRunner`` is faster but resolves extension
functions through ``celpy.evaluation``'s module globals, mishandles ``has()`` inside
``&&``/``?:`` and evaluates both sides of every ``&&``. kdra instead checks the parse tree
against this environment (``_parse``), estimates its cost (``_cost``) and compiles it into a
plain Python function (``_codegen``) that calls the operators in ``_runtime``. Compiling
happens once per distinct expression text (:func:`compile_selector` caches), and a
:class:`CelDevice` is built once per device (:func:`make_device`); an evaluation allocates
nothing per device beyond its temporaries.
"""

from __future__ import annotations

from ._cost import COST_LIMIT
from ._drivers import selector_drivers
from ._parse import warm_up
from ._selector import MAX_EXPRESSION_LENGTH, DeviceSelector, compile_selector
from ._values import CelDevice, make_device

__all__ = [
    "COST_LIMIT",
    "MAX_EXPRESSION_LENGTH",
    "CelDevice",
    "DeviceSelector",
    "compile_selector",
    "make_device",
    "selector_drivers",
    "warm_up",
]

"""CEL device selectors: the environment upstream DRA gives ``DeviceClass`` and
``ResourceClaim`` selectors, for kdra's allocator.

Usage::

    view = make_device("gpu.kdra.dev", {"model": ("string", "a100")}, {"memory": "80Gi"})
    selector = compile_selector('device.capacity["gpu.kdra.dev"].memory'
                                '.compareTo(quantity("40Gi")) >= 0')
    selector.matches(view, "gpu.kdra.dev/pool-a/gpu-0")   # True

The environment: what upstream gives a selector in Kubernetes 1.36, which is Kubernetes'
base CEL environment (``k8s.io/apiserver/pkg/cel/environment``, ``MustBaseEnvSet``) plus
the ``device`` variable and ``cel.bind`` (see ``_decls``):

* ``device``: ``driver`` (string), ``allowMultipleAllocations`` (bool, false when the
  device does not set it), ``attributes`` (domain -> name -> value of the unknown type: int
  | bool | string | semver, checked at run time) and ``capacity`` (domain -> name ->
  quantity) — the fields of upstream's ``kubernetes.DRADevice`` as of 1.36;
* standard CEL: operators (ordering across int, uint and double; ``in``; ``?:``),
  ``size``, ``int``/``uint``/``double``/``string``/``bool``/``bytes``/``dyn``/``type`` and
  the type names as values, ``contains``/``startsWith``/``endsWith``/``matches`` (RE2), the
  macros ``has``, ``all``, ``exists``, ``exists_one``, ``map``, ``filter``, and
  ``cel.bind(var, init, expr)``;
* two-variable comprehensions: ``all``/``exists``/``existsOne`` with two variables,
  ``transformList``, ``transformMap``, ``transformMapEntry``;
* cel-go's strings extension, version 2: ``charAt``, ``indexOf``, ``lastIndexOf``,
  ``lowerAscii``, ``upperAscii``, ``replace``, ``split``, ``substring``, ``trim``, ``join``,
  ``format``, ``strings.quote``;
* Kubernetes' regex library: ``find``, ``findAll``;
* lists: Kubernetes' ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``,
  ``lastIndexOf``; cel-go's lists extension, version 3: ``slice``, ``flatten``, ``sort``,
  ``sortBy``, ``lists.range``, ``reverse``, ``distinct``; cel-go's sets extension:
  ``sets.contains``, ``sets.equivalent``, ``sets.intersects``;
* optional values: ``optional.of``, ``optional.ofNonZeroValue``, ``optional.none``,
  ``value``, ``hasValue``, ``or``, ``orValue``, ``optMap``, ``optFlatMap``, ``first``,
  ``last``, ``optional.unwrap``, ``unwrapOpt``; indexing and field selection on an optional
  give an optional;
* Kubernetes' semver library (version 1): ``semver(s)``, ``semver(s, normalize)``,
  ``isSemver(s[, normalize])``, ``major``, ``minor``, ``patch``, ``isGreaterThan``,
  ``isLessThan``, ``compareTo``;
* Kubernetes' quantity library: ``quantity``, ``isQuantity``, ``sign(q)``, ``compareTo``,
  ``isGreaterThan``, ``isLessThan``, ``asInteger``, ``isInteger``, ``asApproximateFloat``,
  ``add``, ``sub`` (1.36 has no ``mul``/``div``);
* Kubernetes' IP and CIDR libraries: ``ip``, ``isIP``, ``ip.isCanonical``, ``family``,
  ``isUnspecified``, ``isLoopback``, ``isLinkLocalMulticast``, ``isLinkLocalUnicast``,
  ``isGlobalUnicast``, ``cidr``, ``isCIDR``, ``containsIP``, ``containsCIDR``, ``ip()``,
  ``masked``, ``prefixLength``, ``string(ip|cidr)``;
* Kubernetes' URL library: ``url``, ``isURL``, ``getScheme``, ``getHost``,
  ``getHostname``, ``getPort``, ``getEscapedPath``, ``getQuery``;
* Kubernetes' format library: ``format.named(name)``, ``format.<name>()``,
  ``<format>.validate(s)``.

Checking is static, as upstream's: an expression whose type is neither bool nor the unknown
type (``device.driver`` alone), a call with no matching overload (``isSemver(1)``,
``"a".lowerAscii(1)``, ``q.sign()``), mixed-type list or map literals, and a constant regular
expression that does not compile are :class:`CelCompileError`; so is an estimated cost above
1,000,000 (``_cost``: cel-go's estimator with upstream DRA's declared sizes, so
``"x" in device.attributes["d"]`` costs 4; some things upstream prices out, such as ``!=`` on
quantities or ``type(x) == int``, are rejected here too). What only the values decide
(attribute types, missing names) is checked when evaluating.

Semantics that mirror upstream, and why they matter to the allocator:

* An unknown *domain* is an empty map (``"x" in device.attributes["other.dev"]`` is
  false), but a missing *name* in a map is a run-time error, and so is a non-bool result:
  both make :meth:`DeviceSelector.matches` raise :class:`CelRuntimeError`, which the
  allocator must treat as "allocation failed", never as "no match".
* ``==`` on two semvers compares precedence (build metadata ignored); a semver compared with
  a non-semver is an error. ``==`` on two quantities compares values (``quantity("1Gi") ==
  quantity("1024Mi")``); with a non-quantity it is false. ``<``/``>`` are not defined on
  either: use the comparison methods.
* Cost: a value costs its size. The estimate (``_cost``) sees the size of what calls build
  (cel-go's strings extension version 5: ``replace``, ``split``, ``join`` ...) and of
  ``cel.bind`` variables; at run time every comprehension step, and every call whose cost
  depends on its values (``_rt_meter``), is charged against a budget of 1,000,000 before
  its result is built, stopping with :class:`CelRuntimeError` ("operation cancelled: actual
  cost limit exceeded"), as upstream stops evaluations whose actual cost passes it
  (docs/cel.md, "Cost").
* A device kdra does not understand (an attribute of an unknown kind, a value of the wrong
  type) never gets a CEL view: :func:`make_device` raises ``InvalidObject``, so no selector
  can select it.

Not provided, and said so when used: timestamps and durations (no ``timestamp()``,
``duration()`` or their accessors), the authorizer library (selectors have no authorizer),
and the optional *syntax* ``x.?y``/``x[?k]``/``[?x]`` that cel-python's grammar lacks (a
syntax error; the functions above cover the same ground).

Deliberate differences (documented, tested):

* ``q.isInteger()``/``q.asInteger()`` decide by value: ``quantity("1000m").isInteger()`` is
  true here; upstream answers false for some whole numbers, depending on how they were
  written.
* ``format``'s compile-time check of constant format strings is not done: a bad clause is
  an evaluation error; ``%e`` prints the en-US notation of version 2 without locale data.

How it runs, and why:

cel-python supplies the grammar and the parser (values are plain Python, see ``_values``). Its
two runners were measured (``bench/cel_bench.py``) and are not used: the
``InterpretedRunner`` re-walks the parse tree on every call (hundreds of microseconds per
evaluation), and the transpiling ``CompiledRunner`` is faster but resolves extension
functions through ``celpy.evaluation``'s module globals, mishandles ``has()`` inside
``&&``/``?:`` and evaluates both sides of every ``&&``. kdra instead resolves the parse
tree's names (``_parse``), type-checks it against this environment (``_check``, ``_decls``,
``_types``), estimates its cost (``_cost``, ``_estimates``) and compiles it into a plain
Python function (``_codegen``) that calls the operators and library functions gathered in
``_runtime``. Compiling
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

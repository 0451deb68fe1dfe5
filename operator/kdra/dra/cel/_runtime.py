"""The namespace compiled selectors run in: operators and every library function.

Generated code (see ``_codegen``) looks every name up in :data:`NAMESPACE`, never in a
module's globals, so nothing is registered anywhere else. The operators and CEL's error
model are in ``_rt_core``; standard functions in ``_rt_std``; the libraries of upstream's
environment in ``_lib_strings``/``_lib_strfmt`` (strings extension, regex),
``_lib_lists`` (lists, sets, optional values), ``_lib_k8s`` (semver, quantity),
``_lib_net`` (IP, CIDR), ``_lib_url`` (URL) and ``_lib_format`` (named formats).

Invariants:

* A function called globally runs helper ``g_<name>``, called on a receiver ``m_<name>``
  (``_decls.helper_name``); each name is defined by exactly one module.
* Every helper is pure (its result depends only on its arguments), so calls with constant
  arguments may be evaluated once, when compiling (:data:`PURE`).
* A helper whose work grows with its arguments has a metered twin ``x_<name>``
  (``_rt_meter``), which takes the evaluation's budget and returns what is left; generated
  code calls the twin where the estimate cannot vouch for the call (``_cost``).
"""

from __future__ import annotations

from typing import Final

from . import (
    _lib_format,
    _lib_k8s,
    _lib_lists,
    _lib_net,
    _lib_strfmt,
    _lib_strings,
    _lib_url,
    _rt_std,
)
from ._rt_core import CEL_ERRORS, COST_LIMIT, OPERATORS, BudgetExceeded, EvalError, describe
from ._rt_meter import METERED

__all__ = [
    "CEL_ERRORS",
    "COST_LIMIT",
    "METERED",
    "NAMESPACE",
    "PURE",
    "BudgetExceeded",
    "EvalError",
    "describe",
]


def _merge(*tables: dict[str, object]) -> dict[str, object]:
    merged: dict[str, object] = {}
    for table in tables:
        clash = merged.keys() & table.keys()
        if clash:
            raise RuntimeError(f"CEL helpers defined twice: {sorted(clash)}")
        merged.update(table)
    return merged


_FUNCTIONS: Final = _merge(
    _rt_std.FUNCTIONS,
    _lib_strings.FUNCTIONS,
    _lib_strfmt.FUNCTIONS,
    _lib_lists.FUNCTIONS,
    _lib_k8s.FUNCTIONS,
    _lib_net.FUNCTIONS,
    _lib_url.FUNCTIONS,
    _lib_format.FUNCTIONS,
)

# Helpers whose calls on constants are evaluated when compiling (unless they fail: errors
# stay run-time errors, as upstream reports them).
PURE: Final = frozenset(_FUNCTIONS)

NAMESPACE: Final[dict[str, object]] = _merge(OPERATORS, _FUNCTIONS, dict(METERED))

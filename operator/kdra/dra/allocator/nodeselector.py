"""Core ``NodeSelector`` matching against a node's name and labels.

Used by the allocator (which ResourceSlices a node sees) and by the binder (a pod's
``nodeSelector`` and required node affinity, an allocated claim's ``nodeSelector``).

Semantics, as in Kubernetes' node affinity:
- terms are ORed; the requirements inside a term are ANDed;
- a term with neither ``matchExpressions`` nor ``matchFields`` matches no node;
- ``matchExpressions`` look at labels: ``In`` (label set and one of the values), ``NotIn``
  (label unset or none of the values), ``Exists``, ``DoesNotExist``, ``Gt``/``Lt`` (label and
  the single value both integers, compared numerically);
- ``matchFields`` support the key ``metadata.name`` with ``In``/``NotIn`` only;
- a malformed requirement (``Gt`` with two values, an unknown field key...) makes its term
  match nothing, the other terms still count (upstream's "lazy error" selector).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kdra.dra.models import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

NAME_FIELD = "metadata.name"
_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What node selection needs to know about a node: its name and its labels."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def selector_matches(selector: NodeSelector | None, node: NodeInfo) -> bool:
    """True when any term of ``selector`` matches ``node``. ``None`` matches every node."""
    if selector is None:
        return True
    return any(term_matches(term, node) for term in selector.node_selector_terms)


def term_matches(term: NodeSelectorTerm, node: NodeInfo) -> bool:
    """True when every requirement of ``term`` holds; an empty term matches nothing."""
    if not term.match_expressions and not term.match_fields:
        return False
    return all(label_requirement_matches(r, node.labels) for r in term.match_expressions) and all(
        field_requirement_matches(r, node.name) for r in term.match_fields
    )


def label_requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    # Gt / Lt: exactly one integer value; a non-integer label never matches.
    if len(req.values) != 1 or value is None:
        return False
    bound, actual = _as_int(req.values[0]), _as_int(value)
    if bound is None or actual is None:
        return False
    return actual > bound if op == "Gt" else actual < bound


def field_requirement_matches(req: NodeSelectorRequirement, node_name: str) -> bool:
    if req.key != NAME_FIELD:
        return False
    if req.operator == "In":
        return node_name in req.values
    if req.operator == "NotIn":
        return node_name not in req.values
    return False


def node_name_selector(node_name: str) -> NodeSelector:
    """The selector pinning to one node: ``matchFields metadata.name In [node_name]``."""
    return NodeSelector(
        node_selector_terms=(
            NodeSelectorTerm(
                match_fields=(
                    NodeSelectorRequirement(key=NAME_FIELD, operator="In", values=(node_name,)),
                )
            ),
        )
    )


def _as_int(text: str) -> int | None:
    # Like Go's strconv.ParseInt: optional sign and digits only (no spaces, no underscores).
    return int(text) if _INTEGER.fullmatch(text) else None

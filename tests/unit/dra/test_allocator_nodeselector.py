"""Core NodeSelector matching: one table over operators, fields, terms."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.dra.allocator import NodeInfo, node_name_selector, selector_matches
from kdra.dra.models import NodeSelector

NODE = NodeInfo("worker-1", {"zone": "a", "gpus": "8", "fast": ""})


def term(*expressions: tuple[str, str, list[str]], fields: Any = ()) -> dict[str, Any]:
    return {
        "matchExpressions": [{"key": k, "operator": op, "values": v} for k, op, v in expressions],
        "matchFields": [{"key": k, "operator": op, "values": v} for k, op, v in fields],
    }


def selector(*terms: dict[str, Any]) -> NodeSelector:
    return NodeSelector.model_validate({"nodeSelectorTerms": list(terms)})


CASES = [
    ("In hit", selector(term(("zone", "In", ["a", "b"]))), True),
    ("In miss", selector(term(("zone", "In", ["b"]))), False),
    ("In on a missing label", selector(term(("rack", "In", ["a"]))), False),
    ("NotIn hit", selector(term(("zone", "NotIn", ["b"]))), True),
    ("NotIn miss", selector(term(("zone", "NotIn", ["a"]))), False),
    ("NotIn on a missing label matches", selector(term(("rack", "NotIn", ["a"]))), True),
    ("Exists", selector(term(("fast", "Exists", []))), True),
    ("Exists on a missing label", selector(term(("rack", "Exists", []))), False),
    ("DoesNotExist", selector(term(("rack", "DoesNotExist", []))), True),
    ("DoesNotExist on a present label", selector(term(("zone", "DoesNotExist", []))), False),
    ("Gt", selector(term(("gpus", "Gt", ["4"]))), True),
    ("Gt equal is false", selector(term(("gpus", "Gt", ["8"]))), False),
    ("Lt", selector(term(("gpus", "Lt", ["16"]))), True),
    ("Lt on a non-integer label", selector(term(("zone", "Lt", ["16"]))), False),
    ("Gt with two values never matches", selector(term(("gpus", "Gt", ["1", "2"]))), False),
    ("Gt with a non-integer value never matches", selector(term(("gpus", "Gt", ["1_0"]))), False),
    ("requirements in a term are ANDed",
     selector(term(("zone", "In", ["a"]), ("gpus", "Gt", ["10"]))), False),
    ("terms are ORed",
     selector(term(("zone", "In", ["b"])), term(("gpus", "Gt", ["4"]))), True),
    ("an empty term matches nothing", selector(term()), False),
    ("matchFields metadata.name In", selector(term(fields=[("metadata.name", "In",
                                                            ["worker-1"])])), True),
    ("matchFields metadata.name NotIn", selector(term(fields=[("metadata.name", "NotIn",
                                                               ["worker-1"])])), False),
    ("matchFields on another field matches nothing",
     selector(term(fields=[("metadata.namespace", "In", ["worker-1"])])), False),
    ("a bad term does not spoil the others",
     selector(term(fields=[("spec.x", "In", ["y"])]), term(("zone", "Exists", []))), True),
    ("labels and fields together",
     selector(term(("zone", "In", ["a"]), fields=[("metadata.name", "In", ["worker-2"])])),
     False),
]


@pytest.mark.parametrize(("name", "node_selector", "expected"), CASES, ids=[c[0] for c in CASES])
def test_selector_matches(name: str, node_selector: NodeSelector, expected: bool) -> None:
    assert selector_matches(node_selector, NODE) is expected


def test_none_matches_every_node() -> None:
    assert selector_matches(None, NODE)


def test_node_name_selector_pins_one_node() -> None:
    pinned = node_name_selector("worker-1")
    assert selector_matches(pinned, NODE)
    assert not selector_matches(pinned, NodeInfo("worker-2"))

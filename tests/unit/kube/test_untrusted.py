"""Bounded decoding of user text (kdra.kube.core.untrusted) and scanning of undecodable JSON
(kdra.kube.core.jsonscan): every failure is an InvalidObject / ScanError, nothing recurses."""

from __future__ import annotations

import json
import sys
import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.dra.errors import InvalidObject
from kdra.kube.core.jsonscan import ScanError, element_spans, member_spans, path_value
from kdra.kube.core.untrusted import (
    capped,
    json_size,
    load_json,
    load_yaml,
    shorten,
    too_deep,
)

F = "metadata.annotations[x]"


def alias_bomb(levels: int = 9, width: int = 9, indent: str = "") -> str:
    """The "billion laughs": each level an anchored list of ``width`` aliases of the last."""
    lines = [indent + "a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"{indent}a{level}: &a{level} ["
                     + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines)


@pytest.mark.parametrize(("text", "words"), [
    ("- &x {name: a}\n- *x", "anchors (&name) are not allowed"),
    ("a: &x 1", "anchors (&name) are not allowed"),
    ("[*x]", "aliases (*name) are not allowed"),
    (alias_bomb(), "anchors (&name) are not allowed"),
    ("[" * 9 + "]" * 9, "nested deeper than 8 levels"),
    ("[" * 1000 + "]" * 1000, "nested deeper than 8 levels"),
    ("[" * 100_000, "nested deeper than 8 levels"),
    ("{a: [b", "not valid YAML/JSON"),
    ("!!python/object:os.system {}", "not valid YAML/JSON"),
    ("a: " + "9" * 5000, "not valid YAML/JSON"),  # int() refuses 5,000 digits
    ("a: 1\n---\nb: 2", "not valid YAML/JSON"),  # two documents
    ("\x00", "not valid YAML/JSON"),
])
def test_load_yaml_refuses(text: str, words: str) -> None:
    with pytest.raises(InvalidObject) as info:
        load_yaml(text, field=F, max_bytes=256 * 1024, max_depth=8)
    assert info.value.field == F
    assert words in info.value.message
    assert len(info.value.message) < 300


def test_load_yaml_refuses_an_alias_bomb_without_building_it() -> None:
    """104 KiB of anchors and aliases: refused at the first anchor, in little memory."""
    text = ("- name: a\n  resourceClaimName: c\n" + alias_bomb(12, 40, "  ")
            + "\n  containers: *a11\n")
    text += "#" * (104 * 1024 - len(text))
    assert len(text) == 104 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(InvalidObject, match="anchors"):
            load_yaml(text, field=F, max_bytes=256 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 1024 * 1024, peak


def test_size_is_checked_before_parsing() -> None:
    with pytest.raises(InvalidObject) as info:
        load_yaml("[" + "1," * 20_000 + "1]", field=F, max_bytes=16 * 1024)
    assert info.value.message == "at most 16384 bytes (has 40003)"
    with pytest.raises(InvalidObject, match="at most 4 bytes"):
        load_json('"éé"', field=F, max_bytes=4)  # bytes, not characters


def test_plain_data_loads() -> None:
    assert load_yaml("- {name: a, containers: [x, y]}", field=F, max_bytes=1024) == [
        {"name": "a", "containers": ["x", "y"]}]
    assert load_json('{"a": "b"}', field=F, max_bytes=1024, max_depth=1) == {"a": "b"}


@pytest.mark.parametrize("text", ["[[1]]", "[" * 5000 + "]" * 5000, "{", "nan-ish"])
def test_load_json_refuses(text: str) -> None:
    with pytest.raises(InvalidObject):
        load_json(text, field=F, max_bytes=64 * 1024, max_depth=1)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_too_deep_counts_levels_without_recursion() -> None:
    assert not too_deep("x", 0)
    assert too_deep({}, 0) and not too_deep({}, 1)
    assert not too_deep(nested(32), 32) and too_deep(nested(33), 32)
    limit = sys.getrecursionlimit()
    assert too_deep(nested(limit * 10), 32)  # deeper than Python could recurse


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=20))
@settings(max_examples=200, deadline=None)
def test_json_size_is_the_compact_encoding(value: Any) -> None:
    expected = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    assert json_size(value, 10**9) == expected


def test_json_size_stops_counting_past_the_limit() -> None:
    assert json_size(["x" * 100] * 10_000, 10 * 1024) > 10 * 1024
    assert json_size(nested(100_000), 10 * 1024) > 10 * 1024


def test_messages_are_cut_short() -> None:
    assert shorten("x" * 500, 10) == "xxxxxxx..."
    assert shorten("short") == "short"
    assert capped([str(i) for i in range(20)], 5) == ["0", "1", "2", "3", "4", "... and 15 more"]


# --------------------------------------------------------------------------- jsonscan

DEEP = b"[" * 1100 + b"]" * 1100


def test_members_and_elements_are_found_without_decoding_values() -> None:
    raw = b' { "type" : "MODIFIED", "object": {"metadata": {"name": "a\\"b"}, "data": %s},' \
          b' "n": -1.5e3, "t": true, "s": "}]" } ' % DEEP
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    members = member_spans(raw)
    assert list(members) == ["type", "object", "n", "t", "s"]
    assert path_value(raw, ("type",)) == "MODIFIED"
    assert path_value(raw, ("object", "metadata", "name")) == 'a"b'
    assert path_value(raw, ("n",)) == -1500.0
    assert path_value(raw, ("s",)) == "}]"
    assert path_value(raw, ("object", "data")) is None  # itself too deep to decode
    assert path_value(raw, ("object", "missing")) is None
    assert path_value(raw, ("type", "x")) is None  # not an object
    items = b'[{"a": 1}, %s , "x"]' % DEEP
    spans = list(element_spans(items, (0, len(items))))
    assert [items[a:b] for a, b in spans] == [b'{"a": 1}', DEEP, b'"x"']
    assert list(element_spans(b"[ ]", (0, 3))) == []


@pytest.mark.parametrize("raw", [b"", b"[", b'{"a" 1}', b'{"a": 1', b'{"a": [1}', b'{"a": "x',
                                 b"{1: 2}", b'{"a": }', b'{"a": 1 "b": 2}'])
def test_malformed_documents_raise_scan_error(raw: bytes) -> None:
    with pytest.raises(ScanError):
        member_spans(raw)
    assert path_value(raw, ("a",)) is None

"""Declaring a gang (kdra.operator.core.gangs): the label, the annotations, their bounds, and
members that disagree."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdra.dra.errors import InvalidObject
from kdra.operator.core.gangs import (
    MATCH_ATTRIBUTE_ANNOTATION,
    MIN_MEMBER_ANNOTATION,
    POD_GROUP_LABEL,
    SPREAD_ANNOTATION,
    TOPOLOGY_KEY_ANNOTATION,
    GangSpec,
    agreed,
    gang_of,
    gang_spec,
)


def pod(gang: Any = "train", **annotations: Any) -> dict[str, Any]:
    labels = {POD_GROUP_LABEL: gang} if gang is not None else {}
    return {"metadata": {"name": "p", "labels": labels, "annotations": annotations}}


def test_a_pod_without_the_label_is_no_member() -> None:
    assert gang_of(pod(None)) is None and gang_spec(pod(None)) is None
    assert gang_of({"metadata": {"labels": {POD_GROUP_LABEL: ""}}}) is None
    assert gang_of({"metadata": {"labels": None}}) is None
    assert gang_of({}) is None


def test_the_spec_from_the_annotations() -> None:
    spec = gang_spec(pod(**{MIN_MEMBER_ANNOTATION: " 4 ",
                            MATCH_ATTRIBUTE_ANNOTATION: "gpu.kdra.dev/nvlinkDomain",
                            TOPOLOGY_KEY_ANNOTATION: "topology.kubernetes.io/rack",
                            SPREAD_ANNOTATION: "node"}))
    assert spec == GangSpec("train", 4, "gpu.kdra.dev/nvlinkDomain",
                            "topology.kubernetes.io/rack", True)
    assert spec.describe() == ("4 pods, devices in one gpu.kdra.dev/nvlinkDomain, nodes in one "
                               "topology.kubernetes.io/rack, one pod per node")
    assert gang_spec(pod(**{MIN_MEMBER_ANNOTATION: "1"})) == GangSpec("train", 1)


@pytest.mark.parametrize(("annotations", "field", "says"), [
    ({}, MIN_MEMBER_ANNOTATION, "missing"),
    ({MIN_MEMBER_ANNOTATION: "0"}, MIN_MEMBER_ANNOTATION, "from 1 to 1024"),
    ({MIN_MEMBER_ANNOTATION: "1025"}, MIN_MEMBER_ANNOTATION, "from 1 to 1024"),
    ({MIN_MEMBER_ANNOTATION: "-3"}, MIN_MEMBER_ANNOTATION, "not a whole number"),
    ({MIN_MEMBER_ANNOTATION: "9" * 10_000}, MIN_MEMBER_ANNOTATION, "not a whole number"),
    ({MIN_MEMBER_ANNOTATION: 4}, MIN_MEMBER_ANNOTATION, "missing"),  # not a string
    ({MIN_MEMBER_ANNOTATION: "2", MATCH_ATTRIBUTE_ANNOTATION: "nvlinkDomain"},
     MATCH_ATTRIBUTE_ANNOTATION, "fully qualified"),
    ({MIN_MEMBER_ANNOTATION: "2", TOPOLOGY_KEY_ANNOTATION: "a b"},
     TOPOLOGY_KEY_ANNOTATION, "not a label key"),
    ({MIN_MEMBER_ANNOTATION: "2", SPREAD_ANNOTATION: "rack"}, SPREAD_ANNOTATION,
     "not supported"),
])
def test_bad_annotations_are_refused_naming_the_field(annotations: dict[str, Any], field: str,
                                                      says: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        gang_spec(pod(**annotations))
    assert caught.value.field == f"metadata.annotations[{field}]"
    assert says in caught.value.message and "gang 'train'" in caught.value.message
    assert len(str(caught.value)) < 400  # bounded, whatever the value's size


def test_members_must_agree() -> None:
    one, other = GangSpec("train", 4), GangSpec("train", 3)
    assert agreed([one, one]) == one
    with pytest.raises(InvalidObject, match="different gang annotations"):
        agreed([one, other])
    with pytest.raises(InvalidObject):
        agreed([])


@given(st.dictionaries(st.sampled_from([MIN_MEMBER_ANNOTATION, MATCH_ATTRIBUTE_ANNOTATION,
                                        TOPOLOGY_KEY_ANNOTATION, SPREAD_ANNOTATION, "x"]),
                       st.one_of(st.text(max_size=300), st.integers(), st.none())),
       st.one_of(st.text(max_size=80), st.integers(), st.none()))
def test_parsing_is_total(annotations: dict[str, Any], gang: Any) -> None:
    try:
        spec = gang_spec(pod(gang, **annotations))
    except InvalidObject as exc:
        assert len(str(exc)) < 600
    else:
        assert spec is None or 1 <= spec.min_member <= 1024

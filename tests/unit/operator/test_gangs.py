"""Declaring a gang (kdra.operator.core.gangs): the label, the annotations, their bounds,
members that disagree, and scheduler-plugins' PodGroup objects (their size; the annotation
overrides it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kdra.dra.errors import InvalidObject
from kdra.kube.resources import POD_GROUPS
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
    pod_group,
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


def group(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ns"}, "spec": spec}


def test_a_pod_group_sizes_the_gang_and_the_annotation_overrides_it() -> None:
    size = pod_group(group(minMember=4, scheduleTimeoutSeconds=10))
    assert size == 4
    assert gang_spec(pod(), size) == GangSpec("train", 4)
    # Constraints still come from the pods' annotations.
    assert gang_spec(pod(**{SPREAD_ANNOTATION: "node"}), size) == GangSpec("train", 4,
                                                                          spread=True)
    # The pods' own annotation wins (documented precedence), even over a bad PodGroup.
    assert gang_spec(pod(**{MIN_MEMBER_ANNOTATION: "2"}), size) == GangSpec("train", 2)
    bad = pod_group(group(minMember=0))
    assert gang_spec(pod(**{MIN_MEMBER_ANNOTATION: "2"}), bad) == GangSpec("train", 2)
    # Neither: the message names both ways to size it.
    with pytest.raises(InvalidObject, match="or create a PodGroup"):
        gang_spec(pod(), None)


@pytest.mark.parametrize(("obj", "field", "says"), [
    (group(), "spec.minMember", "missing"),
    (group(minMember=0), "spec.minMember", "from 1 to 1024"),
    (group(minMember=1025), "spec.minMember", "from 1 to 1024"),
    (group(minMember="4"), "spec.minMember", "not a whole number"),
    (group(minMember=True), "spec.minMember", "not a whole number"),
    (group(minMember=10**400), "spec.minMember", "not a whole number"),
    (group(minMember=10**5000), "spec.minMember", "out of range"),
    (group(minMember={"deep": ["x" * 10_000]}), "spec.minMember", "dict"),
    (group(minMember=2, scheduleTimeoutSeconds=-1), "spec.scheduleTimeoutSeconds",
     "whole number of seconds"),
    (group(minMember=2, scheduleTimeoutSeconds="10s"), "spec.scheduleTimeoutSeconds",
     "whole number of seconds"),
    ({"metadata": "nonsense", "spec": ["x"]}, "spec.minMember", "missing"),
    ("not an object", "spec.minMember", "missing"),
])
def test_a_bad_pod_group_makes_its_gang_invalid_naming_the_field(obj: Any, field: str,
                                                                  says: str) -> None:
    size = pod_group(obj)
    assert isinstance(size, InvalidObject)
    assert size.field == field and says in size.message and len(str(size)) < 400
    with pytest.raises(InvalidObject) as caught:
        gang_spec(pod(), size)
    assert caught.value is size and "PodGroup" in str(caught.value)


def test_the_shipped_pod_group_crd_serves_what_kdra_reads() -> None:
    """manifests/optional/podgroups-crd.yaml: the kind kdra watches (POD_GROUPS), with the fields
    pod_group reads; the chart ships the same file (value podGroups.installCRD)."""
    root = Path(__file__).resolve().parents[3]
    text = (root / "manifests/optional/podgroups-crd.yaml").read_text()
    assert (root / "charts/kdra/files/podgroups-crd.yaml").read_text() == text
    (crd,) = [doc for doc in yaml.safe_load_all(text) if doc]
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["plural"], spec["names"]["kind"], spec["scope"]) == (
        POD_GROUPS.group, POD_GROUPS.plural, POD_GROUPS.kind, "Namespaced")
    (version,) = spec["versions"]
    assert version["name"] == POD_GROUPS.version and version["served"] and version["storage"]
    fields = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert fields["minMember"]["type"] == fields["scheduleTimeoutSeconds"]["type"] == "integer"
    assert "minResources" in fields  # scheduler-plugins' field: kept, not read
    # Not among kdra's CRDs (crds/: `kubectl apply -k/-f crds/`, `kubectl wait -f crds/`).
    assert not list((root / "crds").rglob("*podgroup*"))

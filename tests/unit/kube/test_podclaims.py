"""The claims annotation, generated names and pod-done rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kdra.dra.errors import InvalidObject
from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    PodClaim,
    claim_statuses,
    generate_name_prefix,
    generated_claim,
    kdra_owned,
    owned_by,
    parse_claim_statuses,
    parse_pod_claims,
    pod_claims,
    pod_is_done,
    pod_ref,
)

SEED = """
- name: cat-0
  resourceClaimName: small-white-cat-claim
- name: cat-1
  resourceClaimTemplateName: large-black-cat-claim-template
"""


def test_seed_annotation_yaml() -> None:
    assert parse_pod_claims(SEED) == (
        PodClaim("cat-0", resource_claim_name="small-white-cat-claim"),
        PodClaim("cat-1", resource_claim_template_name="large-black-cat-claim-template"),
    )


def test_json_with_containers_and_request() -> None:
    text = json.dumps([{"name": "gpu", "resourceClaimTemplateName": "t",
                        "containers": ["main"], "request": "big"}])
    (claim,) = parse_pod_claims(text)
    assert claim.containers == ("main",)
    assert claim.request == "big"
    assert claim.from_template


@pytest.mark.parametrize(("text", "field", "words"), [
    ("{", f"metadata.annotations[{CLAIMS_ANNOTATION}]", "not valid YAML"),
    ("name: x", f"metadata.annotations[{CLAIMS_ANNOTATION}]", "must be a list"),
    ("- 3", f"metadata.annotations[{CLAIMS_ANNOTATION}][0]", "must be a mapping"),
    ("- {resourceClaimName: a}", f"metadata.annotations[{CLAIMS_ANNOTATION}][0].name",
     "required"),
    ("- {name: Bad_Name, resourceClaimName: a}",
     f"metadata.annotations[{CLAIMS_ANNOTATION}][0].name", "DNS label"),
    ("- {name: a}", f"metadata.annotations[{CLAIMS_ANNOTATION}][0]", "exactly one of"),
    ("- {name: a, resourceClaimName: b, resourceClaimTemplateName: c}",
     f"metadata.annotations[{CLAIMS_ANNOTATION}][0]", "exactly one of"),
    ("[{name: a, resourceClaimName: b}, {name: a, resourceClaimName: c}]",
     f"metadata.annotations[{CLAIMS_ANNOTATION}][1].name", "duplicate entry name 'a'"),
    ("- {name: a, resourceClaimName: B!}",
     f"metadata.annotations[{CLAIMS_ANNOTATION}][0].resourceClaimName", "DNS subdomain"),
    ("- {name: a, resourceClaimName: b, containers: main}",
     f"metadata.annotations[{CLAIMS_ANNOTATION}][0].containers", "list of container names"),
    ("- {name: a, resourceClaimName: b, source: x}",
     f"metadata.annotations[{CLAIMS_ANNOTATION}][0].source", "unknown field"),
    (json.dumps([{"name": f"c{i}", "resourceClaimName": "x"} for i in range(33)]),
     f"metadata.annotations[{CLAIMS_ANNOTATION}]", "at most 32"),
])
def test_bad_annotations(text: str, field: str, words: str) -> None:
    with pytest.raises(InvalidObject) as info:
        parse_pod_claims(text)
    assert info.value.field == field
    assert words in info.value.message


# Hostile annotations (issue 22, attacks 1 and 2): each is one InvalidObject naming the
# field, with a short message, never another exception, and the parse stays bounded.
HOSTILE = [
    ("[" * 1000 + "]" * 1000, "", "nested deeper than 5 levels"),
    ("[" * 1000, "", "nested deeper than 5 levels"),
    ("- {name: a, resourceClaimName: b, 1: x}", "[0]", "keys must be strings"),
    ("- {1: x, name: a, resourceClaimName: b}", "[0]", "keys must be strings"),
    ("- {name: a, resourceClaimName: b, [x]: y}", "", "not valid YAML/JSON"),
    ("- {name: &n a, resourceClaimName: b}", "", "anchors (&name) are not allowed"),
    ("- {name: a, resourceClaimName: b, containers: *c}", "", "aliases (*name) are not allowed"),
    ("- {name: a, resourceClaimName: b, containers: [\"main\\n\"]}", "[0].containers",
     "container names"),
    ("- {name: a, resourceClaimName: \"b\\n\"}", "[0].resourceClaimName", "DNS subdomain"),
    ("- {name: a, resourceClaimName: ../../x}", "[0].resourceClaimName", "DNS subdomain"),
    ("- {name: a, resourceClaimName: b, containers: [" + ", ".join(["c"] * 3) + "]}",
     "[0].containers", "names a container twice"),
    ("- {name: a, resourceClaimName: b, containers: ["
     + ", ".join(f"c{i}" for i in range(65)) + "]}", "[0].containers", "at most 64 names"),
    ("- {name: a, resourceClaimName: b}\n" + "#" * 17000, "", "at most 16384 bytes"),
    ("- {name: " + "9" * 5000 + "}", "", "not valid YAML/JSON"),
    ("- {name: a, resourceClaimName: b, request: 1.5}", "[0].request", "DNS label"),
    ("- {name: !!binary aGk=, resourceClaimName: b}", "[0].name", "DNS label"),
]


@pytest.mark.parametrize(("text", "where", "words"), HOSTILE,
                         ids=[f"hostile-{i}" for i in range(len(HOSTILE))])
def test_hostile_annotations(text: str, where: str, words: str) -> None:
    for _ in range(2):  # the second answer comes from the cache: the same error
        with pytest.raises(InvalidObject) as info:
            parse_pod_claims(text)
        assert info.value.field == f"metadata.annotations[{CLAIMS_ANNOTATION}]{where}"
        assert words in info.value.message
        assert len(str(info.value)) < 300


def test_non_string_annotation_is_invalid() -> None:
    with pytest.raises(InvalidObject):
        pod_claims({"metadata": {"annotations": {CLAIMS_ANNOTATION: 5}}})


def test_pod_without_annotation_has_no_claims() -> None:
    assert pod_claims({"metadata": {"name": "p"}}) == ()


@pytest.mark.parametrize(("pod", "claim", "expected"), [
    ("pod-with-cats", "cat-1", "pod-with-cats-cat-1-"),
    ("a" * 30, "b" * 25, "a" * 30 + "-" + "b" * 25 + "-"),  # exactly 57: untouched
    # truncated: no trailing '-'. 31 + 25 + 2 = 58 > 57: 31*57//58 = 30, 25*57//58 = 24
    ("a" * 31, "b" * 25, "a" * 30 + "-" + "b" * 24),
    # 100 + 10 + 2 = 112: 100*57//112 = 50, 10*57//112 = 5
    ("p" * 100, "c" * 10, "p" * 50 + "-" + "c" * 5),
    # 253 + 63 + 2 = 318: 253*57//318 = 45, 63*57//318 = 11
    ("p" * 253, "c" * 63, "p" * 45 + "-" + "c" * 11),
])
def test_generate_name_prefix(pod: str, claim: str, expected: str) -> None:
    prefix = generate_name_prefix(pod, claim)
    assert prefix == expected
    assert len(prefix) <= 57


def pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {},
            "status": status}


@pytest.mark.parametrize(("obj", "done"), [
    (pod(phase="Pending"), False),
    (pod(phase="Running"), False),
    (pod(phase="Succeeded"), True),
    (pod(phase="Failed"), True),
    ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}, True),
    ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"nodeName": "n"}},
     False),
])
def test_pod_is_done(obj: dict[str, Any], done: bool) -> None:
    assert pod_is_done(obj) is done


def test_claim_statuses_tolerates_damage() -> None:
    def with_(value: str) -> dict[str, Any]:
        return {"metadata": {"annotations": {CLAIM_STATUSES_ANNOTATION: value}}}

    assert claim_statuses(with_('{"a": "b"}')) == {"a": "b"}
    assert claim_statuses(with_("not json")) == {}
    assert claim_statuses(with_("[1]")) == {}


@pytest.mark.parametrize("value", [
    '{"gpu": "../../../api/v1/namespaces/kdra-system/secrets/kdra-webhook-tls"}',
    '{"gpu": "UPPER"}', '{"gpu": "a/b"}', '{"GPU": "c"}', '{"gpu": {"x": "y"}}',
    '{"gpu": "c\\n"}', "[" * 5000 + "]" * 5000, '{"g": "' + "x" * 17000 + '"}',
    "{" + ", ".join(f'"g{i}": "c"' for i in range(33)) + "}",
])
def test_claim_statuses_ignores_forged_or_malformed_values(value: str) -> None:
    """A value kdra would never write is ignored whole (kdra rewrites it), so no name from
    it ever reaches a URL path (attack 6)."""
    pod = {"metadata": {"annotations": {CLAIM_STATUSES_ANNOTATION: value}}}
    assert claim_statuses(pod) == {}
    with pytest.raises(InvalidObject):
        parse_claim_statuses(value)


def test_kdra_owned_keys() -> None:
    annotations = {CLAIM_STATUSES_ANNOTATION: "{}", CLAIMS_ANNOTATION: "[]",
                   "devices.resource.kdra.dev/main": "x", "gpus.resource.kdra.dev/main": "y",
                   "other.resource.kdra.dev/main": "z", "resource.kdra.dev/placement-policy": "s"}
    assert kdra_owned(annotations) == {CLAIM_STATUSES_ANNOTATION: "{}",
                                       "devices.resource.kdra.dev/main": "x",
                                       "gpus.resource.kdra.dev/main": "y"}
    assert kdra_owned(None) == {}


def test_generated_claim_without_template_labels_has_none() -> None:
    template = {"spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "deviceClassName": "gpu.kdra.dev"}]}}}}
    owner = {"metadata": {"name": "train", "namespace": "default", "uid": "u1"}}
    claim = generated_claim(template, owner, PodClaim("gpu", resource_claim_template_name="t"))
    assert "labels" not in claim["metadata"]


def test_pod_ref_is_a_core_group_consumer_without_api_group() -> None:
    ref = pod_ref({"metadata": {"name": "train", "uid": "u1"}})
    assert ref == {"resource": "pods", "name": "train", "uid": "u1"}  # apiGroup "" omitted


def test_generated_claim_copies_template() -> None:
    template = {"spec": {"metadata": {"labels": {"team": "cats"}, "annotations": {"x": "y"}},
                         "spec": {"devices": {"requests": [
                             {"name": "cat", "deviceClassName": "resource.example.com"}]}}}}
    owner = {"metadata": {"name": "pod-with-cats", "namespace": "default", "uid": "u1"}}
    claim = generated_claim(template, owner, PodClaim("cat-1", resource_claim_template_name="t"))
    meta = claim["metadata"]
    assert meta["generateName"] == "pod-with-cats-cat-1-"
    assert meta["annotations"] == {"x": "y", POD_CLAIM_NAME_ANNOTATION: "cat-1"}
    assert meta["labels"] == {"team": "cats"}  # the template's, nothing added (upstream)
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod",
                                        "name": "pod-with-cats", "uid": "u1",
                                        "controller": True, "blockOwnerDeletion": True}]
    assert meta["finalizers"] == [FINALIZER]
    assert claim["spec"] == template["spec"]["spec"]
    assert owned_by(claim, "u1") and not owned_by(claim, "u2")


def test_allocation_summary_names_every_device_and_goes_with_the_allocation() -> None:
    from kdra.kube.core.podclaims import ALLOCATED_DEVICES, clear_allocation, set_allocation

    allocation = {"devices": {"results": [
        {"request": "gpus", "driver": "gpu.kdra.dev", "pool": "n1", "device": "gpu-8"},
        {"request": "gpus", "driver": "gpu.kdra.dev", "pool": "n1", "device": "gpu-9"}]}}
    status: dict[str, object] = {"reservedFor": [{"name": "p", "uid": "u"}]}
    set_allocation(status, allocation)
    assert status[ALLOCATED_DEVICES] == "gpu-8,gpu-9"
    assert status["allocation"] is allocation
    status["devices"] = [{"driver": "gpu.kdra.dev", "pool": "n1", "device": "gpu-8"}]
    clear_allocation(status)
    assert status == {"reservedFor": [{"name": "p", "uid": "u"}]}

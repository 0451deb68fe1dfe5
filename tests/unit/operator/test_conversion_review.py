"""The /convert answer from bytes (kdra.operator.core.conversion_review), issue 36: one claim whose
device data nests 1,100 levels (deeper than any decoder of ours) made every v1alpha3 read of
claims fail. Now the list converts and the deep value comes back byte for byte, in place or
inside the v1-fields annotation."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from kdra.dra.models.conversion import V1_FIELDS_ANNOTATION
from kdra.operator.core.conversion_review import STAND_IN_KEY, answer

DEEP = ("[" * 1100 + '"a \\"quoted\\" string"' + "]" * 1100).encode()
MEDIUM = ("[" * 600 + "]" * 600).encode()  # decodes, but past orjson's encoder (254)
FIELDS = ('{"f:a":' * 1100 + "{}" + "}" * 1100).encode()
"""The managedFields the API server keeps for a deep value: as deep."""


def claim(name: str, api_version: str, data: bytes = b'{"uuid":"GPU-1"}',
          share: bool = False) -> bytes:
    fields = FIELDS if len(data) > 1000 else b"{}"
    entry = (b'{"driver":"gpu.kdra.dev","pool":"n1","device":"gpu-0",'
             + (b'"shareID":"0f0f0f0f-0000-4000-8000-000000000000",' if share else b"")
             + b'"data":' + data + b"}")
    return (b'{"apiVersion":"' + api_version.encode() + b'","kind":"ResourceClaim",'
            b'"metadata":{"name":"' + name.encode() + b'","namespace":"ns",'
            b'"managedFields":[{"manager":"agent","fieldsV1":' + fields + b'}]},'
            b'"spec":{"devices":{"requests":[]}},'
            b'"status":{"devices":[' + entry + b"]}}")


def review(*objects: bytes, desired: str = "resource.kdra.dev/v1alpha3") -> bytes:
    return (b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":'
            b'{"uid":"u1","desiredAPIVersion":"' + desired.encode() + b'","objects":['
            + b",".join(objects) + b"]}}")


def shallow(body: bytes, deep: bytes) -> Any:
    """The answer with the deep value (which must be in it) and its managedFields replaced
    by null, decoded."""
    assert deep in body
    return orjson.loads(body.replace(deep, b"null").replace(FIELDS, b"null"))


@pytest.mark.parametrize("deep", [DEEP, MEDIUM], ids=["1100 deep", "600 deep"])
def test_a_list_with_one_deep_claim_converts_and_keeps_the_value(deep: bytes) -> None:
    status, body, failure = answer(review(claim("good", "resource.kdra.dev/v1"),
                                          claim("deep", "resource.kdra.dev/v1", deep)))
    assert (status, failure) == (200, None)
    assert body.count(deep) == 1 and body.count(FIELDS) == 1  # carried over, whole
    out = shallow(body, deep)
    assert out["response"]["result"] == {"status": "Success"}
    good, bad = out["response"]["convertedObjects"]
    assert [good["apiVersion"], bad["apiVersion"]] == ["resource.kdra.dev/v1alpha3"] * 2
    assert good["status"]["devices"][0]["data"] == {"uuid": "GPU-1"}
    assert bad["status"]["devices"][0]["data"] is None  # where the deep value was spliced
    assert STAND_IN_KEY.encode() not in body
    # And back up: what a v1alpha3 client writes converts to v1, the value unchanged.
    converted = body[body.index(b'"convertedObjects":[') + 20:body.rindex(b'],"result"')]
    status, up, failure = answer(review(converted, desired="resource.kdra.dev/v1"))
    assert (status, failure) == (200, None) and up.count(deep) == 1
    assert shallow(up, deep)["response"]["convertedObjects"][0]["apiVersion"] == \
        "resource.kdra.dev/v1"


def test_a_deep_value_moved_into_the_v1_fields_annotation_comes_back_escaped() -> None:
    """A device status with a v1-only field (shareID) rides whole in the annotation, as JSON
    text: the deep value is spliced in escaped, and the string is the v1 part exactly."""
    status, body, failure = answer(review(claim("shared", "resource.kdra.dev/v1", DEEP,
                                                share=True)))
    assert (status, failure) == (200, None)
    escaped = orjson.dumps(DEEP.decode())[1:-1]
    assert escaped != DEEP and body.count(escaped) == 1  # in the annotation's text
    assert body.count(DEEP) == 1  # in status.devices, down-converted (no shareID)
    text = body.replace(DEEP, b"null").replace(escaped, b"null").replace(FIELDS, b"null")
    converted = orjson.loads(text)["response"]["convertedObjects"][0]
    assert converted["status"]["devices"][0] == {"driver": "gpu.kdra.dev", "pool": "n1",
                                                 "device": "gpu-0", "data": None}
    annotation = json.loads(converted["metadata"]["annotations"][V1_FIELDS_ANNOTATION])
    assert annotation["status.devices"][0]["shareID"] == "0f0f0f0f-0000-4000-8000-000000000000"
    assert annotation["status.devices"][0]["data"] is None  # DEEP, replaced above


def test_a_body_that_is_no_review_is_400_and_a_bad_object_a_failure() -> None:
    status, body, failure = answer(b"[" * 2000)
    assert status == 400 and b"cannot be decoded" in body and failure
    status, body, failure = answer(b'{"kind":"ConversionReview"}')
    assert status == 400 and failure
    unknown = claim("x", "resource.kdra.dev/v9", DEEP)
    status, body, failure = answer(review(unknown))
    assert status == 200 and failure is not None and "v9" in failure
    assert orjson.loads(body)["response"]["result"]["status"] == "Failure"


def test_deep_elsewhere_is_still_refused_whole() -> None:
    """Only device data is carried undecoded (it is the same in both versions); a deep spec
    is refused, as before, with an answer naming why."""
    deep_spec = claim("x", "resource.kdra.dev/v1").replace(
        b'"requests":[]', b'"requests":' + DEEP)
    status, _, failure = answer(review(deep_spec))
    assert status == 400 and failure and "cannot be decoded" in failure

"""Conversion between resource.kdra.dev/v1 and v1alpha3: lossless both ways (properties over
generated objects), what each version shows, and how the annotation is (not) trusted."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from kdra.dra.errors import InvalidObject
from kdra.dra.models.conversion import (
    V1,
    V1_FIELDS_ANNOTATION,
    V1ALPHA3,
    convert,
    review,
    to_v1,
    to_v1alpha3,
)
from tests.unit.dra.conversion_strategies import v1_objects, v1alpha3_objects

PROPERTY = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(v1_objects())
def test_v1_to_v1alpha3_to_v1_is_identity(obj: dict[str, Any]) -> None:
    frozen = copy.deepcopy(obj)
    down = to_v1alpha3(obj)
    assert obj == frozen, "the input must not be modified"
    assert down["apiVersion"] == V1ALPHA3
    assert to_v1(down) == obj


@PROPERTY
@given(v1alpha3_objects())
def test_v1alpha3_to_v1_to_v1alpha3_is_identity(obj: dict[str, Any]) -> None:
    up = to_v1(obj)
    assert up["apiVersion"] == V1
    assert V1_FIELDS_ANNOTATION not in (up["metadata"].get("annotations") or {})
    assert to_v1alpha3(up) == obj


@PROPERTY
@given(v1_objects())
def test_v1alpha3_form_round_trips_too(obj: dict[str, Any]) -> None:
    """A v1alpha3 object that carries the annotation (as kdra produced it) survives
    v1alpha3 -> v1 -> v1alpha3 with its annotation."""
    down = to_v1alpha3(obj)
    assert to_v1alpha3(to_v1(down)) == down


def claim(*requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": list(requests), **devices}}}


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(obj["metadata"]["annotations"][V1_FIELDS_ANNOTATION]))


def test_exact_request_moves_out_of_exactly_without_annotation() -> None:
    down = to_v1alpha3(claim({"name": "gpu", "exactly": {
        "deviceClassName": "gpu.kdra.dev", "count": 2, "adminAccess": True}}))
    assert down["spec"]["devices"]["requests"] == [
        {"name": "gpu", "deviceClassName": "gpu.kdra.dev", "count": 2, "adminAccess": True}]
    assert "annotations" not in down["metadata"]


def test_first_available_shows_its_first_choice_and_keeps_the_rest() -> None:
    request = {"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "h100", "count": 1, "tolerations": [
            {"key": "k", "operator": "Exists"}]},
        {"name": "small", "deviceClassName": "a100", "count": 2}]}
    down = to_v1alpha3(claim(request, constraints=[
        {"requests": ["gpu/small"], "distinctAttribute": "gpu.kdra.dev/uuid"}]))
    assert down["spec"]["devices"]["requests"] == [
        {"name": "gpu", "deviceClassName": "h100", "count": 1}]
    assert "constraints" not in down["spec"]["devices"]
    assert stored(down) == {
        "spec.devices.requests": [[0, request]],
        "spec.devices.constraints": [{"requests": ["gpu/small"],
                                      "distinctAttribute": "gpu.kdra.dev/uuid"}]}


def test_v1alpha3_client_change_wins_over_a_stale_annotation() -> None:
    obj = claim({"name": "gpu", "exactly": {"deviceClassName": "gpu.kdra.dev",
                                            "tolerations": [{"key": "k", "operator": "Exists"}]}})
    down = to_v1alpha3(obj)
    down["spec"]["devices"]["requests"][0]["deviceClassName"] = "other"
    up = to_v1(down)
    assert up["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "other"}}]
    assert "annotations" not in up["metadata"]


@pytest.mark.parametrize("annotation", [
    "not json", "[1, 2]", json.dumps({"spec.devices.requests": "x"}),
    json.dumps({"spec.devices.requests": [[0, {"name": "gpu", "exactly": {
        "deviceClassName": "gpu.kdra.dev", "count": -3}}]]}),      # invalid: ignored
    json.dumps({"spec.devices.requests": [[7, {"name": "x"}]]}),   # no such index
])
def test_a_forged_or_broken_annotation_changes_nothing(annotation: str) -> None:
    alpha = {"apiVersion": V1ALPHA3, "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "ns",
                          "annotations": {V1_FIELDS_ANNOTATION: annotation}},
             "spec": {"devices": {"requests": [{"name": "gpu",
                                                "deviceClassName": "gpu.kdra.dev"}]}}}
    up = to_v1(alpha)
    assert up["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.kdra.dev"}}]
    assert "annotations" not in up["metadata"]


def test_slice_devices_flatten_and_keep_what_v1alpha3_cannot_say() -> None:
    device = {"name": "gpu-0", "attributes": {"index": {"int": 0}, "cores": {"ints": [0, 1]}},
              "capacity": {"memory": {"value": "80Gi"}},
              "taints": [{"key": "gpu.kdra.dev/unhealthy", "effect": "NoSchedule"}]}
    plain = {"name": "gpu-1", "attributes": {"index": {"int": 1}},
             "capacity": {"memory": {"value": "80Gi"}}}
    obj = {"apiVersion": V1, "kind": "ResourceSlice", "metadata": {"name": "s"},
           "spec": {"driver": "gpu.kdra.dev", "nodeName": "n",
                    "pool": {"name": "n", "generation": 0, "resourceSliceCount": 1},
                    "devices": [device, plain]}}
    down = to_v1alpha3(obj)
    assert down["spec"]["devices"] == [
        {"name": "gpu-0", "basic": {"attributes": {"index": {"int": 0}},
                                    "capacity": {"memory": "80Gi"}}},
        {"name": "gpu-1", "basic": {"attributes": {"index": {"int": 1}},
                                    "capacity": {"memory": "80Gi"}}}]
    assert stored(down) == {"spec.devices": {"gpu-0": device}}
    assert to_v1(down) == obj


def test_results_lose_admin_access_in_v1alpha3_and_get_it_back() -> None:
    obj = claim({"name": "gpu", "exactly": {"deviceClassName": "gpu.kdra.dev",
                                            "adminAccess": True}})
    result = {"request": "gpu", "driver": "gpu.kdra.dev", "pool": "n", "device": "gpu-0",
              "adminAccess": True}
    obj["status"] = {"allocation": {"devices": {"results": [result]}},
                     "allocatedDevices": "gpu-0"}
    down = to_v1alpha3(obj)
    assert down["status"]["allocation"]["devices"]["results"] == [
        {k: v for k, v in result.items() if k != "adminAccess"}]
    assert down["status"]["allocatedDevices"] == "gpu-0"
    assert to_v1(down) == obj


def test_convert_checks_kind_and_versions() -> None:
    obj = claim({"name": "gpu", "exactly": {"deviceClassName": "gpu.kdra.dev"}})
    assert convert(obj, V1) == obj
    with pytest.raises(InvalidObject, match="v2"):
        convert(obj, "resource.kdra.dev/v2")
    with pytest.raises(InvalidObject, match="Pod"):
        convert({**obj, "kind": "Pod"}, V1ALPHA3)


def test_review_answers_each_object_in_order() -> None:
    objects = [claim({"name": f"r{i}", "exactly": {"deviceClassName": "c"}}) for i in range(3)]
    answer = review({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                     "request": {"uid": "u1", "desiredAPIVersion": V1ALPHA3,
                                 "objects": objects}})
    response = answer["response"]
    assert response["uid"] == "u1"
    assert response["result"] == {"status": "Success"}
    assert [o["spec"]["devices"]["requests"][0]["name"]
            for o in response["convertedObjects"]] == ["r0", "r1", "r2"]
    assert all(o["apiVersion"] == V1ALPHA3 for o in response["convertedObjects"])


def test_review_failure_names_the_object() -> None:
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    answer = review({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                     "request": {"uid": "u2", "desiredAPIVersion": V1, "objects": [bad]}})
    result = answer["response"]["result"]
    assert result["status"] == "Failure"
    assert "Pod p" in result["message"]


@pytest.mark.parametrize("body", [None, [], {"kind": "AdmissionReview"},
                                  {"apiVersion": "apiextensions.k8s.io/v1",
                                   "kind": "ConversionReview", "request": {}}])
def test_review_rejects_what_is_not_a_conversion_review(body: Any) -> None:
    with pytest.raises(InvalidObject):
        review(body)

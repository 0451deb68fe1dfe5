"""Extended resources backed by kdra (kdra.operator.core.extended, kdra.kube.core.extended_entry):
class mapping, the pod conversion of the mutating webhook, the generated claim, the parsed
entry, and which container sees which devices. Table-driven, no cluster."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from kdra.agent.core.checkpoint import PreparedDevice
from kdra.agent.core.exposure import Adjustment, PodInfo, PreparedClaim, decide
from kdra.dra.errors import InvalidObject
from kdra.kube.core.extended_entry import (
    ExtendedRequest,
    class_name_error,
    is_extended_resource_name,
)
from kdra.kube.core.podclaims import (
    CLAIMS_ANNOTATION,
    FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    PodClaim,
    parse_pod_claims,
    pod_claims,
)
from kdra.operator.core.admission import class_errors, mutate_pod, pod_errors
from kdra.operator.core.extended import (
    ENTRY_NAME,
    EXTENDED_CLAIM_ANNOTATION,
    class_mapping,
    convert_pod,
    extended_claim,
    extended_names,
)
from kdra.operator.core.pod_devices import container_devices

GPU = "gpu.kdra.dev/gpu"
MAPPING = {GPU: "gpu.kdra.dev", "example.com/nic": "nic.example.com",
           "deviceclass.resource.kdra.dev/gpu.kdra.dev": "gpu.kdra.dev"}


def cls(name: str, extended: str | None = None, created: str = "2026-01-01T00:00:00Z"
        ) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": []}
    if extended is not None:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
            "metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def ctr(name: str = "main", limits: dict[str, Any] | None = None,
        requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "busybox", "resources": resources}


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (),
        annotation: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "uid-p"}
    if annotation is not None:
        meta["annotations"] = {CLAIMS_ANNOTATION: annotation}
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": meta, "spec": spec}


def apply_patch(obj: Any, patch: list[dict[str, Any]]) -> Any:
    """RFC 6902 add / remove on objects and lists, with ~0 / ~1 unescaped (what the API server
    does with the webhook's patch)."""
    doc = copy.deepcopy(obj)
    for op in patch:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")]
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if op["op"] == "remove":
            assert last in parent, op
            del parent[last]
        elif isinstance(parent, list):
            assert op["op"] == "add"
            parent.append(op["value"]) if last == "-" else parent.insert(int(last), op["value"])
        else:
            assert op["op"] == "add", op
            parent[last] = copy.deepcopy(op["value"])
    return doc


def extended_entry(pod_obj: dict[str, Any]) -> list[dict[str, Any]]:
    entries = yaml.safe_load(pod_obj["metadata"]["annotations"][CLAIMS_ANNOTATION])
    (entry,) = [e for e in entries if e["name"] == ENTRY_NAME]
    return list(entry["extendedResources"])


# --------------------------------------------------------------------------- names, classes


@pytest.mark.parametrize(("name", "extended"), [
    ("gpu.kdra.dev/gpu", True), ("example.com/fpga_1.x", True), ("nvidia.com/gpu", True),
    ("cpu", False), ("memory", False), ("hugepages-2Mi", False), ("kubernetes.io/x", False),
    ("node.kubernetes.io/x", False), ("requests.example.com/gpu", False),
    ("Example.com/gpu", False), ("example.com/", False), ("example.com/-x", False),
    ("a/" + "x" * 64, False), (7, False), (None, False),
])
def test_extended_resource_names(name: Any, extended: bool) -> None:
    assert is_extended_resource_name(name) is extended


def test_class_mapping_implicit_names_and_the_newest_class_wins() -> None:
    mapping = class_mapping([
        cls("old", GPU, "2026-01-01T00:00:00Z"),
        cls("new", GPU, "2026-02-01T00:00:00Z"),
        cls("b-same", "example.com/nic", "2026-03-01T00:00:00Z"),
        cls("a-same", "example.com/nic", "2026-03-01T00:00:00Z"),
        cls("bad", "cpu"),  # refused by the webhook; ignored if stored anyway
        {"metadata": {}}, "junk", {"spec": {"extendedResourceName": GPU}},
    ])
    assert mapping == {
        GPU: "new", "example.com/nic": "a-same",
        **{f"deviceclass.resource.kdra.dev/{n}": n
           for n in ("old", "new", "b-same", "a-same", "bad")}}


@pytest.mark.parametrize(("name", "words"), [
    (None, None), (GPU, None),
    ("cpu", "must be an extended resource name"),
    ("kubernetes.io/gpu", "must be an extended resource name"),
    ("deviceclass.resource.kdra.dev/x", "must not start with"),
])
def test_class_extended_resource_name_is_validated(name: str | None, words: str | None) -> None:
    problem = class_name_error(name)
    assert (problem is None) if words is None else (words in (problem or ""))
    errors = class_errors(cls("c", name))
    if words is None:
        assert errors == []
    else:
        assert [e.field for e in errors] == ["spec.extendedResourceName"]


# --------------------------------------------------------------------------- conversion


def test_a_limit_becomes_the_extended_resources_entry() -> None:
    original = pod(ctr(limits={GPU: "2", "cpu": "1"}, requests={GPU: "2", "cpu": "1"}))
    conversion = convert_pod(original, MAPPING)
    assert conversion.errors == ()
    assert conversion.pod is not None
    # The patch, applied by the API server, gives exactly the converted pod.
    assert apply_patch(original, list(conversion.patch)) == conversion.pod
    resources = conversion.pod["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    assert extended_entry(dict(conversion.pod)) == [
        {"request": "container-0-request-1", "container": "main", "resource": GPU,
         "deviceClassName": "gpu.kdra.dev", "count": 2}]
    assert original["spec"]["containers"][0]["resources"]["limits"][GPU] == "2"  # not mutated
    # Converted once: nothing more to do (reinvocation).
    assert convert_pod(conversion.pod, MAPPING).patch == ()


def test_request_names_follow_upstream_init_containers_first_sorted_names() -> None:
    p = pod(ctr("a", limits={"example.com/nic": "1", GPU: "1", "cpu": "1"}),
            ctr("b", limits={"deviceclass.resource.kdra.dev/gpu.kdra.dev": "3"}),
            init=(ctr("setup", limits={GPU: "1"}),))
    conversion = convert_pod(p, MAPPING)
    assert conversion.pod is not None
    assert [(r["request"], r["container"], r["count"]) for r in
            extended_entry(dict(conversion.pod))] == [
        ("container-0-request-0", "setup", 1),
        ("container-1-request-1", "a", 1),     # sorted: cpu, example.com/nic, gpu.kdra.dev/gpu
        ("container-1-request-2", "a", 1),
        ("container-2-request-0", "b", 3)]
    (entry,) = [e for e in pod_claims(conversion.pod) if e.extended]
    assert entry.containers == ("setup", "a", "b")


@pytest.mark.parametrize(("limits", "requests", "field", "words"), [
    ({}, {GPU: "1"}, f"requests[{GPU}]", "needs a limit"),
    ({GPU: "2"}, {GPU: "1"}, f"requests[{GPU}]", "cannot be overcommitted"),
    ({GPU: "2"}, {GPU: "junk"}, f"requests[{GPU}]", "cannot be overcommitted"),
    ({GPU: "1G"}, None, f"limits[{GPU}]", "asks for 1000000000 devices"),
    ({GPU: "1e400"}, None, f"limits[{GPU}]", "whole number"),
    ({GPU: "33"}, None, f"limits[{GPU}]", "at most 32"),
    ({GPU: "1500m"}, None, f"limits[{GPU}]", "whole number"),
    ({GPU: "-1"}, None, f"limits[{GPU}]", "whole number"),
    ({GPU: "x" * 10_000}, None, f"limits[{GPU}]", "whole number"),
])
def test_wrong_counts_are_denied_naming_the_field(limits: dict[str, Any],
                                                  requests: dict[str, Any] | None,
                                                  field: str, words: str) -> None:
    conversion = convert_pod(pod(ctr(limits=limits, requests=requests)), MAPPING)
    (error,) = conversion.errors
    assert error.field == f"spec.containers[0].resources.{field}"
    assert words in error.message and len(error.message) < 400
    assert conversion.patch == ()


def test_more_than_32_devices_in_all_are_denied() -> None:
    p = pod(*(ctr(f"c{i}", limits={GPU: "8"}) for i in range(5)))
    (error,) = convert_pod(p, MAPPING).errors
    assert (error.field, "asks for 40 devices") == ("spec", error.message[:19])


def test_unknown_names_zero_counts_and_plain_pods() -> None:
    plain = pod(ctr(limits={"cpu": "1", "example.com/fpga": "1"}))
    assert convert_pod(plain, MAPPING) == convert_pod(plain, {})
    assert convert_pod(plain, MAPPING).patch == ()
    zero = convert_pod(pod(ctr(limits={GPU: "0"})), MAPPING)
    assert zero.errors == () and zero.requests == ()  # removed, asks for nothing
    assert zero.pod is not None and CLAIMS_ANNOTATION not in (
        zero.pod["metadata"].get("annotations") or {})
    assert extended_names(plain) == {"example.com/fpga"}
    assert extended_names(pod(ctr(limits={"cpu": "1"}))) == frozenset()


@pytest.mark.parametrize("text", [
    "- name: mine\n  resourceClaimName: c\n",          # block list: appended as an item
    "[{name: mine, resourceClaimName: c}]",            # flow list: before the bracket
    '[{"name": "mine", "resourceClaimName": "c"}]',    # JSON
    "  - name: mine\n    resourceClaimName: c\n",      # indented: re-written as JSON
    "[]",
])
def test_the_users_entries_are_kept(text: str) -> None:
    conversion = convert_pod(pod(ctr(limits={GPU: "1"}), annotation=text), MAPPING)
    assert conversion.pod is not None and conversion.errors == ()
    new_text = conversion.pod["metadata"]["annotations"][CLAIMS_ANNOTATION]
    entries = parse_pod_claims(new_text)
    users = parse_pod_claims(text)
    assert entries[:-1] == users and entries[-1].name == ENTRY_NAME
    if not text.startswith(" "):
        assert new_text.startswith(text.rstrip()[:-1] if text.startswith("[") else text)


@pytest.mark.parametrize(("text", "words"), [
    ("- name: extended-resources\n  resourceClaimName: c\n", "already has an entry"),
    (json.dumps([{"name": f"e{i}", "resourceClaimName": "c"} for i in range(32)]),
     "at most 32"),
    ("{not: a list}", "must be a list"),
])
def test_an_annotation_that_cannot_take_the_entry_is_denied(text: str, words: str) -> None:
    (error,) = convert_pod(pod(ctr(limits={GPU: "1"}), annotation=text), MAPPING).errors
    assert words in error.message


# --------------------------------------------------------------------------- the webhook


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"uid": "u", "operation": "CREATE", "object": obj,
            "kind": {"group": "", "kind": "Pod"}}


def test_mutate_pod_converts_then_sets_scheduler_and_env() -> None:
    original = pod(ctr(limits={GPU: "2"}, requests={GPU: "2"}))
    answer = mutate_pod(review(original), gpu_claims=frozenset(), extended_classes=MAPPING)
    assert answer.allowed
    mutated = apply_patch(original, list(answer.patch))
    assert mutated["spec"]["schedulerName"] == "kdra-scheduler"
    assert {e["name"] for e in mutated["spec"]["containers"][0]["env"]} == {
        "KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"}
    assert pod_errors(mutated) == []  # the validating webhook admits what it produced
    again = mutate_pod(review(mutated), gpu_claims=frozenset(), extended_classes=MAPPING)
    assert again.patch == ()


@pytest.mark.parametrize(("gpu_classes", "gpu_env"), [
    (None, True), (frozenset({"gpu.kdra.dev"}), True), (frozenset({"other"}), False)])
def test_the_gpu_variable_only_where_the_class_may_give_gpus(
        gpu_classes: frozenset[str] | None, gpu_env: bool) -> None:
    original = pod(ctr(limits={GPU: "1"}))
    answer = mutate_pod(review(original), gpu_claims=frozenset(), extended_classes=MAPPING,
                        extended_gpu_classes=gpu_classes)
    env = {e["name"] for e in apply_patch(original, list(answer.patch))["spec"][
        "containers"][0]["env"]}
    assert ("NVIDIA_VISIBLE_DEVICES" in env) is gpu_env and "KDRA_DEVICES" in env


def test_mutate_pod_denies_wrong_counts_and_unreadable_classes() -> None:
    denied = mutate_pod(review(pod(ctr(limits={GPU: "1G"}))), extended_classes=MAPPING)
    assert not denied.allowed and denied.kind == "Pod"
    assert "asks for 1000000000 devices" in denied.message
    unread = mutate_pod(review(pod(ctr(limits={GPU: "1"}))), extended_error="cannot read")
    assert unread.message == "spec: cannot read"
    plain = mutate_pod(review(pod(ctr(limits={"cpu": "1"}))), extended_error="cannot read")
    assert plain.allowed and plain.patch == ()


# --------------------------------------------------------------------------- the entry


ENTRY = {"name": "extended-resources", "extendedResources": [
    {"request": "container-0-request-0", "container": "a", "resource": GPU,
     "deviceClassName": "gpu.kdra.dev", "count": 2},
    {"request": "container-1-request-0", "container": "b", "resource": GPU,
     "deviceClassName": "gpu.kdra.dev", "count": 1}]}


def test_the_entry_parses() -> None:
    (entry,) = parse_pod_claims(json.dumps([ENTRY]))
    assert entry.generated and not entry.from_template
    assert entry.containers == ("a", "b")
    assert entry.extended == (
        ExtendedRequest("container-0-request-0", "a", GPU, "gpu.kdra.dev", 2),
        ExtendedRequest("container-1-request-0", "b", GPU, "gpu.kdra.dev", 1))
    assert entry.shows("a", "container-0-request-0")
    assert not entry.shows("a", "container-1-request-0")
    assert entry.shows("b", "container-1-request-0/sub")


def _item(**changes: Any) -> list[dict[str, Any]]:
    item = {**ENTRY["extendedResources"][0], **changes}  # type: ignore[dict-item]
    return [{"name": "x", "extendedResources": [{k: v for k, v in item.items()
                                                 if v is not None}]}]


@pytest.mark.parametrize(("entries", "where", "words"), [
    (_item(count=0), "[0].extendedResources[0].count", "from 1 to 32"),
    (_item(count=33), "[0].extendedResources[0].count", "from 1 to 32"),
    (_item(count=True), "[0].extendedResources[0].count", "from 1 to 32"),
    (_item(count="2"), "[0].extendedResources[0].count", "from 1 to 32"),
    (_item(container="../x"), "[0].extendedResources[0].container", "container name"),
    (_item(request=None), "[0].extendedResources[0].request", "required"),
    (_item(resource="cpu"), "[0].extendedResources[0].resource", "extended resource"),
    (_item(deviceClassName="A_B"), "[0].extendedResources[0].deviceClassName", "DeviceClass"),
    (_item(extra=1), "[0].extendedResources[0].extra", "unknown field"),
    ([{"name": "x", "extendedResources": []}], "[0].extendedResources", "non-empty"),
    ([{"name": "x", "extendedResources": "gpu"}], "[0].extendedResources", "non-empty"),
    ([{**ENTRY, "containers": ["a"]}], "[0].containers", "not allowed"),
    ([{**ENTRY, "resourceClaimName": "c"}], "[0].resourceClaimName", "not allowed"),
    ([ENTRY, {**ENTRY, "name": "again"}], "[1].extendedResources", "only one entry"),
    ([{"name": "x", "extendedResources": [
        {**ENTRY["extendedResources"][0], "request": f"r{i}", "count": 8}  # type: ignore[dict-item]
        for i in range(5)]}], "[0].extendedResources", "40 devices"),
    ([{"name": "x", "extendedResources": [ENTRY["extendedResources"][0]] * 2}],
     "[0].extendedResources[1].request", "duplicate"),
])
def test_hostile_entries_are_refused_naming_the_field(entries: Any, where: str,
                                                      words: str) -> None:
    with pytest.raises(InvalidObject) as info:
        parse_pod_claims(json.dumps(entries))
    assert info.value.field == f"metadata.annotations[{CLAIMS_ANNOTATION}]{where}"
    assert words in info.value.message


# --------------------------------------------------------------------------- the claim, devices


def test_the_generated_claim() -> None:
    (entry,) = parse_pod_claims(json.dumps([ENTRY]))
    claim = extended_claim(pod(), entry)
    meta = claim["metadata"]
    assert meta["generateName"] == "p-extended-resources-"
    assert meta["annotations"] == {POD_CLAIM_NAME_ANNOTATION: ENTRY_NAME,
                                   EXTENDED_CLAIM_ANNOTATION: "true"}
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                        "uid": "uid-p", "controller": True,
                                        "blockOwnerDeletion": True}]
    assert meta["finalizers"] == [FINALIZER]
    assert claim["spec"] == {"devices": {"requests": [
        {"name": "container-0-request-0", "exactly": {
            "deviceClassName": "gpu.kdra.dev", "allocationMode": "ExactCount", "count": 2}},
        {"name": "container-1-request-0", "exactly": {
            "deviceClassName": "gpu.kdra.dev", "allocationMode": "ExactCount", "count": 1}}]}}


def test_each_container_sees_only_its_own_requests() -> None:
    (entry,) = parse_pod_claims(json.dumps([ENTRY]))
    p = pod(ctr("a"), ctr("b"), ctr("c"))
    results = {ENTRY_NAME: [("container-0-request-0", "gpu.kdra.dev", "n", "g0"),
                            ("container-0-request-0", "gpu.kdra.dev", "n", "g1"),
                            ("container-1-request-0", "gpu.kdra.dev", "n", "g2")]}
    uuids = {("gpu.kdra.dev", "n", f"g{i}"): f"GPU-{i}" for i in range(3)}
    assert container_devices(p, [entry], results, uuids) == {
        "devices.resource.kdra.dev/a": "gpu.kdra.dev/n/g0,gpu.kdra.dev/n/g1",
        "devices.resource.kdra.dev/b": "gpu.kdra.dev/n/g2",
        "gpus.resource.kdra.dev/a": "GPU-0,GPU-1",
        "gpus.resource.kdra.dev/b": "GPU-2",
    }
    # The node agent's NRI decision agrees (the generated claim found by its pod-claim name).
    devices = tuple(PreparedDevice(r, d, pool, name, (f"k8s.{d}/x={name}",),
                                   {"uuid": uuids[(d, pool, name)]})
                    for r, d, pool, name in results[ENTRY_NAME])
    prepared = PreparedClaim("ns", "p-extended-resources-x", "uid-c", ENTRY_NAME, devices)
    info = PodInfo("uid-p", "ns", "p", {CLAIMS_ANNOTATION: json.dumps([ENTRY])})
    b = decide(info, "b", [], [prepared], "n")
    assert isinstance(b, Adjustment) and b.devices == ("gpu.kdra.dev/n/g2",)
    c = decide(info, "c", [], [prepared], "n")
    assert c == Adjustment()


def test_podclaim_defaults_are_unchanged() -> None:
    plain = PodClaim("x", resource_claim_name="c", request="r")
    assert not plain.generated and plain.shows("any", "r/sub") and not plain.shows("any", "s")
    assert copy.copy(plain) == plain

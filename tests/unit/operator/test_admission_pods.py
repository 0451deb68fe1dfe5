"""Admission decisions for pods (kdra.operator.core.admission), table-driven, without a cluster:
validation of the claims annotation, the mutating webhook's schedulerName and env patch, which
claims may get a GPU, and hostile pod writes. kdra's own objects: test_admission_claims.py."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION, SCHEDULER_NAME, parse_pod_claims
from kdra.operator.core.admission import (
    AdmissionResponse,
    claim_request_classes,
    class_may_select,
    consuming_containers,
    injected_env,
    mutate_pod,
    pod_errors,
    pod_patch,
    validate,
)
from tests.unit.operator.admission_helpers import API, request_for

ANNOTATION = f"metadata.annotations[{CLAIMS_ANNOTATION}]"


# --------------------------------------------------------------------------- builders


def container(name: str, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    if env is not None:
        c["env"] = env
    return c


def pod(claims: Any, *, containers: tuple[str, ...] = ("main",),
        init: tuple[str, ...] = (), scheduler: str | None = "default-scheduler",
        env: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    env = env or {}
    spec: dict[str, Any] = {"containers": [container(n, env.get(n)) for n in containers]}
    if init:
        spec["initContainers"] = [container(n, env.get(n)) for n in init]
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    annotations = {}
    if claims is not None:
        annotations[CLAIMS_ANNOTATION] = claims if isinstance(claims, str) else json.dumps(claims)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
            "spec": spec}


def apply_patch(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """A small RFC 6902 applier (add / replace) for checking patches."""
    doc = copy.deepcopy(obj)
    for op in patch:
        parts = op["path"].lstrip("/").split("/")
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if isinstance(parent, list):
            assert op["op"] == "add"
            parent.append(op["value"]) if last == "-" else parent.insert(int(last), op["value"])
        else:
            assert op["op"] == "add" or last in parent, op
            parent[last] = copy.deepcopy(op["value"])
    return doc


def env_names(container: dict[str, Any]) -> list[str]:
    return [e["name"] for e in container.get("env") or ()]


# --------------------------------------------------------------------------- pods: validation

POD_CASES: list[tuple[str, dict[str, Any], str | None, str]] = [
    ("valid", pod([{"name": "gpu", "resourceClaimName": "c"}]), None, ""),
    ("valid-yaml", pod("- name: gpu\n  resourceClaimTemplateName: t\n"), None, ""),
    ("valid-init-container-listed",
     pod([{"name": "gpu", "resourceClaimName": "c", "containers": ["setup"]}], init=("setup",)),
     None, ""),
    ("not-yaml", pod("[{"), ANNOTATION, "not valid YAML/JSON"),
    ("not-a-list", pod('{"name": "gpu"}'), ANNOTATION, "must be a list"),
    ("no-reference", pod([{"name": "gpu"}]), f"{ANNOTATION}[0]", "exactly one of"),
    ("bad-name", pod([{"name": "GPU", "resourceClaimName": "c"}]), f"{ANNOTATION}[0].name",
     "DNS label"),
    ("unknown-container",
     pod([{"name": "gpu", "resourceClaimName": "c", "containers": ["main", "sidecar"]}]),
     f"{ANNOTATION}[0].containers[1]", "no container named 'sidecar' (containers: main)"),
    ("bad-request-name", pod([{"name": "gpu", "resourceClaimName": "c", "request": "Big_1"}]),
     f"{ANNOTATION}[0].request", "DNS label"),
    ("unknown-key", pod([{"name": "gpu", "resourceClaimName": "c", "source": "x"}]),
     f"{ANNOTATION}[0].source", "unknown field"),
]


@pytest.mark.parametrize(("obj", "field", "words"), [c[1:] for c in POD_CASES],
                         ids=[c[0] for c in POD_CASES])
def test_pod_validation(obj: dict[str, Any], field: str | None, words: str) -> None:
    errors = pod_errors(obj)
    if field is None:
        assert errors == []
        assert validate(request_for(obj)).allowed
        return
    assert errors and errors[0].field == field, errors
    assert words in errors[0].message
    response = validate(request_for(obj))
    assert not response.allowed and response.message.startswith(field)


def test_pod_updates_are_not_validated() -> None:
    bad = pod("[{")
    assert validate(request_for(bad, "UPDATE", bad)).allowed


def test_unknown_container_message_lists_init_containers() -> None:
    (error,) = pod_errors(pod([{"name": "g", "resourceClaimName": "c", "containers": ["x"]}],
                              containers=("a", "b"), init=("i",)))
    assert error.message == \
        "the pod has no container named 'x' (containers: a, b; init containers: i)"


# --------------------------------------------------------------------------- pods: mutation

KDRA_DEVICES_MAIN = {"name": "KDRA_DEVICES", "valueFrom": {"fieldRef": {
    "apiVersion": "v1", "fieldPath": "metadata.annotations['devices.resource.kdra.dev/main']"}}}
NVIDIA_MAIN = {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
    "apiVersion": "v1", "fieldPath": "metadata.annotations['gpus.resource.kdra.dev/main']"}}}


def test_injected_env_reads_the_binders_annotations() -> None:
    assert injected_env("main") == (KDRA_DEVICES_MAIN, NVIDIA_MAIN)


def test_seed_pod_patch() -> None:
    """The seed's pod-with-cats: each container gets its own claim's env."""
    seed = pod(yaml.safe_load("""
- {name: cat-0, resourceClaimName: small-white-cat-claim, containers: [container0]}
- {name: cat-1, resourceClaimTemplateName: large-black-cat-claim-template,
   containers: [container1]}
"""), containers=("container0", "container1"), scheduler=None)
    patch = pod_patch(seed)
    assert patch[0] == {"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER_NAME}
    assert [op["path"] for op in patch[1:]] == ["/spec/containers/0/env",
                                                "/spec/containers/1/env"]
    assert patch[1]["value"] == list(injected_env("container0"))


def test_gpu_env_only_where_a_gpu_can_be_involved() -> None:
    """The seed's cats: no claim may get a GPU, so no container gets NVIDIA_VISIBLE_DEVICES
    (not even an empty one); a GPU entry gives it to its containers only."""
    seed = pod(yaml.safe_load("""
- {name: cat-0, resourceClaimName: small-white-cat-claim, containers: [container0]}
- {name: gpu, resourceClaimTemplateName: one-gpu, containers: [container1]}
"""), containers=("container0", "container1"), scheduler=None)
    envs = {op["path"]: [e["name"] for e in op["value"]]
            for op in pod_patch(seed, gpu_claims={"gpu"}) if op["path"].endswith("/env")}
    assert envs == {"/spec/containers/0/env": ["KDRA_DEVICES"],
                    "/spec/containers/1/env": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"]}
    nothing = [op for op in pod_patch(seed, gpu_claims=frozenset()) if op["path"].endswith("/env")]
    assert [[e["name"] for e in op["value"]] for op in nothing] == [["KDRA_DEVICES"]] * 2
    unknown = [op for op in pod_patch(seed) if op["path"].endswith("/env")]  # None: may be GPUs
    assert [[e["name"] for e in op["value"]] for op in unknown] == [
        ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"]] * 2
    request = {"uid": "u", "operation": "CREATE", "object": seed}
    patched = mutate_pod(request, gpu_claims=frozenset()).patch
    assert "NVIDIA_VISIBLE_DEVICES" not in json.dumps(patched)


def device_class(*expressions: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": "c"},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]}}


@pytest.mark.parametrize(("expressions", "gpu"), [
    (('device.driver == "resource-driver.example.com"',), False),
    (('"resource-driver.example.com" == device.driver',), False),
    (('device.driver == "gpu.kdra.dev"',), True),
    (('device.driver in ["a.dev", "b.dev"]',), False),
    (('device.driver in ["a.dev", "gpu.kdra.dev"]',), True),
    (('device.driver == "a.dev" && device.attributes["a.dev"].x == 1',), False),
    (('device.driver == "a.dev" || device.driver == "gpu.kdra.dev"',), True),
    (('device.driver == "a.dev" || device.attributes["a.dev"].x == 1',), True),  # any driver
    (('device.driver != "gpu.kdra.dev"',), True),  # not understood: may be a GPU
    (('device.attributes["a.dev"].x == 1', 'device.driver == "a.dev"'), False),
    (('device.attributes["a.dev"].x == 1',), True),
    ((), True),  # no selector: every device
    (('device.driver == ',), True),  # does not compile: unknown
])
def test_class_may_select_reads_the_driver_its_selectors_pin(expressions: tuple[str, ...],
                                                             gpu: bool) -> None:
    assert class_may_select(device_class(*expressions)) is gpu


def test_a_missing_or_odd_class_may_select_anything() -> None:
    assert class_may_select(None)
    assert class_may_select({"spec": {"selectors": "nonsense"}})
    assert class_may_select({"spec": {"selectors": [{"cel": None}, 3]}})


def test_claim_request_classes() -> None:
    spec = {"devices": {"requests": [
        {"name": "a", "exactly": {"deviceClassName": "x"}},
        {"name": "b", "exactly": {"deviceClassName": "y"}},
        {"name": "c", "firstAvailable": [{"name": "big", "deviceClassName": "z"},
                                         {"name": "small", "deviceClassName": "y"}]}]}}
    assert claim_request_classes(spec) == ["x", "y", "z", "y"]
    assert claim_request_classes(spec, "b") == ["y"]
    assert claim_request_classes(spec, "c") == ["z", "y"]  # any alternative
    assert claim_request_classes(spec, "c/big") == ["z"]
    assert claim_request_classes(None) is None
    assert claim_request_classes({"devices": {"requests": [{"name": "a"}]}}) is None
    assert claim_request_classes({"devices": {"requests": [
        {"name": "a", "exactly": {}}]}}) is None
    assert claim_request_classes({"devices": {"requests": ["x"]}}) is None


# (id, pod, expected schedulerName after the patch, container -> env names after the patch)
MUTATION_CASES: list[tuple[str, dict[str, Any], str | None, dict[str, list[str]]]] = [
    ("default-scheduler-replaced", pod([{"name": "g", "resourceClaimName": "c"}]),
     SCHEDULER_NAME, {"main": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"]}),
    ("unset-scheduler-added", pod([{"name": "g", "resourceClaimName": "c"}], scheduler=None),
     SCHEDULER_NAME, {"main": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"]}),
    ("custom-scheduler-kept",
     pod([{"name": "g", "resourceClaimName": "c"}], scheduler="volcano"),
     "volcano", {"main": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"]}),
    ("only-listed-containers",
     pod([{"name": "g", "resourceClaimName": "c", "containers": ["b"]}],
         containers=("a", "b", "c")),
     SCHEDULER_NAME, {"a": [], "b": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"], "c": []}),
    ("default-all-containers-not-init",
     pod([{"name": "g", "resourceClaimName": "c"}], containers=("a", "b"), init=("setup",)),
     SCHEDULER_NAME, {"a": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"],
                      "b": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"], "setup": []}),
    ("init-container-when-listed",
     pod([{"name": "g", "resourceClaimName": "c", "containers": ["setup"]}],
         containers=("a",), init=("setup",)),
     SCHEDULER_NAME, {"a": [], "setup": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"]}),
    ("union-of-entries",
     pod([{"name": "g", "resourceClaimName": "c", "containers": ["a"]},
          {"name": "h", "resourceClaimTemplateName": "t", "containers": ["c"]}],
         containers=("a", "b", "c")),
     SCHEDULER_NAME, {"a": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"], "b": [],
                      "c": ["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"]}),
    ("existing-env-appended",
     pod([{"name": "g", "resourceClaimName": "c"}], env={"main": [{"name": "A", "value": "1"}]}),
     SCHEDULER_NAME, {"main": ["A", "KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"]}),
    ("user-value-wins",
     pod([{"name": "g", "resourceClaimName": "c"}],
         env={"main": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]}),
     SCHEDULER_NAME, {"main": ["NVIDIA_VISIBLE_DEVICES", "KDRA_DEVICES"]}),
    ("empty-containers-list",
     pod([{"name": "g", "resourceClaimName": "c", "containers": []}]),
     SCHEDULER_NAME, {"main": []}),
    ("no-claims-no-change", pod([]), "default-scheduler", {"main": []}),
    ("unknown-container-ignored",
     pod([{"name": "g", "resourceClaimName": "c", "containers": ["ghost"]}]),
     SCHEDULER_NAME, {"main": []}),
]


@pytest.mark.parametrize(("obj", "scheduler", "env"), [c[1:] for c in MUTATION_CASES],
                         ids=[c[0] for c in MUTATION_CASES])
def test_pod_mutation(obj: dict[str, Any], scheduler: str | None,
                      env: dict[str, list[str]]) -> None:
    response = mutate_pod(request_for(obj))
    assert response.allowed
    patched = apply_patch(obj, list(response.patch))
    assert patched["spec"].get("schedulerName") == scheduler
    everyone = patched["spec"]["containers"] + patched["spec"].get("initContainers", [])
    assert {c["name"]: env_names(c) for c in everyone} == env
    # Idempotent (reinvocationPolicy: IfNeeded): a second pass changes nothing.
    assert mutate_pod(request_for(patched)).patch == ()
    # A user-set value is never overwritten.
    for c in everyone:
        for e in obj_env(obj, c["name"]):
            assert e in c["env"]


def obj_env(obj: dict[str, Any], name: str) -> list[dict[str, Any]]:
    for c in obj["spec"]["containers"] + obj["spec"].get("initContainers", []):
        if c["name"] == name:
            return list(c.get("env") or [])
    return []


def test_mutation_wire_form_is_a_base64_json_patch() -> None:
    wire = mutate_pod(request_for(pod([{"name": "g", "resourceClaimName": "c"}]))).to_review()
    body = wire["response"]
    assert body["allowed"] is True and body["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(body["patch"]))
    assert patch == [
        {"op": "replace", "path": "/spec/schedulerName", "value": SCHEDULER_NAME},
        {"op": "add", "path": "/spec/containers/0/env", "value": [KDRA_DEVICES_MAIN, NVIDIA_MAIN]},
    ]


def test_custom_scheduler_gets_a_warning() -> None:
    response = mutate_pod(request_for(pod([{"name": "g", "resourceClaimName": "c"}],
                                          scheduler="volcano")))
    assert response.warnings and "'volcano'" in response.warnings[0]
    assert response.to_review()["response"]["warnings"] == list(response.warnings)


@pytest.mark.parametrize("obj", [pod("[{"), pod(None)], ids=["malformed", "no-annotation"])
def test_mutation_leaves_other_pods_alone(obj: dict[str, Any]) -> None:
    """A malformed annotation is the validating webhook's to reject; no annotation: nothing."""
    assert mutate_pod(request_for(obj)) == AdmissionResponse("u-1")


def test_mutation_only_on_create() -> None:
    obj = pod([{"name": "g", "resourceClaimName": "c"}])
    assert mutate_pod(request_for(obj, "UPDATE", obj)).patch == ()


def test_consuming_containers() -> None:
    obj = pod(None, containers=("a", "b"), init=("i",))
    claims = parse_pod_claims(json.dumps([
        {"name": "x", "resourceClaimName": "c", "containers": ["i"]},
        {"name": "y", "resourceClaimName": "d"},
    ]))
    assert consuming_containers(obj, claims) == {"a", "b", "i"}


# --------------------------------------------------------------------------- pods: hostile input

OPERATOR = "system:serviceaccount:kdra-system:kdra-operator"
STATUSES = "resource.kdra.dev/claim-statuses"
DEVICES_MAIN = "devices.resource.kdra.dev/main"


def as_user(request: dict[str, Any], user: str) -> dict[str, Any]:
    return {**request, "userInfo": {"username": user, "groups": ["system:authenticated"]}}


def annotated(obj: dict[str, Any], annotations: dict[str, str | None]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    current = out["metadata"].setdefault("annotations", {})
    for key, value in annotations.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    return out


GOOD = pod([{"name": "gpu", "resourceClaimName": "c"}])
PLAIN = pod(None)
RESOLVED = annotated(GOOD, {STATUSES: '{"gpu": "c"}'})
BOUND = copy.deepcopy(GOOD)
BOUND["spec"]["nodeName"] = "worker-1"

# (id, operation, new, old, trusted user?, denied field or None)
POD_UPDATE_CASES: list[tuple[str, str, dict[str, Any], dict[str, Any] | None, bool,
                             str | None]] = [
    # Attack 1: a bad annotation added by UPDATE to a pod created without one.
    ("add-bad-by-update", "UPDATE", annotated(PLAIN, {CLAIMS_ANNOTATION: "[" * 1000}), PLAIN,
     False, ANNOTATION),
    ("add-int-and-str-keys", "UPDATE",
     annotated(PLAIN, {CLAIMS_ANNOTATION: "- {name: a, resourceClaimName: b, 1: x}"}), PLAIN,
     False, f"{ANNOTATION}[0]"),
    ("add-good-to-unresolved", "UPDATE", GOOD, PLAIN, False, None),
    ("change-unresolved", "UPDATE",
     annotated(GOOD, {CLAIMS_ANNOTATION: '[{"name": "gpu", "resourceClaimName": "d"}]'}), GOOD,
     False, None),
    ("change-resolved", "UPDATE",
     annotated(RESOLVED, {CLAIMS_ANNOTATION: '[{"name": "gpu", "resourceClaimName": "d"}]'}),
     RESOLVED, False, ANNOTATION),
    ("remove-when-bound", "UPDATE", annotated(BOUND, {CLAIMS_ANNOTATION: None}), BOUND, False,
     ANNOTATION),
    ("unrelated-label-on-bad-pod", "UPDATE", pod("[{"), pod("[{"), False, None),
    # Attack 6/7: kdra-owned keys written by a user, at creation or later.
    ("forge-statuses-at-create", "CREATE", annotated(GOOD, {STATUSES: '{"gpu": "victim"}'}),
     None, False, f"metadata.annotations[{STATUSES}]"),
    ("forge-devices-without-claims", "CREATE",
     annotated(PLAIN, {DEVICES_MAIN: "gpu.kdra.dev/n/gpu-0"}), None, False,
     f"metadata.annotations[{DEVICES_MAIN}]"),
    ("patch-gpus-after-binding", "UPDATE",
     annotated(BOUND, {"gpus.resource.kdra.dev/main": "GPU-victim"}), BOUND, False,
     "metadata.annotations[gpus.resource.kdra.dev/main]"),
    ("remove-devices", "UPDATE", BOUND, annotated(BOUND, {DEVICES_MAIN: "x"}), False,
     f"metadata.annotations[{DEVICES_MAIN}]"),
    ("kdra-records-statuses", "UPDATE", RESOLVED, GOOD, True, None),
    ("kdra-may-not-change-claims", "UPDATE",
     annotated(RESOLVED, {CLAIMS_ANNOTATION: "[]"}), RESOLVED, True, ANNOTATION),
    ("unchanged-owned-keys", "UPDATE", annotated(RESOLVED, {"x": "y"}), RESOLVED, False, None),
]


@pytest.mark.parametrize(("operation", "new", "old", "trusted", "field"),
                         [c[1:] for c in POD_UPDATE_CASES],
                         ids=[c[0] for c in POD_UPDATE_CASES])
def test_pod_writes(operation: str, new: dict[str, Any], old: dict[str, Any] | None,
                    trusted: bool, field: str | None) -> None:
    user = OPERATOR if trusted else "alice"
    response = validate(as_user(request_for(new, operation, old), user),
                        trusted=frozenset({OPERATOR}))
    if field is None:
        assert response.allowed, response.message
    else:
        assert not response.allowed
        assert response.errors[0].field == field, response.message
        assert len(response.message) < 500


def test_user_env_in_consuming_containers_is_denied() -> None:
    """Attack 7: NVIDIA_VISIBLE_DEVICES=all in a container that uses a claim."""
    obj = pod([{"name": "gpu", "resourceClaimName": "c", "containers": ["main"]}],
              containers=("main", "side"),
              env={"main": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                   "side": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]})
    # The mutating webhook leaves the user's entry (it never rewrites a user's value) ...
    patched = apply_patch(obj, list(mutate_pod(request_for(obj)).patch))
    # ... and the validating webhook, which sees the mutated pod, denies it.
    response = validate(request_for(patched))
    assert [e.field for e in response.errors] == ["spec.containers[0].env[0]"]
    assert "NVIDIA_VISIBLE_DEVICES is set by kdra" in response.message
    # kdra's own injected entries pass, as does a non-consuming container's own value.
    clean = apply_patch(pod([{"name": "gpu", "resourceClaimName": "c"}]), [])
    clean = apply_patch(clean, list(mutate_pod(request_for(clean)).patch))
    assert validate(request_for(clean)).allowed
    other = copy.deepcopy(clean)
    other["spec"]["containers"][0]["env"][1]["valueFrom"]["fieldRef"]["fieldPath"] = \
        "metadata.annotations['gpus.resource.kdra.dev/victim']"
    assert not validate(request_for(other)).allowed


def test_errors_are_capped_and_values_cut_short() -> None:
    """Attack 2's error text: 30,000 bad container names gave 191 MiB; now at most five
    errors, each short."""
    names = [f"c{i}-" + "x" * 15 for i in range(8)]
    obj = pod([{"name": f"g{i}", "resourceClaimName": "c", "containers": names}
               for i in range(32)], containers=tuple(f"k{i}" * 20 for i in range(100)))
    response = validate(request_for(obj))
    assert len(response.errors) == 6
    assert response.errors[-1].message == "... and 251 more error(s)"
    assert "and 92 more)" in response.errors[0].message  # the pod's containers, listed
    assert len(response.message) < 3000


# --------------------------------------------------------------------------- notices (issue 41)


@pytest.mark.parametrize(("annotations", "spec_claims", "expected"), [
    # a typo of the claims key, in kdra's domain and in a kdra-like one
    ({"resource.kdra.dev/claim": "[]"}, None,
     ["metadata.annotations['resource.kdra.dev/claim'] is not an annotation kdra reads: "
      "did you mean "
      "'resource.kdra.dev/claims'? kdra allocates devices only for pods with "
      "resource.kdra.dev/claims; without it this pod gets none"]),
    ({"resources.kdra.dev/claims": "[]"}, None, ["did you mean 'resource.kdra.dev/claims'?"]),
    ({"kdra.dev/claim": "[]"}, None, ["did you mean 'resource.kdra.dev/claims'?"]),
    # another key in kdra's domain: the closest of kdra's, or the list of them
    ({CLAIMS_ANNOTATION: "[]", "resource.kdra.dev/placement-polcy": "spread"}, None,
     ["did you mean 'resource.kdra.dev/placement-policy'?"]),
    ({"resource.kdra.dev/zzz": "1"}, None, ["kdra's pod annotations are "]),
    # spec.resourceClaims, which kdra's flavour does not read
    ({}, [{"name": "gpu", "resourceClaimName": "x"}],
     ["spec.resourceClaims ('gpu') is not served by kdra's resource.kdra.dev flavour"]),
    # nothing to say: kdra's own keys, other domains that merely mention kdra
    ({CLAIMS_ANNOTATION: "[]", "devices.resource.kdra.dev/main": "x",
      "metrics.kdra.dev/scrape": "true", "example.com/claims": "x"}, [], []),
], ids=["typo-claim", "typo-domain", "short-domain", "typo-policy", "unknown-key",
        "spec-resource-claims", "nothing"])
def test_pod_notices(annotations: dict[str, str], spec_claims: list[dict[str, str]] | None,
                     expected: list[str]) -> None:
    from kdra.operator.core.pod_notices import pod_notices

    obj = pod(None)
    obj["metadata"]["annotations"] = annotations
    if spec_claims is not None:
        obj["spec"]["resourceClaims"] = spec_claims
    found = [n.message for n in pod_notices(obj)]
    assert len(found) == len(expected), found
    for message, part in zip(found, expected, strict=True):
        assert part in message
    # The mutating webhook says the same at admission (and changes nothing for these).
    answer = mutate_pod(request_for(obj))
    assert answer.allowed
    assert list(answer.warnings) == found


def test_pod_notices_are_bounded() -> None:
    from kdra.operator.core.pod_notices import MAX_NOTICES, pod_notices

    obj = pod(None)
    obj["metadata"]["annotations"] = {f"resource.kdra.dev/{'x' * 5000}{i}": "1"
                                      for i in range(100)}
    found = pod_notices(obj)
    assert len(found) == MAX_NOTICES
    assert all(len(n.message) < 700 for n in found)


# --------------------------------------------------------------------------- NRI tolerance

TOLERATE = "tolerate-missing-plugins.kdra.dev"


def tolerating(key: str = TOLERATE, namespace: str = "team-a") -> dict[str, Any]:
    obj = pod(None)
    obj["metadata"]["namespace"] = namespace
    obj["metadata"]["annotations"][key] = "true"
    return obj


@pytest.mark.parametrize("key", [TOLERATE, f"{TOLERATE}/container.main", f"{TOLERATE}/pod"])
def test_the_nri_tolerance_is_denied_outside_kdras_namespace(key: str) -> None:
    (error,) = pod_errors(tolerating(key), namespace="team-a", own_namespace="kdra-system")
    assert error.field == f"metadata.annotations[{key}]"
    assert "without kdra's NRI plugin" in error.message
    # Through the webhook's entry point, with the request's namespace.
    review = request_for(tolerating(key))
    assert review["namespace"] == "team-a"
    assert not validate(review, own_namespace="kdra-system").allowed
    assert validate(review).allowed  # kdra's namespace not known: nothing to compare


def test_the_nri_tolerance_stays_where_it_may_be() -> None:
    assert pod_errors(tolerating(namespace="kdra-system"), namespace="kdra-system",
                      own_namespace="kdra-system") == []
    # An update of a pod that had it (from before the rule) keeps it; adding it does not.
    old = tolerating()
    assert pod_errors(tolerating(), old, namespace="team-a", own_namespace="kdra-system") == []
    assert pod_errors(tolerating(), pod(None), namespace="team-a",
                      own_namespace="kdra-system") != []
    # An unrelated key alike is no tolerance.
    assert pod_errors(tolerating(f"{TOLERATE}x"), namespace="team-a",
                      own_namespace="kdra-system") == []

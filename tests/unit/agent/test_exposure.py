"""Device exposure decisions: which CDI devices and env a container gets at creation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kdra.agent.core.cdi import cdi_device_id
from kdra.agent.core.checkpoint import ClaimEntry, ClaimRef, PreparedDevice
from kdra.agent.core.exposure import (
    MAX_ANNOTATION,
    MAX_MESSAGE,
    Adjustment,
    Decision,
    PodInfo,
    PreparedClaim,
    Refusal,
    decide,
    prepared_claim,
    reserved_for,
)
from tests.unit.agent.prepare_helpers import discovered

GPU = "gpu.kdra.dev"
CATS = "resource-driver.example.com"
NODE = "node-1"
POD_UID = "pod-uid-1"


BACKENDS, _ = discovered("")  # fake-gpu, generic: the GPUs' env convention


def gpu(claim_uid: str, name: str, uuid: str, request: str = "gpu") -> PreparedDevice:
    return PreparedDevice(request, GPU, NODE, name, (cdi_device_id(GPU, claim_uid, name),),
                          {"uuid": uuid}, backend="fake-gpu")


def cat(claim_uid: str, name: str, request: str = "cat") -> PreparedDevice:
    return PreparedDevice(request, CATS, NODE, name, (cdi_device_id(CATS, claim_uid, name),),
                          backend="generic")


SHARED = PreparedClaim("ns", "shared-gpus", "uid-s", devices=(
    gpu("uid-s", "gpu-0", "GPU-0000"), gpu("uid-s", "gpu-1", "GPU-1111", request="extra")))
GENERATED = PreparedClaim("ns", "pod-cat-abcde", "uid-g", pod_claim_name="cat",
                          devices=(cat("uid-g", "kitten-0"),))
UNPREPARED = PreparedClaim("ns", "late-claim", "uid-l", devices=None)


def pod(claims: list[dict[str, Any]] | str | None,
        statuses: dict[str, str] | None = None) -> PodInfo:
    annotations: dict[str, str] = {}
    if claims is not None:
        annotations["resource.kdra.dev/claims"] = (
            claims if isinstance(claims, str) else json.dumps(claims))
    if statuses is not None:
        annotations["resource.kdra.dev/claim-statuses"] = json.dumps(statuses)
    return PodInfo(POD_UID, "ns", "p", annotations)


def ids(*devices: PreparedDevice) -> tuple[str, ...]:
    return tuple(i for d in devices for i in d.cdi_device_ids)


SHARED_ENTRY = {"name": "gpus", "resourceClaimName": "shared-gpus"}
CAT_ENTRY = {"name": "cat", "resourceClaimTemplateName": "cat-template"}

CASES: list[tuple[str, PodInfo, str, list[str], list[PreparedClaim], Decision]] = [
    ("no annotation, clean env: nothing",
     pod(None), "main", ["PATH=/bin"], [], Adjustment()),
    ("no annotation, user env overridden",
     pod(None), "main", ["NVIDIA_VISIBLE_DEVICES=all", "KDRA_DEVICES=x/y/z"], [],
     Adjustment(env=(("KDRA_DEVICES", ""), ("NVIDIA_VISIBLE_DEVICES", "void")))),
    ("no annotation: a claim reserved for the pod gives nothing",
     pod(None), "main", [], [SHARED], Adjustment()),
    ("every container by default: both GPUs, env listing them",
     pod([SHARED_ENTRY]), "main", ["NVIDIA_VISIBLE_DEVICES=all"], [SHARED],
     Adjustment(ids(*SHARED.devices or ()),
                (("KDRA_DEVICES", f"{GPU}/{NODE}/gpu-0,{GPU}/{NODE}/gpu-1"),
                 ("NVIDIA_VISIBLE_DEVICES", "GPU-0000,GPU-1111")),
                (f"{GPU}/{NODE}/gpu-0", f"{GPU}/{NODE}/gpu-1"))),
    ("request narrows to that request's devices",
     pod([{**SHARED_ENTRY, "request": "extra"}]), "main", [], [SHARED],
     Adjustment(ids(gpu("uid-s", "gpu-1", "GPU-1111")),
                (("KDRA_DEVICES", f"{GPU}/{NODE}/gpu-1"),
                 ("NVIDIA_VISIBLE_DEVICES", "GPU-1111")), (f"{GPU}/{NODE}/gpu-1",))),
    ("a container the entry does not list gets nothing; its user env is overridden",
     pod([{**SHARED_ENTRY, "containers": ["main"]}]), "sidecar",
     ["NVIDIA_VISIBLE_DEVICES=all"], [SHARED],
     Adjustment(env=(("NVIDIA_VISIBLE_DEVICES", "void"),))),
    ("generated claim found through claim-statuses; cats set no GPU env",
     pod([CAT_ENTRY], {"cat": "pod-cat-abcde"}), "main", [], [GENERATED],
     Adjustment(ids(*GENERATED.devices or ()), (("KDRA_DEVICES", f"{CATS}/{NODE}/kitten-0"),),
                (f"{CATS}/{NODE}/kitten-0",))),
    ("generated claim found through its pod-claim-name when claim-statuses is missing",
     pod([CAT_ENTRY]), "main", ["NVIDIA_VISIBLE_DEVICES=all"], [GENERATED],
     Adjustment(ids(*GENERATED.devices or ()),
                (("KDRA_DEVICES", f"{CATS}/{NODE}/kitten-0"),
                 ("NVIDIA_VISIBLE_DEVICES", "void")), (f"{CATS}/{NODE}/kitten-0",))),
    ("two pod claims: devices of both, claim order; the same claim twice counted once",
     pod([CAT_ENTRY, SHARED_ENTRY, {"name": "again", "resourceClaimName": "shared-gpus"}],
         {"cat": "pod-cat-abcde"}), "main", [], [SHARED, GENERATED],
     Adjustment(ids(*GENERATED.devices or (), *SHARED.devices or ()),
                (("KDRA_DEVICES", f"{CATS}/{NODE}/kitten-0,{GPU}/{NODE}/gpu-0,"
                                  f"{GPU}/{NODE}/gpu-1"),
                 ("NVIDIA_VISIBLE_DEVICES", "GPU-0000,GPU-1111")),
                (f"{CATS}/{NODE}/kitten-0", f"{GPU}/{NODE}/gpu-0", f"{GPU}/{NODE}/gpu-1"))),
    ("claim not prepared on the node: refused, naming it",
     pod([{"name": "late", "resourceClaimName": "late-claim"}]), "main", [], [UNPREPARED],
     Refusal("kdra: container 'main' of pod ns/p: ResourceClaim ns/late-claim (pod claim "
             "'late') is not prepared on node node-1; the container is created once the "
             "node agent has prepared it", "ns/late-claim")),
    ("claim not reserved for the pod (absent from the reserved claims): refused",
     pod([SHARED_ENTRY]), "main", [], [],
     Refusal("kdra: container 'main' of pod ns/p: ResourceClaim ns/shared-gpus (pod claim "
             "'gpus') is not allocated and reserved for this pod on node node-1; the "
             "container is created once it is", "ns/shared-gpus")),
    ("a claim of another namespace with the same name does not count",
     pod([SHARED_ENTRY]), "main", [],
     [PreparedClaim("other", "shared-gpus", "uid-o", devices=SHARED.devices)],
     Refusal("kdra: container 'main' of pod ns/p: ResourceClaim ns/shared-gpus (pod claim "
             "'gpus') is not allocated and reserved for this pod on node node-1; the "
             "container is created once it is", "ns/shared-gpus")),
    ("template entry without any claim yet: refused, naming the pod claim",
     pod([CAT_ENTRY]), "main", [], [],
     Refusal("kdra: container 'main' of pod ns/p: pod claim 'cat' (its ResourceClaim is not "
             "created yet) is not allocated and reserved for this pod on node node-1; the "
             "container is created once it is")),
    ("an unprepared claim of another container does not stop this one",
     pod([{"name": "late", "resourceClaimName": "late-claim", "containers": ["other"]}]),
     "main", [], [UNPREPARED], Adjustment()),
]


@pytest.mark.parametrize(("pod_info", "container", "env", "claims", "expected"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_decide(pod_info: PodInfo, container: str, env: list[str],
                claims: list[PreparedClaim], expected: Decision) -> None:
    assert decide(pod_info, container, env, claims, NODE, backends=BACKENDS) == expected


def test_the_gpu_variable_is_the_gpu_backends_convention() -> None:
    """Without the GPU backends (an agent of other vendors only), GPUs' UUIDs are nobody's
    list: the container gets its devices and KDRA_DEVICES, no NVIDIA variable."""
    decision = decide(pod([SHARED_ENTRY]), "main", ["NVIDIA_VISIBLE_DEVICES=all"], [SHARED],
                      NODE)
    assert isinstance(decision, Adjustment)
    assert decision.cdi_devices == ids(*SHARED.devices or ())
    assert decision.env == (("KDRA_DEVICES", f"{GPU}/{NODE}/gpu-0,{GPU}/{NODE}/gpu-1"),)


def test_outcome_names_the_metric_result() -> None:
    assert Adjustment().outcome == "no_devices"
    assert Adjustment(env=(("KDRA_DEVICES", ""),)).outcome == "no_devices"
    assert Adjustment(("kdra.dev/gpu=u-gpu-0",), devices=("g/n/gpu-0",)).outcome == "adjusted"


@pytest.mark.parametrize("text", ["{not yaml: [", "[{name: x}]", "- name: UPPER\n  "
                                  "resourceClaimName: c"])
def test_bad_annotation_is_refused_with_the_field(text: str) -> None:
    decision = decide(pod(text), "main", [], [], NODE)
    assert isinstance(decision, Refusal)
    assert decision.message.startswith("kdra: container 'main' of pod ns/p: "
                                       "metadata.annotations[resource.kdra.dev/claims]")
    assert "fix the pod's annotation" in decision.message


def test_oversized_annotation_is_refused_without_parsing() -> None:
    decision = decide(pod("#" * (MAX_ANNOTATION + 1)), "main", [], [], NODE)
    assert isinstance(decision, Refusal) and "at most 262144" in decision.message


def test_refusal_messages_are_bounded() -> None:
    name = "c" * 253
    entries = [{"name": "x", "resourceClaimName": name}]
    decision = decide(PodInfo(POD_UID, "n" * 63, "p" * 253,
                              {"resource.kdra.dev/claims": json.dumps(entries)}),
                      "m" * 63, [], [], "node-" + "x" * 300)
    assert isinstance(decision, Refusal) and len(decision.message) <= MAX_MESSAGE


def claim_obj(uid: str = "uid-1", reserved: tuple[str, ...] = (POD_UID,),
              results: tuple[str, ...] = ("gpu-0",)) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "c", "uid": uid,
                         "annotations": {"resource.kdra.dev/pod-claim-name": "gpu"}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": GPU, "pool": NODE, "device": d}
                for d in results]}},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": u}
                                for u in reserved]}}


def test_reserved_for() -> None:
    assert reserved_for(claim_obj(), POD_UID)
    assert not reserved_for(claim_obj(reserved=("other",)), POD_UID)
    assert not reserved_for(claim_obj(reserved=()), POD_UID)
    assert not reserved_for(claim_obj(), "")
    assert not reserved_for({"status": {"reservedFor": ["junk", 3]}}, POD_UID)


ENTRY = ClaimEntry(ClaimRef("uid-1", "ns", "c"), "prepared", (gpu("uid-1", "gpu-0", "G0"),),
                   ("kdra.dev-uid-1.json",))


@pytest.mark.parametrize(("claim", "entry", "prepared"), [
    (claim_obj(), ENTRY, True),
    (claim_obj(), None, False),
    (claim_obj(), ClaimEntry(ENTRY.claim, "preparing", ENTRY.devices, ()), False),
    (claim_obj(uid="uid-2"), ENTRY, False),  # the entry is of an older claim of that name
    (claim_obj(results=("gpu-0", "gpu-1")), ENTRY, False),  # allocation changed since
    (claim_obj(results=()), ClaimEntry(ENTRY.claim, "prepared", (), ()), False),
], ids=["prepared", "no entry", "preparing", "other uid", "results differ", "no results"])
def test_prepared_claim(claim: dict[str, Any], entry: ClaimEntry | None,
                        prepared: bool) -> None:
    view = prepared_claim(claim, entry, NODE, [GPU])
    assert (view.namespace, view.name, view.pod_claim_name) == ("ns", "c", "gpu")
    assert view.devices == (ENTRY.devices if prepared else None)


def test_two_shares_of_one_gpu_give_both_cdi_devices_and_one_listing() -> None:
    shares = tuple(PreparedDevice("gpu", GPU, NODE, "gpu-0",
                                  (cdi_device_id(GPU, "uid-h", "gpu-0", share),),
                                  {"uuid": "GPU-0000"}, share_id=share, backend="fake-gpu")
                   for share in ("s-1", "s-2"))
    claim = PreparedClaim("ns", "halves", "uid-h", devices=shares)
    decision = decide(pod([{"name": "g", "resourceClaimName": "halves"}]), "main", [],
                      [claim], NODE, backends=BACKENDS)
    assert decision == Adjustment(
        ("kdra.dev/gpu=uid-h-gpu-0-s-1", "kdra.dev/gpu=uid-h-gpu-0-s-2"),
        (("KDRA_DEVICES", f"{GPU}/{NODE}/gpu-0"), ("NVIDIA_VISIBLE_DEVICES", "GPU-0000")),
        (f"{GPU}/{NODE}/gpu-0",))

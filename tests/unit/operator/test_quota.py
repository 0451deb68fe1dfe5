"""DeviceQuota arithmetic (kdra.dra.quota; the status: kdra.operator.core.quota): charges, the
ledger with shared claims and in-flight allocations, the check and its message, the early
check at admission, the status."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.dra.errors import InvalidObject
from kdra.dra.models import AllocationResult, ResourceClaim, parse_claim
from kdra.dra.quantity import parse_quantity
from kdra.dra.quota import (
    DeviceFacts,
    DeviceQuota,
    Ledger,
    Usage,
    add_charges,
    check,
    claim_charge,
    device_facts,
    early_denials,
    least_devices,
    parse_quota,
)
from kdra.operator.core.quota import quota_status
from tests.unit.builders import (
    CLASS,
    DRIVER,
    NODE,
    allocated,
    claim_with,
    first_available,
    request,
    sub,
)

Q = parse_quantity
GI80 = DeviceFacts({"memory": Q("80Gi")}, {})
FACTS = {f"gpu-{i}": GI80 for i in range(8)} | {
    "mig-0": DeviceFacts({"memory": Q("10Gi")}, {"memory-slices": Q("1")}),
    "mig-1": DeviceFacts({"memory": Q("20Gi")}, {"memory-slices": Q("2")}),
}


def facts(driver: str, pool: str, device: str) -> DeviceFacts | None:
    assert (driver, pool) == (DRIVER, NODE)
    return FACTS.get(device)


def allocation(*results: dict[str, Any]) -> AllocationResult:
    rows = [{"driver": DRIVER, "pool": NODE, **r} for r in results]
    parsed = parse_claim({"metadata": {"name": "x"},
                          "status": {"allocation": {"devices": {"results": rows}}}})
    assert parsed.status.allocation is not None
    return parsed.status.allocation


def usage(devices: int, memory: str | None = None, **counters: str) -> Usage:
    return Usage(devices, {"memory": Q(memory)} if memory else {},
                 {k.replace("_", "-"): Q(v) for k, v in counters.items()})


def quota(name: str = "gpus", namespace: str = "team-a", *limits: dict[str, Any]) -> DeviceQuota:
    return parse_quota({"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
                        "metadata": {"name": name, "namespace": namespace, "generation": 2},
                        "spec": {"limits": list(limits) or [{"deviceClassName": CLASS,
                                                              "devices": 4}]}})


# --------------------------------------------------------------------------- charges

ONE = claim_with(request("gpu"))
PAIR = claim_with(request("gpu", count=2))
ADMIN = claim_with(request("gpu", admin=True))
PRIORITIZED = claim_with(first_available("gpu", sub("big", cls="big.example.com"),
                                         sub("small", cls="mig.example.com")))


@pytest.mark.parametrize(("claim", "results", "expected"), [
    pytest.param(ONE, None, {}, id="not allocated: nothing"),
    pytest.param(ONE, [{"request": "gpu", "device": "gpu-0"}], {CLASS: usage(1, "80Gi")},
                 id="one device with its memory"),
    pytest.param(PAIR, [{"request": "gpu", "device": "gpu-0"},
                        {"request": "gpu", "device": "gpu-1"}], {CLASS: usage(2, "160Gi")},
                 id="two devices: memory summed"),
    pytest.param(ADMIN, [{"request": "gpu", "device": "gpu-0", "adminAccess": True}], {},
                 id="admin access holds no device: not charged"),
    pytest.param(PRIORITIZED, [{"request": "gpu/small", "device": "mig-1"}],
                 {"mig.example.com": usage(1, "20Gi", memory_slices="2")},
                 id="firstAvailable: the chosen alternative's class, counters too"),
    pytest.param(ONE, [{"request": "gpu", "device": "gpu-0",
                        "consumedCapacity": {"memory": "8Gi"}}], {CLASS: usage(1, "8Gi")},
                 id="consumedCapacity (a shared device) replaces the device's capacity"),
    pytest.param(ONE, [{"request": "gpu", "device": "unknown"}], {CLASS: usage(1)},
                 id="device not in any known slice: a device, no capacity"),
    pytest.param(ONE, [{"request": "other", "device": "gpu-0"}], {},
                 id="a result for no request of the claim: ignored"),
])
def test_claim_charge(claim: ResourceClaim, results: list[dict[str, Any]] | None,
                      expected: dict[str, Usage]) -> None:
    alloc = allocation(*results) if results is not None else None
    assert claim_charge(claim, alloc, facts) == expected
    if alloc is not None:  # the claim's own allocation charges the same as an explicit one
        own = claim.model_copy(update={"status": claim.status.model_copy(
            update={"allocation": alloc})})
        assert claim_charge(own, None, facts) == expected


def test_device_facts_from_a_slice_entry() -> None:
    got = device_facts(DRIVER, {"memory": {"value": "80Gi"}, f"{DRIVER}/cores": {"value": "132"},
                                "other.dev/x": {"value": "1"}, "bad": {"value": "lots"},
                                "shape": "not an object"},
                       [{"counterSet": "a", "counters": {"slices": {"value": "2"}}},
                        {"counterSet": "b", "counters": {"slices": {"value": "3"}}}, "junk"])
    # the driver's own domain is left off; another domain stays; bad values are left out
    assert got == DeviceFacts({"memory": Q("80Gi"), "cores": Q("132"), "other.dev/x": Q("1")},
                              {"slices": Q("5")})


# --------------------------------------------------------------------------- ledger

def charge(devices: int, memory: str | None = None) -> dict[str, Usage]:
    return {CLASS: usage(devices, memory)}


# Each step: (operation, claim key, devices charged); then the namespace's devices in use.
LEDGER_TABLE = [
    pytest.param([("observe", "team-a/shared", 1), ("observe", "team-a/shared", 1),
                  ("observe", "team-a/shared", 1)], [1, 1, 1],
                 id="a shared claim reserved by three pods (three versions) counts once"),
    pytest.param([("assume", "team-a/c", 1), ("observe", "team-a/c", 1), ("forget", "team-a/c", 0)],
                 [1, 1, 1], id="in flight, then written and seen: counted once throughout"),
    pytest.param([("observe", "team-a/a", 1), ("assume", "team-a/b", 2), ("forget", "team-a/b", 0)],
                 [1, 3, 1], id="an in-flight allocation abandoned: no longer counted"),
    pytest.param([("observe", "team-a/a", 2), ("observe", "team-a/a", 0)], [2, 0],
                 id="deallocated: released"),
    pytest.param([("observe", "team-a/a", 2), ("remove", "team-a/a", 0)], [2, 0],
                 id="deleted: released"),
    pytest.param([("assume", "team-a/a", 1), ("remove", "team-a/a", 0)], [1, 0],
                 id="deleted while in flight: released"),
    pytest.param([("observe", "team-a/a", 1), ("observe", "team-b/a", 4),
                  ("observe", "team-a/b", 1)], [1, 1, 2],
                 id="namespaces are counted apart"),
    pytest.param([("observe", "team-a/a", 1), ("assume", "team-a/a", 2)], [1, 2],
                 id="an assumption over an observed version counts instead of it, not beside"),
]


@pytest.mark.parametrize(("steps", "in_use"), LEDGER_TABLE)
def test_ledger(steps: list[tuple[str, str, int]], in_use: list[int]) -> None:
    ledger = Ledger()
    seen = []
    for op, key, devices in steps:
        if op in ("observe", "assume"):
            getattr(ledger, op)(key, charge(devices))
        else:
            getattr(ledger, op)(key)
        seen.append(ledger.used("team-a").get(CLASS, Usage()).devices)
    assert seen == in_use


def test_ledger_reports_whether_usage_changed() -> None:
    ledger = Ledger()
    assert ledger.observe("team-a/c", charge(1))
    assert not ledger.observe("team-a/c", charge(1))  # a new version of the same allocation
    assert ledger.assume("team-a/d", charge(1))
    assert not ledger.observe("team-a/d", charge(1))  # the assumption already counts it
    assert not ledger.forget("team-a/d")  # the observed version counts the same
    assert ledger.used("team-a") == {CLASS: usage(2)}
    assert ledger.claims("team-a") == 2 and ledger.in_flight("team-a") == 0


def test_ledger_sums_always_equal_the_counting_charges() -> None:
    """Random walks over observe/assume/forget/remove: the incremental per-namespace sums
    equal the sums recomputed from scratch (assumed charge if any, else the observed one)."""
    rng = random.Random(27)
    for _ in range(50):
        ledger = Ledger()
        held: dict[str, dict[str, Usage]] = {}
        assumed: dict[str, dict[str, Usage]] = {}
        keys = [f"{ns}/c{i}" for ns in ("a", "b") for i in range(4)]
        for _ in range(60):
            key = rng.choice(keys)
            op = rng.choice(["observe", "assume", "forget", "remove"])
            value = charge(rng.randint(0, 3), rng.choice([None, "10Gi", "80Gi"]))
            value = {} if not value[CLASS].devices else value
            if op == "observe":
                ledger.observe(key, value)
                held[key] = value
            elif op == "assume":
                ledger.assume(key, value)
                assumed[key] = value
                if not value:  # an allocation that charges nothing is no assumption
                    del assumed[key]
            elif op == "forget":
                ledger.forget(key)
                assumed.pop(key, None)
            else:
                ledger.remove(key)
                held.pop(key, None)
                assumed.pop(key, None)
            for ns in ("a", "b"):
                expected: dict[str, Usage] = {}
                for k in {*held, *assumed}:
                    if k.startswith(ns + "/"):
                        expected = add_charges(expected, assumed.get(k, held.get(k, {})))
                assert dict(ledger.used(ns)) == expected


# --------------------------------------------------------------------------- the check

MEMORY_LIMIT = {"deviceClassName": CLASS, "capacity": {"memory": "320Gi"}}
CHECK_TABLE = [
    pytest.param([quota()], charge(4), charge(1),
                 "DeviceQuota team-a/gpus: class 'gpu.kdra.dev' devices: 4 used + 1 asked > 4 hard",
                 id="the fifth GPU"),
    pytest.param([quota()], charge(3), charge(1), None, id="the fourth GPU fits"),
    pytest.param([quota()], charge(2), charge(3),
                 "DeviceQuota team-a/gpus: class 'gpu.kdra.dev' devices: 2 used + 3 asked > 4 hard",
                 id="a pod's claims together"),
    pytest.param([quota("mem", "team-a", MEMORY_LIMIT)], charge(3, "240Gi"), charge(1, "80Gi"),
                 None, id="memory: exactly at the limit fits"),
    pytest.param([quota("mem", "team-a", MEMORY_LIMIT)], charge(4, "320Gi"), charge(1, "10Gi"),
                 "DeviceQuota team-a/mem: class 'gpu.kdra.dev' memory: 320Gi used + 10Gi asked "
                 "> 320Gi hard", id="memory: over by a small device"),
    pytest.param([quota()], charge(9), {"other.example.com": usage(1)}, None,
                 id="another class is not limited (even while this one is over)"),
    pytest.param([quota("a-loose", "team-a", {"deviceClassName": CLASS, "devices": 10}),
                  quota("b-tight", "team-a", {"deviceClassName": CLASS, "devices": 2})],
                 charge(2), charge(1),
                 "DeviceQuota team-a/b-tight: class 'gpu.kdra.dev' devices: 2 used + 1 asked > 2 "
                 "hard", id="every quota of the namespace applies"),
    pytest.param([quota("z", "team-a", {"deviceClassName": CLASS, "devices": 0})], {}, charge(1),
                 "DeviceQuota team-a/z: class 'gpu.kdra.dev' devices: 0 used + 1 asked > 0 hard",
                 id="zero devices forbids the class"),
    pytest.param([quota("slices", "team-a", {"deviceClassName": "mig.example.com",
                                             "counters": {"memory-slices": "3"}})],
                 {"mig.example.com": usage(1, "10Gi", memory_slices="2")},
                 {"mig.example.com": usage(1, "20Gi", memory_slices="2")},
                 "DeviceQuota team-a/slices: class 'mig.example.com' memory-slices: 2 used + 2 "
                 "asked > 3 hard", id="counters"),
    pytest.param([quota("mem", "team-a", MEMORY_LIMIT)], charge(5, "400Gi"), charge(1),
                 None, id="a device with no memory adds no memory"),
]


@pytest.mark.parametrize(("quotas", "used", "asked", "message"), CHECK_TABLE)
def test_check(quotas: list[DeviceQuota], used: dict[str, Usage], asked: dict[str, Usage],
               message: str | None) -> None:
    denial = check(quotas, used, asked)
    assert (denial.message if denial else None) == message


def test_shared_and_in_flight_claims_through_ledger_and_check() -> None:
    """Quota of 4: three pods share one allocated claim (1 device), two claims are in flight
    (2 devices): a fourth claim fits, a fifth does not; once an in-flight one is abandoned,
    it fits again."""
    ledger = Ledger()
    quotas = [quota()]
    shared = allocated(claim_with(request("gpu"), name="shared", namespace="team-a"),
                       ("gpu", "gpu-0"))
    for _ in range(3):  # each pod's reservation is a new version of the same claim
        ledger.observe(shared.key, claim_charge(shared, None, facts))
    ledger.assume("team-a/f1", claim_charge(ONE, allocation({"request": "gpu",
                                                             "device": "gpu-1"}), facts))
    ledger.assume("team-a/f2", claim_charge(ONE, allocation({"request": "gpu",
                                                             "device": "gpu-2"}), facts))
    one_more = claim_charge(ONE, allocation({"request": "gpu", "device": "gpu-3"}), facts)
    assert check(quotas, ledger.used("team-a"), one_more) is None
    ledger.assume("team-a/f3", one_more)
    denial = check(quotas, ledger.used("team-a"), one_more)
    assert denial is not None and denial.message.endswith("4 used + 1 asked > 4 hard")
    ledger.forget("team-a/f2")
    assert check(quotas, ledger.used("team-a"), one_more) is None


# --------------------------------------------------------------------------- admission

@pytest.mark.parametrize(("claim", "least"), [
    pytest.param(claim_with(request("gpu", count=5)), {CLASS: 5}, id="ExactCount"),
    pytest.param(claim_with(request("a", count=2), request("b", count=3)), {CLASS: 5},
                 id="requests of one class add up"),
    pytest.param(claim_with(request("gpu", all=True)), {}, id="All: unknown until allocated"),
    pytest.param(claim_with(request("gpu", count=6, admin=True)), {}, id="admin access"),
    pytest.param(claim_with(first_available("gpu", sub("big", count=4), sub("small", count=2))),
                 {CLASS: 2}, id="firstAvailable of one class: the smallest alternative"),
    pytest.param(claim_with(first_available("gpu", sub("big", count=4),
                                            sub("other", cls="x.example.com"))), {},
                 id="firstAvailable across classes: nothing sure"),
])
def test_least_devices(claim: ResourceClaim, least: dict[str, int]) -> None:
    assert least_devices(claim) == least


def test_early_denials_name_the_quota_and_the_numbers() -> None:
    quotas = [quota(), quota("loose", "team-a", {"deviceClassName": CLASS, "devices": 8})]
    denials = early_denials(claim_with(request("gpu", count=5)), quotas)
    assert [d.message for d in denials] == [
        "DeviceQuota team-a/gpus: class 'gpu.kdra.dev' devices: 5 asked > 4 hard (the claim "
        "alone exceeds the quota)"]
    assert early_denials(claim_with(request("gpu", count=4)), quotas) == []


# --------------------------------------------------------------------------- parsing, status

@pytest.mark.parametrize(("spec", "error"), [
    ({"limits": [{"deviceClassName": CLASS, "devices": 1}, {"deviceClassName": CLASS}]},
     "spec.limits[1].deviceClassName: 'gpu.kdra.dev' is limited twice"),
    ({"limits": [{"deviceClassName": CLASS, "capacity": {"memory": "lots"}}]},
     "spec.limits[0].capacity[memory]"),
    ({"limits": [{"deviceClassName": CLASS, "capacity": {"memory": "-1Gi"}}]},
     "must not be negative"),
    ({"limits": [{"deviceClassName": CLASS, "devices": -1}]},
     "DeviceQuota team-a/q: spec.limits[0].devices: Input should be greater than or equal to 0"),
    ({"limits": [{"deviceClassName": "Not A Class"}]}, "deviceClassName"),
    ({"limits": "everything"}, "spec.limits"),
])
def test_parse_quota_rejects(spec: Any, error: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        parse_quota({"metadata": {"name": "q", "namespace": "team-a"}, "spec": spec})
    assert error in str(caught.value)


def test_status_shows_used_and_hard() -> None:
    q = quota("gpus", "team-a", {"deviceClassName": CLASS, "devices": 4,
                                 "capacity": {"memory": "320Gi"}},
              {"deviceClassName": "mig.example.com", "counters": {"memory-slices": "8"}})
    status = quota_status(q, {CLASS: usage(4, "320Gi")}, claims=3, in_flight=1)
    assert status["used"] == [
        {"deviceClassName": CLASS, "devices": 4, "capacity": {"memory": "320Gi"}},
        {"deviceClassName": "mig.example.com", "devices": 0, "counters": {"memory-slices": "0"}}]
    assert status["usedSummary"] == ("gpu.kdra.dev: 4 devices, memory 320Gi; "
                                     "mig.example.com: memory-slices 0")
    assert status["hardSummary"] == ("gpu.kdra.dev: 4 devices, memory 320Gi; "
                                     "mig.example.com: memory-slices 8")
    [condition] = status["conditions"]
    assert (condition["type"], condition["status"], condition["observedGeneration"]) == (
        "Exceeded", "False", 2)
    assert condition["message"] == "3 allocated claim(s) counted (1 being allocated)"
    over = quota_status(q, {CLASS: usage(5, "400Gi")})["conditions"][0]
    assert over["status"] == "True" and "gpu.kdra.dev devices, gpu.kdra.dev memory" in \
        over["message"]


# --------------------------------------------------------------------------- the webhook's check

def admission_request(count: int, operation: str = "CREATE", kind: str = "ResourceClaim",
                      extra: dict[str, Any] | None = None,
                      generated: bool = False) -> dict[str, Any]:
    exactly = {"deviceClassName": CLASS, "count": count, **(extra or {})}
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}
    obj = {"apiVersion": "resource.kdra.dev/v1", "kind": kind,
           "metadata": {"name": "c", "namespace": "team-a", "annotations": {
               "resource.kdra.dev/pod-claim-name": "gpu"} if generated else {}},
           "spec": spec if kind == "ResourceClaim" else {"spec": spec}}
    return {"uid": "u-1", "kind": {"group": "resource.kdra.dev", "version": "v1", "kind": kind},
            "operation": operation, "name": "c", "namespace": "team-a", "object": obj,
            "oldObject": obj if operation == "UPDATE" else None}


QUOTA_OBJECTS = [
    {"metadata": {"name": "gpus", "namespace": "team-a"},
     "spec": {"limits": [{"deviceClassName": CLASS, "devices": 4}]}},
    {"metadata": {"name": "broken", "namespace": "team-a"}, "spec": {"limits": "none"}},
]


@pytest.mark.parametrize(("request_", "message"), [
    pytest.param(admission_request(5), "spec.devices.requests: DeviceQuota team-a/gpus: class "
                 "'gpu.kdra.dev' devices: 5 asked > 4 hard (the claim alone exceeds the quota)",
                 id="five GPUs under a quota of four: denied at creation"),
    pytest.param(admission_request(4), None, id="four fit (usage is the binder's to check)"),
    pytest.param(admission_request(5, operation="UPDATE"), None, id="only creation is checked"),
    pytest.param(admission_request(0), "count", id="the claim's own error comes first, alone"),
    pytest.param(admission_request(5, generated=True), None,
                 id="generated from a template: the binder holds the pod back instead"),
])
def test_the_webhook_denies_a_claim_that_alone_exceeds_a_quota(
        request_: dict[str, Any], message: str | None) -> None:
    from kdra.operator.core import admission
    from kdra.operator.core.quota_admission import quota_namespace, with_quotas

    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request_}
    wanted = quota_namespace(body)
    generated = "resource.kdra.dev/pod-claim-name" in request_["object"]["metadata"][
        "annotations"]
    assert wanted == ("team-a" if request_["operation"] == "CREATE" and not generated else None)
    if generated:  # even given the quotas, it is left to the binder
        assert with_quotas(admission.validate, QUOTA_OBJECTS)(request_).allowed
    response = with_quotas(admission.validate, QUOTA_OBJECTS if wanted else [])(request_)
    if message is None:
        assert response.allowed, response.message
    else:
        assert message in response.message
        assert ("DeviceQuota" in response.message) == message.startswith("spec.devices")


def test_status_of_the_largest_quota_fits_the_schema() -> None:
    """32 classes of 253 characters, 16 capacities each, all exceeded: the summaries and the
    condition's message stay within the CRD's limits (4096, 32768)."""
    limits = [{"deviceClassName": f"{i:02d}" + "a" * 251, "devices": 0,
               "capacity": {f"c{j}-" + "x" * 60: "1" for j in range(16)}} for i in range(32)]
    q = quota("big", "team-a", *limits)
    used = {limit["deviceClassName"]: Usage(1, {name: Q("2") for name in limit["capacity"]})
            for limit in limits}
    status = quota_status(q, used)
    assert len(status["usedSummary"]) <= 4096 and len(status["hardSummary"]) <= 4096
    assert status["usedSummary"].endswith("...")
    assert len(status["conditions"][0]["message"]) <= 32768


# --------------------------------------------------------------------------- hostile input

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64), st.floats(),
                     st.text(max_size=12), st.sampled_from(["4", "80Gi", "-1", "1e400", CLASS]))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.sampled_from(["deviceClassName", "devices", "capacity", "counters",
                                     "limits", "memory", "x"]) | st.text(max_size=8),
                    inner, max_size=4)), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(spec=_json, extra=_json)
def test_parse_quota_and_status_are_total(spec: Any, extra: Any) -> None:
    """Any JSON: a quota (whose status can be computed and checked against) or InvalidObject."""
    obj = {"metadata": {"name": "q", "namespace": "team-a"}, "spec": spec, "extra": extra}
    try:
        q = parse_quota(obj)
    except InvalidObject:
        return
    status = quota_status(q, {CLASS: usage(3, "100Gi")})
    assert len(status["usedSummary"]) <= 4096
    check([q], {CLASS: usage(3, "100Gi")}, {CLASS: usage(1, "80Gi")})

"""kdra.cli.core.why (and the allocator's nearest_fits): why a pod waits, and what would help.

The pod and the objects are raw API dicts, as ``kubectl kdra why`` reads them."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from kdra.cli.core.why import explain_pod
from kdra.cli.core.why_render import render_why
from kdra.dra.allocator.pacing import UNITS_PER_STEP
from kdra.dra.cel import DeviceSelector
from kdra.dra.scheduling import POD_GROUP_LABEL
from kdra.kube.core.flavours import NATIVE
from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION
from tests.unit.cli.test_describe import GPU, gpus, raw_claim, raw_slice
from tests.unit.dra.test_utilisation import GPU_CLASS, with_class


def node(name: str, *taints: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": list(taints)},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def pending_claim(name: str, count: int = 1, selector: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": GPU, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    request = {"name": "gpu", "exactly": exactly}
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [request]}}}


def pod(entries: list[dict[str, Any]], statuses: dict[str, str] | None = None,
        node_name: str | None = None) -> dict[str, Any]:
    annotations = {CLAIMS_ANNOTATION: yaml.safe_dump(entries)}
    if statuses:
        annotations[CLAIM_STATUSES_ANNOTATION] = json.dumps(statuses)
    spec: dict[str, Any] = {"schedulerName": "kdra-scheduler", "containers": [{"name": "c"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": "big", "namespace": "default", "uid": "uid-big",
                         "annotations": annotations},
            "spec": spec,
            "status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                       "reason": "Unschedulable",
                                       "message":
                                           "0/3 nodes are available: (what the binder said)"}]}}


SLICES = [raw_slice("node-a", *gpus(2)), raw_slice("node-b", *gpus(2)),
          raw_slice("node-c", *gpus(2))]
HELD = [with_class(raw_claim(f"held-{n}-{i}", ("gpu", GPU, f"node-{n}", f"gpu-{i}"),
                             node=f"node-{n}", pods=(f"p-{n}{i}",)), GPU)
        for n, i in (("a", 0), ("a", 1), ("b", 0))]
NODES = [node("node-a"), node("node-b"),
         node("node-c", {"key": "maintenance", "value": "yes", "effect": "NoSchedule"})]


def explain(target: dict[str, Any], claims: list[dict[str, Any]], **kw: Any) -> Any:
    args: dict[str, Any] = {"classes": [GPU_CLASS], "slices": SLICES, "nodes": NODES,
                            "pods": [], **kw}
    return explain_pod(target, claims=claims, **args)


def test_unschedulable_pod_groups_nodes_and_names_the_nearest_fit() -> None:
    big = pending_claim("big-gpu", count=2)
    found = explain(pod([{"name": "gpu", "resourceClaimName": "big-gpu"}]), [big, *HELD])
    assert found.verdict == "unschedulable"
    assert found.summary.startswith("0/3 nodes are available: ")
    groups = {g.reason: g.nodes for g in found.groups}
    assert groups["node(s) had untolerated taint {maintenance: yes}"] == ("node-c",)
    busy = [reason for reason in groups if "free matching devices" in reason
            or "all allocated" in reason]
    assert sorted(n for reason in busy for n in groups[reason]) == ["node-a", "node-b"]
    # node-b has one free GPU: freeing one device there is the nearest fit.
    assert [(n.node, n.devices, n.minimal) for n in found.nearest] == [
        ("node-b", (f"{GPU}/node-b/gpu-0",), True),
        ("node-a", (f"{GPU}/node-a/gpu-0", f"{GPU}/node-a/gpu-1"), True)]
    assert found.nearest[0].holders == ("default/held-b-0 (pod p-b0)",)
    (claim,) = found.claims
    assert (claim.entry, claim.state, claim.requests[0].count) == ("gpu", "pending", "2")
    assert claim.requests[0].selectors == (f'class: device.driver == "{GPU}"',)
    text = render_why(found)
    assert "kdra-scheduler said: 0/3 nodes are available: (what the binder said)" in text
    assert "  node-b would fit if 1 device was freed: " \
           f"{GPU}/node-b: gpu-0 — held by default/held-b-0 (pod p-b0)" in text
    assert f"  node-a would fit if 2 devices were freed: {GPU}/node-a: gpu-0, gpu-1 — " in text
    assert json.loads(json.dumps(found.to_json()))["nearest"][0]["free"] == 1


def test_a_node_that_can_never_fit_is_no_nearest_fit() -> None:
    # Three GPUs wanted: no node has three, freeing cannot help.
    found = explain(pod([{"name": "gpu", "resourceClaimName": "c"}]),
                    [pending_claim("c", count=3), *HELD])
    assert found.verdict == "unschedulable" and not found.nearest
    assert any("too few devices" in g.reason for g in found.groups)


def test_fits_now_missing_claims_and_bound_pods() -> None:
    one = explain(pod([{"name": "gpu", "resourceClaimName": "c"}]), [pending_claim("c")])
    assert one.verdict == "fits" and one.fits == ("node-a", "node-b")
    missing = explain(pod([{"name": "gpu", "resourceClaimTemplateName": "t"}]), [])
    assert missing.verdict == "waiting"
    assert "not created yet from template 't'" in missing.claims[0].problem
    bound = explain(pod([{"name": "gpu", "resourceClaimName": "held-a-0"}], node_name="node-a"),
                    HELD)
    assert bound.verdict == "bound" and bound.claims[0].devices == (f"{GPU}/node-a/gpu-0",)
    template = explain(pod([{"name": "gpu", "resourceClaimTemplateName": "t"}],
                           statuses={"gpu": "c"}), [pending_claim("c")])
    assert template.claims[0].name == "c" and template.verdict == "fits"


def test_a_generated_claim_not_yet_recorded_is_found_by_its_owner() -> None:
    # kdra's flavour records a bound pod's claim names in its Binding: until then the
    # pod's own claim is the one it controls whose pod-claim-name names the entry.
    generated = pending_claim("big-gpu-x7k2p")
    generated["metadata"]["annotations"] = {"resource.kdra.dev/pod-claim-name": "gpu"}
    generated["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "big", "uid": "uid-big",
         "controller": True, "blockOwnerDeletion": True}]
    others = copy.deepcopy(generated)
    others["metadata"]["name"] = "someone-elses"
    others["metadata"]["ownerReferences"][0]["uid"] = "uid-other"
    found = explain(pod([{"name": "gpu", "resourceClaimTemplateName": "t"}]),
                    [others, generated])
    assert found.claims[0].name == "big-gpu-x7k2p" and found.verdict == "fits"
    alone = explain(pod([{"name": "gpu", "resourceClaimTemplateName": "t"}]), [others])
    assert alone.verdict == "waiting" and "not created yet" in alone.claims[0].problem


def test_unreadable_nodes_are_taken_from_the_slices_and_said() -> None:
    found = explain(pod([{"name": "gpu", "resourceClaimName": "c"}]), [pending_claim("c")],
                    nodes=None, pods=None)
    assert found.fits == ("node-a", "node-b", "node-c")  # no taints known
    assert any("nodes could not be read" in note for note in found.notes)


def test_bad_input_is_explained_not_raised() -> None:
    bad = pod([])
    bad["metadata"]["annotations"][CLAIMS_ANNOTATION] = "- {name: x"
    assert explain(bad, []).verdict == "invalid"
    plain = pod([])
    del plain["metadata"]["annotations"][CLAIMS_ANNOTATION]
    assert explain(plain, []).verdict == "not-kdra"
    nonsense = pending_claim("c")
    nonsense["spec"] = {"devices": "nonsense"}
    found = explain(pod([{"name": "gpu", "resourceClaimName": "c"}]), [nonsense])
    assert found.verdict == "waiting" and found.claims[0].state == "invalid"
    no_class = pending_claim("c")
    no_class["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nope"
    found = explain(pod([{"name": "gpu", "resourceClaimName": "c"}]), [no_class])
    assert found.verdict == "unschedulable" and "device class nope not found" in found.summary


# --------------------------------------------------------------------------- search budget


def three_claims() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """A pod of three one-GPU claims; node-d and node-e (4 free GPUs each) take it after a few
    search steps (three claims: no counted placement, a real search)."""
    claims = [pending_claim(f"c{i}") for i in range(3)]
    target = pod([{"name": f"g{i}", "resourceClaimName": f"c{i}"} for i in range(3)])
    cluster = {"slices": [*SLICES, raw_slice("node-d", *gpus(4)), raw_slice("node-e", *gpus(4))],
               "nodes": [*NODES, node("node-d"), node("node-e")]}
    return target, [*claims, *HELD], cluster


def test_out_of_search_budget_is_its_own_verdict_with_a_hint() -> None:
    target, claims, cluster = three_claims()
    unbounded = explain(target, claims, **cluster)
    assert unbounded.fits == ("node-d", "node-e") and not unbounded.hints
    # Each node's search capped (node_steps): both give up.
    capped = explain(target, claims, **cluster, steps=100, node_steps=lambda candidates: 2)
    assert capped.verdict == "search-exhausted" and not capped.fits
    groups = {g.reason: g.nodes for g in capped.groups}
    assert groups['allocation search gave up (claims "c0", "c1", "c2")'] == ("node-d", "node-e")
    # The pod's budget spent on node-d: node-e is not evaluated, and says so.
    found = explain(target, claims, **cluster, steps=2, node_steps=lambda candidates: 100)
    assert found.verdict == "search-exhausted" and not found.fits
    assert found.summary.startswith("no placement found within the search budget (")
    assert "of 2); 0/5 nodes are available: " in found.summary
    groups = {g.reason: g.nodes for g in found.groups}
    assert groups['allocation search gave up (claims "c0", "c1", "c2")'] == ("node-d",)
    assert groups["not evaluated: the search budget ran out first"] == ("node-e",)
    assert found.hints and found.hints[0].startswith("AllocationSearchExhausted: ")
    text = render_why(found)
    assert "\n\nHint: AllocationSearchExhausted: kdra-scheduler's allocation search" in text
    assert "--allocation-search-steps" in text
    assert json.loads(json.dumps(found.to_json()))["verdict"] == "search-exhausted"


def test_the_binders_search_exhausted_condition_is_shown_with_its_reason() -> None:
    target = pod([{"name": "gpu", "resourceClaimName": "big-gpu"}])
    target["status"]["conditions"][0].update(
        reason="AllocationSearchExhausted",
        message="allocation search for claims 'big-gpu' exhausted its budget (...)")
    found = explain(target, [pending_claim("big-gpu", count=2), *HELD])
    assert found.verdict == "unschedulable"  # now: the recomputation differs, both shown
    assert found.condition_reason == "AllocationSearchExhausted"
    text = render_why(found)
    assert "kdra-scheduler said (AllocationSearchExhausted): allocation search for claims " \
           "'big-gpu' exhausted its budget (...)" in text
    assert "Hint: AllocationSearchExhausted: " in text
    assert found.to_json()["conditionReason"] == "AllocationSearchExhausted"
    # A plain Unschedulable condition: no reason in brackets, no hint.
    plain = explain(pod([{"name": "gpu", "resourceClaimName": "big-gpu"}]),
                    [pending_claim("big-gpu", count=2), *HELD])
    assert plain.condition_reason == "Unschedulable" and not plain.hints
    assert "kdra-scheduler said: " in render_why(plain)


def test_the_nearest_fit_search_is_bounded_and_says_so() -> None:
    target = pod([{"name": "gpu", "resourceClaimName": "big-gpu"}])
    claims = [pending_claim("big-gpu", count=2), *HELD]
    # A counted request: placing it costs no search steps; the nearest fits' searches do.
    found = explain(target, claims, steps=1, node_steps=lambda candidates: 1)
    assert found.verdict == "unschedulable"
    assert len(found.nearest) < 2  # node-a was not reached
    assert any(note.startswith("the search for the nearest fit ran out of its budget (")
               for note in found.notes)
    whole = explain(target, claims, steps=1000, node_steps=lambda candidates: 1000)
    assert [n.node for n in whole.nearest] == ["node-b", "node-a"]
    assert not any("nearest fit" in note for note in whole.notes)


def test_a_prioritized_claim_lists_its_alternatives_and_fits_on_the_best_node() -> None:
    """A firstAvailable claim: one request row per alternative, named as its results would
    be; the nearest fit searches its alternatives as the binder does (two GPUs, else one)."""
    claim = pending_claim("choice")
    claim["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "pair", "deviceClassName": GPU, "count": 2},
        {"name": "one", "deviceClassName": GPU, "selectors": [
            {"cel": {"expression": f'device.attributes["{GPU}"].index == 1'}}]}]}]
    entries = [{"name": "gpu", "resourceClaimName": "choice"}]
    found = explain(pod(entries), [claim, *HELD])
    (info,) = found.claims
    assert [(r.name, r.count) for r in info.requests] == [("gpu/pair", "2"), ("gpu/one", "1")]
    assert info.requests[1].selectors[-1] == f'request: device.attributes["{GPU}"].index == 1'
    # node-b has gpu-1 free: the second alternative fits there now.
    assert found.verdict == "fits" and found.fits == ("node-b",)
    # Everything held on node-b too: the nearest fits are the smallest over the alternatives
    # (gpu-1 for the second, rather than both GPUs for the first).
    more = [*HELD, with_class(raw_claim("held-b-1", ("gpu", GPU, "node-b", "gpu-1"),
                                        node="node-b", pods=("p-b1",)), GPU)]
    found = explain(pod(entries), [claim, *more])
    assert found.verdict == "unschedulable"
    assert [(n.node, n.devices, n.minimal) for n in found.nearest] == [
        ("node-a", (f"{GPU}/node-a/gpu-1",), True),
        ("node-b", (f"{GPU}/node-b/gpu-1",), True)]


def test_a_native_pod_is_read_where_the_native_flavour_keeps_its_claims() -> None:
    native = {"metadata": {"name": "big", "namespace": "default", "uid": "uid-big"},
              "spec": {"schedulerName": "kdra-scheduler",
                       "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
                       "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]},
              "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c"}]}}
    found = explain(native, [pending_claim("c")], flavour=NATIVE)
    assert found.verdict == "fits" and found.claims[0].name == "c"
    assert explain(native, [pending_claim("c")]).verdict == "not-kdra"  # no annotation
    broken = {**native, "spec": {**native["spec"], "resourceClaims": [{"name": "gpu"}]}}
    invalid = explain(broken, [], flavour=NATIVE)
    assert invalid.verdict == "invalid" and "spec.resourceClaims" in invalid.summary


def test_a_costly_selector_is_explained_within_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The selector's run-time cost counts against ``why``'s search budget as against the
    binder's (kdra.dra.allocator.pacing): on a node with 128 devices it evaluates a few, not
    all, and says the search gave up evaluating CEL selectors."""
    costly = "lists.range(1000).all(i, i >= 0)"  # 4,000 units at run time
    runs: list[str] = []
    evaluate = DeviceSelector.evaluate

    def counted(self: DeviceSelector, *args: Any) -> tuple[bool, int]:
        runs.append(self.expression)
        return evaluate(self, *args)

    monkeypatch.setattr(DeviceSelector, "evaluate", counted)
    target = pod([{"name": "gpu", "resourceClaimName": "costly"}])
    cluster = {"slices": [raw_slice("node-d", *gpus(128))], "nodes": [node("node-d")]}
    found = explain(target, [pending_claim("costly", selector=costly)], **cluster,
                    steps=5 * 4000 // UNITS_PER_STEP, node_steps=lambda candidates: 10**6)
    assert found.verdict == "search-exhausted"
    groups = {g.reason: g.nodes for g in found.groups}
    assert groups['allocation search gave up evaluating CEL selectors (claims "costly")'] == (
        "node-d",)
    assert 5 <= runs.count(costly) <= 6  # its budget, and at most one evaluation more
    whole = explain(target, [pending_claim("costly", selector=costly)], **cluster)
    assert whole.fits == ("node-d",)


def quota(devices: int, name: str = "gpus", namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"limits": [{"deviceClassName": GPU, "devices": devices}]}}


def test_why_applies_the_binders_quota_check() -> None:
    """Issue 41: ``why`` said "fits now" while kdra-scheduler held the pod with
    DeviceQuotaExceeded; it now applies the same check (HELD: 3 GPUs of namespace default)."""
    one = pod([{"name": "gpu", "resourceClaimName": "c"}])
    claims = [pending_claim("c"), *HELD]
    assert explain(one, claims).verdict == "fits"
    assert explain(one, claims, quotas=[quota(4)]).verdict == "fits"  # 3 used + 1 <= 4
    assert explain(one, claims, quotas=[quota(1, namespace="other")]).verdict == "fits"
    over = explain(one, claims, quotas=[quota(3)])
    assert over.verdict == "over-quota" and not over.fits
    message = ("DeviceQuota default/gpus: class 'gpu.kdra.dev' devices: 3 used + 1 asked > 3 "
               "hard (DeviceQuotaExceeded)")
    assert over.summary == message
    assert {g.reason: g.nodes for g in over.groups}[message] == ("node-b",)  # the only fit
    assert any(h.startswith("DeviceQuotaExceeded: ") for h in over.hints)
    assert over.to_json()["verdict"] == "over-quota"
    bad = {"metadata": {"name": "broken", "namespace": "default"},
           "spec": {"limits": [{"deviceClassName": GPU, "devices": -1}]}}
    loose = explain(one, claims, quotas=[bad])
    assert loose.verdict == "fits"
    assert any("DeviceQuota 'default/broken' is invalid" in n for n in loose.notes)


def test_a_template_missing_from_the_namespace_is_named_missing() -> None:
    """Issue 41: ``why`` said "not created yet (the claim controller creates it)" for a
    template that does not exist: waiting would not help."""
    entry = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    elsewhere = {"metadata": {"name": "t", "namespace": "other"}}
    found = explain(pod(entry), [], templates=[elsewhere])
    assert found.verdict == "waiting"
    assert found.claims[0].problem.startswith(
        "template 't' does not exist in namespace default: create it there")
    assert found.summary.startswith("waiting for its claims: gpu (template 't' does not exist")
    here = {"metadata": {"name": "t", "namespace": "default"}}
    assert "not created yet from template 't'" in explain(pod(entry), [],
                                                          templates=[here]).claims[0].problem


def test_a_gang_member_is_said_to_be_placed_only_with_its_gang() -> None:
    member = pod([{"name": "gpu", "resourceClaimName": "c"}])
    member["metadata"]["labels"] = {POD_GROUP_LABEL: "train-a"}
    member["status"]["conditions"][0]["message"] = (
        "gang 'train-a' needs 4 pods (4 pending) placed together: at most 3 of them fit at "
        "once; nothing is allocated until all fit")
    found = explain(member, [pending_claim("c")])
    assert found.verdict == "fits"  # this pod alone would fit ...
    (hint,) = [h for h in found.hints if "gang 'train-a'" in h]
    assert "only together with the rest of its gang" in hint  # ... but not alone
    shown = render_why(found)
    assert "at most 3 of them fit at once" in shown and "docs/gangs.md" in shown
    alone = explain(pod([{"name": "gpu", "resourceClaimName": "c"}]), [pending_claim("c")])
    assert not any("gang" in h for h in alone.hints)

"""The operator's entry points (kdra.operator.handlers.routes): one route per watched kind, each
event fanned out to the services that keep state about it, whichever machinery (kdra's
informers or kopf's event handlers) delivers it."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from prometheus_client import REGISTRY

from kdra.dra.allocator.pools import DeviceId
from kdra.dra.errors import InvalidObject
from kdra.kube.core.flavours import KDRA, NATIVE, Flavour
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.kube.informer import Informer
from kdra.kube.resources import LEASES
from kdra.operator.caches import claim_store
from kdra.operator.composition import Operator
from kdra.operator.handlers import run_operator
from kdra.operator.handlers.routes import (
    _kopf_handler,
    register_kopf_watches,
    route_claim,
    route_pod,
    route_slice,
    watches,
)
from kdra.operator.settings import OperatorSettings


class Recorder:
    """A service that records the events it is handed."""

    def __init__(self, calls: list[tuple[str, str, str | None]], name: str) -> None:
        self.calls, self.name = calls, name

    def __getattr__(self, method: str) -> Any:
        return lambda event, obj: self.calls.append((self.name, method, event))


def fake_operator(flavour: Flavour = KDRA) -> tuple[Any, list[tuple[str, str, str | None]]]:
    calls: list[tuple[str, str, str | None]] = []
    services = ("claim_controller", "binder", "slice_gc", "taint_eviction", "notices")
    return SimpleNamespace(flavour=flavour,
                           **{s: Recorder(calls, s) for s in services}), calls


def pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}}}


@pytest.mark.parametrize("flavour", [KDRA, NATIVE], ids=lambda f: f.name)
def test_every_kind_has_exactly_one_route(flavour: Flavour) -> None:
    table = watches(flavour)
    plurals = [w.resource.plural for w in table]
    assert sorted(plurals) == sorted(set(plurals))
    assert {"pods", "resourceclaims", "resourceslices", "nodes", "leases", "deviceclasses",
            "resourceclaimtemplates", "devicetaintrules", "devicequotas",
            "podgroups"} == set(plurals)
    # PodGroups only where the API server serves them (found at start-up).
    assert "podgroups" not in {w.resource.plural for w in watches(flavour, pod_groups=False)}
    # The four DRA kinds where the flavour has them; kdra's own kinds stay in its group.
    groups = {w.resource.plural: w.resource.group for w in table}
    assert {groups[p] for p in ("resourceclaims", "resourceslices", "deviceclasses",
                                "resourceclaimtemplates")} == {flavour.group}
    assert groups["devicequotas"] == groups["devicetaintrules"] == "resource.kdra.dev"
    assert groups["podgroups"] == "scheduling.x-k8s.io"


def test_a_pod_without_claims_reaches_the_binder_only() -> None:
    """(and the notices, which warn about claims kdra would not see: issue 41)"""
    op, calls = fake_operator()
    route_pod(op, "ADDED", pod())
    assert calls == [("binder", "on_pod", "ADDED"), ("notices", "on_pod", "ADDED")]
    calls.clear()
    route_pod(op, None, pod({CLAIMS_ANNOTATION: "[]"}))
    assert calls == [("claim_controller", "on_pod", None), ("binder", "on_pod", None),
                     ("notices", "on_pod", None)]


def test_a_native_pod_reaches_the_claim_controller_by_its_spec() -> None:
    op, calls = fake_operator(NATIVE)
    route_pod(op, "ADDED", pod({CLAIMS_ANNOTATION: "[]"}))  # the annotation means nothing
    assert calls == [("binder", "on_pod", "ADDED"), ("notices", "on_pod", "ADDED")]
    calls.clear()
    native = {**pod(), "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "c"}]}}
    route_pod(op, "ADDED", native)
    assert calls == [("claim_controller", "on_pod", "ADDED"), ("binder", "on_pod", "ADDED"),
                     ("notices", "on_pod", "ADDED")]


@pytest.mark.parametrize("order", [("claim_controller", "binder", "taint_eviction"),
                                   ("taint_eviction", "binder", "claim_controller")])
def test_a_claim_reaches_every_subscriber_with_the_cache_already_updated(
        order: tuple[str, ...]) -> None:
    """The claim route feeds the typed claim cache only; each subscriber, in whatever order
    it subscribed, finds the event applied and is handed the version held before."""
    op, calls = fake_operator()
    op.claims = claim_store()
    seen: list[tuple[str, str | None, str, str | None]] = []

    def subscriber(name: str) -> Any:
        def on_claim(event: str | None, obj: dict[str, Any], old: Any) -> None:
            held = op.claims.get(("ns", "c"))
            seen.append((name, event, held["metadata"]["resourceVersion"] if held else "gone",
                         old["metadata"]["resourceVersion"] if old else None))
        return on_claim

    for name in order:
        op.claims.subscribe(subscriber(name))
    route_claim(op, "ADDED", claim("1"))
    route_claim(op, "MODIFIED", claim("2"))
    route_claim(op, "DELETED", claim("3"))
    assert seen == [(n, e, v, o) for e, v, o in (("ADDED", "1", None), ("MODIFIED", "2", "1"),
                                                  ("DELETED", "gone", "2")) for n in order]
    assert calls == []  # nothing else is called by the route: the subscribers are


def claim(version: str) -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": version},
            "spec": {"devices": {"requests": []}}}


def test_kopf_event_handlers_deliver_what_the_informers_would(
        caplog: pytest.LogCaptureFixture) -> None:
    """kopf's events go through the kind's feed (the informers' bookkeeping, which the
    periodic LIST reconciles); another namespace's object is ignored; an object without
    readable metadata is skipped and counted, as kdra's informers skip what they cannot
    decode."""
    seen: list[tuple[str | None, dict[str, Any]]] = []
    feed = Informer(SimpleNamespace(), LEASES,  # type: ignore[arg-type]
                    lambda event, obj: seen.append((event, obj)))
    handler = _kopf_handler(LEASES, "kdra-system")
    other = {"metadata": {"name": "l", "namespace": "elsewhere"}}
    ours = {"metadata": {"name": "l", "namespace": "kdra-system", "managedFields": [{}]}}
    memo = SimpleNamespace(feeds={LEASES.plural: feed})
    before = decode_errors("Lease")
    asyncio.run(handler(event={"type": "MODIFIED", "object": other}, memo=memo))
    asyncio.run(handler(event={"type": None, "object": ours}, memo=memo))
    with caplog.at_level(logging.WARNING):
        asyncio.run(handler(event={"type": "MODIFIED", "object": {"metadata": []}}, memo=memo))
        asyncio.run(handler(event={"type": "ADDED", "object": "not an object"}, memo=memo))
    assert seen == [(None, {"metadata": {"name": "l", "namespace": "kdra-system"}})]
    assert set(feed.known) == {("kdra-system", "l")}
    assert decode_errors("Lease") == before + 2
    assert "leases: skipped a MODIFIED event whose object has no readable metadata" \
        in caplog.text


def decode_errors(kind: str) -> float:
    value = REGISTRY.get_sample_value("kdra_watch_decode_errors_total", {"kind": kind})
    return value or 0.0


@pytest.mark.parametrize("flavour", [KDRA, NATIVE], ids=lambda f: f.name)
def test_watch_kopf_registers_an_event_handler_per_kind(flavour: Flavour) -> None:
    registry = kopf.OperatorRegistry()
    register_kopf_watches(registry, "kdra-system", flavour)
    handlers = registry._watching.get_all_handlers()
    assert {h.id for h in handlers} == {f"route-{w.resource.plural}" for w in watches(flavour)}
    groups = {h.selector.group for h in handlers if h.id == "route-resourceclaims"}
    assert groups == {flavour.group}


def test_an_unknown_watch_mode_stops_the_operator_with_a_clear_error(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        assert run_operator(OperatorSettings(watch="kube-informers", metrics_port=0)) == 2
    assert "watch 'kube-informers' (--watch, KDRA_WATCH) is not one of informers, kopf" \
        in caplog.text


def test_the_composition_subscribes_every_service_to_the_typed_caches() -> None:
    """The real composition: a claim event reaches the claim controller (its queue), the
    binder (its snapshot) and taint eviction through the claim cache, which parses the
    version once for all of them; a slice event reaches the binder, the slice GC and taint
    eviction through the slice cache."""
    op = Operator(OperatorSettings(), SimpleNamespace(), KDRA)  # type: ignore[arg-type]
    gpu = "gpu.kdra.dev"
    route_slice(op, "ADDED", {
        "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
        "metadata": {"name": "n-gpu", "uid": "s", "resourceVersion": "1"},
        "spec": {"driver": gpu, "nodeName": "n", "pool": {
            "name": "n", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}]}})
    assert [s.metadata.name for s in op.binder.snapshot.slices()] == ["n-gpu"]
    assert op.slice_gc.slices.get(("", "n-gpu")) is not None
    assert list(op.taint_eviction._slices) == ["n-gpu"]
    allocated = allocated_claim("4")
    route_claim(op, "ADDED", allocated)
    assert len(op.claim_controller.claim_queue) == 1
    assert op.binder.snapshot.in_use(DeviceId(gpu, "n", "gpu-0"))
    op.taint_eviction.claims.model(allocated)  # what a pass reads: the binder's parse
    assert op.claims.parses == 1


def test_an_invalid_claim_is_parsed_and_reported_once_for_every_service(
        caplog: pytest.LogCaptureFixture) -> None:
    """A version that does not parse: the binder and taint eviction both leave it out, the
    cache parses it once and logs it once, however many times the version is delivered (a
    re-list); a later, valid version counts."""
    op = Operator(OperatorSettings(), SimpleNamespace(), KDRA)  # type: ignore[arg-type]
    gpu0 = DeviceId("gpu.kdra.dev", "n", "gpu-0")
    bad = allocated_claim("6")
    bad["spec"]["devices"]["requests"] = [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.kdra.dev", "count": "many"}}]
    with caplog.at_level(logging.WARNING):
        route_claim(op, "ADDED", bad)
        route_claim(op, None, bad)  # the same version again, from a re-list
        with pytest.raises(InvalidObject):
            op.taint_eviction.claims.model(bad)
    assert op.claims.parses == 1
    assert [r.getMessage() for r in caplog.records].count(
        "ResourceClaim ns/c: left out (" + str(op.claims.entry(bad).error) + ")") == 1
    assert not op.binder.snapshot.in_use(gpu0)
    route_claim(op, "MODIFIED", allocated_claim("7"))
    assert op.binder.snapshot.in_use(gpu0)


def allocated_claim(version: str) -> dict[str, Any]:
    obj = claim(version)
    obj["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.kdra.dev", "pool": "n", "device": "gpu-0"}]}}}
    return obj

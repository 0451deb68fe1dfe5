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

from kdra.kube.core.flavours import KDRA, NATIVE, Flavour
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.kube.informer import Informer
from kdra.kube.resources import LEASES
from kdra.operator.handlers import run_operator
from kdra.operator.handlers.routes import (
    _kopf_handler,
    register_kopf_watches,
    route_claim,
    route_pod,
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


def test_a_claim_reaches_the_claim_controller_before_the_binder() -> None:
    op, calls = fake_operator()
    route_claim(op, "MODIFIED", {"metadata": {"name": "c", "namespace": "ns"}})
    assert [c[0] for c in calls] == ["claim_controller", "binder", "taint_eviction"]


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

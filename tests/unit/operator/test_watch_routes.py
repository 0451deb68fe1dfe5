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

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.operator.handlers import run_operator
from kdra.operator.handlers.routes import (
    WATCHES,
    _kopf_handler,
    register_kopf_watches,
    route_claim,
    route_pod,
)
from kdra.operator.settings import OperatorSettings


class Recorder:
    """A service that records the events it is handed."""

    def __init__(self, calls: list[tuple[str, str, str | None]], name: str) -> None:
        self.calls, self.name = calls, name

    def __getattr__(self, method: str) -> Any:
        return lambda event, obj: self.calls.append((self.name, method, event))


def fake_operator() -> tuple[Any, list[tuple[str, str, str | None]]]:
    calls: list[tuple[str, str, str | None]] = []
    services = ("claim_controller", "binder", "slice_gc", "taint_eviction", "notices")
    return SimpleNamespace(**{s: Recorder(calls, s) for s in services}), calls


def pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}}}


def test_every_kind_has_exactly_one_route() -> None:
    plurals = [w.resource.plural for w in WATCHES]
    assert sorted(plurals) == sorted(set(plurals))
    assert {"pods", "resourceclaims", "resourceslices", "nodes", "leases", "deviceclasses",
            "resourceclaimtemplates", "devicetaintrules", "devicequotas"} == set(plurals)


def test_a_pod_without_claims_reaches_the_binder_only() -> None:
    """(and the notices, which warn about claims kdra would not see: issue 41)"""
    op, calls = fake_operator()
    route_pod(op, "ADDED", pod())
    assert calls == [("binder", "on_pod", "ADDED"), ("notices", "on_pod", "ADDED")]
    calls.clear()
    route_pod(op, None, pod({CLAIMS_ANNOTATION: "[]"}))
    assert calls == [("claim_controller", "on_pod", None), ("binder", "on_pod", None),
                     ("notices", "on_pod", None)]


def test_a_claim_reaches_the_claim_controller_before_the_binder() -> None:
    op, calls = fake_operator()
    route_claim(op, "MODIFIED", {"metadata": {"name": "c", "namespace": "ns"}})
    assert [c[0] for c in calls] == ["claim_controller", "binder", "taint_eviction"]


def test_kopf_event_handlers_deliver_what_the_informers_would() -> None:
    op, _ = fake_operator()
    seen: list[tuple[bool, str | None, dict[str, Any]]] = []
    handler = _kopf_handler(lambda o, event, obj: seen.append((o is op, event, obj)),
                            "kdra-system")
    other = {"metadata": {"name": "l", "namespace": "elsewhere"}}
    ours = {"metadata": {"name": "l", "namespace": "kdra-system", "managedFields": [{}]}}
    memo = SimpleNamespace(operator=op)
    asyncio.run(handler(event={"type": "MODIFIED", "object": other}, memo=memo))
    asyncio.run(handler(event={"type": None, "object": ours}, memo=memo))
    assert seen == [(True, None, {"metadata": {"name": "l", "namespace": "kdra-system"}})]


def test_watch_kopf_registers_an_event_handler_per_kind() -> None:
    registry = kopf.OperatorRegistry()
    register_kopf_watches(registry, "kdra-system")
    ids = {h.id for h in registry._watching.get_all_handlers()}
    assert ids == {f"route-{w.resource.plural}" for w in WATCHES}


def test_an_unknown_watch_mode_stops_the_operator_with_a_clear_error(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        assert run_operator(OperatorSettings(watch="kube-informers", metrics_port=0)) == 2
    assert "watch 'kube-informers' (--watch, KDRA_WATCH) is not one of informers, kopf" \
        in caplog.text

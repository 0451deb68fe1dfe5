"""The typed cache (kdra.kube.typed_cache): each object parsed once per resourceVersion,
a failure cached and reported once, an event applied once before every subscriber hears of
it, raw JSON kept beside the model, both API flavours parsing into the same v1 models."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kdra.dra.errors import InvalidObject
from kdra.dra.models import ResourceClaim, parse_claim
from kdra.kube.typed_cache import TypedCache
from kdra.operator.caches import claim_store, slice_store


def claim(version: str, *, uid: str = "u", count: Any = 1,
          api_version: str = "resource.kdra.dev/v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": uid,
                         "resourceVersion": version},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.kdra.dev", "count": count}}]}}}


def counting() -> tuple[TypedCache[ResourceClaim], list[str]]:
    parsed: list[str] = []

    def parse(obj: dict[str, Any]) -> ResourceClaim:
        parsed.append(obj["metadata"]["resourceVersion"])
        return parse_claim(obj)

    return TypedCache("ResourceClaim", parse), parsed


def test_a_version_is_parsed_once_whoever_asks() -> None:
    cache, parsed = counting()
    cache.apply("ADDED", claim("1"))
    first = cache.entry(claim("1"))  # an equal copy: keyed by UID and version, not identity
    assert cache.entry(cache.get(("ns", "c")) or {}) is first
    assert cache.model(claim("1")) is first.model
    assert parsed == ["1"]
    cache.apply("MODIFIED", claim("2"))
    assert cache.model(claim("2")).metadata.resource_version == "2"
    assert parsed == ["1", "2"]
    assert cache.parses == 2


def test_the_entry_holds_the_raw_object_as_read() -> None:
    cache, _ = counting()
    raw = claim("5")
    raw["metadata"]["managedFields"] = [{"manager": "x"}]  # what a status PUT carries back
    entry = cache.entry(raw)
    assert entry.raw is raw and entry.model is not None and entry.error is None


def test_an_invalid_version_is_parsed_and_reported_once(
        caplog: pytest.LogCaptureFixture) -> None:
    cache, parsed = counting()
    bad = claim("7", count="many")
    with caplog.at_level(logging.WARNING, logger="kdra.kube.typed_cache"):
        cache.apply("ADDED", bad)  # applying never raises
        for _ in range(3):
            entry = cache.entry(bad)
            assert entry.model is None and isinstance(entry.error, InvalidObject)
            with pytest.raises(InvalidObject) as raised:
                cache.model(bad)
            assert raised.value is entry.error
    assert parsed == ["7"]
    reports = [r for r in caplog.records if "ResourceClaim ns/c: left out" in r.getMessage()]
    assert len(reports) == 1
    assert "count" in reports[0].getMessage()  # names the field
    # A fixed version parses again (the failure was cached for its version only).
    assert cache.model(claim("8")).metadata.resource_version == "8"


def test_subscribers_hear_each_event_once_after_it_was_applied() -> None:
    cache, _ = counting()
    heard: list[tuple[str, str | None, bool, str | None]] = []

    def subscriber(name: str) -> Any:
        def on_event(event: str | None, obj: dict[str, Any], old: Any) -> None:
            heard.append((name, event, cache.get(("ns", "c")) is obj,
                          old["metadata"]["resourceVersion"] if old else None))
        return on_event

    cache.subscribe(subscriber("a"))
    cache.subscribe(subscriber("b"))
    cache.apply(None, claim("1"))
    cache.apply("MODIFIED", claim("2"))
    assert heard == [("a", None, True, None), ("b", None, True, None),
                     ("a", "MODIFIED", True, "1"), ("b", "MODIFIED", True, "1")]


def test_a_failing_subscriber_does_not_starve_the_others(
        caplog: pytest.LogCaptureFixture) -> None:
    cache, _ = counting()
    heard: list[str | None] = []

    def broken(event: str | None, obj: dict[str, Any], old: Any) -> None:
        raise RuntimeError("a bug")

    cache.subscribe(broken)
    cache.subscribe(lambda event, obj, old: heard.append(event))
    with caplog.at_level(logging.ERROR):
        assert cache.apply("ADDED", claim("1")) is None
    assert heard == ["ADDED"] and cache.get(("ns", "c")) is not None
    assert "a subscriber failed on a ADDED event" in caplog.text


def test_a_deleted_object_forgets_its_parse() -> None:
    cache, parsed = counting()
    cache.apply("ADDED", claim("1"))
    cache.model(claim("1"))
    cache.apply("DELETED", claim("2"))
    assert cache.get(("ns", "c")) is None
    cache.entry(claim("1"))  # nothing memoised for the UID any more
    assert parsed == ["1", "1"]


def test_both_flavours_parse_into_the_same_models() -> None:
    claims = claim_store()
    kdra_claim = claims.model(claim("1", uid="a"))
    native = claims.model(claim("1", uid="b", api_version="resource.k8s.io/v1"))
    assert type(kdra_claim) is type(native) is ResourceClaim
    assert kdra_claim.spec == native.spec
    slices = slice_store()
    for api_version in ("resource.kdra.dev/v1", "resource.k8s.io/v1"):
        parsed = slices.model({
            "apiVersion": api_version, "kind": "ResourceSlice",
            "metadata": {"name": "s", "uid": api_version, "resourceVersion": "1"},
            "spec": {"driver": "gpu.kdra.dev", "nodeName": "n",
                     "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0"}]}})
        assert [d.name for d in parsed.spec.devices] == ["gpu-0"]


def test_a_claim_with_only_bad_status_devices_keeps_its_allocation() -> None:
    claims = claim_store()
    obj = claim("3")
    obj["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.kdra.dev", "pool": "n", "device": "gpu-0"}]}},
        "devices": [{"driver": 7}]}
    parsed = claims.model(obj)
    assert parsed.status.allocation is not None
    assert not parsed.status.devices


class Service:
    """A subscriber that is a bound method (as the operator's services subscribe)."""

    def __init__(self) -> None:
        self.heard: list[tuple[str | None, str | None]] = []

    def on_claim(self, event: str | None, obj: dict[str, Any], old: Any) -> None:
        self.heard.append((event, old["metadata"]["resourceVersion"] if old else None))


def test_a_write_response_reaches_the_other_subscribers_not_the_writer() -> None:
    cache, _ = counting()
    writer, other = Service(), Service()
    cache.subscribe(writer.on_claim)
    cache.subscribe(other.on_claim)
    cache.apply("ADDED", claim("1"))
    cache.record("MODIFIED", claim("2"), by=writer.on_claim)
    assert cache.get(("ns", "c")) == claim("2")
    cache.apply("MODIFIED", claim("2"))  # its watch event: the cache held it already
    cache.record("MODIFIED", claim("1"), by=writer.on_claim)  # stale: the cache keeps "2"
    assert cache.get(("ns", "c")) == claim("2")
    cache.record("DELETED", claim("2"), by=writer.on_claim)
    assert cache.get(("ns", "c")) is None and cache.was_deleted("u")
    cache.record("MODIFIED", claim("3"), by=writer.on_claim)  # a late write: not resurrected
    assert cache.get(("ns", "c")) is None
    assert writer.heard == [("ADDED", None), ("MODIFIED", "2")]
    assert other.heard == [("ADDED", None), ("MODIFIED", "1"), ("MODIFIED", "2"),
                           ("MODIFIED", "2"), ("DELETED", "2"), ("MODIFIED", None)]

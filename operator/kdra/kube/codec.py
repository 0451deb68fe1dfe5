"""JSON to and from the API server: request bodies out; answers, list pages and watch events
in, with the objects that cannot be decoded skipped rather than fatal.

Invariants:
- Never raises a decoder's or an encoder's exception: what cannot be encoded or decoded is an
  :class:`~kdra.kube.errors.Undecodable` (an ``ApiError``), or a :class:`Skipped` object.
- One object never stops a list or a watch: an item of a list page or the object of a watch
  event that cannot be decoded becomes a :class:`Skipped` (handed to ``on_skip``, which counts
  and logs it); a watch event's resourceVersion is read even then, so the watch moves past it.
- Except where the undecodable parts are free-form values of :data:`PRUNABLE` (a claim's
  ``status.devices[].data``, which a node agent writes after every webhook, and the
  ``metadata.managedFields`` that trace it): then the object
  is delivered with that value replaced by ``{"kdra.dev/undecodable": reason}``
  (:func:`kdra.kube.core.jsonscan.decode_pruned`) — its allocation and reservations still count,
  so the claim is released and its devices are never handed out twice — and ``on_skip``
  still hears of it (a :class:`Skipped` whose ``pruned`` names the paths). A single object
  read (:func:`decode_answer`) is pruned the same way.
- Every object decoded here comes back without ``metadata.managedFields``
  (:func:`strip_managed_fields`; why: :mod:`kdra.kube.client`).
- The hot path (one call of :func:`decode_event` per watch event) decodes the event once
  with orjson; the slower scanning of :mod:`kdra.kube.core.jsonscan` runs only for an event that
  orjson rejects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from kdra.kube.core.jsonscan import (
    ScanError,
    decode_list,
    decode_pruned,
    member_spans,
    path_value,
)
from kdra.kube.errors import Undecodable, short_reason
from kdra.kube.resources import Resource

JSON = dict[str, Any]
Items = list[JSON]

PRUNABLE = (("status", "devices", "*", "data"), ("metadata", "managedFields"))
"""Free-form fields an undecodable value of which is read as a marker rather than making the
whole object undecodable: a claim's device data, written by node agents (RBAC and the
admission policies let them, and a CRD schema cannot bound a free-form field's depth), and
the managedFields that trace it field by field (kdra strips them from what it reads)."""


@dataclass(frozen=True)
class Skipped:
    """An object of a watch event or a list that could not be decoded, as far as it is
    known (what :mod:`kdra.kube.core.jsonscan` found of its metadata)."""

    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    reason: str
    pruned: tuple[str, ...] = ()
    """Set when the object was delivered all the same, these paths replaced by a marker."""

    def stub(self) -> JSON:
        """The object reduced to what is known of its metadata (for a deletion)."""
        meta = {"name": self.name, "uid": self.uid, "resourceVersion": self.resource_version}
        if self.namespace:
            meta["namespace"] = self.namespace
        return {"metadata": meta}

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where or '<unknown>'} (resourceVersion {self.resource_version})"


Skips = list[Skipped]


def _pruned(raw: bytes, kind: str, reason: str,
            on_skip: Callable[[Skipped], None]) -> JSON | None:
    """The object in ``raw`` with its undecodable :data:`PRUNABLE` values replaced (reported
    to ``on_skip``); None when that does not make it decodable."""
    try:
        obj, paths = decode_pruned(raw, PRUNABLE, reason)
    except ScanError:
        return None
    if not paths or not isinstance(obj, dict):
        return None
    found = obj.get("metadata")
    meta: JSON = found if isinstance(found, dict) else {}

    def text(name: str) -> str:
        value = meta.get(name)
        return value if isinstance(value, str) else ""

    on_skip(Skipped(kind, text("namespace"), text("name"), text("uid"),
                    text("resourceVersion"), reason, tuple(paths)))
    strip_managed_fields(obj)
    return obj


def _skim(raw: bytes, kind: str, reason: str) -> Skipped:
    """What can be read of an object that cannot be decoded whole."""
    def text(*path: str) -> str:
        value = path_value(raw, ("metadata", *path))
        return value if isinstance(value, str) else ""

    return Skipped(kind, text("namespace"), text("name"), text("uid"),
                   text("resourceVersion"), reason)


def encode(body: Any, what: str) -> bytes:
    """``body`` as JSON: orjson (non-string keys as json.dumps writes them), or, for a body
    nested deeper than orjson's 254 levels (an old object's free-form field), the standard
    library's encoder; one too deep for both raises :class:`Undecodable` (an ApiError: the
    caller treats it as a failed request, not a crash)."""
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError: "Recursion limit reached"
        try:
            return json.dumps(body, separators=(",", ":")).encode()
        except (RecursionError, TypeError, ValueError) as exc:
            raise Undecodable(0, "Unencodable", f"{what}: the body cannot be encoded: "
                              f"{short_reason(exc)}") from None


def decode_answer(raw: bytes, status: int, what: str) -> JSON:
    """A 2xx answer's JSON object, managedFields stripped (from each item of a list); an
    object whose only undecodable parts are :data:`PRUNABLE` comes back with them replaced."""
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        reason = short_reason(exc)
        pruned = _pruned(raw, "object", reason, lambda _: None)
        if pruned is None:
            raise Undecodable(status, "Undecodable", f"{what}: the answer cannot be decoded: "
                              f"{reason}") from None
        data = pruned
    if not isinstance(data, dict):
        raise Undecodable(status, "Undecodable", f"{what}: the answer is not a JSON object")
    items = data.get("items")
    for obj in items if isinstance(items, list) else (data,):
        strip_managed_fields(obj)
    return data


def strip_managed_fields(obj: Any) -> None:
    """Drop ``metadata.managedFields`` from an object the server returned (see the
    invariants of :mod:`kdra.kube.client`)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


def decode_page(raw: bytes, status: int, path: str, res: Resource,
                on_skip: Callable[[Skipped], None]) -> tuple[JSON, Skips]:
    """One page of a LIST, as ``{"metadata": ..., "items": [...]}``, and its skipped objects.
    A page that does not decode whole (one object in it nests too deep) is decoded item by
    item; an item undecodable only in :data:`PRUNABLE` values is kept with them replaced, the
    items that still fail are skipped."""
    try:
        meta, decoded, bad = decode_list(raw)
    except ScanError as exc:
        raise Undecodable(status, "Undecodable", f"GET {path}: the list cannot be "
                          f"decoded: {short_reason(exc)}") from None
    items: Items = []
    for item in decoded:
        if isinstance(item, dict):
            strip_managed_fields(item)
            items.append(item)
    skipped: Skips = []
    for undecoded in bad:
        pruned = _pruned(undecoded.raw, res.kind, undecoded.reason, on_skip)
        if pruned is not None:
            items.append(pruned)
            continue
        skip = Skipped(res.kind, undecoded.namespace, undecoded.name, undecoded.uid,
                       undecoded.resource_version, undecoded.reason)
        on_skip(skip)
        skipped.append(skip)
    return {"metadata": meta, "items": items}, skipped


def decode_event(line: bytes, res: Resource,
                 on_skip: Callable[[Skipped], None]) -> tuple[str, JSON]:
    """Decode one watch event. An event whose object cannot be decoded (nested deeper
    than orjson's 1,024 levels, say) is skipped — logged once, counted — but still moves
    the watch's resourceVersion past it, so a resumed watch does not replay it; a
    deletion is delivered with what is known of the object's metadata. An object
    undecodable only in :data:`PRUNABLE` values is delivered with them replaced."""
    try:
        event = orjson.loads(line)
        if not isinstance(event, dict):
            raise orjson.JSONDecodeError("a watch event must be an object", "", 0)
        obj = event.get("object")
        return str(event.get("type", "")), obj if isinstance(obj, dict) else {}
    except orjson.JSONDecodeError as exc:
        failure = short_reason(exc)
    try:
        members = member_spans(line)
    except ScanError:
        members = {}
    kind = path_value(line, ("type",)) if "type" in members else None
    span = members.get("object")
    if span is not None and isinstance(kind, str):
        pruned = _pruned(line[span[0]:span[1]], res.kind, failure, on_skip)
        if pruned is not None:
            return kind, pruned
    skip = _skim(line[span[0]:span[1]] if span else b"", res.kind, failure)
    if not isinstance(kind, str) or not skip.resource_version:
        # Not even the version can be read: the stream itself is broken; reconnect.
        raise Undecodable(200, "Undecodable", f"watch of {res.plural}: an event cannot be "
                          f"decoded: {failure}")
    on_skip(skip)
    stub = skip.stub()
    if kind == "DELETED":
        return kind, stub
    return "SKIPPED", {"metadata": {"resourceVersion": skip.resource_version}}

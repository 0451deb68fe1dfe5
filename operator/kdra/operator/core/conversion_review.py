"""The ``/convert`` webhook's whole answer, from the request's bytes to the answer's bytes —
total for objects nested deeper than the JSON decoder allows.

The API server sends one ConversionReview for a whole list (every claim of a ``kubectl get``
in ``v1alpha3``), and fails the whole request if the answer fails. A node agent may store a
claim's ``status.devices[].data`` nested up to the API server's 10,000 levels (admission now
bounds new ones; older objects remain), which no decoder of ours reads, so one such claim made
every v1alpha3 read of claims fail (issue 36). That value is the same in both versions (free
JSON, moved by no conversion), so it need not be decoded at all: :func:`answer` stands in a
small marker object for it (:func:`kdra.kube.core.jsonscan.decode_replacing`), converts, and
splices the original bytes back where the marker went — lossless, whatever the depth.

Invariants:
- Total: every input gives an :class:`Answer`: 200 with a ConversionReview answer (Success,
  or Failure naming the object), or 400 for a body that is no ConversionReview at all.
- Lossless: a value stood in for comes back byte for byte where the conversion put it — as
  a JSON value, or, when the conversion moved it into the ``resource.kdra.dev/v1-fields``
  annotation, as escaped JSON text inside that string. A stand-in found nowhere, or found
  where it cannot be spliced, makes the answer a Failure (never an object missing data).
- Bounded: the fallback scans the body in time linear in its size (plus one decode per
  stood-in value); no recursion deeper than :data:`MAX_DEPTH` levels of a value.
"""

from __future__ import annotations

import secrets
from typing import Any, NamedTuple

import orjson

from kdra.dra.errors import InvalidObject
from kdra.dra.models import conversion
from kdra.kube.core.jsonscan import Deep, ScanError, decode_replacing

__all__ = ["DEEP_FIELDS", "MAX_DEPTH", "STAND_IN_KEY", "answer"]

STAND_IN_KEY = "kdra.dev/stand-in"
DEEP_FIELDS = (("request", "objects", "*", "status", "devices", "*", "data"),
               ("request", "objects", "*", "metadata", "managedFields"))
"""Where a review's objects may hold a value too deep to decode that conversion carries over
unchanged: claims' device data (drivers write it after admission), and the managedFields that
trace it field by field."""
MAX_DEPTH = 64
"""A value at :data:`DEEP_FIELDS` nested deeper than this is stood in for on the fallback
path (the encoders' own limits are 254 and about 1,000 levels)."""



class Answer(NamedTuple):
    """What to answer: the HTTP status, the body, and the failure a 200 reports (if any)."""

    status: int
    body: bytes
    failure: str | None = None


def _error(message: str) -> Answer:
    return Answer(400, orjson.dumps({"error": message}), message)


def _encoded(converted: dict[str, Any], body: bytes) -> Answer:
    result = converted["response"]["result"]
    return Answer(200, body, None if result["status"] == "Success" else
                  str(result.get("message", "")))


def answer(raw: bytes) -> Answer:
    """The HTTP status and body answering a ConversionReview's bytes."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _with_stand_ins(raw)
    try:
        converted = conversion.review(body)
    except InvalidObject as exc:
        return _error(str(exc))
    except RecursionError:
        return _with_stand_ins(raw)
    try:
        return _encoded(converted, orjson.dumps(converted))
    except TypeError:  # nested past orjson's 254 levels
        return _with_stand_ins(raw)


def _with_stand_ins(raw: bytes) -> Answer:
    nonce = secrets.token_hex(8)
    try:
        body, deep = decode_replacing(raw, DEEP_FIELDS, lambda i: {STAND_IN_KEY: f"{nonce}-{i}"},
                                      max_depth=MAX_DEPTH)
    except ScanError as exc:
        return _error(f"the body cannot be decoded: {exc}")
    try:
        converted = conversion.review(body)
    except InvalidObject as exc:
        return _error(str(exc))
    except RecursionError:
        return _error("the objects are nested too deeply")
    try:
        encoded = orjson.dumps(converted)
    except TypeError:
        return _error("the objects are nested too deeply")
    if converted["response"]["result"]["status"] != "Success":
        return _encoded(converted, encoded)
    spliced = _splice(encoded, deep, nonce)
    if spliced is None:
        failed = _failure(converted, "a value too deep to decode could not be carried over")
        return _encoded(failed, orjson.dumps(failed))
    return Answer(200, spliced)


def _failure(converted: dict[str, Any], message: str) -> dict[str, Any]:
    response = converted["response"]
    return {**converted, "response": {
        "uid": response["uid"], "convertedObjects": [],
        "result": {"status": "Failure", "message": f"kdra conversion: {message}"}}}


def _splice(encoded: bytes, deep: list[Deep], nonce: str) -> bytes | None:
    """``encoded`` with each stand-in replaced by its value's bytes (None when one is found
    nowhere)."""
    for index, value in enumerate(deep):
        plain = orjson.dumps({STAND_IN_KEY: f"{nonce}-{index}"})
        # Inside a JSON string (the v1-fields annotation), as json.dumps escapes it there.
        quoted = orjson.dumps(plain.decode())[1:-1]
        escaped = orjson.dumps(value.raw.decode("utf-8", "surrogatepass"))[1:-1]
        if plain not in encoded and quoted not in encoded:
            return None
        encoded = encoded.replace(quoted, escaped).replace(plain, value.raw)
    return encoded


"""Pieces every kdra API model shares: the model base, object metadata, node selectors,
selectors and opaque configuration, conditions, upstream's limits, and parsing / dumping.

Invariants:
- Models are immutable (``frozen``); lists are tuples. A parsed object never changes; a new
  resourceVersion is a new model.
- :func:`parse` raises :class:`~kdra.dra.errors.InvalidObject` naming the first offending
  field in ``kubectl explain`` notation (``spec.devices.requests[0].exactly.count``); it never
  lets another exception out for any JSON input.
- Unknown fields are ignored (forward compatibility), never an error.
- :func:`dump` gives back the API's camelCase JSON, omitting unset fields and empty lists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from kdra.dra.errors import InvalidObject

# Upstream limits (resource.k8s.io/v1 validation, Kubernetes 1.36).
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_SELECTORS = 32
MAX_CONSTRAINTS = 32
MAX_CONFIGS = 32
MAX_TOLERATIONS = 16
MAX_RESULTS = 32
MAX_ALLOCATION_CONFIGS = 64
MAX_RESERVED_FOR = 256
MAX_DEVICE_STATUSES = 32
MAX_CONDITIONS = 8
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_ADVANCED = 64
"""Devices per slice when any device has taints, consumes counters or list attributes."""
MAX_ATTRIBUTES_AND_CAPACITY = 32
MAX_ATTRIBUTE_VALUES = 48
MAX_ATTRIBUTE_STRING_LENGTH = 64
MAX_TAINTS = 16
MAX_COUNTER_SETS = 8
MAX_COUNTERS = 32
MAX_COUNTER_CONSUMPTIONS = 2
MAX_BINDING_CONDITIONS = 4
MAX_VALID_VALUES = 10
MAX_DEVICES_PER_CLAIM = 32

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

ExactCount: Literal["ExactCount"] = "ExactCount"
All: Literal["All"] = "All"


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        alias_generator=to_camel,
        populate_by_name=True,
    )


# --------------------------------------------------------------------------- metadata


class OwnerReference(_Model):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(_Model):
    name: str = ""
    generate_name: str | None = None
    namespace: str | None = None
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: tuple[OwnerReference, ...] = ()
    finalizers: tuple[str, ...] = ()
    deletion_timestamp: str | None = None

    def controller_ref(self) -> OwnerReference | None:
        """The owner reference with ``controller: true``, if any."""
        return next((ref for ref in self.owner_references if ref.controller), None)


# --------------------------------------------------------------------------- node selectors


class NodeSelectorRequirement(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()


class NodeSelectorTerm(_Model):
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class NodeSelector(_Model):
    node_selector_terms: tuple[NodeSelectorTerm, ...] = Field(min_length=1)


# --------------------------------------------------------------------------- shared pieces


class CELDeviceSelector(_Model):
    expression: str = Field(min_length=1)


class DeviceSelector(_Model):
    cel: CELDeviceSelector


class OpaqueDeviceConfiguration(_Model):
    driver: str = Field(min_length=1, max_length=63)
    parameters: dict[str, Any] = Field(default_factory=dict)


class DeviceConfiguration(_Model):
    """Configuration for a driver; exactly one kind, and today the only kind is ``opaque``."""

    opaque: OpaqueDeviceConfiguration


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    observed_generation: int | None = None
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


def qualified_name_problem(name: str, *, fully: bool) -> str | None:
    """Why ``name`` is not a (fully, when ``fully``) qualified attribute/capacity name:
    a C identifier of at most 32 characters, optionally (required when ``fully``) prefixed
    with a DNS subdomain of at most 63 characters and ``/``. None when it is fine."""
    domain, slash, ident = name.rpartition("/")
    if not slash:
        if fully:
            return (f"{name!r} must be fully qualified: <domain>/<name>, e.g. "
                    "gpu.kdra.dev/pcieRoot")
        domain, ident = "", name
    elif "/" in domain:
        return f"{name!r} must not contain more than one '/'"
    if slash and (not domain or len(domain) > 63 or not DNS_SUBDOMAIN.match(domain)):
        return f"the domain of {name!r} must be a DNS subdomain of at most 63 characters"
    if not C_IDENTIFIER.match(ident) or len(ident) > 32:
        return f"the name part of {name!r} must be a C identifier of at most 32 characters"
    return None


# --------------------------------------------------------------------------- parsing

M = TypeVar("M", bound=_Model)


def parse(model: type[M], obj: Mapping[str, Any]) -> M:
    """Validate ``obj`` (an API object as a dict) into ``model``.

    Raises InvalidObject naming the first offending field, e.g.
    ``ResourceClaim default/c: spec.devices.requests[0].count: count must be greater than zero``.
    """
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        raise InvalidObject(
            field_path(error["loc"]), _message(error), obj=_describe(model, meta)
        ) from exc


def dump(model: BaseModel) -> dict[str, Any]:
    """The API's JSON form (camelCase keys; unset optional fields and empty lists omitted,
    as upstream's ``omitempty`` writes them: ``config: []`` or ``matchExpressions: []`` would
    only add bytes to every copy of the object and to its managedFields)."""
    dumped: dict[str, Any] = _without_empty_lists(
        model.model_dump(mode="json", by_alias=True, exclude_none=True))
    return dumped


def _without_empty_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_empty_lists(v) for k, v in value.items() if v != []}
    if isinstance(value, list):
        return [_without_empty_lists(v) for v in value]
    return value


def field_path(loc: tuple[int | str, ...]) -> str:
    """``("spec", "devices", "requests", 0, "count")`` → ``spec.devices.requests[0].count``."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith("function-after") or part in {"tagged-union"}:
            continue
        else:
            path += f".{part}" if path else part
    return path or "<root>"


def _message(error: Any) -> str:
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _describe(model: type[_Model], meta: Any) -> str:
    if not isinstance(meta, Mapping):
        return model.__name__
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    namespace = meta.get("namespace")
    return f"{model.__name__} {namespace}/{name}" if namespace else f"{model.__name__} {name}"

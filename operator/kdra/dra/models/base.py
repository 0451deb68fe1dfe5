"""Pieces every kdra API model shares: the model base, object metadata, node selectors,
selectors and opaque configuration, conditions, upstream's limits, and parsing / dumping.
Like every model, they are the source of the CRD schemas where they appear (docstrings
describe, ``crd(...)`` adds what only the API server checks: :mod:`kdra.dra.models.crd`).

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
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from kdra.dra.errors import InvalidObject
from kdra.dra.models.crd import CONDITION_REASON, CONDITION_TYPE, crd, crd_object, item
from kdra.dra.models.crd import DNS_LABEL as DNS_LABEL_PATTERN
from kdra.dra.models.crd import DNS_SUBDOMAIN as DNS_SUBDOMAIN_PATTERN

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

DNS_LABEL = re.compile(DNS_LABEL_PATTERN)
DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)
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
    # The API server owns metadata's schema: a CRD may say only that it is an object.
    model_config = crd_object(properties=None, required=None)

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


class APIObject(_Model):
    # What every kind has: apiVersion, kind (each kind's model sets its own) and metadata.

    api_version: str = ""
    """Version of the schema this object uses (`resource.kdra.dev/v1`)."""
    kind: str = ""
    """Kind of the object."""
    metadata: ObjectMeta = Field(json_schema_extra=crd(required=False))


# --------------------------------------------------------------------------- node selectors

class NodeSelectorRequirement(_Model):
    """A requirement on one node label."""

    key: str = Field(json_schema_extra=crd(min_length=1, max_length=317))
    """The label key, for example `topology.kubernetes.io/zone`."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        json_schema_extra=crd(max_length=16))
    """How `key` relates to `values`: `In` / `NotIn` (the value is / is not one of `values`),
    `Exists` / `DoesNotExist` (`values` must be empty), `Gt` / `Lt` (one value, compared as an
    integer)."""
    values: tuple[Annotated[str, item("One value.", max_length=253)], ...] = Field(
        default=(), json_schema_extra=crd(max_items=64))
    """The values to compare against; see `operator`."""


class NodeSelectorTerm(_Model):
    """One term. All of its requirements must hold for a node to match the term. A term with
    no requirements matches no node."""

    model_config = crd_object(map_type="atomic")

    match_expressions: tuple[NodeSelectorRequirement, ...] = Field(
        default=(), json_schema_extra=crd(max_items=32))
    """Requirements on node labels."""
    match_fields: tuple[NodeSelectorRequirement, ...] = Field(default=(), json_schema_extra=crd(
        max_items=32, items={"description": "A requirement on one node field.", "properties": {
            "key": {"description": "The field path; only `metadata.name` is supported."}}}))
    """Requirements on node fields. Only `metadata.name` is supported, so `{key: metadata.name,
    operator: In, values: [worker-1]}` pins to one node."""


class NodeSelector(_Model):
    model_config = crd_object(map_type="atomic")

    node_selector_terms: tuple[NodeSelectorTerm, ...] = Field(
        min_length=1, json_schema_extra=crd(max_items=32, minItems=None))
    """The terms, ORed: a node matches when it matches at least one term."""


# --------------------------------------------------------------------------- shared pieces


class CELDeviceSelector(_Model):
    """Selects devices with a Common Expression Language (CEL) expression."""

    expression: str = Field(min_length=1, json_schema_extra=crd(max_length=10240))
    """A CEL expression that looks at one candidate device and returns true when the device is
    acceptable and false when it is not. Returning anything else, or failing (for example by
    reading an attribute the device does not have), is an error that stops the allocation
    instead of merely skipping the device. The expression sees a single variable, `device`,
    with three fields: `device.driver` (the driver name string), `device.attributes` and
    `device.capacity`. Attributes and capacities are grouped by their domain: an attribute
    published as `model` by driver `gpu.example.com` is read as
    `device.attributes["gpu.example.com"].model`, one published as `acme.io/family` as
    `device.attributes["acme.io"].family`. Looking up a domain the device does not have yields
    an empty map, but looking up a missing name inside a domain is an error, so guard optional
    attributes with `has()` or optional chaining
    (`device.attributes["acme.io"].?family.orValue("")`). Attribute values are int, bool,
    string or semantic versions (compare versions with `semver("1.2.3")`, `.isGreaterThan()`,
    `.major()` ...); capacities are quantities (`quantity("8Gi")`, `.compareTo()`). Example:
    `device.driver == "resource-driver.example.com" &&
    device.attributes["resource-driver.example.com"].color == "white"`. At most 10240
    characters. kdra's admission webhook compiles the expression when the object is written;
    the CRD schema alone only checks its length."""


class DeviceSelector(_Model):
    """One condition a device must satisfy. Exactly one kind of selector must be given; today
    the only kind is `cel`."""

    cel: CELDeviceSelector


class OpaqueDeviceConfiguration(_Model):
    """Configuration in a format only the named driver understands. kdra never interprets it;
    the allocator copies it into the claim's allocation so that the driver finds it when it
    prepares the devices."""

    driver: str = Field(min_length=1, max_length=63,
                        json_schema_extra=crd(pattern=DNS_SUBDOMAIN.pattern))
    """The driver this configuration is meant for, for example `gpu.kdra.dev`. Drivers ignore
    configuration addressed to other drivers, so one claim can carry settings for several
    drivers. A DNS subdomain of at most 63 characters, normally a domain owned by the driver's
    vendor."""
    parameters: dict[str, Any] = Field(default_factory=dict,
                                       json_schema_extra=crd(required=True))
    """The configuration itself: any JSON object, whose fields the driver defines (drivers
    usually expect `apiVersion` and `kind` so they can tell formats apart). Keep it under 10
    KiB (10240 bytes when serialized): upstream enforces that limit and kdra's admission
    webhook does too, but a CRD schema cannot measure the size of a free-form object, so the
    API server alone does not."""


class DeviceConfiguration(_Model):
    # Configuration for a driver; exactly one kind, and today the only kind is ``opaque``.

    opaque: OpaqueDeviceConfiguration


class Condition(_Model):
    """A condition in the standard Kubernetes shape (metav1.Condition)."""

    type: str = Field(json_schema_extra=crd(min_length=1, max_length=316,
                                            pattern=CONDITION_TYPE))
    """Kind of condition in CamelCase, for example `Ready`."""
    status: Literal["True", "False", "Unknown"] = Field(json_schema_extra=crd(max_length=8))
    """Whether the condition holds: `True`, `False` or `Unknown`."""
    observed_generation: int | None = Field(default=None, json_schema_extra=crd(minimum=0))
    """The claim's `metadata.generation` the writer looked at when it set the condition."""
    last_transition_time: str | None = Field(default=None, json_schema_extra=crd(
        required=True, fmt="date-time", max_length=64))
    """When `status` last changed (RFC 3339)."""
    reason: str = Field(default="", json_schema_extra=crd(
        required=True, min_length=1, max_length=1024, pattern=CONDITION_REASON))
    """Machine-readable CamelCase reason for the last transition."""
    message: str = Field(default="", json_schema_extra=crd(required=True, max_length=32768))
    """Human-readable details; may be empty."""


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


class StatusCondition(_Model):
    # A condition kdra's operator writes into the status of its own kinds (DeviceTaintRule,
    # DeviceQuota): the schema those statuses have; nothing parses them.

    type: str = Field(json_schema_extra=crd(max_length=316))
    status: Literal["True", "False", "Unknown"]
    reason: str | None = Field(default=None, json_schema_extra=crd(max_length=1024))
    message: str | None = Field(default=None, json_schema_extra=crd(max_length=32768))
    last_transition_time: str | None = Field(default=None, json_schema_extra=crd(
        fmt="date-time"))
    observed_generation: int | None = Field(default=None, json_schema_extra=crd(
        minimum=0, format=None))


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

"""Typed models of kdra's API (group ``resource.kdra.dev``, version ``v1alpha3``).

The shapes mirror upstream ``resource.k8s.io/v1alpha3`` field for field, without the classic
DRA fields, plus ``status.devices[]`` on claims (KEP-4817). Every component reads API objects
through these models: parse once at the edge (``parse_claim(obj)`` ...), then work with typed,
frozen values.

Invariants:
- Models are immutable (``frozen``); lists are tuples. A parsed object never changes; a new
  resourceVersion is a new model.
- Parsing validates what the allocator relies on (value types, one-of rules, unique names,
  upstream's limits) and raises :class:`~kdra.domain.errors.InvalidObject` naming the field in
  ``kubectl explain`` notation (``spec.devices.requests[0].count``). The CRD schemas enforce the
  same rules at admission; this is the second line for objects that bypassed them.
- Unknown fields are ignored (forward compatibility), never an error.
- ``dump(model)`` gives back the API's camelCase JSON, omitting unset fields and empty lists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kdra.domain.errors import InvalidObject

# Upstream limits (resource.k8s.io/v1alpha3 validation, 1.31 baseline).
MAX_REQUESTS = 32
MAX_SELECTORS = 32
MAX_CONSTRAINTS = 32
MAX_CONFIGS = 32
MAX_RESULTS = 32
MAX_ALLOCATION_CONFIGS = 64
MAX_RESERVED_FOR = 32
MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_AND_CAPACITY = 32
MAX_ATTRIBUTE_STRING_LENGTH = 64
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


class DeviceClassConfiguration(_Model):
    opaque: OpaqueDeviceConfiguration


# --------------------------------------------------------------------------- DeviceClass


class DeviceClassSpec(_Model):
    selectors: tuple[DeviceSelector, ...] = Field(default=(), max_length=MAX_SELECTORS)
    config: tuple[DeviceClassConfiguration, ...] = Field(default=(), max_length=MAX_CONFIGS)


class DeviceClass(_Model):
    api_version: str = ""
    kind: str = "DeviceClass"
    metadata: ObjectMeta
    spec: DeviceClassSpec = DeviceClassSpec()


# --------------------------------------------------------------------------- ResourceClaim spec


class DeviceRequest(_Model):
    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63)
    device_class_name: str = Field(pattern=DNS_SUBDOMAIN.pattern, max_length=253)
    selectors: tuple[DeviceSelector, ...] = Field(default=(), max_length=MAX_SELECTORS)
    allocation_mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int | None = None
    admin_access: bool = False

    @model_validator(mode="after")
    def _count_matches_mode(self) -> DeviceRequest:
        if self.allocation_mode == All and self.count not in (None, 0):
            raise ValueError("count must not be set when allocationMode is All")
        if self.allocation_mode == ExactCount and self.count is not None and self.count <= 0:
            raise ValueError("count must be greater than zero")
        return self

    @property
    def exact_count(self) -> int:
        """Devices needed in ExactCount mode (count defaults to 1)."""
        return self.count or 1


class DeviceConstraint(_Model):
    requests: tuple[str, ...] = ()
    match_attribute: str

    @model_validator(mode="after")
    def _fully_qualified(self) -> DeviceConstraint:
        domain, _, name = self.match_attribute.partition("/")
        if not name or not DNS_SUBDOMAIN.match(domain) or not C_IDENTIFIER.match(name):
            raise ValueError(
                f"matchAttribute {self.match_attribute!r} must be fully qualified: "
                "<domain>/<name>, e.g. gpu.kdra.dev/pcieRoot"
            )
        return self


class DeviceClaimConfiguration(_Model):
    requests: tuple[str, ...] = ()
    opaque: OpaqueDeviceConfiguration


class DeviceClaim(_Model):
    requests: tuple[DeviceRequest, ...] = Field(default=(), max_length=MAX_REQUESTS)
    constraints: tuple[DeviceConstraint, ...] = Field(default=(), max_length=MAX_CONSTRAINTS)
    config: tuple[DeviceClaimConfiguration, ...] = Field(default=(), max_length=MAX_CONFIGS)

    @model_validator(mode="after")
    def _request_names(self) -> DeviceClaim:
        names = [request.name for request in self.requests]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate request names: {', '.join(duplicates)}")
        known = set(names)
        named: tuple[tuple[str, tuple[DeviceConstraint | DeviceClaimConfiguration, ...]], ...] = (
            ("constraints", self.constraints), ("config", self.config))
        for kind, entries in named:
            for index, entry in enumerate(entries):
                unknown = [name for name in entry.requests if name not in known]
                if unknown:
                    raise ValueError(
                        f"{kind}[{index}].requests names unknown request(s) "
                        f"{', '.join(unknown)}; known: {', '.join(names) or 'none'}"
                    )
        return self


class ResourceClaimSpec(_Model):
    devices: DeviceClaim = DeviceClaim()


# --------------------------------------------------------------------------- ResourceClaim status


class DeviceRequestAllocationResult(_Model):
    request: str
    driver: str
    pool: str
    device: str


class DeviceAllocationConfiguration(_Model):
    source: Literal["FromClass", "FromClaim"]
    requests: tuple[str, ...] = ()
    opaque: OpaqueDeviceConfiguration


class DeviceAllocationResult(_Model):
    results: tuple[DeviceRequestAllocationResult, ...] = Field(default=(), max_length=MAX_RESULTS)
    config: tuple[DeviceAllocationConfiguration, ...] = Field(
        default=(), max_length=MAX_ALLOCATION_CONFIGS
    )


class AllocationResult(_Model):
    devices: DeviceAllocationResult = DeviceAllocationResult()
    node_selector: NodeSelector | None = None


class ResourceClaimConsumerReference(_Model):
    api_group: str = ""
    resource: str
    name: str
    uid: str


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    observed_generation: int | None = None
    last_transition_time: str | None = None
    reason: str = ""
    message: str = ""


class NetworkDeviceData(_Model):
    interface_name: str | None = None
    ips: tuple[str, ...] = ()
    hardware_address: str | None = None


class AllocatedDeviceStatus(_Model):
    driver: str
    pool: str
    device: str
    conditions: tuple[Condition, ...] = ()
    data: dict[str, Any] | None = None
    network_data: NetworkDeviceData | None = None

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class ResourceClaimStatus(_Model):
    allocation: AllocationResult | None = None
    reserved_for: tuple[ResourceClaimConsumerReference, ...] = Field(
        default=(), max_length=MAX_RESERVED_FOR
    )
    devices: tuple[AllocatedDeviceStatus, ...] = ()

    @model_validator(mode="after")
    def _reserved_needs_allocation(self) -> ResourceClaimStatus:
        if self.reserved_for and self.allocation is None:
            raise ValueError("reservedFor must be empty while the claim is not allocated")
        return self


class ResourceClaim(_Model):
    api_version: str = ""
    kind: str = "ResourceClaim"
    metadata: ObjectMeta
    spec: ResourceClaimSpec = ResourceClaimSpec()
    status: ResourceClaimStatus = ResourceClaimStatus()

    @property
    def key(self) -> str:
        """``namespace/name`` — how kdra refers to a claim in messages and indexes."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def allocated(self) -> bool:
        return self.status.allocation is not None


# --------------------------------------------------------------------------- ResourceClaimTemplate


class TemplateMeta(_Model):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ResourceClaimTemplateSpec(_Model):
    metadata: TemplateMeta = TemplateMeta()
    spec: ResourceClaimSpec = ResourceClaimSpec()


class ResourceClaimTemplate(_Model):
    api_version: str = ""
    kind: str = "ResourceClaimTemplate"
    metadata: ObjectMeta
    spec: ResourceClaimTemplateSpec = ResourceClaimTemplateSpec()


# --------------------------------------------------------------------------- ResourceSlice


class DeviceAttribute(_Model):
    """One attribute value: exactly one of ``int``, ``bool``, ``string``, ``version``."""

    int_: StrictInt | None = Field(default=None, alias="int")
    bool_: StrictBool | None = Field(default=None, alias="bool")
    string: StrictStr | None = Field(default=None, max_length=MAX_ATTRIBUTE_STRING_LENGTH)
    version: StrictStr | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _exactly_one(self) -> DeviceAttribute:
        set_ = [k for k in ("int", "bool", "string", "version") if self.typed()[k] is not None]
        if len(set_) != 1:
            given = ", ".join(set_) or "none"
            raise ValueError(f"exactly one of int, bool, string, version must be set (got {given})")
        return self

    def typed(self) -> dict[str, int | bool | str | None]:
        return {"int": self.int_, "bool": self.bool_, "string": self.string,
                "version": self.version}

    @property
    def kind(self) -> str:
        """``int`` | ``bool`` | ``string`` | ``version``."""
        return next(k for k, v in self.typed().items() if v is not None)

    @property
    def value(self) -> int | bool | str:
        return next(v for v in self.typed().values() if v is not None)


class BasicDevice(_Model):
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _size(self) -> BasicDevice:
        total = len(self.attributes) + len(self.capacity)
        if total > MAX_ATTRIBUTES_AND_CAPACITY:
            raise ValueError(
                f"a device may have at most {MAX_ATTRIBUTES_AND_CAPACITY} attributes and "
                f"capacities together (has {total})"
            )
        return self


class Device(_Model):
    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63)
    basic: BasicDevice | None = None


class ResourcePool(_Model):
    name: str = Field(min_length=1, max_length=253)
    generation: int = Field(ge=0)
    resource_slice_count: int = Field(ge=1)


class ResourceSliceSpec(_Model):
    driver: str = Field(pattern=DNS_SUBDOMAIN.pattern, max_length=63)
    pool: ResourcePool
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    devices: tuple[Device, ...] = Field(default=(), max_length=MAX_DEVICES_PER_SLICE)

    @model_validator(mode="after")
    def _one_node_scope(self) -> ResourceSliceSpec:
        chosen = [name for name, on in (("nodeName", bool(self.node_name)),
                                        ("nodeSelector", self.node_selector is not None),
                                        ("allNodes", self.all_nodes)) if on]
        if len(chosen) != 1:
            raise ValueError(
                "exactly one of nodeName, nodeSelector, allNodes must be set "
                f"(got {', '.join(chosen) or 'none'})"
            )
        if self.node_selector is not None and len(self.node_selector.node_selector_terms) != 1:
            raise ValueError("nodeSelector must have exactly one term")
        return self


class ResourceSlice(_Model):
    api_version: str = ""
    kind: str = "ResourceSlice"
    metadata: ObjectMeta
    spec: ResourceSliceSpec


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


def parse_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    return parse(ResourceClaim, obj)


def parse_template(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    return parse(ResourceClaimTemplate, obj)


def parse_class(obj: Mapping[str, Any]) -> DeviceClass:
    return parse(DeviceClass, obj)


def parse_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    return parse(ResourceSlice, obj)


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

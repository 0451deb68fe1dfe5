"""The CEL view of one device, and the value types selectors compute with.

CEL values are plain Python values, chosen so that type dispatch is a single ``type(x) is``
test and dictionary lookups stay in C (cel-python's ``celtypes`` override ``__eq__`` and
``__hash__`` in Python, which made every map lookup several times slower):

    ==========  =======================================================
    CEL         Python
    ==========  =======================================================
    bool        ``bool`` (only the ``True``/``False`` singletons)
    int         ``int`` (int64 range enforced by the operators)
    uint        :class:`Uint` (an ``int`` subclass)
    double      ``float``
    string      ``str``
    bytes       ``bytes``
    null        ``None``
    list        ``list``
    map         ``dict`` (and :class:`DomainMap`, :class:`FrozenMap`)
    semver      :class:`kdra.dra.semver.Version`
    quantity    :class:`kdra.dra.quantity.Quantity`
    optional    :class:`Optional` (:data:`NONE` when empty)
    type        :class:`CelType`
    net.IP      :class:`IPAddress` (``ipaddress.IPv4Address``/``IPv6Address`` inside)
    net.CIDR    :class:`CIDRValue` (address and prefix length, as Go's ``netip.Prefix``)
    URL         :class:`URLValue` (the parts Go's ``url.Parse`` yields)
    format      :class:`NamedFormat`
    ==========  =======================================================

Invariants:

* A :class:`CelDevice` is built once per device by :func:`make_device` and never changes
  (its maps refuse writes); evaluating a selector only reads it, so callers may cache and
  share it freely.
* ``attributes`` and ``capacity`` are :class:`DomainMap` instances: looking up a domain
  that the device does not have gives an empty map (upstream's ``device.attributes["x"]``
  never fails), while a missing name *inside* a domain is an evaluation error.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from kdra.dra.errors import InvalidObject
from kdra.dra.quantity import InvalidQuantity, Quantity, parse_quantity
from kdra.dra.semver import InvalidVersion, Version, parse_version

__all__ = [
    "EMPTY_MAP",
    "MAP_TYPES",
    "NONE",
    "CIDRValue",
    "CelDevice",
    "CelType",
    "DomainMap",
    "FrozenMap",
    "IPAddress",
    "NamedFormat",
    "Optional",
    "URLValue",
    "Uint",
    "make_device",
    "type_name",
]

_INT64: Final = range(-(2**63), 2**63)


class Uint(int):
    """A CEL ``uint``: an ``int`` whose type stays distinct from CEL ``int``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class FrozenMap(dict[Any, Any]):
    """A ``dict`` that refuses writes once built; reads stay C-speed."""

    __slots__ = ()

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"{type(self).__name__} is read-only")

    __setitem__ = __delitem__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]
    __ior__ = _read_only  # type: ignore[assignment]


class DomainMap(FrozenMap):
    """The outer ``domain -> (name -> value)`` map of ``device.attributes``/``capacity``.

    The runtime returns :data:`EMPTY_MAP` for a domain the device lacks; ``in``,
    ``size()``, iteration and ``has()`` see only the domains really present.
    """

    __slots__ = ()


EMPTY_MAP: Final = FrozenMap()


class Optional:
    """A CEL ``optional_type`` value: :data:`NONE`, or ``Optional(value)``."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "optional.none()" if self is NONE else f"optional.of({self.value!r})"


NONE: Final = Optional(None)


@dataclass(frozen=True, slots=True)
class CelType:
    """A type as a value (``type(1) == int``)."""

    name: str


@dataclass(frozen=True, slots=True)
class IPAddress:
    """A ``net.IP``: an IPv4 or IPv6 address without zone, never IPv4-mapped."""

    address: ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class CIDRValue:
    """A ``net.CIDR``: an address and a prefix length (host bits may be set)."""

    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    bits: int


@dataclass(frozen=True, slots=True)
class URLValue:
    """A ``kubernetes.URL``: the components of an absolute URI or absolute path."""

    text: str  # what url() was given; two URLs are equal when these are
    scheme: str
    host: str  # with brackets and port, as Go's URL.Host
    hostname: str
    port: str
    escaped_path: str
    raw_query: str


@dataclass(frozen=True, slots=True)
class NamedFormat:
    """A ``kubernetes.NamedFormat``: a named string validation (equal by name)."""

    name: str
    validate: Callable[[str], list[str]] = field(compare=False)


MAP_TYPES: Final = frozenset((dict, FrozenMap, DomainMap))


class CelDevice:
    """What a selector sees as ``device``: ``driver``, ``allowMultipleAllocations``,
    ``attributes``, ``capacity`` (the generated code reads them by these names)."""

    __slots__ = ("allowMultipleAllocations", "attributes", "capacity", "driver")

    driver: str
    allowMultipleAllocations: bool  # the CEL field's name
    attributes: DomainMap
    capacity: DomainMap

    def __init__(self, driver: str, attributes: DomainMap, capacity: DomainMap,
                 allow_multiple_allocations: bool = False) -> None:
        object.__setattr__(self, "driver", driver)
        object.__setattr__(self, "allowMultipleAllocations", allow_multiple_allocations)
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "capacity", capacity)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CelDevice is immutable")

    def __repr__(self) -> str:
        return (
            f"CelDevice(driver={self.driver!r}, "
            f"allowMultipleAllocations={self.allowMultipleAllocations!r}, "
            f"attributes={dict(self.attributes)!r}, capacity={dict(self.capacity)!r})"
        )


def _attribute_value(name: str, kind: str, value: object) -> object:
    if kind == "int":
        if type(value) is not int:
            raise InvalidObject(name, f"int attribute has a {type(value).__name__} value")
        if value not in _INT64:
            raise InvalidObject(name, "int attribute does not fit 64 bits")
        return value
    if kind == "bool":
        if type(value) is not bool:
            raise InvalidObject(name, f"bool attribute has a {type(value).__name__} value")
        return value
    if kind == "string":
        if not isinstance(value, str):
            raise InvalidObject(name, f"string attribute has a {type(value).__name__} value")
        return str(value)
    if kind == "version":
        if not isinstance(value, str):
            raise InvalidObject(name, f"version attribute has a {type(value).__name__} value")
        try:
            return parse_version(str(value))
        except InvalidVersion as exc:
            raise InvalidObject(name, f"not a semantic version: {exc}") from exc
    raise InvalidObject(name, f"unknown attribute kind {kind!r} (int, bool, string, version)")


def _quantity_value(name: str, raw: object) -> Quantity:
    if isinstance(raw, Quantity):
        return raw
    if not isinstance(raw, str):
        raise InvalidObject(name, f"capacity has a {type(raw).__name__} value, not a quantity")
    try:
        return parse_quantity(raw)
    except InvalidQuantity as exc:
        raise InvalidObject(name, f"not a quantity: {exc}") from exc


def _by_domain(driver: str, values: Mapping[str, object]) -> DomainMap:
    """File ``name -> value`` under domains: ``a.b/x`` under ``a.b``, bare ``x`` under the
    driver. Two names that land on the same (domain, name) are an error."""
    domains: dict[str, dict[str, object]] = {}
    origin: dict[tuple[str, str], str] = {}
    for name, value in values.items():
        domain, slash, ident = name.partition("/")
        if not slash:
            domain, ident = driver, name
        if (domain, ident) in origin:
            raise InvalidObject(
                name, f"duplicates {origin[domain, ident]!r} once qualified as {domain}/{ident}"
            )
        origin[domain, ident] = name
        domains.setdefault(domain, {})[ident] = value
    return DomainMap((domain, FrozenMap(inner)) for domain, inner in domains.items())


def make_device(
    driver: str,
    attributes: Mapping[str, tuple[str, int | bool | str]],
    capacity: Mapping[str, str | Quantity],
    *,
    allow_multiple_allocations: bool = False,
) -> CelDevice:
    """Build the immutable CEL view of one device; do it once and cache it per device.
    ``allow_multiple_allocations`` is the device's ``allowMultipleAllocations`` (unset:
    false, as upstream).

    Bare names (no ``/``) are filed under the driver's domain, ``domain/name`` under that
    domain. Attribute kinds are ``int``, ``bool``, ``string`` and ``version``; capacities are
    quantity strings (or :class:`Quantity` objects). Raises :class:`InvalidObject` (``field``
    = the attribute or capacity name) on a bad value or kind, or when two names coincide once
    qualified (``model`` and ``<driver>/model``).
    """
    attribute_values = {
        name: _attribute_value(name, kind, value) for name, (kind, value) in attributes.items()
    }
    capacity_values = {name: _quantity_value(name, raw) for name, raw in capacity.items()}
    return CelDevice(
        str(driver), _by_domain(driver, attribute_values), _by_domain(driver, capacity_values),
        bool(allow_multiple_allocations),
    )


_TYPE_NAMES: Final[dict[type, str]] = {
    bool: "bool",
    int: "int",
    Uint: "uint",
    float: "double",
    str: "string",
    bytes: "bytes",
    list: "list",
    dict: "map",
    FrozenMap: "map",
    DomainMap: "map",
    type(None): "null_type",
    Version: "kubernetes.Semver",
    Quantity: "kubernetes.Quantity",
    CelDevice: "kubernetes.DRADevice",
    Optional: "optional_type",
    CelType: "type",
    IPAddress: "net.IP",
    CIDRValue: "net.CIDR",
    URLValue: "kubernetes.URL",
    NamedFormat: "kubernetes.NamedFormat",
}


def type_name(value: object) -> str:
    """The CEL name of a value's type, for error messages."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)

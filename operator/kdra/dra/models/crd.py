"""How the models carry their CustomResourceDefinition schema: the models of this package are
the one source of ``crds/*.yaml`` (and the Helm chart's copies), which ``python -m hack.crdgen``
writes from them — the storage version ``v1`` field for field, ``v1alpha3`` derived from it by
the rules the conversion uses (:mod:`kdra.dra.models.v1alpha3`).

What the generator reads, in the order it applies it:

- the Python types: ``str``, ``int`` (``int64``), ``bool``, ``Literal[...]`` (an ``enum``),
  ``tuple[X, ...]`` (an atomic list), ``dict[str, X]`` (a map), ``dict[str, Any]`` (free-form
  JSON), nested models (objects), ``X | None`` (optional); a field without a default is
  ``required``;
- descriptions: a field's docstring (the string literal right below it) describes the field;
  a class docstring describes the object wherever no field describes it (list items, map
  values, the whole kind); ``Annotated[str, Field(description=...)]`` describes list items and
  map values of plain types;
- the constraints pydantic enforces when parsing — ``Field(max_length=..., min_length=...,
  pattern=..., ge=...)`` — as ``maxLength`` / ``maxItems`` / ``maxProperties``, ``minLength``
  / ``minItems``, ``pattern``, ``minimum``;
- ``json_schema_extra`` — :func:`crd` on a field, :func:`crd_object` as a class's
  ``model_config`` — merged into the generated schema node last: what only the API server
  checks (limits and patterns kdra's parser leaves to admission, CEL rules, list-map keys,
  defaults the API server fills in). The merge is deep: a nested ``properties`` entry changes
  that property only, ``None`` removes a key, and ``x-kubernetes-validations`` add up (the
  class's rules, then the field's).

Invariants:
- Nothing here changes how a model parses: pydantic does not validate against
  ``json_schema_extra``, and the field docstrings are read from the source by the generator
  (pydantic's ``use_attribute_docstrings`` is off, so importing the models costs nothing more).
- Pure data: no I/O, nothing of the rest of kdra.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field

JsonDict = dict[str, Any]

REQUIRED = "x-kdra-required"
"""Directive on a field: whether the object's ``required`` lists it (default: pydantic's)."""
DEFAULTED = "x-kdra-defaulted"
"""Directive on a field: the schema carries the model's default (the API server fills it in)."""

# Patterns of the CRD schemas (ECMA-262 syntax, which the API server uses; also valid RE2).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
REQUEST_REF = rf"^{_LABEL}(/{_LABEL})?$"
"""A request name, or ``<request>/<subrequest>``."""
POOL_NAME = rf"^{_SUBDOMAIN}(/{_SUBDOMAIN})*$"
FULLY_QUALIFIED = rf"^{_SUBDOMAIN}/[A-Za-z_][A-Za-z0-9_]{{0,31}}$"
LABEL_NAME = rf"^({_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
EXTENDED_RESOURCE = rf"^({_SUBDOMAIN}/)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
CONDITION_TYPE = rf"^({_SUBDOMAIN}/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
SEMVER = (r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
          r"(-(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
          r"(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
          r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$")
QUANTITY = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
            r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
# In a CEL string literal the backslash is escaped once more.
_QUALIFIED_KEY_CEL = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                      r"[A-Za-z_][A-Za-z0-9_]{0,31}$")


def rule(expression: str, message: str, *, field_path: str | None = None,
         reason: str | None = None) -> JsonDict:
    """One ``x-kubernetes-validations`` entry (a CEL rule the API server checks)."""
    node: JsonDict = {"rule": expression, "message": " ".join(message.split())}
    if field_path:
        node["fieldPath"] = field_path
    if reason:
        node["reason"] = reason
    return node


def immutable(message: str, *, field_path: str | None = None) -> JsonDict:
    """The rule that a value never changes once written."""
    return rule("self == oldSelf", message, field_path=field_path, reason="FieldValueForbidden")


def qualified_keys(what: str, example: str) -> JsonDict:
    """The rule every attribute/capacity map's keys follow (a CRD cannot constrain map keys
    otherwise)."""
    return rule(
        f"self.all(k, k.size() <= 96 && k.matches('{_QUALIFIED_KEY_CEL}') "
        "&& (k.indexOf('/') < 0 || k.indexOf('/') <= 63))",
        f"{what} names must be a C identifier of at most 32 characters (`{example}`), "
        "optionally prefixed by a DNS subdomain of at most 63 characters and a slash "
        f"(`acme.io/{example}`)")


def crd(*, required: bool | None = None, defaulted: bool = False,
        min_length: int | None = None, max_length: int | None = None,
        pattern: str | None = None, fmt: str | None = None, enum: list[str] | None = None,
        min_items: int | None = None, max_items: int | None = None,
        max_properties: int | None = None, minimum: int | None = None,
        maximum: int | None = None,
        list_map_keys: list[str] | None = None, map_type: str | None = None,
        preserve_unknown_fields: bool = False, rules: list[JsonDict] | None = None,
        **schema: Any) -> JsonDict:
    """A field's ``json_schema_extra``: what its schema says beyond the model (see the module
    docstring). ``schema`` passes further OpenAPI keys as they are (``None`` removes a key the
    model would give, e.g. ``minItems=None`` for a limit left to the parser)."""
    extra: JsonDict = {}
    if required is not None:
        extra[REQUIRED] = required
    if defaulted:
        extra[DEFAULTED] = True
    for key, value in (("minLength", min_length), ("maxLength", max_length),
                       ("pattern", pattern), ("format", fmt), ("enum", enum),
                       ("minItems", min_items), ("maxItems", max_items),
                       ("maxProperties", max_properties), ("minimum", minimum),
                       ("maximum", maximum)):
        if value is not None:
            extra[key] = value
    if list_map_keys:
        extra["x-kubernetes-list-type"] = "map"
        extra["x-kubernetes-list-map-keys"] = list_map_keys
    if map_type:
        extra["x-kubernetes-map-type"] = map_type
    if preserve_unknown_fields:
        extra["x-kubernetes-preserve-unknown-fields"] = True
    if rules:
        extra["x-kubernetes-validations"] = rules
    extra.update(schema)
    return extra


def crd_object(*, rules: list[JsonDict] | None = None, **schema: Any) -> ConfigDict:
    """A class's ``model_config`` carrying what its object schema says beyond the fields
    (merged with the base model's configuration by pydantic)."""
    return ConfigDict(json_schema_extra=crd(rules=rules, **schema))


def item(description: str, **constraints: Any) -> Any:
    """Describes list items or map values of a plain type:
    ``tuple[Annotated[str, item("A label value.", max_length=63)], ...]`` (for the schema
    only; the parser does not check ``constraints``)."""
    return Field(description=" ".join(description.split()), json_schema_extra=crd(**constraints))


QUANTITY_SCHEMA: JsonDict = {"type": None, "anyOf": [{"type": "integer"}, {"type": "string"}],
                             "pattern": QUANTITY, "x-kubernetes-int-or-string": True}
"""A ``resource.Quantity`` on the wire: an integer or a string such as ``80Gi``."""


def quantity(description: str) -> Any:
    """``Annotated[str, quantity("An amount.")]``: a quantity (kdra parses it where it is used)."""
    return Field(description=" ".join(description.split()), json_schema_extra=QUANTITY_SCHEMA)


Quantity = Annotated[str, quantity("An amount.")]

__all__ = [
    "CONDITION_REASON",
    "CONDITION_TYPE",
    "DEFAULTED",
    "DNS_LABEL",
    "DNS_SUBDOMAIN",
    "EXTENDED_RESOURCE",
    "FULLY_QUALIFIED",
    "LABEL_NAME",
    "LABEL_VALUE",
    "POOL_NAME",
    "QUANTITY",
    "QUANTITY_SCHEMA",
    "REQUEST_REF",
    "REQUIRED",
    "SEMVER",
    "UUID",
    "JsonDict",
    "Quantity",
    "crd",
    "crd_object",
    "immutable",
    "item",
    "qualified_keys",
    "quantity",
    "rule",
]

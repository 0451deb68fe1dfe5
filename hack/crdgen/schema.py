"""Small builders for OpenAPI v3 schema nodes as CustomResourceDefinitions want them.

Keys come out in one order (type, description, required, properties/items, limits, kubernetes
extensions, validations), so the generated YAML reads like the hand-written v1alpha3 part.
"""

from __future__ import annotations

import copy
from typing import Any

Node = dict[str, Any]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
REQUEST_REF = rf"^{_LABEL}(/{_LABEL})?$"
QUALIFIED_KEY_RE = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                    r"[A-Za-z_][A-Za-z0-9_]{0,31}$")
FULLY_QUALIFIED = (r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
                   r"[A-Za-z_][A-Za-z0-9_]{0,31}$")
LABEL_NAME = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
              r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
CONDITION_TYPE = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
QUANTITY = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
            r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


def _node(kind: str, description: str, extra: dict[str, Any]) -> Node:
    node: Node = {"type": kind, "description": " ".join(description.split())}
    node.update({k: v for k, v in extra.items() if v is not None})
    return node


def obj(description: str, properties: dict[str, Node] | None = None, *,
        required: list[str] | None = None, rules: list[Node] | None = None,
        **extra: Any) -> Node:
    node = _node("object", description, {})
    if required:
        node["required"] = list(required)
    if properties is not None:
        node["properties"] = properties
    node.update({k.replace("_", "-"): v for k, v in extra.items() if v is not None})
    if rules:
        node["x-kubernetes-validations"] = rules
    return node


def map_of(description: str, values: Node, *, max_properties: int | None = None,
           rules: list[Node] | None = None) -> Node:
    node = _node("object", description, {"additionalProperties": values,
                                         "maxProperties": max_properties})
    if rules:
        node["x-kubernetes-validations"] = rules
    return node


def arr(description: str, items: Node, *, max_items: int | None = None,
        min_items: int | None = None, list_type: str = "atomic",
        keys: list[str] | None = None, rules: list[Node] | None = None) -> Node:
    node = _node("array", description, {"minItems": min_items, "maxItems": max_items,
                                        "items": items})
    node["x-kubernetes-list-type"] = list_type
    if keys:
        node["x-kubernetes-list-map-keys"] = keys
    if rules:
        node["x-kubernetes-validations"] = rules
    return node


def string(description: str, *, min_length: int | None = None,
           max_length: int | None = None, pattern: str | None = None,
           enum: list[str] | None = None, default: str | None = None,
           fmt: str | None = None, rules: list[Node] | None = None) -> Node:
    node = _node("string", description, {"format": fmt, "enum": enum, "default": default,
                                         "minLength": min_length, "maxLength": max_length,
                                         "pattern": pattern})
    if rules:
        node["x-kubernetes-validations"] = rules
    return node


def integer(description: str, *, minimum: int | None = None) -> Node:
    return _node("integer", description, {"format": "int64", "minimum": minimum})


def boolean(description: str) -> Node:
    return _node("boolean", description, {})


def quantity(description: str) -> Node:
    """A resource.Quantity: an integer, or a string such as ``80Gi``, ``1.5``, ``250m``."""
    return {"description": " ".join(description.split()),
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY, "x-kubernetes-int-or-string": True}


def rule(expression: str, message: str, *, field_path: str | None = None,
         reason: str | None = None) -> Node:
    node: Node = {"rule": expression, "message": " ".join(message.split())}
    if field_path:
        node["fieldPath"] = field_path
    if reason:
        node["reason"] = reason
    return node


def borrowed(node: Node, description: str | None = None, **changes: Any) -> Node:
    """A deep copy of ``node`` (from the v1alpha3 schema), optionally re-described."""
    out = copy.deepcopy(node)
    if description is not None:
        out["description"] = " ".join(description.split())
    for key, value in changes.items():
        key = key.replace("_", "-") if key.startswith("x_") else key
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def qualified_keys(what: str, example: str) -> Node:
    """The rule every attribute/capacity map's keys follow."""
    return rule(
        f"self.all(k, k.size() <= 96 && k.matches('{QUALIFIED_KEY_RE}') "
        "&& (k.indexOf('/') < 0 || k.indexOf('/') <= 63))",
        f"{what} names must be a C identifier of at most 32 characters (`{example}`), "
        "optionally prefixed by a DNS subdomain of at most 63 characters and a slash "
        f"(`acme.io/{example}`)")

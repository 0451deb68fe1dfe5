"""kdra's pydantic models as OpenAPI v3 schema nodes, the way a CustomResourceDefinition wants
them: structural (every node typed, objects spelled out, no references), described, limited.

What a model says and how it reads is :mod:`kdra.dra.models.crd`'s docstring; this module
only applies it. Field docstrings are read from the models' source with :mod:`ast` (the string
literal right below a field, as pydantic's ``use_attribute_docstrings`` would), so the product
does not pay for them at import.

Invariants:
- Deterministic: the same models give the same nodes, keys in one order (:data:`KEY_ORDER`).
- Total over the types the models use; any other type is an error naming the model and the
  field, never a guess.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import textwrap
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kdra.dra.models.crd import DEFAULTED, REQUIRED

Node = dict[str, Any]

KEY_ORDER = (
    "type", "x-kubernetes-map-type", "description", "format", "enum", "default", "required",
    "properties", "additionalProperties", "items", "anyOf", "minLength", "maxLength", "pattern",
    "minItems", "maxItems", "minimum", "maximum", "minProperties", "maxProperties",
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-validations",
)
DIRECTIVES = (REQUIRED, DEFAULTED)
RULES = "x-kubernetes-validations"


class SchemaError(Exception):
    """A model the generator cannot express (names the model and field)."""


def text(doc: str) -> str:
    """A docstring as one line of description."""
    return " ".join(inspect.cleandoc(doc).split())


@functools.cache
def field_docs(cls: type[BaseModel]) -> dict[str, str]:
    """Field name → the docstring right below the field, through the class's bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        if not isinstance(body, ast.ClassDef):
            continue
        for stmt, after in zip(body.body, body.body[1:], strict=False):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[stmt.target.id] = text(after.value.value)
    return docs


def merge(node: Node, extra: dict[str, Any]) -> Node:
    """Deep-merge ``extra`` into ``node`` (in place): ``None`` removes a key, nested objects
    merge, rules add up, anything else replaces."""
    for key, value in extra.items():
        if key in DIRECTIVES:
            continue
        if value is None:
            node.pop(key, None)
        elif key == RULES:
            node[key] = [*node.get(key, []), *copy.deepcopy(value)]
        elif isinstance(value, dict) and isinstance(node.get(key), dict):
            merge(node[key], value)
        else:
            node[key] = copy.deepcopy(value)
    return node


def ordered(node: Node) -> Node:
    unknown = set(node) - set(KEY_ORDER)
    if unknown:
        raise SchemaError(f"unknown schema keys {sorted(unknown)}")
    return {key: node[key] for key in KEY_ORDER if key in node}


def model_schema(cls: type[BaseModel]) -> Node:
    """The object schema of a model: its fields by their API names (aliases)."""
    node: Node = {"type": "object"}
    if cls.__doc__:
        node["description"] = text(cls.__doc__)
    docs = field_docs(cls)
    properties: Node = {}
    required: list[str] = []
    for name, info in cls.model_fields.items():
        key = info.alias or name
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        try:
            prop = schema_of(info.annotation, description=docs.get(name) or info.description,
                             metadata=info.metadata, extras=[extra])
        except SchemaError as exc:
            raise SchemaError(f"{cls.__name__}.{name}: {exc}") from None
        if extra.get(DEFAULTED):
            prop["default"] = info.default
            prop = ordered(prop)
        if extra.get(REQUIRED, info.is_required()):
            required.append(key)
        properties[key] = prop
    if required:
        node["required"] = required
    node["properties"] = properties
    config_extra = cls.model_config.get("json_schema_extra")
    if isinstance(config_extra, dict):
        merge(node, config_extra)
    return ordered(node)


def schema_of(annotation: Any, *, description: str | None = None,
              metadata: list[Any] | tuple[Any, ...] = (),
              extras: list[dict[str, Any]] | tuple[dict[str, Any], ...] = ()) -> Node:
    """The schema of a type (a field's, an item's, a map value's). ``description``,
    ``metadata`` (pydantic constraints) and ``extras`` come from outside the type and win
    over what an ``Annotated`` inside it says."""
    if get_origin(annotation) is Annotated:
        base, *meta = get_args(annotation)
        inner_description: str | None = None
        inner_metadata: list[Any] = []
        inner_extras: list[dict[str, Any]] = []
        for part in meta:
            if isinstance(part, FieldInfo):
                inner_description = part.description or inner_description
                inner_metadata += part.metadata
                if isinstance(part.json_schema_extra, dict):
                    inner_extras.append(part.json_schema_extra)
            else:
                inner_metadata.append(part)
        return schema_of(base, description=description or inner_description,
                         metadata=[*inner_metadata, *metadata], extras=[*inner_extras, *extras])
    node = _base_schema(annotation)
    _constrain(node, metadata)
    if description:
        node["description"] = description
    for extra in extras:
        merge(node, extra)
    return ordered(node)


def _base_schema(annotation: Any) -> Node:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (Union, types.UnionType):
        present = [arg for arg in args if arg is not type(None)]
        if len(present) == 1:
            return schema_of(present[0])
        if set(present) == {str, int}:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-int-or-string": True}
        raise SchemaError(f"cannot express the union {annotation!r}")
    if origin is Literal:
        if not all(isinstance(arg, str) for arg in args):
            raise SchemaError(f"only string literals, not {annotation!r}")
        return {"type": "string", "enum": list(args)}
    if origin is tuple:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise SchemaError(f"only tuple[X, ...], not {annotation!r}")
        return {"type": "array", "items": schema_of(args[0]), "x-kubernetes-list-type": "atomic"}
    if origin is dict:
        if args[0] is not str:
            raise SchemaError(f"map keys must be strings, not {args[0]!r}")
        if args[1] is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": schema_of(args[1])}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_schema(annotation)
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer", "format": "int64"}
    if annotation is str:
        return {"type": "string"}
    raise SchemaError(f"cannot express the type {annotation!r}")


_LENGTH = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems"),
           "object": ("minProperties", "maxProperties")}


def _constrain(node: Node, metadata: list[Any] | tuple[Any, ...]) -> None:
    """pydantic's constraints (``Field(min_length=, max_length=, ge=, pattern=)``, as
    annotated-types objects in ``FieldInfo.metadata``) as schema limits, by the node's type
    as pydantic applies them."""
    for part in metadata:
        for attribute, index in (("min_length", 0), ("max_length", 1)):
            if getattr(part, attribute, None) is not None:
                names = _LENGTH.get(node.get("type", ""))
                if names is None:
                    raise SchemaError(f"a length limit on a {node.get('type')}")
                node[names[index]] = getattr(part, attribute)
        if getattr(part, "ge", None) is not None:
            node["minimum"] = part.ge
        for bound in ("gt", "le", "lt", "multiple_of"):
            if getattr(part, bound, None) is not None:
                raise SchemaError(f"unsupported constraint {part!r}: use ge= (the minimum)")
        if getattr(part, "pattern", None) is not None:
            node["pattern"] = part.pattern

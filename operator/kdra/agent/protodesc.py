"""Protobuf messages declared as data: descriptors built at import time, no generated code.

The agent speaks two protobuf protocols with processes of its node — NRI (ttrpc) with the
container runtime (:mod:`kdra.agent.nri.messages`) and the kubelet's plugin APIs (gRPC:
registration, the DRA node service, device health; :mod:`kdra.agent.kubelet.messages`). Each
declares only the messages and fields it reads or writes, written from the documented API
(field numbers and types), as a table::

    {"Message": [(field name, number, type, repeated), ...], ...}

A type is a scalar (``string``, ``bytes``, ``bool``, ``int32``, ``int64``, ``uint32``),
another message of the same file, ``map`` (``map<string, string>``) or ``map:<Message>``
(``map<string, Message>``). An enum is declared ``int32``: the same varint on the wire, and a
value a newer peer adds stays a number instead of becoming an unknown field. A proto3
``optional`` scalar is declared plain: the encoders here set it only when it has a value, which
is what ``optional`` puts on the wire.

:func:`file_descriptor` turns a table into a ``FileDescriptorProto``; :func:`message_pool` adds
files to a private ``DescriptorPool`` (never protobuf's default pool: no clash with another
library's declarations of the same names) and :func:`message_class` gives a message's class.

Invariants:
- :func:`parse` is total over bytes: it returns a message or raises :class:`MessageError`,
  never another exception, whatever the input (the wire format carries field numbers only:
  fields a table does not declare are kept as unknown fields and otherwise ignored).
- Pure: building descriptors reads and writes nothing but memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

__all__ = [
    "Field",
    "MessageError",
    "encode",
    "file_descriptor",
    "message_class",
    "message_pool",
    "parse",
]

_F = descriptor_pb2.FieldDescriptorProto
_TYPES = {
    "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32, "int64": _F.TYPE_INT64, "uint32": _F.TYPE_UINT32,
}

Field = tuple[str, int, str, bool]
"""(field name, number, type, repeated)."""


class MessageError(ValueError):
    """Bytes that do not decode as the expected message."""


def _map_entry_name(field_name: str) -> str:
    return "".join(part.capitalize() for part in field_name.split("_")) + "Entry"


def file_descriptor(name: str, package: str, messages: Mapping[str, list[Field]]
                    ) -> descriptor_pb2.FileDescriptorProto:
    """The proto3 file ``name`` of ``package`` declaring ``messages`` (see the module
    docstring for the table's format)."""
    proto = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")
    for message_name, fields in messages.items():
        message = proto.message_type.add(name=message_name)
        for field_name, number, kind, repeated in fields:
            label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if kind == "map" or kind.startswith("map:"):
                entry_name = _map_entry_name(field_name)
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_F.TYPE_STRING,
                                label=_F.LABEL_OPTIONAL)
                if kind == "map":
                    entry.field.add(name="value", number=2, type=_F.TYPE_STRING,
                                    label=_F.LABEL_OPTIONAL)
                else:
                    entry.field.add(name="value", number=2, type=_F.TYPE_MESSAGE,
                                    label=_F.LABEL_OPTIONAL,
                                    type_name=f".{package}.{kind.split(':', 1)[1]}")
                message.field.add(name=field_name, number=number, label=_F.LABEL_REPEATED,
                                  type=_F.TYPE_MESSAGE,
                                  type_name=f".{package}.{message_name}.{entry_name}")
            elif kind in _TYPES:
                message.field.add(name=field_name, number=number, label=label,
                                  type=_TYPES[kind])
            else:
                message.field.add(name=field_name, number=number, label=label,
                                  type=_F.TYPE_MESSAGE, type_name=f".{package}.{kind}")
    return proto


def message_pool(files: Iterable[descriptor_pb2.FileDescriptorProto]
                 ) -> descriptor_pool.DescriptorPool:
    """A private pool holding ``files`` (in order: a file's dependencies first)."""
    pool = descriptor_pool.DescriptorPool()
    for proto in files:
        pool.Add(proto)
    return pool


def message_class(pool: descriptor_pool.DescriptorPool, full_name: str) -> Any:
    """The message class of ``full_name`` (``Any``: protobuf builds its attributes at run
    time; only the modules declaring messages touch these objects)."""
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def parse(cls: Any, data: bytes, what: str) -> Any:
    """``data`` decoded as ``cls``; :class:`MessageError` naming ``what`` when it does not."""
    message = cls()
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError, TypeError, RecursionError) as exc:
        raise MessageError(f"malformed {what}: {exc}") from exc
    return message


def encode(message: Message) -> bytes:
    return message.SerializeToString()

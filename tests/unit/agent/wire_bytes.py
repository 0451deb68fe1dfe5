"""A hand-written protobuf wire encoder and reader, independent of the protobuf library: the
expected bytes of kdra's messages are built from the protocols' own field numbers (NRI, the
kubelet's APIs), so a wrong declaration in kdra fails the tests that use them."""

from __future__ import annotations


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ld(number: int, data: bytes | str) -> bytes:
    """A length-delimited field (string, bytes, message)."""
    raw = data.encode() if isinstance(data, str) else data
    return varint(number << 3 | 2) + varint(len(raw)) + raw


def vi(number: int, value: int) -> bytes:
    """A varint field (int32, int64, bool, enum)."""
    return varint(number << 3) + varint(value)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) in wire order: varints as ints, length-delimited as bytes."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, at = _read_varint(data, at)
            out.append((number, value))
        elif kind == 2:
            size, at = _read_varint(data, at)
            out.append((number, data[at:at + size]))
            at += size
        else:
            raise ValueError(f"wire type {kind} not used by these messages")
    return out

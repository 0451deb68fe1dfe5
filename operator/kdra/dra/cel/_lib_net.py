"""Kubernetes' IP and CIDR libraries, on Python's ``ipaddress`` with Go ``netip``'s rules.

``ip(s)``, ``isIP(s)``, ``ip.isCanonical(s)``, ``string(ip)``, ``ip.family()``,
``isUnspecified``, ``isLoopback``, ``isLinkLocalMulticast``, ``isLinkLocalUnicast``,
``isGlobalUnicast``; ``cidr(s)``, ``isCIDR(s)``, ``string(cidr)``, ``containsIP``,
``containsCIDR``, ``ip()``, ``masked()``, ``prefixLength()``.

Invariants:

* Addresses parse as Go's ``netip.ParseAddr`` does, minus what upstream then refuses: no
  zones (``fe80::1%eth0``), no IPv4-mapped IPv6 (``::ffff:1.2.3.4``), no leading zeros in
  IPv4 octets. Their text form is Go's (RFC 5952 for IPv6).
* A CIDR keeps its host bits (``cidr('192.168.0.1/24').ip()`` is 192.168.0.1); ``masked()``
  clears them. Predicates follow Go's definitions (``isGlobalUnicast`` counts private
  addresses as global; ``isLinkLocalMulticast`` is 224.0.0.0/24 and ff02::/16 with any
  flags).
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Any, Final

from ._rt_core import EvalError, no_overload
from ._values import CIDRValue, IPAddress

__all__ = ["FUNCTIONS", "parse_cidr", "parse_ip"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_BROADCAST: Final = ipaddress.IPv4Address("255.255.255.255")


def _address(raw: str) -> Address:
    """Go's ParseAddr: raises ValueError with Go's wording of the problem."""
    if "%" in raw:
        if ":" not in raw:
            raise ValueError(f'ParseAddr("{raw}"): unexpected character (at "%")')
        raise ValueError("zone")
    try:
        return ipaddress.ip_address(raw)
    except ValueError:
        raise ValueError(f'ParseAddr("{raw}"): invalid IP address') from None


@functools.lru_cache(maxsize=1024)
def parse_ip(raw: str) -> IPAddress:
    """An address value (cached: values are immutable, parsing is pure Python)."""
    try:
        address = _address(raw)
    except ValueError as exc:
        if str(exc) == "zone":
            raise EvalError(f'IP address "{raw}" with zone value is not allowed') from None
        raise EvalError(
            f'IP Address "{raw}" parse error during conversion from string: {exc}'
        ) from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise EvalError(f'IPv4-mapped IPv6 address "{raw}" is not allowed')
    return IPAddress(address)


@functools.lru_cache(maxsize=1024)
def parse_cidr(raw: str) -> CIDRValue:
    """A CIDR value (cached, as :func:`parse_ip`)."""
    prefix = "network address parse error during conversion from string: "
    address_text, slash, bits_text = raw.rpartition("/")
    try:
        if not slash:
            raise ValueError(f"netip.ParsePrefix(\"{raw}\"): no '/'")
        if "%" in address_text:
            raise ValueError(
                f'netip.ParsePrefix("{raw}"): IPv6 zones cannot be present in a prefix'
            )
        address = _address(address_text)
        limit = 32 if address.version == 4 else 128
        if not (bits_text.isascii() and bits_text.isdigit()) or (
            len(bits_text) > 1 and bits_text[0] == "0"
        ):
            raise ValueError(f'netip.ParsePrefix("{raw}"): bad bits after slash: "{bits_text}"')
        bits = int(bits_text)
        if bits > limit:
            raise ValueError(f'netip.ParsePrefix("{raw}"): prefix length out of range')
    except ValueError as exc:
        raise EvalError(prefix + prefix + str(exc)) from None  # upstream wraps it twice
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise EvalError(f'IPv4-mapped IPv6 address "{raw}" is not allowed')
    return CIDRValue(address, bits)


def _text(op: str, value: Any) -> str:
    if type(value) is not str:
        raise no_overload(op, value)
    return value  # type: ignore[no-any-return]


def _ip(op: str, value: Any) -> Address:
    if type(value) is not IPAddress:
        raise no_overload(op, value)
    return value.address  # type: ignore[no-any-return]


def _cidr(op: str, value: Any) -> CIDRValue:
    if type(value) is not CIDRValue:
        raise no_overload(op, value)
    return value  # type: ignore[no-any-return]


def g_ip(text: Any) -> IPAddress:
    return parse_ip(_text("ip", text))


def m_ip(cidr: Any) -> IPAddress:
    return IPAddress(_cidr("ip", cidr).address)


def g_isIP(text: Any) -> bool:
    try:
        parse_ip(_text("isIP", text))
    except EvalError:
        return False
    return True


def g_ip_isCanonical(text: Any) -> bool:
    raw = _text("ip.isCanonical", text)
    return str(parse_ip(raw).address) == raw


def m_family(ip: Any) -> int:
    return _ip("family", ip).version


def m_isUnspecified(ip: Any) -> bool:
    return _ip("isUnspecified", ip).is_unspecified


def m_isLoopback(ip: Any) -> bool:
    return _ip("isLoopback", ip).is_loopback


def m_isLinkLocalMulticast(ip: Any) -> bool:
    address = _ip("isLinkLocalMulticast", ip)
    if address.version == 4:
        return address.packed[:3] == b"\xe0\x00\x00"
    first = int.from_bytes(address.packed[:2], "big")
    return first & 0xFF0F == 0xFF02


def m_isLinkLocalUnicast(ip: Any) -> bool:
    address = _ip("isLinkLocalUnicast", ip)
    if address.version == 4:
        return address.packed[:2] == b"\xa9\xfe"
    return int.from_bytes(address.packed[:2], "big") & 0xFFC0 == 0xFE80


def m_isGlobalUnicast(ip: Any) -> bool:
    address = _ip("isGlobalUnicast", ip)
    if address.version == 4 and address == _BROADCAST:
        return False
    return not (
        address.is_unspecified
        or address.is_loopback
        or address.is_multicast
        or m_isLinkLocalUnicast(ip)
    )


def g_cidr(text: Any) -> CIDRValue:
    return parse_cidr(_text("cidr", text))


def g_isCIDR(text: Any) -> bool:
    try:
        parse_cidr(_text("isCIDR", text))
    except EvalError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _network(cidr: CIDRValue) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(f"{cidr.address}/{cidr.bits}", strict=False)


def m_containsIP(cidr: Any, other: Any) -> bool:
    network = _network(_cidr("containsIP", cidr))
    address = parse_ip(other).address if type(other) is str else _ip("containsIP", other)
    return address.version == network.version and address in network


def m_containsCIDR(cidr: Any, other: Any) -> bool:
    outer = _cidr("containsCIDR", cidr)
    inner = parse_cidr(other) if type(other) is str else _cidr("containsCIDR", other)
    if outer.address.version != inner.address.version or outer.bits > inner.bits:
        return False
    return inner.address in _network(outer)


def m_prefixLength(cidr: Any) -> int:
    return _cidr("prefixLength", cidr).bits


def m_masked(cidr: Any) -> CIDRValue:
    value = _cidr("masked", cidr)
    return CIDRValue(_network(value).network_address, value.bits)


FUNCTIONS: Final[dict[str, object]] = {
    name: value for name, value in globals().items() if name.startswith(("g_", "m_"))
}

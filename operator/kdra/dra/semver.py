"""Strict Semantic Versioning 2.0.0: parsing and precedence.

A device attribute of kind ``version`` holds a semantic version, and CEL selectors compare
them with ``semver(...)``, ``isGreaterThan`` and friends. This module is the one place that
knows the format, so the API validation, the CEL environment and anything else agree.

Invariants:

* Parsing is *strict*: exactly ``MAJOR.MINOR.PATCH``, ASCII digits, no leading zeros in
  numeric parts (``01.2.3`` is rejected), an optional ``-prerelease`` of dot-separated
  non-empty ``[0-9A-Za-z-]`` identifiers (numeric ones without leading zeros) and an
  optional ``+build`` of dot-separated non-empty ``[0-9A-Za-z-]`` identifiers. No ``v``
  prefix, no surrounding whitespace, no "normalisation". Numeric parts must fit an
  unsigned 64-bit integer, like the Go library upstream uses.
* Equality, hashing and ordering follow *precedence* (semver.org §11): build metadata is
  ignored, so ``1.0.0+a == 1.0.0+b``. ``str()`` gives back the exact text that was parsed.
* A :class:`Version` is immutable and hashable.
"""

from __future__ import annotations

from typing import Any

__all__ = ["InvalidVersion", "Version", "is_valid_version", "parse_version"]

_MAX_UINT64 = 2**64 - 1
_DIGITS = frozenset("0123456789")
_IDENT_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-")


class InvalidVersion(ValueError):
    """The text is not a strict semantic version. The message says which part is wrong."""


# Sort key of one pre-release identifier: numeric identifiers sort before alphanumeric
# ones and compare by value; alphanumeric ones compare by their ASCII text.
_PreKey = tuple[int, int | str]


class Version:
    """One semantic version. Compare with ``==``, ``<``, ... or :meth:`compare`."""

    __slots__ = ("_key", "_text", "build", "major", "minor", "patch", "prerelease")

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...]
    build: tuple[str, ...]

    def __init__(
        self,
        major: int,
        minor: int,
        patch: int,
        prerelease: tuple[str, ...] = (),
        build: tuple[str, ...] = (),
    ) -> None:
        self.major = major
        self.minor = minor
        self.patch = patch
        self.prerelease = prerelease
        self.build = build
        text = f"{major}.{minor}.{patch}"
        if prerelease:
            text += "-" + ".".join(prerelease)
        if build:
            text += "+" + ".".join(build)
        self._text = text
        pre_key: tuple[_PreKey, ...] = tuple(
            (0, int(ident)) if _is_numeric(ident) else (1, ident) for ident in prerelease
        )
        # A release sorts after every pre-release of the same MAJOR.MINOR.PATCH.
        self._key = (major, minor, patch, 0 if prerelease else 1, pre_key)

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, "_key"):
            raise AttributeError("Version is immutable")
        object.__setattr__(self, name, value)

    def compare(self, other: Version) -> int:
        """-1, 0 or 1 as ``self`` has lower, equal or higher precedence than ``other``."""
        if self._key < other._key:
            return -1
        return 1 if self._key > other._key else 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Version):
            return self._key == other._key
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key)

    def __lt__(self, other: Version) -> bool:
        if isinstance(other, Version):
            return self._key < other._key
        return NotImplemented

    def __le__(self, other: Version) -> bool:
        if isinstance(other, Version):
            return self._key <= other._key
        return NotImplemented

    def __gt__(self, other: Version) -> bool:
        if isinstance(other, Version):
            return self._key > other._key
        return NotImplemented

    def __ge__(self, other: Version) -> bool:
        if isinstance(other, Version):
            return self._key >= other._key
        return NotImplemented

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Version({self._text!r})"


def _is_numeric(ident: str) -> bool:
    return bool(ident) and all(c in _DIGITS for c in ident)


def _number(part: str, what: str, text: str) -> int:
    if not _is_numeric(part):
        raise InvalidVersion(f"{text!r}: {what} must be a non-empty string of digits")
    if len(part) > 1 and part[0] == "0":
        raise InvalidVersion(f"{text!r}: {what} must not have leading zeros")
    value = int(part)
    if value > _MAX_UINT64:
        raise InvalidVersion(f"{text!r}: {what} is too large")
    return value


def _identifiers(part: str, what: str, text: str, numeric_no_zeros: bool) -> tuple[str, ...]:
    idents = tuple(part.split("."))
    for ident in idents:
        if not ident:
            raise InvalidVersion(f"{text!r}: empty {what} identifier")
        if not all(c in _IDENT_CHARS for c in ident):
            raise InvalidVersion(f"{text!r}: {what} identifier {ident!r} has invalid characters")
        if numeric_no_zeros and len(ident) > 1 and ident[0] == "0" and _is_numeric(ident):
            raise InvalidVersion(f"{text!r}: numeric {what} identifier {ident!r} has leading zeros")
    return idents


def parse_version(text: str) -> Version:
    """Parse strict semver 2.0.0 text, raising :class:`InvalidVersion`."""
    if not isinstance(text, str):
        raise InvalidVersion(f"{text!r}: not a string")
    core, plus, build_text = text.partition("+")
    if plus and not build_text:
        raise InvalidVersion(f"{text!r}: empty build metadata")
    core, dash, pre_text = core.partition("-")
    if dash and not pre_text:
        raise InvalidVersion(f"{text!r}: empty pre-release")
    parts = core.split(".")
    if len(parts) != 3:
        raise InvalidVersion(f"{text!r}: expected MAJOR.MINOR.PATCH")
    major = _number(parts[0], "major version", text)
    minor = _number(parts[1], "minor version", text)
    patch = _number(parts[2], "patch version", text)
    pre = _identifiers(pre_text, "pre-release", text, numeric_no_zeros=True) if dash else ()
    build = _identifiers(build_text, "build", text, numeric_no_zeros=False) if plus else ()
    return Version(major, minor, patch, pre, build)


def is_valid_version(text: str) -> bool:
    """Whether :func:`parse_version` accepts ``text``."""
    try:
        parse_version(text)
    except InvalidVersion:
        return False
    return True

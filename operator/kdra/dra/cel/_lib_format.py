"""Kubernetes' format library: named string validations.

``format.named(name)`` (an optional format), ``format.<name>()`` and
``<format>.validate(s)``, which is ``optional.none()`` when ``s`` is valid and otherwise an
optional list of the problems, worded as Kubernetes' apimachinery words them.

Invariants:

* The names are exactly upstream's (``_decls.NAMED_FORMATS``).
* An unknown name gives ``optional.none()``, never an error.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from collections.abc import Callable
from typing import Any, Final

from ._lib_url import parse_url
from ._rt_core import EvalError, no_overload
from ._values import NONE, NamedFormat, Optional

__all__ = ["FORMATS", "FUNCTIONS"]

_LABEL: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN: Final = _LABEL + "(\\." + _LABEL + ")*"
_DNS1035: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_KEY_NAME: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE: Final = "(" + _KEY_NAME + ")?"
_UUID: Final = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_DATETIME: Final = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})?$"
)


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{pattern}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _full(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


def _dns1123_subdomain(value: str, unit: str = "characters") -> list[str]:
    errors = []
    if len(value) > 253:
        errors.append(f"must be no more than 253 {unit}")
    if not _full(_SUBDOMAIN, value):
        errors.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _SUBDOMAIN,
                "example.com",
            )
        )
    return errors


def _dns1123_label(value: str) -> list[str]:
    errors = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not _full(_LABEL, value):
        if _full(_SUBDOMAIN, value):
            errors.append("must not contain dots")
        else:
            errors.append(
                _regex_error(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-', and must start and end with an alphanumeric character",
                    _LABEL,
                    "my-name",
                    "123-abc",
                )
            )
    return errors


def _dns1035_label(value: str) -> list[str]:
    errors = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not _full(_DNS1035, value):
        errors.append(
            _regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                "start with an alphabetic character, and end with an alphanumeric character",
                _DNS1035,
                "my-name",
                "abc-123",
            )
        )
    return errors


def _key_name_error() -> str:
    return _regex_error(
        "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
        "with an alphanumeric character",
        _KEY_NAME,
        "MyName",
        "my.name",
        "123-abc",
    )


def _qualified_name(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a valid label key "
            + _key_name_error()
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + e for e in _dns1123_subdomain(parts[0], "bytes"))
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 bytes")
    if not _full(_KEY_NAME, name):
        errors.append("name part " + _key_name_error())
    return errors


def _label_value(value: str) -> list[str]:
    errors = []
    if len(value) > 63:
        errors.append("must be no more than 63 bytes")
    if not _full(_LABEL_VALUE, value):
        errors.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errors


def _prefix(check: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """apimachinery's maskTrailingDash: a generated-name prefix may end in '-'."""

    def checked(value: str) -> list[str]:
        if len(value) > 1 and value.endswith("-"):
            value = value[:-2] + "a"
        return check(value)

    return checked


def _uri(value: str) -> list[str]:
    try:
        parse_url(value)
    except EvalError as exc:
        return [str(exc).removeprefix("URL parse error during conversion from string: ")]
    return []


def _byte(value: str) -> list[str]:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return ["invalid base64"]
    return []


def _date(value: str) -> list[str]:
    try:
        if len(value) != 10:
            raise ValueError(value)
        datetime.date.fromisoformat(value)
    except ValueError:
        return ["invalid date"]
    return []


def _datetime(value: str) -> list[str]:
    return [] if _DATETIME.match(value) else ["invalid datetime"]


FORMATS: Final[dict[str, NamedFormat]] = {
    name: NamedFormat(name, check)
    for name, check in (
        ("dns1123Label", _dns1123_label),
        ("dns1123Subdomain", _dns1123_subdomain),
        ("dns1035Label", _dns1035_label),
        ("qualifiedName", _qualified_name),
        ("dns1123LabelPrefix", _prefix(_dns1123_label)),
        ("dns1123SubdomainPrefix", _prefix(_dns1123_subdomain)),
        ("dns1035LabelPrefix", _prefix(_dns1035_label)),
        ("labelValue", _label_value),
        ("uri", _uri),
        ("uuid", lambda v: [] if _UUID.match(v) else ["does not match the UUID format"]),
        ("byte", _byte),
        ("date", _date),
        ("datetime", _datetime),
    )
}


def g_format_named(name: Any) -> Optional:
    if type(name) is not str:
        raise no_overload("format.named", name)
    found = FORMATS.get(name)
    return Optional(found) if found is not None else NONE


def m_validate(fmt: Any, value: Any) -> Optional:
    if type(fmt) is not NamedFormat or type(value) is not str:
        raise no_overload("validate", fmt, value)
    problems = fmt.validate(value)
    return Optional(problems) if problems else NONE


FUNCTIONS: Final[dict[str, object]] = {
    "g_format_named": g_format_named,
    "m_validate": m_validate,
    **{
        f"g_format_{name}": (lambda f=fmt: f)  # format.<name>() takes no argument
        for name, fmt in FORMATS.items()
    },
}

"""The ``extendedResources`` field of a claims-annotation entry: the requests of the claim kdra
generates for a pod's extended resources (``resources.limits: {gpu.kdra.dev/gpu: 2}``).

The mutating webhook (:mod:`kdra.operator.core.extended`) writes this field when it turns a pod's
extended resources into a claim entry; the claim controller builds the pod's claim from it
(one request per container and resource, ``exactly: {deviceClassName, count}``), and each
container sees only the devices of its own requests. The field is parsed here, with the rest
of the annotation (:func:`kdra.kube.core.podclaims.parse_pod_claims`), because it is user input
like the rest: a user may write such an entry by hand, which grants nothing a claim template
would not.

Invariants:
- :func:`parse_extended_requests` returns requests whose names are DNS labels (unique),
  containers DNS labels, classes DNS subdomains, counts whole numbers in 1..32 adding up to
  at most 32 (what one allocation can hold), at most 32 requests; anything else raises
  InvalidObject naming the item and field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kdra import GROUP
from kdra.dra.errors import InvalidObject
from kdra.dra.models import DNS_LABEL, DNS_SUBDOMAIN
from kdra.kube.core.untrusted import shorten

__all__ = ["IMPLICIT_PREFIX", "MAX_EXTENDED_DEVICES", "ExtendedRequest", "class_name_error",
           "is_extended_resource_name", "parse_extended_requests"]

IMPLICIT_PREFIX = f"deviceclass.{GROUP}/"
"""Every DeviceClass serves the extended resource ``deviceclass.resource.kdra.dev/<name>``."""
MAX_EXTENDED_DEVICES = 32
"""Devices one generated claim may ask for in all (upstream: results per allocation)."""
MAX_REQUESTS = 32
"""Requests per claim (upstream's limit)."""
_KEYS = ("request", "container", "resource", "deviceClassName", "count")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class ExtendedRequest:
    """One request of a generated claim: ``count`` devices of ``device_class`` for
    ``container``, which asked for them as the extended resource ``resource``."""

    request: str
    container: str
    resource: str
    device_class: str
    count: int

    def to_json(self) -> dict[str, object]:
        return {"request": self.request, "container": self.container,
                "resource": self.resource, "deviceClassName": self.device_class,
                "count": self.count}


def is_extended_resource_name(name: object) -> bool:
    """An extended resource name as upstream defines it: ``<domain>/<name>``, not in the
    ``kubernetes.io`` namespace (a native resource) and not a quota's ``requests.`` form."""
    if not isinstance(name, str) or len(name) > 253 or "/" not in name:
        return False
    if "kubernetes.io/" in name or name.startswith("requests."):
        return False
    domain, _, rest = name.partition("/")
    return (bool(DNS_SUBDOMAIN.fullmatch(domain)) and len(rest) <= 63
            and bool(_NAME_PART.fullmatch(rest)))


def class_name_error(name: str | None) -> str | None:
    """Why a DeviceClass's ``spec.extendedResourceName`` is refused (None: it is fine)."""
    if name is None:
        return None
    if not is_extended_resource_name(name):
        return ("must be an extended resource name: <domain>/<name>, where the domain is not "
                "kubernetes.io (e.g. gpu.example.com/gpu)")
    if name.startswith(IMPLICIT_PREFIX):
        return (f"must not start with {IMPLICIT_PREFIX!r}: every class already serves "
                f"{IMPLICIT_PREFIX}<class name>")
    return None


def parse_extended_requests(where: str, value: object) -> tuple[ExtendedRequest, ...]:
    """The entry's ``extendedResources`` list (``where``: the entry's field path)."""
    field = f"{where}.extendedResources"
    if not isinstance(value, list) or not value:
        raise InvalidObject(field, "must be a non-empty list of {request, container, "
                                   "resource, deviceClassName, count}")
    if len(value) > MAX_REQUESTS:
        raise InvalidObject(field, f"at most {MAX_REQUESTS} requests (has {len(value)})")
    requests: list[ExtendedRequest] = []
    seen: set[str] = set()
    total = 0
    for index, item in enumerate(value):
        parsed = _item(f"{field}[{index}]", item)
        if parsed.request in seen:
            raise InvalidObject(f"{field}[{index}].request",
                                f"duplicate request name {parsed.request!r}")
        seen.add(parsed.request)
        total += parsed.count
        requests.append(parsed)
    if total > MAX_EXTENDED_DEVICES:
        raise InvalidObject(field, f"asks for {total} devices in all; one claim holds at most "
                                   f"{MAX_EXTENDED_DEVICES}")
    return tuple(requests)


def _item(where: str, item: object) -> ExtendedRequest:
    if not isinstance(item, dict):
        raise InvalidObject(where, "each item must be a mapping")
    for key in item:
        if key not in _KEYS:
            raise InvalidObject(f"{where}.{shorten(str(key), 40)}",
                                "unknown field; allowed: " + ", ".join(_KEYS))
    request, container = item.get("request"), item.get("container")
    resource, device_class, count = (item.get("resource"), item.get("deviceClassName"),
                                     item.get("count"))
    if not _label(request):
        raise InvalidObject(f"{where}.request", "required; a DNS label")
    if not _label(container):
        raise InvalidObject(f"{where}.container", "required; a container name (DNS label)")
    if not is_extended_resource_name(resource):
        raise InvalidObject(f"{where}.resource", "required; an extended resource name "
                                                 "(<domain>/<name>, not kubernetes.io)")
    if not (isinstance(device_class, str) and len(device_class) <= 253
            and DNS_SUBDOMAIN.fullmatch(device_class)):
        raise InvalidObject(f"{where}.deviceClassName", "required; a DeviceClass name")
    if not isinstance(count, int) or isinstance(count, bool) \
            or not 1 <= count <= MAX_EXTENDED_DEVICES:
        raise InvalidObject(f"{where}.count", "required; a whole number from 1 to "
                                              f"{MAX_EXTENDED_DEVICES}")
    assert isinstance(request, str) and isinstance(container, str)
    assert isinstance(resource, str)
    return ExtendedRequest(request, container, resource, device_class, count)


def _label(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(DNS_LABEL.fullmatch(value))

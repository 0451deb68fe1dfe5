"""Where a kind lives in the REST API: :class:`Resource`, a pure value (the shell's
:mod:`kdra.kube.resources` names the kinds kdra uses; :mod:`kdra.kube.core.flavours` the four
DRA kinds of each API flavour).

Invariants:
- Names are URL path segments, percent-quoted (:meth:`Resource.path`): a name such as
  ``../../secrets`` stays inside its collection.
- Pure values: nothing here talks to the API server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """The URL path; ``namespace``, ``name`` and ``subresource`` are each quoted as one
        path segment (a name such as ``../../secrets`` stays inside the collection)."""
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{_segment(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{_segment(name)}"
        if subresource:
            base += f"/{_segment(subresource)}"
        return base

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_PLAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
"""What almost every name is (a DNS subdomain): nothing in it needs quoting."""


def _segment(part: str) -> str:
    """``part`` as one URL path segment: percent-encoded, with ``.`` and ``..`` (which a
    server would resolve as relative paths) encoded too. A plain DNS name (never ``.`` or
    ``..``) is its own segment, without the cost of quoting it (every request builds one)."""
    if _PLAIN.fullmatch(part):
        return part
    quoted = quote(part, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted

"""Where each kind kdra uses lives in the REST API: :class:`Resource` and one constant a kind.

Invariants:
- Names are URL path segments, percent-quoted (:meth:`Resource.path`): a name such as
  ``../../secrets`` stays inside its collection.
- Pure values: nothing here talks to the API server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from kdra import GROUP, VERSION


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


CLAIMS = Resource(GROUP, VERSION, "resourceclaims", True, "ResourceClaim")
TEMPLATES = Resource(GROUP, VERSION, "resourceclaimtemplates", True, "ResourceClaimTemplate")
CLASSES = Resource(GROUP, VERSION, "deviceclasses", False, "DeviceClass")
SLICES = Resource(GROUP, VERSION, "resourceslices", False, "ResourceSlice")
PODS = Resource("", "v1", "pods", True, "Pod")
NODES = Resource("", "v1", "nodes", False, "Node")
EVENTS = Resource("events.k8s.io", "v1", "events", True, "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
SECRETS = Resource("", "v1", "secrets", True, "Secret")
SERVICES = Resource("", "v1", "services", True, "Service")
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1",
                             "mutatingwebhookconfigurations", False,
                             "MutatingWebhookConfiguration")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False,
                "CustomResourceDefinition")
VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1",
                               "validatingwebhookconfigurations", False,
                               "ValidatingWebhookConfiguration")
NATIVE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", True, "ResourceClaim")
NATIVE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", False, "ResourceSlice")
"""Native DRA (``resource.k8s.io/v1``, the native flavour): what the agent publishes and the
kubelet asks it to prepare."""

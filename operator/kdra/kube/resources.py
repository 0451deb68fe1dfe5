"""Where each kind kdra uses lives in the REST API: one :class:`Resource` constant a kind (the
four DRA kinds of each API flavour: :mod:`kdra.kube.core.flavours`).

Invariants:
- Names are URL path segments, percent-quoted (:meth:`Resource.path`): a name such as
  ``../../secrets`` stays inside its collection.
- Pure values: nothing here talks to the API server.
"""

from __future__ import annotations

from kdra import GROUP, VERSION
from kdra.kube.core.flavours import NATIVE
from kdra.kube.core.paths import Resource

__all__ = ["CLAIMS", "CLASSES", "CRDS", "EVENTS", "LEASES", "MUTATING_WEBHOOKS", "NAMESPACES",
           "NODES", "PODS", "POD_GROUPS", "SECRETS", "SERVICES", "SERVICE_ACCOUNTS", "SLICES",
           "TEMPLATES", "VALIDATING_WEBHOOKS", "Resource"]

CLAIMS = Resource(GROUP, VERSION, "resourceclaims", True, "ResourceClaim")
TEMPLATES = Resource(GROUP, VERSION, "resourceclaimtemplates", True, "ResourceClaimTemplate")
CLASSES = Resource(GROUP, VERSION, "deviceclasses", False, "DeviceClass")
SLICES = Resource(GROUP, VERSION, "resourceslices", False, "ResourceSlice")
PODS = Resource("", "v1", "pods", True, "Pod")
NODES = Resource("", "v1", "nodes", False, "Node")
EVENTS = Resource("events.k8s.io", "v1", "events", True, "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
POD_GROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", True, "PodGroup")
"""scheduler-plugins' PodGroup (manifests/optional/podgroups-crd.yaml): the operator reads it
where its CRD is installed (docs/gangs.md)."""
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
SECRETS = Resource("", "v1", "secrets", True, "Secret")
SERVICES = Resource("", "v1", "services", True, "Service")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", True, "ServiceAccount")
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1",
                             "mutatingwebhookconfigurations", False,
                             "MutatingWebhookConfiguration")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False,
                "CustomResourceDefinition")
VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1",
                               "validatingwebhookconfigurations", False,
                               "ValidatingWebhookConfiguration")
NATIVE_CLAIMS = NATIVE.claims  # the native flavour's kinds (kdra.kube.core.flavours)
NATIVE_SLICES = NATIVE.slices
"""Native DRA (``resource.k8s.io/v1``, the native flavour): what the agent publishes and the
kubelet asks it to prepare."""

"""Typed models of kdra's API, group ``resource.kdra.dev``: the storage version ``v1`` that
every component of kdra reads and writes (upstream ``resource.k8s.io/v1``, Kubernetes 1.36,
field for field), and the conversion to and from the seed's ``v1alpha3`` shape (1.31).

Parse once at the edge (``parse_claim(obj)`` ...), then work with typed, frozen values.

Modules, one job each:

- ``crd`` — how the models carry their CustomResourceDefinition schema (they are its one
  source: ``python -m hack.crdgen`` writes ``crds/`` and the chart's copies from them);
- ``base`` — the model base, metadata, node selectors, limits, :func:`parse` / :func:`dump`;
- ``v1`` — ResourceClaim, ResourceClaimTemplate, DeviceClass;
- ``v1_claim_spec`` / ``v1_claim_status`` — a claim's spec (requests, constraints, config)
  and status (allocation, reservations, device statuses);
- ``v1_slices`` / ``v1_devices`` — ResourceSlice, and its devices;
- ``v1alpha3`` — the 1.31 shape: how each part of a v1 object looks in v1alpha3 and back;
- ``conversion`` — whole objects and ConversionReviews, with the annotation that carries
  what v1alpha3 cannot express.
"""

from kdra.dra.models.base import (
    C_IDENTIFIER,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    MAX_ATTRIBUTE_STRING_LENGTH,
    MAX_ATTRIBUTES_AND_CAPACITY,
    MAX_DEVICES_PER_CLAIM,
    MAX_DEVICES_PER_SLICE,
    MAX_RESERVED_FOR,
    MAX_SUBREQUESTS,
    All,
    CELDeviceSelector,
    Condition,
    DeviceConfiguration,
    DeviceSelector,
    ExactCount,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectMeta,
    OpaqueDeviceConfiguration,
    OwnerReference,
    dump,
    field_path,
    parse,
    qualified_name_problem,
)
from kdra.dra.models.v1 import (
    DeviceClass,
    DeviceClassConfiguration,
    DeviceClassSpec,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
    TemplateMeta,
    parse_claim,
    parse_class,
    parse_template,
)
from kdra.dra.models.v1_claim_spec import (
    BaseDeviceRequest,
    CapacityRequirements,
    DeviceClaim,
    DeviceClaimConfiguration,
    DeviceConstraint,
    DeviceRequest,
    DeviceSubRequest,
    DeviceToleration,
    ExactDeviceRequest,
    ResourceClaimSpec,
)
from kdra.dra.models.v1_claim_status import (
    AllocatedDeviceStatus,
    AllocationResult,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    NetworkDeviceData,
    ResourceClaimConsumerReference,
    ResourceClaimStatus,
)
from kdra.dra.models.v1_devices import (
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceTaint,
)
from kdra.dra.models.v1_slices import (
    ResourcePool,
    ResourceSlice,
    ResourceSliceSpec,
    parse_slice,
)

__all__ = [
    "C_IDENTIFIER",
    "DNS_LABEL",
    "DNS_SUBDOMAIN",
    "MAX_ATTRIBUTES_AND_CAPACITY",
    "MAX_ATTRIBUTE_STRING_LENGTH",
    "MAX_DEVICES_PER_CLAIM",
    "MAX_DEVICES_PER_SLICE",
    "MAX_RESERVED_FOR",
    "MAX_SUBREQUESTS",
    "All",
    "AllocatedDeviceStatus",
    "AllocationResult",
    "BaseDeviceRequest",
    "CELDeviceSelector",
    "CapacityRequirements",
    "Condition",
    "Device",
    "DeviceAllocationConfiguration",
    "DeviceAllocationResult",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceClaim",
    "DeviceClaimConfiguration",
    "DeviceClass",
    "DeviceClassConfiguration",
    "DeviceClassSpec",
    "DeviceConfiguration",
    "DeviceConstraint",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSelector",
    "DeviceSubRequest",
    "DeviceTaint",
    "DeviceToleration",
    "ExactCount",
    "ExactDeviceRequest",
    "NetworkDeviceData",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ObjectMeta",
    "OpaqueDeviceConfiguration",
    "OwnerReference",
    "ResourceClaim",
    "ResourceClaimConsumerReference",
    "ResourceClaimSpec",
    "ResourceClaimStatus",
    "ResourceClaimTemplate",
    "ResourceClaimTemplateSpec",
    "ResourcePool",
    "ResourceSlice",
    "ResourceSliceSpec",
    "TemplateMeta",
    "dump",
    "field_path",
    "parse",
    "parse_claim",
    "parse_class",
    "parse_slice",
    "parse_template",
    "qualified_name_problem",
]

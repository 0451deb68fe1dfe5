"""The v1 schemas of ResourceClaim (spec + status), ResourceClaimTemplate and DeviceClass.

Pieces whose shape did not change from v1alpha3 (selectors, opaque configuration, node
selectors, reservedFor, device statuses) are borrowed from the v1alpha3 schema of the same
CRD, so both versions describe them in the same words.
"""

from __future__ import annotations

from typing import Any

from crdgen.schema import (
    CONDITION_TYPE,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    FULLY_QUALIFIED,
    LABEL_NAME,
    LABEL_VALUE,
    REQUEST_REF,
    UUID,
    Node,
    arr,
    boolean,
    borrowed,
    integer,
    map_of,
    obj,
    qualified_keys,
    quantity,
    rule,
    string,
)

Alpha = dict[str, Any]


def _props(node: Node, *path: str) -> Node:
    for key in path:
        node = node["items"] if key == "[]" else node["properties"][key]
    return node


def toleration_schema() -> Node:
    return obj(
        "A toleration: which device taints the request accepts (upstream's matching: empty "
        "key with `Exists` matches every taint, empty effect every effect).",
        {
            "key": string("The taint key to match; empty matches every key (then `operator` "
                          "must be `Exists`). A label name.", max_length=317,
                          pattern=LABEL_NAME),
            "operator": string("`Equal` (the default: key and value must match) or `Exists` "
                               "(any value; `value` must be empty).",
                               enum=["Exists", "Equal"], default="Equal", max_length=8),
            "value": string("The taint value to match with `Equal`. A label value.",
                            max_length=63, pattern=LABEL_VALUE),
            "effect": string("The taint effect to match; empty matches every effect.",
                             enum=["None", "NoSchedule", "NoExecute"], max_length=16),
            "tolerationSeconds": integer(
                "For `NoExecute`: how long a pod may keep using the device after it is "
                "tainted; unset tolerates for ever, zero or less evicts at once."),
        },
        rules=[rule("!has(self.operator) || self.operator != 'Exists' || !has(self.value) "
                    "|| self.value == ''",
                    "value must be empty when operator is Exists", field_path=".value")])


def _counted(alpha_request: Node, *, subrequest: bool) -> Node:
    """The fields ``exactly`` and a sub-request share (plus ``adminAccess`` for ``exactly``)."""
    who = "this sub-request" if subrequest else "the request"
    properties: dict[str, Node] = {}
    if subrequest:
        properties["name"] = string(
            "Name of the sub-request, unique within its request. The allocation result names "
            "the chosen sub-request `<request>/<subrequest>`, and constraints and config may "
            "refer to it that way. A DNS label.",
            min_length=1, max_length=63, pattern=DNS_LABEL)
    properties["deviceClassName"] = borrowed(_props(alpha_request, "deviceClassName"))
    properties["selectors"] = borrowed(_props(alpha_request, "selectors"))
    properties["allocationMode"] = borrowed(_props(alpha_request, "allocationMode"))
    properties["count"] = borrowed(_props(alpha_request, "count"))
    if not subrequest:
        properties["adminAccess"] = borrowed(
            _props(alpha_request, "adminAccess"),
            "Ask for administrative access: the devices are handed out even if they are "
            "already allocated to other claims, for monitoring or maintenance tools, and they "
            "are not taken away from others. Only allowed in namespaces labelled "
            "`resource.kdra.dev/admin-access: \"true\"`. Defaults to false.")
    properties["tolerations"] = arr(
        f"Device taints {who} tolerates: a device with a `NoSchedule` or `NoExecute` taint "
        "is allocated only when a toleration matches it, and a pod using a device with a "
        "`NoExecute` taint is evicted after `tolerationSeconds` (never, without). At most 16.",
        toleration_schema(), max_items=16)
    properties["capacity"] = obj(
        f"How much of each capacity {who} needs from each device (consumable capacity): "
        "a device must have that much; a device that allows multiple allocations gives a "
        "share of it, rounded up by the capacity's `requestPolicy`, while enough is left.",
        {"requests": map_of(
            "Capacity name (same naming rules as a device's capacity) to the amount needed.",
            quantity("An amount: an integer or a quantity string such as `40Gi`."),
            max_properties=32, rules=[qualified_keys("capacity", "memory")])})
    required = ["name", "deviceClassName"] if subrequest else ["deviceClassName"]
    return obj(
        ("One alternative of a `firstAvailable` request: which devices it takes and how many."
         if subrequest else
         "A request for devices of one kind: the class, extra selectors, how many."),
        properties, required=required,
        rules=[borrowed(alpha_request["x-kubernetes-validations"][0])])


def device_claim(alpha_spec: Node) -> Node:
    """``spec.devices`` of a v1 claim (and of a template's ``spec.spec``)."""
    alpha_devices = _props(alpha_spec, "devices")
    alpha_requests = _props(alpha_devices, "requests")
    alpha_request = alpha_requests["items"]
    ref = string("Name of one request of this claim, or `<request>/<subrequest>` for one "
                 "sub-request of a `firstAvailable` request.",
                 min_length=1, max_length=127, pattern=REQUEST_REF)
    request = obj(
        "One request for devices: `exactly` one kind of device, or a prioritized list "
        "(`firstAvailable`) of alternatives tried in order. Every request must be satisfied "
        "for the claim to be allocated.",
        {
            "name": borrowed(_props(alpha_request, "name")),
            "exactly": _counted(alpha_request, subrequest=False),
            "firstAvailable": arr(
                "Alternatives, best first: kdra allocates the first one that can be satisfied "
                "(and, across nodes, prefers a node where an earlier one fits). Results name "
                "the chosen one `<request>/<subrequest>`. Sub-request names must be unique. "
                "1 to 8 entries.",
                _counted(alpha_request, subrequest=True), min_items=1, max_items=8,
                rules=[rule("self.all(s, self.exists_one(o, o.name == s.name))",
                            "firstAvailable[].name values must be unique within a request")]),
        },
        required=["name"],
        rules=[rule("has(self.exactly) != has(self.firstAvailable)",
                    "exactly one of `exactly` or `firstAvailable` must be set")])
    constraint = obj(
        "A condition that spans several devices of this claim: exactly one of "
        "`matchAttribute` and `distinctAttribute`.",
        {
            "requests": arr(
                "Requests whose devices the constraint covers; empty: all of the claim's. "
                "`<request>` covers whichever sub-request is chosen, `<request>/<subrequest>` "
                "only that one. Every name must exist in `requests`.",
                ref, max_items=32),
            "matchAttribute": borrowed(_props(alpha_devices, "constraints", "[]",
                                              "matchAttribute"),
                                       "Fully qualified name of a device attribute "
                                       "(`<domain>/<name>`) whose value must be the same on "
                                       "every covered device (GPUs of one model, devices "
                                       "behind one PCIe root). A device without the "
                                       "attribute cannot be chosen."),
            "distinctAttribute": string(
                "Fully qualified name of a device attribute (`<domain>/<name>`) whose value "
                "must differ between every two covered devices (for example two NICs on "
                "different physical ports). A device without the attribute cannot be chosen.",
                min_length=3, max_length=96, pattern=FULLY_QUALIFIED,
                rules=[rule("self.indexOf('/') <= 63",
                            "the domain part of distinctAttribute (before '/') must be at most "
                            "63 characters")]),
        },
        rules=[rule("has(self.matchAttribute) != has(self.distinctAttribute)",
                    "exactly one of matchAttribute or distinctAttribute must be set")])
    alpha_config = _props(alpha_devices, "config", "[]")
    config = borrowed(alpha_config)
    config["properties"]["requests"] = arr(
        "Names of the requests (or `<request>/<subrequest>`) this configuration applies to; "
        "empty: every request. Every name must exist in `requests`.", ref, max_items=32)
    names_known = (
        "c.requests.all(n, self.requests.exists(r, r.name == n || n.startsWith(r.name + '/')))")
    return obj(
        alpha_devices["description"],
        {
            "requests": arr(
                "The device requests. Every request must be satisfied for the claim to be "
                "allocated. Request names must be unique. At most 32.",
                request, max_items=32,
                rules=[borrowed(alpha_requests["x-kubernetes-validations"][0])]),
            "constraints": arr(
                "Conditions that must hold across the devices of several requests (all on "
                "one PCIe root, all different NICs, ...). At most 32.",
                constraint, max_items=32),
            "config": borrowed(_props(alpha_devices, "config"), items=config),
        },
        rules=[
            rule(f"!has(self.constraints) || self.constraints.all(c, !has(c.requests) || "
                 f"{names_known})",
                 "every name in constraints[].requests must name a request in requests[] "
                 "(or `<request>/<subrequest>` of a firstAvailable request); fix the typo or "
                 "add the missing request", field_path=".constraints"),
            rule(f"!has(self.config) || self.config.all(c, !has(c.requests) || {names_known})",
                 "every name in config[].requests must name a request in requests[] (or "
                 "`<request>/<subrequest>` of a firstAvailable request); fix the typo or add "
                 "the missing request", field_path=".config"),
        ])


def claim_spec(alpha_spec: Node) -> Node:
    return borrowed(alpha_spec, properties={"devices": device_claim(alpha_spec)})


def claim_status(alpha_status: Node) -> Node:
    alpha_allocation = _props(alpha_status, "allocation")
    alpha_devices = _props(alpha_allocation, "devices")
    alpha_result = _props(alpha_devices, "results", "[]")
    result = borrowed(alpha_result)
    props = result["properties"]
    props["request"] = borrowed(
        props["request"], "Name of the request in `spec.devices.requests` this device was "
        "allocated for; `<request>/<subrequest>` when the request is a `firstAvailable` list "
        "(naming the alternative that was chosen).", maxLength=127, pattern=REQUEST_REF)
    props["adminAccess"] = boolean(
        "True when the device was allocated with administrative access (the request's "
        "`adminAccess`): it does not count as in use for other claims.")
    props["tolerations"] = arr("The request's tolerations at allocation time. At most 16.",
                               toleration_schema(), max_items=16)
    condition_name = string("A condition type.", max_length=316, pattern=CONDITION_TYPE)
    props["bindingConditions"] = arr(
        "Conditions (copied from the device) that must be True in `status.devices` before "
        "the pod may bind. At most 4.", condition_name, max_items=4)
    props["bindingFailureConditions"] = arr(
        "Conditions (copied from the device) that, when True, make binding fail. At most 4.",
        condition_name, max_items=4)
    props["shareID"] = string(
        "Identifies this allocation of a device that allows multiple allocations (a UUID).",
        max_length=36, pattern=UUID)
    props["consumedCapacity"] = map_of(
        "How much of each capacity this allocation consumes (devices that allow multiple "
        "allocations).", quantity("An amount."), max_properties=32,
        rules=[qualified_keys("capacity", "memory")])
    allocation_devices = borrowed(alpha_devices)
    allocation_devices["properties"]["results"] = borrowed(
        _props(alpha_devices, "results"), items=result)
    alpha_config = _props(alpha_devices, "config", "[]")
    config = borrowed(alpha_config)
    config["properties"]["requests"] = borrowed(
        config["properties"]["requests"],
        "Names of the requests (or `<request>/<subrequest>`) the entry applies to; empty "
        "means all requests of the claim.",
        items=string("A request name, or `<request>/<subrequest>`.", min_length=1,
                     max_length=127, pattern=REQUEST_REF))
    allocation_devices["properties"]["config"] = borrowed(_props(alpha_devices, "config"),
                                                          items=config)
    allocation = borrowed(alpha_allocation)
    allocation["properties"]["devices"] = allocation_devices
    allocation["properties"]["allocationTimestamp"] = string(
        "When the devices were allocated (RFC 3339); may be unset.", fmt="date-time",
        max_length=64)
    status = borrowed(alpha_status)
    status["properties"]["allocation"] = allocation
    status["properties"]["reservedFor"] = borrowed(
        _props(alpha_status, "reservedFor"),
        "The objects (normally pods) currently allowed to use the allocated devices. kdra's "
        "binder adds a pod just before binding it; the claim controller removes pods that "
        "have finished or are gone, and clears the allocation when the list becomes empty. A "
        "claim can only be reserved while it is allocated. Keyed by `uid`; at most 256 "
        "entries.", maxItems=256)
    device_status = borrowed(_props(alpha_status, "devices"))
    device_status["items"]["properties"]["shareID"] = string(
        "For a device that allows multiple allocations: which allocation of it this entry "
        "describes (the result's `shareID`).", max_length=36, pattern=UUID)
    status["properties"]["devices"] = device_status
    return status


def class_spec(alpha_spec: Node) -> Node:
    spec = borrowed(alpha_spec)
    spec["properties"]["extendedResourceName"] = string(
        "An extended resource name (`example.com/gpu`) pods may ask for in "
        "`resources.requests` to get a device of this class without writing a claim. "
        "Accepted; kdra does not act on it yet.", max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)"
                r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    return spec


def template_spec(alpha_spec: Node) -> Node:
    spec = borrowed(alpha_spec)
    spec["properties"]["spec"] = claim_spec(_props(alpha_spec, "spec"))
    return spec


__all__ = ["DNS_SUBDOMAIN", "claim_spec", "claim_status", "class_spec", "template_spec"]

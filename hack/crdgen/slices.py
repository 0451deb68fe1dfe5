"""The v1 schema of ResourceSlice: flat devices, capacities as ``{value, requestPolicy}``,
and the fields of features kdra does not act on yet (accepted, kept, and such devices are
never allocated until kdra implements them)."""

from __future__ import annotations

from crdgen.schema import (
    CONDITION_TYPE,
    DNS_LABEL,
    LABEL_NAME,
    LABEL_VALUE,
    Node,
    arr,
    boolean,
    borrowed,
    map_of,
    obj,
    qualified_keys,
    quantity,
    rule,
    string,
)

NOT_YET = ("Accepted and kept, but kdra does not implement this feature yet: it never "
           "allocates a device that uses it (the pod is told why).")


def _props(node: Node, *path: str) -> Node:
    for key in path:
        node = node["items"] if key == "[]" else node["properties"][key]
    return node


def _attribute(alpha_value: Node) -> Node:
    value = borrowed(alpha_value)
    props = value["properties"]
    props["ints"] = arr("A list of integers (list-typed attribute). " + NOT_YET,
                        {"type": "integer", "format": "int64"}, min_items=1, max_items=48)
    props["bools"] = arr("A list of booleans (list-typed attribute). " + NOT_YET,
                         {"type": "boolean"}, min_items=1, max_items=48)
    props["strings"] = arr("A list of strings of at most 64 characters (list-typed "
                           "attribute). " + NOT_YET,
                           {"type": "string", "maxLength": 64}, min_items=1, max_items=48)
    props["versions"] = arr("A list of semantic versions (list-typed attribute). " + NOT_YET,
                            borrowed(props["version"], "A semantic version."),
                            min_items=1, max_items=48)
    kinds = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
    value["x-kubernetes-validations"] = [rule(
        " + ".join(f"(has(self.{k}) ? 1 : 0)" for k in kinds) + " == 1",
        "exactly one of int, bool, string, version, ints, bools, strings or versions must be "
        "set in an attribute value")]
    value["description"] = ("The value of one attribute: exactly one of `int`, `bool`, "
                            "`string` (at most 64 characters), `version` (strict semantic "
                            "version) — or, for list-typed attributes, `ints`, `bools`, "
                            "`strings`, `versions`.")
    return value


def _counters(what: str) -> Node:
    return map_of(f"{what}: counter name (a DNS label) to its amount. At most 32.",
                  obj("One counter.", {"value": quantity("The amount.")}, required=["value"]),
                  max_properties=32,
                  rules=[rule(f"self.all(k, k.size() <= 63 && k.matches('{DNS_LABEL}'))",
                              "counter names must be DNS labels")])


def _capacity() -> Node:
    policy = obj(
        "How the capacity may be consumed by several allocations (devices with "
        "`allowMultipleAllocations` only): what a request asks is rounded up to the next "
        "valid amount; a request that asks nothing consumes `default` (else everything).",
        {
            "default": quantity("What an allocation consumes when its request does not say."),
            "validValues": arr("The amounts an allocation may consume, ascending. At most 10.",
                               quantity("An amount."), max_items=10),
            "validRange": obj("The range an allocation may consume.", {
                "min": quantity("Least amount (required)."),
                "max": quantity("Largest amount."),
                "step": quantity("Amounts must be `min` plus a multiple of `step`."),
            }, required=["min"]),
        },
        rules=[rule("!(has(self.validValues) && has(self.validRange))",
                    "only one of validValues and validRange may be set")])
    return obj(
        "One capacity of the device.",
        {"value": quantity("How much the device has: an integer or a quantity string such "
                           "as `80Gi`, `1.5`, `250m`. CEL: "
                           "`device.capacity[\"<domain>\"].memory.compareTo(quantity(\"40Gi\")) "
                           ">= 0`."),
         "requestPolicy": policy},
        required=["value"])


def _taint() -> Node:
    return obj(
        "A taint the driver put on the device.",
        {
            "key": string("The taint key, a label name.", min_length=1, max_length=317,
                          pattern=LABEL_NAME),
            "value": string("The taint value, a label value.", max_length=63,
                            pattern=LABEL_VALUE),
            "effect": string("`NoSchedule` (not allocated unless tolerated), `NoExecute` (also "
                             "evicts pods that do not tolerate it) or `None` (informational).",
                             enum=["None", "NoSchedule", "NoExecute"], max_length=16),
            "timeAdded": string("When the taint was added (RFC 3339).", fmt="date-time",
                                max_length=64),
        },
        required=["key", "effect"])


def _device(alpha_device: Node, alpha_spec: Node) -> Node:
    alpha_basic = _props(alpha_device, "basic")
    attributes = borrowed(_props(alpha_basic, "attributes"))
    attributes["additionalProperties"] = _attribute(attributes["additionalProperties"])
    condition = string("A condition type.", max_length=316, pattern=CONDITION_TYPE)
    properties = {
        "name": borrowed(_props(alpha_device, "name")),
        "attributes": attributes,
        "capacity": map_of(
            "Amounts the device has, by name (same naming rules as `attributes`). Attributes "
            "and capacities together: at most 32 per device.",
            _capacity(), max_properties=32, rules=[qualified_keys("capacity", "memory")]),
        "consumesCounters": arr(
            "Counters of the slice's pool this device uses up when allocated (partitionable "
            "devices, e.g. a MIG slice of a GPU). At most 2 entries, one per counter set. "
            "The device is allocated only while every counter it consumes stays within the "
            "set's total, counting every allocated device of the pool.",
            obj("What the device consumes from one counter set.", {
                "counterSet": string("Name of a counter set in the pool's `sharedCounters`.",
                                     min_length=1, max_length=63, pattern=DNS_LABEL),
                "counters": _counters("The amounts"),
            }, required=["counterSet", "counters"]), max_items=2,
            rules=[rule("self.all(c, self.exists_one(o, o.counterSet == c.counterSet))",
                        "one entry per counter set")]),
        "nodeName": borrowed(_props(alpha_spec, "nodeName"),
                             "With `perDeviceNodeSelection`: the node that has this device "
                             "(the device is offered only there; its allocation is pinned "
                             "to that node)."),
        "nodeSelector": borrowed(_props(alpha_spec, "nodeSelector"),
                                 "With `perDeviceNodeSelection`: the nodes that can reach "
                                 "this device (exactly one term; the allocation carries it)."),
        "allNodes": boolean("With `perDeviceNodeSelection`: every node can reach this device "
                            "(only `true` may be set)."),
        "taints": arr("Taints on the device. A device with a `NoSchedule` or `NoExecute` "
                      "taint is allocated only to requests that tolerate it; `NoExecute` also "
                      "evicts pods using it that do not tolerate it; `None` taints are "
                      "informational. kdra's agent taints unhealthy devices "
                      "`gpu.kdra.dev/unhealthy`. At most 16.", _taint(), max_items=16),
        "bindsToNode": boolean("The allocation must be limited to the node chosen at "
                               "allocation time (its nodeSelector names that node)."),
        "bindingConditions": arr("Conditions that must be True in the claim's "
                                 "`status.devices` before a pod using the device may bind "
                                 "(the binder waits for them instead of the node agent's "
                                 "`Ready`, at most --binding-timeout, 600 s). At most 4.",
                                 condition, max_items=4),
        "bindingFailureConditions": arr("Conditions that, when True, make binding fail: the "
                                        "allocation is undone and the pod tried on another "
                                        "node. At most 4.", condition, max_items=4),
        "allowMultipleAllocations": boolean(
            "The device may be allocated to several claims at once, each consuming part of "
            "its capacity (consumable capacity); each allocation is a share with its own "
            "`shareID` and `consumedCapacity`."),
        "nodeAllocatableResourceMappings": map_of(
            "How allocating the device counts against the node's allocatable resources "
            "(resource name, e.g. `cpu`, to a mapping). " + NOT_YET,
            obj("One mapping.", {
                "capacityKey": string("A capacity of the device whose value is counted.",
                                      max_length=96),
                "allocationMultiplier": quantity("Factor applied to the device count or to "
                                                 "the capacity (default 1)."),
            }), max_properties=32),
    }
    device = obj(
        "One device: its name, attributes and capacities, and the fields of newer features.",
        properties, required=["name"])
    device["x-kubernetes-validations"] = [
        rule("(has(self.attributes) ? size(self.attributes) : 0) + (has(self.capacity) ? "
             "size(self.capacity) : 0) <= 32",
             "a device may have at most 32 attributes and capacities together (attributes + "
             "capacity); drop some or move them to another device"),
        rule("!has(self.capacity) || (has(self.allowMultipleAllocations) && "
             "self.allowMultipleAllocations) || self.capacity.all(k, "
             "!has(self.capacity[k].requestPolicy))",
             "capacity[].requestPolicy may only be set when allowMultipleAllocations is true",
             field_path=".capacity"),
        rule("has(self.bindingConditions) == has(self.bindingFailureConditions)",
             "bindingConditions and bindingFailureConditions must be set together"),
        rule("!has(self.allNodes) || self.allNodes",
             "allNodes may only be set to true", field_path=".allNodes"),
    ]
    return device


def slice_spec(alpha_spec: Node) -> Node:
    alpha_devices = _props(alpha_spec, "devices")
    device = _device(alpha_devices["items"], alpha_spec)
    spec = borrowed(alpha_spec)
    spec["description"] = (
        "What the driver publishes: the driver, the pool, which nodes can reach the devices, "
        "and the devices (or the pool's shared counters). Exactly one of `nodeName`, "
        "`nodeSelector`, `allNodes: true` and `perDeviceNodeSelection: true` must be set.")
    props = spec["properties"]
    props["perDeviceNodeSelection"] = boolean(
        "Each device says itself which nodes can reach it (`nodeName`, `nodeSelector` or "
        "`allNodes` on the device; only `true` may be set).")
    props["devices"] = borrowed(
        alpha_devices,
        "The devices of this slice (some or all of the pool's). At most 128, or 64 when a "
        "device has taints, consumes counters or has list-typed attributes. Not together "
        "with `sharedCounters`.",
        items=device)
    props["devices"]["x-kubernetes-validations"].append(rule(
        "size(self) <= 64 || !self.exists(d, has(d.taints) || has(d.consumesCounters) || "
        "(has(d.attributes) && d.attributes.exists(k, has(d.attributes[k].ints) || "
        "has(d.attributes[k].bools) || has(d.attributes[k].strings) || "
        "has(d.attributes[k].versions))))",
        "at most 64 devices per slice when a device has taints, consumes counters or has "
        "list-typed attributes"))
    props["sharedCounters"] = arr(
        "Counter sets of the pool that partitionable devices consume from (published in a "
        "slice of their own, without devices). At most 8, names unique. Devices of the "
        "pool that consume from a set the pool does not publish are never allocated.",
        obj("A named set of counters.", {
            "name": string("Name of the counter set, a DNS label.", min_length=1,
                           max_length=63, pattern=DNS_LABEL),
            "counters": _counters("The counters"),
        }, required=["name", "counters"]), max_items=8,
        rules=[rule("self.all(c, self.exists_one(o, o.name == c.name))",
                    "sharedCounters[].name values must be unique")])
    rules = spec["x-kubernetes-validations"]
    rules[0] = rule(
        "(has(self.nodeName) ? 1 : 0) + (has(self.nodeSelector) ? 1 : 0) + (has(self.allNodes) "
        "&& self.allNodes ? 1 : 0) + (has(self.perDeviceNodeSelection) && "
        "self.perDeviceNodeSelection ? 1 : 0) == 1",
        "exactly one of spec.nodeName, spec.nodeSelector, spec.allNodes: true or "
        "spec.perDeviceNodeSelection: true must be set: nodeName for devices local to one "
        "node, nodeSelector for devices several nodes can reach, allNodes for devices every "
        "node can reach, perDeviceNodeSelection when each device says it")
    rules.append(rule("!(has(self.devices) && size(self.devices) > 0 && "
                      "has(self.sharedCounters))",
                      "only one of devices and sharedCounters may be set"))
    rules.append(rule(
        "!has(self.devices) || ((has(self.perDeviceNodeSelection) && "
        "self.perDeviceNodeSelection) ? self.devices.all(d, (has(d.nodeName) ? 1 : 0) + "
        "(has(d.nodeSelector) ? 1 : 0) + (has(d.allNodes) ? 1 : 0) == 1) : "
        "self.devices.all(d, !has(d.nodeName) && !has(d.nodeSelector) && !has(d.allNodes)))",
        "with perDeviceNodeSelection every device must set exactly one of nodeName, "
        "nodeSelector and allNodes; without it no device may set them",
        field_path=".devices"))
    return spec

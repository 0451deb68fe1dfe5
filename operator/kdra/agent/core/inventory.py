"""A node's fake inventory file: parsing and validating it into an :class:`Inventory`.

The node agent discovers devices with a backend (NVML on real GPUs, or the fake inventory file
parsed here) and publishes them (:mod:`kdra.agent.core.publication`); this module reads the file,
with no I/O:

- :func:`parse_inventory` reads the inventory YAML (GPU profiles like ``8 x H100-80GB`` and
  arbitrary devices of any driver, e.g. the seed's cats with ``color``/``size``) and returns
  an :class:`Inventory`, or raises InvalidObject naming the file, line and field;
  :func:`parse_inventory_sections` the two sections apart (``gpus``: the ``fake-gpu``
  backend's, ``devices``: the ``generic`` backend's, :mod:`kdra.agent.backends`).
- :func:`expand_names` reads the node names one agent process simulates (``node-{0..99}``).

The devices themselves (:class:`InventoryDevice`, and the attributes both discovery backends
give a GPU) are in :mod:`kdra.agent.core.inventory_devices`.

Inventory format (every key optional, unknown keys are errors)::

    driver: gpu.kdra.dev            # default driver of the entries below
    gpus:
    - 8 x H100-80GB                 # shorthand: count x profile (see gpu_profiles)
    - profile: A100-40GB            # long form
      count: 4
      numaNodes: 2                  # GPUs are spread evenly over NUMA nodes (default 2, or 1)
      gpusPerPcieRoot: 2            # GPUs sharing one PCIe root complex (default 2)
      driverVersion: 550.54.15
      cudaDriverVersion: 12.4.0
      unhealthy: [3]                # local indexes reported unhealthy
      partitions: mig               # also publish MIG-like partitions (docs/partitions.md)
      sharing: memory               # or: one device many claims share by memory
    devices:
    - name: kitten-0                # a DNS label
      driver: resource-driver.example.com
      attributes: {color: white, size: small}    # str/int/bool, or {version: 1.2.3}
      capacity: {memory: 1Gi}
    - name: widget                  # with count: widget-0 ... widget-299
      count: 300

GPUs are named ``gpu-<index>`` with one index sequence across all ``gpus`` entries.

Invariants:
- Pure: parsing reads no files and no clocks; the same input gives the same devices and
  names (a restarted agent publishes identical content).
- Every device this module emits passes the API's rules (DNS-label names unique per driver,
  at most 32 attributes + capacities, strings at most 64 characters, versions strict semver,
  capacities valid quantities), so a publication is never rejected for its content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NoReturn

import yaml

from kdra.agent.core.gpu_modes import gpu_mode
from kdra.agent.core.gpu_profiles import (
    DEFAULT_CUDA_DRIVER_VERSION,
    DEFAULT_DRIVER_VERSION,
    GPU_DRIVER,
    GPU_PROFILES,
    fake_gpu_uuid,
    fake_pci_bus_id,
    gpu_attributes,
    parse_gpu_shorthand,
)
from kdra.agent.core.inventory_devices import (
    AttributeValue,
    Inventory,
    InventoryDevice,
)
from kdra.dra.errors import InvalidObject
from kdra.dra.models import (
    C_IDENTIFIER,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    MAX_ATTRIBUTE_STRING_LENGTH,
    MAX_ATTRIBUTES_AND_CAPACITY,
)
from kdra.dra.quantity import is_valid_quantity
from kdra.dra.semver import is_valid_version

MAX_GPUS = 4096


# --------------------------------------------------------------------------- parsing


class _Doc:
    """The inventory's YAML with the line of every value, for error messages."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.lines: dict[str, int] = {}
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
            self.data = self._convert(loader, root, "") if root is not None else None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else 0
            raise InvalidObject("<root>", "not valid YAML: " + " ".join(str(exc).split()),
                                obj=self.where(line)) from exc
        finally:
            loader.dispose()

    def _convert(self, loader: yaml.SafeLoader, node: yaml.Node, path: str) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = loader.construct_object(key_node)
                if not isinstance(key, str):
                    self.fail(path, f"keys must be strings (got {key!r})")
                child = f"{path}.{key}" if path else key
                if key in result:
                    self.lines[child] = key_node.start_mark.line + 1
                    self.fail(child, "duplicate key")
                self.lines[child] = key_node.start_mark.line + 1
                result[key] = self._convert(loader, value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self._convert(loader, item, f"{path}[{index}]")
                    for index, item in enumerate(node.value)]
        return loader.construct_object(node)

    def where(self, line: int) -> str:
        return f"{self.source} line {line}" if line else self.source

    def fail(self, path: str, message: str) -> NoReturn:
        raise InvalidObject(path or "<root>", message, obj=self.where(self.line_of(path)))

    def line_of(self, path: str) -> int:
        """The line of ``path``, or of its nearest ancestor that has one."""
        while path not in self.lines:
            parent = re.sub(r"(\.[^.\[\]]+|\[\d+\])$", "", path)
            if parent == path:
                return self.lines.get("", 0)
            path = parent
        return self.lines[path]


_TOP_KEYS = {"driver", "gpus", "devices"}
_GPU_KEYS = {"profile", "count", "driver", "numaNodes", "gpusPerPcieRoot", "driverVersion",
             "cudaDriverVersion", "unhealthy", "partitions", "sharing"}
_DEVICE_KEYS = {"name", "driver", "attributes", "capacity", "count", "healthy"}
_ATTRIBUTE_KINDS = ("int", "bool", "string", "version")


@dataclass(frozen=True)
class InventorySections:
    """An inventory file's devices by section: what the ``fake-gpu`` backend publishes
    (``gpus``) and what the ``generic`` backend does (``devices``)."""

    gpus: Inventory = field(default_factory=Inventory)
    devices: Inventory = field(default_factory=Inventory)


def parse_inventory(text: str, node: str, *, source: str = "inventory",
                    default_driver: str = GPU_DRIVER) -> Inventory:
    """Parse a fake inventory for ``node`` (its name seeds the fake GPU UUIDs): every device,
    GPUs first. ``default_driver`` applies where neither the entry nor the file names a
    driver.

    Raises InvalidObject whose ``obj`` names ``source`` and the line, and whose ``field`` is
    the path of the offending value (``gpus[0].profile``).
    """
    sections = parse_inventory_sections(text, node, source=source,
                                        default_driver=default_driver)
    return Inventory(sections.gpus.devices + sections.devices.devices)


def parse_inventory_sections(text: str, node: str, *, source: str = "inventory",
                             default_driver: str = GPU_DRIVER) -> InventorySections:
    """:func:`parse_inventory`, the ``gpus`` and ``devices`` sections apart."""
    doc = _Doc(text, source)
    data = doc.data
    if data is None:
        return InventorySections()
    if not isinstance(data, dict):
        doc.fail("", "the inventory must be a mapping with keys " + ", ".join(sorted(_TOP_KEYS)))
    _check_keys(doc, data, "", _TOP_KEYS)
    default_driver = _driver(doc, data.get("driver", default_driver), "driver")
    gpus = _parse_gpus(doc, data.get("gpus") or [], node, default_driver)
    devices = _parse_devices(doc, data.get("devices") or [], default_driver)
    seen: dict[tuple[str, str], str] = {}
    for device, path in gpus + devices:
        key = (device.driver, device.name)
        if key in seen:
            doc.fail(path, f"device {device.name!r} of driver {device.driver!r} is defined "
                           f"twice (first at {seen[key]})")
        seen[key] = path
    return InventorySections(Inventory(tuple(device for device, _ in gpus)),
                             Inventory(tuple(device for device, _ in devices)))


def _check_keys(doc: _Doc, data: dict[str, Any], path: str, allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            where = f"{path}.{key}" if path else key
            doc.fail(where, "unknown field; allowed: " + ", ".join(sorted(allowed)))


def _driver(doc: _Doc, value: Any, path: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not DNS_SUBDOMAIN.match(value):
        doc.fail(path, f"{value!r} is not a driver name (a DNS subdomain of at most 63 "
                       "characters, e.g. gpu.kdra.dev)")
    return str(value)


def _int(doc: _Doc, value: Any, path: str, *, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        doc.fail(path, f"must be a whole number from {minimum} to {maximum} (got {value!r})")
    return int(value)


def _version(doc: _Doc, value: Any, path: str) -> str:
    text = str(value) if isinstance(value, (str, int, float)) and \
        not isinstance(value, bool) else ""
    if not is_valid_version(text):
        doc.fail(path, f"{value!r} is not a strict semantic version (MAJOR.MINOR.PATCH, "
                       "e.g. 12.4.0)")
    return text


def _parse_gpus(doc: _Doc, entries: Any, node: str,
                default_driver: str) -> list[tuple[InventoryDevice, str]]:
    if not isinstance(entries, list):
        doc.fail("gpus", "must be a list of '<count> x <profile>' strings or mappings")
    devices: list[tuple[InventoryDevice, str]] = []
    index = 0
    for position, entry in enumerate(entries):
        path = f"gpus[{position}]"
        if isinstance(entry, str):
            try:
                count, profile_name = parse_gpu_shorthand(entry)
            except ValueError as exc:
                doc.fail(path, str(exc))
            entry = {"profile": profile_name, "count": count}
            profile_path: str = path
        elif isinstance(entry, dict):
            _check_keys(doc, entry, path, _GPU_KEYS)
            profile_path = f"{path}.profile"
        else:
            doc.fail(path, "must be '<count> x <profile>' or a mapping with 'profile'")
        wanted = entry.get("profile")
        profile = GPU_PROFILES.get(wanted) if isinstance(wanted, str) else None
        if profile is None:
            doc.fail(profile_path, f"unknown GPU profile {wanted!r}; known: "
                                   + ", ".join(sorted(GPU_PROFILES)))
        assert profile is not None
        count = _int(doc, entry.get("count", 1), f"{path}.count", minimum=1,
                     maximum=MAX_GPUS - index)
        driver = _driver(doc, entry.get("driver", default_driver), f"{path}.driver")
        numa_nodes = _int(doc, entry.get("numaNodes", 2 if count >= 2 else 1),
                          f"{path}.numaNodes", minimum=1, maximum=count)
        per_root = _int(doc, entry.get("gpusPerPcieRoot", 2), f"{path}.gpusPerPcieRoot",
                        minimum=1, maximum=MAX_GPUS)
        driver_version = _version(doc, entry.get("driverVersion", DEFAULT_DRIVER_VERSION),
                                  f"{path}.driverVersion")
        cuda_version = _version(doc, entry.get("cudaDriverVersion",
                                               DEFAULT_CUDA_DRIVER_VERSION),
                                f"{path}.cudaDriverVersion")
        unhealthy = entry.get("unhealthy", [])
        if not isinstance(unhealthy, list):
            doc.fail(f"{path}.unhealthy", "must be a list of indexes within this entry")
        bad = {_int(doc, i, f"{path}.unhealthy[{n}]", minimum=0, maximum=count - 1)
               for n, i in enumerate(unhealthy)}
        mode = gpu_mode(entry.get("partitions"), entry.get("sharing"), profile.name)
        if isinstance(mode, tuple):
            doc.fail(f"{path}.{mode[0]}", mode[1])
        for local in range(count):
            uuid = fake_gpu_uuid(node, index)
            devices.extend((device, path) for device in mode(InventoryDevice(
                driver=driver,
                name=f"gpu-{index}",
                attributes=gpu_attributes(
                    uuid=uuid, product_name=profile.product_name, brand=profile.brand,
                    architecture=profile.architecture,
                    cuda_compute_capability=profile.cuda_compute_capability,
                    driver_version=driver_version, cuda_driver_version=cuda_version,
                    pci_bus_id=fake_pci_bus_id(index), index=index, minor=index,
                    pcie_root=f"pci0000:{index // per_root:02x}",
                    numa_node=local * numa_nodes // count,
                ),
                capacity={"memory": profile.memory},
                healthy=local not in bad,
                health_reason="marked unhealthy in the inventory" if local in bad else "",
            )))
            index += 1
    return devices


def _parse_devices(doc: _Doc, entries: Any,
                   default_driver: str) -> list[tuple[InventoryDevice, str]]:
    if not isinstance(entries, list):
        doc.fail("devices", "must be a list of devices (mappings with a 'name')")
    devices: list[tuple[InventoryDevice, str]] = []
    for position, entry in enumerate(entries):
        path = f"devices[{position}]"
        if not isinstance(entry, dict):
            doc.fail(path, "each device must be a mapping with a 'name'")
        _check_keys(doc, entry, path, _DEVICE_KEYS)
        name = entry.get("name")
        count = entry.get("count")
        if count is not None:
            count = _int(doc, count, f"{path}.count", minimum=1, maximum=100_000)
        longest = f"{name}-{count - 1}" if count else name
        if not isinstance(name, str) or not isinstance(longest, str) or len(longest) > 63 \
                or not DNS_LABEL.match(longest):
            doc.fail(f"{path}.name", f"{name!r} is not a device name (a DNS label: lowercase "
                                     "letters, digits and '-', at most 63 characters"
                                     + (" including the '-<index>' suffix)" if count else ")"))
        driver = _driver(doc, entry.get("driver", default_driver), f"{path}.driver")
        attributes = _attributes(doc, entry.get("attributes") or {}, f"{path}.attributes")
        capacity = _capacity(doc, entry.get("capacity") or {}, f"{path}.capacity")
        if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITY:
            doc.fail(path, f"a device may have at most {MAX_ATTRIBUTES_AND_CAPACITY} attributes "
                           f"and capacities together (has {len(attributes) + len(capacity)})")
        healthy = entry.get("healthy", True)
        if not isinstance(healthy, bool):
            doc.fail(f"{path}.healthy", "must be true or false")
        names = [f"{name}-{i}" for i in range(count)] if count else [str(name)]
        devices += [(InventoryDevice(
            driver=driver, name=device_name, attributes=attributes, capacity=capacity,
            healthy=healthy, health_reason="" if healthy else "marked unhealthy in the inventory",
        ), path) for device_name in names]
    return devices


def _qualified_name_ok(name: str) -> bool:
    domain, slash, ident = name.rpartition("/")
    if slash and (len(domain) > 63 or not DNS_SUBDOMAIN.match(domain)):
        return False
    return len(ident) <= 32 and bool(C_IDENTIFIER.match(ident))


def _attributes(doc: _Doc, data: Any, path: str) -> dict[str, AttributeValue]:
    if not isinstance(data, dict):
        doc.fail(path, "must be a mapping of attribute name to value")
    result: dict[str, AttributeValue] = {}
    for name, value in data.items():
        where = f"{path}.{name}"
        if not _qualified_name_ok(name):
            doc.fail(where, f"{name!r} is not an attribute name (a C identifier of at most 32 "
                            "characters, optionally prefixed by '<domain>/')")
        if isinstance(value, dict):
            if len(value) != 1 or next(iter(value)) not in _ATTRIBUTE_KINDS:
                doc.fail(where, "an explicit value has exactly one of int, bool, string, "
                                "version")
            kind, raw = next(iter(value.items()))
        elif isinstance(value, bool):
            kind, raw = "bool", value
        elif isinstance(value, int):
            kind, raw = "int", value
        elif isinstance(value, str):
            kind, raw = "string", value
        else:
            doc.fail(where, f"unsupported value {value!r}: use a string, a whole number, "
                            "true/false, or {version: 1.2.3}")
        if kind == "version":
            raw = _version(doc, raw, f"{where}.version")
        elif kind == "string" and (not isinstance(raw, str)
                                   or len(raw) > MAX_ATTRIBUTE_STRING_LENGTH):
            doc.fail(where, f"a string value must be text of at most "
                            f"{MAX_ATTRIBUTE_STRING_LENGTH} characters")
        elif kind == "int" and (isinstance(raw, bool) or not isinstance(raw, int)
                                or not -(2**63) <= raw < 2**63):
            doc.fail(where, "an int value must be a whole number within int64")
        elif kind == "bool" and not isinstance(raw, bool):
            doc.fail(where, "a bool value must be true or false")
        result[name] = {kind: raw}
    return result


def _capacity(doc: _Doc, data: Any, path: str) -> dict[str, str]:
    if not isinstance(data, dict):
        doc.fail(path, "must be a mapping of capacity name to quantity")
    result: dict[str, str] = {}
    for name, value in data.items():
        where = f"{path}.{name}"
        if not _qualified_name_ok(name):
            doc.fail(where, f"{name!r} is not a capacity name (a C identifier of at most 32 "
                            "characters, optionally prefixed by '<domain>/')")
        text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) \
            else ""
        if not is_valid_quantity(text):
            doc.fail(where, f"{value!r} is not a quantity (e.g. 80Gi, 100, 1500m)")
        result[name] = text
    return result

# --------------------------------------------------------------------------- simulated nodes

_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def expand_names(spec: str) -> list[str]:
    """Node names for simulation: ``node-{0..99}`` (brace ranges), comma or space separated
    lists, or both: ``a,b node-{1..3}`` → ``a, b, node-1, node-2, node-3``.

    Raises ValueError for a name that is not a DNS subdomain, or for duplicates."""
    names: list[str] = []
    for word in re.split(r"[\s,]+", spec.strip()):
        if not word:
            continue
        match = _RANGE.search(word)
        if match:
            low, high = int(match.group(1)), int(match.group(2))
            width = len(match.group(1)) if match.group(1).startswith("0") else 0
            step = 1 if high >= low else -1
            for number in range(low, high + step, step):
                names += expand_names(word[:match.start()] + str(number).zfill(width)
                                      + word[match.end():])
            continue
        if len(word) > 253 or not DNS_SUBDOMAIN.match(word):
            raise ValueError(f"{word!r} is not a node name (a DNS subdomain)")
        names.append(word)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError("duplicate node names: " + ", ".join(duplicates[:5]))
    return names

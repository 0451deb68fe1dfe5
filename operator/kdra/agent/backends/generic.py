"""The ``generic`` backend: the inventory file's arbitrary devices (``devices:``, e.g. the seed's
cats with ``color`` and ``size``) — devices that are nothing but their attributes.

A container given such a device learns its attributes from its env: each attribute
``color: white`` of ``kitten-0`` as ``KDRA_DEVICE_KITTEN_0_COLOR=white`` (a qualified name's
last part; booleans lower-case; ``uuid`` is kdra's ``_UUID`` already). Nothing is set up on
the node, and there is no device node.

Invariants:
- Reads only its section of the file (:class:`InventorySection`); the ``fake-gpu`` backend
  the other; the file is re-read only when it changed.
- Env values come only from the published attributes, never from the pod.
"""

from __future__ import annotations

import re

from kdra.agent.backends.inventory_file import InventorySection
from kdra.agent.core.backend import BackendBase, ContainerEdits
from kdra.agent.core.checkpoint import PreparedDevice
from kdra.agent.core.inventory_devices import InventoryDevice


def attribute_env(device: InventoryDevice, prefix: str) -> tuple[str, ...]:
    """``<prefix>_<ATTRIBUTE>=<value>`` for each attribute of ``device`` but ``uuid``."""
    env = []
    for attribute in sorted(device.attributes):
        value = device.attribute(attribute)
        if attribute == "uuid" or value is None:
            continue
        suffix = re.sub(r"[^A-Z0-9]", "_", attribute.rsplit("/", 1)[-1].upper())
        text = str(value).lower() if isinstance(value, bool) else str(value)
        env.append(f"{prefix}_{suffix}={text}")
    return tuple(env)


class GenericBackend(InventorySection, BackendBase):
    """The arbitrary devices of an inventory file."""

    name = "generic"
    section = "devices"

    def container_edits(self, device: InventoryDevice, record: PreparedDevice | None,
                        prefix: str) -> ContainerEdits:
        return (super().container_edits(device, record, prefix)
                + ContainerEdits(attribute_env(device, prefix)))


__all__ = ["GenericBackend", "attribute_env"]

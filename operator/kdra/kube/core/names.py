"""Object names built from node and driver names: valid and deterministic however long the
inputs are — for the slices the agent publishes (:mod:`kdra.agent.core.publication`) and the
agent's heartbeat Leases (:mod:`kdra.kube.core.agent_leases`).

Invariants: pure; a name that fits is kept as is; one that does not is cut short and ends
with a hash of the whole, so distinct long inputs keep distinct names.
"""

from __future__ import annotations

import hashlib

MAX_NAME = 253
"""The longest object name (a DNS subdomain): slices and Leases."""


def dashed(driver: str) -> str:
    """``gpu.kdra.dev`` → ``gpu-kdra-dev`` (for names built from a driver)."""
    return driver.replace(".", "-")


def bounded_name(base: str, suffix: str = "", limit: int = MAX_NAME) -> str:
    """``base + suffix`` when it fits ``limit``, else ``base`` cut short plus a hash of the
    whole, so distinct long inputs keep distinct, valid names."""
    name = base + suffix
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    room = limit - len(suffix) - len(digest) - 1
    return f"{base[:room].rstrip('-.')}-{digest}{suffix}"

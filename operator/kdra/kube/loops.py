"""The event loop kdra's long-running processes (operator, node agent) run on.

- ``uvloop`` (the default): the libuv-based loop (MagicStack's uvloop, a drop-in replacement
  for asyncio's). kdra's processes spend much of their time in the loop itself and in TLS —
  polling sockets, running callbacks, encrypting and decrypting API traffic — which asyncio
  does in Python and uvloop in C. kopf uses uvloop the same way when it is installed.
- ``asyncio``: the standard library's loop, for debugging (asyncio's debug mode, tools
  that assume it) or a platform uvloop does not support.

Invariants: ``uvloop`` falls back to asyncio's loop, with a warning, when uvloop cannot be
imported (it is a dependency, so only on a platform it does not support); any other name is
a :class:`ValueError` naming the setting and the accepted values, raised before a loop is
created.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

LOOPS = ("uvloop", "asyncio")


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory of new event loops of kind ``name`` (one of :data:`LOOPS`), for
    ``asyncio.Runner(loop_factory=...)``."""
    if name == "asyncio":
        return asyncio.new_event_loop
    if name == "uvloop":
        try:
            import uvloop
        except ImportError as exc:
            log.warning("uvloop is not available (%s); running on asyncio's event loop", exc)
            return asyncio.new_event_loop
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    raise ValueError(f"event_loop {name!r} (--event-loop, KDRA_EVENT_LOOP) is not one of "
                     f"{', '.join(LOOPS)}")


def runner(name: str) -> asyncio.Runner:
    """An ``asyncio.Runner`` on a new loop of kind ``name`` (it closes the loop on exit)."""
    return asyncio.Runner(loop_factory=loop_factory(name))

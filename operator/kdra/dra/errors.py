"""The one exception hierarchy of kdra.

::

    KdraError                          base of everything kdra raises on purpose
    ├── InvalidObject                  an API object (or annotation) is malformed; names the field
    ├── CelError                       a CEL selector failed
    │   ├── CelCompileError            does not parse / type-check / is too long  (bad input)
    │   └── CelRuntimeError            failed while evaluating against a device   (bad input)
    ├── AllocationError                the allocator cannot decide because its input is bad:
    │                                  missing class, invalid pool, too many devices, ...
    └── SearchExhausted                the allocator's search ran out of its budget (steps or
                                       time) before it could decide: not bad input

Every error but :class:`SearchExhausted` is *fatal bad input* for the object it names:
callers surface it (condition, event) and do not retry in a storm. ``SearchExhausted`` says
only that a longer search might decide: retry later, with a backoff. "Does not fit" is not
an error: the allocator returns ``None`` for that. Chain with ``raise ... from`` so the
original cause stays visible.
"""

from __future__ import annotations


class KdraError(Exception):
    """Base class of all errors kdra raises on purpose."""


class InvalidObject(KdraError):
    """An API object, annotation or inventory is malformed.

    ``field`` is the dotted path of the offending field (``spec.devices.requests[0].count``),
    ``obj`` a human-readable reference (``ResourceClaim default/my-claim``) when known.
    """

    def __init__(self, field: str, message: str, obj: str = "") -> None:
        self.field = field
        self.message = message
        self.obj = obj
        where = f"{obj}: " if obj else ""
        super().__init__(f"{where}{field}: {message}")


class CelError(KdraError):
    """A CEL selector failed. ``expression`` is the selector's text."""

    def __init__(self, expression: str, message: str) -> None:
        self.expression = expression
        self.message = message
        super().__init__(f"{message} (expression: {_shorten(expression)})")


class CelCompileError(CelError):
    """The expression does not compile (syntax, unknown function, too long)."""


class CelRuntimeError(CelError):
    """Evaluating the expression against a device failed: a missing attribute, a type
    mismatch, a result that is not a bool, or the evaluation budget ran out.

    Upstream treats this as an allocation error, not as "does not match".
    ``device`` names the device (``driver/pool/device``) when known; ``cost`` is what the
    evaluation was charged at run time before it failed (CEL cost units).
    """

    def __init__(self, expression: str, message: str, device: str = "", *,
                 cost: int = 0) -> None:
        self.device = device
        self.cost = cost
        if device:
            message = f"{message} on device {device}"
        super().__init__(expression, message)


class AllocationError(KdraError):
    """The allocator's input is bad: a request names a missing DeviceClass, a pool repeats a
    device name, a claim asks for more than 32 devices, an ``All`` request meets an incomplete
    pool, a selector fails at run time, ...  The pod cannot be scheduled until a user acts."""


class SearchExhausted(KdraError):
    """The allocator's search spent its budget (search steps or seconds) without deciding
    whether the claims fit: a pathological shape (many claims competing for the same
    devices) whose exhaustive search would take too long. Not bad input: a caller retries
    later, as the binder does (``AllocationSearchExhausted``)."""


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."

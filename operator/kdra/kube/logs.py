"""Logging of kdra's long-running processes (``kdra operator``, ``kdra webhooks``, ``kdra
agent``): the level, klog-like verbosity, and a text or JSON format.

Kubernetes' own components and the NVIDIA DRA driver log through klog: ``-v N`` picks the
verbosity (4: debug) and ``--logging-format=json`` writes one JSON object per line for log
collectors. kdra offers the same knobs on every process::

    --log-level debug|info|warning|error   kdra's own loggers (default info)
    -v N / --v N                            klog-like: 4 or more is debug for kdra's loggers,
                                            6 or more also for the libraries' (kopf, aiohttp)
    --log-format text|json                  one line per record either way

A JSON line is ``{"ts": "2026-12-04T10:11:12.345Z", "level": "info", "logger": "kdra...",
"msg": "..."}`` with ``"exc"`` (the traceback) when there is one, and any ``extra`` fields
kopf's object loggers attach (``k8s_ref`` ...) — nothing else.

Invariants:
- Every record passes through :func:`kdra.kube.core.printable.printable` in both formats:
  no control sequence reaches a terminal or a log collector raw (JSON escapes what is left:
  newlines, tabs).
- With ``json``, each line written to stderr by the logging system is exactly one JSON
  object: warnings (:mod:`warnings`) and uncaught exceptions (main thread and threads) go
  through the same handler instead of Python's own plain-text printing.
- A bad value (``--log-level verbose``) is a :class:`ValueError` naming the flag and the
  choices before anything is configured; the command exits 2 with it.
- Library loggers stay quieter than kdra's unless ``-v`` is 6 or more: kopf's per-event
  object lines (``kopf.objects``) at warning, the others (through the root logger) at info.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from kdra.kube.core.printable import PrintableFormatter, printable

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DEBUG_VERBOSITY = 4
"""klog's ``-v=4``: debug-level output, kdra's loggers."""
LIBRARY_VERBOSITY = 6
"""From ``-v=6`` (klog: requests) the libraries' loggers log at debug too."""


@dataclass(frozen=True)
class LogSettings:
    """How a kdra process logs; flags fall back to ``KDRA_<FIELD>`` (:mod:`kdra.kube.flags`)."""

    log_level: str = "info"
    """Level of kdra's own loggers: debug, info, warning or error."""

    log_format: str = "text"
    """text (one human-readable line per record) or json (one JSON object per line: ts,
    level, logger, msg, exc)."""

    v: int = field(default=0, metadata={"aliases": ("-v",), "metavar": "N"})
    """klog-like verbosity: 4 or more logs kdra at debug whatever --log-level says, 6 or
    more the libraries (kopf, aiohttp) too."""

    def __post_init__(self) -> None:
        if self.log_level.lower() not in LEVELS:
            raise ValueError(f"--log-level {self.log_level!r} is not one of "
                             f"{', '.join(LEVELS)}")
        if self.log_format not in FORMATS:
            raise ValueError(f"--log-format {self.log_format!r} is not one of "
                             f"{', '.join(FORMATS)}")
        if self.v < 0:
            raise ValueError(f"-v {self.v} is negative")

    @property
    def level(self) -> int:
        """kdra's level: the more verbose of --log-level and -v."""
        level = LEVELS[self.log_level.lower()]
        return logging.DEBUG if self.v >= DEBUG_VERBOSITY else level


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines inside values are escaped)."""

    _STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
        "message", "asctime", "taskName"}

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": printable(record.getMessage(), None, lines=True),
        }
        if record.exc_info:
            entry["exc"] = printable(self.formatException(record.exc_info), None, lines=True)
        elif record.exc_text:
            entry["exc"] = printable(record.exc_text, None, lines=True)
        if record.stack_info:
            entry["stack"] = printable(record.stack_info, None, lines=True)
        for key, value in record.__dict__.items():
            if key not in self._STANDARD and key not in entry and not key.startswith("_"):
                entry[key] = _plain(value)
        return json.dumps(entry, ensure_ascii=False, default=str)


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it, strings made printable."""
    if isinstance(value, str):
        return printable(value, None, lines=True)
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, dict):
        return {printable(k, None): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return printable(value, None, lines=True)


def handler(settings: LogSettings) -> logging.Handler:
    """A stderr handler in the settings' format."""
    out = logging.StreamHandler()
    out.setFormatter(JsonFormatter() if settings.log_format == "json"
                     else PrintableFormatter(TEXT_FORMAT))
    return out


def configure(settings: LogSettings) -> None:
    """Configure the root logger for a kdra process (replacing any handler it had)."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler(settings))
    everything = settings.v >= LIBRARY_VERBOSITY
    # The libraries (kopf, aiohttp, celpy...) log through the root's level: info at most,
    # unless -v asks for theirs too; kdra's own loggers at the asked level.
    root.setLevel(settings.level if everything else max(settings.level, logging.INFO))
    logging.getLogger("kdra").setLevel(settings.level)
    # One INFO line per watch event ("Handler 'pod_event' succeeded") drowns the real logs.
    logging.getLogger("kopf.objects").setLevel(logging.NOTSET if everything else logging.WARNING)
    logging.captureWarnings(True)
    if settings.log_format == "json":
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_thread_exception


def _log_uncaught(kind: type[BaseException], value: BaseException,
                  traceback: TracebackType | None) -> None:
    logging.getLogger("kdra").critical("uncaught exception", exc_info=(kind, value, traceback))


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    thread = args.thread.name if args.thread is not None else "?"
    logging.getLogger("kdra").error(
        "uncaught exception in thread %s", thread,
        exc_info=(args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback))

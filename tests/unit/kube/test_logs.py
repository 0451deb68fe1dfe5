"""kdra's process logging (kdra.kube.logs): levels, klog-like -v, text and JSON lines that hold
no control sequences, and the flags every long-running command takes."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
from collections.abc import Iterator

import pytest

from kdra.kube import flags
from kdra.kube.logs import JsonFormatter, LogSettings, configure
from kdra.main import build_parser, main


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, logging.getLogger("kdra").level,
             logging.getLogger("kopf.objects").level, sys.excepthook, threading.excepthook)
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])
    logging.getLogger("kdra").setLevel(saved[2])
    logging.getLogger("kopf.objects").setLevel(saved[3])
    sys.excepthook, threading.excepthook = saved[4], saved[5]
    logging.captureWarnings(False)


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("kdra.operator.scheduler", logging.INFO, __file__, 1, message,
                             args, None)
    made.__dict__.update(extra)
    return made


def test_a_json_line_is_one_object_with_the_record_escaped() -> None:
    try:
        raise RuntimeError("bad \x1b[2Jvalue")
    except RuntimeError:
        failed = logging.LogRecord("kdra.agent", logging.ERROR, __file__, 1, "claim %s\nnext",
                                   ("ns/c\x1b]0;owned\x07",), sys.exc_info())
    line = JsonFormatter().format(failed)
    assert "\n" not in line and "\x1b" not in line and "\x07" not in line
    entry = json.loads(line)
    assert entry["level"] == "error" and entry["logger"] == "kdra.agent"
    assert entry["msg"] == "claim ns/c\\x1b]0;owned\\x07\nnext"  # JSON keeps the newline, escaped
    assert "RuntimeError: bad \\x1b[2Jvalue" in entry["exc"]
    assert entry["ts"].endswith("Z") and entry["ts"][10] == "T"
    assert set(entry) == {"ts", "level", "logger", "msg", "exc"}


def test_extra_fields_ride_along_as_plain_json() -> None:
    line = JsonFormatter().format(record("handled %d", 3, k8s_ref={"name": "p\u202eq"},
                                         attempt=2, _private="no"))
    entry = json.loads(line)
    assert entry["msg"] == "handled 3"
    assert entry["k8s_ref"] == {"name": "p\\u202eq"} and entry["attempt"] == 2
    assert "_private" not in entry


@pytest.mark.parametrize(("settings", "kdra", "root", "kopf_objects"), [
    (LogSettings(), logging.INFO, logging.INFO, logging.WARNING),
    (LogSettings(log_level="debug"), logging.DEBUG, logging.INFO, logging.WARNING),
    (LogSettings(log_level="WARNING"), logging.WARNING, logging.WARNING, logging.WARNING),
    (LogSettings(v=4), logging.DEBUG, logging.INFO, logging.WARNING),
    (LogSettings(log_level="error", v=6), logging.DEBUG, logging.DEBUG, logging.NOTSET),
])
def test_levels_and_verbosity(restore_logging: None, settings: LogSettings, kdra: int, root: int,
                              kopf_objects: int) -> None:
    configure(settings)
    assert logging.getLogger("kdra").level == kdra
    assert logging.getLogger().level == root
    assert logging.getLogger("kopf.objects").level == kopf_objects
    assert len(logging.getLogger().handlers) == 1


def test_json_mode_writes_warnings_and_uncaught_exceptions_as_json(
        restore_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure(LogSettings(log_format="json", log_level="debug"))
    stream = io.StringIO()
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    logging.getLogger("kdra.test").debug("debug \x1b[31mline")
    logging.getLogger("celpy.evaluation").debug("a library's debug line is left out")
    import warnings

    warnings.warn("deprecated thing", DeprecationWarning, stacklevel=1)
    try:
        raise ValueError("boom")
    except ValueError:
        sys.excepthook(*sys.exc_info())
    worker = threading.Thread(target=lambda: 1 / 0, name="worker")
    worker.start()
    worker.join()
    lines = stream.getvalue().splitlines()
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    assert [e["logger"] for e in entries] == ["kdra.test", "py.warnings", "kdra", "kdra"]
    assert entries[0]["msg"] == "debug \\x1b[31mline" and entries[0]["level"] == "debug"
    assert "deprecated thing" in entries[1]["msg"]
    assert entries[2]["level"] == "critical" and "ValueError: boom" in entries[2]["exc"]
    assert "thread worker" in entries[3]["msg"] and "ZeroDivisionError" in entries[3]["exc"]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("bad", "said"), [
    ({"log_level": "verbose"}, "--log-level 'verbose' is not one of debug, info, warning, error"),
    ({"log_format": "xml"}, "--log-format 'xml' is not one of text, json"),
    ({"v": -1}, "-v -1 is negative"),
])
def test_bad_values_are_refused(bad: dict[str, object], said: str) -> None:
    with pytest.raises(ValueError, match="^" + said.replace("(", r"\(") + "$"):
        LogSettings(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", ["operator", "webhooks", "agent"])
def test_every_process_takes_the_logging_flags(command: str) -> None:
    args = build_parser().parse_args([command, "-v", "5", "--log-format", "json",
                                      "--log-level", "warning"])
    settings = flags.settings_from_args(args, LogSettings)
    assert settings == LogSettings(log_level="warning", log_format="json", v=5)
    assert build_parser().parse_args([command, "--v=2"]).v == "2"


def test_the_environment_is_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDRA_LOG_FORMAT", "json")
    monkeypatch.setenv("KDRA_V", "4")
    settings = flags.settings_from_args(build_parser().parse_args(["agent"]), LogSettings)
    assert settings == LogSettings(log_format="json", v=4)


def test_a_bad_flag_value_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["operator", "--log-level", "verbose"]) == 2
    assert capsys.readouterr().err == ("kdra operator: --log-level 'verbose' is not one of "
                                       "debug, info, warning, error\n")


def test_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["operator", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 8080; env KDRA_METRICS_PORT)" in text
    assert "(default: info; env KDRA_LOG_LEVEL)" in text
    assert "-v N, --v N" in text and "(default: 0; env KDRA_V)" in text
    assert "(default: unset; env KDRA_KUBECONFIG)" in text
    assert "(default: false; env KDRA_LEADER_ELECT)" in text
    with pytest.raises(SystemExit):
        main(["agent", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: unset; env KDRA_NODE_NAME, NODE_NAME)" in text

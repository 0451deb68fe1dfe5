"""kdra.kube.core.printable: cluster strings made safe for terminals, events and logs."""

from __future__ import annotations

import logging
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdra.kube.core.printable import MAX_VALUE, PrintableFormatter, printable

ESCAPED = {"Cc", "Cf", "Cs", "Zl", "Zp"}


@pytest.mark.parametrize(("raw", "shown"), [
    ("gpu-0", "gpu-0"),
    ("H100\x1b]0;pwned\x07", "H100\\x1b]0;pwned\\x07"),  # retitle the window
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear the screen
    ("ok\rFAKE", "ok\\rFAKE"),  # overprint the line
    ("a\nb\tc", "a\\nb\\tc"),
    ("\x9b31m", "\\x9b31m"),  # the 8-bit CSI (C1)
    ("\x7f\x00", "\\x7f\\x00"),
    ("admin\u202etxt.exe", "admin\\u202etxt.exe"),  # bidi override
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("line\u2028sep", "line\\u2028sep"),
    ("\ud800", "\\ud800"),  # a lone surrogate (from JSON "\\ud800"): print() would raise
    ("tag\U000e0041", "tag\\U000e0041"),
    ("Grüße 日本 \u00a0 ✓", "Grüße 日本 \u00a0 ✓"),  # letters, NBSP, symbols stay
    (42, "42"),
])
def test_escapes_what_a_terminal_would_obey(raw: object, shown: str) -> None:
    assert printable(raw) == shown


def test_lines_keep_newlines_and_tabs_only() -> None:
    assert printable("a\n\tb\x1b[1m\r", None, lines=True) == "a\n\tb\\x1b[1m\\r"


def test_length_is_bounded_and_an_escape_is_never_cut() -> None:
    assert printable("x" * 5000) == "x" * (MAX_VALUE - 3) + "..."
    assert len(printable("y" * 50, 10)) == 10
    assert printable("abcd\x1bxyz", 9) == "abcd..."  # "\x1b" (4 characters) does not fit
    assert printable("\x1b" * 10, 12) == "\\x1b\\x1b..."
    assert printable("short", 10) == "short"
    assert printable("x" * 100, None) == "x" * 100


def test_work_is_bounded_by_the_limit() -> None:
    huge = "\x1b" * 10_000_000
    assert printable(huge, 20) == "\\x1b" * 4 + "..."


@given(st.text(), st.integers(min_value=0, max_value=64))
def test_property_nothing_escaped_remains_and_it_fits(text: str, limit: int) -> None:
    shown = printable(text, limit)
    assert len(shown) <= limit
    assert not any(unicodedata.category(c) in ESCAPED for c in shown)
    assert printable(shown, limit) == shown  # idempotent


@given(st.text())
def test_property_lines_keep_only_newline_and_tab(text: str) -> None:
    shown = printable(text, None, lines=True)
    assert not any(unicodedata.category(c) in ESCAPED and c not in "\n\t" for c in shown)
    assert shown.count("\n") == text.count("\n")


def test_log_formatter_escapes_message_and_traceback() -> None:
    formatter = PrintableFormatter("%(levelname)s %(message)s")
    try:
        raise ValueError("bad \x1b[31mvalue")
    except ValueError:
        record = logging.LogRecord("x", logging.WARNING, __file__, 1, "claim %s", ("\x1b]0;t",),
                                   exc_info=__import__("sys").exc_info())
    line = formatter.format(record)
    assert "\x1b" not in line
    assert "claim \\x1b]0;t" in line and "bad \\x1b[31mvalue" in line
    assert "\n" in line  # the traceback keeps its lines


# --------------------------------------------------------------------------- the output edges

ESC_PRODUCT = "H100\x1b]0;owned\x07\x1b[2J"
ESC_SELECTOR = 'device.attributes["gpu.kdra.dev"].productName == "\x1b[8mhidden\u202e"'


def test_tables_show_cells_escaped_and_aligned() -> None:
    from kdra.cli.core.tables import table

    text = table(("NAME", "VALUE"), [("a\x1b[31m", "1"), ("bb", "2\r\n3")])
    assert "\x1b" not in text and "\r" not in text
    assert text.splitlines() == ["NAME        VALUE", "a\\x1b[31m   1",
                                 "bb          2\\r\\n3"]


def test_kdra_describe_shows_an_agents_escape_sequences_escaped() -> None:
    from kdra.cli.core.describe import describe, render
    from tests.unit.builders import device
    from tests.unit.cli.test_describe import raw_slice

    evil = device("gpu-0", index=0, productName=ESC_PRODUCT, uuid="GPU-\x1b[1;1H")
    text = render(describe([raw_slice("node-a", evil)], []))
    assert "\x1b" not in text and "\x07" not in text
    assert "H100\\x1b]0;owned\\x07\\x1b[2J" in text


def test_kubectl_kdra_why_shows_a_tenants_cel_literal_escaped() -> None:
    from kdra.cli.core.why_render import render_why
    from tests.unit.cli.test_why import explain, pending_claim, pod

    target = pod([{"name": "gpu", "resourceClaimName": "c"}])
    target["status"]["conditions"][0]["message"] = "no device matches \x1b]52;c;ZXZpbA==\x07"
    found = explain(target, [pending_claim("c", selector=ESC_SELECTOR)])
    text = render_why(found, bold=True)
    assert "\x1b]" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[8mhidden\\u202e" in text  # the selector, as a table cell
    assert "no device matches \\x1b]52;c;ZXZpbA==\\x07" in text  # the condition, as a line
    assert "\x1b[1m" in text  # kdra's own bold stays


def test_events_and_conditions_carry_no_control_sequences() -> None:
    import asyncio
    from typing import Any

    from kdra.kube.events import EventRecorder
    from kdra.operator.scheduler.pending import PendingPods
    from kdra.operator.scheduler.reporting import Reporter
    from kdra.operator.scheduler.settings import BinderSettings

    written: list[dict[str, Any]] = []

    class Client:
        async def create(self, res: Any, body: dict[str, Any], namespace: str) -> Any:
            written.append(body)
            return body

        async def patch(self, res: Any, name: str, body: dict[str, Any], namespace: str,
                        **_: Any) -> Any:
            written.append(body)
            return body

    client: Any = Client()
    pod = {"apiVersion": "v1", "kind": "Pod", "status": {},
           "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
    reporter = Reporter(client, EventRecorder(client), PendingPods(BinderSettings()))
    asyncio.run(reporter.unschedulable(pod, f"selector {ESC_SELECTOR!s} " + "x" * 9000,
                                       reason="Unschedulable"))
    condition, event = written
    message = condition["status"]["conditions"][0]["message"]
    assert "\x1b" not in message and "\u202e" not in message and len(message) <= 4096
    assert "\x1b" not in event["message"] and len(event["message"]) <= 1024
    assert event["message"].startswith('selector device.attributes["gpu.kdra.dev"]')

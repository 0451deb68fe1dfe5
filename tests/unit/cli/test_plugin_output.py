"""kubectl kdra's output: colour only when asked for or on a terminal, the same layout either
way; the parser takes the flags kubectl users know."""

from __future__ import annotations

import io
import re

import pytest

from kdra.cli.core.tables import table
from kdra.cli.kubectl import build_parser
from kdra.cli.kubectl_commands import _painter, wants_colour

ANSI = re.compile(r"\033\[[0-9;]*m")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_and_never_with_no_color(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert wants_colour("auto", Tty()) and not wants_colour("auto", io.StringIO())
    assert wants_colour("always", io.StringIO()) and not wants_colour("never", Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_colour("auto", Tty())


def test_a_coloured_table_lines_up_like_a_plain_one() -> None:
    rows = [("gpu.kdra.dev", "11", "0"), ("resource.example.com", "6", "4")]
    plain = table(("CLASS", "TOTAL", "FREE"), rows)
    coloured = table(("CLASS", "TOTAL", "FREE"), rows, _painter)
    assert "\033[31m0" in coloured and "\033[32m4" in coloured  # none free: red; some: green
    assert ANSI.sub("", coloured) == plain


def test_kubectl_flags() -> None:
    args = build_parser().parse_args(["why", "big", "-n", "team-a", "-o", "yaml", "--context",
                                      "prod", "--as", "alice"])
    assert (args.command, args.pod, args.namespace, args.output, args.context,
            args.as_user) == ("why", "big", "team-a", "yaml", "prod", "alice")
    free = build_parser().parse_args(["free", "--class", "gpu.kdra.dev", "--node", "n1"])
    assert (free.device_class, free.node, free.output) == ("gpu.kdra.dev", "n1", "table")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["check", "--as", "alice"])  # kdra check cannot impersonate

"""kubectl kdra's output: colour only when asked for or on a terminal, the same layout either
way; the parser takes the flags kubectl users know, before or after the command, and
kubectl's TYPE/NAME for a pod."""

from __future__ import annotations

import io
import re

import pytest

from kdra.cli.core.tables import table
from kdra.cli.kubectl import build_parser, command_first, main
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


@pytest.mark.parametrize(("argv", "parsed"), [
    (["-n", "ux", "why", "big2"], ["why", "-n", "ux", "big2"]),
    (["--namespace=ux", "-o", "json", "free", "--class", "x"],
     ["free", "--namespace=ux", "-o", "json", "--class", "x"]),
    (["--as", "alice", "--kubeconfig", "k", "top", "-A"],
     ["top", "--as", "alice", "--kubeconfig", "k", "-A"]),
    (["-n", "why", "why", "p"], ["why", "-n", "why", "p"]),  # a value stays with its flag
    (["why", "big", "-n", "ux"], ["why", "big", "-n", "ux"]),
    (["--version", "free"], ["--version", "free"]),
    (["-h"], ["-h"]),
    (["nosuch", "-n", "ux"], ["nosuch", "-n", "ux"]),
])
def test_flags_before_the_command_move_behind_it(argv: list[str], parsed: list[str]) -> None:
    assert command_first(argv) == parsed


def test_flags_anywhere_and_type_slash_name() -> None:
    for argv in (["-n", "ux", "why", "pod/big2"], ["why", "pods/big2", "-n", "ux"],
                 ["-n", "ux", "why", "big2"], ["why", "Pod/big2", "--namespace", "ux"],
                 ["-nux", "why", "po/big2"]):
        args = build_parser().parse_args(command_first(argv))
        assert (args.command, args.pod, args.namespace) == ("why", "big2", "ux"), argv
    free = build_parser().parse_args(command_first(["free", "-n", "ux"]))
    assert (free.command, free.namespace) == ("free", "ux")


@pytest.mark.parametrize("bad", ["deployment/big2", "pod/", "pod/a/b"])
def test_why_refuses_what_is_not_a_pod(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["why", bad])
    assert exited.value.code == 2
    assert f"{bad!r}: why explains a pod: give POD or pod/POD" in capsys.readouterr().err

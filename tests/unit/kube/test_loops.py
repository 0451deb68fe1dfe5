"""kdra.kube.loops: the event loop the operator and the agent run on (uvloop by default)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any

import pytest
import uvloop

from kdra.agent.process import run_agent
from kdra.agent.settings import AgentSettings, agent_from_args
from kdra.kube import loops
from kdra.main import build_parser
from kdra.operator.handlers import run_operator
from kdra.operator.settings import OperatorSettings, from_args


async def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_uvloop_is_the_default_and_runs_coroutines() -> None:
    assert OperatorSettings().event_loop == "uvloop" == AgentSettings().event_loop
    with loops.runner("uvloop") as runner:
        assert isinstance(runner.run(running_loop()), uvloop.Loop)


def test_asyncio_on_request() -> None:
    with loops.runner("asyncio") as runner:
        loop = runner.run(running_loop())
    assert not isinstance(loop, uvloop.Loop)
    assert isinstance(loop, asyncio.BaseEventLoop) and loop.is_closed()


def test_an_unknown_loop_names_the_setting_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"'trio' \(--event-loop, KDRA_EVENT_LOOP\) is not one "
                                         r"of uvloop, asyncio"):
        loops.loop_factory("trio")


def test_without_uvloop_asyncio_runs_with_a_warning(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # "import uvloop" raises ImportError
    with caplog.at_level(logging.WARNING, logger="kdra.kube.loops"):
        factory = loops.loop_factory("uvloop")
    assert factory is asyncio.new_event_loop
    assert "uvloop is not available" in caplog.text


def test_the_setting_from_flag_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = build_parser()
    assert from_args(parser.parse_args(["operator", "--event-loop", "asyncio"])).event_loop \
        == "asyncio"
    monkeypatch.setenv("KDRA_EVENT_LOOP", "asyncio")
    assert agent_from_args(parser.parse_args(["agent"])).event_loop == "asyncio"


@pytest.mark.parametrize("run", [run_operator, run_agent])
def test_a_bad_setting_stops_the_process_with_a_clear_error(
        run: Callable[[Any], int], caplog: pytest.LogCaptureFixture) -> None:
    settings_class: type[Any] = OperatorSettings if run is run_operator else AgentSettings
    with caplog.at_level(logging.ERROR):
        assert run(settings_class(event_loop="tornado", metrics_port=0)) == 2
    assert "cannot start: event_loop 'tornado'" in caplog.text

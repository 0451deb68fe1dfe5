"""``kdra agent`` settings: flags, KDRA_* and NODE_NAME fallbacks, bool and list flags."""

from __future__ import annotations

import pytest

from kdra.agent.settings import AgentSettings, agent_from_args
from kdra.main import build_parser
from kdra.operator.settings import from_args


def parse(*argv: str) -> AgentSettings:
    return agent_from_args(build_parser().parse_args(["agent", *argv]))


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    settings = parse()
    assert settings == AgentSettings()
    assert settings.cdi_dir == "/var/run/cdi" and settings.namespace == "kdra-system"


def test_node_name_from_the_downward_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "worker-1")
    assert parse().node_name == "worker-1"
    monkeypatch.setenv("KDRA_NODE_NAME", "worker-2")
    assert parse().node_name == "worker-2"
    assert parse("--node-name", "worker-3").node_name == "worker-3"


def test_types_bools_and_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDRA_RENEW_INTERVAL", "2.5")
    settings = parse("--lease-duration", "7", "--create-nodes", "--simulate-nodes",
                     "node-0", "node-1", "sim-{2..3}")
    assert settings.renew_interval == 2.5 and settings.lease_duration == 7
    assert settings.create_nodes is True
    assert settings.simulate_nodes == "node-0 node-1 sim-{2..3}"
    assert parse("--create-nodes", "false").create_nodes is False
    monkeypatch.setenv("KDRA_CREATE_NODES", "yes")
    assert parse().create_nodes is True


def test_operator_slice_gc_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["operator", "--slice-gc-grace", "5"])
    assert from_args(args).slice_gc_grace == 5.0
    monkeypatch.delenv("KDRA_SLICE_GC_GRACE", raising=False)
    assert from_args(build_parser().parse_args(["operator"])).slice_gc_grace == 40.0

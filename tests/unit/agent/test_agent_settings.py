"""``kdra agent`` settings: flags, KDRA_* and NODE_NAME fallbacks, bool and list flags, the
flavour (``auto`` asks the API server)."""

from __future__ import annotations

import asyncio

import pytest

from kdra.agent.runner import AgentError, resolve_flavour
from kdra.agent.settings import AgentSettings, agent_from_args
from kdra.kube.errors import NotFound
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


class Discovery:
    """The API server's answer to GET /apis/resource.k8s.io/v1 (None: not served)."""

    def __init__(self, resources: list[str] | None) -> None:
        self.resources = resources
        self.asked: list[str] = []

    async def request(self, method: str, path: str) -> dict[str, object]:
        self.asked.append(f"{method} {path}")
        if self.resources is None:
            raise NotFound(404, "NotFound", path)
        return {"resources": [{"name": name} for name in self.resources]}


@pytest.mark.parametrize(("flavour", "served", "resolved", "asked"), [
    ("kdra", ["resourceslices"], "kdra", False),
    ("native", None, "native", False),
    ("auto", ["deviceclasses", "resourceclaims", "resourceslices"], "native", True),
    ("auto", ["deviceclasses"], "kdra", True),
    ("auto", None, "kdra", True),
])
def test_the_flavour_and_auto(flavour: str, served: list[str] | None, resolved: str,
                              asked: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDRA_FLAVOUR", flavour)
    client = Discovery(served)
    settings = asyncio.run(resolve_flavour(client, parse()))  # type: ignore[arg-type]
    assert settings.flavour == resolved
    assert client.asked == (["GET /apis/resource.k8s.io/v1"] if asked else [])


def test_an_unknown_flavour_stops_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(AgentError, match="--flavour 'nativ': use one of kdra, native, auto"):
        asyncio.run(resolve_flavour(Discovery(None),  # type: ignore[arg-type]
                                    parse("--flavour", "nativ")))

"""The processes' logs as a log collector reads them: ``kdra operator --log-format=json
--log-level=debug`` and ``kdra agent`` likewise write one JSON object per line, through a whole
pod's life (claim created from a template, allocated, prepared, bound, released), start-up
and SIGTERM included (kdra.kube.logs)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import SYSTEM_NAMESPACE, AgentFactory
from tests.e2e.conftest import get_json
from tests.e2e.procs import KdraProcess, wait_for

agents = agent_helpers.agents  # the node-agent fixture
JSON_DEBUG = ("--log-format=json", "--log-level=debug")
GPU = "gpu.kdra.dev"
CLAIMS = "resourceclaims.resource.kdra.dev"


@pytest.fixture
def json_operator(control_plane: ControlPlane, tmp_path: Path) -> Iterator[KdraProcess]:
    control_plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    proc = KdraProcess(["operator", "--health-port", "0", *JSON_DEBUG],
                       tmp_path / "operator.log", control_plane.kubeconfig,
                       ready_line="kdra operator started")
    proc.start()
    yield proc
    proc.stop()


def objects(namespace: str, node: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "one-gpu", "namespace": namespace},
         "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
             "deviceClassName": GPU}}]}}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "logged", "namespace": namespace, "annotations": {
             CLAIMS_ANNOTATION: yaml.safe_dump([{"name": "gpu",
                                                 "resourceClaimTemplateName": "one-gpu"}])}},
         "spec": {"schedulerName": "kdra-scheduler", "nodeSelector": {
             "kubernetes.io/hostname": node},
             "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}},
    ]


def parsed(log: Path) -> list[dict[str, Any]]:
    """Every line of ``log`` as the JSON object it must be (the assertion names a bad one)."""
    entries = []
    for number, line in enumerate(log.read_text().splitlines(), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            raise AssertionError(f"{log.name} line {number} is not JSON: {line!r}") from None
        assert isinstance(entry, dict), (number, line)
        assert {"ts", "level", "logger", "msg"} <= set(entry), (number, line)
        entries.append(entry)
    return entries


def test_operator_and_agent_write_one_json_object_per_line(
        control_plane: ControlPlane, ns: str, json_operator: KdraProcess,
        agents: AgentFactory) -> None:
    node = agent_helpers.unique("logs-node")
    agent = agents(node, "gpus:\n- 2 x H100-80GB\n", *JSON_DEBUG)
    control_plane.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
        "metadata": {"name": GPU},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]}}))
    control_plane.kubectl("apply", "-f", "-",
                          input="\n---\n".join(json.dumps(o) for o in objects(ns, node)))
    wait_for(lambda: get_json(control_plane, "pod", "logged", "-n", ns)["spec"].get("nodeName"),
             timeout=60, what="the pod bound")
    control_plane.kubectl("delete", "pod", "logged", "-n", ns, "--grace-period=0", "--force")
    wait_for(lambda: not get_json(control_plane, CLAIMS, "-n", ns)["items"], timeout=60,
             what="the claim released and deleted")
    assert json_operator.stop() is not None and agent.proc.stop() is not None

    for proc in (json_operator, agent.proc):
        entries = parsed(proc.log)
        levels = Counter(entry["level"] for entry in entries)
        print(proc.log.name, len(entries), dict(levels))
        assert levels["info"] > 0
        assert all(entry["ts"].endswith("Z") for entry in entries)
    operator = parsed(json_operator.log)
    assert any(e["level"] == "debug" for e in operator), "no debug line at --log-level=debug"
    assert any(e["msg"].startswith("kdra operator started") for e in operator)
    assert any(e["logger"].startswith("kdra.") for e in operator)
    assert any("kdra agent started" in e["msg"] for e in parsed(agent.proc.log))

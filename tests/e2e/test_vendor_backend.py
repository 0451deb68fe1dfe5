"""A device vendor added in one module (tests/fpga_backend.py), end to end (issue 37, point 4).

The node agent, a real process, loads the vendor by ``--backends ...,module:Class`` beside the
built-in inventory backends and publishes its FPGAs in a pool of their own (with its Lease);
the operator's binder allocates one to a pod's claim by a CEL selector on the vendor's
attributes; the agent prepares it through the vendor — its node edit (the "bitstream" file),
its recorded data, its CDI spec (the vendor's env, device node and mount) — and the pod is bound
only then; deleting the pod unprepares it, undoing the vendor's edit. No other agent module
knows the vendor.
"""

from __future__ import annotations

import json
import os
from typing import Any

import yaml

from kdra.agent.core.cdi import env_name
from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION
from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers, test_binder
from tests.e2e.agent_helpers import AgentFactory, lease, slices_of, unique
from tests.e2e.conftest import ROOT, get_json
from tests.e2e.procs import wait_for
from tests.e2e.test_binder import CLAIMS, apply
from tests.fpga_backend import COUNT, DRIVER, fpga_uuid

agents = agent_helpers.agents  # fixtures shared with other modules
kdra = test_binder.kdra
VENDOR = "tests.fpga_backend:FpgaBackend"


def fpga_objects(namespace: str, node: str, device_class: str) -> list[dict[str, Any]]:
    """A class of the vendor's FPGAs, a template asking for one with more than 2,500,001
    logic cells (fpga-2 or fpga-3), and a pod on ``node`` using it."""
    selector = (f'device.attributes["{DRIVER}"].family == "agilex7" && '
                f'device.attributes["{DRIVER}"].logicCells > 2500001')
    return [
        {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
         "metadata": {"name": device_class},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}},
        {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "big-fpga", "namespace": namespace},
         "spec": {"spec": {"devices": {"requests": [{"name": "fpga", "exactly": {
             "deviceClassName": device_class,
             "selectors": [{"cel": {"expression": selector}}]}}]}}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "accelerated", "namespace": namespace, "annotations": {
             CLAIMS_ANNOTATION: yaml.safe_dump([{"name": "fpga",
                                                 "resourceClaimTemplateName": "big-fpga"}])}},
         "spec": {"schedulerName": "kdra-scheduler",
                  "nodeSelector": {"kubernetes.io/hostname": node},
                  "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}},
    ]


def test_a_vendor_backend_publishes_prepares_and_exposes_its_devices(
        control_plane: ControlPlane, agents: AgentFactory, kdra: Any, ns: str) -> None:
    node = unique("fpga")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    agent = agents(node, "gpus: ['1 x L4-24GB']\n", "--backends", f"fake-gpu,generic,{VENDOR}",
                   env={"PYTHONPATH": path})
    assert f"device backend 'fpga' (test vendor FPGAs) loaded from {VENDOR}" in \
        agent.proc.tail(200)

    # Published: the vendor's pool beside the GPUs', each with its Lease.
    by_driver = {s["spec"]["driver"]: s for s in slices_of(control_plane, node)}
    assert sorted(by_driver) == [DRIVER, "gpu.kdra.dev"]
    devices = by_driver[DRIVER]["spec"]["devices"]
    assert [d["name"] for d in devices] == [f"fpga-{i}" for i in range(COUNT)]
    assert devices[2]["attributes"]["uuid"] == {"string": fpga_uuid(node, 2)}
    assert devices[2]["attributes"]["shellVersion"] == {"version": "2.1.0"}
    assert devices[2]["capacity"] == {"memory": {"value": "16Gi"}}
    assert lease(control_plane, node, DRIVER) is not None

    # Allocated by the binder, prepared by the vendor before the pod is bound.
    device_class = f"{node}.fpga.example.com"
    kdra()
    try:
        apply(control_plane, *fpga_objects(ns, node, device_class))
        pod = wait_for(lambda: (p := get_json(control_plane, "pod", "accelerated", "-n", ns))
                       ["spec"].get("nodeName") and p, timeout=120, what="the pod bound")
        assert pod["spec"]["nodeName"] == node
        (claim_name,) = json.loads(
            pod["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION]).values()
        claim = get_json(control_plane, CLAIMS, claim_name, "-n", ns)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        device = result["device"]
        assert (result["driver"], result["pool"]) == (DRIVER, node)
        assert device in ("fpga-2", "fpga-3")
        uid = claim["metadata"]["uid"]
        bitstream = agent.state / "fpga" / node / f"{device}.bitstream"
        assert bitstream.read_text() == f"{uid} {ns}/{claim_name}\n"  # the vendor's node edit
        (status,) = claim["status"]["devices"]
        assert (status["conditions"][0]["type"], status["conditions"][0]["status"]) == (
            "Ready", "True")
        cdi_id = f"kdra.dev/fpga-example-com={uid}-{device}"
        assert status["data"] == {"uuid": fpga_uuid(node, int(device[-1])),
                                  "family": "agilex7", "bitstream": str(bitstream),
                                  "cdiDeviceIDs": [cdi_id]}

        spec_file = agent.cdi / f"kdra.dev-fpga-example-com-{uid}.json"
        spec = json.loads(spec_file.read_text())
        print("the vendor's CDI spec:\n" + json.dumps(spec, indent=2))
        assert spec["kind"] == "kdra.dev/fpga-example-com"
        (cdi_device,) = spec["devices"]
        edits = cdi_device["containerEdits"]
        prefix = env_name(device)
        assert edits["env"] == [f"{prefix}={DRIVER}/{node}/{device}",
                                f"{prefix}_CLAIM={ns}/{claim_name}",
                                f"{prefix}_UUID={fpga_uuid(node, int(device[-1]))}",
                                f"{prefix}_FAMILY=agilex7"]
        assert edits["deviceNodes"] == [{"path": f"/dev/fpga/{device}", "type": "c",
                                         "major": 1, "minor": 3, "fileMode": 0o666}]
        assert edits["mounts"] == [{"hostPath": str(bitstream),
                                    "containerPath": f"/run/fpga/{device}.bitstream",
                                    "type": "bind", "options": ["ro", "nosuid", "nodev", "bind"]}]
        assert agent.checkpoint()[uid]["devices"][0]["backend"] == "fpga"

        # The pod goes: its claim is released and the vendor's edit undone.
        control_plane.kubectl("delete", "pod", "accelerated", "-n", ns, "--grace-period=0",
                              "--force")
        wait_for(lambda: not spec_file.exists() and not bitstream.exists()
                 and agent.checkpoint() == {}, timeout=60, what="the FPGA unprepared")
    finally:
        control_plane.kubectl("delete", "deviceclass.resource.kdra.dev", device_class,
                              "--ignore-not-found", "--wait=false", check=False)

"""What a container on the real node should see of its devices, and what it printed.

The example pods print their device env (``env | grep -E '^(KDRA_|NVIDIA_VISIBLE_DEVICES=)'``)
and their device files (``ls -d /dev/kdra/*``). :func:`expected` works out, from the cluster
and the node, what exactly that output must be for one container: the devices its claims
allocate to it (pod annotation → claims → ``status.allocation``, the container selection of
the claims annotation), each one's CDI edits from the spec file the agent wrote on the host
(``/var/run/cdi``), and the two list variables. :func:`device_facts` gives the independent
truth from the ResourceSlices (a GPU's UUID, a cat's colour), so that the CDI specs are checked
too, not only copied.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from kdra.agent.core.cdi import cdi_device_name, env_name
from kdra_devenv.node import CDI_DIR
from kdra_devenv.realcluster import RealCluster

GPU = "gpu.kdra.dev"
JSON = dict[str, Any]


@dataclass
class Seen:
    """A container's output: env lines and device files."""

    env: dict[str, str] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)
    other: list[str] = field(default_factory=list)


def parse_output(text: str) -> Seen:
    seen = Seen()
    for line in text.splitlines():
        if line.startswith("/dev/"):
            seen.files.add(line.strip())
        elif "=" in line:
            key, _, value = line.partition("=")
            seen.env[key] = value
        elif line.strip():
            seen.other.append(line)
    return seen


def logs(cluster: RealCluster, pod: str, container: str, namespace: str = "default",
         timeout: float = 60) -> Seen:
    """The container's output, once it is there and stopped growing (two reads a second
    apart agree), or what there is at ``timeout``."""
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        result = cluster.kubectl("logs", "-n", namespace, pod, "-c", container, check=False)
        settled = result.returncode == 0 and result.stdout.strip() != "" \
            and result.stdout == previous
        if settled or time.monotonic() > deadline:
            assert result.returncode == 0, f"kubectl logs {pod}/{container}: {result.stderr}"
            return parse_output(result.stdout)
        previous = result.stdout if result.returncode == 0 else None
        time.sleep(1)


def wait_running(cluster: RealCluster, pods: list[str], namespace: str = "default",
                 timeout: float = 180) -> dict[str, JSON]:
    """Wait until every pod is Running with all containers ready; returns them."""
    deadline = time.monotonic() + timeout
    while True:
        items = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o",
                                           "json").stdout)["items"]
        by_name = {p["metadata"]["name"]: p for p in items}
        ready = [name for name in pods if name in by_name
                 and by_name[name].get("status", {}).get("phase") == "Running"
                 and all(c.get("ready") for c in by_name[name]["status"].get(
                     "containerStatuses", []))]
        if len(ready) == len(pods):
            return {name: by_name[name] for name in pods}
        if time.monotonic() > deadline:
            states = {name: (by_name.get(name, {}).get("status") or {}).get("phase", "absent")
                      for name in pods}
            raise AssertionError(f"pods not Running after {timeout:.0f} s: {states}\n"
                                 f"{cluster.diagnose()}")
        time.sleep(1)


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    claim: JSON
    share_id: str = ""
    """The result's shareID (a share of a device several claims hold)."""

    @property
    def listed(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"


def container_devices(cluster: RealCluster, pod: JSON, container: str) -> list[Device]:
    """The devices allocated to ``container`` of ``pod`` (claims annotation → claims)."""
    annotations = pod["metadata"].get("annotations", {})
    entries = yaml.safe_load(annotations["resource.kdra.dev/claims"])
    statuses = json.loads(annotations.get("resource.kdra.dev/claim-statuses", "{}"))
    namespace = pod["metadata"]["namespace"]
    devices: list[Device] = []
    for entry in entries:
        # An extended-resources entry: each container has its own requests of the claim.
        own = {r["request"] for r in entry.get("extendedResources") or ()
               if r["container"] == container}
        if "extendedResources" in entry and not own:
            continue
        if entry.get("containers") is not None and container not in entry["containers"]:
            continue
        name = entry.get("resourceClaimName") or statuses[entry["name"]]
        claim = json.loads(cluster.kubectl("get", "resourceclaims.resource.kdra.dev", "-n",
                                           namespace, name, "-o", "json").stdout)
        for result in claim["status"]["allocation"]["devices"]["results"]:
            if entry.get("request") and result["request"] != entry["request"]:
                continue
            if own and result["request"] not in own:
                continue
            devices.append(Device(result["driver"], result["pool"], result["device"], claim,
                                  result.get("shareID") or ""))
    return devices


def spec_device(device: Device) -> tuple[JSON, JSON]:
    """(spec, device entry) of ``device`` in the agent's CDI spec files on the host."""
    uid = device.claim["metadata"]["uid"]
    wanted = cdi_device_name(uid, device.name, device.share_id)
    for path in sorted(CDI_DIR.glob("*.json")):
        spec = json.loads(path.read_text())
        for entry in spec.get("devices", []):
            if entry.get("name") == wanted:
                return spec, entry
    raise AssertionError(f"no CDI spec in {CDI_DIR} describes {device.listed} of claim {uid}")


def expected(cluster: RealCluster, pod: JSON, container: str) -> Seen:
    """Exactly what ``container`` must print (see the module docstring)."""
    devices = container_devices(cluster, pod, container)
    seen = Seen()
    for device in devices:
        spec, entry = spec_device(device)
        for item in [*spec.get("containerEdits", {}).get("env", []),
                     *entry.get("containerEdits", {}).get("env", [])]:
            key, _, value = item.partition("=")
            seen.env[key] = value
        seen.files |= {node["path"] for node in
                       entry.get("containerEdits", {}).get("deviceNodes", [])}
    if devices:
        seen.env["KDRA_DEVICES"] = ",".join(d.listed for d in devices)
    uuids = [device_facts(cluster, d)["uuid"] for d in devices if d.driver == GPU]
    if uuids:
        seen.env["NVIDIA_VISIBLE_DEVICES"] = ",".join(uuids)
    return seen


def device_facts(cluster: RealCluster, device: Device) -> dict[str, Any]:
    """The device's attributes as its ResourceSlice publishes them (plain values)."""
    slices = json.loads(cluster.kubectl("get", "resourceslices.resource.kdra.dev", "-o",
                                        "json").stdout)["items"]
    for item in slices:
        spec = item["spec"]
        if spec["driver"] != device.driver or spec["pool"]["name"] != device.pool:
            continue
        for candidate in spec.get("devices", []):
            if candidate["name"] == device.name:
                attributes = (candidate.get("basic") or candidate).get("attributes", {})
                return {key.rsplit("/", 1)[-1]: next(iter(value.values()))
                        for key, value in attributes.items()}
    raise AssertionError(f"{device.listed} is in no ResourceSlice")


def as_sets(seen: Seen) -> tuple[dict[str, Any], set[str]]:
    """The env with the comma lists as sets (their order is not the point), and the files."""
    env: dict[str, Any] = dict(seen.env)
    for key in ("KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        if key in env:
            env[key] = set(filter(None, env[key].split(",")))
    return env, set(seen.files)


__all__ = ["Device", "Seen", "as_sets", "container_devices", "device_facts", "env_name",
           "expected", "logs", "parse_output", "spec_device", "wait_running"]

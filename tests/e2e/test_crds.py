"""kdra's CRDs on a real kube-apiserver: installed, explained, and strict about bad input.

Every file in ``tests/e2e/invalid/`` holds an object the API server must reject; its first line
``# expect: <text>`` is a piece of the server's message (naming the field). Pairs in
``invalid/updates/`` are a valid base object and an update that must be rejected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import ROOT, get_json

INVALID = Path(__file__).parent / "invalid"
SEED = ROOT / "manifests" / "examples" / "seed"
SEED_STATIC = ROOT / "manifests" / "examples" / "seed-static-slice"
KINDS = ("resourceclaims", "resourceclaimtemplates", "deviceclasses", "resourceslices")


def expectation(path: Path) -> tuple[str, bool]:
    lines = path.read_text().splitlines()
    expect = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("# expect:"))
    status = any(line.startswith("# kind: status-update") for line in lines)
    return expect, status


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def resource(obj: dict[str, Any]) -> list[str]:
    plural = obj["kind"].lower() + "s"
    meta = obj["metadata"]
    args = [f"{plural}.resource.kdra.dev", meta["name"]]
    if meta.get("namespace") or obj["kind"] in ("ResourceClaim", "ResourceClaimTemplate"):
        args += ["-n", meta.get("namespace", "default")]
    return args


def write_status(plane: ControlPlane, obj: dict[str, Any]) -> Any:
    """PUT ``obj``'s status onto the live object (with its current resourceVersion)."""
    live = get_json(plane, *resource(obj))
    live["status"] = obj.get("status", {})
    return plane.kubectl("replace", "--subresource=status", "-f", "-",
                         input=json.dumps(live), check=False)


def cleanup(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    for obj in objects:
        plane.kubectl("delete", *resource(obj), "--ignore-not-found", "--wait=false",
                      check=False)


def test_crds_are_established(control_plane: ControlPlane) -> None:
    for kind in KINDS:
        crd = get_json(control_plane, "crd", f"{kind}.resource.kdra.dev")
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions["Established"] == "True", kind
        assert crd["spec"]["names"]["categories"] == ["kdra"]
        assert [(v["name"], v["served"], v["storage"]) for v in crd["spec"]["versions"]] == [
            ("v1", True, True), ("v1alpha3", True, False)]
        assert crd["spec"]["conversion"]["strategy"] == "Webhook"
    claims = get_json(control_plane, "crd", "resourceclaims.resource.kdra.dev")
    assert claims["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert claims["spec"]["names"]["shortNames"] == ["kclaim"]


def test_seed_objects_apply_and_list(control_plane: ControlPlane) -> None:
    # The claims annotation pod needs the default ServiceAccount: the controller-manager made it.
    # The variant with the cats as a static slice (no agent runs here): the seed's objects
    # plus exactly that slice; the seed itself publishes no cats (an agent does).
    kinds = {str(SEED): [], str(SEED_STATIC): []}
    for directory, found in kinds.items():
        built = control_plane.kubectl("kustomize", directory).stdout
        found.extend(sorted(f"{d['kind']}/{d['metadata']['name']}"
                            for d in yaml.safe_load_all(built) if d))
    assert sorted([*kinds[str(SEED)], "ResourceSlice/worker-1-cats"]) == kinds[str(SEED_STATIC)]
    try:
        check_seed_objects(control_plane)
    finally:
        control_plane.kubectl("delete", "pod", "pod-with-cats", "-n", "default", "--force",
                              "--grace-period=0", "--ignore-not-found", check=False)
        control_plane.kubectl("delete", "-k", str(SEED_STATIC), "--ignore-not-found",
                              "--wait=false", check=False)


def check_seed_objects(control_plane: ControlPlane) -> None:
    out = control_plane.kubectl("apply", "-k", str(SEED_STATIC)).stdout
    assert "resourceclaim.resource.kdra.dev/small-white-cat-claim" in out
    listing = control_plane.kubectl("get", "kdra", "-A").stdout
    for name in ("small-white-cat-claim", "large-black-cat-claim-template",
                 "resource.example.com", "worker-1-cats"):
        assert name in listing, listing
    slices = control_plane.kubectl("get", "kslice").stdout.splitlines()
    header = slices[0].split()
    assert header[:5] == ["NAME", "NODE", "DRIVER", "POOL", "GENERATION"]
    # (other tests' agents may still have slices here: their Nodes' garbage collection is
    # asynchronous)
    row = next(line for line in slices[1:] if line.startswith("worker-1-cats"))
    assert row.split()[1:3] == ["worker-1", "resource-driver.example.com"], row
    # Applied as v1alpha3, stored as v1: kubectl reads v1 by default (flat devices), and the
    # v1alpha3 form on request.
    cats = get_json(control_plane, "kslice", "worker-1-cats")["spec"]["devices"]
    colors = {d["attributes"]["color"]["string"] for d in cats}
    assert {"black", "white"} <= colors
    # (kubectl expands a short name to its group and drops a version given with it:
    # `kslice.v1alpha3.resource.kdra.dev` reads v1; the plural keeps the version.)
    old = get_json(control_plane, "resourceslices.v1alpha3.resource.kdra.dev",
                   "worker-1-cats")["spec"]["devices"]
    assert {d["basic"]["attributes"]["color"]["string"] for d in old} == colors
    by_node = control_plane.kubectl("get", "kslice", "--field-selector",
                                    "spec.nodeName=worker-1", "-o", "name").stdout
    assert "worker-1-cats" in by_node


@pytest.mark.parametrize(("path", "words", "version"), [
    ("kclaim.spec.devices.requests.exactly.selectors", "CEL", None),
    ("kclaim.spec.devices.requests.firstAvailable", "alternatives", None),
    ("kclaim.spec.devices.constraints.distinctAttribute", "differ", None),
    ("kslice.spec.devices.taints", "not allocated", None),
    ("kslice.spec.pool.resourceSliceCount", "slices", None),
    ("kdeviceclass.spec.selectors", "selector", None),
    ("kclaim.status.reservedFor", "pod", None),
    ("kclaim.spec.devices.requests.selectors", "CEL", "resource.kdra.dev/v1alpha3"),
])
def test_kubectl_explain_teaches_the_api(control_plane: ControlPlane, path: str,
                                         words: str, version: str | None) -> None:
    extra = ["--api-version", version] if version else []
    out = control_plane.kubectl("explain", path, *extra).stdout
    assert "DESCRIPTION:" in out
    description = out.split("DESCRIPTION:", 1)[1]
    assert words.lower() in description.lower(), out


INVALID_FILES = sorted(INVALID.glob("*.yaml"))


@pytest.mark.parametrize("path", INVALID_FILES, ids=[p.stem for p in INVALID_FILES])
def test_invalid_object_is_rejected(control_plane: ControlPlane, path: Path) -> None:
    expect, status = expectation(path)
    docs = documents(path)
    try:
        if status:
            base, update = docs
            control_plane.kubectl("create", "-f", "-", input=json.dumps(base))
            result = write_status(control_plane, update)
        else:
            result = control_plane.kubectl("create", "-f", str(path), check=False)
        print(f"{path.stem}: {result.stderr.strip()}")
        assert result.returncode != 0, f"{path.name} was accepted"
        assert expect in result.stderr, result.stderr
    finally:
        cleanup(control_plane, *docs)


UPDATES = sorted((INVALID / "updates").glob("*.update.yaml"))


@pytest.mark.parametrize("update_path", UPDATES,
                         ids=[p.name.removesuffix(".update.yaml") for p in UPDATES])
def test_immutable_fields(control_plane: ControlPlane, update_path: Path) -> None:
    base_path = update_path.with_name(update_path.name.replace(".update.", ".base."))
    expect, status = expectation(update_path)
    (base,) = documents(base_path)
    (update,) = documents(update_path)
    try:
        control_plane.kubectl("create", "-f", str(base_path))
        if status:
            assert write_status(control_plane, base).returncode == 0
            result = write_status(control_plane, update)
        else:
            result = control_plane.kubectl("apply", "--server-side", "--force-conflicts",
                                           "-f", str(update_path), check=False)
        print(f"{update_path.stem}: {result.stderr.strip()}")
        assert result.returncode != 0, f"{update_path.name} was accepted"
        assert expect in result.stderr, result.stderr
    finally:
        cleanup(control_plane, base)


def test_valid_edge_cases_are_accepted(control_plane: ControlPlane) -> None:
    """The rules are not over-strict: upstream-valid objects pass."""
    objects = [
        {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaim",
         "metadata": {"name": "all-mode", "namespace": "default"},
         "spec": {"devices": {"requests": [{"name": "all", "deviceClassName": "gpu.kdra.dev",
                                            "allocationMode": "All"}]}}},
        {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
         "metadata": {"name": "prioritized", "namespace": "default"},
         "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [
             {"name": "big", "deviceClassName": "gpu.kdra.dev"},
             {"name": "small", "deviceClassName": "gpu.kdra.dev", "count": 2}]}],
             "constraints": [{"requests": ["gpu/small"],
                              "distinctAttribute": "gpu.kdra.dev/uuid"}],
             "config": [{"requests": ["gpu/big"], "opaque": {
                 "driver": "gpu.kdra.dev", "parameters": {"mode": "exclusive"}}}]}}},
        {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
         "metadata": {"name": "partitioned"},
         "spec": {"driver": "gpu.kdra.dev", "nodeName": "worker-1",
                  "pool": {"name": "worker-1-mig", "generation": 0, "resourceSliceCount": 1},
                  "devices": [{"name": "gpu-0-mig-1g",
                               "attributes": {"cores": {"ints": [0, 1]}},
                               "capacity": {"memory": {"value": "10Gi"}},
                               "consumesCounters": [{"counterSet": "gpu-0", "counters": {
                                   "memory": {"value": "10Gi"}}}],
                               "taints": [{"key": "gpu.kdra.dev/unhealthy",
                                           "effect": "NoSchedule"}]}]}},
        {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceSlice",
         "metadata": {"name": "network-attached"},
         "spec": {"driver": "net.example.com", "allNodes": True,
                  "pool": {"name": "fabric/pool-a", "generation": 0, "resourceSliceCount": 1},
                  "devices": [{"name": "nic-0", "basic": {
                      "attributes": {"firmware": {"version": "1.2.3-rc.1+build"},
                                     "net.example.com/fast": {"bool": True}},
                      "capacity": {"bandwidth": "100G", "share": "500m"}}}]}},
    ]
    try:
        for obj in objects:
            control_plane.kubectl("create", "-f", "-", input=json.dumps(obj))
    finally:
        cleanup(control_plane, *objects)


def test_node_selector_is_one_unit_for_server_side_apply(control_plane: ControlPlane) -> None:
    """As upstream's core/v1 NodeSelector and NodeSelectorTerm (``+structType=atomic``), a
    slice's nodeSelector is owned and replaced as a whole: its field set in managedFields is
    the single leaf ``f:nodeSelector``, and another manager's apply conflicts on all of it."""
    manager = "kdra-test-a"
    obj = {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceSlice",
           "metadata": {"name": "rack-a"},
           "spec": {"driver": "net.example.com",
                    "pool": {"name": "rack-a", "generation": 0, "resourceSliceCount": 1},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "example.com/rack", "operator": "In", "values": ["a"]}]}]},
                    "devices": [{"name": "nic-0", "basic": {}}]}}
    try:
        control_plane.kubectl("apply", "--server-side", f"--field-manager={manager}",
                              "-f", "-", input=json.dumps(obj))
        live = get_json(control_plane, "resourceslices.resource.kdra.dev", "rack-a",
                        "--show-managed-fields")
        owned = next(entry["fieldsV1"] for entry in live["metadata"]["managedFields"]
                     if entry["manager"] == manager)
        assert owned["f:spec"]["f:nodeSelector"] == {}, owned["f:spec"]
        other = json.loads(json.dumps(obj))
        other["spec"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"] = [
            {"key": "metadata.name", "operator": "In", "values": ["worker-1"]}]
        result = control_plane.kubectl("apply", "--server-side", "--field-manager=kdra-test-b",
                                       "-f", "-", input=json.dumps(other), check=False)
        assert result.returncode != 0, "a second manager merged into the node selector"
        assert ".spec.nodeSelector" in result.stderr, result.stderr
    finally:
        cleanup(control_plane, obj)

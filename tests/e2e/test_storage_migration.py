"""Upgrading from the v1alpha3-only CRDs to v1 storage, on a control plane of its own (the
test replaces the CRDs, which the session's shared one must keep): objects written with the
old CRDs read as v1 after the upgrade, a no-op update per object rewrites them in v1, and then
``status.storedVersions`` can drop v1alpha3. With the conversion webhook down, v1 reads and
writes keep working and v1alpha3 clients get an error naming the webhook
(docs/api-versions.md).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.dra.models.conversion import to_v1alpha3
from kdra_devenv.controlplane import ControlPlane, binaries
from tests.e2e.conftest import CRDS, ROOT, get_json
from tests.e2e.conversion import ConversionServer

SEED = ROOT / "manifests" / "examples" / "seed"
SEED_SLICE = ROOT / "manifests" / "examples" / "seed-static-slice"
PLURALS = ("resourceclaims", "resourceclaimtemplates", "deviceclasses", "resourceslices")
GROUP = "resource.kdra.dev"


def old_crds() -> str:
    """kdra's CRDs as they were before v1: v1alpha3 alone, stored, no conversion."""
    docs = []
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text().split("---\n", 1)[1])
        if "conversion" not in crd["spec"]:
            continue  # a kind that never had a v1alpha3 (DeviceTaintRule, issue 25)
        old = copy.deepcopy(crd)
        old["spec"]["versions"] = [{**v, "served": True, "storage": True}
                                   for v in crd["spec"]["versions"]
                                   if v["name"] == "v1alpha3"]
        del old["spec"]["conversion"]
        docs.append(old)
    return yaml.safe_dump_all(docs)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    workdir = tmp_path_factory.mktemp("migration-plane")
    plane = ControlPlane(workdir, binaries()).start()
    try:
        yield plane
    finally:
        plane.stop()


def read(plane: ControlPlane, version: str, plural: str, *args: str) -> Any:
    return plane.kubectl("get", f"{plural}.{version}.{GROUP}", *args, "-o", "json",
                         check=False)


def test_objects_stored_as_v1alpha3_survive_the_upgrade(plane: ControlPlane,
                                                        tmp_path: Path) -> None:
    plane.kubectl("apply", "--server-side", "-f", "-", input=old_crds())
    plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "crd",
                  *[f"{p}.{GROUP}" for p in PLURALS])
    for path in (SEED / "deviceclass.yaml", SEED / "resourceclaim.yaml",
                 SEED / "resourceclaimtemplate.yaml", SEED_SLICE / "resourceslice.yaml"):
        # The seed's objects (written in v1) as a client of the old CRDs wrote them.
        old = [to_v1alpha3(doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
        plane.kubectl("create", "-f", "-", input=yaml.safe_dump_all(old))

    # The upgrade: the new CRDs (v1 stored, v1alpha3 served) and the webhook that converts.
    webhook = ConversionServer(tmp_path, plane.kubeconfig).start()
    try:
        webhook.install_crds(plane, CRDS)
        plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f",
                      str(CRDS))
        crd = get_json(plane, "crd", f"resourceclaims.{GROUP}")
        assert crd["status"]["storedVersions"] == ["v1alpha3", "v1"]

        # Stored as v1alpha3, read as v1 (through the webhook).
        claim = json.loads(read(plane, "v1", "resourceclaims", "small-white-cat-claim",
                                "-n", "default").stdout)
        assert claim["apiVersion"] == f"{GROUP}/v1"
        request = claim["spec"]["devices"]["requests"][0]
        assert request["exactly"]["deviceClassName"] == "resource.example.com"
        slice_ = json.loads(read(plane, "v1", "resourceslices", "worker-1-cats").stdout)
        assert slice_["spec"]["devices"][0]["attributes"]["color"] == {"string": "white"}

        # Rewrite every object once in the storage version: a no-op update each.
        for plural in PLURALS:
            items = json.loads(read(plane, "v1", plural, "-A").stdout)["items"]
            for item in items:
                plane.kubectl("replace", "-f", "-", input=json.dumps(item))
        # Every object is now stored as v1: v1alpha3 can leave storedVersions.
        for plural in PLURALS:
            plane.kubectl("patch", "crd", f"{plural}.{GROUP}", "--subresource=status",
                          "--type=merge", "-p",
                          json.dumps({"status": {"storedVersions": ["v1"]}}))
        assert get_json(plane, "crd", f"resourceclaims.{GROUP}")["status"][
            "storedVersions"] == ["v1"]
    finally:
        webhook.stop()

    # The operator (or whatever serves /convert) is down: v1 — the storage version — reads
    # and writes as before; v1alpha3 clients are refused with the webhook named.
    for plural in PLURALS:
        assert read(plane, "v1", plural, "-A").returncode == 0, plural
    plane.kubectl("label", f"resourceclaims.v1.{GROUP}", "small-white-cat-claim", "-n",
                  "default", "migrated=yes")
    old = read(plane, "v1alpha3", "resourceclaims", "-A")
    print(f"\n[v1alpha3 read, webhook down] {old.stderr.strip()[:300]}")
    assert old.returncode != 0
    assert "conversion webhook for resource.kdra.dev/v1, Kind=ResourceClaim failed" in \
        old.stderr

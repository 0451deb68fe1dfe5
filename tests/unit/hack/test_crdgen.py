"""hack/crdgen: kdra's CRDs (both versions) and the chart's copies come from the models.

- crds/ and charts/kdra/crds/ are what ``python -m hack.crdgen`` writes (``--check``);
- a field added to the v1 claim model, in a copy of the source, makes ``--check`` fail
  naming the claim and template CRDs and their chart copies, and once written shows in v1, in
  v1alpha3 (where the conversion puts it) and in the chart;
- the pieces: how a model reads (docstrings, constraints, ``crd(...)``), that ``crd(...)``
  never changes parsing, and that the generator refuses what it cannot express (a stale
  v1alpha3 legacy entry, an unknown type, a printer column naming no field).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from hack.crdgen import openapi, render, v1alpha3
from hack.crdgen.kinds import KINDS
from pydantic import Field

from kdra.dra.models.base import _Model
from kdra.dra.models.crd import crd, crd_object, item, rule

ROOT = Path(__file__).resolve().parents[3]


def crdgen(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "operator"), str(root)])}
    return subprocess.run([sys.executable, "-m", "hack.crdgen", *args], cwd=root, env=env,
                          capture_output=True, text=True, check=False, timeout=120)


def test_crds_and_the_chart_copies_are_what_the_models_say() -> None:
    result = crdgen(ROOT, "--check")
    assert result.returncode == 0, result.stderr


def _copy(tmp: Path) -> Path:
    """The parts of the repository the generator reads and writes."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "operator" / "kdra", tmp / "operator" / "kdra", ignore=ignore)
    shutil.copytree(ROOT / "hack" / "crdgen", tmp / "hack" / "crdgen", ignore=ignore)
    shutil.copytree(ROOT / "crds", tmp / "crds")
    shutil.copytree(ROOT / "charts" / "kdra" / "crds", tmp / "charts" / "kdra" / "crds")
    (tmp / "manifests" / "base" / "crds").mkdir(parents=True)
    shutil.copy(ROOT / "manifests" / "base" / "crds" / "Kustomization",
                tmp / "manifests" / "base" / "crds")
    return tmp


NEW_FIELD = '''
    preference: str | None = Field(default=None, json_schema_extra=crd(max_length=32))
    """Which of the matching devices to prefer (a field added by a test)."""
'''


def _versions(path: Path) -> dict[str, Any]:
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return {v["name"]: v["schema"]["openAPIV3Schema"] for v in docs[0]["spec"]["versions"]}


def _at(schema: dict[str, Any], *path: str) -> dict[str, Any]:
    node = schema
    for key in path:
        node = node["items"] if key == "[]" else node["properties"][key]
    return node


def test_a_field_added_to_the_claim_model_reaches_both_versions_and_the_chart(
        tmp_path: Path) -> None:
    root = _copy(tmp_path)
    model = root / "operator" / "kdra" / "dra" / "models" / "v1_claim_spec.py"
    source = model.read_text()
    anchor = '    Defaults to false."""\n'  # the end of ExactDeviceRequest.admin_access's doc
    assert source.count(anchor) == 1
    model.write_text(source.replace(anchor, anchor + NEW_FIELD))

    stale = crdgen(root, "--check")
    assert stale.returncode == 1
    named = stale.stderr.split(":", 1)[1]
    for path in ("crds/resourceclaims.yaml", "crds/resourceclaimtemplates.yaml",
                 "charts/kdra/crds/resourceclaims.yaml",
                 "charts/kdra/crds/resourceclaimtemplates.yaml"):
        assert path in named, stale.stderr
    assert "deviceclasses" not in named and "resourceslices" not in named, stale.stderr

    written = crdgen(root)
    assert written.returncode == 0, written.stderr
    expected = {"type": "string", "maxLength": 32,
                "description": "Which of the matching devices to prefer (a field added by a "
                               "test)."}
    for path, spec in ((root / "crds" / "resourceclaims.yaml", ("spec",)),
                       (root / "charts" / "kdra" / "crds" / "resourceclaims.yaml", ("spec",)),
                       (root / "crds" / "resourceclaimtemplates.yaml", ("spec", "spec"))):
        versions = _versions(path)
        request = _at(versions["v1"], *spec, "devices", "requests", "[]")
        assert request["properties"]["exactly"]["properties"]["preference"] == expected
        assert "preference" not in request["properties"]
        # v1alpha3: a request's `exactly` fields sit on the request (request_down)
        alpha_request = _at(versions["v1alpha3"], *spec, "devices", "requests", "[]")
        assert alpha_request["properties"]["preference"] == expected
    assert crdgen(root, "--check").returncode == 0


# --------------------------------------------------------------------------- how a model reads


class _Inner(_Model):
    """An inner object."""

    model_config = crd_object(rules=[rule("self.a != 'x'", "a must not be x")])

    a: str = Field(max_length=5, json_schema_extra=crd(min_length=1))
    """The a."""


class _Outer(_Model):
    """The outer object."""

    inner: _Inner | None = Field(default=None, json_schema_extra=crd(
        rules=[rule("has(self.a)", "a is needed")], properties={"a": {"maxLength": None}}))
    names: tuple[Annotated[str, item("A name.", pattern="^n")], ...] = Field(
        default=(), max_length=3)
    counts: dict[str, int] = Field(default_factory=dict, json_schema_extra=crd(
        required=True, format=None))
    """Counts by name."""
    free: dict[str, Any] | None = None


def test_a_model_reads_as_its_docstrings_constraints_and_crd_extras() -> None:
    schema = openapi.model_schema(_Outer)
    assert schema["description"] == "The outer object."
    assert schema["required"] == ["counts"]
    inner = schema["properties"]["inner"]
    assert inner["description"] == "An inner object."  # no field doc: the class's
    assert inner["required"] == ["a"]
    # the field's extra merged over the class: None removed pydantic's maxLength, rules add up
    assert inner["properties"]["a"] == {"type": "string", "description": "The a.",
                                        "minLength": 1}
    assert [r["rule"] for r in inner["x-kubernetes-validations"]] == ["self.a != 'x'",
                                                                       "has(self.a)"]
    assert schema["properties"]["names"] == {
        "type": "array", "items": {"type": "string", "description": "A name.", "pattern": "^n"},
        "maxItems": 3, "x-kubernetes-list-type": "atomic"}
    assert schema["properties"]["counts"] == {
        "type": "object", "description": "Counts by name.",
        "additionalProperties": {"type": "integer", "format": "int64"}}
    assert schema["properties"]["free"] == {"type": "object",
                                            "x-kubernetes-preserve-unknown-fields": True}


def test_crd_extras_never_change_how_a_model_parses() -> None:
    parsed = _Outer.model_validate({"inner": {"a": "x"}, "names": ["zzz"], "counts": {}})
    assert parsed.inner is not None and parsed.inner.a == "x"  # the CEL rule is the server's
    assert parsed.names == ("zzz",)  # the item pattern too
    with pytest.raises(ValueError, match="at most 5"):
        _Outer.model_validate({"inner": {"a": "toolong"}})  # pydantic's own limit stays


def test_a_type_the_generator_cannot_express_is_named() -> None:
    class Odd(_Model):
        when: float

    with pytest.raises(openapi.SchemaError, match=r"Odd\.when: cannot express the type"):
        openapi.model_schema(Odd)

    class Bounded(_Model):
        count: int = Field(gt=0)

    with pytest.raises(openapi.SchemaError, match=r"Bounded\.count: unsupported constraint"):
        openapi.model_schema(Bounded)


# --------------------------------------------------------------------------- the generator's guards


def test_a_stale_v1alpha3_legacy_entry_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = openapi.model_schema(KINDS[0].model)
    monkeypatch.setitem(v1alpha3.LEGACY, "ResourceClaim", {
        **v1alpha3.LEGACY["ResourceClaim"], ".status.allocation.allocationTimestamp": {
            "maxLength": 10}})
    with pytest.raises(v1alpha3.LegacyError, match="lacks"):
        v1alpha3.derive("ResourceClaim", v1)  # v1alpha3 has no allocationTimestamp
    monkeypatch.setitem(v1alpha3.LEGACY, "ResourceClaim", {
        ".status.reservedFor": {"maxItems": 256}})
    with pytest.raises(v1alpha3.LegacyError, match="changes nothing"):
        v1alpha3.derive("ResourceClaim", v1)


def test_a_printer_column_must_name_a_field() -> None:
    slices = next(kind for kind in KINDS if kind.file == "resourceslices.yaml")
    broken = dataclasses.replace(slices, columns=(
        {"name": "Nodes", "type": "string", "jsonPath": ".spec.nodeNames"},))
    with pytest.raises(ValueError, match=r"\.spec\.nodeNames names no field"):
        render.document(broken)


def test_v1alpha3_drops_exactly_what_the_conversion_drops() -> None:
    claims = render.document(KINDS[0])
    v1, alpha = (v["schema"]["openAPIV3Schema"] for v in claims["spec"]["versions"])
    request = _at(v1, "spec", "devices", "requests", "[]")
    alpha_request = _at(alpha, "spec", "devices", "requests", "[]")
    exactly = set(request["properties"]["exactly"]["properties"])
    assert set(alpha_request["properties"]) == ({"name"} | exactly) - {"tolerations", "capacity"}
    results = _at(alpha, "status", "allocation", "devices", "results", "[]")
    assert not set(results["properties"]) & {"adminAccess", "tolerations", "shareID",
                                              "consumedCapacity", "bindingConditions"}
    # no rule is left that mentions a field v1alpha3 lacks
    text = yaml.safe_dump(alpha)
    for gone in ("firstAvailable", "distinctAttribute", "allocationTimestamp"):
        assert gone not in text

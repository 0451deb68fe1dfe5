"""The examples under manifests/examples and the demo agree on their DeviceClasses: a class name
has one definition (the same spec wherever it is written), so applying several examples, in
any order, or an example on the demo never changes a class under another's pods (e.g. drops
the extendedResourceName manifests/examples/extended relies on)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from kdra_devenv import demo

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "manifests" / "examples"


def classes(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text)
            if isinstance(doc, dict) and doc.get("kind") == "DeviceClass"]


def test_each_device_class_has_one_definition() -> None:
    specs: dict[str, dict[str, Any]] = defaultdict(dict)
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in classes(path.read_text()):
            specs[doc["metadata"]["name"]][str(path.relative_to(ROOT))] = doc["spec"]
    assert specs["gpu.kdra.dev"], "no gpu.kdra.dev class in the examples"
    for name, where in specs.items():
        distinct = {yaml.safe_dump(spec, sort_keys=True) for spec in where.values()}
        assert len(distinct) == 1, f"DeviceClass {name} is defined differently in {sorted(where)}"
    assert specs["gpu.kdra.dev"]["manifests/examples/gpu/deviceclass.yaml"][
        "extendedResourceName"] == "gpu.kdra.dev/gpu"


def test_the_demo_uses_the_examples_classes() -> None:
    assert classes(demo.GPU_OBJECTS) == [], "the demo defines a DeviceClass of its own"
    assert demo.GPU_CLASS == EXAMPLES / "gpu" / "deviceclass.yaml"

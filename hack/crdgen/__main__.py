"""Write kdra's CustomResourceDefinitions (``crds/*.yaml``) and the Helm chart's copies
(``charts/kdra/crds/*.yaml``) from the models in ``operator/kdra/dra/models``.

    .venv/bin/python -m hack.crdgen            # write them
    .venv/bin/python -m hack.crdgen --check    # exit 1, naming the files, if one differs

Each kind's storage version ``v1`` is its model, field for field (``hack.crdgen.openapi``);
``v1alpha3`` is derived from it by the conversion's rules (``hack.crdgen.v1alpha3``); names,
printer columns and the rest come from ``hack.crdgen.kinds``. The chart's copy of a CRD is
the CRD with kdra's label, as ``kubectl kustomize manifests/base/crds`` renders it.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

from hack.crdgen.render import CHART_CRDS, CRDS, ROOT, wanted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.crdgen",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only compare; exit 1 naming the files that differ")
    parser.add_argument("--diff", action="store_true", help="with --check: print the diffs")
    args = parser.parse_args(argv)
    files = wanted()
    stale = [path for directory in (CRDS, CHART_CRDS) for path in sorted(directory.glob("*.yaml"))
             if path not in files]
    differ = []
    for path, content in files.items():
        current = path.read_text() if path.exists() else ""
        if current == content:
            continue
        differ.append(path)
        if args.check:
            if args.diff:
                sys.stdout.writelines(_diff(path, current, content))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            print(f"wrote {path.relative_to(ROOT)}")
    for path in stale:
        if not args.check:
            path.unlink()
            print(f"removed {path.relative_to(ROOT)} (no kind generates it)")
    if args.check and (differ or stale):
        names = [str(p.relative_to(ROOT)) for p in differ] + [
            f"{p.relative_to(ROOT)} (stale)" for p in stale]
        print("out of date with the models (run .venv/bin/python -m hack.crdgen): "
              + ", ".join(names), file=sys.stderr)
        return 1
    return 0


def _diff(path: Path, current: str, content: str) -> Any:
    name = str(path.relative_to(ROOT))
    return difflib.unified_diff(current.splitlines(True), content.splitlines(True),
                                f"{name} (now)", f"{name} (from the models)")


if __name__ == "__main__":
    sys.exit(main())

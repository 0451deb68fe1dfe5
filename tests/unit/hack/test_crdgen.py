"""crds/*.yaml are what hack/crdgen writes: the v1 schema is generated from the v1alpha3 one,
so an edit to either side without a re-run would let the versions drift apart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_crds_are_up_to_date_with_the_generator() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "hack" / "crdgen"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr

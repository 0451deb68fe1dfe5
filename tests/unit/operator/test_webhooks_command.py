"""``kdra webhooks``: the webhook server alone, as a process (flags, start-up failures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def kdra(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kdra", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def test_it_takes_the_operators_webhook_flags() -> None:
    result = kdra("webhooks", "--help")
    assert result.returncode == 0
    for flag in ("--webhook-port", "--webhook-cert-dir", "--webhook-manage-config",
                 "--webhook-url"):
        assert flag in result.stdout


def test_nothing_to_serve_on_port_zero() -> None:
    result = kdra("webhooks", "--webhook-port", "0")
    assert result.returncode == 2
    assert "webhook_port is 0" in result.stderr


def test_a_bad_certificate_directory_is_reported(tmp_path: Path) -> None:
    result = kdra("webhooks", "--webhook-port", "1", "--webhook-cert-dir", str(tmp_path),
                  "--webhook-manage-config", "false")
    assert result.returncode == 1
    assert "kdra webhooks cannot start" in result.stderr and str(tmp_path) in result.stderr

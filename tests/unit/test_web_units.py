"""Runs the web client's unit tests (node's built-in test runner) so `make test` covers them."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_web_client_unit_tests__node_test_runner__all_pass() -> None:
    node = shutil.which("node")
    assert node is not None, "node is not installed (.ci/run installs Debian's nodejs)"
    result = subprocess.run([node, "--test", "tests/web/"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    summary = "\n".join(line for line in result.stdout.splitlines() if line.startswith("# "))
    assert result.returncode == 0, f"node --test failed:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"
    assert "# fail 0" in summary and "# pass 0" not in summary, summary

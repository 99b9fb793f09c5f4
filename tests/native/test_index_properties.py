"""Runs the hypothesis properties of tests/support/index_properties.py in a child process: a native crash there fails this
test with the child's output instead of killing the whole pytest session."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_index_api_properties() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s", str(TESTS / "support" / "index_properties.py")],
        capture_output=True, text=True, timeout=900, cwd=TESTS.parent,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert "property outcomes:" in proc.stdout

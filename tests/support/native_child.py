"""Runs a snippet in a fresh Python process, so a native crash (SIGSEGV, abort) fails one test instead of pytest.

The child imports the same medretrieve as the tests (it inherits the environment: MEDRETRIEVE_CORE_DIR and
PYTHONPATH in developer builds, the installed package in CI).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from typing import Optional

_PRELUDE = """
import resource, sys
limit = {limit!r}
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
"""


def run_python(code: str, *, address_space: Optional[int] = None, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Runs ``code`` (dedented) in a child interpreter, optionally under an address-space limit (bytes)."""
    script = _PRELUDE.format(limit=address_space) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))


def describe(proc: subprocess.CompletedProcess) -> str:
    """Exit status (with the signal's name when the child died of one) and the tail of its output."""
    rc = proc.returncode
    status = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
    return f"{status}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"

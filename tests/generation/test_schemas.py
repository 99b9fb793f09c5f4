"""The BioASQ reply schemas: their fields follow the prompts, a reply that fits them parses, llama.cpp's
converter turns each into a grammar; ``schema_of`` and llama.cpp's spelling of a schema. (MedRGB's reply schemas
are tested in tests/evaluation/medrgb/test_medrgb_schemas.py.)"""
from __future__ import annotations

import json

import pytest

from medretrieve.generation import parsers
from medretrieve.generation.llamacpp import llamacpp_response_format
from medretrieve.generation.schemas import bioasq_response_format, schema_of
from medretrieve.records import BIOASQ_TYPES


def test_schema_of_reads_a_json_schema_format():
    assert schema_of(bioasq_response_format("yesno")) == bioasq_response_format("yesno")["json_schema"]["schema"]
    with pytest.raises(ValueError, match="json_schema"):
        schema_of({"type": "json_schema", "json_schema": {}})
    assert schema_of({"type": "json_object"}) is None


def test_llamacpp_spelling_of_a_schema(monkeypatch):
    from fake_llama_cpp import install

    install(monkeypatch, lambda req: "")
    fmt = bioasq_response_format("factoid")
    assert llamacpp_response_format(fmt) == {"type": "json_object", "schema": fmt["json_schema"]["schema"]}
    assert llamacpp_response_format({"type": "json_object"}) == {"type": "json_object"}
    with pytest.raises(ValueError, match="cannot turn the JSON schema into a grammar"):
        llamacpp_response_format({"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}})


def _bioasq(qtype: str, max_tokens=None) -> dict:
    return bioasq_response_format(qtype, max_tokens)["json_schema"]["schema"]


def test_bioasq_schemas_by_type():
    from medretrieve.generation.schemas import LIST_ENTITIES

    assert _bioasq("yesno")["properties"]["exact_answer"]["enum"] == ["yes", "no"]
    factoid, lst = _bioasq("factoid")["properties"]["exact_answer"], _bioasq("list")["properties"]["exact_answer"]
    assert (factoid["minItems"], factoid["maxItems"], lst["maxItems"]) == (1, 5, LIST_ENTITIES)
    assert factoid["items"]["minLength"] == 1 and factoid["items"]["maxLength"] <= 60
    assert list(_bioasq("summary")["properties"]) == ["ideal_answer"]
    for qtype in BIOASQ_TYPES:  # the reading of the snippets first, then the exact answer
        schema = _bioasq(qtype, 100)
        assert list(schema["properties"])[0] == "ideal_answer" and schema["required"] == list(schema["properties"])
        # capped so the exact answer after it fits the budget: ~1/4 of it (1 char a token), a summary 3 chars
        assert schema["properties"]["ideal_answer"]["maxLength"] == (300 if qtype == "summary" else 100)
    for reply, qtype, exact in (({"exact_answer": "no", "ideal_answer": "No."}, "yesno", "no"),
                                ({"exact_answer": ["TP53", "tp53", "BRCA1"], "ideal_answer": "."}, "list",
                                 ["TP53", "BRCA1"]),
                                ({"exact_answer": ["1,25-dihydroxyvitamin D3"], "ideal_answer": "."}, "factoid",
                                 ["1,25-dihydroxyvitamin D3"])):
        assert parsers.parse_bioasq(json.dumps(reply), qtype)["exact_answer"] == exact
    # the prompt's example values, copied by a small model, are no answer
    assert parsers.parse_bioasq('{"ideal_answer": "It is.", "exact_answer": ["<entity 1>", "TP53"]}',
                                "list")["exact_answer"] == ["TP53"]
    with pytest.raises(parsers.ParseError, match="no entity"):
        parsers.parse_bioasq('{"ideal_answer": "<two or three sentences>", "exact_answer": ["<entity 1>"]}', "list")
    # a candidate that reads as a sentence is no name (SmolLM2 copied the start of its ideal answer there)
    assert parsers.parse_bioasq(json.dumps({"ideal_answer": "x", "exact_answer": [
        "PMS2 has been shown to cause Lynch", "PMS2"]}), "factoid")["exact_answer"] == ["PMS2"]
    assert parsers.parse_bioasq('{"ideal_answer": "No, it does not.", "exact_answer": "<yes or no>"}',
                                "yesno")["exact_answer"] == "no"
    # a reply cut at the token budget keeps the ideal answer it wrote; its exact answer is missing
    cut = '{"ideal_answer": "Lynch \\"syndrome\\" is caused by PMS2.", "exact_answer": ["PMS'
    assert parsers.parse_bioasq(cut, "summary")["ideal_answer"] == 'Lynch "syndrome" is caused by PMS2.'
    assert parsers.parse_bioasq('{"ideal_answer": "Lynch syndrome is caus', "summary")["ideal_answer"] == \
        "Lynch syndrome is caus"
    with pytest.raises(parsers.ParseError, match="no 'EXACT:'"):
        parsers.parse_bioasq(cut, "factoid")
    with pytest.raises(ValueError, match="qtype"):
        bioasq_response_format("boolean")
    with pytest.raises(ValueError, match="max_tokens"):
        bioasq_response_format("list", 0)


@pytest.mark.parametrize("qtype", BIOASQ_TYPES)
def test_llama_cpp_makes_a_grammar_of_every_bioasq_schema(qtype):
    """With the real llama-cpp-python (not in CI)."""
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    gbnf = grammar.json_schema_to_gbnf(json.dumps(_bioasq(qtype, 96)))
    assert "ideal-answer-kv" in gbnf and ("exact-answer-kv" in gbnf) == (qtype != "summary")

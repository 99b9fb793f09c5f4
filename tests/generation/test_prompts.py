"""Prompt builders: templates load from files, every placeholder is filled, formats are asked for."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

import pytest

from medretrieve.generation import prompts as P

Q = "Is baloxavir approved for influenza?"
SNIPPETS = ["Baloxavir marboxil was approved for influenza A and B.", {"title": "Xofluza", "text": "A cap inhibitor."}]


@dataclass
class HitLike:
    title: str
    text: str


def _all_messages():
    return [
        P.bioasq_messages(Q, "yesno", SNIPPETS),
        P.bioasq_messages(Q, "factoid", SNIPPETS, phase="B"),
        P.bioasq_messages(Q, "list", SNIPPETS),
        P.bioasq_messages(Q, "summary", []),
        P.cite_messages(Q, SNIPPETS),
        P.cite_messages(Q, SNIPPETS, mode="answer_only", qtype="factoid"),
        P.medrgb_messages("standard", Q, ["yes", "no"], SNIPPETS),
        P.medrgb_messages("sufficiency", Q, {"A": "yes", "B": "no"}, SNIPPETS),
        P.medrgb_messages("integration", Q, ["yes", "no"], SNIPPETS, sub_questions=["What is baloxavir?"]),
        P.medrgb_messages("robustness", Q, ["yes", "no"], SNIPPETS),
        P.search_topics_messages(Q, n=4),
        P.sub_qa_messages(Q, SNIPPETS, n=2),
        P.counterfactual_messages(SNIPPETS[0], "influenza"),
        P.judge_messages(Q, "Yes.", "It is approved."),
        P.expansion_messages(Q, "synonyms"),
        P.expansion_messages(Q, "relations", n=5),
    ]


def test_every_prompt_is_system_plus_user_with_no_unfilled_placeholder():
    for messages in _all_messages():
        assert [m["role"] for m in messages] == ["system", "user"]
        for m in messages:
            assert m["content"].strip()
            assert not re.search(r"\$[a-z_]+", m["content"]), m["content"]


def test_templates_are_package_files():
    folder = resources.files("medretrieve.generation").joinpath("templates")
    names = {p.name for p in folder.iterdir()}
    for name in ("bioasq.txt", "cite.txt", "answer_only.txt", "judge.txt", "medrgb_robustness.txt",
                 "expansion_synonyms.txt", "search_topics.txt", "sub_qa.txt", "counterfactual.txt"):
        assert name in names
    system, user = P.load_template("judge")
    assert system is not None and "$pred" in user.template


def test_sources_are_numbered_with_titles():
    text = P.format_sources(["first", {"title": "T", "text": "second"}, HitLike("H", "third")])
    assert text == "[1] first\n\n[2] T\nsecond\n\n[3] H\nthird"
    assert P.format_sources(["abcdefgh"], max_chars=3) == "[1] abc ..."
    with pytest.raises(TypeError):
        P.format_sources("not a list")
    with pytest.raises(TypeError, match="evidence item 1"):
        P.format_sources([42])


def test_bioasq_formats_by_type_and_phase():
    from medretrieve.generation.schemas import bioasq_response_format

    yesno = P.bioasq_messages(Q, "yesno", SNIPPETS)[1]["content"]
    assert '"exact_answer": "<yes or no>"' in yesno and "[1] Baloxavir" in yesno and Q in yesno
    assert "retrieved" in yesno
    factoid = P.bioasq_messages(Q, "factoid", SNIPPETS, phase="B")[1]["content"]
    assert "up to 5" in factoid and "experts" in factoid
    for qtype in P.BIOASQ_TYPES:  # the JSON each prompt shows has the fields of the type's schema, in order
        user = P.bioasq_messages(Q, qtype, SNIPPETS)[1]["content"]
        example = json.loads(next(line for line in user.splitlines() if line.startswith("{")))
        schema = bioasq_response_format(qtype)["json_schema"]["schema"]
        assert list(example) == list(schema["properties"]) and "EXACT:" not in user
    assert "exact_answer" not in P.bioasq_messages(Q, "summary", SNIPPETS)[1]["content"]
    with pytest.raises(ValueError, match="qtype"):
        P.bioasq_messages(Q, "boolean", SNIPPETS)
    with pytest.raises(ValueError, match="phase"):
        P.bioasq_messages(Q, "yesno", SNIPPETS, phase="A")


def test_cite_and_answer_only_modes():
    system, user = (m["content"] for m in P.cite_messages(Q, SNIPPETS))
    assert "[1]" in system and "contradicts" in system and P.INSUFFICIENT in system
    assert "[2] Xofluza" in user and "EXACT" not in user
    yesno = P.cite_messages(Q, SNIPPETS, qtype="yesno")[1]["content"]
    assert 'EXACT: yes' in yesno
    plain = P.cite_messages(Q, SNIPPETS, mode="answer_only")[1]["content"]
    assert "without citations" in plain and P.INSUFFICIENT in plain
    with pytest.raises(ValueError, match="mode"):
        P.cite_messages(Q, SNIPPETS, mode="verbose")
    with pytest.raises(ValueError, match="question"):
        P.cite_messages("  ", SNIPPETS)
    with pytest.raises(TypeError, match="question"):
        P.cite_messages(None, SNIPPETS)


def test_medrgb_scenarios():
    std = P.medrgb_messages("standard", Q, ["yes", "no"], SNIPPETS)[1]["content"]
    assert "A. yes\nB. no" in std and "Document [2] Xofluza" in std and '"answer_choice"' in std
    assert P.INSUFFICIENT not in std
    suff = P.medrgb_messages("sufficiency", Q, ["yes", "no"], SNIPPETS)[1]["content"]
    assert P.INSUFFICIENT in suff and '"relevant_documents"' in suff
    integ = P.medrgb_messages("integration", Q, ["yes", "no"], SNIPPETS, sub_questions=["What is X?", "Y?"])
    assert "1. What is X?\n2. Y?" in integ[1]["content"] and '"sub_answers"' in integ[1]["content"]
    rob = P.medrgb_messages("robustness", Q, ["yes", "no"], SNIPPETS)[1]["content"]
    assert '"has_factual_error"' in rob and '"correction"' in rob and "sub_answers" not in rob
    rob_sub = P.medrgb_messages("robustness", Q, ["yes", "no"], SNIPPETS, sub_questions=["What is X?"])[1]["content"]
    assert "Sub-questions to answer first:\n1. What is X?" in rob_sub and '"sub_answers"' in rob_sub
    assert '"has_factual_error"' in rob_sub
    closed = P.medrgb_messages("standard", Q, ["yes", "no"], [])
    assert "own medical knowledge" in closed[0]["content"] and "Document" not in closed[1]["content"]
    assert "A. yes\nB. no" in closed[1]["content"] and '"answer_choice"' in closed[1]["content"]
    with pytest.raises(ValueError, match="scenario"):
        P.medrgb_messages("noise", Q, ["a", "b"], SNIPPETS)
    with pytest.raises(ValueError, match="sub_questions"):
        P.medrgb_messages("integration", Q, ["a", "b"], SNIPPETS)
    with pytest.raises(ValueError, match="sub_questions"):
        P.medrgb_messages("standard", Q, ["a", "b"], SNIPPETS, sub_questions=["x?"])
    with pytest.raises(ValueError, match="at least 2"):
        P.medrgb_messages("standard", Q, ["only"], SNIPPETS)


def test_option_letters():
    assert P.option_letters(["x", "y", "z"]) == {"A": "x", "B": "y", "C": "z"}
    assert P.option_letters({"a": "x", "b": "y"}) == {"A": "x", "B": "y"}
    with pytest.raises(ValueError, match="single letters"):
        P.option_letters({"AA": "x", "B": "y"})
    with pytest.raises(TypeError):
        P.option_letters("xy")


def test_generation_and_expansion_prompts():
    topics = P.search_topics_messages(Q, n=4)[1]["content"]
    assert "4 different search topics" in topics and "JSON array of 4" in topics
    subqa = P.sub_qa_messages(Q, SNIPPETS, n=2)[1]["content"]
    assert "Document [1]" in subqa and '"question"' in subqa
    cf = P.counterfactual_messages("Aspirin inhibits COX.", "COX")[1]["content"]
    assert "Aspirin inhibits COX." in cf and '"counterfactual_answer"' in cf
    judge = P.judge_messages(Q, "Yes.", "")[1]["content"]
    assert "SCORE: 0.5" in judge and "(empty answer)" in judge
    syn = P.expansion_messages("MI treatment", "synonyms")[1]["content"]
    rel = P.expansion_messages("MI treatment", "relations")[1]["content"]
    assert "synonyms" in syn and "MeSH" in syn and "treats" in rel
    with pytest.raises(ValueError, match="kind"):
        P.expansion_messages(Q, "antonyms")
    with pytest.raises(ValueError, match="n must be"):
        P.search_topics_messages(Q, n=0)


def test_user_text_with_dollar_signs_is_kept_verbatim():
    msgs = P.cite_messages("Does $HOME cost $5?", ["price is $5 per ${dose}"])
    assert "Does $HOME cost $5?" in msgs[1]["content"] and "${dose}" in msgs[1]["content"]

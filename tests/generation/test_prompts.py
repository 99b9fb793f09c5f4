"""Prompt builders: templates load from files, every placeholder is filled, formats are asked for."""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import pytest
from chat_prompts import assert_filled_chat

from medretrieve.generation import prompts as P
from medretrieve.records import BIOASQ_TYPES, INSUFFICIENT

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
        P.expansion_messages(Q, "synonyms"),
        P.expansion_messages(Q, "relations", n=5),
    ]


def test_every_prompt_is_system_plus_user_with_no_unfilled_placeholder():
    for messages in _all_messages():
        assert_filled_chat(messages)


def test_templates_are_package_files():
    folder = resources.files("medretrieve.generation").joinpath("templates")
    names = {p.name for p in folder.iterdir()}
    for name in ("bioasq.txt", "cite.txt", "answer_only.txt", "expansion_synonyms.txt", "bioasq_list.txt"):
        assert name in names
    system, user = P.load_template("cite")
    assert system is not None and "$question" in user.template


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
    for qtype in BIOASQ_TYPES:  # the JSON each prompt shows has the fields of the type's schema, in order
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
    assert "[1]" in system and "contradicts" in system and INSUFFICIENT in system
    assert "[2] Xofluza" in user and "EXACT" not in user
    yesno = P.cite_messages(Q, SNIPPETS, qtype="yesno")[1]["content"]
    assert 'EXACT: yes' in yesno
    plain = P.cite_messages(Q, SNIPPETS, mode="answer_only")[1]["content"]
    assert "without citations" in plain and INSUFFICIENT in plain
    with pytest.raises(ValueError, match="mode"):
        P.cite_messages(Q, SNIPPETS, mode="verbose")
    with pytest.raises(ValueError, match="question"):
        P.cite_messages("  ", SNIPPETS)
    with pytest.raises(TypeError, match="question"):
        P.cite_messages(None, SNIPPETS)


def test_expansion_prompts():
    syn = P.expansion_messages("MI treatment", "synonyms")[1]["content"]
    rel = P.expansion_messages("MI treatment", "relations")[1]["content"]
    assert "synonyms" in syn and "MeSH" in syn and "treats" in rel
    with pytest.raises(ValueError, match="kind"):
        P.expansion_messages(Q, "antonyms")
    with pytest.raises(ValueError, match="n must be"):
        P.expansion_messages(Q, n=0)


def test_a_template_of_another_package_is_read_by_the_same_loader():
    system, user = P.load_template("judge", "medretrieve.evaluation.medrgb")
    assert system is not None and "$pred" in user.template
    with pytest.raises(FileNotFoundError, match="judge.*medretrieve/generation/templates"):
        P.load_template("judge")  # MedRGB's prompts are not generation's
    with pytest.raises(KeyError, match="question"):
        P.render_messages("cite", {"sources": "[1] x"})


def test_user_text_with_dollar_signs_is_kept_verbatim():
    msgs = P.cite_messages("Does $HOME cost $5?", ["price is $5 per ${dose}"])
    assert "Does $HOME cost $5?" in msgs[1]["content"] and "${dose}" in msgs[1]["content"]

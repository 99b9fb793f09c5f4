"""MedRGB's prompts: its templates load from its own package, every placeholder is filled, each scenario asks
for its fields."""
from __future__ import annotations

from importlib import resources

import pytest
from chat_prompts import assert_filled_chat

from medretrieve.evaluation.medrgb import prompts as P
from medretrieve.records import INSUFFICIENT

Q = "Is baloxavir approved for influenza?"
SNIPPETS = ["Baloxavir marboxil was approved for influenza A and B.", {"title": "Xofluza", "text": "A cap inhibitor."}]


def _all_messages():
    return [
        P.medrgb_messages("standard", Q, ["yes", "no"], SNIPPETS),
        P.medrgb_messages("sufficiency", Q, {"A": "yes", "B": "no"}, SNIPPETS),
        P.medrgb_messages("integration", Q, ["yes", "no"], SNIPPETS, sub_questions=["What is baloxavir?"]),
        P.medrgb_messages("robustness", Q, ["yes", "no"], SNIPPETS),
        P.search_topics_messages(Q, n=4),
        P.sub_qa_messages(Q, SNIPPETS, n=2),
        P.counterfactual_messages(SNIPPETS[0], "influenza"),
        P.judge_messages(Q, "Yes.", "It is approved."),
    ]


def test_every_prompt_is_system_plus_user_with_no_unfilled_placeholder():
    for messages in _all_messages():
        assert_filled_chat(messages)


def test_templates_are_files_of_this_package():
    folder = resources.files("medretrieve.evaluation.medrgb").joinpath("templates")
    names = {p.name for p in folder.iterdir()}
    assert {f"medrgb_{s}.txt" for s in P.SCENARIOS} | {"medrgb_none.txt", "judge.txt", "search_topics.txt",
                                                       "sub_qa.txt", "counterfactual.txt"} == names


def test_medrgb_scenarios():
    std = P.medrgb_messages("standard", Q, ["yes", "no"], SNIPPETS)[1]["content"]
    assert "A. yes\nB. no" in std and "Document [2] Xofluza" in std and '"answer_choice"' in std
    assert INSUFFICIENT not in std
    suff = P.medrgb_messages("sufficiency", Q, ["yes", "no"], SNIPPETS)[1]["content"]
    assert INSUFFICIENT in suff and '"relevant_documents"' in suff
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


def test_context_and_judge_prompts():
    topics = P.search_topics_messages(Q, n=4)[1]["content"]
    assert "4 different search topics" in topics and "JSON array of 4" in topics
    subqa = P.sub_qa_messages(Q, SNIPPETS, n=2)[1]["content"]
    assert "Document [1]" in subqa and '"question"' in subqa
    cf = P.counterfactual_messages("Aspirin inhibits COX.", "COX")[1]["content"]
    assert "Aspirin inhibits COX." in cf and '"counterfactual_answer"' in cf
    judge = P.judge_messages(Q, "Yes.", "")[1]["content"]
    assert "SCORE: 0.5" in judge and "(empty answer)" in judge
    with pytest.raises(ValueError, match="n must be"):
        P.search_topics_messages(Q, n=0)

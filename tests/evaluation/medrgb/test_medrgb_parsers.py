"""MedRGB's reply parsers: the answer choice of every scenario, sub-QA pairs, counterfactuals, judge scores."""
from __future__ import annotations

import json

import pytest

from medretrieve.evaluation.medrgb import parsers as P
from medretrieve.generation.parsers import ParseError
from medretrieve.records import INSUFFICIENT


# ---------------------------------------------------------------------------
# parse_choice / parse_medrgb

OPTS = ["Aspirin", "Metformin", "Warfarin", "Insulin"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"step_by_step_thinking": "...", "answer_choice": "B"}', "B"),
        ('```json\n{"step_by_step_thinking": "It lowers glucose.", "answer_choice": "b"}\n```', "B"),
        ('{"answer_choice": "C. Warfarin"}', "C"),
        ('{"answer_choice": "Option D"}', "D"),
        ("Let's think step by step. Metformin lowers glucose.\nAnswer: B", "B"),
        ("To answer a question like this we compare drugs. The correct answer is (c).", "C"),
        ("A", "A"),
        ("(D)", "D"),
        ("B. Metformin", "B"),
        ("Warfarin", "C"),
        ("The drug in question is clearly **Insulin**, given the ketoacidosis.", "D"),
        ('{"answer_choice": "insufficient information"}', INSUFFICIENT),
        ("The documents do not say. Insufficient information.", INSUFFICIENT),
    ],
)
def test_parse_choice(text, expected):
    assert P.parse_choice(text, OPTS) == expected


@pytest.mark.parametrize(
    "text",
    ['{"answer_choice": "E"}', "The answer is E.", "Both aspirin and warfarin are anticoagulant-ish.", "", "a drug"],
)
def test_parse_choice_unreadable(text):
    with pytest.raises(ValueError) as info:
        P.parse_choice(text, OPTS)
    assert info.value.raw == text


def test_parse_medrgb_sufficiency_json():
    text = ('Here is my answer:\n{"relevant_documents": [1, "Document [3]"], '
            '"step_by_step_thinking": "Doc 1 says...", "answer_choice": "insufficient information"}')
    out = P.parse_medrgb(text, "sufficiency", OPTS)
    assert out["choice"] == INSUFFICIENT
    assert out["relevant_documents"] == [1, 3]
    assert out["reasoning"] == "Doc 1 says..."


def test_parse_medrgb_robustness_json():
    text = json.dumps({
        "document_analysis": [
            {"document": 1, "has_factual_error": False, "correction": ""},
            {"document": "2", "has_factual_error": "true", "correction": "Metformin lowers glucose."},
            {"document": 3, "has_factual_error": True, "correction": ""},
        ],
        "step_by_step_thinking": "Doc 2 is wrong.", "answer_choice": "B"})
    out = P.parse_medrgb(text, "robustness", OPTS)
    assert out["choice"] == "B"
    assert out["noisy_documents"] == [2, 3]
    assert out["corrections"] == {2: "Metformin lowers glucose."}


def test_parse_medrgb_integration_json():
    text = json.dumps({"sub_answers": [{"sub_question": "What lowers glucose?", "answer": "metformin",
                                        "documents": [2]}],
                       "step_by_step_thinking": "...", "answer_choice": "B"})
    out = P.parse_medrgb(text, "integration", OPTS)
    assert out["sub_answers"] == [{"sub_question": "What lowers glucose?", "answer": "metformin", "documents": [2]}]


def test_parse_medrgb_plain_text_fallback():
    text = ("Relevant documents: 1, 4\nDocument [2] contains a factual error. Correction: metformin is a "
            "biguanide.\nDocument [3] has no factual error.\nFinal answer: B")
    out = P.parse_medrgb(text, "robustness", OPTS)
    assert out["choice"] == "B"
    assert out["relevant_documents"] == [1, 4]
    assert out["noisy_documents"] == [2]
    assert out["corrections"] == {2: "metformin is a biguanide."}


def test_parse_medrgb_errors():
    with pytest.raises(ValueError, match="scenario"):
        P.parse_medrgb("A", "noise", OPTS)
    with pytest.raises(ValueError):
        P.parse_medrgb('{"answer_choice": "Z"}', "standard", OPTS)


# ---------------------------------------------------------------------------
# parse_sub_qa / parse_counterfactual / parse_judge

def test_parse_sub_qa():
    js = '```json\n[{"question": "What is baloxavir?", "answer": "a cap inhibitor"}, {"q": "x"}]\n```'
    assert P.parse_sub_qa(js) == [{"question": "What is baloxavir?", "answer": "a cap inhibitor"}]
    plain = "Q1: What is baloxavir?\nA1: A cap inhibitor.\nQ2: When approved?\nA2: 2018."
    assert P.parse_sub_qa(plain) == [{"question": "What is baloxavir?", "answer": "A cap inhibitor."},
                                     {"question": "When approved?", "answer": "2018."}]
    with pytest.raises(ValueError):
        P.parse_sub_qa("I could not write questions.")


def test_parse_counterfactual():
    js = '{"counterfactual_answer": "ibuprofen", "document": "Ibuprofen irreversibly inhibits COX-1."}'
    assert P.parse_counterfactual(js) == {"document": "Ibuprofen irreversibly inhibits COX-1.",
                                          "counterfactual_answer": "ibuprofen"}
    plain = "Counterfactual answer: ibuprofen\nDocument: Ibuprofen irreversibly inhibits COX-1."
    assert P.parse_counterfactual(plain)["document"] == "Ibuprofen irreversibly inhibits COX-1."
    assert P.parse_counterfactual("Ibuprofen inhibits COX-1.")["document"] == "Ibuprofen inhibits COX-1."
    with pytest.raises(ValueError):
        P.parse_counterfactual('{"counterfactual_answer": "x"}')


@pytest.mark.parametrize(
    "text, expected",
    [("SCORE: 1", 1.0), ("**Score:** 0.5", 0.5), ("score = 0", 0.0), ('{"score": 0.5}', 0.5), ("1", 1.0),
     ("The prediction is partially correct.", 0.5), ("Incorrect.", 0.0), ("Correct", 1.0), ("SCORE: 1/2", 0.5)],
)
def test_parse_judge(text, expected):
    assert P.parse_judge(text) == expected


@pytest.mark.parametrize("text", ["SCORE: 0.7", "no idea", '{"score": 3}'])
def test_parse_judge_unreadable(text):
    with pytest.raises(ValueError):
        P.parse_judge(text)


def test_an_unreadable_reply_is_the_generation_parse_error():
    with pytest.raises(ParseError) as info:
        P.parse_judge("no idea")
    assert info.value.raw == "no idea"
    with pytest.raises(ParseError, match="must be a str"):
        P.parse_medrgb(None, "standard", ["a", "b"])


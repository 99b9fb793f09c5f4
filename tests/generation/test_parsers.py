"""Output parsers on real-looking model replies (medretrieve.generation.parsers)."""
from __future__ import annotations

import json

import pytest

from medretrieve.generation import parsers as P


# ---------------------------------------------------------------------------
# parse_bioasq

YESNO_OUTPUTS = [
    ("EXACT: yes\nIDEAL: Baloxavir is approved for influenza A and B.", "yes"),
    ("**EXACT:** No\n**IDEAL:** There is no evidence that X causes Y.", "no"),
    ("```\nExact answer: YES\nIdeal answer: It does.\n```", "yes"),
    ('Sure! Here is the answer:\n{"exact_answer": "no", "ideal_answer": "No, it does not."}', "no"),
    ("Yes. Baloxavir was approved by the FDA in 2018.", "yes"),
    ("<think>The snippets say approved.</think>\nEXACT: yes\nBaloxavir is approved.", "yes"),
    # SmolLM2-135M's replies in the 12B1 Phase A+ / B runs (no EXACT line, the answer said in a sentence)
    ("The answer is no.", "no"),
    ('The answer to the question "Should all babies diagnosed with spina bifida be operated within the first week '
     'of life?" is "yes."', "yes"),
    ('The answer to the question "has MDMA(ecstasy) been successfully used to treat PTSD disorder?" is no.', "no"),
    ('The answer to the question "Is there no cure?" is "yes"', "yes"),  # not the question's own "no"
]


@pytest.mark.parametrize("text, expected", YESNO_OUTPUTS)
def test_parse_yesno(text, expected):
    out = P.parse_bioasq(text, "yesno")
    assert out["exact_answer"] == expected
    assert out["ideal_answer"] and "EXACT" not in out["ideal_answer"] and "think" not in out["ideal_answer"]


def test_parse_yesno_ideal_after_one_line_exact():
    out = P.parse_bioasq("EXACT: yes\nBaloxavir is approved.", "yesno")
    assert out == {"exact_answer": "yes", "ideal_answer": "Baloxavir is approved."}


def test_parse_factoid_ranked_and_capped():
    text = ("Based on the snippets:\nEXACT: 1. PD-L1 status | 2. EGFR mutation | TMB | MSI | HER2 | KRAS\n"
            "IDEAL: Pembrolizumab requires a PD-L1 companion test.")
    out = P.parse_bioasq(text, "factoid")
    assert out["exact_answer"] == ["PD-L1 status", "EGFR mutation", "TMB", "MSI", "HER2"]
    assert out["ideal_answer"].startswith("Pembrolizumab")


def test_parse_factoid_json_list_on_exact_line():
    out = P.parse_bioasq('EXACT: ["BRCA1", "BRCA2"]\nIDEAL: Both genes.', "factoid")
    assert out["exact_answer"] == ["BRCA1", "BRCA2"]
    nested = P.parse_bioasq('EXACT: [["PD-L1", "CD274"], ["TMB"]]', "list")
    assert nested["exact_answer"] == ["PD-L1", "TMB"]


def test_parse_factoid_json_nested_lists():
    text = '```json\n{"exact_answer": [["Baloxavir"], ["Oseltamivir"]], "ideal_answer": "Baloxavir."}\n```'
    assert P.parse_bioasq(text, "factoid")["exact_answer"] == ["Baloxavir", "Oseltamivir"]


def test_parse_list_formats():
    pipes = P.parse_bioasq("EXACT: inflammation | oxidative stress | hypoxia\nIDEAL: GDF-15 ...", "list")
    assert pipes["exact_answer"] == ["inflammation", "oxidative stress", "hypoxia"]
    bullets = P.parse_bioasq("EXACT:\n- inflammation\n- Oxidative stress\n- hypoxia.\nIDEAL: x", "list")
    assert bullets["exact_answer"] == ["inflammation", "Oxidative stress", "hypoxia"]
    commas = P.parse_bioasq("EXACT: 1,25-dihydroxyvitamin D3, calcitriol and vitamin D\nIDEAL: y", "list")
    assert commas["exact_answer"] == ["1,25-dihydroxyvitamin D3", "calcitriol", "vitamin D"]
    dupes = P.parse_bioasq("EXACT: TP53 | tp53 | BRCA1", "list")
    assert dupes["exact_answer"] == ["TP53", "BRCA1"] and dupes["ideal_answer"] == ""


def test_parse_summary():
    assert P.parse_bioasq("IDEAL: Hemolacria is bloody tears.", "summary") == {
        "exact_answer": None, "ideal_answer": "Hemolacria is bloody tears."}
    assert P.parse_bioasq("Hemolacria is a rare condition.", "summary")["ideal_answer"] == "Hemolacria is a rare condition."


@pytest.mark.parametrize(
    "text, qtype",
    [
        ("I cannot tell from the snippets.", "yesno"),
        ("EXACT: insufficient information", "yesno"),
        ("The answer is not clear from the snippets.", "yesno"),
        ('The answer to "Is no drug approved?" is unclear.', "yesno"),  # the question's "Is no" is no answer
        ("The answer to Is no drug approved? is unclear.", "yesno"),
        ("IDEAL: some genes are involved.", "factoid"),
        ("EXACT:\nIDEAL: nothing", "list"),
        ("   ", "summary"),
        ("```\n```", "summary"),
    ],
)
def test_parse_bioasq_unreadable_keeps_raw(text, qtype):
    with pytest.raises(ValueError) as info:
        P.parse_bioasq(text, qtype)
    assert info.value.raw == text


def test_parse_bioasq_bad_arguments():
    with pytest.raises(ValueError, match="qtype"):
        P.parse_bioasq("EXACT: yes", "boolean")
    with pytest.raises(ValueError) as info:
        P.parse_bioasq(None, "yesno")
    assert info.value.raw is None


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
        ('{"answer_choice": "insufficient information"}', P.INSUFFICIENT),
        ("The documents do not say. Insufficient information.", P.INSUFFICIENT),
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
    assert out["choice"] == P.INSUFFICIENT
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
# parse_list / parse_sub_qa / parse_counterfactual / parse_judge

@pytest.mark.parametrize(
    "text, expected",
    [
        ('["myocardial infarction", "heart attack", "MI"]', ["myocardial infarction", "heart attack", "MI"]),
        ('```json\n{"synonyms": ["acetylsalicylic acid", "ASA"]}\n```', ["acetylsalicylic acid", "ASA"]),
        ("Here are the search topics:\n1. baloxavir approval\n2. cap-dependent endonuclease\n3. influenza B",
         ["baloxavir approval", "cap-dependent endonuclease", "influenza B"]),
        ("- TNF-alpha\n- IL-6\n* IL-6", ["TNF-alpha", "IL-6"]),
        ("aspirin; ASA; acetylsalicylic acid", ["aspirin", "ASA", "acetylsalicylic acid"]),
        ('[{"topic": "GDF-15 hypoxia"}, {"topic": "GDF-15 inflammation"}]', ["GDF-15 hypoxia", "GDF-15 inflammation"]),
    ],
)
def test_parse_list(text, expected):
    assert P.parse_list(text) == expected


def test_parse_list_empty():
    with pytest.raises(ValueError):
        P.parse_list("[]")
    with pytest.raises(ValueError):
        P.parse_list("\n\n")


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


def test_split_exact_and_insufficient():
    assert P.split_exact("Aspirin helps [1].\nEXACT: yes") == ("Aspirin helps [1].", "EXACT: yes")
    assert P.split_exact("Aspirin helps [1].") == ("Aspirin helps [1].", None)
    assert P.is_insufficient("Insufficient information: the sources do not cover dosing.")
    assert P.is_insufficient("The sources do not say; insufficient information.")
    long_answer = "Aspirin reduces fever [1]. " * 5 + "Source [2] gives insufficient information on dosing."
    assert not P.is_insufficient(long_answer)
    assert not P.is_insufficient("Aspirin is approved [1], but [2] gives insufficient information on dosing.")

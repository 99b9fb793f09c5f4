"""Output parsers on real-looking model replies (medretrieve.generation.parsers)."""
from __future__ import annotations


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
# parse_list

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


def test_split_exact_and_insufficient():
    assert P.split_exact("Aspirin helps [1].\nEXACT: yes") == ("Aspirin helps [1].", "EXACT: yes")
    assert P.split_exact("Aspirin helps [1].") == ("Aspirin helps [1].", None)
    assert P.is_insufficient("Insufficient information: the sources do not cover dosing.")
    assert P.is_insufficient("The sources do not say; insufficient information.")
    long_answer = "Aspirin reduces fever [1]. " * 5 + "Source [2] gives insufficient information on dosing."
    assert not P.is_insufficient(long_answer)
    assert not P.is_insufficient("Aspirin is approved [1], but [2] gives insufficient information on dosing.")

"""Multiple-choice loaders: small fixtures (incl. malformed files) and the real MMLU-Med sample (BioASQ's loader:
tests/evaluation/bioasq/test_bioasq_golden.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from medretrieve.evaluation.datasets import (
    MMLU_MED_SUBJECTS,
    load_bioasq_yesno,
    load_dataset,
    load_medqa,
    load_mmlu_med,
    load_pubmedqa,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "eval"


def test_bioasq_yesno_as_multiple_choice():
    qs = load_bioasq_yesno(FIX / "bioasq_tiny.json")
    assert len(qs) == 1
    assert qs[0].options == {"A": "yes", "B": "no"} and qs[0].answer == "A" and qs[0].answer_text == "yes"


def test_mmlu_med_fixture_header_and_case():
    qs = load_mmlu_med(FIX / "mmlu_med")
    assert len(qs) == 7
    assert qs[0].id == "anatomy-0" and qs[0].question == "Which bone is in the thigh?" and qs[0].answer == "A"
    assert qs[-1].subject == "professional_medicine" and qs[-1].answer == "B"  # lower-case answer accepted
    assert qs[4].question == "Which hormone lowers blood glucose, mainly?"  # quoted comma


def test_mmlu_med_errors(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        load_mmlu_med(tmp_path / "nope")
    with pytest.raises(ValueError, match="anatomy_test.csv"):
        load_mmlu_med(tmp_path)
    for s in MMLU_MED_SUBJECTS:
        (tmp_path / f"{s}_test.csv").write_text("q,a,b,c,d,A\n")
    (tmp_path / "college_biology_test.csv").write_text("q,a,b,c,d,E\n")
    with pytest.raises(ValueError, match=r"college_biology_test.csv: row 0: answer 'E'"):
        load_mmlu_med(tmp_path)
    (tmp_path / "college_biology_test.csv").write_text("q,a,b,c,A\n")
    with pytest.raises(ValueError, match="5 columns"):
        load_mmlu_med(tmp_path)


def test_medqa_fixture():
    qs = load_medqa(FIX / "medqa_tiny.jsonl")
    assert [q.answer for q in qs] == ["A", "C"]  # second derived from the answer text
    assert qs[0].id == "medqa-0" and qs[1].id == "medqa-2"  # line numbers (blank line skipped)
    assert qs[0].subject == "step2&3" and len(qs[0].options) == 4


def test_medqa_errors(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"question": "q", "options": {"A": "x", "B": "y"}, "answer_idx": "C"}\n')
    with pytest.raises(ValueError, match="line 1: answer_idx 'C'"):
        load_medqa(path)
    path.write_text('{"question": "q", "options": {"A": "x", "B": "y"}, "answer_idx": "A"}\n{oops\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        load_medqa(path)
    path.write_text('{"question": "q", "options": ["x", "y"], "answer_idx": "A"}\n')
    with pytest.raises(ValueError, match="options"):
        load_medqa(path)


def test_pubmedqa_fixture_and_errors(tmp_path):
    qs = load_pubmedqa(FIX / "pubmedqa_tiny.json")
    assert [(q.id, q.answer) for q in qs] == [("12345", "A"), ("67890", "B"), ("13579", "C")]
    assert qs[0].options == {"A": "yes", "B": "no", "C": "maybe"}
    assert qs[0].contexts[0].startswith("Trials") and qs[0].metadata["YEAR"] == "2010"
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"1": {"QUESTION": "q", "final_decision": "perhaps"}}))
    with pytest.raises(ValueError, match="record 1: final_decision 'perhaps'"):
        load_pubmedqa(bad)


def test_load_dataset_specs():
    kind, qs = load_dataset(f"pubmedqa:{FIX / 'pubmedqa_tiny.json'}")
    assert kind == "pubmedqa" and len(qs) == 3
    kind, qs = load_dataset(f"bioasq:{FIX / 'bioasq_tiny.json'}")
    assert kind == "bioasq" and len(qs) == 1
    with pytest.raises(ValueError, match="KIND:PATH"):
        load_dataset("mirage")
    with pytest.raises(ValueError, match="KIND:PATH"):
        load_dataset("usmle:/x")


# --------------------------------------------------------------------------- real samples


def test_real_mmlu_med(shared_data):
    qs = load_mmlu_med(shared_data / "mmlu_med")
    assert len(qs) == 1089  # the MIRAGE MMLU-Med size
    assert {q.subject for q in qs} == set(MMLU_MED_SUBJECTS)
    assert all(q.answer in q.options for q in qs)



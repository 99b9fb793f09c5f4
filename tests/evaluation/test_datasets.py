"""Loaders: small fixtures (incl. malformed files) and the real BioASQ / MMLU-Med samples."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from medretrieve.evaluation.datasets import (
    MMLU_MED_SUBJECTS,
    load_bioasq,
    load_bioasq_yesno,
    load_dataset,
    load_medqa,
    load_mmlu_med,
    load_pubmedqa,
    pmid_from_url,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "eval"


def test_pmid_from_url():
    assert pmid_from_url("http://www.ncbi.nlm.nih.gov/pubmed/29623652") == "29623652"
    assert pmid_from_url("https://pubmed.ncbi.nlm.nih.gov/123/") == "123"
    assert pmid_from_url("456") == "456"
    with pytest.raises(ValueError):
        pmid_from_url("  ")


def test_load_bioasq_fixture_all_types():
    qs = load_bioasq(FIX / "bioasq_tiny.json")
    assert [q.type for q in qs] == ["yesno", "factoid", "list", "summary"]
    yes, fact, lst, summ = qs
    assert yes.exact_answer == "yes"
    assert yes.documents == ["111", "222"]
    assert yes.snippets[0].document_id == "111"
    assert (yes.snippets[0].offset_begin, yes.snippets[0].offset_end) == (10, 64)
    assert yes.snippets[1].begin_section == "title"
    assert fact.exact_answer == [["CFTR", "cystic fibrosis transmembrane conductance regulator"]]
    assert fact.ideal_answer == ["CFTR is mutated in cystic fibrosis."]  # a string becomes a list
    assert lst.exact_answer == [["fever"], ["cough", "coughing"], ["myalgia", "muscle pain"]]
    assert lst.documents == ["444"]  # trailing slash in the URL
    assert summ.exact_answer is None and summ.documents == []


def test_load_bioasq_many_paths_deduplicates(tmp_path):
    qs = load_bioasq([FIX / "bioasq_tiny.json", FIX / "bioasq_tiny.json"])
    assert len(qs) == 4


def test_flat_exact_answers_are_normalised(tmp_path):
    data = {"questions": [
        {"id": "f", "type": "factoid", "body": "b", "exact_answer": ["a", "a2"]},
        {"id": "l", "type": "list", "body": "b", "exact_answer": ["x", "y"]},
        {"id": "y", "type": "yesno", "body": "b", "exact_answer": ["No"]},
    ]}
    path = tmp_path / "flat.json"
    path.write_text(json.dumps(data))
    f, l, y = load_bioasq(path)
    assert f.exact_answer == [["a", "a2"]]
    assert l.exact_answer == [["x"], ["y"]]
    assert y.exact_answer == "no"


@pytest.mark.parametrize(
    "question, message",
    [
        ({"id": "x", "type": "opinion", "body": "b"}, "type"),
        ({"id": "x", "type": "yesno", "body": "b", "exact_answer": "maybe"}, "yes' or 'no"),
        ({"id": "x", "type": "factoid", "body": "b"}, "exact_answer"),
        ({"id": "x", "type": "summary"}, "body"),
        ({"id": "x", "type": "summary", "body": "b", "snippets": [{"text": "t"}]}, "snippet #0"),
        ({"id": "x", "type": "summary", "body": "b", "snippets": [
            {"text": "t", "document": "1", "offsetInBeginSection": 9, "offsetInEndSection": 3}]}, "offsetInEndSection"),
    ],
)
def test_malformed_bioasq_names_file_and_question(tmp_path, question, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"questions": [question]}))
    with pytest.raises(ValueError) as err:
        load_bioasq(path)
    assert str(path) in str(err.value) and "question #0" in str(err.value)
    assert message in str(err.value)


def test_bioasq_not_json_or_wrong_shape(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_bioasq(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="questions"):
        load_bioasq(bad)
    with pytest.raises(ValueError, match="no such file"):
        load_bioasq(tmp_path / "missing.json")


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


def test_real_bioasq_files(bioasq_files):
    qs = load_bioasq(bioasq_files)
    assert len(qs) == 500
    assert {q.type for q in qs} == {"yesno", "factoid", "list", "summary"}
    assert all(d.isdigit() for q in qs for d in q.documents)
    assert all(s.document_id.isdigit() for q in qs for s in q.snippets)
    assert sum(s.offset_begin is None for q in qs for s in q.snippets) == 2  # the two -1 offsets
    yn = load_bioasq_yesno(bioasq_files)
    assert len(yn) == sum(q.type == "yesno" for q in qs) == 140


def test_real_mmlu_med(shared_data):
    qs = load_mmlu_med(shared_data / "mmlu_med")
    assert len(qs) == 1089  # the MIRAGE MMLU-Med size
    assert {q.subject for q in qs} == set(MMLU_MED_SUBJECTS)
    assert all(q.answer in q.options for q in qs)


def test_negative_offsets_fall_back_to_text(tmp_path):
    path = tmp_path / "neg.json"
    path.write_text(json.dumps({"questions": [{"id": "x", "type": "summary", "body": "b", "snippets": [
        {"text": "t", "document": "1", "offsetInBeginSection": -1, "offsetInEndSection": 5}]}]}))
    (q,) = load_bioasq(path)
    assert q.snippets[0].offset_begin is None and q.snippets[0].offset_end is None
    path.write_text(json.dumps({"questions": [{"id": "x", "type": "summary", "body": "b", "snippets": [
        {"text": "t", "document": "1", "offsetInBeginSection": "3"}]}]}))
    with pytest.raises(ValueError, match="must be an integer"):
        load_bioasq(path)


def test_an_id_twice_in_one_file_is_refused(tmp_path):
    # the second question was silently dropped before (a test batch then lost a question)
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"questions": [{"id": "a", "type": "yesno", "body": "Is x y?"},
                                              {"id": "b", "type": "yesno", "body": "Is y z?"},
                                              {"id": "a", "type": "yesno", "body": "Is z x?"}]}))
    with pytest.raises(ValueError, match=r"batch.json: question #2 repeats the id 'a' of question #0"):
        load_bioasq(path, golden=False)

"""The loader of BioASQ files: small fixtures (incl. malformed files) and the real golden files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from medretrieve.corpus.sources import pmid_from_url
from medretrieve.evaluation.bioasq.golden import load_bioasq
from medretrieve.evaluation.datasets import load_bioasq_yesno

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "eval"


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


def test_real_bioasq_files(bioasq_files):
    qs = load_bioasq(bioasq_files)
    assert len(qs) == 500
    assert {q.type for q in qs} == {"yesno", "factoid", "list", "summary"}
    assert all(d.isdigit() for q in qs for d in q.documents)
    assert all(s.document_id.isdigit() for q in qs for s in q.snippets)
    assert sum(s.offset_begin is None for q in qs for s in q.snippets) == 2  # the two -1 offsets
    yn = load_bioasq_yesno(bioasq_files)
    assert len(yn) == sum(q.type == "yesno" for q in qs) == 140


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

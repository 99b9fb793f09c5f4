"""What a search prints explains its order: a hit recovery placed is marked with the score it was placed by."""
from __future__ import annotations

from types import SimpleNamespace

from medretrieve.cli.answer import format_answer
from medretrieve.cli.search import score_label
from medretrieve.records import Hit


def _hit(doc: str, score: float, scores: dict) -> Hit:
    return Hit(f"{doc}#0", doc, "text", f"title {doc}", "abstract", score, scores, {}, None)


def test_sources_say_which_score_placed_each_and_when_recovery_reordered():
    evidence = [_hit("a", 0.074, {"rerank": 0.074, "rrf": 0.03}),
                _hit("b", 0.5, {"recovery": 0.5, "rrf": 0.01}),  # recovery put it in place of a weak hit
                _hit("c", 0.015, {"rerank": 0.015})]
    ans = SimpleNamespace(text="Yes.", abstained=False, error=None, exact_answer=None, evidence=evidence,
                          sources_used=3, unsupported=[], notes=[], timings={})
    out = format_answer(ans)
    assert "recovery put 1 in place of weak hits" in out
    lines = [line for line in out.splitlines() if line.startswith("  [")]
    assert lines[0].endswith("(rerank 0.074)")
    assert lines[1].endswith("(placed by recovery, lexical match 0.500)")
    assert lines[2].endswith("(rerank 0.015)")


def test_without_recovery_the_header_does_not_mention_it():
    ans = SimpleNamespace(text="Yes.", abstained=False, error=None, exact_answer=None,
                          evidence=[_hit("a", 0.2, {"rrf": 0.2})], sources_used=1, unsupported=[], notes=[],
                          timings={})
    out = format_answer(ans)
    assert "recovery" not in out and "(rrf 0.200)" in out
    assert score_label({"cross_encoder": 1.0}, 1.0) == "rerank 1.000"

"""What a search prints explains its order: one score scale per list, and a hit recovery placed says so."""
from __future__ import annotations

from types import SimpleNamespace

from medretrieve.cli.answer import format_answer
from medretrieve.cli.search import score_label
from medretrieve.records import Hit


def _hit(doc: str, score: float, scores: dict, placed_by=None) -> Hit:
    return Hit(f"{doc}#0", doc, "text", f"title {doc}", "abstract", score, scores, {}, None, None, placed_by)


def test_sources_show_one_scale_and_say_which_hit_recovery_placed():
    evidence = [_hit("a", 0.074, {"rerank": 0.074, "rrf": 0.03}),
                _hit("b", 0.05, {"recovery": 0.5, "rrf": 0.01}, "recovery"),  # in place of a weak hit
                _hit("c", 0.015, {"rerank": 0.015})]
    ans = SimpleNamespace(text="Yes.", abstained=False, error=None, exact_answer=None, evidence=evidence,
                          sources_used=3, unsupported=[], notes=[], timings={}, citations=[], shown_sources=[])
    out = format_answer(ans, all_sources=True)
    assert "recovery put" not in out and "lexical match" not in out
    lines = [line for line in out.splitlines() if line.startswith("  [")]
    assert lines[0].endswith("(rerank 0.074)")
    assert lines[1].endswith("(added by a second search: the first found little)")  # no score of another scale
    assert lines[2].endswith("(rerank 0.015)")


def test_without_recovery_the_listing_does_not_mention_it():
    ans = SimpleNamespace(text="Yes.", abstained=False, error=None, exact_answer=None,
                          evidence=[_hit("a", 0.2, {"rrf": 0.2})], sources_used=1, unsupported=[], notes=[],
                          timings={}, citations=[], shown_sources=[])
    out = format_answer(ans, all_sources=True)
    assert "second search" not in out and "(rrf 0.200)" in out
    assert score_label({"cross_encoder": 1.0}, 1.0) == "rerank 1.000"

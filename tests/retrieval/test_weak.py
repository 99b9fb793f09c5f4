"""The weak-question check reads the best evidence (issue 44): a strong question is not flagged for the off-topic
rest of a small corpus, a question the corpus cannot answer is; recovery runs only when the check fires, and a hit
it places is marked on the record and keeps the list on one score scale."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from medretrieve.cli.demo import DEMO_CORPUS
from medretrieve.records import SearchResult
from medretrieve.retrieval.retriever import Retriever

JUDGMENTS = Path(__file__).resolve().parents[2] / "bench" / "judgments" / "weak_demo.json"


@pytest.fixture(scope="module")
def demo(demo_collection_dir):
    from medretrieve.corpus.collection import Collection

    return Retriever(Collection.open(demo_collection_dir))


def test_the_unanswerable_fixture_is_absent_from_the_demo_corpus():
    corpus = DEMO_CORPUS.read_text().lower()
    questions = json.loads(JUDGMENTS.read_text())["unanswerable"]
    assert len(questions) >= 20
    for q in questions:
        assert q["topic"] in q["question"].lower() and q["topic"] not in corpus, q


def test_a_strong_question_is_not_weak_and_recovery_does_not_run(demo):
    """The README's question: its answer is the top hit, the rest of a 52-document corpus is off-topic by nature."""
    res = demo.search("Which drugs lower serum urate in gout?", k=10)
    assert res.hits[0].document_id == "demo-030"
    assert not res.weak and res.weak_reasons == []
    assert not res.stage("recovery").ran and res.stage("recovery").reason == "question not weak"
    assert all(h.placed_by is None for h in res.hits)
    scores = [h.score for h in res.hits]
    assert scores == sorted(scores, reverse=True)  # one scale, in the list's order


def test_a_question_the_corpus_cannot_answer_is_weak_in_plain_words(demo):
    res = demo.search("What causes scurvy?", k=10)
    assert res.weak and res.weak_reasons == ["subject not found: the best evidence does not mention scurvy"]
    nonsense = demo.search("xylophone quasar flux", k=5)
    assert nonsense.weak and nonsense.weak_reasons[0].startswith("no matching evidence: the best passage holds 0%")


def test_the_check_as_a_classifier_on_the_demo_questions(demo):
    """On the fixture's questions (bench/weak.py reports the same rates): few false alarms among questions whose
    gold is in the top 10, most unanswerable ones flagged."""
    data = json.loads(JUDGMENTS.read_text())
    strong = flagged = 0
    for q in data["answerable"]:
        res = demo.search(q["question"], k=10, deadline_ms=None, recovery=False)
        if set(q["docs"]) & {h.document_id for h in res.hits}:
            strong += 1
            flagged += res.weak
    caught = sum(demo.search(q["question"], k=10, deadline_ms=None, recovery=False).weak
                 for q in data["unanswerable"])
    assert strong >= 35 and flagged / strong <= 0.05
    assert caught / len(data["unanswerable"]) >= 0.5


def test_weak_settings_are_checked_and_change_the_check(demo):
    from medretrieve.corpus.collection import Collection

    col = demo.collection
    lenient = Retriever(col, subject_threshold=0.0, weak_threshold=0.0, warmup=False)
    assert not lenient.search("What causes scurvy?", k=5).weak
    strict = Retriever(col, weak_threshold=1.0, warmup=False)
    assert strict.search("Which drugs lower serum urate in gout?", k=5, deadline_ms=None).weak
    assert isinstance(col, Collection)
    with pytest.raises(ValueError, match="weak_depth"):
        Retriever(col, weak_depth=0, warmup=False)


def test_a_placed_hit_is_marked_and_takes_its_place_s_score(demo):
    """Recovery forced on a nonsense question: every hit it placed says so on the record and through JSON, and
    the list's scores stay on one scale in order."""
    res = Retriever(demo.collection, weak_threshold=1.0, recovery=True, warmup=False).search(
        "Which drugs treat high blood pressure and heart failure?", k=8, deadline_ms=None)
    assert res.weak and res.stage("recovery").ran
    placed = [h for h in res.hits if h.placed_by]
    assert len(placed) == res.recovery["replaced"]
    assert all(h.placed_by == "recovery" and "recovery" in h.scores for h in placed)
    scores = [h.score for h in res.hits]
    assert scores == sorted(scores, reverse=True)
    back = SearchResult.from_dict(json.loads(json.dumps(res.to_dict(explain=False))))
    assert [h.placed_by for h in back.hits] == [h.placed_by for h in res.hits]


def _placed_hit():
    from medretrieve.records import Hit

    return Hit("d#1", "d", "text", "title", "Treatment", 0.2, {"recovery": 0.6}, {}, None, None, "recovery")


def test_every_door_marks_a_placed_hit():
    """The framework retrievers' metadata and MCP's hit output carry ``placed_by``; the page shows it instead of
    a score and its status line gives the search's own time (the stage table's total)."""
    from medretrieve.integrations.source import hit_metadata

    assert hit_metadata(_placed_hit())["placed_by"] == "recovery"
    pytest.importorskip("mcp")
    from medretrieve.integrations.mcp_server import hit_output

    assert hit_output(1, _placed_hit()).placed_by == "recovery"
    assert "placed_by" in hit_output(1, _placed_hit()).model_dump()


def test_the_page_marks_placed_hits_and_times_the_search_as_the_search_did():
    from medretrieve._assets import ASSETS

    js = (ASSETS / "web" / "page.js").read_text()
    assert "hit.placed_by" in js and "added by a second search" in js
    status = [line for line in js.splitlines() if "answered in" in line]
    assert status and all("result.timings_ms.total" in line for line in status)


def test_an_answer_abstains_on_what_the_corpus_cannot_answer_and_answers_the_readme_question(demo):
    from medretrieve.generation.generate import Answerer

    answerer = Answerer(demo, None)
    scurvy = answerer.answer("What causes scurvy?")
    assert scurvy.abstained and "does not mention scurvy" in scurvy.abstain_reason
    gout = answerer.answer("Which drugs lower serum urate in gout?")
    assert not gout.abstained and gout.citations


def test_what_a_reader_sees_is_in_plain_words(demo):
    """Issue 44.7: the search listing's header names no internals; Swagger's "Try it out" fills in a real
    question; the answer's sources are in CLI words."""
    from medretrieve.cli.search import format_result
    from medretrieve.wire import AnswerRequest, SearchRequest

    out = format_result(demo.search("What causes scurvy?", k=3))
    header = out.splitlines()[1]
    assert "weak evidence (subject not found: the best evidence does not mention scurvy)" in header
    assert not any(jargon in out for jargon in ("weak=", "recovered=", "type=", "intent=", "lexical match"))
    for model in (SearchRequest, AnswerRequest):
        examples = model.model_json_schema()["properties"]["question"]["examples"]
        assert examples and all(len(q.split()) >= 4 and q.endswith("?") for q in examples)

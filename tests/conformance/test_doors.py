"""Every door answers a request as ``Retriever.search`` does: the same hits, scores and stage log, or the same typed
refusal naming the same option (conftest's docstring; doors.py holds the adapters)."""
from __future__ import annotations

import pytest

from medretrieve.wire import STAGE_SWITCHES

from .doors import Outcome, Request, ThroughCli, ThroughPage, same
from .drawing import check_door, compared_or_fail

# the doors compared with Retriever.search by the drawn requests (fixtures of conftest.py); a new door: add its
# fixture's name here
DOORS = ["client_door", "async_client_door", "page_door"]


@pytest.mark.parametrize("door_fixture", DOORS)
def test_every_door_answers_as_retriever_search(request, door_fixture, in_process, conformance_questions):
    door = request.getfixturevalue(door_fixture)
    # JSON cannot write a NaN: no HTTP caller can send it
    check_door(in_process, door, conformance_questions,
               sendable=lambda req: not isinstance(door, ThroughPage) or door.body(req) is not None)


CLI_REQUESTS = [
    Request("Which drugs lower serum urate in gout?"),
    Request("How is atrial fibrillation treated?", {"k": 4, "per_document": 1, "rerank": False, "mmr": True}),
    Request("What are the symptoms of a pulmonary embolism?",
            {"sections": ["symptoms", "diagnosis"], "bm25": False, "deadline_ms": 60_000}),
    Request("What causes gout?", {"k": 0}),
    Request("What causes gout?", {"dense": False, "bm25": False}),
    Request("?!", {"k": 3}),
    Request("How is atrial fibrillation treated?", {"k": 3, "where": "topic == cardiology"}),
    Request("What causes gout?", {"where": "yeer > 1"}),
]


@pytest.mark.parametrize("req", CLI_REQUESTS, ids=lambda r: str(sorted(r.options)) + repr(r.question)[:20])
def test_the_cli_answers_as_retriever_search(req, in_process, cli_door):
    """``medretrieve search --json`` (a subprocess each: a few requests, valid and refused)."""
    assert ThroughCli.argv(req) is not None
    compared_or_fail(in_process, cli_door, req)


def test_a_bare_question_runs_the_retrievers_own_stages(in_process, page_door, client_door):
    """``POST /v1/search`` with a bare question (and the page's request, whose stage table shows the response's
    stage log) runs what ``Retriever.search(question)`` runs: MMR and feedback as the retriever's settings say."""
    question = Request("Which drugs lower serum urate in gout?")
    want = in_process.search(question)
    ran = dict(want.stages)
    assert ran["mmr"] is False and ran["feedback"] is False  # the settings' defaults (with the shipped ranker)
    for door in (page_door, client_door):
        compared_or_fail(in_process, door, question)


def test_a_planted_drift_fails_the_suite(in_process, client_door, monkeypatch):
    """A door with a default of its own (here the client sending every stage switch on, as wire's Stages did
    before issue 42) is caught: the comparison fails on the stage log."""
    from medretrieve.client import client as client_module

    honest = client_module._search_fields

    def drifted(k, deadline_ms, per_document, sections, explain, stages):
        return honest(k, deadline_ms, per_document, sections, explain,
                      {**{name: True for name in STAGE_SWITCHES if name not in ("dense", "bm25")}, **stages})

    monkeypatch.setattr(client_module, "_search_fields", drifted)
    with pytest.raises(AssertionError, match="another stage log|other hits"):
        compared_or_fail(in_process, client_door, Request("Which drugs lower serum urate in gout?"))


def test_same_compares_what_it_says():
    """The comparison itself: the same hits with scores within tolerance pass; another order, another score,
    another stage log, another refusal fail."""
    base = Outcome([("a", 1.0), ("b", 0.5)], [("dense", True), ("mmr", False)])
    same(base, Outcome([("a", 1.0 + 1e-9), ("b", 0.5)], list(base.stages)), "door")
    for other in (Outcome([("b", 0.5), ("a", 1.0)], list(base.stages)),
                  Outcome([("a", 1.1), ("b", 0.5)], list(base.stages)),
                  Outcome(list(base.hits), [("dense", True), ("mmr", True)]),
                  Outcome(refused="type", option="k")):
        with pytest.raises(AssertionError):
            same(base, other, "door")
    same(Outcome(refused="type", option="k"), Outcome(refused="http", option="k"), "door")
    with pytest.raises(AssertionError):
        same(Outcome(refused="type", option="k"), Outcome(refused="value", option="k"), "door")


def test_every_hit_of_a_filtered_search_passes_its_filter(in_process, page_door):
    """The filter holds at every depth asked: each hit's document carries the topic asked for, the page door
    agrees, and a filter passing k rows gives k hits."""
    for where, topics in [("topic == cardiology", {"cardiology"}),
                          ("topic in (gastroenterology, 'infectious disease')", {"gastroenterology",
                                                                                 "infectious disease"})]:
        for k in (1, 5, 40):
            req = Request("How is it treated?", {"k": k, "where": where, "deadline_ms": 60_000})
            got = in_process.retriever.search(req.question, **req.options)
            assert got.hits and {h.metadata["topic"] for h in got.hits} <= topics
            passing = int(in_process.retriever.collection.filter_rows(where).sum())
            assert len(got.hits) == min(k, passing)
            compared_or_fail(in_process, page_door, req)

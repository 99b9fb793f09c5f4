"""Every door answers a request as ``Retriever.search`` does: the same hits, scores and stage log, or the same typed
refusal naming the same option (conftest's docstring; doors.py holds the adapters)."""
from __future__ import annotations

from typing import Any, Dict

import pytest
from hypothesis import HealthCheck, given, note, reject, settings
from hypothesis import strategies as st

from medretrieve.wire import MAX_DEADLINE_MS, MAX_K, SEARCH_OPTIONS, SECTIONS, STAGE_SWITCHES

from .doors import Outcome, Request, ThroughCli, ThroughPage, same

# the doors compared with Retriever.search by the drawn requests (fixtures of conftest.py); a new door: add its
# fixture's name here
DOORS = ["client_door", "async_client_door", "page_door"]
EXAMPLES = 40  # drawn requests per door (each a search at both doors)

# deadlines long enough for no stage to be cut on a loaded machine (a cut search depends on timing, not on the
# door; absent: the default, 300 ms, where a cut is retried and then left out)
_VALID: Dict[str, Any] = {
    "k": st.integers(1, MAX_K), "deadline_ms": st.sampled_from([5_000, 60_000.0, MAX_DEADLINE_MS]),
    "per_document": st.integers(1, 4),
    "sections": st.lists(st.sampled_from(SECTIONS), min_size=1, max_size=3, unique=True),
    # the demo corpus's documents carry a topic (a keyword field): filters in both forms, passing many or few rows
    "where": st.sampled_from(["topic == cardiology", "not topic in (cardiology, endocrinology)",
                              {"field": "topic", "op": "in", "value": ["infectious disease", "neurology"]},
                              {"or": [{"field": "topic", "op": "==", "value": "cardiology"},
                                      {"not": {"field": "topic", "op": "!=", "value": "endocrinology"}}]}]),
    "include_retracted": st.booleans(), "evidence_prior": st.booleans(),
    "recency_half_life": st.sampled_from([0.5, 5, 20.0, 1000]),
    **{name: st.booleans() for name in STAGE_SWITCHES}}
_INVALID: Dict[str, Any] = {
    "k": st.sampled_from(["5", True, 0, MAX_K + 1, 2.5, float("inf")]),
    "deadline_ms": st.sampled_from(["300", True, 0, -5, MAX_DEADLINE_MS * 2, float("nan")]),
    "per_document": st.sampled_from(["2", False, 0, MAX_K + 1]),
    "sections": st.sampled_from(["treatment", [], ["kitchen"], ["treatment", 3]]),
    # unreadable, of the wrong type, or naming a field the collection lacks (refused when the search starts)
    "where": st.sampled_from(["topic ==", 5, ["topic"], "year >= 2015", {"field": "topic", "op": "~", "value": 1},
                              "topic > cardiology"]),
    "include_retracted": st.sampled_from([1, "true"]), "evidence_prior": st.sampled_from([1, "false"]),
    "recency_half_life": st.sampled_from([0, -1, "5", 1001, float("inf"), True]),
    **{name: st.sampled_from([1, 0, "false", "true"]) for name in STAGE_SWITCHES}}
_MISSPELT = st.sampled_from(["section", "recover", "lexical", "diversify", "top_k", "K", "deadline"])
_BAD_QUESTIONS = st.sampled_from([" ", "?!", "", 42, "x" * 4001])
assert set(_VALID) == set(_INVALID) == set(SEARCH_OPTIONS)  # every declared option is drawn


@st.composite
def requests(draw: Any, questions: Any) -> Request:
    """A request with at most one fault (a bad question, one bad value, or one misspelt name), so that every door
    has one thing to refuse and the refusals can be compared."""
    names = draw(st.lists(st.sampled_from(sorted(SEARCH_OPTIONS)), max_size=4, unique=True))
    options = {name: draw(_VALID[name]) for name in names}
    fault = draw(st.sampled_from(["none", "none", "question", "value", "name"]))
    if fault != "none" and options.get("dense") is False and options.get("bm25") is False:
        options["bm25"] = True  # both off is a fault of its own
    question = draw(_BAD_QUESTIONS) if fault == "question" else draw(st.sampled_from(questions))
    if fault == "value":
        name = draw(st.sampled_from(sorted(SEARCH_OPTIONS)))
        options[name] = draw(_INVALID[name])
    elif fault == "name":
        options[draw(_MISSPELT)] = draw(st.sampled_from([1, True, ["treatment"]]))
    return Request(question, options)


def _compared(reference_door: Any, door: Any, request: Request, retries: int = 1) -> None:
    """Ask both doors; a search the deadline cut at either door is asked again (``retries`` times), then left out
    (hypothesis draws another)."""
    for _ in range(retries + 1):
        want, got = reference_door.search(request), door.search(request)
        if not (want.cut or got.cut):
            same(want, got, door.name)
            return
    reject()


@pytest.mark.parametrize("door_fixture", DOORS)
def test_every_door_answers_as_retriever_search(request, door_fixture, in_process, conformance_questions):
    door = request.getfixturevalue(door_fixture)
    checked = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(requests(conformance_questions))
    def check(req: Request) -> None:
        note(repr(req))
        if isinstance(door, ThroughPage) and door.body(req) is None:
            reject()  # JSON cannot write it (NaN): no HTTP caller can send it
        _compared(in_process, door, req)
        checked.append(req)

    check()
    assert len(checked) >= EXAMPLES // 2


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
    _compared_or_fail(in_process, cli_door, req)


def _compared_or_fail(reference_door: Any, door: Any, request: Request) -> None:
    want, got = reference_door.search(request), door.search(request)
    if want.cut or got.cut:  # once more: a loaded machine cut a stage at one of them
        want, got = reference_door.search(request), door.search(request)
    same(want, got, door.name)


def test_a_bare_question_runs_the_retrievers_own_stages(in_process, page_door, client_door):
    """``POST /v1/search`` with a bare question (and the page's request, whose stage table shows the response's
    stage log) runs what ``Retriever.search(question)`` runs: MMR and feedback as the retriever's settings say."""
    question = Request("Which drugs lower serum urate in gout?")
    want = in_process.search(question)
    ran = dict(want.stages)
    assert ran["mmr"] is False and ran["feedback"] is False  # the settings' defaults (with the shipped ranker)
    for door in (page_door, client_door):
        _compared_or_fail(in_process, door, question)


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
        _compared_or_fail(in_process, client_door, Request("Which drugs lower serum urate in gout?"))


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
            _compared_or_fail(in_process, page_door, req)

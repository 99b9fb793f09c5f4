"""Every door that answers (the clients, ``POST /v1/answer``, ``medretrieve answer``) answers a request as
``Answerer.answer`` does: the same evidence, text and citations for the same ``k`` and filter options, or the same
refusal naming the same option (answers.py holds the adapters; MCP's ``answer`` tool: test_mcp_doors.py)."""
from __future__ import annotations

import pytest

from .answers import ClientAnswers, CliAnswers, HttpAnswers, InProcessAnswers, check_answer_door, compared_answers
from .doors import Request

ADAPTERS = {"client_door": ClientAnswers, "async_client_door": ClientAnswers, "page_door": HttpAnswers}


@pytest.fixture(scope="session")
def reference_answers(in_process) -> InProcessAnswers:
    return InProcessAnswers(in_process.retriever)


@pytest.mark.parametrize("door_fixture", sorted(ADAPTERS))
def test_every_answer_door_answers_as_answerer(request, door_fixture, reference_answers, conformance_questions):
    door = ADAPTERS[door_fixture](request.getfixturevalue(door_fixture))
    check_answer_door(reference_answers, door, conformance_questions)


CLI_REQUESTS = [
    Request("How is atrial fibrillation treated?", {"k": 3, "where": "topic == cardiology"}),
    Request("What causes gout?", {"where": "not topic in (cardiology, endocrinology)", "evidence_prior": True,
                                  "recency_half_life": 5}),
    Request("What causes gout?", {"where": "yeer > 1"}),
    Request("What causes gout?", {"recency_half_life": 0}),
]


@pytest.mark.parametrize("req", CLI_REQUESTS, ids=lambda r: str(sorted(r.options)) + repr(r.question)[:20])
def test_the_cli_answers_as_answerer(req, reference_answers, cli_door):
    compared_answers(reference_answers, CliAnswers(cli_door), req)


def test_a_filter_changes_the_evidence_alike(reference_answers, client_door):
    """The comparison sees filters: a topic filter keeps only that topic's evidence, at both doors."""
    req = Request("How is atrial fibrillation treated?", {"where": "topic == endocrinology", "k": 5})
    want = reference_answers.answer(req)
    unfiltered = reference_answers.answer(Request(req.question, {"k": 5}))
    assert want.evidence and [c for c, _ in want.evidence] != [c for c, _ in unfiltered.evidence]
    compared_answers(reference_answers, ClientAnswers(client_door), req)


def test_a_planted_drift_fails_the_answer_suite(reference_answers, client_door, monkeypatch):
    """A client that drops the answer's filter (the evidence then searched unfiltered) is caught."""
    from medretrieve.client import client as client_module

    monkeypatch.setattr(client_module, "_filter_options", lambda *given: {})
    req = Request("How is atrial fibrillation treated?", {"where": "topic == endocrinology", "k": 5})
    with pytest.raises(AssertionError, match="other hits"):
        compared_answers(reference_answers, ClientAnswers(client_door), req)

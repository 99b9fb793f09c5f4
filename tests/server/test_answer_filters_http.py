"""``POST /v1/answer`` with the search's filter options (issue 45): ``where`` (both forms), ``include_retracted``
and the priors reach the evidence's search, whole and streamed; a bad one is 422 naming it, streamed too (the
status waits for the evidence); the published body takes them from the search declaration; each cited source
carries its document's year and publication types."""
from __future__ import annotations

import json

import pytest
from medline_collection import QUESTION, build_medline_collection, ready_test_client

pytest.importorskip("fastapi")

from medretrieve.wire import FILTER_OPTIONS  # noqa: E402



@pytest.fixture(scope="module")
def http(tmp_path_factory):
    with ready_test_client(build_medline_collection(tmp_path_factory)) as client:
        yield client


def _events(reply):
    """The server-sent events of a streamed answer, as (kind, data) pairs."""
    assert reply.status_code == 200, reply.text
    out = []
    for block in reply.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_a_filtered_answer_cites_only_passing_evidence_in_both_forms(http):
    text = http.post("/v1/answer", json={"question": QUESTION, "k": 10, "where": "year >= 2021"})
    form = http.post("/v1/answer", json={"question": QUESTION, "k": 10,
                                         "where": {"field": "year", "op": ">=", "value": 2021}})
    assert text.status_code == 200 and form.status_code == 200, text.text
    for body in (text.json(), form.json()):
        assert body["evidence"] and all(h["metadata"]["year"] >= 2021 for h in body["evidence"])
        assert body["citations"] and not body["abstained"]
    assert [h["chunk_id"] for h in text.json()["evidence"]] == [h["chunk_id"] for h in form.json()["evidence"]]
    plain = http.post("/v1/answer", json={"question": QUESTION, "k": 10}).json()
    assert any(h["metadata"].get("year", 0) < 2021 for h in plain["evidence"])  # the filter had something to drop
    assert not any(h["metadata"]["retracted"] for h in plain["evidence"])  # retracted out by default
    kept = http.post("/v1/answer", json={"question": QUESTION, "k": 10, "include_retracted": True}).json()
    assert any(h["metadata"]["retracted"] for h in kept["evidence"])


def test_the_priors_reach_the_answer_search(http):
    for prior in ({"evidence_prior": True}, {"recency_half_life": 2.0}):
        body = {"question": QUESTION, "k": 10, "include_retracted": True, **prior}
        answered = http.post("/v1/answer", json=body).json()
        searched = http.post("/v1/search", json={**body, "deadline_ms": 60000}).json()
        assert [h["chunk_id"] for h in answered["evidence"]] == [h["chunk_id"] for h in searched["hits"]]
        assert "priors" in [s["name"] for s in searched["stages"]]


def test_a_streamed_filtered_answer_sends_only_passing_evidence(http):
    events = _events(http.post("/v1/answer", json={"question": QUESTION, "k": 10, "stream": True,
                                                   "where": "publication_type in (Review, 'Practice Guideline')"}))
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "evidence" and kinds[-1] == "answer"
    for hits in (events[0][1]["hits"], events[-1][1]["evidence"]):
        assert hits and all({"Review", "Practice Guideline"} & set(h["metadata"]["publication_type"]) for h in hits)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("body, field, words", [
    ({"where": "yeer > 2000"}, "where", "unknown field 'yeer'"),
    ({"where": "year >"}, "where", "ends too early"),
    ({"where": 7}, "where", "must be a filter"),
    ({"where": "journal > x"}, "where", "keyword field"),
    ({"include_retracted": "yes"}, "include_retracted", "boolean"),
    ({"recency_half_life": 0}, "recency_half_life", "greater than 0"),
    ({"evidence_prior": 1}, "evidence_prior", "boolean"),
])
def test_bad_filter_options_are_refused_422_naming_them(http, stream, body, field, words):
    reply = http.post("/v1/answer", json={"question": QUESTION, "stream": stream, **body})
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request" and error["field"] == field and words in error["message"]


def test_each_cited_source_carries_its_year_and_type(http):
    body = http.post("/v1/answer", json={"question": QUESTION, "k": 10, "include_retracted": True}).json()
    cited = {n for c in body["citations"] for n in c["sources"]}
    assert cited
    for n in cited:
        meta = body["evidence"][n - 1]["metadata"]
        assert isinstance(meta["year"], int) and meta["publication_type"] and \
            all(isinstance(t, str) for t in meta["publication_type"])


def test_the_answer_body_declares_the_search_options_once(http):
    components = http.get("/openapi.json").json()["components"]["schemas"]
    answer, search = components["AnswerRequest"]["properties"], components["SearchRequest"]["properties"]
    for name in FILTER_OPTIONS:
        assert answer[name] == search[name]

"""The HTTP API on a real ``medretrieve serve`` process (uvicorn, loopback, ephemeral port): every endpoint, the
JSON errors of bad requests, answers (whole and streamed), metrics, OpenAPI."""
from __future__ import annotations

import json

import httpx
import pytest

from medretrieve.generation.generate import Answer
from medretrieve.retrieval.results import SearchResult

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        yield client


def test_search_returns_the_library_result_and_its_timing(http, medretrieve_retriever):
    r = http.post("/v1/search", json={"question": QUESTION, "k": 3, "deadline_ms": 60000})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    data = r.json()
    res = SearchResult.from_dict(data)  # exactly the fields of SearchResult.to_dict()
    local = medretrieve_retriever.search(QUESTION, k=3, deadline_ms=60000)
    assert [h.chunk_id for h in res.hits] == [h.chunk_id for h in local.hits]
    assert res.hits[0].document_id == "demo-002" and res.hits[0].section == "Treatment"
    assert res.query_type == local.query_type and res.intent == "treatment"
    assert {s.name for s in res.stages} == {s.name for s in local.stages}
    assert set(data) == set(local.to_dict())
    timing = {k: float(v) for k, v in (part.strip().split(";dur=") for part in r.headers["server-timing"].split(","))}
    assert timing["queue"] >= 0 and timing["work"] == pytest.approx(res.timings_ms["total"], abs=0.01)
    assert timing["total"] >= timing["queue"] + timing["work"]


def test_search_options_reach_the_retriever(http):
    body = {"question": "What are the symptoms of a pulmonary embolism?", "k": 5, "per_document": 1,
            "sections": ["treatment", "diagnosis"], "stages": {"rerank": False, "recovery": False}, "explain": True}
    res = SearchResult.from_dict(http.post("/v1/search", json=body).json())
    assert len({h.document_id for h in res.hits}) == len(res.hits)  # per_document=1
    assert "filter" in res.stage("route").reason
    assert not res.stage("rerank").ran and res.stage("rerank").reason == "disabled"


def test_reasons_and_stage_scores_only_on_request(http):
    compact = http.post("/v1/search", json={"question": QUESTION, "k": 10})
    explained = http.post("/v1/search", json={"question": QUESTION, "k": 10, "explain": True})
    lean, full = compact.json(), explained.json()
    assert [h["chunk_id"] for h in lean["hits"]] == [h["chunk_id"] for h in full["hits"]]
    assert all("reason" not in s for s in lean["stages"]) and all(h["scores"] == {} for h in lean["hits"])
    assert "learned ranker" in SearchResult.from_dict(full).stage("rerank").reason  # the ranker's provenance
    assert all(h["scores"]["dense"] is not None for h in full["hits"])
    assert len(compact.content) < 0.8 * len(explained.content)
    assert SearchResult.from_dict(lean).hits[0].scores == {}  # a compact hit reads back with empty scores


def test_batch_answers_each_question_in_order(http):
    questions = [QUESTION, "Is levodopa used to treat Parkinson's disease?"]
    r = http.post("/v1/search:batch", json={"questions": questions, "k": 2})
    assert r.status_code == 200
    results = [SearchResult.from_dict(x) for x in r.json()["results"]]
    assert [x.question for x in results] == questions and all(len(x.hits) == 2 for x in results)


@pytest.mark.parametrize("path,body,field,status", [
    ("/v1/search", {"question": ""}, "question", 422),
    ("/v1/search", {"question": "   "}, "question", 422),
    ("/v1/search", {"k": 3}, "question", 422),
    ("/v1/search", {"question": "x", "k": 0}, "k", 422),
    ("/v1/search", {"question": "x", "k": 101}, "k", 422),
    ("/v1/search", {"question": "x", "k": "3"}, "k", 422),
    ("/v1/search", {"question": "x", "colour": "red"}, "colour", 422),
    ("/v1/search", {"question": "x", "deadline_ms": 0}, "deadline_ms", 422),
    ("/v1/search", {"question": "x", "sections": ["kitchen"]}, "sections.0", 422),
    ("/v1/search", {"question": "x", "stages": {"dense": False, "bm25": False}}, "stages", 422),
    ("/v1/search", {"question": "x", "stages": {"fast": True}}, "stages.fast", 422),
    ("/v1/search", [1, 2], None, 422),
    ("/v1/search:batch", {"questions": []}, "questions", 422),
    ("/v1/search:batch", {"questions": ["ok", " "]}, "questions", 422),
    ("/v1/answer", {"question": "x", "mode": "poetry"}, "mode", 422),
    ("/v1/answer", {"question": "x", "max_tokens": 0}, "max_tokens", 422),
])
def test_bad_requests_name_the_field(http, path, body, field, status):
    r = http.post(path, json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["type"] == "invalid_request" and err["field"] == field
    assert (field or "JSON object") in err["message"] and "Traceback" not in r.text


def test_malformed_json_unknown_paths_and_methods(http):
    r = http.post("/v1/search", content=b'{"question": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_json"
    assert http.get("/v1/nothing").json()["error"]["type"] == "not_found"
    assert http.get("/v1/search").status_code == 405
    r = http.post("/v1/search", json={"question": "x"}, headers={"X-Deadline-Ms": "soon"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "X-Deadline-Ms"


@pytest.mark.parametrize("raw", [
    b'{"question": "\xff\xfe diabetes"}',  # not UTF-8
    b'{"question": "x", "k": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # nested 100k deep
    b'{"question": "x", "k": 1' + b"0" * 5000 + b"}",  # a 5,000-digit integer
    b'{"question": ',  # cut short
    b"\x00\x01",
], ids=["utf8", "nesting", "digits", "truncated", "binary"])
def test_every_unreadable_body_is_invalid_json(http, raw):
    r = http.post("/v1/search", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and set(r.json()) == {"error"}
    err = r.json()["error"]
    assert err["type"] == "invalid_json" and err["message"].startswith("the request body is not valid JSON")
    assert err["field"] is None and "Traceback" not in r.text


def test_a_question_without_a_word_names_its_field(http):
    for question in ("?!...", "¿¡ -- !?"):
        r = http.post("/v1/search", json={"question": question})
        assert r.status_code == 422 and r.json()["error"]["field"] == "question", r.text
    assert http.post("/v1/search", json={"question": "the of and", "k": 2}).status_code == 200  # no content term


def test_the_deadline_header_is_checked_as_the_body_field(http):
    body = http.post("/v1/search", json={"question": "x", "deadline_ms": 700000}).json()["error"]
    header = http.post("/v1/search", json={"question": "x"}, headers={"X-Deadline-Ms": "700000"}).json()["error"]
    assert (body["field"], header["field"]) == ("deadline_ms", "X-Deadline-Ms")
    assert header["message"] == body["message"].replace("deadline_ms", "X-Deadline-Ms")
    assert "600000" in header["message"] and header["type"] == body["type"] == "invalid_request"


def test_a_request_whose_deadline_passed_is_answered_504_without_searching(http):
    dense = 'medretrieve_stage_duration_seconds_count{stage="dense"}'
    before = _metric(http.get("/metrics").text, dense)
    for kwargs in ({"json": {"question": QUESTION, "deadline_ms": 0.001}},
                   {"json": {"question": QUESTION}, "headers": {"X-Deadline-Ms": "0.001"}}):
        r = http.post("/v1/search", **kwargs)
        assert r.status_code == 504 and r.json()["error"]["type"] == "deadline_exceeded", r.text
    r = http.post("/v1/answer", json={"question": QUESTION, "deadline_ms": 0.001})
    assert r.status_code == 504
    assert _metric(http.get("/metrics").text, dense) == before  # no search ran


def test_answer_with_checked_citations(http):
    r = http.post("/v1/answer", json={"question": QUESTION, "k": 3})
    assert r.status_code == 200
    ans = Answer.from_dict(r.json())
    assert ans.error is None and not ans.abstained
    assert ans.text == "Metformin is the first-line drug for type 2 diabetes [1]."
    assert ans.citations and ans.citations[0].sources == [1] and ans.citations[0].supported
    assert ans.evidence[0].document_id == "demo-002" and set(ans.timings) >= {"retrieve", "generate", "total"}


def test_answer_streams_evidence_text_then_the_answer(http):
    events = []
    with http.stream("POST", "/v1/answer", json={"question": QUESTION, "k": 3, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in r.iter_lines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                events.append((kind, json.loads(line[5:])))
    kinds = [k for k, _ in events]
    assert kinds == ["evidence", "delta", "delta", "answer"]
    assert events[0][1]["hits"][0]["document_id"] == "demo-002"
    assert "".join(d["text"] for k, d in events if k == "delta") == events[-1][1]["text"]
    assert events[-1][1]["citations"][0]["supported"]


def test_health_readiness_collection_and_openapi(http, medretrieve_collection):
    assert http.get("/healthz").json()["status"] == "ok"
    ready = http.get("/readyz").json()
    assert ready["status"] == "ready" and ready["chunks"] == len(medretrieve_collection)
    info = http.get("/v1/collection").json()
    assert info["chunks"] == len(medretrieve_collection) and info["documents"] == 24
    assert info["dtype"] == "int8" and info["index"]["mmap"] is True and info["index"]["file_bytes"] > 0
    assert info["model"]["encoder"]["sha256"] and info["build"]["versions"]["medretrieve"]
    assert info["server"]["answers"] == "llm" and info["server"]["max_inflight"] == 2
    spec = http.get("/openapi.json").json()
    assert {"/v1/search", "/v1/search:batch", "/v1/answer", "/healthz", "/readyz", "/v1/collection", "/metrics",
            "/v1/admin/reload"} <= set(spec["paths"])
    assert "SearchRequest" in spec["components"]["schemas"]
    assert http.get("/docs").status_code == 200


def test_reload_is_off_unless_enabled(http):
    r = http.post("/v1/admin/reload")
    assert r.status_code == 403 and r.json()["error"]["type"] == "reload_disabled"


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_metrics_count_requests_stages_and_index(http, medretrieve_collection):
    before = http.get("/metrics").text
    http.post("/v1/search", json={"question": QUESTION, "k": 2})
    http.post("/v1/search", json={"question": "x", "k": 0})
    text = http.get("/metrics").text
    ok = 'medretrieve_requests_total{endpoint="/v1/search",status="200"}'
    bad = 'medretrieve_requests_total{endpoint="/v1/search",status="422"}'
    assert _metric(text, ok) == _metric(before, ok) + 1 and _metric(text, bad) == _metric(before, bad) + 1
    assert _metric(text, 'medretrieve_stage_duration_seconds_count{stage="dense"}') >= 1
    assert _metric(text, 'medretrieve_request_duration_seconds_count{endpoint="/v1/search"}') >= 2
    assert _metric(text, "medretrieve_index_chunks") == len(medretrieve_collection)
    for name in ("medretrieve_inflight", "medretrieve_queued", "medretrieve_deadline_misses_total",
                 "medretrieve_shed_total", "medretrieve_weak_total", "medretrieve_abstained_total"):
        assert f"# TYPE {name.removesuffix('_total')}" in text

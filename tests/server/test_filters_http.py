"""Metadata filters and facets over HTTP (issue 45): ``where`` in POST /v1/search and its batch (both forms),
refusals 422 naming where, POST /v1/facets, the fields in GET /v1/collection and the published schema."""
from __future__ import annotations


import pytest
from medline_collection import build_medline_collection, ready_test_client

pytest.importorskip("fastapi")




@pytest.fixture(scope="module")
def http(tmp_path_factory):
    with ready_test_client(build_medline_collection(tmp_path_factory)) as client:
        yield client


def _docs(reply):
    assert reply.status_code == 200, reply.text
    return [h["document_id"] for h in reply.json()["hits"]]


def test_search_keeps_inside_where_in_both_forms(http):
    text = _docs(http.post("/v1/search", json={"question": "metformin diabetes", "k": 10,
                                               "where": "year >= 2019 and publication_type in (Review, "
                                                        "'Practice Guideline')"}))
    form = _docs(http.post("/v1/search", json={"question": "metformin diabetes", "k": 10, "where": {"and": [
        {"field": "year", "op": ">=", "value": 2019},
        {"field": "publication_type", "op": "in", "value": ["Review", "Practice Guideline"]}]}}))
    assert text == form and set(text) == {"31000001", "31000005"}
    assert set(_docs(http.post("/v1/search", json={"question": "metformin", "k": 10}))) == {
        "31000001", "31000002", "31000005"}  # retracted ones out by default
    assert {"31000003", "31000004"} <= set(_docs(http.post("/v1/search", json={
        "question": "metformin", "k": 10, "include_retracted": True})))
    batch = http.post("/v1/search:batch", json={"questions": ["metformin", "lactic acidosis"], "where": "retracted"})
    assert batch.status_code == 200
    assert all({h["document_id"] for h in r["hits"]} <= {"31000003", "31000004"} for r in batch.json()["results"])


@pytest.mark.parametrize("where, words", [
    ("yeer > 2000", "unknown field 'yeer'"), ("year >", "ends too early"), (7, "must be a filter"),
    ("journal > x", "keyword field"), ({"field": "year", "op": "~", "value": 1}, "unknown operator")])
def test_bad_filters_are_refused_naming_where(http, where, words):
    reply = http.post("/v1/search", json={"question": "metformin", "where": where})
    assert reply.status_code == 422
    error = reply.json()["error"]
    assert error["type"] == "invalid_request" and error["field"] == "where" and words in error["message"]


def test_facets_count_the_filtered_collection(http):
    reply = http.post("/v1/facets", json={"fields": ["year", "publication_type"], "where": "year >= 2010"})
    assert reply.status_code == 200
    body = reply.json()
    assert body["documents"] == 2
    assert body["facets"]["year"] == [{"value": 2020, "count": 1}, {"value": 2022, "count": 1}]
    assert {"value": "Practice Guideline", "count": 1} in body["facets"]["publication_type"]
    every = http.post("/v1/facets", json={"fields": ["retracted"], "include_retracted": True}).json()
    assert every["documents"] == 5 and every["facets"]["retracted"] == [{"value": False, "count": 3},
                                                                        {"value": True, "count": 2}]
    refused = http.post("/v1/facets", json={"fields": ["yeer"]})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "fields"
    assert http.post("/v1/facets", json={"fields": []}).status_code == 422


def test_the_fields_and_the_filter_are_published(http):
    assert http.get("/v1/collection").json()["metadata"]["publication_type"] == "keywords"
    schema = http.get("/openapi.json").json()
    where = schema["components"]["schemas"]["SearchRequest"]["properties"]["where"]
    assert "JSON form" in where["description"] and "/v1/facets" in schema["paths"]

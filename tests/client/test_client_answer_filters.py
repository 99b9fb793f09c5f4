"""``Client.answer`` / ``stream_answer`` and ``AsyncClient``'s with the search's filter options (issue 45), against
a real ``medretrieve serve`` over a MEDLINE collection (extractive answers): every evidence hit passes the filter;
a bad option is refused before sending as ``Client.search`` refuses it, a field the collection lacks by the
server (422, streamed too), both naming the option."""
from __future__ import annotations

import asyncio

import pytest
from medline_collection import QUESTION, build_medline_collection

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from medretrieve.client import AsyncClient, Client, InvalidRequest  # noqa: E402
from medretrieve.wire import SearchOptionTypeError  # noqa: E402



@pytest.fixture(scope="module")
def medline_server(tmp_path_factory):
    from medretrieve.testing.server import ServerProcess

    out = build_medline_collection(tmp_path_factory)
    with ServerProcess(out, ["--deadline-ms", "60000"]) as srv:
        yield srv


def test_answers_keep_to_the_filter_every_way_they_are_asked(medline_server):
    with Client(medline_server.url, timeout_s=60) as client:
        ans = client.answer(QUESTION, k=10, where="year >= 2021")
        assert ans.evidence and all(h.metadata["year"] >= 2021 for h in ans.evidence) and ans.citations
        plain = client.answer(QUESTION, k=10, include_retracted=True)
        assert any(h.metadata.get("year", 0) < 2021 for h in plain.evidence)  # the filter had something to drop
        assert any(h.metadata["retracted"] for h in plain.evidence)
        events = list(client.stream_answer(QUESTION, k=10, where={"field": "publication_type", "op": "in",
                                                                  "value": ["Review"]}))
        assert events[0].kind == "evidence" and events[-1].kind == "answer"
        for hits in (events[0].hits, events[-1].answer.evidence):
            assert hits and all("Review" in h.metadata["publication_type"] for h in hits)
        ordered = client.answer(QUESTION, k=10, include_retracted=True, evidence_prior=True)
        assert ordered.evidence[0].metadata["publication_type"] == ["Practice Guideline"]

    async def asynchronous():
        async with AsyncClient(medline_server.url, timeout_s=60) as client:
            ans = await client.answer(QUESTION, k=10, where="year >= 2021", recency_half_life=3.0)
            streamed = [e async for e in client.stream_answer(QUESTION, k=10, where="year >= 2021")]
            return ans, streamed

    ans, streamed = asyncio.run(asynchronous())
    assert ans.evidence and all(h.metadata["year"] >= 2021 for h in ans.evidence)
    assert streamed[0].hits and all(h.metadata["year"] >= 2021 for h in streamed[0].hits)


@pytest.mark.parametrize("options, error, option", [
    ({"where": "year >"}, InvalidRequest, "where"),
    ({"where": 2015}, SearchOptionTypeError, "where"),
    ({"include_retracted": "yes"}, SearchOptionTypeError, "include_retracted"),
    ({"recency_half_life": 0}, InvalidRequest, "recency_half_life"),
])
def test_a_bad_option_is_refused_before_sending(options, error, option):
    with Client("http://127.0.0.1:9", retries=0) as client:  # nothing listens there: nothing may be sent
        for call in (lambda: client.answer(QUESTION, **options),
                     lambda: list(client.stream_answer(QUESTION, **options))):
            with pytest.raises(error) as refused:
                call()
            assert option in str(refused.value)
            if isinstance(refused.value, InvalidRequest):
                assert refused.value.status == 0 and refused.value.field == option


def test_a_field_the_collection_lacks_is_refused_by_the_server_naming_where(medline_server):
    with Client(medline_server.url, timeout_s=60) as client:
        for call in (lambda: client.answer(QUESTION, where="yeer >= 2015"),
                     lambda: list(client.stream_answer(QUESTION, where="yeer >= 2015"))):
            with pytest.raises(InvalidRequest, match="unknown field 'yeer'") as refused:
                call()
            assert refused.value.status == 422 and refused.value.field == "where"

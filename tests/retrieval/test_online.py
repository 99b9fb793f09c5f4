"""Online retrieval: PubMed candidates (fake E-utilities server on loopback) join the local collection's."""
from __future__ import annotations

import time

import pytest

from medretrieve.corpus.pubmed import PubMedSource
from medretrieve.retrieval.online import OnlineStage, pubmed_queries
from medretrieve.retrieval.query import Query
from medretrieve.retrieval.retriever import Retriever
from pubmed_server import FakeEutils, fixture_text

pytest.importorskip("httpx")
QUESTION = "Does aspirin inhibit platelet aggregation?"
LOCAL = [
    {"id": "30000002", "title": "Aspirin and thromboxane in platelets.",
     "text": "Thromboxane made by platelets causes platelet aggregation. Aspirin blocks thromboxane by inhibiting "
             "cyclooxygenase, so aspirin lowers the risk of heart disease in patients."},
    {"id": "L1", "title": "Influenza vaccines", "text": "Influenza vaccination of older adults prevents hospital stays."},
    {"id": "L2", "title": "Gout flares", "text": "Colchicine treats acute gout flares when started early."},
]


@pytest.fixture(scope="module")
def encoder_dir():
    from medretrieve.models.encoders import default_model_dir

    return default_model_dir()


@pytest.fixture(scope="module")
def local(tmp_path_factory, encoder_dir):
    from medretrieve.corpus.collection import Collection

    return Collection.build(LOCAL, tmp_path_factory.mktemp("online") / "col", encoder=encoder_dir, progress=False)


def test_pubmed_queries_are_content_words_then_their_or():
    q = Query.analyse(QUESTION)
    assert pubmed_queries(q) == ["aspirin inhibit platelet aggregation", "aspirin OR inhibit OR platelet OR aggregation"]
    assert pubmed_queries(q, 1) == ["aspirin inhibit platelet aggregation"]
    assert pubmed_queries(Query.analyse("what is it?")) == []


def test_online_candidates_join_the_local_ones(local, tmp_path):
    with FakeEutils() as srv, PubMedSource(srv.base_url, cache_dir=tmp_path) as src:
        ret = Retriever(local, online=src)
        res = ret.search(QUESTION, k=5, deadline_ms=None)
        docs = [h.document_id for h in res.hits]
        assert "30000001" in docs and "30000002" in docs  # PubMed's best and the local copy of another hit
        for name in ("local", "pubmed_search", "pubmed_fetch", "pool", "dense", "bm25", "fuse", "rerank"):
            assert res.stage(name).ran, name
        assert "already local" in res.stage("pool").reason
        # the PMID held locally was not fetched again
        fetched = [r["params"]["id"] for r in srv.requests if r["endpoint"] == "efetch.fcgi"]
        assert fetched and all("30000002" not in f for f in fetched)
        # the AND query first, then its OR variant (the AND gave fewer than retmax PMIDs)
        terms = [r["params"]["term"] for r in srv.requests if r["endpoint"] == "esearch.fcgi"]
        assert terms == pubmed_queries(Query.analyse(QUESTION))
        n = srv.count()
        again = ret.search(QUESTION, k=5, deadline_ms=None)
        assert srv.count() == n  # the cache answers a repeated question
        assert [h.chunk_id for h in again.hits] == [h.chunk_id for h in res.hits]
        record = src.fetch(["30000001"])[0]
    abstract = " ".join(s.text for s in record.sections)
    for h in res.hits:
        if h.document_id == "30000001":
            sp = h.span
            assert sp["beginSection"] == sp["endSection"] == "abstract"
            assert abstract[sp["offsetInBeginSection"]:sp["offsetInEndSection"]] == h.text


def test_online_only_without_a_local_collection(encoder_dir):
    from medretrieve.corpus.memory import MemoryCollection

    with FakeEutils() as srv, PubMedSource(srv.base_url) as src:
        empty = MemoryCollection.from_encoders(encoder_dir)
        res = Retriever(empty, online=OnlineStage(src, retmax=60, max_queries=1)).search(QUESTION, k=3,
                                                                                         deadline_ms=None)
        assert len(empty) == 0  # the pool is per search; the empty collection stays empty
        assert res.hits and res.hits[0].document_id == "30000001"
        assert {h.document_id for h in res.hits} <= {"30000001", "30000002", "30000003", "30000006"}
        assert not res.stage("local").ran and res.stage("pool").ran
        assert srv.count("esearch.fcgi") == 1 and srv.requests[0]["params"]["retmax"] == "60"


def test_a_slow_pubmed_leaves_the_local_search_within_the_deadline(local):
    slow = lambda e, p: (200, fixture_text("esearch_aspirin.json"), 5.0)  # noqa: E731
    with FakeEutils(slow) as srv, PubMedSource(srv.base_url) as src:
        ret = Retriever(local, online=src)
        t0 = time.perf_counter()
        res = ret.search(QUESTION, k=3, deadline_ms=800)
        took = time.perf_counter() - t0
    assert took < 1.5
    assert "PubMedTimeout" in res.stage("pubmed_search").reason
    assert not res.stage("pubmed_fetch").ran
    assert res.hits and {h.document_id for h in res.hits} <= {d["id"] for d in LOCAL}


def test_a_failing_pubmed_is_reported_not_raised(local):
    with FakeEutils(lambda e, p: (400, {"error": "bad"}, 0.0)) as srv, PubMedSource(srv.base_url) as src:
        res = Retriever(local, online=src).search(QUESTION, k=3, deadline_ms=None)
    assert "PubMedHTTPError" in res.stage("pubmed_search").reason and res.hits


def test_online_settings_are_checked():
    with pytest.raises(TypeError, match="search"):
        OnlineStage(object())
    with FakeEutils() as srv, PubMedSource(srv.base_url) as src:
        for kwargs in ({"retmax": 0}, {"max_queries": 0}, {"reserve": 1.0}):
            with pytest.raises(ValueError):
                OnlineStage(src, **kwargs)

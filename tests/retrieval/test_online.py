"""Online retrieval: PubMed candidates (fake E-utilities server on loopback) join the local collection's; the
question's variants query PubMed, chunk vectors are cached per encoder, a weak question re-queries PubMed."""
from __future__ import annotations

import re
import time

import pytest

from medretrieve.corpus.pubmed import PubMedSource
from medretrieve.corpus.sources import Record, Section
from medretrieve.retrieval.online import OnlineStage, PubMedQuery, pubmed_queries, relaxed_queries
from medretrieve.retrieval.query import Query
from medretrieve.retrieval.retriever import Retriever
from pubmed_server import FakeEutils, fixture_text, medline_articles

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


def _terms(queries):
    return [(q.kind, q.term) for q in queries]


def test_pubmed_queries_are_the_question_its_variants_then_the_or():
    q = Query.analyse(QUESTION)
    assert _terms(pubmed_queries(q)) == [("question", "aspirin inhibit platelet aggregation"),
                                         ("any", "aspirin OR inhibit OR platelet OR aggregation")]
    variants = {"abbreviations": ["myocardial infarction"], "training": ['COX-1 "inhibitor"', "thromboxane", "", "(x)"]}
    assert _terms(pubmed_queries(q, variants)) == [
        ("question", "aspirin inhibit platelet aggregation"),
        ("abbreviations", 'aspirin platelet AND ("myocardial infarction")'),  # the subject words AND a term
        ("training", 'aspirin platelet AND ("COX-1 inhibitor" OR thromboxane OR x)'),
        ("any", "aspirin OR inhibit OR platelet OR aggregation")]
    assert _terms(pubmed_queries(q, variants, max_queries=2))[1][0] == "abbreviations"
    assert _terms(pubmed_queries(q, max_queries=1)) == [("question", "aspirin inhibit platelet aggregation")]
    assert pubmed_queries(Query.analyse("what is it?")) == []
    assert pubmed_queries(Query.analyse("Treatment of type 2 diabetes?"))[0].term == "Treatment type 2 diabetes"
    no_subject = pubmed_queries(Query.analyse("Which treatment works best?"), {"relations": ["rest"]})
    assert no_subject[1] == PubMedQuery("relations", "(treatment OR works OR best) AND (rest)")


def test_relaxed_queries_are_the_subject_words_then_the_or():
    assert _terms(relaxed_queries(Query.analyse("Does aspirin inhibit platelet aggregation in diabetes?"))) == [
        ("subject", "aspirin platelet"), ("any", "aspirin OR inhibit OR platelet OR aggregation OR diabetes")]
    assert _terms(relaxed_queries(Query.analyse("Does aspirin help?"))) == [("subject", "aspirin"),
                                                                            ("any", "aspirin OR help")]


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
        # the AND query and its OR variant, at once
        terms = [r["params"]["term"] for r in srv.requests if r["endpoint"] == "esearch.fcgi"]
        assert sorted(terms) == sorted(q.term for q in pubmed_queries(Query.analyse(QUESTION)))
        asked = sorted(r["time"] for r in srv.requests if r["endpoint"] == "esearch.fcgi")
        assert asked[1] - asked[0] < 0.1  # in parallel, not one after the other
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
        for kwargs in ({"retmax": 0}, {"max_queries": 0}, {"reserve": 1.0}, {"batch_chunks": 0},
                       {"memory_articles": -1}):
            with pytest.raises(ValueError):
                OnlineStage(src, **kwargs)


# ---------------------------------------------------------------------------- the seed's PubMed path
ARTICLES = [  # served as PMIDs 40000001.. by a fake that reads terms as PubMed does (AND, OR groups)
    Record("", "Aspirin after myocardial infarction", [Section("results", "Aspirin lowers death after myocardial "
                                                               "infarction in older patients.")]),
    Record("", "Aspirin and platelets", [Section("results", "Aspirin inhibits platelet aggregation by blocking "
                                                 "thromboxane. Platelet aggregation falls within an hour.")]),
    Record("", "Clopidogrel in stents", [Section("results", "Clopidogrel prevents stent thrombosis; platelet "
                                                 "reactivity varies between patients.")]),
    Record("", "Diabetes and platelets", [Section("background", "Platelets of patients with diabetes aggregate "
                                                  "more readily."), Section("results", "Glucose control lowers "
                                                                            "platelet reactivity.")]),
    Record("", "Statins after infarction", [Section("results", "Statins lower cholesterol and reinfarction.")]),
]


def _counts(reason: str) -> tuple:
    m = re.search(r"(\d+) from the vector cache, (\d+) encoded", reason)
    assert m, reason
    return int(m.group(1)), int(m.group(2))


def _online(srv, cache, **kwargs):
    from medretrieve.corpus.memory import MemoryCollection
    from medretrieve.models.encoders import default_model_dir

    src = PubMedSource(srv.base_url, cache_dir=cache)
    return src, Retriever(MemoryCollection.from_encoders(default_model_dir()), online=OnlineStage(src, **kwargs))


def test_expansion_variants_each_query_pubmed(encoder_dir):
    from medretrieve.corpus.memory import MemoryCollection
    from medretrieve.retrieval.settings import Settings

    with FakeEutils(boolean=True) as srv, PubMedSource(srv.base_url) as src:
        srv.articles = medline_articles(ARTICLES)
        ret = Retriever(MemoryCollection.from_encoders(encoder_dir), online=src,
                        settings=Settings(expansions=("abbreviations", "relations")))
        res = ret.search("Does aspirin lower death after MI?", k=3, deadline_ms=None)
        terms = [r["params"]["term"] for r in srv.requests if r["endpoint"] == "esearch.fcgi"]
    assert sorted(terms) == sorted(["aspirin lower death after MI", 'aspirin AND ("myocardial infarction")',
                                    "aspirin OR lower OR death OR after OR MI"])
    assert "abbreviations: 1 new" in res.stage("pubmed_search").reason
    assert res.hits[0].document_id == "40000001"  # found through the spelled-out abbreviation only


def test_vectors_are_encoded_once_across_questions_and_runs(tmp_path):
    questions = ["Does aspirin inhibit platelet aggregation?", "Do platelets aggregate in diabetes?"]
    with FakeEutils() as srv:
        srv.articles = medline_articles(ARTICLES)
        src, ret = _online(srv, tmp_path)
        first = [ret.search(q, k=3, deadline_ms=None) for q in questions]
        n_requests = srv.count()
        cached, encoded = zip(*(_counts(r.stage("pool").reason) for r in first))
        assert cached[0] == 0 and encoded[0] >= 3
        assert cached[1] >= 2  # the articles both questions share: not encoded again
        assert list((tmp_path / "vectors").iterdir())  # on disk, under the encoder's identity
        src.close()
        src2, ret2 = _online(srv, tmp_path)  # a second run: a new process would see the same
        second = [ret2.search(q, k=3, deadline_ms=None) for q in questions]
        src2.close()
    assert srv.count() == n_requests  # searches and records from the cache too
    for a, b in zip(first, second):
        assert _counts(b.stage("pool").reason)[1] == 0
        assert [(h.chunk_id, round(h.score, 5)) for h in a.hits] == [(h.chunk_id, round(h.score, 5)) for h in b.hits]


def test_vectors_of_another_encoder_or_chunking_are_not_reused(tmp_path, encoder_dir):
    from medretrieve.corpus.chunking import ChunkingConfig
    from medretrieve.corpus.memory import MemoryCollection
    from medretrieve.retrieval.pool_filler import encoder_identity

    a = MemoryCollection.from_encoders(encoder_dir)
    b = MemoryCollection.from_encoders(encoder_dir, chunking=ChunkingConfig(max_tokens=64))
    assert encoder_identity(a) == encoder_identity(MemoryCollection.from_encoders(encoder_dir))
    assert encoder_identity(a) != encoder_identity(b)


def _spied_pool(encoder_dir, monkeypatch):
    """An empty in-memory pool and the sizes of its article encoder's calls."""
    from medretrieve.corpus.memory import MemoryCollection

    pool = MemoryCollection.from_encoders(encoder_dir)
    enc = pool.article_encoder()
    calls = []
    real = enc.encode
    monkeypatch.setattr(enc, "encode", lambda items, **kw: calls.append(len(items)) or real(items, **kw))
    return pool, calls


def test_chunks_of_many_articles_are_encoded_in_one_batch(encoder_dir, monkeypatch):
    from medretrieve.corpus.memory import MemoryCollection
    from medretrieve.retrieval.pool_filler import PoolFiller, VectorStore

    pool, calls = _spied_pool(encoder_dir, monkeypatch)
    records = [Record(str(i + 1), a.title, a.sections) for i, a in enumerate(ARTICLES)]
    report = PoolFiller(VectorStore(None), batch_chunks=64).fill(pool, records, lambda: float("inf"))
    assert report.encoded == ["1", "2", "3", "4", "5"] and len(calls) <= 2  # cores (+ overlaps), not per article
    assert calls[0] == report.chunks_encoded == len(pool) >= 6
    again = PoolFiller(VectorStore(None), batch_chunks=2).fill(MemoryCollection.from_encoders(encoder_dir), records,
                                                                 lambda: float("inf"))
    assert again.encoded == report.encoded  # a record larger than a batch still goes in (alone)


def test_encoding_stops_at_the_budget_and_says_so(encoder_dir):
    from medretrieve.corpus.memory import MemoryCollection
    from medretrieve.retrieval.pool_filler import PoolFiller, VectorStore

    records = [Record(str(i + 1), a.title, a.sections) for i, a in enumerate(ARTICLES)]
    budget = iter([1e9, 0.0, 0.0, 0.0])
    filler = PoolFiller(VectorStore(None), batch_chunks=2)
    report = filler.fill(MemoryCollection.from_encoders(encoder_dir), records, lambda: next(budget))
    assert report.encoded == ["1", "2"] and report.left_out == ["3", "4", "5"]  # whole records, in order
    assert "3 left out (budget)" in report.note()


def test_a_wrong_cost_estimate_costs_one_small_batch_under_a_deadline(encoder_dir, monkeypatch):
    from medretrieve.retrieval.pool_filler import PROBE_CHUNKS, PoolFiller, VectorStore

    pool, calls = _spied_pool(encoder_dir, monkeypatch)
    filler = PoolFiller(VectorStore(None), batch_chunks=64)
    filler.chunk_ms.value = 1e-6  # believes encoding is free
    records = [Record(str(i + 1), a.title, a.sections) for i, a in enumerate(ARTICLES * 4)]
    end = time.perf_counter() + 3600.0  # a deadline, far away
    report = filler.fill(pool, records, lambda: (end - time.perf_counter()) * 1000.0)
    assert calls[0] <= PROBE_CHUNKS and report.encoded == [r.id for r in records]  # then batches of the rest
    assert max(calls) > PROBE_CHUNKS and filler.chunk_ms.value > 1e-6  # learnt


def test_a_weak_question_requeries_pubmed_with_relaxed_terms(encoder_dir):
    from medretrieve.corpus.memory import MemoryCollection

    question = "Does aspirin inhibit platelet aggregation in diabetes?"  # no article holds all its words
    with FakeEutils(boolean=True) as srv, PubMedSource(srv.base_url) as src:
        ret = Retriever(MemoryCollection.from_encoders(encoder_dir), online=OnlineStage(src, max_queries=1))
        res = ret.search(question, k=3, deadline_ms=None)
        terms = [r["params"]["term"] for r in srv.requests if r["endpoint"] == "esearch.fcgi"]
        quiet = Retriever(MemoryCollection.from_encoders(encoder_dir),
                          online=OnlineStage(src, max_queries=1, recovery=False)).search(question, k=3, deadline_ms=None)
    assert res.weak and "0 new of 0" in res.stage("pubmed_search").reason
    assert terms[0] == pubmed_queries(Query.analyse(question), max_queries=1)[0].term
    assert sorted(terms[1:]) == sorted(q.term for q in relaxed_queries(Query.analyse(question)))
    rec = res.stage("pubmed_recovery")
    assert rec.ran and "subject: 2 new" in rec.reason and "new articles joined the pool" in rec.reason
    assert res.stage("recovery").ran and res.hits and res.hits[0].document_id in {"30000001", "30000002"}
    assert not quiet.stage("pubmed_recovery").ran and not quiet.hits


def test_the_pubmed_path_stays_within_the_deadline(tmp_path):
    with FakeEutils(latency_s=(0.3, 0.8)) as srv:
        srv.articles = medline_articles(ARTICLES * 12)  # 60 articles
        src, ret = _online(srv, None, retmax=60)
        t0 = time.perf_counter()
        res = ret.search("Does aspirin inhibit platelet aggregation?", k=5, deadline_ms=1500)
        took = time.perf_counter() - t0
        src.close()
    assert took < 2.0
    cut = [s.name for s in res.stages if s.cut]
    assert cut, [(s.name, s.reason) for s in res.stages]  # what did not fit is reported

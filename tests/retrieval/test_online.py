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


MEDLINE = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "medline" / "filters_sample.xml"
DIABETES = "Is metformin the first-line drug for type 2 diabetes?"


def _medline_fake(srv):
    """The fake serves the MEDLINE fixture's records (years, publication types, MeSH, retracted ones) besides its
    own: its esearch ranks by the term's words whatever the tags, so records failing a filter do come back."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(MEDLINE.read_bytes())
    srv.articles.update({a.find("MedlineCitation/PMID").text: a for a in root.findall("PubmedArticle")})


def _passes(hits, where, fields):
    import numpy as np

    from medretrieve.corpus.metadata import MetadataColumns

    return bool(np.all(MetadataColumns([h.metadata for h in hits], fields).mask(where)))


def test_an_online_search_with_a_filter_asks_pubmed_for_it_and_drops_what_fails_it(encoder_dir):
    from medretrieve.corpus.memory import MemoryCollection
    from medretrieve.corpus.pubmed_terms import MEDLINE_FIELDS

    where = "year >= 2016 and publication_type in (Review, 'Randomized Controlled Trial', 'Practice Guideline')"
    with FakeEutils() as srv, PubMedSource(srv.base_url) as src:
        _medline_fake(srv)
        ret = Retriever(MemoryCollection.from_encoders(encoder_dir), online=OnlineStage(src, retmax=20))
        res = ret.search(DIABETES, k=10, deadline_ms=None, where=where)
        terms = [r["params"]["term"] for r in srv.requests if r["endpoint"] == "esearch.fcgi"]
        fetched = ",".join(r["params"]["id"] for r in srv.requests if r["endpoint"] == "efetch.fcgi")
    tail = ' AND 2016:3000[dp] AND ("Review"[pt] OR "Randomized Controlled Trial"[pt] OR "Practice Guideline"[pt])'
    assert terms and all(t.startswith("(") and t.endswith(tail) for t in terms)
    assert "31000002" in fetched  # a 2009 case report PubMed (the fake) returned anyway ...
    docs = {h.document_id for h in res.hits}
    assert docs == {"31000001", "31000005"}  # ... is dropped, as are the retracted ones and those without a type
    assert _passes(res.hits, where + " and not retracted", MEDLINE_FIELDS)
    assert "failed the filter" in res.stage("pubmed_fetch").reason
    with pytest.raises(ValueError, match="unknown field 'yeer'"):
        ret.search(DIABETES, where="yeer > 1")


def test_retracted_records_are_dropped_by_default_without_narrowing_the_terms(encoder_dir):
    from medretrieve.corpus.memory import MemoryCollection

    with FakeEutils() as srv, PubMedSource(srv.base_url) as src:
        _medline_fake(srv)
        ret = Retriever(MemoryCollection.from_encoders(encoder_dir), online=OnlineStage(src, retmax=20,
                                                                                         max_queries=1))
        plain = {h.document_id for h in ret.search(DIABETES, k=20, deadline_ms=None).hits}
        every = {h.document_id for h in ret.search(DIABETES, k=20, deadline_ms=None, include_retracted=True).hits}
        only = {h.document_id for h in ret.search(DIABETES, k=20, deadline_ms=None, where="retracted").hits}
        terms = [r["params"]["term"] for r in srv.requests if r["endpoint"] == "esearch.fcgi"]
    assert {"31000003", "31000004"} <= every and not plain & {"31000003", "31000004"}
    assert only == {"31000003", "31000004"}
    assert terms[0] == terms[1] == pubmed_queries(Query.analyse(DIABETES), max_queries=1)[0].term
    assert terms[2] == f"({terms[0]}) AND retracted publication[pt]"


def test_a_field_without_an_esearch_tag_is_enforced_on_the_records(encoder_dir, tmp_path):
    from medretrieve.corpus.collection import Collection

    local = Collection.build([{"id": "L9", "title": "Metformin dosing", "topic": "dosing",
                               "text": "Metformin for type 2 diabetes is started at a low dose."}],
                             tmp_path / "local", encoder=encoder_dir, progress=False)
    with FakeEutils() as srv, PubMedSource(srv.base_url) as src:
        _medline_fake(srv)
        ret = Retriever(local, online=OnlineStage(src, retmax=20, max_queries=1))
        res = ret.search(DIABETES, k=10, deadline_ms=None, where="topic == dosing or year >= 2021")
        term = next(r["params"]["term"] for r in srv.requests if r["endpoint"] == "esearch.fcgi")
    assert term == pubmed_queries(Query.analyse(DIABETES), max_queries=1)[0].term  # the OR cannot narrow it
    assert {"L9", "31000005"} <= {h.document_id for h in res.hits}  # 31000005: 2022
    assert all(h.metadata.get("topic") == "dosing" or h.metadata["year"] >= 2021 for h in res.hits)
    assert "failed the filter" in res.stage("pubmed_fetch").reason and res.stage("filter").ran


def test_a_filtered_local_collection_seeds_the_pool_with_passing_rows_only(encoder_dir, tmp_path):
    from medretrieve.corpus.collection import Collection

    local = Collection.build(str(MEDLINE), tmp_path / "medline", encoder=encoder_dir, progress=False)
    with FakeEutils() as srv, PubMedSource(srv.base_url) as src:
        _medline_fake(srv)
        ret = Retriever(local, online=OnlineStage(src, retmax=20))
        plain = ret.search(DIABETES, k=20, deadline_ms=None)  # retracted local documents are out by default
        res = ret.search(DIABETES, k=20, deadline_ms=None, where="year <= 2020 and mesh == Metformin")
        fetched = [r["params"]["id"] for r in srv.requests if r["endpoint"] == "efetch.fcgi"]
    assert plain.hits and not {h.document_id for h in plain.hits} & {"31000003", "31000004"}
    assert res.hits and all(h.metadata["year"] <= 2020 and "Metformin" in h.metadata["mesh"]
                            and not h.metadata["retracted"] for h in res.hits)
    assert "already local" in res.stage("pool").reason
    assert not any("3100000" in f for f in fetched)  # the local ones are never fetched, passing or not


def test_the_recovery_requery_keeps_to_the_filter(encoder_dir):
    from medretrieve.corpus.memory import MemoryCollection
    from medretrieve.filters import parse_filter
    from medretrieve.outbound import Deadline
    from medretrieve.retrieval.online import OnlinePool
    from medretrieve.retrieval.results import StageLog

    with FakeEutils() as srv, PubMedSource(srv.base_url) as src:
        _medline_fake(srv)
        stage = OnlineStage(src, retmax=20)
        where = parse_filter("year >= 2019")
        pool = OnlinePool(MemoryCollection.from_encoders(encoder_dir), where=stage.records_filter(where),
                          fields=stage.fields, ask=where)
        dl = Deadline(None)
        stage.requery(Query.analyse(DIABETES), pool, dl, StageLog(dl))
        terms = [r["params"]["term"] for r in srv.requests if r["endpoint"] == "esearch.fcgi"]
    assert terms and all(t.endswith(") AND 2019:3000[dp]") for t in terms)
    years = {pool.collection.rows[i].document_id: pool.collection.rows[i].metadata["year"]
             for i in range(len(pool.collection.rows))}
    assert years and min(years.values()) >= 2019 and "31000005" in years

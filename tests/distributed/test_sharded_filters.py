"""Metadata filters and facets on a ShardedRetriever (issue 45): over three shards whose schemas differ (a journal
only one shard's documents carry), a filtered search gives the hits of the same filtered search over one
collection of the shards concatenated, every hit passes its filter, retracted articles stay out unless asked for,
facet counts are one collection's, and a bad filter is refused alike."""
from __future__ import annotations

import sys
import time

import pytest

pytest.importorskip("ray")

from sharded_data import QUESTIONS, encoder_dir, metadata_corpus, ray_cluster  # noqa: E402,F401

from medretrieve.corpus.collection import Collection  # noqa: E402
from medretrieve.corpus.metadata import MetadataColumns  # noqa: E402
from medretrieve.distributed import ShardedRetriever  # noqa: E402
from medretrieve.distributed.shard_actor import ShardSearcher  # noqa: E402
from medretrieve.distributed.shard_filter import merge_fields  # noqa: E402
from medretrieve.retrieval.retriever import Retriever  # noqa: E402
from medretrieve.wire import SearchOptionValueError  # noqa: E402

FILTERS = ["year >= 2010", "publication_type in (Review)", "journal == Lancet", "not journal == Lancet",
           {"and": [{"field": "year", "op": "<", "value": 2012},
                    {"not": {"field": "publication_type", "op": "in", "value": ["Case Reports"]}}]},
           "year == 2004 or year == 2017", "year >= 2030"]


@pytest.fixture(scope="module")
def retrievers(ray_cluster, metadata_corpus):
    dirs, one = metadata_corpus
    single = Retriever(Collection.open(one), warmup=False)
    sharded = ShardedRetriever(dirs, warmup=False)
    try:
        yield single, sharded
    finally:
        sharded.close()


def _passes(hit, where) -> bool:
    """Whether a hit's metadata passes ``where`` (one document's columns: the same compiler, not the search)."""
    fields = {"year": "integer", "publication_type": "keywords", "retracted": "boolean", "journal": "keyword"}
    return bool(MetadataColumns([hit.metadata], fields).mask(where)[0])


def test_the_shards_schemas_differ_and_merge_to_the_one_collections(retrievers):
    single, sharded = retrievers
    assert sharded.collection.metadata_fields == single.collection.metadata_fields
    assert "journal" in sharded.collection.metadata_fields
    assert merge_fields([{"year": "integer"}, {"year": "float", "mesh": "keyword"}, {"mesh": "keywords"},
                         {"when": "date"}, {"when": "keyword"}, {"odd": "boolean"}, {"odd": "integer"}]) == {
        "year": "float", "mesh": "keywords", "when": "keyword"}


@pytest.mark.parametrize("where", FILTERS, ids=lambda w: w if isinstance(w, str) else "json")
def test_a_filtered_sharded_search_gives_the_one_collections_hits(retrievers, where):
    single, sharded = retrievers
    for q in QUESTIONS[:4]:
        want = single.search(q, k=10, deadline_ms=None, where=where)
        got = sharded.search(q, k=10, deadline_ms=None, where=where)
        assert [h.chunk_id for h in got.hits] == [h.chunk_id for h in want.hits], (q, where)
        assert [h.score for h in got.hits] == pytest.approx([h.score for h in want.hits], rel=1e-5, abs=1e-6)
        assert not got.partial and got.stage("filter").reason == want.stage("filter").reason
        for hit in got.hits:
            assert _passes(hit, where) and hit.metadata["retracted"] is False
    if where == "year >= 2030":
        assert not got.hits  # nothing passes: nothing found, nothing made up


def test_every_stage_keeps_to_the_filter(retrievers):
    """Feedback, MMR, recovery's extra searches and a per-document cap read only allowed rows."""
    single, sharded = retrievers
    options = {"feedback": True, "mmr": True, "recovery": True, "per_document": 1, "sections": ["treatment"]}
    for q in QUESTIONS:
        want = single.search(q, k=8, deadline_ms=None, where="journal == Lancet", **options)
        got = sharded.search(q, k=8, deadline_ms=None, where="journal == Lancet", **options)
        assert [h.chunk_id for h in got.hits] == [h.chunk_id for h in want.hits], q
        assert all(h.metadata.get("journal") == "Lancet" for h in got.hits)
        assert len({h.document_id for h in got.hits}) == len(got.hits)  # the cap held


def test_retracted_articles_are_out_by_default_and_back_when_asked(retrievers):
    single, sharded = retrievers
    q = QUESTIONS[1]
    plain = sharded.search(q, k=30, deadline_ms=None)
    assert plain.hits and not any(h.metadata["retracted"] for h in plain.hits)
    assert [h.chunk_id for h in plain.hits] == [h.chunk_id for h in single.search(q, k=30, deadline_ms=None).hits]
    back = sharded.search(q, k=30, deadline_ms=None, include_retracted=True)
    assert any(h.metadata["retracted"] for h in back.hits)
    assert [h.chunk_id for h in back.hits] == [
        h.chunk_id for h in single.search(q, k=30, deadline_ms=None, include_retracted=True).hits]
    only = sharded.search(q, k=10, deadline_ms=None, where="retracted")  # a filter naming the field decides
    assert only.hits and all(h.metadata["retracted"] for h in only.hits)


def test_priors_order_the_sharded_hits_as_one_collections(retrievers):
    single, sharded = retrievers
    for options in ({"evidence_prior": True}, {"recency_half_life": 2.0}):
        want = single.search(QUESTIONS[0], k=10, deadline_ms=None, where="year >= 2005", **options)
        got = sharded.search(QUESTIONS[0], k=10, deadline_ms=None, where="year >= 2005", **options)
        assert [h.chunk_id for h in got.hits] == [h.chunk_id for h in want.hits]


def test_a_bad_filter_is_refused_as_one_collection_refuses_it(retrievers):
    single, sharded = retrievers
    for where in ("colour == red", "publication_type > 3", "year == Review", "retracted == 2", "year >"):
        with pytest.raises(SearchOptionValueError) as want:
            single.search(QUESTIONS[0], where=where)
        with pytest.raises(SearchOptionValueError) as got:
            sharded.search(QUESTIONS[0], where=where)
        assert (str(got.value), got.value.option) == (str(want.value), want.value.option) and \
            got.value.option == "where"


def test_facets_sum_the_shards_counts(retrievers):
    single, sharded = retrievers
    fields = ["year", "publication_type", "journal", "retracted"]
    for kwargs in ({}, {"where": "year >= 2010"}, {"include_retracted": True}, {"top": 3},
                   {"where": "journal == BMJ", "include_retracted": True}):
        got = sharded.facets(fields, **kwargs)
        assert got == single.facets(fields, **kwargs), kwargs
    assert sharded.facets(["journal"])["facets"]["journal"]  # counted on the shard that has it
    for fields, kwargs in ((["colour"], {}), (["year"], {"where": "colour == red"}), ("year", {}),
                           (["year"], {"top": 0})):
        with pytest.raises((TypeError, ValueError)) as want:
            single.facets(fields, **kwargs)
        with pytest.raises((TypeError, ValueError)) as got:
            sharded.facets(fields, **kwargs)
        assert (type(got.value), str(got.value), got.value.option) == (
            type(want.value), str(want.value), want.value.option)


class StallingCount(ShardSearcher):
    """A shard whose count of a filter's rows takes 5 s when its directory ends with 'shard1'."""

    def passing(self, *args, **kwargs):
        if self.directory.endswith("shard1"):
            time.sleep(5)
        return super().passing(*args, **kwargs)


def test_a_filtered_search_holds_its_deadline_when_a_shard_stalls(ray_cluster, metadata_corpus):
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test's shard class travels by value
    dirs, _ = metadata_corpus
    sharded = ShardedRetriever(dirs, searcher=StallingCount, warmup=False)
    try:
        t0 = time.perf_counter()
        res = sharded.search(QUESTIONS[0], k=10, deadline_ms=600, where="year >= 2005")
        assert time.perf_counter() - t0 < 3.0  # never the stalled shard's 5 s
        # the count is not waited for, the shard is still searched (it filters its own rows)
        assert not res.partial and res.shards["answered"] == ["shard0", "shard1", "shard2"]
        assert res.hits and all(h.metadata["year"] >= 2005 for h in res.hits)
    finally:
        sharded.close()

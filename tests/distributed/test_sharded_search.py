"""ShardedRetriever on a local Ray cluster: the hits of one collection, partial results when a shard dies or stalls,
Ray restarting a dead shard, shards that cannot be searched together refused."""
from __future__ import annotations

import json
import shutil
import sys
import time

import numpy as np
import pytest

pytest.importorskip("ray")

from sharded_data import QUESTIONS, encoder_dir, ray_cluster, sharded_corpus  # noqa: E402,F401

from medretrieve.corpus.collection import Collection  # noqa: E402
from medretrieve.distributed import ShardedRetriever, shard_of  # noqa: E402
from medretrieve.distributed.shard_actor import ShardSearcher  # noqa: E402
from medretrieve.retrieval.learned_ranker import FEATURES, LinearRanker  # noqa: E402
from medretrieve.retrieval.retriever import Retriever  # noqa: E402


def _same_hits(a, b) -> None:
    assert [h.chunk_id for h in a.hits] == [h.chunk_id for h in b.hits]
    np.testing.assert_allclose([h.score for h in a.hits], [h.score for h in b.hits], rtol=1e-5, atol=1e-6)
    for x, y in zip(a.hits, b.hits):
        assert x.scores.keys() == y.scores.keys()
        np.testing.assert_allclose([x.scores[n] for n in x.scores], [y.scores[n] for n in x.scores], rtol=1e-5,
                                   atol=1e-6)
        assert (x.text, x.document_id, x.parent_id) == (y.text, y.document_id, y.parent_id)
    assert (a.query_type, a.weak, a.weak_reasons) == (b.query_type, b.weak, b.weak_reasons)


def test_sharded_search_returns_the_hits_of_one_collection_of_the_shards(ray_cluster, sharded_corpus):
    dirs, one, _ = sharded_corpus
    rng = np.random.default_rng(0)
    ranker = LinearRanker(FEATURES, rng.normal(size=len(FEATURES)), 0.1, np.zeros(len(FEATURES)),
                          np.ones(len(FEATURES)))
    single = Retriever(Collection.open(one))
    sharded = ShardedRetriever(dirs)
    try:
        assert isinstance(sharded, Retriever) and sharded.shard_names == ["shard0", "shard1"]
        for q in QUESTIONS:
            got = sharded.search(q, k=10, deadline_ms=None)
            _same_hits(single.search(q, k=10, deadline_ms=None), got)
            assert got.shards["answered"] == ["shard0", "shard1"] and not got.partial
            assert {s.name for s in got.stages} >= {"shards", "fetch", "rerank", "mmr"}
        # the learned ranker reads every feature (BM25 with all shards' statistics, documents' tokens, vectors)
        single.ranker = sharded.ranker = ranker
        for q in QUESTIONS[:4]:
            _same_hits(single.search(q, k=10, deadline_ms=None), sharded.search(q, k=10, deadline_ms=None))
        # switches and a per-document cap go through as for one collection
        for options in ({"bm25": False}, {"dense": False}, {"feedback": True, "mmr": True},
                        {"expand": False}, {"per_document": 1}, {"sections": ["treatment", "other"]}):
            _same_hits(single.search(QUESTIONS[1], k=5, deadline_ms=None, **options),
                       sharded.search(QUESTIONS[1], k=5, deadline_ms=None, **options))
    finally:
        sharded.close()


def test_a_killed_shard_gives_a_partial_result_and_ray_restarts_it(ray_cluster, sharded_corpus):
    dirs, _, parts = sharded_corpus
    in_shard0 = {r["id"] for r in parts[0]}
    sharded = ShardedRetriever(dirs)
    try:
        # dead for good, so every call of the search fails alike (with a restart racing the search, a shard may
        # answer the first stage and fail a later call: its rows fetched by then rightly stay in the result)
        ray_cluster.kill(sharded.shard_set.actors[1], no_restart=True)
        res = sharded.search(QUESTIONS[0], k=10, deadline_ms=None)
        assert res.partial and list(res.shards["failed"]) == ["shard1"] and res.shards["answered"] == ["shard0"]
        assert res.hits and {h.document_id for h in res.hits} <= in_shard0
        assert "shard1" in res.stage("shards").reason or "1 failed" in res.stage("shards").reason
    finally:
        sharded.close()
    again = ShardedRetriever(dirs)
    try:
        ray_cluster.kill(again.shard_set.actors[0], no_restart=False)
        deadline = time.monotonic() + 120
        while True:
            res = again.search(QUESTIONS[1], k=10, deadline_ms=None)
            if not res.partial or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert not res.partial and res.shards["answered"] == ["shard0", "shard1"]  # restarted, back in service
    finally:
        again.close()


class StallingShard(ShardSearcher):
    """A shard whose first stage takes 5 s when its directory ends with 'shard1'."""

    def first_stage(self, *args, **kwargs):
        if self.directory.endswith("shard1"):
            time.sleep(5)
        return super().first_stage(*args, **kwargs)


def test_the_deadline_holds_when_a_shard_stalls(ray_cluster, sharded_corpus):
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test's shard class travels by value
    dirs, _, parts = sharded_corpus
    in_shard0 = {r["id"] for r in parts[0]}
    sharded = ShardedRetriever(dirs, searcher=StallingShard)
    try:
        t0 = time.perf_counter()
        res = sharded.search(QUESTIONS[0], k=10, deadline_ms=600)
        elapsed = time.perf_counter() - t0
        assert elapsed < 3.0, elapsed  # never the stalled shard's 5 s
        assert res.partial and list(res.shards["missed"]) == ["shard1"] and "shards" in res.cut
        assert res.hits and {h.document_id for h in res.hits} <= in_shard0
        t0 = time.perf_counter()
        res = sharded.search(QUESTIONS[0], k=10, deadline_ms=0)  # already expired: no shard is waited for
        assert time.perf_counter() - t0 < 2.0 and res.partial and not res.hits
    finally:
        sharded.close()


def test_shards_that_cannot_be_searched_together_are_refused(ray_cluster, sharded_corpus, tmp_path):
    dirs, _, _ = sharded_corpus
    other = tmp_path / "other"
    shutil.copytree(dirs[1], other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["encoder"]["sha256"] = "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="another encoder"):
        ShardedRetriever([dirs[0], other])
    with pytest.raises(ValueError, match="not a medretrieve collection"):
        ShardedRetriever([dirs[0], tmp_path])
    with pytest.raises(ValueError, match="named twice"):
        ShardedRetriever([dirs[0], dirs[0]])
    with pytest.raises(ValueError, match="not a sharded build"):
        ShardedRetriever(tmp_path)


def test_shard_of_is_stable_and_spreads_documents():
    assert [shard_of(f"d{i}", 4) for i in range(8)] == [shard_of(f"d{i}", 4) for i in range(8)]
    assert shard_of("PMID:31415926", 1) == 0
    counts = np.bincount([shard_of(str(i), 4) for i in range(4000)], minlength=4)
    assert counts.min() > 900  # about a quarter each
    with pytest.raises(ValueError, match="positive"):
        shard_of("d1", 0)

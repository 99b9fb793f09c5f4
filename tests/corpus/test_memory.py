"""MemoryCollection: an in-memory pool (copied chunks, records encoded within a budget), never written."""
from __future__ import annotations

import numpy as np
import pytest

from medretrieve.corpus.sources import Record, Section

DOCS = [{"id": f"d{i}", "title": f"doc {i}", "text": f"aspirin platelets number {i}. second sentence {i}."}
        for i in range(6)]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    from medretrieve.corpus.collection import Collection
    from medretrieve.models.encoders import default_model_dir

    return Collection.build(DOCS, tmp_path_factory.mktemp("mem") / "col", encoder=default_model_dir(), progress=False)


def _records(n, prefix="p"):
    return [Record(f"{prefix}{i}", f"title {i}", [Section("abstract", f"metformin glucose {i}.", "abstract", 0)])
            for i in range(n)]


def test_copy_rows_keeps_stored_vectors_and_sections(local, tmp_path):
    from medretrieve.corpus.memory import MemoryCollection

    pool = MemoryCollection.like(local)
    assert pool.copy_rows(local, [1, 3]) == 2
    assert [r.document_id for r in pool.rows] == ["d1", "d3"]
    np.testing.assert_allclose(pool.vectors([0, 1]), local.vectors([1, 3]), atol=1e-6)
    assert pool.parent(pool.rows[0].parent_id).text == local.parent(local.rows[1].parent_id).text
    assert pool.normalized == local.normalized and pool.article_encoder() is local.article_encoder()
    ids, _ = pool.lexical.search(["aspirin"], k=5, allowed=pool.alive)
    assert sorted(ids.tolist()) == [0, 1]
    pool.delete(["d1"])  # in memory only: nothing is written
    assert len(pool) == 1 and not any(tmp_path.iterdir())


def test_add_within_stops_when_the_budget_is_spent(local):
    from medretrieve.corpus.memory import MemoryCollection

    pool = MemoryCollection.like(local)
    budget = iter([1e9, 1e9, 0.0])
    report = pool.add_within(_records(10) + _records(1), lambda: next(budget), batch_chunks=4)  # 1 chunk each
    assert report.added == ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"]
    assert report.left_out == ["p8", "p9"] and report.present == ["p0"] and report.ms_per_chunk > 0
    # a batch is only started when 1.5x its estimated cost fits
    late = MemoryCollection.like(local).add_within(_records(3), lambda: 100.0, ms_per_chunk=30.0, batch_chunks=2)
    assert late.added[:2] == ["p0", "p1"]  # the first batch (2 chunks, est. 1.5 x 60 ms) fits in 100 ms
    none = MemoryCollection.like(local).add_within(_records(3), lambda: 100.0, reserve_ms=60.0, ms_per_chunk=30.0)
    assert none.added == [] and none.left_out == ["p0", "p1", "p2"]  # 40 ms left: not even one chunk (45 ms)
    assert pool.n_documents == 8 and len({r.document_id for r in pool.rows}) == 8
    res_ids, _ = pool.dense.search(pool.encode_queries(["metformin glucose 3"]), k=1)
    assert pool.rows[int(np.asarray(res_ids).reshape(-1)[0])].document_id == "p3"


def test_from_encoders_checks_the_pair(local, tmp_path):
    from medretrieve.corpus.memory import MemoryCollection

    empty = MemoryCollection.from_encoders(local.encoder_dir)
    assert len(empty) == 0 and empty.normalized
    with pytest.raises(FileNotFoundError):
        MemoryCollection.from_encoders(tmp_path / "nothing")

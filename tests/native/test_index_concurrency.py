"""Concurrency: searches while another thread adds; Python filters from several search threads."""
from __future__ import annotations

import threading

import numpy as np

import medretrieve
from index_data import embedding_like, exact_topk, recall

DIM = 24


def test_search_while_adding_is_safe_and_sees_growth() -> None:
    x = embedding_like(4000, DIM, seed=31)
    q = embedding_like(8, DIM, seed=32)
    idx = medretrieve.Index("l2", DIM)
    idx.init_index(4000, M=10, ef_construction=60, dtype="int8")
    idx.add(x[:500])
    errors: list[BaseException] = []
    done = threading.Event()
    seen_counts: list[int] = []

    def searcher() -> None:
        try:
            while not done.is_set():
                ids, scores = idx.search(q, 5, ef=32, num_threads=1)
                assert ((ids >= 0) & (ids < 4000)).all(), (ids.tolist(), scores.tolist())
                assert np.isfinite(scores).all()
                seen_counts.append(idx.element_count)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    for start in range(500, 4000, 500):
        idx.add(x[start:start + 500], ids=np.arange(start, start + 500), num_threads=2)
    done.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert idx.element_count == 4000 and len(seen_counts) > 0
    assert recall(idx.search(q, 10, ef=64)[0], exact_topk(x, q, 10, "l2")) >= 0.9


def test_python_filter_with_several_threads() -> None:
    x = embedding_like(1500, DIM, seed=33)
    q = embedding_like(16, DIM, seed=34)
    idx = medretrieve.Index("cosine", DIM)
    idx.init_index(1500, M=10, ef_construction=60)
    idx.add(x)
    idx.set_ef(200)
    calls = []
    lock = threading.Lock()

    def keep(label: int) -> bool:
        with lock:
            calls.append(threading.get_ident())
        return label % 4 == 1

    labels, _ = idx.knn_query(q, k=5, num_threads=2, filter=keep)
    assert (labels % 4 == 1).all()
    sub = np.arange(1, 1500, 4)
    assert recall(labels.astype(np.int64), sub[exact_topk(x[sub], q, 5, "cosine")]) >= 0.9
    assert len(set(calls)) >= 1
    same, _ = idx.search(q, 5, labels=None, num_threads=2)
    assert same.shape == (16, 5)


def test_filter_exception_propagates() -> None:
    idx = medretrieve.Index("ip", DIM)
    idx.init_index(50)
    idx.add(embedding_like(50, DIM, seed=35))

    def boom(label: int) -> bool:
        raise KeyError("filter failed")

    try:
        idx.knn_query(embedding_like(4, DIM, seed=36), k=1, num_threads=2, filter=boom)
    except KeyError as exc:
        assert "filter failed" in str(exc)
    else:
        raise AssertionError("the filter's exception was swallowed")


def test_filter_that_searches_the_same_index_gets_its_own_working_memory() -> None:
    # A search keeps its working memory per thread between queries (hnsw.cpp, ScratchLease); a filter callback
    # that searches again on that thread must get memory of its own, not the outer search's query and pool.
    for dtype in ("int8", "float32"):
        x = embedding_like(2000, DIM, seed=37)
        q = embedding_like(6, DIM, seed=38)
        idx = medretrieve.Index("ip", DIM)
        idx.init_index(2000, M=10, ef_construction=60, dtype=dtype)
        idx.add(x)
        idx.set_ef(64)
        plain, plain_d = idx.knn_query(q, k=5, num_threads=1)
        alone = [idx.search(q[j], 3, num_threads=1)[0][0].tolist() for j in range(len(q))]
        nested: list[tuple[int, list[int]]] = []

        def keep(label: int) -> bool:
            j = label % len(q)
            nested.append((j, idx.search(q[j], 3, num_threads=1)[0][0].tolist()))
            return True

        got, got_d = idx.knn_query(q, k=5, num_threads=1, filter=keep)
        assert got.tolist() == plain.tolist(), dtype
        np.testing.assert_array_equal(got_d, plain_d)
        assert len(nested) >= 5 * len(q)
        assert all(result == alone[j] for j, result in nested), dtype

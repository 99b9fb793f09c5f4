"""medretrieve.FlatIndex: exact search (float32 / int8), labels, deletions, persistence, errors."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import medretrieve
from index_data import embedding_like, exact_topk, recall

DIM = 24


@pytest.mark.parametrize("space", ["l2", "ip", "cosine"])
def test_float32_flat_is_exact(space: str) -> None:
    x = embedding_like(700, DIM, seed=1)
    q = embedding_like(20, DIM, seed=2)
    f = medretrieve.FlatIndex(space, DIM)
    f.add(x)
    ids, scores = f.search(q, 10, num_threads=2)
    np.testing.assert_array_equal(ids, exact_topk(x, q, 10, space))
    assert ids.dtype == np.int64 and scores.dtype == np.float32 and len(f) == 700


@pytest.mark.parametrize("dim", [16, 32, 33])
@pytest.mark.parametrize("space", ["l2", "ip"])
def test_float32_flat_batched_scan_is_exact_with_deletions_and_filter(space: str, dim: int) -> None:
    """The batched scan (tiles of queries over blocks of rows, dims 16/32 specialised): every query of a batch
    gets the exact top k of the live rows its filter accepts, the same as when it is searched alone."""
    # Rows: not a whole number of row blocks; queries: several tiles, the last one partial, and enough
    # work (300 x 3037 x 16 row dimensions) for num_threads=2 to start a second thread.
    x = embedding_like(3037, dim, seed=11)
    q = embedding_like(300, dim, seed=12)
    f = medretrieve.FlatIndex(space, dim)
    f.add(x)
    deleted = np.arange(0, len(x), 7)
    for i in deleted:
        f.mark_deleted(int(i))
    allowed = np.setdiff1d(np.arange(len(x))[np.arange(len(x)) % 3 != 0], deleted)
    expected = allowed[exact_topk(x[allowed], q, 10, space)]
    for threads in (1, 2):
        ids, _ = f.search(q, 10, filter=lambda i: i % 3 != 0, num_threads=threads)
        np.testing.assert_array_equal(ids, expected)
    alone = np.vstack([f.search(q[i : i + 1], 10, filter=lambda i: i % 3 != 0)[0] for i in range(len(q))])
    np.testing.assert_array_equal(alone, expected)


def test_int8_flat_recall_and_labels_and_deletions() -> None:
    x = embedding_like(1000, DIM, seed=3)
    q = embedding_like(30, DIM, seed=4)
    f = medretrieve.FlatIndex("ip", DIM, dtype="int8")
    f.add(x, labels=np.arange(1000) % 10)
    assert recall(f.search(q, 10)[0], exact_topk(x, q, 10, "ip")) >= 0.9
    ids, _ = f.search(q, 10, labels=[4])
    assert (ids % 10 == 4).all()
    top = f.search(q[:1], 1)[0][0, 0]
    f.mark_deleted(int(top))
    assert f.search(q[:1], 1)[0][0, 0] != top
    assert len(f) == 999
    with pytest.raises(ValueError, match="already exists"):
        f.add(x[:1], ids=[0])
    ids, scores = f.search(q[:1], 5, filter=lambda i: i < 3)
    assert set(ids[0, :3].tolist()) <= {0, 1, 2} and (ids[0, 3:] == -1).all() and np.isneginf(scores[0, 3:]).all()


def test_flat_persistence_and_pickle(tmp_path) -> None:
    x = embedding_like(200, DIM, seed=5)
    f = medretrieve.FlatIndex("l2", DIM, dtype="int8")
    f.add(x, ids=np.arange(1000, 1200), labels=[[i % 2, 100 + i % 3] for i in range(200)])
    want = f.search(x[:5], 4, labels=[101])
    path = tmp_path / "flat.idx"
    f.save(path)
    for g in (medretrieve.FlatIndex.load(path), medretrieve.FlatIndex.load(path, mmap=True), pickle.loads(pickle.dumps(f))):
        got = g.search(x[:5], 4, labels=[101])
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert (g.space, g.dim, g.dtype) == ("l2", DIM, "int8")
    with pytest.raises(RuntimeError, match="read-only"):
        medretrieve.FlatIndex.load(path, mmap=True).add(x[:1], ids=[5])
    with pytest.raises(ValueError, match="not a FlatIndex|holds an HNSW"):
        idx = medretrieve.Index("l2", DIM)
        idx.init_index(10)
        idx.add(x[:3])
        idx.save(tmp_path / "hnsw.idx")
        medretrieve.FlatIndex.load(tmp_path / "hnsw.idx")


def test_flat_device_and_errors() -> None:
    if not medretrieve.cuda_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            medretrieve.FlatIndex("ip", DIM, device="cuda")
    with pytest.raises(ValueError):
        medretrieve.FlatIndex("ip", DIM, device="tpu")
    f = medretrieve.FlatIndex("ip", DIM)
    ids, _ = f.search(np.ones(DIM), 3)  # empty index: padded
    assert (ids == -1).all()
    with pytest.raises(ValueError):
        f.add(np.ones((2, DIM + 1)))
    with pytest.raises(ValueError):
        f.search(np.ones(DIM), 0)


def test_single_threaded_filter_runs_under_one_gil_hold_per_block() -> None:
    """On one thread the scan holds the GIL across a block's filter calls: a filter that calls back into the index
    (which releases the GIL and takes the index lock again) still works, and a filter's exception reaches the
    caller with the index usable afterwards."""
    x = embedding_like(3000, 16, seed=21)
    q = embedding_like(40, 16, seed=22)
    bf = medretrieve.BFIndex("l2", 16)
    bf.init_index(3000)
    bf.add_items(x)
    counts: list[int] = []

    def reads_the_index(label: int) -> bool:
        counts.append(bf.get_current_count())
        return label % 2 == 1

    labels, _ = bf.knn_query(q, k=5, num_threads=1, filter=reads_the_index)
    odd = np.arange(1, 3000, 2)
    np.testing.assert_array_equal(labels, odd[exact_topk(x[odd], q, 5, "l2")])
    assert counts and set(counts) == {3000}

    def boom(label: int) -> bool:
        raise KeyError("filter failed")

    with pytest.raises(KeyError, match="filter failed"):
        bf.knn_query(q, k=5, num_threads=1, filter=boom)
    np.testing.assert_array_equal(bf.knn_query(q, k=5, num_threads=1)[0], exact_topk(x, q, 5, "l2"))

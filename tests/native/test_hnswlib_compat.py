"""hnswlib scripts, run against ``hnswlib.Index`` / ``medretrieve.Index`` and ``hnswlib.BFIndex`` /
``medretrieve.BFIndex``: same shapes, dtypes, ids, distances, counts and errors.

hnswlib's own test suite runs against the drop-in too (``test_hnswlib_suite.py``)."""
from __future__ import annotations

import os
import pickle
import tempfile
from typing import Any, Callable

import numpy as np
import pytest

import medretrieve
from index_data import embedding_like

hnswlib = pytest.importorskip("hnswlib")

DIM = 16


def outcome(fn: Callable[[], Any]) -> Any:
    """The result's shape/dtype summary, or the exception class hnswlib users would catch."""
    try:
        r = fn()
    except RuntimeError:
        return "RuntimeError"
    except ValueError:
        return "ValueError"
    except TypeError:
        return "TypeError"
    if isinstance(r, tuple):
        return tuple(outcome(lambda v=v: v) for v in r)
    if isinstance(r, np.ndarray):
        return ("ndarray", r.shape, str(r.dtype))
    return r


def script(cls: type, space: str) -> dict:
    """hnswlib usage; every observable goes into the record."""
    rec: dict = {}
    x = embedding_like(300, DIM, seed=41)
    q = embedding_like(7, DIM, seed=42)
    rec["bad_space"] = outcome(lambda: cls("nope", DIM))
    p = cls(space, DIM)
    rec["props_before"] = (p.space, p.dim)
    p.init_index(max_elements=400, ef_construction=200, M=16, random_seed=7)
    rec["props"] = (p.max_elements, p.element_count, p.M, p.ef_construction, p.ef)
    p.set_ef(300)  # ef >= n: exact, so ids agree between implementations
    p.set_num_threads(2)
    rec["num_threads"] = p.num_threads
    rec["empty_query"] = outcome(lambda: p.knn_query(q, k=1))
    p.add_items(x[:100])  # default ids 0..99
    p.add_items(x[100:], np.arange(1000, 1200), num_threads=1)
    p.add_items(x[5:6].astype(np.float64), [5])  # update in place, float64 input
    rec["count"] = (p.element_count, p.get_current_count(), p.get_max_elements())
    rec["ids"] = sorted(p.get_ids_list())
    labels, dist = p.knn_query(q, k=10)
    rec["knn"] = outcome(lambda: (labels, dist))
    rec["knn_ids"] = labels.tolist()
    rec["knn_dist"] = np.round(dist.astype(np.float64), 3).tolist()
    rec["knn_1d"] = outcome(lambda: p.knn_query(q[0], k=3))
    rec["knn_list"] = outcome(lambda: p.knn_query(q[:2].tolist(), k=2))
    rec["knn_filter"] = p.knn_query(q, k=3, filter=lambda lab: lab % 2 == 0)[0].tolist()
    rec["wrong_dim"] = outcome(lambda: p.add_items(np.ones((2, DIM + 3))))
    rec["k_too_big"] = outcome(lambda: p.knn_query(q, k=301))
    rec["get_items"] = outcome(lambda: p.get_items([0, 1000]))
    rec["get_items_list"] = type(p.get_items([0], return_type="list")).__name__
    rec["get_items_scalar"] = outcome(lambda: p.get_items(1000))
    rec["get_items_2d"] = outcome(lambda: p.get_items(p.knn_query(q, k=1)[0]))
    p.mark_deleted(1000)
    rec["after_delete"] = 1000 in p.knn_query(x[100], k=5)[0]
    rec["delete_twice"] = outcome(lambda: p.mark_deleted(1000))
    rec["get_deleted"] = outcome(lambda: p.get_items([1000]))
    rec["undelete_live"] = outcome(lambda: p.unmark_deleted(1001))
    p.unmark_deleted(1000)
    rec["after_undelete"] = int(p.knn_query(x[100], k=1)[0][0, 0])
    rec["replace_disabled"] = outcome(lambda: p.add_items(x[:1], [77], replace_deleted=True))
    rec["resize_small"] = outcome(lambda: p.resize_index(10))
    p.resize_index(500)
    rec["resized"] = p.max_elements
    full = cls(space, DIM)
    full.init_index(10)
    rec["overflow"] = outcome(lambda: full.add_items(x[:20]))
    clone = pickle.loads(pickle.dumps(p))
    rec["pickle"] = (clone.element_count, clone.knn_query(q, k=10)[0].tolist() == rec["knn_ids"])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "i.bin")
        p.save_index(path)
        loaded = cls(space, DIM)
        loaded.load_index(path, max_elements=600)
        loaded.set_ef(300)
        rec["loaded"] = (loaded.element_count, loaded.max_elements, loaded.knn_query(q, k=10)[0].tolist() == rec["knn_ids"])
    r = cls(space, DIM)
    r.init_index(50, allow_replace_deleted=True)
    r.add_items(x[:50])
    r.mark_deleted(3)
    r.add_items(x[60:61], [99], replace_deleted=True)
    rec["replace"] = (r.element_count, sorted(r.get_ids_list())[-1], 3 in r.get_ids_list())
    r.mark_deleted(4)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.bin")
        r.save_index(path)
        off = cls(space, DIM)
        off.load_index(path)  # hnswlib's default: replacing deleted elements is off after a load
        rec["load_replace_off"] = outcome(lambda: off.add_items(x[61:62], [98], replace_deleted=True))
        on = cls(space, DIM)
        on.load_index(path, max_elements=50, allow_replace_deleted=True)
        on.add_items(x[61:62], [98], replace_deleted=True)
        rec["load_replace_on"] = (on.element_count, on.max_elements, 4 in on.get_ids_list(), 98 in on.get_ids_list())
    return rec


def bf_script(cls: type, space: str) -> dict:
    """hnswlib BFIndex usage; every observable goes into the record."""
    rec: dict = {}
    x = embedding_like(300, DIM, seed=43)
    q = embedding_like(7, DIM, seed=44)
    rec["bad_space"] = outcome(lambda: cls("nope", DIM))
    b = cls(space, DIM)
    b.init_index(max_elements=400)
    rec["init_twice"] = outcome(lambda: b.init_index(10))
    b.set_num_threads(2)
    rec["num_threads"] = b.num_threads
    b.add_items(x[:100])  # default ids 0..99
    b.add_items(x[100:], np.arange(1000, 1200))
    b.add_items(x[7:8].astype(np.float64), [5])  # an existing id takes the new vector
    rec["count"] = (b.get_current_count(), b.get_max_elements())
    labels, dist = b.knn_query(q, k=10)
    rec["knn"] = outcome(lambda: (labels, dist))
    rec["knn_ids"] = labels.tolist()
    rec["knn_dist"] = dist.astype(np.float64).tolist()
    rec["updated"] = int(b.knn_query(x[7], k=2)[0][0].tolist().count(5))
    rec["knn_1d"] = outcome(lambda: b.knn_query(q[0], k=3))
    rec["knn_list"] = outcome(lambda: b.knn_query(q[:2].tolist(), k=2))
    rec["knn_filter"] = b.knn_query(q, k=3, filter=lambda lab: lab % 2 == 0)[0].tolist()
    # (A filter that rejects the first k rows is left out: hnswlib's BFIndex then returns wrong or repeated labels,
    # see test_bfindex_filter_runs_only_for_close_elements for the drop-in's exact results.)
    rec["wrong_dim"] = outcome(lambda: b.add_items(np.ones((2, DIM + 3))))
    nearest = int(b.knn_query(x[150], k=1)[0][0, 0])
    b.delete_vector(nearest)
    b.delete_vector(123456)  # not stored: ignored
    rec["after_delete"] = (b.get_current_count(), nearest in b.knn_query(x[150], k=5)[0])
    b.add_items(x[150:151], [nearest])  # a deleted id can be added again
    rec["re_added"] = (b.get_current_count(), int(b.knn_query(x[150], k=1)[0][0, 0]) == nearest)
    full = cls(space, DIM)
    full.init_index(10)
    rec["overflow"] = outcome(lambda: full.add_items(x[:20]))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bf.bin")
        b.save_index(path)
        loaded = cls(space, DIM)
        loaded.load_index(path)
        rec["loaded"] = (loaded.get_current_count(), loaded.get_max_elements(),
                         loaded.knn_query(q, k=10)[0].tolist() == b.knn_query(q, k=10)[0].tolist())
    return rec


@pytest.mark.parametrize("space", ["l2", "ip", "cosine"])
def test_same_behaviour_as_hnswlib(space: str) -> None:
    ref = script(hnswlib.Index, space)
    ours = script(medretrieve.Index, space)
    assert ref.keys() == ours.keys()
    for key in ref:
        if key == "knn_dist":
            np.testing.assert_allclose(ours[key], ref[key], atol=2e-3, rtol=1e-4, err_msg=key)
        else:
            assert ours[key] == ref[key], key


@pytest.mark.parametrize("space", ["l2", "ip", "cosine"])
def test_bfindex_same_behaviour_as_hnswlib(space: str) -> None:
    ref = bf_script(hnswlib.BFIndex, space)
    ours = bf_script(medretrieve.BFIndex, space)
    assert ref.keys() == ours.keys()
    if space == "cosine":
        # hnswlib's BFIndex normalises the rows it adds but not the queries: its distances are 1 - |q| cos (same
        # order); the drop-in returns 1 - cos, as hnswlib.Index does.
        norms = np.linalg.norm(embedding_like(7, DIM, seed=44).astype(np.float64), axis=1, keepdims=True)
        ref["knn_dist"] = (1.0 - (1.0 - np.asarray(ref["knn_dist"])) / norms).tolist()
    for key in ref:
        if key == "knn_dist":
            np.testing.assert_allclose(ours[key], ref[key], atol=2e-3, rtol=1e-4, err_msg=key)
        else:
            assert ours[key] == ref[key], key


def test_bfindex_adds_all_rows_or_none() -> None:
    """Past max_elements hnswlib adds the rows that fit; the drop-in refuses the whole call first."""
    x = embedding_like(20, DIM, seed=45)
    b = medretrieve.BFIndex("l2", DIM)
    b.init_index(10)
    b.add_items(x[:8])
    with pytest.raises(RuntimeError, match="exceeds the specified limit"):
        b.add_items(x[8:12])
    assert b.get_current_count() == 8
    b.add_items(x[8:10], [0, 1])  # updates do not count against the limit
    assert b.get_current_count() == 8


def test_bfindex_k_beyond_the_elements_raises() -> None:
    """hnswlib's BFIndex returns uninitialised rows here; the drop-in raises as Index.knn_query does."""
    b = medretrieve.BFIndex("ip", DIM)
    b.init_index(10)
    b.add_items(embedding_like(3, DIM, seed=46))
    with pytest.raises(RuntimeError, match="Fewer than k=5"):
        b.knn_query(embedding_like(1, DIM, seed=47), k=5)
    with pytest.raises(RuntimeError, match="Fewer than k=3"):
        b.knn_query(embedding_like(1, DIM, seed=47), k=3, filter=lambda label: label != 0)


def test_bfindex_int8_storage() -> None:
    """dtype='int8' (not in hnswlib) stores codes; the nearest neighbours of stored rows are themselves."""
    x = embedding_like(500, DIM, seed=48)
    b = medretrieve.BFIndex("cosine", DIM, dtype="int8")
    b.init_index(500)
    b.add_items(x)
    labels, _ = b.knn_query(x, k=1)
    assert (labels[:, 0] == np.arange(500)).mean() > 0.98


def test_bfindex_filter_runs_only_for_close_elements() -> None:
    """The filter sees a small share of the elements (hnswlib's rule), and the results are exact."""
    x = embedding_like(5000, DIM, seed=49)
    q = embedding_like(20, DIM, seed=50)
    b = medretrieve.BFIndex("l2", DIM)
    b.init_index(5000)
    b.add_items(x)
    calls = []

    def even(label: int) -> bool:
        calls.append(label)
        return label % 2 == 0

    labels, dist = b.knn_query(q, k=10, num_threads=1, filter=even)
    assert len(calls) < 20 * 5000 / 10
    assert (labels % 2 == 0).all()
    d = ((q[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(dist, np.sort(d[:, ::2], axis=1)[:, :10], rtol=1e-4, atol=1e-4)
    # Rejecting the first k rows (hnswlib's BFIndex goes wrong there), on every thread.
    labels, dist = b.knn_query(q, k=10, num_threads=-1, filter=lambda label: label > 4000)
    assert (labels > 4000).all()
    np.testing.assert_allclose(dist, np.sort(d[:, 4001:], axis=1)[:, :10], rtol=1e-4, atol=1e-4)

"""One hnswlib script, run against ``hnswlib.Index`` and ``medretrieve.Index``: same shapes, dtypes, ids, errors."""
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

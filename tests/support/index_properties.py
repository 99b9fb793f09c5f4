"""Hypothesis properties of the native layer's Python API: for any argument (ids, k, ef, labels, dtypes, shapes,
num_threads, ranked lists), a call either does exactly what the documented rules predict, or raises ValueError /
TypeError / RuntimeError with a message -- never a crash, a hang or a wrong result.

Each property predicts, from the documented rules alone, whether a call is valid; valid calls must succeed and give
correct results, invalid ones must raise. Run by test_index_properties.py in a child process (a crash fails that
test instead of killing pytest); ``MEDRETRIEVE_PROPERTY_EXAMPLES`` sets the examples per property (default 200).
"""
from __future__ import annotations

import atexit
import collections
import os
from typing import Any, Optional

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import medretrieve
from medretrieve import rrf

DIM = 4
MAX_ID = 2**63 - 1
EXAMPLES = int(os.environ.get("MEDRETRIEVE_PROPERTY_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ERRORS = (ValueError, TypeError, RuntimeError)
OUTCOMES: "collections.Counter[str]" = collections.Counter()


@atexit.register
def _report() -> None:
    if OUTCOMES:
        print("property outcomes:", dict(sorted(OUTCOMES.items())))


class Invalid(Exception):
    """The rules say this call must raise."""


def outcome(name: str, predicted_valid: bool, call: Any) -> Any:
    """Runs ``call``; checks it raised exactly when the prediction says so, with a message. Returns its result."""
    try:
        result = call()
    except ERRORS as exc:
        assert not predicted_valid, f"{name}: a valid call raised {type(exc).__name__}: {exc}"
        assert str(exc).strip(), f"{name}: {type(exc).__name__} without a message"
        OUTCOMES[f"{name}: clean error"] += 1
        return None
    assert predicted_valid, f"{name}: an invalid call succeeded and returned {result!r}"[:500]
    OUTCOMES[f"{name}: correct result"] += 1
    return result


def is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


# --- strategies ------------------------------------------------------------------

def mostly(valid: st.SearchStrategy, invalid: st.SearchStrategy) -> st.SearchStrategy:
    """Valid values four times out of five, so correct results get checked as often as errors (a plain one_of
    would flatten the branches and pick among them evenly)."""
    return st.sampled_from([True, True, True, True, False]).flatmap(lambda ok: valid if ok else invalid)


ints = st.one_of(st.integers(-3, 60), st.integers(2**62, 2**64 + 3), st.integers(-(2**70), 2**70))
scalars = st.one_of(ints, st.floats(), st.booleans(), st.text(max_size=2), st.none(), st.just(np.int64(7)),
                    st.just(np.uint64(2**64 - 1)), st.just(np.float64(3.0)))
int_dtypes = st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"])
other_dtypes = st.sampled_from(["float16", "float32", "float64", "bool", "complex64"])


def id_args(n: int) -> st.SearchStrategy:
    size = st.sampled_from([n, n, n, max(0, n - 1), n + 1])
    valid = st.one_of(
        st.lists(st.integers(2, 49), min_size=n, max_size=n, unique=True),
        st.lists(st.integers(2**62, MAX_ID), min_size=n, max_size=n, unique=True),
        st.lists(st.integers(2, 49), min_size=n, max_size=n, unique=True).map(lambda v: np.array(v, np.uint64)),
    )
    return mostly(valid, st.one_of(
        st.none(),
        scalars,
        size.flatmap(lambda m: st.lists(scalars, min_size=m, max_size=m)),
        size.flatmap(lambda m: st.lists(st.integers(0, 80), min_size=m, max_size=m, unique=True)),
        size.flatmap(lambda m: hnp.arrays(st.one_of(int_dtypes, other_dtypes), m)),
        size.flatmap(lambda m: st.lists(st.integers(0, 2**64), min_size=m, max_size=m).map(
            lambda v: np.array(v, dtype=object))),
        st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=2), min_size=n, max_size=n),
    ))


def predicted_ids(ids: Any, n: int, existing: set) -> Optional[list]:
    """The ids an add must store, or raise Invalid."""
    if ids is None:
        base = len(existing)
        return list(range(base, base + n))
    if isinstance(ids, np.ndarray):
        if ids.dtype.kind not in "iu" or ids.ndim > 1:
            raise Invalid
        values = [int(v) for v in ids.reshape(-1)]
    else:
        items = list(ids) if isinstance(ids, (list, tuple)) else [ids]
        if not all(is_int(v) for v in items):
            raise Invalid
        values = [int(v) for v in items]
    if len(values) != n or any(v < 0 or v > MAX_ID for v in values):
        raise Invalid
    if len(set(values)) != n or set(values) & existing:
        raise Invalid
    return values


def fresh(kind: str) -> Any:
    if kind == "Index":
        idx = medretrieve.Index("l2", DIM)
        idx.init_index(200, M=8, ef_construction=64)
        return idx
    return medretrieve.FlatIndex("l2", DIM)


# --- adds ---------------------------------------------------------------------------


@SETTINGS
@given(kind=st.sampled_from(["Index", "FlatIndex"]), n=st.integers(0, 6), data=st.data(),
       first=st.booleans())
def test_add_ids(kind: str, n: int, data: st.DataObject, first: bool) -> None:
    idx = fresh(kind)
    existing: set = set()
    if not first:
        idx.add(np.random.default_rng(1).standard_normal((3, DIM)).astype(np.float32), ids=[0, 1, 50])
        existing = {0, 1, 50}
    ids = data.draw(id_args(n), label="ids")
    x = np.random.default_rng(n).standard_normal((n, DIM)).astype(np.float32) + 5.0
    try:
        want: Optional[list] = predicted_ids(ids, n, existing)
    except Invalid:
        want = None
    before = sorted(idx.get_ids_list())
    outcome("add ids", want is not None, lambda: idx.add(x, ids=ids))
    if want is None:
        assert sorted(idx.get_ids_list()) == before, "a failed add changed the index"
        return
    assert sorted(idx.get_ids_list()) == sorted(before + want)
    if n:
        found, scores = idx.search(x, 1)
        assert found[:, 0].tolist() == want and found.dtype == np.int64


vector_args = st.one_of(
    hnp.arrays(st.sampled_from(["float32", "float64", "int16"]), st.sampled_from([(3, DIM), (DIM,), (1, DIM)]),
               elements=st.integers(-1000, 1000)),
    hnp.arrays(st.one_of(st.just("float32"), st.just("float64"), st.just("float16"), int_dtypes, other_dtypes),
               st.sampled_from([(3, DIM), (DIM,), (0, DIM), (2, DIM + 1), (DIM - 1,), (2, DIM, 1), (), (2, 0)])),
    st.lists(st.lists(st.floats(-1e16, 1e16), min_size=DIM, max_size=DIM), min_size=1, max_size=3),
    st.lists(st.text(max_size=1), min_size=DIM, max_size=DIM),
)


def predicted_rows(v: Any) -> int:
    """The number of rows an add must store, or raise Invalid."""
    arr = np.asarray(v)
    if arr.dtype.kind not in "fiu" or arr.ndim not in (1, 2) or arr.shape[-1] != DIM:
        raise Invalid
    with np.errstate(over="ignore", invalid="ignore"):
        x = arr.astype(np.float32)
    if not (np.abs(x) <= 1e15).all():
        raise Invalid
    return 1 if arr.ndim == 1 else arr.shape[0]


@SETTINGS
@given(kind=st.sampled_from(["Index", "FlatIndex"]), vectors=vector_args)
def test_add_vectors(kind: str, vectors: Any) -> None:
    idx = fresh(kind)
    try:
        n: Optional[int] = predicted_rows(vectors)
    except Invalid:
        n = None
    outcome("add vectors", n is not None, lambda: idx.add(vectors))
    assert len(idx.get_ids_list()) == (n or 0)
    if n:
        want = np.asarray(vectors, dtype=np.float32).reshape(n, DIM)
        got = idx.get_items(list(range(n)))
        np.testing.assert_array_equal(got, want)  # float32 storage keeps vectors exactly


# --- searches ------------------------------------------------------------------------

N = 40
_X = np.random.default_rng(3).standard_normal((N, DIM)).astype(np.float32)
_LABELS = [[i % 5] if i % 7 else [i % 5, 100 + i % 3] for i in range(N)]


def _built(kind: str) -> Any:
    idx = fresh(kind)
    idx.add(_X, labels=_LABELS)
    idx.mark_deleted(3)
    return idx


INDEXES = {"Index": _built("Index"), "FlatIndex": _built("FlatIndex")}
QUERIES = np.random.default_rng(4).standard_normal((3, DIM)).astype(np.float32)


def predicted_k(k: Any) -> int:
    if not is_int(k) or not 1 <= int(k) <= max(N, 1024):
        raise Invalid
    return int(k)


def predicted_ef(ef: Any, nq: int) -> None:
    if ef is None:
        return
    if isinstance(ef, (bool, np.bool_)):
        raise Invalid
    if isinstance(ef, np.ndarray):
        values = ef.reshape(-1).tolist() if ef.dtype.kind in "iu" else None
    else:
        items = list(ef) if isinstance(ef, (list, tuple)) else [ef]
        values = [int(v) for v in items] if all(is_int(v) for v in items) else None
    if values is None or len(values) not in (1, nq) or not all(1 <= v <= MAX_ID for v in values):
        raise Invalid


def predicted_labels(labels: Any) -> Optional[set]:
    if labels is None:
        return None
    items = list(labels) if isinstance(labels, (list, tuple)) else [labels]
    if not all(is_int(v) and 0 <= int(v) <= 2**32 - 1 for v in items):
        raise Invalid
    return {int(v) for v in items}


def predicted_threads(t: Any) -> None:
    if t is not None and not is_int(t):
        raise Invalid


search_ints = mostly(st.one_of(st.integers(1, 60), st.just(1024), st.just(np.int64(5))),
                     st.one_of(st.integers(-2, 0), st.integers(1025, 1100), st.integers(2**62, 2**70), st.floats(),
                               st.booleans(), st.none(), st.just(np.uint64(2**64 - 1)), st.text(max_size=1)))
ef_args = mostly(st.one_of(st.none(), st.integers(1, 300), st.lists(st.integers(1, 80), min_size=1, max_size=1),
                           st.lists(st.integers(1, 80), min_size=3, max_size=3)),
                 st.one_of(st.integers(-2, 0), st.integers(2**63 - 2, 2**65),
                           st.lists(st.integers(-1, 80), min_size=0, max_size=4), st.floats(), st.booleans(),
                           hnp.arrays(st.one_of(int_dtypes, st.just("float64")), st.sampled_from([1, 3, 2]))))
label_args = mostly(st.one_of(st.none(), st.integers(0, 6), st.lists(st.integers(0, 105), max_size=4)),
                    st.one_of(st.integers(-2, -1), st.integers(2**32, 2**32 + 1), st.lists(st.integers(-1, 105), max_size=4),
                              st.lists(st.lists(st.integers(0, 5))), st.floats(), st.text(max_size=1),
                              st.lists(st.booleans(), min_size=1, max_size=2)))
thread_args = mostly(st.one_of(st.none(), st.integers(-3, 5000), st.integers(2**31, 2**70)),
                     st.one_of(st.floats(), st.booleans(), st.text(max_size=1)))


@SETTINGS
@given(kind=st.sampled_from(["Index", "FlatIndex"]), k=search_ints, ef=ef_args, labels=label_args,
       num_threads=thread_args)
def test_search_arguments(kind: str, k: Any, ef: Any, labels: Any, num_threads: Any) -> None:
    idx = INDEXES[kind]
    try:
        kk = predicted_k(k)
        if kind == "Index":
            predicted_ef(ef, len(QUERIES))  # FlatIndex accepts ef and ignores it (exact search)
        allowed = predicted_labels(labels)
        predicted_threads(num_threads)
        valid = True
    except Invalid:
        valid = False
    result = outcome(f"{kind}.search", valid,
                     lambda: idx.search(QUERIES, k, ef=ef, labels=labels, num_threads=num_threads))
    if not valid:
        return
    ids, scores = result
    assert ids.shape == scores.shape == (3, kk) and ids.dtype == np.int64 and scores.dtype == np.float32
    live = [i for i in range(N) if i != 3 and (allowed is None or set(_LABELS[i]) & allowed)]
    for row, srow, q in zip(ids, scores, QUERIES):
        found = row[row >= 0]
        m = len(found)
        assert (row[m:] == -1).all() and np.isneginf(srow[m:]).all() and np.isfinite(srow[:m]).all()
        assert set(found.tolist()) <= set(live) and len(set(found.tolist())) == m
        assert (np.diff(srow[:m]) <= 1e-6).all()  # best first
        if kind == "FlatIndex":  # exact: the best min(k, allowed) by -||q - x||^2
            sims = -((_X[live] - q) ** 2).sum(1)
            assert m == min(kk, len(live))
            if m:
                np.testing.assert_allclose(np.sort(srow[:m])[::-1], np.sort(sims)[::-1][:m], rtol=1e-5, atol=1e-5)


# --- lookups and deletions -------------------------------------------------------------


@SETTINGS
@given(kind=st.sampled_from(["Index", "FlatIndex"]), op=st.sampled_from(["mark", "get"]),
       target=mostly(st.sampled_from([0, 1, 7, MAX_ID, np.int64(7), np.uint64(MAX_ID)]), scalars))
def test_lookup_ids(kind: str, target: Any, op: str) -> None:
    idx = fresh(kind)
    idx.add(_X[:5], ids=[0, 1, 2, 7, MAX_ID])
    idx.mark_deleted(2)
    present = is_int(target) and int(target) in {0, 1, 7, MAX_ID}
    if op == "mark":
        outcome("mark_deleted", present, lambda: idx.mark_deleted(target))
        live = len(idx)
        assert live == (3 if present else 4)
    else:
        got = outcome("get_items", present, lambda: idx.get_items([target]))
        if present:
            np.testing.assert_array_equal(got[0], _X[[0, 1, 2, 7, MAX_ID].index(int(target))])


# --- ranked-list fusion ---------------------------------------------------------------


def reference_rrf(lists: list, k: float = 60.0) -> tuple:
    score: dict = {}
    best: dict = {}
    for lst in lists:
        seen = set()
        for rank, i in enumerate(lst, 1):
            if i in seen:
                continue
            seen.add(i)
            score[i] = score.get(i, 0.0) + 1.0 / (k + rank)
            best[i] = min(best.get(i, rank), rank)
    order = sorted(score, key=lambda i: (-score[i], best[i], i))
    return order, [score[i] for i in order]


ranked_list = st.one_of(
    st.lists(st.integers(-5, 20), max_size=8),
    st.lists(st.integers(-5, 20), max_size=8).map(lambda v: np.array(v, np.int64)),
    st.lists(st.integers(0, MAX_ID), max_size=4).map(lambda v: np.array(v, np.uint64)),
    st.lists(st.one_of(ints, st.booleans(), st.floats()), max_size=6),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6),
    hnp.arrays(st.one_of(int_dtypes, other_dtypes), st.integers(0, 6)),
    hnp.arrays(int_dtypes, st.sampled_from([(2, 2)])),
)


def predicted_list(lst: Any) -> list:
    if isinstance(lst, np.ndarray):
        if lst.dtype.kind not in "iu" or lst.ndim != 1:
            raise Invalid
        values = [int(v) for v in lst]
    else:
        if not all(is_int(v) for v in lst):
            raise Invalid
        values = [int(v) for v in lst]
    if any(not -(2**63) <= v <= MAX_ID for v in values):
        raise Invalid
    return values


@SETTINGS
@given(lists=st.lists(ranked_list, max_size=4))
def test_rrf_lists(lists: list) -> None:
    try:
        want: Optional[list] = [predicted_list(x) for x in lists]
    except Invalid:
        want = None
    result = outcome("rrf", want is not None, lambda: rrf(lists))
    if want is None:
        return
    ids, scores = result
    ref_ids, ref_scores = reference_rrf(want)
    assert ids.tolist() == ref_ids
    np.testing.assert_allclose(scores, np.array(ref_scores, np.float32), rtol=1e-6)

"""Search sizes: k beyond the index (padding) is bounded, so nq * k can neither wrap nor allocate without end.

Rule (Index.search, Index.knn_query, Index.search_mmr, FlatIndex.search): k may be at most
max(number of stored elements, 1024); results are padded to k with id -1 / score -inf, and a larger k is a
ValueError naming k. The cases that crashed or exhausted memory run in a child process.
"""
from __future__ import annotations

import numpy as np
import pytest

import medretrieve
from native_child import describe, run_python

DIM = 16
GIB = 1 << 30


@pytest.mark.parametrize(
    "make,nq,k",
    [
        ("f = medretrieve.FlatIndex('ip', 16); f.add(x)", 4, 2**62),
        ("f = medretrieve.Index('ip', 16); f.init_index(10); f.add(x)", 8, 2**61),
        ("f = medretrieve.Index('ip', 16); f.init_index(10, dtype='int8'); f.add(x)", 8, 2**61),
        ("f = medretrieve.Index('ip', 16); f.init_index(10, dtype='int8'); f.add(x)", 4, 2**62),
    ],
)
def test_k_whose_result_size_wraps_is_a_clean_error(make: str, nq: int, k: int) -> None:
    proc = run_python(
        f"""
        import numpy as np, medretrieve
        x = np.random.default_rng(0).random((10, 16), dtype=np.float32)
        {make}
        try:
            f.search(np.random.default_rng(1).random(({nq}, 16), dtype=np.float32), k={k})
        except ValueError as exc:
            print("ValueError:", exc)
        """,
        address_space=3 * GIB,
    )
    assert proc.returncode == 0, describe(proc)
    assert f"ValueError: k={k}" in proc.stdout, describe(proc)


@pytest.mark.parametrize(
    "call",
    [
        "idx.search(q, k=10**9)",
        "idx.knn_query(q, k=10**9)",
        "idx.search_mmr(q[0], k=10**9)",
        "idx.search_mmr(q[0], k=5, fetch_k=10**9)",
        "flat.search(q, k=10**9)",
    ],
)
def test_absurd_k_is_rejected_before_allocating(call: str) -> None:
    # Under a 3 GiB address space the padded result of k = 10**9 (12 GB per query) cannot be allocated: without
    # the bound this ends in MemoryError (or, unlimited, in the OOM killer).
    proc = run_python(
        f"""
        import numpy as np, medretrieve
        x = np.random.default_rng(0).random((20, 16), dtype=np.float32)
        q = np.random.default_rng(1).random((3, 16), dtype=np.float32)
        idx = medretrieve.Index('cosine', 16); idx.init_index(20); idx.add(x)
        flat = medretrieve.FlatIndex('cosine', 16); flat.add(x)
        try:
            {call}
        except ValueError as exc:
            print("ValueError:", exc)
        """,
        address_space=3 * GIB,
    )
    assert proc.returncode == 0, describe(proc)
    assert "ValueError:" in proc.stdout and "=1000000000" in proc.stdout, describe(proc)


def test_k_up_to_the_bound_is_padded() -> None:
    x = np.random.default_rng(2).random((20, DIM), dtype=np.float32)
    q = x[:3]
    idx = medretrieve.Index("l2", DIM)
    idx.init_index(20)
    idx.add(x)
    flat = medretrieve.FlatIndex("l2", DIM)
    flat.add(x)
    for ids, scores in (idx.search(q, 1024, ef=64), flat.search(q, 1024)):
        assert ids.shape == scores.shape == (3, 1024)
        assert (ids[:, :20] >= 0).all() and (ids[:, 20:] == -1).all()
        assert np.isfinite(scores[:, :20]).all() and np.isneginf(scores[:, 20:]).all()
        np.testing.assert_array_equal(ids[:, 0], [0, 1, 2])
    with pytest.raises(ValueError, match="k=1025"):
        idx.search(q, 1025)
    with pytest.raises(ValueError, match="k=1025"):
        flat.search(q, 1025)
    ids, _ = idx.search_mmr(q[0], k=1024, fetch_k=1024)
    assert sorted(ids.tolist()) == list(range(20))  # every element picked, no padding
    # A larger index raises the bound to its size.
    big = medretrieve.FlatIndex("ip", DIM)
    big.add(np.random.default_rng(3).random((1500, DIM), dtype=np.float32))
    assert big.search(q, 1500)[0].shape == (3, 1500)
    with pytest.raises(ValueError, match="k=1501"):
        big.search(q, 1501)


def test_components_beyond_1e15_are_rejected() -> None:
    """Vectors are finite and within +-1e15: beyond, inner products and squared distances overflow float32 and
    searches would return inf / NaN scores (and NaN breaks the result ordering)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((30, DIM)).astype(np.float32)
    idx = medretrieve.Index("ip", DIM)
    idx.init_index(40, dtype="int8", keep_float=True)
    flat = medretrieve.FlatIndex("ip", DIM)
    for target in (idx, flat):
        with pytest.raises(ValueError, match="within \\+-1e15"):
            target.add(x * 1e20)
        target.add(x * 1e14)
        with pytest.raises(ValueError, match="1e15"):
            target.search(x[:2] * 1e17, 3)
        ids, scores = target.search(x[:2] * 1e14, 3)
        assert np.isfinite(scores).all() and (ids >= 0).all()
    with pytest.raises(ValueError, match="1e15"):
        idx.search_mmr(x[0] * 1e17, 3)

"""The row filter's guarantee, as a hypothesis property over every path the planner may take: a search with
``allowed=`` returns ``min(k, allowed live rows)`` hits, each allowed and live, none twice, best first, padded with
-1 / -inf after them. Drawn: the index (int8 or float32; ids that are the slots or not; deleted rows or none), the
filter (random, the rows farthest from the query, or whole clusters farthest from it: walked, walked two-hop or
scanned, by sketches or exactly), its share (nothing, one row, fewer than k, up to everything), k, ef, and whether
it is passed as a bitset, a bool mask or a compiled filter."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import medretrieve
from medretrieve.index.allowed import NATIVE_BITSET
from medretrieve.index import pack_allowed
from index_data import embedding_like

pytestmark = pytest.mark.skipif(not NATIVE_BITSET, reason="the planner's paths need a core with native bitsets")

N, DIM, NQ, CLUSTERS = 6000, 32, 12, 40
SHARES = [0.0, 1 / N, 5 / N, 0.0005, 0.005, 0.02, 0.06, 0.1, 0.3, 0.5, 0.9, 1.0]


class Built:
    """One index and what a test must know of it: each row's external id, which rows are deleted, the rows'
    clusters and the similarity of every query to every row (float64)."""

    def __init__(self, space: str, dtype: str, custom_ids: bool, deleted_every: int) -> None:
        x, self.q = embedding_like(N, DIM, seed=31), embedding_like(NQ, DIM, seed=32)
        self.ids = np.arange(N) * 3 + 1000 if custom_ids else np.arange(N)
        self.index = medretrieve.Index(space, DIM)
        self.index.init_index(N, M=12, ef_construction=80, dtype=dtype)
        self.index.add(x, self.ids, num_threads=1)
        self.index.set_num_threads(1)
        self.live = np.ones(N, bool)
        if deleted_every:
            for row in range(0, N, deleted_every):
                self.index.mark_deleted(int(self.ids[row]))
            self.live[::deleted_every] = False
        x64, q64 = x.astype(np.float64), self.q.astype(np.float64)
        if space == "cosine":
            x64 /= np.linalg.norm(x64, axis=1, keepdims=True)
            q64 /= np.linalg.norm(q64, axis=1, keepdims=True)
        self.sim = -((q64[:, None, :] - x64[None, :, :]) ** 2).sum(-1) if space == "l2" else q64 @ x64.T
        centres = x64[np.random.default_rng(5).choice(N, CLUSTERS, replace=False)]  # nearest by L2: none empty
        self.cluster = np.argmin((x64 ** 2).sum(1)[:, None] - 2 * x64 @ centres.T + (centres ** 2).sum(1), axis=1)
        self.exact_scores = dtype == "float32"

    def rows(self, query: int, kind: str, share: float, seed: int) -> np.ndarray:
        """The rows (bool, by position) a filter of this kind and share keeps for this query."""
        count = int(round(share * N))
        keep = np.zeros(N, bool)
        if kind == "random":
            keep[np.random.default_rng(seed).permutation(N)[:count]] = True
        elif kind == "far":  # the rows farthest from the query: its neighbours are all filtered out
            keep[np.argsort(self.sim[query], kind="stable")[:count]] = True
        else:  # whole clusters, farthest from the query first, the last one cut: a filter set by topic
            mean = np.array([self.sim[query, self.cluster == c].mean() for c in range(CLUSTERS)])
            ranked = np.concatenate([np.flatnonzero(self.cluster == c) for c in np.argsort(mean)])
            keep[ranked[:count]] = True
        return keep


@pytest.fixture(scope="module")
def built() -> dict[str, Built]:
    return {
        "int8 ip": Built("ip", "int8", custom_ids=False, deleted_every=0),
        "int8 cosine, custom ids, deletions": Built("cosine", "int8", custom_ids=True, deleted_every=17),
        "float32 l2, deletions": Built("l2", "float32", custom_ids=False, deleted_every=29),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(["int8 ip", "int8 cosine, custom ids, deletions", "float32 l2, deletions"]),
    kind=st.sampled_from(["random", "far", "clusters"]),
    share=st.sampled_from(SHARES),
    query=st.integers(0, NQ - 1),
    k=st.integers(1, 40),
    ef=st.one_of(st.none(), st.integers(1, 300)),
    form=st.sampled_from(["bitset", "mask", "compiled"]),
    seed=st.integers(0, 2**16),
)
def test_a_filtered_search_returns_min_k_allowed_live_rows_best_first(
    built: dict[str, Built], which: str, kind: str, share: float, query: int, k: int, ef: Any, form: str, seed: int
) -> None:
    b = built[which]
    keep = b.rows(query, kind, share, seed)
    mask = np.zeros(int(b.ids.max()) + 1, bool)
    mask[b.ids[keep]] = True
    allowed: Any = {"bitset": pack_allowed(mask), "mask": mask}.get(form)
    if form == "compiled":
        allowed = b.index.compile_filter(mask)
    ids, scores = b.index.search(b.q[query], k, ef=ef, allowed=allowed)
    ids, scores = ids[0], scores[0]

    passing = keep & b.live
    hits = min(k, int(passing.sum()))
    assert (ids[hits:] == -1).all() and np.isneginf(scores[hits:]).all()
    found = ids[:hits]
    assert len(set(found.tolist())) == hits, "a row returned twice"
    position = {int(e): r for r, e in enumerate(b.ids)}
    rows = np.array([position.get(int(e), -1) for e in found], dtype=np.int64)
    assert (rows >= 0).all() and passing[rows].all(), "a row that fails the filter or is deleted"
    assert (np.diff(scores[:hits]) <= 1e-6).all(), "not best first"
    if b.exact_scores:
        np.testing.assert_allclose(scores[:hits], b.sim[query, rows], rtol=1e-4, atol=1e-4)
    if hits == int(passing.sum()):
        assert set(rows.tolist()) == set(np.flatnonzero(passing).tolist())

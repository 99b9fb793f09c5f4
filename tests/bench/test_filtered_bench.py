"""bench/filtered.py's own pieces: the filters keep the share asked for, a correlated filter's rows lie farther from
the query than a random filter's, the reference is the exact filtered top k, a cell reports a library that never
reaches the recall target with its best recall instead of a speed; the database peers (LanceDB, Chroma; skipped
where not installed) search inside the same rows through their own predicates, and the script prints its table with
every library available."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bench_scripts import BENCH, load_bench_script


@pytest.fixture(scope="module")
def bench():
    return load_bench_script("filtered")


def _data(n: int = 3000, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((12, dim))
    x = centres[rng.integers(0, 12, n)] + 0.3 * rng.standard_normal((n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.choice(n, 5, replace=False)] + 0.01
    return x.astype(np.float32), (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def test_filters_keep_the_share_and_correlated_ones_lie_far(bench) -> None:
    x, q = _data()
    owner, centres = bench.cluster_of(x, 30)
    fields = bench.row_fields(owner)
    for share in (0.5, 0.1, 0.01):
        random = list(bench.filters(q, share, "random", fields, centres))
        far = list(bench.filters(q, share, "correlated", fields, centres))
        for query, r, f in zip(q, random, far):
            assert r.mask.sum() == f.mask.sum() == round(share * len(x))
            assert (x[f.mask] @ query).mean() < (x[r.mask] @ query).mean()  # inner product: lower is farther


def test_row_fields_number_each_cluster_from_zero_in_row_order(bench) -> None:
    owner = np.array([2, 0, 2, 1, 0, 2])
    fields = bench.row_fields(owner)
    assert fields.slot.tolist() == [0, 0, 1, 0, 1, 2]
    assert sorted(fields.rank.tolist()) == list(range(6))


def test_the_predicate_keeps_the_rows_of_the_mask(bench) -> None:
    """The SQL and the where document the databases get select the rows the others get as a bitset, evaluated here
    on the fields (a numpy reading of the same predicate; the databases' own reading is tested below)."""
    x, q = _data()
    owner, centres = bench.cluster_of(x, 30)
    fields = bench.row_fields(owner)
    for share in (0.5, 0.01):
        for kind in ("random", "correlated"):
            for f in bench.filters(q, share, kind, fields, centres):
                if f.rank_below is not None:
                    kept = fields.rank < f.rank_below
                else:
                    kept = np.isin(fields.cluster, f.clusters)
                    if f.partial is not None:
                        kept |= (fields.cluster == f.partial[0]) & (fields.slot < f.partial[1])
                assert (kept == f.mask).all()
                assert f.sql() and f.where()


def test_reference_is_the_exact_filtered_top_k(bench) -> None:
    x, q = _data()
    mask = np.arange(len(x)) % 3 == 0
    top = bench.exact_filtered(x, q[0], mask)
    assert mask[top].all() and len(top) == bench.K
    sims = x @ q[0]
    assert sims[top].min() >= sims[mask][np.argsort(-sims[mask])[bench.K - 1]]


def test_answer_depth_is_the_last_answers_place_among_all_rows(bench) -> None:
    x = np.zeros((12, 4), np.float32)
    x[np.arange(12), np.arange(12) % 4] = np.arange(12, 0, -1)  # row i: 12 - i along axis i % 4
    q = np.array([[1, 0, 0, 0], [1, 0, 0, 0]], np.float32)  # rows 0, 4, 8 point along the query, in that order
    truths = [np.array([0]), np.array([8])]  # the nearest row; the third along the query (past 0 and 4)
    assert bench.answer_depth(q @ x.T, truths) == "2 / 3"


def test_a_library_below_the_target_reports_its_best_recall(bench) -> None:
    class Blind(bench.Lib):
        name = "blind"

        def one(self, q, ef, allowed):
            return np.full(bench.K, -1, np.int64)

    x, q = _data()
    truths = [bench.exact_filtered(x, query, np.ones(len(x), bool)) for query in q]
    assert bench.cells([Blind()], q, [None] * len(q), truths, [16, 32], budget_s=5) == ["- (best 0.000 to ef 32)"]
    # a budget spent on the first ef ends the sweep there, and the cell says so
    assert bench.cells([Blind()], q, [None] * len(q), truths, [16, 32], budget_s=0) == ["- (best 0.000 to ef 16)"]


def test_a_rows_libraries_are_timed_in_turn_at_their_own_ef(bench, monkeypatch) -> None:
    """Each library is timed at the cheapest ef reaching the target (found first, by recall alone); the timed rounds
    take the libraries in turn, the order rotated, so that a box's drift moves them alike."""
    x, q = _data()
    truths = [bench.exact_filtered(x, query, np.ones(len(x), bool)) for query in q]
    timed: list[tuple[str, int]] = []

    class Exact(bench.Lib):
        """Exact from ``good_from`` on, blind below; records (name, ef) of each call after its sweep."""

        def __init__(self, name: str, good_from: int) -> None:
            self.name, self.good_from, self.swept = name, good_from, False

        def one(self, query, ef, allowed):
            if self.swept:
                timed.append((self.name, ef))
            if ef < self.good_from:
                return np.full(bench.K, -1, np.int64)
            return bench.exact_filtered(x, query, np.ones(len(x), bool))

    real_sweep = bench.sweep

    def sweep_then_mark(lib, *args):
        found = real_sweep(lib, *args)
        lib.swept = True
        return found

    monkeypatch.setattr(bench, "sweep", sweep_then_mark)
    row = bench.cells([Exact("a", 16), Exact("b", 32)], q, [None] * len(q), truths, [10, 16, 32], budget_s=5)
    assert [re.match(r"[\d,]+ \(1\.000, ef (\d+), ", c).group(1) for c in row] == ["16", "32"]
    assert set(timed) == {("a", 16), ("b", 32)}  # each at its own ef, nothing else
    # rounds of 2 x len(q) calls of one library (its queries untimed, then timed), "a" first, then "b" first, ...
    blocks = [timed[i:i + 2 * len(q)] for i in range(0, len(timed), 2 * len(q))]
    assert all(len({name for name, _ in block}) == 1 for block in blocks)
    assert [block[0][0] for block in blocks] == (["a", "b", "b", "a"] * bench.ROUNDS)[:2 * bench.ROUNDS]
    # a library whose pass takes SLOW_ROUND_S or more runs that one pass: it is its round
    timed.clear()
    monkeypatch.setattr(bench, "SLOW_ROUND_S", 0.0)
    bench.cells([Exact("a", 16), Exact("b", 32)], q, [None] * len(q), truths, [10, 16, 32], budget_s=5)
    assert [name for name, _ in timed] == ["a"] * len(q) + ["b"] * len(q)


@pytest.fixture(scope="module")
def small(bench):
    x, q = _data(n=2000)
    owner, centres = bench.cluster_of(x, 20)
    return x, q, bench.row_fields(owner), centres


def _peer(bench, name: str, x, fields):
    if name == "lancedb":
        pytest.importorskip("lancedb")
        return bench.LanceDB(x, fields, M=16, efc=100)
    pytest.importorskip("chromadb")
    return bench.Chroma(x, fields, M=16, efc=100, threads=1)


@pytest.mark.parametrize("name", ["lancedb", "chroma"])
def test_a_database_peer_searches_inside_its_filter_and_cleans_up(bench, small, name: str) -> None:
    """Each database's own filtered search returns only rows its predicate keeps (the same rows as the mask), finds
    the exact filtered top 10 at a generous ef, and its temporary directory is gone after close()."""
    x, q, fields, centres = small
    lib = _peer(bench, name, x, fields)
    try:
        assert lib.one(q[0], 64, lib.prepare(None)).tolist() == bench.exact_filtered(x, q[0], np.ones(len(x), bool)
                                                                                     ).tolist()
        for share, kind in ((0.1, "random"), (0.1, "correlated"), (0.003, "correlated")):
            hits = want = 0
            for query, f in zip(q, bench.filters(q, share, kind, fields, centres)):
                found = lib.one(query, 256, lib.prepare(f))
                truth = bench.exact_filtered(x, query, f.mask)
                assert f.mask[found[found >= 0]].all(), (kind, share, f.sql())
                hits += len(set(found.tolist()) & set(truth.tolist()))
                want += len(truth)
            assert hits / want >= bench.TARGET, (kind, share, hits / want)
    finally:
        lib.close()
    assert not Path(lib.dir).exists()


def test_the_script_prints_a_row_per_filter_for_each_available_library(bench, tmp_path) -> None:
    libs = ["medretrieve", "medretrieve-int8", "hnswlib", "faiss", "faiss-sq8", "lancedb", "chroma"]
    available = [name for name in libs if importlib.util.find_spec(bench.NEEDS[name]) is not None]
    run = subprocess.run(
        [sys.executable, str(BENCH / "filtered.py"), "--n", "2000", "--dim", "16", "--nq", "5", "--efs", "16,128",
         "--shares", "0.1,0.005", "--budget", "5", "--libs", ",".join(available)],
        check=False, capture_output=True, text=True, timeout=600,
        env={**os.environ, "MEDRETRIEVE_BENCH_CACHE": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")]
    header, body = rows[0], rows[1:]
    assert header.count("|") == len(available) + 3 and header.endswith("| 10th answer's unfiltered rank |")
    assert [r.split(" | ")[0] for r in body] == [
        "| none", "| 10.00% random", "| 10.00% correlated", "| 0.50% random", "| 0.50% correlated"]
    cell = re.compile(r"^([\d,]+ \(\d\.\d{3}, ef \d+, [\d.]+/[\d.]+\)|- \(best \d\.\d{3} to ef \d+\))$")
    depth = re.compile(r"^[\d,]+ / [\d,]+$")
    for row in body:
        *cells, where = row.strip("| ").split(" | ")[1:]
        assert len(cells) == len(available) and all(cell.match(c) for c in cells), row
        assert depth.match(where), row
    assert body[0].endswith("| 10 / 10 |")  # unfiltered, the 10th answer is the 10th row


def test_a_named_data_shape_is_searched_and_described(tmp_path) -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH / "filtered.py"), "--shape", "uniform-32d", "--n", "1500", "--nq", "4",
         "--efs", "16", "--shares", "0.1", "--budget", "5", "--libs", "medretrieve"],
        check=False, capture_output=True, text=True, timeout=300,
        env={**os.environ, "MEDRETRIEVE_BENCH_CACHE": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "uniform-32d (latent=32, clusters=1, centre_scale=0.0, offset=0.0) 1500x" in run.stdout
    assert [line.split(" | ")[0] for line in run.stdout.splitlines() if line.startswith("| ")][1:] == [
        "| none", "| 10.00% random", "| 10.00% correlated"]
    unknown = subprocess.run([sys.executable, str(BENCH / "filtered.py"), "--shape", "nope"],
                             check=False, capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "invalid choice: 'nope'" in unknown.stderr


def test_a_missing_or_unknown_library_is_named(bench, monkeypatch) -> None:
    with pytest.raises(SystemExit, match="unknown library 'nope'"):
        bench.chosen_libs("medretrieve,nope")
    monkeypatch.setitem(bench.NEEDS, "faiss", "no_such_module_for_the_test")
    with pytest.raises(SystemExit, match="'no_such_module_for_the_test' is not installed"):
        bench.chosen_libs("faiss")


@pytest.mark.parametrize("name", ["lancedb", "chroma"])
def test_a_database_peers_ef_changes_its_search(bench, name: str) -> None:
    """The ef the sweep sets reaches the database's HNSW: on hard data (random 64-d) ef 10 finds fewer true
    neighbours than ef 300 (Chroma keeps the ef it loaded a collection with unless it is opened again)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5000, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = rng.standard_normal((20, 64)).astype(np.float32)
    lib = _peer(bench, name, x, bench.row_fields(np.zeros(len(x), np.int32)))
    try:
        truths = [bench.exact_filtered(x, query, np.ones(len(x), bool)) for query in q]
        # ef 10 measured again last: the sweep going back down (next cell) must take effect too
        prepared = lib.prepare_all([None] * len(q))
        recall = {ef: bench.recall_at(lib, q, prepared, truths, ef) for ef in (10, 300, 10)}
    finally:
        lib.close()
    assert recall[10] < recall[300] - 0.1, recall

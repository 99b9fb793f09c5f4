"""Index persistence: versioned file, atomic save, copy and mmap loads, damaged files, pickling."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

import medretrieve
from index_data import embedding_like

DIM = 24


def make_index(dtype: str = "int8", keep_float: bool = False) -> tuple[medretrieve.Index, np.ndarray]:
    x = embedding_like(800, DIM, seed=21)
    idx = medretrieve.Index("cosine", DIM)
    idx.init_index(1000, M=10, ef_construction=60, allow_replace_deleted=True, dtype=dtype, keep_float=keep_float)
    idx.add(x, ids=np.arange(5000, 5800), labels=[[i % 7, 90 + i % 2] for i in range(800)])
    idx.mark_deleted(5003)
    idx.set_ef(40)
    return idx, x


@pytest.mark.parametrize("dtype,keep_float", [("float32", False), ("int8", False), ("int8", True)])
def test_round_trip_copy_and_mmap(tmp_path, dtype: str, keep_float: bool) -> None:
    idx, x = make_index(dtype, keep_float)
    q = embedding_like(10, DIM, seed=22)
    want = idx.search(q, 8, labels=[91])
    want_all = idx.search(q, 8)
    path = tmp_path / "a.mdr"
    idx.save(path)
    assert sorted(os.listdir(tmp_path)) == ["a.mdr"]  # no temporary left behind
    for mmap in (False, True):
        got = medretrieve.Index.load(path, mmap=mmap)
        s = got.stats()
        assert (s.count, s.deleted, s.ef, s.dtype, s.M, s.max_elements) == (800, 1, 40, dtype, 10, 800 if mmap else 1000)
        assert s.read_only == mmap and s.keep_float == keep_float
        for a, b in zip(got.search(q, 8, labels=[91]), want):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(got.search(q, 8), want_all):
            np.testing.assert_array_equal(a, b)
        assert got.labels_of(5010) == idx.labels_of(5010)
        np.testing.assert_array_equal(got.get_items([5001]), idx.get_items([5001]))
    ro = medretrieve.Index.load(path, mmap=True)
    for mutate in (
        lambda: ro.add(x[:1], ids=[1]),
        lambda: ro.mark_deleted(5001),
        lambda: ro.unmark_deleted(5003),
        lambda: ro.resize_index(5000),
        lambda: ro.add_items(x[:1], ids=[5001]),
    ):
        with pytest.raises(RuntimeError, match="read-only memory-mapped"):
            mutate()
    # A copy load is mutable and keeps the deleted-slot bookkeeping.
    rw = medretrieve.Index.load(path)
    rw.add_items(x[3], ids=[9], replace_deleted=True)
    assert rw.element_count == 800 and 9 in rw.get_ids_list()


@pytest.mark.parametrize("dtype,keep_float", [("float32", False), ("int8", False), ("int8", True)])
def test_streamed_save_writes_the_snapshot_bytes(tmp_path, dtype: str, keep_float: bool) -> None:
    """save(snapshot=False) streams the file from the index (no copy in memory): byte for byte the snapshot's."""
    idx, x = make_index(dtype, keep_float)
    idx.save(tmp_path / "snapshot.mdr")
    idx.save(tmp_path / "streamed.mdr", snapshot=False)
    assert sorted(os.listdir(tmp_path)) == ["snapshot.mdr", "streamed.mdr"]
    assert (tmp_path / "snapshot.mdr").read_bytes() == (tmp_path / "streamed.mdr").read_bytes()
    got = medretrieve.Index.load(tmp_path / "streamed.mdr", mmap=True)
    for a, b in zip(got.search(x[:5], 8), idx.search(x[:5], 8)):
        np.testing.assert_array_equal(a, b)
    empty = medretrieve.Index("ip", 3)
    empty.init_index(0)
    empty.save(tmp_path / "empty.mdr", snapshot=False)
    assert medretrieve.Index.load(tmp_path / "empty.mdr").element_count == 0


def test_hnswlib_style_load_index_with_max_elements(tmp_path) -> None:
    idx, _ = make_index()
    idx.save_index(str(tmp_path / "b.mdr"))
    other = medretrieve.Index("cosine", DIM)
    other.load_index(str(tmp_path / "b.mdr"), max_elements=2000)
    assert other.max_elements == 2000 and other.element_count == 800
    wrong = medretrieve.Index("l2", DIM)
    with pytest.raises(ValueError, match="space"):
        wrong.load_index(str(tmp_path / "b.mdr"))


def test_damaged_files_raise_clear_errors(tmp_path) -> None:
    idx, _ = make_index("float32")
    path = tmp_path / "c.mdr"
    idx.save(path)
    data = path.read_bytes()
    cases = {
        "truncated": data[: len(data) // 2],
        "truncated-header": data[:20],
        "empty": b"",
        "corrupt": data[:3000] + bytes([data[3000] ^ 0xFF]) + data[3001:],
        "foreign": b"\x89PNG\r\n\x1a\n" + data[8:],
        "newer": data[:8] + (7).to_bytes(4, "little") + data[12:],
    }
    expect = {"truncated": "truncated", "corrupt": "checksum", "foreign": "not a medretrieve", "newer": "newer"}
    for name, blob in cases.items():
        bad = tmp_path / f"{name}.mdr"
        bad.write_bytes(blob)
        for mmap in (False, True):
            with pytest.raises((ValueError, RuntimeError)) as err:
                medretrieve.Index.load(bad, mmap=mmap)
            if name in expect:
                assert expect[name] in str(err.value), (name, str(err.value))
    with pytest.raises(RuntimeError, match="cannot open"):
        medretrieve.Index.load(tmp_path / "missing.mdr")


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "index_v1"


@pytest.mark.parametrize("mmap", [False, True])
def test_version_1_files_still_load(tmp_path, mmap: bool) -> None:
    """A file of format version 1 (before prune_alpha; written by the build of 2026-12-01: 300 unit rows, ids
    1000.., int8 inner product, M=8) loads as built, with hnswlib's rule (alpha 1), and keeps it when extended."""
    rows = np.load(FIXTURES / "rows.npy")
    assert (FIXTURES / "hnsw_int8_ip.mdr").read_bytes()[8] == 1  # the format version this test is about
    idx = medretrieve.Index.load(FIXTURES / "hnsw_int8_ip.mdr", mmap=mmap)
    assert (len(idx), idx.dtype, idx.M, idx.stats().prune_alpha) == (300, "int8", 8, 1.0)
    ids, _ = idx.search(rows, 1)
    assert np.mean(ids[:, 0] == np.arange(1000, 1300)) >= 0.99
    if mmap:
        return
    assert idx.stats().link_bits == 32  # its u32 level-0 ids, kept as they are
    idx.add(-rows[:20], ids=np.arange(2000, 2020))
    idx.save(tmp_path / "v3.mdr")
    again = medretrieve.Index.load(tmp_path / "v3.mdr")
    assert (tmp_path / "v3.mdr").read_bytes()[8] == 3
    assert (len(again), again.stats().prune_alpha, again.stats().link_bits) == (320, 1.0, 32)
    ids, _ = again.search(rows, 1)
    assert np.mean(ids[:, 0] == np.arange(1000, 1300)) >= 0.99


def test_pickle_round_trip() -> None:
    idx, x = make_index()
    q = embedding_like(5, DIM, seed=23)
    idx.set_num_threads(1)
    clone = pickle.loads(pickle.dumps(idx))
    for a, b in zip(clone.search(q, 5, labels=[3]), idx.search(q, 5, labels=[3])):
        np.testing.assert_array_equal(a, b)
    assert clone.num_threads == 1 and clone.ef == 40
    blank = pickle.loads(pickle.dumps(medretrieve.Index("ip", DIM)))
    assert blank.element_count == 0

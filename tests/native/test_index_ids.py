"""Ids: one rule everywhere. Ids are integers in [0, 2**63 - 1]: search returns them as int64 with -1 as
padding, so a larger id could only come back negative (2**64 - 1 would read as the padding). Non-integer ids
(floats, even integral-valued ones, bools, objects) are a TypeError; Python ints of any size are converted
exactly (never through float64)."""
from __future__ import annotations

import numpy as np
import pytest

import medretrieve
from medretrieve import fuse_scores, rrf

DIM = 8
TOP = 2**63 - 1


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, DIM), dtype=np.float32) + 0.1


def hnsw(allow_replace_deleted: bool = False) -> medretrieve.Index:
    idx = medretrieve.Index("l2", DIM)
    idx.init_index(50, allow_replace_deleted=allow_replace_deleted)
    return idx


ADDERS = {
    "Index.add": lambda ids: hnsw().add(rows(len(ids)), ids=ids),
    "Index.add_items": lambda ids: hnsw().add_items(rows(len(ids)), ids),
    "FlatIndex.add": lambda ids: medretrieve.FlatIndex("l2", DIM).add(rows(len(ids)), ids=ids),
}


def replace_deleted(ids: list) -> None:
    idx = hnsw(allow_replace_deleted=True)
    idx.add_items(rows(4))
    idx.mark_deleted(1)
    idx.mark_deleted(2)
    idx.add_items(rows(len(ids), seed=1), ids, replace_deleted=True)


ADDERS["Index.add_items(replace_deleted)"] = replace_deleted


@pytest.mark.parametrize("adder", sorted(ADDERS))
@pytest.mark.parametrize(
    "ids",
    [
        np.array([2**64 - 1, 5], np.uint64),
        np.array([2**63, 5], np.uint64),
        [2**63, 5],
        [2**64 - 1, 5],
        [2**70, 5],
    ],
    ids=["u64-max", "u64-2^63", "list-2^63", "list-u64-max", "list-2^70"],
)
def test_ids_beyond_int64_are_rejected(adder: str, ids: object) -> None:
    with pytest.raises(ValueError, match=r"2\*\*63"):
        ADDERS[adder](ids)


@pytest.mark.parametrize("adder", sorted(ADDERS))
@pytest.mark.parametrize(
    "ids,what",
    [
        (np.array([2.0**53 + 1, 7.0]), "float64"),
        (np.array([3.0, 4.0], np.float32), "float32"),
        ([3.0, 4.0], "float"),
        ([3, 4.0], "float"),
        (np.array([True, False]), "bool"),
        ([True, False], "bool"),
        ([3, True], "bool"),  # NumPy converts it to int64 [3, 1]: hypothesis found it accepted
        ((3, np.True_), "bool"),
        (np.array([3, 4], dtype=object), "object"),
        (["3", "4"], "str"),
        ("", "str"),  # iterable, and empty: it once passed as zero ids for zero rows
        (b"", "bytes"),
    ],
)
def test_non_integer_ids_are_rejected(adder: str, ids: object, what: str) -> None:
    with pytest.raises(TypeError, match="ids must be integers") as err:
        ADDERS[adder](ids)
    assert what in str(err.value)


@pytest.mark.parametrize("cls", ["Index", "FlatIndex"])
def test_large_python_ints_are_stored_exactly(cls: str) -> None:
    ids = [TOP, 2**62 + 1, 2**53 + 1, 0]
    x = rows(4, seed=5)
    if cls == "Index":
        idx: object = hnsw()
        idx.add(x, ids=ids)  # type: ignore[attr-defined]
    else:
        idx = medretrieve.FlatIndex("l2", DIM)
        idx.add(x, ids=ids)  # type: ignore[attr-defined]
    assert sorted(idx.get_ids_list()) == sorted(ids)  # type: ignore[attr-defined]
    found, _ = idx.search(x, 1)  # type: ignore[attr-defined]
    assert found.dtype == np.int64
    assert found[:, 0].tolist() == ids
    idx.mark_deleted(TOP)  # type: ignore[attr-defined]
    assert TOP not in idx.search(x, 4)[0]  # type: ignore[attr-defined]


def test_ids_for_lookups_follow_the_same_rule() -> None:
    idx = hnsw()
    idx.add(rows(3), ids=[1, 2, TOP])
    with pytest.raises(TypeError, match="integer"):
        idx.mark_deleted(2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="integer"):
        idx.get_items([1.0])
    with pytest.raises(ValueError, match=r"2\*\*63"):
        idx.mark_deleted(2**64 - 1)
    idx.mark_deleted(np.uint64(TOP))
    assert idx._c().is_deleted(TOP)
    assert idx.get_items([1, 2]).shape == (2, DIM)


@pytest.mark.parametrize("fuse", ["rrf", "fuse_scores"])
def test_fusion_rejects_ids_beyond_int64(fuse: str) -> None:
    lists = [np.array([2**64 - 1, 5], np.uint64)]
    with pytest.raises(ValueError, match="int64"):
        if fuse == "rrf":
            rrf(lists)
        else:
            fuse_scores(lists, [[1.0, 0.5]])
    # uint64 ids inside int64 range are fine and come back unchanged.
    ids, _ = rrf([np.array([TOP, 5], np.uint64), [5]])
    assert ids.tolist() == [5, TOP]

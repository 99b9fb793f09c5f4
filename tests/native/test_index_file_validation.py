"""Loading validates what a search will trust, for any file however produced: the damage below keeps the
envelope intact (checksum recomputed), so only the loader's deeper checks stand between it and a search.

Before these checks, the HNSW case loaded and then crashed on search (copy and mmap loads alike), so it runs in a
child process; the flat case loaded and returned NaN scores.
"""
from __future__ import annotations

import numpy as np
import pytest

import medretrieve
from mdr_file import IndexFile, checksum64
from native_child import describe, run_python

DIM = 8


def test_python_checksum_matches_the_native_one(tmp_path) -> None:
    idx = medretrieve.FlatIndex("ip", DIM)
    idx.add(np.ones((3, DIM), np.float32))
    idx.save(tmp_path / "f.mdr")
    data = (tmp_path / "f.mdr").read_bytes()
    assert checksum64(data[:-8]) == int.from_bytes(data[-8:], "little")


def upper_link_to_a_level0_element(tmp_path, dtype: str) -> tuple[str, np.ndarray]:
    """An index whose level-1 links all point at one element that has no level 1."""
    x = np.random.default_rng(0).standard_normal((400, DIM)).astype(np.float32)
    idx = medretrieve.Index("l2", DIM)
    idx.init_index(400, M=4, ef_construction=40, dtype=dtype)
    idx.add(x)
    idx.save(tmp_path / "good.mdr")
    f = IndexFile.read(tmp_path / "good.mdr")
    levels = f.array("levels", "u1")
    upper = f.array("upper", "<u4")
    M = int(f.header["M"])
    j = int(np.flatnonzero(levels == 0)[0])
    at, changed = 0, 0
    for level in levels.tolist():
        if level:  # the element's level-1 block: [count][M ids]
            if upper[at]:
                upper[at + 1:at + 1 + upper[at]] = j
                changed += 1
            at += level * (M + 1)
    assert changed > 0
    path = tmp_path / f"bad-{dtype}.mdr"
    f.write(path)
    return str(path), x[j]


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_upper_link_to_an_element_absent_from_that_level(tmp_path, dtype: str) -> None:
    path, target = upper_link_to_a_level0_element(tmp_path, dtype)
    proc = run_python(
        f"""
        import numpy as np, medretrieve
        q = np.array({target.tolist()!r}, np.float32)[None, :]
        for mmap in (False, True):
            try:
                idx = medretrieve.Index.load({path!r}, mmap=mmap)
                idx.search(np.repeat(q, 20, axis=0) + np.linspace(0, 1, 20, dtype=np.float32)[:, None], 5)
                print("loaded and searched", mmap)
            except ValueError as exc:
                print("ValueError:", exc)
        """
    )
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.count("ValueError:") == 2, describe(proc)
    assert "link" in proc.stdout and "level" in proc.stdout, describe(proc)


def test_flat_file_with_non_finite_scale_is_refused(tmp_path) -> None:
    idx = medretrieve.FlatIndex("ip", DIM, dtype="int8")
    idx.add(np.random.default_rng(1).standard_normal((50, DIM)).astype(np.float32))
    idx.save(tmp_path / "good.mdr")
    f = IndexFile.read(tmp_path / "good.mdr")
    stride = int(f.header["stride"])
    slabs = f.array("slabs", "u1")
    # The scale is the f32 after the u32 header and the u64 label signature (no link slots in a flat slab).
    slabs[5 * stride + 16:5 * stride + 20] = np.frombuffer(np.float32(np.nan).tobytes(), "u1")
    f.write(tmp_path / "bad.mdr")
    for mmap in (False, True):
        with pytest.raises(ValueError, match="scale"):
            medretrieve.FlatIndex.load(tmp_path / "bad.mdr", mmap=mmap)


def test_entry_point_must_hold_the_top_level(tmp_path) -> None:
    x = np.random.default_rng(2).standard_normal((300, DIM)).astype(np.float32)
    idx = medretrieve.Index("ip", DIM)
    idx.init_index(300, M=4)
    idx.add(x)
    idx.save(tmp_path / "good.mdr")
    f = IndexFile.read(tmp_path / "good.mdr")
    levels = f.array("levels", "u1")
    low = int(np.flatnonzero(levels == 0)[0])
    f.set_header(entry_point=low, max_level=0)  # consistent with itself, not with the levels
    f.write(tmp_path / "bad.mdr")
    for mmap in (False, True):
        with pytest.raises(ValueError, match="entry point|max level"):
            medretrieve.Index.load(tmp_path / "bad.mdr", mmap=mmap)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 3.0, float("nan")])
def test_prune_alpha_out_of_range_is_refused(tmp_path, alpha: float) -> None:
    idx = medretrieve.Index("l2", DIM)
    idx.init_index(100, M=4)
    idx.add(np.random.default_rng(3).standard_normal((50, DIM)).astype(np.float32))
    idx.save(tmp_path / "good.mdr")
    f = IndexFile.read(tmp_path / "good.mdr")
    assert f.header["prune_alpha"] == pytest.approx(1.05)
    f.set_header(prune_alpha=alpha)
    f.write(tmp_path / "bad.mdr")
    for mmap in (False, True):
        with pytest.raises(ValueError, match="prune_alpha"):
            medretrieve.Index.load(tmp_path / "bad.mdr", mmap=mmap)

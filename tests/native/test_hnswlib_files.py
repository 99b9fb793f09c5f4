"""Index files written by hnswlib itself open in ``medretrieve.Index.load_index`` and convert with
``medretrieve convert-hnswlib``: every space, with and without deletions, with ``allow_replace_deleted``; they
search to the same labels as hnswlib's ``knn_query`` (small data, ef above the count: both exact)."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

import medretrieve
from medretrieve.cli import main as cli_main

hnswlib = pytest.importorskip("hnswlib")

DIM, N, EF = 12, 300, 400
SPACES = ("l2", "ip", "cosine")


def _data(seed: int = 0, n: int = N) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def _hnswlib_file(path: Path, space: str, deletions: str) -> "hnswlib.Index":
    """An hnswlib index saved to ``path``: labels 1000..; ``deletions``: "none", "marked" (every 7th element) or
    "replaced" (every 7th marked, then half of those slots reused by new labels through allow_replace_deleted)."""
    ref = hnswlib.Index(space=space, dim=DIM)
    ref.init_index(max_elements=N + 50, M=16, ef_construction=200, random_seed=7,
                   allow_replace_deleted=deletions == "replaced")
    ref.add_items(_data(), np.arange(N) + 1000)
    if deletions != "none":
        for label in range(1000, 1000 + N, 7):
            ref.mark_deleted(label)
    if deletions == "replaced":
        ref.add_items(_data(1, 20), np.arange(20) + 5000, replace_deleted=True)
    ref.set_ef(EF)
    ref.save_index(str(path))
    return ref


def _assert_same_answers(ref: "hnswlib.Index", ours: medretrieve.Index, space: str) -> None:
    ours.set_ef(EF)
    queries = _data(2, 25)
    want_labels, want_dist = ref.knn_query(queries, k=10)
    got_labels, got_dist = ours.knn_query(queries, k=10)
    np.testing.assert_array_equal(got_labels, want_labels)
    np.testing.assert_allclose(got_dist, want_dist, rtol=1e-4, atol=1e-4)
    assert sorted(ours.get_ids_list()) == sorted(ref.get_ids_list())
    live = sorted(set(ref.get_ids_list()) - set(_deleted(ref)))
    assert len(ours) == len(live)
    np.testing.assert_allclose(ours.get_items(live), ref.get_items(live), atol=1e-6)
    assert ours.space == space and ours.dtype == "float32"


def _deleted(ref: "hnswlib.Index") -> list:
    """hnswlib's deleted labels: those ``get_items`` refuses."""
    out = []
    for label in ref.get_ids_list():
        try:
            ref.get_items([label])
        except RuntimeError:
            out.append(label)
    return out


@pytest.mark.parametrize("deletions", ["none", "marked", "replaced"])
@pytest.mark.parametrize("space", SPACES)
def test_an_hnswlib_file_loads_and_searches_as_hnswlib(tmp_path: Path, space: str, deletions: str) -> None:
    ref = _hnswlib_file(tmp_path / "h.bin", space, deletions)
    ours = medretrieve.Index(space=space, dim=DIM)
    ours.load_index(str(tmp_path / "h.bin"), allow_replace_deleted=deletions == "replaced")
    _assert_same_answers(ref, ours, space)
    assert ours.stats().deleted == len(_deleted(ref)) == {"none": 0, "marked": 43, "replaced": 23}[deletions]
    stats = ours.stats()
    assert (stats.M, stats.ef_construction, stats.max_elements) == (16, 200, N + 50)
    if deletions == "replaced":  # the setting applies from now on, as hnswlib's load_index
        ours.add_items(_data(3, 1), [9000], replace_deleted=True)
        assert ours.element_count == stats.count


def test_max_elements_and_int8_storage(tmp_path: Path) -> None:
    ref = _hnswlib_file(tmp_path / "h.bin", "cosine", "marked")
    ours = medretrieve.Index(space="cosine", dim=DIM)
    ours.load_index(tmp_path / "h.bin", max_elements=2000, dtype="int8")
    assert ours.max_elements == 2000 and ours.dtype == "int8"
    ours.set_ef(EF)
    got, _ = ours.knn_query(_data(2, 25), k=10)
    want, _ = ref.knn_query(_data(2, 25), k=10)
    assert np.mean([len(set(g) & set(w)) / 10 for g, w in zip(got, want)]) >= 0.9  # int8: near, not equal
    assert not set(got.ravel()) & set(_deleted(ref))


def test_an_empty_hnswlib_file_loads(tmp_path: Path) -> None:
    ref = hnswlib.Index(space="l2", dim=DIM)
    ref.init_index(max_elements=10)
    ref.save_index(str(tmp_path / "empty.bin"))
    ours = medretrieve.Index(space="l2", dim=DIM)
    ours.load_index(tmp_path / "empty.bin")
    assert (ours.element_count, ours.max_elements) == (0, 10)


def test_the_converter_writes_a_medretrieve_file(tmp_path: Path, capsys) -> None:
    ref = _hnswlib_file(tmp_path / "h.bin", "ip", "marked")
    out = tmp_path / "converted.mdr"
    assert cli_main(["convert-hnswlib", str(tmp_path / "h.bin"), str(out), "--space", "ip", "--dim", str(DIM)]) == 0
    assert "300 elements (43 deleted)" in capsys.readouterr().out
    _assert_same_answers(ref, medretrieve.Index.load(out), "ip")
    assert cli_main(["convert-hnswlib", str(tmp_path / "h.bin"), str(out), "--space", "ip", "--dim", "3"]) == 2
    assert "exists (give --overwrite" in capsys.readouterr().err
    assert cli_main(["convert-hnswlib", str(tmp_path / "h.bin"), str(out), "--space", "ip", "--dim", "3",
                     "--overwrite"]) == 2
    assert f"holds vectors of dim {DIM}, this Index has dim=3" in capsys.readouterr().err


def test_files_of_neither_format_and_wrong_dims_are_clear_errors(tmp_path: Path) -> None:
    _hnswlib_file(tmp_path / "h.bin", "l2", "none")
    with pytest.raises(ValueError, match=f"holds vectors of dim {DIM}, this Index has dim=8"):
        medretrieve.Index("l2", 8).load_index(tmp_path / "h.bin")
    with pytest.raises(ValueError, match=r"saved by hnswlib.*Index\(space, 12\)\.load_index.*convert-hnswlib"):
        medretrieve.Index.load(tmp_path / "h.bin")  # the space is not in the file: the message says what to do
    data = (tmp_path / "h.bin").read_bytes()
    damaged = {
        "junk.bin": b"not an index at all" * 20,
        "short.bin": data[:50],
        "truncated.bin": data[:-3],
        "longer.bin": data + b"\0" * 8,
        "bad-m.bin": data[:72] + struct.pack("<Q", 17) + data[80:],  # M_ no longer maxM_
    }
    for name, content in damaged.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match="not an hnswlib index file|shorter than hnswlib") as info:
            medretrieve.Index("l2", DIM).load_index(tmp_path / name)
        assert "nor a medretrieve index file" in str(info.value), name
    with pytest.raises(ValueError, match="bad magic"):
        medretrieve.Index.load(tmp_path / "junk.bin")
    big_label = bytearray(data)
    label_at = 96 + (2 * 16 + 1) * 4 + 4 * DIM  # the first record's label: after its link count, 2 M links, vector
    assert struct.unpack_from("<Q", big_label, label_at)[0] == 1000
    struct.pack_into("<Q", big_label, label_at, 2**63)
    (tmp_path / "big.bin").write_bytes(bytes(big_label))
    with pytest.raises(ValueError, match=r"label 9223372036854775808, above 2\*\*63 - 1"):
        medretrieve.Index("l2", DIM).load_index(tmp_path / "big.bin")


def test_a_medretrieve_file_still_loads_through_load_index(tmp_path: Path) -> None:
    index = medretrieve.Index("ip", DIM)
    index.init_index(100)
    index.add_items(_data(n=50))
    index.save(tmp_path / "m.mdr")
    again = medretrieve.Index("ip", DIM)
    again.load_index(tmp_path / "m.mdr")
    assert again.element_count == 50

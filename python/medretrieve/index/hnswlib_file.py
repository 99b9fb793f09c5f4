"""Index files saved by hnswlib (``hnswlib.Index.save_index``), read so that ``Index.load_index`` opens them.

hnswlib's file (``hnswalg.h``, ``saveIndex``) is a 96-byte header of native little-endian fields (``offsetLevel0_``,
``max_elements_``, ``cur_element_count``, ``size_data_per_element_``, ``label_offset_``, ``offsetData_`` as size_t;
``maxlevel_`` int; ``enterpoint_node_`` uint32; ``maxM_``, ``maxM0_``, ``M_`` size_t; ``mult_`` double;
``ef_construction_`` size_t), then one level-0 record per element (a uint32 link header: link count in the low 16
bits, the deletion mark in bit 0 of byte 2; ``maxM0_`` uint32 links; the float32 vector; the uint64 label), then
each element's upper-level links, each preceded by its byte size. The space and ``dim`` are not stored: the caller
names them, and ``dim`` is checked against the record layout. ``allow_replace_deleted`` is not stored either (a
file written with it differs only in which slots are reused). A cosine index holds the vectors hnswlib normalised
when they were added.

This module reads the vectors, labels, deletion marks and the build settings (``M``, ``ef_construction``,
``max_elements``); ``Index.load_index`` re-links them into medretrieve's own graph. hnswlib's links are only
checked for consistency with the file size, not reused: they were chosen for float32 distances and hnswlib's
record layout, and re-linking is one build at the file's own settings.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from ._inputs import IndexInputError

MEDRETRIEVE_MAGIC = b"MDRIDX\x00\x00"  # csrc/index/file_format.h, kMagic
HEADER = struct.Struct("<6QiI3QdQ")  # 96 bytes: the fields above, in saveIndex's order
LINK_SIZE = struct.Struct("<I")
DELETE_MARK = 0x01  # hnswlib's DELETE_MARK, in the third byte of the level-0 link header
MAX_M = 10_000  # hnswlib caps M there
MAX_ID = 2**63 - 1  # the largest id medretrieve.Index stores

PathArg = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class HnswlibFile:
    """What an hnswlib index file holds: ``vectors`` float32 [n, dim] (deleted ones included), ``labels`` uint64
    [n], ``deleted`` bool [n], and the settings it was built with."""

    max_elements: int
    M: int
    ef_construction: int
    vectors: np.ndarray
    labels: np.ndarray
    deleted: np.ndarray


def lacks_medretrieve_magic(path: PathArg) -> bool:
    """Whether ``path`` is a readable file that does not start with medretrieve's index-file magic (False for a
    missing or unreadable one, which the native loader reports in its own words)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MEDRETRIEVE_MAGIC)) != MEDRETRIEVE_MAGIC
    except OSError:
        return False


class NotHnswlibFile(IndexInputError):
    """The file's header or size does not fit hnswlib's format (the message says which field)."""


def read_hnswlib_file(path: PathArg, dim: int) -> HnswlibFile:
    """Reads an hnswlib index file whose vectors have ``dim`` dimensions.

    Raises ``NotHnswlibFile`` (an ``IndexInputError``, so a ``ValueError``) naming the inconsistent field when the
    file is not one, and ``IndexInputError`` when it is one of another ``dim`` or holds a label above 2**63 - 1.
    """
    name = os.fspath(path)
    raw = _map(path)
    layout = _layout(raw, name)
    if layout.dim != dim:
        raise IndexInputError(f"{name} holds vectors of dim {layout.dim}, this Index has dim={dim}")
    records = raw[HEADER.size:HEADER.size + layout.count * layout.bytes_per_element].reshape(
        layout.count, layout.bytes_per_element)
    vectors = np.ascontiguousarray(records[:, layout.data_offset:layout.label_offset]).view("<f4")
    labels = np.ascontiguousarray(records[:, layout.label_offset:]).view("<u8").ravel()
    deleted = (records[:, 2] & DELETE_MARK).astype(bool)
    if layout.count and int(labels.max()) > MAX_ID:
        raise IndexInputError(f"{name} holds label {int(labels.max())}, above 2**63 - 1, the largest id "
                              "medretrieve.Index stores")
    return HnswlibFile(max_elements=layout.max_elements, M=layout.M, ef_construction=layout.ef_construction,
                       vectors=vectors.astype(np.float32, copy=False), labels=labels.astype(np.uint64, copy=False),
                       deleted=deleted)


def hnswlib_file_dim(path: PathArg) -> int:
    """The vector dimension of an hnswlib index file (``NotHnswlibFile`` when it is not one)."""
    return _layout(_map(path), os.fspath(path)).dim


@dataclass(frozen=True)
class _Layout:
    count: int
    max_elements: int
    bytes_per_element: int
    data_offset: int
    label_offset: int
    M: int
    ef_construction: int

    @property
    def dim(self) -> int:
        return (self.label_offset - self.data_offset) // 4


def _map(path: PathArg) -> np.ndarray:
    """The file's bytes, memory-mapped (numpy cannot map an empty file)."""
    return np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) else np.zeros(0, np.uint8)


def _layout(raw: np.ndarray, name: str) -> _Layout:
    """The header's fields, checked against each other and against the file's size."""
    size = raw.size
    if size < HEADER.size:
        raise NotHnswlibFile(f"{name}: {size} bytes, shorter than hnswlib's {HEADER.size}-byte header")
    (offset_level0, max_elements, count, bytes_per_element, label_offset, data_offset, max_level, entry_point,
     max_m, max_m0, m, _mult, ef_construction) = HEADER.unpack_from(raw.data, 0)

    def bad(field: str) -> NotHnswlibFile:
        return NotHnswlibFile(f"{name}: not an hnswlib index file ({field})")

    if offset_level0 != 0:
        raise bad(f"offsetLevel0_ is {offset_level0}, hnswlib writes 0")
    if not 1 <= m <= MAX_M or max_m != m or max_m0 != 2 * m:
        raise bad(f"M_={m}, maxM_={max_m}, maxM0_={max_m0}: hnswlib writes maxM_ = M_ and maxM0_ = 2 M_")
    if data_offset != 4 * max_m0 + 4:
        raise bad(f"offsetData_ is {data_offset}, not the {4 * max_m0 + 4} bytes of maxM0_ links and their count")
    vector_bytes = label_offset - data_offset
    if vector_bytes <= 0 or vector_bytes % 4 or bytes_per_element != label_offset + 8:
        raise bad(f"label_offset_={label_offset} and size_data_per_element_={bytes_per_element} do not frame "
                  "float32 vectors and 8-byte labels")
    if count > max_elements:
        raise bad(f"cur_element_count {count} > max_elements_ {max_elements}")
    if count and (entry_point >= count or max_level < 0):
        raise bad(f"entry point {entry_point} at level {max_level} for {count} elements")
    _check_link_lists(raw, HEADER.size + count * bytes_per_element, count, 4 * max_m + 4, max_level, bad)
    return _Layout(count=count, max_elements=max_elements, bytes_per_element=bytes_per_element,
                   data_offset=data_offset, label_offset=label_offset, M=m, ef_construction=ef_construction)


def _check_link_lists(raw: np.ndarray, start: int, count: int, bytes_per_level: int, max_level: int,
                      bad: Callable[[str], NotHnswlibFile]) -> None:
    """Walks the upper-level link lists after the level-0 records: each is a multiple of one level's links, none
    above the top level, and the last ends where the file does."""
    pos, size = start, raw.size
    if pos > size:
        raise bad(f"{count} level-0 records need {pos - HEADER.size} bytes, the file has {size - HEADER.size}")
    buffer = raw.data
    for _ in range(count):
        if pos + 4 > size:
            raise bad("the upper-level link lists end before the last element's")
        (nbytes,) = LINK_SIZE.unpack_from(buffer, pos)
        if nbytes % bytes_per_level or nbytes // bytes_per_level > max_level:
            raise bad(f"an upper-level link list of {nbytes} bytes at byte {pos}")
        pos += 4 + nbytes
    if pos != size:
        raise bad(f"the links end at byte {pos} of {size}")

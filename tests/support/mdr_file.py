"""Reads and rewrites medretrieve index files (csrc/index/file_format.h) for tests of the loader's validation.

Edits keep the file well-formed, so the checksum is recomputed: the loader's deeper checks are what is tested.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Dict, Tuple

import numpy as np

PREFIX = 8 + 4 * 4  # magic, version, kind, header bytes, section count
HEADER = struct.Struct("<4I4I4IIi3QdfI")  # FileHeader (format versions 2-3)
HEADER_FIELDS = (
    "space dtype dim M ef_construction ef keep_float centre_trained allow_replace_deleted link_slots stride "
    "code_offset entry_point max_level max_elements count seed filter_exact_factor prune_alpha link_bits"
).split()
ENTRY = struct.Struct("<IIQQ")
SECTIONS = {"centre": 1, "slabs": 2, "levels": 3, "upper": 4, "ext_ids": 5, "labels": 6, "floats": 7}

_P1, _P2, _P3, _MASK = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def checksum64(data: bytes) -> int:
    """file_format.cpp's checksum64."""
    n = len(data)
    h = [(_P1 + _P2) & _MASK, _P2, 0, ~_P1 & _MASK]
    full = n // 32 * 32
    words = np.frombuffer(data[:full], dtype="<u8").reshape(-1, 4).tolist()
    for row in words:
        for lane in range(4):
            h[lane] = (_rotl((h[lane] + row[lane] * _P2) & _MASK, 31) * _P1) & _MASK
    acc = (_rotl(h[0], 1) + _rotl(h[1], 7) + _rotl(h[2], 12) + _rotl(h[3], 18) + n) & _MASK
    for b in data[full:]:
        acc = (_rotl(acc ^ ((b * _P3) & _MASK), 11) * _P1) & _MASK
    acc ^= acc >> 33
    acc = (acc * _P2) & _MASK
    acc ^= acc >> 29
    return acc


@dataclass
class IndexFile:
    data: bytearray

    @classmethod
    def read(cls, path: object) -> "IndexFile":
        with open(path, "rb") as f:  # type: ignore[arg-type]
            return cls(bytearray(f.read()))

    @property
    def header(self) -> Dict[str, float]:
        return dict(zip(HEADER_FIELDS, HEADER.unpack_from(self.data, PREFIX)))

    def set_header(self, **fields: float) -> None:
        h = self.header
        h.update(fields)
        HEADER.pack_into(self.data, PREFIX, *(h[f] for f in HEADER_FIELDS))

    def section(self, name: str) -> Tuple[int, int]:
        """(offset, bytes) of a section."""
        count = struct.unpack_from("<I", self.data, 20)[0]
        for i in range(count):
            sid, _, off, size = ENTRY.unpack_from(self.data, PREFIX + HEADER.size + i * ENTRY.size)
            if sid == SECTIONS[name]:
                return off, size
        raise KeyError(name)

    def array(self, name: str, dtype: str) -> np.ndarray:
        """A writable view of a section (edits go into the file's bytes)."""
        off, size = self.section(name)
        return np.frombuffer(memoryview(self.data)[off:off + size], dtype=dtype)

    def write(self, path: object) -> None:
        """Writes the file with its checksum recomputed."""
        body = bytes(self.data[:-8])
        with open(path, "wb") as f:  # type: ignore[arg-type]
            f.write(body + checksum64(body).to_bytes(8, "little"))

"""Vectors spilled to disk while a corpus is encoded, and the HNSW index built back from them in batches.

An out-of-core build never holds the corpus's float32 matrix in memory (1M x 768 float32 is 3 GB, PubMed's ~100M
chunks 300 GB): every encoded batch is appended to a raw float32 file (:class:`VectorSpill`, ``4 x dim`` bytes a
row), and :func:`build_index` adds the rows to the index a batch at a time, each batch read through a memory map
that is closed as soon as the batch is copied out (a map kept open over the whole file would count its pages in the
process's resident memory). The index itself is the only thing that grows with the corpus: peak memory is the
index plus one batch (``batch x dim x 4`` bytes) and its labels.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator, Optional, Tuple, Union

import numpy as np

PathLike = Union[str, "os.PathLike[str]"]


class VectorSpill:
    """float32 rows of width ``dim`` appended to a raw file (no header: row ``i`` starts at byte ``4 * dim * i``)."""

    def __init__(self, path: PathLike, dim: int) -> None:
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.path = Path(path)
        self.dim = dim
        self.row_bytes = 4 * dim
        if not self.path.exists():
            self.path.touch()
        size = self.path.stat().st_size
        if size % self.row_bytes:
            raise ValueError(f"{self.path} holds {size} bytes, not whole rows of {self.row_bytes} bytes")

    def __len__(self) -> int:
        return self.path.stat().st_size // self.row_bytes

    def append(self, rows: np.ndarray) -> None:
        """Append ``rows`` [n, dim] (converted to float32, C order) and flush them to the file."""
        x = np.ascontiguousarray(rows, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"rows must be [n, {self.dim}], got shape {x.shape}")
        with open(self.path, "ab") as fh:
            x.tofile(fh)

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` rows (a resumed build drops rows written after its last checkpoint)."""
        if not 0 <= n <= len(self):
            raise ValueError(f"cannot keep {n} rows of {len(self)}")
        os.truncate(self.path, n * self.row_bytes)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` as an in-memory array (read through a short-lived memory map)."""
        n = len(self)
        if not 0 <= start <= stop <= n:
            raise ValueError(f"rows {start}:{stop} out of range (0..{n})")
        if start == stop:
            return np.zeros((0, self.dim), dtype=np.float32)
        view = np.memmap(self.path, dtype=np.float32, mode="r", offset=start * self.row_bytes,
                         shape=(stop - start, self.dim))
        try:
            return np.array(view)
        finally:
            view._mmap.close()  # type: ignore[attr-defined]  # unmapped now: the pages leave the process's RSS

    def batches(self, size: int, start: int = 0) -> Iterator[Tuple[int, np.ndarray]]:
        """``(first row, rows)`` of ``size`` rows at a time from row ``start`` on."""
        if size < 1:
            raise ValueError(f"batch size must be >= 1, got {size}")
        n = len(self)
        for a in range(start, n, size):
            yield a, self.read(a, min(a + size, n))


def build_index(spill: VectorSpill, dtype: str = "int8", M: int = 16, ef_construction: int = 200,
                labels: Optional[np.ndarray] = None, num_threads: int = -1, batch: int = 50_000,
                train_rows: int = 50_000, progress: Optional[Callable[[int, int], None]] = None):
    """An inner-product :class:`~medretrieve.index.Index` over every row of ``spill`` (id = row), sized exactly
    (no regrowth copy), int8 centre trained on the first ``train_rows`` rows; ``labels`` [n] int64 per row (or
    None); ``progress(done, total)`` after each batch. Peak memory: the index plus one ``batch`` of float32 rows."""
    from ..index import Index

    n = len(spill)
    if labels is not None and len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} spilled vectors")
    index = Index(space="ip", dim=spill.dim)
    index.init_index(max_elements=max(n, 16), M=M, ef_construction=ef_construction, dtype=dtype)
    if n and dtype == "int8":
        index.train(spill.read(0, min(train_rows, n)))
    for a, rows in spill.batches(batch):
        ids = np.arange(a, a + len(rows), dtype=np.int64)
        lab = None if labels is None else np.asarray(labels[a:a + len(rows)], dtype=np.int64)
        index.add(rows, ids, lab, num_threads=num_threads)
        if progress is not None:
            progress(a + len(rows), n)
    return index

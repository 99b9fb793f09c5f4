"""A collection held in memory only: the pool one online search ranks, or a collection without a local corpus.

:class:`MemoryCollection` is a :class:`~medretrieve.corpus.collection.Collection` that never writes: it has no
directory, ``add`` / ``delete`` change only memory, and its dense index is float32 HNSW (exact scores; a pool
holds hundreds of chunks, not millions). It fills from two sides:

- :meth:`MemoryCollection.copy_rows`: chunks of another collection with their stored vectors and parent
  sections (nothing is encoded again);
- :meth:`MemoryCollection.add_within`: records (e.g. fetched from PubMed), chunked and encoded about 16 chunks
  at a time while ``time_left_ms()`` allows; a record whose chunks could not all be encoded is left out whole and
  reported.

It shares the encoder sessions of the collection it is made ``like`` (no model is loaded again per search).
"""
from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Union

from .chunking import ChunkingConfig, chunk_record
from .chunk_table import ChunkRow, ChunkTable
from .builder import encoder_pair, new_index, new_manifest
from .collection import Collection, _Draft
from .snapshot import CollectionSnapshot
from .lexical import LexicalIndex
from .sources import Record

_M, _EF_CONSTRUCTION = 16, 100


@dataclass
class AddReport:
    """What :meth:`MemoryCollection.add_within` did: documents added, left out (the time ran out) and already
    present (ids); ``ms_per_chunk``: the chunking + encoding cost last measured (the estimate when none ran)."""

    added: List[str] = field(default_factory=list)
    left_out: List[str] = field(default_factory=list)
    present: List[str] = field(default_factory=list)
    ms_per_chunk: float = 0.0


class MemoryCollection(Collection):
    """An in-memory collection (module docstring)."""

    @classmethod
    def like(cls, other: Union[Collection, CollectionSnapshot], capacity: int = 1024) -> "MemoryCollection":
        """An empty in-memory collection with ``other``'s encoders (shared sessions, loaded once by ``other``),
        chunking and geometry; ``other`` a collection or one of its snapshots."""
        manifest = copy.deepcopy(other.manifest)
        manifest["index"] = {**manifest["index"], "dtype": "float32", "M": _M, "ef_construction": _EF_CONSTRUCTION}
        manifest.pop("counts", None)
        manifest.pop("files", None)
        lex = other.lexical
        return cls(Path(f"<memory like {other.directory}>"), manifest, ChunkTable(), {},
                   new_index(other.dim, "float32", _M, _EF_CONSTRUCTION, capacity),
                   LexicalIndex(lex.stem, lex.remove_stopwords, lex.k1, lex.b), model_sources={},
                   encoders=other.encoders)

    @classmethod
    def from_encoders(cls, encoder: Union[str, "os.PathLike[str]"],
                      query_encoder: Optional[Union[str, "os.PathLike[str]"]] = None,
                      chunking: Optional[ChunkingConfig] = None) -> "MemoryCollection":
        """An empty in-memory collection over an encoder directory (and its query encoder: as
        :meth:`Collection.build`), e.g. for searching PubMed without a local corpus."""
        enc_info, q_info = encoder_pair(encoder, query_encoder)
        manifest = new_manifest(enc_info, q_info, chunking or ChunkingConfig(), "float32", _M, _EF_CONSTRUCTION)
        index = new_index(enc_info["dim"], "float32", _M, _EF_CONSTRUCTION, 1024)
        return cls(Path("<memory>"), manifest, ChunkTable(), {}, index, LexicalIndex(), enc_info["source"],
                   q_info["source"] if q_info else None, model_sources={})

    def _commit(self, draft: _Draft, out: Optional[Path] = None) -> None:
        """Nothing is written: the collection lives in memory only (the change is swapped in as it is)."""
        self._publish(draft)

    def copy_rows(self, source: Union[Collection, CollectionSnapshot], rows: Sequence[int]) -> int:
        """Copy live chunks ``rows`` of ``source`` (stored vectors, parent sections; all read from one snapshot
        of it); returns chunks copied."""
        source = source.snapshot()
        rows = [int(r) for r in rows if source.alive[int(r)]]
        if not rows:
            return 0
        start = len(self.rows)
        copies = []
        parts = []
        for i, r in enumerate(rows):
            src = source.rows[r]
            copies.append(ChunkRow(start + i, src.chunk_id, src.document_id, src.title, src.section, src.text,
                                   src.overlap, src.position, src.parent_id, src.label, dict(src.metadata)))
            part = source.parent(src.parent_id)
            if part is not None:
                parts.append(part)
        self.add_rows(copies, source.vectors(rows), parts)
        return len(rows)

    def add_within(self, records: Sequence[Record], time_left_ms: Callable[[], float], reserve_ms: float = 0.0,
                   ms_per_chunk: float = 10.0, batch_chunks: int = 16) -> AddReport:
        """Chunk and encode ``records`` in batches of at most ``batch_chunks`` chunks, each batch only as large as
        ``time_left_ms() - reserve_ms`` covers at 1.5x its estimated cost (``ms_per_chunk``, then the cost
        measured on the previous batch); once the next record does not fit, it and the rest are left out whole.
        Records whose id is already present are skipped."""
        report = AddReport(ms_per_chunk=ms_per_chunk)
        present = {self.rows.document_id(i) for i in range(len(self.rows)) if self.alive[i]}
        todo: List[Record] = []
        for rec in records:
            if rec.id in present:
                report.present.append(rec.id)
            else:
                todo.append(rec)
                present.add(rec.id)
        sizes = [len(chunk_record(r, self.chunking)[0]) for r in todo]
        start = 0
        while start < len(todo):
            fit = (time_left_ms() - reserve_ms) / (1.5 * max(report.ms_per_chunk, 1e-3))  # chunks that fit
            end, n = start, 0
            while end < len(todo) and n + sizes[end] <= min(batch_chunks, fit):
                n += sizes[end]
                end += 1
            if end == start and sizes[start] <= fit:  # one record larger than a batch: alone
                n, end = sizes[start], start + 1
            if end == start:
                report.left_out.extend(r.id for r in todo[start:])
                break
            t0 = time.perf_counter()
            self._ingest(todo[start:end], batch_size=32, progress=False)
            report.ms_per_chunk = (time.perf_counter() - t0) * 1000.0 / max(n, 1)
            report.added.extend(r.id for r in todo[start:end])
            start = end
        return report


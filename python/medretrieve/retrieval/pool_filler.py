"""Filling an online search's pool with fetched records: chunk vectors from the cache, the rest encoded in
batches within the budget.

An article's chunk vectors depend on its chunks (the chunking settings and the record's text) and on the article
encoder, nothing else; so :class:`PoolFiller` keeps them per PMID under the *encoder identity*
(:func:`encoder_identity`: the model's sha256, its token limit, the geometry and the chunking settings) and the
digest of the chunks they were computed from. A record seen by an earlier question, or an earlier run, is
chunked again (cheap: ~0.1 ms per abstract) and its stored vectors added to the pool as they are; only the
others go through the encoder, all of one search's together in batches of ``batch_chunks`` chunks (the encoder
groups them by token length), each batch only as large as the time left covers at 1.5x the running cost per
chunk. A record whose chunks cannot all be encoded in time is left out whole and reported.

The vectors are held in memory (the last ``memory_articles`` articles) in front of the disk cache of the
source (:class:`~medretrieve.corpus.pubmed_cache.PubMedCache`, ``vectors/<identity>/<pmid>.npz``) when there
is one: an article is encoded once across the questions of a run, and across runs.
"""
from __future__ import annotations

import collections
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ..corpus.builder import chunk_rows, embed_chunks
from ..corpus.chunking import Chunk, SectionPart, chunk_record
from ..corpus.memory import MemoryCollection
from ..corpus.pubmed_cache import PubMedCache
from ..corpus.sources import Record
from .budget import Ema


def encoder_identity(collection: MemoryCollection) -> str:
    """What a chunk vector of ``collection`` depends on besides the chunk, as a short hex key."""
    enc = collection.article_encoder()
    key = {"sha256": enc.manifest.sha256, "max_length": enc.max_length, "normalized": bool(collection.normalized),
           "dim": int(collection.dim), "chunking": collection.chunking.to_dict()}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:24]


def chunks_digest(chunks: Sequence[Chunk]) -> str:
    """The digest of the chunk texts a vector set was computed from."""
    data = json.dumps([(c.chunk_id, c.title, c.core_text, c.overlap_text) for c in chunks], ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


class VectorStore:
    """Chunk vectors by (identity, PMID, chunk digest): the last ``memory_articles`` in memory, then ``disk``
    (None: memory only). Thread-safe."""

    def __init__(self, disk: Optional[PubMedCache], memory_articles: int = 4096) -> None:
        if isinstance(memory_articles, bool) or not isinstance(memory_articles, int) or memory_articles < 0:
            raise ValueError(f"memory_articles must be an integer >= 0, got {memory_articles!r}")
        self.disk = disk
        self.memory_articles = memory_articles
        self._memory: "collections.OrderedDict[Tuple[str, str, str], np.ndarray]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, identity: str, pmid: str, digest: str, dim: int) -> Optional[np.ndarray]:
        key = (identity, pmid, digest)
        with self._lock:
            hit = self._memory.get(key)
            if hit is not None:
                self._memory.move_to_end(key)
                return hit
        vectors = self.disk.get_vectors(identity, pmid, digest, dim) if self.disk is not None else None
        if vectors is not None:
            self._remember(key, vectors)
        return vectors

    def put(self, identity: str, pmid: str, digest: str, vectors: np.ndarray) -> None:
        self._remember((identity, pmid, digest), vectors)
        if self.disk is not None:
            self.disk.put_vectors(identity, pmid, digest, vectors)

    def _remember(self, key: Tuple[str, str, str], vectors: np.ndarray) -> None:
        if not self.memory_articles:
            return
        with self._lock:
            self._memory[key] = vectors
            self._memory.move_to_end(key)
            while len(self._memory) > self.memory_articles:
                self._memory.popitem(last=False)


@dataclass
class FillReport:
    """What :meth:`PoolFiller.fill` did, by PMID: ``cached`` (stored vectors used), ``encoded``, ``left_out``
    (the time ran out), ``present`` (already in the pool); ``chunks_encoded`` and ``encode_ms`` (chunking +
    encoding wall time, ms)."""

    cached: List[str] = field(default_factory=list)
    encoded: List[str] = field(default_factory=list)
    left_out: List[str] = field(default_factory=list)
    present: List[str] = field(default_factory=list)
    chunks_encoded: int = 0
    encode_ms: float = 0.0

    @property
    def added(self) -> List[str]:
        return self.cached + self.encoded

    def note(self) -> str:
        text = f"{len(self.cached)} from the vector cache, {len(self.encoded)} encoded"
        if self.chunks_encoded:
            rate = len(self.encoded) / max(self.encode_ms / 1000.0, 1e-9)
            text += f" ({self.chunks_encoded} chunks in {self.encode_ms:.0f} ms, {rate:.1f} articles/s)"
        if self.left_out:
            text += f"; {len(self.left_out)} left out (budget)"
        return text


@dataclass
class _Pending:
    record: Record
    chunks: List[Chunk]
    parts: List[SectionPart]
    digest: str


PROBE_CHUNKS = 4  # the first batch of a fill with a deadline: measures the cost before larger batches are planned


class PoolFiller:
    """Adds records to a pool (module docstring). ``chunk_ms``: the running chunking + encoding cost of one
    chunk (ms), learnt across searches; ``batch_chunks``: chunks per encoder call.

    Planning under a deadline: each batch is sized with the cost measured on the previous batch of the same fill
    (machine load changes from one search to the next); the first batch of a fill uses the running estimate and
    holds at most :data:`PROBE_CHUNKS` chunks (one record at least), so a wrong estimate costs one small batch."""

    def __init__(self, store: VectorStore, batch_chunks: int = 64) -> None:
        if isinstance(batch_chunks, bool) or not isinstance(batch_chunks, int) or batch_chunks < 1:
            raise ValueError(f"batch_chunks must be a positive integer, got {batch_chunks!r}")
        self.store = store
        self.batch_chunks = batch_chunks
        self.chunk_ms = Ema(10.0)

    def fill(self, pool: MemoryCollection, records: Sequence[Record], time_left_ms: Callable[[], float],
             reserve_ms: float = 0.0) -> FillReport:
        """Add ``records`` to ``pool`` (a :class:`~medretrieve.corpus.memory.MemoryCollection`): stored vectors
        first, then the rest encoded while ``time_left_ms() - reserve_ms`` allows."""
        report = FillReport()
        identity = encoder_identity(pool)
        have = {pool.rows.document_id(i) for i in range(len(pool.rows)) if pool.alive[i]}
        cached: List[Tuple[_Pending, np.ndarray]] = []
        todo: List[_Pending] = []
        for rec in records:
            if rec.id in have:
                report.present.append(rec.id)
                continue
            have.add(rec.id)
            chunks, parts = chunk_record(rec, pool.chunking)
            if not chunks:  # nothing to search in it
                continue
            item = _Pending(rec, chunks, parts, chunks_digest(chunks))
            vectors = self.store.get(identity, rec.id, item.digest, pool.dim)
            if vectors is not None and len(vectors) == len(chunks):
                cached.append((item, vectors))
            else:
                todo.append(item)
        if cached:
            self._add(pool, [c for c, _ in cached], np.concatenate([v for _, v in cached]))
            report.cached = [c.record.id for c, _ in cached]
        self._encode(pool, todo, identity, time_left_ms, reserve_ms, report)
        return report

    def _encode(self, pool: MemoryCollection, todo: List[_Pending], identity: str, time_left_ms: Callable[[], float],
                reserve_ms: float, report: FillReport) -> None:
        start = 0
        per_chunk = self.chunk_ms.value  # ms; then what the previous batch of this fill measured
        while start < len(todo):
            left = time_left_ms() - reserve_ms
            fit = left / (1.5 * max(per_chunk, 1e-3))  # chunks that fit
            size = self.batch_chunks if start or left == float("inf") else min(self.batch_chunks, PROBE_CHUNKS)
            end, n = start, 0
            while end < len(todo) and n + len(todo[end].chunks) <= min(size, fit):
                n += len(todo[end].chunks)
                end += 1
            if end == start and len(todo[start].chunks) <= fit:  # one record larger than a batch: alone
                n, end = len(todo[start].chunks), start + 1
            if end == start:
                report.left_out.extend(p.record.id for p in todo[start:])
                return
            batch = todo[start:end]
            t0 = time.perf_counter()
            vectors = embed_chunks(pool.article_encoder(), [c for p in batch for c in p.chunks], pool.chunking,
                                   batch_size=32, normalize=pool.normalized)
            took_ms = (time.perf_counter() - t0) * 1000.0
            per_chunk = took_ms / max(n, 1)
            self.chunk_ms.update(per_chunk)
            report.chunks_encoded += n
            report.encode_ms += took_ms
            at = 0
            for p in batch:
                self.store.put(identity, p.record.id, p.digest, vectors[at:at + len(p.chunks)])
                at += len(p.chunks)
            self._add(pool, batch, vectors)
            report.encoded.extend(p.record.id for p in batch)
            start = end

    @staticmethod
    def _add(pool: MemoryCollection, items: Sequence[_Pending], vectors: np.ndarray) -> None:
        chunks = [c for p in items for c in p.chunks]
        pool.add_rows(chunk_rows(chunks, len(pool.rows)), vectors, [s for p in items for s in p.parts])

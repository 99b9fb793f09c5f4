"""A collection: one directory holding everything needed to search one corpus.

Layout (``format: medretrieve-collection-1``)::

    manifest.json     encoders (paths inside the collection + sha256), chunking and index settings, counts,
                      versions, and the size and sha256 of every file below but the index (which checks itself)
    chunks.jsonl      one chunk per line, in row order: row, chunk_id, document_id, title, section, text,
                      overlap, position, parent_id, label, metadata (lines are appended, never rewritten)
    rows/             per-row arrays read at open (memory-mapped): line offsets, labels, deleted flags,
                      document of each row, and the document ids (:mod:`.chunk_table`)
    sections.jsonl    the parent sections (section_id, document_id, title, section, text), read on first use
    dense.index       medretrieve.Index over the chunk vectors (id = row; label = section category)
    lexical/          the BM25 index (medretrieve.corpus.lexical.LexicalIndex: fitted matrix, token ids; mmap)
    models/encoder    the article (or symmetric) encoder, copied in at build; models/query: the query encoder
                      when it is a separate model

Chunk vectors: ``w_core * e(title, core) + w_overlap * e(title, overlap)`` with the
weights of :func:`medretrieve.corpus.chunking.overlap_weights` (an overlap token counts
half a core token), L2-normalised only when the article encoder's manifest says
``normalize`` (sentence-transformers models). A MedCPT pair (CLS pooling, trained for
raw inner products) keeps its own geometry: the vectors stay unnormalised, the ``ip``
index scores raw inner products (int8 storage keeps their scale: a per-vector scale),
and ``manifest["index"]["normalized"]`` (:attr:`Collection.normalized`) tells the
retrieval stages which geometry they work in.

Writes are atomic at directory level: a build (and every ``add`` / ``delete``)
writes a complete new directory next to the target and swaps it in with
renames, so a failure leaves either the old collection or nothing; the new
files, their folders and the folder around them are fsynced before and after the
renames, so a power loss does too (``_files.swap_in``); the next open or write
cleans up after a killed one (:mod:`.store`). A full disk is an OSError (ENOSPC)
naming the file, the free space the write needs and that nothing was changed. Opening validates
the manifest (:mod:`.manifest`), keeps every path inside the folder, checks the
files against it and raises :class:`~.store.DamagedCollection` naming the
field or file at fault.

Live updates: searches read a :class:`~.snapshot.CollectionSnapshot` (``collection.snapshot()``, what the
``Retriever`` takes once per search); ``add`` / ``delete`` run one at a time (a lock), change private copies,
write the new directory and then swap in the snapshot of what they wrote, so a search running meanwhile keeps
its consistent state and the next one sees the whole update. The read members of a ``Collection`` (``rows``,
``alive``, ``dense``, ``lexical``...) are those of its latest snapshot: a caller reading several of them while
another thread writes takes ``snapshot()`` once instead.
"""
from __future__ import annotations

import copy
import itertools
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .builder import CollectionBuilder, chunk_rows, embed_chunks, lexical_text, source_fingerprint
from .chunking import Chunk, ChunkingConfig, SectionPart, chunk_record
from .chunk_table import ROWS, ChunkRow, ChunkTable
from .metadata import check_declared, declared_fields, infer_fields, misfits
from .lexical import LexicalIndex
from .manifest import CollectionManifest, read_manifest, validate_manifest
from .snapshot import CollectionSnapshot, Encoders, load_snapshot
from .sources import ReadReport, Record, SourceLike, read_records
from .._files import disk_full_error, new_temp_dir, swap_in, write_text_atomic
from .store import (
    CHUNKS, DENSE, LEXICAL, MANIFEST, SECTIONS, CollectionChanged, DamagedCollection, Stamp, check_links, confined,
    copy_tree, digests, is_collection, manifest_stamp, recover_leftovers, write_jsonl, writer_lock,
)

__all__ = ["Collection", "CollectionChanged", "CollectionSnapshot", "DamagedCollection", "DENSE", "VERIFY_BELOW"]

VERIFY_BELOW = 64 << 20  # bytes: smaller collections have every file's sha256 checked at open


def _model_dir(d: Path, key: str, relative: str) -> str:
    """The ``key`` model directory the manifest names, inside ``d`` and holding a model (DamagedCollection)."""
    from ..models.encoders import MANIFEST_NAME

    path = confined(d, relative, f"the {key} directory")
    if not (path / MANIFEST_NAME).is_file():
        raise DamagedCollection(f"{d / MANIFEST}: {key}.dir {relative!r} holds no model (no {MANIFEST_NAME}); "
                                "restore the collection's models folder or rebuild the collection")
    return str(path)


def _read_manifest_version(d: Path) -> Tuple[CollectionManifest, Optional[Stamp]]:
    """The validated manifest of ``d`` and the stamp of the version it belongs to (read again when a write
    swapped a new version in meanwhile)."""
    for _ in range(3):
        before = manifest_stamp(d)
        spec = read_manifest(d)
        if manifest_stamp(d) == before:
            break
    return spec, before


class _Draft:
    """A writer's private copies of one snapshot's state (the snapshot itself stays as searches read it): the
    manifest, the rows, the BM25 index; the dense index is copied the first time a change needs it, the sections
    when a change reads them."""

    def __init__(self, base: CollectionSnapshot) -> None:
        self.base = base
        self.manifest: Dict[str, Any] = copy.deepcopy(base.manifest)
        self.rows = base.rows.copy()
        self.lexical = base.lexical.copy()
        self.dense = base.dense
        self._dense_copied = False
        self._sections: Optional[Dict[str, SectionPart]] = None

    def writable_dense(self) -> Any:
        """The dense index, copied into memory on the first change (the base's may be a read-only map, and
        searches of the base read it)."""
        if not self._dense_copied:
            self.dense = copy.deepcopy(self.base.dense)
            self._dense_copied = True
        return self.dense

    @property
    def sections(self) -> Dict[str, SectionPart]:
        if self._sections is None:
            self._sections = dict(self.base.sections)
        return self._sections

    @property
    def sections_changed(self) -> bool:
        return self._sections is not None

    def alive(self) -> np.ndarray:
        return ~np.asarray(self.rows.deleted, dtype=bool)


class Collection:
    """Chunks + dense index + lexical index + manifest of one corpus (see module docstring).

    The read members (``rows``, ``alive``, ``labels``, ``dense``, ``lexical``, ``sections``, ``manifest``,
    ``len()``, ``allowed``, ``document_rows``, ``vectors``, the encoders) are those of the latest
    :meth:`snapshot`."""

    def __init__(self, directory: Path, manifest: Dict[str, Any], rows: ChunkTable,
                 sections: Optional[Dict[str, SectionPart]], dense, lexical: LexicalIndex,
                 encoder_dir: Optional[str] = None, query_encoder_dir: Optional[str] = None,
                 model_sources: Optional[Dict[str, str]] = None, *, encoders: Optional[Encoders] = None) -> None:
        d = Path(directory)
        # where the collection's own models are copied from on a write (at build: where the build found them);
        # a model the caller names instead is used for encoding but never written into the collection
        self._models: Dict[str, str] = dict(model_sources) if model_sources is not None else {
            key: str(confined(d, manifest[key]["dir"], f"the {key} directory"))
            for key in ("encoder", "query_encoder") if manifest.get(key) is not None}
        if encoders is None:
            enc = str(encoder_dir or self._models["encoder"])
            encoders = Encoders(enc, str(query_encoder_dir or self._models.get("query_encoder", enc)))
        self._write_lock = threading.RLock()  # one writer at a time; readers never wait for it
        self._snap = CollectionSnapshot(d, manifest, rows, sections if sections is not None else {}, dense,
                                        lexical, encoders)

    # ------------------------------------------------------------- reading: the latest snapshot
    def snapshot(self) -> CollectionSnapshot:
        """The collection's current state, immutable: a search reads one snapshot from start to end (a
        concurrent ``add`` / ``delete`` swaps in a new one and leaves this one as it is)."""
        return self._snap

    @property
    def directory(self) -> Path:
        return self._snap.directory

    @property
    def manifest(self) -> Dict[str, Any]:
        """The manifest (a JSON object; do not change it: a write makes its own)."""
        return self._snap.manifest

    @property
    def rows(self) -> ChunkTable:
        return self._snap.rows

    @property
    def dense(self) -> Any:
        return self._snap.dense

    @property
    def lexical(self) -> LexicalIndex:
        return self._snap.lexical

    @property
    def chunking(self) -> ChunkingConfig:
        return self._snap.chunking

    @property
    def alive(self) -> np.ndarray:
        """Whether each row is live (read-only)."""
        return self._snap.alive

    @property
    def labels(self) -> np.ndarray:
        """Section category of each row (read-only)."""
        return self._snap.labels

    @property
    def encoders(self) -> Encoders:
        """The encoder sessions (shared by every snapshot, and by in-memory pools made like this collection)."""
        return self._snap.encoders

    @property
    def encoder_threads(self) -> Optional[int]:
        """ONNX Runtime intra-op threads of the encoders (None: ORT's); set before the first encode."""
        return self._snap.encoders.threads

    @encoder_threads.setter
    def encoder_threads(self, value: Optional[int]) -> None:
        self._snap.encoders.threads = value

    def __len__(self) -> int:
        """Number of live chunks."""
        return len(self._snap)

    def allowed(self, labels: Sequence[int]) -> np.ndarray:
        """Boolean mask of the live rows carrying one of ``labels`` (:meth:`CollectionSnapshot.allowed`)."""
        return self._snap.allowed(labels)

    @property
    def n_documents(self) -> int:
        """Number of live documents."""
        return self._snap.n_documents

    @property
    def metadata_fields(self) -> Dict[str, str]:
        """The documents' metadata fields, name -> type (:attr:`CollectionSnapshot.metadata_fields`)."""
        return self._snap.metadata_fields

    def metadata_counts(self) -> Dict[str, int]:
        """Per metadata field (:attr:`metadata_fields`), the live documents holding a value that fits its type."""
        columns, live = self._snap.metadata_columns(), self._snap.live_documents()
        return {name: int((columns.present(name) & live).sum()) for name in columns.fields}

    def filter_rows(self, where: Any, extra_fields: Optional[Mapping[str, str]] = None) -> np.ndarray:
        """Boolean mask of the live rows passing a metadata filter (:meth:`CollectionSnapshot.filter_rows`)."""
        return self._snap.filter_rows(where, extra_fields)

    @property
    def sections(self) -> Dict[str, SectionPart]:
        """The parent sections by id (read from sections.jsonl on first use)."""
        return self._snap.sections

    @property
    def dim(self) -> int:
        return self._snap.dim

    @property
    def encoder_dir(self) -> str:
        """The directory of the article (or symmetric) encoder in use (the collection's own copy unless replaced
        at open)."""
        return self._snap.encoder_dir

    @property
    def normalized(self) -> bool:
        """Whether chunk vectors are unit length (inner product = cosine); False for raw inner products
        (MedCPT). Collections built before this was recorded were always normalised."""
        return self._snap.normalized

    @property
    def query_encoder_dir(self) -> str:
        """The directory of the query encoder searches use (the collection's own, or the one named at open)."""
        return self._snap.query_encoder_dir

    def article_encoder(self):
        return self._snap.article_encoder()

    def query_encoder(self):
        return self._snap.query_encoder()

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors float32 [n, dim] (one fast unpadded call for a single query)."""
        return self._snap.encode_queries(texts)

    def parent(self, parent_id: str) -> Optional[SectionPart]:
        """The whole section a chunk belongs to (context for a hit)."""
        return self._snap.parent(parent_id)

    def document_rows(self, document_id: str) -> List[int]:
        """Rows of the live chunks of one document, in document order (empty when unknown)."""
        return self._snap.document_rows(document_id)

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        """Stored (dequantised) vectors of ``rows``, float32 [n, dim]."""
        return self._snap.vectors(rows)

    def check(self) -> Dict[str, int]:
        """Check everything now (:meth:`CollectionSnapshot.check_all`); with ``Collection.open(..., verify=True)``
        the whole collection is checked: every file's digest, then every record."""
        return self._snap.check_all()

    # ------------------------------------------------------------- build / open
    @classmethod
    def build(
        cls,
        source: SourceLike,
        out_dir: Union[str, os.PathLike],
        encoder: Union[str, os.PathLike],
        query_encoder: Optional[Union[str, os.PathLike]] = None,
        chunking: Optional[Union[ChunkingConfig, Dict[str, Any]]] = None,
        errors: str = "skip",
        dtype: str = "int8",
        M: int = 16,
        ef_construction: int = 200,
        batch_size: int = 64,
        progress: bool = True,
        format: str = "auto",
        overwrite: bool = False,
        report: Optional[ReadReport] = None,
        resume: bool = True,
        threads: int = -1,
        chunk_batch: int = 1024,
        metadata_fields: Optional[Mapping[str, str]] = None,
    ) -> "Collection":
        """Read ``source``, chunk, embed and index it into ``out_dir`` out of core (:mod:`.builder`): chunks and
        vectors are spilled to disk a batch of ``chunk_batch`` chunks at a time, so memory holds the final index
        plus a bounded working set, whatever the corpus size.

        ``source``: a path (file or directory), a list of paths, or a list of
        record dicts / :class:`~medretrieve.corpus.sources.Record`. ``encoder``: an
        article or symmetric model directory (``medretrieve export-onnx``); ``query_encoder``:
        the query-side model (defaults to ``encoder``, which must then be
        symmetric); ``"default"`` / ``"minilm"`` name the embedded models. Both are copied into
        the collection. ``overwrite``: replace an existing collection at
        ``out_dir`` (never a directory that is not a collection, unless empty).
        ``resume``: a build of paths that was interrupted (killed, or stopped by KeyboardInterrupt) carries on
        from its last checkpoint when run again with the same sources and settings (False: start afresh); a build
        that fails with an error (unreadable input with ``errors="raise"``, nothing readable, a full disk...)
        leaves nothing behind: no work folder, and ``out_dir`` as it was. ``threads``: threads of the HNSW build
        (-1: all cores). ``metadata_fields``: the documents' metadata fields declared, name -> type, as
        :meth:`declare_metadata` takes them (None: inferred from the values). Nothing is swapped in before the build
        is complete. Raises ValueError when nothing readable is in the source (or a declared type is unknown); a
        :class:`~.sources.SourceError` names the file and line of a bad record.
        """
        report = report if report is not None else ReadReport()
        builder = CollectionBuilder(out_dir, encoder, query_encoder, chunking, dtype, M, ef_construction,
                                    batch_size=batch_size, chunk_batch=chunk_batch, threads=threads,
                                    overwrite=overwrite, resume=resume,
                                    source_key=source_fingerprint(source, format, errors), progress=progress,
                                    metadata_fields=metadata_fields)
        try:
            records = read_records(source, format=format, errors=errors, report=report)
            builder.add_records(itertools.islice(records, builder.records_done, None))
            out = builder.finish(report)
        except Exception as exc:
            full = disk_full_error(exc, Path(out_dir), builder.work)  # read before the work folder goes
            builder.abandon()  # a failed build leaves nothing behind
            if full is not None:
                raise full.error() from exc
            raise
        except BaseException:  # interrupted: kept to resume when the sources can be recognised again
            if builder.key is None:
                builder.abandon()
            else:
                builder.close()
            raise
        return cls.open(out)

    def reencode(self, out_dir: Union[str, os.PathLike], encoder: Union[str, os.PathLike],
                 query_encoder: Optional[Union[str, os.PathLike]] = None, batch_size: int = 64,
                 threads: int = -1, overwrite: bool = False, progress: bool = False) -> "Collection":
        """A copy of this collection in ``out_dir`` with every live chunk encoded again by ``encoder`` (e.g. one
        ``medretrieve.training.encoder.fit_encoder`` wrote; ``query_encoder`` as for :meth:`build`): the same
        chunks, sections, labels, chunking and index settings, a freshly built dense and lexical index; deleted
        chunks are left out. Needs no source files. This collection is not changed; ``out_dir`` must be another
        directory (ValueError otherwise), replaced only when it holds a collection and ``overwrite`` is set."""
        snap = self.snapshot()  # one consistent state, whatever a concurrent writer does
        if Path(out_dir).resolve() == snap.directory.resolve():
            raise ValueError(f"{out_dir} is this collection's own directory; re-encode into another one")
        index = snap.manifest["index"]
        builder = CollectionBuilder(out_dir, encoder, query_encoder, snap.chunking, index["dtype"], index["M"],
                                    index["ef_construction"], batch_size=batch_size, threads=threads,
                                    overwrite=overwrite, resume=False, progress=progress,
                                    metadata_fields=declared_fields(snap.manifest))
        try:
            written: set = set()
            live = np.flatnonzero(snap.alive)
            for start in range(0, len(live), builder.chunk_batch):
                old = [snap.rows[int(r)] for r in live[start:start + builder.chunk_batch]]
                chunks = [Chunk(r.chunk_id, r.document_id, r.title, r.section, r.text, r.overlap, r.position,
                                r.parent_id, r.label, r.metadata) for r in old]
                parts = [snap.sections[p] for p in dict.fromkeys(r.parent_id for r in old)
                         if p not in written and p in snap.sections]
                written.update(p.section_id for p in parts)
                vectors = embed_chunks(builder.encoder(), chunks, snap.chunking, batch_size,
                                       normalize=builder.normalize)
                builder.add_rows(chunk_rows(chunks, builder.rows), vectors, parts)
            out = builder.finish()
        except BaseException:
            builder.abandon()
            raise
        return type(self).open(out)

    @classmethod
    def open(cls, directory: Union[str, os.PathLike], encoder: Optional[str] = None,
             query_encoder: Optional[str] = None, verify: Union[bool, str] = "auto",
             encoder_threads: Optional[int] = None) -> "Collection":
        """Open a built collection. ``encoder`` / ``query_encoder`` replace the models the collection holds
        (e.g. a query encoder from ``fit-query-encoder``). ``encoder_threads``: ONNX Runtime intra-op threads
        per encoder call (None: ORT's default, one per core); a server running searches side by side wants 1.

        The chunk arrays, the BM25 matrix and the dense index are memory-mapped, so opening costs little at any
        size; texts are read when a search reaches them. The manifest is validated first (:mod:`.manifest`) and
        nothing outside ``directory`` is ever opened (paths and links that lead out are refused). ``verify``:
        True checks every file against its sha256 in the manifest; False checks what needs no hashing (every
        file's size, the arrays' dtypes, shapes and order; texts and BM25 postings when first read); ``"auto"``
        checks digests when the files total under 64 MiB. Raises FileNotFoundError when ``directory`` holds no
        collection and :class:`~.store.DamagedCollection` (a ValueError) naming the field or file at fault.
        """
        if verify not in (True, False, "auto"):
            raise ValueError(f"verify must be True, False or 'auto', got {verify!r}")
        d = Path(directory)
        recover_leftovers(d)
        if not (d / MANIFEST).is_file():
            raise FileNotFoundError(f"{d} is not a medretrieve collection (no {MANIFEST})")
        check_links(d)  # before the manifest is read: it may be such a link itself
        spec, stamp = _read_manifest_version(d)
        overrides = {"encoder": encoder, "query_encoder": query_encoder}
        models = {key: _model_dir(d, key, entry.dir)
                  for key, entry in (("encoder", spec.encoder), ("query_encoder", spec.query_encoder))
                  if entry is not None}
        enc = str(overrides["encoder"] or models["encoder"])
        encoders = Encoders(enc, str(overrides["query_encoder"] or models.get("query_encoder", enc)), encoder_threads)
        full = verify is True or (verify == "auto" and spec.total_bytes < VERIFY_BELOW)
        return cls._from_snapshot(load_snapshot(d, spec, encoders, full, stamp), models)

    @classmethod
    def _from_snapshot(cls, snap: CollectionSnapshot, models: Dict[str, str]) -> "Collection":
        col = cls.__new__(cls)
        col._models = models
        col._write_lock = threading.RLock()
        col._snap = snap
        return col

    # ------------------------------------------------------------- updates (one writer at a time)
    def add(self, source: SourceLike, errors: str = "skip", batch_size: int = 64, progress: bool = False,
            format: str = "auto", report: Optional[ReadReport] = None) -> int:
        """Add new documents (ids already present are rejected as malformed); returns chunks added. Searches
        running meanwhile read the collection as it was; the next ones see every added chunk. Writers take turns
        (another thread's update first; another process's for up to 60 s, then TimeoutError);
        :class:`~.store.CollectionChanged` when another writer changed the collection on disk after this object
        read it (nothing written: open it again)."""
        report = report if report is not None else ReadReport()
        with self._write_lock:
            snap = self._snap
            present = {snap.rows.documents[j] for j in np.unique(np.asarray(snap.rows.document)[snap.alive])}
            records = []
            for rec in read_records(source, format=format, errors=errors, report=report):
                if rec.id in present:
                    msg = f"document {rec.id!r} is already in the collection (delete it first)"
                    if errors == "raise":
                        raise ValueError(msg)
                    report.skipped.append((f"record {rec.id}", msg))
                    continue
                present.add(rec.id)
                records.append(rec)
            if not records:
                return 0
            draft = _Draft(snap)
            self._ingest_into(draft, records, batch_size, progress)
            self._commit(draft)
            return len(draft.rows) - len(snap.rows)

    def delete(self, doc_ids: Union[str, Iterable[str]]) -> int:
        """Remove documents by id (one id or several); returns chunks removed (unknown ids are ignored).
        Searches running meanwhile read the collection as it was; the next ones see none of the removed chunks.
        Writers take turns as for :meth:`add`."""
        wanted = {doc_ids} if isinstance(doc_ids, str) else {str(d) for d in doc_ids}
        with self._write_lock:
            snap = self._snap
            rows = snap.rows.rows_of_documents(sorted(wanted))
            hit = rows[snap.alive[rows]].tolist()
            if not hit:
                return 0
            draft = _Draft(snap)
            draft.rows.deleted[hit] = True
            dense = draft.writable_dense()
            for r in hit:
                dense.mark_deleted(r)
            draft.lexical.delete(hit)
            sections = draft.sections
            for sid in [s for s, p in sections.items() if p.document_id in wanted]:
                del sections[sid]
            self._commit(draft)
            return len(hit)

    def declare_metadata(self, fields: Mapping[str, str], strict: bool = False) -> None:
        """Declare the documents' metadata fields, name -> type (``keyword``, ``keywords``, ``integer``,
        ``float``, ``date``, ``boolean``: ``medretrieve.filters.FIELD_TYPES``), in place of the types inferred from
        the values; written at once, kept by later writes (``manifest["metadata"]["declared"]``). A field left out
        cannot be filtered on; a document whose value does not fit its field's type counts as missing it, or with
        ``strict`` the declaration is refused (ValueError naming the field, how many live documents conflict and
        one of their values; nothing written). ValueError naming an unknown type. Writers take turns as for
        :meth:`add`."""
        declared = check_declared(fields)
        with self._write_lock:
            if strict:
                meta = self._snap.rows.document_metadata()
                bad = misfits((meta[int(d)] for d in np.flatnonzero(self._snap.live_documents())), declared)
                if bad:
                    raise ValueError("metadata fields conflict with the documents' values: " + "; ".join(
                        f"{name} ({declared[name]}): {count} documents hold values such as {example!r}"
                        for name, (count, example) in sorted(bad.items())) + "; nothing was declared")
            draft = _Draft(self._snap)
            draft.manifest["metadata"] = {"fields": declared, "declared": True}
            self._commit(draft)

    def _ingest(self, records: Sequence[Record], batch_size: int, progress: bool) -> None:
        """Chunk, encode and add ``records`` (ids not checked), then commit."""
        with self._write_lock:
            draft = _Draft(self._snap)
            self._ingest_into(draft, records, batch_size, progress)
            self._commit(draft)

    def _ingest_into(self, draft: _Draft, records: Sequence[Record], batch_size: int, progress: bool) -> None:
        chunks: List[Chunk] = []
        parts: List[SectionPart] = []
        for rec in records:
            rec_chunks, rec_parts = chunk_record(rec, draft.base.chunking)
            chunks.extend(rec_chunks)
            parts.extend(rec_parts)
        vecs = embed_chunks(draft.base.article_encoder(), chunks, draft.base.chunking, batch_size, progress,
                            draft.base.normalized)
        self._add_rows_to(draft, chunk_rows(chunks, len(draft.rows)), vecs, parts)

    def add_rows(self, rows: Sequence[ChunkRow], vectors: np.ndarray, sections: Sequence[SectionPart] = ()) -> None:
        """Add chunks whose vectors were computed elsewhere (an out-of-core or distributed build, a benchmark's
        filler), in memory; :meth:`save` writes them. ``rows[i].row`` must number on from ``len(self.rows)``;
        ``vectors`` [len(rows), dim] float32 in the geometry of the collection's encoder."""
        with self._write_lock:
            draft = _Draft(self._snap)
            self._add_rows_to(draft, rows, vectors, sections)
            self._publish(draft)

    def _add_rows_to(self, draft: _Draft, rows: Sequence[ChunkRow], vectors: np.ndarray,
                     sections: Sequence[SectionPart] = ()) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        start = len(draft.rows)
        dim = draft.base.dim
        if vectors.shape != (len(rows), dim):
            raise ValueError(f"vectors must be [{len(rows)}, {dim}], got {vectors.shape}")
        if [r.row for r in rows] != list(range(start, start + len(rows))):
            raise ValueError(f"rows must be numbered {start}..{start + len(rows) - 1} in order")
        if not len(rows):
            return
        dense = draft.writable_dense()
        for part in sections:
            draft.sections[part.section_id] = part
        ids = np.arange(start, start + len(rows), dtype=np.int64)
        if start == 0 and draft.manifest["index"]["dtype"] == "int8":
            dense.train(vectors)  # int8 quantization centre from the first batch
        need = start + len(rows)
        if dense.get_max_elements() < need:
            dense.resize_index(max(need, int(dense.get_max_elements() * 1.5)))
        dense.add(vectors, ids, np.array([r.label for r in rows], dtype=np.int64))
        draft.rows.extend(rows)
        draft.lexical.add([lexical_text(r.title, r.text, r.overlap) for r in rows], ids.tolist())

    def save(self, directory: Optional[Union[str, os.PathLike]] = None) -> None:
        """Write the collection (atomically, see the module docstring) to its directory, or to ``directory``,
        which it then lives in; ``add`` and ``delete`` save by themselves, :meth:`add_rows` does not."""
        with self._write_lock:
            self._commit(_Draft(self._snap), Path(directory) if directory is not None else None)

    def _publish(self, draft: _Draft) -> None:
        """Swap in the draft as the new snapshot, in memory (nothing written)."""
        base = draft.base
        sections: Any = draft.sections if draft.sections_changed else (base.sections_file or base.sections)
        self._snap = CollectionSnapshot(base.directory, draft.manifest, draft.rows, sections, draft.dense,
                                        draft.lexical, base.encoders, base.stamp)

    def _commit(self, draft: _Draft, out: Optional[Path] = None) -> None:
        """Write the draft to a temp dir beside ``out`` (default: the collection's directory), swap it in (never
        half-written), then swap in the snapshot of what was written."""
        base = draft.base
        out = out or base.directory
        recover_leftovers(out)
        if out != base.directory and out.exists() and not (is_collection(out) or not any(out.iterdir())):
            raise ValueError(f"{out} exists and is not a medretrieve collection; nothing was written")
        tmp = new_temp_dir(out)
        try:
            manifest = draft.manifest
            alive = draft.alive()
            n_sections = (len(draft.sections) if draft.sections_changed
                          else (manifest.get("counts") or {}).get("sections", 0))
            n_documents = len(np.unique(np.asarray(draft.rows.document)[alive])) if len(alive) else 0
            manifest["counts"] = {"documents": n_documents, "chunks": int(alive.sum()), "sections": n_sections,
                                  "deleted_chunks": int((~alive).sum())}
            files = {CHUNKS: draft.rows.write(tmp)}
            # the fields a filter may name, recorded with the version they describe (declared ones kept)
            recorded = manifest.get("metadata") or {}
            fields = recorded.get("fields") if recorded.get("declared") else infer_fields(
                draft.rows.document_metadata())
            manifest["metadata"] = {"fields": fields, "declared": bool(recorded.get("declared"))}
            if draft.sections_changed:
                files[SECTIONS] = write_jsonl(tmp / SECTIONS, (s.__dict__ for s in draft.sections.values()))
            else:  # unchanged: copied as it is, from the base snapshot's own handle
                sections_file = base.sections_file
                if sections_file is not None:
                    (tmp / SECTIONS).write_bytes(sections_file.data())
                    files.update(digests(tmp, [SECTIONS]))
                else:
                    files[SECTIONS] = write_jsonl(tmp / SECTIONS, (s.__dict__ for s in base.sections.values()))
            draft.dense.save(str(tmp / DENSE))
            draft.lexical.save(tmp / LEXICAL)
            files.update(digests(tmp, [LEXICAL, ROWS]))
            manifest["files"] = files
            self._write_models(tmp, manifest, base.directory if out == base.directory else None)
            spec = validate_manifest(manifest, tmp / MANIFEST)  # never write a manifest the next open refuses
            write_text_atomic(tmp / MANIFEST, json.dumps(manifest, indent=2))
            with writer_lock(out):
                if out == base.directory and base.stamp is not None and manifest_stamp(out) != base.stamp:
                    raise CollectionChanged(f"{out} was changed by another writer after this Collection read it; "
                                            "nothing was written (open it again and repeat the change)")
                swap_in(tmp, out)
                stamp = manifest_stamp(out)
        except BaseException as exc:
            full = disk_full_error(exc, out, tmp, base.directory)  # read before tmp goes: what it held
            shutil.rmtree(tmp, ignore_errors=True)
            if full is not None:
                raise full.error() from exc
            raise
        self._models = {key: str(out / manifest[key]["dir"]) for key in self._models}
        self._snap = load_snapshot(out, spec, base.encoders, False, stamp)

    def _write_models(self, tmp: Path, manifest: Dict[str, Any], own: Optional[Path]) -> None:
        """The encoders the manifest names, inside ``tmp``: copied (reflinked where the file system can) from
        where the collection holds them, or from where the build found them; never a hard link to a file that
        another place owns (:func:`~.store.copy_tree`; ``own``: the version this write replaces)."""
        for key, src in self._models.items():
            copy_tree(Path(src), tmp / manifest[key]["dir"], own_root=own)

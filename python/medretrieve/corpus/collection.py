"""A collection: one directory holding everything needed to search one corpus.

Layout (``format: medretrieve-collection-1``)::

    manifest.json     encoders (paths inside the collection + sha256), chunking and index settings, counts,
                      versions, and the size and sha256 of every file below but the index (which checks itself)
    chunks.jsonl      one chunk per line, in row order: row, chunk_id, document_id, title, section, text,
                      overlap, position, parent_id, label, metadata (lines are appended, never rewritten)
    rows/             per-row arrays read at open (memory-mapped): line offsets, labels, deleted flags,
                      document of each row, and the document ids (:mod:`.chunks`)
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
renames, so a failure leaves either the old collection or nothing; the next
open or write cleans up after a killed one (:mod:`.store`). Opening checks the
files against the manifest and raises :class:`~.store.DamagedCollection`
naming a file that was changed.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from .builder import (
    CollectionBuilder, chunk_rows, embed_chunks, geometry_mismatch, lexical_text, source_fingerprint,
)
from .chunking import Chunk, ChunkingConfig, SectionPart, chunk_record
from .chunks import ROWS, ChunkRow, ChunkTable
from .lexical import TOKENIZER_VERSION, LexicalIndex
from .sources import ReadReport, Record, SourceLike, read_records
from .._files import new_temp_dir, swap_in
from .store import (
    CHUNKS, DENSE, FORMAT, LEXICAL, MANIFEST, SECTIONS, DamagedCollection, check_file, digests, file_digest,
    inside, is_collection, link_or_copy_tree, read_jsonl, recover_leftovers, write_jsonl,
)


VERIFY_BELOW = 64 << 20  # bytes: smaller collections have every file's sha256 checked at open


class Collection:
    """Chunks + dense index + lexical index + manifest of one corpus (see module docstring)."""

    def __init__(self, directory: Path, manifest: Dict[str, Any], rows: ChunkTable,
                 sections: Optional[Dict[str, SectionPart]], dense, lexical: LexicalIndex,
                 encoder_dir: Optional[str] = None, query_encoder_dir: Optional[str] = None,
                 model_sources: Optional[Dict[str, str]] = None) -> None:
        self.directory = Path(directory)
        self.manifest = manifest
        self.rows = rows
        self._sections = sections  # None: still in sections.jsonl, read on first use
        self.dense = dense
        self.lexical = lexical
        self.chunking = ChunkingConfig.from_dict(manifest["chunking"])
        # where the collection's own models are copied from on a write (at build: where the build found them);
        # a model the caller names instead is used for encoding but never written into the collection
        overrides = {"encoder": encoder_dir, "query_encoder": query_encoder_dir}
        self._models: Dict[str, str] = dict(model_sources) if model_sources is not None else {
            key: self._model_path(manifest[key]) for key in overrides
            if manifest.get(key) is not None and not (overrides[key] and Path(manifest[key]["dir"]).is_absolute())}
        self._encoder_dir = str(encoder_dir or self._models["encoder"])
        self._query_encoder_dir = str(query_encoder_dir or self._models.get("query_encoder", self._encoder_dir))
        self._article_encoder = None
        self._query_encoder = None
        self._verify = True  # check sections.jsonl's digest when it is read
        self._dense_mapped = False  # the dense index is a read-only memory map (copied in before a change)
        self.encoder_threads: Optional[int] = None  # ONNX Runtime intra-op threads of the encoders (None: ORT's)
        self._refresh_arrays()

    def _model_path(self, info: Dict[str, Any]) -> str:
        """An encoder directory the manifest names: inside the collection (ValueError for one outside it, which
        only a caller may name, with ``encoder=`` / ``query_encoder=``)."""
        where = info["dir"]
        if Path(where).is_absolute():
            raise ValueError(f"{self.directory / MANIFEST} names the encoder directory {where}, outside the "
                             "collection (collections built before medretrieve 0.2 did); open it with "
                             "encoder= / query_encoder= (CLI: --encoder / --query-encoder) naming the model to "
                             "trust, or rebuild the collection")
        return str(inside(self.directory, where))

    # ------------------------------------------------------------- derived arrays
    def _refresh_arrays(self) -> None:
        self.alive = ~np.asarray(self.rows.deleted, dtype=bool)
        self.labels = np.asarray(self.rows.labels, dtype=np.int64)
        self._n_live = int(self.alive.sum())
        self._n_documents = len(np.unique(self.rows.document[self.alive])) if len(self.rows) else 0
        self._doc_rows: Optional[Tuple[np.ndarray, np.ndarray]] = None  # live rows by document code, bounds
        self._allowed: Dict[Tuple[int, ...], np.ndarray] = {}  # label set -> live rows carrying one of them

    def __len__(self) -> int:
        """Number of live chunks."""
        return self._n_live

    def allowed(self, labels: Sequence[int]) -> np.ndarray:
        """Boolean mask of the live rows carrying one of ``labels`` (kept per label set until the next change:
        a search routed to a section reads it without a pass over every row)."""
        key = tuple(sorted({int(x) for x in labels}))
        mask = self._allowed.get(key)
        if mask is None:
            mask = self._allowed[key] = self.alive & np.isin(self.labels, key)
        return mask

    @property
    def n_documents(self) -> int:
        """Number of live documents."""
        return self._n_documents

    @property
    def sections(self) -> Dict[str, SectionPart]:
        """The parent sections by id (read from sections.jsonl on first use)."""
        if self._sections is None:
            files = self.manifest.get("files") or {}
            parts = read_jsonl(self.directory / SECTIONS, files.get(SECTIONS) if self._verify else None)
            try:
                self._sections = {p.section_id: p for p in (SectionPart(**d) for d in parts)}
            except TypeError as exc:
                raise DamagedCollection(f"{self.directory / SECTIONS}: a line lacks a field ({exc})") from None
        return self._sections

    @property
    def dim(self) -> int:
        return int(self.manifest["encoder"]["dim"])

    @property
    def encoder_dir(self) -> str:
        """The directory of the article (or symmetric) encoder in use (the collection's own copy unless replaced
        at open)."""
        return self._encoder_dir

    @property
    def normalized(self) -> bool:
        """Whether chunk vectors are unit length (inner product = cosine); False for raw inner products
        (MedCPT). Collections built before this was recorded were always normalised."""
        return bool(self.manifest["index"].get("normalized", True))

    # ------------------------------------------------------------- encoders
    @property
    def query_encoder_dir(self) -> str:
        """The directory of the query encoder searches use (the collection's own, or the one named at open)."""
        return self._query_encoder_dir

    def article_encoder(self):
        if self._article_encoder is None:
            from ..models.encoders import ArticleEncoder

            self._article_encoder = ArticleEncoder.from_dir(self._encoder_dir, threads=self.encoder_threads)
        return self._article_encoder

    def query_encoder(self):
        if self._query_encoder is None:
            from ..models.encoders import QueryEncoder

            enc = QueryEncoder.from_dir(self._query_encoder_dir, threads=self.encoder_threads)
            if enc.dim != self.dense.dim:
                raise ValueError(f"query encoder {self._query_encoder_dir} gives {enc.dim}-dim vectors but the "
                                 f"collection's index holds {self.dense.dim}-dim vectors")
            if enc.manifest.normalize != self.normalized:
                raise ValueError(geometry_mismatch(self._query_encoder_dir, enc.manifest.normalize,
                                                    self.normalized))
            self._query_encoder = enc
        return self._query_encoder

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors float32 [n, dim] (one fast unpadded call for a single query)."""
        enc = self.query_encoder()
        if len(texts) == 1:
            return np.asarray(enc.encode_query(texts[0]), dtype=np.float32)[None, :]
        return np.asarray(enc.encode(list(texts)), dtype=np.float32)

    # ------------------------------------------------------------- lookups
    def parent(self, parent_id: str) -> Optional[SectionPart]:
        """The whole section a chunk belongs to (context for a hit)."""
        return self.sections.get(parent_id)

    def document_rows(self, document_id: str) -> List[int]:
        """Rows of the live chunks of one document, in document order (empty when unknown)."""
        if self._doc_rows is None:  # live rows grouped by document code: two arrays, no per-document objects
            live = np.flatnonzero(self.alive)
            codes = np.asarray(self.rows.document)[live]
            order = np.argsort(codes, kind="stable")
            bounds = np.searchsorted(codes[order], np.arange(len(self.rows.documents) + 1))
            self._doc_rows = (live[order], bounds)
        code = self.rows.document_code(document_id)
        if code is None:
            return []
        rows, bounds = self._doc_rows
        return rows[bounds[code]:bounds[code + 1]].tolist()

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        """Stored (dequantised) vectors of ``rows``, float32 [n, dim]."""
        if len(rows) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.asarray(self.dense.get_items(np.asarray(rows, dtype=np.int64)), dtype=np.float32)

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
        ``resume``: a build of paths that was interrupted carries on from its last checkpoint when run again with
        the same sources and settings (False: start afresh); a failed build of records in memory leaves nothing.
        ``threads``: threads of the HNSW build (-1: all cores). Nothing is swapped in before the build is complete.
        Raises ValueError when nothing readable is in the source.
        """
        report = report if report is not None else ReadReport()
        builder = CollectionBuilder(out_dir, encoder, query_encoder, chunking, dtype, M, ef_construction,
                                    batch_size=batch_size, chunk_batch=chunk_batch, threads=threads,
                                    overwrite=overwrite, resume=resume,
                                    source_key=source_fingerprint(source, format, errors), progress=progress)
        try:
            records = read_records(source, format=format, errors=errors, report=report)
            builder.add_records(itertools.islice(records, builder.records_done, None))
            out = builder.finish(report)
        except BaseException:
            if builder.key is None:
                builder.abandon()  # records in memory cannot be recognised again: nothing to resume
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
        if Path(out_dir).resolve() == self.directory.resolve():
            raise ValueError(f"{out_dir} is this collection's own directory; re-encode into another one")
        index = self.manifest["index"]
        builder = CollectionBuilder(out_dir, encoder, query_encoder, self.chunking, index["dtype"], index["M"],
                                    index["ef_construction"], batch_size=batch_size, threads=threads,
                                    overwrite=overwrite, resume=False, progress=progress)
        try:
            written: set = set()
            live = np.flatnonzero(self.alive)
            for start in range(0, len(live), builder.chunk_batch):
                old = [self.rows[int(r)] for r in live[start:start + builder.chunk_batch]]
                chunks = [Chunk(r.chunk_id, r.document_id, r.title, r.section, r.text, r.overlap, r.position,
                                r.parent_id, r.label, r.metadata) for r in old]
                parts = [self.sections[p] for p in dict.fromkeys(r.parent_id for r in old)
                         if p not in written and p in self.sections]
                written.update(p.section_id for p in parts)
                vectors = embed_chunks(builder.encoder(), chunks, self.chunking, batch_size,
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
        size; texts are read when a search reaches them. ``verify``: True checks every file against its sha256 in
        the manifest, False only sizes and row order, ``"auto"`` checks digests when the files total under
        64 MiB. Raises FileNotFoundError when ``directory`` holds no collection and
        :class:`~.store.DamagedCollection` (a ValueError) naming the file that does not match the manifest.
        """
        from ..index import Index

        d = Path(directory)
        recover_leftovers(d)
        mpath = d / MANIFEST
        if not mpath.is_file():
            raise FileNotFoundError(f"{d} is not a medretrieve collection (no {MANIFEST})")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise DamagedCollection(f"{mpath} is not valid JSON ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ValueError(f"{mpath}: unknown collection format "
                             f"{manifest.get('format') if isinstance(manifest, dict) else None!r} (expected {FORMAT})")
        files = manifest.get("files") or {}  # absent in collections written before the files were listed
        full = verify is True or (verify == "auto" and sum(f.get("bytes", 0) for f in files.values()) < VERIFY_BELOW)
        if full:
            for name, digest in files.items():
                check_file(d / name, digest)
        rows = ChunkTable.open(d, files.get(CHUNKS))
        dense = Index.load(str(d / DENSE), mmap=True)
        lexical = LexicalIndex.load(d / LEXICAL)
        if lexical.tokenizer_version != TOKENIZER_VERSION:
            # indexed by another tokenizer: re-tokenise the live rows in memory (written on the next save)
            fresh = LexicalIndex(lexical.stem, lexical.remove_stopwords, lexical.k1, lexical.b)
            live = [rows[int(i)] for i in np.flatnonzero(~np.asarray(rows.deleted))]
            fresh.add([lexical_text(r.title, r.text, r.overlap) for r in live], [r.row for r in live])
            lexical = fresh
        col = cls(d, manifest, rows, None, dense, lexical, encoder, query_encoder)
        col._verify = full
        col._dense_mapped = True
        col.encoder_threads = encoder_threads
        col._check_consistent()
        return col

    # ------------------------------------------------------------- updates
    def add(self, source: SourceLike, errors: str = "skip", batch_size: int = 64, progress: bool = False,
            format: str = "auto", report: Optional[ReadReport] = None) -> int:
        """Add new documents (ids already present are rejected as malformed); returns chunks added."""
        report = report if report is not None else ReadReport()
        present = {self.rows.documents[j] for j in np.unique(np.asarray(self.rows.document)[self.alive])}
        records = []
        for rec in read_records(source, format=format, errors=errors, report=report):
            if rec.id in present:
                msg = f"document {rec.id!r} is already in the collection (delete it first)"
                if errors == "raise":
                    raise ValueError(msg)
                report.skipped.append((f"record {rec.id}", msg))
                continue
            records.append(rec)
        if not records:
            return 0
        before = len(self.rows)
        self._ingest(records, batch_size, progress)
        self._commit()
        return len(self.rows) - before

    def delete(self, doc_ids: Union[str, Iterable[str]]) -> int:
        """Remove documents by id (one id or several); returns chunks removed (unknown ids are ignored)."""
        wanted = {doc_ids} if isinstance(doc_ids, str) else {str(d) for d in doc_ids}
        rows = self.rows.rows_of_documents(sorted(wanted))
        hit = rows[self.alive[rows]].tolist()
        if not hit:
            return 0
        self._writable()
        self.rows.deleted = np.array(self.rows.deleted, dtype=bool)  # a writable copy of the mapped array
        self.rows.deleted[hit] = True
        for r in hit:
            self.dense.mark_deleted(r)
        self.lexical.delete(hit)
        sections = self.sections
        for sid in [s for s, p in sections.items() if p.document_id in wanted]:
            del sections[sid]
        self._refresh_arrays()
        self._commit()
        return len(hit)

    def _writable(self) -> None:
        """Before a change: the dense index in memory (an opened collection maps its file read-only)."""
        if self._dense_mapped:
            from ..index import Index

            self.dense = Index.load(str(self.directory / DENSE), mmap=False)
            self._dense_mapped = False

    def _ingest(self, records: Sequence[Record], batch_size: int, progress: bool) -> None:
        chunks: List[Chunk] = []
        parts: List[SectionPart] = []
        for rec in records:
            rec_chunks, rec_parts = chunk_record(rec, self.chunking)
            chunks.extend(rec_chunks)
            parts.extend(rec_parts)
        vecs = embed_chunks(self.article_encoder(), chunks, self.chunking, batch_size, progress,
                            self.normalized)
        self.add_rows(chunk_rows(chunks, len(self.rows)), vecs, parts)

    def add_rows(self, rows: Sequence[ChunkRow], vectors: np.ndarray, sections: Sequence[SectionPart] = ()) -> None:
        """Add chunks whose vectors were computed elsewhere (an out-of-core or distributed build, a benchmark's
        filler), in memory; :meth:`save` writes them. ``rows[i].row`` must number on from ``len(self.rows)``;
        ``vectors`` [len(rows), dim] float32 in the geometry of the collection's encoder."""
        vectors = np.asarray(vectors, dtype=np.float32)
        start = len(self.rows)
        if vectors.shape != (len(rows), self.dim):
            raise ValueError(f"vectors must be [{len(rows)}, {self.dim}], got {vectors.shape}")
        if [r.row for r in rows] != list(range(start, start + len(rows))):
            raise ValueError(f"rows must be numbered {start}..{start + len(rows) - 1} in order")
        if not len(rows):
            return
        self._writable()
        for part in sections:
            self.sections[part.section_id] = part
        ids = np.arange(start, start + len(rows), dtype=np.int64)
        if start == 0 and self.manifest["index"]["dtype"] == "int8":
            self.dense.train(vectors)  # int8 quantization centre from the first batch
        need = start + len(rows)
        if self.dense.get_max_elements() < need:
            self.dense.resize_index(max(need, int(self.dense.get_max_elements() * 1.5)))
        self.dense.add(vectors, ids, np.array([r.label for r in rows], dtype=np.int64))
        self.rows.extend(rows)
        self.lexical.add([lexical_text(r.title, r.text, r.overlap) for r in rows], ids.tolist())
        self._refresh_arrays()

    def save(self, directory: Optional[Union[str, os.PathLike]] = None) -> None:
        """Write the collection (atomically, see the module docstring) to its directory, or to ``directory``,
        which it then lives in; ``add`` and ``delete`` save by themselves, :meth:`add_rows` does not."""
        self._commit(Path(directory) if directory is not None else None)

    def _commit(self, out: Optional[Path] = None) -> None:
        """Write everything to a temp dir beside ``out`` (default: the collection's directory), then swap it in
        (never half-written)."""
        out = out or self.directory
        recover_leftovers(out)
        if out != self.directory and out.exists() and not (is_collection(out) or not any(out.iterdir())):
            raise ValueError(f"{out} exists and is not a medretrieve collection; nothing was written")
        tmp = new_temp_dir(out)
        try:
            n_sections = (len(self._sections) if self._sections is not None
                          else (self.manifest.get("counts") or {}).get("sections", 0))
            self.manifest["counts"] = {"documents": self.n_documents, "chunks": len(self),
                                       "sections": n_sections, "deleted_chunks": int((~self.alive).sum())}
            files = {CHUNKS: self.rows.write(tmp)}
            if self._sections is None:  # never read, so unchanged: copied as it is
                shutil.copyfile(self.directory / SECTIONS, tmp / SECTIONS)
                files[SECTIONS] = file_digest(tmp / SECTIONS)
            else:
                files[SECTIONS] = write_jsonl(tmp / SECTIONS, (s.__dict__ for s in self._sections.values()))
            self.dense.save(str(tmp / DENSE))
            self.lexical.save(tmp / LEXICAL)
            files.update(digests(tmp, [LEXICAL, ROWS]))
            self.manifest["files"] = files
            self._write_models(tmp)
            (tmp / MANIFEST).write_text(json.dumps(self.manifest, indent=2), encoding="utf-8")
            swap_in(tmp, out)
            self.directory = out
            self._models = {key: str(out / self.manifest[key]["dir"]) for key in self._models}
            self.rows = ChunkTable.open(out, files[CHUNKS])  # the rows now read from the written file
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _check_consistent(self) -> None:
        """DamagedCollection naming the file whose rows disagree with the others (a line lost or moved, an index
        of another size): checks that need no digest, so older and larger collections get them too."""
        d, rows = self.directory, self.rows
        counts = self.manifest.get("counts") or {}
        expected = counts.get("chunks", 0) + counts.get("deleted_chunks", 0) if counts else len(rows)
        if len(rows) != expected:
            raise DamagedCollection(f"{d / CHUNKS} holds {len(rows)} chunks, the manifest counts {expected}")
        for i in sorted({0, len(rows) // 2, len(rows) - 1} - {-1}):  # the row number of sample lines
            rows[i]
        if self.dense.get_current_count() != len(rows):
            raise DamagedCollection(f"{d / DENSE} holds {self.dense.get_current_count()} vectors for {len(rows)} "
                                    "chunks")
        if not self.lexical.has_exactly(np.flatnonzero(self.alive)):
            raise DamagedCollection(f"{d / LEXICAL} indexes {len(self.lexical)} chunks, not the {len(self)} live "
                                    f"chunks of {d / CHUNKS}")

    def _write_models(self, tmp: Path) -> None:
        """The encoders the manifest names, inside ``tmp``: linked from the collection's own copy, or copied in
        from where the build found them."""
        for key, src in self._models.items():
            link_or_copy_tree(Path(src), tmp / self.manifest[key]["dir"])



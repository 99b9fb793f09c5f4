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

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._version import __version__
from .chunking import Chunk, ChunkingConfig, SectionPart, chunk_record, overlap_weights
from .chunks import ROWS, ChunkRow, ChunkTable
from .lexical import TOKENIZER_VERSION, LexicalIndex
from .sources import ReadReport, Record, SourceLike, read_records
from .._files import new_temp_dir, swap_in
from .store import (
    CHUNKS, DENSE, FORMAT, LEXICAL, MANIFEST, MODELS, SECTIONS, DamagedCollection, check_file, digests, file_digest,
    inside, is_collection, link_or_copy_tree, read_jsonl, recover_leftovers, write_jsonl,
)


def _lexical_text(title: str, text: str, overlap: str) -> str:
    """What BM25 indexes for a chunk: its title, the overlap carried over and its own text."""
    return " ".join(p for p in (title, overlap, text) if p)


def _versions() -> Dict[str, str]:
    from importlib import metadata

    out = {"medretrieve": __version__}
    for pkg in ("numpy", "bm25s", "onnxruntime"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _encoder_info(directory: Union[str, os.PathLike], inside_dir: str) -> Dict[str, Any]:
    """What the manifest records of an encoder that will be copied to ``inside_dir`` of the collection."""
    from ..models.encoders import default_model_dir, read_manifest

    d = default_model_dir() if str(directory) == "default" else Path(directory).expanduser().resolve()
    m = read_manifest(d)
    return {"dir": inside_dir, "source": str(d), "sha256": m.sha256, "kind": m.kind, "dim": m.dim,
            "normalize": m.normalize}


def _embed_chunks(encoder, chunks: Sequence[Chunk], cfg: ChunkingConfig, batch_size: int,
                  progress: bool, normalize: bool = True) -> np.ndarray:
    """Chunk vectors with the overlap down-weighted, normalised when ``normalize`` (module docstring)."""
    core = encoder.encode([(c.title, c.core_text) for c in chunks], batch_size=batch_size, progress=progress)
    core = np.asarray(core, dtype=np.float32)
    with_ov = [i for i, c in enumerate(chunks) if c.overlap_text]
    if with_ov:
        ov = np.asarray(encoder.encode([(chunks[i].title, chunks[i].overlap_text) for i in with_ov],
                                       batch_size=batch_size, progress=False), dtype=np.float32)
        for j, i in enumerate(with_ov):
            wc, wo = overlap_weights(chunks[i], cfg.overlap_weight)
            core[i] = wc * core[i] + wo * ov[j]
    if not normalize:
        return core
    norms = np.linalg.norm(core, axis=1, keepdims=True)
    return core / np.maximum(norms, 1e-12)


def encoder_pair(encoder: Union[str, os.PathLike], query_encoder: Optional[Union[str, os.PathLike]]
                 ) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """Manifest entries of an article encoder and its query encoder (None: the encoder serves both, so it must
    be symmetric); ValueError when the two differ in width or geometry."""
    enc_info = _encoder_info(encoder, f"{MODELS}/encoder")
    if query_encoder is None and enc_info["kind"] != "symmetric":
        raise ValueError(f"{encoder} holds a {enc_info['kind']!r} model; without a query_encoder the "
                         "encoder must be symmetric (serve queries and articles)")
    q_info = _encoder_info(query_encoder, f"{MODELS}/query") if query_encoder is not None else None
    if q_info is not None and q_info["dim"] != enc_info["dim"]:
        raise ValueError(f"query encoder dim {q_info['dim']} != article encoder dim {enc_info['dim']}")
    if q_info is not None and q_info["normalize"] != enc_info["normalize"]:
        raise ValueError(_geometry_mismatch(query_encoder, q_info["normalize"], enc_info["normalize"]))
    return enc_info, q_info


def new_manifest(enc_info: Dict[str, Any], q_info: Optional[Dict[str, Any]], cfg: ChunkingConfig, dtype: str,
                 M: int, ef_construction: int) -> Dict[str, Any]:
    """The manifest of a new collection (encoders as :func:`_encoder_info` describes them)."""
    return {
        "format": FORMAT,
        "encoder": enc_info,
        "query_encoder": q_info,
        "chunking": cfg.to_dict(),
        "index": {"dtype": dtype, "M": int(M), "ef_construction": int(ef_construction), "space": "ip",
                  "normalized": enc_info["normalize"]},
        "versions": _versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _geometry_mismatch(query_dir: Any, query_normalizes: bool, articles_normalized: bool) -> str:
    what = {True: "unit-length (cosine)", False: "raw inner-product"}
    return (f"query encoder {query_dir} gives {what[query_normalizes]} vectors but the article vectors are "
            f"{what[articles_normalized]} ones: a query/article pair must share one geometry (export both with "
            "the same --normalize / --no-normalize)")


def _new_index(dim: int, dtype: str, M: int, ef_construction: int, capacity: int):
    from ..index import Index

    index = Index(space="ip", dim=dim)
    index.init_index(max_elements=max(capacity, 16), M=M, ef_construction=ef_construction, dtype=dtype)
    return index


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
        self._n_documents = len(np.unique(self.rows.document[self.alive])) if len(self.rows) else 0
        self._doc_rows: Optional[Dict[str, List[int]]] = None

    def __len__(self) -> int:
        """Number of live chunks."""
        return int(self.alive.sum())

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
                raise ValueError(_geometry_mismatch(self._query_encoder_dir, enc.manifest.normalize,
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
        if self._doc_rows is None:
            live = np.flatnonzero(self.alive)
            docs = np.asarray(self.rows.document)[live]
            order = np.argsort(docs, kind="stable")
            bounds = np.flatnonzero(np.diff(docs[order])) + 1
            names = self.rows.documents
            self._doc_rows = {names[int(docs[g[0]])]: live[g].tolist()
                              for g in np.split(order, bounds) if len(g)}
        return self._doc_rows.get(document_id, [])

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
    ) -> "Collection":
        """Read ``source``, chunk, embed and index it into ``out_dir`` (atomically).

        ``source``: a path (file or directory), a list of paths, or a list of
        record dicts / :class:`~medretrieve.corpus.sources.Record`. ``encoder``: an
        article or symmetric model directory (``medretrieve export-onnx``); ``query_encoder``:
        the query-side model (defaults to ``encoder``, which must then be
        symmetric); ``"default"`` names the embedded model. Both are copied into
        the collection. ``overwrite``: replace an existing collection at
        ``out_dir`` (never a directory that is not a collection, unless empty).
        Raises ValueError when nothing readable is in the source.
        """
        out = Path(out_dir)
        recover_leftovers(out)
        if out.exists():
            if not overwrite:
                raise FileExistsError(f"{out} exists; pass overwrite=True (CLI: --overwrite) to replace it")
            if not out.is_dir() or (any(out.iterdir()) and not is_collection(out)):
                raise ValueError(f"{out} exists and is not a medretrieve collection; overwrite only replaces a "
                                 "collection (or an empty directory), so nothing was deleted")
        if isinstance(chunking, dict):
            chunking = ChunkingConfig.from_dict(chunking)
        cfg = chunking or ChunkingConfig()
        if dtype not in ("int8", "float32"):
            raise ValueError(f"dtype must be 'int8' or 'float32', got {dtype!r}")
        enc_info, q_info = encoder_pair(encoder, query_encoder)
        report = report if report is not None else ReadReport()
        records = list(read_records(source, format=format, errors=errors, report=report))
        if not records:
            raise ValueError(f"no readable records in the source ({report.summary()})")
        manifest = new_manifest(enc_info, q_info, cfg, dtype, M, ef_construction)
        manifest["read_report"] = {"records": report.records, "skipped": report.skipped[:100],
                                   "n_skipped": report.n_skipped}
        sources = {"encoder": enc_info["source"], **({"query_encoder": q_info["source"]} if q_info else {})}
        col = cls(out, manifest, ChunkTable(), {}, None, LexicalIndex(), model_sources=sources)
        col.dense = _new_index(enc_info["dim"], dtype, M, ef_construction, 0)
        col._ingest(records, batch_size, progress)
        col._commit()
        return col

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
            fresh.add([_lexical_text(r.title, r.text, r.overlap) for r in live], [r.row for r in live])
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
        vecs = _embed_chunks(self.article_encoder(), chunks, self.chunking, batch_size, progress, self.normalized)
        start = len(self.rows)
        rows = [ChunkRow(start + j, c.chunk_id, c.document_id, c.title, c.section, c.core_text, c.overlap_text,
                         c.position, c.parent_id, c.label, c.metadata) for j, c in enumerate(chunks)]
        self.add_rows(rows, vecs, parts)

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
        for r in rows:
            self.rows.append(r)
        self.lexical.add([_lexical_text(r.title, r.text, r.overlap) for r in rows], ids.tolist())
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



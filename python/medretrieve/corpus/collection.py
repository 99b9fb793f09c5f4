"""A collection: one directory holding everything needed to search one corpus.

Layout (``format: medretrieve-collection-1``)::

    manifest.json     encoders (paths inside the collection + sha256), chunking and index settings, counts,
                      versions, and the size and sha256 of every file below but the index (which checks itself)
    chunks.jsonl      one chunk per line, in row order: row, chunk_id, document_id, title, section, text,
                      overlap, position, parent_id, label, metadata, deleted
    sections.jsonl    the parent sections (section_id, document_id, title, section, text)
    dense.index       medretrieve.Index over the chunk vectors (id = row; label = section category)
    lexical/          the BM25 index (medretrieve.corpus.lexical.LexicalIndex)
    models/encoder    the article (or symmetric) encoder, copied in at build; models/query: the query encoder
                      when it is a separate model

Chunk vectors: ``normalize(w_core * e(title, core) + w_overlap * e(title, overlap))``
with the weights of :func:`medretrieve.corpus.chunking.overlap_weights` (an overlap
token counts half a core token).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from .._version import __version__
from .chunking import Chunk, ChunkingConfig, SectionPart, chunk_record, overlap_weights
from .lexical import TOKENIZER_VERSION, LexicalIndex
from .sources import FORMATS, ReadReport, Record, SourceLike, read_records
from .store import (
    CHUNKS, DENSE, FORMAT, LEXICAL, MANIFEST, MODELS, SECTIONS, DamagedCollection, check_file, digests, inside,
    is_collection, link_or_copy_tree, new_temp_dir, read_jsonl, recover_leftovers, swap_in, write_jsonl,
)


@dataclass
class ChunkRow:
    """One stored chunk (row = its id in the dense and lexical indexes)."""

    row: int
    chunk_id: str
    document_id: str
    title: str
    section: str
    text: str  # core text (what a hit shows)
    overlap: str  # context carried over from the previous chunk
    position: int
    parent_id: str
    label: int
    metadata: Dict[str, Any] = field(default_factory=dict)
    deleted: bool = False



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
    return {"dir": inside_dir, "source": str(d), "sha256": m.sha256, "kind": m.kind, "dim": m.dim}


def _embed_chunks(encoder, chunks: Sequence[Chunk], cfg: ChunkingConfig, batch_size: int,
                  progress: bool) -> np.ndarray:
    """Chunk vectors with the overlap down-weighted (module docstring)."""
    core = encoder.encode([(c.title, c.core_text) for c in chunks], batch_size=batch_size, progress=progress)
    core = np.asarray(core, dtype=np.float32)
    with_ov = [i for i, c in enumerate(chunks) if c.overlap_text]
    if with_ov:
        ov = np.asarray(encoder.encode([(chunks[i].title, chunks[i].overlap_text) for i in with_ov],
                                       batch_size=batch_size, progress=False), dtype=np.float32)
        for j, i in enumerate(with_ov):
            wc, wo = overlap_weights(chunks[i], cfg.overlap_weight)
            core[i] = wc * core[i] + wo * ov[j]
    norms = np.linalg.norm(core, axis=1, keepdims=True)
    return core / np.maximum(norms, 1e-12)


def _new_index(dim: int, dtype: str, M: int, ef_construction: int, capacity: int):
    from ..index import Index

    index = Index(space="ip", dim=dim)
    index.init_index(max_elements=max(capacity, 16), M=M, ef_construction=ef_construction, dtype=dtype)
    return index


class Collection:
    """Chunks + dense index + lexical index + manifest of one corpus (see module docstring)."""

    def __init__(self, directory: Path, manifest: Dict[str, Any], rows: List[ChunkRow],
                 sections: Dict[str, SectionPart], dense, lexical: LexicalIndex,
                 encoder_dir: Optional[str] = None, query_encoder_dir: Optional[str] = None,
                 model_sources: Optional[Dict[str, str]] = None) -> None:
        self.directory = Path(directory)
        self.manifest = manifest
        self.rows = rows
        self.sections = sections
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
        self.alive = np.array([not r.deleted for r in self.rows], dtype=bool)
        self.labels = np.array([r.label for r in self.rows], dtype=np.int64)
        self._n_documents = len({r.document_id for r in self.rows if not r.deleted})
        self._doc_rows: Optional[Dict[str, List[int]]] = None

    def __len__(self) -> int:
        """Number of live chunks."""
        return int(self.alive.sum())

    @property
    def n_documents(self) -> int:
        """Number of live documents."""
        return self._n_documents

    @property
    def dim(self) -> int:
        return int(self.manifest["encoder"]["dim"])

    # ------------------------------------------------------------- encoders
    def article_encoder(self):
        if self._article_encoder is None:
            from ..models.encoders import ArticleEncoder

            self._article_encoder = ArticleEncoder.from_dir(self._encoder_dir)
        return self._article_encoder

    def query_encoder(self):
        if self._query_encoder is None:
            from ..models.encoders import QueryEncoder

            enc = QueryEncoder.from_dir(self._query_encoder_dir)
            if enc.dim != self.dense.dim:
                raise ValueError(f"query encoder {self._query_encoder_dir} gives {enc.dim}-dim vectors but the "
                                 f"collection's index holds {self.dense.dim}-dim vectors")
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
            by_doc: Dict[str, List[int]] = {}
            for i, r in enumerate(self.rows):
                if not r.deleted:
                    by_doc.setdefault(r.document_id, []).append(i)
            self._doc_rows = by_doc
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
        enc_info = _encoder_info(encoder, f"{MODELS}/encoder")
        if query_encoder is None and enc_info["kind"] != "symmetric":
            raise ValueError(f"{encoder} holds a {enc_info['kind']!r} model; without a query_encoder the "
                             "encoder must be symmetric (serve queries and articles)")
        q_info = _encoder_info(query_encoder, f"{MODELS}/query") if query_encoder is not None else None
        if q_info is not None and q_info["dim"] != enc_info["dim"]:
            raise ValueError(f"query encoder dim {q_info['dim']} != article encoder dim {enc_info['dim']}")
        report = report if report is not None else ReadReport()
        records = list(read_records(source, format=format, errors=errors, report=report))
        if not records:
            raise ValueError(f"no readable records in the source ({report.summary()})")
        manifest = {
            "format": FORMAT,
            "encoder": enc_info,
            "query_encoder": q_info,
            "chunking": cfg.to_dict(),
            "index": {"dtype": dtype, "M": int(M), "ef_construction": int(ef_construction), "space": "ip"},
            "versions": _versions(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "read_report": {"records": report.records, "skipped": report.skipped[:100],
                            "n_skipped": report.n_skipped},
        }
        sources = {"encoder": enc_info["source"], **({"query_encoder": q_info["source"]} if q_info else {})}
        col = cls(out, manifest, [], {}, None, LexicalIndex(), model_sources=sources)
        col.dense = _new_index(enc_info["dim"], dtype, M, ef_construction, 0)
        col._ingest(records, batch_size, progress)
        col._commit()
        return col

    @classmethod
    def open(cls, directory: Union[str, os.PathLike], encoder: Optional[str] = None,
             query_encoder: Optional[str] = None) -> "Collection":
        """Open a built collection. ``encoder`` / ``query_encoder`` replace the models the collection holds
        (e.g. a query encoder from ``fit-query-encoder``).

        Raises FileNotFoundError when ``directory`` holds no collection and :class:`~.store.DamagedCollection`
        (a ValueError) naming the file when a file does not match the manifest.
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
        try:
            rows = [ChunkRow(**r) for r in read_jsonl(d / CHUNKS, files.get(CHUNKS))]
            parts = [SectionPart(**s) for s in read_jsonl(d / SECTIONS, files.get(SECTIONS))]
        except TypeError as exc:
            raise DamagedCollection(f"{d}: a chunk or section line lacks a field ({exc})") from None
        for name, digest in files.items():
            if name.startswith(LEXICAL + "/"):
                check_file(d / name, digest)
        dense = Index.load(str(d / DENSE))
        lexical = LexicalIndex.load(d / LEXICAL)
        if lexical.tokenizer_version != TOKENIZER_VERSION:
            # indexed by another tokenizer: re-tokenise the live rows in memory (written on the next save)
            fresh = LexicalIndex(lexical.stem, lexical.remove_stopwords, lexical.k1, lexical.b)
            live = [r for r in rows if not r.deleted]
            fresh.add([_lexical_text(r.title, r.text, r.overlap) for r in live], [r.row for r in live])
            lexical = fresh
        _check_consistent(d, manifest, rows, dense, lexical)
        return cls(d, manifest, rows, {s.section_id: s for s in parts}, dense, lexical, encoder, query_encoder)

    # ------------------------------------------------------------- updates
    def add(self, source: SourceLike, errors: str = "skip", batch_size: int = 64, progress: bool = False,
            format: str = "auto", report: Optional[ReadReport] = None) -> int:
        """Add new documents (ids already present are rejected as malformed); returns chunks added."""
        report = report if report is not None else ReadReport()
        present = {r.document_id for r in self.rows if not r.deleted}
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
        hit = [r for r in self.rows if r.document_id in wanted and not r.deleted]
        if not hit:
            return 0
        for r in hit:
            r.deleted = True
            self.dense.mark_deleted(r.row)
        self.lexical.delete([r.row for r in hit])
        for sid in [s for s, p in self.sections.items() if p.document_id in wanted]:
            del self.sections[sid]
        self._refresh_arrays()
        self._commit()
        return len(hit)

    def _ingest(self, records: Sequence[Record], batch_size: int, progress: bool) -> None:
        chunks: List[Chunk] = []
        for rec in records:
            rec_chunks, parts = chunk_record(rec, self.chunking)
            chunks.extend(rec_chunks)
            for p in parts:
                self.sections[p.section_id] = p
        vecs = _embed_chunks(self.article_encoder(), chunks, self.chunking, batch_size, progress)
        start = len(self.rows)
        ids = np.arange(start, start + len(chunks), dtype=np.int64)
        labels = np.array([c.label for c in chunks], dtype=np.int64)
        need = start + len(chunks)
        if start == 0 and self.manifest["index"]["dtype"] == "int8":
            self.dense.train(vecs)  # int8 quantization centre from the first batch
        if self.dense.get_max_elements() < need:
            self.dense.resize_index(max(need, int(self.dense.get_max_elements() * 1.5)))
        self.dense.add(vecs, ids, labels)
        for i, c in zip(ids.tolist(), chunks):
            self.rows.append(ChunkRow(i, c.chunk_id, c.document_id, c.title, c.section, c.core_text,
                                      c.overlap_text, c.position, c.parent_id, c.label, c.metadata))
        self.lexical.add([_lexical_text(c.title, c.core_text, c.overlap_text) for c in chunks], ids.tolist())
        self._refresh_arrays()

    def _commit(self) -> None:
        """Write everything to a sibling temp dir, then swap it in (never half-written)."""
        out = self.directory
        recover_leftovers(out)
        tmp = new_temp_dir(out)
        try:
            self.manifest["counts"] = {"documents": self.n_documents, "chunks": len(self),
                                       "sections": len(self.sections),
                                       "deleted_chunks": int((~self.alive).sum())}
            files = {CHUNKS: write_jsonl(tmp / CHUNKS, (r.__dict__ for r in self.rows)),
                     SECTIONS: write_jsonl(tmp / SECTIONS, (s.__dict__ for s in self.sections.values()))}
            self.dense.save(str(tmp / DENSE))
            self.lexical.save(tmp / LEXICAL)
            files.update(digests(tmp, [LEXICAL]))
            self.manifest["files"] = files
            self._write_models(tmp)
            (tmp / MANIFEST).write_text(json.dumps(self.manifest, indent=2), encoding="utf-8")
            swap_in(tmp, out)
            self._models = {key: str(out / self.manifest[key]["dir"]) for key in self._models}
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _write_models(self, tmp: Path) -> None:
        """The encoders the manifest names, inside ``tmp``: linked from the collection's own copy, or copied in
        from where the build found them."""
        for key, src in self._models.items():
            link_or_copy_tree(Path(src), tmp / self.manifest[key]["dir"])


def _check_consistent(d: Path, manifest: Dict[str, Any], rows: List[ChunkRow], dense: Any,
                      lexical: LexicalIndex) -> None:
    """DamagedCollection naming the file whose rows disagree with the others (a line lost or moved, an index of
    another size): checks that need no digest, so older collections get them too."""
    for i, r in enumerate(rows):
        if r.row != i:
            raise DamagedCollection(f"{d / CHUNKS} line {i + 1} holds row {r.row}: lines are missing or out of "
                                    "order; rebuild the collection or restore the file")
    counts = manifest.get("counts") or {}
    expected = counts.get("chunks", 0) + counts.get("deleted_chunks", 0) if counts else len(rows)
    if len(rows) != expected:
        raise DamagedCollection(f"{d / CHUNKS} holds {len(rows)} chunks, the manifest counts {expected}")
    if dense.get_current_count() != len(rows):
        raise DamagedCollection(f"{d / DENSE} holds {dense.get_current_count()} vectors for {len(rows)} chunks")
    live = [r.row for r in rows if not r.deleted]
    if not lexical.has_exactly(live):
        raise DamagedCollection(f"{d / LEXICAL} indexes {len(lexical)} chunks, not the {len(live)} live chunks "
                                f"of {d / CHUNKS}")

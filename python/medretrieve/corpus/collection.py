"""A collection: one directory holding everything needed to search one corpus.

Layout (``format: medretrieve-collection-1``)::

    manifest.json     encoder dirs + sha256, chunking settings, index settings, counts, versions
    chunks.jsonl      one chunk per line: row, chunk_id, document_id, title, section, text,
                      overlap, position, parent_id, label, metadata, deleted
    sections.jsonl    the parent sections (section_id, document_id, title, section, text)
    dense.index       medretrieve.Index over the chunk vectors (id = row; label = section category)
    lexical/          the BM25 index (medretrieve.corpus.lexical.LexicalIndex)

Chunk vectors: ``normalize(w_core * e(title, core) + w_overlap * e(title, overlap))``
with the weights of :func:`medretrieve.corpus.chunking.overlap_weights` (an overlap
token counts half a core token).

Writes are atomic at directory level: a build (and every ``add`` / ``delete``)
writes a complete new directory next to the target and swaps it in with
renames, so a failure leaves either the old collection or nothing.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from .._version import __version__
from .chunking import Chunk, ChunkingConfig, SectionPart, chunk_record, overlap_weights
from .lexical import TOKENIZER_VERSION, LexicalIndex
from .sources import FORMATS, ReadReport, Record, SourceLike, read_records

FORMAT = "medretrieve-collection-1"
MANIFEST = "manifest.json"
CHUNKS = "chunks.jsonl"
SECTIONS = "sections.jsonl"
DENSE = "dense.index"
LEXICAL = "lexical"


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

    def to_json(self) -> str:
        return json.dumps(self.__dict__, ensure_ascii=False, separators=(",", ":"))


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


def _encoder_info(directory: Union[str, os.PathLike]) -> Dict[str, Any]:
    from ..models.encoders import read_manifest

    d = Path(directory).expanduser().resolve()
    m = read_manifest(d)
    return {"dir": str(d), "sha256": m.sha256, "kind": m.kind, "dim": m.dim}


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
                 encoder_dir: Optional[str] = None, query_encoder_dir: Optional[str] = None) -> None:
        self.directory = Path(directory)
        self.manifest = manifest
        self.rows = rows
        self.sections = sections
        self.dense = dense
        self.lexical = lexical
        self.chunking = ChunkingConfig.from_dict(manifest["chunking"])
        self._encoder_dir = encoder_dir or manifest["encoder"]["dir"]
        qe = manifest.get("query_encoder")
        self._query_encoder_dir = query_encoder_dir or (qe["dir"] if qe else self._encoder_dir)
        self._article_encoder = None
        self._query_encoder = None
        self.encoder_threads: Optional[int] = None  # ONNX Runtime intra-op threads of the encoders (None: ORT's)
        self._refresh_arrays()

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

            self._article_encoder = ArticleEncoder.from_dir(self._encoder_dir, threads=self.encoder_threads)
        return self._article_encoder

    def query_encoder(self):
        if self._query_encoder is None:
            from ..models.encoders import QueryEncoder

            enc = QueryEncoder.from_dir(self._query_encoder_dir, threads=self.encoder_threads)
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
        symmetric). ``overwrite``: replace an existing collection at ``out_dir``.
        Raises ValueError when nothing readable is in the source.
        """
        out = Path(out_dir)
        if out.exists() and not overwrite:
            raise FileExistsError(f"{out} exists; pass overwrite=True (CLI: --overwrite) to replace it")
        if isinstance(chunking, dict):
            chunking = ChunkingConfig.from_dict(chunking)
        cfg = chunking or ChunkingConfig()
        if dtype not in ("int8", "float32"):
            raise ValueError(f"dtype must be 'int8' or 'float32', got {dtype!r}")
        enc_info = _encoder_info(encoder)
        if query_encoder is None and enc_info["kind"] != "symmetric":
            raise ValueError(f"{encoder} holds a {enc_info['kind']!r} model; without a query_encoder the "
                             "encoder must be symmetric (serve queries and articles)")
        q_info = _encoder_info(query_encoder) if query_encoder is not None else None
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
        col = cls(out, manifest, [], {}, None, LexicalIndex(), enc_info["dir"],
                  q_info["dir"] if q_info else None)
        col.dense = _new_index(enc_info["dim"], dtype, M, ef_construction, 0)
        col._ingest(records, batch_size, progress)
        col._commit()
        return col

    @classmethod
    def open(cls, directory: Union[str, os.PathLike], encoder: Optional[str] = None,
             query_encoder: Optional[str] = None, mmap: bool = False,
             encoder_threads: Optional[int] = None) -> "Collection":
        """Open a built collection (``encoder`` / ``query_encoder`` override the manifest's dirs).

        ``mmap=True`` serves the dense index read-only from a memory map of ``dense.index``: processes that
        open the same collection share its pages (one copy in RAM for several server workers), but ``add`` and
        ``delete`` then raise; reopen without ``mmap`` to change the collection. ``encoder_threads``: ONNX Runtime
        intra-op threads per encoder call (None: ORT's default, one per core); a server running searches side by
        side wants 1."""
        from ..index import Index

        d = Path(directory)
        mpath = d / MANIFEST
        if not mpath.is_file():
            raise FileNotFoundError(f"{d} is not a medretrieve collection (no {MANIFEST})")
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT:
            raise ValueError(f"{mpath}: unknown collection format {manifest.get('format')!r} (expected {FORMAT})")
        rows: List[ChunkRow] = []
        with open(d / CHUNKS, "r", encoding="utf-8") as fh:
            for line in fh:
                rows.append(ChunkRow(**json.loads(line)))
        sections: Dict[str, SectionPart] = {}
        with open(d / SECTIONS, "r", encoding="utf-8") as fh:
            for line in fh:
                s = SectionPart(**json.loads(line))
                sections[s.section_id] = s
        dense = Index.load(str(d / DENSE), mmap=mmap)
        lexical = LexicalIndex.load(d / LEXICAL)
        if lexical.tokenizer_version != TOKENIZER_VERSION:
            # indexed by another tokenizer: re-tokenise the live rows in memory (written on the next save)
            fresh = LexicalIndex(lexical.stem, lexical.remove_stopwords, lexical.k1, lexical.b)
            live = [r for r in rows if not r.deleted]
            fresh.add([_lexical_text(r.title, r.text, r.overlap) for r in live], [r.row for r in live])
            lexical = fresh
        col = cls(d, manifest, rows, sections, dense, lexical, encoder, query_encoder)
        col.encoder_threads = encoder_threads
        return col

    # ------------------------------------------------------------- updates
    def add(self, source: SourceLike, errors: str = "skip", batch_size: int = 64, progress: bool = False,
            format: str = "auto", report: Optional[ReadReport] = None) -> int:
        """Add new documents (ids already present are rejected as malformed); returns chunks added."""
        self._check_writable("add")
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
        self._check_writable("delete")
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

    def _check_writable(self, what: str) -> None:
        if self.dense.stats().read_only:
            raise ValueError(f"cannot {what}: {self.directory} was opened read-only (Collection.open(..., mmap=True)); "
                             "open it without mmap to change it")

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
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            self.manifest["counts"] = {"documents": self.n_documents, "chunks": len(self),
                                       "sections": len(self.sections),
                                       "deleted_chunks": int((~self.alive).sum())}
            with open(tmp / CHUNKS, "w", encoding="utf-8") as fh:
                for r in self.rows:
                    fh.write(r.to_json() + "\n")
            with open(tmp / SECTIONS, "w", encoding="utf-8") as fh:
                for s in self.sections.values():
                    fh.write(json.dumps(s.__dict__, ensure_ascii=False, separators=(",", ":")) + "\n")
            self.dense.save(str(tmp / DENSE))
            self.lexical.save(tmp / LEXICAL)
            (tmp / MANIFEST).write_text(json.dumps(self.manifest, indent=2), encoding="utf-8")
            old = None
            if out.exists():
                old = out.with_name(f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}")
                os.replace(out, old)
            os.replace(tmp, out)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

"""Writing a collection out of core: records are chunked and encoded a batch at a time and everything is spilled
to disk as it is made, so a build of any size holds only the final index plus a bounded working set in memory.

:class:`CollectionBuilder` works in ``.<name>.build`` beside the target directory:

- ``chunks.jsonl`` and ``sections.jsonl`` grow line by line; the per-row arrays (line ends, labels, documents), the
  BM25 token ids of every row, the document and token vocabularies and each document's metadata (one JSON line per
  new document; a later batch's rows of a document already written add a ``[code, metadata]`` line to
  ``metadata_updates.jsonl``: the last row of a document holds its metadata, as in memory) grow in raw
  append-only files under ``.build/``; the chunk vectors go to ``.build/vectors.f32`` (:class:`~.spill.VectorSpill`), 4 x dim bytes a row.
- After every batch a checkpoint (``.build/progress.json``, written atomically) records how many source records
  are done and how long every file is. A build that is killed resumes from its last checkpoint when run again with
  the same sources and settings (``resume=True``, the default): the files are cut back to the checkpoint and the
  records already done are skipped. Sources given as paths are fingerprinted (path, size, modification time) with
  the settings; a build from records in memory cannot be fingerprinted and always starts afresh.
- :meth:`CollectionBuilder.finish` builds the HNSW index from the spilled vectors (sized exactly, a batch at a
  time: :func:`~.spill.build_index`) and streams it to ``dense.index``, fits BM25 from the token ids straight into
  memory-mapped files (:meth:`~.lexical.BM25Matrix.fit_ids`), writes the row arrays, the documents' metadata
  (``rows/metadata.json``, streamed) with its fields (``manifest["metadata"]``: declared, else inferred from the
  values, as :meth:`~.collection.Collection.save` records them), the models and the manifest,
  removes ``.build/`` and swaps the directory in (:func:`~.store.swap_in`): the target holds the old collection or
  the complete new one, never a half-written one.

Memory: one batch of chunks and their vectors while encoding (``chunk_batch`` chunks), the document-id and token
dictionaries (tens of bytes per distinct document and token), then the index while it is built and saved (its
final size plus ``index_batch`` x dim x 4 bytes of vectors), then the BM25 matrix's working set (one block of
rows, and 16 bytes per distinct token); never the corpus's float32 matrix, its texts or its token lists.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .._files import write_json_atomic
from .._version import package_version
from .chunking import Chunk, ChunkingConfig, SectionPart, chunk_record, overlap_weights
from .chunk_table import METADATA, ROWS, ChunkRow
from .lexical import TOKENIZER_VERSION, BM25Matrix, LexicalIndex, tokenize
from .metadata import FieldInference, check_declared
from .sources import ReadReport, Record
from .spill import VectorSpill, build_index
from .._files import swap_in
from .store import (
    CHUNKS, DENSE, FORMAT, LEXICAL, MANIFEST, MODELS, SECTIONS, copy_tree, digests, file_digest, is_collection,
    read_jsonl, recover_leftovers, writer_lock,
)

PathLike = Union[str, "os.PathLike[str]"]
WORK = ".build"  # the build's own files inside the work directory (removed by finish)
_APPENDED = ("ends.i64", "crc.u32", "labels.i64", "document.i32", "tokens.i32", "token_counts.i64",
             "documents.jsonl", "vocab.jsonl", "metadata.jsonl", "metadata_updates.jsonl", "vectors.f32")


def lexical_text(title: str, text: str, overlap: str) -> str:
    """What BM25 indexes for a chunk: its title, the overlap carried over and its own text."""
    return " ".join(p for p in (title, overlap, text) if p)


def embed_chunks(encoder, chunks: Sequence[Chunk], cfg: ChunkingConfig, batch_size: int,
                 progress: bool = False, normalize: bool = True) -> np.ndarray:
    """Chunk vectors ``w_core * e(title, core) + w_overlap * e(title, overlap)`` with the weights of
    :func:`~.chunking.overlap_weights`, normalised when ``normalize`` (a raw inner-product encoder such as MedCPT
    keeps its scale), float32 [n, dim]."""
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


def chunk_rows(chunks: Sequence[Chunk], start: int) -> List[ChunkRow]:
    """The stored rows of ``chunks``, numbered from ``start``."""
    return [ChunkRow(start + j, c.chunk_id, c.document_id, c.title, c.section, c.core_text, c.overlap_text,
                     c.position, c.parent_id, c.label, c.metadata) for j, c in enumerate(chunks)]


def versions() -> Dict[str, str]:
    from importlib import metadata

    out = {"medretrieve": package_version()}
    for pkg in ("numpy", "onnxruntime"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def encoder_info(directory: PathLike, inside_dir: str) -> Dict[str, Any]:
    """What the manifest records of an encoder that will be copied to ``inside_dir`` of the collection."""
    from ..models.encoders import EMBEDDED_MODELS, embedded_model_dir, read_manifest

    d = (embedded_model_dir(str(directory)) if str(directory) in EMBEDDED_MODELS
         else Path(directory).expanduser().resolve())
    m = read_manifest(d)
    return {"dir": inside_dir, "source": str(d), "sha256": m.sha256, "kind": m.kind, "dim": m.dim,
            "normalize": m.normalize}


def geometry_mismatch(query_dir: Any, query_normalizes: bool, articles_normalized: bool) -> str:
    what = {True: "unit-length (cosine)", False: "raw inner-product"}
    return (f"query encoder {query_dir} gives {what[query_normalizes]} vectors but the article vectors are "
            f"{what[articles_normalized]} ones: a query/article pair must share one geometry (export both with "
            "the same --normalize / --no-normalize)")


def encoder_pair(encoder: PathLike, query_encoder: Optional[PathLike]
                 ) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """Manifest entries of an article encoder and its query encoder (None: the encoder serves both, so it must
    be symmetric); ValueError when the two differ in width or geometry."""
    enc_info = encoder_info(encoder, f"{MODELS}/encoder")
    if query_encoder is None and enc_info["kind"] != "symmetric":
        raise ValueError(f"{encoder} holds a {enc_info['kind']!r} model; without a query_encoder the "
                         "encoder must be symmetric (serve queries and articles)")
    q_info = encoder_info(query_encoder, f"{MODELS}/query") if query_encoder is not None else None
    if q_info is not None and q_info["dim"] != enc_info["dim"]:
        raise ValueError(f"query encoder dim {q_info['dim']} != article encoder dim {enc_info['dim']}")
    if q_info is not None and q_info["normalize"] != enc_info["normalize"]:
        raise ValueError(geometry_mismatch(query_encoder, q_info["normalize"], enc_info["normalize"]))
    return enc_info, q_info


def new_manifest(enc_info: Dict[str, Any], q_info: Optional[Dict[str, Any]], cfg: ChunkingConfig, dtype: str,
                 M: int, ef_construction: int) -> Dict[str, Any]:
    """The manifest of a new collection (encoders as :func:`encoder_info` describes them; no creation time,
    which the writer adds)."""
    return {
        "format": FORMAT,
        "encoder": enc_info,
        "query_encoder": q_info,
        "chunking": cfg.to_dict(),
        "index": {"dtype": dtype, "M": int(M), "ef_construction": int(ef_construction), "space": "ip",
                  "normalized": enc_info["normalize"]},
        "versions": versions(),
    }


def new_index(dim: int, dtype: str, M: int, ef_construction: int, capacity: int):
    """An empty inner-product HNSW index for ``capacity`` vectors (grown as rows are added)."""
    from ..index import Index

    index = Index(space="ip", dim=dim)
    index.init_index(max_elements=max(capacity, 16), M=M, ef_construction=ef_construction, dtype=dtype)
    return index


def source_fingerprint(source: Any, format: str, errors: str) -> Optional[Dict[str, Any]]:
    """What identifies a source given as paths (each file's path, size and modification time), or None for
    records in memory (which cannot be recognised again, so a build from them never resumes)."""
    paths = [source] if isinstance(source, (str, os.PathLike)) else source
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, (str, os.PathLike)) for p in paths):
        return None
    files = []
    for p in paths:
        p = Path(p).resolve()
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file():
                st = f.stat()
                files.append([str(f), st.st_size, st.st_mtime_ns])
    return {"files": files, "format": format, "errors": errors}


class CollectionBuilder:
    """Builds one collection directory out of core (module docstring).

    ``encoder`` / ``query_encoder``: model directories as for ``Collection.build`` (or an embedded model's
    name, ``"default"`` / ``"minilm"``). ``chunk_batch``: chunks encoded (and checkpointed) at a time; ``batch_size``: the encoder's own batch;
    ``threads``: threads of the HNSW build (-1: all cores); ``index_batch``: vectors per index add.
    ``source_key``: what identifies the input (:func:`source_fingerprint`), None when it cannot be recognised;
    with ``resume`` and a matching key, an interrupted build of ``out_dir`` carries on from its checkpoint.
    ``metadata_fields``: the documents' metadata fields declared, name -> type (as for
    :meth:`~.collection.Collection.declare_metadata`; None: inferred from the values).
    Use :meth:`add_records` / :meth:`add_rows`, then :meth:`finish`; :meth:`close` releases the build's lock
    without finishing (the partial build stays on disk to resume).
    """

    def __init__(self, out_dir: PathLike, encoder: PathLike, query_encoder: Optional[PathLike] = None,
                 chunking: Optional[Union[ChunkingConfig, Dict[str, Any]]] = None, dtype: str = "int8",
                 M: int = 16, ef_construction: int = 200, batch_size: int = 64, chunk_batch: int = 1024,
                 threads: int = -1, index_batch: int = 50_000, overwrite: bool = False, resume: bool = True,
                 source_key: Optional[Dict[str, Any]] = None, progress: bool = False,
                 metadata_fields: Optional[Mapping[str, str]] = None) -> None:
        declared = None if metadata_fields is None else check_declared(metadata_fields)
        out = Path(out_dir)
        recover_leftovers(out)
        if out.exists():
            if not overwrite:
                raise FileExistsError(f"{out} exists; pass overwrite=True (CLI: --overwrite) to replace it")
            if not out.is_dir() or (any(out.iterdir()) and not is_collection(out)):
                raise ValueError(f"{out} exists and is not a medretrieve collection; overwrite only replaces a "
                                 "collection (or an empty directory), so nothing was deleted")
        cfg = ChunkingConfig.from_dict(chunking) if isinstance(chunking, dict) else (chunking or ChunkingConfig())
        if dtype not in ("int8", "float32"):
            raise ValueError(f"dtype must be 'int8' or 'float32', got {dtype!r}")
        for name, value, low in (("M", M, 2), ("ef_construction", ef_construction, 1), ("batch_size", batch_size, 1),
                                 ("chunk_batch", chunk_batch, 1), ("index_batch", index_batch, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        enc, q_info = encoder_pair(encoder, query_encoder)
        self.out = out
        self.chunking = cfg
        self.dim = int(enc["dim"])
        self.batch_size, self.chunk_batch, self.threads, self.index_batch = batch_size, chunk_batch, threads, index_batch
        self.progress = progress
        self.normalize = bool(enc["normalize"])
        self.manifest: Dict[str, Any] = new_manifest(enc, q_info, cfg, dtype, M, ef_construction)
        self._declared = declared
        self._models = {"encoder": enc["source"], **({"query_encoder": q_info["source"]} if q_info else {})}
        settings = {k: self.manifest[k] for k in ("encoder", "query_encoder", "chunking", "index")}
        self.key = None if source_key is None else {"source": source_key, "settings": settings,
                                                    "tokenizer": TOKENIZER_VERSION, "version": package_version(),
                                                    "chunk_batch": chunk_batch, "batch_size": batch_size}
        self.work = out.parent / f".{out.name}.build"
        self._state: Dict[str, Any] = {}
        self._open_work(resume)
        self._encoder = None
        self._pending: List[Tuple[List[Chunk], List[SectionPart]]] = []
        self._pending_chunks = 0

    # ------------------------------------------------------------- the work directory
    def _open_work(self, resume: bool) -> None:
        w = self.work / WORK
        progress = w / "progress.json"
        if self.work.exists():
            state = None
            if progress.is_file():
                try:
                    state = json.loads(progress.read_text(encoding="utf-8"))
                except ValueError:
                    state = None
            self._lock_fd = self._lock(w) if w.is_dir() else None
            if not (resume and self.key is not None and isinstance(state, dict) and state.get("key") == self.key
                    and set(state.get("sizes") or ()) == set(_APPENDED + (CHUNKS, SECTIONS))):
                # another build's leftovers (other sources or settings), or not resumable: start afresh
                shutil.rmtree(self.work)
                self._unlock()
        if not self.work.exists():
            w.mkdir(parents=True)
            self._lock_fd = self._lock(w)
            for name in _APPENDED + (CHUNKS, SECTIONS):
                (w / name if name not in (CHUNKS, SECTIONS) else self.work / name).touch()
            self._state = {"key": self.key, "records": 0, "rows": 0, "documents": 0, "vocab": 0,
                           "sizes": self._sizes()}
            write_json_atomic(progress, self._state)
        else:
            self._state = json.loads(progress.read_text(encoding="utf-8"))
            for name, size in self._state["sizes"].items():
                os.truncate(self._path(name), size)  # cut back to the checkpoint
        self.vectors = VectorSpill(w / "vectors.f32", self.dim)
        self._documents: Dict[str, int] = {value: i for i, value in
                                           enumerate(read_jsonl(self._path("documents.jsonl"), None))}
        self._vocab: Dict[str, int] = {value: i for i, value in enumerate(read_jsonl(self._path("vocab.jsonl"), None))}

    @staticmethod
    def _lock(w: Path) -> int:
        fd = os.open(w / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"another build of {w.parent.parent / w.parent.name[1:-len('.build')]} is running "
                               f"(it holds {w / 'lock'})") from None
        return fd

    def _unlock(self) -> None:
        if getattr(self, "_lock_fd", None) is not None:
            os.close(self._lock_fd)  # type: ignore[arg-type]
            self._lock_fd = None

    def close(self) -> None:
        """Release the build's lock; the partial build stays on disk (a later build with the same sources and
        settings resumes it)."""
        self._unlock()

    def __enter__(self) -> "CollectionBuilder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self._unlock()

    def _path(self, name: str) -> Path:
        return self.work / name if name in (CHUNKS, SECTIONS) else self.work / WORK / name

    def _sizes(self) -> Dict[str, int]:
        return {name: self._path(name).stat().st_size for name in _APPENDED + (CHUNKS, SECTIONS)}

    @property
    def rows(self) -> int:
        """Rows written (the next row's number)."""
        return int(self._state["rows"])

    @property
    def records_done(self) -> int:
        """Source records whose chunks are written (an interrupted build resumes after them)."""
        return int(self._state["records"])

    # ------------------------------------------------------------- adding
    def encoder(self):
        if self._encoder is None:
            from ..models.encoders import ArticleEncoder

            self._encoder = ArticleEncoder.from_dir(self._models["encoder"])
        return self._encoder

    def add_records(self, records: Iterable[Record]) -> int:
        """Chunk, encode and write ``records`` (a batch of ``chunk_batch`` chunks at a time, each followed by a
        checkpoint); returns the chunks written."""
        before = self.rows
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(desc="chunks", unit="chunk", initial=before)
        try:
            for rec in records:
                chunks, parts = chunk_record(rec, self.chunking)
                self._pending.append((chunks, parts))
                self._pending_chunks += len(chunks)
                if self._pending_chunks >= self.chunk_batch:
                    self._flush_records(bar)
            self._flush_records(bar)
        finally:
            if bar is not None:
                bar.close()
        return self.rows - before

    def _flush_records(self, bar) -> None:
        if not self._pending:
            return
        chunks = [c for cs, _ in self._pending for c in cs]
        parts = [p for _, ps in self._pending for p in ps]
        n_records = len(self._pending)
        vectors = (embed_chunks(self.encoder(), chunks, self.chunking, self.batch_size, normalize=self.normalize)
                   if chunks else np.zeros((0, self.dim), dtype=np.float32))
        self._write(chunk_rows(chunks, self.rows), vectors, parts, n_records)
        self._pending, self._pending_chunks = [], 0
        if bar is not None:
            bar.update(len(chunks))

    def add_rows(self, rows: Sequence[ChunkRow], vectors: np.ndarray, sections: Sequence[SectionPart] = ()) -> None:
        """Write chunks whose vectors were computed elsewhere (a distributed build's encoders, a benchmark's
        filler); ``rows[i].row`` must number on from :attr:`rows`; ``vectors`` [len(rows), dim] float32 in the
        geometry of the collection's encoder. Checkpointed like a batch of records (counting no records)."""
        self._flush_records(None)
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (len(rows), self.dim):
            raise ValueError(f"vectors must be [{len(rows)}, {self.dim}], got {vectors.shape}")
        if not np.isfinite(vectors).all():
            raise ValueError("vectors must be finite")
        if [r.row for r in rows] != list(range(self.rows, self.rows + len(rows))):
            raise ValueError(f"rows must be numbered {self.rows}..{self.rows + len(rows) - 1} in order")
        self._write(list(rows), vectors, list(sections), 0)

    def _write(self, rows: Sequence[ChunkRow], vectors: np.ndarray, parts: Sequence[SectionPart],
               n_records: int) -> None:
        """Append one batch to every file, then checkpoint."""
        new_docs: List[str] = []
        known = len(self._documents)
        doc_ids = np.empty(len(rows), dtype=np.int32)
        last_meta: Dict[int, Dict[str, Any]] = {}  # the last row of a document holds its metadata
        for i, r in enumerate(rows):
            j = self._documents.get(r.document_id)
            if j is None:
                j = self._documents[r.document_id] = len(self._documents)
                new_docs.append(r.document_id)
            doc_ids[i] = j
            last_meta[j] = r.metadata
        token_ids: List[int] = []
        counts = np.empty(len(rows), dtype=np.int64)
        new_tokens: List[str] = []
        for i, r in enumerate(rows):
            toks = tokenize(lexical_text(r.title, r.text, r.overlap))
            counts[i] = len(toks)
            for t in toks:
                j = self._vocab.get(t)
                if j is None:
                    j = self._vocab[t] = len(self._vocab)
                    new_tokens.append(t)
                token_ids.append(j)
        lines = [r.line() for r in rows]
        end = self._state["sizes"][CHUNKS]
        ends = np.cumsum([len(x) for x in lines], dtype=np.int64) + end
        with open(self._path(CHUNKS), "ab") as fh:
            fh.writelines(lines)
        with open(self._path(SECTIONS), "ab") as fh:
            fh.writelines((json.dumps(p.__dict__, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
                          for p in parts)
        self._append("ends.i64", ends)
        self._append("labels.i64", np.array([r.label for r in rows], dtype=np.int64))
        self._append("crc.u32", np.array([zlib.crc32(x) for x in lines], dtype=np.uint32))
        self._append("document.i32", doc_ids)
        self._append("tokens.i32", np.asarray(token_ids, dtype=np.int32))
        self._append("token_counts.i64", counts)
        new_meta = [last_meta[j] for j in range(known, len(self._documents))]
        updates = [[j, m] for j, m in last_meta.items() if j < known]
        for name, new in (("documents.jsonl", new_docs), ("vocab.jsonl", new_tokens), ("metadata.jsonl", new_meta),
                          ("metadata_updates.jsonl", updates)):
            with open(self._path(name), "a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(x, ensure_ascii=False) + "\n" for x in new)
        self.vectors.append(vectors)
        self._state.update(records=self.records_done + n_records, rows=self.rows + len(rows),
                           documents=len(self._documents), vocab=len(self._vocab), sizes=self._sizes())
        write_json_atomic(self.work / WORK / "progress.json", self._state)

    def _append(self, name: str, array: np.ndarray) -> None:
        with open(self._path(name), "ab") as fh:
            array.tofile(fh)

    # ------------------------------------------------------------- finishing
    def finish(self, read_report: Optional[ReadReport] = None) -> Path:
        """Build the indexes, write the manifest and swap the collection in (module docstring); returns its
        directory. ValueError (and the partial build removed) when no chunk was written."""
        self._flush_records(None)
        if not self.rows:
            self.abandon()
            summary = f" ({read_report.summary()})" if read_report is not None else ""
            raise ValueError(f"no readable records in the source{summary}")
        w = self.work / WORK
        n = self.rows
        labels = np.memmap(w / "labels.i64", dtype=np.int64, mode="r", shape=(n,))  # read a batch at a time
        index = build_index(self.vectors, self.manifest["index"]["dtype"], self.manifest["index"]["M"],
                            self.manifest["index"]["ef_construction"], labels=labels, num_threads=self.threads,
                            batch=self.index_batch, progress=self._index_progress())
        index.save(self.work / DENSE, snapshot=False)
        del index
        self._write_rows(labels)
        self.manifest["metadata"] = self._write_metadata()
        self._write_lexical()
        files = {CHUNKS: file_digest(self.work / CHUNKS), SECTIONS: file_digest(self.work / SECTIONS)}
        sections = self._line_count(self.work / SECTIONS)
        files.update(digests(self.work, [LEXICAL, ROWS]))
        for key, src in self._models.items():  # copies (or reflinks), never links to the caller's model files
            copy_tree(Path(src), self.work / self.manifest[key]["dir"])
        self.manifest.update(
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            read_report=({"records": read_report.records, "skipped": read_report.skipped[:100],
                          "n_skipped": read_report.n_skipped} if read_report is not None else None),
            counts={"documents": len(self._documents), "chunks": n, "sections": sections, "deleted_chunks": 0},
            files=files)
        from .manifest import validate_manifest

        validate_manifest(self.manifest, self.work / MANIFEST)  # never write a manifest the next open refuses
        (self.work / MANIFEST).write_text(json.dumps(self.manifest, indent=2), encoding="utf-8")
        self._unlock()
        shutil.rmtree(w)  # the spilled vectors and token ids: the directory now holds the collection alone
        recover_leftovers(self.out)
        with writer_lock(self.out):  # a write of the collection in another process swaps in first, or after
            swap_in(self.work, self.out)
        return self.out

    def abandon(self) -> None:
        """Remove the partial build (its work directory) and release its lock."""
        self._unlock()
        shutil.rmtree(self.work, ignore_errors=True)

    def _index_progress(self):
        if not self.progress:
            return None
        from tqdm.auto import tqdm

        bar = tqdm(total=self.rows, desc="index", unit="vector")

        def step(done: int, total: int) -> None:
            bar.update(done - bar.n)
            if done >= total:
                bar.close()

        return step

    @staticmethod
    def _line_count(path: Path) -> int:
        count = 0
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                count += block.count(b"\n")
        return count

    def _write_rows(self, labels: np.ndarray) -> None:
        """rows/: what ``ChunkTable.open`` maps (line offsets and crc32s, labels, deleted flags, documents), copied
        from the spill files a block at a time."""
        w, d = self.work / WORK, self.work / ROWS
        d.mkdir()
        _raw_to_npy(w / "ends.i64", d / "offsets.npy", np.int64, offsets=False)
        _raw_to_npy(w / "crc.u32", d / "crc.npy", np.uint32)
        _raw_to_npy(w / "labels.i64", d / "labels.npy", np.int64)
        np.lib.format.open_memmap(d / "deleted.npy", mode="w+", dtype=bool, shape=(len(labels),)).flush()
        _raw_to_npy(w / "document.i32", d / "document.npy", np.int32)
        documents = sorted(self._documents, key=self._documents.__getitem__)
        (d / "documents.json").write_text(json.dumps(documents, ensure_ascii=False), encoding="utf-8")

    def _write_metadata(self) -> Dict[str, Any]:
        """rows/metadata.json (each document's metadata by document code, as :meth:`ChunkTable.write
        <.chunk_table.ChunkTable.write>` writes it), streamed from the spill files; returns the manifest's
        ``metadata`` entry (the declared fields, else those inferred from the values)."""
        updates: Dict[int, Dict[str, Any]] = {}  # rows of a document in a later batch: usually none
        for code, meta in read_jsonl(self._path("metadata_updates.jsonl"), None):
            updates[int(code)] = meta
        inference = FieldInference()
        with open(self.work / ROWS / METADATA, "w", encoding="utf-8") as fh:
            fh.write("[")
            for code, meta in enumerate(self._spilled_metadata()):
                meta = updates.get(code, meta)
                inference.add(meta)
                fh.write((", " if code else "") + json.dumps(meta, ensure_ascii=False))
            fh.write("]")
        if self._declared is not None:
            return {"fields": self._declared, "declared": True}
        return {"fields": inference.fields(), "declared": False}

    def _spilled_metadata(self) -> Iterator[Dict[str, Any]]:
        with open(self._path("metadata.jsonl"), "r", encoding="utf-8") as fh:
            for line in fh:
                yield json.loads(line)

    def _write_lexical(self) -> None:
        """lexical/ in ``LexicalIndex``'s format 2, the BM25 matrix fitted straight into its files."""
        w, d = self.work / WORK, self.work / LEXICAL
        d.mkdir()
        n = self.rows
        ids = np.lib.format.open_memmap(d / "ids.npy", mode="w+", dtype=np.int64, shape=(n,))
        for a in range(0, n, 1 << 22):
            ids[a:a + (1 << 22)] = np.arange(a, min(a + (1 << 22), n), dtype=np.int64)
        ids.flush()
        _raw_to_npy(w / "tokens.i32", d / "tokens.npy", np.int32)
        _raw_to_npy(w / "token_counts.i64", d / "token_offsets.npy", np.int64, offsets=True)
        vocab = sorted(self._vocab, key=self._vocab.__getitem__)
        (d / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        settings = LexicalIndex()
        matrix = BM25Matrix.fit_ids(np.load(d / "tokens.npy", mmap_mode="r"),
                                    np.load(d / "token_offsets.npy", mmap_mode="r"), vocab, settings.k1, settings.b,
                                    directory=d / "matrix")
        matrix.save(d / "matrix")
        del ids, matrix
        payload = {"format": "medretrieve-lexical-2", "stem": settings.stem,
                   "remove_stopwords": settings.remove_stopwords, "k1": settings.k1, "b": settings.b,
                   "tokenizer": TOKENIZER_VERSION, "rows": n}
        (d / LexicalIndex.FILE).write_text(json.dumps(payload), encoding="utf-8")


def _raw_to_npy(src: Path, dst: Path, dtype: Any, offsets: Optional[bool] = None, block: int = 1 << 22) -> None:
    """Copy a raw array file into a ``.npy`` file a block of ``block`` items at a time (never the whole array in
    memory). ``offsets=False``: write ``[0, *values]`` (line ends -> offsets); ``offsets=True``: write
    ``[0, *cumsum(values)]`` (counts -> offsets); None: the values as they are."""
    n = os.path.getsize(src) // np.dtype(dtype).itemsize
    head = 0 if offsets is None else 1
    out = np.lib.format.open_memmap(dst, mode="w+", dtype=dtype, shape=(n + head,))
    if head:
        out[0] = 0
    carry = 0
    values = np.memmap(src, dtype=dtype, mode="r", shape=(n,)) if n else np.zeros(0, dtype=dtype)
    for a in range(0, n, block):
        part = np.asarray(values[a:a + block])
        if offsets:
            part = np.cumsum(part, dtype=np.int64) + carry
            carry = int(part[-1])
        out[a + head:a + head + len(part)] = part
    out.flush()
    del values, out

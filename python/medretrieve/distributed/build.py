"""A sharded build on Ray: Ray Data reads, chunks and encodes the corpus; one writer actor per shard builds it.

The pipeline (order preserved end to end, so each shard receives its documents in source order):

1. read: one Ray Data task per source file, with medretrieve's readers (:func:`~medretrieve.corpus.sources.
   read_records`); BioASQ files, whose documents merge across files, and records given in memory are read here;
2. chunk: :func:`~medretrieve.corpus.chunking.chunk_record` per record, each chunk tagged with its document's shard
   (:func:`~.layout.shard_of`);
3. encode: an actor pool of ONNX article encoders (``encoders`` actors, one ONNX Runtime session each with
   ``encoder_threads`` threads, ``batch`` chunks per call), :func:`~medretrieve.corpus.builder.embed_chunks`;
4. write: the driver routes each batch to its shards' writer actors (:class:`ShardWriter`), each an out-of-core
   :class:`~medretrieve.corpus.builder.CollectionBuilder` writing ``OUT/shard-xxxxx`` on the shared path (the
   first copy of a repeated document id is kept, as ``read_records`` keeps it); then every writer builds its
   indexes and swaps its shard in, and ``OUT/shards.json`` is written last.

Shard ``i`` is what ``Collection.build`` makes of the records with ``shard_of(id, N) == i`` in source order:
the same chunk ids, rows, BM25 index and vectors (the encoder gives the same vectors whatever a batch holds).
A failed build removes the shards' partial builds and writes no ``shards.json``; it restarts from the beginning
(the single-machine build resumes; this one does not).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .._files import read_json
from ..corpus.builder import CollectionBuilder, chunk_rows, embed_chunks, encoder_info
from ..corpus.metadata import check_declared
from ..corpus.chunking import Chunk, ChunkingConfig, SectionPart, chunk_record
from ..corpus.sources import FORMATS, ReadReport, Record, Section, SourceLike, detect_format, read_records
from ..corpus.store import is_collection
from .fanout import ensure_ray
from .layout import MANIFEST, shard_name, shard_of, write_manifest

PathLike = Union[str, "os.PathLike[str]"]
_CHUNK_FIELDS = ("chunk_id", "document_id", "title", "section", "core_text", "overlap_text", "position",
                 "parent_id", "label", "metadata")


# ----------------------------------------------------------------- the Ray Data stages (run in Ray workers)


def _row(shard: int, kind: str, first: bool = False, chunk: str = "{}", sections: str = "[]") -> Dict[str, Any]:
    """One row of the pipeline (one schema for every stage): a chunk, or a record that could not be read."""
    return {"shard": shard, "kind": kind, "first": first, "chunk": chunk, "sections": sections}


def _record_json(rec: Record) -> str:
    return json.dumps({"id": rec.id, "title": rec.title, "metadata": rec.metadata,
                       "sections": [{"title": s.title, "text": s.text} for s in rec.sections]}, ensure_ascii=False)


def _read_file(item: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    report = ReadReport()
    for rec in read_records(item["path"], format=item["format"], errors=item["errors"], report=report):
        yield {"record": _record_json(rec), "skipped": ""}
    for where, message in report.skipped:
        yield {"record": "", "skipped": json.dumps([where, message])}


def _chunk(item: Dict[str, Any], chunking: Dict[str, Any], shards: int) -> Iterator[Dict[str, Any]]:
    """The chunks of one record, tagged with its shard (or the record's reading error passed on)."""
    if item["skipped"]:
        yield _row(-1, "skipped", chunk=item["skipped"])
        return
    d = json.loads(item["record"])
    rec = Record(d["id"], d["title"], [Section(**x) for x in d["sections"]], d["metadata"])
    shard = shard_of(rec.id, shards)
    chunks, parts = chunk_record(rec, ChunkingConfig.from_dict(chunking))
    sections = json.dumps([p.__dict__ for p in parts], ensure_ascii=False)
    for j, c in enumerate(chunks):
        yield _row(shard, "chunk", first=j == 0, chunk=json.dumps({f: getattr(c, f) for f in _CHUNK_FIELDS},
                                                                   ensure_ascii=False),
                   sections=sections if j == 0 else "[]")


class _Encoder:
    """One ONNX Runtime session per actor (Ray Data actor pool)."""

    def __init__(self, model: str, chunking: Dict[str, Any], threads: int, batch_size: int) -> None:
        from ..models.encoders import ArticleEncoder

        self.encoder = ArticleEncoder.from_dir(model, threads=threads)
        self.cfg = ChunkingConfig.from_dict(chunking)
        self.batch_size = batch_size

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        is_chunk = batch["kind"] == "chunk"
        chunks = [Chunk(**json.loads(c)) for c in batch["chunk"][is_chunk]]
        vectors = np.zeros((len(batch["kind"]), self.encoder.dim), dtype=np.float32)
        if chunks:
            vectors[is_chunk] = embed_chunks(self.encoder, chunks, self.cfg, self.batch_size,
                                             normalize=self.encoder.manifest.normalize)
        return {**batch, "vector": vectors}


class ShardWriter:
    """The writer of one shard (a Ray actor): an out-of-core build fed precomputed vectors."""

    def __init__(self, out_dir: str, encoder: str, query_encoder: Optional[str], chunking: Dict[str, Any],
                 dtype: str, M: int, ef_construction: int, threads: int, overwrite: bool,
                 metadata_fields: Optional[Dict[str, str]] = None) -> None:
        self.builder = CollectionBuilder(out_dir, encoder, query_encoder, chunking, dtype, M, ef_construction,
                                         threads=threads, overwrite=overwrite, resume=False,
                                         metadata_fields=metadata_fields)
        self.seen: set = set()
        self.skipping = False
        self.records = 0
        self.repeats: List[str] = []  # ids of records dropped as repeats of an earlier one

    def add(self, chunks: Sequence[str], first: Sequence[bool], sections: Sequence[str], vectors: np.ndarray) -> int:
        """Append a batch of this shard's chunks (in source order); returns the rows written so far."""
        kept: List[Chunk] = []
        keep = np.zeros(len(chunks), dtype=bool)
        parts: List[SectionPart] = []
        for i, (c, f, sec) in enumerate(zip(chunks, first, sections)):
            chunk = Chunk(**json.loads(c))
            if f:  # a record starts: a document id seen before is a repeat (the first copy is kept)
                self.skipping = chunk.document_id in self.seen
                self.seen.add(chunk.document_id)
                if self.skipping:
                    self.repeats.append(chunk.document_id)
                else:
                    self.records += 1
                    parts.extend(SectionPart(**p) for p in json.loads(sec))
            if not self.skipping:
                kept.append(chunk)
                keep[i] = True
        if kept:
            self.builder.add_rows(chunk_rows(kept, self.builder.rows), np.asarray(vectors)[keep], parts)
        return self.builder.rows

    def finish(self) -> Dict[str, Any]:
        """Build the shard's indexes and swap it in; its counts."""
        if not self.builder.rows:
            self.builder.abandon()
            return {"chunks": 0, "documents": 0, "records": 0, "repeats": self.repeats}
        path = self.builder.finish()
        counts = read_json(path / "manifest.json")["counts"]
        return {"chunks": counts["chunks"], "documents": counts["documents"], "records": self.records,
                "repeats": self.repeats}

    def abandon(self) -> None:
        self.builder.abandon()


# ----------------------------------------------------------------- the driver


def _files(source: Any, format: str) -> Optional[List[Tuple[str, str]]]:
    """(file, format) in ``read_records``' order, or None when the source must be read here (records in memory, or
    BioASQ files, whose documents merge across files)."""
    paths = [source] if isinstance(source, (str, os.PathLike)) else source
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, (str, os.PathLike)) for p in paths):
        return None
    out: List[Tuple[str, str]] = []

    def walk(p: Path) -> None:
        if not p.exists():
            raise FileNotFoundError(f"source {p} does not exist")
        if p.is_dir():
            for child in sorted(p.iterdir()):
                if child.is_file() and not child.name.startswith("."):
                    walk(child)
                elif child.is_dir():
                    walk(child)
            return
        out.append((str(p.resolve()), detect_format(p) if format == "auto" else format))

    for p in paths:
        walk(Path(p))
    return None if any(f == "bioasq" for _, f in out) else out


def _records_dataset(ray, source: SourceLike, format: str, errors: str):
    files = _files(source, format)
    if files is not None:
        items = [{"path": p, "format": f, "errors": errors} for p, f in files]
        return ray.data.from_items(items).flat_map(_read_file)
    report = ReadReport()
    rows = [{"record": _record_json(r), "skipped": ""} for r in read_records(source, format, errors, report)]
    rows += [{"record": "", "skipped": json.dumps([w, m])} for w, m in report.skipped]
    return ray.data.from_items(rows)


def build_sharded(source: SourceLike, out_dir: PathLike, shards: int, encoder: PathLike,
                  query_encoder: Optional[PathLike] = None,
                  chunking: Optional[Union[ChunkingConfig, Dict[str, Any]]] = None, errors: str = "skip",
                  dtype: str = "int8", M: int = 16, ef_construction: int = 200, format: str = "auto",
                  overwrite: bool = False, address: Optional[str] = None, encoders: int = 1,
                  encoder_threads: int = 1, batch: int = 256, batch_size: int = 64, threads: int = -1,
                  report: Optional[ReadReport] = None, metadata_fields: Optional[Mapping[str, str]] = None) -> Path:
    """Build ``source`` into ``shards`` shard collections under ``out_dir`` on Ray (module docstring); returns
    ``out_dir``, which holds ``shards.json`` and ``shard-00000`` ... (read by ``ShardedRetriever(out_dir)``).

    Settings as :meth:`~medretrieve.corpus.collection.Collection.build` (every shard gets the same). Ray:
    ``address`` (None: the running Ray or a new local one; e.g. ``auto`` or ``ray://head:10001``), ``encoders``
    encode actors with ``encoder_threads`` ONNX threads each and ``batch`` chunks per call, ``threads`` per
    writer for its HNSW build. ``out_dir`` must be a path every node sees. ``overwrite`` replaces a previous
    sharded build there (never anything else). ``report`` receives the records skipped as malformed.
    ``metadata_fields``: the documents' metadata fields declared, name -> type, for every shard (None: each shard
    infers its own from its documents; a sharded search reads the fields of all shards together).
    """
    out = Path(out_dir)
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards must be a positive integer, got {shards!r}")
    for name, value in (("encoders", encoders), ("encoder_threads", encoder_threads), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    declared = None if metadata_fields is None else check_declared(metadata_fields)
    _check_target(out, overwrite)
    cfg = ChunkingConfig.from_dict(chunking) if isinstance(chunking, dict) else (chunking or ChunkingConfig())
    enc = encoder_info(encoder, "models/encoder")["source"]
    qenc = encoder_info(query_encoder, "models/query")["source"] if query_encoder is not None else None
    report = report if report is not None else ReadReport()
    ray = ensure_ray(address)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # each shard must see its documents in source order
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # the deployment is complete only when it is written again
    writer = ray.remote(ShardWriter).options(num_cpus=0)
    writers = [writer.remote(str(out / shard_name(i)), enc, qenc, cfg.to_dict(), dtype, M, ef_construction,
                             threads, overwrite, declared) for i in range(shards)]
    t0 = time.time()
    try:
        ds = (_records_dataset(ray, source, format, errors)
              .flat_map(_chunk, fn_kwargs={"chunking": cfg.to_dict(), "shards": shards})
              .map_batches(_Encoder, batch_size=batch, batch_format="numpy", concurrency=encoders,
                           num_cpus=encoder_threads,
                           fn_constructor_kwargs={"model": enc, "chunking": cfg.to_dict(), "threads": encoder_threads,
                                                  "batch_size": batch_size}))
        pending: List[Any] = []
        for b in ds.iter_batches(batch_size=batch, batch_format="numpy"):
            for where in b["chunk"][b["kind"] == "skipped"]:
                report.skipped.append(tuple(json.loads(where)))
            for s in range(shards):
                mine = (b["shard"] == s) & (b["kind"] == "chunk")
                if mine.any():
                    pending.append(writers[s].add.remote(b["chunk"][mine].tolist(), b["first"][mine].tolist(),
                                                         b["sections"][mine].tolist(), b["vector"][mine]))
            if len(pending) > 4 * shards:  # back-pressure: at most a few batches in flight per writer
                ray.get(pending[: len(pending) - 2 * shards])
                pending = pending[len(pending) - 2 * shards:]
        ray.get(pending)
        counts = ray.get([w.finish.remote() for w in writers])
    except BaseException:
        for w in writers:
            try:
                ray.get(w.abandon.remote())
            except Exception:  # a writer that died left nothing to remove but its own work directory
                pass
        raise
    finally:
        for w in writers:
            ray.kill(w)
    report.records = sum(c["records"] for c in counts)
    report.skipped.extend((f"record {d}", "duplicate id (first one kept)") for c in counts for d in c.pop("repeats"))
    write_manifest(out, [i for i, c in enumerate(counts) if c["chunks"]], {
        "counts": {"documents": sum(c["documents"] for c in counts), "chunks": sum(c["chunks"] for c in counts),
                   "per_shard": counts},
        "read_report": {"records": report.records, "skipped": report.skipped[:100], "n_skipped": report.n_skipped},
        "ray": {"encoders": encoders, "encoder_threads": encoder_threads, "batch": batch, "seconds": time.time() - t0},
    })
    return out


def _check_target(out: Path, overwrite: bool) -> None:
    """The target is new, empty, or (with ``overwrite``) a previous sharded build, whose shards the writers
    replace one by one; never anything else."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not (out / MANIFEST).is_file():
        raise ValueError(f"{out} exists and is not a sharded build (no {MANIFEST}); nothing was written")
    if not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True (CLI: --overwrite) to replace it")
    for child in out.iterdir():
        if child.name != MANIFEST and not child.name.startswith(".") and not is_collection(child):
            raise ValueError(f"{out} holds {child.name}, which is not a shard; nothing was written")


def split_collection(collection_dir: PathLike, out_dir: PathLike, shards: int, overwrite: bool = False,
                     batch: int = 10_000, threads: int = -1) -> Path:
    """Split an existing collection into ``shards`` shard collections under ``out_dir`` (with ``shards.json``),
    without encoding anything again: each live chunk goes, with its stored vector and its section, to shard
    ``shard_of(document id, shards)`` (in row order), read and written ``batch`` rows at a time out of core
    (no Ray needed). The shards keep the collection's encoders and settings. For an int8 collection the stored
    vectors are the dequantized ones, quantized again by each shard (scores move by about 1e-3); metadata fields the
    collection declared are declared on every shard. Returns ``out_dir``."""
    from ..corpus.collection import Collection
    from ..corpus.store import read_jsonl

    col = Collection.open(collection_dir)
    out = Path(out_dir)
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards must be a positive integer, got {shards!r}")
    _check_target(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    m = col.manifest
    models = {key: col.directory / m[key]["dir"] for key in ("encoder", "query_encoder") if m.get(key)}
    meta = m.get("metadata") or {}
    declared = meta.get("fields") if meta.get("declared") else None
    builders = [CollectionBuilder(out / shard_name(i), models["encoder"], models.get("query_encoder"),
                                  m["chunking"], m["index"]["dtype"], m["index"]["M"], m["index"]["ef_construction"],
                                  threads=threads, overwrite=overwrite, resume=False, metadata_fields=declared)
                for i in range(shards)]
    try:
        live = np.flatnonzero(col.alive)
        for a in range(0, len(live), batch):
            rows = live[a:a + batch].tolist()
            chunks = [col.rows[r] for r in rows]
            vectors = col.vectors(rows)
            where = np.array([shard_of(c.document_id, shards) for c in chunks])
            for i, b in enumerate(builders):
                mine = np.flatnonzero(where == i)
                if len(mine):
                    moved = [chunks[j] for j in mine]
                    for n, c in enumerate(moved):
                        c.row, c.deleted = b.rows + n, False
                    b.add_rows(moved, vectors[mine])
        parts: List[List[SectionPart]] = [[] for _ in range(shards)]
        for d in read_jsonl(col.directory / "sections.jsonl", None):
            part = SectionPart(**d)
            parts[shard_of(part.document_id, shards)].append(part)
        for b, mine_parts in zip(builders, parts):
            b.add_rows([], np.zeros((0, col.dim), dtype=np.float32), mine_parts)
        kept = []
        for i, b in enumerate(builders):
            if b.rows:
                b.finish()
                kept.append(i)
            else:
                b.abandon()
    except BaseException:
        for b in builders:
            b.abandon()
        raise
    write_manifest(out, kept, {"counts": {"documents": col.n_documents, "chunks": len(col)},
                               "split_from": str(col.directory)})
    return out

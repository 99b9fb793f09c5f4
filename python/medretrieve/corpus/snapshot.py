"""One consistent state of a collection: what a search reads, never changed once made.

A :class:`~.collection.Collection` under updates hands its readers :class:`CollectionSnapshot` objects, as
Lucene's reopened readers or LMDB's copy-on-write pages do: a writer works on private copies and, once its change
is complete (and written), swaps in a new snapshot with one assignment; a search that took the previous snapshot
keeps reading it to its end (its rows, deleted flags, BM25 arrays, dense index and section texts all belong to the
same state), so it neither fails nor sees half of an update. A snapshot of a collection on disk holds its files
open (memory maps, and a handle on ``sections.jsonl``), so the files a later write replaces stay readable to it.

:func:`load_snapshot` opens the snapshot of a collection folder, checking every file against the manifest without
hashing (sizes, array dtypes and shapes, the structure of the row and BM25 arrays), and hashing too when asked.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .chunking import ChunkingConfig, SectionPart
from .builder import geometry_mismatch, lexical_text
from ..filters import parse_filter
from .metadata import MetadataColumns, infer_fields
from .chunk_table import ChunkTable
from .lexical import TOKENIZER_VERSION, LexicalIndex
from .manifest import CollectionManifest
from .store import (
    DENSE, LEXICAL, SECTIONS, DamagedCollection, Digest, Stamp, check_bytes, check_file, confined, parse_jsonl,
)


class Encoders:
    """The encoder models of a collection, shared by all its snapshots (and the in-memory pools made like it):
    each loaded once, on first use. ``threads``: ONNX Runtime intra-op threads per call (None: ORT's default)."""

    def __init__(self, encoder_dir: str, query_encoder_dir: str, threads: Optional[int] = None) -> None:
        self.encoder_dir = encoder_dir
        self.query_encoder_dir = query_encoder_dir
        self.threads = threads
        self._lock = threading.Lock()  # two first searches load a model once, not twice
        self._article: Any = None
        self._query: Any = None

    def article(self) -> Any:
        with self._lock:
            if self._article is None:
                from ..models.encoders import ArticleEncoder

                self._article = ArticleEncoder.from_dir(self.encoder_dir, threads=self.threads)
            return self._article

    def query(self, dim: int, normalized: bool) -> Any:
        """The query encoder, checked to give ``dim``-wide vectors in the articles' geometry (ValueError)."""
        with self._lock:
            if self._query is None:
                from ..models.encoders import QueryEncoder

                enc = QueryEncoder.from_dir(self.query_encoder_dir, threads=self.threads)
                if enc.dim != dim:
                    raise ValueError(f"query encoder {self.query_encoder_dir} gives {enc.dim}-dim vectors but the "
                                     f"collection's index holds {dim}-dim vectors")
                if enc.manifest.normalize != normalized:
                    raise ValueError(geometry_mismatch(self.query_encoder_dir, enc.manifest.normalize, normalized))
                self._query = enc
            return self._query


class SectionsFile:
    """``sections.jsonl`` of one snapshot: opened with the snapshot, read whole on first use through that handle
    (a later write replaces the file, never what this handle reads), checked against its digest (size always;
    sha256 when ``full``, else crc32) and line by line (each must be UTF-8 JSON)."""

    def __init__(self, path: Path, expected: Optional[Digest], full: bool) -> None:
        self.path = path
        try:
            self._fh = open(path, "rb")
        except FileNotFoundError:
            raise DamagedCollection(f"{path} is missing") from None
        self._expected = expected
        self._full = full
        self._lock = threading.Lock()
        self._parts: Optional[Dict[str, SectionPart]] = None

    def data(self) -> bytes:
        """The file's bytes, checked against the manifest."""
        with self._lock:
            self._fh.seek(0)
            data = self._fh.read()
        if self._expected is not None:
            check_bytes(self.path, data, self._expected, self._full)
        return data

    def parts(self) -> Dict[str, SectionPart]:
        if self._parts is None:
            parts: Dict[str, SectionPart] = {}
            for n, d in enumerate(parse_jsonl(self.path, self.data()), 1):
                try:
                    part = SectionPart(**d)
                except TypeError as exc:
                    raise DamagedCollection(f"{self.path} line {n} is not a section ({exc})") from None
                if not isinstance(part.section_id, str):
                    raise DamagedCollection(f"{self.path} line {n}: section_id is not a string")
                parts[part.section_id] = part
            self._parts = parts
        return self._parts


class CollectionSnapshot:
    """One immutable state of a collection (module docstring), with the members the retrieval stages read:
    ``rows``, ``alive``, ``labels``, ``dense``, ``lexical``, ``sections``, ``manifest`` and the lookups below.
    Nothing here is changed after construction but caches derived from it."""

    def __init__(self, directory: Path, manifest: Dict[str, Any], rows: ChunkTable,
                 sections: Union[Dict[str, SectionPart], SectionsFile], dense: Any, lexical: LexicalIndex,
                 encoders: Encoders, stamp: Optional[Stamp] = None) -> None:
        self.directory = Path(directory)
        self.stamp = stamp  # the version on disk this state was read from (or derives from), None: memory only
        self.manifest = manifest
        self.rows = rows
        self.dense = dense
        self.lexical = lexical
        self.encoders = encoders
        self.chunking = ChunkingConfig.from_dict(manifest["chunking"])
        self._sections = sections
        alive = ~np.asarray(rows.deleted, dtype=bool)
        labels = np.asarray(rows.labels, dtype=np.int64)
        alive.flags.writeable = labels.flags.writeable = False  # shared by every search of this snapshot
        self.alive: np.ndarray = alive
        self.labels: np.ndarray = labels
        self._n_live = int(alive.sum())
        self._n_documents = len(np.unique(rows.document[alive])) if len(rows) else 0
        self._doc_rows: Optional[Tuple[np.ndarray, np.ndarray]] = None  # live rows by document code, bounds
        self._allowed: Dict[Tuple[int, ...], np.ndarray] = {}  # label set -> live rows carrying one of them
        self._columns: Optional[MetadataColumns] = None  # the documents' metadata as columns, built when asked
        self._extra_columns: Dict[Tuple[Tuple[str, str], ...], MetadataColumns] = {}  # with an online source's fields
        self._filtered: Dict[str, np.ndarray] = {}  # filter text -> live rows passing it

    def snapshot(self) -> "CollectionSnapshot":
        """This snapshot (it never changes)."""
        return self

    def __len__(self) -> int:
        """Number of live chunks."""
        return self._n_live

    @property
    def n_documents(self) -> int:
        """Number of live documents."""
        return self._n_documents

    @property
    def sections(self) -> Dict[str, SectionPart]:
        """The parent sections by id (read from sections.jsonl on first use). Do not change the dict."""
        s = self._sections
        return s.parts() if isinstance(s, SectionsFile) else s

    @property
    def sections_file(self) -> Optional[SectionsFile]:
        """The sections still in their file (None once given in memory): a writer copies it as it is."""
        return self._sections if isinstance(self._sections, SectionsFile) else None

    @property
    def dim(self) -> int:
        return int(self.manifest["encoder"]["dim"])

    @property
    def normalized(self) -> bool:
        """Whether chunk vectors are unit length (inner product = cosine); False for raw inner products
        (MedCPT). Collections built before this was recorded were always normalised."""
        return bool(self.manifest["index"].get("normalized", True))

    @property
    def encoder_dir(self) -> str:
        """The directory of the article (or symmetric) encoder in use."""
        return self.encoders.encoder_dir

    @property
    def query_encoder_dir(self) -> str:
        """The directory of the query encoder searches use."""
        return self.encoders.query_encoder_dir

    def article_encoder(self) -> Any:
        return self.encoders.article()

    def query_encoder(self) -> Any:
        return self.encoders.query(int(self.dense.dim), self.normalized)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors float32 [n, dim] (one fast unpadded call for a single query)."""
        enc = self.query_encoder()
        if len(texts) == 1:
            return np.asarray(enc.encode_query(texts[0]), dtype=np.float32)[None, :]
        return np.asarray(enc.encode(list(texts)), dtype=np.float32)

    def allowed(self, labels: Sequence[int]) -> np.ndarray:
        """Boolean mask of the live rows carrying one of ``labels`` (kept per label set: a search routed to a
        section reads it without a pass over every row)."""
        key = tuple(sorted({int(x) for x in labels}))
        mask = self._allowed.get(key)
        if mask is None:
            mask = self.alive & np.isin(self.labels, key)
            mask.flags.writeable = False
            self._allowed[key] = mask
        return mask

    @property
    def metadata_fields(self) -> Dict[str, str]:
        """The documents' metadata fields, name -> type (``medretrieve.filters.FIELD_TYPES``): the manifest's
        (declared or recorded at the last write), else inferred from the documents."""
        return self.metadata_columns().fields

    def live_documents(self) -> np.ndarray:
        """Boolean mask over document codes (``rows.documents``): the documents with a live row."""
        live = np.zeros(len(self.rows.documents), dtype=bool)
        live[np.asarray(self.rows.document)[np.asarray(self.alive)]] = True
        return live

    def metadata_columns(self, extra_fields: Optional[Mapping[str, str]] = None) -> MetadataColumns:
        """The documents' metadata as typed columns (:mod:`.metadata`), built once per snapshot; with
        ``extra_fields`` (name -> type: an online source's fields), those the collection lacks join its own (its
        documents read as missing them unless they hold fitting values), built once per distinct set."""
        if self._columns is None:
            meta = self.rows.document_metadata()
            fields = (self.manifest.get("metadata") or {}).get("fields") or infer_fields(meta)
            self._columns = MetadataColumns(meta, fields)
        extra = {n: t for n, t in (extra_fields or {}).items() if n not in self._columns.fields}
        if not extra:
            return self._columns
        key = tuple(sorted(extra.items()))
        got = self._extra_columns.get(key)
        if got is None:
            got = MetadataColumns(self.rows.document_metadata(), {**self._columns.fields, **extra})
            if len(self._extra_columns) >= 8:  # a bounded cache: one entry per online source's field set
                self._extra_columns.pop(next(iter(self._extra_columns)))
            self._extra_columns[key] = got
        return got

    def filter_rows(self, where: Any, extra_fields: Optional[Mapping[str, str]] = None) -> np.ndarray:
        """Boolean mask of the live rows whose document passes the filter ``where`` (text, JSON form or
        parsed: :mod:`medretrieve.filters`), read-only, kept per distinct filter for this snapshot (a collection
        version); FilterError (a ValueError) naming an unknown field or an ill-typed comparison. ``extra_fields``:
        fields the filter may also name (:meth:`metadata_columns`), which the documents lacking them fail."""
        columns = self.metadata_columns(extra_fields)
        parsed = parse_filter(where)
        key = parsed.text() + ("" if columns is self._columns else " | " + repr(sorted(columns.fields.items())))
        mask = self._filtered.get(key)
        if mask is None:
            docs = columns.mask(parsed)
            mask = self.alive & docs[np.asarray(self.rows.document)] if len(self.rows) else self.alive.copy()
            mask.flags.writeable = False
            if len(self._filtered) >= 64:  # a bounded cache: the oldest filter goes first
                self._filtered.pop(next(iter(self._filtered)))
            self._filtered[key] = mask
        return mask

    def parent(self, parent_id: str) -> Optional[SectionPart]:
        """The whole section a chunk belongs to (context for a hit)."""
        return self.sections.get(parent_id)

    def document_rows(self, document_id: str) -> List[int]:
        """Rows of the live chunks of one document, in document order (empty when unknown)."""
        doc_rows = self._doc_rows
        if doc_rows is None:  # live rows grouped by document code: two arrays, no per-document objects
            live = np.flatnonzero(self.alive)
            codes = np.asarray(self.rows.document)[live]
            order = np.argsort(codes, kind="stable")
            bounds = np.searchsorted(codes[order], np.arange(len(self.rows.documents) + 1))
            doc_rows = self._doc_rows = (live[order], bounds)
        code = self.rows.document_code(document_id)
        if code is None:
            return []
        rows, bounds = doc_rows
        return rows[bounds[code]:bounds[code + 1]].tolist()

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        """Stored (dequantised) vectors of ``rows``, float32 [n, dim]."""
        if len(rows) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.asarray(self.dense.get_items(np.asarray(rows, dtype=np.int64)), dtype=np.float32)

    def check_all(self) -> Dict[str, int]:
        """Read and check now what a search checks when it first reads it: every chunk line (UTF-8 JSON holding
        its row), the sections, every BM25 posting. DamagedCollection naming the file and record at fault;
        otherwise the counts checked. A pass over every file: for ``medretrieve collection check``."""
        for i in range(len(self.rows)):
            self.rows[i]
        sections = self.sections
        self.lexical.check()
        return {"chunks": len(self.rows), "live_chunks": len(self), "documents": self.n_documents,
                "sections": len(sections)}

    def check_consistent(self) -> None:
        """DamagedCollection naming the file whose rows disagree with the others (a line lost or moved, an index
        of another size or kind): checks that need no digest, so older and larger collections get them too."""
        d, rows, m = self.directory, self.rows, self.manifest
        counts = m.get("counts") or {}
        expected = counts.get("chunks", 0) + counts.get("deleted_chunks", 0) if counts else len(rows)
        if len(rows) != expected:
            raise DamagedCollection(f"{d / 'chunks.jsonl'} holds {len(rows)} chunks, the manifest counts {expected}")
        for i in sorted({0, len(rows) // 2, len(rows) - 1} - {-1}):  # the row number of sample lines
            rows[i]
        dense = self.dense
        for field, want, got in (("encoder.dim", self.dim, dense.dim), ("index.dtype", m["index"]["dtype"],
                                 dense.dtype), ("index.space", m["index"].get("space", "ip"), dense.space)):
            if want != got:
                raise DamagedCollection(f"{d / 'manifest.json'}: {field} is {want!r} but {d / DENSE} holds {got!r}")
        if dense.get_current_count() != len(rows):
            raise DamagedCollection(f"{d / DENSE} holds {dense.get_current_count()} vectors for {len(rows)} chunks")
        if not self.lexical.has_exactly(np.flatnonzero(self.alive)):
            raise DamagedCollection(f"{d / LEXICAL} indexes {len(self.lexical)} chunks, not the {len(self)} live "
                                    f"chunks of {d / 'chunks.jsonl'}")


def load_snapshot(d: Path, spec: CollectionManifest, encoders: Encoders, full: bool,
                  stamp: Optional[Stamp]) -> CollectionSnapshot:
    """The snapshot of the collection folder ``d`` whose validated manifest is ``spec`` (read at ``stamp``): every
    file it lists is
    checked (confined to ``d``, present, of its recorded size, and its sha256 when ``full``), then the row arrays,
    dense index and BM25 arrays are mapped and checked for shape and structure (DamagedCollection naming the
    file at fault)."""
    from ..index import Index

    for name in spec.files or {}:
        check_file(confined(d, name, "the file"), spec.file(name), full)
    rows = ChunkTable.open(d, spec.file)
    try:
        dense = Index.load(str(d / DENSE), mmap=True)
    except (ValueError, RuntimeError, OSError) as exc:
        raise DamagedCollection(f"{d / DENSE} cannot be loaded ({exc})") from None
    try:
        lexical = LexicalIndex.load(d / LEXICAL)
    except (ValueError, OSError, EOFError) as exc:
        raise DamagedCollection(str(exc) if str(d) in str(exc) else f"{d / LEXICAL}: {exc}") from None
    if lexical.tokenizer_version != TOKENIZER_VERSION:
        # indexed by another tokenizer: re-tokenise the live rows in memory (written on the next save)
        fresh = LexicalIndex(lexical.stem, lexical.remove_stopwords, lexical.k1, lexical.b)
        live = [rows[int(i)] for i in np.flatnonzero(~np.asarray(rows.deleted))]
        fresh.add([lexical_text(r.title, r.text, r.overlap) for r in live], [r.row for r in live])
        lexical = fresh
    snap = CollectionSnapshot(d, spec.to_dict(), rows, SectionsFile(d / SECTIONS, spec.file(SECTIONS), full),
                              dense, lexical, encoders, stamp)
    snap.check_consistent()
    return snap

"""The chunks of a collection: a row-indexed table whose texts stay on disk until asked for.

``chunks.jsonl`` holds one chunk per line in row order and is never rewritten in place: a write copies the
existing lines byte for byte and appends the new ones. What a search needs for every row at once lives in small
arrays beside it (``rows/``: line offsets, section labels, deleted flags, document of each row, and the document
ids, and the crc32 of each line), memory-mapped at open, so opening a collection of a million chunks parses no JSON;
a row's text is parsed when a search reaches it, checked against its line's crc32 and to hold its row number, so a
file whose lines were moved or changed is caught (with the line named) rather than read as another chunk.
"""
from __future__ import annotations

import json
import mmap
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np

from .store import CHUNKS, DamagedCollection, Digest, file_digest, load_array

ROWS = "rows"  # the arrays' folder
METADATA = "metadata.json"  # each document's metadata, by document code (in rows/)
_ARRAYS = {"offsets": np.int64, "labels": np.int64, "deleted": np.bool_, "document": np.int32}


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

    def line(self) -> bytes:
        """The chunk's line in chunks.jsonl (everything but ``deleted``, which lives in the arrays)."""
        d = {k: v for k, v in self.__dict__.items() if k != "deleted"}
        return (json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class ChunkTable(Sequence[ChunkRow]):
    """Rows ``0..n-1``: the first ``n_file`` read from a chunks.jsonl on demand, later ones added in memory."""

    def __init__(self, path: Optional[Path] = None, offsets: Optional[np.ndarray] = None,
                 labels: Optional[np.ndarray] = None, deleted: Optional[np.ndarray] = None,
                 document: Optional[np.ndarray] = None, documents: Optional[List[str]] = None,
                 crc: Optional[np.ndarray] = None) -> None:
        self.path = path
        self.offsets = offsets if offsets is not None else np.zeros(1, dtype=np.int64)
        self.crc = crc  # crc32 of each line of the file (None: written before they were recorded)
        self.labels = np.asarray(labels if labels is not None else np.zeros(0, dtype=np.int64), dtype=np.int64)
        self.deleted = np.array(deleted if deleted is not None else np.zeros(0, dtype=bool), dtype=bool)
        self.document = np.asarray(document if document is not None else np.zeros(0, dtype=np.int32),
                                   dtype=np.int32)
        self.documents: List[str] = list(documents or [])
        self._doc_index: Optional[Dict[str, int]] = None
        self._new: List[ChunkRow] = []  # rows added since the file was written
        # each document's metadata (by document code; None: read from its rows when first asked for)
        self._doc_meta: Optional[List[Dict[str, Any]]] = [] if path is None and not self.documents else None
        self._map: Optional[mmap.mmap] = None
        self.n_file = len(self.offsets) - 1

    # ------------------------------------------------------------- reading
    def __len__(self) -> int:
        return self.n_file + len(self._new)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} out of range ({len(self)} rows)")
        deleted = bool(self.deleted[i])
        if i < self.n_file:
            row = self._parse(i)  # a new object: its flag is set in place
            row.deleted = deleted
            return row
        row = self._new[i - self.n_file]  # shared with the tables copied from this one: never changed in place
        return row if row.deleted == deleted else replace(row, deleted=deleted)

    def __iter__(self) -> Iterator[ChunkRow]:
        return (self[i] for i in range(len(self)))

    def _map_file(self) -> None:
        """Map chunks.jsonl now: the table reads the file it was opened on, even after a write replaced it."""
        if self._map is None and self.n_file and self.offsets[-1]:
            with open(self.path, "rb") as fh:  # type: ignore[arg-type]
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def _parse(self, i: int) -> ChunkRow:
        self._map_file()
        raw = self._map[int(self.offsets[i]):int(self.offsets[i + 1])] if self._map is not None else b""
        if self.crc is not None and zlib.crc32(raw) != int(self.crc[i]):
            raise DamagedCollection(f"{self.path} line {i + 1} (row {i}) does not match its crc32 in rows/crc.npy: "
                                    "the file was changed after it was written; rebuild the collection or restore "
                                    "the file")
        try:
            d = json.loads(raw.decode("utf-8"))
            row = ChunkRow(**{k: v for k, v in d.items() if k != "deleted"})
        except UnicodeDecodeError as exc:
            raise DamagedCollection(f"{self.path} line {i + 1} (row {i}) is not UTF-8 text (byte {exc.start + 1}); "
                                    "the file was damaged: rebuild the collection or restore the file") from None
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise DamagedCollection(f"{self.path} line {i + 1} is not a chunk ({str(exc)[:200]}); rebuild the "
                                    "collection or restore the file") from None
        if row.row != i:
            raise DamagedCollection(f"{self.path} line {i + 1} holds row {row.row}: lines are missing or out of "
                                    "order; rebuild the collection or restore the file")
        return row

    def document_id(self, i: int) -> str:
        return self.documents[int(self.document[i])]

    def document_code(self, document_id: str) -> Optional[int]:
        """The index of ``document_id`` in :attr:`documents` (the code :attr:`document` holds), None if unknown."""
        return self._document_index().get(document_id)

    def _document_index(self) -> Dict[str, int]:
        if self._doc_index is None:
            self._doc_index = {d: j for j, d in enumerate(self.documents)}
        return self._doc_index

    def document_metadata(self) -> List[Dict[str, Any]]:
        """Each document's metadata, by document code (the record's fields its chunks carry: the last row of the
        document holds it). Collections written before ``rows/metadata.json`` read it from their rows once."""
        if self._doc_meta is None:
            meta: List[Dict[str, Any]] = [{} for _ in self.documents]
            if len(self):
                codes = np.asarray(self.document)
                last = len(codes) - 1 - np.unique(codes[::-1], return_index=True)[1]
                for code, row in zip(np.unique(codes[::-1]), last):
                    meta[int(code)] = dict(self[int(row)].metadata)
            self._doc_meta = meta
        return self._doc_meta

    # ------------------------------------------------------------- changing
    def copy(self) -> "ChunkTable":
        """A table a writer may change (extend, flag deleted rows) without changing this one: the file and its
        map are shared (never written), the per-row arrays and lists are the copy's own."""
        new = ChunkTable.__new__(ChunkTable)
        new.__dict__.update(self.__dict__)
        new.deleted = np.array(self.deleted, dtype=bool)
        new.documents = list(self.documents)
        new._doc_index = None
        new._new = list(self._new)
        new._doc_meta = None if self._doc_meta is None else list(self._doc_meta)
        return new

    def append(self, row: ChunkRow) -> None:
        self.extend([row])

    def extend(self, rows: Sequence[ChunkRow]) -> None:
        """Append ``rows`` (numbered on from ``len(self)``); the per-row arrays grow once per call, not per row."""
        if [r.row for r in rows] != list(range(len(self), len(self) + len(rows))):
            raise ValueError(f"rows {[r.row for r in rows][:3]}... appended as rows {len(self)}..")
        index = self._document_index()
        docs = np.empty(len(rows), dtype=np.int32)
        for i, row in enumerate(rows):
            j = index.get(row.document_id)
            if j is None:
                j = index[row.document_id] = len(self.documents)
                self.documents.append(row.document_id)
            docs[i] = j
            if self._doc_meta is not None:
                if j == len(self._doc_meta):
                    self._doc_meta.append({})
                self._doc_meta[j] = dict(row.metadata)
        self._new.extend(rows)
        self.labels = np.concatenate([self.labels, np.array([r.label for r in rows], dtype=np.int64)])
        self.deleted = np.concatenate([self.deleted, np.array([r.deleted for r in rows], dtype=bool)])
        self.document = np.concatenate([self.document, docs])

    def rows_of_documents(self, ids: Sequence[str]) -> np.ndarray:
        """Rows (deleted ones included) whose document is one of ``ids``."""
        index = self._document_index()
        wanted = [index[d] for d in ids if d in index]
        return np.flatnonzero(np.isin(self.document, wanted)) if wanted else np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------- files
    @classmethod
    def open(cls, directory: Path, digest_of: Callable[[str], Optional[Digest]] = lambda name: None
             ) -> "ChunkTable":
        """The table of a collection directory: its arrays when written (memory-mapped, checked for dtype, shape
        and order: offsets rise from 0 to the file's size, document codes name a document), else built by reading
        chunks.jsonl whole (collections written before the arrays). ``digest_of(name)``: the manifest's digest
        of a file, None when it records none."""
        path = directory / CHUNKS
        if not path.is_file():
            raise DamagedCollection(f"{path} is missing")
        rows_dir = directory / ROWS
        if not rows_dir.is_dir():
            return cls._from_lines(path)
        offsets = load_array(rows_dir / "offsets.npy", np.int64)
        n = len(offsets) - 1
        arrays = {name: load_array(rows_dir / f"{name}.npy", dtype, n) for name, dtype in _ARRAYS.items()
                  if name != "offsets"}
        try:
            documents = json.loads((rows_dir / "documents.json").read_bytes())
        except (OSError, ValueError, RecursionError) as exc:
            raise DamagedCollection(f"{rows_dir / 'documents.json'} cannot be read ({str(exc)[:200]})") from None
        size = path.stat().st_size
        expected = digest_of(CHUNKS)
        if expected is not None and expected.get("bytes") != size:
            raise DamagedCollection(f"{path} does not match the manifest ({size} bytes, expected "
                                    f"{expected.get('bytes')}); rebuild the collection or restore the file")
        document = arrays["document"]
        if (n < 0 or int(offsets[0]) != 0 or int(offsets[-1]) != size or (n and np.any(np.diff(offsets) <= 0))
                or not isinstance(documents, list) or not all(isinstance(x, str) for x in documents)
                or (n and (int(document.max()) >= len(documents) or int(document.min()) < 0))
                or (n and int(arrays["labels"].min()) < 0)):
            raise DamagedCollection(f"{rows_dir} does not describe {path} ({n} rows, file of {size} bytes): its "
                                    "offsets, document codes or labels are out of order or out of range")
        crc = load_array(rows_dir / "crc.npy", np.uint32, n) if (rows_dir / "crc.npy").exists() else None
        table = cls(path, offsets, arrays["labels"], arrays["deleted"], document, documents, crc)
        table._doc_meta = _read_metadata(rows_dir / METADATA, len(documents))
        table._map_file()
        return table

    def _file_crc(self) -> np.ndarray:
        """The crc32 of each line of the file (computed now for a collection written before they were recorded)."""
        if not self.n_file:
            return np.zeros(0, dtype=np.uint32)
        self._map_file()
        if self._map is None or len(self._map) < int(self.offsets[-1]):
            raise DamagedCollection(f"{self.path} is shorter than its {self.n_file} rows")
        if self.crc is not None:
            return np.asarray(self.crc, dtype=np.uint32)
        o = self.offsets
        return np.fromiter((zlib.crc32(self._map[int(o[i]):int(o[i + 1])]) for i in range(self.n_file)),
                           dtype=np.uint32, count=self.n_file)

    @classmethod
    def _from_lines(cls, path: Path) -> "ChunkTable":
        data = path.read_bytes()
        table = cls(path)
        offsets = [0]
        for n, line in enumerate(data.splitlines(keepends=True)):
            try:
                d = json.loads(line)
                deleted = bool(d.pop("deleted", False))
                row = ChunkRow(**d)
            except (ValueError, TypeError) as exc:
                raise DamagedCollection(f"{path} line {n + 1} is not a chunk ({exc})") from None
            if row.row != n:
                raise DamagedCollection(f"{path} line {n + 1} holds row {row.row}: lines are missing or out of "
                                        "order; rebuild the collection or restore the file")
            row.deleted = deleted
            table.append(row)
            offsets.append(offsets[-1] + len(line))
        return table

    def write(self, directory: Path) -> Digest:
        """Write chunks.jsonl (existing lines copied as they are, new ones appended) and the arrays into
        ``directory``; returns chunks.jsonl's digest."""
        out = directory / CHUNKS
        offsets = [int(x) for x in np.asarray(self.offsets)] if self.n_file else [0]
        crcs = [self._file_crc()]
        with open(out, "wb") as fh:
            if self.n_file:
                end = int(self.offsets[-1])
                for a in range(0, end, 1 << 22):  # the lines this table was opened on, from its own map
                    fh.write(self._map[a:min(a + (1 << 22), end)])  # type: ignore[index]
            new = []
            for row in self._new:
                line = row.line()
                fh.write(line)
                offsets.append(offsets[-1] + len(line))
                new.append(zlib.crc32(line))
            crcs.append(np.asarray(new, dtype=np.uint32))
        rows_dir = directory / ROWS
        rows_dir.mkdir()
        np.save(rows_dir / "offsets.npy", np.asarray(offsets, dtype=np.int64))
        np.save(rows_dir / "crc.npy", np.concatenate(crcs).astype(np.uint32))
        np.save(rows_dir / "labels.npy", np.asarray(self.labels, dtype=np.int64))
        np.save(rows_dir / "deleted.npy", np.asarray(self.deleted, dtype=bool))
        np.save(rows_dir / "document.npy", np.asarray(self.document, dtype=np.int32))
        (rows_dir / "documents.json").write_text(json.dumps(self.documents, ensure_ascii=False), encoding="utf-8")
        (rows_dir / METADATA).write_text(json.dumps(self.document_metadata(), ensure_ascii=False), encoding="utf-8")
        return file_digest(out)


def _read_metadata(path: Path, n_documents: int) -> Optional[List[Dict[str, Any]]]:
    """The documents' metadata of ``rows/metadata.json`` (None when the collection was written without it)."""
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise DamagedCollection(f"{path} cannot be read ({str(exc)[:200]})") from None
    if not isinstance(meta, list) or len(meta) != n_documents or not all(isinstance(m, dict) for m in meta):
        raise DamagedCollection(f"{path} does not hold one metadata object per document ({n_documents}); rebuild "
                                "the collection or restore the file")
    return meta

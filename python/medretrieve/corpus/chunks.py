"""The chunks of a collection: a row-indexed table whose texts stay on disk until asked for.

``chunks.jsonl`` holds one chunk per line in row order and is never rewritten in place: a write copies the
existing lines byte for byte and appends the new ones. What a search needs for every row at once lives in small
arrays beside it (``rows/``: line offsets, section labels, deleted flags, document of each row, and the document
ids), memory-mapped at open, so opening a collection of a million chunks parses no JSON; a row's text is parsed
when a search reaches it (each parsed line is checked to hold its row number, so a file whose lines were moved
is caught rather than read as another chunk).
"""
from __future__ import annotations

import json
import mmap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from .store import CHUNKS, DamagedCollection, Digest, file_digest

ROWS = "rows"  # the arrays' folder
_ARRAYS = ("offsets", "labels", "deleted", "document")


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
                 document: Optional[np.ndarray] = None, documents: Optional[List[str]] = None) -> None:
        self.path = path
        self.offsets = offsets if offsets is not None else np.zeros(1, dtype=np.int64)
        self.labels = np.asarray(labels if labels is not None else np.zeros(0, dtype=np.int64), dtype=np.int64)
        self.deleted = np.array(deleted if deleted is not None else np.zeros(0, dtype=bool), dtype=bool)
        self.document = np.asarray(document if document is not None else np.zeros(0, dtype=np.int32),
                                   dtype=np.int32)
        self.documents: List[str] = list(documents or [])
        self._doc_index: Optional[Dict[str, int]] = None
        self._new: List[ChunkRow] = []  # rows added since the file was written
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
        if i >= self.n_file:
            row = self._new[i - self.n_file]
        else:
            row = self._parse(i)
        row.deleted = bool(self.deleted[i])
        return row

    def __iter__(self) -> Iterator[ChunkRow]:
        return (self[i] for i in range(len(self)))

    def _parse(self, i: int) -> ChunkRow:
        if self._map is None:
            with open(self.path, "rb") as fh:  # type: ignore[arg-type]
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if self.offsets[-1] else None
        raw = self._map[int(self.offsets[i]):int(self.offsets[i + 1])] if self._map is not None else b""
        try:
            d = json.loads(raw)
            row = ChunkRow(**{k: v for k, v in d.items() if k != "deleted"})
        except (ValueError, TypeError) as exc:
            raise DamagedCollection(f"{self.path} line {i + 1} is not a chunk ({exc}); rebuild the collection "
                                    "or restore the file") from None
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

    # ------------------------------------------------------------- changing
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
    def open(cls, directory: Path, expected: Optional[Digest]) -> "ChunkTable":
        """The table of a collection directory: its arrays when written (memory-mapped), else built by reading
        chunks.jsonl whole (collections written before the arrays)."""
        path = directory / CHUNKS
        if not path.is_file():
            raise DamagedCollection(f"{path} is missing")
        rows_dir = directory / ROWS
        if not rows_dir.is_dir():
            return cls._from_lines(path)
        try:
            arrays = {name: np.load(rows_dir / f"{name}.npy", mmap_mode="r") for name in _ARRAYS}
            documents = json.loads((rows_dir / "documents.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DamagedCollection(f"{rows_dir} cannot be read ({exc})") from None
        n = len(arrays["offsets"]) - 1
        size = path.stat().st_size
        if (any(len(arrays[a]) != n for a in _ARRAYS[1:]) or n < 0 or int(arrays["offsets"][-1]) != size
                or not isinstance(documents, list)
                or (n and (int(arrays["document"].max()) >= len(documents) or int(arrays["document"].min()) < 0))):
            raise DamagedCollection(f"{rows_dir} does not describe {path} ({n} rows, file of {size} bytes)")
        if expected is not None and expected.get("bytes") != size:
            raise DamagedCollection(f"{path} does not match the manifest ({size} bytes, expected "
                                    f"{expected.get('bytes')}); rebuild the collection or restore the file")
        return cls(path, arrays["offsets"], arrays["labels"], arrays["deleted"], arrays["document"], documents)

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
        with open(out, "wb") as fh:
            if self.n_file:
                with open(self.path, "rb") as src:  # type: ignore[arg-type]
                    remaining = int(self.offsets[-1])
                    while remaining > 0:
                        block = src.read(min(remaining, 1 << 22))
                        if not block:
                            raise DamagedCollection(f"{self.path} shrank while it was being copied")
                        fh.write(block)
                        remaining -= len(block)
            for row in self._new:
                line = row.line()
                fh.write(line)
                offsets.append(offsets[-1] + len(line))
        rows_dir = directory / ROWS
        rows_dir.mkdir()
        np.save(rows_dir / "offsets.npy", np.asarray(offsets, dtype=np.int64))
        np.save(rows_dir / "labels.npy", np.asarray(self.labels, dtype=np.int64))
        np.save(rows_dir / "deleted.npy", np.asarray(self.deleted, dtype=bool))
        np.save(rows_dir / "document.npy", np.asarray(self.document, dtype=np.int32))
        (rows_dir / "documents.json").write_text(json.dumps(self.documents, ensure_ascii=False), encoding="utf-8")
        return file_digest(out)

"""The on-disk PubMed cache: searches, records, and the chunk vectors of records per encoder.

Layout under the cache folder::

    search/<sha256 of the esearch parameters>.json   {"params": {...}, "ids": ["123", ...]}
    records/<pmid>.json                              a record (record_to_dict), or {"missing": true}
    vectors/<encoder identity>/<pmid>.npz            "vectors" float32 [chunks, dim], "digest" of the chunks

Every entry is validated when read (types, PMIDs of ASCII digits, the search parameters asked, the record's own
PMID, the vectors' shape and the digest of the chunks they were computed from); a damaged or foreign entry is
a miss, so the caller fetches (or encodes) again and the entry is rewritten. Writes are atomic (temporary file +
rename). A write that fails (read-only or full disk) is logged on the ``medretrieve.pubmed`` logger and counted
in ``write_errors``; the caller's result is never lost to it.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from .eutils import PubMedCacheError
from .sources import Record, record_from_dict, record_to_dict

LOG = logging.getLogger("medretrieve.pubmed")
PMID_RE = re.compile(r"[0-9]{1,12}")  # ASCII digits only (str.isdigit() also accepts e.g. Arabic-Indic digits)
MAX_ENTRY_BYTES = 16 << 20  # a cache entry larger than this is not read (damaged or not ours)


def is_pmid(value: Any) -> bool:
    """Whether ``value`` is a PMID as E-utilities writes it: a str of 1-12 ASCII digits."""
    return isinstance(value, str) and PMID_RE.fullmatch(value) is not None


class PubMedCache:
    """The cache folder (module docstring). Thread-safe; ``write_errors``: writes that failed (logged)."""

    MISSING = "missing"

    def __init__(self, directory: Union[str, "os.PathLike[str]"]) -> None:
        self.directory = Path(directory)
        try:
            (self.directory / "search").mkdir(parents=True, exist_ok=True)
            (self.directory / "records").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PubMedCacheError(f"cannot create the PubMed cache folder {self.directory}: {exc.strerror or exc}"
                                   ) from None
        self.write_errors = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------- searches
    @staticmethod
    def search_key(params: Dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps(params, sort_keys=True).encode("utf-8")).hexdigest()

    def get_search(self, params: Dict[str, Any]) -> Optional[List[str]]:
        """The PMIDs cached for these esearch parameters (None: not cached, or a damaged entry)."""
        data = self._read_json(self.directory / "search" / f"{self.search_key(params)}.json")
        if not isinstance(data, dict) or data.get("params") != json.loads(json.dumps(params)):
            return None
        ids = data.get("ids")
        if not isinstance(ids, list) or not all(is_pmid(i) for i in ids):
            return None
        return list(ids)

    def put_search(self, params: Dict[str, Any], ids: Sequence[str]) -> None:
        self._write(self.directory / "search" / f"{self.search_key(params)}.json",
                    json.dumps({"params": params, "ids": list(ids)}, ensure_ascii=False).encode("utf-8"))

    # ------------------------------------------------------------- records
    def get_record(self, pmid: str) -> Union[Record, str, None]:
        """The cached record, :attr:`MISSING` (PubMed had none), or None (not cached, or a damaged entry)."""
        path = self.directory / "records" / f"{pmid}.json"
        data = self._read_json(path)
        if not isinstance(data, dict):
            return None
        if data == {"missing": True}:
            return self.MISSING
        try:
            record = record_from_dict(data, str(path))
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError):
            return None
        return record if record.id == pmid else None

    def put_record(self, pmid: str, record: Optional[Record]) -> None:
        value = {"missing": True} if record is None else record_to_dict(record)
        self._write(self.directory / "records" / f"{pmid}.json",
                    json.dumps(value, ensure_ascii=False).encode("utf-8"))

    # ------------------------------------------------------------- chunk vectors
    def get_vectors(self, identity: str, pmid: str, digest: str, dim: int) -> Optional[np.ndarray]:
        """The chunk vectors of ``pmid`` under the encoder ``identity``, when they were computed from chunks
        with this ``digest`` (float32 [chunks, dim]; None otherwise)."""
        path = self.directory / "vectors" / identity / f"{pmid}.npz"
        try:
            if path.stat().st_size > MAX_ENTRY_BYTES:
                return None
            with np.load(path, allow_pickle=False) as npz:
                vectors, stored = npz["vectors"], npz["digest"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, EOFError, TypeError, zipfile.BadZipFile) as exc:  # damaged: a miss, rewritten later
            LOG.debug("PubMed cache: unreadable vectors %s (%s)", path, exc)
            return None
        if (vectors.dtype != np.float32 or vectors.ndim != 2 or vectors.shape[1] != dim
                or stored.shape != () or str(stored) != digest or not np.isfinite(vectors).all()):
            return None
        return np.ascontiguousarray(vectors)

    def put_vectors(self, identity: str, pmid: str, digest: str, vectors: np.ndarray) -> None:
        folder = self.directory / "vectors" / identity
        buf = io.BytesIO()
        np.savez(buf, vectors=np.asarray(vectors, dtype=np.float32), digest=np.array(digest))
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._failed(folder, exc)
            return
        self._write(folder / f"{pmid}.npz", buf.getvalue())

    # ------------------------------------------------------------- files
    @staticmethod
    def _read_json(path: Path) -> Any:
        try:
            if path.stat().st_size > MAX_ENTRY_BYTES:
                return None
            return json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as exc:  # damaged or unreadable: fetched again, rewritten
            LOG.debug("PubMed cache: unreadable entry %s (%s)", path, exc)
            return None

    def _write(self, path: Path, payload: bytes) -> None:
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            with os.fdopen(fd, "wb") as fh:
                fh.write(payload)
            os.replace(tmp, path)
            tmp = None
        except OSError as exc:
            self._failed(path, exc)
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def _failed(self, path: Path, exc: OSError) -> None:
        with self._lock:
            self.write_errors += 1
        LOG.warning("PubMed cache: cannot write %s (%s); the result is returned uncached", path,
                    exc.strerror or exc)

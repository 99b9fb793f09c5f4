"""The on-disk side of a collection: writing a complete directory atomically, checking it at open, copying its
models in, and cleaning up after a write that was killed.

- A write builds the whole directory beside the target and swaps it in (``_files.swap_in``), so a crash leaves
  the old collection or the new one, never a mix; before every open and write, ``_files.recover_leftovers``
  removes what a killed write left (a cut-short swap of a complete collection is put back), and nothing else.
- Every file a collection reads at open is listed in the manifest with its size and sha256 (``files``), and the
  JSONL files hold one row per line in row order, so a shuffled, truncated or edited file is caught at open with
  an error naming it (:class:`DamagedCollection`) instead of returning hits from the wrong documents.
- Models are copied into the collection (``models/encoder``, ``models/query``; hard links where the file system
  allows), so a collection keeps working when the environment or cache that built it is gone, and the manifest
  never sends the loader to a path outside the collection.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from .._files import recover_leftovers as _recover

FORMAT = "medretrieve-collection-1"
MANIFEST = "manifest.json"
CHUNKS = "chunks.jsonl"
SECTIONS = "sections.jsonl"
DENSE = "dense.index"
LEXICAL = "lexical"
MODELS = "models"

Digest = Dict[str, Any]  # {"bytes": int, "sha256": str, "lines": int (JSONL only)}


class DamagedCollection(ValueError):
    """A collection file does not match its manifest (or its rows are out of order): it was changed, truncated
    or partly restored since it was written. The message names the file."""


# ----------------------------------------------------------------- digests and JSONL


def file_digest(path: Path) -> Digest:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
            size += len(block)
    return {"bytes": size, "sha256": h.hexdigest()}


def write_jsonl(path: Path, records: Iterable[Dict[str, Any]]) -> Digest:
    """Write one compact JSON object per line; returns the file's digest (computed while writing)."""
    h = hashlib.sha256()
    size = lines = 0
    with open(path, "wb") as fh:
        for rec in records:
            line = (json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
            fh.write(line)
            h.update(line)
            size += len(line)
            lines += 1
    return {"bytes": size, "sha256": h.hexdigest(), "lines": lines}


def read_jsonl(path: Path, expected: Optional[Digest]) -> List[Any]:
    """The JSON values of a JSONL file (one a line), checked against its manifest digest when there is one."""
    if not path.is_file():
        raise DamagedCollection(f"{path} is missing")
    data = path.read_bytes()
    if expected is not None:
        if len(data) != expected.get("bytes") or hashlib.sha256(data).hexdigest() != expected.get("sha256"):
            raise DamagedCollection(f"{path} does not match the manifest ({len(data)} bytes, expected "
                                    f"{expected.get('bytes')}; sha256 differs): the file was changed after the "
                                    "collection was written; rebuild the collection or restore the file")
    out = []
    # lines end at "\n" alone: str.splitlines() would also cut at U+2028 and other separators a text may hold
    for n, line in enumerate(data.decode("utf-8").split("\n")[:-1] if data else [], 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DamagedCollection(f"{path} line {n} is not JSON ({exc})") from None
    return out


def check_file(path: Path, expected: Optional[Digest]) -> None:
    """DamagedCollection when ``path`` is missing or differs from its manifest digest."""
    if not path.is_file():
        raise DamagedCollection(f"{path} is missing")
    if expected is not None:
        got = file_digest(path)
        if got["bytes"] != expected.get("bytes") or got["sha256"] != expected.get("sha256"):
            raise DamagedCollection(f"{path} does not match the manifest (sha256 or size differs): the file was "
                                    "changed after the collection was written; rebuild the collection")


def digests(root: Path, names: Iterable[str]) -> Dict[str, Digest]:
    """Digests of the files ``names`` (paths relative to ``root``, directories expanded to their files)."""
    out: Dict[str, Digest] = {}
    for name in names:
        p = root / name
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file():
                out[f.relative_to(root).as_posix()] = file_digest(f)
    return out


# ----------------------------------------------------------------- models inside the collection


def link_or_copy_tree(src: Path, dst: Path) -> None:
    """Copy directory ``src`` to ``dst`` (created), hard-linking files where the file system allows (models are
    never modified in place, so a link is as good as a copy); symlinks are followed, so the copy stands alone."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.rglob("*"):
        target = dst / f.relative_to(src)
        if f.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        real = f.resolve()
        try:
            os.link(real, target)
        except OSError:
            shutil.copyfile(real, target)


def inside(root: Path, relative: str) -> Path:
    """``root / relative``, refusing a path that leaves ``root`` (absolute, or with ``..``)."""
    p = Path(relative)
    resolved = (root / p).resolve()
    if p.is_absolute() or not resolved.is_relative_to(root.resolve()):
        raise ValueError(f"{root / MANIFEST} names {relative!r}, a path outside the collection")
    return resolved


# ----------------------------------------------------------------- atomic directory writes (see _files)


def is_collection(path: Path) -> bool:
    """Whether ``path`` is a directory holding a medretrieve collection manifest."""
    m = path / MANIFEST
    if not m.is_file():
        return False
    try:
        return json.loads(m.read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError):
        return False




def recover_leftovers(out: Path) -> List[str]:
    """:func:`medretrieve._files.recover_leftovers` for a collection directory."""
    return _recover(out, is_collection)

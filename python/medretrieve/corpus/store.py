"""The on-disk side of a collection: writing a complete directory atomically, checking its files at open, copying
its models in, keeping every path inside the collection, and cleaning up after a write that was killed.

- A write builds the whole directory beside the target and swaps it in (``_files.swap_in``), so a crash leaves
  the old collection or the new one, never a mix; before every open and write, ``_files.recover_leftovers``
  removes what a killed write left (a cut-short swap of a complete collection is put back), and nothing else.
- Every file a collection reads is listed in the manifest with its size and sha256 (``files``), and the JSONL
  files hold one row per line in row order, so a shuffled, truncated or edited file is caught with an error
  naming it (:class:`DamagedCollection`) instead of returning hits from the wrong documents. Sizes are checked at
  every open (a ``stat`` per file); the digests when the collection is small enough or the caller asks.
- Nothing outside the collection folder is ever opened: the manifest's paths are relative and checked before
  use (:func:`confined`), and a link inside the folder that leads out of it is refused (:func:`check_links`). The
  error names the path the manifest or the link gives, never whether something exists there.
- Writers take turns: within a process a lock of the ``Collection``, across processes an advisory ``flock`` held
  while a new version is swapped in (:func:`writer_lock`), and a writer whose collection changed on disk since it
  read it stops (:class:`CollectionChanged`) instead of undoing the other change.
- Models are copied into the collection (``models/encoder``, ``models/query``): reflinked where the file system
  can share blocks copy-on-write, copied otherwise, never hard-linked to a file another place owns (the installed
  package, the user's cache), so editing one copy in place can never change another (:func:`copy_tree`).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
import zlib
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from .._files import copy_file, recover_leftovers as _recover

FORMAT = "medretrieve-collection-1"
MANIFEST = "manifest.json"
CHUNKS = "chunks.jsonl"
SECTIONS = "sections.jsonl"
DENSE = "dense.index"
LEXICAL = "lexical"
MODELS = "models"
MANIFEST_MAX_BYTES = 16 << 20  # a manifest is a few KB; a larger one is refused unread

Digest = Dict[str, Any]  # {"bytes": int, "sha256": str, "crc32": int, "lines": int (JSONL only)}


class DamagedCollection(ValueError):
    """A collection's files do not match its manifest, or the manifest itself is malformed: a file was changed,
    truncated or partly restored since it was written, or the manifest names something it may not. The message
    names the file (and the field, line or record) at fault."""


# ----------------------------------------------------------------- digests and JSONL


def file_digest(path: Path) -> Digest:
    """Size, sha256 and crc32 of a file (crc32: the cheap check of a file read whole at search time)."""
    h = hashlib.sha256()
    crc = size = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
            crc = zlib.crc32(block, crc)
            size += len(block)
    return {"bytes": size, "sha256": h.hexdigest(), "crc32": crc}


def write_jsonl(path: Path, records: Iterable[Dict[str, Any]]) -> Digest:
    """Write one compact JSON object per line; returns the file's digest (computed while writing)."""
    h = hashlib.sha256()
    crc = size = lines = 0
    with open(path, "wb") as fh:
        for rec in records:
            line = (json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
            fh.write(line)
            h.update(line)
            crc = zlib.crc32(line, crc)
            size += len(line)
            lines += 1
    return {"bytes": size, "sha256": h.hexdigest(), "crc32": crc, "lines": lines}


def parse_jsonl(path: Path, data: bytes) -> List[Any]:
    """The JSON values of a JSONL file's bytes (one a line); DamagedCollection naming the line that is not UTF-8
    text or not JSON."""
    out = []
    # lines end at "\n" alone: str.splitlines() would also cut at U+2028 and other separators a text may hold
    for n, line in enumerate(data.split(b"\n")[:-1] if data else [], 1):
        try:
            out.append(json.loads(line.decode("utf-8")))
        except UnicodeDecodeError as exc:
            raise DamagedCollection(f"{path} line {n} is not UTF-8 text (byte {exc.start + 1}); the file was "
                                    "damaged: rebuild the collection or restore the file") from None
        except (ValueError, RecursionError) as exc:
            raise DamagedCollection(f"{path} line {n} is not JSON ({str(exc)[:200]})") from None
    return out


def read_jsonl(path: Path, expected: Optional[Digest]) -> List[Any]:
    """The JSON values of a JSONL file (one a line), checked against its manifest digest when there is one."""
    if not path.is_file():
        raise DamagedCollection(f"{path} is missing")
    data = path.read_bytes()
    if expected is not None:
        check_bytes(path, data, expected, full=True)
    return parse_jsonl(path, data)


def check_bytes(path: Path, data: bytes, expected: Digest, full: bool) -> None:
    """DamagedCollection when ``data`` (the content of ``path``) differs from its manifest digest: the size
    always, then the sha256 when ``full``, else the crc32 when the manifest holds one (a tenth of the cost)."""
    if len(data) != expected.get("bytes"):
        raise DamagedCollection(f"{path} holds {len(data)} bytes, the manifest records {expected.get('bytes')}: "
                                "the file was changed after the collection was written; rebuild the collection "
                                "or restore the file")
    if full and hashlib.sha256(data).hexdigest() != expected.get("sha256"):
        what = "sha256"
    elif not full and expected.get("crc32") is not None and zlib.crc32(data) != expected["crc32"]:
        what = "crc32"
    else:
        return
    raise DamagedCollection(f"{path} does not match the manifest ({what} differs): the file was changed after the "
                            "collection was written; rebuild the collection or restore the file")


def check_file(path: Path, expected: Optional[Digest], full: bool = True) -> None:
    """DamagedCollection when ``path`` is missing or differs from its manifest digest: its size always (a
    ``stat``), its sha256 too when ``full``."""
    if not path.is_file():
        raise DamagedCollection(f"{path} is missing")
    if expected is None:
        return
    size = path.stat().st_size
    if size != expected.get("bytes"):
        raise DamagedCollection(f"{path} holds {size} bytes, the manifest records {expected.get('bytes')}: the "
                                "file was truncated or changed after the collection was written; rebuild the "
                                "collection or restore the file")
    if full and file_digest(path)["sha256"] != expected.get("sha256"):
        raise DamagedCollection(f"{path} does not match the manifest (sha256 differs): the file was changed after "
                                "the collection was written; rebuild the collection")


def digests(root: Path, names: Iterable[str]) -> Dict[str, Digest]:
    """Digests of the files ``names`` (paths relative to ``root``, directories expanded to their files)."""
    out: Dict[str, Digest] = {}
    for name in names:
        p = root / name
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file():
                out[f.relative_to(root).as_posix()] = file_digest(f)
    return out


def load_array(path: Path, dtype: Any, length: Optional[int] = None, mmap: bool = True) -> Any:
    """The 1-d ``.npy`` array in ``path`` (memory-mapped when ``mmap``), checked to be of ``dtype`` and, when given,
    ``length`` items: DamagedCollection naming the file when it is missing, truncated or of another shape."""
    import numpy as np

    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise DamagedCollection(f"{path} is missing") from None
    except (ValueError, EOFError, OSError) as exc:
        raise DamagedCollection(f"{path} is not a readable array (truncated or damaged: {exc})") from None
    if array.dtype != np.dtype(dtype) or array.ndim != 1 or (length is not None and len(array) != length):
        raise DamagedCollection(f"{path} holds {array.dtype} {list(array.shape)}, expected {np.dtype(dtype)} "
                                f"[{'n' if length is None else length}]")
    return array


# ----------------------------------------------------------------- paths stay inside the collection


def relative_path_problem(relative: str) -> Optional[str]:
    """Why ``relative`` cannot name a file inside a collection (None when it can): it must be a relative POSIX
    path of plain names (no ``..``, no absolute path, no backslash or NUL). Decided on the text alone."""
    if not relative or len(relative) > 1024:
        return "an empty or over-long path"
    if "\x00" in relative or "\\" in relative:
        return "a path with a NUL or a backslash"
    if relative.startswith("/") or PurePosixPath(relative).is_absolute():
        return "an absolute path"
    if any(part in ("", ".", "..") for part in relative.split("/")):
        return "a path with '..', '.' or an empty part"
    return None


def confined(root: Path, relative: str, what: str = "a path") -> Path:
    """``root / relative``, refusing (DamagedCollection) a path that leaves ``root``: absolute, with ``..``, or
    through a link that leads out. The message names ``relative`` as the manifest gives it, and says nothing of
    what is (or is not) there."""
    problem = relative_path_problem(relative)
    if problem is None:
        base = root.resolve()
        if not (base / relative).resolve().is_relative_to(base):
            problem = "a path that leads out of the collection through a link"
    if problem is not None:
        raise DamagedCollection(f"{root / MANIFEST} names {what} {relative[:200]!r}, {problem}: every path a "
                                "collection names must stay inside its folder")
    return root / relative


def check_links(root: Path) -> None:
    """DamagedCollection when a link inside ``root`` (at any depth) leads out of it: opening the collection would
    read outside the folder. Links are not followed while walking; one that points inside is fine."""
    base = root.resolve()
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            p = Path(folder) / name
            if p.is_symlink() and not p.resolve().is_relative_to(base):
                raise DamagedCollection(f"{p} is a link that leads out of the collection folder; a collection "
                                        "reads only its own files (replace the link by the file)")


# ----------------------------------------------------------------- models inside the collection


def copy_tree(src: Path, dst: Path, own_root: Optional[Path] = None) -> None:
    """Copy directory ``src`` to ``dst`` (created), each file reflinked or copied (:func:`~medretrieve._files.
    copy_file`); links are followed, so the copy stands alone. A file of ``own_root`` (the collection's previous
    version, which the write replaces) that nothing else links to is hard-linked instead: it stays one file with one
    owner once the old version is removed, and a write does not copy the models again."""
    dst.mkdir(parents=True, exist_ok=True)
    own = own_root.resolve() if own_root is not None else None
    for f in sorted(src.rglob("*")):
        target = dst / f.relative_to(src)
        if f.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        real = f.resolve()
        if own is not None and real.is_relative_to(own) and not f.is_symlink() and real.stat().st_nlink == 1:
            try:
                os.link(real, target)
                continue
            except OSError:
                pass
        copy_file(real, target)


# ----------------------------------------------------------------- one writer at a time, across processes

Stamp = Tuple[int, int, int, int]  # what identifies one written version of a collection (its manifest file)
WRITER_WAIT_S = 60.0  # how long a write waits for another process's write of the same folder to end


class CollectionChanged(RuntimeError):
    """Another writer (another process, or another Collection object) changed the collection on disk after this
    one read it: writing now would undo that change. Open the collection again and repeat the update."""


def manifest_stamp(directory: Path) -> Optional[Stamp]:
    """Device, inode, size and modification time of ``directory``'s manifest (None without one): every write
    swaps in a new manifest file, so a different stamp means another version."""
    try:
        st = (directory / MANIFEST).stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


@contextmanager
def writer_lock(directory: Path, wait_s: Optional[float] = None) -> Iterator[None]:
    """Hold the exclusive advisory lock (``flock``) of the folder that holds ``directory`` while a write swaps
    its new version in: writers in other processes take turns (nothing is written for the lock; collections side
    by side in one folder share it). TimeoutError after ``wait_s`` seconds (default :data:`WRITER_WAIT_S`) of
    another writer holding it."""
    wait_s = WRITER_WAIT_S if wait_s is None else wait_s
    parent = directory.parent
    parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"another process has been writing in {parent} for over {wait_s:.0f} s; "
                                       f"{directory} was not changed") from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# ----------------------------------------------------------------- atomic directory writes (see _files)


def is_collection(path: Path) -> bool:
    """Whether ``path`` is a directory holding a medretrieve collection manifest (read only when it is of a
    manifest's size: this decides whether an overwrite may replace the directory)."""
    m = path / MANIFEST
    try:
        if not m.is_file() or m.stat().st_size > MANIFEST_MAX_BYTES:
            return False
        value = json.loads(m.read_bytes())
        return isinstance(value, dict) and value.get("format") == FORMAT
    except (OSError, ValueError, RecursionError):
        return False


def recover_leftovers(out: Path) -> List[str]:
    """:func:`medretrieve._files.recover_leftovers` for a collection directory."""
    return _recover(out, is_collection)

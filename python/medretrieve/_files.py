"""Small file helpers every wing shares: JSON reading with errors that name the file, atomic writes.

An atomic write goes to a temporary file beside the target (same directory, so the rename cannot cross file
systems), is flushed and fsynced, then renamed over the target: a crash leaves the old file or the new one,
never a torn one. A directory (a collection, an exported model) is written the same way: built whole in
``.<name>.tmp-<pid>-<random>`` beside the target, then swapped in with two renames (:func:`swap_in`); the next
write or open calls :func:`recover_leftovers`, which removes what a killed writer left, and only that.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]


def read_json(path: PathLike) -> Any:
    """The JSON value in ``path``; ValueError naming the file when it is missing or not valid JSON."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep, a number too long
        raise ValueError(f"{path}: not valid JSON ({str(exc)[:200]})") from None


def read_format_json(path: PathLike, fmt: str, what: str, missing: str = "") -> Dict[str, Any]:
    """The JSON object in ``path`` whose ``format`` is ``fmt``: FileNotFoundError when there is no file (``missing``
    appended to the message), ValueError naming ``what`` it should have been otherwise."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}{missing}")
    d = read_json(path)
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise ValueError(f"{path} is not a medretrieve {what} (expected format {fmt!r})")
    return d


def write_text_atomic(path: PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see the module docstring)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json_atomic(path: PathLike, value: Any, indent: Union[int, None] = 1) -> None:
    """Write ``value`` as JSON to ``path`` atomically (values JSON does not know, e.g. paths, as strings)."""
    write_text_atomic(path, json.dumps(value, indent=indent, ensure_ascii=False, default=str))


def new_temp_dir(out: Path) -> Path:
    """An empty directory ``.<name>.tmp-<pid>-<random>`` beside ``out``, to build ``out``'s new content in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))


def swap_in(tmp: Path, out: Path) -> None:
    """Replace ``out`` (a directory or a file, or nothing) by the complete directory ``tmp``: the old one moves
    to ``.<name>.old-<pid>-<ns>`` for the instant between the two renames, then is removed."""
    old = None
    if out.exists() or out.is_symlink():
        old = out.with_name(f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _leftovers(out: Path, kind: str) -> Iterator[Tuple[Path, int]]:
    prefix = f".{out.name}.{kind}-"
    if not out.parent.is_dir():
        return
    for p in out.parent.iterdir():
        if p.name.startswith(prefix) and p.is_dir():
            pid = p.name[len(prefix):].split("-", 1)[0]
            if pid.isdigit():
                yield p, int(pid)


def recover_leftovers(out: Path, is_complete: Callable[[Path], bool] = lambda p: False) -> List[str]:
    """Clean up after writes of ``out`` that were killed: a temporary directory of a process that is gone is
    removed; an old directory whose swap was cut short is put back when ``out`` is missing and
    ``is_complete(old)``, else removed. Only directories with exactly these names are touched. Returns what was
    done."""
    done = []
    for p, pid in _leftovers(out, "old"):
        if _pid_alive(pid):
            continue
        if not out.exists() and is_complete(p):
            os.replace(p, out)
            done.append(f"restored {out} from {p.name}")
        else:
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed {p.name}")
    for p, pid in _leftovers(out, "tmp"):
        if not _pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed {p.name}")
    return done


_FICLONE = 0x40049409  # linux/fs.h: share the source's blocks copy-on-write (btrfs, XFS, bcachefs...)


def copy_file(src: PathLike, dst: PathLike) -> None:
    """Copy ``src`` to a new file ``dst`` that shares nothing with it once written: a reflink where the file system
    supports one (the blocks are shared copy-on-write, so writing either copy leaves the other as it was), else
    ``os.copy_file_range`` (an in-kernel copy), else an ordinary copy. Never a hard link."""
    import fcntl

    with open(src, "rb") as fin, open(dst, "wb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), _FICLONE, fin.fileno())
            return
        except OSError:
            pass
        size = os.fstat(fin.fileno()).st_size
        try:
            done = 0
            while done < size:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), size - done)
                if n == 0:
                    break
                done += n
            if done == size:
                return
        except OSError:
            pass
        fin.seek(0)
        fout.seek(0)
        fout.truncate()
        shutil.copyfileobj(fin, fout, 1 << 20)

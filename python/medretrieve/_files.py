"""Small file helpers every wing shares: JSON reading with errors that name the file, atomic writes.

An atomic write goes to a temporary file beside the target (same directory, so the rename cannot cross file
systems), is flushed and fsynced, then renamed over the target, and the folder is fsynced: a crash or a power loss
leaves the old file or the new one, never a torn one. A directory (a collection, an exported model) is written the
same way: built whole in ``.<name>.tmp-<pid>-<random>`` beside the target, then swapped in (:func:`swap_in`) in an
order a power loss cannot break: every file of the new version fsynced, then its directories, then the folder
around it; then the two renames; then the folder again. So a rename that reached the disk never names blocks that
did not. The next write or open calls :func:`recover_leftovers`, which removes what a killed writer left, and only
that: an old version moved aside is locked (``flock``) by its writer until the swap is over, so a leftover one is
known dead by its lock, not by its PID (which another process may have been given since).

:func:`disk_full_error` turns a full disk during such a write into an error that names the file, the free space
the write needs and says that nothing was changed.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

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
        fsync_dir(path.parent)
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


def fsync_dir(directory: Path) -> None:
    """Make ``directory``'s entries (names created, renamed or removed in it) durable. File systems that cannot
    fsync a directory (some network ones) are skipped: they give no such guarantee to keep."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:  # a folder one may write in but not list: nothing more this process can do
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then every directory, deepest first, ``root`` last (links not followed):
    once it returns, the whole tree's blocks and names are on disk."""
    folders: List[Path] = []
    for here, _, files in os.walk(root, followlinks=False):
        folders.append(Path(here))
        for name in files:
            p = Path(here) / name
            if p.is_symlink() or not p.is_file():
                continue
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for folder in reversed(folders):
        fsync_dir(folder)


_SWAP_LOCK_WAIT_S = 10.0  # a recovery holds an old version's lock only while it renames it back


def _lock_version(path: Path, wait_s: float) -> Optional[int]:
    """An fd of ``path`` (a directory or a file, not a link) holding its exclusive ``flock``, waiting at most
    ``wait_s`` seconds for another holder; None when ``path`` is gone, a link, or (``wait_s`` 0) held by another."""
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(path, flags | (os.O_DIRECTORY if path.is_dir() else 0))
    except OSError:
        return None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                if wait_s:
                    raise TimeoutError(f"{path} stayed locked by another process for {wait_s:.0f} s; nothing was "
                                       "changed") from None
                return None
            time.sleep(0.01)


def swap_in(tmp: Path, out: Path) -> None:
    """Replace ``out`` (a directory or a file, or nothing) by the complete directory ``tmp``, durably (module
    docstring): ``tmp`` fsynced whole and the folder fsynced, then the old version moves to
    ``.<name>.old-<pid>-<ns>`` (locked by this writer until it is removed) and ``tmp`` to ``out``, the folder is
    fsynced again, and the old version is removed."""
    fsync_tree(tmp)
    fsync_dir(out.parent)
    old = lock = None
    if out.exists() or out.is_symlink():
        lock = None if out.is_symlink() else _lock_version(out, _SWAP_LOCK_WAIT_S)
        old = out.with_name(f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}")
    try:
        if old is not None:
            os.replace(out, old)
        os.replace(tmp, out)
        fsync_dir(out.parent)
        if old is not None:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink()
    finally:
        if lock is not None:
            os.close(lock)


def _process_start(pid: int) -> Optional[float]:
    """When process ``pid`` started (seconds since the epoch), from /proc; None where that cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # field 22, after the command's name
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _writer_alive(pid: int, made: float) -> bool:
    """Whether the process ``pid`` that named a temporary directory last changed at ``made`` (epoch seconds) may
    still be writing it: it exists and did not start after that change (a process given the same PID later
    did not write it; 1 s of slack for the boot time's resolution)."""
    if pid != os.getpid():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's live process
            pass
    started = _process_start(pid)
    return started is None or started <= made + 1.0


def _leftovers(out: Path, kind: str) -> Iterator[Tuple[Path, int]]:
    prefix = f".{out.name}.{kind}-"
    if not out.parent.is_dir():
        return
    for p in out.parent.iterdir():
        if p.name.startswith(prefix) and (p.is_dir() or kind == "old") and not p.is_symlink():
            pid = p.name[len(prefix):].split("-", 1)[0]
            if pid.isdigit():
                yield p, int(pid)


def recover_leftovers(out: Path, is_complete: Callable[[Path], bool] = lambda p: False) -> List[str]:
    """Clean up after writes of ``out`` that were killed (module docstring): an old version moved aside whose
    writer's lock is gone is put back when ``out`` is missing and ``is_complete(old)``, else removed; a temporary
    directory whose writer is gone (no such process, or one that started after the directory last changed) is
    removed. Only entries with exactly these names are touched. Returns what was done."""
    done = []
    for p, _ in _leftovers(out, "old"):
        lock = _lock_version(p, 0.0)
        if lock is None:  # a live writer is between its renames (or another recovery has it)
            continue
        try:
            if not p.exists():
                continue
            if not out.exists() and is_complete(p):
                os.replace(p, out)
                fsync_dir(out.parent)
                done.append(f"restored {out} from {p.name}")
            else:
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                done.append(f"removed {p.name}")
        finally:
            os.close(lock)
    for p, pid in _leftovers(out, "tmp"):
        try:
            made = p.stat().st_mtime
        except OSError:
            continue
        if not _writer_alive(pid, made):
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed {p.name}")
    return done


# ----------------------------------------------------------------- a full disk, said plainly

_NO_SPACE = re.compile(r"No space left on device|Disk quota exceeded|\d+ requested and \d+ written")


def _tree_sizes(root: Optional[Path]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    if root is not None and root.is_dir():
        for folder, _, files in os.walk(root, followlinks=False):
            for name in files:
                p = Path(folder) / name
                try:
                    out[p.relative_to(root).as_posix()] = p.lstat().st_size
                except OSError:
                    pass
    return out


class DiskFull:
    """What a write that ran out of space was doing, read before its temporary directory is removed: the file it
    was writing and the bytes the new version needs (what it wrote, and for each file not written yet the size
    it has in ``like``, the version being replaced). :meth:`error` (after the removal) adds the free space."""

    def __init__(self, target: Path, work: Path, like: Optional[Path], exc: BaseException) -> None:
        self.target = target
        self.at_least = like is None  # nothing to size the files not written yet by: what was written so far
        written = _tree_sizes(work)
        before = _tree_sizes(like)
        self.needed = sum(max(written.get(k, 0), before.get(k, 0)) for k in set(written) | set(before))
        named = re.search(re.escape(str(work)) + r"/[^\s:'\"]+", str(exc))
        if named:  # the native writer names its temporary file: the file it was writing
            self.file = Path(re.sub(r"\.tmp\.\d+\.\d+$", "", named.group(0))).relative_to(work).as_posix()
        else:
            try:
                newest = max(written, key=lambda k: (work / k).lstat().st_mtime_ns, default="")
            except OSError:  # removed meanwhile
                newest = ""
            self.file = newest or "(the first file)"

    def error(self) -> OSError:
        """The error to raise (an OSError with errno ENOSPC) once the temporary directory is removed."""
        parent = self.target.parent
        free = shutil.disk_usage(parent).free if parent.is_dir() else 0
        mib = 1 << 20
        need = f"{'more than' if self.at_least else 'about'} {self.needed / mib:.1f} MiB"
        return OSError(errno.ENOSPC, f"no space left on the device while writing {self.file} of {self.target}: the "
                       f"new version needs {need} free in {parent} ({free / mib:.1f} MiB free now); nothing was "
                       f"changed, {self.target} is as it was before the write")


def disk_full_error(exc: BaseException, target: Path, work: Path, like: Optional[Path] = None
                    ) -> Optional[DiskFull]:
    """A :class:`DiskFull` when ``exc`` (raised while writing ``target``'s new version in ``work``) means the disk
    or the quota is full (ENOSPC, EDQUOT, or such a message from numpy or the native core), else None. ``like``:
    a version whose files size those not written yet (None: the space needed is more than what was written)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(target, work, like, exc)
    if isinstance(exc, (OSError, RuntimeError)) and _NO_SPACE.search(str(exc)):
        return DiskFull(target, work, like, exc)
    return None


_FICLONE = 0x40049409  # linux/fs.h: share the source's blocks copy-on-write (btrfs, XFS, bcachefs...)


def copy_file(src: PathLike, dst: PathLike) -> None:
    """Copy ``src`` to a new file ``dst`` that shares nothing with it once written: a reflink where the file system
    supports one (the blocks are shared copy-on-write, so writing either copy leaves the other as it was), else
    ``os.copy_file_range`` (an in-kernel copy), else an ordinary copy. Never a hard link."""
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

"""A collection write under power loss, replayed as ALICE and CrashMonkey do: every durability step of a real write
(fsync of a file or a folder, rename, removal) is recorded with the state of the disk after it, and every state a
power loss after any prefix of those steps could leave is rebuilt and opened. It must open to the old version or
the new one, byte for byte, never to a damaged mix.

The model of a power loss after a prefix (pessimistic, as ALICE's): a file's bytes written since its last fsync
are kept or lost (lost: the file holds zeros of its size, the worst case a size check cannot see); a folder's names
changed since its last fsync are kept or lost (lost: the names as of its last fsync); the two chosen apart, so a
rename that reached the disk may name blocks that did not. Names a folder never fsynced kept are not there.
Writes and fsyncs the native core makes are not seen by the recorder: they count as never synced (pessimistic).

Also here: the leftover of a swap cut short is restored by its lock, not its writer's PID (a PID given to another
process since), and a full disk is an error naming the file, the space needed and that nothing was changed.
"""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from medretrieve.corpus.collection import Collection

DOCS = [{"id": f"d{i}", "title": f"Topic {i}", "text": f"Document {i} is about drug number {i} and dose {i}."}
        for i in range(6)]
NEW = [{"id": "d9", "title": "Topic 9", "text": "Document 9 is about drug number 9 and a new dose."}]

Entry = Tuple[str, int]  # (kind "d" / "f", inode)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from medretrieve.models.encoders import default_model_dir

    out = tmp_path_factory.mktemp("crash") / "col"
    Collection.build(DOCS, out, encoder=default_model_dir(), progress=False)
    return out


class Disk:
    """The recorded write: the disk as processes saw it after each step, and what each fsync made durable."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs: Dict[str, bytes] = {}  # sha256 -> content
        self._read: Dict[Tuple[int, int, int], str] = {}  # (inode, size, mtime) -> sha256, not read twice
        self.views: List[Dict[str, Tuple[str, int, Optional[str]]]] = []  # path -> (kind, inode, sha or None)
        self.synced_data: List[Dict[int, str]] = []  # per step: inode -> sha at its last fsync
        self.synced_names: List[Dict[int, Dict[str, Entry]]] = []  # per step: folder inode -> names at its fsync
        self.steps: List[str] = []
        view = self._view()
        self.views.append(view)  # the state before the write: all of it on disk long ago
        self.synced_data.append({ino: sha for kind, ino, sha in view.values() if sha is not None})
        self.synced_names.append({ino: self._names(view, path) for path, (kind, ino, _) in view.items() if kind == "d"})

    def _sha(self, p: Path, st: os.stat_result) -> str:
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key not in self._read:
            data = p.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            self.blobs[sha] = data
            self._read[key] = sha
        return self._read[key]

    def _view(self) -> Dict[str, Tuple[str, int, Optional[str]]]:
        out: Dict[str, Tuple[str, int, Optional[str]]] = {".": ("d", self.root.stat().st_ino, None)}
        for folder, dirs, files in os.walk(self.root):
            for name in dirs + files:
                p = Path(folder) / name
                st = p.lstat()
                rel = p.relative_to(self.root).as_posix()
                out[rel] = ("d", st.st_ino, None) if stat.S_ISDIR(st.st_mode) else ("f", st.st_ino, self._sha(p, st))
        return out

    @staticmethod
    def _names(view, folder: str) -> Dict[str, Entry]:
        prefix = "" if folder == "." else folder + "/"
        return {rel[len(prefix):]: (kind, ino) for rel, (kind, ino, _) in view.items()
                if rel != "." and rel.startswith(prefix) and "/" not in rel[len(prefix):]}

    def step(self, what: str, fsynced: Optional[int] = None) -> None:
        """Record the disk after a step; ``fsynced``: the inode the step fsynced."""
        view = self._view()
        data, names = dict(self.synced_data[-1]), dict(self.synced_names[-1])
        for rel, (kind, ino, sha) in view.items():
            if ino == fsynced:
                if kind == "f":
                    data[ino] = sha  # type: ignore[assignment]
                else:
                    names[ino] = self._names(view, rel)
        self.views.append(view)
        self.synced_data.append(data)
        self.synced_names.append(names)
        self.steps.append(what)

    def _content(self, i: int, ino: int, data_kept: bool) -> str:
        """The content of inode ``ino`` after a power loss after step ``i`` (module docstring)."""
        sha = next((v[2] for v in self.views[i].values() if v[1] == ino), None)
        if data_kept and sha is not None:
            return sha
        if ino in self.synced_data[i]:
            return self.synced_data[i][ino]
        zeros = b"\0" * (len(self.blobs[sha]) if sha is not None else 0)
        zero_sha = hashlib.sha256(zeros).hexdigest()
        self.blobs.setdefault(zero_sha, zeros)
        return zero_sha

    def _durable_names(self, i: int, folder_ino: int, prefix: str, data_kept: bool,
                       state: Dict[str, Optional[str]]) -> None:
        for name, (kind, ino) in self.synced_names[i].get(folder_ino, {}).items():
            rel = prefix + name
            if kind == "d":
                state[rel] = None
                self._durable_names(i, ino, rel + "/", data_kept, state)
            else:
                state[rel] = self._content(i, ino, data_kept)

    def crash_states(self, i: int):
        """The disks a power loss after step ``i`` may leave: ``{path: content sha or None for a folder}``, for
        names kept / lost and data kept / lost."""
        view = self.views[i]
        for names_kept in (True, False):
            for data_kept in (True, False):
                state: Dict[str, Optional[str]] = {}
                if names_kept:
                    for rel, (kind, ino, _) in view.items():
                        if rel != ".":
                            state[rel] = None if kind == "d" else self._content(i, ino, data_kept)
                else:
                    self._durable_names(i, view["."][1], "", data_kept, state)
                yield f"names {'kept' if names_kept else 'lost'}, data {'kept' if data_kept else 'lost'}", state

    def materialize(self, state: Dict[str, Optional[str]], into: Path, store: Path) -> None:
        """Lay ``state`` out in ``into``: folders made, files hard-linked from a store of contents (cheap)."""
        into.mkdir(parents=True)
        for rel in sorted(state, key=lambda r: r.count("/")):
            sha = state[rel]
            if sha is None:
                (into / rel).mkdir(parents=True, exist_ok=True)
                continue
            blob = store / sha
            if not blob.exists():
                blob.write_bytes(self.blobs[sha])
                blob.chmod(0o444)
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            os.link(blob, into / rel)


def record_write(monkeypatch, root: Path, write) -> Disk:
    """Run ``write()`` with every fsync, rename and removal recorded (:class:`Disk`)."""
    disk = Disk(root)
    real_fsync, real_replace, real_rename, real_rmtree, real_unlink = (os.fsync, os.replace, os.rename,
                                                                        shutil.rmtree, os.unlink)

    def fsync(fd):
        real_fsync(fd)
        disk.step("fsync", os.fstat(fd).st_ino)

    def replace(a, b, **kw):
        real_replace(a, b, **kw)
        disk.step(f"rename {Path(a).name} -> {Path(b).name}")

    def rename(a, b, **kw):
        real_rename(a, b, **kw)
        disk.step(f"rename {Path(a).name} -> {Path(b).name}")

    def rmtree(path, *a, **kw):
        real_rmtree(path, *a, **kw)
        disk.step(f"rmtree {Path(path).name}")

    def unlink(path, *a, **kw):
        real_unlink(path, *a, **kw)
        disk.step(f"unlink {Path(path).name}")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    monkeypatch.setattr(os, "unlink", unlink)
    try:
        write()
    finally:
        monkeypatch.undo()
    return disk


def _tree(path: Path) -> Dict[str, str]:
    return {p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def replay(disk: Disk, scratch: Path, old: Dict[str, str], new: Dict[str, str]) -> Tuple[int, List[str]]:
    """Open every crash state of every prefix; returns how many distinct states were opened and the failures."""
    seen, failures = set(), []
    store = scratch / "store"
    store.mkdir(parents=True)
    for i in range(len(disk.views)):
        for label, state in disk.crash_states(i):
            key = hashlib.sha256(repr(sorted(state.items())).encode()).hexdigest()
            if key in seen:
                continue
            seen.add(key)
            where = scratch / f"s{len(seen)}"
            disk.materialize(state, where, store)
            after = disk.steps[i - 1] if i else "before the write"
            try:
                Collection.open(where / "col", verify=True)
                got = _tree(where / "col")
                if got not in (old, new):
                    failures.append(f"after step {i} ({after}), {label}: opened a mix of old and new")
            except Exception as exc:  # noqa: BLE001 - any failure to open is what is counted
                failures.append(f"after step {i} ({after}), {label}: {type(exc).__name__}: {str(exc)[:150]}")
            shutil.rmtree(where)
    return len(seen), failures


@pytest.mark.parametrize("write", ["add", "delete"])
def test_every_state_a_power_loss_can_leave_opens_to_the_old_or_the_new_version(built, tmp_path, monkeypatch, write):
    root = tmp_path / "disk"
    shutil.copytree(built, root / "col")
    old = _tree(root / "col")
    col = Collection.open(root / "col")
    disk = record_write(monkeypatch, root, lambda: col.add(NEW) if write == "add" else col.delete("d2"))
    new = _tree(root / "col")
    assert new != old and len(disk.steps) > 10
    assert any(s.startswith("rename col -> .col.old-") for s in disk.steps)
    states, failures = replay(disk, tmp_path / "replay", old, new)
    assert states > 20 and not failures, f"{len(failures)} of {states} states:\n" + "\n".join(failures[:10])


# ----------------------------------------------------------------------------- a leftover found by its lock


def _reused_pid_name(col: Path) -> Path:
    """The leftover name a writer with a PID that is alive now would have left: this process's own."""
    return col.parent / f".{col.name}.old-{os.getpid()}-{time.monotonic_ns()}"


def test_a_swap_cut_short_is_restored_though_its_pid_is_alive_again(built, tmp_path):
    col = tmp_path / "col"
    shutil.copytree(built, col)
    old = _reused_pid_name(col)
    os.replace(col, old)  # the writer died between its renames; its PID now belongs to a live process (us)
    assert Collection.open(col).n_documents == len(DOCS)
    assert not old.exists()


def test_a_live_writers_old_version_is_left_alone_while_it_holds_its_lock(built, tmp_path):
    col = tmp_path / "col"
    shutil.copytree(built, col)
    old = col.parent / f".col.old-{os.getpid()}-1"
    os.replace(col, old)
    code = ("import fcntl, os, sys, time\n"
            f"fd = os.open({str(old)!r}, os.O_RDONLY | os.O_DIRECTORY)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\nsys.stdin.readline()\n")
    writer = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "locked"
        with pytest.raises(FileNotFoundError):  # mid-swap: not restored under the writer's feet
            Collection.open(col)
        assert old.exists()
    finally:
        writer.communicate("\n", timeout=30)
    assert Collection.open(col).n_documents == len(DOCS)  # the lock is gone with its writer: restored


def test_a_temporary_directory_of_a_reused_pid_is_removed(built, tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tmp = tmp_path / f".col.tmp-{sleeper.pid}-abc"
        tmp.mkdir()
        past = time.time() - 3600  # made an hour before the process that has its PID now started
        os.utime(tmp, (past, past))
        shutil.copytree(built, tmp_path / "col")
        Collection.open(tmp_path / "col")
        assert not tmp.exists()
        live = tmp_path / f".col.tmp-{sleeper.pid}-now"  # made after it started: its own, kept
        live.mkdir()
        Collection.open(tmp_path / "col")
        assert live.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


# ----------------------------------------------------------------------------- a full disk


@pytest.mark.parametrize("where", ["numpy", "native", "text"])
def test_a_full_disk_names_the_file_the_space_needed_and_that_nothing_changed(built, tmp_path, monkeypatch, where):
    import numpy as np

    from medretrieve.corpus import collection as module

    col_dir = tmp_path / "col"
    shutil.copytree(built, col_dir)
    before = _tree(col_dir)
    col = Collection.open(col_dir)
    if where == "numpy":  # numpy's own words: "2660 requested and 2016 written"
        def save(file, arr, *a, **kw):
            nbytes = np.asarray(arr).nbytes + 128
            Path(file).write_bytes(b"\x93NUMPY" + b"\0" * (nbytes // 2))
            raise OSError(f"{nbytes} requested and {nbytes // 2} written")

        monkeypatch.setattr(np, "save", save)
    elif where == "native":
        def save(self, path, *a, **kw):
            raise RuntimeError(f"cannot write {path}.tmp.{os.getpid()}.0: No space left on device")

        monkeypatch.setattr(type(col.dense), "save", save)
    else:
        def lexical_save(self, path, *a, **kw):
            Path(path).mkdir(parents=True, exist_ok=True)
            (Path(path) / "part").write_bytes(b"x" * 10)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(module.LexicalIndex, "save", lexical_save)
    with pytest.raises(OSError) as info:
        col.add(NEW)
    message = str(info.value)
    assert info.value.errno == errno.ENOSPC and "no space left" in message
    assert "nothing was changed" in message and "MiB free in" in message and str(col_dir) in message
    file = {"numpy": "rows/offsets.npy", "native": "dense.index", "text": "lexical/part"}[where]
    assert f"writing {file} of" in message
    monkeypatch.undo()
    assert _tree(col_dir) == before and not [p for p in tmp_path.iterdir() if p.name.startswith(".col.")]
    assert Collection.open(col_dir).n_documents == len(DOCS)


def test_a_build_on_a_full_disk_says_so_and_leaves_nothing(tmp_path, monkeypatch):
    import numpy as np

    from medretrieve.models.encoders import default_model_dir

    def save(file, arr, *a, **kw):
        Path(file).write_bytes(b"\x93NUMPY")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", save)
    with pytest.raises(OSError) as info:
        Collection.build(DOCS, tmp_path / "col", encoder=default_model_dir(), progress=False)
    message = str(info.value)
    assert info.value.errno == errno.ENOSPC and ".npy of" in message and "needs more than" in message
    assert "nothing was changed" in message and list(tmp_path.iterdir()) == []

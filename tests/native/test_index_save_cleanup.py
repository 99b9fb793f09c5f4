"""Saves killed half-way leave nothing behind for long: the next save of the same target, and its next load, remove
the temporaries of dead processes (``<target>.tmp.<pid>[.<n>]``, only when that pid is gone and no live process holds
the file), and never anything else. The target itself is untouched by a killed save.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import medretrieve
from native_child import describe, run_python

DIM = 32


def small(kind: str) -> object:
    x = np.random.default_rng(0).standard_normal((50, DIM)).astype(np.float32)
    if kind == "Index":
        idx = medretrieve.Index("ip", DIM)
        idx.init_index(50)
    else:
        idx = medretrieve.FlatIndex("ip", DIM)
    idx.add(x)  # type: ignore[attr-defined]
    return idx


def temporaries(target: Path) -> list:
    return sorted(p.name for p in target.parent.iterdir() if p.name.startswith(target.name + ".tmp."))


def kill_during_save(target: Path) -> str:
    """A child saves a large index over ``target`` and SIGKILLs itself once its temporary exists."""
    for rows in (400_000, 1_600_000):  # a bigger save if the first one finished before the kill
        proc = run_python(
            f"""
            import os, signal, threading, numpy as np, medretrieve
            target = {str(target)!r}
            idx = medretrieve.FlatIndex("ip", {DIM})
            idx.add(np.ones(({rows}, {DIM}), np.float32), num_threads=1)
            folder, name = os.path.split(target)
            def watch():
                while not any(f.startswith(name + ".tmp.") for f in os.listdir(folder)):
                    pass
                os.kill(os.getpid(), signal.SIGKILL)
            threading.Thread(target=watch, daemon=True).start()
            idx.save(target)
            print("saved before the kill")
            """,
            timeout=300,
        )
        if proc.returncode == -signal.SIGKILL:
            left = temporaries(target)
            assert len(left) == 1, left
            return left[0]
        assert proc.returncode == 0, describe(proc)
    pytest.fail("the save finished before the kill every time")


@pytest.mark.parametrize("kind", ["Index", "FlatIndex"])
@pytest.mark.parametrize("cleaner", ["load", "mmap load", "save"])
def test_next_save_or_load_removes_the_killed_saves_temporary(tmp_path, kind: str, cleaner: str) -> None:
    target = tmp_path / "index.mdr"
    original = small(kind)
    original.save(target)  # type: ignore[attr-defined]
    before = target.read_bytes()
    leftover = kill_during_save(target)
    assert target.read_bytes() == before  # the killed save never touched the target
    cls = type(original)
    if cleaner == "save":
        small(kind).save(target)  # type: ignore[attr-defined]
    else:
        loaded = cls.load(target, mmap=cleaner == "mmap load")  # type: ignore[attr-defined]
        assert loaded.get_ids_list() == original.get_ids_list()  # type: ignore[attr-defined]
    assert temporaries(target) == [], leftover
    assert sorted(os.listdir(tmp_path)) == ["index.mdr"]


def test_files_that_are_not_dead_temporaries_are_kept(tmp_path) -> None:
    target = tmp_path / "index.mdr"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # exited: its pid is gone
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    holder = None
    try:
        keep = {
            "index.mdr.tmp.notes": "not our pattern",
            f"index.mdr.tmp.{alive.pid}": "its process is alive",
            f"index.mdr.tmp.{alive.pid}.3": "its process is alive",
            f"index.mdr.tmp.{os.getpid()}.999": "ours: another thread may be saving it",
            f"other.mdr.tmp.{dead_pid}": "another target",
            f"index.mdr.tmpx.{dead_pid}": "not our pattern",
            f"index.mdr.tmp.{dead_pid}.7.bak": "not our pattern",
            f"index.mdr.tmp.{dead_pid}.1": "held locked by a live process (another pid namespace)",
        }
        for name in keep:
            (tmp_path / name).write_bytes(b"user data")
        (tmp_path / f"index.mdr.tmp.{dead_pid}.2").mkdir()  # not a file
        os.symlink(tmp_path / "index.mdr.tmp.notes", tmp_path / f"index.mdr.tmp.{dead_pid}.5")  # not a file
        holder = subprocess.Popen(
            [sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_EX); "
             "print('locked', flush=True); sys.stdin.read()", str(tmp_path / f"index.mdr.tmp.{dead_pid}.1")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        stale = [f"index.mdr.tmp.{dead_pid}", f"index.mdr.tmp.{dead_pid}.0"]
        for name in stale:
            (tmp_path / name).write_bytes(b"half a save")
        idx = small("Index")
        idx.save(target)  # type: ignore[attr-defined]
        medretrieve.Index.load(target)
        names = set(os.listdir(tmp_path))
        for name, why in keep.items():
            assert name in names and (tmp_path / name).read_bytes() == b"user data", why
        assert f"index.mdr.tmp.{dead_pid}.2" in names and f"index.mdr.tmp.{dead_pid}.5" in names
        assert not names & set(stale), names
    finally:
        for p in (alive, holder):
            if p is not None:
                p.kill()
                p.wait()


def test_save_refuses_to_replace_what_is_not_a_file_and_follows_links(tmp_path) -> None:
    fifo = tmp_path / "pipe.mdr"
    os.mkfifo(fifo)
    idx = small("FlatIndex")
    with pytest.raises(RuntimeError, match="not a regular file"):
        idx.save(fifo)  # type: ignore[attr-defined]
    assert fifo.is_fifo()
    real = tmp_path / "real.mdr"
    small("FlatIndex").save(real)  # type: ignore[attr-defined]
    link = tmp_path / "link.mdr"
    os.symlink(real, link)
    idx.save(link)  # type: ignore[attr-defined]
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert medretrieve.FlatIndex.load(link).get_ids_list() == idx.get_ids_list()  # type: ignore[attr-defined]
    assert sorted(os.listdir(tmp_path)) == ["link.mdr", "pipe.mdr", "real.mdr"]

"""Searches from 8 threads while ``Collection.add`` / ``delete`` run: none fails, none sees half an update."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from medretrieve.corpus.collection import Collection
from medretrieve.retrieval.retriever import Retriever

QUESTIONS = ["What is the first-line drug for type 2 diabetes?", "treatment of gout flares",
             "Which drugs treat acute migraine?", "symptoms of asthma", "Does aspirin inhibit platelets?",
             "drug number 7 dose"]


def _doc(i: int) -> dict:
    return {"id": f"u{i}", "title": f"Update {i}",
            "sections": [{"title": "Treatment",
                          "text": f"Drug number {i} treats gout flares and migraine at dose {i}."},
                         {"title": "Symptoms", "text": f"Patients with condition {i} report thirst and wheezing."}]}


@pytest.fixture()
def live(tmp_path, demo_collection_dir):
    import shutil

    out = tmp_path / "live"
    shutil.copytree(demo_collection_dir, out)
    return Collection.open(out)


def _hammer(search, enough, cap_s: float = 240.0, threads: int = 8):
    """Run ``search(i)`` from ``threads`` threads until ``enough(searches_done)`` (checked between searches) or
    ``cap_s`` seconds; returns (searches, errors). Bounded by the count of updates, not by time, so a loaded
    machine makes it slower, never weaker."""
    cap = time.monotonic() + cap_s
    done, errors, lock = [0], [], threading.Lock()

    def loop(t: int) -> None:
        i = t
        while time.monotonic() < cap and not enough(done[0]):
            try:
                search(i)
            except Exception as exc:  # every failure is counted and shown, none may happen
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
            with lock:
                done[0] += 1
            i += threads

    workers = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return done[0], errors


def _updates(col: Collection, until: threading.Event, rounds: list) -> None:
    i = 0
    while not until.is_set():
        col.add([_doc(i), _doc(i + 1)])
        col.delete([f"u{i}"])
        rounds.append(i)
        i += 2


def test_searches_from_8_threads_never_fail_while_add_and_delete_run(live):
    retriever = Retriever(live, ranker=None)
    stop = threading.Event()
    rounds: list = []
    writer = threading.Thread(target=_updates, args=(live, stop, rounds))
    writer.start()
    try:
        done, errors = _hammer(lambda i: retriever.search(QUESTIONS[i % len(QUESTIONS)], k=5, deadline_ms=None),
                               enough=lambda n: len(rounds) >= 4 and n >= 100)
    finally:
        stop.set()
        writer.join()
    assert len(rounds) >= 4, "the writer must have changed the collection while searches ran"
    assert errors == [], f"{len(errors)} of {done} searches failed, e.g. {errors[:3]}"
    back = Collection.open(live.directory)
    assert back.n_documents == live.n_documents and len(back) == len(live)


def test_a_snapshot_never_sees_half_an_update(live):
    """Every read member of one snapshot agrees with the others, whatever the writer is doing meanwhile."""
    stop = threading.Event()
    rounds: list = []
    writer = threading.Thread(target=_updates, args=(live, stop, rounds))
    writer.start()
    checks, failures = 0, []
    cap = time.monotonic() + 180.0
    try:
        while time.monotonic() < cap and len(failures) < 3 and not (len(rounds) >= 3 and checks >= 20):
            snap = live.snapshot()
            n = len(snap.rows)
            live_rows = np.flatnonzero(snap.alive)
            problems = []
            if len(snap.alive) != n or snap.dense.get_current_count() != n:
                problems.append(f"{n} rows, {len(snap.alive)} flags, {snap.dense.get_current_count()} vectors")
            if not snap.lexical.has_exactly(live_rows):
                problems.append(f"BM25 holds {len(snap.lexical)} rows, {len(live_rows)} live")
            if len(snap.lexical.scores("gout flares")) != len(snap.lexical.scores("migraine")):
                problems.append("BM25 score vectors of two lengths")
            if len(snap) != len(live_rows):
                problems.append(f"len {len(snap)} != {len(live_rows)} live rows")
            docs = {snap.rows[int(r)].document_id for r in live_rows[-4:]}
            for d in docs:
                if not snap.document_rows(d):
                    problems.append(f"document {d} has no rows")
            failures.extend(problems)
            checks += 1
    finally:
        stop.set()
        writer.join()
    assert len(rounds) >= 2 and checks > 20
    assert failures == []


def test_writers_are_serialised(live):
    """Two threads adding at once: both documents land, one after the other."""
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(live.add([_doc(100 + i)]))) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [2, 2]
    back = Collection.open(live.directory)
    assert {"u100", "u101"} <= {back.rows[int(r)].document_id for r in np.flatnonzero(back.alive)}
    assert json.loads((live.directory / "manifest.json").read_text())["counts"]["chunks"] == len(back)


def test_a_second_writer_of_a_changed_collection_stops_instead_of_undoing_the_change(live):
    from medretrieve import CollectionChanged

    other = Collection.open(live.directory)  # another process would hold such an object
    live.add([_doc(200)])
    with pytest.raises(CollectionChanged, match="changed by another writer"):
        other.add([_doc(201)])
    with pytest.raises(CollectionChanged):
        other.delete(other.rows[0].document_id)
    back = Collection.open(live.directory)
    assert "u200" in {back.rows[int(r)].document_id for r in np.flatnonzero(back.alive)}
    assert Collection.open(live.directory).add([_doc(201)]) == 2  # opened again: fine
    assert not [p for p in live.directory.parent.iterdir() if p.name.startswith(".live.")]


def test_a_write_waits_for_another_process_and_gives_up_at_its_deadline(live, monkeypatch):
    import subprocess
    import sys

    import medretrieve.corpus.store as store

    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(live.directory.parent)!r}, os.O_RDONLY)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(30)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(store, "WRITER_WAIT_S", 0.5)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="another process has been writing"):
            live.add([_doc(300)])
        assert time.monotonic() - t0 < 5
    finally:
        holder.kill()
        holder.wait()
    assert live.add([_doc(300)]) == 2  # the lock is free again; nothing was left half-done
    assert Collection.open(live.directory).n_documents == live.n_documents

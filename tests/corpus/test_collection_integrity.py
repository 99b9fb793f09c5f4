"""A collection's files are checked at open, overwrite replaces only collections, models live inside the
collection, and the next open cleans up after a write that was killed."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from medretrieve.corpus.collection import Collection
from medretrieve.corpus.store import DamagedCollection

DOCS = [{"id": f"d{i}", "title": f"Topic {i}", "text": f"Document {i} is about drug number {i} and dose {i}."}
        for i in range(6)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from medretrieve.models.encoders import default_model_dir

    out = tmp_path_factory.mktemp("integrity") / "col"
    Collection.build(DOCS, out, encoder=default_model_dir(), progress=False)
    return out


@pytest.fixture
def col(built, tmp_path):
    copy = tmp_path / "col"
    shutil.copytree(built, copy)
    return copy


def _lines(path: Path):
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _drop_digests(col: Path) -> None:
    """Make the collection look like one written before file digests (only the row checks remain)."""
    m = json.loads((col / "manifest.json").read_text())
    m.pop("files")
    (col / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("digests", [True, False])
def test_shuffled_chunk_lines_are_caught_at_open(col, digests):
    lines = _lines(col / "chunks.jsonl")
    (col / "chunks.jsonl").write_text("".join(lines[1:] + lines[:1]))
    if not digests:
        _drop_digests(col)
    with pytest.raises(DamagedCollection, match="chunks.jsonl"):
        Collection.open(col)


@pytest.mark.parametrize("digests", [True, False])
def test_a_missing_first_chunk_line_is_caught_at_open(col, digests):
    (col / "chunks.jsonl").write_text("".join(_lines(col / "chunks.jsonl")[1:]))
    if not digests:
        _drop_digests(col)
    with pytest.raises(DamagedCollection, match="chunks.jsonl"):
        Collection.open(col)


@pytest.mark.parametrize("digests", [True, False])
def test_lexical_arrays_of_the_wrong_length_are_caught_at_open(col, digests):
    import numpy as np

    path = col / "lexical" / "ids.npy"
    np.save(path, np.load(path)[:-1])
    if not digests:
        _drop_digests(col)
    with pytest.raises(ValueError, match="lexical"):
        Collection.open(col)


def test_an_edited_text_is_caught_by_its_digest(col):
    text = (col / "sections.jsonl").read_text().replace("drug number 3", "drug number 9")
    (col / "sections.jsonl").write_text(text)
    with pytest.raises(DamagedCollection, match="sections.jsonl does not match the manifest"):
        Collection.open(col)


def test_overwrite_replaces_only_a_collection_or_an_empty_directory(col, tmp_path):
    from medretrieve.models.encoders import default_model_dir

    mine = tmp_path / "my-files"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work")
    with pytest.raises(ValueError, match="not a medretrieve collection"):
        Collection.build(DOCS, mine, encoder=default_model_dir(), progress=False, overwrite=True)
    assert (mine / "thesis.txt").read_text() == "years of work"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert Collection.build(DOCS[:2], empty, encoder="default", progress=False, overwrite=True).n_documents == 2
    assert Collection.build(DOCS[:3], col, encoder="default", progress=False, overwrite=True).n_documents == 3


def test_the_manifest_cannot_send_the_loader_outside_the_collection(col, tmp_path):
    m = json.loads((col / "manifest.json").read_text())
    outside = str(tmp_path / "elsewhere")
    for bad in (outside, "../elsewhere"):
        m["encoder"]["dir"] = bad
        (col / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(DamagedCollection, match="encoder.dir: .*outside the collection"):
            Collection.open(col)
        # naming a model to use instead does not make the manifest sound
        with pytest.raises(DamagedCollection, match="encoder.dir"):
            Collection.open(col, encoder="default")


def test_a_collection_outlives_the_model_directory_it_was_built_with(tmp_path):
    from medretrieve.models.encoders import default_model_dir

    model = tmp_path / "venv-model"
    shutil.copytree(default_model_dir(), model)
    Collection.build(DOCS, tmp_path / "col", encoder=model, progress=False)
    shutil.rmtree(model)  # the environment that built it is gone
    back = Collection.open(tmp_path / "col")
    ids, _ = back.dense.search(back.encode_queries(["drug number 4"]), k=1)
    assert back.rows[int(ids[0, 0])].document_id == "d4"
    back.add([{"id": "d9", "text": "A new document about drug number 9."}])  # writes copy the models along
    assert Collection.open(tmp_path / "col").n_documents == 7


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_open_cleans_up_after_a_killed_write(col):
    pid = _dead_pid()
    tmp = col.parent / f".col.tmp-{pid}-abc123"
    shutil.copytree(col, tmp)
    old = col.parent / f".col.old-{pid}-99"
    shutil.copytree(col, old)
    mine = col.parent / ".col.tmp-notes"  # not ours: no pid, never touched
    mine.mkdir()
    Collection.open(col)
    assert not tmp.exists() and not old.exists() and mine.exists()
    live = col.parent / f".col.tmp-{os.getpid()}-live"  # a write in progress in a live process stays
    live.mkdir()
    Collection.open(col)
    assert live.exists()


def test_open_restores_a_collection_whose_swap_was_cut_short(col):
    old = col.parent / f".col.old-{_dead_pid()}-7"
    os.replace(col, old)  # killed between moving the old directory aside and moving the new one in
    assert Collection.open(col).n_documents == len(DOCS)
    assert not old.exists()


def test_kill_during_a_write_leaves_the_collection_readable_and_cleans_up(col):
    """A real SIGKILL in the middle of a write (the lexical save hangs), then an open."""
    code = (
        "import sys, time\n"
        "from medretrieve.corpus import collection as c\n"
        "c.LexicalIndex.save = lambda *a, **k: (print('saving', flush=True), time.sleep(60))\n"
        f"col = c.Collection.open({str(col)!r})\n"
        "col.delete('d0')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert proc.stdout.readline().strip() == "saving"
        leftovers = [p for p in col.parent.iterdir() if p.name.startswith(".col.tmp-")]
        assert leftovers
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(0.05)
    back = Collection.open(col)
    assert back.n_documents == len(DOCS)  # the killed delete never landed
    assert not [p for p in col.parent.iterdir() if p.name.startswith(".col.")]

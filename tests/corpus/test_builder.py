"""The out-of-core build: batches spilled to disk, checkpoints, resuming a killed build, the lock, add_rows."""
from __future__ import annotations

import json

import numpy as np
import pytest

from medretrieve.corpus.builder import CollectionBuilder, source_fingerprint
from medretrieve.corpus.chunk_table import ChunkRow
from medretrieve.corpus.collection import Collection
from medretrieve.corpus.lexical import LexicalIndex
from medretrieve.corpus.sources import read_records
from medretrieve.corpus.spill import VectorSpill, build_index

TOPICS = ["metformin lowers glucose in type 2 diabetes", "allopurinol lowers serum urate in gout",
          "inhaled corticosteroids reduce asthma exacerbations", "triptans treat acute migraine attacks",
          "statins lower LDL cholesterol and cardiovascular risk", "IL-6 drives the acute phase response"]


@pytest.fixture(scope="module")
def encoder_dir():
    from medretrieve.models.encoders import default_model_dir

    return default_model_dir()


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    with open(path, "w") as fh:
        for i in range(40):
            fh.write(json.dumps({"id": f"d{i}", "title": f"Note {i}",
                                 "sections": [{"title": "Treatment", "text": f"{TOPICS[i % 6]} (case {i})."},
                                              {"title": "Background", "text": f"{TOPICS[(i + 1) % 6]}."}]}) + "\n")
    return path


def _files(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name not in ("manifest.json", "dense.index")}


def test_a_killed_build_resumes_from_its_checkpoint_and_equals_an_uninterrupted_one(tmp_path, corpus, encoder_dir,
                                                                                      monkeypatch):
    import medretrieve.corpus.builder as bmod

    whole = Collection.build(corpus, tmp_path / "whole", encoder=encoder_dir, progress=False, chunk_batch=16)
    real, calls = bmod.embed_chunks, []

    def dies_on_the_third_batch(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # what a killed process leaves: the checkpoints written so far
        return real(*a, **k)

    monkeypatch.setattr(bmod, "embed_chunks", dies_on_the_third_batch)
    with pytest.raises(KeyboardInterrupt):
        Collection.build(corpus, tmp_path / "col", encoder=encoder_dir, progress=False, chunk_batch=16)
    monkeypatch.undo()
    work = tmp_path / ".col.build"
    assert not (tmp_path / "col").exists() and work.is_dir()  # nothing swapped in, the partial build kept
    state = json.loads((work / ".build" / "progress.json").read_text())
    assert state["rows"] == 32 and 0 < state["records"] < 40

    seen = []
    monkeypatch.setattr(bmod, "embed_chunks", lambda enc, chunks, *a, **k: seen.extend(chunks) or real(enc, chunks, *a, **k))
    col = Collection.build(corpus, tmp_path / "col", encoder=encoder_dir, progress=False, chunk_batch=16)
    assert len(seen) == len(whole) - 32  # only what the checkpoint did not cover was encoded again
    assert not work.exists() and len(col) == len(whole) == 80
    assert _files(tmp_path / "col") == _files(tmp_path / "whole")  # chunks, rows, BM25, models: byte for byte
    np.testing.assert_array_equal(col.vectors(range(80)), whole.vectors(range(80)))
    q = col.encode_queries(["gout urate"])
    for a, b in zip(col.dense.search(q, k=5), whole.dense.search(q, k=5)):
        np.testing.assert_array_equal(a, b)


def test_other_sources_or_settings_start_afresh_and_a_second_build_waits_for_none(tmp_path, corpus, encoder_dir):
    key = source_fingerprint(corpus, "auto", "skip")
    b = CollectionBuilder(tmp_path / "col", encoder_dir, source_key=key, chunk_batch=8)
    b.add_records([])
    with pytest.raises(RuntimeError, match="another build"):
        CollectionBuilder(tmp_path / "col", encoder_dir, source_key=key)
    b.close()
    b = CollectionBuilder(tmp_path / "col", encoder_dir, source_key=key, chunk_batch=8)
    b.add_records(list(read_records(corpus))[:5])
    assert b.rows == 10
    b.close()
    with CollectionBuilder(tmp_path / "col", encoder_dir, source_key=key, chunk_batch=8) as again:
        assert again.records_done == 5 and again.rows == 10
    other = CollectionBuilder(tmp_path / "col", encoder_dir, source_key=key, chunk_batch=8, M=8)
    assert other.records_done == 0 and other.rows == 0  # another M: the partial build is not this one's
    other.close()
    fresh = CollectionBuilder(tmp_path / "col", encoder_dir, source_key=None)
    assert fresh.rows == 0
    fresh.abandon()
    assert not (tmp_path / ".col.build").exists()


def test_add_rows_writes_precomputed_vectors_and_bm25_equals_the_in_memory_index(tmp_path, encoder_dir):
    b = CollectionBuilder(tmp_path / "col", encoder_dir, chunk_batch=4)
    rng = np.random.default_rng(0)
    rows = [ChunkRow(i, f"c{i}", f"doc{i // 3}", f"title {i}", "", TOPICS[i % 6], "", i % 3, f"doc{i // 3}#s0",
                     i % 4) for i in range(30)]
    vecs = rng.standard_normal((30, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    with pytest.raises(ValueError, match="numbered 0..1"):
        b.add_rows(rows[1:3], vecs[1:3])
    with pytest.raises(ValueError, match=r"vectors must be \[2, 384\]"):
        b.add_rows(rows[:2], vecs[:2, :10])
    b.add_rows(rows[:12], vecs[:12])
    b.add_rows(rows[12:], vecs[12:])
    col = Collection.open(b.finish())
    assert len(col) == 30 and col.n_documents == 10 and col.labels.tolist() == [i % 4 for i in range(30)]
    assert np.abs(col.vectors(range(30)) - vecs).max() < 0.02  # int8
    ref = LexicalIndex()
    ref.add([f"title {i} {TOPICS[i % 6]}" for i in range(30)], range(30))
    for q in ("gout urate", "asthma", "IL-6 acute phase"):
        np.testing.assert_array_equal(col.lexical.scores(q), ref.scores(q))
    ids, _ = col.dense.search(vecs[7:8], k=1)
    assert ids[0, 0] == 7


def test_the_spill_reads_back_what_was_written_and_builds_the_same_index(tmp_path):
    x = np.random.default_rng(1).standard_normal((1000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)  # inner product: each vector is its own nearest
    spill = VectorSpill(tmp_path / "v.f32", 16)
    for a in range(0, 1000, 300):
        spill.append(x[a:a + 300])
    assert len(spill) == 1000
    np.testing.assert_array_equal(np.concatenate([rows for _, rows in spill.batches(128)]), x)
    spill.truncate(900)
    assert len(spill) == 900 and spill.read(850, 900).shape == (50, 16)
    with pytest.raises(ValueError, match="out of range"):
        spill.read(0, 901)
    with pytest.raises(ValueError, match=r"\[n, 16\]"):
        spill.append(x[:3, :8])
    (tmp_path / "bad.f32").write_bytes(b"123")
    with pytest.raises(ValueError, match="whole rows"):
        VectorSpill(tmp_path / "bad.f32", 16)
    steps = []
    index = build_index(spill, "float32", M=8, ef_construction=40, batch=256, progress=lambda d, n: steps.append(d))
    assert steps == [256, 512, 768, 900] and index.element_count == 900 and index.max_elements == 900
    ids, _ = index.search(x[:5], k=1)
    assert ids[:, 0].tolist() == [0, 1, 2, 3, 4]


def test_texts_and_ids_holding_line_separators_survive_the_build_and_a_resume(tmp_path, encoder_dir):
    """U+2028 and U+0085 are line breaks to str.splitlines but not to JSONL: sections, document ids and tokens
    holding them are read back whole (sections.jsonl used to fail to open)."""
    docs = [{"id": "a\u2028b", "title": "Gout\u0085notes", "text": "Allopurinol\u2028lowers urate in gout."},
            {"id": "c", "title": "Asthma", "text": "Inhaled corticosteroids\u2029reduce exacerbations."}]
    with CollectionBuilder(tmp_path / "col", encoder_dir, source_key={"test": 1}) as b:
        b.add_records(read_records(docs[:1]))
    with CollectionBuilder(tmp_path / "col", encoder_dir, source_key={"test": 1}) as b:  # resumed: ids read back
        assert b.records_done == 1
        b.add_records(read_records(docs[1:]))
        col = Collection.open(b.finish())
    assert [r.document_id for r in col.rows] == ["a\u2028b", "c"] and col.n_documents == 2
    assert col.parent(col.rows[0].parent_id).text == "Allopurinol\u2028lowers urate in gout."
    assert col.document_rows("a\u2028b") == [0]


MEDLINE = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "medline" / "filters_sample.xml"


def test_the_out_of_core_build_writes_the_metadata_the_in_memory_writer_does(tmp_path, encoder_dir):
    records = list(read_records(MEDLINE))
    ooc = Collection.build(str(MEDLINE), tmp_path / "ooc", encoder=encoder_dir, progress=False, chunk_batch=2)
    mem = Collection.build(records[:1], tmp_path / "mem", encoder=encoder_dir, progress=False)
    mem.add(records[1:])  # written by the in-memory writer (Collection._commit), every document's metadata
    mem = Collection.open(tmp_path / "mem")
    read = lambda col: json.loads((col.directory / "rows" / "metadata.json").read_text())  # noqa: E731
    assert read(ooc) == read(mem) == [r.metadata for r in records]
    assert ooc.manifest["metadata"] == mem.manifest["metadata"] == {
        "fields": {"journal": "keyword", "language": "keywords", "mesh": "keywords", "mesh_major": "keywords",
                   "publication_date": "date", "publication_type": "keywords", "retracted": "boolean",
                   "year": "integer"}, "declared": False}
    from medretrieve.retrieval.retriever import Retriever

    for where in ["year >= 2015", "publication_type in (Review, 'Practice Guideline')", "not retracted",
                  "mesh_major == Metformin or journal == 'Diabetes care'", "retracted"]:
        hits = [{h.chunk_id for h in Retriever(c).search("metformin diabetes", k=20, where=where,
                                                           include_retracted=True).hits}
                for c in (ooc, mem)]
        assert hits[0] == hits[1], where
        assert hits[0] == {ooc.rows[int(r)].chunk_id for r in np.flatnonzero(ooc.filter_rows(where))}, where


def test_the_last_rows_of_a_document_give_its_metadata_and_declared_fields_are_kept(tmp_path, encoder_dir):
    dim = Collection.build([{"id": "x", "title": "t", "text": "metformin"}], tmp_path / "probe",
                           encoder=encoder_dir, progress=False).dim
    rows = lambda start, doc, meta: [ChunkRow(start, f"{doc}#{start}", doc, "t", "", f"text {start}", "", 0,  # noqa
                                              f"{doc}#s", 0, meta)]
    vec = np.eye(1, dim, dtype=np.float32)
    with pytest.raises(ValueError, match="unknown types"):
        CollectionBuilder(tmp_path / "bad", encoder_dir, metadata_fields={"year": "number"})
    with CollectionBuilder(tmp_path / "col", encoder_dir, metadata_fields={"year": "integer"}) as b:
        b.add_rows(rows(0, "a", {"year": 2001}), vec)
        b.add_rows(rows(1, "b", {"year": 2002}), vec)
        b.add_rows(rows(2, "a", {"year": 2003, "journal": "J"}), vec)  # a later batch's row of "a": its metadata
        b.finish()
    col = Collection.open(tmp_path / "col")
    assert json.loads((col.directory / "rows" / "metadata.json").read_text()) == [{"year": 2003, "journal": "J"},
                                                                                  {"year": 2002}]
    assert col.manifest["metadata"] == {"fields": {"year": "integer"}, "declared": True}
    assert col.filter_rows("year > 2002").tolist() == [True, False, True]
    again = col.reencode(tmp_path / "again", encoder_dir)
    assert again.manifest["metadata"] == col.manifest["metadata"]

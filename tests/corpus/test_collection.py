"""Collection: build / open / add / delete round trip, atomic writes, CLI build."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from medretrieve.corpus.chunking import ChunkingConfig
from medretrieve.corpus.collection import Collection
from medretrieve.corpus.sources import ReadReport

DOCS = [
    {"id": "d1", "title": "Type 2 diabetes", "year": 2020,
     "sections": [{"title": "Treatment", "text": "Metformin is the first-line drug for type 2 diabetes."},
                  {"title": "Symptoms", "text": "Thirst, frequent urination and tiredness are common."}]},
    {"id": "d2", "title": "Asthma", "text": "Inhaled corticosteroids reduce asthma exacerbations."},
    {"id": "d3", "title": "Gout", "sections": {"Treatment": "Allopurinol lowers serum urate in gout."}},
]


@pytest.fixture(scope="module")
def encoder_dir():
    from medretrieve.models.encoders import default_model_dir

    return default_model_dir()


def test_build_open_add_delete_round_trip(tmp_path, encoder_dir):
    out = tmp_path / "col"
    report = ReadReport()
    col = Collection.build(DOCS + [{"id": "bad"}], out, encoder=encoder_dir, progress=False, report=report)
    assert report.n_skipped == 1
    assert col.n_documents == 3 and len(col) == 4
    assert sorted(os.listdir(out)) == ["chunks.jsonl", "dense.index", "lexical", "manifest.json", "models", "rows",
                                      "sections.jsonl"]
    assert [p.name for p in tmp_path.iterdir()] == ["col"]  # no temp dirs left behind
    man = json.loads((out / "manifest.json").read_text())
    assert man["counts"] == {"documents": 3, "chunks": 4, "sections": 4, "deleted_chunks": 0}
    assert man["encoder"]["kind"] == "symmetric" and len(man["encoder"]["sha256"]) == 64
    assert man["chunking"]["max_tokens"] == ChunkingConfig().max_tokens and "numpy" in man["versions"]

    back = Collection.open(out)
    assert len(back) == 4 and back.rows[0].metadata == {"year": 2020}
    assert back.rows[0].section == "Treatment" and back.parent(back.rows[0].parent_id).text.startswith("Metformin")
    v = back.vectors([0, 1])
    assert v.shape == (2, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=0.05)
    q = back.encode_queries(["first-line drug for diabetes"])
    ids, _ = back.dense.search(q, k=1)
    assert back.rows[int(ids[0, 0])].document_id == "d1"
    assert back.lexical.search("allopurinol", k=1)[0].tolist() == [3]

    n = back.add([{"id": "d4", "title": "Migraine", "text": "Triptans treat acute migraine attacks."},
                  {"id": "d1", "text": "already there"}])
    assert n == 1
    again = Collection.open(out)
    assert again.n_documents == 4 and again.rows[-1].document_id == "d4"
    assert again.lexical.search("triptans", k=1)[0].tolist() == [4]

    assert again.document_rows("d1") == [0, 1] and again.document_rows("d4") == [4]
    assert again.document_rows("unknown") == []
    assert again.delete(["d1", "unknown"]) == 2
    assert again.document_rows("d1") == []  # live chunks only, refreshed after a delete
    assert again.delete(["d1"]) == 0
    assert again.delete("d4") == 1  # one id as a plain string, not its characters
    assert again.document_rows("d4") == []
    final = Collection.open(out)
    assert final.n_documents == 2 and len(final) == 2
    assert not final.alive[0] and not final.alive[1]
    assert final.lexical.search("metformin", k=3)[0].size == 0
    assert final.lexical.search("triptans", k=3)[0].size == 0
    ids, _ = final.dense.search(final.encode_queries(["metformin diabetes"]), k=5)
    assert not set(ids[0].tolist()) & {0, 1}
    assert "d1#s0" not in final.sections
    assert json.loads((out / "manifest.json").read_text())["counts"]["deleted_chunks"] == 3


def test_encoder_threads(tmp_path, encoder_dir):
    out = tmp_path / "col"
    Collection.build(DOCS, out, encoder=encoder_dir, progress=False)
    one = Collection.open(out, encoder_threads=1)
    assert one.query_encoder()._session.get_session_options().intra_op_num_threads == 1
    assert one.article_encoder()._session.get_session_options().intra_op_num_threads == 1


def test_atomic_build_leaves_nothing_on_failure(tmp_path, encoder_dir, monkeypatch):
    import medretrieve.corpus.builder as bmod

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(bmod.BM25Matrix, "fit_ids", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        Collection.build(DOCS, tmp_path / "col", encoder=encoder_dir, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_failed_update_keeps_the_old_collection(tmp_path, encoder_dir, monkeypatch):
    col = Collection.build(DOCS, tmp_path / "col", encoder=encoder_dir, progress=False)
    import medretrieve.corpus.collection as cmod

    monkeypatch.setattr(cmod.LexicalIndex, "save", lambda *a, **k: (_ for _ in ()).throw(OSError("no space")))
    with pytest.raises(OSError):
        col.add([{"id": "d9", "text": "New text about aspirin."}])
    monkeypatch.undo()
    assert Collection.open(tmp_path / "col").n_documents == 3
    assert [p.name for p in tmp_path.iterdir()] == ["col"]


def test_build_errors(tmp_path, encoder_dir):
    Collection.build(DOCS, tmp_path / "col", encoder=encoder_dir, progress=False)
    with pytest.raises(FileExistsError, match="overwrite"):
        Collection.build(DOCS, tmp_path / "col", encoder=encoder_dir, progress=False)
    col = Collection.build(DOCS[:1], tmp_path / "col", encoder=encoder_dir, progress=False, overwrite=True)
    assert Collection.open(tmp_path / "col").n_documents == 1 == col.n_documents
    with pytest.raises(ValueError, match="no readable records"):
        Collection.build([{"id": "x"}], tmp_path / "empty", encoder=encoder_dir, progress=False)
    with pytest.raises(ValueError, match="dtype"):
        Collection.build(DOCS, tmp_path / "c2", encoder=encoder_dir, dtype="fp16", progress=False)
    with pytest.raises(FileNotFoundError):
        Collection.build(DOCS, tmp_path / "c3", encoder=tmp_path / "no-model", progress=False)
    with pytest.raises(FileNotFoundError, match="not a medretrieve collection"):
        Collection.open(tmp_path)
    (tmp_path / "bogus").mkdir()
    (tmp_path / "bogus" / "manifest.json").write_text('{"format": "x"}')
    with pytest.raises(ValueError, match="unknown collection format"):
        Collection.open(tmp_path / "bogus")


def test_cli_build_and_search(tmp_path, encoder_dir, capsys):
    from medretrieve.cli import main

    src = tmp_path / "corpus.jsonl"
    src.write_text("\n".join(json.dumps(d) for d in DOCS) + "\n{broken\n")
    out = tmp_path / "col"
    assert main(["build", str(src), str(out), "--encoder", str(encoder_dir), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "3 documents" in text and "1 malformed skipped" in text
    assert main(["build", str(src), str(out), "--encoder", str(encoder_dir), "--quiet"]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["search", str(out), "What lowers urate in gout?", "--json", "--k", "2"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["hits"][0]["document_id"] == "d3" and len(res["hits"]) == 2
    assert main(["search", str(out), "gout", "--k", "1"]) == 0
    assert "d3" in capsys.readouterr().out


def test_collection_indexed_by_an_older_tokenizer_is_retokenized_on_open(tmp_path, encoder_dir):
    from medretrieve.corpus.lexical import TOKENIZER_VERSION, LexicalIndex

    docs = DOCS + [{"id": "d4", "title": "HAM-TSP", "text": "Mogamulizumab (anti-CCR4) was tested in HAM-TSP."}]
    col = Collection.build(docs, tmp_path / "col", encoder=encoder_dir, progress=False)
    expected = col.lexical.search("CCR4", k=3)[0].tolist()
    assert [col.rows[i].document_id for i in expected] == ["d4"]
    # rewrite the lexical index as the first medretrieve wrote it: one JSON file, no tokenizer version, no "ccr4"
    lex = tmp_path / "col" / "lexical"
    old = {"format": "medretrieve-lexical-1", "stem": True, "remove_stopwords": True, "k1": 1.5, "b": 0.75,
           "ids": [r.row for r in col.rows],
           "tokens": [[t for t in col.lexical.tokens_of(r.row) if t != "ccr4"] for r in col.rows]}
    shutil.rmtree(lex)
    lex.mkdir()
    (lex / LexicalIndex.FILE).write_text(json.dumps(old))
    manifest = json.loads((tmp_path / "col" / "manifest.json").read_text())
    del manifest["files"]  # as the first collections were written: no file digests
    (tmp_path / "col" / "manifest.json").write_text(json.dumps(manifest))
    assert LexicalIndex.load(lex).search("CCR4", k=3)[0].size == 0
    reopened = Collection.open(tmp_path / "col")
    assert reopened.lexical.tokenizer_version == TOKENIZER_VERSION
    assert reopened.lexical.search("CCR4", k=3)[0].tolist() == expected
    assert [reopened.lexical.tokens_of(r.row) for r in col.rows] == [col.lexical.tokens_of(r.row) for r in col.rows]


def test_reencode_writes_a_new_collection_and_leaves_the_old_one(tmp_path, encoder_dir):
    col = Collection.build(DOCS, tmp_path / "col", encoder=encoder_dir, progress=False)
    col.delete("d2")
    old = Collection.open(tmp_path / "col")
    new = old.reencode(tmp_path / "again", encoder_dir)
    live = [r for r in old.rows if not r.deleted]
    assert [r.chunk_id for r in new.rows] == [r.chunk_id for r in live] and len(new) == len(old) == 3
    assert [r.text for r in new.rows] == [r.text for r in live]
    assert new.parent(new.rows[0].parent_id).text == old.parent(live[0].parent_id).text
    # the same model gives the same vectors (up to int8 rounding), under the new row numbers
    assert np.allclose(new.vectors(list(range(3))), old.vectors([r.row for r in live]), atol=0.02)
    assert new.lexical.search("allopurinol", k=1)[0].tolist() == [2]
    assert new.manifest["index"] == old.manifest["index"]
    with pytest.raises(ValueError, match="own directory"):
        old.reencode(tmp_path / "col", encoder_dir, overwrite=True)
    with pytest.raises(FileExistsError):
        old.reencode(tmp_path / "again", encoder_dir)
    assert len(Collection.open(tmp_path / "col")) == 3 and len(Collection.open(tmp_path / "again")) == 3

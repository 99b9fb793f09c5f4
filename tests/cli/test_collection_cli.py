"""``medretrieve collection add | delete | check``: updates in place, and a whole check that names the damage."""
from __future__ import annotations

import json
import shutil

import pytest

from medretrieve.cli import main
from medretrieve.corpus.collection import Collection


@pytest.fixture
def col(demo_collection_dir, tmp_path):
    out = tmp_path / "col"
    shutil.copytree(demo_collection_dir, out)
    return out


def test_add_delete_and_check(col, tmp_path, capsys):
    before = Collection.open(col)
    src = tmp_path / "new.jsonl"
    src.write_text(json.dumps({"id": "n1", "title": "Gout", "text": "Colchicine treats acute gout flares."}) + "\n"
                   + json.dumps({"id": before.rows[0].document_id, "text": "already there"}) + "\n")
    assert main(["collection", "add", str(col), str(src)]) == 0
    out = capsys.readouterr().out
    assert "(1 documents)" in out and "1 malformed skipped" in out and "already in the collection" in out
    assert main(["collection", "delete", str(col), "n1", "no-such-id"]) == 0
    assert "(1 of 2 ids found)" in capsys.readouterr().out
    after = Collection.open(col)
    assert after.n_documents == before.n_documents and len(after) == len(before)
    assert main(["collection", "check", str(col)]) == 0
    assert "sound (every file matches its sha256" in capsys.readouterr().out


@pytest.mark.parametrize("digests", [True, False])
def test_check_names_a_damaged_record(col, capsys, digests):
    data = bytearray((col / "chunks.jsonl").read_bytes())
    at = len(data) - 40
    data[at] = 0xFF
    (col / "chunks.jsonl").write_bytes(bytes(data))
    args = ["collection", "check", str(col)] + ([] if digests else ["--no-digests"])
    assert main(args) == 2
    err = capsys.readouterr().err
    last_line = data.count(b"\n")
    assert "chunks.jsonl" in err and ("sha256" in err if digests else f"line {last_line} " in err)


def test_add_with_errors_raise_names_the_line_and_writes_nothing(col, tmp_path, capsys):
    src = tmp_path / "bad.jsonl"
    src.write_bytes(b'{"id": "ok", "text": "fine"}\n\x00\xff binary\n')
    before = Collection.open(col).n_documents
    assert main(["collection", "add", str(col), str(src), "--errors", "raise"]) == 2
    assert "bad.jsonl:2: not UTF-8" in capsys.readouterr().err
    assert Collection.open(col).n_documents == before
    assert not [p for p in col.parent.iterdir() if p.name.startswith(".col.")]


MEDLINE = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "medline" / "filters_sample.xml"


def test_metadata_lists_and_declares_the_fields(tmp_path, capsys):
    col = tmp_path / "med"
    assert main(["build", str(MEDLINE), str(col), "--quiet", "--declare", "year=integer,journal=keyword",
                 "--declare", "retracted=boolean"]) == 0
    capsys.readouterr()
    assert Collection.open(col).manifest["metadata"] == {
        "fields": {"year": "integer", "journal": "keyword", "retracted": "boolean"}, "declared": True}
    assert main(["collection", "metadata", str(col), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["declared"] and listed["documents"] == 5
    assert listed["fields"] == {n: {"type": t, "documents": 5}
                                for n, t in (("journal", "keyword"), ("retracted", "boolean"), ("year", "integer"))}
    assert main(["collection", "metadata", str(col), "--declare", "publication_type=keywords,year=date"]) == 0
    out = capsys.readouterr().out
    assert "2 metadata fields (declared), 5 documents" in out
    assert [line.split() for line in out.splitlines()[2:]] == [["publication_type", "keywords", "5"],
                                                               ["year", "date", "5"]]
    assert Collection.open(col).filter_rows("year >= 2019-06").sum() > 0


@pytest.mark.parametrize("args, words", [
    (["--declare", "year=number"], "unknown types"),
    (["--declare", "year"], "'year' is not FIELD=TYPE"),
    (["--declare", "year=integer,year=float"], "field 'year' given twice"),
    (["--declare", "journal=integer,year=integer"], "journal (integer): 5 documents hold values such as"),
    (["--lenient"], "--lenient needs --declare"),
])
def test_metadata_refuses_bad_declarations_and_writes_nothing(tmp_path, capsys, args, words):
    col = tmp_path / "med"
    assert main(["build", str(MEDLINE), str(col), "--quiet"]) == 0
    before = (col / "manifest.json").read_bytes()
    assert main(["collection", "metadata", str(col)] + args) == 2
    assert words in capsys.readouterr().err
    assert (col / "manifest.json").read_bytes() == before


def test_metadata_lenient_declares_what_does_not_fit_as_missing(tmp_path, capsys):
    col = tmp_path / "med"
    assert main(["build", str(MEDLINE), str(col), "--quiet", "--declare", "year=integer,journal=float"]) == 0
    assert "note: journal is declared float, but 5 documents hold values such as 'Diabetes care'" in \
        capsys.readouterr().err  # a build declares leniently, and says so
    assert main(["collection", "metadata", str(col), "--declare", "journal=integer", "--lenient", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out.splitlines()[-1])["fields"] == {"journal": {"type": "integer", "documents": 0}}
    assert "note: journal is declared integer" in out.err


def test_metadata_of_a_missing_collection_and_a_sharded_declare_are_usage_errors(tmp_path, capsys):
    assert main(["collection", "metadata", str(tmp_path / "nope")]) == 2
    assert "not a medretrieve collection" in capsys.readouterr().err
    # a sharded build takes --declare (tests/distributed), and refuses a malformed one before it starts Ray
    assert main(["build", str(MEDLINE), str(tmp_path / "s"), "--shards", "2", "--declare", "year=colour"]) == 2
    assert "colour" in capsys.readouterr().err and not (tmp_path / "s").exists()

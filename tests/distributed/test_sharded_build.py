"""The sharded build on Ray Data: each shard equals a single-machine build of its documents; the CLI; the
single-machine path never imports Ray."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("ray")

from sharded_data import QUESTIONS, TOPICS, encoder_dir, ray_cluster, sharded_corpus  # noqa: E402,F401

from medretrieve.cli import main  # noqa: E402
from medretrieve.corpus.collection import Collection  # noqa: E402
from medretrieve.corpus.sources import ReadReport, read_records  # noqa: E402
from medretrieve.distributed import ShardedRetriever, build_sharded, shard_of  # noqa: E402

SAME_FILES = ("chunks.jsonl", "sections.jsonl", "rows/offsets.npy", "rows/labels.npy", "rows/document.npy",
              "rows/documents.json", "lexical/tokens.npy", "lexical/token_offsets.npy", "lexical/vocab.json",
              "lexical/matrix/data.npy", "lexical/matrix/indices.npy", "lexical/matrix/indptr.npy")


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    """Two JSONL files: long sections (several chunks each), a document repeated across the files, a bad line."""
    d = tmp_path_factory.mktemp("corpus")
    for f in range(2):
        with open(d / f"part{f}.jsonl", "w") as fh:
            for i in range(f * 20, f * 20 + 22):
                doc = {"id": f"d{i % 40}", "title": f"Report {i}", "year": 1990 + i,
                       "sections": [{"title": "Treatment", "text": " ".join(f"{TOPICS[(i + j) % 8]} (cohort {j})."
                                                                             for j in range(1 + i % 7))}]}
                fh.write(json.dumps(doc) + "\n")
            fh.write('{"title": "no id"}\n')
    return d


def test_each_shard_equals_a_single_machine_build_of_its_documents(ray_cluster, corpus_files, encoder_dir, tmp_path):
    report = ReadReport()
    out = build_sharded(corpus_files, tmp_path / "sharded", 2, encoder_dir, chunking={"max_tokens": 40},
                        batch=16, report=report)
    manifest = json.loads((out / "shards.json").read_text())
    assert manifest["shards"] == ["shard-00000", "shard-00001"]
    single_report = ReadReport()
    records = list(read_records(corpus_files, report=single_report))
    assert report.records == len(records) == 40  # d0, d1, d20, d21 are in both files: the first copy is kept
    assert report.n_skipped == single_report.n_skipped == 6  # 2 lines without an id, 4 repeated ids
    assert manifest["counts"]["documents"] == 40
    for s in range(2):
        mine = [r for r in records if shard_of(r.id, 2) == s]
        single = Collection.build(mine, tmp_path / f"single{s}", encoder=encoder_dir, progress=False,
                                  chunking={"max_tokens": 40})
        shard_dir = out / f"shard-0000{s}"
        for name in SAME_FILES:
            assert (shard_dir / name).read_bytes() == (single.directory / name).read_bytes(), name
        shard = Collection.open(shard_dir)
        n = len(shard.rows)
        assert n == len(single.rows) > len(mine)  # several chunks per document
        np.testing.assert_array_equal(shard.vectors(range(n)), single.vectors(range(n)))
        q = single.encode_queries(["gout urate"])
        np.testing.assert_array_equal(shard.dense.search(q, k=5)[0], single.dense.search(q, k=5)[0])
    sharded = ShardedRetriever(out)  # from the manifest
    try:
        res = sharded.search(QUESTIONS[1], k=5, deadline_ms=None)
        assert res.hits and res.shards["answered"] == ["shard-00000", "shard-00001"]
    finally:
        sharded.close()
    with pytest.raises(FileExistsError, match="overwrite"):
        build_sharded(corpus_files, out, 2, encoder_dir)
    (tmp_path / "not-shards").mkdir()
    (tmp_path / "not-shards" / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a sharded build"):
        build_sharded(corpus_files, tmp_path / "not-shards", 2, encoder_dir)
    assert (tmp_path / "not-shards" / "keep.txt").read_text() == "mine"


def test_cli_builds_shards_and_the_single_machine_build_never_imports_ray(ray_cluster, corpus_files, encoder_dir,
                                                                          tmp_path, capsys):
    out = tmp_path / "cli-shards"
    assert main(["build", str(corpus_files), str(out), "--encoder", str(encoder_dir), "--shards", "3", "--quiet",
                 "--encode-batch", "32", "--declare", "year=float"]) == 0
    assert "3 shards, 40 documents" in capsys.readouterr().out
    names = json.loads((out / "shards.json").read_text())["shards"]
    assert len(names) == 3
    for name in names:  # every shard declares the types given (inferred, the years would be integers)
        assert json.loads((out / name / "manifest.json").read_text())["metadata"] == {
            "fields": {"year": "float"}, "declared": True}
    assert main(["build", str(corpus_files), str(tmp_path / "x"), "--encoder", str(encoder_dir), "--ray",
                 "auto"]) == 2
    assert "--ray needs --shards" in capsys.readouterr().err
    code = ("import sys; from medretrieve.cli import main; "
            f"rc = main(['build', {str(corpus_files)!r}, {str(tmp_path / 'single')!r}, '--encoder', "
            f"{str(encoder_dir)!r}, '--quiet']); print(rc, 'ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.stdout.strip().splitlines()[-1] == "0 False", done.stderr[-2000:]


def test_a_collection_split_into_shards_equals_shards_built_from_its_documents(ray_cluster, sharded_corpus, tmp_path):
    from medretrieve.distributed.build import split_collection

    dirs, one, _ = sharded_corpus
    out = split_collection(one, tmp_path / "split", 2, batch=7)
    assert json.loads((out / "shards.json").read_text())["shards"] == ["shard-00000", "shard-00001"]
    for built, split in zip(dirs, (out / "shard-00000", out / "shard-00001")):
        for name in ("chunks.jsonl", "rows/documents.json", "lexical/tokens.npy", "lexical/matrix/data.npy"):
            assert (split / name).read_bytes() == (built / name).read_bytes(), name
        a, b = Collection.open(built), Collection.open(split)
        assert sorted(a.sections) == sorted(b.sections)
        np.testing.assert_array_equal(a.vectors(range(len(a))), b.vectors(range(len(b))))  # float32: exact
    with pytest.raises(FileExistsError):
        split_collection(one, out, 2)
    # the types a collection declared are every shard's
    declared = tmp_path / "declared"
    shutil.copytree(one, declared)
    Collection.open(declared).declare_metadata({"title_year": "integer"})
    parts = split_collection(declared, tmp_path / "declared-split", 2)
    for name in ("shard-00000", "shard-00001"):
        assert Collection.open(parts / name).metadata_fields == {"title_year": "integer"}

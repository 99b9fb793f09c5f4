"""``medretrieve fetch-pubmed`` and ``medretrieve search --pubmed`` against a fake E-utilities server."""
from __future__ import annotations

import json

import pytest

from medretrieve.cli import main
from pubmed_server import FakeEutils

pytest.importorskip("httpx")


def test_fetch_pubmed_query_then_build(tmp_path, capsys):
    out = tmp_path / "corpus.jsonl"
    with FakeEutils() as srv:
        args = ["fetch-pubmed", "aspirin platelets", str(out), "--pubmed-url", srv.base_url, "--retmax", "60",
                "--pubmed-cache", str(tmp_path / "cache"), "--email", "dev@example.org", "--mindate", "2010",
                "--maxdate", "2024"]
        assert main(args) == 0
        assert "3 records from 3 PMIDs" in capsys.readouterr().out
        assert srv.requests[0]["params"]["mindate"] == "2010" and srv.requests[0]["params"]["email"] == "dev@example.org"
        assert main(args) == 2  # exists
        assert "exists" in capsys.readouterr().err
        assert main(args + ["--overwrite"]) == 0  # from the cache: no new request
        assert srv.count() == 2
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["30000001", "30000002", "30000003"]
    assert lines[0]["sections"][1] == {"title": "results", "text": lines[0]["sections"][1]["text"],
                                       "source_section": "abstract",
                                       "source_offset": len(lines[0]["sections"][0]["text"]) + 1}
    col = tmp_path / "col"
    assert main(["build", str(out), str(col), "--encoder", "default", "--quiet"]) == 0
    from medretrieve.corpus.collection import Collection

    built = Collection.open(col)
    assert built.n_documents == 3
    part = built.parent(built.rows[0].parent_id)
    assert (part.source_section, part.source_offset) == ("abstract", 0)


def test_fetch_pubmed_from_a_pmid_file(tmp_path, capsys):
    pmids = tmp_path / "pmids.txt"
    pmids.write_text("# my list\n30000004\nhttp://www.ncbi.nlm.nih.gov/pubmed/30000005\n\n99999999\n")
    with FakeEutils() as srv:
        base = ["--pubmed-url", srv.base_url, "--pubmed-cache", "none"]
        assert main(["fetch-pubmed", "--pmids", str(pmids), str(tmp_path / "o.jsonl")] + base) == 0
        assert "2 records from 3 PMIDs (1 not in PubMed" in capsys.readouterr().out
        assert main(["fetch-pubmed", "q", str(tmp_path / "o2.jsonl"), "--pmids", str(pmids)] + base) == 2
        assert "only OUT.jsonl" in capsys.readouterr().err
        pmids.write_text("abc\n")
        assert main(["fetch-pubmed", "--pmids", str(pmids), str(tmp_path / "o3.jsonl")] + base) == 2
        assert "not a PMID" in capsys.readouterr().err


def test_search_pubmed_alone_and_with_a_collection(tmp_path, capsys):
    with FakeEutils() as srv:
        common = ["--pubmed", "--pubmed-url", srv.base_url, "--pubmed-cache", str(tmp_path / "c"),
                  "--deadline-ms", "none", "--k", "2"]
        assert main(["search", "Does aspirin inhibit platelet aggregation?", "--encoder", "default", "--json"]
                    + common) == 0
        res = json.loads(capsys.readouterr().out)
        assert res["hits"][0]["document_id"] == "30000001" and res["hits"][0]["span"]["beginSection"] == "abstract"
        assert [s["name"] for s in res["stages"]][:5] == ["classify", "local", "pubmed_search", "pubmed_fetch",
                                                           "pool"]
        assert main(["search", "Does aspirin inhibit platelets?"] + common) == 2
        assert "--encoder" in capsys.readouterr().err
        corpus = tmp_path / "local.jsonl"
        corpus.write_text(json.dumps({"id": "L1", "title": "Gout", "text": "Colchicine treats gout flares."}) + "\n")
        assert main(["build", str(corpus), str(tmp_path / "col"), "--encoder", "default", "--quiet"]) == 0
        capsys.readouterr()
        assert main(["search", str(tmp_path / "col"), "Does aspirin inhibit platelet aggregation?"] + common) == 0
        out = capsys.readouterr().out
        assert "30000001" in out and "local" in out
    assert main(["search", "only a question"]) == 2


def test_search_pubmed_options_reach_the_client_and_the_online_stage(tmp_path, capsys):
    question = "Does aspirin inhibit platelet aggregation in diabetes?"  # no fixture article holds every word
    with FakeEutils(boolean=True) as srv:
        common = ["search", question, "--encoder", "default", "--json", "--pubmed", "--pubmed-url", srv.base_url,
                  "--pubmed-cache", "none", "--deadline-ms", "none"]
        assert main(common + ["--pubmed-queries", "1", "--no-pubmed-recovery"]) == 0
        res = json.loads(capsys.readouterr().out)
        stages = {s["name"]: s for s in res["stages"]}
        assert srv.count("esearch.fcgi") == 1 and not res["hits"]
        assert stages["pubmed_recovery"]["reason"] == "disabled"
        assert main(common + ["--pubmed-queries", "1"]) == 0  # recovery on (the default): relaxed terms
        res = json.loads(capsys.readouterr().out)
        assert srv.count("esearch.fcgi") == 1 + 1 + 2 and res["hits"]
        assert main(common + ["--pubmed-max-reply-mb", "0.001", "--pubmed-retries", "0"]) == 0
        res = json.loads(capsys.readouterr().out)
        fetch = [s for s in res["stages"] if s["name"] == "pubmed_fetch"][0]
        assert "PubMedTooLarge" in fetch["reason"] and "max_reply_bytes=1048" in fetch["reason"]
        assert main(common + ["--pubmed-timeout-s", "0"]) == 2
        assert "timeout_s" in capsys.readouterr().err


def test_fetch_pubmed_where_narrows_the_query_and_leaves_out_failing_records(tmp_path, capsys):
    out = tmp_path / "corpus.jsonl"
    with FakeEutils() as srv:  # its esearch ignores the tags: the 2015 article comes back and is left out
        base = ["--pubmed-url", srv.base_url, "--pubmed-cache", "none"]
        assert main(["fetch-pubmed", "aspirin platelets", str(out), "--where", "year >= 2016 and not retracted"]
                    + base) == 0
        assert "5 records from 6 PMIDs (0 not in PubMed, 0 malformed skipped, 1 failed --where)" in \
            capsys.readouterr().out
        assert srv.requests[0]["params"]["term"] == "(aspirin platelets) AND 2016:3000[dp] NOT retracted publication[pt]"
        n = srv.count()
        assert main(["fetch-pubmed", "aspirin", str(tmp_path / "x.jsonl"), "--where", "yeer > 1"] + base) == 2
        assert "unknown field 'yeer'" in capsys.readouterr().err and srv.count() == n  # refused before asking
    years = {x["id"]: x["year"] for x in map(json.loads, out.read_text().splitlines())}
    assert len(years) == 5 and "30000002" not in years and min(years.values()) >= 2016  # 30000002: 2015

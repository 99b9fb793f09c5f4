"""Corpus readers: JSONL, MedRAG, BioASQ, MEDLINE XML; malformed records reported with their place."""
from __future__ import annotations

import gzip
import json

import pytest

from medretrieve.corpus.sources import (
    ReadReport,
    Record,
    SourceError,
    detect_format,
    pmid_from_url,
    read_records,
    record_from_dict,
)


def _write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_sections_metadata_and_malformed_lines(tmp_path):
    p = _write_lines(tmp_path / "c.jsonl", [
        json.dumps({"id": "a", "title": "A", "text": "Body of a.", "year": 2020, "journal": "J"}),
        "{not json",
        json.dumps({"title": "no id", "text": "x"}),
        json.dumps({"id": "c", "title": "C", "sections": [{"title": "Methods", "text": "m."},
                                                          {"name": "Results", "text": "r."}]}),
        json.dumps({"id": "d", "sections": {"Treatment": "t.", "Plan": "p."}}),
        json.dumps({"id": "e", "title": "E", "text": "   "}),
        "",
        json.dumps({"id": "a", "text": "duplicate"}),
    ])
    report = ReadReport()
    recs = list(read_records(p, report=report))
    assert [r.id for r in recs] == ["a", "c", "d"]
    assert recs[0].metadata == {"year": 2020, "journal": "J"}
    assert [s.title for s in recs[1].sections] == ["Methods", "Results"]
    assert [(s.title, s.text) for s in recs[2].sections] == [("Treatment", "t."), ("Plan", "p.")]
    assert report.records == 3 and report.n_skipped == 4
    wheres = [w for w, _ in report.skipped]
    assert wheres[0].endswith("c.jsonl:2") and "invalid JSON" in report.skipped[0][1]
    assert wheres[1].endswith(":3") and "missing 'id'" in report.skipped[1][1]
    assert wheres[2].endswith(":6") and "no text" in report.skipped[2][1]
    assert "duplicate" in report.skipped[3][1]


def test_errors_raise_names_the_line(tmp_path):
    p = _write_lines(tmp_path / "c.jsonl", [json.dumps({"id": 1, "text": "ok"}), "[1, 2]"])
    with pytest.raises(SourceError, match=r"c\.jsonl:2: expected a JSON object"):
        list(read_records(p, errors="raise"))
    with pytest.raises(ValueError, match="errors must be"):
        list(read_records(p, errors="ignore"))
    with pytest.raises(ValueError, match="format must be"):
        list(read_records(p, format="csv"))


def test_medrag_snippets(tmp_path):
    p = _write_lines(tmp_path / "textbook.jsonl", [
        json.dumps({"id": "Anatomy_0", "title": "Anatomy", "content": "The heart has four chambers.",
                    "contents": "Anatomy. The heart has four chambers."}),
        json.dumps({"id": "Anatomy_1", "title": "Anatomy", "contents": "no content field"}),
    ])
    assert detect_format(p) == "medrag"
    report = ReadReport()
    recs = list(read_records(p, format="medrag", report=report))
    assert len(recs) == 1 and recs[0].text == "The heart has four chambers." and recs[0].metadata == {}
    assert report.n_skipped == 1 and "content" in report.skipped[0][1]


def test_records_from_python_objects():
    recs = list(read_records([{"id": "x", "text": "t"}, Record("y", "", [])], errors="skip"))
    assert [r.id for r in recs] == ["x", "y"]
    with pytest.raises(SourceError, match="record 1"):
        list(read_records([{"id": "x", "text": "t"}, {"id": 3.5, "text": "t"}], errors="raise"))
    with pytest.raises(TypeError):
        list(read_records({"id": "x"}))
    with pytest.raises(SourceError, match="sections"):
        record_from_dict({"id": "x", "sections": "not a list"})


def test_bioasq_documents_from_snippets(tmp_path):
    data = {"questions": [
        {"body": "q1", "type": "factoid", "documents": ["http://www.ncbi.nlm.nih.gov/pubmed/111"],
         "snippets": [
             {"text": "A title.", "document": "http://www.ncbi.nlm.nih.gov/pubmed/111", "beginSection": "title"},
             {"text": "First  snippet.", "document": "http://www.ncbi.nlm.nih.gov/pubmed/111",
              "beginSection": "abstract"},
             {"text": "Other doc.", "document": "http://www.ncbi.nlm.nih.gov/pubmed/222",
              "beginSection": "sections.0"},
             {"text": "bad url", "document": "http://example.org/none"}]},
        {"body": "q2", "snippets": [
            {"text": "First snippet.", "document": "http://www.ncbi.nlm.nih.gov/pubmed/111",
             "beginSection": "abstract"}]},
    ]}
    p = tmp_path / "7B9_golden.json"
    p.write_text(json.dumps(data))
    assert detect_format(p) == "bioasq"
    report = ReadReport()
    recs = {r.id: r for r in read_records(p, report=report)}
    assert set(recs) == {"111", "222"}
    assert recs["111"].title == "A title."
    assert [(s.title, s.text) for s in recs["111"].sections] == [("title", "A title."),
                                                                 ("abstract", "First snippet.")]
    assert report.n_skipped == 1 and "snippet 3" in report.skipped[0][0]
    assert pmid_from_url("https://pubmed.ncbi.nlm.nih.gov/28293123/") == "28293123"
    with pytest.raises(ValueError):
        pmid_from_url("http://example.org/x")


def test_bioasq_snippet_keeps_the_text_its_gold_offset_counts(tmp_path):
    """A gold snippet that starts with a space (or holds a no-break space) keeps it: chunk spans found in the
    section are then in the article's coordinates (normalising it first shifted them by one)."""
    from medretrieve.corpus.chunking import chunk_record

    raw = " eating a diet high\u00a0 in lipid is associated with cancer"
    data = {"questions": [{"body": "q", "type": "summary", "snippets": [
        {"text": raw, "document": "http://www.ncbi.nlm.nih.gov/pubmed/7", "beginSection": "abstract",
         "endSection": "abstract", "offsetInBeginSection": 1721, "offsetInEndSection": 1721 + len(raw)}]}]}
    p = tmp_path / "12B9_golden.json"
    p.write_text(json.dumps(data))
    (rec,) = read_records(p)
    assert rec.sections[0].text == raw and rec.sections[0].source_offset == 1721
    (part,) = chunk_record(rec)[1]
    assert part.source_offset == 1722 and part.text == raw.strip()  # the stripped text starts one later


def test_real_bioasq_files(bioasq_files):
    report = ReadReport()
    recs = list(read_records(bioasq_files[:1], report=report))
    assert len(recs) > 100
    assert all(r.id.isdigit() and r.sections for r in recs)
    assert report.n_skipped == 0


MEDLINE = """<?xml version="1.0"?>
<PubmedArticleSet xmlns="http://example.org/ns">
 <PubmedArticle><MedlineCitation Status="MEDLINE">
  <PMID Version="1">1001</PMID>
  <Article><Journal><Title>Journal of Tests</Title><JournalIssue><PubDate><Year>2019</Year></PubDate>
   </JournalIssue></Journal>
   <ArticleTitle>Aspirin in <i>primary</i> prevention.</ArticleTitle>
   <Abstract>
    <AbstractText Label="BACKGROUND" NlmCategory="BACKGROUND">Aspirin is widely used.</AbstractText>
    <AbstractText Label="METHODS" NlmCategory="METHODS">We ran a trial.</AbstractText>
    <AbstractText NlmCategory="UNASSIGNED">Free text.</AbstractText>
   </Abstract></Article>
 </MedlineCitation></PubmedArticle>
 <PubmedArticle><MedlineCitation><Article><ArticleTitle>No PMID</ArticleTitle></Article></MedlineCitation>
 </PubmedArticle>
 <PubmedArticle><MedlineCitation><PMID>1003</PMID><Article><ArticleTitle>Title only</ArticleTitle>
 </Article></MedlineCitation></PubmedArticle>
</PubmedArticleSet>
"""


def test_medline_xml_structured_abstract_namespace_and_gzip(tmp_path):
    p = tmp_path / "pubmed.xml.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        fh.write(MEDLINE)
    assert detect_format(p) == "medline"
    report = ReadReport()
    recs = list(read_records(p, report=report))
    assert [r.id for r in recs] == ["1001", "1003"]
    a = recs[0]
    assert a.title == "Aspirin in primary prevention."
    assert [(s.title, s.text) for s in a.sections] == [("background", "Aspirin is widely used."),
                                                       ("methods", "We ran a trial."), ("abstract", "Free text.")]
    assert a.metadata == {"source": "medline", "journal": "Journal of Tests", "year": 2019,
                          "publication_date": "2019", "retracted": False}
    assert recs[1].sections[0].title == "title"
    assert report.n_skipped == 1 and "record 2" in report.skipped[0][0] and "PMID" in report.skipped[0][1]


def test_medline_truncated_xml_is_reported(tmp_path):
    p = tmp_path / "broken.xml"
    p.write_text(MEDLINE[: MEDLINE.index("<PubmedArticle><MedlineCitation><Article>")] + "<Pubmed")
    report = ReadReport()
    recs = list(read_records(p, report=report))
    assert [r.id for r in recs] == ["1001"]
    assert "XML parse error" in report.skipped[-1][1]
    with pytest.raises(SourceError, match="XML parse error"):
        list(read_records(p, errors="raise"))


def test_missing_path_and_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(read_records(tmp_path / "nope.jsonl"))
    _write_lines(tmp_path / "a.jsonl", [json.dumps({"id": "1", "text": "one"})])
    _write_lines(tmp_path / "b.jsonl", [json.dumps({"id": "2", "text": "two"})])
    assert [r.id for r in read_records(tmp_path)] == ["1", "2"]


def test_bioasq_documents_shared_by_several_files_are_merged(tmp_path):
    def golden(name, snippets):
        q = {"id": name, "body": "q?", "type": "summary", "documents": [],
             "snippets": [{"text": t, "document": "http://www.ncbi.nlm.nih.gov/pubmed/123",
                           "beginSection": "abstract"} for t in snippets]}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"questions": [q]}))
        return path

    a = golden("a", ["First snippet.", "Shared snippet."])
    b = golden("b", ["Shared snippet.", "Second file's snippet."])
    report = ReadReport()
    records = list(read_records([a, b], report=report))
    assert [r.id for r in records] == ["123"]
    assert [s.text for s in records[0].sections] == ["First snippet.", "Shared snippet.", "Second file's snippet."]
    assert report.skipped == [] and report.records == 1

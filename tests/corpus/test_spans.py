"""Where a hit's text sits in its source (issue 44, finding 7): only a source that knows its sections gives a
span. A JSONL or MedRAG document, plain text, has none (it is no abstract), while MEDLINE records and BioASQ
golden files keep theirs; a collection built before that rule, which stored the "abstract" guess, opens and
shows no span either, unless its documents came from MEDLINE or BioASQ."""
from __future__ import annotations

import json

import pytest

from medretrieve.corpus.collection import Collection
from medretrieve.corpus.spans import chunk_span, guessed_layout, source_layout
from medretrieve.corpus.sources import Section
from medretrieve.records import Hit
from medretrieve.retrieval.retriever import Retriever

OVERVIEW = "Gout is an inflammatory arthritis caused by urate crystals deposited in joints."
TREATMENT = "Allopurinol and febuxostat lower serum urate; colchicine treats acute flares."
MEDLINE = """<?xml version="1.0"?>
<PubmedArticleSet><PubmedArticle><MedlineCitation><PMID>31000001</PMID><Article>
<ArticleTitle>Urate lowering in gout</ArticleTitle>
<Abstract><AbstractText Label="BACKGROUND">{0}</AbstractText><AbstractText Label="RESULTS">{1}</AbstractText>
</Abstract></Article></MedlineCitation></PubmedArticle></PubmedArticleSet>
""".format(OVERVIEW, TREATMENT)


@pytest.fixture(scope="module")
def encoder_dir():
    from medretrieve.models.encoders import default_model_dir

    return default_model_dir()


def _build(records, out, encoder_dir, **options):
    return Collection.build(records, out, encoder=encoder_dir, progress=False, **options)


def _spans(col):
    return {col.rows[i].section: chunk_span(col, i) for i in range(len(col))}


def _guessed(**metadata):
    # what a build before the rule stored for a two-section JSONL document: both sections "abstract", joined
    sections = [{"title": "Overview", "text": OVERVIEW, "source_section": "abstract", "source_offset": 0},
                {"title": "Treatment", "text": TREATMENT, "source_section": "abstract",
                 "source_offset": len(OVERVIEW) + 1}]
    return {"id": "doc-1", "title": "Gout", "sections": sections, **metadata}


def test_a_source_without_a_layout_gives_no_span(tmp_path, encoder_dir):
    doc = {"id": "doc-1", "title": "Gout", "sections": [{"title": "Overview", "text": OVERVIEW},
                                                       {"title": "Treatment", "text": TREATMENT}]}
    assert source_layout([Section("Overview", OVERVIEW), Section("title", "Gout")]) == [("", None), ("", None)]
    col = _build([doc, {"id": "doc-2", "text": TREATMENT}], tmp_path / "col", encoder_dir)
    assert len(col) >= 3 and all(span is None for span in _spans(col).values())
    hit = Retriever(col).search("Which drugs lower serum urate in gout?", k=3, deadline_ms=None).hits[0]
    assert hit.span is None and hit.to_dict()["span"] is None
    assert Hit.from_dict(json.loads(json.dumps(hit.to_dict()))).span is None  # as HTTP carries it


def test_medline_and_bioasq_keep_their_spans(tmp_path, encoder_dir):
    (tmp_path / "m.xml").write_text(MEDLINE, encoding="utf-8")
    spans = _spans(_build([str(tmp_path / "m.xml")], tmp_path / "medline", encoder_dir))
    assert spans["background"].to_bioasq() == {"beginSection": "abstract", "endSection": "abstract",
                                               "offsetInBeginSection": 0, "offsetInEndSection": len(OVERVIEW)}
    assert spans["results"].section == "abstract" and spans["results"].begin == len(OVERVIEW) + 1
    assert spans["results"].text == TREATMENT

    # a BioASQ snippet keeps its section, at its gold offset or (an unusable -1) within its own text
    golden = {"questions": [{"id": "q", "body": "?", "type": "summary", "snippets": [
        {"document": "http://www.ncbi.nlm.nih.gov/pubmed/31000002", "text": TREATMENT, "beginSection": "abstract",
         "endSection": "abstract", "offsetInBeginSection": 42, "offsetInEndSection": 42 + len(TREATMENT)},
        {"document": "http://www.ncbi.nlm.nih.gov/pubmed/31000003", "text": "Gout today", "beginSection": "title",
         "endSection": "title", "offsetInBeginSection": -1, "offsetInEndSection": -1}]}]}
    (tmp_path / "g.json").write_text(json.dumps(golden), encoding="utf-8")
    col = _build([str(tmp_path / "g.json")], tmp_path / "bioasq", encoder_dir, format="bioasq")
    by_doc = {col.rows[i].document_id: chunk_span(col, i) for i in range(len(col))}
    assert (by_doc["31000002"].section, by_doc["31000002"].begin, by_doc["31000002"].in_source) == \
        ("abstract", 42, True)
    assert (by_doc["31000003"].section, by_doc["31000003"].begin, by_doc["31000003"].in_source) == \
        ("title", 0, False)


def test_a_stored_guess_of_an_older_build_shows_no_span(tmp_path, encoder_dir):
    # an older build stored exactly these fields for a document its source gave no layout
    old = _build([_guessed()], tmp_path / "old", encoder_dir)
    parts = [old.parent(old.rows[i].parent_id) for i in range(len(old))]
    assert [(p.source_section, p.source_offset) for p in parts] == guessed_layout(parts)
    assert all(span is None for span in _spans(Collection.open(tmp_path / "old")).values())
    # the same stored layout on a MEDLINE record (a PubMed fetch written as JSONL) is the source's own: kept
    kept = _spans(_build([_guessed(source="medline")], tmp_path / "medline", encoder_dir))
    assert kept["Treatment"].to_bioasq()["offsetInBeginSection"] == len(OVERVIEW) + 1
    # and a layout a JSONL source gave that is no guess is kept too
    own = _guessed()
    own["sections"][1]["source_offset"] = 500
    assert _spans(_build([own], tmp_path / "own", encoder_dir))["Treatment"].begin == 500
